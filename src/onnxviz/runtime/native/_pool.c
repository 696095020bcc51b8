/* onnxviz.runtime.native._pool: float32 2-D MaxPool and AveragePool over NCHW planes,
 * and over channels-last images (pool2d_nhwc, below).
 *
 *   pool2d(x, y, planes, h, w, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, mode, include_pad)
 *
 * x holds planes*h*w floats, y planes*oh*ow (both C-contiguous float32).  Window (i, j)
 * covers input rows i*sh - pt .. + kh - 1 and columns j*sw - pl .. + kw - 1 (dilation
 * 1); pt/pl/pb/pr are the explicit pads (begin top/left, end bottom/right).  Rows and
 * columns outside the input never count as data: mode 0 (max) treats them as -inf,
 * mode 1 (average) as 0.  The average divides by the window's cell count: the cells
 * inside the input, or with include_pad also the explicit pad cells (never the ceil_mode
 * overhang past the end pad), as kernels/nn_pool.py's _pool_counts does.
 *
 * Per output row: its window's input rows are combined elementwise into one padded row
 * (contiguous, vectorised by the compiler), then each output combines kw entries of that
 * row.  Every input row is read by the kh output rows whose window holds it, straight
 * from the tensor (no padded copy), and every output is written once.  The numpy path
 * makes several passes over whole-tensor scratch arrays.
 *
 * Max: NaN-propagating like np.maximum (a window with a NaN gives NaN); otherwise the
 * exact max.  Average: the column sums of the window's rows in order, then the row's
 * kw entries in order, then one division: a different order than the numpy path's, so
 * within float32 rounding of it, not its bits.  No multiply at all (nothing to
 * contract), and vectorising across outputs keeps each output's order, so every level
 * gives the same bits.
 *
 * Levels (native/__init__.py): 0 generic C; 1, 2 and 3 AVX2: one body, inlined into a
 * wrapper per target.  No AVX-512 code: GCC vectorises these loops 256 bits wide anyway,
 * and with the AVX-512 target its remainder code for 28-float rows made MaxPool 2.8x
 * slower (3.2 ns an output against 1.1 on Inception's 192x28x28, 3x3 stride 1). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "levels.h"
#include "held_call.h"
#include "pool_nhwc.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if ONNXVIZ_X86
#include <immintrin.h>
#endif

static int level = 0;

/* Floats past the padded row that pool_max_s2_avx2 may read (below). */
#define POOL_S2_SLACK 32

/* A "same" pool (stride 1, output the input's size: Inception's 3x3/1 pad-1 branches) on
 * whole planes: the rows and columns whose window lies inside the input are one long
 * flat loop per kernel offset (a row of 14 or 28 floats left the vector loops mostly in
 * their remainders), then the few edge rows and columns are redone with their clipped
 * windows.  The same per-output order as pool_body (top to bottom, then left to right).
 * `v` and `cnt` hold h*w floats each. */
static inline __attribute__((always_inline)) void pool_same(const float *x, float *y,
                                                            const PoolGeometry *g, float *v,
                                                            float *cnt) {
    const Py_ssize_t h = g->h, w = g->w, kh = g->kh, kw = g->kw, pt = g->pt, pl = g->pl;
    const Py_ssize_t n = h * w;
    const int avg = g->mode == 1;
    if (avg)
        for (Py_ssize_t i = 0; i < h; i++) {
            float rows = (float)pool_count(i - pt, kh, h, pt, g->pb, g->include_pad);
            for (Py_ssize_t j = 0; j < w; j++)
                cnt[i * w + j] =
                    rows * (float)pool_count(j - pl, kw, w, pl, g->pr, g->include_pad);
        }
    /* Interior rows [ia, ib): window rows i - pt .. i - pt + kh - 1 all inside. */
    Py_ssize_t ia = pt < h ? pt : h, ib = h - g->pb > ia ? h - g->pb : ia;
    for (Py_ssize_t p = 0; p < g->planes; p++) {
        const float *plane = x + p * n;
        float *out = y + p * n;
        if (ib > ia) {
            const Py_ssize_t len = (ib - ia) * w;
            float *dst = v + ia * w;
            const float *src = plane + (ia - pt) * w;
            for (Py_ssize_t t = 0; t < len; t++) dst[t] = src[t];
            for (Py_ssize_t k = 1; k < kh; k++) {
                src = plane + (ia - pt + k) * w;
                if (avg)
                    for (Py_ssize_t t = 0; t < len; t++) dst[t] = dst[t] + src[t];
                else
                    for (Py_ssize_t t = 0; t < len; t++) dst[t] = pool_max(dst[t], src[t]);
            }
        }
        for (Py_ssize_t i = 0; i < h; i++) {
            if (i >= ia && i < ib) continue;
            Py_ssize_t r0 = i - pt > 0 ? i - pt : 0, r1 = i - pt + kh < h ? i - pt + kh : h;
            float *dst = v + i * w;
            for (Py_ssize_t j = 0; j < w; j++) dst[j] = plane[r0 * w + j];
            for (Py_ssize_t r = r0 + 1; r < r1; r++) {
                const float *src = plane + r * w;
                if (avg)
                    for (Py_ssize_t j = 0; j < w; j++) dst[j] = dst[j] + src[j];
                else
                    for (Py_ssize_t j = 0; j < w; j++) dst[j] = pool_max(dst[j], src[j]);
            }
        }
        /* Flat positions [pl, n - pr): output t combines v[t - pl .. t - pl + kw - 1];
         * the ones whose window wraps into a neighbouring row are edge columns, redone. */
        const Py_ssize_t lo = pl, hi = n - g->pr;
        if (hi > lo) {
            const Py_ssize_t len = hi - lo;
            float *dst = out + lo;
            for (Py_ssize_t t = 0; t < len; t++) dst[t] = v[t];
            for (Py_ssize_t k = 1; k < kw; k++) {
                const float *col = v + k;
                if (avg)
                    for (Py_ssize_t t = 0; t < len; t++) dst[t] = dst[t] + col[t];
                else
                    for (Py_ssize_t t = 0; t < len; t++) dst[t] = pool_max(dst[t], col[t]);
            }
        }
        for (Py_ssize_t i = 0; i < h; i++) {
            const float *vr = v + i * w;
            for (Py_ssize_t j = 0; j < w; j++) {
                if (j == pl && w - g->pr > pl) {
                    j = w - g->pr; /* skip the interior columns (done above) */
                    if (j >= w) break;
                }
                Py_ssize_t c0 = j - pl > 0 ? j - pl : 0, c1 = j - pl + kw < w ? j - pl + kw : w;
                float acc = vr[c0];
                for (Py_ssize_t c = c0 + 1; c < c1; c++) acc = avg ? acc + vr[c] : pool_max(acc, vr[c]);
                out[i * w + j] = acc;
            }
        }
        if (avg)
            for (Py_ssize_t t = 0; t < n; t++) out[t] = out[t] / cnt[t];
    }
}

/* The whole call: `row` holds `span` floats (the padded row), `colcount` ow floats, then
 * pool_same's two planes of h*w floats, then span + 1 floats (stride 2's halves). */
static inline __attribute__((always_inline)) void pool_body(const float *x, float *y,
                                                            const PoolGeometry *g, float *row,
                                                            Py_ssize_t span,
                                                            float *colcount) {
    const Py_ssize_t h = g->h, w = g->w, ow = g->ow, kw = g->kw, sw = g->sw, pl = g->pl;
    const int avg = g->mode == 1;
    if (g->sh == 1 && g->sw == 1 && g->oh == h && g->ow == w && g->pt + g->pb == g->kh - 1 &&
        g->pl + g->pr == kw - 1) {
        pool_same(x, y, g, colcount + ow, colcount + ow + h * w);
        return;
    }
    const float identity = avg ? 0.0f : -INFINITY;
    /* Pad columns never change: fill them once (the data columns are rewritten per row). */
    for (Py_ssize_t j = 0; j < span; j++) row[j] = identity;
    if (avg)
        for (Py_ssize_t j = 0; j < ow; j++)
            colcount[j] = (float)pool_count(j * sw - pl, kw, w, pl, g->pr, g->include_pad);
    float *data = row + pl;
    for (Py_ssize_t p = 0; p < g->planes; p++) {
        const float *plane = x + p * h * w;
        float *out = y + p * g->oh * ow;
        for (Py_ssize_t i = 0; i < g->oh; i++, out += ow) {
            Py_ssize_t top = i * g->sh - g->pt;
            Py_ssize_t r0 = top > 0 ? top : 0;
            Py_ssize_t r1 = top + g->kh < h ? top + g->kh : h;
            if (r0 >= r1) {
                for (Py_ssize_t j = 0; j < w; j++) data[j] = identity;
            } else {
                const float *src = plane + r0 * w;
                for (Py_ssize_t j = 0; j < w; j++) data[j] = src[j];
                for (Py_ssize_t r = r0 + 1; r < r1; r++) {
                    src = plane + r * w;
                    if (avg)
                        for (Py_ssize_t j = 0; j < w; j++) data[j] = data[j] + src[j];
                    else
                        for (Py_ssize_t j = 0; j < w; j++) data[j] = pool_max(data[j], src[j]);
                }
            }
            if (sw == 1) {
                for (Py_ssize_t j = 0; j < ow; j++) out[j] = row[j];
                for (Py_ssize_t k = 1; k < kw; k++) {
                    const float *col = row + k;
                    if (avg)
                        for (Py_ssize_t j = 0; j < ow; j++) out[j] = out[j] + col[j];
                    else
                        for (Py_ssize_t j = 0; j < ow; j++) out[j] = pool_max(out[j], col[j]);
                }
            } else if (sw == 2) {
                /* The row split into its even and odd columns once, so each kernel column
                 * is a contiguous run (col k at 2j + k: the even half's j + k/2 or the odd
                 * half's j + (k-1)/2), vectorised like the stride-1 case, where reading
                 * every second float was not (a QDQ ResNet's 3x3/2 MaxPool on 32 x 112 x
                 * 112: 196 us); the same operations in the same order, so the same bits. */
                float *even = colcount + ow + 2 * h * w, *odd = even + (span + 1) / 2;
                for (Py_ssize_t j = 0; j < span / 2; j++) {
                    even[j] = row[2 * j];
                    odd[j] = row[2 * j + 1];
                }
                if (span % 2) even[span / 2] = row[span - 1];
                for (Py_ssize_t j = 0; j < ow; j++) out[j] = even[j];
                for (Py_ssize_t k = 1; k < kw; k++) {
                    const float *col = (k % 2 ? odd : even) + k / 2;
                    if (avg)
                        for (Py_ssize_t j = 0; j < ow; j++) out[j] = out[j] + col[j];
                    else
                        for (Py_ssize_t j = 0; j < ow; j++) out[j] = pool_max(out[j], col[j]);
                }
            } else {
                for (Py_ssize_t j = 0; j < ow; j++) out[j] = row[j * sw];
                for (Py_ssize_t k = 1; k < kw; k++) {
                    const float *col = row + k;
                    if (avg)
                        for (Py_ssize_t j = 0; j < ow; j++) out[j] = out[j] + col[j * sw];
                    else
                        for (Py_ssize_t j = 0; j < ow; j++)
                            out[j] = pool_max(out[j], col[j * sw]);
                }
            }
            if (avg) {
                float rows = (float)pool_count(top, g->kh, h, g->pt, g->pb, g->include_pad);
                /* rows * colcount[j]: a product of small integers, exact below 2^24. */
                for (Py_ssize_t j = 0; j < ow; j++) out[j] = out[j] / (rows * colcount[j]);
            }
        }
    }
}

static void pool_generic(const float *x, float *y, const PoolGeometry *g, float *row,
                         Py_ssize_t span, float *colcount) {
    pool_body(x, y, g, row, span, colcount);
}

#if ONNXVIZ_X86
/* pool_max of eight lanes: max_ps(v, m) is v > m ? v : m, and m when either is NaN; the
 * blend then takes v where v is NaN.  So pool_max's value bit for bit, in 3 operations
 * where GCC's vectorisation of pool_max's masks took 6. */
__attribute__((target("avx2"))) static inline __m256 pool_max8(__m256 m, __m256 v) {
    return _mm256_blendv_ps(_mm256_max_ps(v, m), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* The even (`odd` 0) or odd floats of p[0 .. 16): lanes p[2t + odd], t = 0 .. 7. */
__attribute__((target("avx2"))) static inline __m256 pool_half8(const float *p, int odd) {
    const __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    const __m256 s = odd ? _mm256_shuffle_ps(a, b, 0xDD) : _mm256_shuffle_ps(a, b, 0x88);
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), 0xD8));
}

/* MaxPool of column stride 2 (ResNet's 3x3/2 after the stem): pool_body's operations in
 * its order (each output row's window rows top to bottom into the padded row, then its
 * kw columns left to right), with the row's even and odd columns taken by two shuffles
 * per 8 outputs straight from the padded row instead of a scalar split into two arrays,
 * and pool_max8 for the selects: 64 x 112 x 112 -> 56 x 56, 390 -> 115 us.  `row` holds
 * span + POOL_S2_SLACK floats: the last vector of a row reads up to 14 floats past span
 * (lanes past ow, never stored). */
__attribute__((target("avx2"))) static void pool_max_s2_avx2(const float *x, float *y,
                                                             const PoolGeometry *g, float *row,
                                                             Py_ssize_t span) {
    const Py_ssize_t h = g->h, w = g->w, ow = g->ow, kw = g->kw;
    for (Py_ssize_t j = 0; j < span + POOL_S2_SLACK; j++) row[j] = -INFINITY;
    float *data = row + g->pl;
    for (Py_ssize_t p = 0; p < g->planes; p++) {
        const float *plane = x + p * h * w;
        float *out = y + p * g->oh * ow;
        for (Py_ssize_t i = 0; i < g->oh; i++, out += ow) {
            const Py_ssize_t top = i * g->sh - g->pt;
            const Py_ssize_t r0 = top > 0 ? top : 0, r1 = top + g->kh < h ? top + g->kh : h;
            if (r0 >= r1) {
                for (Py_ssize_t j = 0; j < w; j++) data[j] = -INFINITY;
            } else {
                const float *first = plane + r0 * w;
                Py_ssize_t j = 0;
                for (; j + 8 <= w; j += 8) {
                    __m256 m = _mm256_loadu_ps(first + j);
                    for (Py_ssize_t r = r0 + 1; r < r1; r++)
                        m = pool_max8(m, _mm256_loadu_ps(plane + r * w + j));
                    _mm256_storeu_ps(data + j, m);
                }
                for (; j < w; j++) {
                    float m = first[j];
                    for (Py_ssize_t r = r0 + 1; r < r1; r++) m = pool_max(m, plane[r * w + j]);
                    data[j] = m;
                }
            }
            for (Py_ssize_t j = 0; j < ow; j += 8) {
                /* column k of output j is padded-row float 2j + k */
                __m256 m = pool_half8(row + 2 * j, 0);
                for (Py_ssize_t k = 1; k < kw; k++)
                    m = pool_max8(m, pool_half8(row + 2 * j + (k & ~(Py_ssize_t)1), (int)(k & 1)));
                if (j + 8 <= ow) {
                    _mm256_storeu_ps(out + j, m);
                } else {
                    float tail[8];
                    _mm256_storeu_ps(tail, m);
                    for (Py_ssize_t t = 0; t < ow - j; t++) out[j + t] = tail[t];
                }
            }
        }
    }
}

__attribute__((target("avx2"))) static void pool_avx2(const float *x, float *y,
                                                      const PoolGeometry *g, float *row,
                                                      Py_ssize_t span, float *colcount) {
    if (g->mode == 0 && g->sw == 2) {
        pool_max_s2_avx2(x, y, g, row, span);
        return;
    }
    pool_body(x, y, g, row, span, colcount);
}

#endif


static PyObject *py_pool2d(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *yo;
    PoolGeometry g;
    if (!PyArg_ParseTuple(args, "OOnnnnnnnnnnnnnii:pool2d", &xo, &yo, &g.planes, &g.h, &g.w,
                          &g.oh, &g.ow, &g.kh, &g.kw, &g.sh, &g.sw, &g.pt, &g.pl, &g.pb,
                          &g.pr, &g.mode, &g.include_pad))
        return NULL;
    if (check_geometry(&g) < 0) return NULL;
    Py_buffer xv, yv;
    if (onnxviz_get_floats(xo, &xv, g.planes * g.h * g.w, 1, 0, "pool2d x") < 0) return NULL;
    if (onnxviz_get_floats(yo, &yv, g.planes * g.oh * g.ow, 1, 1, "pool2d y") < 0) {
        PyBuffer_Release(&xv);
        return NULL;
    }
    /* The padded row: every column a window reads ((ow-1)*sw + kw) and the data columns. */
    Py_ssize_t span = (g.ow - 1) * g.sw + g.kw;
    if (span < g.pl + g.w) span = g.pl + g.w;
    /* The padded row and the column counts, then pool_same's two planes, then the
     * padded row's even and odd columns (stride 2). */
    float *row =
        malloc((size_t)(span + g.ow + 2 * g.h * g.w + span + 1 + POOL_S2_SLACK) * sizeof(float));
    if (row == NULL) {
        PyBuffer_Release(&xv);
        PyBuffer_Release(&yv);
        return PyErr_NoMemory();
    }
    const float *x = xv.buf;
    float *y = yv.buf;
    Py_BEGIN_ALLOW_THREADS;
#if ONNXVIZ_X86
    if (level >= 1)
        pool_avx2(x, y, &g, row, span, row + span);
    else
#endif
        pool_generic(x, y, &g, row, span, row + span);
    Py_END_ALLOW_THREADS;
    free(row);
    PyBuffer_Release(&xv);
    PyBuffer_Release(&yv);
    Py_RETURN_NONE;
}

/* A checked channels-last pool at this level, the GIL released. */
static void pool_nhwc_run(const float *x, float *y, const PoolGeometry *g, Py_ssize_t c) {
    Py_BEGIN_ALLOW_THREADS;
    pool_nhwc_at(level, x, y, g, c);
    Py_END_ALLOW_THREADS;
}

static PyObject *py_pool2d_nhwc(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *yo;
    PoolGeometry g;
    Py_ssize_t c;
    if (!PyArg_ParseTuple(args, "OOnnnnnnnnnnnnnnii:pool2d_nhwc", &xo, &yo, &g.planes, &g.h,
                          &g.w, &c, &g.oh, &g.ow, &g.kh, &g.kw, &g.sh, &g.sw, &g.pt, &g.pl,
                          &g.pb, &g.pr, &g.mode, &g.include_pad))
        return NULL;
    if (check_geometry(&g) < 0 || check_channels(&g, c) < 0) return NULL;
    Py_buffer xv, yv;
    if (onnxviz_get_floats(xo, &xv, g.planes * g.h * g.w * c, 1, 0, "pool2d_nhwc x") < 0)
        return NULL;
    if (onnxviz_get_floats(yo, &yv, g.planes * g.oh * g.ow * c, 1, 1, "pool2d_nhwc y") < 0) {
        PyBuffer_Release(&xv);
        return NULL;
    }
    pool_nhwc_run(xv.buf, yv.buf, &g, c);
    PyBuffer_Release(&xv);
    PyBuffer_Release(&yv);
    Py_RETURN_NONE;
}

/* ---- a held pool: a MaxPool or AveragePool node's common call ---------------------------
 *
 * `held(...)` makes the specialized call of a 2-D MaxPool (no Indices) or AveragePool of
 * explicit pads, floor rounding and no dilation (kernels/nn_pool.py's `held_pool`): for
 * a float32 image of any size laid out channels-last (an unwatched run's conv chains hand
 * pools such values, fusion_layout.py), the output size worked out as the op defines it,
 * pool2d_nhwc's run into a new 64-byte aligned channels-last output: the kernel's own
 * call, so its values, from the run loop's call to the result in C (native/held_call.h).
 * The Python layers it replaces (the node's context call, the geometry's key, the layout
 * tests, the output) cost 50 us a pool inside Inception v2's run.  Any other call (an
 * NCHW image, another dtype, windows past the image) returns `fallback(*args)`, the
 * kernel. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
    PoolGeometry g; /* the window, strides, pads and mode; the sizes come per call */
    int global;     /* a (0, 0) window: the whole image, a spatial mean (fusion_layout.py) */
} Held;

static PyObject *held_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    Held *self = (Held *)obj;
    const HeldCall *h = &self->call;
    if (!held_call_takes(h, args, nargsf, kwnames)) goto other;
    Py_buffer xb;
    if (!onnxviz_any_channels_last_view(args[0], h->ndarray, &xb)) goto other;
    PoolGeometry g = self->g;
    const Py_ssize_t c = xb.shape[1];
    g.planes = xb.shape[0];
    g.h = xb.shape[2];
    g.w = xb.shape[3];
    if (self->global) { /* the window is the whole image */
        g.kh = g.h;
        g.kw = g.w;
    }
    const Py_ssize_t span_h = g.h + g.pt + g.pb, span_w = g.w + g.pl + g.pr;
    if (xb.len == 0 || span_h < g.kh || span_w < g.kw) {
        PyBuffer_Release(&xb);
        goto other;
    }
    g.oh = (span_h - g.kh) / g.sh + 1;
    g.ow = (span_w - g.kw) / g.sw + 1;
    if (check_geometry(&g) < 0 || check_channels(&g, c) < 0) {
        PyErr_Clear();
        PyBuffer_Release(&xb);
        goto other;
    }
    float *y = NULL;
    PyObject *out =
        onnxviz_new_channels_last(h->empty, h->ndarray, h->u8, h->f32, g.planes, c, g.oh, g.ow, &y);
    if (out) pool_nhwc_run(xb.buf, y, &g, c);
    PyBuffer_Release(&xb);
    return out;
other:
    return held_call_other(h, args, nargsf, kwnames);
}

static void held_release(Held *self) { (void)self; }

HELD_CALL_TYPE(Held, HeldType, held, "onnxviz.runtime.native._pool.Held",
               "A pool node's call on channels-last images (held()).", held_release)

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *fallback, *ndarray, *empty, *u8, *f32;
    PoolGeometry g;
    memset(&g, 0, sizeof g);
    if (!PyArg_ParseTuple(args, "(nn)(nn)(nnnn)iiOOOOO:held", &g.kh, &g.kw, &g.sh, &g.sw, &g.pt,
                          &g.pl, &g.pb, &g.pr, &g.mode, &g.include_pad, &fallback, &ndarray,
                          &empty, &u8, &f32))
        return NULL;
    /* Checked with unit sizes: the window, strides, pads and mode. */
    const int global = g.kh == 0 && g.kw == 0;
    if (global) {
        if (g.sh != 1 || g.sw != 1 || g.pt || g.pl || g.pb || g.pr) {
            PyErr_SetString(PyExc_ValueError, "held: a whole-image window has no pads or strides");
            return NULL;
        }
        g.kh = g.kw = 1;
    }
    g.planes = g.h = g.w = g.oh = g.ow = 1;
    if (check_geometry(&g) < 0) return NULL;
    Held *obj = (Held *)held_call_new_plain(&HeldType, held_vectorcall, offsetof(Held, call), 1,
                                            fallback, ndarray, empty, u8, f32, "held");
    if (obj) {
        obj->g = g;
        obj->global = global;
    }
    return (PyObject *)obj;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"pool2d", py_pool2d, METH_VARARGS,
     "pool2d(x, y, planes, h, w, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, mode, include_pad):"
     " 2-D max (mode 0) or average (mode 1) pooling of float32 NCHW planes into y."},
    {"held", py_held, METH_VARARGS,
     "held((kh, kw), (sh, sw), (pad_top, pad_left, pad_bottom, pad_right), mode, "
     "include_pad, fallback, ndarray, empty, uint8, float32) -> a callable: f(x) = "
     "pool2d_nhwc's pool of a float32 channels-last x (N, C, H, W) of any size, floor "
     "rounding, as a new 64-byte aligned channels-last (N, C, OH, OW) array (a (0, 0) "
     "window: the whole image, OH = OW = 1); any other call is fallback(x)."},
    {"pool2d_nhwc", py_pool2d_nhwc, METH_VARARGS,
     "pool2d_nhwc(x, y, n, h, w, c, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, mode, "
     "include_pad): the same pools of float32 channels-last (N, H, W, C) x into (N, OH, OW, "
     "C) y."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pool", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pool(void) {
    if (PyType_Ready(&HeldType) < 0) return NULL;
    return PyModule_Create(&module);
}
