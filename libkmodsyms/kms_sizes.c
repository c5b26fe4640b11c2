// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Sizes that say what they are (docs/resolver.md R48, R49): every answering
 * kallsyms line grouped by the module whose address lookup the kernel
 * would make for it (the core kernel, each loaded or pseudo-module), each
 * group by address; from that, the estimated size of every line with no
 * ELF size (the gap to the next line of its group, bounded by its module's
 * core or the core kernel's range), and the kernel's own %pS answer
 * (kms_resolve_kernel()).  Built once a load's index is, from its lines
 * by address.
 */
#include "kms_internal.h"

/* The group of line I: its loaded or pseudo-module, 0 for the core kernel
 * (vmlinux and its built-in modules: one kallsyms table). */
static uint32_t group_of(const kms_handle *h, size_t i)
{
    return kmsi_loaded_module(h, i);
}

/* The core kernel's markers the kernel's own lookups read
 * (include/asm-generic/sections.h), by name. */
#define MARKER(s) {s, sizeof s - 1}
static const struct {
    const char *name;
    uint32_t len;
} marker_name[K_MARKERS] = {MARKER("_stext"), MARKER("_etext"), MARKER("_sinittext"),
                            MARKER("_einittext"), MARKER("_end"), MARKER("__init_begin"),
                            MARKER("__init_end")};

static int seen(const kms_handle *h, int k)
{
    return (h->marker_seen >> k) & 1;
}

/* Whether [marker A, marker B) holds ADDR. */
static int between(const kms_handle *h, int a, int b, uint64_t addr)
{
    return seen(h, a) && seen(h, b) && h->marker[a] <= addr && addr < h->marker[b];
}

/* R53: is_ksym_addr() (include/linux/kallsyms.h): with CONFIG_KALLSYMS_ALL
 * (kallsyms lists _end) [_stext, _end) and [__init_begin, __init_end),
 * else [_stext, _etext) and [_sinittext, _einittext).  Without the
 * markers (a partial kallsyms), where core lines answer. */
static int ksym_addr(const kms_handle *h, uint64_t addr)
{
    if (!seen(h, K_STEXT)) {
        for (uint32_t r = 0; r < h->ncore_ranges; r++)
            if (h->core_range[2 * r] <= addr && addr <= h->core_range[2 * r + 1])
                return 1;
        return 0;
    }
    if (seen(h, K_END))
        return between(h, K_STEXT, K_END, addr) || between(h, K_INIT_BEGIN, K_INIT_END, addr);
    return between(h, K_STEXT, K_ETEXT, addr) || between(h, K_SINITTEXT, K_EINITTEXT, addr);
}

/* R49: where group G's addresses end when nothing above bounds them: for the
 * core kernel get_symbol_pos()'s fallback (_einittext in the init text,
 * else _end with CONFIG_KALLSYMS_ALL, else _etext), for a loaded module
 * the end of its core when ADDR is in it; 0 for none. */
static uint64_t group_bound(const kms_handle *h, uint32_t g, uint64_t addr)
{
    if (g == 0) {
        int k = between(h, K_SINITTEXT, K_EINITTEXT, addr) ? K_EINITTEXT
              : seen(h, K_END) ? K_END : K_ETEXT;
        return seen(h, k) && h->marker[k] > addr ? h->marker[k] : 0;
    }
    uint64_t last;
    if (h->mod_origin[g] == KMS_ORIGIN_LOADABLE && !kmsi_modules_outside_core(&h->mods, g, addr) &&
        kmsi_modules_core_last(&h->mods, g, &last) && last != UINT64_MAX && last >= addr)
        return last + 1;
    return 0;
}

/* R61: a zero-size marker by its name: the linker's __start_SEC and
 * __stop_SEC, lockdep's __key and __key.N (a struct lock_class_key, empty
 * without CONFIG_LOCKDEP). */
static int zero_size_marker(const kms_handle *h, size_t i)
{
    const char *n = line_name(h, i);
    size_t len = h->line[i].name_len;
    return (len > 8 && memcmp(n, "__start_", 8) == 0) || (len > 7 && memcmp(n, "__stop_", 7) == 0) ||
           (len >= 5 && memcmp(n, "__key", 5) == 0 && (len == 5 || n[5] == '.'));
}

int kmsi_group_lines(kms_handle *h, kms_error *err)
{
    size_t n = h->n, ng = h->nmods ? h->nmods : 1;
    uint32_t *at;
    if (!ALLOC(h, group_first, ng + 1) ||
        !(h->grouped = malloc((n ? n : 1) * sizeof *h->grouped)) ||
        !(h->estimate = malloc((n ? n : 1) * sizeof *h->estimate)) ||
        !(at = malloc(ng * sizeof *at)))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing kallsyms");
    /* each line's group in kallsyms order (in estimate[], until the
     * estimates are written; UINT32_MAX: none), the markers with them: the
     * first core line of each name */
    h->marker_seen = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t g = group_of(h, i);
        h->estimate[i] = h->line[i].answers ? g : UINT32_MAX;
        h->group_first[g + 1] += h->line[i].answers;
        if (g || h->line[i].name_len > sizeof "__init_begin" - 1 || line_name(h, i)[0] != '_')
            continue;
        for (int k = 0; k < K_MARKERS; k++)
            if (!seen(h, k) && line_name_is(h, i, marker_name[k].name, marker_name[k].len)) {
                h->marker[k] = h->line[i].addr;
                h->marker_seen |= 1u << k;
            }
    }
    /* counting sort of the lines by address into their groups: stable, so
     * that lines of one address keep kallsyms order */
    for (size_t g = 0; g < ng; g++)
        h->group_first[g + 1] += h->group_first[g];
    memcpy(at, h->group_first, ng * sizeof *at);
    for (size_t k = 0; k < n; k++) {
        uint32_t i = h->load->by_address[k], g = h->estimate[i];
        if (g != UINT32_MAX)
            h->grouped[at[g]++] = i;
    }
    free(at);
    for (size_t i = 0; i < n; i++)
        h->estimate[i] = NO_ESTIMATE;
    /* R49: each group from its top, the next greater address seen so far */
    for (uint32_t g = 0; g < ng; g++) {
        uint64_t above = 0, here = 0; /* 0: none yet (no line is above address 0) */
        int loaded = g && h->mod_origin[g] == KMS_ORIGIN_LOADABLE, real_here = 0;
        for (uint32_t k = h->group_first[g + 1]; k-- > h->group_first[g];) {
            uint32_t i = h->grouped[k];
            const struct line *l = &h->line[i];
            if (l->addr != here || k + 1 == h->group_first[g + 1]) {
                above = k + 1 == h->group_first[g + 1] ? 0 : here;
                here = l->addr;
                real_here = 0; /* R61: a line of this address that is no marker */
                for (uint32_t j = k + 1; loaded && j-- > h->group_first[g] &&
                                         h->line[h->grouped[j]].addr == here;)
                    real_here |= !zero_size_marker(h, h->grouped[j]);
            }
            if (l->size >= 0)
                continue;
            int marker = loaded && zero_size_marker(h, i);
            if (marker && real_here)
                continue; /* R61: the bytes here are the other line's */
            uint64_t bound = group_bound(h, g, l->addr);
            uint64_t end = above && (!bound || above < bound) ? above : bound;
            if (!end && loaded && !marker)
                end = l->addr + 1; /* R61: nothing above: its first byte */
            if (end > l->addr && end - l->addr < NO_ESTIMATE)
                h->estimate[i] = (uint32_t)(end - l->addr);
        }
    }
    return KMS_OK;
}

int64_t kmsi_line_size(const kms_handle *h, size_t i, uint8_t *kind)
{
    if (h->line[i].size >= 0) {
        *kind = KMS_SIZE_EXACT;
        return h->line[i].size;
    }
    if (h->estimate && h->estimate[i] != NO_ESTIMATE) {
        *kind = KMS_SIZE_ESTIMATED;
        return h->estimate[i];
    }
    *kind = KMS_SIZE_UNKNOWN;
    return -1;
}

/* The module memory (kernel/module's MOD_TEXT, MOD_RODATA, MOD_DATA) a
 * loaded module's line of kallsyms type TYPE is in, as far as its letter
 * tells: the kernel bounds a module symbol's size by the end of its own. */
static int memory_kind(uint8_t type)
{
    switch (type) {
    case 't': case 'T': case 'w': case 'W':
        return 0;
    case 'r': case 'R':
        return 1;
    default:
        return 2;
    }
}

/* R54: whether kallsyms_lookup_buildid() asks pseudo-module NAME's owner:
 * bpf_address_lookup() and ftrace_mod_address_lookup() only (a kprobe
 * instruction page, say, prints as a bare address). */
static int kernel_looks_up(const char *name)
{
    return strcmp(name, "bpf") == 0 || strcmp(name, "__builtin__ftrace") == 0;
}

/*
 * %pS (kernel/kallsyms.c __sprint_symbol(), docs/resolver.md R53-R55).  The
 * core kernel (is_ksym_addr(): the core ranges): get_symbol_pos(), the
 * last address at or below ADDR, its first line in kallsyms order, size
 * the gap to the next greater address, else to the range's end.  A loaded
 * module (the one whose lines answer ADDR): find_kallsyms_symbol(), the
 * same over that module's lines but its mapping symbols, the size bounded
 * by its core when the kernel said where that is.  The bpf and ftrace
 * pseudo-modules the same, their sizes only estimated.  A size with no
 * end known above ADDR is 0 and printed '?' (R55).
 */
int kms_resolve_kernel(const kms_handle *h, uint64_t addr, struct kms_ksym *caller)
{
    struct kms_ksym out;
    uint32_t g = UINT32_MAX;
    if (!h || !caller)
        return 0;
    memset(&out, 0, sizeof out);
    out.size = sizeof out;
    out.address = addr;
    out.line = UINT32_MAX;
    if (ksym_addr(h, addr)) {
        g = 0;
    } else {
        struct kms_sym rec = {.size = sizeof rec};
        kms_resolve(h, addr, &rec);
        if ((rec.origin == KMS_ORIGIN_LOADABLE || (rec.origin == KMS_ORIGIN_PSEUDO &&
                                                   kernel_looks_up(rec.dso))) &&
            rec.modules >= h->mod_name && rec.modules < h->mod_name + h->nmods)
            g = (uint32_t)(rec.modules - h->mod_name);
    }
    int found = 0;
    if (g != UINT32_MAX) {
        const uint32_t *line = h->grouped + h->group_first[g];
        size_t count = h->group_first[g + 1] - h->group_first[g], lo = 0, len = count;
        while (len > 0) { /* how many are at or below addr */
            size_t half = len / 2;
            if (h->line[line[lo + half]].addr <= addr) {
                lo += half + 1;
                len -= half + 1;
            } else {
                len = half;
            }
        }
        if (lo > 0) {
            size_t best = lo - 1, next = lo;
            uint64_t start = h->line[line[best]].addr;
            while (best > 0 && h->line[line[best - 1]].addr == start)
                best--; /* the first alias, as the kernel keeps */
            uint32_t i = line[best];
            uint64_t bound = group_bound(h, g, start), end = 0;
            if (next < count)
                end = h->line[line[next]].addr;
            if (bound && (!end || bound < end))
                end = bound;
            if (end <= addr) /* R55: no end known above the address, no size */
                end = 0;
            out.line = i;
            out.sym = h->text + h->line[i].name;
            out.sym_len = h->line[i].name_len;
            out.sym_start = start;
            out.offset = addr - start;
            out.sym_size = end ? end - start : 0;
            /* the kernel's exactly, but where the end is a bound we only
             * approximate (a module's core from /proc/modules, a
             * pseudo-module's last line) or none */
            out.exact = end && (g == 0 || (next < count && end == h->line[line[next]].addr &&
                                           h->mod_origin[g] == KMS_ORIGIN_LOADABLE &&
                                           memory_kind(h->line[i].type) ==
                                               memory_kind(h->line[line[next]].type)));
            out.module = g ? h->mod_name[g] : NULL;
            found = 1;
        }
    }
    kmsi_ksym_text(&out, out.text, sizeof out.text);
    put_fitting(caller, &out, sizeof out);
    return found;
}
