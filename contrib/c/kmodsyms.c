/*
 * kmodsyms.c - dependency-free C99 reader for dtrace_syms (docs/format.md).
 */
#include "kmodsyms.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Directory order of the tables and their entry sizes. */
enum { T_STRINGS, T_MODULES, T_MEMBERS, T_MODSETS, T_OBJECTS, T_SECNAMES, T_SECTIONS,
       T_SYMBOLS, T_SEGMENTS, T_ANCHORS, T_COUNT };
static const char *const table_names[T_COUNT] = {
    "strings", "modules", "modset_members", "modsets",
    "objects", "section_names", "sections", "symbols", "segments", "anchors"};
static const uint32_t entry_size[T_COUNT] = {1, 4, 4, 8, 16, 4, 40, 40, 16, 8};

#define MAX_ENTRIES (UINT32_C(1) << 28)
#define DIRECTORY_AT 56u

struct kms_file {
    unsigned char *data;
    size_t size;
    uint32_t flags;
    const unsigned char *table[T_COUNT];
    uint32_t count[T_COUNT];
    uint32_t header_str[6];
};

/* ---- little-endian decoding, independent of the host's byte order ---- */
static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* ---- CRC-32 (ISO-HDLC, as zlib's crc32()), slicing-by-8 ---- */
static uint32_t crc_tab[8][256];

static void crc_init(void)
{
    uint32_t c;
    int i, k;
    for (i = 0; i < 256; i++) {
        c = (uint32_t)i;
        for (k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tab[0][i] = c;
    }
    for (i = 0; i < 256; i++)
        for (k = 1; k < 8; k++)
            crc_tab[k][i] = crc_tab[0][crc_tab[k - 1][i] & 0xFF] ^ (crc_tab[k - 1][i] >> 8);
}

static uint32_t crc32_bytes(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu, hi;
    if (!crc_tab[0][1])
        crc_init();
    /* Eight bytes per step; le32() keeps it independent of host order. */
    for (; n >= 8; n -= 8, p += 8) {
        c ^= le32(p);
        hi = le32(p + 4);
        c = crc_tab[7][c & 0xFF] ^ crc_tab[6][(c >> 8) & 0xFF] ^
            crc_tab[5][(c >> 16) & 0xFF] ^ crc_tab[4][c >> 24] ^
            crc_tab[3][hi & 0xFF] ^ crc_tab[2][(hi >> 8) & 0xFF] ^
            crc_tab[1][(hi >> 16) & 0xFF] ^ crc_tab[0][hi >> 24];
    }
    for (; n; n--, p++)
        c = crc_tab[0][(c ^ *p) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- entry field access (all indexes validated by kms_open) ---- */
static const unsigned char *entry(const kms_file *f, int t, uint32_t i)
{
    return f->table[t] + (size_t)i * entry_size[t];
}

static const char *str(const kms_file *f, uint32_t off)
{
    return (const char *)f->table[T_STRINGS] + off;
}

static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Checks every u32 field at byte FIELD of every entry of table T is < BOUND. */
static int check_index(const kms_file *f, int t, uint32_t field, uint32_t bound)
{
    uint32_t i;
    for (i = 0; i < f->count[t]; i++)
        if (le32(entry(f, t, i) + field) >= bound)
            return 0;
    return 1;
}

static const char *validate(kms_file *f, char *detail, size_t dlen)
{
    const unsigned char *d = f->data;
    uint32_t i, crc, nstr;
    int t;

    if (f->size < 16 || memcmp(d, "KMODSYMS", 8) != 0)
        return "not a dtrace_syms file (bad magic)";
    if (le32(d + 8) != KMS_FORMAT_VERSION) {
        snprintf(detail, dlen, "dtrace_syms format version %lu; this reader reads version %u",
                 (unsigned long)le32(d + 8), KMS_FORMAT_VERSION);
        return detail;
    }
    if (f->size < KMS_HEADER_SIZE) {
        snprintf(detail, dlen, "truncated (%lu bytes, header needs %u)",
                 (unsigned long)f->size, KMS_HEADER_SIZE);
        return detail;
    }
    if (le64(d + 16) != (uint64_t)f->size) {
        snprintf(detail, dlen, "truncated or padded: header says %llu bytes, file has %llu",
                 (unsigned long long)le64(d + 16), (unsigned long long)f->size);
        return detail;
    }
    if (le32(d + 24) != KMS_HEADER_SIZE)
        return "bad header size";
    crc = crc32_bytes(d + 16, f->size - 16);
    if (crc != le32(d + 12))
        return "checksum mismatch (corrupt file)";
    f->flags = le32(d + 28);
    for (i = 0; i < 6; i++)
        f->header_str[i] = le32(d + 32 + 4 * i);

    for (t = 0; t < T_COUNT; t++) {
        uint64_t off = le32(d + DIRECTORY_AT + 8 * t);
        uint64_t count = le32(d + DIRECTORY_AT + 8 * t + 4);
        /* off < 2^32 and count <= 2^28, so this cannot overflow 64 bits. */
        if (count > MAX_ENTRIES || off % 8 != 0 || off < KMS_HEADER_SIZE ||
            off + count * entry_size[t] > (uint64_t)f->size) {
            snprintf(detail, dlen, "table %s out of bounds (offset %llu, %llu entries)",
                     table_names[t], (unsigned long long)off, (unsigned long long)count);
            return detail;
        }
        f->table[t] = d + off;
        f->count[t] = (uint32_t)count;
    }

    nstr = f->count[T_STRINGS];
    if (nstr == 0 || f->table[T_STRINGS][nstr - 1] != 0)
        return "string table not NUL-terminated";
    for (i = 0; i < 6; i++)
        if (f->header_str[i] >= nstr)
            return "header string out of range";
    if (!check_index(f, T_MODULES, 0, nstr))
        return "module name out of range";
    if (!check_index(f, T_MEMBERS, 0, f->count[T_MODULES]))
        return "module-set member out of range";
    for (i = 0; i < f->count[T_MODSETS]; i++) {
        const unsigned char *e = entry(f, T_MODSETS, i);
        if ((uint64_t)le32(e) + le32(e + 4) > f->count[T_MEMBERS])
            return "module set out of range";
    }
    if (!check_index(f, T_OBJECTS, 0, nstr))
        return "object path out of range";
    if (!check_index(f, T_OBJECTS, 4, f->count[T_MODSETS]))
        return "object module set out of range";
    if (!check_index(f, T_SECNAMES, 0, nstr))
        return "section name out of range";
    if (!check_index(f, T_SECTIONS, 0, f->count[T_OBJECTS]))
        return "section object out of range";
    if (!check_index(f, T_SECTIONS, 4, f->count[T_SECNAMES]))
        return "section name index out of range";
    if (!check_index(f, T_SYMBOLS, 0, nstr))
        return "symbol name out of range";
    if (!check_index(f, T_SYMBOLS, 4, f->count[T_MODSETS]))
        return "symbol module set out of range";
    if (!check_index(f, T_SYMBOLS, 8, f->count[T_OBJECTS]))
        return "symbol object out of range";
    if (!check_index(f, T_SYMBOLS, 12, f->count[T_SECTIONS]))
        return "symbol section out of range";
    if (!check_index(f, T_ANCHORS, 0, f->count[T_SYMBOLS]))
        return "anchor symbol out of range";
    if (!check_index(f, T_ANCHORS, 4, f->count[T_SEGMENTS]))
        return "anchor segment out of range";
    for (i = 0; i < f->count[T_SYMBOLS]; i++) {
        const unsigned char *s = entry(f, T_SYMBOLS, i);
        if (le32(entry(f, T_SECTIONS, le32(s + 12))) != le32(s + 8))
            return "symbol section belongs to another object";
        /* Binary search needs the names in strcmp order. */
        if (i > 0 && strcmp(str(f, le32(s - 40)), str(f, le32(s))) > 0)
            return "symbols not sorted by name";
    }
    return NULL;
}

kms_file *kms_open_mem(const void *data, size_t size, char *err, size_t errlen)
{
    kms_file *f = calloc(1, sizeof *f);
    char detail[200];
    const char *why;
    if (!f || !(f->data = malloc(size ? size : 1))) {
        free(f);
        fail(err, errlen, "out of memory");
        return NULL;
    }
    if (size)
        memcpy(f->data, data, size);
    f->size = size;
    why = validate(f, detail, sizeof detail);
    if (why) {
        fail(err, errlen, "%s", why);
        kms_close(f);
        return NULL;
    }
    return f;
}

kms_file *kms_open(const char *path, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t size = 0, cap = 0;
    kms_file *f;
    char detail[200];
    const char *why;

    if (!fp) {
        fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    /* Size the buffer from the file's length when it can be had; the loop
     * below still reads to EOF, whatever the length turns out to be. */
    if (fseek(fp, 0, SEEK_END) == 0) {
        long len = ftell(fp);
        if (len >= 0 && (unsigned long)len < (size_t)-1 - 1)
            cap = (size_t)len + 1;
        if (fseek(fp, 0, SEEK_SET) != 0) {
            fclose(fp);
            fail(err, errlen, "%s: cannot seek", path);
            return NULL;
        }
        if (cap && !(buf = malloc(cap)))
            cap = 0;
    }
    for (;;) {
        size_t got;
        if (size == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 16;
            unsigned char *nbuf = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!nbuf) {
                free(buf);
                fclose(fp);
                fail(err, errlen, "%s: out of memory", path);
                return NULL;
            }
            buf = nbuf;
            cap = ncap;
        }
        got = fread(buf + size, 1, cap - size, fp);
        size += got;
        if (got == 0)
            break;
    }
    if (ferror(fp)) {
        free(buf);
        fclose(fp);
        fail(err, errlen, "%s: read error", path);
        return NULL;
    }
    fclose(fp);

    f = calloc(1, sizeof *f);
    if (!f) {
        free(buf);
        fail(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    f->data = buf;
    f->size = size;
    why = validate(f, detail, sizeof detail);
    if (why) {
        fail(err, errlen, "%s: %s", path, why);
        kms_close(f);
        return NULL;
    }
    return f;
}

void kms_close(kms_file *f)
{
    if (f) {
        free(f->data);
        free(f);
    }
}

uint32_t kms_flags(const kms_file *f) { return f->flags; }
const char *kms_kernel_release(const kms_file *f) { return str(f, f->header_str[0]); }
const char *kms_build_id(const kms_file *f) { return str(f, f->header_str[1]); }
const char *kms_tool_version(const kms_file *f) { return str(f, f->header_str[2]); }
const char *kms_placement_stats(const kms_file *f) { return str(f, f->header_str[5]); }
uint32_t kms_nsymbols(const kms_file *f) { return f->count[T_SYMBOLS]; }
uint32_t kms_nmodules(const kms_file *f) { return f->count[T_MODULES]; }

const char *kms_module_name(const kms_file *f, uint32_t m)
{
    return str(f, le32(entry(f, T_MODULES, m)));
}

uint32_t kms_find(const kms_file *f, const char *name, uint32_t *first)
{
    uint32_t lo = 0, hi = f->count[T_SYMBOLS], mid, end;
    while (lo < hi) { /* first entry whose name is >= NAME */
        mid = lo + (hi - lo) / 2;
        if (strcmp(kms_sym_name(f, mid), name) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    end = lo;
    hi = f->count[T_SYMBOLS];
    while (end < hi) { /* first entry whose name is > NAME */
        mid = end + (hi - end) / 2;
        if (strcmp(kms_sym_name(f, mid), name) <= 0)
            end = mid + 1;
        else
            hi = mid;
    }
    if (first)
        *first = lo;
    return end - lo;
}

static const unsigned char *sym(const kms_file *f, uint32_t i) { return entry(f, T_SYMBOLS, i); }

const char *kms_sym_name(const kms_file *f, uint32_t i) { return str(f, le32(sym(f, i))); }

uint32_t kms_sym_nmodules(const kms_file *f, uint32_t i)
{
    return le32(entry(f, T_MODSETS, le32(sym(f, i) + 4)) + 4);
}

const char *kms_sym_module(const kms_file *f, uint32_t i, uint32_t k)
{
    const unsigned char *set = entry(f, T_MODSETS, le32(sym(f, i) + 4));
    uint32_t member = le32(entry(f, T_MEMBERS, le32(set) + k));
    return kms_module_name(f, member);
}

const char *kms_sym_object(const kms_file *f, uint32_t i)
{
    return str(f, le32(entry(f, T_OBJECTS, le32(sym(f, i) + 8))));
}

uint32_t kms_sym_object_flags(const kms_file *f, uint32_t i)
{
    return le32(entry(f, T_OBJECTS, le32(sym(f, i) + 8)) + 8);
}

const char *kms_sym_section(const kms_file *f, uint32_t i)
{
    const unsigned char *sec = entry(f, T_SECTIONS, le32(sym(f, i) + 12));
    return str(f, le32(entry(f, T_SECNAMES, le32(sec + 4))));
}

uint64_t kms_sym_value(const kms_file *f, uint32_t i) { return le64(sym(f, i) + 16); }
uint64_t kms_sym_size(const kms_file *f, uint32_t i) { return le64(sym(f, i) + 24); }
unsigned kms_sym_type(const kms_file *f, uint32_t i) { return sym(f, i)[32]; }
unsigned kms_sym_binding(const kms_file *f, uint32_t i) { return sym(f, i)[33]; }

/* ---- link layout ---- */
static const unsigned char *sym_section(const kms_file *f, uint32_t i)
{
    return entry(f, T_SECTIONS, le32(sym(f, i) + 12));
}

uint64_t kms_sym_link_address(const kms_file *f, uint32_t i)
{
    uint64_t address = le64(sym_section(f, i) + 24);
    if (address == KMS_NO_ADDRESS)
        return KMS_NO_ADDRESS;
    return address + kms_sym_value(f, i); /* unsigned: wraps like the kernel's */
}

unsigned kms_sym_placement(const kms_file *f, uint32_t i)
{
    const unsigned char *sec = sym_section(f, i);
    return le64(sec + 24) == KMS_NO_ADDRESS ? KMS_PLACED_NONE : (unsigned)le32(sec + 32);
}

uint32_t kms_nsegments(const kms_file *f) { return f->count[T_SEGMENTS]; }

void kms_segment(const kms_file *f, uint32_t s, uint64_t *start, uint64_t *end)
{
    const unsigned char *e = entry(f, T_SEGMENTS, s);
    if (start)
        *start = le64(e);
    if (end)
        *end = le64(e + 8);
}

uint32_t kms_nanchors(const kms_file *f) { return f->count[T_ANCHORS]; }
uint32_t kms_anchor_symbol(const kms_file *f, uint32_t a) { return le32(entry(f, T_ANCHORS, a)); }
uint32_t kms_anchor_segment(const kms_file *f, uint32_t a) { return le32(entry(f, T_ANCHORS, a) + 4); }
