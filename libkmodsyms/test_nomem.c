// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * test_nomem SYMS KALLSYMS: loads that run out of memory.  Each allocation
 * of a load (malloc, calloc, realloc, aligned_alloc, strdup, mmap: linked
 * with GNU ld's --wrap for each) fails in turn, alone and then with every
 * one after it: the load returns NULL with one line of error (KMS_E_NOMEM,
 * or KMS_E_IO where the file cannot be mapped), or a handle answering as
 * the load that failed nothing -- never a crash, a leak (make check runs it
 * under AddressSanitizer) or another answer.  The loads: the fixture tree
 * without modules, and with its fs/fuse/fuse.ko matched.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "kmodsyms.h"

/* the allocations counted from the load's start; FAIL_AT's fails (0: none), and with
 * FAIL_ON every one after it */
static long calls, fail_at;
static int fail_on;

static int failing(void)
{
    calls++;
    if (fail_at && (calls == fail_at || (fail_on && calls > fail_at))) {
        errno = ENOMEM;
        return 1;
    }
    return 0;
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
char *__real_strdup(const char *s);
void *__real_mmap(void *at, size_t n, int prot, int flags, int fd, off_t off);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
char *__wrap_strdup(const char *s);
void *__wrap_mmap(void *at, size_t n, int prot, int flags, int fd, off_t off);

void *__wrap_malloc(size_t n)
{
    return failing() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t size)
{
    return failing() ? NULL : __real_calloc(n, size);
}
void *__wrap_realloc(void *p, size_t n)
{
    return failing() ? NULL : __real_realloc(p, n);
}
void *__wrap_aligned_alloc(size_t align, size_t n)
{
    return failing() ? NULL : __real_aligned_alloc(align, n);
}
char *__wrap_strdup(const char *s)
{
    return failing() ? NULL : __real_strdup(s);
}
void *__wrap_mmap(void *at, size_t n, int prot, int flags, int fd, off_t off)
{
    return failing() ? MAP_FAILED : __real_mmap(at, n, prot, flags, fd, off);
}

/* What a handle answers, as one number: every line (kms_foreach) and module. */
static uint64_t digest;

static void mix(const void *p, size_t n)
{
    for (size_t k = 0; k < n; k++)
        digest = (digest ^ ((const unsigned char *)p)[k]) * UINT64_C(0x100000001B3);
}

static void mix_str(const char *s)
{
    mix(s ? s : "(null)", strlen(s ? s : "(null)") + 1);
}

static int mix_line(const struct kms_line *l, void *arg)
{
    (void)arg;
    mix(&l->address, sizeof l->address);
    mix(&l->sym_size, sizeof l->sym_size);
    mix(&l->size_kind, sizeof l->size_kind);
    mix(&l->type, 1);
    mix(l->name, l->name_len);
    for (uint32_t m = 0; m < l->nmodules; m++)
        mix_str(l->modules[m]);
    mix(&l->origin, 1);
    mix(&l->sym_binding, 1);
    mix_str(l->object);
    return 0;
}

static uint64_t answers(const kms_handle *h)
{
    struct kms_module m[4] = {{.size = sizeof m[0]}};
    size_t n = kms_modules(h, m, 4);
    digest = UINT64_C(0xCBF29CE484222325);
    kms_foreach(h, mix_line, NULL);
    for (size_t k = 0; k < n && k < 4; k++) {
        mix_str(m[k].name);
        mix(&m[k].status, sizeof m[k].status);
        mix(&m[k].sized, sizeof m[k].sized);
        mix_str(m[k].reason);
    }
    return digest;
}

/* Every allocation of the load OPTS makes failing in turn; the number of failures. */
static int fail_each(const struct kms_load_opts *o, const char *what)
{
    kms_error e;
    int failures = 0;
    calls = fail_at = 0;
    kms_handle *h = kms_load_opts(o, &e);
    long total = calls;
    if (!h) {
        fprintf(stderr, "test_nomem: %s: %s\n", what, e.message);
        return 1;
    }
    uint64_t want = answers(h);
    kms_free(h);
    for (fail_on = 0; fail_on < 2; fail_on++)
        for (long n = 1; n <= total; n++) {
            calls = 0;
            fail_at = n;
            h = kms_load_opts(o, &e);
            fail_at = 0;
            if (h) {
                if (answers(h) != want) {
                    fprintf(stderr, "test_nomem: %s: allocation %ld%s failing: other answers\n",
                            what, n, fail_on ? " on" : "");
                    failures++;
                }
                kms_free(h);
            } else if ((e.code != KMS_E_NOMEM && e.code != KMS_E_IO) || !e.message[0] ||
                       strchr(e.message, '\n')) {
                fprintf(stderr, "test_nomem: %s: allocation %ld%s failing: error %d '%s'\n",
                        what, n, fail_on ? " on" : "", e.code, e.message);
                failures++;
            }
        }
    return failures;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fputs("usage: test_nomem SYMS KALLSYMS\n", stderr);
        return 2;
    }
    char tree[4096];
    snprintf(tree, sizeof tree, "%s", argv[2]); /* the fixture tree: kallsyms' directory */
    char *slash = strrchr(tree, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(tree, sizeof tree, ".");
    struct kms_load_opts o = {.size = sizeof o, .syms_path = argv[1], .kallsyms_path = argv[2]};
    int failures = fail_each(&o, "fixture");
    o.modules_dir = tree;
    failures += fail_each(&o, "fixture with fuse.ko");
    if (failures)
        fprintf(stderr, "test_nomem: %d failures\n", failures);
    else
        printf("test_nomem: all passed\n");
    return failures != 0;
}
