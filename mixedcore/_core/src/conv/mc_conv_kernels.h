/* The depthwise-convolution family's level kernels: their types and the family's table (one per
 * level, exported by mc_conv_generic.c and mc_conv_<isa>.c, resolved by runtime/mc_kernels.c).
 * The level files, the scalar twins and the kernel tables include this header; the drivers' API
 * is mc_conv.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_CONV_KERNELS_H_
#define MC_CONV_KERNELS_H_

#include <stdint.h>
#include "mc_conv_geom.h"

/* Depthwise, for npix output pixels whose taps are the same offsets shifted by pstride bytes
 * from one pixel to the next: for p < npix, ch < c and m < mult,
 *   acc[p * mult * c + m * c + ch]
 *     = sum over t < ntaps of x[p * pstride + xoff[t] + ch * es] * w[woff[t] + m * wm + ch],
 * from +0 in tap order, one fused multiply-add per tap; float32 (x float16, bfloat16 or float32,
 * w and acc float) or float64 (x, w and acc double). */
typedef void (*mc_dw_fn)(const char *x, int type, const int64_t *xoff, int64_t pstride,
                         int64_t npix, const void *w, const int64_t *woff, int ntaps, int64_t c,
                         int64_t mult, int64_t wm, void *acc);

/* Depthwise with a depth multiplier of 1 and its epilogue, for npix output pixels as mc_dw_fn
 * (w: KH x KW x C floats, woff in floats): with s the sum mc_dw_fn makes,
 *   out[p * c + ch] = round(act(s + bias[ch]))      (no addition when bias is NULL),
 * the operations of the GEMM's epilogue (mc_gemm.h) in its order, one rounding to the output
 * type.  For x and out of one type (float16, bfloat16 or float32) and act MC_ACT_NONE,
 * MC_ACT_RELU or MC_ACT_RELU6 (as mc_act_for_output gives it); the driver takes the sums and
 * the epilogue apart for everything else.  NULL at levels without it. */
typedef void (*mc_dw_epi_fn)(const char *x, int type, const int64_t *xoff, int64_t pstride,
                             int64_t npix, const float *w, const int64_t *woff, int ntaps,
                             int64_t c, const float *bias, int act, char *out, int rows3);
/* rows3: the taps come in rows of three neighbouring input pixels (xoff[3 r + j] = xoff[3 r]
 * + j * pstride; a 3-wide kernel at stride 1 and dilation 1, its columns all inside the
 * image), which a kernel may load once for the pixels that share them. */

typedef struct {
    mc_dw_fn dw;
    mc_dw_epi_fn dw_epi;
} mc_conv_table;

extern const mc_conv_table mc_conv_table_generic;
extern const mc_conv_table mc_conv_table_avx2;
extern const mc_conv_table mc_conv_table_avx512;
extern const mc_conv_table mc_conv_table_avx512bf16;

#endif
