/* Fused attention with AVX-512 (F/BW/VL/DQ + FMA): the unit of mc_attn_scalar.h with
 * the scores 16 keys at a time, the output 16 columns at a time and the softmax by the vector
 * twin of mc_softmax_row_sd_.
 *
 * Design:
 *   a. Same bits as the scalar twin: lane j of a score accumulator runs the twin's fmaf chain
 *      for key j (the same terms, the same order, VFMADD231PS for fmaf); up to four
 *      accumulators of 16 lanes run side by side, each lane its own chain.  The output row is
 *      the same with lanes = columns.  Block partial sums, the scale, the mask select and the
 *      roundings are the twin's, lane by lane: float32 -> bfloat16 by mc_f32_to_bf16_lanes_avx512
 *      (mc_f32_to_bf16_bits), float32 -> float16 by VCVTPS2PH to nearest even, which equals
 *      mc_f32_to_f16_bits for every value these sums produce (quiet NaNs only).
 *   b. K is transposed and V copied into float32 rows of 16-lane multiples (zero padding), the
 *      query rows converted on load: 16 elements per instruction where the rows are contiguous
 *      (K by 16 x 16 transposes in registers: element by element it took a third of a unit's
 *      time at 128 x 64 per head), element by element otherwise.
 *   c. Static functions in a header: the AVX-512 level file instantiates the unit, and the
 *      AVX512-BF16 level's (mc_attn_avx512bf16.c) uses its pieces and falls back to it.
 */
#ifndef MC_ATTN_AVX512_INL_H_
#define MC_ATTN_AVX512_INL_H_

#include <immintrin.h>
#include "mc_act_avx512_inl.h"
#include "mc_attn_kernels.h"
#include "mc_attn_scalar.h"
#include "mc_simd_avx512.h"

/* A row of n elements (byte stride st) into dst as float32, zero padded to 16 lanes. */
static void mc_attn_row_(const char *src, int64_t st, int type, int64_t n, float *dst)
{
    const int64_t size = type == MC_F32 ? 4 : 2;
    if (st == size) {
        for (int64_t c = 0; c < n; c += 16)
            _mm512_storeu_ps(dst + c, mc_load16_avx512(src + c * size, type, mc_mask16_avx512(n - c)));
        return;
    }
    int64_t c = 0;
    for (; c < n; ++c)
        dst[c] = mc_gemm_load_elem_(src + c * st, type);
    for (; c < mc_attn_pad16_(n); ++c)
        dst[c] = 0.0f;
}

static void mc_attn_prepare_avx512_(const mc_attn_args *a, int64_t bh, void *work, mc_attn_ws *w)
{
    const int64_t bi = bh / a->h, hi = bh % a->h;
    mc_attn_layout_(a, work, w);
    const int64_t sp = w->sp, dvp = w->dvp;
    const char *k = a->k + bi * a->k_st[0] + hi * a->k_st[1];
    const int64_t size = a->type == MC_F32 ? 4 : 2;
    if (a->k_st[3] == size) {
        /* 16 keys x 16 columns at a time: rows loaded (masked at the edges, so the padding
         * keys read as zeros), transposed in registers, stored as 16 columns of kt */
        for (int64_t j0 = 0; j0 < sp; j0 += 16)
            for (int64_t d0 = 0; d0 < a->d; d0 += 16) {
                const __mmask16 m = mc_mask16_avx512(a->d - d0);
                __m512 r[16];
                for (int l = 0; l < 16; ++l)
                    r[l] = j0 + l < a->s ? mc_load16_avx512(k + (j0 + l) * a->k_st[2] +
                                                                d0 * size, a->type, m)
                                         : _mm512_setzero_ps();
                mc_transpose16_avx512(r);
                const int64_t nd = a->d - d0 < 16 ? a->d - d0 : 16;
                for (int64_t l = 0; l < nd; ++l)
                    _mm512_storeu_ps(w->kt + (d0 + l) * sp + j0, r[l]);
            }
    } else {
        float *tmp = w->qr;                      /* a key row, before the query rows need it */
        for (int64_t j = 0; j < a->s; ++j) {
            mc_attn_row_(k + j * a->k_st[2], a->k_st[3], a->type, a->d, tmp);
            for (int64_t dd = 0; dd < a->d; ++dd)
                w->kt[dd * sp + j] = tmp[dd];
        }
        for (int64_t dd = 0; dd < a->d; ++dd)
            for (int64_t j = a->s; j < sp; ++j)
                w->kt[dd * sp + j] = 0.0f;
    }
    const char *v = a->v + bi * a->v_st[0] + hi * a->v_st[1];
    for (int64_t j = 0; j < a->s; ++j)
        mc_attn_row_(v + j * a->v_st[2], a->v_st[3], a->type, a->dv, w->vv + j * dvp);
}

/* The lanes j0 .. j0 + 15 of row i that the mask excludes. */
static inline __mmask16 mc_attn_mask16_(const mc_attn_args *a, const unsigned char *mrow,
                                        int64_t i, int64_t j0)
{
    __mmask16 out = 0;
    if (mrow != NULL) {
        const int64_t n = a->s - j0 < 16 ? a->s - j0 : 16;
        if (a->m_st[3] == 1) {
            const __m128i b = _mm_maskz_loadu_epi8(mc_mask16_avx512(n), mrow + j0);
            out = _mm_mask_cmpeq_epi8_mask(mc_mask16_avx512(n), b, _mm_setzero_si128());
        } else {
            for (int64_t l = 0; l < n; ++l)
                if (mrow[(j0 + l) * a->m_st[3]] == 0)
                    out |= (__mmask16)(1u << l);
        }
    }
    if (a->causal) {
        const int64_t first = i + 1 - j0;          /* lanes >= first have j > i */
        if (first <= 0)
            out = (__mmask16)0xFFFF;
        else if (first < 16)
            out |= (__mmask16)(0xFFFFu << first);
    }
    return out;
}

/* tot[r][c] (r < 4, c < NC) = sum_k x[r][k] * y[k * ys + 16 c .. + 15] in the order of
 * mc_attn_dot_: 4 * NC independent chains (enough to cover the FMA latency).  Called with a
 * constant NC, so the loops unroll into registers. */
MC_INLINE_ void mc_attn_tile_(const float *const *x, const float *y, int64_t ys, int64_t n,
                                   int pairs, const int NC, __m512 tot[4][4])
{
    const int64_t kc = pairs ? MC_ATTN_KC_PAIRS : MC_ATTN_KC;
    for (int64_t k0 = 0; k0 < n; k0 += kc) {
        const int64_t k1 = n - k0 < kc ? n : k0 + kc;
        __m512 acc[4][4];
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < NC; ++c)
                acc[r][c] = _mm512_setzero_ps();
#define MC_ATTN_STEP_(kk)                                                                     \
        do {                                                                                  \
            const float *yr = y + (kk) * ys;                                                  \
            __m512 yv[4];                                                                     \
            for (int c = 0; c < NC; ++c)                                                      \
                yv[c] = _mm512_load_ps(yr + 16 * c);                                          \
            for (int r = 0; r < 4; ++r) {                                                     \
                const __m512 xv = _mm512_set1_ps(x[r][kk]);                                   \
                for (int c = 0; c < NC; ++c)                                                  \
                    acc[r][c] = _mm512_fmadd_ps(xv, yv[c], acc[r][c]);                        \
            }                                                                                 \
        } while (0)
        int64_t k = k0;
        if (pairs) {
            for (; k + 1 < k1; k += 2) {
                MC_ATTN_STEP_(k + 1);
                MC_ATTN_STEP_(k);
            }
        }
        for (; k < k1; ++k)
            MC_ATTN_STEP_(k);
#undef MC_ATTN_STEP_
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < NC; ++c)
                tot[r][c] = k0 == 0 ? acc[r][c] : _mm512_add_ps(tot[r][c], acc[r][c]);
    }
    if (n == 0)
        for (int r = 0; r < 4; ++r)
            for (int c = 0; c < NC; ++c)
                tot[r][c] = _mm512_setzero_ps();
}

/* float32 lanes rounded to `type` and widened back (mc_attn_round_). */
MC_INLINE_ __m512 mc_attn_round16_(__m512 v, int type)
{
    if (type == MC_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v)), 16));
    if (type == MC_F16)
        return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return v;
}

static void mc_attn_store_row_avx512_(const mc_attn_args *a, int64_t bh, int64_t i,
                                      const float *orow)
{
    const int64_t size = a->out_type == MC_F32 ? 4 : 2;
    if (a->o_st[3] != size) {
        mc_attn_store_row_(a, bh, i, orow);
        return;
    }
    char *o = a->out + (bh / a->h) * a->o_st[0] + (bh % a->h) * a->o_st[1] + i * a->o_st[2];
    for (int64_t c = 0; c < a->dv; c += 16) {
        const __mmask16 m = mc_mask16_avx512(a->dv - c);
        const __m512 v = _mm512_load_ps(orow + c);
        if (a->out_type == MC_F32)
            _mm512_mask_storeu_ps(o + c * 4, m, v);
        else if (a->out_type == MC_F16)
            _mm256_mask_storeu_epi16(o + c * 2, m,
                                     _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        else
            _mm256_mask_storeu_epi16(o + c * 2, m, _mm512_cvtepi32_epi16(
                mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v))));
    }
}

/* The scores tile tot (rows i0 .. i0 + nr - 1, keys j0 .. j0 + 63) scaled and masked into the
 * score rows w->x (design a: the twin's steps 2). */
MC_INLINE_ void mc_attn_scores_out_(const mc_attn_args *a, const mc_attn_ws *w,
                                    const unsigned char *const *mrow, int64_t i0, int nr,
                                    int64_t j0, __m512 tot[4][4])
{
    const __m512 scale = _mm512_set1_ps(a->scale), masked = _mm512_set1_ps(MC_ATTN_MASKED);
    const int scaled = a->scale != 1.0f;
    for (int r = 0; r < nr; ++r)
        for (int c = 0; c < 4 && j0 + 16 * c < w->sp; ++c) {
            __m512 v = scaled ? _mm512_mul_ps(scale, tot[r][c]) : tot[r][c];
            v = _mm512_mask_mov_ps(v, mc_attn_mask16_(a, mrow[r], i0 + r, j0 + 16 * c), masked);
            _mm512_store_ps(w->x + r * w->sp + j0 + 16 * c, v);
        }
}

/* Row r's probabilities: the softmax of its scores, rounded to the input type, zero where
 * masked (the twin's step 3), into w->y. */
MC_INLINE_ void mc_attn_probs_(const mc_attn_args *a, const mc_attn_ws *w,
                               const unsigned char *mrow, int64_t i, int r)
{
    float *y = w->y + r * w->sp;
    if (a->type == MC_F32)
        mc_softmax_row_avx512_(w->x + r * w->sp, y, a->s, 0);
    else
        mc_softmax16_row_avx512_(w->x + r * w->sp, y, a->s);
    for (int64_t j0 = 0; j0 < a->s; j0 += 16) {
        const __m512 p = mc_attn_round16_(_mm512_load_ps(y + j0), a->type);
        _mm512_store_ps(y + j0, _mm512_maskz_mov_ps((__mmask16)~mc_attn_mask16_(a, mrow, i, j0),
                                                     p));
    }
}

/* The rows of block i0 (up to 4) and their mask rows (rows past T repeat the last one). */
MC_INLINE_ int mc_attn_block_rows_(const mc_attn_args *a, int64_t bh, int64_t i0,
                                   const unsigned char *mrow[4])
{
    const int nr = (int)(a->t - i0 < 4 ? a->t - i0 : 4);
    for (int r = 0; r < 4; ++r)
        mrow[r] = mc_attn_mask_row_(a, bh, i0 + (r < nr ? r : nr - 1));
    return nr;
}

static void mc_attn_unit_avx512_(const mc_attn_args *a, int64_t bh, void *work)
{
    mc_attn_ws w;
    mc_attn_prepare_avx512_(a, bh, work, &w);
    const int pairs = a->type == MC_BF16;
    const int64_t sp = w.sp, dvp = w.dvp, dp = mc_attn_pad16_(a->d);
    const char *q = a->q + (bh / a->h) * a->q_st[0] + (bh % a->h) * a->q_st[1];
    __m512 tot[4][4];
    for (int64_t i0 = 0; i0 < a->t; i0 += 4) {
        const unsigned char *mrow[4];
        const int nr = mc_attn_block_rows_(a, bh, i0, mrow);
        const float *qp[4], *pp[4];
        for (int r = 0; r < 4; ++r) {
            const int rr = r < nr ? r : nr - 1;        /* rows past T repeat the last one */
            qp[r] = w.qr + rr * dp;
            pp[r] = w.y + rr * sp;
        }
        for (int r = 0; r < nr; ++r)
            mc_attn_row_(q + (i0 + r) * a->q_st[2], a->q_st[3], a->type, a->d, w.qr + r * dp);
        for (int64_t j0 = 0; j0 < a->s; j0 += 64) {
            mc_attn_tile_(qp, w.kt + j0, sp, a->d, pairs, 4, tot);
            mc_attn_scores_out_(a, &w, mrow, i0, nr, j0, tot);
        }
        for (int r = 0; r < nr; ++r)
            mc_attn_probs_(a, &w, mrow[r], i0 + r, r);
        for (int64_t c0 = 0; c0 < a->dv; c0 += 32) {
            mc_attn_tile_(pp, w.vv + c0, dvp, a->s, pairs, 2, tot);
            for (int r = 0; r < nr; ++r)
                for (int c = 0; c < 2 && c0 + 16 * c < dvp; ++c)
                    _mm512_store_ps(w.orow + r * dvp + c0 + 16 * c, tot[r][c]);
        }
        for (int r = 0; r < nr; ++r)
            mc_attn_store_row_avx512_(a, bh, i0 + r, w.orow + r * dvp);
    }
}

#endif
