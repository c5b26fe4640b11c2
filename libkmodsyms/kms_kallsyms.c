// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Input, the kallsyms text (docs/resolver.md R1-R5; kmodsyms.scan.sysmap): a file
 * read block by block or a caller's buffer, each line parsed into a row
 * (struct line) and its name, loaded and pseudo-modules numbered, and each
 * core line whose name is an anchor's noted for placement (kms_place.c).
 * Runs after the dtrace_syms file is read (kms_format.c).
 */
#include "kms_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define BYTES(b) (UINT64_C(0x0101010101010101) * (b)) /* B in each of 8 bytes */

/* The value of the 8 hex digits at P, all at once; *BAD gets a nonzero bit
 * when any is not one. */
static inline uint32_t hex8(const char *p, uint64_t *bad)
{
    uint64_t x = le64((const unsigned char *)p); /* byte k: p[k] */
    /* ranges per byte: with the high bits off, no byte carries into the next */
    uint64_t low = x & BYTES(0x7F), lower = (x | BYTES(0x20)) & BYTES(0x7F);
    uint64_t digit = (low + BYTES(0x80 - '0')) & ~(low + BYTES(0x7F - '9'));
    uint64_t letter = (lower + BYTES(0x80 - 'a')) & ~(lower + BYTES(0x7F - 'f'));
    *bad |= (((digit | letter) & BYTES(0x80)) ^ BYTES(0x80)) | (x & BYTES(0x80));
    /* each byte's digit ('a'-'f' and 'A'-'F' have bit 6: + 9), then the
     * eight packed, p[0] the most significant */
    uint64_t v = (x & BYTES(0x0F)) + 9 * ((x >> 6) & BYTES(0x01));
    v = (v & UINT64_C(0x000F000F000F000F)) << 4 | (v >> 8 & UINT64_C(0x000F000F000F000F));
    v = (v & UINT64_C(0x000000FF000000FF)) << 8 | (v >> 16 & UINT64_C(0x000000FF000000FF));
    return (uint32_t)((v & 0xFFFF) << 16 | (v >> 32 & 0xFFFF));
}

/* ASCII white space: what is trimmed around "[MOD]" (R1), as the build's
 * reader of System.map trims it too (src/kmodsyms/scan/sysmap.py) */
static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int line_error(kms_error *err, const char *source, size_t lineno, const char *what,
                      const char *line, size_t len)
{
    /* its first 80 bytes as the CLI echoes input (kmodsyms.errors.shown):
     * printable ASCII, a backslash doubled, any other byte \xNN */
    char shown[80 * 4 + 1];
    size_t k, m = len < 80 ? len : 80, at = 0;
    for (k = 0; k < m; k++) {
        unsigned char c = (unsigned char)line[k];
        if (c == '\\')
            at += (size_t)snprintf(shown + at, sizeof shown - at, "\\\\");
        else if (c >= 32 && c < 127)
            shown[at++] = (char)c;
        else
            at += (size_t)snprintf(shown + at, sizeof shown - at, "\\x%02x", c);
    }
    shown[at] = 0;
    return kmsi_fail(err, KMS_E_KALLSYMS, "%s:%zu: %s: '%s'", source, lineno, what, shown);
}

/* Line LINENO (LEN bytes at LINE) does not have the layout of the first
 * line, whose address is WIDTH hex digits: say so in the words of WHAT,
 * unless its address is of another width, which is said instead. */
static int layout_error(kms_error *err, const char *source, size_t lineno, size_t width,
                        const char *what, const char *line, size_t len)
{
    size_t own = 0;
    while (own < len && ((line[own] >= '0' && line[own] <= '9') ||
                         ((line[own] | 0x20) >= 'a' && (line[own] | 0x20) <= 'f')))
        own++;
    if (own && own < len && line[own] == ' ' && own != width)
        what = own < width ? "address narrower than the others (the first line's)"
                           : "address wider than the others (the first line's)";
    return line_error(err, source, lineno, what, line, len);
}

/* The state of parsing kallsyms, carried from one block of text to the next. */
struct parse {
    const char *source;
    size_t cap, names_len, names_cap, nonblank, width, modcap;
    size_t rows_asked, names_asked; /* of huge pages (kmsi_advise_huge) */
    int any_nonzero;
    uint64_t *tagh;     /* hash of each module's tag, for the first-seen map */
    uint32_t *tagoff;   /* each module's name in h->text ("[mod]" -> "mod") */
    uint32_t *taglen;   /* its length */
};

/* Room for NEED more bytes of names (and 8 spare, zeroed at the end). */
static int names_room(kms_handle *h, struct parse *ps, size_t need)
{
    if (ps->names_len + need + 8 <= ps->names_cap)
        return 0;
    size_t nc = ps->names_cap * 2 > ps->names_len + need + 8 ? ps->names_cap * 2
                                                             : ps->names_len + need + 8;
    char *nt = realloc(h->text, nc);
    if (!nt)
        return -1;
    h->text = nt;
    ps->names_cap = nc;
    return 0;
}

/* A new module tag T (LEN bytes, "[mod]"): its index, or 0 out of memory. */
static uint32_t add_module(kms_handle *h, struct parse *ps, const char *t, size_t len,
                           uint64_t th)
{
    if (h->nmods >= ps->modcap) {
        size_t nc = ps->modcap ? ps->modcap * 2 : 16;
        uint64_t *nh = realloc(ps->tagh, nc * sizeof *nh);
        if (nh)
            ps->tagh = nh;
        uint32_t *no = nh ? realloc(ps->tagoff, nc * sizeof *no) : NULL;
        if (no)
            ps->tagoff = no;
        uint32_t *nl = no ? realloc(ps->taglen, nc * sizeof *nl) : NULL;
        if (!nl)
            return 0;
        ps->taglen = nl;
        ps->modcap = nc;
    }
    if (names_room(h, ps, len - 1))
        return 0;
    uint32_t mod = h->nmods++;
    ps->tagh[mod] = th;
    ps->tagoff[mod] = (uint32_t)ps->names_len;
    ps->taglen[mod] = (uint32_t)(len - 2);
    memcpy(h->text + ps->names_len, t + 1, len - 2);
    ps->names_len += len - 2;
    h->text[ps->names_len++] = 0;
    return mod;
}

static uint8_t letter_prefer(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? 2 : 0;
}

/* One line of kallsyms (LEN bytes without its "\n"; NL: one followed it;
 * TAB: its first '\t', NULL none), as kmodsyms.scan.sysmap.Kallsyms._parse
 * reads it: its layout (R1), a hidden address (R2), core or [MOD] (R3, R4). */
static int parse_line(kms_handle *h, struct parse *ps, const char *line, size_t len, int nl,
                      const char *tab, kms_error *err)
{
    const char *source = ps->source;
    size_t width;
    if (nl && len && line[len - 1] == '\r') /* "\r\n" reads as "\n" */
        len--;
    if (!len)
        return KMS_OK;
    ps->nonblank++;
    if (ps->nonblank == 1 && len >= 8 && !memcmp(line, "KMODSYMS", 8))
        return kmsi_fail(err, KMS_E_KALLSYMS, "%s is a dtrace_syms file, not a kallsyms: were "
                         "the dtrace_syms and kallsyms paths swapped?", source);
    if (!ps->width) {
        const char *sp = memchr(line, ' ', len);
        ps->width = sp ? (size_t)(sp - line) : 0;
        if (ps->width != 8 && ps->width != 16)
            return line_error(err, source, ps->nonblank, "expected 'ADDRESS TYPE NAME'", line,
                              len);
    }
    width = ps->width;
    if (len < width + 4)
        return layout_error(err, source, ps->nonblank, width,
                            "line too short for 'ADDRESS TYPE NAME'", line, len);
    uint64_t bad = 0, a = hex8(line, &bad);
    if (width == 16)
        a = a << 32 | hex8(line + 8, &bad);
    int ok = line[width] == ' ' && line[width + 2] == ' ' && !bad;
    unsigned char type = (unsigned char)line[width + 1];
    ok &= (type >= 'A' && type <= 'Z') || (type >= 'a' && type <= 'z') || type == '?';
    if (!ok)
        return layout_error(err, source, ps->nonblank, width, "expected 'ADDRESS TYPE NAME'",
                            line, len);
    const char *name = line + width + 3;
    if (tab && tab < name) /* (a header this valid holds none) */
        tab = memchr(name, '\t', len - (width + 3));
    uint32_t mod = 0;
    size_t ne = tab ? (size_t)(tab - line) : len;
    if (tab) {
        /* "[MOD]" after the tab, surrounding whitespace stripped */
        size_t a0 = ne + 1, a1 = len;
        while (a0 < a1 && is_space((unsigned char)line[a0]))
            a0++;
        while (a1 > a0 && is_space((unsigned char)line[a1 - 1]))
            a1--;
        if (!(a1 - a0 > 2 && line[a0] == '[' && line[a1 - 1] == ']'))
            return line_error(err, source, ps->nonblank,
                              "expected '\\t[MODULE]' after the name", line, len);
        uint64_t th = kmsi_name_hash(line + a0, a1 - a0);
        /* lines of one module are consecutive: try the last module first */
        for (uint32_t m = h->nmods; m-- > 1;)
            if (ps->tagh[m] == th && ps->taglen[m] == a1 - a0 - 2 &&
                !memcmp(h->text + ps->tagoff[m], line + a0 + 1, a1 - a0 - 2)) {
                mod = m;
                break;
            }
        if (!mod && !(mod = add_module(h, ps, line + a0, a1 - a0, th)))
            return kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", source);
    }
    if (ne <= width + 3)
        return line_error(err, source, ps->nonblank, "missing symbol name", line, len);
    ps->any_nonzero |= a != 0;
    /* A hidden address prints as 0; only per-cpu 'A' lines really are at 0. */
    if (a != 0 || type == 'A' || type == 'a') {
        size_t name_len = ne - (width + 3);
        if (h->n == ps->cap) {
            size_t nc = ps->cap ? ps->cap * 2 : 1024;
            struct line *grown = nc <= SIZE_MAX / sizeof *grown
                ? realloc(h->line, nc * sizeof *grown) : NULL;
            if (!grown)
                return kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", source);
            h->line = grown;
            ps->cap = nc;
        }
        if (names_room(h, ps, name_len + 1))
            return kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", source);
        if (h->n && !h->unsorted_at && a < h->line[h->n - 1].addr)
            h->unsorted_at = h->n;
        struct line *l = &h->line[h->n++];
        memcpy(h->text + ps->names_len, name, name_len);
        l->addr = a;
        l->size = -1;
        l->name = (uint32_t)ps->names_len;
        l->name_len = (uint32_t)name_len;
        l->who = mod ? WHO(WHO_MODULE, mod) : WHO(WHO_CORE, 0);
        l->type = type;
        l->binding = letter_binding(type, mod != 0); /* an entry's (take_entry) or a .ko's replace these */
        l->prefer = letter_prefer(type);
        l->answers = 0;
        ps->names_len += name_len;
        h->text[ps->names_len++] = 0;
        h->core_lines += mod == 0;
        if (mod && h->core_lines == h->n - 1) /* the first */
            h->modules_from = h->n - 1;
        if (!mod && kmsi_find_anchors(h->load->anchors, (uint32_t)(h->n - 1), name, name_len))
            return kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", source);
    }
    return KMS_OK;
}

/* The first "\n" from P on (before END), NULL none; *TAB: the first '\t'
 * before it (before END when there is none), NULL none. */
static inline const char *find_eol(const char *p, const char *end, const char **tab)
{
    const char *e = memchr(p, '\n', (size_t)(end - p));
    *tab = memchr(p, '\t', (size_t)((e ? e : end) - p));
    return e;
}

/* The lines of T (LEN bytes) ending in "\n", and with FINAL the rest as the
 * last line; *USED: the bytes read. */
static int parse_block(kms_handle *h, struct parse *ps, const char *t, size_t len, int final,
                       size_t *used, kms_error *err)
{
    size_t s = 0;
    const char *tab;
    for (;;) {
        const char *nl = find_eol(t + s, t + len, &tab);
        if (!nl)
            break;
        if (parse_line(h, ps, t + s, (size_t)(nl - (t + s)), 1, tab, err))
            return err ? err->code : KMS_E_KALLSYMS;
        s = (size_t)(nl - t) + 1;
    }
    if (final && s < len) {
        int code = parse_line(h, ps, t + s, len - s, 0, tab, err);
        /* a malformed last line without its newline: the file was cut there */
        if (code == KMS_E_KALLSYMS && ps->nonblank > 1)
            return kmsi_fail(err, code, "%s ends in the middle of line %zu: it is truncated; "
                             "read /proc/kallsyms again, whole", ps->source, ps->nonblank);
        if (code)
            return code;
        s = len;
    }
    *used = s;
    return KMS_OK;
}

#define READ_BLOCK ((size_t)1 << 18)

/* Before the first line is parsed: the rows and names of TOTAL bytes of
 * text as its first LEN bytes at T predict them (lines as dense, each with
 * the first line's address width), asked huge. */
static void advise_sample(kms_handle *h, struct parse *ps, const char *t, size_t len,
                          uint64_t total)
{
    size_t lines = 0;
    for (const char *p = t, *end = t + len; (p = memchr(p, '\n', (size_t)(end - p))); p++)
        lines++;
    const char *sp = memchr(t, ' ', len);
    uint64_t per_line = (sp ? (uint64_t)(sp - t) : 0) + 4; /* "ADDRESS T " and "\n" */
    if (!lines || lines * per_line >= len)
        return;
    kmsi_advise_huge(h->line, ps->cap * sizeof *h->line, &ps->rows_asked, 0,
                     lines * sizeof *h->line * total / len);
    kmsi_advise_huge(h->text, ps->names_cap, &ps->names_asked, 0, (len - lines * per_line) * total / len);
}

/* ------------------------------------------------------------ what a bad file is */

#define HEAD 64 /* the bytes kms_data_kind() judges */

const char *kms_data_kind(const void *data, size_t n, int *compressed)
{
    static const struct {
        const char *magic;
        size_t len;
        const char *what;
        int compressed;
    } kinds[] = {
        {"\x1f\x8b", 2, "gzip data", 1},
        {"\xfd" "7zXZ\0", 6, "xz data", 1},
        {"\x28\xb5\x2f\xfd", 4, "zstd data", 1},
        {"BZh", 3, "bzip2 data", 1},
        {"\x7f" "ELF", 4, "an ELF file", 0},
    };
    const unsigned char *p = data;
    if (compressed)
        *compressed = 0;
    if (!p)
        return NULL;
    n = n < HEAD ? n : HEAD;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (n >= kinds[k].len && !memcmp(p, kinds[k].magic, kinds[k].len)) {
            if (compressed)
                *compressed = kinds[k].compressed;
            return kinds[k].what;
        }
    for (size_t k = 0; k < n; k++)
        if (p[k] < 32 && !is_space(p[k]))
            return "binary data";
    return NULL;
}

/* A file refused as malformed whose start (HEAD, N bytes) is not text at
 * all: the error names what it is instead of quoting a line. */
static void name_binary(kms_error *err, const char *source, const unsigned char *head, size_t n)
{
    /* a dtrace_syms file given as kallsyms already says so (parse_line) */
    if (n >= 8 && !memcmp(head, "KMODSYMS", 8))
        return;
    int compressed = 0;
    const char *what = err && err->code == KMS_E_KALLSYMS ? kms_data_kind(head, n, &compressed)
                                                          : NULL;
    if (what && compressed)
        kmsi_fail(err, KMS_E_KALLSYMS, "%s: %s: decompress it first", source, what);
    else if (what)
        kmsi_fail(err, KMS_E_KALLSYMS, "%s: %s, not kallsyms text: give /proc/kallsyms or a "
                  "saved copy", source, what);
}

/* The first SIZE - 1 bytes of the small file PATH into BUF, NUL-terminated:
 * their count, or -1 when it cannot be read or is empty. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, buf, size - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (got <= 0)
        return -1;
    buf[got] = 0;
    return got;
}

static int read_int(const char *path, int *v)
{
    char buf[32];
    if (read_small(path, buf, sizeof buf) < 0)
        return -1;
    char *end;
    long x = strtol(buf, &end, 10);
    if (end == buf)
        return -1;
    *v = (int)x;
    return 0;
}

/* Whether this process has CAP_SYSLOG (34) in its effective set: -1 unknown. */
static int has_cap_syslog(void)
{
    char buf[4096];
    if (read_small("/proc/self/status", buf, sizeof buf) < 0)
        return -1;
    const char *at = strstr(buf, "\nCapEff:");
    if (!at)
        return -1;
    unsigned long long caps = strtoull(at + 9, NULL, 16);
    return (int)(caps >> 34 & 1);
}

void kmsi_hidden_cause(int kptr_restrict, int paranoid, int cap_syslog, char *buf, size_t cap)
{
    /* kernel/ksyms_common.c kallsyms_show_value(): kptr_restrict 0 shows
     * addresses to everyone when kallsyms_for_perf() (CONFIG_PERF_EVENTS
     * and perf_event_paranoid <= 1), else (and with kptr_restrict 1) to
     * readers with CAP_SYSLOG; 2 and above to none */
    int for_perf = paranoid != KMSI_UNREAD && paranoid <= 1;
    if (kptr_restrict == KMSI_UNREAD)
        snprintf(buf, cap, "the kernel hides them from this reader (kernel.kptr_restrict, "
                 "kernel.perf_event_paranoid and CAP_SYSLOG decide; none readable here): "
                 "run as root");
    else if (kptr_restrict >= 2)
        snprintf(buf, cap, "kernel.kptr_restrict is %d, which hides them from every reader, root "
                 "included: set 'sysctl kernel.kptr_restrict=1' and read it as root", kptr_restrict);
    else if (cap_syslog == 1)   /* shown now: hidden when the file was opened, or by a security module */
        snprintf(buf, cap, "the kernel hid them when it was read (now kernel.kptr_restrict is %d, "
                 "and this process has CAP_SYSLOG): read it again", kptr_restrict);
    else if (kptr_restrict == 1)
        snprintf(buf, cap, "kernel.kptr_restrict is 1, which shows them only to readers with "
                 "CAP_SYSLOG: read it as root (with CAP_SYSLOG)%s",
                 for_perf ? ", or set 'sysctl kernel.kptr_restrict=0'" : "");
    else if (paranoid == KMSI_UNREAD)
        snprintf(buf, cap, "this kernel has no kernel.perf_event_paranoid (no CONFIG_PERF_EVENTS), "
                 "so even with kernel.kptr_restrict 0 it shows them only to readers with "
                 "CAP_SYSLOG: read it as root (with CAP_SYSLOG)");
    else if (!for_perf)
        snprintf(buf, cap, "kernel.perf_event_paranoid is %d, so the kernel shows them only to "
                 "readers with CAP_SYSLOG: read it as root (with CAP_SYSLOG), or set "
                 "'sysctl kernel.perf_event_paranoid=1'", paranoid);
    else /* shown to everyone now: hidden when the file was opened, or by a security module */
        snprintf(buf, cap, "the kernel hid them when it was read (now kernel.kptr_restrict is %d, "
                 "kernel.perf_event_paranoid %d, and this process %s CAP_SYSLOG): read it again",
                 kptr_restrict, paranoid, cap_syslog == 0 ? "lacks" : "may lack");
}

/* The KMS_E_HIDDEN error: for the running kernel its real cause; for a
 * saved copy the rule, since whoever saved it was the reader. */
static int hidden_error(const struct kallsyms_source *src, kms_error *err)
{
    char cause[300];
    int kptr = KMSI_UNREAD, paranoid = KMSI_UNREAD;
    if (!src->live)
        return kmsi_fail(err, KMS_E_HIDDEN, "%s: every address is 0: the kernel hid them from "
                         "whoever saved it (kernel.kptr_restrict, kernel.perf_event_paranoid and "
                         "CAP_SYSLOG decide): save /proc/kallsyms again as root", src->name);
    read_int("/proc/sys/kernel/kptr_restrict", &kptr);
    read_int("/proc/sys/kernel/perf_event_paranoid", &paranoid);
    kmsi_hidden_cause(kptr, paranoid, has_cap_syslog(), cause, sizeof cause);
    return kmsi_fail(err, KMS_E_HIDDEN, "%s: every address is 0: %s", src->name, cause);
}

/* kmodsyms.scan.sysmap.Kallsyms._parse: the rows and names of every line. */
int kmsi_parse_kallsyms(kms_handle *h, const struct kallsyms_source *src, kms_error *err)
{
    struct parse ps = {0};
    size_t expect = src->len ? src->len : READ_BLOCK; /* the names are at most this */
    struct scratch_mark mark = kmsi_scratch_mark(h);
    char *block;
    int rc;

    ps.source = src->name;
    h->nmods = 1;
    /* Room for the names and rows of EXPECT bytes of text, each line at
     * least 13: pages are touched only as rows and names fill them. */
    ps.names_cap = expect + 8;
    ps.cap = expect / 13 + 1;
    if (ps.cap > SIZE_MAX / sizeof *h->line || /* a 32-bit host's multi-GB buffer */
        !(h->text = kmsi_alloc_hugeable(ps.names_cap)) ||
        !(h->line = kmsi_alloc_hugeable(ps.cap * sizeof *h->line))) {
        rc = kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", src->name);
        goto out;
    }
    if (src->fd < 0) {
        size_t used;
        advise_sample(h, &ps, src->buf, src->len < READ_BLOCK ? src->len : READ_BLOCK, src->len);
        if (src->len && (rc = parse_block(h, &ps, src->buf, src->len, 1, &used, err))) {
            name_binary(err, src->name, (const unsigned char *)src->buf,
                        src->len < HEAD ? src->len : HEAD);
            goto out;
        }
    } else {
        size_t cap = READ_BLOCK, have = 0, total = 0, nhead = 0;
        unsigned char head[HEAD];
        if (!SCRATCH(h, block, cap)) {
            rc = kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", src->name);
            goto out;
        }
        for (;;) {
            ssize_t got = read(src->fd, block + have, cap - have);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0) {
                rc = kmsi_fail(err, KMS_E_IO, "cannot read %s: %s", src->name, strerror(errno));
                goto out;
            }
            total += (size_t)got;
            if (total >= UINT32_MAX) {
                rc = kmsi_fail(err, KMS_E_KALLSYMS, "%s: larger than 4 GiB: not a kallsyms file",
                               src->name);
                goto out;
            }
            size_t used;
            have += (size_t)got;
            if (total == have && src->len)
                advise_sample(h, &ps, block, have, src->len);
            if (total == have) { /* the file's first bytes */
                nhead = have < HEAD ? have : HEAD;
                memcpy(head, block, nhead);
            }
            if ((rc = parse_block(h, &ps, block, have, got == 0, &used, err))) {
                name_binary(err, src->name, head, nhead);
                goto out;
            }
            if (got == 0)
                break;
            if (total < src->len) { /* the rows and names of the whole file, at this rate */
                uint64_t rows = (uint64_t)h->n * sizeof *h->line, left = src->len - total;
                kmsi_advise_huge(h->line, ps.cap * sizeof *h->line, &ps.rows_asked, rows,
                                 rows + rows * left / total);
                kmsi_advise_huge(h->text, ps.names_cap, &ps.names_asked, ps.names_len,
                                 ps.names_len + (uint64_t)ps.names_len * left / total);
            }
            memmove(block, block + used, have - used);
            have -= used;
            if (have == cap) { /* a line longer than the block */
                char *nb;
                if (cap > SIZE_MAX / 4 || !SCRATCH(h, nb, cap *= 2)) {
                    rc = kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", src->name);
                    goto out;
                }
                block = memcpy(nb, block, have);
            }
        }
    }
    if (h->core_lines == h->n)
        h->modules_from = h->n;
    if (ps.nonblank == 0) {
        rc = kmsi_fail(err, KMS_E_KALLSYMS, "%s: no symbols: the file is empty or blank (is "
                       "this a kallsyms file?)", src->name);
        goto out;
    }
    if (!ps.any_nonzero) {
        rc = hidden_error(src, err);
        goto out;
    }
    if (names_room(h, &ps, 0) || !(h->mod_name = calloc(h->nmods, sizeof *h->mod_name)) ||
        !(h->mod_origin = calloc(h->nmods, 1))) {
        rc = kmsi_fail(err, KMS_E_NOMEM, "out of memory reading %s", src->name);
        goto out;
    }
    memset(h->text + ps.names_len, 0, 8);
    h->mod_name[0] = kmsi_vmlinux_list[0];
    h->mod_origin[0] = KMS_ORIGIN_CORE;
    for (uint32_t m = 1; m < h->nmods; m++) {
        h->mod_name[m] = h->text + ps.tagoff[m];
        h->mod_origin[m] = kmsi_is_pseudo_module(h->mod_name[m]) ? KMS_ORIGIN_PSEUDO
                                                                : KMS_ORIGIN_LOADABLE;
    }
    rc = KMS_OK;
out:
    kmsi_scratch_release(h, mark);
    free(ps.tagh);
    free(ps.tagoff);
    free(ps.taglen);
    return rc;
}
