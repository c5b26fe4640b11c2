// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * test_kms_modules SYMS KALLSYMS SCRATCHDIR: the C tests of loaded modules
 * (make check runs them under AddressSanitizer and UndefinedBehaviorSanitizer):
 * the fixture's fs/fuse/fuse.ko (beside KALLSYMS) is matched; another build
 * of it, and truncated or damaged copies, are refused for fuse alone;
 * compressed (xz, zstd, gzip: the tools found on PATH) it is matched as the
 * plain file, damaged refused; deferred, it is read when asked; and
 * kms_refresh() follows modules loaded, reloaded and unloaded.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmodsyms.h"
#include "kms_decompress.h"
#include "test_kms.h"

/* kms_decompress.h declares the decompressors' types itself: where their
 * headers are installed, they must agree with them. */
#define SAME_LAYOUT(ours, theirs, first, last)                                           \
    _Static_assert(sizeof(ours) == sizeof(theirs) &&                                    \
                   offsetof(ours, first) == offsetof(theirs, first) &&                  \
                   offsetof(ours, last) == offsetof(theirs, last), #ours " is " #theirs)
#if defined(__has_include)
#if __has_include(<lzma.h>)
#include <lzma.h>
SAME_LAYOUT(struct kmsz_lzma_stream, lzma_stream, total_out, reserved_enum2);
_Static_assert(LZMA_CONCATENATED == 0x08 && LZMA_FINISH == 3 && LZMA_STREAM_END == 1,
               "liblzma's constants");
#endif
#if __has_include(<zstd.h>)
#include <zstd.h>
SAME_LAYOUT(struct kmsz_zstd_in, ZSTD_inBuffer, src, pos);
SAME_LAYOUT(struct kmsz_zstd_out, ZSTD_outBuffer, dst, pos);
#endif
#if __has_include(<zlib.h>)
#include <zlib.h>
SAME_LAYOUT(struct kmsz_z_stream, z_stream, total_out, reserved);
_Static_assert(Z_STREAM_END == 1 && Z_BUF_ERROR == -5 && MAX_WBITS == 15, "zlib's constants");
#endif
#endif

/* The fixture's fuse module with MODULES_DIR: one module, its outcome STATUS. */
static kms_handle *load_modules(const char *syms, const char *kallsyms, const char *modules_dir,
                                uint8_t status, const char *what)
{
    struct kms_load_opts o = {.size = sizeof o, .syms_path = syms, .kallsyms_path = kallsyms,
                              .modules_dir = modules_dir};
    struct kms_module m[2] = {{.size = sizeof m[0]}};
    kms_error e;
    kms_handle *h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "%s: %s", what, e.message);
    if (!h)
        return NULL;
    size_t n = kms_modules(h, m, 2);
    CHECK(n == 1 && !strcmp(m[0].name, "fuse") && m[0].status == status && m[0].lines == 22,
          "%s: %zu modules, status %d", what, n, n ? m[0].status : -1);
    if (n == 1 && status == KMS_MODULE_MATCHED)
        CHECK(m[0].sized == 22 && !m[0].reason && !m[0].warning, "%s: %zu sized", what, m[0].sized);
    if (n == 1 && status != KMS_MODULE_MATCHED)
        CHECK(m[0].sized == 0 && m[0].reason && m[0].warning && !strchr(m[0].warning, '\n') &&
              !strncmp(m[0].warning, "module fuse: ", 13) &&
              strstr(m[0].warning, "; its symbols stay unsized"), "%s: warning '%s'", what,
              m[0].warning ? m[0].warning : "(none)");
    return h;
}

/* SIGNED (a signed fuse.ko) compressed by each tool found on PATH, then
 * damaged: matched, then refused for fuse alone. */
static void check_compressed(const char *syms, const char *kallsyms, const char *dir,
                             const char *signed_ko)
{
    static const char *const tool[][2] = {{"xz", "xz -c --check=crc32"}, {"zst", "zstd -q -c"},
                                          {"gz", "gzip -n -c"}};
    char path[4096 + 64], cmd[3 * 4096 + 256];
    struct kms_module m = {.size = sizeof m};
    struct kms_sym r = {.size = sizeof r};
    for (size_t t = 0; t < sizeof tool / sizeof tool[0]; t++) {
        snprintf(cmd, sizeof cmd, "command -v %.*s >/dev/null", (int)strcspn(tool[t][1], " "),
                 tool[t][1]);
        if (system(cmd) != 0) {
            fprintf(stderr, "test_kms: no %s tool: .ko.%s not tested\n", tool[t][1], tool[t][0]);
            continue;
        }
        snprintf(path, sizeof path, "%s/fuse.ko.%s", dir, tool[t][0]);
        snprintf(cmd, sizeof cmd, "%s < '%s' > '%s'", tool[t][1], signed_ko, path);
        CHECK(system(cmd) == 0, "%s", cmd);
        char plain[4096 + 64];
        snprintf(plain, sizeof plain, "%s", signed_ko);
        char hidden[4096 + 80];
        snprintf(hidden, sizeof hidden, "%s.keep", plain);
        rename(plain, hidden);
        kms_handle *h = load_modules(syms, kallsyms, dir, KMS_MODULE_MATCHED, tool[t][0]);
        if (h) {
            kms_resolve(h, 0xffffffffc0a00014u, &r);
            CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.sized && r.sym_size == 0x16 &&
                  r.object && !strncmp(r.object, "fuse.ko.", 8), "%s: fuse_dev_open", tool[t][0]);
        }
        kms_free(h);
        /* damaged: not that compression, or cut short */
        size_t n;
        unsigned char *z = slurp(path, &n);
        for (int cut = 0; cut < 2; cut++) {
            spit(path, cut ? z : (const unsigned char *)"\177ELF not compressed", cut ? n / 2 : 20);
            h = load_modules(syms, kallsyms, dir, KMS_MODULE_REFUSED, tool[t][0]);
            if (h && kms_modules(h, &m, 1) == 1)
                CHECK(strstr(m.reason, "cannot decompress (") &&
                      strstr(m.reason, "; reinstall the module"), "%s: '%s'", tool[t][0], m.reason);
            if (h)
                check_fixture(h);
            kms_free(h);
        }
        free(z);
        remove(path);
        rename(hidden, plain);
    }
}

/* Its own .ko: ELF sizes, the .ko as object, sized ranges; another build:
 * refused, every answer that of kallsyms alone.  TREE: the fixture tree. */
static void check_own_ko(const char *syms, const char *kallsyms, const char *tree)
{
    char path[4096 + 64];
    struct kms_sym r = {.size = sizeof r};
    struct kms_range rg[4] = {{.size = sizeof rg[0]}};
    struct kms_module m = {.size = sizeof m};
    kms_handle *h = load_modules(syms, kallsyms, tree, KMS_MODULE_MATCHED, "fixture tree");
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.sized && r.sym_size == 0x16 && r.symoff == 4 &&
          r.sym_end == r.sym_start + 0x16 && r.origin == KMS_ORIGIN_LOADABLE && r.object &&
          !strcmp(r.object, "fs/fuse/fuse.ko"), "fuse_dev_open from fuse.ko");
    size_t n = kms_module_ranges(h, "fuse", rg, 4);
    int inside = 0;
    for (size_t k = 0; k < n && k < 4; k++)
        inside |= rg[k].text && rg[k].start <= r.sym_end - 1 && r.sym_end <= rg[k].end;
    CHECK(inside, "fuse's text range holds fuse_dev_open to its end");
    kms_free(h);

    snprintf(path, sizeof path, "%s/otherbuild", tree);
    h = load_modules(syms, kallsyms, path, KMS_MODULE_REFUSED, "other build");
    if (h && kms_modules(h, &m, 1) == 1)
        CHECK(strstr(m.warning, "is not the loaded module (") && strstr(m.warning, "otherbuild"),
              "'%s'", m.warning);
    if (h)
        check_fixture(h);
    kms_free(h);
}

/* Copies of the fixture's fuse.ko (KO, LEN bytes) in DIR: signed, then
 * truncated, flipped and compressed. */
static void check_damaged_ko(const char *syms, const char *kallsyms, const char *dir,
                             const unsigned char *ko, size_t len)
{
    char path[4096 + 64];
    struct kms_sym r = {.size = sizeof r};
    struct kms_module m = {.size = sizeof m};
    unsigned char *copy = malloc(len + 400);
    kms_handle *h;
    kms_error e;

    /* signed (a signature after the ELF), as scripts/sign-file appends it */
    snprintf(path, sizeof path, "%s/fuse.ko", dir);
    memcpy(copy, ko, len);
    for (size_t k = 0; k < 300; k++)
        copy[len + k] = (unsigned char)(k * 7);
    memcpy(copy + len + 300, "~Module signature appended~\n", 28);
    spit(path, copy, len + 328);
    kms_free(load_modules(syms, kallsyms, dir, KMS_MODULE_MATCHED, "signed"));

    /* truncated at every length: refused, one line, the rest unchanged */
    for (size_t keep = 0; keep < len; keep += keep < 256 ? 1 : 61) {
        spit(path, ko, keep);
        h = load_modules(syms, kallsyms, dir, KMS_MODULE_REFUSED, "truncated");
        if (h)
            check_fixture(h);
        kms_free(h);
    }
    /* a flipped bit anywhere: matched or refused, never a crash */
    int matched = 0, refused = 0;
    for (size_t pos = 0; pos < len; pos += 13) {
        memcpy(copy, ko, len);
        copy[pos] ^= (unsigned char)(1u << (pos % 8));
        spit(path, copy, len);
        struct kms_load_opts o = {.size = sizeof o, .syms_path = syms, .kallsyms_path = kallsyms,
                                  .modules_dir = dir};
        h = kms_load_opts(&o, &e);
        CHECK(h != NULL, "flip %zu: %s", pos, e.message);
        if (!h)
            continue;
        CHECK(kms_modules(h, &m, 1) == 1, "flip %zu", pos);
        matched += m.status == KMS_MODULE_MATCHED;
        refused += m.status == KMS_MODULE_REFUSED;
        for (uint64_t a = 0xffffffffc0a00000u; a < 0xffffffffc0a03000u; a += 29)
            kms_resolve(h, a, &r);
        kms_free(h);
    }
    CHECK(matched > 0 && refused > 0, "flips: %d matched, %d refused", matched, refused);

    /* compressed (signed first, as scripts/Makefile.modinst does), by the
     * distributions' own tools: matched as the plain file */
    spit(path, copy, len + 328);
    check_compressed(syms, kallsyms, dir, path);
    remove(path);
    free(copy);
}

/* KMS_LOAD_DEFER_MODULES: found, read when asked, kept read by a refresh. */
static void check_deferred(const char *syms, const char *kallsyms, const char *tree)
{
    struct kms_sym r = {.size = sizeof r};
    struct kms_module m = {.size = sizeof m};
    kms_error e;
    struct kms_load_opts d = {.size = sizeof d, .syms_path = syms, .kallsyms_path = kallsyms,
                              .modules_dir = tree, .flags = KMS_LOAD_DEFER_MODULES};
    kms_handle *h = kms_load_opts(&d, &e);
    CHECK(h && kms_modules(h, &m, 1) == 1 && m.status == KMS_MODULE_DEFERRED && m.sized == 0 &&
          !strcmp(m.file, "fs/fuse/fuse.ko"), "deferred: %s", h ? "" : e.message);
    if (h) {
        check_fixture(h); /* as from kallsyms alone */
        const char *fuse[] = {"fuse", "nosuch"};
        CHECK(kms_read_modules(h, fuse, 2, &e) == KMS_OK, "read fuse: %s", e.message);
        CHECK(kms_modules(h, &m, 1) == 1 && m.status == KMS_MODULE_MATCHED && m.sized == 22,
              "read: status %d", m.status);
        kms_resolve(h, 0xffffffffc0a00014u, &r);
        CHECK(r.sized && r.sym_size == 0x16 && r.object && !strcmp(r.object, "fs/fuse/fuse.ko"),
              "fuse_dev_open sized after kms_read_modules");
        CHECK(kms_read_modules(h, NULL, 0, &e) == KMS_OK, "nothing left: %s", e.message);
        CHECK(kms_read_modules(h, fuse, 1, &e) == KMS_OK && kms_modules(h, &m, 1) == 1 &&
              m.status == KMS_MODULE_MATCHED, "asked again: %s", e.message);
        struct kms_changes c = {.size = sizeof c};
        CHECK(kms_refresh(h, &c, &e) == KMS_OK && kms_modules(h, &m, 1) == 1 &&
              m.status == KMS_MODULE_MATCHED, "a refresh keeps it read");
    }
    kms_free(h);
    h = kms_load_opts(&d, &e);
    CHECK(h && kms_read_modules(h, NULL, 0, &e) == KMS_OK && kms_modules(h, &m, 1) == 1 &&
          m.status == KMS_MODULE_MATCHED, "every deferred one read");
    kms_free(h);
}

static void check_modules(const char *syms, const char *kallsyms, const char *dir)
{
    char tree[4096], path[4096 + 64];
    struct kms_module m = {.size = sizeof m};
    size_t len;
    kms_handle *h;
    kms_error e;

    snprintf(tree, sizeof tree, "%s", kallsyms); /* the fixture tree: kallsyms' directory */
    char *slash = strrchr(tree, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(tree, sizeof tree, ".");
    snprintf(path, sizeof path, "%s/fs/fuse/fuse.ko", tree);
    unsigned char *ko = slurp(path, &len);
    check_own_ko(syms, kallsyms, tree);
    check_damaged_ko(syms, kallsyms, dir, ko, len);
    check_deferred(syms, kallsyms, tree);

    /* options: SIZE is required; KMS_LOAD_NO_MODULES reads nothing */
    struct kms_load_opts o = {.syms_path = syms, .kallsyms_path = kallsyms, .modules_dir = tree};
    check_error(kms_load_opts(&o, &e), &e, KMS_E_ARG, "opts without size");
    o.size = sizeof o;
    o.flags = KMS_LOAD_NO_MODULES;
    h = kms_load_opts(&o, &e);
    CHECK(h && kms_modules(h, &m, 1) == 1 && m.status == KMS_MODULE_MISSING, "no modules");
    kms_free(h);
    free(ko);
}

/* Lines of KTEXT (LEN bytes) into PATH: all (WHICH 0), without fuse's (1),
 * or with fuse's moved up by 0x1000 (2). */
static void write_kallsyms(const char *path, const unsigned char *ktext, size_t len, int which)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    for (const char *line = (const char *)ktext, *end = line + len; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t n = nl ? (size_t)(nl - line) + 1 : (size_t)(end - line);
        int fuse = n > 8 && !memcmp(line + n - 8, "\t[fuse]\n", 8);
        if (fuse && which == 1) {
        } else if (fuse && which == 2) {
            fprintf(f, "%016llx%.*s", strtoull(line, NULL, 16) + 0x1000, (int)(n - 16), line + 16);
        } else {
            fwrite(line, 1, n, f);
        }
        line += n;
    }
    fclose(f);
}

static int same_list(const char *const *names, size_t n, const char *want)
{
    return want ? n == 1 && !strcmp(names[0], want) : n == 0;
}

/* kms_refresh(): modules loaded, reloaded and unloaded between reads of a
 * kallsyms file; an unchanged /proc/modules reads nothing more. */
static void check_refresh(const char *syms, const unsigned char *ktext, size_t klen,
                          const char *dir)
{
    char path[4096 + 32], procmod[4096 + 32];
    kms_error e;
    struct kms_changes c = {.size = sizeof c};
    struct kms_sym r = {.size = sizeof r};
    snprintf(path, sizeof path, "%s/refresh-kallsyms", dir);
    write_kallsyms(path, ktext, klen, 1);
    kms_handle *h = kms_load(syms, path, 0, &e);
    CHECK(h != NULL, "refresh: %s", e.message);
    if (!h)
        return;
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(!r.sym || strcmp(r.sym, "fuse_dev_open"), "no fuse before");
    write_kallsyms(path, ktext, klen, 0);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK, "refresh: %s", e.message);
    CHECK(same_list(c.loaded, c.nloaded, "fuse") && same_list(c.unloaded, c.nunloaded, NULL) &&
          same_list(c.reloaded, c.nreloaded, NULL), "loaded: %zu %zu %zu", c.nloaded,
          c.nunloaded, c.nreloaded);
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.origin == KMS_ORIGIN_LOADABLE,
          "fuse after loading");
    check_fixture(h);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK && !c.nloaded && !c.nunloaded && !c.nreloaded,
          "unchanged");
    write_kallsyms(path, ktext, klen, 2);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK, "refresh: %s", e.message);
    CHECK(same_list(c.reloaded, c.nreloaded, "fuse") && !c.nloaded && !c.nunloaded,
          "reloaded: %zu %zu %zu", c.nloaded, c.nunloaded, c.nreloaded);
    kms_resolve(h, 0xffffffffc0a01014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.symoff == 4,
          "fuse moved: %s+0x%llx", r.sym ? r.sym : "-", (unsigned long long)r.symoff);
    write_kallsyms(path, ktext, klen, 1);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK, "refresh: %s", e.message);
    CHECK(same_list(c.unloaded, c.nunloaded, "fuse") && !c.nloaded && !c.nreloaded,
          "unloaded: %zu %zu %zu", c.nloaded, c.nunloaded, c.nreloaded);
    /* a failed refresh leaves the handle as it was */
    struct kms_info before = {.size = sizeof before}, after = {.size = sizeof after};
    kms_get_info(h, &before);
    spit(path, "", 0);
    CHECK(kms_refresh(h, &c, &e) == KMS_E_KALLSYMS, "refresh of an empty file: %d", e.code);
    kms_get_info(h, &after);
    CHECK(after.lines == before.lines && after.lines == 245 - 22, "unchanged: %zu lines",
          after.lines);
    write_kallsyms(path, ktext, klen, 0);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK && same_list(c.loaded, c.nloaded, "fuse"), "again");
    check_fixture(h);
    kms_free(h);

    /* with /proc/modules: unchanged (use counts aside), kallsyms is not read */
    snprintf(procmod, sizeof procmod, "%s/refresh-modules", dir);
    spit(procmod, "fuse 200704 3 - Live 0xffffffffc0a00000\n", 40);
    write_kallsyms(path, ktext, klen, 0);
    struct kms_load_opts o = {.size = sizeof o, .syms_path = syms, .kallsyms_path = path,
                              .proc_modules = procmod};
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "refresh with /proc/modules: %s", e.message);
    if (!h)
        return;
    write_kallsyms(path, ktext, klen, 2);
    spit(procmod, "fuse 200704 5 - Live 0xffffffffc0a00000\n", 40);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK && !c.nloaded && !c.nunloaded && !c.nreloaded,
          "use count changed: nothing read");
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.symoff == 0x4, "not moved");
    spit(procmod, "fuse 200704 5 - Live 0xffffffffc0a01000\n", 40);
    CHECK(kms_refresh(h, &c, &e) == KMS_OK && same_list(c.reloaded, c.nreloaded, "fuse"),
          "moved: %s", e.message);
    kms_free(h);

    /* a caller's text cannot be read again */
    h = kms_load_buffer(syms, (const char *)ktext, klen, "fixture", 0, &e);
    CHECK(h && kms_refresh(h, &c, &e) == KMS_E_ARG, "refresh of a buffer load");
    kms_free(h);
}

int main(int argc, char **argv)
{
    size_t klen;

    if (!test_usage(argc, "test_kms_modules"))
        return 2;
    const char *syms = argv[1], *kallsyms = argv[2], *dir = argv[3];
    unsigned char *ktext = slurp(kallsyms, &klen);
    check_modules(syms, kallsyms, dir);
    check_refresh(syms, ktext, klen, dir);
    free(ktext);
    return test_summary("test_kms_modules");
}
