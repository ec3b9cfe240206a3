/* The AVX-512 GEMM epilogue (mc_gemm_avx512.c, design d), written once for the levels that
 * share it.  The including file defines, before including:
 *   MC_EPI_FN_        the name of the epilogue (an mc_gemm_epi_fn),
 *   MC_EPI_PLAIN_FN_  the name of its common case (the tile is the whole sum, alpha 1, no C),
 *   MC_EPI_BF16_STORE_(o, m, v)  the store of the 16 float32 lanes of v rounded to bfloat16
 *                     at o under the mask m, bit-identical to mc_f32_to_bf16_bits;
 *   MC_EPI_BF16_ROUND2_(v0, v1)  v0 and v1 so rounded, the 32 values in order in one register;
 * and includes mc_act_avx512_inl.h, mc_gemm_kernels.h and mc_simd_avx512.h.  For the micro-kernel
 * with the epilogue in its registers (MC_UKR_EPI_DEFINE_) it also defines MC_MR, MC_NV, MC_NR
 * and mc_ukr_acc_(rows, cols, kc, a, ars, aks, nseg, sstride, b, bsstride, c), the
 * accumulators of the first cols (16, 24 or NR) columns of an mr x NR tile over nseg segments
 * of kc steps, A's value of row i for step k of segment s at a + s * sstride + i * ars +
 * k * aks, the segment's panel steps from b + s * bsstride bytes.
 */
#ifndef MC_GEMM_EPI_AVX512_INL_H_
#define MC_GEMM_EPI_AVX512_INL_H_

/* The common epilogue (the tile is the whole sum, no alpha, no C): bias, activation, store,
 * with the activation and the output type constants of the loop (one copy per pair). */
#define MC_EPI_STORE_(OT, o, m, v)                                                          \
    do {                                                                                    \
        if ((OT) == MC_F32)                                                                 \
            _mm512_mask_storeu_ps((o), (m), (v));                                           \
        else if ((OT) == MC_F16)                                                            \
            _mm256_mask_storeu_epi16((o), (m), _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | \
                                                                      _MM_FROUND_NO_EXC));  \
        else                                                                                \
            MC_EPI_BF16_STORE_((o), (m), (v));                                              \
    } while (0)

/* v rounded to the output type OT and back (mc_gemm.c, design i) */
MC_INLINE_ __m512 mc_epi_round_(int ot, __m512 v)
{
    if (ot == MC_F16)
        return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (ot == MC_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v)), 16));
    return v;
}

#define MC_EPI_PLAIN_LOOP_(ACT, OT)                                                         \
    for (int r = 0; r < mr; ++r) {                                                          \
        char *orow = out + (i + r) * o_rs + j * es;                                         \
        const char *rrow = res != NULL ? res + (i + r) * res_rs + j * es : NULL;            \
        const float *trow = tile + r * ldt;                                                 \
        for (int s = 0; s < nr; s += 16) {                                                  \
            const __mmask16 m = mc_mask16_avx512(nr - s);                                   \
            __m512 v = _mm512_maskz_loadu_ps(m, trow + s);                                  \
            if (bias != NULL)                                                               \
                v = _mm512_add_ps(v, bias_one ? _mm512_set1_ps(bias[0])                     \
                                              : _mm512_maskz_loadu_ps(m, bias + j + s));    \
            if (rrow != NULL)                                                               \
                v = _mm512_add_ps(mc_epi_round_((OT), v),                                   \
                                  mc_load16_avx512(rrow + s * es, (OT), m));                \
            v = mc_act_ps_((ACT), v);                                                       \
            MC_EPI_STORE_(OT, orow + s * es, m, v);                                         \
        }                                                                                   \
    }

/* LOOP(ACT, OT) with the common activations made constants of the loop */
#define MC_EPI_ACTS_(LOOP, OT)                                                              \
    switch (act) {                                                                          \
    case MC_ACT_NONE: LOOP(MC_ACT_NONE, OT) break;                                          \
    case MC_ACT_RELU: LOOP(MC_ACT_RELU, OT) break;                                          \
    case MC_ACT_RELU6: LOOP(MC_ACT_RELU6, OT) break;                                        \
    default: LOOP(act, OT) break;                                                           \
    }

static void MC_EPI_PLAIN_FN_(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                             int64_t i, int64_t j)
{
    const int out_type = g->out_type, act = g->act;
    const int es = out_type == MC_F32 ? 4 : 2;
    const float *const bias = g->bias;
    const int bias_one = g->bias_s == 0;
    char *const out = g->out;
    const int64_t o_rs = g->o_rs;
    const char *const res = g->res;
    const int64_t res_rs = g->res_rs;
    if (out_type == MC_BF16) {
        MC_EPI_ACTS_(MC_EPI_PLAIN_LOOP_, MC_BF16)
    } else if (out_type == MC_F16) {
        MC_EPI_ACTS_(MC_EPI_PLAIN_LOOP_, MC_F16)
    } else {
        MC_EPI_ACTS_(MC_EPI_PLAIN_LOOP_, MC_F32)
    }
}

/* The epilogue of one tile.  Every field of g is read once into a local first: the stores
 * below go through char pointers, which may alias anything, so a field read inside the loops
 * would be read again after every store. */
static void MC_EPI_FN_(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                       int64_t i, int64_t j, int first, int last)
{
    if (first && last && g->alpha == 1.0f && g->beta == 0.0f) {
        MC_EPI_PLAIN_FN_(g, tile, ldt, mr, nr, i, j);
        return;
    }
    const int out_type = g->out_type, act = g->act;
    const int es = out_type == MC_F32 ? 4 : 2;
    const int use_c = last && g->beta != 0.0f;
    const __m512 alpha = _mm512_set1_ps(g->alpha), beta = _mm512_set1_ps(g->beta);
    const int scale = g->alpha != 1.0f;
    const float *bias = g->bias, *c = g->c;
    const int bias_one = g->bias_s == 0;
    char *const out = g->out;
    const int64_t o_rs = g->o_rs, c_rs = g->c_rs, acc_rs = g->acc_rs;
    char *const accp = (char *)g->acc;
    const char *const res = g->res;
    const int64_t res_rs = g->res_rs;
    const int64_t acc_r0 = g->acc_r0, acc_c0 = g->acc_c0;
    for (int r = 0; r < mr; ++r) {
        const int64_t ii = i + r;
        float *acc = first && last ? NULL
                                   : (float *)(accp + (ii - acc_r0) * acc_rs + (j - acc_c0) * 4);
        for (int s = 0; s < nr; s += 16) {
            const int left = nr - s;
            const __mmask16 m = mc_mask16_avx512(left);
            __m512 t = _mm512_maskz_loadu_ps(m, tile + r * ldt + s);
            if (!first)
                t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(m, acc + s));
            if (!last) {
                _mm512_mask_storeu_ps(acc + s, m, t);
                continue;
            }
            __m512 v = scale ? _mm512_mul_ps(alpha, t) : t;
            if (use_c) {
                const float *cp = (const float *)((const char *)c + ii * c_rs + (j + s) * 4);
                v = _mm512_add_ps(v, _mm512_mul_ps(beta, _mm512_maskz_loadu_ps(m, cp)));
            }
            if (bias) {
                const __m512 bv = bias_one ? _mm512_set1_ps(bias[0])
                                           : _mm512_maskz_loadu_ps(m, bias + j + s);
                v = _mm512_add_ps(v, bv);
            }
            if (res != NULL)
                v = _mm512_add_ps(mc_epi_round_(out_type, v),
                                  mc_load16_avx512(res + ii * res_rs + (j + s) * es, out_type, m));
            if (act != MC_ACT_NONE)
                v = mc_act_ps_(act, v);          /* bit-identical to the scalar twin */
            MC_EPI_STORE_(out_type, out + ii * o_rs + (j + s) * es, m, v);
        }
    }
}

/* --- the epilogue of a tile in registers (the micro-kernels' ukr_epi) ----------------------- */

/* Two vectors widened from the 32 bfloat16 values of b: the words 8L..8L+3 of each 128-bit lane
 * L (lo) and 8L+4..8L+7 (hi), each a float32 lane (the word above 16 zero bits) */
#define MC_EPI_BF16_WIDEN_LO_(b) _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), (b)))
#define MC_EPI_BF16_WIDEN_HI_(b) _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), (b)))

/* One row's vectors through the common epilogue: the operations of MC_EPI_PLAIN_FN_, in its
 * order.  A bfloat16 row of two whole vectors is rounded as one 32-value vector
 * (MC_EPI_BF16_ROUND2_) and stored at once: half the conversions, one store.  With a residual,
 * the product rounded that way and the residual's 32 values are widened by the same in-lane
 * unpacks (MC_EPI_BF16_WIDEN_*_: two instructions each instead of a rounding of a dozen per
 * vector), summed and activated in that lane order, rounded as one vector and put back in
 * order by one permutation of its 64-bit groups (lo holds groups 0, 2, 4, 6 of four values,
 * hi groups 1, 3, 5, 7): each value sees the same operations. */
#define MC_EPI_REGS_ROW_(ACT, OT)                                                           \
    _Pragma("GCC unroll 16") for (int r = 0; r < rows; ++r) {                               \
        char *orow = out + (i + r) * o_rs + j * es;                                         \
        const char *rrow = res != NULL ? res + (i + r) * res_rs + j * es : NULL;            \
        if ((OT) == MC_BF16 && MC_NV == 2 && nr == 32) {                                    \
            __m512 v0 = c[r][0], v1 = c[r][MC_NV - 1];                                      \
            if (bias != NULL) {                                                             \
                v0 = _mm512_add_ps(v0, bv[0]);                                              \
                v1 = _mm512_add_ps(v1, bv[MC_NV - 1]);                                      \
            }                                                                               \
            if (rrow != NULL) {                                                             \
                const __m512i y = MC_EPI_BF16_ROUND2_(v0, v1);                              \
                const __m512i rv = _mm512_loadu_si512(rrow);                                \
                const __m512 lo = _mm512_add_ps(MC_EPI_BF16_WIDEN_LO_(y),                   \
                                                MC_EPI_BF16_WIDEN_LO_(rv));                 \
                const __m512 hi = _mm512_add_ps(MC_EPI_BF16_WIDEN_HI_(y),                   \
                                                MC_EPI_BF16_WIDEN_HI_(rv));                 \
                _mm512_storeu_si512(                                                        \
                    orow, _mm512_permutexvar_epi64(_mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0), \
                                                   MC_EPI_BF16_ROUND2_(mc_act_ps_((ACT), lo), \
                                                                       mc_act_ps_((ACT), hi)))); \
                continue;                                                                   \
            }                                                                               \
            _mm512_storeu_si512(orow, MC_EPI_BF16_ROUND2_(mc_act_ps_((ACT), v0),            \
                                                          mc_act_ps_((ACT), v1)));          \
            continue;                                                                       \
        }                                                                                   \
        for (int q = 0; q < MC_NV; ++q) {                                                   \
            if (16 * q >= nr)                                                               \
                break;                                                                      \
            __m512 v = c[r][q];                                                             \
            if (bias != NULL)                                                               \
                v = _mm512_add_ps(v, bv[q]);                                                \
            if (rrow != NULL)                                                               \
                v = _mm512_add_ps(mc_epi_round_((OT), v),                                   \
                                  mc_load16_avx512(rrow + 16 * q * es, (OT), m[q]));        \
            v = mc_act_ps_((ACT), v);                                                       \
            MC_EPI_STORE_(OT, orow + 16 * q * es, m[q], v);                                 \
        }                                                                                   \
    }

/* LOOP(ACT, OT) for the activations of a few instructions (the only ones mc_epi_regs_ keeps in
 * registers) */
#define MC_EPI_CHEAP_ACTS_(LOOP, OT)                                                        \
    switch (act) {                                                                          \
    case MC_ACT_NONE: LOOP(MC_ACT_NONE, OT) break;                                          \
    case MC_ACT_RELU: LOOP(MC_ACT_RELU, OT) break;                                          \
    default: LOOP(MC_ACT_RELU6, OT) break;                                                  \
    }

/* The common epilogue applied to the accumulators c of the rows x nr tile at (i, j).  Any other
 * activation than relu and relu6 goes through the tile stored to memory, row by row, as the
 * plain epilogue does (the same operations, so the same bits): evaluated with 28 accumulators
 * live it spilled, and gelu's epilogue took twice the time it takes from the stored tile. */
MC_INLINE_ void mc_epi_regs_(const int rows, __m512 c[][MC_NV], int nr, const mc_gemm_args *g,
                             int64_t i, int64_t j)
{
    const int out_type = g->out_type, act = g->act;
    if (act != MC_ACT_NONE && act != MC_ACT_RELU && act != MC_ACT_RELU6) {
        float tile[MC_MR * MC_NR] __attribute__((aligned(64)));
#pragma GCC unroll 16
        for (int r = 0; r < rows; ++r)
#pragma GCC unroll 4
            for (int q = 0; q < MC_NV; ++q)
                _mm512_store_ps(tile + r * MC_NR + 16 * q, c[r][q]);
        MC_EPI_PLAIN_FN_(g, tile, MC_NR, rows, nr, i, j);
        return;
    }
    const int es = out_type == MC_F32 ? 4 : 2;
    const float *const bias = g->bias;
    char *const out = g->out;
    const int64_t o_rs = g->o_rs;
    const char *const res = g->res;
    const int64_t res_rs = g->res_rs;
    __mmask16 m[MC_NV];
    __m512 bv[MC_NV];
#pragma GCC unroll 4
    for (int q = 0; q < MC_NV; ++q) {
        m[q] = mc_mask16_avx512(nr - 16 * q);
        bv[q] = bias == NULL ? _mm512_setzero_ps()
                : g->bias_s == 0 ? _mm512_set1_ps(bias[0])
                                 : _mm512_maskz_loadu_ps(m[q], bias + j + 16 * q);
    }
    if (out_type == MC_BF16) {
        MC_EPI_CHEAP_ACTS_(MC_EPI_REGS_ROW_, MC_BF16)
    } else if (out_type == MC_F16) {
        MC_EPI_CHEAP_ACTS_(MC_EPI_REGS_ROW_, MC_F16)
    } else {
        MC_EPI_CHEAP_ACTS_(MC_EPI_REGS_ROW_, MC_F32)
    }
}

/* NAME, an mc_gemm_ukr_epi_fn over panels of element type AT, and NAME_A, its
 * mc_gemm_ukr_epi_a_fn (A in place): mc_ukr_acc_ then mc_epi_regs_, one copy per row count; a
 * tile of at most 16 or 24 columns (a narrow product, or the last panel of one) computes only
 * those (mc_gemm_avx512bf16.c, design h). */
#define MC_UKR_EPI_COLS_(R, AT, a, ars, aks, nseg, sstride, bsstride)                        \
    __m512 c[MC_MR][MC_NV];                                                                 \
    if (nr <= 16)                                                                           \
        mc_ukr_acc_(R, 16, kc, a, ars, aks, nseg, sstride, (const AT *)b, bsstride, c);     \
    else if (nr <= 24)                                                                      \
        mc_ukr_acc_(R, 24, kc, a, ars, aks, nseg, sstride, (const AT *)b, bsstride, c);     \
    else                                                                                    \
        mc_ukr_acc_(R, MC_NR, kc, a, ars, aks, nseg, sstride, (const AT *)b, bsstride, c);  \
    mc_epi_regs_(R, c, nr, g, i, j);
#define MC_UKR_EPI_ROWS_(R, AT)                                                             \
    static void mc_ukr_epi_##R##_(int64_t kc, const char *a, const void *b, int nr,         \
                                  const mc_gemm_args *g, int64_t i, int64_t j)              \
    {                                                                                       \
        MC_UKR_EPI_COLS_(R, AT, a, 4, MC_MR * 4, 1, 0, 0)                                   \
    }                                                                                       \
    static void mc_ukr_epi_a_##R##_(int64_t kc, const char *a, int64_t lda, int nseg,       \
                                    int64_t sstride, const void *b, int64_t bsstride,       \
                                    int nr, const mc_gemm_args *g, int64_t i, int64_t j)    \
    {                                                                                       \
        MC_UKR_EPI_COLS_(R, AT, a, lda, 4, nseg, sstride, bsstride)                         \
    }
#define MC_UKR_EPI_DEFINE_(NAME, NAME_A, AT)                                                \
    MC_UKR_EPI_ROWS_(1, AT) MC_UKR_EPI_ROWS_(2, AT) MC_UKR_EPI_ROWS_(3, AT)                 \
    MC_UKR_EPI_ROWS_(4, AT) MC_UKR_EPI_ROWS_(5, AT) MC_UKR_EPI_ROWS_(6, AT)                 \
    MC_UKR_EPI_ROWS_(7, AT) MC_UKR_EPI_ROWS_(8, AT) MC_UKR_EPI_ROWS_(9, AT)                 \
    MC_UKR_EPI_ROWS_(10, AT) MC_UKR_EPI_ROWS_(11, AT) MC_UKR_EPI_ROWS_(12, AT)              \
    MC_UKR_EPI_ROWS_(13, AT) MC_UKR_EPI_ROWS_(14, AT)                                       \
    static void NAME(int64_t kc, const void *ap, const void *bp, float *tile, int mr, int nr, \
                     const mc_gemm_args *g, int64_t i, int64_t j)                           \
    {                                                                                       \
        typedef void (*fn_t)(int64_t, const char *, const void *, int, const mc_gemm_args *, \
                             int64_t, int64_t);                                             \
        static const fn_t rows[MC_MR + 1] = {                                               \
            NULL, mc_ukr_epi_1_, mc_ukr_epi_2_, mc_ukr_epi_3_, mc_ukr_epi_4_,               \
            mc_ukr_epi_5_, mc_ukr_epi_6_, mc_ukr_epi_7_, mc_ukr_epi_8_, mc_ukr_epi_9_,      \
            mc_ukr_epi_10_, mc_ukr_epi_11_, mc_ukr_epi_12_, mc_ukr_epi_13_, mc_ukr_epi_14_}; \
        (void)tile;                                                                         \
        rows[mr](kc, (const char *)ap, bp, nr, g, i, j);                                    \
    }                                                                                       \
    static void NAME_A(int64_t kc, const char *a, int64_t lda, int nseg, int64_t sstride,    \
                       const void *bp, int64_t bsstride, int mr, int nr,                    \
                       const mc_gemm_args *g, int64_t i, int64_t j)                         \
    {                                                                                       \
        typedef void (*fn_t)(int64_t, const char *, int64_t, int, int64_t, const void *,    \
                             int64_t, int, const mc_gemm_args *, int64_t, int64_t);         \
        static const fn_t rows[MC_MR + 1] = {                                               \
            NULL, mc_ukr_epi_a_1_, mc_ukr_epi_a_2_, mc_ukr_epi_a_3_, mc_ukr_epi_a_4_,       \
            mc_ukr_epi_a_5_, mc_ukr_epi_a_6_, mc_ukr_epi_a_7_, mc_ukr_epi_a_8_,             \
            mc_ukr_epi_a_9_, mc_ukr_epi_a_10_, mc_ukr_epi_a_11_, mc_ukr_epi_a_12_,          \
            mc_ukr_epi_a_13_, mc_ukr_epi_a_14_};                                            \
        rows[mr](kc, a, lda, nseg, sstride, bp, bsstride, nr, g, i, j);                     \
    }

#endif
