/* Generic (portable C) level of the depthwise kernels (the drivers are in mc_conv.c; the
 * convolution's products run on the GEMM's kernels).
 *
 * Design:
 *   a. The generic kernels are the scalar twins of mc_conv_scalar.h over all channels: the
 *      specification the vector kernels are tested against.
 */
#include "mc_conv_kernels.h"
#include "mc_conv_scalar.h"

static void mc_dw_generic_(const char *x, int type, const int64_t *xoff, int64_t pstride,
                           int64_t npix, const void *w, const int64_t *woff, int ntaps,
                           int64_t c, int64_t mult, int64_t wm, void *acc)
{
    mc_dw_pixels_scalar_(x, type, xoff, pstride, npix, w, woff, ntaps, c, mult, wm, acc);
}

const mc_conv_table mc_conv_table_generic = {.dw = mc_dw_generic_};
