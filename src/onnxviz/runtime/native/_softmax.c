/* onnxviz.runtime.native._softmax: softmax over the rows of a float32 array, each row in
 * three sweeps that stay in L1.
 *
 *   softmax(x, y, n) -> bool: y = softmax of each row of n floats of x (x and y contiguous
 *   float32 buffers of one length, a multiple of n; y may be x).  False, with y partly
 *   written, when some row's maximum is not finite (a NaN or +inf in it, or every value
 *   -inf): the caller's numpy path says what such rows give.
 *
 * Per row: its maximum m; e_i = exp(x_i - m) (vector_math.h's exp), written to y and
 * summed; then y_i = e_i * (1 / sum).  A term below e^-87 (1.6e-38, the smallest normal
 * floats) is 0: its exp is taken at -87 and replaced, because a product that underflows
 * into the subnormals costs a microcode assist on Intel cores (BERT's masked scores ran
 * 5x slower); a -inf, a masked key, gives 0 as in the numpy path, and a share below
 * 1.6e-38 of its row's sum is flushed to 0.  The sum is at least 1 (the maximum's own
 * term), so the reciprocal is finite.  The row's own maximum: unlike the numpy path's one
 * shift for the whole array, no row can underflow however far below the others it lies.
 *
 * The sum runs in 16 partial sums (element i into sum i mod 16, the last n mod 16 as
 * one more block padded with -inf), added in one fixed order at the end, at every
 * level: one 16-lane vector, two of 8 or four of 4.  With exp's bits the same at every
 * level (vector_math.h), every level gives the same bits.
 *
 * Why: numpy's path makes six passes over the scores (max, min, subtract, exp, a
 * matrix-vector product for the sums, the scaling) with a temporary for each; BERT-base's
 * 12 x 128 x 128 scores a layer took 0.30 ms, against 0.08 for onnxruntime's softmax.
 *
 * Levels (native/__init__.py): 0 generic C (4-lane vectors); 1 AVX2; 2 and 3 AVX-512F. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include "vector_types.h"
#include <math.h>
#include <stdint.h>
#include <string.h>


static int level = 0;

enum { LANES = 16 }; /* partial sums, whatever the level's vector width */

/* The rows go in groups of GROUP, each step for every row of the group before the next
 * step: a row's steps are one chain (its maximum, then its exps, then their sum, then
 * the scaling), about 300 cycles of latency on a 128-float row with little to overlap;
 * rows of a group are independent, so the core overlaps their chains (BERT's scores:
 * 175 us a layer one row at a time, 2.5x less in groups of 8). */
enum { GROUP = 8 };

#define SOFTMAX_LEVEL                                                                      \
    /* The row's maximum (-inf: every value -inf), or NaN when a NaN is in it. */          \
    ATTR static inline float RS(row_max)(const float *xr, Py_ssize_t n, Py_ssize_t whole) { \
        float m = -INFINITY;                                                               \
        int nan = 0;                                                                       \
        Py_ssize_t i = 0;                                                                  \
        if (whole) {                                                                       \
            VF mv = RS(splat)(-INFINITY);                                                  \
            VI bad = (VI)RS(splat)(0.0f);                                                  \
            for (; i < whole; i += VW) {                                                   \
                VF a;                                                                      \
                memcpy(&a, xr + i, sizeof a);                                              \
                bad |= (VI)(a != a);                                                       \
                mv = RS(select)(a > mv, a, mv);                                            \
            }                                                                              \
            float lanes[VW];                                                               \
            int flags[VW];                                                                 \
            memcpy(lanes, &mv, sizeof lanes);                                              \
            memcpy(flags, &bad, sizeof flags);                                             \
            for (int l = 0; l < VW; l++) {                                                 \
                m = lanes[l] > m ? lanes[l] : m;                                           \
                nan |= flags[l];                                                           \
            }                                                                              \
        }                                                                                  \
        for (; i < n; i++) {                                                               \
            nan |= xr[i] != xr[i];                                                         \
            m = xr[i] > m ? xr[i] : m;                                                     \
        }                                                                                  \
        return nan ? NAN : m;                                                              \
    }                                                                                      \
    /* One block of LANES floats: dst = exp(src - m) (0 below e^-87), each added to its   \
     * partial sum (lane l of the block into acc's lane l). */                             \
    ATTR static inline void RS(block_exp)(const float *src, float *dst, VF mv, VF *acc) {  \
        const VF lo = RS(splat)(-87.0f), zero = RS(splat)(0.0f);                           \
        for (int p = 0; p < LANES / VW; p++) {                                             \
            VF a;                                                                          \
            memcpy(&a, src + p * VW, sizeof a);                                            \
            a = a - mv;                                                                    \
            const VI under = a < lo;                                                       \
            a = RS(select)(under, zero, RS(exp)(RS(select)(under, lo, a)));                \
            memcpy(dst + p * VW, &a, sizeof a);                                            \
            acc[p] = acc[p] + a;                                                           \
        }                                                                                  \
    }                                                                                      \
    /* y = exp(x - m) (0 below e^-87), and their sum in the fixed order. */                \
    ATTR static inline float RS(row_exp)(const float *xr, float *yr, float m, Py_ssize_t n, \
                                         Py_ssize_t whole) {                               \
        VF acc[LANES / VW];                                                                \
        for (int p = 0; p < LANES / VW; p++) acc[p] = RS(splat)(0.0f);                     \
        const VF mv = RS(splat)(m);                                                        \
        Py_ssize_t i = 0;                                                                  \
        for (; i < whole; i += LANES) RS(block_exp)(xr + i, yr + i, mv, acc);              \
        if (i < n) {                                                                       \
            /* The tail as one more block padded with -inf (an exp of 0, added to its      \
             * partial sum as +0: no change), element i still into sum i mod LANES (i      \
             * from a multiple of LANES); one exp a float cost ViT's 197-float rows 1.3x   \
             * the time of 192-float ones. */                                              \
            float pad[LANES], e[LANES];                                                    \
            const Py_ssize_t tail = n - i;                                                 \
            for (int l = 0; l < LANES; l++) pad[l] = l < tail ? xr[i + l] : -INFINITY;     \
            RS(block_exp)(pad, e, mv, acc);                                                \
            memcpy(yr + i, e, (size_t)tail * sizeof(float));                               \
        }                                                                                  \
        float part[LANES];                                                                 \
        memcpy(part, acc, sizeof part);                                                    \
        /* the partial sums in one fixed order: halves, then halves of halves */           \
        for (int w = LANES / 2; w >= 1; w /= 2)                                            \
            for (int l = 0; l < w; l++) part[l] = part[l] + part[l + w];                   \
        return part[0];                                                                    \
    }                                                                                      \
    ATTR static inline void RS(row_scale)(float *yr, float inv, Py_ssize_t n) {            \
        const VF iv = RS(splat)(inv);                                                      \
        Py_ssize_t i = 0;                                                                  \
        for (; i + VW <= n; i += VW) {                                                     \
            VF a;                                                                          \
            memcpy(&a, yr + i, sizeof a);                                                  \
            a = a * iv;                                                                    \
            memcpy(yr + i, &a, sizeof a);                                                  \
        }                                                                                  \
        for (; i < n; i++) yr[i] = yr[i] * inv;                                            \
    }                                                                                      \
    /* 1 when every row's maximum is finite, else 0 (some rows may be done). */            \
    ATTR static int RS(rows)(const float *x, float *y, Py_ssize_t rows, Py_ssize_t n) {     \
        const Py_ssize_t whole = n / LANES * LANES;                                        \
        float m[GROUP], inv[GROUP];                                                        \
        for (Py_ssize_t r0 = 0; r0 < rows; r0 += GROUP) {                                  \
            const int g = rows - r0 < GROUP ? (int)(rows - r0) : GROUP;                    \
            const float *xg = x + r0 * n;                                                  \
            float *yg = y + r0 * n;                                                        \
            int finite = 1;                                                                \
            for (int r = 0; r < g; r++) {                                                  \
                m[r] = RS(row_max)(xg + r * n, n, whole);                                  \
                finite &= m[r] > -INFINITY && m[r] < INFINITY;                             \
            }                                                                              \
            if (!finite) return 0;                                                         \
            for (int r = 0; r < g; r++)                                                    \
                inv[r] = 1.0f / RS(row_exp)(xg + r * n, yg + r * n, m[r], n, whole);       \
            for (int r = 0; r < g; r++) RS(row_scale)(yg + r * n, inv[r], n);              \
        }                                                                                  \
        return 1;                                                                          \
    }

#define VECTOR_LEVEL_BODY SOFTMAX_LEVEL
#include "vector_levels.h"

#if ONNXVIZ_X86
/* Rows of at most LANES floats at AVX-512 (an attention's scores over a few keys: a tiny
 * transformer's 2 x 4 x 7 x 7), each in vector registers: the row loaded with its tail
 * lanes -inf (row_exp's padding), its maximum, block_exp over it as rows_avx512 runs it,
 * the 16 partial sums added in the same fixed order (halves, then halves of halves: each
 * step a shuffle and one add, lane l getting part[l] + part[l + w]), then y = e * (1 /
 * sum): the same operations on the same values, so the same bits, without the scalar
 * padding, sums and scaling that cost 56 rows of 7 floats 3.2 us. */
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))) static int
short_rows_avx512(const float *x, float *y, Py_ssize_t rows, Py_ssize_t n) {
    const __mmask16 m = (__mmask16)((1u << n) - 1u);
    const __m512 lowest = _mm512_set1_ps(-INFINITY);
    for (Py_ssize_t r = 0; r < rows; r++) {
        const __m512 v = _mm512_mask_loadu_ps(lowest, m, x + r * n);
        if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) return 0; /* a NaN in the row */
        const float mx = _mm512_reduce_max_ps(v);
        if (!(mx > -INFINITY && mx < INFINITY)) return 0;
        float pad[LANES], e[LANES];
        _mm512_storeu_ps(pad, v);
        v16f acc[LANES / 16] = {splat_avx512(0.0f)};
        block_exp_avx512(pad, e, splat_avx512(mx), acc);
        __m512 t = (__m512)acc[0];
        t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0x4E)); /* w = 8 */
        t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1)); /* w = 4 */
        t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4E));        /* w = 2 */
        t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xB1));        /* w = 1 */
        const float inv = 1.0f / _mm512_cvtss_f32(t);
        _mm512_mask_storeu_ps(y + r * n, m, _mm512_mul_ps(_mm512_loadu_ps(e), _mm512_set1_ps(inv)));
    }
    return 1;
}
#endif

static PyObject *py_softmax(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *yo;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOn:softmax", &xo, &yo, &n)) return NULL;
    Py_buffer xv, yv;
    if (onnxviz_get_float_pair(xo, yo, &xv, &yv, "softmax") < 0) return NULL;
    const Py_ssize_t total = xv.len / 4;
    if (n < 1 || total % n) {
        PyBuffer_Release(&xv);
        PyBuffer_Release(&yv);
        PyErr_SetString(PyExc_ValueError, "softmax: the length is not a multiple of n >= 1");
        return NULL;
    }
    const float *x = xv.buf;
    float *y = yv.buf;
    const Py_ssize_t rows = total / n;
    int done;
    Py_BEGIN_ALLOW_THREADS;
#if ONNXVIZ_X86
    if (level >= 2 && n <= LANES)
        done = short_rows_avx512(x, y, rows, n);
    else if (level >= 2)
        done = rows_avx512(x, y, rows, n);
    else if (level == 1)
        done = rows_avx2(x, y, rows, n);
    else
#endif
        done = rows_generic(x, y, rows, n);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&xv);
    PyBuffer_Release(&yv);
    return PyBool_FromLong(done);
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"softmax", py_softmax, METH_VARARGS,
     "softmax(x, y, n) -> bool: y = softmax over each row of n floats of x (float32 "
     "contiguous buffers of one length; y may be x); False when a row's maximum is not "
     "finite."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_softmax", NULL, -1, methods};

PyMODINIT_FUNC PyInit__softmax(void) { return PyModule_Create(&module); }
