// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: one loaded module's .ko matched with its kallsyms lines
 * (docs/resolver.md R44, R45): the file refused when the kernel's word
 * (srcversion, build-id) differs or a name of the lines is not in it; its
 * sections placed by sysfs, else by anchors (a majority vote, R11), else
 * by shape; then every line of a placed section is one of its symbols and
 * every symbol of a section kallsyms shows is a line, or the file is
 * refused.
 */
#include "kms_ko.h"

#include <inttypes.h>

void kmsi_match_free(struct kmsi_match *m)
{
    free(m->lname);
    free(m->llen);
    free(m->addr);
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

static int match_init(struct kmsi_match *m)
{
    size_t nl = m->nl, ns = m->ko->nsym, nn = nl + ns, nsec = m->ko->nsec;
    m->names.mask = kmsi_table_size(nn) - 1;
    m->pairs.mask = kmsi_table_size(nl) - 1;
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
        uint32_t id = m->sid[s] = kmsi_name_id(&m->names, m->ko->sym[s].name, m->ko->sym[s].len);
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
    const struct kmsi_ko_sym *sym = m->ko->sym;
    for (size_t i = 0, next = 0; i < nl; i++) {
        uint32_t id;
        if (next < ns && sym[next].len == m->llen[i] &&
            !memcmp(sym[next].name, m->lname[i], m->llen[i])) {
            id = m->sid[next++];
        } else {
            id = kmsi_name_id(&m->names, m->lname[i], m->llen[i]);
            if (m->nsyms_of[id])
                next = m->first_sym[id] + 1;
        }
        m->lid[i] = id;
        m->line_sym[i] = NO;
        m->next_line[i] = END;
        if (kmsi_is_mapping_symbol(m->lname[i], m->llen[i]))
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
static int line_at(struct kmsi_match *m, uint32_t id, uint64_t addr)
{
    uint32_t n = m->nlines_of[id];
    if (n > FEW_LINES || kmsi_is_mapping_symbol(m->names.ptr[id], m->names.len[id]))
        return kmsi_pair_has(&m->pairs, id, addr);
    for (uint32_t i = n ? m->first_line[id] : END; i != END; i = m->next_line[i])
        if (m->addr[i] == addr)
            return 1;
    return 0;
}

static uint64_t at_base(const struct kmsi_match *m, uint32_t s)
{
    return m->base[m->ko->sym[s].sec] + m->ko->sym[s].value;
}


/* The file refused: *WHY = TEXT (kmsi_format's); 1, or -1 when TEXT could
 * not be made (out of memory). */
static int refuse(char **why, char *text)
{
    *why = text;
    return text ? 1 : -1;
}

/* R45: the kernel's srcversion and build-id, where it says them, are the
 * file's.  0, 1 (refused) or -1. */
static int check_identity(const struct kmsi_ko *ko, const struct kmsi_live *live, char **why)
{
    const char *ks = ko->srcversion, *ls = live->srcversion;
    int differ = (!ls) != (!ks) || (ls && ks && strcmp(ls, ks));
    int either = (ls && ls[0]) || (ks && ks[0]);
    if (live->has_sysfs && differ && either)
        return refuse(why, kmsi_format("srcversion %s, the loaded module's is %s",
                                       ks && ks[0] ? ks : "(none)", ls && ls[0] ? ls : "(none)"));
    if (live->build_id[0] && ko->build_id[0] && strcmp(live->build_id, ko->build_id))
        return refuse(why, kmsi_format("build-id %s, the loaded module's is %s", ko->build_id,
                                       live->build_id));
    return 0;
}

/* R45: every name of the module's lines is in the file. */
static int check_names(const struct kmsi_match *m, char **why)
{
    size_t absent = 0;
    uint32_t first_absent = 0;
    for (uint32_t k = 0; k < m->norder; k++)
        if (!m->nsyms_of[m->lorder[k]] && !absent++)
            first_absent = m->lorder[k];
    if (!absent)
        return 0;
    return refuse(why, kmsi_format("%zu of the module's kallsyms names are not in the file "
                                   "(e.g. %.*s)", absent, (int)m->names.len[first_absent],
                                   m->names.ptr[first_absent]));
}

/* R44: the kernel's own word, each section's load address (a name two
 * sections of the file share says nothing). */
static void bases_from_sysfs(struct kmsi_match *m, const struct kmsi_live *live)
{
    const struct kmsi_ko *ko = m->ko;
    for (uint32_t k = 0; k < ko->nsec; k++) {
        const uint64_t *a = kmsi_live_section(live, ko->sec[k].name);
        uint32_t count = 0;
        for (uint32_t j = 0; j < ko->nsec && count < 2; j++)
            count += !strcmp(ko->sec[j].name, ko->sec[k].name);
        if (a && count == 1) {
            m->base[k] = *a;
            m->has_base[k] = m->by_kernel[k] = 1;
        }
    }
}

/* The anchors' votes (names once in the file and once among the lines, each
 * for base = address - value of its section), together by section:
 * VOTE[FROM[sec] .. FROM[sec + 1]); ORDER[0..*NT) the sections that have
 * votes, in the order of their first. */
static void group_votes(const struct kmsi_match *m, uint64_t *vote, size_t *from,
                        uint32_t *order, uint32_t *nt)
{
    const struct kmsi_ko *ko = m->ko;
    *nt = 0;
    for (int pass = 0; pass < 2; pass++) { /* count, then place (a counting sort) */
        for (uint32_t k = 0; k < m->norder; k++) {
            uint32_t id = m->lorder[k], s = m->first_sym[id], sec = ko->sym[s].sec;
            if (m->nsyms_of[id] != 1 || m->nlines_of[id] != 1)
                continue;
            if (pass == 0 && !from[sec + 2]++)
                order[(*nt)++] = sec;
            if (pass == 1)
                vote[from[sec + 1]++] = m->addr[m->first_line[id]] - ko->sym[s].value;
        }
        for (uint32_t sec = 0; pass == 0 && sec < ko->nsec; sec++)
            from[sec + 2] += from[sec + 1];
    }
}

/* R44 by anchors: a section sysfs did not place takes the base most of its
 * anchors vote for (R11: a tie places nothing); R45: any anchor elsewhere
 * than its section's base refuses the file.  0, 1 (refused) or -1. */
static int bases_from_anchors(struct kmsi_match *m, char **why)
{
    const struct kmsi_ko *ko = m->ko;
    uint32_t nsec = ko->nsec, nt = 0;
    size_t *from = calloc((size_t)nsec + 2, sizeof *from);
    uint32_t *order = malloc((nsec ? nsec : 1) * sizeof *order);
    uint64_t *vote = malloc((m->norder ? m->norder : 1) * sizeof *vote);
    int rc = !from || !order || !vote ? -1 : 0;
    if (!rc)
        group_votes(m, vote, from, order, &nt);
    for (uint32_t k = 0; !rc && k < nt; k++) {
        uint32_t sec = order[k];
        size_t total = from[sec + 1] - from[sec], most, wrong;
        uint64_t best;
        int won = kmsi_majority(vote + from[sec], total, &best, &most);
        if (!m->has_base[sec] && won) {
            m->base[sec] = best;
            m->has_base[sec] = 1;
        }
        wrong = total - most; /* a tie: at least these, whichever base is right */
        if (m->has_base[sec]) {
            wrong = total;
            for (size_t v = from[sec]; v < from[sec + 1]; v++)
                wrong -= vote[v] == m->base[sec];
        }
        if (wrong)
            rc = refuse(why, kmsi_format("%zu of its unique symbols in %s are not where "
                                         "kallsyms shows them", wrong, ko->sec[sec].name));
    }
    free(from);
    free(order);
    free(vote);
    return rc;
}

/* R44 by shape: a section without anchors is placed where all of its
 * symbols that kallsyms names land on lines of their names, if exactly one
 * base does that.  0, or -1. */
static int bases_from_shape(struct kmsi_match *m)
{
    const struct kmsi_ko *ko = m->ko;
    uint8_t *todo = calloc(ko->nsec ? ko->nsec : 1, 1);
    if (!todo)
        return -1;
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
            if (all && fits && b != fit) {
                fits = -1; /* two bases fit: none is placed */
            } else if (all) {
                fit = b;
                fits = 1;
            }
        }
        if (fits == 1) {
            m->base[sec] = fit;
            m->has_base[sec] = 1;
        }
    }
    free(todo);
    return 0;
}

/* R45: every line of a name the file has in a placed section is one of
 * those symbols (the first of them at its address). */
static int lines_are_symbols(struct kmsi_match *m, char **why)
{
    const struct kmsi_ko *ko = m->ko;
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
                return refuse(why, kmsi_format("its %.*s is not at 0x%" PRIx64 ", where kallsyms "
                                               "shows it", (int)m->llen[i], m->lname[i], m->addr[i]));
        }
    }
    return 0;
}

/* R45: the sections kallsyms shows (one of their symbols, of a name some
 * line has, is where kallsyms says -- a line's own symbol is), and every
 * symbol of those is a line. */
static int shown_symbols_are_lines(struct kmsi_match *m, char **why)
{
    const struct kmsi_ko *ko = m->ko;
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
    for (uint32_t s = 0; s < ko->nsym; s++)
        if (m->shown[ko->sym[s].sec] && !m->sym_is_line[s] &&
            !line_at(m, m->sid[s], at_base(m, s)))
            return refuse(why, kmsi_format("its %.*s (%s) is not in kallsyms", (int)ko->sym[s].len,
                                           ko->sym[s].name, ko->sec[ko->sym[s].sec].name));
    return 0;
}

int kmsi_match_module(struct kmsi_match *m, const struct kmsi_ko *ko, const struct kmsi_mline *lines,
                      const size_t *idx, size_t nl, const struct kmsi_live *live, char **why)
{
    memset(m, 0, sizeof *m);
    m->ko = ko;
    m->nl = nl;
    int rc = check_identity(ko, live, why);
    if (rc)
        return rc;
    m->lname = malloc((nl ? nl : 1) * sizeof *m->lname);
    m->llen = malloc((nl ? nl : 1) * sizeof *m->llen);
    m->addr = malloc((nl ? nl : 1) * sizeof *m->addr);
    if (!m->lname || !m->llen || !m->addr)
        return -1;
    for (size_t k = 0; k < nl; k++) {
        m->lname[k] = lines[idx[k]].name;
        m->llen[k] = lines[idx[k]].name_len;
        m->addr[k] = lines[idx[k]].addr;
    }
    if (match_init(m))
        return -1;
    if ((rc = check_names(m, why)) != 0)
        return rc;
    bases_from_sysfs(m, live);
    if ((rc = bases_from_anchors(m, why)) != 0 || (rc = bases_from_shape(m)) != 0 ||
        (rc = lines_are_symbols(m, why)) != 0)
        return rc;
    return shown_symbols_are_lines(m, why);
}
