/* AVX2 + F16C overflow-scan kernels.
 *
 * Design:
 *   a. The algorithms of the AVX-512 unit (mc_scan_avx512.c, designs a, b and d) on 256-bit
 *      vectors: AND with the magnitude mask, signed lane maximum, one compare per 1 KiB block
 *      for the early exit.  AVX2 has no unsigned or >= compare; the masked magnitudes are
 *      non-negative, so "acc >= inf" is the signed "acc > inf - 1".
 *   b. AVX2 has no 16-bit masked loads.  all_finite starts with one unaligned vector and
 *      continues from the first 32-byte boundary (so the main loads never cross a cache
 *      line), and ends with one vector that overlaps the previous one: testing an element
 *      twice changes nothing.  Arrays shorter than a vector are copied into a zeroed buffer.
 *      unscale may not touch an element twice, so its tail goes through a zeroed buffer: copy
 *      in, one vector step, copy the live elements back.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_scan_kernels.h"
#include "mc_simd_avx2.h"

#define MC_LD_(p) _mm256_load_si256((const __m256i *)(p))

#define MC_FINITE256_(name, esize, MAXOP, GTOP, magnitude, inf_minus_1)               \
    static int mc_all_finite_##name##_avx2(const void *p, int64_t n)                         \
    {                                                                                 \
        const char *s = (const char *)p;                                              \
        const int64_t nb = n * (esize);                                               \
        const __m256i m = magnitude, thr = inf_minus_1;                               \
        __m256i acc;                                                                  \
        if (nb < 32) {                                                                \
            unsigned char buf[32] = {0};                                              \
            memcpy(buf, s, (size_t)nb);                                               \
            acc = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)buf), m);      \
            return !_mm256_movemask_epi8(GTOP(acc, thr));                             \
        }                                                                             \
        /* the first vector unaligned, then from the first 32-byte boundary (design b) */ \
        acc = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)s), m);            \
        int64_t i = mc_aligned_head(s, 32u, 1u, nb);                                  \
        for (; i + 1024 <= nb; i += 1024) {                                           \
            __m256i a0 = _mm256_and_si256(MC_LD_(s + i), m);                          \
            __m256i a1 = _mm256_and_si256(MC_LD_(s + i + 32), m);                     \
            __m256i a2 = _mm256_and_si256(MC_LD_(s + i + 64), m);                     \
            __m256i a3 = _mm256_and_si256(MC_LD_(s + i + 96), m);                     \
            for (int j = 128; j < 1024; j += 128) {                                   \
                a0 = MAXOP(a0, _mm256_and_si256(MC_LD_(s + i + j), m));               \
                a1 = MAXOP(a1, _mm256_and_si256(MC_LD_(s + i + j + 32), m));          \
                a2 = MAXOP(a2, _mm256_and_si256(MC_LD_(s + i + j + 64), m));          \
                a3 = MAXOP(a3, _mm256_and_si256(MC_LD_(s + i + j + 96), m));          \
            }                                                                         \
            const __m256i a = MAXOP(MAXOP(a0, a1), MAXOP(a2, a3));                    \
            if (_mm256_movemask_epi8(GTOP(a, thr)))                                   \
                return 0;                                                             \
        }                                                                             \
        for (; i + 32 <= nb; i += 32)                                                 \
            acc = MAXOP(acc, _mm256_and_si256(MC_LD_(s + i), m));                     \
        if (i < nb)                                                                   \
            acc = MAXOP(acc, _mm256_and_si256(                                        \
                _mm256_loadu_si256((const __m256i *)(s + nb - 32)), m));              \
        return !_mm256_movemask_epi8(GTOP(acc, thr));                                 \
    }

MC_FINITE256_(f16, 2, _mm256_max_epi16, _mm256_cmpgt_epi16, _mm256_set1_epi16(0x7FFF),
              _mm256_set1_epi16(0x7C00 - 1))
MC_FINITE256_(bf16, 2, _mm256_max_epi16, _mm256_cmpgt_epi16, _mm256_set1_epi16(0x7FFF),
              _mm256_set1_epi16(0x7F80 - 1))
MC_FINITE256_(f32, 4, _mm256_max_epi32, _mm256_cmpgt_epi32, _mm256_set1_epi32(0x7FFFFFFF),
              _mm256_set1_epi32(0x7F800000 - 1))
MC_FINITE256_(f64, 8, _mm256_max_epi32, _mm256_cmpgt_epi32,
              _mm256_set1_epi64x(INT64_C(0x7FFFFFFF00000000)), _mm256_set1_epi32(0x7FF00000 - 1))

/* --- unscale ------------------------------------------------------------------------------- */

/* One step: 8 float16 / bfloat16 values (design d of the AVX-512 unit). */
MC_INLINE_ __m128i f16_unscale8_(__m128i h, __m256 inv)
{
    return _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtph_ps(h), inv), MC_RNE_);
}

MC_INLINE_ __m128i bf16_unscale8_(__m128i h, __m256 inv)
{
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    const __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(w), inv);
    const __m256i r = mc_f32_to_bf16_lanes_avx2(_mm256_castps_si256(f));
    /* every lane is <= 0xFFFF, so the unsigned saturating pack is exact */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

#define MC_UNSCALE256_16_(name, inf, op)                                              \
    static int mc_unscale_##name##_avx2(void *p, int64_t n, float inv32, double inv64)       \
    {                                                                                 \
        uint16_t *s = (uint16_t *)p;                                                  \
        const __m256 inv = _mm256_set1_ps(inv32);                                     \
        const __m128i m = _mm_set1_epi16(0x7FFF);                                     \
        __m128i acc = _mm_setzero_si128();                                            \
        int64_t i = 0;                                                                \
        (void)inv64;                                                                  \
        for (; i + 8 <= n; i += 8) {                                                  \
            const __m128i h = _mm_loadu_si128((const __m128i *)(s + i));              \
            acc = _mm_max_epi16(acc, _mm_and_si128(h, m));                            \
            _mm_storeu_si128((__m128i *)(s + i), op(h, inv));                         \
        }                                                                             \
        if (i < n) {                                                                  \
            uint16_t buf[8] = {0};                                                    \
            memcpy(buf, s + i, (size_t)(n - i) * 2);                                  \
            const __m128i h = _mm_loadu_si128((const __m128i *)buf);                  \
            acc = _mm_max_epi16(acc, _mm_and_si128(h, m));                            \
            _mm_storeu_si128((__m128i *)buf, op(h, inv));                             \
            memcpy(s + i, buf, (size_t)(n - i) * 2);                                  \
        }                                                                             \
        return !_mm_movemask_epi8(_mm_cmpgt_epi16(acc, _mm_set1_epi16((inf) - 1)));   \
    }

MC_UNSCALE256_16_(f16, 0x7C00, f16_unscale8_)
MC_UNSCALE256_16_(bf16, 0x7F80, bf16_unscale8_)

static int mc_unscale_f32_avx2(void *p, int64_t n, float inv32, double inv64)
{
    float *x = (float *)p;
    const __m256 inv = _mm256_set1_ps(inv32);
    const __m256i m = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i acc = _mm256_setzero_si256();
    int64_t i = 0;
    (void)inv64;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_max_epi32(acc, _mm256_and_si256(_mm256_castps_si256(v), m));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(v, inv));
    }
    if (i < n) {
        float buf[8] = {0};
        memcpy(buf, x + i, (size_t)(n - i) * 4);
        const __m256 v = _mm256_loadu_ps(buf);
        acc = _mm256_max_epi32(acc, _mm256_and_si256(_mm256_castps_si256(v), m));
        _mm256_storeu_ps(buf, _mm256_mul_ps(v, inv));
        memcpy(x + i, buf, (size_t)(n - i) * 4);
    }
    return !_mm256_movemask_epi8(_mm256_cmpgt_epi32(acc, _mm256_set1_epi32(0x7F800000 - 1)));
}

static int mc_unscale_f64_avx2(void *p, int64_t n, float inv32, double inv64)
{
    double *x = (double *)p;
    const __m256d inv = _mm256_set1_pd(inv64);
    const __m256i m = _mm256_set1_epi64x(INT64_C(0x7FFFFFFF00000000));
    __m256i acc = _mm256_setzero_si256();
    int64_t i = 0;
    (void)inv32;
    for (; i + 4 <= n; i += 4) {
        const __m256d v = _mm256_loadu_pd(x + i);
        acc = _mm256_max_epi32(acc, _mm256_and_si256(_mm256_castpd_si256(v), m));
        _mm256_storeu_pd(x + i, _mm256_mul_pd(v, inv));
    }
    if (i < n) {
        double buf[4] = {0};
        memcpy(buf, x + i, (size_t)(n - i) * 8);
        const __m256d v = _mm256_loadu_pd(buf);
        acc = _mm256_max_epi32(acc, _mm256_and_si256(_mm256_castpd_si256(v), m));
        _mm256_storeu_pd(buf, _mm256_mul_pd(v, inv));
        memcpy(x + i, buf, (size_t)(n - i) * 8);
    }
    return !_mm256_movemask_epi8(_mm256_cmpgt_epi32(acc, _mm256_set1_epi32(0x7FF00000 - 1)));
}

/* the numerics statistics: mc_scan.h design e, vectorised for this level by the compiler */
MC_STATS_KERNELS_(avx2)

const mc_scan_table mc_scan_table_avx2 = MC_SCAN_TABLE_(avx2);
