/* onnxviz.runtime.native._winograd: the two transforms of the F(2x2, 3x3) Winograd conv
 * (kernels/nn_winograd.py), each in one pass over memory.
 *
 *   input(x, C, H, W, pad_top, pad_left, th, tw, v[, channels_last]): x, one image
 *   (C, H, W) float32 contiguous, or (H, W, C) when channels_last; v, float32 (16, C, th + 1, tw + 1): V = B^T d B of every 4x4 tile d of
 *   the zero-padded image (tile (i, j) starts at padded row 2i, column 2j), tile element
 *   k = 4 * row + column first.  The spare tile row and column (index th, tw) are made
 *   too, from zeros past the image: the GEMMs read the spare column, the output drops it.
 *
 *   output(m, M, th, tw, bias, y): m, float32 (16, M, th * (tw + 1)) (the 16 GEMMs'
 *   products); y, float32 (M, 2 th, 2 tw): A^T m A of every tile, after bias[M] (or
 *   None) is added to m_5, the element that reaches all four outputs with sign +1.
 *
 *   conv_nhwc(x, (N, H, W, C), u, nr, M, bias, addend, out, (H', W'), (pad_top,
 *   pad_left), act, lo, hi, tiles): the whole F(2x2, 3x3) conv of a channels-last image,
 *   at AVX-512 and AVX2 (False below, or when u's panels are not this level's width,
 *   after the same checks of its arguments: the caller runs its other route).  Below.
 *
 * Why: numpy makes these transforms as 24 + 12 array operations plus the copies into
 * phase images and out of the output grid, each a pass through memory: about a quarter
 * of a ResNet-18's time.  Here they are adds and subtracts only, the same ones in the
 * same order as the numpy path, so the results are bit for bit numpy's at every level
 * (no multiply, so no contraction either).  The loops are plain C compiled three times
 * with a target attribute each (generic, AVX2, AVX-512), vectorized by the compiler.
 *
 * Levels (native/__init__.py): 0 generic C; 1 AVX2; 2 and 3 AVX-512F. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <structmember.h>

#include "levels.h"
#include "held_call.h"
#include <stdint.h>
#include <string.h>
#if ONNXVIZ_X86
#include <immintrin.h>
#endif
#include "activations.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* GCC: off already under -std=c11 (setup.py) */
#endif

static int level = 0;

typedef struct {
    Py_ssize_t c, h, w, pad_top, pad_left, th, tw;
    int channels_last; /* x is (H, W, C) in memory, not (C, H, W) */
} InputGeometry;

/* One tile row of one channel: the four padded rows 2i..2i+3 into rows[0..3] (width
 * 2 tw + 4), then their combinations, then the column combinations into v. */
static inline __attribute__((always_inline)) void input_body(const float *x, float *v,
                                                             const InputGeometry *g,
                                                             float *rows) {
    const Py_ssize_t width = g->tw + 1, plane = (g->th + 1) * width;
    const Py_ssize_t pw = 2 * width + 2; /* padded columns the tiles read */
    const Py_ssize_t q = g->c * plane;
    float *d[4] = {rows, rows + pw, rows + 2 * pw, rows + 3 * pw};
    float *r[4] = {rows + 4 * pw, rows + 5 * pw, rows + 6 * pw, rows + 7 * pw};
    /* the input columns that land in the padded row, and where */
    Py_ssize_t first = g->pad_left, count = g->w;
    if (first + count > pw) count = pw - first;
    if (count < 0) count = 0;
    for (Py_ssize_t ch = 0; ch < g->c; ch++) {
        const float *image = g->channels_last ? x + ch : x + ch * g->h * g->w;
        for (Py_ssize_t i = 0; i <= g->th; i++) {
            for (int k = 0; k < 4; k++) {
                Py_ssize_t row = 2 * i + k - g->pad_top;
                memset(d[k], 0, (size_t)pw * sizeof(float));
                if (row < 0 || row >= g->h || count <= 0) continue;
                if (!g->channels_last) {
                    memcpy(d[k] + first, image + row * g->w, (size_t)count * sizeof(float));
                } else { /* a channel's row of a channels-last image: every C-th float */
                    const float *src = image + row * g->w * g->c;
                    float *dst = d[k] + first;
                    for (Py_ssize_t col = 0; col < count; col++) dst[col] = src[col * g->c];
                }
            }
            float *d0 = d[0], *d1 = d[1], *d2 = d[2], *d3 = d[3];
            float *r0 = r[0], *r1 = r[1], *r2 = r[2], *r3 = r[3];
            for (Py_ssize_t col = 0; col < pw; col++) {
                r0[col] = d0[col] - d2[col];
                r1[col] = d1[col] + d2[col];
                r2[col] = d2[col] - d1[col];
                r3[col] = d1[col] - d3[col];
            }
            const Py_ssize_t at = ch * plane + i * width;
            for (int t = 0; t < 4; t++) {
                const float *e = r[t];
                float *v0 = v + (4 * t + 0) * q + at, *v1 = v + (4 * t + 1) * q + at;
                float *v2 = v + (4 * t + 2) * q + at, *v3 = v + (4 * t + 3) * q + at;
                for (Py_ssize_t j = 0; j < width; j++) {
                    const float e0 = e[2 * j], o1 = e[2 * j + 1];
                    const float e2 = e[2 * j + 2], o3 = e[2 * j + 3];
                    v0[j] = e0 - e2;
                    v1[j] = o1 + e2;
                    v2[j] = e2 - o1;
                    v3[j] = o1 - o3;
                }
            }
        }
    }
}

static inline __attribute__((always_inline)) void output_body(const float *m, float *y,
                                                              const float *bias,
                                                              Py_ssize_t channels,
                                                              Py_ssize_t th, Py_ssize_t tw) {
    const Py_ssize_t width = tw + 1, cols = th * width, plane = channels * cols;
    const Py_ssize_t ow = 2 * tw;
    for (Py_ssize_t ch = 0; ch < channels; ch++) {
        const float b = bias ? bias[ch] : 0.0f;
        for (Py_ssize_t i = 0; i < th; i++) {
            const float *p[16];
            for (int k = 0; k < 16; k++) p[k] = m + k * plane + ch * cols + i * width;
            float *top = y + (ch * 2 * th + 2 * i) * ow, *bottom = top + ow;
            for (Py_ssize_t j = 0; j < tw; j++) {
                float h0[4], h1[4];
                for (int t = 0; t < 4; t++) {
                    float p4 = p[4 + t][j];
                    if (bias && t == 1) p4 = p4 + b; /* m_5 += bias, as numpy does first */
                    h0[t] = (p[t][j] + p4) + p[8 + t][j];
                    h1[t] = (p4 - p[8 + t][j]) - p[12 + t][j];
                }
                top[2 * j] = (h0[0] + h0[1]) + h0[2];
                top[2 * j + 1] = (h0[1] - h0[2]) - h0[3];
                bottom[2 * j] = (h1[0] + h1[1]) + h1[2];
                bottom[2 * j + 1] = (h1[1] - h1[2]) - h1[3];
            }
        }
    }
}

static void input_generic(const float *x, float *v, const InputGeometry *g, float *rows) {
    input_body(x, v, g, rows);
}
static void output_generic(const float *m, float *y, const float *bias, Py_ssize_t c,
                           Py_ssize_t th, Py_ssize_t tw) {
    output_body(m, y, bias, c, th, tw);
}
#if ONNXVIZ_X86
__attribute__((target("avx2,fma"))) static void input_avx2(const float *x, float *v,
                                                          const InputGeometry *g,
                                                          float *rows) {
    input_body(x, v, g, rows);
}
__attribute__((target("avx2,fma"))) static void output_avx2(const float *m, float *y,
                                                           const float *bias, Py_ssize_t c,
                                                           Py_ssize_t th, Py_ssize_t tw) {
    output_body(m, y, bias, c, th, tw);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static void input_avx512(
    const float *x, float *v, const InputGeometry *g, float *rows) {
    input_body(x, v, g, rows);
}
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) static void output_avx512(
    const float *m, float *y, const float *bias, Py_ssize_t c, Py_ssize_t th, Py_ssize_t tw) {
    output_body(m, y, bias, c, th, tw);
}
#endif

static PyObject *py_input(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *vo;
    InputGeometry g;
    g.channels_last = 0;
    if (!PyArg_ParseTuple(args, "OnnnnnnnO|p:input", &xo, &g.c, &g.h, &g.w, &g.pad_top,
                          &g.pad_left, &g.th, &g.tw, &vo, &g.channels_last))
        return NULL;
    if (g.c < 1 || g.h < 1 || g.w < 1 || g.pad_top < 0 || g.pad_left < 0 || g.th < 1 ||
        g.tw < 1 || g.pad_top > 2 || g.pad_left > 2 || g.c > (1 << 20) || g.th > (1 << 14) ||
        g.tw > (1 << 14) || g.h > (1 << 15) || g.w > (1 << 15)) {
        PyErr_SetString(PyExc_ValueError, "input: sizes out of range");
        return NULL;
    }
    Py_buffer xv, vv;
    if (onnxviz_get_floats(xo, &xv, g.c * g.h * g.w, 0, 0, "input x") < 0) return NULL;
    const Py_ssize_t v_need = 16 * g.c * (g.th + 1) * (g.tw + 1);
    if (onnxviz_get_floats(vo, &vv, v_need, 0, 1, "input v") < 0) {
        PyBuffer_Release(&xv);
        return NULL;
    }
    const Py_ssize_t pw = 2 * (g.tw + 1) + 2;
    float *rows = PyMem_RawMalloc((size_t)(8 * pw) * sizeof(float));
    if (!rows) {
        PyBuffer_Release(&xv);
        PyBuffer_Release(&vv);
        return PyErr_NoMemory();
    }
    const float *x = xv.buf;
    float *v = vv.buf;
    Py_BEGIN_ALLOW_THREADS;
#if ONNXVIZ_X86
    if (level >= 2)
        input_avx512(x, v, &g, rows);
    else if (level == 1)
        input_avx2(x, v, &g, rows);
    else
#endif
        input_generic(x, v, &g, rows);
    Py_END_ALLOW_THREADS;
    PyMem_RawFree(rows);
    PyBuffer_Release(&xv);
    PyBuffer_Release(&vv);
    Py_RETURN_NONE;
}

static PyObject *py_output(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *mo, *bo, *yo;
    Py_ssize_t channels, th, tw;
    if (!PyArg_ParseTuple(args, "OnnnOO:output", &mo, &channels, &th, &tw, &bo, &yo))
        return NULL;
    if (channels < 1 || th < 1 || tw < 1 || channels > (1 << 20) || th > (1 << 14) ||
        tw > (1 << 14)) {
        PyErr_SetString(PyExc_ValueError, "output: sizes out of range");
        return NULL;
    }
    Py_buffer mv, yv, bv;
    int has_bias = bo != Py_None;
    if (onnxviz_get_floats(mo, &mv, 16 * channels * th * (tw + 1), 0, 0, "output m") < 0)
        return NULL;
    if (onnxviz_get_floats(yo, &yv, channels * 4 * th * tw, 0, 1, "output y") < 0) {
        PyBuffer_Release(&mv);
        return NULL;
    }
    if (has_bias && onnxviz_get_floats(bo, &bv, channels, 0, 0, "output bias") < 0) {
        PyBuffer_Release(&mv);
        PyBuffer_Release(&yv);
        return NULL;
    }
    const float *m = mv.buf, *bias = has_bias ? bv.buf : NULL;
    float *y = yv.buf;
    Py_BEGIN_ALLOW_THREADS;
#if ONNXVIZ_X86
    if (level >= 2)
        output_avx512(m, y, bias, channels, th, tw);
    else if (level == 1)
        output_avx2(m, y, bias, channels, th, tw);
    else
#endif
        output_generic(m, y, bias, channels, th, tw);
    Py_END_ALLOW_THREADS;
    if (has_bias) PyBuffer_Release(&bv);
    PyBuffer_Release(&mv);
    PyBuffer_Release(&yv);
    Py_RETURN_NONE;
}

/* ---- conv_nhwc: the fused channels-last F(2x2, 3x3) conv (AVX-512, AVX2) ------------------
 *
 * x (N, H, W, C) channels-last float32, out (N, H', W', M) the same, addend (the chain's
 * residual, laid out as out, or NULL), bias (M) or NULL.  u: the transformed weight
 * U_k = (G g G^T)_k (nn_winograd.pack_nhwc), packed per tile element k into panels of nr
 * output channels (wino_panel: 32 at AVX-512, 16 at AVX2), each C rows of nr floats from
 * a 64-byte boundary (the last panel zero-padded): [16][panels][C][nr].
 *
 * The output's 2x2 blocks (tiles) are taken `tiles` at a time (a block; tiles run across
 * rows and images).  For a block: the input transform V = B^T d B of each tile's 4x4
 * window (zeros past the image), 16 channels a vector (8 at AVX2), into vbuf
 * [16][tiles][Cp]; the 16 products M_k = V_k U_k (a 12 x 32 tile of accumulators, 12
 * tiles' rows broadcast against a panel's two vectors, as _sgemm's micro-kernel; 6 x 16
 * at AVX2; K = C summed in order by fused multiply-adds) into mbuf [16][tiles][Mp]; the
 * output transform A^T m A with the
 * bias added to m_5 first (it reaches all four outputs with sign +1, as numpy's path
 * adds it), then the addend and the activation (activations.h), into out.  A block's
 * buffers stay in L2 (the caller sizes `tiles`), where the unfused path (numpy or the
 * transforms above, OpenBLAS's 16 GEMMs) made each whole transform a pass through
 * memory: ResNet-50's 3x3 convs ran faster directly.  2.25x fewer multiply-adds than
 * the direct conv.
 *
 * Numbers: each V, m and output element is the same adds and subtracts in the same
 * order as the numpy path's; each product sums its C terms in order (numpy's OpenBLAS
 * blocks and orders them its own way), so the conv's results differ from the NCHW
 * Winograd's by rounding only, and from the direct conv's as any two float32 sums of
 * the same terms do (the transforms' entries are 0, +-1 and +-1/2). */
typedef struct {
    const float *x, *u, *bias, *add;
    float *out;
    Py_ssize_t n, h, w, c, m, ho, wo, pad_top, pad_left, panels, tiles, cp, mp;
    int nr; /* panel width: 32 at AVX-512, 16 at AVX2 (wino_panel) */
    int act;
    float lo, hi;
} WinoConv;

/* The packed weight's panel width the fused conv reads at `lvl`: 32 output channels at
 * AVX-512 (two zmm), 16 at AVX2 (two ymm), 0 below (no fused conv). */
static int wino_panel(int lvl) { return lvl >= 2 ? 32 : lvl == 1 ? 16 : 0; }

#if ONNXVIZ_X86
__attribute__((target("avx512f"))) static inline __mmask16 wino_mask(Py_ssize_t n) {
    return (__mmask16)(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1u);
}

/* Rows of the weight panel the first row group's tiles prefetch ahead. */
enum { WINO_PF_ROWS = 32 };

/* R rows of V_k (ldv floats apart) by one packed panel (K rows of 32) into R rows of
 * m (ldm apart), 32 columns. */
__attribute__((target("avx512f"), always_inline)) static inline void
wino_tile(const float *a, Py_ssize_t lda, const float *b, Py_ssize_t k, float *c,
          Py_ssize_t ldc, const int R, const int STREAM) {
    __m512 c0[12], c1[12];
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    for (Py_ssize_t q = 0; q < k; q++, b += 32) {
        if (STREAM) {
            _mm_prefetch((const char *)(b + WINO_PF_ROWS * 32), _MM_HINT_T1);
            _mm_prefetch((const char *)(b + WINO_PF_ROWS * 32 + 16), _MM_HINT_T1);
        }
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < R; i++) {
            const __m512 ai = _mm512_set1_ps(a[i * lda + q]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) {
        _mm512_store_ps(c + i * ldc, c0[i]);
        _mm512_store_ps(c + i * ldc + 16, c1[i]);
    }
}
#define WINO_TILE(R)                                                                         \
    __attribute__((target("avx512f"), noinline)) static void wino_tile_##R(                  \
        const float *a, Py_ssize_t lda, const float *b, Py_ssize_t k, float *c,              \
        Py_ssize_t ldc) {                                                                    \
        wino_tile(a, lda, b, k, c, ldc, R, 0);                                               \
    }                                                                                        \
    __attribute__((target("avx512f"), noinline)) static void wino_stream_##R(                \
        const float *a, Py_ssize_t lda, const float *b, Py_ssize_t k, float *c,              \
        Py_ssize_t ldc) {                                                                    \
        wino_tile(a, lda, b, k, c, ldc, R, 1);                                               \
    }
WINO_TILE(1)
WINO_TILE(2)
WINO_TILE(3)
WINO_TILE(4)
WINO_TILE(5)
WINO_TILE(6)
WINO_TILE(7)
WINO_TILE(8)
WINO_TILE(9)
WINO_TILE(10)
WINO_TILE(11)
WINO_TILE(12)
#undef WINO_TILE
typedef void (*WinoTile)(const float *, Py_ssize_t, const float *, Py_ssize_t, float *,
                         Py_ssize_t);
static const WinoTile wino_tiles[13] = {
    NULL,          wino_tile_1, wino_tile_2, wino_tile_3,  wino_tile_4,  wino_tile_5, wino_tile_6,
    wino_tile_7, wino_tile_8, wino_tile_9, wino_tile_10, wino_tile_11, wino_tile_12,
};
/* The first row group's tiles, which read each weight panel first: they prefetch it
 * WINO_PF_ROWS rows ahead (the weight comes from memory once per block in a run: 4 MB
 * for 256 x 256 channels). */
static const WinoTile wino_streams[13] = {
    NULL,           wino_stream_1, wino_stream_2,  wino_stream_3,  wino_stream_4,
    wino_stream_5,  wino_stream_6, wino_stream_7,  wino_stream_8,  wino_stream_9,
    wino_stream_10, wino_stream_11, wino_stream_12,
};

/* V of tiles t0 .. t0 + count - 1 into vbuf. */
__attribute__((target("avx512f"))) static void wino_input(const WinoConv *p, Py_ssize_t t0,
                                                         Py_ssize_t count, float *vbuf) {
    const Py_ssize_t th = (p->ho + 1) / 2, tw = (p->wo + 1) / 2, per_image = th * tw;
    const Py_ssize_t c = p->c, ks = p->tiles * p->cp; /* one tile element's rows */
    const __m512 zero = _mm512_setzero_ps();
    for (Py_ssize_t t = 0; t < count; t++) {
        const Py_ssize_t g = t0 + t, image = g / per_image, at = g % per_image;
        const Py_ssize_t r0 = 2 * (at / tw) - p->pad_top, s0 = 2 * (at % tw) - p->pad_left;
        const float *x = p->x + image * p->h * p->w * c;
        int row_in[4], col_in[4];
        for (int r = 0; r < 4; r++) {
            row_in[r] = r0 + r >= 0 && r0 + r < p->h;
            col_in[r] = s0 + r >= 0 && s0 + r < p->w;
        }
        for (Py_ssize_t c0 = 0; c0 < c; c0 += 16) {
            const __mmask16 mk = wino_mask(c - c0);
            __m512 d[4][4];
            for (int r = 0; r < 4; r++)
                for (int s = 0; s < 4; s++)
                    d[r][s] = row_in[r] && col_in[s]
                                  ? _mm512_maskz_loadu_ps(
                                        mk, x + ((r0 + r) * p->w + (s0 + s)) * c + c0)
                                  : zero;
            __m512 e[4][4];
            for (int s = 0; s < 4; s++) {
                e[0][s] = _mm512_sub_ps(d[0][s], d[2][s]);
                e[1][s] = _mm512_add_ps(d[1][s], d[2][s]);
                e[2][s] = _mm512_sub_ps(d[2][s], d[1][s]);
                e[3][s] = _mm512_sub_ps(d[1][s], d[3][s]);
            }
            for (int i = 0; i < 4; i++) {
                float *v = vbuf + (4 * i * p->tiles + t) * p->cp + c0;
                _mm512_store_ps(v, _mm512_sub_ps(e[i][0], e[i][2]));
                _mm512_store_ps(v + ks, _mm512_add_ps(e[i][1], e[i][2]));
                _mm512_store_ps(v + 2 * ks, _mm512_sub_ps(e[i][2], e[i][1]));
                _mm512_store_ps(v + 3 * ks, _mm512_sub_ps(e[i][1], e[i][3]));
            }
        }
    }
}

/* out of tiles t0 .. t0 + count - 1 from mbuf. */
__attribute__((target("avx512f"))) static void wino_output(const WinoConv *p, Py_ssize_t t0,
                                                          Py_ssize_t count, const float *mbuf) {
    const Py_ssize_t th = (p->ho + 1) / 2, tw = (p->wo + 1) / 2, per_image = th * tw;
    const Py_ssize_t m = p->m, ks = p->tiles * p->mp;
    for (Py_ssize_t t = 0; t < count; t++) {
        const Py_ssize_t g = t0 + t, image = g / per_image, at = g % per_image;
        const Py_ssize_t oy = 2 * (at / tw), ox = 2 * (at % tw);
        const int rows = oy + 1 < p->ho ? 2 : 1, cols = ox + 1 < p->wo ? 2 : 1;
        const Py_ssize_t o0 = ((image * p->ho + oy) * p->wo + ox) * m;
        for (Py_ssize_t c0 = 0; c0 < m; c0 += 16) {
            const __mmask16 mk = wino_mask(m - c0);
            const float *src = mbuf + t * p->mp + c0;
            __m512 q[16];
            for (int k = 0; k < 16; k++) q[k] = _mm512_load_ps(src + k * ks);
            if (p->bias) q[5] = _mm512_add_ps(q[5], _mm512_maskz_loadu_ps(mk, p->bias + c0));
            __m512 h[2][4];
            for (int j = 0; j < 4; j++) {
                h[0][j] = _mm512_add_ps(_mm512_add_ps(q[j], q[4 + j]), q[8 + j]);
                h[1][j] = _mm512_sub_ps(_mm512_sub_ps(q[4 + j], q[8 + j]), q[12 + j]);
            }
            for (int a = 0; a < rows; a++) {
                __m512 y[2];
                y[0] = _mm512_add_ps(_mm512_add_ps(h[a][0], h[a][1]), h[a][2]);
                y[1] = _mm512_sub_ps(_mm512_sub_ps(h[a][1], h[a][2]), h[a][3]);
                for (int b = 0; b < cols; b++) {
                    const Py_ssize_t at_out = o0 + (a * p->wo + b) * m + c0;
                    __m512 v = y[b];
                    if (p->add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, p->add + at_out));
                    v = act16(v, p->act, p->lo, p->hi);
                    _mm512_mask_storeu_ps(p->out + at_out, mk, v);
                }
            }
        }
    }
}

/* ---- The same at AVX2: 8-channel vectors, a 6 x 16 register tile (12 ymm) -------------
 * The same operations in the same order per element as the AVX-512 code above, so the
 * same numbers (a different tile shape only regroups which sums run together). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
wino_tile8(const float *a, Py_ssize_t lda, const float *b, Py_ssize_t k, float *c,
           Py_ssize_t ldc, const int R, const int STREAM) {
    __m256 c0[6], c1[6];
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) c0[i] = c1[i] = _mm256_setzero_ps();
    for (Py_ssize_t q = 0; q < k; q++, b += 16) {
        if (STREAM) _mm_prefetch((const char *)(b + WINO_PF_ROWS * 16), _MM_HINT_T1);
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const __m256 ai = _mm256_broadcast_ss(a + i * lda + q);
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
        _mm256_store_ps(c + i * ldc, c0[i]);
        _mm256_store_ps(c + i * ldc + 8, c1[i]);
    }
}
#define WINO_TILE8(R)                                                                        \
    __attribute__((target("avx2,fma"), noinline)) static void wino_tile8_##R(                \
        const float *a, Py_ssize_t lda, const float *b, Py_ssize_t k, float *c,              \
        Py_ssize_t ldc) {                                                                    \
        wino_tile8(a, lda, b, k, c, ldc, R, 0);                                              \
    }                                                                                        \
    __attribute__((target("avx2,fma"), noinline)) static void wino_stream8_##R(              \
        const float *a, Py_ssize_t lda, const float *b, Py_ssize_t k, float *c,              \
        Py_ssize_t ldc) {                                                                    \
        wino_tile8(a, lda, b, k, c, ldc, R, 1);                                              \
    }
WINO_TILE8(1)
WINO_TILE8(2)
WINO_TILE8(3)
WINO_TILE8(4)
WINO_TILE8(5)
WINO_TILE8(6)
#undef WINO_TILE8
static const WinoTile wino_tiles8[7] = {
    NULL, wino_tile8_1, wino_tile8_2, wino_tile8_3, wino_tile8_4, wino_tile8_5, wino_tile8_6,
};
static const WinoTile wino_streams8[7] = {
    NULL,           wino_stream8_1, wino_stream8_2, wino_stream8_3,
    wino_stream8_4, wino_stream8_5, wino_stream8_6,
};

__attribute__((target("avx2,fma"))) static void wino_input8(const WinoConv *p, Py_ssize_t t0,
                                                           Py_ssize_t count, float *vbuf) {
    const Py_ssize_t th = (p->ho + 1) / 2, tw = (p->wo + 1) / 2, per_image = th * tw;
    const Py_ssize_t c = p->c, ks = p->tiles * p->cp;
    const __m256 zero = _mm256_setzero_ps();
    for (Py_ssize_t t = 0; t < count; t++) {
        const Py_ssize_t g = t0 + t, image = g / per_image, at = g % per_image;
        const Py_ssize_t r0 = 2 * (at / tw) - p->pad_top, s0 = 2 * (at % tw) - p->pad_left;
        const float *x = p->x + image * p->h * p->w * c;
        int row_in[4], col_in[4];
        for (int r = 0; r < 4; r++) {
            row_in[r] = r0 + r >= 0 && r0 + r < p->h;
            col_in[r] = s0 + r >= 0 && s0 + r < p->w;
        }
        for (Py_ssize_t c0 = 0; c0 < c; c0 += 8) {
            const int whole = c - c0 >= 8;
            const __m256i mk = mask8((int)(c - c0 < 8 ? c - c0 : 8));
            __m256 d[4][4];
            for (int r = 0; r < 4; r++)
                for (int s_ = 0; s_ < 4; s_++) {
                    const float *at_x = x + ((r0 + r) * p->w + (s0 + s_)) * c + c0;
                    d[r][s_] = !(row_in[r] && col_in[s_]) ? zero
                               : whole                    ? _mm256_loadu_ps(at_x)
                                                          : _mm256_maskload_ps(at_x, mk);
                }
            __m256 e[4][4];
            for (int s_ = 0; s_ < 4; s_++) {
                e[0][s_] = _mm256_sub_ps(d[0][s_], d[2][s_]);
                e[1][s_] = _mm256_add_ps(d[1][s_], d[2][s_]);
                e[2][s_] = _mm256_sub_ps(d[2][s_], d[1][s_]);
                e[3][s_] = _mm256_sub_ps(d[1][s_], d[3][s_]);
            }
            for (int i = 0; i < 4; i++) {
                float *v = vbuf + (4 * i * p->tiles + t) * p->cp + c0;
                _mm256_store_ps(v, _mm256_sub_ps(e[i][0], e[i][2]));
                _mm256_store_ps(v + ks, _mm256_add_ps(e[i][1], e[i][2]));
                _mm256_store_ps(v + 2 * ks, _mm256_sub_ps(e[i][2], e[i][1]));
                _mm256_store_ps(v + 3 * ks, _mm256_sub_ps(e[i][1], e[i][3]));
            }
        }
    }
}

__attribute__((target("avx2,fma"))) static void wino_output8(const WinoConv *p, Py_ssize_t t0,
                                                            Py_ssize_t count,
                                                            const float *mbuf) {
    const Py_ssize_t th = (p->ho + 1) / 2, tw = (p->wo + 1) / 2, per_image = th * tw;
    const Py_ssize_t m = p->m, ks = p->tiles * p->mp;
    for (Py_ssize_t t = 0; t < count; t++) {
        const Py_ssize_t g = t0 + t, image = g / per_image, at = g % per_image;
        const Py_ssize_t oy = 2 * (at / tw), ox = 2 * (at % tw);
        const int rows = oy + 1 < p->ho ? 2 : 1, cols = ox + 1 < p->wo ? 2 : 1;
        const Py_ssize_t o0 = ((image * p->ho + oy) * p->wo + ox) * m;
        for (Py_ssize_t c0 = 0; c0 < m; c0 += 8) {
            const int lanes = (int)(m - c0 < 8 ? m - c0 : 8);
            const __m256i mk = mask8(lanes);
            const float *src = mbuf + t * p->mp + c0;
            __m256 q[16];
            for (int k = 0; k < 16; k++) q[k] = _mm256_load_ps(src + k * ks);
            if (p->bias) {
                const __m256 b = lanes == 8 ? _mm256_loadu_ps(p->bias + c0)
                                            : _mm256_maskload_ps(p->bias + c0, mk);
                q[5] = _mm256_add_ps(q[5], b);
            }
            __m256 h[2][4];
            for (int j = 0; j < 4; j++) {
                h[0][j] = _mm256_add_ps(_mm256_add_ps(q[j], q[4 + j]), q[8 + j]);
                h[1][j] = _mm256_sub_ps(_mm256_sub_ps(q[4 + j], q[8 + j]), q[12 + j]);
            }
            for (int a = 0; a < rows; a++) {
                __m256 y[2];
                y[0] = _mm256_add_ps(_mm256_add_ps(h[a][0], h[a][1]), h[a][2]);
                y[1] = _mm256_sub_ps(_mm256_sub_ps(h[a][1], h[a][2]), h[a][3]);
                for (int b = 0; b < cols; b++) {
                    const Py_ssize_t at_out = o0 + (a * p->wo + b) * m + c0;
                    __m256 v = y[b];
                    if (p->add) {
                        const __m256 d = lanes == 8 ? _mm256_loadu_ps(p->add + at_out)
                                                    : _mm256_maskload_ps(p->add + at_out, mk);
                        v = _mm256_add_ps(v, d);
                    }
                    v = act8(v, p->act, p->lo, p->hi);
                    store8n(p->out + at_out, v, lanes);
                }
            }
        }
    }
}

/* A level's pieces of the conv: its transforms, its tiles by rows (the first row group's
 * prefetching forms too), the rows a tile takes. */
typedef struct {
    void (*input)(const WinoConv *, Py_ssize_t, Py_ssize_t, float *);
    void (*output)(const WinoConv *, Py_ssize_t, Py_ssize_t, const float *);
    const WinoTile *tiles, *streams;
    int mr;
} WinoLevel;

static const WinoLevel wino_avx512 = {wino_input, wino_output, wino_tiles, wino_streams, 12};
static const WinoLevel wino_avx2 = {wino_input8, wino_output8, wino_tiles8, wino_streams8, 6};

/* The blocks of tiles: per block the input transform into vbuf, the 16 products by the
 * packed weight into mbuf (mr rows of V_k a tile, every panel of U_k), the output
 * transform into out. */
static void wino_conv(const WinoConv *p, const WinoLevel *lv, float *vbuf, float *mbuf) {
    const Py_ssize_t total = p->n * ((p->ho + 1) / 2) * ((p->wo + 1) / 2);
    const Py_ssize_t vk = p->tiles * p->cp, mk = p->tiles * p->mp, panel = p->c * p->nr;
    for (Py_ssize_t t0 = 0; t0 < total; t0 += p->tiles) {
        const Py_ssize_t count = total - t0 < p->tiles ? total - t0 : p->tiles;
        lv->input(p, t0, count, vbuf);
        for (int k = 0; k < 16; k++) {
            const float *a = vbuf + k * vk, *u = p->u + k * p->panels * panel;
            float *c = mbuf + k * mk;
            for (Py_ssize_t i0 = 0; i0 < count; i0 += lv->mr) {
                const int rows = count - i0 < lv->mr ? (int)(count - i0) : lv->mr;
                const WinoTile tile = i0 == 0 ? lv->streams[rows] : lv->tiles[rows];
                for (Py_ssize_t j = 0; j < p->panels; j++)
                    tile(a + i0 * p->cp, p->cp, u + j * panel, p->c,
                         c + i0 * p->mp + j * p->nr, p->mp);
            }
        }
        lv->output(p, t0, count, mbuf);
    }
}
#endif

/* Whether conv_nhwc's or held's sizes, panel width, activation and block are out of
 * range (ValueError naming `name` set): pads 0..2, an output no larger than the widest
 * padding gives. */
static int wino_refused(const WinoConv *g, const char *name) {
    if ((g->nr != 16 && g->nr != 32) || g->n < 1 || g->h < 1 || g->w < 1 || g->c < 1 ||
        g->m < 1 || g->ho < 1 || g->wo < 1 || g->tiles < 1 || g->pad_top < 0 ||
        g->pad_left < 0 || g->pad_top > 2 || g->pad_left > 2 || g->c > (1 << 20) ||
        g->m > (1 << 20) || g->h > (1 << 15) || g->w > (1 << 15) || g->n > (1 << 20) ||
        g->tiles > (1 << 16) || g->act < 0 || g->act > ACT_LAST || g->ho > g->h + 2 * 2 - 2 ||
        g->wo > g->w + 2 * 2 - 2) {
        PyErr_Format(PyExc_ValueError, "%s: sizes out of range", name);
        return 1;
    }
    return 0;
}

/* wino_conv with its block buffers, the GIL released: 0, or -1 with MemoryError set.
 * p->panels, cp and mp are set here. */
static int wino_run(WinoConv *p) {
    p->panels = (p->m + p->nr - 1) / p->nr;
    p->cp = (p->c + 15) / 16 * 16;
    p->mp = p->panels * p->nr;
    const size_t floats = (size_t)(16 * p->tiles * (p->cp + p->mp));
    void *raw = PyMem_RawMalloc(floats * sizeof(float) + 64);
    if (!raw) {
        PyErr_NoMemory();
        return -1;
    }
    float *vbuf = (float *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    float *mbuf = vbuf + 16 * p->tiles * p->cp;
#if ONNXVIZ_X86
    Py_BEGIN_ALLOW_THREADS;
    wino_conv(p, p->nr == 32 ? &wino_avx512 : &wino_avx2, vbuf, mbuf);
    Py_END_ALLOW_THREADS;
#else
    (void)vbuf;
    (void)mbuf;
#endif
    PyMem_RawFree(raw);
    return 0;
}

static PyObject *py_panel_width(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return PyLong_FromLong(wino_panel(level));
}

static PyObject *py_conv_nhwc(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *uo, *bo, *ao, *oo;
    WinoConv p;
    memset(&p, 0, sizeof p);
    if (!PyArg_ParseTuple(args, "O(nnnn)OinOOO(nn)(nn)iffn:conv_nhwc", &xo, &p.n, &p.h, &p.w,
                          &p.c, &uo, &p.nr, &p.m, &bo, &ao, &oo, &p.ho, &p.wo, &p.pad_top,
                          &p.pad_left, &p.act, &p.lo, &p.hi, &p.tiles))
        return NULL;
    if (wino_refused(&p, "conv_nhwc")) return NULL;
    p.panels = (p.m + p.nr - 1) / p.nr;
    const Py_ssize_t out_count = p.n * p.ho * p.wo * p.m;
    Py_buffer xv, uv, bv, av, ov;
    if (onnxviz_get_floats(xo, &xv, p.n * p.h * p.w * p.c, 1, 0, "conv_nhwc x") < 0) return NULL;
    if (onnxviz_get_floats(uo, &uv, 16 * p.panels * p.c * p.nr, 1, 0, "conv_nhwc u") < 0) {
        PyBuffer_Release(&xv);
        return NULL;
    }
    int have_b = 0, have_a = 0, ok = 0, ran = 0;
    if (((uintptr_t)uv.buf & 63) != 0) {
        PyErr_SetString(PyExc_ValueError, "conv_nhwc: u must start at a multiple of 64 bytes");
        goto done;
    }
    if (bo != Py_None) {
        if (onnxviz_get_floats(bo, &bv, p.m, 1, 0, "conv_nhwc bias") < 0) goto done;
        have_b = 1;
    }
    if (ao != Py_None) {
        if (onnxviz_get_floats(ao, &av, out_count, 1, 0, "conv_nhwc addend") < 0) goto done;
        have_a = 1;
    }
    if (onnxviz_get_floats(oo, &ov, out_count, 1, 1, "conv_nhwc out") < 0) goto done;
    if (ov.buf == xv.buf) {
        PyErr_SetString(PyExc_ValueError, "conv_nhwc: out must not be x");
        PyBuffer_Release(&ov);
        goto done;
    }
    p.x = xv.buf;
    p.u = uv.buf;
    p.bias = have_b ? bv.buf : NULL;
    p.add = have_a ? av.buf : NULL;
    p.out = ov.buf;
    ran = wino_panel(level) == p.nr; /* the arguments are checked at every level */
    ok = !ran || wino_run(&p) == 0;
    PyBuffer_Release(&ov);
done:
    if (have_a) PyBuffer_Release(&av);
    if (have_b) PyBuffer_Release(&bv);
    PyBuffer_Release(&uv);
    PyBuffer_Release(&xv);
    if (!ok) return NULL;
    return PyBool_FromLong(ran);
}

/* ---- held: conv_nhwc as a fused chain's compiled call from the run loop -------------------
 *
 * held(u, nr, bias, (N, H, W, C), M, (H', W'), (pad_top, pad_left), act, lo, hi, tiles, nargs,
 * residual, places, expect, fallback, ndarray, empty, uint8, float32[, inplace]): a call that takes
 * (x, constants..., [residual]) with x a channels-last float32 (N, C, H, W) image, the
 * constants the objects `expect` at `places` and the residual (when the chain adds one)
 * channels-last of the output's shape, and returns conv_nhwc's result in a new 64-byte
 * aligned channels-last array (with `inplace`, over a residual nothing else holds:
 * held_residual_is_dead): the runner's (`nn_conv_nhwc._Direct._run_winograd`) own call
 * and numbers without its Python.  Every other call (another layout or shape, a
 * level whose panels are not nr wide) goes to `fallback`. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    HeldCall call;
    HeldWeights weights; /* u and bias */
    WinoConv geometry;   /* sizes, act and tiles; no buffers */
    int inplace;         /* the result may go over a residual nothing else holds */
} WinoHeld;

static PyObject *held_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    WinoHeld *self = (WinoHeld *)obj;
    const HeldCall *h = &self->call;
    const WinoConv *g = &self->geometry;
    if (wino_panel(level) != g->nr || !held_call_takes(h, args, nargsf, kwnames)) goto other;
    Py_buffer xb, db;
    if (!onnxviz_channels_last_view(args[0], h->ndarray, &xb, g->n, g->c, g->h, g->w))
        goto other;
    const int have_add = h->residual >= 0;
    if (have_add && !onnxviz_channels_last_view(args[h->residual], h->ndarray, &db, g->n,
                                                g->m, g->ho, g->wo)) {
        PyBuffer_Release(&xb);
        goto other;
    }
    float *out_data = NULL;
    PyObject *out = NULL;
    if (have_add && self->inplace && held_residual_is_dead(args[h->residual], h->ndarray)) {
        /* The output transform reads each addend float just before it stores that
         * float's result, and no other tile reads it: the sums go over the residual, no
         * fresh output to fault in (a ResNet block's second 3x3 conv). */
        out = Py_NewRef(args[h->residual]);
        out_data = db.buf;
    } else {
        out = onnxviz_new_channels_last(h->empty, h->ndarray, h->u8, h->f32, g->n, g->m, g->ho,
                                        g->wo, &out_data);
    }
    if (out) {
        WinoConv p = *g;
        p.x = xb.buf;
        p.u = self->weights.wb.buf;
        p.bias = held_weights_bias(&self->weights);
        p.add = have_add ? db.buf : NULL;
        p.out = out_data;
        if (wino_run(&p) < 0) Py_CLEAR(out);
    }
    if (have_add) PyBuffer_Release(&db);
    PyBuffer_Release(&xb);
    return out;
other:
    return held_call_other(h, args, nargsf, kwnames);
}

static void held_release(WinoHeld *self) { held_weights_release(&self->weights); }

HELD_CALL_TYPE(WinoHeld, WinoHeldType, held, "onnxviz.runtime.native._winograd.Held",
               "A fused channels-last F(2x2, 3x3) conv (held()).", held_release)

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *uo, *bo, *places, *expect, *fallback, *ndarray, *empty, *u8, *f32;
    WinoConv g;
    memset(&g, 0, sizeof g);
    Py_ssize_t nargs, residual;
    int inplace = 0;
    if (!PyArg_ParseTuple(args, "OiO(nnnn)n(nn)(nn)iffnnnOOOOOOO|p:held", &uo, &g.nr, &bo,
                          &g.n, &g.h, &g.w, &g.c, &g.m, &g.ho, &g.wo, &g.pad_top, &g.pad_left,
                          &g.act, &g.lo, &g.hi, &g.tiles, &nargs, &residual, &places, &expect,
                          &fallback, &ndarray, &empty, &u8, &f32, &inplace))
        return NULL;
    if (wino_refused(&g, "held")) return NULL;
    WinoHeld *obj = PyObject_GC_New(WinoHeld, &WinoHeldType);
    if (!obj) return NULL;
    obj->vectorcall = held_vectorcall;
    memset(&obj->weights, 0, sizeof obj->weights);
    obj->geometry = g;
    obj->inplace = inplace && residual > 0;
    if (held_call_init(&obj->call, places, expect, fallback, ndarray, empty, u8, f32, nargs,
                       residual, "held") < 0) {
        PyObject_GC_Del(obj); /* nothing held yet, not tracked */
        return NULL;
    }
    PyObject_GC_Track((PyObject *)obj);
    const Py_ssize_t panels = (g.m + g.nr - 1) / g.nr;
    if (held_weights_take(&obj->weights, uo, 16 * panels * g.c * g.nr, bo, g.m) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    if (((uintptr_t)obj->weights.wb.buf & 63) != 0) {
        PyErr_SetString(PyExc_ValueError, "held: u must start at a multiple of 64 bytes");
        Py_DECREF(obj);
        return NULL;
    }
    return (PyObject *)obj;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"input", py_input, METH_VARARGS,
     "input(x, C, H, W, pad_top, pad_left, th, tw, v[, channels_last]): V = B^T d B of "
     "every 4x4 tile of the zero-padded float32 image x (C, H, W), or (H, W, C) when "
     "channels_last, into v (16, C, th + 1, tw + 1)."},
    {"output", py_output, METH_VARARGS,
     "output(m, M, th, tw, bias, y): A^T m A of the products m (16, M, th * (tw + 1)), "
     "bias (M floats or None) added to m_5 first, into y (M, 2 th, 2 tw)."},
    {"conv_nhwc", py_conv_nhwc, METH_VARARGS,
     "conv_nhwc(x, (N, H, W, C), u, nr, M, bias, addend, out, (H', W'), (pad_top, "
     "pad_left), act, lo, hi, tiles): the F(2x2, 3x3) conv of the channels-last float32 x "
     "into the channels-last out, `tiles` output blocks at a time, u packed in panels of "
     "nr channels; False (nothing done) where this level's panels are not nr wide (32 at "
     "AVX-512, 16 at AVX2, none below)."},
    {"panel_width", py_panel_width, METH_NOARGS,
     "The packed weight's panel width at this level (32 AVX-512, 16 AVX2, 0 none)."},
    {"held", py_held, METH_VARARGS,
     "held(u, nr, bias, (N, H, W, C), M, (H', W'), (pad_top, pad_left), act, lo, hi, tiles, "
     "nargs, residual, places, expect, fallback, ndarray, empty, uint8, float32[, inplace]): "
     "conv_nhwc as a compiled call of a chain's arguments (the section's comment)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_winograd", NULL, -1, methods};

PyMODINIT_FUNC PyInit__winograd(void) {
    if (PyType_Ready(&WinoHeldType) < 0) return NULL;
    return PyModule_Create(&module);
}
