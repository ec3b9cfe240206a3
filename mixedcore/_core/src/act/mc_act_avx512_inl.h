/* Activation functions of 16 float32 at a time (AVX-512F/DQ + FMA): the vector twins of
 * mc_act_scalar.h, included by the AVX-512 units only (mc_act_avx512.c, mc_gemm_avx512.c).
 *
 * Design:
 *   a. Each function mirrors the scalar function of the same name (mc_*_sd_ -> mc_*_pd_): the
 *      same float64 operations in the same order on the constants and tables of
 *      mc_act_scalar.h, an FMA instruction exactly where the scalar code calls fma().  So the
 *      results are bit-identical to the scalar twins for every input (mc_act_scalar.h, design
 *      a); tests/test_activations.py checks it at every level.
 *   b. A scalar branch becomes a per-lane selection.  A branch is computed only when at least one
 *      of the 8 lanes takes it (gelu's tails are rare for typical pre-activations), and lanes that
 *      do not take it are discarded by the blend, so their clamped or meaningless values never
 *      reach a result.
 *   c. float32 -> float64 in two halves of 8 lanes, one rounding back (VCVTPD2PS, round to nearest
 *      even like the scalar cast).  NaN lanes are replaced last by the quieted input NaN, as the
 *      scalar code returns it, so payloads agree too.
 *   d. Static inline, always inlined: each unit compiles them with its own flags.
 */
#ifndef MC_ACT_AVX512_INL_H_
#define MC_ACT_AVX512_INL_H_

#include <immintrin.h>
#include "mc_act_scalar.h"
#include "mc_simd_avx512.h"

#define MC_ACT_INLINE_ static inline __attribute__((always_inline))

/* --- bits --------------------------------------------------------------------------------------- */

MC_ACT_INLINE_ __m512 mc_act_quiet_ps_(__m512 v)
{
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x00400000)));
}

MC_ACT_INLINE_ __m512d mc_act_abs_pd_(__m512d x)
{
    return _mm512_andnot_pd(_mm512_set1_pd(-0.0), x);
}

MC_ACT_INLINE_ __m512d mc_act_signed_pd_(__m512d y, __m512d x)
{
    return _mm512_or_pd(y, _mm512_and_pd(x, _mm512_set1_pd(-0.0)));
}

/* --- float64 building blocks -------------------------------------------------------------------- */

MC_ACT_INLINE_ __m512d mc_act_horner_pd_(const double *c, int deg, __m512d t)
{
    __m512d p = _mm512_set1_pd(c[deg]);
    for (int k = deg - 1; k >= 0; --k)
        p = _mm512_fmadd_pd(p, t, _mm512_set1_pd(c[k]));
    return p;
}

/* mc_act_exp_neg_sd_: MAXPD returns its second operand when either is NaN, as the scalar
 * `MIN > t ? MIN : t` does; -(n * c) + r (VFNMADD) is fma(-n, c, r) exactly. */
MC_ACT_INLINE_ __m512d mc_act_exp_neg_pd_(__m512d t)
{
    const __m512d lo = _mm512_set1_pd(MC_ACT_EXP_MIN), round = _mm512_set1_pd(MC_ACT_ROUND);
    const __m512d tc = _mm512_max_pd(lo, t);
    const __m512d kd = _mm512_add_pd(_mm512_mul_pd(tc, _mm512_set1_pd(MC_ACT_LOG2E)), round);
    const __m512d n = _mm512_sub_pd(kd, round);
    __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(MC_ACT_LN2_HI), tc);
    r = _mm512_fnmadd_pd(n, _mm512_set1_pd(MC_ACT_LN2_LO), r);
    const __m512d p = mc_act_horner_pd_(mc_act_exp_c_, MC_ACT_EXP_DEG, r);
    const __m512d scale = _mm512_castsi512_pd(_mm512_slli_epi64(
        _mm512_add_epi64(_mm512_castpd_si512(kd), _mm512_set1_epi64(1023)), 52));
    const __m512d e = _mm512_mul_pd(p, scale);
    return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(t, lo, _CMP_LT_OQ), e, _mm512_setzero_pd());
}

/* mc_act_gelu_tail_sd_: MINPD returns its second operand for NaN, as `FAR < ax ? FAR : ax`. */
MC_ACT_INLINE_ __m512d mc_act_gelu_tail_pd_(__m512d x, __m512d *a_out, __m512d *m)
{
    const __m512d a = _mm512_min_pd(_mm512_set1_pd(MC_ACT_GELU_FAR), mc_act_abs_pd_(x));
    const __m512d pa = _mm512_mul_pd(
        mc_act_exp_neg_pd_(_mm512_mul_pd(_mm512_mul_pd(a, a), _mm512_set1_pd(-0.5))),
        _mm512_set1_pd(MC_ACT_INV_SQRT_2PI));
    *m = mc_act_horner_pd_(mc_act_m_, MC_ACT_M_DEG,
                           _mm512_div_pd(_mm512_sub_pd(a, _mm512_set1_pd(8.0)),
                                         _mm512_add_pd(a, _mm512_set1_pd(2.0))));
    *a_out = a;
    return pa;
}

MC_ACT_INLINE_ __m512d mc_act_gelu_q_pd_(__m512d s)
{
    return mc_act_horner_pd_(mc_act_q_, MC_ACT_Q_DEG,
                             _mm512_fmadd_pd(s, _mm512_set1_pd(0.25), _mm512_set1_pd(-1.0)));
}

/* --- the functions, float64 in and out ---------------------------------------------------------- */

MC_ACT_INLINE_ __m512d mc_gelu_pd_(__m512d x)
{
    const __m512d s = _mm512_mul_pd(x, x);
    const __mmask8 mid = _mm512_cmp_pd_mask(s, _mm512_set1_pd(MC_ACT_GELU_MID), _CMP_LE_OQ);
    __m512d g = _mm512_setzero_pd();
    if (mid) {
        const __m512d q = mc_act_gelu_q_pd_(s);
        g = _mm512_mul_pd(x, _mm512_fmadd_pd(x, q, _mm512_set1_pd(0.5)));
    }
    if (mid != 0xFF) {
        __m512d a, m;
        const __m512d pa = mc_act_gelu_tail_pd_(x, &a, &m);
        const __m512d t = _mm512_mul_pd(pa, m);
        const __m512d neg = _mm512_xor_pd(t, _mm512_set1_pd(-0.0));
        const __mmask8 pos = _mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_GT_OQ);
        const __m512d tail = _mm512_mask_blend_pd(pos, neg, _mm512_sub_pd(x, t));
        g = _mm512_mask_blend_pd(mid, tail, g);
    }
    return g;
}

MC_ACT_INLINE_ __m512d mc_gelu_grad_pd_(__m512d x)
{
    const __m512d one = _mm512_set1_pd(1.0);
    const __mmask8 root = _mm512_cmp_pd_mask(x, _mm512_set1_pd(-1.0), _CMP_GE_OQ) &
                          _mm512_cmp_pd_mask(x, _mm512_set1_pd(-0.5), _CMP_LE_OQ);
    const __m512d s = _mm512_mul_pd(x, x);
    const __mmask8 central = _mm512_cmp_pd_mask(s, _mm512_set1_pd(MC_ACT_GELU_MID), _CMP_LE_OQ);
    const __mmask8 mid = central & (__mmask8)~root;
    __m512d d = _mm512_setzero_pd();
    if (mid) {
        const __m512d q = mc_act_gelu_q_pd_(s);
        const __m512d phi = _mm512_mul_pd(mc_act_exp_neg_pd_(_mm512_mul_pd(s, _mm512_set1_pd(-0.5))),
                                          _mm512_set1_pd(MC_ACT_INV_SQRT_2PI));
        d = _mm512_fmadd_pd(x, phi, _mm512_fmadd_pd(x, q, _mm512_set1_pd(0.5)));
    }
    if (central != 0xFF) {
        __m512d a, m;
        const __m512d pa = mc_act_gelu_tail_pd_(x, &a, &m);
        const __m512d g = _mm512_mul_pd(pa, _mm512_div_pd(_mm512_sub_pd(_mm512_mul_pd(a, a), m), a));
        const __mmask8 pos = _mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_GT_OQ);
        const __m512d tail = _mm512_mask_blend_pd(pos, _mm512_xor_pd(g, _mm512_set1_pd(-0.0)),
                                                  _mm512_add_pd(one, g));
        d = _mm512_mask_blend_pd(central, tail, d);
    }
    if (root) {
        const __m512d r = mc_act_horner_pd_(mc_act_r_, MC_ACT_R_DEG,
                                            _mm512_fmadd_pd(x, _mm512_set1_pd(4.0), _mm512_set1_pd(3.0)));
        const __m512d dx0 = _mm512_sub_pd(_mm512_sub_pd(x, _mm512_set1_pd(MC_ACT_X0_HI)),
                                          _mm512_set1_pd(MC_ACT_X0_LO));
        d = _mm512_mask_blend_pd(root, d, _mm512_mul_pd(dx0, r));
    }
    return d;
}

MC_ACT_INLINE_ __m512d mc_sigmoid_pd_(__m512d x)
{
    const __m512d one = _mm512_set1_pd(1.0);
    const __m512d e = mc_act_exp_neg_pd_(_mm512_or_pd(x, _mm512_set1_pd(-0.0)));   /* -|x| */
    const __mmask8 neg = _mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_LT_OQ);
    return _mm512_div_pd(_mm512_mask_blend_pd(neg, one, e), _mm512_add_pd(one, e));
}

MC_ACT_INLINE_ __m512d mc_sigmoid_grad_pd_(__m512d x)
{
    const __m512d e = mc_act_exp_neg_pd_(_mm512_or_pd(x, _mm512_set1_pd(-0.0)));
    const __m512d q = _mm512_add_pd(_mm512_set1_pd(1.0), e);
    return _mm512_div_pd(e, _mm512_mul_pd(q, q));
}

MC_ACT_INLINE_ __m512d mc_tanh_pd_(__m512d x)
{
    const __m512d one = _mm512_set1_pd(1.0);
    const __m512d a = mc_act_abs_pd_(x);
    const __mmask8 small = _mm512_cmp_pd_mask(a, _mm512_set1_pd(MC_ACT_TANH_SMALL), _CMP_LT_OQ);
    __m512d y = _mm512_setzero_pd();
    if (small != 0xFF) {
        const __m512d e = mc_act_exp_neg_pd_(_mm512_mul_pd(a, _mm512_set1_pd(-2.0)));
        y = _mm512_div_pd(_mm512_sub_pd(one, e), _mm512_add_pd(one, e));
    }
    if (small) {
        const __m512d s = _mm512_mul_pd(a, a);
        const __m512d p = mc_act_horner_pd_(mc_act_tanh_c_, MC_ACT_TANH_DEG, s);
        y = _mm512_mask_blend_pd(small, y, _mm512_fmadd_pd(_mm512_mul_pd(a, s), p, a));
    }
    return mc_act_signed_pd_(y, x);
}

MC_ACT_INLINE_ __m512d mc_tanh_grad_pd_(__m512d x)
{
    const __m512d e = mc_act_exp_neg_pd_(_mm512_mul_pd(mc_act_abs_pd_(x), _mm512_set1_pd(-2.0)));
    const __m512d q = _mm512_add_pd(_mm512_set1_pd(1.0), e);
    return _mm512_div_pd(_mm512_mul_pd(_mm512_set1_pd(4.0), e), _mm512_mul_pd(q, q));
}

MC_ACT_INLINE_ __m512d mc_silu_pd_(__m512d x)
{
    const __m512d s = mc_sigmoid_pd_(x);
    const __mmask8 z = _mm512_cmp_pd_mask(s, _mm512_setzero_pd(), _CMP_EQ_OQ);
    return _mm512_mask_blend_pd(z, _mm512_mul_pd(x, s), _mm512_set1_pd(-0.0));
}

MC_ACT_INLINE_ __m512d mc_silu_grad_pd_(__m512d x)
{
    const __m512d g = mc_sigmoid_grad_pd_(x);
    const __mmask8 z = _mm512_cmp_pd_mask(g, _mm512_setzero_pd(), _CMP_EQ_OQ);
    return _mm512_add_pd(mc_sigmoid_pd_(x),
                         _mm512_mask_blend_pd(z, _mm512_mul_pd(x, g), _mm512_setzero_pd()));
}

/* h < 0 ? 0 : (h > 1 ? 1 : h) for every h but NaN (whose lanes the caller replaces) */
MC_ACT_INLINE_ __m512d mc_hard_sigmoid_pd_(__m512d x)
{
    const __m512d h = _mm512_add_pd(_mm512_div_pd(x, _mm512_set1_pd(6.0)), _mm512_set1_pd(0.5));
    return _mm512_min_pd(_mm512_max_pd(h, _mm512_setzero_pd()), _mm512_set1_pd(1.0));
}

MC_ACT_INLINE_ __m512d mc_hard_sigmoid_grad_pd_(__m512d x)
{
    const __mmask8 in = _mm512_cmp_pd_mask(x, _mm512_set1_pd(-3.0), _CMP_GT_OQ) &
                        _mm512_cmp_pd_mask(x, _mm512_set1_pd(3.0), _CMP_LT_OQ);
    return _mm512_maskz_mov_pd(in, _mm512_set1_pd(1.0 / 6.0));
}

MC_ACT_INLINE_ __m512d mc_hard_silu_pd_(__m512d x)
{
    const __m512d h = mc_hard_sigmoid_pd_(x);
    const __mmask8 z = _mm512_cmp_pd_mask(h, _mm512_setzero_pd(), _CMP_EQ_OQ);
    return _mm512_mask_blend_pd(z, _mm512_mul_pd(x, h), _mm512_set1_pd(-0.0));
}

MC_ACT_INLINE_ __m512d mc_hard_silu_grad_pd_(__m512d x)
{
    const __m512d mid = _mm512_add_pd(_mm512_div_pd(x, _mm512_set1_pd(3.0)), _mm512_set1_pd(0.5));
    const __mmask8 lo = _mm512_cmp_pd_mask(x, _mm512_set1_pd(-3.0), _CMP_LT_OQ);
    const __mmask8 hi = _mm512_cmp_pd_mask(x, _mm512_set1_pd(3.0), _CMP_GT_OQ);
    return _mm512_mask_mov_pd(_mm512_mask_mov_pd(mid, lo, _mm512_setzero_pd()), hi,
                              _mm512_set1_pd(1.0));
}

/* --- gelu in float32, for 16-bit outputs (mc_act_scalar.h, design f) --------------------------- */

MC_ACT_INLINE_ __m512 mc_act_horner_ps_(const float *c, int deg, __m512 t)
{
    __m512 p = _mm512_set1_ps(c[deg]);
    for (int k = deg - 1; k >= 0; --k)
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c[k]));
    return p;
}

/* mc_act_exp16_scaled_ss_; -(n * c) + u (VFNMADD) is fmaf(-n, c, u) exactly. */
MC_ACT_INLINE_ __m512 mc_act_exp16_scaled_ps_(__m512 u, __m512 e)
{
    const __m512 kd = _mm512_fmadd_ps(u, _mm512_set1_ps(MC_ACT_LOG2E_F), _mm512_set1_ps(MC_ACT_ROUND_F));
    const __m512 n = _mm512_sub_ps(kd, _mm512_set1_ps(MC_ACT_ROUND_F));
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(MC_ACT_LN2_HI_F), u);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(MC_ACT_LN2_LO_F), r);
    r = _mm512_fmadd_ps(e, _mm512_set1_ps(-0.5f), r);
    const __m512 p = mc_act_horner_ps_(mc_act_exp16_c_, MC_ACT_EXP16_DEG, r);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_add_epi32(_mm512_castps_si512(kd), _mm512_set1_epi32(191)), 23)));
}

/* mc_act_gelu16_tail_ss_: MINPS returns its second operand for NaN, as `FAR < ax ? FAR : ax`. */
MC_ACT_INLINE_ __m512 mc_act_gelu16_tail_ps_(__m512 x)
{
    const __m512 ax = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), x);
    const __m512 a = _mm512_min_ps(_mm512_set1_ps(MC_ACT_GELU16_FAR), ax);
    const __m512 s = _mm512_mul_ps(a, a);
    const __m512 p = mc_act_exp16_scaled_ps_(_mm512_mul_ps(s, _mm512_set1_ps(-0.5f)),
                                             _mm512_fmsub_ps(a, a, s));
    const __m512 t = _mm512_div_ps(_mm512_sub_ps(a, _mm512_set1_ps(5.0f)),
                                   _mm512_add_ps(a, _mm512_set1_ps(1.0f)));
    return _mm512_mul_ps(p, mc_act_horner_ps_(mc_act_m16_, MC_ACT_M16_DEG, t));
}

/* mc_gelu_ss_ on 16 lanes: each branch computed when a lane takes it (design b). */
MC_ACT_INLINE_ __m512 mc_gelu_ps_(__m512 x)
{
    const __m512 s = _mm512_mul_ps(x, x);
    const __mmask16 mid = _mm512_cmp_ps_mask(s, _mm512_set1_ps(MC_ACT_GELU16_MID), _CMP_LE_OQ);
    __m512 g = _mm512_setzero_ps();
    if (mid) {
        const __m512 q = mc_act_horner_ps_(mc_act_q16_, MC_ACT_Q16_DEG,
                                           _mm512_fmadd_ps(s, _mm512_set1_ps(0.5f), _mm512_set1_ps(-1.0f)));
        g = _mm512_mul_ps(x, _mm512_fmadd_ps(x, q, _mm512_set1_ps(0.5f)));
    }
    if (mid != 0xFFFF) {
        const __m512 t = _mm512_mul_ps(mc_act_gelu16_tail_ps_(x), _mm512_set1_ps(MC_ACT_TWO_M64_F));
        const __m512 neg = _mm512_xor_ps(t, _mm512_set1_ps(-0.0f));
        const __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
        const __m512 tail = _mm512_mask_blend_ps(pos, neg, _mm512_sub_ps(x, t));
        g = _mm512_mask_blend_ps(mid, tail, g);
    }
    return g;
}

/* --- float32 entry points ----------------------------------------------------------------------- */

MC_ACT_INLINE_ __m512d mc_act_pd_(int act, __m512d x)
{
    switch (act) {
    case MC_ACT_GELU: return mc_gelu_pd_(x);
    case MC_ACT_SIGMOID: return mc_sigmoid_pd_(x);
    case MC_ACT_SILU: return mc_silu_pd_(x);
    case MC_ACT_HARD_SIGMOID: return mc_hard_sigmoid_pd_(x);
    case MC_ACT_HARD_SILU: return mc_hard_silu_pd_(x);
    default: return mc_tanh_pd_(x);
    }
}

MC_ACT_INLINE_ __m512d mc_act_grad_pd_(int act, __m512d x)
{
    switch (act) {
    case MC_ACT_GELU: return mc_gelu_grad_pd_(x);
    case MC_ACT_SIGMOID: return mc_sigmoid_grad_pd_(x);
    case MC_ACT_SILU: return mc_silu_grad_pd_(x);
    case MC_ACT_HARD_SIGMOID: return mc_hard_sigmoid_grad_pd_(x);
    case MC_ACT_HARD_SILU: return mc_hard_silu_grad_pd_(x);
    default: return mc_tanh_grad_pd_(x);
    }
}

MC_ACT_INLINE_ __m512d mc_act_lo_pd_(__m512 v)
{
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}

MC_ACT_INLINE_ __m512d mc_act_hi_pd_(__m512 v)
{
    return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
}

MC_ACT_INLINE_ __m512 mc_act_join_ps_(__m512d lo, __m512d hi)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
}

/* mc_act_scalar_f32_ on 16 lanes.  relu: MAXPS returns its second operand for NaN and for
 * max(0, -0), so NaN and -0.0 pass as with `v < 0 ? 0 : v`. */
MC_ACT_INLINE_ __m512 mc_act_ps_(int act, __m512 v)
{
    if (act == MC_ACT_NONE)
        return v;
    if (act == MC_ACT_RELU)
        return _mm512_max_ps(_mm512_setzero_ps(), v);
    if (act == MC_ACT_RELU6)                 /* MINPS, like MAXPS, passes its second operand */
        return _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(_mm512_setzero_ps(), v));
    const __m512 y = act == MC_ACT_GELU_16
                         ? mc_gelu_ps_(v)
                         : mc_act_join_ps_(mc_act_pd_(act, mc_act_lo_pd_(v)),
                                           mc_act_pd_(act, mc_act_hi_pd_(v)));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), mc_act_quiet_ps_(v));
}

/* mc_act_grad_scalar_f32_ on 16 lanes. */
MC_ACT_INLINE_ __m512 mc_act_grad_ps_(int act, __m512 dy, __m512 v)
{
    if (act == MC_ACT_NONE)
        return dy;
    __m512 r;
    if (act == MC_ACT_RELU || act == MC_ACT_RELU6) {
        __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ);
        if (act == MC_ACT_RELU6)
            pos &= _mm512_cmp_ps_mask(v, _mm512_set1_ps(6.0f), _CMP_LT_OQ);
        r = _mm512_mul_ps(dy, _mm512_mask_blend_ps(pos, _mm512_setzero_ps(), _mm512_set1_ps(1.0f)));
    } else {
        const __m512d lo = _mm512_mul_pd(mc_act_lo_pd_(dy), mc_act_grad_pd_(act, mc_act_lo_pd_(v)));
        const __m512d hi = _mm512_mul_pd(mc_act_hi_pd_(dy), mc_act_grad_pd_(act, mc_act_hi_pd_(v)));
        r = mc_act_join_ps_(lo, hi);
    }
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(dy, dy, _CMP_UNORD_Q), mc_act_quiet_ps_(dy));
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), mc_act_quiet_ps_(v));
}

/* --- softmax ----------------------------------------------------------------------------------- */

/* Softmax (mc_act.h, design e).  The maximum 16 lanes at a time (its value does not depend on
 * the order; the index of its first occurrence is then searched), exp(x - m) 8 doubles at a
 * time into eight partial sums -- lane j takes the terms i % 8 == j, the twin's order -- added
 * as the twin's tree.  Here so that the fused attention unit (mc_attn_avx512.c) runs the
 * same rows. */
#define MC_SOFTMAX_KEEP_ 1024

MC_ACT_INLINE_ int mc_softmax_max_avx512_(const float *x, int64_t n, double *m, int64_t *am)
{
    __m512 mv = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    int64_t i = 0;
    /* whole vectors unmasked, then the masked tail (a mask made for every vector made rows of
     * 768 1.4x slower) */
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        mv = _mm512_max_ps(mv, v);
    }
    if (i < n) {
        const __mmask16 k = mc_mask16_avx512(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
        mv = _mm512_mask_max_ps(mv, k, mv, v);
    }
    const float mx = _mm512_reduce_max_ps(mv);
    const __m512 mxv = _mm512_set1_ps(mx);
    *am = 0;
    for (i = 0; i < n; i += 16) {        /* the first element equal to the maximum */
        const __mmask16 k = mc_mask16_avx512(n - i);
        const __mmask16 eq = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, x + i), mxv,
                                                     _CMP_EQ_OQ);
        if (eq) {
            *am = i + __builtin_ctz((unsigned)eq);
            break;
        }
    }
    *m = (double)mx;
    return !nan && mx != INFINITY && mx != -INFINITY;
}

MC_ACT_INLINE_ void mc_softmax_row_avx512_(const float *x, float *y, int64_t n, int log_)
{
    double m;
    int64_t am;
    if (!mc_softmax_max_avx512_(x, n, &m, &am)) {
        mc_softmax_nan_row_(y, n);
        return;
    }
    const __m512d mv = _mm512_set1_pd(m);
    __m512d acc = _mm512_setzero_pd();
    /* the terms of a row of up to MC_SOFTMAX_KEEP_ elements are kept for the second pass */
    double keep[MC_SOFTMAX_KEEP_ + 8];
    const int kept = !log_ && n <= MC_SOFTMAX_KEEP_;
    for (int64_t i = 0; i < n; i += 8) {
        const __mmask8 k = mc_mask8_avx512(n - i);
        __mmask8 ks = k;
        if (am >= i && am < i + 8)
            ks &= (__mmask8)~(1u << (am - i));
        const __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, x + i)), mv);
        const __m512d e = mc_act_exp_neg_pd_(d);
        if (kept)
            _mm512_storeu_pd(keep + i, e);
        acc = _mm512_mask_add_pd(acc, ks, acc, e);
    }
    double a[8];
    _mm512_storeu_pd(a, acc);
    const double t = mc_softmax_tree_(a);
    const __m512d sv = _mm512_set1_pd(log_ ? log1p(t) : 1.0 + t);
    for (int64_t i = 0; i < n; i += 8) {
        const __mmask8 k = mc_mask8_avx512(n - i);
        __m512d v;
        if (kept) {
            v = _mm512_div_pd(_mm512_loadu_pd(keep + i), sv);
        } else {
            const __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, x + i)),
                                            mv);
            v = log_ ? _mm512_sub_pd(d, sv) : _mm512_div_pd(mc_act_exp_neg_pd_(d), sv);
        }
        _mm256_mask_storeu_ps(y + i, k, _mm512_cvtpd_ps(v));
    }
}

/* mc_softmax16_row_ss_ on 16 lanes: lane l of the sum takes the terms i % 16 == l, the halves
 * then added as the twin's tree; MAXPS returns d for NaN, as `d < MIN ? MIN : d` does. */
MC_ACT_INLINE_ void mc_softmax16_row_avx512_(const float *x, float *y, int64_t n)
{
    double m;
    int64_t am;
    if (!mc_softmax_max_avx512_(x, n, &m, &am)) {
        mc_softmax_nan_row_(y, n);
        return;
    }
    const __m512 mv = _mm512_set1_ps((float)m), lo = _mm512_set1_ps(MC_SOFTMAX16_MIN);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = mc_mask16_avx512(n - i);
        __mmask16 ks = k;
        if (am >= i && am < i + 16)
            ks &= (__mmask16)~(1u << (am - i));
        const __m512 d = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv);
        __m512 e = _mm512_mul_ps(mc_act_exp16_scaled_ps_(_mm512_max_ps(lo, d), _mm512_setzero_ps()),
                                 _mm512_set1_ps(MC_ACT_TWO_M64_F));
        e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(d, lo, _CMP_LT_OQ), _mm512_setzero_ps());
        _mm512_mask_storeu_ps(y + i, k, e);
        acc = _mm512_mask_add_ps(acc, ks, acc, e);
    }
    const __m512 sv = _mm512_set1_ps(1.0f + mc_sum16_halves_avx512(acc));
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = mc_mask16_avx512(n - i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_div_ps(_mm512_maskz_loadu_ps(k, y + i), sv));
    }
}

#endif
