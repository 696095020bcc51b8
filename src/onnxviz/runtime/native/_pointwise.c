/* onnxviz.runtime.native._pointwise: a 1x1 conv with few output channels (a UNet's or a
 * segmentation head's mask, M <= 8), from channels-last rows into NCHW planes:
 *
 *   out[m, p] = bias[m] + sum_c x[p, c] * w[m, c]        p over one image's pixels
 *
 * The packed GEMM fills panels of 16 (AVX2) output channels, so two channels computed 16
 * and threw 14 away; OpenBLAS's GEMM of such shapes ran at about 5 GFLOP/s, and either way
 * the result was channels-last and then transposed into planes.  Here 8 pixels at a time
 * are read as 8 rows of 8 channels, turned into 8 vectors of one channel each (an 8x8
 * transpose), and multiplied into M vectors of 8 pixels, which are the planes' own
 * memory: one pass over x, no copy after.
 *
 * Each sum starts from the bias and adds the channels in order, one FMA each (AVX2; the
 * plain C level rounds the product and the sum separately: -std=c11 does not contract),
 * so the numbers differ from BLAS's only by rounding (tests/runtime/test_native_pointwise.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if ONNXVIZ_X86
#include <immintrin.h>

#include "avx2_lanes.h"
#endif

static int level = 0;
ONNXVIZ_LEVEL_FUNCTIONS

enum { MAX_OUT = 8 };

typedef struct {
    const float *x;    /* [P, C] rows of one image, row stride C */
    const float *w;    /* [M, C] */
    const float *bias; /* [M], or NULL */
    float *out;        /* [M, P] planes */
    int64_t P, C, M;
} job_t;

/* The job's image and the next `images - 1`, each P x C floats in and M x P out. */
static void next_image(job_t *j) {
    j->x += j->P * j->C;
    j->out += j->M * j->P;
}

static void run_generic(job_t *j, int64_t images) {
    for (int64_t n = 0; n < images; n++, next_image(j))
        for (int64_t p = 0; p < j->P; p++) {
            const float *row = j->x + p * j->C;
            for (int64_t m = 0; m < j->M; m++) {
                const float *wm = j->w + m * j->C;
                float s = j->bias ? j->bias[m] : 0.0f;
                for (int64_t c = 0; c < j->C; c++) s += row[c] * wm[c];
                j->out[m * j->P + p] = s;
            }
        }
}

#if ONNXVIZ_X86

#define T_AVX2 __attribute__((target("avx2,fma")))
#define INL_AVX2 ONNXVIZ_INL_AVX2

/* 8 pixels from p0, M outputs; `wv` holds each weight broadcast to a vector ([c][m]). */
INL_AVX2 void block8(const job_t *j, int64_t p0, const __m256 *wv, const int M) {
    const int64_t C = j->C;
    __m256 acc[MAX_OUT];
    for (int m = 0; m < M; m++) acc[m] = _mm256_set1_ps(j->bias ? j->bias[m] : 0.0f);
    const float *x = j->x + p0 * C;
    int64_t c0 = 0;
    for (; c0 + 8 <= C; c0 += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(x + i * C + c0);
        onnxviz_transpose8(r);
        for (int k = 0; k < 8; k++)
            for (int m = 0; m < M; m++)
                acc[m] = _mm256_fmadd_ps(r[k], wv[(c0 + k) * MAX_OUT + m], acc[m]);
    }
    if (c0 < C) { /* the last channels, the rest of the 8 loaded as zeros */
        const int rest = (int)(C - c0);
        const __m256i mask =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(rest), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_maskload_ps(x + i * C + c0, mask);
        onnxviz_transpose8(r);
        for (int k = 0; k < rest; k++)
            for (int m = 0; m < M; m++)
                acc[m] = _mm256_fmadd_ps(r[k], wv[(c0 + k) * MAX_OUT + m], acc[m]);
    }
    for (int m = 0; m < M; m++) _mm256_storeu_ps(j->out + m * j->P + p0, acc[m]);
}

INL_AVX2 void run_avx2_m(const job_t *j, const __m256 *wv, const int M) {
    int64_t p = 0;
    for (; p + 8 <= j->P; p += 8) block8(j, p, wv, M);
    for (; p < j->P; p++) { /* the last pixels: one FMA per channel, in the same order */
        const float *row = j->x + p * j->C;
        for (int m = 0; m < M; m++) {
            const float *wm = j->w + m * j->C;
            float s = j->bias ? j->bias[m] : 0.0f;
            for (int64_t c = 0; c < j->C; c++) s = __builtin_fmaf(row[c], wm[c], s);
            j->out[m * j->P + p] = s;
        }
    }
}

/* Every image of the job: the weights broadcast once for all of them. */
static T_AVX2 int run_avx2(job_t *j, int64_t images) {
    __m256 *wv = (__m256 *)aligned_alloc(32, (size_t)(j->C * MAX_OUT) * sizeof(__m256));
    if (!wv) return -1;
    for (int64_t c = 0; c < j->C; c++)
        for (int64_t m = 0; m < MAX_OUT; m++)
            wv[c * MAX_OUT + m] = _mm256_set1_ps(m < j->M ? j->w[m * j->C + c] : 0.0f);
    for (int64_t n = 0; n < images; n++, next_image(j)) {
        switch (j->M) {
        case 1: run_avx2_m(j, wv, 1); break;
        case 2: run_avx2_m(j, wv, 2); break;
        case 3: run_avx2_m(j, wv, 3); break;
        case 4: run_avx2_m(j, wv, 4); break;
        case 5: run_avx2_m(j, wv, 5); break;
        case 6: run_avx2_m(j, wv, 6); break;
        case 7: run_avx2_m(j, wv, 7); break;
        default: run_avx2_m(j, wv, 8); break;
        }
    }
    free(wv);
    return 0;
}

#endif /* ONNXVIZ_X86 */

static PyObject *py_planes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *wo, *bo, *oo;
    Py_ssize_t images, P, C, M;
    if (!PyArg_ParseTuple(args, "OOOOnnnn:planes", &xo, &wo, &bo, &oo, &images, &P, &C, &M))
        return NULL;
    if (images < 1 || P < 1 || C < 1 || M < 1 || M > MAX_OUT || P >= ((Py_ssize_t)1 << 40) ||
        C >= ((Py_ssize_t)1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "planes: sizes out of range (1 <= M <= 8)");
        return NULL;
    }
    Py_buffer xb, wb, bb, ob;
    int have_bias = bo != Py_None, failed = 0;
    if (onnxviz_get_floats(xo, &xb, images * P * C, 1, 0, "x") < 0) return NULL;
    if (onnxviz_get_floats(wo, &wb, M * C, 1, 0, "w") < 0) goto release_x;
    if (have_bias && onnxviz_get_floats(bo, &bb, M, 1, 0, "bias") < 0) goto release_w;
    if (onnxviz_get_floats(oo, &ob, images * M * P, 1, 1, "out") < 0) goto release_b;
    Py_BEGIN_ALLOW_THREADS;
    job_t j = {(const float *)xb.buf, (const float *)wb.buf,
               have_bias ? (const float *)bb.buf : NULL, (float *)ob.buf, P, C, M};
#if ONNXVIZ_X86
    if (level >= 1)
        failed = run_avx2(&j, images) < 0;
    else
#endif
        run_generic(&j, images);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&ob);
release_b:
    if (have_bias) PyBuffer_Release(&bb);
release_w:
    PyBuffer_Release(&wb);
release_x:
    PyBuffer_Release(&xb);
    if (PyErr_Occurred()) return NULL;
    if (failed) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"planes", py_planes, METH_VARARGS,
     "planes(x, w, bias, out, images, P, C, M): out[n, m, p] = bias[m] + sum_c x[n, p, c] * "
     "w[m, c] for channels-last rows x (images x P x C floats), w (M x C), bias (M or "
     "None), out (images x M x P), 1 <= M <= 8."},
    ONNXVIZ_LEVEL_METHODS{NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pointwise", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pointwise(void) { return PyModule_Create(&module); }
