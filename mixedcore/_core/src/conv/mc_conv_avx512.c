/* AVX-512 depthwise and pooling kernels (mc_conv.h, design c): 16 channels per vector.
 *
 * Design:
 *   a. Each channel sees exactly the operations of its scalar twin (mc_conv_scalar.h): the
 *      depthwise sum is one FMA per tap from +0 in the list's order (four vectors of channels
 *      at a time, so four independent chains cover the FMA latency), the pooling sum one
 *      addition per tap from the first tap's value, and the maximum a masked selection under
 *      the twin's rule (v > m, or v NaN while m is not).  The maximum selects the input bit
 *      patterns alongside the float32 values it compares, so the result is the chosen input
 *      bit for bit (VCVTPH2PS quiets a signalling NaN in the compared value, not in the
 *      stored pattern).
 *   b. float16 is widened by VCVTPH2PS, bfloat16 by a shift (both exact); the last channels are
 *      one masked vector, so no load touches memory outside a pixel's channels.
 *   c. float64 data goes to the scalar twins.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_conv.h"
#include "mc_conv_scalar.h"
#include "mc_simd_avx512.h"

static void mc_dw_avx512_(const char *x, int type, const int64_t *xoff, const void *w,
                          const int64_t *woff, int ntaps, int64_t c, int64_t mult, int64_t wm,
                          void *acc)
{
    if (type == MC_F64) {
        mc_dw_scalar_(x, type, xoff, w, woff, ntaps, 0, c, c, mult, wm, acc);
        return;
    }
    const int64_t es = type == MC_F32 ? 4 : 2;
    for (int64_t m = 0; m < mult; ++m) {
        const float *wf = (const float *)w + m * wm;
        float *af = (float *)acc + m * c;
        int64_t ch = 0;
        for (; ch + 64 <= c; ch += 64) {
            __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            for (int t = 0; t < ntaps; ++t) {
                const char *xp = x + xoff[t] + ch * es;
                const float *wp = wf + woff[t] + ch;
                s0 = _mm512_fmadd_ps(mc_load16_avx512(xp, type, 0xFFFF), _mm512_loadu_ps(wp), s0);
                s1 = _mm512_fmadd_ps(mc_load16_avx512(xp + 16 * es, type, 0xFFFF),
                                     _mm512_loadu_ps(wp + 16), s1);
                s2 = _mm512_fmadd_ps(mc_load16_avx512(xp + 32 * es, type, 0xFFFF),
                                     _mm512_loadu_ps(wp + 32), s2);
                s3 = _mm512_fmadd_ps(mc_load16_avx512(xp + 48 * es, type, 0xFFFF),
                                     _mm512_loadu_ps(wp + 48), s3);
            }
            _mm512_storeu_ps(af + ch, s0);
            _mm512_storeu_ps(af + ch + 16, s1);
            _mm512_storeu_ps(af + ch + 32, s2);
            _mm512_storeu_ps(af + ch + 48, s3);
        }
        for (; ch < c; ch += 16) {
            const __mmask16 k = mc_mask16_avx512(c - ch);
            __m512 s = _mm512_setzero_ps();
            for (int t = 0; t < ntaps; ++t)
                s = _mm512_fmadd_ps(mc_load16_avx512(x + xoff[t] + ch * es, type, k),
                                    _mm512_maskz_loadu_ps(k, wf + woff[t] + ch), s);
            _mm512_mask_storeu_ps(af + ch, k, s);
        }
    }
}

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

const mc_conv_table mc_conv_table_avx512 = {.dw = mc_dw_avx512_, .pool = mc_pool_avx512_};
