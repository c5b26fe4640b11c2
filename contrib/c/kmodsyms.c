// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: dtrace_syms + kallsyms -> mod`sym+off, as kmodsyms' Python
 * resolver answers (kmodsyms/symsfile.py, kallsyms.py, placement.py's
 * LinkedPlacement, resolver.py, answer.py).  Each step below names the
 * Python it mirrors; docs/resolver.md states the rules.  Loaded modules'
 * .ko files are kms_modules.c's (loadable.py).
 */
#define _DEFAULT_SOURCE /* mmap, uname */
#include "kmodsyms.h"
#include "kms_modules.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KMS_PORTABLE_CRC)
#include <immintrin.h> /* crc32_clmul */
#endif
/* KMS_PORTABLE_SCAN: find_eol's memchr way only, as without SSE2 (make
 * check builds test_kms so too, with KMS_PORTABLE_CRC) */
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KMS_PORTABLE_SCAN)
#include <emmintrin.h> /* find_eol */
#define SCAN_SSE2 1
#endif

#define NO (-1)
#ifndef MAP_POPULATE /* Linux's; elsewhere the pages fault in as read */
#define MAP_POPULATE 0
#endif

/* ------------------------------------------------------------ dtrace_syms */

/* Directory order of the tables and their entry sizes (docs/format.md). */
enum { T_STRINGS, T_MODULES, T_MEMBERS, T_MODSETS, T_OBJECTS, T_SECNAMES, T_SECTIONS,
       T_SYMBOLS, T_SEGMENTS, T_ANCHORS, T_COUNT };
static const char *const table_names[T_COUNT] = {
    "strings", "modules", "modset_members", "modsets",
    "objects", "section_names", "sections", "symbols", "segments", "anchors"};
static const uint32_t entry_size[T_COUNT] = {1, 4, 4, 8, 16, 4, 40, 40, 16, 8};

#define FORMAT_VERSION 1u
#define HEADER_SIZE 160u
#define DIRECTORY_AT 56u
#define MAX_ENTRIES (UINT32_C(1) << 28)
#define NO_ADDRESS UINT64_MAX
#define LIVE_KALLSYMS "/proc/kallsyms"

/* Field offsets within entries. */
#define SEC_OBJECT 0
#define SEC_FLAGS 8
#define SEC_SIZE 16
#define SEC_ADDRESS 24
#define SEC_PLACEMENT 32
#define SYM_NAME 0
#define SYM_SECTION 12
#define SYM_VALUE 16
#define SYM_SIZE 24
#define SYM_TYPE 32
#define SYM_BINDING 33
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
    uint8_t binding;    /* ELF STB_*: the entry's, else from the letter; KMS_BINDING_UNKNOWN */
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
 * core kernel, or none): the bytes of its records' kms_sym from dso on, in
 * one cache line. */
struct owner {
    _Alignas(64) unsigned char tail[64];
};
#define OWNER_NONE 0u
#define OWNER_OBJECT(o) (1u + (o)) /* the objects' owners follow none's */

/* A cluster's bucket: its first piece (the one holding the bucket's start)
 * and that piece's answer, whose line a resolve fetches ahead while it
 * searches the pieces: the address is most often in that piece. */
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

/* Fetch the cache line at P ahead of its use, where the compiler can. */
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

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
    uint32_t *section_rows;     /* at [sec + 2], each section's symbols (counted as they are
                                 * checked; index_entries makes it ek.first); scratch */
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
    uint64_t *section_base;     /* per section: where it is (scratch: only while loading) */
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

    /* loaded modules' .ko files (kms_modules.c): their placed sections are
     * sections count[T_SECTIONS] + k, their files objects count[T_OBJECTS] + k;
     * after loading only the statuses (kms_modules()) and cores are kept */
    struct kms_loaded mods;

    /* only while loading (in scratch memory, freed once the index is built) */
    struct scratch *scratch;    /* the mappings they are carved from */
    uint8_t *line_matched;      /* per line: 1 when it is a dtrace_syms entry (take_entry) */
    int32_t *line_section;      /* per line: placed section holding it (or its entry's), -1 */
    int32_t *line_region;       /* per line: its placed section, else -1 - its region group
                                 * (regions() rewrites line_section's array into it) */
    uint32_t *by_address;       /* lines, stably sorted by address */
    uint64_t *region_end;       /* per region group (Resolver._regions) */
    struct anchor_index *anchors; /* the anchors, and the core lines of their names */
};

static const char *const vmlinux_list[] = {"vmlinux"};

/* ------------------------------------------------------------ scratch */

/*
 * Memory for what only loading needs: mappings carved in order, and given
 * back as a stack (a step's scratch, once it returns), all unmapped once
 * the index is built.  A page faulted in costs more than most steps spend
 * on a line (the kernel zeroes it, and under a hypervisor the fault is
 * dearer still: ~3 us here), so the mappings are aligned to huge pages and
 * ask for them (THP, where the kernel gives them on request): the load's
 * scratch is then a few faults, not ~1,500.  What a step gives back is
 * kept for the next steps (a huge page given to the kernel costs ~0.3 ms
 * to fault in and zero again: placement, attribution and the regions each
 * reach into the same second one), until scratch_trim gives the kernel
 * every whole huge page above what is in use, before the steps that add
 * the most to the resident set.  Like malloc's, scratch memory is not
 * zeroed.
 */
#define HUGE_PAGE ((uintptr_t)1 << 21)
#define SCRATCH_MAPPING ((size_t)16 << 20) /* address space: only what is touched is memory */
#define SCRATCH_ALIGN 64u
struct scratch {
    struct scratch *prev; /* the mapping before (this header begins each) */
    size_t size, used;
};

/* X rounded up to a multiple of ALIGN (a power of two). */
static inline size_t round_up(size_t x, size_t align)
{
    return (x + align - 1) & ~(align - 1);
}

/* Room for COUNT items of SIZE bytes, SCRATCH_ALIGN-aligned; NULL out of memory. */
static void *scratch(kms_handle *h, size_t count, size_t size)
{
    struct scratch *s = h->scratch;
    size_t need;
    if (size && count > (SIZE_MAX - 2 * HUGE_PAGE) / size)
        return NULL;
    need = round_up(count * size, SCRATCH_ALIGN);
    if (!s || s->size - s->used < need) {
        size_t map = need + SCRATCH_ALIGN > SCRATCH_MAPPING
            ? round_up(need + SCRATCH_ALIGN, HUGE_PAGE) : SCRATCH_MAPPING;
        /* a huge page's worth more, to cut an aligned mapping from */
        unsigned char *m = mmap(NULL, map + HUGE_PAGE, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        uintptr_t at = ((uintptr_t)m + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        if (at > (uintptr_t)m)
            munmap(m, at - (uintptr_t)m);
        munmap((void *)(at + map), (uintptr_t)m + HUGE_PAGE - at);
#ifdef MADV_HUGEPAGE
        madvise((void *)at, map, MADV_HUGEPAGE); /* only a hint: small pages otherwise */
#endif
        s = (struct scratch *)at;
        s->prev = h->scratch;
        s->size = map;
        s->used = SCRATCH_ALIGN;
        h->scratch = s;
    }
    void *p = (unsigned char *)s + s->used;
    s->used += need;
    return p;
}

/* SCRATCH(h, var, count): var = room for COUNT items of scratch; true on success. */
#define SCRATCH(h, var, count) (((var) = scratch((h), (count), sizeof *(var))) != NULL)

/* Where the scratch ends: what a step gives back on return (scratch_release). */
struct scratch_mark {
    struct scratch *at;
    size_t used;
};

static struct scratch_mark scratch_mark(const kms_handle *h)
{
    struct scratch_mark m = {h->scratch, h->scratch ? h->scratch->used : 0};
    return m;
}

/* The last room taken, P, cut to COUNT items of SIZE bytes (once their
 * number is known): the rest is the next room's. */
static void scratch_shrink(kms_handle *h, const void *p, size_t count, size_t size)
{
    size_t at = (size_t)((const unsigned char *)p - (const unsigned char *)h->scratch);
    h->scratch->used = at + round_up(count * size, SCRATCH_ALIGN);
}

static void scratch_release(kms_handle *h, struct scratch_mark m)
{
    while (h->scratch != m.at) {
        struct scratch *s = h->scratch;
        h->scratch = s->prev;
        munmap(s, s->size);
    }
    if (h->scratch)
        h->scratch->used = m.used;
}

/* The scratch's whole huge pages above what is in use (part of one would
 * split it), given back to the kernel. */
static void scratch_trim(kms_handle *h)
{
#ifdef MADV_DONTNEED
    struct scratch *s = h->scratch;
    size_t keep = s ? round_up(s->used, HUGE_PAGE) : 0;
    if (s && s->size > keep)
        madvise((unsigned char *)s + keep, s->size - keep, MADV_DONTNEED);
#else
    (void)h;
#endif
}

static inline const unsigned char *ent(const kms_handle *h, int t, uint32_t i)
{
    return h->table[t] + (size_t)i * entry_size[t];
}

static inline const char *str(const kms_handle *h, uint32_t off)
{
    return (const char *)h->table[T_STRINGS] + off;
}

static int fail(kms_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Allocate COUNT zeroed items for h->FIELD; true on success. */
#define ALLOC(h, field, count)                                                       \
    (((h)->field = calloc((count) ? (size_t)(count) : 1, sizeof *(h)->field)) != NULL)

/* ------------------------------------------------------------ CRC-32 */

/* ISO-HDLC (zlib's crc32()), slicing by 16; the table is the caller's so
 * that nothing global is written. */
static void crc_table(uint32_t tab[16][256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        tab[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int k = 1; k < 16; k++)
            tab[k][i] = tab[0][tab[k - 1][i] & 0xFF] ^ (tab[k - 1][i] >> 8);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(KMS_PORTABLE_CRC)
/* KMS_PORTABLE_CRC builds the table's way only, as on other processors:
 * make check builds test_kms so too, so that both ways are tested here. */
#define CRC_CLMUL 1
/* The CRC state after N bytes at P (N a multiple of 16, at least 64) from
 * state C, by carry-less multiplication: four 128-bit lanes folded 64 bytes
 * at a time, then into one, then reduced (Gopal et al., "Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ", Intel 2009; the
 * constants of the reflected ISO-HDLC polynomial, as zlib's). */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_clmul(const unsigned char *p, size_t n, uint32_t c)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p), x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32)), x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    __m128i x5;
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
        __m128i f1 = _mm_clmulepi64_si128(x1, k1k2, 0x00), f2 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        __m128i f3 = _mm_clmulepi64_si128(x3, k1k2, 0x00), f4 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k1k2, 0x11), f1),
                           _mm_loadu_si128((const __m128i *)p));
        x2 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x2, k1k2, 0x11), f2),
                           _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x3, k1k2, 0x11), f3),
                           _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x4, k1k2, 0x11), f4),
                           _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    /* the four lanes into one, then the 16-byte blocks left */
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), x5);
    for (; n >= 16; p += 16, n -= 16) {
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11),
                                         _mm_loadu_si128((const __m128i *)p)), x5);
    }
    /* 128 bits to 64, then Barrett's reduction to 32 */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5k0, 0x00), x2);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t crc32_bytes(const unsigned char *p, size_t n)
{
    uint32_t tab[16][256];
    uint32_t c = 0xFFFFFFFFu;
#ifdef CRC_CLMUL
    /* where the processor has it, all whole 16-byte blocks at once */
    if (n >= 64 && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) {
        size_t m = n & ~(size_t)15;
        c = crc32_clmul(p, m, c);
        p += m;
        n -= m;
    }
#endif
    crc_table(tab);
    for (; n >= 16; n -= 16, p += 16) {
        uint32_t w0 = c ^ le32(p), w1 = le32(p + 4), w2 = le32(p + 8), w3 = le32(p + 12);
        c = tab[15][w0 & 0xFF] ^ tab[14][(w0 >> 8) & 0xFF] ^ tab[13][(w0 >> 16) & 0xFF] ^
            tab[12][w0 >> 24] ^ tab[11][w1 & 0xFF] ^ tab[10][(w1 >> 8) & 0xFF] ^
            tab[9][(w1 >> 16) & 0xFF] ^ tab[8][w1 >> 24] ^ tab[7][w2 & 0xFF] ^
            tab[6][(w2 >> 8) & 0xFF] ^ tab[5][(w2 >> 16) & 0xFF] ^ tab[4][w2 >> 24] ^
            tab[3][w3 & 0xFF] ^ tab[2][(w3 >> 8) & 0xFF] ^ tab[1][(w3 >> 16) & 0xFF] ^
            tab[0][w3 >> 24];
    }
    for (; n; n--, p++)
        c = tab[0][(c ^ *p) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ------------------------------------------------------------ validation */

/* Every u32 field at byte FIELD of every entry of table T is < BOUND. */
static int in_range(const kms_handle *h, int t, uint32_t field, uint64_t bound)
{
    for (uint32_t i = 0; i < h->count[t]; i++)
        if (le32(ent(h, t, i) + field) >= bound)
            return 0;
    return 1;
}

/* kmodsyms.symsfile.SymsFile's checks, in its order and with its words. */
static int validate_syms(kms_handle *h, const char *path, kms_error *err)
{
    const unsigned char *d = h->map;
    size_t size = h->map_size;
    const char *why = NULL;
    uint32_t nstr;

    if (size < 16 || memcmp(d, "KMODSYMS", 8) != 0)
        return fail(err, KMS_E_SYMS, "%s: not a dtrace_syms file (bad magic)", path);
    if (le32(d + 8) != FORMAT_VERSION)
        return fail(err, KMS_E_VERSION,
                    "%s: dtrace_syms format version %lu; this reader reads version %u: "
                    "rebuild it with a matching kmodsyms",
                    path, (unsigned long)le32(d + 8), FORMAT_VERSION);
    if (size < HEADER_SIZE)
        return fail(err, KMS_E_SYMS, "%s: truncated (%zu bytes, header needs %u); "
                    "rebuild it with 'kmodsyms build'", path, size, HEADER_SIZE);
    if (le64(d + 16) != (uint64_t)size)
        return fail(err, KMS_E_SYMS, "%s: truncated or padded: header says %llu bytes, file "
                    "has %zu; rebuild it with 'kmodsyms build'",
                    path, (unsigned long long)le64(d + 16), size);
    if (le32(d + 24) != HEADER_SIZE)
        why = "bad header size";
    else if (crc32_bytes(d + 16, size - 16) != le32(d + 12))
        why = "checksum mismatch (corrupt file)";
    if (why)
        return fail(err, KMS_E_SYMS, "%s: %s; rebuild it with 'kmodsyms build'", path, why);

    for (int t = 0; t < T_COUNT; t++) {
        uint64_t off = le32(d + DIRECTORY_AT + 8 * t);
        uint64_t count = le32(d + DIRECTORY_AT + 8 * t + 4);
        /* off < 2^32 and count <= 2^28: no overflow in 64 bits. */
        if (count > MAX_ENTRIES || off % 8 != 0 || off < HEADER_SIZE ||
            off + count * entry_size[t] > (uint64_t)size)
            return fail(err, KMS_E_SYMS, "%s: table %s out of bounds (offset %llu, %llu "
                        "entries); rebuild it with 'kmodsyms build'", path, table_names[t],
                        (unsigned long long)off, (unsigned long long)count);
        h->table[t] = d + off;
        h->count[t] = (uint32_t)count;
    }
    nstr = h->count[T_STRINGS];
    if (nstr == 0 || h->table[T_STRINGS][nstr - 1] != 0)
        why = "string table not NUL-terminated";
    for (int i = 0; !why && i < 6; i++)
        if (le32(d + 32 + 4 * i) >= nstr)
            why = "header string out of range";
    if (why)
        ;
    else if (!in_range(h, T_MODULES, 0, nstr))
        why = "module name out of range";
    else if (!in_range(h, T_MEMBERS, 0, h->count[T_MODULES]))
        why = "module-set member out of range";
    else {
        for (uint32_t i = 0; i < h->count[T_MODSETS]; i++) {
            const unsigned char *e = ent(h, T_MODSETS, i);
            if ((uint64_t)le32(e) + le32(e + 4) > h->count[T_MEMBERS])
                why = "module set out of range";
        }
    }
    if (why)
        ;
    else if (!in_range(h, T_OBJECTS, 0, nstr))
        why = "object path out of range";
    else if (!in_range(h, T_OBJECTS, 4, h->count[T_MODSETS]))
        why = "object module set out of range";
    else if (!in_range(h, T_SECNAMES, 0, nstr))
        why = "section name out of range";
    else if (!in_range(h, T_SECTIONS, 0, h->count[T_OBJECTS]))
        why = "section object out of range";
    else if (!in_range(h, T_SECTIONS, 4, h->count[T_SECNAMES]))
        why = "section name index out of range";
    else {
        /* the symbols' five checks in one pass (the largest table): each
         * failure noted, the first in the order above reported */
        static const char *const sym_why[5] = {
            "symbol name out of range", "symbol module set out of range",
            "symbol object out of range", "symbol section out of range",
            "symbol section belongs to another object"};
        uint32_t nmodsets = h->count[T_MODSETS], nobj = h->count[T_OBJECTS];
        uint32_t nsec = h->count[T_SECTIONS], bad = 0, wide = 0;
        /* the same pass counts each section's symbols, for index_entries (a
         * failure to allocate is told where the other allocations' are) */
        uint32_t *rows = h->section_rows = scratch(h, (size_t)nsec + 2, sizeof *rows);
        if (rows)
            memset(rows, 0, ((size_t)nsec + 2) * sizeof *rows);
        for (uint32_t i = 0; i < h->count[T_SYMBOLS]; i++) {
            const unsigned char *s = ent(h, T_SYMBOLS, i);
            uint32_t sec = le32(s + SYM_SECTION), obj = le32(s + 8);
            bad |= (uint32_t)(le32(s) >= nstr) | (uint32_t)(le32(s + 4) >= nmodsets) << 1 |
                   (uint32_t)(obj >= nobj) << 2 | (uint32_t)(sec >= nsec) << 3;
            wide |= le32(s + SYM_VALUE + 4);
            if (sec < nsec) {
                if (le32(ent(h, T_SECTIONS, sec) + SEC_OBJECT) != obj)
                    bad |= 1u << 4;
                if (rows)
                    rows[sec + 2]++;
            }
        }
        h->wide_values = wide != 0;
        for (int k = 0; !why && k < 5; k++)
            if (bad >> k & 1)
                why = sym_why[k];
    }
    if (why)
        ;
    else if (!in_range(h, T_ANCHORS, 0, h->count[T_SYMBOLS]))
        why = "anchor symbol out of range";
    else if (!in_range(h, T_ANCHORS, 4, h->count[T_SEGMENTS]))
        why = "anchor segment out of range";
    if (why)
        return fail(err, KMS_E_SYMS, "%s: %s; rebuild it with 'kmodsyms build'", path, why);
    h->release = str(h, le32(d + 32));
    h->build_id = str(h, le32(d + 36));
    if (!ALLOC(h, member_name, h->count[T_MEMBERS]))
        return fail(err, KMS_E_NOMEM, "out of memory reading %s", path);
    for (uint32_t k = 0; k < h->count[T_MEMBERS]; k++)
        h->member_name[k] = str(h, le32(ent(h, T_MODULES, le32(ent(h, T_MEMBERS, k)))));
    if (!h->section_rows || !ALLOC(h, object, h->count[T_OBJECTS]) ||
        !ALLOC(h, section_object, h->count[T_SECTIONS]))
        return fail(err, KMS_E_NOMEM, "out of memory reading %s", path);
    for (uint32_t o = 0; o < h->count[T_OBJECTS]; o++) {
        const unsigned char *ob = ent(h, T_OBJECTS, o);
        const unsigned char *ms = ent(h, T_MODSETS, le32(ob + 4));
        struct object_info *info = &h->object[o];
        info->path = str(h, le32(ob));
        info->modules.nmodules = le32(ms + 4);
        info->modules.modules = h->member_name + le32(ms);
        info->origin = KMS_ORIGIN_BUILTIN;
        if (!info->modules.nmodules) {
            info->modules.modules = vmlinux_list;
            info->modules.nmodules = 1;
            info->origin = KMS_ORIGIN_CORE;
        }
        info->dso = info->modules.modules[0];
    }
    for (uint32_t c = 0; c < h->count[T_SECTIONS]; c++)
        h->section_object[c] = le32(ent(h, T_SECTIONS, c) + SEC_OBJECT);
    return KMS_OK;
}

static int map_syms(kms_handle *h, const char *path, kms_error *err)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return fail(err, KMS_E_IO, "cannot read %s: %s; build it with 'kmodsyms build'",
                    path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, KMS_E_IO, "cannot read %s: not a regular file; build it with "
                    "'kmodsyms build'", path);
    }
    h->map_size = (size_t)st.st_size;
    if (h->map_size) {
        /* every page is read (the CRC): map them all at once, not fault by fault */
        void *m = mmap(NULL, h->map_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            h->map_size = 0;
            return fail(err, KMS_E_IO, "cannot map %s: %s", path, strerror(e));
        }
        h->map = m;
    }
    close(fd);
    return validate_syms(h, path, err);
}

/* ------------------------------------------------------------ anchors */

struct anchor_line {
    uint32_t anchor, line;
};

/*
 * The core lines of each anchor's name (placement's votes), found in one
 * pass as kallsyms is read, in its order.  A line is compared only with the
 * anchors of its name's length (bucketed by length; longer than MAX_BUCKET
 * share the last), and only when its length and first, middle and last
 * bytes hash to a bit of the filter that an anchor set.
 */
#define MAX_BUCKET 512
#define FILTER_BITS 14
struct anchor_index {
    uint64_t filter[(1u << FILTER_BITS) / 64];
    const char **name;
    size_t *len;
    uint32_t *by_len;
    uint32_t bucket[MAX_BUCKET + 2];
    struct anchor_line *found;
    size_t nfound, capfound;
};

static void free_anchors(struct anchor_index *ai)
{
    if (ai) {
        free((void *)ai->name);
        free(ai->len);
        free(ai->by_len);
        free(ai->found);
        free(ai);
    }
}

static inline uint32_t anchor_hash(const char *name, size_t len)
{
    uint64_t x = (uint64_t)len ^ (uint64_t)(unsigned char)name[0] << 32 ^
                 (uint64_t)(unsigned char)name[len / 2] << 40 ^
                 (uint64_t)(unsigned char)name[len - 1] << 48;
    return (uint32_t)((x * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - FILTER_BITS));
}

/* The anchors bucketed by their names' lengths (h->anchors). */
static int index_anchors(kms_handle *h, kms_error *err)
{
    uint32_t nanch = h->count[T_ANCHORS];
    struct anchor_index *ai = h->anchors = calloc(1, sizeof *ai);
    if (!ai || !(ai->name = malloc((nanch ? nanch : 1) * sizeof *ai->name)) ||
        !(ai->len = malloc((nanch ? nanch : 1) * sizeof *ai->len)) ||
        !(ai->by_len = malloc((nanch ? nanch : 1) * sizeof *ai->by_len)))
        return fail(err, KMS_E_NOMEM, "out of memory reading anchors");
    for (uint32_t a = 0; a < nanch; a++) {
        const unsigned char *sym = ent(h, T_SYMBOLS, le32(ent(h, T_ANCHORS, a)));
        ai->name[a] = str(h, le32(sym + SYM_NAME));
        ai->len[a] = strlen(ai->name[a]);
        if (ai->len[a]) { /* (no line's name is empty) */
            uint32_t f = anchor_hash(ai->name[a], ai->len[a]);
            ai->filter[f / 64] |= UINT64_C(1) << f % 64;
        }
        ai->bucket[(ai->len[a] < MAX_BUCKET ? ai->len[a] : MAX_BUCKET) + 1]++;
    }
    for (uint32_t b = 0; b <= MAX_BUCKET; b++)
        ai->bucket[b + 1] += ai->bucket[b];
    uint32_t fill[MAX_BUCKET + 1];
    memcpy(fill, ai->bucket, sizeof fill);
    for (uint32_t a = 0; a < nanch; a++)
        ai->by_len[fill[ai->len[a] < MAX_BUCKET ? ai->len[a] : MAX_BUCKET]++] = a;
    return KMS_OK;
}

/* Core line LINE, called NAME (LEN bytes): the anchors of its name; -1 out of memory. */
static int find_anchors(struct anchor_index *ai, uint32_t line, const char *name, size_t len)
{
    size_t b = len < MAX_BUCKET ? len : MAX_BUCKET;
    uint32_t f = anchor_hash(name, len);
    if (!(ai->filter[f / 64] >> f % 64 & 1))
        return 0;
    for (uint32_t k = ai->bucket[b]; k < ai->bucket[b + 1]; k++) {
        uint32_t a = ai->by_len[k];
        if (ai->len[a] != len || ai->name[a][0] != name[0] || memcmp(name, ai->name[a], len) != 0)
            continue;
        if (ai->nfound == ai->capfound) {
            size_t nc = ai->capfound ? 2 * ai->capfound : 64;
            struct anchor_line *nf = realloc(ai->found, nc * sizeof *nf);
            if (!nf)
                return -1;
            ai->found = nf;
            ai->capfound = nc;
        }
        ai->found[ai->nfound].anchor = a;
        ai->found[ai->nfound++].line = line;
    }
    return 0;
}

/* ------------------------------------------------------------ kallsyms */

#define BYTES(b) (UINT64_C(0x0101010101010101) * (b)) /* B in each of 8 bytes */

/* The value of the 8 hex digits at P, all at once; *BAD gets a nonzero bit
 * when any is not one. */
static inline uint32_t hex8(const char *p, uint64_t *bad)
{
    uint64_t x = le64((const unsigned char *)p); /* byte k: p[k] */
    /* ranges per byte: with the high bits off, no byte carries into the next */
    uint64_t low = x & BYTES(0x7F), lower = (x | BYTES(0x20)) & BYTES(0x7F);
    uint64_t digit = (low + BYTES(0x80 - '0')) & ~(low + BYTES(0x7F - '9'));
    uint64_t letter = (lower + BYTES(0x80 - 'a')) & ~(lower + BYTES(0x7F - 'f'));
    *bad |= (((digit | letter) & BYTES(0x80)) ^ BYTES(0x80)) | (x & BYTES(0x80));
    /* each byte's digit ('a'-'f' and 'A'-'F' have bit 6: + 9), then the
     * eight packed, p[0] the most significant */
    uint64_t v = (x & BYTES(0x0F)) + 9 * ((x >> 6) & BYTES(0x01));
    v = (v & UINT64_C(0x000F000F000F000F)) << 4 | (v >> 8 & UINT64_C(0x000F000F000F000F));
    v = (v & UINT64_C(0x000000FF000000FF)) << 8 | (v >> 16 & UINT64_C(0x000000FF000000FF));
    return (uint32_t)((v & 0xFFFF) << 16 | (v >> 32 & 0xFFFF));
}

static int is_space(unsigned char c) /* Python's bytes.strip() set */
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static uint64_t name_hash(const char *p, size_t len)
{
    uint64_t hsh = 0x9E3779B97F4A7C15u ^ len, w;
    for (; len >= 8; len -= 8, p += 8) {
        memcpy(&w, p, 8);
        hsh = (hsh ^ w) * 0xFF51AFD7ED558CCDu;
        hsh ^= hsh >> 32;
    }
    w = 0;
    memcpy(&w, p, len);
    hsh = (hsh ^ w) * 0xC4CEB9FE1A85EC53u;
    return hsh ^ (hsh >> 29);
}

static int line_error(kms_error *err, const char *source, size_t lineno, const char *what,
                      const char *line, size_t len)
{
    char shown[81];
    size_t k, m = len < 80 ? len : 80;
    for (k = 0; k < m; k++)
        shown[k] = (line[k] >= 32 && line[k] < 127) ? line[k] : '?';
    shown[m] = 0;
    return fail(err, KMS_E_KALLSYMS, "%s:%zu: %s: '%s'", source, lineno, what, shown);
}

/* The state of parsing kallsyms, carried from one block of text to the next. */
struct parse {
    const char *source;
    size_t cap, names_len, names_cap, nonblank, width, modcap;
    size_t rows_asked, names_asked; /* of huge pages (advise_huge) */
    int any_nonzero;
    uint64_t *tagh;     /* hash of each module's tag, for the first-seen map */
    uint32_t *tagoff;   /* each module's name in h->text ("[mod]" -> "mod") */
    uint32_t *taglen;   /* its length */
};

/* Room for NEED more bytes of names (and 8 spare, zeroed at the end). */
static int names_room(kms_handle *h, struct parse *ps, size_t need)
{
    if (ps->names_len + need + 8 <= ps->names_cap)
        return 0;
    size_t nc = ps->names_cap * 2 > ps->names_len + need + 8 ? ps->names_cap * 2
                                                             : ps->names_len + need + 8;
    char *nt = realloc(h->text, nc);
    if (!nt)
        return -1;
    h->text = nt;
    ps->names_cap = nc;
    return 0;
}

/* A new module tag T (LEN bytes, "[mod]"): its index, or 0 out of memory. */
static uint32_t add_module(kms_handle *h, struct parse *ps, const char *t, size_t len,
                           uint64_t th)
{
    if (h->nmods >= ps->modcap) {
        size_t nc = ps->modcap ? ps->modcap * 2 : 16;
        uint64_t *nh = realloc(ps->tagh, nc * sizeof *nh);
        if (nh)
            ps->tagh = nh;
        uint32_t *no = nh ? realloc(ps->tagoff, nc * sizeof *no) : NULL;
        if (no)
            ps->tagoff = no;
        uint32_t *nl = no ? realloc(ps->taglen, nc * sizeof *nl) : NULL;
        if (!nl)
            return 0;
        ps->taglen = nl;
        ps->modcap = nc;
    }
    if (names_room(h, ps, len - 1))
        return 0;
    uint32_t mod = h->nmods++;
    ps->tagh[mod] = th;
    ps->tagoff[mod] = (uint32_t)ps->names_len;
    ps->taglen[mod] = (uint32_t)(len - 2);
    memcpy(h->text + ps->names_len, t + 1, len - 2);
    ps->names_len += len - 2;
    h->text[ps->names_len++] = 0;
    return mod;
}

/* A line without an entry: its binding and preference from its letter
 * (an upper-case letter ranks as global). */
static uint8_t letter_binding(unsigned char c)
{
    if (c == 'w' || c == 'W' || c == 'v' || c == 'V')
        return 2;
    return c >= 'A' && c <= 'Z' ? 1 : 0;
}

static uint8_t letter_prefer(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? 2 : 0;
}

/* One line of kallsyms (LEN bytes without its "\n"; NL: one followed it;
 * TAB: its first '\t', NULL none), as kmodsyms.kallsyms.Kallsyms._parse
 * reads it. */
static int parse_line(kms_handle *h, struct parse *ps, const char *line, size_t len, int nl,
                      const char *tab, kms_error *err)
{
    const char *source = ps->source;
    size_t width;
    if (nl && len && line[len - 1] == '\r') /* "\r\n" reads as "\n" */
        len--;
    if (!len)
        return KMS_OK;
    ps->nonblank++;
    if (!ps->width) {
        const char *sp = memchr(line, ' ', len);
        ps->width = sp ? (size_t)(sp - line) : 0;
        if (ps->width != 8 && ps->width != 16)
            return line_error(err, source, ps->nonblank, "expected 'ADDRESS TYPE NAME'", line,
                              len);
    }
    width = ps->width;
    if (len < width + 4)
        return line_error(err, source, ps->nonblank, "line too short for 'ADDRESS TYPE NAME'",
                          line, len);
    uint64_t bad = 0, a = hex8(line, &bad);
    if (width == 16)
        a = a << 32 | hex8(line + 8, &bad);
    int ok = line[width] == ' ' && line[width + 2] == ' ' && !bad;
    unsigned char type = (unsigned char)line[width + 1];
    ok &= (type >= 'A' && type <= 'Z') || (type >= 'a' && type <= 'z') || type == '?';
    if (!ok)
        return line_error(err, source, ps->nonblank, "expected 'ADDRESS TYPE NAME'", line, len);
    const char *name = line + width + 3;
    if (tab && tab < name) /* (a header this valid holds none) */
        tab = memchr(name, '\t', len - (width + 3));
    uint32_t mod = 0;
    size_t ne = tab ? (size_t)(tab - line) : len;
    if (tab) {
        /* "[MOD]" after the tab, surrounding whitespace stripped */
        size_t a0 = ne + 1, a1 = len;
        while (a0 < a1 && is_space((unsigned char)line[a0]))
            a0++;
        while (a1 > a0 && is_space((unsigned char)line[a1 - 1]))
            a1--;
        if (!(a1 - a0 > 2 && line[a0] == '[' && line[a1 - 1] == ']'))
            return line_error(err, source, ps->nonblank,
                              "expected '\\t[MODULE]' after the name", line, len);
        uint64_t th = name_hash(line + a0, a1 - a0);
        /* lines of one module are consecutive: try the last module first */
        for (uint32_t m = h->nmods; m-- > 1;)
            if (ps->tagh[m] == th && ps->taglen[m] == a1 - a0 - 2 &&
                !memcmp(h->text + ps->tagoff[m], line + a0 + 1, a1 - a0 - 2)) {
                mod = m;
                break;
            }
        if (!mod && !(mod = add_module(h, ps, line + a0, a1 - a0, th)))
            return fail(err, KMS_E_NOMEM, "out of memory reading %s", source);
    }
    if (ne <= width + 3)
        return line_error(err, source, ps->nonblank, "missing symbol name", line, len);
    ps->any_nonzero |= a != 0;
    /* A hidden address prints as 0; only per-cpu 'A' lines really are at 0. */
    if (a != 0 || type == 'A' || type == 'a') {
        size_t name_len = ne - (width + 3);
        if (h->n == ps->cap) {
            size_t nc = ps->cap ? ps->cap * 2 : 1024;
            struct line *grown = nc <= SIZE_MAX / sizeof *grown
                ? realloc(h->line, nc * sizeof *grown) : NULL;
            if (!grown)
                return fail(err, KMS_E_NOMEM, "out of memory reading %s", source);
            h->line = grown;
            ps->cap = nc;
        }
        if (names_room(h, ps, name_len + 1))
            return fail(err, KMS_E_NOMEM, "out of memory reading %s", source);
        if (h->n && !h->unsorted_at && a < h->line[h->n - 1].addr)
            h->unsorted_at = h->n;
        struct line *l = &h->line[h->n++];
        memcpy(h->text + ps->names_len, name, name_len);
        l->addr = a;
        l->size = -1;
        l->name = (uint32_t)ps->names_len;
        l->name_len = (uint32_t)name_len;
        l->who = mod ? WHO(WHO_MODULE, mod) : WHO(WHO_CORE, 0);
        l->type = type;
        l->binding = letter_binding(type); /* an entry's (take_entry) or a .ko's replace these */
        l->prefer = letter_prefer(type);
        l->answers = 0;
        ps->names_len += name_len;
        h->text[ps->names_len++] = 0;
        h->core_lines += mod == 0;
        if (mod && h->core_lines == h->n - 1) /* the first */
            h->modules_from = h->n - 1;
        if (!mod && find_anchors(h->anchors, (uint32_t)(h->n - 1), name, name_len))
            return fail(err, KMS_E_NOMEM, "out of memory reading %s", source);
    }
    return KMS_OK;
}

/* The first "\n" from P on (before END), NULL none; *TAB: the first '\t'
 * before it (before END when there is none), NULL none.  Both are found in
 * one pass, 16 bytes at a time where SSE2 is: a line is two searches
 * otherwise (its end, and the tab before a module's name), each a call. */
static inline const char *find_eol(const char *p, const char *end, const char **tab)
{
    *tab = NULL;
#ifdef SCAN_SSE2
    const __m128i nl = _mm_set1_epi8('\n'), ht = _mm_set1_epi8('\t');
    for (; end - p >= 16; p += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        unsigned at_nl = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, nl));
        unsigned at_tab = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, ht));
        if (at_nl)
            at_tab &= (1u << __builtin_ctz(at_nl)) - 1; /* the tabs before it */
        if (at_tab && !*tab)
            *tab = p + __builtin_ctz(at_tab);
        if (at_nl)
            return p + __builtin_ctz(at_nl);
    }
#endif
    const char *e = memchr(p, '\n', (size_t)(end - p));
    if (!*tab)
        *tab = memchr(p, '\t', (size_t)((e ? e : end) - p));
    return e;
}

/* The lines of T (LEN bytes) ending in "\n", and with FINAL the rest as the
 * last line; *USED: the bytes read. */
static int parse_block(kms_handle *h, struct parse *ps, const char *t, size_t len, int final,
                       size_t *used, kms_error *err)
{
    size_t s = 0;
    const char *tab;
    for (;;) {
        const char *nl = find_eol(t + s, t + len, &tab);
        if (!nl)
            break;
        if (parse_line(h, ps, t + s, (size_t)(nl - (t + s)), 1, tab, err))
            return err ? err->code : KMS_E_KALLSYMS;
        s = (size_t)(nl - t) + 1;
    }
    if (final && s < len) {
        if (parse_line(h, ps, t + s, len - s, 0, tab, err))
            return err ? err->code : KMS_E_KALLSYMS;
        s = len;
    }
    *used = s;
    return KMS_OK;
}

/* Where kallsyms text comes from: a file read block by block (never held
 * whole: only the names are kept), or a caller's buffer, read in place. */
struct kallsyms_source {
    int fd;               /* -1: the buffer */
    const char *buf;
    size_t len;           /* the buffer's length; for a file its size when known, else 0 */
    const char *name;
};

#define READ_BLOCK ((size_t)1 << 18)

/*
 * Huge pages (THP, where the kernel gives them on request) for the names
 * and rows: each 2 MiB of them is then one page fault, not 512.  Asked for
 * only where the text read so far predicts they will be filled (each
 * untouched 2 MiB that the prediction fills to 7/8 at least): the rest
 * stays in small pages, so that little more memory is held than they fill
 * (the predictions err by a few percent, their last one by none).  The arrays
 * begin on a huge page (alloc_hugeable), and the first prediction is made
 * before any line is parsed (advise_sample): the first 2 MiB too are huge.
 */
static void *alloc_hugeable(size_t size)
{
    if (size < HUGE_PAGE)
        return malloc(size);
    if (size > SIZE_MAX - HUGE_PAGE)
        return NULL;
    return aligned_alloc(HUGE_PAGE, round_up(size, HUGE_PAGE));
}

/* BASE: an array of CAP bytes, USED of them filled, EXPECT predicted. */
static void advise_huge(void *base, size_t cap, size_t *asked, size_t used, uint64_t expect)
{
#ifdef MADV_HUGEPAGE
    uintptr_t b = (uintptr_t)base;
    size_t from = *asked > used ? *asked : used;
    uintptr_t lo = (b + from + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t hi = (b + (expect < cap ? (uintptr_t)expect : cap) + HUGE_PAGE / 8) & ~(HUGE_PAGE - 1);
    if (hi > ((b + cap) & ~(HUGE_PAGE - 1)))
        hi = (b + cap) & ~(HUGE_PAGE - 1);
    if (hi > lo && madvise((void *)lo, hi - lo, MADV_HUGEPAGE) == 0)
        *asked = hi - b;
#else
    (void)base, (void)cap, (void)asked, (void)used, (void)expect;
#endif
}

/* Before the first line is parsed: the rows and names of TOTAL bytes of
 * text as its first LEN bytes at T predict them (lines as dense, each with
 * the first line's address width), asked huge. */
static void advise_sample(kms_handle *h, struct parse *ps, const char *t, size_t len,
                          uint64_t total)
{
    size_t lines = 0;
    for (const char *p = t, *end = t + len; (p = memchr(p, '\n', (size_t)(end - p))); p++)
        lines++;
    const char *sp = memchr(t, ' ', len);
    uint64_t per_line = (sp ? (uint64_t)(sp - t) : 0) + 4; /* "ADDRESS T " and "\n" */
    if (!lines || lines * per_line >= len)
        return;
    advise_huge(h->line, ps->cap * sizeof *h->line, &ps->rows_asked, 0,
                lines * sizeof *h->line * total / len);
    advise_huge(h->text, ps->names_cap, &ps->names_asked, 0, (len - lines * per_line) * total / len);
}

/* kmodsyms.kallsyms.Kallsyms._parse: the rows and names of every line. */
static int parse_kallsyms(kms_handle *h, const struct kallsyms_source *src, kms_error *err)
{
    struct parse ps = {0};
    size_t expect = src->len ? src->len : READ_BLOCK; /* the names are at most this */
    struct scratch_mark mark = scratch_mark(h);
    char *block;
    int rc;

    ps.source = src->name;
    h->nmods = 1;
    /* Room for the names and rows of EXPECT bytes of text, each line at
     * least 13: pages are touched only as rows and names fill them. */
    ps.names_cap = expect + 8;
    ps.cap = expect / 13 + 1;
    if (ps.cap > SIZE_MAX / sizeof *h->line || /* a 32-bit host's multi-GB buffer */
        !(h->text = alloc_hugeable(ps.names_cap)) ||
        !(h->line = alloc_hugeable(ps.cap * sizeof *h->line))) {
        rc = fail(err, KMS_E_NOMEM, "out of memory reading %s", src->name);
        goto out;
    }
    if (src->fd < 0) {
        size_t used;
        advise_sample(h, &ps, src->buf, src->len < READ_BLOCK ? src->len : READ_BLOCK, src->len);
        if (src->len && (rc = parse_block(h, &ps, src->buf, src->len, 1, &used, err)))
            goto out;
    } else {
        size_t cap = READ_BLOCK, have = 0, total = 0;
        if (!SCRATCH(h, block, cap)) {
            rc = fail(err, KMS_E_NOMEM, "out of memory reading %s", src->name);
            goto out;
        }
        for (;;) {
            ssize_t got = read(src->fd, block + have, cap - have);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0) {
                rc = fail(err, KMS_E_IO, "cannot read %s: %s", src->name, strerror(errno));
                goto out;
            }
            total += (size_t)got;
            if (total >= UINT32_MAX) {
                rc = fail(err, KMS_E_KALLSYMS, "%s: larger than 4 GiB: not a kallsyms file",
                          src->name);
                goto out;
            }
            size_t used;
            have += (size_t)got;
            if (total == have && src->len)
                advise_sample(h, &ps, block, have, src->len);
            if ((rc = parse_block(h, &ps, block, have, got == 0, &used, err)))
                goto out;
            if (got == 0)
                break;
            if (total < src->len) { /* the rows and names of the whole file, at this rate */
                uint64_t rows = (uint64_t)h->n * sizeof *h->line, left = src->len - total;
                advise_huge(h->line, ps.cap * sizeof *h->line, &ps.rows_asked, rows,
                            rows + rows * left / total);
                advise_huge(h->text, ps.names_cap, &ps.names_asked, ps.names_len,
                            ps.names_len + (uint64_t)ps.names_len * left / total);
            }
            memmove(block, block + used, have - used);
            have -= used;
            if (have == cap) { /* a line longer than the block */
                char *nb;
                if (cap > SIZE_MAX / 4 || !SCRATCH(h, nb, cap *= 2)) {
                    rc = fail(err, KMS_E_NOMEM, "out of memory reading %s", src->name);
                    goto out;
                }
                block = memcpy(nb, block, have);
            }
        }
    }
    if (h->core_lines == h->n)
        h->modules_from = h->n;
    if (ps.nonblank == 0) {
        rc = fail(err, KMS_E_KALLSYMS, "%s: empty: no symbols (is this a kallsyms file?)",
                  src->name);
        goto out;
    }
    if (!ps.any_nonzero) {
        rc = fail(err, KMS_E_HIDDEN, "%s: every address is 0: the kernel hides them from this "
                  "user (kernel.kptr_restrict); run as root, or set "
                  "'sysctl kernel.kptr_restrict=0'", src->name);
        goto out;
    }
    if (names_room(h, &ps, 0) || !(h->mod_name = calloc(h->nmods, sizeof *h->mod_name)) ||
        !(h->mod_origin = calloc(h->nmods, 1))) {
        rc = fail(err, KMS_E_NOMEM, "out of memory reading %s", src->name);
        goto out;
    }
    memset(h->text + ps.names_len, 0, 8);
    h->mod_name[0] = vmlinux_list[0];
    h->mod_origin[0] = KMS_ORIGIN_CORE;
    for (uint32_t m = 1; m < h->nmods; m++) {
        h->mod_name[m] = h->text + ps.tagoff[m];
        h->mod_origin[m] = kms_is_pseudo_module(h->mod_name[m]) ? KMS_ORIGIN_PSEUDO
                                                                : KMS_ORIGIN_LOADABLE;
    }
    rc = KMS_OK;
out:
    scratch_release(h, mark);
    free(ps.tagh);
    free(ps.tagoff);
    free(ps.taglen);
    return rc;
}

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

static int line_name_is(const kms_handle *h, size_t i, const char *s, size_t len)
{
    return h->line[i].name_len == len && memcmp(line_name(h, i), s, len) == 0;
}

/* ------------------------------------------------------------ sorting */

struct keyed {
    uint64_t key;
    uint32_t idx;
};

/* Stable sort of A (N items) by key: insertion for a few, else a radix
 * sort, a byte of the key at a time from the least significant (a byte all
 * keys share is skipped: kernel addresses share their top half).  TMP:
 * room for N items. */
static void stable_sort(struct keyed *a, size_t n, struct keyed *tmp)
{
    size_t i;
    if (n <= 16) { /* a section's few entries */
        for (i = 1; i < n; i++) {
            struct keyed x = a[i];
            size_t j = i;
            for (; j > 0 && a[j - 1].key > x.key; j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    for (i = 1; i < n && a[i].key >= a[i - 1].key; i++)
        ;
    if (i >= n)
        return;
    size_t count[8][256];
    memset(count, 0, sizeof count);
    for (i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            count[b][a[i].key >> 8 * b & 0xFF]++;
    struct keyed *src = a, *dst = tmp;
    for (int b = 0; b < 8; b++) {
        size_t *at = count[b], sum = 0;
        if (at[src[0].key >> 8 * b & 0xFF] == n)
            continue;
        for (int d = 0; d < 256; d++) { /* each digit's first place */
            size_t c = at[d];
            at[d] = sum;
            sum += c;
        }
        for (i = 0; i < n; i++)
            dst[at[src[i].key >> 8 * b & 0xFF]++] = src[i];
        struct keyed *sw = src;
        src = dst;
        dst = sw;
    }
    if (src != a)
        memcpy(a, src, n * sizeof *a);
}

/* The same, for input whose long sorted prefix (kallsyms' core lines) is
 * followed by a few unsorted lines (loaded modules list theirs in symbol
 * table order): the rest is sorted alone, then merged once. */
static int sort_keyed(kms_handle *h, struct keyed *a, size_t n)
{
    size_t p = 1;
    struct keyed *tmp;
    while (p < n && a[p].key >= a[p - 1].key)
        p++;
    if (p >= n)
        return 0;
    if (!SCRATCH(h, tmp, n))
        return -1;
    stable_sort(a + p, n - p, tmp);
    size_t i = 0, j = p, o = 0;
    while (i < p && j < n)
        tmp[o++] = a[j].key < a[i].key ? a[j++] : a[i++];
    while (i < p)
        tmp[o++] = a[i++];
    while (j < n)
        tmp[o++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
    return 0;
}

static size_t lower_bound(const uint64_t *v, size_t n, uint64_t x)
{
    size_t lo = 0;
    while (n > 0) {
        size_t half = n / 2;
        if (v[lo + half] < x) {
            lo += half + 1;
            n -= half + 1;
        } else {
            n = half;
        }
    }
    return lo;
}

/* ------------------------------------------------------------ names */

/* Whether line I is called the string at OFF of the string table (read no
 * further than its NUL, or within the table).  A line's name may hold a
 * NUL: then it differs, as the string would end there. */
static inline int name_eq(const kms_handle *h, size_t i, uint32_t off)
{
    const char *name = str(h, off), *l = line_name(h, i);
    uint32_t len = h->line[i].name_len, k = 0;
    /* eight bytes at a time while they lie within the table (the string
     * may end sooner: a NUL among them ends the comparison) */
    if ((uint64_t)off + len < h->count[T_STRINGS]) {
        for (; k + 8 <= len; k += 8) {
            uint64_t x, y;
            memcpy(&x, name + k, 8);
            memcpy(&y, l + k, 8);
            if (x != y || ((x - UINT64_C(0x0101010101010101)) & ~x & UINT64_C(0x8080808080808080)))
                return 0; /* differs, or the string ends here */
        }
        if ((uint64_t)off + k + 8 <= h->count[T_STRINGS]) {
            /* the rest and the string's NUL in one word: the bytes up to the
             * line's NUL the same, and none of the string's a NUL before it
             * (the masks in memory order, whichever the byte order) */
            static const unsigned char ones[16] = {255, 255, 255, 255, 255, 255, 255, 255};
            const uint64_t low7 = UINT64_C(0x7F7F7F7F7F7F7F7F), high = ~low7;
            uint64_t x, y, upto_nul, before_nul;
            memcpy(&x, name + k, 8);
            memcpy(&y, l + k, 8); /* (the names end in 8 spare bytes) */
            memcpy(&upto_nul, ones + 7 - (len - k), 8);
            memcpy(&before_nul, ones + 8 - (len - k), 8);
            uint64_t nonzero = (((x & low7) + low7) | x) & high; /* no carry between bytes */
            return !((x ^ y) & upto_nul) && !(~nonzero & high & before_nul);
        }
    }
    while (k < len && name[k] == l[k] && name[k])
        k++;
    return k == len && name[len] == 0;
}

/* Lines called NAME (LEN bytes), in kallsyms order: call FN(line) for each
 * until it returns nonzero; that line, or -1.  A scan (no name index is
 * kept: lookups by name are rare, and the lines' lengths are compared first). */
static long find_lines(const kms_handle *h, const char *name, size_t len,
                       int (*fn)(const kms_handle *, size_t, void *), void *arg)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->line[i].name_len == len && memcmp(line_name(h, i), name, len) == 0 && fn(h, i, arg))
            return (long)i;
    return NO;
}

/* ------------------------------------------------------------ placement */

static uint64_t sym_link(const kms_handle *h, uint32_t s)
{
    const unsigned char *sym = ent(h, T_SYMBOLS, s);
    return le64(ent(h, T_SECTIONS, le32(sym + SYM_SECTION)) + SEC_ADDRESS) + le64(sym + SYM_VALUE);
}

static const char *sym_name(const kms_handle *h, uint32_t s)
{
    return str(h, le32(ent(h, T_SYMBOLS, s) + SYM_NAME));
}

/* placement.MISPLACED_ANCHORS_ALLOWED: in kallsyms of the file's own kernel,
 * every anchor it shows is at its link address plus its segment's shift. */
#define MISPLACED_ANCHORS_ALLOWED 0u
/* placement.SHIFT_ALIGNMENT: KASLR shifts by whole pages. */
#define SHIFT_ALIGNMENT 4096u

/* An anchor in a section without a link address locates nothing: skipped. */
static int anchor_usable(const kms_handle *h, uint32_t a)
{
    uint32_t s = le32(ent(h, T_ANCHORS, a));
    return le64(ent(h, T_SECTIONS, le32(ent(h, T_SYMBOLS, s) + SYM_SECTION)) + SEC_ADDRESS) !=
           NO_ADDRESS;
}

/*
 * LinkedPlacement._shift_segments: each segment's shift is the one most of
 * its anchors' core lines vote for (ties: the lowest); each anchor is then
 * placed (a line of its name at link address + shift), misplaced (lines of
 * its name, none there) or absent (AnchorCheck); a segment none of whose
 * anchors is present moves with the segments around it when they moved
 * alike; each section with a link address moves with the (last) segment
 * holding it.
 */
static int place_sections(kms_handle *h, const char *syms_path, const char *source, int check,
                          kms_error *err)
{
    uint32_t nseg = h->count[T_SEGMENTS], nanch = h->count[T_ANCHORS];
    uint32_t nsec = h->count[T_SECTIONS];
    uint64_t *shift = calloc(nseg ? nseg : 1, sizeof *shift);
    uint8_t *known = calloc(nseg ? nseg : 1, 1);
    uint8_t *usable = malloc(nanch ? nanch : 1);
    uint32_t *order = malloc((nseg ? nseg : 1) * sizeof *order);
    const struct anchor_line *found = h->anchors->found;
    size_t nfound = h->anchors->nfound;
    uint32_t verified = 0, misplaced = 0, absent = 0, absent_functions = 0;
    const char *example_absent = "";
    struct scratch_mark mark = scratch_mark(h);
    int rc = KMS_OK;

    if (!shift || !known || !usable || !order) {
        rc = fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
        goto out;
    }
    /* the core lines of each anchor's name were found as kallsyms was read */
    for (uint32_t a = 0; a < nanch; a++)
        usable[a] = (uint8_t)anchor_usable(h, a);
    for (uint32_t seg = 0; seg < nseg; seg++) {
        /* votes: each anchor once for each distinct shift its lines imply */
        size_t nvotes = 0, cap = 0;
        uint32_t best = 0;
        uint64_t *vs = NULL;
        uint32_t *vc = NULL;
        for (uint32_t a = 0; a < nanch; a++) {
            const unsigned char *an = ent(h, T_ANCHORS, a);
            if (le32(an + 4) != seg || !usable[a])
                continue;
            uint64_t link = sym_link(h, le32(an));
            for (size_t f = 0; f < nfound; f++) {
                if (found[f].anchor != a)
                    continue;
                uint64_t sh = h->line[found[f].line].addr - link;
                /* distinct within this anchor's shifts */
                int dup = 0;
                for (size_t g = 0; g < f; g++)
                    if (found[g].anchor == a && h->line[found[g].line].addr - link == sh)
                        dup = 1;
                if (dup)
                    continue;
                size_t v = 0;
                while (v < nvotes && vs[v] != sh)
                    v++;
                if (v == nvotes) {
                    if (nvotes == cap) {
                        size_t nc = cap ? 2 * cap : 16;
                        uint64_t *nvs = realloc(vs, nc * sizeof *nvs);
                        if (nvs)
                            vs = nvs;
                        uint32_t *nvc = nvs ? realloc(vc, nc * sizeof *nvc) : NULL;
                        if (!nvc) {
                            free(vs);
                            free(vc);
                            rc = fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
                            goto out;
                        }
                        vc = nvc;
                        cap = nc;
                    }
                    vs[nvotes] = sh;
                    vc[nvotes++] = 0;
                }
                vc[v]++;
            }
        }
        uint64_t best_shift = 0;
        for (size_t v = 0; v < nvotes; v++) /* most votes; ties: the lowest shift */
            if (v == 0 || vc[v] > best || (vc[v] == best && vs[v] < best_shift)) {
                best_shift = vs[v];
                best = vc[v];
            }
        /* a shift by part of a page is no KASLR: the segment stays unknown */
        if (nvotes && best_shift % SHIFT_ALIGNMENT == 0) {
            shift[seg] = best_shift;
            known[seg] = 1;
        }
        free(vs);
        free(vc);
        for (uint32_t a = 0; a < nanch; a++) {
            const unsigned char *an = ent(h, T_ANCHORS, a);
            if (le32(an + 4) != seg || !usable[a])
                continue;
            uint32_t s = le32(an);
            uint64_t at = sym_link(h, s) + shift[seg];
            int present = 0, placed = 0;
            for (size_t f = 0; f < nfound; f++)
                if (found[f].anchor == a) {
                    present = 1;
                    placed |= known[seg] && h->line[found[f].line].addr == at;
                }
            if (placed)
                verified++;
            else if (present)
                misplaced++;
            else {
                absent++;
                if (ent(h, T_SYMBOLS, s)[SYM_TYPE] == 2 /* STT_FUNC */) {
                    if (!absent_functions)
                        example_absent = sym_name(h, s);
                    absent_functions++;
                }
            }
        }
    }
    /* _shift_between: segments in address order */
    for (uint32_t g = 0; g < nseg; g++)
        order[g] = g;
    for (uint32_t g = 1; g < nseg; g++) { /* stable insertion sort by start */
        uint32_t x = order[g], j = g;
        while (j > 0 && le64(ent(h, T_SEGMENTS, order[j - 1])) > le64(ent(h, T_SEGMENTS, x))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    for (uint32_t r = 0; r < nseg; r++) {
        uint32_t seg = order[r];
        long below = NO, above = NO;
        if (known[seg])
            continue;
        for (uint32_t q = 0; q < r; q++)
            if (known[order[q]])
                below = order[q];
        for (uint32_t q = r + 1; q < nseg && above < 0; q++)
            if (known[order[q]])
                above = order[q];
        if (below >= 0 && above >= 0 && shift[below] == shift[above]) {
            shift[seg] = shift[below];
            known[seg] = 1;
        }
    }
    h->anchors_verified = verified;
    if (check) {
        uint32_t present = verified + misplaced;
        if (verified == 0 || misplaced > MISPLACED_ANCHORS_ALLOWED) {
            rc = fail(err, KMS_E_STALE, "%s does not match %s: of its %u anchor symbols, %u are "
                      "where its link addresses say, %u elsewhere and %u absent; they are of "
                      "different kernels: use the dtrace_syms built for the kernel whose "
                      "kallsyms this is (or rebuild it)", syms_path, source, present + absent,
                      verified, misplaced, absent);
            goto out;
        }
        if (absent_functions) {
            rc = fail(err, KMS_E_KALLSYMS, "%s lacks %u function symbols that every kallsyms of "
                      "this kernel lists (such as %.80s), though the %u it has are where %s says: "
                      "it is truncated or filtered; read /proc/kallsyms again, whole and as root",
                      source, absent_functions, example_absent, verified, syms_path);
            goto out;
        }
    }
    /* Placed extents: sections moved by a known shift, placement != 0 (as
     * int8, the Python's dtype), size > 0; by base, stably. */
    if (!ALLOC(h, placed, nsec)) {
        rc = fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
        goto out;
    }
    struct keyed *ext;
    if (!SCRATCH(h, ext, nsec)) {
        rc = fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
        goto out;
    }
    size_t next = 0;
    for (uint32_t sec = 0; sec < nsec; sec++) {
        const unsigned char *se = ent(h, T_SECTIONS, sec);
        uint64_t address = le64(se + SEC_ADDRESS);
        long seg_of = NO;
        if (address == NO_ADDRESS)
            continue;
        for (uint32_t g = 0; g < nseg; g++) {
            const unsigned char *sg = ent(h, T_SEGMENTS, g);
            if (known[g] && address >= le64(sg) && address <= le64(sg + 8))
                seg_of = g;
        }
        if (seg_of < 0)
            continue;
        h->section_base[sec] = address + shift[seg_of];
        h->placed[sec] = (uint8_t)le32(se + SEC_PLACEMENT) != 0 ? PLACED : 0;
        if (h->placed[sec] && le64(se + SEC_SIZE) > 0) {
            ext[next].key = h->section_base[sec];
            ext[next++].idx = sec;
        }
    }
    if (sort_keyed(h, ext, next) || !ALLOC(h, ext_start, next) || !ALLOC(h, ext, next)) {
        rc = fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
        goto out;
    }
    h->next = (uint32_t)next;
    for (size_t k = 0; k < next; k++) {
        h->ext_start[k] = ext[k].key;
        h->ext[k].end = ext[k].key + le64(ent(h, T_SECTIONS, ext[k].idx) + SEC_SIZE);
        h->ext[k].sec = ext[k].idx;
    }
out:
    scratch_release(h, mark);
    free(shift);
    free(known);
    free(usable);
    free(order);
    return rc;
}

/* What prefer_cmp weighs after the size: a typed symbol (STT_* != 0) over
 * none, then global over weak over local. */
static uint8_t symbol_prefer(int typed, uint8_t binding)
{
    return (uint8_t)((typed != 0) << 2 | (binding == 1 ? 2 : binding == 2 ? 1 : 0));
}

/*
 * Entries by the key section << 32 | value (LinkedPlacement._entry_keys):
 * one array of rows grouped by section (a counting sort), each section's
 * by value, equal values in entry order (as the Python's stable sort keeps
 * equal keys).  Lines in address order come in each placed section's
 * together and by offset, so a cursor walking that section's rows finds
 * each line's entries without a search; a row holds what a line compares
 * (value and name), so that the walk reads the symbol table only for the
 * entry taken.
 */
struct entry_row {
    uint32_t value;      /* the entry's value (every value is below 2^32, or nothing is keyed) */
    uint32_t name;       /* its name's offset in the string table */
    uint32_t sym;        /* the entry */
};
struct entry_keys {
    struct entry_row *row;
    uint32_t *first;     /* per section: its first row; first[nsec]: the rows */
};

/* Room to sort a section's rows (sort_rows): its keys twice, its rows once. */
struct row_sort {
    uint64_t *key, *tmp;
    struct entry_row *copy;
};

/*
 * Stable sort of N rows by value: insertion for a few, else each row's
 * value << 32 | its place sorted (one integer each, all distinct: equal
 * values keep their order), runs of 8 by insertion then merged bottom-up
 * from one array to the other, and the rows put in that order (a section's
 * rows are in name order, their values in none).
 */
static void sort_rows(struct entry_row *a, size_t n, const struct row_sort *rs)
{
    size_t i;
    if (n <= 16) {
        for (i = 1; i < n; i++) {
            struct entry_row x = a[i];
            size_t j = i;
            for (; j > 0 && a[j - 1].value > x.value; j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    for (i = 1; i < n && a[i].value >= a[i - 1].value; i++)
        ;
    if (i >= n)
        return;
    uint64_t *src = rs->key, *dst = rs->tmp;
    for (i = 0; i < n; i++)
        src[i] = (uint64_t)a[i].value << 32 | i;
    for (size_t r = 0; r < n; r += 8) {
        size_t top = r + 8 < n ? r + 8 : n;
        for (i = r + 1; i < top; i++) {
            uint64_t x = src[i];
            size_t j = i;
            for (; j > r && src[j - 1] > x; j--)
                src[j] = src[j - 1];
            src[j] = x;
        }
    }
    for (size_t w = 8; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t m = lo + w < n ? lo + w : n, hi = m + w < n ? m + w : n, p = lo, q = m, o = lo;
            while (p < m && q < hi) { /* without a branch on the keys: they are in no order */
                uint64_t x = src[p], y = src[q];
                int later = y < x;
                dst[o++] = later ? y : x;
                q += later;
                p += !later;
            }
            while (p < m)
                dst[o++] = src[p++];
            while (q < hi)
                dst[o++] = src[q++];
        }
        uint64_t *sw = src;
        src = dst;
        dst = sw;
    }
    memcpy(rs->copy, a, n * sizeof *a);
    for (i = 0; i < n; i++)
        a[i] = rs->copy[(uint32_t)src[i]];
}

/* The entries keyed (ek): 1, or 0 when some value is 2^32 or more (the
 * Python keys entries only when every value is below it); -1 out of memory. */
static int index_entries(kms_handle *h, struct entry_keys *ek)
{
    uint32_t nsym = h->count[T_SYMBOLS], nsec = h->count[T_SECTIONS], most = 0;
    uint32_t *first = ek->first = h->section_rows;
    struct row_sort rs;
    if (h->wide_values)
        return 0;
    if (!SCRATCH(h, ek->row, nsym))
        return -1;
    /* each section's rows counted at first[sec + 2] (validate_syms), then
     * where they begin at first[sec + 1], then (filled) where they end */
    for (uint32_t sec = 0; sec < nsec; sec++) {
        most = first[sec + 2] > most ? first[sec + 2] : most;
        first[sec + 2] += first[sec + 1];
    }
    for (uint32_t s = 0; s < nsym; s++) {
        const unsigned char *sy = ent(h, T_SYMBOLS, s);
        struct entry_row *r = &ek->row[first[le32(sy + SYM_SECTION) + 1]++];
        r->value = le32(sy + SYM_VALUE);
        r->name = le32(sy + SYM_NAME);
        r->sym = s;
    }
    if (!SCRATCH(h, rs.key, most) || !SCRATCH(h, rs.tmp, most) || !SCRATCH(h, rs.copy, most))
        return -1;
    for (uint32_t sec = 0; sec < nsec; sec++)
        sort_rows(ek->row + first[sec], first[sec + 1] - first[sec], &rs);
    return 1;
}

/* The first row with KEY (its section's rows searched), or -1; *END: where
 * its section's rows end.  The key of a line whose offset is 2^32 or more
 * (a section of 4 GiB or more: damaged) has that offset's high bits ORed
 * into the section's, as the Python's key does, and matches whatever entry
 * has that key. */
static long row_with_key(const kms_handle *h, const struct entry_keys *ek, uint64_t key,
                         uint32_t *end)
{
    uint64_t sec = key >> 32;
    uint32_t value = (uint32_t)key;
    if (sec >= h->count[T_SECTIONS])
        return NO;
    size_t lo = ek->first[sec], n = ek->first[sec + 1] - lo;
    while (n > 0) {
        size_t half = n / 2;
        if (ek->row[lo + half].value < value) {
            lo += half + 1;
            n -= half + 1;
        } else {
            n = half;
        }
    }
    *end = ek->first[sec + 1];
    return lo < *end && ek->row[lo].value == value ? (long)lo : NO;
}

/* Of rows R.. (before END) with R's value, the first entry with line I's
 * name, or -1. */
static int32_t entry_named(const kms_handle *h, const struct entry_keys *ek, size_t i,
                           uint32_t r, uint32_t end)
{
    for (uint32_t value = ek->row[r].value; r < end && ek->row[r].value == value; r++)
        if (name_eq(h, i, ek->row[r].name))
            return (int32_t)ek->row[r].sym;
    return NO;
}

/* LinkedPlacement._match_entries for one line and section: the entry of SEC
 * at the line's offset with its name, or -1. */
static int32_t match_entry(const kms_handle *h, const struct entry_keys *ek, size_t i,
                           int32_t sec)
{
    uint32_t end;
    long r = row_with_key(h, ek, (uint64_t)sec << 32 | (h->line[i].addr - h->section_base[sec]),
                          &end);
    return r < 0 ? NO : entry_named(h, ek, i, (uint32_t)r, end);
}

/* Line I is entry S: what the index needs of the entry (size, binding,
 * preference) is read now, while its row is at hand. */
static inline void take_entry(kms_handle *h, size_t i, int32_t s)
{
    const unsigned char *sy = ent(h, T_SYMBOLS, (uint32_t)s);
    struct line *l = &h->line[i];
    int64_t size = (int64_t)le64(sy + SYM_SIZE);
    h->line_matched[i] = 1;
    l->size = size < 0 ? -1 : size; /* read as negative: unknown */
    l->binding = sy[SYM_BINDING] <= 2 ? sy[SYM_BINDING] : KMS_BINDING_UNKNOWN;
    l->prefer = symbol_prefer(sy[SYM_TYPE] != 0, sy[SYM_BINDING]);
}

/* The walk of one section's rows by the lines in it, in address order. */
struct cursor {
    int32_t sec;         /* its section, -1 none yet */
    uint32_t at, end;    /* the row reached, and where the section's rows end */
};

/* The first row of the key of line I in SEC, or -1; *END: where its
 * section's rows end.  Lines of SEC come in address order, so the cursor
 * only moves up its rows; an offset of 2^32 or more searches. */
static long row_of_line(const kms_handle *h, const struct entry_keys *ek, struct cursor *c,
                        size_t i, int32_t sec, uint32_t *end)
{
    uint64_t off = h->line[i].addr - h->section_base[sec];
    if (off >> 32)
        return row_with_key(h, ek, (uint64_t)sec << 32 | off, end);
    if (c->sec != sec) {
        c->sec = sec;
        c->at = ek->first[sec];
        c->end = ek->first[sec + 1];
    }
    while (c->at < c->end && ek->row[c->at].value < off)
        c->at++;
    *end = c->end;
    return c->at < c->end && ek->row[c->at].value == off ? (long)c->at : NO;
}

/* A line whose key has rows, compared LAG lines later: its entry's name and
 * row are fetched meanwhile. */
#define LAG 16
struct pending {
    uint32_t line, row, end;
};

static void settle(kms_handle *h, const struct entry_keys *ek, const struct pending *p)
{
    int32_t got = entry_named(h, ek, p->line, p->row, p->end);
    if (got >= 0)
        take_entry(h, p->line, got);
}

/* Stable merge sort of entry indices by name (strcmp); TMP: room for N. */
static void sort_by_name(const kms_handle *h, uint32_t *a, size_t n, uint32_t *tmp)
{
    if (n < 2)
        return;
    size_t m = n / 2;
    sort_by_name(h, a, m, tmp);
    sort_by_name(h, a + m, n - m, tmp);
    size_t i = 0, j = m, o = 0;
    while (i < m && j < n)
        tmp[o++] = strcmp(sym_name(h, a[j]), sym_name(h, a[i])) < 0 ? a[j++] : a[i++];
    while (i < m)
        tmp[o++] = a[i++];
    while (j < n)
        tmp[o++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

/* Compare line I's name (bytes) with NAME (strcmp order). */
static int line_name_cmp(const kms_handle *h, size_t i, const char *name)
{
    const unsigned char *p = (const unsigned char *)line_name(h, i);
    const unsigned char *q = (const unsigned char *)name;
    uint32_t len = h->line[i].name_len;
    for (uint32_t k = 0;; k++) {
        if (k == len)
            return q[k] ? -1 : 0;
        if (!q[k])
            return 1;
        if (p[k] != q[k])
            return p[k] < q[k] ? -1 : 1;
    }
}

/*
 * LinkedPlacement._attribute_lines: a core line is in the placed section
 * holding its address, and is the entry of that section at that offset with
 * its name; a line in none is a zero-size symbol at the end of a section
 * ending exactly there, if one has it; a line still in none whose name only
 * unplaced sized copies carry is ambiguous between them (_find_ambiguous).
 */
static int attribute_lines(kms_handle *h, const char *syms_path, kms_error *err)
{
    uint32_t nsym = h->count[T_SYMBOLS];
    struct scratch_mark mark = scratch_mark(h);
    struct entry_keys ek = {NULL, NULL};
    struct keyed *ends;
    uint32_t *cand, *loose;
    const char **cand_name;
    size_t nloose = 0;
    int keyed = nsym > 0 ? index_entries(h, &ek) : 0, rc = KMS_OK;

    if (keyed < 0 || !SCRATCH(h, loose, h->n)) {
        rc = fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
        goto out;
    }
    /* Lines in address order walk the extents and, in each, its section's
     * rows (no search).  The names and rows of the entries they find are
     * read at random: each is fetched LAG lines ahead of its comparison. */
    struct pending ring[LAG];
    struct cursor cur = {NO, 0, 0};
    size_t looked = 0;
    for (size_t k = 0, e = 0; k < h->n; k++) {
        size_t i = h->by_address[k];
        while (e < h->next && h->ext_start[e] <= h->line[i].addr)
            e++;
        h->line_section[i] = NO;
        if (line_module(h, i) != 0)
            continue;
        if (e == 0 || h->line[i].addr >= h->ext[e - 1].end) {
            loose[nloose++] = (uint32_t)i; /* a core line in no extent */
            continue;
        }
        int32_t sec = h->line_section[i] = (int32_t)h->ext[e - 1].sec;
        uint32_t end;
        long r = keyed ? row_of_line(h, &ek, &cur, i, sec, &end) : NO;
        if (r < 0)
            continue;
        /* the name, as long as the line's (its end may lie past the table),
         * and both cache lines a symbol's row may span */
        const char *name = str(h, ek.row[r].name);
        const unsigned char *sy = ent(h, T_SYMBOLS, ek.row[r].sym);
        PREFETCH(name);
        PREFETCH((const void *)((uintptr_t)name + h->line[i].name_len));
        PREFETCH(sy);
        PREFETCH(sy + entry_size[T_SYMBOLS] - 1);
        if (looked >= LAG)
            settle(h, &ek, &ring[looked % LAG]);
        ring[looked++ % LAG] = (struct pending){(uint32_t)i, (uint32_t)r, end};
    }
    for (size_t t = looked > LAG ? looked - LAG : 0; t < looked; t++) /* the last lines' */
        settle(h, &ek, &ring[t % LAG]);
    scratch_shrink(h, loose, nloose, sizeof *loose);
    /* Lines in no extent, at the end of placed sections ending there: the
     * sections by end (stably), each line tried against each in order; the
     * last match wins (the Python assigns all matches in turn). */
    if (!SCRATCH(h, ends, h->next)) {
        rc = fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
        goto out;
    }
    /* the Python sorts the placed sections by end in section order: the
     * extents' sections (placed, sized) taken in that order.  The extents
     * are by start: when their ends ascend too, each distinct, that is the
     * order by end (none to keep in section order), and nothing is sorted. */
    int by_start = 1;
    for (uint32_t k = 0; k < h->next; k++) {
        ends[k].key = h->ext[k].end;
        ends[k].idx = h->ext[k].sec;
        by_start &= k == 0 || ends[k].key > ends[k - 1].key;
    }
    for (uint32_t sec = 0, k = 0; !by_start && sec < h->count[T_SECTIONS] && k < h->next; sec++) {
        uint64_t size = le64(ent(h, T_SECTIONS, sec) + SEC_SIZE);
        if ((h->placed[sec] & PLACED) && size > 0) {
            ends[k].key = h->section_base[sec] + size;
            ends[k++].idx = sec;
        }
    }
    if (!by_start && sort_keyed(h, ends, h->next)) {
        rc = fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
        goto out;
    }
    if (keyed && h->next) {
        uint64_t *end_key;
        if (!SCRATCH(h, end_key, h->next)) {
            rc = fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
            goto out;
        }
        for (uint32_t k = 0; k < h->next; k++)
            end_key[k] = ends[k].key;
        /* (the loose lines are in address order: the ends' first at or above each only moves up) */
        for (size_t k = 0, first = 0; k < nloose; k++) {
            size_t i = loose[k];
            int32_t got = NO;
            while (first < h->next && end_key[first] < h->line[i].addr)
                first++;
            for (size_t j = first; j < h->next && end_key[j] == h->line[i].addr; j++) {
                int32_t m = match_entry(h, &ek, i, (int32_t)ends[j].idx);
                if (m >= 0)
                    got = m;
            }
            if (got >= 0) {
                take_entry(h, i, got);
                h->line_section[i] = (int32_t)le32(ent(h, T_SYMBOLS, (uint32_t)got) + SYM_SECTION);
            }
        }
    }
    /* Ambiguous: loose lines whose name only unplaced sized copies carry. */
    size_t ncand = 0;
    if (!SCRATCH(h, cand, nsym)) {
        rc = fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
        goto out;
    }
    for (uint32_t s = 0; s < nsym; s++) {
        const unsigned char *sy = ent(h, T_SYMBOLS, s);
        if (!(h->placed[le32(sy + SYM_SECTION)] & PLACED) && le64(sy + SYM_SIZE) > 0)
            cand[ncand++] = s;
    }
    scratch_shrink(h, cand, ncand, sizeof *cand);
    if (ncand) {
        /* by name, then index: the file's own order when it is sorted, as
         * kmodsyms writes it (checked here, not assumed) */
        if (!SCRATCH(h, cand_name, ncand)) {
            rc = fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
            goto out;
        }
        size_t c = 1;
        cand_name[0] = sym_name(h, cand[0]);
        for (; c < ncand; c++) {
            cand_name[c] = sym_name(h, cand[c]);
            if (strcmp(cand_name[c - 1], cand_name[c]) > 0)
                break;
        }
        uint32_t *tmp;
        if (c < ncand && !SCRATCH(h, tmp, ncand)) {
            rc = fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
            goto out;
        }
        if (c < ncand)
            sort_by_name(h, cand, ncand, tmp);
        for (c = 0; c < ncand; c++)
            cand_name[c] = sym_name(h, cand[c]);
        for (size_t k = 0; k < nloose; k++) {
            size_t i = loose[k];
            if (h->line_section[i] >= 0)
                continue;
            size_t lo = 0, hi = ncand;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (line_name_cmp(h, i, cand_name[mid]) > 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            size_t end = lo;
            while (end < ncand && line_name_cmp(h, i, cand_name[end]) == 0)
                end++;
            if (end == lo)
                continue;
            if (h->namb % 64 == 0) {
                size_t nc = h->namb + 64;
                uint32_t *nf = realloc(h->amb_first, nc * sizeof *nf);
                if (nf)
                    h->amb_first = nf;
                uint32_t *nn = nf ? realloc(h->amb_count, nc * sizeof *nn) : NULL;
                if (!nn) {
                    rc = fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
                    goto out;
                }
                h->amb_count = nn;
            }
            h->line[i].who = WHO(WHO_AMBIGUOUS, h->namb);
            h->amb_first[h->namb] = (uint32_t)lo;
            h->amb_count[h->namb++] = (uint32_t)(end - lo);
        }
    }
    if (h->namb) { /* each candidate's module list */
        if (!ALLOC(h, cand_list, ncand) || !ALLOC(h, cand_modset, ncand)) {
            rc = fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
            goto out;
        }
        for (size_t c = 0; c < ncand; c++) {
            uint32_t modset = le32(ent(h, T_SYMBOLS, cand[c]) + 4);
            const unsigned char *ms = ent(h, T_MODSETS, modset);
            h->cand_modset[c] = modset;
            h->cand_list[c].nmodules = le32(ms + 4);
            h->cand_list[c].modules = h->member_name + le32(ms);
            if (!h->cand_list[c].nmodules) {
                h->cand_list[c].nmodules = 1;
                h->cand_list[c].modules = vmlinux_list;
            }
        }
    }
out:
    scratch_release(h, mark);
    return rc;
}

/* ------------------------------------------------------------ the index */

static int has_prefix(const kms_handle *h, size_t i, const char *p)
{
    return h->line[i].name_len >= 6 && memcmp(line_name(h, i), p, 6) == 0;
}

/* Preference among intervals of one start (Resolver._build_index): the
 * greater is preferred, i.e. sorts later. */
static int prefer_cmp(const kms_handle *h, uint32_t a, uint32_t b)
{
    int64_t la = h->line[a].size, lb = h->line[b].size;
    if (la != lb)
        return la < lb ? 1 : -1; /* smaller size preferred */
    uint8_t pa = h->line[a].prefer, pb = h->line[b].prefer;
    if (pa != pb)
        return pa > pb ? 1 : -1;
    /* the name that sorts first is preferred; equal names: the later line */
    size_t na = h->line[a].name_len, nb = h->line[b].name_len;
    int c = memcmp(line_name(h, a), line_name(h, b), na < nb ? na : nb);
    if (c == 0 && na != nb)
        c = na < nb ? -1 : 1;
    if (c)
        return c < 0 ? 1 : -1;
    return a > b ? 1 : -1;
}

/* resolver._core_ranges, what one pass over the lines gathers of the core
 * lines that may answer: their lowest and highest addresses, and where the
 * (last) line of each marker is. */
#define MARKER(s) {s, sizeof s - 1}
static const struct {
    const char *name;
    uint32_t len;
} core_marker[4] = {MARKER("_etext"), MARKER("_sinittext"), MARKER("_einittext"), MARKER("_end")};

struct core_seen {
    uint64_t lowest, highest, at[4];
    int seen[4], any;
};

static void core_line(const kms_handle *h, size_t i, struct core_seen *c)
{
    const struct line *l = &h->line[i];
    c->any = 1;
    c->lowest = l->addr < c->lowest ? l->addr : c->lowest;
    c->highest = l->addr > c->highest ? l->addr : c->highest;
    if (l->name_len > sizeof "_sinittext" - 1 || h->text[l->name] != '_') /* no marker */
        return;
    for (int k = 0; k < 4; k++)
        if (line_name_is(h, i, core_marker[k].name, core_marker[k].len)) {
            c->at[k] = l->addr; /* the last such line, as the Python's dict keeps */
            c->seen[k] = 1;
        }
}

static int in_core_ranges(const kms_handle *h, uint64_t q)
{
    /* the last range starting at or below q (the starts are ascending) */
    long k = NO;
    for (uint32_t r = 0; r < h->ncore_ranges; r++)
        if (h->core_range[2 * r] <= q)
            k = r;
    return k >= 0 && q <= h->core_range[2 * k + 1];
}

/* The address of the K-th line by address. */
static inline uint64_t addr_at(const kms_handle *h, size_t k)
{
    return h->line[h->by_address[k]].addr;
}

/* How many lines are at or below X. */
static size_t upper_bound_by_address(const kms_handle *h, uint64_t x)
{
    size_t lo = 0, n = h->n;
    while (n > 0) {
        size_t half = n / 2;
        if (addr_at(h, lo + half) <= x) {
            lo += half + 1;
            n -= half + 1;
        } else {
            n = half;
        }
    }
    return lo;
}

/* resolver._core_ranges: where core lines answer (the kernel's is_ksym_addr()). */
static void core_ranges(kms_handle *h, const struct core_seen *c)
{
    h->ncore_ranges = 0;
    if (!c->any)
        return;
    h->core_range[0] = c->lowest;
    h->core_range[1] = c->highest;
    h->ncore_ranges = 1;
    if (!c->seen[0] || c->seen[3])
        return;
    /* a core line that may answer past _etext (outside the init text when
     * both its markers are seen): every symbol is listed */
    int init = c->seen[1] && c->seen[2];
    const uint64_t *at = c->at;
    if (c->highest > at[0] && (!init || c->highest > at[2]))
        return;
    if (init) /* one below the init text? the lines just above _etext say */
        for (size_t k = upper_bound_by_address(h, at[0]); k < h->n && addr_at(h, k) < at[1]; k++)
            if (line_module(h, h->by_address[k]) == 0 && h->line[h->by_address[k]].answers)
                return;
    h->core_range[1] = at[0];
    if (init) {
        h->core_range[2] = at[1];
        h->core_range[3] = at[2];
        h->ncore_ranges = 2;
    }
}

/*
 * Resolver._regions: every line's region, the end of each group's (a
 * loaded module's lines inside its core, as the kernel says, apart from
 * those outside it), the lines that may answer by address, and which
 * extents queries see.  The same pass notes which placed sections hold
 * text, names each core line's object, and gathers the core ranges'.
 */
static int regions(kms_handle *h, kms_error *err)
{
    size_t n = h->n, nmods = h->nmods, k = 0;
    const uint8_t *origin = h->mod_origin;
    struct core_seen core = {UINT64_MAX, 0, {0, 0, 0, 0}, {0, 0, 0, 0}, 0};
    /* groups: two per module (inside its core, outside), then one per
     * pseudo-module line (at most the lines not of the core) */
    size_t most = 2 * nmods + (n - h->core_lines);
    uint64_t *highest;
    if (!SCRATCH(h, h->region_end, most))
        return fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    struct scratch_mark mark = scratch_mark(h);
    if (!SCRATCH(h, highest, most))
        return fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    memset(highest, 0, 2 * nmods * sizeof *highest);
    h->line_region = h->line_section; /* rewritten in place: a placed section stays */
    for (size_t i = 0; i < n; i++) {
        struct line *l = &h->line[i];
        int32_t sec = h->line_section[i];
        uint32_t mod = line_module(h, i);
        size_t g;
        if (sec >= 0) {
            if (l->type == 't' || l->type == 'T')
                h->placed[sec] |= HOLDS_TEXT;
            if (WHO_TAG(l->who) == WHO_CORE)
                l->who = WHO(WHO_OBJECT, h->section_object[sec]);
        }
        l->answers = l->type != 'A' &&
                     !(mod && kms_is_mapping_symbol(line_name(h, i), l->name_len));
        if (origin[mod] == KMS_ORIGIN_PSEUDO) {
            g = 2 * nmods + k++;
            highest[g] = 0;
        } else {
            /* (the core kernel is no loaded module: it has no core to be outside) */
            g = 2 * (size_t)mod + (size_t)(mod && kms_modules_outside_core(&h->mods, mod, l->addr));
        }
        if (!l->answers)
            g = 1;
        else if (mod == 0)
            core_line(h, i, &core);
        h->line_region[i] = sec >= 0 ? sec : -1 - (int32_t)g;
        if (l->addr > highest[g])
            highest[g] = l->addr;
    }
    for (size_t g = 0; g < 2 * nmods + k; g++) {
        size_t above = upper_bound_by_address(h, highest[g]);
        uint64_t end = g < 2 ? highest[g] : above < n ? addr_at(h, above) - 1 : UINT64_MAX;
        uint64_t core_last;
        int module = g >= 2 && g < 2 * nmods && g % 2 == 0;
        if (module && kms_modules_core_last(&h->mods, (uint32_t)(g / 2), &core_last)) {
            if (core_last < end)
                end = core_last; /* within its core, as the kernel says */
        } else if (module && above >= n && highest[g] <= UINT64_MAX - 4095 &&
                   highest[g] + 4095 < end) {
            end = highest[g] + 4095; /* the highest module, its end unknown: a page */
        }
        /* a pseudo-module line (its group's only one) answers at most a page;
         * wraps, as the Python's uint64 */
        if (g >= 2 * nmods && highest[g] + 4095 < end)
            end = highest[g] + 4095;
        h->region_end[g] = end;
    }
    scratch_release(h, mark);
    core_ranges(h, &core);
    /* the extents at or above the lowest core line that may answer */
    uint64_t lowest = h->ncore_ranges ? h->core_range[0] : 0;
    h->ext_first = (uint32_t)lower_bound(h->ext_start, h->next, lowest);
    return KMS_OK;
}

static int build_index(kms_handle *h, kms_error *err)
{
    size_t n = h->n;

    /* Padding (__pfx_/__cfi_) inside a placed section: its size is the
     * distance to the next distinct address above, if one of the (first 4)
     * lines there is the function it prefixes. */
    for (size_t k = 0; k < n; k++) {
        size_t i = h->by_address[k], nxt = k + 1;
        if (h->line_matched[i] || h->line_section[i] < 0 ||
            !(has_prefix(h, i, "__pfx_") || has_prefix(h, i, "__cfi_")))
            continue;
        while (nxt < n && addr_at(h, nxt) == h->line[i].addr)
            nxt++;
        if (nxt >= n)
            continue;
        for (size_t j = 0; j < 4; j++) {
            size_t at = nxt + j < n ? nxt + j : n - 1;
            if (addr_at(h, at) != addr_at(h, nxt))
                break;
            if (line_name_is(h, h->by_address[at], line_name(h, i) + 6, h->line[i].name_len - 6)) {
                int64_t size = (int64_t)(addr_at(h, nxt) - h->line[i].addr);
                h->line[i].size = size < 0 ? -1 : size; /* read as negative: unknown */
                break;
            }
        }
    }
    /* Loadable lines: size, binding and type from their module's own .ko. */
    for (size_t k = 0; k < h->mods.nlines; k++) {
        const struct kms_ml_result *r = &h->mods.line[k];
        if (r->ko.size >= 0) {
            struct line *l = &h->line[r->line];
            l->size = r->ko.size;
            l->binding = r->ko.binding <= 2 ? r->ko.binding : KMS_BINDING_UNKNOWN;
            l->prefer = symbol_prefer(r->ko.typed, r->ko.binding);
        }
    }
    if (regions(h, err))
        return err ? err->code : KMS_E_NOMEM;
    /* A loaded module's line in a placed section of its .ko answers with the
     * .ko as its object (the regions above still saw its module). */
    for (size_t k = 0; k < h->mods.nlines; k++) {
        uint32_t i = h->mods.line[k].line;
        if (h->mods.line[k].ko.extent >= 0)
            h->line[i].who = WHO(WHO_OBJECT, h->section_object[h->line_region[i]]);
    }
    /* what only attribution needed (line_section's array lives on as line_region) */
    h->line_matched = NULL;
    h->line_section = NULL;
    return KMS_OK;
}

/*
 * Resolver.resolve_many's unsized fallback for an address Q in no sized
 * interval: CAND is the last line that may answer at the greatest address
 * <= Q (-1 none), E how many extents (from ext_first) start at or below Q.
 * The piece answer of Q.
 */
static uint32_t unsized_at(const kms_handle *h, uint64_t q, int32_t cand, size_t e)
{
    /* the placed extent holding q: the last starting at or below it */
    size_t x = h->ext_first + e;
    int32_t rq = x > h->ext_first && q < h->ext[x - 1].end ? (int32_t)h->ext[x - 1].sec : NO;
    uint32_t none = PIECE_NO_LINE | (rq >= 0 ? OWNER_OBJECT(h->section_object[rq]) : OWNER_NONE);
    /* the last line at the greatest address <= q, in the same region as q */
    if (cand < 0)
        return none;
    int32_t rc = h->line_region[cand];
    if (rq >= 0)
        return rc == rq ? (uint32_t)cand : none;
    if (rc >= 0 || q > h->region_end[-1 - rc])
        return none;
    /* the core kernel's lines answer only inside its ranges */
    return rc != -1 || in_core_ranges(h, q) ? (uint32_t)cand : none;
}

/* The next breakpoint: B when it is above Q and below *NEXT (or the first). */
static void consider(uint64_t *next, int *found, uint64_t q, uint64_t b)
{
    if (b > q && (!*found || b < *next)) {
        *next = b;
        *found = 1;
    }
}

static uint64_t line_end(const kms_handle *h, uint32_t i)
{
    return h->line[i].addr + (uint64_t)h->line[i].size; /* wraps, as the Python's uint64 */
}

/* A growing array of line indices. */
struct stack {
    uint32_t *v;
    size_t n, cap;
};

/* The chain of sized intervals holding an address (build_pieces): their
 * lines, each with its end. */
struct link {
    uint64_t end;
    uint32_t line;
};
struct chain {
    struct link *v;
    size_t n, cap;
};

static int chain_push(struct chain *c, uint32_t line, uint64_t end)
{
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 64;
        struct link *nv = realloc(c->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        c->v = nv;
        c->cap = nc;
    }
    c->v[c->n].end = end;
    c->v[c->n++].line = line;
    return 0;
}

static int push(struct stack *s, uint32_t x)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        uint32_t *nv = realloc(s->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = x;
    return 0;
}

/*
 * The pieces, in one walk up the address space.  Resolver.resolve_many
 * answers Q with the innermost sized interval holding it: the intervals
 * (answering lines of size > 0) by start, ties in preference order, each
 * with its container, the nearest earlier interval whose chain holds it
 * (_containers), searched from the last interval starting at or below Q up
 * the containers while they end at or below Q.  That chain is a stack
 * (each interval pops those ending before it, or all when it starts past
 * every end so far); intervals ending at or below Q are popped as Q passes
 * them (a container search would only step over them).  With no interval
 * holding Q, the unsized fallback (unsized_at) answers.  The answer may
 * change only at a line's address, at the end of the answering interval,
 * and (unsized) at an extent's start or end, the end of the candidate's
 * region and the core ranges' bounds: each such address is answered, and
 * a new piece begins where the answer differs from the last.
 */
/* Pieces are first made in scratch: when there are this many, the array
 * the handle keeps is made, asked huge as far as the lines so far predict
 * it fills (advise_huge), and they are copied in; those of an index with
 * fewer are copied into one of their size. */
#define PIECE_SAMPLE 4096
/* The bytes of pieces that NP pieces from K of N lines predict: as many per line. */
#define PREDICT_PIECES(np, k, n) ((k) ? (uint64_t)(np) * (n) / (k) * sizeof(struct piece) : 0)

static int build_pieces(kms_handle *h, kms_error *err)
{
    size_t n = h->n, next_ext = h->next - h->ext_first, k = 0, e = 0, cap = PIECE_SAMPLE, np = 0;
    const uint64_t *ext_start = h->ext_start + h->ext_first;
    struct stack tie = {NULL, 0, 0};
    struct chain st = {NULL, 0, 0};
    uint64_t q = 0, reach = 0, last_start = 0, at = n ? addr_at(h, 0) : 0; /* line k's */
    struct cluster *cl = NULL;
    struct piece *pc; /* the first PIECE_SAMPLE pieces in scratch, then h->piece */
    size_t ccap = 0, asked = 0;
    int32_t cand = NO;
    int any = 0, rc = KMS_OK;

    if (!SCRATCH(h, pc, cap))
        return fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    for (;;) {
        /* the lines at or below q, a run of one address at a time */
        while (k < n && at <= q) {
            uint64_t a = at;
            tie.n = 0;
            do {
                uint32_t i = h->by_address[k];
                if (h->line[i].answers) {
                    cand = (int32_t)i;
                    if (h->line[i].size > 0 && push(&tie, i))
                        goto nomem;
                }
                at = ++k < n ? addr_at(h, k) : 0;
            } while (k < n && at == a);
            for (size_t t = 1; t < tie.n; t++) { /* insertion sort of the tie run */
                uint32_t x = tie.v[t];
                size_t j = t;
                for (; j > 0 && prefer_cmp(h, tie.v[j - 1], x) > 0; j--)
                    tie.v[j] = tie.v[j - 1];
                tie.v[j] = x;
            }
            for (size_t t = 0; t < tie.n; t++) {
                uint32_t i = tie.v[t];
                uint64_t end = line_end(h, i);
                if (!any || a >= reach)
                    st.n = 0;
                while (st.n && st.v[st.n - 1].end < end)
                    st.n--;
                if (chain_push(&st, i, end))
                    goto nomem;
                if (!any || end > reach)
                    reach = end;
                any = 1;
            }
        }
        while (e < next_ext && ext_start[e] <= q)
            e++;
        while (st.n && st.v[st.n - 1].end <= q)
            st.n--;
        uint32_t v = st.n ? PIECE_SIZED | st.v[st.n - 1].line : unsized_at(h, q, cand, e);
        if (np == 0 || v != pc[np - 1].answer) {
            if (np == cap && !h->piece) { /* the array kept, asked huge before it is touched */
                size_t most = n + n / 2 + 2 * next_ext + 16;
                cap = most > 2 * np ? most : 2 * np;
                if (!(h->piece = alloc_hugeable(cap * sizeof *h->piece)))
                    goto nomem;
                advise_huge(h->piece, cap * sizeof *pc, &asked, 0, PREDICT_PIECES(np, k, n));
                pc = memcpy(h->piece, pc, np * sizeof *pc);
            } else if (np == cap) {
                struct piece *nv = realloc(h->piece, (cap *= 2) * sizeof *nv);
                if (!nv)
                    goto nomem;
                pc = h->piece = nv;
                asked = 0;
            } else if (np % PIECE_SAMPLE == 0 && h->piece) {
                advise_huge(pc, cap * sizeof *pc, &asked, np * sizeof *pc, PREDICT_PIECES(np, k, n));
            }
            if (np == 0 || q - last_start > CLUSTER_GAP || q - cl->base > UINT32_MAX) {
                if (h->ncluster == ccap) {
                    struct cluster *nc = realloc(h->cluster, (ccap = 2 * ccap + 4) * sizeof *nc);
                    if (!nc)
                        goto nomem;
                    h->cluster = nc;
                }
                if (h->ncluster)
                    h->cluster[h->ncluster - 1].last = (uint32_t)np - 1;
                cl = &h->cluster[h->ncluster++];
                cl->base = q;
                cl->first = (uint32_t)np;
            }
            pc[np].low = (uint32_t)(q - cl->base);
            pc[np++].answer = v;
            last_start = q;
        }
        /* the next address where the answer may change */
        uint64_t nq = 0;
        int found = 0;
        if (k < n)
            consider(&nq, &found, q, at);
        if (st.n) {
            consider(&nq, &found, q, st.v[st.n - 1].end);
        } else {
            if (e < next_ext)
                consider(&nq, &found, q, ext_start[e]);
            if (e > 0)
                consider(&nq, &found, q, h->ext[h->ext_first + e - 1].end);
            if (cand >= 0) {
                int32_t r = h->line_region[cand];
                if (r < 0 && h->region_end[-1 - r] < UINT64_MAX)
                    consider(&nq, &found, q, h->region_end[-1 - r] + 1);
            }
            for (uint32_t r = 0; r < h->ncore_ranges; r++) {
                consider(&nq, &found, q, h->core_range[2 * r]);
                if (h->core_range[2 * r + 1] < UINT64_MAX)
                    consider(&nq, &found, q, h->core_range[2 * r + 1] + 1);
            }
        }
        if (!found)
            break;
        q = nq;
    }
    if (!h->piece && !(h->piece = malloc(np * sizeof *h->piece))) /* (np >= 1) */
        goto nomem;
    if (pc != h->piece)
        memcpy(h->piece, pc, np * sizeof *pc);
    h->npiece = np;
    h->cluster[h->ncluster - 1].last = (uint32_t)np - 1;
    goto out;
nomem:
    rc = fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
out:
    free(st.v);
    free(tie.v);
    return rc;
}

/* ------------------------------------------------------------ loaded modules */

/*
 * Match the loaded modules with their .ko files (kms_modules.c).  Each
 * placed .ko section becomes section count[T_SECTIONS] + k (its object
 * count[T_OBJECTS] + the .ko's number), and each line from a .ko is in its
 * section, as Resolver._build_index numbers them.
 */
static int match_modules(kms_handle *h, const struct kms_sources *src, kms_error *err)
{
    size_t nml = 0;
    struct scratch_mark mark = scratch_mark(h);
    struct kms_mline *ml;
    if (!SCRATCH(h, ml, h->n - h->core_lines))
        return fail(err, KMS_E_NOMEM, "out of memory reading loaded modules");
    for (size_t i = h->modules_from; i < h->n; i++)
        if (line_module(h, i)) {
            ml[nml].addr = h->line[i].addr;
            ml[nml].name = line_name(h, i);
            ml[nml].name_len = h->line[i].name_len;
            ml[nml].module = line_module(h, i);
            ml[nml++].line = (uint32_t)i;
        }
    int rc = kms_modules_match(&h->mods, ml, nml, h->mod_name, h->nmods, src, err);
    scratch_release(h, mark);
    if (rc)
        return rc;
    uint32_t nsec = h->count[T_SECTIONS], nobj = h->count[T_OBJECTS];
    size_t next = h->mods.nextent, nko = h->mods.nko;
    uint32_t *so = realloc(h->section_object, (nsec + next + 1) * sizeof *so);
    if (so)
        h->section_object = so;
    uint8_t *placed = so ? realloc(h->placed, nsec + next + 1) : NULL;
    if (placed)
        h->placed = placed;
    struct object_info *obj = placed ? realloc(h->object, (nobj + nko + 1) * sizeof *obj) : NULL;
    if (!obj)
        return fail(err, KMS_E_NOMEM, "out of memory reading loaded modules");
    h->object = obj;
    for (size_t e = 0; e < next; e++) {
        h->section_object[nsec + e] = nobj + h->mods.extent[e].ko;
        h->placed[nsec + e] = 0;
    }
    for (size_t k = 0; k < nko; k++) {
        const struct kms_module *st = &h->mods.status[h->mods.ko_status[k]];
        uint32_t m = 1;
        while (h->mod_name[m] != st->name)
            m++;
        h->object[nobj + k].path = st->file;
        h->object[nobj + k].modules.modules = h->mod_name + m;
        h->object[nobj + k].modules.nmodules = 1;
        h->object[nobj + k].dso = h->mod_name[m];
        h->object[nobj + k].origin = KMS_ORIGIN_LOADABLE;
    }
    for (size_t k = 0; k < h->mods.nlines; k++)
        if (h->mods.line[k].ko.extent >= 0)
            h->line_section[h->mods.line[k].line] = (int32_t)nsec + h->mods.line[k].ko.extent;
    return KMS_OK;
}

/* Resolver._extents: the placed .ko sections join the extents that queries
 * see, by start (dtrace_syms' first among equal starts), however low they
 * lie (arm64 loads modules below the kernel image). */
static int add_ko_extents(kms_handle *h, kms_error *err)
{
    size_t nk = h->mods.nextent, nv = h->next;
    if (!nk)
        return KMS_OK;
    struct scratch_mark mark = scratch_mark(h);
    struct keyed *ko = scratch(h, nk, sizeof *ko);
    uint64_t *start = realloc(h->ext_start, (nv + nk) * sizeof *start);
    if (start)
        h->ext_start = start;
    void *ext = start ? realloc(h->ext, (nv + nk) * sizeof *h->ext) : NULL;
    if (ext)
        h->ext = ext;
    for (size_t e = 0; ko && e < nk; e++) {
        ko[e].key = h->mods.extent[e].start;
        ko[e].idx = (uint32_t)e;
    }
    if (!ko || !ext || sort_keyed(h, ko, nk)) {
        return fail(err, KMS_E_NOMEM, "out of memory indexing loaded modules");
    }
    /* merge from the top: the .ko's above dtrace_syms' at equal starts */
    size_t i = nv, j = nk, o = nv + nk;
    while (j > 0) {
        o--;
        if (i > h->ext_first && h->ext_start[i - 1] > ko[j - 1].key) {
            i--;
            h->ext_start[o] = h->ext_start[i];
            h->ext[o] = h->ext[i];
        } else {
            j--;
            h->ext_start[o] = ko[j].key;
            h->ext[o].end = h->mods.extent[ko[j].idx].end;
            h->ext[o].sec = h->count[T_SECTIONS] + ko[j].idx;
        }
    }
    h->next = (uint32_t)(nv + nk);
    scratch_release(h, mark);
    return KMS_OK;
}

/* ------------------------------------------------------------ loading */

/* kmodsyms.live.check_live */
static int check_live(const kms_handle *h, const char *syms_path, kms_error *err)
{
    struct utsname u;
    char live_id[256];
    unsigned char notes[4096];
    if (uname(&u) == 0 && h->release[0] && strcmp(h->release, u.release) != 0)
        return fail(err, KMS_E_STALE, "%s is for kernel %s, but %s is running; use the file "
                    "of the running kernel or pass --force", syms_path, h->release, u.release);
    live_id[0] = 0;
    int fd = open("/sys/kernel/notes", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, notes, sizeof notes);
        if (got > 0)
            kms_notes_build_id(notes, (size_t)got, 0, live_id, sizeof live_id);
        close(fd);
    }
    if (h->build_id[0] && live_id[0] && strcmp(h->build_id, live_id) != 0)
        return fail(err, KMS_E_STALE, "%s is for vmlinux build-id %s, but the running kernel's "
                    "is %s; rebuild it or pass --force", syms_path, h->build_id, live_id);
    return KMS_OK;
}

/* h->by_address: the lines stably sorted by address.  Kallsyms lists the
 * core kernel by address, then each loaded module's lines in its symbol
 * table's order: only the lines after the sorted prefix are sorted (with
 * room for them alone), then merged with it. */
static int sort_by_address(kms_handle *h)
{
    size_t n = h->n, p = h->unsorted_at ? h->unsorted_at : n, m;
    if (!SCRATCH(h, h->by_address, n))
        return -1;
    if (p >= n) {
        for (size_t i = 0; i < n; i++)
            h->by_address[i] = (uint32_t)i;
        return 0;
    }
    m = n - p;
    struct scratch_mark mark = scratch_mark(h);
    struct keyed *rest;
    if (!SCRATCH(h, rest, 2 * m))
        return -1;
    for (size_t k = 0; k < m; k++) {
        rest[k].key = h->line[p + k].addr;
        rest[k].idx = (uint32_t)(p + k);
    }
    stable_sort(rest, m, rest + m);
    /* the prefix's lines at or below the rest's lowest come first, as they
     * are (loaded modules most often lie above the core kernel: all of it) */
    size_t i = 0, j = 0, o, below = p;
    while (below > 0) {
        size_t half = below / 2;
        if (h->line[i + half].addr <= rest[0].key) {
            i += half + 1;
            below -= half + 1;
        } else {
            below = half;
        }
    }
    for (o = 0; o < i; o++)
        h->by_address[o] = (uint32_t)o;
    while (i < p && j < m)
        h->by_address[o++] = rest[j].key < h->line[i].addr ? rest[j++].idx : (uint32_t)i++;
    while (i < p)
        h->by_address[o++] = (uint32_t)i++;
    while (j < m)
        h->by_address[o++] = rest[j++].idx;
    scratch_release(h, mark);
    return 0;
}

/* What only building the index needs (of the loaded modules, all but
 * their statuses). */
static void free_build(kms_handle *h)
{
    free(h->mods.line);
    free(h->mods.extent);
    h->mods.line = NULL;
    h->mods.extent = NULL;
    h->mods.nlines = h->mods.nextent = 0;
    scratch_release(h, (struct scratch_mark){NULL, 0});
    free_anchors(h->anchors);
    h->anchors = NULL;
    h->section_rows = NULL;
    h->line_matched = NULL;
    h->line_section = h->line_region = NULL;
    h->section_base = NULL;
    h->by_address = NULL;
    h->region_end = NULL;
}

/* Each cluster's bucket table: about one bucket per PIECES_PER_BUCKET
 * pieces, over the offsets from its first piece's start to its last's. */
static int build_buckets(kms_handle *h, kms_error *err)
{
    size_t total = 0;
    for (size_t c = 0; c < h->ncluster; c++) {
        struct cluster *cl = &h->cluster[c];
        uint32_t count = cl->last - cl->first + 1, want = count / PIECES_PER_BUCKET;
        cl->last_low = h->piece[cl->last].low;
        cl->shift = 0;
        while (cl->shift < 32 && (cl->last_low >> cl->shift) >= (want ? want : 1))
            cl->shift++;
        cl->bucket = (uint32_t)total;
        total += (size_t)(cl->shift < 32 ? cl->last_low >> cl->shift : 0) + 2;
    }
    if (!(h->bucket = malloc(total * sizeof *h->bucket)))
        return fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    h->nbucket = total;
    for (size_t c = 0; c < h->ncluster; c++) {
        const struct cluster *cl = &h->cluster[c];
        size_t nb = (size_t)(cl->shift < 32 ? cl->last_low >> cl->shift : 0) + 1;
        uint32_t k = cl->first;
        for (size_t b = 0; b < nb; b++) {
            uint64_t off = (uint64_t)b << cl->shift;
            while (k < cl->last && h->piece[k + 1].low <= off)
                k++;
            h->bucket[cl->bucket + b].first = k;
            h->bucket[cl->bucket + b].answer = h->piece[k].answer;
        }
        h->bucket[cl->bucket + nb].first = cl->last;
        h->bucket[cl->bucket + nb].answer = h->piece[cl->last].answer;
    }
    return KMS_OK;
}

/* A kms_sym's fields from dso on, all but sym_binding, type and sized, are
 * its owner's (struct owner); those before dso are its line's. */
#define OWNER_AT offsetof(struct kms_sym, dso)
#define OWNER_SIZE (sizeof(struct kms_sym) - OWNER_AT)
_Static_assert(OWNER_SIZE <= sizeof(struct owner), "an owner holds a kms_sym's tail");

/* Owner O's record tail: OWNER's bytes from dso on. */
static void set_owner(kms_handle *h, size_t o, const struct kms_sym *owner)
{
    memcpy(h->owner[o].tail, (const char *)owner + OWNER_AT, OWNER_SIZE);
}

static int same_list(const struct kms_modlist *a, const struct kms_modlist *b)
{
    if (a->nmodules != b->nmodules)
        return 0;
    for (uint32_t k = 0; k < a->nmodules; k++)
        if (strcmp(a->modules[k], b->modules[k]) != 0)
            return 0;
    return 1;
}

/*
 * Every owner's record tail (answer.Answers.record's module part, and
 * _fill_object's): none, each object (.ko files too), each module of
 * mod_name, each ambiguous line, the core kernel; owner_first[] is where
 * each WHO tag's owners begin, so that a record copies its owner's tail
 * without a branch on the tag.
 */
static int build_owners(kms_handle *h, kms_error *err)
{
    size_t nobj = (size_t)h->count[T_OBJECTS] + h->mods.nko;
    size_t count = 1 + nobj + h->nmods + h->namb + 1;
    struct kms_sym r;
    if (!(h->owner = aligned_alloc(sizeof *h->owner, count * sizeof *h->owner)))
        return fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    memset(h->owner, 0, count * sizeof *h->owner);
    h->owner_first[WHO_OBJECT] = OWNER_OBJECT(0);
    h->owner_first[WHO_MODULE] = (uint32_t)(1 + nobj);
    h->owner_first[WHO_AMBIGUOUS] = (uint32_t)(1 + nobj + h->nmods);
    h->owner_first[WHO_CORE] = (uint32_t)(1 + nobj + h->nmods + h->namb);
    for (size_t o = 0; o < nobj; o++) {
        const struct object_info *info = &h->object[o];
        memset(&r, 0, sizeof r);
        r.object = info->path;
        r.modules = info->modules.modules;
        r.nmodules = info->modules.nmodules;
        r.origin = info->origin;
        r.dso = info->dso;
        set_owner(h, OWNER_OBJECT(o), &r);
    }
    for (uint32_t m = 0; m < h->nmods; m++) {
        memset(&r, 0, sizeof r);
        r.modules = h->mod_name + m;
        r.nmodules = 1;
        r.dso = h->mod_name[m];
        r.origin = h->mod_origin[m];
        set_owner(h, h->owner_first[WHO_MODULE] + m, &r);
    }
    for (size_t a = 0; a < h->namb; a++) {
        const struct kms_modlist *c = h->cand_list + h->amb_first[a];
        uint32_t n = h->amb_count[a], k = 1;
        memset(&r, 0, sizeof r);
        r.ambiguous = 1;
        r.candidates = c;
        r.ncandidates = n;
        while (k < n && same_list(&c[k], &c[0]))
            k++;
        if (k == n) { /* the same module(s): only the object is unknown */
            r.modules = c[0].modules;
            r.nmodules = c[0].nmodules;
            r.dso = c[0].modules[0];
            r.origin = c[0].nmodules == 1 && !strcmp(c[0].modules[0], "vmlinux")
                ? KMS_ORIGIN_CORE : KMS_ORIGIN_BUILTIN;
        }
        set_owner(h, h->owner_first[WHO_AMBIGUOUS] + a, &r);
    }
    memset(&r, 0, sizeof r);
    r.modules = vmlinux_list;
    r.nmodules = 1;
    r.dso = vmlinux_list[0];
    r.origin = KMS_ORIGIN_CORE;
    set_owner(h, h->owner_first[WHO_CORE], &r);
    return KMS_OK;
}

static kms_handle *load(const char *syms_path, const struct kallsyms_source *src, int live,
                        unsigned flags, const struct kms_sources *modules, kms_error *err)
{
    char default_path[400];
    const char *source = src->name;
    kms_handle *h = calloc(1, sizeof *h);
    int check = !(flags & KMS_LOAD_FORCE);
    if (err) {
        err->code = KMS_OK;
        err->message[0] = 0;
    }
    if (!h) {
        fail(err, KMS_E_NOMEM, "out of memory");
        return NULL;
    }
    if (!syms_path) {
        struct utsname u;
        if (uname(&u) != 0)
            u.release[0] = 0;
        snprintf(default_path, sizeof default_path, "/lib/modules/%s/kernel/dtrace_syms",
                 u.release);
        syms_path = default_path;
    }
    if (src->fd < 0 && src->len >= UINT32_MAX) {
        fail(err, KMS_E_KALLSYMS, "%s: larger than 4 GiB: not a kallsyms file", source);
        goto bad;
    }
    if (map_syms(h, syms_path, err) || index_anchors(h, err) || parse_kallsyms(h, src, err))
        goto bad;
    if (live && check && check_live(h, syms_path, err))
        goto bad;
    if (h->count[T_SEGMENTS] == 0) {
        fail(err, KMS_E_NO_LAYOUT, "%s has no link layout (built with --no-layout, or from a "
             "tree without vmlinux and System.map): rebuild it with 'kmodsyms build' in the "
             "kernel's build tree, or use kmodsyms' Python resolver", syms_path);
        goto bad;
    }
    if (!SCRATCH(h, h->line_matched, h->n) || !SCRATCH(h, h->line_section, h->n) ||
        sort_by_address(h)) {
        fail(err, KMS_E_NOMEM, "out of memory indexing %s", source);
        goto bad;
    }
    memset(h->line_matched, 0, h->n);
    struct scratch_mark placing = scratch_mark(h);
    if (!SCRATCH(h, h->section_base, h->count[T_SECTIONS])) {
        fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
        goto bad;
    }
    memset(h->section_base, 0, h->count[T_SECTIONS] * sizeof *h->section_base);
    if (place_sections(h, syms_path, source, check, err) || attribute_lines(h, syms_path, err))
        goto bad;
    scratch_release(h, placing); /* only placement and attribution read where sections are */
    h->section_base = NULL;
    if (match_modules(h, modules, err) || build_index(h, err) || add_ko_extents(h, err))
        goto bad;
    scratch_trim(h); /* the pieces are what the resident set peaks with */
    if (build_pieces(h, err))
        goto bad;
    free_build(h); /* first: the peak resident set stays that of the building */
    if (build_buckets(h, err) || build_owners(h, err))
        goto bad;
    return h;
bad:
    kms_free(h);
    return NULL;
}

kms_handle *kms_load_opts(const struct kms_load_opts *opts, kms_error *err)
{
    struct kms_load_opts o;
    char modules_dir[400];
    struct kallsyms_source ks = {-1, NULL, 0, NULL};
    struct stat st;
    int live;
    memset(&o, 0, sizeof o);
    if (opts && opts->size == 0) {
        fail(err, KMS_E_ARG, "kms_load_opts: set opts->size to sizeof(struct kms_load_opts)");
        return NULL;
    }
    if (opts)
        memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    if (o.kallsyms_text) { /* read in place */
        ks.buf = o.kallsyms_text;
        ks.len = o.kallsyms_len;
        ks.name = o.kallsyms_name ? o.kallsyms_name : "kallsyms";
        live = (o.flags & KMS_LOAD_LIVE) != 0;
    } else {
        ks.name = o.kallsyms_path ? o.kallsyms_path : LIVE_KALLSYMS;
        ks.fd = open(ks.name, O_RDONLY | O_CLOEXEC);
        if (ks.fd < 0) {
            fail(err, KMS_E_IO, "cannot read %s: %s", ks.name, strerror(errno));
            return NULL;
        }
        /* /proc/kallsyms reports size 0: read until end of file */
        if (fstat(ks.fd, &st) == 0 && st.st_size > 0)
            ks.len = (size_t)st.st_size;
        live = strcmp(ks.name, LIVE_KALLSYMS) == 0;
    }
    /* live.module_sources: the running kernel's, for its own kallsyms */
    struct kms_sources src = {o.modules_dir, o.sysfs_root, o.proc_modules};
    if (live && !src.modules_dir) {
        struct utsname u;
        if (uname(&u) != 0)
            u.release[0] = 0;
        snprintf(modules_dir, sizeof modules_dir, "/lib/modules/%s", u.release);
        src.modules_dir = modules_dir;
    }
    if (live && !src.sysfs_root)
        src.sysfs_root = "/sys";
    if (live && !src.proc_modules)
        src.proc_modules = "/proc/modules";
    if (o.flags & KMS_LOAD_NO_MODULES)
        src.modules_dir = src.sysfs_root = src.proc_modules = NULL;
    kms_handle *h = load(o.syms_path, &ks, live, o.flags, &src, err);
    if (ks.fd >= 0)
        close(ks.fd);
    return h;
}

kms_handle *kms_load(const char *syms_path, const char *kallsyms_path, unsigned flags,
                     kms_error *err)
{
    struct kms_load_opts o = {.size = sizeof o, .syms_path = syms_path,
                              .kallsyms_path = kallsyms_path, .flags = flags};
    return kms_load_opts(&o, err);
}

kms_handle *kms_load_buffer(const char *syms_path, const char *kallsyms_text, size_t len,
                            const char *name, unsigned flags, kms_error *err)
{
    struct kms_load_opts o = {.size = sizeof o, .syms_path = syms_path,
                              .kallsyms_text = kallsyms_text ? kallsyms_text : "",
                              .kallsyms_len = len, .kallsyms_name = name, .flags = flags};
    if (!kallsyms_text && len) {
        fail(err, KMS_E_ARG, "kms_load_buffer: no kallsyms text given");
        return NULL;
    }
    return kms_load_opts(&o, err);
}

void kms_free(kms_handle *h)
{
    if (!h)
        return;
    if (h->map)
        munmap((void *)h->map, h->map_size);
    free(h->member_name);
    free(h->object);
    free(h->section_object);
    free(h->text);
    free(h->line);
    free(h->mod_name);
    free(h->mod_origin);
    free(h->placed);
    free(h->amb_first);
    free(h->amb_count);
    free(h->cand_list);
    free(h->cand_modset);
    free(h->ext_start);
    free(h->ext);
    free(h->piece);
    free(h->cluster);
    free(h->bucket);
    free(h->owner);
    free_build(h);
    kms_modules_free(&h->mods);
    free(h);
}

/* ------------------------------------------------------------ answers */

/*
 * answer.Answers.record for ADDRESS answered by ANSWER (a piece's: a line,
 * PIECE_SIZED when its interval holds ADDRESS, or PIECE_NO_LINE with the
 * owner of the object holding ADDRESS, OWNER_NONE for none), every byte of
 * OUT written (its padding zeroed or from the owner's tail, so that records
 * compare with memcmp).
 */
static void record(const kms_handle *h, uint64_t address, uint32_t answer, struct kms_sym *out)
{
    uint32_t index = answer & PIECE_INDEX;
    if (answer & PIECE_NO_LINE) {
        memcpy((char *)out + OWNER_AT, h->owner[index].tail, OWNER_SIZE);
        memset(out, 0, OWNER_AT);
        out->address = address;
        out->size = -1;
        out->sym_binding = KMS_BINDING_UNKNOWN;
        return;
    }
    const struct line *l = h->line + index;
    memcpy((char *)out + OWNER_AT, h->owner[h->owner_first[WHO_TAG(l->who)] + WHO_INDEX(l->who)].tail,
           OWNER_SIZE);
    memset((char *)out + offsetof(struct kms_sym, sym_len), 0,
           offsetof(struct kms_sym, symoff) - offsetof(struct kms_sym, sym_len));
    out->address = address;
    out->sym = h->text + l->name;
    out->sym_len = l->name_len;
    out->sym_start = l->addr;
    out->symoff = address - l->addr;
    out->size = l->size;
    out->sym_end = l->addr + (l->size > 0 ? (uint64_t)l->size : 0);
    out->sized = (uint8_t)(answer >> 31);
    out->type = (char)l->type;
    out->sym_binding = l->binding;
}

/*
 * An address on its way to its piece's answer.  The steps below are the
 * whole search; kms_resolve runs them one after the other, kms_resolve_many
 * runs each over a batch of addresses before the next, so that the cache
 * misses of a batch's addresses (their buckets, then their pieces, then
 * their lines) are fetched all at once rather than one after the other.
 */
struct probe {
    uint64_t offset;             /* the address less its cluster's base */
    const struct bucket *bucket; /* the bucket holding offset (the cluster's last for
                                  * offsets at or above its last piece's) */
    const struct piece *piece;   /* pieces piece[0..count]: the last starting at or
                                  * below offset holds it */
    uint32_t count;
    uint32_t answer;             /* piece[0]'s answer (the bucket's) */
};

/* The first step: Q's cluster (the last whose base is at or below Q) and
 * bucket.  An offset at or above the cluster's last piece's start takes
 * that start's bucket, whose pieces end with that piece: the search then
 * finds it. */
static inline void probe_bucket(const kms_handle *h, uint64_t q, struct probe *p)
{
    const struct cluster *cl = h->cluster;
    size_t n = h->ncluster;
    while (n > 1) {
        size_t half = n / 2;
        if (cl[half].base <= q) {
            cl += half;
            n -= half;
        } else {
            n = half;
        }
    }
    p->offset = q - cl->base;
    uint64_t within = p->offset < cl->last_low ? p->offset : cl->last_low;
    p->bucket = h->bucket + cl->bucket + (within >> cl->shift);
}

/* The second: the bucket's pieces (read from the bucket). */
static inline void probe_pieces(const kms_handle *h, struct probe *p)
{
    const struct bucket *bk = p->bucket;
    p->piece = h->piece + bk[0].first;
    p->count = bk[1].first - bk[0].first;
    p->answer = bk[0].answer;
}

/* The last: the answer of the piece holding the offset. */
static inline uint32_t probe_answer(const struct probe *p)
{
    if (p->count == 0) /* one piece holds the bucket (every other bucket): no piece is read */
        return p->answer;
    /* the last of pieces 0..count starting at or below the offset (0 does),
     * without branches on the data: a mispredicted branch would stall the
     * next resolve's loads too */
    const struct piece *pc = p->piece;
    size_t n = (size_t)p->count + 1;
    while (n > 1) {
        size_t half = n / 2;
        pc = pc[half].low <= p->offset ? pc + half : pc;
        n -= half;
    }
    return pc->answer;
}

/* The row of ANSWER's line, to fetch ahead (line 0's for none: no branch). */
static inline const struct line *answer_line(const kms_handle *h, uint32_t answer)
{
    return h->line + (answer & PIECE_NO_LINE ? 0 : answer & PIECE_INDEX);
}

void kms_resolve(const kms_handle *h, uint64_t addr, struct kms_sym *out)
{
    struct probe p;
    probe_bucket(h, addr, &p);
    probe_pieces(h, &p);
    /* The first piece's line, fetched while the pieces are searched: the
     * address is in that piece 2 times in 3 (uniform over the core kernel),
     * and the two loads, a cache miss each, then overlap. */
    PREFETCH(answer_line(h, p.answer));
    record(h, addr, probe_answer(&p), out);
}

/* Addresses each step of kms_resolve_many runs over before the next step
 * reads what it fetched: enough misses in flight to hide each one's wait.
 * 32 was the fastest of 8..256 in most runs (docs/loader.md, "Cost of
 * libkmodsyms"). */
#define RESOLVE_BATCH 32

void kms_resolve_many(const kms_handle *h, const uint64_t *addrs, size_t n, struct kms_sym *out)
{
    struct probe p[RESOLVE_BATCH];
    uint32_t answer[RESOLVE_BATCH];
    for (size_t at = 0; at < n; at += RESOLVE_BATCH) {
        size_t m = n - at < RESOLVE_BATCH ? n - at : RESOLVE_BATCH;
        for (size_t i = 0; i < m; i++) {
            probe_bucket(h, addrs[at + i], &p[i]);
            PREFETCH(p[i].bucket);
        }
        for (size_t i = 0; i < m; i++) {
            probe_pieces(h, &p[i]);
            PREFETCH(p[i].piece);
            PREFETCH(p[i].piece + p[i].count);
        }
        for (size_t i = 0; i < m; i++) {
            answer[i] = probe_answer(&p[i]);
            PREFETCH(answer_line(h, answer[i]));
        }
        for (size_t i = 0; i < m; i++)
            record(h, addrs[at + i], answer[i], out + at + i);
    }
}

/*
 * kms_resolve_many's search, writing only what a columnar caller keeps:
 * the answering line's index (UINT32_MAX: none) and whether its interval
 * holds the address, without filling a record per address.
 */
void kms_resolve_lines(const kms_handle *h, const uint64_t *addrs, size_t n, uint32_t *line,
                       uint8_t *sized)
{
    struct probe p[RESOLVE_BATCH];
    for (size_t at = 0; at < n; at += RESOLVE_BATCH) {
        size_t m = n - at < RESOLVE_BATCH ? n - at : RESOLVE_BATCH;
        for (size_t i = 0; i < m; i++) {
            probe_bucket(h, addrs[at + i], &p[i]);
            PREFETCH(p[i].bucket);
        }
        for (size_t i = 0; i < m; i++) {
            probe_pieces(h, &p[i]);
            PREFETCH(p[i].piece);
            PREFETCH(p[i].piece + p[i].count);
        }
        for (size_t i = 0; i < m; i++) {
            uint32_t answer = probe_answer(&p[i]);
            line[at + i] = answer & PIECE_NO_LINE ? UINT32_MAX : answer & PIECE_INDEX;
            sized[at + i] = (uint8_t)(answer >> 31);
        }
    }
}

/*
 * The record of ADDRESS answered by kallsyms line INDEX (sized when the
 * line's symbol holds ADDRESS), as kms_resolve fills it: for a caller that
 * kept a line index (kms_resolve_lines) and wants the whole answer.
 */
void kms_line_sym(const kms_handle *h, uint32_t index, uint64_t address, struct kms_sym *out)
{
    const struct line *l = h->line + index;
    int sized = l->size > 0 && address >= l->addr && address - l->addr < (uint64_t)l->size;
    record(h, address, index | (sized ? PIECE_SIZED : 0), out);
}

struct lookup_ctx {
    const char *mod;    /* MOD of "MOD`NAME" (not NUL-terminated), or NULL */
    size_t modlen;
    struct kms_sym *out;
    size_t max, found;
};

/* Whether module NAME is MOD (MODLEN bytes, '-' read as '_'). */
static int module_is(const char *name, const char *mod, size_t modlen)
{
    if (strnlen(name, modlen + 1) != modlen)
        return 0;
    for (size_t k = 0; k < modlen; k++)
        if (name[k] != (mod[k] == '-' ? '_' : mod[k]))
            return 0;
    return 1;
}

static int lookup_one(const kms_handle *h, size_t line, void *arg)
{
    struct lookup_ctx *c = arg;
    struct kms_sym rec;
    record(h, h->line[line].addr, (uint32_t)line | (h->line[line].size > 0 ? PIECE_SIZED : 0), &rec);
    if (c->mod) {
        int in = 0;
        for (uint32_t k = 0; k < rec.nmodules && !in; k++)
            in = module_is(rec.modules[k], c->mod, c->modlen);
        for (uint32_t j = 0; j < rec.ncandidates && !in; j++)
            for (uint32_t k = 0; k < rec.candidates[j].nmodules && !in; k++)
                in = module_is(rec.candidates[j].modules[k], c->mod, c->modlen);
        if (!in)
            return 0;
    }
    if (c->found < c->max)
        c->out[c->found] = rec;
    c->found++;
    return 0;
}

size_t kms_lookup(const kms_handle *h, const char *spec, struct kms_sym *out, size_t max)
{
    struct lookup_ctx c = {NULL, 0, out, out ? max : 0, 0};
    const char *tick, *name = spec;
    if (!h || !spec)
        return 0;
    if ((tick = strrchr(spec, '`')) != NULL) {
        c.mod = spec;
        c.modlen = (size_t)(tick - spec);
        name = tick + 1;
    }
    find_lines(h, name, strlen(name), lookup_one, &c);
    return c.found;
}

int kms_foreach(const kms_handle *h, int (*cb)(const struct kms_line *line, void *arg),
                void *arg)
{
    for (size_t i = 0; i < h->n; i++) {
        struct kms_sym rec;
        struct kms_line l;
        record(h, h->line[i].addr, (uint32_t)i, &rec);
        l.address = h->line[i].addr;
        l.size = h->line[i].size > 0 ? (uint64_t)h->line[i].size : 0;
        l.type = (char)h->line[i].type;
        l.name = rec.sym;
        l.name_len = rec.sym_len;
        l.origin = rec.origin;
        l.sym_binding = rec.sym_binding;
        l.object = rec.object;
        /* kallmodsyms shows no module for the core kernel */
        l.nmodules = rec.origin == KMS_ORIGIN_CORE ? 0 : rec.nmodules;
        l.modules = rec.modules;
        if (rec.ambiguous) {
            /* Resolver.line_modsets: the candidates' one module set, else none */
            uint32_t amb = WHO_INDEX(h->line[i].who);
            const uint32_t *ms = h->cand_modset + h->amb_first[amb];
            uint32_t n = h->amb_count[amb], k = 1;
            while (k < n && ms[k] == ms[0])
                k++;
            l.nmodules = 0;
            if (k == n) {
                const unsigned char *set = ent(h, T_MODSETS, ms[0]);
                l.nmodules = le32(set + 4);
                l.modules = h->member_name + le32(set);
            }
        }
        int r = cb(&l, arg);
        if (r)
            return r;
    }
    return 0;
}

static size_t add_range(struct kms_range *out, size_t max, size_t count, uint64_t start,
                        uint64_t end, int text)
{
    if (count && count <= max && out[count - 1].text == text && out[count - 1].end == start) {
        out[count - 1].end = end;
        return count;
    }
    if (count < max) {
        out[count].start = start;
        out[count].end = end;
        out[count].text = (uint8_t)text;
    }
    return count + 1;
}

/* The loaded or pseudo-module of line I (index into mod_name), 0 for none,
 * once loaded: a line from its .ko names its module through the .ko's object
 * (whose module list is that one entry of mod_name). */
static uint32_t loaded_module(const kms_handle *h, size_t i)
{
    uint32_t w = h->line[i].who;
    if (WHO_TAG(w) == WHO_OBJECT && WHO_INDEX(w) >= h->count[T_OBJECTS])
        return (uint32_t)(h->object[WHO_INDEX(w)].modules.modules - h->mod_name);
    return line_module(h, i);
}

size_t kms_module_ranges(const kms_handle *h, const char *mod, struct kms_range *out, size_t max)
{
    char want[256];
    size_t count = 0, len;
    if (!h || !mod || (len = strlen(mod)) >= sizeof want)
        return 0;
    for (size_t k = 0; k <= len; k++)
        want[k] = mod[k] == '-' ? '_' : mod[k];
    if (!out)
        max = 0;
    for (uint32_t m = 1; m < h->nmods; m++) {
        if (strcmp(h->mod_name[m], want) != 0)
            continue;
        uint64_t lo[2] = {UINT64_MAX, UINT64_MAX}, hi[2] = {0, 0};
        for (size_t i = 0; i < h->n; i++)
            if (loaded_module(h, i) == m) {
                int text = h->line[i].type == 't' || h->line[i].type == 'T';
                uint64_t a = h->line[i].addr, size = h->line[i].size > 0 ? (uint64_t)h->line[i].size : 1;
                uint64_t end = a + size > a ? a + size : UINT64_MAX;
                if (a < lo[text])
                    lo[text] = a;
                if (end > hi[text])
                    hi[text] = end;
            }
        for (int text = 0; text < 2; text++)
            if (lo[text] < hi[text])
                count = add_range(out, max, count, lo[text], hi[text], text);
        if (count == 2 && max >= 2 && out[0].start > out[1].start) {
            struct kms_range t = out[0];
            out[0] = out[1];
            out[1] = t;
        }
        return count;
    }
    int core = strcmp(want, "vmlinux") == 0;
    uint32_t builtin = UINT32_MAX;
    for (uint32_t m = 0; m < h->count[T_MODULES] && !core; m++)
        if (strcmp(str(h, le32(ent(h, T_MODULES, m))), want) == 0) {
            builtin = m;
            break;
        }
    if (!core && builtin == UINT32_MAX)
        return 0;
    for (uint32_t k = 0; k < h->next; k++) {
        if (h->ext[k].sec >= h->count[T_SECTIONS])
            continue; /* a loaded module's .ko section */
        const unsigned char *se = ent(h, T_SECTIONS, h->ext[k].sec);
        const unsigned char *ms = ent(h, T_MODSETS, le32(ent(h, T_OBJECTS, le32(se)) + 4));
        uint32_t first = le32(ms), n = le32(ms + 4);
        int member = core ? n == 0 : 0;
        for (uint32_t j = 0; j < n && !member; j++)
            member = le32(ent(h, T_MEMBERS, first + j)) == builtin;
        if (member)
            count = add_range(out, max, count, h->ext_start[k], h->ext[k].end,
                              (le32(se + SEC_FLAGS) & SHF_EXECINSTR) ||
                                  (h->placed[h->ext[k].sec] & HOLDS_TEXT));
    }
    return count;
}

int kms_module_known(const kms_handle *h, const char *mod)
{
    size_t len = strlen(mod);
    if (module_is("vmlinux", mod, len))
        return 1;
    for (uint32_t m = 0; m < h->count[T_MODULES]; m++)
        if (module_is(str(h, le32(ent(h, T_MODULES, m))), mod, len))
            return 1;
    for (uint32_t m = 1; m < h->nmods; m++)
        if (module_is(h->mod_name[m], mod, len))
            return 1;
    return 0;
}

void kms_get_info(const kms_handle *h, struct kms_info *out)
{
    out->kernel_release = h->release;
    out->build_id = h->build_id;
    out->lines = h->n;
    out->core_lines = h->core_lines;
    out->segments = h->count[T_SEGMENTS];
    out->anchors = h->count[T_ANCHORS];
    out->anchors_verified = h->anchors_verified;
}

size_t kms_modules(const kms_handle *h, struct kms_module *out, size_t max)
{
    for (size_t k = 0; out && k < max && k < h->mods.nstatus; k++)
        out[k] = h->mods.status[k];
    return h->mods.nstatus;
}
