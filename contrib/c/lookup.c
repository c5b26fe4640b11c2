/*
 * kmodsyms-c-lookup FILE NAME
 *
 * Prints one line per symbol entry called NAME, in file order:
 *     MODULES OBJECT SIZE
 * MODULES is the comma-separated list of built-in modules ("vmlinux" for the
 * core kernel), SIZE is decimal.  Exit status: 0 found, 1 no such symbol,
 * 2 bad file or usage (one line on stderr).
 */
#include <stdio.h>

#include "kmodsyms.h"

int main(int argc, char **argv)
{
    char err[512];
    kms_file *f;
    uint32_t first, count, i, k, n;

    if (argc != 3) {
        fprintf(stderr, "usage: kmodsyms-c-lookup FILE NAME\n");
        return 2;
    }
    f = kms_open(argv[1], err, sizeof err);
    if (!f) {
        fprintf(stderr, "kmodsyms-c-lookup: %s\n", err);
        return 2;
    }
    count = kms_find(f, argv[2], &first);
    for (i = first; i < first + count; i++) {
        n = kms_sym_nmodules(f, i);
        if (n == 0)
            fputs("vmlinux", stdout);
        for (k = 0; k < n; k++) {
            if (k)
                putchar(',');
            fputs(kms_sym_module(f, i, k), stdout);
        }
        printf(" %s %llu\n", kms_sym_object(f, i), (unsigned long long)kms_sym_size(f, i));
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "kmodsyms-c-lookup: write error\n");
        kms_close(f);
        return 2;
    }
    kms_close(f);
    return count ? 0 : 1;
}
