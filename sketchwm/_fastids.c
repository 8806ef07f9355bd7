/* Token-id lists -> one flat int64 buffer, the hot path of Detector.detect_ids (sketchwm/batching.py);
 * and keyed_bits_into, the keyed PRF of sketchwm/prf.py over an int64 buffer (at the end of the file).
 *
 * flatten_into(lists, out, nthreads=1): lists is a Python list of B lists of ints, out a writable
 * C-contiguous buffer of int64 with exactly sum(len(x)) items; returns (smallest, largest) id written,
 * or None when there are none (the range check of the detector then needs no second pass). Each int is read without a Python-level
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
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The hot loops below are compiled three times on x86-64 (GCC: AVX-512 as in x86-64-v4, AVX2, and
 * the baseline SSE2; clang: AVX2 and the baseline) and the CPU's best is chosen when the module loads.
 * Only integer loops are cloned, so every clone gives the same bits. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) && !defined(__INTEL_COMPILER)
#define FASTIDS_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#elif defined(__x86_64__) && defined(__linux__) && defined(__clang__)
#define FASTIDS_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FASTIDS_CLONES
#endif

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
static int flatten_general(PyObject *lists, int64_t *out, Py_ssize_t total, int64_t *mn, int64_t *mx) {
    Py_ssize_t k = 0;
    int64_t a = INT64_MAX, b = INT64_MIN;
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
            if (out[k] < a) a = out[k];
            if (out[k] > b) b = out[k];
        }
        Py_DECREF(x);
    }
    if (k != total) { PyErr_SetString(PyExc_ValueError, "out is longer than the lists' total length"); return -1; }
    *mn = a; *mx = b;
    return 0;
}

#ifdef FASTIDS_THREADS
typedef struct {
    PyObject **items;        /* the outer list's items */
    const Py_ssize_t *offs;  /* (B + 1,) start of each list in out */
    Py_ssize_t lo, hi;       /* lists [lo, hi) */
    int64_t *out;
    int general;             /* set when an item needs the general loop */
    int64_t mn, mx;          /* smallest and largest id read */
} span_t;

static void *read_span(void *arg) {
    span_t *s = (span_t *)arg;
    int64_t a = INT64_MAX, b = INT64_MIN;
    for (Py_ssize_t i = s->lo; i < s->hi; i++) {
        PyObject **it = ((PyListObject *)s->items[i])->ob_item;
        Py_ssize_t n = s->offs[i + 1] - s->offs[i];
        int64_t *o = s->out + s->offs[i];
        for (Py_ssize_t j = 0; j < n; j++) {
            if (!read_compact(it[j], o + j)) { s->general = 1; return NULL; }
            if (o[j] < a) a = o[j];
            if (o[j] > b) b = o[j];
        }
    }
    s->mn = a; s->mx = b;
    return NULL;
}

/* The compact-int fast path on nthreads threads (the caller one of them). 1: all read; 0: the general
 * loop is needed (an item that is not a compact exact int, or a thread could not start). */
static int flatten_threads(PyObject *lists, int64_t *out, const Py_ssize_t *offs, int nthreads, int64_t *mn,
                           int64_t *mx) {
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
        spans[t] = (span_t){((PyListObject *)lists)->ob_item, offs, lo, hi, out, 0, INT64_MAX, INT64_MIN};
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
    *mn = INT64_MAX; *mx = INT64_MIN;
    for (int t = 0; t < nthreads; t++) {
        if (spans[t].mn < *mn) *mn = spans[t].mn;
        if (spans[t].mx > *mx) *mx = spans[t].mx;
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
    int64_t mn = INT64_MAX, mx = INT64_MIN;
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
        if (all_lists && offs[B] == total) done = flatten_threads(lists, out, offs, nthreads, &mn, &mx);
        PyMem_Free(offs);
    }
#endif
    int rc = done ? 0 : flatten_general(lists, out, total, &mn, &mx);
    PyBuffer_Release(&buf);
    if (rc) return NULL;
    if (total == 0) Py_RETURN_NONE;
    return Py_BuildValue("(LL)", (long long)mn, (long long)mx);
}

/* keyed_bits_into(counter, out, seed_lo, seed_hi, stream_word): the keyed PRF of sketchwm/prf.py
 * (keyed_bits) over a C-contiguous int64 buffer of counters into an int64 buffer of the same length,
 * bit for bit: four rounds of mix32 (multiply-xorshift on 32-bit words; the torch version keeps the
 * words in int64 and masks, which is the same arithmetic modulo 2**32). seed_lo/seed_hi are the seed's
 * 32-bit halves, stream_word = (stream * 0x1E3779B9) mod 2**32. Raises ValueError on a size mismatch
 * or a buffer that is not C-contiguous int64. Releases the GIL while it runs. */
static inline uint32_t mix32_u(uint32_t x) {
    x = ((x >> 16) ^ x) * 0x45D9F3Bu;
    x = ((x >> 16) ^ x) * 0x119DE1F3u;
    x = ((x >> 16) ^ x) * 0x45D9F3Bu;
    return (x >> 16) ^ x;
}

/* sketchwm.prf.keyed_bits of one 64-bit counter under the seed halves and the stream word. */
static inline uint32_t keyed_bits_u(uint64_t c, uint32_t l32, uint32_t h32, uint32_t s32) {
    uint32_t x = mix32_u((uint32_t)c ^ l32);
    x = mix32_u(x ^ (uint32_t)(c >> 32) ^ s32);
    x = mix32_u(x ^ h32);
    return mix32_u(x + 0x1E3779B9u);
}

/* The keyed PRF of n counters into out (pass 2 of green_counts): no branch, so the compiler
 * vectorises it (FASTIDS_CLONES: 8 or 16 lanes of 32-bit multiplies where the CPU has AVX2 or AVX-512;
 * the baseline SSE2 has no 32-bit vector multiply). Same bits. */
FASTIDS_CLONES static void keyed_bits_span(const uint64_t *c, uint32_t *out, Py_ssize_t n, uint32_t l32, uint32_t h32, uint32_t s32) {
    for (Py_ssize_t i = 0; i < n; i++) out[i] = keyed_bits_u(c[i], l32, h32, s32);
}

static PyObject *keyed_bits_into(PyObject *self, PyObject *args) {
    Py_buffer cin, cout;
    unsigned long long lo, hi, sw;
    if (!PyArg_ParseTuple(args, "y*w*KKK", &cin, &cout, &lo, &hi, &sw)) return NULL;
    if (cin.itemsize != 8 || cout.itemsize != 8 || cin.len != cout.len || !PyBuffer_IsContiguous(&cin, 'C')
        || !PyBuffer_IsContiguous(&cout, 'C')) {
        PyBuffer_Release(&cin);
        PyBuffer_Release(&cout);
        PyErr_SetString(PyExc_ValueError, "counter and out must be C-contiguous int64 buffers of one length");
        return NULL;
    }
    const uint64_t *c = (const uint64_t *)cin.buf;
    int64_t *o = (int64_t *)cout.buf;
    Py_ssize_t n = cin.len / 8;
    uint32_t l32 = (uint32_t)lo, h32 = (uint32_t)hi, s32 = (uint32_t)sw;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) o[i] = (int64_t)keyed_bits_u(c[i], l32, h32, s32);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&cin);
    PyBuffer_Release(&cout);
    Py_RETURN_NONE;
}

/* The passes shared by green_counts and gumbel_scores over B texts of N positions: for every valid
 * position j whose context positions j + o (o in offsets, one or two) lie inside [0, N) and are valid,
 * the context hash h (sum, or ordered: sum of x_{j+o_k} V^k), the pair counter h*V + x_j, its keyed PRF
 * bits u = keyed_bits(counter), and whether it is the first occurrence of the counter in the text (an
 * open-addressing set per text, in a third pass after the counters and their PRF bits are computed for
 * the whole text). mode 0 (green): g[b] counts the first occurrences with (u + 0.5) / 2**32 < gamma;
 * mode 1 (gumbel): s[b] = sum of -log(1 - (u + 0.5) / 2**32) over the first occurrences whose token t
 * has keep[t] != 0 (keep NULL: every token), computed as -log of their product (renormalised by frexp). n[b] counts the pairs scored. Returns 0, or 3 when out of
 * memory. Called with the GIL released. */
static int pair_stats(const int64_t *ids, const uint8_t *valid, Py_ssize_t B, Py_ssize_t N, Py_ssize_t K,
                      const long *o, int ordered, long long V, uint32_t l32, uint32_t h32, uint32_t s32, int mode,
                      double gamma, const uint8_t *keep, Py_ssize_t keep_len, int64_t *g, double *s, int64_t *n) {
    size_t cap = 16;
    while (cap < (size_t)(4 * N + 4)) cap <<= 1;
    uint64_t *set = (uint64_t *)PyMem_RawMalloc(cap * sizeof(uint64_t));
    uint32_t *stamp = (uint32_t *)PyMem_RawCalloc(cap, sizeof(uint32_t));
    uint64_t *keys = (uint64_t *)PyMem_RawMalloc((N + 1) * sizeof(uint64_t));
    uint32_t *bits = (uint32_t *)PyMem_RawMalloc((N + 1) * sizeof(uint32_t));
    uint8_t *okm = (uint8_t *)PyMem_RawMalloc(N + 1);
    int bad = set == NULL || stamp == NULL || keys == NULL || bits == NULL || okm == NULL;
    for (Py_ssize_t b = 0; b < B && !bad; b++) {
        const int64_t *x = ids + b * N;
        const uint8_t *v = valid + b * N;
        uint32_t st = (uint32_t)(b + 1);  /* a new stamp per text empties the set without clearing it */
        if (st == 0) { memset(stamp, 0, cap * sizeof(uint32_t)); st = 1; }
        int64_t gb = 0, nb = 0;
        double sb = 0.0, prod = 1.0;  /* mode 1: S = -log prod(1 - u), the product kept as prod * 2**pexp */
        int pexp = 0, pcount = 0;
        /* pass 1: each position's pair counter and whether its context is whole */
        if (K == 1) {  /* one neighbour (the default context {-1}; h = its id either way): no inner loop */
            Py_ssize_t lo_j = o[0] < 0 ? -o[0] : 0, hi_j = o[0] > 0 ? N - o[0] : N;
            if (lo_j > N) lo_j = N;
            if (hi_j < lo_j) hi_j = lo_j;
            for (Py_ssize_t j = 0; j < lo_j; j++) { okm[j] = 0; keys[j] = 0; }
            for (Py_ssize_t j = hi_j; j < N; j++) { okm[j] = 0; keys[j] = 0; }
            for (Py_ssize_t j = lo_j; j < hi_j; j++) {
                okm[j] = (uint8_t)(v[j] & v[j + o[0]]);
                keys[j] = (uint64_t)(x[j + o[0]] * V + x[j]);
            }
        } else {
            for (Py_ssize_t j = 0; j < N; j++) {
                int64_t h = 0, w = 1;
                int ok = v[j] != 0;
                for (Py_ssize_t k = 0; k < K && ok; k++) {
                    Py_ssize_t q = j + o[k];
                    if (q < 0 || q >= N || !v[q]) { ok = 0; break; }
                    h += ordered ? x[q] * w : x[q];
                    w *= V;
                }
                okm[j] = (uint8_t)ok;
                keys[j] = (uint64_t)(h * V + x[j]);
            }
        }
        /* pass 2: the keyed PRF of every counter (keyed_bits_span: vectorised; the serial chain of
         * four mix32 rounds per counter is what bounded a one-pass loop) */
        keyed_bits_span(keys, bits, N, l32, h32, s32);
        /* pass 3: first occurrences (open addressing; the PRF bits are the slot hash) and the statistic */
        for (Py_ssize_t j = 0; j < N; j++) {
            if (!okm[j]) continue;
            uint64_t key = keys[j];
            size_t slot = (size_t)(bits[j] & (cap - 1));
            int seen = 0;
            while (stamp[slot] == st) {
                if (set[slot] == key) { seen = 1; break; }
                slot = (slot + 1) & (cap - 1);
            }
            if (seen) continue;
            stamp[slot] = st;
            set[slot] = key;
            double u = ((double)bits[j] + 0.5) / 4294967296.0;
            if (mode == 0) {
                nb++;
                if (u < gamma) gb++;
            } else if (keep == NULL || (x[j] >= 0 && x[j] < keep_len && keep[x[j]])) {
                nb++;
                /* 1 - u is exact in double (u has 33 significant bits) and at least 2**-33, so 30 factors
                 * stay above 2**-990: renormalise every 30 (one log per text instead of one log1p per pair) */
                prod *= 1.0 - u;
                if (++pcount == 30) {
                    int e;
                    prod = frexp(prod, &e);
                    pexp += e;
                    pcount = 0;
                }
            }
        }
        if (mode == 1 && nb > 0) {
            int e;
            prod = frexp(prod, &e);
            sb = -(log(prod) + (double)(pexp + e) * 0.69314718055994530942);
        }
        if (g != NULL) g[b] = gb;
        if (s != NULL) s[b] = sb;
        n[b] = nb;
    }
    PyMem_RawFree(set);
    PyMem_RawFree(stamp);
    PyMem_RawFree(keys);
    PyMem_RawFree(bits);
    PyMem_RawFree(okm);
    return bad ? 3 : 0;
}

/* Reads the one or two context offsets of a tuple into o; returns 0, or -1 with an exception set. */
static int read_offsets(PyObject *offs, long *o) {
    Py_ssize_t K = PyTuple_GET_SIZE(offs);
    if (K < 1 || K > 2) {
        PyErr_SetString(PyExc_ValueError, "pair statistics: not 1-2 offsets");
        return -1;
    }
    for (Py_ssize_t k = 0; k < K; k++) {
        o[k] = PyLong_AsLong(PyTuple_GET_ITEM(offs, k));
        if (o[k] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

/* green_counts(ids, valid, B, N, offsets, ordered, V, seed_lo, seed_hi, stream_word, gamma, g, n): the
 * detector of the context-keyed green lists (sketchwm_baselines.green.ContextGreenListScheme.score_ids)
 * per text (pair_stats, mode 0): the distinct pair count n and its green count g, counted green when
 * (keyed_bits(counter) + 0.5) / 2**32 < gamma in double precision -- the same operations as the torch
 * path, so the same counts. ids: int64 (B*N), valid: uint8 (B*N), g and n: writable int64 (B). Raises
 * ValueError on wrong buffer sizes or more than two offsets. */
static PyObject *green_counts(PyObject *self, PyObject *args) {
    Py_buffer bid, bva, bg, bn;
    Py_ssize_t B, N;
    PyObject *offs;
    int ordered;
    long long V;
    unsigned long long lo, hi, sw;
    double gamma;
    if (!PyArg_ParseTuple(args, "y*y*nnO!pLKKKdw*w*", &bid, &bva, &B, &N, &PyTuple_Type, &offs, &ordered, &V, &lo,
                          &hi, &sw, &gamma, &bg, &bn))
        return NULL;
    long o[2] = {0, 0};
    int rc = 1;
    if (read_offsets(offs, o) == 0) {
        if (bid.len != B * N * 8 || bva.len != B * N || bg.len != B * 8 || bn.len != B * 8) {
            PyErr_SetString(PyExc_ValueError, "green_counts: wrong buffer sizes or not 1-2 offsets");
        } else {
            Py_BEGIN_ALLOW_THREADS
            rc = pair_stats((const int64_t *)bid.buf, (const uint8_t *)bva.buf, B, N, PyTuple_GET_SIZE(offs), o, ordered,
                            V, (uint32_t)lo, (uint32_t)hi, (uint32_t)sw, 0, gamma, NULL, 0, (int64_t *)bg.buf, NULL,
                            (int64_t *)bn.buf);
            Py_END_ALLOW_THREADS
            if (rc == 3) PyErr_NoMemory();
        }
    }
    PyBuffer_Release(&bid); PyBuffer_Release(&bva); PyBuffer_Release(&bg); PyBuffer_Release(&bn);
    if (rc != 0) return NULL;
    Py_RETURN_NONE;
}

/* gumbel_scores(ids, valid, B, N, offsets, ordered, V, seed_lo, seed_hi, stream_word, keep, s, n): the
 * detector of Aaronson's keyed sampling (sketchwm_baselines.aar_gumbel.AARGumbelScheme.score_ids,
 * context keying) per text (pair_stats, mode 1): S = sum of -log1p(-r) over the distinct (hash, token)
 * pairs whose token t has keep[t] != 0 (keep: uint8 of length V, or empty for every token), r =
 * (keyed_bits(counter) + 0.5) / 2**32, and their number n -- the torch path's operations (its sum may
 * differ in the last bits: another summation order). s: writable float64 (B), n: writable int64 (B).
 * Raises ValueError on wrong buffer sizes or more than two offsets. */
static PyObject *gumbel_scores(PyObject *self, PyObject *args) {
    Py_buffer bid, bva, bk, bs, bn;
    Py_ssize_t B, N;
    PyObject *offs;
    int ordered;
    long long V;
    unsigned long long lo, hi, sw;
    if (!PyArg_ParseTuple(args, "y*y*nnO!pLKKKy*w*w*", &bid, &bva, &B, &N, &PyTuple_Type, &offs, &ordered, &V, &lo,
                          &hi, &sw, &bk, &bs, &bn))
        return NULL;
    long o[2] = {0, 0};
    int rc = 1;
    if (read_offsets(offs, o) == 0) {
        if (bid.len != B * N * 8 || bva.len != B * N || bs.len != B * 8 || bn.len != B * 8
            || (bk.len != 0 && bk.len != V)) {
            PyErr_SetString(PyExc_ValueError, "gumbel_scores: wrong buffer sizes");
        } else {
            const uint8_t *keep = bk.len ? (const uint8_t *)bk.buf : NULL;
            Py_BEGIN_ALLOW_THREADS
            rc = pair_stats((const int64_t *)bid.buf, (const uint8_t *)bva.buf, B, N, PyTuple_GET_SIZE(offs), o, ordered,
                            V, (uint32_t)lo, (uint32_t)hi, (uint32_t)sw, 1, 0.0, keep, bk.len, NULL, (double *)bs.buf,
                            (int64_t *)bn.buf);
            Py_END_ALLOW_THREADS
            if (rc == 3) PyErr_NoMemory();
        }
    }
    PyBuffer_Release(&bid); PyBuffer_Release(&bva); PyBuffer_Release(&bk); PyBuffer_Release(&bs); PyBuffer_Release(&bn);
    if (rc != 0) return NULL;
    Py_RETURN_NONE;
}

/* The texts of distinct_sums, COLS columns (KK, or a constant equal to it: the column loops are then
 * unrolled and the ACC int32 accumulators live in vector registers). Branch-free: an invalid or
 * out-of-range id reads as V (the zero padding row), and a copy already seen in this text (stamp[v] ==
 * its index) adds its row masked to zero. The branch this replaces (first copy or not) is unpredictable
 * on text, whose ids repeat at random. */
#define DISTINCT_ROWS(NAME, ACC, COLS)                                                                      \
FASTIDS_CLONES static void NAME(const int64_t *ids, const uint8_t *valid, const int64_t *rows, Py_ssize_t B,   \
                 Py_ssize_t N, Py_ssize_t V, const int8_t *tab, Py_ssize_t KK, const int8_t *keep, int64_t *T,     \
                 int64_t *n, int32_t *stamp) {                                                                \
    int32_t acc[ACC];                                                                                         \
    int16_t part[ACC];                                                                                        \
    for (Py_ssize_t b = 0; b < B; b++) {  /* output b: text rows[b] of ids (rows NULL: text b) */           \
        Py_ssize_t t = rows ? (Py_ssize_t)rows[b] : b;                                                        \
        const int64_t *x = ids + t * N;                                                                       \
        const uint8_t *ok = valid + t * N;                                                                    \
        int32_t kept = 0;                                                                                     \
        for (Py_ssize_t k = 0; k < (COLS); k++) acc[k] = 0;                                                   \
        for (Py_ssize_t j0 = 0; j0 < N; j0 += 256) {  /* 256 rows of |entry| <= 127 fit int16 partial sums */ \
            Py_ssize_t j1 = j0 + 256 < N ? j0 + 256 : N;                                                      \
            for (Py_ssize_t k = 0; k < (COLS); k++) part[k] = 0;                                              \
            for (Py_ssize_t j = j0; j < j1; j++) {                                                            \
                int64_t v = x[j];                                                                             \
                v = (ok[j] && v >= 0 && v < V) ? v : V;                                                       \
                int8_t m = (int8_t)-(stamp[v] != (int32_t)b); /* 0xff on a first copy, else 0 */             \
                stamp[v] = (int32_t)b;                                                                        \
                const int8_t *row = tab + v * (COLS);                                                         \
                for (Py_ssize_t k = 0; k < (COLS); k++) part[k] = (int16_t)(part[k] + (int8_t)(row[k] & m)); \
                kept += keep[v] & m;                                                                          \
            }                                                                                                 \
            for (Py_ssize_t k = 0; k < (COLS); k++) acc[k] += part[k];                                        \
        }                                                                                                     \
        for (Py_ssize_t k = 0; k < (COLS); k++) T[b * (COLS) + k] = acc[k];                                   \
        n[b] = kept;                                                                                          \
    }                                                                                                         \
}
DISTINCT_ROWS(distinct_rows_any, 4096, KK)
DISTINCT_ROWS(distinct_rows_16, 16, 16)
DISTINCT_ROWS(distinct_rows_32, 32, 32)
DISTINCT_ROWS(distinct_rows_48, 48, 48)

/* distinct_sums(ids, valid, B, N, V, table, K, keep, T, n[, rows]): per text, the sums of the K int8
 * columns of table ((V + 1) x K, row-major) and of keep (int8, V + 1) over the text's distinct valid
 * ids -- the presence statistic of K directions sharing one Count-Sketch
 * (sketchwm.components.distinct_token_sums with a 2-D table) in one pass (distinct_rows; K = 16, 32
 * and 48, a family's members, decoys or both, have their own unrolled loops). ids: int64 (B*N) in
 * [0, V) where valid; valid: uint8 (B*N); rows: int64 (R) indices in [0, B) of the texts to sum (absent
 * or empty: all B, R = B); T: writable int64 (R*K); n: writable int64 (R), in the order of rows.
 * Raises ValueError on wrong buffer sizes or a row outside [0, B), MemoryError. */
static PyObject *distinct_sums(PyObject *self, PyObject *args) {
    Py_buffer bid, bva, btab, bkeep, bT, bn, brows = {0};
    Py_ssize_t B, N, V, K;
    if (!PyArg_ParseTuple(args, "y*y*nnny*ny*w*w*|y*", &bid, &bva, &B, &N, &V, &btab, &K, &bkeep, &bT, &bn, &brows))
        return NULL;
    int rc = 0;
    const int64_t *rows = brows.buf != NULL && brows.len > 0 ? (const int64_t *)brows.buf : NULL;
    Py_ssize_t R = rows ? brows.len / 8 : B;
    int rows_ok = rows == NULL || brows.len % 8 == 0;
    for (Py_ssize_t r = 0; rows && rows_ok && r < R; r++) rows_ok = rows[r] >= 0 && rows[r] < B;
    if (bid.len != B * N * 8 || bva.len != B * N || btab.len != (V + 1) * K || bkeep.len != V + 1 ||
        bT.len != R * K * 8 || bn.len != R * 8 || K < 1 || K > 4096 || R >= 2147483647 || V >= 2147483647 ||
        !rows_ok) {
        PyErr_SetString(PyExc_ValueError, "distinct_sums: wrong buffer sizes or a row outside the texts");
        rc = 1;
    } else {
        Py_BEGIN_ALLOW_THREADS
        int32_t *stamp = (int32_t *)malloc(sizeof(int32_t) * (size_t)(V + 1));  /* the text each id was last seen in */
        if (stamp == NULL) {
            rc = 3;
        } else {
            const int64_t *ids = (const int64_t *)bid.buf;
            const uint8_t *valid = (const uint8_t *)bva.buf;
            const int8_t *tab = (const int8_t *)btab.buf, *keep = (const int8_t *)bkeep.buf;
            int64_t *T = (int64_t *)bT.buf, *n = (int64_t *)bn.buf;
            for (Py_ssize_t v = 0; v <= V; v++) stamp[v] = -1;
            if (K == 16) distinct_rows_16(ids, valid, rows, R, N, V, tab, 16, keep, T, n, stamp);
            else if (K == 32) distinct_rows_32(ids, valid, rows, R, N, V, tab, 32, keep, T, n, stamp);
            else if (K == 48) distinct_rows_48(ids, valid, rows, R, N, V, tab, 48, keep, T, n, stamp);
            else distinct_rows_any(ids, valid, rows, R, N, V, tab, K, keep, T, n, stamp);
        }
        free(stamp);
        Py_END_ALLOW_THREADS
        if (rc == 3) { PyErr_NoMemory(); }
    }
    PyBuffer_Release(&bid); PyBuffer_Release(&bva); PyBuffer_Release(&btab); PyBuffer_Release(&bkeep);
    PyBuffer_Release(&bT); PyBuffer_Release(&bn);
    if (brows.obj != NULL) PyBuffer_Release(&brows);
    if (rc != 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"flatten_into", flatten_into, METH_VARARGS,
     "flatten_into(lists, out, nthreads=1): write B lists of ints into an int64 buffer (nthreads > 1: read on that many threads)."},
    {"keyed_bits_into", keyed_bits_into, METH_VARARGS,
     "keyed_bits_into(counter, out, seed_lo, seed_hi, stream_word): sketchwm.prf.keyed_bits over an int64 buffer."},
    {"gumbel_scores", gumbel_scores, METH_VARARGS,
     "gumbel_scores(ids, valid, B, N, offsets, ordered, V, seed_lo, seed_hi, stream_word, keep, s, n): Aaronson's score over distinct (context, token) pairs of kept tokens, per text."},
    {"distinct_sums", distinct_sums, METH_VARARGS,
     "distinct_sums(ids, valid, B, N, V, table, K, keep, T, n[, rows]): sums of K int8 columns and of keep over each (selected) text's distinct ids."},
    {"green_counts", green_counts, METH_VARARGS,
     "green_counts(ids, valid, B, N, offsets, ordered, V, seed_lo, seed_hi, stream_word, gamma, g, n): "
     "green and distinct (context hash, token) pair counts per text."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastids", "Token-id lists to int64 in one C pass; the keyed PRF over int64 buffers; the green-list counts; Aaronson's keyed-sampling score.", -1, methods};

PyMODINIT_FUNC PyInit__fastids(void) { return PyModule_Create(&module); }
