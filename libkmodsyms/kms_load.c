// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Loading: the public kms_load*() and kms_free(), and the order of the
 * stages -- inputs (kms_format.c, kms_kallsyms.c), placement (kms_place.c),
 * attribution (kms_attr.c), the index (kms_index.c) -- with the running
 * kernel's check (docs/resolver.md R40) and the error every stage reports
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

const char *kms_strerror(int code)
{
    switch (code) {
    case KMS_OK: return "success";
    case KMS_E_NOMEM: return "out of memory";
    case KMS_E_IO: return "a file cannot be opened or read";
    case KMS_E_SYMS: return "not a valid dtrace_syms file";
    case KMS_E_VERSION: return "dtrace_syms of another format version";
    case KMS_E_NO_LAYOUT: return "dtrace_syms without a link layout";
    case KMS_E_KALLSYMS: return "kallsyms text malformed or empty";
    case KMS_E_HIDDEN: return "kallsyms addresses hidden (all zero)";
    case KMS_E_STALE: return "dtrace_syms of another kernel";
    case KMS_E_ARG: return "bad argument";
    case KMS_E_NO_SYMS: return "no dtrace_syms file";
    default: return "unknown error";
    }
}

/* errors.forced_warning: one line, whose reason is the check's without
 * its remedy (what KMS_LOAD_FORCE did is the news, not how to do it). */
int kmsi_forced(kms_handle *h, const char *stale, kms_error *err)
{
    static const char remedy[] = " or load with " KMS_FORCE_WORD;
    size_t n = strlen(stale);
    if (n >= sizeof remedy - 1 && !strcmp(stale + n - (sizeof remedy - 1), remedy))
        n -= sizeof remedy - 1;
    const char *pre = "used anyway (" KMS_FORCE_WORD "), answers may be wrong: ";
    char *w = malloc(strlen(pre) + n + 1);
    if (!w)
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory");
    memcpy(w, pre, strlen(pre));
    memcpy(w + strlen(pre), stale, n);
    w[strlen(pre) + n] = 0;
    if (h->warning[0])
        free((char *)h->warning);
    h->warning = w;
    return KMS_OK;
}

/* Add LINE to the handle's one warning line (joined with "; "). */
static int add_warning(kms_handle *h, const char *line, kms_error *err)
{
    size_t had = strlen(h->warning), n = strlen(line);
    char *w = malloc(had + (had ? 2 : 0) + n + 1);
    if (!w)
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory");
    memcpy(w, h->warning, had);
    if (had)
        memcpy(w + had, "; ", 2), had += 2;
    memcpy(w + had, line, n + 1);
    if (h->warning[0])
        free((char *)h->warning);
    h->warning = w;
    return KMS_OK;
}

/* R60: a file whose header says its answers may be wrong, its module map
 * a guess (FLAG_GUESSED_MODULES) or written past a failed check of the
 * build (FLAG_FORCED, what it was in its module map's description), says
 * so at every load: the handle's warning. */
static int file_warning(kms_handle *h, const char *syms_path, kms_error *err)
{
    static const char past[] = "FORCED past: ";
    uint32_t flags = le32(h->map + HDR_FLAGS);
    char line[1024];
    if (flags & FLAG_GUESSED_MODULES) {
        snprintf(line, sizeof line, "the built-in modules of %s are guessed from "
                 "modules.builtin.modinfo (kmodsyms build --guess-modules), not kbuild's: a module "
                 "of several objects may show as vmlinux or as another module; rebuild it with "
                 "--source", syms_path);
        if (add_warning(h, line, err))
            return -1;
    }
    if (flags & FLAG_FORCED) {
        const char *why = strstr(str(h, le32(h->map + HDR_THICK_SOURCE)), past);
        snprintf(line, sizeof line, "%s was written with 'kmodsyms build --force' past a failed "
                 "check, its answers may be wrong: %s", syms_path, why ? why + sizeof past - 1 :
                 "(the check is not recorded)");
        if (add_warning(h, line, err))
            return -1;
    }
    return KMS_OK;
}

/* R40: with the live kallsyms, the file's kernel release must be uname's
 * and its build-id the running kernel's; under KMS_LOAD_FORCE (R41) a
 * mismatch is the handle's warning (*FORCED set) instead of an error. */
static int check_live(kms_handle *h, const char *syms_path, int force, int *forced,
                      kms_error *err)
{
    struct utsname u;
    char live_id[256];
    unsigned char notes[4096];
    kms_error stale;
    int rc = KMS_OK;
    if (uname(&u) == 0 && h->release[0] && strcmp(h->release, u.release) != 0)
        rc = kmsi_fail(&stale, KMS_E_STALE, "%s is for kernel %s, but %s is running; use the "
                       "file of the running kernel or load with " KMS_FORCE_WORD, syms_path,
                       h->release, u.release);
    live_id[0] = 0;
    int fd = rc ? -1 : open("/sys/kernel/notes", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, notes, sizeof notes);
        if (got > 0)
            kmsi_notes_build_id(notes, (size_t)got, 0, live_id, sizeof live_id);
        close(fd);
    }
    if (!rc && h->build_id[0] && live_id[0] && strcmp(h->build_id, live_id) != 0)
        rc = kmsi_fail(&stale, KMS_E_STALE, "%s is for vmlinux build-id %s, but the running "
                       "kernel's is %s; rebuild it or load with " KMS_FORCE_WORD, syms_path,
                       h->build_id, live_id);
    if (!rc)
        return KMS_OK;
    if (!force) {
        if (err)
            *err = stale;
        return rc;
    }
    *forced = 1;
    return kmsi_forced(h, stale.message, err);
}

/* What only building the index needs: the load context (struct kmsi_load)
 * and, of the loaded modules, all but their statuses. */
static void free_build(kms_handle *h)
{
    free(h->mods.line);
    free(h->mods.extent);
    h->mods.line = NULL;
    h->mods.extent = NULL;
    h->mods.nlines = h->mods.nextent = 0;
    if (!h->load)
        return;
    kmsi_scratch_release(h, (struct scratch_mark){NULL, 0});
    kmsi_free_anchors(h->load->anchors);
    h->load = NULL;
}

/*
 * One load.  WHY non-NULL: no dtrace_syms (KMS_LOAD_FALLBACK's second try),
 * answering from kallsyms alone because of WHY.  On failure *SYMS_FAULT says
 * whether the dtrace_syms file was at fault (missing, unreadable, corrupt,
 * without layout, another kernel's): what the fallback may answer around.
 */
static kms_handle *load(const char *syms_path, const struct kallsyms_source *src, int live,
                        unsigned flags, const struct kmsi_sources *modules, const char *why,
                        int *syms_fault, kms_error *err)
{
    char default_path[400];
    const char *source = src->name;
    kms_handle *h = calloc(1, sizeof *h);
    struct kmsi_load ld;
    int force = (flags & KMS_LOAD_FORCE) != 0, forced = 0;
    *syms_fault = 0;
    if (err) {
        err->code = KMS_OK;
        err->message[0] = 0;
    }
    if (!h) {
        kmsi_fail(err, KMS_E_NOMEM, "out of memory");
        return NULL;
    }
    memset(&ld, 0, sizeof ld);
    h->load = &ld;
    h->degraded = h->warning = "";
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
    if (why) {
        static const char *const pre = "answering from ", *const mid =
            " alone, built-in modules unknown: "; /* R42 */
        char *d = malloc(strlen(why) + 1), *w = malloc(strlen(pre) + strlen(source) +
                                                       strlen(mid) + strlen(why) + 1);
        if (d) {
            strcpy(d, why);
            h->degraded = d;
        }
        if (w) {
            strcat(strcat(strcat(strcpy(w, pre), source), mid), why);
            h->warning = w;
        }
        if (!d || !w || kmsi_no_syms(h, err)) {
            kmsi_fail(err, KMS_E_NOMEM, "out of memory");
            goto bad;
        }
    } else if (kmsi_map_syms(h, syms_path, err)) {
        *syms_fault = err && err->code != KMS_E_NOMEM;
        goto bad;
    }
    if (kmsi_index_anchors(h, err) || kmsi_parse_kallsyms(h, src, err))
        goto bad;
    if (!why && live && check_live(h, syms_path, force, &forced, err)) {
        *syms_fault = err && err->code == KMS_E_STALE;
        goto bad;
    }
    if (!why && h->count[T_SEGMENTS] == 0) { /* R8: no layout, nothing to shift */
        kmsi_fail(err, KMS_E_NO_LAYOUT, "%s has no link layout (built with --no-layout, or from a "
                  "tree without vmlinux and System.map): rebuild it with 'kmodsyms build' in the "
                  "kernel's build tree", syms_path);
        *syms_fault = 1;
        goto bad;
    }
    if (!SCRATCH(h, h->load->line_matched, h->n) || !SCRATCH(h, h->load->line_section, h->n) ||
        kmsi_sort_by_address(h)) {
        kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing %s", source);
        goto bad;
    }
    memset(h->load->line_matched, 0, h->n);
    struct scratch_mark placing = kmsi_scratch_mark(h);
    if (!SCRATCH(h, h->load->section_base, h->count[T_SECTIONS]) ||
        !SCRATCH(h, h->load->seg_shift, h->count[T_SEGMENTS]) || !SCRATCH(h, h->load->seg_known, h->count[T_SEGMENTS])) {
        kmsi_fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
        goto bad;
    }
    memset(h->load->section_base, 0, h->count[T_SECTIONS] * sizeof *h->load->section_base);
    /* a file forced past the live check is not checked again (one warning
     * says why it is used); otherwise the anchors check it (R36, R37),
     * warning instead under FORCE (R41) */
    int check = why || forced ? CHECK_NONE : force ? CHECK_WARN : CHECK_FAIL;
    if (kmsi_place_sections(h, syms_path, source, check, err)) {
        *syms_fault = err && err->code == KMS_E_STALE;
        goto bad;
    }
    if (kmsi_attribute_lines(h, syms_path, err)) {
        *syms_fault = err && err->code == KMS_E_SYMS;
        goto bad;
    }
    kmsi_scratch_release(h, placing); /* only placement and attribution read where sections are */
    ld.section_base = NULL;
    ld.seg_shift = NULL;
    ld.seg_known = NULL;
    if (kmsi_match_modules(h, modules, err) || kmsi_build_index(h, err) || kmsi_add_ko_extents(h, err))
        goto bad;
    kmsi_scratch_trim(h); /* the pieces are what the resident set peaks with */
    if (kmsi_build_pieces(h, err) || kmsi_group_lines(h, err))
        goto bad;
    free_build(h); /* first: the peak resident set stays that of the building */
    if (kmsi_build_buckets(h, err) || kmsi_build_owners(h, err))
        goto bad;
    if (!why && file_warning(h, syms_path, err))
        goto bad;
    return h;
bad:
    kms_free(h);
    return NULL;
}

kms_handle *kms_load_opts(const struct kms_load_opts *opts, kms_error *err)
{
    return kmsi_load_reading(opts, NULL, 0, err);
}

/* A directory the caller names must be one: a typo would read no .ko,
 * and every loaded module's lines would stay unsized without a word. */
static int is_modules_dir(const char *path, kms_error *err)
{
    struct stat st;
    const char *what = "not a directory";
    errno = 0;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return 1;
    if (errno == ENOENT)
        what = "no such directory";
    else if (errno)
        what = strerror(errno);
    kmsi_fail(err, KMS_E_ARG, "%s: %s (" KMS_MODULES_DIR_WORD ": where the loaded modules' .ko "
              "files are, /lib/modules/RELEASE)", path, what);
    return 0;
}

kms_handle *kmsi_load_reading(const struct kms_load_opts *opts, const char *const *read,
                              size_t nread, kms_error *err)
{
    struct kms_load_opts o;
    char modules_dir[400];
    struct kallsyms_source ks = {-1, NULL, 0, NULL, 0};
    struct stat st;
    int live;
    memset(&o, 0, sizeof o);
    if (opts && opts->size == 0) {
        kmsi_fail(err, KMS_E_ARG, "kms_load_opts: set opts->size to sizeof(struct kms_load_opts)");
        return NULL;
    }
    if (opts)
        memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    if (o.modules_dir && !(o.flags & KMS_LOAD_NO_MODULES) && !is_modules_dir(o.modules_dir, err))
        return NULL;
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
    ks.live = live;
    /* the loaded modules' sources: the running kernel's for its own
     * kallsyms, else only what the caller gives (§9) */
    struct kmsi_sources src = {o.modules_dir, o.sysfs_root, o.proc_modules, 0, NULL, 0};
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
    src.defer = (o.flags & KMS_LOAD_DEFER_MODULES) != 0;
    src.read = read;
    src.nread = nread;
    int syms_fault;
    kms_error own;
    if (!err) /* the fallback's reason is the first load's error */
        err = &own;
    kms_handle *h = load(o.syms_path, &ks, live, o.flags, &src, NULL, &syms_fault, err);
    /* R42: only the default file may be done without, and kallsyms' own
     * faults are never hidden (a second read reports them as the first
     * would have) */
    if (!h && syms_fault && (o.flags & KMS_LOAD_FALLBACK) && !o.syms_path) {
        kms_error why = *err;
        if (ks.fd < 0 || lseek(ks.fd, 0, SEEK_SET) == 0)
            h = load(NULL, &ks, live, o.flags, &src, why.message, &syms_fault, err);
        else
            kmsi_fail(err, KMS_E_IO, "cannot read %s again: %s", ks.name, strerror(errno));
    }
    if (ks.fd >= 0)
        close(ks.fd);
    if (h && !o.kallsyms_text) {
        struct kms_load_opts again = o;
        again.kallsyms_path = ks.name;
        if (kmsi_remember_sources(h, &again, &src, err)) {
            kms_free(h);
            return NULL;
        }
    }
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
    kmsi_modules_free(&h->mods);
    kmsi_forget_sources(h);
    if (h->degraded && h->degraded[0])
        free((char *)h->degraded);
    if (h->warning && h->warning[0])
        free((char *)h->warning);
    free(h);
}
