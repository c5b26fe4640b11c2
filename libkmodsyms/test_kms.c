// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * test_kms SYMS KALLSYMS SCRATCHDIR: the C tests of libkmodsyms' loads and
 * answers, on the fixture tree's dtrace_syms and kallsyms (make check runs
 * them under AddressSanitizer and UndefinedBehaviorSanitizer): the
 * fixture's documented answers (docs/resolver.md, docs/format.md) from a
 * file and from a buffer, records of other sizes, the 2.0 queries, sizes a
 * module's core bounds, threads, batches and the formatter.  The
 * comparisons with the linker maps are tests/test_clib.py's; loaded
 * modules are test_kms_modules.c's, bad inputs test_kms_errors.c's.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "kmodsyms.h"
#include "kms_internal.h"
#include "test_kms.h"

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
    size_t klen, lines = 0;

    if (!test_usage(argc, "test_kms"))
        return 2;
    const char *syms = argv[1], *kallsyms = argv[2], *dir = argv[3];
    unsigned char *ktext = slurp(kallsyms, &klen);
    kms_handle *h = kms_load(syms, kallsyms, 0, &e);
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
    check_core_bound(syms, kallsyms, dir);
    check_attribute_at_link(syms);

    h = kms_load_buffer(syms, (const char *)ktext, klen, "fixture", 0, &e);
    CHECK(h != NULL, "load_buffer: %s", e.message);
    if (h)
        check_fixture(h);
    kms_free(h);
    free(ktext);
    return test_summary("test_kms");
}
