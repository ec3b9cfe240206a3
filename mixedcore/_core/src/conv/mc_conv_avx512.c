/* AVX-512 depthwise kernels (mc_conv.h, design c): 16 channels per vector.
 *
 * Design:
 *   a. Each channel sees exactly the operations of its scalar twin (mc_conv_scalar.h): the
 *      depthwise sum is one FMA per tap from +0 in the list's order (four vectors of channels
 *      at a time, so four independent chains cover the FMA latency).
 *   b. float16 is widened by VCVTPH2PS, bfloat16 by a shift (both exact); the last channels are
 *      one masked vector, so no load touches memory outside a pixel's channels.
 *   c. float64 data goes to the scalar twins.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_conv_kernels.h"
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

const mc_conv_table mc_conv_table_avx512 = {.dw = mc_dw_avx512_};
