/* onnxviz.runtime.native._col2im: the column-to-image step of a 2-D ConvTranspose whose
 * kernel equals its stride (a UNet's 2x2/2 upsampling), in one pass.
 *
 *   tile2d(cols, image, planes, channels, ih, iw, kh, kw, bias)
 *
 * cols: float32 (planes, kh, kw, ih, iw), C-contiguous (the GEMM's output: per output
 * plane, per kernel offset, the input-sized image of that offset's products); image:
 * float32 (planes, ih * kh, iw * kw), C-contiguous, written whole:
 *
 *   image[p, i * kh + a, j * kw + b] = cols[p, a, b, i, j] (+ bias[p % channels])
 *
 * With kernel == stride the windows tile the image without overlap, so this is a copy
 * (plus the bias, one float32 add as numpy's).  bias: a float32 buffer of `channels`
 * values, or None.  The same bits as the numpy path (kernels/nn_conv.py `_tile_windows`),
 * whose strided copies run numpy's inner loop over rows of iw elements with a stride of
 * kw: 90-145 us on a small UNet's upsamplings, where onnxruntime's whole node took 25.
 * Plain C, written in the image's order (each output row once). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <stdint.h>
#include <string.h>


static void tile2d(const float *cols, float *image, Py_ssize_t planes, Py_ssize_t channels,
                   Py_ssize_t ih, Py_ssize_t iw, Py_ssize_t kh, Py_ssize_t kw,
                   const float *bias) {
    const Py_ssize_t ow = iw * kw, area = ih * iw;
    for (Py_ssize_t p = 0; p < planes; p++) {
        const float *src = cols + p * kh * kw * area;
        float *dst = image + p * ih * kh * ow;
        const float add = bias ? bias[p % channels] : 0.0f;
        for (Py_ssize_t i = 0; i < ih; i++) {
            for (Py_ssize_t a = 0; a < kh; a++) {
                float *row = dst + (i * kh + a) * ow;
                if (kw == 2) { /* the common 2x2: two interleaved rows of products */
                    const float *s0 = src + (a * 2) * area + i * iw;
                    const float *s1 = s0 + area;
                    if (bias) {
                        for (Py_ssize_t j = 0; j < iw; j++) {
                            row[2 * j] = s0[j] + add;
                            row[2 * j + 1] = s1[j] + add;
                        }
                    } else {
                        for (Py_ssize_t j = 0; j < iw; j++) {
                            row[2 * j] = s0[j];
                            row[2 * j + 1] = s1[j];
                        }
                    }
                    continue;
                }
                for (Py_ssize_t b = 0; b < kw; b++) {
                    const float *s = src + (a * kw + b) * area + i * iw;
                    if (bias)
                        for (Py_ssize_t j = 0; j < iw; j++) row[j * kw + b] = s[j] + add;
                    else
                        for (Py_ssize_t j = 0; j < iw; j++) row[j * kw + b] = s[j];
                }
            }
        }
    }
}

static PyObject *py_tile2d(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *co, *io, *bo;
    Py_ssize_t planes, channels, ih, iw, kh, kw;
    if (!PyArg_ParseTuple(args, "OOnnnnnnO:tile2d", &co, &io, &planes, &channels, &ih, &iw,
                          &kh, &kw, &bo))
        return NULL;
    if (planes < 0 || channels < 1 || ih < 0 || iw < 0 || kh < 1 || kw < 1 ||
        (planes && planes % channels)) {
        PyErr_SetString(PyExc_ValueError, "tile2d: sizes out of range");
        return NULL;
    }
    const Py_ssize_t count = planes * kh * kw * ih * iw;
    Py_buffer cv, iv, bv;
    if (onnxviz_get_floats(co, &cv, count, 1, 0, "tile2d: cols") < 0) return NULL;
    if (onnxviz_get_floats(io, &iv, count, 1, 1, "tile2d: image") < 0) {
        PyBuffer_Release(&cv);
        return NULL;
    }
    const float *bias = NULL;
    int has_bias = bo != Py_None;
    if (has_bias) {
        if (onnxviz_get_floats(bo, &bv, channels, 1, 0, "tile2d: bias") < 0) {
            PyBuffer_Release(&cv);
            PyBuffer_Release(&iv);
            return NULL;
        }
        bias = bv.buf;
    }
    if (cv.buf == iv.buf) {
        PyErr_SetString(PyExc_ValueError, "tile2d: cols and image must not be one buffer");
    } else {
        Py_BEGIN_ALLOW_THREADS;
        tile2d(cv.buf, iv.buf, planes, channels, ih, iw, kh, kw, bias);
        Py_END_ALLOW_THREADS;
    }
    PyBuffer_Release(&cv);
    PyBuffer_Release(&iv);
    if (has_bias) PyBuffer_Release(&bv);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static int level = 0; /* plain C at every level: kept for the modules' common interface */

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"tile2d", py_tile2d, METH_VARARGS,
     "tile2d(cols, image, planes, channels, ih, iw, kh, kw, bias): image[p, i*kh+a, j*kw+b] = "
     "cols[p, a, b, i, j] (+ bias[p % channels]); float32 C-contiguous buffers."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_col2im", NULL, -1, methods};

PyMODINIT_FUNC PyInit__col2im(void) { return PyModule_Create(&module); }
