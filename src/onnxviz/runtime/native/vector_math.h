/* vector_math.h: float32 math over a compiler vector type, written once and included once
 * per instruction-set level (no include guard), by _recurrent.c (through
 * recurrent_step.h) and _erf.c.  The includer defines:
 *
 *   SFX    the level's suffix (generic, avx2, avx512): every function is name_SFX;
 *   VF, VI, VU   a float, int and unsigned vector type of the compiler's vector extension
 *          (VW lanes of 4 bytes), whose operators the code below uses;
 *   VW     its lanes;
 *   ATTR   the level's target attribute (empty for generic C).
 *
 * The operations are the same at every level (the vector extension lowers them to SSE2,
 * AVX2 or AVX-512 under the target attribute; no contraction into fused multiply-adds
 * under -std=c11), so every level gives the same bits.  Selections are bit masks (compare
 * then and/or), never min/max, so a NaN goes through every function as NaN. */

#define RS_CAT_(a, b) a##_##b
#define RS_CAT(a, b) RS_CAT_(a, b)
#define RS(name) RS_CAT(name, SFX)

ATTR static inline VF RS(splat)(float c) {
    VF v = {0};
    return v + c;
}

ATTR static inline VF RS(select)(VI mask, VF a, VF b) {
    return (VF)((mask & (VI)a) | (~mask & (VI)b));
}

/* exp(x) for x in [-105, 10] (the callers clamp; NaN in, NaN out).  Cody-Waite: n the
 * nearest integer to x / ln 2 (the 1.5 * 2^23 shift rounds it and leaves it in the low
 * bits), r = x - n ln 2 in two parts (n * LN2_HI is exact: 9 significant bits times at
 * most 8), |r| <= ln2/2, e^r by its Taylor series to degree 7 (truncation 7e-9, well under
 * an ulp), then times 2^n as two powers of two: 2^n alone is not a normal float below
 * n = -126, and the second product rounds once into the subnormal range. */
ATTR static inline VF RS(exp)(VF x) {
    const float shift = 12582912.0f;
    VF t = x * 1.44269504088896341f + shift;
    VF n = t - shift;
    VF r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    VF p = RS(splat)(1.0f / 5040.0f);
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
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

/* sigmoid = 1 / (1 + e^{-x}) for x >= 0 and e^x / (1 + e^x) below: e = e^{-|x|} never
 * overflows and a negative x keeps its relative accuracy down to the subnormals (the
 * 0.5 + 0.5 tanh(x / 2) form loses it to cancellation).  |x| clamped at 105, where e^{-|x|}
 * rounds to zero. */
ATTR static inline VF RS(sigmoid)(VF x) {
    VF a = (VF)((VI)x & 0x7fffffff);
    VF ac = RS(select)(a > 105.0f, RS(splat)(105.0f), a);
    VF e = RS(exp)(-ac);
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


/* erf(x) in float32 as kernels/math_erf.py's single-precision form: tanh(x P(x^2)) with
 * x clipped to [-4.2, 4.2] (beyond it float32 erf is +-1 and so is the tanh) and P of
 * degree 7 by Horner, in numpy's order with the coefficients rounded to float32 (the
 * product and sum of each step round apart, as numpy's passes do): only the tanh is this
 * module's instead of numpy's. */
ATTR static inline VF RS(erf)(VF x) {
    VF xs = RS(select)(x > 4.2f, RS(splat)(4.2f), x); /* a NaN stays */
    xs = RS(select)(xs < -4.2f, RS(splat)(-4.2f), xs);
    VF t = xs * xs;
    VF p = t * 4.653078797267618e-09f;
    p = p + 4.392321955801193e-08f;
    p = p * t + -4.911259989623384e-06f;
    p = p * t + 8.491305527522867e-05f;
    p = p * t + -0.0006150139006908897f;
    p = p * t + -0.00019571050846250992f;
    p = p * t + 0.10277030973287303f;
    p = p * t + 1.1283791688623899f;
    return RS(tanh)(p * xs);
}
