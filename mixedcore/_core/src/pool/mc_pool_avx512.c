/* AVX-512 pooling kernels (mc_pool.h, design b): 16 channels per vector.
 *
 * Design:
 *   a. Each channel sees exactly the operations of its scalar twin (mc_pool_scalar.h): the sum
 *      is one addition per tap from the first tap's value, and the maximum a masked selection
 *      under the twin's rule (v > m, or v NaN while m is not).  The maximum selects the input
 *      bit patterns alongside the float32 values it compares, so the result is the chosen input
 *      bit for bit (VCVTPH2PS quiets a signalling NaN in the compared value, not in the stored
 *      pattern).
 *   b. float16 is widened by VCVTPH2PS, bfloat16 by a shift (both exact); the last channels are
 *      one masked vector, so no load touches memory outside a pixel's channels.
 *   c. float64 data goes to the scalar twins.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_pool_kernels.h"
#include "mc_pool_scalar.h"
#include "mc_simd_avx512.h"

/* v replaces m: v > m, or v is NaN and m is not (the twin's rule) */
MC_INLINE_ __mmask16 mc_takes_(__m512 v, __m512 m)
{
    return _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) |
           (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q));
}

static void mc_pool_avx512_(const char *x, int type, const int64_t *xoff, int ntaps, int64_t c,
                            int op, void *acc)
{
    if (type == MC_F64) {
        mc_pool_scalar_(x, type, xoff, ntaps, 0, c, op, acc);
        return;
    }
    const int64_t es = type == MC_F32 ? 4 : 2;
    for (int64_t ch = 0; ch < c; ch += 16) {
        const __mmask16 k = mc_mask16_avx512(c - ch);
        const char *x0 = x + xoff[0] + ch * es;
        __m512 m = mc_load16_avx512(x0, type, k);
        if (op == MC_POOL_SUM) {
            for (int t = 1; t < ntaps; ++t)
                m = _mm512_add_ps(m, mc_load16_avx512(x + xoff[t] + ch * es, type, k));
            _mm512_mask_storeu_ps((float *)acc + ch, k, m);
            continue;
        }
        if (type == MC_F32) {
            for (int t = 1; t < ntaps; ++t) {
                const __m512 v = mc_load16_avx512(x + xoff[t] + ch * es, type, k);
                m = _mm512_mask_blend_ps(mc_takes_(v, m), m, v);
            }
            _mm512_mask_storeu_ps((float *)acc + ch, k, m);
            continue;
        }
        __m256i raw = _mm256_maskz_loadu_epi16(k, x0);
        for (int t = 1; t < ntaps; ++t) {
            const char *p = x + xoff[t] + ch * es;
            const __m512 v = mc_load16_avx512(p, type, k);
            const __mmask16 take = mc_takes_(v, m);
            m = _mm512_mask_blend_ps(take, m, v);
            raw = _mm256_mask_blend_epi16(take, raw, _mm256_maskz_loadu_epi16(k, p));
        }
        _mm256_mask_storeu_epi16((char *)acc + ch * 2, k, raw);
    }
}

const mc_pool_table mc_pool_table_avx512 = {.reduce = mc_pool_avx512_};
