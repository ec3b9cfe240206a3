/* AVX2 + FMA depthwise and pooling kernels (mc_conv.h, design c): 8 channels per vector.
 *
 * Design:
 *   a. The operations of the scalar twins (mc_conv_scalar.h) per channel, as at the AVX-512
 *      level: one FMA per tap for depthwise (four vectors of channels at a time), one addition
 *      per tap for the pooling sum, a blend under the twin's rule for the maximum, which also
 *      blends the input bit patterns so that the result is the chosen input bit for bit.
 *   b. float16 is widened by VCVTPH2PS, bfloat16 by a shift; the channels past the last full
 *      vector (and float64 data) go to the scalar twins, compiled here with FMA.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_conv.h"
#include "mc_conv_scalar.h"
#include "mc_simd_avx2.h"

MC_INLINE_ __m128i mc_raw8_(const char *p) { return _mm_loadu_si128((const __m128i *)p); }

static void mc_dw_avx2_(const char *x, int type, const int64_t *xoff, const void *w,
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
        for (; ch + 32 <= c; ch += 32) {
            __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            for (int t = 0; t < ntaps; ++t) {
                const char *xp = x + xoff[t] + ch * es;
                const float *wp = wf + woff[t] + ch;
                s0 = _mm256_fmadd_ps(mc_load8_avx2(xp, type), _mm256_loadu_ps(wp), s0);
                s1 = _mm256_fmadd_ps(mc_load8_avx2(xp + 8 * es, type), _mm256_loadu_ps(wp + 8), s1);
                s2 = _mm256_fmadd_ps(mc_load8_avx2(xp + 16 * es, type), _mm256_loadu_ps(wp + 16),
                                     s2);
                s3 = _mm256_fmadd_ps(mc_load8_avx2(xp + 24 * es, type), _mm256_loadu_ps(wp + 24),
                                     s3);
            }
            _mm256_storeu_ps(af + ch, s0);
            _mm256_storeu_ps(af + ch + 8, s1);
            _mm256_storeu_ps(af + ch + 16, s2);
            _mm256_storeu_ps(af + ch + 24, s3);
        }
        for (; ch + 8 <= c; ch += 8) {
            __m256 s = _mm256_setzero_ps();
            for (int t = 0; t < ntaps; ++t)
                s = _mm256_fmadd_ps(mc_load8_avx2(x + xoff[t] + ch * es, type),
                                    _mm256_loadu_ps(wf + woff[t] + ch), s);
            _mm256_storeu_ps(af + ch, s);
        }
        if (ch < c)                      /* this multiplier's last channels */
            mc_dw_scalar_(x, type, xoff, wf, woff, ntaps, ch, c, c, 1, 0, af);
    }
}

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

const mc_conv_table mc_conv_table_avx2 = {.dw = mc_dw_avx2_, .pool = mc_pool_avx2_};
