// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: the hash tables of names and addresses that matching a .ko
 * with its module's kallsyms lines looks up (kms_match.c), and the name
 * hash kallsyms' parser shares (kms_kallsyms.c).
 */
#include "kms_ko.h"

/* A name's hash, a word at a time (names are read only within their N
 * bytes: a .ko's last string may end at the end of its mapping). */
uint64_t kmsi_name_hash(const char *p, size_t n)
{
    uint64_t h = 0xCBF29CE484222325u ^ n, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15u;
        h ^= h >> 32;
    }
    w = 0;
    for (size_t k = 0; k < n; k++)
        w |= (uint64_t)(unsigned char)p[k] << (8 * k);
    h = (h ^ w) * 0x9E3779B97F4A7C15u;
    h = (h ^ (h >> 32)) * 0xFF51AFD7ED558CCDu;
    return h ^ (h >> 29);
}

uint32_t kmsi_name_id(struct kmsi_names *t, const char *p, uint32_t len)
{
    size_t k = (size_t)kmsi_name_hash(p, len) & t->mask;
    for (;; k = (k + 1) & t->mask) {
        uint32_t id = t->slot[k];
        if (!id)
            break;
        if (t->len[id - 1] == len && !memcmp(t->ptr[id - 1], p, len))
            return id - 1;
    }
    t->ptr[t->n] = p;
    t->len[t->n] = len;
    t->slot[k] = (uint32_t)++t->n;
    return (uint32_t)(t->n - 1);
}

size_t kmsi_table_size(size_t n)
{
    size_t s = 16;
    while (s < 2 * n + 1)
        s *= 2;
    return s;
}

static size_t pair_hash(uint32_t id, uint64_t addr)
{
    uint64_t h = (addr ^ ((uint64_t)id * 0x9E3779B97F4A7C15u)) * 0xFF51AFD7ED558CCDu;
    return (size_t)(h ^ (h >> 32));
}

int kmsi_pair_has(struct kmsi_pairs *p, uint32_t id, uint64_t addr)
{
    for (size_t i = 0; !p->filled && i < p->n; i++) {
        size_t k = pair_hash(p->lid[i], p->addr[i]) & p->mask;
        while (p->slot[k])
            k = (k + 1) & p->mask;
        p->slot[k] = (uint32_t)i + 1;
    }
    p->filled = 1;
    for (size_t k = pair_hash(id, addr) & p->mask;; k = (k + 1) & p->mask) {
        uint32_t i = p->slot[k];
        if (!i)
            return 0;
        if (p->lid[i - 1] == id && p->addr[i - 1] == addr)
            return 1;
    }
}
