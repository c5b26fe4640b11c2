// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * test_kms_errors SYMS KALLSYMS SCRATCHDIR: the C tests of bad inputs (make
 * check runs them under AddressSanitizer and UndefinedBehaviorSanitizer):
 * each error with its code and one line of text; kallsyms that is not
 * text or hides its addresses; another kernel's file, refused or used with
 * KMS_LOAD_FORCE; KMS_LOAD_FALLBACK's answers from kallsyms alone; and
 * damaged dtrace_syms files, every truncation and flipped bits, which
 * must load or fail with one line, never crash.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kmodsyms.h"
#include "kms_internal.h" /* kmsi_hidden_cause */
#include "test_kms.h"

static uint32_t crc32_plain(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> 8 * k);
}

static void fix_crc(unsigned char *img, size_t len)
{
    put32(img + 12, crc32_plain(img + 16, len - 16));
}

/*
 * KMS_LOAD_FALLBACK reads the default file, /lib/modules/$(uname -r)/kernel/
 * dtrace_syms: this program is linked with --wrap=open so that, while
 * DEFAULT_SYMS is set, that path opens DEFAULT_SYMS instead (a real file,
 * bad in a chosen way), and nothing is installed on the host.
 */
static const char *default_syms;
int __real_open(const char *path, int flags, ...);
int __wrap_open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    int mode = (flags & O_CREAT) ? va_arg(ap, int) : 0;
    va_end(ap);
    static const char tail[] = "/kernel/dtrace_syms";
    size_t n = strlen(path);
    if (default_syms && !strncmp(path, "/lib/modules/", 13) && n > sizeof tail &&
        !strcmp(path + n - (sizeof tail - 1), tail))
        path = default_syms;
    return __real_open(path, flags, mode);
}

/* A degraded handle (R42): every line of the core kernel or of its module,
 * and the warning saying that built-in modules are unknown. */
static void check_degraded(kms_handle *h, const char *source, const char *why, const char *what)
{
    struct kms_info info = {.size = sizeof info};
    struct kms_sym r = {.size = sizeof r};
    char want[512];
    kms_get_info(h, &info);
    snprintf(want, sizeof want, "answering from %s alone, built-in modules unknown: ",
             source);
    CHECK(!info.builtin_modules_known && strstr(info.degraded, why) &&
          !strncmp(info.warning, want, strlen(want)) &&
          !strcmp(info.warning + strlen(want), info.degraded) && !strchr(info.warning, '\n'),
          "%s: degraded '%s', warning '%s'", what, info.degraded, info.warning);
    for (uint64_t a = 0xffffffff81000000u; a < 0xffffffff81003000u; a += 7) {
        kms_resolve(h, a, &r);
        CHECK(r.origin != KMS_ORIGIN_BUILTIN && !r.object && !r.sized && !r.ambiguous &&
              (!r.dso || !strcmp(r.dso, "vmlinux")), "%s: 0x%llx answers %s", what,
              (unsigned long long)a, r.dso ? r.dso : "(none)");
    }
    kms_resolve(h, 0xffffffffc0a00014u, &r);
    CHECK(r.sym && !strcmp(r.sym, "fuse_dev_open") && r.origin == KMS_ORIGIN_LOADABLE,
          "%s: loaded modules as before", what);
}

static void check_fallback(const char *syms, const char *kallsyms, const char *dir,
                           const unsigned char *simg, size_t slen, const char *moved, size_t mlen)
{
    char path[4096 + 32], absent[4096 + 32];
    kms_error e;
    kms_handle *h;
    struct kms_load_opts o = {.size = sizeof o, .kallsyms_path = kallsyms,
                              .flags = KMS_LOAD_FALLBACK};
    snprintf(absent, sizeof absent, "%s/absent", dir);
    default_syms = absent;
    check_error(kms_load(NULL, kallsyms, 0, &e), &e, KMS_E_NO_SYMS, "strict: no default file");
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback, no file: %s", e.message);
    if (h)
        check_degraded(h, kallsyms, "No such file or directory", "no file");
    kms_free(h);

    /* corrupt (a flipped byte), without a layout, another kernel's: each
     * answered from kallsyms alone, saying why */
    unsigned char *img = malloc(slen);
    memcpy(img, simg, slen);
    img[slen / 2] ^= 1;
    snprintf(path, sizeof path, "%s/fallback-corrupt", dir);
    spit(path, img, slen);
    default_syms = path;
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback, corrupt: %s", e.message);
    if (h)
        check_degraded(h, kallsyms, "checksum mismatch", "corrupt");
    kms_free(h);
    snprintf(path, sizeof path, "%s/no-layout", dir);
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback, no layout: %s", e.message);
    if (h)
        check_degraded(h, kallsyms, "has no link layout", "no layout");
    kms_free(h);
    default_syms = syms;
    o.kallsyms_path = NULL;
    o.kallsyms_text = moved;
    o.kallsyms_len = mlen;
    o.kallsyms_name = "moved";
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback, stale: %s", e.message);
    if (h) {
        struct kms_info info = {.size = sizeof info};
        kms_get_info(h, &info);
        CHECK(!info.builtin_modules_known && strstr(info.degraded, "does not match moved"),
              "stale: '%s'", info.degraded);
    }
    kms_free(h);
    /* FORCE over FALLBACK: the stale file used, with its warning */
    o.flags |= KMS_LOAD_FORCE;
    h = kms_load_opts(&o, &e);
    CHECK(h != NULL, "fallback and force: %s", e.message);
    if (h) {
        struct kms_info info = {.size = sizeof info};
        kms_get_info(h, &info);
        CHECK(info.builtin_modules_known && !strncmp(info.warning, "used anyway", 11),
              "forced over fallback: '%s'", info.warning);
    }
    kms_free(h);
    /* kallsyms' own faults are never the fallback's to hide */
    default_syms = absent;
    o.flags = KMS_LOAD_FALLBACK;
    o.kallsyms_text = "ffffffff8100000 t x\n";
    o.kallsyms_len = 20;
    check_error(kms_load_opts(&o, &e), &e, KMS_E_KALLSYMS, "fallback, bad kallsyms");
    default_syms = NULL;
    free(img);
}

/* Why the running kernel hides addresses: kernel/ksyms_common.c
 * kallsyms_show_value(), each case's remedy the one that would help. */
static void check_hidden_cause(int kptr, int paranoid, int cap, const char *want,
                               const char *unwanted)
{
    char buf[400];
    kmsi_hidden_cause(kptr, paranoid, cap, buf, sizeof buf);
    CHECK(strstr(buf, want) && (!unwanted || !strstr(buf, unwanted)),
          "kptr_restrict %d, perf_event_paranoid %d, CAP_SYSLOG %d: '%s'", kptr, paranoid, cap, buf);
}

/* kallsyms that is not text, or empty: the file named once, and what it is. */
static void check_bad_kallsyms(const char *syms)
{
    static const struct { const char *data; size_t len; const char *what; } bad[] = {
        {"\x1f\x8b\x08\x08\0\0\0\0", 8, "K: gzip data: decompress it first"},
        {"\xfd" "7zXZ\0\0\x04\xe6", 10, "K: xz data: decompress it first"},
        {"\x28\xb5\x2f\xfd\x24\x00", 6, "K: zstd data: decompress it first"},
        {"BZh91AY&SY", 10, "K: bzip2 data: decompress it first"},
        {"\x7f" "ELF\x02\x01\x01", 7, "K: an ELF file, not kallsyms text"},
        {"\x01\x02garbage\x03 t x\n", 15, "K: binary data, not kallsyms text"},
    };
    kms_error e;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        check_error(kms_load_buffer(syms, bad[k].data, bad[k].len, "K", 0, &e), &e,
                    KMS_E_KALLSYMS, bad[k].what);
        CHECK(!strncmp(e.message, bad[k].what, strlen(bad[k].what)), "'%s'", e.message);
    }
    /* kms_data_kind(): what each is, alone (what a front end names its inputs by) */
    static const struct { const char *data; size_t len; const char *what; int compressed; }
    kinds[] = {
        {"\x1f\x8b\x08", 3, "gzip data", 1},
        {"\xfd" "7zXZ\0\0", 7, "xz data", 1},
        {"\x28\xb5\x2f\xfd", 4, "zstd data", 1},
        {"BZh9", 4, "bzip2 data", 1},
        {"\x7f" "ELF\x02", 5, "an ELF file", 0},
        {"0x1\0\n", 5, "binary data", 0},
        {"0xffffffff81000000\r\n\t\v\f 0x1\n", 28, NULL, 0},
        {"\xe4\xb8\xad\n", 4, NULL, 0},   /* UTF-8 (names may be any bytes) */
        {"", 0, NULL, 0},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int compressed = -1;
        const char *what = kms_data_kind(kinds[k].data, kinds[k].len, &compressed);
        CHECK(kinds[k].what ? what && !strcmp(what, kinds[k].what) : !what, "kind %zu: '%s'", k,
              what ? what : "(text)");
        CHECK(compressed == kinds[k].compressed, "kind %zu: compressed %d", k, compressed);
    }
    char late[80]; /* a control byte past the 64 it reads is not seen */
    memset(late, 'a', sizeof late);
    late[70] = 1;
    CHECK(!kms_data_kind(late, sizeof late, NULL) && kms_data_kind(late + 10, 64, NULL),
          "kms_data_kind reads 64 bytes");
    /* a text file's own fault keeps its line */
    check_error(kms_load_buffer(syms, "hello world\n", 12, "K", 0, &e), &e, KMS_E_KALLSYMS, "text");
    CHECK(!strncmp(e.message, "K:1: ", 5), "'%s'", e.message);
    check_error(kms_load_buffer(syms, "\n\n", 2, "K", 0, &e), &e, KMS_E_KALLSYMS, "blank");
    CHECK(!strcmp(e.message, "K: no symbols: the file is empty or blank (is this a kallsyms file?)"),
          "'%s'", e.message);
    /* an empty one (issue 24 item 6: its name, once) */
    check_error(kms_load_buffer(syms, "", 0, "empty", 0, &e), &e, KMS_E_KALLSYMS, "empty");
    CHECK(!strcmp(e.message, "empty: no symbols: the file is empty or blank (is this a kallsyms "
                             "file?)"), "'%s'", e.message);

    check_hidden_cause(2, 1, 1, "kernel.kptr_restrict is 2, which hides them from every reader, "
                       "root included: set 'sysctl kernel.kptr_restrict=1'", NULL);
    check_hidden_cause(1, 2, 0, "kernel.kptr_restrict is 1, which shows them only to readers with "
                       "CAP_SYSLOG", "sysctl");
    check_hidden_cause(1, 1, 0, "or set 'sysctl kernel.kptr_restrict=0'", NULL);
    check_hidden_cause(0, 2, 0, "kernel.perf_event_paranoid is 2, so the kernel shows them only to "
                       "readers with CAP_SYSLOG: read it as root (with CAP_SYSLOG), or set "
                       "'sysctl kernel.perf_event_paranoid=1'", "kptr_restrict");
    check_hidden_cause(0, 3, 0, "kernel.perf_event_paranoid is 3", "kptr_restrict");
    check_hidden_cause(0, 1, 0, "the kernel hid them when it was read", "sysctl");
    check_hidden_cause(1, 2, 1, "the kernel hid them when it was read", "sysctl");
    check_hidden_cause(1, -1, 0, "or set 'sysctl kernel.kptr_restrict=0'", NULL); /* -1: least paranoid */
    check_hidden_cause(0, -1, 0, "the kernel hid them when it was read", "sysctl");
    /* without CONFIG_PERF_EVENTS kallsyms_for_perf() is false: CAP_SYSLOG alone shows them */
    check_hidden_cause(0, KMSI_UNREAD, 0, "this kernel has no kernel.perf_event_paranoid (no "
                       "CONFIG_PERF_EVENTS), so even with kernel.kptr_restrict 0 it shows them only "
                       "to readers with CAP_SYSLOG: read it as root", "set '");
    check_hidden_cause(1, KMSI_UNREAD, 0, "kernel.kptr_restrict is 1", "sysctl");
    check_hidden_cause(KMSI_UNREAD, KMSI_UNREAD, -1, "none readable here", "sysctl");
}

/* Each error with its code: missing and unreadable files, empty, hidden,
 * not text or malformed kallsyms. */
static void check_codes(const char *syms, const char *kallsyms, const char *dir)
{
    char path[4096 + 32];
    kms_error e;
    snprintf(path, sizeof path, "%s/absent", dir);
    check_error(kms_load(path, kallsyms, 0, &e), &e, KMS_E_NO_SYMS, "missing dtrace_syms");
    check_error(kms_load(path, kallsyms, KMS_LOAD_FALLBACK, &e), &e, KMS_E_NO_SYMS,
                "a named file is never done without");
    check_error(kms_load(dir, kallsyms, 0, &e), &e, KMS_E_IO, "a directory as dtrace_syms");
    check_error(kms_load(syms, path, 0, &e), &e, KMS_E_IO, "missing kallsyms");
    struct kms_load_opts opts = {.size = sizeof opts, .syms_path = syms, .kallsyms_path = kallsyms,
                                 .modules_dir = path};
    check_error(kms_load_opts(&opts, &e), &e, KMS_E_ARG, "a modules_dir that does not exist");
    CHECK(strstr(e.message, ": no such directory (" KMS_MODULES_DIR_WORD ":"), "'%s'", e.message);
    opts.modules_dir = syms;
    check_error(kms_load_opts(&opts, &e), &e, KMS_E_ARG, "a file as modules_dir");
    CHECK(strstr(e.message, ": not a directory (" KMS_MODULES_DIR_WORD ":"), "'%s'", e.message);
    opts.flags = KMS_LOAD_NO_MODULES;    /* not read: not judged */
    kms_handle *h = kms_load_opts(&opts, &e);
    CHECK(h != NULL, "KMS_LOAD_NO_MODULES with a bad modules_dir: %s", e.message);
    kms_free(h);
    for (int c = KMS_OK; c <= KMS_E_NO_SYMS; c++)
        CHECK(kms_strerror(c)[0] && strcmp(kms_strerror(c), kms_strerror(-1)), "strerror %d", c);
    CHECK(!strcmp(kms_strerror(KMS_E_NO_SYMS), "no dtrace_syms file"), "strerror");
    check_error(kms_load_buffer(syms, "", 0, NULL, 0, &e), &e, KMS_E_KALLSYMS, "empty kallsyms");
    check_error(kms_load_buffer(syms, "0000000000000000 t x\n", 21, NULL, 0, &e), &e,
                KMS_E_HIDDEN, "hidden addresses");
    CHECK(strstr(e.message, "kallsyms: every address is 0: the kernel hid them from whoever saved "
                 "it (kernel.kptr_restrict, kernel.perf_event_paranoid and CAP_SYSLOG decide)"),
          "'%s'", e.message);
    check_bad_kallsyms(syms);
    check_error(kms_load_buffer(syms, "ffffffff8100000 t x\n", 20, NULL, 0, &e), &e,
                KMS_E_KALLSYMS, "malformed line");
}

/* As the running kernel's: the fixture's release is not this host's. */
static void check_live(const char *syms, const unsigned char *ktext, size_t klen)
{
    kms_error e;
    check_error(kms_load_buffer(syms, (const char *)ktext, klen, "/proc/kallsyms", KMS_LOAD_LIVE,
                                &e), &e, KMS_E_STALE, "fixture as the live kernel");
    CHECK(strstr(e.message, "is for kernel") && strstr(e.message, "is running"), "'%s'",
          e.message);
    CHECK(strstr(e.message, "or load with " KMS_FORCE_WORD) &&
          !strcmp(e.message + strlen(e.message) - strlen(KMS_FORCE_WORD), KMS_FORCE_WORD),
          "the remedy is the C flag, last: '%s'", e.message);
    kms_handle *h = kms_load_buffer(syms, (const char *)ktext, klen, "/proc/kallsyms",
                                    KMS_LOAD_LIVE | KMS_LOAD_FORCE, &e);
    CHECK(h != NULL, "live --force: %s", e.message);
    if (h) {
        struct kms_info info = {.size = sizeof info};
        kms_get_info(h, &info);
        CHECK(info.builtin_modules_known && !info.degraded[0] &&
              !strncmp(info.warning, "used anyway (KMS_LOAD_FORCE), answers may be wrong: ", 52) &&
              strstr(info.warning, "is running; use the file of the running kernel") &&
              !strstr(info.warning, " or load with"), "forced: '%s'", info.warning);
        check_fixture(h);
    }
    kms_free(h);
}

/* Without a layout (segments and anchors emptied, CRC repaired; the file
 * SCRATCHDIR/no-layout check_fallback() reads too), another version. */
static void check_layout_version(const char *kallsyms, const char *dir,
                                 const unsigned char *simg, size_t slen)
{
    char path[4096 + 32];
    kms_error e;
    unsigned char *img = malloc(slen);
    memcpy(img, simg, slen);
    put32(img + 56 + 8 * 8 + 4, 0);
    put32(img + 56 + 8 * 9 + 4, 0);
    fix_crc(img, slen);
    snprintf(path, sizeof path, "%s/no-layout", dir);
    spit(path, img, slen);
    check_error(kms_load(path, kallsyms, 0, &e), &e, KMS_E_NO_LAYOUT, "no layout");

    memcpy(img, simg, slen);
    put32(img + HDR_VERSION, FORMAT_VERSION + 1);
    snprintf(path, sizeof path, "%s/version", dir);
    spit(path, img, slen);
    check_error(kms_load(path, kallsyms, 0, &e), &e, KMS_E_VERSION, "the next version");
    free(img);
}

/* KTEXT with the first half of its lines moved against the rest, as in a
 * rebuilt kernel (NUL-terminated, KLEN bytes): the anchors disagree. */
static char *moved_kallsyms(const unsigned char *ktext, size_t klen)
{
    char *moved = malloc(klen + 1);
    memcpy(moved, ktext, klen);
    moved[klen] = 0;
    size_t nlines = 0, half, k = 0;
    for (size_t p = 0; p < klen; p++)
        nlines += moved[p] == '\n';
    half = nlines / 2;
    for (char *line = moved; line < moved + klen && k < half; k++) {
        char *nl = strchr(line, '\n');
        unsigned long long a = strtoull(line, NULL, 16);
        if (a && line[17] != 'A') {
            char digits[17];
            snprintf(digits, sizeof digits, "%016llx", a + 0x100);
            memcpy(line, digits, 16);
        }
        line = nl ? nl + 1 : moved + klen;
    }
    return moved;
}

/* Stale: refused; KMS_LOAD_FORCE loads it anyway, saying so; then the
 * fallback's cases, the stale file among them. */
static void check_stale(const char *syms, const char *kallsyms, const char *dir,
                        const unsigned char *simg, size_t slen, const unsigned char *ktext,
                        size_t klen)
{
    kms_error e;
    char *moved = moved_kallsyms(ktext, klen);
    check_error(kms_load_buffer(syms, moved, klen, "moved", 0, &e), &e, KMS_E_STALE,
                "moved lines");
    kms_handle *h = kms_load_buffer(syms, moved, klen, "moved", KMS_LOAD_FORCE, &e);
    CHECK(h != NULL, "--force loads it: %s", e.message);
    if (h) {
        struct kms_info info = {.size = sizeof info};
        kms_get_info(h, &info);
        CHECK(!strncmp(info.warning, "used anyway (KMS_LOAD_FORCE), answers may be wrong: ", 52) &&
              strstr(info.warning, "does not match moved: of its"), "'%s'", info.warning);
    }
    kms_free(h);
    check_fallback(syms, kallsyms, dir, simg, slen, moved, klen);
    free(moved);
}

/* Every truncation, and a flipped bit at every byte with the CRC
 * repaired: loads or fails with a message, never crashes. */
static void check_damaged(const char *kallsyms, const char *dir, const unsigned char *simg,
                          size_t slen)
{
    char path[4096 + 32];
    kms_error e;
    size_t lines = 0;
    snprintf(path, sizeof path, "%s/damaged", dir);
    for (size_t keep = 0; keep < slen; keep += (keep < 200 ? 1 : 97)) {
        spit(path, simg, keep);
        check_error(kms_load(path, kallsyms, 0, &e), &e, KMS_E_SYMS, "truncated");
    }
    int refused = 0, loaded = 0;
    unsigned char *img = malloc(slen);
    for (size_t pos = 16; pos < slen; pos += 7) {
        memcpy(img, simg, slen);
        img[pos] ^= (unsigned char)(1u << (pos % 8));
        fix_crc(img, slen);
        spit(path, img, slen);
        kms_handle *h = kms_load(path, kallsyms, 0, &e);
        if (h) {
            uint64_t probes[336];
            for (size_t k = 0; k < 336; k++)
                probes[k] = 0xffffffffab600000u + 61 * k;
            CHECK(batch_differs(h, probes, 336) == 0, "flip %zu: batched answers differ", pos);
            kms_foreach(h, count_lines, &lines);
            loaded++;
        } else {
            CHECK(e.message[0] && !strchr(e.message, '\n'), "flip %zu: '%s'", pos, e.message);
            refused++;
        }
        kms_free(h);
    }
    CHECK(loaded > 0 && refused > 0, "flips: %d loaded, %d refused", loaded, refused);
    free(img);
}

int main(int argc, char **argv)
{
    size_t slen, klen;

    if (!test_usage(argc, "test_kms_errors"))
        return 2;
    const char *syms = argv[1], *kallsyms = argv[2], *dir = argv[3];
    unsigned char *simg = slurp(syms, &slen), *ktext = slurp(kallsyms, &klen);
    check_codes(syms, kallsyms, dir);
    check_live(syms, ktext, klen);
    check_layout_version(kallsyms, dir, simg, slen);
    check_stale(syms, kallsyms, dir, simg, slen, ktext, klen);
    check_damaged(kallsyms, dir, simg, slen);
    free(simg);
    free(ktext);
    return test_summary("test_kms_errors");
}
