/* AVX-512 (F/BW/VL/DQ) layer-normalization kernel: 8 elements per step, statistics in float64;
 * a 16-bit output 16 elements per step in float32 (mc_norm.h design f, design d below).
 *
 * Design:
 *   a. Bit for bit the scalar twin (mc_norm_scalar.h): s[i] is formed in float32 (16-bit inputs
 *      widened exactly, the residual added in one float32 addition), widened to float64; the
 *      partial sums i % 16 are two accumulators of 8 lanes (elements 16k .. 16k+7 into the
 *      first, 16k+8 .. 16k+15 into the second), each lane adding its terms in index order, and
 *      the tree is the twin's.  mean, var and rstd are then the twin's scalar expressions.  The
 *      output is the twin's float64 expression, lane by lane (separate multiply and add).
 *   b. Tails are masked: masked loads read nothing outside the rows, the zero lanes are left out
 *      of the sums by masked adds and never stored.
 *   c. One rounding from float64 to a 16-bit type: the value is first rounded to float32 with
 *      round-to-odd (truncate, then set the last bit when the truncation was inexact), then to
 *      nearest even in the 16-bit type.  float32 keeps at least two more bits than either 16-bit
 *      type at every magnitude they reach (subnormals included), so this equals the direct
 *      rounding of the twin (mc_f64_to_f16_bits / mc_f64_to_bf16_bits); a value beyond float32's
 *      range truncates to FLT_MAX, whose last bit is set, and rounds on to infinity as it must.
 *   d. A 16-bit output: mc_norm_row_ss_ lane by lane, one 16-lane accumulator per row (lane l
 *      takes the elements i % 16 == l), (s - mean)**2 added by VFMADD as the twin's fmaf, the
 *      tree of halves by extracts; mean, rstd and the division by n are the twin's scalar
 *      expressions.  Rounding to bfloat16 is mc_f32_to_bf16_lanes_avx512, to float16 VCVTPS2PH
 *      to nearest even; NaN lanes are replaced by the positive quiet NaN.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_norm_kernels.h"
#include "mc_norm_scalar.h"
#include "mc_simd_avx512.h"

/* 8 elements of a row of `type` from element i as float32; a full step (k == 0xFF, known when
 * inlined) loads plainly, a tail with a mask (lanes outside k are 0). */
static inline __attribute__((always_inline)) __m256 mc_norm_load8_(const void *p, int type,
                                                                   int64_t i, __mmask8 k)
{
    if (type == MC_F32)
        return k == 0xFF ? _mm256_loadu_ps((const float *)p + i)
                         : _mm256_maskz_loadu_ps(k, (const float *)p + i);
    const __m128i h = k == 0xFF ? _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i))
                                : _mm_maskz_loadu_epi16(k, (const uint16_t *)p + i);
    if (type == MC_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* The rows a kernel call works on together: their sums are independent chains of additions, so
 * the statistics of a group take about the latency of one row's. */
#define MC_NORM_GROUP_ 4

/* The fields of a job in locals, so that stores through y do not make the compiler reload them. */
typedef struct {
    int64_t n;
    int xt, rt, yt;
    const float *gamma, *beta;
} mc_norm_loc_;

/* s[i .. i+7] as float64 */
static inline __attribute__((always_inline)) __m512d mc_norm_elem8_(const mc_norm_loc_ *L, const void *x, const void *r,
                                     int64_t i, __mmask8 k)
{
    __m256 v = mc_norm_load8_(x, L->xt, i, k);
    if (r != NULL)
        v = _mm256_add_ps(v, mc_norm_load8_(r, L->rt, i, k));
    return _mm512_cvtps_pd(v);
}

static inline __attribute__((always_inline)) void
mc_norm_store8_(void *p, int type, int64_t i, __mmask8 k, __m512d t)
{
    const __mmask8 nan = _mm512_cmp_pd_mask(t, t, _CMP_UNORD_Q);
    const __m256i qnan = _mm256_set1_epi32(0x7FC00000);
    if (type == MC_F32) {
        __m256i f = _mm256_castps_si256(_mm512_cvtpd_ps(t));
        f = _mm256_mask_mov_epi32(f, nan, qnan);
        if (k == 0xFF)
            _mm256_storeu_si256((__m256i *)((float *)p + i), f);
        else
            _mm256_mask_storeu_epi32((float *)p + i, k, f);
        return;
    }
    const __m256 tz = _mm512_cvt_roundpd_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(tz), t, _CMP_NEQ_OQ);
    __m256i f = _mm256_castps_si256(tz);
    f = _mm256_mask_or_epi32(f, inexact, f, _mm256_set1_epi32(1));
    f = _mm256_mask_mov_epi32(f, nan, qnan);
    __m128i h;
    if (type == MC_BF16) {
        /* round to nearest even on the bits (mc_f32_to_bf16_bits); NaN lanes are already the
         * canonical 0x7FC00000, which this maps to 0x7FC0 */
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(f, 16), _mm256_set1_epi32(1));
        f = _mm256_add_epi32(f, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
        h = _mm256_cvtepi32_epi16(_mm256_srli_epi32(f, 16));
    }
    else
        h = _mm256_cvtps_ph(_mm256_castsi256_ps(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (k == 0xFF)
        _mm_storeu_si128((__m128i *)((uint16_t *)p + i), h);
    else
        _mm_mask_storeu_epi16((uint16_t *)p + i, k, h);
}

/* For each of the R rows x[q] (+ r[q]): the float64 sum of f(s[i]) in the twin's order, f the
 * identity (mean == NULL) or (s - mean[q])**2. */
static inline __attribute__((always_inline)) void
mc_norm_sums_(const mc_norm_loc_ *L, const void *const *x, const void *const *r, int R,
              const double *mean, double *sum)
{
    const int64_t n = L->n;
    __m512d a0[MC_NORM_GROUP_], a1[MC_NORM_GROUP_], mv[MC_NORM_GROUP_];
    for (int q = 0; q < R; ++q) {
        a0[q] = _mm512_setzero_pd();
        a1[q] = _mm512_setzero_pd();
        mv[q] = _mm512_set1_pd(mean != NULL ? mean[q] : 0.0);
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int q = 0; q < R; ++q) {
            __m512d v0 = mc_norm_elem8_(L, x[q], r[q], i, 0xFF);
            __m512d v1 = mc_norm_elem8_(L, x[q], r[q], i + 8, 0xFF);
            if (mean != NULL) {
                v0 = _mm512_sub_pd(v0, mv[q]);
                v1 = _mm512_sub_pd(v1, mv[q]);
                v0 = _mm512_mul_pd(v0, v0);
                v1 = _mm512_mul_pd(v1, v1);
            }
            a0[q] = _mm512_add_pd(a0[q], v0);
            a1[q] = _mm512_add_pd(a1[q], v1);
        }
    }
    for (int h = 0; i < n; i += 8, ++h) {
        const __mmask8 k = mc_mask8_avx512(n - i);
        for (int q = 0; q < R; ++q) {
            __m512d v = mc_norm_elem8_(L, x[q], r[q], i, k);
            if (mean != NULL) {
                v = _mm512_sub_pd(v, mv[q]);
                v = _mm512_mul_pd(v, v);
            }
            if (h == 0)
                a0[q] = _mm512_mask_add_pd(a0[q], k, a0[q], v);
            else
                a1[q] = _mm512_mask_add_pd(a1[q], k, a1[q], v);
        }
    }
    for (int q = 0; q < R; ++q) {
        double a[16];
        _mm512_storeu_pd(a, a0[q]);
        _mm512_storeu_pd(a + 8, a1[q]);
        sum[q] = mc_norm_tree_(a);
    }
}

/* y[i .. i+7] of a row (the lanes in k) from its mean and rstd. */
static inline __attribute__((always_inline)) void
mc_norm_out8_(const mc_norm_loc_ *L, const void *x, const void *r, void *y, int64_t i,
              __mmask8 k, __m512d mv, __m512d rv)
{
    __m512d t = _mm512_mul_pd(_mm512_sub_pd(mc_norm_elem8_(L, x, r, i, k), mv), rv);
    if (L->gamma != NULL)
        t = _mm512_mul_pd(t, _mm512_cvtps_pd(mc_norm_load8_(L->gamma, MC_F32, i, k)));
    if (L->beta != NULL)
        t = _mm512_add_pd(t, _mm512_cvtps_pd(mc_norm_load8_(L->beta, MC_F32, i, k)));
    mc_norm_store8_(y, L->yt, i, k, t);
}

/* Rows row .. row + R - 1 (R <= MC_NORM_GROUP_). */
static inline __attribute__((always_inline)) void
mc_norm_rows_(const mc_norm_job *job, const mc_norm_loc_ *L, int64_t row, int R)
{
    const int64_t n = L->n;
    const int xs = L->xt == MC_F32 ? 4 : 2, rs = L->rt == MC_F32 ? 4 : 2;
    const int ys = L->yt == MC_F32 ? 4 : 2;
    const void *x[MC_NORM_GROUP_], *r[MC_NORM_GROUP_];
    double mean[MC_NORM_GROUP_], var[MC_NORM_GROUP_];
    for (int q = 0; q < R; ++q) {
        x[q] = (const char *)job->x + (row + q) * n * xs;
        r[q] = job->res != NULL ? (const char *)job->res + (row + q) * n * rs : NULL;
    }
    mc_norm_sums_(L, x, r, R, NULL, mean);
    for (int q = 0; q < R; ++q)
        mean[q] = mean[q] / (double)n;
    mc_norm_sums_(L, x, r, R, mean, var);
    for (int q = 0; q < R; ++q) {
        var[q] = var[q] / (double)n;
        const double rstd = 1.0 / sqrt(var[q] + job->eps);
        void *y = (char *)job->y + (row + q) * n * ys;
        const __m512d mv = _mm512_set1_pd(mean[q]), rv = _mm512_set1_pd(rstd);
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            mc_norm_out8_(L, x[q], r[q], y, i, 0xFF, mv, rv);
        if (i < n)
            mc_norm_out8_(L, x[q], r[q], y, i, mc_mask8_avx512(n - i), mv, rv);
        if (job->mean != NULL)
            job->mean[row + q] = (float)mean[q];
        if (job->rstd != NULL)
            job->rstd[row + q] = (float)rstd;
    }
}

/* --- a 16-bit output: float32 throughout (mc_norm.h design f) --------------------------------- */

/* 16 elements of a row of `type` from element i as float32 (lanes outside k are 0). */
static inline __attribute__((always_inline)) __m512 mc_norm_load16_(const void *p, int type,
                                                                    int64_t i, __mmask16 k)
{
    if (type == MC_F32)
        return k == 0xFFFF ? _mm512_loadu_ps((const float *)p + i)
                           : _mm512_maskz_loadu_ps(k, (const float *)p + i);
    const __m256i h = k == 0xFFFF
                          ? _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i))
                          : _mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i);
    if (type == MC_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

static inline __attribute__((always_inline)) __m512
mc_norm_elem16_(const mc_norm_loc_ *L, const void *x, const void *r, int64_t i, __mmask16 k)
{
    __m512 v = mc_norm_load16_(x, L->xt, i, k);
    if (r != NULL)
        v = _mm512_add_ps(v, mc_norm_load16_(r, L->rt, i, k));
    return v;
}

/* For each of the R rows: the float32 sum of s[i] (mean == NULL) or of (s[i] - mean[q])**2 by
 * FMA, lane i % 16, in the twin's order. */
static inline __attribute__((always_inline)) void
mc_norm_sums16_(const mc_norm_loc_ *L, const void *const *x, const void *const *r, int R,
                const float *mean, float *sum)
{
    const int64_t n = L->n;
    __m512 a[MC_NORM_GROUP_], mv[MC_NORM_GROUP_];
    for (int q = 0; q < R; ++q) {
        a[q] = _mm512_setzero_ps();
        mv[q] = _mm512_set1_ps(mean != NULL ? mean[q] : 0.0f);
    }
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = i + 16 <= n ? (__mmask16)0xFFFF : mc_mask16_avx512(n - i);
        for (int q = 0; q < R; ++q) {
            __m512 v = mc_norm_elem16_(L, x[q], r[q], i, k);
            if (mean != NULL) {
                v = _mm512_sub_ps(v, mv[q]);
                a[q] = _mm512_mask3_fmadd_ps(v, v, a[q], k);
            } else {
                a[q] = _mm512_mask_add_ps(a[q], k, a[q], v);
            }
        }
    }
    for (int q = 0; q < R; ++q)
        sum[q] = mc_sum16_halves_avx512(a[q]);
}

/* y[i .. i+15] (the lanes in k) of a row with a 16-bit output. */
static inline __attribute__((always_inline)) void
mc_norm_out16_(const mc_norm_loc_ *L, const void *x, const void *r, void *y, int64_t i,
               __mmask16 k, __m512 mv, __m512 rv)
{
    __m512 t = _mm512_mul_ps(_mm512_sub_ps(mc_norm_elem16_(L, x, r, i, k), mv), rv);
    if (L->gamma != NULL && L->beta != NULL)
        t = _mm512_fmadd_ps(t, mc_norm_load16_(L->gamma, MC_F32, i, k),
                            mc_norm_load16_(L->beta, MC_F32, i, k));
    else if (L->gamma != NULL)
        t = _mm512_mul_ps(t, mc_norm_load16_(L->gamma, MC_F32, i, k));
    else if (L->beta != NULL)
        t = _mm512_add_ps(t, mc_norm_load16_(L->beta, MC_F32, i, k));
    const __mmask16 nan = _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q);
    __m256i h;
    if (L->yt == MC_BF16)
        h = _mm512_cvtepi32_epi16(mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(t)));
    else
        h = _mm512_cvtps_ph(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    h = _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(L->yt == MC_BF16 ? 0x7FC0 : 0x7E00));
    _mm256_mask_storeu_epi16((uint16_t *)y + i, k, h);
}

static inline __attribute__((always_inline)) void
mc_norm_rows16_(const mc_norm_job *job, const mc_norm_loc_ *L, int64_t row, int R)
{
    const int64_t n = L->n;
    const int xs = L->xt == MC_F32 ? 4 : 2, rs = L->rt == MC_F32 ? 4 : 2;
    const void *x[MC_NORM_GROUP_], *r[MC_NORM_GROUP_];
    float mean[MC_NORM_GROUP_], var[MC_NORM_GROUP_];
    for (int q = 0; q < R; ++q) {
        x[q] = (const char *)job->x + (row + q) * n * xs;
        r[q] = job->res != NULL ? (const char *)job->res + (row + q) * n * rs : NULL;
    }
    mc_norm_sums16_(L, x, r, R, NULL, mean);
    for (int q = 0; q < R; ++q)
        mean[q] = mean[q] / (float)n;
    mc_norm_sums16_(L, x, r, R, mean, var);
    for (int q = 0; q < R; ++q) {
        const float rstd = 1.0f / sqrtf(var[q] / (float)n + (float)job->eps);
        void *y = (char *)job->y + (row + q) * n * 2;
        const __m512 mv = _mm512_set1_ps(mean[q]), rv = _mm512_set1_ps(rstd);
        for (int64_t i = 0; i < n; i += 16)
            mc_norm_out16_(L, x[q], r[q], y, i,
                           i + 16 <= n ? (__mmask16)0xFFFF : mc_mask16_avx512(n - i), mv, rv);
        if (job->mean != NULL)
            job->mean[row + q] = mean[q];
        if (job->rstd != NULL)
            job->rstd[row + q] = rstd;
    }
}

static void mc_layer_norm_avx512(const mc_norm_job *job, int64_t r0, int64_t r1)
{
    const mc_norm_loc_ L = {job->n, job->x_type, job->res_type, job->y_type, job->gamma,
                            job->beta};
    int64_t row = r0;
    if (L.yt != MC_F32) {
        for (; row + MC_NORM_GROUP_ <= r1; row += MC_NORM_GROUP_)
            mc_norm_rows16_(job, &L, row, MC_NORM_GROUP_);
        for (; row < r1; ++row)
            mc_norm_rows16_(job, &L, row, 1);
        return;
    }
    for (; row + MC_NORM_GROUP_ <= r1; row += MC_NORM_GROUP_)
        mc_norm_rows_(job, &L, row, MC_NORM_GROUP_);
    for (; row < r1; ++row)
        mc_norm_rows_(job, &L, row, 1);
}

const mc_norm_table mc_norm_table_avx512 = MC_NORM_TABLE_(avx512);
