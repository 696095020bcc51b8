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

/* The held convs' images: a float32 ndarray (its type `ndarray`) of shape (n, c, h, w)
 * laid out channels-last (the (N, H, W, C) array's transposed view, fusion_layout.py) or,
 * for one image, channels-first and C-contiguous.  Its buffer (with strides) in *view and
 * ONNXVIZ_NHWC or ONNXVIZ_NCHW; else 0, no error set, nothing held.  A dimension of size
 * one may have any stride (numpy's views give it several). */
enum { ONNXVIZ_NHWC = 1, ONNXVIZ_NCHW = 2 };

/* A 4-D float32 buffer's layout by its shape and strides: ONNXVIZ_NHWC, ONNXVIZ_NCHW
 * (one C-contiguous image) or 0.  A dimension of size one may have any stride. */
static int onnxviz_image_layout(const Py_buffer *view) {
    const Py_ssize_t *sh = view->shape, *st = view->strides;
    const Py_ssize_t n = sh[0], c = sh[1], h = sh[2], w = sh[3];
    /* Strides (bytes) of each layout. */
    const Py_ssize_t nhwc[4] = {h * w * c * 4, 4, w * c * 4, c * 4};
    const Py_ssize_t nchw[4] = {c * h * w * 4, h * w * 4, w * 4, 4};
    int is_nhwc = 1, is_nchw = n == 1;
    for (int i = 0; i < 4; i++) {
        if (sh[i] == 1) continue;
        is_nhwc = is_nhwc && st[i] == nhwc[i];
        is_nchw = is_nchw && st[i] == nchw[i];
    }
    return is_nhwc ? ONNXVIZ_NHWC : is_nchw ? ONNXVIZ_NCHW : 0;
}
static int onnxviz_image_view(PyObject *obj, PyObject *ndarray, Py_buffer *view, Py_ssize_t n,
                              Py_ssize_t c, Py_ssize_t h, Py_ssize_t w) {
    if ((PyObject *)Py_TYPE(obj) != ndarray) return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *f = view->format ? view->format : "B";
    const Py_ssize_t *sh = view->shape;
    if (f[0] != 'f' || f[1] || view->ndim != 4 || sh[0] != n || sh[1] != c || sh[2] != h ||
        sh[3] != w) {
        PyBuffer_Release(view);
        return 0;
    }
    const int layout = onnxviz_image_layout(view);
    if (!layout) PyBuffer_Release(view);
    return layout;
}

/* onnxviz_image_view for an image of any sizes (N, C, H, W): its channels-last buffer in
 * *view and 1, else 0 with nothing held. */
static int onnxviz_any_channels_last_view(PyObject *obj, PyObject *ndarray, Py_buffer *view) {
    if ((PyObject *)Py_TYPE(obj) != ndarray) return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *f = view->format ? view->format : "B";
    if (f[0] == 'f' && !f[1] && view->ndim == 4 && onnxviz_image_layout(view) == ONNXVIZ_NHWC)
        return 1;
    PyBuffer_Release(view);
    return 0;
}

/* onnxviz_image_view taking only the channels-last layout: 1 with the buffer held, else
 * 0 with nothing held. */
static int onnxviz_channels_last_view(PyObject *obj, PyObject *ndarray, Py_buffer *view,
                                      Py_ssize_t n, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w) {
    const int layout = onnxviz_image_view(obj, ndarray, view, n, c, h, w);
    if (layout == ONNXVIZ_NCHW) PyBuffer_Release(view);
    return layout == ONNXVIZ_NHWC;
}

/* A new float32 (n, m, h, w) ndarray whose data starts at a multiple of 64 bytes, laid
 * out channels-last (the (N, H, W, C) array's transposed view) or, with `channels_first`,
 * C-contiguous (kernels/nn_conv.py's aligned_empty, and its transposed view, in two
 * calls: empty(bytes, uint8), then ndarray(shape, float32, that buffer, offset,
 * strides)); its first float in *data.  NULL with the error set. */
static PyObject *onnxviz_new_aligned(PyObject *empty, PyObject *ndarray, PyObject *u8,
                                     PyObject *f32, Py_ssize_t n, Py_ssize_t m, Py_ssize_t h,
                                     Py_ssize_t w, int channels_first, float **data) {
    const Py_ssize_t bytes = n * m * h * w * 4;
    const Py_ssize_t raw_size = bytes + 64;
    PyObject *raw = onnxviz_new_array(empty, u8, 1, &raw_size);
    if (!raw) return NULL;
    Py_buffer rb;
    if (PyObject_GetBuffer(raw, &rb, PyBUF_SIMPLE) < 0) {
        Py_DECREF(raw);
        return NULL;
    }
    const Py_ssize_t start = (Py_ssize_t)((64 - (uintptr_t)rb.buf % 64) % 64);
    *data = (float *)((char *)rb.buf + start);
    PyBuffer_Release(&rb);
    PyObject *out = NULL;
    PyObject *shape = Py_BuildValue("(nnnn)", n, m, h, w);
    PyObject *strides =
        channels_first
            ? Py_BuildValue("(nnnn)", m * h * w * 4, h * w * 4, w * 4, (Py_ssize_t)4)
            : Py_BuildValue("(nnnn)", h * w * m * 4, (Py_ssize_t)4, w * m * 4, m * 4);
    PyObject *offset = PyLong_FromSsize_t(start);
    if (shape && strides && offset) {
        PyObject *args[5] = {shape, f32, raw, offset, strides};
        out = PyObject_Vectorcall(ndarray, args, 5, NULL);
    }
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(offset);
    Py_DECREF(raw);
    return out;
}

/* onnxviz_new_aligned's channels-last array. */
static PyObject *onnxviz_new_channels_last(PyObject *empty, PyObject *ndarray, PyObject *u8,
                                           PyObject *f32, Py_ssize_t n, Py_ssize_t m,
                                           Py_ssize_t h, Py_ssize_t w, float **data) {
    return onnxviz_new_aligned(empty, ndarray, u8, f32, n, m, h, w, 0, data);
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
