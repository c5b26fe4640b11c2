// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Sorting keyed items stably (struct keyed), for placement (the extents),
 * attribution (the sections' ends), the index (lines by address, the .ko
 * extents); and the one majority vote (docs/resolver.md R11), for
 * placement's segment shifts (kms_place.c) and loaded modules' section
 * bases (kms_match.c).
 */
#include "kms_internal.h"

/* Stable sort of A (N items) by key: insertion for a few, else a radix
 * sort, a byte of the key at a time from the least significant (a byte all
 * keys share is skipped: kernel addresses share their top half).  TMP:
 * room for N items. */
void kmsi_stable_sort(struct keyed *a, size_t n, struct keyed *tmp)
{
    size_t i;
    if (n <= 16) { /* a section's few entries */
        for (i = 1; i < n; i++) {
            struct keyed x = a[i];
            size_t j = i;
            for (; j > 0 && a[j - 1].key > x.key; j--)
                a[j] = a[j - 1];
            a[j] = x;
        }
        return;
    }
    for (i = 1; i < n && a[i].key >= a[i - 1].key; i++)
        ;
    if (i >= n)
        return;
    size_t count[8][256];
    memset(count, 0, sizeof count);
    for (i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            count[b][a[i].key >> 8 * b & 0xFF]++;
    struct keyed *src = a, *dst = tmp;
    for (int b = 0; b < 8; b++) {
        size_t *at = count[b], sum = 0;
        if (at[src[0].key >> 8 * b & 0xFF] == n)
            continue;
        for (int d = 0; d < 256; d++) { /* each digit's first place */
            size_t c = at[d];
            at[d] = sum;
            sum += c;
        }
        for (i = 0; i < n; i++)
            dst[at[src[i].key >> 8 * b & 0xFF]++] = src[i];
        struct keyed *sw = src;
        src = dst;
        dst = sw;
    }
    if (src != a)
        memcpy(a, src, n * sizeof *a);
}

/* The same, for input whose long sorted prefix (kallsyms' core lines) is
 * followed by a few unsorted lines (loaded modules list theirs in symbol
 * table order): the rest is sorted alone, then merged once. */
int kmsi_sort_keyed(kms_handle *h, struct keyed *a, size_t n)
{
    size_t p = 1;
    struct keyed *tmp;
    while (p < n && a[p].key >= a[p - 1].key)
        p++;
    if (p >= n)
        return 0;
    if (!SCRATCH(h, tmp, n))
        return -1;
    kmsi_stable_sort(a + p, n - p, tmp);
    size_t i = 0, j = p, o = 0;
    while (i < p && j < n)
        tmp[o++] = a[j].key < a[i].key ? a[j++] : a[i++];
    while (i < p)
        tmp[o++] = a[i++];
    while (j < n)
        tmp[o++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
    return 0;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int kmsi_majority(uint64_t *vote, size_t n, uint64_t *winner, size_t *most)
{
    size_t same = 1, best = 0;
    int unique = 0;
    while (same < n && vote[same] == vote[0])
        same++;
    if (same < n) /* votes that disagree: sorted, to count each value's */
        qsort(vote, n, sizeof *vote, u64_cmp);
    for (size_t b = 0, c; b < n; b = c) {
        for (c = b; c < n && vote[c] == vote[b]; c++)
            ;
        if (c - b > best) {
            best = c - b;
            *winner = vote[b];
            unique = 1;
        } else if (c - b == best) {
            unique = 0; /* R11: a tie for the most is no winner */
        }
    }
    *most = best;
    return unique;
}
