/* onnxviz.runtime.native._int8: exact 8-bit integer matrix products.
 *
 *   C[m, n] = sum_k (W[m, k] - zw[m]) * (X[k, n] - zx)          (int32, exact)
 *
 * W is a constant (a conv or MatMul weight, int8 or uint8, one zero point per row),
 * packed once by pack_weights in the layout the inner loop reads; X is the quantized
 * activation (uint8 or int8, one zero point), read through row offsets so that a conv
 * can hand its zero-padded flat image (one shifted row per kernel offset and channel)
 * without an im2col copy; it is packed per call.
 *
 * Exactness.  |W - zw| <= 255 and |X - zx| <= 255, so |C| <= K * 65025 < 2^31 for
 * K <= MAX_K (33025 would still do; we take 32768).  Larger K raises ValueError and the
 * caller runs its numpy path.
 *   levels 0-2 (generic, AVX2, AVX-512): both operands are widened to int16 with their
 *     zero points already subtracted (values in [-255, 255]); vpmaddwd multiplies
 *     pairs into int32 and adds two products (<= 130050, no saturation); sums of these
 *     stay below 2^31.  vpmaddubsw, which saturates at int16, runs only where no pair
 *     can reach the bound: the AVX2 level's quads (gemm_rows' QUADS for B, gemm's
 *     WEIGHT_QUADS for W), whose pairs of the constant operand are cut to
 *     |b0| + |b1| <= 128 where both have one sign, with the rest added as exact
 *     corrections (a pair of opposite signs never reaches the bound: see QUADS).
 *   level 3 (AVX-512 VNNI): vpdpbusd multiplies unsigned bytes (X, made unsigned by
 *     adding 128 to an int8 X and to zx) by signed bytes (W, made signed by subtracting
 *     128 from a uint8 W and from zw) and adds four products into int32 without
 *     saturation (it wraps).  The zero points then come in exactly through
 *       sum (x - zx)(w - zw) = sum x w - zw sum_k x - zx sum_k w + K zx zw,
 *     computed modulo 2^32 (unsigned arithmetic): the true result fits in int32, so
 *     the wrapped partial sums give it exactly.
 *
 * Functions (every size is checked against its buffer before a byte is read):
 *   set_level(n), level()
 *   max_k() -> MAX_K
 *   pack_weights(w, M, K, w_signed, zw) -> bytes      (w: M*K bytes, zw: M int32)
 *   gemm(packed, x, rowoff, colstride, N, x_signed, zx, out)
 *       X[k, n] = x[rowoff[k] + n * colstride]; out: M*N int32, row-major
 *   pack_columns(b, K, N, b_signed, zb) -> bytes      (b: K*N bytes, row-major)
 *   weight_form(packed) -> (form, corrections), weight_quads_limit()
 *       pack_weights' layout ("int16", "quads" at AVX2: WEIGHT_QUADS, "bytes" at VNNI)
 *   quads_limit() -> QUADS_MAX_FIXES
 *   column_form(columns) -> (form, corrections)
 *       which layout pack_columns chose: "int16", "byte pairs" or "quads" (AVX2), and
 *       how many cut pairs the quads correct
 *   gemm_rows(a, M, a_signed, za, columns, out)
 *       out[m, n] = sum_k (A[m, k] - za) * (B[k, n] - zb): a MatMul's product with A
 *       [M, K] row-major and B packed by pack_columns; out: M*N int32, row-major
 *   rescale_qdq(acc, M, rows, width, keep, scale, bias, relu, signed, qs, qz, dqs, dqz, y)
 *       v = (float)acc[m, r*width + j] * scale[m] + bias[m] for j < keep, in float32 steps
 *       (float32 scale and bias), then Relu's max(v, 0) when relu, quantized by
 *       QuantizeLinear's float32 steps with v / qs taken as v * float32(1 / qs), and
 *       dequantized again by DequantizeLinear's; -1 (nothing written) when a scale, a
 *       bias or 1 / qs is not finite
 *   rescale_q(acc, M, rows, width, keep, scale, bias, relu, signed, qs, qz, y)
 *       rescale_qdq's steps up to the quantized value, written as bytes
 *   gemm_rescale(packed, x, rowoff, colstride, N, x_signed, zx, rows, width, keep, scale,
 *                bias, relu, signed, qs, qz, dqs, dqz, codes, y) -> 0 or -1
 *       gemm, then rescale_q (codes) or rescale_qdq over C, block by block in cache
 *   interleave4(src, images, channels, plane, flip, dst)
 *       a conv's flat layout as groups of four channels, bytes interleaved
 *   gemm_rescale4(packed, x4, rows4, N, x_signed, zx, rows, width, keep, scale, bias,
 *                 relu, signed, qs, qz, dqs, dqz, codes, y) -> 0 or -1
 *       gemm_rescale reading X in interleave4's layout where it lies (VNNI level), or
 *       in interleave2's (the AVX2 level's int16 form)
 *   interleave2(src, images, channels, plane, x_signed, zx, dst)
 *       a conv's flat layout as pairs of channels, one word of two int16 (less zx) each
 *   qdq(x, qs, qz, dqs, dqz, signed, out) -> 0, or -1 when x holds a NaN
 *       QuantizeLinear -> DequantizeLinear in float32 steps (fusion_qdq's QdqPair)
 *   qdq_table(x, qs, qz, signed, table, out) -> 0, or -1 when x holds a NaN
 *       out = table[byte of QuantizeLinear(x)]: a function of one 8-bit code given by
 *       its 256 values (fusion_qdq_table's QdqTable)
 *   quantize_layout(x, N, C, H, W, scale, zp, signed, pad_t, pad_l, s0, s1, ph_h, ph_w,
 *                   length, fill, used, out) -> 0, or -1 when x holds a NaN
 *       quantize, written into a conv's flat layout (stride phases, padded with fill)
 *   quantize(x, scale, zp, signed, out) -> 0, or -1 when x holds a NaN
 *       out = clip(rint(x / scale) + zp) in float32 steps (QuantizeLinear's), as bytes
 *   scale_columns(acc, M, N, scale, bias, out)
 *       out = float32(acc) * scale[n] (+ bias[n]): Cast -> Mul -> Add in float32 steps
 *   scale_columns_qdq(acc, M, N, scale, bias, signed, qs, qz, dqs, dqz, out
 *                     [, bias2, signed2, qs2, qz2, dqs2, dqz2]) -> 0 or -1
 *       scale_columns, then QuantizeLinear (its division as a product by float32(1/qs))
 *       -> DequantizeLinear: a QDQ MatMul's output; with the rest, then + bias2[n] and
 *       a second pair in QuantizeLinear's own steps (the MatMul's bias Add)
 *   dynamic_quantize(x, out) -> (status, scale, zero point)
 *       DynamicQuantizeLinear in float32 steps: x's range, then quantize
 *   held_qdq(...), held_rows_scaled(...), held_rows_qdq(...) -> callables the node loop
 *       calls (held_call.h): a QuantizeLinear -> DequantizeLinear pair's qdq, a
 *       dynamic-quantized MatMul's gemm_rows product and scale_columns pass, and a QDQ
 *       MatMul's product and scale_columns_qdq pass, for the constants they were made for
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "levels.h"
#include "held_call.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86 1
#include <immintrin.h>
#else
#define HAVE_X86 0
#endif

#define MAX_K 32768
#define KC_GROUPS_BYTES 512 /* k per cache block (a multiple of 4) */
#define MAGIC 0x38544e49    /* "INT8" */

static int current_level = 0;

/* z is a code of the 8-bit type: int8 (signed) or uint8. */
static inline int byte_code(int is_signed, int z) {
    return is_signed ? z >= -128 && z <= 127 : z >= 0 && z <= 255;
}

typedef struct {
    int mr, nr, group; /* rows of W per tile, columns of X per tile, k per int32 group */
} Shape;

static Shape level_shape(int level) {
    Shape s;
    switch (level) {
    case 1: s.mr = 6; s.nr = 16; s.group = 2; break;
    case 2: s.mr = 8; s.nr = 32; s.group = 2; break;
    case 3: s.mr = 8; s.nr = 32; s.group = 4; break;
    default: s.mr = 4; s.nr = 16; s.group = 2; break;
    }
    return s;
}

/* The packed weights: this header, then rowsum[Mp] and zw[Mp] (int32), then the panels:
 * for each panel of mr rows, for each k group, mr int32 groups; then, for the AVX2
 * level's quads (group 4 there: `pack_weights`), `fixes` corrections (row, k, f). */
typedef struct {
    int32_t magic, level, m, k, mr, group, kq, panels, fixes;
} Header;

static size_t packed_bytes(const Header *h) {
    size_t mp = (size_t)h->panels * h->mr;
    return sizeof(Header) + 2 * mp * sizeof(int32_t) + mp * (size_t)h->kq * sizeof(int32_t) +
           (size_t)h->fixes * 3 * sizeof(int32_t);
}

/* ---- the micro-kernels: acc[mr][nr] (+)= sum over kq groups of wp x xp ---------------- */

typedef void (*Kernel)(const int32_t *, const int32_t *, Py_ssize_t, int32_t *, Py_ssize_t, int,
                       int, int, const int32_t *, const int32_t *);

/* c: tile origin, ldc: row stride; store only rows < mr_valid and columns < nr_valid. */
static void store_tile(int32_t *c, Py_ssize_t ldc, const int32_t *tile, int mr, int nr,
                       int mr_valid, int nr_valid, int accumulate) {
    for (int i = 0; i < mr_valid; i++) {
        int32_t *row = c + i * ldc;
        const int32_t *t = tile + i * nr;
        if (accumulate)
            for (int j = 0; j < nr_valid; j++) row[j] = (int32_t)((uint32_t)row[j] + (uint32_t)t[j]);
        else
            memcpy(row, t, (size_t)nr_valid * sizeof(int32_t));
    }
    (void)mr;
}

static void kernel_generic(const int32_t *wp, const int32_t *xp, Py_ssize_t kq, int32_t *c,
                           Py_ssize_t ldc, int mr_valid, int nr_valid, int accumulate,
                           const int32_t *init, const int32_t *cinit) {
    enum { MR = 4, NR = 16 };
    (void)init; /* (the int16 form has no zero point terms) */
    (void)cinit;
    int32_t acc[MR * NR];
    memset(acc, 0, sizeof(acc));
    for (Py_ssize_t q = 0; q < kq; q++) {
        const int32_t *w = wp + q * MR, *x = xp + q * NR;
        for (int i = 0; i < MR; i++) {
            int32_t w0 = (int16_t)(uint16_t)((uint32_t)w[i] & 0xffff);
            int32_t w1 = (int16_t)(uint16_t)((uint32_t)w[i] >> 16);
            for (int j = 0; j < NR; j++) {
                int32_t x0 = (int16_t)(uint16_t)((uint32_t)x[j] & 0xffff);
                int32_t x1 = (int16_t)(uint16_t)((uint32_t)x[j] >> 16);
                acc[i * NR + j] += w0 * x0 + w1 * x1;
            }
        }
    }
    store_tile(c, ldc, acc, MR, NR, mr_valid, nr_valid, accumulate);
}

#if HAVE_X86
/* The AVX2 tile: the first ROWS rows of A's panel of 6 (its k groups 6 apart) by 16
 * columns of X, 2*ROWS accumulators.  X's k group q comes as two vectors of int16 pairs
 * (LOAD_X): the int16 form's (`X_INT16`), or BYTE_PAIRS' 32 bytes widened as they are
 * loaded (`X_BYTES`).  init (the zero point's row terms; NULL for the int16 form) starts
 * row i's accumulators in a tile's first k block.  A whole tile goes to C in vectors:
 * store_tile's memcpy call per row cost a BERT-tiny layer's 128 x 128 x 128 product about
 * a third of its time (from the buffer, not the accumulators: a second use of them after
 * the loop made GCC keep half of them on the stack inside it); a later k block adds,
 * wrapping as the products' sums do.  With ROWS < 6 a panel's last rows run only their
 * own products (a one-row decode step had done six rows' multiply-adds, five of them on
 * padding).  (A prefetch of B ahead cost 1.3-1.4x the time: the hardware's streams keep
 * up with one panel's line order.) */
#define X_INT16(q)                                                                           \
    const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xp + (q) * NR));                 \
    const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xp + (q) * NR + 8));
#define X_BYTES(q)                                                                           \
    const uint8_t *xb = (const uint8_t *)xp + (q) * 32;                                      \
    const __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)xb));          \
    const __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xb + 16)));
/* An AVX2 tile's sums (tile: 6 rows of 16, its first `rows` filled) to C, or added to it
 * (a later k block); a whole tile by vectors, a partial one by store_tile. */
__attribute__((target("avx2"))) static inline void tile_out_avx2(int32_t *c, Py_ssize_t ldc,
                                                                 const int32_t *tile, int rows,
                                                                 int mr_valid, int nr_valid,
                                                                 int accumulate) {
    enum { MR = 6, NR = 16 };
    if (mr_valid == rows && nr_valid == NR) {
        for (int i = 0; i < rows; i++) {
            __m256i *row = (__m256i *)(c + i * ldc);
            __m256i l = _mm256_loadu_si256((const __m256i *)(tile + i * NR));
            __m256i h = _mm256_loadu_si256((const __m256i *)(tile + i * NR + 8));
            if (accumulate) {
                l = _mm256_add_epi32(_mm256_loadu_si256(row), l);
                h = _mm256_add_epi32(_mm256_loadu_si256(row + 1), h);
            }
            _mm256_storeu_si256(row, l);
            _mm256_storeu_si256(row + 1, h);
        }
        return;
    }
    store_tile(c, ldc, tile, MR, NR, mr_valid < rows ? mr_valid : rows, nr_valid, accumulate);
}

/* X_PAIRS: a conv's input in channel pairs (interleave2's words), k group q read where it
 * lies, at word offset rows[q] (gemm_rescale4 at the AVX2 level) */
#define X_PAIRS(q)                                                                           \
    const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xp + rows[q]));                  \
    const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xp + rows[q] + 8));
#define NO_ROWS
#define ROWS_PARAM , const int64_t *rows
#define KERNEL_AVX2(NAME, ROWS, LOAD_X) KERNEL_AVX2_AT(NAME, ROWS, LOAD_X, NO_ROWS)
#define KERNEL_AVX2_AT(NAME, ROWS, LOAD_X, ROWS_ARG)                                         \
    __attribute__((target("avx2,fma"))) static void NAME(                                    \
        const int32_t *wp, const int32_t *xp, Py_ssize_t kq, int32_t *c, Py_ssize_t ldc,     \
        int mr_valid, int nr_valid, int accumulate, const int32_t *init,                     \
        const int32_t *cinit ROWS_ARG) {                                                     \
        enum { MR = 6, NR = 16 };                                                            \
        (void)cinit;                                                                         \
        __m256i lo[ROWS], hi[ROWS];                                                          \
        _Pragma("GCC unroll 6") for (int i = 0; i < ROWS; i++) lo[i] = hi[i] =               \
            init != NULL && !accumulate ? _mm256_set1_epi32(init[i]) : _mm256_setzero_si256(); \
        _Pragma("GCC unroll 4") for (Py_ssize_t q = 0; q < kq; q++) {                        \
            const int32_t *w = wp + q * MR;                                                  \
            LOAD_X(q)                                                                        \
            _Pragma("GCC unroll 6") for (int i = 0; i < ROWS; i++) {                         \
                const __m256i b = _mm256_set1_epi32(w[i]);                                   \
                lo[i] = _mm256_add_epi32(lo[i], _mm256_madd_epi16(x0, b));                   \
                hi[i] = _mm256_add_epi32(hi[i], _mm256_madd_epi16(x1, b));                   \
            }                                                                                \
        }                                                                                    \
        int32_t tile[MR * NR];                                                               \
        _Pragma("GCC unroll 6") for (int i = 0; i < ROWS; i++) {                             \
            _mm256_storeu_si256((__m256i *)(tile + i * NR), lo[i]);                          \
            _mm256_storeu_si256((__m256i *)(tile + i * NR + 8), hi[i]);                      \
        }                                                                                    \
        tile_out_avx2(c, ldc, tile, ROWS, mr_valid, nr_valid, accumulate);                \
    }
KERNEL_AVX2(kernel_avx2, 6, X_INT16)
KERNEL_AVX2(kernel_avx2_1, 1, X_INT16)
KERNEL_AVX2(kernel_avx2_2, 2, X_INT16)
KERNEL_AVX2(kernel_avx2_3, 3, X_INT16)
KERNEL_AVX2(kernel_avx2_4, 4, X_INT16)
KERNEL_AVX2(kernel_avx2_5, 5, X_INT16)
/* The int16 form's tile by the panel's valid rows: a 32-channel conv's last panel has 2
 * of 6, and the 6-row tile spent a sixth of its multiply-adds on the 4 padding rows. */
static const Kernel int16_kernels[7] = {NULL,          kernel_avx2_1, kernel_avx2_2, kernel_avx2_3,
                                        kernel_avx2_4, kernel_avx2_5, kernel_avx2};
typedef void (*RowsKernel)(const int32_t *, const int32_t *, Py_ssize_t, int32_t *, Py_ssize_t,
                           int, int, int, const int32_t *, const int32_t *, const int64_t *);
KERNEL_AVX2_AT(kernel_avx2_pairs_1, 1, X_PAIRS, ROWS_PARAM)
KERNEL_AVX2_AT(kernel_avx2_pairs_2, 2, X_PAIRS, ROWS_PARAM)
KERNEL_AVX2_AT(kernel_avx2_pairs_3, 3, X_PAIRS, ROWS_PARAM)
KERNEL_AVX2_AT(kernel_avx2_pairs_4, 4, X_PAIRS, ROWS_PARAM)
KERNEL_AVX2_AT(kernel_avx2_pairs_5, 5, X_PAIRS, ROWS_PARAM)
KERNEL_AVX2_AT(kernel_avx2_pairs_6, 6, X_PAIRS, ROWS_PARAM)
static const RowsKernel pairs_kernels[7] = {NULL,
                                            kernel_avx2_pairs_1,
                                            kernel_avx2_pairs_2,
                                            kernel_avx2_pairs_3,
                                            kernel_avx2_pairs_4,
                                            kernel_avx2_pairs_5,
                                            kernel_avx2_pairs_6};
KERNEL_AVX2(kernel_avx2_bytes_1, 1, X_BYTES)
KERNEL_AVX2(kernel_avx2_bytes_2, 2, X_BYTES)
KERNEL_AVX2(kernel_avx2_bytes_3, 3, X_BYTES)
KERNEL_AVX2(kernel_avx2_bytes_4, 4, X_BYTES)
KERNEL_AVX2(kernel_avx2_bytes_5, 5, X_BYTES)
KERNEL_AVX2(kernel_avx2_bytes_6, 6, X_BYTES)
#undef KERNEL_AVX2

/* QUADS (pack_columns): the same 6 x 16 tile over k quads, A's four unsigned bytes per
 * row broadcast, B's four signed bytes per column; vpmaddubsw then vpmaddwd by ones (see
 * QUADS for why no int16 saturates).  init: the row term per row plus cinit's column term
 * per column. */
#define KERNEL_AVX2_QUADS(NAME, ROWS, PRODUCT)                                               \
    __attribute__((target("avx2,fma"))) static void NAME(                                    \
        const int32_t *wp, const int32_t *xp, Py_ssize_t kq, int32_t *c, Py_ssize_t ldc,     \
        int mr_valid, int nr_valid, int accumulate, const int32_t *init,                     \
        const int32_t *cinit) {                                                              \
        enum { MR = 6, NR = 16 };                                                            \
        const __m256i ones = _mm256_set1_epi16(1);                                           \
        __m256i lo[ROWS], hi[ROWS];                                                          \
        const int with_c = !accumulate && cinit != NULL, with_r = !accumulate && init != NULL; \
        const __m256i c0 = with_c ? _mm256_loadu_si256((const __m256i *)cinit)              \
                                  : _mm256_setzero_si256();                                  \
        const __m256i c1 = with_c ? _mm256_loadu_si256((const __m256i *)(cinit + 8))        \
                                  : _mm256_setzero_si256();                                  \
        _Pragma("GCC unroll 6") for (int i = 0; i < ROWS; i++) {                             \
            const __m256i r = with_r ? _mm256_set1_epi32(init[i]) : _mm256_setzero_si256();  \
            lo[i] = _mm256_add_epi32(r, c0);                                                 \
            hi[i] = _mm256_add_epi32(r, c1);                                                 \
        }                                                                                    \
        _Pragma("GCC unroll 4") for (Py_ssize_t q = 0; q < kq; q++) {                        \
            const int32_t *w = wp + q * MR;                                                  \
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xp + q * NR));           \
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xp + q * NR + 8));       \
            _Pragma("GCC unroll 6") for (int i = 0; i < ROWS; i++) {                         \
                const __m256i b = _mm256_set1_epi32(w[i]);                                   \
                lo[i] = _mm256_add_epi32(lo[i], _mm256_madd_epi16(PRODUCT(b, x0), ones));    \
                hi[i] = _mm256_add_epi32(hi[i], _mm256_madd_epi16(PRODUCT(b, x1), ones));    \
            }                                                                                \
        }                                                                                    \
        int32_t tile[MR * NR];                                                               \
        _Pragma("GCC unroll 6") for (int i = 0; i < ROWS; i++) {                             \
            _mm256_storeu_si256((__m256i *)(tile + i * NR), lo[i]);                          \
            _mm256_storeu_si256((__m256i *)(tile + i * NR + 8), hi[i]);                      \
        }                                                                                    \
        tile_out_avx2(c, ldc, tile, ROWS, mr_valid, nr_valid, accumulate);                \
    }
/* gemm_rows: the broadcast rows (A) unsigned, the vector columns (B) signed; gemm (a
 * conv's weights W broadcast, the image X the vector): W signed, X unsigned */
#define ROWS_UNSIGNED(b, x) _mm256_maddubs_epi16((b), (x))
#define COLUMNS_UNSIGNED(b, x) _mm256_maddubs_epi16((x), (b))
KERNEL_AVX2_QUADS(kernel_avx2_quads_1, 1, ROWS_UNSIGNED)
KERNEL_AVX2_QUADS(kernel_avx2_quads_2, 2, ROWS_UNSIGNED)
KERNEL_AVX2_QUADS(kernel_avx2_quads_3, 3, ROWS_UNSIGNED)
KERNEL_AVX2_QUADS(kernel_avx2_quads_4, 4, ROWS_UNSIGNED)
KERNEL_AVX2_QUADS(kernel_avx2_quads_5, 5, ROWS_UNSIGNED)
KERNEL_AVX2_QUADS(kernel_avx2_quads_6, 6, ROWS_UNSIGNED)
KERNEL_AVX2_QUADS(kernel_avx2_weight_quads, 6, COLUMNS_UNSIGNED)
#undef ROWS_UNSIGNED
#undef COLUMNS_UNSIGNED
#undef KERNEL_AVX2_QUADS
#undef X_INT16
#undef X_BYTES
#undef X_PAIRS

#define AVX512_TARGET "avx512f,avx512bw,avx512dq,avx512vl"

/* Row i of a whole tile added to C (wrapping, as the products' sums do). */
#define ACC_ROW(i, lo, hi)                                                                    \
    do {                                                                                      \
        int32_t *row_ = c + (i) * ldc;                                                        \
        _mm512_storeu_si512((void *)row_,                                                     \
                            _mm512_add_epi32(_mm512_loadu_si512((const void *)row_), (lo)));  \
        _mm512_storeu_si512((void *)(row_ + 16),                                              \
                            _mm512_add_epi32(_mm512_loadu_si512((const void *)(row_ + 16)),   \
                                             (hi)));                                          \
    } while (0)

/* 8 rows x 32 columns: 16 zmm accumulators.  STEP(acc, x, broadcast) is one product.
 * init and cinit (byte form, or NULL): the accumulators of row i, column j start at
 * init[i] + cinit[j] instead of 0 (the zero points' row and column terms, in the tile's
 * first k block only: accumulate is then 0; cinit is read for all 32 columns). */
#define KERNEL_512(NAME, TARGET, STEP, PREFETCH, WPREFETCH)                                    \
    KERNEL_512_AT(NAME, TARGET, STEP, PREFETCH, WPREFETCH, NO_ROWS, X_PACKED)
/* X's k group q: at xp + q * NR (packed panels), or at xp + rows[q] (X_ROWS: a conv's
 * input in its four-channel layout, read where it lies; the kernel takes rows then). */
#define X_PACKED(q) ((q) * NR)
#define X_ROWS(q) (rows[q])
#define KERNEL_512_AT(NAME, TARGET, STEP, PREFETCH, WPREFETCH, ROWS, XAT)                      \
    __attribute__((target(TARGET))) static void NAME(                                         \
        const int32_t *wp, const int32_t *xp, Py_ssize_t kq, int32_t *c, Py_ssize_t ldc,      \
        int mr_valid, int nr_valid, int accumulate, const int32_t *init,                      \
        const int32_t *cinit ROWS) {                                                          \
        enum { MR = 8, NR = 32 };                                                             \
        __m512i a00 = _mm512_setzero_si512(), a01 = a00, a10 = a00, a11 = a00, a20 = a00,     \
                a21 = a00, a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00,  \
                a60 = a00, a61 = a00, a70 = a00, a71 = a00;                                   \
        if ((init != NULL || cinit != NULL) && !accumulate) {                                 \
            const __m512i c0_ = cinit != NULL ? _mm512_loadu_si512((const void *)cinit)       \
                                              : _mm512_setzero_si512();                      \
            const __m512i c1_ = cinit != NULL ? _mm512_loadu_si512((const void *)(cinit + 16))\
                                              : _mm512_setzero_si512();                      \
            a00 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[0] : 0), c0_); \
            a01 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[0] : 0), c1_); \
            a10 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[1] : 0), c0_); \
            a11 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[1] : 0), c1_); \
            a20 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[2] : 0), c0_); \
            a21 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[2] : 0), c1_); \
            a30 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[3] : 0), c0_); \
            a31 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[3] : 0), c1_); \
            a40 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[4] : 0), c0_); \
            a41 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[4] : 0), c1_); \
            a50 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[5] : 0), c0_); \
            a51 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[5] : 0), c1_); \
            a60 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[6] : 0), c0_); \
            a61 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[6] : 0), c1_); \
            a70 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[7] : 0), c0_); \
            a71 = _mm512_add_epi32(_mm512_set1_epi32(init != NULL ? init[7] : 0), c1_); \
        }                                                                                     \
        for (Py_ssize_t q = 0; q < kq; q++) {                                                 \
            const int32_t *w = wp + q * MR;                                                   \
            WPREFETCH(w);                                                                     \
            PREFETCH(xp + q * NR);                                                            \
            __m512i x0 = _mm512_loadu_si512((const void *)(xp + XAT(q)));                     \
            __m512i x1 = _mm512_loadu_si512((const void *)(xp + XAT(q) + 16));                \
            __m512i b;                                                                        \
            b = _mm512_set1_epi32(w[0]);                                                      \
            a00 = STEP(a00, x0, b);                                                           \
            a01 = STEP(a01, x1, b);                                                           \
            b = _mm512_set1_epi32(w[1]);                                                      \
            a10 = STEP(a10, x0, b);                                                           \
            a11 = STEP(a11, x1, b);                                                           \
            b = _mm512_set1_epi32(w[2]);                                                      \
            a20 = STEP(a20, x0, b);                                                           \
            a21 = STEP(a21, x1, b);                                                           \
            b = _mm512_set1_epi32(w[3]);                                                      \
            a30 = STEP(a30, x0, b);                                                           \
            a31 = STEP(a31, x1, b);                                                           \
            b = _mm512_set1_epi32(w[4]);                                                      \
            a40 = STEP(a40, x0, b);                                                           \
            a41 = STEP(a41, x1, b);                                                           \
            b = _mm512_set1_epi32(w[5]);                                                      \
            a50 = STEP(a50, x0, b);                                                           \
            a51 = STEP(a51, x1, b);                                                           \
            b = _mm512_set1_epi32(w[6]);                                                      \
            a60 = STEP(a60, x0, b);                                                           \
            a61 = STEP(a61, x1, b);                                                           \
            b = _mm512_set1_epi32(w[7]);                                                      \
            a70 = STEP(a70, x0, b);                                                           \
            a71 = STEP(a71, x1, b);                                                           \
        }                                                                                     \
        if (mr_valid == MR && nr_valid == NR && accumulate) {                                 \
            /* a later k block: added to C in vectors (the tile path adds one by one) */      \
            ACC_ROW(0, a00, a01);                                                             \
            ACC_ROW(1, a10, a11);                                                             \
            ACC_ROW(2, a20, a21);                                                             \
            ACC_ROW(3, a30, a31);                                                             \
            ACC_ROW(4, a40, a41);                                                             \
            ACC_ROW(5, a50, a51);                                                             \
            ACC_ROW(6, a60, a61);                                                             \
            ACC_ROW(7, a70, a71);                                                             \
            return;                                                                           \
        }                                                                                     \
        if (mr_valid == MR && nr_valid == NR && !accumulate) {                                \
            _mm512_storeu_si512((void *)(c + 0 * ldc), a00);                                  \
            _mm512_storeu_si512((void *)(c + 0 * ldc + 16), a01);                             \
            _mm512_storeu_si512((void *)(c + 1 * ldc), a10);                                  \
            _mm512_storeu_si512((void *)(c + 1 * ldc + 16), a11);                             \
            _mm512_storeu_si512((void *)(c + 2 * ldc), a20);                                  \
            _mm512_storeu_si512((void *)(c + 2 * ldc + 16), a21);                             \
            _mm512_storeu_si512((void *)(c + 3 * ldc), a30);                                  \
            _mm512_storeu_si512((void *)(c + 3 * ldc + 16), a31);                             \
            _mm512_storeu_si512((void *)(c + 4 * ldc), a40);                                  \
            _mm512_storeu_si512((void *)(c + 4 * ldc + 16), a41);                             \
            _mm512_storeu_si512((void *)(c + 5 * ldc), a50);                                  \
            _mm512_storeu_si512((void *)(c + 5 * ldc + 16), a51);                             \
            _mm512_storeu_si512((void *)(c + 6 * ldc), a60);                                  \
            _mm512_storeu_si512((void *)(c + 6 * ldc + 16), a61);                             \
            _mm512_storeu_si512((void *)(c + 7 * ldc), a70);                                  \
            _mm512_storeu_si512((void *)(c + 7 * ldc + 16), a71);                             \
            return;                                                                           \
        }                                                                                     \
        int32_t tile[MR * NR];                                                                \
        _mm512_storeu_si512((void *)(tile + 0 * NR), a00);                                    \
        _mm512_storeu_si512((void *)(tile + 0 * NR + 16), a01);                               \
        _mm512_storeu_si512((void *)(tile + 1 * NR), a10);                                    \
        _mm512_storeu_si512((void *)(tile + 1 * NR + 16), a11);                               \
        _mm512_storeu_si512((void *)(tile + 2 * NR), a20);                                    \
        _mm512_storeu_si512((void *)(tile + 2 * NR + 16), a21);                               \
        _mm512_storeu_si512((void *)(tile + 3 * NR), a30);                                    \
        _mm512_storeu_si512((void *)(tile + 3 * NR + 16), a31);                               \
        _mm512_storeu_si512((void *)(tile + 4 * NR), a40);                                    \
        _mm512_storeu_si512((void *)(tile + 4 * NR + 16), a41);                               \
        _mm512_storeu_si512((void *)(tile + 5 * NR), a50);                                    \
        _mm512_storeu_si512((void *)(tile + 5 * NR + 16), a51);                               \
        _mm512_storeu_si512((void *)(tile + 6 * NR), a60);                                    \
        _mm512_storeu_si512((void *)(tile + 6 * NR + 16), a61);                               \
        _mm512_storeu_si512((void *)(tile + 7 * NR), a70);                                    \
        _mm512_storeu_si512((void *)(tile + 7 * NR + 16), a71);                               \
        store_tile(c, ldc, tile, MR, NR, mr_valid, nr_valid, accumulate);                     \
    }

#define STEP_MADD(acc, x, b) _mm512_add_epi32((acc), _mm512_madd_epi16((x), (b)))
#define STEP_VNNI(acc, x, b) _mm512_dpbusd_epi32((acc), (x), (b))

/* X streamed from memory (gemm_rows: a constant B too big for the caches, read once a
 * call): each k group's two lines asked for PREFETCH_GROUPS groups ahead, the hardware
 * prefetchers alone keeping too few reads in flight from L3. */
#define PREFETCH_GROUPS 32
#define NO_PREFETCH(p) ((void)0)
#define PREFETCH_X(p)                                                                         \
    do {                                                                                      \
        _mm_prefetch((const char *)((p) + PREFETCH_GROUPS * 32), _MM_HINT_T0);                \
        _mm_prefetch((const char *)((p) + PREFETCH_GROUPS * 32 + 16), _MM_HINT_T0);           \
    } while (0)

/* The conv's packed weights (gemm's W, the broadcast operand) come from L3 on their
 * first pass, a QDQ ResNet-50's 25 MB every run: each k group asks for the line 64
 * groups ahead in its row panel (ResNet-50's conv shapes with the caches flushed
 * 2660-2760 -> 2500-2580 us; in the cache no slower). */
#define WPREFETCH_GROUPS 64
#define PREFETCH_W(p) _mm_prefetch((const char *)((p) + WPREFETCH_GROUPS * 8), _MM_HINT_T0)

KERNEL_512(kernel_avx512, AVX512_TARGET, STEP_MADD, NO_PREFETCH, NO_PREFETCH)
KERNEL_512(kernel_vnni, AVX512_TARGET ",avx512vnni", STEP_VNNI, NO_PREFETCH, PREFETCH_W)
KERNEL_512(kernel_vnni_stream, AVX512_TARGET ",avx512vnni", STEP_VNNI, PREFETCH_X, NO_PREFETCH)
KERNEL_512_AT(kernel_vnni_rows, AVX512_TARGET ",avx512vnni", STEP_VNNI, NO_PREFETCH, PREFETCH_W,
              ROWS_PARAM, X_ROWS)
#endif

static Kernel level_kernel(int level) {
#if HAVE_X86
    switch (level) {
    case 1: return kernel_avx2;
    case 2: return kernel_avx512;
    case 3: return kernel_vnni;
    default: break;
    }
#endif
    return kernel_generic;
}

/* ---- packing ---------------------------------------------------------------------------- */

/* One int32 group of `group` k values for the int16 form (group 2: two int16, the value
 * minus its zero point) or the byte form (group 4: four bytes). */
static inline uint32_t pair16(int32_t v0, int32_t v1) {
    return (uint32_t)(uint16_t)(int16_t)v0 | ((uint32_t)(uint16_t)(int16_t)v1 << 16);
}

#if HAVE_X86
/* pack_w_rows' int16 pairs of one row, 8 at a time: 16 bytes widened, less the zero
 * point, then each pair (one int32 lane, pair16's layout) to its place mr apart; returns
 * how many pairs it packed (a multiple of 8). */
__attribute__((target("avx2"))) static Py_ssize_t pairs_avx2(const uint8_t *row,
                                                              Py_ssize_t pairs, int w_signed,
                                                              int32_t z, uint32_t *dst,
                                                              int mr) {
    const __m256i zz = _mm256_set1_epi16((int16_t)z);
    Py_ssize_t q = 0;
    for (; q + 8 <= pairs; q += 8) {
        const __m128i b = _mm_loadu_si128((const __m128i *)(row + 2 * q));
        const __m256i v =
            _mm256_sub_epi16(w_signed ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b), zz);
        uint32_t lanes[8];
        _mm256_storeu_si256((__m256i *)lanes, v);
        for (int t = 0; t < 8; t++) dst[(q + t) * mr] = lanes[t];
    }
    return q;
}
#endif

#if HAVE_X86
/* The sum of the k bytes of a row as signed bytes after `flip` (0 or 0x80: a uint8 row
 * moved by -128), 64 bytes a step: each byte's unsigned view u = b ^ flip ^ 0x80 is its
 * signed value plus 128, summed by vpsadbw into 64-bit lanes, less 128 k.  The byte
 * form's only per-byte loop (pack_w_rows: gemm_rows packs A on every call); the scalar
 * loop took 0.4 of a 128 x 512 x 128 product's time on a Zen 4 core. */
__attribute__((target("avx512f,avx512bw"))) static int32_t signed_byte_sum_512(
    const uint8_t *row, Py_ssize_t k, uint8_t flip) {
    const __m512i to_unsigned = _mm512_set1_epi8((char)(flip ^ 0x80));
    __m512i total = _mm512_setzero_si512();
    Py_ssize_t j = 0;
    for (; j + 64 <= k; j += 64) {
        const __m512i u = _mm512_xor_si512(_mm512_loadu_si512((const void *)(row + j)),
                                           to_unsigned);
        total = _mm512_add_epi64(total, _mm512_sad_epu8(u, _mm512_setzero_si512()));
    }
    if (j < k) { /* the masked tail: its missing bytes zero, as unsigned views */
        const __mmask64 tail = (__mmask64)(~0ULL >> (64 - (k - j)));
        const __m512i u = _mm512_xor_si512(_mm512_maskz_loadu_epi8(tail, row + j),
                                           _mm512_maskz_mov_epi8(tail, to_unsigned));
        total = _mm512_add_epi64(total, _mm512_sad_epu8(u, _mm512_setzero_si512()));
    }
    return (int32_t)(_mm512_reduce_add_epi64(total) - 128 * (int64_t)k);
}
#endif

#if HAVE_X86
/* The byte form's words of 8 rows at once (a whole panel at mr 8, the VNNI level's):
 * dst[q * 8 + r] = word q of row r ^ flip for q < words8 (a multiple of 8), each 8 x 8
 * block of words transposed in registers where the scalar loop stored them one by one
 * 32 bytes apart. */
__attribute__((target("avx2"))) static void panel_words_8(const uint8_t *src, Py_ssize_t k,
                                                           Py_ssize_t words8, uint32_t flip,
                                                           uint32_t *dst) {
    const __m256i f = _mm256_set1_epi32((int)flip);
    for (Py_ssize_t q = 0; q < words8; q += 8) {
        __m256i r[8];
        for (int i = 0; i < 8; i++)
            r[i] = _mm256_xor_si256(
                _mm256_loadu_si256((const __m256i *)(src + i * k + 4 * q)), f);
        /* 8 x 8 dwords: pairs, then pairs of pairs, then the 128-bit halves */
        __m256i t[8], u[8];
        for (int i = 0; i < 4; i++) {
            t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
        }
        for (int i = 0; i < 2; i++) {
            u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
            u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
            u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
            u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
        }
        for (int e = 0; e < 4; e++) {
            _mm256_storeu_si256((__m256i *)(dst + (q + e) * 8),
                                _mm256_permute2x128_si256(u[e], u[4 + e], 0x20));
            _mm256_storeu_si256((__m256i *)(dst + (q + 4 + e) * 8),
                                _mm256_permute2x128_si256(u[e], u[4 + e], 0x31));
        }
    }
}
#endif

/* W [m, k] (bytes, row-major) -> panels of s.mr rows (for each k group, the panel's mr
 * int32 groups side by side), with each row's zero point (zsrc[i * zstep]) as the packed
 * form holds it in zeros[i] and, in the byte form, the sum of its signed bytes in
 * rowsum[i].  panel must be zeroed (the rows and k past the ends stay 0).
 *   int16 form (group 2): pairs of (w - zw).
 *   byte form (group 4): signed bytes; a uint8 W moves by -128 (its zero point too),
 *   which for a byte is flipping its top bit. */
static void pack_w_rows(const uint8_t *src, Py_ssize_t m, Py_ssize_t k, int w_signed,
                        const int32_t *zsrc, Py_ssize_t zstep, Shape s, Py_ssize_t kq,
                        uint32_t *panel, int32_t *rowsum, int32_t *zeros) {
    const uint32_t flip = w_signed ? 0 : 0x80808080u;
    const Py_ssize_t whole = k / 4; /* byte form: k groups read as one 4-byte word */
    /* the byte form's words of whole 8-row panels, 8 words at a time, in registers */
    Py_ssize_t words8 = 0;
#if HAVE_X86
    if (s.group == 4 && s.mr == 8 && current_level >= 1) {
        words8 = whole / 8 * 8;
        if (words8)
            for (Py_ssize_t i = 0; i + 8 <= m; i += 8)
                panel_words_8(src + i * k, k, words8, flip, panel + (i / 8) * kq * 8);
    }
#endif
    for (Py_ssize_t i = 0; i < m; i++) {
        const uint8_t *row = src + i * k;
        uint32_t *dst = panel + (i / s.mr) * kq * s.mr + i % s.mr;
        int32_t z = zsrc[i * zstep];
        int32_t sum = 0;
        /* a whole panel's first words8 words are in place already */
        const Py_ssize_t first_word = i / s.mr * s.mr + s.mr <= m ? words8 : 0;
        if (s.group == 2) {
            /* whole pairs without a test per byte (gemm_rows packs A, a dynamic-quantized
             * BERT-tiny layer's 128 x 128 activations, on every call: the per-byte loop
             * cost 0.4 of the product's own time), then an odd k's last byte; the
             * panel's k past the end stays 0 */
            const Py_ssize_t pairs = k / 2;
            Py_ssize_t q0 = 0;
#if HAVE_X86
            if (current_level >= 1) q0 = pairs_avx2(row, pairs, w_signed, z, dst, s.mr);
#endif
            if (w_signed)
                for (Py_ssize_t q = q0; q < pairs; q++)
                    dst[q * s.mr] = pair16((int8_t)row[2 * q] - z, (int8_t)row[2 * q + 1] - z);
            else
                for (Py_ssize_t q = q0; q < pairs; q++)
                    dst[q * s.mr] = pair16(row[2 * q] - z, row[2 * q + 1] - z);
            if (k % 2)
                dst[pairs * s.mr] =
                    pair16((w_signed ? (int32_t)(int8_t)row[k - 1] : row[k - 1]) - z, 0);
        } else {
            for (Py_ssize_t q = first_word; q < whole; q++) {
                uint32_t word;
                memcpy(&word, row + 4 * q, 4);
                dst[q * s.mr] = word ^ flip;
            }
#if HAVE_X86
            const int vector_sum = current_level >= 2;
            if (vector_sum) sum = signed_byte_sum_512(row, k, (uint8_t)flip);
#else
            const int vector_sum = 0;
#endif
            if (!vector_sum)
                for (Py_ssize_t j = 0; j < 4 * whole; j++)
                    sum += (int32_t)(int8_t)(uint8_t)(row[j] ^ (uint8_t)flip);
            uint32_t packed = 0;
            for (Py_ssize_t j = 4 * whole; j < k; j++) {
                int32_t raw = (int32_t)(int8_t)(uint8_t)(row[j] ^ (uint8_t)flip);
                if (!vector_sum) sum += raw;
                packed |= (uint32_t)(uint8_t)(int8_t)raw << (8 * (j - 4 * whole));
            }
            if (whole < kq) dst[whole * s.mr] = packed;
            z = w_signed ? z : z - 128;
        }
        rowsum[i] = sum;
        zeros[i] = z;
    }
}

/* WEIGHT_QUADS: gemm's (a conv's) weights at the AVX2 level as QUADS are for B (see
 * there), with W's rows in the signed role: each row's k pairs of one sign cut to
 * |w0| + |w1| <= 128, the rest a correction (row i, k, f) that adds f times X's row k
 * to C's row i, a pass
 * along the pixels (vectorized) after each column block's product.  Per-channel
 * weights cut more pairs (each row's largest code is 127) than per-tensor ones, but a
 * correction costs one multiply-add per pixel where the product made K: W keeps the
 * int16 form only when more than 1 in WEIGHT_QUADS_MAX_FIXES of its values needs one. */
#define WEIGHT_QUADS_MAX_FIXES 16
static Py_ssize_t quads_fixes(const uint8_t *b, Py_ssize_t k, Py_ssize_t n, uint8_t flip,
                              int32_t *fix);

static PyObject *py_pack_weights(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer w, zw;
    Py_ssize_t m, k;
    int w_signed;
    if (!PyArg_ParseTuple(args, "y*nnpy*", &w, &m, &k, &w_signed, &zw)) return NULL;
    PyObject *result = NULL;
    if (m <= 0 || k <= 0 || k > MAX_K || m > (1 << 24)) {
        PyErr_Format(PyExc_ValueError, "pack_weights: M=%zd, K=%zd (K must be 1..%d)", m, k,
                     MAX_K);
        goto done;
    }
    if (w.len < m * k || zw.len < m * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "pack_weights: a buffer is shorter than its size");
        goto done;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        const int32_t z = ((const int32_t *)zw.buf)[i];
        if (!byte_code(w_signed, z)) {
            PyErr_SetString(PyExc_ValueError, "pack_weights: zero point outside the type's range");
            goto done;
        }
    }
    {
        const int level = current_level;
        Shape s = level_shape(level);
        const uint8_t flip = w_signed ? 0 : 0x80;
        Py_ssize_t fixes = 0;
        if (level == 1) {
            /* WEIGHT_QUADS: the rows' k pairs that need a cut (quads_fixes on W^T's
             * layout: here a pair is two neighbours of one row) */
            for (Py_ssize_t i = 0; i < m; i++)
                fixes += quads_fixes((const uint8_t *)w.buf + i * k, k, 1, flip, NULL);
            if (fixes * WEIGHT_QUADS_MAX_FIXES <= m * k && fixes < (1 << 30)) s.group = 4;
            else fixes = 0;
        }
        Header h;
        h.magic = MAGIC;
        h.level = level;
        h.m = (int32_t)m;
        h.k = (int32_t)k;
        h.mr = s.mr;
        h.group = s.group;
        h.kq = (int32_t)((k + s.group - 1) / s.group);
        h.panels = (int32_t)((m + s.mr - 1) / s.mr);
        h.fixes = (int32_t)fixes;
        const Py_ssize_t mp = (Py_ssize_t)h.panels * s.mr;
        result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)packed_bytes(&h));
        if (result == NULL) goto done;
        char *base = PyBytes_AS_STRING(result);
        memcpy(base, &h, sizeof(h));
        int32_t *rowsum = (int32_t *)(base + sizeof(Header));
        int32_t *zeros = rowsum + mp;
        uint32_t *panel = (uint32_t *)(zeros + mp);
        memset(rowsum, 0, 2 * (size_t)mp * sizeof(int32_t));
        memset(panel, 0, (size_t)mp * (size_t)h.kq * sizeof(uint32_t));
        pack_w_rows((const uint8_t *)w.buf, m, k, w_signed, (const int32_t *)zw.buf, 1, s,
                    h.kq, panel, rowsum, zeros);
        if (level == 1 && s.group == 4) {
            /* the cut pairs: their kept byte in the panel, the rest a correction */
            int32_t *fix = (int32_t *)(panel + mp * h.kq), *row_fix = fix;
            int32_t one[3]; /* a pair cuts at most one of its two values */
            for (Py_ssize_t i = 0; i < m; i++) {
                const uint8_t *row = (const uint8_t *)w.buf + i * k;
                for (Py_ssize_t k0 = 0; k0 + 1 < k; k0 += 2) {
                    if (quads_fixes(row + k0, 2, 1, flip, one) == 0) continue;
                    const Py_ssize_t kk = k0 + one[0]; /* quads_fixes' k: 0 or 1 here */
                    uint8_t *at = (uint8_t *)(panel + (i / s.mr) * h.kq * s.mr + (kk / 4) * s.mr +
                                              i % s.mr) + kk % 4;
                    *at = (uint8_t)(int8_t)((int8_t)*at - one[2]);
                    row_fix[0] = (int32_t)i;
                    row_fix[1] = (int32_t)kk;
                    row_fix[2] = one[2];
                    row_fix += 3;
                }
            }
        }
    }
done:
    PyBuffer_Release(&w);
    PyBuffer_Release(&zw);
    return result;
}

#if defined(__SSE2__)
/* One k group of `panels` consecutive full panels (nr columns each, a multiple of 16; the
 * first at column j0, each panel_stride groups after the one before in o) from rows read
 * with column stride 1, by byte and word interleaves (SSE2: every x86-64 CPU has it). The
 * group's rows are read once along the whole span. */
static void pack_group_sse2(const uint8_t *x, const int64_t *rowoff, Py_ssize_t k, Py_ssize_t q,
                            Py_ssize_t j0, Py_ssize_t panels, Py_ssize_t panel_stride,
                            Py_ssize_t nr, int group, int x_signed, int32_t zx, uint32_t *o) {
    const Py_ssize_t span = panels * nr;
    const __m128i zero = _mm_setzero_si128();
    if (group == 4) {
        const uint8_t *r[4];
        __m128i flip[4];
        for (int g = 0; g < 4; g++) {
            const Py_ssize_t kk = 4 * q + g;
            /* Past K: zero bytes, never flipped (the weight there is 0 too). */
            r[g] = kk < k ? x + rowoff[kk] + j0 : NULL;
            flip[g] = kk < k && x_signed ? _mm_set1_epi8((char)0x80) : zero;
        }
        for (Py_ssize_t j = 0, pp = 0, jj = 0; j < span; j += 16, jj += 16) {
            if (jj == nr) {
                jj = 0;
                pp++;
            }
            __m128i v[4];
            for (int g = 0; g < 4; g++)
                v[g] = r[g] ? _mm_xor_si128(_mm_loadu_si128((const __m128i *)(r[g] + j)), flip[g])
                            : zero;
            const __m128i ab_lo = _mm_unpacklo_epi8(v[0], v[1]), ab_hi = _mm_unpackhi_epi8(v[0], v[1]);
            const __m128i cd_lo = _mm_unpacklo_epi8(v[2], v[3]), cd_hi = _mm_unpackhi_epi8(v[2], v[3]);
            __m128i *out = (__m128i *)(o + pp * panel_stride + jj);
            _mm_storeu_si128(out, _mm_unpacklo_epi16(ab_lo, cd_lo));
            _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(ab_lo, cd_lo));
            _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(ab_hi, cd_hi));
            _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(ab_hi, cd_hi));
        }
        return;
    }
    const Py_ssize_t k0 = 2 * q;
    const uint8_t *r0 = x + rowoff[k0] + j0;
    const uint8_t *r1 = k0 + 1 < k ? x + rowoff[k0 + 1] + j0 : NULL;
    const __m128i z = _mm_set1_epi16((short)zx);
    for (Py_ssize_t j = 0, pp = 0, jj = 0; j < span; j += 16, jj += 16) {
        if (jj == nr) {
            jj = 0;
            pp++;
        }
        __m128i lo[2], hi[2];
        for (int g = 0; g < 2; g++) {
            const uint8_t *row = g ? r1 : r0;
            if (row == NULL) { /* past K: 0 after the zero point (the weight is 0 too) */
                lo[g] = hi[g] = zero;
                continue;
            }
            const __m128i a = _mm_loadu_si128((const __m128i *)(row + j));
            if (x_signed) { /* sign-extend: the byte in the high half, shifted down */
                lo[g] = _mm_srai_epi16(_mm_unpacklo_epi8(a, a), 8);
                hi[g] = _mm_srai_epi16(_mm_unpackhi_epi8(a, a), 8);
            } else {
                lo[g] = _mm_unpacklo_epi8(a, zero);
                hi[g] = _mm_unpackhi_epi8(a, zero);
            }
            lo[g] = _mm_sub_epi16(lo[g], z);
            hi[g] = _mm_sub_epi16(hi[g], z);
        }
        __m128i *out = (__m128i *)(o + pp * panel_stride + jj);
        _mm_storeu_si128(out, _mm_unpacklo_epi16(lo[0], lo[1]));
        _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(lo[0], lo[1]));
        _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(hi[0], hi[1]));
        _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(hi[0], hi[1]));
    }
}
#endif

#if HAVE_X86
/* pack_group_sse2's byte form (group 4) 64 columns at a time: two whole panels of 32
 * (nr == 32, the VNNI level's).  The two unpack steps interleave the four rows within
 * each 128-bit lane, so lane L of the i-th result holds columns 16L + 4i .. 16L + 4i + 3;
 * a 4x4 transpose of the lanes (two rounds of shuffle_i64x2) puts 16 consecutive
 * columns in each vector, as the SSE2 code writes them.  Returns the panels it packed
 * (an even number); the caller packs the rest. */
__attribute__((target(AVX512_TARGET))) static Py_ssize_t pack_group4_avx512(
    const uint8_t *x, const int64_t *rowoff, Py_ssize_t k, Py_ssize_t q, Py_ssize_t j0,
    Py_ssize_t panels, Py_ssize_t panel_stride, int x_signed, uint32_t *o) {
    const uint8_t *r[4];
    __m512i flip[4];
    for (int g = 0; g < 4; g++) {
        const Py_ssize_t kk = 4 * q + g;
        r[g] = kk < k ? x + rowoff[kk] + j0 : NULL; /* past K: zero bytes, never flipped */
        flip[g] = _mm512_set1_epi8(kk < k && x_signed ? (char)0x80 : 0);
    }
    const Py_ssize_t pairs = panels / 2;
    for (Py_ssize_t pp = 0; pp < pairs; pp++) {
        __m512i v[4];
        for (int g = 0; g < 4; g++)
            v[g] = r[g] ? _mm512_xor_si512(_mm512_loadu_si512((const void *)(r[g] + 64 * pp)),
                                           flip[g])
                        : _mm512_setzero_si512();
        const __m512i ab_lo = _mm512_unpacklo_epi8(v[0], v[1]),
                      ab_hi = _mm512_unpackhi_epi8(v[0], v[1]);
        const __m512i cd_lo = _mm512_unpacklo_epi8(v[2], v[3]),
                      cd_hi = _mm512_unpackhi_epi8(v[2], v[3]);
        const __m512i o0 = _mm512_unpacklo_epi16(ab_lo, cd_lo),
                      o1 = _mm512_unpackhi_epi16(ab_lo, cd_lo),
                      o2 = _mm512_unpacklo_epi16(ab_hi, cd_hi),
                      o3 = _mm512_unpackhi_epi16(ab_hi, cd_hi);
        const __m512i t0 = _mm512_shuffle_i64x2(o0, o1, 0x44),
                      t1 = _mm512_shuffle_i64x2(o0, o1, 0xEE),
                      t2 = _mm512_shuffle_i64x2(o2, o3, 0x44),
                      t3 = _mm512_shuffle_i64x2(o2, o3, 0xEE);
        uint32_t *out = o + 2 * pp * panel_stride;
        _mm512_storeu_si512((void *)out, _mm512_shuffle_i64x2(t0, t2, 0x88));
        _mm512_storeu_si512((void *)(out + 16), _mm512_shuffle_i64x2(t0, t2, 0xDD));
        _mm512_storeu_si512((void *)(out + panel_stride), _mm512_shuffle_i64x2(t1, t3, 0x88));
        _mm512_storeu_si512((void *)(out + panel_stride + 16),
                            _mm512_shuffle_i64x2(t1, t3, 0xDD));
    }
    return 2 * pairs;
}
#endif

/* X[k, n] = x[rowoff[k] + n * colstride] -> panels p_begin..p_end-1 of nr columns (from
 * dst on): for each k group, nr int32 groups (written in order; the group's rows are read
 * side by side).
 * colsum[n] (byte form, when not NULL): sum over k of the unsigned byte.
 * x_len: the bytes x holds (a last, partial panel is packed whole, by the vector code,
 * when every row's read stays inside them: its columns past N are never stored). */
static void pack_x(const uint8_t *x, Py_ssize_t x_len, const int64_t *rowoff,
                   Py_ssize_t colstride, Py_ssize_t k, Py_ssize_t n, int x_signed, int32_t zx,
                   Shape s, Py_ssize_t kq, uint32_t *dst, int32_t *colsum, Py_ssize_t p_begin,
                   Py_ssize_t p_end) {
    const Py_ssize_t nr = s.nr;
    const uint8_t flip = x_signed ? 0x80 : 0; /* int8 -> uint8 by +128 (byte form) */
    /* A row of zero points (int16 form) or zeros (byte form) for the k past K. */
    static const uint8_t zero_row[64] = {0};
    Py_ssize_t first = p_begin; /* the first panel the scalar loop below packs */
#if defined(__SSE2__)
    if (colstride == 1 && colsum == NULL) {
        /* The full panels, k group by k group, each group's rows read along the span. */
        Py_ssize_t full_end = n / nr < p_end ? n / nr : p_end;
        if (full_end < p_end && n % nr) {
            int64_t last = 0;
            for (Py_ssize_t i = 0; i < k; i++) last = rowoff[i] > last ? rowoff[i] : last;
            if (last + (int64_t)p_end * nr <= (int64_t)x_len) full_end = p_end;
        }
        if (full_end > p_begin) {
            for (Py_ssize_t q = 0; q < kq; q++) {
                Py_ssize_t done = 0;
#if HAVE_X86
                if (s.group == 4 && nr == 32 && current_level >= 3)
                    done = pack_group4_avx512(x, rowoff, k, q, p_begin * nr, full_end - p_begin,
                                              kq * nr, x_signed, dst + q * nr);
#endif
                if (full_end - p_begin > done)
                    pack_group_sse2(x, rowoff, k, q, (p_begin + done) * nr,
                                    full_end - p_begin - done, kq * nr, nr, s.group, x_signed,
                                    zx, dst + done * kq * nr + q * nr);
            }
            first = full_end;
        }
    }
#endif
    for (Py_ssize_t p = first; p < p_end; p++) {
        const Py_ssize_t j0 = p * nr;
        const Py_ssize_t nv = n - j0 < nr ? n - j0 : nr;
        uint32_t *o = dst + (p - p_begin) * kq * nr;
        int32_t *cs = colsum != NULL ? colsum + j0 : NULL;
        for (Py_ssize_t q = 0; q < kq; q++, o += nr) {
            if (s.group == 2) {
                const Py_ssize_t k0 = 2 * q;
                const uint8_t *r0 = x + rowoff[k0] + j0 * colstride;
                const int has1 = k0 + 1 < k;
                const uint8_t *r1 = has1 ? x + rowoff[k0 + 1] + j0 * colstride : r0;
                if (x_signed) {
                    for (Py_ssize_t j = 0; j < nv; j++) {
                        int32_t v0 = (int32_t)(int8_t)r0[j * colstride] - zx;
                        int32_t v1 = has1 ? (int32_t)(int8_t)r1[j * colstride] - zx : 0;
                        o[j] = pair16(v0, v1);
                    }
                } else {
                    for (Py_ssize_t j = 0; j < nv; j++) {
                        int32_t v0 = (int32_t)r0[j * colstride] - zx;
                        int32_t v1 = has1 ? (int32_t)r1[j * colstride] - zx : 0;
                        o[j] = pair16(v0, v1);
                    }
                }
            } else {
                const uint8_t *r[4];
                Py_ssize_t step[4];
                uint8_t fl[4];
                for (int g = 0; g < 4; g++) {
                    const Py_ssize_t kk = 4 * q + g;
                    r[g] = kk < k ? x + rowoff[kk] + j0 * colstride : zero_row;
                    step[g] = kk < k ? colstride : 0;
                    fl[g] = kk < k ? flip : 0;
                }
                for (Py_ssize_t j = 0; j < nv; j++) {
                    uint32_t b0 = (uint8_t)(r[0][j * step[0]] ^ fl[0]);
                    uint32_t b1 = (uint8_t)(r[1][j * step[1]] ^ fl[1]);
                    uint32_t b2 = (uint8_t)(r[2][j * step[2]] ^ fl[2]);
                    uint32_t b3 = (uint8_t)(r[3][j * step[3]] ^ fl[3]);
                    o[j] = b0 | b1 << 8 | b2 << 16 | b3 << 24;
                    if (colsum != NULL) cs[j] += (int32_t)(b0 + b1 + b2 + b3);
                }
            }
            for (Py_ssize_t j = nv; j < nr; j++) o[j] = 0;
        }
    }
}

static int check_offsets(const int64_t *rowoff, Py_ssize_t k, Py_ssize_t n, Py_ssize_t colstride,
                         Py_ssize_t len) {
    const int64_t span = (int64_t)(n - 1) * colstride;
    for (Py_ssize_t i = 0; i < k; i++)
        if (rowoff[i] < 0 || rowoff[i] > (int64_t)len - 1 - span) return 0;
    return 1;
}

/* What gemm_blocks hands each block of C's columns to once it is final: C's rows for
 * columns col0..col1-1 of the product, at c (row stride ldc, column col0 first). */
typedef struct {
    void (*done)(void *ctx, const int32_t *c, Py_ssize_t ldc, Py_ssize_t col0,
                 Py_ssize_t col1);
    void *ctx;
} BlockSink;

/* C = (W - zw) (X - zx), X[k, n] = x[rowoff[k] + n * colstride], W packed (h, s: its
 * level's shape).  X is packed a block of column panels at a time, just before its
 * products: as many panels as fit in about 256 KB (L2), each block then multiplied by
 * every row panel of W in turn, so C is written row panel by row panel (8 rows streaming
 * along N, not all M rows at once) while the packed block stays in cache.  With `out`
 * (M x n int32, row-major) C goes there.  With a sink, the blocks are also capped at
 * 512 KB of C, each computed into a C of its own that stays in cache, and handed to the
 * sink when final: the caller's pass over C (a conv's rescale) reads it from L2 instead
 * of a whole C written to memory and read back.  Operands checked by the caller; runs
 * without the GIL; -1 when memory runs out. */
#if HAVE_X86
__attribute__((target("avx2"))) static void add_row_times_avx2(int32_t *c, const uint8_t *x,
                                                               Py_ssize_t j0, Py_ssize_t j1,
                                                               uint8_t flip, int32_t f) {
    const __m256i fv = _mm256_set1_epi32(f);
    const __m128i flipv = _mm_set1_epi8((char)flip);
    Py_ssize_t j = j0;
    for (; j + 16 <= j1; j += 16) {
        const __m128i b = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(x + j)), flipv);
        const __m256i lo = _mm256_mullo_epi32(_mm256_cvtepu8_epi32(b), fv);
        const __m256i hi = _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)), fv);
        __m256i *o = (__m256i *)(c + j);
        _mm256_storeu_si256(o, _mm256_add_epi32(_mm256_loadu_si256(o), lo));
        _mm256_storeu_si256(o + 1, _mm256_add_epi32(_mm256_loadu_si256(o + 1), hi));
    }
    for (; j < j1; j++)
        c[j] = (int32_t)((uint32_t)c[j] + (uint32_t)(uint8_t)(x[j] ^ flip) * (uint32_t)f);
}
#endif

/* c[j] += f * (x[j * colstride] ^ flip) for j in [j0, j1) (modulo 2^32): a cut pair's
 * correction along one row of C (WEIGHT_QUADS), 16 pixels a step when they are
 * consecutive. */
static void add_row_times(int32_t *c, const uint8_t *x, Py_ssize_t colstride, Py_ssize_t j0,
                          Py_ssize_t j1, uint8_t flip, int32_t f) {
    Py_ssize_t j = j0;
#if HAVE_X86
    if (colstride == 1 && current_level >= 1) {
        add_row_times_avx2(c, x, j0, j1, flip, f);
        return;
    }
#endif
    for (; j < j1; j++)
        c[j] = (int32_t)((uint32_t)c[j] + (uint32_t)(uint8_t)(x[j * colstride] ^ flip) * (uint32_t)f);
}

static int gemm_blocks(const Header *h, const char *base, Shape s, const uint8_t *x,
                       Py_ssize_t x_len, const int64_t *rowoff, Py_ssize_t colstride,
                       Py_ssize_t n, int x_signed, int zx, int32_t *out,
                       const BlockSink *sink, const uint32_t *x4, const int64_t *rows4) {
    const Py_ssize_t m = h->m, k = h->k, kq = h->kq, panels_n = (n + s.nr - 1) / s.nr;
    const Py_ssize_t mp = (Py_ssize_t)h->panels * h->mr;
    /* x4 (VNNI only, no weight zero points: the caller checks): X's k groups read where
     * they lie, no packing; the blocks then only keep C in cache. */
    Py_ssize_t block = x4 != NULL ? panels_n
                                  : (256 * 1024) / (kq * s.nr * (Py_ssize_t)sizeof(uint32_t));
    if (sink != NULL) {
        const Py_ssize_t c_panels = (512 * 1024) / (mp * s.nr * (Py_ssize_t)sizeof(int32_t));
        block = c_panels < block ? c_panels : block;
    }
    block = block < 1 ? 1 : (block > panels_n ? panels_n : block);
    const Py_ssize_t ldc = sink != NULL ? block * s.nr : n;
    uint32_t *xp = x4 != NULL ? NULL : malloc((size_t)(block * kq * s.nr) * sizeof(uint32_t) + 64);
    int32_t *cblock = sink != NULL ? malloc((size_t)(mp * ldc) * sizeof(int32_t)) : NULL;
    const int32_t *rowsum = (const int32_t *)(base + sizeof(Header));
    const int32_t *zeros = rowsum + mp;
    const int32_t *wpanels = zeros + mp;
    int need_colsum = 0;
    for (Py_ssize_t i = 0; i < m && s.group == 4; i++) need_colsum |= zeros[i] != 0;
    int32_t *colsum = need_colsum ? calloc((size_t)n, sizeof(int32_t)) : NULL;
    /* Byte form: the zero points' exact correction, modulo 2^32, is
     * zx k zw - zx rowsum[i] - zw colsum[j] (zx as the unsigned byte's); its row
     * term starts the accumulators (the kernels' init), the column term is a pass
     * over C after, for rows whose zw is not 0. */
    int32_t *row_init = s.group == 4 ? calloc((size_t)mp, sizeof(int32_t)) : NULL;
    if ((xp == NULL && x4 == NULL) || (sink != NULL && cblock == NULL) ||
        (need_colsum && colsum == NULL) || (s.group == 4 && row_init == NULL)) {
        free(xp);
        free(cblock);
        free(colsum);
        free(row_init);
        return -1;
    }
    const uint32_t zxu = (uint32_t)(x_signed ? zx + 128 : zx);
    for (Py_ssize_t i = 0; i < m && row_init != NULL; i++) {
        const uint32_t zw = (uint32_t)zeros[i];
        row_init[i] = (int32_t)(zxu * (uint32_t)k * zw - zxu * (uint32_t)rowsum[i]);
    }
    Kernel kern = level_kernel(current_level);
    /* the int16 form's tiles by a panel's valid rows (as gemm_rows' row_kernels) */
    const Kernel *row_kernels = NULL;
#if HAVE_X86
    if (current_level == 1 && s.group == 4) kern = kernel_avx2_weight_quads;
    if (current_level == 1 && s.group == 2) row_kernels = int16_kernels;
#endif
    /* WEIGHT_QUADS' corrections (row, k, f), after the panels */
    const int32_t *fix = wpanels + mp * kq;
    const Py_ssize_t kcq = KC_GROUPS_BYTES / s.group; /* k groups per cache block */
    for (Py_ssize_t b0 = 0; b0 < panels_n; b0 += block) {
        const Py_ssize_t b1 = b0 + block < panels_n ? b0 + block : panels_n;
        /* C's columns of this block: in out, or from the start of cblock */
        int32_t *c = sink != NULL ? cblock - b0 * s.nr : out;
        if (x4 == NULL)
            pack_x(x, x_len, rowoff, colstride, k, n, x_signed, zx, s, kq, xp, colsum, b0, b1);
        for (Py_ssize_t q0 = 0; q0 < kq; q0 += kcq) {
            const Py_ssize_t qn = kq - q0 < kcq ? kq - q0 : kcq;
            for (Py_ssize_t pm = 0; pm < h->panels; pm++) {
                const int32_t *wpanel = wpanels + pm * kq * s.mr + q0 * s.mr;
                const int mr_valid = (int)(m - pm * s.mr < s.mr ? m - pm * s.mr : s.mr);
                const int32_t *init = row_init != NULL ? row_init + pm * s.mr : NULL;
                for (Py_ssize_t pn = b0; pn < b1; pn++) {
                    const int nr_valid = (int)(n - pn * s.nr < s.nr ? n - pn * s.nr : s.nr);
                    int32_t *cp = c + pm * s.mr * ldc + pn * s.nr;
#if HAVE_X86
                    if (x4 != NULL && current_level == 1) {
                        pairs_kernels[mr_valid](wpanel, (const int32_t *)(x4 + pn * s.nr), qn, cp,
                                                ldc, mr_valid, nr_valid, q0 > 0, init, NULL,
                                                rows4 + q0);
                        continue;
                    }
                    if (x4 != NULL) {
                        kernel_vnni_rows(wpanel, (const int32_t *)(x4 + pn * s.nr), qn, cp, ldc,
                                         mr_valid, nr_valid, q0 > 0, init, NULL, rows4 + q0);
                        continue;
                    }
#endif
                    const uint32_t *xpanel = xp + (pn - b0) * kq * s.nr + q0 * s.nr;
                    if (row_kernels != NULL) kern = row_kernels[mr_valid];
                    kern(wpanel, (const int32_t *)xpanel, qn, cp, ldc, mr_valid, nr_valid,
                         q0 > 0, init, NULL);
                }
            }
        }
        const Py_ssize_t col0 = b0 * s.nr, col1 = b1 * s.nr < n ? b1 * s.nr : n;
        for (Py_ssize_t f = 0; f < h->fixes; f++)
            add_row_times(c + fix[3 * f] * ldc, x + rowoff[fix[3 * f + 1]], colstride, col0, col1,
                          x_signed ? 0x80 : 0, fix[3 * f + 2]);
        for (Py_ssize_t i = 0; i < m && colsum != NULL; i++) {
            const uint32_t zw = (uint32_t)zeros[i];
            uint32_t *ci = (uint32_t *)(c + i * ldc);
            if (zw != 0)
                for (Py_ssize_t j = col0; j < col1; j++) ci[j] -= zw * (uint32_t)colsum[j];
        }
        if (sink != NULL) sink->done(sink->ctx, cblock, ldc, col0, col1);
    }
    free(xp);
    free(cblock);
    free(colsum);
    free(row_init);
    return 0;
}

/* The packed weights' header of `packed`, checked against this level; 0 with a
 * ValueError (naming `name`) when they are not packed weights of it. */
static int packed_header(const Py_buffer *packed, const char *name, Header *h, Shape *s) {
    if (packed->len < (Py_ssize_t)sizeof(Header)) {
        PyErr_Format(PyExc_ValueError, "%s: not packed weights", name);
        return 0;
    }
    memcpy(h, packed->buf, sizeof(*h));
    if (h->magic != MAGIC || h->m <= 0 || h->k <= 0 || h->k > MAX_K || h->panels <= 0 ||
        h->kq <= 0 || h->level < 0 || h->level > 3 || h->fixes < 0 || h->fixes > (1 << 30) ||
        packed->len != (Py_ssize_t)packed_bytes(h)) {
        PyErr_Format(PyExc_ValueError, "%s: not packed weights", name);
        return 0;
    }
    *s = level_shape(current_level);
    const int quads = current_level == 1 && h->group == 4; /* WEIGHT_QUADS */
    if (quads) s->group = 4;
    if (h->level != current_level || h->mr != s->mr || h->group != s->group ||
        h->kq != (h->k + s->group - 1) / s->group || h->panels != (h->m + s->mr - 1) / s->mr ||
        (!quads && h->fixes != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: the weights were packed at another level", name);
        return 0;
    }
    const Py_ssize_t mp = (Py_ssize_t)h->panels * h->mr;
    const int32_t *fix = (const int32_t *)((const char *)packed->buf + sizeof(Header)) +
                         2 * mp + mp * (Py_ssize_t)h->kq;
    for (Py_ssize_t f = 0; f < h->fixes; f++)
        if (fix[3 * f] < 0 || fix[3 * f] >= h->m || fix[3 * f + 1] < 0 || fix[3 * f + 1] >= h->k) {
            PyErr_Format(PyExc_ValueError, "%s: not packed weights", name);
            return 0;
        }
    return 1;
}

/* gemm's operands besides the weights (x, rowoff, colstride, N, zx), checked. */
static int gemm_operands(const char *name, const Header *h, const Py_buffer *x,
                         const Py_buffer *rowoff, Py_ssize_t colstride, Py_ssize_t n,
                         int x_signed, int zx) {
    const Py_ssize_t m = h->m, k = h->k;
    if (n <= 0 || colstride <= 0 || colstride > x->len ||
        n > PY_SSIZE_T_MAX / 8 / (colstride + m + k)) {
        PyErr_Format(PyExc_ValueError, "%s: bad N or column stride", name);
        return 0;
    }
    if (!byte_code(x_signed, zx)) {
        PyErr_Format(PyExc_ValueError, "%s: zero point outside the type's range", name);
        return 0;
    }
    if (rowoff->len != k * (Py_ssize_t)sizeof(int64_t) || x->len <= 0 ||
        !check_offsets((const int64_t *)rowoff->buf, k, n, colstride, x->len)) {
        PyErr_Format(PyExc_ValueError, "%s: a buffer does not fit its sizes", name);
        return 0;
    }
    return 1;
}

static PyObject *py_gemm(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer packed, x, rowoff, out;
    Py_ssize_t colstride, n;
    int x_signed, zx;
    if (!PyArg_ParseTuple(args, "y*y*y*nnpiw*", &packed, &x, &rowoff, &colstride, &n, &x_signed,
                          &zx, &out))
        return NULL;
    PyObject *result = NULL;
    Header h;
    Shape s;
    if (!packed_header(&packed, "gemm", &h, &s) ||
        !gemm_operands("gemm", &h, &x, &rowoff, colstride, n, x_signed, zx))
        goto done;
    if (out.len < h.m * n * (Py_ssize_t)4) {
        PyErr_SetString(PyExc_ValueError, "gemm: a buffer does not fit its sizes");
        goto done;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = gemm_blocks(&h, (const char *)packed.buf, s, (const uint8_t *)x.buf, x.len,
                         (const int64_t *)rowoff.buf, colstride, n, x_signed, zx,
                         (int32_t *)out.buf, NULL, NULL, NULL);
    Py_END_ALLOW_THREADS;
    result = status == 0 ? Py_NewRef(Py_None) : PyErr_NoMemory();
done:
    PyBuffer_Release(&packed);
    PyBuffer_Release(&x);
    PyBuffer_Release(&rowoff);
    PyBuffer_Release(&out);
    return result;
}

/* ---- row-major products with a constant right operand ---------------------------------
 * C[M, N] = (A - za) @ (B - zb) for a MatMul's activations A [M, K] and its constant
 * B [K, N], one zero point each.  B takes the X role, all its column panels packed once
 * (pack_columns, with each column's byte sum); A takes the W role, packed per call: it is
 * small next to B, every X panel reads it from cache, and C comes out row-major as the
 * MatMul wants it, with no transpose.  (onnxruntime's QGemm has the same shape: the
 * activations broadcast, the weights in vectors.)  With one zero point for all of A, the
 * zero points' column term is one value per column: it starts the accumulators with the
 * row term (the kernels' init and cinit), and no pass over C follows. */
#define COLS_MAGIC 0x4c4f4349 /* "ICOL" */

typedef struct {
    int32_t magic, level, k, n, nr, group, kq, panels, x_signed, zx;
    int32_t bytes; /* 0: int16 groups; BYTE_PAIRS or QUADS (the AVX2 level's forms) */
    int32_t fixes; /* QUADS: how many (k, j, f) corrections follow the column sums */
} ColHeader;

enum { BYTE_PAIRS = 1, QUADS = 2 };

/* The AVX2 level keeps B as bytes (`bytes`: BYTE_PAIRS below): the int16 pairs doubled
 * what a few-row product reads from memory, and such a product is bound by that read
 * (GPT-2's 8-token step: 768 x 3072 int8 weights, 2.4 MB, read as 4.7). */
static size_t cols_bytes(const ColHeader *h) {
    const size_t np = (size_t)h->panels * h->nr;
    const size_t unit = h->bytes == QUADS ? 4 : h->bytes ? 2 : sizeof(uint32_t);
    return sizeof(ColHeader) + np * sizeof(int32_t) + (size_t)h->fixes * 3 * sizeof(int32_t) +
           np * (size_t)h->kq * unit;
}

/* BYTE_PAIRS: B's column panels of 16 at the AVX2 level as byte pairs, for each k pair q
 * the 16 columns' (B[2q, j], B[2q + 1, j]) side by side (32 bytes; 0 past K and N), as
 * signed bytes: a uint8 B moves by -128 (its zero point too), flipping the top bit.  The
 * kernel widens them to the int16 pairs vpmaddwd takes (vpmovsxbw), so the zero point is
 * not in them: sum_k (a - za)(b - zb) = sum_k (a - za) b - zb sum_k (a - za), the second
 * term a row's (the kernel's init).  Both fit in int32 as the int16 form's sum does. */
static void pack_byte_pairs(const uint8_t *b, Py_ssize_t k, Py_ssize_t n, int b_signed,
                            Py_ssize_t kq, Py_ssize_t panels, uint8_t *dst) {
    const uint8_t flip = b_signed ? 0 : 0x80;
    memset(dst, 0, (size_t)(panels * kq * 32));
    for (Py_ssize_t kk = 0; kk < k; kk++) {
        const uint8_t *row = b + kk * n;
        uint8_t *o = dst + (kk / 2) * 32 + (kk % 2);
        for (Py_ssize_t j = 0; j < n; j++)
            o[(j / 16) * kq * 32 + (j % 16) * 2] = (uint8_t)(row[j] ^ flip);
    }
}

/* QUADS: B's column panels of 16 at the AVX2 level as four signed bytes per column and k
 * quad q (B[4q .. 4q + 3, j], 0 past K and N; a uint8 B moved by -128 as in BYTE_PAIRS),
 * 8 columns to a 32-byte vector, two vectors a quad.  The kernel multiplies them by A's
 * four unsigned bytes with vpmaddubsw, which adds two products into an int16 and
 * saturates there, then vpmaddwd by ones adds the two int16s into int32: 32 products
 * per two multiplies, where the int16 form's vpmaddwd gave 16 per multiply (Zen 3, the
 * 6 x 16 tile's step alone: 77 against 45 products a ns).  Exact only while no pair
 * can reach the int16 bound: with a in 0..255, a pair (4q, 4q + 1) or (4q + 2, 4q + 3)
 * of a column whose bytes have opposite signs gives a sum between 255 * b0 and 255 * b1
 * (b0 < 0 <= b1), within [-32640, 32385]; one of one sign gives at most 255 * (|b0| +
 * |b1|), so |b0| + |b1| <= 128 keeps it within 32640.  (The sign test halves the cuts:
 * a BERT layer's N(0, 0.02) weights quantized per tensor cut one pair in 390 instead of
 * 210, a ResNet conv's per-channel ones one in 130 instead of 65.)  A pair of one sign
 * above it keeps its smaller byte and the larger one cut to 128 minus that, with the
 * sign; what was cut is a correction (k, j, f) added after the product: C[i, j] +=
 * a'[i, k] f, row by row of C after the product (about 2 ns each on a Zen 3 core).
 * Bell-shaped weights rarely have two large neighbours of one sign: Hugging Face's N(0,
 * 0.02) initialization quantized per tensor cuts one pair in 2,900 to 17,000 of GPT-2's
 * values, in 200 to 2,700 of BERT-tiny's; uniform ones (torch's default Linear) one in
 * four.  So B keeps BYTE_PAIRS when more
 * than 1 in QUADS_MAX_FIXES of its values would need a correction: then the corrections
 * (m of them per cut pair) cost at most about half of what the quads save.  The column
 * sums of B (as signed bytes, uncut) give A's zero point's term. */
#define QUADS_MAX_FIXES 1024

/* The corrections QUADS needs for B (k x n bytes, signed after `flip`), written to fix
 * (3 int32 each) when fix is not NULL; returns their count. */
static Py_ssize_t quads_fixes(const uint8_t *b, Py_ssize_t k, Py_ssize_t n, uint8_t flip,
                              int32_t *fix) {
    Py_ssize_t count = 0;
    for (Py_ssize_t k0 = 0; k0 + 1 < k; k0 += 2) {
        const uint8_t *r0 = b + k0 * n, *r1 = r0 + n;
        for (Py_ssize_t j = 0; j < n; j++) {
            const int v0 = (int8_t)(uint8_t)(r0[j] ^ flip), v1 = (int8_t)(uint8_t)(r1[j] ^ flip);
            const int a0 = v0 < 0 ? -v0 : v0, a1 = v1 < 0 ? -v1 : v1;
            if (a0 + a1 <= 128 || (v0 < 0) != (v1 < 0)) continue; /* within the bound */
            if (fix != NULL) {
                /* cut the larger to 128 - the smaller (the smaller is >= 1 here) */
                const int big = a0 >= a1 ? v0 : v1, small = a0 >= a1 ? a1 : a0;
                const int kept = big < 0 ? -(128 - small) : 128 - small;
                fix[3 * count] = (int32_t)(a0 >= a1 ? k0 : k0 + 1);
                fix[3 * count + 1] = (int32_t)j;
                fix[3 * count + 2] = (int32_t)(big - kept);
            }
            count++;
        }
    }
    return count;
}

/* The quads of B with the cut values of `fix` (sorted by k within a pair, as made). */
static void pack_quads(const uint8_t *b, Py_ssize_t k, Py_ssize_t n, uint8_t flip,
                       Py_ssize_t kq, const int32_t *fix, Py_ssize_t fixes, uint8_t *dst,
                       int32_t *colsum) {
    memset(dst, 0, (size_t)(((n + 15) / 16) * kq * 64));
    for (Py_ssize_t kk = 0; kk < k; kk++) {
        const uint8_t *row = b + kk * n;
        uint8_t *o = dst + (kk / 4) * 64 + (kk % 4);
        for (Py_ssize_t j = 0; j < n; j++) {
            const uint8_t v = (uint8_t)(row[j] ^ flip);
            colsum[j] += (int8_t)v;
            o[(j / 16) * kq * 64 + (j % 16) * 4] = v;
        }
    }
    for (Py_ssize_t f = 0; f < fixes; f++) {
        const Py_ssize_t kk = fix[3 * f], j = fix[3 * f + 1];
        uint8_t *at = dst + (j / 16) * kq * 64 + (kk / 4) * 64 + (j % 16) * 4 + kk % 4;
        *at = (uint8_t)(int8_t)((int8_t)*at - fix[3 * f + 2]);
    }
}

/* The header (`size` bytes, its first int32 `magic`) of the packed bytes `args` holds,
 * into `header`: 1, or 0 with a ValueError saying `error`. */
static int read_header(PyObject *args, const char *format, const char *error, int32_t magic,
                       void *header, size_t size) {
    Py_buffer packed;
    if (!PyArg_ParseTuple(args, format, &packed)) return 0;
    int ok = packed.len >= (Py_ssize_t)size;
    if (ok) {
        memcpy(header, packed.buf, size);
        ok = *(const int32_t *)header == magic;
    }
    PyBuffer_Release(&packed);
    if (!ok) PyErr_SetString(PyExc_ValueError, error);
    return ok;
}

static PyObject *py_weight_form(PyObject *self, PyObject *args) {
    (void)self;
    Header h;
    if (!read_header(args, "y*:weight_form", "weight_form: not packed weights", MAGIC, &h,
                     sizeof h))
        return NULL;
    return Py_BuildValue("(si)", h.group == 2 ? "int16" : h.level == 1 ? "quads" : "bytes",
                         (int)h.fixes);
}

static PyObject *py_weight_quads_limit(PyObject *self, PyObject *noargs) {
    (void)self, (void)noargs;
    return PyLong_FromLong(WEIGHT_QUADS_MAX_FIXES);
}

static PyObject *py_quads_limit(PyObject *self, PyObject *noargs) {
    (void)self, (void)noargs;
    return PyLong_FromLong(QUADS_MAX_FIXES);
}

static PyObject *py_column_form(PyObject *self, PyObject *args) {
    (void)self;
    ColHeader h;
    if (!read_header(args, "y*:column_form", "column_form: not packed columns", COLS_MAGIC,
                     &h, sizeof h))
        return NULL;
    return Py_BuildValue("(si)",
                         h.bytes == QUADS ? "quads" : h.bytes == BYTE_PAIRS ? "byte pairs" : "int16",
                         (int)h.fixes);
}

static PyObject *py_pack_columns(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b;
    Py_ssize_t k, n;
    int b_signed, zb;
    if (!PyArg_ParseTuple(args, "y*nnpi", &b, &k, &n, &b_signed, &zb)) return NULL;
    PyObject *result = NULL;
    if (k <= 0 || k > MAX_K || n <= 0 || n > (1 << 24)) {
        PyErr_Format(PyExc_ValueError, "pack_columns: K=%zd, N=%zd (K must be 1..%d)", k, n,
                     MAX_K);
        goto done;
    }
    if (b.len < k * n) {
        PyErr_SetString(PyExc_ValueError, "pack_columns: the buffer is shorter than K*N");
        goto done;
    }
    if (!byte_code(b_signed, zb)) {
        PyErr_SetString(PyExc_ValueError, "pack_columns: zero point outside the type's range");
        goto done;
    }
    {
        const Shape s = level_shape(current_level);
        ColHeader h;
        h.magic = COLS_MAGIC;
        h.level = current_level;
        h.k = (int32_t)k;
        h.n = (int32_t)n;
        h.nr = s.nr;
        h.group = s.group;
        h.kq = (int32_t)((k + s.group - 1) / s.group);
        h.panels = (int32_t)((n + s.nr - 1) / s.nr);
        h.x_signed = b_signed;
        h.zx = zb;
        h.bytes = current_level == 1 ? BYTE_PAIRS : 0;
        h.fixes = 0;
        const uint8_t flip = b_signed ? 0 : 0x80;
        if (current_level == 1) {
            const Py_ssize_t fixes = quads_fixes((const uint8_t *)b.buf, k, n, flip, NULL);
            if (fixes * QUADS_MAX_FIXES <= k * n && fixes < (1 << 30)) {
                h.bytes = QUADS;
                h.group = 4;
                h.kq = (int32_t)((k + 3) / 4);
                h.fixes = (int32_t)fixes;
                result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cols_bytes(&h));
                if (result == NULL) goto done;
                char *base = PyBytes_AS_STRING(result);
                memcpy(base, &h, sizeof(h));
                const Py_ssize_t np = (Py_ssize_t)h.panels * h.nr;
                int32_t *colsum = (int32_t *)(base + sizeof(ColHeader));
                int32_t *fix = colsum + np;
                memset(colsum, 0, (size_t)np * sizeof(int32_t));
                quads_fixes((const uint8_t *)b.buf, k, n, flip, fix);
                pack_quads((const uint8_t *)b.buf, k, n, flip, h.kq, fix, fixes,
                           (uint8_t *)(fix + 3 * fixes), colsum);
                goto done;
            }
        }
        if (h.bytes) {
            result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cols_bytes(&h));
            if (result == NULL) goto done;
            char *base = PyBytes_AS_STRING(result);
            memcpy(base, &h, sizeof(h));
            const Py_ssize_t np = (Py_ssize_t)h.panels * h.nr;
            memset(base + sizeof(ColHeader), 0, (size_t)np * sizeof(int32_t));
            pack_byte_pairs((const uint8_t *)b.buf, k, n, b_signed, h.kq, h.panels,
                            (uint8_t *)(base + sizeof(ColHeader) + np * sizeof(int32_t)));
            goto done;
        }
        int64_t *rowoff = malloc((size_t)k * sizeof(int64_t));
        if (rowoff == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < k; i++) rowoff[i] = (int64_t)i * n;
        result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cols_bytes(&h));
        if (result == NULL) {
            free(rowoff);
            goto done;
        }
        char *base = PyBytes_AS_STRING(result);
        memcpy(base, &h, sizeof(h));
        int32_t *colsum = (int32_t *)(base + sizeof(ColHeader));
        const Py_ssize_t np = (Py_ssize_t)h.panels * h.nr;
        memset(colsum, 0, (size_t)np * sizeof(int32_t));
        pack_x((const uint8_t *)b.buf, b.len, rowoff, 1, k, n, b_signed, zb, s, h.kq,
               (uint32_t *)(colsum + np), s.group == 4 ? colsum : NULL, 0, h.panels);
        free(rowoff);
    }
done:
    PyBuffer_Release(&b);
    return result;
}

/* A's rows for QUADS: per panel of mr rows and k quad, each row's four bytes as unsigned
 * (an int8 A moved by +128, its zero point too), 0 past K; rowsum[i]: the sum of row i's
 * unsigned bytes.  The panel must be zeroed (rows past m stay 0).  32 bytes at a time,
 * summed by vpsadbw: byte by byte this was a third of a 128 x 128 x 128 product. */
#if HAVE_X86
__attribute__((target("avx2"))) static void pack_a_quads(const uint8_t *src, Py_ssize_t m,
                                                         Py_ssize_t k, int a_signed,
                                                         Py_ssize_t mr, Py_ssize_t kq,
                                                         uint32_t *panel, int32_t *rowsum) {
    const uint8_t flip = a_signed ? 0x80 : 0;
    const __m256i flipv = _mm256_set1_epi8((char)flip), zero = _mm256_setzero_si256();
    for (Py_ssize_t i = 0; i < m; i++) {
        const uint8_t *row = src + i * k;
        uint32_t *dst = panel + (i / mr) * kq * mr + i % mr;
        __m256i acc = zero;
        Py_ssize_t j = 0;
        for (; j + 32 <= k; j += 32) {
            const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(row + j)), flipv);
            acc = _mm256_add_epi64(acc, _mm256_sad_epu8(v, zero));
            uint32_t words[8];
            _mm256_storeu_si256((__m256i *)words, v);
            for (int t = 0; t < 8; t++) dst[(j / 4 + t) * mr] = words[t];
        }
        int64_t lanes[4];
        _mm256_storeu_si256((__m256i *)lanes, acc);
        int64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
        for (; j < k; j++) {
            const uint8_t v = (uint8_t)(row[j] ^ flip);
            sum += v;
            dst[(j / 4) * mr] |= (uint32_t)v << (8 * (j % 4));
        }
        rowsum[i] = (int32_t)sum;
    }
}
#endif

/* The packed columns' header, checked against their length and the level in use: 1, or 0
 * with ValueError naming `name`. */
static int columns_header(const void *buf, Py_ssize_t len, const char *name, ColHeader *h) {
    const Shape s = level_shape(current_level);
    if (len < (Py_ssize_t)sizeof(ColHeader)) {
        PyErr_Format(PyExc_ValueError, "%s: not packed columns", name);
        return 0;
    }
    memcpy(h, buf, sizeof *h);
    if (h->magic != COLS_MAGIC || h->k <= 0 || h->k > MAX_K || h->n <= 0 || h->panels <= 0 ||
        h->kq <= 0 || h->fixes < 0 || h->fixes > (1 << 30) ||
        len != (Py_ssize_t)cols_bytes(h)) {
        PyErr_Format(PyExc_ValueError, "%s: not packed columns", name);
        return 0;
    }
    const int quads = h->bytes == QUADS;
    const int group = quads ? 4 : s.group;
    if (h->level != current_level || h->nr != s.nr || h->group != group ||
        h->kq != (h->k + group - 1) / group || h->panels != (h->n + s.nr - 1) / s.nr ||
        (quads && current_level != 1) || (!quads && h->fixes != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: the columns were packed at another level", name);
        return 0;
    }
    const Py_ssize_t np = (Py_ssize_t)h->panels * h->nr;
    const int32_t *fix = (const int32_t *)((const char *)buf + sizeof(ColHeader)) + np;
    for (Py_ssize_t f = 0; f < h->fixes; f++)
        if (fix[3 * f] < 0 || fix[3 * f] >= h->k || fix[3 * f + 1] < 0 ||
            fix[3 * f + 1] >= h->n) {
            PyErr_Format(PyExc_ValueError, "%s: not packed columns", name);
            return 0;
        }
    return 1;
}

/* c[m, n] = sum_k (A[m, k] - za) * (B[k, n] - zb) for A's m rows of K bytes at src and the
 * columns `cols` (their header h checked by columns_header at the level in use); 0, or -1
 * when memory ran out (no error set: the caller, holding the GIL again, raises).  Runs
 * without the GIL. */
static int rows_product(const ColHeader *hp, const char *cols, const uint8_t *src,
                        Py_ssize_t m, int a_signed, int za, int32_t *c) {
    const ColHeader h = *hp;
    const Shape s = level_shape(current_level);
    const int quads = h.bytes == QUADS;
    const int group = quads ? 4 : s.group;
    const Py_ssize_t k = h.k, n = h.n, kq = h.kq;
    const Py_ssize_t panels_m = (m + s.mr - 1) / s.mr, mp = panels_m * s.mr;
    const Py_ssize_t np = (Py_ssize_t)h.panels * h.nr;
    uint32_t *wp = calloc((size_t)(mp * kq), sizeof(uint32_t));
    int32_t *rows = calloc((size_t)(3 * mp), sizeof(int32_t)); /* rowsum, zeros, init */
    int32_t *col_init = group == 4 ? malloc((size_t)np * sizeof(int32_t)) : NULL;
    if (wp == NULL || rows == NULL || (group == 4 && col_init == NULL)) {
        free(wp);
        free(rows);
        free(col_init);
        return -1;
    }
    int32_t *rowsum = rows, *zeros = rows + mp, *row_init = rows + 2 * mp;
    const int32_t *colsum = (const int32_t *)(cols + sizeof(ColHeader));
    const int32_t *fix = colsum + np; /* QUADS' corrections (k, j, f) */
    const char *xpanels = (const char *)(fix + 3 * (Py_ssize_t)h.fixes);
    /* a k group of one column panel: nr int32 groups or quads, or nr byte pairs */
    const Py_ssize_t group_bytes =
        h.bytes == BYTE_PAIRS ? 2 * (Py_ssize_t)s.nr : 4 * (Py_ssize_t)s.nr;
    Kernel kern = level_kernel(current_level);
#if HAVE_X86
    if (current_level == 3) kern = kernel_vnni_stream;
    static const Kernel bytes_kernels[7] = {NULL, kernel_avx2_bytes_1, kernel_avx2_bytes_2,
                                            kernel_avx2_bytes_3, kernel_avx2_bytes_4,
                                            kernel_avx2_bytes_5, kernel_avx2_bytes_6};
    static const Kernel quad_kernels[7] = {NULL, kernel_avx2_quads_1, kernel_avx2_quads_2,
                                           kernel_avx2_quads_3, kernel_avx2_quads_4,
                                           kernel_avx2_quads_5, kernel_avx2_quads_6};
    const Kernel *row_kernels = quads                ? quad_kernels
                                : h.bytes            ? bytes_kernels
                                : current_level == 1 ? int16_kernels
                                                     : NULL;
#else
    const Kernel *row_kernels = NULL;
#endif
#if HAVE_X86
    if (quads) {
        /* sum (a' - za')(b' - zb') = sum a' b' - zb' sum_k a' - za' sum_k b' + K za' zb'
         * (modulo 2^32; the whole sum fits in int32), a' and za' A's unsigned bytes,
         * b' and zb' B's signed ones */
        pack_a_quads(src, m, k, a_signed, s.mr, kq, wp, rowsum);
        const uint32_t zau = (uint32_t)(a_signed ? za + 128 : za);
        const uint32_t zbs = (uint32_t)(h.x_signed ? h.zx : h.zx - 128);
        for (Py_ssize_t i = 0; i < m; i++)
            row_init[i] = (int32_t)(zau * zbs * (uint32_t)k - zbs * (uint32_t)rowsum[i]);
        for (Py_ssize_t j = 0; j < np; j++)
            col_init[j] = (int32_t)(0u - zau * (uint32_t)colsum[j]);
    } else
#endif
        pack_w_rows(src, m, k, a_signed, &za, 0, s, kq, wp, rowsum, zeros);
    if (s.group == 4) {
        /* sum (w - zw)(x - zx) = sum w x - zx rowsum[i] - zw colsum[j] + K zx zw,
         * modulo 2^32, with zw one value (A's, as packed) and zx B's unsigned byte. */
        const uint32_t zxu = (uint32_t)(h.x_signed ? h.zx + 128 : h.zx);
        const uint32_t zw = (uint32_t)zeros[0];
        for (Py_ssize_t i = 0; i < m; i++)
            row_init[i] = (int32_t)(zxu * (uint32_t)k * zw - zxu * (uint32_t)rowsum[i]);
        for (Py_ssize_t j = 0; j < np; j++)
            col_init[j] = (int32_t)(0u - zw * (uint32_t)colsum[j]);
    }
    if (h.bytes == BYTE_PAIRS && (h.x_signed ? h.zx : h.zx - 128) != 0) {
        /* BYTE_PAIRS' row term (none for a symmetric int8 B: row_init stays 0): -zb' sum_k
         * (a - za), zb' B's zero point as its signed bytes hold it (modulo 2^32; the whole
         * sum fits in int32) */
        const int32_t zb = h.x_signed ? h.zx : h.zx - 128;
        for (Py_ssize_t i = 0; i < m; i++) {
            const uint8_t *row = src + i * k;
            int64_t sum = 0;
            if (a_signed)
                for (Py_ssize_t j = 0; j < k; j++) sum += (int8_t)row[j];
            else
                for (Py_ssize_t j = 0; j < k; j++) sum += row[j];
            sum -= (int64_t)za * k;
            row_init[i] = (int32_t)(uint32_t)(0u - (uint32_t)zb * (uint32_t)(int64_t)sum);
        }
    }
    /* k blocks keep one column panel's block in L1 while every row panel passes by
     * it.  With few row panels (a decode step, a short prompt) each column panel is
     * read once or a few times: it is then streamed whole, in memory order, which
     * the prefetchers follow (GPT-2's products: 1166 -> 890 us). */
    const Py_ssize_t kcq = panels_m <= 4 ? kq : KC_GROUPS_BYTES / group;
    for (Py_ssize_t q0 = 0; q0 < kq; q0 += kcq) {
        const Py_ssize_t qn = kq - q0 < kcq ? kq - q0 : kcq;
        for (Py_ssize_t pn = 0; pn < h.panels; pn++) {
            /* this k block of one column panel stays in L1 while every row panel of
             * A passes by it */
            const char *xpanel = xpanels + (pn * kq + q0) * group_bytes;
            const int nr_valid = (int)(n - pn * s.nr < s.nr ? n - pn * s.nr : s.nr);
            for (Py_ssize_t pm = 0; pm < panels_m; pm++) {
                const int mr_valid = (int)(m - pm * s.mr < s.mr ? m - pm * s.mr : s.mr);
                if (row_kernels != NULL) kern = row_kernels[mr_valid];
                kern((const int32_t *)(wp + pm * kq * s.mr + q0 * s.mr),
                     (const int32_t *)xpanel, qn, c + pm * s.mr * n + pn * s.nr, n, mr_valid,
                     nr_valid, q0 > 0, col_init != NULL || h.bytes ? row_init + pm * s.mr : NULL,
                     col_init != NULL ? col_init + pn * s.nr : NULL);
            }
        }
    }
    /* QUADS' corrections: what the cut pairs left out, C[i, j] += a'[i, k] f, row by
     * row of C (fix by fix down the columns took BERT-tiny's 128 x 128 x 512 product
     * from 115 to 166 us: each row another line of C, out of L1) */
    if (quads && h.fixes > 0) {
        const uint8_t flip = a_signed ? 0x80 : 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            const uint8_t *arow = src + i * k;
            uint32_t *crow = (uint32_t *)(c + i * n);
            for (Py_ssize_t f = 0; f < h.fixes; f++)
                crow[fix[3 * f + 1]] +=
                    (uint32_t)(uint8_t)(arow[fix[3 * f]] ^ flip) * (uint32_t)fix[3 * f + 2];
        }
    }
    free(wp);
    free(rows);
    free(col_init);
    return 0;
}

static PyObject *py_gemm_rows(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer a, cols, out;
    Py_ssize_t m;
    int a_signed, za;
    if (!PyArg_ParseTuple(args, "y*npiy*w*", &a, &m, &a_signed, &za, &cols, &out)) return NULL;
    PyObject *result = NULL;
    ColHeader h;
    if (!columns_header(cols.buf, cols.len, "gemm_rows", &h)) goto done;
    if (m <= 0 || m > (1 << 24) || a.len < m * h.k || m > PY_SSIZE_T_MAX / 4 / h.n ||
        out.len < m * h.n * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "gemm_rows: a buffer does not fit its sizes");
        goto done;
    }
    if (!byte_code(a_signed, za)) {
        PyErr_SetString(PyExc_ValueError, "gemm_rows: zero point outside the type's range");
        goto done;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = rows_product(&h, cols.buf, a.buf, m, a_signed, za, out.buf);
    Py_END_ALLOW_THREADS;
    result = status == 0 ? Py_NewRef(Py_None) : PyErr_NoMemory();
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&cols);
    PyBuffer_Release(&out);
    return result;
}

/* n bytes from s to d, 8 at a time: the rows of a small image's layout are a few bytes
 * each, where a call to memcpy costs more than the copy (the loop is kept a loop, not
 * turned into that call). */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) static inline void
copy_bytes(uint8_t *d, const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t j = 0;
    for (; j + 8 <= n; j += 8) {
        uint64_t v;
        memcpy(&v, s + j, 8);
        memcpy(d + j, &v, 8);
    }
    for (; j < n; j++) d[j] = s[j];
}

/* ---- the float side ----------------------------------------------------------------------- */

/* Round half to even of a float32, as rintf in the default rounding mode, without the
 * library call (x86-64's baseline has no rounding instruction): below 2^22 in magnitude,
 * adding and taking away 1.5 * 2^23 leaves the nearest integer (ties to even: the
 * constant is even, and the sum's ulp is 1); from 2^22 up, every caller clips the value
 * to an 8-bit range anyway, so it is left as it is (the clip gives the same bound). */
static inline float round_even(float t) {
    const float magic = 12582912.0f;
    const float r = (t + magic) - magic;
    return fabsf(t) < 4194304.0f ? r : t;
}

/* QuantizeLinear's steps on one float: divide, round, add the zero point, clip; the code
 * as an integer in [lo, hi] (0 for a NaN, which is noted in *nan). */
static inline int32_t quantize_one(float v, float scale, float z, float lo, float hi,
                                   int *nan) {
    float t = round_even(v / scale) + z;
    *nan |= t != t;
    t = t < lo ? lo : t;
    t = t > hi ? hi : t;
    return (int32_t)(t == t ? t : 0.0f);
}

/* quantize_one on n floats, the codes as bytes; returns whether a NaN was met. */
static int quantize_generic(const float *src, uint8_t *dst, Py_ssize_t n, float scale, float z,
                            float lo, float hi) {
    int nan = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        dst[i] = (uint8_t)quantize_one(src[i], scale, z, lo, hi, &nan);
    return nan;
}

/* One row of rescale_qdq and rescale_q: v = float32(acc) * s + b in float32 steps (a
 * conversion, a multiply and an add, each rounded: no FMA) [Relu], then the output
 * quantizer with its division taken as a product by r = float32(1 / qs): t = v * r,
 * rounded half to even, + z, clipped; then either the byte stored (`codes`: QuantizeLinear's
 * output) or the value dequantized again (`dst` floats).  The product r is within an ulp
 * of the quotient, inside the conv's own rounding of v (about 2 ulp from the exact
 * value): like that rounding it can move a value lying that close to a rounding boundary
 * by one step, and it is four times cheaper than the division (rescale_call checks that
 * s, b and r are finite, so no NaN can arise; an infinite v*r clips like the quotient). */
static void rescale_row_generic(const int32_t *src, void *dst, int codes, Py_ssize_t keep,
                                float s, float b, int relu, float r, float z, float lo,
                                float hi, float z2, float dqs) {
    for (Py_ssize_t j = 0; j < keep; j++) {
        float v = (float)src[j] * s + b;
        if (relu) v = v < 0.0f ? 0.0f : v;
        float t = round_even(v * r) + z;
        t = t < lo ? lo : t;
        t = t > hi ? hi : t;
        if (codes)
            ((uint8_t *)dst)[j] = (uint8_t)(int32_t)t;
        else
            ((float *)dst)[j] = (t - z2) * dqs;
    }
}

#if HAVE_X86
/* The same steps with AVX2 intrinsics, 8 values at a time: each one the same IEEE
 * operation as the scalar code (no FMA: the definition rounds the product and the sum
 * apart), so the same bits; the tails run the scalar code. */
__attribute__((target("avx2"))) static inline __m256 round_clip8(__m256 t, __m256 z, __m256 lo,
                                                                 __m256 hi, __m256 *nan) {
    /* vroundps to nearest even (the magic constant's integer below 2^22; above, an
     * integer the clip makes the same), max and min, a NaN lane given back as NaN. */
    const __m256 r =
        _mm256_add_ps(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
    const __m256 bad = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
    *nan = _mm256_or_ps(*nan, bad);
    return _mm256_blendv_ps(_mm256_min_ps(_mm256_max_ps(r, lo), hi), r, bad);
}

__attribute__((target("avx2"))) static int quantize_avx2(const float *src, uint8_t *dst,
                                                         Py_ssize_t n, float scale, float z,
                                                         float lo, float hi) {
    const __m256 sv = _mm256_set1_ps(scale), zv = _mm256_set1_ps(z), lov = _mm256_set1_ps(lo),
                 hiv = _mm256_set1_ps(hi);
    __m256 nan = _mm256_setzero_ps();
    const int is_signed = lo < 0.0f;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 t = _mm256_div_ps(_mm256_loadu_ps(src + i), sv);
        t = round_clip8(t, zv, lov, hiv, &nan);
        t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q)); /* NaN -> 0 (reported) */
        const __m256i v = _mm256_cvttps_epi32(t);
        const __m128i w16 =
            _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        const __m128i b8 = is_signed ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
        _mm_storel_epi64((__m128i *)(dst + i), b8);
    }
    int bad = _mm256_movemask_ps(nan) != 0;
    return quantize_generic(src + i, dst + i, n - i, scale, z, lo, hi) | bad;
}

/* rescale_row_generic 8 at a time, the same bits: the rounding and the zero point in
 * int32 (v * r clamped to +-2^30 first, where the float steps clip anyway; below that
 * rint(t) + z is exact either way), the clip as integer max and min, the bytes packed
 * with saturation (never met: the values are in range); the tail by the scalar code. */
__attribute__((target("avx2"))) static void rescale_row_avx2(const int32_t *src, void *dst,
                                                             int codes, Py_ssize_t keep,
                                                             float s, float b, int relu,
                                                             float r, float z, float lo,
                                                             float hi, float z2, float dqs) {
    const __m256 sv = _mm256_set1_ps(s), bv = _mm256_set1_ps(b), rv = _mm256_set1_ps(r),
                 big = _mm256_set1_ps(1073741824.0f), nbig = _mm256_set1_ps(-1073741824.0f),
                 z2v = _mm256_set1_ps(z2), dv = _mm256_set1_ps(dqs), zero = _mm256_setzero_ps();
    const __m256i zi = _mm256_set1_epi32((int)z), loi = _mm256_set1_epi32((int)lo),
                  hii = _mm256_set1_epi32((int)hi);
    const int is_signed = lo < 0.0f;
    Py_ssize_t j = 0;
    for (; j + 8 <= keep; j += 8) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(src + j));
        __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a), sv), bv);
        if (relu) v = _mm256_max_ps(v, zero);
        const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, rv), nbig), big);
        __m256i iv = _mm256_cvttps_epi32(
            _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        iv = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(iv, zi), loi), hii);
        if (!codes) {
            const __m256 f = _mm256_cvtepi32_ps(iv);
            _mm256_storeu_ps((float *)dst + j, _mm256_mul_ps(_mm256_sub_ps(f, z2v), dv));
            continue;
        }
        const __m128i w16 =
            _mm_packs_epi32(_mm256_castsi256_si128(iv), _mm256_extracti128_si256(iv, 1));
        const __m128i b8 = is_signed ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
        _mm_storel_epi64((__m128i *)((uint8_t *)dst + j), b8);
    }
    void *rest = codes ? (void *)((uint8_t *)dst + j) : (void *)((float *)dst + j);
    rescale_row_generic(src + j, rest, codes, keep - j, s, b, relu, r, z, lo, hi, z2, dqs);
}
#endif

/* QuantizeLinear -> DequantizeLinear of n floats (fusion_qdq's QdqPair steps). */
static int qdq_generic(const float *src, float *dst, Py_ssize_t n, float qs, float z, float lo,
                       float hi, float z2, float dqs) {
    int nan = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        float t = round_even(src[i] / qs) + z;
        nan |= t != t;
        t = t < lo ? lo : t;
        t = t > hi ? hi : t;
        dst[i] = (t - z2) * dqs;
    }
    return nan;
}

#if HAVE_X86
__attribute__((target("avx2"))) static int qdq_avx2(const float *src, float *dst, Py_ssize_t n,
                                                    float qs, float z, float lo, float hi,
                                                    float z2, float dqs) {
    const __m256 qv = _mm256_set1_ps(qs), zv = _mm256_set1_ps(z), lov = _mm256_set1_ps(lo),
                 hiv = _mm256_set1_ps(hi), z2v = _mm256_set1_ps(z2), dv = _mm256_set1_ps(dqs);
    __m256 nan = _mm256_setzero_ps();
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 t = round_clip8(_mm256_div_ps(_mm256_loadu_ps(src + i), qv), zv, lov, hiv, &nan);
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_sub_ps(t, z2v), dv));
    }
    int bad = _mm256_movemask_ps(nan) != 0;
    return qdq_generic(src + i, dst + i, n - i, qs, z, lo, hi, z2, dqs) | bad;
}

/* round_clip8 16 wide: round half to even below 2^22, + z, NaN noted, clipped. */
__attribute__((target("avx512f"))) static inline __m512 round_clip16(__m512 t, __m512 z,
                                                                   __m512 lo, __m512 hi,
                                                                   __mmask16 *nan) {
    /* vrndscaleps to nearest even: the magic constant's integer below 2^22, and from 2^22
     * up an integer too, where the clip makes the two the same; max and min clip (a NaN
     * lane, noted, is given back as NaN: the callers treat it as the scalar code does).
     * Six instructions where the compare-and-select form took eleven. */
    const __m512 r = _mm512_add_ps(
        _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
    const __mmask16 bad = _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
    *nan |= bad;
    return _mm512_mask_mov_ps(_mm512_min_ps(_mm512_max_ps(r, lo), hi), bad, r);
}

/* QuantizeLinear's steps on the floats of mask k at src (scale, zero point and bounds
 * broadcast): the codes as int32 in [lo, hi], a NaN lane 0 and noted in *nan. */
__attribute__((target("avx512f"), always_inline)) static inline __m512i quantize16(
    const float *src, __mmask16 k, __m512 sv, __m512 zv, __m512 lov, __m512 hiv,
    __mmask16 *nan) {
    __mmask16 bad = 0;
    __m512 t = round_clip16(_mm512_div_ps(_mm512_maskz_loadu_ps(k, src), sv), zv, lov, hiv, &bad);
    *nan |= bad & k;
    t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, t, _CMP_ORD_Q), t); /* NaN -> 0 */
    return _mm512_cvttps_epi32(t); /* in [lo, hi]: no saturation happens */
}

/* quantize_avx2's steps 16 at a time (the same IEEE operations: the same bytes); the
 * tail by the scalar code.  With rescale_row_avx512 they are the passes around a QDQ
 * conv's integer product (QDQ ResNet-18 w32: about as long as the product). */
__attribute__((target("avx512f"))) static int quantize_avx512(const float *src, uint8_t *dst,
                                                             Py_ssize_t n, float scale,
                                                             float z, float lo, float hi) {
    const __m512 sv = _mm512_set1_ps(scale), zv = _mm512_set1_ps(z), lov = _mm512_set1_ps(lo),
                 hiv = _mm512_set1_ps(hi);
    __mmask16 nan = 0;
    const int is_signed = lo < 0.0f;
    for (Py_ssize_t i = 0; i < n; i += 16) {
        /* the tail masked (a scalar tail cost as much as the vectors on 56-float rows) */
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        const __m512i v = quantize16(src + i, k, sv, zv, lov, hiv, &nan);
        const __m128i b = is_signed ? _mm512_cvtsepi32_epi8(v) : _mm512_cvtusepi32_epi8(v);
        if (k == 0xFFFF) {
            _mm_storeu_si128((__m128i *)(dst + i), b);
        } else {
            uint8_t part[16];
            _mm_storeu_si128((__m128i *)part, b);
            memcpy(dst + i, part, (size_t)(n - i));
        }
    }
    return nan != 0;
}

/* rescale_row_avx2's steps 16 at a time (the same bits), the rounding by the conversion's
 * own round-to-nearest-even, the tail masked: about half the instructions of the float
 * rounding, clip and NaN checks it replaced (QDQ ResNet-18's rescales ...). */
__attribute__((target(AVX512_TARGET), always_inline)) static inline void rescale_row_avx512(
    const int32_t *src, void *dst, int codes, Py_ssize_t keep, float s, float b, int relu,
    float r, float z, float lo, float hi, float z2, float dqs) {
    const __m512 sv = _mm512_set1_ps(s), bv = _mm512_set1_ps(b), rv = _mm512_set1_ps(r),
                 big = _mm512_set1_ps(1073741824.0f), nbig = _mm512_set1_ps(-1073741824.0f),
                 z2v = _mm512_set1_ps(z2), dv = _mm512_set1_ps(dqs), zero = _mm512_setzero_ps();
    const __m512i zi = _mm512_set1_epi32((int)z), loi = _mm512_set1_epi32((int)lo),
                  hii = _mm512_set1_epi32((int)hi);
    for (Py_ssize_t j = 0; j < keep; j += 16) {
        const __mmask16 k =
            keep - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (keep - j)) - 1u);
        const __m512i a = _mm512_maskz_loadu_epi32(k, (const void *)(src + j));
        /* float32(acc) * s + b: a multiply and an add (no FMA) */
        __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a), sv), bv);
        if (relu) v = _mm512_max_ps(v, zero);
        const __m512 t = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, rv), nbig), big);
        __m512i iv = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        iv = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(iv, zi), loi), hii);
        if (!codes) {
            const __m512 f = _mm512_cvtepi32_ps(iv);
            _mm512_mask_storeu_ps((float *)dst + j, k, _mm512_mul_ps(_mm512_sub_ps(f, z2v), dv));
            continue;
        }
        _mm_mask_storeu_epi8((void *)((uint8_t *)dst + j), k, _mm512_cvtepi32_epi8(iv));
    }
}

/* One channel's rows (rows of `width` int32, `keep` of them kept): the row pass inlined,
 * its constants set once per plane, not per row (a 3x3 conv's rows of 56 values had about
 * a fifth of their time in that setup). */
__attribute__((target(AVX512_TARGET))) static void rescale_plane_avx512(
    const int32_t *src, void *dst, int codes, Py_ssize_t rows, Py_ssize_t width,
    Py_ssize_t keep, float s, float b, int relu, float r, float z, float lo, float hi,
    float z2, float dqs) {
    const Py_ssize_t item = codes ? 1 : 4;
    for (Py_ssize_t i = 0; i < rows; i++)
        rescale_row_avx512(src + i * width, (char *)dst + i * keep * item, codes, keep, s, b,
                           relu, r, z, lo, hi, z2, dqs);
}

/* qdq_avx2's steps 16 at a time (each the same IEEE operation, so the same bits), the
 * tail masked: the pairs between a QDQ model's convs are a pass over every activation
 * (MobileNetV3-small's 107: 1.87 -> 1.1 ms with these, one thread). */
__attribute__((target("avx512f"))) static int qdq_avx512(const float *src, float *dst,
                                                        Py_ssize_t n, float qs, float z,
                                                        float lo, float hi, float z2,
                                                        float dqs) {
    const __m512 qv = _mm512_set1_ps(qs), zv = _mm512_set1_ps(z), lov = _mm512_set1_ps(lo),
                 hiv = _mm512_set1_ps(hi), z2v = _mm512_set1_ps(z2), dv = _mm512_set1_ps(dqs);
    __mmask16 nan = 0;
    for (Py_ssize_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        __mmask16 bad = 0;
        const __m512 t = round_clip16(_mm512_div_ps(_mm512_maskz_loadu_ps(k, src + i), qv), zv,
                                      lov, hiv, &bad);
        nan |= bad & k;
        _mm512_mask_storeu_ps(dst + i, k, _mm512_mul_ps(_mm512_sub_ps(t, z2v), dv));
    }
    return nan != 0;
}
#endif

typedef int (*QuantizeFn)(const float *, uint8_t *, Py_ssize_t, float, float, float, float);

/* QuantizeLinear's pass of this level (quantize and quantize_layout). */
static QuantizeFn quantize_at_level(void) {
#if HAVE_X86
    if (current_level >= 2) return quantize_avx512;
    if (current_level >= 1) return quantize_avx2;
#endif
    return quantize_generic;
}

typedef int (*QdqFn)(const float *, float *, Py_ssize_t, float, float, float, float, float,
                     float);

/* The QuantizeLinear -> DequantizeLinear pass of this level. */
static QdqFn qdq_at_level(void) {
#if HAVE_X86
    if (current_level >= 2) return qdq_avx512;
    if (current_level >= 1) return qdq_avx2;
#endif
    return qdq_generic;
}

static PyObject *py_qdq(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer x, out;
    float qs, dqs;
    int qz, dqz, is_signed;
    if (!PyArg_ParseTuple(args, "y*fifipw*", &x, &qs, &qz, &dqs, &dqz, &is_signed, &out))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = x.len / 4;
    if (x.len % 4 || out.len != x.len ||
        (!byte_code(is_signed, qz) || !byte_code(is_signed, dqz))) {
        PyErr_SetString(PyExc_ValueError, "qdq: a buffer or zero point does not fit");
        goto done;
    }
    {
        const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
        const QdqFn fn = qdq_at_level();
        int nan;
        Py_BEGIN_ALLOW_THREADS;
        nan = fn((const float *)x.buf, (float *)out.buf, n, qs, (float)qz, lo, hi, (float)dqz,
                 dqs);
        Py_END_ALLOW_THREADS;
        result = PyLong_FromLong(nan ? -1 : 0);
    }
done:
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    return result;
}

/* ---- qdq_table: QuantizeLinear, then a table of the 256 codes ---------------------------- */

/* out[i] = table[b], b the byte of QuantizeLinear(src[i]) (its float32 steps, as
 * quantize's): fusion_qdq_table's elementwise chain of one code, whose 256 results the
 * caller made by the chain's own kernels.  A NaN lane reads entry 0 and is reported. */
static int qdq_table_generic(const float *src, float *dst, Py_ssize_t n, float qs, float z,
                             float lo, float hi, const float *table) {
    int nan = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        dst[i] = table[(uint8_t)quantize_one(src[i], qs, z, lo, hi, &nan)];
    return nan;
}

#if HAVE_X86
/* 8 at a time: quantize_avx2's code, the byte (the int32 code's low 8 bits) as a
 * gather index; the tail by the scalar code (the same steps). */
__attribute__((target("avx2"))) static int qdq_table_avx2(const float *src, float *dst,
                                                          Py_ssize_t n, float qs, float z,
                                                          float lo, float hi,
                                                          const float *table) {
    const __m256 qv = _mm256_set1_ps(qs), zv = _mm256_set1_ps(z), lov = _mm256_set1_ps(lo),
                 hiv = _mm256_set1_ps(hi);
    const __m256i byte = _mm256_set1_epi32(255);
    __m256 nan = _mm256_setzero_ps();
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 t = round_clip8(_mm256_div_ps(_mm256_loadu_ps(src + i), qv), zv, lov, hiv, &nan);
        t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q)); /* NaN -> 0 (reported) */
        const __m256i b = _mm256_and_si256(_mm256_cvttps_epi32(t), byte);
        _mm256_storeu_ps(dst + i, _mm256_i32gather_ps(table, b, 4));
    }
    const int bad = _mm256_movemask_ps(nan) != 0;
    return qdq_table_generic(src + i, dst + i, n - i, qs, z, lo, hi, table) | bad;
}

/* 16 at a time, the tail masked (round_clip16 as quantize_avx512). */
__attribute__((target("avx512f"))) static int qdq_table_avx512(const float *src, float *dst,
                                                              Py_ssize_t n, float qs, float z,
                                                              float lo, float hi,
                                                              const float *table) {
    const __m512 qv = _mm512_set1_ps(qs), zv = _mm512_set1_ps(z), lov = _mm512_set1_ps(lo),
                 hiv = _mm512_set1_ps(hi);
    const __m512i byte = _mm512_set1_epi32(255), bit5 = _mm512_set1_epi32(32),
                  bit6 = _mm512_set1_epi32(64), bit7 = _mm512_set1_epi32(128);
    __m512 part[16];
    for (int j = 0; j < 16; j++) part[j] = _mm512_loadu_ps(table + 16 * j);
    __mmask16 nan = 0;
    for (Py_ssize_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        const __m512i b = _mm512_and_si512(quantize16(src + i, k, qv, zv, lov, hiv, &nan), byte);
        /* eight 32-entry lookups by the low 5 bits, then the byte's bits 5, 6, 7 pick
         * one: 18 instructions, about 3x faster than a gather on Zen 4 */
        const __mmask16 b5 = _mm512_test_epi32_mask(b, bit5), b6 = _mm512_test_epi32_mask(b, bit6),
                        b7 = _mm512_test_epi32_mask(b, bit7);
        const __m512 v01 = _mm512_mask_blend_ps(b5, _mm512_permutex2var_ps(part[0], b, part[1]),
                                                _mm512_permutex2var_ps(part[2], b, part[3]));
        const __m512 v23 = _mm512_mask_blend_ps(b5, _mm512_permutex2var_ps(part[4], b, part[5]),
                                                _mm512_permutex2var_ps(part[6], b, part[7]));
        const __m512 v45 = _mm512_mask_blend_ps(b5, _mm512_permutex2var_ps(part[8], b, part[9]),
                                                _mm512_permutex2var_ps(part[10], b, part[11]));
        const __m512 v67 = _mm512_mask_blend_ps(b5, _mm512_permutex2var_ps(part[12], b, part[13]),
                                                _mm512_permutex2var_ps(part[14], b, part[15]));
        const __m512 v = _mm512_mask_blend_ps(b7, _mm512_mask_blend_ps(b6, v01, v23),
                                              _mm512_mask_blend_ps(b6, v45, v67));
        _mm512_mask_storeu_ps(dst + i, k, v);
    }
    return nan != 0;
}
#endif

typedef int (*QdqTableFn)(const float *, float *, Py_ssize_t, float, float, float, float,
                          const float *);

static QdqTableFn qdq_table_at_level(void) {
#if HAVE_X86
    if (current_level >= 2) return qdq_table_avx512;
    if (current_level >= 1) return qdq_table_avx2;
#endif
    return qdq_table_generic;
}

static PyObject *py_qdq_table(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer x, table, out;
    float qs;
    int qz, is_signed;
    if (!PyArg_ParseTuple(args, "y*fipy*w*", &x, &qs, &qz, &is_signed, &table, &out))
        return NULL;
    PyObject *result = NULL;
    if (x.len % 4 || out.len != x.len || table.len != 256 * 4 || !byte_code(is_signed, qz)) {
        PyErr_SetString(PyExc_ValueError, "qdq_table: a buffer or zero point does not fit");
        goto done;
    }
    {
        const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
        const QdqTableFn fn = qdq_table_at_level();
        int nan;
        Py_BEGIN_ALLOW_THREADS;
        nan = fn((const float *)x.buf, (float *)out.buf, x.len / 4, qs, (float)qz, lo, hi,
                 (const float *)table.buf);
        Py_END_ALLOW_THREADS;
        result = PyLong_FromLong(nan ? -1 : 0);
    }
done:
    PyBuffer_Release(&x);
    PyBuffer_Release(&table);
    PyBuffer_Release(&out);
    return result;
}

typedef void (*RescaleRowFn)(const int32_t *, void *, int, Py_ssize_t, float, float, int,
                             float, float, float, float, float, float);

static RescaleRowFn rescale_row_at_level(void) {
#if HAVE_X86
    if (current_level >= 2) return rescale_row_avx512;
    if (current_level >= 1) return rescale_row_avx2;
#endif
    return rescale_row_generic;
}

/* The quantizer's division as a product (rescale_row_generic): r = 1 / qs and every
 * scale and bias finite, so no NaN can arise in the rows; the callers report anything
 * else as a NaN would be (and their caller runs the nodes). */
static int rescale_finite(const float *scale, const float *bias, Py_ssize_t m, float qs) {
    const float r = 1.0f / qs;
    int finite = isfinite(qs) && isfinite(r) && r != 0.0f;
    for (Py_ssize_t i = 0; finite && i < m; i++)
        finite = isfinite(scale[i]) && (bias == NULL || isfinite(bias[i]));
    return finite;
}

/* rescale_qdq and rescale_q (codes): the checks of their operands, then each channel's
 * rows through this level's row pass; returns the Python result. */
static PyObject *rescale_call(const char *name, Py_buffer *acc, Py_ssize_t m, Py_ssize_t rows,
                              Py_ssize_t width, Py_ssize_t keep, Py_buffer *scale,
                              Py_buffer *bias, int relu, int is_signed, float qs, int qz,
                              float dqs, int dqz, int codes, Py_buffer *y) {
    const Py_ssize_t item = codes ? 1 : 4;
    if (m <= 0 || rows <= 0 || width <= 0 || keep <= 0 || keep > width ||
        m > PY_SSIZE_T_MAX / 8 / rows / width) {
        PyErr_Format(PyExc_ValueError, "%s: bad sizes", name);
        return NULL;
    }
    if (acc->len < m * rows * width * 4 || y->len < m * rows * keep * item ||
        scale->len < m * 4 || (bias->len != 0 && bias->len < m * 4) ||
        (!byte_code(is_signed, qz) || !byte_code(is_signed, dqz))) {
        PyErr_Format(PyExc_ValueError, "%s: a buffer or zero point does not fit", name);
        return NULL;
    }
    const int32_t *a = (const int32_t *)acc->buf;
    const float *sc = (const float *)scale->buf;
    const float *bi = bias->len ? (const float *)bias->buf : NULL;
    char *out = (char *)y->buf;
    const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
    const float z = (float)qz, z2 = (float)dqz;
    if (!rescale_finite(sc, bi, m, qs)) return PyLong_FromLong(-1);
    const float r = 1.0f / qs;
    const RescaleRowFn row_fn = rescale_row_at_level();
    /* Short rows (small images): each plane's whole grid in one vector run into a
     * buffer, then the kept columns copied (the rows alone would run scalar tails).
     * Rows with no columns to drop (a 1x1 conv's) are one run per plane. */
    char *grid = keep < 32 && rows > 1 && keep < width ? malloc((size_t)(rows * width * item))
                                                       : NULL;
    const Py_ssize_t runs = keep == width ? 1 : rows, run = keep == width ? rows * keep : keep;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < m; i++) {
        const float s = sc[i], b = bi ? bi[i] : 0.0f;
        const int32_t *ai = a + i * rows * width;
        char *oi = out + i * rows * keep * item;
        if (grid != NULL) {
            row_fn(ai, grid, codes, rows * width, s, b, relu, r, z, lo, hi, z2, dqs);
            for (Py_ssize_t k = 0; k < rows; k++)
                copy_bytes((uint8_t *)oi + k * keep * item, (uint8_t *)grid + k * width * item,
                           keep * item);
            continue;
        }
#if HAVE_X86
        if (current_level >= 2) {
            rescale_plane_avx512(ai, oi, codes, runs, runs > 1 ? width : run, run, s, b, relu, r,
                                 z, lo, hi, z2, dqs);
            continue;
        }
#endif
        for (Py_ssize_t k = 0; k < runs; k++)
            row_fn(ai + k * width, oi + k * keep * item, codes, run, s, b, relu, r, z, lo, hi, z2,
                   dqs);
    }
    Py_END_ALLOW_THREADS;
    free(grid);
    return PyLong_FromLong(0);
}

/* rescale, then QuantizeLinear (its division as a product, rescale_row_generic) ->
 * DequantizeLinear of the float32 result; -1 when a scale, a bias or 1 / qs is not
 * finite. */
static PyObject *py_rescale_qdq(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer acc, scale, bias, y;
    Py_ssize_t m, rows, width, keep;
    float qs, dqs;
    int qz, dqz, is_signed, relu;
    if (!PyArg_ParseTuple(args, "y*nnnny*y*ppfifiw*", &acc, &m, &rows, &width, &keep, &scale,
                          &bias, &relu, &is_signed, &qs, &qz, &dqs, &dqz, &y))
        return NULL;
    PyObject *result = rescale_call("rescale_qdq", &acc, m, rows, width, keep, &scale, &bias,
                                    relu, is_signed, qs, qz, dqs, dqz, 0, &y);
    PyBuffer_Release(&acc);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&bias);
    PyBuffer_Release(&y);
    return result;
}

/* rescale_q: rescale_qdq's steps up to the output quantizer, its bytes written (a QDQ
 * conv whose output codes the next one reads, fusion_qdq_conv.py); -1 as rescale_qdq. */
static PyObject *py_rescale_q(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer acc, scale, bias, y;
    Py_ssize_t m, rows, width, keep;
    float qs;
    int qz, is_signed, relu;
    if (!PyArg_ParseTuple(args, "y*nnnny*y*ppfiw*", &acc, &m, &rows, &width, &keep, &scale,
                          &bias, &relu, &is_signed, &qs, &qz, &y))
        return NULL;
    PyObject *result = rescale_call("rescale_q", &acc, m, rows, width, keep, &scale, &bias, relu,
                                    is_signed, qs, qz, 1.0f, qz, 1, &y);
    PyBuffer_Release(&acc);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&bias);
    PyBuffer_Release(&y);
    return result;
}

/* ---- a conv's product and rescale in one pass over its blocks -----------------------
 * gemm_rescale(packed, x, rowoff, colstride, N, x_signed, zx, rows, width, keep, scale,
 * bias, relu, signed, qs, qz, dqs, dqz, codes, y): gemm's product of one image, each
 * block of C's columns rescaled (rescale_q's bytes when codes, else rescale_qdq's floats)
 * while it is in cache (gemm_blocks' sink): the same values as gemm, then rescale_q or
 * rescale_qdq over the whole C, without C going to memory and back (ResNet-50's 56x56
 * layers: 3 MB of int32 a conv). */
typedef struct {
    Py_ssize_t m, rows, width, keep, item;
    const float *scale, *bias;
    int relu, codes;
    float r, z, lo, hi, z2, dqs;
    char *out;
    RescaleRowFn row_fn;
    char *grid; /* short rows: one channel's block of columns, then its kept ones copied */
} RescaleSink;

static void rescale_block(void *ctx, const int32_t *c, Py_ssize_t ldc, Py_ssize_t col0,
                          Py_ssize_t col1) {
    const RescaleSink *k = ctx;
    const Py_ssize_t width = k->width, keep = k->keep, item = k->item;
    for (Py_ssize_t i = 0; i < k->m; i++) {
        const int32_t *ci = c + i * ldc; /* column col0 */
        char *oi = k->out + i * k->rows * keep * item;
        const float s = k->scale[i], b = k->bias != NULL ? k->bias[i] : 0.0f;
        if (keep == width) { /* no columns to drop: one run */
            k->row_fn(ci, oi + col0 * item, k->codes, col1 - col0, s, b, k->relu, k->r, k->z,
                      k->lo, k->hi, k->z2, k->dqs);
            continue;
        }
        if (k->grid != NULL)
            k->row_fn(ci, k->grid, k->codes, col1 - col0, s, b, k->relu, k->r, k->z, k->lo,
                      k->hi, k->z2, k->dqs);
        for (Py_ssize_t row = col0 / width; row * width < col1; row++) {
            const Py_ssize_t start = row * width;
            const Py_ssize_t j0 = start < col0 ? col0 - start : 0;
            const Py_ssize_t j1 = start + keep > col1 ? col1 - start : keep;
            if (j1 <= j0) continue;
            char *o = oi + (row * keep + j0) * item;
            if (k->grid != NULL)
                copy_bytes((uint8_t *)o, (uint8_t *)k->grid + (start + j0 - col0) * item,
                           (j1 - j0) * item);
            else
                k->row_fn(ci + start + j0 - col0, o, k->codes, j1 - j0, s, b, k->relu, k->r,
                          k->z, k->lo, k->hi, k->z2, k->dqs);
        }
    }
}

/* The product's operands: X as gemm reads it (x, rowoff, colstride), or, with x4, in
 * the four-channel layout (interleave4) at word offsets rows4 per k group. */
typedef struct {
    const uint8_t *x;
    Py_ssize_t x_len, colstride;
    const int64_t *rowoff;
    const uint32_t *x4;
    const int64_t *rows4;
    Py_ssize_t n;
    int x_signed, zx;
} ProductX;

/* gemm_rescale and gemm_rescale4 after their operands' own checks: the rescale's
 * operands checked, then the product rescaled block by block into y; 0, -1 (a scale,
 * bias or 1 / qs not finite: nothing written), or NULL with an error set. */
static PyObject *product_rescaled(const char *name, const Header *h, Shape s, const char *base,
                                  const ProductX *px, Py_ssize_t rows, Py_ssize_t width,
                                  Py_ssize_t keep, const Py_buffer *scale, const Py_buffer *bias,
                                  int relu, int is_signed, float qs, int qz, float dqs, int dqz,
                                  int codes, const Py_buffer *y) {
    const Py_ssize_t m = h->m, n = px->n, item = codes ? 1 : 4;
    if (rows <= 0 || width <= 0 || keep <= 0 || keep > width || rows > n / width ||
        rows * width != n || scale->len != m * 4 || (bias->len != 0 && bias->len != m * 4) ||
        y->len < m * rows * keep * item || !byte_code(is_signed, qz) ||
        !byte_code(is_signed, dqz)) {
        PyErr_Format(PyExc_ValueError, "%s: a buffer or zero point does not fit", name);
        return NULL;
    }
    const float *sc = (const float *)scale->buf, *bi = bias->len ? (const float *)bias->buf : NULL;
    if (!rescale_finite(sc, bi, m, qs)) return PyLong_FromLong(-1);
    RescaleSink k = {
        .m = m, .rows = rows, .width = width, .keep = keep, .item = item, .scale = sc,
        .bias = bi, .relu = relu, .codes = codes, .r = 1.0f / qs, .z = (float)qz,
        .lo = is_signed ? -128.0f : 0.0f, .hi = is_signed ? 127.0f : 255.0f,
        .z2 = (float)dqz, .dqs = dqs, .out = (char *)y->buf,
        .row_fn = rescale_row_at_level(), .grid = NULL,
    };
    /* Short rows (small images): the block's columns in one vector run into a buffer,
     * then the kept ones copied (the rows alone would run scalar tails). */
    if (keep < 32 && keep < width && rows > 1) {
        k.grid = malloc((size_t)(n * item) + 64);
        if (k.grid == NULL) return PyErr_NoMemory();
    }
    const BlockSink sink = {rescale_block, &k};
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = gemm_blocks(h, base, s, px->x, px->x_len, px->rowoff, px->colstride, n,
                         px->x_signed, px->zx, NULL, &sink, px->x4, px->rows4);
    Py_END_ALLOW_THREADS;
    free(k.grid);
    return status == 0 ? PyLong_FromLong(0) : PyErr_NoMemory();
}

static PyObject *py_gemm_rescale(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer packed, x, rowoff, scale, bias, y;
    Py_ssize_t colstride, n, rows, width, keep;
    int x_signed, zx, relu, is_signed, qz, dqz, codes;
    float qs, dqs;
    if (!PyArg_ParseTuple(args, "y*y*y*nnpinnny*y*ppfifipw*", &packed, &x, &rowoff, &colstride,
                          &n, &x_signed, &zx, &rows, &width, &keep, &scale, &bias, &relu,
                          &is_signed, &qs, &qz, &dqs, &dqz, &codes, &y))
        return NULL;
    PyObject *result = NULL;
    Header h;
    Shape s;
    if (packed_header(&packed, "gemm_rescale", &h, &s) &&
        gemm_operands("gemm_rescale", &h, &x, &rowoff, colstride, n, x_signed, zx)) {
        const ProductX px = {x.buf, x.len, colstride, rowoff.buf, NULL, NULL, n, x_signed, zx};
        result = product_rescaled("gemm_rescale", &h, s, packed.buf, &px, rows, width, keep,
                                  &scale, &bias, relu, is_signed, qs, qz, dqs, dqz, codes, &y);
    }
    PyBuffer_Release(&packed);
    PyBuffer_Release(&x);
    PyBuffer_Release(&rowoff);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&bias);
    PyBuffer_Release(&y);
    return result;
}

/* ---- a conv's input in four-channel groups ------------------------------------------
 * interleave4(src, images, channels, plane, flip, dst): the planes of a conv's flat
 * layout (images x channels x plane bytes, the layout functions' output) as groups of
 * four channels, each group's bytes interleaved: dst[image, g, j, i] = src[image, 4g + i,
 * j] (^ 0x80 with flip: int8 codes in the VNNI product's unsigned form), 0 for the
 * channels past the last.  A k group of VNNI's product is then four channels at one
 * kernel offset, 32 columns of it 128 contiguous bytes: the product reads it where it
 * lies (gemm_rescale4), where gemm packs every k row of every column block again (a 3x3
 * conv reads each channel's plane nine times: 13% of ResNet-50's 64 x 576 x 3136). */
static void interleave4_plane(const uint8_t *s0, const uint8_t *s1, const uint8_t *s2,
                              const uint8_t *s3, Py_ssize_t plane, uint8_t flip, uint8_t *d) {
    Py_ssize_t j = 0;
#if defined(__SSE2__)
    const __m128i f = _mm_set1_epi8((char)flip);
    for (; j + 16 <= plane; j += 16) {
        const __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(s0 + j)), f);
        const __m128i b = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(s1 + j)), f);
        const __m128i c = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(s2 + j)), f);
        const __m128i e = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(s3 + j)), f);
        const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
        const __m128i ce_lo = _mm_unpacklo_epi8(c, e), ce_hi = _mm_unpackhi_epi8(c, e);
        _mm_storeu_si128((__m128i *)(d + 4 * j), _mm_unpacklo_epi16(ab_lo, ce_lo));
        _mm_storeu_si128((__m128i *)(d + 4 * j + 16), _mm_unpackhi_epi16(ab_lo, ce_lo));
        _mm_storeu_si128((__m128i *)(d + 4 * j + 32), _mm_unpacklo_epi16(ab_hi, ce_hi));
        _mm_storeu_si128((__m128i *)(d + 4 * j + 48), _mm_unpackhi_epi16(ab_hi, ce_hi));
    }
#endif
    for (; j < plane; j++) {
        d[4 * j] = s0[j] ^ flip;
        d[4 * j + 1] = s1[j] ^ flip;
        d[4 * j + 2] = s2[j] ^ flip;
        d[4 * j + 3] = s3[j] ^ flip;
    }
}

static PyObject *py_interleave4(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer src, dst;
    Py_ssize_t images, channels, plane;
    int flip;
    if (!PyArg_ParseTuple(args, "y*nnnpw*", &src, &images, &channels, &plane, &flip, &dst))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t groups = (channels + 3) / 4;
    if (images <= 0 || channels <= 0 || plane <= 0 || images > src.len / channels / plane ||
        src.len < images * channels * plane || dst.len < images * groups * plane * 4) {
        PyErr_SetString(PyExc_ValueError, "interleave4: a buffer does not fit its sizes");
        goto done;
    }
    uint8_t *zeros = calloc((size_t)plane, 1);
    if (zeros == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t img = 0; img < images; img++)
        for (Py_ssize_t g = 0; g < groups; g++) {
            const uint8_t *s[4];
            for (int i = 0; i < 4; i++) {
                const Py_ssize_t ch = 4 * g + i;
                s[i] = ch < channels ? (const uint8_t *)src.buf + (img * channels + ch) * plane
                                     : zeros; /* (its weights are 0: any byte does) */
            }
            interleave4_plane(s[0], s[1], s[2], s[3], plane, flip ? 0x80 : 0,
                              (uint8_t *)dst.buf + (img * groups + g) * plane * 4);
        }
    Py_END_ALLOW_THREADS;
    free(zeros);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

/* ---- a conv's input in channel pairs (the AVX2 level's int16 form) -------------------
 * interleave2(src, images, channels, plane, x_signed, zx, dst): the planes of a conv's
 * flat layout as pairs of channels, each position one word of two int16, the codes less
 * zx: dst[image, g, j] = (src[image, 2g, j] - zx) | (src[image, 2g + 1, j] - zx) << 16,
 * 0 for a channel past the last (its weights, less their zero point, need not be 0).  A
 * k group of the int16 product is then two channels at one kernel offset, 16 columns of
 * it 64 contiguous bytes, read where it lies (gemm_rescale4), where gemm packs each
 * plane again for every kernel offset. */
#if HAVE_X86
__attribute__((target("avx2"))) static void interleave2_plane_avx2(const uint8_t *s0,
                                                                    const uint8_t *s1,
                                                                    Py_ssize_t plane,
                                                                    int x_signed, int zx,
                                                                    uint32_t *d) {
    const __m256i z = _mm256_set1_epi16((int16_t)zx);
    for (Py_ssize_t j = 0; j + 16 <= plane; j += 16) {
        const __m128i a8 = _mm_loadu_si128((const __m128i *)(s0 + j));
        const __m256i a = _mm256_sub_epi16(x_signed ? _mm256_cvtepi8_epi16(a8)
                                                    : _mm256_cvtepu8_epi16(a8), z);
        __m256i b = _mm256_setzero_si256(); /* (no second channel: 0) */
        if (s1 != NULL) {
            const __m128i b8 = _mm_loadu_si128((const __m128i *)(s1 + j));
            b = _mm256_sub_epi16(x_signed ? _mm256_cvtepi8_epi16(b8) : _mm256_cvtepu8_epi16(b8),
                                 z);
        }
        /* per 128-bit lane: positions 0-3 | 8-11, then 4-7 | 12-15 */
        const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
        _mm256_storeu_si256((__m256i *)(d + j), _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256((__m256i *)(d + j + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
    }
}
#endif

static void interleave2_plane(const uint8_t *s0, const uint8_t *s1, Py_ssize_t plane,
                              int x_signed, int zx, uint32_t *d) {
    Py_ssize_t j = 0;
#if HAVE_X86
    if (current_level >= 1) {
        interleave2_plane_avx2(s0, s1, plane, x_signed, zx, d);
        j = plane / 16 * 16;
    }
#endif
    for (; j < plane; j++) {
        const int32_t a = (x_signed ? (int32_t)(int8_t)s0[j] : (int32_t)s0[j]) - zx;
        const int32_t b =
            s1 == NULL ? 0 : (x_signed ? (int32_t)(int8_t)s1[j] : (int32_t)s1[j]) - zx;
        d[j] = pair16(a, b);
    }
}

static PyObject *py_interleave2(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer src, dst;
    Py_ssize_t images, channels, plane;
    int x_signed, zx;
    if (!PyArg_ParseTuple(args, "y*nnnpiw*", &src, &images, &channels, &plane, &x_signed, &zx,
                          &dst))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t groups = (channels + 1) / 2;
    if (images <= 0 || channels <= 0 || plane <= 0 || images > src.len / channels / plane ||
        src.len < images * channels * plane || dst.len / 4 / plane / groups < images ||
        !byte_code(x_signed, zx)) {
        PyErr_SetString(PyExc_ValueError, "interleave2: a buffer or zero point does not fit");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t img = 0; img < images; img++)
        for (Py_ssize_t g = 0; g < groups; g++) {
            const uint8_t *s0 = (const uint8_t *)src.buf + (img * channels + 2 * g) * plane;
            const uint8_t *s1 = 2 * g + 1 < channels ? s0 + plane : NULL;
            interleave2_plane(s0, s1, plane, x_signed, zx,
                              (uint32_t *)dst.buf + (img * groups + g) * plane);
        }
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

/* gemm_rescale4(packed, x4, rows4, N, x_signed, zx, rows, width, keep, scale, bias, relu,
 * signed, qs, qz, dqs, dqz, codes, y): gemm_rescale with X in the four-channel layout
 * (interleave4's words), k group q at word offset rows4[q] (+ the column): weights packed
 * at the VNNI level with no zero points (their column term needs X's sums), a k order
 * of four channels per group to match. */
static PyObject *py_gemm_rescale4(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer packed, x4, rows4, scale, bias, y;
    Py_ssize_t n, rows, width, keep;
    int x_signed, zx, relu, is_signed, qz, dqz, codes;
    float qs, dqs;
    if (!PyArg_ParseTuple(args, "y*y*y*npinnny*y*ppfifipw*", &packed, &x4, &rows4, &n,
                          &x_signed, &zx, &rows, &width, &keep, &scale, &bias, &relu,
                          &is_signed, &qs, &qz, &dqs, &dqz, &codes, &y))
        return NULL;
    PyObject *result = NULL;
    Header h;
    Shape s;
    if (!packed_header(&packed, "gemm_rescale4", &h, &s)) goto done;
    /* VNNI: interleave4's bytes; AVX2: interleave2's int16 pairs (the int16 form) */
    const int pairs = current_level == 1 && h.group == 2;
    if (current_level < 3 && !pairs) {
        PyErr_SetString(PyExc_ValueError,
                        "gemm_rescale4: the VNNI level, or the AVX2 level's int16 form, only");
        goto done;
    }
    const int32_t *zeros = (const int32_t *)((const char *)packed.buf + sizeof(Header)) +
                           (Py_ssize_t)h.panels * h.mr;
    int zero_free = 1; /* (the int16 form holds W less its zero points) */
    for (Py_ssize_t i = 0; i < h.m && !pairs; i++) zero_free &= zeros[i] == 0;
    const Py_ssize_t words = x4.len / 4, span = (n + s.nr - 1) / s.nr * s.nr;
    int fits = zero_free && byte_code(x_signed, zx) && n > 0 && x4.len % 4 == 0 &&
               rows4.len == h.kq * (Py_ssize_t)sizeof(int64_t) && span <= words;
    for (Py_ssize_t q = 0; fits && q < h.kq; q++) {
        const int64_t r = ((const int64_t *)rows4.buf)[q];
        fits = r >= 0 && r <= (int64_t)(words - span); /* the last panel's reads inside */
    }
    if (!fits) {
        PyErr_SetString(PyExc_ValueError,
                        "gemm_rescale4: weight zero points, a row or a buffer do not fit");
        goto done;
    }
    const ProductX px = {NULL, 0, 0, NULL, x4.buf, rows4.buf, n, x_signed, zx};
    result = product_rescaled("gemm_rescale4", &h, s, packed.buf, &px, rows, width, keep,
                              &scale, &bias, relu, is_signed, qs, qz, dqs, dqz, codes, &y);
done:
    PyBuffer_Release(&packed);
    PyBuffer_Release(&x4);
    PyBuffer_Release(&rows4);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&bias);
    PyBuffer_Release(&y);
    return result;
}

static PyObject *py_quantize(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer x, out;
    float scale;
    int zp, is_signed;
    if (!PyArg_ParseTuple(args, "y*fipw*", &x, &scale, &zp, &is_signed, &out)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = x.len / 4;
    if (x.len % 4 || out.len < n || !byte_code(is_signed, zp)) {
        PyErr_SetString(PyExc_ValueError, "quantize: a buffer or zero point does not fit");
        goto done;
    }
    {
        const float *src = (const float *)x.buf;
        uint8_t *dst = (uint8_t *)out.buf;
        const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
        const float z = (float)zp;
        int nan = 0;
        const QuantizeFn fn = quantize_at_level();
        Py_BEGIN_ALLOW_THREADS;
        /* QuantizeLinear's float32 steps in its order: divide, round half to even, add
         * the zero point, clip (an int8 value's byte is its two's complement). */
        nan = fn(src, dst, n, scale, z, lo, hi);
        Py_END_ALLOW_THREADS;
        result = PyLong_FromLong(nan ? -1 : 0);
    }
done:
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    return result;
}

/* Rows of an int32 product turned float32 and scaled per column, with a bias per column
 * or none: y = float32(acc) * s[j] (+ b[j]), each step rounded to float32 (no FMA), which
 * is Cast -> Mul -> Add's result element for element.  scale_columns_qdq then takes each
 * row through the output pair's QuantizeLinear -> DequantizeLinear (qdq's pass) while it
 * is in L1: a QDQ MatMul's rescale. */
#define SCALE_ROW_BODY                                                                       \
    if (bias != NULL)                                                                        \
        for (Py_ssize_t j = 0; j < n; j++) y[j] = (float)a[j] * scale[j] + bias[j];          \
    else                                                                                     \
        for (Py_ssize_t j = 0; j < n; j++) y[j] = (float)a[j] * scale[j];

typedef void (*ScaleRowFn)(const int32_t *, Py_ssize_t, const float *, const float *, float *);

static void scale_row_generic(const int32_t *a, Py_ssize_t n, const float *scale,
                              const float *bias, float *y) {
    SCALE_ROW_BODY
}

#if HAVE_X86
__attribute__((target(AVX512_TARGET))) static void scale_row_avx512(const int32_t *a,
                                                                   Py_ssize_t n,
                                                                   const float *scale,
                                                                   const float *bias, float *y) {
    SCALE_ROW_BODY
}

__attribute__((target("avx2"))) static void scale_row_avx2(const int32_t *a, Py_ssize_t n,
                                                           const float *scale,
                                                           const float *bias, float *y) {
    SCALE_ROW_BODY
}
#endif

static ScaleRowFn scale_row_at_level(void) {
#if HAVE_X86
    if (current_level >= 2) return scale_row_avx512;
    if (current_level == 1) return scale_row_avx2;
#endif
    return scale_row_generic;
}

/* The operands shared by scale_columns and scale_columns_qdq, checked. */
static int scale_columns_check(const char *name, Py_buffer *acc, Py_ssize_t m, Py_ssize_t n,
                               Py_buffer *scale, Py_buffer *bias, Py_buffer *out) {
    if (m <= 0 || n <= 0 || m > PY_SSIZE_T_MAX / 4 / n || acc->len < m * n * 4 ||
        out->len < m * n * 4 || scale->len != n * 4 || (bias->len != 0 && bias->len != n * 4)) {
        PyErr_Format(PyExc_ValueError, "%s: a buffer does not fit its sizes", name);
        return 0;
    }
    return 1;
}

static PyObject *py_scale_columns(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer acc, scale, bias, out;
    Py_ssize_t m, n;
    if (!PyArg_ParseTuple(args, "y*nny*y*w*", &acc, &m, &n, &scale, &bias, &out)) return NULL;
    PyObject *result = NULL;
    if (scale_columns_check("scale_columns", &acc, m, n, &scale, &bias, &out)) {
        const float *b = bias.len ? (const float *)bias.buf : NULL;
        const ScaleRowFn row = scale_row_at_level();
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t i = 0; i < m; i++)
            row((const int32_t *)acc.buf + i * n, n, (const float *)scale.buf, b,
                (float *)out.buf + i * n);
        Py_END_ALLOW_THREADS;
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&acc);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&bias);
    PyBuffer_Release(&out);
    return result;
}

/* scale_columns_qdq's steps, per column j of a row of acc:
 *   v = float32(acc) * scale[j] (+ bias[j])             (float32 steps, no FMA)
 *   t = rint(v * r) + z, clipped, r = float32(1 / qs)    (the output pair's quantizer)
 *   y = (t - z2) * dqs                                   (its dequantizer)
 * and with bias2, the Add after the pair and the Add's own pair in QuantizeLinear's and
 * DequantizeLinear's float32 steps (the division itself):
 *   y = y + bias2[j];  t = rint(y / qs2) + zq2, clipped;  y = (t - zd2) * dqs2
 * The first quantizer's division is a product, as the conv's rescale's (rescale_row_generic):
 * v is the product of the real dequantized values within about 2 ulp, so the fused MatMul
 * is within one step of the stepped one at a rounding boundary either way, and the
 * division was a fifth of the pass.  One vector loop for it all, where four passes ran
 * (BERT-tiny's 128 x 512 with its bias Add: 42 -> 36 us). */
typedef struct {
    const float *scale, *bias;
    float r, z, lo, hi, z2, dqs;
    const float *bias2;
    float qs2, zq2, lo2, hi2, zd2, dqs2;
} ColumnsQdq;

static int scale_qdq_row_generic(const int32_t *a, Py_ssize_t n, const ColumnsQdq *p,
                                 float *y) {
    int nan = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        float v = (float)a[j] * p->scale[j];
        if (p->bias != NULL) v = v + p->bias[j];
        float t = round_even(v * p->r) + p->z;
        nan |= t != t;
        t = t < p->lo ? p->lo : t;
        t = t > p->hi ? p->hi : t;
        float f = (t - p->z2) * p->dqs;
        if (p->bias2 != NULL) {
            f = f + p->bias2[j];
            t = round_even(f / p->qs2) + p->zq2;
            nan |= t != t;
            t = t < p->lo2 ? p->lo2 : t;
            t = t > p->hi2 ? p->hi2 : t;
            f = (t - p->zd2) * p->dqs2;
        }
        y[j] = f;
    }
    return nan;
}

#if HAVE_X86
/* scale_qdq_row_generic 8 at a time, the same IEEE operations (so the same bits); the
 * tail by the scalar code. */
__attribute__((target("avx2"))) static int scale_qdq_row_avx2(const int32_t *a, Py_ssize_t n,
                                                              const ColumnsQdq *p, float *y) {
    const __m256 rv = _mm256_set1_ps(p->r), zv = _mm256_set1_ps(p->z),
                 lov = _mm256_set1_ps(p->lo), hiv = _mm256_set1_ps(p->hi),
                 z2v = _mm256_set1_ps(p->z2), dv = _mm256_set1_ps(p->dqs),
                 q2v = _mm256_set1_ps(p->qs2), zq2v = _mm256_set1_ps(p->zq2),
                 lo2v = _mm256_set1_ps(p->lo2), hi2v = _mm256_set1_ps(p->hi2),
                 zd2v = _mm256_set1_ps(p->zd2), d2v = _mm256_set1_ps(p->dqs2);
    __m256 nan = _mm256_setzero_ps();
    Py_ssize_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(a + j))),
                                 _mm256_loadu_ps(p->scale + j));
        if (p->bias != NULL) v = _mm256_add_ps(v, _mm256_loadu_ps(p->bias + j));
        __m256 t = round_clip8(_mm256_mul_ps(v, rv), zv, lov, hiv, &nan);
        __m256 f = _mm256_mul_ps(_mm256_sub_ps(t, z2v), dv);
        if (p->bias2 != NULL) {
            f = _mm256_add_ps(f, _mm256_loadu_ps(p->bias2 + j));
            t = round_clip8(_mm256_div_ps(f, q2v), zq2v, lo2v, hi2v, &nan);
            f = _mm256_mul_ps(_mm256_sub_ps(t, zd2v), d2v);
        }
        _mm256_storeu_ps(y + j, f);
    }
    ColumnsQdq rest = *p;
    rest.scale += j;
    rest.bias = p->bias != NULL ? p->bias + j : NULL;
    rest.bias2 = p->bias2 != NULL ? p->bias2 + j : NULL;
    return scale_qdq_row_generic(a + j, n - j, &rest, y + j) | (_mm256_movemask_ps(nan) != 0);
}

/* scale_qdq_row_generic 16 at a time, the tail masked (the same bits). */
__attribute__((target(AVX512_TARGET))) static int scale_qdq_row_avx512(const int32_t *a,
                                                                       Py_ssize_t n,
                                                                       const ColumnsQdq *p,
                                                                       float *y) {
    const __m512 rv = _mm512_set1_ps(p->r), zv = _mm512_set1_ps(p->z),
                 lov = _mm512_set1_ps(p->lo), hiv = _mm512_set1_ps(p->hi),
                 z2v = _mm512_set1_ps(p->z2), dv = _mm512_set1_ps(p->dqs),
                 q2v = _mm512_set1_ps(p->qs2), zq2v = _mm512_set1_ps(p->zq2),
                 lo2v = _mm512_set1_ps(p->lo2), hi2v = _mm512_set1_ps(p->hi2),
                 zd2v = _mm512_set1_ps(p->zd2), d2v = _mm512_set1_ps(p->dqs2);
    __mmask16 nan = 0;
    for (Py_ssize_t j = 0; j < n; j += 16) {
        const __mmask16 k = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
        const __m512i acc = _mm512_maskz_loadu_epi32(k, (const void *)(a + j));
        __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_maskz_loadu_ps(k, p->scale + j));
        if (p->bias != NULL) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, p->bias + j));
        __mmask16 bad = 0;
        __m512 t = round_clip16(_mm512_mul_ps(v, rv), zv, lov, hiv, &bad);
        __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, z2v), dv);
        if (p->bias2 != NULL) {
            f = _mm512_add_ps(f, _mm512_maskz_loadu_ps(k, p->bias2 + j));
            t = round_clip16(_mm512_div_ps(f, q2v), zq2v, lo2v, hi2v, &bad);
            f = _mm512_mul_ps(_mm512_sub_ps(t, zd2v), d2v);
        }
        nan |= bad & k;
        _mm512_mask_storeu_ps(y + j, k, f);
    }
    return nan != 0;
}
#endif

typedef int (*ScaleQdqRowFn)(const int32_t *, Py_ssize_t, const ColumnsQdq *, float *);

static ScaleQdqRowFn scale_qdq_row_at_level(void) {
#if HAVE_X86
    if (current_level >= 2) return scale_qdq_row_avx512;
    if (current_level == 1) return scale_qdq_row_avx2;
#endif
    return scale_qdq_row_generic;
}

/* The pass's parameters: the column scales and bias (NULL: none), the output pair's
 * (r = float32(1 / qs), checked finite by the caller), and the second stage's (bias2
 * NULL: none). */
static ColumnsQdq columns_qdq(const float *scale, const float *bias, int is_signed, float r,
                              int qz, float dqs, int dqz, const float *bias2, int signed2,
                              float qs2, int qz2, float dqs2, int dqz2) {
    const ColumnsQdq p = {
        .scale = scale, .bias = bias, .r = r, .z = (float)qz,
        .lo = is_signed ? -128.0f : 0.0f, .hi = is_signed ? 127.0f : 255.0f,
        .z2 = (float)dqz, .dqs = dqs, .bias2 = bias2, .qs2 = qs2, .zq2 = (float)qz2,
        .lo2 = signed2 ? -128.0f : 0.0f, .hi2 = signed2 ? 127.0f : 255.0f,
        .zd2 = (float)dqz2, .dqs2 = dqs2,
    };
    return p;
}

static PyObject *py_scale_columns_qdq(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer acc, scale, bias, out, bias2 = {0};
    Py_ssize_t m, n;
    float qs, dqs, qs2 = 1.0f, dqs2 = 1.0f;
    int qz, dqz, is_signed, signed2 = 0, qz2 = 0, dqz2 = 0;
    if (!PyArg_ParseTuple(args, "y*nny*y*pfifiw*|y*pfifi", &acc, &m, &n, &scale, &bias,
                          &is_signed, &qs, &qz, &dqs, &dqz, &out, &bias2, &signed2, &qs2,
                          &qz2, &dqs2, &dqz2))
        return NULL;
    PyObject *result = NULL;
    if (!scale_columns_check("scale_columns_qdq", &acc, m, n, &scale, &bias, &out)) goto done;
    if (!byte_code(is_signed, qz) || !byte_code(is_signed, dqz) ||
        (bias2.buf && (!byte_code(signed2, qz2) || !byte_code(signed2, dqz2)))) {
        PyErr_SetString(PyExc_ValueError, "scale_columns_qdq: zero point outside the type's range");
        goto done;
    }
    if (bias2.buf && bias2.len != n * 4) {
        PyErr_SetString(PyExc_ValueError, "scale_columns_qdq: the second bias is not one per column");
        goto done;
    }
    const float r = 1.0f / qs;
    if (!isnormal(qs) || !isfinite(r) || r == 0.0f) {
        result = PyLong_FromLong(-1); /* (the caller runs the nodes) */
        goto done;
    }
    {
        const ColumnsQdq p = columns_qdq(
            (const float *)scale.buf, bias.len ? (const float *)bias.buf : NULL, is_signed, r, qz,
            dqs, dqz, bias2.buf, signed2, qs2, qz2, dqs2, dqz2);
        const ScaleQdqRowFn row = scale_qdq_row_at_level();
        int nan = 0;
        Py_BEGIN_ALLOW_THREADS;
        for (Py_ssize_t i = 0; i < m; i++)
            nan |= row((const int32_t *)acc.buf + i * n, n, &p, (float *)out.buf + i * n);
        Py_END_ALLOW_THREADS;
        result = PyLong_FromLong(nan ? -1 : 0);
    }
done:
    PyBuffer_Release(&acc);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&bias);
    PyBuffer_Release(&out);
    if (bias2.buf) PyBuffer_Release(&bias2);
    return result;
}

/* The least and greatest of n floats (n >= 1) into lo and hi; 1 when one is a NaN. */
static int min_max_generic(const float *x, Py_ssize_t n, float *lo, float *hi) {
    float a = x[0], b = x[0];
    int nan = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const float v = x[i];
        nan |= v != v;
        a = v < a ? v : a;
        b = v > b ? v : b;
    }
    *lo = a;
    *hi = b;
    return nan;
}

#if HAVE_X86
/* min_max_generic 16 at a time in two pairs of vectors (the scalar loop waited on its
 * compare's latency every value: a BERT-tiny FFN's 128 x 512 activations took 60 us).
 * The order of the comparisons only decides which zero of -0 and +0 comes out, and
 * DynamicQuantizeLinear takes min(lo, 0) and max(hi, 0) of them, where both give 0. */
__attribute__((target("avx2,fma"))) static int min_max_avx2(const float *x, Py_ssize_t n,
                                                             float *lo, float *hi) {
    __m256 a0 = _mm256_set1_ps(x[0]), a1 = a0, b0 = a0, b1 = a0;
    __m256 nan = _mm256_setzero_ps();
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v0, v1, _CMP_UNORD_Q));
        a0 = _mm256_min_ps(a0, v0);
        a1 = _mm256_min_ps(a1, v1);
        b0 = _mm256_max_ps(b0, v0);
        b1 = _mm256_max_ps(b1, v1);
    }
    float a[8], b[8];
    _mm256_storeu_ps(a, _mm256_min_ps(a0, a1));
    _mm256_storeu_ps(b, _mm256_max_ps(b0, b1));
    int found = _mm256_movemask_ps(nan) != 0;
    float l = a[0], h = b[0];
    for (int j = 1; j < 8; j++) {
        l = a[j] < l ? a[j] : l;
        h = b[j] > h ? b[j] : h;
    }
    for (; i < n; i++) {
        const float v = x[i];
        found |= v != v;
        l = v < l ? v : l;
        h = v > h ? v : h;
    }
    *lo = l;
    *hi = h;
    return found;
}

__attribute__((target(AVX512_TARGET))) static int min_max_avx512(const float *x, Py_ssize_t n,
                                                                  float *lo, float *hi) {
    __m512 a = _mm512_set1_ps(x[0]), b = a;
    __mmask16 nan = 0;
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        a = _mm512_min_ps(a, v);
        b = _mm512_max_ps(b, v);
    }
    if (i < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - i)) - 1);
        const __m512 v = _mm512_mask_loadu_ps(a, tail, x + i); /* lanes past n: a's */
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        a = _mm512_min_ps(a, v);
        b = _mm512_max_ps(b, _mm512_mask_loadu_ps(b, tail, x + i));
    }
    *lo = _mm512_reduce_min_ps(a);
    *hi = _mm512_reduce_max_ps(b);
    return nan != 0;
}
#endif

/* DynamicQuantizeLinear: uint8 codes of x with the scale and zero point its own range
 * gives, in the float32 steps of the operator's definition (onnxruntime computes them so
 * too): lo = min(min x, 0), hi = max(max x, 0), scale = (hi - lo) / 255,
 * zero point = clip(rint(0 - lo / scale), 0, 255), then QuantizeLinear's steps.
 * Returns (0, scale, zero point), or (-1, 0, 0) with nothing written when x holds a NaN,
 * is all zeros (scale 0) or its range overflows: the caller's numpy steps decide those. */
static PyObject *py_dynamic_quantize(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer x, out;
    if (!PyArg_ParseTuple(args, "y*w*", &x, &out)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = x.len / 4;
    if (x.len % 4 || n <= 0 || out.len < n) {
        PyErr_SetString(PyExc_ValueError, "dynamic_quantize: a buffer does not fit");
        goto done;
    }
    {
        const float *src = (const float *)x.buf;
        float lo = 0.0f, hi = 0.0f, scale = 0.0f, zf = 0.0f;
        int status = 0;
        const QuantizeFn fn = quantize_at_level();
        Py_BEGIN_ALLOW_THREADS;
#if HAVE_X86
        status = current_level >= 2   ? min_max_avx512(src, n, &lo, &hi)
                 : current_level == 1 ? min_max_avx2(src, n, &lo, &hi)
                                      : min_max_generic(src, n, &lo, &hi);
#else
        status = min_max_generic(src, n, &lo, &hi);
#endif
        lo = lo < 0.0f ? lo : 0.0f;
        hi = hi > 0.0f ? hi : 0.0f;
        scale = (hi - lo) / 255.0f;
        if (status || !(scale > 0.0f) || !isfinite(scale)) {
            status = -1;
        } else {
            zf = rintf(0.0f - lo / scale);
            zf = zf < 0.0f ? 0.0f : (zf > 255.0f ? 255.0f : zf);
            status = fn(src, (uint8_t *)out.buf, n, scale, zf, 0.0f, 255.0f) ? -1 : 0;
        }
        Py_END_ALLOW_THREADS;
        if (status)
            result = Py_BuildValue("(iff)", -1, 0.0f, 0.0f);
        else
            result = Py_BuildValue("(ifi)", 0, scale, (int)zf);
    }
done:
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    return result;
}

/* a * b * c * d into *out when it fits in Py_ssize_t (all positive). */
static int product4(Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t d, Py_ssize_t *out) {
    Py_ssize_t p = a;
    const Py_ssize_t f[3] = {b, c, d};
    for (int i = 0; i < 3; i++) {
        if (f[i] != 0 && p > PY_SSIZE_T_MAX / f[i]) return 0;
        p *= f[i];
    }
    *out = p;
    return 1;
}


#if HAVE_X86
/* dst[j] = src[2 j], j < count: 32 at a time, each 16-bit pair's low byte (vpmovwb), the
 * tail masked (a stride-2 conv's column phases, picked byte by byte otherwise). */
__attribute__((target(AVX512_TARGET))) static void pick2_avx512(uint8_t *dst,
                                                               const uint8_t *src,
                                                               Py_ssize_t count) {
    for (Py_ssize_t j = 0; j < count; j += 32) {
        const Py_ssize_t left = count - j < 32 ? count - j : 32;
        /* the source bytes 2j .. 2j + 2 left - 2 (never the one past the last pick, which
         * may lie past the buffer) */
        const __mmask64 k = ((__mmask64)1 << (2 * left - 1)) - 1;
        const __m512i v = _mm512_maskz_loadu_epi8(k, src + 2 * j);
        _mm256_mask_storeu_epi8(dst + j, (__mmask32)(((uint64_t)1 << left) - 1),
                                _mm512_cvtepi16_epi8(v));
    }
}
#endif

/* dst[j] = src[j * step], j < count. */
static void pick_bytes(uint8_t *dst, const uint8_t *src, Py_ssize_t count, Py_ssize_t step) {
#if HAVE_X86
    if (step == 2 && current_level >= 2) {
        pick2_avx512(dst, src, count);
        return;
    }
#endif
    for (Py_ssize_t j = 0; j < count; j++) dst[j] = src[j * step];
}

/* The sizes and zero point of a layout call (quantize_layout, bytes_layout): 0, or -1
 * with ValueError set.  `item`: the bytes of one x value. */
static int layout_check(const char *name, Py_ssize_t x_len, Py_ssize_t item, Py_ssize_t n,
                        Py_ssize_t c, Py_ssize_t h, Py_ssize_t w, int zp, int is_signed,
                        Py_ssize_t pad_t, Py_ssize_t pad_l, Py_ssize_t s0, Py_ssize_t s1,
                        Py_ssize_t ph_h, Py_ssize_t ph_w, Py_ssize_t length, int fill,
                        Py_ssize_t out_len) {
    const Py_ssize_t big = (Py_ssize_t)1 << 40;
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || pad_t < 0 || pad_l < 0 || s0 <= 0 || s1 <= 0 ||
        s0 * s1 > 64 || ph_h <= 0 || ph_w <= 0 || n > big || c > big || h > big || w > big ||
        ph_h > big || ph_w > big || length > big || ph_h > length / ph_w ||
        !byte_code(is_signed, zp) || fill < 0 || fill > 255) {
        PyErr_Format(PyExc_ValueError, "%s: bad sizes or zero point", name);
        return -1;
    }
    Py_ssize_t x_need, out_need;
    if (!product4(n, c, h, w, &x_need) || !product4(n, c, s0 * s1, length, &out_need) ||
        x_need > PY_SSIZE_T_MAX / 4 || x_len != x_need * item || out_len != out_need) {
        PyErr_Format(PyExc_ValueError, "%s: a buffer does not fit its sizes", name);
        return -1;
    }
    return 0;
}

/* The planes of x (float32 `fx` quantized by scale and zp, or bytes `bx` as they are)
 * into a conv's flat layout (quantize_layout's docstring); returns 1 when a quantized
 * value was a NaN, 0, or -1 without memory.  Called without the GIL. */
static int layout_run(const float *fx, const uint8_t *bx, Py_ssize_t n, Py_ssize_t c,
                      Py_ssize_t h, Py_ssize_t w, float scale, int zp, int is_signed,
                      Py_ssize_t pad_t, Py_ssize_t pad_l, Py_ssize_t s0, Py_ssize_t s1,
                      Py_ssize_t ph_h, Py_ssize_t ph_w, Py_ssize_t length, int fill,
                      unsigned long long used, uint8_t *dst) {
    const Py_ssize_t nph = s0 * s1;
    float *tmp = malloc((size_t)w * sizeof(float));
    /* Each plane quantized in one vector run first, then its rows copied (or, across a
     * stride, picked byte by byte) into place: with stride 1 and short rows (small
     * images: the rows alone would run scalar tails), and with two or more column
     * phases used (a strided 3x3 conv: each float was picked out, then quantized,
     * per phase; QDQ ResNet-18 w32's stride-2 layouts, us: its stem's 127 -> 109, 32
     * channels of 56 px 176 -> 102, 64 of 28 px 152 -> 67, 128 of 14 px 125 -> 49).
     * Bytes are the planes themselves. */
    int phases_used = 0;
    for (int ph = 0; ph < 64; ph++) phases_used += (int)((used >> ph) & 1);
    const int by_plane = bx == NULL && ((s1 == 1 && w < 32) || (s1 > 1 && phases_used >= 2));
    uint8_t *quantized = by_plane ? malloc((size_t)(h * w)) : NULL;
    if (tmp == NULL || (by_plane && quantized == NULL)) {
        free(tmp);
        free(quantized);
        return -1;
    }
    const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
    const float z = (float)zp;
    const QuantizeFn fn = quantize_at_level();
    int nan = 0;
    for (Py_ssize_t img = 0; img < n * c; img++) {
        const float *plane = fx != NULL ? fx + img * h * w : NULL;
        /* the plane's bytes, when the rows are placed from bytes */
        const uint8_t *plane_bytes = bx != NULL ? bx + img * h * w : quantized;
        if (quantized != NULL) nan |= fn(plane, quantized, h * w, scale, z, lo, hi);
        for (Py_ssize_t p0 = 0; p0 < s0; p0++)
            for (Py_ssize_t p1 = 0; p1 < s1; p1++) {
                const Py_ssize_t phase = p0 * s1 + p1;
                if (!((used >> phase) & 1)) continue;
                uint8_t *base = dst + (img * nph + phase) * length;
                /* Columns j whose x column p1 + j*s1 - pad_l lies in [0, w). */
                const Py_ssize_t a = pad_l - p1;
                Py_ssize_t j_lo = a > 0 ? (a + s1 - 1) / s1 : 0;
                Py_ssize_t j_hi = w - 1 + a >= 0 ? (w - 1 + a) / s1 + 1 : 0;
                j_lo = j_lo < ph_w ? j_lo : ph_w;
                j_hi = j_hi < ph_w ? j_hi : ph_w;
                j_hi = j_hi > j_lo ? j_hi : j_lo;
                /* The whole phase at the fill by one call (with the rows' pads a
                 * pair of calls per row cost more than a small image's bytes), then
                 * the rows' data over it. */
                memset(base, fill, (size_t)length);
                for (Py_ssize_t i = 0; i < ph_h; i++) {
                    uint8_t *row = base + i * ph_w;
                    const Py_ssize_t xr = p0 + i * s0 - pad_t;
                    const Py_ssize_t count = j_hi - j_lo;
                    if (xr < 0 || xr >= h || count <= 0) continue;
                    const float *xrow =
                        plane != NULL ? plane + xr * w + (p1 + j_lo * s1 - pad_l) : NULL;
                    if (plane_bytes != NULL && s1 == 1) {
                        copy_bytes(row + j_lo, plane_bytes + xr * w + (p1 + j_lo - pad_l),
                                   count);
                    } else if (plane_bytes != NULL) {
                        const uint8_t *brow = plane_bytes + xr * w + (p1 + j_lo * s1 - pad_l);
                        pick_bytes(row + j_lo, brow, count, s1);
                    } else if (s1 == 1) {
                        nan |= fn(xrow, row + j_lo, count, scale, z, lo, hi);
                    } else {
                        for (Py_ssize_t j = 0; j < count; j++) tmp[j] = xrow[j * s1];
                        nan |= fn(tmp, row + j_lo, count, scale, z, lo, hi);
                    }
                }
            }
    }
    free(tmp);
    free(quantized);
    return nan;
}

/* quantize_layout: x (N, C, H, W) float32 quantized (QuantizeLinear's steps) straight into
 * a conv's flat layout (nn_conv._FlatLayout): per image and channel, one phase image of
 * ph_h x ph_w bytes per stride phase (p0, p1) (padded row p0 + i*s0, column p1 + j*s1;
 * outside x: `fill`, the zero point), then `fill` up to `length`.  Phases whose bit is
 * not set in `used` (no kernel offset reads them) are left as they are. */
static PyObject *py_quantize_layout(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer x, out;
    Py_ssize_t n, c, h, w, pad_t, pad_l, s0, s1, ph_h, ph_w, length;
    float scale;
    int zp, is_signed, fill;
    unsigned long long used;
    if (!PyArg_ParseTuple(args, "y*nnnnfipnnnnnnniKw*", &x, &n, &c, &h, &w, &scale, &zp,
                          &is_signed, &pad_t, &pad_l, &s0, &s1, &ph_h, &ph_w, &length, &fill,
                          &used, &out))
        return NULL;
    PyObject *result = NULL;
    if (layout_check("quantize_layout", x.len, 4, n, c, h, w, zp, is_signed, pad_t, pad_l, s0,
                     s1, ph_h, ph_w, length, fill, out.len) < 0)
        goto done;
    int nan;
    Py_BEGIN_ALLOW_THREADS;
    nan = layout_run((const float *)x.buf, NULL, n, c, h, w, scale, zp, is_signed, pad_t, pad_l,
                     s0, s1, ph_h, ph_w, length, fill, used, (uint8_t *)out.buf);
    Py_END_ALLOW_THREADS;
    result = nan < 0 ? PyErr_NoMemory() : PyLong_FromLong(nan ? -1 : 0);
done:
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    return result;
}

/* bytes_layout: quantize_layout of 8-bit values as they are (a QDQ conv's input codes,
 * or a ConvInteger's): the same flat layout, the bytes copied, no arithmetic. */
static PyObject *py_bytes_layout(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer x, out;
    Py_ssize_t n, c, h, w, pad_t, pad_l, s0, s1, ph_h, ph_w, length;
    int fill;
    unsigned long long used;
    if (!PyArg_ParseTuple(args, "y*nnnnnnnnnnniKw*", &x, &n, &c, &h, &w, &pad_t, &pad_l, &s0,
                          &s1, &ph_h, &ph_w, &length, &fill, &used, &out))
        return NULL;
    PyObject *result = NULL;
    if (layout_check("bytes_layout", x.len, 1, n, c, h, w, 0, 0, pad_t, pad_l, s0, s1, ph_h,
                     ph_w, length, fill, out.len) < 0)
        goto done;
    int status;
    Py_BEGIN_ALLOW_THREADS;
    status = layout_run(NULL, (const uint8_t *)x.buf, n, c, h, w, 1.0f, 0, 0, pad_t, pad_l, s0,
                        s1, ph_h, ph_w, length, fill, used, (uint8_t *)out.buf);
    Py_END_ALLOW_THREADS;
    result = status < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
done:
    PyBuffer_Release(&x);
    PyBuffer_Release(&out);
    return result;
}

/* ---- a quantized Add ---------------------------------------------------------------------
 *
 * qadd: DequantizeLinear of each 8-bit input (or a float32 input as it is), Add, Relu when
 * asked, then QuantizeLinear into bytes and, when asked, DequantizeLinear of them again
 * (fusion_qdq_add.py's QdqAdd: a residual block's Add between its output pairs), each
 * step the nodes' float32 operation in their order: (t - z) * s, a + b, max(v, 0),
 * round_even(v / s) + z clipped, (t - z) * s.  One pass over bytes where the nodes made
 * five over floats. */
typedef struct {
    const void *p;
    int codes, is_signed; /* bytes (int8 when is_signed) or float32 */
    float s, z;
} QaddInput;

static inline float qadd_value(const QaddInput *in, Py_ssize_t i) {
    if (!in->codes) return ((const float *)in->p)[i];
    const float t = in->is_signed ? (float)((const int8_t *)in->p)[i]
                                  : (float)((const uint8_t *)in->p)[i];
    return (t - in->z) * in->s;
}

static int qadd_generic(const QaddInput *a, const QaddInput *b, Py_ssize_t n, int relu,
                        float qs, float z, float lo, float hi, uint8_t *t_out, float z2,
                        float dqs, float *f_out) {
    int nan = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        float v = qadd_value(a, i) + qadd_value(b, i);
        if (relu) v = v < 0.0f ? 0.0f : v;
        float t = round_even(v / qs) + z;
        nan |= t != t;
        t = t < lo ? lo : t;
        t = t > hi ? hi : t;
        t = t == t ? t : 0.0f;
        t_out[i] = (uint8_t)(int32_t)t;
        if (f_out != NULL) f_out[i] = (t - z2) * dqs;
    }
    return nan;
}

#if HAVE_X86
__attribute__((target(AVX512_TARGET))) static inline __m512 qadd_load16(const QaddInput *in,
                                                                        Py_ssize_t i,
                                                                        __mmask16 k) {
    if (!in->codes) return _mm512_maskz_loadu_ps(k, (const float *)in->p + i);
    const __m128i bytes = _mm_maskz_loadu_epi8(k, (const uint8_t *)in->p + i);
    const __m512i w = in->is_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
    return _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(w), _mm512_set1_ps(in->z)),
                         _mm512_set1_ps(in->s));
}

/* qadd_generic 16 at a time, the same IEEE operations (the int-to-float conversion of
 * a byte is exact), the tail masked. */
__attribute__((target(AVX512_TARGET))) static int qadd_avx512(const QaddInput *a,
                                                              const QaddInput *b, Py_ssize_t n,
                                                              int relu, float qs, float z,
                                                              float lo, float hi, uint8_t *t_out,
                                                              float z2, float dqs, float *f_out) {
    const __m512 qv = _mm512_set1_ps(qs), zv = _mm512_set1_ps(z), lov = _mm512_set1_ps(lo),
                 hiv = _mm512_set1_ps(hi), z2v = _mm512_set1_ps(z2), dv = _mm512_set1_ps(dqs),
                 zero = _mm512_setzero_ps();
    const int is_signed = lo < 0.0f;
    __mmask16 nan = 0;
    for (Py_ssize_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        __m512 v = _mm512_add_ps(qadd_load16(a, i, k), qadd_load16(b, i, k));
        if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
        __mmask16 bad = 0;
        __m512 t = round_clip16(_mm512_div_ps(v, qv), zv, lov, hiv, &bad);
        nan |= bad & k;
        t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, t, _CMP_ORD_Q), t); /* NaN -> 0 */
        const __m512i iv = _mm512_cvttps_epi32(t);
        const __m128i b8 = is_signed ? _mm512_cvtsepi32_epi8(iv) : _mm512_cvtusepi32_epi8(iv);
        _mm_mask_storeu_epi8((void *)(t_out + i), k, b8);
        if (f_out != NULL)
            _mm512_mask_storeu_ps(f_out + i, k, _mm512_mul_ps(_mm512_sub_ps(t, z2v), dv));
    }
    return nan != 0;
}
#endif

#if HAVE_X86
__attribute__((target("avx2"))) static inline __m256 qadd_load8(const QaddInput *in,
                                                                Py_ssize_t i) {
    if (!in->codes) return _mm256_loadu_ps((const float *)in->p + i);
    const __m128i bytes = _mm_loadl_epi64((const __m128i *)((const uint8_t *)in->p + i));
    const __m256i w = in->is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
    return _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(w), _mm256_set1_ps(in->z)),
                         _mm256_set1_ps(in->s));
}

/* qadd_generic 8 at a time, the same IEEE operations (round_clip8 is QuantizeLinear's
 * rounding), the tail by qadd_generic.  The scalar loop took 6 ns a value (a QDQ
 * ResNet-18's first residual Add, 100K values: 615 us, onnxruntime's QLinearAdd 31). */
__attribute__((target("avx2"))) static int qadd_avx2(const QaddInput *a, const QaddInput *b,
                                                     Py_ssize_t n, int relu, float qs, float z,
                                                     float lo, float hi, uint8_t *t_out,
                                                     float z2, float dqs, float *f_out) {
    const __m256 qv = _mm256_set1_ps(qs), zv = _mm256_set1_ps(z), lov = _mm256_set1_ps(lo),
                 hiv = _mm256_set1_ps(hi), z2v = _mm256_set1_ps(z2), dv = _mm256_set1_ps(dqs),
                 zero = _mm256_setzero_ps();
    const int is_signed = lo < 0.0f;
    __m256 nan = _mm256_setzero_ps();
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_add_ps(qadd_load8(a, i), qadd_load8(b, i));
        /* v < 0 ? 0 : v (a NaN stays) */
        if (relu) v = _mm256_blendv_ps(v, zero, _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
        __m256 t = round_clip8(_mm256_div_ps(v, qv), zv, lov, hiv, &nan);
        t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q)); /* NaN -> 0 (reported) */
        const __m256i iv = _mm256_cvttps_epi32(t);
        const __m128i w16 =
            _mm_packs_epi32(_mm256_castsi256_si128(iv), _mm256_extracti128_si256(iv, 1));
        const __m128i b8 = is_signed ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
        _mm_storel_epi64((__m128i *)(t_out + i), b8);
        if (f_out != NULL) _mm256_storeu_ps(f_out + i, _mm256_mul_ps(_mm256_sub_ps(t, z2v), dv));
    }
    const int bad = _mm256_movemask_ps(nan) != 0;
    QaddInput ra = *a, rb = *b;
    ra.p = a->codes ? (const void *)((const uint8_t *)a->p + i) : (const void *)((const float *)a->p + i);
    rb.p = b->codes ? (const void *)((const uint8_t *)b->p + i) : (const void *)((const float *)b->p + i);
    return qadd_generic(&ra, &rb, n - i, relu, qs, z, lo, hi, t_out + i, z2, dqs,
                        f_out != NULL ? f_out + i : NULL) | bad;
}
#endif

/* One qadd input from its buffer: bytes (codes) or float32, n values. */
static int qadd_input(Py_buffer *buf, int codes, int is_signed, float s, int zp, Py_ssize_t n,
                      QaddInput *in) {
    if (buf->len != (codes ? n : 4 * n) ||
        (codes && !byte_code(is_signed, zp))) {
        PyErr_SetString(PyExc_ValueError, "qadd: an input does not fit");
        return -1;
    }
    in->p = buf->buf;
    in->codes = codes;
    in->is_signed = is_signed;
    in->s = s;
    in->z = (float)zp;
    return 0;
}

static PyObject *py_qadd(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer ab, bb, tb, fb;
    int a_codes, a_signed, azp, b_codes, b_signed, bzp, relu, o_signed, qz, dqz;
    float as, bs, qs, dqs;
    if (!PyArg_ParseTuple(args, "y*ppfiy*ppfipp" "fifiw*w*", &ab, &a_codes, &a_signed, &as, &azp,
                          &bb, &b_codes, &b_signed, &bs, &bzp, &relu, &o_signed, &qs, &qz, &dqs,
                          &dqz, &tb, &fb))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = tb.len;
    QaddInput a, b;
    if (qadd_input(&ab, a_codes, a_signed, as, azp, n, &a) < 0 ||
        qadd_input(&bb, b_codes, b_signed, bs, bzp, n, &b) < 0)
        goto done;
    if ((fb.len != 0 && fb.len != 4 * n) ||
        (!byte_code(o_signed, qz) || !byte_code(o_signed, dqz))) {
        PyErr_SetString(PyExc_ValueError, "qadd: an output or zero point does not fit");
        goto done;
    }
    {
        const float lo = o_signed ? -128.0f : 0.0f, hi = o_signed ? 127.0f : 255.0f;
        float *f_out = fb.len ? (float *)fb.buf : NULL;
        int nan;
        Py_BEGIN_ALLOW_THREADS;
#if HAVE_X86
        if (current_level >= 2)
            nan = qadd_avx512(&a, &b, n, relu, qs, (float)qz, lo, hi, (uint8_t *)tb.buf,
                              (float)dqz, dqs, f_out);
        else if (current_level == 1)
            nan = qadd_avx2(&a, &b, n, relu, qs, (float)qz, lo, hi, (uint8_t *)tb.buf,
                            (float)dqz, dqs, f_out);
        else
#endif
            nan = qadd_generic(&a, &b, n, relu, qs, (float)qz, lo, hi, (uint8_t *)tb.buf,
                               (float)dqz, dqs, f_out);
        Py_END_ALLOW_THREADS;
        result = PyLong_FromLong(nan ? -1 : 0);
    }
done:
    PyBuffer_Release(&ab);
    PyBuffer_Release(&bb);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&fb);
    return result;
}

/* ---- a max pool over codes -------------------------------------------------------------
 *
 * max_pool_codes: MaxPool of 8-bit codes, NCHW planes, any window, stride and pads (the
 * pads never count: each window holds a value of the input), the max of the codes
 * (int8 compared as int8).  A QDQ model's MaxPool between a conv's output pair and its
 * own pair (fusion_qdq_pool.py): the dequantizer is non-decreasing, so the max of the
 * dequantized values is the dequantized max code, bit for bit.  Per output row, the
 * window's input rows are combined into one padded row, then each output combines its
 * kernel columns (at stride 2 from the row split into even and odd columns, contiguous
 * runs), as _pool.c's float pool does; int8 codes are flipped to uint8 order (x ^ 0x80)
 * on the way in and back on the way out. */
static void max_pool_codes_run(const uint8_t *x, uint8_t *y, Py_ssize_t planes, Py_ssize_t h,
                               Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t kh,
                               Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t pt,
                               Py_ssize_t pl, int is_signed, uint8_t *row, Py_ssize_t span,
                               uint8_t *halves) {
    const uint8_t flip = is_signed ? 0x80 : 0;
    memset(row, 0, (size_t)span); /* the pads: the least code, never above a value */
    uint8_t *data = row + pl;
    for (Py_ssize_t p = 0; p < planes; p++) {
        const uint8_t *plane = x + p * h * w;
        uint8_t *out = y + p * oh * ow;
        for (Py_ssize_t i = 0; i < oh; i++, out += ow) {
            const Py_ssize_t top = i * sh - pt;
            const Py_ssize_t r0 = top > 0 ? top : 0, r1 = top + kh < h ? top + kh : h;
            const uint8_t *src = plane + r0 * w;
            for (Py_ssize_t j = 0; j < w; j++) data[j] = (uint8_t)(src[j] ^ flip);
            for (Py_ssize_t r = r0 + 1; r < r1; r++) {
                src = plane + r * w;
                for (Py_ssize_t j = 0; j < w; j++) {
                    const uint8_t v = (uint8_t)(src[j] ^ flip);
                    data[j] = data[j] > v ? data[j] : v;
                }
            }
            if (sw == 1) {
                for (Py_ssize_t j = 0; j < ow; j++) out[j] = row[j];
                for (Py_ssize_t k = 1; k < kw; k++)
                    for (Py_ssize_t j = 0; j < ow; j++) out[j] = out[j] > row[j + k] ? out[j] : row[j + k];
            } else if (sw == 2) {
                uint8_t *even = halves, *odd = halves + (span + 1) / 2;
                for (Py_ssize_t j = 0; j < span / 2; j++) {
                    even[j] = row[2 * j];
                    odd[j] = row[2 * j + 1];
                }
                if (span % 2) even[span / 2] = row[span - 1];
                for (Py_ssize_t j = 0; j < ow; j++) out[j] = even[j];
                for (Py_ssize_t k = 1; k < kw; k++) {
                    const uint8_t *col = (k % 2 ? odd : even) + k / 2;
                    for (Py_ssize_t j = 0; j < ow; j++) out[j] = out[j] > col[j] ? out[j] : col[j];
                }
            } else {
                for (Py_ssize_t j = 0; j < ow; j++) {
                    uint8_t m = row[j * sw];
                    for (Py_ssize_t k = 1; k < kw; k++) m = m > row[j * sw + k] ? m : row[j * sw + k];
                    out[j] = m;
                }
            }
            if (flip)
                for (Py_ssize_t j = 0; j < ow; j++) out[j] ^= flip;
        }
    }
}

static PyObject *py_max_pool_codes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer x, y;
    Py_ssize_t planes, h, w, kh, kw, sh, sw, pt, pl, pb, pr;
    int is_signed;
    if (!PyArg_ParseTuple(args, "y*nnnnnnnnnnnpw*", &x, &planes, &h, &w, &kh, &kw, &sh, &sw, &pt,
                          &pl, &pb, &pr, &is_signed, &y))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t big = (Py_ssize_t)1 << 30;
    if (planes <= 0 || h <= 0 || w <= 0 || kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 ||
        pt < 0 || pl < 0 || pb < 0 || pr < 0 || pt >= kh || pl >= kw || pb >= kh || pr >= kw ||
        h > big || w > big || kh > big || kw > big || sh > big || sw > big ||
        h + pt + pb < kh || w + pl + pr < kw) {
        PyErr_SetString(PyExc_ValueError, "max_pool_codes: bad sizes");
        goto done;
    }
    {
        const Py_ssize_t oh = (h + pt + pb - kh) / sh + 1, ow = (w + pl + pr - kw) / sw + 1;
        if (planes > PY_SSIZE_T_MAX / h / w || x.len != planes * h * w ||
            y.len != planes * oh * ow) {
            PyErr_SetString(PyExc_ValueError, "max_pool_codes: a buffer does not fit its sizes");
            goto done;
        }
        /* The padded row: every column a window reads ((ow-1)*sw + kw) and the data. */
        Py_ssize_t span = (ow - 1) * sw + kw;
        if (span < pl + w) span = pl + w;
        uint8_t *row = malloc((size_t)(2 * span + 2));
        if (row == NULL) {
            result = PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS;
        max_pool_codes_run((const uint8_t *)x.buf, (uint8_t *)y.buf, planes, h, w, oh, ow, kh,
                           kw, sh, sw, pt, pl, is_signed, row, span, row + span);
        Py_END_ALLOW_THREADS;
        free(row);
        result = Py_NewRef(Py_None);
    }
done:
    PyBuffer_Release(&x);
    PyBuffer_Release(&y);
    return result;
}

static PyObject *py_set_level(PyObject *self, PyObject *args) {
    (void)self;
    int level;
    if (!PyArg_ParseTuple(args, "i", &level)) return NULL;
    if (level < 0 || level > 3) {
        PyErr_SetString(PyExc_ValueError, "set_level: 0..3");
        return NULL;
    }
    if (level > onnxviz_cpu_level()) { /* its instructions would stop the process */
        PyErr_Format(PyExc_ValueError, "set_level: this CPU cannot run level %d", level);
        return NULL;
    }
    current_level = level;
    Py_RETURN_NONE;
}

static PyObject *py_level(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(current_level);
}

static PyObject *py_max_k(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(MAX_K);
}

/* ---- a held quantize-dequantize pair ------------------------------------------------------
 *
 * `held_qdq(...)` makes the `quick` call of a fusion_qdq.QdqPair whose parameters are 8-bit
 * (the node loop's compiled call, native/_runloop.c): called with the pair's inputs (x,
 * scale, zero point, the dequantizer's scale and zero point), it checks the four
 * parameters are the objects it was made for, and x a float32 array C-contiguous or laid
 * out channels-last, then runs `qdq`'s pass into a new array of x's shape and layout: the
 * same steps, so the same bits, without the Python call (a QDQ MobileNetV3-small has 107
 * pairs a run, most of them small).  A NaN (the nodes then run one by one, as the
 * QdqPair does), or any other call, goes to the fallback. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
    float qs, dqs, z, z2, lo, hi;
} HeldQdq;

/* A held call's new C-contiguous float32 output of `ndim` sizes (numpy.empty, kept by the
 * HeldCall) and its first float in *y (NULL when there is no buffer); NULL with the error
 * set. */
static PyObject *held_new_floats(const HeldCall *h, int ndim, const Py_ssize_t *sizes,
                                 float **y) {
    *y = NULL;
    PyObject *out = onnxviz_new_array(h->empty, h->f32, ndim, sizes);
    Py_buffer ob;
    if (out && PyObject_GetBuffer(out, &ob, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) == 0) {
        *y = ob.buf;
        PyBuffer_Release(&ob); /* out keeps the memory */
    }
    return out;
}

/* held_new_floats of a product's rows: `a`'s sizes with its last one `n`. */
static PyObject *held_new_rows(const HeldCall *h, const Py_buffer *a, Py_ssize_t n, float **y) {
    Py_ssize_t sizes[32];
    for (int i = 0; i < a->ndim - 1; i++) sizes[i] = a->shape[i];
    sizes[a->ndim - 1] = n;
    return held_new_floats(h, a->ndim, sizes, y);
}

static PyObject *held_qdq_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
    HeldQdq *self = (HeldQdq *)obj;
    const HeldCall *h = &self->call;
    if (!held_call_takes(h, args, nargsf, kwnames)) goto other;
    Py_buffer xb;
    PyObject *out = NULL;
    float *y = NULL;
    if (onnxviz_array_view(args[0], h->ndarray, &xb, 'f', -1, NULL)) {
        if (xb.len == 0) {
            PyBuffer_Release(&xb);
            goto other;
        }
        out = held_new_floats(h, xb.ndim, xb.shape, &y);
    } else if (onnxviz_any_channels_last_view(args[0], h->ndarray, &xb)) {
        if (xb.len == 0) {
            PyBuffer_Release(&xb);
            goto other;
        }
        out = onnxviz_new_channels_last(h->empty, h->ndarray, h->u8, h->f32, xb.shape[0],
                                        xb.shape[1], xb.shape[2], xb.shape[3], &y);
    } else {
        goto other;
    }
    if (!out || !y) {
        Py_XDECREF(out);
        PyBuffer_Release(&xb);
        return NULL;
    }
    const QdqFn fn = qdq_at_level();
    int nan;
    Py_BEGIN_ALLOW_THREADS;
    nan = fn((const float *)xb.buf, y, xb.len / 4, self->qs, self->z, self->lo, self->hi,
             self->z2, self->dqs);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&xb);
    if (nan) {
        Py_DECREF(out);
        goto other;
    }
    return out;
other:
    return held_call_other(h, args, nargsf, kwnames);
}

static void held_qdq_release(HeldQdq *self) { (void)self; }

HELD_CALL_TYPE(HeldQdq, HeldQdqType, held_qdq, "onnxviz.runtime.native._int8.HeldQdq",
               "A quantize-dequantize pair's call (held_qdq()).", held_qdq_release)

static PyObject *py_held_qdq(PyObject *self, PyObject *args) {
    (void)self;
    float qs, dqs;
    int qz, dqz, is_signed;
    Py_ssize_t nargs;
    PyObject *places, *expect, *fallback, *ndarray, *empty, *u8, *f32;
    if (!PyArg_ParseTuple(args, "fifipnOOOOOOO:held_qdq", &qs, &qz, &dqs, &dqz, &is_signed,
                          &nargs, &places, &expect, &fallback, &ndarray, &empty, &u8, &f32))
        return NULL;
    if (!byte_code(is_signed, qz) || !byte_code(is_signed, dqz)) {
        PyErr_SetString(PyExc_ValueError, "held_qdq: a zero point does not fit");
        return NULL;
    }
    HeldQdq *obj = PyObject_GC_New(HeldQdq, &HeldQdqType);
    if (!obj) return NULL;
    obj->vectorcall = held_qdq_vectorcall;
    obj->qs = qs;
    obj->dqs = dqs;
    obj->z = (float)qz;
    obj->z2 = (float)dqz;
    obj->lo = is_signed ? -128.0f : 0.0f;
    obj->hi = is_signed ? 127.0f : 255.0f;
    if (held_call_init(&obj->call, places, expect, fallback, ndarray, empty, u8, f32, nargs, -1,
                       "held_qdq") < 0) {
        PyObject_GC_Del(obj); /* nothing held yet, not tracked */
        return NULL;
    }
    PyObject_GC_Track((PyObject *)obj);
    return (PyObject *)obj;
}

/* ---- a held dynamic-quantized MatMul ------------------------------------------------------
 *
 * `held_rows_scaled(...)` makes the `quick` call of a fusion_int8_matmul.IntegerMatMulScaled
 * (a MatMulInteger -> Cast -> Mul [-> Add] chain) whose product took gemm_rows: called
 * with the chain's inputs, it checks that B (and its zero point, and the bias) are the
 * objects it was made for, that A is a C-contiguous array of the byte type it was made
 * for with K columns, that A's zero point is one value of that type, and that the scale
 * is a float32 array of one value or of N values along its last axis (no more axes than
 * A: the Mul's result keeps the product's shape).  It then runs gemm_rows' product into
 * a new float32 array of A's rows and N columns, as int32, and scale_columns' pass over
 * it in place: the same steps, so the same bits, without the Python calls around them
 * (they cost about as much as a BERT-tiny layer's 128 x 128 x 128 product itself).  Any
 * other call goes to the fallback. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
    PyObject *columns; /* the packed B (bytes), kept */
    PyObject *bias_obj; /* NULL: no Add */
    Py_buffer bias;     /* N float32 */
    int bias_ndim;
    ColHeader h;
    Py_ssize_t a_at, za_at, scale_at; /* za_at -1: no zero point (0) */
    char fmt;                          /* A's buffer format: 'B' uint8, 'b' int8 */
} HeldRowsScaled;

/* The one byte value of a zero point `obj` of format `fmt` into *z: 1, else 0 (no error). */
static int held_zero_point(PyObject *obj, PyObject *ndarray, char fmt, int *z) {
    Py_buffer zb;
    if (!onnxviz_array_view(obj, ndarray, &zb, fmt, -1, NULL)) return 0;
    const int ok = zb.len == 1;
    if (ok) *z = fmt == 'b' ? (int)*(const int8_t *)zb.buf : (int)*(const uint8_t *)zb.buf;
    PyBuffer_Release(&zb);
    return ok;
}

static PyObject *held_rows_scaled_vectorcall(PyObject *obj, PyObject *const *args,
                                             size_t nargsf, PyObject *kwnames) {
    HeldRowsScaled *self = (HeldRowsScaled *)obj;
    const HeldCall *hc = &self->call;
    const ColHeader *h = &self->h;
    if (!held_call_takes(hc, args, nargsf, kwnames) || h->level != current_level) goto other;
    int za = 0;
    if (self->za_at >= 0 && !held_zero_point(args[self->za_at], hc->ndarray, self->fmt, &za))
        goto other;
    Py_buffer ab, sb;
    if (!onnxviz_array_view(args[self->a_at], hc->ndarray, &ab, self->fmt, -1, NULL)) goto other;
    if (ab.ndim < 2 || ab.ndim > 32 || ab.shape[ab.ndim - 1] != h->k || ab.len == 0 ||
        self->bias_ndim > ab.ndim) {
        PyBuffer_Release(&ab);
        goto other;
    }
    if (!onnxviz_array_view(args[self->scale_at], hc->ndarray, &sb, 'f', -1, NULL)) {
        PyBuffer_Release(&ab);
        goto other;
    }
    const Py_ssize_t n = h->n, m = ab.len / h->k;
    if (sb.ndim > ab.ndim || !(sb.len == 4 || (sb.len == 4 * n && sb.shape[sb.ndim - 1] == n)) ||
        m > (1 << 24) || m > PY_SSIZE_T_MAX / 4 / n) {
        PyBuffer_Release(&ab);
        PyBuffer_Release(&sb);
        goto other;
    }
    float *y, *scale_n = NULL;
    PyObject *out = held_new_rows(hc, &ab, n, &y);
    if (sb.len == 4 && n > 1 && y) {
        /* one scale for every column: scale_row reads one per column */
        scale_n = malloc((size_t)n * sizeof(float));
        if (scale_n == NULL) PyErr_NoMemory();
        else
            for (Py_ssize_t j = 0; j < n; j++) scale_n[j] = *(const float *)sb.buf;
    }
    if (!out || !y || (sb.len == 4 && n > 1 && !scale_n)) {
        Py_XDECREF(out);
        PyBuffer_Release(&ab);
        PyBuffer_Release(&sb);
        return NULL;
    }
    const float *scale = scale_n ? scale_n : (const float *)sb.buf;
    const float *bias = self->bias_obj ? (const float *)self->bias.buf : NULL;
    const char *cols = PyBytes_AS_STRING(self->columns);
    const ScaleRowFn row = scale_row_at_level();
    int status;
    Py_BEGIN_ALLOW_THREADS;
    /* the int32 product in the output's memory, then each value scaled where it lies */
    status = rows_product(h, cols, ab.buf, m, self->fmt == 'b', za, (int32_t *)y);
    if (status == 0)
        for (Py_ssize_t i = 0; i < m; i++)
            row((const int32_t *)y + i * n, n, scale, bias, y + i * n);
    Py_END_ALLOW_THREADS;
    free(scale_n);
    PyBuffer_Release(&ab);
    PyBuffer_Release(&sb);
    if (status != 0) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    return out;
other:
    return held_call_other(hc, args, nargsf, kwnames);
}

static void held_rows_scaled_release(HeldRowsScaled *self) {
    if (self->bias_obj) PyBuffer_Release(&self->bias);
    Py_CLEAR(self->bias_obj);
    Py_CLEAR(self->columns);
}

HELD_CALL_TYPE(HeldRowsScaled, HeldRowsScaledType, held_rows_scaled,
               "onnxviz.runtime.native._int8.HeldRowsScaled",
               "A dynamic-quantized MatMul's call (held_rows_scaled()).",
               held_rows_scaled_release)

static PyObject *py_held_rows_scaled(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *columns, *bias, *places, *expect, *fallback, *ndarray, *empty, *u8, *f32;
    int a_signed, bias_ndim;
    Py_ssize_t a_at, za_at, scale_at, nargs;
    if (!PyArg_ParseTuple(args, "SpOinnnnOOOOOOO:held_rows_scaled", &columns, &a_signed, &bias,
                          &bias_ndim, &a_at, &za_at, &scale_at, &nargs, &places, &expect,
                          &fallback, &ndarray, &empty, &u8, &f32))
        return NULL;
    ColHeader h;
    if (!columns_header(PyBytes_AS_STRING(columns), PyBytes_GET_SIZE(columns),
                        "held_rows_scaled", &h))
        return NULL;
    if (a_at < 0 || a_at >= nargs || za_at < -1 || za_at >= nargs || scale_at < 0 ||
        scale_at >= nargs || bias_ndim < 0) {
        PyErr_SetString(PyExc_ValueError, "held_rows_scaled: an argument place out of range");
        return NULL;
    }
    HeldRowsScaled *obj = PyObject_GC_New(HeldRowsScaled, &HeldRowsScaledType);
    if (!obj) return NULL;
    memset((char *)obj + sizeof(PyObject), 0, sizeof(HeldRowsScaled) - sizeof(PyObject));
    obj->vectorcall = held_rows_scaled_vectorcall;
    obj->columns = Py_NewRef(columns);
    obj->h = h;
    obj->a_at = a_at;
    obj->za_at = za_at;
    obj->scale_at = scale_at;
    obj->fmt = a_signed ? 'b' : 'B';
    obj->bias_ndim = bias_ndim;
    if (bias != Py_None) {
        if (onnxviz_get_floats(bias, &obj->bias, h.n, 1, 0, "bias") < 0) {
            held_rows_scaled_release(obj);
            PyObject_GC_Del(obj); /* not tracked */
            return NULL;
        }
        obj->bias_obj = Py_NewRef(bias);
    }
    if (held_call_init_at(&obj->call, places, expect, fallback, ndarray, empty, u8, f32, nargs,
                          -1, a_at, "held_rows_scaled") < 0) {
        held_rows_scaled_release(obj);
        PyObject_GC_Del(obj);
        return NULL;
    }
    PyObject_GC_Track((PyObject *)obj);
    return (PyObject *)obj;
}

/* ---- a held QDQ MatMul ---------------------------------------------------------------------
 *
 * `held_rows_qdq(...)` makes the `quick` call of a fusion_qdq_matmul.QdqMatMul kept for its
 * constants (`_Ready`): called with the chain's inputs, it checks that every constant is
 * the object it was made for (B and its scale and zero point, the pairs' parameters, A's
 * scale and zero point, the biases), and that A is C-contiguous codes of the byte type it
 * was made for with K columns (or, `from_float`, the float32 values A's DequantizeLinear
 * made, turned back into codes by QuantizeLinear's pass with A's scale and zero point, as
 * `_codes_back` does), with at least `then_rank` axes (exactly 2 for a Gemm).  It then
 * runs gemm_rows' product into a new float32 output as int32 and scale_columns_qdq's row
 * pass over it in place: `_again`'s steps, so its bits.  A NaN met (the nodes then run
 * one by one, as `_again` declines it) or any other call goes to the fallback. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
    PyObject *columns;
    ColHeader h;
    PyObject *held[3]; /* the column scales, the bias (or NULL), the second bias (or NULL) */
    Py_buffer views[3];
    ColumnsQdq p; /* its pointers into views */
    Py_ssize_t a_at;
    int then_rank, gemm, za, from_float;
    float sa;
    char fmt;
} HeldRowsQdq;

static PyObject *held_rows_qdq_vectorcall(PyObject *obj, PyObject *const *args,
                                          size_t nargsf, PyObject *kwnames) {
    HeldRowsQdq *self = (HeldRowsQdq *)obj;
    const HeldCall *hc = &self->call;
    const ColHeader *h = &self->h;
    if (!held_call_takes(hc, args, nargsf, kwnames) || h->level != current_level) goto other;
    Py_buffer ab;
    if (!onnxviz_array_view(args[self->a_at], hc->ndarray, &ab, self->from_float ? 'f' : self->fmt,
                            -1, NULL))
        goto other;
    if (ab.ndim < 2 || ab.ndim > 32 || ab.ndim < self->then_rank || (self->gemm && ab.ndim != 2) ||
        ab.shape[ab.ndim - 1] != h->k || ab.len == 0) {
        PyBuffer_Release(&ab);
        goto other;
    }
    const Py_ssize_t n = h->n, count = ab.len / ab.itemsize, m = count / h->k;
    if (m > (1 << 24) || m > PY_SSIZE_T_MAX / 4 / n) {
        PyBuffer_Release(&ab);
        goto other;
    }
    float *y;
    PyObject *out = held_new_rows(hc, &ab, n, &y);
    uint8_t *codes = NULL;
    if (out && y && self->from_float && !(codes = malloc((size_t)count))) PyErr_NoMemory();
    if (!out || !y || (self->from_float && !codes)) {
        Py_XDECREF(out);
        PyBuffer_Release(&ab);
        return NULL;
    }
    const int a_signed = self->fmt == 'b';
    const char *cols = PyBytes_AS_STRING(self->columns);
    int status = 0, nan = 0;
    const ScaleQdqRowFn row = scale_qdq_row_at_level();
    const QuantizeFn quantize = quantize_at_level();
    Py_BEGIN_ALLOW_THREADS;
    if (self->from_float) /* QuantizeLinear's float32 steps: the codes back */
        nan = quantize((const float *)ab.buf, codes, count, self->sa, (float)self->za,
                       a_signed ? -128.0f : 0.0f, a_signed ? 127.0f : 255.0f);
    if (!nan) {
        status = rows_product(h, cols, self->from_float ? codes : (const uint8_t *)ab.buf, m,
                              a_signed, self->za, (int32_t *)y);
        if (status == 0) /* each row's int32 sums turned into the pairs' floats in place */
            for (Py_ssize_t i = 0; i < m; i++)
                nan |= row((const int32_t *)y + i * n, n, &self->p, y + i * n);
    }
    Py_END_ALLOW_THREADS;
    free(codes);
    PyBuffer_Release(&ab);
    if (status != 0) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    if (nan) {
        Py_DECREF(out);
        goto other;
    }
    return out;
other:
    return held_call_other(hc, args, nargsf, kwnames);
}

static void held_rows_qdq_release(HeldRowsQdq *self) {
    for (int i = 0; i < 3; i++) {
        if (self->held[i]) PyBuffer_Release(&self->views[i]);
        Py_CLEAR(self->held[i]);
    }
    Py_CLEAR(self->columns);
}

HELD_CALL_TYPE(HeldRowsQdq, HeldRowsQdqType, held_rows_qdq,
               "onnxviz.runtime.native._int8.HeldRowsQdq",
               "A QDQ MatMul's call (held_rows_qdq()).", held_rows_qdq_release)

static PyObject *py_held_rows_qdq(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *columns, *scale, *bias, *bias2, *places, *expect, *fallback, *ndarray, *empty, *u8,
        *f32;
    int a_signed, za, from_float, is_signed, qz, dqz, signed2, qz2, dqz2, then_rank, gemm;
    float sa, qs, dqs, qs2, dqs2;
    Py_ssize_t a_at, nargs;
    if (!PyArg_ParseTuple(args, "SpipfOO(pfifi)O(pfifi)ipnnOOOOOOO:held_rows_qdq", &columns,
                          &a_signed, &za, &from_float, &sa, &scale, &bias, &is_signed, &qs, &qz,
                          &dqs, &dqz, &bias2, &signed2, &qs2, &qz2, &dqs2, &dqz2, &then_rank,
                          &gemm, &a_at, &nargs, &places, &expect, &fallback, &ndarray, &empty,
                          &u8, &f32))
        return NULL;
    ColHeader h;
    if (!columns_header(PyBytes_AS_STRING(columns), PyBytes_GET_SIZE(columns), "held_rows_qdq",
                        &h))
        return NULL;
    const float r = 1.0f / qs;
    if (!byte_code(a_signed, za) || !byte_code(is_signed, qz) || !byte_code(is_signed, dqz) ||
        (bias2 != Py_None && (!byte_code(signed2, qz2) || !byte_code(signed2, dqz2))) ||
        !isnormal(qs) || !isfinite(r) || r == 0.0f || a_at < 0 || a_at >= nargs ||
        then_rank < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "held_rows_qdq: a zero point, the output scale or a place out of range");
        return NULL;
    }
    HeldRowsQdq *obj = PyObject_GC_New(HeldRowsQdq, &HeldRowsQdqType);
    if (!obj) return NULL;
    memset((char *)obj + sizeof(PyObject), 0, sizeof(HeldRowsQdq) - sizeof(PyObject));
    obj->vectorcall = held_rows_qdq_vectorcall;
    obj->columns = Py_NewRef(columns);
    obj->h = h;
    PyObject *arrays[3] = {scale, bias, bias2};
    static const char *names[3] = {"scale", "bias", "bias2"};
    for (int i = 0; i < 3; i++) {
        if (arrays[i] == Py_None) continue;
        if (onnxviz_get_floats(arrays[i], &obj->views[i], h.n, 1, 0, names[i]) < 0) {
            held_rows_qdq_release(obj);
            PyObject_GC_Del(obj); /* not tracked */
            return NULL;
        }
        obj->held[i] = Py_NewRef(arrays[i]);
    }
    if (!obj->held[0]) {
        held_rows_qdq_release(obj);
        PyObject_GC_Del(obj);
        PyErr_SetString(PyExc_ValueError, "held_rows_qdq: the column scales are needed");
        return NULL;
    }
    obj->p = columns_qdq(obj->views[0].buf, obj->held[1] ? obj->views[1].buf : NULL, is_signed,
                         r, qz, dqs, dqz, obj->held[2] ? obj->views[2].buf : NULL, signed2, qs2,
                         qz2, dqs2, dqz2);
    obj->a_at = a_at;
    obj->then_rank = then_rank;
    obj->gemm = gemm;
    obj->za = za;
    obj->from_float = from_float;
    obj->sa = sa;
    obj->fmt = a_signed ? 'b' : 'B';
    if (held_call_init_at(&obj->call, places, expect, fallback, ndarray, empty, u8, f32, nargs,
                          -1, a_at, "held_rows_qdq") < 0) {
        held_rows_qdq_release(obj);
        PyObject_GC_Del(obj);
        return NULL;
    }
    PyObject_GC_Track((PyObject *)obj);
    return (PyObject *)obj;
}

static PyMethodDef methods[] = {
    {"set_level", py_set_level, METH_VARARGS, "Pick the code path (0 generic .. 3 VNNI)."},
    {"level", py_level, METH_NOARGS, "The code path in use."},
    {"max_k", py_max_k, METH_NOARGS, "The largest K the products accept (exact below it)."},
    {"pack_weights", py_pack_weights, METH_VARARGS,
     "pack_weights(w, M, K, w_signed, zw) -> bytes: W[M, K] (int8 or uint8) with one int32 "
     "zero point per row, in this level's layout."},
    {"gemm", py_gemm, METH_VARARGS,
     "gemm(packed, x, rowoff, colstride, N, x_signed, zx, out): out[m, n] int32 = "
     "sum_k (W[m,k] - zw[m]) * (x[rowoff[k] + n*colstride] - zx), exactly."},
    {"pack_columns", py_pack_columns, METH_VARARGS,
     "pack_columns(b, K, N, b_signed, zb) -> bytes: the constant right operand B[K, N] "
     "(int8 or uint8, one zero point) of gemm_rows, in this level's layout."},
    {"weight_form", py_weight_form, METH_VARARGS,
     "weight_form(packed) -> (form, corrections): the layout pack_weights chose (\"int16\", "
     "\"quads\" at AVX2 or \"bytes\" at VNNI) and how many cut pairs the quads correct."},
    {"weight_quads_limit", py_weight_quads_limit, METH_NOARGS,
     "weight_quads_limit() -> n: pack_weights keeps W as quads (AVX2) while at most 1 in n of "
     "its values needs a correction."},
    {"quads_limit", py_quads_limit, METH_NOARGS,
     "quads_limit() -> n: pack_columns keeps B as quads while at most 1 in n of its values "
     "needs a correction."},
    {"column_form", py_column_form, METH_VARARGS,
     "column_form(columns) -> (form, corrections): the layout pack_columns chose (\"int16\", "
     "\"byte pairs\" or \"quads\") and how many cut pairs the quads correct."},
    {"gemm_rows", py_gemm_rows, METH_VARARGS,
     "gemm_rows(a, M, a_signed, za, columns, out): out[m, n] int32 = "
     "sum_k (A[m,k] - za) * (B[k,n] - zb), exactly, for A[M, K] row-major bytes."},
    {"rescale_qdq", py_rescale_qdq, METH_VARARGS,
     "rescale_qdq(acc, M, rows, width, keep, scale, bias, relu, signed, qs, qz, dqs, dqz, y) "
     "-> 0 or -1 (a scale, bias or 1/qs not finite): float32(acc[m,r,j]) * scale[m] + "
     "bias[m] for j < keep (float32 scale and bias, b'': none) [Relu], then QuantizeLinear "
     "(its division as a product by float32(1/qs)) -> DequantizeLinear, in float32 steps."},
    {"gemm_rescale", py_gemm_rescale, METH_VARARGS,
     "gemm_rescale(packed, x, rowoff, colstride, N, x_signed, zx, rows, width, keep, scale, "
     "bias, relu, signed, qs, qz, dqs, dqz, codes, y) -> 0 or -1 (as rescale_qdq): gemm's "
     "product of N = rows * width columns, rescaled block by block while in cache into y: "
     "rescale_q's bytes when codes, else rescale_qdq's floats."},
    {"interleave4", py_interleave4, METH_VARARGS,
     "interleave4(src, images, channels, plane, flip, dst): planes as groups of four "
     "channels, their bytes interleaved (^0x80 with flip), 0 for channels past the last."},
    {"interleave2", py_interleave2, METH_VARARGS,
     "interleave2(src, images, channels, plane, x_signed, zx, dst): planes as pairs of "
     "channels, int16 codes less zx (AVX2's gemm_rescale4)."},
    {"gemm_rescale4", py_gemm_rescale4, METH_VARARGS,
     "gemm_rescale4(packed, x4, rows4, N, x_signed, zx, rows, width, keep, scale, bias, relu, "
     "signed, qs, qz, dqs, dqz, codes, y) -> 0 or -1: gemm_rescale with X in interleave4's "
     "layout, k group q at word offset rows4[q]; VNNI level, no weight zero points."},
    {"rescale_q", py_rescale_q, METH_VARARGS,
     "rescale_q(acc, M, rows, width, keep, scale, bias, relu, signed, qs, qz, y) -> 0 or -1 "
     "(as rescale_qdq): rescale_qdq's value [Relu], quantized as there into bytes."},
    {"qdq", py_qdq, METH_VARARGS,
     "qdq(x, qs, qz, dqs, dqz, signed, out) -> 0 or -1 (NaN met): QuantizeLinear -> "
     "DequantizeLinear of float32 values in their float32 steps."},
    {"qdq_table", py_qdq_table, METH_VARARGS,
     "qdq_table(x, qs, qz, signed, table, out) -> 0 or -1 (NaN met): table[byte of "
     "QuantizeLinear(x)] (table: 256 float32 by the code's byte)."},
    {"quantize_layout", py_quantize_layout, METH_VARARGS,
     "quantize_layout(x, N, C, H, W, scale, zp, signed, pad_t, pad_l, s0, s1, ph_h, ph_w, "
     "length, fill, used, out) -> 0 or -1 (NaN met): x quantized into a conv's flat "
     "layout of stride phases, padded with fill."},
    {"bytes_layout", py_bytes_layout, METH_VARARGS,
     "bytes_layout(x, N, C, H, W, pad_t, pad_l, s0, s1, ph_h, ph_w, length, fill, used, out): "
     "8-bit x copied into a conv's flat layout of stride phases, padded with fill."},
    {"qadd", py_qadd, METH_VARARGS,
     "qadd(a, a_codes, a_signed, a_scale, a_zp, b, b_codes, b_signed, b_scale, b_zp, relu, "
     "signed, qs, qz, dqs, dqz, t_out, f_out) -> 0 or -1 (NaN met): DequantizeLinear of each "
     "8-bit input (a float32 one as it is), Add, [Relu], QuantizeLinear into t_out and, "
     "unless f_out is empty, DequantizeLinear into f_out, in the nodes' float32 steps."},
    {"max_pool_codes", py_max_pool_codes, METH_VARARGS,
     "max_pool_codes(x, planes, H, W, kh, kw, sh, sw, pad_t, pad_l, pad_b, pad_r, signed, y): "
     "MaxPool of 8-bit codes over NCHW planes (pads below the kernel, never counted)."},
    {"held_qdq", py_held_qdq, METH_VARARGS,
     "held_qdq(qs, qz, dqs, dqz, signed, nargs, places, expect, fallback, ndarray, empty, "
     "uint8, float32) -> a callable: f(*args) = qdq's pass of args[0] (float32, "
     "C-contiguous or channels-last) into a new array of its shape and layout, when "
     "args[places[i]] is expect[i] and no NaN is met; any other call is fallback(*args)."},
    {"held_rows_scaled", py_held_rows_scaled, METH_VARARGS,
     "held_rows_scaled(columns, a_signed, bias, bias_ndim, a_at, za_at, scale_at, nargs, "
     "places, expect, fallback, ndarray, empty, uint8, float32) -> a callable: f(*args) = "
     "float32(gemm_rows(args[a_at], za, columns)) * scale (+ bias) into a new float32 array "
     "of A's rows and N columns, za = args[za_at] (0 when za_at is -1), scale = "
     "args[scale_at] (one value or N along its last axis), when args[places[i]] is "
     "expect[i]; any other call is fallback(*args)."},
    {"held_rows_qdq", py_held_rows_qdq, METH_VARARGS,
     "held_rows_qdq(columns, a_signed, za, from_float, sa, scale, bias, (signed, qs, qz, dqs, "
     "dqz), bias2, (signed2, qs2, qz2, dqs2, dqz2), then_rank, gemm, a_at, nargs, places, "
     "expect, fallback, ndarray, empty, uint8, float32) -> a callable: f(*args) = "
     "scale_columns_qdq's pass over gemm_rows' product of args[a_at] (codes, or with "
     "from_float float32 values quantized back by sa and za) into a new float32 array, when "
     "args[places[i]] is expect[i] and no NaN is met; any other call is fallback(*args)."},
    {"scale_columns", py_scale_columns, METH_VARARGS,
     "scale_columns(acc, M, N, scale, bias, out): out[m, n] = float32(acc[m, n]) * "
     "scale[n] (+ bias[n]; bias b'': none) in float32 steps, no FMA."},
    {"scale_columns_qdq", py_scale_columns_qdq, METH_VARARGS,
     "scale_columns_qdq(acc, M, N, scale, bias, signed, qs, qz, dqs, dqz, out[, bias2, signed2, "
     "qs2, qz2, dqs2, dqz2]) -> 0 or -1 "
     "(NaN met, or qs not a normal float): scale_columns' values, then QuantizeLinear (its "
     "division as a product by float32(1/qs)) -> DequantizeLinear in float32 steps; with "
     "bias2 and the rest, then + bias2[n] and a second pair in qdq's steps."},
    {"dynamic_quantize", py_dynamic_quantize, METH_VARARGS,
     "dynamic_quantize(x, out) -> (status, scale, zero_point): DynamicQuantizeLinear of "
     "float32 x into uint8 out in the operator's float32 steps; status -1 (nothing "
     "written) when x holds a NaN, is all zeros or its range overflows."},
    {"quantize", py_quantize, METH_VARARGS,
     "quantize(x, scale, zp, signed, out) -> 0 or -1 (NaN met): QuantizeLinear's float32 "
     "steps into bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_int8", NULL, -1, methods};

PyMODINIT_FUNC PyInit__int8(void) {
    if (PyType_Ready(&HeldQdqType) < 0) return NULL;
    if (PyType_Ready(&HeldRowsScaledType) < 0) return NULL;
    if (PyType_Ready(&HeldRowsQdqType) < 0) return NULL;
    return PyModule_Create(&module);
}
