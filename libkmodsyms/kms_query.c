// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Queries, the end of the pipeline: the public kms_resolve(),
 * kms_resolve_many(), kms_lookup(), kms_lookup_name(), kms_line_at(),
 * kms_foreach(), kms_module_lines(), kms_module_ranges(),
 * kms_module_spans(), kms_module_known(), kms_builtin_modules(),
 * kms_get_info() and kms_modules(), reading only the handle's index
 * (kms_index.c) and never writing it (docs/resolver.md §4-6).  Each fills
 * the caller's growable structs (kmodsyms.h) through put_fitting().
 */
#include "kms_internal.h"

#include <stddef.h>

/* Lines called NAME (LEN bytes), in kallsyms order: call FN(line) for each
 * until it returns nonzero; that line, or -1.  A scan (no name index is
 * kept: lookups by name are rare, and the lines' lengths are compared first). */
static long find_lines(const kms_handle *h, const char *name, size_t len,
                       int (*fn)(const kms_handle *, size_t, void *), void *arg)
{
    for (size_t i = 0; i < h->n; i++)
        if (h->line[i].name_len == len && memcmp(line_name(h, i), name, len) == 0 && fn(h, i, arg))
            return (long)i;
    return NO;
}

/* A record's fields that are its owner's (struct owner). */
static inline void put_owner(const struct owner *o, struct kms_sym *out)
{
    out->dso = o->dso;
    out->modules = o->modules;
    out->object = o->object;
    out->candidates = o->candidates;
    out->nmodules = o->nmodules;
    out->ncandidates = o->ncandidates;
    out->origin = o->origin;
    out->ambiguous = o->ambiguous;
    out->reserved[0] = out->reserved[1] = 0;
}

/*
 * The answer record (docs/resolver.md §5) for ADDRESS answered by ANSWER (a piece's: a line,
 * PIECE_SIZED when its interval holds ADDRESS, or PIECE_NO_LINE with the
 * owner of the object holding ADDRESS, OWNER_NONE for none): every field
 * of OUT but its size written, from the line and from its owner.
 */
static void record(const kms_handle *h, uint64_t address, uint32_t answer, struct kms_sym *out)
{
    uint32_t index = answer & PIECE_INDEX;
    out->address = address;
    if (answer & PIECE_NO_LINE) {
        put_owner(&h->owner[index], out);
        out->sym = NULL;
        out->sym_len = 0;
        out->line = UINT32_MAX;
        out->symoff = out->sym_start = out->sym_end = out->sym_size = 0;
        out->sym_binding = KMS_BINDING_UNKNOWN;
        out->type = 0;
        out->sized = 0;
        out->size_kind = KMS_SIZE_UNKNOWN;
        return;
    }
    const struct line *l = h->line + index;
    put_owner(&h->owner[h->owner_first[WHO_TAG(l->who)] + WHO_INDEX(l->who)], out);
    int64_t size = kmsi_line_size(h, index, &out->size_kind);
    out->sym = h->text + l->name;
    out->sym_len = l->name_len;
    out->line = index;
    out->sym_start = l->addr;
    out->symoff = address - l->addr;
    out->sym_size = size > 0 ? (uint64_t)size : 0;
    out->sym_end = l->addr + out->sym_size;
    out->sized = (uint8_t)(answer >> 31);
    out->type = (char)l->type;
    out->sym_binding = l->binding;
}

/*
 * An address on its way to its piece's answer.  The steps below are the
 * whole search; kms_resolve runs them one after the other, kms_resolve_many
 * runs each over a batch of addresses before the next, so that the cache
 * misses of a batch's addresses (their buckets, then their pieces, then
 * their lines) are fetched all at once rather than one after the other.
 */
struct probe {
    uint64_t offset;             /* the address less its cluster's base */
    const struct bucket *bucket; /* the bucket holding offset (the cluster's last for
                                  * offsets at or above its last piece's) */
    const struct piece *piece;   /* pieces piece[0..count]: the last starting at or
                                  * below offset holds it */
    uint32_t count;
    uint32_t answer;             /* piece[0]'s answer (the bucket's) */
};

/* The first step: Q's cluster (the last whose base is at or below Q) and
 * bucket.  An offset at or above the cluster's last piece's start takes
 * that start's bucket, whose pieces end with that piece: the search then
 * finds it. */
static inline void probe_bucket(const kms_handle *h, uint64_t q, struct probe *p)
{
    const struct cluster *cl = h->cluster;
    size_t n = h->ncluster;
    while (n > 1) {
        size_t half = n / 2;
        if (cl[half].base <= q) {
            cl += half;
            n -= half;
        } else {
            n = half;
        }
    }
    p->offset = q - cl->base;
    uint64_t within = p->offset < cl->last_low ? p->offset : cl->last_low;
    p->bucket = h->bucket + cl->bucket + (within >> cl->shift);
}

/* The second: the bucket's pieces (read from the bucket). */
static inline void probe_pieces(const kms_handle *h, struct probe *p)
{
    const struct bucket *bk = p->bucket;
    p->piece = h->piece + bk[0].first;
    p->count = bk[1].first - bk[0].first;
    p->answer = bk[0].answer;
}

/* The last: the answer of the piece holding the offset. */
static inline uint32_t probe_answer(const struct probe *p)
{
    if (p->count == 0) /* one piece holds the bucket (every other bucket): no piece is read */
        return p->answer;
    /* the last of pieces 0..count starting at or below the offset (0 does),
     * without branches on the data: a mispredicted branch would stall the
     * next resolve's loads too */
    const struct piece *pc = p->piece;
    size_t n = (size_t)p->count + 1;
    while (n > 1) {
        size_t half = n / 2;
        pc = pc[half].low <= p->offset ? pc + half : pc;
        n -= half;
    }
    return pc->answer;
}

/* The row of ANSWER's line, to fetch ahead (line 0's for none: no branch). */
static inline const struct line *answer_line(const kms_handle *h, uint32_t answer)
{
    return h->line + (answer & PIECE_NO_LINE ? 0 : answer & PIECE_INDEX);
}

/* The record of ADDR answered by ANSWER into a caller's OUT, as much of it
 * as OUT->size covers. */
static void record_for_caller(const kms_handle *h, uint64_t addr, uint32_t answer,
                              struct kms_sym *out)
{
    if (caller_size(out) >= sizeof *out) {
        record(h, addr, answer, out);
    } else {
        struct kms_sym whole;
        record(h, addr, answer, &whole);
        put_fitting(out, &whole, sizeof whole);
    }
}

void kms_resolve(const kms_handle *h, uint64_t addr, struct kms_sym *out)
{
    struct probe p;
    probe_bucket(h, addr, &p);
    probe_pieces(h, &p);
    record_for_caller(h, addr, probe_answer(&p), out);
}

/* Addresses each step of kms_resolve_many runs over before the next step
 * reads what it fetched: enough misses in flight to hide each one's wait.
 * 32 was the fastest of 8..256 in most runs (docs/loader.md, "Cost of
 * libkmodsyms"). */
#define RESOLVE_BATCH 32

/* The first two steps over ADDRS[0..M) (M <= RESOLVE_BATCH), each step's
 * reads fetched for the next: what remains is probe_answer(). */
static inline void probe_batch(const kms_handle *h, const uint64_t *addrs, size_t m,
                               struct probe *p)
{
    for (size_t i = 0; i < m; i++) {
        probe_bucket(h, addrs[i], &p[i]);
        PREFETCH(p[i].bucket);
    }
    for (size_t i = 0; i < m; i++) {
        probe_pieces(h, &p[i]);
        PREFETCH(p[i].piece);
        PREFETCH(p[i].piece + p[i].count);
    }
}

void kms_resolve_many(const kms_handle *h, const uint64_t *addrs, size_t n, struct kms_sym *out)
{
    struct probe p[RESOLVE_BATCH];
    uint32_t answer[RESOLVE_BATCH];
    size_t stride = caller_stride(out, n);
    if (!stride)
        return;
    for (size_t at = 0; at < n; at += RESOLVE_BATCH) {
        size_t m = n - at < RESOLVE_BATCH ? n - at : RESOLVE_BATCH;
        probe_batch(h, addrs + at, m, p);
        for (size_t i = 0; i < m; i++) {
            answer[i] = probe_answer(&p[i]);
            PREFETCH(answer_line(h, answer[i]));
        }
        if (stride == sizeof *out) {
            for (size_t i = 0; i < m; i++) {
                out[at + i].size = stride;
                record(h, addrs[at + i], answer[i], out + at + i);
            }
        } else {
            for (size_t i = 0; i < m; i++) {
                struct kms_sym whole;
                record(h, addrs[at + i], answer[i], &whole);
                put_element(out, stride, at + i, &whole, sizeof whole);
            }
        }
    }
}

/*
 * kms_resolve_many's search, writing only what a columnar caller keeps:
 * the answering line's index (UINT32_MAX: none) and whether its interval
 * holds the address, without filling a record per address.
 */
void kms_resolve_lines(const kms_handle *h, const uint64_t *addrs, size_t n, uint32_t *line,
                       uint8_t *sized)
{
    struct probe p[RESOLVE_BATCH];
    for (size_t at = 0; at < n; at += RESOLVE_BATCH) {
        size_t m = n - at < RESOLVE_BATCH ? n - at : RESOLVE_BATCH;
        probe_batch(h, addrs + at, m, p);
        for (size_t i = 0; i < m; i++) {
            uint32_t answer = probe_answer(&p[i]);
            line[at + i] = answer & PIECE_NO_LINE ? UINT32_MAX : answer & PIECE_INDEX;
            sized[at + i] = (uint8_t)(answer >> 31);
        }
    }
}

/*
 * The record of ADDRESS answered by kallsyms line INDEX (sized when the
 * line's symbol holds ADDRESS), as kms_resolve fills it: for a caller that
 * kept a line index (kms_resolve_lines) and wants the whole answer.
 */
void kms_line_sym(const kms_handle *h, uint32_t index, uint64_t address, struct kms_sym *out)
{
    const struct line *l = h->line + index;
    /* sized as kms_resolve's answers are (R26): the exact size holds the
     * address, and an interval whose end would pass 2^64 (a damaged size)
     * holds none, as the pieces' walk up the address space never meets it */
    uint64_t end = l->addr + (uint64_t)l->size;
    int sized = l->size > 0 && end > l->addr && address >= l->addr && address < end;
    record_for_caller(h, address, index | (sized ? PIECE_SIZED : 0), out);
}

struct lookup_ctx {
    const char *mod;    /* the module asked for (not NUL-terminated), or NULL */
    size_t modlen;
    uint64_t offset;    /* the record's address: the symbol's + offset */
    void *out;          /* the caller's records, STRIDE apart */
    size_t stride, max, found;
};

/* Whether module NAME is MOD (MODLEN bytes, '-' read as '_': R34). */
static int module_is(const char *name, const char *mod, size_t modlen)
{
    if (strnlen(name, modlen + 1) != modlen)
        return 0;
    for (size_t k = 0; k < modlen; k++)
        if (name[k] != (mod[k] == '-' ? '_' : mod[k]))
            return 0;
    return 1;
}

/* Whether REC's module list, or one of its candidates', holds MOD. */
static int record_in(const struct kms_sym *rec, const char *mod, size_t modlen)
{
    for (uint32_t k = 0; k < rec->nmodules; k++)
        if (module_is(rec->modules[k], mod, modlen))
            return 1;
    for (uint32_t j = 0; j < rec->ncandidates; j++)
        for (uint32_t k = 0; k < rec->candidates[j].nmodules; k++)
            if (module_is(rec->candidates[j].modules[k], mod, modlen))
                return 1;
    return 0;
}

/* R33: one record for every kallsyms line of the name, core, loadable and
 * pseudo, at the line's address plus the offset; R34: only those of MOD. */
static int lookup_one(const kms_handle *h, size_t line, void *arg)
{
    struct lookup_ctx *c = arg;
    struct kms_sym rec;
    const struct line *l = &h->line[line];
    uint64_t address = l->addr + c->offset;
    /* the record of the address OFFSET bytes into the symbol (DTrace's
     * mod`sym+0xoff): inside it when its exact size holds the offset */
    int inside = l->size > 0 && c->offset < (uint64_t)l->size;
    record(h, address, (uint32_t)line | (inside ? PIECE_SIZED : 0), &rec);
    if (c->mod && !record_in(&rec, c->mod, c->modlen))
        return 0;
    if (c->found < c->max)
        put_element(c->out, c->stride, c->found, &rec, sizeof rec);
    c->found++;
    return 0;
}

static size_t lookup(const kms_handle *h, const char *mod, size_t modlen, const char *name,
                     size_t len, uint64_t offset, struct kms_sym *out, size_t max)
{
    struct lookup_ctx c = {mod, modlen, offset, out, caller_stride(out, max), max, 0};
    if (!c.stride)
        c.max = 0;
    find_lines(h, name, len, lookup_one, &c);
    return c.found;
}

/* The offset of a spec's "+OFF" (hex, 0x optional) at P (LEN bytes); -1 when it is none. */
static int parse_offset(const char *p, size_t len, uint64_t *off)
{
    uint64_t v = 0;
    if (len >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        p += 2;
        len -= 2;
    }
    if (!len || len > 16)
        return -1;
    for (size_t k = 0; k < len; k++) {
        int d = (p[k] >= '0' && p[k] <= '9') ? p[k] - '0'
              : (p[k] >= 'a' && p[k] <= 'f') ? p[k] - 'a' + 10
              : (p[k] >= 'A' && p[k] <= 'F') ? p[k] - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (unsigned)d;
    }
    *off = v;
    return 0;
}

size_t kms_lookup(const kms_handle *h, const char *spec, struct kms_sym *out, size_t max)
{
    const char *tick, *name = spec, *mod = NULL, *plus;
    size_t modlen = 0, len;
    uint64_t offset = 0;
    if (!h || !spec)
        return 0;
    if ((tick = strrchr(spec, '`')) != NULL) {
        mod = spec;
        modlen = (size_t)(tick - spec);
        name = tick + 1;
    }
    len = strlen(name);
    /* R52: DTrace's mod`name+0xoff, the last '+' followed by a hex number */
    if ((plus = strrchr(name, '+')) != NULL && plus > name &&
        parse_offset(plus + 1, len - (size_t)(plus + 1 - name), &offset) == 0)
        len = (size_t)(plus - name);
    return lookup(h, mod, modlen, name, len, offset, out, max);
}

size_t kms_lookup_name(const kms_handle *h, const char *mod, const char *name, uint64_t offset,
                       struct kms_sym *out, size_t max)
{
    if (!h || !name)
        return 0;
    return lookup(h, mod, mod ? strlen(mod) : 0, name, strlen(name), offset, out, max);
}

/* Line I as kallmodsyms shows it (what kms_foreach() hands over). */
static void fill_line(const kms_handle *h, size_t i, struct kms_line *l)
{
    struct kms_sym rec;
    int64_t size;
    memset(l, 0, sizeof *l);
    l->size = sizeof *l;
    record(h, h->line[i].addr, (uint32_t)i, &rec);
    l->address = h->line[i].addr;
    size = kmsi_line_size(h, i, &l->size_kind);
    l->sym_size = size > 0 ? (uint64_t)size : 0;
    l->type = (char)h->line[i].type;
    l->name = rec.sym;
    l->name_len = rec.sym_len;
    l->index = (uint32_t)i;
    l->origin = rec.origin;
    l->sym_binding = rec.sym_binding;
    l->object = rec.object;
    /* kallmodsyms shows no module for the core kernel */
    l->nmodules = rec.origin == KMS_ORIGIN_CORE ? 0 : rec.nmodules;
    l->modules = rec.modules;
    if (rec.ambiguous) {
        /* R52: the candidates' one module set, else none */
        uint32_t amb = WHO_INDEX(h->line[i].who);
        const uint32_t *ms = h->cand_modset + h->amb_first[amb];
        uint32_t n = h->amb_count[amb], k = 1;
        while (k < n && ms[k] == ms[0])
            k++;
        l->nmodules = 0;
        if (k == n) {
            const unsigned char *set = ent(h, T_MODSETS, ms[0]);
            l->nmodules = le32(set + MODSET_COUNT);
            l->modules = h->member_name + le32(set + MODSET_FIRST);
        }
    }
}

int kms_line_at(const kms_handle *h, uint32_t index, struct kms_line *out)
{
    struct kms_line whole;
    if (!h || !out || index >= h->n)
        return KMS_E_ARG;
    fill_line(h, index, &whole);
    put_fitting(out, &whole, sizeof whole);
    return KMS_OK;
}

int kms_foreach(const kms_handle *h, int (*cb)(const struct kms_line *line, void *arg),
                void *arg)
{
    for (size_t i = 0; i < h->n; i++) {
        struct kms_line l;
        fill_line(h, i, &l);
        int r = cb(&l, arg);
        if (r)
            return r;
    }
    return 0;
}

/* MOD ('-' read as '_') copied to WANT (CAP bytes); 0 when too long. */
static int module_name(const char *mod, char *want, size_t cap)
{
    size_t len = strlen(mod);
    if (len >= cap)
        return 0;
    for (size_t k = 0; k <= len; k++)
        want[k] = mod[k] == '-' ? '_' : mod[k];
    return 1;
}

/* Whether line L (as fill_line() gives it) is of module WANT: its module
 * list holds it, or WANT is "vmlinux" and it is the core kernel's. */
static int line_of(const struct kms_line *l, const char *want)
{
    if (l->origin == KMS_ORIGIN_CORE && l->nmodules == 0)
        return strcmp(want, "vmlinux") == 0;
    for (uint32_t k = 0; k < l->nmodules; k++)
        if (strcmp(l->modules[k], want) == 0)
            return 1;
    return 0;
}

size_t kms_module_lines(const kms_handle *h, const char *mod, uint32_t *index, size_t max)
{
    char want[256];
    size_t count = 0;
    if (!h || !mod || !module_name(mod, want, sizeof want))
        return 0;
    if (!index)
        max = 0;
    for (size_t i = 0; i < h->n; i++) {
        struct kms_line l;
        fill_line(h, i, &l);
        if (!line_of(&l, want))
            continue;
        if (count < max)
            index[count] = (uint32_t)i;
        count++;
    }
    return count;
}

size_t kms_builtin_modules(const kms_handle *h, const char **out, size_t max)
{
    if (!h)
        return 0;
    for (uint32_t m = 0; out && m < max && m < h->count[T_MODULES]; m++)
        out[m] = str(h, le32(ent(h, T_MODULES, m)));
    return h->count[T_MODULES];
}

/* Ranges on their way to a caller's array: the last one open, to grow. */
struct ranges {
    void *out;
    size_t stride, max, count;
    int open;
    struct kms_range cur;
};

static void range_close(struct ranges *r)
{
    if (r->open && r->count < r->max)
        put_element(r->out, r->stride, r->count, &r->cur, sizeof r->cur);
    r->count += r->open;
    r->open = 0;
}

/* Add [START, END) of kind TEXT; it grows the open range when that is of
 * the same kind and JOIN says the bytes between them are the module's. */
static void range_add(struct ranges *r, uint64_t start, uint64_t end, int text, int join)
{
    if (r->open && join && r->cur.text == text && start >= r->cur.start) {
        if (end > r->cur.end)
            r->cur.end = end;
        return;
    }
    range_close(r);
    memset(&r->cur, 0, sizeof r->cur);
    r->cur.size = sizeof r->cur;
    r->cur.start = start;
    r->cur.end = end;
    r->cur.text = (uint8_t)text;
    r->open = 1;
}

static void ranges_init(struct ranges *r, void *out, size_t max)
{
    memset(r, 0, sizeof *r);
    r->out = out;
    r->stride = caller_stride(out, max);
    r->max = r->stride ? max : 0;
}

/* R50, R51: the one text and one data range of a loaded or pseudo-module
 * M: [lowest, highest end) of its answering lines of each kind, a line
 * ending at its address + its exact or estimated size, or + 1 (none). */
static void loaded_ranges(const kms_handle *h, uint32_t m, struct ranges *r, int spans)
{
    uint64_t lo[2] = {UINT64_MAX, UINT64_MAX}, hi[2] = {0, 0};
    for (uint32_t k = h->group_first[m]; k < h->group_first[m + 1]; k++) {
        uint32_t i = h->grouped[k];
        uint8_t t = h->line[i].type, kind;
        int text = t == 't' || t == 'T' || (spans && (t == 'w' || t == 'W'));
        int64_t size = kmsi_line_size(h, i, &kind);
        uint64_t a = h->line[i].addr, len = size > 0 ? (uint64_t)size : 1;
        uint64_t end = a + len > a ? a + len : UINT64_MAX;
        lo[text] = a < lo[text] ? a : lo[text];
        hi[text] = end > hi[text] ? end : hi[text];
    }
    int first = lo[1] < lo[0]; /* ascending */
    for (int j = 0; j < 2; j++) {
        int text = j == 0 ? first : !first;
        if (lo[text] < hi[text])
            range_add(r, lo[text], hi[text], text, 0);
    }
}

/* The loaded or pseudo-module WANT names (index into mod_name), 0 for none. */
static uint32_t loaded_index(const kms_handle *h, const char *want)
{
    for (uint32_t m = 1; m < h->nmods; m++)
        if (strcmp(h->mod_name[m], want) == 0)
            return m;
    return 0;
}

/* The built-in module WANT names (index into the file's modules), or
 * UINT32_MAX; *CORE set when it is vmlinux.  0 when it is neither. */
static int builtin_index(const kms_handle *h, const char *want, uint32_t *builtin, int *core)
{
    *core = strcmp(want, "vmlinux") == 0;
    *builtin = UINT32_MAX;
    for (uint32_t m = 0; m < h->count[T_MODULES] && !*core; m++)
        if (strcmp(str(h, le32(ent(h, T_MODULES, m))), want) == 0)
            *builtin = m;
    return *core || *builtin != UINT32_MAX;
}

/* The module kms_module_ranges() or kms_module_spans() is asked about. */
struct asked {
    char name[256];    /* as the kernel spells it ('-' read as '_') */
    uint32_t loaded;   /* a loaded or pseudo-module: its index (mod_name), else 0 */
    uint32_t builtin;  /* a built-in module: its index in the file, else UINT32_MAX */
    int core;          /* vmlinux */
};

/* MOD into A: 0 when it is no module of the handle. */
static int ask_module(const kms_handle *h, const char *mod, struct asked *a)
{
    if (!h || !mod || !module_name(mod, a->name, sizeof a->name))
        return 0;
    a->builtin = UINT32_MAX;
    a->core = 0;
    return (a->loaded = loaded_index(h, a->name)) != 0 ||
           builtin_index(h, a->name, &a->builtin, &a->core);
}

/* Whether placed extent K is of an object of the built-in module BUILTIN
 * (CORE: of no module). */
static int extent_member(const kms_handle *h, uint32_t k, uint32_t builtin, int core)
{
    if (h->ext[k].sec >= h->count[T_SECTIONS])
        return 0; /* a loaded module's .ko section */
    const unsigned char *se = ent(h, T_SECTIONS, h->ext[k].sec);
    const unsigned char *ob = ent(h, T_OBJECTS, le32(se + SEC_OBJECT));
    const unsigned char *ms = ent(h, T_MODSETS, le32(ob + OBJ_MODSET));
    uint32_t first = le32(ms + MODSET_FIRST), n = le32(ms + MODSET_COUNT);
    if (core)
        return n == 0;
    for (uint32_t j = 0; j < n; j++)
        if (le32(ent(h, T_MEMBERS, first + j)) == builtin)
            return 1;
    return 0;
}

/* R50 for vmlinux or a built-in module A: the placed sections of its
 * objects, from the first extent addresses see (a per-cpu section's are
 * offsets, not addresses); two of one kind with no other extent between
 * them are one range when the gap between them is less than the second's
 * alignment, ld's padding. */
static void builtin_ranges(const kms_handle *h, const struct asked *a, struct ranges *r)
{
    int last_member = 0;
    for (uint32_t k = h->ext_first; k < h->next; k++) {
        if (!extent_member(h, k, a->builtin, a->core)) {
            last_member = 0;
            continue;
        }
        uint64_t start = h->ext_start[k], align = start & (~start + 1);
        int join = last_member && r->open &&
                   (start <= r->cur.end || !align || start - r->cur.end < align);
        range_add(r, start, h->ext[k].end,
                  (le32(ent(h, T_SECTIONS, h->ext[k].sec) + SEC_FLAGS) & SHF_EXECINSTR) ||
                      (h->placed[h->ext[k].sec] & HOLDS_TEXT),
                  join);
        last_member = 1;
    }
}

/* R51 for vmlinux or a built-in module A: runs of its lines among the core
 * kernel's by address (per-cpu 'A' lines answer no address and are in
 * none), text the t/T/w/W lines. */
static void builtin_spans(const kms_handle *h, const struct asked *a, struct ranges *r)
{
    int run = 0;
    for (uint32_t k = h->group_first[0]; k < h->group_first[1]; k++) {
        struct kms_line l;
        uint32_t i = h->grouped[k];
        fill_line(h, i, &l);
        if (l.sym_size == 0)
            continue; /* R51: dt_module.c reads no range from a size-0 line */
        if (!line_of(&l, a->name)) {
            run = 0;
            continue;
        }
        int text = l.type == 't' || l.type == 'T' || l.type == 'w' || l.type == 'W';
        uint64_t end = l.address + l.sym_size >= l.address ? l.address + l.sym_size : UINT64_MAX;
        range_add(r, l.address, end, text, run);
        run = 1;
    }
}

/* Module MOD's ranges (SPANS 0, R50) or spans (SPANS 1, R51) into OUT. */
static size_t module_ranges(const kms_handle *h, const char *mod, struct kms_range *out,
                            size_t max, int spans)
{
    struct asked a;
    struct ranges r;
    if (!ask_module(h, mod, &a))
        return 0;
    ranges_init(&r, out, max);
    if (a.loaded)
        loaded_ranges(h, a.loaded, &r, spans);
    else if (spans)
        builtin_spans(h, &a, &r);
    else
        builtin_ranges(h, &a, &r);
    range_close(&r);
    return r.count;
}

size_t kms_module_ranges(const kms_handle *h, const char *mod, struct kms_range *out, size_t max)
{
    return module_ranges(h, mod, out, max, 0);
}

size_t kms_module_spans(const kms_handle *h, const char *mod, struct kms_range *out, size_t max)
{
    return module_ranges(h, mod, out, max, 1);
}

int kms_module_known(const kms_handle *h, const char *mod)
{
    size_t len = strlen(mod);
    if (module_is("vmlinux", mod, len))
        return 1;
    for (uint32_t m = 0; m < h->count[T_MODULES]; m++)
        if (module_is(str(h, le32(ent(h, T_MODULES, m) + MOD_NAME)), mod, len))
            return 1;
    for (uint32_t m = 1; m < h->nmods; m++)
        if (module_is(h->mod_name[m], mod, len))
            return 1;
    return 0;
}

/* The public flags are the format's (kms_format.h, from its one table). */
_Static_assert(KMS_FILE_MISSING_OBJECTS == FLAG_MISSING_OBJECTS &&
                   KMS_FILE_FROM_DEBUG_INFO == FLAG_FROM_DEBUG_INFO &&
                   KMS_FILE_GUESSED_MODULES == FLAG_GUESSED_MODULES &&
                   KMS_FILE_FORCED == FLAG_FORCED,
               "kmodsyms.h's KMS_FILE_* differ from kms_format.h's FLAG_*");

void kms_get_info(const kms_handle *h, struct kms_info *caller)
{
    struct kms_info all, *out = &all;
    memset(&all, 0, sizeof all);
    out->kernel_release = h->release;
    out->build_id = h->build_id;
    out->lines = h->n;
    out->core_lines = h->core_lines;
    out->segments = h->count[T_SEGMENTS];
    out->anchors = h->count[T_ANCHORS];
    out->anchors_verified = h->anchors_verified;
    out->builtin_modules_known = !h->degraded[0];
    out->degraded = h->degraded;
    out->warning = h->warning;
    out->file_flags = h->map && h->map_size >= HDR_FLAGS + 4 ? le32(h->map + HDR_FLAGS) : 0;
    put_fitting(caller, &all, sizeof all);
}

size_t kms_modules(const kms_handle *h, struct kms_module *out, size_t max)
{
    size_t stride = caller_stride(out, max);
    for (size_t k = 0; stride && k < max && k < h->mods.nstatus; k++)
        put_element(out, stride, k, &h->mods.status[k], sizeof h->mods.status[k]);
    return h->mods.nstatus;
}
