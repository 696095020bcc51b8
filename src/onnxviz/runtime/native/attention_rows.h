/* attention_rows.h: the attention of _gqa.c (softmax(q K^T * scale + bias) V per query
 * row, over the keys the row may read; the bias only when the job has one), written once and included once per instruction-set level
 * (no include guard), after vector_math.h for the same level.  The includer defines SFX,
 * VF, VI, VW and ATTR as vector_math.h reads them, GqaJob, gqa_rotate_row,
 * GQA_TRANSPOSE_ROWS; AR_FMA(a, b, c) (a * b + c: fused from AVX2 up) and AR_SET1(c) are
 * made here by VW.
 *
 * Scores: when GQA_TRANSPOSE_ROWS or more query rows read a KV head (a prompt), its keys
 * are copied transposed ([H][Tpad]) once, so a row's scores are VW keys a vector,
 * multiplied and added along the head (four key vectors a turn: independent adds); for
 * fewer (a decode step) the copy cost more than the products that read it, and each
 * key is read as stored, a vector sum over the head then a sum across its lanes, for
 * four query rows at a time (attend_rows4: the keys and values loaded once for the four
 * query heads of a group) or, one row per KV head, four keys a turn.  The output row is the sum of each key's probability times its value
 * row, four vectors of the head a pass over the keys.  Sums are float32 in their own
 * order (not BLAS's): within rounding of numpy's path, not its bits.  Keys a row may not
 * read never enter its max or sums (their lanes are set to 0 after the exp); no -inf is
 * relied on.  Every helper is always_inline (a call across levels costs a state
 * transition). */

/* The level's fused multiply-add and broadcast (plain C: a product and a sum). */
#undef AR_FMA
#undef AR_SET1
#if VW == 16
#define AR_FMA(a, b, c) ((v16f)_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define AR_SET1(c) ((v16f)_mm512_set1_ps(c))
#elif VW == 8
#define AR_FMA(a, b, c) ((v8f)_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define AR_SET1(c) ((v8f)_mm256_set1_ps(c))
#else
#define AR_FMA(a, b, c) ((a) * (b) + (c))
#define AR_SET1(c) ((v4f){(c), (c), (c), (c)})
#endif

#define AR_CAT_(a, b) a##_##b
#define AR_CAT(a, b) AR_CAT_(a, b)
#define AR(name) AR_CAT(name, SFX)
#define AR_INL ATTR static inline __attribute__((always_inline))

AR_INL VF AR(ld)(const float *p) {
    VF v;
    memcpy(&v, p, sizeof v);
    return v;
}

AR_INL void AR(st)(float *p, VF v) { memcpy(p, &v, sizeof v); }

/* The first n floats at p (the other lanes 0), and the first n lanes of v stored at p:
 * masked loads and stores from AVX2 up (vector_math.h's loadn and storen go through a
 * memcpy of n floats and the stack, which a head of 8 floats at AVX-512 hit on every
 * key: most of a tiny BERT's attention call). */
AR_INL VF AR(ldn)(const float *p, int n) {
#if VW == 16
    return (VF)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
#elif VW == 8
    if (n == VW) return AR(ld)(p);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return (VF)_mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes));
#else
    return RS(loadn)(p, n);
#endif
}

AR_INL void AR(stn)(float *p, VF v, int n) {
#if VW == 16
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), (__m512)v);
#elif VW == 8
    if (n == VW) {
        AR(st)(p, v);
        return;
    }
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes), (__m256)v);
#else
    RS(storen)(p, v, n);
#endif
}

/* c in every lane: the includer's AR_SET1, one broadcast instruction (vector_math.h's
 * splat adds c to a zero vector, a scalar add more in the inner loops here). */
AR_INL VF AR(bcast)(float c) { return AR_SET1(c); }

/* The lanes of the vector at j that are keys in [lo, hi). */
AR_INL VI AR(in_range)(Py_ssize_t j, Py_ssize_t lo, Py_ssize_t hi) {
    VI lane;
    for (int k = 0; k < VW; k++) lane[k] = (int32_t)(j + k);
    return (lane >= (int32_t)lo) & (lane < (int32_t)hi);
}

/* scores[j] = dot(q, key j) * scale for the key vectors covering [from, to) (from a
 * multiple of VW; lanes up to the next multiple written too, Tpad bounds them). */
AR_INL void AR(scores)(const float *q, const float *kt, Py_ssize_t tpad, Py_ssize_t head,
                       Py_ssize_t from, Py_ssize_t to, float scale, float *scores) {
    Py_ssize_t j = from;
    for (; j + 4 * VW <= to; j += 4 * VW) {
        VF a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        const float *col = kt + j;
        for (Py_ssize_t d = 0; d < head; d++, col += tpad) {
            VF qd = AR(bcast)(q[d]);
            a0 = AR_FMA(qd, AR(ld)(col), a0);
            a1 = AR_FMA(qd, AR(ld)(col + VW), a1);
            a2 = AR_FMA(qd, AR(ld)(col + 2 * VW), a2);
            a3 = AR_FMA(qd, AR(ld)(col + 3 * VW), a3);
        }
        AR(st)(scores + j, a0 * scale);
        AR(st)(scores + j + VW, a1 * scale);
        AR(st)(scores + j + 2 * VW, a2 * scale);
        AR(st)(scores + j + 3 * VW, a3 * scale);
    }
    for (; j < to; j += VW) {
        VF a0 = {0}, a1 = {0};
        const float *col = kt + j;
        Py_ssize_t d = 0;
        for (; d + 2 <= head; d += 2, col += 2 * tpad) { /* two chains of adds */
            a0 = AR_FMA(AR(bcast)(q[d]), AR(ld)(col), a0);
            a1 = AR_FMA(AR(bcast)(q[d + 1]), AR(ld)(col + tpad), a1);
        }
        if (d < head) a0 = AR_FMA(AR(bcast)(q[d]), AR(ld)(col), a0);
        AR(st)(scores + j, (a0 + a1) * scale);
    }
}

/* The probabilities of keys [lo, hi) in place of their scores (lanes of the covering
 * vectors outside [lo, hi) set to 0): exp(score - max) / sum, the max NaN-sticky as
 * numpy's (a NaN score makes the row NaN). */
AR_INL void AR(softmax)(float *scores, Py_ssize_t lo, Py_ssize_t hi) {
    const Py_ssize_t from = lo - lo % VW, to = hi + (VW - hi % VW) % VW;
    /* The max by vectors, lanes outside [lo, hi) read as scores[lo]; a NaN anywhere
     * makes it NaN, as numpy's max. */
    const VF first = AR(bcast)(scores[lo]);
    VF peaks = first;
    VI nan = {0};
    for (Py_ssize_t j = from; j < to; j += VW) {
        VF x = AR(ld)(scores + j);
        if (j < lo || j + VW > hi) x = RS(select)(AR(in_range)(j, lo, hi), x, first);
        nan |= x != x;
        peaks = RS(select)(x > peaks, x, peaks);
    }
    float peak = peaks[0];
    int any_nan = 0;
    for (int k = 0; k < VW; k++) {
        any_nan |= nan[k];
        if (peaks[k] > peak) peak = peaks[k];
    }
    if (any_nan) peak = __builtin_nanf("");
    VF sum = {0};
    for (Py_ssize_t j = from; j < to; j += VW) {
        VF x = AR(ld)(scores + j) - peak;
        /* x <= 0 on the lanes that count; the others are zeroed below, clamped so the
         * exp's 2^n stays in range (a NaN goes through). */
        x = RS(select)(x < -105.0f, AR(bcast)(-105.0f), x);
        x = RS(select)(x > 0.0f, AR(bcast)(0.0f), x);
        VF e = RS(exp)(x);
        if (j < lo || j + VW > hi) e = RS(select)(AR(in_range)(j, lo, hi), e, AR(bcast)(0.0f));
        sum = sum + e;
        AR(st)(scores + j, e);
    }
    float total = 0.0f;
    for (int k = 0; k < VW; k++) total += sum[k];
    const VF denom = AR(bcast)(total);
    for (Py_ssize_t j = from; j < to; j += VW) AR(st)(scores + j, AR(ld)(scores + j) / denom);
}

/* scores[j] = dot(q, key j) * scale for j in [lo, hi), reading the keys as stored (rows
 * of `head`): four keys a turn, each a vector sum over the head then summed across its
 * lanes.  For few query rows per KV head (a decode step), where transposing the keys
 * cost more than the products that read them. */
AR_INL float AR(hsum)(VF a) {
    float t[VW];
    memcpy(t, &a, sizeof a);
    for (int w = VW / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; k++) t[k] += t[k + w];
    return t[0];
}

AR_INL void AR(scores_direct)(const float *q, const float *keys, Py_ssize_t head,
                              Py_ssize_t lo, Py_ssize_t hi, float scale, float *scores) {
    Py_ssize_t j = lo;
    for (; j + 4 <= hi; j += 4) {
        VF a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        const float *k0 = keys + j * head;
        for (Py_ssize_t c = 0; c < head; c += VW) {
            int w = head - c < VW ? (int)(head - c) : VW;
            VF qc = AR(ldn)(q + c, w);
            a0 = AR_FMA(qc, AR(ldn)(k0 + c, w), a0);
            a1 = AR_FMA(qc, AR(ldn)(k0 + head + c, w), a1);
            a2 = AR_FMA(qc, AR(ldn)(k0 + 2 * head + c, w), a2);
            a3 = AR_FMA(qc, AR(ldn)(k0 + 3 * head + c, w), a3);
        }
        scores[j] = AR(hsum)(a0) * scale;
        scores[j + 1] = AR(hsum)(a1) * scale;
        scores[j + 2] = AR(hsum)(a2) * scale;
        scores[j + 3] = AR(hsum)(a3) * scale;
    }
    for (; j < hi; j++) {
        VF a0 = {0};
        for (Py_ssize_t c = 0; c < head; c += VW) {
            int w = head - c < VW ? (int)(head - c) : VW;
            a0 = AR_FMA(AR(ldn)(q + c, w), AR(ldn)(keys + j * head + c, w), a0);
        }
        scores[j] = AR(hsum)(a0) * scale;
    }
}

/* out[0..head) = sum over keys j in [lo, hi) of p[j] * values row j (rows of `head`):
 * up to four vectors of the head a pass over the keys, accumulated in registers. */
AR_INL void AR(weighted_values)(const float *p, const float *values, Py_ssize_t head,
                                Py_ssize_t lo, Py_ssize_t hi, float *out) {
    Py_ssize_t c = 0;
    for (; c + 4 * VW <= head; c += 4 * VW) {
        VF a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        const float *row = values + lo * head + c;
        for (Py_ssize_t j = lo; j < hi; j++, row += head) {
            VF pj = AR(bcast)(p[j]);
            a0 = AR_FMA(pj, AR(ld)(row), a0);
            a1 = AR_FMA(pj, AR(ld)(row + VW), a1);
            a2 = AR_FMA(pj, AR(ld)(row + 2 * VW), a2);
            a3 = AR_FMA(pj, AR(ld)(row + 3 * VW), a3);
        }
        AR(st)(out + c, a0);
        AR(st)(out + c + VW, a1);
        AR(st)(out + c + 2 * VW, a2);
        AR(st)(out + c + 3 * VW, a3);
    }
    for (; c < head; c += VW) {
        int w = head - c < VW ? (int)(head - c) : VW;
        VF a0 = {0}, a1 = {0};
        const float *row = values + lo * head + c;
        Py_ssize_t j = lo;
        for (; j + 2 <= hi; j += 2, row += 2 * head) { /* two chains of adds */
            a0 = AR_FMA(AR(bcast)(p[j]), AR(ldn)(row, w), a0);
            a1 = AR_FMA(AR(bcast)(p[j + 1]), AR(ldn)(row + head, w), a1);
        }
        if (j < hi) a0 = AR_FMA(AR(bcast)(p[j]), AR(ldn)(row, w), a0);
        AR(stn)(out + c, a0 + a1, w);
    }
}

/* The scores of four query rows (q: 4 rows of `head`; a missing row zero) over keys
 * [lo, hi) as stored, into 4 rows of `tpad`: each key is loaded once for the four (a
 * decode step's query heads of one KV head; one row at a time read the cache `group`
 * times, from L3 for a long one). */
AR_INL void AR(scores_rows4)(const float *q, const float *keys, Py_ssize_t head,
                             Py_ssize_t lo, Py_ssize_t hi, float scale, float *scores,
                             Py_ssize_t tpad) {
    for (Py_ssize_t j = lo; j < hi; j++) {
        const float *k = keys + j * head;
        VF a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (Py_ssize_t c = 0; c < head; c += VW) {
            int w = head - c < VW ? (int)(head - c) : VW;
            VF kc = AR(ldn)(k + c, w);
            a0 = AR_FMA(AR(ldn)(q + c, w), kc, a0);
            a1 = AR_FMA(AR(ldn)(q + head + c, w), kc, a1);
            a2 = AR_FMA(AR(ldn)(q + 2 * head + c, w), kc, a2);
            a3 = AR_FMA(AR(ldn)(q + 3 * head + c, w), kc, a3);
        }
        scores[j] = AR(hsum)(a0) * scale;
        scores[tpad + j] = AR(hsum)(a1) * scale;
        scores[2 * tpad + j] = AR(hsum)(a2) * scale;
        scores[3 * tpad + j] = AR(hsum)(a3) * scale;
    }
}

/* outs[i][0..head) = sum over keys j in [lo, hi) of p[i * tpad + j] * values row j, for
 * four rows of probabilities (zero outside each row's keys; outs[i] NULL: not stored),
 * each value vector loaded once for the four. */
AR_INL void AR(weighted_values_rows4)(const float *p, Py_ssize_t tpad, const float *values,
                                      Py_ssize_t head, Py_ssize_t lo, Py_ssize_t hi,
                                      float *const *outs) {
    for (Py_ssize_t c = 0; c < head; c += VW) {
        int w = head - c < VW ? (int)(head - c) : VW;
        VF a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        const float *row = values + lo * head + c;
        for (Py_ssize_t j = lo; j < hi; j++, row += head) {
            VF v = AR(ldn)(row, w);
            a0 = AR_FMA(AR(bcast)(p[j]), v, a0);
            a1 = AR_FMA(AR(bcast)(p[tpad + j]), v, a1);
            a2 = AR_FMA(AR(bcast)(p[2 * tpad + j]), v, a2);
            a3 = AR_FMA(AR(bcast)(p[3 * tpad + j]), v, a3);
        }
        VF acc[4] = {a0, a1, a2, a3};
        for (int i = 0; i < 4; i++)
            if (outs[i]) AR(stn)(outs[i] + c, acc[i], w);
    }
}

/* The query rows r0..r0+nr-1 (nr <= 4; row r: head g * group + r / S, position r % S)
 * of batch entry b and KV head g, four at a time over the keys as stored: the scores of
 * the keys any of them reads, then each row's softmax over its own, the others zeroed. */
/* The job's additive bias row of (batch entry b, query head n, position t) added to
 * scores [lo, hi), when it has one (com.microsoft Attention's mask and attention_bias:
 * the scores' sum with the bias, as numpy's path adds it, before the softmax). */
AR_INL void AR(add_bias)(const GqaJob *job, Py_ssize_t b, Py_ssize_t n, Py_ssize_t t,
                         float *scores, Py_ssize_t lo, Py_ssize_t hi) {
    if (!job->bias) return;
    const float *row = job->bias + b * job->bias_b + n * job->bias_n + t * job->bias_t;
    for (Py_ssize_t j = lo; j < hi; j++) scores[j] += row[j];
}

AR_INL void AR(attend_rows4)(const GqaJob *job, Py_ssize_t b, Py_ssize_t g, Py_ssize_t r0,
                             int nr, const float *keys, const float *values, float *scores,
                             float *q, Py_ssize_t tpad) {
    const Py_ssize_t H = job->head, S = job->seq, N = job->heads;
    const Py_ssize_t keys_n = job->past + S, group = N / job->kv_heads;
    Py_ssize_t lo[4], hi[4], lo_all = keys_n, hi_all = 0, row_n[4] = {0}, row_t[4] = {0};
    float *outs[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < nr; i++) {
        const Py_ssize_t n = g * group + (r0 + i) / S, t = (r0 + i) % S, pos = job->past + t;
        row_n[i] = n, row_t[i] = t;
        hi[i] = job->causal ? pos + 1 : keys_n;
        lo[i] = job->window > 0 && pos - job->window + 1 > 0 ? pos - job->window + 1 : 0;
        if (lo[i] < lo_all) lo_all = lo[i];
        if (hi[i] > hi_all) hi_all = hi[i];
        gqa_rotate_row(job->q + (b * S + t) * job->q_stride + n * H, job, t, q + i * H);
        outs[i] = job->out + (b * S + t) * N * H + n * H;
    }
    memset(q + nr * H, 0, (size_t)((4 - nr) * H) * 4);
    AR(scores_rows4)(q, keys, H, lo_all, hi_all, job->scale, scores, tpad);
    for (int i = 0; i < 4; i++) {
        float *p = scores + i * tpad;
        if (i < nr) {
            AR(add_bias)(job, b, row_n[i], row_t[i], p, lo[i], hi[i]);
            AR(softmax)(p, lo[i], hi[i]);
            memset(p + lo_all, 0, (size_t)(lo[i] - lo_all) * 4);
            memset(p + hi[i], 0, (size_t)(hi_all - hi[i]) * 4);
        } else {
            memset(p + lo_all, 0, (size_t)(hi_all - lo_all) * 4);
        }
    }
    AR(weighted_values_rows4)(scores, tpad, values, H, lo_all, hi_all, outs);
}

/* Every (batch entry, query head, query position) row of the job, the caches already
 * filled (present_k/present_v rows [0, past + seq)).  scratch: 4 * (tpad + head) floats,
 * then head * tpad more when the keys are transposed (gqa_transposes), zeroed (the
 * transposed keys' padding lanes stay 0). */
ATTR static void AR(attend)(const GqaJob *job, float *scratch, Py_ssize_t tpad) {
    const Py_ssize_t H = job->head, S = job->seq, N = job->heads, KV = job->kv_heads;
    const Py_ssize_t keys_n = job->past + S, group = N / KV;
    const int transposed = gqa_transposes(job);
    float *scores = scratch, *q = scratch + 4 * tpad, *kt = q + 4 * H;
    for (Py_ssize_t b = 0; b < job->batch; b++) {
        for (Py_ssize_t g = 0; g < KV; g++) {
            const Py_ssize_t cache = (b * KV + g) * job->present_rows * H;
            const float *keys = job->present_k + cache, *values = job->present_v + cache;
            if (!transposed && group * S > 1) { /* few rows: four at a time */
                for (Py_ssize_t r0 = 0; r0 < group * S; r0 += 4) {
                    const int nr = group * S - r0 < 4 ? (int)(group * S - r0) : 4;
                    AR(attend_rows4)(job, b, g, r0, nr, keys, values, scores, q, tpad);
                }
                continue;
            }
            if (transposed)
                for (Py_ssize_t j = 0; j < keys_n; j++)
                    for (Py_ssize_t d = 0; d < H; d++) kt[d * tpad + j] = keys[j * H + d];
            for (Py_ssize_t n = g * group; n < (g + 1) * group; n++) {
                for (Py_ssize_t t = 0; t < S; t++) {
                    const Py_ssize_t pos = job->past + t;
                    const Py_ssize_t hi = job->causal ? pos + 1 : keys_n;
                    Py_ssize_t lo = job->window > 0 ? pos - job->window + 1 : 0;
                    if (lo < 0) lo = 0;
                    const float *src = job->q + (b * S + t) * job->q_stride + n * H;
                    gqa_rotate_row(src, job, t, q);
                    if (transposed)
                        AR(scores)(q, kt, tpad, H, lo - lo % VW, hi, job->scale, scores);
                    else
                        AR(scores_direct)(q, keys, H, lo, hi, job->scale, scores);
                    AR(add_bias)(job, b, n, t, scores, lo, hi);
                    AR(softmax)(scores, lo, hi);
                    AR(weighted_values)(scores, values, H, lo, hi,
                                        job->out + (b * S + t) * N * H + n * H);
                }
            }
        }
    }
}

#undef AR_INL
