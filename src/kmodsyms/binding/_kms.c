// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * kmodsyms.binding._kms: libkmodsyms (`libkmodsyms/`) for Python, compiled into
 * this extension from the library's own sources by 'pip install .'.
 *
 * One type, Handle: a loaded kms_handle.  Its methods are the library's
 * queries; the records they return are the declared types of
 * src/kmodsyms/binding/records.py, made in C (_kms_records.c).  The
 * build's calls into the library are _kms_build.c's.  resolve_lines() writes
 * the answers of a buffer of addresses into the caller's columns, without
 * the GIL and without a Python object per address.
 */
#include "_kms.h"

PyObject *kmsp_KmsError;  /* _kms.Error(code, message) */

PyObject *kmsp_raise(const kms_error *err)
{
    PyObject *e = Py_BuildValue("(is)", err->code, err->message);
    if (e) {
        PyErr_SetObject(kmsp_KmsError, e);
        Py_DECREF(e);
    }
    return NULL;
}

typedef struct {
    PyObject_HEAD
    kms_handle *h;
    struct kms_line *lines; /* kallsyms order, made on first need (kms_foreach) */
    size_t nlines;
    PyObject *strings;      /* address -> str of the handle's module names and paths */
} Handle;

/* ---------------------------------------------------------------- handle */

static int keep_line(const struct kms_line *l, void *arg)
{
    Handle *self = arg;
    self->lines[self->nlines++] = *l;
    return 0;
}

/* The kallsyms lines, in kallsyms order (their strings live in the handle). */
static int need_lines(Handle *self)
{
    if (self->lines)
        return 0;
    struct kms_info info = {.size = sizeof info};
    kms_get_info(self->h, &info);
    self->lines = PyMem_RawMalloc((info.lines ? info.lines : 1) * sizeof *self->lines);
    if (!self->lines) {
        PyErr_NoMemory();
        return -1;
    }
    self->nlines = 0;
    kms_foreach(self->h, keep_line, self);
    if (!self->strings && !(self->strings = PyDict_New()))
        return -1;
    return 0;
}

/* R, a record of H, in FORMAT (enum kms_format) as kms_format_sym() writes
 * it. */
static PyObject *sym_text(const kms_handle *h, const struct kms_sym *r, int format)
{
    char stack[512];
    size_t n = kms_format_sym(h, r, format, stack, sizeof stack);
    if (n < sizeof stack)
        return text(stack, n);
    char *buf = PyMem_Malloc(n + 1);
    if (!buf)
        return PyErr_NoMemory();
    kms_format_sym(h, r, format, buf, n + 1);
    PyObject *out = text(buf, n);
    PyMem_Free(buf);
    return out;
}

static int format_arg(int format)
{
    if (format >= KMS_FORMAT_VERBOSE && format <= KMS_FORMAT_JSON)
        return 1;
    PyErr_SetString(PyExc_ValueError, "format: one of FORMAT_VERBOSE, FORMAT_DTRACE, "
                    "FORMAT_KERNEL, FORMAT_JSON");
    return 0;
}

/* Whether the load knows the built-in modules (not from kallsyms alone). */
static int known_builtins(const kms_handle *h)
{
    struct kms_info info = {.size = sizeof info};
    kms_get_info(h, &info);
    return info.builtin_modules_known;
}

static void Handle_dealloc(Handle *self)
{
    if (self->h)
        kms_free(self->h);
    PyMem_RawFree(self->lines);
    Py_XDECREF(self->strings);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int opt_bytes(PyObject *value, const char **out)
{
    if (value == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyBytes_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "paths and names are bytes (os.fsencode) or None");
        return -1;
    }
    *out = PyBytes_AS_STRING(value);
    return 0;
}

/* Handle(syms, kallsyms, text, name, modules_dir, sysfs_root, proc_modules,
 * flags): kms_load_opts() with these fields (paths as bytes or None; TEXT
 * a bytes-like kallsyms text or None).  Raises Error(code, message). */
static int Handle_init(Handle *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"syms", "kallsyms", "text", "name", "modules_dir", "sysfs_root",
                            "proc_modules", "flags", NULL};
    PyObject *syms = Py_None, *kallsyms = Py_None, *text_obj = Py_None, *name = Py_None;
    PyObject *modules_dir = Py_None, *sysfs_root = Py_None, *proc_modules = Py_None;
    unsigned flags = 0;
    struct kms_load_opts opts = {.size = sizeof opts};
    Py_buffer buf = {0};
    kms_error err;

    if (self->h) {
        PyErr_SetString(PyExc_RuntimeError, "Handle is already loaded");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOOOOOI", names, &syms, &kallsyms, &text_obj,
                                     &name, &modules_dir, &sysfs_root, &proc_modules, &flags))
        return -1;
    if (opt_bytes(syms, &opts.syms_path) || opt_bytes(kallsyms, &opts.kallsyms_path) ||
        opt_bytes(name, &opts.kallsyms_name) || opt_bytes(modules_dir, &opts.modules_dir) ||
        opt_bytes(sysfs_root, &opts.sysfs_root) || opt_bytes(proc_modules, &opts.proc_modules))
        return -1;
    if (text_obj != Py_None) {
        if (PyObject_GetBuffer(text_obj, &buf, PyBUF_SIMPLE) < 0)
            return -1;
        opts.kallsyms_text = buf.buf;
        opts.kallsyms_len = (size_t)buf.len;
    }
    opts.flags = flags;
    Py_BEGIN_ALLOW_THREADS
    self->h = kms_load_opts(&opts, &err);
    Py_END_ALLOW_THREADS
    if (buf.obj)
        PyBuffer_Release(&buf);
    if (!self->h) {
        kmsp_raise(&err);
        return -1;
    }
    return 0;
}

static int loaded(Handle *self)
{
    if (self->h)
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "Handle is not loaded");
    return 0;
}

/* Loaded, and the record types at hand (kmsp_records_ready): what every
 * method answering in records checks first. */
static int recording(Handle *self)
{
    return loaded(self) && kmsp_records_ready();
}

/* resolve(address: int) -> Symbolization */
static PyObject *Handle_resolve(Handle *self, PyObject *arg)
{
    struct kms_sym r = {.size = sizeof r};
    unsigned long long a = PyLong_AsUnsignedLongLong(arg);
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (!recording(self))
        return NULL;
    kms_resolve(self->h, a, &r);
    return kmsp_sym_record(&r, known_builtins(self->h));
}

/* text(address: int, format: int) -> str: the answer as kms_format_sym()
 * writes it in FORMAT (FORMAT_*). */
static PyObject *Handle_text(Handle *self, PyObject *args)
{
    struct kms_sym r = {.size = sizeof r};
    unsigned long long a;
    int format;
    if (!PyArg_ParseTuple(args, "Ki", &a, &format) || !loaded(self) || !format_arg(format))
        return NULL;
    kms_resolve(self->h, a, &r);
    return sym_text(self->h, &r, format);
}

/* resolve_lines(addresses, lines, sized): for the N uint64 ADDRESSES (any
 * C-contiguous buffer of 8-byte items, or bytes), write the answering
 * line (int32/uint32; -1 as int32: none) into LINES and sized (0/1) into
 * SIZED, writable buffers of at least N 4-byte and 1-byte items.  The GIL
 * is released while the library works. */
static PyObject *Handle_resolve_lines(Handle *self, PyObject *args)
{
    PyObject *a_obj, *l_obj, *s_obj;
    Py_buffer a, l, s;
    if (!PyArg_ParseTuple(args, "OOO", &a_obj, &l_obj, &s_obj) || !loaded(self))
        return NULL;
    if (PyObject_GetBuffer(a_obj, &a, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(l_obj, &l, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    if (PyObject_GetBuffer(s_obj, &s, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&a);
        PyBuffer_Release(&l);
        return NULL;
    }
    size_t n = (size_t)a.len / 8;
    int bytes = a.format == NULL || !strcmp(a.format, "B") || !strcmp(a.format, "b") ||
                !strcmp(a.format, "c");
    if (a.len % 8 || (!bytes && a.itemsize != 8)) {
        PyErr_SetString(PyExc_TypeError, "addresses: a buffer of 8-byte unsigned integers");
    } else if ((size_t)l.len < n * 4 || (size_t)s.len < n) {
        PyErr_SetString(PyExc_ValueError, "lines/sized: too short for the addresses");
    } else {
        Py_BEGIN_ALLOW_THREADS
        kms_resolve_lines(self->h, a.buf, n, l.buf, s.buf);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&l);
    PyBuffer_Release(&s);
    if (PyErr_Occurred())
        return NULL;
    return PyLong_FromSize_t(n);
}

/* lookup(name: bytes, mod: bytes or None, offset: int, format: int or None)
 * -> [Symbolization], or [str] with a FORMAT (FORMAT_*: kms_format_sym()):
 * kms_lookup_name(), each the record of the address OFFSET bytes into the
 * symbol, in kallsyms order. */
static PyObject *Handle_lookup(Handle *self, PyObject *args)
{
    const char *name, *mod = NULL;
    PyObject *mod_obj = Py_None, *format_obj = Py_None;
    unsigned long long off = 0;
    int format = -1;
    if (!PyArg_ParseTuple(args, "y|OKO", &name, &mod_obj, &off, &format_obj) || !loaded(self) ||
        opt_bytes(mod_obj, &mod))
        return NULL;
    if (format_obj != Py_None) {
        format = (int)PyLong_AsLong(format_obj);
        if (PyErr_Occurred() || !format_arg(format))
            return NULL;
    } else if (!kmsp_records_ready()) {
        return NULL;
    }
    struct kms_sym stack[8], *recs = stack;
    stack[0].size = sizeof stack[0];
    size_t n = kms_lookup_name(self->h, mod, name, off, recs, 8);
    if (n > 8) {
        if (!(recs = PyMem_Malloc(n * sizeof *recs)))
            return PyErr_NoMemory();
        recs[0].size = sizeof *recs;
        n = kms_lookup_name(self->h, mod, name, off, recs, n);
    }
    PyObject *list = PyList_New((Py_ssize_t)n);
    int known = known_builtins(self->h);
    for (size_t k = 0; list && k < n; k++) {
        PyObject *rec = format < 0 ? kmsp_sym_record(&recs[k], known)
                                   : sym_text(self->h, &recs[k], format);
        if (!rec) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, rec);
    }
    if (recs != stack)
        PyMem_Free(recs);
    return list;
}

/* module_lines(mod: bytes) -> [int]: kms_module_lines(), kallsyms order. */
static PyObject *Handle_module_lines(Handle *self, PyObject *args)
{
    const char *mod;
    if (!PyArg_ParseTuple(args, "y", &mod) || !loaded(self))
        return NULL;
    size_t n = kms_module_lines(self->h, mod, NULL, 0);
    uint32_t *index = PyMem_Malloc((n ? n : 1) * sizeof *index);
    if (!index)
        return PyErr_NoMemory();
    n = kms_module_lines(self->h, mod, index, n);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t k = 0; list && k < n; k++) {
        PyObject *i = PyLong_FromUnsignedLong(index[k]);
        if (!i) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, i);
    }
    PyMem_Free(index);
    return list;
}

/* builtin_modules() -> [str]: the file's built-in modules, in its order. */
static PyObject *Handle_builtin_modules(Handle *self, PyObject *unused)
{
    (void)unused;
    if (!loaded(self))
        return NULL;
    size_t n = kms_builtin_modules(self->h, NULL, 0);
    const char **names = PyMem_Malloc((n ? n : 1) * sizeof *names);
    if (!names)
        return PyErr_NoMemory();
    n = kms_builtin_modules(self->h, names, n);
    PyObject *list = kmsp_name_list((uint32_t)n, names);
    PyMem_Free(names);
    return list;
}

/* kernel_symbol(address) -> (text, symbol, offset, size, module, exact): the
 * address as the kernel's %pS prints it (kms_resolve_kernel()). */
static PyObject *Handle_kernel_symbol(Handle *self, PyObject *arg)
{
    struct kms_ksym k = {.size = sizeof k};
    unsigned long long a = PyLong_AsUnsignedLongLong(arg);
    if (a == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (!recording(self))
        return NULL;
    kms_resolve_kernel(self->h, a, &k);
    PyObject *f[7] = {PyLong_FromUnsignedLongLong(k.address),
                      text(k.text, strlen(k.text)),
                      k.sym ? text(k.sym, k.sym_len) : Py_NewRef(Py_None),
                      k.sym ? PyLong_FromUnsignedLongLong(k.offset) : Py_NewRef(Py_None),
                      k.sym && k.sym_size ? PyLong_FromUnsignedLongLong(k.sym_size)
                                          : Py_NewRef(Py_None),
                      text_or_none(k.module), PyBool_FromLong(k.exact)};
    return kmsp_make_record(kmsp_ksym_type, f, 7);
}

/* module_known(mod: bytes) -> bool */
static PyObject *Handle_module_known(Handle *self, PyObject *args)
{
    const char *mod;
    if (!PyArg_ParseTuple(args, "y", &mod) || !loaded(self))
        return NULL;
    return PyBool_FromLong(kms_module_known(self->h, mod));
}

/* line_count() -> int */
static PyObject *Handle_line_count(Handle *self, PyObject *unused)
{
    (void)unused;
    if (!loaded(self) || need_lines(self))
        return NULL;
    return PyLong_FromSize_t(self->nlines);
}

/* line(index) -> Line */
static PyObject *Handle_line(Handle *self, PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (!recording(self) || need_lines(self))
        return NULL;
    if (i < 0 || (size_t)i >= self->nlines) {
        PyErr_SetString(PyExc_IndexError, "no such kallsyms line");
        return NULL;
    }
    return kmsp_line_record(&self->lines[i], (size_t)i, self->strings);
}

/* lines() -> [Line], kallsyms order */
static PyObject *Handle_lines(Handle *self, PyObject *unused)
{
    (void)unused;
    if (!recording(self) || need_lines(self))
        return NULL;
    PyObject *list = PyList_New((Py_ssize_t)self->nlines);
#if PY_VERSION_HEX >= 0x030A0000
    /* hundreds of thousands of new containers would run the collector over
     * and over, for nothing: none of them can be part of a cycle */
    int collecting = PyGC_Disable();
#endif
    for (size_t i = 0; list && i < self->nlines; i++) {
        PyObject *rec = kmsp_line_record(&self->lines[i], i, self->strings);
        if (!rec) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, rec);
    }
#if PY_VERSION_HEX >= 0x030A0000
    if (collecting)
        PyGC_Enable();
#endif
    return list;
}

/* symbol(index, address) -> Symbolization: the record of ADDRESS answered
 * by kallsyms line INDEX (kms_line_sym). */
static PyObject *Handle_symbol(Handle *self, PyObject *args)
{
    Py_ssize_t i;
    unsigned long long address;
    struct kms_info info = {.size = sizeof info};
    struct kms_sym r = {.size = sizeof r};
    if (!PyArg_ParseTuple(args, "nK", &i, &address) || !recording(self))
        return NULL;
    kms_get_info(self->h, &info);
    if (i < 0 || (size_t)i >= info.lines) {
        PyErr_SetString(PyExc_IndexError, "no such kallsyms line");
        return NULL;
    }
    kms_line_sym(self->h, (uint32_t)i, address, &r);
    return kmsp_sym_record(&r, known_builtins(self->h));
}

struct text_out {
    char *buf;
    size_t len, cap;
};

/* Room in O for N more bytes: 0, or -1 when memory is short. */
static int reserve(struct text_out *o, size_t n)
{
    if (o->len + n <= o->cap)
        return 0;
    size_t cap = o->cap ? o->cap : 1 << 20;
    while (cap < o->len + n)
        cap *= 2;
    char *more = PyMem_RawRealloc(o->buf, cap);
    if (!more)
        return -1;
    o->buf = more;
    o->cap = cap;
    return 0;
}

/* Line L as kms_format_line() writes it, and a newline, appended to O. */
static int kallmodsyms_line(const struct kms_line *l, void *arg)
{
    struct text_out *o = arg;
    size_t n = kms_format_line(l, o->buf + o->len, o->cap - o->len);
    if (n >= o->cap - o->len) { /* room for its NUL, which the newline replaces */
        if (reserve(o, n + 1))
            return -1;
        kms_format_line(l, o->buf + o->len, o->cap - o->len);
    }
    o->len += n;
    o->buf[o->len++] = '\n';
    return 0;
}

static PyObject *names_tuple(size_t n, const char *const *names)
{
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    for (size_t k = 0; t && k < n; k++) {
        PyObject *name = text_or_none(names[k]);
        if (!name) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)k, name);
    }
    return t;
}

/* refresh() -> (loaded, unloaded, reloaded): kms_refresh(), the GIL
 * released; the lines kept for line() are dropped (they were the old
 * load's).  Raises Error(code, message); the handle is unchanged then. */
static PyObject *Handle_refresh(Handle *self, PyObject *unused)
{
    (void)unused;
    struct kms_changes c = {.size = sizeof c};
    kms_error err;
    int rc;
    if (!loaded(self))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = kms_refresh(self->h, &c, &err);
    Py_END_ALLOW_THREADS
    if (rc != KMS_OK)
        return kmsp_raise(&err);
    if (c.nloaded || c.nunloaded || c.nreloaded) {
        PyMem_RawFree(self->lines);
        self->lines = NULL;
        self->nlines = 0;
        Py_CLEAR(self->strings);
    }
    PyObject *f[3] = {names_tuple(c.nloaded, c.loaded), names_tuple(c.nunloaded, c.unloaded),
                      names_tuple(c.nreloaded, c.reloaded)};
    if (!f[0] || !f[1] || !f[2]) {
        Py_XDECREF(f[0]);
        Py_XDECREF(f[1]);
        Py_XDECREF(f[2]);
        return NULL;
    }
    return Py_BuildValue("(NNN)", f[0], f[1], f[2]);
}

/* kallmodsyms() -> bytes: what UEK's /proc/kallmodsyms printed. */
static PyObject *Handle_kallmodsyms(Handle *self, PyObject *unused)
{
    (void)unused;
    struct text_out o = {0};
    int r;
    if (!loaded(self))
        return NULL;
    if (reserve(&o, 1))
        return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    r = kms_foreach(self->h, kallmodsyms_line, &o);
    Py_END_ALLOW_THREADS
    PyObject *out = r ? PyErr_NoMemory() : PyBytes_FromStringAndSize(o.buf, (Py_ssize_t)o.len);
    PyMem_RawFree(o.buf);
    return out;
}

/* The loaded modules (kms_modules()) into *N, in PyMem memory; NULL with
 * MemoryError set. */
static struct kms_module *loaded_modules(Handle *self, size_t *n)
{
    *n = kms_modules(self->h, NULL, 0);
    struct kms_module *mods = PyMem_Malloc((*n ? *n : 1) * sizeof *mods);
    if (!mods) {
        PyErr_NoMemory();
        return NULL;
    }
    mods[0].size = sizeof *mods;
    *n = kms_modules(self->h, mods, *n);
    return mods;
}

/* modules() -> [ModuleStats] of the loaded modules, kallsyms order. */
static PyObject *Handle_modules(Handle *self, PyObject *unused)
{
    (void)unused;
    size_t n;
    struct kms_module *mods = recording(self) ? loaded_modules(self, &n) : NULL;
    if (!mods)
        return NULL;
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t k = 0; list && k < n; k++) {
        PyObject *f[7];
        f[0] = text_or_none(mods[k].name);
        f[1] = text_or_none(mods[k].file);
        f[2] = member(kmsp_statuses, mods[k].status);
        f[3] = PyLong_FromSize_t(mods[k].lines);
        f[4] = PyLong_FromSize_t(mods[k].sized);
        f[5] = text_or_none(mods[k].reason);
        f[6] = text_or_none(mods[k].warning);
        PyObject *rec = kmsp_make_record(kmsp_module_type, f, 7);
        if (!rec) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, rec);
    }
    PyMem_Free(mods);
    return list;
}

/* module_ranges(mod: bytes) -> [ModuleRange] */
static PyObject *Handle_module_ranges(Handle *self, PyObject *args)
{
    const char *mod;
    if (!PyArg_ParseTuple(args, "y", &mod) || !recording(self))
        return NULL;
    size_t n = kms_module_ranges(self->h, mod, NULL, 0);
    struct kms_range *r = PyMem_Malloc((n ? n : 1) * sizeof *r);
    if (!r)
        return PyErr_NoMemory();
    r[0].size = sizeof *r;
    n = kms_module_ranges(self->h, mod, r, n);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t k = 0; list && k < n; k++) {
        PyObject *f[3] = {PyLong_FromUnsignedLongLong(r[k].start),
                          PyLong_FromUnsignedLongLong(r[k].end), PyBool_FromLong(r[k].text)};
        PyObject *rec = kmsp_make_record(kmsp_range_type, f, 3);
        if (!rec) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, rec);
    }
    PyMem_Free(r);
    return list;
}

/* info() -> Info */
static PyObject *Handle_info(Handle *self, PyObject *unused)
{
    (void)unused;
    struct kms_info i = {.size = sizeof i};
    if (!recording(self))
        return NULL;
    kms_get_info(self->h, &i);
    PyObject *f[11] = {text_or_none(i.kernel_release), text_or_none(i.build_id),
                       PyLong_FromSize_t(i.lines), PyLong_FromSize_t(i.core_lines),
                       PyLong_FromUnsignedLong(i.segments), PyLong_FromUnsignedLong(i.anchors),
                       PyLong_FromUnsignedLong(i.anchors_verified),
                       PyBool_FromLong(i.builtin_modules_known), text_or_none(i.degraded),
                       text_or_none(i.warning),
                       PyBool_FromLong((i.file_flags & KMS_FILE_GUESSED_MODULES) != 0)};
    return kmsp_make_record(kmsp_info_type, f, 11);
}

/* warnings() -> (str, [str]): the load's one line for a user ("" for
 * none: kms_info.warning) and each loaded module's (kms_module.warning),
 * without the records (the commands that print the library's text make
 * none, and do not import them). */
static PyObject *Handle_warnings(Handle *self, PyObject *unused)
{
    (void)unused;
    struct kms_info i = {.size = sizeof i};
    size_t n;
    struct kms_module *mods = loaded(self) ? loaded_modules(self, &n) : NULL;
    if (!mods)
        return NULL;
    kms_get_info(self->h, &i);
    PyObject *list = PyList_New(0);
    for (size_t k = 0; list && k < n; k++) {
        if (!mods[k].warning || !mods[k].warning[0])
            continue;
        PyObject *w = text(mods[k].warning, strlen(mods[k].warning));
        if (!w || PyList_Append(list, w) < 0)
            Py_CLEAR(list);
        Py_XDECREF(w);
    }
    PyMem_Free(mods);
    return list ? Py_BuildValue("(NN)", text_or_none(i.warning), list) : NULL;
}

static PyMethodDef Handle_methods[] = {
    {"resolve", (PyCFunction)Handle_resolve, METH_O, "resolve(address) -> Symbolization"},
    {"text", (PyCFunction)Handle_text, METH_VARARGS,
     "text(address, format) -> str: the answer in FORMAT_* (kms_format_sym)"},
    {"resolve_lines", (PyCFunction)Handle_resolve_lines, METH_VARARGS,
     "resolve_lines(addresses, lines, sized) -> n: the columnar resolve"},
    {"lookup", (PyCFunction)Handle_lookup, METH_VARARGS,
     "lookup(name: bytes, mod: bytes or None, offset=0, format=None) -> [Symbolization], "
     "or [str] in FORMAT_*"},
    {"module_lines", (PyCFunction)Handle_module_lines, METH_VARARGS,
     "module_lines(mod: bytes) -> [line index]"},
    {"builtin_modules", (PyCFunction)Handle_builtin_modules, METH_NOARGS,
     "builtin_modules() -> [str]"},
    {"kernel_symbol", (PyCFunction)Handle_kernel_symbol, METH_O,
     "kernel_symbol(address) -> KernelSymbol (%pS)"},
    {"module_known", (PyCFunction)Handle_module_known, METH_VARARGS,
     "module_known(mod: bytes) -> bool"},
    {"line_count", (PyCFunction)Handle_line_count, METH_NOARGS, "kallsyms lines"},
    {"line", (PyCFunction)Handle_line, METH_O, "line(index) -> Line"},
    {"lines", (PyCFunction)Handle_lines, METH_NOARGS, "lines() -> [Line]"},
    {"symbol", (PyCFunction)Handle_symbol, METH_VARARGS,
     "symbol(index, address) -> Symbolization of ADDRESS answered by line INDEX"},
    {"kallmodsyms", (PyCFunction)Handle_kallmodsyms, METH_NOARGS, "kallmodsyms() -> bytes"},
    {"refresh", (PyCFunction)Handle_refresh, METH_NOARGS,
     "refresh() -> (loaded, unloaded, reloaded) module names (kms_refresh)"},
    {"modules", (PyCFunction)Handle_modules, METH_NOARGS, "modules() -> [ModuleStats]"},
    {"module_ranges", (PyCFunction)Handle_module_ranges, METH_VARARGS,
     "module_ranges(mod: bytes) -> [ModuleRange]"},
    {"info", (PyCFunction)Handle_info, METH_NOARGS, "info() -> Info"},
    {"warnings", (PyCFunction)Handle_warnings, METH_NOARGS,
     "warnings() -> (the load's warning, [each loaded module's])"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kmodsyms.binding._kms.Handle",
    .tp_basicsize = sizeof(Handle),
    .tp_dealloc = (destructor)Handle_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A loaded libkmodsyms handle (kms_load_opts).",
    .tp_methods = Handle_methods,
    .tp_init = (initproc)Handle_init,
    .tp_new = PyType_GenericNew,
};

/* data_kind(head: bytes) -> (phrase or None, compressed): kms_data_kind() */
static PyObject *data_kind(PyObject *mod, PyObject *arg)
{
    (void)mod;
    char *data;
    Py_ssize_t len;
    int compressed;
    if (PyBytes_AsStringAndSize(arg, &data, &len) < 0)
        return NULL;
    const char *what = kms_data_kind(data, (size_t)len, &compressed);
    if (!what)
        return Py_BuildValue("(OO)", Py_None, Py_False);
    return Py_BuildValue("(sO)", what, compressed ? Py_True : Py_False);
}

/* json_string(s: bytes) -> str: S as a JSON string (kms_format_json_string()) */
static PyObject *json_string(PyObject *mod, PyObject *arg)
{
    (void)mod;
    char *data, stack[256];
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(arg, &data, &len) < 0)
        return NULL;
    size_t n = kms_format_json_string(data, (size_t)len, stack, sizeof stack);
    if (n < sizeof stack)
        return text(stack, n);
    char *buf = PyMem_Malloc(n + 1);
    if (!buf)
        return PyErr_NoMemory();
    kms_format_json_string(data, (size_t)len, buf, n + 1);
    PyObject *out = text(buf, n);
    PyMem_Free(buf);
    return out;
}

static PyMethodDef module_methods[] = {
    {"data_kind", data_kind, METH_O,
     "data_kind(head: bytes) -> (what, compressed): what an input that is not text is "
     "(kms_data_kind), (None, False) for text"},
    {"json_string", json_string, METH_O,
     "json_string(s: bytes) -> str: S as a JSON string (kms_format_json_string)"},
    {"attribute_at_link", kmsp_attribute_at_link, METH_VARARGS,
     "attribute_at_link(syms, sysmap, nlines) -> (entry, section, ambiguous): the build's "
     "attribution of System.map's lines (R20-R25), as int32, int32 and uint8 columns"},
    {"majority", kmsp_majority, METH_VARARGS,
     "majority(votes, bounds) -> (won, winner, most): R11's vote over each run of VOTES "
     "(uint64, reordered) that BOUNDS (uint64) delimits: uint8, uint64 and uint64 columns"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kms_module = {
    PyModuleDef_HEAD_INIT, "_kms", "libkmodsyms, bound for Python.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kms(void)
{
    PyObject *m;
    if (PyType_Ready(&HandleType) < 0)
        return NULL;
    if (!(m = PyModule_Create(&kms_module)))
        return NULL;
    kmsp_KmsError = PyErr_NewException("kmodsyms.binding._kms.Error", NULL, NULL);
    if (!kmsp_KmsError || PyModule_AddObject(m, "Error", Py_NewRef(kmsp_KmsError)) < 0 ||
        PyModule_AddObject(m, "Handle", Py_NewRef((PyObject *)&HandleType)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "LOAD_FORCE", KMS_LOAD_FORCE);
    PyModule_AddIntConstant(m, "LOAD_LIVE", KMS_LOAD_LIVE);
    PyModule_AddIntConstant(m, "LOAD_NO_MODULES", KMS_LOAD_NO_MODULES);
    PyModule_AddIntConstant(m, "LOAD_FALLBACK", KMS_LOAD_FALLBACK);
    PyModule_AddIntConstant(m, "E_NO_SYMS", KMS_E_NO_SYMS);
    PyModule_AddStringConstant(m, "FORCE_WORD", KMS_FORCE_WORD);
    PyModule_AddStringConstant(m, "MODULES_DIR_WORD", KMS_MODULES_DIR_WORD);
    PyModule_AddIntConstant(m, "E_ARG", KMS_E_ARG);
    PyModule_AddIntConstant(m, "E_STALE", KMS_E_STALE);
    PyModule_AddIntConstant(m, "E_IO", KMS_E_IO);
    PyModule_AddIntConstant(m, "RESOLVE_BATCH", KMS_RESOLVE_BATCH);
    PyModule_AddIntConstant(m, "FORMAT_VERBOSE", KMS_FORMAT_VERBOSE);
    PyModule_AddIntConstant(m, "FORMAT_DTRACE", KMS_FORMAT_DTRACE);
    PyModule_AddIntConstant(m, "FORMAT_KERNEL", KMS_FORMAT_KERNEL);
    PyModule_AddIntConstant(m, "FORMAT_JSON", KMS_FORMAT_JSON);
    return m;
}
