// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * addresses SEED N < /proc/kallsyms: N pseudo-random addresses (hex, one a
 * line) for the live suite's guest to resolve: each a random kallsyms line's
 * address plus a random offset up to one past the next higher address, so
 * that queries fall on symbols, inside them, in padding and just beyond.
 * Static, libc only: it runs in the busybox initramfs, whose shell
 * arithmetic cannot be trusted with 64-bit unsigned addresses.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t state;

static uint64_t next_random(void) /* xorshift64 */
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

static int compare(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fputs("usage: addresses SEED N < kallsyms\n", stderr);
        return 2;
    }
    state = strtoull(argv[1], NULL, 0) | 1;
    unsigned long n = strtoul(argv[2], NULL, 0);
    size_t count = 0, room = 1 << 16;
    uint64_t *addr = malloc(room * sizeof *addr);
    char line[4096];
    while (addr && fgets(line, sizeof line, stdin)) {
        uint64_t a = strtoull(line, NULL, 16);
        if (!a)
            continue;
        if (count == room)
            addr = realloc(addr, (room *= 2) * sizeof *addr);
        if (addr)
            addr[count++] = a;
    }
    if (!addr || count < 2) {
        fputs("addresses: no kallsyms addresses on stdin\n", stderr);
        return 1;
    }
    qsort(addr, count, sizeof *addr, compare);
    for (unsigned long k = 0; k < n; k++) {
        size_t i = next_random() % (count - 1), j = i + 1;
        while (j < count - 1 && addr[j] == addr[i])
            j++;
        uint64_t span = addr[j] - addr[i] + 1;
        printf("0x%llx\n", (unsigned long long)(addr[i] + next_random() % (span < 65536 ? span : 65536)));
    }
    return 0;
}
