// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * What the C tests of libkmodsyms share (test_kms.c, test_kms_modules.c,
 * test_kms_errors.c: each a program "PROG SYMS KALLSYMS SCRATCHDIR" on the
 * fixture tree's dtrace_syms and kallsyms, which make check runs under
 * AddressSanitizer and UndefinedBehaviorSanitizer): CHECK, the file
 * helpers, a failed load's check and the fixture's documented answers
 * (docs/resolver.md, docs/format.md), which every program asks of the
 * handles it loads.
 */
#ifndef TEST_KMS_H
#define TEST_KMS_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmodsyms.h"

static int failures;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            failures++;                                                     \
            fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

static inline unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n;
    if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) ||
        !(buf = malloc((size_t)n + 1)) || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static inline void spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

/* A failed load: NULL, a code, one line of text. */
static inline void check_error(kms_handle *h, const kms_error *e, int code, const char *what)
{
    CHECK(h == NULL, "%s loaded", what);
    kms_free(h);
    CHECK(e->code == code, "%s: code %d, want %d (%s)", what, e->code, code, e->message);
    CHECK(e->message[0] && !strchr(e->message, '\n'), "%s: message '%s'", what, e->message);
}

static inline void check_fixture(kms_handle *h)
{
    struct kms_sym r = {.size = sizeof r}, recs[8] = {{.size = sizeof recs[0]}};
    size_t n;

    kms_resolve(h, 0xffffffffab600400u, &r);
    CHECK(r.sym && !strcmp(r.sym, "init_once") && r.symoff == 0x10 && r.sym_size == 39 && r.size_kind == KMS_SIZE_EXACT && r.sized &&
          !strcmp(r.dso, "ext4") && r.origin == KMS_ORIGIN_BUILTIN && r.type == 't' &&
          r.sym_binding == 0 && !strcmp(r.object, "fs/ext4/super.o") &&
          r.sym_start == 0xffffffffab6003f0u && r.sym_end == r.sym_start + 39, "ext4 init_once");
    kms_resolve(h, 0xffffffffab600a98u, &r);
    CHECK(r.sym && !strcmp(r.sym, "__pfx___memcpy") && r.symoff == 8 && r.sym_size == 0x10 &&
          !strcmp(r.dso, "vmlinux") && r.origin == KMS_ORIGIN_CORE &&
          !strcmp(r.object, "arch/x86/lib/memcpy_64.o"), "padding symbol");
    kms_resolve(h, 0xffffffffc0a00020u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.symoff == 0x10 && r.size_kind != KMS_SIZE_EXACT &&
          !r.sized && !strcmp(r.dso, "fuse") && r.origin == KMS_ORIGIN_LOADABLE && !r.object,
          "loadable module");
    kms_resolve(h, 0xffffffffab600a5cu, &r);
    CHECK(!r.sym && r.dso && !strcmp(r.dso, "vmlinux") && r.object &&
          !strcmp(r.object, "lib/weak.o"), "overridden weak bytes");
    kms_resolve(h, 0x1000, &r);
    CHECK(!r.sym && !r.dso && !r.object && r.nmodules == 0, "no symbol");

    /* an unknown size is 0, as in every struct (kmodsyms.h, "Sizes") */
    n = kms_lookup(h, "__per_cpu_end", recs, 8);
    CHECK(n == 1 && recs[0].size_kind == KMS_SIZE_UNKNOWN && recs[0].sym_size == 0 &&
          recs[0].sym_end == recs[0].sym_start && !recs[0].sized, "unknown size: %d %llu",
          recs[0].size_kind, (unsigned long long)recs[0].sym_size);
    n = kms_lookup(h, "init_once", recs, 8);
    CHECK(n == 4, "init_once: %zu matches", n);
    n = kms_lookup(h, "ext4`init_once", recs, 8);
    CHECK(n == 1 && recs[0].address == 0xffffffffab6003f0u && recs[0].symoff == 0, "ext4`init_once");
    n = kms_lookup(h, "vmlinux`init_once", recs, 8);
    CHECK(n == 1 && !strcmp(recs[0].object, "kernel/fork.o"), "vmlinux`init_once");
    n = kms_lookup(h, "libphy`mdio_bus_read", recs, 8);
    CHECK(n == 1 && recs[0].nmodules == 2 && !strcmp(recs[0].modules[1], "fwnode_mdio"),
          "libphy`mdio_bus_read");
    CHECK(kms_lookup(h, "fwnode-mdio`mdio_bus_read", NULL, 0) == 1, "'-' reads as '_'");
    CHECK(kms_lookup(h, "isofs`mdio_bus_read", recs, 8) == 0, "wrong module");
    CHECK(kms_lookup(h, "no_such_symbol", recs, 8) == 0, "absent");
    CHECK(kms_lookup(h, "init_once", recs, 2) == 4, "count beyond MAX");

    struct kms_range rg[16] = {{.size = sizeof rg[0]}};
    n = kms_module_ranges(h, "ext4", rg, 16);
    CHECK(n >= 1 && n <= 16, "ext4 ranges: %zu", n);
    for (size_t k = 0; k < n && k < 16; k++)
        CHECK(rg[k].start < rg[k].end && (!k || rg[k - 1].end <= rg[k].start), "ext4 range %zu", k);
    kms_resolve(h, 0xffffffffab600400u, &r);
    int inside = 0;
    for (size_t k = 0; k < n && k < 16; k++)
        inside |= rg[k].text && rg[k].start <= r.address && r.address < rg[k].end;
    CHECK(inside, "ext4 text range holds ext4`init_once");
    CHECK(kms_module_ranges(h, "fuse", rg, 16) >= 1, "fuse ranges");
    CHECK(kms_module_ranges(h, "no_such_module", rg, 16) == 0, "unknown module");

    struct kms_info info = {.size = sizeof info};
    kms_get_info(h, &info);
    CHECK(info.segments == 5 && info.anchors > 16 && info.anchors_verified == info.anchors,
          "info: %u segments, %u/%u anchors", info.segments, info.anchors_verified, info.anchors);
}

/* Whether A and B are the same answer, field by field (their padding may differ). */
static inline int same_sym(const struct kms_sym *a, const struct kms_sym *b)
{
    return a->address == b->address && a->sym == b->sym && a->sym_len == b->sym_len &&
           a->symoff == b->symoff && a->sym_start == b->sym_start && a->sym_end == b->sym_end &&
           a->size == b->size && a->sym_size == b->sym_size &&
           a->size_kind == b->size_kind && a->line == b->line && a->dso == b->dso && a->sym_binding == b->sym_binding &&
           a->type == b->type && a->sized == b->sized && a->ambiguous == b->ambiguous &&
           a->origin == b->origin && a->nmodules == b->nmodules && a->modules == b->modules &&
           a->object == b->object && a->ncandidates == b->ncandidates &&
           a->candidates == b->candidates;
}

/* kms_resolve_many of ADDRS[0..N) against kms_resolve of each; the record
 * past the last left unwritten.  The number of differences. */
static inline size_t batch_differs(const kms_handle *h, const uint64_t *addrs, size_t n)
{
    struct kms_sym *got = malloc((n + 1) * sizeof *got), want, past;
    size_t differ = 0;
    if (!got) {
        fputs("out of memory\n", stderr);
        exit(2);
    }
    memset(&past, 0xA5, sizeof past);
    got[n] = past;
    want.size = sizeof want;
    if (n) /* the stride: (for none, the record past the last is left alone too) */
        got[0].size = sizeof want;
    kms_resolve_many(h, addrs, n, got);
    for (size_t i = 0; i < n; i++) {
        kms_resolve(h, addrs[i], &want);
        differ += !same_sym(&got[i], &want);
    }
    differ += memcmp(&got[n], &past, sizeof past) != 0;
    free(got);
    return differ;
}

static inline int count_lines(const struct kms_line *l, void *arg)
{
    size_t *n = arg;
    if (!l->name || !l->name[0])
        return 1;
    (*n)++;
    return 0;
}

/* The program's end: its failures counted on stderr, else "all passed". */
static inline int test_summary(const char *prog)
{
    if (failures)
        fprintf(stderr, "%s: %d failures\n", prog, failures);
    else
        printf("%s: all passed\n", prog);
    return failures != 0;
}

/* Whether ARGC is a program's "PROG SYMS KALLSYMS SCRATCHDIR", saying its
 * usage when it is not. */
static inline int test_usage(int argc, const char *prog)
{
    if (argc == 4)
        return 1;
    fprintf(stderr, "usage: %s SYMS KALLSYMS SCRATCHDIR\n", prog);
    return 0;
}

#endif
