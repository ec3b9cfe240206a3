/* AVX2 pooling kernels (mc_pool.h, design b): 8 channels per vector.
 *
 * Design:
 *   a. The operations of the scalar twins (mc_pool_scalar.h) per channel, as at the AVX-512
 *      level: one addition per tap for the sum, a blend under the twin's rule for the maximum,
 *      which also blends the input bit patterns so that the result is the chosen input bit for
 *      bit.
 *   b. float16 is widened by VCVTPH2PS, bfloat16 by a shift; the channels past the last full
 *      vector (and float64 data) go to the scalar twins.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_pool_kernels.h"
#include "mc_pool_scalar.h"
#include "mc_simd_avx2.h"

MC_INLINE_ __m128i mc_raw8_(const char *p) { return _mm_loadu_si128((const __m128i *)p); }

MC_INLINE_ __m256 mc_takes8_(__m256 v, __m256 m)
{
    return _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ),
                        _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q),
                                      _mm256_cmp_ps(m, m, _CMP_ORD_Q)));
}

static void mc_pool_avx2_(const char *x, int type, const int64_t *xoff, int ntaps, int64_t c,
                          int op, void *acc)
{
    if (type == MC_F64) {
        mc_pool_scalar_(x, type, xoff, ntaps, 0, c, op, acc);
        return;
    }
    const int64_t es = type == MC_F32 ? 4 : 2;
    int64_t ch = 0;
    for (; ch + 8 <= c; ch += 8) {
        const char *x0 = x + xoff[0] + ch * es;
        __m256 m = mc_load8_avx2(x0, type);
        if (op == MC_POOL_SUM) {
            for (int t = 1; t < ntaps; ++t)
                m = _mm256_add_ps(m, mc_load8_avx2(x + xoff[t] + ch * es, type));
            _mm256_storeu_ps((float *)acc + ch, m);
            continue;
        }
        if (type == MC_F32) {
            for (int t = 1; t < ntaps; ++t) {
                const __m256 v = mc_load8_avx2(x + xoff[t] + ch * es, type);
                m = _mm256_blendv_ps(m, v, mc_takes8_(v, m));
            }
            _mm256_storeu_ps((float *)acc + ch, m);
            continue;
        }
        __m128i raw = mc_raw8_(x0);
        for (int t = 1; t < ntaps; ++t) {
            const char *p = x + xoff[t] + ch * es;
            const __m256 v = mc_load8_avx2(p, type);
            const __m256i take = _mm256_castps_si256(mc_takes8_(v, m));
            m = _mm256_blendv_ps(m, v, _mm256_castsi256_ps(take));
            const __m128i t16 = _mm_packs_epi32(_mm256_castsi256_si128(take),
                                                _mm256_extracti128_si256(take, 1));
            raw = _mm_blendv_epi8(raw, mc_raw8_(p), t16);
        }
        _mm_storeu_si128((__m128i *)((char *)acc + ch * 2), raw);
    }
    if (ch < c)
        mc_pool_scalar_(x, type, xoff, ntaps, ch, c, op, acc);
}

const mc_pool_table mc_pool_table_avx2 = {.reduce = mc_pool_avx2_};
