/* array_fields.h: numpy's array object read in place, once a probe has shown its layout.
 *
 * numpy's array object starts with the fields below (ndarraytypes.h's
 * PyArrayObject_fields: part of the binary interface numpy has kept from 1.x through
 * 2.x).  The modules here build without numpy's headers (native/__init__.py), so they
 * do not trust this layout blindly: `array_fields_probe` compares it, for a few arrays
 * Python made, with what Python sees of them (data address, shape, strides, base, dtype
 * and flags), and the direct paths that read it run only after a probe passed.  A numpy
 * laid out otherwise leaves them off and everything goes through numpy's own calls.
 *
 * Why: reading an array's dtype, shape and data through Python attributes or the buffer
 * protocol costs 40-80 ns each, more than the arithmetic of the small arrays (shape
 * arithmetic, a [1] add chain) these paths are for.
 *
 * Include after Python.h. */
#ifndef ONNXVIZ_ARRAY_FIELDS_H
#define ONNXVIZ_ARRAY_FIELDS_H

typedef struct {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} ArrayFields;

/* numpy's flag bits (ndarraytypes.h's NPY_ARRAY_*). */
enum {
    AF_C_CONTIGUOUS = 0x0001,
    AF_OWNDATA = 0x0004,
    AF_ALIGNED = 0x0100,
    AF_WRITEABLE = 0x0400,
};
#define AF_FLAGS_SEEN (AF_C_CONTIGUOUS | AF_OWNDATA | AF_ALIGNED | AF_WRITEABLE)

static inline const ArrayFields *array_fields(PyObject *a) { return (const ArrayFields *)a; }

/* The number of elements of an array whose fields the probe vouched for. */
static inline Py_ssize_t array_fields_size(const ArrayFields *a) {
    Py_ssize_t n = 1;
    for (int k = 0; k < a->nd; k++) n *= a->dimensions[k];
    return n;
}

static inline int array_fields_same_shape(const ArrayFields *a, const ArrayFields *b) {
    if (a->nd != b->nd) return 0;
    for (int k = 0; k < a->nd; k++)
        if (a->dimensions[k] != b->dimensions[k]) return 0;
    return 1;
}

/* Whether one probe, the tuple (array, data address, shape, strides, base, dtype, flags)
 * that Python read of `array` (an exact ndarray), agrees with its fields read here: 1,
 * 0 (it does not), -1 (a malformed probe, the error set). */
static int array_fields_probe_one(PyObject *probe, PyObject *ndarray) {
    PyObject *arr, *data, *shape, *strides, *base, *dtype;
    int flags;
    if (!PyArg_ParseTuple(probe, "OOO!O!OOi:probe", &arr, &data, &PyTuple_Type, &shape,
                          &PyTuple_Type, &strides, &base, &dtype, &flags))
        return -1;
    if ((PyObject *)Py_TYPE(arr) != ndarray) return 0;
    const ArrayFields *a = array_fields(arr);
    const Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    void *address = PyLong_AsVoidPtr(data);
    if (address == NULL && PyErr_Occurred()) return -1;
    if (a->nd != nd || PyTuple_GET_SIZE(strides) != nd || (void *)a->data != address ||
        a->descr != dtype || a->base != (base == Py_None ? NULL : base) ||
        (a->flags & AF_FLAGS_SEEN) != (flags & AF_FLAGS_SEEN))
        return 0;
    for (Py_ssize_t k = 0; k < nd; k++) {
        const Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
        const Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, k));
        if (PyErr_Occurred()) return -1;
        if (a->dimensions[k] != d || a->strides[k] != s) return 0;
    }
    return 1;
}

/* Whether every probe of the list agrees (1), some does not (0), or -1 (error set). */
static int array_fields_probe(PyObject *probes, PyObject *ndarray) {
    if (!PyList_Check(probes) || PyList_GET_SIZE(probes) == 0) {
        PyErr_SetString(PyExc_TypeError, "probes must be a non-empty list of tuples");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(probes); i++) {
        const int ok = array_fields_probe_one(PyList_GET_ITEM(probes, i), ndarray);
        if (ok <= 0) return ok;
    }
    return 1;
}

#endif
