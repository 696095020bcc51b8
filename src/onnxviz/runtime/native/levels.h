/* levels.h: the instruction-set levels every compiled module of onnxviz.runtime.native
 * shares (their numbers are in _cpu.c's header), the one test of which this CPU and its
 * OS can run, and the set_level every module answers with.  GCC's and Clang's
 * __builtin_cpu_supports read CPUID and check, with XGETBV, that the OS saves the wider
 * registers.  Include it after Python.h. */
#ifndef ONNXVIZ_NATIVE_LEVELS_H
#define ONNXVIZ_NATIVE_LEVELS_H

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ONNXVIZ_X86 1
#else
#define ONNXVIZ_X86 0
#endif

/* The highest level this CPU runs: 0 generic, 1 AVX2+FMA, 2 AVX-512 F/BW/DQ/VL,
 * 3 AVX-512 VNNI. */
static int onnxviz_cpu_level(void) {
#if ONNXVIZ_X86
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return 0;
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")))
        return 1;
    if (!__builtin_cpu_supports("avx512vnni")) return 2;
    return 3;
#else
    return 0;
#endif
}

/* set_level(n) for a module whose level is *level: n must be 0..3 and a level this CPU
 * runs (ValueError otherwise: its instructions would stop the process); returns it. */
static PyObject *onnxviz_set_level(int *level, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0 || n > 3) {
        PyErr_SetString(PyExc_ValueError, "set_level: level must be 0..3");
        return NULL;
    }
    if (n > onnxviz_cpu_level()) {
        PyErr_Format(PyExc_ValueError, "set_level: this CPU cannot run level %ld", n);
        return NULL;
    }
    *level = (int)n;
    return PyLong_FromLong(n);
}

/* A module's set_level(n) and level(), for its static int `level` (every module but _cpu
 * and _int8: ONNXVIZ_LEVEL_FUNCTIONS after `level`, ONNXVIZ_LEVEL_METHODS in its table). */
#define ONNXVIZ_LEVEL_FUNCTIONS                                                            \
    static PyObject *py_set_level(PyObject *self, PyObject *arg) {                         \
        (void)self;                                                                        \
        return onnxviz_set_level(&level, arg);                                             \
    }                                                                                      \
    static PyObject *py_get_level(PyObject *self, PyObject *args) {                        \
        (void)self;                                                                        \
        (void)args;                                                                        \
        return PyLong_FromLong(level);                                                     \
    }

#define ONNXVIZ_LEVEL_METHODS                                                              \
    {"set_level", py_set_level, METH_O,                                                    \
     "set_level(n): run the level-n code path (0 generic, 1 AVX2, 2-3 AVX-512); "          \
     "ValueError when this CPU lacks its instructions."},                                  \
        {"level", py_get_level, METH_NOARGS, "The level set."},

/* A C-contiguous float32 buffer of at least `count` floats (exactly, when `exact`;
 * writable when asked) in *view, 0; or -1 with ValueError naming `name` (or the buffer
 * protocol's own error).  Every module's one check of the buffers it is given. */
static int onnxviz_get_floats(PyObject *obj, Py_buffer *view, Py_ssize_t count, int exact,
                              int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    if (f[0] != 'f' || f[1] != '\0' || view->itemsize != 4) {
        PyErr_Format(PyExc_ValueError, "%s: expected a float32 buffer", name);
        PyBuffer_Release(view);
        return -1;
    }
    if (exact ? view->len != count * 4 : view->len < count * 4) {
        PyErr_Format(PyExc_ValueError, "%s: expected %s%zd floats, got %zd", name,
                     exact ? "" : "at least ", count, view->len / 4);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The held calls (a C object that runs a node's common case and hands every other call
 * to the Python call it fronts) test what they take with these two. */

/* `obj` an ndarray itself (its type `ndarray`: no subclass), C-contiguous, of the
 * one-character buffer format `fmt` (native byte order, as numpy gives it) and `ndim`
 * dimensions (< 0: any), each of `sizes` (NULL, or -1 in it: any): its buffer in *view
 * and 1; else 0, with no error set and nothing held. */
static int onnxviz_array_view(PyObject *obj, PyObject *ndarray, Py_buffer *view, char fmt,
                              int ndim, const Py_ssize_t *sizes) {
    if ((PyObject *)Py_TYPE(obj) != ndarray) return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear(); /* not C-contiguous, or no buffer: not taken */
        return 0;
    }
    const char *f = view->format ? view->format : "B";
    int ok = f[0] == fmt && !f[1] && (ndim < 0 || view->ndim == ndim);
    for (int i = 0; ok && sizes && i < view->ndim; i++)
        ok = sizes[i] < 0 || view->shape[i] == sizes[i];
    if (!ok) PyBuffer_Release(view);
    return ok;
}

/* empty(shape, dtype) for the `ndim` sizes: a held call's new output by the numpy.empty
 * and dtype objects it keeps; NULL with the error set. */
static PyObject *onnxviz_new_array(PyObject *empty, PyObject *dtype, int ndim,
                                   const Py_ssize_t *sizes) {
    PyObject *shape = PyTuple_New(ndim);
    if (!shape) return NULL;
    for (int i = 0; i < ndim; i++) {
        PyObject *dim = PyLong_FromSsize_t(sizes[i]);
        if (!dim) {
            Py_DECREF(shape);
            return NULL;
        }
        PyTuple_SET_ITEM(shape, i, dim);
    }
    PyObject *args[2] = {shape, dtype};
    PyObject *out = PyObject_Vectorcall(empty, args, 2, NULL);
    Py_DECREF(shape);
    return out;
}

/* x (read) and y (written), float32 buffers of one length, for an elementwise function
 * `name` (y may be x); 0, or -1 with the error set and neither held. */
static int onnxviz_get_float_pair(PyObject *xo, PyObject *yo, Py_buffer *x, Py_buffer *y,
                                  const char *name) {
    if (onnxviz_get_floats(xo, x, 0, 0, 0, name) < 0) return -1;
    if (onnxviz_get_floats(yo, y, 0, 0, 1, name) < 0) {
        PyBuffer_Release(x);
        return -1;
    }
    if (x->len != y->len) {
        PyBuffer_Release(x);
        PyBuffer_Release(y);
        PyErr_Format(PyExc_ValueError, "%s: x and y differ in length", name);
        return -1;
    }
    return 0;
}

#endif
