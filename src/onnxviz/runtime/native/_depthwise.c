/* onnxviz.runtime.native._depthwise: float32 depthwise 2-D convolution, channels-last.
 *
 *   out[n, oy, ox, c] = act(sum_{ky, kx} x[n, iy, ix, c] * w[ky, kx, c] + bias[c]
 *                           + addend[n, oy, ox, c])
 *   with iy = oy * sh - pt + ky * dh, ix = ox * sw - pl + kx * dw
 *
 * x (N, H, W, C), w (KH, KW, C), bias (C,) or None, addend (N, OH, OW, C) or None and out
 * (N, OH, OW, C) are contiguous float32 buffers.  A tap whose (iy, ix) falls outside the
 * image (zero padding) is skipped: no padded copy of the input.
 *
 * The numbers.  Every level computes, per output value, in this order:
 *   acc = 0; for ky, for kx (taps inside the image): acc = fl(acc + fl(x * w));
 *   acc = fl(acc + bias); acc = fl(acc + addend); activation.
 * A multiply and a separate add (never a fused multiply-add: `FP_CONTRACT OFF` and
 * -std=c11 keep the compiler from contracting the generic loop, and the SIMD paths
 * use mul and add intrinsics), so the generic, AVX2 and AVX-512 paths give the same
 * bits, and these are the bits of numpy's multiply-then-add per kernel offset
 * (nn_conv.depthwise) plus the bias: a skipped padding tap adds an exact zero there.
 * The group kernels (below) order each pixel's taps the same way: the same bits.  Error bound of the K = kh * kw term sum plus the bias:
 * |y - exact| <= gamma(K + 1) * (sum |x * w| + |bias|), gamma(m) = m u / (1 - m u),
 * u = 2^-24 (tests/runtime/test_native_depthwise.py checks it in float64).
 *
 * Activations (applied to the sum in the kernels' own operations, the same values):
 *   0 none; 1 Relu max(y, 0); 2 Clip min(max(y, lo), hi) (lo/hi NaN: no bound);
 *   3 HardSwish y * min(max(y * (1/6) + 0.5, 0), 1); 4 SiLU y * sigmoid(y) (activations.h).
 *   A NaN sum stays NaN.
 *
 * Levels (native/__init__.py): 0 generic C (16 channels at a time as four 4-lane
 * vectors of GCC/Clang's vector extension: the platform's baseline SIMD, SSE2 or NEON;
 * a plain-C per-channel loop kept 16 scalar sums and ran 2-3x slower); 1 AVX2 (8
 * lanes); 2 and 3 AVX-512F (16 lanes, masked tails).  Functions carry their instruction set as a target
 * attribute: the module is built without -march and runs on every x86-64 CPU. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "levels.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* GCC: off already under -std=c11 (setup.py) */
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define DW_X86 1
#include <immintrin.h>
#else
#define DW_X86 0
#endif
#include "activations.h"
#include "held_call.h"

static int level = 0;

/* One output pixel for one block of at most BLOCK channels.  Its taps inside the image
 * are kernel rows ky0..ky1-1 times columns kx0..kx1-1 (the image's bounds cut a range
 * from each); tap t = ky * kw + kx reads x at xbase + corner + xoff[t] and w at
 * wbase + t * c (xbase and wbase at the block's first channel; corner, the offset of
 * the window's top-left tap, is negative at a top or left border, but only the taps
 * inside the image are read). */
typedef struct {
    const float *xbase, *wbase;
    const Py_ssize_t *xoff;
    Py_ssize_t corner, c;
    int ky0, ky1, kx0, kx1, kw;
    int width;         /* channels in this block: 1..BLOCK */
    Py_ssize_t pstep;  /* floats between neighbouring output pixels' inputs: sw * C */
    int slide;         /* kw when 3, 5 or 7, dilation 1, stride 1 or 2 (slide_*), else 0 */
    int sw;            /* the column stride */
    Py_ssize_t in_w, pl; /* the input's width, the left padding */
    Py_ssize_t inner0, inner1; /* output columns reading every kernel column */
    const float *bias; /* at the block's first channel, or NULL */
    const float *add;  /* addend at (n, oy, ox, first channel), or NULL */
    float *out;        /* out at (n, oy, ox, first channel) */
    int act;
    float lo, hi;      /* Clip bounds (NaN: none) */
} Block;

/* Channels per block: 4 AVX-512 vectors.  The block loop is the outer one, so one
 * block's weights (taps x 256 bytes) and the input rows its output row reads stay in
 * the L1 cache across the pixels (channels inner, every channel per pixel, read 48 KB
 * per pixel of a 5x5 layer of 240 channels from L2 and ran 3-4x slower). */
#define BLOCK 64

/* The taps of pixel p inside the image, row-major (t: the tap's index in the kernel). */
#define FOR_TAPS(p)                                                                        \
    for (int ky = (p)->ky0; ky < (p)->ky1; ky++)                                           \
        for (int kx = (p)->kx0, t = ky * (p)->kw + kx; kx < (p)->kx1; kx++, t++)

/* ---- generic C ------------------------------------------------------------------- */

/* Channels [at, at + n) of the block, n <= 16, one at a time. */
static void lanes_scalar(const Block *p, int at, int n) {
    float acc[16];
    for (int i = 0; i < n; i++) acc[i] = 0.0f;
    FOR_TAPS(p) {
        const float *restrict x = p->xbase + (p->corner + p->xoff[t]) + at;
        const float *restrict w = p->wbase + t * p->c + at;
        for (int i = 0; i < n; i++) {
            float prod = x[i] * w[i];
            acc[i] = acc[i] + prod;
        }
    }
    for (int i = 0; i < n; i++) {
        float y = acc[i];
        if (p->bias) y = y + p->bias[at + i];
        if (p->add) y = y + p->add[at + i];
        p->out[at + i] = act_scalar(y, p->act, p->lo, p->hi);
    }
}

#if defined(__GNUC__) || defined(__clang__)
/* 16 channels as four 4-lane vectors of the compiler's vector extension: the baseline
 * instruction set (SSE2 on x86-64, NEON on ARM), a mul and an add per lane as above. */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *a) {
    v4f v;
    memcpy(&v, a, sizeof v);
    return v;
}

static void lanes16(const Block *p, int at) {
    v4f a0 = {0.0f, 0.0f, 0.0f, 0.0f}, a1 = a0, a2 = a0, a3 = a0;
    FOR_TAPS(p) {
        const float *x = p->xbase + (p->corner + p->xoff[t]) + at;
        const float *w = p->wbase + t * p->c + at;
        v4f m0 = load4(x) * load4(w), m1 = load4(x + 4) * load4(w + 4);
        v4f m2 = load4(x + 8) * load4(w + 8), m3 = load4(x + 12) * load4(w + 12);
        a0 = a0 + m0;
        a1 = a1 + m1;
        a2 = a2 + m2;
        a3 = a3 + m3;
    }
    float acc[16];
    memcpy(acc, &a0, 16);
    memcpy(acc + 4, &a1, 16);
    memcpy(acc + 8, &a2, 16);
    memcpy(acc + 12, &a3, 16);
    for (int i = 0; i < 16; i++) {
        float y = acc[i];
        if (p->bias) y = y + p->bias[at + i];
        if (p->add) y = y + p->add[at + i];
        p->out[at + i] = act_scalar(y, p->act, p->lo, p->hi);
    }
}
#else
static void lanes16(const Block *p, int at) { lanes_scalar(p, at, 16); }
#endif

/* Kernel widths the SIMD levels' pixel-group kernels take (their column masks' size);
 * outside the x86 block: the dispatch reads it on every platform. */
#define MAX_KW 16

static void block_generic(const Block *p) {
    int at = 0;
    for (; at + 16 <= p->width; at += 16) lanes16(p, at);
    if (at < p->width) lanes_scalar(p, at, p->width - at);
}

#if DW_X86
/* ---- AVX2 (8 lanes; up to 8 vectors per block, 4 accumulated at a time) ------------ */

/* NV vectors of channels from channel `at` of the block; the last one masked by `last`
 * (every lane of the others is inside the block).  NV is a constant at each call. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
vectors_avx2(const Block *p, int at, const int NV, __m256i last) {
    __m256 acc[4];
    for (int v = 0; v < NV; v++) acc[v] = _mm256_setzero_ps();
    FOR_TAPS(p) {
        const float *x = p->xbase + (p->corner + p->xoff[t]) + at;
        const float *w = p->wbase + t * p->c + at;
        for (int v = 0; v < NV - 1; v++)
            acc[v] = _mm256_add_ps(
                acc[v], _mm256_mul_ps(_mm256_loadu_ps(x + 8 * v), _mm256_loadu_ps(w + 8 * v)));
        acc[NV - 1] = _mm256_add_ps(
            acc[NV - 1], _mm256_mul_ps(_mm256_maskload_ps(x + 8 * (NV - 1), last),
                                       _mm256_maskload_ps(w + 8 * (NV - 1), last)));
    }
    for (int v = 0; v < NV; v++) {
        const __m256i m = v == NV - 1 ? last : _mm256_set1_epi32(-1);
        __m256 y = acc[v];
        if (p->bias) y = _mm256_add_ps(y, _mm256_maskload_ps(p->bias + at + 8 * v, m));
        if (p->add) y = _mm256_add_ps(y, _mm256_maskload_ps(p->add + at + 8 * v, m));
        store8(p->out + at + 8 * v, m, act8(y, p->act, p->lo, p->hi));
    }
}

__attribute__((target("avx2,fma"))) static void block_avx2(const Block *p) {
    int at = 0;
    while (at < p->width) {
        const int rest = p->width - at;
        const int nv = rest >= 32 ? 4 : (rest + 7) / 8;
        const __m256i last = mask8(rest - 8 * (nv - 1));
        switch (nv) {
        case 4:
            vectors_avx2(p, at, 4, last);
            break;
        case 3:
            vectors_avx2(p, at, 3, last);
            break;
        case 2:
            vectors_avx2(p, at, 2, last);
            break;
        default:
            vectors_avx2(p, at, 1, last);
        }
        at += 8 * nv;
    }
}

/* ---- several pixels of an output row at a time (the SIMD levels) ------------------------
 *
 * One pixel at a time (vectors_avx2/512), each tap costs two loads per multiply-add and
 * the four sums' add latency: a third of the arithmetic rate.  Here a group of up to PIX
 * pixels of one output row runs per vector of channels: each tap's weight vector is
 * loaded once for the group, and the group's sums are independent.  A pixel at the
 * image's left or right border reads fewer kernel columns: valid[kx] has bit j set when
 * pixel j of the group reads column kx, and a pixel's sum skips the others as the
 * one-pixel kernels do.  Each sum takes its taps in the same order as theirs: the same
 * bits. */

/* A group of NP pixels: the kernel without column tests when every pixel reads every
 * column (the image's inside), with them at its borders.  The sliding kernel's columns
 * inside the image are [lo, hi); a group inside the image gets them as constants, so its
 * copy has no test and no skipped column (ShuffleNet's and EfficientNet's 3x3 convs,
 * us, variable bounds -> constant: 112 px of 32 channels 129 -> 114, stride 2 of 96
 * channels 146 -> 123, 56 px of 144 channels 155 -> 138, 7 px of 960 18 -> 14). */
#define SLIDE(slider, NP, K, S)                                                            \
    if (lo == 0 && hi == (NP - 1) * S + K)                                                 \
        slider(p, j0, NP, at, K, S, 0, (NP - 1) * S + K);                                  \
    else                                                                                   \
        slider(p, j0, NP, at, K, S, lo, hi);
#define PIXELS(kernel, slider, NP)                                                         \
    if (p->slide && full) {                                                                \
        const Py_ssize_t ix0 = j0 * p->sw - p->pl, cols_read = (NP - 1) * p->sw + p->slide;  \
        const int lo = (int)(ix0 < 0 ? -ix0 : 0);                                          \
        const int hi = (int)(p->in_w - ix0 < cols_read ? p->in_w - ix0 : cols_read);       \
        if (p->slide == 3 && p->sw == 1) {                                                 \
            SLIDE(slider, NP, 3, 1)                                                        \
        } else if (p->slide == 3) {                                                        \
            SLIDE(slider, NP, 3, 2)                                                        \
        } else if (p->slide == 5 && p->sw == 1) {                                          \
            SLIDE(slider, NP, 5, 1)                                                        \
        } else if (p->slide == 5) {                                                        \
            SLIDE(slider, NP, 5, 2)                                                        \
        } else if (p->sw == 1) {                                                           \
            SLIDE(slider, NP, 7, 1)                                                        \
        } else {                                                                           \
            SLIDE(slider, NP, 7, 2)                                                        \
        }                                                                                  \
    } else if (v)                                                                          \
        kernel(p, j0, NP, at, m, 0, 1, v);                                                 \
    else if (full)                                                                         \
        kernel(p, j0, NP, at, m, 1, 0, NULL);                                              \
    else                                                                                   \
        kernel(p, j0, NP, at, m, 0, 0, NULL);

/* Fills valid[0..kw) for the np pixels from `first` (cols: each output column's range of
 * kernel columns inside the image); returns whether every pixel reads every column. */
static int group_columns(const int *cols, Py_ssize_t first, int np, int kw, unsigned *valid) {
    for (int kx = 0; kx < kw; kx++) valid[kx] = 0;
    for (int j = 0; j < np; j++)
        for (int kx = cols[2 * (first + j)]; kx < cols[2 * (first + j) + 1]; kx++)
            valid[kx] |= 1u << j;
    const unsigned all = (1u << np) - 1u;
    for (int kx = 0; kx < kw; kx++)
        if (valid[kx] != all) return 0;
    return 1;
}

#define PIX8 8
/* NP pixels from pixel j0 of the row p describes (p->corner, p->out and p->add at its
 * first pixel), channels [at, at + 8) of the block masked by m; valid NULL: every pixel
 * reads every kernel column. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
pixels_avx2(const Block *p, Py_ssize_t j0, const int NP, int at, __m256i m, const int FULL,
            const int TESTED, const unsigned *valid) {
    __m256 acc[PIX8];
#pragma GCC unroll 16
    for (int j = 0; j < NP; j++) acc[j] = _mm256_setzero_ps();
    const Py_ssize_t pstep = p->pstep, c = p->c;
    const Py_ssize_t *xoff = p->xoff;
    const int kw = p->kw;
    const float *xb = p->xbase + p->corner + j0 * pstep + at, *wb = p->wbase + at;
    /* (The pragmas: unrolled late, GCC kept the sums in memory, a store per tap.) */
    for (int ky = p->ky0; ky < p->ky1; ky++) {
        for (int kx = 0; kx < kw; kx++) {
            const int t = ky * kw + kx;
            const unsigned reads = TESTED ? valid[kx] : 0u;
            const __m256 w = FULL ? _mm256_loadu_ps(wb + t * c) : _mm256_maskload_ps(wb + t * c, m);
            const float *x = xb + xoff[t];
            const float *xj = x;
#pragma GCC unroll 16
            for (int j = 0; j < NP; j++, xj += pstep)
                if (!TESTED || (reads >> j & 1u))
                    acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(FULL ? _mm256_loadu_ps(xj) : _mm256_maskload_ps(xj, m), w));
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < NP; j++) {
        const Py_ssize_t o = (j0 + j) * c + at;
        __m256 y = acc[j];
        if (p->bias) y = _mm256_add_ps(y, _mm256_maskload_ps(p->bias + at, m));
        if (p->add) y = _mm256_add_ps(y, _mm256_maskload_ps(p->add + o, m));
        store8(p->out + o, m, act8(y, p->act, p->lo, p->hi));
    }
}

/* As pixels_avx2 at stride 1 and dilation 1, for a kernel KW wide: per kernel row, each
 * input column is loaded once for the (pixel, kernel column) pairs that read it (pixel j
 * reads column j + kx), its kernel row's KW weight vectors stay in registers.  A pixel's
 * taps still come in the order ky, kx: the same sums.  (Loads, not arithmetic, bound
 * pixels_avx2 when the input is not 32-byte aligned, as numpy's large arrays are not.) */
__attribute__((target("avx2,fma"), always_inline)) static inline void
slide_avx2(const Block *p, Py_ssize_t j0, const int NP, int at, const int KW, const int S,
           int lo, int hi) {
    __m256 acc[PIX8], wv[7];
#pragma GCC unroll 16
    for (int j = 0; j < NP; j++) acc[j] = _mm256_setzero_ps();
    const Py_ssize_t c = p->c;
    const float *xb = p->xbase + p->corner + j0 * S * c + at, *wb = p->wbase + at;
    for (int ky = p->ky0; ky < p->ky1; ky++) {
        const float *x = xb + p->xoff[ky * KW], *w = wb + (Py_ssize_t)ky * KW * c;
#pragma GCC unroll 8
        for (int kx = 0; kx < KW; kx++)
            wv[kx] = _mm256_loadu_ps(w + kx * c);
#pragma GCC unroll 32
        for (int col = 0; col < (NP - 1) * S + KW; col++) {
            if (col < lo || col >= hi) continue; /* outside the image: every tap reading it */
            const __m256 xv = _mm256_loadu_ps(x + col * c);
#pragma GCC unroll 8
            for (int kx = 0; kx < KW; kx++)
                if (col - kx >= 0 && (col - kx) % S == 0 && (col - kx) / S < NP)
                    acc[(col - kx) / S] =
                        _mm256_add_ps(acc[(col - kx) / S], _mm256_mul_ps(xv, wv[kx]));
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < NP; j++) {
        const Py_ssize_t o = (j0 + j) * c + at;
        __m256 y = acc[j];
        if (p->bias) y = _mm256_add_ps(y, _mm256_loadu_ps(p->bias + at));
        if (p->add) y = _mm256_add_ps(y, _mm256_loadu_ps(p->add + o));
        _mm256_storeu_ps(p->out + o, act8(y, p->act, p->lo, p->hi));
    }
}

/* A group of NP pixels from j0, every channel block of the row: each NP its own function
 * (inlined into row_avx2's switch, the 56 forms made one function that took gcc most of
 * this file's compile time). */
typedef void (*GroupFn)(const Block *, Py_ssize_t, const unsigned *);
#define GROUP8_FN(NP)                                                                      \
    __attribute__((target("avx2,fma"), noinline)) static void group8_##NP(                  \
        const Block *p, Py_ssize_t j0, const unsigned *v) {                                \
        for (int at = 0; at < p->width; at += 8) {                                         \
            const int full = p->width - at >= 8;                                           \
            const __m256i m = mask8(full ? 8 : p->width - at);                             \
            PIXELS(pixels_avx2, slide_avx2, NP)                                            \
        }                                                                                  \
    }
GROUP8_FN(1) GROUP8_FN(2) GROUP8_FN(3) GROUP8_FN(4) GROUP8_FN(5) GROUP8_FN(6) GROUP8_FN(7)
GROUP8_FN(8)
static const GroupFn GROUPS8[PIX8] = {group8_1, group8_2, group8_3, group8_4,
                                      group8_5, group8_6, group8_7, group8_8};

/* The `count` pixels of the output row p describes, in groups of PIX8. */
__attribute__((target("avx2,fma"))) static void row_avx2(const Block *p, Py_ssize_t count,
                                                         const int *cols) {
    unsigned valid[MAX_KW];
    /* Near-equal groups (14 pixels: 7 + 7; a group of 2 would run at a third of the rate). */
    const Py_ssize_t groups = (count + PIX8 - 1) / PIX8;
    /* The columns each pixel reads, for the kernels that test them: not the sliding
     * ones, which take every full vector of channels (their bounds are the image's), so
     * a row whose vectors are all full never needs them. */
    const int tested = !p->slide || p->width % 8;
    for (Py_ssize_t g = 0, j0 = 0; g < groups; g++) {
        const int np = (int)((count * (g + 1)) / groups - j0);
        const unsigned *v = !tested || (j0 >= p->inner0 && j0 + np <= p->inner1) ||
                                    group_columns(cols, j0, np, p->kw, valid)
                                ? NULL
                                : valid;
        GROUPS8[(np >= 1 && np <= PIX8 ? np : 1) - 1](p, j0, v);
        j0 += np;
    }
}

/* ---- AVX-512F (16 lanes; 4 vectors per block, masked) -------------------------------- */

__attribute__((target("avx512f"), always_inline)) static inline void
vectors_avx512(const Block *p, const int NV, __mmask16 last) {
    __m512 acc[4];
    for (int v = 0; v < NV; v++) acc[v] = _mm512_setzero_ps();
    FOR_TAPS(p) {
        const float *x = p->xbase + (p->corner + p->xoff[t]), *w = p->wbase + t * p->c;
        for (int v = 0; v < NV; v++) {
            const __mmask16 m = v == NV - 1 ? last : (__mmask16)0xFFFF;
            acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + 16 * v),
                                                         _mm512_maskz_loadu_ps(m, w + 16 * v)));
        }
    }
    for (int v = 0; v < NV; v++) {
        const __mmask16 m = v == NV - 1 ? last : (__mmask16)0xFFFF;
        __m512 y = acc[v];
        if (p->bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, p->bias + 16 * v));
        if (p->add) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, p->add + 16 * v));
        _mm512_mask_storeu_ps(p->out + 16 * v, m, act16(y, p->act, p->lo, p->hi));
    }
}

__attribute__((target("avx512f"))) static void block_avx512(const Block *p) {
    const int nv = (p->width + 15) / 16;
    const int rest = p->width - 16 * (nv - 1);
    const __mmask16 last = (__mmask16)(rest >= 16 ? 0xFFFFu : (1u << rest) - 1u);
    switch (nv) {
    case 4:
        vectors_avx512(p, 4, last);
        break;
    case 3:
        vectors_avx512(p, 3, last);
        break;
    case 2:
        vectors_avx512(p, 2, last);
        break;
    default:
        vectors_avx512(p, 1, last);
    }
}
/* As pixels_avx2, 16 channels a vector, up to PIX16 pixels. */
#define PIX16 12
__attribute__((target("avx512f"), always_inline)) static inline void
pixels_avx512(const Block *p, Py_ssize_t j0, const int NP, int at, __mmask16 m,
              const int FULL, const int TESTED, const unsigned *valid) {
    __m512 acc[PIX16];
#pragma GCC unroll 16
    for (int j = 0; j < NP; j++) acc[j] = _mm512_setzero_ps();
    const Py_ssize_t pstep = p->pstep, c = p->c;
    const Py_ssize_t *xoff = p->xoff;
    const int kw = p->kw;
    const float *xb = p->xbase + p->corner + j0 * pstep + at, *wb = p->wbase + at;
    for (int ky = p->ky0; ky < p->ky1; ky++) {
        for (int kx = 0; kx < kw; kx++) {
            const int t = ky * kw + kx;
            const unsigned reads = TESTED ? valid[kx] : 0u;
            const __m512 w = FULL ? _mm512_loadu_ps(wb + t * c) : _mm512_maskz_loadu_ps(m, wb + t * c);
            const float *x = xb + xoff[t];
            const float *xj = x;
#pragma GCC unroll 16
            for (int j = 0; j < NP; j++, xj += pstep)
                if (!TESTED || (reads >> j & 1u))
                    acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(FULL ? _mm512_loadu_ps(xj) : _mm512_maskz_loadu_ps(m, xj), w));
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < NP; j++) {
        const Py_ssize_t o = (j0 + j) * c + at;
        __m512 y = acc[j];
        if (p->bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, p->bias + at));
        if (p->add) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, p->add + o));
        _mm512_mask_storeu_ps(p->out + o, m, act16(y, p->act, p->lo, p->hi));
    }
}

/* As slide_avx2, 16 channels a vector. */
__attribute__((target("avx512f"), always_inline)) static inline void
slide_avx512(const Block *p, Py_ssize_t j0, const int NP, int at, const int KW, const int S,
           int lo, int hi) {
    __m512 acc[PIX16], wv[7];
#pragma GCC unroll 16
    for (int j = 0; j < NP; j++) acc[j] = _mm512_setzero_ps();
    const Py_ssize_t c = p->c;
    const float *xb = p->xbase + p->corner + j0 * S * c + at, *wb = p->wbase + at;
    for (int ky = p->ky0; ky < p->ky1; ky++) {
        const float *x = xb + p->xoff[ky * KW], *w = wb + (Py_ssize_t)ky * KW * c;
#pragma GCC unroll 8
        for (int kx = 0; kx < KW; kx++)
            wv[kx] = _mm512_loadu_ps(w + kx * c);
#pragma GCC unroll 32
        for (int col = 0; col < (NP - 1) * S + KW; col++) {
            if (col < lo || col >= hi) continue; /* outside the image: every tap reading it */
            const __m512 xv = _mm512_loadu_ps(x + col * c);
#pragma GCC unroll 8
            for (int kx = 0; kx < KW; kx++)
                if (col - kx >= 0 && (col - kx) % S == 0 && (col - kx) / S < NP)
                    acc[(col - kx) / S] =
                        _mm512_add_ps(acc[(col - kx) / S], _mm512_mul_ps(xv, wv[kx]));
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < NP; j++) {
        const Py_ssize_t o = (j0 + j) * c + at;
        __m512 y = acc[j];
        if (p->bias) y = _mm512_add_ps(y, _mm512_loadu_ps(p->bias + at));
        if (p->add) y = _mm512_add_ps(y, _mm512_loadu_ps(p->add + o));
        _mm512_storeu_ps(p->out + o, act16(y, p->act, p->lo, p->hi));
    }
}

/* As GROUP8_FN, 16 channels a vector. */
#define GROUP16_FN(NP)                                                                     \
    __attribute__((target("avx512f"), noinline)) static void group16_##NP(                  \
        const Block *p, Py_ssize_t j0, const unsigned *v) {                                \
        for (int at = 0; at < p->width; at += 16) {                                        \
            const int rest = p->width - at, full = rest >= 16;                             \
            const __mmask16 m = (__mmask16)(full ? 0xFFFFu : (1u << rest) - 1u);           \
            PIXELS(pixels_avx512, slide_avx512, NP)                                        \
        }                                                                                  \
    }
GROUP16_FN(1) GROUP16_FN(2) GROUP16_FN(3) GROUP16_FN(4) GROUP16_FN(5) GROUP16_FN(6)
GROUP16_FN(7) GROUP16_FN(8) GROUP16_FN(9) GROUP16_FN(10) GROUP16_FN(11) GROUP16_FN(12)
static const GroupFn GROUPS16[PIX16] = {group16_1, group16_2,  group16_3,  group16_4,
                                        group16_5, group16_6,  group16_7,  group16_8,
                                        group16_9, group16_10, group16_11, group16_12};

__attribute__((target("avx512f"))) static void row_avx512(const Block *p, Py_ssize_t count,
                                                           const int *cols) {
    unsigned valid[MAX_KW];
    /* Near-equal groups (14 pixels: 7 + 7; a group of 2 would run at a third of the rate). */
    const Py_ssize_t groups = (count + PIX16 - 1) / PIX16;
    /* The columns each pixel reads, for the kernels that test them: not the sliding
     * ones, which take every full vector of channels (their bounds are the image's), so
     * a row whose vectors are all full never needs them. */
    const int tested = !p->slide || p->width % 16;
    for (Py_ssize_t g = 0, j0 = 0; g < groups; g++) {
        const int np = (int)((count * (g + 1)) / groups - j0);
        const unsigned *v = !tested || (j0 >= p->inner0 && j0 + np <= p->inner1) ||
                                    group_columns(cols, j0, np, p->kw, valid)
                                ? NULL
                                : valid;
        GROUPS16[(np >= 1 && np <= PIX16 ? np : 1) - 1](p, j0, v);
        j0 += np;
    }
}
#endif /* DW_X86 */

/* ---- the loops over channel blocks and output pixels ---------------------------------- */

typedef struct {
    Py_ssize_t n, h, w, c, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl;
} Geometry;

/* The range [*lo, *hi) of kernel taps k (0 <= k < taps) with 0 <= first + k * step < size. */
static void inside(Py_ssize_t first, Py_ssize_t step, Py_ssize_t taps, Py_ssize_t size, int *lo,
                   int *hi) {
    Py_ssize_t a = 0, b = taps;
    while (a < b && first + a * step < 0) a++;
    while (b > a && first + (b - 1) * step >= size) b--;
    *lo = (int)a;
    *hi = (int)b;
}

/* `offs` holds kh * kw tap offsets, then 2 * ow ints: each output column's kernel
 * columns inside the image. */
static void run(const Geometry *g, const float *x, const float *wt, const float *bias,
                const float *add, float *out, int act, float lo, float hi, Py_ssize_t *offs) {
    void (*block)(const Block *) = block_generic;
    /* The SIMD levels run groups of pixels (generic C, and kernels wider than MAX_KW:
     * one pixel at a time). */
    void (*row)(const Block *, Py_ssize_t, const int *) = NULL;
#if DW_X86
    if (level >= 2) {
        block = block_avx512;
        row = row_avx512;
    } else if (level == 1) {
        block = block_avx2;
        row = row_avx2;
    }
#endif
    const Py_ssize_t c = g->c, k = g->kh * g->kw;
    Py_ssize_t *in_x = offs;
    int *cols = (int *)(offs + k);
    /* Tap (ky, kx) reads the input at a fixed offset from the window's top-left tap. */
    for (Py_ssize_t ky = 0; ky < g->kh; ky++)
        for (Py_ssize_t kx = 0; kx < g->kw; kx++)
            in_x[ky * g->kw + kx] = (ky * g->dh * g->w + kx * g->dw) * c;
    for (Py_ssize_t ox = 0; ox < g->ow; ox++)
        inside(ox * g->sw - g->pl, g->dw, g->kw, g->w, &cols[2 * ox], &cols[2 * ox + 1]);
    Block p;
    p.pstep = g->sw * c;
    p.slide = g->sw <= 2 && g->dw == 1 && (g->kw == 3 || g->kw == 5 || g->kw == 7) ? (int)g->kw : 0;
    p.sw = (int)g->sw;
    p.in_w = g->w;
    p.pl = g->pl;
    p.inner0 = 0;
    while (p.inner0 < g->ow && (cols[2 * p.inner0] != 0 || cols[2 * p.inner0 + 1] != g->kw))
        p.inner0++;
    p.inner1 = p.inner0;
    while (p.inner1 < g->ow && cols[2 * p.inner1] == 0 && cols[2 * p.inner1 + 1] == g->kw)
        p.inner1++;
    p.xoff = in_x;
    p.c = c;
    p.kw = (int)g->kw;
    p.act = act;
    p.lo = lo;
    p.hi = hi;
    for (Py_ssize_t b = 0; b < g->n; b++) {
        const float *image = x + b * g->h * g->w * c;
        for (Py_ssize_t c0 = 0; c0 < c; c0 += BLOCK) {
            p.width = (int)(c - c0 < BLOCK ? c - c0 : BLOCK);
            p.xbase = image + c0;
            p.wbase = wt + c0;
            p.bias = bias ? bias + c0 : NULL;
            for (Py_ssize_t oy = 0; oy < g->oh; oy++) {
                const Py_ssize_t y0 = oy * g->sh - g->pt;
                inside(y0, g->dh, g->kh, g->h, &p.ky0, &p.ky1);
                if (row && g->kw <= MAX_KW) {
                    p.corner = (y0 * g->w - g->pl) * c;
                    const Py_ssize_t at = (b * g->oh + oy) * g->ow * c + c0;
                    p.out = out + at;
                    p.add = add ? add + at : NULL;
                    row(&p, g->ow, cols);
                    continue;
                }
                for (Py_ssize_t ox = 0; ox < g->ow; ox++) {
                    p.corner = (y0 * g->w + ox * g->sw - g->pl) * c;
                    p.kx0 = cols[2 * ox];
                    p.kx1 = cols[2 * ox + 1];
                    const Py_ssize_t at = ((b * g->oh + oy) * g->ow + ox) * c + c0;
                    p.out = out + at;
                    p.add = add ? add + at : NULL;
                    block(&p);
                }
            }
        }
    }
}

/* ---- channels-first planes (conv_nchw) ----------------------------------------------
 *
 * The same conv of a C-contiguous (N, C, H, W) image into (N, C, OH, OW), with the
 * weight (C, KH * KW) and an addend of the output's layout: each plane on its own, the
 * vector lanes along an output row.  A Conv between channels-first nodes (ShuffleNet's,
 * after its channel shuffle) had been copied into channels-last rows, run there and
 * copied back: two passes over the image besides the conv's own, the larger part of its
 * time.  Each output value takes the same operations in the same order as above (every
 * tap inside the image, row-major, a multiply then an add; then the bias, the addend
 * and the activation): a lane whose tap falls in the padding keeps its sum (a masked
 * add), so the same bits as the channels-last kernel.  Strides 1 and 2 at AVX-512
 * (planes_take); conv_nchw says when it does not run one. */

#if DW_X86
/* One block of output columns under kernel column kx: the input column `base` its first
 * lane reads (its first two at stride 2), the lanes whose tap is inside the image and
 * whose output column exists (`lanes`), and at stride 2 the input positions the two
 * loads read (`lo`, `hi`: base + 0..L-1, base + L..2L-1 inside the row). */
typedef struct {
    Py_ssize_t base;
    uint32_t lanes, lo, hi;
} ColumnTap;

/* The bits i (0 <= i < count) with 0 <= first + i * step < size, and i < limit. */
static uint32_t lane_bits(Py_ssize_t first, Py_ssize_t step, int count, Py_ssize_t size,
                          Py_ssize_t limit) {
    uint32_t bits = 0;
    for (int i = 0; i < count && i < limit; i++) {
        const Py_ssize_t at = first + i * step;
        if (at >= 0 && at < size) bits |= 1u << i;
    }
    return bits;
}

/* taps[b * kw + kx] for blocks of L output columns. */
static void column_taps(const Geometry *g, int L, ColumnTap *taps) {
    const Py_ssize_t blocks = (g->ow + L - 1) / L;
    for (Py_ssize_t b = 0; b < blocks; b++)
        for (Py_ssize_t kx = 0; kx < g->kw; kx++) {
            ColumnTap *t = &taps[b * g->kw + kx];
            const Py_ssize_t ox0 = b * L;
            t->base = ox0 * g->sw - g->pl + kx * g->dw;
            t->lanes = lane_bits(t->base, g->sw, L, g->w, g->ow - ox0);
            t->lo = lane_bits(t->base, 1, L, g->w, L);
            t->hi = lane_bits(t->base + L, 1, L, g->w, L);
        }
}

/* Output rows run ROWS at a time, each its own chain of adds: one row's sum is a chain
 * of dependent adds (a tap's add waits for the last), which left the core idle most of
 * each add's latency; ROWS chains keep it busy.  Each row's taps still come in its own
 * order (ky, then kx). */
#define ROWS 4

/* One tap of a block of 16 output columns of a row: acc + x * w on the lanes of
 * m = lanes & live (acc kept on the others; live empty: a row outside the image), x the
 * 16 floats at `at` (m's lanes read) or, at stride 2, the even floats of the 32 at `at`
 * (the lanes of lo & live and hi & live read). */
__attribute__((target("avx512f"), always_inline)) static inline __m512
tap16(__m512 acc, const float *at, __mmask16 lanes, __mmask16 lo, __mmask16 hi, __mmask16 live,
      const int stride2, __m512 w) {
    const __mmask16 m = lanes & live;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    __m512 v;
    if (!stride2) {
        v = _mm512_maskz_loadu_ps(m, at);
    } else {
        const __m512 v0 = _mm512_maskz_loadu_ps(lo & live, at);
        const __m512 v1 = _mm512_maskz_loadu_ps(hi & live, at + 16);
        v = _mm512_permutex2var_ps(v0, even, v1);
    }
    return _mm512_mask_add_ps(acc, m, acc, _mm512_mul_ps(v, w));
}

/* Rows oy0..oy0+rows-1 (rows <= ROWS) of one plane at AVX-512, the block of 16 output
 * columns at ct (its kernel columns' taps), into acc[0..ROWS-1].  A row outside the
 * image (or past `rows`) takes its taps with no lanes: nothing read, its sum kept.  The
 * four sums are locals, written out once: as an array indexed in the loops they lived
 * on the stack, each add waiting on a store and a load. */
__attribute__((target("avx512f"), always_inline)) static inline void
rows_avx512(const Geometry *g, const float *xp, const float *wp, const ColumnTap *ct,
            Py_ssize_t oy0, int rows, const int stride2, __m512 *acc) {
    const Py_ssize_t kw = g->kw;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (Py_ssize_t ky = 0; ky < g->kh; ky++) {
        const float *row[ROWS];
        __mmask16 live[ROWS];
        for (int r = 0; r < ROWS; r++) {
            const Py_ssize_t iy = (oy0 + r) * g->sh - g->pt + ky * g->dh;
            const int in = r < rows && iy >= 0 && iy < g->h;
            live[r] = in ? 0xFFFF : 0;
            row[r] = xp + (in ? iy : 0) * g->w;
        }
        for (Py_ssize_t kx = 0; kx < kw; kx++) {
            const __mmask16 lanes = (__mmask16)ct[kx].lanes;
            if (!lanes) continue;
            const __m512 wv = _mm512_set1_ps(wp[ky * kw + kx]);
            const Py_ssize_t base = ct[kx].base;
            const __mmask16 lo = (__mmask16)ct[kx].lo, hi = (__mmask16)ct[kx].hi;
            a0 = tap16(a0, row[0] + base, lanes, lo, hi, live[0], stride2, wv);
            a1 = tap16(a1, row[1] + base, lanes, lo, hi, live[1], stride2, wv);
            a2 = tap16(a2, row[2] + base, lanes, lo, hi, live[2], stride2, wv);
            a3 = tap16(a3, row[3] + base, lanes, lo, hi, live[3], stride2, wv);
        }
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* rows_avx512 for a 3x3 kernel on ROWS rows whose taps are all inside the image
 * (every row but a plane's first and last few): its nine weights in registers, no row
 * checks, the taps unrolled.  Per-block and per-row work (the masks, the row checks)
 * had been most of the instructions per multiply-add. */
__attribute__((target("avx512f"), always_inline)) static inline void
rows3_avx512(const Geometry *g, const float *xp, const __m512 wv[9], const ColumnTap *ct,
             Py_ssize_t iy0, const int stride2, __m512 *acc) {
    const Py_ssize_t step = g->sh * g->w;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int ky = 0; ky < 3; ky++) {
        const float *row = xp + (iy0 + ky * g->dh) * g->w;
        for (int kx = 0; kx < 3; kx++) {
            const __mmask16 lanes = (__mmask16)ct[kx].lanes;
            const __mmask16 lo = (__mmask16)ct[kx].lo, hi = (__mmask16)ct[kx].hi;
            const float *at = row + ct[kx].base;
            const __m512 w1 = wv[ky * 3 + kx];
            a0 = tap16(a0, at, lanes, lo, hi, 0xFFFF, stride2, w1);
            a1 = tap16(a1, at + step, lanes, lo, hi, 0xFFFF, stride2, w1);
            a2 = tap16(a2, at + 2 * step, lanes, lo, hi, 0xFFFF, stride2, w1);
            a3 = tap16(a3, at + 3 * step, lanes, lo, hi, 0xFFFF, stride2, w1);
        }
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

__attribute__((target("avx512f"))) static void planes_avx512(const Geometry *g, const float *x,
                                                             const float *w,
                                                             const float *bias,
                                                             const float *add, float *out,
                                                             int act, float lo, float hi,
                                                             const ColumnTap *taps) {
    const Py_ssize_t blocks = (g->ow + 15) / 16, k = g->kh * g->kw;
    const int stride2 = g->sw == 2, three = g->kh == 3 && g->kw == 3;
    for (Py_ssize_t plane = 0; plane < g->n * g->c; plane++) {
        const Py_ssize_t ch = plane % g->c;
        const float *xp = x + plane * g->h * g->w, *wp = w + ch * k;
        float *op = out + plane * g->oh * g->ow;
        const float *ap = add ? add + plane * g->oh * g->ow : NULL;
        const __m512 b = _mm512_set1_ps(bias ? bias[ch] : 0.0f);
        __m512 w9[9];
        if (three)
            for (int t = 0; t < 9; t++) w9[t] = _mm512_set1_ps(wp[t]);
        for (Py_ssize_t oy0 = 0; oy0 < g->oh; oy0 += ROWS) {
            const int rows = (int)(g->oh - oy0 < ROWS ? g->oh - oy0 : ROWS);
            const Py_ssize_t iy0 = oy0 * g->sh - g->pt;
            const int inner = three && rows == ROWS && iy0 >= 0 &&
                              iy0 + (ROWS - 1) * g->sh + 2 * g->dh < g->h;
            for (Py_ssize_t blk = 0; blk < blocks; blk++) {
                __m512 acc[ROWS];
                const ColumnTap *ct = taps + blk * g->kw;
                if (inner && stride2)
                    rows3_avx512(g, xp, w9, ct, iy0, 1, acc);
                else if (inner)
                    rows3_avx512(g, xp, w9, ct, iy0, 0, acc);
                else if (stride2)
                    rows_avx512(g, xp, wp, ct, oy0, rows, 1, acc);
                else
                    rows_avx512(g, xp, wp, ct, oy0, rows, 0, acc);
                const Py_ssize_t ox0 = blk * 16;
                const __mmask16 outm =
                    (__mmask16)((g->ow - ox0 >= 16) ? 0xFFFF : (1u << (g->ow - ox0)) - 1);
                for (int r = 0; r < rows; r++) {
                    const Py_ssize_t at = (oy0 + r) * g->ow + ox0;
                    __m512 y = acc[r];
                    if (bias) y = _mm512_add_ps(y, b);
                    if (ap) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(outm, ap + at));
                    _mm512_mask_storeu_ps(op + at, outm, act16(y, act, lo, hi));
                }
            }
        }
    }
}

/* ---- small planes as flat rows (stride 1, same size) ----------------------------------
 *
 * A 3x3 conv at stride 1 whose output has the input's size (pads summing to 2 on each
 * axis) reads, for output q = oy * w + ox of a plane, input q + (ky - pt) * w + (kx - pl)
 * at tap (ky, kx): the same offset for every output, so 16 consecutive outputs of the
 * flattened plane take their tap from 16 consecutive inputs, across row ends.  The lanes
 * whose tap falls outside the image (a column past a row's end, a row above or below
 * the plane) are masked off, by a table of masks per block of 16 outputs and tap made
 * once per geometry.  Every lane is busy on planes whose rows are narrower than a vector
 * (ShuffleNet's 14 x 14 and 7 x 7: the row kernel above left 2 or 9 of 16 lanes idle
 * and, for rows under 16, lost to the channels-last kernel and its two copies), and on
 * wider ones no row needs border checks.  (An AVX2 form, 8 outputs a vector by masked
 * loads and blends, gave these bits but took 1.7-2.4x the channels-last kernel's time
 * with its copies, at AVX2 on a Zen 4 core: there is none.)  The operations per output
 * are the row kernel's: zero, then each tap inside the image in row-major order, a
 * multiply then an add (masked lanes keep their sum), then the bias, the addend and the
 * activation. */
typedef struct {
    uint16_t mask[9]; /* per tap (ky * 3 + kx): the lanes whose tap is inside the image */
} FlatBlock;

static int flat_take(const Geometry *g) {
    return level >= 2 && g->kh == 3 && g->kw == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 &&
           g->dw == 1 && g->oh == g->h && g->ow == g->w && g->pt <= 2 && g->pl <= 2 &&
           g->ow < 16;
}

static void flat_blocks(const Geometry *g, FlatBlock *blocks) {
    const Py_ssize_t total = g->oh * g->ow, n_blocks = (total + 15) / 16;
    for (Py_ssize_t b = 0; b < n_blocks; b++) {
        for (int t = 0; t < 9; t++) {
            const int ky = t / 3, kx = t % 3;
            uint16_t m = 0;
            for (int l = 0; l < 16; l++) {
                const Py_ssize_t q = b * 16 + l;
                if (q >= total) break;
                const Py_ssize_t iy = q / g->ow - g->pt + ky, ix = q % g->ow - g->pl + kx;
                if (iy >= 0 && iy < g->h && ix >= 0 && ix < g->w) m |= (uint16_t)(1u << l);
            }
            blocks[b].mask[t] = m;
        }
    }
}

/* Outputs q0..q0+15 of a plane (those below `total`): the sums, then the bias, the
 * addend and the activation. */
__attribute__((target("avx512f"), always_inline)) static inline void
flat_store(float *op, const float *ap, Py_ssize_t q0, Py_ssize_t total, __m512 y,
           const float *bias, __m512 b, int act, float lo, float hi) {
    const __mmask16 outm = (__mmask16)(total - q0 >= 16 ? 0xFFFF : (1u << (total - q0)) - 1);
    if (bias) y = _mm512_add_ps(y, b);
    if (ap) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(outm, ap + q0));
    _mm512_mask_storeu_ps(op + q0, outm, act16(y, act, lo, hi));
}

__attribute__((target("avx512f"))) static void flat_avx512(const Geometry *g, const float *x,
                                                           const float *w, const float *bias,
                                                           const float *add, float *out,
                                                           int act, float lo, float hi,
                                                           const FlatBlock *blocks) {
    const Py_ssize_t total = g->oh * g->ow, n_blocks = (total + 15) / 16;
    Py_ssize_t off[9];
    for (int t = 0; t < 9; t++) off[t] = (t / 3 - g->pt) * g->w + (t % 3 - g->pl);
    for (Py_ssize_t plane = 0; plane < g->n * g->c; plane++) {
        const Py_ssize_t ch = plane % g->c;
        const float *xp = x + plane * total, *wp = w + ch * 9;
        float *op = out + plane * total;
        const float *ap = add ? add + plane * total : NULL;
        const __m512 b = _mm512_set1_ps(bias ? bias[ch] : 0.0f);
        __m512 w9[9];
        for (int t = 0; t < 9; t++) w9[t] = _mm512_set1_ps(wp[t]);
        for (Py_ssize_t blk = 0; blk < n_blocks; blk++) {
            __m512 acc = _mm512_setzero_ps();
            for (int t = 0; t < 9; t++) {
                const __mmask16 m = (__mmask16)blocks[blk].mask[t];
                /* (masked-off lanes are not read: their addresses may lie outside the
                 * plane) */
                const __m512 v = _mm512_maskz_loadu_ps(m, xp + blk * 16 + off[t]);
                acc = _mm512_mask_add_ps(acc, m, acc, _mm512_mul_ps(v, w9[t]));
            }
            flat_store(op, ap, blk * 16, total, acc, bias, b, act, lo, hi);
        }
    }
}

#endif /* DW_X86 */

/* Whether conv_nchw runs this geometry at the level set: AVX-512, strides 1 and 2, and
 * rows of at least one whole vector.  On narrower rows (ShuffleNet's 14 x 14 and 7 x 7
 * planes) most lanes idle and the channels-last kernel with its two copies was faster;
 * an AVX2 form of this kernel (8 lanes) was slower than it on every ShuffleNet and
 * MobileNet shape measured.  (us, Zen 4, channels-last with copies / this: 136 channels
 * of 28 x 28 stride 1, 82-117 / 92-95, in the whole model 159 / 117; 112 of 56 x 56
 * stride 2 128-173 / 104-120, in the model 471 / 187; 544 of 7 x 7 18 / 50.)  A same-size
 * 3x3 at stride 1 on such narrow rows runs as flat rows (flat_take, above): 272 channels
 * of 14 x 14 38-41 / 28, 544 of 7 x 7 18-20 / 17.5. */
static int planes_take(const Geometry *g) {
#if DW_X86
    if (flat_take(g)) return 1;
    return level >= 2 && (g->sw == 1 || g->sw == 2) && g->ow >= 16;
#else
    (void)g;
    return 0;
#endif
}

/* ---- Python interface ----------------------------------------------------------------- */

/* a * b into *out, or -1 when it overflows (never for real shapes). */
static int mul_size(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) {
    if (a < 0 || b < 0 || (b && a > PY_SSIZE_T_MAX / 4 / b)) return -1;
    *out = a * b;
    return 0;
}

/* Checks a geometry as conv_nhwc takes it; the float counts of x, the weight and out in
 * counts[0..2], the taps in counts[3]: 0, or -1 with ValueError naming `name`. */
static int geometry_check(const Geometry *g, Py_ssize_t counts[4], const char *name) {
    /* Every size bounded (so no index product below overflows) and positive. */
    const Py_ssize_t limit = (Py_ssize_t)1 << 30;
    Py_ssize_t dims[] = {g->n,  g->h,  g->w,  g->c,  g->kh, g->kw,
                         g->oh, g->ow, g->sh, g->sw, g->dh, g->dw};
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        if (dims[k] < 1 || dims[k] > limit) {
            PyErr_Format(PyExc_ValueError, "%s: sizes must be in 1..2**30", name);
            return -1;
        }
    }
    if (g->pt < 0 || g->pl < 0 || g->pt > limit || g->pl > limit) {
        PyErr_Format(PyExc_ValueError, "%s: pads must be in 0..2**30", name);
        return -1;
    }
    Py_ssize_t t;
    if (mul_size(g->n, g->h, &t) || mul_size(t, g->w, &t) || mul_size(t, g->c, &counts[0]) ||
        mul_size(g->kh, g->kw, &counts[3]) || mul_size(counts[3], g->c, &counts[1]) ||
        mul_size(g->n, g->oh, &t) || mul_size(t, g->ow, &t) || mul_size(t, g->c, &counts[2]) ||
        counts[3] > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: sizes too large", name);
        return -1;
    }
    return 0;
}

/* Runs a checked geometry with its scratch, the GIL released: 0, or -1 with MemoryError. */
static int geometry_run(const Geometry *g, Py_ssize_t taps, const float *x, const float *wt,
                        const float *bias, const float *add, float *out, int act, float lo,
                        float hi) {
    Py_ssize_t *offs =
        PyMem_RawMalloc((size_t)taps * sizeof(Py_ssize_t) + 2 * (size_t)g->ow * sizeof(int));
    if (!offs) {
        PyErr_NoMemory();
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS;
    run(g, x, wt, bias, add, out, act, lo, hi, offs);
    Py_END_ALLOW_THREADS;
    PyMem_RawFree(offs);
    return 0;
}

/* conv_nchw's run of a checked geometry planes_take takes, the GIL released: 0, or -1
 * with MemoryError. */
static int planes_run(const Geometry *g, const float *x, const float *wt, const float *bias,
                      const float *add, float *out, int act, float lo, float hi) {
#if DW_X86
    if (flat_take(g)) {
        const Py_ssize_t n_blocks = (g->oh * g->ow + 15) / 16;
        FlatBlock *fb = PyMem_RawMalloc((size_t)n_blocks * sizeof(FlatBlock));
        if (!fb) {
            PyErr_NoMemory();
            return -1;
        }
        flat_blocks(g, fb);
        Py_BEGIN_ALLOW_THREADS;
        flat_avx512(g, x, wt, bias, add, out, act, lo, hi, fb);
        Py_END_ALLOW_THREADS;
        PyMem_RawFree(fb);
        return 0;
    }
    const Py_ssize_t blocks = (g->ow + 15) / 16;
    ColumnTap *taps = PyMem_RawMalloc((size_t)(blocks * g->kw) * sizeof(ColumnTap));
    if (!taps) {
        PyErr_NoMemory();
        return -1;
    }
    column_taps(g, 16, taps);
    Py_BEGIN_ALLOW_THREADS;
    planes_avx512(g, x, wt, bias, add, out, act, lo, hi, taps);
    Py_END_ALLOW_THREADS;
    PyMem_RawFree(taps);
    return 0;
#else
    (void)g, (void)x, (void)wt, (void)bias, (void)add, (void)out, (void)act, (void)lo, (void)hi;
    PyErr_SetString(PyExc_RuntimeError, "conv_nchw: no planes kernel on this platform");
    return -1;
#endif
}

/* conv_nhwc (planes 0: x (N, H, W, C), the first tuple (n, h, w, c)) and conv_nchw
 * (planes 1: x (N, C, H, W), the tuple (n, c, h, w); False where planes_take says no):
 * the same arguments, checks and buffers. */
static PyObject *conv_call(PyObject *args, int planes) {
    const char *name = planes ? "conv_nchw" : "conv_nhwc";
    PyObject *xo, *wo, *bo, *ao, *oo;
    Py_ssize_t d[4];
    Geometry g;
    int act;
    float lo, hi;
    if (!PyArg_ParseTuple(args, planes ? "OOOOO(nnnn)(nn)(nn)(nn)(nn)(nn)iff:conv_nchw"
                                       : "OOOOO(nnnn)(nn)(nn)(nn)(nn)(nn)iff:conv_nhwc",
                          &xo, &wo, &bo, &ao, &oo, &d[0], &d[1], &d[2], &d[3], &g.kh, &g.kw,
                          &g.oh, &g.ow, &g.sh, &g.sw, &g.dh, &g.dw, &g.pt, &g.pl, &act, &lo,
                          &hi))
        return NULL;
    g.n = d[0];
    g.c = planes ? d[1] : d[3];
    g.h = planes ? d[2] : d[1];
    g.w = planes ? d[3] : d[2];
    Py_ssize_t counts[4];
    if (geometry_check(&g, counts, name) < 0) return NULL;
    if (act < 0 || act > ACT_LAST) {
        PyErr_Format(PyExc_ValueError, "%s: activation must be 0..%d", name, ACT_LAST);
        return NULL;
    }
    if (planes && !planes_take(&g)) Py_RETURN_FALSE;
    Py_buffer xb, wb, bb, ab, ob;
    int have_b = bo != Py_None, have_a = ao != Py_None, rc = -1;
    if (onnxviz_get_floats(xo, &xb, counts[0], 1, 0, "x") < 0) return NULL;
    if (onnxviz_get_floats(wo, &wb, counts[1], 1, 0, "w") < 0) goto fail_x;
    if (have_b && onnxviz_get_floats(bo, &bb, g.c, 1, 0, "bias") < 0) goto fail_w;
    if (have_a && onnxviz_get_floats(ao, &ab, counts[2], 1, 0, "addend") < 0) goto fail_b;
    if (onnxviz_get_floats(oo, &ob, counts[2], 1, 1, "out") < 0) goto fail_a;
    const float *bias = have_b ? bb.buf : NULL, *add = have_a ? ab.buf : NULL;
    rc = planes ? planes_run(&g, xb.buf, wb.buf, bias, add, ob.buf, act, lo, hi)
                : geometry_run(&g, counts[3], xb.buf, wb.buf, bias, add, ob.buf, act, lo, hi);
    PyBuffer_Release(&ob);
fail_a:
    if (have_a) PyBuffer_Release(&ab);
fail_b:
    if (have_b) PyBuffer_Release(&bb);
fail_w:
    PyBuffer_Release(&wb);
fail_x:
    PyBuffer_Release(&xb);
    if (rc < 0) return NULL;
    if (planes) Py_RETURN_TRUE;
    Py_RETURN_NONE;
}

static PyObject *py_conv_nhwc(PyObject *self, PyObject *args) {
    (void)self;
    return conv_call(args, 0);
}

static PyObject *py_conv_nchw(PyObject *self, PyObject *args) {
    (void)self;
    return conv_call(args, 1);
}

/* ---- a held depthwise conv: a fused conv chain's common call ----------------------------
 *
 * `held(...)` makes the `quick` call of a fusion.py ConvChain whose conv is depthwise and
 * runs this kernel channels-last (kernels/nn_conv_nhwc.py's _Depthwise): the chain's
 * constants by identity, the image and the residual channels-last, then this kernel into
 * a new 64-byte aligned channels-last output: _Depthwise's call, so its bits, from the run
 * loop's call to the result in C (native/held_call.h).  Any other call returns
 * `fallback(*args)`. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
    HeldWeights weights;
    Geometry g;
    Py_ssize_t taps;
    int act;
    float lo, hi;
} Held;

static PyObject *held_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    Held *self = (Held *)obj;
    const HeldCall *h = &self->call;
    const Geometry *const g = &self->g;
    if (!held_call_takes(h, args, nargsf, kwnames)) goto other;
    Py_buffer xb, db;
    if (!onnxviz_channels_last_view(args[0], h->ndarray, &xb, g->n, g->c, g->h, g->w))
        goto other;
    const int have_add = h->residual >= 0;
    if (have_add && !onnxviz_channels_last_view(args[h->residual], h->ndarray, &db, g->n, g->c,
                                                g->oh, g->ow)) {
        PyBuffer_Release(&xb);
        goto other;
    }
    float *out_data = NULL;
    PyObject *out = onnxviz_new_channels_last(h->empty, h->ndarray, h->u8, h->f32, g->n, g->c,
                                              g->oh, g->ow, &out_data);
    if (out && geometry_run(g, self->taps, xb.buf, self->weights.wb.buf,
                            held_weights_bias(&self->weights), have_add ? db.buf : NULL,
                            out_data, self->act, self->lo, self->hi) < 0)
        Py_CLEAR(out);
    if (have_add) PyBuffer_Release(&db);
    PyBuffer_Release(&xb);
    return out;
other:
    return held_call_other(h, args, nargsf, kwnames);
}

static void held_release(Held *self) { held_weights_release(&self->weights); }

HELD_CALL_TYPE(Held, HeldType, held, "onnxviz.runtime.native._depthwise.Held",
               "A fused depthwise conv by one constant weight (held()).", held_release)

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *wo, *bo, *places, *expect, *fallback, *ndarray, *empty, *u8, *f32;
    Geometry g;
    int act;
    float lo, hi;
    Py_ssize_t nargs, residual;
    if (!PyArg_ParseTuple(args, "OO(nnnn)(nn)(nn)(nn)(nn)(nn)iffnnOOOOOOO:held", &wo, &bo, &g.n,
                          &g.h, &g.w, &g.c, &g.kh, &g.kw, &g.oh, &g.ow, &g.sh, &g.sw, &g.dh,
                          &g.dw, &g.pt, &g.pl, &act, &lo, &hi, &nargs, &residual, &places,
                          &expect, &fallback, &ndarray, &empty, &u8, &f32))
        return NULL;
    Py_ssize_t counts[4];
    if (geometry_check(&g, counts, "held") < 0) return NULL;
    if (act < 0 || act > ACT_LAST) {
        PyErr_Format(PyExc_ValueError, "held: activation must be 0..%d", ACT_LAST);
        return NULL;
    }
    Held *obj = PyObject_GC_New(Held, &HeldType);
    if (!obj) return NULL;
    obj->vectorcall = held_vectorcall;
    memset(&obj->weights, 0, sizeof obj->weights);
    obj->g = g;
    obj->taps = counts[3];
    obj->act = act;
    obj->lo = lo;
    obj->hi = hi;
    if (held_call_init(&obj->call, places, expect, fallback, ndarray, empty, u8, f32, nargs,
                       residual, "held") < 0) {
        PyObject_GC_Del(obj); /* nothing held yet, not tracked */
        return NULL;
    }
    PyObject_GC_Track((PyObject *)obj);
    if (held_weights_take(&obj->weights, wo, counts[1], bo, g.c) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return (PyObject *)obj;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"conv_nhwc", py_conv_nhwc, METH_VARARGS,
     "conv_nhwc(x, w, bias, addend, out, (n, h, w, c), (kh, kw), (oh, ow), (sh, sw), "
     "(dh, dw), (pad_top, pad_left), act, lo, hi): float32 depthwise conv of the "
     "channels-last x (N, H, W, C) with w (KH, KW, C), plus bias (C,) and addend "
     "(N, OH, OW, C) (each or None), then activation act (0 none, 1 Relu, 2 Clip(lo, hi), "
     "NaN bound: none, 3 HardSwish, 4 SiLU), into out (N, OH, OW, C)."},
    {"conv_nchw", py_conv_nchw, METH_VARARGS,
     "conv_nchw(x, w, bias, addend, out, (n, c, h, w), (kh, kw), (oh, ow), (sh, sw), "
     "(dh, dw), (pad_top, pad_left), act, lo, hi) -> bool: conv_nhwc's conv of the "
     "C-contiguous channels-first x (N, C, H, W) with w (C, KH * KW), plus bias (C,) and "
     "addend (N, C, OH, OW) (each or None), then act, into out (N, C, OH, OW), with "
     "conv_nhwc's bits; False (nothing written) where it does not run (generic C, a "
     "stride other than 1 or 2 across the columns)."},
    {"held", py_held, METH_VARARGS,
     "held(w, bias, (n, h, w, c), (kh, kw), (oh, ow), (sh, sw), (dh, dw), (pad_top, "
     "pad_left), act, lo, hi, nargs, residual, places, expect, fallback, ndarray, empty, "
     "uint8, float32) -> a callable: f(*args) = conv_nhwc's conv of the channels-last "
     "args[0] (N, C, H, W), + args[residual] (channels-last; residual -1: none), as a new "
     "64-byte aligned channels-last float32 (N, C, OH, OW) array, when args[places[i]] is "
     "expect[i]; any other call is fallback(*args)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_depthwise", NULL, -1, methods};

PyMODINIT_FUNC PyInit__depthwise(void) {
    if (PyType_Ready(&HeldType) < 0) return NULL;
    return PyModule_Create(&module);
}
