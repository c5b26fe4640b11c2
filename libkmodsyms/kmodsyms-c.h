// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * What kmodsyms-c.c's commands print with (kmodsyms-c-print.c): JSON
 * values, input echoed as the CLI echoes it, records, lines, modules and
 * refresh steps, formatted by the library into one room that grows.
 */
#ifndef KMODSYMS_C_H
#define KMODSYMS_C_H

#include <stdio.h>

#include "kmodsyms.h"

/* The load answered from kallsyms alone (R42), as messages say. */
extern int builtin_modules_unknown;

void put_json_string(const char *s, size_t len, FILE *out);
void put_shown(const char *s, size_t len, FILE *out);
void put_json_cstring(const char *s, FILE *out);
void put_sym(const kms_handle *h, const struct kms_sym *r, int format);
int print_kallmodsyms(const struct kms_line *l, void *arg);
int print_line(const struct kms_line *l, void *arg);
void put_module(const struct kms_module *m, FILE *out);
int put_step(const kms_handle *h, unsigned step, const struct kms_changes *c);
void warn_changed(const kms_handle *h, const struct kms_changes *c);
void free_room(void);

#endif
