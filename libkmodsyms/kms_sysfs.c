// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: the kernel's word about its loaded modules (docs/resolver.md
 * R44, R45): /sys/module/NAME (srcversion, the build-id note, each section's
 * address, coresize) and /proc/modules (each module's core, R30), and the
 * small file readers the module files share (kms_ko.h).
 */
#include "kms_ko.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* The whole file at PATH (8 NUL bytes after it): 0, or an errno. */
int kmsi_slurp(const char *path, unsigned char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    size_t cap, n = 0;
    unsigned char *buf;
    if (fd < 0)
        return errno;
    /* sysfs and /proc report sizes they do not have: grow until end of file */
    cap = (fstat(fd, &st) == 0 && st.st_size > 0) ? (size_t)st.st_size + 1 : 4096;
    if (!(buf = malloc(cap + 8))) {
        close(fd);
        return ENOMEM;
    }
    for (;;) {
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap * 2 + 8);
            if (!nb) {
                free(buf);
                close(fd);
                return ENOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return e;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    memset(buf + n, 0, 8);
    *out = buf;
    *len = n;
    return 0;
}

/* The white space trimmed around a sysfs value or a modules.dep path:
 * ASCII's, and the separators 0x1C-0x1F. */
int kmsi_is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F);
}

/* A small file's text (a sysfs value), trimmed (NULL: unreadable). */
static char *read_text(const char *path)
{
    unsigned char *buf;
    size_t n, a = 0;
    if (kmsi_slurp(path, &buf, &n))
        return NULL;
    while (n > a && kmsi_is_space(buf[n - 1]))
        n--;
    while (a < n && kmsi_is_space(buf[a]))
        a++;
    memmove(buf, buf + a, n - a);
    buf[n - a] = 0;
    return (char *)buf;
}

char *kmsi_join(const char *dir, const char *rel)
{
    if (rel[0] == '/') /* an absolute path (a modules.dep entry may be one) stands alone */
        return strdup(rel);
    size_t n = strlen(dir);
    return kmsi_format("%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", rel);
}

/* A hex number as sysfs and /proc print one (0x optional; a leading '+'
 * and a '_' between digits are read too); -1 when it is not a number of
 * 64 bits. */
static int parse_hex(const char *t, uint64_t *out)
{
    uint64_t v = 0;
    int digits = 0;
    if (*t == '+')
        t++;
    if (t[0] == '0' && (t[1] == 'x' || t[1] == 'X'))
        t += 2;
    for (; *t; t++) {
        int d = (*t >= '0' && *t <= '9') ? *t - '0'
              : (*t >= 'a' && *t <= 'f') ? *t - 'a' + 10
              : (*t >= 'A' && *t <= 'F') ? *t - 'A' + 10 : -1;
        if (*t == '_' && digits && t[1] && t[1] != '_')
            continue;
        if (d < 0 || v >> 60)
            return -1;
        v = v << 4 | (unsigned)d;
        digits++;
    }
    *out = v;
    return digits ? 0 : -1;
}

static int parse_dec(const char *t, uint64_t *out)
{
    uint64_t v = 0;
    if (!*t)
        return -1;
    for (; *t; t++) {
        if (*t < '0' || *t > '9' || v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*t - '0');
    }
    *out = v;
    return 0;
}
/* ------------------------------------------------------------ /sys/module, /proc/modules */

void kmsi_live_free(struct kmsi_live *l)
{
    for (size_t k = 0; k < l->nsec; k++)
        free(l->sec_name[k]);
    free(l->sec_name);
    free(l->sec_addr);
    free(l->srcversion);
}

/* Read /sys/module/NAME under SYSFS_ROOT: srcversion, the build-id note and
 * each section's address (its core is read apart: proc_modules_cores,
 * coresize).  -1: out of memory. */
int kmsi_read_live(struct kmsi_live *l, const char *sysfs_root, const char *name)
{
    memset(l, 0, sizeof *l);
    if (!sysfs_root)
        return 0;
    char *base = kmsi_format("%s/module/%s", sysfs_root, name);
    struct stat st;
    if (!base)
        return -1;
    l->has_sysfs = stat(base, &st) == 0 && S_ISDIR(st.st_mode);
    if (!l->has_sysfs) {
        free(base);
        return 0;
    }
    char *path = kmsi_format("%s/srcversion", base);
    if (path)
        l->srcversion = read_text(path);
    free(path);
    path = kmsi_format("%s/notes/.note.gnu.build-id", base);
    unsigned char *note;
    size_t n;
    if (path && !kmsi_slurp(path, &note, &n)) {
        kmsi_notes_build_id(note, n, 0, l->build_id, sizeof l->build_id);
        free(note);
    }
    free(path);
    char *dir = kmsi_format("%s/sections", base);
    DIR *d = dir ? opendir(dir) : NULL;
    struct dirent *de;
    size_t cap = 0;
    int bad = !dir;
    while (d && !bad && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *file = kmsi_join(dir, de->d_name), *value = file ? read_text(file) : NULL;
        uint64_t address;
        free(file);
        if (value && !parse_hex(value, &address) && address) { /* 0: hidden from this user */
            if (l->nsec == cap) {
                cap = cap ? 2 * cap : 32;
                char **nn = realloc(l->sec_name, cap * sizeof *nn);
                if (nn)
                    l->sec_name = nn;
                uint64_t *na = nn ? realloc(l->sec_addr, cap * sizeof *na) : NULL;
                if (!na)
                    bad = 1;
                else
                    l->sec_addr = na;
            }
            if (!bad && !(l->sec_name[l->nsec] = strdup(de->d_name)))
                bad = 1;
            if (!bad)
                l->sec_addr[l->nsec++] = address;
        }
        free(value);
    }
    if (d)
        closedir(d);
    free(dir);
    free(base);
    return bad ? -1 : 0;
}

const uint64_t *kmsi_live_section(const struct kmsi_live *l, const char *name)
{
    for (size_t k = l->nsec; k-- > 0;) /* of two of a name, the one read last */
        if (!strcmp(l->sec_name[k], name))
            return &l->sec_addr[k];
    return NULL;
}

/* /proc/modules: the core (address, size) of each module named in kallsyms,
 * which bounds its lines' answers (R30). */
void kmsi_proc_modules_cores(struct kmsi_loaded *out, const char *path,
                             const char *const *mod_name)
{
    unsigned char *text;
    size_t n;
    if (!path || kmsi_slurp(path, &text, &n))
        return;
    char *t = (char *)text;
    for (size_t s = 0; s < n;) {
        size_t e = s;
        while (e < n && t[e] != '\n')
            e++;
        t[e] = 0;
        char *field[6], *save = NULL, *tok = strtok_r(t + s, " \t\r\v\f", &save);
        int nf = 0;
        for (; tok && nf < 6; tok = strtok_r(NULL, " \t\r\v\f", &save))
            field[nf++] = tok;
        uint64_t size, address;
        if (nf == 6 && !parse_dec(field[1], &size) && !parse_hex(field[5], &address) && address &&
            size)
            for (uint32_t m = 1; m < out->nmods; m++)
                if (!strcmp(mod_name[m], field[0])) {
                    out->core_known[m] = 1;
                    out->core_start[m] = address;
                    out->core_size[m] = size;
                }
        s = e + 1;
    }
    free(text);
}

void kmsi_sysfs_core(struct kmsi_loaded *out, uint32_t mod, const char *sysfs_root,
                     const char *name, const struct kmsi_live *live)
{
    if (out->core_known[mod] || !sysfs_root || !live->has_sysfs)
        return;
    char *file = kmsi_format("%s/module/%s/coresize", sysfs_root, name);
    char *coresize = file ? read_text(file) : NULL;
    const uint64_t *text = kmsi_live_section(live, ".text");
    uint64_t size;
    if (coresize && text && !parse_dec(coresize, &size)) {
        out->core_known[mod] = 1;
        out->core_start[mod] = *text;
        out->core_size[mod] = size;
    }
    free(file);
    free(coresize);
}
