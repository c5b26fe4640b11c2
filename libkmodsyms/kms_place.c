// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Placement (docs/resolver.md R7): the anchors indexed before kallsyms is
 * read and their core lines found as it is, then each load segment's shift
 * voted by them and checked (R36, R37), and every section with a link address
 * placed; the placed sections are the extents attribution (kms_attr.c)
 * looks lines up in.  Follows the inputs (kms_format.c, kms_kallsyms.c).
 */
#include "kms_internal.h"

struct anchor_line {
    uint32_t anchor, line;
};

/*
 * The core lines of each anchor's name (placement's votes), found in one
 * pass as kallsyms is read, in its order.  A line is compared only with the
 * anchors of its name's length (bucketed by length; longer than MAX_BUCKET
 * share the last), and only when its length and first, middle and last
 * bytes hash to a bit of the filter that an anchor set.
 */
#define MAX_BUCKET 512
#define FILTER_BITS 14
struct anchor_index {
    uint64_t filter[(1u << FILTER_BITS) / 64];
    const char **name;
    size_t *len;
    uint32_t *by_len;
    uint32_t bucket[MAX_BUCKET + 2];
    struct anchor_line *found;
    size_t nfound, capfound;
};

void kmsi_free_anchors(struct anchor_index *ai)
{
    if (ai) {
        free((void *)ai->name);
        free(ai->len);
        free(ai->by_len);
        free(ai->found);
        free(ai);
    }
}

static inline uint32_t anchor_hash(const char *name, size_t len)
{
    uint64_t x = (uint64_t)len ^ (uint64_t)(unsigned char)name[0] << 32 ^
                 (uint64_t)(unsigned char)name[len / 2] << 40 ^
                 (uint64_t)(unsigned char)name[len - 1] << 48;
    return (uint32_t)((x * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - FILTER_BITS));
}

/* The anchors bucketed by their names' lengths (h->load->anchors). */
int kmsi_index_anchors(kms_handle *h, kms_error *err)
{
    uint32_t nanch = h->count[T_ANCHORS];
    struct anchor_index *ai = h->load->anchors = calloc(1, sizeof *ai);
    if (!ai || !(ai->name = malloc((nanch ? nanch : 1) * sizeof *ai->name)) ||
        !(ai->len = malloc((nanch ? nanch : 1) * sizeof *ai->len)) ||
        !(ai->by_len = malloc((nanch ? nanch : 1) * sizeof *ai->by_len)))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory reading anchors");
    for (uint32_t a = 0; a < nanch; a++) {
        const unsigned char *sym = ent(h, T_SYMBOLS, le32(ent(h, T_ANCHORS, a) + ANCHOR_SYMBOL));
        ai->name[a] = str(h, le32(sym + SYM_NAME));
        ai->len[a] = strlen(ai->name[a]);
        if (ai->len[a]) { /* (no line's name is empty) */
            uint32_t f = anchor_hash(ai->name[a], ai->len[a]);
            ai->filter[f / 64] |= UINT64_C(1) << f % 64;
        }
        ai->bucket[(ai->len[a] < MAX_BUCKET ? ai->len[a] : MAX_BUCKET) + 1]++;
    }
    for (uint32_t b = 0; b <= MAX_BUCKET; b++)
        ai->bucket[b + 1] += ai->bucket[b];
    uint32_t fill[MAX_BUCKET + 1];
    memcpy(fill, ai->bucket, sizeof fill);
    for (uint32_t a = 0; a < nanch; a++)
        ai->by_len[fill[ai->len[a] < MAX_BUCKET ? ai->len[a] : MAX_BUCKET]++] = a;
    return KMS_OK;
}

/* Core line LINE, called NAME (LEN bytes): the anchors of its name; -1 out of memory. */
int kmsi_find_anchors(struct anchor_index *ai, uint32_t line, const char *name, size_t len)
{
    size_t b = len < MAX_BUCKET ? len : MAX_BUCKET;
    uint32_t f = anchor_hash(name, len);
    if (!(ai->filter[f / 64] >> f % 64 & 1))
        return 0;
    for (uint32_t k = ai->bucket[b]; k < ai->bucket[b + 1]; k++) {
        uint32_t a = ai->by_len[k];
        if (ai->len[a] != len || ai->name[a][0] != name[0] || memcmp(name, ai->name[a], len) != 0)
            continue;
        if (ai->nfound == ai->capfound) {
            size_t nc = ai->capfound ? 2 * ai->capfound : 64;
            struct anchor_line *nf = realloc(ai->found, nc * sizeof *nf);
            if (!nf)
                return -1;
            ai->found = nf;
            ai->capfound = nc;
        }
        ai->found[ai->nfound].anchor = a;
        ai->found[ai->nfound++].line = line;
    }
    return 0;
}

static uint64_t sym_link(const kms_handle *h, uint32_t s)
{
    const unsigned char *sym = ent(h, T_SYMBOLS, s);
    return le64(ent(h, T_SECTIONS, le32(sym + SYM_SECTION)) + SEC_ADDRESS) + le64(sym + SYM_VALUE);
}

/* In kallsyms of the file's own kernel, every anchor it shows is at its
 * link address plus its segment's shift (R36): none may be elsewhere. */
#define MISPLACED_ANCHORS_ALLOWED 0u
/* KASLR shifts by whole pages (R36). */
#define SHIFT_ALIGNMENT 4096u

/* An anchor in a section without a link address locates nothing: skipped. */
static int anchor_usable(const kms_handle *h, uint32_t a)
{
    uint32_t s = le32(ent(h, T_ANCHORS, a) + ANCHOR_SYMBOL);
    return le64(ent(h, T_SECTIONS, le32(ent(h, T_SYMBOLS, s) + SYM_SECTION)) + SEC_ADDRESS) !=
           NO_ADDRESS;
}

/* What the anchors showed (R36, R37): how many are placed, misplaced,
 * absent, and of the absent the functions (one of them named). */
struct anchor_count {
    uint32_t verified, misplaced, absent, absent_functions;
    const char *example_absent;
};

/*
 * Segment SEG's shift (docs/resolver.md R7, R36): the one most of its
 * anchors' core lines vote for, each anchor once for each distinct shift its
 * lines imply (R11: a tie is no shift); VOTE: room for every found line.
 * Then each anchor is placed (a line of its name at link address + shift),
 * misplaced (lines of its name, none there) or absent, into C.
 */
static void segment_shift(const kms_handle *h, uint32_t seg, const uint8_t *usable,
                          uint64_t *vote, uint64_t *shift, uint8_t *known,
                          struct anchor_count *c)
{
    const struct anchor_line *found = h->load->anchors->found;
    size_t nfound = h->load->anchors->nfound, nvotes = 0, most;
    uint32_t nanch = h->count[T_ANCHORS];
    uint64_t best;
    for (uint32_t a = 0; a < nanch; a++) {
        const unsigned char *an = ent(h, T_ANCHORS, a);
        if (le32(an + ANCHOR_SEGMENT) != seg || !usable[a])
            continue;
        uint64_t link = sym_link(h, le32(an));
        size_t first = nvotes;
        for (size_t f = 0; f < nfound; f++) {
            uint64_t sh = h->line[found[f].line].addr - link;
            size_t v = first;
            while (found[f].anchor == a && v < nvotes && vote[v] != sh)
                v++;
            if (found[f].anchor == a && v == nvotes) /* distinct within this anchor's */
                vote[nvotes++] = sh;
        }
    }
    /* a shift by part of a page is no KASLR: the segment stays unknown */
    if (kmsi_majority(vote, nvotes, &best, &most) && best % SHIFT_ALIGNMENT == 0) {
        shift[seg] = best;
        known[seg] = 1;
    }
    for (uint32_t a = 0; a < nanch; a++) {
        const unsigned char *an = ent(h, T_ANCHORS, a);
        if (le32(an + ANCHOR_SEGMENT) != seg || !usable[a])
            continue;
        uint32_t s = le32(an);
        uint64_t at = sym_link(h, s) + shift[seg];
        int present = 0, placed = 0;
        for (size_t f = 0; f < nfound; f++)
            if (found[f].anchor == a) {
                present = 1;
                placed |= known[seg] && h->line[found[f].line].addr == at;
            }
        if (placed) {
            c->verified++;
        } else if (present) {
            c->misplaced++;
        } else {
            c->absent++;
            if (ent(h, T_SYMBOLS, s)[SYM_TYPE] == 2 /* STT_FUNC */ && !c->absent_functions++)
                c->example_absent = sym_name(h, s);
        }
    }
}

/* R36: a segment none of whose anchors is present moves with the segments
 * around it (in address order, ORDER: room for each) when they moved
 * alike. */
static void shift_between(const kms_handle *h, uint64_t *shift, uint8_t *known, uint32_t *order)
{
    uint32_t nseg = h->count[T_SEGMENTS];
    for (uint32_t g = 0; g < nseg; g++)
        order[g] = g;
    for (uint32_t g = 1; g < nseg; g++) { /* stable insertion sort by start */
        uint32_t x = order[g], j = g;
        while (j > 0 && le64(ent(h, T_SEGMENTS, order[j - 1]) + SEG_START) >
                            le64(ent(h, T_SEGMENTS, x) + SEG_START)) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    for (uint32_t r = 0; r < nseg; r++) {
        uint32_t seg = order[r];
        long below = NO, above = NO;
        if (known[seg])
            continue;
        for (uint32_t q = 0; q < r; q++)
            if (known[order[q]])
                below = order[q];
        for (uint32_t q = r + 1; q < nseg && above < 0; q++)
            if (known[order[q]])
                above = order[q];
        if (below >= 0 && above >= 0 && shift[below] == shift[above]) {
            shift[seg] = shift[below];
            known[seg] = 1;
        }
    }
}

/* R36, R37: the file is kallsyms' kernel's, as CHECK asks (KMS_LOAD_FORCE,
 * R41: either check warns instead; a file forced past the stale check is
 * not said truncated too, its functions being another kernel's). */
static int check_anchors(kms_handle *h, const struct anchor_count *c, const char *syms_path,
                         const char *source, int check, kms_error *err)
{
    uint32_t present = c->verified + c->misplaced;
    if (c->verified == 0 || c->misplaced > MISPLACED_ANCHORS_ALLOWED) {
        kms_error stale;
        kmsi_fail(check == CHECK_WARN ? &stale : err, KMS_E_STALE, "%s does not match %s: of "
                  "its %u anchor symbols, %u are where its link addresses say, %u elsewhere "
                  "and %u absent; they are of different kernels: use the dtrace_syms built "
                  "for the kernel whose kallsyms this is (or rebuild it)", syms_path, source,
                  present + c->absent, c->verified, c->misplaced, c->absent);
        if (check != CHECK_WARN)
            return KMS_E_STALE;
        return kmsi_forced(h, stale.message, err);
    }
    if (c->absent_functions) {
        kms_error cut;
        kmsi_fail(check == CHECK_WARN ? &cut : err, KMS_E_KALLSYMS, "%s lacks %u function symbols "
                  "that every kallsyms of this kernel lists (such as %.80s), though the %u it has "
                  "are where %s says: it is truncated or filtered; read /proc/kallsyms again, "
                  "whole and as root", source, c->absent_functions, c->example_absent, c->verified,
                  syms_path);
        return check == CHECK_WARN ? kmsi_forced(h, cut.message, err) : KMS_E_KALLSYMS;
    }
    return KMS_OK;
}

/* Each section with a link address moved with the (last) segment holding
 * it; the placed extents: sections moved by a known shift, placement's low
 * byte != 0 (its codes are 0-3, docs/format.md), size > 0; by base,
 * stably. */
int kmsi_place_extents(kms_handle *h, const uint64_t *shift, const uint8_t *known,
                         const char *syms_path, kms_error *err)
{
    uint32_t nseg = h->count[T_SEGMENTS], nsec = h->count[T_SECTIONS];
    struct keyed *ext;
    size_t next = 0;
    if (!ALLOC(h, placed, nsec) || !SCRATCH(h, ext, nsec))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
    for (uint32_t sec = 0; sec < nsec; sec++) {
        const unsigned char *se = ent(h, T_SECTIONS, sec);
        uint64_t address = le64(se + SEC_ADDRESS);
        long seg_of = NO;
        if (address == NO_ADDRESS)
            continue;
        for (uint32_t g = 0; g < nseg; g++) {
            const unsigned char *sg = ent(h, T_SEGMENTS, g);
            if (known[g] && address >= le64(sg + SEG_START) && address <= le64(sg + SEG_END))
                seg_of = g;
        }
        if (seg_of < 0)
            continue;
        h->load->section_base[sec] = address + shift[seg_of];
        h->placed[sec] = (uint8_t)le32(se + SEC_PLACEMENT) != PLACEMENT_UNPLACED ? PLACED : 0;
        if (h->placed[sec] && le64(se + SEC_SIZE) > 0) {
            ext[next].key = h->load->section_base[sec];
            ext[next++].idx = sec;
        }
    }
    if (kmsi_sort_keyed(h, ext, next) || !ALLOC(h, ext_start, next) || !ALLOC(h, ext, next))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
    h->next = (uint32_t)next;
    for (size_t k = 0; k < next; k++) {
        h->ext_start[k] = ext[k].key;
        h->ext[k].end = ext[k].key + le64(ent(h, T_SECTIONS, ext[k].idx) + SEC_SIZE);
        h->ext[k].sec = ext[k].idx;
    }
    return KMS_OK;
}

/*
 * The segments' shifts (docs/resolver.md R7, R36, R37): each segment's
 * shift voted by its anchors (segment_shift), a segment without one moved
 * as its neighbours (shift_between), the anchors checked (check_anchors),
 * and each section with a link address placed (kmsi_place_extents).
 */
int kmsi_place_sections(kms_handle *h, const char *syms_path, const char *source, int check,
                               kms_error *err)
{
    uint32_t nseg = h->count[T_SEGMENTS], nanch = h->count[T_ANCHORS];
    size_t nfound = h->load->anchors->nfound;
    uint64_t *shift = calloc(nseg ? nseg : 1, sizeof *shift);
    uint8_t *known = calloc(nseg ? nseg : 1, 1);
    uint8_t *usable = malloc(nanch ? nanch : 1);
    uint32_t *order = malloc((nseg ? nseg : 1) * sizeof *order);
    uint64_t *vote = malloc((nfound ? nfound : 1) * sizeof *vote);
    struct anchor_count c = {0, 0, 0, 0, ""};
    struct scratch_mark mark = kmsi_scratch_mark(h);
    int rc = KMS_OK;

    if (!shift || !known || !usable || !order || !vote) {
        rc = kmsi_fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
        goto out;
    }
    /* the core lines of each anchor's name were found as kallsyms was read */
    for (uint32_t a = 0; a < nanch; a++)
        usable[a] = (uint8_t)anchor_usable(h, a);
    for (uint32_t seg = 0; seg < nseg; seg++)
        segment_shift(h, seg, usable, vote, shift, known, &c);
    shift_between(h, shift, known, order);
    h->anchors_verified = c.verified;
    memcpy(h->load->seg_shift, shift, nseg * sizeof *shift);
    memcpy(h->load->seg_known, known, nseg);
    if ((!check || (rc = check_anchors(h, &c, syms_path, source, check, err)) == KMS_OK))
        rc = kmsi_place_extents(h, shift, known, syms_path, err);
out:
    kmsi_scratch_release(h, mark);
    free(shift);
    free(known);
    free(usable);
    free(order);
    free(vote);
    return rc;
}
