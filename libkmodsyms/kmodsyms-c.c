// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * kmodsyms-c: libkmodsyms from the command line, for scripts and for the
 * tests: resolve, lookup and kallmodsyms print what 'kmodsyms' prints, both
 * through the library's formatter (kms_format_sym(), kms_format_line()).
 * This file reads the options and arguments and runs the commands;
 * kmodsyms-c-print.c writes what they print.
 *
 *   kmodsyms-c resolve --syms F --kallsyms K [--force] [--format FMT|--json] [ADDR...]
 *       one line an address, as 'kmodsyms resolve' (FMT verbose, the default, dtrace,
 *       kernel or json: enum kms_format); an ADDR '-' (or no ADDR) reads one address a
 *       line of stdin there, one line out for every line in, as 'kmodsyms resolve -'
 *       (a bad line's error in its place, exit 1; stdin that is not text,
 *       kms_data_kind(): an error, exit 2)
 *   kmodsyms-c lookup --syms F --kallsyms K [--force] [--format FMT|--json] [MOD`]NAME...
 *       one line per match, as 'kmodsyms lookup'; exit 1 if a name has none
 *   kmodsyms-c kallmodsyms --syms F --kallsyms K [--force]
 *       /proc/kallmodsyms (kms_format_line()), as 'kmodsyms kallmodsyms'
 *   kmodsyms-c lines --syms F --kallsyms K [--force]
 *       every kallsyms line as kms_foreach() gives it, one JSON object a line
 *   kmodsyms-c ranges --syms F --kallsyms K [--force] MOD...
 *       kms_module_ranges() of each MOD: {"module", "start", "end", "text"} a line; exit 1
 *       if a MOD is not there
 *   kmodsyms-c spans --syms F --kallsyms K [--force] MOD...
 *       kms_module_spans() of each MOD, the same way
 *   kmodsyms-c symbols --syms F --kallsyms K [--force] MOD...
 *       kms_module_lines() of each MOD: its lines, as 'lines' prints them; exit 1 if a
 *       MOD is not there
 *   kmodsyms-c builtin --syms F --kallsyms K [--force]
 *       kms_builtin_modules(): one name a line
 *   kmodsyms-c modules --syms F --kallsyms K [--force]
 *       kms_modules(): each loaded module's file and status, as 'kmodsyms modules --json'
 *   kmodsyms-c refresh --syms F --kallsyms K [--force]
 *       one load followed across module changes (kms_refresh()): one JSON object a step,
 *       {"step", "loaded", "unloaded", "reloaded", "lines", "modules"}, flushed; step 0 is
 *       the load itself, and each line of stdin asks for the next: kms_refresh(), then
 *       what changed, the lines kept and kms_modules() (as 'modules' prints each); a line
 *       naming a FILE also writes every refreshed line there, as 'lines' prints them.
 *       A failed refresh: its error, exit status 2.
 *
 * --syms and --kallsyms default to the running kernel's files.  Loaded
 * modules' .ko files: --modules-dir DIR (as 'kmodsyms --modules-dir'), and
 * --sysfs-root DIR, --proc-modules FILE (as kmodsyms.load(sysfs_root=,
 * proc_modules=)); with the live /proc/kallsyms they default to the running
 * kernel's.  --fallback: KMS_LOAD_FALLBACK (without --syms, a missing, bad
 * or stale default file answers from kallsyms alone).  --defer: the load
 * with KMS_LOAD_DEFER_MODULES, then kms_read_modules() of every module (the
 * lazy way to the same answers).  The load's warning
 * (kms_info.warning: degraded, or what --force overrode) and each module
 * whose .ko is refused or not read: one warning line on stderr each, as
 * 'kmodsyms' prints.  Bad input: one line on stderr, exit status 2.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kmodsyms.h"
#include "kmodsyms-c.h"

/* enum kms_format's names, as 'kmodsyms --format' spells them */
static const char *const format_names[] = {"verbose", "dtrace", "kernel", "json"};

static int die(const char *msg)
{
    fprintf(stderr, "kmodsyms-c: error: %s\n", msg);
    return 2;
}

/* The enum kms_format called NAME, -1 for none. */
static int format_named(const char *name)
{
    for (int k = 0; k < (int)(sizeof format_names / sizeof *format_names); k++)
        if (!strcmp(name, format_names[k]))
            return k;
    return -1;
}

static int usage(void)
{
    fputs("usage: kmodsyms-c {resolve|lookup|kallmodsyms|lines|ranges|spans|symbols|builtin|"
          "modules|refresh} [--syms F] [--kallsyms K] [--modules-dir DIR] [--sysfs-root DIR] "
          "[--proc-modules FILE] [--force] [--fallback] [--defer] "
          "[--format verbose|dtrace|kernel|json] [--json] "
          "[ARG...]\n", stderr);
    return 2;
}

/* White space as Python's str.strip() takes it, the ASCII part. */
static int is_white(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* An address as the CLI reads one (parse_address of src/kmodsyms/cli/frontend.py):
 * hex, 0x optional, at most 64 bits, TEXT's LEN bytes with the white space
 * around them (*START, *STOP: the rest) left out.  NULL, or why it is not
 * one, as the CLI's error says it after "bad address 'TEXT'". */
static const char *parse_address(const char *text, size_t len, unsigned long long *out,
                                 const char **start, const char **stop)
{
    const char *p = text, *e = text + len;
    unsigned long long v = 0;
    int wide = 0;
    while (p < e && is_white(*p))
        p++;
    while (e > p && is_white(e[-1]))
        e--;
    *start = p;
    *stop = e;
    int negative = p < e && *p == '-';
    p += negative;
    if (e - p >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        p += 2;
    if (p == e)
        return ": give it in hex, e.g. 0xffffffff81000000";
    for (; p < e; p++) {
        int d = (*p >= '0' && *p <= '9') ? *p - '0'
              : (*p >= 'a' && *p <= 'f') ? *p - 'a' + 10
              : (*p >= 'A' && *p <= 'F') ? *p - 'A' + 10 : -1;
        if (d < 0)
            return ": give it in hex, e.g. 0xffffffff81000000";
        wide |= v >> 60 != 0;
        v = v << 4 | (unsigned)d;
    }
    if (negative)
        return ": negative";
    if (wide)
        return ": more than 64 bits";
    *out = v;
    return NULL;
}

/* "bad address 'TEXT': WHY", TEXT quoted as the CLI quotes it (malloc'd;
 * NULL when out of memory). */
static char *address_error(const char *text, size_t len, const char *why)
{
    char *msg = NULL;
    size_t size;
    FILE *m = open_memstream(&msg, &size);
    if (!m)
        return NULL;
    fputs("bad address '", m);
    put_shown(text, len, m);
    putc('\'', m);
    fputs(why, m);
    if (fclose(m) != 0) {
        free(msg);
        return NULL;
    }
    return msg;
}

/* Addresses answered in one kms_resolve_many call, which overlaps their
 * lookups' waits for memory: up to KMS_RESOLVE_BATCH of those read so far. */
struct pending {
    const kms_handle *h;
    size_t n;
    uint64_t *addr;
    struct kms_sym *rec;
    int format;           /* enum kms_format */
};

/* The pending addresses' answers, in order. */
static void answer_pending(struct pending *p)
{
    p->rec[0].size = sizeof p->rec[0];
    kms_resolve_many(p->h, p->addr, p->n, p->rec);
    for (size_t i = 0; i < p->n; i++)
        put_sym(p->h, &p->rec[i], p->format);
    p->n = 0;
}

/* An address (pending), checked before the load. */
static void resolve_address(struct pending *p, unsigned long long a)
{
    p->addr[p->n++] = a;
    if (p->n == KMS_RESOLVE_BATCH)
        answer_pending(p);
}

/* Line NUMBER of stdin, its LEN bytes at TEXT, as the CLI's write_answers()
 * answers it: an address pending; in its place a blank line's empty answer
 * ({"input": ""} in JSON) or a bad one's error ({"input", "error"}; in the
 * text formats "? ERROR" and "LINE N: ERROR" on stderr).  1 when bad, -1
 * when out of memory. */
static int resolve_line(struct pending *p, const char *text, size_t len, size_t number)
{
    unsigned long long a;
    const char *start, *stop;
    const char *why = parse_address(text, len, &a, &start, &stop);
    if (!why) {
        resolve_address(p, a);
        return 0;
    }
    answer_pending(p);
    if (start == stop) {
        puts(p->format == KMS_FORMAT_JSON ? "{\"input\": \"\"}" : "");
        return 0;
    }
    char *msg = address_error(start, (size_t)(stop - start), why);
    if (!msg)
        return -1;
    if (p->format != KMS_FORMAT_JSON) {
        printf("? %s\n", msg);
        fflush(stdout);
        fprintf(stderr, "LINE %zu: %s\n", number, msg);
    } else {
        fputs("{\"input\": ", stdout);
        put_json_string(start, (size_t)(stop - start), stdout);
        fputs(", \"error\": ", stdout);
        put_json_cstring(msg, stdout);
        fputs("}\n", stdout);
    }
    free(msg);
    return 1;
}

/* Every line of stdin resolved in its place (resolve_line()); what one
 * read() gives is answered before the next (a reader waiting for its
 * answers is not kept waiting for more input).  Stdin whose first line is
 * not text (kms_data_kind()) is refused, as the CLI refuses it.  The exit
 * status: 1 when a line was bad; 2 after an error line. */
static int resolve_stdin(struct pending *p)
{
    size_t cap = (size_t)1 << 16, len = 0, number = 0;
    char *buf = malloc(cap);
    int bad = 0, end = 0, room = buf != NULL;
    while (room && !end && bad >= 0) {
        ssize_t got = read(STDIN_FILENO, buf + len, cap - len);
        if (got < 0 && errno == EINTR)
            continue;
        end = got <= 0;
        len += got > 0 ? (size_t)got : 0;
        char *line = buf, *stop = buf + len;
        while (line < stop && bad >= 0) {
            char *nl = memchr(line, '\n', (size_t)(stop - line));
            if (!nl && !end) /* the rest of it is still to be read */
                break;
            char *next = nl ? nl + 1 : stop; /* the last line may have no newline */
            int compressed;
            const char *what = number++ ? NULL
                                        : kms_data_kind(line, (size_t)(next - line), &compressed);
            if (what) {
                answer_pending(p);
                fflush(stdout);
                fprintf(stderr, "kmodsyms-c: error: <stdin>: %s%s\n", what,
                        compressed ? ": decompress it first"
                                   : ", not addresses: give one hex address a line");
                bad = -2;
                break;
            }
            int r = resolve_line(p, line, (size_t)((nl ? nl : stop) - line), number);
            bad = r < 0 ? r : bad | r;
            line = next;
        }
        answer_pending(p);
        fflush(stdout);
        len = (size_t)(stop - line);
        if (len)
            memmove(buf, line, len);
        if (len == cap) { /* one line fills the buffer: a larger one */
            char *more = realloc(buf, cap *= 2);
            room = more != NULL;
            buf = more ? more : buf;
        }
    }
    free(buf);
    if (!room || bad == -1)
        return die("out of memory");
    return bad == -2 ? 2 : bad;
}

/* [MOD`]NAME[+OFF] (OFF in hex): parse_name of src/kmodsyms/cli/frontend.py.  NAME
 * is cut in place; *MOD is NULL without a tick. */
static int parse_name(char *spec, const char **mod, const char **name, unsigned long long *off)
{
    char *tick = strrchr(spec, '`'), *rest = spec, *plus;
    *mod = NULL;
    *off = 0;
    if (tick) {
        *tick = 0;
        *mod = spec;
        rest = tick + 1;
    }
    *name = rest;
    if ((plus = strchr(rest, '+')) != NULL) {
        const char *start, *stop;
        size_t len = strlen(plus + 1);
        *plus = 0;
        for (size_t k = 0; k < len; k++)
            if (is_white(plus[1 + k]) || plus[1 + k] == '-')
                return -1; /* hex digits alone */
        if (parse_address(plus + 1, len, off, &start, &stop))
            return -1;
    }
    return (*name)[0] && (!tick || (*mod)[0]) ? 0 : -1;
}

/* Whether MOD is a module of H (vmlinux, a built-in or a loaded module);
 * else the CLI's line saying so on stderr ('kmodsyms lookup', for SPEC when
 * not NULL), and the caller's exit status is 1. */
static int module_there(const kms_handle *h, const char *mod, const char *spec)
{
    if (kms_module_known(h, mod))
        return 1;
    char *spelled = strdup(mod); /* as the kernel spells it, dashes underscores */
    for (char *c = spelled; c && *c; c++)
        *c = *c == '-' ? '_' : *c;
    fputs("kmodsyms-c: no module '", stderr);
    put_shown(spelled ? spelled : mod, strlen(mod), stderr);
    putc('\'', stderr);
    free(spelled);
    if (spec) {
        fputs(" (for ", stderr);
        put_shown(spec, strlen(spec), stderr);
        putc(')', stderr);
    }
    fprintf(stderr, ": not vmlinux, a built-in module%s or a loaded module\n",
            builtin_modules_unknown ? " (unknown without dtrace_syms)" : "");
    return 0;
}


/* 'refresh': step 0, then a kms_refresh() and a step for each line of
 * stdin (a FILE named there gets the refreshed lines).  The exit status. */
static int refresh_steps(kms_handle *h)
{
    char *line = NULL;
    size_t cap = 0;
    unsigned step = 0;
    int status = put_step(h, step, NULL) ? die("out of memory") : 0;
    while (!status && getline(&line, &cap, stdin) >= 0) {
        struct kms_changes c = {.size = sizeof c};
        kms_error err;
        line[strcspn(line, "\r\n")] = 0;
        if (kms_refresh(h, &c, &err) != KMS_OK) {
            status = die(err.message);
            break;
        }
        warn_changed(h, &c);
        if (line[0]) {
            FILE *out = fopen(line, "w");
            if (!out) {
                fprintf(stderr, "kmodsyms-c: error: cannot write %s: %s\n", line, strerror(errno));
                status = 2;
                break;
            }
            kms_foreach(h, print_line, out);
            if (fclose(out) != 0) {
                fprintf(stderr, "kmodsyms-c: error: cannot write %s: %s\n", line, strerror(errno));
                status = 2;
                break;
            }
        }
        if (put_step(h, ++step, &c))
            status = die("out of memory");
    }
    free(line);
    return status;
}

/* One run: the command, its arguments (the options taken out), the load's
 * options, the handle and its modules. */
struct call {
    const char *cmd;
    const struct kms_load_opts *opts;
    char **args;
    int nargs, format;
    kms_handle *h;
    struct kms_module *mods;
    size_t nmods;
};

/* The options of ARGV into OPTS and C's format, the rest into C's args. */
static void parse_options(int argc, char **argv, struct kms_load_opts *opts, struct call *c)
{
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--syms") && i + 1 < argc)
            opts->syms_path = argv[++i];
        else if (!strcmp(argv[i], "--kallsyms") && i + 1 < argc)
            opts->kallsyms_path = argv[++i];
        else if (!strcmp(argv[i], "--modules-dir") && i + 1 < argc)
            opts->modules_dir = argv[++i];
        else if (!strcmp(argv[i], "--sysfs-root") && i + 1 < argc)
            opts->sysfs_root = argv[++i];
        else if (!strcmp(argv[i], "--proc-modules") && i + 1 < argc)
            opts->proc_modules = argv[++i];
        else if (!strcmp(argv[i], "--force"))
            opts->flags |= KMS_LOAD_FORCE;
        else if (!strcmp(argv[i], "--fallback"))
            opts->flags |= KMS_LOAD_FALLBACK;
        else if (!strcmp(argv[i], "--defer"))
            opts->flags |= KMS_LOAD_DEFER_MODULES;
        else if (!strcmp(argv[i], "--format") && i + 1 < argc && format_named(argv[i + 1]) >= 0)
            c->format = format_named(argv[++i]);
        else if (!strcmp(argv[i], "--json"))
            c->format = KMS_FORMAT_JSON;
        else if (!strcmp(argv[i], "--") )
            while (++i < argc)
                c->args[c->nargs++] = argv[i];
        else
            c->args[c->nargs++] = argv[i];
    }
}

/* resolve's addresses and lookup's names, checked before loading: the exit
 * status of the first bad one, -1 if none is. */
static int check_args(const struct call *c)
{
    char **args = c->args;
    for (int i = 0; !strcmp(c->cmd, "resolve") && i < c->nargs; i++) {
        unsigned long long a;
        const char *start, *stop, *why;
        if (strcmp(args[i], "-") &&
            (why = parse_address(args[i], strlen(args[i]), &a, &start, &stop))) {
            char *msg = address_error(start, (size_t)(stop - start), why);
            int status = die(msg ? msg : "out of memory");
            free(msg);
            return status;
        }
    }
    if (!strcmp(c->cmd, "lookup") && !c->nargs)
        return usage();
    for (int i = 0; !strcmp(c->cmd, "lookup") && i < c->nargs; i++) {
        const char *mod, *name;
        unsigned long long off;
        char *spec = strdup(args[i]);
        int bad = !spec || parse_name(spec, &mod, &name, &off) != 0;
        free(spec);
        if (bad) {
            fputs("kmodsyms-c: error: bad name '", stderr);
            put_shown(args[i], strlen(args[i]), stderr);
            fputs("': give [MOD`]NAME[+0xOFF], e.g. ext4`ext4_file_open+0x1c\n", stderr);
            return 2;
        }
    }
    return -1;
}

/* 'resolve': the arguments in order ('-': stdin there), all checked before loading. */
static int run_resolve(const struct call *c)
{
    int status = 0;
    struct pending p = {c->h, 0, malloc(KMS_RESOLVE_BATCH * sizeof *p.addr),
                        malloc(KMS_RESOLVE_BATCH * sizeof *p.rec), c->format};
    if (!p.addr || !p.rec) {
        status = die("out of memory");
    } else {
        for (int i = 0; i < (c->nargs ? c->nargs : 1) && status < 2; i++) {
            unsigned long long a;
            const char *start, *stop;
            if (c->nargs && strcmp(c->args[i], "-")) {
                parse_address(c->args[i], strlen(c->args[i]), &a, &start, &stop);
                resolve_address(&p, a);
                continue;
            }
            answer_pending(&p);
            int got = resolve_stdin(&p);
            status = got > status ? got : status;
        }
        answer_pending(&p);
    }
    free(p.addr);
    free(p.rec);
    return status;
}

static int run_lookup(const struct call *c)
{
    kms_handle *h = c->h;
    char **args = c->args;
    int status = 0;
    size_t cap = 16;
    struct kms_sym *recs = malloc(cap * sizeof *recs);
    for (int i = 0; i < c->nargs && recs; i++) {
        const char *mod, *name;
        unsigned long long off;
        char *spec = strdup(args[i]);
        if (!spec || parse_name(spec, &mod, &name, &off) != 0) {
            free(spec);
            break;
        }
        if (mod && !module_there(h, mod, args[i])) {
            status = 1;
            free(spec);
            continue;
        }
        recs[0].size = sizeof *recs;
        size_t n = kms_lookup_name(h, mod, name, off, recs, cap);
        if (n > cap) {
            struct kms_sym *more = realloc(recs, n * sizeof *recs);
            if (!more)
                n = 0;
            else {
                recs = more;
                cap = n;
                recs[0].size = sizeof *recs;
                n = kms_lookup_name(h, mod, name, off, recs, cap);
            }
        }
        if (!n) {
            fputs("kmodsyms-c: no symbol ", stderr);
            put_shown(args[i], strlen(args[i]), stderr);
            putc('\n', stderr);
            status = 1;
        }
        for (size_t k = 0; k < n; k++)
            put_sym(h, &recs[k], c->format);
        free(spec);
    }
    if (!recs)
        status = die("out of memory");
    free(recs);
    return status;
}

/* 'ranges' and 'spans'. */
static int run_ranges(const struct call *c)
{
    size_t (*ranges)(const kms_handle *, const char *, struct kms_range *, size_t) =
        strcmp(c->cmd, "spans") ? kms_module_ranges : kms_module_spans;
    int status = 0;
    for (int i = 0; i < c->nargs; i++) {
        if (!module_there(c->h, c->args[i], NULL)) {
            status = 1;
            continue;
        }
        size_t n = ranges(c->h, c->args[i], NULL, 0);
        struct kms_range *r = malloc((n ? n : 1) * sizeof *r);
        if (!r) {
            status = die("out of memory");
            break;
        }
        r[0].size = sizeof *r;
        n = ranges(c->h, c->args[i], r, n);
        for (size_t k = 0; k < n; k++) {
            fputs("{\"module\": ", stdout);
            put_json_cstring(c->args[i], stdout);
            printf(", \"start\": \"0x%llx\", \"end\": \"0x%llx\", \"text\": %s}\n",
                   (unsigned long long)r[k].start, (unsigned long long)r[k].end,
                   r[k].text ? "true" : "false");
        }
        free(r);
    }
    return status;
}

static int run_refresh(const struct call *c)
{
    return refresh_steps(c->h);
}

static int run_modules(const struct call *c)
{
    if (!c->nmods) /* as 'kmodsyms modules' says it */
        fprintf(stderr, "kmodsyms-c: no loaded modules (no '[MODULE]' line in %s)\n",
                c->opts->kallsyms_path ? c->opts->kallsyms_path : "/proc/kallsyms");
    for (size_t k = 0; k < c->nmods; k++) {
        put_module(&c->mods[k], stdout);
        putchar('\n');
    }
    return 0;
}

static int run_builtin(const struct call *c)
{
    size_t n = kms_builtin_modules(c->h, NULL, 0);
    const char **names = malloc((n ? n : 1) * sizeof *names);
    int status = names ? 0 : die("out of memory");
    for (size_t k = 0; names && k < kms_builtin_modules(c->h, names, n); k++)
        puts(names[k]);
    free(names);
    return status;
}

static int run_symbols(const struct call *c)
{
    int status = 0;
    for (int i = 0; i < c->nargs && status < 2; i++) {
        if (!module_there(c->h, c->args[i], NULL)) {
            status = 1;
            continue;
        }
        size_t n = kms_module_lines(c->h, c->args[i], NULL, 0);
        uint32_t *index = malloc((n ? n : 1) * sizeof *index);
        if (!index) {
            status = die("out of memory");
            break;
        }
        n = kms_module_lines(c->h, c->args[i], index, n);
        for (size_t k = 0; k < n; k++) {
            struct kms_line l = {.size = sizeof l};
            kms_line_at(c->h, index[k], &l);
            print_line(&l, stdout);
        }
        free(index);
    }
    return status;
}

/* 'kallmodsyms' and 'lines'. */
static int run_lines(const struct call *c)
{
    kms_foreach(c->h, strcmp(c->cmd, "lines") ? print_kallmodsyms : print_line, stdout);
    return 0;
}

static const struct {
    const char *name;
    int (*run)(const struct call *c);
} commands[] = {
    {"resolve", run_resolve}, {"lookup", run_lookup},   {"kallmodsyms", run_lines},
    {"lines", run_lines},     {"ranges", run_ranges},   {"spans", run_ranges},
    {"symbols", run_symbols}, {"builtin", run_builtin}, {"modules", run_modules},
    {"refresh", run_refresh},
};

/* The load of OPTS into C's handle and modules, its warnings said: 0, or
 * the exit status of its error. */
static int load(const struct kms_load_opts *opts, struct call *c)
{
    kms_error err;
    if (!(c->h = kms_load_opts(opts, &err)) ||
        ((opts->flags & KMS_LOAD_DEFER_MODULES) && kms_read_modules(c->h, NULL, 0, &err)))
        return die(err.message);
    c->nmods = kms_modules(c->h, NULL, 0);
    if (!(c->mods = malloc((c->nmods ? c->nmods : 1) * sizeof *c->mods)))
        return die("out of memory");
    c->mods[0].size = sizeof *c->mods;
    kms_modules(c->h, c->mods, c->nmods);
    struct kms_info info = {.size = sizeof info};
    kms_get_info(c->h, &info);
    builtin_modules_unknown = !info.builtin_modules_known;
    if (info.warning[0]) /* the CLI's own option is --force */
        fprintf(stderr, "kmodsyms-c: warning: %s\n", info.warning);
    for (size_t k = 0; k < c->nmods; k++)
        if (c->mods[k].warning)
            fprintf(stderr, "kmodsyms-c: warning: %s\n", c->mods[k].warning);
    return 0;
}

int main(int argc, char **argv)
{
    struct kms_load_opts opts = {.size = sizeof opts};
    struct call c = {.format = KMS_FORMAT_VERBOSE, .opts = &opts};
    int (*run)(const struct call *c) = NULL;
    int status;

    if (argc < 2)
        return usage();
    c.cmd = argv[1];
    if (!(c.args = calloc((size_t)argc, sizeof *c.args)))
        return die("out of memory");
    parse_options(argc, argv, &opts, &c);
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
        if (!strcmp(c.cmd, commands[k].name))
            run = commands[k].run;
    if (!run)
        status = usage();
    else if ((status = check_args(&c)) < 0 && !(status = load(&opts, &c)))
        status = run(&c);
    free(c.mods);
    kms_free(c.h);
    free(c.args);
    free_room();
    if (c.h && fflush(stdout) != 0 && !status)
        status = 1;
    return status;
}

