// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Loading: the public kms_load*() and kms_free(), and the order of the
 * stages -- inputs (kms_format.c, kms_kallsyms.c), placement (kms_place.c),
 * attribution (kms_attr.c), the index (kms_index.c) -- with the running
 * kernel's check (docs/resolver.md §8) and the error every stage reports
 * through (kmsi_fail).
 */
#include "kms_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#define LIVE_KALLSYMS "/proc/kallsyms"

int kmsi_fail(kms_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* kmodsyms.live.check_live */
static int check_live(const kms_handle *h, const char *syms_path, kms_error *err)
{
    struct utsname u;
    char live_id[256];
    unsigned char notes[4096];
    if (uname(&u) == 0 && h->release[0] && strcmp(h->release, u.release) != 0)
        return kmsi_fail(err, KMS_E_STALE, "%s is for kernel %s, but %s is running; use the file "
                         "of the running kernel or pass --force", syms_path, h->release, u.release);
    live_id[0] = 0;
    int fd = open("/sys/kernel/notes", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, notes, sizeof notes);
        if (got > 0)
            kms_notes_build_id(notes, (size_t)got, 0, live_id, sizeof live_id);
        close(fd);
    }
    if (h->build_id[0] && live_id[0] && strcmp(h->build_id, live_id) != 0)
        return kmsi_fail(err, KMS_E_STALE, "%s is for vmlinux build-id %s, but the running kernel's "
                         "is %s; rebuild it or pass --force", syms_path, h->build_id, live_id);
    return KMS_OK;
}

/* What only building the index needs (of the loaded modules, all but
 * their statuses). */
static void free_build(kms_handle *h)
{
    free(h->mods.line);
    free(h->mods.extent);
    h->mods.line = NULL;
    h->mods.extent = NULL;
    h->mods.nlines = h->mods.nextent = 0;
    kmsi_scratch_release(h, (struct scratch_mark){NULL, 0});
    kmsi_free_anchors(h->anchors);
    h->anchors = NULL;
    h->section_rows = NULL;
    h->line_matched = NULL;
    h->line_section = h->line_region = NULL;
    h->section_base = NULL;
    h->by_address = NULL;
    h->region_end = NULL;
}

static kms_handle *load(const char *syms_path, const struct kallsyms_source *src, int live,
                        unsigned flags, const struct kms_sources *modules, kms_error *err)
{
    char default_path[400];
    const char *source = src->name;
    kms_handle *h = calloc(1, sizeof *h);
    int check = !(flags & KMS_LOAD_FORCE);
    if (err) {
        err->code = KMS_OK;
        err->message[0] = 0;
    }
    if (!h) {
        kmsi_fail(err, KMS_E_NOMEM, "out of memory");
        return NULL;
    }
    if (!syms_path) {
        struct utsname u;
        if (uname(&u) != 0)
            u.release[0] = 0;
        snprintf(default_path, sizeof default_path, "/lib/modules/%s/kernel/dtrace_syms",
                 u.release);
        syms_path = default_path;
    }
    if (src->fd < 0 && src->len >= UINT32_MAX) {
        kmsi_fail(err, KMS_E_KALLSYMS, "%s: larger than 4 GiB: not a kallsyms file", source);
        goto bad;
    }
    if (kmsi_map_syms(h, syms_path, err) || kmsi_index_anchors(h, err) || kmsi_parse_kallsyms(h, src, err))
        goto bad;
    if (live && check && check_live(h, syms_path, err))
        goto bad;
    if (h->count[T_SEGMENTS] == 0) {
        kmsi_fail(err, KMS_E_NO_LAYOUT, "%s has no link layout (built with --no-layout, or from a "
                  "tree without vmlinux and System.map): rebuild it with 'kmodsyms build' in the "
                  "kernel's build tree, or use kmodsyms' Python resolver", syms_path);
        goto bad;
    }
    if (!SCRATCH(h, h->line_matched, h->n) || !SCRATCH(h, h->line_section, h->n) ||
        kmsi_sort_by_address(h)) {
        kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing %s", source);
        goto bad;
    }
    memset(h->line_matched, 0, h->n);
    struct scratch_mark placing = kmsi_scratch_mark(h);
    if (!SCRATCH(h, h->section_base, h->count[T_SECTIONS])) {
        kmsi_fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
        goto bad;
    }
    memset(h->section_base, 0, h->count[T_SECTIONS] * sizeof *h->section_base);
    if (kmsi_place_sections(h, syms_path, source, check, err) || kmsi_attribute_lines(h, syms_path, err))
        goto bad;
    kmsi_scratch_release(h, placing); /* only placement and attribution read where sections are */
    h->section_base = NULL;
    if (kmsi_match_modules(h, modules, err) || kmsi_build_index(h, err) || kmsi_add_ko_extents(h, err))
        goto bad;
    kmsi_scratch_trim(h); /* the pieces are what the resident set peaks with */
    if (kmsi_build_pieces(h, err) || kmsi_group_lines(h, err))
        goto bad;
    free_build(h); /* first: the peak resident set stays that of the building */
    if (kmsi_build_buckets(h, err) || kmsi_build_owners(h, err))
        goto bad;
    return h;
bad:
    kms_free(h);
    return NULL;
}

kms_handle *kms_load_opts(const struct kms_load_opts *opts, kms_error *err)
{
    struct kms_load_opts o;
    char modules_dir[400];
    struct kallsyms_source ks = {-1, NULL, 0, NULL};
    struct stat st;
    int live;
    memset(&o, 0, sizeof o);
    if (opts && opts->size == 0) {
        kmsi_fail(err, KMS_E_ARG, "kms_load_opts: set opts->size to sizeof(struct kms_load_opts)");
        return NULL;
    }
    if (opts)
        memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    if (o.kallsyms_text) { /* read in place */
        ks.buf = o.kallsyms_text;
        ks.len = o.kallsyms_len;
        ks.name = o.kallsyms_name ? o.kallsyms_name : "kallsyms";
        live = (o.flags & KMS_LOAD_LIVE) != 0;
    } else {
        ks.name = o.kallsyms_path ? o.kallsyms_path : LIVE_KALLSYMS;
        ks.fd = open(ks.name, O_RDONLY | O_CLOEXEC);
        if (ks.fd < 0) {
            kmsi_fail(err, KMS_E_IO, "cannot read %s: %s", ks.name, strerror(errno));
            return NULL;
        }
        /* /proc/kallsyms reports size 0: read until end of file */
        if (fstat(ks.fd, &st) == 0 && st.st_size > 0)
            ks.len = (size_t)st.st_size;
        live = strcmp(ks.name, LIVE_KALLSYMS) == 0;
    }
    /* live.module_sources: the running kernel's, for its own kallsyms */
    struct kms_sources src = {o.modules_dir, o.sysfs_root, o.proc_modules};
    if (live && !src.modules_dir) {
        struct utsname u;
        if (uname(&u) != 0)
            u.release[0] = 0;
        snprintf(modules_dir, sizeof modules_dir, "/lib/modules/%s", u.release);
        src.modules_dir = modules_dir;
    }
    if (live && !src.sysfs_root)
        src.sysfs_root = "/sys";
    if (live && !src.proc_modules)
        src.proc_modules = "/proc/modules";
    if (o.flags & KMS_LOAD_NO_MODULES)
        src.modules_dir = src.sysfs_root = src.proc_modules = NULL;
    kms_handle *h = load(o.syms_path, &ks, live, o.flags, &src, err);
    if (ks.fd >= 0)
        close(ks.fd);
    return h;
}

kms_handle *kms_load(const char *syms_path, const char *kallsyms_path, unsigned flags,
                     kms_error *err)
{
    struct kms_load_opts o = {.size = sizeof o, .syms_path = syms_path,
                              .kallsyms_path = kallsyms_path, .flags = flags};
    return kms_load_opts(&o, err);
}

kms_handle *kms_load_buffer(const char *syms_path, const char *kallsyms_text, size_t len,
                            const char *name, unsigned flags, kms_error *err)
{
    struct kms_load_opts o = {.size = sizeof o, .syms_path = syms_path,
                              .kallsyms_text = kallsyms_text ? kallsyms_text : "",
                              .kallsyms_len = len, .kallsyms_name = name, .flags = flags};
    if (!kallsyms_text && len) {
        kmsi_fail(err, KMS_E_ARG, "kms_load_buffer: no kallsyms text given");
        return NULL;
    }
    return kms_load_opts(&o, err);
}

void kms_free(kms_handle *h)
{
    if (!h)
        return;
    if (h->map)
        munmap((void *)h->map, h->map_size);
    free(h->member_name);
    free(h->object);
    free(h->section_object);
    free(h->text);
    free(h->line);
    free(h->mod_name);
    free(h->mod_origin);
    free(h->placed);
    free(h->amb_first);
    free(h->amb_count);
    free(h->cand_list);
    free(h->cand_modset);
    free(h->ext_start);
    free(h->ext);
    free(h->piece);
    free(h->cluster);
    free(h->bucket);
    free(h->owner);
    free(h->group_first);
    free(h->grouped);
    free(h->estimate);
    free_build(h);
    kms_modules_free(&h->mods);
    free(h);
}
