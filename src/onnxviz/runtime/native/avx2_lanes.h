/* avx2_lanes.h: AVX2 helpers across the lanes of 8-float vectors, shared by the modules
 * that need them (_nbits, _nbits8, _channels, _pointwise, _conv, _sgemm).  Forced inline
 * with the AVX2 target, so they compile into each caller's AVX2 code (the file has no
 * -mavx).  Include after immintrin.h, under the module's x86 guard. */
#ifndef ONNXVIZ_AVX2_LANES_H
#define ONNXVIZ_AVX2_LANES_H

#define ONNXVIZ_INL_AVX2 static inline __attribute__((always_inline, target("avx2,fma")))

/* The sum of v's 8 lanes: the halves, then pairs, then the last two. */
ONNXVIZ_INL_AVX2 float onnxviz_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* r[0..7], 8 rows of 8 floats, become the 8 columns: r[k] lane i = row i's element k. */
ONNXVIZ_INL_AVX2 void onnxviz_transpose8(__m256 *r) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    /* the low halves hold rows 0-3, the high halves rows 4-7 */
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

#endif
