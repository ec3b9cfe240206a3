/* Activation functions of one float32 and their derivatives, evaluated in float64 and rounded
 * once: the scalar twins, the specification of the vector code in mc_act_avx512_inl.h.
 *
 * Design:
 *   a. Scalar == vector, bit for bit.  Every function here performs the same float64 operations
 *      in the same order on the same constants as its vector twin (this header owns the constants
 *      and coefficient tables; the vector header includes it).  fma() stands exactly where the
 *      vector code has an FMA instruction: fma() is correctly rounded, as the instruction is (glibc
 *      runs the instruction when the CPU has it), and the build's -ffp-contract=off keeps the
 *      compiler from fusing anything else.  Where this code branches, the vector code computes
 *      the branches its lanes need and selects per lane; a lane's result depends only on its own
 *      branch.  Exponent scaling is integer arithmetic on the bits, identical in both.  So every
 *      float64 intermediate, and the float32 result, is the same for every input.
 *   b. float32 in, float64 inside, one rounding to float32 at the end.  A backward value is
 *      dx = dy * f'(x): f'(x) in float64, the product with dy in float64, rounded once.
 *   c. Accuracy (measured, docs/gemm.md "Activation"): each float64 value is within a few units of
 *      2**-53 (relative) of the exact one, so the float32 result is the correctly rounded one
 *      except when the exact value lies within about 1e-15 (relative) of a float32 rounding
 *      boundary, where it can be the neighbour: at most 1 ulp, everywhere, for all four functions
 *      and their derivatives.  The places where the textbook formulas lose that accuracy are
 *      rewritten: 1 + erf(x) for negative x (erfc-type tail instead), 1 - tanh(x)**2 and
 *      s (1 - s) for large |x| (written with e = exp(-|x|)), 1 / (1 + exp(-x)) for x < -709
 *      (overflow), and gelu'(x) = Phi(x) + x phi(x) near its root x0 = -0.7518 (the root is
 *      factored out).
 *   d. Special values.  NaN in, NaN out: the input NaN, quieted (backward: x's NaN if x is NaN,
 *      else dy's).  relu's forward rule is v < 0 ? 0 : v (in float32), so NaN (unchanged, even
 *      signalling) and -0.0 pass through.  +-inf and huge inputs give the limits:
 *      gelu(+inf) = +inf, gelu(-inf) = -0.0, sigmoid(+-inf) = 1 / +0, tanh(+-inf) = +-1, all
 *      derivatives 0 (1 for gelu at +inf); then dy * 0 follows IEEE (an infinite dy gives NaN).
 *      tanh and gelu keep the sign of zero: tanh(-0) = gelu(-0) = -0.
 *   e. Static inline, standard headers only: each unit (the generic one, the GEMM) compiles them
 *      with its own flags; no floating-point flags are promised (the drivers restore them).
 *   f. gelu for a 16-bit output (MC_ACT_GELU_16): when a driver rounds the activation to
 *      float16 or bfloat16 (mc_act_for_output), float64 accuracy is spent on bits the rounding
 *      drops, and in a transformer's feed-forward product it was a third of the time.  There
 *      gelu is evaluated in float32 (mc_gelu_ss_, fmaf where the vector code has an FMA, so the
 *      twins still agree bit for bit): the forms of mc_gelu_sd_ with float32 fits (relative fit
 *      errors 3.0e-8, 1.3e-8 and 2.1e-8, tools/fit_activations.py), the central interval cut to
 *      |x| <= 2 so that Phi's cancellation for negative x costs at most a factor of 22.  Measured
 *      against mc_gelu_sd_ (tests/c/test_act.c): relative error below 2**-18 wherever the
 *      result is a normal float32, so a 16-bit result is the correctly rounded value of gelu
 *      or, within 2**-18 of a rounding boundary, its neighbour (the float64 path rounds twice,
 *      float64 -> float32 -> 16 bits, and has the same one-unit bound).
 *   g. The fused attention's softmax for 16-bit queries, keys and values (mc_softmax16_row_ss_)
 *      is float32 too, for the same reason: its probabilities are rounded to the 16-bit type
 *      before they weight the values.  The float64 one stays for float32 attention and for
 *      kernels.softmax.
 */
#ifndef MC_ACT_SCALAR_H_
#define MC_ACT_SCALAR_H_

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_act_kernels.h"

/* --- constants shared with the vector code ------------------------------------------------------ */

#define MC_ACT_LOG2E 1.4426950408889634
/* ln 2 split into a head with 32 significant bits (n * head is exact for |n| < 2**21) and a
 * tail, so that t - n ln2 loses nothing to cancellation */
#define MC_ACT_LN2_HI 6.93147180369123816490e-01
#define MC_ACT_LN2_LO 1.90821492927058770002e-10
/* 1.5 * 2**52: adding it rounds a float64 of magnitude < 2**51 to an integer (to nearest even),
 * which then sits in the low bits of the sum */
#define MC_ACT_ROUND 6755399441055744.0
#define MC_ACT_EXP_MIN (-708.0)
#define MC_ACT_INV_SQRT_2PI 0.3989422804014327
/* x0 = -0.75179152469356445745790494678, the root of gelu', as a head and a tail */
#define MC_ACT_X0_HI (-0.7517915246935645)
#define MC_ACT_X0_LO 1.4956759177009883e-17
#define MC_ACT_TANH_SMALL 0.0625
#define MC_ACT_GELU_MID 8.0                /* x*x <= 8, |x| <= 2 sqrt 2: the central polynomial */
#define MC_ACT_GELU_FAR 40.0               /* |x| clamped here in the tails: exp(-800) is 0 */

/* e**r for |r| <= ln2 / 2 (plus rounding): the Taylor polynomial to degree 13, remainder below
 * 0.347**14 / 14! = 4e-18 (relative) */
#define MC_ACT_EXP_DEG 13
static const double mc_act_exp_c_[MC_ACT_EXP_DEG + 1] = {
    1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320,
    1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0};

/* tanh(a) = a + a**3 P(a**2) for a < 1/16: the Taylor coefficients of x**3 ... x**13; the first
 * term left out is below 1382 / 155925 * 16**-14 < 2e-19 relative to a */
#define MC_ACT_TANH_DEG 5
static const double mc_act_tanh_c_[MC_ACT_TANH_DEG + 1] = {
    -1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835, -1382.0 / 155925, 21844.0 / 6081075};

/* The three fits below were made by tools/fit_activations.py (Chebyshev interpolation at 64
 * nodes in 50-digit arithmetic, cut at the given degree, converted to powers of t and rounded
 * to float64); "fit error" is the rounded polynomial against the function, evaluated exactly;
 * "Horner condition" is max sum |a_j t**j| / |p(t)|, the factor by which float64 roundings in
 * Horner's rule can grow (a few units of 2**-53 here). */

/* Q(t), t = x*x / 4 - 1, x*x in [0, 8]: (Phi(x) - 1/2) / x;
 * degree 16, fit error 9.6e-17 (relative), Horner condition 2.27 */
#define MC_ACT_Q_DEG 16
static const double mc_act_q_[MC_ACT_Q_DEG + 1] = {
    0.2386249340259104,
    -0.09231698375636099,
    0.04224225456067677,
    -0.017204889962842994,
    0.006055784298617972,
    -0.0018508081010921475,
    0.0004967748369021083,
    -0.00011849113334586673,
    2.5385490102798624e-05,
    -4.930749925311984e-06,
    8.753278585357945e-07,
    -1.430203119541373e-07,
    2.163653405416807e-08,
    -3.041841665243141e-09,
    4.0063281363296954e-10,
    -5.238845548894644e-11,
    6.087826492754434e-12,
};

/* M(t), t = (a - 8) / (a + 2), a = |x| in [2 sqrt 2, 40]: a Phi(-a) / phi(a), the Mills ratio
 * times a (1 - 1/a**2 + 3/a**4 ... for large a); degree 18, fit error 1.7e-17 (relative),
 * Horner condition 1.18.  The map t sends [2 sqrt 2, inf) onto [-1.07, 1); a fit in 1/a**2
 * instead converges slowly (the asymptotic series diverges): degree 23 for the same error. */
#define MC_ACT_M_DEG 18
static const double mc_act_m_[MC_ACT_M_DEG + 1] = {
    0.9850557060634584,
    0.035776117655992694,
    -0.027608569758467285,
    0.007554294574437432,
    -0.000607168213140501,
    -0.00022610519069212013,
    4.858165575463829e-05,
    1.1049567062793566e-05,
    -3.314467827284521e-06,
    -8.904730732640256e-07,
    2.2458194637815527e-07,
    9.584386450176692e-08,
    -1.1647406400670225e-08,
    -1.1124379180910583e-08,
    -3.464326400401125e-10,
    1.1556008580433915e-09,
    2.2350533935810752e-10,
    -7.358725176755268e-11,
    -2.5854265194661076e-11,
};

/* R(t), t = 4 x + 3, x in [-1, -1/2]: gelu'(x) / (x - x0);
 * degree 12, fit error 4.9e-17 (relative), Horner condition 1.59 */
#define MC_ACT_R_DEG 12
static const double mc_act_r_[MC_ACT_R_DEG + 1] = {
    0.43218955538054815,
    0.0970546686408491,
    -0.0011757940898420056,
    -0.0017830228689395607,
    -5.702082800916313e-05,
    1.90139858257185e-05,
    1.1013369651662104e-06,
    -1.3734077257065592e-07,
    -1.1319114134040572e-08,
    7.166833369944845e-10,
    8.194564598719644e-11,
    -2.6917679559949123e-12,
    -4.538603110423351e-13,
};

/* --- bits --------------------------------------------------------------------------------------- */

static inline float mc_act_quiet_f32_(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= 0x00400000u;
    memcpy(&v, &u, 4);
    return v;
}

/* y with the sign bit of x (y >= +0) */
static inline double mc_act_signed_sd_(double y, double x)
{
    uint64_t uy, ux;
    memcpy(&uy, &y, 8);
    memcpy(&ux, &x, 8);
    uy |= ux & 0x8000000000000000ull;
    memcpy(&y, &uy, 8);
    return y;
}

/* --- float64 building blocks -------------------------------------------------------------------- */

static inline double mc_act_horner_sd_(const double *c, int deg, double t)
{
    double p = c[deg];
    for (int k = deg - 1; k >= 0; --k)
        p = fma(p, t, c[k]);
    return p;
}

/* exp(t) for t <= 0 (or NaN).
 * t = n ln2 + r: n = t / ln2 rounded to an integer by adding MC_ACT_ROUND (so n also sits in the
 * low bits of kd), r = t - n ln2 by two FMAs on the split ln2 (n * LN2_HI is exact, so the first
 * is an exact subtraction when |r| is small; the error of r is one rounding of n * LN2_LO);
 * e**r by the Taylor polynomial; 2**n built in the exponent field from kd's bits, which is exact
 * and needs no library call.  Below t = -708 the result is 0: there e**t < 3.3e-308, which every
 * caller multiplies by at most 40 * 3.4e38 before rounding to float32, far below float32's
 * smallest subnormal, so the float32 results are the correctly rounded ones; in exchange 2**n
 * stays a normal float64 (n >= -1021) and the scaling never rounds. */
static inline double mc_act_exp_neg_sd_(double t)
{
    const double tc = MC_ACT_EXP_MIN > t ? MC_ACT_EXP_MIN : t;
    const double kd = tc * MC_ACT_LOG2E + MC_ACT_ROUND;
    const double n = kd - MC_ACT_ROUND;
    double r = fma(-n, MC_ACT_LN2_HI, tc);
    r = fma(-n, MC_ACT_LN2_LO, r);
    const double p = mc_act_horner_sd_(mc_act_exp_c_, MC_ACT_EXP_DEG, r);
    uint64_t u;
    memcpy(&u, &kd, 8);
    u = (u + 1023u) << 52;
    double scale;
    memcpy(&scale, &u, 8);
    const double e = p * scale;
    return t < MC_ACT_EXP_MIN ? 0.0 : e;
}

/* The gelu tails, |x| > 2 sqrt 2.  With a = min(|x|, 40):
 *   Phi(-a) = phi(a) M / a,  phi(a) = exp(-a*a / 2) / sqrt(2 pi),
 * a*a is exact (a is a float32 value) and the exponential is the only place a large argument
 * enters, so the relative error stays a few units of 2**-53 however far out a is.  Beyond 40,
 * exp gives 0, which is what every float32 result there rounds to.  Returns phi(a); *m = M. */
static inline double mc_act_gelu_tail_sd_(double x, double *a_out, double *m)
{
    const double ax = fabs(x);
    const double a = MC_ACT_GELU_FAR < ax ? MC_ACT_GELU_FAR : ax;
    const double pa = mc_act_exp_neg_sd_(a * a * -0.5) * MC_ACT_INV_SQRT_2PI;
    *m = mc_act_horner_sd_(mc_act_m_, MC_ACT_M_DEG, (a - 8.0) / (a + 2.0));
    *a_out = a;
    return pa;
}

/* --- the functions, float64 in and out ---------------------------------------------------------- */

/* gelu(x) = x Phi(x).
 * |x| <= 2 sqrt 2: Phi(x) = 1/2 + x Q(x*x) in one FMA.  For negative x this cancels (Phi(-2 sqrt 2)
 * = 0.0023 from 0.5 - 0.4977), but the FMA rounds once and Q carries its own relative error
 * only, so Phi keeps about 213 * 2**-53 = 2.4e-14 there, and the cancellation is no worse
 * anywhere in the interval.
 * |x| > 2 sqrt 2: x Phi(x) = -phi(a) M for x < 0 (a = |x| cancels) and x - phi(a) M for x > 0
 * (Phi(x) = 1 - Phi(-x)); neither cancels.  -T is written as a negation so that an underflow
 * keeps the sign (gelu(-inf) = -0). */
static inline double mc_gelu_sd_(double x)
{
    const double s = x * x;
    if (s <= MC_ACT_GELU_MID) {
        const double q = mc_act_horner_sd_(mc_act_q_, MC_ACT_Q_DEG, fma(s, 0.25, -1.0));
        return x * fma(x, q, 0.5);
    }
    double a, m;
    const double pa = mc_act_gelu_tail_sd_(x, &a, &m);
    const double t = pa * m;
    return x > 0.0 ? x - t : -t;
}

/* gelu'(x) = Phi(x) + x phi(x).
 * x in [-1, -1/2]: the two terms cancel at the root x0 (gelu's minimum), where no evaluation of
 * the sum can keep its relative accuracy; instead gelu'(x) = (x - x0) R(x), with x - x0 formed
 * as (x - X0_HI) - X0_LO (the first subtraction is exact, Sterbenz), so the relative error is
 * that of R plus two roundings, even for the float32 x nearest x0.
 * Elsewhere in |x| <= 2 sqrt 2: Phi as in gelu, phi(x) = exp(-x*x / 2) / sqrt(2 pi) (exact
 * argument), the sum in one FMA; the terms cancel at most by a factor 3 outside [-1, -1/2].
 * |x| > 2 sqrt 2: Phi(x) + x phi(x) = +-phi(a) (a*a - M) / a  (a*a >= 8 > M: no cancellation),
 * plus 1 for x > 0. */
static inline double mc_gelu_grad_sd_(double x)
{
    if (x >= -1.0 && x <= -0.5) {
        const double r = mc_act_horner_sd_(mc_act_r_, MC_ACT_R_DEG, fma(x, 4.0, 3.0));
        return ((x - MC_ACT_X0_HI) - MC_ACT_X0_LO) * r;
    }
    const double s = x * x;
    if (s <= MC_ACT_GELU_MID) {
        const double q = mc_act_horner_sd_(mc_act_q_, MC_ACT_Q_DEG, fma(s, 0.25, -1.0));
        const double phi = mc_act_exp_neg_sd_(s * -0.5) * MC_ACT_INV_SQRT_2PI;
        return fma(x, phi, fma(x, q, 0.5));
    }
    double a, m;
    const double pa = mc_act_gelu_tail_sd_(x, &a, &m);
    const double g = pa * ((a * a - m) / a);
    return x > 0.0 ? 1.0 + g : -g;
}

/* sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, with e = exp(-|x|) <= 1:
 * never overflows, never cancels (1 / (1 + exp(-x)) overflows exp for x < -709, and
 * 1 - sigmoid(-x) would cancel). */
static inline double mc_sigmoid_sd_(double x)
{
    const double e = mc_act_exp_neg_sd_(-fabs(x));
    return (x < 0.0 ? e : 1.0) / (1.0 + e);
}

/* sigmoid'(x) = s (1 - s) = e / (1 + e)**2, e = exp(-|x|): even, no cancellation (s (1 - s)
 * cancels in 1 - s for large x). */
static inline double mc_sigmoid_grad_sd_(double x)
{
    const double e = mc_act_exp_neg_sd_(-fabs(x));
    const double q = 1.0 + e;
    return e / (q * q);
}

/* tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|), for |x| >= 1/16: 1 - e >= 0.117 is
 * exact (Sterbenz) and amplifies the error of e at most 7.5 times.  Below 1/16 the odd Taylor
 * polynomial to x**13.  The sign is put back last, so tanh(-0) = -0. */
static inline double mc_tanh_sd_(double x)
{
    const double a = fabs(x);
    double y;
    if (a < MC_ACT_TANH_SMALL) {
        const double s = a * a;
        y = fma(a * s, mc_act_horner_sd_(mc_act_tanh_c_, MC_ACT_TANH_DEG, s), a);
    } else {
        const double e = mc_act_exp_neg_sd_(a * -2.0);
        y = (1.0 - e) / (1.0 + e);
    }
    return mc_act_signed_sd_(y, x);
}

/* tanh'(x) = 1 - tanh(x)**2 = 4 e / (1 + e)**2, e = exp(-2|x|): no cancellation for large |x|,
 * and near 0 the relative error of e barely moves it ((1 - e) / (1 + e) times its own). */
static inline double mc_tanh_grad_sd_(double x)
{
    const double e = mc_act_exp_neg_sd_(fabs(x) * -2.0);
    const double q = 1.0 + e;
    return (4.0 * e) / (q * q);
}

/* silu(x) = x sigmoid(x); where sigmoid(x) is 0 (x < -745 and x = -inf) the limit -0. */
static inline double mc_silu_sd_(double x)
{
    const double s = mc_sigmoid_sd_(x);
    return s == 0.0 ? -0.0 : x * s;
}

/* silu'(x) = sigmoid(x) + x sigmoid'(x), the second term 0 where sigmoid'(x) is 0 (so that
 * +-inf give the limits 1 and 0). */
static inline double mc_silu_grad_sd_(double x)
{
    const double g = mc_sigmoid_grad_sd_(x);
    return mc_sigmoid_sd_(x) + (g == 0.0 ? 0.0 : x * g);
}

/* hard_sigmoid(x) = clip(x / 6 + 1/2, 0, 1) (Keras 3's definition). */
static inline double mc_hard_sigmoid_sd_(double x)
{
    const double h = x / 6.0 + 0.5;
    return h < 0.0 ? 0.0 : (h > 1.0 ? 1.0 : h);
}

static inline double mc_hard_sigmoid_grad_sd_(double x)
{
    return (x > -3.0 && x < 3.0) ? 1.0 / 6.0 : 0.0;
}

/* hard_silu(x) = x hard_sigmoid(x) (hard_swish), -0 where hard_sigmoid(x) is 0 (x <= -3). */
static inline double mc_hard_silu_sd_(double x)
{
    const double h = mc_hard_sigmoid_sd_(x);
    return h == 0.0 ? -0.0 : x * h;
}

static inline double mc_hard_silu_grad_sd_(double x)
{
    return x < -3.0 ? 0.0 : (x > 3.0 ? 1.0 : x / 3.0 + 0.5);
}

/* --- gelu in float32, for 16-bit outputs (design f) ---------------------------------------------- */

#define MC_ACT_GELU16_MID 4.0f             /* x*x <= 4, |x| <= 2: the central polynomial */
#define MC_ACT_GELU16_FAR 14.0f            /* |x| clamped here: every 16-bit result beyond is -0 or x */
#define MC_ACT_LOG2E_F 1.44269504f
#define MC_ACT_ROUND_F 12582912.0f         /* 1.5 * 2**23: adding it rounds to an integer */
/* ln 2 with 16 significant bits (n * head exact for |n| < 2**8) and the rest */
#define MC_ACT_LN2_HI_F 0.693145751953125f
#define MC_ACT_LN2_LO_F 1.42860677e-06f
#define MC_ACT_TWO_M64_F 5.42101086e-20f   /* 2**-64 */

/* e**r, |r| <= ln2 / 2 (plus rounding): degree 6, fit error 2.1e-8 (relative) */
#define MC_ACT_EXP16_DEG 6
static const float mc_act_exp16_c_[MC_ACT_EXP16_DEG + 1] = {
    1.0f, 1.0f, 0.5f, 0.16666404902935028f, 0.04166619852185249f, 0.00837596133351326f,
    0.0013949769781902432f};

/* Q(t), t = x*x / 2 - 1, x*x in [0, 4]: (Phi(x) - 1/2) / x; degree 7, fit error 3.0e-8 */
#define MC_ACT_Q16_DEG 7
static const float mc_act_q16_[MC_ACT_Q16_DEG + 1] = {
    0.2979397177696228f, -0.07558853179216385f, 0.020000793039798737f, -0.0044370656833052635f,
    0.0008245633216574788f, -0.00013082897930871695f, 1.852893183240667e-05f,
    -2.2497281406685943e-06f};

/* M(t) / sqrt(2 pi), t = (a - 5) / (a + 1), a = |x| in [2, 14]: a Phi(-a) / exp(-a*a / 2);
 * degree 8, fit error 1.3e-8 */
#define MC_ACT_M16_DEG 8
static const float mc_act_m16_[MC_ACT_M16_DEG + 1] = {
    0.3845965266227722f, 0.031143173575401306f, -0.018156468868255615f, 0.00012310179590713233f,
    0.0012313431361690164f, 0.00013736113032791764f, -9.838978439802304e-05f,
    -3.790905975620262e-05f, -3.2775224099168554e-06f};

static inline float mc_act_horner_ss_(const float *c, int deg, float t)
{
    float p = c[deg];
    for (int k = deg - 1; k >= 0; --k)
        p = fmaf(p, t, c[k]);
    return p;
}

static inline uint32_t mc_act_bits_f32_(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

static inline float mc_act_f32_bits_(uint32_t u)
{
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* exp(u - e/2) * 2**64 for -104 <= u <= 0 and |e| tiny (or NaN): n = round(u / ln2) by adding
 * MC_ACT_ROUND_F (inside one FMA, so from the exact product), r = u - n ln2 - e/2 by three FMAs
 * (n * LN2_HI_F exact), e**r by the degree-6 fit, 2**(n + 64) built in the exponent field
 * (n >= -151, so it stays normal: the caller's one multiplication by 2**-64 rounds a
 * subnormal result once). */
static inline float mc_act_exp16_scaled_ss_(float u, float e)
{
    const float kd = fmaf(u, MC_ACT_LOG2E_F, MC_ACT_ROUND_F);
    const float n = kd - MC_ACT_ROUND_F;
    float r = fmaf(-n, MC_ACT_LN2_HI_F, u);
    r = fmaf(-n, MC_ACT_LN2_LO_F, r);
    r = fmaf(e, -0.5f, r);
    const float p = mc_act_horner_ss_(mc_act_exp16_c_, MC_ACT_EXP16_DEG, r);
    return p * mc_act_f32_bits_((mc_act_bits_f32_(kd) + 191u) << 23);
}

/* a Phi(-a) * 2**64 for a = min(|x|, 14) > 2: exp(-a*a / 2) M(a), with a*a = s + e exactly (e
 * by an FMA), so the exponent's argument -s/2 - e/2 loses nothing. */
static inline float mc_act_gelu16_tail_ss_(float x)
{
    const float ax = fabsf(x);
    const float a = MC_ACT_GELU16_FAR < ax ? MC_ACT_GELU16_FAR : ax;
    const float s = a * a;
    const float p = mc_act_exp16_scaled_ss_(s * -0.5f, fmaf(a, a, -s));
    const float m = mc_act_horner_ss_(mc_act_m16_, MC_ACT_M16_DEG, (a - 5.0f) / (a + 1.0f));
    return p * m;
}

/* gelu(x) = x Phi(x) in float32 (design f): |x| <= 2, x (1/2 + x Q); beyond, with
 * T = a Phi(-a), -T for x < 0 and x - T for x > 0 (mc_gelu_sd_'s forms). */
static inline float mc_gelu_ss_(float x)
{
    const float s = x * x;
    if (s <= MC_ACT_GELU16_MID) {
        const float q = mc_act_horner_ss_(mc_act_q16_, MC_ACT_Q16_DEG, fmaf(s, 0.5f, -1.0f));
        return x * fmaf(x, q, 0.5f);
    }
    const float t = mc_act_gelu16_tail_ss_(x) * MC_ACT_TWO_M64_F;
    return x > 0.0f ? x - t : -t;
}

/* --- float32 entry points ----------------------------------------------------------------------- */

/* f(v) for an activation code; MC_ACT_NONE is the identity. */
static inline float mc_act_scalar_f32_(int act, float v)
{
    const double x = (double)v;
    switch (act) {
    case MC_ACT_RELU:
        return v < 0.0f ? 0.0f : v;          /* NaN and -0.0 pass through, like max(0, v) */
    case MC_ACT_GELU:
        return v != v ? mc_act_quiet_f32_(v) : (float)mc_gelu_sd_(x);
    case MC_ACT_GELU_16:
        return v != v ? mc_act_quiet_f32_(v) : mc_gelu_ss_(v);
    case MC_ACT_SIGMOID:
        return v != v ? mc_act_quiet_f32_(v) : (float)mc_sigmoid_sd_(x);
    case MC_ACT_TANH:
        return v != v ? mc_act_quiet_f32_(v) : (float)mc_tanh_sd_(x);
    case MC_ACT_RELU6:
        return v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v);   /* NaN and -0.0 pass, as relu */
    case MC_ACT_SILU:
        return v != v ? mc_act_quiet_f32_(v) : (float)mc_silu_sd_(x);
    case MC_ACT_HARD_SIGMOID:
        return v != v ? mc_act_quiet_f32_(v) : (float)mc_hard_sigmoid_sd_(x);
    case MC_ACT_HARD_SILU:
        return v != v ? mc_act_quiet_f32_(v) : (float)mc_hard_silu_sd_(x);
    default:
        return v;
    }
}

/* dy * f'(v), computed in float64 and rounded once; MC_ACT_NONE gives dy.  relu' is 1 for
 * v > 0, else 0; dy * 1 and dy * 0 are exact, so that product is taken in float32. */
static inline float mc_act_grad_scalar_f32_(int act, float dy, float v)
{
    if (act == MC_ACT_NONE)
        return dy;
    if (act == MC_ACT_RELU || act == MC_ACT_RELU6) {
        /* relu' (relu6': 1 for 0 < v < 6) built from the comparison's bits (1.0f or 0.0f), so that compilers multiply
         * instead of branching on the sign of v (a branch mispredicts on random signs) */
        if (v != v)
            return mc_act_quiet_f32_(v);
        if (dy != dy)
            return mc_act_quiet_f32_(dy);
        const uint32_t on = act == MC_ACT_RELU ? (uint32_t)(v > 0.0f)
                                               : (uint32_t)(v > 0.0f) & (uint32_t)(v < 6.0f);
        const uint32_t one = 0x3F800000u & (0u - on);
        float d;
        memcpy(&d, &one, 4);
        return dy * d;
    }
    if (v != v)
        return mc_act_quiet_f32_(v);
    if (dy != dy)
        return mc_act_quiet_f32_(dy);
    const double x = (double)v;
    double d;
    switch (act) {
    case MC_ACT_GELU:
        d = mc_gelu_grad_sd_(x);
        break;
    case MC_ACT_SIGMOID:
        d = mc_sigmoid_grad_sd_(x);
        break;
    case MC_ACT_TANH:
        d = mc_tanh_grad_sd_(x);
        break;
    case MC_ACT_SILU:
        d = mc_silu_grad_sd_(x);
        break;
    case MC_ACT_HARD_SIGMOID:
        d = mc_hard_sigmoid_grad_sd_(x);
        break;
    case MC_ACT_HARD_SILU:
        d = mc_hard_silu_grad_sd_(x);
        break;
    default:
        return dy;
    }
    return (float)((double)dy * d);
}

/* One row of softmax / log-softmax (mc_act.h, design e).  Returns 0 when the row is NaN (a NaN
 * in it, or its maximum infinite); else *m is its maximum and *am the first index holding it. */
static inline int mc_softmax_max_(const float *x, int64_t n, double *m, int64_t *am)
{
    float mx = -INFINITY;
    int nan = 0;
    *am = 0;
    for (int64_t i = 0; i < n; ++i) {
        nan |= x[i] != x[i];
        if (x[i] > mx) {
            mx = x[i];
            *am = i;
        }
    }
    *m = (double)mx;
    return !nan && mx != INFINITY && mx != -INFINITY;
}

static inline void mc_softmax_nan_row_(float *y, int64_t n)
{
    const uint32_t q = 0x7FC00000u;
    for (int64_t i = 0; i < n; ++i)
        memcpy(y + i, &q, 4);
}

/* The sum of a row's terms (mc_act.h, design e): term i goes to partial sum i % 8, the eight
 * partial sums are added as a tree -- the order of the vector twin's lanes. */
static inline double mc_softmax_tree_(const double *a)
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static inline void mc_softmax_row_sd_(const float *x, float *y, int64_t n, int log_)
{
    double m, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t am;
    if (!mc_softmax_max_(x, n, &m, &am)) {
        mc_softmax_nan_row_(y, n);
        return;
    }
    for (int64_t i = 0; i < n; ++i)
        if (i != am)
            acc[i & 7] += mc_act_exp_neg_sd_((double)x[i] - m);
    const double t = mc_softmax_tree_(acc);
    if (log_) {
        const double ls = log1p(t);
        for (int64_t i = 0; i < n; ++i)
            y[i] = (float)(((double)x[i] - m) - ls);
    } else {
        const double s = 1.0 + t;
        for (int64_t i = 0; i < n; ++i)
            y[i] = (float)(mc_act_exp_neg_sd_((double)x[i] - m) / s);
    }
}

/* Softmax of a row of 16-bit scores in float32, for the fused attention (design g): d = x - m
 * rounded once, e = exp(d) by mc_act_exp16_scaled_ss_ (0 below d = -104, where every float32
 * result is 0 or the smallest subnormal), the terms other than the maximum's (which is 1)
 * summed into 16 lanes, lane i % 16, added as a tree of halves (lanes l and l + 8, then l and
 * l + 4, l + 2, l + 1), s = 1 + t, y = e / s: at most 2**-17 (relative) from the exact
 * probabilities for |d| <= 88 (measured: tests/c/test_attn.c). */
#define MC_SOFTMAX16_MIN (-104.0f)

static inline float mc_softmax16_term_ss_(float d)
{
    const float dc = d < MC_SOFTMAX16_MIN ? MC_SOFTMAX16_MIN : d;
    const float e = mc_act_exp16_scaled_ss_(dc, 0.0f) * MC_ACT_TWO_M64_F;
    return d < MC_SOFTMAX16_MIN ? 0.0f : e;
}

static inline float mc_softmax16_tree_(float *a)
{
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; ++l)
            a[l] = a[l] + a[l + h];
    return a[0];
}

static inline void mc_softmax16_row_ss_(const float *x, float *y, int64_t n)
{
    double m;
    int64_t am;
    float acc[16] = {0};
    if (!mc_softmax_max_(x, n, &m, &am)) {
        mc_softmax_nan_row_(y, n);
        return;
    }
    const float mf = (float)m;
    for (int64_t i = 0; i < n; ++i) {
        y[i] = mc_softmax16_term_ss_(x[i] - mf);
        if (i != am)
            acc[i & 15] += y[i];
    }
    const float s = 1.0f + mc_softmax16_tree_(acc);
    for (int64_t i = 0; i < n; ++i)
        y[i] = y[i] / s;
}

/* The kernels mc_act_forward_f32_<isa> / mc_act_backward_f32_<isa> (mc_act.h) as loops over the
 * scalar twins, one loop per activation so that each body is one inlined function; a unit
 * compiled with other flags (mc_act_avx2.c) instantiates the same loops for its level. */
#define MC_ACT_SCALAR_LOOP_(ACT, OUT, EXPR)                                                   \
    case ACT:                                                                                 \
        for (int64_t i = 0; i < n; ++i)                                                       \
            OUT[i] = EXPR;                                                                    \
        break;

#define MC_ACT_SCALAR_KERNELS_(isa)                                                           \
    static void mc_act_forward_f32_##isa(int act, const float *x, float *y, int64_t n)        \
    {                                                                                         \
        switch (act) {                                                                        \
        MC_ACT_SCALAR_LOOP_(MC_ACT_RELU, y, mc_act_scalar_f32_(MC_ACT_RELU, x[i]))            \
        MC_ACT_SCALAR_LOOP_(MC_ACT_GELU, y, mc_act_scalar_f32_(MC_ACT_GELU, x[i]))            \
        MC_ACT_SCALAR_LOOP_(MC_ACT_GELU_16, y, mc_act_scalar_f32_(MC_ACT_GELU_16, x[i]))      \
        MC_ACT_SCALAR_LOOP_(MC_ACT_SIGMOID, y, mc_act_scalar_f32_(MC_ACT_SIGMOID, x[i]))      \
        MC_ACT_SCALAR_LOOP_(MC_ACT_TANH, y, mc_act_scalar_f32_(MC_ACT_TANH, x[i]))            \
        MC_ACT_SCALAR_LOOP_(MC_ACT_RELU6, y, mc_act_scalar_f32_(MC_ACT_RELU6, x[i]))          \
        MC_ACT_SCALAR_LOOP_(MC_ACT_SILU, y, mc_act_scalar_f32_(MC_ACT_SILU, x[i]))            \
        MC_ACT_SCALAR_LOOP_(MC_ACT_HARD_SIGMOID, y,                                           \
                            mc_act_scalar_f32_(MC_ACT_HARD_SIGMOID, x[i]))                    \
        MC_ACT_SCALAR_LOOP_(MC_ACT_HARD_SILU, y, mc_act_scalar_f32_(MC_ACT_HARD_SILU, x[i]))  \
        default:                                                                              \
            if (n > 0)                                                                        \
                memcpy(y, x, (size_t)n * 4);                                                  \
            break;                                                                            \
        }                                                                                     \
    }                                                                                         \
    static void mc_act_backward_f32_##isa(int act, const float *dy, const float *x, float *dx,\
                                          int64_t n)                                          \
    {                                                                                         \
        switch (act) {                                                                        \
        MC_ACT_SCALAR_LOOP_(MC_ACT_RELU, dx, mc_act_grad_scalar_f32_(MC_ACT_RELU, dy[i], x[i])) \
        MC_ACT_SCALAR_LOOP_(MC_ACT_GELU, dx, mc_act_grad_scalar_f32_(MC_ACT_GELU, dy[i], x[i])) \
        MC_ACT_SCALAR_LOOP_(MC_ACT_SIGMOID, dx,                                               \
                            mc_act_grad_scalar_f32_(MC_ACT_SIGMOID, dy[i], x[i]))             \
        MC_ACT_SCALAR_LOOP_(MC_ACT_TANH, dx, mc_act_grad_scalar_f32_(MC_ACT_TANH, dy[i], x[i])) \
        MC_ACT_SCALAR_LOOP_(MC_ACT_RELU6, dx,                                                 \
                            mc_act_grad_scalar_f32_(MC_ACT_RELU6, dy[i], x[i]))               \
        MC_ACT_SCALAR_LOOP_(MC_ACT_SILU, dx, mc_act_grad_scalar_f32_(MC_ACT_SILU, dy[i], x[i])) \
        MC_ACT_SCALAR_LOOP_(MC_ACT_HARD_SIGMOID, dx,                                          \
                            mc_act_grad_scalar_f32_(MC_ACT_HARD_SIGMOID, dy[i], x[i]))        \
        MC_ACT_SCALAR_LOOP_(MC_ACT_HARD_SILU, dx,                                             \
                            mc_act_grad_scalar_f32_(MC_ACT_HARD_SILU, dy[i], x[i]))           \
        default:                                                                              \
            if (n > 0)                                                                        \
                memcpy(dx, dy, (size_t)n * 4);                                                \
            break;                                                                            \
        }                                                                                     \
    }                                                                                         \
    static void mc_softmax_f32_##isa(const float *x, float *y, int64_t rows, int64_t n,       \
                                     int mode)                                                \
    {                                                                                         \
        for (int64_t r = 0; r < rows; ++r) {                                                  \
            if (mode == MC_SOFTMAX_16)                                                        \
                mc_softmax16_row_ss_(x + r * n, y + r * n, n);                                \
            else                                                                              \
                mc_softmax_row_sd_(x + r * n, y + r * n, n, mode == MC_SOFTMAX_LOG);          \
        }                                                                                     \
    }

#endif
