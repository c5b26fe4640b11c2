/*
 * kmodsyms.h - a small, dependency-free C99 reader for dtrace_syms files.
 *
 * The file format is specified in docs/format.md.  kms_open() reads the
 * whole file into memory and validates it completely (magic, version, size,
 * CRC-32, the bounds of every table and every index, the name order of the
 * symbol array); after a successful open every accessor below is safe for
 * any symbol index below kms_nsymbols().  All multi-byte fields are decoded
 * byte-wise from little-endian, so the reader works on any host.
 *
 * Strings returned are NUL-terminated and point into the loaded file; they
 * stay valid until kms_close().
 */
#ifndef KMODSYMS_H
#define KMODSYMS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KMS_FORMAT_VERSION 1u
#define KMS_HEADER_SIZE 160u
#define KMS_FLAG_MISSING_OBJECTS 1u /* header flags: some objects were missing */
#define KMS_OBJECT_MISSING 1u       /* object flags: missing at build time */
#define KMS_NO_ADDRESS UINT64_MAX   /* section link address: not placed at build time */

/* Section placement methods (how kmodsyms build placed a section). */
#define KMS_PLACED_NONE 0u        /* unplaced: no link address */
#define KMS_PLACED_ANCHORS 1u     /* by anchors (names unique in both) */
#define KMS_PLACED_ELIMINATION 2u /* by elimination or shape */
#define KMS_PLACED_LINK_ORDER 3u  /* by link-order block or bracketing linker symbols */

typedef struct kms_file kms_file;

/*
 * Read and validate the file at PATH.  Returns NULL on failure and writes a
 * one-line message (no trailing newline) of at most ERRLEN-1 bytes to ERR.
 */
kms_file *kms_open(const char *path, char *err, size_t errlen);

/* Validate an image already in memory (copied; DATA may be freed after). */
kms_file *kms_open_mem(const void *data, size_t size, char *err, size_t errlen);

void kms_close(kms_file *f);

/* Header. */
uint32_t kms_flags(const kms_file *f);
const char *kms_kernel_release(const kms_file *f);
const char *kms_build_id(const kms_file *f);
const char *kms_tool_version(const kms_file *f);
/* Build-time placement statistics as a JSON object, or "" (no layout). */
const char *kms_placement_stats(const kms_file *f);

/* Number of symbol entries. */
uint32_t kms_nsymbols(const kms_file *f);

/*
 * Binary search: the entries called NAME are [*first, *first + count), in
 * file order.  Returns count (0 when there is none; *first is then where
 * NAME would be inserted).  FIRST may be NULL.
 */
uint32_t kms_find(const kms_file *f, const char *name, uint32_t *first);

/* Accessors for symbol entry I (I < kms_nsymbols(f)). */
const char *kms_sym_name(const kms_file *f, uint32_t i);
uint32_t kms_sym_nmodules(const kms_file *f, uint32_t i);            /* 0: core kernel */
const char *kms_sym_module(const kms_file *f, uint32_t i, uint32_t k); /* k < nmodules */
const char *kms_sym_object(const kms_file *f, uint32_t i);           /* e.g. fs/ext4/super.o */
uint32_t kms_sym_object_flags(const kms_file *f, uint32_t i);
const char *kms_sym_section(const kms_file *f, uint32_t i);          /* e.g. .text */
uint64_t kms_sym_value(const kms_file *f, uint32_t i); /* offset within the object's section */
uint64_t kms_sym_size(const kms_file *f, uint32_t i);
unsigned kms_sym_type(const kms_file *f, uint32_t i);    /* ELF STT_* */
unsigned kms_sym_binding(const kms_file *f, uint32_t i); /* ELF STB_* */

/*
 * Link layout (docs/format.md, "Placing symbols with the layout").  The
 * symbol's link address in vmlinux, before KASLR: its section's address plus
 * its value, or KMS_NO_ADDRESS when the section was not placed at build time
 * (always so for a file without a layout, kms_nsegments() == 0).  The
 * placement is one of KMS_PLACED_* (KMS_PLACED_NONE when unplaced).
 */
uint64_t kms_sym_link_address(const kms_file *f, uint32_t i);
unsigned kms_sym_placement(const kms_file *f, uint32_t i);

/* vmlinux's load segments, [*start, *end) each, S < kms_nsegments(f). */
uint32_t kms_nsegments(const kms_file *f);
void kms_segment(const kms_file *f, uint32_t s, uint64_t *start, uint64_t *end);

/* Anchors, A < kms_nanchors(f): a symbol entry (< kms_nsymbols) and the
 * segment (< kms_nsegments) whose KASLR shift it gives. */
uint32_t kms_nanchors(const kms_file *f);
uint32_t kms_anchor_symbol(const kms_file *f, uint32_t a);
uint32_t kms_anchor_segment(const kms_file *f, uint32_t a);

/* Table sizes, for walking the file. */
uint32_t kms_nmodules(const kms_file *f);
const char *kms_module_name(const kms_file *f, uint32_t m);

#ifdef __cplusplus
}
#endif

#endif /* KMODSYMS_H */
