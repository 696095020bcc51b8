/* onnxviz.runtime.native._conv: float32 direct 2-D convolution (one group), channels-last.
 *
 *   out[n, oy, ox, m] = act(sum_{ky, kx, c} x[n, iy, ix, c] * w[m, c, ky, kx] + bias[m]
 *                           + addend[n, oy, ox, m])
 *   with iy = oy * sh - pt + ky * dh, ix = ox * sw - pl + kx * dw
 *
 * x (N, H, W, C), bias (M,) or None, addend (N, OH, OW, M) or None and out (N, OH, OW, M)
 * are contiguous float32 buffers.  The weight comes packed (made once per constant
 * weight, kernels.nn_conv.pack_direct): [ceil(M / VL)][KH][KW][C][VL], VL the level's
 * vector width (`lanes()`), the last block's missing channels zero.  One block's VL
 * output channels for one (tap, input channel) are then one aligned-size vector load.
 *
 * Why: numpy has no conv, so nn_conv builds one from copies and GEMMs (im2col, shifted
 * slices, Winograd): each pass writes and rereads an intermediate as large as the
 * output or larger, and at ResNet widths (32-256 channels) those passes cost as much as
 * the arithmetic.  Here the accumulators of a tile of output pixels x output channels
 * stay in registers over the whole reduction (kh, kw, c), so the input is read in
 * place, the output written once, with the bias, the residual and the activation.
 *
 * The micro-kernel: P output pixels of one row x NV vectors of output channels
 * (AVX-512: up to 12 x 2 x 16, 24 accumulators of the 32 registers, or 14 x 2 x 16 on
 * rows of a multiple of 14 pixels; AVX2: 6 x 2 x 8, 12 of 16).  Per input channel it
 * loads NV weight vectors and broadcasts P input values, then P * NV FMAs: the FMA ports, not the loads, bound it.  A row's pixels are split
 * into near-equal tiles (14 pixels: 7 + 7, not 12 + 2, whose 2-pixel tile would be load
 * bound).  Padding: taps above or below the image are skipped (the range of kernel rows
 * inside it); left and right, each input row the tiles read is copied into a
 * zero-bordered row buffer of kh slots, kept while later output rows read it (at stride
 * 1 each row is copied once per image), so the inner loop has no bounds test; a conv
 * without left or right padding reads x in place.  With few input channels (C <= 4, a
 * stem) read channels-first, AVX-512 runs another tile, output pixels in the lanes over
 * per-channel phase planes of the input rows: see "few input channels" below.
 *
 * Layouts (`layouts` bits): x may be channels-first (N, C, H, W) instead: the row copy
 * then transposes each row it takes; out and the addend may be channels-first (N, M, OH,
 * OW): a tile's sums then go out channel by channel, P consecutive pixels of a plane.
 * So an NCHW caller pays no whole-array transposing copy (numpy's transposing copy of a
 * 32-channel 112x112 output alone took 1.2 ms, as long as the stem conv).
 *
 * The numbers: sums in float32 in the order ky, kx, c, with fused multiply-adds at
 * levels 1-3 and a multiply and an add at level 0; then + bias, + addend, activation.
 * Error bound of the K = kh * kw * C term sum plus bias and addend (each step one
 * rounding): |y - exact| <= gamma(K + 2) * (sum |x * w| + |bias| + |addend|),
 * gamma(m) = m u / (1 - m u), u = 2^-24 (tests/runtime/test_native_conv.py checks it
 * against a float64 reference).  Not bit-identical to numpy's paths (they sum in GEMM
 * order), so it runs only where the caller chose it.
 *
 * Activations (same codes as _depthwise): 0 none; 1 Relu max(y, 0); 2 Clip
 * min(max(y, lo), hi) (lo/hi NaN: no bound); 3 HardSwish y * min(max(y / 6 + 0.5, 0), 1);
 * 4 SiLU y * sigmoid(y) (activations.h).  A NaN sum stays NaN.
 *
 * Levels (native/__init__.py): 0 generic C (VL 8, 4 pixels: a plain loop the compiler
 * may vectorize for the baseline SIMD); 1 AVX2+FMA (VL 8); 2 and 3 AVX-512F (VL 16).
 * Functions carry their instruction set as a target attribute: built without -march. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "levels.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h> /* sysconf: the L2's size */
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* level 0 multiplies then adds; GCC: off under -std=c11 */
#endif

#if ONNXVIZ_X86
#include <immintrin.h>

#include "avx2_lanes.h"
#endif
#include "activations.h"
#include "held_call.h"
#include "pool_nhwc.h"

static int level = 0;

/* Vector width (floats) of the packed weight at a level. */
static int lanes_at(int lv) { return lv >= 2 ? 16 : 8; }

/* What one output row's tiles share. */
typedef struct {
    const float *const *rows; /* per kernel row: its input row at padded column 0 */
    Py_ssize_t c, kw;
    Py_ssize_t kstep;  /* floats between kernel columns: dw * C */
    Py_ssize_t pstep;  /* floats between output pixels' inputs: sw * C */
    Py_ssize_t wblock; /* floats per packed output-channel block: KH * KW * C * VL */
    Py_ssize_t ps, cs; /* out's and addend's strides (floats): pixel, channel */
    int ky0, ky1;      /* kernel rows inside the image */
    int act;
    float lo, hi;
} Row;

/* ---- generic C --------------------------------------------------------------------- */

/* Pixel i's `width` sums (channels from the tile's first): + bias, + addend,
 * activation, stored at out's strides (any layout). */
static void epilogue(const Row *r, const float *sums, int width, const float *bias,
                     const float *add, float *out, int i) {
    for (int v = 0; v < width; v++) {
        const Py_ssize_t at = i * r->ps + v * r->cs;
        float y = sums[v];
        if (bias) y = y + bias[v];
        if (add) y = y + add[at];
        out[at] = act_scalar(y, r->act, r->lo, r->hi);
    }
}

/* The same for p pixels of channels-first planes: sums[i * ld + v] is pixel i's
 * channel v; each channel's p outputs are consecutive, so channel by channel, with the
 * activation's switch outside the loop over pixels. */
static void epilogue_planes(const Row *r, const float *sums, int ld, int p, int width,
                            const float *bias, const float *add, float *out) {
    for (int v = 0; v < width; v++) {
        float *o = out + v * r->cs;
        const float *a = add ? add + v * r->cs : NULL;
        for (int i = 0; i < p; i++) o[i] = sums[i * ld + v];
        if (bias) {
            const float bv = bias[v];
            for (int i = 0; i < p; i++) o[i] = o[i] + bv;
        }
        if (a)
            for (int i = 0; i < p; i++) o[i] = o[i] + a[i];
        switch (r->act) {
        case 0:
            break;
        case 1:
            for (int i = 0; i < p; i++) o[i] = act_scalar(o[i], 1, 0.0f, 0.0f);
            break;
        case 2:
            for (int i = 0; i < p; i++) o[i] = act_scalar(o[i], 2, r->lo, r->hi);
            break;
        case 3:
            for (int i = 0; i < p; i++) o[i] = act_scalar(o[i], 3, 0.0f, 0.0f);
            break;
        default:
            for (int i = 0; i < p; i++) o[i] = act_scalar(o[i], 4, 0.0f, 0.0f);
        }
    }
}

#define G_VL 8
#define G_P 4

/* p pixels (<= G_P) x one block of `width` (<= 8) output channels. */
static void tile_generic(const Row *r, const float *w, Py_ssize_t xoff, const float *bias,
                         const float *add, float *out, int p, int width) {
    float acc[G_P][G_VL];
    for (int i = 0; i < G_P; i++)
        for (int v = 0; v < G_VL; v++) acc[i][v] = 0.0f;
    for (int ky = r->ky0; ky < r->ky1; ky++) {
        const float *row = r->rows[ky] + xoff;
        const float *wk = w + (Py_ssize_t)ky * r->kw * r->c * G_VL;
        for (Py_ssize_t kx = 0; kx < r->kw; kx++) {
            const float *xp = row + kx * r->kstep;
            const float *wc = wk + kx * r->c * G_VL;
            for (Py_ssize_t c = 0; c < r->c; c++, wc += G_VL) {
                for (int i = 0; i < p; i++) {
                    const float b = xp[i * r->pstep + c];
                    for (int v = 0; v < G_VL; v++) {
                        float prod = b * wc[v];
                        acc[i][v] = acc[i][v] + prod;
                    }
                }
            }
        }
    }
    if (r->cs != 1)
        epilogue_planes(r, &acc[0][0], G_VL, p, width, bias, add, out);
    else
        for (int i = 0; i < p; i++) epilogue(r, acc[i], width, bias, add, out, i);
}

/* ---- AVX2 + FMA (VL 8) --------------------------------------------------------------- */
#if ONNXVIZ_X86

/* P pixels x NV (1 or 2) blocks' sums of the reduction into sums[16 i + 8 v].  P and NV
 * are constants at each call, so the accumulators are registers.  A function of its own,
 * its sums stored once at the end: with the epilogue's masks, bias and activation in the
 * same function, GCC 12 spilled every accumulator to the stack on every iteration of the
 * channel loop (12 stores per 12 FMAs, store-bound at a third of the FMA ports: 30
 * GFLOP/s on a Zen 3 core). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
sums8(const Row *r, const float *w, Py_ssize_t xoff, float *sums, const int P, const int NV) {
    __m256 acc[8][2];
#pragma GCC unroll 8
    for (int i = 0; i < P; i++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) acc[i][v] = _mm256_setzero_ps();
    const Py_ssize_t pstep = r->pstep, c_count = r->c, wblock = r->wblock;
    /* One input channel c of the row at xp against its weights at wc: NV weight loads, P
     * broadcasts, P * NV FMAs. */
#define SUMS8_STEP(xp, wc, c)                                                              \
    {                                                                                      \
        const __m256 w0 = _mm256_loadu_ps(wc);                                             \
        const __m256 w1 = NV > 1 ? _mm256_loadu_ps((wc) + wblock) : w0;                    \
        _Pragma("GCC unroll 8") for (int i = 0; i < P; i++) {                              \
            const __m256 b = _mm256_broadcast_ss((xp) + i * pstep + (c));                  \
            acc[i][0] = _mm256_fmadd_ps(b, w0, acc[i][0]);                                 \
            if (NV > 1) acc[i][1] = _mm256_fmadd_ps(b, w1, acc[i][1]);                     \
        }                                                                                  \
    }
    for (int ky = r->ky0; ky < r->ky1; ky++) {
        const float *row = r->rows[ky] + xoff;
        const float *wk = w + (Py_ssize_t)ky * r->kw * c_count * 8;
        /* The front end bounds this loop on a busy host, not the FMA ports: 12 FMAs ride
         * on about 13 other instructions and a branch per channel, and a 64-channel loop
         * ends 9 times a tile; a core's other hardware thread takes front-end slots.  So
         * the channel loop is unrolled by 8, and at dilation 1, where a kernel row's taps
         * are consecutive pixels (kstep = C), its kx and c loops are one loop over kw * C
         * floats of the row and of the weights, in the same order (the same bits).  64
         * channels at 32 px against onnxruntime on a Zen 3 vCPU, quiet / slow spells:
         * 0.94 / 1.11 -> 0.88 / 0.91 (docs/architecture.md). */
        if (r->kstep == c_count) {
            const Py_ssize_t n = r->kw * c_count;
            const float *wc = wk;
#pragma GCC unroll 8
            for (Py_ssize_t j = 0; j < n; j++, wc += 8) SUMS8_STEP(row, wc, j)
            continue;
        }
        for (Py_ssize_t kx = 0; kx < r->kw; kx++) {
            const float *xp = row + kx * r->kstep;
            const float *wc = wk + kx * c_count * 8;
#pragma GCC unroll 8
            for (Py_ssize_t c = 0; c < c_count; c++, wc += 8) SUMS8_STEP(xp, wc, c)
        }
    }
#undef SUMS8_STEP
#pragma GCC unroll 8
    for (int i = 0; i < P; i++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(sums + 16 * i + 8 * v, acc[i][v]);
}

#define SUMS8_FN(P, NV)                                                                    \
    __attribute__((target("avx2,fma"), noinline)) static void sums8_##P##_##NV(             \
        const Row *r, const float *w, Py_ssize_t xoff, float *sums) {                      \
        sums8(r, w, xoff, sums, P, NV);                                                    \
    }
SUMS8_FN(1, 1) SUMS8_FN(2, 1) SUMS8_FN(3, 1) SUMS8_FN(4, 1) SUMS8_FN(5, 1) SUMS8_FN(6, 1)
SUMS8_FN(7, 1) SUMS8_FN(8, 1)
SUMS8_FN(1, 2) SUMS8_FN(2, 2) SUMS8_FN(3, 2) SUMS8_FN(4, 2) SUMS8_FN(5, 2) SUMS8_FN(6, 2)

/* A tile's sums (sums[16 i + 8 v]: pixel i, block v) to channels-first planes: each
 * block's 8 x 8 (pixels x channels, rows past p zero) transposed in registers, so a
 * channel's p outputs go out in one vector (`store8n`: plain stores of 4, 2 and 1 floats,
 * not vmaskmovps, see activations.h), where the scalar epilogue stored them one by one:
 * a 32 -> 32-channel 3x3 at 32 x 32 px 293 -> 261 us, 16 -> 16 at 64 px 462 -> 419;
 * sums of node minima, A/B in one process: the TCN 3.55 -> 3.17 ms, the diffusion UNet
 * 6.83 -> 6.57, the small UNet 15.4 -> 14.9.  The same sums, bias, addend and
 * activation in the same order as `epilogue_planes`, so the same bits. */
__attribute__((target("avx2,fma"))) static void
planes8(const Row *r, const float *sums, int p, int nv, int width, const float *bias,
        const float *add, float *out) {
    const __m256i pm = mask8(p);
    const Py_ssize_t cs = r->cs;
    for (int v = 0; v < nv; v++) {
        __m256 col[8];
        for (int i = 0; i < 8; i++)
            col[i] = i < p ? _mm256_loadu_ps(sums + 16 * i + 8 * v) : _mm256_setzero_ps();
        onnxviz_transpose8(col);
        const int channels = v == nv - 1 ? width : 8;
        for (int j = 0; j < channels; j++) {
            const Py_ssize_t at = (Py_ssize_t)(8 * v + j) * cs;
            __m256 y = col[j];
            if (bias) y = _mm256_add_ps(y, _mm256_set1_ps(bias[8 * v + j]));
            if (add) y = _mm256_add_ps(y, _mm256_maskload_ps(add + at, pm));
            store8n(out + at, act8(y, r->act, r->lo, r->hi), p);
        }
    }
}

/* P pixels x NV blocks; `width` channels are stored of the last block. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
tile8(const Row *r, const float *w, Py_ssize_t xoff, const float *bias, const float *add,
      float *out, const int P, const int NV, int width) {
    float sums[8 * 16];
    switch (P * 2 + NV - 1) {
#define SUMS8_CASE(PP, NN)                                                                 \
    case PP * 2 + NN - 1:                                                                  \
        sums8_##PP##_##NN(r, w, xoff, sums);                                               \
        break;
        SUMS8_CASE(1, 1) SUMS8_CASE(2, 1) SUMS8_CASE(3, 1) SUMS8_CASE(4, 1)
        SUMS8_CASE(5, 1) SUMS8_CASE(6, 1) SUMS8_CASE(1, 2) SUMS8_CASE(2, 2)
        SUMS8_CASE(3, 2) SUMS8_CASE(4, 2) SUMS8_CASE(5, 2) SUMS8_CASE(6, 2)
        SUMS8_CASE(7, 1) SUMS8_CASE(8, 1)
#undef SUMS8_CASE
    }
    if (r->cs != 1) { /* channels-first output */
        planes8(r, sums, P, NV, width, bias, add, out);
        return;
    }
    for (int v = 0; v < NV; v++) {
        const __m256i m = v == NV - 1 ? mask8(width) : _mm256_set1_epi32(-1);
        const __m256 bv = bias ? _mm256_maskload_ps(bias + 8 * v, m) : _mm256_setzero_ps();
        for (int i = 0; i < P; i++) {
            __m256 y = _mm256_loadu_ps(sums + 16 * i + 8 * v);
            if (bias) y = _mm256_add_ps(y, bv);
            if (add) y = _mm256_add_ps(y, _mm256_maskload_ps(add + i * r->ps + 8 * v, m));
            store8n(out + i * r->ps + 8 * v, act8(y, r->act, r->lo, r->hi), v == NV - 1 ? width : 8);
        }
    }
}

/* Every (P, NV) form its own function (see tile16's table below). */
typedef void (*TileFn)(const Row *, const float *, Py_ssize_t, const float *, const float *,
                       float *, int);
#define TILE8_FN(P, NV)                                                                    \
    __attribute__((target("avx2,fma"), noinline)) static void tile8_##P##_##NV(             \
        const Row *r, const float *w, Py_ssize_t xoff, const float *bias, const float *add, \
        float *out, int width) {                                                           \
        tile8(r, w, xoff, bias, add, out, P, NV, width);                                   \
    }
TILE8_FN(1, 1) TILE8_FN(2, 1) TILE8_FN(3, 1) TILE8_FN(4, 1) TILE8_FN(5, 1) TILE8_FN(6, 1)
TILE8_FN(7, 1) TILE8_FN(8, 1)
TILE8_FN(1, 2) TILE8_FN(2, 2) TILE8_FN(3, 2) TILE8_FN(4, 2) TILE8_FN(5, 2) TILE8_FN(6, 2)
/* [pixels - 1][vectors - 1]: 7 and 8 pixels have one block only (8 chains of FMAs,
 * `run`'s single-block tiles) */
static const TileFn TILES8[8][2] = {
    {tile8_1_1, tile8_1_2}, {tile8_2_1, tile8_2_2}, {tile8_3_1, tile8_3_2},
    {tile8_4_1, tile8_4_2}, {tile8_5_1, tile8_5_2}, {tile8_6_1, tile8_6_2},
    {tile8_7_1, tile8_7_1}, {tile8_8_1, tile8_8_1}};

__attribute__((target("avx2,fma"))) static void
tile_avx2(const Row *r, const float *w, Py_ssize_t xoff, const float *bias, const float *add,
          float *out, int p, int nv, int width) {
    const int pi = p >= 1 && p <= 8 ? p : 6; /* else 6, as the switch's default was */
    TILES8[pi - 1][nv == 2](r, w, xoff, bias, add, out, width);
}

/* ---- AVX-512F (VL 16) ---------------------------------------------------------------- */

/* The 16 x 16 floats r[i] lane j -> r[j] lane i: pairs unpacked, then 2 x 2 blocks,
 * then 128-bit quarters twice (64 shuffles). */
__attribute__((target("avx512f"), always_inline)) static inline void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 4; k++) {
        u[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        u[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        u[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        u[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        t[k] = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88);
        t[4 + k] = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xDD);
        t[8 + k] = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
        t[12 + k] = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xDD);
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
        r[4 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0x88);
        r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xDD);
        r[12 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0xDD);
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void
tile16(const Row *r, const float *w, Py_ssize_t xoff, const float *bias, const float *add,
       float *out, const int P, const int NV, int width) {
    __m512 acc[14][2];
    for (int i = 0; i < P; i++)
        for (int v = 0; v < NV; v++) acc[i][v] = _mm512_setzero_ps();
    const Py_ssize_t pstep = r->pstep, c_count = r->c;
    for (int ky = r->ky0; ky < r->ky1; ky++) {
        const float *row = r->rows[ky] + xoff;
        const float *wk = w + (Py_ssize_t)ky * r->kw * c_count * 16;
        for (Py_ssize_t kx = 0; kx < r->kw; kx++) {
            const float *xp = row + kx * r->kstep;
            const float *wc = wk + kx * c_count * 16;
            for (Py_ssize_t c = 0; c < c_count; c++, wc += 16) {
                const __m512 w0 = _mm512_loadu_ps(wc);
                const __m512 w1 = NV > 1 ? _mm512_loadu_ps(wc + r->wblock) : w0;
                for (int i = 0; i < P; i++) {
                    const __m512 b = _mm512_set1_ps(xp[i * pstep + c]);
                    acc[i][0] = _mm512_fmadd_ps(b, w0, acc[i][0]);
                    if (NV > 1) acc[i][1] = _mm512_fmadd_ps(b, w1, acc[i][1]);
                }
            }
        }
    }
    if (r->cs != 1) { /* channels-first output: each channel's P pixels are consecutive */
        const __mmask16 pm = (__mmask16)((1u << P) - 1u);
        for (int v = 0; v < NV; v++) {
            __m512 t[16]; /* the tile's 16 channels as rows of P pixels (lanes past P: 0) */
            for (int i = 0; i < 16; i++) t[i] = i < P ? acc[i][v] : _mm512_setzero_ps();
            transpose16(t);
            const int chans = v == NV - 1 ? width : 16;
            for (int ch = 0; ch < chans; ch++) {
                const Py_ssize_t at = (16 * v + ch) * r->cs;
                __m512 y = t[ch];
                if (bias) y = _mm512_add_ps(y, _mm512_set1_ps(bias[16 * v + ch]));
                if (add) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(pm, add + at));
                _mm512_mask_storeu_ps(out + at, pm, act16(y, r->act, r->lo, r->hi));
            }
        }
        return;
    }
    for (int v = 0; v < NV; v++) {
        const __mmask16 m =
            v == NV - 1 ? (__mmask16)(width >= 16 ? 0xFFFFu : (1u << width) - 1u) : 0xFFFF;
        const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + 16 * v) : _mm512_setzero_ps();
        for (int i = 0; i < P; i++) {
            __m512 y = acc[i][v];
            if (bias) y = _mm512_add_ps(y, bv);
            if (add) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, add + i * r->ps + 16 * v));
            _mm512_mask_storeu_ps(out + i * r->ps + 16 * v, m, act16(y, r->act, r->lo, r->hi));
        }
    }
}

/* Every (P, NV) form its own function, as btile16's below: inlined into one switch they
 * made one 150 KB function that took gcc a third of this file's compile time. */
#define TILE16_FN(P, NV)                                                                   \
    __attribute__((target("avx512f"), noinline)) static void tile16_##P##_##NV(             \
        const Row *r, const float *w, Py_ssize_t xoff, const float *bias, const float *add, \
        float *out, int width) {                                                           \
        tile16(r, w, xoff, bias, add, out, P, NV, width);                                  \
    }
#define TILE16_FNS(P) TILE16_FN(P, 1) TILE16_FN(P, 2)
TILE16_FNS(1) TILE16_FNS(2) TILE16_FNS(3) TILE16_FNS(4) TILE16_FNS(5) TILE16_FNS(6)
TILE16_FNS(7) TILE16_FNS(8) TILE16_FNS(9) TILE16_FNS(10) TILE16_FNS(11) TILE16_FNS(12)
TILE16_FNS(13) TILE16_FNS(14)
#define TILE16_ROW(P) {tile16_##P##_1, tile16_##P##_2}
/* [pixels - 1][vectors - 1] */
static const TileFn TILES16[14][2] = {
    TILE16_ROW(1),  TILE16_ROW(2),  TILE16_ROW(3),  TILE16_ROW(4),  TILE16_ROW(5),
    TILE16_ROW(6),  TILE16_ROW(7),  TILE16_ROW(8),  TILE16_ROW(9),  TILE16_ROW(10),
    TILE16_ROW(11), TILE16_ROW(12), TILE16_ROW(13), TILE16_ROW(14)};

static void tile_avx512(const Row *r, const float *w, Py_ssize_t xoff, const float *bias,
                        const float *add, float *out, int p, int nv, int width) {
    const int pi = p >= 1 && p <= 13 ? p : 14; /* past 13: 14, as the switch's default was */
    TILES16[pi - 1][nv == 2](r, w, xoff, bias, add, out, width);
}
#endif /* ONNXVIZ_X86 */

/* ---- the loops over images, output rows, channel blocks and pixel tiles --------------- */

typedef struct {
    Py_ssize_t n, h, w, c, m, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl;
    int x_first, out_first; /* x, and out with the addend, channels-first (N, C, H, W) */
    /* The direct kernel's output rows [row0, row1) of each image (call_check: all), into
     * `out` from its row out_row (channels-last): a held conv with a pool (below) runs
     * one image a band of rows at a time into a small buffer.  Row buffer slots are
     * forgotten only at row0 == 0, so the next band of an image reuses its rows. */
    Py_ssize_t row0, row1, out_row;
} Geometry;

/* Padded columns an output row's tiles read: the last pixel's last tap, plus one. */
static Py_ssize_t padded_width(const Geometry *g) {
    return (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1;
}

/* Whether the rows are read in place: no column of the padded row is outside x's row. */
static int in_place(const Geometry *g) {
    return !g->x_first && g->pl == 0 && padded_width(g) <= g->w;
}

#if ONNXVIZ_X86
/* dst[k] = src[2 k] for k < n, reading only src[0 .. 2n-2] (the last vectors masked);
 * returns n (all done). */
__attribute__((target("avx512f"))) static Py_ssize_t deinterleave16(float *dst, const float *src,
                                                                     Py_ssize_t n) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    Py_ssize_t k = 0;
    for (; k + 17 <= n; k += 16) {
        const __m512 a = _mm512_loadu_ps(src + 2 * k), b = _mm512_loadu_ps(src + 2 * k + 16);
        _mm512_storeu_ps(dst + k, _mm512_permutex2var_ps(a, even, b));
    }
    for (; k < n; k += 16) { /* 1..16 outputs from 2q - 1 floats */
        const int q = n - k < 16 ? (int)(n - k) : 16, floats = 2 * q - 1;
        const __mmask16 ma = floats >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << floats) - 1u);
        const __mmask16 mb = floats > 16 ? (__mmask16)((1u << (floats - 16)) - 1u) : 0;
        const __m512 a = _mm512_maskz_loadu_ps(ma, src + 2 * k);
        const __m512 b = _mm512_maskz_loadu_ps(mb, src + 2 * k + 16);
        const __mmask16 out = q == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << q) - 1u);
        _mm512_mask_storeu_ps(dst + k, out, _mm512_permutex2var_ps(a, even, b));
    }
    return n;
}

#endif

/* ---- few input channels: output pixels in the vector lanes (AVX-512) ------------------ */

/* With C <= PLANES_MAX_C the reduction per output pixel is short (27 terms for a 3x3
 * stem) and the tile above has only NV = 1 vector of output channels when M <= VL: one
 * weight load and P broadcasts of input values per P FMAs, the loads as many as the FMAs,
 * and the broadcasts read pixels sw * C floats apart.  Measured on the MobileNetV3 stem
 * (3 -> 16 channels, 3x3/2, 224 px, AVX-512, 1 thread): 148 us channels-last, and the
 * channels-first rows' transposing copy (+90 us) and the scalar plane-by-plane epilogue
 * (+70 us) on top.  So here the lanes hold pixels instead: each input row is copied,
 * per channel, into `sw` phase planes (plane (c, ph)[t] = padded column ph + sw * t, a
 * plain or a deinterleaving vector copy of a channels-first row), so tap kx of VW
 * consecutive output pixels is one unaligned load at plane ((kx dw) % sw) + (kx dw) / sw.
 * A tile holds MB output channels x PV vectors of pixels (8 x 3 x 16); per (ky, kx, c)
 * it loads PV input vectors and broadcasts MB weights for MB * PV FMAs.  The sums are the same FMAs in the same (ky, kx, c) order as the tiles above, so
 * the numbers are bit for bit the same.  Channels-first output is then one masked vector
 * store per channel and pixel vector; channels-last output is transposed in registers
 * (a cut tile's rows through a small buffer); a channels-last addend goes pixel by
 * pixel.  AVX2 had its own tile (4 channels x 2 x 8 pixels): on a Zen 3 core the tiles
 * above, each input row transposed once into the row buffer, ran the same bits faster
 * (ResNet-18 w32's 7x7/2 stem 2059 -> 1744 us, ResNet-50's 4158 -> 3305, MobileNetV3's
 * 3x3/2 331 -> 338; onnxruntime 1680, 3042, 224), so the path is AVX-512's only. */
#define PLANES_MAX_C 4
#define PLANES_MAX_SW 4
#define PLANES_MAX_KW 16

/* Whether a conv runs this path at this level: AVX-512, channels-first input only.  A
 * channels-last input's phase planes are a strided copy per channel and phase (step
 * sw * C), which cost more than they saved: MobileNetV3's stem read channels-last went
 * 139-148 -> 177-195 us with it, a permute-gather copy included; the tiles above read
 * such rows in place or after one memcpy. */
static int planes_fit(const Geometry *g, int lv) {
    return ONNXVIZ_X86 && lv >= 2 && g->x_first && g->c <= PLANES_MAX_C &&
           g->sw <= PLANES_MAX_SW && g->kw <= PLANES_MAX_KW;
}

/* Pixels per vector (the path is AVX-512's). */
enum { PLANES_VW = 16 };

/* Floats per phase plane: every vector a tile loads lies inside it. */
static Py_ssize_t planes_len(const Geometry *g) {
    const Py_ssize_t vw = PLANES_VW, nvec = (g->ow + vw - 1) / vw;
    return nvec * vw + (g->kw - 1) * g->dw / g->sw + 1;
}

typedef struct {
    const float *const *rows; /* per kernel row: its slot's planes, [C][sw][len] */
    Py_ssize_t c, kw, sw, len, vl;
    Py_ssize_t koff[PLANES_MAX_KW]; /* tap kx's first float: its phase plane + its offset */
    Py_ssize_t ps, cs; /* out's and addend's strides (floats): pixel, channel */
    int ky0, ky1, act;
    float lo, hi;
} Planes;

/* n floats src[0], src[step], ... into dst. */
static void copy_strided(float *dst, const float *src, Py_ssize_t step, Py_ssize_t n) {
    Py_ssize_t k = 0;
    if (step == 1) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
#if ONNXVIZ_X86
    if (step == 2 && level >= 2) k = deinterleave16(dst, src, n);
#endif
    for (; k < n; k++) dst[k] = src[k * step];
}

/* Which plane floats of each phase hold image columns: [lo, hi), the same for every row
 * (plane index t of phase ph holds input column ph - pl + sw * t). */
typedef struct {
    Py_ssize_t lo[PLANES_MAX_SW], hi[PLANES_MAX_SW];
} PhaseRange;

static void phase_ranges(const Geometry *g, Py_ssize_t len, PhaseRange *pr) {
    const Py_ssize_t sw = g->sw, wd = g->w;
    for (Py_ssize_t ph = 0; ph < sw; ph++) {
        const Py_ssize_t start = ph - g->pl;
        Py_ssize_t lo = start >= 0 ? 0 : (-start + sw - 1) / sw;
        Py_ssize_t hi = wd - 1 - start < 0 ? 0 : (wd - 1 - start) / sw + 1;
        if (lo > len) lo = len;
        if (hi > len) hi = len;
        if (hi < lo) hi = lo;
        pr->lo[ph] = lo;
        pr->hi[ph] = hi;
    }
}

/* Input row iy of the channels-first image into one slot: C x sw planes of len floats,
 * zero outside the image. */
static void fill_planes(const Geometry *g, const PhaseRange *pr, const float *image,
                        Py_ssize_t iy, float *dst, Py_ssize_t len) {
    const Py_ssize_t sw = g->sw, wd = g->w;
    for (Py_ssize_t ch = 0; ch < g->c; ch++) {
        const float *s = image + (ch * g->h + iy) * wd;
        for (Py_ssize_t ph = 0; ph < sw; ph++) {
            float *d = dst + (ch * sw + ph) * len;
            const Py_ssize_t lo = pr->lo[ph], hi = pr->hi[ph], first = ph - g->pl + sw * lo;
            memset(d, 0, (size_t)lo * sizeof(float));
            if (hi > lo) copy_strided(d + lo, s + first, sw, hi - lo);
            memset(d + hi, 0, (size_t)(len - hi) * sizeof(float));
        }
    }
}

/* Pixel-major scalar epilogue (a channels-last addend): sums[m * ld + i] is pixel i's
 * channel m. */
static void planes_scalar_out(const Planes *r, const float *sums, int ld, Py_ssize_t npix,
                              int width, const float *bias, const float *add, float *out) {
    for (Py_ssize_t i = 0; i < npix; i++)
        for (int m = 0; m < width; m++) {
            const Py_ssize_t at = i * r->ps + m * r->cs;
            float y = sums[m * ld + i];
            if (bias) y = y + bias[m];
            if (add) y = y + add[at];
            out[at] = act_scalar(y, r->act, r->lo, r->hi);
        }
}
#if ONNXVIZ_X86
#define P16_MB 8
#define P16_PV 3

/* y[m]'s 16 pixels (m < 8) to out as 16 pixel rows of 8 channels, rows ps floats apart:
 * unpack pairs of channels, shuffle them to 4-channel groups per pixel, store 128-bit
 * quarters. */
#define P16_STORE_QUARTER(L)                                                               \
    for (int q = 0; q < 4; q++) {                                                          \
        float *d = o + (4 * (L) + q) * ps;                                                 \
        _mm_storeu_ps(d, _mm512_extractf32x4_ps(u[q], L));                                 \
        _mm_storeu_ps(d + 4, _mm512_extractf32x4_ps(u[4 + q], L));                         \
    }

__attribute__((target("avx512f"), always_inline)) static inline void
store_transposed16(const __m512 *y, float *o, Py_ssize_t ps) {
    const __m512 t0 = _mm512_unpacklo_ps(y[0], y[1]), t1 = _mm512_unpackhi_ps(y[0], y[1]);
    const __m512 t2 = _mm512_unpacklo_ps(y[2], y[3]), t3 = _mm512_unpackhi_ps(y[2], y[3]);
    const __m512 t4 = _mm512_unpacklo_ps(y[4], y[5]), t5 = _mm512_unpackhi_ps(y[4], y[5]);
    const __m512 t6 = _mm512_unpacklo_ps(y[6], y[7]), t7 = _mm512_unpackhi_ps(y[6], y[7]);
    __m512 u[8]; /* u[q] lane L: pixel 4L + q, channels 0-3; u[4 + q]: channels 4-7 */
    u[0] = _mm512_shuffle_ps(t0, t2, 0x44);
    u[1] = _mm512_shuffle_ps(t0, t2, 0xEE);
    u[2] = _mm512_shuffle_ps(t1, t3, 0x44);
    u[3] = _mm512_shuffle_ps(t1, t3, 0xEE);
    u[4] = _mm512_shuffle_ps(t4, t6, 0x44);
    u[5] = _mm512_shuffle_ps(t4, t6, 0xEE);
    u[6] = _mm512_shuffle_ps(t5, t7, 0x44);
    u[7] = _mm512_shuffle_ps(t5, t7, 0xEE);
    P16_STORE_QUARTER(0)
    P16_STORE_QUARTER(1)
    P16_STORE_QUARTER(2)
    P16_STORE_QUARTER(3)
}

/* PV vectors of 16 pixels from `ox` (npix of them real) x P16_MB output channels (width
 * stored); w at the group's first channel in its packed block.  out (and add) at pixel
 * ox, the group's first channel. */
__attribute__((target("avx512f"), always_inline)) static inline void
planes16(const Planes *r, const float *w, Py_ssize_t ox, Py_ssize_t npix, const float *bias,
         const float *add, float *out, const int PV, int width, const int CC) {
    __m512 acc[P16_MB][P16_PV];
    for (int m = 0; m < P16_MB; m++)
        for (int p = 0; p < PV; p++) acc[m][p] = _mm512_setzero_ps();
    const Py_ssize_t c_count = CC ? CC : r->c, vl = r->vl, cstep = r->sw * r->len;
    for (int ky = r->ky0; ky < r->ky1; ky++) {
        const float *slot = r->rows[ky] + ox;
        const float *wc = w + (Py_ssize_t)ky * r->kw * c_count * vl;
        for (Py_ssize_t kx = 0; kx < r->kw; kx++) {
            const float *xc = slot + r->koff[kx];
            for (Py_ssize_t c = 0; c < c_count; c++, wc += vl, xc += cstep) {
                __m512 xv[P16_PV];
                for (int p = 0; p < PV; p++) xv[p] = _mm512_loadu_ps(xc + 16 * p);
                for (int m = 0; m < P16_MB; m++) {
                    const __m512 b = _mm512_set1_ps(wc[m]);
                    for (int p = 0; p < PV; p++) acc[m][p] = _mm512_fmadd_ps(xv[p], b, acc[m][p]);
                }
            }
        }
    }
    if (r->cs != 1) { /* channels-first: each channel's pixels are consecutive */
        for (int m = 0; m < width; m++) {
            float *o = out + m * r->cs;
            const float *a = add ? add + m * r->cs : NULL;
            const __m512 bv = bias ? _mm512_set1_ps(bias[m]) : _mm512_setzero_ps();
            for (int p = 0; p < PV; p++) {
                const Py_ssize_t left = npix - 16 * p;
                const __mmask16 k = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
                __m512 y = acc[m][p];
                if (bias) y = _mm512_add_ps(y, bv);
                if (a) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(k, a + 16 * p));
                _mm512_mask_storeu_ps(o + 16 * p, k, act16(y, r->act, r->lo, r->hi));
            }
        }
        return;
    }
    if (add) { /* channels-last addend: pixel by pixel */
        float sums[P16_MB * 16 * P16_PV];
        for (int m = 0; m < P16_MB; m++)
            for (int p = 0; p < PV; p++) _mm512_storeu_ps(sums + m * 48 + 16 * p, acc[m][p]);
        planes_scalar_out(r, sums, 48, npix, width, bias, add, out);
        return;
    }
    for (int m = 0; m < P16_MB; m++) {
        const __m512 bv = bias && m < width ? _mm512_set1_ps(bias[m]) : _mm512_setzero_ps();
        for (int p = 0; p < PV; p++)
            acc[m][p] = act16(_mm512_add_ps(acc[m][p], bv), r->act, r->lo, r->hi);
    }
    const __mmask16 wm = (__mmask16)((1u << width) - 1u);
    for (int p = 0; p < PV; p++) {
        __m512 y[P16_MB];
        for (int m = 0; m < P16_MB; m++) y[m] = acc[m][p];
        float *o = out + 16 * p * r->ps;
        const Py_ssize_t rows = npix - 16 * p < 16 ? npix - 16 * p : 16;
        if (width == P16_MB && rows == 16) {
            store_transposed16(y, o, r->ps);
            continue;
        }
        float rowbuf[16 * P16_MB]; /* a cut tile: pixel rows of 8 here, then their part */
        store_transposed16(y, rowbuf, P16_MB);
        for (Py_ssize_t i = 0; i < rows; i++)
            _mm512_mask_storeu_ps(o + i * r->ps, wm, _mm512_maskz_loadu_ps(wm, rowbuf + 8 * i));
    }
}

/* PV constant per call, and C when it is 3 (the image stems: the channel loop unrolled). */
__attribute__((target("avx512f"))) static void
planes_avx512(const Planes *r, const float *w, Py_ssize_t ox, Py_ssize_t npix,
              const float *bias, const float *add, float *out, int pv, int width) {
    const int c3 = r->c == 3;
    if (pv >= 3 && c3)
        planes16(r, w, ox, npix, bias, add, out, 3, width, 3);
    else if (pv >= 3)
        planes16(r, w, ox, npix, bias, add, out, 3, width, 0);
    else if (pv == 2 && c3)
        planes16(r, w, ox, npix, bias, add, out, 2, width, 3);
    else if (pv == 2)
        planes16(r, w, ox, npix, bias, add, out, 2, width, 0);
    else
        planes16(r, w, ox, npix, bias, add, out, 1, width, 0);
}

#endif /* ONNXVIZ_X86 */

/* The loops of the planes path (planes_fit): images, output rows, groups of output
 * channels, pixel tiles.  `rowbuf` holds KH slots of C x sw planes of planes_len floats. */
static void run_planes(const Geometry *g, const float *x, const float *wp, const float *bias,
                       const float *add, float *out, int act, float lo, float hi,
                       float *rowbuf, const float **rows, Py_ssize_t *tags) {
#if ONNXVIZ_X86
    const int vl = lanes_at(level), vw = PLANES_VW;
    const int mb = P16_MB, pvmax = P16_PV;
    const Py_ssize_t c = g->c, m = g->m, len = planes_len(g);
    const Py_ssize_t slot_size = c * g->sw * len, wblock = g->kh * g->kw * c * vl;
    Planes r;
    r.rows = rows;
    r.c = c;
    r.kw = g->kw;
    r.sw = g->sw;
    r.len = len;
    for (Py_ssize_t kx = 0; kx < g->kw; kx++) {
        const Py_ssize_t tap = kx * g->dw;
        r.koff[kx] = (tap % g->sw) * len + tap / g->sw;
    }
    r.vl = vl;
    r.ps = g->out_first ? 1 : m;
    r.cs = g->out_first ? g->oh * g->ow : 1;
    r.act = act;
    r.lo = lo;
    r.hi = hi;
    PhaseRange pr;
    phase_ranges(g, len, &pr);
    /* pixel tiles of pvmax whole vectors, then the rest: 7 vectors as 3 + 3 + 1, not the
     * near-equal 3 + 2 + 2 (a 2-vector tile ran slower per vector than the 3 + 1 pair:
     * ResNet-50's stem NCHW 1743-1751 -> 1576-1596 us, MobileNetV3's 124-127 -> 117;
     * 5 vectors as 3 + 1 + 1 instead of 3 + 2 lost) */
    const Py_ssize_t nvec = (g->ow + vw - 1) / vw;
    /* A channels-last output row of more than 32 channels from a kernel of at most 3x3
     * goes through a staging row, then out by one memcpy: each group writes only 32 bytes
     * of a pixel's channels, and with little arithmetic per output those partial lines
     * of an output larger than L2 cost more than the copy (3 -> 64 channels, 3x3/2, 224
     * px: 717-719 -> 567-572 us, 48 channels 477-479 -> 416-422; a 7x7 of 64 lost,
     * 1663-1668 -> 1726-1788, and 16 or 32 channels gained nothing).  Without the
     * memory the rows go straight out. */
    float *stage = NULL;
    if (!g->out_first && m > 32 && g->kh * g->kw <= 9)
        stage = PyMem_RawMalloc((size_t)(g->ow * m) * sizeof(float));
    for (Py_ssize_t b = 0; b < g->n; b++) {
        const float *image = x + b * g->h * g->w * c;
        if (g->row0 == 0)
            for (Py_ssize_t slot = 0; slot < g->kh; slot++) tags[slot] = -1;
        for (Py_ssize_t oy = g->row0; oy < g->row1; oy++) {
            const Py_ssize_t y0 = oy * g->sh - g->pt;
            int ky0 = 0, ky1 = (int)g->kh;
            while (ky0 < ky1 && y0 + ky0 * g->dh < 0) ky0++;
            while (ky1 > ky0 && y0 + (ky1 - 1) * g->dh >= g->h) ky1--;
            r.ky0 = ky0;
            r.ky1 = ky1;
            /* slots keep their input row (tags) while an output row reads it, as in run */
            unsigned used = 0;
            for (int ky = ky0; ky < ky1; ky++)
                for (Py_ssize_t slot = 0; slot < g->kh; slot++)
                    if (tags[slot] == y0 + ky * g->dh) used |= 1u << slot;
            for (int ky = ky0; ky < ky1; ky++) {
                const Py_ssize_t iy = y0 + ky * g->dh;
                Py_ssize_t slot = 0;
                while (slot < g->kh && tags[slot] != iy) slot++;
                if (slot == g->kh) {
                    slot = 0;
                    while (used & (1u << slot)) slot++;
                    used |= 1u << slot;
                    tags[slot] = iy;
                    fill_planes(g, &pr, image, iy, rowbuf + slot * slot_size, len);
                }
                rows[ky] = rowbuf + slot * slot_size;
            }
            const Py_ssize_t at = g->out_first ? b * m * g->oh * g->ow + oy * g->ow
                                               : (b * g->oh + oy - g->out_row) * g->ow * m;
            /* group by group, all tiles of a group: the group's weights and the row's
             * planes stay in L1 (a 7x7 of 64 channels holds 38 KB of weights; tiles outer
             * read all of them per tile: 1.77-1.85 ms against 1.73-1.75 NCHW out) */
            for (Py_ssize_t m0 = 0; m0 < m; m0 += mb) {
                const int width = (int)(m - m0 < mb ? m - m0 : mb);
                const float *w = wp + (m0 / vl) * wblock + m0 % vl;
                const float *bb = bias ? bias + m0 : NULL;
                for (Py_ssize_t v0 = 0, v1; v0 < nvec; v0 = v1) {
                    v1 = v0 + pvmax < nvec ? v0 + pvmax : nvec;
                    const Py_ssize_t ox = v0 * vw, end = v1 * vw < g->ow ? v1 * vw : g->ow;
                    const Py_ssize_t here = at + ox * r.ps + m0 * r.cs;
                    const float *a = add ? add + here : NULL;
                    float *o = stage ? stage + (here - at) : out + here;
                    planes_avx512(&r, w, ox, end - ox, bb, a, o, (int)(v1 - v0), width);
                }
            }
            if (stage) memcpy(out + at, stage, (size_t)(g->ow * m) * sizeof(float));
        }
    }
    PyMem_RawFree(stage);
#else
    (void)g, (void)x, (void)wp, (void)bias, (void)add, (void)out, (void)act, (void)lo,
        (void)hi, (void)rowbuf, (void)rows, (void)tags;
#endif
}

/* Bytes of weights one pass over the image keeps in L2 (`run`'s chunk of output-channel
 * blocks): half the L2 as the OS reports it (2 MB -> 1 MB on Sapphire Rapids), else 512
 * KB.  Measured on a 2 MB L2, one thread, AVX-512, us, 512 KB -> 1 MB: 3x3/2 56 px
 * 128 channels 1444 -> 1388 (8 blocks in one pass, not 6 + 2), 28 px 128 channels 1346 ->
 * 1289; in the models, ratio to onnxruntime: ResNet-50 1.118 -> 1.101, its torchvision
 * export 1.106 -> 1.089, ResNet-18 w32 1.062 -> 1.047, UNet 1.094 -> 1.058, Inception
 * v2 1.276 -> 1.251 (1.5 MB: the same as 1 MB). */
static Py_ssize_t pass_bytes(void) {
    static Py_ssize_t bytes = 0;
    if (bytes == 0) {
        Py_ssize_t half = 0;
#if defined(_SC_LEVEL2_CACHE_SIZE)
        const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        if (l2 > 0) half = (Py_ssize_t)(l2 / 2);
#endif
        bytes = half >= 256 * 1024 && half <= 16 * 1024 * 1024 ? half : 512 * 1024;
    }
    return bytes;
}

/* One row of each of c channel planes (plane[ch * hw + j], j < count) as channels-last
 * pixels: d[j * stride + ch] (stride: the row buffer's channels, c or more).  The plain
 * loop stores one float at a time a row of c floats apart, a cache line per store once
 * c >= 16; the AVX2 one moves 8 channels by 8 pixels
 * through an in-register transpose, whole 32-byte stores (the same values: a copy).  In
 * the TCN benchmark (4 x 64 channels x 256 steps, NCHW between its convs) the plain copy
 * was 11% of the run. */
static void transpose_row_plain(const float *plane, Py_ssize_t hw, Py_ssize_t c,
                                Py_ssize_t count, float *d, Py_ssize_t stride) {
    for (Py_ssize_t ch = 0; ch < c; ch++) {
        const float *s = plane + ch * hw;
        for (Py_ssize_t j = 0; j < count; j++) d[j * stride + ch] = s[j];
    }
}

#if ONNXVIZ_X86
__attribute__((target("avx2,fma"))) static void transpose_row_avx2(const float *plane,
                                                                Py_ssize_t hw, Py_ssize_t c,
                                                                Py_ssize_t count, float *d) {
    Py_ssize_t ch = 0;
    for (; ch + 8 <= c; ch += 8) {
        const float *s = plane + ch * hw;
        Py_ssize_t j = 0;
        for (; j + 8 <= count; j += 8) {
            __m256 r[8]; /* channel k's 8 pixels, then pixel k's 8 channels */
            for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(s + k * hw + j);
            onnxviz_transpose8(r);
            for (int k = 0; k < 8; k++) _mm256_storeu_ps(d + (j + k) * c + ch, r[k]);
        }
        for (; j < count; j++)
            for (int k = 0; k < 8; k++) d[j * c + ch + k] = s[k * hw + j];
    }
    if (ch < c) transpose_row_plain(plane + ch * hw, hw, c - ch, count, d + ch, c);
}
#endif

/* `rowbuf` holds KH padded rows of padded_width * C floats (unused when in place);
 * `rows` KH pointers. */
static void run(const Geometry *g, const float *x, const float *wp, const float *bias,
                const float *add, float *out, int act, float lo, float hi, float *rowbuf,
                const float **rows, Py_ssize_t *tags) {
    if (planes_fit(g, level)) {
        run_planes(g, x, wp, bias, add, out, act, lo, hi, rowbuf, rows, tags);
        return;
    }
    const int vl = lanes_at(level);
    int pmax = G_P, nvmax = 1;
#if ONNXVIZ_X86
    if (level >= 2) {
        /* Rows of a multiple of 14 pixels (ResNet's 56, 28, 14) run whole 14-pixel tiles:
         * 28 accumulators, 2 weight loads per 28 FMAs, not per 24.  Inside ResNet-50 (one
         * thread, A/B alternated in one process, us) its 56 px 64-channel 3x3s went
         * 1490-1520 -> 1421-1462, 28 px 1417-1431 -> 1386-1388, the whole model 1.035 ->
         * 1.031x onnxruntime, ResNet-18 w32 1.004 -> 0.993x.  Elsewhere at most 12: the
         * 13- and 14-pixel loops keep three or four pointers on the stack, and UNet's 64
         * px rows (13 + 13 + 13 + 13 + 12) lost, 1.085 -> 1.116x. */
        pmax = g->ow % 14 == 0 ? 14 : 12;
        nvmax = 2;
    } else if (level == 1) {
        pmax = 6;
        nvmax = 2;
    }
#endif
    const Py_ssize_t c = g->c, m = g->m, blocks = (m + vl - 1) / vl;
    const Py_ssize_t pw = padded_width(g);
    const int direct = in_place(g);
    /* input columns [first, first + count) land at padded columns [first + pl, ...) */
    Py_ssize_t count = g->w;
    if (count > pw - g->pl) count = pw - g->pl;
    Row r;
    r.rows = rows;
    r.c = c;
    r.kw = g->kw;
    r.kstep = g->dw * c;
    r.pstep = g->sw * c;
    r.wblock = g->kh * g->kw * c * vl;
    /* out's strides within one image: channels-last, or one plane per channel */
    r.ps = g->out_first ? 1 : m;
    r.cs = g->out_first ? g->oh * g->ow : 1;
    r.act = act;
    r.lo = lo;
    r.hi = hi;
    /* Output-channel blocks per pass over the image: as many as keep their weights
     * within pass_bytes() (half the L2; a multiple of nvmax), so they stay in L2 while
     * every output row reads them.  With all blocks per output row, a 3x3 conv of 256 x 256 channels
     * (2.4 MB of weights) streamed them from L3 once per row: A/B in one process, 1
     * thread, AVX-512, GMAC/s before -> after: 512 ch at 7 px 34.3 -> 43.0, 256 at 14 px
     * 40.3 -> 44.3, 192 at 14 px 42.3 -> 44.8; narrow convs (one pass) unchanged. */
    Py_ssize_t chunk = (pass_bytes() / 4) / (r.wblock > 0 ? r.wblock : 1);
    chunk /= nvmax;
    chunk = (chunk < 1 ? 1 : chunk) * nvmax;
    /* Pixel tiles of near-equal size: ceil(ow / pmax) of them. */
    const Py_ssize_t tiles = (g->ow + pmax - 1) / pmax;
    /* A pass's lone block of output channels at the AVX2 level (8 channels or fewer, or
     * an odd count of blocks' last) runs tiles of up to 8 pixels: its 6-pixel tile had 6
     * chains of FMAs, fewer than the 2 ports x 4 cycles of latency keep busy. */
    const Py_ssize_t tiles1 = level == 1 ? (g->ow + 7) / 8 : tiles;
    for (Py_ssize_t b = 0; b < g->n; b++) {
        const float *image = x + b * g->h * g->w * c;
        if (g->row0 == 0)
            for (Py_ssize_t slot = 0; slot < g->kh; slot++) tags[slot] = -1;
        for (Py_ssize_t first = 0; first < blocks; first += chunk) {
            const Py_ssize_t last = first + chunk < blocks ? first + chunk : blocks;
            for (Py_ssize_t oy = g->row0; oy < g->row1; oy++) {
                const Py_ssize_t y0 = oy * g->sh - g->pt;
                int ky0 = 0, ky1 = (int)g->kh;
                while (ky0 < ky1 && y0 + ky0 * g->dh < 0) ky0++;
                while (ky1 > ky0 && y0 + (ky1 - 1) * g->dh >= g->h) ky1--;
                r.ky0 = ky0;
                r.ky1 = ky1;
                /* A row buffer slot keeps its input row (tags[slot]) until a row of this
                 * output row needs it: at stride 1 each input row is copied (transposed) once
                 * per image, not kh times. */
                unsigned used = 0; /* slots holding a row this output row reads (kh <= 32) */
                for (int ky = ky0; ky < ky1; ky++) {
                    const Py_ssize_t iy = y0 + ky * g->dh;
                    for (Py_ssize_t slot = 0; slot < g->kh && !direct; slot++)
                        if (tags[slot] == iy) used |= 1u << slot;
                }
                for (int ky = ky0; ky < ky1; ky++) {
                    const Py_ssize_t iy = y0 + ky * g->dh;
                    const float *src = image + iy * g->w * c;
                    if (direct) {
                        rows[ky] = src;
                        continue;
                    }
                    Py_ssize_t slot = 0;
                    while (slot < g->kh && tags[slot] != iy) slot++;
                    if (slot < g->kh) {
                        rows[ky] = rowbuf + slot * pw * c;
                        continue;
                    }
                    slot = 0;
                    while (used & (1u << slot)) slot++;
                    used |= 1u << slot;
                    tags[slot] = iy;
                    float *dst = rowbuf + slot * pw * c;
                    /* zero border left, the row, zero border right (pl may exceed pw) */
                    Py_ssize_t left = g->pl < pw ? g->pl : pw;
                    memset(dst, 0, (size_t)(left * c) * sizeof(float));
                    if (count > 0 && !g->x_first) {
                        memcpy(dst + left * c, src, (size_t)(count * c) * sizeof(float));
                    } else if (count > 0) { /* one row of each channel plane, transposed */
                        const float *plane = image + (y0 + ky * g->dh) * g->w;
                        float *d = dst + left * c;
                        const Py_ssize_t hw = g->h * g->w;
                        if (c == 3) { /* an image stem's: the stores in order */
                            const float *s0 = plane, *s1 = plane + hw, *s2 = plane + 2 * hw;
                            for (Py_ssize_t j = 0; j < count; j++, d += 3) {
                                d[0] = s0[j];
                                d[1] = s1[j];
                                d[2] = s2[j];
                            }
                        } else {
#if ONNXVIZ_X86
                            if (level >= 1)
                                transpose_row_avx2(plane, hw, c, count, d);
                            else
#endif
                                transpose_row_plain(plane, hw, c, count, d, c);
                        }
                    }
                    Py_ssize_t done = left + (count > 0 ? count : 0);
                    if (done < pw)
                        memset(dst + done * c, 0, (size_t)((pw - done) * c) * sizeof(float));
                    rows[ky] = dst;
                }
                /* out (and addend) at image b, row oy, channel 0 */
                const Py_ssize_t at = g->out_first ? b * m * g->oh * g->ow + oy * g->ow
                                                   : (b * g->oh + oy - g->out_row) * g->ow * m;
                for (Py_ssize_t mb = first; mb < last; mb += nvmax) {
                    const int nv = (int)(last - mb < nvmax ? last - mb : nvmax);
                    const Py_ssize_t m0 = mb * vl;
                    const int width = (int)(m - (m0 + (nv - 1) * vl) < vl ? m - (m0 + (nv - 1) * vl)
                                                                          : vl);
                    const float *w = wp + mb * r.wblock;
                    const float *bb = bias ? bias + m0 : NULL;
                    Py_ssize_t ox = 0;
                    const Py_ssize_t tiles_here = nv == 1 ? tiles1 : tiles;
                    for (Py_ssize_t t = 0; t < tiles_here; t++) {
                        /* tile t ends at pixel ow * (t + 1) / tiles_here */
                        const Py_ssize_t end = g->ow * (t + 1) / tiles_here;
                        const int p = (int)(end - ox);
                        const Py_ssize_t xoff = ox * g->sw * c;
                        const Py_ssize_t here = at + ox * r.ps + m0 * r.cs;
                        float *o = out + here;
                        const float *a = add ? add + here : NULL;
    #if ONNXVIZ_X86
                        if (level >= 2) {
                            tile_avx512(&r, w, xoff, bb, a, o, p, nv, width);
                            ox = end;
                            continue;
                        }
                        if (level == 1) {
                            tile_avx2(&r, w, xoff, bb, a, o, p, nv, width);
                            ox = end;
                            continue;
                        }
    #endif
                        tile_generic(&r, w, xoff, bb, a, o, p, width);
                        ox = end;
                    }
                }
            }
        }
    }
}

/* ---- blocked: wide convs (many input and output channels) ------------------------------
 *
 * `run` above keeps a tile's sums in registers over the whole reduction (kh, kw, C), so
 * every output row streams its channel blocks' whole weights (kh kw C x 32 floats, 295
 * KB for a 3x3 of 512 input channels) from L2.  Here the reduction is cut into chunks of
 * BK_C = 16 input channels: a group of up to BK_M = 64 output channels and one chunk make
 * a weight block of kh kw x 16 x 64 floats (36 KB for 3x3: it stays in L1) that every
 * output pixel of the image reads in turn; a tile's sums go to `out` after each chunk and
 * come back for the next (7 x 4 vectors each way per 9 x 16 x 28 FMAs).  Tiles are up to
 * BK_P = 7 pixels of one output row x up to 4 vectors of output channels (28
 * accumulators).
 *
 * The input is first copied chunk-major, [C / 16][H * W + 1][16] (the tail chunk's
 * missing channels zero, and one zero pixel after each chunk's plane; 64-byte aligned, as
 * the caller's packed weight and output are: a vector load then touches one cache line,
 * where numpy's 16- or 32-byte offsets cost 10-20%): a chunk's pixels
 * are then 64 bytes apart, where channels-last they were 4 C bytes apart (2 KB at 512
 * channels: a tile's rows fell into two L1 sets).  Every tile reads its pixels through a
 * table made once per call: per output row and tile, per tap inside the image (taps
 * above or below it are skipped) and pixel, the float offset of that input pixel in a
 * chunk's plane, or of the zero pixel for a tap in the left or right padding; so any
 * stride, dilation or padding costs the same, and a tile only adds the chunk's base.
 *
 * The weight comes packed by nn_conv.pack_blocked: per group (output channels 64g..,
 * NV = its vectors) and chunk (input channels 16q.., CC of them), [KH][KW][CC][NV * 16],
 * groups then chunks in order, missing output channels zero.
 *
 * While a block runs, the tiles prefetch the next one into L2, a few lines per tap:
 * inside ResNet-50 (weights from memory) that took its 7 px 512-channel 3x3 convs from
 * 2.2 to 1.8 ms; the hardware prefetchers alone did not keep up.
 *
 * The sums: per chunk in (ky, kx, c) order onto the chunks before (stored and reloaded
 * in float32, exactly), with FMAs at levels 2-3; at levels 0-1 a plain C tile with a
 * multiply and an add (correct, not fast: the caller routes only AVX-512 here).  Then
 * + bias, + addend, activation, as `run`. */
#define BK_M 64
#define BK_C 16
#define BK_P 7

typedef struct {
    const float *base;      /* the chunk's plane */
    const Py_ssize_t *off;  /* per tap k and pixel i: off[k * BK_P + i] */
    const int *tap;         /* per tap: its index ky * kw + kx */
    const float *block;     /* the group's and chunk's weight rows */
    Py_ssize_t tapw;        /* floats per tap of the block: CC * NV * 16 */
    int taps, cc;
    Py_ssize_t ps;          /* floats between out's pixels (M) */
    const char *pf;         /* lines to prefetch into L2 (the next block's share) */
    int pf_per_tap;         /* of them per tap */
    int first, last, width; /* first / last chunk; lanes stored of the last vector */
    int act;
    float lo, hi;
} BTile;

/* Generic C: p pixels x nv vectors of 16 (any level). */
static void btile_generic(const BTile *t, const float *bias, const float *add, float *out,
                          int p, int nv) {
    float acc[BK_P][BK_M];
    const int lanes = 16 * (nv - 1) + t->width, stride = 16 * nv;
    for (int i = 0; i < p; i++)
        for (int v = 0; v < lanes; v++) acc[i][v] = t->first ? 0.0f : out[i * t->ps + v];
    for (int k = 0; k < t->taps; k++) {
        const Py_ssize_t *off = t->off + k * BK_P;
        const float *w = t->block + t->tap[k] * t->tapw;
        for (int c = 0; c < t->cc; c++, w += stride)
            for (int i = 0; i < p; i++) {
                const float b = t->base[off[i] + c];
                for (int v = 0; v < lanes; v++) {
                    float prod = b * w[v];
                    acc[i][v] = acc[i][v] + prod;
                }
            }
    }
    for (int i = 0; i < p; i++) {
        float *o = out + i * t->ps;
        if (!t->last) {
            for (int v = 0; v < lanes; v++) o[v] = acc[i][v];
            continue;
        }
        for (int v = 0; v < lanes; v++) {
            float y = acc[i][v];
            if (bias) y = y + bias[v];
            if (add) y = y + add[i * t->ps + v];
            o[v] = act_scalar(y, t->act, t->lo, t->hi);
        }
    }
}

#if ONNXVIZ_X86
/* P pixels x NV vectors, CC input channels per tap (0: t->cc, a tail chunk). */
__attribute__((target("avx512f"), always_inline)) static inline void
btile16(const BTile *t, const float *bias, const float *add, float *out, const int P,
        const int NV, const int CC) {
    __m512 acc[BK_P][4];
    const __mmask16 tail = (__mmask16)(t->width >= 16 ? 0xFFFFu : (1u << t->width) - 1u);
    const Py_ssize_t ps = t->ps;
    for (int i = 0; i < P; i++)
        for (int v = 0; v < NV; v++) {
            const __mmask16 m = v == NV - 1 ? tail : (__mmask16)0xFFFF;
            acc[i][v] = t->first ? _mm512_setzero_ps()
                                 : _mm512_maskz_loadu_ps(m, out + i * ps + 16 * v);
        }
    const int cc = CC ? CC : t->cc;
    for (int k = 0; k < t->taps; k++) {
        const float *xp[BK_P];
        for (int i = 0; i < P; i++) xp[i] = t->base + t->off[k * BK_P + i];
        const float *w = t->block + t->tap[k] * t->tapw;
        for (int l = 0; l < t->pf_per_tap; l++)
            _mm_prefetch(t->pf + 64 * (k * t->pf_per_tap + l), _MM_HINT_T1);
#pragma GCC unroll 16
        for (int c = 0; c < cc; c++) {
            __m512 wv[4];
            for (int v = 0; v < NV; v++) wv[v] = _mm512_loadu_ps(w + (c * NV + v) * 16);
            for (int i = 0; i < P; i++) {
                const __m512 b = _mm512_set1_ps(xp[i][c]);
                for (int v = 0; v < NV; v++) acc[i][v] = _mm512_fmadd_ps(b, wv[v], acc[i][v]);
            }
        }
    }
    for (int v = 0; v < NV; v++) {
        const __mmask16 m = v == NV - 1 ? tail : (__mmask16)0xFFFF;
        if (!t->last) {
            for (int i = 0; i < P; i++) _mm512_mask_storeu_ps(out + i * ps + 16 * v, m, acc[i][v]);
            continue;
        }
        const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + 16 * v) : _mm512_setzero_ps();
        for (int i = 0; i < P; i++) {
            __m512 y = acc[i][v];
            if (bias) y = _mm512_add_ps(y, bv);
            if (add) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, add + i * ps + 16 * v));
            _mm512_mask_storeu_ps(out + i * ps + 16 * v, m, act16(y, t->act, t->lo, t->hi));
        }
    }
}

/* Every (P, NV, CC) form its own function: one function holding all 56 inlined took gcc
 * most of this file's compile time (its passes grow faster than the code). */
typedef void (*BTileFn)(const BTile *, const float *, const float *, float *);
#define BTILE_FN(P, NV, CC, TAG)                                                           \
    __attribute__((target("avx512f"), noinline)) static void btile16_##P##_##NV##_##TAG(    \
        const BTile *t, const float *bias, const float *add, float *out) {                \
        btile16(t, bias, add, out, P, NV, CC);                                             \
    }
#define BTILE_FNS(P, CC, TAG)                                                              \
    BTILE_FN(P, 1, CC, TAG) BTILE_FN(P, 2, CC, TAG) BTILE_FN(P, 3, CC, TAG)                 \
    BTILE_FN(P, 4, CC, TAG)
#define BTILE_ALL(CC, TAG)                                                                 \
    BTILE_FNS(1, CC, TAG) BTILE_FNS(2, CC, TAG) BTILE_FNS(3, CC, TAG) BTILE_FNS(4, CC, TAG) \
    BTILE_FNS(5, CC, TAG) BTILE_FNS(6, CC, TAG) BTILE_FNS(7, CC, TAG)
BTILE_ALL(BK_C, c)
BTILE_ALL(0, any)
#define BTILE_ROW(P, TAG)                                                                  \
    {btile16_##P##_1_##TAG, btile16_##P##_2_##TAG, btile16_##P##_3_##TAG,                  \
     btile16_##P##_4_##TAG}
#define BTILE_TABLE(TAG)                                                                   \
    {BTILE_ROW(1, TAG), BTILE_ROW(2, TAG), BTILE_ROW(3, TAG), BTILE_ROW(4, TAG),           \
     BTILE_ROW(5, TAG), BTILE_ROW(6, TAG), BTILE_ROW(7, TAG)}
/* [whole chunk or not][pixels - 1][vectors - 1] */
static const BTileFn BTILES[2][BK_P][4] = {BTILE_TABLE(c), BTILE_TABLE(any)};

static void btile_avx512(const BTile *t, const float *bias, const float *add, float *out,
                         int p, int nv) {
    /* past the table (never asked): its last form, as the switches' defaults were */
    const int pi = p >= 1 && p < BK_P ? p : BK_P, vi = nv >= 1 && nv < 4 ? nv : 4;
    BTILES[t->cc != BK_C][pi - 1][vi - 1](t, bias, add, out);
}
#endif /* ONNXVIZ_X86 */

/* Pixel tiles per output row: near-equal ones of at most BK_P pixels. */
static Py_ssize_t blocked_tiles(const Geometry *g) { return (g->ow + BK_P - 1) / BK_P; }

/* The tables: per output row oy, taps[oy] taps inside the image, their indices at
 * tap[oy * KK ..], and per tile tl the offsets at off[((oy * tiles + tl) * KK + k) * BK_P
 * + i] (pixel i of the tile, its k-th tap; see above). */
static void blocked_tables(const Geometry *g, int *taps, int *tap, Py_ssize_t *off) {
    const Py_ssize_t kk = g->kh * g->kw, tiles = blocked_tiles(g), zero = g->h * g->w * BK_C;
    for (Py_ssize_t oy = 0; oy < g->oh; oy++) {
        const Py_ssize_t y0 = oy * g->sh - g->pt;
        int k = 0;
        for (Py_ssize_t ky = 0; ky < g->kh; ky++) {
            const Py_ssize_t iy = y0 + ky * g->dh;
            if (iy < 0 || iy >= g->h) continue;
            for (Py_ssize_t kx = 0; kx < g->kw; kx++) tap[oy * kk + k++] = (int)(ky * g->kw + kx);
        }
        taps[oy] = k;
        Py_ssize_t ox = 0;
        for (Py_ssize_t tl = 0; tl < tiles; tl++) {
            const Py_ssize_t end = g->ow * (tl + 1) / tiles;
            Py_ssize_t *o = off + (oy * tiles + tl) * kk * BK_P;
            for (int j = 0; j < k; j++) {
                const Py_ssize_t ky = tap[oy * kk + j] / g->kw, kx = tap[oy * kk + j] % g->kw;
                const Py_ssize_t iy = y0 + ky * g->dh;
                for (Py_ssize_t i = 0; i < BK_P; i++) {
                    const Py_ssize_t ix = (ox + i) * g->sw - g->pl + kx * g->dw;
                    o[j * BK_P + i] = ox + i < end && ix >= 0 && ix < g->w
                                          ? (iy * g->w + ix) * BK_C
                                          : zero;
                }
            }
            ox = end;
        }
    }
}

/* The blocked conv of channels-last x into channels-last out; `chunks` holds the
 * chunk-major copy of one image, ceil(C / 16) * (H * W + 1) * 16 floats. */
static void run_blocked(const Geometry *g, const float *x, const float *wp, const float *bias,
                        const float *add, float *out, int act, float lo, float hi,
                        const int *taps, const int *tap, const Py_ssize_t *off, float *chunks) {
    const Py_ssize_t c = g->c, m = g->m, kk = g->kh * g->kw, hw = g->h * g->w;
    const Py_ssize_t plane = (hw + 1) * BK_C, tiles = blocked_tiles(g);
    const float *wp_end = wp + (m + 15) / 16 * 16 * c * kk;
    BTile t;
    t.ps = m;
    t.act = act;
    t.lo = lo;
    t.hi = hi;
    for (Py_ssize_t b = 0; b < g->n; b++) {
        const float *image = x + b * hw * c;
        const Py_ssize_t image_out = b * g->oh * g->ow * m;
        /* pixel by pixel (its C floats read in order), into each chunk's plane */
        const Py_ssize_t whole = c / BK_C * BK_C;
        for (Py_ssize_t j = 0; j < hw; j++) {
            const float *src = image + j * c;
            float *dst = chunks + j * BK_C;
            for (Py_ssize_t c0 = 0; c0 < whole; c0 += BK_C, dst += plane)
                memcpy(dst, src + c0, BK_C * sizeof(float)); /* a constant size: inlined */
            if (whole < c) {
                memcpy(dst, src + whole, (size_t)(c - whole) * sizeof(float));
                memset(dst + (c - whole), 0, (size_t)(BK_C - (c - whole)) * sizeof(float));
            }
        }
        for (Py_ssize_t q = 0; q * BK_C < c; q++) /* the zero pixels */
            memset(chunks + q * plane + hw * BK_C, 0, BK_C * sizeof(float));
        for (Py_ssize_t m0 = 0; m0 < m; m0 += BK_M) {
            const Py_ssize_t lanes = m - m0 < BK_M ? m - m0 : BK_M;
            const int nv = (int)((lanes + 15) / 16);
            t.width = (int)(lanes - 16 * (nv - 1));
            const float *group = wp + m0 * c * kk; /* groups before are 64 channels each */
            const float *bb = bias ? bias + m0 : NULL;
            for (Py_ssize_t c0 = 0; c0 < c; c0 += BK_C) {
                t.cc = (int)(c - c0 < BK_C ? c - c0 : BK_C);
                t.first = c0 == 0;
                t.last = c0 + BK_C >= c;
                t.block = group + c0 * kk * 16 * nv;
                t.tapw = t.cc * 16 * nv;
                t.base = chunks + (c0 / BK_C) * plane;
                /* The next block (the next floats of wp) goes to L2 a share per tile and
                 * tap, spread over the FMAs: a conv's weights (0.6-9.4 MB) come from
                 * memory inside a model, and the hardware's prefetch did not keep up. */
                const float *next_block = t.block + kk * t.tapw;
                const char *next = (const char *)next_block;
                Py_ssize_t lines = kk * t.tapw; /* floats, then lines, up to wp's end */
                if (lines > wp_end - next_block) lines = wp_end - next_block;
                lines = lines * 4 / 64;
                const Py_ssize_t share = (lines + g->oh * tiles - 1) / (g->oh * tiles);
                const int per_tap = (int)((share + kk - 1) / kk);
                Py_ssize_t fetched = 0;
                for (Py_ssize_t oy = 0; oy < g->oh; oy++) {
                    t.taps = taps[oy]; /* none: the sums stay 0 (or the chunks before) */
                    t.tap = tap + oy * kk;
                    Py_ssize_t ox = 0;
                    for (Py_ssize_t tl = 0; tl < tiles; tl++) {
                        const Py_ssize_t end = g->ow * (tl + 1) / tiles;
                        const int p = (int)(end - ox);
                        t.off = off + (oy * tiles + tl) * kk * BK_P;
                        t.pf = next;
                        t.pf_per_tap = 0; /* never past the weights' end */
                        if (fetched + per_tap * kk <= lines) {
                            t.pf = next + 64 * fetched;
                            t.pf_per_tap = per_tap;
                        }
                        fetched += share;
                        const Py_ssize_t here = image_out + (oy * g->ow + ox) * m + m0;
                        const float *a = add ? add + here : NULL;
#if ONNXVIZ_X86
                        if (level >= 2)
                            btile_avx512(&t, bb, a, out + here, p, nv);
                        else
#endif
                            btile_generic(&t, bb, a, out + here, p, nv);
                        ox = end;
                    }
                }
            }
        }
    }
}

/* ---- Python interface ----------------------------------------------------------------- */

/* a * b into *out, or -1 when it overflows (never for real shapes). */
static int mul_size(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) {
    if (a < 0 || b < 0 || (b && a > PY_SSIZE_T_MAX / 64 / b)) return -1;
    *out = a * b;
    return 0;
}

/* What a call of the direct kernel (blocked: 0) or the blocked one (1) needs beyond its
 * buffers: the geometry, checked, and the float counts of x, the packed weight and out
 * (with the addend); the direct kernel's row-buffer floats and phase planes. */
typedef struct {
    Geometry g;
    int blocked, planes;
    Py_ssize_t x_count, w_count, o_count, buf_count, taps;
} Call;

/* Checks the geometry in c->g (for the direct kernel, weight packed for `vl` lanes, at
 * this level) and fills c's counts: 0, or -1 with ValueError naming `name`. */
static int call_check(Call *c, int vl, const char *name) {
    Geometry *const g = &c->g;
    g->row0 = 0;
    g->row1 = g->oh;
    g->out_row = 0;
    const Py_ssize_t limit = (Py_ssize_t)1 << 30;
    Py_ssize_t dims[] = {g->n,  g->h,  g->w,  g->c,  g->m,  g->kh, g->kw,
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
    Py_ssize_t t, pw;
    if (c->blocked) {
        if (mul_size(g->n, g->h, &t) || mul_size(t, g->w, &t) || mul_size(t, g->c, &c->x_count) ||
            mul_size((g->m + 15) / 16 * 16, g->kh, &t) || mul_size(t, g->kw, &t) ||
            mul_size(t, g->c, &c->w_count) || mul_size(g->n, g->oh, &t) ||
            mul_size(t, g->ow, &t) || mul_size(t, g->m, &c->o_count) ||
            mul_size(g->kh, g->kw, &c->taps) || c->taps > limit || mul_size(g->oh, g->sh, &t) ||
            mul_size(g->kh, g->dh, &t) || mul_size(g->ow, g->sw, &t) ||
            mul_size(g->kw, g->dw, &t)) {
            PyErr_Format(PyExc_ValueError, "%s: sizes too large", name);
            return -1;
        }
        return 0;
    }
    if (g->kh > 32) { /* the row buffer's slots are tracked in a 32-bit mask */
        PyErr_Format(PyExc_ValueError, "%s: kernel height must be at most 32", name);
        return -1;
    }
    if (vl != lanes_at(level)) {
        PyErr_Format(PyExc_ValueError, "%s: weight packed for %d lanes, this level runs %d",
                     name, vl, lanes_at(level));
        return -1;
    }
    const Py_ssize_t blocks = (g->m + vl - 1) / vl;
    if (mul_size(g->n, g->h, &t) || mul_size(t, g->w, &t) || mul_size(t, g->c, &c->x_count) ||
        mul_size(blocks, g->kh, &t) || mul_size(t, g->kw, &t) || mul_size(t, g->c, &t) ||
        mul_size(t, vl, &c->w_count) || mul_size(g->n, g->oh, &t) || mul_size(t, g->ow, &t) ||
        mul_size(t, g->m, &c->o_count) || mul_size(g->ow - 1, g->sw, &t) ||
        mul_size(g->kw - 1, g->dw, &pw) || t > limit || pw > limit ||
        mul_size(t + pw + 1, g->c, &t) || mul_size(t, g->kh, &c->buf_count) ||
        mul_size(g->oh, g->sh, &t) || mul_size(g->kh, g->dh, &t)) {
        PyErr_Format(PyExc_ValueError, "%s: sizes too large", name);
        return -1;
    }
    c->planes = planes_fit(g, level);
    if (c->planes && mul_size(g->kh * g->c * g->sw, planes_len(g), &c->buf_count)) {
        PyErr_Format(PyExc_ValueError, "%s: sizes too large", name);
        return -1;
    }
    return 0;
}

/* The direct kernel's scratch for a checked call: its row buffer (NULL when the rows are
 * read in place), one row pointer and one slot tag per kernel row. */
typedef struct {
    float *rowbuf;
    const float **rows;
    Py_ssize_t *tags;
} Scratch;

static void scratch_free(Scratch *s) {
    PyMem_RawFree(s->rowbuf);
    PyMem_RawFree(s->rows);
    PyMem_RawFree(s->tags);
}

/* 0, or -1 with MemoryError (nothing held). */
static int scratch_take(const Call *c, Scratch *s) {
    const Geometry *const g = &c->g;
    const int buffered = c->planes || !in_place(g);
    s->rowbuf = buffered ? PyMem_RawMalloc((size_t)c->buf_count * sizeof(float)) : NULL;
    s->rows = PyMem_RawMalloc((size_t)g->kh * sizeof(float *));
    s->tags = PyMem_RawMalloc((size_t)g->kh * sizeof(Py_ssize_t));
    if ((buffered && !s->rowbuf) || !s->rows || !s->tags) {
        scratch_free(s);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Runs a checked call on its buffers with its scratch, the GIL released: 0, or -1 with
 * MemoryError (nothing written). */
static int call_run(const Call *c, const float *x, const float *wp, const float *bias,
                    const float *add, float *out, int act, float lo, float hi) {
    const Geometry *const g = &c->g;
    if (c->blocked) {
        const Py_ssize_t chunk_count = (g->c + BK_C - 1) / BK_C;
        Py_ssize_t table_count, chunk_floats;
        if (mul_size(g->oh * blocked_tiles(g), c->taps * BK_P, &table_count) ||
            mul_size(chunk_count, (g->h * g->w + 1) * BK_C, &chunk_floats)) {
            PyErr_SetString(PyExc_ValueError, "conv_blocked: sizes too large");
            return -1;
        }
        int *tap_counts = PyMem_RawMalloc((size_t)g->oh * sizeof(int));
        int *tap = PyMem_RawMalloc((size_t)(g->oh * c->taps) * sizeof(int));
        Py_ssize_t *off = PyMem_RawMalloc((size_t)table_count * sizeof(Py_ssize_t));
        void *chunk_block = PyMem_RawMalloc((size_t)chunk_floats * sizeof(float) + 64);
        /* 64-byte aligned: a chunk's pixel is then one cache line */
        float *chunks = (float *)(((uintptr_t)chunk_block + 63) & ~(uintptr_t)63);
        if (!tap_counts || !tap || !off || !chunk_block) {
            PyMem_RawFree(tap_counts);
            PyMem_RawFree(tap);
            PyMem_RawFree(off);
            PyMem_RawFree(chunk_block);
            PyErr_NoMemory();
            return -1;
        }
        Py_BEGIN_ALLOW_THREADS;
        blocked_tables(g, tap_counts, tap, off);
        run_blocked(g, x, wp, bias, add, out, act, lo, hi, tap_counts, tap, off, chunks);
        Py_END_ALLOW_THREADS;
        PyMem_RawFree(tap_counts);
        PyMem_RawFree(tap);
        PyMem_RawFree(off);
        PyMem_RawFree(chunk_block);
        return 0;
    }
    Scratch sc;
    if (scratch_take(c, &sc) < 0) return -1;
    Py_BEGIN_ALLOW_THREADS;
    run(g, x, wp, bias, add, out, act, lo, hi, sc.rowbuf, sc.rows, sc.tags);
    Py_END_ALLOW_THREADS;
    scratch_free(&sc);
    return 0;
}

/* conv_nhwc and conv_blocked after their arguments are parsed into `c`. */
static PyObject *call_buffers(Call *c, PyObject *xo, PyObject *wo, PyObject *bo, PyObject *ao,
                              PyObject *oo, int act, float lo, float hi, int vl,
                              const char *name) {
    if (act < 0 || act > ACT_LAST) {
        PyErr_Format(PyExc_ValueError, "%s: activation must be 0..%d", name, ACT_LAST);
        return NULL;
    }
    if (call_check(c, vl, name) < 0) return NULL;
    Py_buffer xb, wb, bb, ab, ob;
    int have_b = bo != Py_None, have_a = ao != Py_None, rc = -1;
    if (onnxviz_get_floats(xo, &xb, c->x_count, 1, 0, "x") < 0) return NULL;
    if (onnxviz_get_floats(wo, &wb, c->w_count, 1, 0, "w") < 0) goto fail_x;
    if (have_b && onnxviz_get_floats(bo, &bb, c->g.m, 1, 0, "bias") < 0) goto fail_w;
    if (have_a && onnxviz_get_floats(ao, &ab, c->o_count, 1, 0, "addend") < 0) goto fail_b;
    if (onnxviz_get_floats(oo, &ob, c->o_count, 1, 1, "out") < 0) goto fail_a;
    rc = call_run(c, xb.buf, wb.buf, have_b ? bb.buf : NULL, have_a ? ab.buf : NULL, ob.buf, act,
                  lo, hi);
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
    Py_RETURN_NONE;
}

static PyObject *py_conv_nhwc(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *wo, *bo, *ao, *oo;
    Call c;
    memset(&c, 0, sizeof c);
    Geometry *const g = &c.g;
    int act, vl, layouts = 0;
    float lo, hi;
    if (!PyArg_ParseTuple(args, "OOOOO(nnnn)(nnn)(nn)(nn)(nn)(nn)iffi|i:conv_nhwc", &xo, &wo,
                          &bo, &ao, &oo, &g->n, &g->h, &g->w, &g->c, &g->m, &g->kh, &g->kw,
                          &g->oh, &g->ow, &g->sh, &g->sw, &g->dh, &g->dw, &g->pt, &g->pl, &act,
                          &lo, &hi, &vl, &layouts))
        return NULL;
    if (layouts < 0 || layouts > 3) {
        PyErr_SetString(PyExc_ValueError, "conv_nhwc: layouts must be 0..3");
        return NULL;
    }
    g->x_first = layouts & 1;
    g->out_first = (layouts >> 1) & 1;
    return call_buffers(&c, xo, wo, bo, ao, oo, act, lo, hi, vl, "conv_nhwc");
}

static PyObject *py_conv_blocked(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *wo, *bo, *ao, *oo;
    Call c;
    memset(&c, 0, sizeof c);
    Geometry *const g = &c.g;
    int act;
    float lo, hi;
    if (!PyArg_ParseTuple(args, "OOOOO(nnnn)(nnn)(nn)(nn)(nn)(nn)iff:conv_blocked", &xo, &wo,
                          &bo, &ao, &oo, &g->n, &g->h, &g->w, &g->c, &g->m, &g->kh, &g->kw,
                          &g->oh, &g->ow, &g->sh, &g->sw, &g->dh, &g->dw, &g->pt, &g->pl, &act,
                          &lo, &hi))
        return NULL;
    c.blocked = 1;
    return call_buffers(&c, xo, wo, bo, ao, oo, act, lo, hi, 0, "conv_blocked");
}

/* ---- a held conv: a fused conv chain's common call --------------------------------------
 *
 * `held(...)` makes the `quick` call of a fusion.py ConvChain whose conv runs this module's
 * direct or blocked kernel channels-last (kernels/nn_conv_nhwc.py's _Direct): called with
 * the fused node's inputs, it checks them (the image (N, C, H, W) channels-last, or with
 * `x_first` C-contiguous as a model's input is for its stem (the direct kernel reads it
 * through its row transposes or phase planes, as _Direct does), the
 * constants it was made for, by identity, at `places`, the residual channels-last when
 * the chain adds one, the level it was made at) and runs the kernel into a new 64-byte
 * aligned channels-last output, with the bias, residual and activation: _Direct's own
 * call, so its bits, from the run loop's call to the result in C (the Python layers cost
 * 20-60 us a conv in ResNet-50's run).  With `out_first` (an NCHW chain's conv: the
 * kernel reading and writing NCHW, nn_conv.py's _DirectCall), the residual and the output
 * are C-contiguous channels-first instead.  A call it does not take returns
 * `fallback(*args)` (quiet_loop.decline: the loop then makes the chain's own call). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
    HeldWeights weights;
    Call c;
    int act, level, inplace;
    float lo, hi;
    int spread;     /* the residual is one value per item and channel (out_first only) */
    int pool;       /* a max pool of the conv's output follows (call_run_pooled) */
    PoolGeometry pg; /* its window, strides and pads; oh, ow: its output's size */
} Held;

/* Bytes of conv output rows a pooled call computes before pooling them: the band is still
 * in L2 when the pool reads it (the stem's 112 x 64 rows: 28 KB each). */
#define POOL_BAND_BYTES ((Py_ssize_t)512 * 1024)

/* A checked direct or blocked call (no addend) followed by the max pool `pg` (pg->oh and
 * pg->ow its output's size) into `out` (N, pg->oh, pg->ow, M): the conv's output never
 * exists whole.  Per image, bands of pool output rows: the conv rows they read (clipped
 * to the image) are computed into a buffer of POOL_BAND_BYTES, the rows two bands share
 * moved to its top instead of computed twice, then pooled with the band as the pool's
 * image (its top pad what is left of pg->pt above the band: rows above it are either
 * padding or not in any window of the band).  The same conv and pool kernels as the
 * separate nodes, so the same bits.  The blocked kernel (it runs whole images) writes
 * the whole output into a buffer first.  0, or -1 with MemoryError. */
static int call_run_pooled(const Call *c, const PoolGeometry *pg, const float *x,
                           const float *wp, const float *bias, float *out, int act, float lo,
                           float hi) {
    const Geometry *const g = &c->g;
    const Py_ssize_t row_floats = g->ow * g->m;
    if (c->blocked) {
        float *whole = PyMem_RawMalloc((size_t)c->o_count * sizeof(float));
        if (!whole) {
            PyErr_NoMemory();
            return -1;
        }
        if (call_run(c, x, wp, bias, NULL, whole, act, lo, hi) < 0) {
            PyMem_RawFree(whole);
            return -1;
        }
        PoolGeometry p = *pg;
        p.planes = g->n;
        p.h = g->oh;
        p.w = g->ow;
        Py_BEGIN_ALLOW_THREADS;
        pool_nhwc_at(level, whole, out, &p, g->m);
        Py_END_ALLOW_THREADS;
        PyMem_RawFree(whole);
        return 0;
    }
    const Py_ssize_t fit = POOL_BAND_BYTES / (row_floats * (Py_ssize_t)sizeof(float));
    const Py_ssize_t per_band = fit > pg->kh ? (fit - pg->kh) / pg->sh + 1 : 1;
    Py_ssize_t band_rows = (per_band - 1) * pg->sh + pg->kh;
    if (band_rows > g->oh) band_rows = g->oh;
    Scratch sc;
    if (scratch_take(c, &sc) < 0) return -1;
    float *band = PyMem_RawMalloc((size_t)(band_rows * row_floats) * sizeof(float));
    if (!band) {
        scratch_free(&sc);
        PyErr_NoMemory();
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t b = 0; b < g->n; b++) {
        Geometry one = *g;
        one.n = 1;
        const float *image = x + b * g->h * g->w * g->c;
        Py_ssize_t have0 = 0, have1 = 0; /* conv rows in the band, from its row 0 */
        for (Py_ssize_t p0 = 0, p1; p0 < pg->oh; p0 = p1) {
            p1 = p0 + per_band < pg->oh ? p0 + per_band : pg->oh;
            Py_ssize_t r0 = p0 * pg->sh - pg->pt, r1 = (p1 - 1) * pg->sh - pg->pt + pg->kh;
            r0 = r0 < 0 ? 0 : r0 > g->oh ? g->oh : r0;
            r1 = r1 > g->oh ? g->oh : r1 < r0 ? r0 : r1;
            Py_ssize_t from = r0;
            if (have1 > r0 && have0 <= r0) { /* rows [r0, have1) are in the band already */
                from = have1 < r1 ? have1 : r1;
                memmove(band, band + (r0 - have0) * row_floats,
                        (size_t)((from - r0) * row_floats) * sizeof(float));
            }
            if (from < r1) {
                one.row0 = from;
                one.row1 = r1;
                one.out_row = r0;
                run(&one, image, wp, bias, NULL, band, act, lo, hi, sc.rowbuf, sc.rows, sc.tags);
            }
            have0 = r0;
            have1 = r1;
            PoolGeometry p = *pg;
            p.planes = 1;
            p.h = r1 - r0;
            p.w = g->ow;
            p.oh = p1 - p0;
            p.pt = pg->pt - (p0 * pg->sh - r0);
            pool_nhwc_at(level, band, out + (b * pg->oh + p0) * pg->ow * g->m, &p, g->m);
        }
    }
    Py_END_ALLOW_THREADS;
    scratch_free(&sc);
    PyMem_RawFree(band);
    return 0;
}

/* A `spread` held call (its image's buffer in *xb, released here): the residual a
 * C-contiguous float32 array of at most four axes, (N or 1, M or 1, 1, 1) once numpy's
 * broadcasting pads its shape on the left: one value per item and channel, a diffusion
 * UNet's time embedding.  The conv runs without it into a new NCHW output, then each
 * plane gets its value added, one float32 rounding each: numpy's broadcast add after the
 * conv (fusion.ConvChain's), so its bits.  Any other residual goes to the fallback. */
static PyObject *held_spread(Held *self, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames, Py_buffer *xb) {
    const HeldCall *h = &self->call;
    const Geometry *const g = &self->c.g;
    Py_buffer eb;
    if (!onnxviz_array_view(args[h->residual], h->ndarray, &eb, 'f', -1, NULL)) {
        PyBuffer_Release(xb);
        return held_call_other(h, args, nargsf, kwnames);
    }
    Py_ssize_t shape[4] = {1, 1, 1, 1};
    int ok = eb.ndim <= 4;
    for (int i = 0; ok && i < eb.ndim; i++) shape[4 - eb.ndim + i] = eb.shape[i];
    ok = ok && (shape[0] == 1 || shape[0] == g->n) && (shape[1] == 1 || shape[1] == g->m) &&
         shape[2] == 1 && shape[3] == 1;
    if (!ok) {
        PyBuffer_Release(&eb);
        PyBuffer_Release(xb);
        return held_call_other(h, args, nargsf, kwnames);
    }
    float *out_data = NULL;
    PyObject *out = onnxviz_new_aligned(h->empty, h->ndarray, h->u8, h->f32, g->n, g->m, g->oh,
                                        g->ow, 1, &out_data);
    const HeldWeights *hw = &self->weights;
    if (out && call_run(&self->c, xb->buf, hw->wb.buf, held_weights_bias(hw), NULL, out_data,
                        0, NAN, NAN) < 0)
        Py_CLEAR(out);
    if (out) {
        const float *e = eb.buf;
        const Py_ssize_t plane = g->oh * g->ow;
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t b = 0; b < g->n; b++)
            for (Py_ssize_t ch = 0; ch < g->m; ch++) {
                const float v = e[(shape[0] == 1 ? 0 : b) * shape[1] + (shape[1] == 1 ? 0 : ch)];
                float *o = out_data + (b * g->m + ch) * plane;
                for (Py_ssize_t i = 0; i < plane; i++) o[i] = o[i] + v;
            }
        Py_END_ALLOW_THREADS;
    }
    PyBuffer_Release(&eb);
    PyBuffer_Release(xb);
    return out;
}

static PyObject *held_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    Held *self = (Held *)obj;
    const HeldCall *h = &self->call;
    const Geometry *const g = &self->c.g;
    if (self->level != level || !held_call_takes(h, args, nargsf, kwnames)) goto other;
    Py_buffer xb, db;
    const Py_ssize_t planes[4] = {g->n, g->c, g->h, g->w};
    if (g->x_first ? !onnxviz_array_view(args[0], h->ndarray, &xb, 'f', 4, planes)
                   : !onnxviz_channels_last_view(args[0], h->ndarray, &xb, g->n, g->c, g->h,
                                                 g->w))
        goto other;
    const int have_add = h->residual >= 0;
    const Py_ssize_t out_planes[4] = {g->n, g->m, g->oh, g->ow};
    if (self->spread) /* made with a residual, out_first, no activation, no pool */
        return held_spread(self, args, nargsf, kwnames, &xb);
    if (have_add &&
        (g->out_first
             ? !onnxviz_array_view(args[h->residual], h->ndarray, &db, 'f', 4, out_planes)
             : !onnxviz_channels_last_view(args[h->residual], h->ndarray, &db, g->n, g->m,
                                           g->oh, g->ow))) {
        PyBuffer_Release(&xb);
        goto other;
    }
    float *out_data = NULL;
    PyObject *out;
    const HeldWeights *hw = &self->weights;
    if (self->pool) { /* made without a residual */
        out = onnxviz_new_channels_last(h->empty, h->ndarray, h->u8, h->f32, g->n, g->m,
                                        self->pg.oh, self->pg.ow, &out_data);
        if (out && call_run_pooled(&self->c, &self->pg, xb.buf, hw->wb.buf,
                                   held_weights_bias(hw), out_data, self->act, self->lo,
                                   self->hi) < 0)
            Py_CLEAR(out);
        PyBuffer_Release(&xb);
        return out;
    }
    if (have_add && self->inplace && held_residual_is_dead(args[h->residual], h->ndarray)) {
        /* The direct kernel reads each addend float in the epilogue that stores that
         * float's result (or its staged row, copied out after the row's tiles): over
         * the residual, no fresh output to read into cache.  (Not the blocked kernel: it
         * stores partial sums first.) */
        out = Py_NewRef(args[h->residual]);
        out_data = db.buf;
    } else {
        out = onnxviz_new_aligned(h->empty, h->ndarray, h->u8, h->f32, g->n, g->m, g->oh, g->ow,
                                  g->out_first, &out_data);
    }
    if (out && call_run(&self->c, xb.buf, hw->wb.buf, held_weights_bias(hw),
                        have_add ? db.buf : NULL, out_data, self->act, self->lo, self->hi) < 0)
        Py_CLEAR(out);
    if (have_add) PyBuffer_Release(&db);
    PyBuffer_Release(&xb);
    return out;
other:
    return held_call_other(h, args, nargsf, kwnames);
}

static void held_release(Held *self) { held_weights_release(&self->weights); }

HELD_CALL_TYPE(Held, HeldType, held, "onnxviz.runtime.native._conv.Held",
               "A fused direct conv by one packed constant weight (held()).", held_release)

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *wo, *bo, *places, *expect, *fallback, *ndarray, *empty, *u8, *f32;
    Call c;
    memset(&c, 0, sizeof c);
    Geometry *const g = &c.g;
    int blocked, vl, act;
    float lo, hi;
    Py_ssize_t nargs, residual;
    int x_first = 0, inplace = 0, out_first = 0, spread = 0;
    PyObject *pool = Py_None;
    if (!PyArg_ParseTuple(args, "OpiO(nnnn)(nnn)(nn)(nn)(nn)(nn)iffnnOOOOOOO|ppOpp:held", &wo,
                          &blocked, &vl, &bo, &g->n, &g->h, &g->w, &g->c, &g->m, &g->kh,
                          &g->kw, &g->oh, &g->ow, &g->sh, &g->sw, &g->dh, &g->dw, &g->pt,
                          &g->pl, &act, &lo, &hi, &nargs, &residual, &places, &expect,
                          &fallback, &ndarray, &empty, &u8, &f32, &x_first, &inplace, &pool,
                          &out_first, &spread))
        return NULL;
    if (out_first && (blocked || pool != Py_None)) {
        PyErr_SetString(PyExc_ValueError,
                        "held: a channels-first output is the direct kernel's, unpooled");
        return NULL;
    }
    if (spread && (!out_first || residual < 1 || act != 0 || inplace)) {
        PyErr_SetString(PyExc_ValueError,
                        "held: a spread residual needs out_first, a residual, no activation "
                        "and no in-place output");
        return NULL;
    }
    g->out_first = out_first;
    PoolGeometry pg;
    memset(&pg, 0, sizeof pg);
    if (pool != Py_None) {
        if (!PyArg_ParseTuple(pool, "(nn)(nn)(nnnn):held pool", &pg.kh, &pg.kw, &pg.sh, &pg.sw,
                              &pg.pt, &pg.pl, &pg.pb, &pg.pr))
            return NULL;
        const Py_ssize_t span_h = g->oh + pg.pt + pg.pb, span_w = g->ow + pg.pl + pg.pr;
        if (residual >= 0 || span_h < pg.kh || span_w < pg.kw || pg.sh < 1 || pg.sw < 1) {
            PyErr_SetString(PyExc_ValueError,
                            "held: a pool needs no residual and a window inside its padded input");
            return NULL;
        }
        pg.planes = g->n;
        pg.h = g->oh;
        pg.w = g->ow;
        pg.oh = (span_h - pg.kh) / pg.sh + 1;
        pg.ow = (span_w - pg.kw) / pg.sw + 1;
        if (check_geometry(&pg) < 0 || check_channels(&pg, g->m) < 0) return NULL;
    }
    if (x_first && blocked) {
        PyErr_SetString(PyExc_ValueError, "held: the blocked kernel reads channels-last only");
        return NULL;
    }
    c.blocked = blocked;
    g->x_first = x_first;
    if (act < 0 || act > ACT_LAST) {
        PyErr_Format(PyExc_ValueError, "held: activation must be 0..%d", ACT_LAST);
        return NULL;
    }
    if (call_check(&c, vl, "held") < 0) return NULL;
    Held *obj = PyObject_GC_New(Held, &HeldType);
    if (!obj) return NULL;
    obj->vectorcall = held_vectorcall;
    memset(&obj->weights, 0, sizeof obj->weights);
    obj->c = c;
    obj->act = act;
    obj->lo = lo;
    obj->hi = hi;
    obj->level = level;
    /* Not over a channels-first residual: the generic level's plane epilogue stores the
     * sums before it reads the addend at the same place (epilogue_planes). */
    obj->inplace = inplace && !blocked && residual > 0 && !out_first;
    obj->pool = pool != Py_None;
    obj->spread = spread;
    obj->pg = pg;
    if (held_call_init(&obj->call, places, expect, fallback, ndarray, empty, u8, f32, nargs,
                       residual, "held") < 0) {
        PyObject_GC_Del(obj); /* nothing held yet, not tracked */
        return NULL;
    }
    PyObject_GC_Track((PyObject *)obj);
    if (held_weights_take(&obj->weights, wo, c.w_count, bo, g->m) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return (PyObject *)obj;
}

static PyObject *py_lanes(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(lanes_at(level));
}

static PyObject *py_set_level(PyObject *self, PyObject *arg) {
    (void)self;
    return onnxviz_set_level(&level, arg);
}

static PyObject *py_get_level(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(level);
}

static PyMethodDef methods[] = {
    {"conv_nhwc", py_conv_nhwc, METH_VARARGS,
     "conv_nhwc(x, w, bias, addend, out, (n, h, w, c), (m, kh, kw), (oh, ow), (sh, sw), "
     "(dh, dw), (pad_top, pad_left), act, lo, hi, vl, layouts=0): float32 direct conv of "
     "the channels-last x (N, H, W, C) with the packed weight w "
     "[ceil(M/vl)][KH][KW][C][vl], plus bias (M,) and addend (N, OH, OW, M) (each or None), "
     "then activation act (0 none, 1 Relu, 2 Clip(lo, hi), NaN bound: none, 3 HardSwish, "
     "4 SiLU), "
     "into out (N, OH, OW, M).  vl must be lanes().  layouts: bit 0, x is (N, C, H, W); "
     "bit 1, out and addend are (N, M, OH, OW)."},
    {"conv_blocked", py_conv_blocked, METH_VARARGS,
     "conv_blocked(x, w, bias, addend, out, (n, h, w, c), (m, kh, kw), (oh, ow), (sh, sw), "
     "(dh, dw), (pad_top, pad_left), act, lo, hi): conv_nhwc's conv (channels-last x, "
     "addend and out) with the weight packed by groups of 64 output channels and chunks of "
     "16 input channels (nn_conv.pack_blocked): [group][chunk][KH][KW][CC][NV*16]."},
    {"held", py_held, METH_VARARGS,
     "held(w, blocked, vl, bias, (n, h, w, c), (m, kh, kw), (oh, ow), (sh, sw), (dh, dw), "
     "(pad_top, pad_left), act, lo, hi, nargs, residual, places, expect, fallback, ndarray, "
     "empty, uint8, float32, x_first=False, inplace=False, pool=None, out_first=False, "
     "spread=False) -> a "
     "callable: f(*args) = "
     "conv_blocked's "
     "(blocked) or conv_nhwc's conv of args[0] (N, C, H, W), channels-last (or, x_first, "
     "C-contiguous: conv_nhwc's layout bit 0), + args[residual] "
     "(channels-last; residual -1: none), as a new 64-byte aligned channels-last float32 "
     "(N, M, OH, OW) array, when args[places[i]] is expect[i] and the level is the one it "
     "was made at; with `inplace` (the direct kernel; the caller's slot of the residual "
     "dies at the call) written over a residual only the caller and its slot hold, and "
     "returned; with `pool` ((kh, kw), (sh, sw), (top, left, bottom, right) pads; no "
     "residual) the max pool of that output instead, (N, M, OH', OW') channels-last, "
     "computed band by band; with `out_first` (the direct kernel, no pool) the residual and "
     "the output C-contiguous (N, M, OH, OW) instead (conv_nhwc's layout bit 1; never in "
     "place); with `spread` too (no activation) the residual one value per item and "
     "channel, (N or 1, M or 1, 1, 1) as numpy broadcasts it, added to the conv's output "
     "after its kernel; any other call is fallback(*args)."},
    {"lanes", py_lanes, METH_NOARGS,
     "lanes(): the vector width (floats) the weight must be packed for at this level."},
    {"set_level", py_set_level, METH_O,
     "set_level(n): run the level-n code path (0 generic, 1 AVX2, 2-3 AVX-512); "
     "ValueError when this CPU lacks its instructions."},
    {"level", py_get_level, METH_NOARGS, "The level set."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_conv", NULL, -1, methods};

PyMODINIT_FUNC PyInit__conv(void) {
    if (PyType_Ready(&HeldType) < 0) return NULL;
    return PyModule_Create(&module);
}
