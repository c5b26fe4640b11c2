// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * What the build runs of the library (libkmodsyms/kms_build.h): R62's
 * attribution of System.map's lines and R11's vote, for
 * src/kmodsyms/scan/layout/.
 */
#include "_kms.h"
#include "kms_build.h"

/* attribute_at_link(syms: bytes, sysmap: bytes-like, nlines) -> (entry, section, ambiguous):
 * the build's attribution (kmsi_attribute_at_link) of System.map's NLINES
 * lines against the file SYMS, as bytes: int32 entry and section per line
 * (-1 for none), and a byte per line, 1 where ambiguous.  Raises Error. */
PyObject *kmsp_attribute_at_link(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *syms;
    Py_buffer buf;
    Py_ssize_t nlines;
    kms_error err;
    int rc;
    if (!PyArg_ParseTuple(args, "yy*n", &syms, &buf, &nlines))
        return NULL;
    PyObject *entry = PyBytes_FromStringAndSize(NULL, nlines * 4);
    PyObject *section = PyBytes_FromStringAndSize(NULL, nlines * 4);
    PyObject *ambiguous = PyBytes_FromStringAndSize(NULL, nlines);
    if (!entry || !section || !ambiguous) {
        rc = -1;
    } else {
        int32_t *e = (int32_t *)PyBytes_AS_STRING(entry), *s = (int32_t *)PyBytes_AS_STRING(section);
        uint8_t *a = (uint8_t *)PyBytes_AS_STRING(ambiguous);
        Py_BEGIN_ALLOW_THREADS
        rc = kmsi_attribute_at_link(syms, buf.buf, (size_t)buf.len, e, s, a, (size_t)nlines, &err);
        Py_END_ALLOW_THREADS
        if (rc != KMS_OK)
            kmsp_raise(&err);
    }
    PyBuffer_Release(&buf);
    if (rc != KMS_OK) {
        Py_XDECREF(entry);
        Py_XDECREF(section);
        Py_XDECREF(ambiguous);
        return NULL;
    }
    return Py_BuildValue("(NNN)", entry, section, ambiguous);
}

/* majority(votes: writable uint64 buffer, bounds: uint64 buffer) -> (won, winner, most):
 * R11's vote (kmsi_majority) over each run VOTES[BOUNDS[k]..BOUNDS[k+1]),
 * for the build's search: per run a byte, 1 when one value has more votes
 * than any other, that value and the most votes any value has (uint64
 * each).  VOTES is reordered (each run sorted). */
PyObject *kmsp_majority(PyObject *mod, PyObject *args)
{
    (void)mod;
    Py_buffer votes, bounds;
    if (!PyArg_ParseTuple(args, "w*y*", &votes, &bounds))
        return NULL;
    size_t nruns = bounds.len >= 8 ? (size_t)bounds.len / 8 - 1 : 0, nvotes = (size_t)votes.len / 8;
    const uint64_t *bound = bounds.buf;
    PyObject *won = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)nruns);
    PyObject *winner = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)nruns * 8);
    PyObject *most = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)nruns * 8);
    int ok = won && winner && most;
    for (size_t k = 0; ok && k < nruns; k++)
        ok = bound[k] <= bound[k + 1] && bound[k + 1] <= nvotes;
    if (won && winner && most && !ok)
        PyErr_SetString(PyExc_ValueError, "majority: bounds outside the votes, or descending");
    for (size_t k = 0; ok && k < nruns; k++) {
        uint64_t w = 0;
        size_t m = 0;
        PyBytes_AS_STRING(won)[k] = (char)kmsi_majority((uint64_t *)votes.buf + bound[k],
                                                        bound[k + 1] - bound[k], &w, &m);
        memcpy(PyBytes_AS_STRING(winner) + 8 * k, &w, 8);
        memcpy(PyBytes_AS_STRING(most) + 8 * k, &(uint64_t){m}, 8);
    }
    PyBuffer_Release(&votes);
    PyBuffer_Release(&bounds);
    if (!ok) {
        Py_XDECREF(won);
        Py_XDECREF(winner);
        Py_XDECREF(most);
        return NULL;
    }
    return Py_BuildValue("(NNN)", won, winner, most);
}
