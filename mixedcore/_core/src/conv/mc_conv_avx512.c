/* AVX-512 depthwise kernels (mc_conv.h, design c): 16 channels per vector.
 *
 * Design:
 *   a. Each channel sees exactly the operations of its scalar twin (mc_conv_scalar.h): the
 *      depthwise sum is one FMA per tap from +0 in the list's order (four vectors of channels
 *      at a time, so four independent chains cover the FMA latency).
 *   b. float16 is widened by VCVTPH2PS, bfloat16 by a shift (both exact); the last channels are
 *      one masked vector, so no load touches memory outside a pixel's channels.
 *   c. float64 data goes to the scalar twins.
 *   d. With a depth multiplier of 1 (every MobileNet) the epilogue runs on the sums in their
 *      registers (mc_dw_epi_fn): bias, relu or relu6, the rounding to the output type and the
 *      store, the GEMM epilogue's operations in its order (mc_gemm_epi_avx512_inl.h), so the
 *      sums never go through memory.  Four pixels and two vectors of channels at a time: eight
 *      independent chains, each tap's two weight vectors loaded once for the four pixels.  One
 *      copy per (type, activation), the type and activation constants of its loops.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_act_avx512_inl.h"
#include "mc_conv_kernels.h"
#include "mc_conv_scalar.h"
#include "mc_simd_avx512.h"

/* One pixel, every channel and multiplier. */
static void mc_dw_pixel_avx512_(const char *x, int type, const int64_t *xoff, const void *w,
                                const int64_t *woff, int ntaps, int64_t c, int64_t mult,
                                int64_t wm, void *acc)
{
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

/* Four pixels at a time for one vector of channels (mask k): four independent chains of FMAs
 * (one pixel's chain alone waits on the FMA latency at every tap); each is its pixel's sum in
 * tap order, as mc_dw_pixel_avx512_ makes it. */
static inline void mc_dw_quad_avx512_(const char *x, int type, int64_t es, const int64_t *xoff,
                                      int64_t pstride, const float *wf, const int64_t *woff,
                                      int ntaps, __mmask16 k, float *acc, int64_t astep)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int t = 0; t < ntaps; ++t) {
        const char *xp = x + xoff[t];
        const __m512 wv = _mm512_maskz_loadu_ps(k, wf + woff[t]);
        s0 = _mm512_fmadd_ps(mc_load16_avx512(xp, type, k), wv, s0);
        s1 = _mm512_fmadd_ps(mc_load16_avx512(xp + pstride, type, k), wv, s1);
        s2 = _mm512_fmadd_ps(mc_load16_avx512(xp + 2 * pstride, type, k), wv, s2);
        s3 = _mm512_fmadd_ps(mc_load16_avx512(xp + 3 * pstride, type, k), wv, s3);
    }
    (void)es;
    _mm512_mask_storeu_ps(acc, k, s0);
    _mm512_mask_storeu_ps(acc + astep, k, s1);
    _mm512_mask_storeu_ps(acc + 2 * astep, k, s2);
    _mm512_mask_storeu_ps(acc + 3 * astep, k, s3);
}

static void mc_dw_avx512_(const char *x, int type, const int64_t *xoff, int64_t pstride,
                          int64_t npix, const void *w, const int64_t *woff, int ntaps, int64_t c,
                          int64_t mult, int64_t wm, void *acc)
{
    if (type == MC_F64) {
        mc_dw_pixels_scalar_(x, type, xoff, pstride, npix, w, woff, ntaps, c, mult, wm, acc);
        return;
    }
    const int64_t es = type == MC_F32 ? 4 : 2, cm = c * mult;
    int64_t p = 0;
    for (; p + 4 <= npix; p += 4) {
        const char *xp = x + p * pstride;
        float *ap = (float *)acc + p * cm;
        for (int64_t m = 0; m < mult; ++m)
            for (int64_t ch = 0; ch < c; ch += 16)
                mc_dw_quad_avx512_(xp + ch * es, type, es, xoff, pstride,
                                   (const float *)w + m * wm + ch, woff, ntaps,
                                   mc_mask16_avx512(c - ch), ap + m * c + ch, cm);
    }
    for (; p < npix; ++p)
        mc_dw_pixel_avx512_(x + p * pstride, type, xoff, w, woff, ntaps, c, mult, wm,
                            (float *)acc + p * cm);
}

/* The bfloat16 rounding of the avx512 level's epilogue: the integer round to nearest even. */
#define MC_DW_EPI_FN_ mc_dw_epi_avx512_
#define MC_DW_BF16_STORE_(o, m, v)                                                          \
    _mm256_mask_storeu_epi16(                                                               \
        (o), (m), _mm512_cvtepi32_epi16(mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v))))
#define MC_DW_BF16_JOIN_(v0, v1) mc_f32_to_bf16_join_avx512((v0), (v1))
#include "mc_conv_avx512_inl.h"

const mc_conv_table mc_conv_table_avx512 = {.dw = mc_dw_avx512_, .dw_epi = mc_dw_epi_avx512_};
