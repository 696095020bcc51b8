/* onnxviz.runtime.native._channels: per-channel work on channels-last rows.
 *
 *   scale(x, s, out, (n, rows, channels)): out[b, r, c] = x[b, r, c] * s[b, c]
 *   gate(x, w1t, b1, w2t, b2, out, (n, rows, channels, reduced), alpha, beta): a whole
 *     squeeze-excite block, fusion_se.SEGate: per image b,
 *       m[c] = (sum_r x[b, r, c]) / rows                        (rows in order)
 *       h[j] = max(sum_c m[c] w1t[c, j] + b1[j], 0)             (c in order; Relu)
 *       g[c] = clip(fl(fl(sum_j h[j] w2t[j, c] + b2[c]) * alpha) + beta, 0, 1)
 *                                                                (j in order; HardSigmoid)
 *       out[b, r, c] = x[b, r, c] * g[c]
 *     w1t (C, R) and w2t (R, C) are the two 1x1 convs' weights transposed, b1 (R,) and
 *     b2 (C,) their biases.  Every operation is one float32 multiply or add (no fused
 *     multiply-add), so every level gives the same bits; they differ from the nodes'
 *     own (numpy's pairwise mean, BLAS's products) by float32 rounding of the sums:
 *     |m - exact| <= gamma(rows) mean|x|, each product's sum gamma(K) sum|terms|.
 *   place(x, out, (n, rows, width, total, offset), planes): one input of a Concat along
 *     the channels into its channels-last output (fusion_layout.ChannelsLastConcat):
 *     numpy's concatenate copied a UNet's 64x64 skip connections 8 channels at a time
 *     (49 us for two inputs of 8 channels).
 *
 *   shuffle(x, out, (rows, groups, per_group)): out[r, j * groups + i] = x[r, i *
 *     per_group + j]: ShuffleNet's channel shuffle (Reshape to (N, G, C/G, H, W) ->
 *     Transpose (0, 2, 1, 3, 4) -> Reshape back) of a channels-last value, one pixel's
 *     channels at a time (fusion_shuffle.ChannelShuffle).  A copy: the same bits.
 *
 * x and out (N, rows, C) and s (N, C): contiguous float32 buffers (out may be x).  This
 * is a squeeze-excite block's Mul of a channels-last (N, C, H, W) value by its (N, C, 1,
 * 1) gate: one multiply per element, so numpy's values exactly.  numpy runs that
 * broadcast as one inner loop per pixel over the C channels, without its SIMD loop:
 * 27 us for MobileNetV3's 28x28x96, where one pass here takes a few.
 *
 * Levels (native/__init__.py): 0 generic C; 1 AVX2; 2 and 3 AVX-512F: the same loop,
 * which the compiler vectorizes for each target attribute (no -march); place runs its
 * AVX2 code at every vector level (place_run). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "levels.h"
#include "held_call.h"
#include <string.h>

#if ONNXVIZ_X86
#include <immintrin.h>

#include "avx2_lanes.h"
#endif

static int level = 0;

#define SCALE_BODY                                                                         \
    {                                                                                      \
        for (Py_ssize_t b = 0; b < n; b++) {                                               \
            const float *restrict sb = s + b * channels;                                   \
            for (Py_ssize_t r = 0; r < rows; r++) {                                        \
                const float *xr = x + (b * rows + r) * channels;                           \
                float *orow = out + (b * rows + r) * channels;                             \
                for (Py_ssize_t c = 0; c < channels; c++) orow[c] = xr[c] * sb[c];         \
            }                                                                              \
        }                                                                                  \
    }

/* (x and out may be one buffer: each element is read before it is written, in place.) */
static void scale_generic(const float *x, const float *s, float *out, Py_ssize_t n,
                          Py_ssize_t rows, Py_ssize_t channels) SCALE_BODY

#if ONNXVIZ_X86
__attribute__((target("avx2,fma"))) static void
scale_avx2(const float *x, const float *s, float *out, Py_ssize_t n, Py_ssize_t rows,
           Py_ssize_t channels) SCALE_BODY

__attribute__((target("avx512f"))) static void
scale_avx512(const float *x, const float *s, float *out, Py_ssize_t n, Py_ssize_t rows,
             Py_ssize_t channels) SCALE_BODY
#endif

#define GATE_BODY                                                                          \
    {                                                                                      \
        for (Py_ssize_t b = 0; b < n; b++) {                                               \
            const float *xb = x + b * rows * channels;                                     \
            float *ob = out + b * rows * channels;                                         \
            for (Py_ssize_t c = 0; c < channels; c++) m[c] = 0.0f;                         \
            for (Py_ssize_t r = 0; r < rows; r++) {                                        \
                const float *xr = xb + r * channels;                                       \
                for (Py_ssize_t c = 0; c < channels; c++) m[c] = m[c] + xr[c];             \
            }                                                                              \
            const float count = (float)rows;                                               \
            for (Py_ssize_t c = 0; c < channels; c++) m[c] = m[c] / count;                 \
            for (Py_ssize_t j = 0; j < reduced; j++) h[j] = 0.0f;                          \
            for (Py_ssize_t c = 0; c < channels; c++) {                                    \
                const float mc = m[c];                                                     \
                const float *wr = w1t + c * reduced;                                       \
                for (Py_ssize_t j = 0; j < reduced; j++) h[j] = h[j] + mc * wr[j];         \
            }                                                                              \
            for (Py_ssize_t j = 0; j < reduced; j++) {                                     \
                const float v = h[j] + b1[j];                                              \
                h[j] = v < 0.0f ? 0.0f : v; /* NaN kept */                                 \
            }                                                                              \
            for (Py_ssize_t c = 0; c < channels; c++) g[c] = 0.0f;                         \
            for (Py_ssize_t j = 0; j < reduced; j++) {                                     \
                const float hj = h[j];                                                     \
                const float *wr = w2t + j * channels;                                      \
                for (Py_ssize_t c = 0; c < channels; c++) g[c] = g[c] + hj * wr[c];        \
            }                                                                              \
            for (Py_ssize_t c = 0; c < channels; c++) {                                    \
                const float v = (g[c] + b2[c]) * alpha + beta;                             \
                g[c] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; /* NaN kept */               \
            }                                                                              \
            for (Py_ssize_t r = 0; r < rows; r++) {                                        \
                const float *xr = xb + r * channels;                                       \
                float *orow = ob + r * channels;                                           \
                for (Py_ssize_t c = 0; c < channels; c++) orow[c] = xr[c] * g[c];          \
            }                                                                              \
        }                                                                                  \
    }

/* m (C), h (R) and g (C): scratch. */
#define GATE_ARGS                                                                          \
    const float *restrict x, const float *restrict w1t, const float *restrict b1,          \
        const float *restrict w2t, const float *restrict b2, float *restrict out,          \
        Py_ssize_t n, Py_ssize_t rows, Py_ssize_t channels, Py_ssize_t reduced, float alpha, \
        float beta, float *restrict m, float *restrict h, float *restrict g

static void gate_generic(GATE_ARGS) GATE_BODY

#if ONNXVIZ_X86
__attribute__((target("avx2,fma"))) static void gate_avx2(GATE_ARGS) GATE_BODY

__attribute__((target("avx512f"))) static void gate_avx512(GATE_ARGS) GATE_BODY
#endif

static PyObject *py_gate(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *w1o, *b1o, *w2o, *b2o, *oo;
    Py_ssize_t n, rows, channels, reduced;
    float alpha, beta;
    if (!PyArg_ParseTuple(args, "OOOOOO(nnnn)ff:gate", &xo, &w1o, &b1o, &w2o, &b2o, &oo, &n,
                          &rows, &channels, &reduced, &alpha, &beta))
        return NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 30;
    if (n < 1 || rows < 1 || channels < 1 || reduced < 1 || n > limit || rows > limit ||
        channels > limit || reduced > limit || n * rows > limit / channels ||
        channels > limit / reduced) {
        PyErr_SetString(PyExc_ValueError, "gate: sizes must be in 1..2**30 with their products");
        return NULL;
    }
    Py_buffer bufs[6];
    PyObject *objs[6] = {xo, w1o, b1o, w2o, b2o, oo};
    const Py_ssize_t counts[6] = {n * rows * channels, channels * reduced, reduced,
                                  reduced * channels, channels, n * rows * channels};
    const char *names[6] = {"x", "w1t", "b1", "w2t", "b2", "out"};
    int got = 0;
    for (; got < 6; got++)
        if (onnxviz_get_floats(objs[got], &bufs[got], counts[got], 1, got == 5, names[got]) < 0)
            break;
    float *scratch = NULL;
    if (got == 6) {
        scratch = PyMem_RawMalloc((size_t)(2 * channels + reduced) * sizeof(float));
        if (!scratch) PyErr_NoMemory();
    }
    if (scratch) {
        void (*fn)(GATE_ARGS) = gate_generic;
#if ONNXVIZ_X86
        if (level >= 2)
            fn = gate_avx512;
        else if (level == 1)
            fn = gate_avx2;
#endif
        Py_BEGIN_ALLOW_THREADS;
        fn(bufs[0].buf, bufs[1].buf, bufs[2].buf, bufs[3].buf, bufs[4].buf, bufs[5].buf, n,
           rows, channels, reduced, alpha, beta, scratch, scratch + channels,
           scratch + channels + reduced);
        Py_END_ALLOW_THREADS;
        PyMem_RawFree(scratch);
    }
    while (got > 0) PyBuffer_Release(&bufs[--got]);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_scale(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *so, *oo;
    Py_ssize_t n, rows, channels;
    if (!PyArg_ParseTuple(args, "OOO(nnn):scale", &xo, &so, &oo, &n, &rows, &channels))
        return NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 40;
    if (n < 0 || rows < 0 || channels < 0 || n > limit || rows > limit || channels > limit ||
        (n && rows && channels && (n > limit / rows || n * rows > limit / channels))) {
        PyErr_SetString(PyExc_ValueError, "scale: sizes must be in 0..2**40 with their product");
        return NULL;
    }
    Py_buffer xb, sb, ob;
    if (onnxviz_get_floats(xo, &xb, n * rows * channels, 1, 0, "x") < 0) return NULL;
    if (onnxviz_get_floats(so, &sb, n * channels, 1, 0, "s") < 0) {
        PyBuffer_Release(&xb);
        return NULL;
    }
    if (onnxviz_get_floats(oo, &ob, n * rows * channels, 1, 1, "out") < 0) {
        PyBuffer_Release(&sb);
        PyBuffer_Release(&xb);
        return NULL;
    }
    void (*fn)(const float *, const float *, float *, Py_ssize_t, Py_ssize_t, Py_ssize_t) =
        scale_generic;
#if ONNXVIZ_X86
    if (level >= 2)
        fn = scale_avx512;
    else if (level == 1)
        fn = scale_avx2;
#endif
    Py_BEGIN_ALLOW_THREADS;
    fn(xb.buf, sb.buf, ob.buf, n, rows, channels);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&ob);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&xb);
    Py_RETURN_NONE;
}

/* One input of a channels-last Concat: out[b, r, offset + c] = x's (b, c, r) value, x
 * channels-last (n, rows, width) or, with ``planes``, NCHW (n, width, rows).  Copies
 * only, so every level gives the same values; the levels differ in the vectors the
 * compiler copies with. */
#define PLACE_BODY                                                                         \
    {                                                                                      \
        for (Py_ssize_t b = 0; b < n; b++) {                                               \
            const float *xb = x + b * rows * width;                                        \
            float *ob = out + b * rows * total + offset;                                   \
            if (!planes) {                                                                 \
                for (Py_ssize_t r = 0; r < rows; r++) {                                    \
                    const float *restrict xr = xb + r * width;                             \
                    float *restrict orow = ob + r * total;                                 \
                    Py_ssize_t c = 0;                                                      \
                    for (; c + 8 <= width; c += 8) memcpy(orow + c, xr + c, 8 * sizeof(float)); \
                    for (; c < width; c++) orow[c] = xr[c];                                \
                }                                                                          \
                continue;                                                                  \
            }                                                                              \
            /* Row by row, each read across the planes (a plane's next values are in the   \
             * cache line the previous row read), in blocks of 16 rows whose values go     \
             * plane by plane: the inner loop reads one plane's 16 consecutive floats. */  \
            Py_ssize_t r = 0;                                                              \
            for (; r + 16 <= rows; r += 16) {                                              \
                for (Py_ssize_t c = 0; c < width; c++) {                                   \
                    const float *restrict src = xb + c * rows + r;                         \
                    float *restrict dst = ob + r * total + c;                              \
                    float v[16];                                                           \
                    memcpy(v, src, sizeof v);                                              \
                    for (int k = 0; k < 16; k++) dst[k * total] = v[k];                    \
                }                                                                          \
            }                                                                              \
            for (; r < rows; r++)                                                          \
                for (Py_ssize_t c = 0; c < width; c++) ob[r * total + c] = xb[c * rows + r]; \
        }                                                                                  \
    }

static void place_generic(const float *x, float *out, Py_ssize_t n, Py_ssize_t rows,
                          Py_ssize_t width, Py_ssize_t total, Py_ssize_t offset,
                          int planes) PLACE_BODY

#if ONNXVIZ_X86
__attribute__((target("avx2,fma"))) static void
place_avx2_body(const float *x, float *out, Py_ssize_t n, Py_ssize_t rows, Py_ssize_t width,
                Py_ssize_t total, Py_ssize_t offset, int planes) PLACE_BODY

/* Planes of a multiple of 8 channels at AVX2: blocks of 8 pixels x 8 channels transposed
 * in registers (8 loads, 24 shuffles, 8 stores of a pixel's 8 channels), where the loop
 * above stores one float at a time 16 pixels apart (a UNet's 16-channel 128 x 128
 * ConvTranspose output into its Concat: 326 us against onnxruntime's 132).  The same
 * floats copied. */
__attribute__((target("avx2,fma"))) static void
place_avx2(const float *x, float *out, Py_ssize_t n, Py_ssize_t rows, Py_ssize_t width,
           Py_ssize_t total, Py_ssize_t offset, int planes) {
    if (!planes || width % 8 || rows < 8) {
        place_avx2_body(x, out, n, rows, width, total, offset, planes);
        return;
    }
    const Py_ssize_t whole = rows / 8 * 8;
    for (Py_ssize_t b = 0; b < n; b++) {
        const float *xb = x + b * rows * width;
        float *ob = out + b * rows * total + offset;
        if (width % 16 == 0) {
            /* 16 planes at a time, 8 pixels down them: each pixel's 16 channels stored
             * as one 64-byte run, each plane's line read by two consecutive blocks.
             * Across all the planes at once (below), a 32 x 32 image's 64 planes 4 KB
             * apart share one L1 set and every load missed: 49 us for its 256 KB,
             * against 19 this way. */
            for (Py_ssize_t c = 0; c < width; c += 16)
                for (Py_ssize_t r = 0; r < whole; r += 8) {
                    const float *src = xb + c * rows + r;
                    __m256 lo[8], hi[8];
                    for (int i = 0; i < 8; i++) {
                        lo[i] = _mm256_loadu_ps(src + i * rows);
                        hi[i] = _mm256_loadu_ps(src + (i + 8) * rows);
                    }
                    onnxviz_transpose8(lo); /* lo[k]: pixel k's channels c .. c + 7 */
                    onnxviz_transpose8(hi);
                    float *dst = ob + r * total + c;
                    for (int k = 0; k < 8; k++) {
                        _mm256_storeu_ps(dst + k * total, lo[k]);
                        _mm256_storeu_ps(dst + k * total + 8, hi[k]);
                    }
                }
        } else
        for (Py_ssize_t r = 0; r < whole; r += 8)
            for (Py_ssize_t c = 0; c < width; c += 8) {
                const float *src = xb + c * rows + r;
                __m256 a[8];
                for (int i = 0; i < 8; i++) a[i] = _mm256_loadu_ps(src + i * rows);
                onnxviz_transpose8(a); /* a[k]: pixel k's 8 channels */
                float *dst = ob + r * total + c;
                for (int k = 0; k < 8; k++) _mm256_storeu_ps(dst + k * total, a[k]);
            }
        for (Py_ssize_t r = whole; r < rows; r++)
            for (Py_ssize_t c = 0; c < width; c++) ob[r * total + c] = xb[c * rows + r];
    }
}
#endif

/* place at this level, the GIL released. */
static void place_run(const float *x, float *out, Py_ssize_t n, Py_ssize_t rows,
                      Py_ssize_t width, Py_ssize_t total, Py_ssize_t offset, int planes) {
    void (*fn)(const float *, float *, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t,
               Py_ssize_t, int) = place_generic;
#if ONNXVIZ_X86
    /* Every vector level runs place_avx2: its transposed blocks for NCHW planes (an
     * AVX-512 build of the loop above stored them one float at a time: a UNet's
     * 16-channel 128 x 128 ConvTranspose output into its Concat, 305 -> ~100 us on a Zen
     * 4 core), and for channels-last rows the same copies as at AVX-512. */
    if (level >= 1)
        fn = place_avx2;
#endif
    Py_BEGIN_ALLOW_THREADS;
    fn(x, out, n, rows, width, total, offset, planes);
    Py_END_ALLOW_THREADS;
}

static PyObject *py_place(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *oo;
    Py_ssize_t n, rows, width, total, offset;
    int planes;
    if (!PyArg_ParseTuple(args, "OO(nnnnn)p:place", &xo, &oo, &n, &rows, &width, &total,
                          &offset, &planes))
        return NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 40;
    if (n < 0 || rows < 0 || width < 0 || total < 0 || offset < 0 || n > limit ||
        rows > limit || total > limit || width > total || offset > total - width ||
        (n && rows && total && (n > limit / rows || n * rows > limit / total))) {
        PyErr_SetString(PyExc_ValueError,
                        "place: sizes must be in 0..2**40 with their product, and the "
                        "input's channels within the output's");
        return NULL;
    }
    Py_buffer xb, ob;
    if (onnxviz_get_floats(xo, &xb, n * rows * width, 1, 0, "x") < 0) return NULL;
    if (onnxviz_get_floats(oo, &ob, n * rows * total, 1, 1, "out") < 0) {
        PyBuffer_Release(&xb);
        return NULL;
    }
    place_run(xb.buf, ob.buf, n, rows, width, total, offset, planes);
    PyBuffer_Release(&ob);
    PyBuffer_Release(&xb);
    Py_RETURN_NONE;
}

/* ---- the channel shuffle of channels-last rows -----------------------------------------
 *
 * Per row (pixel), the (groups, per_group) matrix of its channels transposed.  The plain
 * loop reads each group's run in order and stores every groups-th float.  numpy's copy
 * of the transposed view, and the tiled copy of native/_transpose.c, took 228-357 us
 * for ShuffleNet's 56 x 56 x 112 (4 groups: its innermost axis 4 floats long); the
 * AVX-512 loop for 2 or 4 groups loads 16 channels of each group and interleaves them in
 * registers (pairs of floats, then pairs of pairs), whole vector stores. */
static void shuffle_generic(const float *x, float *out, Py_ssize_t rows, Py_ssize_t groups,
                            Py_ssize_t per) {
    const Py_ssize_t c = groups * per;
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *xr = x + r * c;
        float *o = out + r * c;
        for (Py_ssize_t i = 0; i < groups; i++) {
            const float *src = xr + i * per;
            for (Py_ssize_t j = 0; j < per; j++) o[j * groups + i] = src[j];
        }
    }
}

#if ONNXVIZ_X86
/* The first 16 (lo) or last 16 (hi) of the interleaved a[0], b[0], a[1], b[1], ...: of
 * floats (32 bits) or of float pairs (64 bits). */
#define SHUFFLE_LO32 _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)
#define SHUFFLE_HI32                                                                         \
    _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)
#define SHUFFLE_LO64 _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11)
#define SHUFFLE_HI64 _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15)

__attribute__((target("avx512f"))) static void shuffle_avx512(const float *x, float *out,
                                                             Py_ssize_t rows,
                                                             Py_ssize_t groups,
                                                             Py_ssize_t per) {
    const Py_ssize_t c = groups * per;
    const __m512i lo32 = SHUFFLE_LO32, hi32 = SHUFFLE_HI32;
    const __m512i lo64 = SHUFFLE_LO64, hi64 = SHUFFLE_HI64;
    for (Py_ssize_t r = 0; r < rows; r++) {
        const float *xr = x + r * c;
        float *o = out + r * c;
        for (Py_ssize_t j = 0; j < per; j += 16) {
            const Py_ssize_t left = per - j < 16 ? per - j : 16;
            const __mmask16 in = left == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
            __m512 v[4], w[4];
            for (Py_ssize_t i = 0; i < groups; i++)
                v[i] = _mm512_maskz_loadu_ps(in, xr + i * per + j);
            int count; /* vectors of output, in order */
            if (groups == 2) {
                w[0] = _mm512_permutex2var_ps(v[0], lo32, v[1]);
                w[1] = _mm512_permutex2var_ps(v[0], hi32, v[1]);
                count = 2;
            } else { /* 4: pairs (0, 1) and (2, 3), then pairs of those pairs */
                const __m512 a0 = _mm512_permutex2var_ps(v[0], lo32, v[1]);
                const __m512 a1 = _mm512_permutex2var_ps(v[0], hi32, v[1]);
                const __m512 b0 = _mm512_permutex2var_ps(v[2], lo32, v[3]);
                const __m512 b1 = _mm512_permutex2var_ps(v[2], hi32, v[3]);
                w[0] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a0), lo64,
                                                               _mm512_castps_pd(b0)));
                w[1] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a0), hi64,
                                                               _mm512_castps_pd(b0)));
                w[2] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a1), lo64,
                                                               _mm512_castps_pd(b1)));
                w[3] = _mm512_castpd_ps(_mm512_permutex2var_pd(_mm512_castps_pd(a1), hi64,
                                                               _mm512_castps_pd(b1)));
                count = 4;
            }
            /* groups * left floats out, from position groups * j */
            Py_ssize_t todo = groups * left;
            float *dst = o + groups * j;
            for (int k = 0; k < count && todo > 0; k++, todo -= 16, dst += 16) {
                const __mmask16 m =
                    todo >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << todo) - 1u);
                _mm512_mask_storeu_ps(dst, m, w[k]);
            }
        }
    }
}
#endif

static PyObject *py_shuffle(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *oo;
    Py_ssize_t rows, groups, per;
    if (!PyArg_ParseTuple(args, "OO(nnn):shuffle", &xo, &oo, &rows, &groups, &per)) return NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 40;
    if (rows < 0 || groups < 1 || per < 0 || rows > limit || groups > limit || per > limit ||
        (per && groups > limit / per) || (rows && groups * per > limit / rows)) {
        PyErr_SetString(PyExc_ValueError,
                        "shuffle: rows and per_group must be in 0..2**40, groups >= 1, and "
                        "their product too");
        return NULL;
    }
    Py_buffer xb, ob;
    if (onnxviz_get_floats(xo, &xb, rows * groups * per, 1, 0, "x") < 0) return NULL;
    if (onnxviz_get_floats(oo, &ob, rows * groups * per, 1, 1, "out") < 0) {
        PyBuffer_Release(&xb);
        return NULL;
    }
    if (rows * groups * per > 0 && (const char *)xb.buf < (const char *)ob.buf + ob.len &&
        (const char *)ob.buf < (const char *)xb.buf + xb.len) {
        PyErr_SetString(PyExc_ValueError, "shuffle: x and out overlap");
        PyBuffer_Release(&ob);
        PyBuffer_Release(&xb);
        return NULL;
    }
    void (*fn)(const float *, float *, Py_ssize_t, Py_ssize_t, Py_ssize_t) = shuffle_generic;
#if ONNXVIZ_X86
    if (level >= 2 && (groups == 2 || groups == 4)) fn = shuffle_avx512;
#endif
    Py_BEGIN_ALLOW_THREADS;
    fn(xb.buf, ob.buf, rows, groups, per);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&ob);
    PyBuffer_Release(&xb);
    Py_RETURN_NONE;
}

/* ---- channels-last rows back to planes -------------------------------------------------
 *
 * unplace(x, out, (n, rows, width)): out[b, c, r] = x[b, r, c], the inverse of place's
 * planes form with the whole width: a conv computed channels-last for an NCHW model
 * (nn_conv's rows route) hands its result back as planes.  numpy's transposing copy of a
 * 32 x 32 image of 96 channels took 75 us, this a few. */
static void unplace_generic(const float *x, float *out, Py_ssize_t n, Py_ssize_t rows,
                            Py_ssize_t width) {
    enum { TILE = 16 };
    for (Py_ssize_t b = 0; b < n; b++) {
        const float *xb = x + b * rows * width;
        float *ob = out + b * rows * width;
        for (Py_ssize_t r0 = 0; r0 < rows; r0 += TILE) {
            const Py_ssize_t r1 = r0 + TILE < rows ? r0 + TILE : rows;
            for (Py_ssize_t c = 0; c < width; c++)
                for (Py_ssize_t r = r0; r < r1; r++) ob[c * rows + r] = xb[r * width + c];
        }
    }
}

#if ONNXVIZ_X86
/* Blocks of 8 pixels x 8 channels transposed in registers; the edges as above. */
__attribute__((target("avx2,fma"))) static void unplace_avx2(const float *x, float *out,
                                                             Py_ssize_t n, Py_ssize_t rows,
                                                             Py_ssize_t width) {
    const Py_ssize_t rw = rows / 8 * 8, cw = width / 8 * 8, rw16 = rows / 16 * 16;
    for (Py_ssize_t b = 0; b < n; b++) {
        const float *xb = x + b * rows * width;
        float *ob = out + b * rows * width;
        /* 16 pixels at a time: each plane's 64-byte line stored whole.  Eight pixels
         * stored half lines 4 KB apart in a 32 x 32 image, whose other halves came
         * after the L1 set had dropped them (64 channels: 39 us, against 20 this way). */
        for (Py_ssize_t r = 0; r < rw16; r += 16) {
            for (Py_ssize_t c = 0; c < cw; c += 8) {
                __m256 lo[8], hi[8];
                for (int i = 0; i < 8; i++) {
                    lo[i] = _mm256_loadu_ps(xb + (r + i) * width + c);
                    hi[i] = _mm256_loadu_ps(xb + (r + i + 8) * width + c);
                }
                onnxviz_transpose8(lo); /* lo[k]: channel c + k of pixels r .. r + 7 */
                onnxviz_transpose8(hi);
                for (int k = 0; k < 8; k++) {
                    _mm256_storeu_ps(ob + (c + k) * rows + r, lo[k]);
                    _mm256_storeu_ps(ob + (c + k) * rows + r + 8, hi[k]);
                }
            }
            for (Py_ssize_t c = cw; c < width; c++)
                for (Py_ssize_t i = 0; i < 16; i++) ob[c * rows + r + i] = xb[(r + i) * width + c];
        }
        for (Py_ssize_t r = rw16; r < rw; r += 8) {
            for (Py_ssize_t c = 0; c < cw; c += 8) {
                __m256 a[8];
                for (int i = 0; i < 8; i++) a[i] = _mm256_loadu_ps(xb + (r + i) * width + c);
                onnxviz_transpose8(a); /* a[k]: channel c + k of the 8 pixels */
                for (int k = 0; k < 8; k++) _mm256_storeu_ps(ob + (c + k) * rows + r, a[k]);
            }
            for (Py_ssize_t c = cw; c < width; c++)
                for (Py_ssize_t i = 0; i < 8; i++) ob[c * rows + r + i] = xb[(r + i) * width + c];
        }
        for (Py_ssize_t r = rw; r < rows; r++)
            for (Py_ssize_t c = 0; c < width; c++) ob[c * rows + r] = xb[r * width + c];
    }
}
#endif

static PyObject *py_unplace(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *oo;
    Py_ssize_t n, rows, width;
    if (!PyArg_ParseTuple(args, "OO(nnn):unplace", &xo, &oo, &n, &rows, &width)) return NULL;
    const Py_ssize_t limit = (Py_ssize_t)1 << 40;
    if (n < 0 || rows < 0 || width < 0 || n > limit || rows > limit || width > limit ||
        (n && rows && width && (n > limit / rows || n * rows > limit / width))) {
        PyErr_SetString(PyExc_ValueError, "unplace: sizes must be in 0..2**40 with their product");
        return NULL;
    }
    Py_buffer xb, ob;
    if (onnxviz_get_floats(xo, &xb, n * rows * width, 1, 0, "x") < 0) return NULL;
    if (onnxviz_get_floats(oo, &ob, n * rows * width, 1, 1, "out") < 0) {
        PyBuffer_Release(&xb);
        return NULL;
    }
    void (*fn)(const float *, float *, Py_ssize_t, Py_ssize_t, Py_ssize_t) = unplace_generic;
#if ONNXVIZ_X86
    if (level >= 1) fn = unplace_avx2;
#endif
    Py_BEGIN_ALLOW_THREADS;
    fn(xb.buf, ob.buf, n, rows, width);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&ob);
    PyBuffer_Release(&xb);
    Py_RETURN_NONE;
}

/* ---- a held concat: a channels-last Concat's common call --------------------------------
 *
 * `held_concat(...)` makes the `quick` call of a fusion_layout.ChannelsLastConcat: called
 * with the node's inputs (float32 4-D arrays of one image count and size, each
 * channels-last or C-contiguous NCHW, at least one channels-last, as the node decided on
 * its first call), it places each into a new 64-byte aligned channels-last output: the
 * node's own copies (place), so its values, from the run loop's call in C
 * (native/held_call.h).  Any other call returns `fallback(*args)`. */
enum { CONCAT_MAX = 64 };
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
} HeldConcat;

static PyObject *held_concat_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                        PyObject *kwnames) {
    const HeldCall *h = &((HeldConcat *)obj)->call;
    if (!held_call_takes(h, args, nargsf, kwnames)) goto other;
    const Py_ssize_t count = h->nargs;
    Py_buffer views[CONCAT_MAX];
    int planes[CONCAT_MAX], held = 0, any_last = 0;
    Py_ssize_t total = 0;
    PyObject *out = NULL;
    for (; held < count; held++) {
        Py_buffer *v = &views[held];
        if ((PyObject *)Py_TYPE(args[held]) != h->ndarray ||
            PyObject_GetBuffer(args[held], v, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
            PyErr_Clear();
            goto declined;
        }
        const char *f = v->format ? v->format : "B";
        int layout = 0;
        if (f[0] == 'f' && !f[1] && v->ndim == 4 && v->len > 0 &&
            (held == 0 || (v->shape[0] == views[0].shape[0] &&
                           v->shape[2] == views[0].shape[2] &&
                           v->shape[3] == views[0].shape[3]))) {
            layout = onnxviz_image_layout(v);
            if (layout != ONNXVIZ_NHWC && PyBuffer_IsContiguous(v, 'C')) layout = ONNXVIZ_NCHW;
        }
        if (!layout) {
            PyBuffer_Release(v);
            goto declined;
        }
        planes[held] = layout == ONNXVIZ_NCHW;
        any_last = any_last || !planes[held];
        total += v->shape[1];
    }
    if (!any_last) goto declined; /* the node's own kernel: an NCHW result */
    const Py_ssize_t n = views[0].shape[0], rows = views[0].shape[2] * views[0].shape[3];
    float *y = NULL;
    out = onnxviz_new_channels_last(h->empty, h->ndarray, h->u8, h->f32, n, total,
                                    views[0].shape[2], views[0].shape[3], &y);
    if (out) {
        Py_ssize_t offset = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            place_run(views[i].buf, y, n, rows, views[i].shape[1], total, offset, planes[i]);
            offset += views[i].shape[1];
        }
    }
    for (Py_ssize_t i = 0; i < count; i++) PyBuffer_Release(&views[i]);
    return out;
declined:
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&views[i]);
other:
    return held_call_other(h, args, nargsf, kwnames);
}

static void held_concat_release(HeldConcat *self) { (void)self; }

HELD_CALL_TYPE(HeldConcat, HeldConcatType, held_concat,
               "onnxviz.runtime.native._channels.HeldConcat",
               "A channels-last Concat's call (held_concat()).", held_concat_release)

static PyObject *py_held_concat(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *fallback, *ndarray, *empty, *u8, *f32;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "nOOOOO:held_concat", &count, &fallback, &ndarray, &empty, &u8,
                          &f32))
        return NULL;
    if (count < 1 || count > CONCAT_MAX) {
        PyErr_SetString(PyExc_ValueError, "held_concat: 1 to 64 inputs");
        return NULL;
    }
    return held_call_new_plain(&HeldConcatType, held_concat_vectorcall,
                               offsetof(HeldConcat, call), count, fallback, ndarray, empty, u8,
                               f32, "held_concat");
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"scale", py_scale, METH_VARARGS,
     "scale(x, s, out, (n, rows, channels)): out[b, r, c] = x[b, r, c] * s[b, c], float32 "
     "contiguous buffers (out may be x)."},
    {"gate", py_gate, METH_VARARGS,
     "gate(x, w1t, b1, w2t, b2, out, (n, rows, channels, reduced), alpha, beta): a "
     "squeeze-excite block (mean over rows, 1x1 conv + Relu, 1x1 conv + HardSigmoid, scale) "
     "of channels-last float32 rows; out must not overlap x."},
    {"place", py_place, METH_VARARGS,
     "place(x, out, (n, rows, width, total, offset), planes): out[b, r, offset + c] = x's "
     "value of image b, channel c, row r; x channels-last (n, rows, width) or, with planes, "
     "NCHW (n, width, rows); out (n, rows, total); float32 contiguous, not overlapping."},
    {"unplace", py_unplace, METH_VARARGS,
     "unplace(x, out, (n, rows, width)): out[b, c, r] = x[b, r, c]: channels-last rows "
     "(n, rows, width) as NCHW planes (n, width, rows); float32 contiguous, not "
     "overlapping."},
    {"shuffle", py_shuffle, METH_VARARGS,
     "shuffle(x, out, (rows, groups, per_group)): out[r, j * groups + i] = x[r, i * "
     "per_group + j]: the channel shuffle of channels-last rows; float32 contiguous, not "
     "overlapping."},
    {"held_concat", py_held_concat, METH_VARARGS,
     "held_concat(count, fallback, ndarray, empty, uint8, float32) -> a callable: f(*xs) = "
     "the Concat along the channels of `count` float32 4-D arrays of one image count and "
     "size, each channels-last or C-contiguous NCHW and one at least channels-last, as a "
     "new 64-byte aligned channels-last array (place's copies); any other call is "
     "fallback(*xs)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_channels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__channels(void) {
    if (PyType_Ready(&HeldConcatType) < 0) return NULL;
    return PyModule_Create(&module);
}
