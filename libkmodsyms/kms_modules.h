/* SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0 */
/*
 * Internal to libkmodsyms (not installed): loaded modules matched with their
 * own .ko files (kms_modules.c and the files kms_ko.h names, R43-R46), for
 * the index.
 *
 * kms_index.c hands over the kallsyms lines of loaded modules
 * (struct kmsi_mline, in kallsyms order) and where to look (struct
 * kmsi_sources); kmsi_modules_match() fills a struct kmsi_loaded: per line the
 * ELF size, type and binding of its .ko symbol and the placed .ko section
 * holding it, the placed sections, each module's core, and each module's
 * outcome (the public struct kms_module).
 */
#ifndef KMS_MODULES_H
#define KMS_MODULES_H

#include "kmodsyms.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

/* Where the loaded modules' files and the kernel's word about them are;
 * NULL: not read. */
struct kmsi_sources {
    const char *modules_dir;  /* .ko files, modules.dep */
    const char *sysfs_root;   /* /sys: module/NAME/{sections,srcversion,notes,coresize} */
    const char *proc_modules; /* /proc/modules: each module's core */
    /* KMS_LOAD_DEFER_MODULES: only the modules named in READ[0..NREAD) have
     * their file read; every other one found is KMS_MODULE_DEFERRED */
    int defer;
    const char *const *read;
    size_t nread;
};

/* A kallsyms line of a loaded or pseudo-module. */
struct kmsi_mline {
    uint64_t addr;
    const char *name;   /* NUL-terminated (name_len bytes before the NUL) */
    uint32_t name_len;
    uint32_t module;    /* index into the kallsyms module names, >= 1 */
    uint32_t line;      /* the kallsyms line, ascending */
};

/* What a line's .ko symbol says (size -1: the line has none). */
struct kmsi_ko_line {
    int64_t size;       /* ELF st_size */
    int32_t extent;     /* its placed .ko section: index into kmsi_loaded.extent */
    uint8_t typed;      /* STT_* other than NOTYPE */
    uint8_t binding;    /* STB_*, STB_GNU_UNIQUE read as GLOBAL */
};

/* A placed .ko section: [start, end) of matched .ko number ko. */
struct kmsi_ko_extent {
    uint64_t start, end;
    uint32_t ko;        /* index into kmsi_loaded.ko_status */
};

struct kmsi_loaded {
    size_t nlines;
    struct kmsi_ml_result {
        uint32_t line;          /* the kallsyms line */
        struct kmsi_ko_line ko;
    } *line;                    /* one per kmsi_mline given, in their order */
    size_t nextent;             /* module by module in kallsyms order, each .ko's by section: unsorted */
    struct kmsi_ko_extent *extent;
    size_t nko;                 /* matched .ko files: index into status */
    uint32_t *ko_status;
    uint32_t nmods;             /* per kallsyms module index: its core, when known */
    uint8_t *core_known;
    uint64_t *core_start, *core_size;
    size_t nstatus;             /* per loaded module (not pseudo), kallsyms order */
    struct kms_module *status;
};

/*
 * Match every loaded module (MOD_NAME[1..NMODS-1], pseudo-modules skipped)
 * with its .ko under SRC->modules_dir (R43-R46).  LINES: the
 * N kallsyms lines of modules.  A module whose file is missing, unreadable
 * or not the loaded one costs only its own sizes; the call fails (code and
 * one line) only when out of memory or when modules.dep exists but cannot
 * be read.
 */
int kmsi_modules_match(struct kmsi_loaded *out, const struct kmsi_mline *lines, size_t n,
                      const char *const *mod_name, uint32_t nmods, const struct kmsi_sources *src,
                      kms_error *err);

void kmsi_modules_free(struct kmsi_loaded *m);

/* Whether module MOD's core is known and ADDR lies outside it. */
int kmsi_modules_outside_core(const struct kmsi_loaded *m, uint32_t mod, uint64_t addr);

/* The last address of module MOD's core, when the kernel said where it is. */
int kmsi_modules_core_last(const struct kmsi_loaded *m, uint32_t mod, uint64_t *last);

/* The kernel's pseudo-modules: bpf, __builtin__ftrace, ... */
int kmsi_is_pseudo_module(const char *name);

/* Names the kernel's module address lookups skip (is_mapping_symbol()):
 * .L*, L0*, $a $d $t $x alone or with a '.' suffix. */
int kmsi_is_mapping_symbol(const char *p, uint32_t len);

/* The GNU build-id (hex, NUL-terminated, at most CAP bytes) in a buffer of
 * ELF notes of the given byte order (elfimage.parse_notes), or "". */
void kmsi_notes_build_id(const unsigned char *d, size_t n, int big_endian, char *hex, size_t cap);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* KMS_MODULES_H */
