/* Pooling over channels-last images (max and average, and their gradient): the level kernels
 * and the drivers.
 *
 * Design:
 *   a. The window geometry is the convolution's (mc_conv_geom.h): an input of N x H x W x C
 *      contiguous elements (a 1-D layer is H = 1), an output of N x OH x OW x C, the window's
 *      taps at rows ih = oh * sh - pt + i and columns iw = ow * sw - pl + j (no dilation);
 *      taps outside the input are padding.
 *   b. The level kernels (mc_pool_table) take one output pixel at a time, all channels, over
 *      a list of valid taps (byte offsets) made by the driver, so padding never reaches a
 *      kernel.  The sum runs in float32 (float64 for float64 data), tap by tap in the list's
 *      order from the first tap's value, one addition per step; the maximum compares in the
 *      same order; the scalar twins (mc_pool_scalar.h) are the specification and the vector
 *      kernels give the same bits.  The division of an average by its number of valid taps
 *      and the rounding to the output type are the driver's, the same at every level.
 *   c. The gradient routes dy to the first maximum of each window (the one the forward pass
 *      took), or spreads dy / taps over the valid taps; image by image, so each sum into the
 *      input's gradient is taken in one order whatever the threads do.
 */
#ifndef MC_POOL_H_
#define MC_POOL_H_

#include <stdint.h>
#include "mc_pool_kernels.h"

/* --- drivers ----------------------------------------------------------------------------------- */

/* MC_POOL_TOOBIG: a tap list or sum buffer whose size overflows or exceeds MC_BYTES_MAX
 * (mc_checked.h; nothing is written). */
enum { MC_POOL_OK = 0, MC_POOL_NOMEM = -1, MC_POOL_TOOBIG = -2 };

typedef struct {
    mc_conv_geom geo;            /* kh, kw: pool size; dh = dw = 1 */
    int op;                      /* MC_POOL_MAX or MC_POOL_SUM (average: sum / valid taps) */
    const char *x;
    int x_type;                  /* MC_F16 / MC_BF16 / MC_F32 / MC_F64 */
    char *out;                   /* N x OH x OW x C, of x's type */
} mc_pool_call;
/* Max or average pooling (design b). */
int mc_pool(const mc_pool_call *call);
/* Gradient of mc_pool (design c): dx (float32, or float64 for MC_F64 x; zeroed by the caller)
 * += dy (N x OH x OW x C of the same float type) routed to the first maximum of each window,
 * or spread as dy / taps over the valid taps. */
int mc_pool_grad(const mc_pool_call *call, const char *dy, char *dx);

#endif
