// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: kms_refresh(), following modules loaded or unloaded since a
 * handle was loaded (R47).  /proc/modules (tiny) is compared with what was read
 * last, use counts and users aside: unchanged, nothing else is read.
 * Otherwise (or without /proc/modules) the handle is loaded again from the
 * same sources, and the two kallsyms' modules compared: a module is loaded,
 * unloaded, or reloaded (same name, other lines or addresses).  The new
 * load replaces the handle's contents only when it succeeded.
 */
#include "kms_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

/* What kms_refresh() reads again, and the last changes' names. */
struct kms_reload {
    unsigned flags;
    char *path[5];        /* syms, kallsyms, modules_dir, sysfs_root, proc_modules (or NULL) */
    char *modules_list;   /* /proc/modules as module_list() keeps it, NULL: unreadable */
    char **read;          /* KMS_LOAD_DEFER_MODULES: the modules kms_read_modules() asked for */
    size_t nread;
    const char **names;   /* the last changes: loaded, unloaded, reloaded, one after the other */
    char *unloaded_text;  /* the unloaded names (the old handle's are gone) */
};

static char *copy(const char *s, int *bad)
{
    char *c = s ? strdup(s) : NULL;
    *bad |= s && !c;
    return c;
}

/* /proc/modules as R47 compares it: each line's name, size, state and
 * address (fields 0, 1, 4, 5), its use count and users left out. */
static char *module_list(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 16384, n = 0;
    char *text = malloc(cap + 1);
    for (ssize_t got = 1; text && got > 0;) {
        if (n == cap) {
            char *nt = realloc(text, 2 * cap + 1);
            if (!nt) {
                free(text);
                text = NULL;
                break;
            }
            text = nt;
            cap *= 2;
        }
        got = read(fd, text + n, cap - n);
        if (got < 0) {
            free(text);
            text = NULL;
        } else {
            n += (size_t)got;
        }
    }
    close(fd);
    if (!text)
        return NULL;
    text[n] = 0;
    /* keep fields 0, 1, 4, 5 of each line, in place */
    char *out = text;
    for (char *line = text; *line;) {
        char *eol = strchr(line, '\n');
        if (eol)
            *eol = 0;
        int field = 0;
        for (char *p = line; *p;) {
            while (*p == ' ' || *p == '\t')
                p++;
            char *start = p;
            while (*p && *p != ' ' && *p != '\t')
                p++;
            if (p > start && (field <= 1 || field == 4 || field == 5)) {
                memmove(out, start, (size_t)(p - start));
                out += p - start;
                *out++ = ' ';
            }
            field += p > start;
        }
        if (field)
            *out++ = '\n';
        line = eol ? eol + 1 : line + strlen(line);
    }
    *out = 0;
    return text;
}

int kmsi_remember_sources(kms_handle *h, const struct kms_load_opts *o,
                          const struct kmsi_sources *src, kms_error *err)
{
    int bad = 0;
    struct kms_reload *r = h->reload = calloc(1, sizeof *h->reload);
    if (!r)
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory");
    r->flags = o->flags;
    r->path[0] = copy(o->syms_path, &bad);
    r->path[1] = copy(o->kallsyms_path, &bad);
    r->path[2] = copy(src->modules_dir, &bad);
    r->path[3] = copy(src->sysfs_root, &bad);
    r->path[4] = copy(src->proc_modules, &bad);
    if (src->proc_modules)
        r->modules_list = module_list(src->proc_modules);
    r->read = calloc(src->nread ? src->nread : 1, sizeof *r->read);
    bad |= !r->read;
    for (size_t k = 0; r->read && k < src->nread; k++)
        if ((r->read[r->nread] = copy(src->read[k], &bad)))
            r->nread++;
    return bad ? kmsi_fail(err, KMS_E_NOMEM, "out of memory") : KMS_OK;
}

void kmsi_forget_sources(kms_handle *h)
{
    struct kms_reload *r = h->reload;
    if (!r)
        return;
    for (int k = 0; k < 5; k++)
        free(r->path[k]);
    free(r->modules_list);
    for (size_t k = 0; r->read && k < r->nread; k++)
        free(r->read[k]);
    free(r->read);
    free(r->names);
    free(r->unloaded_text);
    free(r);
    h->reload = NULL;
}

/* Each loaded or pseudo-module of a handle: its name and a digest of its
 * lines' addresses and names (ModuleChanges' comparison). */
struct digest {
    const kms_handle *h;
    uint64_t *sum;
    uint32_t last;
};

static int digest_line(const struct kms_line *l, void *arg)
{
    struct digest *d = arg;
    if (l->origin != KMS_ORIGIN_LOADABLE && l->origin != KMS_ORIGIN_PSEUDO)
        return 0;
    const char *mod = l->modules[0];
    if (d->last >= d->h->nmods || strcmp(d->h->mod_name[d->last], mod)) {
        d->last = 0;
        for (uint32_t m = 1; m < d->h->nmods; m++)
            if (!strcmp(d->h->mod_name[m], mod))
                d->last = m;
        if (!d->last)
            return 0;
    }
    uint64_t x = d->sum[d->last] ^ l->address;
    for (uint32_t k = 0; k < l->name_len; k++)
        x = (x ^ (unsigned char)l->name[k]) * 0x100000001B3u;
    d->sum[d->last] = (x ^ (x >> 31)) * 0x9E3779B97F4A7C15u;
    return 0;
}

static uint64_t *digests(const kms_handle *h)
{
    struct digest d = {h, calloc(h->nmods ? h->nmods : 1, sizeof *d.sum), 0};
    if (d.sum)
        kms_foreach(h, digest_line, &d);
    return d.sum;
}

static long module_index(const kms_handle *h, const char *name)
{
    for (uint32_t m = 1; m < h->nmods; m++)
        if (!strcmp(h->mod_name[m], name))
            return m;
    return -1;
}

/* NEW's changes against OLD into NEW's reload record; 0 or -1 (memory). */
static int compare(const kms_handle *old, kms_handle *nh, size_t *count)
{
    struct kms_reload *r = nh->reload;
    uint64_t *a = digests(old), *b = digests(nh);
    size_t text = 0, k = 0;
    r->names = malloc(((size_t)old->nmods + nh->nmods + 1) * sizeof *r->names);
    for (uint32_t m = 1; m < old->nmods; m++)
        text += strlen(old->mod_name[m]) + 1;
    r->unloaded_text = malloc(text + 1);
    if (!a || !b || !r->names || !r->unloaded_text) {
        free(a);
        free(b);
        return -1;
    }
    count[0] = count[1] = count[2] = 0;
    for (uint32_t m = 1; m < nh->nmods; m++) /* loaded */
        if (module_index(old, nh->mod_name[m]) < 0)
            r->names[k++] = nh->mod_name[m], count[0]++;
    char *at = r->unloaded_text;
    for (uint32_t m = 1; m < old->nmods; m++) /* unloaded */
        if (module_index(nh, old->mod_name[m]) < 0) {
            r->names[k++] = strcpy(at, old->mod_name[m]);
            at += strlen(at) + 1;
            count[1]++;
        }
    for (uint32_t m = 1; m < nh->nmods; m++) { /* reloaded */
        long o = module_index(old, nh->mod_name[m]);
        if (o >= 0 && a[o] != b[m])
            r->names[k++] = nh->mod_name[m], count[2]++;
    }
    free(a);
    free(b);
    return 0;
}

int kms_refresh(kms_handle *h, struct kms_changes *out, kms_error *err)
{
    struct kms_changes c;
    size_t count[3] = {0, 0, 0};
    if (err) {
        err->code = KMS_OK;
        err->message[0] = 0;
    }
    if (!h || !out || out->size == 0)
        return kmsi_fail(err, KMS_E_ARG, "kms_refresh: give a handle and struct kms_changes "
                         "with its size set");
    struct kms_reload *r = h->reload;
    if (!r)
        return kmsi_fail(err, KMS_E_ARG, "kms_refresh: the handle's kallsyms was the caller's "
                         "text, which the library cannot read again: load it again instead");
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    if (r->path[4]) {
        char *list = module_list(r->path[4]);
        int same = list && r->modules_list ? !strcmp(list, r->modules_list)
                                           : !list && !r->modules_list;
        free(list);
        if (same) {
            free(r->names);
            r->names = NULL;
            memcpy(out, &c, out->size < sizeof c ? out->size : sizeof c);
            return KMS_OK;
        }
    }
    struct kms_load_opts o = {.size = sizeof o, .syms_path = r->path[0],
                              .kallsyms_path = r->path[1], .modules_dir = r->path[2],
                              .sysfs_root = r->path[3], .proc_modules = r->path[4],
                              .flags = r->flags};
    kms_handle *nh = kmsi_load_reading(&o, (const char *const *)r->read, r->nread, err);
    if (!nh)
        return err ? err->code : KMS_E_IO;
    if (compare(h, nh, count)) {
        kms_free(nh);
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory");
    }
    /* the handle becomes the new load; the old contents go */
    struct kms_handle old = *h;
    *h = *nh;
    *nh = old;
    kms_free(nh);
    r = h->reload;
    c.nloaded = count[0];
    c.loaded = r->names;
    c.nunloaded = count[1];
    c.unloaded = r->names + count[0];
    c.nreloaded = count[2];
    c.reloaded = r->names + count[0] + count[1];
    memcpy(out, &c, out->size < sizeof c ? out->size : sizeof c);
    return KMS_OK;
}

int kms_read_modules(kms_handle *h, const char *const *mods, size_t n, kms_error *err)
{
    if (err) {
        err->code = KMS_OK;
        err->message[0] = 0;
    }
    if (!h || (n && !mods))
        return kmsi_fail(err, KMS_E_ARG, "kms_read_modules: give a handle and N names");
    struct kms_reload *r = h->reload;
    if (!r)
        return kmsi_fail(err, KMS_E_ARG, "kms_read_modules: the handle's kallsyms was the "
                         "caller's text, which the library cannot read again: load it again "
                         "without KMS_LOAD_DEFER_MODULES");
    /* the modules read so far and the ones asked for (N 0: every deferred one) */
    size_t want = r->nread, cap = r->nread + (n ? n : h->mods.nstatus);
    const char **read = malloc((cap ? cap : 1) * sizeof *read);
    if (!read)
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory");
    for (size_t k = 0; k < r->nread; k++)
        read[k] = r->read[k];
    for (size_t k = 0; k < (n ? n : h->mods.nstatus); k++) {
        const struct kms_module *st = n ? NULL : &h->mods.status[k];
        if (st && st->status != KMS_MODULE_DEFERRED)
            continue;
        const char *name = n ? mods[k] : st->name;
        size_t seen = 0;
        while (seen < want && strcmp(read[seen], name))
            seen++;
        if (seen == want) /* asked for before: read already */
            read[want++] = name;
    }
    if (want == r->nread) { /* nothing new to read */
        free(read);
        return KMS_OK;
    }
    struct kms_load_opts o = {.size = sizeof o, .syms_path = r->path[0],
                              .kallsyms_path = r->path[1], .modules_dir = r->path[2],
                              .sysfs_root = r->path[3], .proc_modules = r->path[4],
                              .flags = r->flags};
    kms_handle *nh = kmsi_load_reading(&o, read, want, err);
    free(read);
    if (!nh)
        return err ? err->code : KMS_E_IO;
    struct kms_handle old = *h;
    *h = *nh;
    *nh = old;
    kms_free(nh);
    return KMS_OK;
}
