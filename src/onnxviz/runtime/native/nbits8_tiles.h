/* The tiles of native/_nbits8.c's vector levels, included once per level: NB8_NAME(f)
 * names a function of the level, NB8_INL and NB8_T carry its target, NB8_VNNI picks the
 * chunk's integer dot (vpmaddubsw pairs at AVX2, vpdpbusd at AVX-512 VNNI: the same int32
 * lanes, so both levels give the same bits).  No include guard: meant to be included
 * more than once. */

/* The scales of a chunk's 8 lanes for one column: s points at the block of its first
 * lane; a block spans 2 lanes (BS 16), 4 (BS 32) or all of them. */
NB8_INL __m256 NB8_NAME(lane_scales)(const float *s, const int BS) {
    if (BS >= CHUNK) return _mm256_broadcast_ss(s);
    if (BS == 32)
        return _mm256_permutevar8x32_ps(_mm256_castpd_ps(_mm256_broadcast_sd((const double *)s)),
                                        _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(s)),
                                    _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

/* acc[m] -= zp[n, b] * scale[n, b] * row_terms[m, b] over the blocks b, for MT rows (the
 * lanes are summed afterwards, so any lane takes any block); *tail gets the blocks past
 * the last 8 as floats.  Packed zero points only: without them the midpoint comes off
 * each lane's dot (chunk_step's MID). */
NB8_INL void NB8_NAME(zero_point_terms)(const job_t *j, int64_t n, int64_t m0, const int MT,
                               __m256 *acc, float *tail) {
    const int64_t kb = j->kb;
    const float *sc = j->scales + n * kb;
    const uint8_t *zrow = j->zp8 + n * j->zp_row;
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    int64_t blk = 0;
    for (; blk + 8 <= kb; blk += 8) {
        int32_t x;
        memcpy(&x, zrow + blk / 2, 4);
        const __m256 z = _mm256_cvtepi32_ps(_mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(x), shifts), _mm256_set1_epi32(15)));
        const __m256 zs = _mm256_mul_ps(z, _mm256_loadu_ps(sc + blk));
        for (int m = 0; m < MT; m++)
            acc[m] = _mm256_fnmadd_ps(zs, _mm256_loadu_ps(j->row_terms + (m0 + m) * kb + blk),
                                      acc[m]);
    }
    for (int m = 0; m < MT; m++) {
        float s = 0.0f;
        for (int64_t b = blk; b < kb; b++)
            s += (float)zero_point(j, n, b) * sc[b] * j->row_terms[(m0 + m) * kb + b];
        tail[m] = s;
    }
}

/* One chunk of one column (its 32 bytes w, its lanes' scales s) into MT rows' sums. */
NB8_INL void NB8_NAME(chunk_step)(__m256 *acc, __m256i w, __m256 s, const int8_t *q, int64_t qstride,
                         const float *lanes, const int32_t *mid, int64_t lstride, const int MT,
                         const int MID) {
    const __m256i low = _mm256_set1_epi8(15);
    const __m256i lo = _mm256_and_si256(w, low);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low);
    for (int m = 0; m < MT; m++) {
        const __m256i even = _mm256_loadu_si256((const __m256i *)(q + m * qstride));
        const __m256i odd = _mm256_loadu_si256((const __m256i *)(q + m * qstride + CHUNK / 2));
        /* no zero points: each lane starts from minus 8 times its sum of qa, so its
         * codes count less 8, exactly */
        const __m256i start = MID ? _mm256_loadu_si256((const __m256i *)(mid + m * lstride))
                                  : _mm256_setzero_si256();
#if NB8_VNNI
        /* the same int32 lanes: each the exact sum of its 4 bytes' code x qa, twice */
        const __m256i sums = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(start, lo, even), hi, odd);
#else
        const __m256i pairs =
            _mm256_add_epi16(_mm256_maddubs_epi16(lo, even), _mm256_maddubs_epi16(hi, odd));
        const __m256i sums = _mm256_add_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)), start);
#endif
        const __m256 dots = _mm256_cvtepi32_ps(sums);
        const __m256 scale = _mm256_mul_ps(s, _mm256_loadu_ps(lanes + m * lstride));
        acc[m] = _mm256_fmadd_ps(dots, scale, acc[m]);
    }
}

/* The lane sums of a, b, c and d: four columns' sums in one vector. */
NB8_INL __m128 NB8_NAME(hsum4)(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* The lane sum of a in hsum4's order, ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)):
 * a column's sum has the same bits whichever tile made it, so a row's outputs do not
 * depend on how many rows came with it. */
NB8_INL float NB8_NAME(hsum1)(__m256 a) {
    const __m256 h = _mm256_hadd_ps(a, a);
    const __m256 hh = _mm256_hadd_ps(h, h);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(hh), _mm256_extractf128_ps(hh, 1)));
}

/* Columns n0..n0+NT times rows m0..m0+MT. */
NB8_INL void NB8_NAME(tile)(const job_t *j, int64_t n0, int64_t m0, const int NT, const int MT,
                        const int BS, const int MID) {
    const int64_t bs = BS >= CHUNK ? j->bs : BS; /* BS 64 stands for every block of 64 up */
    const int64_t kb = j->kb, row = kb * (bs / 2), per_chunk = CHUNK / BS;
    const int shift = __builtin_ctzll((unsigned long long)bs) - 6; /* chunk -> block, BS 64 */
    const int8_t *qa = j->qa + m0 * j->chunks * CHUNK;
    const float *lanes = j->lane_sa + m0 * j->chunks * LANES;
    const int32_t *mid = j->lane_mid + m0 * j->chunks * LANES;
    const int64_t qstride = j->chunks * CHUNK, lstride = j->chunks * LANES;
    const uint8_t *col[4];
    const float *sc[4];
    __m256 acc[4][4];
    for (int t = 0; t < NT; t++) {
        for (int m = 0; m < MT; m++) acc[t][m] = _mm256_setzero_ps();
        col[t] = j->b + (n0 + t) * row;
        sc[t] = j->scales + (n0 + t) * kb;
    }
#if NB8_PREFETCH
    const int64_t ahead = NT == 1 ? NB8_STREAM_AHEAD : NB8_PREFETCH * NT * row;
#endif
    const int64_t full = j->full;
    for (int64_t c = 0; c < full; c++) {
        for (int t = 0; t < NT; t++) {
            const uint8_t *src = col[t] + c * (CHUNK / 2);
#if NB8_PREFETCH
            _mm_prefetch((const char *)src + ahead, _MM_HINT_T0);
#endif
            const __m256i w = _mm256_loadu_si256((const __m256i *)src);
            const __m256 s = NB8_NAME(lane_scales)(sc[t] + (BS >= CHUNK ? c >> shift : c * per_chunk), BS);
            NB8_NAME(chunk_step)(acc[t], w, s, qa + c * CHUNK, qstride, lanes + c * LANES,
                       mid + c * LANES, lstride, MT, MID);
        }
    }
    if (full < j->chunks) { /* the partial last chunk (blocks of 16 or 32): then zeros */
        const int64_t c = full;
        for (int t = 0; t < NT; t++) {
            uint8_t bytes[CHUNK / 2] = {0};
            float blocks[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            memcpy(bytes, col[t] + c * (CHUNK / 2), (size_t)(row - c * (CHUNK / 2)));
            memcpy(blocks, sc[t] + c * per_chunk, (size_t)(kb - c * per_chunk) * sizeof(float));
            const __m256i w = _mm256_loadu_si256((const __m256i *)bytes);
            NB8_NAME(chunk_step)(acc[t], w, NB8_NAME(lane_scales)(blocks, BS), qa + c * CHUNK, qstride,
                       lanes + c * LANES, mid + c * LANES, lstride, MT, MID);
        }
    }
    float tail[4][4] = {{0.0f}}; /* [column][row]: zero-point terms past 8-block vectors */
    if (!MID)
        for (int t = 0; t < NT; t++) NB8_NAME(zero_point_terms)(j, n0 + t, m0, MT, acc[t], tail[t]);
    if (NT == 4) { /* four columns' sums at once, stored together */
        const __m128 bias = j->bias ? _mm_loadu_ps(j->bias + n0) : _mm_setzero_ps();
        for (int m = 0; m < MT; m++) {
            __m128 v = NB8_NAME(hsum4)(acc[0][m], acc[1][m], acc[2][m], acc[3][m]);
            v = _mm_add_ps(_mm_sub_ps(v, _mm_setr_ps(tail[0][m], tail[1][m], tail[2][m],
                                                      tail[3][m])),
                           bias);
            if (j->bad[m0 + m]) v = _mm_set1_ps(NAN);
            _mm_storeu_ps(j->y + (m0 + m) * j->N + n0, v);
        }
        return;
    }
    for (int t = 0; t < NT; t++)
        for (int m = 0; m < MT; m++)
            store(j, m0 + m, n0 + t, NB8_NAME(hsum1)(acc[t][m]) - tail[t][m]);
}

NB8_INL void NB8_NAME(run_bs)(const job_t *j, const int BS, const int MID) {
    int64_t n0 = 0;
    /* More than a few rows: tiles of four columns, which stay in L1 while every group of
     * rows reads them.  A few rows (a decode step) take none: one column at a time, the
     * loop below, so that the weights stream in order (four columns read four streams a
     * column apart, which the prefetchers served at half the rate from memory). */
    if (j->M > FEW_ROWS)
        for (; n0 + 4 <= j->N; n0 += 4) {
            int64_t m0 = 0;
            for (; m0 + 2 <= j->M; m0 += 2) NB8_NAME(tile)(j, n0, m0, 4, 2, BS, MID);
            if (m0 < j->M) NB8_NAME(tile)(j, n0, m0, 4, 1, BS, MID);
        }
    for (; n0 < j->N; n0++) {
        int64_t m0 = 0;
        for (; m0 + 4 <= j->M; m0 += 4) NB8_NAME(tile)(j, n0, m0, 1, 4, BS, MID);
        for (; m0 + 2 <= j->M; m0 += 2) NB8_NAME(tile)(j, n0, m0, 1, 2, BS, MID);
        if (m0 < j->M) NB8_NAME(tile)(j, n0, m0, 1, 1, BS, MID);
    }
}

/* Every (block, zero point) form its own function: the six inlined into `run` made one
 * 65 KB function per level, most of the module's compile time. */
#define NB8_RUN_FN(BS, MID)                                                                \
    static NB8_T __attribute__((noinline)) void NB8_NAME(run_##BS##_##MID)(const job_t *j) { \
        NB8_NAME(run_bs)(j, BS, MID);                                                      \
    }
NB8_RUN_FN(16, 1) NB8_RUN_FN(16, 0) NB8_RUN_FN(32, 1) NB8_RUN_FN(32, 0) NB8_RUN_FN(64, 1)
NB8_RUN_FN(64, 0)
#undef NB8_RUN_FN

static NB8_T void NB8_NAME(run)(const job_t *j) {
    const int mid = j->zp8 == NULL;
    if (j->bs == 16)
        mid ? NB8_NAME(run_16_1)(j) : NB8_NAME(run_16_0)(j);
    else if (j->bs == 32)
        mid ? NB8_NAME(run_32_1)(j) : NB8_NAME(run_32_0)(j);
    else /* any block of 64 or more: one block per chunk */
        mid ? NB8_NAME(run_64_1)(j) : NB8_NAME(run_64_0)(j);
}
