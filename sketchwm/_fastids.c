/* Token-id lists -> one flat int64 buffer, the hot path of Detector.detect_ids (sketchwm/batching.py).
 *
 * flatten_into(lists, out, nthreads=1): lists is a Python list of B lists of ints, out a writable
 * C-contiguous buffer of int64 with exactly sum(len(x)) items. Each int is read without a Python-level
 * call (compact ints directly, others through PyLong_AsLongLong, other integer types through
 * __index__), so the cost is one pass over the objects' memory; batching.flatten_ids falls back to
 * array.array.fromlist where this module is not built. Raises TypeError for a non-list or a non-int
 * item, OverflowError for an int outside int64, ValueError when the buffer's size is not the lists'
 * total length.
 *
 * Reading a million ints is bound by memory latency (one 28-32 byte object per id), so with nthreads > 1
 * and enough ids the read is split over nthreads POSIX threads by ranges of lists. The calling thread
 * keeps the GIL throughout, so no Python code runs and no object can change while the helpers read;
 * the helpers only read memory (no reference counts, no C-API calls) and read only exact ints that are
 * compact. If any item is anything else (a bool, a numpy integer, a multi-digit int), the whole input
 * is read again by the single-threaded loop below, which handles every case and raises the errors.
 * Builds without the GIL (Py_GIL_DISABLED) or without pthreads use the single-threaded loop only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#if !defined(_WIN32) && !defined(Py_GIL_DISABLED)
#include <pthread.h>
#define FASTIDS_THREADS 1
#endif

/* A compact exact int's value into *v: 1 if read, 0 if the item needs the general path. Memory reads only. */
static inline int read_compact(PyObject *o, int64_t *v) {
    if (!PyLong_CheckExact(o)) return 0;
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)o)) { *v = PyUnstable_Long_CompactValue((PyLongObject *)o); return 1; }
    return 0;
#else
    Py_ssize_t s = Py_SIZE(o);
    if (s == 0) { *v = 0; return 1; }
    if (s == 1) { *v = (int64_t)((PyLongObject *)o)->ob_digit[0]; return 1; }
    if (s == -1) { *v = -(int64_t)((PyLongObject *)o)->ob_digit[0]; return 1; }
    return 0;
#endif
}

static inline int read_int(PyObject *o, int64_t *v) {
    if (read_compact(o, v)) return 0;
    if (!PyLong_Check(o)) {  /* numpy integers and other __index__ types, as array.array reads them */
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

/* The general loop: every integer type, errors raised; the GIL held. 0 on success, -1 with an exception set. */
static int flatten_general(PyObject *lists, int64_t *out, Py_ssize_t total) {
    Py_ssize_t k = 0;
    /* sizes are re-read on every step: an __index__ method may run Python code that changes the lists */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lists); i++) {
        PyObject *x = PyList_GET_ITEM(lists, i);
        if (!PyList_Check(x)) {
            PyErr_Format(PyExc_TypeError, "text %zd: token ids must be a list, got %.100s", i, Py_TYPE(x)->tp_name);
            return -1;
        }
        Py_INCREF(x);
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(x); j++, k++) {
            if (k >= total) { PyErr_SetString(PyExc_ValueError, "out is shorter than the lists' total length"); Py_DECREF(x); return -1; }
            if (read_int(PyList_GET_ITEM(x, j), out + k)) { Py_DECREF(x); return -1; }
        }
        Py_DECREF(x);
    }
    if (k != total) { PyErr_SetString(PyExc_ValueError, "out is longer than the lists' total length"); return -1; }
    return 0;
}

#ifdef FASTIDS_THREADS
typedef struct {
    PyObject **items;        /* the outer list's items */
    const Py_ssize_t *offs;  /* (B + 1,) start of each list in out */
    Py_ssize_t lo, hi;       /* lists [lo, hi) */
    int64_t *out;
    int general;             /* set when an item needs the general loop */
} span_t;

static void *read_span(void *arg) {
    span_t *s = (span_t *)arg;
    for (Py_ssize_t i = s->lo; i < s->hi; i++) {
        PyObject **it = ((PyListObject *)s->items[i])->ob_item;
        Py_ssize_t n = s->offs[i + 1] - s->offs[i];
        int64_t *o = s->out + s->offs[i];
        for (Py_ssize_t j = 0; j < n; j++)
            if (!read_compact(it[j], o + j)) { s->general = 1; return NULL; }
    }
    return NULL;
}

/* The compact-int fast path on nthreads threads (the caller one of them). 1: all read; 0: the general
 * loop is needed (an item that is not a compact exact int, or a thread could not start). */
static int flatten_threads(PyObject *lists, int64_t *out, const Py_ssize_t *offs, int nthreads) {
    Py_ssize_t B = PyList_GET_SIZE(lists), total = offs[B];
    span_t spans[64];
    pthread_t tids[64];
    int started[64] = {0};
    if (nthreads > 64) nthreads = 64;
    Py_ssize_t lo = 0;
    for (int t = 0; t < nthreads; t++) {  /* split at the list where the t+1-th share of the ids ends */
        Py_ssize_t target = total / nthreads * (t + 1), hi = lo;
        if (t == nthreads - 1) hi = B;
        else while (hi < B && offs[hi] < target) hi++;
        spans[t] = (span_t){((PyListObject *)lists)->ob_item, offs, lo, hi, out, 0};
        lo = hi;
    }
    for (int t = 1; t < nthreads; t++)
        started[t] = pthread_create(&tids[t], NULL, read_span, &spans[t]) == 0;
    read_span(&spans[0]);
    int ok = !spans[0].general;
    for (int t = 1; t < nthreads; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        else read_span(&spans[t]);
        ok = ok && !spans[t].general;
    }
    return ok;
}
#endif

static PyObject *flatten_into(PyObject *self, PyObject *args) {
    PyObject *lists;
    Py_buffer buf;
    int nthreads = 1;
    if (!PyArg_ParseTuple(args, "O!w*|i", &PyList_Type, &lists, &buf, &nthreads)) return NULL;
    if (buf.itemsize != 8 || !PyBuffer_IsContiguous(&buf, 'C')) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "out must be a C-contiguous int64 buffer");
        return NULL;
    }
    int64_t *out = (int64_t *)buf.buf;
    Py_ssize_t total = buf.len / 8;
    int done = 0;
#ifdef FASTIDS_THREADS
    Py_ssize_t B = PyList_GET_SIZE(lists);
    if (nthreads > 1 && total >= (1 << 16) && B > 1) {
        Py_ssize_t *offs = (Py_ssize_t *)PyMem_Malloc((size_t)(B + 1) * sizeof(Py_ssize_t));
        if (offs == NULL) { PyBuffer_Release(&buf); return PyErr_NoMemory(); }
        int all_lists = 1;
        offs[0] = 0;
        for (Py_ssize_t i = 0; i < B && all_lists; i++) {
            PyObject *x = PyList_GET_ITEM(lists, i);
            all_lists = PyList_Check(x);
            if (all_lists) offs[i + 1] = offs[i] + PyList_GET_SIZE(x);
        }
        if (all_lists && offs[B] == total) done = flatten_threads(lists, out, offs, nthreads);
        PyMem_Free(offs);
    }
#endif
    int rc = done ? 0 : flatten_general(lists, out, total);
    PyBuffer_Release(&buf);
    if (rc) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"flatten_into", flatten_into, METH_VARARGS,
     "flatten_into(lists, out, nthreads=1): write B lists of ints into an int64 buffer (nthreads > 1: read on that many threads)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastids", "Token-id lists to int64 in one C pass.", -1, methods};

PyMODINIT_FUNC PyInit__fastids(void) { return PyModule_Create(&module); }
