// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * kmodsyms-c's output (kmodsyms-c.h): every text the library formats
 * (kms_format_sym(), kms_format_line(), kms_format_json_string()) written
 * from one room that grows to fit it, and the JSON of the commands that
 * print lines, modules and refresh steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmodsyms.h"
#include "kmodsyms-c.h"

static const char *const origin_names[] = {NULL, "core", "builtin", "loadable", "pseudo"};
static const char *const binding_names[] = {"local", "global", "weak"};
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

void put_json_string(const char *s, size_t len, FILE *out)
{
    PUT_FORMATTED(out, kms_format_json_string(s, len, room, room_size));
}

/* Input as the CLI's messages echo it (kmodsyms.errors.shown), the same in
 * any locale: printable ASCII as it is (a backslash doubled), every other
 * byte as \xNN, as the kernel's tools print a name they cannot show. */
void put_shown(const char *s, size_t len, FILE *out)
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

void put_json_cstring(const char *s, FILE *out)
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

int builtin_modules_unknown;

/* Record R of H as FORMAT prints it, one line. */
void put_sym(const kms_handle *h, const struct kms_sym *r, int format)
{
    PUT_FORMATTED(stdout, kms_format_sym(h, r, format, room, room_size));
    putchar('\n');
}

int print_kallmodsyms(const struct kms_line *l, void *arg)
{
    (void)arg;
    PUT_FORMATTED(stdout, kms_format_line(l, room, room_size));
    putchar('\n');
    return 0;
}

int print_line(const struct kms_line *l, void *arg)
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
void put_module(const struct kms_module *m, FILE *out)
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
int put_step(const kms_handle *h, unsigned step, const struct kms_changes *c)
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
void warn_changed(const kms_handle *h, const struct kms_changes *c)
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

void free_room(void)
{
    free(room);
}
