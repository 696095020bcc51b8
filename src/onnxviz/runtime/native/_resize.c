/* onnxviz.runtime.native._resize: nearest upsampling by whole factors, as a copy.
 *
 *   repeat(x, out, (planes, h, w), (rh, rw)): out[p, i * rh + a, j * rw + b] = x[p, i, j]
 *   for a < rh, b < rw; x and out C-contiguous buffers of 4-byte items (float32, int32:
 *   the values are copied, never computed), out planes * h * rh * w * rw items.
 *
 * A UNet's or a detector's 2x nearest Resize (nn_resize._repeat): numpy's four strided
 * copies of a 64-channel 16 x 16 image took 110 us, onnxruntime's 12.  Here each input
 * row is widened once (at AVX2 with rw = 2: 8 items become 16 by two unpacks and two lane
 * permutes) into the first of its rh output rows, which the others copy.
 *
 * Levels (native/__init__.py): 0 generic C; 1 and up AVX2 for rw = 2. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <stdint.h>
#include <string.h>

#if ONNXVIZ_X86
#include <immintrin.h>
#endif

static int level = 0;
ONNXVIZ_LEVEL_FUNCTIONS

/* One input row of w items widened by rw into dst (w * rw items). */
static void widen_generic(const uint32_t *src, uint32_t *dst, Py_ssize_t w, Py_ssize_t rw) {
    for (Py_ssize_t j = 0; j < w; j++)
        for (Py_ssize_t b = 0; b < rw; b++) dst[j * rw + b] = src[j];
}

#if ONNXVIZ_X86
__attribute__((target("avx2"))) static void widen2_avx2(const uint32_t *src, uint32_t *dst,
                                                         Py_ssize_t w) {
    Py_ssize_t j = 0;
    for (; j + 8 <= w; j += 8) {
        const __m256 v = _mm256_loadu_ps((const float *)(src + j));
        const __m256 lo = _mm256_unpacklo_ps(v, v), hi = _mm256_unpackhi_ps(v, v);
        _mm256_storeu_ps((float *)(dst + 2 * j), _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps((float *)(dst + 2 * j + 8), _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    for (; j < w; j++) dst[2 * j] = dst[2 * j + 1] = src[j];
}
#endif

static PyObject *py_repeat(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer xb, ob;
    Py_ssize_t planes, h, w, rh, rw;
    if (!PyArg_ParseTuple(args, "y*w*(nnn)(nn):repeat", &xb, &ob, &planes, &h, &w, &rh, &rw))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 40;
    if (planes < 0 || h < 0 || w < 0 || rh < 1 || rw < 1 || planes > limit || h > limit ||
        w > limit || rh > 4096 || rw > 4096) {
        PyErr_SetString(PyExc_ValueError, "repeat: sizes out of range");
        goto done;
    }
    {
        const double items = (double)planes * (double)h * (double)w;
        if (items * (double)rh * (double)rw > (double)limit) {
            PyErr_SetString(PyExc_ValueError, "repeat: sizes out of range");
            goto done;
        }
    }
    if (xb.itemsize != 4 || ob.itemsize != 4 || xb.len != planes * h * w * 4 ||
        ob.len != planes * h * w * rh * rw * 4 || !PyBuffer_IsContiguous(&xb, 'C') ||
        !PyBuffer_IsContiguous(&ob, 'C')) {
        PyErr_SetString(PyExc_ValueError,
                        "repeat: x and out must be C-contiguous 4-byte items of the sizes given");
        goto done;
    }
    {
        const uint32_t *x = xb.buf;
        uint32_t *out = ob.buf;
        const Py_ssize_t ow = w * rw;
        const int fast2 = ONNXVIZ_X86 && level >= 1 && rw == 2;
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t p = 0; p < planes; p++)
            for (Py_ssize_t i = 0; i < h; i++) {
                const uint32_t *src = x + (p * h + i) * w;
                uint32_t *first = out + (p * h + i) * rh * ow;
#if ONNXVIZ_X86
                if (fast2)
                    widen2_avx2(src, first, w);
                else
#endif
                    widen_generic(src, first, w, rw);
                for (Py_ssize_t a = 1; a < rh; a++)
                    memcpy(first + a * ow, first, (size_t)ow * 4);
            }
        Py_END_ALLOW_THREADS;
        (void)fast2;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&xb);
    PyBuffer_Release(&ob);
    return result;
}

static PyMethodDef methods[] = {
    {"repeat", py_repeat, METH_VARARGS,
     "repeat(x, out, (planes, h, w), (rh, rw)): out[p, i*rh + a, j*rw + b] = x[p, i, j]; "
     "C-contiguous buffers of 4-byte items."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_resize", NULL, -1, methods};

PyMODINIT_FUNC PyInit__resize(void) { return PyModule_Create(&module); }
