// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: compressed .ko files (R43), read as kmod's
 * libkmod-file.c reads them.  The kernel's scripts/Makefile.modinst
 * signs a module before compressing it, so the signature is inside the
 * compressed data: the caller cuts it from the decompressed ELF as from a
 * plain .ko.
 *
 *   .ko.xz   liblzma.so.5: a stream decoder over concatenated streams
 *   .ko.zst  libzstd.so.1: the first frame (as kmod reads it; a module
 *            compressed by the kernel's modules_install is one frame)
 *   .ko.gz   libz.so.1: gzip members, one after the other
 *
 * Each library is loaded with dlopen on the first file that needs it and
 * closed when the load's modules are matched (kmsi_decompressors_close).
 */
#define _DEFAULT_SOURCE
#include "kms_decompress.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { XZ, ZSTD, GZ };
static const char *const kind_name[3] = {"xz", "zst", "gz"};
static const char *const library[3] = {"liblzma.so.5", "libzstd.so.1", "libz.so.1"};

/* A module is an ELF file the kernel loads into memory: anything that
 * decompresses to more is not one (and would only exhaust memory). */
#define MAX_KO ((size_t)1 << 32 < SIZE_MAX / 2 ? (size_t)1 << 32 : SIZE_MAX / 2)

const char *kmsi_compression(const char *path)
{
    size_t n = strlen(path);
    for (int k = 0; k < 3; k++) {
        size_t z = strlen(kind_name[k]) + 1;
        if (n >= z && path[n - z] == '.' && !strcmp(path + n - z + 1, kind_name[k]))
            return kind_name[k];
    }
    return NULL;
}

/* A string made by printf, malloc'd (NULL: out of memory); the one the
 * .ko reader's messages use too (kms_modules.c). */
char *kmsi_format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s) {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return s;
}

/* 1 with *WHY, or -1 when even that cannot be made. */
static int refuse(char **why, const char *path, const char *kind, const char *what)
{
    *why = kmsi_format("%s: cannot decompress (%s: %s); reinstall the module", path, kind, what);
    return *why ? 1 : -1;
}

/* Library KIND's symbol NAME, opening the library on first use (NULL:
 * absent, d->missing[KIND] says why). */
static void *sym(struct kms_decompressors *d, int kind, const char *name)
{
    if (!d->tried[kind]) {
        d->tried[kind] = 1;
        d->lib[kind] = dlopen(library[kind], RTLD_NOW | RTLD_LOCAL);
        if (!d->lib[kind]) {
            const char *e = dlerror();
            d->missing[kind] = kmsi_format("%s", e ? e : library[kind]);
        }
    }
    if (!d->lib[kind])
        return NULL;
    void *p = dlsym(d->lib[kind], name);
    if (!p && !d->missing[kind]) {
        d->missing[kind] = kmsi_format("%s has no %s", library[kind], name);
        dlclose(d->lib[kind]);
        d->lib[kind] = NULL;
    }
    return p;
}

/* Room for at least one more byte in *BUF (*CAP grows); 0, 1 (beyond
 * MAX_KO) or -1 (out of memory). */
static int grow(unsigned char **buf, size_t *cap, size_t used)
{
    if (used < *cap)
        return 0;
    if (*cap >= MAX_KO)
        return 1;
    size_t nc = *cap ? *cap * 2 : 1 << 20;
    if (nc > MAX_KO)
        nc = MAX_KO;
    unsigned char *nb = realloc(*buf, nc);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = nc;
    return 0;
}

/* <lzma/base.h> lzma_ret, lzma_action; <lzma/container.h> the flag */
#define LZMA_OK 0
#define LZMA_STREAM_END 1
#define LZMA_MEM_ERROR 5
#define LZMA_RUN 0
#define LZMA_FINISH 3
#define LZMA_CONCATENATED 0x08u

static const char *lzma_message(int ret)
{
    switch (ret) {
    case 5: return "out of memory";
    case 6: return "memory limit reached";
    case 7: return "not xz data";
    case 8: return "unsupported options";
    case 9: return "compressed data is corrupt";
    case 10: return "compressed data is truncated";
    default: return "internal error";
    }
}

static int unxz(struct kms_decompressors *d, const char *path, const unsigned char *in, size_t n,
                unsigned char **out, size_t *len, char **why)
{
    int (*decoder)(struct kmsz_lzma_stream *, uint64_t, uint32_t) =
        (int (*)(struct kmsz_lzma_stream *, uint64_t, uint32_t))sym(d, XZ, "lzma_stream_decoder");
    int (*code)(struct kmsz_lzma_stream *, int) =
        (int (*)(struct kmsz_lzma_stream *, int))sym(d, XZ, "lzma_code");
    void (*end)(struct kmsz_lzma_stream *) = (void (*)(struct kmsz_lzma_stream *))sym(d, XZ, "lzma_end");
    if (!decoder || !code || !end)
        return 2;
    struct kmsz_lzma_stream s;
    memset(&s, 0, sizeof s); /* LZMA_STREAM_INIT */
    int ret = decoder(&s, UINT64_MAX, LZMA_CONCATENATED);
    if (ret != LZMA_OK)
        return ret == LZMA_MEM_ERROR ? -1 : refuse(why, path, "xz", lzma_message(ret));
    unsigned char *buf = NULL;
    size_t cap = 0;
    s.next_in = in;
    s.avail_in = n;
    int rc = 0;
    for (;;) {
        int g = grow(&buf, &cap, (size_t)s.total_out);
        if (g) {
            rc = g < 0 ? -1 : refuse(why, path, "xz", "larger than 4 GiB: not a module");
            break;
        }
        s.next_out = buf + s.total_out;
        s.avail_out = cap - (size_t)s.total_out;
        ret = code(&s, s.avail_in ? LZMA_RUN : LZMA_FINISH);
        if (ret == LZMA_STREAM_END)
            break;
        if (ret != LZMA_OK) {
            rc = ret == LZMA_MEM_ERROR ? -1 : refuse(why, path, "xz", lzma_message(ret));
            break;
        }
    }
    *len = (size_t)s.total_out;
    end(&s);
    if (rc)
        free(buf);
    else
        *out = buf;
    return rc;
}

static int unzstd(struct kms_decompressors *d, const char *path, const unsigned char *in, size_t n,
                  unsigned char **out, size_t *len, char **why)
{
    void *(*create)(void) = (void *(*)(void))sym(d, ZSTD, "ZSTD_createDStream");
    size_t (*release)(void *) = (size_t (*)(void *))sym(d, ZSTD, "ZSTD_freeDStream");
    size_t (*step)(void *, struct kmsz_zstd_out *, struct kmsz_zstd_in *) =
        (size_t (*)(void *, struct kmsz_zstd_out *, struct kmsz_zstd_in *))
            sym(d, ZSTD, "ZSTD_decompressStream");
    unsigned (*is_error)(size_t) = (unsigned (*)(size_t))sym(d, ZSTD, "ZSTD_isError");
    const char *(*error_name)(size_t) = (const char *(*)(size_t))sym(d, ZSTD, "ZSTD_getErrorName");
    unsigned long long (*content_size)(const void *, size_t) =
        (unsigned long long (*)(const void *, size_t))sym(d, ZSTD, "ZSTD_getFrameContentSize");
    if (!create || !release || !step || !is_error || !error_name || !content_size)
        return 2;
    void *ds = create(); /* ZSTD_initDStream() is implied by a new stream */
    if (!ds)
        return -1;
    unsigned char *buf = NULL;
    size_t cap = 0;
    unsigned long long hint = content_size(in, n); /* ZSTD_CONTENTSIZE_UNKNOWN/_ERROR: huge */
    if (hint < MAX_KO && hint > 0) {
        cap = (size_t)hint + 1; /* + 1: the frame's end is seen without growing */
        if (!(buf = malloc(cap))) {
            release(ds);
            return -1;
        }
    }
    struct kmsz_zstd_in src = {in, n, 0};
    struct kmsz_zstd_out dst = {NULL, 0, 0};
    int rc = 0;
    for (;;) {
        int g = grow(&buf, &cap, dst.pos);
        if (g) {
            rc = g < 0 ? -1 : refuse(why, path, "zstd", "larger than 4 GiB: not a module");
            break;
        }
        dst.dst = buf;
        dst.size = cap;
        size_t r = step(ds, &dst, &src);
        if (is_error(r)) {
            rc = refuse(why, path, "zstd", error_name(r));
            break;
        }
        if (r == 0) /* the first frame is complete */
            break;
        if (src.pos == src.size && dst.pos < dst.size) {
            rc = refuse(why, path, "zstd", "compressed data is truncated");
            break;
        }
    }
    release(ds);
    *len = dst.pos;
    if (rc)
        free(buf);
    else
        *out = buf;
    return rc;
}

/* <zlib.h> */
#define Z_OK 0
#define Z_STREAM_END 1
#define Z_NO_FLUSH 0
#define Z_BUF_ERROR (-5)
#define Z_MEM_ERROR (-4)
#define GZIP_WINDOW (15 + 16) /* MAX_WBITS, + 16: a gzip header and trailer */

static int gunzip(struct kms_decompressors *d, const char *path, const unsigned char *in, size_t n,
                  unsigned char **out, size_t *len, char **why)
{
    /* inflateInit2() is a macro over inflateInit2_(), which checks the
     * major version and the struct's size */
    int (*init)(struct kmsz_z_stream *, int, const char *, int) =
        (int (*)(struct kmsz_z_stream *, int, const char *, int))sym(d, GZ, "inflateInit2_");
    int (*inflate)(struct kmsz_z_stream *, int) =
        (int (*)(struct kmsz_z_stream *, int))sym(d, GZ, "inflate");
    int (*reset)(struct kmsz_z_stream *) = (int (*)(struct kmsz_z_stream *))sym(d, GZ, "inflateReset");
    int (*end)(struct kmsz_z_stream *) = (int (*)(struct kmsz_z_stream *))sym(d, GZ, "inflateEnd");
    if (!init || !inflate || !reset || !end)
        return 2;
    struct kmsz_z_stream z;
    memset(&z, 0, sizeof z);
    int ret = init(&z, GZIP_WINDOW, "1", (int)sizeof z);
    if (ret != Z_OK)
        return ret == Z_MEM_ERROR ? -1 : refuse(why, path, "gzip", "zlib refused to start");
    unsigned char *buf = NULL;
    size_t cap = 0, used = 0, at = 0;
    int rc = 0;
    while (!rc) {
        int g = grow(&buf, &cap, used);
        if (g) {
            rc = g < 0 ? -1 : refuse(why, path, "gzip", "larger than 4 GiB: not a module");
            break;
        }
        /* avail_* are 32 bits: at most 1 GiB a step */
        size_t room = cap - used, left = n - at;
        z.next_in = in + at;
        z.avail_in = (unsigned)(left < (1u << 30) ? left : 1u << 30);
        z.next_out = buf + used;
        z.avail_out = (unsigned)(room < (1u << 30) ? room : 1u << 30);
        unsigned in0 = z.avail_in, out0 = z.avail_out;
        ret = inflate(&z, Z_NO_FLUSH);
        at += in0 - z.avail_in;
        used += out0 - z.avail_out;
        if (ret == Z_STREAM_END) {
            if (at == n)
                break;
            if (reset(&z) != Z_OK) /* another member follows */
                rc = refuse(why, path, "gzip", "zlib refused to go on");
        } else if (ret == Z_MEM_ERROR) {
            rc = -1;
        } else if (ret == Z_BUF_ERROR && at == n) {
            rc = refuse(why, path, "gzip", "compressed data is truncated");
        } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
            rc = refuse(why, path, "gzip", z.msg ? z.msg : "compressed data is corrupt");
        }
    }
    end(&z);
    *len = used;
    if (rc)
        free(buf);
    else
        *out = buf;
    return rc;
}

int kmsi_decompress(struct kms_decompressors *d, const char *path, const char *kind,
                    const unsigned char *in, size_t n, unsigned char **out, size_t *out_len,
                    char **why)
{
    int k = !strcmp(kind, "xz") ? XZ : !strcmp(kind, "zst") ? ZSTD : GZ;
    *out = NULL;
    *out_len = 0;
    *why = NULL;
    int rc = k == XZ ? unxz(d, path, in, n, out, out_len, why)
           : k == ZSTD ? unzstd(d, path, in, n, out, out_len, why)
           : gunzip(d, path, in, n, out, out_len, why);
    if (rc == 2) {
        *why = kmsi_format("%s is compressed (%s) and %s cannot be loaded (%s): install it to read "
                      "the module", path, kind, library[k],
                      d->missing[k] ? d->missing[k] : "not found");
        return *why ? 2 : -1;
    }
    return rc;
}

void kmsi_decompressors_close(struct kms_decompressors *d)
{
    for (int k = 0; k < 3; k++) {
        if (d->lib[k])
            dlclose(d->lib[k]);
        free(d->missing[k]);
    }
    memset(d, 0, sizeof *d);
}
