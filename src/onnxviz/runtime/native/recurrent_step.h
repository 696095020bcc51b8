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
                GEMM(hprev + m0 * H, wj, H, G, mr, tile);
                const float *pm = pt + m0 * pstride;
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

#undef RS_UNITS
#undef RS
#undef RS_CAT
#undef RS_CAT_
