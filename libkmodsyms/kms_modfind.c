// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: each loaded module's file under the modules directory
 * (docs/resolver.md R43): the first modules.dep entry of its name, else a
 * search for NAME.ko (updates/ over extra/ over the rest), file names read
 * as the kernel spells module names ('-' as '_').
 */
#include "kms_ko.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

/* The names a module file has (R43): plain, or compressed. */
static const char *const ko_suffixes[] = {".ko", ".ko.xz", ".ko.zst", ".ko.gz"};
#define NSUFFIXES (sizeof ko_suffixes / sizeof ko_suffixes[0])
/* depmod's default search order (R43): updates/, then extra/, then the rest. */
static const char *const search_priority[] = {"updates", "extra"};
#define NPRIORITY 2
/* The module FILE (a base name) is for, spelled as the kernel spells module
 * names ('-' as '_', R43), into OUT (CAP bytes); the suffix's index, or -1
 * when it is no module file. */
static int module_name(const char *file, char *out, size_t cap)
{
    size_t n = strlen(file);
    for (size_t k = 0; k < NSUFFIXES; k++) {
        size_t s = strlen(ko_suffixes[k]);
        if (n > s && !strcmp(file + n - s, ko_suffixes[k]) && n - s < cap) {
            for (size_t i = 0; i < n - s; i++)
                out[i] = file[i] == '-' ? '_' : file[i];
            out[n - s] = 0;
            return (int)k;
        }
    }
    return NO;
}

static long wanted_index(const struct kmsi_wanted *w, const char *name)
{
    for (size_t k = 0; k < w->n; k++)
        if (!strcmp(w->name[k], name))
            return (long)k;
    return NO;
}

/* Offer PATH (relative) for its module at search RANK (lower wins; the
 * first wins among equals): 0, or -1 when out of memory. */
static int offer(struct kmsi_wanted *w, const char *path, int rank)
{
    const char *base = strrchr(path, '/');
    char name[256];
    base = base ? base + 1 : path;
    if (module_name(base, name, sizeof name) < 0)
        return 0;
    long k = wanted_index(w, name);
    if (k < 0 || (w->path[k] && w->rank[k] <= rank))
        return 0;
    char *copy = strdup(path);
    if (!copy)
        return -1;
    free(w->path[k]);
    w->path[k] = copy;
    w->rank[k] = rank;
    return 0;
}

/* R43 with modules.dep: each module's first entry, the file depmod chose. */
static int from_modules_dep(struct kmsi_wanted *w, char *text, size_t n)
{
    for (size_t s = 0; s < n;) {
        size_t e = s;
        while (e < n && text[e] != '\n' && text[e] != '\r')
            e++;
        size_t colon = s;
        while (colon < e && text[colon] != ':')
            colon++;
        size_t a = s, b = colon;
        while (a < b && kmsi_is_space((unsigned char)text[a]))
            a++;
        while (b > a && kmsi_is_space((unsigned char)text[b - 1]))
            b--;
        char saved = text[b];
        text[b] = 0;
        int bad = offer(w, text + a, 0);
        text[b] = saved;
        if (bad)
            return -1;
        s = e + 1;
    }
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* R43 without modules.dep: the directory searched top-down, names sorted
 * (the first of equal rank is the same file on every host), symbolic links
 * to directories not followed (one pointing up would loop). */
static int search(struct kmsi_wanted *w, const char *root, const char *rel, int rank)
{
    char *dir = rel[0] ? kmsi_join(root, rel) : strdup(root);
    DIR *d = dir ? opendir(dir) : NULL;
    char **files = NULL, **dirs = NULL;
    size_t nfiles = 0, ndirs = 0, cap = 0;
    int bad = !dir;
    struct dirent *de;
    while (d && !bad && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *full = kmsi_join(dir, de->d_name);
        struct stat st;
        if (!full) {
            bad = 1;
            break;
        }
        int is_dir = stat(full, &st) == 0 && S_ISDIR(st.st_mode);
        int is_link = lstat(full, &st) == 0 && S_ISLNK(st.st_mode);
        free(full);
        if (is_dir && is_link)
            continue; /* a link to a directory: never entered */
        if (nfiles + ndirs >= cap) {
            cap = cap ? 2 * cap : 64;
            char **nf = realloc(files, cap * sizeof *nf);
            if (nf)
                files = nf;
            char **nd = nf ? realloc(dirs, cap * sizeof *nd) : NULL;
            if (!nd) {
                bad = 1;
                break;
            }
            dirs = nd;
        }
        char *name = strdup(de->d_name);
        if (!name) {
            bad = 1;
            break;
        }
        if (is_dir)
            dirs[ndirs++] = name;
        else
            files[nfiles++] = name;
    }
    if (d)
        closedir(d);
    if (!bad && nfiles)
        qsort(files, nfiles, sizeof *files, by_name);
    if (!bad && ndirs)
        qsort(dirs, ndirs, sizeof *dirs, by_name);
    for (size_t k = 0; k < nfiles && !bad; k++) {
        char *path = rel[0] ? kmsi_join(rel, files[k]) : strdup(files[k]);
        bad = !path || offer(w, path, rank);
        free(path);
    }
    for (size_t k = 0; k < ndirs && !bad; k++) {
        char *sub = rel[0] ? kmsi_join(rel, dirs[k]) : strdup(dirs[k]);
        int r = rank;
        if (!rel[0]) { /* the top directory's name ranks everything below it */
            r = NPRIORITY;
            for (int p = 0; p < NPRIORITY; p++)
                if (!strcmp(dirs[k], search_priority[p]))
                    r = p;
        }
        bad = !sub || search(w, root, sub, r);
        free(sub);
    }
    for (size_t k = 0; k < nfiles; k++)
        free(files[k]);
    for (size_t k = 0; k < ndirs; k++)
        free(dirs[k]);
    free(files);
    free(dirs);
    free(dir);
    return bad ? -1 : 0;
}

/* R43: fills W->path; a modules.dep that exists but cannot be read fails
 * the load, where a search could find other files than depmod chose. */
int kmsi_find_module_files(struct kmsi_wanted *w, const char *modules_dir, kms_error *err)
{
    char *dep = kmsi_join(modules_dir, "modules.dep");
    unsigned char *text;
    size_t n;
    if (!dep)
        return kmsi_modules_oom(err);
    int e = kmsi_slurp(dep, &text, &n);
    if (e == ENOMEM) {
        free(dep);
        return kmsi_modules_oom(err);
    }
    if (e && e != ENOENT) {
        if (err) {
            err->code = KMS_E_IO;
            snprintf(err->message, sizeof err->message, "cannot read %s: %s", dep, strerror(e));
        }
        free(dep);
        return KMS_E_IO;
    }
    free(dep);
    int bad;
    if (!e) {
        bad = from_modules_dep(w, (char *)text, n);
        free(text);
    } else {
        bad = search(w, modules_dir, "", NPRIORITY);
    }
    return bad ? kmsi_modules_oom(err) : KMS_OK;
}
