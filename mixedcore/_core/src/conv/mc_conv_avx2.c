/* AVX2 + FMA depthwise kernels (mc_conv.h, design c): 8 channels per vector.
 *
 * Design:
 *   a. The operations of the scalar twins (mc_conv_scalar.h) per channel, as at the AVX-512
 *      level: one FMA per tap (four vectors of channels at a time).
 *   b. float16 is widened by VCVTPH2PS, bfloat16 by a shift; the channels past the last full
 *      vector (and float64 data) go to the scalar twins, compiled here with FMA.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_conv_kernels.h"
#include "mc_conv_scalar.h"
#include "mc_simd_avx2.h"

static void mc_dw_pixel_avx2_(const char *x, int type, const int64_t *xoff, const void *w,
                              const int64_t *woff, int ntaps, int64_t c, int64_t mult,
                              int64_t wm, void *acc)
{
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

static void mc_dw_avx2_(const char *x, int type, const int64_t *xoff, int64_t pstride,
                        int64_t npix, const void *w, const int64_t *woff, int ntaps, int64_t c,
                        int64_t mult, int64_t wm, void *acc)
{
    if (type == MC_F64) {
        mc_dw_pixels_scalar_(x, type, xoff, pstride, npix, w, woff, ntaps, c, mult, wm, acc);
        return;
    }
    for (int64_t p = 0; p < npix; ++p)
        mc_dw_pixel_avx2_(x + p * pstride, type, xoff, w, woff, ntaps, c, mult, wm,
                          (float *)acc + p * c * mult);
}

const mc_conv_table mc_conv_table_avx2 = {.dw = mc_dw_avx2_};
