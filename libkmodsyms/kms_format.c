// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Input, the dtrace_syms file (docs/format.md): mapped read-only, its CRC-32
 * checked, every table and cross-reference checked against its bounds
 * (kmodsyms.format.symsfile.SymsFile's checks), and the objects' module lists read.
 * First step of a load, before kallsyms is read (kms_kallsyms.c).
 */
#include "kms_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const kmsi_vmlinux_list[1] = {"vmlinux"};

/* ISO-HDLC (zlib's crc32()), slicing by 16; the table is the caller's so
 * that nothing global is written. */
static void crc_table(uint32_t tab[16][256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        tab[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int k = 1; k < 16; k++)
            tab[k][i] = tab[0][tab[k - 1][i] & 0xFF] ^ (tab[k - 1][i] >> 8);
}

/* One 16-byte step of the CRC C over P (a macro: the four parts' steps
 * below must be one loop body, not four calls, to run side by side). */
#define CRC_STEP(tab, c, p)                                                                 \
    do {                                                                                    \
        uint32_t w0_ = (c) ^ le32(p), w1_ = le32((p) + 4), w2_ = le32((p) + 8),             \
                 w3_ = le32((p) + 12);                                                      \
        (c) = tab[15][w0_ & 0xFF] ^ tab[14][(w0_ >> 8) & 0xFF] ^ tab[13][(w0_ >> 16) & 0xFF] ^ \
              tab[12][w0_ >> 24] ^ tab[11][w1_ & 0xFF] ^ tab[10][(w1_ >> 8) & 0xFF] ^       \
              tab[9][(w1_ >> 16) & 0xFF] ^ tab[8][w1_ >> 24] ^ tab[7][w2_ & 0xFF] ^         \
              tab[6][(w2_ >> 8) & 0xFF] ^ tab[5][(w2_ >> 16) & 0xFF] ^ tab[4][w2_ >> 24] ^   \
              tab[3][w3_ & 0xFF] ^ tab[2][(w3_ >> 8) & 0xFF] ^ tab[1][(w3_ >> 16) & 0xFF] ^ \
              tab[0][w3_ >> 24];                                                            \
    } while (0)

/* The CRC (unconditioned) C continued over P[0..N). */
static uint32_t crc_run(const uint32_t tab[16][256], uint32_t c, const unsigned char *p, size_t n)
{
    for (; n >= 16; n -= 16, p += 16)
        CRC_STEP(tab, c, p);
    for (; n; n--, p++)
        c = tab[0][(c ^ *p) & 0xFF] ^ (c >> 8);
    return c;
}

/* A times B modulo the CRC's polynomial (bit 31 is x^0, as the CRC's bits
 * are reflected). */
static uint32_t mult_mod_poly(uint32_t a, uint32_t b)
{
    uint32_t p = 0;
    for (uint32_t m = 1u << 31; m; m >>= 1) {
        if (a & m)
            p ^= b;
        b = (b & 1) ? (b >> 1) ^ 0xEDB88320u : b >> 1;
    }
    return p;
}

/* The CRC of A then B from CRC1 of A and CRC2 of B (LEN2 bytes): CRC1
 * moved past LEN2 zero bytes (times x^(8 LEN2), by squaring), then added,
 * as zlib's crc32_combine(). */
static uint32_t crc_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    uint32_t x2n = 1u << 23, shift = 1u << 31; /* x^8, x^0 */
    for (; len2; len2 >>= 1, x2n = mult_mod_poly(x2n, x2n))
        if (len2 & 1)
            shift = mult_mod_poly(x2n, shift);
    return mult_mod_poly(shift, crc1) ^ crc2;
}

/* CRC-32 of P[0..N).  A large file is cut into four parts whose CRCs are
 * computed side by side, then combined: each step of one CRC depends on
 * the last, so one alone leaves the processor waiting on its table reads,
 * where four independent ones keep it busy (the check reads the whole
 * file at every load). */
static uint32_t crc32_bytes(const unsigned char *p, size_t n)
{
    uint32_t tab[16][256], c0 = 0xFFFFFFFFu, c1 = c0, c2 = c0, c3 = c0;
    size_t part = n / 4 / 16 * 16;
    crc_table(tab);
    for (size_t at = 0; at < part; at += 16) {
        CRC_STEP(tab, c0, p + at);
        CRC_STEP(tab, c1, p + part + at);
        CRC_STEP(tab, c2, p + 2 * part + at);
        CRC_STEP(tab, c3, p + 3 * part + at);
    }
    size_t last = n - 3 * part; /* the last part: to the end */
    c3 = crc_run(tab, c3, p + 4 * part, last - part);
    uint32_t crc = crc_combine(c0 ^ 0xFFFFFFFFu, c1 ^ 0xFFFFFFFFu, part);
    crc = crc_combine(crc, c2 ^ 0xFFFFFFFFu, part);
    return crc_combine(crc, c3 ^ 0xFFFFFFFFu, last);
}

/* Every u32 field at byte FIELD of every entry of table T is < BOUND. */
static int in_range(const kms_handle *h, int t, uint32_t field, uint64_t bound)
{
    for (uint32_t i = 0; i < h->count[t]; i++)
        if (le32(ent(h, t, i) + field) >= bound)
            return 0;
    return 1;
}

/* Whether D starts as a kallsyms line does: 8 or 16 hex digits, a space, a
 * letter, a space. */
static int looks_like_kallsyms(const unsigned char *d, size_t size)
{
    size_t k = 0;
    while (k < size && k < 16 && ((d[k] >= '0' && d[k] <= '9') || (d[k] >= 'a' && d[k] <= 'f')))
        k++;
    return (k == 8 || k == 16) && size > k + 3 && d[k] == ' ' && d[k + 2] == ' ' &&
           ((d[k + 1] >= 'a' && d[k + 1] <= 'z') || (d[k + 1] >= 'A' && d[k + 1] <= 'Z'));
}

/* SymsFile's checks of the header: magic, version, size, CRC. */
static int check_header(const kms_handle *h, const char *path, kms_error *err)
{
    const unsigned char *d = h->map;
    size_t size = h->map_size;
    const char *why = NULL;

    if (!size)
        return kmsi_fail(err, KMS_E_SYMS, "%s: an empty file, not a dtrace_syms file: give the "
                         "file 'kmodsyms build' wrote", path);
    if (size < CRC_COVERS_FROM || memcmp(d + HDR_MAGIC, FORMAT_MAGIC, FORMAT_MAGIC_SIZE) != 0) {
        if (looks_like_kallsyms(d, size))
            return kmsi_fail(err, KMS_E_SYMS, "%s is a kallsyms text, not a dtrace_syms file: "
                             "were the dtrace_syms and kallsyms paths swapped?", path);
        return kmsi_fail(err, KMS_E_SYMS, "%s: not a dtrace_syms file (bad magic)", path);
    }
    if (le32(d + HDR_VERSION) != FORMAT_VERSION)
        return kmsi_fail(err, KMS_E_VERSION,
                         "%s: dtrace_syms format version %lu; this reader reads version %u: "
                         "rebuild it with a matching kmodsyms",
                         path, (unsigned long)le32(d + HDR_VERSION), FORMAT_VERSION);
    if (size < HEADER_SIZE)
        return kmsi_fail(err, KMS_E_SYMS, "%s: truncated (%zu bytes, header needs %u); "
                         "rebuild it with 'kmodsyms build'", path, size, HEADER_SIZE);
    if (le64(d + HDR_FILE_SIZE) != (uint64_t)size)
        return kmsi_fail(err, KMS_E_SYMS, "%s: truncated or padded: header says %llu bytes, file "
                         "has %zu; rebuild it with 'kmodsyms build'",
                         path, (unsigned long long)le64(d + HDR_FILE_SIZE), size);
    if (le32(d + HDR_HEADER_SIZE) != HEADER_SIZE)
        why = "bad header size";
    else if (crc32_bytes(d + CRC_COVERS_FROM, size - CRC_COVERS_FROM) != le32(d + HDR_CRC32))
        why = "checksum mismatch (corrupt file)";
    if (why)
        return kmsi_fail(err, KMS_E_SYMS, "%s: %s; rebuild it with 'kmodsyms build'", path, why);
    return KMS_OK;
}

/* SymsFile's checks of the directory: every table within the file. */
static int read_directory(kms_handle *h, const char *path, kms_error *err)
{
    const unsigned char *d = h->map;
    for (int t = 0; t < T_COUNT; t++) {
        uint64_t off = le32(d + HDR_DIRECTORY + 8 * t);
        uint64_t count = le32(d + HDR_DIRECTORY + 8 * t + 4);
        /* off < 2^32 and count <= 2^28: no overflow in 64 bits. */
        if (count > MAX_ENTRIES || off % TABLE_ALIGN != 0 || off < HEADER_SIZE ||
            off + count * entry_size[t] > (uint64_t)h->map_size)
            return kmsi_fail(err, KMS_E_SYMS, "%s: table %s out of bounds (offset %llu, %llu "
                             "entries); rebuild it with 'kmodsyms build'", path, table_names[t],
                             (unsigned long long)off, (unsigned long long)count);
        h->table[t] = d + off;
        h->count[t] = (uint32_t)count;
    }
    return KMS_OK;
}

/* The symbols' five checks in one pass (the largest table): each failure
 * noted, the first in SymsFile's order reported (NULL: none).  The same
 * pass counts each section's symbols into h->load->section_rows, for
 * index_entries (NULL when out of memory: told where the other
 * allocations' failures are), and notes wide values. */
static const char *symbols_why(kms_handle *h)
{
    static const char *const sym_why[5] = {
        "symbol name out of range", "symbol module set out of range",
        "symbol object out of range", "symbol section out of range",
        "symbol section belongs to another object"};
    uint32_t nstr = h->count[T_STRINGS], nmodsets = h->count[T_MODSETS], nobj = h->count[T_OBJECTS];
    uint32_t nsec = h->count[T_SECTIONS], bad = 0, wide = 0;
    uint32_t *rows = h->load->section_rows = kmsi_scratch(h, (size_t)nsec + 2, sizeof *rows);
    if (rows)
        memset(rows, 0, ((size_t)nsec + 2) * sizeof *rows);
    for (uint32_t i = 0; i < h->count[T_SYMBOLS]; i++) {
        const unsigned char *s = ent(h, T_SYMBOLS, i);
        uint32_t sec = le32(s + SYM_SECTION), obj = le32(s + SYM_OBJECT);
        bad |= (uint32_t)(le32(s + SYM_NAME) >= nstr) |
               (uint32_t)(le32(s + SYM_MODSET) >= nmodsets) << 1 |
               (uint32_t)(obj >= nobj) << 2 | (uint32_t)(sec >= nsec) << 3;
        wide |= le32(s + SYM_VALUE + 4);
        if (sec < nsec) {
            if (le32(ent(h, T_SECTIONS, sec) + SEC_OBJECT) != obj)
                bad |= 1u << 4;
            if (rows)
                rows[sec + 2]++;
        }
    }
    h->wide_values = wide != 0;
    for (int k = 0; k < 5; k++)
        if (bad >> k & 1)
            return sym_why[k];
    return NULL;
}

/* SymsFile's checks of every reference between tables, in its order and
 * with its words: the first that fails (NULL: none). */
static const char *references_why(kms_handle *h)
{
    const unsigned char *d = h->map;
    uint32_t nstr = h->count[T_STRINGS];
    if (nstr == 0 || h->table[T_STRINGS][nstr - 1] != 0)
        return "string table not NUL-terminated";
    for (uint32_t i = 0; i < HDR_STRINGS_COUNT; i++)
        if (le32(d + HDR_KERNEL_RELEASE + 4 * i) >= nstr)
            return "header string out of range";
    if (!in_range(h, T_MODULES, MOD_NAME, nstr))
        return "module name out of range";
    if (!in_range(h, T_MEMBERS, 0, h->count[T_MODULES])) /* a bare u32 */
        return "module-set member out of range";
    for (uint32_t i = 0; i < h->count[T_MODSETS]; i++) {
        const unsigned char *e = ent(h, T_MODSETS, i);
        if ((uint64_t)le32(e + MODSET_FIRST) + le32(e + MODSET_COUNT) > h->count[T_MEMBERS])
            return "module set out of range";
    }
    if (!in_range(h, T_OBJECTS, OBJ_PATH, nstr))
        return "object path out of range";
    if (!in_range(h, T_OBJECTS, OBJ_MODSET, h->count[T_MODSETS]))
        return "object module set out of range";
    if (!in_range(h, T_SECNAMES, SECNAME_NAME, nstr))
        return "section name out of range";
    if (!in_range(h, T_SECTIONS, SEC_OBJECT, h->count[T_OBJECTS]))
        return "section object out of range";
    if (!in_range(h, T_SECTIONS, SEC_NAME, h->count[T_SECNAMES]))
        return "section name index out of range";
    const char *why = symbols_why(h);
    if (why)
        return why;
    if (!in_range(h, T_ANCHORS, ANCHOR_SYMBOL, h->count[T_SYMBOLS]))
        return "anchor symbol out of range";
    if (!in_range(h, T_ANCHORS, ANCHOR_SEGMENT, h->count[T_SEGMENTS]))
        return "anchor segment out of range";
    if (!in_range(h, T_VSYMS, VSYM_NAME, h->count[T_STRINGS]))
        return "vmlinux symbol name out of range";
    if (!in_range(h, T_BY_OFFSET, 0, h->count[T_SYMBOLS])) /* a bare u32 */
        return "symbols_by_offset entry out of range";
    return NULL;
}

/* The modules, objects and sections as the handle keeps them. */
static int read_objects(kms_handle *h, const char *path, kms_error *err)
{
    if (!ALLOC(h, member_name, h->count[T_MEMBERS]))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", path);
    for (uint32_t k = 0; k < h->count[T_MEMBERS]; k++)
        h->member_name[k] = str(h, le32(ent(h, T_MODULES, le32(ent(h, T_MEMBERS, k))) + MOD_NAME));
    if (!h->load->section_rows || !ALLOC(h, object, h->count[T_OBJECTS]) ||
        !ALLOC(h, section_object, h->count[T_SECTIONS]))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", path);
    for (uint32_t o = 0; o < h->count[T_OBJECTS]; o++) {
        const unsigned char *ob = ent(h, T_OBJECTS, o);
        const unsigned char *ms = ent(h, T_MODSETS, le32(ob + OBJ_MODSET));
        struct object_info *info = &h->object[o];
        info->path = str(h, le32(ob + OBJ_PATH));
        info->modules.nmodules = le32(ms + MODSET_COUNT);
        info->modules.modules = h->member_name + le32(ms + MODSET_FIRST);
        info->origin = KMS_ORIGIN_BUILTIN;
        if (!info->modules.nmodules) {
            info->modules.modules = kmsi_vmlinux_list;
            info->modules.nmodules = 1;
            info->origin = KMS_ORIGIN_CORE;
        }
        info->dso = info->modules.modules[0];
    }
    for (uint32_t c = 0; c < h->count[T_SECTIONS]; c++)
        h->section_object[c] = le32(ent(h, T_SECTIONS, c) + SEC_OBJECT);
    return KMS_OK;
}

/* kmodsyms.format.symsfile.SymsFile's checks, in its order and with its words. */
static int validate_syms(kms_handle *h, const char *path, kms_error *err)
{
    int rc = check_header(h, path, err);
    if (rc == KMS_OK)
        rc = read_directory(h, path, err);
    if (rc != KMS_OK)
        return rc;
    const char *why = references_why(h);
    if (why)
        return kmsi_fail(err, KMS_E_SYMS, "%s: %s; rebuild it with 'kmodsyms build'", path, why);
    h->release = str(h, le32(h->map + HDR_KERNEL_RELEASE));
    h->build_id = str(h, le32(h->map + HDR_BUILD_ID));
    return read_objects(h, path, err);
}

/* What a file that is not a regular one is, in a message (the words of
 * kmodsyms.format.symsfile.file_kind). */
static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode) ? "a directory" : S_ISCHR(mode) ? "a character device"
        : S_ISBLK(mode) ? "a block device" : S_ISFIFO(mode) ? "a pipe"
        : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

int kmsi_map_syms(kms_handle *h, const char *path, kms_error *err)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        /* only a missing file is one to build: another error is the file's own */
        return kmsi_fail(err, e == ENOENT ? KMS_E_NO_SYMS : KMS_E_IO, "cannot read %s: %s%s", path,
                         strerror(e), e == ENOENT ? "; build it with 'kmodsyms build'" : "");
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kmsi_fail(err, KMS_E_IO, "%s: %s, not a dtrace_syms file: give the file "
                         "'kmodsyms build' wrote%s", path, file_kind(st.st_mode),
                         S_ISDIR(st.st_mode) ? " (DIR/dtrace_syms)" : "");
    }
    h->map_size = (size_t)st.st_size;
    if (h->map_size) {
        void *m = mmap(NULL, h->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            h->map_size = 0;
            return kmsi_fail(err, KMS_E_IO, "cannot map %s: %s", path, strerror(e));
        }
        h->map = m;
    }
    close(fd);
    return validate_syms(h, path, err);
}

int kmsi_no_syms(kms_handle *h, kms_error *err)
{
    /* one string (""), one module set (0: the core kernel, no members) */
    static const unsigned char empty[16];
    for (int t = 0; t < T_COUNT; t++) {
        h->table[t] = empty;
        h->count[t] = 0;
    }
    h->count[T_STRINGS] = h->count[T_MODSETS] = 1;
    h->release = h->build_id = (const char *)empty;
    h->load->section_rows = kmsi_scratch(h, 2, sizeof *h->load->section_rows);
    if (!h->load->section_rows || !ALLOC(h, member_name, 0) || !ALLOC(h, object, 0) ||
        !ALLOC(h, section_object, 0))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory");
    memset(h->load->section_rows, 0, 2 * sizeof *h->load->section_rows);
    return KMS_OK;
}
