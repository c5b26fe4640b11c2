// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Attribution (docs/resolver.md R20): each core kallsyms line matched with
 * its dtrace_syms entry by address and name in its placed section (R21),
 * else with a zero-size entry at a section's end (R22), else found
 * ambiguous between unplaced sized copies (R25).  Follows placement (kms_place.c); the index
 * (kms_index.c) is built from what it finds.  The build attributes System.map's
 * lines with this same code (R62): kmsi_attribute_at_link runs it over the
 * build's tables at their link addresses.
 */
#include "kms_internal.h"

/* Whether line I is called the string at OFF of the string table (read no
 * further than its NUL, or within the table).  A line's name may hold a
 * NUL: then it differs, as the string would end there. */
static inline int name_eq(const kms_handle *h, size_t i, uint32_t off)
{
    const char *name = str(h, off), *l = line_name(h, i);
    uint32_t len = h->line[i].name_len, k = 0;
    /* eight bytes at a time while they lie within the table (the string
     * may end sooner: a NUL among them ends the comparison) */
    if ((uint64_t)off + len < h->count[T_STRINGS]) {
        for (; k + 8 <= len; k += 8) {
            uint64_t x, y;
            memcpy(&x, name + k, 8);
            memcpy(&y, l + k, 8);
            if (x != y || ((x - UINT64_C(0x0101010101010101)) & ~x & UINT64_C(0x8080808080808080)))
                return 0; /* differs, or the string ends here */
        }
        if ((uint64_t)off + k + 8 <= h->count[T_STRINGS]) {
            /* the rest and the string's NUL in one word: the bytes up to the
             * line's NUL the same, and none of the string's a NUL before it
             * (the masks in memory order, whichever the byte order) */
            static const unsigned char ones[16] = {255, 255, 255, 255, 255, 255, 255, 255};
            const uint64_t low7 = UINT64_C(0x7F7F7F7F7F7F7F7F), high = ~low7;
            uint64_t x, y, upto_nul, before_nul;
            memcpy(&x, name + k, 8);
            memcpy(&y, l + k, 8); /* (the names end in 8 spare bytes) */
            memcpy(&upto_nul, ones + 7 - (len - k), 8);
            memcpy(&before_nul, ones + 8 - (len - k), 8);
            uint64_t nonzero = (((x & low7) + low7) | x) & high; /* no carry between bytes */
            return !((x ^ y) & upto_nul) && !(~nonzero & high & before_nul);
        }
    }
    while (k < len && name[k] == l[k] && name[k])
        k++;
    return k == len && name[len] == 0;
}

/*
 * Entries by the key section << 32 | value (docs/resolver.md R20): the
 * rows of symbols_by_offset (docs/format.md §11), grouped by section, each
 * section's by value, equal values in entry order, so that of the entries
 * at one offset with a line's name the first in the file is the one taken
 * (R21).  Lines in address order come in each placed section's together
 * and by offset, so a cursor walking that section's rows finds each line's
 * entries without a search; a row holds what a line compares (value and
 * name), so that the walk reads the symbol table only for the entry taken.
 */
struct entry_row {
    uint32_t value;      /* the entry's value (every value is below 2^32, or nothing is keyed) */
    uint32_t name;       /* its name's offset in the string table */
    uint32_t sym;        /* the entry */
};
struct entry_keys {
    struct entry_row *row;
    const uint32_t *first; /* per section: its first row; first[nsec]: the rows */
};

/* How far ahead of the row being made its entry is fetched: the entries
 * come in offset order, at random in the symbol table (sorted by name), a
 * cache miss each, which overlap when fetched this many rows ahead. */
#define ROW_LOOKAHEAD 8

/* The entries keyed (EK) from symbols_by_offset, checked as they are read:
 * each row's key (section, value, index) above the last one's, so that
 * every symbol is in it once, in that order (SymsFile's check, which also
 * holds a file whose rows are not made).  1: keyed; 0: not, a value being
 * 2^32 or more (a row holds 32 bits of value; only a section of 4 GiB or
 * more, damaged input, has a larger one, and then no line matches an entry
 * by R20's rule); -1 out of memory; -2 the table out of that order. */
static int index_entries(kms_handle *h, struct entry_keys *ek)
{
    uint32_t n = h->count[T_BY_OFFSET], nsec = h->count[T_SECTIONS], last_sec = 0, last_sym = 0;
    uint32_t *counted = h->load->section_rows;
    uint64_t last_value = 0;
    if (n != h->count[T_SYMBOLS])
        return -2;
    if (!h->wide_values && !SCRATCH(h, ek->row, n))
        return -1;
    for (uint32_t k = 0; k < n; k++) {
        if (k + ROW_LOOKAHEAD < n) { /* (the fields read here lie in an entry's first 24 bytes) */
            const unsigned char *ahead = ent(h, T_SYMBOLS, le32(ent(h, T_BY_OFFSET, k + ROW_LOOKAHEAD)));
            PREFETCH(ahead);
            PREFETCH(ahead + SYM_VALUE + 7);
        }
        uint32_t s = le32(ent(h, T_BY_OFFSET, k)); /* (below the count: validate_syms) */
        const unsigned char *sy = ent(h, T_SYMBOLS, s);
        uint32_t sec = le32(sy + SYM_SECTION);
        uint64_t value = le64(sy + SYM_VALUE);
        if (k && (sec != last_sec ? sec < last_sec : value != last_value ? value < last_value
                                                                         : s <= last_sym))
            return -2;
        last_sec = sec;
        last_value = value;
        last_sym = s;
        if (ek->row)
            ek->row[k] = (struct entry_row){(uint32_t)value, le32(sy + SYM_NAME), s};
    }
    if (!ek->row)
        return 0;
    /* each section's rows counted at [sec + 2] (validate_syms): summed,
     * [sec + 1] is where section sec's rows begin */
    for (uint32_t sec = 0; sec < nsec; sec++)
        counted[sec + 2] += counted[sec + 1];
    ek->first = counted + 1;
    return 1;
}

/* The first row with KEY (its section's rows searched), or -1; *END: where
 * its section's rows end.  The key of a line whose offset is 2^32 or more
 * (a section of 4 GiB or more: damaged) has that offset's high bits ORed
 * into the section's, the key staying one 64-bit number, and matches
 * whatever entry has that key (a section index past the table: none). */
static long row_with_key(const kms_handle *h, const struct entry_keys *ek, uint64_t key,
                         uint32_t *end)
{
    uint64_t sec = key >> 32;
    uint32_t value = (uint32_t)key;
    if (sec >= h->count[T_SECTIONS])
        return NO;
    size_t lo = ek->first[sec], n = ek->first[sec + 1] - lo;
    while (n > 0) {
        size_t half = n / 2;
        if (ek->row[lo + half].value < value) {
            lo += half + 1;
            n -= half + 1;
        } else {
            n = half;
        }
    }
    *end = ek->first[sec + 1];
    return lo < *end && ek->row[lo].value == value ? (long)lo : NO;
}

/* Of rows R.. (before END) with R's value, the first entry with line I's
 * name, or -1. */
static int32_t entry_named(const kms_handle *h, const struct entry_keys *ek, size_t i,
                           uint32_t r, uint32_t end)
{
    for (uint32_t value = ek->row[r].value; r < end && ek->row[r].value == value; r++)
        if (name_eq(h, i, ek->row[r].name))
            return (int32_t)ek->row[r].sym;
    return NO;
}

/* R20's match for one line and section: the entry of SEC
 * at the line's offset with its name, or -1. */
static int32_t match_entry(const kms_handle *h, const struct entry_keys *ek, size_t i,
                           int32_t sec)
{
    uint32_t end;
    long r = row_with_key(h, ek, (uint64_t)sec << 32 | (h->line[i].addr - h->load->section_base[sec]),
                          &end);
    return r < 0 ? NO : entry_named(h, ek, i, (uint32_t)r, end);
}

/* Line I is entry S: what the index needs of the entry (size, binding as
 * linked (R59), preference) is read now, while its row is at hand. */
static inline void take_entry(kms_handle *h, size_t i, int32_t s)
{
    const unsigned char *sy = ent(h, T_SYMBOLS, (uint32_t)s);
    struct line *l = &h->line[i];
    int64_t size = (int64_t)le64(sy + SYM_SIZE);
    h->load->line_matched[i] = 1;
    if (h->load->line_entry)
        h->load->line_entry[i] = s;
    l->size = size < 0 ? -1 : size; /* read as negative: unknown */
    l->binding = linked_binding(l->type, sy[SYM_BINDING] <= 2 ? sy[SYM_BINDING] : KMS_BINDING_UNKNOWN);
    l->prefer = symbol_prefer(sy[SYM_TYPE] != 0, l->binding);
}

/* The walk of one section's rows by the lines in it, in address order. */
struct cursor {
    int32_t sec;         /* its section, -1 none yet */
    uint32_t at, end;    /* the row reached, and where the section's rows end */
};

/* The first row of the key of line I in SEC, or -1; *END: where its
 * section's rows end.  Lines of SEC come in address order, so the cursor
 * only moves up its rows; an offset of 2^32 or more searches. */
static long row_of_line(const kms_handle *h, const struct entry_keys *ek, struct cursor *c,
                        size_t i, int32_t sec, uint32_t *end)
{
    uint64_t off = h->line[i].addr - h->load->section_base[sec];
    if (off >> 32)
        return row_with_key(h, ek, (uint64_t)sec << 32 | off, end);
    if (c->sec != sec) {
        c->sec = sec;
        c->at = ek->first[sec];
        c->end = ek->first[sec + 1];
    }
    while (c->at < c->end && ek->row[c->at].value < off)
        c->at++;
    *end = c->end;
    return c->at < c->end && ek->row[c->at].value == off ? (long)c->at : NO;
}

/* A line whose key has rows, compared LAG lines later: its entry's name and
 * row are fetched meanwhile.  The lines come in address order, but their
 * entries' names and rows lie at random in the string and symbol tables,
 * a cache miss each: fetched a ring of lines ahead, those misses overlap,
 * where compared at once each line would wait for its own. */
#define LAG 16
struct pending {
    uint32_t line, row, end;
};

static void settle(kms_handle *h, const struct entry_keys *ek, const struct pending *p)
{
    int32_t got = entry_named(h, ek, p->line, p->row, p->end);
    if (got >= 0)
        take_entry(h, p->line, got);
}

/* Stable merge sort of entry indices by name (strcmp); TMP: room for N. */
static void sort_by_name(const kms_handle *h, uint32_t *a, size_t n, uint32_t *tmp)
{
    if (n < 2)
        return;
    size_t m = n / 2;
    sort_by_name(h, a, m, tmp);
    sort_by_name(h, a + m, n - m, tmp);
    size_t i = 0, j = m, o = 0;
    while (i < m && j < n)
        tmp[o++] = strcmp(sym_name(h, a[j]), sym_name(h, a[i])) < 0 ? a[j++] : a[i++];
    while (i < m)
        tmp[o++] = a[i++];
    while (j < n)
        tmp[o++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

/* Compare line I's name (bytes) with NAME (strcmp order). */
static int line_name_cmp(const kms_handle *h, size_t i, const char *name)
{
    const unsigned char *p = (const unsigned char *)line_name(h, i);
    const unsigned char *q = (const unsigned char *)name;
    uint32_t len = h->line[i].name_len;
    for (uint32_t k = 0;; k++) {
        if (k == len)
            return q[k] ? -1 : 0;
        if (!q[k])
            return 1;
        if (p[k] != q[k])
            return p[k] < q[k] ? -1 : 1;
    }
}

/*
 * Attribution (docs/resolver.md R20): a core line is in the placed section
 * holding its address, and is the entry of that section at that offset with
 * its name; a line in none is a zero-size symbol at the end of a section
 * ending exactly there, if one has it; a line still in none whose name only
 * unplaced sized copies carry is ambiguous between them (R22, R25).
 */
/* Where vmlinux symbol V is in this boot: its link address moved by the
 * shift of the (last) segment holding it, as its sections move (R7), or
 * NO_ADDRESS when that segment's shift is unknown. */
static uint64_t vmlinux_symbol_at(const kms_handle *h, uint32_t v)
{
    uint64_t address = le64(ent(h, T_VSYMS, v) + VSYM_ADDRESS), at = NO_ADDRESS;
    for (uint32_t g = 0; g < h->count[T_SEGMENTS]; g++) {
        const unsigned char *sg = ent(h, T_SEGMENTS, g);
        if (address >= le64(sg + SEG_START) && address <= le64(sg + SEG_END))
            at = h->load->seg_known[g] ? address + h->load->seg_shift[g] : NO_ADDRESS;
    }
    return at;
}

/* R56: a core line no entry answers takes the size vmlinux's own symbol
 * table gives its name at its address: the first entry of the table (by
 * address, then name) with its name whose address in this boot is the
 * line's.  The table is joined with the lines by that address, both walked
 * in address order (the entries' ties in table order), so that a name is
 * compared only with the entries at its line's address.  The file lists
 * the table in link address order and its names' strings in that order
 * (docs/format.md): a segment's shift keeps it, so the entries' addresses
 * in this boot come sorted (the sort only checks it, unless the segments
 * move past one another) and the walk reads entries and names in order.
 * -1: out of memory. */
static int vmlinux_sizes(kms_handle *h)
{
    uint32_t nv = h->count[T_VSYMS];
    struct keyed *at;
    if (!nv)
        return 0;
    if (!SCRATCH(h, at, nv))
        return -1;
    for (uint32_t v = 0; v < nv; v++) {
        at[v].key = vmlinux_symbol_at(h, v);
        at[v].idx = v;
    }
    if (kmsi_sort_keyed(h, at, nv))
        return -1;
    for (size_t k = 0, v = 0; k < h->n && v < nv; k++) {
        size_t i = h->load->by_address[k];
        if (h->load->line_matched[i] || h->line[i].size >= 0 || line_module(h, i) != 0)
            continue;
        while (v < nv && at[v].key < h->line[i].addr)
            v++;
        for (size_t u = v; u < nv && at[u].key == h->line[i].addr; u++)
            if (name_eq(h, i, le32(ent(h, T_VSYMS, at[u].idx) + VSYM_NAME))) {
                int64_t size = (int64_t)le64(ent(h, T_VSYMS, at[u].idx) + VSYM_SIZE);
                h->line[i].size = size < 0 ? -1 : size; /* read as negative: unknown */
                break;
            }
    }
    return 0;
}

/* R21: each core line in a placed extent walks its section's rows (no
 * search); the names and rows of the entries the lines find are read at
 * random: each is fetched LAG lines ahead of its comparison.  The core
 * lines in no extent into LOOSE[0..*NLOOSE), in address order. */
static void lines_in_extents(kms_handle *h, const struct entry_keys *ek, int keyed,
                             uint32_t *loose, size_t *nloose)
{
    struct pending ring[LAG];
    struct cursor cur = {NO, 0, 0};
    size_t looked = 0;
    for (size_t k = 0, e = 0; k < h->n; k++) {
        size_t i = h->load->by_address[k];
        while (e < h->next && h->ext_start[e] <= h->line[i].addr)
            e++;
        h->load->line_section[i] = NO;
        if (line_module(h, i) != 0)
            continue;
        if (e == 0 || h->line[i].addr >= h->ext[e - 1].end) {
            loose[(*nloose)++] = (uint32_t)i; /* a core line in no extent */
            continue;
        }
        int32_t sec = h->load->line_section[i] = (int32_t)h->ext[e - 1].sec;
        uint32_t end;
        long r = keyed ? row_of_line(h, ek, &cur, i, sec, &end) : NO;
        if (r < 0)
            continue;
        /* the name, as long as the line's (its end may lie past the table),
         * and both cache lines a symbol's row may span */
        const char *name = str(h, ek->row[r].name);
        const unsigned char *sy = ent(h, T_SYMBOLS, ek->row[r].sym);
        PREFETCH(name);
        PREFETCH((const void *)((uintptr_t)name + h->line[i].name_len));
        PREFETCH(sy);
        PREFETCH(sy + entry_size[T_SYMBOLS] - 1);
        if (looked >= LAG)
            settle(h, ek, &ring[looked % LAG]);
        ring[looked++ % LAG] = (struct pending){(uint32_t)i, (uint32_t)r, end};
    }
    for (size_t t = looked > LAG ? looked - LAG : 0; t < looked; t++) /* the last lines' */
        settle(h, ek, &ring[t % LAG]);
}

/* The placed sections (size > 0) by end, equal ends in section order, into
 * *ENDS (scratch, h->next items): the extents' sections taken in that order.
 * The extents are by start: when their ends ascend too, each distinct,
 * that is the order by end (none to keep in section order), and nothing is
 * sorted.  -1: out of memory. */
static int sections_by_end(kms_handle *h, struct keyed **ends_out)
{
    struct keyed *ends;
    if (!SCRATCH(h, ends, h->next))
        return -1;
    int by_start = 1;
    for (uint32_t k = 0; k < h->next; k++) {
        ends[k].key = h->ext[k].end;
        ends[k].idx = h->ext[k].sec;
        by_start &= k == 0 || ends[k].key > ends[k - 1].key;
    }
    for (uint32_t sec = 0, k = 0; !by_start && sec < h->count[T_SECTIONS] && k < h->next; sec++) {
        uint64_t size = le64(ent(h, T_SECTIONS, sec) + SEC_SIZE);
        if ((h->placed[sec] & PLACED) && size > 0) {
            ends[k].key = h->load->section_base[sec] + size;
            ends[k++].idx = sec;
        }
    }
    *ends_out = ends;
    return !by_start && kmsi_sort_keyed(h, ends, h->next) ? -1 : 0;
}

/* R22: lines in no extent, at the end of placed sections ending there: the
 * sections by end (ENDS), each line tried against each in order; where
 * several have its entry the last one wins, a tie rule that makes every
 * load give the same answer.  -1: out of memory. */
static int lines_at_ends(kms_handle *h, const struct entry_keys *ek, const uint32_t *loose,
                         size_t nloose, const struct keyed *ends)
{
    uint64_t *end_key;
    if (!h->next)
        return 0;
    if (!SCRATCH(h, end_key, h->next))
        return -1;
    for (uint32_t k = 0; k < h->next; k++)
        end_key[k] = ends[k].key;
    /* (the loose lines are in address order: the ends' first at or above each only moves up) */
    for (size_t k = 0, first = 0; k < nloose; k++) {
        size_t i = loose[k];
        int32_t got = NO;
        while (first < h->next && end_key[first] < h->line[i].addr)
            first++;
        for (size_t j = first; j < h->next && end_key[j] == h->line[i].addr; j++) {
            int32_t m = match_entry(h, ek, i, (int32_t)ends[j].idx);
            if (m >= 0)
                got = m;
        }
        if (got >= 0) {
            take_entry(h, i, got);
            h->load->line_section[i] = (int32_t)le32(ent(h, T_SYMBOLS, (uint32_t)got) + SYM_SECTION);
        }
    }
    return 0;
}

/* R25's candidates: the sized entries of unplaced sections, by name then
 * index (the file's own order when it is sorted, as kmodsyms writes it:
 * checked here, not assumed), into *CAND (scratch) and their names into
 * *NAMES.  -1: out of memory. */
static int unplaced_copies(kms_handle *h, uint32_t **cand_out, const char ***names_out,
                           size_t *ncand_out)
{
    uint32_t nsym = h->count[T_SYMBOLS], *cand, *tmp;
    const char **cand_name;
    size_t ncand = 0, c = 1;
    if (!SCRATCH(h, cand, nsym))
        return -1;
    for (uint32_t s = 0; s < nsym; s++) {
        const unsigned char *sy = ent(h, T_SYMBOLS, s);
        if (!(h->placed[le32(sy + SYM_SECTION)] & PLACED) && le64(sy + SYM_SIZE) > 0)
            cand[ncand++] = s;
    }
    kmsi_scratch_shrink(h, cand, ncand, sizeof *cand);
    *cand_out = cand;
    *ncand_out = ncand;
    *names_out = NULL;
    if (!ncand)
        return 0;
    if (!SCRATCH(h, cand_name, ncand))
        return -1;
    cand_name[0] = sym_name(h, cand[0]);
    for (; c < ncand; c++) {
        cand_name[c] = sym_name(h, cand[c]);
        if (strcmp(cand_name[c - 1], cand_name[c]) > 0)
            break;
    }
    if (c < ncand && !SCRATCH(h, tmp, ncand))
        return -1;
    if (c < ncand)
        sort_by_name(h, cand, ncand, tmp);
    for (c = 0; c < ncand; c++)
        cand_name[c] = sym_name(h, cand[c]);
    *names_out = cand_name;
    return 0;
}

/* R25: a loose line still without an entry whose name only unplaced sized
 * copies carry (CAND_NAME[0..NCAND), sorted) is ambiguous between them.
 * -1: out of memory. */
static int ambiguous_lines(kms_handle *h, const char *const *cand_name, size_t ncand,
                           const uint32_t *loose, size_t nloose)
{
    for (size_t k = 0; ncand && k < nloose; k++) {
        size_t i = loose[k];
        if (h->load->line_section[i] >= 0)
            continue;
        size_t lo = 0, hi = ncand;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (line_name_cmp(h, i, cand_name[mid]) > 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        size_t end = lo;
        while (end < ncand && line_name_cmp(h, i, cand_name[end]) == 0)
            end++;
        if (end == lo)
            continue;
        if (h->namb % 64 == 0) {
            size_t nc = h->namb + 64;
            uint32_t *nf = realloc(h->amb_first, nc * sizeof *nf);
            if (nf)
                h->amb_first = nf;
            uint32_t *nn = nf ? realloc(h->amb_count, nc * sizeof *nn) : NULL;
            if (!nn)
                return -1;
            h->amb_count = nn;
        }
        h->line[i].who = WHO(WHO_AMBIGUOUS, h->namb);
        h->amb_first[h->namb] = (uint32_t)lo;
        h->amb_count[h->namb++] = (uint32_t)(end - lo);
    }
    return 0;
}

/* Each candidate's module list, when a line is ambiguous.  -1: out of memory. */
static int candidate_lists(kms_handle *h, const uint32_t *cand, size_t ncand)
{
    if (!h->namb)
        return 0;
    if (!ALLOC(h, cand_list, ncand) || !ALLOC(h, cand_modset, ncand))
        return -1;
    for (size_t c = 0; c < ncand; c++) {
        uint32_t modset = le32(ent(h, T_SYMBOLS, cand[c]) + SYM_MODSET);
        const unsigned char *ms = ent(h, T_MODSETS, modset);
        h->cand_modset[c] = modset;
        h->cand_list[c].nmodules = le32(ms + MODSET_COUNT);
        h->cand_list[c].modules = h->member_name + le32(ms + MODSET_FIRST);
        if (!h->cand_list[c].nmodules) {
            h->cand_list[c].nmodules = 1;
            h->cand_list[c].modules = kmsi_vmlinux_list;
        }
    }
    return 0;
}

int kmsi_attribute_lines(kms_handle *h, const char *syms_path, kms_error *err)
{
    struct scratch_mark mark = kmsi_scratch_mark(h);
    struct entry_keys ek = {NULL, NULL};
    struct keyed *ends = NULL;
    uint32_t *loose, *cand = NULL;
    const char **cand_name = NULL;
    size_t nloose = 0, ncand = 0;
    int keyed = index_entries(h, &ek);
    if (keyed == -2)
        return kmsi_fail(err, KMS_E_SYMS, "%s: symbols_by_offset is not the symbols in section "
                         "and offset order; rebuild it with 'kmodsyms build'", syms_path);
    int bad = keyed < 0 || !SCRATCH(h, loose, h->n);
    if (!bad) {
        lines_in_extents(h, &ek, keyed, loose, &nloose);
        kmsi_scratch_shrink(h, loose, nloose, sizeof *loose);
    }
    bad = bad || sections_by_end(h, &ends) || (keyed && lines_at_ends(h, &ek, loose, nloose, ends)) ||
          unplaced_copies(h, &cand, &cand_name, &ncand) ||
          ambiguous_lines(h, cand_name, ncand, loose, nloose) || candidate_lists(h, cand, ncand);
    /* R56's keys in the pages the loose lines had, faulted in already (a
     * fresh page costs more than the work it holds: kms_alloc.c) */
    kmsi_scratch_release(h, mark);
    bad = bad || vmlinux_sizes(h);
    kmsi_scratch_release(h, mark);
    return bad ? kmsi_fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path) : KMS_OK;
}

/* Placement for the build: every section with a link address where it
 * says (System.map is kallsyms before KASLR: each segment's shift 0). */
static int place_at_link(kms_handle *h, const char *syms_path, kms_error *err)
{
    uint32_t nseg = h->count[T_SEGMENTS];
    if (!SCRATCH(h, h->load->seg_shift, nseg) || !SCRATCH(h, h->load->seg_known, nseg))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory placing %s", syms_path);
    memset(h->load->seg_shift, 0, nseg * sizeof *h->load->seg_shift);
    memset(h->load->seg_known, 1, nseg);
    return kmsi_place_extents(h, h->load->seg_shift, h->load->seg_known, syms_path, err);
}

/*
 * A load's attribution (docs/resolver.md R20-R25) as the build runs it
 * (R62): SYMS_PATH's sections at their link addresses, against
 * SYSMAP[0..LEN), System.map's text read as kallsyms.  Per line of it
 * (NLINES, which it must have): ENTRY its dtrace_syms entry (-1), SECTION
 * the placed section it is attributed to (-1), AMBIGUOUS 1 when R25 makes
 * it so.
 */
int kmsi_attribute_at_link(const char *syms_path, const char *sysmap, size_t len, int32_t *entry,
                           int32_t *section, uint8_t *ambiguous, size_t nlines, kms_error *err)
{
    struct kallsyms_source src = {-1, sysmap, len, "System.map", 0};
    struct kmsi_load ld;
    kms_handle *h = calloc(1, sizeof *h);
    int rc;
    if (!h)
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory");
    memset(&ld, 0, sizeof ld);
    h->load = &ld;
    h->degraded = h->warning = "";
    rc = kmsi_map_syms(h, syms_path, err);
    rc = rc ? rc : kmsi_index_anchors(h, err);
    rc = rc ? rc : kmsi_parse_kallsyms(h, &src, err);
    if (rc == KMS_OK && h->n != nlines)
        rc = kmsi_fail(err, KMS_E_KALLSYMS, "System.map: %zu lines read, %zu expected", h->n, nlines);
    if (rc == KMS_OK && (!SCRATCH(h, ld.line_matched, h->n) || !SCRATCH(h, ld.line_section, h->n) ||
                         !SCRATCH(h, ld.section_base, h->count[T_SECTIONS]) ||
                         kmsi_sort_by_address(h)))
        rc = kmsi_fail(err, KMS_E_NOMEM, "out of memory attributing %s", syms_path);
    if (rc == KMS_OK) {
        memset(ld.line_matched, 0, h->n);
        memset(ld.section_base, 0, h->count[T_SECTIONS] * sizeof *ld.section_base);
        for (size_t i = 0; i < h->n; i++)
            entry[i] = NO;
        ld.line_entry = entry;
        rc = place_at_link(h, syms_path, err);
    }
    rc = rc ? rc : kmsi_attribute_lines(h, syms_path, err);
    for (size_t i = 0; rc == KMS_OK && i < h->n; i++) {
        section[i] = ld.line_section[i];
        ambiguous[i] = WHO_TAG(h->line[i].who) == WHO_AMBIGUOUS;
    }
    ld.line_entry = NULL;
    kms_free(h);
    return rc;
}
