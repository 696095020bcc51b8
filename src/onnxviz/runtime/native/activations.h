/* activations.h: a conv's or a GEMM's activation in its epilogue, on one value (plain C),
 * 8 lanes (AVX2) or 16 (AVX-512): 0 none, 1 Relu, 2 Clip(lo, hi) (a NaN bound: none),
 * 3 HardSwish, with the numpy kernels' operations in their order, 4 SiLU y * sigmoid(y)
 * (below); a NaN stays NaN.  Shared by _conv, _depthwise and _sgemm.  Include after
 * Python.h and levels.h and, on x86, after <immintrin.h>. */
#ifndef ONNXVIZ_NATIVE_ACTIVATIONS_H
#define ONNXVIZ_NATIVE_ACTIVATIONS_H

/* SiLU (4): y * sigmoid(y) with vector_math.h's sigmoid, the one the Sigmoid kernel runs
 * for float32 (and the elementwise chain's Sigmoid and SiLU steps), the same bits at
 * every level; the product is the Mul's (y * g is g * y).  So a Conv, then its Sigmoid
 * and the Mul of the two, stepped, give these bits, and the conv's output never makes
 * a pass of its own through memory (EfficientNet's and YOLO's SiLU after every conv).
 * vector_math.h is made here once per level (vector_levels.h) under names of its own
 * (silu_act_generic, _act_avx2, _act_avx512), the AVX-512 one for AVX-512F alone:
 * the kernels' target. */
#include "vector_types.h"
#include <string.h>
#define VECTOR_LEVEL_NAME(level) act_##level
#define VECTOR_LEVEL_AVX512 "avx512f"
#define VECTOR_LEVEL_BODY
#include "vector_levels.h"
#undef VECTOR_LEVEL_BODY
#undef VECTOR_LEVEL_AVX512
#undef VECTOR_LEVEL_NAME

/* The activation codes run 0..ACT_LAST: every module checks its callers' against it. */
#define ACT_LAST 4

static float silu_scalar(float y) {
    const v4f v = {y, y, y, y};
    return silu_act_generic(v)[0];
}

static float act_scalar(float y, int act, float lo, float hi) {
    switch (act) {
    case 1:
        return (y < 0.0f) ? 0.0f : y; /* NaN kept */
    case 2:
        if (lo == lo && y < lo) y = lo;
        if (hi == hi && y > hi) y = hi;
        return y;
    case 3: {
        float g = y * (float)(1.0 / 6.0);
        g = g + 0.5f;
        if (g < 0.0f) g = 0.0f;
        if (g > 1.0f) g = 1.0f;
        return y * g;
    }
    case 4:
        return silu_scalar(y);
    default:
        return y;
    }
}

#if ONNXVIZ_X86
__attribute__((target("avx2,fma"))) static inline __m256 act8(__m256 y, int act, float lo,
                                                              float hi) {
    /* max_ps/min_ps(a, b) return b when either is NaN: the sum goes second. */
    if (act == 1) return _mm256_max_ps(_mm256_setzero_ps(), y);
    if (act == 2) {
        if (lo == lo) y = _mm256_max_ps(_mm256_set1_ps(lo), y);
        if (hi == hi) y = _mm256_min_ps(_mm256_set1_ps(hi), y);
        return y;
    }
    if (act == 3) {
        __m256 g = _mm256_mul_ps(y, _mm256_set1_ps((float)(1.0 / 6.0)));
        g = _mm256_add_ps(g, _mm256_set1_ps(0.5f));
        g = _mm256_max_ps(_mm256_setzero_ps(), g);
        g = _mm256_min_ps(_mm256_set1_ps(1.0f), g);
        return _mm256_mul_ps(y, g);
    }
    if (act == 4) return (__m256)silu_act_avx2((v8f)y);
    return y;
}

/* Lanes 0..n-1 of a mask (n may exceed 8: all lanes; n <= 0: none). */
__attribute__((target("avx2,fma"))) static inline __m256i mask8(int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
}

/* Why no kernel stores a whole vector with vmaskmovps: to memory it takes about 19
 * cycles on AMD's Zen 2 and Zen 3 cores even with every lane set, where a plain store
 * takes one (a 6 x 16 direct conv tile's 12 masked stores were 8% of a 32-channel conv
 * on a Zen 3 core).  Loads through a mask are not slow there. */

/* m's lanes of v to p: a plain store when every lane is set, else the masked one. */
__attribute__((target("avx2,fma"))) static inline void store8(float *p, __m256i m, __m256 v) {
    if (_mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xFF)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, m, v);
}

/* Lanes 0..n-1 of v to p (n >= 8: all; n <= 0: none) by plain stores of 8, 4, 2 and 1
 * floats; nothing past p + n is written. */
__attribute__((target("avx2,fma"))) static inline void store8n(float *p, __m256 v, int n) {
    if (n >= 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    __m128 q = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(p, q);
        q = _mm256_extractf128_ps(v, 1);
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi((__m64 *)p, q);
        q = _mm_movehl_ps(q, q);
        p += 2;
        n -= 2;
    }
    if (n >= 1) _mm_store_ss(p, q);
}

__attribute__((target("avx512f"))) static inline __m512 act16(__m512 y, int act, float lo,
                                                              float hi) {
    if (act == 1) return _mm512_max_ps(_mm512_setzero_ps(), y);
    if (act == 2) {
        if (lo == lo) y = _mm512_max_ps(_mm512_set1_ps(lo), y);
        if (hi == hi) y = _mm512_min_ps(_mm512_set1_ps(hi), y);
        return y;
    }
    if (act == 3) {
        __m512 g = _mm512_mul_ps(y, _mm512_set1_ps((float)(1.0 / 6.0)));
        g = _mm512_add_ps(g, _mm512_set1_ps(0.5f));
        g = _mm512_max_ps(_mm512_setzero_ps(), g);
        g = _mm512_min_ps(_mm512_set1_ps(1.0f), g);
        return _mm512_mul_ps(y, g);
    }
    if (act == 4) return (__m512)silu_act_avx512((v16f)y);
    return y;
}
#endif

#endif
