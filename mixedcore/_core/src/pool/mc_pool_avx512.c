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
 *   d. Up to four vectors of channels are reduced side by side, tap by tap: one vector at a
 *      time, each tap waited for the previous tap's compare and blend (ResNet50's 3 x 3 max
 *      pooling of 64 bfloat16 channels: 0.52 ms for two images on one thread before).
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

/* Channels ch .. ch + 16 * NV - 1 (the last vector masked by k): NV vectors side by side, each
 * its own chain of the twin's operations, so the chains overlap (design d). */
MC_INLINE_ void mc_pool_group_(const char *x, int type, const int64_t *xoff, int ntaps,
                               int64_t c, int64_t ch, int op, void *acc, const int NV)
{
    const int64_t es = type == MC_F32 ? 4 : 2;
    __mmask16 k[4];
    __m512 m[4];
    __m256i raw[4];
    for (int u = 0; u < NV; ++u) {
        k[u] = mc_mask16_avx512(c - ch - 16 * u);
        const char *p = x + xoff[0] + (ch + 16 * u) * es;
        m[u] = mc_load16_avx512(p, type, k[u]);
        raw[u] = type == MC_F32 ? _mm256_setzero_si256() : _mm256_maskz_loadu_epi16(k[u], p);
    }
    for (int t = 1; t < ntaps; ++t)
        for (int u = 0; u < NV; ++u) {
            const char *p = x + xoff[t] + (ch + 16 * u) * es;
            const __m512 v = mc_load16_avx512(p, type, k[u]);
            if (op == MC_POOL_SUM) {
                m[u] = _mm512_add_ps(m[u], v);
                continue;
            }
            const __mmask16 take = mc_takes_(v, m[u]);
            m[u] = _mm512_mask_blend_ps(take, m[u], v);
            if (type != MC_F32)
                raw[u] = _mm256_mask_blend_epi16(take, raw[u], _mm256_maskz_loadu_epi16(k[u], p));
        }
    for (int u = 0; u < NV; ++u) {
        if (op == MC_POOL_SUM || type == MC_F32)
            _mm512_mask_storeu_ps((float *)acc + ch + 16 * u, k[u], m[u]);
        else
            _mm256_mask_storeu_epi16((char *)acc + (ch + 16 * u) * 2, k[u], raw[u]);
    }
}

static void mc_pool_avx512_(const char *x, int type, const int64_t *xoff, int ntaps, int64_t c,
                            int op, void *acc)
{
    if (type == MC_F64) {
        mc_pool_scalar_(x, type, xoff, ntaps, 0, c, op, acc);
        return;
    }
    int64_t ch = 0;
    for (; ch + 48 < c; ch += 64)
        mc_pool_group_(x, type, xoff, ntaps, c, ch, op, acc, 4);
    switch ((c - ch + 15) / 16) {           /* the last 1 to 3 vectors */
    case 3: mc_pool_group_(x, type, xoff, ntaps, c, ch, op, acc, 3); break;
    case 2: mc_pool_group_(x, type, xoff, ntaps, c, ch, op, acc, 2); break;
    case 1: mc_pool_group_(x, type, xoff, ntaps, c, ch, op, acc, 1); break;
    default: break;
    }
}

const mc_pool_table mc_pool_table_avx512 = {.reduce = mc_pool_avx512_};
