/* onnxviz.runtime.native._recurrent: the time loop of one direction of an LSTM or a GRU
 * with the default activations (sigmoid and tanh), no peepholes, no clip (kernels.nn_rnn
 * keeps the other cases on numpy).
 *
 *   lstm(proj, w, h0, c0, y, h_out, c_out, steps, batch, hidden, dirs, d, reverse)
 *   gru(proj, w1, w2, rbh, h0, y, h_out, steps, batch, hidden, dirs, d, reverse, lbr)
 *   qlstm(x_part, w, sums, offset, r_scale, bias, h0, c0, y, h_out, c_out, steps, batch,
 *         hidden, zero_ended, input_forget, lens=None) -> status, qlstm_layout()
 *
 * qlstm is com.microsoft DynamicQuantizeLSTM's loop (kernels/contrib_quant_dynamic.py):
 * per step the hidden state quantized to uint8 over the batch, an exact int32 product
 * with the int8/uint8 R, then the gates in numpy's float32 steps; its contract is at
 * py_qlstm.  The rest of this header is about lstm and gru.
 *
 * proj (T, B, G*H): the input projections X W^T of every step with the biases that are
 * plain sums (LSTM: Wb + Rb; GRU: Wb, plus Rb of z and r, and of the candidate unless
 * linear_before_reset puts it inside the reset gate's product: then rbh (H,) is that
 * bias).  Step t is proj[t]: a reverse direction's projections come in the order it reads
 * them.  y (T, D, B, H): step t writes its h into y[t, d] (y[T-1-t, d] when reverse), so
 * a bidirectional layer's two calls fill one Y.  h0, c0 (B, H) the initial states; h_out,
 * c_out (B, H) the final ones.  lens (B,) int64, optional: sample m's sequence ends
 * before step lens[m]; from there on its h and c stay as they were (its rows of y get
 * that h too: the caller zeroes them, as kernels.nn_rnn does for its numpy loops, and it
 * gives a padded reverse direction its inputs per sample reversed, with reverse false).
 *
 * The recurrent weights come packed (kernels.nn_rnn._native_packed, once per constant R):
 * per block of UNITS = 16 hidden units, a (H, G, 16) array whose row k holds R[g*H + u, k]
 * for the block's units u of every gate g (zero past H).  One step's product h R^T is then
 * a run of tile products, each a few rows of h times one block: G * 16 columns read row by
 * row, contiguously, and the block's tile holds all G gates of its units, so the step's
 * element-wise part (the epilogue) follows the tile while it is in the L1 cache and no
 * gate buffer goes through memory.  LSTM: G = 4 (i, o, f, c); GRU with
 * linear_before_reset: G = 3 (z, r and R_h h, the candidate's product that does not wait
 * for r); without: w1 with G = 2 (z, r), then w2 (G = 1, R_h) times r * h_prev.
 *
 * The numbers.  The products sum over k in order, one fused multiply-add per term at
 * levels 1-3 (separate multiply and add at level 0); sigmoid and tanh are our own float32
 * functions (recurrent_step.h), within 2-3 ulp of the exact values over the whole float
 * range, saturating to exactly 0 and +-1, NaN in NaN out.  So the values are not numpy's
 * bits (its tanh is its own SIMD one) but the float64 reference's to a few float32 ulps
 * per step (tests/runtime/test_native_recurrent.py); every run mode (stepped or not) runs
 * this same loop, so stepping shows the numbers a plain run gives.
 *
 * Levels (native/__init__.py): 0 generic C (the compiler's 4-lane vectors: SSE2 or NEON);
 * 1 AVX2+FMA (8 lanes; a block as two halves, up to 3-4 rows per tile); 2 and 3 AVX-512F
 * (16 lanes, up to 4 rows of a block's 4 gates: 16 accumulators; VNNI adds nothing to
 * float32).  Functions carry their instruction set as a target attribute: the module is
 * built without -march and runs on every x86-64 CPU. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "levels.h"
#include "vector_types.h"
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>


#if ONNXVIZ_X86
#include <immintrin.h>
#endif

static int level = 0;

#define UNITS 16
#define MR_MAX 4

enum { KIND_LSTM = 0, KIND_GRU_LBR = 1, KIND_GRU = 2 };

typedef struct {
    int kind, reverse;
    Py_ssize_t T, B, H, D, d;
    const float *proj, *w1, *w2, *rbh, *h0;
    float *y, *h_out;
    float *c;      /* LSTM: the cell state, updated in place (c_out, holding c0 first) */
    float *z, *rh; /* GRU without linear_before_reset: (B, H) each, per step */
    const int64_t *lens; /* sequence lengths (B,), or NULL: all T */
    float *c_kept;       /* LSTM with lens: (B, H), the cell states ended samples keep */
} Job;

/* Largest hidden size of qlstm: |code - zero point| <= 255 on both sides, so a sum of
 * H products stays below 2^31 (exact int32) for H up to 33025. */
#define QMAX_K 32768

/* One DynamicQuantizeLSTM direction (qlstm). */
typedef struct {
    Py_ssize_t T, B, H, kp;  /* kp: H rounded up to a multiple of 4 (k's pairs, quads) */
    const float *xp;         /* (T, B, 4H) x_part: the input product, scaled */
    const void *w;           /* R packed: int16 pairs, or int8 quads (bytes) */
    const int32_t *sums;     /* quads: (blocks, 4, 16) sum_k (R - zero point) */
    int32_t offset;          /* quads, byte pairs: what R's packed bytes lack of R - zr */
    int bytes;               /* 1: the quads layout (level 3), 0: the pairs */
    int pairs8;              /* 1: the pairs as bytes (AVX2: layout 2), widened in the tile */
    const float *rs;         /* (4H,) R's scale per column */
    const float *bias;       /* (4H,) Wb + Rb, or NULL */
    const float *h0;         /* (B, H) */
    const int64_t *lens;     /* (B,), or NULL: every sequence T steps */
    float *y, *h_out, *c;    /* (T, B, H); (B, H) the last h of each sequence; the cell */
    void *codes;             /* (B, kp) scratch: the step's codes, int16 or uint8 */
    int32_t *rowsum;         /* (B) scratch: quads, the sum of each row's codes */
    int32_t hzp;             /* the step's zero point */
    unsigned char *going;    /* (B) scratch: whose sequence runs this step */
    int zero_ended, input_forget;
} QJob;

typedef int16_t v4s __attribute__((vector_size(8)));
typedef int16_t v8s __attribute__((vector_size(16)));
typedef int16_t v16s __attribute__((vector_size(32)));
typedef uint8_t v4b __attribute__((vector_size(4)));
typedef uint8_t v8b __attribute__((vector_size(8)));
typedef uint8_t v16b __attribute__((vector_size(16)));

/* ---- generic C ------------------------------------------------------------------------ */


/* tile[m][g][u] = sum_k h[m * K + k] * w[k][g][u], one row at a time (4 gates of 16 units:
 * 16 four-lane sums, the baseline's register file). */
static void gemm_generic(const float *h, const float *w, Py_ssize_t K, int G, int mr,
                         float *tile) {
    for (int m = 0; m < mr; m++) {
        v4f acc[4 * UNITS / 4];
        const int nv = G * UNITS / 4;
        for (int q = 0; q < nv; q++) acc[q] = (v4f){0.0f, 0.0f, 0.0f, 0.0f};
        for (Py_ssize_t k = 0; k < K; k++) {
            const v4f hb = (v4f){0.0f, 0.0f, 0.0f, 0.0f} + h[m * K + k];
            const float *wk = w + k * G * UNITS;
            for (int q = 0; q < nv; q++) {
                v4f wv;
                memcpy(&wv, wk + 4 * q, sizeof wv);
                acc[q] = acc[q] + hb * wv;
            }
        }
        memcpy(tile + m * G * UNITS, acc, (size_t)nv * sizeof(v4f));
    }
}

/* qlstm's exact product, pairs layout: tile[m][g][u] = sum_k hc[m][k] * w(k, g, u) in
 * int32, hc the centered codes (int16), w per pair p of k, per gate g, per unit u the two
 * values of k = 2p and 2p + 1 (each product within 255^2: exact). */
static void qgemm_generic(const QJob *jb, Py_ssize_t m0, int mr, Py_ssize_t j,
                          int32_t *tile) {
    const Py_ssize_t kp = jb->kp, P = kp / 2;
    const int16_t *w = (const int16_t *)jb->w + j * P * 4 * 2 * UNITS;
    for (int m = 0; m < mr; m++) {
        const int16_t *hm = (const int16_t *)jb->codes + (m0 + m) * kp;
#if ONNXVIZ_X86 /* SSE2, x86-64's baseline: pmaddwd, four pairs at a time */
        __m128i acc[4 * UNITS / 4];
        for (int l = 0; l < 4 * UNITS / 4; l++) acc[l] = _mm_setzero_si128();
        for (Py_ssize_t p = 0; p < P; p++) {
            int32_t pair;
            memcpy(&pair, hm + 2 * p, sizeof pair);
            const __m128i hb = _mm_set1_epi32(pair);
            const int16_t *wp = w + p * 4 * 2 * UNITS;
            for (int l = 0; l < 4 * UNITS / 4; l++)
                acc[l] = _mm_add_epi32(
                    acc[l], _mm_madd_epi16(hb, _mm_loadu_si128((const __m128i *)(wp + 8 * l))));
        }
        memcpy(tile + m * 4 * UNITS, acc, sizeof acc);
#else
        int32_t acc[4 * UNITS] = {0};
        for (Py_ssize_t p = 0; p < P; p++) {
            const int32_t a0 = hm[2 * p], a1 = hm[2 * p + 1];
            const int16_t *wp = w + p * 4 * 2 * UNITS;
            for (int l = 0; l < 4 * UNITS; l++) acc[l] += a0 * wp[2 * l] + a1 * wp[2 * l + 1];
        }
        memcpy(tile + m * 4 * UNITS, acc, sizeof acc);
#endif
    }
}

#define SFX generic
#define VF v4f
#define VI v4i
#define VU v4u
#define VS v4s
#define VB v4b
#define VW 4
#define ATTR
#define GEMM(h, w, k, G, mr, tile) gemm_generic(h, w, k, G, mr, tile)
#define MR(G) 1
#define QGEMM(jb, m0, mr, j, tile) qgemm_generic(jb, m0, mr, j, tile)
#define QMR 1
#include "recurrent_step.h"
#undef SFX
#undef VF
#undef VI
#undef VU
#undef VS
#undef VB
#undef VW
#undef ATTR
#undef GEMM
#undef MR
#undef QGEMM
#undef QMR

#if ONNXVIZ_X86
/* ---- AVX2 + FMA ------------------------------------------------------------------------ */

#define T256 "avx2,fma"

/* One half (8 units) of gates g0 .. g0+GS-1 of a block's G for MRc rows: MRc * GS <= 12
 * accumulators.  At this level a block's weights come as two halves, each (H, G, 8)
 * (float_layout 1): a half's k rows are G * 32 contiguous bytes.  In the (H, G, 16) layout
 * each half read every cache line of the block for 32 of its 64 bytes, so a step pulled
 * each block through L2 once per half and per row tile: an LSTM of 256 units at batch 4
 * ran 78 us a step on a Zen 3 core against onnxruntime's 43. */
__attribute__((target(T256), always_inline)) static inline void
tile256(const float *h, const float *w, Py_ssize_t K, const int G, const int g0, const int GS,
        const int MRc, int half, float *tile) {
    __m256 acc[MR_MAX][4];
    for (int m = 0; m < MRc; m++)
        for (int g = 0; g < GS; g++) acc[m][g] = _mm256_setzero_ps();
    /* pointers stepped, no k counter: with one more live register GCC kept the weight
     * pointer on the stack, an add through memory every step (a chain of ~6 cycles) */
    const float *wk = w + half * K * G * 8 + g0 * 8;
    /* Unrolled by 4: a k step is 8 FMAs on 2 loads, 4 broadcasts and the loop's own
     * instructions, bound by the front end as _conv.c's sums8 was.  One LSTM node at
     * batch 4, Zen 3, us a step: hidden 128 17.2 -> 15.7, 256 44.6 -> 42.5, 512 (input
     * 64) 244 -> 218; a GRU of 256 32.6 -> 30.3; the same sums.  (8 gave no more.) */
#pragma GCC unroll 4
    for (const float *hk = h, *end = h + K; hk < end; hk++, wk += G * 8) {
        __m256 wv[4];
        for (int g = 0; g < GS; g++) wv[g] = _mm256_loadu_ps(wk + g * 8);
        for (int m = 0; m < MRc; m++) {
            const __m256 hb = _mm256_broadcast_ss(hk + m * K);
            for (int g = 0; g < GS; g++) acc[m][g] = _mm256_fmadd_ps(hb, wv[g], acc[m][g]);
        }
    }
    for (int m = 0; m < MRc; m++)
        for (int g = 0; g < GS; g++)
            _mm256_storeu_ps(tile + (m * G + g0 + g) * UNITS + half * 8, acc[m][g]);
}

/* Columns 0 .. NC-1 of a block's 2G (column c: half c / G, gate c % G, 8 units) for
 * MRc rows, MRc * NC <= 8 accumulators in named variables (gemm_avx2 says where).
 * tile256 makes a pass per half: one row on a half's G gates is G chains of fused
 * multiply-adds, each waiting on the last (latency 4, two pipes: 8 chains keep them
 * busy).  The same sums in the same order per column, so the same bits. */
__attribute__((target(T256), always_inline)) static inline void
cols256(const float *h, const float *w, Py_ssize_t K, const int G, const int NC, const int MRc,
        float *tile) {
    const __m256 z = _mm256_setzero_ps();
#define ACC_ROW(m)                                                                             \
    __m256 a##m##0 = z, a##m##1 = z, a##m##2 = z, a##m##3 = z, a##m##4 = z, a##m##5 = z,       \
           a##m##6 = z, a##m##7 = z;
    ACC_ROW(0)
    ACC_ROW(1)
    ACC_ROW(2)
    ACC_ROW(3)
#undef ACC_ROW
    /* Column c's k row: half c / G's pointer plus gate c % G's 8 floats. */
    const float *w0 = w, *w1 = w + K * G * 8;
#define COL_PTR(c) ((c) < G ? w0 + (c) * 8 : w1 + ((c) - G) * 8)
#pragma GCC unroll 4 /* as tile256's */
    for (const float *hk = h, *end = h + K; hk < end; hk++, w0 += G * 8, w1 += G * 8) {
        /* B's columns as memory operands of the multiply-adds (one row's 8 columns and
         * 8 accumulators held in registers took 17 of the 16 there are). */
#define B_COL(c) _mm256_loadu_ps(COL_PTR(c))
#define ROW_FMAS(m)                                                                            \
    if (m < MRc) {                                                                             \
        const __m256 hb = _mm256_broadcast_ss(hk + m * K);                                     \
        a##m##0 = _mm256_fmadd_ps(hb, B_COL(0), a##m##0);                                      \
        if (NC > 1) a##m##1 = _mm256_fmadd_ps(hb, B_COL(1), a##m##1);                          \
        if (NC > 2) a##m##2 = _mm256_fmadd_ps(hb, B_COL(2), a##m##2);                          \
        if (NC > 3) a##m##3 = _mm256_fmadd_ps(hb, B_COL(3), a##m##3);                          \
        if (NC > 4) a##m##4 = _mm256_fmadd_ps(hb, B_COL(4), a##m##4);                          \
        if (NC > 5) a##m##5 = _mm256_fmadd_ps(hb, B_COL(5), a##m##5);                          \
        if (NC > 6) a##m##6 = _mm256_fmadd_ps(hb, B_COL(6), a##m##6);                          \
        if (NC > 7) a##m##7 = _mm256_fmadd_ps(hb, B_COL(7), a##m##7);                          \
    }
        ROW_FMAS(0)
        ROW_FMAS(1)
        ROW_FMAS(2)
        ROW_FMAS(3)
#undef ROW_FMAS
#undef B_COL
    }
#undef COL_PTR
    /* column c of row m to the tile at gate c % G, half c / G */
#define OUT(m, c)                                                                              \
    if (m < MRc && (c) < NC)                                                                   \
        _mm256_storeu_ps(tile + (m * G + (c) % G) * UNITS + ((c) / G) * 8, a##m##c);
#define OUT_ROW(m) OUT(m, 0) OUT(m, 1) OUT(m, 2) OUT(m, 3) OUT(m, 4) OUT(m, 5) OUT(m, 6) OUT(m, 7)
    OUT_ROW(0)
    OUT_ROW(1)
    OUT_ROW(2)
    OUT_ROW(3)
#undef OUT_ROW
#undef OUT
}

/* Rows a tile takes: 4 for every G.  At 3 rows by 4 gates, batch 4 ran as a 3-row tile
 * and a 1-row one, reading the weights twice a step (an LSTM of 256 units at batch 4,
 * Zen 3: 62 us a step, onnxruntime 44). */
#define MR256(G) 4

/* The tile product of mr rows by a block's G gates.  Where tile256's passes (a half of
 * 8 units at a time) would keep fewer than 6 accumulator chains, cols256 takes both
 * halves at once: one row (G to 2G chains), and one gate (a GRU's candidate product) on
 * 2-4 rows; else tile256 (8-12 chains already).  cols256 with more than 8 accumulators
 * kept some on the stack (GCC, 16 ymm registers).  Zen 4 at this level, us a step: a
 * GRU of 256 units at batch 4 (its z/r and candidate products) 26-28 -> 20, one of 128
 * at batch 1 4.3 -> 3.4. */
__attribute__((target(T256))) static void gemm_avx2(const float *h, const float *w,
                                                    Py_ssize_t K, int G, int mr, float *tile) {
    switch (mr * 8 + G) {
    case 8 + 1: cols256(h, w, K, 1, 2, 1, tile); return;
    case 8 + 2: cols256(h, w, K, 2, 4, 1, tile); return;
    case 8 + 3: cols256(h, w, K, 3, 6, 1, tile); return;
    case 8 + 4: cols256(h, w, K, 4, 8, 1, tile); return;
    case 16 + 1: cols256(h, w, K, 1, 2, 2, tile); return;
    case 16 + 2: cols256(h, w, K, 2, 4, 2, tile); return;
    case 24 + 1: cols256(h, w, K, 1, 2, 3, tile); return;
    case 32 + 1: cols256(h, w, K, 1, 2, 4, tile); return;
    default: break;
    }
    for (int half = 0; half < 2; half++) {
        if (G == 4 && mr == 4) {
            tile256(h, w, K, 4, 0, 2, 4, half, tile);
            tile256(h, w, K, 4, 2, 2, 4, half, tile);
            continue;
        }
        switch (G * 8 + mr) {
#define C256(g, m)                                                                             \
    case g * 8 + m:                                                                            \
        tile256(h, w, K, g, 0, g, m, half, tile);                                              \
        break;
            C256(2, 3) C256(2, 4) C256(3, 2) C256(3, 3) C256(3, 4) C256(4, 2) C256(4, 3)
#undef C256
        }
    }
}

/* Gates g0 .. g0+GS-1 of a block's 4, both 8-unit halves, for MRc rows of qlstm's
 * product: MRc * GS * 2 <= 8 accumulators.  vpmaddwd multiplies the 16-bit pairs (both
 * within [-255, 255]: no saturation, it is never vpmaddubsw) and adds the two products
 * into int32, exactly.  A gate's k pair is one 64-byte line (its two halves side by
 * side), read whole: a tile per half read each line for half its bytes, twice a step,
 * and batch 4 ran as a 3-row and a 1-row tile, reading the weights twice more
 * (a dynamic-quantized LSTM of 256 units at batch 4 ran at 2.1x onnxruntime's time). */
__attribute__((target(T256), always_inline)) static inline void
qtile256(const int16_t *hc, Py_ssize_t kp, const void *w, const int bytes, Py_ssize_t P,
         const int MRc, const int g0, const int GS, int32_t *tile) {
    /* w: int16 pairs, or with `bytes` (layout 2, byte pairs: R - o, o 128 for a uint8 R)
     * the same pairs as bytes, widened to int16 as they are loaded (vpmovsxbw): half the
     * bytes a step streams, so a 256-unit layer's R (256 KB a direction, not 512) stays
     * in a 512 KB L2 between steps; the zero point comes in as a row term after
     * (qgemm_avx2).  The same exact products. */
    __m256i acc[MR_MAX][4][2];
    for (int m = 0; m < MRc; m++)
        for (int g = 0; g < GS; g++) acc[m][g][0] = acc[m][g][1] = _mm256_setzero_si256();
    /* pointers stepped, no p counter (as tile256); a step of 4 gates' 2 x 16 values */
    const char *wp = (const char *)w + (Py_ssize_t)g0 * 2 * UNITS * (bytes ? 1 : 2);
    const Py_ssize_t wstep = 4 * 2 * UNITS * (bytes ? 1 : 2);
    /* unrolled as tile256 (the dynamic-quantized LSTM + GRU model 0.94 of its time) */
#pragma GCC unroll 4
    for (const int16_t *hp = hc, *end = hc + 2 * P; hp < end; hp += 2, wp += wstep) {
        __m256i wv[4][2];
        for (int g = 0; g < GS; g++) {
            if (bytes) {
                const int8_t *w8 = (const int8_t *)wp + g * 2 * UNITS;
                wv[g][0] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w8));
                wv[g][1] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w8 + UNITS)));
            } else {
                const int16_t *w16 = (const int16_t *)wp + g * 2 * UNITS;
                wv[g][0] = _mm256_loadu_si256((const __m256i *)w16);
                wv[g][1] = _mm256_loadu_si256((const __m256i *)(w16 + UNITS));
            }
        }
        for (int m = 0; m < MRc; m++) {
            int32_t pair;
            memcpy(&pair, hp + m * kp, sizeof pair);
            const __m256i hb = _mm256_set1_epi32(pair);
            for (int g = 0; g < GS; g++)
                for (int v = 0; v < 2; v++)
                    acc[m][g][v] =
                        _mm256_add_epi32(acc[m][g][v], _mm256_madd_epi16(hb, wv[g][v]));
        }
    }
    for (int m = 0; m < MRc; m++)
        for (int g = 0; g < GS; g++)
            for (int v = 0; v < 2; v++)
                _mm256_storeu_si256((__m256i *)(tile + (m * 4 + g0 + g) * UNITS + v * 8),
                                    acc[m][g][v]);
}

#define QMR256 4

/* Passes over the gates so that a tile holds at most 8 accumulators: 1 row all 4 gates,
 * 2 rows 2 gates a pass, 3-4 rows 1 gate a pass (an int32 add's latency is one cycle: few
 * chains are enough).  BYTES: the byte pairs (a constant, so each form compiles apart). */
#define QGEMM_AVX2_PASSES(BYTES)                                                           \
    switch (mr) {                                                                          \
    case 1: qtile256(hc, kp, w, BYTES, P, 1, 0, 4, tile); break;                           \
    case 2:                                                                                \
        qtile256(hc, kp, w, BYTES, P, 2, 0, 2, tile);                                      \
        qtile256(hc, kp, w, BYTES, P, 2, 2, 2, tile);                                      \
        break;                                                                             \
    case 3: /* (2 gates a pass: 12 accumulators, which GCC kept on the stack) */           \
        for (int g = 0; g < 4; g++) qtile256(hc, kp, w, BYTES, P, 3, g, 1, tile);          \
        break;                                                                             \
    default:                                                                               \
        for (int g = 0; g < 4; g++) qtile256(hc, kp, w, BYTES, P, 4, g, 1, tile);          \
        break;                                                                             \
    }

__attribute__((target(T256))) static void qgemm_avx2(const QJob *jb, Py_ssize_t m0, int mr,
                                                     Py_ssize_t j, int32_t *tile) {
    const Py_ssize_t kp = jb->kp, P = kp / 2;
    const int16_t *hc = (const int16_t *)jb->codes + m0 * kp;
    const Py_ssize_t at = j * P * 4 * 2 * UNITS; /* the block's first value */
    if (!jb->pairs8) {
        const int16_t *w = (const int16_t *)jb->w + at;
        QGEMM_AVX2_PASSES(0)
        return;
    }
    const int8_t *w = (const int8_t *)jb->w + at;
    QGEMM_AVX2_PASSES(1)
    if (jb->offset) { /* + offset * sum_k hc[m][k]: R - zr = (R - o) + (o - zr) */
        for (int m = 0; m < mr; m++) {
            int32_t sum = 0; /* |sum| <= 255 kp: no overflow */
            for (Py_ssize_t k = 0; k < kp; k++) sum += hc[m * kp + k];
            const uint32_t add = (uint32_t)jb->offset * (uint32_t)sum;
            int32_t *row = tile + m * 4 * UNITS;
            for (int l = 0; l < 4 * UNITS; l++) row[l] = (int32_t)((uint32_t)row[l] + add);
        }
    }
}
#undef QGEMM_AVX2_PASSES

#define SFX avx2
#define VF v8f
#define VI v8i
#define VU v8u
#define VS v8s
#define VB v8b
#define VW 8
#define ATTR __attribute__((target(T256)))
#define GEMM(h, w, k, G, mr, tile) gemm_avx2(h, w, k, G, mr, tile)
#define MR(G) MR256(G)
#define QGEMM(jb, m0, mr, j, tile) qgemm_avx2(jb, m0, mr, j, tile)
#define QMR QMR256
#include "recurrent_step.h"
#undef SFX
#undef VF
#undef VI
#undef VU
#undef VS
#undef VB
#undef VW
#undef ATTR
#undef GEMM
#undef MR
#undef QGEMM
#undef QMR

/* ---- AVX-512F ---------------------------------------------------------------------------- */

#define T512 "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"

/* A block's G gates (16 units each) for MRc rows: up to 16 accumulators of 32 registers. */
__attribute__((target(T512), always_inline)) static inline void
tile512(const float *h, const float *w, Py_ssize_t K, const int G, const int MRc, float *tile) {
    __m512 acc[MR_MAX][4];
    for (int m = 0; m < MRc; m++)
        for (int g = 0; g < G; g++) acc[m][g] = _mm512_setzero_ps();
    for (Py_ssize_t k = 0; k < K; k++) {
        const float *wk = w + k * G * UNITS;
        __m512 wv[4];
        for (int g = 0; g < G; g++) wv[g] = _mm512_loadu_ps(wk + g * UNITS);
        for (int m = 0; m < MRc; m++) {
            const __m512 hb = _mm512_set1_ps(h[m * K + k]);
            for (int g = 0; g < G; g++) acc[m][g] = _mm512_fmadd_ps(hb, wv[g], acc[m][g]);
        }
    }
    for (int m = 0; m < MRc; m++)
        for (int g = 0; g < G; g++) _mm512_storeu_ps(tile + (m * G + g) * UNITS, acc[m][g]);
}

__attribute__((target(T512))) static void gemm_avx512(const float *h, const float *w,
                                                      Py_ssize_t K, int G, int mr,
                                                      float *tile) {
    switch (G * 8 + mr) {
#define C512(g, m)                                                                             \
    case g * 8 + m:                                                                            \
        tile512(h, w, K, g, m, tile);                                                          \
        break;
        C512(1, 1) C512(1, 2) C512(1, 3) C512(1, 4) C512(2, 1) C512(2, 2) C512(2, 3)
        C512(2, 4) C512(3, 1) C512(3, 2) C512(3, 3) C512(3, 4) C512(4, 1) C512(4, 2)
        C512(4, 3) C512(4, 4)
#undef C512
    }
}

/* A block's 4 gates (16 units each) for MRc rows of qlstm's product, pairs layout: 16
 * int32 accumulators, vpmaddwd and an add per 32 products (as qtile256). */
__attribute__((target(T512), always_inline)) static inline void
qtile512(const int16_t *hc, Py_ssize_t kp, const int16_t *w, Py_ssize_t P, const int MRc,
         int32_t *tile) {
    __m512i acc[MR_MAX][4];
    for (int m = 0; m < MRc; m++)
        for (int g = 0; g < 4; g++) acc[m][g] = _mm512_setzero_si512();
    for (Py_ssize_t p = 0; p < P; p++) {
        const int16_t *wp = w + p * 4 * 2 * UNITS;
        __m512i wv[4];
        for (int g = 0; g < 4; g++) wv[g] = _mm512_loadu_si512(wp + g * 2 * UNITS);
        for (int m = 0; m < MRc; m++) {
            int32_t pair;
            memcpy(&pair, hc + m * kp + 2 * p, sizeof pair);
            const __m512i hb = _mm512_set1_epi32(pair);
            for (int g = 0; g < 4; g++)
                acc[m][g] = _mm512_add_epi32(acc[m][g], _mm512_madd_epi16(hb, wv[g]));
        }
    }
    for (int m = 0; m < MRc; m++)
        for (int g = 0; g < 4; g++) _mm512_storeu_si512(tile + (m * 4 + g) * UNITS, acc[m][g]);
}

/* The quads layout (level 3, AVX-512 VNNI): w holds per quad q of k, per gate, per unit,
 * the four bytes R[4q + e] - o (int8: o = 0 for int8 R, 128 for uint8), and vpdpbusd
 * multiplies them by the uint8 codes and adds four products into int32 without
 * saturation (it wraps; the sum of K products within 255 * 128 stays below 2^31 anyway).
 * Then sum_k (code - z)(R - zr) = sum_k code (R - o) + (o - zr) sum_k code
 *                                 - z sum_k (R - zr),
 * the last two from the row's code sum and the packed column sums, in int32 arithmetic
 * modulo 2^32: the result fits in int32 (|.| <= K 255^2 < 2^31), so it is exact. */
#define TVNNI T512 ",avx512vnni"
__attribute__((target(TVNNI), always_inline)) static inline void
qtile_vnni(const uint8_t *hq, Py_ssize_t kp, const int8_t *w, const int32_t *sums,
           const int32_t *rowsum, int32_t offset, int32_t hzp, const int MRc, int32_t *tile) {
    __m512i acc[MR_MAX][4];
    for (int m = 0; m < MRc; m++)
        for (int g = 0; g < 4; g++) acc[m][g] = _mm512_setzero_si512();
    const Py_ssize_t Q = kp / 4;
    for (Py_ssize_t q = 0; q < Q; q++) {
        const int8_t *wq = w + q * 4 * 4 * UNITS;
        __m512i wv[4];
        for (int g = 0; g < 4; g++) wv[g] = _mm512_loadu_si512(wq + g * 4 * UNITS);
        for (int m = 0; m < MRc; m++) {
            int32_t quad;
            memcpy(&quad, hq + m * kp + 4 * q, sizeof quad);
            const __m512i hb = _mm512_set1_epi32(quad);
            for (int g = 0; g < 4; g++) acc[m][g] = _mm512_dpbusd_epi32(acc[m][g], hb, wv[g]);
        }
    }
    const __m512i z = _mm512_set1_epi32(hzp);
    for (int m = 0; m < MRc; m++) {
        const __m512i row = _mm512_set1_epi32((int32_t)((uint32_t)offset * (uint32_t)rowsum[m]));
        for (int g = 0; g < 4; g++) {
            const __m512i col = _mm512_mullo_epi32(z, _mm512_loadu_si512(sums + g * UNITS));
            const __m512i v = _mm512_sub_epi32(_mm512_add_epi32(acc[m][g], row), col);
            _mm512_storeu_si512(tile + (m * 4 + g) * UNITS, v);
        }
    }
}

__attribute__((target(T512))) static void qgemm_avx512(const QJob *jb, Py_ssize_t m0, int mr,
                                                       Py_ssize_t j, int32_t *tile) {
    const Py_ssize_t kp = jb->kp, P = kp / 2;
    const int16_t *hc = (const int16_t *)jb->codes + m0 * kp;
    const int16_t *w = (const int16_t *)jb->w + j * P * 4 * 2 * UNITS;
    switch (mr) {
    case 1: qtile512(hc, kp, w, P, 1, tile); break;
    case 2: qtile512(hc, kp, w, P, 2, tile); break;
    case 3: qtile512(hc, kp, w, P, 3, tile); break;
    default: qtile512(hc, kp, w, P, 4, tile); break;
    }
}

__attribute__((target(TVNNI))) static void qgemm_vnni(const QJob *jb, Py_ssize_t m0, int mr,
                                                     Py_ssize_t j, int32_t *tile) {
    const Py_ssize_t kp = jb->kp;
    const uint8_t *hq = (const uint8_t *)jb->codes + m0 * kp;
    const int8_t *w = (const int8_t *)jb->w + j * kp * 4 * UNITS;
    const int32_t *sums = jb->sums + j * 4 * UNITS, *rs = jb->rowsum + m0;
    const int32_t o = jb->offset, z = jb->hzp;
    switch (mr) {
    case 1: qtile_vnni(hq, kp, w, sums, rs, o, z, 1, tile); break;
    case 2: qtile_vnni(hq, kp, w, sums, rs, o, z, 2, tile); break;
    case 3: qtile_vnni(hq, kp, w, sums, rs, o, z, 3, tile); break;
    default: qtile_vnni(hq, kp, w, sums, rs, o, z, 4, tile); break;
    }
}

#define SFX avx512
#define VF v16f
#define VI v16i
#define VU v16u
#define VS v16s
#define VB v16b
#define VW 16
#define ATTR __attribute__((target(T512)))
#define GEMM(h, w, k, G, mr, tile) gemm_avx512(h, w, k, G, mr, tile)
#define MR(G) 4
#define QGEMM(jb, m0, mr, j, tile) (jb->bytes ? qgemm_vnni : qgemm_avx512)(jb, m0, mr, j, tile)
#define QMR 4
#include "recurrent_step.h"
#undef SFX
#undef VF
#undef VI
#undef VU
#undef VS
#undef VB
#undef VW
#undef ATTR
#undef GEMM
#undef MR
#undef QGEMM
#undef QMR
#endif

static int qrun(QJob *jb) {
#if ONNXVIZ_X86
    if (level >= 2) return qrun_avx512(jb);
    if (level == 1) return qrun_avx2(jb);
#endif
    return qrun_generic(jb);
}

static void run(const Job *jb) {
#if ONNXVIZ_X86
    if (level >= 2) {
        run_avx512(jb);
        return;
    }
    if (level == 1) {
        run_avx2(jb);
        return;
    }
#endif
    run_generic(jb);
}

/* ---- Python ----------------------------------------------------------------------------- */

/* a * b into *out, or -1 when it overflows (a float count whose bytes fit Py_ssize_t). */
static int mul_size(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) {
    if (a < 0 || b < 0 || (b && a > PY_SSIZE_T_MAX / 4 / b)) return -1;
    *out = a * b;
    return 0;
}

static int overlap(const Py_buffer *a, const Py_buffer *b) {
    const char *a0 = a->buf, *b0 = b->buf;
    return a->len && b->len && a0 < b0 + b->len && b0 < a0 + a->len;
}

#define MAX_BUFS 12

typedef struct {
    Py_buffer v[MAX_BUFS];
    int writable[MAX_BUFS];
    int n;
} Bufs;

static void release(Bufs *bs) {
    for (int i = 0; i < bs->n; i++) PyBuffer_Release(&bs->v[i]);
    bs->n = 0;
}

/* Adds a buffer of `count` floats; on failure releases them all. */
static float *add_buf(Bufs *bs, PyObject *obj, Py_ssize_t count, int writable,
                      const char *name) {
    if (onnxviz_get_floats(obj, &bs->v[bs->n], count, 1, writable, name) < 0) {
        release(bs);
        return NULL;
    }
    bs->writable[bs->n] = writable;
    return bs->v[bs->n++].buf;
}

/* The (B,) int64 sequence lengths into *lens, or None; kept in bs (released with it). */
static int get_lens(Bufs *bs, PyObject *obj, Py_ssize_t batch, const int64_t **lens) {
    if (obj == Py_None) return 0;
    Py_buffer *view = &bs->v[bs->n];
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        release(bs);
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    if ((strcmp(f, "q") != 0 && strcmp(f, "l") != 0) || view->itemsize != 8 ||
        view->len != batch * 8) {
        PyBuffer_Release(view);
        release(bs);
        PyErr_SetString(PyExc_ValueError, "lens: expected batch int64 values");
        return -1;
    }
    bs->writable[bs->n++] = 0;
    *lens = view->buf;
    return 0;
}

/* No output may share memory with another buffer: the loop reads its inputs after it has
 * begun writing its outputs. */
static int check_overlaps(Bufs *bs) {
    for (int i = 0; i < bs->n; i++)
        for (int k = 0; k < bs->n; k++)
            if (i != k && (bs->writable[i] || bs->writable[k]) &&
                overlap(&bs->v[i], &bs->v[k])) {
                PyErr_SetString(PyExc_ValueError, "recurrent: an output overlaps another buffer");
                release(bs);
                return -1;
            }
    return 0;
}

/* The sizes every call checks: steps, batch, hidden >= 1 and bounded, dirs 1 or 2, d a
 * direction; the counts of proj (G = its gates), y, the states and the packed weights
 * (w: packed gates gw). */
static int check_sizes(Job *jb, const char *name, int G, Py_ssize_t *proj_n, Py_ssize_t *y_n,
                       Py_ssize_t *state_n) {
    const Py_ssize_t limit = (Py_ssize_t)1 << 30;
    if (jb->T < 1 || jb->B < 1 || jb->H < 1 || jb->T > limit || jb->B > limit ||
        jb->H > limit) {
        PyErr_Format(PyExc_ValueError, "%s: steps, batch and hidden must be in 1..2**30", name);
        return -1;
    }
    if (jb->D < 1 || jb->D > 2 || jb->d < 0 || jb->d >= jb->D) {
        PyErr_Format(PyExc_ValueError, "%s: dirs must be 1 or 2 and d one of them", name);
        return -1;
    }
    Py_ssize_t t;
    if (mul_size(jb->T, jb->B, &t) || mul_size(t, jb->H, &t) || mul_size(t, G, proj_n) ||
        mul_size(jb->T, jb->D, &t) || mul_size(t, jb->B, &t) || mul_size(t, jb->H, y_n) ||
        mul_size(jb->B, jb->H, state_n) || mul_size(jb->H, jb->H + UNITS, &t) ||
        mul_size(t, 4, &t)) {
        PyErr_Format(PyExc_ValueError, "%s: sizes too large", name);
        return -1;
    }
    return 0;
}

/* Floats of a packed weight of G gates: ceil(H / 16) blocks of (H, G, 16). */
static Py_ssize_t packed_count(Py_ssize_t H, int G) {
    return (H + UNITS - 1) / UNITS * H * G * UNITS;
}

static PyObject *py_lstm(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *po, *wo, *h0o, *c0o, *yo, *ho, *co, *lo = Py_None;
    Job jb = {0};
    if (!PyArg_ParseTuple(args, "OOOOOOOnnnnnp|O:lstm", &po, &wo, &h0o, &c0o, &yo, &ho, &co,
                          &jb.T, &jb.B, &jb.H, &jb.D, &jb.d, &jb.reverse, &lo))
        return NULL;
    jb.kind = KIND_LSTM;
    Py_ssize_t proj_n, y_n, state_n;
    if (check_sizes(&jb, "lstm", 4, &proj_n, &y_n, &state_n) < 0) return NULL;
    Bufs bs = {.n = 0};
    const float *c0;
    if (!(jb.proj = add_buf(&bs, po, proj_n, 0, "proj")) ||
        !(jb.w1 = add_buf(&bs, wo, packed_count(jb.H, 4), 0, "w")) ||
        !(jb.h0 = add_buf(&bs, h0o, state_n, 0, "h0")) ||
        !(c0 = add_buf(&bs, c0o, state_n, 0, "c0")) ||
        !(jb.y = add_buf(&bs, yo, y_n, 1, "y")) ||
        !(jb.h_out = add_buf(&bs, ho, state_n, 1, "h_out")) ||
        !(jb.c = add_buf(&bs, co, state_n, 1, "c_out")) || get_lens(&bs, lo, jb.B, &jb.lens) < 0)
        return NULL;
    if (check_overlaps(&bs) < 0) return NULL;
    if (jb.lens && !(jb.c_kept = PyMem_RawMalloc((size_t)state_n * sizeof(float)))) {
        release(&bs);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS;
    memcpy(jb.c, c0, (size_t)state_n * 4);
    run(&jb);
    Py_END_ALLOW_THREADS;
    PyMem_RawFree(jb.c_kept);
    release(&bs);
    Py_RETURN_NONE;
}

/* Adds a C-contiguous buffer of exactly `count` values of the one-character buffer format
 * `fmt` and `size` bytes each (read only); on failure releases them all. */
static const void *add_typed_buf(Bufs *bs, PyObject *obj, Py_ssize_t count, char fmt,
                                 Py_ssize_t size, const char *name) {
    Py_buffer *view = &bs->v[bs->n];
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        release(bs);
        return NULL;
    }
    const char *f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    if (f[0] != fmt || f[1] || view->itemsize != size || view->len != count * size) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd values of format '%c'", name, count,
                     fmt);
        PyBuffer_Release(view);
        release(bs);
        return NULL;
    }
    bs->writable[bs->n] = 0;
    return bs->v[bs->n++].buf;
}

/* The layout qlstm takes R in at the level set: 1 (quads of bytes, AVX-512 VNNI) at level
 * 3, 2 (pairs of bytes, widened in the tile) at AVX2, else 0 (pairs of int16). */
static int qlstm_layout(void) { return level >= 3 ? 1 : level == 1 ? 2 : 0; }

/* The layout lstm, gru and held take the float recurrent weights in at the level set
 * (kernels/nn_rnn._native_packed): 0 per block of UNITS units (H, G, UNITS); 1 (AVX2)
 * per block two halves of 8 units, each (H, G, 8) (tile256). */
static int float_layout(void) { return level == 1; }

/* qlstm(x_part, w, sums, offset, r_scale, bias, h0, c0, y, h_out, c_out, steps, batch,
 *       hidden, zero_ended, input_forget, lens=None) -> status
 *
 * One direction of com.microsoft DynamicQuantizeLSTM with the default activations, no
 * peepholes, no clip: kernels/contrib_quant_dynamic.py's numpy step loop (its
 * `_numpy_steps`) in C, the same numbers but for the sigmoid and tanh (this module's).
 * Per step t the state offered (h0 at first) is quantized to uint8 by
 * DynamicQuantizeLinear's float32 steps, over the whole batch; the exact int32 product
 * acc = (codes - zero point) (R - R's zero point); the gates
 * x_part[t] + float32(acc) * float32(h_scale * r_scale) (+ bias), each step rounded as
 * numpy rounds it; then the cell.  A sequence m ends before step lens[m]: from there on
 * its row of y is 0, its h (h_out) and c stay, and the state it offers the next step's
 * quantization is 0 (zero_ended) or its last h (0 for an empty sequence).
 *
 *   x_part (T, B, 4H) float32: the input product, scaled, in the order the direction
 *     reads its steps; gates i, o, f, c;
 *   w: R [H, 4H] packed per block of 16 hidden units in the layout of qlstm_layout()
 *     (kp: H rounded up to a multiple of 4; zero past H rows and columns; zr: R's zero
 *     point):
 *     0, pairs: int16 (ceil(H / 16), kp / 2, 4, 16, 2), [j, p, g, u, e] =
 *        R[2p + e, g*H + 16j + u] - zr; sums None, offset 0;
 *     2, byte pairs (AVX2): int8 of the same shape, R[2p + e, g*H + 16j + u] - o (o = 0
 *        for int8 R, 128 for uint8); sums None; offset = o - zr;
 *     1, quads: int8 (ceil(H / 16), kp / 4, 4, 16, 4), [j, q, g, u, e] =
 *        R[4q + e, g*H + 16j + u] - o (o = 0 for int8 R, 128 for uint8); sums int32
 *        (ceil(H / 16), 4, 16) the column sums of R - zr; offset = o - zr;
 *   r_scale (4H,) float32, bias (4H,) float32 Wb + Rb or None, h0 and c0 (B, H);
 *   y (T, B, H), h_out and c_out (B, H): written (h_out: the last h of each sequence);
 *   lens (B,) int64 or None (every sequence T steps).
 * H is at most 32768 (exact int32 sums).  Returns 0, or -1 when a state to quantize held
 * a NaN or its range overflowed: the outputs are then incomplete, and the caller runs
 * its numpy steps (which decide those cases). */
static PyObject *py_qlstm(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *wo, *so, *rso, *bo, *h0o, *c0o, *yo, *ho, *co, *lo = Py_None;
    QJob jb = {0};
    int offset;
    if (!PyArg_ParseTuple(args, "OOOiOOOOOOOnnnpp|O:qlstm", &xo, &wo, &so, &offset, &rso, &bo,
                          &h0o, &c0o, &yo, &ho, &co, &jb.T, &jb.B, &jb.H, &jb.zero_ended,
                          &jb.input_forget, &lo))
        return NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 30;
    if (jb.T < 1 || jb.B < 1 || jb.H < 1 || jb.T > limit || jb.B > limit || jb.H > QMAX_K) {
        PyErr_Format(PyExc_ValueError,
                     "qlstm: steps and batch must be in 1..2**30, hidden in 1..%d", QMAX_K);
        return NULL;
    }
    const int layout = qlstm_layout();
    jb.bytes = layout == 1;
    jb.pairs8 = layout == 2;
    if (jb.bytes    ? (so == Py_None || offset < -255 || offset > 255)
        : jb.pairs8 ? (so != Py_None || offset < -255 || offset > 255)
                    : (so != Py_None || offset != 0)) {
        PyErr_SetString(PyExc_ValueError,
                        "qlstm: the quads layout takes sums and an offset within 255, the "
                        "byte pairs an offset within 255, the pairs neither (see qlstm_layout)");
        return NULL;
    }
    jb.offset = offset;
    jb.kp = (jb.H + 3) / 4 * 4;
    const Py_ssize_t nb = (jb.H + UNITS - 1) / UNITS;
    Py_ssize_t x_n, y_n, state_n, t;
    if (mul_size(jb.T, jb.B, &t) || mul_size(t, 4 * jb.H, &x_n) || mul_size(t, jb.H, &y_n) ||
        mul_size(jb.B, jb.H, &state_n) || mul_size(jb.B, jb.kp + 8, &t)) {
        PyErr_SetString(PyExc_ValueError, "qlstm: sizes too large");
        return NULL;
    }
    Py_ssize_t w_n; /* R's packed values */
    if (mul_size(nb, jb.kp, &t) || mul_size(t, 4 * UNITS, &w_n)) {
        PyErr_SetString(PyExc_ValueError, "qlstm: sizes too large");
        return NULL;
    }
    Bufs bs = {.n = 0};
    const float *c0;
    if (!(jb.xp = add_buf(&bs, xo, x_n, 0, "x_part")) ||
        !(jb.w = jb.bytes || jb.pairs8 ? add_typed_buf(&bs, wo, w_n, 'b', 1, "w")
                                       : add_typed_buf(&bs, wo, w_n, 'h', 2, "w")) ||
        (jb.bytes && !(jb.sums = add_typed_buf(&bs, so, nb * 4 * UNITS, 'i', 4, "sums"))) ||
        !(jb.rs = add_buf(&bs, rso, 4 * jb.H, 0, "r_scale")) ||
        (bo != Py_None && !(jb.bias = add_buf(&bs, bo, 4 * jb.H, 0, "bias"))) ||
        !(jb.h0 = add_buf(&bs, h0o, state_n, 0, "h0")) ||
        !(c0 = add_buf(&bs, c0o, state_n, 0, "c0")) ||
        !(jb.y = add_buf(&bs, yo, y_n, 1, "y")) ||
        !(jb.h_out = add_buf(&bs, ho, state_n, 1, "h_out")) ||
        !(jb.c = add_buf(&bs, co, state_n, 1, "c_out")) || get_lens(&bs, lo, jb.B, &jb.lens) < 0)
        return NULL;
    if (check_overlaps(&bs) < 0) return NULL;
    /* codes (B, kp) int16 (or bytes), then the row sums (B) int32, then `going` (B) */
    const size_t codes_bytes = (size_t)(jb.B * jb.kp) * sizeof(int16_t);
    char *scratch = PyMem_RawMalloc(codes_bytes + (size_t)jb.B * (sizeof(int32_t) + 1));
    if (!scratch) {
        release(&bs);
        return PyErr_NoMemory();
    }
    jb.codes = scratch;
    jb.rowsum = (int32_t *)(scratch + codes_bytes); /* codes_bytes: a multiple of 8 */
    jb.going = (unsigned char *)(jb.rowsum + jb.B);
    int status;
    Py_BEGIN_ALLOW_THREADS;
    memcpy(jb.c, c0, (size_t)state_n * sizeof(float));
    status = qrun(&jb);
    Py_END_ALLOW_THREADS;
    PyMem_RawFree(scratch);
    release(&bs);
    return PyLong_FromLong(status);
}

static PyObject *py_qlstm_layout(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(qlstm_layout());
}

static PyObject *py_float_layout(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(float_layout());
}

static PyObject *py_gru(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *po, *w1o, *w2o, *rbo, *h0o, *yo, *ho, *lo = Py_None;
    Job jb = {0};
    int lbr;
    if (!PyArg_ParseTuple(args, "OOOOOOOnnnnnpp|O:gru", &po, &w1o, &w2o, &rbo, &h0o, &yo, &ho,
                          &jb.T, &jb.B, &jb.H, &jb.D, &jb.d, &jb.reverse, &lbr, &lo))
        return NULL;
    jb.kind = lbr ? KIND_GRU_LBR : KIND_GRU;
    Py_ssize_t proj_n, y_n, state_n;
    if (check_sizes(&jb, "gru", 3, &proj_n, &y_n, &state_n) < 0) return NULL;
    if (lbr ? (w2o != Py_None || rbo == Py_None) : (w2o == Py_None || rbo != Py_None)) {
        PyErr_SetString(PyExc_ValueError,
                        "gru: linear_before_reset takes rbh and no w2; without it, w2 and no rbh");
        return NULL;
    }
    Bufs bs = {.n = 0};
    if (!(jb.proj = add_buf(&bs, po, proj_n, 0, "proj")) ||
        !(jb.w1 = add_buf(&bs, w1o, packed_count(jb.H, lbr ? 3 : 2), 0, "w1")) ||
        (!lbr && !(jb.w2 = add_buf(&bs, w2o, packed_count(jb.H, 1), 0, "w2"))) ||
        (lbr && !(jb.rbh = add_buf(&bs, rbo, jb.H, 0, "rbh"))) ||
        !(jb.h0 = add_buf(&bs, h0o, state_n, 0, "h0")) ||
        !(jb.y = add_buf(&bs, yo, y_n, 1, "y")) ||
        !(jb.h_out = add_buf(&bs, ho, state_n, 1, "h_out")) ||
        get_lens(&bs, lo, jb.B, &jb.lens) < 0)
        return NULL;
    if (check_overlaps(&bs) < 0) return NULL;
    float *scratch = NULL;
    if (!lbr) {
        scratch = PyMem_RawMalloc((size_t)state_n * 2 * sizeof(float));
        if (!scratch) {
            release(&bs);
            return PyErr_NoMemory();
        }
        jb.z = scratch;
        jb.rh = scratch + state_n;
    }
    Py_BEGIN_ALLOW_THREADS;
    run(&jb);
    Py_END_ALLOW_THREADS;
    PyMem_RawFree(scratch);
    release(&bs);
    Py_RETURN_NONE;
}

/* ---- a held layer: an LSTM or GRU node's call with its constant weights --------------
 *
 * `held(...)` makes the callable an LSTM or GRU node's specialized call fronts
 * (kernels/nn_rnn.py's `_specialize_layer`): called with the node's inputs, it checks the
 * weights (and the absent sequence_lens and peepholes) by identity, X as a float32
 * C-contiguous (T, B, I) ndarray and the initial states as float32 C-contiguous (D, B, H)
 * ndarrays or None, makes Y, Y_h (and Y_c) by numpy.empty, and per direction projects X
 * (reversed for a reverse direction) by the direction's held product (X W^T + Wb, itself
 * handing rows it does not take to the Python projection), adds a GRU's plain recurrent
 * biases, and runs the time loop: from the node loop's call to the outputs, the Python
 * call's steps in C, so the same numbers.  Anything else goes to `fallback`.  Why: a
 * one-step LSTM of 128 units spent 12 of its 18 us in those Python steps. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int gates, lbr, n_dirs, reverse[2], n_outputs;
    Py_ssize_t H, I;
    PyObject *projs[2];          /* callables: X (T, B, I) -> (T, B, G*H) + Wb */
    PyObject *w1[2], *w2[2];     /* packed recurrent weights (w2: GRU without lbr) */
    PyObject *rbh[2], *rb[2];    /* GRU: the candidate's Rb (lbr), the plain Rb sums */
    Py_buffer w1v[2], w2v[2], rbhv[2], rbv[2];
    PyObject *expect, *fallback, *ndarray, *empty, *dtype;
} HeldLayer;

static PyObject *layer_other(HeldLayer *self, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames) {
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* A float32 C-contiguous ndarray of exactly `ndim` dims, none empty, of these sizes (-1:
 * any), its buffer in view; 0 when not. */
static int layer_array(HeldLayer *self, PyObject *obj, Py_buffer *view, int ndim,
                       const Py_ssize_t *sizes) {
    if (!onnxviz_array_view(obj, self->ndarray, view, 'f', ndim, sizes)) return 0;
    for (int i = 0; i < ndim; i++)
        if (view->shape[i] < 1) {
            PyBuffer_Release(view);
            return 0;
        }
    return 1;
}

static PyObject *layer_empty(HeldLayer *self, int ndim, const Py_ssize_t *sizes) {
    return onnxviz_new_array(self->empty, self->dtype, ndim, sizes);
}

static PyObject *layer_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                  PyObject *kwnames) {
    HeldLayer *self = (HeldLayer *)obj;
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames || nargs < 3) return layer_other(self, args, nargsf, kwnames);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->expect); i++) {
        PyObject *pair = PyTuple_GET_ITEM(self->expect, i);
        const Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0));
        PyObject *given = at < nargs ? args[at] : Py_None;
        if (given != PyTuple_GET_ITEM(pair, 1)) return layer_other(self, args, nargsf, kwnames);
    }
    const int lstm = self->gates == 4, D = self->n_dirs;
    const Py_ssize_t H = self->H;
    Py_buffer xv, hv, cv;
    const Py_ssize_t x_sizes[3] = {-1, -1, self->I};
    if (!layer_array(self, args[0], &xv, 3, x_sizes)) return layer_other(self, args, nargsf, kwnames);
    const Py_ssize_t T = xv.shape[0], B = xv.shape[1];
    const Py_ssize_t state_sizes[3] = {D, B, H};
    PyObject *h0o = nargs > 5 ? args[5] : Py_None, *c0o = nargs > 6 && lstm ? args[6] : Py_None;
    const int have_h = h0o != Py_None, have_c = c0o != Py_None;
    if (have_h && !layer_array(self, h0o, &hv, 3, state_sizes)) {
        PyBuffer_Release(&xv);
        return layer_other(self, args, nargsf, kwnames);
    }
    if (have_c && !layer_array(self, c0o, &cv, 3, state_sizes)) {
        if (have_h) PyBuffer_Release(&hv);
        PyBuffer_Release(&xv);
        return layer_other(self, args, nargsf, kwnames);
    }
    PyObject *y = NULL, *h_out = NULL, *c_out = NULL, *result = NULL, *xrev = NULL;
    PyObject *proj = NULL;
    float *scratch = NULL, *zeros = NULL;
    Py_buffer yv, hov, cov, pv, rv;
    int got_y = 0, got_ho = 0, got_co = 0;
    const Py_ssize_t y_sizes[4] = {T, D, B, H};
    if (!(y = layer_empty(self, 4, y_sizes)) || !(h_out = layer_empty(self, 3, state_sizes)) ||
        (lstm && !(c_out = layer_empty(self, 3, state_sizes))))
        goto done;
    if (PyObject_GetBuffer(y, &yv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    got_y = 1;
    if (PyObject_GetBuffer(h_out, &hov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    got_ho = 1;
    if (lstm) {
        if (PyObject_GetBuffer(c_out, &cov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
        got_co = 1;
    }
    const Py_ssize_t state_n = B * H, G3 = lstm ? 4 : 3;
    if ((!have_h || (lstm && !have_c)) && !(zeros = PyMem_RawCalloc((size_t)state_n, 4))) {
        PyErr_NoMemory();
        goto done;
    }
    if (!lstm && !self->lbr && !(scratch = PyMem_RawMalloc((size_t)state_n * 2 * 4))) {
        PyErr_NoMemory();
        goto done;
    }
    for (int d = 0; d < D; d++) {
        PyObject *xin = args[0];
        if (self->reverse[d]) { /* X's steps in the order the direction reads them */
            const Py_ssize_t x_full[3] = {T, B, self->I};
            if (!(xrev = layer_empty(self, 3, x_full))) goto done;
            if (PyObject_GetBuffer(xrev, &rv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
            const Py_ssize_t step = B * self->I;
            for (Py_ssize_t t = 0; t < T; t++)
                memcpy((float *)rv.buf + t * step, (const float *)xv.buf + (T - 1 - t) * step,
                       (size_t)step * 4);
            PyBuffer_Release(&rv);
            xin = xrev;
        }
        proj = PyObject_CallOneArg(self->projs[d], xin);
        Py_CLEAR(xrev);
        if (!proj) goto done;
        if (PyObject_GetBuffer(proj, &pv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
            goto done;
        if (!(pv.itemsize == 4 && pv.format && pv.format[0] == 'f' && !pv.format[1] &&
              pv.len == T * B * G3 * H * 4)) {
            PyBuffer_Release(&pv);
            PyErr_SetString(PyExc_RuntimeError, "held layer: the projection has another size");
            goto done;
        }
        float *pp = pv.buf;
        if (!lstm && self->rb[d]) { /* GRU: Rb of z and r (and the candidate without lbr) */
            const Py_ssize_t cols = (self->lbr ? 2 : 3) * H;
            const float *rb = self->rbv[d].buf;
            for (Py_ssize_t r = 0; r < T * B; r++)
                for (Py_ssize_t k = 0; k < cols; k++) pp[r * G3 * H + k] += rb[k];
        }
        Job jb = {0};
        jb.kind = lstm ? KIND_LSTM : self->lbr ? KIND_GRU_LBR : KIND_GRU;
        jb.reverse = self->reverse[d];
        jb.T = T, jb.B = B, jb.H = H, jb.D = D, jb.d = d;
        jb.proj = pp;
        jb.w1 = self->w1v[d].buf;
        jb.w2 = self->w2[d] ? self->w2v[d].buf : NULL;
        jb.rbh = self->rbh[d] ? self->rbhv[d].buf : NULL;
        jb.h0 = have_h ? (const float *)hv.buf + d * state_n : zeros;
        jb.y = yv.buf;
        jb.h_out = (float *)hov.buf + d * state_n;
        if (lstm) {
            jb.c = (float *)cov.buf + d * state_n;
            memcpy(jb.c, have_c ? (const float *)cv.buf + d * state_n : zeros, (size_t)state_n * 4);
        } else if (!self->lbr) {
            jb.z = scratch;
            jb.rh = scratch + state_n;
        }
        if (T * B * H * H >= (1 << 20)) {
            Py_BEGIN_ALLOW_THREADS;
            run(&jb);
            Py_END_ALLOW_THREADS;
        } else {
            run(&jb);
        }
        PyBuffer_Release(&pv);
        Py_CLEAR(proj);
    }
    if (self->n_outputs == 1) {
        result = Py_NewRef(y);
    } else {
        result = PyList_New(self->n_outputs);
        if (result) {
            PyObject *outs[3] = {y, h_out, c_out};
            for (int k = 0; k < self->n_outputs; k++) {
                PyObject *o = k < 3 && outs[k] ? outs[k] : Py_None;
                PyList_SET_ITEM(result, k, Py_NewRef(o));
            }
        }
    }
done:
    if (got_y) PyBuffer_Release(&yv);
    if (got_ho) PyBuffer_Release(&hov);
    if (got_co) PyBuffer_Release(&cov);
    Py_XDECREF(proj);
    Py_XDECREF(xrev);
    Py_XDECREF(y);
    Py_XDECREF(h_out);
    Py_XDECREF(c_out);
    PyMem_RawFree(scratch);
    PyMem_RawFree(zeros);
    if (have_c) PyBuffer_Release(&cv);
    if (have_h) PyBuffer_Release(&hv);
    PyBuffer_Release(&xv);
    return result;
}

static int layer_traverse(PyObject *obj, visitproc visit, void *arg) {
    HeldLayer *self = (HeldLayer *)obj;
    Py_VISIT(self->expect);
    Py_VISIT(self->fallback);
    for (int d = 0; d < 2; d++) Py_VISIT(self->projs[d]);
    return 0;
}

static int layer_clear(PyObject *obj) {
    HeldLayer *self = (HeldLayer *)obj;
    Py_CLEAR(self->expect);
    Py_CLEAR(self->fallback);
    for (int d = 0; d < 2; d++) Py_CLEAR(self->projs[d]);
    return 0;
}

static void layer_dealloc(PyObject *obj) {
    HeldLayer *self = (HeldLayer *)obj;
    PyObject_GC_UnTrack(obj);
    for (int d = 0; d < 2; d++) {
        PyObject **objs[4] = {&self->w1[d], &self->w2[d], &self->rbh[d], &self->rb[d]};
        Py_buffer *views[4] = {&self->w1v[d], &self->w2v[d], &self->rbhv[d], &self->rbv[d]};
        for (int k = 0; k < 4; k++)
            if (*objs[k]) {
                PyBuffer_Release(views[k]);
                Py_CLEAR(*objs[k]);
            }
    }
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->empty);
    Py_CLEAR(self->dtype);
    layer_clear(obj);
    PyObject_GC_Del(obj);
}

static PyMemberDef layer_members[] = {
    {"fallback", T_OBJECT, offsetof(HeldLayer, fallback), READONLY,
     "What the calls this layer does not take go to."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HeldLayerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onnxviz.runtime.native._recurrent.HeldLayer",
    .tp_basicsize = sizeof(HeldLayer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(HeldLayer, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = layer_traverse,
    .tp_clear = layer_clear,
    .tp_dealloc = layer_dealloc,
    .tp_members = layer_members,
    .tp_doc = "An LSTM or GRU node's call with its constant weights (held()).",
};

/* A float buffer of `count` floats held by the layer (None: none), 0 or -1. */
static int layer_hold(PyObject *o, PyObject **slot, Py_buffer *view, Py_ssize_t count,
                      const char *name) {
    if (o == Py_None) return 0;
    if (onnxviz_get_floats(o, view, count, 1, 0, name) < 0) return -1;
    *slot = Py_NewRef(o);
    return 0;
}

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    int gates, lbr, n_outputs;
    Py_ssize_t H, I;
    PyObject *rev, *projs, *w1, *w2, *rbh, *rb, *expect, *fallback, *ndarray, *empty, *dtype;
    if (!PyArg_ParseTuple(args, "ipnnO!O!O!O!O!O!O!iOOOO:held", &gates, &lbr, &H, &I,
                          &PyTuple_Type, &rev, &PyTuple_Type, &projs, &PyTuple_Type, &w1,
                          &PyTuple_Type, &w2, &PyTuple_Type, &rbh, &PyTuple_Type, &rb,
                          &PyTuple_Type, &expect, &n_outputs, &fallback, &ndarray, &empty,
                          &dtype))
        return NULL;
    const Py_ssize_t D = PyTuple_GET_SIZE(rev);
    int bad = (gates != 3 && gates != 4) || (gates == 4 && lbr) || H < 1 || I < 1 ||
              H > (1 << 20) || (D != 1 && D != 2) || n_outputs < 1 || n_outputs > 3 ||
              PyTuple_GET_SIZE(projs) != D || PyTuple_GET_SIZE(w1) != D ||
              PyTuple_GET_SIZE(w2) != D || PyTuple_GET_SIZE(rbh) != D ||
              PyTuple_GET_SIZE(rb) != D || !PyCallable_Check(fallback) ||
              !PyCallable_Check(empty);
    for (Py_ssize_t d = 0; d < D && !bad; d++) {
        bad = !PyCallable_Check(PyTuple_GET_ITEM(projs, d));
        const int has_w2 = PyTuple_GET_ITEM(w2, d) != Py_None;
        const int has_rbh = PyTuple_GET_ITEM(rbh, d) != Py_None;
        if (gates == 4) bad = bad || has_w2 || has_rbh || PyTuple_GET_ITEM(rb, d) != Py_None;
        else bad = bad || (lbr ? (has_w2 || !has_rbh) : (!has_w2 || has_rbh));
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(expect) && !bad; i++) {
        PyObject *pair = PyTuple_GET_ITEM(expect, i);
        bad = !PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
              PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0)) < 1;
    }
    if (bad || PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "held: bad gates, sizes, directions or parts");
        return NULL;
    }
    HeldLayer *obj = PyObject_GC_New(HeldLayer, &HeldLayerType);
    if (!obj) return NULL;
    obj->vectorcall = layer_vectorcall;
    obj->gates = gates, obj->lbr = lbr, obj->n_dirs = (int)D, obj->n_outputs = n_outputs;
    obj->H = H, obj->I = I;
    for (int d = 0; d < 2; d++) {
        obj->projs[d] = obj->w1[d] = obj->w2[d] = obj->rbh[d] = obj->rb[d] = NULL;
        obj->reverse[d] = 0;
    }
    obj->expect = Py_NewRef(expect);
    obj->fallback = Py_NewRef(fallback);
    obj->ndarray = Py_NewRef(ndarray);
    obj->empty = Py_NewRef(empty);
    obj->dtype = Py_NewRef(dtype);
    PyObject_GC_Track((PyObject *)obj);
    const int g1 = gates == 4 ? 4 : lbr ? 3 : 2;
    for (Py_ssize_t d = 0; d < D; d++) {
        obj->reverse[d] = PyObject_IsTrue(PyTuple_GET_ITEM(rev, d)) == 1;
        obj->projs[d] = Py_NewRef(PyTuple_GET_ITEM(projs, d));
        if (layer_hold(PyTuple_GET_ITEM(w1, d), &obj->w1[d], &obj->w1v[d], packed_count(H, g1),
                       "held w1") < 0 ||
            layer_hold(PyTuple_GET_ITEM(w2, d), &obj->w2[d], &obj->w2v[d], packed_count(H, 1),
                       "held w2") < 0 ||
            layer_hold(PyTuple_GET_ITEM(rbh, d), &obj->rbh[d], &obj->rbhv[d], H, "held rbh") < 0 ||
            layer_hold(PyTuple_GET_ITEM(rb, d), &obj->rb[d], &obj->rbv[d], 3 * H, "held rb") < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return (PyObject *)obj;
}

/* tanh(x, out) and sigmoid(x, out): the loops' activations over a buffer (tests). */
static PyObject *activation(PyObject *args, int kind, const char *name) {
    PyObject *xo, *oo;
    if (!PyArg_ParseTuple(args, "OO", &xo, &oo)) return NULL;
    Py_buffer xv;
    if (PyObject_GetBuffer(xo, &xv, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const Py_ssize_t n = xv.len / 4;
    PyBuffer_Release(&xv);
    Bufs bs = {.n = 0};
    const float *x;
    float *y;
    if (!(x = add_buf(&bs, xo, n, 0, name)) || !(y = add_buf(&bs, oo, n, 1, name))) return NULL;
    Py_BEGIN_ALLOW_THREADS;
#if ONNXVIZ_X86
    if (level >= 2)
        activate_avx512(x, y, n, kind);
    else if (level == 1)
        activate_avx2(x, y, n, kind);
    else
#endif
        activate_generic(x, y, n, kind);
    Py_END_ALLOW_THREADS;
    release(&bs);
    Py_RETURN_NONE;
}

static PyObject *py_tanh(PyObject *self, PyObject *args) {
    (void)self;
    return activation(args, 0, "tanh");
}

static PyObject *py_sigmoid(PyObject *self, PyObject *args) {
    (void)self;
    return activation(args, 1, "sigmoid");
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"lstm", py_lstm, METH_VARARGS,
     "lstm(proj, w, h0, c0, y, h_out, c_out, steps, batch, hidden, dirs, d, reverse, "
     "lens=None): one LSTM direction's time loop (float32; see the module's header)."},
    {"gru", py_gru, METH_VARARGS,
     "gru(proj, w1, w2, rbh, h0, y, h_out, steps, batch, hidden, dirs, d, reverse, "
     "linear_before_reset, lens=None): one GRU direction's time loop (float32)."},
    {"held", py_held, METH_VARARGS,
     "held(gates, lbr, hidden, input, reverse, projs, w1, w2, rbh, rb, expect, n_outputs, "
     "fallback, ndarray, empty, dtype) -> an LSTM (gates 4) or GRU (3) node's call with "
     "its constant weights, per direction: a projection callable, the packed recurrent "
     "weights, the candidate's Rb (GRU lbr) and the plain Rb sums (GRU); see the source."},
    {"qlstm", py_qlstm, METH_VARARGS,
     "qlstm(x_part, w, sums, offset, r_scale, bias, h0, c0, y, h_out, c_out, steps, batch, "
     "hidden, zero_ended, input_forget, lens=None) -> status: one com.microsoft "
     "DynamicQuantizeLSTM direction's step loop (see the source)."},
    {"qlstm_layout", py_qlstm_layout, METH_NOARGS,
     "The layout qlstm takes R in at the level set: 0 int16 pairs, 1 int8 quads."},
    {"float_layout", py_float_layout, METH_NOARGS,
     "The layout lstm, gru and held take R in at the level set: 0 per block (H, G, 16), "
     "1 per block two halves (H, G, 8)."},
    {"tanh", py_tanh, METH_VARARGS, "tanh(x, out): the loops' float32 tanh."},
    {"sigmoid", py_sigmoid, METH_VARARGS, "sigmoid(x, out): the loops' float32 sigmoid."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recurrent", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recurrent(void) {
    if (PyType_Ready(&HeldLayerType) < 0) return NULL;
    return PyModule_Create(&module);
}
