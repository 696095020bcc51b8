/* held_call.h: what the held convs and pools share (a fused node's `quick` call or a
 * node's specialized call made in C, which takes the common case and hands every other
 * call to the Python call it fronts): the arguments they compare by identity, the
 * fallback, and the numpy objects they make their outputs with.
 *
 * A held type puts a HeldCall in its struct, fills it with held_call_init from its
 * constructor's arguments, starts its call with held_call_takes (else returns
 * held_call_other), and visits, clears and frees it with the three helpers below.
 * Include after Python.h and levels.h. */
#ifndef ONNXVIZ_HELD_CALL_H
#define ONNXVIZ_HELD_CALL_H

typedef struct {
    PyObject *places;   /* tuple of argument positions (ints) */
    PyObject *expect;   /* tuple of the objects those arguments must be */
    PyObject *fallback; /* what every call not taken goes to, with the same arguments */
    PyObject *ndarray, *empty, *u8, *f32; /* numpy.ndarray, numpy.empty, the two dtypes */
    Py_ssize_t nargs;    /* the positional arguments a call has */
    Py_ssize_t residual; /* the addend's position, or -1 */
} HeldCall;

/* Checks and keeps the construction's common arguments: 0, or -1 with ValueError naming
 * `name` (places and expect of one length, every place and the residual inside the
 * arguments and not the image's, argument `image`; no place the residual's). */
static int held_call_init_at(HeldCall *h, PyObject *places, PyObject *expect,
                             PyObject *fallback, PyObject *ndarray, PyObject *empty,
                             PyObject *u8, PyObject *f32, Py_ssize_t nargs, Py_ssize_t residual,
                             Py_ssize_t image, const char *name) {
    memset(h, 0, sizeof *h);
    if (!PyTuple_Check(places) || !PyTuple_Check(expect) ||
        PyTuple_GET_SIZE(places) != PyTuple_GET_SIZE(expect) || nargs < 1 || image < 0 ||
        image >= nargs || residual >= nargs || residual == image || residual < -1 ||
        !PyCallable_Check(fallback) || !PyCallable_Check(empty) || !PyCallable_Check(ndarray)) {
        PyErr_Format(PyExc_ValueError, "%s: bad argument count, places or callables", name);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(places); i++) {
        const Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(places, i));
        if (at < 0 || at >= nargs || at == image || at == residual) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s: a place out of the arguments", name);
            return -1;
        }
    }
    h->places = Py_NewRef(places);
    h->expect = Py_NewRef(expect);
    h->fallback = Py_NewRef(fallback);
    h->ndarray = Py_NewRef(ndarray);
    h->empty = Py_NewRef(empty);
    h->u8 = Py_NewRef(u8);
    h->f32 = Py_NewRef(f32);
    h->nargs = nargs;
    h->residual = residual;
    return 0;
}

/* held_call_init_at with the image first, as the convs, pools and concat take it. */
static int held_call_init(HeldCall *h, PyObject *places, PyObject *expect, PyObject *fallback,
                          PyObject *ndarray, PyObject *empty, PyObject *u8, PyObject *f32,
                          Py_ssize_t nargs, Py_ssize_t residual, const char *name) {
    return held_call_init_at(h, places, expect, fallback, ndarray, empty, u8, f32, nargs,
                             residual, 0, name);
}

/* Whether a call has the held call's argument count, no keywords, and its constants (by
 * identity) at their places. */
static int held_call_takes(const HeldCall *h, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames) {
    if (kwnames || PyVectorcall_NARGS(nargsf) != h->nargs) return 0;
    const Py_ssize_t n = PyTuple_GET_SIZE(h->expect);
    for (Py_ssize_t i = 0; i < n; i++) {
        const Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(h->places, i));
        if (args[at] != PyTuple_GET_ITEM(h->expect, i)) return 0;
    }
    return 1;
}

static PyObject *held_call_other(const HeldCall *h, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    return PyObject_Vectorcall(h->fallback, args, nargsf, kwnames);
}

/* The objects a cycle can run through (the rest are numpy's own). */
static int held_call_traverse(const HeldCall *h, visitproc visit, void *arg) {
    Py_VISIT(h->expect);
    Py_VISIT(h->fallback);
    return 0;
}

static void held_call_clear(HeldCall *h) {
    Py_CLEAR(h->expect);
    Py_CLEAR(h->fallback);
}

static void held_call_free(HeldCall *h) {
    held_call_clear(h);
    Py_CLEAR(h->places);
    Py_CLEAR(h->ndarray);
    Py_CLEAR(h->empty);
    Py_CLEAR(h->u8);
    Py_CLEAR(h->f32);
}

/* Whether the residual `r` (whose buffer the caller holds: one reference) may take a held
 * conv's output in place, when the call was made with the promise that the caller's slot
 * of it dies at the call (fusion.ConvChain.residual_dies): the run loop's reference and
 * that slot's are the only others, it is writable, and its memory is its own or its base
 * array's, which owns its data and which no other view holds (an output of a conv: a view
 * of an aligned buffer). */
static int held_residual_is_dead(PyObject *r, PyObject *ndarray) {
    static PyObject *base_name = NULL; /* interned once per module */
    if (Py_REFCNT(r) != 3) return 0;
    if (!base_name && !(base_name = PyUnicode_InternFromString("base"))) {
        PyErr_Clear();
        return 0;
    }
    PyObject *base = PyObject_GetAttr(r, base_name);
    if (!base) {
        PyErr_Clear();
        return 0;
    }
    int ok = base == Py_None;
    if (!ok && (PyObject *)Py_TYPE(base) == ndarray && Py_REFCNT(base) == 2) {
        PyObject *owner = PyObject_GetAttr(base, base_name); /* None: base owns its data */
        ok = owner == Py_None;
        if (!owner) PyErr_Clear();
        Py_XDECREF(owner);
    }
    Py_DECREF(base);
    Py_buffer wb;
    if (!ok || PyObject_GetBuffer(r, &wb, PyBUF_STRIDES | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        return 0;
    }
    PyBuffer_Release(&wb);
    return 1;
}

/* A held conv's constant weight (`count` floats exactly) and bias (or None), their
 * buffers kept for its life. */
typedef struct {
    PyObject *w_obj, *bias_obj; /* NULL until taken */
    Py_buffer wb, bb;
} HeldWeights;

/* 0, or -1 with the error set (what was taken is let go by held_weights_release). */
static int held_weights_take(HeldWeights *hw, PyObject *wo, Py_ssize_t w_count, PyObject *bo,
                             Py_ssize_t bias_count) {
    if (onnxviz_get_floats(wo, &hw->wb, w_count, 1, 0, "w") < 0) return -1;
    hw->w_obj = Py_NewRef(wo);
    if (bo != Py_None) {
        if (onnxviz_get_floats(bo, &hw->bb, bias_count, 1, 0, "bias") < 0) return -1;
        hw->bias_obj = Py_NewRef(bo);
    }
    return 0;
}

static const float *held_weights_bias(const HeldWeights *hw) {
    return hw->bias_obj ? hw->bb.buf : NULL;
}

static void held_weights_release(HeldWeights *hw) {
    if (hw->w_obj) PyBuffer_Release(&hw->wb);
    if (hw->bias_obj) PyBuffer_Release(&hw->bb);
    Py_CLEAR(hw->w_obj);
    Py_CLEAR(hw->bias_obj);
}

/* The type of a held call: `Struct` starts with PyObject_HEAD, a vectorcallfunc
 * `vectorcall` and a HeldCall `call`; `release(Struct *)` lets go of its own fields (its
 * buffers and their objects) when it is freed.  Defines PREFIX_traverse, PREFIX_clear,
 * PREFIX_dealloc, PREFIX_members (the read-only `fallback`) and the type object TYPE,
 * named NAME (tp_name) with DOC. */
#define HELD_CALL_TYPE(Struct, TYPE, PREFIX, NAME, DOC, release)                            \
    static int PREFIX##_traverse(PyObject *obj, visitproc visit, void *arg) {              \
        return held_call_traverse(&((Struct *)obj)->call, visit, arg);                     \
    }                                                                                      \
    static int PREFIX##_clear(PyObject *obj) {                                             \
        held_call_clear(&((Struct *)obj)->call);                                           \
        return 0;                                                                          \
    }                                                                                      \
    static void PREFIX##_dealloc(PyObject *obj) {                                          \
        PyObject_GC_UnTrack(obj);                                                          \
        release((Struct *)obj);                                                            \
        held_call_free(&((Struct *)obj)->call);                                            \
        PyObject_GC_Del(obj);                                                              \
    }                                                                                      \
    static PyMemberDef PREFIX##_members[] = {                                              \
        {"fallback", T_OBJECT, offsetof(Struct, call.fallback), READONLY,                  \
         "What the calls it does not take go to."},                                        \
        {NULL, 0, 0, 0, NULL},                                                             \
    };                                                                                     \
    static PyTypeObject TYPE = {                                                           \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = NAME,                                     \
        .tp_basicsize = sizeof(Struct),                                                    \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,  \
        .tp_vectorcall_offset = offsetof(Struct, vectorcall),                              \
        .tp_call = PyVectorcall_Call,                                                      \
        .tp_traverse = PREFIX##_traverse,                                                  \
        .tp_clear = PREFIX##_clear,                                                        \
        .tp_dealloc = PREFIX##_dealloc,                                                    \
        .tp_members = PREFIX##_members,                                                    \
        .tp_doc = DOC,                                                                     \
    };

/* A new held call of `type` (its struct `size` bytes, zeroed past the head) with no
 * constants to compare (a pool's, a concat's: `nargs` arguments, no residual), tracked;
 * NULL with the error set. */
static PyObject *held_call_new_plain(PyTypeObject *type, vectorcallfunc call, size_t offset,
                                     Py_ssize_t nargs, PyObject *fallback, PyObject *ndarray,
                                     PyObject *empty, PyObject *u8, PyObject *f32,
                                     const char *name) {
    PyObject *obj = PyObject_GC_New(PyObject, type);
    if (!obj) return NULL;
    memset((char *)obj + sizeof(PyObject), 0, (size_t)type->tp_basicsize - sizeof(PyObject));
    *(vectorcallfunc *)((char *)obj + type->tp_vectorcall_offset) = call;
    PyObject *none = PyTuple_New(0);
    const int rc = none ? held_call_init((HeldCall *)((char *)obj + offset), none, none,
                                         fallback, ndarray, empty, u8, f32, nargs, -1, name)
                        : -1;
    Py_XDECREF(none);
    if (rc < 0) {
        PyObject_GC_Del(obj); /* nothing held yet, not tracked */
        return NULL;
    }
    PyObject_GC_Track(obj);
    return obj;
}

#endif
