// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * kms-bench: what bench/rows.py times for libkmodsyms (one JSON line each).
 *
 *   kms-bench floor KALLSYMS RUNS        read the file and split its lines: the floor
 *   kms-bench load SYMS KALLSYMS RUNS    kms_load + kms_free, each run cold (nothing kept)
 *   kms-bench load-modules SYMS KALLSYMS MODULES_DIR PROC_MODULES RUNS
 *                                        the same through kms_load_opts, each loaded
 *                                        module's .ko read and matched too (compressed
 *                                        or not: bench row c_load_compressed)
 *   kms-bench load-deferred SYMS KALLSYMS MODULES_DIR PROC_MODULES RUNS
 *                                        the same with KMS_LOAD_DEFER_MODULES (no .ko
 *                                        read), then kms_read_modules() of the first
 *                                        loaded module ("first": that call's seconds)
 *   kms-bench resolve SYMS KALLSYMS N LO HI
 *                                        kms_resolve of N addresses uniform in [LO, HI]
 *   kms-bench resolve-many SYMS KALLSYMS N LO HI
 *                                        the same N addresses through kms_resolve_many,
 *                                        KMS_RESOLVE_BATCH a call
 *   kms-bench memory SYMS KALLSYMS       peak RSS of one load above the process's before it
 *
 * Times are seconds of CLOCK_MONOTONIC, one per run.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kmodsyms.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int die(const char *what)
{
    fprintf(stderr, "kms-bench: %s\n", what);
    return 2;
}

/* The floor: one read of the whole file, then every line found (memchr). */
static long floor_once(const char *path)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0)
        return -1;
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 1 << 20, n = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while (buf && (got = read(fd, buf + n, cap - n)) > 0) {
        n += (size_t)got;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    close(fd);
    if (!buf)
        return -1;
    long lines = 0;
    for (const char *p = buf, *end = buf + n; p < end; lines++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    free(buf);
    return lines;
}

/* N addresses uniform in [LO, HI] by xorshift64 (uniform enough,
 * reproducible): resolve and resolve-many answer the same ones. */
static uint64_t *random_addresses(long n, uint64_t lo, uint64_t hi)
{
    uint64_t *q = malloc((size_t)(n > 0 ? n : 1) * sizeof *q), x = 0x9E3779B97F4A7C15u;
    for (long i = 0; q && i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        q[i] = lo + x % (hi - lo + 1);
    }
    return q;
}

static long status_field(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t len = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, len) && line[len] == ':')
            v = strtol(line + len + 1, NULL, 10) * 1024;
    if (f)
        fclose(f);
    return v;
}

/* floor KALLSYMS RUNS: the read alone, each run's seconds. */
static int bench_floor(char **argv)
{
    int runs = atoi(argv[3]);
    printf("{\"seconds\": [");
    for (int r = 0; r < runs; r++) {
        double t0 = now();
        if (floor_once(argv[2]) < 0)
            return die("cannot read kallsyms");
        printf("%s%.6f", r ? ", " : "", now() - t0);
    }
    printf("]}\n");
    return 0;
}

/* One load of O, timed: the handle, its seconds in *DT; NULL, said on
 * stderr, when it fails. */
static kms_handle *timed_load(const struct kms_load_opts *o, double *dt)
{
    kms_error err;
    double t0 = now();
    kms_handle *h = kms_load_opts(o, &err);
    *dt = now() - t0;
    if (!h)
        die(err.message);
    return h;
}

/* load SYMS KALLSYMS RUNS: each load's seconds (kms_load()'s options). */
static int bench_load(char **argv)
{
    struct kms_load_opts o = {.size = sizeof o, .syms_path = argv[2], .kallsyms_path = argv[3]};
    int runs = atoi(argv[4]);
    double dt;
    printf("{\"seconds\": [");
    for (int r = 0; r < runs; r++) {
        kms_handle *h = timed_load(&o, &dt);
        if (!h)
            return 2;
        kms_free(h);
        printf("%s%.6f", r ? ", " : "", dt);
    }
    printf("]}\n");
    return 0;
}

/* load-modules SYMS KALLSYMS MODULES_DIR PROC_MODULES RUNS: each load's
 * seconds, and what it did with the modules. */
static int bench_load_modules(char **argv)
{
    struct kms_load_opts o = {.size = sizeof o, .syms_path = argv[2], .kallsyms_path = argv[3],
                              .modules_dir = argv[4], .proc_modules = argv[5]};
    int runs = atoi(argv[6]);
    size_t nmods = 0, matched = 0, sized = 0;
    double dt;
    printf("{\"seconds\": [");
    for (int r = 0; r < runs; r++) {
        kms_handle *h = timed_load(&o, &dt);
        if (!h)
            return 2;
        /* what the load did: the row tells matched files from refused ones */
        nmods = kms_modules(h, NULL, 0);
        struct kms_module *m = malloc((nmods ? nmods : 1) * sizeof *m);
        if (!m)
            return die("out of memory");
        m[0].size = sizeof *m;
        kms_modules(h, m, nmods);
        matched = sized = 0;
        for (size_t k = 0; k < nmods; k++) {
            matched += m[k].status == KMS_MODULE_MATCHED;
            sized += m[k].sized;
        }
        free(m);
        kms_free(h);
        printf("%s%.6f", r ? ", " : "", dt);
    }
    printf("], \"modules\": %zu, \"matched\": %zu, \"sized\": %zu}\n", nmods, matched, sized);
    return 0;
}

/* load-deferred SYMS KALLSYMS MODULES_DIR PROC_MODULES RUNS: each load's
 * seconds, and each first module's read. */
static int bench_load_deferred(char **argv)
{
    kms_error err;
    struct kms_load_opts o = {.size = sizeof o, .syms_path = argv[2], .kallsyms_path = argv[3],
                              .modules_dir = argv[4], .proc_modules = argv[5],
                              .flags = KMS_LOAD_DEFER_MODULES};
    int runs = atoi(argv[6]);
    char first[256] = "";
    double *read_s = malloc((size_t)(runs > 0 ? runs : 1) * sizeof *read_s);
    struct kms_module m = {.size = sizeof m};
    if (!read_s)
        return die("out of memory");
    double dt, t0;
    printf("{\"seconds\": [");
    for (int r = 0; r < runs; r++) {
        kms_handle *h = timed_load(&o, &dt);
        if (!h)
            return 2;
        if (kms_modules(h, &m, 1) < 1 || m.status != KMS_MODULE_DEFERRED)
            return die("no deferred module");
        snprintf(first, sizeof first, "%s", m.name);
        const char *name = first;
        t0 = now();
        if (kms_read_modules(h, &name, 1, &err))
            return die(err.message);
        read_s[r] = now() - t0;
        if (kms_modules(h, &m, 1) < 1 || m.status != KMS_MODULE_MATCHED)
            return die("the module read was not matched");
        kms_free(h);
        printf("%s%.6f", r ? ", " : "", dt);
    }
    printf("], \"first\": [");
    for (int r = 0; r < runs; r++)
        printf("%s%.6f", r ? ", " : "", read_s[r]);
    printf("], \"module\": \"%s\"}\n", first);
    free(read_s);
    return 0;
}

/* resolve|resolve-many SYMS KALLSYMS N SEED SPAN: N random addresses
 * answered one by one or in batches. */
static int bench_resolve(char **argv)
{
    kms_error err;
    int many = !strcmp(argv[1], "resolve-many");
    long n = atol(argv[4]);
    uint64_t *q = random_addresses(n, strtoull(argv[5], NULL, 0), strtoull(argv[6], NULL, 0));
    struct kms_sym *out = malloc(KMS_RESOLVE_BATCH * sizeof *out);
    unsigned long long sized = 0, found = 0;
    kms_handle *h = kms_load(argv[2], argv[3], 0, &err);
    if (!h || !q || !out)
        return die(h ? "out of memory" : err.message);
    memset(out, 0, KMS_RESOLVE_BATCH * sizeof *out); /* faulted in before the clock */
    out[0].size = sizeof *out;
    double t0 = now();
    if (!many) {
        for (long i = 0; i < n; i++) {
            kms_resolve(h, q[i], &out[0]);
            sized += out[0].sized;
            found += out[0].sym != NULL;
        }
    } else {
        /* as kmodsyms-c resolve: a batch answered, its records read */
        for (long i = 0; i < n; i += KMS_RESOLVE_BATCH) {
            size_t k = (size_t)(n - i < KMS_RESOLVE_BATCH ? n - i : KMS_RESOLVE_BATCH);
            kms_resolve_many(h, q + i, k, out);
            for (size_t j = 0; j < k; j++) {
                sized += out[j].sized;
                found += out[j].sym != NULL;
            }
        }
    }
    double dt = now() - t0;
    printf("{\"seconds\": %.6f, \"addresses\": %ld, \"answered\": %llu, \"sized\": %llu}\n",
           dt, n, found, sized);
    kms_free(h);
    free(out);
    free(q);
    return 0;
}

/* memory SYMS KALLSYMS: the load's memory. */
static int bench_memory(char **argv)
{
    kms_error err;
    /* Reset the high-water mark to the current RSS (Linux >= 4.0). */
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
    long before = status_field("VmRSS");
    kms_handle *h = kms_load(argv[2], argv[3], 0, &err);
    if (!h)
        return die(err.message);
    long peak = status_field("VmHWM"), anon = status_field("RssAnon"),
         file = status_field("RssFile");
    printf("{\"before\": %ld, \"peak\": %ld, \"rss_anon\": %ld, \"rss_file\": %ld}\n", before,
           peak - before, anon, file);
    kms_free(h);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct { const char *mode; int argc; int (*run)(char **argv); } modes[] = {
        {"floor", 4, bench_floor}, {"load", 5, bench_load},
        {"load-modules", 7, bench_load_modules}, {"load-deferred", 7, bench_load_deferred},
        {"resolve", 7, bench_resolve}, {"resolve-many", 7, bench_resolve},
        {"memory", 4, bench_memory},
    };
    for (size_t k = 0; argc >= 3 && k < sizeof modes / sizeof modes[0]; k++)
        if (!strcmp(argv[1], modes[k].mode) && argc == modes[k].argc)
            return modes[k].run(argv);
    return die("usage: kms-bench floor|load|load-modules|load-deferred|resolve|resolve-many|"
               "memory ARGS");
}
