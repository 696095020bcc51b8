/* onnxviz.runtime.native._erf: the float32 error function in one pass.
 *
 *   erf(x, y): y = erf(x) element by element; x and y contiguous float32 buffers of one
 *   length (y may be x).
 *
 * The function is vector_math.h's erf (a polynomial below 1, one of three by unit
 * interval from 1 to 4, within 1.1 ulp), one pass where kernels/math_erf.py's numpy form
 * tanh(x P(x^2)) makes 17 per block.  Every level gives the same bits (vector_math.h);
 * they are not the numpy path's, so both run modes call this kernel: the plain Erf
 * kernel, Gelu and the fused elementwise chains (native/_chain.c) alike.
 *
 * Levels (native/__init__.py): 0 generic C (4-lane vectors); 1 AVX2; 2 and 3 AVX-512F. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include "vector_types.h"
#include <stdint.h>
#include <string.h>


static int level = 0;

#define VECTOR_LEVEL_BODY /* vector_math.h's erf_buffer is the whole kernel */
#include "vector_levels.h"

static PyObject *py_erf(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *yo;
    if (!PyArg_ParseTuple(args, "OO:erf", &xo, &yo)) return NULL;
    Py_buffer xv, yv;
    if (onnxviz_get_float_pair(xo, yo, &xv, &yv, "erf") < 0) return NULL;
    const float *x = xv.buf;
    float *y = yv.buf;
    const Py_ssize_t n = xv.len / 4;
    Py_BEGIN_ALLOW_THREADS;
#if ONNXVIZ_X86
    if (level >= 2)
        erf_buffer_avx512(x, y, n);
    else if (level == 1)
        erf_buffer_avx2(x, y, n);
    else
#endif
        erf_buffer_generic(x, y, n);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&xv);
    PyBuffer_Release(&yv);
    Py_RETURN_NONE;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"erf", py_erf, METH_VARARGS,
     "erf(x, y): y = erf(x), float32 contiguous buffers of one length (y may be x)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_erf", NULL, -1, methods};

PyMODINIT_FUNC PyInit__erf(void) { return PyModule_Create(&module); }
