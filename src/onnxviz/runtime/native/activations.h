/* activations.h: a conv's or a GEMM's activation in its epilogue, on one value (plain C),
 * 8 lanes (AVX2) or 16 (AVX-512): 0 none, 1 Relu, 2 Clip(lo, hi) (a NaN bound: none),
 * 3 HardSwish, with the numpy kernels' operations in their order; a NaN stays NaN.
 * Shared by _conv, _depthwise and _sgemm.  Include after levels.h and,
 * on x86, after <immintrin.h>. */
#ifndef ONNXVIZ_NATIVE_ACTIVATIONS_H
#define ONNXVIZ_NATIVE_ACTIVATIONS_H

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
    return y;
}

/* Lanes 0..n-1 of a mask (n may exceed 8: all lanes; n <= 0: none). */
__attribute__((target("avx2,fma"))) static inline __m256i mask8(int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
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
    return y;
}
#endif

#endif
