/* onnxviz.runtime.native._half: float32 <-> float16 conversions with numpy's bits.
 *
 *   to_half(x, y) -> None:   y (float16, C-contiguous, x's length) = x (float32,
 *                            C-contiguous) rounded to the nearest float16, ties to even;
 *   to_single(x, y) -> None: y (float32) = x (float16), exactly.
 *
 * The bits are numpy's astype's for every input: overflow to infinity, gradual underflow
 * through the float16 subnormals, signed zeros, and NaN kept as NaN with its payload's top
 * bits (float32 -> float16: 0x7c00 | (mantissa >> 13), and 0x7c01 when those are zero;
 * float16 -> float32: the mantissa moved up 13 bits, a signalling NaN left signalling).
 *
 * Why: numpy converts element by element through a scalar routine, 3.4 ns a float to
 * float16 and 1.7 ns back on a Zen 4 core (a Cast of BERT's [1, 128, 768] activations to
 * float16 took 334 us, onnxruntime's 13), and every float16 model pays it around each
 * kernel that computes in float32.  Levels (native/__init__.py): 0 the scalar conversion
 * below in plain C; 1 (AVX2, with F16C: every AVX2 CPU has it, checked all the same)
 * 8 floats at a time by vcvtps2ph / vcvtph2ps, 2 and 3 16 at a time (AVX-512F).  The
 * instructions round to nearest even and keep subnormals (Python runs without FTZ/DAZ);
 * their NaN results differ from numpy's (a quieted payload), so a vector holding a NaN
 * is converted again by the scalar code. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include <stdint.h>
#include <string.h>
#if ONNXVIZ_X86
#include <immintrin.h>
#endif

static int level = 0;

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One float32 as float16 bits, numpy's rounding and NaN rule. */
static inline uint16_t half_of(float value) {
    uint32_t f = bits_of(value);
    const uint32_t sign = (f >> 16) & 0x8000u;
    f &= 0x7fffffffu;
    uint32_t h;
    if (f >= 0x7f800000u) { /* infinity, or NaN: the payload's top 10 bits, never zero */
        h = f == 0x7f800000u ? 0x7c00u : 0x7c00u | ((f & 0x7fffffu) >> 13);
        if (h == 0x7c00u && f != 0x7f800000u) h = 0x7c01u;
    } else if (f >= 0x47800000u) { /* 2^16 and more: past the largest half, infinity */
        h = 0x7c00u;
    } else if (f < 0x38800000u) {
        /* below 2^-14, the smallest normal half: add 0.5 so the float's mantissa holds
         * the value in units of 2^-24 (the subnormal half's), rounded to nearest even by
         * the float addition itself; 0.5's bits taken away leave those units. */
        h = bits_of(float_of(f) + 0.5f) - 0x3f000000u;
    } else {
        /* a normal half: rebias the exponent (127 -> 15), round the 13 dropped bits to
         * nearest even (add half an ulp less one, plus the kept bit's parity); a carry
         * runs into the exponent, up to infinity past 65504 */
        const uint32_t odd = (f >> 13) & 1u;
        h = (f + ((uint32_t)(15 - 127) << 23) + 0xfffu + odd) >> 13;
    }
    return (uint16_t)(h | sign);
}

/* One float16's bits as a float32, exactly (subnormals normalized, NaN payload kept). */
static inline float single_of(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t f;
    if (exp == 0x1fu) {
        f = 0x7f800000u | (mant << 13);
    } else if (exp) {
        f = ((exp + 127 - 15) << 23) | (mant << 13);
    } else if (mant) { /* subnormal: mant * 2^-24, exact in float32 */
        f = bits_of((float)mant * 5.9604644775390625e-8f);
    } else {
        f = 0;
    }
    return float_of(f | sign);
}

static void to_half_generic(const float *x, uint16_t *y, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) y[i] = half_of(x[i]);
}

static void to_single_generic(const uint16_t *x, float *y, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) y[i] = single_of(x[i]);
}

#if ONNXVIZ_X86
/* Whether 8 halfs hold a NaN (exponent all ones, mantissa not zero). */
#define HALF_NAN8(v)                                                                       \
    _mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128((v), _mm_set1_epi16(0x7fff)),          \
                                      _mm_set1_epi16(0x7c00)))

__attribute__((target("avx2,fma,f16c"))) static void to_half_avx2(const float *x, uint16_t *y,
                                                                    Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
            for (int k = 0; k < 8; k++) y[i + k] = half_of(x[i + k]);
    }
    to_half_generic(x + i, y + i, n - i);
}

__attribute__((target("avx2,fma,f16c"))) static void to_single_avx2(const uint16_t *x,
                                                                      float *y, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(x + i));
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(v));
        if (HALF_NAN8(v))
            for (int k = 0; k < 8; k++) y[i + k] = single_of(x[i + k]);
    }
    to_single_generic(x + i, y + i, n - i);
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c"))) static void
to_half_avx512(const float *x, uint16_t *y, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q))
            for (int k = 0; k < 16; k++) y[i + k] = half_of(x[i + k]);
    }
    to_half_avx2(x + i, y + i, n - i);
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c"))) static void
to_single_avx512(const uint16_t *x, float *y, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(x + i));
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(v));
        const __m256i mag = _mm256_and_si256(v, _mm256_set1_epi16(0x7fff));
        if (_mm256_movemask_epi8(_mm256_cmpgt_epi16(mag, _mm256_set1_epi16(0x7c00))))
            for (int k = 0; k < 16; k++) y[i + k] = single_of(x[i + k]);
    }
    to_single_avx2(x + i, y + i, n - i);
}
#endif

/* The level's conversion: F16C from level 1 (on a CPU that has it, which every AVX2 CPU
 * made does; checked), else the scalar code. */
static int vectors(void) {
#if ONNXVIZ_X86
    static int f16c = -1;
    if (f16c < 0) {
        __builtin_cpu_init();
        f16c = __builtin_cpu_supports("f16c") ? 1 : 0;
    }
    return level >= 1 && f16c;
#else
    return 0;
#endif
}

/* x's and y's buffers: x of format `xf` and item size `xs`, y writable of `yf`/`ys`, both
 * C-contiguous and of one length; 0, or -1 with an error set (and nothing held). */
static int get_pair(PyObject *xo, PyObject *yo, Py_buffer *x, Py_buffer *y, char xf,
                    Py_ssize_t xs, char yf, Py_ssize_t ys) {
    if (PyObject_GetBuffer(xo, x, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (PyObject_GetBuffer(yo, y, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(x);
        return -1;
    }
    const char *a = x->format ? x->format : "B", *b = y->format ? y->format : "B";
    if (a[0] == '<' || a[0] == '=' || a[0] == '@') a++;
    if (b[0] == '<' || b[0] == '=' || b[0] == '@') b++;
    if (a[0] != xf || a[1] || x->itemsize != xs || b[0] != yf || b[1] || y->itemsize != ys ||
        x->len / xs != y->len / ys) {
        PyErr_SetString(PyExc_ValueError, "half: expected float32 and float16 buffers of one length");
        PyBuffer_Release(x);
        PyBuffer_Release(y);
        return -1;
    }
    return 0;
}

/* n values from x to y at this process's level: float32 -> float16 when `half`, else
 * float16 -> float32. */
static void convert_level(int half, const void *x, void *y, Py_ssize_t n) {
#if ONNXVIZ_X86
    if (vectors() && level >= 2) {
        if (half)
            to_half_avx512(x, y, n);
        else
            to_single_avx512(x, y, n);
        return;
    }
    if (vectors()) {
        if (half)
            to_half_avx2(x, y, n);
        else
            to_single_avx2(x, y, n);
        return;
    }
#endif
    if (half)
        to_half_generic(x, y, n);
    else
        to_single_generic(x, y, n);
}

/* to_half(x, y) when `half`, else to_single(x, y): the buffers checked, then converted
 * with the GIL released for a long run. */
static PyObject *convert(PyObject *args, int half) {
    PyObject *xo, *yo;
    if (!PyArg_ParseTuple(args, half ? "OO:to_half" : "OO:to_single", &xo, &yo)) return NULL;
    Py_buffer x, y;
    if (get_pair(xo, yo, &x, &y, half ? 'f' : 'e', half ? 4 : 2, half ? 'e' : 'f',
                 half ? 2 : 4) < 0)
        return NULL;
    const Py_ssize_t n = x.len / x.itemsize;
    PyThreadState *state = n > (1 << 16) ? PyEval_SaveThread() : NULL;
    convert_level(half, x.buf, y.buf, n);
    if (state) PyEval_RestoreThread(state);
    PyBuffer_Release(&x);
    PyBuffer_Release(&y);
    Py_RETURN_NONE;
}

static PyObject *py_to_half(PyObject *self, PyObject *args) {
    (void)self;
    return convert(args, 1);
}

static PyObject *py_to_single(PyObject *self, PyObject *args) {
    (void)self;
    return convert(args, 0);
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"to_half", py_to_half, METH_VARARGS,
     "to_half(x, y): y (float16) = x (float32) rounded as numpy rounds it; both "
     "C-contiguous, one length."},
    {"to_single", py_to_single, METH_VARARGS,
     "to_single(x, y): y (float32) = x (float16), exactly, numpy's bits."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_half", NULL, -1, methods};

PyMODINIT_FUNC PyInit__half(void) { return PyModule_Create(&module); }
