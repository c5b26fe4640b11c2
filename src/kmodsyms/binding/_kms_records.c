// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * The records of src/kmodsyms/binding/records.py, made in C: their types
 * and the enum members are taken from that module once, imported with the
 * first record (kmsp_records_ready), and a record is then made in one step
 * (a tuple of the record's type, filled in place) with no Python code run
 * per record.
 */
#include "_kms.h"

/* What records.py declares: the record types and the enum members (kmsp_records_ready). */
PyObject *kmsp_sym_type, *kmsp_line_type, *kmsp_module_type, *kmsp_range_type, *kmsp_info_type, *kmsp_ksym_type;
PyObject *kmsp_origins;   /* tuple indexed by enum kms_origin (None for NONE) */
PyObject *kmsp_bindings;  /* tuple indexed by STB_* (0..2) */
PyObject *kmsp_statuses;  /* tuple indexed by enum kms_module_status */
PyObject *kmsp_size_kinds; /* tuple indexed by enum kms_size_kind */

PyObject *kmsp_name_list(uint32_t n, const char *const *names)
{
    PyObject *list = PyList_New(n);
    for (uint32_t k = 0; list && k < n; k++) {
        PyObject *name = text_or_none(names[k]);
        if (!name) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, k, name);
    }
    return list;
}

/* A record of TYPE (a tuple subclass of N fields) holding ITEMS, stolen;
 * NULL (with every item released) when one is NULL or memory is short. */
PyObject *kmsp_make_record(PyObject *type, PyObject **items, Py_ssize_t n)
{
    PyObject *rec = NULL;
    Py_ssize_t k;
    for (k = 0; k < n; k++)
        if (!items[k])
            goto out;
    rec = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n);
    if (!rec)
        goto out;
    for (k = 0; k < n; k++) {
        PyTuple_SET_ITEM(rec, k, items[k]);
        items[k] = NULL;
    }
out:
    for (k = 0; k < n; k++)
        Py_XDECREF(items[k]);
    return rec;
}

/* Symbolization (records.py) of R; KNOWN: built-in modules known. */
PyObject *kmsp_sym_record(const struct kms_sym *r, int known)
{
    PyObject *f[16];
    int has = r->sym != NULL;
    f[0] = PyLong_FromUnsignedLongLong(r->address);
    f[1] = text_or_none(r->dso);
    if (r->nmodules)
        f[2] = kmsp_name_list(r->nmodules, r->modules);
    else
        f[2] = Py_NewRef(Py_None);
    f[3] = member(kmsp_origins, r->origin);
    f[4] = has ? text(r->sym, r->sym_len) : Py_NewRef(Py_None);
    f[5] = has ? PyLong_FromUnsignedLongLong(r->symoff) : Py_NewRef(Py_None);
    f[6] = has ? PyLong_FromUnsignedLongLong(r->sym_start) : Py_NewRef(Py_None);
    f[7] = has && r->size_kind != KMS_SIZE_UNKNOWN ? PyLong_FromUnsignedLongLong(r->sym_size)
                                                   : Py_NewRef(Py_None);
    f[8] = has ? member(kmsp_size_kinds, r->size_kind) : Py_NewRef(Py_None);
    f[9] = PyBool_FromLong(r->sized);
    f[10] = has ? PyUnicode_FromStringAndSize(&r->type, 1) : Py_NewRef(Py_None);
    f[11] = member(kmsp_bindings, r->sym_binding);
    f[12] = text_or_none(r->object);
    f[13] = PyBool_FromLong(r->ambiguous);
    f[14] = PyList_New(r->ambiguous ? r->ncandidates : 0);
    for (uint32_t k = 0; f[14] && r->ambiguous && k < r->ncandidates; k++) {
        PyObject *c = kmsp_name_list(r->candidates[k].nmodules, r->candidates[k].modules);
        if (!c) {
            Py_CLEAR(f[14]);
            break;
        }
        PyList_SET_ITEM(f[14], k, c);
    }
    f[15] = PyBool_FromLong(known);
    return kmsp_make_record(kmsp_sym_type, f, 16);
}

/* The string at S (NULL: None), decoded once per handle: module names and
 * object paths repeat over many lines, and live as long as the handle. */
PyObject *kmsp_cached_text(PyObject *cache, const char *s)
{
    if (!s)
        Py_RETURN_NONE;
    PyObject *key = PyLong_FromVoidPtr((void *)s), *value;
    if (!key)
        return NULL;
    value = PyDict_GetItemWithError(cache, key);
    if (value) {
        Py_DECREF(key);
        return Py_NewRef(value);
    }
    if (!PyErr_Occurred() && (value = text(s, strlen(s))) != NULL &&
        PyDict_SetItem(cache, key, value) < 0)
        Py_CLEAR(value);
    Py_DECREF(key);
    return value;
}

PyObject *kmsp_cached_list(PyObject *cache, uint32_t n, const char *const *names)
{
    PyObject *list = PyList_New(n);
    for (uint32_t k = 0; list && k < n; k++) {
        PyObject *name = kmsp_cached_text(cache, names[k]);
        if (!name) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, k, name);
    }
    return list;
}

/* Line (records.py) of kallsyms line INDEX (CACHE: the handle's strings). */
PyObject *kmsp_line_record(const struct kms_line *l, size_t index, PyObject *cache)
{
    PyObject *f[10];
    f[0] = PyLong_FromSize_t(index);
    f[1] = PyLong_FromUnsignedLongLong(l->address);
    f[2] = l->size_kind != KMS_SIZE_UNKNOWN ? PyLong_FromUnsignedLongLong(l->sym_size)
                                          : Py_NewRef(Py_None); /* kmodsyms.h, "Sizes" */
    f[3] = PyUnicode_FromStringAndSize(&l->type, 1);
    f[4] = text(l->name, l->name_len);
    f[5] = kmsp_cached_list(cache, l->nmodules, l->modules);
    f[6] = member(kmsp_origins, l->origin);
    f[7] = member(kmsp_bindings, l->sym_binding);
    f[8] = kmsp_cached_text(cache, l->object);
    f[9] = member(kmsp_size_kinds, l->size_kind);
    return kmsp_make_record(kmsp_line_type, f, 10);
}

/* The names records.py declares them by, in the order of the slots. */
static const char *const record_names[10] = {"Symbolization", "Line", "ModuleStats", "ModuleRange",
                                             "Info", "KernelSymbol", "ORIGINS", "BINDINGS",
                                             "STATUSES", "SIZE_KINDS"};

int kmsp_records_ready(void)
{
    PyObject **slot[10] = {&kmsp_sym_type, &kmsp_line_type, &kmsp_module_type, &kmsp_range_type,
                           &kmsp_info_type, &kmsp_ksym_type, &kmsp_origins, &kmsp_bindings,
                           &kmsp_statuses, &kmsp_size_kinds};
    PyObject *t[10] = {NULL};
    int k, ok;
    if (kmsp_sym_type)
        return 1;
    PyObject *records = PyImport_ImportModule("kmodsyms.binding.records");
    for (k = 0, ok = records != NULL; ok && k < 10; k++) {
        t[k] = PyObject_GetAttrString(records, record_names[k]);
        ok = t[k] && (k < 6 ? PyType_Check(t[k]) &&
                              PyType_IsSubtype((PyTypeObject *)t[k], &PyTuple_Type)
                            : PyTuple_Check(t[k]));
        if (t[k] && !ok)
            PyErr_Format(PyExc_TypeError, "kmodsyms.binding.records.%s: not a %s", record_names[k],
                         k < 6 ? "tuple subclass" : "tuple");
    }
    for (k = 0; k < 10; k++) {
        if (ok)
            *slot[k] = Py_NewRef(t[k]);
        Py_XDECREF(t[k]);
    }
    Py_XDECREF(records);
    return ok;
}
