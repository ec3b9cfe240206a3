/* Fused attention at the AVX512-BF16 level: bfloat16 units on VDPBF16PS; float16 and float32
 * units are the AVX-512 level's (mc_attn_avx512_inl.h).
 *
 * Design:
 *   a. Both products of a bfloat16 unit run on VDPBF16PS, which adds the odd product and then
 *      the even one of each pair to float32 lanes, each addition rounded: the order and the
 *      roundings of the twin's pair chains (mc_attn.h design a.1), at twice the FMA rate, with
 *      the bfloat16 GEMM's one difference (mc_gemm_avx512bf16.c, design b): subnormal inputs
 *      read as zero and subnormal results flushed.  So, as the GEMM does, a unit whose Q, K or V
 *      holds a subnormal bfloat16 runs the FMA unit instead, and a block of rows whose rounded
 *      probabilities hold one runs its second product on FMAs (V widened to float32 the
 *      first time it is needed); sums that pass through the subnormal range are the bound's
 *      exception, as in the GEMM.
 *   b. Operands as pairs (32-bit words of two bfloat16, the even element in the low half, a
 *      zero past an odd length): K transposed to (D / 2) rows of S words -- a contiguous K row
 *      is already D / 2 words, so 16 x 16 word transposes in registers; V to (S / 2) rows of
 *      Dv words, rows 2m and 2m + 1 interleaved; the query rows and the rounded probabilities
 *      as they are, bfloat16 in a row.
 *   c. Tiles of 4 rows x 64 columns (16 accumulators: VDPBF16PS has a longer latency than an
 *      FMA) for both products; the scale, the mask, the softmax and the roundings are the
 *      AVX-512 level's.
 */
#include "mc_attn_avx512_inl.h"

/* Design a: subnormal bfloat16 among n elements of a row (byte stride st), found as the GEMM's
 * packs find them: (h & 0x7FFF) - 1 is below 0x7F exactly for a subnormal h. */
static int mc_attn_row_subnormal_(const char *src, int64_t st, int64_t n)
{
    if (st == 2) {
        __m512i m = _mm512_set1_epi16(-1);
        for (int64_t c = 0; c < n; c += 32) {
            const __m512i v = _mm512_maskz_loadu_epi16(mc_mask32_avx512(n - c), src + 2 * c);
            m = _mm512_min_epu16(m, _mm512_sub_epi16(_mm512_and_si512(
                v, _mm512_set1_epi16(0x7FFF)), _mm512_set1_epi16(1)));
        }
        return _mm512_cmplt_epu16_mask(m, _mm512_set1_epi16(0x7F)) != 0;
    }
    for (int64_t c = 0; c < n; ++c) {
        uint16_t h;
        memcpy(&h, src + c * st, 2);
        if (mc_bf16_subnormal_bits_(h))
            return 1;
    }
    return 0;
}

static int mc_attn_unit_subnormal_(const mc_attn_args *a, int64_t bh)
{
    const int64_t bi = bh / a->h, hi = bh % a->h;
    const char *q = a->q + bi * a->q_st[0] + hi * a->q_st[1];
    const char *k = a->k + bi * a->k_st[0] + hi * a->k_st[1];
    const char *v = a->v + bi * a->v_st[0] + hi * a->v_st[1];
    for (int64_t i = 0; i < a->t; ++i)
        if (mc_attn_row_subnormal_(q + i * a->q_st[2], a->q_st[3], a->d))
            return 1;
    for (int64_t j = 0; j < a->s; ++j)
        if (mc_attn_row_subnormal_(k + j * a->k_st[2], a->k_st[3], a->d) ||
            mc_attn_row_subnormal_(v + j * a->v_st[2], a->v_st[3], a->dv))
            return 1;
    return 0;
}

/* n bfloat16 of a row (byte stride st) into dst, zero padded to a multiple of 32. */
static void mc_attn_row16_(const char *src, int64_t st, int64_t n, uint16_t *dst)
{
    int64_t c = 0;
    if (st == 2) {
        for (; c < n; c += 32)
            _mm512_storeu_si512(dst + c, _mm512_maskz_loadu_epi16(mc_mask32_avx512(n - c),
                                                                  src + 2 * c));
        return;
    }
    for (; c < n; ++c)
        memcpy(dst + c, src + c * st, 2);
    for (; c & 31; ++c)
        dst[c] = 0;
}

/* Design b: K^T as pairs, ktp[p * sp + j] = (k[j, 2p], k[j, 2p + 1]); keys past S are zero. */
static void mc_attn_keys_pairs_(const mc_attn_args *a, const char *k, uint32_t *ktp, int64_t sp,
                                uint16_t *row)
{
    const int64_t np = (a->d + 1) / 2;
    if (a->k_st[3] == 2) {
        for (int64_t j0 = 0; j0 < sp; j0 += 16)
            for (int64_t p0 = 0; p0 < np; p0 += 16) {
                const __mmask32 m = mc_mask32_avx512(a->d - 2 * p0);
                __m512 r[16];
                for (int l = 0; l < 16; ++l)
                    r[l] = j0 + l < a->s ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(
                                               m, k + (j0 + l) * a->k_st[2] + 4 * p0))
                                         : _mm512_setzero_ps();
                mc_transpose16_avx512(r);
                const int64_t n = np - p0 < 16 ? np - p0 : 16;
                for (int64_t l = 0; l < n; ++l)
                    _mm512_storeu_ps((float *)(ktp + (p0 + l) * sp + j0), r[l]);
            }
        return;
    }
    for (int64_t j = 0; j < sp; ++j) {
        if (j < a->s)
            mc_attn_row16_(k + j * a->k_st[2], a->k_st[3], a->d, row);
        for (int64_t p = 0; p < np; ++p) {
            uint32_t word = 0;
            if (j < a->s)
                memcpy(&word, row + 2 * p, 4);
            ktp[p * sp + j] = word;
        }
    }
}

/* Design b: V as pairs, vp[m * dvp + c] = (v[2m, c], v[2m + 1, c]); columns past Dv are zero. */
static void mc_attn_values_pairs_(const mc_attn_args *a, const char *v, uint32_t *vp,
                                  int64_t dvp, uint16_t *lo, uint16_t *hi)
{
    for (int64_t m = 0; m < (a->s + 1) / 2; ++m) {
        mc_attn_row16_(v + 2 * m * a->v_st[2], a->v_st[3], a->dv, lo);
        if (2 * m + 1 < a->s)
            mc_attn_row16_(v + (2 * m + 1) * a->v_st[2], a->v_st[3], a->dv, hi);
        else
            memset(hi, 0, (size_t)mc_attn_pad16_(a->dv) * 2);
        for (int64_t c = 0; c < dvp; c += 16) {
            const __mmask16 mk = mc_mask16_avx512(a->dv - c);
            const __m512i l = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, lo + c));
            const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, hi + c));
            _mm512_storeu_si512(vp + m * dvp + c, _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
        }
    }
}

/* tot[r][c] (r < 4, c < 4) = sum over np pairs of x[r] . y[p * ys + 16 c .. + 15], on
 * VDPBF16PS in blocks of MC_ATTN_KC_PAIRS / 2 pairs (design a). */
MC_INLINE_ void mc_attn_tile_pairs_(const uint32_t *const *x, const uint32_t *y, int64_t ys,
                                    int64_t np, __m512 tot[4][4])
{
    const int64_t kc = MC_ATTN_KC_PAIRS / 2;
    for (int64_t p0 = 0; p0 < np; p0 += kc) {
        const int64_t p1 = np - p0 < kc ? np : p0 + kc;
        __m512 acc[4][4];
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 4; ++c)
                acc[r][c] = _mm512_setzero_ps();
        for (int64_t p = p0; p < p1; ++p) {
            const uint32_t *yr = y + p * ys;
            __m512bh yv[4];
            for (int c = 0; c < 4; ++c)
                yv[c] = (__m512bh)_mm512_loadu_si512(yr + 16 * c);
            for (int r = 0; r < 4; ++r) {
                const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)x[r][p]);
                for (int c = 0; c < 4; ++c)
                    acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, yv[c]);
            }
        }
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 4; ++c)
                tot[r][c] = p0 == 0 ? acc[r][c] : _mm512_add_ps(tot[r][c], acc[r][c]);
    }
    if (np == 0)
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 4; ++c)
                tot[r][c] = _mm512_setzero_ps();
}

/* Row r's probabilities (float32 values of bfloat16) as bfloat16 into p16; returns whether one
 * is subnormal (design a). */
static int mc_attn_probs16_(const float *y, int64_t s, uint16_t *p16)
{
    __m512i m = _mm512_set1_epi32(-1);
    int64_t j = 0;
    for (; j < s; j += 16) {
        const __mmask16 mk = mc_mask16_avx512(s - j);
        const __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(
            _mm512_maskz_loadu_ps(mk, y + j)), 16);
        _mm256_storeu_si256((__m256i *)(p16 + j), _mm512_cvtepi32_epi16(bits));
        m = _mm512_min_epu32(m, _mm512_sub_epi32(_mm512_and_si512(
            bits, _mm512_set1_epi32(0x7FFF)), _mm512_set1_epi32(1)));
    }
    for (int64_t z = 0; z < 2; ++z)          /* the pair after an odd S reads a zero */
        p16[j + z] = 0;
    return _mm512_cmplt_epu32_mask(m, _mm512_set1_epi32(0x7F)) != 0;
}

static void mc_attn_unit_avx512bf16(const mc_attn_args *a, int64_t bh, void *work)
{
    if (a->type != MC_BF16 || a->s == 0 || mc_attn_unit_subnormal_(a, bh)) {
        mc_attn_unit_avx512_(a, bh, work);
        return;
    }
    mc_attn_ws w;
    mc_attn_layout_(a, work, &w);
    const int64_t sp = w.sp, dvp = w.dvp, dp = mc_attn_pad16_(a->d);
    const int64_t bi = bh / a->h, hi = bh % a->h;
    const char *q = a->q + bi * a->q_st[0] + hi * a->q_st[1];
    const char *k = a->k + bi * a->k_st[0] + hi * a->k_st[1];
    const char *v = a->v + bi * a->v_st[0] + hi * a->v_st[1];
    /* the float32 K^T's place holds its pairs; the query rows and the probability rows as
     * bfloat16 take the float32 query and score rows' places */
    uint32_t *ktp = (uint32_t *)w.kt, *vp = (uint32_t *)w.vpairs;
    uint16_t *q16 = (uint16_t *)w.qr, *p16 = (uint16_t *)w.x, *row = (uint16_t *)w.row16;
    const int64_t half = (dp > dvp ? dp : dvp) + 32;      /* bfloat16 of a scratch row */
    mc_attn_keys_pairs_(a, k, ktp, sp, row);
    mc_attn_values_pairs_(a, v, vp, dvp, row, row + half);
    int widened = 0;                      /* V as float32 rows in w.vv (design a) */
    const int64_t npd = (a->d + 1) / 2, nps = (a->s + 1) / 2;
    __m512 tot[4][4];
    for (int64_t i0 = 0; i0 < a->t; i0 += 4) {
        const unsigned char *mrow[4];
        const int nr = mc_attn_block_rows_(a, bh, i0, mrow);
        const uint32_t *qw[4], *pw[4];
        for (int r = 0; r < 4; ++r) {
            const int rr = r < nr ? r : nr - 1;
            qw[r] = (const uint32_t *)(q16 + rr * 2 * dp);
            pw[r] = (const uint32_t *)(p16 + rr * 2 * sp);
        }
        for (int r = 0; r < nr; ++r)
            mc_attn_row16_(q + (i0 + r) * a->q_st[2], a->q_st[3], a->d, q16 + r * 2 * dp);
        for (int64_t j0 = 0; j0 < a->s; j0 += 64) {
            mc_attn_tile_pairs_(qw, ktp + j0, sp, npd, tot);
            mc_attn_scores_out_(a, &w, mrow, i0, nr, j0, tot);
        }
        int sub = 0;
        for (int r = 0; r < nr; ++r) {
            mc_attn_probs_(a, &w, mrow[r], i0 + r, r);
            sub |= mc_attn_probs16_(w.y + r * sp, a->s, p16 + r * 2 * sp);
        }
        if (sub) {
            const float *pp[4];
            for (int r = 0; r < 4; ++r)
                pp[r] = w.y + (r < nr ? r : nr - 1) * sp;
            if (!widened) {
                for (int64_t j = 0; j < a->s; ++j)
                    mc_attn_row_(v + j * a->v_st[2], a->v_st[3], a->type, a->dv,
                                 w.vv + j * dvp);
                widened = 1;
            }
            for (int64_t c0 = 0; c0 < a->dv; c0 += 32) {
                mc_attn_tile_(pp, w.vv + c0, dvp, a->s, 1, 2, tot);
                for (int r = 0; r < nr; ++r)
                    for (int c = 0; c < 2 && c0 + 16 * c < dvp; ++c)
                        _mm512_store_ps(w.orow + r * dvp + c0 + 16 * c, tot[r][c]);
            }
        } else {
            for (int64_t c0 = 0; c0 < a->dv; c0 += 64) {
                mc_attn_tile_pairs_(pw, vp + c0, dvp, nps, tot);
                for (int r = 0; r < nr; ++r)
                    for (int c = 0; c < 4 && c0 + 16 * c < dvp; ++c)
                        _mm512_store_ps(w.orow + r * dvp + c0 + 16 * c, tot[r][c]);
            }
        }
        for (int r = 0; r < nr; ++r)
            mc_attn_store_row_avx512_(a, bh, i0 + r, w.orow + r * dvp);
    }
}

const mc_attn_table mc_attn_table_avx512bf16 = {mc_attn_unit_avx512bf16};
