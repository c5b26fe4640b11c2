// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: loaded modules matched with their own .ko files, so that
 * their kallsyms lines get ELF sizes, types and bindings (docs/resolver.md
 * §9, R43-R46).
 *
 * For every loaded module of kallsyms (pseudo-modules skipped):
 *   1. its file under the modules directory (R43): the first modules.dep entry of
 *      its name, else a search for NAME.ko (updates/ over extra/ over the
 *      rest), file names read as the kernel spells module names ('-' as '_');
 *   2. the file read as installed: a .ko, .ko.xz, .ko.zst or .ko.gz
 *      (kms_decompress.c, with the system's liblzma, libzstd or zlib loaded
 *      at run time: without it that module is KMS_MODULE_UNSUPPORTED, its
 *      lines unsized), signed or not (the signature is cut: the ELF ends
 *      where its section headers and contents end);
 *   3. the kernel's word, when readable: /sys/module/NAME/sections/<name>,
 *      srcversion, notes/.note.gnu.build-id, and the module's core from
 *      /proc/modules or /sys/module/NAME/coresize;
 *   4. the match: sections placed from sysfs, else by anchors, else by
 *      shape (R44); the file refused (for that module only) on any
 *      disagreement (R45); its lines answered from its symbols (R46).
 */
#define _DEFAULT_SOURCE /* strdup, lstat */
#include "kms_modules.h"
#include "kms_decompress.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NO (-1)
/* ELF constants (src/kmodsyms/scan/elf/elfdefs.py) */
#define SHT_SYMTAB 2u
#define SHT_NOBITS 8u
#define SHT_SYMTAB_SHNDX 18u
#define SHF_ALLOC 0x2u
#define SHN_UNDEF 0u
#define SHN_LORESERVE 0xFF00u
#define SHN_XINDEX 0xFFFFu
#define STT_SECTION 3u
#define STT_FILE 4u
#define STB_GNU_UNIQUE 10u
#define NT_GNU_BUILD_ID 3u
#define BUILD_ID_HEX 129 /* 64 bytes of build-id, in hex, and the NUL */

/* What the refusal of a damaged .ko tells the user to do (R45). */
#define KO_REMEDY "reinstall it"
/* The names a module file has (R43): plain, or compressed. */
static const char *const ko_suffixes[] = {".ko", ".ko.xz", ".ko.zst", ".ko.gz"};
#define NSUFFIXES (sizeof ko_suffixes / sizeof ko_suffixes[0])
/* depmod's default search order (R43): updates/, then extra/, then the rest. */
static const char *const search_priority[] = {"updates", "extra"};
#define NPRIORITY 2

/* ------------------------------------------------------------ helpers */

int kms_is_pseudo_module(const char *name)
{
    return strcmp(name, "bpf") == 0 || strncmp(name, "__builtin__", 11) == 0;
}

/* Mapping symbols and local labels: .L*, L0*, $a $d $t $x (alone or with a
 * '.' suffix), which never answer an address (R27, R46). */
int kms_is_mapping_symbol(const char *p, uint32_t len)
{
    if ((len >= 2 && p[0] == '.' && p[1] == 'L') || (len >= 2 && p[0] == 'L' && p[1] == '0'))
        return 1;
    return len >= 2 && p[0] == '$' && p[1] && strchr("adtx", p[1]) && (len == 2 || p[2] == '.');
}


static int oom(kms_error *err)
{
    if (err) {
        err->code = KMS_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory reading loaded modules");
    }
    return KMS_E_NOMEM;
}

/* The whole file at PATH (8 NUL bytes after it): 0, or an errno. */
static int slurp(const char *path, unsigned char **out, size_t *len)
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
static int is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F);
}

/* A small file's text (a sysfs value), trimmed (NULL: unreadable). */
static char *read_text(const char *path)
{
    unsigned char *buf;
    size_t n, a = 0;
    if (slurp(path, &buf, &n))
        return NULL;
    while (n > a && is_space(buf[n - 1]))
        n--;
    while (a < n && is_space(buf[a]))
        a++;
    memmove(buf, buf + a, n - a);
    buf[n - a] = 0;
    return (char *)buf;
}

static char *join(const char *dir, const char *rel)
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

void kms_notes_build_id(const unsigned char *d, size_t n, int big_endian, char *hex, size_t cap)
{
    size_t pos = 0;
    hex[0] = 0;
    while (pos + 12 <= n) {
        uint64_t w[3];
        for (int f = 0; f < 3; f++) {
            const unsigned char *p = d + pos + 4 * f;
            w[f] = big_endian ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
                              : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
        }
        uint64_t namesz = w[0], descsz = w[1], type = w[2];
        uint64_t name_at = pos + 12, desc_at = name_at + (namesz + 3) / 4 * 4;
        uint64_t nlen = namesz;
        if (name_at + nlen > n)
            nlen = name_at < n ? n - name_at : 0;
        while (nlen && d[name_at + nlen - 1] == 0)
            nlen--;
        if (nlen == 3 && !memcmp(d + name_at, "GNU", 3) && type == NT_GNU_BUILD_ID) {
            size_t k = 0;
            for (uint64_t b = desc_at; b < desc_at + descsz && b < n && 2 * k + 3 <= cap; b++, k++)
                snprintf(hex + 2 * k, 3, "%02x", d[b]);
            return;
        }
        pos = desc_at + (descsz + 3) / 4 * 4;
    }
}

/* ------------------------------------------------------------ module files */

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

/* The files found so far for the wanted modules (loaded, not pseudo). */
struct wanted {
    const char *const *name;
    size_t n;
    char **path;    /* relative to the modules directory, or NULL */
    int *rank;
};

static long wanted_index(const struct wanted *w, const char *name)
{
    for (size_t k = 0; k < w->n; k++)
        if (!strcmp(w->name[k], name))
            return (long)k;
    return NO;
}

/* Offer PATH (relative) for its module at search RANK (lower wins; the
 * first wins among equals): 0, or -1 when out of memory. */
static int offer(struct wanted *w, const char *path, int rank)
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
static int from_modules_dep(struct wanted *w, char *text, size_t n)
{
    for (size_t s = 0; s < n;) {
        size_t e = s;
        while (e < n && text[e] != '\n' && text[e] != '\r')
            e++;
        size_t colon = s;
        while (colon < e && text[colon] != ':')
            colon++;
        size_t a = s, b = colon;
        while (a < b && is_space((unsigned char)text[a]))
            a++;
        while (b > a && is_space((unsigned char)text[b - 1]))
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
static int search(struct wanted *w, const char *root, const char *rel, int rank)
{
    char *dir = rel[0] ? join(root, rel) : strdup(root);
    DIR *d = dir ? opendir(dir) : NULL;
    char **files = NULL, **dirs = NULL;
    size_t nfiles = 0, ndirs = 0, cap = 0;
    int bad = !dir;
    struct dirent *de;
    while (d && !bad && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *full = join(dir, de->d_name);
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
        char *path = rel[0] ? join(rel, files[k]) : strdup(files[k]);
        bad = !path || offer(w, path, rank);
        free(path);
    }
    for (size_t k = 0; k < ndirs && !bad; k++) {
        char *sub = rel[0] ? join(rel, dirs[k]) : strdup(dirs[k]);
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
static int find_module_files(struct wanted *w, const char *modules_dir, kms_error *err)
{
    char *dep = join(modules_dir, "modules.dep");
    unsigned char *text;
    size_t n;
    if (!dep)
        return oom(err);
    int e = slurp(dep, &text, &n);
    if (e == ENOMEM) {
        free(dep);
        return oom(err);
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
    return bad ? oom(err) : KMS_OK;
}

/* ------------------------------------------------------------ one .ko */

struct ko_sym {
    const char *name;   /* in the file's string table */
    uint32_t len;
    uint32_t sec;       /* index into ko.sec */
    uint64_t value, size;
    uint8_t info;
};

struct ko_sec {
    char *name;
    uint64_t size;
};

/* One .ko read: the symbols and sections that matching it needs, its
 * srcversion and build-id (R44, R45). */
struct ko {
    unsigned char *data; /* the file, cut where its ELF ends */
    size_t n;
    size_t mapped;       /* bytes of data mapped (map_ko), 0 when data was read into memory */
    int big, is64;
    /* the section header table: shnum as the header says (extended
     * numbering read from section 0), nsh the headers there are (0 when
     * shoff is 0) */
    uint64_t shoff, entsize, shnum, shstrndx, nsh;
    uint32_t nsym, nsec;
    struct ko_sym *sym;
    struct ko_sec *sec;
    char *srcversion;    /* NULL: none */
    char build_id[BUILD_ID_HEX];
};

static void ko_free(struct ko *ko)
{
    for (uint32_t k = 0; k < ko->nsec; k++)
        free(ko->sec[k].name);
    free(ko->sec);
    free(ko->sym);
    free(ko->srcversion);
    if (ko->mapped)
        munmap(ko->data, ko->mapped);
    else
        free(ko->data);
}

/*
 * The .ko at PATH into KO: a regular file mapped read-only, so that only
 * the pages of its headers, symbols and strings are read -- most of a
 * module is code, data and relocations that matching never looks at, and
 * copying them cost more than the rest of the match.  Anything else
 * (empty, not a regular file) is read as before.  0, or an errno.
 */
static int map_ko(const char *path, struct ko *ko)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (uint64_t)st.st_size <= SIZE_MAX) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m != MAP_FAILED) {
            close(fd);
            ko->data = m;
            ko->n = ko->mapped = (size_t)st.st_size;
            return 0;
        }
    }
    close(fd);
    return slurp(path, &ko->data, &ko->n);
}

static int host_little_endian(void)
{
    const union { uint16_t word; unsigned char byte[2]; } one = {1};
    return one.byte[0];
}

/* The WIDTH-byte number at OFF in the file's byte order: a plain load
 * when that is the host's little-endian order (a .ko is most often read
 * where it was built), else byte by byte. */
static inline uint64_t get(const struct ko *ko, uint64_t off, int width)
{
    uint64_t v = 0;
    if (!ko->big && host_little_endian()) {
        memcpy(&v, ko->data + off, (size_t)width);
        return v;
    }
    for (int k = 0; k < width; k++)
        v = v << 8 | ko->data[off + (uint64_t)(ko->big ? k : width - 1 - k)];
    return v;
}

struct shdr {
    uint64_t name, type, flags, offset, size, link;
};

/* Section header I (the caller checked it is in the file). */
static void read_shdr(const struct ko *ko, uint64_t i, struct shdr *h)
{
    int w = ko->is64 ? 8 : 4;
    uint64_t at = ko->shoff + i * ko->entsize;
    h->name = get(ko, at, 4);
    h->type = get(ko, at + 4, 4);
    h->flags = get(ko, at + 8, w);
    h->offset = get(ko, at + 8 + 2 * (uint64_t)w, w);
    h->size = get(ko, at + 8 + 3 * (uint64_t)w, w);
    h->link = get(ko, at + 8 + 4 * (uint64_t)w, 4);
}

/* The file refused (R45), "PATH: WHAT; reinstall it", in *WHY.  1, or -1
 * when out of memory. */
static int refuse_elf(char **why, const char *path, const char *fmt, ...)
{
    char what[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    *why = kmsi_format("%s: %s; %s", path, what, KO_REMEDY);
    return *why ? 1 : -1;
}

/* Whether COUNT section headers from the table's offset are in the file
 * (the entry size is nonzero), and the words for when they are not. */
static const char headers_past_end[] =
    "truncated ELF module (section headers past the end of the file)";
static int headers_fit(const struct ko *ko, uint64_t count)
{
    return ko->shoff <= ko->n && count <= (ko->n - ko->shoff) / ko->entsize;
}

/* The ELF header of the file's bytes (KO->data, KO->n) checked, and its
 * section header table found (extended numbering read from section 0) and
 * in the file.  A fault is refused in the words the build's ELF reader
 * gives an object (src/kmodsyms/scan/elf/elffile.py), with "module" for the
 * kind of file.  0, 1 (refused: *WHY) or -1 (out of memory). */
static int elf_open(struct ko *ko, const char *path, char **why)
{
    const unsigned char *d = ko->data;
    size_t ident = ko->n < 64 ? ko->n : 64; /* the most an ELF header takes */
    if (ident < 4 || memcmp(d, "\177ELF", 4)) {
        if (ident >= 8 && (!memcmp(d, "!<arch>\n", 8) || !memcmp(d, "!<thin>\n", 8)))
            return refuse_elf(why, path, "is an ar archive, expected an ELF module");
        return refuse_elf(why, path, "not an ELF module");
    }
    if (ident < 6)
        return refuse_elf(why, path, "truncated ELF header");
    if (d[4] < 1 || d[4] > 2 || d[5] < 1 || d[5] > 2)
        return refuse_elf(why, path, "unknown ELF class %u or byte order %u", d[4], d[5]);
    ko->is64 = d[4] == 2;
    ko->big = d[5] == 2;
    if (ident < (ko->is64 ? 64u : 52u))
        return refuse_elf(why, path, "truncated ELF header");
    ko->shoff = get(ko, ko->is64 ? 0x28 : 0x20, ko->is64 ? 8 : 4);
    ko->entsize = get(ko, ko->is64 ? 0x3A : 0x2E, 2);
    ko->shnum = get(ko, ko->is64 ? 0x3C : 0x30, 2);
    ko->shstrndx = get(ko, ko->is64 ? 0x3E : 0x32, 2);
    ko->nsh = 0;
    if (!ko->shoff)
        return 0; /* no section headers */
    if (ko->entsize < (ko->is64 ? 64u : 40u))
        return refuse_elf(why, path, "corrupt ELF header (section header size %" PRIu64 ")",
                          ko->entsize);
    if (!ko->shnum || ko->shstrndx == SHN_XINDEX) {
        struct shdr first;
        if (!headers_fit(ko, 1))
            return refuse_elf(why, path, "%s", headers_past_end);
        read_shdr(ko, 0, &first);
        if (!ko->shnum)
            ko->shnum = first.size;
        if (ko->shstrndx == SHN_XINDEX)
            ko->shstrndx = first.link;
    }
    if (!headers_fit(ko, ko->shnum))
        return refuse_elf(why, path, "%s", headers_past_end);
    ko->nsh = ko->shnum;
    return 0;
}

/* Where the ELF ends (R43): past its section header table and every
 * section's contents; a module signature may follow, and is cut off.  From
 * here every section's contents are in the file.  0, 1 (refused: *WHY) or
 * -1. */
static int elf_cut(struct ko *ko, const char *path, char **why)
{
    /* no overflow: the table is in the file, or shoff is 0 and both
     * factors have 16 bits */
    uint64_t end = ko->shoff + ko->shnum * ko->entsize;
    int past = end > ko->n;
    for (uint64_t i = 0; !past && i < ko->nsh; i++) {
        struct shdr h;
        read_shdr(ko, i, &h);
        if (h.type == SHT_NOBITS)
            continue;
        past = h.size > ko->n || h.offset > ko->n - h.size;
        if (!past && h.offset + h.size > end)
            end = h.offset + h.size;
    }
    if (past)
        return refuse_elf(why, path, "truncated ELF module");
    ko->n = (size_t)end;
    return 0;
}

/* The bytes of section H (none for SHT_NOBITS);
 * elf_cut saw them all in the file. */
static void contents(const struct ko *ko, const struct shdr *h, const unsigned char **p,
                     uint64_t *len)
{
    int nobits = h->type == SHT_NOBITS;
    *p = ko->data + (nobits ? 0 : h->offset);
    *len = nobits ? 0 : h->size;
}

/* The string at OFF of a string table (past its end: "";
 * unterminated: to the end). */
static const char *cstr(const unsigned char *table, uint64_t n, uint64_t off, uint32_t *len)
{
    if (off >= n) {
        *len = 0;
        return "";
    }
    const unsigned char *z = memchr(table + off, 0, n - off);
    *len = (uint32_t)(z ? (uint64_t)(z - table) - off : n - off);
    return (const char *)table + off;
}

/* The section-name table (e_shstrndx's; none: empty). */
static void section_names(const struct ko *ko, const unsigned char **p, uint64_t *len)
{
    struct shdr h;
    *p = NULL;
    *len = 0;
    if (ko->shstrndx < ko->nsh) {
        read_shdr(ko, ko->shstrndx, &h);
        contents(ko, &h, p, len);
    }
}

/* The symbols and sections that matching reads, kept as the build keeps
 * those of vmlinux's objects (src/kmodsyms/scan/elf/elfscan.py): symbols
 * defined in a section, named, of no section or file type; sections
 * allocated with a size, or holding a kept symbol.  0, 1 (refused: *WHY)
 * or -1 (out of memory). */
static int ko_scan(struct ko *ko, const char *path, char **why)
{
    uint64_t shnum = ko->nsh, symtab = UINT64_MAX;
    const unsigned char *shstr, *symdata, *strtab = NULL, *xindex = NULL;
    uint64_t shstr_len, symlen = 0, strtab_len = 0, xindex_len = 0;
    struct shdr h, sh;
    int rc = 0;
    section_names(ko, &shstr, &shstr_len);
    for (uint64_t i = 0; i < shnum && symtab == UINT64_MAX; i++) {
        read_shdr(ko, i, &h);
        if (h.type == SHT_SYMTAB)
            symtab = i;
    }
    int32_t *local = malloc((shnum ? shnum : 1) * sizeof *local);
    uint8_t *used = calloc(shnum ? shnum : 1, 1);
    if (!local || !used)
        rc = -1;
    if (!rc && symtab != UINT64_MAX) {
        read_shdr(ko, symtab, &sh);
        contents(ko, &sh, &symdata, &symlen);
        if (sh.link < shnum) {
            read_shdr(ko, sh.link, &h);
            contents(ko, &h, &strtab, &strtab_len);
        }
        for (uint64_t i = 0; i < shnum; i++) { /* the symbols' extended section indices */
            read_shdr(ko, i, &h);
            if (h.type == SHT_SYMTAB_SHNDX && h.link == symtab) {
                contents(ko, &h, &xindex, &xindex_len);
                break;
            }
        }
        uint64_t esz = ko->is64 ? 24 : 16, count = symlen / esz;
        if (!(ko->sym = malloc((count ? count : 1) * sizeof *ko->sym)))
            rc = -1;
        for (uint64_t i = 0; !rc && i < count; i++) {
            uint64_t at = (uint64_t)(symdata - ko->data) + i * esz, st_name, value, size, shndx;
            uint8_t info;
            st_name = get(ko, at, 4);
            if (ko->is64) {
                info = ko->data[at + 4];
                shndx = get(ko, at + 6, 2);
                value = get(ko, at + 8, 8);
                size = get(ko, at + 16, 8);
            } else {
                value = get(ko, at + 4, 4);
                size = get(ko, at + 8, 4);
                info = ko->data[at + 12];
                shndx = get(ko, at + 14, 2);
            }
            if (shndx == SHN_UNDEF || (info & 0xF) == STT_SECTION || (info & 0xF) == STT_FILE)
                continue;
            if (shndx >= SHN_LORESERVE) {
                if (shndx != SHN_XINDEX || !xindex)
                    continue; /* SHN_ABS, SHN_COMMON: in no section */
                if (4 * i + 4 > xindex_len) {
                    rc = refuse_elf(why, path, "corrupt ELF module (section index table shorter "
                                    "than its symbols)");
                    break;
                }
                shndx = get(ko, (uint64_t)(xindex - ko->data) + 4 * i, 4);
            }
            if (shndx >= shnum) {
                rc = refuse_elf(why, path, "corrupt symbol table (section index %" PRIu64 ")",
                                shndx);
                break;
            }
            uint32_t len;
            const char *name = cstr(strtab, strtab_len, st_name, &len);
            /* mapping symbols and .L labels never answer (R46): not kept */
            if (shndx == SHN_UNDEF || !len || name[0] == '$' || (len >= 2 && !memcmp(name, ".L", 2)))
                continue;
            struct ko_sym *s = &ko->sym[ko->nsym++];
            s->name = name;
            s->len = len;
            s->sec = (uint32_t)shndx; /* an ELF index until renumbered below */
            s->value = value;
            s->size = size;
            s->info = info;
            used[shndx] = 1;
        }
    }
    /* Kept sections: allocated with a size, or holding a kept symbol. */
    if (!rc && !(ko->sec = malloc((shnum ? shnum : 1) * sizeof *ko->sec)))
        rc = -1;
    for (uint64_t i = 1; !rc && i < shnum; i++) {
        read_shdr(ko, i, &h);
        local[i] = NO;
        if (!((h.flags & SHF_ALLOC && h.size) || used[i]))
            continue;
        uint32_t len;
        const char *name = cstr(shstr, shstr_len, h.name, &len);
        struct ko_sec *s = &ko->sec[ko->nsec];
        if (!(s->name = malloc((size_t)len + 1))) {
            rc = -1;
            break;
        }
        memcpy(s->name, name, len);
        s->name[len] = 0;
        s->size = h.size;
        local[i] = (int32_t)ko->nsec++;
    }
    for (uint32_t k = 0; !rc && k < ko->nsym; k++)
        ko->sym[k].sec = (uint32_t)local[ko->sym[k].sec];
    free(local);
    free(used);
    return rc;
}

/* The contents of the first section called NAME
 * (none: an empty span). */
static void section_named(const struct ko *ko, const char *name, const unsigned char **p,
                          uint64_t *len)
{
    const unsigned char *names;
    uint64_t names_len;
    size_t want = strlen(name);
    struct shdr h;
    *p = ko->data;
    *len = 0;
    section_names(ko, &names, &names_len);
    for (uint64_t i = 0; i < ko->nsh; i++) {
        uint32_t n;
        read_shdr(ko, i, &h);
        const char *s = cstr(names, names_len, h.name, &n);
        if (n == want && !memcmp(s, name, want)) {
            contents(ko, &h, p, len);
            return;
        }
    }
}

/* One .ko from the file's bytes (KO->data, KO->n): its ELF checked and cut
 * where it ends (R43), the cut checked afresh (one shorter than a header is
 * refused there), its symbols and sections read, and the srcversion and
 * build-id that R45 compares with the kernel's.  0, 1 (refused: *WHY) or
 * -1 (out of memory). */
static int ko_read(struct ko *ko, const char *path, char **why)
{
    int rc = elf_open(ko, path, why);
    if (!rc)
        rc = elf_cut(ko, path, why);
    if (!rc)
        rc = elf_open(ko, path, why);
    if (!rc)
        rc = ko_scan(ko, path, why);
    if (rc)
        return rc;
    const unsigned char *p;
    uint64_t len;
    section_named(ko, ".modinfo", &p, &len);
    for (uint64_t a = 0; a < len;) { /* the last srcversion= wins */
        const unsigned char *z = memchr(p + a, 0, len - a);
        uint64_t e = z ? (uint64_t)(z - p) : len;
        if (e - a >= 11 && !memcmp(p + a, "srcversion=", 11)) {
            free(ko->srcversion);
            if (!(ko->srcversion = malloc(e - a - 10)))
                return -1;
            memcpy(ko->srcversion, p + a + 11, e - a - 11);
            ko->srcversion[e - a - 11] = 0;
        }
        a = e + 1;
    }
    section_named(ko, ".note.gnu.build-id", &p, &len);
    kms_notes_build_id(p, len, ko->big, ko->build_id, sizeof ko->build_id);
    return 0;
}

/* ------------------------------------------------------------ the kernel's word */

/* What the kernel says of one loaded module in /sys/module/NAME (R44, R45). */
struct live {
    int has_sysfs;
    char *srcversion;           /* NULL: unreadable or absent */
    char build_id[BUILD_ID_HEX]; /* "": none */
    size_t nsec;
    char **sec_name;
    uint64_t *sec_addr;
};

static void live_free(struct live *l)
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
static int read_live(struct live *l, const char *sysfs_root, const char *name)
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
    if (path && !slurp(path, &note, &n)) {
        kms_notes_build_id(note, n, 0, l->build_id, sizeof l->build_id);
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
        char *file = join(dir, de->d_name), *value = file ? read_text(file) : NULL;
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

static const uint64_t *live_section(const struct live *l, const char *name)
{
    for (size_t k = l->nsec; k-- > 0;) /* of two of a name, the one read last */
        if (!strcmp(l->sec_name[k], name))
            return &l->sec_addr[k];
    return NULL;
}

/* /proc/modules: the core (address, size) of each module named in kallsyms,
 * which bounds its lines' answers (R30). */
static void proc_modules_cores(struct kms_loaded *out, const char *path,
                               const char *const *mod_name)
{
    unsigned char *text;
    size_t n;
    if (!path || slurp(path, &text, &n))
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

/* ------------------------------------------------------------ matching */

/* A name's hash, a word at a time (names are read only within their N
 * bytes: a .ko's last string may end at the end of its mapping). */
static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0xCBF29CE484222325u ^ n, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15u;
        h ^= h >> 32;
    }
    w = 0;
    for (size_t k = 0; k < n; k++)
        w |= (uint64_t)(unsigned char)p[k] << (8 * k);
    h = (h ^ w) * 0x9E3779B97F4A7C15u;
    h = (h ^ (h >> 32)) * 0xFF51AFD7ED558CCDu;
    return h ^ (h >> 29);
}

/* The distinct names of a module's .ko symbols and kallsyms lines. */
struct names {
    size_t mask, n;
    uint32_t *slot; /* id + 1, 0: empty */
    const char **ptr;
    uint32_t *len;
};

static uint32_t name_id(struct names *t, const char *p, uint32_t len)
{
    size_t k = (size_t)hash_bytes(p, len) & t->mask;
    for (;; k = (k + 1) & t->mask) {
        uint32_t id = t->slot[k];
        if (!id)
            break;
        if (t->len[id - 1] == len && !memcmp(t->ptr[id - 1], p, len))
            return id - 1;
    }
    t->ptr[t->n] = p;
    t->len[t->n] = len;
    t->slot[k] = (uint32_t)++t->n;
    return (uint32_t)(t->n - 1);
}

static size_t table_size(size_t n)
{
    size_t s = 16;
    while (s < 2 * n + 1)
        s *= 2;
    return s;
}

/* The (name, address) pairs of a module's kallsyms lines, for the question
 * "is a line of this name at this address" (R44's shape, R45's checks),
 * filled at the first question: a module that matches asks few, as each
 * line's own .ko symbol answers for itself. */
struct pairs {
    size_t mask, n;
    int filled;
    uint32_t *slot; /* line + 1 */
    const uint32_t *lid;
    const uint64_t *addr;
};

static size_t pair_hash(uint32_t id, uint64_t addr)
{
    uint64_t h = (addr ^ ((uint64_t)id * 0x9E3779B97F4A7C15u)) * 0xFF51AFD7ED558CCDu;
    return (size_t)(h ^ (h >> 32));
}

static int pair_has(struct pairs *p, uint32_t id, uint64_t addr)
{
    for (size_t i = 0; !p->filled && i < p->n; i++) {
        size_t k = pair_hash(p->lid[i], p->addr[i]) & p->mask;
        while (p->slot[k])
            k = (k + 1) & p->mask;
        p->slot[k] = (uint32_t)i + 1;
    }
    p->filled = 1;
    for (size_t k = pair_hash(id, addr) & p->mask;; k = (k + 1) & p->mask) {
        uint32_t i = p->slot[k];
        if (!i)
            return 0;
        if (p->lid[i - 1] == id && p->addr[i - 1] == addr)
            return 1;
    }
}

struct vote {
    uint32_t sec, seq;
    uint64_t base;
};

static int vote_cmp(const void *a, const void *b)
{
    const struct vote *x = a, *y = b;
    if (x->sec != y->sec)
        return x->sec < y->sec ? -1 : 1;
    if (x->base != y->base)
        return x->base < y->base ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* One module's scratch: its lines, the .ko, name ids, chains. */
struct match {
    const struct ko *ko;
    size_t nl;
    const char **lname;
    uint32_t *llen;
    uint64_t *addr;
    uint32_t *lid, *sid;        /* name id per line, per symbol */
    uint32_t *nsyms_of, *first_sym, *next_sym, *last_sym;
    uint32_t *nlines_of, *first_line, *next_line, *last_line;
    uint32_t *lorder, norder;   /* ids in first-appearance order among non-mapping lines */
    uint8_t *has_base, *shown;
    uint8_t *by_kernel;         /* per section: its base is sysfs' */
    uint64_t *base;
    int32_t *line_sym;          /* the .ko symbol each line is, -1 */
    uint8_t *sym_is_line;       /* per symbol: some line_sym is it */
    struct names names;
    struct pairs pairs;
};

#define END UINT32_MAX

static void match_free(struct match *m)
{
    free(m->lid);
    free(m->sid);
    free(m->nsyms_of);
    free(m->first_sym);
    free(m->next_sym);
    free(m->last_sym);
    free(m->nlines_of);
    free(m->first_line);
    free(m->next_line);
    free(m->last_line);
    free(m->lorder);
    free(m->has_base);
    free(m->shown);
    free(m->by_kernel);
    free(m->base);
    free(m->line_sym);
    free(m->sym_is_line);
    free(m->names.slot);
    free(m->names.ptr);
    free(m->names.len);
    free(m->pairs.slot);
}

static int match_init(struct match *m)
{
    size_t nl = m->nl, ns = m->ko->nsym, nn = nl + ns, nsec = m->ko->nsec;
    m->names.mask = table_size(nn) - 1;
    m->pairs.mask = table_size(nl) - 1;
#define A(f, n) (m->f = calloc((n) ? (n) : 1, sizeof *m->f)) == NULL
    if (A(lid, nl) || A(sid, ns) || A(nsyms_of, nn) || A(first_sym, nn) || A(next_sym, ns) ||
        A(last_sym, nn) || A(nlines_of, nn) || A(first_line, nn) || A(next_line, nl) ||
        A(last_line, nn) || A(lorder, nn) || A(has_base, nsec) || A(shown, nsec) || A(by_kernel, nsec) ||
        A(base, nsec) || A(line_sym, nl) || A(sym_is_line, ns) ||
        A(names.slot, m->names.mask + 1) || A(names.ptr, nn) || A(names.len, nn) ||
        A(pairs.slot, m->pairs.mask + 1))
        return -1;
#undef A
    for (size_t s = 0; s < ns; s++) {
        uint32_t id = m->sid[s] = name_id(&m->names, m->ko->sym[s].name, m->ko->sym[s].len);
        m->next_sym[s] = END;
        if (m->nsyms_of[id]++)
            m->next_sym[m->last_sym[id]] = (uint32_t)s;
        else
            m->first_sym[id] = (uint32_t)s;
        m->last_sym[id] = (uint32_t)s;
    }
    m->pairs.lid = m->lid;
    m->pairs.addr = m->addr;
    m->pairs.n = nl;
    /* Kallsyms lists a module's symbols in its symbol table's order: a
     * line is most often named as the .ko symbol after the last line's, a
     * name compared there in passing, not looked up. */
    const struct ko_sym *sym = m->ko->sym;
    for (size_t i = 0, next = 0; i < nl; i++) {
        uint32_t id;
        if (next < ns && sym[next].len == m->llen[i] &&
            !memcmp(sym[next].name, m->lname[i], m->llen[i])) {
            id = m->sid[next++];
        } else {
            id = name_id(&m->names, m->lname[i], m->llen[i]);
            if (m->nsyms_of[id])
                next = m->first_sym[id] + 1;
        }
        m->lid[i] = id;
        m->line_sym[i] = NO;
        m->next_line[i] = END;
        if (kms_is_mapping_symbol(m->lname[i], m->llen[i]))
            continue;
        if (m->nlines_of[id]++) {
            m->next_line[m->last_line[id]] = (uint32_t)i;
        } else {
            m->first_line[id] = (uint32_t)i;
            m->lorder[m->norder++] = id;
        }
        m->last_line[id] = (uint32_t)i;
    }
    return 0;
}

/* Whether a line of name ID is at ADDR: a few lines of
 * the name are walked, more asked of the table (a mapping symbol's lines
 * are in no chain: always asked). */
#define FEW_LINES 8
static int line_at(struct match *m, uint32_t id, uint64_t addr)
{
    uint32_t n = m->nlines_of[id];
    if (n > FEW_LINES || kms_is_mapping_symbol(m->names.ptr[id], m->names.len[id]))
        return pair_has(&m->pairs, id, addr);
    for (uint32_t i = n ? m->first_line[id] : END; i != END; i = m->next_line[i])
        if (m->addr[i] == addr)
            return 1;
    return 0;
}

static uint64_t at_base(const struct match *m, uint32_t s)
{
    return m->base[m->ko->sym[s].sec] + m->ko->sym[s].value;
}

/* match_module's word for out of memory: no allocation, so that it cannot
 * fail too (a NULL reads as "matched", and code after the failure would
 * use what was not allocated). */
static char out_of_memory[1];

/* A reason for refusing a module (format's), out_of_memory when it could not be made. */
static char *refusal(char *why)
{
    return why ? why : out_of_memory;
}

/* R44, R45: NULL when matched (M->line_sym, M->base and
 * M->shown say how), else why the file is not the loaded module (malloc'd,
 * or out_of_memory). */
static char *match_module(struct match *m, const struct live *live)
{
    const struct ko *ko = m->ko;
    int differ = (!live->srcversion) != (!ko->srcversion) ||
                 (live->srcversion && ko->srcversion && strcmp(live->srcversion, ko->srcversion));
    int either = (live->srcversion && live->srcversion[0]) || (ko->srcversion && ko->srcversion[0]);
    if (live->has_sysfs && differ && either)
        return refusal(
            kmsi_format("srcversion %s, the loaded module's is %s",
                   ko->srcversion && ko->srcversion[0] ? ko->srcversion : "(none)",
                   live->srcversion && live->srcversion[0] ? live->srcversion : "(none)"));
    if (live->build_id[0] && ko->build_id[0] && strcmp(live->build_id, ko->build_id))
        return refusal(
            kmsi_format("build-id %s, the loaded module's is %s", ko->build_id, live->build_id));
    if (match_init(m))
        return out_of_memory;
    size_t absent = 0;
    uint32_t first_absent = 0;
    for (uint32_t k = 0; k < m->norder; k++)
        if (!m->nsyms_of[m->lorder[k]] && !absent++)
            first_absent = m->lorder[k];
    if (absent)
        return refusal(
            kmsi_format("%zu of the module's kallsyms names are not in the file (e.g. %.*s)", absent,
                   (int)m->names.len[first_absent], m->names.ptr[first_absent]));
    /* The kernel's own word: each section's load address. */
    for (uint32_t k = 0; k < ko->nsec; k++) {
        const uint64_t *a = live_section(live, ko->sec[k].name);
        uint32_t count = 0;
        for (uint32_t j = 0; j < ko->nsec && count < 2; j++)
            count += !strcmp(ko->sec[j].name, ko->sec[k].name);
        if (a && count == 1) {
            m->base[k] = *a;
            m->has_base[k] = m->by_kernel[k] = 1;
        }
    }
    /* Anchors: names once in the file and once among the lines; each
     * section's base the one most of them vote for (ties: the highest). */
    struct vote *votes = malloc((m->norder ? m->norder : 1) * sizeof *votes);
    size_t nv = 0;
    if (!votes)
        return out_of_memory;
    for (uint32_t k = 0; k < m->norder; k++) {
        uint32_t id = m->lorder[k];
        if (m->nsyms_of[id] == 1 && m->nlines_of[id] == 1) {
            uint32_t s = m->first_sym[id];
            votes[nv].sec = ko->sym[s].sec;
            votes[nv].seq = (uint32_t)nv;
            votes[nv].base = m->addr[m->first_line[id]] - ko->sym[s].value;
            nv++;
        }
    }
    /* per section, in the order of its first vote: its votes together
     * (a counting sort by section, which keeps their order), its base the
     * one most of them vote for, and the wrong votes */
    uint32_t nsec = ko->nsec, nt = 0;
    size_t *from = calloc((size_t)nsec + 1, sizeof *from);
    size_t *fill = malloc((nsec ? nsec : 1) * sizeof *fill);
    uint32_t *order = malloc((nsec ? nsec : 1) * sizeof *order);
    struct vote *grouped = malloc((nv ? nv : 1) * sizeof *grouped);
    char *why = NULL;
    if (!from || !fill || !order || !grouped)
        why = out_of_memory;
    for (size_t v = 0; !why && v < nv; v++)
        if (!from[votes[v].sec + 1]++)
            order[nt++] = votes[v].sec;
    for (uint32_t sec = 0; !why && sec < nsec; sec++) {
        fill[sec] = from[sec];
        from[sec + 1] += from[sec];
    }
    for (size_t v = 0; !why && v < nv; v++)
        grouped[fill[votes[v].sec]++] = votes[v];
    for (uint32_t k = 0; k < nt && !why; k++) {
        uint32_t sec = order[k];
        struct vote *g = grouped + from[sec];
        size_t total = from[sec + 1] - from[sec], best_count = 0;
        uint64_t best = g[0].base;
        size_t same = 1;
        while (same < total && g[same].base == g[0].base)
            same++;
        if (same < total) /* votes that disagree: by base (then vote), to count each */
            qsort(g, total, sizeof *g, vote_cmp);
        for (size_t b = 0, c; b < total; b = c) {
            for (c = b; c < total && g[c].base == g[b].base; c++)
                ;
            if (c - b >= best_count) { /* ascending bases: a tie goes to the higher */
                best_count = c - b;
                best = g[b].base;
            }
        }
        if (!m->has_base[sec]) {
            m->base[sec] = best;
            m->has_base[sec] = 1;
        }
        size_t right = 0;
        for (size_t v = 0; v < total; v++)
            right += g[v].base == m->base[sec];
        if (right != total)
            why = refusal(
                kmsi_format("%zu of its unique symbols in %s are not where kallsyms shows them",
                       total - right, ko->sec[sec].name));
    }
    free(votes);
    free(grouped);
    free(from);
    free(fill);
    free(order);
    if (why)
        return why;
    /* Shape: a section without anchors is placed where all of its symbols
     * that kallsyms names land on lines of their names, if exactly one
     * base does that. */
    uint8_t *todo = calloc(ko->nsec ? ko->nsec : 1, 1);
    if (!todo)
        return out_of_memory;
    for (uint32_t s = 0; s < ko->nsym; s++)
        if (!m->has_base[ko->sym[s].sec] && m->nlines_of[m->sid[s]])
            todo[ko->sym[s].sec] = 1;
    for (uint32_t s0 = 0; s0 < ko->nsym; s0++) {
        uint32_t sec = ko->sym[s0].sec;
        if (todo[sec] != 1)
            continue;
        todo[sec] = 2; /* its first member: the section's turn */
        uint32_t pivot = END;
        for (uint32_t s = s0; s < ko->nsym; s++)
            if (ko->sym[s].sec == sec && m->nlines_of[m->sid[s]] &&
                (pivot == END || m->nlines_of[m->sid[s]] < m->nlines_of[m->sid[pivot]]))
                pivot = s;
        uint64_t fit = 0;
        int fits = 0;
        for (uint32_t i = m->first_line[m->sid[pivot]]; i != END && fits >= 0; i = m->next_line[i]) {
            uint64_t b = m->addr[i] - ko->sym[pivot].value;
            int all = 1;
            for (uint32_t s = s0; s < ko->nsym && all; s++)
                if (ko->sym[s].sec == sec && m->nlines_of[m->sid[s]])
                    all = line_at(m, m->sid[s], b + ko->sym[s].value);
            if (all) {
                if (fits && b != fit)
                    fits = -1; /* two bases fit: none is placed */
                else {
                    fit = b;
                    fits = 1;
                }
            }
        }
        if (fits == 1) {
            m->base[sec] = fit;
            m->has_base[sec] = 1;
        }
    }
    free(todo);
    /* Every line of a name the file has in a placed section is one of those
     * symbols (the first of them at its address) ... */
    for (uint32_t k = 0; k < m->norder; k++) {
        uint32_t id = m->lorder[k];
        for (uint32_t i = m->first_line[id]; i != END; i = m->next_line[i]) {
            int placed = 0;
            for (uint32_t s = m->first_sym[id]; s != END && m->line_sym[i] == NO; s = m->next_sym[s]) {
                if (!m->has_base[ko->sym[s].sec])
                    continue;
                placed = 1;
                if (at_base(m, s) == m->addr[i])
                    m->line_sym[i] = (int32_t)s;
            }
            if (m->line_sym[i] == NO && placed)
                return refusal(kmsi_format("its %.*s is not at 0x%" PRIx64 ", where kallsyms shows it",
                                      (int)m->llen[i], m->lname[i], m->addr[i]));
        }
    }
    /* The sections kallsyms shows: one of their symbols (of a name some
     * line has) is where kallsyms says -- a line's own symbol is. */
    for (size_t i = 0; i < m->nl; i++)
        if (m->line_sym[i] != NO) {
            m->sym_is_line[m->line_sym[i]] = 1;
            m->shown[ko->sym[m->line_sym[i]].sec] = 1;
        }
    for (uint32_t s = 0; s < ko->nsym; s++) {
        uint32_t sec = ko->sym[s].sec;
        if (m->has_base[sec] && !m->shown[sec] && m->nlines_of[m->sid[s]] &&
            line_at(m, m->sid[s], at_base(m, s)))
            m->shown[sec] = 1;
    }
    /* ... and every symbol of a section that kallsyms shows is a line. */
    for (uint32_t s = 0; s < ko->nsym; s++)
        if (m->shown[ko->sym[s].sec] && !m->sym_is_line[s] &&
            !line_at(m, m->sid[s], at_base(m, s)))
            return refusal(kmsi_format("its %.*s (%s) is not in kallsyms", (int)ko->sym[s].len,
                                  ko->sym[s].name, ko->sec[ko->sym[s].sec].name));
    return NULL;
}

/* ------------------------------------------------------------ all modules */

/* Add a module's outcome (FILE, REASON, WARNING now owned by OUT); -1 when
 * a refusal's text could not be made (out of memory). */
static int add_status(struct kms_loaded *out, const char *name, char *file, uint8_t status,
                      size_t lines, char *reason, char *warning)
{
    struct kms_module *st = &out->status[out->nstatus++];
    st->size = sizeof *st;
    st->name = name;
    st->file = file;
    st->status = status;
    st->lines = lines;
    st->sized = 0;
    st->reason = reason;
    st->warning = warning;
    return (status == KMS_MODULE_MATCHED || status == KMS_MODULE_MISSING ||
            status == KMS_MODULE_DEFERRED || (reason && warning)) ? 0 : -1;
}

/* The section count of every matched .ko is unknown until read: extents
 * grow as needed. */
static int reserve_extents(struct kms_loaded *out, size_t *cap, size_t more)
{
    if (out->nextent + more <= *cap)
        return 0;
    size_t nc = (*cap ? *cap * 2 : 256) + more;
    struct kms_ko_extent *nx = realloc(out->extent, nc * sizeof *nx);
    if (!nx)
        return -1;
    out->extent = nx;
    *cap = nc;
    return 0;
}

/* Whether a section NAME stays in the module's core after its init: the
 * kernel frees .init* (kernel/module/main.c module_init_layout_section()),
 * and .exit* too when built without CONFIG_MODULE_UNLOAD; sysfs keeps
 * listing them, so one kallsyms does not show is not taken as the
 * module's (R44).  (The .symtab and .strtab sysfs lists, in init memory
 * too, are not allocated in the file, so ko_read() keeps no section of them.) */
static int in_core(const char *name)
{
    return strncmp(name, ".init", 5) != 0 && strncmp(name, ".exit", 5) != 0;
}

/* Read and match one module's file FULL (PATH relative); its outcome
 * added to OUT->status, its lines' answers to OUT->line.  -1: out of memory. */
static int one_module(struct kms_loaded *out, size_t *ext_cap, struct kms_decompressors *dz,
                      const char *name, char *path, const char *full, const struct live *live,
                      const struct kms_mline *lines, const size_t *idx, size_t nl)
{
    struct stat st;
    struct ko ko;
    int e;
    memset(&ko, 0, sizeof ko);
    if (stat(full, &st) != 0) {
        char *why = kmsi_format("cannot read %s: %s", full, strerror(errno));
        return add_status(out, name, path, KMS_MODULE_REFUSED, nl, why,
                          why ? kmsi_format("module %s: %s; its symbols stay unsized", name, why) : NULL);
    }
    if ((e = map_ko(full, &ko)) != 0) {
        if (e == ENOMEM)
            return free(path), -1;
        char *why = kmsi_format("cannot read module %s: %s", full, strerror(e));
        return add_status(out, name, path, KMS_MODULE_REFUSED, nl, why,
                          why ? kmsi_format("module %s: %s; its symbols stay unsized", name, why) : NULL);
    }
    char *why = NULL;
    const char *kind = kmsi_compression(full);
    if (kind) { /* R43: the decompressed file is the one read */
        unsigned char *plain;
        size_t len;
        int z = kmsi_decompress(dz, full, kind, ko.data, ko.n, &plain, &len, &why);
        ko_free(&ko);
        memset(&ko, 0, sizeof ko);
        if (z < 0)
            return free(path), -1;
        if (z)
            return add_status(out, name, path,
                              z == 2 ? KMS_MODULE_UNSUPPORTED : KMS_MODULE_REFUSED, nl, why,
                              kmsi_format("module %s: %s; its symbols stay unsized", name, why));
        ko.data = plain;
        ko.n = len;
    }
    int refused = ko_read(&ko, full, &why);
    if (refused < 0) {
        ko_free(&ko);
        return free(path), -1;
    }
    if (refused) {
        ko_free(&ko);
        return add_status(out, name, path, KMS_MODULE_REFUSED, nl, why,
                          kmsi_format("module %s: %s; its symbols stay unsized", name, why));
    }
    struct match m;
    memset(&m, 0, sizeof m);
    m.ko = &ko;
    m.nl = nl;
    m.lname = malloc((nl ? nl : 1) * sizeof *m.lname);
    m.llen = malloc((nl ? nl : 1) * sizeof *m.llen);
    m.addr = malloc((nl ? nl : 1) * sizeof *m.addr);
    if (!m.lname || !m.llen || !m.addr)
        why = out_of_memory;
    for (size_t k = 0; !why && k < nl; k++) {
        m.lname[k] = lines[idx[k]].name;
        m.llen[k] = lines[idx[k]].name_len;
        m.addr[k] = lines[idx[k]].addr;
    }
    if (!why)
        why = match_module(&m, live);
    int bad = 0;
    if (why == out_of_memory) {
        free(path);
        bad = -1;
    } else if (why) {
        bad = add_status(out, name, path, KMS_MODULE_REFUSED, nl, why,
                         kmsi_format("module %s: %s is not the loaded module (%s); its symbols stay "
                                "unsized", name, full, why));
    } else {
        /* matched: each line its symbol's answer; an extent each section
         * kallsyms shows, and each that sysfs places in the module's core
         * (R44: a text-only kernel shows no data line of a module, yet the
         * .rodata, .data and .bss are the module's) */
        uint32_t k0 = (uint32_t)out->nko;
        size_t sized = 0;
        int32_t *extent_of = malloc((ko.nsec ? ko.nsec : 1) * sizeof *extent_of);
        if (!extent_of || reserve_extents(out, ext_cap, ko.nsec)) {
            free(path);
            bad = -1;
        } else {
            add_status(out, name, path, KMS_MODULE_MATCHED, nl, NULL, NULL);
        }
        for (uint32_t sec = 0; !bad && sec < ko.nsec; sec++) {
            extent_of[sec] = NO;
            if (!m.shown[sec] && !(m.by_kernel[sec] && in_core(ko.sec[sec].name)))
                continue;
            struct kms_ko_extent *x = &out->extent[out->nextent];
            x->start = m.base[sec];
            x->end = m.base[sec] + ko.sec[sec].size;
            x->ko = k0;
            extent_of[sec] = (int32_t)out->nextent++;
        }
        for (size_t k = 0; !bad && k < nl; k++) {
            int32_t s = m.line_sym[k];
            if (s < 0)
                continue;
            const struct ko_sym *sym = &ko.sym[s];
            struct kms_ko_line *r = &out->line[idx[k]].ko;
            uint8_t bind = sym->info >> 4;
            r->size = (int64_t)sym->size;
            r->typed = (sym->info & 0xF) != 0;
            r->binding = bind == STB_GNU_UNIQUE ? 1 : bind;
            r->extent = extent_of[sym->sec];
            sized += sym->size > 0;
        }
        if (!bad) {
            out->status[out->nstatus - 1].sized = sized;
            out->ko_status[out->nko++] = (uint32_t)(out->nstatus - 1);
        }
        free(extent_of);
    }
    free(m.lname);
    free(m.llen);
    free(m.addr);
    match_free(&m);
    ko_free(&ko);
    return bad;
}

int kms_modules_match(struct kms_loaded *out, const struct kms_mline *lines, size_t n,
                      const char *const *mod_name, uint32_t nmods, const struct kms_sources *src,
                      kms_error *err)
{
    struct wanted w = {NULL, 0, NULL, NULL};
    size_t *count = NULL, *idx = NULL, ext_cap = 0;
    struct kms_decompressors dz;
    int rc = KMS_OK;
    memset(out, 0, sizeof *out);
    memset(&dz, 0, sizeof dz);
    out->nmods = nmods;
    out->nlines = n;
    const char **wanted = malloc((nmods ? nmods : 1) * sizeof *wanted);
    out->line = malloc((n ? n : 1) * sizeof *out->line);
    out->core_known = calloc(nmods ? nmods : 1, 1);
    out->core_start = calloc(nmods ? nmods : 1, sizeof *out->core_start);
    out->core_size = calloc(nmods ? nmods : 1, sizeof *out->core_size);
    out->status = calloc(nmods ? nmods : 1, sizeof *out->status);
    out->ko_status = calloc(nmods ? nmods : 1, sizeof *out->ko_status);
    count = calloc((size_t)nmods + 1, sizeof *count);
    idx = malloc((n ? n : 1) * sizeof *idx);
    if (!wanted || !out->line || !out->core_known || !out->core_start || !out->core_size ||
        !out->status || !out->ko_status || !count || !idx)
        goto nomem;
    for (size_t k = 0; k < n; k++) {
        out->line[k].line = lines[k].line;
        out->line[k].ko.size = NO;
        out->line[k].ko.extent = NO;
        out->line[k].ko.typed = out->line[k].ko.binding = 0;
    }
    /* each module's lines, in kallsyms order: idx[count[m] .. count[m + 1]) */
    for (size_t k = 0; k < n; k++)
        count[lines[k].module + 1]++;
    for (uint32_t m = 0; m < nmods; m++)
        count[m + 1] += count[m];
    for (size_t k = 0, *at = count; k < n; k++)
        idx[at[lines[k].module]++] = k;
    for (uint32_t m = nmods; m > 0; m--)
        count[m] = count[m - 1];
    count[0] = 0;
    for (uint32_t m = 1; m < nmods; m++)
        if (!kms_is_pseudo_module(mod_name[m]))
            wanted[w.n++] = mod_name[m];
    w.name = wanted;
    w.path = calloc(w.n ? w.n : 1, sizeof *w.path);
    w.rank = calloc(w.n ? w.n : 1, sizeof *w.rank);
    if (!w.path || !w.rank)
        goto nomem;
    proc_modules_cores(out, src->proc_modules, mod_name);
    if (src->modules_dir && w.n && (rc = find_module_files(&w, src->modules_dir, err)) != KMS_OK)
        goto done;
    for (uint32_t m = 1, k = 0; m < nmods; m++) {
        if (kms_is_pseudo_module(mod_name[m]))
            continue;
        struct live live;
        size_t nl = count[m + 1] - count[m];
        char *path = w.path[k++], *full = NULL;
        if (read_live(&live, src->sysfs_root, mod_name[m]))
            goto nomem_live;
        if (!out->core_known[m]) { /* /sys/module/NAME/coresize from its .text */
            char *file = src->sysfs_root && live.has_sysfs
                ? kmsi_format("%s/module/%s/coresize", src->sysfs_root, mod_name[m]) : NULL;
            char *coresize = file ? read_text(file) : NULL;
            const uint64_t *text = live_section(&live, ".text");
            uint64_t size;
            if (coresize && text && !parse_dec(coresize, &size)) {
                out->core_known[m] = 1;
                out->core_start[m] = *text;
                out->core_size[m] = size;
            }
            free(file);
            free(coresize);
        }
        w.path[k - 1] = NULL; /* owned by the status from here */
        int deferred = src->defer && path;
        for (size_t r = 0; deferred && r < src->nread; r++)
            deferred = strcmp(src->read[r], mod_name[m]) != 0;
        if (!path || deferred) {
            if (add_status(out, mod_name[m], path, path ? KMS_MODULE_DEFERRED : KMS_MODULE_MISSING,
                           nl, NULL, NULL))
                goto nomem_live;
        } else if (!(full = join(src->modules_dir, path))) {
            free(path);
            goto nomem_live;
        } else if (one_module(out, &ext_cap, &dz, mod_name[m], path, full, &live, lines,
                              idx + count[m], nl)) {
            free(full);
            goto nomem_live;
        }
        free(full);
        live_free(&live);
        continue;
    nomem_live:
        live_free(&live);
        goto nomem;
    }
    goto done;
nomem:
    rc = oom(err);
done:
    kmsi_decompressors_close(&dz);
    for (size_t k = 0; w.path && k < w.n; k++)
        free(w.path[k]);
    free(w.path);
    free(w.rank);
    free(wanted);
    free(count);
    free(idx);
    if (rc != KMS_OK)
        kms_modules_free(out);
    return rc;
}

void kms_modules_free(struct kms_loaded *m)
{
    for (size_t k = 0; m->status && k < m->nstatus; k++) {
        free((char *)m->status[k].file);
        free((char *)m->status[k].reason);
        free((char *)m->status[k].warning);
    }
    free(m->status);
    free(m->line);
    free(m->extent);
    free(m->ko_status);
    free(m->core_known);
    free(m->core_start);
    free(m->core_size);
    memset(m, 0, sizeof *m);
}

int kms_modules_outside_core(const struct kms_loaded *m, uint32_t mod, uint64_t addr)
{
    if (mod >= m->nmods || !m->core_known[mod])
        return 0;
    uint64_t start = m->core_start[mod], size = m->core_size[mod];
    return addr < start || addr - start >= size;
}

int kms_modules_core_last(const struct kms_loaded *m, uint32_t mod, uint64_t *last)
{
    if (mod >= m->nmods || !m->core_known[mod])
        return 0;
    uint64_t start = m->core_start[mod], size = m->core_size[mod];
    *last = size == 0 ? start - 1 : size - 1 <= UINT64_MAX - start ? start + size - 1 : UINT64_MAX;
    return 1;
}
