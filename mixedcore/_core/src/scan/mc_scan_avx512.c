/* AVX-512 (F/BW/VL/DQ + F16C) overflow-scan kernels.
 *
 * Design:
 *   a. Finite test by magnitude maximum: AND each vector with the magnitude mask of its lanes
 *      and keep the lane-wise maximum in an accumulator; the block holds a NaN or an infinity
 *      exactly when some lane of the maximum reaches the magnitude of infinity (mc_scan.h,
 *      design b).  Masked magnitudes are non-negative, so the signed max / compare are exact.
 *      Two instructions per vector, the AND folded with the load.
 *   b. float64 is tested on its high 32 bits: the magnitude mask 0x7FFFFFFF00000000 clears the
 *      low half, and a float64 is finite exactly when its high word's magnitude is below
 *      0x7FF00000 (the exponent field lies entirely in the high word).  So float64 and float32
 *      share the 32-bit maximum; float16 and bfloat16 use the 16-bit one.
 *   c. all_finite tests its accumulator once per 1 KiB block and returns at the first block that
 *      fails.  The bytes before the first 64-byte boundary and the tail (under 64 bytes each)
 *      are byte-masked loads: masked-off lanes read as 0, which is finite, and nothing outside
 *      the array is touched.  Every other load is aligned: numpy places large arrays 16 bytes
 *      past a page boundary, and a 64-byte access across two cache lines costs twice.
 *      The unscale kernels align their stores the same way, with a masked head block.
 *   d. unscale: float16 is widened by VCVTPH2PS (exact), multiplied, and rounded back by
 *      VCVTPS2PH with round-to-nearest-even, which is numpy's float32 -> float16 rounding for
 *      every input that is not a signalling NaN.  A product is never a signalling NaN (the
 *      multiply quiets NaNs; numpy's float16 -> float32 keeps a signalling NaN, its multiply
 *      quiets it to the same bits VCVTPH2PS + multiply give), so no lane needs a fix-up.
 *      bfloat16 is widened by a 16-bit shift and rounded back with the integer RNE of
 *      mc_f32_to_bf16_bits, NaN lanes replaced by 0x7FC0 with their sign, as ml_dtypes does.
 *      The tail is a masked load and a masked store of the same lanes.
 */
#include <immintrin.h>
#include <stdint.h>
#include "mc_scan_kernels.h"
#include "mc_simd_avx512.h"

/* --- all_finite ---------------------------------------------------------------------------- */

#define MC_LD_(p) _mm512_load_si512((const void *)(p))

/* MAX: lane-wise signed maximum; GE: nonzero when some lane of acc >= thr. */
#define MC_FINITE512_(name, esize, MAXOP, GEOP, magnitude, inf)                       \
    static int mc_all_finite_##name##_avx512(const void *p, int64_t n)                       \
    {                                                                                 \
        const char *s = (const char *)p;                                              \
        const int64_t nb = n * (esize);                                               \
        const __m512i m = magnitude, thr = inf;                                       \
        __m512i acc = _mm512_setzero_si512();                                         \
        int64_t i = mc_aligned_head(s, 64u, 1u, nb);                                  \
        if (i > 0)                                                                    \
            acc = _mm512_and_si512(                                                   \
                _mm512_maskz_loadu_epi8((__mmask64)((UINT64_C(1) << i) - 1), s), m);  \
        for (; i + 1024 <= nb; i += 1024) {                                           \
            __m512i a0 = _mm512_and_si512(MC_LD_(s + i), m);                          \
            __m512i a1 = _mm512_and_si512(MC_LD_(s + i + 64), m);                     \
            __m512i a2 = _mm512_and_si512(MC_LD_(s + i + 128), m);                    \
            __m512i a3 = _mm512_and_si512(MC_LD_(s + i + 192), m);                    \
            for (int j = 256; j < 1024; j += 256) {                                   \
                a0 = MAXOP(a0, _mm512_and_si512(MC_LD_(s + i + j), m));               \
                a1 = MAXOP(a1, _mm512_and_si512(MC_LD_(s + i + j + 64), m));          \
                a2 = MAXOP(a2, _mm512_and_si512(MC_LD_(s + i + j + 128), m));         \
                a3 = MAXOP(a3, _mm512_and_si512(MC_LD_(s + i + j + 192), m));         \
            }                                                                         \
            if (GEOP(MAXOP(MAXOP(a0, a1), MAXOP(a2, a3)), thr))                       \
                return 0;                                                             \
        }                                                                             \
        for (; i + 64 <= nb; i += 64)                                                 \
            acc = MAXOP(acc, _mm512_and_si512(MC_LD_(s + i), m));                     \
        if (i < nb) {                                                                 \
            const __mmask64 k = (__mmask64)((UINT64_C(1) << (nb - i)) - 1);           \
            acc = MAXOP(acc, _mm512_and_si512(_mm512_maskz_loadu_epi8(k, s + i), m)); \
        }                                                                             \
        return !GEOP(acc, thr);                                                       \
    }

#define MC_GE16_(a, t) _mm512_cmpge_epi16_mask(a, t)
#define MC_GE32_(a, t) _mm512_cmpge_epi32_mask(a, t)

MC_FINITE512_(f16, 2, _mm512_max_epi16, MC_GE16_, _mm512_set1_epi16(0x7FFF),
              _mm512_set1_epi16(0x7C00))
MC_FINITE512_(bf16, 2, _mm512_max_epi16, MC_GE16_, _mm512_set1_epi16(0x7FFF),
              _mm512_set1_epi16(0x7F80))
MC_FINITE512_(f32, 4, _mm512_max_epi32, MC_GE32_, _mm512_set1_epi32(0x7FFFFFFF),
              _mm512_set1_epi32(0x7F800000))
MC_FINITE512_(f64, 8, _mm512_max_epi32, MC_GE32_, _mm512_set1_epi64(INT64_C(0x7FFFFFFF00000000)),
              _mm512_set1_epi32(0x7FF00000))

/* --- unscale ------------------------------------------------------------------------------- */

MC_INLINE_ __m256i f16_unscale16_(__m256i h, __m512 inv)
{
    const __m512 f = _mm512_mul_ps(_mm512_cvtph_ps(h), inv);
    return _mm512_cvtps_ph(f, MC_RNE_SAE_);
}

MC_INLINE_ __m256i bf16_unscale16_(__m256i h, __m512 inv)
{
    const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    const __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(w), inv);
    return _mm512_cvtepi32_epi16(mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(f)));
}

#define MC_UNSCALE512_16_(name, inf, op)                                              \
    static int mc_unscale_##name##_avx512(void *p, int64_t n, float inv32, double inv64)     \
    {                                                                                 \
        uint16_t *s = (uint16_t *)p;                                                  \
        const __m512 inv = _mm512_set1_ps(inv32);                                     \
        const __m256i m = _mm256_set1_epi16(0x7FFF);                                  \
        __m256i acc = _mm256_setzero_si256();                                         \
        const int64_t head = mc_aligned_head(s, 32u, 2u, n);                          \
        int64_t i = 0;                                                                \
        (void)inv64;                                                                  \
        if (head > 0) {                                                               \
            const __mmask16 k = mc_mask16_avx512(head);                       \
            const __m256i h = _mm256_maskz_loadu_epi16(k, s);                         \
            acc = _mm256_and_si256(h, m);                                             \
            _mm256_mask_storeu_epi16(s, k, op(h, inv));                               \
            i = head;                                                                 \
        }                                                                             \
        for (; i + 32 <= n; i += 32) {                                                \
            const __m256i h0 = _mm256_load_si256((const __m256i *)(s + i));           \
            const __m256i h1 = _mm256_load_si256((const __m256i *)(s + i + 16));      \
            acc = _mm256_max_epi16(acc, _mm256_and_si256(h0, m));                     \
            acc = _mm256_max_epi16(acc, _mm256_and_si256(h1, m));                     \
            _mm256_store_si256((__m256i *)(s + i), op(h0, inv));                      \
            _mm256_store_si256((__m256i *)(s + i + 16), op(h1, inv));                 \
        }                                                                             \
        for (; i < n; i += 16) {                                                      \
            const int64_t r = n - i < 16 ? n - i : 16;                                \
            const __mmask16 k = mc_mask16_avx512(r);                          \
            const __m256i h = _mm256_maskz_loadu_epi16(k, s + i);                     \
            acc = _mm256_max_epi16(acc, _mm256_and_si256(h, m));                      \
            _mm256_mask_storeu_epi16(s + i, k, op(h, inv));                           \
        }                                                                             \
        return !_mm256_cmpge_epi16_mask(acc, _mm256_set1_epi16(inf));                 \
    }

MC_UNSCALE512_16_(f16, 0x7C00, f16_unscale16_)
MC_UNSCALE512_16_(bf16, 0x7F80, bf16_unscale16_)

static int mc_unscale_f32_avx512(void *p, int64_t n, float inv32, double inv64)
{
    float *x = (float *)p;
    const __m512 inv = _mm512_set1_ps(inv32);
    const __m512i m = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
    const int64_t head = mc_aligned_head(x, 64u, 4u, n);
    int64_t i = 0;
    (void)inv64;
    if (head > 0) {
        const __mmask16 k = mc_mask16_avx512(head);
        const __m512 v = _mm512_maskz_loadu_ps(k, x);
        acc0 = _mm512_and_si512(_mm512_castps_si512(v), m);
        _mm512_mask_storeu_ps(x, k, _mm512_mul_ps(v, inv));
        i = head;
    }
    for (; i + 32 <= n; i += 32) {
        const __m512 v0 = _mm512_load_ps(x + i), v1 = _mm512_load_ps(x + i + 16);
        acc0 = _mm512_max_epi32(acc0, _mm512_and_si512(_mm512_castps_si512(v0), m));
        acc1 = _mm512_max_epi32(acc1, _mm512_and_si512(_mm512_castps_si512(v1), m));
        _mm512_store_ps(x + i, _mm512_mul_ps(v0, inv));
        _mm512_store_ps(x + i + 16, _mm512_mul_ps(v1, inv));
    }
    for (; i < n; i += 16) {
        const int64_t r = n - i < 16 ? n - i : 16;
        const __mmask16 k = mc_mask16_avx512(r);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        acc0 = _mm512_max_epi32(acc0, _mm512_and_si512(_mm512_castps_si512(v), m));
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(v, inv));
    }
    return !_mm512_cmpge_epi32_mask(_mm512_max_epi32(acc0, acc1), _mm512_set1_epi32(0x7F800000));
}

static int mc_unscale_f64_avx512(void *p, int64_t n, float inv32, double inv64)
{
    double *x = (double *)p;
    const __m512d inv = _mm512_set1_pd(inv64);
    const __m512i m = _mm512_set1_epi64(INT64_C(0x7FFFFFFF00000000));
    __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
    const int64_t head = mc_aligned_head(x, 64u, 8u, n);
    int64_t i = 0;
    (void)inv32;
    if (head > 0) {
        const __mmask8 k = mc_mask8_avx512(head);
        const __m512d v = _mm512_maskz_loadu_pd(k, x);
        acc0 = _mm512_and_si512(_mm512_castpd_si512(v), m);
        _mm512_mask_storeu_pd(x, k, _mm512_mul_pd(v, inv));
        i = head;
    }
    for (; i + 16 <= n; i += 16) {
        const __m512d v0 = _mm512_load_pd(x + i), v1 = _mm512_load_pd(x + i + 8);
        acc0 = _mm512_max_epi32(acc0, _mm512_and_si512(_mm512_castpd_si512(v0), m));
        acc1 = _mm512_max_epi32(acc1, _mm512_and_si512(_mm512_castpd_si512(v1), m));
        _mm512_store_pd(x + i, _mm512_mul_pd(v0, inv));
        _mm512_store_pd(x + i + 8, _mm512_mul_pd(v1, inv));
    }
    for (; i < n; i += 8) {
        const int64_t r = n - i < 8 ? n - i : 8;
        const __mmask8 k = mc_mask8_avx512(r);
        const __m512d v = _mm512_maskz_loadu_pd(k, x + i);
        acc0 = _mm512_max_epi32(acc0, _mm512_and_si512(_mm512_castpd_si512(v), m));
        _mm512_mask_storeu_pd(x + i, k, _mm512_mul_pd(v, inv));
    }
    return !_mm512_cmpge_epi32_mask(_mm512_max_epi32(acc0, acc1), _mm512_set1_epi32(0x7FF00000));
}

/* the numerics statistics: mc_scan.h design e, vectorised for this level by the compiler */
MC_STATS_KERNELS_(avx512)

const mc_scan_table mc_scan_table_avx512 = MC_SCAN_TABLE_(avx512);
