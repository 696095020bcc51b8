/* onnxviz.runtime.native._cpu: which instruction sets this CPU (and its OS) offers the
 * compiled kernels.  GCC's and Clang's __builtin_cpu_supports read CPUID and check, with
 * XGETBV, that the OS saves the wider registers, so a level reported here is safe to run.
 *
 * Levels (every kernel module uses the same numbers):
 *   0  generic: plain C, whatever the compiler's baseline for the platform is
 *   1  AVX2 + FMA (Haswell, Zen and later)
 *   2  AVX-512 F/BW/DQ/VL (Skylake-X, Ice Lake, Zen 4 and later)
 *   3  level 2 plus AVX-512 VNNI (int8 dot products: Cascade Lake, Ice Lake, Zen 4) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"


static PyObject *py_best_level(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(onnxviz_cpu_level());
}

static PyMethodDef methods[] = {
    {"best_level", py_best_level, METH_NOARGS,
     "The highest kernel level this CPU and OS can run (0 generic, 1 AVX2+FMA, "
     "2 AVX-512, 3 AVX-512 VNNI)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cpu(void) { return PyModule_Create(&module); }
