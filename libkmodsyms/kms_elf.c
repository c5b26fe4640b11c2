// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: one loaded module's .ko read (docs/resolver.md R43, R45):
 * ELF32 and ELF64 of both byte orders, its header checked, the file cut
 * where the ELF ends (a module signature may follow), and the symbols and
 * sections that matching reads (kms_match.c), with the srcversion and
 * build-id that R45 compares with the kernel's.  The library's only ELF
 * reader; its words for a fault are those of the build's
 * (src/kmodsyms/scan/elf/elffile.py).
 */
#include "kms_ko.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
#define NT_GNU_BUILD_ID 3u

/* What the refusal of a damaged .ko tells the user to do (R45). */
#define KO_REMEDY "reinstall it"

void kmsi_notes_build_id(const unsigned char *d, size_t n, int big_endian, char *hex, size_t cap)
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

void kmsi_ko_free(struct kmsi_ko *ko)
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
int kmsi_map_ko(const char *path, struct kmsi_ko *ko)
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
    return kmsi_slurp(path, &ko->data, &ko->n);
}

static int host_little_endian(void)
{
    const union { uint16_t word; unsigned char byte[2]; } one = {1};
    return one.byte[0];
}

/* The WIDTH-byte number at OFF in the file's byte order: a plain load
 * when that is the host's little-endian order (a .ko is most often read
 * where it was built), else byte by byte. */
static inline uint64_t get(const struct kmsi_ko *ko, uint64_t off, int width)
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
static void read_shdr(const struct kmsi_ko *ko, uint64_t i, struct shdr *h)
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
static int headers_fit(const struct kmsi_ko *ko, uint64_t count)
{
    return ko->shoff <= ko->n && count <= (ko->n - ko->shoff) / ko->entsize;
}

/* The ELF header of the file's bytes (KO->data, KO->n) checked, and its
 * section header table found (extended numbering read from section 0) and
 * in the file.  A fault is refused in the words the build's ELF reader
 * gives an object (src/kmodsyms/scan/elf/elffile.py), with "module" for the
 * kind of file.  0, 1 (refused: *WHY) or -1 (out of memory). */
static int elf_open(struct kmsi_ko *ko, const char *path, char **why)
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
static int elf_cut(struct kmsi_ko *ko, const char *path, char **why)
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
static void contents(const struct kmsi_ko *ko, const struct shdr *h, const unsigned char **p,
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
static void section_names(const struct kmsi_ko *ko, const unsigned char **p, uint64_t *len)
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
static int ko_scan(struct kmsi_ko *ko, const char *path, char **why)
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
            struct kmsi_ko_sym *s = &ko->sym[ko->nsym++];
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
        struct kmsi_ko_sec *s = &ko->sec[ko->nsec];
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
static void section_named(const struct kmsi_ko *ko, const char *name, const unsigned char **p,
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
int kmsi_ko_read(struct kmsi_ko *ko, const char *path, char **why)
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
    kmsi_notes_build_id(p, len, ko->big, ko->build_id, sizeof ko->build_id);
    return 0;
}
