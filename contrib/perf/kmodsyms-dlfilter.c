// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * kmodsyms-dlfilter.so: a perf script --dlfilter that keeps only the
 * samples whose kernel address lies in the named modules, built-in or
 * loaded, as libkmodsyms places them (kms_module_ranges()):
 *
 *   perf script --dlfilter kmodsyms-dlfilter.so --dlarg ext4 [--dlarg xfs ...]
 *
 * Other --dlarg values choose the files (the running kernel's by default):
 *   syms=F          dtrace_syms (default /lib/modules/$(uname -r)/kernel/dtrace_syms)
 *   kallsyms=K      kallsyms (default /proc/kallsyms)
 *   modules-dir=D   loaded modules' .ko files (kms_load_opts.modules_dir)
 *   sysfs-root=S, proc-modules=P, force   as kmodsyms-c's options
 *
 * Without a usable dtrace_syms for the running kernel (none installed is
 * the normal case) it says so once on stderr at start and filters on what
 * kallsyms knows: the core kernel as "vmlinux" and each loaded module
 * (perf's own kernel maps, which it builds from kallsyms and the modules'
 * mappings); a built-in module then keeps no sample, and a module that
 * is not loaded is said at start.  A dtrace_syms named with syms= that
 * cannot be used is an error.
 *
 * Built against perf's <perf/perf_dlfilter.h> (Debian: linux-perf).
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <perf/perf_dlfilter.h>

#include "kmodsyms.h"

#define NAME "kmodsyms-dlfilter"

/* Filled in by perf before start(). */
struct perf_dlfilter_fns perf_dlfilter_fns;

struct span {
    uint64_t start, end; /* [start, end) */
};

struct filter {
    kms_handle *h;          /* NULL when degraded */
    struct span *spans;     /* the wanted modules' ranges, sorted, merged */
    size_t nspans;
    char **modules;         /* the wanted module names, as the kernel spells them */
    size_t nmodules;
};

static void free_filter(struct filter *f)
{
    if (!f)
        return;
    kms_free(f->h);
    free(f->spans);
    for (size_t i = 0; i < f->nmodules; i++)
        free(f->modules[i]);
    free(f->modules);
    free(f);
}

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Module names from one --dlarg (comma-separated), '-' read as '_'. */
static int add_modules(struct filter *f, const char *arg)
{
    const char *p = arg;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len) {
            char **grown = realloc(f->modules, (f->nmodules + 1) * sizeof *grown);
            char *name = malloc(len + 1);
            if (!grown || !name) {
                free(name);
                if (grown)
                    f->modules = grown;
                return -1;
            }
            f->modules = grown;
            for (size_t i = 0; i < len; i++)
                name[i] = p[i] == '-' ? '_' : p[i];
            name[len] = 0;
            f->modules[f->nmodules++] = name;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

/* The core kernel's lines of no object that vmlinux's own symbol table
 * sizes (R56: linux_banner, init_uts_ns of init/version-timestamp.o, which
 * no object section of kms_module_ranges("vmlinux") holds). */
struct extra {
    struct span *spans;
    size_t n, cap;
};

static int add_sized_core_line(const struct kms_line *l, void *arg)
{
    struct extra *x = arg;
    if (l->origin != KMS_ORIGIN_CORE || l->object || l->size_kind != KMS_SIZE_EXACT ||
        !l->sym_size || l->address + l->sym_size < l->address)
        return 0;
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 16;
        struct span *s = realloc(x->spans, cap * sizeof *s);
        if (!s)
            return -1;
        x->spans = s;
        x->cap = cap;
    }
    x->spans[x->n++] = (struct span){l->address, l->address + l->sym_size};
    return 0;
}

/* The wanted modules' address ranges, sorted and merged, for one binary
 * search a sample. */
static int collect_spans(struct filter *f)
{
    struct extra x = {0};
    for (size_t i = 0; i < f->nmodules; i++)
        if (!strcmp(f->modules[i], "vmlinux") && kms_foreach(f->h, add_sized_core_line, &x)) {
            free(x.spans);
            return -1;
        }
    size_t total = 0;
    for (size_t i = 0; i < f->nmodules; i++)
        total += kms_module_ranges(f->h, f->modules[i], NULL, 0);
    struct kms_range *ranges = malloc((total ? total : 1) * sizeof *ranges);
    f->spans = malloc((total + x.n ? total + x.n : 1) * sizeof *f->spans);
    if (!ranges || !f->spans) {
        free(ranges);
        free(x.spans);
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < f->nmodules && n < total; i++) {
        ranges[n].size = sizeof *ranges; /* the array's stride */
        n += kms_module_ranges(f->h, f->modules[i], ranges + n, total - n);
    }
    for (size_t i = 0; i < n; i++)
        f->spans[i] = (struct span){ranges[i].start, ranges[i].end};
    free(ranges);
    for (size_t i = 0; i < x.n; i++)
        f->spans[n++] = x.spans[i];
    free(x.spans);
    qsort(f->spans, n, sizeof *f->spans, span_cmp);
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (out && f->spans[i].start <= f->spans[out - 1].end) {
            if (f->spans[i].end > f->spans[out - 1].end)
                f->spans[out - 1].end = f->spans[i].end;
        } else {
            f->spans[out++] = f->spans[i];
        }
    }
    f->nspans = out;
    return 0;
}

/* MSG on stderr as this filter's user acts on it: the library's word for
 * its force flag (KMS_FORCE_WORD) is "--dlarg force" here. */
static void put_message(const char *msg)
{
    const char *w = strstr(msg, KMS_FORCE_WORD);
    if (w)
        fprintf(stderr, "%.*s--dlarg force%s", (int)(w - msg), msg, w + strlen(KMS_FORCE_WORD));
    else
        fputs(msg, stderr);
}

/* What the load says to a user, once at start: what force overrode, and
 * each loaded module whose file was refused or cannot be read. */
static int warn_load(const kms_handle *h)
{
    struct kms_info info = {.size = sizeof info};
    kms_get_info(h, &info);
    if (info.warning[0]) {
        fputs(NAME ": warning: ", stderr);
        put_message(info.warning);
        fputc('\n', stderr);
    }
    size_t n = kms_modules(h, NULL, 0);
    struct kms_module *mods = malloc((n ? n : 1) * sizeof *mods);
    if (!mods)
        return -1;
    mods[0].size = sizeof *mods;
    kms_modules(h, mods, n);
    for (size_t i = 0; i < n; i++)
        if (mods[i].warning)
            fprintf(stderr, NAME ": warning: %s\n", mods[i].warning);
    free(mods);
    return 0;
}

/* Degraded: each wanted module that kallsyms shows no line of (read
 * alone, as kms_load answers without dtrace_syms) keeps no sample: said
 * once, as a module neither built in nor loaded is with dtrace_syms.
 * Nothing when kallsyms cannot be read (perf's maps still filter). */
static void warn_not_loaded(const struct filter *f, const struct kms_load_opts *given)
{
    struct kms_load_opts opts = *given;
    opts.flags |= KMS_LOAD_FALLBACK | KMS_LOAD_NO_MODULES;
    kms_error err;
    kms_handle *h = kms_load_opts(&opts, &err);
    for (size_t i = 0; h && i < f->nmodules; i++)
        if (!kms_module_known(h, f->modules[i]))
            fprintf(stderr, NAME ": module %s is not loaded, and built-in modules are unknown "
                    "without dtrace_syms: it keeps no sample\n", f->modules[i]);
    kms_free(h);
}

int start(void **data, void *ctx)
{
    int argc = 0;
    char **argv = perf_dlfilter_fns.args ? perf_dlfilter_fns.args(ctx, &argc) : NULL;
    struct kms_load_opts opts = {.size = sizeof opts};
    struct filter *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "syms=", 5) == 0)
            opts.syms_path = a + 5;
        else if (strncmp(a, "kallsyms=", 9) == 0)
            opts.kallsyms_path = a + 9;
        else if (strncmp(a, "modules-dir=", 12) == 0)
            opts.modules_dir = a + 12;
        else if (strncmp(a, "sysfs-root=", 11) == 0)
            opts.sysfs_root = a + 11;
        else if (strncmp(a, "proc-modules=", 13) == 0)
            opts.proc_modules = a + 13;
        else if (strcmp(a, "force") == 0)
            opts.flags |= KMS_LOAD_FORCE;
        else if (strchr(a, '=')) {
            fprintf(stderr, NAME ": unknown --dlarg %s (syms=, kallsyms=, modules-dir=, "
                    "sysfs-root=, proc-modules=, force, or module names)\n", a);
            free_filter(f);
            return -EINVAL;
        } else if (add_modules(f, a) != 0) {
            free_filter(f);
            return -ENOMEM;
        }
    }
    if (!f->nmodules) {
        fprintf(stderr, NAME ": name the modules to keep: --dlarg MODULE[,MODULE...]\n");
        free_filter(f);
        return -EINVAL;
    }
    kms_error err;
    f->h = kms_load_opts(&opts, &err);
    if (!f->h) {
        if (opts.syms_path || err.code == KMS_E_NOMEM) {
            fputs(NAME ": ", stderr);
            put_message(err.message);
            fputc('\n', stderr);
            free_filter(f);
            return err.code == KMS_E_NOMEM ? -ENOMEM : -EINVAL;
        }
        fputs(NAME ": no usable dtrace_syms (", stderr);
        put_message(err.message);
        fputs("): built-in modules are unknown; filtering on the core kernel (vmlinux) and the "
              "loaded modules kallsyms shows\n", stderr);
        warn_not_loaded(f, &opts);
    } else {
        if (warn_load(f->h) != 0) {
            free_filter(f);
            return -ENOMEM;
        }
        for (size_t i = 0; i < f->nmodules; i++)
            if (!kms_module_known(f->h, f->modules[i]))
                fprintf(stderr, NAME ": module %s is neither built in nor loaded: it keeps no "
                        "sample\n", f->modules[i]);
        if (collect_spans(f) != 0) {
            free_filter(f);
            return -ENOMEM;
        }
    }
    *data = f;
    return 0;
}

int stop(void *data, void *ctx)
{
    (void)ctx;
    free_filter(data);
    return 0;
}

static int in_spans(const struct filter *f, uint64_t addr)
{
    size_t lo = 0, hi = f->nspans;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < f->spans[mid].start)
            hi = mid;
        else if (addr >= f->spans[mid].end)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* Degraded: perf's own name for the kernel object holding the sample,
 * "[kernel.kallsyms]" (or a vmlinux path) for the core, "[MOD]" for a
 * loaded module. */
static int wanted_by_perf(const struct filter *f, void *ctx)
{
    const struct perf_dlfilter_al *al = perf_dlfilter_fns.resolve_ip ?
        perf_dlfilter_fns.resolve_ip(ctx) : NULL;
    if (!al || !al->is_kernel_ip || !al->dso)
        return 0;
    const char *dso = al->dso;
    size_t len = strlen(dso);
    int module = len > 2 && dso[0] == '[' && dso[len - 1] == ']' &&
                 strcmp(dso, "[kernel.kallsyms]") != 0 && strncmp(dso, "[guest.", 7) != 0;
    for (size_t i = 0; i < f->nmodules; i++) {
        const char *want = f->modules[i];
        if (!module) {
            if (strcmp(want, "vmlinux") == 0)
                return 1;
            continue;
        }
        size_t k = 0;
        for (; want[k] && k + 2 < len; k++)
            if (want[k] != (dso[k + 1] == '-' ? '_' : dso[k + 1]))
                break;
        if (!want[k] && k + 2 == len)
            return 1;
    }
    return 0;
}

int filter_event(void *data, const struct perf_dlfilter_sample *sample, void *ctx)
{
    const struct filter *f = data;
    if ((sample->cpumode & PERF_RECORD_MISC_CPUMODE_MASK) != PERF_RECORD_MISC_KERNEL)
        return 1;
    if (!f->h)
        return !wanted_by_perf(f, ctx);
    return !in_spans(f, sample->ip);
}

const char *filter_description(const char **long_description)
{
    static const char *const long_text =
        "--dlarg MODULE[,MODULE...]: keep the samples whose kernel address lies in one of\n"
        "the modules, built-in or loaded (libkmodsyms: dtrace_syms + kallsyms).\n"
        "--dlarg syms=F, kallsyms=K, modules-dir=D, sysfs-root=S, proc-modules=P, force:\n"
        "other files than the running kernel's.  Without a usable dtrace_syms: only\n"
        "vmlinux and loaded modules, as kallsyms knows them (said once on stderr).";
    if (long_description)
        *long_description = long_text;
    return "keep samples in the named kernel modules, built-in or loaded (kmodsyms)";
}
