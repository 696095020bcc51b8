/* onnxviz.runtime.native._sgemm: float32 GEMM by a constant matrix packed once, with
 * the epilogue of a conv or a linear layer applied before the accumulators are stored.
 *
 * gemm:      C[i, j] = act((accumulate ? C[i, j] : 0) + sum_k A[i, k] B[k, j] + bias[j]
 *                          + addend[i, j])
 * gemm_left: C[i, j] = act((accumulate ? C[i, j] : 0) + sum_k W[i, k] X[k, j] + bias[i]
 *                          + addend[i, j])
 *
 * gemm: A (M x K, rows `lda` floats apart; or, with a_trans, given as its transpose, K x
 * M, rows `lda` apart: an NCHW image's [C, H*W], first copied into rows (run) or tile by
 * tile into the same k-interleaved buffer, so the sums and bits are those of A as it
 * is) is the activation,
 * read where it lies (a
 * channels-last image is the row-major [N*H*W, C] operand of a 1x1 conv, a BERT
 * activation the [tokens, hidden] one); B (K x N), the weight, is packed once (`pack`)
 * into column panels of NR floats (the micro-kernel's width: 32 at AVX-512, 16
 * otherwise; the last panel zero-padded), each K rows of NR consecutive floats from a
 * 64-byte boundary.  gemm_left: the weight W (M x K) on the left, packed once
 * (`pack_rows`) into micro-panels of MR rows, by an image X (K x N, rows `ldb` apart):
 * an NCHW 1x1 conv, bias per output channel.  addend (M x N, rows `ldadd` apart) and
 * bias may be None; activations: 0 none, 1 Relu, 2 Clip(lo, hi) (a NaN bound: none),
 * 3 HardSwish (activations.h: the numpy kernel's operations in its order), 4 SiLU (y *
 * sigmoid(y), the Sigmoid kernel's sigmoid).
 *
 * Why not OpenBLAS: it packs both operands on every call (13% of ResNet-50's time in a
 * profile, the constant weight's copy included), and the bias, residual and Relu are
 * separate passes over C (~8%).  Here the weight is packed once, and gemm reads A in
 * place where OpenBLAS copies it.
 *
 * gemm's loops (BLIS's order, with the operands' roles swapped because our vectors run
 * along N): for each block of NC columns of B, for each block of KC rows of it (the
 * weight block, KC x NC floats, about 512 KB, stays in L2), for each MR rows of A, for
 * each panel of the block: the micro-kernel, MR x NR accumulators in registers over the
 * KC rows, broadcasting A's values.  At AVX-512 the MR rows of A are read where they lie
 * (their MR x KC floats mostly from L1 across the panels; rows 4 KB apart are first
 * copied to a padded stride, pads_a's comment); at the lower levels, and for a_trans, they are first copied, zero-padded to
 * MR rows, into a k-interleaved buffer.  Only the last K block
 * applies bias, addend and activation; earlier ones store partial sums that the next
 * block reloads.  At AVX-512 an edge tile runs only its rows (1..11); at the lower
 * levels edge rows are computed on the copy's zero rows and not stored.  Edge columns
 * run on the panel's zero padding and are stored with a mask.  gemm_left: run_left's comment.
 *
 * The numbers: every level sums the K products in order within a K block, in float32
 * (the SIMD levels with fused multiply-adds, the generic one with a multiply and an
 * add), adds the blocks' sums in order, then the bias, then the addend.  Levels differ
 * from one another and from OpenBLAS by rounding only: |C - exact| <= gamma(K + 3) (sum_k
 * |A B| + |C| + |bias| + |addend|), gamma(m) = m u / (1 - m u), u = 2^-24 (tests check it
 * against a float64 reference).  NaN and Inf propagate as in any sum (a padding zero
 * times a NaN lands only in a row or column that is never stored).
 *
 * Levels: 0 generic C (MR 4 x NR 16, the compiler's baseline vectorization), 1 AVX2+FMA
 * (6 x 16: 12 ymm accumulators), 2 and 3 AVX-512F (12 x 32: 24 zmm accumulators).  Each
 * function carries its instruction set as a target attribute (no -march).  One thread:
 * kernels/packed_gemm.py routes products here only when OpenBLAS runs on one too. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "levels.h"
#include "held_call.h"
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* the generic level: a multiply and an add, as documented */
#endif

#if ONNXVIZ_X86
#include <immintrin.h>

#include "avx2_lanes.h"
#endif
#include "activations.h"

static int level = 0;

/* gemm's rows of B per block and columns of B per block, 0: by level.  At AVX2, KC 1024
 * x NC 256 (A's MR x KC floats in L1; the 1 MB weight block streams from L3 at the
 * kernel's pace).  First tuned on a Cascade Lake at KC 512 (1 MB L2; on that machine
 * the AVX2 level ran 5-6% slower at the AVX-512 values); on a Zen 3 core (512 KB L2),
 * where the AVX2 level runs in the field, KC 1024 measured (1 thread, sums of per-node
 * minima, same run): GPT-2 2x768 with 8 new tokens 7.36 -> 6.86 ms, its dynamo export
 * with 16 18.70 -> 17.75, BERT-base, ResNet-50, Inception v2 within 0.4%, ViT-tiny +1%
 * (NC 128 at KC 1024 lost 1-2% on ResNet-50 and ViT); alone, BERT's and ResNet-50's
 * 1x1 products 36.6 -> 35.0 ms.  The generic level keeps KC 512.  At AVX-512, KC 1024 and as many columns as make the block
 * about BLOCK_FLOATS (512 KB): on this Sapphire Rapids (2 MB L2, 48 KB L1) that beat
 * KC 512 x NC 256 (1 thread, same run, us): 128x768x768 978 -> 931, 128x768x3072 4347 -> 4059,
 * 128x768x2304 3168 -> 3020, 256x768x768 1923 -> 1842, 2048^3 114428 -> 108902 (fewer
 * K blocks: C reloaded less, B's panel streamed longer); whole BERT-base 180 -> 173 ms,
 * ResNet-50 68.5 -> 67.7.  A fixed NC of 128 at KC 1024 lost on small K (3136x64x256
 * 811 -> 885: A re-read per column block), NC 256 gained less on K = 3072; KC 256/384 x
 * NC 256-1024 and KC 128 x NC 1024 lost 2-10%.  set_blocking changes them (benchmarks). */
static Py_ssize_t KC = 0, NC = 0;
/* The K block of gemm at the level set: KC, else 1024 from AVX2 up, 512 at plain C. */
static Py_ssize_t kc_max(void) { return KC > 0 ? KC : level >= 1 ? 1024 : 512; }
enum { BLOCK_FLOATS = 512 * 256 };
/* How A is read at AVX-512: 0 copied, 1 in place, 2 in place unless 4K-aliased (run). */
static int INPLACE = 1;
/* gemm_left's rows of B per block (run_left). */
static Py_ssize_t KCL = 128;

static int panel_width_of(int lvl) { return lvl >= 2 ? 32 : 16; }
static int rows_of(int lvl) { return lvl >= 2 ? 12 : lvl == 1 ? 6 : 4; }

/* What one micro-kernel call needs.  a: the A micro-panel, packed (kc groups of MR
 * floats) or, for the in-place tiles, A itself (rows lda apart); b: the packed B panel
 * (kc rows of NR floats) at the block's first row; c, add: at the tile's top-left. */
typedef struct {
    const float *a, *b;
    Py_ssize_t kc, lda;
    float *c;
    Py_ssize_t ldc;
    int rows, cols; /* valid rows (<= MR) and columns (<= NR) of this tile */
    int load_c;     /* start from C (an earlier K block, or accumulate) */
    int last;       /* the last K block: apply the epilogue */
    int stream;     /* the first tile to read this block of B: prefetch it (see PF_ROWS) */
    const float *bias;     /* at the tile's first column, or NULL */
    const float *row_bias; /* at the tile's first row, or NULL (gemm_left: per channel) */
    const float *add;
    Py_ssize_t ldadd;
    int act;
    float lo, hi;
} Tile;

/* ---- generic C: MR 4 x NR 16 ----------------------------------------------------------- */

static void tile_generic(const Tile *t) {
    enum { MR = 4, NR = 16 };
    float acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = 0.0f;
    /* Unrolled so that GCC packs each row's 16 sums into vectors: left to itself it
     * vectorized across rows with a transposing shuffle per step (1.4 GF/s on a Sapphire
     * Rapids core, 128x768x768 46.3 ms; unrolled 6.5 ms). */
    for (Py_ssize_t k = 0; k < t->kc; k++) {
        const float *b = t->b + k * NR, *a = t->a + k * MR;
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            const float ai = a[i];
#pragma GCC unroll 16
            for (int j = 0; j < NR; j++) {
                float p = ai * b[j];
                acc[i][j] = acc[i][j] + p;
            }
        }
    }
    for (int i = 0; i < t->rows; i++) {
        float *c = t->c + i * t->ldc;
        const float *add = t->add ? t->add + i * t->ldadd : NULL;
        for (int j = 0; j < t->cols; j++) {
            float y = acc[i][j];
            if (t->load_c) y = c[j] + y;
            if (t->last) {
                if (t->bias) y = y + t->bias[j];
                if (t->row_bias) y = y + t->row_bias[i];
                if (add) y = y + add[j];
                y = act_scalar(y, t->act, t->lo, t->hi);
            }
            c[j] = y;
        }
    }
}

#if ONNXVIZ_X86
/* Rows of the B panel ahead of the one multiplied that the first tile of a block asks
 * the L2 for (4 KB ahead at AVX-512, its 32-float rows; the AVX2 tiles ask for twice as
 * many of their 16-float rows, so 4 KB as well).  A product of few rows of A is bound by
 * reading the weight from memory, one sequential stream per tile, which the hardware
 * prefetcher alone served at 7.5 GB/s on a Sapphire Rapids core, where OpenBLAS's
 * matrix-vector product reads at 15: with the prefetch, 768 x 3072 weights from memory
 * took 0.65x the time at 1 and 8 rows, 0.70x at 16, 0.75x at 32 (benchmarks/
 * bench_packed_gemm.py --shapes cold).  The later tiles of the block find it in L2
 * and skip it (it cost them 1-2%). */
enum { PF_ROWS = 32 };

/* ---- AVX2 + FMA: MR 6 x NR 16 (two ymm per row) ------------------------------------------ */

/* NV: as tile_avx512_body's (1 for an edge panel of at most 8 columns).  R: the rows
 * multiplied (6, or 3-5 for a product of that many rows: A read in place, the rows past
 * R not run as zero rows; an array of accumulators instead of the named ones below was
 * kept in memory by GCC and took 1.4-1.7x the six-row time). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
tile_avx2_body(const Tile *t, const int STREAM, const int NV, const int INPLACE, const int R) {
    enum { MR = 6 };
    /* Twelve named accumulators, not arrays: with c0[MR], c1[MR] (which the epilogue
     * reads by row) GCC kept the arrays in memory and stored all twelve on every k step
     * (this level ran at 38 GF/s on a Sapphire Rapids core). */
    __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0;
    __m256 q0 = p0, q1 = p0, q2 = p0, q3 = p0, q4 = p0, q5 = p0;
    /* INPLACE: A's 6 rows lda apart, as tile_avx2_full's */
    const float *a = t->a, *b = t->b;
    const Py_ssize_t kc = t->kc, step = INPLACE ? 1 : MR, ld = INPLACE ? t->lda : 1;
    /* Unrolled by 8: a k step is 12 FMAs on 8 loads and the loop's own 4-5 instructions,
     * and on a busy host (a core's other hardware thread at work) the front end, not the
     * FMA ports, bounds it, most on short K (_conv.c's sums8 says more).  Zen 3, packed
     * products alternated old / new: 3136x64x64 0.71-0.75 of the time, 784x128x512 0.88,
     * 128x3072x768 0.88, 128x768x768 0.95, 49x512x2048 1.00; the same sums. */
#pragma GCC unroll 8
    for (Py_ssize_t k = 0; k < kc; k++, a += step, b += 16) {
        if (STREAM) _mm_prefetch((const char *)(b + 2 * PF_ROWS * 16), _MM_HINT_T1);
        const __m256 b0 = _mm256_loadu_ps(b), b1 = NV == 2 ? _mm256_loadu_ps(b + 8) : b0;
#define AVX2_ROW(i)                                                                          \
    if ((i) < R) {                                                                           \
        const __m256 ai = _mm256_broadcast_ss(a + (i) * ld);                                 \
        p##i = _mm256_fmadd_ps(ai, b0, p##i);                                                \
        if (NV == 2) q##i = _mm256_fmadd_ps(ai, b1, q##i);                                   \
    }
        AVX2_ROW(0)
        AVX2_ROW(1)
        AVX2_ROW(2)
        AVX2_ROW(3)
        AVX2_ROW(4)
        AVX2_ROW(5)
#undef AVX2_ROW
    }
    const __m256 c0[MR] = {p0, p1, p2, p3, p4, p5}, c1[MR] = {q0, q1, q2, q3, q4, q5};
    const __m256i m0 = mask8(t->cols), m1 = mask8(t->cols - 8);
    for (int i = 0; i < MR; i++) {
        if (i >= t->rows) break;
        float *c = t->c + i * t->ldc;
        __m256 y0 = c0[i], y1 = c1[i];
        if (t->load_c) {
            y0 = _mm256_add_ps(_mm256_maskload_ps(c, m0), y0);
            if (NV == 2) y1 = _mm256_add_ps(_mm256_maskload_ps(c + 8, m1), y1);
        }
        if (t->last) {
            if (t->bias) {
                y0 = _mm256_add_ps(y0, _mm256_maskload_ps(t->bias, m0));
                if (NV == 2) y1 = _mm256_add_ps(y1, _mm256_maskload_ps(t->bias + 8, m1));
            }
            if (t->row_bias) {
                const __m256 r = _mm256_broadcast_ss(t->row_bias + i);
                y0 = _mm256_add_ps(y0, r);
                if (NV == 2) y1 = _mm256_add_ps(y1, r);
            }
            if (t->add) {
                const float *d = t->add + i * t->ldadd;
                y0 = _mm256_add_ps(y0, _mm256_maskload_ps(d, m0));
                if (NV == 2) y1 = _mm256_add_ps(y1, _mm256_maskload_ps(d + 8, m1));
            }
            y0 = act8(y0, t->act, t->lo, t->hi);
            if (NV == 2) y1 = act8(y1, t->act, t->lo, t->hi);
        }
        store8n(c, y0, t->cols);
        if (NV == 2) store8n(c + 8, y1, t->cols - 8);
    }
}

/* A whole 6 x 16 tile of the last K block starting from zero (tile_avx512_full's case at
 * AVX2): bias, addend and activation known at compile time, no masks.  The same
 * operations as the epilogue above, so the same bits. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
tile_avx2_full(const Tile *t, const int STREAM, const int BIAS, const int ADD, const int ACT,
               const int INPLACE) {
    enum { MR = 6 };
    __m256 p0 = _mm256_setzero_ps(), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0;
    __m256 q0 = p0, q1 = p0, q2 = p0, q3 = p0, q4 = p0, q5 = p0;
    /* INPLACE: A's 6 rows where they lie, lda apart (no copy of the micro-panel: for a
     * narrow weight, as a MobileNet's 1x1 convs to 16-96 channels, the copy cost about
     * what the products did); else the packed copy, k groups of MR floats.  The same
     * products in the same order either way. */
    const float *a = t->a, *b = t->b;
    const Py_ssize_t kc = t->kc, step = INPLACE ? 1 : MR, ld = INPLACE ? t->lda : 1;
#pragma GCC unroll 8 /* as tile_avx2_body's */
    for (Py_ssize_t k = 0; k < kc; k++, a += step, b += 16) {
        if (STREAM) _mm_prefetch((const char *)(b + 2 * PF_ROWS * 16), _MM_HINT_T1);
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#define AVX2_ROW(i)                                                                          \
    {                                                                                        \
        const __m256 ai = _mm256_broadcast_ss(a + (i) * ld);                                 \
        p##i = _mm256_fmadd_ps(ai, b0, p##i);                                                \
        q##i = _mm256_fmadd_ps(ai, b1, q##i);                                                \
    }
        AVX2_ROW(0)
        AVX2_ROW(1)
        AVX2_ROW(2)
        AVX2_ROW(3)
        AVX2_ROW(4)
        AVX2_ROW(5)
#undef AVX2_ROW
    }
    const __m256 bias0 = BIAS ? _mm256_loadu_ps(t->bias) : _mm256_setzero_ps();
    const __m256 bias1 = BIAS ? _mm256_loadu_ps(t->bias + 8) : _mm256_setzero_ps();
    const float lo = t->lo, hi = t->hi;
#define AVX2_STORE(i)                                                                        \
    {                                                                                        \
        __m256 y0 = p##i, y1 = q##i;                                                         \
        if (BIAS) {                                                                          \
            y0 = _mm256_add_ps(y0, bias0);                                                   \
            y1 = _mm256_add_ps(y1, bias1);                                                   \
        }                                                                                    \
        if (ADD) {                                                                           \
            const float *d = t->add + (i) * t->ldadd;                                        \
            y0 = _mm256_add_ps(y0, _mm256_loadu_ps(d));                                      \
            y1 = _mm256_add_ps(y1, _mm256_loadu_ps(d + 8));                                  \
        }                                                                                    \
        float *c = t->c + (i) * t->ldc;                                                      \
        _mm256_storeu_ps(c, act8(y0, ACT, lo, hi));                                          \
        _mm256_storeu_ps(c + 8, act8(y1, ACT, lo, hi));                                      \
    }
    AVX2_STORE(0)
    AVX2_STORE(1)
    AVX2_STORE(2)
    AVX2_STORE(3)
    AVX2_STORE(4)
    AVX2_STORE(5)
#undef AVX2_STORE
}

#define AVX2_FULL(S, B, A)                                                                   \
    __attribute__((target("avx2,fma"))) static void tile_avx2_full_##S##B##A(const Tile *t) { \
        switch (t->act) {                                                                    \
        case 1: tile_avx2_full(t, S, B, A, 1, 0); break;                                     \
        case 2: tile_avx2_full(t, S, B, A, 2, 0); break;                                     \
        case 3: tile_avx2_full(t, S, B, A, 3, 0); break;                                     \
        case 4: tile_avx2_full(t, S, B, A, 4, 0); break;                                     \
        default: tile_avx2_full(t, S, B, A, 0, 0); break;                                    \
        }                                                                                    \
    }                                                                                        \
    __attribute__((target("avx2,fma"))) static void tile_avx2_full_in_##S##B##A(             \
        const Tile *t) {                                                                     \
        switch (t->act) {                                                                    \
        case 1: tile_avx2_full(t, S, B, A, 1, 1); break;                                     \
        case 2: tile_avx2_full(t, S, B, A, 2, 1); break;                                     \
        case 3: tile_avx2_full(t, S, B, A, 3, 1); break;                                     \
        case 4: tile_avx2_full(t, S, B, A, 4, 1); break;                                     \
        default: tile_avx2_full(t, S, B, A, 0, 1); break;                                    \
        }                                                                                    \
    }
AVX2_FULL(0, 0, 0)
AVX2_FULL(0, 0, 1)
AVX2_FULL(0, 1, 0)
AVX2_FULL(0, 1, 1)
AVX2_FULL(1, 0, 0)
AVX2_FULL(1, 0, 1)
AVX2_FULL(1, 1, 0)
AVX2_FULL(1, 1, 1)
#undef AVX2_FULL
/* By stream, bias, addend. */
static void (*const tile_avx2_fulls[8])(const Tile *) = {
    tile_avx2_full_000, tile_avx2_full_001, tile_avx2_full_010, tile_avx2_full_011,
    tile_avx2_full_100, tile_avx2_full_101, tile_avx2_full_110, tile_avx2_full_111,
};
/* The same, A read in place (rows lda apart). */
static void (*const tile_avx2_fulls_in[8])(const Tile *) = {
    tile_avx2_full_in_000, tile_avx2_full_in_001, tile_avx2_full_in_010, tile_avx2_full_in_011,
    tile_avx2_full_in_100, tile_avx2_full_in_101, tile_avx2_full_in_110, tile_avx2_full_in_111,
};

__attribute__((target("avx2,fma"), always_inline)) static inline void
tile_avx2_at(const Tile *t, const int INPLACE, const int R) {
    if (t->cols <= 8) {
        if (t->stream)
            tile_avx2_body(t, 1, 1, INPLACE, R);
        else
            tile_avx2_body(t, 0, 1, INPLACE, R);
    } else if (t->stream)
        tile_avx2_body(t, 1, 2, INPLACE, R);
    else
        tile_avx2_body(t, 0, 2, INPLACE, R);
}

__attribute__((target("avx2,fma"))) static void tile_avx2(const Tile *t) {
    tile_avx2_at(t, 0, 6);
}

/* tile_avx2 with A's 6 rows read in place (rows lda apart; whole row blocks only). */
__attribute__((target("avx2,fma"))) static void tile_avx2_in(const Tile *t) {
    tile_avx2_at(t, 1, 6);
}

/* A product's last 3-5 rows read in place by a tile of only those rows: run as six (A
 * packed with zero rows), 4 x 256 x 1024 took as long as 6 x 256 x 1024 and 1.1x longer
 * than it in all (the copy).  Same sums in the same order, so the same bits. */
__attribute__((target("avx2,fma"))) static void tile_avx2_in3(const Tile *t) {
    tile_avx2_at(t, 1, 3);
}
__attribute__((target("avx2,fma"))) static void tile_avx2_in4(const Tile *t) {
    tile_avx2_at(t, 1, 4);
}
__attribute__((target("avx2,fma"))) static void tile_avx2_in5(const Tile *t) {
    tile_avx2_at(t, 1, 5);
}

/* One or two rows of A read in place against P whole panels of 16 columns: the 6-row
 * tile ran one row as six (A packed with zero rows) on two accumulator chains.  As
 * tile_avx512_wide_body (which see): each column's sum in the same order as the 6-row
 * tile's, so the same bits. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
tile_avx2_wide_body(const Tile *t, Py_ssize_t panel_stride, const int R, const int P) {
    /* Named accumulators (x<row><panel><half>), not an array: GCC kept an acc[R][P][2]
     * array in memory, a load and a store around every multiply-add (Zen 4 at this
     * level, us: 1 x 256 x 1024 27.5 that way, 21.5 now; 2 rows 34.5, 22.8). */
    const __m256 z = _mm256_setzero_ps();
    __m256 x000 = z, x001 = z, x010 = z, x011 = z, x020 = z, x021 = z, x030 = z, x031 = z;
    __m256 x100 = z, x101 = z, x110 = z, x111 = z;
    const float *a = t->a, *b = t->b;
    const Py_ssize_t lda = t->lda, kc = t->kc;
    const int stream = t->stream;
    /* The prefetch runs 2 PF_ROWS rows ahead; over the block's last rows it asks for the
     * first rows of the next group of P panels (the caller's next call, the same K
     * block), which otherwise started cold from memory every group: a decode step's
     * 1 x 768 x 3072 product runs 48 groups of 768 rows.  (Past the weight's end it asks
     * for nothing that exists: a prefetch does not fault.) */
    const Py_ssize_t ahead = 2 * PF_ROWS, turn = kc > ahead ? kc - ahead : 0;
    const float *next = t->b + (Py_ssize_t)P * panel_stride - (kc - ahead) * 16;
#define WIDE_FMA(i, q, A)                                                                    \
    x##i##q##0 = _mm256_fmadd_ps(A, b##q##0, x##i##q##0);                                    \
    x##i##q##1 = _mm256_fmadd_ps(A, b##q##1, x##i##q##1);
#define WIDE_STEP(PF)                                                                        \
    {                                                                                        \
        if (stream)                                                                          \
            for (int q = 0; q < P; q++)                                                      \
                _mm_prefetch((const char *)((PF) + q * panel_stride), _MM_HINT_T1);          \
        const __m256 b00 = _mm256_loadu_ps(b), b01 = _mm256_loadu_ps(b + 8);                 \
        const __m256 b10 = P > 1 ? _mm256_loadu_ps(b + panel_stride) : z;                    \
        const __m256 b11 = P > 1 ? _mm256_loadu_ps(b + panel_stride + 8) : z;                \
        const __m256 b20 = P > 2 ? _mm256_loadu_ps(b + 2 * panel_stride) : z;                \
        const __m256 b21 = P > 2 ? _mm256_loadu_ps(b + 2 * panel_stride + 8) : z;            \
        const __m256 b30 = P > 3 ? _mm256_loadu_ps(b + 3 * panel_stride) : z;                \
        const __m256 b31 = P > 3 ? _mm256_loadu_ps(b + 3 * panel_stride + 8) : z;            \
        const __m256 a0 = _mm256_broadcast_ss(a + k);                                        \
        WIDE_FMA(0, 0, a0)                                                                   \
        if (P > 1) { WIDE_FMA(0, 1, a0) }                                                    \
        if (P > 2) { WIDE_FMA(0, 2, a0) }                                                    \
        if (P > 3) { WIDE_FMA(0, 3, a0) }                                                    \
        if (R > 1) {                                                                         \
            const __m256 a1 = _mm256_broadcast_ss(a + lda + k);                              \
            WIDE_FMA(1, 0, a1)                                                               \
            if (P > 1) { WIDE_FMA(1, 1, a1) }                                                \
        }                                                                                    \
    }
    Py_ssize_t k = 0;
    for (; k < turn; k++, b += 16) WIDE_STEP(b + ahead * 16)
    for (; k < kc; k++, b += 16) WIDE_STEP(next + k * 16)
#undef WIDE_STEP
#undef WIDE_FMA
    const __m256 acc[2][4][2] = {
        {{x000, x001}, {x010, x011}, {x020, x021}, {x030, x031}},
        {{x100, x101}, {x110, x111}, {z, z}, {z, z}},
    };
    const float *const add = t->last ? t->add : NULL;
    const float *const bias = t->last ? t->bias : NULL;
    for (int i = 0; i < R; i++) {
        float *const ci = t->c + i * t->ldc;
        for (int q = 0; q < P; q++) {
            for (int v = 0; v < 2; v++) {
                const Py_ssize_t col = q * 16 + v * 8;
                __m256 y = acc[i][q][v];
                if (t->load_c) y = _mm256_add_ps(_mm256_loadu_ps(ci + col), y);
                if (t->last) {
                    if (bias) y = _mm256_add_ps(y, _mm256_loadu_ps(bias + col));
                    if (add) y = _mm256_add_ps(y, _mm256_loadu_ps(add + i * t->ldadd + col));
                    y = act8(y, t->act, t->lo, t->hi);
                }
                _mm256_storeu_ps(ci + col, y);
            }
        }
    }
}

__attribute__((target("avx2,fma"))) static void tile_avx2_wide(const Tile *t,
                                                               Py_ssize_t panel_stride) {
    if (t->rows == 1)
        tile_avx2_wide_body(t, panel_stride, 1, 4);
    else
        tile_avx2_wide_body(t, panel_stride, 2, 2);
}

/* ---- AVX-512F: MR 12 x NR 32 (two zmm per row) ------------------------------------------- */

static inline __mmask16 mask16(int n) {
    return (__mmask16)(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1u);
}

/* A whole 12 x 32 tile of A read in place whose K is one block (no partial sums to load
 * or store), with the bias, addend and activation known at compile time: most tiles of
 * a 1x1 conv or a linear layer.  tile_avx512_body's general epilogue (masks, per-row
 * tests, every case in one function) made the compiler keep the accumulators on the
 * stack and clear them with a string store per tile: at K = 64 (ResNet-50's 1x1 convs
 * at 56 px) that cost about a quarter of the multiply-adds' time.  The same operations
 * in the same order as that epilogue, so the same bits. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_avx512_full(const Tile *t, const int STREAM, const int BIAS, const int ADD, const int ACT) {
    __m512 c0[12], c1[12];
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    const float *a = t->a, *b = t->b;
    const Py_ssize_t lda = t->lda, kc = t->kc;
    for (Py_ssize_t k = 0; k < kc; k++, b += 32) {
        if (STREAM) {
            _mm_prefetch((const char *)(b + PF_ROWS * 32), _MM_HINT_T1);
            _mm_prefetch((const char *)(b + PF_ROWS * 32 + 16), _MM_HINT_T1);
        }
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) {
            const __m512 ai = _mm512_set1_ps(a[i * lda + k]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
    }
    float *const c = t->c;
    const Py_ssize_t ldc = t->ldc, ldadd = t->ldadd;
    const float *const add = t->add;
    const __m512 bias0 = BIAS ? _mm512_loadu_ps(t->bias) : _mm512_setzero_ps();
    const __m512 bias1 = BIAS ? _mm512_loadu_ps(t->bias + 16) : _mm512_setzero_ps();
    const float lo = t->lo, hi = t->hi;
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
        __m512 y0 = c0[i], y1 = c1[i];
        if (BIAS) {
            y0 = _mm512_add_ps(y0, bias0);
            y1 = _mm512_add_ps(y1, bias1);
        }
        if (ADD) {
            y0 = _mm512_add_ps(y0, _mm512_loadu_ps(add + i * ldadd));
            y1 = _mm512_add_ps(y1, _mm512_loadu_ps(add + i * ldadd + 16));
        }
        y0 = act16(y0, ACT, lo, hi);
        y1 = act16(y1, ACT, lo, hi);
        _mm512_storeu_ps(c + i * ldc, y0);
        _mm512_storeu_ps(c + i * ldc + 16, y1);
    }
}

#define FULL_TILE(S, B, A)                                                                   \
    __attribute__((target("avx512f"))) static void tile_avx512_full_##S##B##A(const Tile *t) { \
        switch (t->act) {                                                                    \
        case 1: tile_avx512_full(t, S, B, A, 1); break;                                      \
        case 2: tile_avx512_full(t, S, B, A, 2); break;                                      \
        case 3: tile_avx512_full(t, S, B, A, 3); break;                                      \
        case 4: tile_avx512_full(t, S, B, A, 4); break;                                      \
        default: tile_avx512_full(t, S, B, A, 0); break;                                     \
        }                                                                                    \
    }
FULL_TILE(0, 0, 0)
FULL_TILE(0, 0, 1)
FULL_TILE(0, 1, 0)
FULL_TILE(0, 1, 1)
FULL_TILE(1, 0, 0)
FULL_TILE(1, 0, 1)
FULL_TILE(1, 1, 0)
FULL_TILE(1, 1, 1)
#undef FULL_TILE
/* By stream, bias, addend (tile_avx512_full_tile picks). */
static void (*const tile_avx512_fulls[8])(const Tile *) = {
    tile_avx512_full_000, tile_avx512_full_001, tile_avx512_full_010, tile_avx512_full_011,
    tile_avx512_full_100, tile_avx512_full_101, tile_avx512_full_110, tile_avx512_full_111,
};

/* IN_PLACE: A read where it lies (rows t->lda apart) instead of from the packed buffer.
 * NV: the vectors of the panel to compute, 2, or 1 for an edge panel of at most 16
 * columns (its other half is padding: N = 40, 48 or 240 spent a quarter of a layer's
 * multiply-adds on it).  Each column's sum is the same either way. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_avx512_body(const Tile *t, const int IN_PLACE, const int STREAM, const int NV,
                 const int ROWS) {
    enum { MR = 12 };
    __m512 c0[MR], c1[MR];
    for (int i = 0; i < ROWS; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    const float *a = t->a, *b = t->b;
    const Py_ssize_t lda = t->lda, kc = t->kc;
    for (Py_ssize_t k = 0; k < kc; k++, b += 32) {
        if (STREAM) {
            _mm_prefetch((const char *)(b + PF_ROWS * 32), _MM_HINT_T1);
            if (NV == 2) _mm_prefetch((const char *)(b + PF_ROWS * 32 + 16), _MM_HINT_T1);
        }
        const __m512 b0 = _mm512_loadu_ps(b), b1 = NV == 2 ? _mm512_loadu_ps(b + 16) : b0;
        for (int i = 0; i < ROWS; i++) {
            const __m512 ai = _mm512_set1_ps(IN_PLACE ? a[i * lda + k] : a[k * MR + i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            if (NV == 2) c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
    }
    /* The epilogue from locals (the bias's vectors loaded once), unrolled over the rows
     * when the tile has all ROWS: read through `t`, every field was loaded again per row
     * after each store to C (which may alias it, as far as the compiler knows).  On a
     * Sapphire Rapids core, same bits, same run (us, before / after): ResNet-50's 1x1
     * convs with bias, residual and Relu 3136x64x256 869 / 825, 784x128x512 706 / 689,
     * without the residual 3136x64x256 754 / 743; the longer K's within 1%. */
    const __mmask16 m0 = mask16(t->cols), m1 = mask16(t->cols - 16);
    const int rows = t->rows, load_c = t->load_c, last = t->last, act = t->act;
    const float lo = t->lo, hi = t->hi;
    float *const c = t->c;
    const Py_ssize_t ldc = t->ldc, ldadd = t->ldadd;
    const float *const add = last ? t->add : NULL, *const row_bias = last ? t->row_bias : NULL;
    const int have_bias = last && t->bias;
    const __m512 zero = _mm512_setzero_ps();
    const __m512 bias0 = have_bias ? _mm512_maskz_loadu_ps(m0, t->bias) : zero;
    const __m512 bias1 = have_bias && NV == 2 ? _mm512_maskz_loadu_ps(m1, t->bias + 16) : zero;
#define EPILOGUE_ROW(i)                                                                      \
    {                                                                                        \
        float *const ci = c + (i) * ldc;                                                     \
        __m512 y0 = c0[i], y1 = c1[i];                                                       \
        if (load_c) {                                                                        \
            y0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), y0);                           \
            if (NV == 2) y1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), y1);         \
        }                                                                                    \
        if (last) {                                                                          \
            if (have_bias) {                                                                 \
                y0 = _mm512_add_ps(y0, bias0);                                               \
                if (NV == 2) y1 = _mm512_add_ps(y1, bias1);                                  \
            }                                                                                \
            if (row_bias) {                                                                  \
                const __m512 r = _mm512_set1_ps(row_bias[i]);                                \
                y0 = _mm512_add_ps(y0, r);                                                   \
                if (NV == 2) y1 = _mm512_add_ps(y1, r);                                      \
            }                                                                                \
            if (add) {                                                                       \
                const float *d = add + (i) * ldadd;                                          \
                y0 = _mm512_add_ps(y0, _mm512_maskz_loadu_ps(m0, d));                        \
                if (NV == 2) y1 = _mm512_add_ps(y1, _mm512_maskz_loadu_ps(m1, d + 16));      \
            }                                                                                \
            y0 = act16(y0, act, lo, hi);                                                     \
            if (NV == 2) y1 = act16(y1, act, lo, hi);                                        \
        }                                                                                    \
        _mm512_mask_storeu_ps(ci, m0, y0);                                                   \
        if (NV == 2) _mm512_mask_storeu_ps(ci + 16, m1, y1);                                 \
    }
    if (rows == ROWS) { /* every tile of gemm (its tiles dispatch on their rows) */
#pragma GCC unroll 12
        for (int i = 0; i < ROWS; i++) EPILOGUE_ROW(i)
    } else { /* gemm_left's edge tiles: the 12-row kernel on fewer rows */
        for (int i = 0; i < rows && i < ROWS; i++) EPILOGUE_ROW(i)
    }
#undef EPILOGUE_ROW
}

/* ROWS rows of A (1..12), read in place or from the packed buffer (zero-padded to 12
 * rows): an edge tile of fewer than 12 rows runs only those (BERT's 128 tokens end on 8
 * rows, ResNet-50's 3136, 784 and 196 pixels on 4, its 49 on 1: that tile had cost as
 * much as a full one, a fifth of the 49-row products' multiply-adds spent on zero rows). */
#define TILE_BODY(KIND, IN_PLACE, STREAM, NV, R)                                             \
    __attribute__((target("avx512f"), noinline)) static void                                 \
        tile_avx512_##KIND##_##R##_##STREAM##NV(const Tile *t) {                             \
        tile_avx512_body(t, IN_PLACE, STREAM, NV, R);                                        \
    }
/* Each form its own function: four inlined into one made functions of 30 KB that took
 * gcc most of this file's compile time. */
#define TILE_ROWS(R)                                                                         \
    TILE_BODY(inplace, 1, 1, 1, R) TILE_BODY(inplace, 1, 0, 1, R)                           \
    TILE_BODY(inplace, 1, 1, 2, R) TILE_BODY(inplace, 1, 0, 2, R)                           \
    TILE_BODY(packed, 0, 1, 1, R) TILE_BODY(packed, 0, 0, 1, R)                             \
    TILE_BODY(packed, 0, 1, 2, R) TILE_BODY(packed, 0, 0, 2, R)                             \
    __attribute__((target("avx512f"))) static void tile_avx512_inplace_##R(const Tile *t) { \
        if (t->cols <= 16) {                                                                 \
            if (t->stream)                                                                   \
                tile_avx512_inplace_##R##_11(t);                                             \
            else                                                                             \
                tile_avx512_inplace_##R##_01(t);                                             \
        } else if (t->stream)                                                                \
            tile_avx512_inplace_##R##_12(t);                                                 \
        else                                                                                 \
            tile_avx512_inplace_##R##_02(t);                                                 \
    }                                                                                        \
    __attribute__((target("avx512f"))) static void tile_avx512_packed_##R(const Tile *t) {  \
        if (t->cols <= 16) {                                                                 \
            if (t->stream)                                                                   \
                tile_avx512_packed_##R##_11(t);                                              \
            else                                                                             \
                tile_avx512_packed_##R##_01(t);                                              \
        } else if (t->stream)                                                                \
            tile_avx512_packed_##R##_12(t);                                                  \
        else                                                                                 \
            tile_avx512_packed_##R##_02(t);                                                  \
    }
TILE_ROWS(1)
TILE_ROWS(2)
TILE_ROWS(3)
TILE_ROWS(4)
TILE_ROWS(5)
TILE_ROWS(6)
TILE_ROWS(7)
TILE_ROWS(8)
TILE_ROWS(9)
TILE_ROWS(10)
TILE_ROWS(11)
TILE_ROWS(12)
#undef TILE_ROWS

/* By row count. */
static void (*const tile_avx512_inplace[13])(const Tile *) = {
    NULL,
    tile_avx512_inplace_1,
    tile_avx512_inplace_2,
    tile_avx512_inplace_3,
    tile_avx512_inplace_4,
    tile_avx512_inplace_5,
    tile_avx512_inplace_6,
    tile_avx512_inplace_7,
    tile_avx512_inplace_8,
    tile_avx512_inplace_9,
    tile_avx512_inplace_10,
    tile_avx512_inplace_11,
    tile_avx512_inplace_12,
};
static void (*const tile_avx512_packed[13])(const Tile *) = {
    NULL,
    tile_avx512_packed_1,
    tile_avx512_packed_2,
    tile_avx512_packed_3,
    tile_avx512_packed_4,
    tile_avx512_packed_5,
    tile_avx512_packed_6,
    tile_avx512_packed_7,
    tile_avx512_packed_8,
    tile_avx512_packed_9,
    tile_avx512_packed_10,
    tile_avx512_packed_11,
    tile_avx512_packed_12,
};


/* A few rows (1-3) of A read in place against P whole panels at once (P * 32 columns).
 * One row on one panel kept two accumulator chains, each a fused multiply-add that waits
 * for the last one (4 cycles): the core ran a quarter of its multiply-adds.  R rows by
 * P panels keep 2 R P chains (8-12) in flight.  Each column's sum is the same as the
 * one-panel tile's (in order over K, then the epilogue), so a product's numbers do not
 * depend on which tile ran it.  Only whole panels: the edge panel takes tile_avx512_*. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_avx512_wide_body(const Tile *t, Py_ssize_t panel_stride, const int R, const int P) {
    __m512 acc[3][4][2];
    for (int i = 0; i < R; i++)
        for (int q = 0; q < P; q++) acc[i][q][0] = acc[i][q][1] = _mm512_setzero_ps();
    const float *a = t->a, *b = t->b;
    const Py_ssize_t lda = t->lda, kc = t->kc;
    for (Py_ssize_t k = 0; k < kc; k++, b += 32) {
        __m512 bv[4][2];
        for (int q = 0; q < P; q++) {
            const float *bq = b + q * panel_stride;
            if (t->stream) _mm_prefetch((const char *)(bq + PF_ROWS * 32), _MM_HINT_T1);
            bv[q][0] = _mm512_loadu_ps(bq);
            bv[q][1] = _mm512_loadu_ps(bq + 16);
        }
        for (int i = 0; i < R; i++) {
            const __m512 ai = _mm512_set1_ps(a[i * lda + k]);
            for (int q = 0; q < P; q++) {
                acc[i][q][0] = _mm512_fmadd_ps(ai, bv[q][0], acc[i][q][0]);
                acc[i][q][1] = _mm512_fmadd_ps(ai, bv[q][1], acc[i][q][1]);
            }
        }
    }
    const int load_c = t->load_c, last = t->last, act = t->act;
    const float lo = t->lo, hi = t->hi;
    const float *const add = last ? t->add : NULL;
    const float *const bias = last ? t->bias : NULL;
    for (int i = 0; i < R; i++) {
        float *const ci = t->c + i * t->ldc;
        for (int q = 0; q < P; q++) {
            for (int v = 0; v < 2; v++) {
                const Py_ssize_t col = q * 32 + v * 16;
                __m512 y = acc[i][q][v];
                if (load_c) y = _mm512_add_ps(_mm512_loadu_ps(ci + col), y);
                if (last) {
                    if (bias) y = _mm512_add_ps(y, _mm512_loadu_ps(bias + col));
                    if (add) y = _mm512_add_ps(y, _mm512_loadu_ps(add + i * t->ldadd + col));
                    y = act16(y, act, lo, hi);
                }
                _mm512_storeu_ps(ci + col, y);
            }
        }
    }
}

__attribute__((target("avx512f"))) static void tile_avx512_wide(const Tile *t,
                                                                 Py_ssize_t panel_stride) {
    switch (t->rows) {
    case 1: tile_avx512_wide_body(t, panel_stride, 1, 4); break;
    case 2: tile_avx512_wide_body(t, panel_stride, 2, 2); break;
    default: tile_avx512_wide_body(t, panel_stride, 3, 2); break;
    }
}

/* Panels per wide tile at `lvl` (tile_avx512_wide, tile_avx2_wide) by rows, 0: none. */
static int wide_panels(int lvl, int rows) {
    if (lvl >= 2) return rows == 1 ? 4 : rows <= 3 ? 2 : 0;
    if (lvl == 1) return rows == 1 ? 4 : rows == 2 ? 2 : 0;
    return 0;
}

#endif /* ONNXVIZ_X86 */

/* ---- the blocked loops ------------------------------------------------------------------ */

typedef struct {
    const float *a;
    Py_ssize_t lda, m, k, n;
    const float *b;
    /* gemm: A read in place (rows lda apart), B the packed weight.  gemm_left (run_left):
     * A the packed weight (pack_rows: MR-row micro-panels over the whole K), B the image
     * (rows ldb apart); row_bias per row of C. */
    Py_ssize_t ldb;
    float *c;
    Py_ssize_t ldc;
    const float *bias, *row_bias, *add;
    Py_ssize_t ldadd;
    int act, accumulate;
    float lo, hi;
    Py_ssize_t kcmax, nc; /* KC and NC read once, under the GIL (set_blocking) */
    int a_trans; /* gemm: A given transposed, K x M with rows lda apart (an NCHW image) */
} Problem;

/* Rows i0..i0+rows-1, columns k0..k0+kc-1 of A into `dst` as kc groups of MR floats,
 * zeros for the rows past the tile's. */
static void pack_a(const Problem *p, Py_ssize_t i0, int rows, Py_ssize_t k0, Py_ssize_t kc,
                   int mr, float *dst) {
    if (p->a_trans) { /* each k's MR values are consecutive in the transposed A */
        const float *src = p->a + k0 * p->lda + i0;
        /* A whole tile's rows as one copy of a size known here, which the compiler
         * inlines: the general memcpy below is a library call per k (see run for the
         * numbers). */
        if (rows == 6 && mr == 6) {
            for (Py_ssize_t k = 0; k < kc; k++) memcpy(dst + k * 6, src + k * p->lda, 24);
            return;
        }
        if (rows == 12 && mr == 12) {
            for (Py_ssize_t k = 0; k < kc; k++) memcpy(dst + k * 12, src + k * p->lda, 48);
            return;
        }
        for (Py_ssize_t k = 0; k < kc; k++) {
            memcpy(dst + k * mr, src + k * p->lda, (size_t)rows * 4);
            for (int i = rows; i < mr; i++) dst[k * mr + i] = 0.0f;
        }
        return;
    }
    for (int i = 0; i < rows; i++) {
        const float *src = p->a + (i0 + i) * p->lda + k0;
        for (Py_ssize_t k = 0; k < kc; k++) dst[k * mr + i] = src[k];
    }
    for (int i = rows; i < mr; i++)
        for (Py_ssize_t k = 0; k < kc; k++) dst[k * mr + i] = 0.0f;
}

/* Rows k0..k0+kc-1, columns j0..j1-1 of B (gemm_left's image, rows ldb apart) into
 * `dst` as panels of nr columns, each kc rows of nr floats, zero-padded at the edge. */
static void pack_b(const Problem *p, Py_ssize_t k0, Py_ssize_t kc, Py_ssize_t j0, Py_ssize_t j1,
                   int nr, float *dst) {
    for (Py_ssize_t j = j0; j < j1; j += nr) {
        const Py_ssize_t w = j1 - j < nr ? j1 - j : nr;
        float *panel = dst + ((j - j0) / nr) * kc * nr;
        for (Py_ssize_t k = 0; k < kc; k++) {
            const float *src = p->b + (k0 + k) * p->ldb + j;
            memcpy(panel + k * nr, src, (size_t)w * 4);
            for (Py_ssize_t q = w; q < nr; q++) panel[k * nr + q] = 0.0f;
        }
    }
}

static void run_blocks(const Problem *p, float *abuf) {
    void (*tile)(const Tile *) = tile_generic;
#if ONNXVIZ_X86
    if (level >= 2)
        tile = tile_avx512_packed_12;
    else if (level == 1)
        tile = tile_avx2;
#endif
    const int nr = panel_width_of(level), mr = rows_of(level);
    /* K in equal blocks of at most KC rows (no short last block to waste a pass on). */
    const Py_ssize_t kblocks = (p->k + p->kcmax - 1) / p->kcmax;
    const Py_ssize_t kstep = (p->k + kblocks - 1) / kblocks;
    const Py_ssize_t ncw = p->nc > 0 ? p->nc : level >= 2 ? BLOCK_FLOATS / kstep : 256;
    const Py_ssize_t nc = ncw < nr ? nr : ncw / nr * nr;
    /* A read in place saves copying each MR x KC micro-panel (a copy that is a large
     * share of the work when N is small: 3136 x 256 by 256 x 64 ran in 0.78x OpenBLAS's
     * time in place, 1.31x copied), even when its rows are a multiple of 4 KB apart and
     * the MR rows fall on the same L1 sets: on the Sapphire Rapids this runs on (48 KB
     * 12-way L1) in place won there too (128 x 3072 x 768 0.88x OpenBLAS's time in
     * place, 1.00x copied; 256 x 3072 x 768 0.85x / 0.96x; 1024^3 0.97x / 1.12x), where
     * the Cascade Lake it was first tuned on (32 KB 8-way) lost (K = 3072: 1.15x in
     * place, 1.06x copied): INPLACE 2 keeps that choice (set_blocking). */
    const int inplace =
        !p->a_trans && (INPLACE == 1 || (INPLACE == 2 && (p->lda * 4) % 4096 != 0));
    (void)inplace; /* (the x86 levels read it) */
    Tile t;
    t.ldc = p->ldc;
    t.ldadd = p->ldadd;
    t.act = p->act;
    t.lo = p->lo;
    t.hi = p->hi;
    for (Py_ssize_t j0 = 0; j0 < p->n; j0 += nc) {
        const Py_ssize_t j1 = j0 + nc < p->n ? j0 + nc : p->n;
        for (Py_ssize_t k0 = 0; k0 < p->k; k0 += kstep) {
            const Py_ssize_t kc = p->k - k0 < kstep ? p->k - k0 : kstep;
            t.kc = kc;
            t.load_c = p->accumulate || k0 > 0;
            t.last = k0 + kc == p->k;
            for (Py_ssize_t i0 = 0; i0 < p->m; i0 += mr) {
                const int rows = (int)(p->m - i0 < mr ? p->m - i0 : mr);
                void (*this_tile)(const Tile *) = tile;
                t.lda = p->lda;
#if ONNXVIZ_X86
                /* AVX2, a whole row block: every tile reads A in place (tile_avx2_in,
                 * tile_avx2_full's INPLACE), nothing copied */
                const int avx2_in = level == 1 && inplace && rows == mr;
                if (inplace && level >= 2) {
                    t.a = p->a + i0 * p->lda + k0;
                    this_tile = tile_avx512_inplace[rows];
                } else if (avx2_in) {
                    t.a = p->a + i0 * p->lda + k0;
                    this_tile = tile_avx2_in;
                } else if (level == 1 && inplace && rows >= 3 && rows < mr) {
                    t.a = p->a + i0 * p->lda + k0;
                    this_tile = rows == 3   ? tile_avx2_in3
                                : rows == 4 ? tile_avx2_in4
                                            : tile_avx2_in5;
                } else
#endif
                {
                    pack_a(p, i0, rows, k0, kc, mr, abuf);
                    t.a = abuf;
#if ONNXVIZ_X86
                    if (level >= 2) this_tile = tile_avx512_packed[rows];
#endif
                }
                t.rows = rows;
                t.row_bias = NULL;
                t.stream = i0 == 0;
                Py_ssize_t j = j0;
#if ONNXVIZ_X86
                /* A read in place by the wide tiles (at AVX2 too, where the others
                 * read it packed). */
                const int wide = level >= 2 ? (inplace ? wide_panels(level, rows) : 0)
                                            : (!p->a_trans ? wide_panels(level, rows) : 0);
                const Py_ssize_t lda_packed = t.lda;
                t.lda = p->lda;
                const float *a_packed = t.a;
                t.a = p->a + i0 * p->lda + k0;
                for (; wide && j + wide * nr <= j1; j += wide * nr) {
                    t.cols = wide * nr;
                    t.b = p->b + (j / nr) * p->k * nr + k0 * nr;
                    t.c = p->c + i0 * p->ldc + j;
                    t.bias = p->bias ? p->bias + j : NULL;
                    t.add = p->add ? p->add + i0 * p->ldadd + j : NULL;
                    if (level >= 2)
                        tile_avx512_wide(&t, p->k * nr);
                    else
                        tile_avx2_wide(&t, p->k * nr);
                }
                t.lda = lda_packed;
                t.a = a_packed;
                /* Whole tiles of one K block: tile_avx512_full (12 rows read in place),
                 * tile_avx2_full (6 rows, in place or of the packed copy). */
                const int full_rows = level >= 2 ? (inplace ? 12 : 0) : level == 1 ? 6 : 0;
                if (full_rows && rows == full_rows && t.last && !t.load_c) {
                    const int which =
                        (t.stream ? 4 : 0) | (p->bias ? 2 : 0) | (p->add ? 1 : 0);
                    void (*full)(const Tile *) =
                        level >= 2 ? tile_avx512_fulls[which]
                        : avx2_in  ? tile_avx2_fulls_in[which]
                                   : tile_avx2_fulls[which];
                    /* The next row block's lines of this panel fetched while this one
                     * computes: its 12 rows of C lie ldc floats apart (a 56 px image's
                     * 256 channels: 1 KB), a stride the L2 streamer does not follow,
                     * so without it every store of a cold output waits for its line.
                     * Rows of at least 512 bytes only (a narrower C's rows are one
                     * stream).  Inside ResNet-50 (one thread, A/B alternated, us): the
                     * 56 px 64 -> 256 1x1s with their residual 992 -> 808, 784 -> 755;
                     * the model 1.016 -> 1.011x onnxruntime, torchvision's 1.028 ->
                     * 1.024x, Inception v2 1.096 -> 1.090x, BERT-base unchanged. */
                    const int ahead = i0 + 2 * mr <= p->m && p->ldc >= 128;
                    for (; j + nr <= j1; j += nr) {
                        t.cols = nr;
                        t.b = p->b + (j / nr) * p->k * nr + k0 * nr;
                        t.c = p->c + i0 * p->ldc + j;
                        t.bias = p->bias ? p->bias + j : NULL;
                        t.add = p->add ? p->add + i0 * p->ldadd + j : NULL;
                        if (ahead) {
                            const float *next = t.c + mr * p->ldc;
                            for (int r = 0; r < mr; r++) {
                                _mm_prefetch((const char *)(next + r * p->ldc), _MM_HINT_T0);
                                _mm_prefetch((const char *)(next + r * p->ldc + 16), _MM_HINT_T0);
                            }
                        }
                        full(&t);
                    }
                }
#endif
                for (; j < j1; j += nr) {
                    t.cols = (int)(p->n - j < nr ? p->n - j : nr);
                    t.b = p->b + (j / nr) * p->k * nr + k0 * nr;
                    t.c = p->c + i0 * p->ldc + j;
                    t.bias = p->bias ? p->bias + j : NULL;
                    t.add = p->add ? p->add + i0 * p->ldadd + j : NULL;
                    this_tile(&t);
                }
            }
        }
    }
}

/* Whether gemm's A, read in place at AVX-512, is first copied to rows a padded stride
 * apart (`run`): rows a multiple of 4 KB apart put the tile's 12 rows of A on one set of
 * an 8-way L1 (its index bits are address bits 6-11), so each k step's 12 broadcasts
 * evict one another.  Measured on a Zen 4 core (1 thread, us, A rows 4 KB-aliased ->
 * copied to a padded stride, copy included): 196 x 1024 x 256 (ResNet-50's 14 px 1x1s)
 * 954 -> ~890, 49 x 2048 x 512 989 -> ~915, 128 x 3072 x 768 (BERT-base's FFN output)
 * 5790 -> ~5300; K 512 (2 KB apart: 6 rows a set) loses nothing in place.  Fewer than 9
 * rows fit the ways; with fewer than 64 columns the product is too short to pay for the
 * copy. */
static int pads_a(const Problem *p) {
    return ONNXVIZ_X86 && level >= 2 && INPLACE == 1 && !p->a_trans && p->m > 8 &&
           p->n >= 64 && p->lda % 1024 == 0;
}

#if ONNXVIZ_X86
/* dst[i * ld + k] = src[k * lda + i] for i < m, k < kk: A given transposed (an NCHW
 * image's K x M planes) copied into rows, 8 x 8 blocks transposed in registers. */
__attribute__((target("avx2,fma"))) static void transpose_avx2(const float *src, Py_ssize_t lda,
                                                              Py_ssize_t m, Py_ssize_t kk,
                                                              float *dst, Py_ssize_t ld) {
    Py_ssize_t i0 = 0;
    for (; i0 + 8 <= m; i0 += 8) {
        Py_ssize_t k0 = 0;
        for (; k0 + 8 <= kk; k0 += 8) {
            __m256 r[8];
            for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(src + (k0 + j) * lda + i0);
            onnxviz_transpose8(r); /* r[j]: pixel i0 + j's values k0 .. k0 + 7 */
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(dst + (i0 + j) * ld + k0, r[j]);
        }
        for (; k0 < kk; k0++)
            for (int j = 0; j < 8; j++) dst[(i0 + j) * ld + k0] = src[k0 * lda + i0 + j];
    }
    for (; i0 < m; i0++)
        for (Py_ssize_t k = 0; k < kk; k++) dst[i0 * ld + k] = src[k * lda + i0];
}
#endif

/* gemm's loops (run_blocks), A first copied to a padded stride where `pads_a` says so: the
 * same tiles on the same values in the same order, so the same bits; only the addresses
 * differ.  Without the memory for the copy, A is read where it lies.
 *
 * A given transposed (a_trans: an NCHW image, K planes of M pixels) is first copied into
 * rows at the vector levels, 8 x 8 blocks at a time, and then read in place as any A: the
 * same values in the same order, so the same bits as packing it tile by tile, which
 * gathered each tile's 6 values of every k from K rows a plane apart (K cache lines,
 * 4 KB apart at 32 x 32 px, so on one L1 set) and fed only the one or two panels of a
 * 1x1 conv to few channels.  Up to TRANSPOSE_FLOATS of A (an image in L2): above it the
 * copy's own traffic cost more than it saved (256 -> 64 channels at 56 x 56 px, 3.2 MB),
 * and pack_a's inlined copy runs.  Zen 3, one thread (us, the old tile by tile packing
 * -> this, alternated): a 1x1 conv of 96 -> 32 channels at 32 x 32 px 223 -> 180, 128 ->
 * 64 at 16 x 16 103 -> 76, 32 -> 32 at 32 x 32 83 -> 60; packed tile by tile, 64 -> 256
 * at 56 x 56 1918 -> 1689, 256 -> 64 2629 -> 1882; the diffusion UNet (its skip convs
 * read a Concat's NCHW output) 0.97-0.98 of its time.  The same bits either way. */
enum { TRANSPOSE_FLOATS = 128 * 1024 };

static void run(const Problem *p, float *abuf) {
#if ONNXVIZ_X86
    if (p->a_trans && level >= 1 && p->m >= 8 && p->m * p->k <= TRANSPOSE_FLOATS) {
        Py_ssize_t ld = p->k;
        if (ld % 1024 == 0) ld += 16;
        float *rows = aligned_alloc(64, ((size_t)(p->m * ld) * sizeof(float) + 63) / 64 * 64);
        if (rows) {
            transpose_avx2(p->a, p->lda, p->m, p->k, rows, ld);
            Problem q = *p;
            q.a = rows;
            q.lda = ld;
            q.a_trans = 0;
            run(&q, abuf);
            free(rows);
            return;
        }
    }
#endif
    if (!pads_a(p)) {
        run_blocks(p, abuf);
        return;
    }
    Py_ssize_t ld = (p->k + 15) / 16 * 16;
    if (ld % 1024 == 0) ld += 16;
    float *copy = aligned_alloc(64, (size_t)(p->m * ld) * sizeof(float));
    if (!copy) {
        run_blocks(p, abuf);
        return;
    }
    for (Py_ssize_t i = 0; i < p->m; i++)
        memcpy(copy + i * ld, p->a + i * p->lda, (size_t)p->k * sizeof(float));
    Problem q = *p;
    q.a = copy;
    q.lda = ld;
    run_blocks(&q, abuf);
    free(copy);
}

/* gemm_left: W (packed micro-panels of MR rows) by the image B.  Loops: for each block
 * of KCL rows of B, for each panel of NR columns of it, copied (zero-padded) into
 * `bbuf`, for each micro-panel of W: the panel (KCL x NR floats, 16 KB at 128 x 32)
 * stays in L1 across W's micro-panels and W's block (M x KCL) in L2.  The copy is
 * what OpenBLAS does on every call too; without it (the panel read where it lies, rows
 * ldb apart) the kernel ran 1.1-1.5x slower, the strided rows missing L1.  This form
 * beats OpenBLAS only on images of few pixels (7 x 7: 0.90-0.95x its time on ResNet-50's
 * last stage; 1.10-1.25x at 14 x 14 and up): packed_gemm routes only those here. */
static void run_left(const Problem *p, float *bbuf) {
    void (*tile)(const Tile *) = tile_generic;
#if ONNXVIZ_X86
    if (level >= 2)
        tile = tile_avx512_packed_12;
    else if (level == 1)
        tile = tile_avx2;
#endif
    const int nr = panel_width_of(level), mr = rows_of(level);
    const Py_ssize_t kblocks = (p->k + p->kcmax - 1) / p->kcmax;
    const Py_ssize_t kstep = (p->k + kblocks - 1) / kblocks;
    Tile t;
    t.ldc = p->ldc;
    t.ldadd = p->ldadd;
    t.act = p->act;
    t.lo = p->lo;
    t.hi = p->hi;
    t.bias = NULL;
    t.lda = 0;
    t.stream = 0; /* B is the copied panel in L1: nothing to prefetch */
    for (Py_ssize_t k0 = 0; k0 < p->k; k0 += kstep) {
        const Py_ssize_t kc = p->k - k0 < kstep ? p->k - k0 : kstep;
        t.kc = kc;
        t.load_c = p->accumulate || k0 > 0;
        t.last = k0 + kc == p->k;
        for (Py_ssize_t j = 0; j < p->n; j += nr) {
            t.cols = (int)(p->n - j < nr ? p->n - j : nr);
            pack_b(p, k0, kc, j, j + t.cols, nr, bbuf);
            t.b = bbuf;
            for (Py_ssize_t i0 = 0; i0 < p->m; i0 += mr) {
                t.rows = (int)(p->m - i0 < mr ? p->m - i0 : mr);
                t.a = p->a + (i0 / mr) * p->k * mr + k0 * mr;
                t.row_bias = p->row_bias ? p->row_bias + i0 : NULL;
                t.c = p->c + i0 * p->ldc + j;
                t.add = p->add ? p->add + i0 * p->ldadd + j : NULL;
                tile(&t);
            }
        }
    }
}

/* ---- Python interface ------------------------------------------------------------------- */

static const Py_ssize_t LIMIT = (Py_ssize_t)1 << 31;

/* Floats a packed K x N weight takes at panel width nr. */
static Py_ssize_t packed_count(Py_ssize_t k, Py_ssize_t n, int nr) {
    return k * ((n + nr - 1) / nr * nr);
}

/* Floats a matrix of `rows` rows `ld` apart, `cols` wide, spans; -1 when it overflows. */
static Py_ssize_t span(Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t ld) {
    if (rows < 1 || cols < 1 || ld < cols || ld > LIMIT || rows > LIMIT) return -1;
    if ((rows - 1) > (PY_SSIZE_T_MAX / 8 - cols) / ld) return -1;
    return (rows - 1) * ld + cols;
}

static int overlap(const Py_buffer *x, const Py_buffer *y) {
    const char *a = x->buf, *b = y->buf;
    return a < b + y->len && b < a + x->len;
}

/* pack(b, K, N, nr[, transposed]): B (K x N) as panels of nr columns.  `transposed`: b is
 * B's transpose (N x K, row-major; Gemm's transB weight as stored, a recurrent layer's
 * W[d]), each panel read from its nr rows, k block by k block so the panel lines being
 * filled stay in cache: the whole transposing copy first (numpy's, strided) took VGG-19's
 * 25088 x 4096 weight 1.8 s of its first run's 2.5 s of packing. */
static PyObject *py_pack(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *bo;
    Py_ssize_t k, n;
    int nr, transposed = 0;
    if (!PyArg_ParseTuple(args, "Onni|p:pack", &bo, &k, &n, &nr, &transposed)) return NULL;
    if (k < 1 || n < 1 || k > LIMIT || n > LIMIT || k * n > LIMIT * 8) {
        PyErr_SetString(PyExc_ValueError, "pack: K and N must be in 1..2**31 (K*N <= 2**34)");
        return NULL;
    }
    if (nr != 16 && nr != 32) {
        PyErr_SetString(PyExc_ValueError, "pack: the panel width must be 16 or 32");
        return NULL;
    }
    Py_buffer bb;
    if (onnxviz_get_floats(bo, &bb, k * n, 1, 0, "B") < 0) return NULL;
    const Py_ssize_t count = packed_count(k, n, nr);
    /* A bytearray's storage is only 16-byte aligned: the panels start at the first
     * 64-byte boundary in it (a panel row of 32 floats is then one cache line) and that
     * offset is returned with the buffer for gemm.  gemm uses unaligned loads all the
     * same, so a copy of the bytes at another alignment is slower, never wrong. */
    PyObject *out = PyByteArray_FromStringAndSize(NULL, count * 4 + 64);
    if (!out) {
        PyBuffer_Release(&bb);
        return NULL;
    }
    char *raw = PyByteArray_AS_STRING(out);
    const Py_ssize_t offset = (Py_ssize_t)((64 - ((uintptr_t)raw & 63)) & 63);
    float *dst = (float *)(raw + offset);
    const float *src = bb.buf;
    Py_BEGIN_ALLOW_THREADS;
    memset(raw, 0, (size_t)(count * 4 + 64));
    for (Py_ssize_t j0 = 0; j0 < n; j0 += nr) {
        const Py_ssize_t w = n - j0 < nr ? n - j0 : nr;
        float *panel = dst + (j0 / nr) * k * nr;
        if (!transposed) {
            for (Py_ssize_t kk = 0; kk < k; kk++)
                memcpy(panel + kk * nr, src + kk * n + j0, (size_t)w * 4);
            continue;
        }
        enum { KB = 256 }; /* a block's panel part: 256 x 32 floats, 32 KB */
        for (Py_ssize_t k0 = 0; k0 < k; k0 += KB) {
            const Py_ssize_t k1 = k - k0 < KB ? k : k0 + KB;
            for (Py_ssize_t jj = 0; jj < w; jj++) {
                const float *row = src + (j0 + jj) * k;
                for (Py_ssize_t kk = k0; kk < k1; kk++) panel[kk * nr + jj] = row[kk];
            }
        }
    }
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&bb);
    return Py_BuildValue("(Nn)", out, offset);
}

static PyObject *py_gemm(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ao, *po, *co, *bo, *do_;
    Problem p;
    Py_ssize_t offset, ldadd;
    int nr;
    p.a_trans = 0;
    if (!PyArg_ParseTuple(args, "OnnnOnniOnOOniffp|p:gemm", &ao, &p.lda, &p.m, &p.k, &po, &offset,
                          &p.n, &nr, &co, &p.ldc, &bo, &do_, &ldadd, &p.act, &p.lo, &p.hi,
                          &p.accumulate, &p.a_trans))
        return NULL;
    if (nr != panel_width_of(level)) {
        PyErr_Format(PyExc_ValueError, "gemm: packed for panels of %d, this level uses %d", nr,
                     panel_width_of(level));
        return NULL;
    }
    if (p.act < 0 || p.act > ACT_LAST) {
        PyErr_Format(PyExc_ValueError, "gemm: activation must be 0..%d", ACT_LAST);
        return NULL;
    }
    if (offset < 0 || offset > 63) {
        PyErr_SetString(PyExc_ValueError, "gemm: offset must be 0..63");
        return NULL;
    }
    const int have_bias = bo != Py_None, have_add = do_ != Py_None;
    const Py_ssize_t a_span = p.a_trans ? span(p.k, p.m, p.lda) : span(p.m, p.k, p.lda);
    const Py_ssize_t c_span = span(p.m, p.n, p.ldc);
    const Py_ssize_t d_span = have_add ? span(p.m, p.n, ldadd) : 0;
    if (a_span < 0 || c_span < 0 || d_span < 0 || p.n > LIMIT || p.k * p.n > LIMIT * 8) {
        PyErr_SetString(PyExc_ValueError,
                        "gemm: M, K, N must be >= 1 and each leading dimension at least its "
                        "rows' width (sizes up to 2**31)");
        return NULL;
    }
    Py_buffer ab, pb, cb, bb, db;
    if (onnxviz_get_floats(ao, &ab, a_span, 0, 0, "A") < 0) return NULL;
    if (PyObject_GetBuffer(po, &pb, PyBUF_C_CONTIGUOUS) < 0) goto fail_a;
    if (pb.len < offset + packed_count(p.k, p.n, nr) * 4) {
        PyErr_Format(PyExc_ValueError, "packed: expected %zd bytes after offset %zd, got %zd",
                     packed_count(p.k, p.n, nr) * 4, offset, pb.len);
        goto fail_p;
    }
    if (onnxviz_get_floats(co, &cb, c_span, 0, 1, "C") < 0) goto fail_p;
    if (have_bias && onnxviz_get_floats(bo, &bb, p.n, 1, 0, "bias") < 0) goto fail_c;
    if (have_add && onnxviz_get_floats(do_, &db, d_span, 0, 0, "addend") < 0) goto fail_b;
    /* C is written while A, B and the addend are still read (in K blocks): no overlap. */
    if (overlap(&cb, &ab) || overlap(&cb, &pb) || (have_add && overlap(&cb, &db)) ||
        (have_bias && overlap(&cb, &bb))) {
        PyErr_SetString(PyExc_ValueError,
                        "gemm: C overlaps an operand (for C += A B use accumulate)");
        goto fail_d;
    }
    p.ldb = 0;
    p.row_bias = NULL;
    p.a = ab.buf;
    p.b = (const float *)((const char *)pb.buf + offset);
    p.c = cb.buf;
    p.bias = have_bias ? bb.buf : NULL;
    p.add = have_add ? db.buf : NULL;
    p.ldadd = ldadd;
    p.kcmax = kc_max();
    p.nc = NC;
    /* MR (at most 12) x the longest K block. */
    float *abuf =
        PyMem_RawMalloc((size_t)((p.kcmax < p.k ? p.kcmax : p.k) * 12) * sizeof(float));
    if (!abuf) {
        PyErr_NoMemory();
        goto fail_d;
    }
    Py_BEGIN_ALLOW_THREADS;
    run(&p, abuf);
    Py_END_ALLOW_THREADS;
    PyMem_RawFree(abuf);
    if (have_add) PyBuffer_Release(&db);
    if (have_bias) PyBuffer_Release(&bb);
    PyBuffer_Release(&cb);
    PyBuffer_Release(&pb);
    PyBuffer_Release(&ab);
    Py_RETURN_NONE;
fail_d:
    if (have_add) PyBuffer_Release(&db);
fail_b:
    if (have_bias) PyBuffer_Release(&bb);
fail_c:
    PyBuffer_Release(&cb);
fail_p:
    PyBuffer_Release(&pb);
fail_a:
    PyBuffer_Release(&ab);
    return NULL;
}

/* ---- a held product: one constant weight, called per run ------------------------------
 *
 * `product(...)` makes a callable object for a MatMul-like node whose weight is a
 * constant packed once: called with the node's inputs (a, then the operands it was made
 * for, compared by identity), it checks A, makes C by numpy.empty and runs gemm, in C
 * from the run loop's call to the result: the Python function it replaces (checks,
 * reshapes, the call's 18 arguments parsed) was most of a small product's time.  A call
 * it does not take (other operands, another dtype or layout, A of one dimension, a row
 * count the routing sends elsewhere, another level) goes to `fallback` with the same arguments, the
 * kernel's own path.  Which row counts it takes is kernels/packed_gemm.py's `use_for`,
 * restated: at most `small_rows`, or at least `min_rows` (or one row, with `one_row`)
 * while OpenBLAS runs on one thread (`threads`: the address of openblas_get_num_threads,
 * or 0 when unknown). */
/* A held product's packed weight (from byte `offset` of its buffer) and bias, kept for
 * its life. */
typedef struct {
    PyObject *packed, *bias_obj; /* NULL until taken */
    Py_buffer pb, bb;
    const float *b, *bias;
} HeldPacked;

/* Takes a packed weight of `floats` floats from byte `offset` of its buffer and the bias
 * (`bias_count` floats, or None): 0, or -1 with the error set (what was taken is let go
 * by held_packed_release). */
static int held_packed_take_floats(HeldPacked *hp, PyObject *po, Py_ssize_t offset,
                                   Py_ssize_t floats, PyObject *bo, Py_ssize_t bias_count,
                                   const char *name) {
    if (PyObject_GetBuffer(po, &hp->pb, PyBUF_C_CONTIGUOUS) < 0) return -1;
    hp->packed = Py_NewRef(po);
    if (hp->pb.len < offset + floats * 4) {
        PyErr_Format(PyExc_ValueError, "%s: the packed weight is too short", name);
        return -1;
    }
    hp->b = (const float *)((const char *)hp->pb.buf + offset);
    if (bo != Py_None) {
        if (onnxviz_get_floats(bo, &hp->bb, bias_count, 1, 0, "bias") < 0) return -1;
        hp->bias_obj = Py_NewRef(bo);
        hp->bias = hp->bb.buf;
    }
    return 0;
}

/* The weight packed for K x N in panels of nr (`pack`) and the bias (N floats). */
static int held_packed_take(HeldPacked *hp, PyObject *po, Py_ssize_t offset, Py_ssize_t k,
                            Py_ssize_t n, int nr, PyObject *bo, const char *name) {
    return held_packed_take_floats(hp, po, offset, packed_count(k, n, nr), bo, n, name);
}

static void held_packed_release(HeldPacked *hp) {
    if (hp->packed) PyBuffer_Release(&hp->pb);
    if (hp->bias_obj) PyBuffer_Release(&hp->bb);
    Py_CLEAR(hp->packed);
    Py_CLEAR(hp->bias_obj);
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *expect, *fallback, *ndarray, *empty, *dtype;
    HeldPacked weight;
    Py_ssize_t k, n, small_rows, min_rows;
    int nr, one_row;
    int rank; /* the one rank A may have (Gemm's 2), or 0: any from 2 (MatMul's) */
    int (*threads)(void);
} Product;

static PyObject *product_other(Product *self, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* The float32 values of the strided buffer `v` (strides in bytes, any sign) into dst in
 * C order. */
static void strided_copy(const Py_buffer *v, float *dst) {
    const int nd = v->ndim;
    Py_ssize_t idx[PyBUF_MAX_NDIM] = {0};
    const Py_ssize_t inner = v->shape[nd - 1], step = v->strides[nd - 1];
    Py_ssize_t outer = 1;
    for (int d = 0; d < nd - 1; d++) outer *= v->shape[d];
    for (Py_ssize_t r = 0; r < outer; r++) {
        const char *row = (const char *)v->buf;
        for (int d = 0; d < nd - 1; d++) row += idx[d] * v->strides[d];
        if (step == 4) {
            memcpy(dst, row, (size_t)inner * 4);
        } else {
            for (Py_ssize_t j = 0; j < inner; j++) memcpy(dst + j, row + j * step, 4);
        }
        dst += inner;
        for (int d = nd - 2; d >= 0; d--) { /* the next row's index, last axis fastest */
            if (++idx[d] < v->shape[d]) break;
            idx[d] = 0;
        }
    }
}

static PyObject *product_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames) {
    Product *self = (Product *)obj;
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const Py_ssize_t n_expect = PyTuple_GET_SIZE(self->expect);
    if (kwnames || nargs != 1 + n_expect || self->nr != panel_width_of(level) ||
        (PyObject *)Py_TYPE(args[0]) != self->ndarray)
        return product_other(self, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < n_expect; i++)
        if (args[1 + i] != PyTuple_GET_ITEM(self->expect, i))
            return product_other(self, args, nargsf, kwnames);
    Py_buffer ab;
    float *dense = NULL; /* a strided A's rows copied in C order (strided_copy) */
    if (!onnxviz_array_view(args[0], self->ndarray, &ab, 'f', -1, NULL)) {
        /* A strided float32 view (a transposed input: a TorchScript attention's Q/K/V
         * projection reads Transpose's view) is copied in C order first, as the
         * kernel's path does with np.ascontiguousarray: the same values, the same
         * product.  That path's Python steps were 6 us of a 14 x 32 x 96 product. */
        if (PyObject_GetBuffer(args[0], &ab, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
            PyErr_Clear();
            return product_other(self, args, nargsf, kwnames);
        }
        const char *f = ab.format ? ab.format : "B";
        if (f[0] != 'f' || f[1] || ab.ndim < 2 || ab.len <= 0 ||
            ab.shape[ab.ndim - 1] != self->k || ab.len / 4 > (1 << 26)) {
            PyBuffer_Release(&ab);
            return product_other(self, args, nargsf, kwnames);
        }
        dense = PyMem_RawMalloc((size_t)ab.len);
        if (!dense) {
            PyBuffer_Release(&ab);
            return PyErr_NoMemory();
        }
        strided_copy(&ab, dense);
    }
    const int ndim = ab.ndim;
    const Py_ssize_t rows = ndim >= 2 && (!self->rank || ndim == self->rank) &&
                                    ab.shape[ndim - 1] == self->k && ab.len > 0
                                ? ab.len / 4 / self->k
                                : 0;
    int routed = rows >= 1 &&
                 (rows <= self->small_rows || rows >= self->min_rows || (rows == 1 && self->one_row));
    if (routed && rows > self->small_rows && self->threads) routed = self->threads() <= 1;
    if (!routed) {
        PyBuffer_Release(&ab);
        PyMem_RawFree(dense);
        return product_other(self, args, nargsf, kwnames);
    }
    Py_ssize_t sizes[PyBUF_MAX_NDIM]; /* a.shape[:-1] + (N,) */
    memcpy(sizes, ab.shape, (size_t)ndim * sizeof(Py_ssize_t));
    sizes[ndim - 1] = self->n;
    PyObject *out = onnxviz_new_array(self->empty, self->dtype, ndim, sizes);
    if (!out) goto done;
    Py_buffer cb;
    if (PyObject_GetBuffer(out, &cb, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        Py_CLEAR(out);
        goto done;
    }
    Problem p;
    memset(&p, 0, sizeof p);
    p.a = dense != NULL ? dense : ab.buf;
    p.lda = self->k;
    p.m = rows;
    p.k = self->k;
    p.n = self->n;
    p.b = self->weight.b;
    p.c = cb.buf;
    p.ldc = self->n;
    p.bias = self->weight.bias;
    p.lo = p.hi = NAN;
    p.kcmax = kc_max();
    p.nc = NC;
    float *abuf =
        PyMem_RawMalloc((size_t)((p.kcmax < p.k ? p.kcmax : p.k) * 12) * sizeof(float));
    if (!abuf) {
        PyErr_NoMemory();
        Py_CLEAR(out);
    } else if (rows * self->k * self->n >= (1 << 20)) {
        Py_BEGIN_ALLOW_THREADS;
        run(&p, abuf);
        Py_END_ALLOW_THREADS;
    } else {
        run(&p, abuf); /* a few microseconds: releasing the lock would cost more */
    }
    PyMem_RawFree(abuf);
    PyBuffer_Release(&cb);
done:
    PyBuffer_Release(&ab);
    PyMem_RawFree(dense);
    return out;
}

static int product_traverse(PyObject *obj, visitproc visit, void *arg) {
    Product *self = (Product *)obj;
    Py_VISIT(self->expect);
    Py_VISIT(self->fallback);
    return 0;
}

static int product_clear(PyObject *obj) {
    Product *self = (Product *)obj;
    Py_CLEAR(self->expect);
    Py_CLEAR(self->fallback);
    return 0;
}

static void product_dealloc(PyObject *obj) {
    Product *self = (Product *)obj;
    PyObject_GC_UnTrack(obj);
    held_packed_release(&self->weight);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->empty);
    Py_CLEAR(self->dtype);
    product_clear(obj);
    PyObject_GC_Del(obj);
}

static PyMemberDef product_members[] = {
    {"fallback", T_OBJECT, offsetof(Product, fallback), READONLY,
     "What the calls this product does not take go to."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ProductType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onnxviz.runtime.native._sgemm.Product",
    .tp_basicsize = sizeof(Product),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Product, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = product_traverse,
    .tp_clear = product_clear,
    .tp_dealloc = product_dealloc,
    .tp_members = product_members,
    .tp_doc = "A product by one packed constant weight (product()).",
};

static PyObject *py_product(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *po, *bo, *expect, *fallback, *ndarray, *empty, *dtype;
    Py_ssize_t offset, k, n, small_rows, min_rows;
    unsigned long long threads;
    int nr, one_row, rank = 0;
    if (!PyArg_ParseTuple(args, "OnnniOnnpKO!OOOO|i:product", &po, &offset, &k, &n, &nr, &bo,
                          &small_rows, &min_rows, &one_row, &threads, &PyTuple_Type, &expect,
                          &fallback, &ndarray, &empty, &dtype, &rank))
        return NULL;
    if (k < 1 || n < 1 || k > LIMIT || n > LIMIT || (nr != 16 && nr != 32) || offset < 0 ||
        offset > 63 || !PyCallable_Check(fallback) || !PyCallable_Check(empty) || rank < 0 ||
        rank == 1 || rank > PyBUF_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "product: bad sizes, panel width or callables");
        return NULL;
    }
    Product *obj = PyObject_GC_New(Product, &ProductType);
    if (!obj) return NULL;
    obj->vectorcall = product_vectorcall;
    memset(&obj->weight, 0, sizeof obj->weight);
    obj->expect = Py_NewRef(expect);
    obj->fallback = Py_NewRef(fallback);
    obj->ndarray = Py_NewRef(ndarray);
    obj->empty = Py_NewRef(empty);
    obj->dtype = Py_NewRef(dtype);
    obj->k = k;
    obj->n = n;
    obj->nr = nr;
    obj->small_rows = small_rows;
    obj->min_rows = min_rows;
    obj->one_row = one_row;
    obj->rank = rank;
    obj->threads = (int (*)(void))(uintptr_t)threads;
    PyObject_GC_Track((PyObject *)obj);
    if (held_packed_take(&obj->weight, po, offset, k, n, nr, bo, "product") < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return (PyObject *)obj;
}

/* ---- a held 1x1 conv: a fused conv chain's common call ---------------------------------
 *
 * `pointwise(...)` makes the `quick` call of a fusion.py ConvChain whose conv is a 1x1 of
 * stride 1 run channels-last by this kernel (kernels/nn_conv_nhwc.py's _Pointwise, its
 * packed product): called with the fused node's inputs, it checks them (the image (N, C,
 * H, W) channels-last, or one channels-first image; the constants it was made for, by
 * identity, at `places`; the residual, when the chain adds one, channels-last) and runs
 * gemm into a new 64-byte aligned channels-last output, with the bias, residual and
 * activation in the epilogue: the _Pointwise call's own operations, so its bits.  From
 * the run loop's call to the result in C: the Python layers it replaces (the chain's
 * checks, the layout's, the runner's, matmul_packed's, the output's alignment) cost
 * 20-40 us a conv in ResNet-50's run, where the interpreter's data is out of the caches.
 * A call it does not take returns `fallback(*args)` (quiet_loop.decline: None, so the
 * loop makes the chain's own call). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
    HeldPacked weight;
    Py_ssize_t n, c, h, w, m;
    int nr, act, inplace;
    float lo, hi;
    int (*threads)(void);
} Pointwise;

static PyObject *pointwise_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames) {
    Pointwise *self = (Pointwise *)obj;
    const HeldCall *h = &self->call;
    if (self->nr != panel_width_of(level) || (self->threads && self->threads() > 1) ||
        !held_call_takes(h, args, nargsf, kwnames))
        goto other;
    Py_buffer xb, db;
    const int layout = onnxviz_image_view(args[0], h->ndarray, &xb, self->n, self->c,
                                          self->h, self->w);
    if (!layout) goto other;
    const int have_add = h->residual >= 0;
    if (have_add && !onnxviz_channels_last_view(args[h->residual], h->ndarray, &db, self->n,
                                                self->m, self->h, self->w)) {
        PyBuffer_Release(&xb);
        goto other;
    }
    float *c = NULL;
    PyObject *out = NULL;
    const Py_ssize_t kcmax = kc_max();
    if (have_add && self->inplace && self->c <= kcmax &&
        held_residual_is_dead(args[h->residual], h->ndarray)) {
        /* The sums go over the residual: gemm reads each addend float before it stores
         * that float's sum (one K block: no partial sums stored first).  No fresh output
         * to write (an RFO of lines not in cache: ResNet-50's 56 px expand convs). */
        out = Py_NewRef(args[h->residual]);
        c = db.buf;
    } else {
        out = onnxviz_new_channels_last(h->empty, h->ndarray, h->u8, h->f32, self->n, self->m,
                                        self->h, self->w, &c);
    }
    if (out) {
        const Py_ssize_t rows = self->n * self->h * self->w;
        Problem p;
        memset(&p, 0, sizeof p);
        p.a = xb.buf;
        p.a_trans = layout == ONNXVIZ_NCHW;
        p.lda = p.a_trans ? rows : self->c;
        p.m = rows;
        p.k = self->c;
        p.n = self->m;
        p.b = self->weight.b;
        p.c = c;
        p.ldc = self->m;
        p.bias = self->weight.bias;
        p.add = have_add ? db.buf : NULL;
        p.ldadd = self->m;
        p.act = self->act;
        p.lo = self->lo;
        p.hi = self->hi;
        p.kcmax = kcmax;
        p.nc = NC;
        float *abuf =
            PyMem_RawMalloc((size_t)((p.kcmax < p.k ? p.kcmax : p.k) * 12) * sizeof(float));
        if (!abuf) {
            PyErr_NoMemory();
            Py_CLEAR(out);
        } else {
            Py_BEGIN_ALLOW_THREADS;
            run(&p, abuf);
            Py_END_ALLOW_THREADS;
            PyMem_RawFree(abuf);
        }
    }
    if (have_add) PyBuffer_Release(&db);
    PyBuffer_Release(&xb);
    return out;
other:
    return held_call_other(h, args, nargsf, kwnames);
}

static void pointwise_release(Pointwise *self) { held_packed_release(&self->weight); }

HELD_CALL_TYPE(Pointwise, PointwiseType, pointwise, "onnxviz.runtime.native._sgemm.Pointwise",
               "A fused 1x1 conv by one packed constant weight (pointwise()).",
               pointwise_release)

static PyObject *py_pointwise(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *po, *bo, *places, *expect, *fallback, *ndarray, *empty, *u8, *f32;
    Py_ssize_t offset, c, m, n, h, w, nargs, residual;
    int nr, act, inplace;
    float lo, hi;
    unsigned long long threads;
    if (!PyArg_ParseTuple(args, "OnnniO(nnn)iffnnpOOKOOOOO:pointwise", &po, &offset, &c, &m,
                          &nr, &bo, &n, &h, &w, &act, &lo, &hi, &nargs, &residual, &inplace,
                          &places, &expect, &threads, &fallback, &ndarray, &empty, &u8, &f32))
        return NULL;
    if (c < 1 || m < 1 || c > LIMIT || m > LIMIT || n < 1 || h < 1 || w < 1 ||
        (nr != 16 && nr != 32) || offset < 0 || offset > 63 || act < 0 || act > ACT_LAST) {
        PyErr_SetString(PyExc_ValueError, "pointwise: bad sizes, panel width or activation");
        return NULL;
    }
    Pointwise *obj = PyObject_GC_New(Pointwise, &PointwiseType);
    if (!obj) return NULL;
    obj->vectorcall = pointwise_vectorcall;
    memset(&obj->weight, 0, sizeof obj->weight);
    obj->n = n;
    obj->c = c;
    obj->h = h;
    obj->w = w;
    obj->m = m;
    obj->nr = nr;
    obj->act = act;
    obj->lo = lo;
    obj->hi = hi;
    obj->inplace = inplace && residual > 0;
    obj->threads = (int (*)(void))(uintptr_t)threads;
    if (held_call_init(&obj->call, places, expect, fallback, ndarray, empty, u8, f32, nargs,
                       residual, "pointwise") < 0) {
        PyObject_GC_Del(obj); /* nothing held yet, not tracked */
        return NULL;
    }
    PyObject_GC_Track((PyObject *)obj);
    if (held_packed_take(&obj->weight, po, offset, c, m, nr, bo, "pointwise") < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return (PyObject *)obj;
}

/* run_left with gemm_left's blocking (KC of KCL rows) and its panel buffer (the longest K
 * block x NR floats), the GIL released: 0, or -1 with MemoryError set. */
static int run_left_buffered(Problem *p) {
    p->kcmax = KCL;
    p->nc = 0;
    float *bbuf = PyMem_RawMalloc((size_t)((KCL < p->k ? KCL : p->k) * 32) * sizeof(float));
    if (!bbuf) {
        PyErr_NoMemory();
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS;
    run_left(p, bbuf);
    Py_END_ALLOW_THREADS;
    PyMem_RawFree(bbuf);
    return 0;
}

/* ---- a held NCHW 1x1 conv: the weight by the image --------------------------------------
 *
 * `pointwise_planes(...)` makes the `quick` call of a fusion.py ConvChain whose conv is a
 * 1x1 of stride 1 on one channels-first image that the Conv kernel runs by gemm_left
 * (kernels/nn_conv.py's _packed_products, where packed_gemm.use_left_for routes it: a
 * small image or a small product, a diffusion UNet's attention and skip convs between its
 * GroupNorms): called with the fused node's inputs, it checks them (the image (1, C, H,
 * W) C-contiguous float32; the constants it was made for, by identity, at `places`; the
 * residual, when the chain adds one, a (1, M, H, W) C-contiguous float32 array) and runs
 * run_left into a new 64-byte aligned C-contiguous output: W X + the bias per row + the
 * residual, gemm_left's call in _packed_products, so its bits.  The Python layers it
 * replaces (the chain's, the executor's, the conv kernel's routing and checks) cost
 * 30-60 us a conv, where the product is 5-25.  Any other call is fallback(*args). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
    HeldPacked weight; /* the rows packed by pack_rows (`b`), the bias per row */
    Py_ssize_t c, h, w_, m;
    int mr;
    int (*threads)(void);
} PointwisePlanes;

static PyObject *planes_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    PointwisePlanes *self = (PointwisePlanes *)obj;
    const HeldCall *h = &self->call;
    if (self->mr != rows_of(level) || (self->threads && self->threads() > 1) ||
        !held_call_takes(h, args, nargsf, kwnames))
        goto other;
    const Py_ssize_t pixels = self->h * self->w_;
    Py_buffer xb, db;
    if (!onnxviz_array_view(args[0], h->ndarray, &xb, 'f', 4, NULL)) goto other;
    if (xb.shape[0] != 1 || xb.shape[1] != self->c || xb.shape[2] != self->h ||
        xb.shape[3] != self->w_) {
        PyBuffer_Release(&xb);
        goto other;
    }
    const int have_add = h->residual >= 0;
    if (have_add) {
        if (!onnxviz_array_view(args[h->residual], h->ndarray, &db, 'f', 4, NULL)) {
            PyBuffer_Release(&xb);
            goto other;
        }
        if (db.shape[0] != 1 || db.shape[1] != self->m || db.shape[2] != self->h ||
            db.shape[3] != self->w_) {
            PyBuffer_Release(&db);
            PyBuffer_Release(&xb);
            goto other;
        }
    }
    float *c = NULL;
    PyObject *out = onnxviz_new_aligned(h->empty, h->ndarray, h->u8, h->f32, 1, self->m,
                                        self->h, self->w_, 1, &c);
    if (out) {
        Problem p;
        memset(&p, 0, sizeof p);
        p.a = self->weight.b;
        p.lda = self->c;
        p.m = self->m;
        p.k = self->c;
        p.b = xb.buf;
        p.ldb = pixels;
        p.n = pixels;
        p.c = c;
        p.ldc = pixels;
        p.row_bias = self->weight.bias;
        p.add = have_add ? db.buf : NULL;
        p.ldadd = pixels;
        p.act = 0;
        p.lo = p.hi = NAN;
        if (run_left_buffered(&p) < 0) Py_CLEAR(out);
    }
    if (have_add) PyBuffer_Release(&db);
    PyBuffer_Release(&xb);
    return out;
other:
    return held_call_other(h, args, nargsf, kwnames);
}

static void planes_release(PointwisePlanes *self) { held_packed_release(&self->weight); }

HELD_CALL_TYPE(PointwisePlanes, PointwisePlanesType, planes,
               "onnxviz.runtime.native._sgemm.PointwisePlanes",
               "A fused NCHW 1x1 conv by one constant weight packed in rows "
               "(pointwise_planes()).",
               planes_release)

static PyObject *py_pointwise_planes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *po, *bo, *places, *expect, *fallback, *ndarray, *empty, *u8, *f32;
    Py_ssize_t offset, c, m, h, w, nargs, residual;
    int mr;
    unsigned long long threads;
    if (!PyArg_ParseTuple(args, "Onnni(nn)OnnOOKOOOOO:pointwise_planes", &po, &offset, &c, &m,
                          &mr, &h, &w, &bo, &nargs, &residual, &places, &expect, &threads,
                          &fallback, &ndarray, &empty, &u8, &f32))
        return NULL;
    if (c < 1 || m < 1 || c > LIMIT || m > LIMIT || h < 1 || w < 1 || h > LIMIT ||
        w > LIMIT / h || m * c > LIMIT * 8 || (mr != 4 && mr != 6 && mr != 12) || offset < 0 ||
        offset > 63) {
        PyErr_SetString(PyExc_ValueError, "pointwise_planes: bad sizes, rows or offset");
        return NULL;
    }
    PointwisePlanes *obj = PyObject_GC_New(PointwisePlanes, &PointwisePlanesType);
    if (!obj) return NULL;
    obj->vectorcall = planes_vectorcall;
    memset(&obj->weight, 0, sizeof obj->weight);
    obj->c = c;
    obj->h = h;
    obj->w_ = w;
    obj->m = m;
    obj->mr = mr;
    obj->threads = (int (*)(void))(uintptr_t)threads;
    if (held_call_init(&obj->call, places, expect, fallback, ndarray, empty, u8, f32, nargs,
                       residual, "pointwise_planes") < 0) {
        PyObject_GC_Del(obj); /* nothing held yet, not tracked */
        return NULL;
    }
    PyObject_GC_Track((PyObject *)obj);
    /* The rows packed by pack_rows for this level's mr, the bias M floats or None. */
    if (held_packed_take_floats(&obj->weight, po, offset, (m + mr - 1) / mr * mr * c, bo, m,
                                "pointwise_planes") < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return (PyObject *)obj;
}

static PyObject *py_pack_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *wo;
    Py_ssize_t m, k;
    int mr;
    if (!PyArg_ParseTuple(args, "Onni:pack_rows", &wo, &m, &k, &mr)) return NULL;
    if (m < 1 || k < 1 || m > LIMIT || k > LIMIT || m * k > LIMIT * 8) {
        PyErr_SetString(PyExc_ValueError,
                        "pack_rows: M and K must be in 1..2**31 (M*K <= 2**34)");
        return NULL;
    }
    if (mr != 4 && mr != 6 && mr != 12) {
        PyErr_SetString(PyExc_ValueError, "pack_rows: the row count must be 4, 6 or 12");
        return NULL;
    }
    Py_buffer wb;
    if (onnxviz_get_floats(wo, &wb, m * k, 1, 0, "W") < 0) return NULL;
    const Py_ssize_t count = (m + mr - 1) / mr * mr * k;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, count * 4 + 64);
    if (!out) {
        PyBuffer_Release(&wb);
        return NULL;
    }
    char *raw = PyByteArray_AS_STRING(out);
    const Py_ssize_t offset = (Py_ssize_t)((64 - ((uintptr_t)raw & 63)) & 63);
    float *dst = (float *)(raw + offset);
    const float *src = wb.buf;
    Py_BEGIN_ALLOW_THREADS;
    memset(raw, 0, (size_t)(count * 4 + 64));
    /* Micro-panel r holds rows r*mr.. as K groups of mr floats (zeros past row M). */
    for (Py_ssize_t i = 0; i < m; i++) {
        float *panel = dst + (i / mr) * k * mr + i % mr;
        for (Py_ssize_t kk = 0; kk < k; kk++) panel[kk * mr] = src[i * k + kk];
    }
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&wb);
    return Py_BuildValue("(Nn)", out, offset);
}

static PyObject *py_gemm_left(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *po, *xo, *co, *bo, *do_;
    Problem p;
    p.a_trans = 0;
    Py_ssize_t offset, ldadd;
    int mr;
    if (!PyArg_ParseTuple(args, "OnnniOnnOnOOniffp:gemm_left", &po, &offset, &p.m, &p.k, &mr,
                          &xo, &p.ldb, &p.n, &co, &p.ldc, &bo, &do_, &ldadd, &p.act, &p.lo,
                          &p.hi, &p.accumulate))
        return NULL;
    if (mr != rows_of(level)) {
        PyErr_Format(PyExc_ValueError, "gemm_left: packed for %d rows, this level uses %d", mr,
                     rows_of(level));
        return NULL;
    }
    if (p.act < 0 || p.act > ACT_LAST) {
        PyErr_Format(PyExc_ValueError, "gemm_left: activation must be 0..%d", ACT_LAST);
        return NULL;
    }
    if (offset < 0 || offset > 63) {
        PyErr_SetString(PyExc_ValueError, "gemm_left: offset must be 0..63");
        return NULL;
    }
    const int have_bias = bo != Py_None, have_add = do_ != Py_None;
    const Py_ssize_t x_span = span(p.k, p.n, p.ldb), c_span = span(p.m, p.n, p.ldc);
    const Py_ssize_t d_span = have_add ? span(p.m, p.n, ldadd) : 0;
    if (x_span < 0 || c_span < 0 || d_span < 0 || p.m > LIMIT || p.m * p.k > LIMIT * 8) {
        PyErr_SetString(PyExc_ValueError,
                        "gemm_left: M, K, N must be >= 1 and each leading dimension at least "
                        "its rows' width (sizes up to 2**31)");
        return NULL;
    }
    const Py_ssize_t packed_bytes = (p.m + mr - 1) / mr * mr * p.k * 4;
    Py_buffer pb, xb, cb, bb, db;
    if (PyObject_GetBuffer(po, &pb, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (pb.len < offset + packed_bytes) {
        PyErr_Format(PyExc_ValueError, "packed: expected %zd bytes after offset %zd, got %zd",
                     packed_bytes, offset, pb.len);
        goto fail_p;
    }
    if (onnxviz_get_floats(xo, &xb, x_span, 0, 0, "X") < 0) goto fail_p;
    if (onnxviz_get_floats(co, &cb, c_span, 0, 1, "C") < 0) goto fail_x;
    if (have_bias && onnxviz_get_floats(bo, &bb, p.m, 1, 0, "bias") < 0) goto fail_c;
    if (have_add && onnxviz_get_floats(do_, &db, d_span, 0, 0, "addend") < 0) goto fail_b;
    if (overlap(&cb, &xb) || overlap(&cb, &pb) || (have_add && overlap(&cb, &db)) ||
        (have_bias && overlap(&cb, &bb))) {
        PyErr_SetString(PyExc_ValueError,
                        "gemm_left: C overlaps an operand (for C += W X use accumulate)");
        goto fail_d;
    }
    p.a = (const float *)((const char *)pb.buf + offset);
    p.lda = p.k;
    p.b = xb.buf;
    p.c = cb.buf;
    p.bias = NULL;
    p.row_bias = have_bias ? bb.buf : NULL;
    p.add = have_add ? db.buf : NULL;
    p.ldadd = ldadd;
    if (run_left_buffered(&p) < 0) goto fail_d;
    if (have_add) PyBuffer_Release(&db);
    if (have_bias) PyBuffer_Release(&bb);
    PyBuffer_Release(&cb);
    PyBuffer_Release(&xb);
    PyBuffer_Release(&pb);
    Py_RETURN_NONE;
fail_d:
    if (have_add) PyBuffer_Release(&db);
fail_b:
    if (have_bias) PyBuffer_Release(&bb);
fail_c:
    PyBuffer_Release(&cb);
fail_x:
    PyBuffer_Release(&xb);
fail_p:
    PyBuffer_Release(&pb);
    return NULL;
}

static PyObject *py_set_blocking(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t kc, nc;
    int inplace = 1;
    Py_ssize_t kcl = 128;
    if (!PyArg_ParseTuple(args, "nn|in:set_blocking", &kc, &nc, &inplace, &kcl))
        return NULL;
    if (kc < 0 || kc > 4096 || kcl < 1 || kcl > 4096 || nc < 0 || nc > (1 << 20) ||
        inplace < 0 || inplace > 2) {
        PyErr_SetString(PyExc_ValueError,
                        "set_blocking: KC in 0..4096, NC in 0..2**20, inplace 0..2");
        return NULL;
    }
    KC = kc;
    NC = nc;
    INPLACE = inplace;
    KCL = kcl;
    Py_RETURN_NONE;
}

static PyObject *py_rows_per_tile(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(rows_of(level));
}

static PyObject *py_panel_width(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(panel_width_of(level));
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"pack", py_pack, METH_VARARGS,
     "pack(B, K, N, nr[, transposed]) -> (bytearray, offset): the row-major float32 K x N "
     "matrix B (with `transposed`: B given as its N x K transpose) as column panels of nr "
     "(16 or 32, panel_width()) floats, starting at byte `offset` of the bytearray (a "
     "64-byte boundary), the last panel zero-padded."},
    {"gemm", py_gemm, METH_VARARGS,
     "gemm(A, lda, M, K, packed, offset, N, nr, C, ldc, bias, addend, ldadd, act, lo, hi, "
     "accumulate, a_trans=False): C = act([C +] A B + bias + addend) for A (M x K, rows lda "
     "apart; a_trans: A given as its K x M transpose, rows lda apart), B "
     "packed by pack(), C and addend (M x N, rows ldc / ldadd apart), bias (N,); bias "
     "and addend may be None; act 0 none, 1 Relu, 2 Clip(lo, hi) (NaN bound: none), "
     "3 HardSwish, 4 SiLU."},
    {"pack_rows", py_pack_rows, METH_VARARGS,
     "pack_rows(W, M, K, mr) -> (bytearray, offset): the row-major float32 M x K matrix W "
     "as micro-panels of mr rows (rows_per_tile()), each K groups of mr floats, from byte "
     "`offset` (a 64-byte boundary), zero rows past M."},
    {"gemm_left", py_gemm_left, METH_VARARGS,
     "gemm_left(packed, offset, M, K, mr, X, ldx, N, C, ldc, bias, addend, ldadd, act, lo, "
     "hi, accumulate): C = act([C +] W X + bias[:, None] + addend) for W packed by "
     "pack_rows, X (K x N, rows ldx apart, read in place), C and addend (M x N), bias "
     "(M,) per row: an NCHW 1x1 conv, W (M, C) by the image (C, H*W)."},
    {"product", py_product, METH_VARARGS,
     "product(packed, offset, K, N, nr, bias, small_rows, min_rows, one_row, threads, "
     "expect, fallback, ndarray, empty, dtype, rank=0) -> a callable: f(a, *expect) = a @ W + "
     "bias as a new float32 array of a.shape[:-1] + (N,), for a C-contiguous float32 ndarray a "
     "of at least 2 dimensions (exactly rank when rank > 0), the last K, and whose rows are at "
     "most small_rows, or at least "
     "min_rows (or one when one_row) while the int function at address `threads` (0: none) "
     "returns at most 1; "
     "any other call is fallback(*args)."},
    {"pointwise", py_pointwise, METH_VARARGS,
     "pointwise(packed, offset, C, M, nr, bias, (N, H, W), act, lo, hi, nargs, residual, "
     "inplace, places, expect, threads, fallback, ndarray, empty, uint8, float32) -> a "
     "callable: f(*args) = act(1x1 conv of args[0] (N, C, H, W), channels-last or one "
     "C-contiguous image, + bias + args[residual] (channels-last; residual -1: none)) as a "
     "new 64-byte aligned channels-last float32 (N, M, H, W) array, when args[places[i]] "
     "is expect[i] and the int function at address `threads` (0: none) returns at most 1; "
     "with `inplace` (the caller's slot of the residual dies at this call) written over a "
     "residual that only the caller and its slot hold, and returned; any other call is "
     "fallback(*args)."},
    {"pointwise_planes", py_pointwise_planes, METH_VARARGS,
     "pointwise_planes(packed, offset, C, M, mr, (H, W), bias, nargs, residual, places, "
     "expect, threads, fallback, ndarray, empty, uint8, float32) -> a callable: f(*args) = "
     "the 1x1 conv of args[0], one C-contiguous (1, C, H, W) image, by the weight packed by "
     "pack_rows (M x C, mr rows a panel) + bias per channel + args[residual] ((1, M, H, W) "
     "C-contiguous; residual -1: none), gemm_left's sums, as a new 64-byte aligned "
     "C-contiguous float32 (1, M, H, W) array, when args[places[i]] is expect[i] and the int "
     "function at address `threads` (0: none) returns at most 1; any other call is "
     "fallback(*args)."},
    {"rows_per_tile", py_rows_per_tile, METH_NOARGS,
     "The row count pack_rows must use at this level."},
    {"panel_width", py_panel_width, METH_NOARGS, "The panel width pack must use at this level."},
    {"set_blocking", py_set_blocking, METH_VARARGS,
     "set_blocking(KC, NC, inplace=1, KCL=128): gemm's rows and columns of B per cache "
     "block (0: by level, at AVX-512 KC 1024 and a block of about 512 KB), how its "
     "AVX-512 path reads A (0 copied, 1 in place, 2 in place unless its rows are a "
     "multiple of 4 KB apart), gemm_left's rows of B per block (benchmarks)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sgemm", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sgemm(void) {
    if (PyType_Ready(&ProductType) < 0) return NULL;
    if (PyType_Ready(&PointwiseType) < 0) return NULL;
    if (PyType_Ready(&PointwisePlanesType) < 0) return NULL;
    return PyModule_Create(&module);
}
