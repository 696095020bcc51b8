/* onnxviz.runtime.native._channels: a per-channel scale of channels-last rows.
 *
 *   scale(x, s, out, (n, rows, channels)): out[b, r, c] = x[b, r, c] * s[b, c]
 *
 * x and out (N, rows, C) and s (N, C): contiguous float32 buffers (out may be x).  This
 * is a squeeze-excite block's Mul of a channels-last (N, C, H, W) value by its (N, C, 1,
 * 1) gate: one multiply per element, so numpy's values exactly.  numpy runs that
 * broadcast as one inner loop per pixel over the C channels, without its SIMD loop:
 * 27 us for MobileNetV3's 28x28x96, where one pass here takes a few.
 *
 * Levels (native/__init__.py): 0 generic C; 1 AVX2; 2 and 3 AVX-512F: the same loop,
 * which the compiler vectorizes for each target attribute (no -march). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"

static int level = 0;

#define SCALE_BODY                                                                         \
    {                                                                                      \
        for (Py_ssize_t b = 0; b < n; b++) {                                               \
            const float *restrict sb = s + b * channels;                                   \
            for (Py_ssize_t r = 0; r < rows; r++) {                                        \
                const float *xr = x + (b * rows + r) * channels;                           \
                float *orow = out + (b * rows + r) * channels;                             \
                for (Py_ssize_t c = 0; c < channels; c++) orow[c] = xr[c] * sb[c];         \
            }                                                                              \
        }                                                                                  \
    }

/* (x and out may be one buffer: each element is read before it is written, in place.) */
static void scale_generic(const float *x, const float *s, float *out, Py_ssize_t n,
                          Py_ssize_t rows, Py_ssize_t channels) SCALE_BODY

#if ONNXVIZ_X86
__attribute__((target("avx2,fma"))) static void
scale_avx2(const float *x, const float *s, float *out, Py_ssize_t n, Py_ssize_t rows,
           Py_ssize_t channels) SCALE_BODY

__attribute__((target("avx512f"))) static void
scale_avx512(const float *x, const float *s, float *out, Py_ssize_t n, Py_ssize_t rows,
             Py_ssize_t channels) SCALE_BODY
#endif

static PyObject *py_scale(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *so, *oo;
    Py_ssize_t n, rows, channels;
    if (!PyArg_ParseTuple(args, "OOO(nnn):scale", &xo, &so, &oo, &n, &rows, &channels))
        return NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 40;
    if (n < 0 || rows < 0 || channels < 0 || n > limit || rows > limit || channels > limit ||
        (n && rows && channels && (n > limit / rows || n * rows > limit / channels))) {
        PyErr_SetString(PyExc_ValueError, "scale: sizes must be in 0..2**40 with their product");
        return NULL;
    }
    Py_buffer xb, sb, ob;
    if (onnxviz_get_floats(xo, &xb, n * rows * channels, 1, 0, "x") < 0) return NULL;
    if (onnxviz_get_floats(so, &sb, n * channels, 1, 0, "s") < 0) {
        PyBuffer_Release(&xb);
        return NULL;
    }
    if (onnxviz_get_floats(oo, &ob, n * rows * channels, 1, 1, "out") < 0) {
        PyBuffer_Release(&sb);
        PyBuffer_Release(&xb);
        return NULL;
    }
    void (*fn)(const float *, const float *, float *, Py_ssize_t, Py_ssize_t, Py_ssize_t) =
        scale_generic;
#if ONNXVIZ_X86
    if (level >= 2)
        fn = scale_avx512;
    else if (level == 1)
        fn = scale_avx2;
#endif
    Py_BEGIN_ALLOW_THREADS;
    fn(xb.buf, sb.buf, ob.buf, n, rows, channels);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&ob);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&xb);
    Py_RETURN_NONE;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"scale", py_scale, METH_VARARGS,
     "scale(x, s, out, (n, rows, channels)): out[b, r, c] = x[b, r, c] * s[b, c], float32 "
     "contiguous buffers (out may be x)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_channels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__channels(void) { return PyModule_Create(&module); }
