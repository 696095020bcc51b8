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
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if ONNXVIZ_X86
#include <immintrin.h>
#endif

static int level = 0;

typedef struct {
    Py_ssize_t planes, h, w, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr;
    int mode, include_pad;
} PoolGeometry;

/* NaN-propagating max: v replaces m when larger or NaN; a NaN m stays (no v is > NaN).
 * A select on the bits, not `?:`: GCC made the scalar form (the vector loops' remainders,
 * the edge windows) a branch on the data, mispredicted on random values (MaxPool 3x3/1 on
 * 14x14 planes: 1.9 ns an output against 1.2 on sorted data). */
static inline __attribute__((always_inline)) float pool_max(float m, float v) {
    uint32_t mb, vb;
    memcpy(&mb, &m, 4);
    memcpy(&vb, &v, 4);
    uint32_t take = 0u - (uint32_t)((v > m) | (v != v));
    uint32_t rb = (vb & take) | (mb & ~take);
    float r;
    memcpy(&r, &rb, 4);
    return r;
}

/* Cells of a window starting at `start` (length k) that count along one axis of size n
 * with pads begin/end: inside [0, n), or [-begin, n + end) with include_pad. */
static inline __attribute__((always_inline)) Py_ssize_t pool_count(Py_ssize_t start,
                                                                   Py_ssize_t k, Py_ssize_t n,
                                                                   Py_ssize_t begin,
                                                                   Py_ssize_t end,
                                                                   int include_pad) {
    Py_ssize_t lo = include_pad ? -begin : 0, hi = include_pad ? n + end : n;
    Py_ssize_t a = start > lo ? start : lo, b = start + k < hi ? start + k : hi;
    return b > a ? b - a : 0;
}

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

/* The whole call: `row` holds `span` floats (the padded row), `colcount` ow floats. */
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
__attribute__((target("avx2"))) static void pool_avx2(const float *x, float *y,
                                                      const PoolGeometry *g, float *row,
                                                      Py_ssize_t span, float *colcount) {
    pool_body(x, y, g, row, span, colcount);
}

#endif

/* ---- channels-last: pool2d_nhwc ----------------------------------------------------------
 *
 * x (N, H, W, C) and y (N, OH, OW, C): each output pixel combines its window's taps inside
 * the input, row-major, elementwise over the C contiguous channels (loops the compiler
 * vectorizes: a pixel of Inception's 576 channels is 36 vectors), then an average
 * divides by the same count as pool2d.  A window with no tap inside the input gives
 * -inf (max) or 0 / count (average), as the padded row gives pool2d.  The same values
 * as pool2d's for max; for the average another order of the same sums, so within the
 * same bound (k + 1) u sum|x| / count of the exact average.  NCHW planes of 7-28 floats
 * kept pool2d's vectors mostly in their remainders: onnxruntime's channels-blocked pools
 * ran Inception's 4x slower than ours did. */
static inline __attribute__((always_inline)) void
pool_nhwc_body(const float *x, float *y, const PoolGeometry *g, Py_ssize_t c) {
    const Py_ssize_t h = g->h, w = g->w, oh = g->oh, ow = g->ow, kh = g->kh, kw = g->kw;
    const int average = g->mode == 1;
    for (Py_ssize_t b = 0; b < g->planes; b++) {
        const float *image = x + b * h * w * c;
        for (Py_ssize_t oy = 0; oy < oh; oy++) {
            const Py_ssize_t iy = oy * g->sh - g->pt;
            const Py_ssize_t ky0 = iy < 0 ? -iy : 0, ky1 = h - iy < kh ? h - iy : kh;
            const float rows = (float)pool_count(iy, kh, h, g->pt, g->pb, g->include_pad);
            for (Py_ssize_t ox = 0; ox < ow; ox++) {
                const Py_ssize_t ix = ox * g->sw - g->pl;
                const Py_ssize_t kx0 = ix < 0 ? -ix : 0, kx1 = w - ix < kw ? w - ix : kw;
                float *restrict out = y + ((b * oh + oy) * ow + ox) * c;
                int first = 1;
                for (Py_ssize_t ky = ky0; ky < ky1; ky++) {
                    for (Py_ssize_t kx = kx0; kx < kx1; kx++) {
                        const float *restrict p = image + ((iy + ky) * w + ix + kx) * c;
                        if (first) {
                            for (Py_ssize_t i = 0; i < c; i++) out[i] = p[i];
                            first = 0;
                        } else if (average) {
                            for (Py_ssize_t i = 0; i < c; i++) out[i] = out[i] + p[i];
                        } else {
                            for (Py_ssize_t i = 0; i < c; i++) out[i] = pool_max(out[i], p[i]);
                        }
                    }
                }
                if (first) { /* no tap inside the input */
                    const float v = average ? 0.0f : -INFINITY;
                    for (Py_ssize_t i = 0; i < c; i++) out[i] = v;
                }
                if (average) {
                    /* rows * cols: a product of small integers, exact below 2^24. */
                    const float count =
                        rows * (float)pool_count(ix, kw, w, g->pl, g->pr, g->include_pad);
                    for (Py_ssize_t i = 0; i < c; i++) out[i] = out[i] / count;
                }
            }
        }
    }
}

static void pool_nhwc_generic(const float *x, float *y, const PoolGeometry *g, Py_ssize_t c) {
    pool_nhwc_body(x, y, g, c);
}

#if ONNXVIZ_X86
__attribute__((target("avx2"))) static void pool_nhwc_avx2(const float *x, float *y,
                                                           const PoolGeometry *g,
                                                           Py_ssize_t c) {
    pool_nhwc_body(x, y, g, c);
}

/* Eight channels at AVX-512: the loop above, made 16 wide by the compiler, ran them in
 * its scalar tail (a small UNet's 2x2 max pool of 8 x 64 x 64: 16 us, onnxruntime's 12
 * with its call), and pool_nhwc_regs' half-masked vectors took 14.  Here each tap is one
 * ymm step: the same selects (pool_max's NaN rule), sums and division, so the same
 * values. */
__attribute__((target("avx2"))) static void pool_nhwc_by8(const float *x, float *y,
                                                          const PoolGeometry *g,
                                                          Py_ssize_t c) {
    const Py_ssize_t h = g->h, w = g->w, oh = g->oh, ow = g->ow, kh = g->kh, kw = g->kw;
    const int average = g->mode == 1;
    for (Py_ssize_t b = 0; b < g->planes; b++) {
        const float *image = x + b * h * w * c;
        for (Py_ssize_t oy = 0; oy < oh; oy++) {
            const Py_ssize_t iy = oy * g->sh - g->pt;
            const Py_ssize_t ky0 = iy < 0 ? -iy : 0, ky1 = h - iy < kh ? h - iy : kh;
            const float rows = (float)pool_count(iy, kh, h, g->pt, g->pb, g->include_pad);
            for (Py_ssize_t ox = 0; ox < ow; ox++) {
                const Py_ssize_t ix = ox * g->sw - g->pl;
                const Py_ssize_t kx0 = ix < 0 ? -ix : 0, kx1 = w - ix < kw ? w - ix : kw;
                float *out = y + ((b * oh + oy) * ow + ox) * c;
                for (Py_ssize_t i = 0; i < c; i += 8) {
                    __m256 acc = _mm256_set1_ps(average ? 0.0f : -INFINITY);
                    int first = 1;
                    for (Py_ssize_t ky = ky0; ky < ky1; ky++)
                        for (Py_ssize_t kx = kx0; kx < kx1; kx++) {
                            const __m256 v =
                                _mm256_loadu_ps(image + ((iy + ky) * w + ix + kx) * c + i);
                            if (first) {
                                acc = v;
                                first = 0;
                            } else if (average) {
                                acc = _mm256_add_ps(acc, v);
                            } else {
                                const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, acc, _CMP_GT_OQ),
                                                                 _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                                acc = _mm256_blendv_ps(acc, v, take);
                            }
                        }
                    if (average) {
                        const float count =
                            rows * (float)pool_count(ix, kw, w, g->pl, g->pr, g->include_pad);
                        acc = _mm256_div_ps(acc, _mm256_set1_ps(count));
                    }
                    _mm256_storeu_ps(out + i, acc);
                }
            }
        }
    }
}

/* Any channel count at AVX-512: per output pixel, 64 channels at a time (the last vector
 * masked), each kept in a register over the window's taps, then stored once (the body
 * above reloads and stores the output's channels at every tap, and its NaN-keeping
 * select compiled to several operations a vector: ResNet-50's 3x3/2 max pool of 64 x
 * 112 x 112).  pool_max's rule as a max and one fix-up: (v > m ? v : m)
 * keeps a NaN m, then a NaN v replaces it; the same sums and division: the same values.
 * One thread, us, old (the body above; 8-channel runs by pool_nhwc_by8) / this: 3x3/2 of
 * 64 x 112 x 112 217 / 166 max, 221 / 166 average; 3x3/1 of 256 x 56 x 56 739 / 487;
 * 192 x 28 x 28 108 / 76; 3x3/2 of 576 x 28 x 28 76 / 58; 3x3/1 of 40 x 35 x 35 (by8)
 * 59 / 43; 2x2/2 of 1024 x 14 x 14 26 / 19; 2x2/2 of 8 x 64 x 64 (by8) 7.8 / 14.3, which
 * keeps by8. */
__attribute__((target("avx512f"))) static void pool_nhwc_regs(const float *x, float *y,
                                                             const PoolGeometry *g,
                                                             Py_ssize_t c) {
    enum { NV = 4 };
    const Py_ssize_t h = g->h, w = g->w, oh = g->oh, ow = g->ow, kh = g->kh, kw = g->kw;
    const int average = g->mode == 1;
    for (Py_ssize_t b = 0; b < g->planes; b++) {
        const float *image = x + b * h * w * c;
        for (Py_ssize_t oy = 0; oy < oh; oy++) {
            const Py_ssize_t iy = oy * g->sh - g->pt;
            const Py_ssize_t ky0 = iy < 0 ? -iy : 0, ky1 = h - iy < kh ? h - iy : kh;
            const float rows = (float)pool_count(iy, kh, h, g->pt, g->pb, g->include_pad);
            for (Py_ssize_t ox = 0; ox < ow; ox++) {
                const Py_ssize_t ix = ox * g->sw - g->pl;
                const Py_ssize_t kx0 = ix < 0 ? -ix : 0, kx1 = w - ix < kw ? w - ix : kw;
                float *out = y + ((b * oh + oy) * ow + ox) * c;
                const __m512 count = _mm512_set1_ps(
                    rows * (float)pool_count(ix, kw, w, g->pl, g->pr, g->include_pad));
                for (Py_ssize_t i0 = 0; i0 < c; i0 += 16 * NV) {
                    const Py_ssize_t left = c - i0;
                    const int nv = left >= 16 * NV ? NV : (int)((left + 15) / 16);
                    __mmask16 mask[NV];
                    for (int v = 0; v < NV; v++) {
                        const Py_ssize_t n = left - 16 * v;
                        mask[v] = n >= 16 ? 0xFFFF : n > 0 ? (__mmask16)((1u << n) - 1) : 0;
                    }
                    __m512 acc[NV];
                    for (int v = 0; v < NV; v++)
                        acc[v] = _mm512_set1_ps(average ? 0.0f : -INFINITY);
                    int first = 1;
                    for (Py_ssize_t ky = ky0; ky < ky1; ky++)
                        for (Py_ssize_t kx = kx0; kx < kx1; kx++) {
                            const float *p = image + ((iy + ky) * w + ix + kx) * c + i0;
                            for (int v = 0; v < nv; v++) {
                                const __m512 t = _mm512_maskz_loadu_ps(mask[v], p + 16 * v);
                                if (first)
                                    acc[v] = t;
                                else if (average)
                                    acc[v] = _mm512_add_ps(acc[v], t);
                                else
                                    acc[v] = _mm512_mask_mov_ps(
                                        _mm512_max_ps(t, acc[v]),
                                        _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q), t);
                            }
                            first = 0;
                        }
                    for (int v = 0; v < nv; v++) {
                        const __m512 r = average ? _mm512_div_ps(acc[v], count) : acc[v];
                        _mm512_mask_storeu_ps(out + i0 + 16 * v, mask[v], r);
                    }
                }
            }
        }
    }
}
#endif

/* Sizes this kernel accepts: each below 2^24 (the counts stay exact floats and no
 * product below overflows), products checked against the buffers by the caller. */
#define POOL_LIMIT ((Py_ssize_t)1 << 24)

/* 0, or -1 with a ValueError for a geometry the kernels do not take. */
static int check_geometry(const PoolGeometry *gp) {
    const PoolGeometry g = *gp;
    Py_ssize_t sizes[] = {g.planes, g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (sizes[i] < 1 || sizes[i] >= POOL_LIMIT) {
            PyErr_SetString(PyExc_ValueError, "pool2d: sizes must be 1 .. 2^24 - 1");
            return -1;
        }
    }
    Py_ssize_t pads[] = {g.pt, g.pl, g.pb, g.pr};
    for (size_t i = 0; i < 4; i++) {
        if (pads[i] < 0 || pads[i] >= POOL_LIMIT) {
            PyErr_SetString(PyExc_ValueError, "pool2d: pads must be 0 .. 2^24 - 1");
            return -1;
        }
    }
    if (g.mode != 0 && g.mode != 1) {
        PyErr_SetString(PyExc_ValueError, "pool2d: mode must be 0 (max) or 1 (average)");
        return -1;
    }
    /* planes * h * w in floats must fit the address space: checked in two steps. */
    if (g.h * g.w > PY_SSIZE_T_MAX / 4 / g.planes ||
        g.oh * g.ow > PY_SSIZE_T_MAX / 4 / g.planes) {
        PyErr_SetString(PyExc_ValueError, "pool2d: tensor too large");
        return -1;
    }
    return 0;
}

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
    /* The padded row and the column counts, then pool_same's two planes. */
    float *row = malloc((size_t)(span + g.ow + 2 * g.h * g.w) * sizeof(float));
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
#if ONNXVIZ_X86
    if (level >= 2 && c == 8)
        pool_nhwc_by8(x, y, g, c);
    else if (level >= 2)
        pool_nhwc_regs(x, y, g, c);
    else if (level == 1)
        pool_nhwc_avx2(x, y, g, c);
    else
#endif
        pool_nhwc_generic(x, y, g, c);
    Py_END_ALLOW_THREADS;
}

/* 0, or -1 with a ValueError for a channel count pool2d_nhwc does not take. */
static int check_channels(const PoolGeometry *g, Py_ssize_t c) {
    if (c < 1 || c >= POOL_LIMIT || g->h * g->w > PY_SSIZE_T_MAX / 4 / g->planes / c ||
        g->oh * g->ow > PY_SSIZE_T_MAX / 4 / g->planes / c) {
        PyErr_SetString(PyExc_ValueError, "pool2d_nhwc: channels must be 1 .. 2^24 - 1");
        return -1;
    }
    return 0;
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
