// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * kms-dt-module: the kernel part of DTrace's module table, built as
 * dtrace-utils builds it (libdtrace/dt_module.c: dtrace_update(),
 * dt_modsym_update(), dt_modsym_addsym(), dtrace_lookup_by_addr() and
 * dtrace_lookup_by_name(); libdtrace/dt_symtab.c: the per-module symbol
 * tables), from libkmodsyms: the change docs/dtrace-utils.md describes,
 * written as a program so that tests can replay dtrace's rules over real
 * kernels.  It is an example to read beside dt_module.c, not a copy of it.
 *
 *   kms-dt-module [SOURCE] COMMAND
 *
 * SOURCE, where the lines come from:
 *   (default)              libkmodsyms: kms_load_opts() then kms_foreach(),
 *                          each line with its module list, size and origin;
 *                          --syms F --kallsyms K --modules-dir D --sysfs-root S
 *                          --proc-modules P --force as kmodsyms-c; --modpath DIR
 *                          as dtrace's -x modpath (DIR/kernel/dtrace_syms, and
 *                          DIR's .ko files; default /lib/modules/$(uname -r)).  When no
 *                          dtrace_syms can be used: one warning line, then
 *                          kallsyms as dtrace reads it without kallmodsyms.
 *   --kallmodsyms FILE     /proc/kallmodsyms text ('kmodsyms kallmodsyms'),
 *                          parsed as dt_modsym_update() parses it
 *   --plain-kallsyms FILE  /proc/kallsyms as dtrace reads it when there is no
 *                          /proc/kallmodsyms (and no modules.builtin.ranges):
 *                          every symbol size 1, then the gap to the next one
 *
 * COMMAND:
 *   lines    every line as the table took it: ADDR SIZE TYPE NAME MODULES
 *            VERDICT, tab-separated (MODULES comma-separated, "-" for none;
 *            VERDICT "added", "skipped" (dt_modsym_addsym's skip list: ranges
 *            only), "dropped" (bpf, kprobes, absolute, .init.scratch) or
 *            "rejected" (a text line dtrace cannot parse; the line follows))
 *   modules  each module in dtrace's module-list order: NAME SYMBOLS
 *            text=START-END,... data=START-END,... (hex, [START, END))
 *   lookup   addresses (hex) from stdin, dtrace_lookup_by_addr() of each:
 *            ADDR MODULE SYMBOL START SIZE MOD`SYM+0xOFF, or ADDR MODULE -
 *            (a module's range but no symbol), or ADDR - (no module)
 *   name     MOD`NAME lines from stdin, dtrace_lookup_by_name() of each:
 *            MOD`NAME ADDR SIZE, or MOD`NAME -
 *   spans    module names from stdin, libkmodsyms' own kms_module_spans() of
 *            each (the ranges as it says dt_module.c builds them, to hold
 *            against the table's): MODULE text=... data=... as 'modules'
 *   time     what building the table cost, one JSON line (bench/rows.py):
 *            "read" seconds (the load, or the read loop, with every line
 *            added; "read_cpu" the same in CPU time), "sort" seconds (the
 *            tables sorted), symbols, modules
 *
 * Bad usage or input: one line on stderr, exit status 2.
 */
#define _POSIX_C_SOURCE 200809L /* getline, strdup */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kmodsyms.h"

#define PROG "kms-dt-module"
#define KSYM_NAME_MAX 512 /* include/linux/kallsyms.h */

/* ------------------------------------------------------------ the tables */

/* dtrace_addr_range_t: [va, va + size) */
struct addr_range {
    uint64_t va, size;
};

struct range_list {
    struct addr_range *r;
    size_t n, cap;
};

/* dt_symbol_t: one symbol of a module's table. */
struct symbol {
    char *name;
    uint64_t addr, size;
    char type;           /* kallsyms type letter */
    uint32_t next_same;  /* next symbol of the same name hash in the module, or NONE */
};

/* dt_symrange_t: after sorting, each address range maps to one symbol. */
struct symrange {
    uint64_t lo, hi;
    uint32_t sym;
};

#define NONE UINT32_MAX

struct module {
    char *name;
    struct range_list text, data;
    struct symbol *syms;
    uint32_t nsyms, capsyms;
    uint32_t *sized;         /* the symbols of nonzero size (dtst_ranges before sorting) */
    uint32_t nsized;
    struct symrange *ranges; /* formed by finish_symtab() */
    uint32_t nranges;
    uint32_t *head, *tail;   /* each name bucket's first and last symbol, or NONE */
    uint32_t nbuckets;       /* a power of two, at least half the symbols */
};

#define MOD_BUCKETS 1024u

struct table {
    struct module *mods;     /* in dtrace's module-list order once finished */
    size_t nmods, capmods;
    uint32_t mod_hash[MOD_BUCKETS]; /* module index + 1 by name (dt_module_hval()); 0: empty */
    int gap_sizes;           /* plain kallsyms: sizes become gaps (dt_symtab_sort flag) */
    /* dt_kasstate_t: where the reading is */
    int kernel_end_seen, loadable, in_init_scratch;
    size_t last_mod;         /* the module and kind of the last sized built-in line */
    int last_text;
    FILE *lines_out;         /* 'lines': each line's verdict */
};

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, PROG ": out of memory\n");
        exit(2);
    }
    return q;
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d) {
        fprintf(stderr, PROG ": out of memory\n");
        exit(2);
    }
    return d;
}

static uint32_t str_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* dt_module_lookup_by_name(), else dt_module_create(). */
static size_t module_get(struct table *t, const char *name)
{
    uint32_t b = str_hash(name) % MOD_BUCKETS;
    for (; t->mod_hash[b]; b = (b + 1) % MOD_BUCKETS)
        if (strcmp(t->mods[t->mod_hash[b] - 1].name, name) == 0)
            return t->mod_hash[b] - 1;
    if (t->nmods + 1 == MOD_BUCKETS) {
        fprintf(stderr, PROG ": more than %u modules\n", MOD_BUCKETS - 1);
        exit(2);
    }
    t->mod_hash[b] = (uint32_t)t->nmods + 1;
    if (t->nmods == t->capmods) {
        t->capmods = t->capmods ? 2 * t->capmods : 64;
        t->mods = xrealloc(t->mods, t->capmods * sizeof *t->mods);
    }
    struct module *m = &t->mods[t->nmods];
    memset(m, 0, sizeof *m);
    m->name = xstrdup(name);
    return t->nmods++;
}

static struct addr_range *range_append(struct range_list *l, uint64_t va, uint64_t size)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->r = xrealloc(l->r, l->cap * sizeof *l->r);
    }
    l->r[l->n] = (struct addr_range){va, size};
    return &l->r[l->n++];
}

/* A symbol appended to its name's chain: the first inserted answers a name. */
static void hash_append(struct module *m, uint32_t id)
{
    uint32_t b = str_hash(m->syms[id].name) & (m->nbuckets - 1);
    m->syms[id].next_same = NONE;
    if (m->tail[b] == NONE)
        m->head[b] = id;
    else
        m->syms[m->tail[b]].next_same = id;
    m->tail[b] = id;
}

static void rehash(struct module *m)
{
    m->nbuckets = m->nbuckets ? 2 * m->nbuckets : 16;
    m->head = xrealloc(m->head, m->nbuckets * sizeof *m->head);
    m->tail = xrealloc(m->tail, m->nbuckets * sizeof *m->tail);
    for (uint32_t b = 0; b < m->nbuckets; b++)
        m->head[b] = m->tail[b] = NONE;
    for (uint32_t id = 0; id < m->nsyms; id++)
        hash_append(m, id);
}

/* The symbols dt_modsym_addsym() keeps out of the symbol table (they still
 * grow the module's ranges): voluminous ones no probe's code runs through. */
static const char *const skip_prefixes[] = {
    "__crc_", "__ksymtab_", "__kcrctab_", "__kstrtab_", "__param_", "__syscall_meta__",
    "__p_syscall_meta__", "__event_", "event_", "ftrace_event_", "types__", "args__",
    "__tracepoint_", "__tpstrtab_", "__initcall_", "__setup_", "__pci_fixup_",
};

static int skipped_name(const char *name)
{
    for (size_t i = 0; i < sizeof skip_prefixes / sizeof *skip_prefixes; i++)
        if (strncmp(name, skip_prefixes[i], strlen(skip_prefixes[i])) == 0)
            return 1;
    return 0;
}

static int is_text(char type)
{
    return type == 't' || type == 'T' || type == 'w' || type == 'W';
}

/* dt_modsym_addsym(): the symbol into the module's table (unless skipped),
 * then the module's text or data range grown by it. */
static void add_symbol(struct table *t, size_t mi, const char *name, uint64_t addr,
                       uint64_t size, char type, int skip)
{
    struct module *m = &t->mods[mi];
    if (!skip) {
        if (m->nsyms == m->capsyms) {
            m->capsyms = m->capsyms ? 2 * m->capsyms : 64;
            m->syms = xrealloc(m->syms, m->capsyms * sizeof *m->syms);
            m->sized = xrealloc(m->sized, m->capsyms * sizeof *m->sized);
        }
        uint32_t id = m->nsyms++;
        m->syms[id] = (struct symbol){xstrdup(name), addr, size, type, NONE};
        if (m->nsyms > 2 * m->nbuckets)
            rehash(m);
        else
            hash_append(m, id);
        if (size > 0)
            m->sized[m->nsized++] = id;
    }
    if (size == 0)
        return; /* an unsized line grows no range */
    int text = is_text(type);
    struct range_list *l = text ? &m->text : &m->data;
    if (!t->loadable) {
        /* The kernel and built-in modules come in address order: a run of
         * one module's lines of one kind is one range, from its first
         * line's address to its last line's end. */
        if (mi == t->last_mod && text == t->last_text && l->n) {
            struct addr_range *r = &l->r[l->n - 1];
            r->size = addr + size - r->va;
            return;
        }
        t->last_mod = mi;
        t->last_text = text;
        range_append(l, addr, size);
        return;
    }
    /* A loadable module has one text and one data range, spanning all. */
    if (!l->n) {
        range_append(l, addr, size);
        return;
    }
    struct addr_range *r = &l->r[0];
    uint64_t end = r->va + r->size;
    if (addr < r->va)
        r->va = addr;
    if (end < addr + size)
        end = addr + size;
    r->size = end - r->va;
}

enum verdict { ADDED, SKIPPED, DROPPED };
static const char *const verdict_names[] = {"added", "skipped", "dropped"};

/*
 * dt_modsym_update() after the parse: the lines dtrace drops, the end of
 * the kernel's own lines, then the symbol added to each of its modules.
 * LOADABLE is -1 when the source cannot say (text: decided as dtrace does,
 * by the lines after _end), else whether the line is a loaded or
 * pseudo-module's.
 */
static enum verdict take_line(struct table *t, uint64_t addr, uint64_t size, char type,
                              const char *name, const char *const *mods, size_t nmods,
                              int loadable)
{
    if (nmods == 1 && (strcmp(mods[0], "bpf") == 0 || strcmp(mods[0], "__builtin__kprobes") == 0))
        return DROPPED; /* not modules: BPF programs, kprobes' instruction pages */
    if (type == 'a' || type == 'A')
        return DROPPED; /* per-cpu offsets, not addresses */
    if (strcmp(name, "__init_scratch_begin") == 0) {
        t->in_init_scratch = 1;
        return DROPPED;
    }
    if (strcmp(name, "__init_scratch_end") == 0) {
        t->in_init_scratch = 0;
        return DROPPED;
    }
    if (t->in_init_scratch)
        return DROPPED;
    if (loadable >= 0) {
        t->loadable = loadable;
    } else if (strcmp(name, "_end") == 0 || strcmp(name, "__brk_limit") == 0) {
        t->kernel_end_seen = 1;
    } else if (t->kernel_end_seen) {
        t->kernel_end_seen = 0;
        t->loadable = 1;
    }
    int skip = skipped_name(name);
    for (size_t k = 0; k < nmods; k++) {
        /* dtrace names the ctf module's table shared_ctf */
        const char *mod = strcmp(mods[k], "ctf") == 0 ? "shared_ctf" : mods[k];
        add_symbol(t, module_get(t, mod), name, addr, size, type, skip);
    }
    return skip ? SKIPPED : ADDED;
}

static void print_line(struct table *t, uint64_t addr, uint64_t size, char type,
                       const char *name, const char *const *mods, size_t nmods, enum verdict v)
{
    if (!t->lines_out)
        return;
    fprintf(t->lines_out, "%" PRIx64 "\t%" PRIx64 "\t%c\t%s\t", addr, size, type, name);
    for (size_t k = 0; k < nmods; k++)
        fprintf(t->lines_out, "%s%s", k ? "," : "", mods[k]);
    fprintf(t->lines_out, "%s\t%s\n", nmods ? "" : "-", verdict_names[v]);
}

/* ------------------------------------------------------------ the symbol tables */

static const struct module *sort_mod; /* qsort has no argument */

static int bind_rank_weak(char type)
{
    return type == 'w' || type == 'W' || type == 'v' || type == 'V';
}

/* Whether the letter reads as STT_NOTYPE (dtrace's sym_type_to_info()). */
static int notype(char type)
{
    return !strchr("tTwWvVaArRgGdDsSbBcC", type);
}

/* dt_symrange_sort_cmp(): address, then larger size first, typed before
 * untyped, strong before weak, cleanup_module last, then the name. */
static int symrange_cmp(const void *a, const void *b)
{
    const struct symbol *l = &sort_mod->syms[*(const uint32_t *)a];
    const struct symbol *r = &sort_mod->syms[*(const uint32_t *)b];
    if (l->addr != r->addr)
        return l->addr < r->addr ? -1 : 1;
    if (l->size != r->size)
        return l->size > r->size ? -1 : 1;
    if (notype(l->type) != notype(r->type))
        return notype(l->type) ? 1 : -1;
    if (bind_rank_weak(l->type) != bind_rank_weak(r->type))
        return bind_rank_weak(l->type) ? 1 : -1;
    int lc = strcmp(l->name, "cleanup_module") == 0, rc = strcmp(r->name, "cleanup_module") == 0;
    if (lc != rc)
        return lc ? 1 : -1;
    return strcmp(l->name, r->name);
}

/*
 * dt_symtab_sort() and dt_symtab_form_ranges(): sort the sized symbols,
 * (plain kallsyms only) make each one's size the gap to the next, then
 * cut the address space into ranges each answered by one symbol: the
 * innermost one (greatest start, then the smaller size).
 */
static void finish_symtab(struct module *m, int gap_sizes)
{
    sort_mod = m;
    qsort(m->sized, m->nsized, sizeof *m->sized, symrange_cmp);
    if (gap_sizes)
        for (uint32_t i = 1; i < m->nsized; i++)
            m->syms[m->sized[i - 1]].size = m->syms[m->sized[i]].addr - m->syms[m->sized[i - 1]].addr;
    m->ranges = xrealloc(NULL, (2 * (size_t)m->nsized + 1) * sizeof *m->ranges);
    size_t cap = 2 * (size_t)m->nsized + 1;
    uint64_t hi = 0;
    uint32_t i = 0;
    while (i < m->nsized) {
        const struct symbol *s = &m->syms[m->sized[i]];
        uint32_t best = m->sized[i];
        if (s->size == 0) {
            i++;
            continue;
        }
        uint64_t lo = s->addr;
        if (lo < hi) {
            lo = hi;
            if (s->addr + s->size <= hi) {
                i++;
                continue;
            }
        }
        hi = s->addr + s->size;
        for (uint32_t j = i + 1; j < m->nsized; j++) {
            const struct symbol *s2 = &m->syms[m->sized[j]];
            if (s2->addr >= hi)
                break;
            if (s2->addr > lo) {
                hi = s2->addr;
                break;
            }
            uint64_t hi2 = s2->addr + s2->size;
            if (hi2 <= lo)
                continue;
            if (hi2 < hi)
                hi = hi2;
            const struct symbol *b = &m->syms[best];
            if (s2->addr > b->addr || (s2->addr == b->addr && s2->size < b->size))
                best = m->sized[j];
        }
        if (m->nranges && m->ranges[m->nranges - 1].hi == lo && m->ranges[m->nranges - 1].sym == best) {
            m->ranges[m->nranges - 1].hi = hi;
        } else {
            if (m->nranges == cap) {
                cap *= 2;
                m->ranges = xrealloc(m->ranges, cap * sizeof *m->ranges);
            }
            m->ranges[m->nranges++] = (struct symrange){lo, hi, best};
        }
    }
}

/* dtrace_update()'s end: every table sorted, vmlinux first in the list. */
static void finish_table(struct table *t)
{
    for (size_t i = 0; i < t->nmods; i++)
        finish_symtab(&t->mods[i], t->gap_sizes);
    for (size_t i = 0; i < t->nmods; i++)
        if (strcmp(t->mods[i].name, "vmlinux") == 0) {
            struct module v = t->mods[i];
            memmove(&t->mods[1], &t->mods[0], i * sizeof *t->mods);
            t->mods[0] = v;
            break;
        }
}

/* bsearch() with dtrace_addr_range_cmp() */
static int in_ranges(const struct range_list *l, uint64_t addr)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < l->r[mid].va)
            hi = mid;
        else if (addr >= l->r[mid].va + l->r[mid].size)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* dtrace_lookup_by_addr(): the first module whose text or data ranges hold
 * ADDR, then that module's symbol for it (dt_symbol_by_addr()). */
static const struct module *lookup_by_addr(const struct table *t, uint64_t addr,
                                           const struct symbol **sym)
{
    *sym = NULL;
    for (size_t i = 0; i < t->nmods; i++) {
        const struct module *m = &t->mods[i];
        if (!in_ranges(&m->text, addr) && !in_ranges(&m->data, addr))
            continue;
        uint32_t lo = 0, hi = m->nranges;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (addr < m->ranges[mid].lo)
                hi = mid;
            else if (addr >= m->ranges[mid].hi)
                lo = mid + 1;
            else {
                *sym = &m->syms[m->ranges[mid].sym];
                break;
            }
        }
        return m;
    }
    return NULL;
}

/* dtrace_lookup_by_name() for one kernel module: the first symbol of the
 * name inserted in its table. */
static const struct symbol *lookup_by_name(const struct table *t, const char *mod,
                                           const char *name)
{
    for (size_t i = 0; i < t->nmods; i++) {
        const struct module *m = &t->mods[i];
        if (strcmp(m->name, mod) != 0)
            continue;
        if (!m->nbuckets)
            return NULL;
        for (uint32_t id = m->head[str_hash(name) & (m->nbuckets - 1)]; id != NONE;
             id = m->syms[id].next_same)
            if (strcmp(m->syms[id].name, name) == 0)
                return &m->syms[id];
        return NULL;
    }
    return NULL;
}

/* ------------------------------------------------------------ the sources */

/* The change to dtrace_update(): each line of libkmodsyms, none parsed. */
static int from_kms_line(const struct kms_line *l, void *arg)
{
    struct table *t = arg;
    static const char *const vmlinux[] = {"vmlinux"};
    const char *const *mods = l->nmodules ? l->modules : vmlinux;
    size_t nmods = l->nmodules ? l->nmodules : 1;
    int loadable = l->origin == KMS_ORIGIN_LOADABLE || l->origin == KMS_ORIGIN_PSEUDO;
    enum verdict v = take_line(t, l->address, l->sym_size, l->type, l->name, mods, nmods, loadable);
    print_line(t, l->address, l->sym_size, l->type, l->name, mods, nmods, v);
    return 0;
}

/* dtrace_update()'s read loop over a text file, each line parsed as
 * dt_modsym_update() parses /proc/kallmodsyms (WITH_SIZE) or /proc/kallsyms. */
static int from_text(struct table *t, const char *path, int with_size)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, PROG ": cannot read %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    char name[KSYM_NAME_MAX + 1], mod[KSYM_NAME_MAX + 1];
    char fmt[64];
    /* dtrace reads the name and the module with a bare %s; bounded here */
    snprintf(fmt, sizeof fmt, with_size ? "%%llx %%llx %%c %%%ds [%%%ds" : "%%llx %%c %%%ds [%%%ds",
             KSYM_NAME_MAX, KSYM_NAME_MAX);
    while (getline(&line, &cap, f) > 0) {
        if (line[0] == '\n' || line[0] == 0)
            continue;
        unsigned long long addr = 0, size = 1;
        char type = 0;
        strcpy(mod, "vmlinux]");
        int got = with_size ? sscanf(line, fmt, &addr, &size, &type, name, mod)
                            : sscanf(line, fmt, &addr, &type, name, mod);
        if (got < (with_size ? 4 : 3)) {
            if (t->lines_out)
                fprintf(t->lines_out, "-\t-\t-\t-\t-\trejected\t%s", line);
            continue;
        }
        mod[strlen(mod) - 1] = '\0'; /* the closing ']' */
        const char *mods[] = {mod};
        enum verdict v = take_line(t, addr, size, type, name, mods, 1, -1);
        print_line(t, addr, size, type, name, mods, 1, v);
    }
    free(line);
    fclose(f);
    return 0;
}

/*
 * dtrace_update()'s kernel part: the lines of libkmodsyms when it can load
 * (each loaded module's .ko warning logged, as dt_dprintf() would), else
 * kallsyms read as dtrace reads it without kallmodsyms.
 */
static int dtrace_update_kernel(struct table *t, const struct kms_load_opts *opts)
{
    kms_error err;
    kms_handle *h = kms_load_opts(opts, &err);
    if (!h) {
        /* No usable dtrace_syms (none installed is the normal case). */
        const char *ks = opts->kallsyms_path ? opts->kallsyms_path : "/proc/kallsyms";
        fprintf(stderr, PROG ": warning: %s; reading %s without built-in modules\n",
                err.message, ks);
        t->gap_sizes = 1;
        return from_text(t, ks, 0);
    }
    size_t n = kms_modules(h, NULL, 0);
    struct kms_module *mods = xrealloc(NULL, n * sizeof *mods);
    if (n)
        mods[0].size = sizeof *mods;
    kms_modules(h, mods, n);
    for (size_t i = 0; i < n; i++)
        if (mods[i].warning)
            fprintf(stderr, PROG ": warning: %s\n", mods[i].warning);
    free(mods);
    kms_foreach(h, from_kms_line, t);
    kms_free(h);
    return 0;
}

/* ------------------------------------------------------------ commands */

static void print_ranges(const char *kind, const struct range_list *l, FILE *out)
{
    fprintf(out, "\t%s=", kind);
    for (size_t k = 0; k < l->n; k++)
        fprintf(out, "%s%" PRIx64 "-%" PRIx64, k ? "," : "", l->r[k].va, l->r[k].va + l->r[k].size);
}

static void cmd_modules(const struct table *t)
{
    for (size_t i = 0; i < t->nmods; i++) {
        const struct module *m = &t->mods[i];
        printf("%s\t%" PRIu32, m->name, m->nsyms);
        print_ranges("text", &m->text, stdout);
        print_ranges("data", &m->data, stdout);
        putchar('\n');
    }
}

static int cmd_lookup(const struct table *t)
{
    char buf[128];
    while (fgets(buf, sizeof buf, stdin)) {
        char *end;
        errno = 0;
        uint64_t addr = strtoull(buf, &end, 16);
        if (end == buf || errno || (*end && *end != '\n')) {
            fprintf(stderr, PROG ": not a hex address: %s", buf);
            return 2;
        }
        const struct symbol *s;
        const struct module *m = lookup_by_addr(t, addr, &s);
        if (!m)
            printf("%" PRIx64 "\t-\n", addr);
        else if (!s)
            printf("%" PRIx64 "\t%s\t-\n", addr, m->name);
        else
            printf("%" PRIx64 "\t%s\t%s\t%" PRIx64 "\t%" PRIx64 "\t%s`%s+0x%" PRIx64 "\n", addr,
                   m->name, s->name, s->addr, s->size, m->name, s->name, addr - s->addr);
    }
    return 0;
}

static int cmd_name(const struct table *t)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, stdin)) > 0) {
        if (line[len - 1] == '\n')
            line[--len] = 0;
        char *tick = strchr(line, '`');
        if (!tick) {
            fprintf(stderr, PROG ": not MOD`NAME: %s\n", line);
            free(line);
            return 2;
        }
        *tick = 0;
        const struct symbol *s = lookup_by_name(t, line, tick + 1);
        if (s)
            printf("%s`%s\t%" PRIx64 "\t%" PRIx64 "\n", line, tick + 1, s->addr, s->size);
        else
            printf("%s`%s\t-\n", line, tick + 1);
    }
    free(line);
    return 0;
}

/* kms_module_spans() of each module named on stdin, printed as cmd_modules(). */
static int cmd_spans(const struct kms_load_opts *opts)
{
    kms_error err;
    kms_handle *h = kms_load_opts(opts, &err);
    if (!h) {
        fprintf(stderr, PROG ": %s\n", err.message);
        return 2;
    }
    char name[KSYM_NAME_MAX + 2];
    while (fgets(name, sizeof name, stdin)) {
        name[strcspn(name, "\n")] = 0;
        size_t n = kms_module_spans(h, name, NULL, 0);
        struct kms_range *r = xrealloc(NULL, (n ? n : 1) * sizeof *r);
        r[0].size = sizeof *r;
        n = kms_module_spans(h, name, r, n);
        struct range_list kind[2] = {{0}, {0}};
        for (size_t k = 0; k < n; k++)
            range_append(&kind[r[k].text ? 0 : 1], r[k].start, r[k].end - r[k].start);
        printf("%s\t%zu", name, n);
        print_ranges("text", &kind[0], stdout);
        print_ranges("data", &kind[1], stdout);
        putchar('\n');
        free(kind[0].r);
        free(kind[1].r);
        free(r);
    }
    kms_free(h);
    return 0;
}

static int usage(void)
{
    fputs("usage: " PROG " [--syms F] [--kallsyms K] [--modules-dir D] [--sysfs-root S] "
          "[--proc-modules P] [--modpath DIR] [--force] | [--kallmodsyms FILE] | [--plain-kallsyms FILE]  "
          "{lines|modules|time} | {lookup|name|spans} < LINES (hex addresses, MOD`NAME or module "
          "names, one a line on stdin)\n", stderr);
    return 2;
}

int main(int argc, char **argv)
{
    struct kms_load_opts opts = {.size = sizeof opts};
    const char *text_path = NULL, *cmd = NULL, *modpath = NULL;
    int with_size = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **value = NULL;
        if (strcmp(a, "--syms") == 0)
            value = &opts.syms_path;
        else if (strcmp(a, "--kallsyms") == 0)
            value = &opts.kallsyms_path;
        else if (strcmp(a, "--modules-dir") == 0)
            value = &opts.modules_dir;
        else if (strcmp(a, "--sysfs-root") == 0)
            value = &opts.sysfs_root;
        else if (strcmp(a, "--proc-modules") == 0)
            value = &opts.proc_modules;
        else if (strcmp(a, "--kallmodsyms") == 0 || strcmp(a, "--plain-kallsyms") == 0) {
            with_size = a[2] == 'k';
            value = &text_path;
        } else if (strcmp(a, "--modpath") == 0)
            value = &modpath;
        else if (strcmp(a, "--force") == 0)
            opts.flags |= KMS_LOAD_FORCE;
        else if (a[0] != '-' && !cmd)
            cmd = a;
        else
            return usage();
        if (value) {
            if (i + 1 == argc)
                return usage();
            *value = argv[++i];
        }
    }
    if (!cmd || (strcmp(cmd, "lines") && strcmp(cmd, "modules") && strcmp(cmd, "lookup") &&
                 strcmp(cmd, "name") && strcmp(cmd, "time") && strcmp(cmd, "spans")))
        return usage();

    char syms[4096];
    if (modpath) {
        /* dtrace's -x modpath: its dtrace_syms and its modules' .ko files */
        if ((size_t)snprintf(syms, sizeof syms, "%s/kernel/dtrace_syms", modpath) >= sizeof syms)
            return usage();
        if (!opts.syms_path)
            opts.syms_path = syms;
        if (!opts.modules_dir)
            opts.modules_dir = modpath;
    }
    if (strcmp(cmd, "spans") == 0)
        return text_path ? usage() : cmd_spans(&opts);
    struct table t = {.last_mod = SIZE_MAX, .last_text = -1};
    struct timespec t0, t1, t2, c0, c1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    if (strcmp(cmd, "lines") == 0)
        t.lines_out = stdout;
    int rc = 0;
    if (text_path) {
        t.gap_sizes = !with_size;
        rc = from_text(&t, text_path, with_size);
    } else {
        rc = dtrace_update_kernel(&t, &opts);
    }
    if (rc)
        return rc;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    finish_table(&t);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    if (strcmp(cmd, "time") == 0) {
        size_t lines = 0;
        for (size_t i = 0; i < t.nmods; i++)
            lines += t.mods[i].nsyms;
        printf("{\"read\": %.6f, \"read_cpu\": %.6f, \"sort\": %.6f, \"symbols\": %zu, "
               "\"modules\": %zu}\n",
               (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
               (double)(c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) / 1e9,
               (double)(t2.tv_sec - t1.tv_sec) + (t2.tv_nsec - t1.tv_nsec) / 1e9, lines, t.nmods);
    } else if (strcmp(cmd, "modules") == 0)
        cmd_modules(&t);
    else if (strcmp(cmd, "lookup") == 0)
        rc = cmd_lookup(&t);
    else if (strcmp(cmd, "name") == 0)
        rc = cmd_name(&t);
    if (fflush(stdout) != 0) {
        fprintf(stderr, PROG ": cannot write the output: %s\n", strerror(errno));
        return 2;
    }
    return rc;
}
