/* AVX-512 (F/DQ + FMA) activation kernels: 16 float32 per step through mc_act_avx512_inl.h.
 *
 * Design:
 *   a. Each element's result is that of the scalar twin (mc_act_scalar.h), bit for bit; the
 *      kernels only add the loop: full vectors of 16, then one masked vector for the remaining
 *      n % 16 elements (masked loads and stores never touch memory outside the arrays; the
 *      zeros in the unused lanes are computed and dropped).
 *   b. The activation is chosen once per call, outside the loop, so each loop body is one
 *      function inlined (MC_ACT_LOOP_).
 *   c. MC_ACT_NONE copies (memcpy): the identity and dy, bit for bit.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_act.h"
#include "mc_act_avx512_inl.h"

static inline __mmask16 mc_act_tail_mask_(int64_t left)
{
    return (__mmask16)((1u << left) - 1u);
}

#define MC_ACT_FORWARD_LOOP_(ACT)                                                             \
    do {                                                                                      \
        int64_t i = 0;                                                                        \
        for (; i + 16 <= n; i += 16)                                                          \
            _mm512_storeu_ps(y + i, mc_act_ps_(ACT, _mm512_loadu_ps(x + i)));                 \
        if (i < n) {                                                                          \
            const __mmask16 m = mc_act_tail_mask_(n - i);                                     \
            _mm512_mask_storeu_ps(y + i, m, mc_act_ps_(ACT, _mm512_maskz_loadu_ps(m, x + i))); \
        }                                                                                     \
    } while (0)

#define MC_ACT_BACKWARD_LOOP_(ACT)                                                            \
    do {                                                                                      \
        int64_t i = 0;                                                                        \
        for (; i + 16 <= n; i += 16)                                                          \
            _mm512_storeu_ps(dx + i, mc_act_grad_ps_(ACT, _mm512_loadu_ps(dy + i),            \
                                                     _mm512_loadu_ps(x + i)));                \
        if (i < n) {                                                                          \
            const __mmask16 m = mc_act_tail_mask_(n - i);                                     \
            _mm512_mask_storeu_ps(dx + i, m,                                                  \
                                  mc_act_grad_ps_(ACT, _mm512_maskz_loadu_ps(m, dy + i),      \
                                                  _mm512_maskz_loadu_ps(m, x + i)));          \
        }                                                                                     \
    } while (0)

static void mc_act_forward_f32_avx512(int act, const float *x, float *y, int64_t n)
{
    switch (act) {
    case MC_ACT_RELU: MC_ACT_FORWARD_LOOP_(MC_ACT_RELU); break;
    case MC_ACT_GELU: MC_ACT_FORWARD_LOOP_(MC_ACT_GELU); break;
    case MC_ACT_SIGMOID: MC_ACT_FORWARD_LOOP_(MC_ACT_SIGMOID); break;
    case MC_ACT_TANH: MC_ACT_FORWARD_LOOP_(MC_ACT_TANH); break;
    default:
        if (n > 0)
            memcpy(y, x, (size_t)n * 4);
        break;
    }
}

static void mc_act_backward_f32_avx512(int act, const float *dy, const float *x, float *dx, int64_t n)
{
    switch (act) {
    case MC_ACT_RELU: MC_ACT_BACKWARD_LOOP_(MC_ACT_RELU); break;
    case MC_ACT_GELU: MC_ACT_BACKWARD_LOOP_(MC_ACT_GELU); break;
    case MC_ACT_SIGMOID: MC_ACT_BACKWARD_LOOP_(MC_ACT_SIGMOID); break;
    case MC_ACT_TANH: MC_ACT_BACKWARD_LOOP_(MC_ACT_TANH); break;
    default:
        if (n > 0)
            memcpy(dx, dy, (size_t)n * 4);
        break;
    }
}

/* Softmax (mc_act.h, design e).  The maximum 16 lanes at a time (its value does not depend on
 * the order; the index of its first occurrence is then searched), exp(x - m) 8 doubles at a
 * time into eight partial sums -- lane j takes the terms i % 8 == j, the twin's order -- added
 * as the twin's tree. */
#define MC_SOFTMAX_KEEP_ 1024

static int mc_softmax_max_avx512_(const float *x, int64_t n, double *m, int64_t *am)
{
    __m512 mv = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        nan |= _mm512_mask_cmp_ps_mask(k, v, v, _CMP_UNORD_Q);
        mv = _mm512_mask_max_ps(mv, k, mv, v);
    }
    const float mx = _mm512_reduce_max_ps(mv);
    *am = 0;
    for (int64_t i = 0; i < n; ++i)
        if (x[i] == mx) {
            *am = i;
            break;
        }
    *m = (double)mx;
    return !nan && mx != INFINITY && mx != -INFINITY;
}

static void mc_softmax_row_avx512_(const float *x, float *y, int64_t n, int log_)
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
        const __mmask8 k = n - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - i)) - 1u);
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
        const __mmask8 k = n - i >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - i)) - 1u);
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

static void mc_softmax_f32_avx512(const float *x, float *y, int64_t rows, int64_t n, int log_)
{
    for (int64_t r = 0; r < rows; ++r)
        mc_softmax_row_avx512_(x + r * n, y + r * n, n, log_);
}

const mc_act_table mc_act_table_avx512 = MC_ACT_TABLE_(avx512);
