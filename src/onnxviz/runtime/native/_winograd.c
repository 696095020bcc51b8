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

#include "levels.h"
#include <string.h>

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

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"input", py_input, METH_VARARGS,
     "input(x, C, H, W, pad_top, pad_left, th, tw, v[, channels_last]): V = B^T d B of "
     "every 4x4 tile of the zero-padded float32 image x (C, H, W), or (H, W, C) when "
     "channels_last, into v (16, C, th + 1, tw + 1)."},
    {"output", py_output, METH_VARARGS,
     "output(m, M, th, tw, bias, y): A^T m A of the products m (16, M, th * (tw + 1)), "
     "bias (M floats or None) added to m_5 first, into y (M, 2 th, 2 tw)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_winograd", NULL, -1, methods};

PyMODINIT_FUNC PyInit__winograd(void) { return PyModule_Create(&module); }
