// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * kmodsyms-c: libkmodsyms from the command line, for scripts and for the
 * tests: resolve, lookup and kallmodsyms print what 'kmodsyms' prints, both
 * through the library's formatter (kms_format_sym(), kms_format_line()).
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

static const char *const origin_names[] = {NULL, "core", "builtin", "loadable", "pseudo"};
static const char *const binding_names[] = {"local", "global", "weak"};
/* enum kms_format's names, as 'kmodsyms --format' spells them */
static const char *const format_names[] = {"verbose", "dtrace", "kernel", "json"};
static const char *const status_names[] = {"matched", "missing", "refused", "unsupported",
                                           "deferred"};

/* Room for the texts the library formats: a text of N bytes and its NUL
 * (the program's only answer to no memory is to stop). */
static char *room;
static size_t room_size;

static void make_room(size_t n)
{
    if (n < room_size)
        return;
    free(room);
    room_size = n + 1 > 4096 ? n + 1 : 4096;
    if (!(room = malloc(room_size))) {
        fputs("kmodsyms-c: error: out of memory\n", stderr);
        exit(2);
    }
}

/* The text FORMAT (a kms_format_*() call into ROOM, ROOM_SIZE) returns, to
 * OUT: the call made again, with room, when the text did not fit. */
#define PUT_FORMATTED(out, format)                                                        \
    do {                                                                                  \
        size_t n_ = (format);                                                             \
        if (n_ >= room_size) {                                                            \
            make_room(n_);                                                                \
            (void)(format);                                                               \
        }                                                                                 \
        fwrite(room, 1, n_, out);                                                         \
    } while (0)

static void put_json_string(const char *s, size_t len, FILE *out)
{
    PUT_FORMATTED(out, kms_format_json_string(s, len, room, room_size));
}

/* Input as the CLI's messages echo it (kmodsyms.errors.shown), the same in
 * any locale: printable ASCII as it is (a backslash doubled), every other
 * byte as \xNN, as the kernel's tools print a name they cannot show. */
static void put_shown(const char *s, size_t len, FILE *out)
{
    for (const unsigned char *p = (const unsigned char *)s; p < (const unsigned char *)s + len; p++) {
        if (*p == '\\')
            fputs("\\\\", out);
        else if (*p >= 0x20 && *p < 0x7F)
            putc(*p, out);
        else
            fprintf(out, "\\x%02x", *p);
    }
}

static void put_json_cstring(const char *s, FILE *out)
{
    if (s)
        put_json_string(s, strlen(s), out);
    else
        fputs("null", out);
}

static void put_names(size_t n, const char *const *names, FILE *out)
{
    putc('[', out);
    for (size_t k = 0; k < n; k++) {
        if (k)
            fputs(", ", out);
        put_json_cstring(names[k], out);
    }
    putc(']', out);
}

/* A record's modules: null when it has none ('lines'). */
static void put_modules(uint32_t n, const char *const *mods, FILE *out)
{
    if (n)
        put_names(n, mods, out);
    else
        fputs("null", out);
}

/* The load answered from kallsyms alone (R42), as messages say. */
static int builtin_modules_unknown;

/* Record R of H as FORMAT prints it, one line. */
static void put_sym(const kms_handle *h, const struct kms_sym *r, int format)
{
    PUT_FORMATTED(stdout, kms_format_sym(h, r, format, room, room_size));
    putchar('\n');
}

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

static int print_kallmodsyms(const struct kms_line *l, void *arg)
{
    (void)arg;
    PUT_FORMATTED(stdout, kms_format_line(l, room, room_size));
    putchar('\n');
    return 0;
}

static int print_line(const struct kms_line *l, void *arg)
{
    FILE *out = arg;
    /* the exact size (R48), 0 when not known exactly: every size printed
     * here is an ELF st_size, which tests hold to the linker maps and
     * readelf (an estimate, R49, has no such truth) */
    fprintf(out, "{\"address\": \"0x%llx\", \"size\": %llu, \"type\": \"%c\", \"name\": ",
            (unsigned long long)l->address,
            (unsigned long long)(l->size_kind == KMS_SIZE_EXACT ? l->sym_size : 0), l->type);
    put_json_string(l->name, l->name_len, out);
    fputs(", \"modules\": ", out);
    put_modules(l->nmodules, l->modules, out);
    fputs(", \"origin\": ", out);
    put_json_cstring(origin_names[l->origin], out);
    fputs(", \"binding\": ", out);
    put_json_cstring(l->sym_binding <= 2 ? binding_names[l->sym_binding] : NULL, out);
    fputs(", \"object\": ", out);
    put_json_cstring(l->object, out);
    fputs("}\n", out);
    return 0;
}

/* One kms_module as JSON: ModuleStats.__dict__ of 'kmodsyms modules --json'. */
static void put_module(const struct kms_module *m, FILE *out)
{
    fputs("{\"name\": ", out);
    put_json_cstring(m->name, out);
    fputs(", \"file\": ", out);
    put_json_cstring(m->file, out);
    fprintf(out, ", \"status\": \"%s\", \"lines\": %zu, \"sized\": %zu, \"reason\": ",
            status_names[m->status], m->lines, m->sized);
    put_json_cstring(m->reason, out);
    putc('}', out);
}

/* One step of 'refresh': what changed (C, NULL for the load itself), the
 * lines kept and every loaded module's status; flushed, for the caller
 * waiting on it before its next module change.  -1 when out of memory. */
static int put_step(const kms_handle *h, unsigned step, const struct kms_changes *c)
{
    struct kms_info info = {.size = sizeof info};
    size_t n = kms_modules(h, NULL, 0);
    struct kms_module *mods = malloc((n ? n : 1) * sizeof *mods);
    if (!mods)
        return -1;
    mods[0].size = sizeof *mods;
    n = kms_modules(h, mods, n);
    kms_get_info(h, &info);
    printf("{\"step\": %u, \"loaded\": ", step);
    put_names(c ? c->nloaded : 0, c ? c->loaded : NULL, stdout);
    fputs(", \"unloaded\": ", stdout);
    put_names(c ? c->nunloaded : 0, c ? c->unloaded : NULL, stdout);
    fputs(", \"reloaded\": ", stdout);
    put_names(c ? c->nreloaded : 0, c ? c->reloaded : NULL, stdout);
    printf(", \"lines\": %zu, \"modules\": [", info.lines);
    for (size_t k = 0; k < n; k++) {
        if (k)
            fputs(", ", stdout);
        put_module(&mods[k], stdout);
    }
    fputs("]}\n", stdout);
    free(mods);
    fflush(stdout);
    return 0;
}

/* A refreshed module's warning, as a load's: the modules just loaded or
 * reloaded whose .ko is refused or not read. */
static void warn_changed(const kms_handle *h, const struct kms_changes *c)
{
    size_t n = kms_modules(h, NULL, 0);
    struct kms_module *mods = malloc((n ? n : 1) * sizeof *mods);
    if (!mods)
        return;
    mods[0].size = sizeof *mods;
    n = kms_modules(h, mods, n);
    for (size_t k = 0; k < n; k++) {
        int changed = 0;
        for (size_t i = 0; i < c->nloaded; i++)
            changed |= !strcmp(c->loaded[i], mods[k].name);
        for (size_t i = 0; i < c->nreloaded; i++)
            changed |= !strcmp(c->reloaded[i], mods[k].name);
        if (changed && mods[k].warning)
            fprintf(stderr, "kmodsyms-c: warning: %s\n", mods[k].warning);
    }
    free(mods);
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

int main(int argc, char **argv)
{
    const char *cmd;
    struct kms_load_opts opts = {.size = sizeof opts};
    int nargs = 0, status = 0, format = KMS_FORMAT_VERBOSE;
    char **args;
    kms_error err;
    kms_handle *h;

    if (argc < 2)
        return usage();
    cmd = argv[1];
    if (!(args = calloc((size_t)argc, sizeof *args)))
        return die("out of memory");
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--syms") && i + 1 < argc)
            opts.syms_path = argv[++i];
        else if (!strcmp(argv[i], "--kallsyms") && i + 1 < argc)
            opts.kallsyms_path = argv[++i];
        else if (!strcmp(argv[i], "--modules-dir") && i + 1 < argc)
            opts.modules_dir = argv[++i];
        else if (!strcmp(argv[i], "--sysfs-root") && i + 1 < argc)
            opts.sysfs_root = argv[++i];
        else if (!strcmp(argv[i], "--proc-modules") && i + 1 < argc)
            opts.proc_modules = argv[++i];
        else if (!strcmp(argv[i], "--force"))
            opts.flags |= KMS_LOAD_FORCE;
        else if (!strcmp(argv[i], "--fallback"))
            opts.flags |= KMS_LOAD_FALLBACK;
        else if (!strcmp(argv[i], "--defer"))
            opts.flags |= KMS_LOAD_DEFER_MODULES;
        else if (!strcmp(argv[i], "--format") && i + 1 < argc && format_named(argv[i + 1]) >= 0)
            format = format_named(argv[++i]);
        else if (!strcmp(argv[i], "--json"))
            format = KMS_FORMAT_JSON;
        else if (!strcmp(argv[i], "--") )
            while (++i < argc)
                args[nargs++] = argv[i];
        else
            args[nargs++] = argv[i];
    }
    if (strcmp(cmd, "resolve") && strcmp(cmd, "lookup") && strcmp(cmd, "kallmodsyms") &&
        strcmp(cmd, "lines") && strcmp(cmd, "ranges") && strcmp(cmd, "spans") &&
        strcmp(cmd, "symbols") && strcmp(cmd, "builtin") && strcmp(cmd, "modules") &&
        strcmp(cmd, "refresh"))
        return free(args), usage();
    for (int i = 0; !strcmp(cmd, "resolve") && i < nargs; i++) {
        unsigned long long a;
        const char *start, *stop, *why;
        if (strcmp(args[i], "-") &&
            (why = parse_address(args[i], strlen(args[i]), &a, &start, &stop))) {
            char *msg = address_error(start, (size_t)(stop - start), why); /* before loading */
            status = die(msg ? msg : "out of memory");
            free(msg);
            return free(args), status;
        }
    }
    if (!strcmp(cmd, "lookup") && !nargs)
        return free(args), usage();
    for (int i = 0; !strcmp(cmd, "lookup") && i < nargs; i++) {
        const char *mod, *name;
        unsigned long long off;
        char *spec = strdup(args[i]);
        int bad = !spec || parse_name(spec, &mod, &name, &off) != 0;
        free(spec);
        if (bad) {
            fputs("kmodsyms-c: error: bad name '", stderr);
            put_shown(args[i], strlen(args[i]), stderr);
            fputs("': give [MOD`]NAME[+0xOFF], e.g. ext4`ext4_file_open+0x1c\n", stderr);
            return free(args), 2;
        }
    }
    if (!(h = kms_load_opts(&opts, &err)) ||
        ((opts.flags & KMS_LOAD_DEFER_MODULES) && kms_read_modules(h, NULL, 0, &err))) {
        kms_free(h);
        free(args);
        return die(err.message);
    }
    size_t nmods = kms_modules(h, NULL, 0);
    struct kms_module *mods = malloc((nmods ? nmods : 1) * sizeof *mods);
    if (!mods) {
        kms_free(h);
        free(args);
        return die("out of memory");
    }
    mods[0].size = sizeof *mods;
    kms_modules(h, mods, nmods);
    struct kms_info info = {.size = sizeof info};
    kms_get_info(h, &info);
    builtin_modules_unknown = !info.builtin_modules_known;
    if (info.warning[0]) /* the CLI's own option is --force */
        fprintf(stderr, "kmodsyms-c: warning: %s\n", info.warning);
    for (size_t k = 0; k < nmods; k++)
        if (mods[k].warning)
            fprintf(stderr, "kmodsyms-c: warning: %s\n", mods[k].warning);
    if (!strcmp(cmd, "resolve")) {
        struct pending p = {h, 0, malloc(KMS_RESOLVE_BATCH * sizeof *p.addr),
                            malloc(KMS_RESOLVE_BATCH * sizeof *p.rec), format};
        if (!p.addr || !p.rec) {
            status = die("out of memory");
        } else {
            /* the arguments in order ('-': stdin there), all checked before loading */
            for (int i = 0; i < (nargs ? nargs : 1) && status < 2; i++) {
                unsigned long long a;
                const char *start, *stop;
                if (nargs && strcmp(args[i], "-")) {
                    parse_address(args[i], strlen(args[i]), &a, &start, &stop);
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
    } else if (!strcmp(cmd, "lookup")) {
        size_t cap = 16;
        struct kms_sym *recs = malloc(cap * sizeof *recs);
        for (int i = 0; i < nargs && recs; i++) {
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
                put_sym(h, &recs[k], format);
            free(spec);
        }
        if (!recs)
            status = die("out of memory");
        free(recs);
    } else if (!strcmp(cmd, "ranges") || !strcmp(cmd, "spans")) {
        size_t (*ranges)(const kms_handle *, const char *, struct kms_range *, size_t) =
            strcmp(cmd, "spans") ? kms_module_ranges : kms_module_spans;
        for (int i = 0; i < nargs; i++) {
            if (!module_there(h, args[i], NULL)) {
                status = 1;
                continue;
            }
            size_t n = ranges(h, args[i], NULL, 0);
            struct kms_range *r = malloc((n ? n : 1) * sizeof *r);
            if (!r) {
                status = die("out of memory");
                break;
            }
            r[0].size = sizeof *r;
            n = ranges(h, args[i], r, n);
            for (size_t k = 0; k < n; k++) {
                fputs("{\"module\": ", stdout);
                put_json_cstring(args[i], stdout);
                printf(", \"start\": \"0x%llx\", \"end\": \"0x%llx\", \"text\": %s}\n",
                       (unsigned long long)r[k].start, (unsigned long long)r[k].end,
                       r[k].text ? "true" : "false");
            }
            free(r);
        }
    } else if (!strcmp(cmd, "refresh")) {
        status = refresh_steps(h);
    } else if (!strcmp(cmd, "modules")) {
        if (!nmods) /* as 'kmodsyms modules' says it */
            fprintf(stderr, "kmodsyms-c: no loaded modules (no '[MODULE]' line in %s)\n",
                    opts.kallsyms_path ? opts.kallsyms_path : "/proc/kallsyms");
        for (size_t k = 0; k < nmods; k++) {
            put_module(&mods[k], stdout);
            putchar('\n');
        }
    } else if (!strcmp(cmd, "builtin")) {
        size_t n = kms_builtin_modules(h, NULL, 0);
        const char **names = malloc((n ? n : 1) * sizeof *names);
        if (!names)
            status = die("out of memory");
        for (size_t k = 0; names && k < kms_builtin_modules(h, names, n); k++)
            puts(names[k]);
        free(names);
    } else if (!strcmp(cmd, "symbols")) {
        for (int i = 0; i < nargs && status < 2; i++) {
            if (!module_there(h, args[i], NULL)) {
                status = 1;
                continue;
            }
            size_t n = kms_module_lines(h, args[i], NULL, 0);
            uint32_t *index = malloc((n ? n : 1) * sizeof *index);
            if (!index) {
                status = die("out of memory");
                break;
            }
            n = kms_module_lines(h, args[i], index, n);
            for (size_t k = 0; k < n; k++) {
                struct kms_line l = {.size = sizeof l};
                kms_line_at(h, index[k], &l);
                print_line(&l, stdout);
            }
            free(index);
        }
    } else {
        kms_foreach(h, strcmp(cmd, "lines") ? print_kallmodsyms : print_line, stdout);
    }
    free(mods);
    kms_free(h);
    free(args);
    free(room);
    if (fflush(stdout) != 0 && !status)
        status = 1;
    return status;
}
