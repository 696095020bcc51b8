/* onnxviz.runtime.native._transpose: a strided array's values in C order, by tiles.
 *
 *   copy(x, y) -> None: y (a C-contiguous buffer of x's length and item size) gets x's
 *   values in C order; x is any strided buffer (strides of any sign, as numpy exports a
 *   transposed or reversed view) of items of 1, 2, 4 or 8 bytes.
 *
 * Why: a permuted view read in C order walks memory with a large stride on its last
 * axis: numpy's copy of a ConvNeXt block's NCHW -> NHWC permute ([1, 48, 32, 32] as
 * [1, 32, 32, 48]) took 139 us for 49K floats, each of its 48-float output rows reading
 * 48 cache lines 4 KB apart, which share one set of the L1 cache.  Here, after the
 * axes of size 1 are dropped and neighbours that stay contiguous are merged, the axis x
 * is densest along (its smallest stride) and y's last axis are walked in tiles of
 * TILE_IN x TILE_OUT items: TILE_IN lines read, each TILE_OUT items long, the tile's
 * rows written, the other axes in C order around it.  Where x's last axis is already
 * its densest, rows are copied as they are (memcpy for unit stride).
 *
 * A copy moves bits: the same values whatever the order.  Levels (native/__init__.py):
 * 0 the tiles above in plain C; from 1 (AVX2) a dense float32 tile is 8 x 8 blocks
 * transposed in registers (unpack, shuffle, permute). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <stdint.h>
#include <string.h>

static int level = 0;

/* Tile sizes in items: TILE_IN lines of x (its densest axis) a tile, TILE_OUT items of
 * y's rows each.  8 lines stay within one L1 set's ways even 4 KB apart. */
enum { TILE_IN = 8, TILE_OUT = 32 };

typedef struct {
    int nd;
    Py_ssize_t shape[PyBUF_MAX_NDIM];
    Py_ssize_t in[PyBUF_MAX_NDIM];  /* x's strides, bytes */
    Py_ssize_t out[PyBUF_MAX_NDIM]; /* y's strides, bytes (C order) */
} Layout;

/* x's shape and strides with axes of size 1 dropped and neighbours merged where both x
 * and y step over them as one axis; y's C-order strides alongside. */
static void simplify(const Py_buffer *v, Layout *L) {
    L->nd = 0;
    for (int d = 0; d < v->ndim; d++) {
        if (v->shape[d] == 1) continue;
        L->shape[L->nd] = v->shape[d];
        L->in[L->nd] = v->strides[d];
        L->nd++;
    }
    /* y's strides for this shape */
    Py_ssize_t s = v->itemsize;
    for (int d = L->nd - 1; d >= 0; d--) {
        L->out[d] = s;
        s *= L->shape[d];
    }
    /* merge d and d + 1 when x steps over d as d + 1's whole extent (y always does) */
    int w = 0;
    for (int d = 1; d < L->nd; d++) {
        if (L->in[w] == L->in[d] * L->shape[d]) {
            L->shape[w] *= L->shape[d];
            L->in[w] = L->in[d];
            L->out[w] = L->out[d];
        } else {
            w++;
            L->shape[w] = L->shape[d];
            L->in[w] = L->in[d];
            L->out[w] = L->out[d];
        }
    }
    L->nd = L->nd ? w + 1 : 0;
}

static inline Py_ssize_t mag(Py_ssize_t s) { return s < 0 ? -s : s; }

#define TILE_COPY(NAME, T)                                                                 \
    static void NAME(const char *src, char *dst, Py_ssize_t rows, Py_ssize_t cols,         \
                     Py_ssize_t in_row, Py_ssize_t in_col, Py_ssize_t out_row) {            \
        /* dst[i * out_row + j] = src[i * in_row + j * in_col] for i < rows, j < cols,     \
         * with x dense along i (its lines) and y along j; strides in bytes */             \
        for (Py_ssize_t i0 = 0; i0 < rows; i0 += TILE_OUT) {                               \
            const Py_ssize_t i1 = i0 + TILE_OUT < rows ? i0 + TILE_OUT : rows;             \
            for (Py_ssize_t j0 = 0; j0 < cols; j0 += TILE_IN) {                            \
                const Py_ssize_t j1 = j0 + TILE_IN < cols ? j0 + TILE_IN : cols;           \
                for (Py_ssize_t i = i0; i < i1; i++) {                                     \
                    const char *s = src + i * in_row;                                      \
                    T *d = (T *)(dst + i * out_row);                                       \
                    for (Py_ssize_t j = j0; j < j1; j++) {                                 \
                        T v;                                                               \
                        memcpy(&v, s + j * in_col, sizeof v);                              \
                        d[j] = v;                                                          \
                    }                                                                      \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
    }

TILE_COPY(tile1, uint8_t)
TILE_COPY(tile2, uint16_t)
TILE_COPY(tile4, uint32_t)
TILE_COPY(tile8, uint64_t)

#if ONNXVIZ_X86
#include <immintrin.h>
#define HAVE_AVX2_TILES 1
/* dst rows i (ld floats apart) = columns of the 8 x-lines j (ls floats apart), 8 x 8:
 * dst[i * ld + j] = src[j * ls + i]. */
__attribute__((target("avx2"))) static inline void t8x8(const float *s, Py_ssize_t ls,
                                                        float *d, Py_ssize_t ld) {
    __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ls);
    __m256 r2 = _mm256_loadu_ps(s + 2 * ls), r3 = _mm256_loadu_ps(s + 3 * ls);
    __m256 r4 = _mm256_loadu_ps(s + 4 * ls), r5 = _mm256_loadu_ps(s + 5 * ls);
    __m256 r6 = _mm256_loadu_ps(s + 6 * ls), r7 = _mm256_loadu_ps(s + 7 * ls);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(d + ld, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(d + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(d + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(d + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(d + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(d + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(d + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* tile4's copy for x dense along i (in_row 4 bytes) and strides that are whole floats:
 * 8 x 8 blocks by t8x8, the edges by tile4. */
__attribute__((target("avx2"))) static void tile4_avx2(const char *src, char *dst,
                                                       Py_ssize_t rows, Py_ssize_t cols,
                                                       Py_ssize_t in_col, Py_ssize_t out_row) {
    const float *s = (const float *)src;
    float *d = (float *)dst;
    const Py_ssize_t ls = in_col / 4, ld = out_row / 4;
    const Py_ssize_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
    for (Py_ssize_t i = 0; i < r8; i += 8)
        for (Py_ssize_t j = 0; j < c8; j += 8) t8x8(s + j * ls + i, ls, d + i * ld + j, ld);
    if (c8 < cols) tile4(src + c8 * in_col, dst + c8 * 4, r8, cols - c8, 4, in_col, out_row);
    if (r8 < rows) tile4(src + r8 * 4, dst + r8 * out_row, rows - r8, cols, 4, in_col, out_row);
}
#else
#define HAVE_AVX2_TILES 0
#endif

static void copy_layout(const Layout *L, const char *src, char *dst, Py_ssize_t item) {
    const int nd = L->nd;
    if (nd == 0) {
        memcpy(dst, src, (size_t)item);
        return;
    }
    const int last = nd - 1;
    /* the axis x is densest along */
    int p = last;
    for (int d = 0; d < nd; d++)
        if (mag(L->in[d]) < mag(L->in[p])) p = d;
    const int tiled = p != last;
    /* the axes walked around the inner block: all but `last` (and `p` when tiled) */
    int outer[PyBUF_MAX_NDIM], n_outer = 0;
    for (int d = 0; d < last; d++)
        if (!(tiled && d == p)) outer[n_outer++] = d;
    Py_ssize_t idx[PyBUF_MAX_NDIM] = {0};
    for (;;) {
        const char *s = src;
        char *t = dst;
        for (int k = 0; k < n_outer; k++) {
            s += idx[k] * L->in[outer[k]];
            t += idx[k] * L->out[outer[k]];
        }
        const Py_ssize_t cols = L->shape[last], in_col = L->in[last];
        if (!tiled) {
            if (in_col == item) {
                memcpy(t, s, (size_t)(cols * item));
            } else {
                switch (item) {
                case 1: tile1(s, t, 1, cols, 0, in_col, 0); break;
                case 2: tile2(s, t, 1, cols, 0, in_col, 0); break;
                case 4: tile4(s, t, 1, cols, 0, in_col, 0); break;
                default: tile8(s, t, 1, cols, 0, in_col, 0); break;
                }
            }
        } else {
            /* rows: axis p (x's lines run along it), columns: y's last axis */
            const Py_ssize_t rows = L->shape[p], in_row = L->in[p], out_row = L->out[p];
            /* y's row i starts at i * out_row and holds `cols` items: the tile writes
             * items j of rows i, reading x at i * in_row + j * in_col */
#if HAVE_AVX2_TILES
            if (item == 4 && level >= 1 && in_row == 4 && in_col % 4 == 0 && out_row % 4 == 0 &&
                ((uintptr_t)s & 3) == 0) {
                tile4_avx2(s, t, rows, cols, in_col, out_row);
                goto next;
            }
#endif
            switch (item) {
            case 1: tile1(s, t, rows, cols, in_row, in_col, out_row); break;
            case 2: tile2(s, t, rows, cols, in_row, in_col, out_row); break;
            case 4: tile4(s, t, rows, cols, in_row, in_col, out_row); break;
            default: tile8(s, t, rows, cols, in_row, in_col, out_row); break;
            }
        }
#if HAVE_AVX2_TILES
    next:;
#endif
        int k = n_outer - 1;
        for (; k >= 0; k--) {
            if (++idx[k] < L->shape[outer[k]]) break;
            idx[k] = 0;
        }
        if (k < 0) break;
    }
}

static PyObject *py_copy(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *yo;
    if (!PyArg_ParseTuple(args, "OO:copy", &xo, &yo)) return NULL;
    Py_buffer x, y;
    if (PyObject_GetBuffer(xo, &x, PyBUF_STRIDES | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(yo, &y, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t item = x.itemsize;
    Py_ssize_t count = 1;
    for (int d = 0; d < x.ndim; d++) count *= x.shape[d];
    if ((item != 1 && item != 2 && item != 4 && item != 8) || y.itemsize != item ||
        y.len != count * item || x.ndim > PyBUF_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError,
                        "copy: y must be C-contiguous, of x's length and item size (1, 2, 4 "
                        "or 8 bytes)");
        goto done;
    }
    if (count) {
        Layout L;
        simplify(&x, &L);
        Py_BEGIN_ALLOW_THREADS;
        copy_layout(&L, (const char *)x.buf, (char *)y.buf, item);
        Py_END_ALLOW_THREADS;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&x);
    PyBuffer_Release(&y);
    return result;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"copy", py_copy, METH_VARARGS,
     "copy(x, y): y (C-contiguous, x's length and item size) = x's values in C order; "
     "x any strided buffer of 1, 2, 4 or 8-byte items."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_transpose", NULL, -1, methods};

PyMODINIT_FUNC PyInit__transpose(void) { return PyModule_Create(&module); }
