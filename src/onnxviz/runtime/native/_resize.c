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
 *   linear(x, out, (planes, h, w, oh, ow), rows, cols, flags): the linear Resize of
 *   float32 planes on their last two axes as nn_resize's numpy steps compute it, axis by
 *   axis, with the taps they made: rows = (i0, i1, w0, w1) for each output row (int32,
 *   int32, float32, float32 arrays of oh), cols the same for each output column (ow).
 *   flags: 1 the rows are resampled (else oh == h and rows are ignored), 2 and 4 their
 *   first and second taps used (a tap whose weights are all zero is skipped, as numpy's
 *   steps skip it), 8, 16 and 32 the same for the columns.  An axis's value is
 *   v0 * w0 + v1 * w1 in float32 operations (a product each, then the sum: no fused
 *   multiply-add under -std=c11), the rows first: numpy's values bit for bit.
 *
 * A segmentation UNet's bilinear 2x upsampling (nn.Upsample(mode="bilinear")): numpy's
 * take, multiply and add per tap and axis took 1.4 ms for 16 channels at 128 -> 256 px,
 * onnxruntime 0.1.
 *
 * Levels (native/__init__.py): 0 generic C; 1 and up AVX2 for rw = 2 (and the linear
 * rows' pass compiled for AVX2). */
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

/* ---- linear -------------------------------------------------------------------------- */

typedef struct {
    const int32_t *i0, *i1;
    const float *w0, *w1;
    int use0, use1;
} Taps;

#define ROW_PASS_BODY                                                                      \
    {                                                                                      \
        if (use0 && use1)                                                                  \
            for (Py_ssize_t j = 0; j < w; j++) dst[j] = r0[j] * a + r1[j] * b;             \
        else if (use0)                                                                     \
            for (Py_ssize_t j = 0; j < w; j++) dst[j] = r0[j] * a;                         \
        else                                                                               \
            for (Py_ssize_t j = 0; j < w; j++) dst[j] = r1[j] * b;                         \
    }

/* dst = r0 * a + r1 * b over w floats (the taps used). */
static void row_pass_generic(const float *restrict r0, const float *restrict r1, float a,
                             float b, int use0, int use1, float *restrict dst, Py_ssize_t w)
    ROW_PASS_BODY
#if ONNXVIZ_X86
__attribute__((target("avx2"))) static void
row_pass_avx2(const float *restrict r0, const float *restrict r1, float a, float b, int use0,
              int use1, float *restrict dst, Py_ssize_t w) ROW_PASS_BODY
#endif

/* out[j] = src[i0[j]] * w0[j] + src[i1[j]] * w1[j] over ow columns (the taps used). */
static void col_pass(const float *src, const Taps *t, float *out, Py_ssize_t ow) {
    if (t->use0 && t->use1)
        for (Py_ssize_t j = 0; j < ow; j++)
            out[j] = src[t->i0[j]] * t->w0[j] + src[t->i1[j]] * t->w1[j];
    else if (t->use0)
        for (Py_ssize_t j = 0; j < ow; j++) out[j] = src[t->i0[j]] * t->w0[j];
    else
        for (Py_ssize_t j = 0; j < ow; j++) out[j] = src[t->i1[j]] * t->w1[j];
}

#if ONNXVIZ_X86
/* col_pass 8 columns at a time: where a group's taps all lie within 8 floats of the row
 * (`base[g]`, the offsets from it in rel0/rel1: upsampling, where neighbours share taps)
 * one load and two permutes fetch them, else two gathers.  The same products and sums,
 * so the same bits.  (Gathers alone: no faster than the scalar loop on a Zen 3 core.) */
typedef struct {
    int32_t *base; /* per group of 8 columns: the first tap's float, or -1: gathers */
    int32_t *rel;  /* per group: 8 offsets of tap 0, then 8 of tap 1 */
} ColGroups;

static int col_groups(const Taps *t, Py_ssize_t ow, Py_ssize_t w, ColGroups *g) {
    const Py_ssize_t groups = ow / 8;
    g->base = PyMem_RawMalloc((size_t)(groups ? groups : 1) * sizeof(int32_t));
    g->rel = PyMem_RawMalloc((size_t)(groups ? groups : 1) * 16 * sizeof(int32_t));
    if (g->base == NULL || g->rel == NULL) {
        PyMem_RawFree(g->base);
        PyMem_RawFree(g->rel);
        return -1;
    }
    for (Py_ssize_t q = 0; q < groups; q++) {
        int32_t lo = t->i0[8 * q], hi = lo;
        for (int k = 0; k < 8; k++) {
            const int32_t a = t->i0[8 * q + k], b = t->i1[8 * q + k];
            lo = a < lo ? a : lo;
            lo = b < lo ? b : lo;
            hi = a > hi ? a : hi;
            hi = b > hi ? b : hi;
        }
        const int fits = hi - lo < 8 && lo + 8 <= w;
        g->base[q] = fits ? lo : -1;
        for (int k = 0; k < 8; k++) {
            g->rel[16 * q + k] = fits ? t->i0[8 * q + k] - lo : 0;
            g->rel[16 * q + 8 + k] = fits ? t->i1[8 * q + k] - lo : 0;
        }
    }
    return 0;
}

__attribute__((target("avx2"))) static void col_pass_avx2(const float *src, const Taps *t,
                                                           const ColGroups *g, float *out,
                                                           Py_ssize_t ow) {
    if (!(t->use0 && t->use1)) {
        col_pass(src, t, out, ow);
        return;
    }
    Py_ssize_t j = 0;
    for (Py_ssize_t q = 0; j + 8 <= ow; j += 8, q++) {
        __m256 v0, v1;
        if (g->base[q] >= 0) {
            const __m256 v = _mm256_loadu_ps(src + g->base[q]);
            v0 = _mm256_permutevar8x32_ps(v, _mm256_loadu_si256((const __m256i *)(g->rel + 16 * q)));
            v1 = _mm256_permutevar8x32_ps(
                v, _mm256_loadu_si256((const __m256i *)(g->rel + 16 * q + 8)));
        } else {
            v0 = _mm256_i32gather_ps(src, _mm256_loadu_si256((const __m256i *)(t->i0 + j)), 4);
            v1 = _mm256_i32gather_ps(src, _mm256_loadu_si256((const __m256i *)(t->i1 + j)), 4);
        }
        const __m256 a = _mm256_mul_ps(v0, _mm256_loadu_ps(t->w0 + j));
        const __m256 b = _mm256_mul_ps(v1, _mm256_loadu_ps(t->w1 + j));
        _mm256_storeu_ps(out + j, _mm256_add_ps(a, b));
    }
    for (; j < ow; j++) out[j] = src[t->i0[j]] * t->w0[j] + src[t->i1[j]] * t->w1[j];
}
#endif

/* The taps of one axis from (i0, i1, w0, w1), each `n` long, indices within [0, limit). */
static int get_taps(PyObject *seq, Py_ssize_t n, Py_ssize_t limit, Py_buffer views[4],
                    Taps *t, const char *name) {
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != 4) {
        PyErr_Format(PyExc_ValueError, "linear: %s must be a tuple (i0, i1, w0, w1)", name);
        return -1;
    }
    for (int k = 0; k < 4; k++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(seq, k), &views[k], PyBUF_C_CONTIGUOUS) < 0) {
            for (int q = 0; q < k; q++) PyBuffer_Release(&views[q]);
            return -1;
        }
    }
    int ok = 1;
    for (int k = 0; k < 4; k++) ok = ok && views[k].itemsize == 4 && views[k].len == n * 4;
    if (ok) {
        t->i0 = views[0].buf;
        t->i1 = views[1].buf;
        t->w0 = views[2].buf;
        t->w1 = views[3].buf;
        for (Py_ssize_t j = 0; ok && j < n; j++)
            ok = t->i0[j] >= 0 && t->i0[j] < limit && t->i1[j] >= 0 && t->i1[j] < limit;
    }
    if (!ok) {
        for (int k = 0; k < 4; k++) PyBuffer_Release(&views[k]);
        PyErr_Format(PyExc_ValueError,
                     "linear: %s: four arrays of 4-byte items, one per output, indices "
                     "inside the input",
                     name);
        return -1;
    }
    return 0;
}

static PyObject *py_linear(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *oo, *rows, *cols;
    Py_ssize_t planes, h, w, oh, ow;
    int flags;
    if (!PyArg_ParseTuple(args, "OO(nnnnn)OOi:linear", &xo, &oo, &planes, &h, &w, &oh, &ow,
                          &rows, &cols, &flags))
        return NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 40;
    const int by_rows = flags & 1, by_cols = flags & 8;
    if (planes < 0 || h < 1 || w < 1 || oh < 1 || ow < 1 || planes > limit || h > limit ||
        w > limit || oh > limit || ow > limit ||
        (double)planes * (double)(h > oh ? h : oh) * (double)(w > ow ? w : ow) > (double)limit ||
        (!by_rows && oh != h) || (!by_cols && ow != w) ||
        (by_rows && !(flags & 6)) || (by_cols && !(flags & 48))) {
        PyErr_SetString(PyExc_ValueError, "linear: sizes or flags out of range");
        return NULL;
    }
    Py_buffer xb, ob, rv[4], cv[4];
    Taps rt = {0}, ct = {0};
    if (onnxviz_get_floats(xo, &xb, planes * h * w, 1, 0, "x") < 0) return NULL;
    if (onnxviz_get_floats(oo, &ob, planes * oh * ow, 1, 1, "out") < 0) {
        PyBuffer_Release(&xb);
        return NULL;
    }
    PyObject *result = NULL;
    int have_rows = 0, have_cols = 0;
    if (by_rows) {
        if (get_taps(rows, oh, h, rv, &rt, "rows") < 0) goto done;
        have_rows = 1;
        rt.use0 = (flags & 2) != 0;
        rt.use1 = (flags & 4) != 0;
    }
    if (by_cols) {
        if (get_taps(cols, ow, w, cv, &ct, "cols") < 0) goto done;
        have_cols = 1;
        ct.use0 = (flags & 16) != 0;
        ct.use1 = (flags & 32) != 0;
    }
    {
        float *tmp = PyMem_RawMalloc((size_t)w * sizeof(float));
        if (tmp == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        const float *x = xb.buf;
        float *out = ob.buf;
        void (*row_pass)(const float *, const float *, float, float, int, int, float *,
                         Py_ssize_t) = row_pass_generic;
        int vector_cols = 0;
#if ONNXVIZ_X86
        ColGroups groups = {NULL, NULL};
        if (level >= 1) {
            row_pass = row_pass_avx2;
            if (by_cols && col_groups(&ct, ow, w, &groups) < 0) {
                PyMem_RawFree(tmp);
                PyErr_NoMemory();
                goto done;
            }
            vector_cols = by_cols;
        }
#endif
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t p = 0; p < planes; p++) {
            const float *plane = x + p * h * w;
            for (Py_ssize_t i = 0; i < oh; i++) {
                float *dst = out + (p * oh + i) * ow;
                const float *src = plane + i * w; /* rows kept: row i as it is */
                if (by_rows) {
                    float *into = by_cols ? tmp : dst;
                    row_pass(plane + rt.i0[i] * w, plane + rt.i1[i] * w, rt.w0[i], rt.w1[i],
                             rt.use0, rt.use1, into, w);
                    src = into;
                }
                if (by_cols) {
#if ONNXVIZ_X86
                    if (vector_cols)
                        col_pass_avx2(src, &ct, &groups, dst, ow);
                    else
#endif
                        col_pass(src, &ct, dst, ow);
                }
                else if (!by_rows)
                    memcpy(dst, src, (size_t)w * sizeof(float));
            }
        }
        Py_END_ALLOW_THREADS;
        PyMem_RawFree(tmp);
#if ONNXVIZ_X86
        PyMem_RawFree(groups.base);
        PyMem_RawFree(groups.rel);
#endif
        (void)vector_cols;
    }
    result = Py_NewRef(Py_None);
done:
    if (have_rows)
        for (int k = 0; k < 4; k++) PyBuffer_Release(&rv[k]);
    if (have_cols)
        for (int k = 0; k < 4; k++) PyBuffer_Release(&cv[k]);
    PyBuffer_Release(&xb);
    PyBuffer_Release(&ob);
    return result;
}

static PyMethodDef methods[] = {
    {"repeat", py_repeat, METH_VARARGS,
     "repeat(x, out, (planes, h, w), (rh, rw)): out[p, i*rh + a, j*rw + b] = x[p, i, j]; "
     "C-contiguous buffers of 4-byte items."},
    {"linear", py_linear, METH_VARARGS,
     "linear(x, out, (planes, h, w, oh, ow), rows, cols, flags): the linear Resize of "
     "float32 planes on their last two axes by the taps given (see the module's header)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_resize", NULL, -1, methods};

PyMODINIT_FUNC PyInit__resize(void) { return PyModule_Create(&module); }
