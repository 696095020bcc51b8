/* onnxviz.runtime.native._nbits8: com.microsoft MatMulNBits with 4-bit weights at
 * accuracy_level 4, where the model allows int8 activations (kernels/contrib_quant.py
 * says when the level applies and why):
 *
 *   qa[m, k] = rint(A[m, k] * (127 / amax))  int8, amax = max |A[m, .]| over k's block
 *   sa[m, b] = amax / 127                    float32, per row and block of K
 *   Y[m, n]  = sum_b sa[m, b] * scale[n, b] * (sum_{k in b} qa[m, k] * (code[n, k] - zp[n, b]))
 *
 * (+ bias[n]).  The sums of each block are integers and exact here; only the float32
 * combination of the blocks differs from runtime/nbits_accuracy.py's emulate_level4 (the
 * reference, float64), by rounding.  A row holding a NaN or an infinity has no int8 form:
 * its outputs are NaN.
 *
 * Rounding is the definition's: 127 / amax and A * that, each one IEEE float32 operation
 * (-std=c11 does not contract them), then round-half-to-even (nearbyintf in the default
 * rounding mode).  The rows are quantized once per call; each lies afterwards in chunks of
 * 64 elements: the 32 even-indexed ones, then the 32 odd-indexed ones, the order in which
 * one 32-byte load of B splits into low and high nibbles (byte i holds elements 2i and
 * 2i+1 of its chunk).  So the weights are never reordered.
 *
 * Level 0 is plain C, block by block.  From level 1 (AVX2, also on AVX-512 CPUs) a chunk of
 * 64 weights per column is: load, two masks and a shift; per row two vpmaddubsw (code
 * 0..15 times int8: pairs at most 3810, no int16 saturation), an int16 add (at most 7620),
 * a vpmaddwd by ones (int32 lanes of 8 elements each), a convert and one FMA with the
 * lanes' scales (sa * scale of each lane's block).  The zero points come in once per
 * column as sum_b zp * scale * sa * sum_{k in b} qa (the row sums are made with the int8
 * form), never per weight.  Compared with the float kernel (_nbits.c: convert, subtract,
 * multiply and FMA per 8 weights) this is about 12 instructions per 64 weights: a decode
 * step reads half a byte per weight and is bound by memory again. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if ONNXVIZ_X86
#include <immintrin.h>
#endif

static int level = 0;
ONNXVIZ_LEVEL_FUNCTIONS

#ifndef NB8_PREFETCH
#define NB8_PREFETCH 2
#endif

enum { CHUNK = 64, LANES = 8 }; /* elements per chunk; int32 lanes of a chunk, 8 each */

typedef struct {
    const float *a;       /* [M, K] */
    const uint8_t *b;     /* [N, kb, bs / 2] */
    const float *scales;  /* [N, kb] */
    const uint8_t *zp8;   /* [N, zp_row] packed 4-bit, or NULL: the midpoint 8 */
    const float *bias;    /* [N], or NULL */
    float *y;             /* [M, N] */
    int64_t M, K, N, bs, kb, zp_row;
    int64_t chunks;       /* chunks of 64 in kb * bs, the last one maybe partial */
    int64_t full;         /* whole chunks */
    int8_t *qa;           /* [M, chunks, 64]: even elements, then odd ones */
    float *lane_sa;       /* [M, chunks, 8]: sa of each lane's block (0 past kb) */
    float *row_terms;     /* [M, kb]: sa * sum of the block's qa */
    float *sa;            /* [M, kb] */
    unsigned char *bad;   /* [M]: the row holds a NaN or an infinity */
} job_t;

/* ---- the int8 rows (every level) ----------------------------------------------------- */

static void quantize_rows(const job_t *j) {
    const int64_t K = j->K, bs = j->bs, kb = j->kb;
    for (int64_t m = 0; m < j->M; m++) {
        const float *a = j->a + m * K;
        int8_t *q = j->qa + m * j->chunks * CHUNK;
        float *sa = j->sa + m * kb, *terms = j->row_terms + m * kb;
        float *lanes = j->lane_sa + m * j->chunks * LANES;
        memset(q, 0, (size_t)(j->chunks * CHUNK));
        memset(lanes, 0, (size_t)(j->chunks * LANES) * sizeof(float));
        unsigned char bad = 0;
        for (int64_t blk = 0; blk < kb; blk++) {
            const int64_t k0 = blk * bs, k1 = k0 + bs < K ? k0 + bs : K;
            float amax = 0.0f;
            for (int64_t k = k0; k < k1; k++) {
                const float v = fabsf(a[k]);
                bad |= !isfinite(v);
                amax = v > amax ? v : amax;
            }
            const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
            int32_t sum = 0;
            for (int64_t k = k0; k < k1; k++) {
                float r = nearbyintf(a[k] * inverse);
                r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r; /* NaN rows end NaN */
                const int8_t v = (int8_t)(int32_t)(r == r ? r : 0.0f);
                sum += v;
                const int64_t c = k / CHUNK, e = k % CHUNK;
                q[c * CHUNK + (e & 1) * (CHUNK / 2) + e / 2] = v;
            }
            sa[blk] = amax / 127.0f;
            terms[blk] = sa[blk] * (float)sum;
        }
        for (int64_t c = 0; c < j->chunks; c++)
            for (int t = 0; t < LANES; t++) {
                const int64_t blk = (c * CHUNK + t * (CHUNK / LANES)) / bs;
                lanes[c * LANES + t] = blk < kb ? sa[blk] : 0.0f;
            }
        j->bad[m] = bad;
    }
}

static inline unsigned zero_point(const job_t *j, int64_t n, int64_t blk) {
    if (!j->zp8) return 8u;
    return (j->zp8[n * j->zp_row + blk / 2] >> (4 * (blk & 1))) & 15u;
}

static inline void store(const job_t *j, int64_t m, int64_t n, float v) {
    if (j->bias) v += j->bias[n];
    j->y[m * j->N + n] = j->bad[m] ? NAN : v;
}

/* ---- level 0: plain C ---------------------------------------------------------------- */

static void run_generic(const job_t *j) {
    const int64_t bs = j->bs, kb = j->kb, blob = bs / 2;
    for (int64_t n = 0; n < j->N; n++) {
        const uint8_t *col = j->b + n * kb * blob;
        const float *sc = j->scales + n * kb;
        for (int64_t m = 0; m < j->M; m++) {
            const int8_t *q = j->qa + m * j->chunks * CHUNK;
            const float *sa = j->sa + m * kb;
            float acc = 0.0f;
            for (int64_t blk = 0; blk < kb; blk++) {
                int32_t dot = 0, sum = 0;
                for (int64_t k = blk * bs; k < (blk + 1) * bs; k++) {
                    const int64_t c = k / CHUNK, e = k % CHUNK;
                    const int32_t v = q[c * CHUNK + (e & 1) * (CHUNK / 2) + e / 2];
                    const int32_t code = (col[k / 2] >> (4 * (k & 1))) & 15;
                    dot += v * code;
                    sum += v;
                }
                const int32_t exact = dot - (int32_t)zero_point(j, n, blk) * sum;
                acc += (float)exact * (sa[blk] * sc[blk]);
            }
            store(j, m, n, acc);
        }
    }
}

#if ONNXVIZ_X86

/* ---- level 1: AVX2 ------------------------------------------------------------------- */

#define T_AVX2 __attribute__((target("avx2,fma")))
#define INL_AVX2 static inline __attribute__((always_inline, target("avx2,fma")))

INL_AVX2 float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The scales of a chunk's 8 lanes for one column: s points at the block of its first
 * lane; a block spans 2 lanes (BS 16), 4 (BS 32) or all of them. */
INL_AVX2 __m256 lane_scales(const float *s, const int BS) {
    if (BS >= CHUNK) return _mm256_broadcast_ss(s);
    if (BS == 32)
        return _mm256_permutevar8x32_ps(_mm256_castpd_ps(_mm256_broadcast_sd((const double *)s)),
                                        _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(s)),
                                    _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

/* acc[m] -= zp[n, b] * scale[n, b] * row_terms[m, b] over the blocks b, for MT rows (the
 * lanes are summed afterwards, so any lane takes any block); *tail gets the blocks past
 * the last 8 as floats. */
INL_AVX2 void zero_point_terms(const job_t *j, int64_t n, int64_t m0, const int MT,
                               __m256 *acc, float *tail) {
    const int64_t kb = j->kb;
    const float *sc = j->scales + n * kb;
    const uint8_t *zrow = j->zp8 ? j->zp8 + n * j->zp_row : NULL;
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    int64_t blk = 0;
    for (; blk + 8 <= kb; blk += 8) {
        __m256 z = _mm256_set1_ps(8.0f);
        if (zrow) {
            int32_t x;
            memcpy(&x, zrow + blk / 2, 4);
            z = _mm256_cvtepi32_ps(_mm256_and_si256(
                _mm256_srlv_epi32(_mm256_set1_epi32(x), shifts), _mm256_set1_epi32(15)));
        }
        const __m256 zs = _mm256_mul_ps(z, _mm256_loadu_ps(sc + blk));
        for (int m = 0; m < MT; m++)
            acc[m] = _mm256_fnmadd_ps(zs, _mm256_loadu_ps(j->row_terms + (m0 + m) * kb + blk),
                                      acc[m]);
    }
    for (int m = 0; m < MT; m++) {
        float s = 0.0f;
        for (int64_t b = blk; b < kb; b++)
            s += (float)zero_point(j, n, b) * sc[b] * j->row_terms[(m0 + m) * kb + b];
        tail[m] = s;
    }
}

/* One chunk of one column (its 32 bytes w, its lanes' scales s) into MT rows' sums. */
INL_AVX2 void chunk_step(__m256 *acc, __m256i w, __m256 s, const int8_t *q, int64_t qstride,
                         const float *lanes, int64_t lstride, const int MT) {
    const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const __m256i lo = _mm256_and_si256(w, low);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low);
    for (int m = 0; m < MT; m++) {
        const __m256i even = _mm256_loadu_si256((const __m256i *)(q + m * qstride));
        const __m256i odd = _mm256_loadu_si256((const __m256i *)(q + m * qstride + CHUNK / 2));
        const __m256i pairs =
            _mm256_add_epi16(_mm256_maddubs_epi16(lo, even), _mm256_maddubs_epi16(hi, odd));
        const __m256 dots = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        const __m256 scale = _mm256_mul_ps(s, _mm256_loadu_ps(lanes + m * lstride));
        acc[m] = _mm256_fmadd_ps(dots, scale, acc[m]);
    }
}

/* Columns n0..n0+NT times rows m0..m0+MT. */
INL_AVX2 void tile_avx2(const job_t *j, int64_t n0, int64_t m0, const int NT, const int MT,
                        const int BS) {
    const int64_t bs = BS >= CHUNK ? j->bs : BS; /* BS 64 stands for every block of 64 up */
    const int64_t kb = j->kb, row = kb * (bs / 2), per_chunk = CHUNK / BS;
    const int shift = __builtin_ctzll((unsigned long long)bs) - 6; /* chunk -> block, BS 64 */
    const int8_t *qa = j->qa + m0 * j->chunks * CHUNK;
    const float *lanes = j->lane_sa + m0 * j->chunks * LANES;
    const int64_t qstride = j->chunks * CHUNK, lstride = j->chunks * LANES;
    const uint8_t *col[4];
    const float *sc[4];
    __m256 acc[4][4];
    for (int t = 0; t < NT; t++) {
        for (int m = 0; m < MT; m++) acc[t][m] = _mm256_setzero_ps();
        col[t] = j->b + (n0 + t) * row;
        sc[t] = j->scales + (n0 + t) * kb;
    }
#if NB8_PREFETCH
    const int64_t ahead = NB8_PREFETCH * NT * row;
#endif
    const int64_t full = j->full;
    for (int64_t c = 0; c < full; c++) {
        for (int t = 0; t < NT; t++) {
            const uint8_t *src = col[t] + c * (CHUNK / 2);
#if NB8_PREFETCH
            _mm_prefetch((const char *)src + ahead, _MM_HINT_T0);
#endif
            const __m256i w = _mm256_loadu_si256((const __m256i *)src);
            const __m256 s = lane_scales(sc[t] + (BS >= CHUNK ? c >> shift : c * per_chunk), BS);
            chunk_step(acc[t], w, s, qa + c * CHUNK, qstride, lanes + c * LANES, lstride, MT);
        }
    }
    if (full < j->chunks) { /* the partial last chunk (blocks of 16 or 32): then zeros */
        const int64_t c = full;
        for (int t = 0; t < NT; t++) {
            uint8_t bytes[CHUNK / 2] = {0};
            float blocks[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            memcpy(bytes, col[t] + c * (CHUNK / 2), (size_t)(row - c * (CHUNK / 2)));
            memcpy(blocks, sc[t] + c * per_chunk, (size_t)(kb - c * per_chunk) * sizeof(float));
            const __m256i w = _mm256_loadu_si256((const __m256i *)bytes);
            chunk_step(acc[t], w, lane_scales(blocks, BS), qa + c * CHUNK, qstride,
                       lanes + c * LANES, lstride, MT);
        }
    }
    for (int t = 0; t < NT; t++) {
        float tail[4];
        zero_point_terms(j, n0 + t, m0, MT, acc[t], tail);
        for (int m = 0; m < MT; m++) store(j, m0 + m, n0 + t, hsum256(acc[t][m]) - tail[m]);
    }
}

INL_AVX2 void run_avx2_bs(const job_t *j, const int BS) {
    int64_t n0 = 0;
    /* a tile's columns stay in L1 while every group of rows reads them */
    for (; n0 + 4 <= j->N; n0 += 4) {
        int64_t m0 = 0;
        for (; m0 + 2 <= j->M; m0 += 2) tile_avx2(j, n0, m0, 4, 2, BS);
        if (m0 < j->M) tile_avx2(j, n0, m0, 4, 1, BS);
    }
    for (; n0 < j->N; n0++) {
        int64_t m0 = 0;
        for (; m0 + 4 <= j->M; m0 += 4) tile_avx2(j, n0, m0, 1, 4, BS);
        for (; m0 < j->M; m0++) tile_avx2(j, n0, m0, 1, 1, BS);
    }
}

static T_AVX2 void run_avx2(const job_t *j) {
    if (j->bs == 16)
        run_avx2_bs(j, 16);
    else if (j->bs == 32)
        run_avx2_bs(j, 32);
    else
        run_avx2_bs(j, 64); /* any block of 64 or more: one block per chunk */
}

#endif /* ONNXVIZ_X86 */

/* ---- the module ---------------------------------------------------------------------- */

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
    Py_ssize_t M, K, N, bs, zp_row, has_zp, has_bias;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*nnnnnnn:matmul", &a, &b, &sc, &zp, &bias, &out, &M,
                          &K, &N, &bs, &has_zp, &zp_row, &has_bias))
        return NULL;
    PyObject *result = NULL;
    job_t j;
    memset(&j, 0, sizeof j);
    const int64_t limit = (int64_t)1 << 28; /* every product below fits in int64 */
    if (M < 0 || K < 1 || N < 1 || M >= limit || K >= limit || N >= limit) {
        PyErr_SetString(PyExc_ValueError, "M, K, N out of range");
        goto done;
    }
    /* int32 block sums: 127 * 15 * bs stays far below 2^31 up to this size */
    if (bs < 16 || bs > (1 << 16) || (bs & (bs - 1))) {
        PyErr_SetString(PyExc_ValueError, "block_size must be a power of two, 16 to 65536");
        goto done;
    }
    j.M = M, j.K = K, j.N = N, j.bs = bs;
    j.kb = (K + bs - 1) / bs;
    j.chunks = (j.kb * bs + CHUNK - 1) / CHUNK;
    j.full = j.kb * bs / CHUNK;
    if (check(&a, M * K, 4, "A") || check(&b, N * j.kb * (bs / 2), 1, "B") ||
        check(&sc, N * j.kb, 4, "scales") || check(&out, M * N, 4, "Y"))
        goto done;
    if (has_zp) {
        if (zp_row < 1 || zp_row >= limit || zp_row * 2 < j.kb) {
            PyErr_SetString(PyExc_ValueError, "zero point rows are too short for K's blocks");
            goto done;
        }
        if (check(&zp, N * zp_row, 1, "zero_points")) goto done;
        j.zp8 = (const uint8_t *)zp.buf;
        j.zp_row = zp_row;
    }
    if (has_bias) {
        if (check(&bias, N, 4, "bias")) goto done;
        j.bias = (const float *)bias.buf;
    }
    j.a = (const float *)a.buf;
    j.b = (const uint8_t *)b.buf;
    j.scales = (const float *)sc.buf;
    j.y = (float *)out.buf;
    int failed = 0;
    if (M > 0) {
        Py_BEGIN_ALLOW_THREADS;
        j.qa = (int8_t *)aligned_alloc(64, (size_t)(M * j.chunks * CHUNK));
        j.lane_sa = (float *)malloc((size_t)(M * j.chunks * LANES) * sizeof(float));
        j.row_terms = (float *)malloc((size_t)(M * j.kb) * sizeof(float));
        j.sa = (float *)malloc((size_t)(M * j.kb) * sizeof(float));
        j.bad = (unsigned char *)malloc((size_t)M);
        if (j.qa && j.lane_sa && j.row_terms && j.sa && j.bad) {
            quantize_rows(&j);
#if ONNXVIZ_X86
            if (level >= 1)
                run_avx2(&j);
            else
#endif
                run_generic(&j);
        } else {
            failed = 1;
        }
        free(j.qa);
        free(j.lane_sa);
        free(j.row_terms);
        free(j.sa);
        free(j.bad);
        Py_END_ALLOW_THREADS;
    }
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

static PyMethodDef methods[] = {
    {"matmul", py_matmul, METH_VARARGS,
     "matmul(a, b, scales, zero_points, bias, out, M, K, N, block_size, has_zero_points, "
     "zero_point_row, has_bias): out = MatMulNBits of 4-bit weights with A quantized to int8 "
     "per block (accuracy_level 4)."},
    ONNXVIZ_LEVEL_METHODS{NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nbits8", NULL, -1, methods};

PyMODINIT_FUNC PyInit__nbits8(void) { return PyModule_Create(&module); }
