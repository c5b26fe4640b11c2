// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Queries, the end of the pipeline: the public kms_resolve(),
 * kms_resolve_many(), kms_lookup(), kms_foreach(), kms_module_ranges(),
 * kms_module_known(), kms_get_info() and kms_modules(), reading only the
 * handle's index (kms_index.c) and never writing it (docs/resolver.md §4-6).
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

/*
 * The answer record (docs/resolver.md §5) for ADDRESS answered by ANSWER (a piece's: a line,
 * PIECE_SIZED when its interval holds ADDRESS, or PIECE_NO_LINE with the
 * owner of the object holding ADDRESS, OWNER_NONE for none), every byte of
 * OUT written (its padding zeroed or from the owner's tail, so that records
 * compare with memcmp).
 */
static void record(const kms_handle *h, uint64_t address, uint32_t answer, struct kms_sym *out)
{
    uint32_t index = answer & PIECE_INDEX;
    if (answer & PIECE_NO_LINE) {
        memcpy((char *)out + OWNER_AT, h->owner[index].tail, OWNER_SIZE);
        memset(out, 0, OWNER_AT);
        out->address = address;
        out->size = -1;
        out->sym_binding = KMS_BINDING_UNKNOWN;
        return;
    }
    const struct line *l = h->line + index;
    memcpy((char *)out + OWNER_AT, h->owner[h->owner_first[WHO_TAG(l->who)] + WHO_INDEX(l->who)].tail,
           OWNER_SIZE);
    memset((char *)out + offsetof(struct kms_sym, sym_len), 0,
           offsetof(struct kms_sym, symoff) - offsetof(struct kms_sym, sym_len));
    out->address = address;
    out->sym = h->text + l->name;
    out->sym_len = l->name_len;
    out->sym_start = l->addr;
    out->symoff = address - l->addr;
    out->size = l->size;
    out->sym_end = l->addr + (l->size > 0 ? (uint64_t)l->size : 0);
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

void kms_resolve(const kms_handle *h, uint64_t addr, struct kms_sym *out)
{
    struct probe p;
    probe_bucket(h, addr, &p);
    probe_pieces(h, &p);
    /* The first piece's line, fetched while the pieces are searched: the
     * address is in that piece 2 times in 3 (uniform over the core kernel),
     * and the two loads, a cache miss each, then overlap. */
    PREFETCH(answer_line(h, p.answer));
    record(h, addr, probe_answer(&p), out);
}

/* Addresses each step of kms_resolve_many runs over before the next step
 * reads what it fetched: enough misses in flight to hide each one's wait.
 * 32 was the fastest of 8..256 in most runs (docs/loader.md, "Cost of
 * libkmodsyms"). */
#define RESOLVE_BATCH 32

void kms_resolve_many(const kms_handle *h, const uint64_t *addrs, size_t n, struct kms_sym *out)
{
    struct probe p[RESOLVE_BATCH];
    uint32_t answer[RESOLVE_BATCH];
    for (size_t at = 0; at < n; at += RESOLVE_BATCH) {
        size_t m = n - at < RESOLVE_BATCH ? n - at : RESOLVE_BATCH;
        for (size_t i = 0; i < m; i++) {
            probe_bucket(h, addrs[at + i], &p[i]);
            PREFETCH(p[i].bucket);
        }
        for (size_t i = 0; i < m; i++) {
            probe_pieces(h, &p[i]);
            PREFETCH(p[i].piece);
            PREFETCH(p[i].piece + p[i].count);
        }
        for (size_t i = 0; i < m; i++) {
            answer[i] = probe_answer(&p[i]);
            PREFETCH(answer_line(h, answer[i]));
        }
        for (size_t i = 0; i < m; i++)
            record(h, addrs[at + i], answer[i], out + at + i);
    }
}

struct lookup_ctx {
    const char *mod;    /* MOD of "MOD`NAME" (not NUL-terminated), or NULL */
    size_t modlen;
    struct kms_sym *out;
    size_t max, found;
};

/* Whether module NAME is MOD (MODLEN bytes, '-' read as '_'). */
static int module_is(const char *name, const char *mod, size_t modlen)
{
    if (strnlen(name, modlen + 1) != modlen)
        return 0;
    for (size_t k = 0; k < modlen; k++)
        if (name[k] != (mod[k] == '-' ? '_' : mod[k]))
            return 0;
    return 1;
}

static int lookup_one(const kms_handle *h, size_t line, void *arg)
{
    struct lookup_ctx *c = arg;
    struct kms_sym rec;
    record(h, h->line[line].addr, (uint32_t)line | (h->line[line].size > 0 ? PIECE_SIZED : 0), &rec);
    if (c->mod) {
        int in = 0;
        for (uint32_t k = 0; k < rec.nmodules && !in; k++)
            in = module_is(rec.modules[k], c->mod, c->modlen);
        for (uint32_t j = 0; j < rec.ncandidates && !in; j++)
            for (uint32_t k = 0; k < rec.candidates[j].nmodules && !in; k++)
                in = module_is(rec.candidates[j].modules[k], c->mod, c->modlen);
        if (!in)
            return 0;
    }
    if (c->found < c->max)
        c->out[c->found] = rec;
    c->found++;
    return 0;
}

size_t kms_lookup(const kms_handle *h, const char *spec, struct kms_sym *out, size_t max)
{
    struct lookup_ctx c = {NULL, 0, out, out ? max : 0, 0};
    const char *tick, *name = spec;
    if (!h || !spec)
        return 0;
    if ((tick = strrchr(spec, '`')) != NULL) {
        c.mod = spec;
        c.modlen = (size_t)(tick - spec);
        name = tick + 1;
    }
    find_lines(h, name, strlen(name), lookup_one, &c);
    return c.found;
}

int kms_foreach(const kms_handle *h, int (*cb)(const struct kms_line *line, void *arg),
                void *arg)
{
    for (size_t i = 0; i < h->n; i++) {
        struct kms_sym rec;
        struct kms_line l;
        record(h, h->line[i].addr, (uint32_t)i, &rec);
        l.address = h->line[i].addr;
        l.size = h->line[i].size > 0 ? (uint64_t)h->line[i].size : 0;
        l.type = (char)h->line[i].type;
        l.name = rec.sym;
        l.name_len = rec.sym_len;
        l.origin = rec.origin;
        l.sym_binding = rec.sym_binding;
        l.object = rec.object;
        /* kallmodsyms shows no module for the core kernel */
        l.nmodules = rec.origin == KMS_ORIGIN_CORE ? 0 : rec.nmodules;
        l.modules = rec.modules;
        if (rec.ambiguous) {
            /* Resolver.line_modsets: the candidates' one module set, else none */
            uint32_t amb = WHO_INDEX(h->line[i].who);
            const uint32_t *ms = h->cand_modset + h->amb_first[amb];
            uint32_t n = h->amb_count[amb], k = 1;
            while (k < n && ms[k] == ms[0])
                k++;
            l.nmodules = 0;
            if (k == n) {
                const unsigned char *set = ent(h, T_MODSETS, ms[0]);
                l.nmodules = le32(set + 4);
                l.modules = h->member_name + le32(set);
            }
        }
        int r = cb(&l, arg);
        if (r)
            return r;
    }
    return 0;
}

static size_t add_range(struct kms_range *out, size_t max, size_t count, uint64_t start,
                        uint64_t end, int text)
{
    if (count && count <= max && out[count - 1].text == text && out[count - 1].end == start) {
        out[count - 1].end = end;
        return count;
    }
    if (count < max) {
        out[count].start = start;
        out[count].end = end;
        out[count].text = (uint8_t)text;
    }
    return count + 1;
}

/* The loaded or pseudo-module of line I (index into mod_name), 0 for none,
 * once loaded: a line from its .ko names its module through the .ko's object
 * (whose module list is that one entry of mod_name). */
static uint32_t loaded_module(const kms_handle *h, size_t i)
{
    uint32_t w = h->line[i].who;
    if (WHO_TAG(w) == WHO_OBJECT && WHO_INDEX(w) >= h->count[T_OBJECTS])
        return (uint32_t)(h->object[WHO_INDEX(w)].modules.modules - h->mod_name);
    return line_module(h, i);
}

size_t kms_module_ranges(const kms_handle *h, const char *mod, struct kms_range *out, size_t max)
{
    char want[256];
    size_t count = 0, len;
    if (!h || !mod || (len = strlen(mod)) >= sizeof want)
        return 0;
    for (size_t k = 0; k <= len; k++)
        want[k] = mod[k] == '-' ? '_' : mod[k];
    if (!out)
        max = 0;
    for (uint32_t m = 1; m < h->nmods; m++) {
        if (strcmp(h->mod_name[m], want) != 0)
            continue;
        uint64_t lo[2] = {UINT64_MAX, UINT64_MAX}, hi[2] = {0, 0};
        for (size_t i = 0; i < h->n; i++)
            if (loaded_module(h, i) == m) {
                int text = h->line[i].type == 't' || h->line[i].type == 'T';
                uint64_t a = h->line[i].addr, size = h->line[i].size > 0 ? (uint64_t)h->line[i].size : 1;
                uint64_t end = a + size > a ? a + size : UINT64_MAX;
                if (a < lo[text])
                    lo[text] = a;
                if (end > hi[text])
                    hi[text] = end;
            }
        for (int text = 0; text < 2; text++)
            if (lo[text] < hi[text])
                count = add_range(out, max, count, lo[text], hi[text], text);
        if (count == 2 && max >= 2 && out[0].start > out[1].start) {
            struct kms_range t = out[0];
            out[0] = out[1];
            out[1] = t;
        }
        return count;
    }
    int core = strcmp(want, "vmlinux") == 0;
    uint32_t builtin = UINT32_MAX;
    for (uint32_t m = 0; m < h->count[T_MODULES] && !core; m++)
        if (strcmp(str(h, le32(ent(h, T_MODULES, m))), want) == 0) {
            builtin = m;
            break;
        }
    if (!core && builtin == UINT32_MAX)
        return 0;
    for (uint32_t k = 0; k < h->next; k++) {
        if (h->ext[k].sec >= h->count[T_SECTIONS])
            continue; /* a loaded module's .ko section */
        const unsigned char *se = ent(h, T_SECTIONS, h->ext[k].sec);
        const unsigned char *ms = ent(h, T_MODSETS, le32(ent(h, T_OBJECTS, le32(se)) + 4));
        uint32_t first = le32(ms), n = le32(ms + 4);
        int member = core ? n == 0 : 0;
        for (uint32_t j = 0; j < n && !member; j++)
            member = le32(ent(h, T_MEMBERS, first + j)) == builtin;
        if (member)
            count = add_range(out, max, count, h->ext_start[k], h->ext[k].end,
                              (le32(se + SEC_FLAGS) & SHF_EXECINSTR) ||
                                  (h->placed[h->ext[k].sec] & HOLDS_TEXT));
    }
    return count;
}

int kms_module_known(const kms_handle *h, const char *mod)
{
    size_t len = strlen(mod);
    if (module_is("vmlinux", mod, len))
        return 1;
    for (uint32_t m = 0; m < h->count[T_MODULES]; m++)
        if (module_is(str(h, le32(ent(h, T_MODULES, m))), mod, len))
            return 1;
    for (uint32_t m = 1; m < h->nmods; m++)
        if (module_is(h->mod_name[m], mod, len))
            return 1;
    return 0;
}

void kms_get_info(const kms_handle *h, struct kms_info *out)
{
    out->kernel_release = h->release;
    out->build_id = h->build_id;
    out->lines = h->n;
    out->core_lines = h->core_lines;
    out->segments = h->count[T_SEGMENTS];
    out->anchors = h->count[T_ANCHORS];
    out->anchors_verified = h->anchors_verified;
}

size_t kms_modules(const kms_handle *h, struct kms_module *out, size_t max)
{
    for (size_t k = 0; out && k < max && k < h->mods.nstatus; k++)
        out[k] = h->mods.status[k];
    return h->mods.nstatus;
}
