/* onnxviz.runtime.native._bmm: batched products of small float32 matrices.
 *
 *   bmm(a, b, out) -> None: out[p, q, i, j] = sum_k a[p, q, i, k] * b[p, q, k, j] for
 *   a of shape (P, Q, M, K) and b (P, Q, K, N), any strides that are whole floats (a
 *   permuted view: an attention's K^T as exported, without a copy), out C-contiguous
 *   (P, Q, M, N).  Rank-3 arrays are (1, Q, ., .) to the caller (kernels/math_linalg.py).
 *
 * The numbers: each output is one chain of fused multiply-adds in the order k = 0, 1, ...
 * from 0 (acc = fma(a_ik, b_kj, acc)), at every level (one lane per output; the generic
 * level calls C's fmaf), so every level gives the same bits.  Within K + 1 roundings of
 * the exact sum, as any dot product; not BLAS's bits (its blocking sums in its own order).
 *
 * Why: an exported attention's Q K^T and P V are batches of tiny products (a TorchScript
 * encoder's 2 x 4 heads of 7 x 8 by 8 x 7), where numpy runs one BLAS call per matrix:
 * 2.2-3.3 us for eight such products, here a few hundred nanoseconds.  The caller routes
 * only small products here (BLAS's blocking wins on large ones).
 *
 * Layout: for each batch, b's rows are read as vectors along j when its j stride is one
 * float; otherwise (K^T as a view: j strided) the batch's K x N block is first copied to
 * a scratch row-major block.  Rows of out go four at a time (four independent chains per
 * column vector: the fused multiply-add's latency hidden).
 *
 * Levels (native/__init__.py): 0 generic C, 1 AVX2 (8 columns a vector), 2 and 3
 * AVX-512F (16, masked tails). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if ONNXVIZ_X86
#include <immintrin.h>
#endif

static int level = 0;

/* Products no larger than these (columns, depth) run here; the caller checks too. */
enum { MAX_N = 256, MAX_K = 256 };

typedef struct {
    const float *a, *b;
    float *out;
    Py_ssize_t P, Q, M, K, N;
    Py_ssize_t as[4], bs[4]; /* strides in floats: batch p, batch q, row, column */
} Job;

/* One batch's b as a K x N row-major block (scratch when b's columns are strided). */
static const float *dense_b(const Job *j, const float *b, float *scratch) {
    if (j->bs[3] == 1) return b;
    for (Py_ssize_t k = 0; k < j->K; k++)
        for (Py_ssize_t c = 0; c < j->N; c++) scratch[k * j->N + c] = b[k * j->bs[2] + c * j->bs[3]];
    return scratch;
}

static void batch_generic(const Job *j, const float *a, const float *b, Py_ssize_t ldb,
                          float *out) {
    for (Py_ssize_t i = 0; i < j->M; i++) {
        const float *ai = a + i * j->as[2];
        for (Py_ssize_t c = 0; c < j->N; c++) {
            float acc = 0.0f;
            for (Py_ssize_t k = 0; k < j->K; k++) acc = fmaf(ai[k * j->as[3]], b[k * ldb + c], acc);
            out[i * j->N + c] = acc;
        }
    }
}

#if ONNXVIZ_X86
/* The AVX2 and AVX-512 levels: one body over the level's vector of W columns (VEC), its
 * lane mask (MASK, made by MASK_OF(w) for the first w lanes), masked load and store, fused
 * multiply-add and broadcast.  R rows at a time (ROWS_FN: 4, then 1 for the rest), each
 * row's columns one chain per lane in k order. */
#define BATCH_LEVEL(NAME, TARGET, VEC, W, MASK, MASK_OF, LOAD, STORE, FMA, SET1, ZERO)       \
    TARGET static inline __attribute__((always_inline)) void NAME##_rows(                   \
        const float *a, Py_ssize_t ar, Py_ssize_t ak, const float *b, Py_ssize_t ldb,       \
        Py_ssize_t K, float *out, Py_ssize_t N, MASK m, const int R) {                      \
        VEC s[4];                                                                          \
        for (int r = 0; r < R; r++) s[r] = ZERO();                                         \
        for (Py_ssize_t k = 0; k < K; k++) {                                               \
            const VEC bv = LOAD(b + k * ldb, m);                                           \
            for (int r = 0; r < R; r++) s[r] = FMA(SET1(a[r * ar + k * ak]), bv, s[r]);    \
        }                                                                                  \
        for (int r = 0; r < R; r++) STORE(out + r * N, m, s[r]);                           \
    }                                                                                      \
    TARGET static void NAME(const Job *j, const float *a, const float *b, Py_ssize_t ldb,  \
                            float *out) {                                                  \
        const Py_ssize_t M = j->M, K = j->K, N = j->N, ar = j->as[2], ak = j->as[3];       \
        for (Py_ssize_t c0 = 0; c0 < N; c0 += W) {                                         \
            const MASK m = MASK_OF(N - c0 < W ? (int)(N - c0) : W);                        \
            Py_ssize_t i = 0;                                                              \
            for (; i + 4 <= M; i += 4)                                                     \
                NAME##_rows(a + i * ar, ar, ak, b + c0, ldb, K, out + i * N + c0, N, m, 4); \
            for (; i < M; i++)                                                             \
                NAME##_rows(a + i * ar, ar, ak, b + c0, ldb, K, out + i * N + c0, N, m, 1); \
        }                                                                                  \
    }

__attribute__((target("avx2"))) static inline __m256i mask8(int w) {
    int32_t lanes[8];
    for (int l = 0; l < 8; l++) lanes[l] = l < w ? -1 : 0;
    return _mm256_loadu_si256((const __m256i *)lanes);
}
#define LOAD8(p, m) _mm256_maskload_ps((p), (m))
#define STORE8(p, m, v) _mm256_maskstore_ps((p), (m), (v))
BATCH_LEVEL(batch_avx2, __attribute__((target("avx2,fma"))), __m256, 8, __m256i, mask8, LOAD8,
            STORE8, _mm256_fmadd_ps, _mm256_set1_ps, _mm256_setzero_ps)

#define MASK16(w) ((__mmask16)((1u << (w)) - 1u))
#define LOAD16(p, m) _mm512_maskz_loadu_ps((m), (p))
#define STORE16(p, m, v) _mm512_mask_storeu_ps((p), (m), (v))
BATCH_LEVEL(batch_avx512, __attribute__((target("avx512f"))), __m512, 16, __mmask16, MASK16,
            LOAD16, STORE16, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_setzero_ps)
#endif

static void run_job(const Job *j, float *scratch) {
    for (Py_ssize_t p = 0; p < j->P; p++)
        for (Py_ssize_t q = 0; q < j->Q; q++) {
            const float *a = j->a + p * j->as[0] + q * j->as[1];
            const float *b = dense_b(j, j->b + p * j->bs[0] + q * j->bs[1], scratch);
            const Py_ssize_t ldb = j->bs[3] == 1 ? j->bs[2] : j->N;
            float *out = j->out + (p * j->Q + q) * j->M * j->N;
#if ONNXVIZ_X86
            if (level >= 2) {
                batch_avx512(j, a, b, ldb, out);
                continue;
            }
            if (level == 1) {
                batch_avx2(j, a, b, ldb, out);
                continue;
            }
#endif
            batch_generic(j, a, b, ldb, out);
        }
}

/* x's shape and strides (in floats) as four axes (P, Q, rows, columns): rank 3 or 4. */
static int four_axes(const Py_buffer *v, Py_ssize_t *shape, Py_ssize_t *strides,
                     const char *name) {
    if (v->ndim != 3 && v->ndim != 4) {
        PyErr_Format(PyExc_ValueError, "bmm: %s must have rank 3 or 4", name);
        return -1;
    }
    const int lead = 4 - v->ndim;
    for (int d = 0; d < 4; d++) {
        if (d < lead) {
            shape[d] = 1;
            strides[d] = 0;
            continue;
        }
        const Py_ssize_t s = v->strides[d - lead];
        if (s % 4) {
            PyErr_Format(PyExc_ValueError, "bmm: %s's strides are not whole floats", name);
            return -1;
        }
        shape[d] = v->shape[d - lead];
        strides[d] = s / 4;
    }
    return 0;
}

static int float_view(PyObject *obj, Py_buffer *v, int flags, const char *name) {
    if (PyObject_GetBuffer(obj, v, flags | PyBUF_FORMAT) < 0) return -1;
    const char *f = v->format ? v->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    if (f[0] != 'f' || f[1] != '\0' || v->itemsize != 4) {
        PyErr_Format(PyExc_ValueError, "bmm: %s must be float32", name);
        PyBuffer_Release(v);
        v->obj = NULL;
        return -1;
    }
    return 0;
}

/* The job of a @ b from a's and b's views (out not set): 0, or -1 with a ValueError
 * (not a batched product, or sizes this module does not take). */
static int job_of(const Py_buffer *av, const Py_buffer *bv, Job *j) {
    Py_ssize_t ash[4], bsh[4];
    if (four_axes(av, ash, j->as, "a") < 0 || four_axes(bv, bsh, j->bs, "b") < 0) return -1;
    if (ash[0] != bsh[0] || ash[1] != bsh[1] || ash[3] != bsh[2]) {
        PyErr_SetString(PyExc_ValueError, "bmm: a and b do not make a batched product");
        return -1;
    }
    j->P = ash[0], j->Q = ash[1], j->M = ash[2], j->K = ash[3], j->N = bsh[3];
    if (j->M < 1 || j->K < 1 || j->N < 1 || j->K > MAX_K || j->N > MAX_N) {
        PyErr_SetString(PyExc_ValueError, "bmm: sizes 1 to 256 columns and depth, a row or more");
        return -1;
    }
    j->a = av->buf, j->b = bv->buf;
    return 0;
}

/* run_job with the scratch a b of strided rows needs (the GIL released when asked):
 * 0, or -1 with MemoryError. */
static int run_with_scratch(const Job *j, int release_gil) {
    float *scratch = NULL;
    if (j->bs[3] != 1 && !(scratch = malloc((size_t)(j->K * j->N) * sizeof(float)))) {
        PyErr_NoMemory();
        return -1;
    }
    if (j->P > 0 && j->Q > 0) {
        if (release_gil) {
            Py_BEGIN_ALLOW_THREADS;
            run_job(j, scratch);
            Py_END_ALLOW_THREADS;
        } else {
            run_job(j, scratch);
        }
    }
    free(scratch);
    return 0;
}

static PyObject *py_bmm(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ao, *bo, *oo;
    if (!PyArg_ParseTuple(args, "OOO:bmm", &ao, &bo, &oo)) return NULL;
    Py_buffer av, bv, ov;
    av.obj = bv.obj = ov.obj = NULL;
    PyObject *result = NULL;
    Job j;
    if (float_view(ao, &av, PyBUF_STRIDES, "a") < 0) goto done;
    if (float_view(bo, &bv, PyBUF_STRIDES, "b") < 0) goto done;
    if (float_view(oo, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, "out") < 0) goto done;
    if (job_of(&av, &bv, &j) < 0) goto done;
    if (ov.len != j.P * j.Q * j.M * j.N * 4) {
        PyErr_SetString(PyExc_ValueError, "bmm: out must hold the product");
        goto done;
    }
    j.out = ov.buf;
    if (run_with_scratch(&j, 1) == 0) result = Py_NewRef(Py_None);
done:
    if (av.obj) PyBuffer_Release(&av);
    if (bv.obj) PyBuffer_Release(&bv);
    if (ov.obj) PyBuffer_Release(&ov);
    return result;
}

/* ---- product(a, b): the whole route in one call ------------------------------------
 *
 * `product(a, b)` is kernels/math_linalg.small_batched's call: None when the product is
 * not one this module takes (ranks, batch shapes, sizes beyond MAX_MACS a matrix, a b of
 * strided rows beyond MAX_STRIDED values, not float32), else a new C-contiguous float32
 * array from numpy.empty (given once by `setup(empty, dtype)`) holding a @ b as `bmm`
 * computes it.  The Python checks and the output's numpy.empty were 1.2 us of a tiny
 * attention's 1.6 (two 4 x 16 by 16 x 4 products: numpy's 1.2). */
enum { MAX_MACS = 32768, MAX_STRIDED = 1024 };
static PyObject *np_empty = NULL, *np_float32 = NULL;

static PyObject *py_setup(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *empty, *dtype;
    if (!PyArg_ParseTuple(args, "OO:setup", &empty, &dtype)) return NULL;
    Py_XSETREF(np_empty, Py_NewRef(empty));
    Py_XSETREF(np_float32, Py_NewRef(dtype));
    Py_RETURN_NONE;
}

static PyObject *py_product(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ao, *bo;
    if (!PyArg_ParseTuple(args, "OO:product", &ao, &bo)) return NULL;
    if (np_empty == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "product: setup was not called");
        return NULL;
    }
    Py_buffer av, bv, ov;
    av.obj = bv.obj = ov.obj = NULL;
    PyObject *result = NULL, *out = NULL;
    Job j;
    if (float_view(ao, &av, PyBUF_STRIDES, "a") < 0 || float_view(bo, &bv, PyBUF_STRIDES, "b") < 0 ||
        job_of(&av, &bv, &j) < 0)
        goto decline;
    if (av.ndim != bv.ndim || j.M * j.K * j.N > MAX_MACS ||
        (j.bs[3] != 1 && j.K * j.N > MAX_STRIDED))
        goto done_none;
    /* out: a's shape with N columns */
    PyObject *shape = PyTuple_New(av.ndim);
    if (!shape) goto done;
    for (int d = 0; d < av.ndim; d++) {
        PyObject *v = PyLong_FromSsize_t(d == av.ndim - 1 ? j.N : av.shape[d]);
        if (!v) {
            Py_DECREF(shape);
            goto done;
        }
        PyTuple_SET_ITEM(shape, d, v);
    }
    out = PyObject_CallFunctionObjArgs(np_empty, shape, np_float32, NULL);
    Py_DECREF(shape);
    if (!out) goto done;
    if (float_view(out, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, "out") < 0) goto done;
    j.out = ov.buf;
    if (run_with_scratch(&j, 0) < 0) goto done;
    result = out;
    out = NULL;
    goto done;
decline: /* a buffer or shape this module does not take: numpy's product */
    PyErr_Clear();
done_none:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(out);
    if (av.obj) PyBuffer_Release(&av);
    if (bv.obj) PyBuffer_Release(&bv);
    if (ov.obj) PyBuffer_Release(&ov);
    return result;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"bmm", py_bmm, METH_VARARGS,
     "bmm(a, b, out): out = a @ b for float32 (P, Q, M, K) and (P, Q, K, N) (or rank 3), "
     "any whole-float strides, out C-contiguous; each output one fused multiply-add chain "
     "in k order (the same bits at every level); see the module source."},
    {"setup", py_setup, METH_VARARGS,
     "setup(empty, dtype): numpy.empty and numpy.float32, what product makes its output with."},
    {"product", py_product, METH_VARARGS,
     "product(a, b) -> a @ b as a new array, or None when this module does not take the "
     "product (see the module source)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bmm", NULL, -1, methods};

PyMODINIT_FUNC PyInit__bmm(void) { return PyModule_Create(&module); }
