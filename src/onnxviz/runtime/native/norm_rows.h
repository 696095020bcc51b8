/* norm_rows.h: layer and RMS normalisation of float32 rows, written once and included
 * once per instruction-set level (no include guard) by _norm.c.  The includer defines:
 *
 *   SFX   the level's suffix (generic, avx2, avx512): every function is name_SFX;
 *   VF    a float vector of VW lanes, VH one of VW / 2 lanes, VD a double vector of
 *         VW / 2 lanes (the compiler's vector extension, whose operators the code uses);
 *   ATTR  the level's target attribute (empty for generic C).
 *
 * Every helper is always_inline: called across levels (a plain function is compiled for
 * the baseline SSE) each call would cost an SSE/AVX state transition.
 *
 * A row is read from memory once and written once: the statistics pass re-reads it
 * from L1 (a row of a transformer is a few KB).  The statistics are summed in double
 * (float32 values convert exactly; no overflow or underflow for any float32 row), the
 * variance as var = (sum d^2 - (sum d)^2 / n) / n and the mean as k + sum d / n with
 * d = x - k: in one pass about the row's first value k while that cannot lose bits to
 * cancellation, else in a second about the mean (the corrected two-pass form; see
 * norm_rows), so no row loses bits whatever its offset.  The output is
 * computed in float32: x - mean as (x - mh) - ml, the mean split into two floats (exact
 * for x near the mean, Sterbenz), then * inv_std * gamma + beta, each a rounding of a
 * value of the output's size, never of the offset's.  Rows whose variance + epsilon is
 * outside [2^-200, 2^200] (subnormal spreads, huge values, NaN and inf) take the same
 * formula in double, where none of those products can overflow or lose bits. */

#define NR_CAT_(a, b) a##_##b
#define NR_CAT(a, b) NR_CAT_(a, b)
#define NR(name) NR_CAT(name, SFX)
#define NR_DW (VW / 2)
#define NR_INL ATTR static inline __attribute__((always_inline))

NR_INL VF NR(ldf)(const float *p) {
    VF v;
    memcpy(&v, p, sizeof v);
    return v;
}

NR_INL void NR(stf)(float *p, VF v) { memcpy(p, &v, sizeof v); }

/* NR_DW floats from p as doubles (exact). */
NR_INL VD NR(ldd)(const float *p) {
    VH h;
    memcpy(&h, p, sizeof h);
#ifdef NR_CVT
    return NR_CVT(h); /* the level's one-instruction conversion (GCC splits it) */
#else
    return __builtin_convertvector(h, VD);
#endif
}

NR_INL double NR(hsum)(VD a, VD b, VD c, VD d) {
    VD s = (a + b) + (c + d);
    double t = 0.0;
    for (int k = 0; k < NR_DW; k++) t += s[k];
    return t;
}

/* out = (x + skip) + bias, the numpy path's order and roundings (skip or bias may be
 * NULL).  out may be x. */
NR_INL void NR(add_row)(const float *x, const float *skip, const float *bias, float *out,
                        Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + VW <= n; i += VW) {
        VF v = NR(ldf)(x + i);
        if (skip) v = v + NR(ldf)(skip + i);
        if (bias) v = v + NR(ldf)(bias + i);
        NR(stf)(out + i, v);
    }
    for (; i < n; i++) {
        float v = x[i];
        if (skip) v = v + skip[i];
        if (bias) v = v + bias[i];
        out[i] = v;
    }
}

/* sum s, or sum s^2 when `squares`; four independent accumulators (one chain of
 * dependent adds left the core waiting on each one's latency). */
NR_INL double NR(sum)(const float *s, Py_ssize_t n, int squares) {
    VD a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    Py_ssize_t i = 0;
    for (; i + 4 * NR_DW <= n; i += 4 * NR_DW) {
        VD v0 = NR(ldd)(s + i), v1 = NR(ldd)(s + i + NR_DW);
        VD v2 = NR(ldd)(s + i + 2 * NR_DW), v3 = NR(ldd)(s + i + 3 * NR_DW);
        if (squares) {
            v0 = v0 * v0;
            v1 = v1 * v1;
            v2 = v2 * v2;
            v3 = v3 * v3;
        }
        a0 += v0;
        a1 += v1;
        a2 += v2;
        a3 += v3;
    }
    double t = NR(hsum)(a0, a1, a2, a3);
    for (; i < n; i++) {
        double v = (double)s[i];
        t += squares ? v * v : v;
    }
    return t;
}

/* sum (s - m) and sum (s - m)^2 (m = s[0] makes the one-pass shifted form; the mean
 * itself, the corrected two-pass form). */
NR_INL void NR(centred)(const float *s, Py_ssize_t n, double m, double *sd, double *sdd) {
    VD c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
    VD q0 = {0}, q1 = {0}, q2 = {0}, q3 = {0};
    VD mv = c0 + m;
    Py_ssize_t i = 0;
    for (; i + 4 * NR_DW <= n; i += 4 * NR_DW) {
        VD d0 = NR(ldd)(s + i) - mv, d1 = NR(ldd)(s + i + NR_DW) - mv;
        VD d2 = NR(ldd)(s + i + 2 * NR_DW) - mv, d3 = NR(ldd)(s + i + 3 * NR_DW) - mv;
        c0 += d0;
        c1 += d1;
        c2 += d2;
        c3 += d3;
        q0 += d0 * d0;
        q1 += d1 * d1;
        q2 += d2 * d2;
        q3 += d3 * d3;
    }
    double c = NR(hsum)(c0, c1, c2, c3), q = NR(hsum)(q0, q1, q2, q3);
    for (; i < n; i++) {
        double d = (double)s[i] - m;
        c += d;
        q += d * d;
    }
    *sd = c;
    *sdd = q;
}

/* y = ((s - mh) - ml) * inv * gamma + beta in float32 (no centring when !centre; gamma
 * and beta may be NULL); two vectors a turn.  The tail does the same operations. */
NR_INL void NR(out_float)(const float *s, float *y, const float *g, const float *b,
                          Py_ssize_t n, int centre, float mh, float ml, float inv) {
    Py_ssize_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        VF v0 = NR(ldf)(s + i), v1 = NR(ldf)(s + i + VW);
        if (centre) {
            v0 = (v0 - mh) - ml;
            v1 = (v1 - mh) - ml;
        }
        v0 = v0 * inv;
        v1 = v1 * inv;
        if (g) {
            v0 = v0 * NR(ldf)(g + i);
            v1 = v1 * NR(ldf)(g + i + VW);
        }
        if (b) {
            v0 = v0 + NR(ldf)(b + i);
            v1 = v1 + NR(ldf)(b + i + VW);
        }
        NR(stf)(y + i, v0);
        NR(stf)(y + i + VW, v1);
    }
    for (; i < n; i++) {
        float v = s[i];
        if (centre) v = (v - mh) - ml;
        v = v * inv;
        if (g) v = v * g[i];
        if (b) v = v + b[i];
        y[i] = v;
    }
}

/* The same in double, for the rows out_float cannot take (see the header). */
NR_INL void NR(out_double)(const float *s, float *y, const float *g, const float *b,
                           Py_ssize_t n, int centre, double mean, double inv) {
    for (Py_ssize_t i = 0; i < n; i++) {
        double v = (double)s[i];
        if (centre) v = v - mean;
        v = v * inv;
        if (g) v = v * (double)g[i];
        if (b) v = v + (double)b[i];
        y[i] = (float)v;
    }
}

ATTR static void NR(norm_rows)(const NormJob *j) {
    const Py_ssize_t n = j->cols;
    const double count = (double)n;
    const int centre = !j->rms;
    for (Py_ssize_t r = 0; r < j->rows; r++) {
        const float *src = j->x + r * n;
        float *y = j->y + r * n;
        if (j->skip || j->bias) {
            /* the sum is an output (total) or, when not asked for, made in y's row */
            float *t = j->total ? j->total + r * n : y;
            NR(add_row)(src, j->skip ? j->skip + r * n : NULL, j->bias, t, n);
            src = t;
        }
        double mean = 0.0, var;
        if (centre) {
            /* One pass about the row's first value k: var = (sum d^2 - (sum d)^2 / n) / n
             * with d = s - k loses R = sum d^2 / (n var) = 1 + (k - mean)^2 / var to
             * cancellation: a relative error of at most 2^-53 n R, harmless while it is
             * below 2^-26, that is sum d^2 <= 2^27 var.  k being one of the row's values,
             * (k - mean)^2 <= n var, so R <= n + 1 and that holds for every row up to
             * n = 11585; wider rows with k far out, and NaN or inf, take a second pass
             * about the mean (the corrected two-pass form). */
            double k = (double)src[0], sd, sdd;
            NR(centred)(src, n, k, &sd, &sdd);
            double c = sd / count;
            var = (sdd - sd * c) / count;
            mean = k + c;
            if (!(sdd <= 0x1p27 * var)) {
                const double m = NR(sum)(src, n, 0) / count;
                NR(centred)(src, n, m, &sd, &sdd);
                c = sd / count;
                var = (sdd - sd * c) / count;
                mean = m + c;
                if (mean != mean) mean = m; /* inf - inf in the correction: keep inf */
            }
            if (var < 0.0) var = 0.0; /* rounding only; a NaN stays */
        } else {
            var = NR(sum)(src, n, 1) / count;
        }
        const double vpe = var + j->epsilon;
        const double inv = 1.0 / __builtin_sqrt(vpe);
        if (j->mean) j->mean[r] = (float)mean;
        if (j->inv_std) j->inv_std[r] = (float)inv;
        if (vpe >= 0x1p-200 && vpe <= 0x1p200) {
            const float mh = (float)mean;
            const float ml = (float)(mean - (double)mh);
            NR(out_float)(src, y, j->gamma, j->beta, n, centre, mh, ml, (float)inv);
        } else {
            NR(out_double)(src, y, j->gamma, j->beta, n, centre, mean, inv);
        }
    }
}

#undef NR_CAT_
#undef NR_CAT
#undef NR
#undef NR_DW
#undef NR_INL
