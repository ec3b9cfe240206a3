/* The pooling family's drivers at every level and 1 or 3 threads:
 *   - mc_pool against the scalar twins of mc_pool_scalar.h run pixel by pixel over the same tap
 *     lists, with the driver's division of an average and rounding, bit for bit (mc_pool.h
 *     design b), over repeated values and NaN;
 *   - mc_pool_grad against the same routing written out here, bit for bit (mc_pool.h design c).
 * Geometries (ctest_window.h) cover 1 x 1 images, padding on every side, windows of padding
 * alone, strides, channel counts that leave vector tails, and calls above the threading
 * thresholds; the dilation of the convolution geometries is dropped. */
#include "ctest_extra.h"
#include "ctest_window.h"
#include "mc_pool.h"
#include "mc_pool_scalar.h"

/* --- pooling ------------------------------------------------------------------------------------- */

static void check_pool(const geo_in_ *gi, int xt, int op)
{
    geo_in_ pg = *gi;
    pg.dh = pg.dw = 1;
    const mc_conv_geom g = geom_(&pg);
    const int f64 = xt == MC_F64;
    const int64_t es = mcx_elem_size(xt), ges = f64 ? 8 : 4;
    const int64_t nx = g.n * g.h * g.w * g.c, no = g.n * g.oh * g.ow * g.c, ntap = g.kh * g.kw;
    char *x = mcx_alloc((size_t)(nx * es));
    char *out = mcx_alloc((size_t)(no * es) + 64), *ref = mcx_alloc((size_t)(no * es) + 64);
    fill_any_(x, xt, nx, 4.0);
    /* a few repeated values and NaN, for the maximum's choice among equals and NaN */
    for (int64_t i = 0; i + 7 < nx; i += 7)
        memcpy(x + (i + 3) * es, x + i * es, (size_t)es);
    if (nx > 40 && !f64)
        mcx_store(x, xt, 40, NAN);
    const mc_pool_call call = {.geo = g, .op = op, .x = x, .x_type = xt, .out = out};
    char where[160];
    describe_(&g, op == MC_POOL_MAX ? "max_pool" : "avg_pool", xt, xt, where, sizeof where);
    mcx_case(where);
    MCX_CHECK(mc_pool(&call) == MC_POOL_OK, "status");

    int64_t *xoff = mcx_alloc((size_t)ntap * 8), *tap = mcx_alloc((size_t)ntap * 8);
    char *acc = mcx_alloc((size_t)(g.c * 8));
    for (int64_t n = 0; n < g.n; ++n)
        for (int64_t oh = 0; oh < g.oh; ++oh)
            for (int64_t ow = 0; ow < g.ow; ++ow) {
                const int nt = taps_(&g, oh, ow, es, xoff, tap);
                const int64_t p = (n * g.oh + oh) * g.ow + ow;
                char *o = ref + p * g.c * es;
                const char *img = x + n * g.h * g.w * g.c * es;
                if (nt == 0) {
                    memset(o, 0, (size_t)(g.c * es));
                    continue;
                }
                if (op == MC_POOL_MAX) {
                    mc_pool_scalar_(img, xt, xoff, nt, 0, g.c, MC_POOL_MAX, o);
                    continue;
                }
                mc_pool_scalar_(img, xt, xoff, nt, 0, g.c, MC_POOL_SUM, acc);
                for (int64_t ch = 0; ch < g.c; ++ch) {
                    if (f64) {
                        const double v = ((double *)acc)[ch] / (double)nt;
                        memcpy(o + ch * 8, &v, 8);
                    } else {
                        mcx_store(o, xt, ch, ((float *)acc)[ch] / (float)nt);
                    }
                }
            }
    same_bits_(out, ref, xt, no);
    MCX_CHECK(mcx_untouched(out, (size_t)(no * es), (size_t)(no * es) + 64), "wrote past the end");

    /* the gradient: dy routed to the first maximum, or spread as dy / taps */
    describe_(&g, op == MC_POOL_MAX ? "max_pool_grad" : "avg_pool_grad", xt, f64 ? MC_F64 : MC_F32,
              where, sizeof where);
    mcx_case(where);
    char *dy = mcx_alloc((size_t)(no * ges)), *dx = mcx_alloc((size_t)(nx * ges));
    char *dx_ref = mcx_alloc((size_t)(nx * ges));
    fill_any_(dy, f64 ? MC_F64 : MC_F32, no, 1.0);
    memset(dx, 0, (size_t)(nx * ges));
    memset(dx_ref, 0, (size_t)(nx * ges));
    MCX_CHECK(mc_pool_grad(&call, dy, dx) == MC_POOL_OK, "status");
    for (int64_t n = 0; n < g.n; ++n)
        for (int64_t oh = 0; oh < g.oh; ++oh)
            for (int64_t ow = 0; ow < g.ow; ++ow) {
                const int nt = taps_(&g, oh, ow, es, xoff, tap);
                const int64_t p = (n * g.oh + oh) * g.ow + ow;
                const char *img = x + n * g.h * g.w * g.c * es;
                char *dimg = dx_ref + n * g.h * g.w * g.c * ges;
                for (int64_t ch = 0; ch < g.c && nt > 0; ++ch) {
                    if (op == MC_POOL_SUM) {
                        for (int t = 0; t < nt; ++t) {
                            char *at = dimg + xoff[t] / es * ges + ch * ges;
                            if (f64)
                                *(double *)at += ((double *)dy)[p * g.c + ch] / (double)nt;
                            else
                                *(float *)at += ((float *)dy)[p * g.c + ch] / (float)nt;
                        }
                        continue;
                    }
                    /* the winner of the forward pass: its bits are in out */
                    int best = 0;
                    double m = 0.0;
                    for (int t = 0; t < nt; ++t) {
                        double v;
                        if (f64)
                            memcpy(&v, img + xoff[t] + ch * es, 8);
                        else
                            v = mcx_load(img + xoff[t], xt, ch);
                        if (t == 0 || v > m || (v != v && m == m)) {
                            m = v;
                            best = t;
                        }
                    }
                    char *at = dimg + xoff[best] / es * ges + ch * ges;
                    if (f64)
                        *(double *)at += ((double *)dy)[p * g.c + ch];
                    else
                        *(float *)at += ((float *)dy)[p * g.c + ch];
                }
            }
    same_bits_(dx, dx_ref, f64 ? MC_F64 : MC_F32, nx);
    free(dy);
    free(dx);
    free(dx_ref);
    free(xoff);
    free(tap);
    free(acc);
    free(x);
    free(out);
    free(ref);
}

/* channel counts the shared geometries miss: three vectors, and four then a remainder (the
 * AVX-512 kernel reduces up to four vectors side by side) */
static const geo_in_ wide_[] = {
    {1, 6, 5, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
    {2, 5, 6, 100, 3, 2, 1, 2, 1, 1, 0, 1, 1, 0},
};

int main(void)
{
    int levels[MC_ISA_COUNT];
    mcx_begin();
    const int nl = mcx_levels(levels);
    static const int threads[] = {1, 3};
    static const int types[] = {MC_F16, MC_BF16, MC_F32, MC_F64};
    const int ng = (int)(sizeof geos_ / sizeof geos_[0]);
    for (int li = 0; li < nl; ++li)
        for (int ti = 0; ti < 2; ++ti) {
            mcx_use(levels[li], threads[ti]);
            mcx_seed(71);
            for (int gi = 0; gi < ng; ++gi)
                for (int t = 0; t < 4; ++t) {
                    check_pool(&geos_[gi], types[t], MC_POOL_MAX);
                    check_pool(&geos_[gi], types[t], MC_POOL_SUM);
                }
            for (int gi = 0; gi < (int)(sizeof wide_ / sizeof wide_[0]); ++gi)
                for (int t = 0; t < 4; ++t) {
                    check_pool(&wide_[gi], types[t], MC_POOL_MAX);
                    check_pool(&wide_[gi], types[t], MC_POOL_SUM);
                }
        }
    return mcx_end("test_pool");
}
