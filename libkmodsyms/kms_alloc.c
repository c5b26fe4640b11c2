// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Memory for a load, under every stage: the scratch rooms that only loading
 * needs (taken and given back as a stack, all unmapped once the index is
 * built) and the arrays a handle keeps that may ask for huge pages.
 */
#include "kms_internal.h"

#include <sys/mman.h>
#include <unistd.h>

/*
 * Memory for what only loading needs: mappings carved in order, and given
 * back as a stack (a step's scratch, once it returns), all unmapped once
 * the index is built.  What a step gives back stays resident for the next
 * steps (placement, attribution and the regions each reach into the same
 * pages: a page faulted in again is zeroed again), until kmsi_scratch_trim
 * gives the kernel every page above what is in use, before the steps that
 * add the most to the resident set.  Like malloc's, scratch memory is not
 * zeroed.  The mappings ask for huge pages, as the kept arrays do (below).
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
    struct scratch *s = h->load->scratch;
    size_t need;
    if (size && count > (SIZE_MAX - 2 * SCRATCH_ALIGN) / size)
        return NULL;
    need = round_up(count * size, SCRATCH_ALIGN);
    if (!s || s->size - s->used < need) {
        size_t map = need + SCRATCH_ALIGN > SCRATCH_MAPPING ? need + SCRATCH_ALIGN
                                                            : SCRATCH_MAPPING;
        void *m = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
#if defined(MADV_HUGEPAGE) && !defined(KMS_PORTABLE_ALLOC)
        /* in 2 MiB pages where the kernel gives them: a load touches a few
         * MiB of scratch, a thousand small faults, each dearer than the work
         * its page holds; the peak resident set is the pieces', later, and
         * does not grow (bench c_memory) */
        madvise(m, map, MADV_HUGEPAGE);
#endif
        s = m;
        s->prev = h->load->scratch;
        s->size = map;
        s->used = SCRATCH_ALIGN;
        h->load->scratch = s;
    }
    void *p = (unsigned char *)s + s->used;
    s->used += need;
    return p;
}

struct scratch_mark kmsi_scratch_mark(const kms_handle *h)
{
    struct scratch_mark m = {h->load->scratch, h->load->scratch ? h->load->scratch->used : 0};
    return m;
}

/* The last room taken, P, cut to COUNT items of SIZE bytes (once their
 * number is known): the rest is the next room's. */
void kmsi_scratch_shrink(kms_handle *h, const void *p, size_t count, size_t size)
{
    size_t at = (size_t)((const unsigned char *)p - (const unsigned char *)h->load->scratch);
    h->load->scratch->used = at + round_up(count * size, SCRATCH_ALIGN);
}

void kmsi_scratch_release(kms_handle *h, struct scratch_mark m)
{
    while (h->load->scratch != m.at) {
        struct scratch *s = h->load->scratch;
        h->load->scratch = s->prev;
        munmap(s, s->size);
    }
    if (h->load->scratch)
        h->load->scratch->used = m.used;
}

/* The scratch's whole pages above what is in use, given back to the kernel. */
void kmsi_scratch_trim(kms_handle *h)
{
#ifdef MADV_DONTNEED
    struct scratch *s = h->load->scratch;
    long page = sysconf(_SC_PAGESIZE);
    size_t keep = s && page > 0 ? round_up(s->used, (size_t)page) : 0;
    if (s && s->size > keep)
        madvise((unsigned char *)s + keep, s->size - keep, MADV_DONTNEED);
#else
    (void)h;
#endif
}

/*
 * Huge pages (THP, where the kernel gives them on request) for the arrays a
 * handle keeps that grow with kallsyms: the names, the rows and the
 * pieces.  A page faulted in costs the kernel more than parsing the lines
 * it holds (it is zeroed, and under a hypervisor the fault is dearer still),
 * and the rows and pieces are then read at random by every resolve: in 2
 * MiB pages they take a few faults and TLB entries, not thousands.  Asked
 * for only where the text read so far predicts they will be filled (each
 * untouched 2 MiB that the prediction fills to 7/8 at least): the rest
 * stays in small pages, so that little more memory is held than they fill
 * (the predictions err by a few percent, their last one by none).  The
 * arrays begin on a huge page (kmsi_alloc_hugeable), and the first
 * prediction is made before any line is parsed (advise_sample): the first
 * 2 MiB too are huge.  KMS_PORTABLE_ALLOC asks for none (plain malloc, as
 * where the kernel has no THP): make check builds test_kms so too.
 */
void *kmsi_alloc_hugeable(size_t size)
{
#ifndef KMS_PORTABLE_ALLOC
    if (size > SIZE_MAX - HUGE_PAGE)
        return NULL;
    if (size >= HUGE_PAGE)
        return aligned_alloc(HUGE_PAGE, round_up(size, HUGE_PAGE));
#endif
    return malloc(size);
}

/* BASE: an array of CAP bytes, USED of them filled, EXPECT predicted. */
void kmsi_advise_huge(void *base, size_t cap, size_t *asked, size_t used, uint64_t expect)
{
#if defined(MADV_HUGEPAGE) && !defined(KMS_PORTABLE_ALLOC)
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
