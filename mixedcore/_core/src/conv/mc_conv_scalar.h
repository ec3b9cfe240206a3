/* Scalar twins of the depthwise kernels (mc_conv.h, design c): the specification the vector
 * kernels are tested against, and what they run for the channels a vector does not cover.
 *
 * Design:
 *   a. Depthwise: each channel's taps are summed in tap order from +0, one fmaf() per tap
 *      (fma() for float64).  Where a level has the FMA instruction the vector code performs the
 *      very same operations; fmaf() is correctly rounded wherever it runs, so every level gives
 *      the same bits.  For float16 and bfloat16 data the products are exact in float32 anyway.
 *   b. Header-only (static inline), so each level's file compiles the twins with its flags
 *      (FMA instructions for fmaf() where the level has them).
 */
#ifndef MC_CONV_SCALAR_H_
#define MC_CONV_SCALAR_H_

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_conv_kernels.h"
#include "mc_convert_scalar.h"
#include "mc_gemm_scalar.h"

/* Channels [c0, c1) of the depthwise kernel (mc_dw_fn). */
static inline void mc_dw_scalar_(const char *x, int type, const int64_t *xoff, const void *w,
                                 const int64_t *woff, int ntaps, int64_t c0, int64_t c1,
                                 int64_t c, int64_t mult, int64_t wm, void *acc)
{
    const int64_t es = mc_conv_es_(type);
    if (type == MC_F64) {
        const double *wd = (const double *)w;
        double *ad = (double *)acc;
        for (int64_t m = 0; m < mult; ++m)
            for (int64_t ch = c0; ch < c1; ++ch) {
                double s = 0.0;
                for (int t = 0; t < ntaps; ++t)
                    s = fma(mc_conv_load_f64_(x + xoff[t] + ch * es),
                            wd[woff[t] + m * wm + ch], s);
                ad[m * c + ch] = s;
            }
        return;
    }
    const float *wf = (const float *)w;
    float *af = (float *)acc;
    for (int64_t m = 0; m < mult; ++m)
        for (int64_t ch = c0; ch < c1; ++ch) {
            float s = 0.0f;
            for (int t = 0; t < ntaps; ++t)
                s = fmaf(mc_gemm_load_elem_(x + xoff[t] + ch * es, type),
                         wf[woff[t] + m * wm + ch], s);
            af[m * c + ch] = s;
        }
}

/* The pixels of one call of the kernel (mc_dw_fn), each by mc_dw_scalar_. */
static inline void mc_dw_pixels_scalar_(const char *x, int type, const int64_t *xoff,
                                        int64_t pstride, int64_t npix, const void *w,
                                        const int64_t *woff, int ntaps, int64_t c, int64_t mult,
                                        int64_t wm, void *acc)
{
    const int64_t step = c * mult * (type == MC_F64 ? 8 : 4);
    for (int64_t p = 0; p < npix; ++p)
        mc_dw_scalar_(x + p * pstride, type, xoff, w, woff, ntaps, 0, c, c, mult, wm,
                      (char *)acc + p * step);
}

#endif
