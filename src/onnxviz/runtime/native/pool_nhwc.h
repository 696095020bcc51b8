/* pool_nhwc.h: the channels-last 2-D max and average pool (native/_pool.c's pool2d_nhwc),
 * shared by _pool.c and by _conv.c, whose held conv pools its output rows band by band
 * while they are in cache (a conv chain ending in a MaxPool: fusion.ConvChain.pool).
 * Static functions: each module that includes it compiles its own copy; `pool_nhwc_at`
 * runs the level's code path (the caller releases the GIL). */
#ifndef ONNXVIZ_POOL_NHWC_H
#define ONNXVIZ_POOL_NHWC_H

#include "levels.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#if ONNXVIZ_X86
#include <immintrin.h>
#endif

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

/* 0, or -1 with a ValueError for a channel count pool2d_nhwc does not take. */
static int check_channels(const PoolGeometry *g, Py_ssize_t c) {
    if (c < 1 || c >= POOL_LIMIT || g->h * g->w > PY_SSIZE_T_MAX / 4 / g->planes / c ||
        g->oh * g->ow > PY_SSIZE_T_MAX / 4 / g->planes / c) {
        PyErr_SetString(PyExc_ValueError, "pool2d_nhwc: channels must be 1 .. 2^24 - 1");
        return -1;
    }
    return 0;
}

/* The channels-last pool of a checked geometry at `level` (the module's), GIL as the caller
 * holds it. */
static void pool_nhwc_at(int level, const float *x, float *y, const PoolGeometry *g,
                         Py_ssize_t c) {
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
}

#endif /* ONNXVIZ_POOL_NHWC_H */
