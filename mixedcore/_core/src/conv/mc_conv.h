/* Convolutions over channels-last images: the level kernels and the drivers (the window
 * geometry, shared with pooling, is mc_conv_geom.h; pooling is its own family, pool/).
 *
 * Design:
 *   a. Every operation works on an input of N x H x W x C contiguous elements (a 1-D layer is
 *      H = 1) and writes N x OH x OW x F contiguous elements, in the geometry of
 *      mc_conv_geom.h: output pixel p = (n, oh, ow) reads input rows
 *      ih = oh * sh - pt + i * dh and columns iw = ow * sw - pl + j * dw for the kernel taps
 *      (i, j); taps outside the input are padding.
 *   b. Convolution is a matrix product: row p of the im2col matrix holds, for the channels
 *      [c0, c0 + cg) of one group, the taps in row-major order (i, j) with cg channels each
 *      (k = (i * KW + j) * cg + c), zeros for padding -- the order of Keras's kernel
 *      (KH, KW, C / groups, F) flattened to (KH * KW * C / groups, F).  mc_conv_gemm() runs
 *      the product on the GEMM's level kernels (mc_gemm.h) with the weights packed ahead by
 *      mc_gemm_pack(), without forming the matrix: each participant takes bands of output
 *      pixels, and for each K block copies the im2col rows of one micro-tile into a small
 *      buffer of its own (in cache) and packs them for the micro-kernel.  The blocking over K
 *      and the kernels are the GEMM's, so the result equals kernels.matmul of the im2col
 *      matrix with the same packed weights, bit for bit (tests/test_conv.py).
 *   c. Depthwise convolution has kernels per level (mc_conv_table) over a run of output pixels
 *      of one row whose tap lists are one list of valid taps (byte offsets, made by the driver,
 *      so padding never reaches a kernel) shifted by the stride: the pixels away from the
 *      left and right edges run as one call, each edge pixel on its own.  The kernels sum in
 *      float32 (float64 for float64 data), tap by tap in the list's order, one fused
 *      multiply-add per step; the AVX-512 kernel takes four pixels at a time (four
 *      independent chains).  The scalar twins (mc_conv_scalar.h) are the specification and the
 *      vector kernels give the same bits.  The epilogue (bias, activation, rounding to the
 *      output type) is the driver's, once per output row, the same at every level.
 *   d. Backward helpers: im2col of whole bands (for the weight gradient's product) and col2im,
 *      the scatter-add of an im2col-shaped gradient into the input's gradient, image by image
 *      (each image's pixels are summed in one fixed order, whatever the threads do).
 */
#ifndef MC_CONV_H_
#define MC_CONV_H_

#include <stdint.h>
#include "mc_conv_kernels.h"
#include "mc_gemm.h"                 /* mc_packed */

/* --- drivers ----------------------------------------------------------------------------------- */

/* MC_CONV_TOOBIG: a work buffer whose size overflows or exceeds MC_BYTES_MAX, or a geometry
 * whose counts do not fit the kernels' types (mc_checked.h; nothing is written). */
enum { MC_CONV_OK = 0, MC_CONV_NOMEM = -1, MC_CONV_FORMAT = -2, MC_CONV_TOOBIG = -3 };

typedef struct {
    mc_conv_geom geo;
    int64_t groups, f;           /* F filters, F / groups per group */
    const char *x;
    int x_type;                  /* MC_F16 / MC_BF16 / MC_F32 */
    const mc_packed *const *w;   /* per group: (KH * KW * C / groups) x (F / groups) */
    char *out;                   /* N x OH x OW x F */
    int out_type;                /* MC_F16 / MC_BF16 / MC_F32 */
    const float *bias;           /* F values, or NULL */
    int act;                     /* MC_ACT_* */
    const char *res;             /* N x OH x OW x F of out_type added before the activation
                                    (mc_gemm.c, design i), or NULL */
} mc_conv_call;

/* Design b.  MC_CONV_FORMAT: a packed weight whose panels the current level cannot use (nothing
 * is written then). */
int mc_conv_gemm(const mc_conv_call *call);

/* Design b, d: rows [r0, r1) of the im2col matrix of the channels [c0, c0 + cg) of x (es-byte
 * elements, any type), columns [k0, k1), into dst (rows ldd bytes apart); padding is zero. */
void mc_conv_im2col_rows(const mc_conv_geom *g, const char *x, int es, int64_t c0, int64_t cg,
                         int64_t r0, int64_t r1, int64_t k0, int64_t k1, char *dst, int64_t ldd);
/* The whole im2col matrix (N * OH * OW rows, KH * KW * cg columns), on the team. */
void mc_conv_im2col(const mc_conv_geom *g, const char *x, int es, int64_t c0, int64_t cg,
                    char *dst);
/* dx[n, ih, iw, c0 + c] += src[p, k] for every tap of every output pixel (design d); src and dx
 * float32 (type MC_F32) or float64 (MC_F64); dx has g's input shape. */
void mc_conv_col2im(const mc_conv_geom *g, const char *src, int type, int64_t c0, int64_t cg,
                    char *dx);

typedef struct {
    mc_conv_geom geo;
    int64_t mult;                /* depth multiplier */
    const char *x;
    int x_type;                  /* MC_F16 / MC_BF16 / MC_F32 / MC_F64 */
    const void *w;               /* mult x KH x KW x C, float (double for MC_F64) */
    char *out;                   /* N x OH x OW x (C * mult), channel ch * mult + m */
    int out_type;                /* MC_F16 / MC_BF16 / MC_F32; MC_F64 with MC_F64 x */
    const void *bias;            /* C * mult values (float; double for MC_F64), or NULL */
    int act;                     /* MC_ACT_*; MC_ACT_NONE for MC_F64 */
} mc_dw_call;
int mc_conv_depthwise(const mc_dw_call *call);

#endif
