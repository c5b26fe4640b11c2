/* SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0 */
/*
 * Internal to libkmodsyms (not installed): what the files that match loaded
 * modules with their .ko files share (docs/resolver.md §9, R43-R46), one job
 * each:
 *
 *   kms_modfind.c  finding each loaded module's file (R43)
 *   kms_elf.c      reading one .ko: its ELF checked, cut, scanned (R43, R45)
 *   kms_sysfs.c    the kernel's word: /sys/module/NAME, /proc/modules (R44, R45)
 *   kms_hash.c     the hash tables matching looks names and addresses up in
 *   kms_match.c    one .ko matched with its module's kallsyms lines (R44, R45)
 *   kms_modules.c  every loaded module, for the index (kms_modules.h)
 */
#ifndef KMS_KO_H
#define KMS_KO_H

#include "kms_internal.h"
#include "kms_decompress.h"

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

#define BUILD_ID_HEX 129 /* 64 bytes of build-id, in hex, and the NUL */
#define END UINT32_MAX   /* the end of a chain (struct kmsi_match) */

/* Out of memory while reading loaded modules: ERR filled, KMS_E_NOMEM. */
int kmsi_modules_oom(kms_error *err);

/* ------------------------------------------------------------ kms_sysfs.c */

/* The whole file at PATH (8 NUL bytes after it): 0, or an errno. */
int kmsi_slurp(const char *path, unsigned char **out, size_t *len);
/* The white space trimmed around a sysfs value or a modules.dep path. */
int kmsi_is_space(unsigned char c);
/* REL under DIR (REL absolute: itself), malloc'd; NULL when out of memory. */
char *kmsi_join(const char *dir, const char *rel);

/* What the kernel says of one loaded module in /sys/module/NAME (R44, R45). */
struct kmsi_live {
    int has_sysfs;
    char *srcversion;           /* NULL: unreadable or absent */
    char build_id[BUILD_ID_HEX]; /* "": none */
    size_t nsec;
    char **sec_name;
    uint64_t *sec_addr;
};

int kmsi_read_live(struct kmsi_live *l, const char *sysfs_root, const char *name);
void kmsi_live_free(struct kmsi_live *l);
/* Section NAME's address as sysfs says it, NULL: not said. */
const uint64_t *kmsi_live_section(const struct kmsi_live *l, const char *name);
/* Module MOD's core from /proc/modules at PATH (NULL: not read), for every
 * module of OUT->nmods (MOD_NAME). */
void kmsi_proc_modules_cores(struct kmsi_loaded *out, const char *path,
                             const char *const *mod_name);
/* Module MOD's core from /sys/module/NAME/coresize and its .text, when
 * /proc/modules did not say it. */
void kmsi_sysfs_core(struct kmsi_loaded *out, uint32_t mod, const char *sysfs_root,
                     const char *name, const struct kmsi_live *live);

/* ------------------------------------------------------------ kms_modfind.c */

/* The files found for the wanted modules (loaded, not pseudo). */
struct kmsi_wanted {
    const char *const *name;
    size_t n;
    char **path;    /* relative to the modules directory, or NULL */
    int *rank;
};

int kmsi_find_module_files(struct kmsi_wanted *w, const char *modules_dir, kms_error *err);

/* ------------------------------------------------------------ kms_elf.c */

struct kmsi_ko_sym {
    const char *name;   /* in the file's string table */
    uint32_t len;
    uint32_t sec;       /* index into ko.sec */
    uint64_t value, size;
    uint8_t info;
};

struct kmsi_ko_sec {
    char *name;
    uint64_t size;
};

/* One .ko read: the symbols and sections that matching it needs, its
 * srcversion and build-id (R44, R45). */
struct kmsi_ko {
    unsigned char *data; /* the file, cut where its ELF ends */
    size_t n;
    size_t mapped;       /* bytes of data mapped (kmsi_map_ko), 0 when data was read into memory */
    int big, is64;
    /* the section header table: shnum as the header says (extended
     * numbering read from section 0), nsh the headers there are (0 when
     * shoff is 0) */
    uint64_t shoff, entsize, shnum, shstrndx, nsh;
    uint32_t nsym, nsec;
    struct kmsi_ko_sym *sym;
    struct kmsi_ko_sec *sec;
    char *srcversion;    /* NULL: none */
    char build_id[BUILD_ID_HEX];
};

int kmsi_map_ko(const char *path, struct kmsi_ko *ko);
int kmsi_ko_read(struct kmsi_ko *ko, const char *path, char **why);
void kmsi_ko_free(struct kmsi_ko *ko);

/* ------------------------------------------------------------ kms_hash.c */

/* The distinct names of a module's .ko symbols and kallsyms lines. */
struct kmsi_names {
    size_t mask, n;
    uint32_t *slot; /* id + 1, 0: empty */
    const char **ptr;
    uint32_t *len;
};

/* The id of name P (LEN bytes), added when new. */
uint32_t kmsi_name_id(struct kmsi_names *t, const char *p, uint32_t len);

/* The (name, address) pairs of a module's kallsyms lines, for the question
 * "is a line of this name at this address" (R44's shape, R45's checks),
 * filled at the first question: a module that matches asks few, as each
 * line's own .ko symbol answers for itself. */
struct kmsi_pairs {
    size_t mask, n;
    int filled;
    uint32_t *slot; /* line + 1 */
    const uint32_t *lid;
    const uint64_t *addr;
};

int kmsi_pair_has(struct kmsi_pairs *p, uint32_t id, uint64_t addr);

/* The slots of an open-addressing table for N keys: a power of two over 2N. */
size_t kmsi_table_size(size_t n);

/* ------------------------------------------------------------ kms_match.c */

/* One module's scratch: its lines, the .ko, name ids, chains. */
struct kmsi_match {
    const struct kmsi_ko *ko;
    size_t nl;
    const char **lname;
    uint32_t *llen;
    uint64_t *addr;
    uint32_t *lid, *sid;        /* name id per line, per symbol */
    uint32_t *nsyms_of, *first_sym, *next_sym, *last_sym;
    uint32_t *nlines_of, *first_line, *next_line, *last_line;
    uint32_t *lorder, norder;   /* ids in first-appearance order among non-mapping lines */
    uint8_t *has_base, *shown;
    uint8_t *by_kernel;         /* per section: its base is sysfs' */
    uint64_t *base;
    int32_t *line_sym;          /* the .ko symbol each line is, -1 */
    uint8_t *sym_is_line;       /* per symbol: some line_sym is it */
    struct kmsi_names names;
    struct kmsi_pairs pairs;
};

/* KO matched with the module's NL kallsyms lines LINES[IDX[0..NL)] as LIVE
 * says (R44, R45): 0 matched (M->line_sym, M->base and M->shown say how), 1
 * refused (*WHY, malloc'd: why the file is not the loaded module) or -1 out
 * of memory.  The caller frees M (kmsi_match_free()) in every case. */
int kmsi_match_module(struct kmsi_match *m, const struct kmsi_ko *ko, const struct kmsi_mline *lines,
                      const size_t *idx, size_t nl, const struct kmsi_live *live, char **why);
void kmsi_match_free(struct kmsi_match *m);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* KMS_KO_H */
