/* SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0 */
/*
 * Internal to libkmodsyms (not installed): compressed .ko files (.ko.xz,
 * .ko.zst, .ko.gz) decompressed with the system's liblzma, libzstd and zlib
 * -- the libraries kmod itself uses -- loaded at run time (dlopen), so that
 * the library builds without their headers and runs without them (a module
 * then stays unsized, its status saying which library is missing).
 *
 * The few types of their APIs used here are declared below as their
 * headers declare them (stable ABIs: liblzma 5, libzstd 1, zlib 1);
 * test_kms.c holds them to the real headers where those are installed.
 */
#ifndef KMS_DECOMPRESS_H
#define KMS_DECOMPRESS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

/* <lzma/base.h> lzma_stream */
struct kmsz_lzma_stream {
    const uint8_t *next_in;
    size_t avail_in;
    uint64_t total_in;
    uint8_t *next_out;
    size_t avail_out;
    uint64_t total_out;
    const void *allocator;
    void *internal;
    void *reserved_ptr1, *reserved_ptr2, *reserved_ptr3, *reserved_ptr4;
    uint64_t seek_pos, reserved_int2;
    size_t reserved_int3, reserved_int4;
    int reserved_enum1, reserved_enum2;
};

/* <zstd.h> ZSTD_inBuffer, ZSTD_outBuffer */
struct kmsz_zstd_in {
    const void *src;
    size_t size, pos;
};
struct kmsz_zstd_out {
    void *dst;
    size_t size, pos;
};

/* <zlib.h> z_stream (uInt: unsigned int, uLong: unsigned long) */
struct kmsz_z_stream {
    const unsigned char *next_in;
    unsigned int avail_in;
    unsigned long total_in;
    unsigned char *next_out;
    unsigned int avail_out;
    unsigned long total_out;
    const char *msg;
    void *state;
    void *zalloc, *zfree, *opaque;
    int data_type;
    unsigned long adler, reserved;
};

/* The decompressors one load has opened (each on first need). */
struct kms_decompressors {
    void *lib[3];        /* dlopen handles, by kind (NULL: not tried or absent) */
    uint8_t tried[3];
    char *missing[3];    /* why a library could not be loaded (dlerror), or NULL */
};

/* The compression of a file name's suffix (R43: .ko.xz, .ko.zst, .ko.gz):
 * "xz", "zst", "gz", or NULL for none. */
const char *kmsi_compression(const char *path);

/*
 * Decompress IN[0..N) of PATH, compressed as KIND (kmsi_compression's).
 * 0: *OUT (malloc'd, *OUT_LEN bytes) is the file's content; 1: refused, *WHY
 * (malloc'd) says why ("PATH: cannot decompress (KIND: WHAT); reinstall
 * the module"); 2: the library for
 * KIND cannot be loaded, *WHY names it; -1: out of memory.
 */
int kmsi_decompress(struct kms_decompressors *d, const char *path, const char *kind,
                    const unsigned char *in, size_t n, unsigned char **out, size_t *out_len,
                    char **why);

/* Close what kmsi_decompress opened. */
void kmsi_decompressors_close(struct kms_decompressors *d);

/* A string made by printf, malloc'd (NULL: out of memory). */
char *kmsi_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* KMS_DECOMPRESS_H */
