/* recurrent_step.h: the activations, step epilogues and time loop of _recurrent.c, written
 * once over a vector type and included once per level.  The includer defines:
 *
 *   SFX    the level's suffix (generic, avx2, avx512);
 *   VF, VI, VU   a float, int and unsigned vector type of the compiler's vector extension
 *          (VW lanes of 4 bytes), whose operators the code below uses;
 *   VW     its lanes;
 *   ATTR   the level's target attribute (empty for generic C);
 *   GEMM(h, w, k, G, mr, tile)   the level's tile product (see _recurrent.c);
 *   MR(G)  rows per tile product for G gates.
 *
 * The vector extension lowers to the level's instructions under its target attribute
 * (SSE2 or NEON for generic, AVX2 ymm, AVX-512 zmm), so the activations' operations are
 * the same at every level: only the tile products (fused multiply-adds at levels 1-3) and
 * their sums' order differ between levels.  Selections are bit masks (compare then
 * and/or), never min/max, so a NaN goes through every activation as NaN. */

#include "vector_math.h"

/* The activations over a buffer (the module's tanh and sigmoid: tests). */
ATTR static void RS(activate)(const float *x, float *y, Py_ssize_t n, int kind) {
    for (Py_ssize_t i = 0; i < n; i += VW) {
        int w = n - i < VW ? (int)(n - i) : VW;
        VF v = RS(loadn)(x + i, w);
        RS(storen)(y + i, kind ? RS(sigmoid)(v) : RS(tanh)(v), w);
    }
}

/* The units of block j that vector q covers: first unit and count (<= 0: none). */
#define RS_UNITS(j, q, H, u0, n)                                                           \
    const Py_ssize_t u0 = (j) * UNITS + (q) * VW;                                          \
    const int n = (H) - u0 < VW ? (int)((H) - u0) : VW;                                    \
    if (n <= 0) break

/* LSTM, rows m0.. m0 + mr - 1, block j: gates i, o, f, c = tile + proj; c and h. */
ATTR static void RS(lstm_epilogue)(const Job *jb, const float *tile, int mr, Py_ssize_t j,
                                   const float *proj, float *c, float *h) {
    const Py_ssize_t H = jb->H;
    for (int m = 0; m < mr; m++) {
        const float *pm = proj + m * 4 * H, *tm = tile + m * 4 * UNITS;
        for (int q = 0; q < UNITS / VW; q++) {
            RS_UNITS(j, q, H, u0, n);
            VF gi = RS(loadn)(tm + q * VW, VW) + RS(loadn)(pm + u0, n);
            VF go = RS(loadn)(tm + UNITS + q * VW, VW) + RS(loadn)(pm + H + u0, n);
            VF gf = RS(loadn)(tm + 2 * UNITS + q * VW, VW) + RS(loadn)(pm + 2 * H + u0, n);
            VF gc = RS(loadn)(tm + 3 * UNITS + q * VW, VW) + RS(loadn)(pm + 3 * H + u0, n);
            VF cm = RS(loadn)(c + m * H + u0, n);
            cm = RS(sigmoid)(gf) * cm + RS(sigmoid)(gi) * RS(tanh)(gc);
            RS(storen)(c + m * H + u0, cm, n);
            RS(storen)(h + m * H + u0, RS(sigmoid)(go) * RS(tanh)(cm), n);
        }
    }
}

/* GRU with linear_before_reset: z, r, and the candidate's product R_h h in one tile. */
ATTR static void RS(gru_lbr_epilogue)(const Job *jb, const float *tile, int mr, Py_ssize_t j,
                                      const float *proj, const float *hprev, float *h) {
    const Py_ssize_t H = jb->H;
    for (int m = 0; m < mr; m++) {
        const float *pm = proj + m * 3 * H, *tm = tile + m * 3 * UNITS;
        for (int q = 0; q < UNITS / VW; q++) {
            RS_UNITS(j, q, H, u0, n);
            VF z = RS(sigmoid)(RS(loadn)(tm + q * VW, VW) + RS(loadn)(pm + u0, n));
            VF r = RS(sigmoid)(RS(loadn)(tm + UNITS + q * VW, VW) + RS(loadn)(pm + H + u0, n));
            VF rh = RS(loadn)(tm + 2 * UNITS + q * VW, VW) + RS(loadn)(jb->rbh + u0, n);
            VF cand = RS(tanh)(RS(loadn)(pm + 2 * H + u0, n) + r * rh);
            VF hp = RS(loadn)(hprev + m * H + u0, n);
            RS(storen)(h + m * H + u0, (1.0f - z) * cand + z * hp, n);
        }
    }
}

/* GRU without it, first half: z kept, r * h_prev for the candidate's product. */
ATTR static void RS(gru_zr_epilogue)(const Job *jb, const float *tile, int mr, Py_ssize_t j,
                                     const float *proj, const float *hprev, float *z_out,
                                     float *rh_out) {
    const Py_ssize_t H = jb->H;
    for (int m = 0; m < mr; m++) {
        const float *pm = proj + m * 3 * H, *tm = tile + m * 2 * UNITS;
        for (int q = 0; q < UNITS / VW; q++) {
            RS_UNITS(j, q, H, u0, n);
            VF z = RS(sigmoid)(RS(loadn)(tm + q * VW, VW) + RS(loadn)(pm + u0, n));
            VF r = RS(sigmoid)(RS(loadn)(tm + UNITS + q * VW, VW) + RS(loadn)(pm + H + u0, n));
            RS(storen)(z_out + m * H + u0, z, n);
            RS(storen)(rh_out + m * H + u0, r * RS(loadn)(hprev + m * H + u0, n), n);
        }
    }
}

/* ... second half: the candidate from (r * h_prev) R_h^T. */
ATTR static void RS(gru_h_epilogue)(const Job *jb, const float *tile, int mr, Py_ssize_t j,
                                    const float *proj, const float *hprev, const float *zs,
                                    float *h) {
    const Py_ssize_t H = jb->H;
    for (int m = 0; m < mr; m++) {
        const float *pm = proj + m * 3 * H, *tm = tile + m * UNITS;
        for (int q = 0; q < UNITS / VW; q++) {
            RS_UNITS(j, q, H, u0, n);
            VF cand = RS(tanh)(RS(loadn)(tm + q * VW, VW) + RS(loadn)(pm + 2 * H + u0, n));
            VF z = RS(loadn)(zs + m * H + u0, n);
            VF hp = RS(loadn)(hprev + m * H + u0, n);
            RS(storen)(h + m * H + u0, (1.0f - z) * cand + z * hp, n);
        }
    }
}

/* The input projections of block j for rows pm.. (a row's gates pstride floats long, H
 * apart, UNITS floats of each: what the epilogue adds to the tile) asked for before the
 * block's product runs.  They were written for every step before the loop, and the
 * recurrent weight has streamed through the caches since, so the epilogue waited on
 * these lines.  Zen 3, one LSTM node at batch 4 (A/B alternated, us a step): hidden 256
 * 69.1 -> 62.7, hidden 512 200.6 -> 186.3 (onnxruntime 51.0, 137.7); hidden 128 (its
 * weight in L2) unchanged; the LSTM + GRU model 0.92-0.93 of its time. */
ATTR static void RS(fetch_block)(const float *pm, int mr, Py_ssize_t pstride, Py_ssize_t H,
                                 Py_ssize_t j) {
    const Py_ssize_t u0 = j * UNITS, last = (H - u0 < UNITS ? H - u0 : UNITS) - 1;
    for (int m = 0; m < mr; m++)
        for (Py_ssize_t g = 0; g < pstride; g += H) {
            const float *p = pm + m * pstride + g + u0;
            __builtin_prefetch(p, 0, 3);
            __builtin_prefetch(p + last, 0, 3);
        }
}

/* The time loop of one direction.  Step t reads h_prev (h0, or the row of y the step
 * before wrote) and writes its h into its row of y; per block of UNITS hidden units, the
 * tile product of every group of at most MR(G) rows, then that block's epilogue, which
 * needs only that block's gates (the packed weight interleaves them per block).
 *
 * ZIGZAG: odd steps take the blocks last to first.  The blocks are independent (the same
 * numbers in any order), and a weight about the size of the L2 cache (hidden 256: 1 MB)
 * swept the same way every step misses on every block, each evicted just before it is
 * read again; swept back and forth, a step starts on the blocks the step before read
 * last.  Hidden 256, batch 4, 64 steps: 2.62 -> 2.36 ms (AVX-512, 1 MB L2; medians of
 * 10 alternating rounds). */
ATTR static void RS(run)(const Job *jb) {
    const Py_ssize_t T = jb->T, B = jb->B, H = jb->H, nb = (H + UNITS - 1) / UNITS;
    const int G = jb->kind == KIND_LSTM ? 4 : jb->kind == KIND_GRU_LBR ? 3 : 2;
    const int rows = MR(G), rows_h = MR(1);
    float tile[MR_MAX * 4 * UNITS];
    const float *hprev = jb->h0;
    float *h = NULL;
    for (Py_ssize_t t = 0; t < T; t++) {
        const Py_ssize_t ts = jb->reverse ? T - 1 - t : t;
        h = jb->y + (ts * jb->D + jb->d) * B * H;
        if (jb->lens && jb->c) /* an ended sample keeps its cell state: saved, restored */
            for (Py_ssize_t m = 0; m < B; m++)
                if (t >= jb->lens[m]) memcpy(jb->c_kept + m * H, jb->c + m * H, (size_t)H * 4);
        const Py_ssize_t pstride = (jb->kind == KIND_LSTM ? 4 : 3) * H;
        const float *pt = jb->proj + t * B * pstride;
        for (Py_ssize_t jj = 0; jj < nb; jj++) {
            const Py_ssize_t j = (t & 1) ? nb - 1 - jj : jj; /* see ZIGZAG */
            const float *wj = jb->w1 + j * H * G * UNITS;
            for (Py_ssize_t m0 = 0; m0 < B; m0 += rows) {
                const int mr = B - m0 < rows ? (int)(B - m0) : rows;
                const float *pm = pt + m0 * pstride;
                RS(fetch_block)(pm, mr, pstride, H, j);
                GEMM(hprev + m0 * H, wj, H, G, mr, tile);
                if (jb->kind == KIND_LSTM)
                    RS(lstm_epilogue)(jb, tile, mr, j, pm, jb->c + m0 * H, h + m0 * H);
                else if (jb->kind == KIND_GRU_LBR)
                    RS(gru_lbr_epilogue)(jb, tile, mr, j, pm, hprev + m0 * H, h + m0 * H);
                else
                    RS(gru_zr_epilogue)(jb, tile, mr, j, pm, hprev + m0 * H, jb->z + m0 * H,
                                        jb->rh + m0 * H);
            }
        }
        if (jb->kind == KIND_GRU) {
            for (Py_ssize_t jj = 0; jj < nb; jj++) {
                const Py_ssize_t j = (t & 1) ? nb - 1 - jj : jj;
                const float *wj = jb->w2 + j * H * UNITS;
                for (Py_ssize_t m0 = 0; m0 < B; m0 += rows_h) {
                    const int mr = B - m0 < rows_h ? (int)(B - m0) : rows_h;
                    GEMM(jb->rh + m0 * H, wj, H, 1, mr, tile);
                    RS(gru_h_epilogue)(jb, tile, mr, j, pt + m0 * pstride, hprev + m0 * H,
                                       jb->z + m0 * H, h + m0 * H);
                }
            }
        }
        if (jb->lens) /* ... and its h: the step computed its rows all the same */
            for (Py_ssize_t m = 0; m < B; m++)
                if (t >= jb->lens[m]) {
                    memcpy(h + m * H, hprev + m * H, (size_t)H * 4);
                    if (jb->c) memcpy(jb->c + m * H, jb->c_kept + m * H, (size_t)H * 4);
                }
        hprev = h;
    }
    memcpy(jb->h_out, hprev, (size_t)(B * H) * 4);
}

/* ---- DynamicQuantizeLSTM (com.microsoft): the quantized hidden state ------------------
 *
 * The includer also defines VS and VB (VW int16 and uint8 lanes), QGEMM(jb, m0, mr, j,
 * tile) (the level's exact integer tile product of rows m0.. m0 + mr - 1 and block j:
 * tile[m][g][u] = sum_k (code - zero point)(R - R's zero point), int32; see qlstm in
 * _recurrent.c for the two layouts) and QMR (rows per tile product). */

/* DynamicQuantizeLinear of the B x H floats h, in its float32 steps (those of
 * kernels/quantize.py's dynamic_quantize_linear and _int8.c's dynamic_quantize): the range
 * with 0 in it, scale = (hi - lo) / 255, zero point = clip(rint(0 - lo / scale), 0, 255),
 * each code clip(rint(h / scale) + zero point, 0, 255).  An all-zero h has scale 1 and
 * zero point 0 (as the numpy steps give it).  Row m of the codes goes to jb->codes at
 * m * kp, zero from H to kp: centered (code - zero point, int16) for the pairs layout,
 * as they are (uint8) with their sum in jb->rowsum[m] for the quads.  Returns 0 with the
 * scale and zero point in *scale_out and jb->hzp, or -1 (nothing written) when h holds a
 * NaN or its range overflows: the caller's numpy steps decide those.  The lanes past the
 * end are loaded as zeros, which the range includes anyway; |h / scale| <= 255 and a bit,
 * so adding and taking away 1.5 * 2^23 rounds it half to even. */
ATTR static int RS(qquantize)(QJob *jb, const float *h, float *scale_out) {
    const Py_ssize_t B = jb->B, H = jb->H, kp = jb->kp, n = B * H;
    VF lo = RS(splat)(0.0f), hi = lo;
    VI bad = (VI)lo;
    for (Py_ssize_t i = 0; i < n; i += VW) {
        const VF v = RS(loadn)(h + i, n - i < VW ? (int)(n - i) : VW);
        bad |= v != v;
        lo = RS(select)(v < lo, v, lo);
        hi = RS(select)(v > hi, v, hi);
    }
    float l = 0.0f, u = 0.0f;
    int nan = 0;
    for (int k = 0; k < VW; k++) {
        nan |= bad[k] != 0;
        l = lo[k] < l ? lo[k] : l;
        u = hi[k] > u ? hi[k] : u;
    }
    float scale = (u - l) / 255.0f;
    if (nan || !(scale - scale == 0.0f)) return -1; /* a NaN, or an infinite range */
    float zf = 0.0f;
    if (scale == 0.0f) {
        scale = 1.0f;
    } else {
        zf = rintf(0.0f - l / scale);
        zf = zf < 0.0f ? 0.0f : (zf > 255.0f ? 255.0f : zf);
    }
    const int32_t zp = (int32_t)zf;
    const VI zero = (VI)RS(splat)(0.0f);
    for (Py_ssize_t m = 0; m < B; m++) {
        VI sum = zero;
        for (Py_ssize_t k = 0; k < H; k += VW) {
            const int w = H - k < VW ? (int)(H - k) : VW;
            VF t = RS(loadn)(h + m * H + k, w) / scale;
            t = (t + 12582912.0f) - 12582912.0f;
            t = t + zf;
            t = RS(select)(t < 0.0f, RS(splat)(0.0f), t);
            t = RS(select)(t > 255.0f, RS(splat)(255.0f), t);
            const VI code = __builtin_convertvector(t, VI);
            if (jb->bytes) {
                const VB c = __builtin_convertvector(code, VB);
                memcpy((uint8_t *)jb->codes + m * kp + k, &c, (size_t)w);
                sum += code; /* the lanes past H are 0: h loaded as 0, zero point 0 then */
            } else {
                const VS c = __builtin_convertvector(code - zp, VS);
                memcpy((int16_t *)jb->codes + m * kp + k, &c, (size_t)w * sizeof(int16_t));
            }
        }
        if (jb->bytes) {
            int32_t total = 0;
            for (int k = 0; k < VW; k++) total += sum[k];
            /* the lanes past H of the last vector held the zero point's code, not 0 */
            const Py_ssize_t tail = H % VW ? VW - H % VW : 0;
            jb->rowsum[m] = total - (int32_t)tail * zp;
            memset((uint8_t *)jb->codes + m * kp + H, 0, (size_t)(kp - H));
        } else {
            memset((int16_t *)jb->codes + m * kp + H, 0, (size_t)(kp - H) * sizeof(int16_t));
        }
    }
    *scale_out = scale;
    jb->hzp = zp;
    return 0;
}

/* Rows m0.. m0 + mr - 1 of block j: the gates x_part + float32(acc) * (h_scale * r_scale)
 * (+ Wb + Rb), each step rounded as the numpy loop's (no fused multiply-add: -std=c11),
 * then the cell (input_forget: f = 1 - i).  A row whose sequence has ended is computed
 * but not stored.  In stages over all the rows (the gates, then each activation over
 * every row): short independent chains the core overlaps, where one row's gates, cell
 * and h in a row were one long chain (hidden 256, batch 4, level 3: 12.1 -> 10.0 us a
 * step). */
ATTR static void RS(qlstm_epilogue)(const QJob *jb, const int32_t *tile, int mr, Py_ssize_t j,
                                    const float *xp, float hscale, float *c, float *h,
                                    const unsigned char *going) {
    const Py_ssize_t H = jb->H;
    for (int q = 0; q < UNITS / VW; q++) {
        RS_UNITS(j, q, H, u0, n);
        VF pre[MR_MAX][4], act[MR_MAX][4], mult[4];
        for (int k = 0; k < 4; k++) mult[k] = hscale * RS(loadn)(jb->rs + k * H + u0, n);
        for (int m = 0; m < mr; m++) {
            const float *pm = xp + m * 4 * H;
            const int32_t *tm = tile + m * 4 * UNITS;
            for (int k = 0; k < 4; k++) {
                VI acc;
                memcpy(&acc, tm + k * UNITS + q * VW, sizeof acc);
                VF g = RS(loadn)(pm + k * H + u0, n) + __builtin_convertvector(acc, VF) * mult[k];
                if (jb->bias) g = g + RS(loadn)(jb->bias + k * H + u0, n);
                pre[m][k] = g;
            }
        }
        for (int m = 0; m < mr; m++)
            for (int k = 0; k < 3; k++) act[m][k] = RS(sigmoid)(pre[m][k]);
        for (int m = 0; m < mr; m++) act[m][3] = RS(tanh)(pre[m][3]);
        VF cm[MR_MAX];
        for (int m = 0; m < mr; m++) {
            const VF sf = jb->input_forget ? 1.0f - act[m][0] : act[m][2];
            cm[m] = RS(loadn)(c + m * H + u0, n) * sf + act[m][0] * act[m][3];
        }
        for (int m = 0; m < mr; m++) {
            const VF hm = act[m][1] * RS(tanh)(cm[m]);
            if (!going[m]) continue;
            RS(storen)(c + m * H + u0, cm[m], n);
            RS(storen)(h + m * H + u0, hm, n);
        }
    }
}

/* One direction's whole step loop (see qlstm in _recurrent.c): per step, the offered
 * state quantized, then per block of UNITS hidden units (zigzag, as RS(run)) the exact
 * product of every group of QMR rows and that block's epilogue (a group whose sequences
 * have all ended is skipped); then the ended sequences' rows: y zero, h and c kept.  0,
 * or -1 when a state to quantize held a NaN or an infinite range (the outputs are then
 * incomplete). */
ATTR static int RS(qrun)(QJob *jb) {
    const Py_ssize_t T = jb->T, B = jb->B, H = jb->H;
    const Py_ssize_t nb = (H + UNITS - 1) / UNITS;
    int32_t tile[MR_MAX * 4 * UNITS];
    const float *offered = jb->h0;
    memset(jb->h_out, 0, (size_t)(B * H) * sizeof(float));
    for (Py_ssize_t m = 0; m < B; m++) jb->going[m] = 1;
    for (Py_ssize_t t = 0; t < T; t++) {
        float hscale;
        if (RS(qquantize)(jb, offered, &hscale) < 0) return -1;
        if (jb->lens)
            for (Py_ssize_t m = 0; m < B; m++) jb->going[m] = t < jb->lens[m];
        const float *xt = jb->xp + t * B * 4 * H;
        float *yt = jb->y + t * B * H;
        for (Py_ssize_t jj = 0; jj < nb; jj++) {
            const Py_ssize_t j = (t & 1) ? nb - 1 - jj : jj;
            for (Py_ssize_t m0 = 0; m0 < B; m0 += QMR) {
                const int mr = B - m0 < QMR ? (int)(B - m0) : QMR;
                int any = 0;
                for (int m = 0; m < mr; m++) any |= jb->going[m0 + m];
                if (!any) continue;
                QGEMM(jb, m0, mr, j, tile);
                RS(qlstm_epilogue)(jb, tile, mr, j, xt + m0 * 4 * H, hscale, jb->c + m0 * H,
                                   yt + m0 * H, jb->going + m0);
            }
            /* The next step's x_part for this block (its four gates' 16 units of each
             * row), asked for now (fetch_block, as the float loop asks for its own
             * step's): the input product (T x B x 4H, 1 MB for 64 steps of 4 x 1024)
             * is out of L1 and L2 by its step, and the epilogue's reads of it waited
             * there (a third of the step loop's time, hidden 256, batch 4). */
            if (t + 1 < T) RS(fetch_block)(xt + B * 4 * H, (int)B, 4 * H, H, j);
        }
        if (jb->lens) {
            for (Py_ssize_t m = 0; m < B; m++) {
                if (jb->going[m])
                    memcpy(jb->h_out + m * H, yt + m * H, (size_t)H * sizeof(float));
                else
                    memset(yt + m * H, 0, (size_t)H * sizeof(float));
            }
            offered = jb->zero_ended ? yt : jb->h_out;
        } else {
            offered = yt;
        }
    }
    if (!jb->lens) memcpy(jb->h_out, offered, (size_t)(B * H) * sizeof(float));
    return 0;
}

#undef RS_UNITS
#undef RS
#undef RS_CAT
#undef RS_CAT_
