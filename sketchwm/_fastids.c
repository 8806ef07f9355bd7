/* Token-id lists -> one flat int64 buffer, the hot path of Detector.detect_ids (sketchwm/batching.py).
 *
 * flatten_into(lists, out): lists is a Python list of B lists of ints, out a writable C-contiguous
 * buffer of int64 with exactly sum(len(x)) items. Each int is read without a Python-level call
 * (compact ints directly, others through PyLong_AsLongLong, other integer types through __index__), so the cost is one pass over the
 * objects' memory; batching.flatten_ids falls back to array.array.fromlist where this module is
 * not built. Raises TypeError for a non-list or a non-int item, OverflowError for an int outside
 * int64, ValueError when the buffer's size is not the lists' total length.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static inline int read_int(PyObject *o, int64_t *v) {
    if (PyLong_CheckExact(o)) {
#if PY_VERSION_HEX >= 0x030C0000
        if (PyUnstable_Long_IsCompact((PyLongObject *)o)) { *v = PyUnstable_Long_CompactValue((PyLongObject *)o); return 0; }
#else
        Py_ssize_t s = Py_SIZE(o);
        if (s == 0) { *v = 0; return 0; }
        if (s == 1) { *v = (int64_t)((PyLongObject *)o)->ob_digit[0]; return 0; }
        if (s == -1) { *v = -(int64_t)((PyLongObject *)o)->ob_digit[0]; return 0; }
#endif
    } else if (!PyLong_Check(o)) {  /* numpy integers and other __index__ types, as array.array reads them */
        PyObject *i = PyNumber_Index(o);
        if (i == NULL) return -1;
        long long x = PyLong_AsLongLong(i);
        Py_DECREF(i);
        if (x == -1 && PyErr_Occurred()) return -1;
        *v = (int64_t)x;
        return 0;
    }
    long long x = PyLong_AsLongLong(o);
    if (x == -1 && PyErr_Occurred()) return -1;
    *v = (int64_t)x;
    return 0;
}

static PyObject *flatten_into(PyObject *self, PyObject *args) {
    PyObject *lists;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "O!w*", &PyList_Type, &lists, &buf)) return NULL;
    if (buf.itemsize != 8 || !PyBuffer_IsContiguous(&buf, 'C')) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "out must be a C-contiguous int64 buffer");
        return NULL;
    }
    int64_t *out = (int64_t *)buf.buf;
    Py_ssize_t total = buf.len / 8, k = 0;
    /* sizes are re-read on every step: an __index__ method may run Python code that changes the lists */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lists); i++) {
        PyObject *x = PyList_GET_ITEM(lists, i);
        if (!PyList_Check(x)) {
            PyErr_Format(PyExc_TypeError, "text %zd: token ids must be a list, got %.100s", i, Py_TYPE(x)->tp_name);
            goto fail;
        }
        Py_INCREF(x);
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(x); j++, k++) {
            if (k >= total) { PyErr_SetString(PyExc_ValueError, "out is shorter than the lists' total length"); Py_DECREF(x); goto fail; }
            if (read_int(PyList_GET_ITEM(x, j), out + k)) { Py_DECREF(x); goto fail; }
        }
        Py_DECREF(x);
    }
    PyBuffer_Release(&buf);
    if (k != total) { PyErr_SetString(PyExc_ValueError, "out is longer than the lists' total length"); return NULL; }
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&buf);
    return NULL;
}

static PyMethodDef methods[] = {
    {"flatten_into", flatten_into, METH_VARARGS, "flatten_into(lists, out): write B lists of ints into an int64 buffer."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastids", "Token-id lists to int64 in one C pass.", -1, methods};

PyMODINIT_FUNC PyInit__fastids(void) { return PyModule_Create(&module); }
