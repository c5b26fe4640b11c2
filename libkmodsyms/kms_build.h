/* SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0 */
/*
 * What the build (kmodsyms.scan, through the Python binding) runs of the
 * library, so that a rule is written once: a load's attribution over a
 * built file at its link addresses (docs/resolver.md R62, kms_attr.c) and
 * the majority vote (R11, kms_sort.c).  Apart from kms_internal.h (which
 * includes it), which must come first in a file, as Python.h must in the
 * binding's.
 */
#ifndef KMS_BUILD_H
#define KMS_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "kmodsyms.h"

int kmsi_attribute_at_link(const char *syms_path, const char *sysmap, size_t len, int32_t *entry,
                           int32_t *section, uint8_t *ambiguous, size_t nlines, kms_error *err);

/* The majority vote of docs/resolver.md R11 over VOTE[0..N) (reordered:
 * sorted): 1 when one value has more votes than any other (*WINNER), 0 when
 * none does (a tie for the most, or no vote); *MOST the most votes any
 * value has either way. */
int kmsi_majority(uint64_t *vote, size_t n, uint64_t *winner, size_t *most);

#endif
