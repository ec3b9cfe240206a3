/* AVX-512 (F/BW/VL/DQ) layer-normalization kernel: 8 elements per step, statistics in float64.
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
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_convert_simd.h"
#include "mc_norm.h"
#include "mc_norm_scalar.h"

static inline __mmask8 mc_norm_mask_(int64_t left)
{
    return left >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << left) - 1u);
}

/* 8 elements of a row of `type` from element i as float32 (lanes outside k are 0). */
static inline __m256 mc_norm_load8_(const void *p, int type, int64_t i, __mmask8 k)
{
    if (type == MC_F32)
        return _mm256_maskz_loadu_ps(k, (const float *)p + i);
    const __m128i h = _mm_maskz_loadu_epi16(k, (const uint16_t *)p + i);
    if (type == MC_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* s[i .. i+7] as float64 */
static inline __m512d mc_norm_elem8_(const mc_norm_job *job, const void *x, const void *r,
                                     int64_t i, __mmask8 k)
{
    __m256 v = mc_norm_load8_(x, job->x_type, i, k);
    if (r != NULL)
        v = _mm256_add_ps(v, mc_norm_load8_(r, job->res_type, i, k));
    return _mm512_cvtps_pd(v);
}

static inline void mc_norm_store8_(void *p, int type, int64_t i, __mmask8 k, __m512d t)
{
    const __mmask8 nan = _mm512_cmp_pd_mask(t, t, _CMP_UNORD_Q);
    const __m256i qnan = _mm256_set1_epi32(0x7FC00000);
    if (type == MC_F32) {
        __m256i f = _mm256_castps_si256(_mm512_cvtpd_ps(t));
        f = _mm256_mask_mov_epi32(f, nan, qnan);
        _mm256_mask_storeu_epi32((float *)p + i, k, f);
        return;
    }
    const __m256 tz = _mm512_cvt_roundpd_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(tz), t, _CMP_NEQ_OQ);
    __m256i f = _mm256_castps_si256(tz);
    f = _mm256_mask_or_epi32(f, inexact, f, _mm256_set1_epi32(1));
    f = _mm256_mask_mov_epi32(f, nan, qnan);
    __m128i h;
    if (type == MC_BF16)
        h = _mm256_cvtepi32_epi16(mc_f32_to_bf16_lanes_avx512vl(f));
    else
        h = _mm256_cvtps_ph(_mm256_castsi256_ps(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_mask_storeu_epi16((uint16_t *)p + i, k, h);
}

/* The float64 sum of f(s[i]) over the row in the twin's order; f is the identity (mean == NULL)
 * or (s - *mean)**2. */
static inline double mc_norm_sum_(const mc_norm_job *job, const void *x, const void *r,
                                  const double *mean)
{
    const int64_t n = job->n;
    const __m512d mv = _mm512_set1_pd(mean != NULL ? *mean : 0.0);
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512d v0 = mc_norm_elem8_(job, x, r, i, 0xFF);
        __m512d v1 = mc_norm_elem8_(job, x, r, i + 8, 0xFF);
        if (mean != NULL) {
            v0 = _mm512_sub_pd(v0, mv);
            v1 = _mm512_sub_pd(v1, mv);
            v0 = _mm512_mul_pd(v0, v0);
            v1 = _mm512_mul_pd(v1, v1);
        }
        a0 = _mm512_add_pd(a0, v0);
        a1 = _mm512_add_pd(a1, v1);
    }
    for (int h = 0; i < n; i += 8, ++h) {
        const __mmask8 k = mc_norm_mask_(n - i);
        __m512d v = mc_norm_elem8_(job, x, r, i, k);
        if (mean != NULL) {
            v = _mm512_sub_pd(v, mv);
            v = _mm512_mul_pd(v, v);
        }
        if (h == 0)
            a0 = _mm512_mask_add_pd(a0, k, a0, v);
        else
            a1 = _mm512_mask_add_pd(a1, k, a1, v);
    }
    double a[16];
    _mm512_storeu_pd(a, a0);
    _mm512_storeu_pd(a + 8, a1);
    return mc_norm_tree_(a);
}

static void mc_norm_row_avx512_(const mc_norm_job *job, int64_t row)
{
    const int64_t n = job->n;
    const int xs = job->x_type == MC_F32 ? 4 : 2, rs = job->res_type == MC_F32 ? 4 : 2;
    const int ys = job->y_type == MC_F32 ? 4 : 2;
    const void *x = (const char *)job->x + row * n * xs;
    const void *r = job->res != NULL ? (const char *)job->res + row * n * rs : NULL;
    void *y = (char *)job->y + row * n * ys;
    const double mean = mc_norm_sum_(job, x, r, NULL) / (double)n;
    const double var = mc_norm_sum_(job, x, r, &mean) / (double)n;
    const double rstd = 1.0 / sqrt(var + job->eps);
    const __m512d mv = _mm512_set1_pd(mean), rv = _mm512_set1_pd(rstd);
    for (int64_t i = 0; i < n; i += 8) {
        const __mmask8 k = mc_norm_mask_(n - i);
        __m512d t = _mm512_mul_pd(_mm512_sub_pd(mc_norm_elem8_(job, x, r, i, k), mv), rv);
        if (job->gamma != NULL)
            t = _mm512_mul_pd(t, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, job->gamma + i)));
        if (job->beta != NULL)
            t = _mm512_add_pd(t, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, job->beta + i)));
        mc_norm_store8_(y, job->y_type, i, k, t);
    }
    if (job->mean != NULL)
        job->mean[row] = (float)mean;
    if (job->rstd != NULL)
        job->rstd[row] = (float)rstd;
}

static void mc_layer_norm_avx512(const mc_norm_job *job, int64_t r0, int64_t r1)
{
    for (int64_t row = r0; row < r1; ++row)
        mc_norm_row_avx512_(job, row);
}

const mc_norm_table mc_norm_table_avx512 = MC_NORM_TABLE_(avx512);
