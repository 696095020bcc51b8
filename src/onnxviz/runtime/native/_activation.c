/* onnxviz.runtime.native._activation: a conv's activation in place, in one pass.
 *
 *   activate(buf, act, lo, hi): buf, a contiguous writable float32 buffer, becomes
 *   act(buf) element by element: 1 Relu max(y, 0); 2 Clip min(max(y, lo), hi) (a NaN
 *   bound: none); 3 HardSwish y * min(max(y * (1/6) + 0.5, 0), 1).
 *
 * The same operations, in the same order, as the numpy kernels (math_activation's Relu
 * and Clip, HardSwish's multiply by float32(1/6), add 0.5, clip to [0, 1], multiply):
 * the same values at every level, a NaN stays NaN (only a zero's sign may differ from
 * numpy's max).  numpy's HardSwish is four passes through memory with np.clip's slow
 * loop; this is one (a fused conv's output, 0.1-0.8 MB in MobileNetV3, is read once).
 *
 * Levels (native/__init__.py): 0 generic C; 1 AVX2; 2 and 3 AVX-512F (masked tail).
 * Functions carry their instruction set as a target attribute (no -march). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* GCC: off already under -std=c11 (setup.py) */
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ACT_X86 1
#include <immintrin.h>
#else
#define ACT_X86 0
#endif

static int level = 0;

static void run_generic(float *y, Py_ssize_t n, int act, float lo, float hi) {
    const float sixth = (float)(1.0 / 6.0);
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = y[i];
        if (act == 1) {
            v = (v < 0.0f) ? 0.0f : v; /* NaN kept */
        } else if (act == 2) {
            if (lo == lo && v < lo) v = lo;
            if (hi == hi && v > hi) v = hi;
        } else if (act == 3) {
            float g = v * sixth;
            g = g + 0.5f;
            if (g < 0.0f) g = 0.0f;
            if (g > 1.0f) g = 1.0f;
            v = v * g;
        }
        y[i] = v;
    }
}

#if ACT_X86
/* max_ps/min_ps(a, b) return b when either is NaN: the value goes second. */
__attribute__((target("avx2,fma"))) static inline __m256 act8(__m256 y, int act, __m256 lo,
                                                              __m256 hi, int has_lo,
                                                              int has_hi) {
    if (act == 1) return _mm256_max_ps(_mm256_setzero_ps(), y);
    if (act == 2) {
        if (has_lo) y = _mm256_max_ps(lo, y);
        if (has_hi) y = _mm256_min_ps(hi, y);
        return y;
    }
    __m256 g = _mm256_mul_ps(y, _mm256_set1_ps((float)(1.0 / 6.0)));
    g = _mm256_add_ps(g, _mm256_set1_ps(0.5f));
    g = _mm256_max_ps(_mm256_setzero_ps(), g);
    g = _mm256_min_ps(_mm256_set1_ps(1.0f), g);
    return _mm256_mul_ps(y, g);
}

__attribute__((target("avx2,fma"))) static void run_avx2(float *y, Py_ssize_t n, int act,
                                                         float lo, float hi) {
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    const int has_lo = lo == lo, has_hi = hi == hi;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, act8(_mm256_loadu_ps(y + i), act, vlo, vhi, has_lo, has_hi));
    if (i < n) run_generic(y + i, n - i, act, lo, hi);
}

__attribute__((target("avx512f"))) static inline __m512 act16(__m512 y, int act, __m512 lo,
                                                              __m512 hi, int has_lo,
                                                              int has_hi) {
    if (act == 1) return _mm512_max_ps(_mm512_setzero_ps(), y);
    if (act == 2) {
        if (has_lo) y = _mm512_max_ps(lo, y);
        if (has_hi) y = _mm512_min_ps(hi, y);
        return y;
    }
    __m512 g = _mm512_mul_ps(y, _mm512_set1_ps((float)(1.0 / 6.0)));
    g = _mm512_add_ps(g, _mm512_set1_ps(0.5f));
    g = _mm512_max_ps(_mm512_setzero_ps(), g);
    g = _mm512_min_ps(_mm512_set1_ps(1.0f), g);
    return _mm512_mul_ps(y, g);
}

__attribute__((target("avx512f"))) static void run_avx512(float *y, Py_ssize_t n, int act,
                                                          float lo, float hi) {
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    const int has_lo = lo == lo, has_hi = hi == hi;
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, act16(_mm512_loadu_ps(y + i), act, vlo, vhi, has_lo, has_hi));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(m, y + i);
        _mm512_mask_storeu_ps(y + i, m, act16(v, act, vlo, vhi, has_lo, has_hi));
    }
}
#endif

static PyObject *py_activate(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj;
    int act;
    float lo, hi;
    if (!PyArg_ParseTuple(args, "Oiff:activate", &obj, &act, &lo, &hi)) return NULL;
    if (act < 1 || act > 3) {
        PyErr_SetString(PyExc_ValueError, "activate: activation must be 1..3");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return NULL;
    const char *f = view.format ? view.format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    if (strcmp(f, "f") != 0 || view.itemsize != 4 || view.len % 4) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "activate: expected a float32 buffer");
        return NULL;
    }
    float *y = view.buf;
    const Py_ssize_t n = view.len / 4;
    Py_BEGIN_ALLOW_THREADS;
#if ACT_X86
    if (level >= 2)
        run_avx512(y, n, act, lo, hi);
    else if (level == 1)
        run_avx2(y, n, act, lo, hi);
    else
#endif
        run_generic(y, n, act, lo, hi);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"activate", py_activate, METH_VARARGS,
     "activate(buf, act, lo, hi): the float32 buffer in place through act (1 Relu, "
     "2 Clip(lo, hi), NaN bound: none, 3 HardSwish)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_activation", NULL, -1, methods};

PyMODINIT_FUNC PyInit__activation(void) { return PyModule_Create(&module); }
