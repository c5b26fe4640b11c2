// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * The address index (docs/resolver.md R26-R32): the lines sorted by address,
 * loaded modules' .ko sections joined (kms_modules.c), each line's region
 * and the core ranges, then the address space cut into pieces answered
 * alike, their clusters' bucket tables and the owners whose fields
 * answers copy.  Follows attribution (kms_attr.c); queries (kms_query.c)
 * read only what it builds.
 */
#include "kms_internal.h"

static size_t lower_bound(const uint64_t *v, size_t n, uint64_t x)
{
    size_t lo = 0;
    while (n > 0) {
        size_t half = n / 2;
        if (v[lo + half] < x) {
            lo += half + 1;
            n -= half + 1;
        } else {
            n = half;
        }
    }
    return lo;
}

static int has_prefix(const kms_handle *h, size_t i, const char *p)
{
    return h->line[i].name_len >= 6 && memcmp(line_name(h, i), p, 6) == 0;
}

/* Preference among intervals of one start (R26's ties): the greater is
 * preferred, i.e. sorts later. */
static int prefer_cmp(const kms_handle *h, uint32_t a, uint32_t b)
{
    int64_t la = h->line[a].size, lb = h->line[b].size;
    if (la != lb)
        return la < lb ? 1 : -1; /* smaller size preferred */
    uint8_t pa = h->line[a].prefer, pb = h->line[b].prefer;
    if (pa != pb)
        return pa > pb ? 1 : -1;
    /* the name that sorts first is preferred; equal names: the later line */
    size_t na = h->line[a].name_len, nb = h->line[b].name_len;
    int c = memcmp(line_name(h, a), line_name(h, b), na < nb ? na : nb);
    if (c == 0 && na != nb)
        c = na < nb ? -1 : 1;
    if (c)
        return c < 0 ? 1 : -1;
    return a > b ? 1 : -1;
}

/* What one pass over the lines gathers of the core lines that may answer,
 * for the core ranges (R29): their lowest and highest addresses, and where
 * the (last) line of each marker is. */
#define MARKER(s) {s, sizeof s - 1}
static const struct {
    const char *name;
    uint32_t len;
} core_marker[4] = {MARKER("_etext"), MARKER("_sinittext"), MARKER("_einittext"), MARKER("_end")};

struct core_seen {
    uint64_t lowest, highest, at[4];
    int seen[4], any;
};

static void core_line(const kms_handle *h, size_t i, struct core_seen *c)
{
    const struct line *l = &h->line[i];
    c->any = 1;
    c->lowest = l->addr < c->lowest ? l->addr : c->lowest;
    c->highest = l->addr > c->highest ? l->addr : c->highest;
    if (l->name_len > sizeof "_sinittext" - 1 || h->text[l->name] != '_') /* no marker */
        return;
    for (int k = 0; k < 4; k++)
        if (line_name_is(h, i, core_marker[k].name, core_marker[k].len)) {
            c->at[k] = l->addr; /* a marker named twice: where it last appears */
            c->seen[k] = 1;
        }
}

static int in_core_ranges(const kms_handle *h, uint64_t q)
{
    /* the last range starting at or below q (the starts are ascending) */
    long k = NO;
    for (uint32_t r = 0; r < h->ncore_ranges; r++)
        if (h->core_range[2 * r] <= q)
            k = r;
    return k >= 0 && q <= h->core_range[2 * k + 1];
}

/* The address of the K-th line by address. */
static inline uint64_t addr_at(const kms_handle *h, size_t k)
{
    return h->line[h->load->by_address[k]].addr;
}

/* How many lines are at or below X. */
static size_t upper_bound_by_address(const kms_handle *h, uint64_t x)
{
    size_t lo = 0, n = h->n;
    while (n > 0) {
        size_t half = n / 2;
        if (addr_at(h, lo + half) <= x) {
            lo += half + 1;
            n -= half + 1;
        } else {
            n = half;
        }
    }
    return lo;
}

/* Where core lines answer (R29: the kernel's is_ksym_addr()). */
static void core_ranges(kms_handle *h, const struct core_seen *c)
{
    h->ncore_ranges = 0;
    if (!c->any)
        return;
    h->core_range[0] = c->lowest;
    h->core_range[1] = c->highest;
    h->ncore_ranges = 1;
    if (!c->seen[0] || c->seen[3])
        return;
    /* a core line that may answer past _etext (outside the init text when
     * both its markers are seen): every symbol is listed */
    int init = c->seen[1] && c->seen[2];
    const uint64_t *at = c->at;
    if (c->highest > at[0] && (!init || c->highest > at[2]))
        return;
    if (init) /* one below the init text? the lines just above _etext say */
        for (size_t k = upper_bound_by_address(h, at[0]); k < h->n && addr_at(h, k) < at[1]; k++)
            if (line_module(h, h->load->by_address[k]) == 0 && h->line[h->load->by_address[k]].answers)
                return;
    h->core_range[1] = at[0];
    if (init) {
        h->core_range[2] = at[1];
        h->core_range[3] = at[2];
        h->ncore_ranges = 2;
    }
}

/*
 * Every line's region (R29-R31), the end of each group's (a loaded
 * module's lines inside its core, as the kernel says, apart from those
 * outside it), the lines that may answer by address (R5, R46), and which
 * extents queries see.  The same pass notes which placed sections hold
 * text, names each core line's object, and gathers the core ranges'.
 */
static int regions(kms_handle *h, kms_error *err)
{
    size_t n = h->n, nmods = h->nmods, k = 0;
    const uint8_t *origin = h->mod_origin;
    struct core_seen core = {UINT64_MAX, 0, {0, 0, 0, 0}, {0, 0, 0, 0}, 0};
    /* groups: two per module (inside its core, outside), then one per
     * pseudo-module line (at most the lines not of the core) */
    size_t most = 2 * nmods + (n - h->core_lines);
    uint64_t *highest;
    if (!SCRATCH(h, h->load->region_end, most))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    struct scratch_mark mark = kmsi_scratch_mark(h);
    if (!SCRATCH(h, highest, most))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    memset(highest, 0, 2 * nmods * sizeof *highest);
    h->load->line_region = h->load->line_section; /* rewritten in place: a placed section stays */
    for (size_t i = 0; i < n; i++) {
        struct line *l = &h->line[i];
        int32_t sec = h->load->line_section[i];
        uint32_t mod = line_module(h, i);
        size_t g;
        if (sec >= 0) {
            if (l->type == 't' || l->type == 'T')
                h->placed[sec] |= HOLDS_TEXT;
            if (WHO_TAG(l->who) == WHO_CORE)
                l->who = WHO(WHO_OBJECT, h->section_object[sec]);
        }
        l->answers = l->type != 'A' &&
                     !(mod && kmsi_is_mapping_symbol(line_name(h, i), l->name_len));
        if (origin[mod] == KMS_ORIGIN_PSEUDO) {
            g = 2 * nmods + k++;
            highest[g] = 0;
        } else {
            /* (the core kernel is no loaded module: it has no core to be outside) */
            g = 2 * (size_t)mod + (size_t)(mod && kmsi_modules_outside_core(&h->mods, mod, l->addr));
        }
        if (!l->answers)
            g = 1;
        else if (mod == 0)
            core_line(h, i, &core);
        h->load->line_region[i] = sec >= 0 ? sec : -1 - (int32_t)g;
        if (l->addr > highest[g])
            highest[g] = l->addr;
    }
    for (size_t g = 0; g < 2 * nmods + k; g++) {
        size_t above = upper_bound_by_address(h, highest[g]);
        uint64_t end = g < 2 ? highest[g] : above < n ? addr_at(h, above) - 1 : UINT64_MAX;
        uint64_t core_last;
        int module = g >= 2 && g < 2 * nmods && g % 2 == 0;
        if (module && kmsi_modules_core_last(&h->mods, (uint32_t)(g / 2), &core_last)) {
            if (core_last < end)
                end = core_last; /* within its core, as the kernel says */
        } else if (module && above >= n && highest[g] <= UINT64_MAX - 4095 &&
                   highest[g] + 4095 < end) {
            end = highest[g] + 4095; /* the highest module, its end unknown: a page */
        }
        /* a pseudo-module line (its group's only one) answers at most a page
         * (R31), the bound computed modulo 2^64: in the address space's last
         * page it wraps below the line, which then answers nothing */
        if (g >= 2 * nmods && highest[g] + 4095 < end)
            end = highest[g] + 4095;
        h->load->region_end[g] = end;
    }
    kmsi_scratch_release(h, mark);
    core_ranges(h, &core);
    /* the extents at or above the lowest core line that may answer */
    uint64_t lowest = h->ncore_ranges ? h->core_range[0] : 0;
    h->ext_first = (uint32_t)lower_bound(h->ext_start, h->next, lowest);
    return KMS_OK;
}

int kmsi_build_index(kms_handle *h, kms_error *err)
{
    size_t n = h->n;

    /* Padding (__pfx_/__cfi_) inside a placed section (R23), unless vmlinux's
     * symbol table sized it (R56): its size is the
     * distance to the next distinct address above, if one of the (first 4)
     * lines there is the function it prefixes. */
    for (size_t k = 0; k < n; k++) {
        size_t i = h->load->by_address[k], nxt = k + 1;
        if (h->load->line_matched[i] || h->line[i].size >= 0 || h->load->line_section[i] < 0 ||
            !(has_prefix(h, i, "__pfx_") || has_prefix(h, i, "__cfi_")))
            continue;
        while (nxt < n && addr_at(h, nxt) == h->line[i].addr)
            nxt++;
        if (nxt >= n)
            continue;
        for (size_t j = 0; j < 4; j++) {
            size_t at = nxt + j < n ? nxt + j : n - 1;
            if (addr_at(h, at) != addr_at(h, nxt))
                break;
            if (line_name_is(h, h->load->by_address[at], line_name(h, i) + 6, h->line[i].name_len - 6)) {
                int64_t size = (int64_t)(addr_at(h, nxt) - h->line[i].addr);
                h->line[i].size = size < 0 ? -1 : size; /* read as negative: unknown */
                break;
            }
        }
    }
    /* Loadable lines: size, binding and type from their module's own .ko. */
    for (size_t k = 0; k < h->mods.nlines; k++) {
        const struct kmsi_ml_result *r = &h->mods.line[k];
        if (r->ko.size >= 0) {
            struct line *l = &h->line[r->line];
            l->size = r->ko.size;
            l->binding = r->ko.binding <= 2 ? r->ko.binding : KMS_BINDING_UNKNOWN;
            l->prefer = symbol_prefer(r->ko.typed, r->ko.binding);
        }
    }
    if (regions(h, err))
        return err ? err->code : KMS_E_NOMEM;
    /* A loaded module's line in a placed section of its .ko answers with the
     * .ko as its object (the regions above still saw its module). */
    for (size_t k = 0; k < h->mods.nlines; k++) {
        uint32_t i = h->mods.line[k].line;
        if (h->mods.line[k].ko.extent >= 0)
            h->line[i].who = WHO(WHO_OBJECT, h->section_object[h->load->line_region[i]]);
    }
    /* what only attribution needed (line_section's array lives on as line_region) */
    h->load->line_matched = NULL;
    h->load->line_section = NULL;
    return KMS_OK;
}

/*
 * The unsized fallback (R27, R28) for an address Q in no sized
 * interval: CAND is the last line that may answer at the greatest address
 * <= Q (-1 none), E how many extents (from ext_first) start at or below Q.
 * The piece answer of Q.
 */
static uint32_t unsized_at(const kms_handle *h, uint64_t q, int32_t cand, size_t e)
{
    /* the placed extent holding q: the last starting at or below it */
    size_t x = h->ext_first + e;
    int32_t rq = x > h->ext_first && q < h->ext[x - 1].end ? (int32_t)h->ext[x - 1].sec : NO;
    uint32_t none = PIECE_NO_LINE | (rq >= 0 ? OWNER_OBJECT(h->section_object[rq]) : OWNER_NONE);
    /* the last line at the greatest address <= q, in the same region as q */
    if (cand < 0)
        return none;
    int32_t rc = h->load->line_region[cand];
    if (rq >= 0)
        return rc == rq ? (uint32_t)cand : none;
    if (rc >= 0 || q > h->load->region_end[-1 - rc])
        return none;
    /* the core kernel's lines answer only inside its ranges */
    return rc != -1 || in_core_ranges(h, q) ? (uint32_t)cand : none;
}

/* The next breakpoint: B when it is above Q and below *NEXT (or the first). */
static void consider(uint64_t *next, int *found, uint64_t q, uint64_t b)
{
    if (b > q && (!*found || b < *next)) {
        *next = b;
        *found = 1;
    }
}

static uint64_t line_end(const kms_handle *h, uint32_t i)
{
    return h->line[i].addr + (uint64_t)h->line[i].size; /* modulo 2^64 */
}

/* A growing array of line indices. */
struct stack {
    uint32_t *v;
    size_t n, cap;
};

/* The chain of sized intervals holding an address (kmsi_build_pieces): their
 * lines, each with its end. */
struct link {
    uint64_t end;
    uint32_t line;
};
struct chain {
    struct link *v;
    size_t n, cap;
};

static int chain_push(struct chain *c, uint32_t line, uint64_t end)
{
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 64;
        struct link *nv = realloc(c->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        c->v = nv;
        c->cap = nc;
    }
    c->v[c->n].end = end;
    c->v[c->n++].line = line;
    return 0;
}

static int push(struct stack *s, uint32_t x)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        uint32_t *nv = realloc(s->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = x;
    return 0;
}

/*
 * The pieces, in one walk up the address space.  Q is answered by the
 * innermost sized interval holding it (R26): the intervals
 * (answering lines of size > 0) by start, ties in preference order, each
 * with its container, the nearest earlier interval whose chain holds it
 * (_containers), searched from the last interval starting at or below Q up
 * the containers while they end at or below Q.  That chain is a stack
 * (each interval pops those ending before it, or all when it starts past
 * every end so far); intervals ending at or below Q are popped as Q passes
 * them (a container search would only step over them).  With no interval
 * holding Q, the unsized fallback (unsized_at) answers, else nothing (R32).  The answer may
 * change only at a line's address, at the end of the answering interval,
 * and (unsized) at an extent's start or end, the end of the candidate's
 * region and the core ranges' bounds: each such address is answered, and
 * a new piece begins where the answer differs from the last.
 */
/* Pieces are first made in scratch: when there are this many, the array
 * the handle keeps is made, asked huge as far as the lines so far predict
 * it fills (kmsi_advise_huge), and they are copied in; those of an index with
 * fewer are copied into one of their size. */
#define PIECE_SAMPLE 4096
/* The bytes of pieces that NP pieces from K of N lines predict: as many per line. */
#define PREDICT_PIECES(np, k, n) ((k) ? (uint64_t)(np) * (n) / (k) * sizeof(struct piece) : 0)

/* The walk up the address space (kmsi_build_pieces). */
struct walk {
    size_t n, next_ext;         /* lines; extents from h->ext_first */
    const uint64_t *ext_start;  /* h->ext_start + h->ext_first */
    size_t k, e;                /* the next line (by address), the extents at or below q */
    uint64_t q, at;             /* the address answered; line k's */
    uint64_t reach, last_start; /* the furthest end of an interval so far; the last piece's start */
    struct stack tie;           /* a run of lines of one address */
    struct chain st;            /* the intervals holding q */
    int32_t cand;               /* the last answering line at or below q, or -1 */
    int any;                    /* an interval seen */
    struct piece *pc;           /* the first PIECE_SAMPLE pieces in scratch, then h->piece */
    size_t np, cap, asked;
    struct cluster *cl;
    size_t ccap;
};

/* The lines at or below q, a run of one address at a time: each sized one
 * onto the chain of intervals, a run's in preference order.  -1: out of
 * memory. */
static int take_lines(const kms_handle *h, struct walk *w)
{
    while (w->k < w->n && w->at <= w->q) {
        uint64_t a = w->at;
        w->tie.n = 0;
        do {
            uint32_t i = h->load->by_address[w->k];
            if (h->line[i].answers) {
                w->cand = (int32_t)i;
                if (h->line[i].size > 0 && push(&w->tie, i))
                    return -1;
            }
            w->at = ++w->k < w->n ? addr_at(h, w->k) : 0;
        } while (w->k < w->n && w->at == a);
        for (size_t t = 1; t < w->tie.n; t++) { /* insertion sort of the tie run */
            uint32_t x = w->tie.v[t];
            size_t j = t;
            for (; j > 0 && prefer_cmp(h, w->tie.v[j - 1], x) > 0; j--)
                w->tie.v[j] = w->tie.v[j - 1];
            w->tie.v[j] = x;
        }
        for (size_t t = 0; t < w->tie.n; t++) {
            uint32_t i = w->tie.v[t];
            uint64_t end = line_end(h, i);
            if (!w->any || a >= w->reach)
                w->st.n = 0;
            while (w->st.n && w->st.v[w->st.n - 1].end < end)
                w->st.n--;
            if (chain_push(&w->st, i, end))
                return -1;
            if (!w->any || end > w->reach)
                w->reach = end;
            w->any = 1;
        }
    }
    return 0;
}

/* A new piece from q answered V: into the array (the one the handle keeps
 * made once PIECE_SAMPLE are in scratch) and its cluster (a new one past a
 * gap).  -1: out of memory. */
static int add_piece(kms_handle *h, struct walk *w, uint32_t v)
{
    if (w->np == w->cap && !h->piece) { /* the array kept, asked huge before it is touched */
        size_t most = w->n + w->n / 2 + 2 * w->next_ext + 16;
        w->cap = most > 2 * w->np ? most : 2 * w->np;
        if (!(h->piece = kmsi_alloc_hugeable(w->cap * sizeof *h->piece)))
            return -1;
        kmsi_advise_huge(h->piece, w->cap * sizeof *w->pc, &w->asked, 0,
                         PREDICT_PIECES(w->np, w->k, w->n));
        w->pc = memcpy(h->piece, w->pc, w->np * sizeof *w->pc);
    } else if (w->np == w->cap) {
        struct piece *nv = realloc(h->piece, (w->cap *= 2) * sizeof *nv);
        if (!nv)
            return -1;
        w->pc = h->piece = nv;
        w->asked = 0;
    } else if (w->np % PIECE_SAMPLE == 0 && h->piece) {
        kmsi_advise_huge(w->pc, w->cap * sizeof *w->pc, &w->asked, w->np * sizeof *w->pc,
                         PREDICT_PIECES(w->np, w->k, w->n));
    }
    if (w->np == 0 || w->q - w->last_start > CLUSTER_GAP || w->q - w->cl->base > UINT32_MAX) {
        if (h->ncluster == w->ccap) {
            struct cluster *nc = realloc(h->cluster, (w->ccap = 2 * w->ccap + 4) * sizeof *nc);
            if (!nc)
                return -1;
            h->cluster = nc;
        }
        if (h->ncluster)
            h->cluster[h->ncluster - 1].last = (uint32_t)w->np - 1;
        w->cl = &h->cluster[h->ncluster++];
        w->cl->base = w->q;
        w->cl->first = (uint32_t)w->np;
    }
    w->pc[w->np].low = (uint32_t)(w->q - w->cl->base);
    w->pc[w->np++].answer = v;
    w->last_start = w->q;
    return 0;
}

/* The next address above q where the answer may change into *NQ; 0 when
 * there is none. */
static int next_change(const kms_handle *h, const struct walk *w, uint64_t *nq)
{
    uint64_t q = w->q;
    int found = 0;
    if (w->k < w->n)
        consider(nq, &found, q, w->at);
    if (w->st.n) {
        consider(nq, &found, q, w->st.v[w->st.n - 1].end);
        return found;
    }
    if (w->e < w->next_ext)
        consider(nq, &found, q, w->ext_start[w->e]);
    if (w->e > 0)
        consider(nq, &found, q, h->ext[h->ext_first + w->e - 1].end);
    if (w->cand >= 0) {
        int32_t r = h->load->line_region[w->cand];
        if (r < 0 && h->load->region_end[-1 - r] < UINT64_MAX)
            consider(nq, &found, q, h->load->region_end[-1 - r] + 1);
    }
    for (uint32_t r = 0; r < h->ncore_ranges; r++) {
        consider(nq, &found, q, h->core_range[2 * r]);
        if (h->core_range[2 * r + 1] < UINT64_MAX)
            consider(nq, &found, q, h->core_range[2 * r + 1] + 1);
    }
    return found;
}

int kmsi_build_pieces(kms_handle *h, kms_error *err)
{
    struct walk w;
    int bad = 0;
    memset(&w, 0, sizeof w);
    w.n = h->n;
    w.next_ext = h->next - h->ext_first;
    w.ext_start = h->ext_start + h->ext_first;
    w.at = w.n ? addr_at(h, 0) : 0;
    w.cand = NO;
    w.cap = PIECE_SAMPLE;
    if (!SCRATCH(h, w.pc, w.cap))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    for (uint64_t nq = 0; !bad; w.q = nq) {
        if ((bad = take_lines(h, &w)) != 0)
            break;
        while (w.e < w.next_ext && w.ext_start[w.e] <= w.q)
            w.e++;
        while (w.st.n && w.st.v[w.st.n - 1].end <= w.q)
            w.st.n--;
        uint32_t v = w.st.n ? PIECE_SIZED | w.st.v[w.st.n - 1].line : unsized_at(h, w.q, w.cand, w.e);
        if (w.np == 0 || v != w.pc[w.np - 1].answer)
            bad = add_piece(h, &w, v);
        if (!bad && !next_change(h, &w, &nq))
            break;
    }
    if (!bad && !h->piece && !(h->piece = malloc(w.np * sizeof *h->piece))) /* (np >= 1) */
        bad = 1;
    if (!bad) {
        if (w.pc != h->piece)
            memcpy(h->piece, w.pc, w.np * sizeof *w.pc);
        h->npiece = w.np;
        h->cluster[h->ncluster - 1].last = (uint32_t)w.np - 1;
    }
    free(w.st.v);
    free(w.tie.v);
    return bad ? kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms") : KMS_OK;
}

/* h->load->by_address: the lines stably sorted by address.  Kallsyms lists the
 * core kernel by address, then each loaded module's lines in its symbol
 * table's order: only the lines after the sorted prefix are sorted (with
 * room for them alone), then merged with it. */
int kmsi_sort_by_address(kms_handle *h)
{
    size_t n = h->n, p = h->unsorted_at ? h->unsorted_at : n, m;
    if (!SCRATCH(h, h->load->by_address, n))
        return -1;
    if (p >= n) {
        for (size_t i = 0; i < n; i++)
            h->load->by_address[i] = (uint32_t)i;
        return 0;
    }
    m = n - p;
    struct scratch_mark mark = kmsi_scratch_mark(h);
    struct keyed *rest;
    if (!SCRATCH(h, rest, 2 * m))
        return -1;
    for (size_t k = 0; k < m; k++) {
        rest[k].key = h->line[p + k].addr;
        rest[k].idx = (uint32_t)(p + k);
    }
    kmsi_stable_sort(rest, m, rest + m);
    /* the prefix's lines at or below the rest's lowest come first, as they
     * are (loaded modules most often lie above the core kernel: all of it) */
    size_t i = 0, j = 0, o, below = p;
    while (below > 0) {
        size_t half = below / 2;
        if (h->line[i + half].addr <= rest[0].key) {
            i += half + 1;
            below -= half + 1;
        } else {
            below = half;
        }
    }
    for (o = 0; o < i; o++)
        h->load->by_address[o] = (uint32_t)o;
    while (i < p && j < m)
        h->load->by_address[o++] = rest[j].key < h->line[i].addr ? rest[j++].idx : (uint32_t)i++;
    while (i < p)
        h->load->by_address[o++] = (uint32_t)i++;
    while (j < m)
        h->load->by_address[o++] = rest[j++].idx;
    kmsi_scratch_release(h, mark);
    return 0;
}

/* Each cluster's bucket table: about one bucket per PIECES_PER_BUCKET
 * pieces, over the offsets from its first piece's start to its last's. */
int kmsi_build_buckets(kms_handle *h, kms_error *err)
{
    size_t total = 0;
    for (size_t c = 0; c < h->ncluster; c++) {
        struct cluster *cl = &h->cluster[c];
        uint32_t count = cl->last - cl->first + 1, want = count / PIECES_PER_BUCKET;
        cl->last_low = h->piece[cl->last].low;
        cl->shift = 0;
        while (cl->shift < 32 && (cl->last_low >> cl->shift) >= (want ? want : 1))
            cl->shift++;
        cl->bucket = (uint32_t)total;
        total += (size_t)(cl->shift < 32 ? cl->last_low >> cl->shift : 0) + 2;
    }
    if (!(h->bucket = malloc(total * sizeof *h->bucket)))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    h->nbucket = total;
    for (size_t c = 0; c < h->ncluster; c++) {
        const struct cluster *cl = &h->cluster[c];
        size_t nb = (size_t)(cl->shift < 32 ? cl->last_low >> cl->shift : 0) + 1;
        uint32_t k = cl->first;
        for (size_t b = 0; b < nb; b++) {
            uint64_t off = (uint64_t)b << cl->shift;
            while (k < cl->last && h->piece[k + 1].low <= off)
                k++;
            h->bucket[cl->bucket + b].first = k;
            h->bucket[cl->bucket + b].answer = h->piece[k].answer;
        }
        h->bucket[cl->bucket + nb].first = cl->last;
        h->bucket[cl->bucket + nb].answer = h->piece[cl->last].answer;
    }
    return KMS_OK;
}

static int same_list(const struct kms_modlist *a, const struct kms_modlist *b)
{
    if (a->nmodules != b->nmodules)
        return 0;
    for (uint32_t k = 0; k < a->nmodules; k++)
        if (strcmp(a->modules[k], b->modules[k]) != 0)
            return 0;
    return 1;
}

/*
 * Every owner (the answer record's module part, docs/resolver.md §5):
 * none, each object (.ko files too), each module of mod_name, each
 * ambiguous line (R35), the core kernel; owner_first[] is where each WHO
 * tag's owners begin, so that a record reads its owner without a branch on
 * the tag.
 */
int kmsi_build_owners(kms_handle *h, kms_error *err)
{
    size_t nobj = (size_t)h->count[T_OBJECTS] + h->mods.nko;
    size_t count = 1 + nobj + h->nmods + h->namb + 1;
    if (!(h->owner = aligned_alloc(sizeof *h->owner, count * sizeof *h->owner)))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    memset(h->owner, 0, count * sizeof *h->owner);
    h->owner_first[WHO_OBJECT] = OWNER_OBJECT(0);
    h->owner_first[WHO_MODULE] = (uint32_t)(1 + nobj);
    h->owner_first[WHO_AMBIGUOUS] = (uint32_t)(1 + nobj + h->nmods);
    h->owner_first[WHO_CORE] = (uint32_t)(1 + nobj + h->nmods + h->namb);
    for (size_t o = 0; o < nobj; o++) {
        const struct object_info *info = &h->object[o];
        struct owner *r = &h->owner[OWNER_OBJECT(o)];
        r->object = info->path;
        r->modules = info->modules.modules;
        r->nmodules = info->modules.nmodules;
        r->origin = info->origin;
        r->dso = info->dso;
    }
    for (uint32_t m = 0; m < h->nmods; m++) {
        struct owner *r = &h->owner[h->owner_first[WHO_MODULE] + m];
        r->modules = h->mod_name + m;
        r->nmodules = 1;
        r->dso = h->mod_name[m];
        r->origin = h->mod_origin[m];
    }
    for (size_t a = 0; a < h->namb; a++) {
        const struct kms_modlist *c = h->cand_list + h->amb_first[a];
        struct owner *r = &h->owner[h->owner_first[WHO_AMBIGUOUS] + a];
        uint32_t n = h->amb_count[a], k = 1;
        r->ambiguous = 1;
        r->candidates = c;
        r->ncandidates = n;
        while (k < n && same_list(&c[k], &c[0]))
            k++;
        if (k == n) { /* the same module(s): only the object is unknown */
            r->modules = c[0].modules;
            r->nmodules = c[0].nmodules;
            r->dso = c[0].modules[0];
            r->origin = c[0].nmodules == 1 && !strcmp(c[0].modules[0], "vmlinux")
                ? KMS_ORIGIN_CORE : KMS_ORIGIN_BUILTIN;
        }
    }
    struct owner *core = &h->owner[h->owner_first[WHO_CORE]];
    core->modules = kmsi_vmlinux_list;
    core->nmodules = 1;
    core->dso = kmsi_vmlinux_list[0];
    core->origin = KMS_ORIGIN_CORE;
    return KMS_OK;
}
