/* SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0 */
/*
 * libkmodsyms' private header (not installed): what the stages of a load
 * share -- the handle (what queries read), the load context (struct
 * kmsi_load: what only the load's stages read), the dtrace_syms tables'
 * layout, the kallsyms line rows and the index's pieces, the small helpers
 * reading them, and each stage's entry points.  The stages, one file each, in the order a load
 * runs them (kms_load.c):
 *
 *   inputs       kms_format.c (dtrace_syms), kms_kallsyms.c (kallsyms),
 *                kms_alloc.c (their memory)
 *   placement    kms_place.c (anchors -> where each section is)
 *   attribution  kms_attr.c (each kallsyms line -> its dtrace_syms entry)
 *   index        kms_index.c (the address space cut into answered pieces)
 *   queries      kms_query.c (the public kms_resolve(), kms_lookup(), ...)
 *
 * kms_sort.c sorts for several of them (and holds the majority vote of
 * placement, of loaded modules and of the build's search); kms_modules.c and the files kms_ko.h
 * names read loaded modules' .ko files.  The functions shared between files are named
 * kmsi_*: hidden (the shared library exports only libkmodsyms.map's
 * kms_*), and apart from the public API's names in the static library.
 * docs/resolver.md states the rules they follow, numbered R1...; the code
 * cites each by its number where it applies it.
 */
#ifndef KMS_INTERNAL_H
#define KMS_INTERNAL_H

#define _DEFAULT_SOURCE /* mmap, madvise, uname: include this header first */
#include "kmodsyms.h"
#include "kms_build.h"
#include "kms_format.h"
#include "kms_modules.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

#define NO (-1)
#define HUGE_PAGE ((uintptr_t)1 << 21)

/* ------------------------------------------------------------ dtrace_syms */

/* The format's facts: header fields, tables, entry sizes and fields,
 * codes (generated from src/kmodsyms/format/fileformat.py). */
#define SHF_EXECINSTR 0x4u

static inline uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* ------------------------------------------------------------ the handle */

/* The core kernel's markers (kms_sizes.c). */
enum { K_STEXT, K_ETEXT, K_SINITTEXT, K_EINITTEXT, K_END, K_INIT_BEGIN, K_INIT_END, K_MARKERS };

#define PLACED 1
#define HOLDS_TEXT 2

/* What an answer says of an object: its path and modules. */
struct object_info {
    const char *path;
    struct kms_modlist modules; /* "vmlinux" for the core kernel */
    const char *dso;            /* modules.modules[0] */
    uint8_t origin;             /* KMS_ORIGIN_CORE or KMS_ORIGIN_BUILTIN; a loaded
                                 * module's .ko: KMS_ORIGIN_LOADABLE */
};

/*
 * Who a line is, as an answer names it: a tag (the top two bits) and an
 * index.  Parsing gives a core line WHO_CORE and a loaded or pseudo-module's
 * line WHO_MODULE; attribution turns core lines into WHO_OBJECT or
 * WHO_AMBIGUOUS, and once the regions are known a loaded module's line that
 * is a symbol of a placed section of its .ko into WHO_OBJECT (the .ko).
 */
#define WHO_OBJECT 0u    /* index: the object (of its placed section) */
#define WHO_MODULE 1u    /* index: into mod_name (>= 1) */
#define WHO_AMBIGUOUS 2u /* index: into amb_* */
#define WHO_CORE 3u      /* core kernel, no object */
#define WHO(tag, index) ((uint32_t)(tag) << 30 | (uint32_t)(index))
#define WHO_TAG(w) ((w) >> 30)
#define WHO_INDEX(w) ((w) & 0x3FFFFFFFu)

/* One kallsyms line: all an answer needs of it in half a cache line (what
 * only building needs -- entry, section, region -- is in arrays of its own,
 * freed once the index is built). */
struct line {
    uint64_t addr;
    int64_t size;       /* -1 unknown (and only -1 is negative) */
    uint32_t name;      /* offset of the name in h->text */
    uint32_t name_len;
    uint32_t who;       /* WHO(tag, index) */
    uint8_t type;       /* kallsyms letter */
    uint8_t binding;    /* ELF STB_*: as linked (R59, R58), or the .ko's; KMS_BINDING_UNKNOWN */
    uint8_t answers;    /* may answer an address: not per-cpu 'A', not a module's mapping symbol */
    uint8_t prefer;     /* among lines of one start and size (prefer_cmp): typed << 2 | rank */
};

/* A piece's answer (kms_handle.piece_answer). */
#define PIECE_SIZED 0x80000000u   /* | line: [start, end) of the line holds the piece */
#define PIECE_NO_LINE 0x40000000u /* | the owner of the extent's object holding it, or
                                   * OWNER_NONE */
#define PIECE_INDEX 0x3FFFFFFFu

/* A piece of the address space answered alike: from its cluster's base +
 * low to the next piece's start. */
struct piece {
    uint32_t low;
    uint32_t answer;    /* PIECE_SIZED | line, a line, or PIECE_NO_LINE | owner */
};

/* Who answers (an object, a module, an ambiguous line's candidates, the
 * core kernel, or none): the fields of its records' kms_sym that are not
 * their line's, in one cache line (record(), kms_query.c). */
struct owner {
    _Alignas(64) const char *dso;
    const char *const *modules;
    const char *object;
    const struct kms_modlist *candidates;
    uint32_t nmodules, ncandidates;
    uint8_t origin, ambiguous;
};
#define OWNER_NONE 0u
#define OWNER_OBJECT(o) (1u + (o)) /* the objects' owners follow none's */

/* A cluster's bucket: its first piece (the one holding the bucket's start)
 * and that piece's answer, which answers without reading any piece when
 * that piece holds the whole bucket (every other bucket). */
struct bucket {
    uint32_t first;
    uint32_t answer;
};

/* Pieces first..last, their starts within 2^32 of the first's (base). */
struct cluster {
    uint64_t base;
    uint32_t first, last;
    uint32_t last_low;  /* piece[last].low */
    uint32_t bucket;    /* its bucket table: bucket[bucket .. bucket + nb], the last = last */
    uint32_t shift;     /* an offset's bucket: offset >> shift */
};

#define CLUSTER_GAP (UINT64_C(1) << 24) /* core kernel to modules is more */
#define PIECES_PER_BUCKET 4

/*
 * Fetch the cache line at P ahead of its use, where the compiler can.  Two
 * loops use it, where each step's loads are cache misses at random places
 * that do not depend on each other: attribution (its entries' names and
 * rows, a ring of lines ahead, kms_attr.c) and kms_resolve_many() (each
 * step over a batch of addresses, kms_query.c).  There many misses are
 * then in flight at once instead of one.  KMS_PORTABLE_PREFETCH makes it
 * nothing, as with other compilers: make check builds test_kms so too.
 */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(KMS_PORTABLE_PREFETCH)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

/*
 * What the stages of one load hand each other and nothing after it reads:
 * kms_load.c's load() keeps it on its stack, the handle points to it while
 * the load runs (h->load), and it is released once the index is built
 * (the rest of the handle is what the queries read).  Its arrays are in
 * scratch memory (kms_alloc.c), carved from SCRATCH's mappings.
 */
struct kmsi_load {
    struct scratch *scratch;    /* the mappings the arrays are carved from */
    struct anchor_index *anchors; /* the anchors, and the core lines of their names */
    uint32_t *section_rows;     /* at [sec + 2], each section's symbols (counted as they are
                                 * checked; index_entries makes it ek.first) */
    uint64_t *section_base;     /* per section: where it is (placement, attribution) */
    uint64_t *seg_shift;        /* per segment: its KASLR shift, when seg_known */
    uint8_t *seg_known;
    uint8_t *line_matched;      /* per line: 1 when it is a dtrace_syms entry (take_entry) */
    int32_t *line_section;      /* per line: placed section holding it (or its entry's), -1 */
    int32_t *line_entry;        /* per line: its dtrace_syms entry, -1; kept only for the
                                 * build (kmsi_attribute_at_link), NULL at a load */
    int32_t *line_region;       /* per line: its placed section, else -1 - its region group
                                 * (regions() rewrites line_section's array into it) */
    uint32_t *by_address;       /* lines, stably sorted by address */
    uint64_t *region_end;       /* per region group: the last address its lines answer (R29-R31) */
};

struct kms_handle {
    /* dtrace_syms, mapped read-only */
    const unsigned char *map;
    size_t map_size;
    const unsigned char *table[T_COUNT];
    uint32_t count[T_COUNT];
    const char *release, *build_id;
    const char **member_name;   /* module name of each modset_members entry */
    struct object_info *object; /* per object */
    uint32_t *section_object;   /* per section: its object */
    int wide_values;            /* a symbol's value is 2^32 or more */

    /* kallsyms: the names (each NUL-terminated) and one row per kept line */
    char *text;
    size_t n;
    struct line *line;
    uint32_t nmods;
    const char **mod_name;      /* [0] "vmlinux"; loaded and pseudo-modules */
    uint8_t *mod_origin;        /* KMS_ORIGIN_LOADABLE or _PSEUDO, per mod_name */
    size_t core_lines;
    size_t modules_from;        /* the first loaded or pseudo-module's line (n: none) */
    size_t unsorted_at;         /* the first line below the one before it, 0 for none */

    /* placement */
    uint8_t *placed;            /* per section: PLACED (moved by a known shift, placement
                                 * != 0), HOLDS_TEXT (a t/T kallsyms line is in it) */
    size_t namb;                /* ambiguous lines (WHO_AMBIGUOUS), and their candidates */
    uint32_t *amb_first, *amb_count;
    struct kms_modlist *cand_list; /* module list of each candidate entry */
    uint32_t *cand_modset;
    uint32_t next;              /* placed extents, by base */
    uint64_t *ext_start;
    struct { uint64_t end; uint32_t sec; } *ext;
    uint32_t ext_first;         /* addresses see the extents from here: those at or above the
                                 * lowest core address (x86's per-cpu sections hold none) */
    uint64_t core_range[4];     /* where core lines answer (is_ksym_addr()): [start, last]... */
    uint32_t ncore_ranges;
    uint32_t anchors_verified;

    /*
     * The address index: the address space cut where any answer changes,
     * each piece's answer precomputed.  Pieces are grouped in clusters
     * (split at gaps of more than CLUSTER_GAP, so that a start is its
     * cluster's base plus 32 bits), each with a bucket table (offset >>
     * shift -> the piece holding that offset): an address finds its piece
     * with a search of a few pieces of one cache line.  Answers copy the
     * record fields of who answers from owner[], one cache line each.
     */
    size_t npiece, ncluster, nbucket;
    struct piece *piece;
    struct cluster *cluster;
    struct bucket *bucket;
    struct owner *owner;        /* owners: none, the objects, then as owner_first[] says */
    uint32_t owner_first[4];    /* per WHO tag: its index 0's owner */

    /* the load policy's outcome (kms_info): "" or why the answers are of
     * kallsyms alone (KMS_LOAD_FALLBACK); "" or the one warning to show */
    const char *degraded, *warning;

    /* what kms_refresh() reads again (kms_refresh.c); NULL for a caller's text */
    struct kms_reload *reload;

    /* loaded modules' .ko files (kms_modules.c): their placed sections are
     * sections count[T_SECTIONS] + k, their files objects count[T_OBJECTS] + k;
     * after loading only the statuses (kms_modules()) and cores are kept */
    struct kmsi_loaded mods;

    /* sizes and %pS (kms_sizes.c): the answering lines grouped by the module
     * whose lookup the kernel makes for them (0: the core kernel, then each
     * loaded or pseudo-module, as mod_name), each group by address, ties in
     * kallsyms order; each line's estimated size */
    uint32_t *group_first;      /* per group + 1: where its lines begin in grouped[] */
    uint32_t *grouped;
    uint32_t *estimate;         /* per line: estimated size, NO_ESTIMATE: none */
    uint64_t marker[K_MARKERS]; /* the core kernel's _stext ... (K_*), where seen */
    uint32_t marker_seen;       /* bit K: marker[K] seen */

    /* what only a load reads, NULL once the index is built (struct kmsi_load) */
    struct kmsi_load *load;
};

#define NO_ESTIMATE UINT32_MAX

/* The loaded or pseudo-module of line I (index into mod_name), 0 for none,
 * once loaded: a line from its .ko names its module through the .ko's object
 * (whose module list is that one entry of mod_name). */
static inline uint32_t kmsi_loaded_module(const kms_handle *h, size_t i)
{
    uint32_t w = h->line[i].who;
    if (WHO_TAG(w) == WHO_OBJECT && WHO_INDEX(w) >= h->count[T_OBJECTS])
        return (uint32_t)(h->object[WHO_INDEX(w)].modules.modules - h->mod_name);
    return WHO_TAG(w) == WHO_MODULE ? WHO_INDEX(w) : 0;
}

/* The module list of the core kernel (kms_format.c). */
extern const char *const kmsi_vmlinux_list[1];

/* X rounded up to a multiple of ALIGN (a power of two). */
static inline size_t round_up(size_t x, size_t align)
{
    return (x + align - 1) & ~(align - 1);
}

/* SCRATCH(h, var, count): var = room for COUNT items of scratch; true on success. */
#define SCRATCH(h, var, count) (((var) = kmsi_scratch((h), (count), sizeof *(var))) != NULL)

/* Where the scratch ends: what a step gives back on return (kmsi_scratch_release). */
struct scratch_mark {
    struct scratch *at;
    size_t used;
};

static inline const unsigned char *ent(const kms_handle *h, int t, uint32_t i)
{
    return h->table[t] + (size_t)i * entry_size[t];
}

static inline const char *str(const kms_handle *h, uint32_t off)
{
    return (const char *)h->table[T_STRINGS] + off;
}

/* Allocate COUNT zeroed items for h->FIELD; true on success. */
#define ALLOC(h, field, count)                                                       \
    (((h)->field = calloc((count) ? (size_t)(count) : 1, sizeof *(h)->field)) != NULL)

/* Where kallsyms text comes from: a file read block by block (never held
 * whole: only the names are kept), or a caller's buffer, read in place. */
struct kallsyms_source {
    int fd;               /* -1: the buffer */
    const char *buf;
    size_t len;           /* the buffer's length; for a file its size when known, else 0 */
    const char *name;
    int live;             /* the running kernel's /proc/kallsyms, read by this process */
};

static inline const char *line_name(const kms_handle *h, size_t i)
{
    return h->text + h->line[i].name;
}

/* The line's loaded or pseudo-module (index into mod_name), 0 for core. */
static inline uint32_t line_module(const kms_handle *h, size_t i)
{
    uint32_t w = h->line[i].who;
    return WHO_TAG(w) == WHO_MODULE ? WHO_INDEX(w) : 0;
}

static inline int line_name_is(const kms_handle *h, size_t i, const char *s, size_t len)
{
    return h->line[i].name_len == len && memcmp(line_name(h, i), s, len) == 0;
}

struct keyed {
    uint64_t key;
    uint32_t idx;
};

static inline const char *sym_name(const kms_handle *h, uint32_t s)
{
    return str(h, le32(ent(h, T_SYMBOLS, s) + SYM_NAME));
}

/* A line's binding from its letter (R58), for a line without an entry
 * (an upper-case letter ranks as global: R26).  A loaded module's letter is
 * lower case for every symbol it does not export, global or not, so there
 * lower case says nothing of the binding. */
static inline uint8_t letter_binding(unsigned char c, int module_line)
{
    if (c == 'w' || c == 'W' || c == 'v' || c == 'V')
        return 2;
    if (c >= 'A' && c <= 'Z')
        return 1;
    return module_line ? KMS_BINDING_UNKNOWN : 0;
}

/* The binding of a core line matched to an entry (R59): the final link's,
 * which its letter gives (scripts/kallsyms.c copies nm's letters of
 * vmlinux), except where the letter says nothing of it (R10's table: 'A',
 * 'a', '?'; per-cpu lines are made 'A' whatever their binding); there the
 * entry's ENTRY_BINDING stands. */
static inline uint8_t linked_binding(unsigned char c, uint8_t entry_binding)
{
    return c == 'A' || c == 'a' || c == '?' ? entry_binding : letter_binding(c, 0);
}

/* What prefer_cmp weighs after the size: a typed symbol (STT_* != 0) over
 * none, then global over weak over local. */
static inline uint8_t symbol_prefer(int typed, uint8_t binding)
{
    return (uint8_t)((typed != 0) << 2 | (binding == 1 ? 2 : binding == 2 ? 1 : 0));
}

/* ------------------------------------------------------------ growable structs */

/* The size field (the first) of a caller's struct at P. */
static inline size_t caller_size(const void *p)
{
    size_t size;
    memcpy(&size, p, sizeof size);
    return size;
}

/* Fill the caller's struct DST from the library's whole record SRC (FULL
 * bytes): the fields that fit in DST's size, DST's size kept (kmodsyms.h,
 * "Growable output structs"). */
static inline void put_fitting(void *dst, const void *src, size_t full)
{
    size_t size = caller_size(dst);
    if (size > full)
        size = full;
    if (size > sizeof size)
        memcpy((char *)dst + sizeof size, (const char *)src + sizeof size, size - sizeof size);
}

/* The stride of a caller's array OUT of MAX elements: OUT[0].size, 0 (fill
 * nothing) for no array or a size smaller than the size field. */
static inline size_t caller_stride(const void *out, size_t max)
{
    size_t stride = out && max ? caller_size(out) : 0;
    return stride < sizeof(size_t) ? 0 : stride;
}

/* Element I of a caller's array of STRIDE: its size set to STRIDE, then
 * filled from SRC (FULL bytes). */
static inline void put_element(void *out, size_t stride, size_t i, const void *src, size_t full)
{
    char *dst = (char *)out + i * stride;
    memcpy(dst, &stride, sizeof stride);
    put_fitting(dst, src, full);
}

/* ------------------------------------------------------------ the stages */

/* kms_alloc.c: scratch memory and huge pages */
void *kmsi_scratch(kms_handle *h, size_t count, size_t size);
struct scratch_mark kmsi_scratch_mark(const kms_handle *h);
void kmsi_scratch_shrink(kms_handle *h, const void *p, size_t count, size_t size);
void kmsi_scratch_release(kms_handle *h, struct scratch_mark m);
void kmsi_scratch_trim(kms_handle *h);
void *kmsi_alloc_hugeable(size_t size);
void kmsi_advise_huge(void *base, size_t cap, size_t *asked, size_t used, uint64_t expect);

/* kms_format.c: the dtrace_syms file */
int kmsi_map_syms(kms_handle *h, const char *path, kms_error *err);

/* kms_kallsyms.c: the kallsyms text */
int kmsi_parse_kallsyms(kms_handle *h, const struct kallsyms_source *src, kms_error *err);
/* Why every address of the running kernel's kallsyms reads 0, and what
 * would show them, from the kernel's rule (kallsyms_show_value()) and its
 * state: kernel.kptr_restrict, kernel.perf_event_paranoid (KMSI_UNREAD
 * where there is none to read: a kernel without CONFIG_PERF_EVENTS has no
 * such sysctl) and whether the reader has CAP_SYSLOG (1; 0 not, -1
 * unknown).  Into BUF (one phrase). */
#define KMSI_UNREAD INT_MIN
void kmsi_hidden_cause(int kptr_restrict, int perf_event_paranoid, int cap_syslog, char *buf,
                       size_t cap);

/* kms_place.c: anchors and placement */
void kmsi_free_anchors(struct anchor_index *ai);
int kmsi_index_anchors(kms_handle *h, kms_error *err);
int kmsi_find_anchors(struct anchor_index *ai, uint32_t line, const char *name, size_t len);
/* CHECK: whether the anchors must show the file is kallsyms' kernel's */
enum { CHECK_NONE, CHECK_FAIL, CHECK_WARN /* KMS_LOAD_FORCE: kmsi_forced() instead */ };
int kmsi_place_sections(kms_handle *h, const char *syms_path, const char *source, int check,
                               kms_error *err);

/* kms_sort.c: sorting, and the majority vote (kmsi_majority, kms_build.h) */
void kmsi_stable_sort(struct keyed *a, size_t n, struct keyed *tmp);
int kmsi_sort_keyed(kms_handle *h, struct keyed *a, size_t n);

/* kms_hash.c: a name's hash (LEN bytes, none read past them) */
uint64_t kmsi_name_hash(const char *p, size_t len);

/* kms_attr.c: attribution */
int kmsi_attribute_lines(kms_handle *h, const char *syms_path, kms_error *err);
int kmsi_place_extents(kms_handle *h, const uint64_t *shift, const uint8_t *known,
                       const char *syms_path, kms_error *err);

/* kms_index.c: the address index */
int kmsi_build_index(kms_handle *h, kms_error *err);
int kmsi_build_pieces(kms_handle *h, kms_error *err);
int kmsi_sort_by_address(kms_handle *h);
int kmsi_build_buckets(kms_handle *h, kms_error *err);
int kmsi_build_owners(kms_handle *h, kms_error *err);

/* kms_modules.c: the loaded modules matched with their .ko files (their
 * lines' sections), and their placed sections joined to the extents */
int kmsi_match_modules(kms_handle *h, const struct kmsi_sources *src, kms_error *err);
int kmsi_add_ko_extents(kms_handle *h, kms_error *err);

/* kms_sizes.c: the lines by module and address, estimated sizes */
int kmsi_group_lines(kms_handle *h, kms_error *err);
int64_t kmsi_line_size(const kms_handle *h, size_t i, uint8_t *kind);

/* kms_text.c: kms_ksym.text, the kernel's %pS of K (kms_resolve_kernel()) */
size_t kmsi_ksym_text(const struct kms_ksym *k, char *buf, size_t len);

/* kms_load.c: loading */
int kmsi_fail(kms_error *err, int code, const char *fmt, ...);
/* KMS_LOAD_FORCE used the file although STALE (the check's message) says
 * it is another kernel's: the handle's warning says so. */
int kmsi_forced(kms_handle *h, const char *stale, kms_error *err);

/* kms_load.c: kms_load_opts() reading (under KMS_LOAD_DEFER_MODULES) only
 * the .ko of READ[0..NREAD) */
kms_handle *kmsi_load_reading(const struct kms_load_opts *opts, const char *const *read,
                              size_t nread, kms_error *err);

/* kms_refresh.c: the sources a handle was loaded from, kept for kms_refresh() */
int kmsi_remember_sources(kms_handle *h, const struct kms_load_opts *o,
                          const struct kmsi_sources *src, kms_error *err);
void kmsi_forget_sources(kms_handle *h);

/* kms_format.c: a handle's dtrace_syms when there is none (KMS_LOAD_FALLBACK):
 * empty tables, every kallsyms line the core kernel's or its module's */
int kmsi_no_syms(kms_handle *h, kms_error *err);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* KMS_INTERNAL_H */
