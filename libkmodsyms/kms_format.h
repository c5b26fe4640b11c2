/* SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0 */
/*
 * The dtrace_syms format's facts (docs/format.md), generated from
 * src/kmodsyms/format/fileformat.py, their one table, by
 *   python -m kmodsyms.format.fileformat --c-header > libkmodsyms/kms_format.h
 * Do not edit: change fileformat.py and run that (tests/test_fileformat.py
 * fails while this file differs from what it writes).
 */
#ifndef KMS_FORMAT_H
#define KMS_FORMAT_H

#include <stdint.h>

#define FORMAT_MAGIC "KMODSYMS"
#define FORMAT_MAGIC_SIZE 8u
#define FORMAT_VERSION 3u
#define HEADER_SIZE 160u
#define TABLE_ALIGN 8u
#define MAX_ENTRIES (UINT32_C(1) << 28)
#define CRC_COVERS_FROM 16u /* the CRC-32 covers bytes [this, file_size) */

/* Header fields: byte offsets. */
#define HDR_MAGIC 0u
#define HDR_VERSION 8u
#define HDR_CRC32 12u
#define HDR_FILE_SIZE 16u
#define HDR_HEADER_SIZE 24u
#define HDR_FLAGS 28u
#define HDR_KERNEL_RELEASE 32u
#define HDR_BUILD_ID 36u
#define HDR_TOOL_VERSION 40u
#define HDR_OBJECT_SOURCE 44u
#define HDR_THICK_SOURCE 48u
#define HDR_PLACEMENT 52u
#define HDR_DIRECTORY 56u
#define HDR_STRINGS_COUNT 6u /* u32 string offsets from HDR_KERNEL_RELEASE on */

/* The tables, in directory order (the pair of table t at HDR_DIRECTORY + 8 * t). */
enum {
    T_STRINGS,
    T_MODULES,
    T_MEMBERS,
    T_MODSETS,
    T_OBJECTS,
    T_SECNAMES,
    T_SECTIONS,
    T_SYMBOLS,
    T_SEGMENTS,
    T_ANCHORS,
    T_VSYMS,
    T_BY_OFFSET,
    T_COUNT
};

static const uint32_t entry_size[T_COUNT] = {1, 4, 4, 8, 16, 4, 40, 40, 16, 8, 24, 4};
static const char *const table_names[T_COUNT] = {
    "strings",
    "modules",
    "modset_members",
    "modsets",
    "objects",
    "section_names",
    "sections",
    "symbols",
    "segments",
    "anchors",
    "vmlinux_symbols",
    "symbols_by_offset",
};

/* Entry fields: byte offsets within an entry. */
#define MOD_NAME 0u
#define MODSET_FIRST 0u
#define MODSET_COUNT 4u
#define OBJ_PATH 0u
#define OBJ_MODSET 4u
#define OBJ_FLAGS 8u
#define SECNAME_NAME 0u
#define SEC_OBJECT 0u
#define SEC_NAME 4u
#define SEC_FLAGS 8u
#define SEC_ALIGN 12u
#define SEC_SIZE 16u
#define SEC_ADDRESS 24u
#define SEC_PLACEMENT 32u
#define SYM_NAME 0u
#define SYM_MODSET 4u
#define SYM_OBJECT 8u
#define SYM_SECTION 12u
#define SYM_VALUE 16u
#define SYM_SIZE 24u
#define SYM_TYPE 32u
#define SYM_BINDING 33u
#define SEG_START 0u
#define SEG_END 8u
#define ANCHOR_SYMBOL 0u
#define ANCHOR_SEGMENT 4u
#define VSYM_NAME 0u
#define VSYM_ADDRESS 8u
#define VSYM_SIZE 16u

/* Codes and flags. */
#define FLAG_MISSING_OBJECTS 1u /* header flags */
#define FLAG_FROM_DEBUG_INFO 2u
#define FLAG_GUESSED_MODULES 4u
#define FLAG_FORCED 8u
#define OBJECT_MISSING 1u /* objects.flags */
#define NO_ADDRESS UINT64_C(0xFFFFFFFFFFFFFFFF) /* sections.address: not placed */
#define PLACEMENT_UNPLACED 0u /* sections.placement */
#define PLACEMENT_BY_ANCHOR 1u /* sections.placement */
#define PLACEMENT_BY_ELIMINATION 2u /* sections.placement */
#define PLACEMENT_BY_NEIGHBOURS 3u /* sections.placement */

#endif /* KMS_FORMAT_H */
