/* onnxviz.runtime.native._norm: layer and RMS normalisation of float32 rows, one read
 * and one write of each row.
 *
 *   norm(x, y, cols, epsilon, rms, gamma, beta, skip, bias, total, mean, inv_std):
 *   over each row of `cols` floats of x (its length a multiple of cols), optionally
 *   first s = (x + skip) + bias (written to `total` when given), then
 *   y = (s - mean) / sqrt(var + epsilon) * gamma + beta, or for rms
 *   y = s / sqrt(mean(s^2) + epsilon) * gamma; mean and inv_std (rows floats each, may
 *   be None) get each row's mean (0 for rms) and 1 / sqrt(var + epsilon).  gamma, beta
 *   and bias are `cols` floats or None; skip and total x's length or None.  y may be x
 *   when there is no skip or bias; total must not overlap y.
 *
 * Accuracy (norm_rows.h has how): with n_i the exact normalised value of row element i
 * (the float32 s, epsilon rounded to float32 by the caller, in exact arithmetic),
 * |y_i - (n_i gamma_i + beta_i)| <= 8 * 2^-24 * (|gamma_i| (|n_i| + 1) + |beta_i|)
 * whatever the row's offset or magnitude (tests/runtime/test_native_norm.py: widths 1 to
 * 4096); mean and inv_std within 2^-23 relative (where float32 can hold them).  Levels
 * sum in different orders, so their last bits may differ.  A row whose variance +
 * epsilon is negative or NaN calls libm's sqrt (errno), once per such row.
 *
 * Levels (native/__init__.py): 0 generic C (4-lane vectors); 1 AVX2; 2 and 3 AVX-512F. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "levels.h"
#include "vector_types.h"
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if ONNXVIZ_X86
#include <immintrin.h>
#endif


/* Half-width float and double vectors (the statistics run in double). */
typedef float v2f __attribute__((vector_size(8)));
typedef double v2d __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));

typedef struct {
    const float *x, *skip, *bias, *gamma, *beta;
    float *y, *total, *mean, *inv_std;
    Py_ssize_t rows, cols;
    double epsilon;
    int rms;
} NormJob;

static int level = 0;

#define SFX generic
#define VF v4f
#define VH v2f
#define VD v2d
#define VW 4
#define ATTR
#include "norm_rows.h"
#undef SFX
#undef VF
#undef VH
#undef VD
#undef VW
#undef ATTR

#if ONNXVIZ_X86
#define SFX avx2
#define VF v8f
#define VH v4f
#define VD v4d
#define VW 8
#define ATTR __attribute__((target("avx2,fma")))
#define NR_CVT(h) ((v4d)_mm256_cvtps_pd((__m128)(h)))
#include "norm_rows.h"
#undef NR_CVT
#undef SFX
#undef VF
#undef VH
#undef VD
#undef VW
#undef ATTR

#define SFX avx512
#define VF v16f
#define VH v8f
#define VD v8d
#define VW 16
#define ATTR __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define NR_CVT(h) ((v8d)_mm512_cvtps_pd((__m256)(h)))
#include "norm_rows.h"
#undef NR_CVT
#undef SFX
#undef VF
#undef VH
#undef VD
#undef VW
#undef ATTR
#endif

static void norm_job(NormJob *job) {
#if ONNXVIZ_X86
    if (level >= 2)
        norm_rows_avx512(job);
    else if (level == 1)
        norm_rows_avx2(job);
    else
#endif
        norm_rows_generic(job);
}

/* An optional float32 buffer (None: view->buf stays NULL); 0 or -1 with the error set. */
static int optional_floats(PyObject *obj, Py_buffer *view, Py_ssize_t count, int writable,
                           const char *name) {
    view->buf = NULL;
    view->obj = NULL;
    if (obj == Py_None) return 0;
    return onnxviz_get_floats(obj, view, count, 1, writable, name);
}

static PyObject *py_norm(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *yo, *go, *bo, *so, *bio, *to, *mo, *io;
    Py_ssize_t cols;
    double epsilon;
    int rms;
    if (!PyArg_ParseTuple(args, "OOndpOOOOOOO:norm", &xo, &yo, &cols, &epsilon, &rms, &go,
                          &bo, &so, &bio, &to, &mo, &io))
        return NULL;
    if (cols < 1) {
        PyErr_SetString(PyExc_ValueError, "norm: cols must be at least 1");
        return NULL;
    }
    enum { X, Y, G, B, S, BI, T, M, I, NVIEWS };
    Py_buffer v[NVIEWS];
    for (int k = 0; k < NVIEWS; k++) v[k].buf = NULL, v[k].obj = NULL;
    PyObject *result = NULL;
    if (onnxviz_get_floats(xo, &v[X], 0, 0, 0, "norm x") < 0) goto done;
    const Py_ssize_t len = v[X].len / 4;
    if (len % cols) {
        PyErr_SetString(PyExc_ValueError, "norm: x's length is not a multiple of cols");
        goto done;
    }
    const Py_ssize_t rows = len / cols;
    if (onnxviz_get_floats(yo, &v[Y], len, 1, 1, "norm y") < 0) goto done;
    if (optional_floats(go, &v[G], cols, 0, "norm gamma") < 0) goto done;
    if (optional_floats(bo, &v[B], cols, 0, "norm beta") < 0) goto done;
    if (optional_floats(so, &v[S], len, 0, "norm skip") < 0) goto done;
    if (optional_floats(bio, &v[BI], cols, 0, "norm bias") < 0) goto done;
    if (optional_floats(to, &v[T], len, 1, "norm total") < 0) goto done;
    if (optional_floats(mo, &v[M], rows, 1, "norm mean") < 0) goto done;
    if (optional_floats(io, &v[I], rows, 1, "norm inv_std") < 0) goto done;
    NormJob job = {
        .x = v[X].buf, .skip = v[S].buf, .bias = v[BI].buf, .gamma = v[G].buf,
        .beta = v[B].buf, .y = v[Y].buf, .total = v[T].buf, .mean = v[M].buf,
        .inv_std = v[I].buf, .rows = rows, .cols = cols, .epsilon = epsilon, .rms = rms,
    };
    Py_BEGIN_ALLOW_THREADS;
    norm_job(&job);
    Py_END_ALLOW_THREADS;
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (int k = 0; k < NVIEWS; k++)
        if (v[k].obj != NULL) PyBuffer_Release(&v[k]);
    return result;
}

/* ---- a held norm: a node's call with its constant rows ------------------------------
 *
 * `held(...)` makes the callable a norm node's specialized call (kernels/row_norm.py's
 * `specialize`) fronts: called with the node's inputs, it checks the constants by
 * identity, x (and the skip) as float32 C-contiguous ndarrays of `cols` columns (the
 * skip of x's shape), makes the outputs the node has by numpy.empty and runs the rows,
 * from the node loop's call to the result: the Python call's checks, four numpy.empty
 * and list were most of a decoder norm's 4 us.  Anything else goes to `fallback`. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *rows_obj[3]; /* gamma, beta, bias or NULL */
    Py_buffer rows_view[3];
    PyObject *expect; /* ((index, object), ...) */
    PyObject *picks;  /* per output, 0 y, 1 mean, 2 inv_std, 3 total */
    PyObject *fallback, *ndarray, *empty, *dtype;
    Py_ssize_t cols;
    double epsilon;
    int rms, skip, single, ndim; /* ndim: x's rank it takes (0: any) */
} HeldNorm;

static PyObject *held_other(HeldNorm *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames) {
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* A new float32 array of x's shape (`keep_last`: its last size 1, a row statistic). */
static PyObject *held_empty(HeldNorm *self, const Py_buffer *x, int keep_last) {
    Py_ssize_t sizes[PyBUF_MAX_NDIM];
    memcpy(sizes, x->shape, (size_t)x->ndim * sizeof(Py_ssize_t));
    if (keep_last) sizes[x->ndim - 1] = 1;
    return onnxviz_new_array(self->empty, self->dtype, x->ndim, sizes);
}

/* A float32 C-contiguous ndarray of rows of `cols` (at least one row). */
static int f32_rows(PyObject *obj, PyObject *ndarray, Py_buffer *view, Py_ssize_t cols) {
    if (!onnxviz_array_view(obj, ndarray, view, 'f', -1, NULL)) return 0;
    if (view->ndim >= 1 && view->shape[view->ndim - 1] == cols && view->len > 0) return 1;
    PyBuffer_Release(view);
    return 0;
}

static PyObject *held_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    HeldNorm *self = (HeldNorm *)obj;
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames || nargs < 1 + self->skip) return held_other(self, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->expect); i++) {
        PyObject *pair = PyTuple_GET_ITEM(self->expect, i);
        const Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0));
        if (at >= nargs || args[at] != PyTuple_GET_ITEM(pair, 1))
            return held_other(self, args, nargsf, kwnames);
    }
    Py_buffer xv, sv;
    if (!f32_rows(args[0], self->ndarray, &xv, self->cols))
        return held_other(self, args, nargsf, kwnames);
    if (self->ndim && xv.ndim != self->ndim) {
        PyBuffer_Release(&xv);
        return held_other(self, args, nargsf, kwnames);
    }
    if (self->skip) {
        int same = f32_rows(args[1], self->ndarray, &sv, self->cols);
        if (same && (sv.ndim != xv.ndim || memcmp(sv.shape, xv.shape, xv.ndim * sizeof(Py_ssize_t)))) {
            PyBuffer_Release(&sv);
            same = 0;
        }
        if (!same) {
            PyBuffer_Release(&xv);
            return held_other(self, args, nargsf, kwnames);
        }
    }
    const Py_ssize_t n_out = PyTuple_GET_SIZE(self->picks);
    PyObject *outs[4] = {NULL, NULL, NULL, NULL};
    int want[4] = {1, 0, 0, 0};
    for (Py_ssize_t k = 0; k < n_out; k++)
        want[PyLong_AsLong(PyTuple_GET_ITEM(self->picks, k)) & 3] = 1;
    PyObject *result = NULL;
    Py_buffer ov[4];
    int got[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) {
        if (!want[k]) continue;
        outs[k] = held_empty(self, &xv, k == 1 || k == 2);
        if (!outs[k] || PyObject_GetBuffer(outs[k], &ov[k], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
            goto done;
        got[k] = 1;
    }
    NormJob job = {
        .x = xv.buf, .skip = self->skip ? sv.buf : NULL,
        .bias = self->rows_obj[2] ? self->rows_view[2].buf : NULL,
        .gamma = self->rows_obj[0] ? self->rows_view[0].buf : NULL,
        .beta = self->rows_obj[1] ? self->rows_view[1].buf : NULL,
        .y = ov[0].buf, .total = got[3] ? ov[3].buf : NULL, .mean = got[1] ? ov[1].buf : NULL,
        .inv_std = got[2] ? ov[2].buf : NULL, .rows = xv.len / 4 / self->cols,
        .cols = self->cols, .epsilon = self->epsilon, .rms = self->rms,
    };  /* clang-format: keep */
    norm_job(&job);
    if (self->single) {
        result = outs[0];
        outs[0] = NULL;
    } else {
        result = PyList_New(n_out);
        if (result)
            for (Py_ssize_t k = 0; k < n_out; k++) {
                PyObject *o = outs[PyLong_AsLong(PyTuple_GET_ITEM(self->picks, k)) & 3];
                Py_INCREF(o);
                PyList_SET_ITEM(result, k, o);
            }
    }
done:
    for (int k = 0; k < 4; k++) {
        if (got[k]) PyBuffer_Release(&ov[k]);
        Py_XDECREF(outs[k]);
    }
    if (self->skip) PyBuffer_Release(&sv);
    PyBuffer_Release(&xv);
    return result;
}

static int held_traverse(PyObject *obj, visitproc visit, void *arg) {
    HeldNorm *self = (HeldNorm *)obj;
    Py_VISIT(self->expect);
    Py_VISIT(self->fallback);
    return 0;
}

static int held_clear(PyObject *obj) {
    HeldNorm *self = (HeldNorm *)obj;
    Py_CLEAR(self->expect);
    Py_CLEAR(self->fallback);
    return 0;
}

static void held_dealloc(PyObject *obj) {
    HeldNorm *self = (HeldNorm *)obj;
    PyObject_GC_UnTrack(obj);
    for (int k = 0; k < 3; k++)
        if (self->rows_obj[k]) {
            PyBuffer_Release(&self->rows_view[k]);
            Py_CLEAR(self->rows_obj[k]);
        }
    Py_CLEAR(self->picks);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->empty);
    Py_CLEAR(self->dtype);
    held_clear(obj);
    PyObject_GC_Del(obj);
}

static PyMemberDef held_members[] = {
    {"fallback", T_OBJECT, offsetof(HeldNorm, fallback), READONLY,
     "What the calls this norm does not take go to."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HeldNormType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onnxviz.runtime.native._norm.HeldNorm",
    .tp_basicsize = sizeof(HeldNorm),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(HeldNorm, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = held_traverse,
    .tp_clear = held_clear,
    .tp_dealloc = held_dealloc,
    .tp_members = held_members,
    .tp_doc = "A norm node's call with its constant rows (held()).",
};

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *rows[3], *expect, *picks, *fallback, *ndarray, *empty, *dtype;
    Py_ssize_t cols;
    double epsilon;
    int rms, skip, single, ndim = 0;
    if (!PyArg_ParseTuple(args, "ndpOOOpO!O!pOOOO|i:held", &cols, &epsilon, &rms, &rows[0],
                          &rows[1], &rows[2], &skip, &PyTuple_Type, &expect, &PyTuple_Type,
                          &picks, &single, &fallback, &ndarray, &empty, &dtype, &ndim))
        return NULL;
    const Py_ssize_t n_out = PyTuple_GET_SIZE(picks);
    int bad = cols < 1 || n_out < 1 || n_out > 4 || !PyCallable_Check(fallback) ||
              !PyCallable_Check(empty) || (single && n_out != 1);
    for (Py_ssize_t k = 0; k < n_out && !bad; k++) {
        const long v = PyLong_AsLong(PyTuple_GET_ITEM(picks, k));
        bad = v < 0 || v > 3 || (v == 3 && !skip && rows[2] == Py_None);
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(expect) && !bad; i++) {
        PyObject *pair = PyTuple_GET_ITEM(expect, i);
        bad = !PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
              PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0)) < 0;
    }
    if (bad || PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "held: bad cols, picks, expect or callables");
        return NULL;
    }
    HeldNorm *obj = PyObject_GC_New(HeldNorm, &HeldNormType);
    if (!obj) return NULL;
    obj->vectorcall = held_vectorcall;
    for (int k = 0; k < 3; k++) obj->rows_obj[k] = NULL;
    obj->expect = Py_NewRef(expect);
    obj->picks = Py_NewRef(picks);
    obj->fallback = Py_NewRef(fallback);
    obj->ndarray = Py_NewRef(ndarray);
    obj->empty = Py_NewRef(empty);
    obj->dtype = Py_NewRef(dtype);
    obj->cols = cols;
    obj->epsilon = epsilon;
    obj->rms = rms;
    obj->skip = skip;
    obj->single = single;
    obj->ndim = ndim < 0 ? 0 : ndim;
    PyObject_GC_Track((PyObject *)obj);
    static const char *names[3] = {"held gamma", "held beta", "held bias"};
    for (int k = 0; k < 3; k++) {
        if (rows[k] == Py_None) continue;
        if (onnxviz_get_floats(rows[k], &obj->rows_view[k], cols, 1, 0, names[k]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
        obj->rows_obj[k] = Py_NewRef(rows[k]);
    }
    return (PyObject *)obj;
}

/* ---- embed: com.microsoft EmbedLayerNormalization's rows ----------------------------
 *
 * embed(ids, segment_ids, word, position, segment, gamma, beta, epsilon, total, y[, mask,
 *       mask_index]) -> int:
 * for each of the rows of ids (int32 or int64, C-contiguous [batch, seq]), total's row =
 * (word[id] + position[row's place in its sequence]) + segment[segment id] (segment_ids
 * of ids' shape and segment, or both None), each a float32 add (the numpy path's order
 * and roundings), then y = the layer norm of that row with gamma and beta (norm_rows, as
 * `norm` above).  The tables are float32 C-contiguous [*, cols] (cols: gamma's length).
 * 0 when done; 1, 2 or 3 (nothing normalised) when a word id, the sequence length or a
 * segment id is outside its table.  mask_index (int32 [batch], or None): each row's count
 * of nonzero values of mask (int32 or int64 [batch, *]; None: 0), the op's second output,
 * which numpy's != and sum made in 3 us.  Why: the numpy steps (range checks, three
 * gathers, two adds, the norm's passes, a cast) were 25 us of a tiny BERT's 110. */
static int ids_view(PyObject *obj, Py_buffer *view, const char *name) {
    view->obj = NULL;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    const int ok = f[1] == '\0' && ((f[0] == 'i' && view->itemsize == 4) ||
                                    ((f[0] == 'l' || f[0] == 'q') && view->itemsize == 8));
    if (!ok || view->ndim != 2) {
        PyErr_Format(PyExc_ValueError, "%s: expected a 2-D int32 or int64 buffer", name);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static inline int64_t id_at(const Py_buffer *v, Py_ssize_t i) {
    return v->itemsize == 4 ? (int64_t)((const int32_t *)v->buf)[i]
                            : ((const int64_t *)v->buf)[i];
}

static PyObject *py_embed(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *io, *so, *wo, *po, *sego, *go, *bo, *to, *yo, *mo = Py_None, *mio = Py_None;
    double epsilon;
    if (!PyArg_ParseTuple(args, "OOOOOOOdOO|OO:embed", &io, &so, &wo, &po, &sego, &go, &bo,
                          &epsilon, &to, &yo, &mo, &mio))
        return NULL;
    enum { IDS, SEG_IDS, W, P, SEG, G, B, T, Y, M, MI, NVIEWS };
    Py_buffer v[NVIEWS];
    for (int k = 0; k < NVIEWS; k++) v[k].buf = NULL, v[k].obj = NULL;
    PyObject *result = NULL;
    if ((so == Py_None) != (sego == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "embed: segment ids and table go together");
        goto done;
    }
    if (ids_view(io, &v[IDS], "embed ids") < 0) goto done;
    if (so != Py_None && ids_view(so, &v[SEG_IDS], "embed segment ids") < 0) goto done;
    const Py_ssize_t seq = v[IDS].shape[1], rows = v[IDS].shape[0] * seq;
    if (so != Py_None &&
        (v[SEG_IDS].shape[0] != v[IDS].shape[0] || v[SEG_IDS].shape[1] != seq)) {
        PyErr_SetString(PyExc_ValueError, "embed: segment ids and ids differ in shape");
        goto done;
    }
    if (onnxviz_get_floats(go, &v[G], 0, 0, 0, "embed gamma") < 0) goto done;
    const Py_ssize_t cols = v[G].len / 4;
    if (cols < 1) {
        PyErr_SetString(PyExc_ValueError, "embed: gamma is empty");
        goto done;
    }
    if (onnxviz_get_floats(bo, &v[B], cols, 1, 0, "embed beta") < 0) goto done;
    if (onnxviz_get_floats(wo, &v[W], 0, 0, 0, "embed word") < 0) goto done;
    if (onnxviz_get_floats(po, &v[P], 0, 0, 0, "embed position") < 0) goto done;
    if (sego != Py_None && onnxviz_get_floats(sego, &v[SEG], 0, 0, 0, "embed segment") < 0)
        goto done;
    if (v[W].len % (cols * 4) || v[P].len % (cols * 4) ||
        (v[SEG].buf && v[SEG].len % (cols * 4))) {
        PyErr_SetString(PyExc_ValueError, "embed: a table's rows are not gamma's length");
        goto done;
    }
    if (onnxviz_get_floats(to, &v[T], rows * cols, 1, 1, "embed total") < 0) goto done;
    if (onnxviz_get_floats(yo, &v[Y], rows * cols, 1, 1, "embed y") < 0) goto done;
    if (mio != Py_None) {
        if (PyObject_GetBuffer(mio, &v[MI], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) <
            0)
            goto done;
        const char *f = v[MI].format ? v[MI].format : "B";
        if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
        if (f[0] != 'i' || f[1] != '\0' || v[MI].itemsize != 4 ||
            v[MI].len != v[IDS].shape[0] * 4) {
            PyErr_SetString(PyExc_ValueError, "embed: mask_index must be int32 of one per row");
            goto done;
        }
        if (mo != Py_None) {
            if (ids_view(mo, &v[M], "embed mask") < 0) goto done;
            if (v[M].shape[0] != v[IDS].shape[0]) {
                PyErr_SetString(PyExc_ValueError, "embed: mask and ids differ in rows");
                goto done;
            }
        }
    } else if (mo != Py_None) {
        PyErr_SetString(PyExc_ValueError, "embed: a mask needs its mask_index");
        goto done;
    }
    const Py_ssize_t n_word = v[W].len / 4 / cols, n_pos = v[P].len / 4 / cols;
    const Py_ssize_t n_seg = v[SEG].buf ? v[SEG].len / 4 / cols : 0;
    long bad = 0;
    if (seq > n_pos) bad = 2;
    for (Py_ssize_t r = 0; r < rows && !bad; r++) {
        const int64_t w = id_at(&v[IDS], r);
        if (w < 0 || w >= n_word) bad = 1;
        if (v[SEG_IDS].buf) {
            const int64_t sg = id_at(&v[SEG_IDS], r);
            if (sg < 0 || sg >= n_seg) bad = 3;
        }
    }
    if (!bad) {
        const float *word = v[W].buf, *pos = v[P].buf, *seg = v[SEG].buf;
        float *total = v[T].buf;
        for (Py_ssize_t r = 0; r < rows; r++) {
            const float *wr = word + id_at(&v[IDS], r) * cols;
            const float *pr = pos + (r % seq) * cols;
            float *tr = total + r * cols;
            for (Py_ssize_t i = 0; i < cols; i++) tr[i] = wr[i] + pr[i];
            if (seg) {
                const float *sr = seg + id_at(&v[SEG_IDS], r) * cols;
                for (Py_ssize_t i = 0; i < cols; i++) tr[i] = tr[i] + sr[i];
            }
        }
        NormJob job = {
            .x = total, .gamma = v[G].buf, .beta = v[B].buf, .y = v[Y].buf,
            .rows = rows, .cols = cols, .epsilon = epsilon, .rms = 0,
        };
        norm_job(&job);
        if (v[MI].buf) { /* each row's count of nonzero mask values (0 without a mask) */
            int32_t *counts = v[MI].buf;
            const Py_ssize_t width = v[M].buf ? v[M].shape[1] : 0;
            for (Py_ssize_t b = 0; b < v[IDS].shape[0]; b++) {
                int32_t n = 0;
                for (Py_ssize_t j = 0; j < width; j++) n += id_at(&v[M], b * width + j) != 0;
                counts[b] = n;
            }
        }
    }
    result = PyLong_FromLong(bad);
done:
    for (int k = 0; k < NVIEWS; k++)
        if (v[k].obj != NULL) PyBuffer_Release(&v[k]);
    return result;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"embed", py_embed, METH_VARARGS,
     "embed(ids, segment_ids, word, position, segment, gamma, beta, epsilon, total, y"
     "[, mask, mask_index]) -> 0, or 1/2/3 for a word id, the sequence length or a segment "
     "id outside its table: EmbedLayerNormalization's sums into total, their layer norm "
     "into y and each row's count of nonzero mask values into mask_index; see the module "
     "source."},
    {"norm", py_norm, METH_VARARGS,
     "norm(x, y, cols, epsilon, rms, gamma, beta, skip, bias, total, mean, inv_std): "
     "layer (or RMS) normalisation of float32 rows of cols; see the module source."},
    {"held", py_held, METH_VARARGS,
     "held(cols, epsilon, rms, gamma, beta, bias, skip, expect, picks, single, fallback, "
     "ndarray, empty, dtype, ndim=0) -> a callable f(x[, skip], ...): the norm of float32 "
     "C-contiguous x over its last axis (cols) with those constant rows (None: none), the "
     "node's inputs at the positions of expect's (index, object) pairs being those "
     "objects (and x of ndim dimensions, 0: any); its outputs, picks of (y, mean, "
     "inv_std, total), a list, or y alone when single; any other call is fallback(*args)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_norm", NULL, -1, methods};

PyMODINIT_FUNC PyInit__norm(void) {
    if (PyType_Ready(&HeldNormType) < 0) return NULL;
    return PyModule_Create(&module);
}
