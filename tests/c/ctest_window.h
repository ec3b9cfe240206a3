/* Window geometries and helpers shared by the C test programs of convolution and pooling
 * (test_conv.c, test_pool.c): the geometries both run, their valid taps written out again
 * (independently of mc_conv_geom.h), case descriptions, bit-for-bit comparison and filling.
 * Header-only (static functions), after ctest_extra.h.
 */
#ifndef MCX_CTEST_WINDOW_H_
#define MCX_CTEST_WINDOW_H_

#include "ctest_extra.h"
#include "mc_conv_geom.h"

typedef struct {
    int64_t n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pb, pl, pr;
} geo_in_;

static const geo_in_ geos_[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
    {2, 7, 9, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
    {1, 13, 11, 17, 3, 3, 1, 1, 2, 2, 0, 0, 0, 0},
    {2, 11, 8, 6, 3, 2, 2, 2, 1, 1, 1, 1, 0, 1},
    {2, 10, 9, 3, 5, 4, 2, 3, 1, 2, 2, 2, 3, 2},
    {1, 3, 3, 5, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2},      /* windows of padding alone */
    {2, 16, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* above the thresholds */
    {1, 10, 10, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* K = 576: more than one K block */
};

static mc_conv_geom geom_(const geo_in_ *g)
{
    mc_conv_geom r = {.n = g->n, .h = g->h, .w = g->w, .c = g->c, .kh = g->kh, .kw = g->kw,
                      .sh = g->sh, .sw = g->sw, .dh = g->dh, .dw = g->dw, .pt = g->pt,
                      .pl = g->pl};
    r.oh = (g->h + g->pt + g->pb - ((g->kh - 1) * g->dh + 1)) / g->sh + 1;
    r.ow = (g->w + g->pl + g->pr - ((g->kw - 1) * g->dw + 1)) / g->sw + 1;
    return r;
}

/* The valid taps of output pixel (oh, ow), row-major: byte offsets into the image (elements of
 * es bytes) and tap indices i * kw + j. */
static int taps_(const mc_conv_geom *g, int64_t oh, int64_t ow, int64_t es, int64_t *xoff,
                 int64_t *tap)
{
    int nt = 0;
    for (int64_t i = 0; i < g->kh; ++i) {
        const int64_t ih = oh * g->sh - g->pt + i * g->dh;
        if (ih < 0 || ih >= g->h)
            continue;
        for (int64_t j = 0; j < g->kw; ++j) {
            const int64_t iw = ow * g->sw - g->pl + j * g->dw;
            if (iw < 0 || iw >= g->w)
                continue;
            xoff[nt] = (ih * g->w + iw) * g->c * es;
            tap[nt++] = i * g->kw + j;
        }
    }
    return nt;
}

static void describe_(const mc_conv_geom *g, const char *op, int xt, int ot, char *buf, size_t n)
{
    snprintf(buf, n, "%s %lldx%lldx%lldx%lld k%lldx%lld s%lld,%lld d%lld,%lld p%lld,%lld %s -> %s",
             op, (long long)g->n, (long long)g->h, (long long)g->w, (long long)g->c,
             (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->sw,
             (long long)g->dh, (long long)g->dw, (long long)g->pt, (long long)g->pl,
             mcx_type_name(xt), mcx_type_name(ot));
}

/* Compares two arrays of `count` elements of `type` bit for bit; reports the first few. */
static void same_bits_(const char *got, const char *want, int type, int64_t count)
{
    const int64_t es = mcx_elem_size(type);
    ++mcx_checks_;
    if (memcmp(got, want, (size_t)(count * es)) == 0)
        return;
    int bad = 0;
    for (int64_t i = 0; i < count && bad < 3; ++i)
        if (memcmp(got + i * es, want + i * es, (size_t)es) != 0) {
            double a, b;
            if (type == MC_F64) {
                memcpy(&a, got + i * es, 8);
                memcpy(&b, want + i * es, 8);
            } else {
                a = mcx_load(got, type, i);
                b = mcx_load(want, type, i);
            }
            MCX_FAIL("element %lld is %a, the reference %a", (long long)i, a, b);
            ++bad;
        }
}

/* Fills n elements of `type` (float64 too). */
static void fill_any_(char *p, int type, int64_t n, double scale)
{
    if (type == MC_F64) {
        for (int64_t i = 0; i < n; ++i) {
            const double v = mcx_uniform(-scale, scale);
            memcpy(p + i * 8, &v, 8);
        }
    } else {
        mcx_fill_typed(p, type, n, scale, 0);
    }
}

#endif
