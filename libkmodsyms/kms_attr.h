/* SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0 */
/*
 * A load's attribution as the build runs it (docs/resolver.md R62),
 * kms_attr.c's one entry point for the Python binding: apart from
 * kms_internal.h, which must come first in a file, as Python.h must in the
 * binding's.
 */
#ifndef KMS_ATTR_H
#define KMS_ATTR_H

#include <stddef.h>
#include <stdint.h>

#include "kmodsyms.h"

int kmsi_attribute_at_link(const char *syms_path, const char *sysmap, size_t len, int32_t *entry,
                           int32_t *section, uint8_t *ambiguous, size_t nlines, kms_error *err);

#endif
