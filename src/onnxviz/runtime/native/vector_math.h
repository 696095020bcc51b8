/* vector_math.h: float32 math over a compiler vector type, written once and included once
 * per instruction-set level (no include guard), by _recurrent.c (through
 * recurrent_step.h), _erf.c and _chain.c (through vector_levels.h).  The includer
 * defines:
 *
 *   SFX    the level's suffix (generic, avx2, avx512): every function is name_SFX;
 *   VF, VI, VU   a float, int and unsigned vector type of the compiler's vector extension
 *          (VW lanes of 4 bytes), whose operators the code below uses;
 *   VW     its lanes;
 *   ATTR   the level's target attribute (empty for generic C).
 *
 * The operations are the same at every level (the vector extension lowers them to SSE2,
 * AVX2 or AVX-512 under the target attribute; no contraction into fused multiply-adds
 * under -std=c11; a fused multiply-add is written where it is meant, `fma`, one rounding
 * at every level), so every level gives the same bits.  Selections are bit masks (compare
 * then and/or), never min/max, so a NaN goes through every function as NaN. */

#define RS_CAT_(a, b) a##_##b
#define RS_CAT(a, b) RS_CAT_(a, b)
#define RS(name) RS_CAT(name, SFX)

#include <math.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

ATTR static inline VF RS(splat)(float c) {
    VF v = {0};
    return v + c;
}

ATTR static inline VF RS(select)(VI mask, VF a, VF b) {
    return (VF)((mask & (VI)a) | (~mask & (VI)b));
}

/* a * b + c rounded once: the FMA instruction at AVX2 and AVX-512, C's fmaf lane by lane
 * at the generic level (the same operation, so the same bits at every level). */
ATTR static inline VF RS(fma)(VF a, VF b, VF c) {
#if (defined(__x86_64__) || defined(__i386__)) && VW == 8
    return (VF)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif (defined(__x86_64__) || defined(__i386__)) && VW == 16
    return (VF)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#else
    VF r;
    for (int i = 0; i < VW; i++) r[i] = fmaf(a[i], b[i], c[i]);
    return r;
#endif
}

/* exp(x) for x in [-105, 10] (the callers clamp; NaN in, NaN out).  Cody-Waite: n the
 * nearest integer to x / ln 2 (the 1.5 * 2^23 shift rounds it and leaves it in the low
 * bits), r = x - n ln 2 in two parts (n * LN2_HI is exact: 9 significant bits times at
 * most 8), |r| <= ln2/2, e^r by its Taylor series to degree 7 (truncation 7e-9, well under
 * an ulp; in Estrin's order, by fused multiply-adds), then times 2^n as two powers of
 * two: 2^n alone is not a normal float below n = -126, and the second product rounds once
 * into the subnormal range. */
ATTR static inline VF RS(exp)(VF x) {
    const float shift = 12582912.0f;
    VF t = x * 1.44269504088896341f + shift;
    VF n = t - shift;
    VF r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    /* Estrin's scheme: four independent pairs, then two levels, where Horner's seven
     * dependent multiply-adds made one long chain (exp of 16K floats at AVX2 on a Zen 3
     * core 0.76 -> 0.53 ns a float); each pair and level one fused multiply-add (`fma`:
     * one rounding, the same at every level), where a multiply and an add were two
     * instructions: the compiled sigmoid of 64K floats at AVX-512 36.7 -> 31.6-33 us,
     * tanh 50.6 -> 46.3 (best of alternated processes, Emerald Rapids). */
    VF r2 = r * r, r4 = r2 * r2;
    VF p01 = 1.0f + r, p23 = RS(fma)(r, RS(splat)(1.0f / 6.0f), RS(splat)(0.5f));
    VF p45 = RS(fma)(r, RS(splat)(1.0f / 120.0f), RS(splat)(1.0f / 24.0f));
    VF p67 = RS(fma)(r, RS(splat)(1.0f / 5040.0f), RS(splat)(1.0f / 720.0f));
    VF p = RS(fma)(r4, RS(fma)(r2, p67, p45), RS(fma)(r2, p23, p01));
#if (defined(__x86_64__) || defined(__i386__)) && VW == 16
    /* p * 2^n rounded once, as the two products below round it (p * 2^n1 is exact: p is
     * in [0.7, 1.42] and n1 >= -76), in one instruction where they take nine (the
     * exponent's integer steps and the products): the sigmoid of 64K floats at AVX-512
     * 30.4 -> 24 us on a Zen 4 core, the same bits. */
    return (VF)_mm512_scalef_ps((__m512)p, (__m512)n);
#endif
    VI ni = (VI)t - (VI)RS(splat)(shift);
    VI n1 = ni >> 1;
    VI n2 = ni - n1;
    VF s1 = (VF)(((VU)(n1 + 127)) << 23);
    VF s2 = (VF)(((VU)(n2 + 127)) << 23);
    return p * s1 * s2;
}

/* tanh, from a = |x| then given the sign of x: below atanh(1/2), a + a^3 P(a^2) (P fitted
 * on [0, 0.5494], relative error 4e-9 with these float coefficients); above,
 * 1 - 2 / (e^{2a} + 1) (no cancellation there: the result is at least 1/2).  |x| is clamped at 9.5, where tanh
 * rounds to 1 already, so e^{2|x|} stays finite. */
ATTR static inline VF RS(tanh)(VF x) {
    VF a = (VF)((VI)x & 0x7fffffff);
    VF s = x * x;
    VF p = RS(splat)(2.39422382e-3f);
    p = p * s + -8.41228943e-3f;
    p = p * s + 2.17821803e-2f;
    p = p * s + -5.39595373e-2f;
    p = p * s + 1.33332923e-1f;
    p = p * s + -3.33333313e-1f;
    VF small = a + a * s * p;
    VF ac = RS(select)(a > 9.5f, RS(splat)(9.5f), a); /* a NaN stays */
    VF e = RS(exp)(ac + ac);
    VF large = 1.0f - 2.0f / (e + 1.0f);
    VF t = RS(select)(a < 0.549306144f, small, large);
    return (VF)((VI)t | ((VI)x & (-0x7fffffff - 1))); /* the sign of x: tanh(-0) = -0 */
}

/* 2^(j/16) for j = 0..15 as a float and the float nearest its error (mpmath, 40 digits):
 * exp_neg's table.  Defined once (the header is included once per level). */
#ifndef ONNXVIZ_EXP16_TABLE
#define ONNXVIZ_EXP16_TABLE
static const float EXP16_HI[16] __attribute__((aligned(64))) = {
    1.0f, 1.0442737340927124f, 1.0905077457427979f, 1.1387885808944702f,
    1.1892070770263672f, 1.2418577671051025f, 1.2968395948410034f, 1.3542555570602417f,
    1.4142135381698608f, 1.4768261909484863f, 1.5422108173370361f, 1.610490322113037f,
    1.6817928552627563f, 1.7562521696090698f, 1.8340080976486206f, 1.9152065515518188f};
static const float EXP16_LO[16] __attribute__((aligned(64))) = {
    0.0f, 4.8334701574503924e-08f, -1.3077539939843064e-08f, 5.386222312608879e-08f,
    3.797635272917432e-08f, 4.496838101886169e-08f, -4.018999533172973e-08f,
    -1.0123349269974824e-08f, 2.4203234971764687e-08f, -4.500898853621038e-08f,
    8.070904833346049e-09f, 9.836217174097328e-09f, -2.4755326677450284e-08f,
    -9.235770370707996e-09f, -1.1239277952768134e-08f, 9.845328108326612e-09f};
#endif

/* table[j & 15] in each lane: one permute of 16 lanes at AVX-512, two of 8 and a blend by
 * bit 3 at AVX2, a lane at a time in generic C: the same entry, so the same bits. */
ATTR static inline VF RS(lookup16)(VI j, const float *table) {
#if (defined(__x86_64__) || defined(__i386__)) && VW == 16
    return (VF)_mm512_permutexvar_ps((__m512i)j, _mm512_load_ps(table));
#elif (defined(__x86_64__) || defined(__i386__)) && VW == 8
    __m256 lo = _mm256_permutevar8x32_ps(_mm256_load_ps(table), (__m256i)j);
    __m256 hi = _mm256_permutevar8x32_ps(_mm256_load_ps(table + 8), (__m256i)j);
    return (VF)_mm256_blendv_ps(lo, hi, (__m256)((VI)j << 28)); /* bit 3 to the sign */
#else
    VF v;
    for (int l = 0; l < VW; l++) v[l] = table[j[l] & 15];
    return v;
#endif
}

/* e^{-a} for a in [0, 105] (NaN in, NaN out): m = -round(16 a / ln 2) (the 1.5 * 2^23
 * shift rounds it and leaves it in the low bits), r = a + m ln2 / 16 in two parts
 * (|r| <= ln2 / 32), e^{-r} - 1 = -r + r^2 (1/2 - r/6) (truncation r^4 / 24 < 1e-8 of a
 * unit), times 2^(j/16) from a 16-entry table as a float plus the float of its error
 * (j = m mod 16; the entries alone, rounded, put a negative x's sigmoid 3.04 ulps off),
 * then times 2^k (k = floor(m / 16)), rounded once into the subnormals.  About a dozen
 * operations where exp's degree-7 series took twenty: the sigmoid of 4K floats in L1 at
 * AVX-512 on a Zen 4 core 0.38-0.40 -> 0.28 ns a float, within 2.3 ulps (every 61st
 * float of [-120, 120] against float64). */
ATTR static inline VF RS(exp_neg)(VF a) {
    const float shift = 12582912.0f;
    VF t = RS(fma)(a, RS(splat)(-23.083120654223414f), RS(splat)(shift));
    VF n = t - shift;
    VF r = RS(fma)(n, RS(splat)(0.693359375f / 16.0f), a);
    r = RS(fma)(n, RS(splat)(-2.12194440e-4f / 16.0f), r);
    VI m = (VI)t - (VI)RS(splat)(shift);
    VF th = RS(lookup16)(m, EXP16_HI), tl = RS(lookup16)(m, EXP16_LO);
    VF q = RS(fma)(r, RS(splat)(-1.0f / 6.0f), RS(splat)(0.5f));
    VF p = RS(fma)(r * r, q, -r);
    VF e = th + RS(fma)(th, p, tl);
    VI k = m >> 4; /* floor(m / 16): an arithmetic shift */
#if (defined(__x86_64__) || defined(__i386__)) && VW == 16
    return (VF)_mm512_scalef_ps((__m512)e, _mm512_cvtepi32_ps((__m512i)k));
#else
    /* e * 2^k as two powers of two (k >= -152: 2^k alone is not a normal float below
     * -126), the second product rounding once into the subnormals, as scalef does. */
    VI k1 = k >> 1;
    VI k2 = k - k1;
    VF s1 = (VF)(((VU)(k1 + 127)) << 23);
    VF s2 = (VF)(((VU)(k2 + 127)) << 23);
    return e * s1 * s2;
#endif
}

/* sigmoid = 1 / (1 + e^{-x}) for x >= 0 and e^x / (1 + e^x) below: e = e^{-|x|} never
 * overflows and a negative x keeps its relative accuracy down to the subnormals (the
 * 0.5 + 0.5 tanh(x / 2) form loses it to cancellation).  |x| clamped at 105, where e^{-|x|}
 * rounds to zero. */
ATTR static inline VF RS(sigmoid)(VF x) {
    VF a = (VF)((VI)x & 0x7fffffff);
    VF ac = RS(select)(a > 105.0f, RS(splat)(105.0f), a);
    VF e = RS(exp_neg)(ac);
    VF num = RS(select)(x < 0.0f, e, RS(splat)(1.0f));
    return num / (e + 1.0f);
}

/* n <= VW floats from p (the rest zero) and to p. */
ATTR static inline VF RS(loadn)(const float *p, int n) {
    VF v = {0};
    if (n == VW)
        memcpy(&v, p, sizeof v);
    else
        memcpy(&v, p, (size_t)n * 4);
    return v;
}

ATTR static inline void RS(storen)(float *p, VF v, int n) {
    if (n == VW)
        memcpy(p, &v, sizeof v);
    else
        memcpy(p, &v, (size_t)n * 4);
}


/* erf(x) in float32, within 1.1 ulp of the correctly rounded value (tests: 3), by |x|:
 *   below 1: |x| + (|x| (c0 - 1) + |x| t Q(t)), t = x^2, erf(x)/x = c0 + t Q(t) fitted
 *     for relative error (Q of degree 5); the leading |x| added last keeps the result
 *     within an ulp and a half where a plain |x| P(t) lost 2.3;
 *   1 to 4: a degree-8 polynomial in |x| minus the middle of its unit interval (1.5,
 *     2.5 or 3.5, exact by Sterbenz), its coefficients picked by two selects;
 *   from 4: 1 (erf(4) is 1 - 1.5e-8, which rounds to 1; the infinities too);
 * then x's sign (erf(-0) = -0; a NaN stays a NaN).  The coefficients are least-squares
 * fits on Chebyshev nodes in float64 (mpmath's erf), checked in float32 arithmetic.
 * About 45 operations and no division, where tanh(x P(x^2)) with an exp and a division
 * took twice the time; the Horner steps are fused multiply-adds (64K floats at AVX2 on
 * a Zen 3 core 101 -> 76 us against a multiply then an add, 1.28 -> 1.09 ulp). */
/* One coefficient of erf's 1-to-4 piece by the lane's interval (c1 below 2, c2 below 3, c3
 * from 3; `idx` 0, 1, 2 and the masks `two`, `three` say which): with 8 or 16 lanes one
 * permute from a constant table (GCC's __builtin_shuffle: vpermps), where the two
 * selects took six operations a coefficient, nine of them per call (erf of 393K floats
 * at AVX-512 330 -> 299 us); otherwise the selects.  Either way the same coefficient,
 * so the same bits. */
ATTR static inline VF RS(erf_coef)(VI idx, VI two, VI three, float c1, float c2, float c3) {
#if defined(__GNUC__) && !defined(__clang__)
    if (VW >= 8) {
        const VF table = {c1, c2, c3};
        return __builtin_shuffle(table, idx);
    }
#else
    (void)idx;
#endif
    return RS(select)(three, RS(splat)(c3), RS(select)(two, RS(splat)(c2), RS(splat)(c1)));
}

ATTR static inline VF RS(erf)(VF x) {
    VF a = (VF)((VI)x & 0x7fffffff);
    VF t = a * a;
    VF q = RS(splat)(7.897971e-05f);
    q = RS(fma)(q, t, RS(splat)(-0.0008024285f));
    q = RS(fma)(q, t, RS(splat)(0.005190046f));
    q = RS(fma)(q, t, RS(splat)(-0.026854804f));
    q = RS(fma)(q, t, RS(splat)(0.11283612f));
    q = RS(fma)(q, t, RS(splat)(-0.3761263f));
    VF small = a + RS(fma)(a, RS(splat)(0.12837917f), a * (t * q));
    VI two = a >= 2.0f, three = a >= 3.0f;
    VI idx = -two - three; /* the masks are -1 or 0: 0, 1 or 2 */
#define ERF_C(c1, c2, c3) RS(erf_coef)(idx, two, three, c1, c2, c3)
    VF u = a - ERF_C(1.5f, 2.5f, 3.5f);
    VF p = ERF_C(-0.0024318998f, 0.00030644276f, -3.703773e-05f);
    p = RS(fma)(p, u, ERF_C(-0.0038323037f, 0.000403012f, 6.689166e-05f));
    p = RS(fma)(p, u, ERF_C(0.019348333f, -0.0028082759f, -7.714558e-05f));
    p = RS(fma)(p, u, ERF_C(-0.015034342f, 0.006143394f, 8.048107e-05f));
    p = RS(fma)(p, u, ERF_C(-0.044601757f, -0.008621509f, -6.777085e-05f));
    p = RS(fma)(p, u, ERF_C(0.13876362f, 0.008348284f, 4.2409203e-05f));
    p = RS(fma)(p, u, ERF_C(-0.1783953f, -0.0054457374f, -1.8896344e-05f));
    p = RS(fma)(p, u, ERF_C(0.11893007f, 0.002178318f, 5.3972935e-06f));
    p = RS(fma)(p, u, ERF_C(0.96610516f, 0.999593f, 0.9999993f));
#undef ERF_C
    VF y = RS(select)(a < 1.0f, small, p);
    y = RS(select)(y > 1.0f, RS(splat)(1.0f), y);
    y = RS(select)(a >= 4.0f, RS(splat)(1.0f), y);
    return (VF)((VI)y | ((VI)x & (-0x7fffffff - 1)));
}

/* RS(f_buffer)(x, y, n): y = f(x) over n floats (y may be x), four vectors a turn: each
 * f is one long chain of dependent operations, and one chain a turn left the core
 * waiting on it (erf with the former tanh form: four took 0.83x the time); the same bits
 * either way.  erf for _erf and _chain's Erf step, tanh and sigmoid for _chain's Tanh
 * and Sigmoid steps. */
#define MAP_BUFFER(f)                                                                      \
    ATTR static void RS(f##_buffer)(const float *x, float *y, Py_ssize_t n) {               \
        Py_ssize_t i = 0;                                                                  \
        for (; i + 4 * VW <= n; i += 4 * VW) {                                             \
            VF a0 = RS(loadn)(x + i, VW), a1 = RS(loadn)(x + i + VW, VW);                  \
            VF a2 = RS(loadn)(x + i + 2 * VW, VW), a3 = RS(loadn)(x + i + 3 * VW, VW);     \
            a0 = RS(f)(a0);                                                                \
            a1 = RS(f)(a1);                                                                \
            a2 = RS(f)(a2);                                                                \
            a3 = RS(f)(a3);                                                                \
            RS(storen)(y + i, a0, VW);                                                     \
            RS(storen)(y + i + VW, a1, VW);                                                \
            RS(storen)(y + i + 2 * VW, a2, VW);                                            \
            RS(storen)(y + i + 3 * VW, a3, VW);                                            \
        }                                                                                  \
        for (; i < n; i += VW) {                                                           \
            int w = n - i < VW ? (int)(n - i) : VW;                                        \
            RS(storen)(y + i, RS(f)(RS(loadn)(x + i, w)), w);                              \
        }                                                                                  \
    }

MAP_BUFFER(erf)
MAP_BUFFER(tanh)
MAP_BUFFER(sigmoid)
/* x * sigmoid(x): a SiLU (the Sigmoid node's value, then the Mul's product) in one pass
 * over the buffer, where the sigmoid's pass and the product's took two (a chain's SiLU
 * step over 1.2M floats 0.49 -> 0.40 ns a float). */
ATTR static inline VF RS(silu)(VF x) { return x * RS(sigmoid)(x); }
MAP_BUFFER(silu)
#undef MAP_BUFFER
