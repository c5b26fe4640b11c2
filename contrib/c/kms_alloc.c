// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Memory for a load, under every stage: the scratch rooms that only loading
 * needs (taken and given back as a stack, all unmapped once the index is
 * built) and the arrays a handle keeps that may ask for huge pages.
 */
#include "kms_internal.h"

#include <sys/mman.h>

/*
 * Memory for what only loading needs: mappings carved in order, and given
 * back as a stack (a step's scratch, once it returns), all unmapped once
 * the index is built.  A page faulted in costs more than most steps spend
 * on a line (the kernel zeroes it, and under a hypervisor the fault is
 * dearer still: ~3 us here), so the mappings are aligned to huge pages and
 * ask for them (THP, where the kernel gives them on request): the load's
 * scratch is then a few faults, not ~1,500.  What a step gives back is
 * kept for the next steps (a huge page given to the kernel costs ~0.3 ms
 * to fault in and zero again: placement, attribution and the regions each
 * reach into the same second one), until kmsi_scratch_trim gives the kernel
 * every whole huge page above what is in use, before the steps that add
 * the most to the resident set.  Like malloc's, scratch memory is not
 * zeroed.
 */
#define SCRATCH_MAPPING ((size_t)16 << 20) /* address space: only what is touched is memory */
#define SCRATCH_ALIGN 64u
struct scratch {
    struct scratch *prev; /* the mapping before (this header begins each) */
    size_t size, used;
};

/* Room for COUNT items of SIZE bytes, SCRATCH_ALIGN-aligned; NULL out of memory. */
void *kmsi_scratch(kms_handle *h, size_t count, size_t size)
{
    struct scratch *s = h->scratch;
    size_t need;
    if (size && count > (SIZE_MAX - 2 * HUGE_PAGE) / size)
        return NULL;
    need = round_up(count * size, SCRATCH_ALIGN);
    if (!s || s->size - s->used < need) {
        size_t map = need + SCRATCH_ALIGN > SCRATCH_MAPPING
            ? round_up(need + SCRATCH_ALIGN, HUGE_PAGE) : SCRATCH_MAPPING;
        /* a huge page's worth more, to cut an aligned mapping from */
        unsigned char *m = mmap(NULL, map + HUGE_PAGE, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        uintptr_t at = ((uintptr_t)m + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        if (at > (uintptr_t)m)
            munmap(m, at - (uintptr_t)m);
        munmap((void *)(at + map), (uintptr_t)m + HUGE_PAGE - at);
#ifdef MADV_HUGEPAGE
        madvise((void *)at, map, MADV_HUGEPAGE); /* only a hint: small pages otherwise */
#endif
        s = (struct scratch *)at;
        s->prev = h->scratch;
        s->size = map;
        s->used = SCRATCH_ALIGN;
        h->scratch = s;
    }
    void *p = (unsigned char *)s + s->used;
    s->used += need;
    return p;
}

struct scratch_mark kmsi_scratch_mark(const kms_handle *h)
{
    struct scratch_mark m = {h->scratch, h->scratch ? h->scratch->used : 0};
    return m;
}

/* The last room taken, P, cut to COUNT items of SIZE bytes (once their
 * number is known): the rest is the next room's. */
void kmsi_scratch_shrink(kms_handle *h, const void *p, size_t count, size_t size)
{
    size_t at = (size_t)((const unsigned char *)p - (const unsigned char *)h->scratch);
    h->scratch->used = at + round_up(count * size, SCRATCH_ALIGN);
}

void kmsi_scratch_release(kms_handle *h, struct scratch_mark m)
{
    while (h->scratch != m.at) {
        struct scratch *s = h->scratch;
        h->scratch = s->prev;
        munmap(s, s->size);
    }
    if (h->scratch)
        h->scratch->used = m.used;
}

/* The scratch's whole huge pages above what is in use (part of one would
 * split it), given back to the kernel. */
void kmsi_scratch_trim(kms_handle *h)
{
#ifdef MADV_DONTNEED
    struct scratch *s = h->scratch;
    size_t keep = s ? round_up(s->used, HUGE_PAGE) : 0;
    if (s && s->size > keep)
        madvise((unsigned char *)s + keep, s->size - keep, MADV_DONTNEED);
#else
    (void)h;
#endif
}

/*
 * Huge pages (THP, where the kernel gives them on request) for the names
 * and rows: each 2 MiB of them is then one page fault, not 512.  Asked for
 * only where the text read so far predicts they will be filled (each
 * untouched 2 MiB that the prediction fills to 7/8 at least): the rest
 * stays in small pages, so that little more memory is held than they fill
 * (the predictions err by a few percent, their last one by none).  The arrays
 * begin on a huge page (kmsi_alloc_hugeable), and the first prediction is made
 * before any line is parsed (advise_sample): the first 2 MiB too are huge.
 */
void *kmsi_alloc_hugeable(size_t size)
{
    if (size < HUGE_PAGE)
        return malloc(size);
    if (size > SIZE_MAX - HUGE_PAGE)
        return NULL;
    return aligned_alloc(HUGE_PAGE, round_up(size, HUGE_PAGE));
}

/* BASE: an array of CAP bytes, USED of them filled, EXPECT predicted. */
void kmsi_advise_huge(void *base, size_t cap, size_t *asked, size_t used, uint64_t expect)
{
#ifdef MADV_HUGEPAGE
    uintptr_t b = (uintptr_t)base;
    size_t from = *asked > used ? *asked : used;
    uintptr_t lo = (b + from + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t hi = (b + (expect < cap ? (uintptr_t)expect : cap) + HUGE_PAGE / 8) & ~(HUGE_PAGE - 1);
    if (hi > ((b + cap) & ~(HUGE_PAGE - 1)))
        hi = (b + cap) & ~(HUGE_PAGE - 1);
    if (hi > lo && madvise((void *)lo, hi - lo, MADV_HUGEPAGE) == 0)
        *asked = hi - b;
#else
    (void)base, (void)cap, (void)asked, (void)used, (void)expect;
#endif
}
