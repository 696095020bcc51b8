/* onnxviz.runtime.native._nbits: com.microsoft MatMulNBits straight from the packed weights.
 *
 *   Y[m, n] = sum_k A[m, k] * W[n, k]  (+ bias[n])
 *   W[n, k] = (float(code) - zero_point) * scale     of k's block, in float32
 *
 * the op's definition (kernels/contrib_quant.py dequantize_nbits): each weight is the
 * definition's float32 value to the bit (the subtraction, then the product, each rounded
 * once: explicit intrinsics, and -std=c11 does not contract a*b+c into an FMA), only the
 * order of the float32 sums differs from numpy's product.  A decode step (a few rows of A)
 * is bound by memory: this reads each packed byte once per call, for all rows of A, where
 * the numpy path reads 4 bytes of float32 weight per weight.
 *
 * Layout (the op's): B is [N, k_blocks, blob] bytes, blob = block_size * bits / 8, the codes
 * of a byte from its least significant bits upward; scales [N, k_blocks] (float32 here, the
 * caller converts float16 once); zero points absent (the midpoint 2^(bits-1)), packed
 * uint8 [N, zp_row] (k_blocks codes per row, in the order of B's codes), or float32
 * [N, k_blocks].  The last block may run past K: its padding codes are never used.
 *
 * Levels: 0 plain C (each row of W dequantized into a buffer, then one dot product per
 * row of A); 1 AVX2+FMA and 2 AVX-512 read a chunk of 8 (16) bytes, widen it to int32
 * lanes and take its codes by shift and mask, so lane i of the j-th vector holds the code
 * of element per_byte*i + j; A's rows are permuted once per call into that order (a
 * product does not care in which order its terms come).  AVX-512 turns 2- and 4-bit codes
 * into weights by one permute from a 16-entry table of the block's values, AVX2 by
 * convert, subtract, multiply.  Level 3 (VNNI) runs level 2: the definition is a float
 * product, int8 dot products would change its numbers.  A chunk never straddles blocks:
 * when a block is smaller than a chunk, the next lower level runs (contrib_quant's
 * native_max_rows follows the same rule).  From set_gemm_rows rows of A on, level 2
 * dequantizes 4 rows of W per pass into an L1 buffer and multiplies every 4 rows of A by
 * it (gemm_512_bits); below, it decodes in registers for each tile of A's rows.  Each
 * packed byte comes from memory once per call either way. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define NB_X86 1
#include <immintrin.h>

#include "avx2_lanes.h"
#else
#define NB_X86 0
#endif

#ifndef NB_PREFETCH
#define NB_PREFETCH 2
#endif

typedef struct {
    const float *a;      /* [M, K] */
    float *ap;           /* [M, kf]: A's rows in the SIMD code order (levels 1-2) */
    float *zs;           /* [4, kb]: the zero points of a tile's rows, as floats */
    float *mid;          /* [kb]: the midpoint, for weights without zero points */
    float *wt;           /* [4, NB_KC or a block]: dequantized rows (level 2, many rows of A) */
    const uint8_t *b;    /* [N, kb, blob] */
    const float *scales; /* [N, kb] */
    const uint8_t *zp8;  /* [N, zp_row] packed, or NULL */
    const float *zpf;    /* [N, kb], or NULL */
    const float *bias;   /* [N], or NULL */
    float *y;            /* [M, N] */
    int64_t M, K, N, kb, bs, bits, blob, zp_row;
    int64_t kfb; /* whole blocks inside K */
    int64_t kf;  /* kfb * bs */
} job_t;

static int g_level = 0;
/* Rows of A from which level 2 dequantizes 4 rows of W at a time into a buffer (gemm)
 * instead of decoding in registers for every 4 rows of A (set_gemm_rows; measured). */
static int64_t g_gemm_rows = 5;


/* The helpers below are forced inline into every level's code: compiled on their own they
 * are legacy SSE (no -mavx for the file), and calling SSE code with the AVX-512 upper
 * halves dirty costs a state transition each way (no vzeroupper before such a call).
 * tile_512 called tail_dot and zero_point_row out of line, 8 times per tile: 600 ns per
 * 4 rows of W, four fifths of a decode step's MatMulNBits on a Sapphire Rapids core. */
#define NB_HELPER static inline __attribute__((always_inline))

NB_HELPER float zero_point(const job_t *j, int64_t n, int64_t blk) {
    if (j->zpf) return j->zpf[n * j->kb + blk];
    if (j->zp8) {
        int64_t bit = blk * j->bits;
        unsigned byte = j->zp8[n * j->zp_row + bit / 8];
        return (float)((byte >> (bit % 8)) & ((1u << j->bits) - 1u));
    }
    return (float)(1 << (j->bits - 1));
}

/* The zero points of row n's whole blocks as floats: float ones as they are, the
 * midpoint row (made once per call) when there are none, packed ones unpacked into dst
 * (once per tile, not per block: locals, so the loop does not reload the job). */
NB_HELPER const float *zero_point_row(const job_t *j, int64_t n, float *restrict dst) {
    if (j->zpf) return j->zpf + n * j->kb;
    if (!j->zp8) return j->mid;
    const uint8_t *src = j->zp8 + n * j->zp_row;
    const int64_t kfb = j->kfb;
    const unsigned bits = (unsigned)j->bits, mask = (1u << bits) - 1u;
    for (int64_t blk = 0; blk < kfb; blk++) {
        const uint64_t bit = (uint64_t)blk * bits;
        dst[blk] = (float)((src[bit >> 3] >> (bit & 7)) & mask);
    }
    return dst;
}

NB_HELPER unsigned code_at(const job_t *j, int64_t n, int64_t k) {
    int64_t blk = k / j->bs, e = k % j->bs;
    int64_t bit = e * j->bits;
    unsigned byte = j->b[(n * j->kb + blk) * j->blob + bit / 8];
    return (byte >> (bit % 8)) & ((1u << j->bits) - 1u);
}

NB_HELPER float weight_at(const job_t *j, int64_t n, int64_t k) {
    int64_t blk = k / j->bs;
    float q = (float)code_at(j, n, k);
    float d = q - zero_point(j, n, blk);
    return d * j->scales[n * j->kb + blk];
}

/* The terms of the last, partial block (k from kf to K), for the SIMD levels. */
NB_HELPER float tail_dot(const job_t *j, int64_t m, int64_t n) {
    float s = 0.0f;
    for (int64_t k = j->kf; k < j->K; k++) s += j->a[m * j->K + k] * weight_at(j, n, k);
    return s;
}

NB_HELPER void store(const job_t *j, int64_t m, int64_t n, float v) {
    if (j->bias) v += j->bias[n];
    j->y[m * j->N + n] = v;
}

/* ---- level 0: plain C ---------------------------------------------------------------- */

static void run_generic(const job_t *j, float *wrow) {
    for (int64_t n = 0; n < j->N; n++) {
        for (int64_t k = 0; k < j->K; k++) wrow[k] = weight_at(j, n, k);
        for (int64_t m = 0; m < j->M; m++) {
            const float *a = j->a + m * j->K;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
            int64_t k = 0;
            for (; k + 4 <= j->K; k += 4) {
                s0 += a[k] * wrow[k];
                s1 += a[k + 1] * wrow[k + 1];
                s2 += a[k + 2] * wrow[k + 2];
                s3 += a[k + 3] * wrow[k + 3];
            }
            for (; k < j->K; k++) s0 += a[k] * wrow[k];
            store(j, m, n, (s0 + s1) + (s2 + s3));
        }
    }
}

/* A's whole blocks in the order of the SIMD codes: in each group of lanes*per_byte
 * elements, position jv*lanes + i holds element per_byte*i + jv. */
static void permute_a(const job_t *j, int64_t lanes) {
    int64_t per = 8 / j->bits, group = lanes * per;
    for (int64_t m = 0; m < j->M; m++) {
        const float *a = j->a + m * j->K;
        float *o = j->ap + m * j->kf;
        for (int64_t g = 0; g < j->kf; g += group)
            for (int64_t jv = 0; jv < per; jv++)
                for (int64_t i = 0; i < lanes; i++) o[g + jv * lanes + i] = a[g + per * i + jv];
    }
}

#if NB_X86

/* ---- level 1: AVX2 + FMA, chunks of 8 bytes ------------------------------------------ */

#define T_AVX2 __attribute__((target("avx2,fma")))
#define INL_AVX2 static inline __attribute__((always_inline, target("avx2,fma")))


/* Rows n0..n0+NT of W times rows m0..m0+MT of A. */
INL_AVX2 void tile_avx2(const job_t *j, int64_t n0, int64_t m0, const int NT, const int MT,
                       const int BITS) {
    const int64_t per = 8 / BITS, chunks = j->blob / 8, row = j->kb * j->blob;
    const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
    const uint8_t *bp[4];
    const float *zs[4], *sc[4];
    __m256 acc[4][4][2];
    for (int t = 0; t < NT; t++) {
        for (int m = 0; m < MT; m++) acc[t][m][0] = acc[t][m][1] = _mm256_setzero_ps();
        bp[t] = j->b + (n0 + t) * row;
        zs[t] = zero_point_row(j, n0 + t, j->zs + t * j->kb);
        sc[t] = j->scales + (n0 + t) * j->kb;
    }
    const float *ap = j->ap + m0 * j->kf;
    const int64_t ahead = NB_PREFETCH * NT * row;
    for (int64_t blk = 0; blk < j->kfb; blk++) {
        __m256 zv[4], sv[4];
        for (int t = 0; t < NT; t++) {
            zv[t] = _mm256_set1_ps(zs[t][blk]);
            sv[t] = _mm256_set1_ps(sc[t][blk]);
        }
        for (int64_t c = 0; c < chunks; c++) {
            __m256i raw[4];
            for (int t = 0; t < NT; t++) {
                _mm_prefetch((const char *)bp[t] + ahead, _MM_HINT_T0); /* as in tile_512 */
                raw[t] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)bp[t]));
                bp[t] += 8;
            }
            for (int64_t jv = 0; jv < per; jv++) {
                __m256 w[4];
                for (int t = 0; t < NT; t++) {
                    __m256i q = _mm256_and_si256(
                        _mm256_srli_epi32(raw[t], (int)(jv * BITS)), mask);
                    w[t] = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(q), zv[t]), sv[t]);
                }
                for (int m = 0; m < MT; m++) {
                    __m256 av = _mm256_loadu_ps(ap + m * j->kf + jv * 8);
                    for (int t = 0; t < NT; t++)
                        acc[t][m][jv & 1] = _mm256_fmadd_ps(av, w[t], acc[t][m][jv & 1]);
                }
            }
            ap += 8 * per;
        }
    }
    for (int t = 0; t < NT; t++)
        for (int m = 0; m < MT; m++) {
            float v = onnxviz_hsum256(_mm256_add_ps(acc[t][m][0], acc[t][m][1]));
            store(j, m0 + m, n0 + t, v + tail_dot(j, m0 + m, n0 + t));
        }
}

INL_AVX2 void run_avx2_bits(const job_t *j, const int BITS) {
    int64_t n0 = 0;
    /* an n-tile's packed rows stay in L1 while every m-tile reads them */
    for (; n0 + 2 <= j->N; n0 += 2) {
        int64_t m0 = 0;
        for (; m0 + 2 <= j->M; m0 += 2) tile_avx2(j, n0, m0, 2, 2, BITS);
        if (m0 < j->M) tile_avx2(j, n0, m0, 2, 1, BITS);
    }
    for (; n0 < j->N; n0++) {
        int64_t m0 = 0;
        for (; m0 + 4 <= j->M; m0 += 4) tile_avx2(j, n0, m0, 1, 4, BITS);
        for (; m0 < j->M; m0++) tile_avx2(j, n0, m0, 1, 1, BITS);
    }
}

static T_AVX2 void run_avx2(const job_t *j) {
    if (j->bits == 4)
        run_avx2_bits(j, 4);
    else if (j->bits == 2)
        run_avx2_bits(j, 2);
    else
        run_avx2_bits(j, 8);
}

/* ---- level 2: AVX-512, chunks of 16 bytes -------------------------------------------- */

#define T_512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")))
#define INL_512 \
    static inline __attribute__((always_inline, target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")))

INL_512 void tile_512(const job_t *j, int64_t n0, int64_t m0, const int NT, const int MT,
                     const int BITS, const int CH) {
    /* CH: chunks per block when known at compile time (1: block 32 at 4 bits), else 0 */
    const int64_t per = 8 / BITS, chunks = CH ? CH : j->blob / 16, row = j->kb * j->blob;
    const int table = BITS < 8;
    /* vpermps reads the low 4 bits of each index: entry i of a table is the weight of
     * code i & mask, so a code needs no masking after its shift */
    const __m512 iota =
        BITS == 2 ? _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3)
                  : _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* without zero points the codes' offsets are one constant row: one product a block */
    const int mid = !j->zp8 && !j->zpf;
    const __m512 centred = _mm512_sub_ps(iota, _mm512_set1_ps((float)(1 << (BITS - 1))));
    const uint8_t *bp[4];
    const float *zs[4], *sc[4];
    __m512 acc[4][4][2];
    for (int t = 0; t < NT; t++) {
        for (int m = 0; m < MT; m++) acc[t][m][0] = acc[t][m][1] = _mm512_setzero_ps();
        bp[t] = j->b + (n0 + t) * row;
        zs[t] = zero_point_row(j, n0 + t, j->zs + t * j->kb);
        sc[t] = j->scales + (n0 + t) * j->kb;
    }
    const float *ap = j->ap + m0 * j->kf;
    const int64_t ahead = NB_PREFETCH * NT * row;
    for (int64_t blk = 0; blk < j->kfb; blk++) {
        __m512 zv[4], sv[4], tab[4];
        for (int t = 0; t < NT; t++) {
            zv[t] = _mm512_set1_ps(zs[t][blk]);
            sv[t] = _mm512_set1_ps(sc[t][blk]);
            /* the block's weight for each code: the definition's two roundings */
            if (!table)
                tab[t] = zv[t];
            else if (mid)
                tab[t] = _mm512_mul_ps(centred, sv[t]);
            else
                tab[t] = _mm512_mul_ps(_mm512_sub_ps(iota, zv[t]), sv[t]);
        }
        for (int64_t c = 0; c < chunks; c++) {
            __m512i raw[4];
            for (int t = 0; t < NT; t++) {
                /* each row of a tile is a short stream (K/2 bytes): the hardware
                 * prefetcher would start over on each, so ask for the same bytes of the
                 * tile NB_PREFETCH tiles ahead (a prefetch never faults, past the end
                 * too) */
                _mm_prefetch((const char *)bp[t] + ahead, _MM_HINT_T0);
                raw[t] = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)bp[t]));
                bp[t] += 16;
            }
            for (int64_t jv = 0; jv < per; jv++) {
                __m512 w[4];
                for (int t = 0; t < NT; t++) {
                    if (table) {
                        __m512i q =
                            jv ? _mm512_srli_epi32(raw[t], (unsigned)(jv * BITS)) : raw[t];
                        w[t] = _mm512_permutexvar_ps(q, tab[t]);
                    } else {
                        w[t] = _mm512_mul_ps(
                            _mm512_sub_ps(_mm512_cvtepi32_ps(raw[t]), zv[t]), sv[t]);
                    }
                }
                for (int m = 0; m < MT; m++) {
                    __m512 av = _mm512_loadu_ps(ap + m * j->kf + jv * 16);
                    for (int t = 0; t < NT; t++)
                        acc[t][m][jv & 1] = _mm512_fmadd_ps(av, w[t], acc[t][m][jv & 1]);
                }
            }
            ap += 16 * per;
        }
    }
    for (int t = 0; t < NT; t++)
        for (int m = 0; m < MT; m++) {
            float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[t][m][0], acc[t][m][1]));
            store(j, m0 + m, n0 + t, v + tail_dot(j, m0 + m, n0 + t));
        }
}

INL_512 void run_512_bits(const job_t *j, const int BITS, const int CH) {
    int64_t n0 = 0;
    /* an n-tile's packed rows stay in L1 while every m-tile reads them */
    if (j->M == 1) {
        for (; n0 + 4 <= j->N; n0 += 4) tile_512(j, n0, 0, 4, 1, BITS, CH);
    }
    for (; n0 + 2 <= j->N; n0 += 2) {
        int64_t m0 = 0;
        for (; m0 + 4 <= j->M; m0 += 4) tile_512(j, n0, m0, 2, 4, BITS, CH);
        if (j->M - m0 == 3) tile_512(j, n0, m0, 2, 3, BITS, CH);
        if (j->M - m0 == 2) tile_512(j, n0, m0, 2, 2, BITS, CH);
        if (j->M - m0 == 1) tile_512(j, n0, m0, 2, 1, BITS, CH);
    }
    for (; n0 < j->N; n0++) {
        int64_t m0 = 0;
        for (; m0 + 4 <= j->M; m0 += 4) tile_512(j, n0, m0, 1, 4, BITS, CH);
        for (; m0 < j->M; m0++) tile_512(j, n0, m0, 1, 1, BITS, CH);
    }
}

/* More rows of A: 4 rows of W dequantized once per pass over NB_KC of K into a buffer that
 * stays in L1 (16 KB), then every 4 rows of A multiply it, 16 accumulators in registers (a
 * small GEMM; decoding in registers again for each 4 rows of A cost more than the
 * products).  The pass's sums add into Y, the last block's tail and the bias at the end. */
#ifndef NB_MR
#define NB_MR 4 /* rows of A a micro-kernel holds: 4 x NB_MR accumulators (6: slower) */
#endif
#ifndef NB_KC
#define NB_KC 1024
#endif

INL_512 void dequant_rows_512(const job_t *j, int64_t n0, int64_t blk0, int64_t blk1,
                              float *restrict wt, int64_t stride, const int BITS,
                              const int CH) {
    const int64_t per = 8 / BITS, chunks = CH ? CH : j->blob / 16, row = j->kb * j->blob;
    const int table = BITS < 8, mid = !j->zp8 && !j->zpf;
    const __m512 iota =
        BITS == 2 ? _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3)
                  : _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 centred = _mm512_sub_ps(iota, _mm512_set1_ps((float)(1 << (BITS - 1))));
    for (int t = 0; t < 4; t++) {
        const uint8_t *bp = j->b + (n0 + t) * row + blk0 * j->blob;
        const float *zs = zero_point_row(j, n0 + t, j->zs + t * j->kb);
        const float *sc = j->scales + (n0 + t) * j->kb;
        float *o = wt + t * stride;
        for (int64_t blk = blk0; blk < blk1; blk++) {
            const __m512 zv = _mm512_set1_ps(zs[blk]), sv = _mm512_set1_ps(sc[blk]);
            __m512 tab = zv;
            if (table) tab = mid ? _mm512_mul_ps(centred, sv) : _mm512_mul_ps(_mm512_sub_ps(iota, zv), sv);
            for (int64_t c = 0; c < chunks; c++) {
                const __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)bp));
                bp += 16;
                for (int64_t jv = 0; jv < per; jv++) {
                    __m512 w;
                    if (table)
                        w = _mm512_permutexvar_ps(
                            jv ? _mm512_srli_epi32(raw, (unsigned)(jv * BITS)) : raw, tab);
                    else
                        w = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(raw), zv), sv);
                    _mm512_storeu_ps(o, w);
                    o += 16;
                }
            }
        }
    }
}

/* Y[m0..m0+MT, n0..n0+4] += A's pass (len elements from k0) times the 4 buffered rows. */
INL_512 void gemm_micro_512(const job_t *j, const float *wt, int64_t stride, int64_t len,
                            int64_t n0, int64_t m0, int64_t k0, int first, const int MT) {
    __m512 acc[4][NB_MR];
    for (int t = 0; t < 4; t++)
        for (int m = 0; m < MT; m++) acc[t][m] = _mm512_setzero_ps();
    const float *ap = j->ap + m0 * j->kf + k0;
    for (int64_t k = 0; k < len; k += 16) {
        __m512 w[4];
        for (int t = 0; t < 4; t++) w[t] = _mm512_loadu_ps(wt + t * stride + k);
        for (int m = 0; m < MT; m++) {
            const __m512 av = _mm512_loadu_ps(ap + m * j->kf + k);
            for (int t = 0; t < 4; t++) acc[t][m] = _mm512_fmadd_ps(av, w[t], acc[t][m]);
        }
    }
    for (int t = 0; t < 4; t++)
        for (int m = 0; m < MT; m++) {
            float *y = j->y + (m0 + m) * j->N + n0 + t;
            const float v = _mm512_reduce_add_ps(acc[t][m]);
            *y = first ? v : *y + v;
        }
}

INL_512 int64_t gemm_512_bits(const job_t *j, const int BITS, const int CH) {
    const int64_t per_pass = j->bs >= NB_KC ? 1 : NB_KC / j->bs; /* blocks */
    const int64_t stride = per_pass * j->bs;
    int64_t n0 = 0;
    for (; n0 + 4 <= j->N; n0 += 4) {
        for (int64_t blk0 = 0; blk0 < j->kfb; blk0 += per_pass) {
            const int64_t blk1 = blk0 + per_pass < j->kfb ? blk0 + per_pass : j->kfb;
            dequant_rows_512(j, n0, blk0, blk1, j->wt, stride, BITS, CH);
            const int64_t len = (blk1 - blk0) * j->bs, k0 = blk0 * j->bs;
            const int first = blk0 == 0;
            int64_t m0 = 0;
            for (; m0 + NB_MR <= j->M; m0 += NB_MR)
                gemm_micro_512(j, j->wt, stride, len, n0, m0, k0, first, NB_MR);
            switch (j->M - m0) {
#if NB_MR > 5
            case 5: gemm_micro_512(j, j->wt, stride, len, n0, m0, k0, first, 5); break;
#endif
#if NB_MR > 4
            case 4: gemm_micro_512(j, j->wt, stride, len, n0, m0, k0, first, 4); break;
#endif
            case 3: gemm_micro_512(j, j->wt, stride, len, n0, m0, k0, first, 3); break;
            case 2: gemm_micro_512(j, j->wt, stride, len, n0, m0, k0, first, 2); break;
            case 1: gemm_micro_512(j, j->wt, stride, len, n0, m0, k0, first, 1); break;
            default: break;
            }
        }
        for (int64_t m = 0; m < j->M; m++)
            for (int t = 0; t < 4; t++)
                store(j, m, n0 + t, j->y[m * j->N + n0 + t] + tail_dot(j, m, n0 + t));
    }
    return n0; /* rows of W done; the rest (fewer than 4) go through the tiles */
}

INL_512 void run_512_gemm(const job_t *j, const int BITS, const int CH) {
    const int64_t done = gemm_512_bits(j, BITS, CH);
    for (int64_t n0 = done; n0 < j->N; n0++) {
        int64_t m0 = 0;
        for (; m0 + 4 <= j->M; m0 += 4) tile_512(j, n0, m0, 1, 4, BITS, CH);
        for (; m0 < j->M; m0++) tile_512(j, n0, m0, 1, 1, BITS, CH);
    }
}

/* Every (path, bits, one chunk) form its own function: the twelve inlined into run_512
 * made one 150 KB function that took gcc most of this file's compile time. */
#define RUN_512_FN(PATH, BITS, CH)                                                         \
    static T_512 __attribute__((noinline)) void run_512_##PATH##_##BITS##_##CH(            \
        const job_t *j) {                                                                  \
        run_512_##PATH(j, BITS, CH);                                                       \
    }
#define RUN_512_FNS(PATH)                                                                  \
    RUN_512_FN(PATH, 4, 1) RUN_512_FN(PATH, 4, 0) RUN_512_FN(PATH, 2, 1)                   \
    RUN_512_FN(PATH, 2, 0) RUN_512_FN(PATH, 8, 1) RUN_512_FN(PATH, 8, 0)
RUN_512_FNS(gemm)
RUN_512_FNS(bits)

static T_512 void run_512(const job_t *j) {
    const int one = j->blob == 16; /* one chunk a block: block 32 at 4 bits, 64 at 2, 16 at 8 */
    if (j->M >= g_gemm_rows && j->wt) {
        if (j->bits == 4)
            one ? run_512_gemm_4_1(j) : run_512_gemm_4_0(j);
        else if (j->bits == 2)
            one ? run_512_gemm_2_1(j) : run_512_gemm_2_0(j);
        else
            one ? run_512_gemm_8_1(j) : run_512_gemm_8_0(j);
        return;
    }
    if (j->bits == 4)
        one ? run_512_bits_4_1(j) : run_512_bits_4_0(j);
    else if (j->bits == 2)
        one ? run_512_bits_2_1(j) : run_512_bits_2_0(j);
    else
        one ? run_512_bits_8_1(j) : run_512_bits_8_0(j);
}

#endif /* NB_X86 */

/* The level that runs this call: the set level, lowered while a block is smaller than
 * that level's chunk. */
static int call_level(const job_t *j) {
    int level = g_level >= 2 ? 2 : g_level;
    if (level == 2 && j->blob % 16) level = 1;
    if (level == 1 && j->blob % 8) level = 0;
    if (j->kfb == 0) level = 0;
    return level;
}

static int check(Py_buffer *buf, int64_t items, int64_t itemsize, const char *what) {
    if ((int64_t)buf->len != items * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s has %zd bytes, expected %lld", what, buf->len,
                     (long long)(items * itemsize));
        return -1;
    }
    return 0;
}

static PyObject *py_matmul(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer a, b, sc, zp, bias, out;
    Py_ssize_t M, K, N, bs, bits, zp_kind, zp_row, has_bias;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*nnnnnnnn:matmul", &a, &b, &sc, &zp, &bias, &out, &M,
                          &K, &N, &bs, &bits, &zp_kind, &zp_row, &has_bias))
        return NULL;
    PyObject *result = NULL;
    job_t j;
    memset(&j, 0, sizeof j);
    const int64_t limit = (int64_t)1 << 28; /* every product below fits in int64 */
    if (M < 0 || K < 1 || N < 1 || M >= limit || K >= limit || N >= limit) {
        PyErr_SetString(PyExc_ValueError, "M, K, N out of range");
        goto done;
    }
    if (!(bits == 2 || bits == 4 || bits == 8)) {
        PyErr_SetString(PyExc_ValueError, "bits must be 2, 4 or 8");
        goto done;
    }
    if (bs < 16 || bs > (1 << 20) || (bs & (bs - 1))) {
        PyErr_SetString(PyExc_ValueError, "block_size must be a power of two >= 16");
        goto done;
    }
    if (zp_kind < 0 || zp_kind > 2) {
        PyErr_SetString(PyExc_ValueError, "zp_kind must be 0 (none), 1 (packed) or 2 (float)");
        goto done;
    }
    j.M = M, j.K = K, j.N = N, j.bs = bs, j.bits = bits;
    j.kb = (K + bs - 1) / bs;
    j.blob = bs * bits / 8;
    j.kfb = K / bs;
    j.kf = j.kfb * bs;
    if (check(&a, M * K, 4, "A") || check(&b, N * j.kb * j.blob, 1, "B") ||
        check(&sc, N * j.kb, 4, "scales") || check(&out, M * N, 4, "Y"))
        goto done;
    if (zp_kind == 1) {
        if (zp_row < 1 || zp_row >= limit || zp_row * 8 < j.kb * bits) {
            PyErr_SetString(PyExc_ValueError, "zero point rows are too short for K's blocks");
            goto done;
        }
        if (check(&zp, N * zp_row, 1, "zero_points")) goto done;
        j.zp8 = (const uint8_t *)zp.buf;
        j.zp_row = zp_row;
    } else if (zp_kind == 2) {
        if (check(&zp, N * j.kb, 4, "zero_points")) goto done;
        j.zpf = (const float *)zp.buf;
    }
    if (has_bias) {
        if (check(&bias, N, 4, "bias")) goto done;
        j.bias = (const float *)bias.buf;
    }
    j.a = (const float *)a.buf;
    j.b = (const uint8_t *)b.buf;
    j.scales = (const float *)sc.buf;
    j.y = (float *)out.buf;
    if (M == 0) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    int level = call_level(&j);
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS;
    if (level == 0) {
        float *wrow = (float *)malloc((size_t)K * sizeof(float));
        if (wrow) {
            run_generic(&j, wrow);
            free(wrow);
        } else {
            failed = 1;
        }
    }
#if NB_X86
    else {
        j.ap = (float *)malloc((size_t)(M * j.kf) * sizeof(float));
        j.zs = (float *)malloc((size_t)(4 * j.kb) * sizeof(float));
        j.mid = (float *)malloc((size_t)j.kb * sizeof(float));
        if (level == 2 && M >= g_gemm_rows) {
            const int64_t kc = bs >= NB_KC ? bs : NB_KC; /* NB_KC rounded up to a block */
            j.wt = (float *)malloc((size_t)(4 * kc) * sizeof(float)); /* NULL: the tiles run */
        }
        if (j.ap && j.zs && j.mid) {
            for (int64_t blk = 0; blk < j.kb; blk++) j.mid[blk] = (float)(1 << (bits - 1));
            permute_a(&j, level == 2 ? 16 : 8);
            if (level == 2)
                run_512(&j);
            else
                run_avx2(&j);
        } else {
            failed = 1;
        }
        free(j.ap);
        free(j.zs);
        free(j.mid);
        free(j.wt);
    }
#endif
    Py_END_ALLOW_THREADS;
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&sc);
    PyBuffer_Release(&zp);
    PyBuffer_Release(&bias);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *py_set_level(PyObject *self, PyObject *arg) {
    (void)self;
    long level = PyLong_AsLong(arg);
    if (level == -1 && PyErr_Occurred()) return NULL;
    if (level < 0) level = 0;
    int best = onnxviz_cpu_level();
    g_level = (int)(level < best ? level : best); /* never a level the CPU cannot run */
    return PyLong_FromLong(g_level);
}

static PyObject *py_set_gemm_rows(PyObject *self, PyObject *arg) {
    (void)self;
    long rows = PyLong_AsLong(arg);
    if (rows == -1 && PyErr_Occurred()) return NULL;
    long before = (long)g_gemm_rows;
    g_gemm_rows = rows < 1 ? 1 : rows;
    return PyLong_FromLong(before);
}

static PyObject *py_get_level(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(g_level);
}

static PyMethodDef methods[] = {
    {"matmul", py_matmul, METH_VARARGS,
     "matmul(a, b, scales, zero_points, bias, out, M, K, N, block_size, bits, zp_kind, "
     "zp_row, has_bias): out[M, N] = a[M, K] x dequantized(b)^T (+ bias). Buffers are "
     "contiguous: a, scales, float zero points, bias, out float32; b and packed zero points "
     "uint8.  zp_kind 0: none (midpoint), 1: packed uint8 [N, zp_row], 2: float32 [N, "
     "k_blocks].  Unused buffers may be b''."},
    {"set_level", py_set_level, METH_O,
     "set_level(n): run at level n (0 generic, 1 AVX2+FMA, 2 AVX-512, 3 VNNI = 2), capped at "
     "the CPU's; returns the level set."},
    {"level", py_get_level, METH_NOARGS, "The level set."},
    {"set_gemm_rows", py_set_gemm_rows, METH_O,
     "set_gemm_rows(n): from n rows of A on, level 2 dequantizes 4 rows of W at a time into "
     "a buffer and multiplies it (else: decoding in registers); returns the previous n."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nbits", NULL, -1, methods};

PyMODINIT_FUNC PyInit__nbits(void) { return PyModule_Create(&module); }
