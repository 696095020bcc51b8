/* onnxviz.runtime.native._topk: TopK over the rows of a float32 matrix.
 *
 *   topk(x, values, indices, rows, n, k, largest) -> None
 *
 * x holds rows * n float32 values (C-contiguous), values rows * k float32 and indices
 * rows * k int64.  For each row: its k best values, best first, and their positions.
 * "Best" is TopK's order as kernels/tensor_misc.py's numpy path gives it: with largest,
 * greater values first, with largest = 0 smaller ones; NaN counts above every number
 * (first with largest, last without: numpy sorts NaN to the end); equal values (-0 and +0
 * are equal), and NaNs among themselves, by lower position first.  So the same values and
 * positions as that path, with no arithmetic: only comparisons.
 *
 * Why: the numpy path takes several whole passes per call (a partition, masks, counts,
 * a nonzero, a sort of the winners, two gathers): [8, 1000] with k = 10 took 121 us,
 * onnxruntime 13.  Here each row keeps its k best so far in a heap whose root is the
 * worst of them: a value that does not beat the root (most of them, once the heap is
 * full) costs one comparison.  Then the heap is sorted best first.  O(n log k) a row.
 * The order is one integer per entry (`score`), so every comparison is one instruction:
 * with the floats compared (NaN tests, then the positions of equal values), 1000 rows of
 * 16 with k = 10 took 330 us, onnxruntime 122. 
 *
 * Levels (native/__init__.py): one plain-C body; the short rows' counts (row_ranks)
 * compiled for each level's vectors.  Every level gives the same answer. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <stdint.h>
#include <string.h>

static int level = 0;

/* A value's place in TopK's order as an unsigned integer, greater for greater values:
 * the float's bits made monotonic (a negative's bits inverted, a positive's sign bit
 * set), -0 as +0, and every NaN above +inf. */
static inline uint32_t order_key(float v) {
    if (v != v) return 0xffffffffu;
    if (v == 0.0f) return 0x80000000u;
    uint32_t u;
    memcpy(&u, &v, 4);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* An entry's score, greater for an entry that comes first: its key (inverted when the
 * smaller values come first, so NaN is last there), then the lower position.  Every
 * entry of a row has its own score, so comparing scores is the whole order: one integer
 * comparison where the float test needed four branches. */
static inline uint64_t score(float v, Py_ssize_t i, int largest) {
    const uint32_t key = largest ? order_key(v) : ~order_key(v);
    return ((uint64_t)key << 32) | (uint64_t)(0xffffffffu - (uint32_t)i);
}

/* The min-heap h[0..size-1] (the worst entry at the root): sift entry `at` down. */
static void sift_down(uint64_t *h, Py_ssize_t size, Py_ssize_t at) {
    const uint64_t e = h[at];
    for (;;) {
        Py_ssize_t child = 2 * at + 1;
        if (child >= size) break;
        if (child + 1 < size && h[child + 1] < h[child]) child++;
        if (e <= h[child]) break;
        h[at] = h[child];
        at = child;
    }
    h[at] = e;
}

/* Rows of at most this many values, a quarter or more of them kept, rank every value
 * instead (row_ranks); with fewer kept the heap rejects most values at once (1000 rows,
 * us, heap / ranks: 16 values k = 10 156 / 61, 24 k = 12 317 / 124, 32 k = 2 39 / 125,
 * 8 k = 2 18 / 29). */
#define RANK_ROWS 32

/* A short row: each value's place is the count of values that come before it: those of
 * a greater key, and those of an equal key at a lower position (integer comparisons
 * without a branch, the lanes along the row's values, vectorized at each level), where the heap's sifts mispredicted most
 * of their branches: 1000 rows of 16 with k = 10 127 -> 30 us.  `keys` holds n ints:
 * the order keys with the sign bit flipped, so that signed comparisons keep their order. */
#define RANKS_BODY                                                                           \
    {                                                                                        \
        for (Py_ssize_t j = 0; j < n; j++) {                                                 \
            const uint32_t key = largest ? order_key(x[j]) : ~order_key(x[j]);              \
            keys[j] = (int32_t)(key ^ 0x80000000u);                                          \
        }                                                                                    \
        int32_t place[RANK_ROWS] = {0};                                                      \
        for (Py_ssize_t j = 0; j < n; j++) { /* lanes along i: no sums across lanes */       \
            const int32_t theirs = keys[j];                                                  \
            for (Py_ssize_t i = 0; i < n; i++)                                               \
                place[i] += (theirs > keys[i]) + ((int32_t)j < (int32_t)i && theirs == keys[i]); \
        }                                                                                    \
        for (Py_ssize_t i = 0; i < n; i++) {                                                 \
            if (place[i] < k) {                                                              \
                values[place[i]] = x[i];                                                     \
                indices[place[i]] = i;                                                       \
            }                                                                                \
        }                                                                                    \
    }
#define RANKS_ARGS                                                                           \
    const float *x, Py_ssize_t n, Py_ssize_t k, int largest, int32_t *keys, float *values,   \
        int64_t *indices
static void ranks_generic(RANKS_ARGS) RANKS_BODY
#if ONNXVIZ_X86
__attribute__((target("avx2"))) static void ranks_avx2(RANKS_ARGS) RANKS_BODY
__attribute__((target("avx512f,avx512bw"))) static void ranks_avx512(RANKS_ARGS) RANKS_BODY
#endif

static void row_ranks(RANKS_ARGS) {
#if ONNXVIZ_X86
    if (level >= 2) {
        ranks_avx512(x, n, k, largest, keys, values, indices);
        return;
    }
    if (level == 1) {
        ranks_avx2(x, n, k, largest, keys, values, indices);
        return;
    }
#endif
    ranks_generic(x, n, k, largest, keys, values, indices);
}

static void row_topk(const float *x, Py_ssize_t n, Py_ssize_t k, int largest, uint64_t *h,
                     float *values, int64_t *indices) {
    for (Py_ssize_t j = 0; j < k; j++) h[j] = score(x[j], j, largest);
    for (Py_ssize_t j = k / 2; j-- > 0;) sift_down(h, k, j);
    /* Most values, once the heap is full, are strictly worse than the worst kept: the
     * float comparison with its value says so before any score is made (a NaN root
     * compares false and takes the scores). */
    uint64_t root = h[0];
    float worst = x[0xffffffffu - (uint32_t)root];
    for (Py_ssize_t j = k; j < n; j++) {
        /* the scan to the next value the test does not reject, a tight loop per order */
        if (largest)
            while (j < n && x[j] < worst) j++;
        else
            while (j < n && x[j] > worst) j++;
        if (j == n) break;
        const float v = x[j];
        const uint64_t e = score(v, j, largest);
        if (e <= root) continue;
        h[0] = e;
        sift_down(h, k, 0);
        root = h[0];
        worst = x[0xffffffffu - (uint32_t)root];
    }
    /* Heap sort: the worst goes to the end, then the next worst, ... so best first. */
    for (Py_ssize_t size = k; size > 1; size--) {
        const uint64_t worst = h[0];
        h[0] = h[size - 1];
        h[size - 1] = worst;
        sift_down(h, size - 1, 0);
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        const Py_ssize_t i = (Py_ssize_t)(0xffffffffu - (uint32_t)h[j]);
        values[j] = x[i]; /* the value itself: its NaN payload and zero sign */
        indices[j] = i;
    }
}

static PyObject *py_topk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *vo, *io;
    Py_ssize_t rows, n, k;
    int largest;
    if (!PyArg_ParseTuple(args, "OOOnnnp:topk", &xo, &vo, &io, &rows, &n, &k, &largest))
        return NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 40;
    if (rows < 0 || n < 1 || k < 1 || k > n || rows > limit || n > 0xffffffffLL ||
        (rows && n > limit / rows)) {
        PyErr_SetString(PyExc_ValueError,
                        "topk: need 1 <= k <= n < 2**32 and sizes below 2**40");
        return NULL;
    }
    Py_buffer xb, vb, ib;
    if (onnxviz_get_floats(xo, &xb, rows * n, 1, 0, "topk x") < 0) return NULL;
    if (onnxviz_get_floats(vo, &vb, rows * k, 1, 1, "topk values") < 0) {
        PyBuffer_Release(&xb);
        return NULL;
    }
    if (PyObject_GetBuffer(io, &ib, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&vb);
        PyBuffer_Release(&xb);
        return NULL;
    }
    const char *f = ib.format ? ib.format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    const int int64 = ib.itemsize == 8 && (f[0] == 'q' || f[0] == 'l') && f[1] == '\0';
    uint64_t *heap = NULL;
    if (!int64 || ib.len != rows * k * 8) {
        PyErr_SetString(PyExc_ValueError, "topk indices: expected rows * k int64 values");
    } else if (!(heap = PyMem_RawMalloc((size_t)(k > RANK_ROWS ? k : RANK_ROWS) *
                                         sizeof(uint64_t)))) {
        PyErr_NoMemory();
    } else {
        const float *x = xb.buf;
        float *values = vb.buf;
        int64_t *indices = ib.buf;
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t r = 0; r < rows; r++) {
            if (n <= RANK_ROWS && 4 * k >= n)
                row_ranks(x + r * n, n, k, largest, (int32_t *)heap, values + r * k,
                          indices + r * k);
            else
                row_topk(x + r * n, n, k, largest, heap, values + r * k, indices + r * k);
        }
        Py_END_ALLOW_THREADS;
        PyMem_RawFree(heap);
    }
    PyBuffer_Release(&ib);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&xb);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"topk", py_topk, METH_VARARGS,
     "topk(x, values, indices, rows, n, k, largest): the k best values of each of the rows "
     "of n float32 values in x, best first (largest: greater first, NaN above every "
     "number, ties by lower position), into values (rows * k float32) and their positions "
     "into indices (rows * k int64)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_topk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__topk(void) { return PyModule_Create(&module); }
