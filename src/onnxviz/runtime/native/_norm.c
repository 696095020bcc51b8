/* onnxviz.runtime.native._norm: layer and RMS normalisation of float32 rows, one read
 * and one write of each row.
 *
 *   norm(x, y, cols, epsilon, rms, gamma, beta, skip, bias, total, mean, inv_std):
 *   over each row of `cols` floats of x (its length a multiple of cols), optionally
 *   first s = (x + skip) + bias (written to `total` when given), then
 *   y = (s - mean) / sqrt(var + epsilon) * gamma + beta, or for rms
 *   y = s / sqrt(mean(s^2) + epsilon) * gamma; mean and inv_std (rows floats each, may
 *   be None) get each row's mean (0 for rms) and 1 / sqrt(var + epsilon).  gamma, beta
 *   and bias are `cols` floats or None; skip and total x's length or None.  y may be x
 *   when there is no skip or bias; total must not overlap y.
 *
 * Accuracy (norm_rows.h has how): with n_i the exact normalised value of row element i
 * (the float32 s, epsilon rounded to float32 by the caller, in exact arithmetic),
 * |y_i - (n_i gamma_i + beta_i)| <= 8 * 2^-24 * (|gamma_i| (|n_i| + 1) + |beta_i|)
 * whatever the row's offset or magnitude (tests/runtime/test_native_norm.py: widths 1 to
 * 4096); mean and inv_std within 2^-23 relative (where float32 can hold them).  Levels
 * sum in different orders, so their last bits may differ.  A row whose variance +
 * epsilon is negative or NaN calls libm's sqrt (errno), once per such row.
 *
 * Levels (native/__init__.py): 0 generic C (4-lane vectors); 1 AVX2; 2 and 3 AVX-512F. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include "vector_types.h"
#include <stdint.h>
#include <string.h>
#if ONNXVIZ_X86
#include <immintrin.h>
#endif


/* Half-width float and double vectors (the statistics run in double). */
typedef float v2f __attribute__((vector_size(8)));
typedef double v2d __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));

typedef struct {
    const float *x, *skip, *bias, *gamma, *beta;
    float *y, *total, *mean, *inv_std;
    Py_ssize_t rows, cols;
    double epsilon;
    int rms;
} NormJob;

static int level = 0;

#define SFX generic
#define VF v4f
#define VH v2f
#define VD v2d
#define VW 4
#define ATTR
#include "norm_rows.h"
#undef SFX
#undef VF
#undef VH
#undef VD
#undef VW
#undef ATTR

#if ONNXVIZ_X86
#define SFX avx2
#define VF v8f
#define VH v4f
#define VD v4d
#define VW 8
#define ATTR __attribute__((target("avx2,fma")))
#define NR_CVT(h) ((v4d)_mm256_cvtps_pd((__m128)(h)))
#include "norm_rows.h"
#undef NR_CVT
#undef SFX
#undef VF
#undef VH
#undef VD
#undef VW
#undef ATTR

#define SFX avx512
#define VF v16f
#define VH v8f
#define VD v8d
#define VW 16
#define ATTR __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define NR_CVT(h) ((v8d)_mm512_cvtps_pd((__m256)(h)))
#include "norm_rows.h"
#undef NR_CVT
#undef SFX
#undef VF
#undef VH
#undef VD
#undef VW
#undef ATTR
#endif

/* An optional float32 buffer (None: view->buf stays NULL); 0 or -1 with the error set. */
static int optional_floats(PyObject *obj, Py_buffer *view, Py_ssize_t count, int writable,
                           const char *name) {
    view->buf = NULL;
    view->obj = NULL;
    if (obj == Py_None) return 0;
    return onnxviz_get_floats(obj, view, count, 1, writable, name);
}

static PyObject *py_norm(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *yo, *go, *bo, *so, *bio, *to, *mo, *io;
    Py_ssize_t cols;
    double epsilon;
    int rms;
    if (!PyArg_ParseTuple(args, "OOndpOOOOOOO:norm", &xo, &yo, &cols, &epsilon, &rms, &go,
                          &bo, &so, &bio, &to, &mo, &io))
        return NULL;
    if (cols < 1) {
        PyErr_SetString(PyExc_ValueError, "norm: cols must be at least 1");
        return NULL;
    }
    enum { X, Y, G, B, S, BI, T, M, I, NVIEWS };
    Py_buffer v[NVIEWS];
    for (int k = 0; k < NVIEWS; k++) v[k].buf = NULL, v[k].obj = NULL;
    PyObject *result = NULL;
    if (onnxviz_get_floats(xo, &v[X], 0, 0, 0, "norm x") < 0) goto done;
    const Py_ssize_t len = v[X].len / 4;
    if (len % cols) {
        PyErr_SetString(PyExc_ValueError, "norm: x's length is not a multiple of cols");
        goto done;
    }
    const Py_ssize_t rows = len / cols;
    if (onnxviz_get_floats(yo, &v[Y], len, 1, 1, "norm y") < 0) goto done;
    if (optional_floats(go, &v[G], cols, 0, "norm gamma") < 0) goto done;
    if (optional_floats(bo, &v[B], cols, 0, "norm beta") < 0) goto done;
    if (optional_floats(so, &v[S], len, 0, "norm skip") < 0) goto done;
    if (optional_floats(bio, &v[BI], cols, 0, "norm bias") < 0) goto done;
    if (optional_floats(to, &v[T], len, 1, "norm total") < 0) goto done;
    if (optional_floats(mo, &v[M], rows, 1, "norm mean") < 0) goto done;
    if (optional_floats(io, &v[I], rows, 1, "norm inv_std") < 0) goto done;
    NormJob job = {
        .x = v[X].buf, .skip = v[S].buf, .bias = v[BI].buf, .gamma = v[G].buf,
        .beta = v[B].buf, .y = v[Y].buf, .total = v[T].buf, .mean = v[M].buf,
        .inv_std = v[I].buf, .rows = rows, .cols = cols, .epsilon = epsilon, .rms = rms,
    };
    Py_BEGIN_ALLOW_THREADS;
#if ONNXVIZ_X86
    if (level >= 2)
        norm_rows_avx512(&job);
    else if (level == 1)
        norm_rows_avx2(&job);
    else
#endif
        norm_rows_generic(&job);
    Py_END_ALLOW_THREADS;
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (int k = 0; k < NVIEWS; k++)
        if (v[k].obj != NULL) PyBuffer_Release(&v[k]);
    return result;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"norm", py_norm, METH_VARARGS,
     "norm(x, y, cols, epsilon, rms, gamma, beta, skip, bias, total, mean, inv_std): "
     "layer (or RMS) normalisation of float32 rows of cols; see the module source."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_norm", NULL, -1, methods};

PyMODINIT_FUNC PyInit__norm(void) { return PyModule_Create(&module); }
