/* The window geometry of convolution and pooling over channels-last images (design a of
 * mc_conv.h), and the helpers both families' drivers and scalar twins use on it.
 *
 * Design:
 *   a. An input of N x H x W x C contiguous elements (a 1-D layer is H = 1) gives an output of
 *      N x OH x OW x (filters, or C for pooling).  Output pixel p = (n, oh, ow) reads input rows
 *      ih = oh * sh - pt + i * dh and columns iw = ow * sw - pl + j * dw for the window's taps
 *      (i, j); taps outside the input are padding.
 *   b. mc_conv_taps_() lists the valid taps of one output pixel in row-major tap order, so
 *      padding never reaches a kernel (and an average counts only real pixels).
 *   c. Header-only (static inline): the convolution's and pooling's files each compile it.
 */
#ifndef MC_CONV_GEOM_H_
#define MC_CONV_GEOM_H_

#include <limits.h>
#include <stdint.h>
#include <string.h>
#include "mc_checked.h"
#include "mc_types.h"

typedef struct {
    int64_t n, h, w, c;          /* input, contiguous, channels last */
    int64_t kh, kw;              /* kernel (pool) size */
    int64_t sh, sw, dh, dw;      /* strides, dilation */
    int64_t pt, pl;              /* padding before the first row / column */
    int64_t oh, ow;              /* output size */
} mc_conv_geom;

/* Bytes per element of a type code. */
static inline int mc_conv_es_(int type)
{
    return type == MC_F64 ? 8 : type == MC_F32 ? 4 : 2;
}

static inline double mc_conv_load_f64_(const char *p)
{
    double d;
    memcpy(&d, p, 8);
    return d;
}

/* The most valid taps an output pixel can have: distinct taps of a window read distinct rows
 * and columns, so at most min(KH, H) x min(KW, W), however large the window, its padding or
 * its dilation; the size of a tap list (mc_conv_taps_), bounded by the image.  -1 when that is
 * above INT_MAX (mc_conv_taps_ counts in int): the drivers refuse such a geometry. */
static inline int64_t mc_conv_tap_max_(const mc_conv_geom *g)
{
    const int64_t r = mc_size_mul(g->kh < g->h ? g->kh : g->h, g->kw < g->w ? g->kw : g->w);
    return r > INT_MAX ? -1 : r;
}

/* The valid taps of output pixel (oh, ow) (design b): byte offsets into the image (es-byte
 * elements) and tap indices; returns their number, at most mc_conv_tap_max_(g). */
static inline int mc_conv_taps_(const mc_conv_geom *g, int64_t oh, int64_t ow, int64_t es,
                                int64_t *xoff, int64_t *tap)
{
    int nt = 0;
    const int64_t ih0 = oh * g->sh - g->pt, iw0 = ow * g->sw - g->pl;
    /* the taps inside the image, found without walking the window (which padding can make
     * far larger than the image) */
    const int64_t ilo = ih0 >= 0 ? 0 : (-ih0 + g->dh - 1) / g->dh;
    const int64_t ihi = ih0 >= g->h ? 0 : (g->h - ih0 + g->dh - 1) / g->dh;
    const int64_t jlo = iw0 >= 0 ? 0 : (-iw0 + g->dw - 1) / g->dw;
    const int64_t jhi = iw0 >= g->w ? 0 : (g->w - iw0 + g->dw - 1) / g->dw;
    for (int64_t i = ilo; i < g->kh && i < ihi; ++i) {
        const int64_t ih = ih0 + i * g->dh;
        for (int64_t j = jlo; j < g->kw && j < jhi; ++j) {
            const int64_t iw = iw0 + j * g->dw;
            xoff[nt] = (ih * g->w + iw) * g->c * es;
            tap[nt] = i * g->kw + j;
            ++nt;
        }
    }
    return nt;
}

#endif
