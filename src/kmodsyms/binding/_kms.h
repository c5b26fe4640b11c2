// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * What the files of the extension kmodsyms.binding._kms share: _kms.c (the
 * Handle type and the module), _kms_records.c (the records of
 * src/kmodsyms/binding/records.py, made in C) and _kms_build.c (what the
 * build runs of the library).  Shared names carry the prefix kmsp_.
 */
#ifndef KMODSYMS_BINDING_KMS_H
#define KMODSYMS_BINDING_KMS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "kmodsyms.h"

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
#endif

/* What records.py declares: the record types and the enum members (kmsp_records_ready). */
extern PyObject *kmsp_sym_type, *kmsp_line_type, *kmsp_module_type, *kmsp_range_type, *kmsp_info_type, *kmsp_ksym_type;
extern PyObject *kmsp_origins;   /* tuple indexed by enum kms_origin (None for NONE) */
extern PyObject *kmsp_bindings;  /* tuple indexed by STB_* (0..2) */
extern PyObject *kmsp_statuses;  /* tuple indexed by enum kms_module_status */
extern PyObject *kmsp_size_kinds; /* tuple indexed by enum kms_size_kind */
extern PyObject *kmsp_KmsError;  /* _kms.Error(code, message), made by PyInit__kms */
/* Raise ERR as _kms.Error(code, message); NULL. */
PyObject *kmsp_raise(const kms_error *err);

/* Text as Python gets it: UTF-8, any other byte kept by surrogateescape. */
static inline PyObject *text(const char *s, size_t len)
{
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "surrogateescape");
}

static inline PyObject *text_or_none(const char *s)
{
    if (!s)
        Py_RETURN_NONE;
    return text(s, strlen(s));
}

/* Member INDEX of an enum's tuple (records.py's ORIGINS, ...), None past its end. */
static inline PyObject *member(PyObject *table, unsigned index)
{
    if (index >= (unsigned)PyTuple_GET_SIZE(table))
        Py_RETURN_NONE;
    PyObject *m = PyTuple_GET_ITEM(table, index);
    Py_INCREF(m);
    return m;
}

PyObject *kmsp_name_list(uint32_t n, const char *const *names);
PyObject *kmsp_make_record(PyObject *type, PyObject **items, Py_ssize_t n);
PyObject *kmsp_sym_record(const struct kms_sym *r, int known);
PyObject *kmsp_cached_text(PyObject *cache, const char *s);
PyObject *kmsp_cached_list(PyObject *cache, uint32_t n, const char *const *names);
PyObject *kmsp_line_record(const struct kms_line *l, size_t index, PyObject *cache);
/* Whether the record types are at hand, taken from records.py (imported)
 * when not yet; 0 with an exception set when that fails. */
int kmsp_records_ready(void);
PyObject *kmsp_attribute_at_link(PyObject *mod, PyObject *args);
PyObject *kmsp_majority(PyObject *mod, PyObject *args);

#endif
