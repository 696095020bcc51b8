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
 * rounding mode; vcvtps2dq at AVX2).  The rows are quantized once per call; each lies afterwards in chunks of
 * 64 elements: the 32 even-indexed ones, then the 32 odd-indexed ones, the order in which
 * one 32-byte load of B splits into low and high nibbles (byte i holds elements 2i and
 * 2i+1 of its chunk).  So the weights are never reordered.
 *
 * Level 0 is plain C, block by block.  From level 1 (AVX2, also on AVX-512 CPUs) a chunk of
 * 64 weights per column is: load, two masks and a shift; per row two vpmaddubsw (code
 * 0..15 times int8: pairs at most 3810, no int16 saturation), an int16 add (at most 7620),
 * a vpmaddwd by ones (int32 lanes of 8 elements each), a convert and one FMA with the
 * lanes' scales (sa * scale of each lane's block).  Packed zero points come in once per
 * column as sum_b zp * scale * sa * sum_{k in b} qa (the row sums are made with the int8
 * form), never per weight; without them the midpoint 8 comes off each lane's integer
 * dot (each lane's sum starts at -8 times its sum of qa, also made with the int8 form).
 * Compared with the float kernel (_nbits.c: convert, subtract, multiply and FMA per 8
 * weights) this is about 12 instructions per 64 weights: a decode step reads half a byte
 * per weight and is bound by memory again.
 *
 * Level 3 (AVX-512 VNNI, on 256-bit vectors) runs the same tiles (nbits8_tiles.h, built
 * once per level) with the integer dot as two vpdpbusd (codes as unsigned bytes times
 * int8, four products a lane): the same exact int32 lanes in place of the two vpmaddubsw,
 * the add and the vpmaddwd, so the same bits as level 1, with 4 vector operations per
 * row and chunk left of 7.  A Zen 4 core, one thread, K 2048: 1.6x level 1's speed at
 * 32 rows, 1.2x at 128, 1.35x at 4; the genai Llama prompts (bench_families) 1.27x ->
 * 0.93x (2k, 32 tokens) and 1.40x -> 0.91x (1k, 64 tokens) of onnxruntime's time.  Level
 * 2 (AVX-512 without VNNI) runs level 1. */
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

#include "avx2_lanes.h"
#endif

static int level = 0;
ONNXVIZ_LEVEL_FUNCTIONS

#ifndef NB8_PREFETCH
#define NB8_PREFETCH 2
#endif
/* A column-at-a-time tile reads its weights as one sequential stream and prefetches this
 * many bytes ahead in it.  For a few rows (a decode step, the weights streaming from
 * memory) that one stream ran at 33-37 G weights/s against 18 for four interleaved
 * columns (K 2048, N 32000-64000, one row; onnxruntime's node: 26). */
#ifndef NB8_STREAM_AHEAD
#define NB8_STREAM_AHEAD 4096
#endif
/* Up to this many rows, every tile is one column's (nbits8_tiles.h's run_bs). */
enum { FEW_ROWS = 4 };

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
    int32_t *lane_mid;    /* [M, chunks, 8]: -8 times the sum of each lane's qa (no zero points:
                           * the midpoint 8 comes off each lane's integer dot) */
    float *pad;           /* [chunks * 64]: a row padded with zeros (AVX2 quantizer) */
    int32_t *qi;          /* [chunks * 64]: its int32 steps */
    float *sa;            /* [M, kb] */
    unsigned char *bad;   /* [M]: the row holds a NaN or an infinity */
} job_t;

/* ---- the int8 rows (every level) ----------------------------------------------------- */

/* Level 0's int8 rows: qa in the chunk layout, sa and the bad rows (run_generic sums each
 * block itself). */
static void quantize_rows(const job_t *j) {
    const int64_t K = j->K, bs = j->bs, kb = j->kb;
    for (int64_t m = 0; m < j->M; m++) {
        const float *a = j->a + m * K;
        int8_t *q = j->qa + m * j->chunks * CHUNK;
        float *sa = j->sa + m * kb;
        memset(q, 0, (size_t)(j->chunks * CHUNK));
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
            for (int64_t k = k0; k < k1; k++) {
                float r = nearbyintf(a[k] * inverse);
                r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r; /* NaN rows end NaN */
                const int64_t c = k / CHUNK, e = k % CHUNK;
                q[c * CHUNK + (e & 1) * (CHUNK / 2) + e / 2] = (int8_t)(int32_t)(r == r ? r : 0.0f);
            }
            sa[blk] = amax / 127.0f;
        }
        j->bad[m] = bad;
    }
}

#if ONNXVIZ_X86
/* quantize_rows' numbers in 8-float vectors: the same IEEE operations (127 / amax, the
 * product, vcvtps2dq's round half to even in the default rounding mode), so every level
 * makes the same int8 rows.  `pad` is a chunk-padded float row, `qi` its int32 steps. */
static __attribute__((target("avx2,fma"))) void quantize_rows_avx2(const job_t *j) {
    const int64_t K = j->K, bs = j->bs, kb = j->kb, width = j->chunks * CHUNK;
    const int shift = __builtin_ctzll((unsigned long long)bs);
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    const __m256i top = _mm256_set1_epi32(127), bottom = _mm256_set1_epi32(-127);
    float *pad = j->pad;
    int32_t *qi = j->qi;
    for (int64_t m = 0; m < j->M; m++) {
        memcpy(pad, j->a + m * K, (size_t)K * sizeof(float));
        memset(pad + K, 0, (size_t)(width - K) * sizeof(float));
        float *sa = j->sa + m * kb, *terms = j->row_terms + m * kb;
        __m256 odd = _mm256_setzero_ps(); /* NaN or infinity seen: all ones */
        for (int64_t blk = 0; blk < kb; blk++) {
            const float *x = pad + blk * bs;
            __m256 vmax = _mm256_setzero_ps();
            for (int64_t k = 0; k < bs; k += 8) {
                const __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + k), magnitude);
                odd = _mm256_or_ps(odd, _mm256_cmp_ps(v, inf, _CMP_NLT_UQ));
                vmax = _mm256_max_ps(vmax, v);
            }
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_movehdup_ps(h));
            const float amax = _mm_cvtss_f32(h);
            const __m256 inverse = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
            __m256i sum = _mm256_setzero_si256();
            for (int64_t k = 0; k < bs; k += 8) {
                __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), inverse));
                q = _mm256_max_epi32(_mm256_min_epi32(q, top), bottom);
                sum = _mm256_add_epi32(sum, q);
                _mm256_storeu_si256((__m256i *)(qi + blk * bs + k), q);
            }
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            sa[blk] = amax / 127.0f;
            terms[blk] = sa[blk] * (float)_mm_cvtsi128_si32(s4);
        }
        for (int64_t k = kb * bs; k < width; k++) qi[k] = 0;
        int8_t *q = j->qa + m * width;
        float *lanes = j->lane_sa + m * j->chunks * LANES;
        int32_t *mid = j->lane_mid + m * j->chunks * LANES;
        for (int64_t c = 0; c < j->chunks; c++) {
            const int32_t *src = qi + c * CHUNK;
            for (int e = 0; e < CHUNK / 2; e++) {
                q[c * CHUNK + e] = (int8_t)src[2 * e];
                q[c * CHUNK + CHUNK / 2 + e] = (int8_t)src[2 * e + 1];
            }
            for (int t = 0; t < LANES; t++) {
                const int64_t blk = (c * CHUNK + t * (CHUNK / LANES)) >> shift;
                lanes[c * LANES + t] = blk < kb ? sa[blk] : 0.0f;
                int32_t lane = 0;
                for (int e = 0; e < 8; e++) lane += src[8 * t + e];
                mid[c * LANES + t] = -8 * lane;
            }
        }
        j->bad[m] = (unsigned char)(_mm256_movemask_ps(odd) != 0);
    }
}
#endif

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

#define NB8_NAME(f) f##_avx2
#define NB8_INL ONNXVIZ_INL_AVX2
#define NB8_T __attribute__((target("avx2,fma")))
#define NB8_VNNI 0
#include "nbits8_tiles.h"
#undef NB8_NAME
#undef NB8_INL
#undef NB8_T
#undef NB8_VNNI

/* ---- level 3: AVX-512 VNNI (256-bit vectors: AVX-512 VL) ----------------------------- */

#define NB8_VNNI_TARGET "avx2,fma,avx512f,avx512vl,avx512vnni"
#define NB8_NAME(f) f##_vnni
#define NB8_INL static inline __attribute__((always_inline, target(NB8_VNNI_TARGET)))
#define NB8_T __attribute__((target(NB8_VNNI_TARGET)))
#define NB8_VNNI 1
#include "nbits8_tiles.h"
#undef NB8_NAME
#undef NB8_INL
#undef NB8_T
#undef NB8_VNNI

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

/* The job's shape from (M, K, N, block size), checked: 0, or -1 with ValueError. */
static int job_shape(job_t *j, Py_ssize_t M, Py_ssize_t K, Py_ssize_t N, Py_ssize_t bs) {
    const int64_t limit = (int64_t)1 << 28; /* every product below fits in int64 */
    if (M < 0 || K < 1 || N < 1 || M >= limit || K >= limit || N >= limit) {
        PyErr_SetString(PyExc_ValueError, "M, K, N out of range");
        return -1;
    }
    /* int32 block sums: 127 * 15 * bs stays far below 2^31 up to this size */
    if (bs < 16 || bs > (1 << 16) || (bs & (bs - 1))) {
        PyErr_SetString(PyExc_ValueError, "block_size must be a power of two, 16 to 65536");
        return -1;
    }
    j->M = M, j->K = K, j->N = N, j->bs = bs;
    j->kb = (K + bs - 1) / bs;
    j->chunks = (j->kb * bs + CHUNK - 1) / CHUNK;
    j->full = j->kb * bs / CHUNK;
    return 0;
}

/* The weight's buffers into the job: 0, or -1 with ValueError. */
static int job_weights(job_t *j, Py_buffer *b, Py_buffer *sc, Py_buffer *zp, Py_ssize_t has_zp,
                       Py_ssize_t zp_row, Py_buffer *bias, Py_ssize_t has_bias) {
    if (check(b, j->N * j->kb * (j->bs / 2), 1, "B") || check(sc, j->N * j->kb, 4, "scales"))
        return -1;
    if (has_zp) {
        if (zp_row < 1 || zp_row >= ((int64_t)1 << 28) || zp_row * 2 < j->kb) {
            PyErr_SetString(PyExc_ValueError, "zero point rows are too short for K's blocks");
            return -1;
        }
        if (check(zp, j->N * zp_row, 1, "zero_points")) return -1;
        j->zp8 = (const uint8_t *)zp->buf;
        j->zp_row = zp_row;
    }
    if (has_bias) {
        if (check(bias, j->N, 4, "bias")) return -1;
        j->bias = (const float *)bias->buf;
    }
    j->b = (const uint8_t *)b->buf;
    j->scales = (const float *)sc->buf;
    return 0;
}

/* Quantizes the rows and multiplies (the GIL let go around it for a product of
 * `release` multiply-adds or more): 0, or -1 with MemoryError. */
static int job_run(job_t *j, int64_t release) {
    if (j->M == 0) return 0;
    const int64_t M = j->M;
    const int let_go = M * j->K * j->N >= release;
    PyThreadState *state = let_go ? PyEval_SaveThread() : NULL;
    /* one allocation for the rows' int8 form and its scales */
    const size_t q_bytes = (size_t)(M * j->chunks * CHUNK);
    const size_t floats = (size_t)(2 * M * j->chunks * LANES + 2 * M * j->kb +
                                   2 * j->chunks * CHUNK);
    char *work = (char *)malloc(q_bytes + floats * sizeof(float) + (size_t)M);
    if (work) {
        j->qa = (int8_t *)work; /* 64 elements a chunk: the floats after stay aligned */
        j->lane_sa = (float *)(work + q_bytes);
        j->lane_mid = (int32_t *)(j->lane_sa + M * j->chunks * LANES);
        j->row_terms = (float *)(j->lane_mid + M * j->chunks * LANES);
        j->sa = j->row_terms + M * j->kb;
        j->pad = j->sa + M * j->kb;
        j->qi = (int32_t *)(j->pad + j->chunks * CHUNK);
        j->bad = (unsigned char *)(j->qi + j->chunks * CHUNK);
#if ONNXVIZ_X86
        if (level >= 1) {
            quantize_rows_avx2(j);
            /* One row (a decode step): level 1's tiles, the same bits.  There the
             * weights' stream is the bound and the VNNI chunk, its two vpdpbusd in a
             * chain, fell behind it: Llama 2k's decode step 15.0-15.2 -> 13.0-13.7 ms on
             * a Zen 4 core (bench_nbits_level4's 1-row step 14.7 -> 13.9); from 2 rows
             * the VNNI tiles' fewer operations win (2 rows 19.4 against 20.7). */
            if (level >= 3 && M > 1)
                run_vnni(j);
            else
                run_avx2(j);
        } else
#endif
        {
            quantize_rows(j);
            run_generic(j);
        }
        free(work);
    }
    if (state) PyEval_RestoreThread(state);
    if (!work) {
        PyErr_NoMemory();
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
    if (job_shape(&j, M, K, N, bs) < 0 || check(&a, M * K, 4, "A") ||
        check(&out, M * N, 4, "Y") ||
        job_weights(&j, &b, &sc, &zp, has_zp, zp_row, &bias, has_bias) < 0)
        goto done;
    j.a = (const float *)a.buf;
    j.y = (float *)out.buf;
    if (job_run(&j, 0) < 0) goto done;
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    PyBuffer_Release(&sc);
    PyBuffer_Release(&zp);
    PyBuffer_Release(&bias);
    PyBuffer_Release(&out);
    return result;
}

/* ---- the held call: the product from the node loop ----------------------------------- */

/* A node's MatMulNBits by one constant weight, called as f(a, *expect) with the node's
 * inputs: a C-contiguous float32 ndarray a of K columns and up to max_rows rows, its
 * other inputs exactly the objects it was made with, is multiplied here into a new
 * array of a.shape[:-1] + (N,); any other call goes to the fallback (the Python call,
 * which gives the same numbers).  The tiny genai Llama's eleven products each spent
 * about as long in the Python call as in the product. */
typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    HeldCall call;
    job_t shape;           /* K, N, block size and the weight's buffers; no rows */
    Py_ssize_t max_rows;
    PyObject *objs[4];     /* b, scales, zero points, bias (the last two may be NULL) */
    Py_buffer views[4];
} HeldInt8;

static PyObject *held_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    HeldInt8 *self = (HeldInt8 *)obj;
    const HeldCall *h = &self->call;
    if (!held_call_takes(h, args, nargsf, kwnames)) goto other;
    Py_buffer ab;
    if (!onnxviz_array_view(args[0], h->ndarray, &ab, 'f', -1, NULL)) goto other;
    if (ab.ndim < 1 || ab.ndim > 8 || ab.shape[ab.ndim - 1] != self->shape.K ||
        ab.len / 4 / self->shape.K > self->max_rows) {
        PyBuffer_Release(&ab);
        goto other;
    }
    Py_ssize_t sizes[8];
    for (int i = 0; i < ab.ndim - 1; i++) sizes[i] = ab.shape[i];
    sizes[ab.ndim - 1] = self->shape.N;
    PyObject *out = onnxviz_new_array(h->empty, h->f32, ab.ndim, sizes);
    if (out) {
        Py_buffer ob;
        if (PyObject_GetBuffer(out, &ob, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            Py_CLEAR(out);
        } else {
            job_t j = self->shape;
            j.M = ab.len / 4 / self->shape.K;
            j.a = (const float *)ab.buf;
            j.y = (float *)ob.buf;
            if (job_run(&j, (int64_t)1 << 16) < 0) Py_CLEAR(out);
            PyBuffer_Release(&ob);
        }
    }
    PyBuffer_Release(&ab);
    return out;
other:
    return held_call_other(h, args, nargsf, kwnames);
}

static void held_release(HeldInt8 *self) {
    for (int i = 0; i < 4; i++) {
        if (self->objs[i]) PyBuffer_Release(&self->views[i]);
        Py_CLEAR(self->objs[i]);
    }
}

HELD_CALL_TYPE(HeldInt8, HeldInt8Type, held, "onnxviz.runtime.native._nbits8.HeldInt8",
               "A MatMulNBits at accuracy_level 4 by one constant weight (held()).",
               held_release)

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *bo, *so, *zo, *biaso, *expect, *fallback, *ndarray, *empty, *u8, *f32;
    Py_ssize_t K, N, bs, zp_row, max_rows;
    if (!PyArg_ParseTuple(args, "OOOOnnnnnOOOOOO:held", &bo, &so, &zo, &biaso, &K, &N, &bs,
                          &zp_row, &max_rows, &expect, &fallback, &ndarray, &empty, &u8, &f32))
        return NULL;
    job_t shape;
    memset(&shape, 0, sizeof shape);
    if (job_shape(&shape, 0, K, N, bs) < 0) return NULL;
    if (!PyTuple_Check(expect) || max_rows < 0) {
        PyErr_SetString(PyExc_ValueError, "held: expect must be a tuple, max_rows >= 0");
        return NULL;
    }
    const Py_ssize_t n_expect = PyTuple_GET_SIZE(expect);
    PyObject *places = PyTuple_New(n_expect);
    if (!places) return NULL;
    for (Py_ssize_t i = 0; i < n_expect; i++) {
        PyObject *at = PyLong_FromSsize_t(i + 1);
        if (!at) {
            Py_DECREF(places);
            return NULL;
        }
        PyTuple_SET_ITEM(places, i, at);
    }
    HeldInt8 *obj = PyObject_GC_New(HeldInt8, &HeldInt8Type);
    if (!obj) {
        Py_DECREF(places);
        return NULL;
    }
    memset((char *)obj + sizeof(PyObject), 0, sizeof(HeldInt8) - sizeof(PyObject));
    obj->vectorcall = held_vectorcall;
    const int rc = held_call_init(&obj->call, places, expect, fallback, ndarray, empty, u8, f32,
                                  n_expect + 1, -1, "held");
    Py_DECREF(places);
    if (rc < 0) {
        PyObject_GC_Del(obj); /* nothing held yet, not tracked */
        return NULL;
    }
    PyObject_GC_Track((PyObject *)obj);
    PyObject *given[4] = {bo, so, zo, biaso};
    for (int i = 0; i < 4; i++) {
        if (given[i] == Py_None) continue;
        if (PyObject_GetBuffer(given[i], &obj->views[i], PyBUF_C_CONTIGUOUS) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
        obj->objs[i] = Py_NewRef(given[i]);
    }
    if (!obj->objs[0] || !obj->objs[1]) {
        PyErr_SetString(PyExc_ValueError, "held: the weight and its scales are needed");
        Py_DECREF(obj);
        return NULL;
    }
    Py_buffer none;
    memset(&none, 0, sizeof none);
    if (job_weights(&shape, &obj->views[0], &obj->views[1], obj->objs[2] ? &obj->views[2] : &none,
                    obj->objs[2] != NULL, zp_row, obj->objs[3] ? &obj->views[3] : &none,
                    obj->objs[3] != NULL) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    obj->shape = shape;
    obj->max_rows = max_rows;
    return (PyObject *)obj;
}

static PyMethodDef methods[] = {
    {"held", py_held, METH_VARARGS,
     "held(b, scales, zero_points, bias, K, N, block_size, zero_point_row, max_rows, expect, "
     "fallback, ndarray, empty, uint8, float32): a callable f(a, *expect), the product of "
     "a (float32, up to max_rows rows of K) by this weight in C; other calls go to "
     "fallback.  zero_points and bias may be None."},
    {"matmul", py_matmul, METH_VARARGS,
     "matmul(a, b, scales, zero_points, bias, out, M, K, N, block_size, has_zero_points, "
     "zero_point_row, has_bias): out = MatMulNBits of 4-bit weights with A quantized to int8 "
     "per block (accuracy_level 4)."},
    ONNXVIZ_LEVEL_METHODS{NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nbits8", NULL, -1, methods};

PyMODINIT_FUNC PyInit__nbits8(void) {
    if (PyType_Ready(&HeldInt8Type) < 0) return NULL;
    return PyModule_Create(&module);
}
