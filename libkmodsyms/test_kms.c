// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * test_kms SYMS KALLSYMS SCRATCHDIR: the C tests of libkmodsyms, on the
 * fixture tree's dtrace_syms and kallsyms (make check runs them under
 * AddressSanitizer and UndefinedBehaviorSanitizer).  The expected answers
 * are the fixture's documented ones (docs/resolver.md, docs/format.md); the
 * comparisons with the linker maps are tests/test_clib.py's.
 * Damaged inputs must load or fail with one line of text, never crash.
 * Loaded modules: the fixture's fs/fuse/fuse.ko (beside KALLSYMS) is
 * matched; another build of it, and truncated or damaged copies, are
 * refused for fuse alone; compressed (xz, zstd, gzip: the tools found on
 * PATH) it is matched as the plain file, damaged refused.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "kmodsyms.h"
#include "kms_decompress.h"
#include "kms_internal.h" /* kmsi_hidden_cause */
#include "kms_attr.h"

/* kms_decompress.h declares the decompressors' types itself: where their
 * headers are installed, they must agree with them. */
#define SAME_LAYOUT(ours, theirs, first, last)                                           \
    _Static_assert(sizeof(ours) == sizeof(theirs) &&                                    \
                   offsetof(ours, first) == offsetof(theirs, first) &&                  \
                   offsetof(ours, last) == offsetof(theirs, last), #ours " is " #theirs)
#if defined(__has_include)
#if __has_include(<lzma.h>)
#include <lzma.h>
SAME_LAYOUT(struct kmsz_lzma_stream, lzma_stream, total_out, reserved_enum2);
_Static_assert(LZMA_CONCATENATED == 0x08 && LZMA_FINISH == 3 && LZMA_STREAM_END == 1,
               "liblzma's constants");
#endif
#if __has_include(<zstd.h>)
#include <zstd.h>
SAME_LAYOUT(struct kmsz_zstd_in, ZSTD_inBuffer, src, pos);
SAME_LAYOUT(struct kmsz_zstd_out, ZSTD_outBuffer, dst, pos);
#endif
#if __has_include(<zlib.h>)
#include <zlib.h>
SAME_LAYOUT(struct kmsz_z_stream, z_stream, total_out, reserved);
_Static_assert(Z_STREAM_END == 1 && Z_BUF_ERROR == -5 && MAX_WBITS == 15, "zlib's constants");
#endif
#endif

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

static unsigned char *slurp(const char *path, size_t *len)
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

static void spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static uint32_t crc32_plain(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> 8 * k);
}

static void fix_crc(unsigned char *img, size_t len)
{
    put32(img + 12, crc32_plain(img + 16, len - 16));
}

/* A failed load: NULL, a code, one line of text. */
static void check_error(kms_handle *h, const kms_error *e, int code, const char *what)
{
    CHECK(h == NULL, "%s loaded", what);
    kms_free(h);
    CHECK(e->code == code, "%s: code %d, want %d (%s)", what, e->code, code, e->message);
    CHECK(e->message[0] && !strchr(e->message, '\n'), "%s: message '%s'", what, e->message);
}

static void check_fixture(kms_handle *h)
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

/* Records of another size: a struct of an older version (shorter) gets only
 * its own fields, one of a later version (longer) keeps what lies beyond. */
static void check_growable(kms_handle *h)
{
    struct kms_sym whole = {.size = sizeof whole}, part;
    kms_resolve(h, 0xffffffffab600400u, &whole);
    memset(&part, 0xA5, sizeof part);
    part.size = offsetof(struct kms_sym, line);
    kms_resolve(h, 0xffffffffab600400u, &part);
    CHECK(part.size == offsetof(struct kms_sym, line) && part.sym == whole.sym &&
          part.sym_len == whole.sym_len && part.line == 0xA5A5A5A5u, "a shorter kms_sym");
    memset(&part, 0xA5, sizeof part);
    part.size = 0;
    kms_resolve(h, 0xffffffffab600400u, &part);
    CHECK(part.size == 0 && part.address == 0xA5A5A5A5A5A5A5A5u, "size 0: nothing written");

    /* a later version's array: a stride 16 bytes longer, the tail kept */
    enum { N = 5, STRIDE = sizeof(struct kms_sym) + 16 };
    _Alignas(struct kms_sym) unsigned char buf[N * STRIDE];
    uint64_t addrs[N] = {0xffffffffab600400u, 0xffffffffab600a98u, 0x1000, 0xffffffffc0a00020u,
                         0xffffffffab600400u};
    size_t stride = STRIDE;
    memset(buf, 0xA5, sizeof buf);
    memcpy(buf, &stride, sizeof stride);
    kms_resolve_many(h, addrs, N, (struct kms_sym *)buf);
    for (size_t i = 0; i < N; i++) {
        struct kms_sym got, want = {.size = sizeof want};
        unsigned char tail[16];
        memcpy(&got, buf + i * STRIDE, sizeof got);
        memcpy(tail, buf + i * STRIDE + sizeof got, sizeof tail);
        kms_resolve(h, addrs[i], &want);
        CHECK(got.size == STRIDE && got.sym == want.sym && got.symoff == want.symoff &&
              got.line == want.line && got.dso == want.dso && got.sized == want.sized,
              "stride record %zu", i);
        for (size_t k = 0; k < sizeof tail; k++)
            CHECK(tail[k] == 0xA5, "stride record %zu: byte %zu past the struct written", i, k);
    }

    struct kms_info info = {.size = sizeof info};
    memset(&info, 0xA5, sizeof info);
    info.size = offsetof(struct kms_info, lines);
    kms_get_info(h, &info);
    CHECK(info.kernel_release && info.lines == (size_t)0xA5A5A5A5A5A5A5A5u, "a shorter kms_info");
}

/* Lines by index, lookups with an offset, module lists, spans, %pS. */
static void check_v2(kms_handle *h)
{
    struct kms_sym r = {.size = sizeof r}, recs[4] = {{.size = sizeof recs[0]}};
    struct kms_line l = {.size = sizeof l};
    size_t n;

    kms_resolve(h, 0xffffffffab600400u, &r);
    CHECK(r.line != UINT32_MAX && kms_line_at(h, r.line, &l) == KMS_OK &&
          l.address == 0xffffffffab6003f0u && l.index == r.line && !strcmp(l.name, "init_once") &&
          l.sym_size == 39 && l.size_kind == KMS_SIZE_EXACT && !strcmp(l.modules[0], "ext4"),
          "kms_line_at(kms_sym.line)");
    CHECK(kms_line_at(h, UINT32_MAX - 1, &l) == KMS_E_ARG, "no such line");
    kms_resolve(h, 0x1000, &r);
    CHECK(r.line == UINT32_MAX && r.size_kind == KMS_SIZE_UNKNOWN, "no line");

    n = kms_lookup(h, "ext4`init_once+0x10", recs, 4);
    CHECK(n == 1 && recs[0].address == 0xffffffffab600400u && recs[0].symoff == 0x10 &&
          recs[0].sized && recs[0].sym_start == 0xffffffffab6003f0u, "ext4`init_once+0x10");
    n = kms_lookup(h, "ext4`init_once+40", recs, 4); /* past its 39 bytes */
    CHECK(n == 1 && recs[0].symoff == 0x40 && !recs[0].sized, "ext4`init_once+40");
    n = kms_lookup_name(h, "ext4", "init_once", 0x10, recs, 4);
    CHECK(n == 1 && recs[0].address == 0xffffffffab600400u, "kms_lookup_name");
    CHECK(kms_lookup_name(h, NULL, "init_once", 0, recs, 4) == 4, "kms_lookup_name, any module");
    CHECK(kms_lookup_name(h, "ext4", "init_once+0x10", 0, recs, 4) == 0, "no +OFF read in NAME");

    uint32_t idx[64];
    n = kms_module_lines(h, "ext4", idx, 64);
    int has = 0;
    for (size_t k = 0; k < n && k < 64; k++) {
        struct kms_line m = {.size = sizeof m};
        CHECK(kms_line_at(h, idx[k], &m) == KMS_OK && m.nmodules >= 1, "ext4 line %zu", k);
        has |= m.address == 0xffffffffab6003f0u;
        CHECK(!k || idx[k - 1] < idx[k], "kallsyms order");
    }
    CHECK(n > 1 && n <= 64 && has, "ext4's lines: %zu", n);
    CHECK(kms_module_lines(h, "fuse", NULL, 0) == 22, "fuse's lines");
    CHECK(kms_module_lines(h, "no_such_module", idx, 64) == 0, "no module's lines");

    const char *names[16];
    n = kms_builtin_modules(h, names, 16);
    int ext4 = 0;
    for (size_t k = 0; k < n && k < 16; k++)
        ext4 |= !strcmp(names[k], "ext4");
    CHECK(n == 7 && ext4, "built-in modules: %zu", n);

    struct kms_range sp[16] = {{.size = sizeof sp[0]}};
    n = kms_module_spans(h, "ext4", sp, 16);
    int inside = 0;
    for (size_t k = 0; k < n && k < 16; k++)
        inside |= sp[k].text && sp[k].start <= 0xffffffffab600400u && 0xffffffffab600400u < sp[k].end;
    CHECK(n >= 1 && inside, "ext4 spans: %zu", n);
    n = kms_module_spans(h, "fuse", sp, 16);
    CHECK(n == 2 && sp[0].text && sp[0].start == 0xffffffffc0a00000u && !sp[1].text,
          "fuse: one text span, one data span (%zu)", n);

    /* %pS: the kernel's size is the gap to the next kallsyms address, the
     * alias the first line of its address, " [mod]" for loaded modules only */
    struct kms_ksym k = {.size = sizeof k};
    CHECK(kms_resolve_kernel(h, 0xffffffffab600400u, &k) == 1 && !strcmp(k.text, "init_once+0x10/0x30") &&
          !k.module && k.exact, "%%pS of ext4's init_once: %s", k.text);
    CHECK(kms_resolve_kernel(h, 0xffffffffc0a00020u, &k) == 1 &&
          !strcmp(k.text, "fuse_dev_open+0x10/0x20 [fuse]") && k.exact, "%%pS in fuse: %s", k.text);
    CHECK(kms_resolve_kernel(h, 0xffffffffc0a00104u, &k) == 1 &&
          !strcmp(k.text, "__pfx_fuse_exit+0x0/0x10 [fuse]"), "%%pS alias: %s", k.text);
    CHECK(kms_resolve_kernel(h, 0x10, &k) == 0 && !strcmp(k.text, "0x10") && !k.sym,
          "%%pS of no symbol: %s", k.text);
    CHECK(kms_resolve_kernel(h, 0xffffffffc0901008u, &k) == 1 && !k.exact && !k.sym_size &&
          !strcmp(k.module, "bpf") &&
          !strcmp(k.text, "bpf_prog_6deef7357e7b4530_sd_fw_ingress+0x8/? [bpf]"),
          "%%pS of a bpf program: %s", k.text);
    CHECK(kms_resolve_kernel(h, 0xffffffffc0902008u, &k) == 0 &&
          !strcmp(k.text, "0xffffffffc0902008"), "%%pS of a kprobe page: %s", k.text);

    /* without its .ko, a loaded module's line has the gap to its next line */
    kms_resolve(h, 0xffffffffc0a00020u, &r);
    CHECK(r.size_kind == KMS_SIZE_ESTIMATED && r.sym_size == 0x20 && !r.sized &&
          r.sym_end == 0xffffffffc0a00030u, "estimated size: %lld", (long long)r.sym_size);
}

/* A loaded module's core from /proc/modules bounds its last line's estimate. */
static void check_core_bound(const char *syms, const char *kallsyms, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/proc_modules", dir);
    const char *text = "fuse 8448 0 - Live 0xffffffffc0a00000\n"; /* 0x2100 bytes */
    spit(path, text, strlen(text));
    struct kms_load_opts o = {.size = sizeof o, .syms_path = syms, .kallsyms_path = kallsyms,
                              .proc_modules = path};
    kms_error e;
    kms_handle *h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "load with /proc/modules: %s", e.message);
    if (!h)
        return;
    struct kms_sym r = {.size = sizeof r};
    kms_resolve(h, 0xffffffffc0a020b0u, &r); /* fuse_inode_count, fuse's highest line */
    CHECK(r.sym && !strcmp(r.sym, "fuse_inode_count") && r.size_kind == KMS_SIZE_ESTIMATED &&
          r.sym_size == 0x50, "bounded by the core: %d %lld", r.size_kind, (long long)r.sym_size);
    struct kms_ksym k = {.size = sizeof k};
    CHECK(kms_resolve_kernel(h, 0xffffffffc0a020b8u, &k) == 1 && !k.exact &&
          !strcmp(k.text, "fuse_inode_count+0x8/0x50 [fuse]"), "%%pS to the core's end: %s", k.text);
    kms_free(h);
    h = kms_load(syms, kallsyms, 0, &e);
    if (h) {
        kms_resolve(h, 0xffffffffc0a020b0u, &r);
        /* R61: no core, nothing above: its first byte, as dtrace counts a line */
        CHECK(r.size_kind == KMS_SIZE_ESTIMATED && r.sym_size == 1 && !r.sized,
              "no core, nothing above: %d %lld", r.size_kind, (long long)r.sym_size);
        /* R55: and %pS says so, never an offset past a size */
        CHECK(kms_resolve_kernel(h, 0xffffffffc0a020b8u, &k) == 1 && !k.exact && !k.sym_size &&
              !strcmp(k.text, "fuse_inode_count+0x8/? [fuse]"), "%%pS, no end: %s", k.text);
    }
    kms_free(h);
}

/* Threads querying one handle at once must get the single-threaded answers. */
#define N_THREADS 4
#define N_PROBES 4096

struct probe_run {
    const kms_handle *h;
    const struct kms_sym *want;
    int mismatches;
};

static uint64_t probe(size_t k)
{
    return 0xffffffffab600000u + (uint64_t)k * 5;
}

static int probe_thread(void *arg)
{
    struct probe_run *run = arg;
    for (int round = 0; round < 4; round++)
        for (size_t k = 0; k < N_PROBES; k++) {
            struct kms_sym r = {.size = sizeof r}, l[8] = {{.size = sizeof l[0]}};
            kms_resolve(run->h, probe(k), &r);
            run->mismatches += memcmp(&r, &run->want[k], sizeof r) != 0;
            if (r.sym && kms_lookup(run->h, r.sym, l, 8) == 0)
                run->mismatches++;
        }
    return 0;
}

static void check_threads(const kms_handle *h)
{
    static struct kms_sym want[N_PROBES];
    struct probe_run runs[N_THREADS];
    thrd_t t[N_THREADS];
    for (size_t k = 0; k < N_PROBES; k++) {
        want[k].size = sizeof want[k];
        kms_resolve(h, probe(k), &want[k]);
    }
    for (int i = 0; i < N_THREADS; i++) {
        runs[i] = (struct probe_run){h, want, 0};
        CHECK(thrd_create(&t[i], probe_thread, &runs[i]) == thrd_success, "thread %d", i);
    }
    for (int i = 0; i < N_THREADS; i++) {
        thrd_join(t[i], NULL);
        CHECK(runs[i].mismatches == 0, "thread %d: %d answers differ", i, runs[i].mismatches);
    }
}

/* Whether A and B are the same answer, field by field (their padding may differ). */
static int same_sym(const struct kms_sym *a, const struct kms_sym *b)
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
static size_t batch_differs(const kms_handle *h, const uint64_t *addrs, size_t n)
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

struct edges {
    uint64_t *a;
    size_t n, cap;
};

static void add_address(struct edges *e, uint64_t a)
{
    if (e->n == e->cap && !(e->a = realloc(e->a, (e->cap = 2 * e->cap + 64) * sizeof *e->a))) {
        fputs("out of memory\n", stderr);
        exit(2);
    }
    e->a[e->n++] = a;
}

/* Each line's start - 1, start, end - 1 and end. */
static int line_edges(const struct kms_line *l, void *arg)
{
    add_address(arg, l->address - 1);
    add_address(arg, l->address);
    add_address(arg, l->address + l->sym_size - 1);
    add_address(arg, l->address + l->sym_size);
    return 0;
}

/* kms_resolve_many answers as kms_resolve: at every line's edges, 0 and
 * UINT64_MAX, random addresses, repeated and out of order, in calls of
 * every size around its batches' (32) and of none. */
static void check_batch(const kms_handle *h)
{
    struct edges e = {NULL, 0, 0};
    uint64_t x = 0x9E3779B97F4A7C15u;
    kms_foreach(h, line_edges, &e);
    size_t lines = e.n;
    add_address(&e, 0);
    add_address(&e, UINT64_MAX);
    for (int k = 0; k < 4096; k++) { /* xorshift64: anywhere, and over the fixture's kernel */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        add_address(&e, k % 2 ? x : 0xffffffffab600000u + x % 0x16000000u);
    }
    for (size_t k = 0; k < lines; k += 3) /* repeated, in another order */
        add_address(&e, e.a[(k * 7919) % lines]);
    for (size_t i = e.n - 1; i > 0; i--) { /* then all shuffled */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t t = e.a[i];
        size_t j = x % (i + 1);
        e.a[i] = e.a[j];
        e.a[j] = t;
    }
    CHECK(lines > 800, "%zu line edges", lines);
    size_t differ = batch_differs(h, e.a, e.n);
    CHECK(differ == 0, "%zu of %zu batched answers differ", differ, e.n);
    static const size_t sizes[] = {0, 1, 2, 31, 32, 33, 63, 64, 65, 95, 97, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (size_t at = 0; at + sizes[k] <= e.n && at < 40; at += 13) {
            differ = batch_differs(h, e.a + at, sizes[k]);
            CHECK(differ == 0, "%zu addresses from %zu: %zu differ", sizes[k], at, differ);
        }
    kms_resolve_many(h, NULL, 0, NULL); /* nothing to read or write */
    free(e.a);
}

/* The fixture's fuse module with MODULES_DIR: one module, its outcome STATUS. */
static kms_handle *load_modules(const char *syms, const char *kallsyms, const char *modules_dir,
                                uint8_t status, const char *what)
{
    struct kms_load_opts o = {.size = sizeof o, .syms_path = syms, .kallsyms_path = kallsyms,
                              .modules_dir = modules_dir};
    struct kms_module m[2] = {{.size = sizeof m[0]}};
    kms_error e;
    kms_handle *h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "%s: %s", what, e.message);
    if (!h)
        return NULL;
    size_t n = kms_modules(h, m, 2);
    CHECK(n == 1 && !strcmp(m[0].name, "fuse") && m[0].status == status && m[0].lines == 22,
          "%s: %zu modules, status %d", what, n, n ? m[0].status : -1);
    if (n == 1 && status == KMS_MODULE_MATCHED)
        CHECK(m[0].sized == 22 && !m[0].reason && !m[0].warning, "%s: %zu sized", what, m[0].sized);
    if (n == 1 && status != KMS_MODULE_MATCHED)
        CHECK(m[0].sized == 0 && m[0].reason && m[0].warning && !strchr(m[0].warning, '\n') &&
              !strncmp(m[0].warning, "module fuse: ", 13) &&
              strstr(m[0].warning, "; its symbols stay unsized"), "%s: warning '%s'", what,
              m[0].warning ? m[0].warning : "(none)");
    return h;
}

/* SIGNED (a signed fuse.ko) compressed by each tool found on PATH, then
 * damaged: matched, then refused for fuse alone. */
static void check_compressed(const char *syms, const char *kallsyms, const char *dir,
                             const char *signed_ko)
{
    static const char *const tool[][2] = {{"xz", "xz -c --check=crc32"}, {"zst", "zstd -q -c"},
                                          {"gz", "gzip -n -c"}};
    char path[4096 + 64], cmd[3 * 4096 + 256];
    struct kms_module m = {.size = sizeof m};
    struct kms_sym r = {.size = sizeof r};
    for (size_t t = 0; t < sizeof tool / sizeof tool[0]; t++) {
        snprintf(cmd, sizeof cmd, "command -v %.*s >/dev/null", (int)strcspn(tool[t][1], " "),
                 tool[t][1]);
        if (system(cmd) != 0) {
            fprintf(stderr, "test_kms: no %s tool: .ko.%s not tested\n", tool[t][1], tool[t][0]);
            continue;
        }
        snprintf(path, sizeof path, "%s/fuse.ko.%s", dir, tool[t][0]);
        snprintf(cmd, sizeof cmd, "%s < '%s' > '%s'", tool[t][1], signed_ko, path);
        CHECK(system(cmd) == 0, "%s", cmd);
        char plain[4096 + 64];
        snprintf(plain, sizeof plain, "%s", signed_ko);
        char hidden[4096 + 80];
        snprintf(hidden, sizeof hidden, "%s.keep", plain);
        rename(plain, hidden);
        kms_handle *h = load_modules(syms, kallsyms, dir, KMS_MODULE_MATCHED, tool[t][0]);
        if (h) {
            kms_resolve(h, 0xffffffffc0a00014u, &r);
            CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.sized && r.sym_size == 0x16 &&
                  r.object && !strncmp(r.object, "fuse.ko.", 8), "%s: fuse_dev_open", tool[t][0]);
        }
        kms_free(h);
        /* damaged: not that compression, or cut short */
        size_t n;
        unsigned char *z = slurp(path, &n);
        for (int cut = 0; cut < 2; cut++) {
            spit(path, cut ? z : (const unsigned char *)"\177ELF not compressed", cut ? n / 2 : 20);
            h = load_modules(syms, kallsyms, dir, KMS_MODULE_REFUSED, tool[t][0]);
            if (h && kms_modules(h, &m, 1) == 1)
                CHECK(strstr(m.reason, "cannot decompress (") &&
                      strstr(m.reason, "; reinstall the module"), "%s: '%s'", tool[t][0], m.reason);
            if (h)
                check_fixture(h);
            kms_free(h);
        }
        free(z);
        remove(path);
        rename(hidden, plain);
    }
}

static void check_modules(const char *syms, const char *kallsyms, const char *dir)
{
    char tree[4096], path[4096 + 64];
    struct kms_sym r = {.size = sizeof r};
    struct kms_range rg[4] = {{.size = sizeof rg[0]}};
    struct kms_module m = {.size = sizeof m};
    size_t len;
    kms_handle *h;
    kms_error e;

    snprintf(tree, sizeof tree, "%s", kallsyms); /* the fixture tree: kallsyms' directory */
    char *slash = strrchr(tree, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(tree, sizeof tree, ".");
    snprintf(path, sizeof path, "%s/fs/fuse/fuse.ko", tree);
    unsigned char *ko = slurp(path, &len), *copy = malloc(len + 400);

    /* its own .ko: ELF sizes, the .ko as object, sized ranges */
    h = load_modules(syms, kallsyms, tree, KMS_MODULE_MATCHED, "fixture tree");
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.sized && r.sym_size == 0x16 && r.symoff == 4 &&
          r.sym_end == r.sym_start + 0x16 && r.origin == KMS_ORIGIN_LOADABLE && r.object &&
          !strcmp(r.object, "fs/fuse/fuse.ko"), "fuse_dev_open from fuse.ko");
    size_t n = kms_module_ranges(h, "fuse", rg, 4);
    int inside = 0;
    for (size_t k = 0; k < n && k < 4; k++)
        inside |= rg[k].text && rg[k].start <= r.sym_end - 1 && r.sym_end <= rg[k].end;
    CHECK(inside, "fuse's text range holds fuse_dev_open to its end");
    kms_free(h);

    /* another build: refused, every answer that of kallsyms alone */
    snprintf(path, sizeof path, "%s/otherbuild", tree);
    h = load_modules(syms, kallsyms, path, KMS_MODULE_REFUSED, "other build");
    if (h && kms_modules(h, &m, 1) == 1)
        CHECK(strstr(m.warning, "is not the loaded module (") && strstr(m.warning, "otherbuild"),
              "'%s'", m.warning);
    if (h)
        check_fixture(h);
    kms_free(h);

    /* signed (a signature after the ELF), as scripts/sign-file appends it */
    snprintf(path, sizeof path, "%s/fuse.ko", dir);
    memcpy(copy, ko, len);
    for (size_t k = 0; k < 300; k++)
        copy[len + k] = (unsigned char)(k * 7);
    memcpy(copy + len + 300, "~Module signature appended~\n", 28);
    spit(path, copy, len + 328);
    kms_free(load_modules(syms, kallsyms, dir, KMS_MODULE_MATCHED, "signed"));

    /* truncated at every length: refused, one line, the rest unchanged */
    for (size_t keep = 0; keep < len; keep += keep < 256 ? 1 : 61) {
        spit(path, ko, keep);
        h = load_modules(syms, kallsyms, dir, KMS_MODULE_REFUSED, "truncated");
        if (h)
            check_fixture(h);
        kms_free(h);
    }
    /* a flipped bit anywhere: matched or refused, never a crash */
    int matched = 0, refused = 0;
    for (size_t pos = 0; pos < len; pos += 13) {
        memcpy(copy, ko, len);
        copy[pos] ^= (unsigned char)(1u << (pos % 8));
        spit(path, copy, len);
        struct kms_load_opts o = {.size = sizeof o, .syms_path = syms, .kallsyms_path = kallsyms,
                                  .modules_dir = dir};
        h = kms_load_opts(&o, &e);
        CHECK(h != NULL, "flip %zu: %s", pos, e.message);
        if (!h)
            continue;
        CHECK(kms_modules(h, &m, 1) == 1, "flip %zu", pos);
        matched += m.status == KMS_MODULE_MATCHED;
        refused += m.status == KMS_MODULE_REFUSED;
        for (uint64_t a = 0xffffffffc0a00000u; a < 0xffffffffc0a03000u; a += 29)
            kms_resolve(h, a, &r);
        kms_free(h);
    }
    CHECK(matched > 0 && refused > 0, "flips: %d matched, %d refused", matched, refused);

    /* compressed (signed first, as scripts/Makefile.modinst does), by the
     * distributions' own tools: matched as the plain file */
    spit(path, copy, len + 328);
    check_compressed(syms, kallsyms, dir, path);
    remove(path);

    /* KMS_LOAD_DEFER_MODULES: found, read when asked, kept read by a refresh */
    struct kms_load_opts d = {.size = sizeof d, .syms_path = syms, .kallsyms_path = kallsyms,
                              .modules_dir = tree, .flags = KMS_LOAD_DEFER_MODULES};
    h = kms_load_opts(&d, &e);
    CHECK(h && kms_modules(h, &m, 1) == 1 && m.status == KMS_MODULE_DEFERRED && m.sized == 0 &&
          !strcmp(m.file, "fs/fuse/fuse.ko"), "deferred: %s", h ? "" : e.message);
    if (h) {
        check_fixture(h); /* as from kallsyms alone */
        const char *fuse[] = {"fuse", "nosuch"};
        CHECK(kms_read_modules(h, fuse, 2, &e) == KMS_OK, "read fuse: %s", e.message);
        CHECK(kms_modules(h, &m, 1) == 1 && m.status == KMS_MODULE_MATCHED && m.sized == 22,
              "read: status %d", m.status);
        kms_resolve(h, 0xffffffffc0a00014u, &r);
        CHECK(r.sized && r.sym_size == 0x16 && r.object && !strcmp(r.object, "fs/fuse/fuse.ko"),
              "fuse_dev_open sized after kms_read_modules");
        CHECK(kms_read_modules(h, NULL, 0, &e) == KMS_OK, "nothing left: %s", e.message);
        CHECK(kms_read_modules(h, fuse, 1, &e) == KMS_OK && kms_modules(h, &m, 1) == 1 &&
              m.status == KMS_MODULE_MATCHED, "asked again: %s", e.message);
        struct kms_changes c = {.size = sizeof c};
        CHECK(kms_refresh(h, &c, &e) == KMS_OK && kms_modules(h, &m, 1) == 1 &&
              m.status == KMS_MODULE_MATCHED, "a refresh keeps it read");
    }
    kms_free(h);
    h = kms_load_opts(&d, &e);
    CHECK(h && kms_read_modules(h, NULL, 0, &e) == KMS_OK && kms_modules(h, &m, 1) == 1 &&
          m.status == KMS_MODULE_MATCHED, "every deferred one read");
    kms_free(h);

    /* options: SIZE is required; KMS_LOAD_NO_MODULES reads nothing */
    struct kms_load_opts o = {.syms_path = syms, .kallsyms_path = kallsyms, .modules_dir = tree};
    check_error(kms_load_opts(&o, &e), &e, KMS_E_ARG, "opts without size");
    o.size = sizeof o;
    o.flags = KMS_LOAD_NO_MODULES;
    h = kms_load_opts(&o, &e);
    CHECK(h && kms_modules(h, &m, 1) == 1 && m.status == KMS_MODULE_MISSING, "no modules");
    kms_free(h);
    free(ko);
    free(copy);
}

/*
 * KMS_LOAD_FALLBACK reads the default file, /lib/modules/$(uname -r)/kernel/
 * dtrace_syms: this program is linked with --wrap=open so that, while
 * DEFAULT_SYMS is set, that path opens DEFAULT_SYMS instead (a real file,
 * bad in a chosen way), and nothing is installed on the host.
 */
static const char *default_syms;
int __real_open(const char *path, int flags, ...);
int __wrap_open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int mode = (flags & O_CREAT) ? va_arg(ap, int) : 0;
    va_end(ap);
    static const char tail[] = "/kernel/dtrace_syms";
    size_t n = strlen(path);
    if (default_syms && !strncmp(path, "/lib/modules/", 13) && n > sizeof tail &&
        !strcmp(path + n - (sizeof tail - 1), tail))
        path = default_syms;
    return __real_open(path, flags, mode);
}

/* A degraded handle (R42): every line of the core kernel or of its module,
 * and the warning saying that built-in modules are unknown. */
static void check_degraded(kms_handle *h, const char *source, const char *why, const char *what)
{
    struct kms_info info = {.size = sizeof info};
    struct kms_sym r = {.size = sizeof r};
    char want[512];
    kms_get_info(h, &info);
    snprintf(want, sizeof want, "answering from %s alone, built-in modules unknown: ",
             source);
    CHECK(!info.builtin_modules_known && strstr(info.degraded, why) &&
          !strncmp(info.warning, want, strlen(want)) &&
          !strcmp(info.warning + strlen(want), info.degraded) && !strchr(info.warning, '\n'),
          "%s: degraded '%s', warning '%s'", what, info.degraded, info.warning);
    for (uint64_t a = 0xffffffff81000000u; a < 0xffffffff81003000u; a += 7) {
        kms_resolve(h, a, &r);
        CHECK(r.origin != KMS_ORIGIN_BUILTIN && !r.object && !r.sized && !r.ambiguous &&
              (!r.dso || !strcmp(r.dso, "vmlinux")), "%s: 0x%llx answers %s", what,
              (unsigned long long)a, r.dso ? r.dso : "(none)");
    }
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.origin == KMS_ORIGIN_LOADABLE,
          "%s: loaded modules as before", what);
}

static void check_fallback(const char *syms, const char *kallsyms, const char *dir,
                           const unsigned char *simg, size_t slen, const char *moved, size_t mlen)
{
    char path[4096 + 32], absent[4096 + 32];
    kms_error e;
    kms_handle *h;
    struct kms_load_opts o = {.size = sizeof o, .kallsyms_path = kallsyms,
                              .flags = KMS_LOAD_FALLBACK};
    snprintf(absent, sizeof absent, "%s/absent", dir);
    default_syms = absent;
    check_error(kms_load(NULL, kallsyms, 0, &e), &e, KMS_E_NO_SYMS, "strict: no default file");
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback, no file: %s", e.message);
    if (h)
        check_degraded(h, kallsyms, "No such file or directory", "no file");
    kms_free(h);

    /* corrupt (a flipped byte), without a layout, another kernel's: each
     * answered from kallsyms alone, saying why */
    unsigned char *img = malloc(slen);
    memcpy(img, simg, slen);
    img[slen / 2] ^= 1;
    snprintf(path, sizeof path, "%s/fallback-corrupt", dir);
    spit(path, img, slen);
    default_syms = path;
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback, corrupt: %s", e.message);
    if (h)
        check_degraded(h, kallsyms, "checksum mismatch", "corrupt");
    kms_free(h);
    snprintf(path, sizeof path, "%s/no-layout", dir);
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback, no layout: %s", e.message);
    if (h)
        check_degraded(h, kallsyms, "has no link layout", "no layout");
    kms_free(h);
    default_syms = syms;
    o.kallsyms_path = NULL;
    o.kallsyms_text = moved;
    o.kallsyms_len = mlen;
    o.kallsyms_name = "moved";
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback, stale: %s", e.message);
    if (h) {
        struct kms_info info = {.size = sizeof info};
        kms_get_info(h, &info);
        CHECK(!info.builtin_modules_known && strstr(info.degraded, "does not match moved"),
              "stale: '%s'", info.degraded);
    }
    kms_free(h);
    /* FORCE over FALLBACK: the stale file used, with its warning */
    o.flags |= KMS_LOAD_FORCE;
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback and force: %s", e.message);
    if (h) {
        struct kms_info info = {.size = sizeof info};
        kms_get_info(h, &info);
        CHECK(info.builtin_modules_known && !strncmp(info.warning, "used anyway", 11),
              "forced over fallback: '%s'", info.warning);
    }
    kms_free(h);
    /* kallsyms' own faults are never the fallback's to hide */
    default_syms = absent;
    o.flags = KMS_LOAD_FALLBACK;
    o.kallsyms_text = "ffffffff8100000 t x\n";
    o.kallsyms_len = 20;
    check_error(kms_load_opts(&o, &e), &e, KMS_E_KALLSYMS, "fallback, bad kallsyms");
    default_syms = NULL;
    free(img);
}

/* Why the running kernel hides addresses: kernel/ksyms_common.c
 * kallsyms_show_value(), each case's remedy the one that would help. */
static void check_hidden_cause(int kptr, int paranoid, int cap, const char *want,
                               const char *unwanted)
{
    char buf[400];
    kmsi_hidden_cause(kptr, paranoid, cap, buf, sizeof buf);
    CHECK(strstr(buf, want) && (!unwanted || !strstr(buf, unwanted)),
          "kptr_restrict %d, perf_event_paranoid %d, CAP_SYSLOG %d: '%s'", kptr, paranoid, cap, buf);
}

/* kallsyms that is not text, or empty: the file named once, and what it is. */
static void check_bad_kallsyms(const char *syms)
{
    static const struct { const char *data; size_t len; const char *what; } bad[] = {
        {"\x1f\x8b\x08\x08\0\0\0\0", 8, "K: gzip data: decompress it first"},
        {"\xfd" "7zXZ\0\0\x04\xe6", 10, "K: xz data: decompress it first"},
        {"\x28\xb5\x2f\xfd\x24\x00", 6, "K: zstd data: decompress it first"},
        {"BZh91AY&SY", 10, "K: bzip2 data: decompress it first"},
        {"\x7f" "ELF\x02\x01\x01", 7, "K: an ELF file, not kallsyms text"},
        {"\x01\x02garbage\x03 t x\n", 15, "K: binary data, not kallsyms text"},
    };
    kms_error e;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        check_error(kms_load_buffer(syms, bad[k].data, bad[k].len, "K", 0, &e), &e,
                    KMS_E_KALLSYMS, bad[k].what);
        CHECK(!strncmp(e.message, bad[k].what, strlen(bad[k].what)), "'%s'", e.message);
    }
    /* kms_data_kind(): what each is, alone (what a front end names its inputs by) */
    static const struct { const char *data; size_t len; const char *what; int compressed; }
    kinds[] = {
        {"\x1f\x8b\x08", 3, "gzip data", 1},
        {"\xfd" "7zXZ\0\0", 7, "xz data", 1},
        {"\x28\xb5\x2f\xfd", 4, "zstd data", 1},
        {"BZh9", 4, "bzip2 data", 1},
        {"\x7f" "ELF\x02", 5, "an ELF file", 0},
        {"0x1\0\n", 5, "binary data", 0},
        {"0xffffffff81000000\r\n\t\v\f 0x1\n", 28, NULL, 0},
        {"\xe4\xb8\xad\n", 4, NULL, 0},   /* UTF-8 (names may be any bytes) */
        {"", 0, NULL, 0},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int compressed = -1;
        const char *what = kms_data_kind(kinds[k].data, kinds[k].len, &compressed);
        CHECK(kinds[k].what ? what && !strcmp(what, kinds[k].what) : !what, "kind %zu: '%s'", k,
              what ? what : "(text)");
        CHECK(compressed == kinds[k].compressed, "kind %zu: compressed %d", k, compressed);
    }
    char late[80]; /* a control byte past the 64 it reads is not seen */
    memset(late, 'a', sizeof late);
    late[70] = 1;
    CHECK(!kms_data_kind(late, sizeof late, NULL) && kms_data_kind(late + 10, 64, NULL),
          "kms_data_kind reads 64 bytes");
    /* a text file's own fault keeps its line */
    check_error(kms_load_buffer(syms, "hello world\n", 12, "K", 0, &e), &e, KMS_E_KALLSYMS, "text");
    CHECK(!strncmp(e.message, "K:1: ", 5), "'%s'", e.message);
    check_error(kms_load_buffer(syms, "\n\n", 2, "K", 0, &e), &e, KMS_E_KALLSYMS, "blank");
    CHECK(!strcmp(e.message, "K: no symbols: the file is empty or blank (is this a kallsyms file?)"),
          "'%s'", e.message);
    /* an empty one (issue 24 item 6: its name, once) */
    check_error(kms_load_buffer(syms, "", 0, "empty", 0, &e), &e, KMS_E_KALLSYMS, "empty");
    CHECK(!strcmp(e.message, "empty: no symbols: the file is empty or blank (is this a kallsyms "
                             "file?)"), "'%s'", e.message);

    check_hidden_cause(2, 1, 1, "kernel.kptr_restrict is 2, which hides them from every reader, "
                       "root included: set 'sysctl kernel.kptr_restrict=1'", NULL);
    check_hidden_cause(1, 2, 0, "kernel.kptr_restrict is 1, which shows them only to readers with "
                       "CAP_SYSLOG", "sysctl");
    check_hidden_cause(1, 1, 0, "or set 'sysctl kernel.kptr_restrict=0'", NULL);
    check_hidden_cause(0, 2, 0, "kernel.perf_event_paranoid is 2, so the kernel shows them only to "
                       "readers with CAP_SYSLOG: read it as root (with CAP_SYSLOG), or set "
                       "'sysctl kernel.perf_event_paranoid=1'", "kptr_restrict");
    check_hidden_cause(0, 3, 0, "kernel.perf_event_paranoid is 3", "kptr_restrict");
    check_hidden_cause(0, 1, 0, "the kernel hid them when it was read", "sysctl");
    check_hidden_cause(1, 2, 1, "the kernel hid them when it was read", "sysctl");
    check_hidden_cause(1, -1, 0, "or set 'sysctl kernel.kptr_restrict=0'", NULL); /* -1: least paranoid */
    check_hidden_cause(0, -1, 0, "the kernel hid them when it was read", "sysctl");
    /* without CONFIG_PERF_EVENTS kallsyms_for_perf() is false: CAP_SYSLOG alone shows them */
    check_hidden_cause(0, KMSI_UNREAD, 0, "this kernel has no kernel.perf_event_paranoid (no "
                       "CONFIG_PERF_EVENTS), so even with kernel.kptr_restrict 0 it shows them only "
                       "to readers with CAP_SYSLOG: read it as root", "set '");
    check_hidden_cause(1, KMSI_UNREAD, 0, "kernel.kptr_restrict is 1", "sysctl");
    check_hidden_cause(KMSI_UNREAD, KMSI_UNREAD, -1, "none readable here", "sysctl");
}

/* Lines of KTEXT (LEN bytes) into PATH: all (WHICH 0), without fuse's (1),
 * or with fuse's moved up by 0x1000 (2). */
static void write_kallsyms(const char *path, const unsigned char *ktext, size_t len, int which)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    for (const char *line = (const char *)ktext, *end = line + len; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t n = nl ? (size_t)(nl - line) + 1 : (size_t)(end - line);
        int fuse = n > 8 && !memcmp(line + n - 8, "\t[fuse]\n", 8);
        if (fuse && which == 1) {
        } else if (fuse && which == 2) {
            fprintf(f, "%016llx%.*s", strtoull(line, NULL, 16) + 0x1000, (int)(n - 16), line + 16);
        } else {
            fwrite(line, 1, n, f);
        }
        line += n;
    }
    fclose(f);
}

static int same_list(const char *const *names, size_t n, const char *want)
{
    return want ? n == 1 && !strcmp(names[0], want) : n == 0;
}

/* kms_refresh(): modules loaded, reloaded and unloaded between reads of a
 * kallsyms file; an unchanged /proc/modules reads nothing more. */
static void check_refresh(const char *syms, const unsigned char *ktext, size_t klen,
                          const char *dir)
{
    char path[4096 + 32], procmod[4096 + 32];
    kms_error e;
    struct kms_changes c = {.size = sizeof c};
    struct kms_sym r = {.size = sizeof r};
    snprintf(path, sizeof path, "%s/refresh-kallsyms", dir);
    write_kallsyms(path, ktext, klen, 1);
    kms_handle *h = kms_load(syms, path, 0, &e);
    CHECK(h != NULL, "refresh: %s", e.message);
    if (!h)
        return;
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(!r.sym || strcmp(r.sym, "fuse_dev_open"), "no fuse before");
    write_kallsyms(path, ktext, klen, 0);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK, "refresh: %s", e.message);
    CHECK(same_list(c.loaded, c.nloaded, "fuse") && same_list(c.unloaded, c.nunloaded, NULL) &&
          same_list(c.reloaded, c.nreloaded, NULL), "loaded: %zu %zu %zu", c.nloaded,
          c.nunloaded, c.nreloaded);
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.origin == KMS_ORIGIN_LOADABLE,
          "fuse after loading");
    check_fixture(h);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK && !c.nloaded && !c.nunloaded && !c.nreloaded,
          "unchanged");
    write_kallsyms(path, ktext, klen, 2);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK, "refresh: %s", e.message);
    CHECK(same_list(c.reloaded, c.nreloaded, "fuse") && !c.nloaded && !c.nunloaded,
          "reloaded: %zu %zu %zu", c.nloaded, c.nunloaded, c.nreloaded);
    kms_resolve(h, 0xffffffffc0a01014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.symoff == 4,
          "fuse moved: %s+0x%llx", r.sym ? r.sym : "-", (unsigned long long)r.symoff);
    write_kallsyms(path, ktext, klen, 1);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK, "refresh: %s", e.message);
    CHECK(same_list(c.unloaded, c.nunloaded, "fuse") && !c.nloaded && !c.nreloaded,
          "unloaded: %zu %zu %zu", c.nloaded, c.nunloaded, c.nreloaded);
    /* a failed refresh leaves the handle as it was */
    struct kms_info before = {.size = sizeof before}, after = {.size = sizeof after};
    kms_get_info(h, &before);
    spit(path, "", 0);
    CHECK(kms_refresh(h, &c, &e) == KMS_E_KALLSYMS, "refresh of an empty file: %d", e.code);
    kms_get_info(h, &after);
    CHECK(after.lines == before.lines && after.lines == 245 - 22, "unchanged: %zu lines",
          after.lines);
    write_kallsyms(path, ktext, klen, 0);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK && same_list(c.loaded, c.nloaded, "fuse"), "again");
    check_fixture(h);
    kms_free(h);

    /* with /proc/modules: unchanged (use counts aside), kallsyms is not read */
    snprintf(procmod, sizeof procmod, "%s/refresh-modules", dir);
    spit(procmod, "fuse 200704 3 - Live 0xffffffffc0a00000\n", 40);
    write_kallsyms(path, ktext, klen, 0);
    struct kms_load_opts o = {.size = sizeof o, .syms_path = syms, .kallsyms_path = path,
                              .proc_modules = procmod};
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "refresh with /proc/modules: %s", e.message);
    if (!h)
        return;
    write_kallsyms(path, ktext, klen, 2);
    spit(procmod, "fuse 200704 5 - Live 0xffffffffc0a00000\n", 40);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK && !c.nloaded && !c.nunloaded && !c.nreloaded,
          "use count changed: nothing read");
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.symoff == 0x4, "not moved");
    spit(procmod, "fuse 200704 5 - Live 0xffffffffc0a01000\n", 40);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK && same_list(c.reloaded, c.nreloaded, "fuse"),
          "moved: %s", e.message);
    kms_free(h);

    /* a caller's text cannot be read again */
    h = kms_load_buffer(syms, (const char *)ktext, klen, "fixture", 0, &e);
    CHECK(h && kms_refresh(h, &c, &e) == KMS_E_ARG, "refresh of a buffer load");
    kms_free(h);
}

/* The formatter writes into the caller's buffer as snprintf does: the
 * whole text's length returned, what fits NUL-terminated, nothing past
 * LEN; a record of a smaller struct (an older caller's) read as far as
 * its SIZE. */
static void check_text(const kms_handle *h)
{
    static const char want[] = "init_once+0x10/0x30 [ext4]";
    struct kms_sym r = {.size = sizeof r};
    char buf[64];
    kms_resolve(h, 0xffffffffab600400u, &r);
    size_t n = kms_format_sym(h, &r, KMS_FORMAT_KERNEL, buf, sizeof buf);
    CHECK(n == strlen(want) && !strcmp(buf, want), "kernel format: %s", buf);
    memset(buf, 'x', sizeof buf);
    n = kms_format_sym(h, &r, KMS_FORMAT_KERNEL, buf, 10);
    CHECK(n == strlen(want) && !memcmp(buf, want, 9) && !buf[9] && buf[10] == 'x',
          "cut at 10: %zu '%s'", n, buf);
    CHECK(kms_format_sym(h, &r, KMS_FORMAT_DTRACE, NULL, 0) == strlen("ext4`init_once+0x10"),
          "length alone");
    buf[0] = 'x';
    CHECK(kms_format_sym(h, &r, 99, buf, sizeof buf) == 0 && !buf[0], "unknown format");
    CHECK(kms_format_sym(NULL, &r, KMS_FORMAT_JSON, buf, sizeof buf) == 0 && !buf[0], "no handle");
    struct kms_line l = {.size = sizeof l};
    CHECK(kms_line_at(h, r.line, &l) == KMS_OK, "line %u", r.line);
    n = kms_format_line(&l, buf, sizeof buf);
    CHECK(!strcmp(buf, "ffffffffab6003f0 27 t init_once\t[ext4]") && n == strlen(buf),
          "kallmodsyms line: %s", buf);
    r.size = offsetof(struct kms_sym, line); /* an older caller's: the name and before only */
    n = kms_format_sym(h, &r, KMS_FORMAT_DTRACE, buf, sizeof buf);
    CHECK(!strcmp(buf, "?`init_once"), "an older struct's fields only: %s", buf);
    CHECK(kms_format_json_string("a\"\xff\xc3\xa9\x01", 6, buf, sizeof buf) == 23 &&
          !strcmp(buf, "\"a\\\"\\udcff\\u00e9\\u0001\""), "JSON string: %s", buf);
}

static int count_lines(const struct kms_line *l, void *arg)
{
    size_t *n = arg;
    if (!l->name || !l->name[0])
        return 1;
    (*n)++;
    return 0;
}

/* kmsi_attribute_at_link (R62) over the fixture's System.map (beside SYMS):
 * start_kernel is its entry, in a section; a wrong line count refused. */
static void check_attribute_at_link(const char *syms)
{
    char path[4096];
    const char *slash = strrchr(syms, '/');
    size_t len, nlines = 0, start_kernel = SIZE_MAX;
    kms_error e;
    snprintf(path, sizeof path, "%.*s/System.map", slash ? (int)(slash - syms) : 1,
             slash ? syms : ".");
    char *text = (char *)slurp(path, &len);
    for (size_t at = 0; at < len;) { /* the lines a load keeps: not at 0 (none here is A) */
        const char *end = memchr(text + at, '\n', len - at);
        size_t next = end ? (size_t)(end - text) + 1 : len;
        if (strncmp(text + at, "0000000000000000 ", 17) != 0) {
            if (next - at > 19 && !strncmp(text + at + 19, "start_kernel\n", 13))
                start_kernel = nlines;
            nlines++;
        }
        at = next;
    }
    int32_t *entry = malloc(nlines * sizeof *entry), *section = malloc(nlines * sizeof *section);
    uint8_t *ambiguous = malloc(nlines);
    int rc = kmsi_attribute_at_link(syms, text, len, entry, section, ambiguous, nlines, &e);
    CHECK(rc == KMS_OK, "attribute_at_link: %s", e.message);
    CHECK(start_kernel < nlines, "no start_kernel in %s", path);
    CHECK(rc != KMS_OK || start_kernel >= nlines || (entry[start_kernel] >= 0 && section[start_kernel] >= 0 &&
                           !ambiguous[start_kernel]),
          "start_kernel (line %zu) not attributed", start_kernel);
    rc = kmsi_attribute_at_link(syms, text, len, entry, section, ambiguous, nlines - 1, &e);
    CHECK(rc == KMS_E_KALLSYMS, "a wrong line count: %d %s", rc, e.message);
    free(entry);
    free(section);
    free(ambiguous);
    free(text);
}

int main(int argc, char **argv)
{
    kms_error e;
    kms_handle *h;
    size_t slen, klen, lines = 0;
    char path[4096];

    if (argc != 4) {
        fputs("usage: test_kms SYMS KALLSYMS SCRATCHDIR\n", stderr);
        return 2;
    }
    const char *syms = argv[1], *kallsyms = argv[2], *dir = argv[3];
    unsigned char *simg = slurp(syms, &slen), *ktext = slurp(kallsyms, &klen);

    h = kms_load(syms, kallsyms, 0, &e);
    CHECK(h != NULL, "load: %s", e.message);
    if (!h)
        return 1;
    check_fixture(h);
    check_growable(h);
    check_v2(h);
    check_threads(h);
    check_batch(h);
    check_text(h);
    CHECK(kms_foreach(h, count_lines, &lines) == 0 && lines > 200, "foreach: %zu lines", lines);
    kms_free(h);
    check_modules(syms, kallsyms, dir);
    check_core_bound(syms, kallsyms, dir);
    check_attribute_at_link(syms);

    h = kms_load_buffer(syms, (const char *)ktext, klen, "fixture", 0, &e);
    CHECK(h != NULL, "load_buffer: %s", e.message);
    if (h)
        check_fixture(h);
    kms_free(h);

    check_refresh(syms, ktext, klen, dir);

    /* errors, each with its code */
    snprintf(path, sizeof path, "%s/absent", dir);
    check_error(kms_load(path, kallsyms, 0, &e), &e, KMS_E_NO_SYMS, "missing dtrace_syms");
    check_error(kms_load(path, kallsyms, KMS_LOAD_FALLBACK, &e), &e, KMS_E_NO_SYMS,
                "a named file is never done without");
    check_error(kms_load(dir, kallsyms, 0, &e), &e, KMS_E_IO, "a directory as dtrace_syms");
    check_error(kms_load(syms, path, 0, &e), &e, KMS_E_IO, "missing kallsyms");
    for (int c = KMS_OK; c <= KMS_E_NO_SYMS; c++)
        CHECK(kms_strerror(c)[0] && strcmp(kms_strerror(c), kms_strerror(-1)), "strerror %d", c);
    CHECK(!strcmp(kms_strerror(KMS_E_NO_SYMS), "no dtrace_syms file"), "strerror");
    check_error(kms_load_buffer(syms, "", 0, NULL, 0, &e), &e, KMS_E_KALLSYMS, "empty kallsyms");
    check_error(kms_load_buffer(syms, "0000000000000000 t x\n", 21, NULL, 0, &e), &e,
                KMS_E_HIDDEN, "hidden addresses");
    CHECK(strstr(e.message, "kallsyms: every address is 0: the kernel hid them from whoever saved "
                 "it (kernel.kptr_restrict, kernel.perf_event_paranoid and CAP_SYSLOG decide)"),
          "'%s'", e.message);
    check_bad_kallsyms(syms);
    check_error(kms_load_buffer(syms, "ffffffff8100000 t x\n", 20, NULL, 0, &e), &e,
                KMS_E_KALLSYMS, "malformed line");

    /* as the running kernel's: the fixture's release is not this host's */
    check_error(kms_load_buffer(syms, (const char *)ktext, klen, "/proc/kallsyms", KMS_LOAD_LIVE,
                                &e), &e, KMS_E_STALE, "fixture as the live kernel");
    CHECK(strstr(e.message, "is for kernel") && strstr(e.message, "is running"), "'%s'",
          e.message);
    CHECK(strstr(e.message, "or load with " KMS_FORCE_WORD) &&
          !strcmp(e.message + strlen(e.message) - strlen(KMS_FORCE_WORD), KMS_FORCE_WORD),
          "the remedy is the C flag, last: '%s'", e.message);
    h = kms_load_buffer(syms, (const char *)ktext, klen, "/proc/kallsyms",
                        KMS_LOAD_LIVE | KMS_LOAD_FORCE, &e);
    CHECK(h != NULL, "live --force: %s", e.message);
    if (h) {
        struct kms_info info = {.size = sizeof info};
        kms_get_info(h, &info);
        CHECK(info.builtin_modules_known && !info.degraded[0] &&
              !strncmp(info.warning, "used anyway (KMS_LOAD_FORCE), answers may be wrong: ", 52) &&
              strstr(info.warning, "is running; use the file of the running kernel") &&
              !strstr(info.warning, " or load with"), "forced: '%s'", info.warning);
        check_fixture(h);
    }
    kms_free(h);

    /* without a layout: segments and anchors emptied, CRC repaired */
    unsigned char *img = malloc(slen);
    memcpy(img, simg, slen);
    put32(img + 56 + 8 * 8 + 4, 0);
    put32(img + 56 + 8 * 9 + 4, 0);
    fix_crc(img, slen);
    snprintf(path, sizeof path, "%s/no-layout", dir);
    spit(path, img, slen);
    check_error(kms_load(path, kallsyms, 0, &e), &e, KMS_E_NO_LAYOUT, "no layout");

    /* another version */
    memcpy(img, simg, slen);
    put32(img + 8, 2);
    snprintf(path, sizeof path, "%s/version", dir);
    spit(path, img, slen);
    check_error(kms_load(path, kallsyms, 0, &e), &e, KMS_E_VERSION, "version 2");

    /* stale: the first half of the lines moved against the rest, as in a
     * rebuilt kernel: the anchors disagree; KMS_LOAD_FORCE loads it anyway */
    char *moved = malloc(klen + 1);
    memcpy(moved, ktext, klen);
    moved[klen] = 0;
    size_t nlines = 0, half, k = 0;
    for (size_t p = 0; p < klen; p++)
        nlines += moved[p] == '\n';
    half = nlines / 2;
    for (char *line = moved; line < moved + klen && k < half; k++) {
        char *nl = strchr(line, '\n');
        unsigned long long a = strtoull(line, NULL, 16);
        if (a && line[17] != 'A') {
            char digits[17];
            snprintf(digits, sizeof digits, "%016llx", a + 0x100);
            memcpy(line, digits, 16);
        }
        line = nl ? nl + 1 : moved + klen;
    }
    check_error(kms_load_buffer(syms, moved, klen, "moved", 0, &e), &e, KMS_E_STALE,
                "moved lines");
    h = kms_load_buffer(syms, moved, klen, "moved", KMS_LOAD_FORCE, &e);
    CHECK(h != NULL, "--force loads it: %s", e.message);
    if (h) {
        struct kms_info info = {.size = sizeof info};
        kms_get_info(h, &info);
        CHECK(!strncmp(info.warning, "used anyway (KMS_LOAD_FORCE), answers may be wrong: ", 52) &&
              strstr(info.warning, "does not match moved: of its"), "'%s'", info.warning);
    }
    kms_free(h);
    check_fallback(syms, kallsyms, dir, simg, slen, moved, klen);
    free(moved);

    /* every truncation, and a flipped bit at every byte with the CRC
     * repaired: loads or fails with a message, never crashes */
    snprintf(path, sizeof path, "%s/damaged", dir);
    for (size_t keep = 0; keep < slen; keep += (keep < 200 ? 1 : 97)) {
        spit(path, simg, keep);
        check_error(kms_load(path, kallsyms, 0, &e), &e, KMS_E_SYMS, "truncated");
    }
    int refused = 0, loaded = 0;
    for (size_t pos = 16; pos < slen; pos += 7) {
        memcpy(img, simg, slen);
        img[pos] ^= (unsigned char)(1u << (pos % 8));
        fix_crc(img, slen);
        spit(path, img, slen);
        h = kms_load(path, kallsyms, 0, &e);
        if (h) {
            uint64_t probes[336];
            for (size_t k = 0; k < 336; k++)
                probes[k] = 0xffffffffab600000u + 61 * k;
            CHECK(batch_differs(h, probes, 336) == 0, "flip %zu: batched answers differ", pos);
            kms_foreach(h, count_lines, &lines);
            loaded++;
        } else {
            CHECK(e.message[0] && !strchr(e.message, '\n'), "flip %zu: '%s'", pos, e.message);
            refused++;
        }
        kms_free(h);
    }
    CHECK(loaded > 0 && refused > 0, "flips: %d loaded, %d refused", loaded, refused);
    free(img);
    free(simg);
    free(ktext);
    if (failures)
        fprintf(stderr, "test_kms: %d failures\n", failures);
    else
        printf("test_kms: all passed\n");
    return failures != 0;
}
