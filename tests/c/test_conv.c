/* The convolution family's drivers at every level and 1 or 3 threads:
 *   - mc_conv_depthwise and mc_conv_pool against the scalar twins of mc_conv_scalar.h run pixel
 *     by pixel over the same tap lists, with the drivers' epilogue (bias, activation, rounding;
 *     the division of an average), bit for bit (mc_conv.h design c);
 *   - mc_conv_pool_grad against the same routing written out here, bit for bit;
 *   - mc_conv_gemm bit for bit against mc_gemm of the explicit im2col matrix (mc_conv_im2col)
 *     with the same packed weights (mc_conv.h design b), and within the documented bound
 *     2 * K * 2**-24 * (|im2col(x)| @ |w|) of the float64 product (docs/conv.md, "Numerics").
 * Geometries cover 1 x 1 images, padding on every side, strides, dilation, groups, channel
 * counts that leave vector tails, and calls above the threading thresholds. */
#include "ctest_extra.h"
#include "mc_act_scalar.h"
#include "mc_conv.h"
#include "mc_conv_scalar.h"
#include "mc_gemm.h"

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

/* --- depthwise ----------------------------------------------------------------------------------- */

static void check_depthwise(const geo_in_ *gi, int xt, int ot, int64_t mult, int bias_on, int act)
{
    const mc_conv_geom g = geom_(gi);
    const int f64 = xt == MC_F64;
    const int64_t es = mcx_elem_size(xt), oes = mcx_elem_size(ot), ves = f64 ? 8 : 4;
    const int64_t nx = g.n * g.h * g.w * g.c, ntap = g.kh * g.kw, cm = g.c * mult;
    const int64_t no = g.n * g.oh * g.ow * cm;
    char *x = mcx_alloc((size_t)(nx * es)), *w = mcx_alloc((size_t)(mult * ntap * g.c * ves));
    char *bias = bias_on ? mcx_alloc((size_t)(cm * ves)) : NULL;
    char *out = mcx_alloc((size_t)(no * oes) + 64), *ref = mcx_alloc((size_t)(no * oes) + 64);
    fill_any_(x, xt, nx, 2.0);
    fill_any_(w, f64 ? MC_F64 : MC_F32, mult * ntap * g.c, 1.0);
    if (bias)
        fill_any_(bias, f64 ? MC_F64 : MC_F32, cm, 1.0);
    const mc_dw_call call = {.geo = g, .mult = mult, .x = x, .x_type = xt, .w = w, .out = out,
                             .out_type = ot, .bias = bias, .act = f64 ? MC_ACT_NONE : act};
    char where[160];
    describe_(&g, "depthwise", xt, ot, where, sizeof where);
    mcx_case(where);
    MCX_CHECK(mc_conv_depthwise(&call) == MC_CONV_OK, "status");

    int64_t *xoff = mcx_alloc((size_t)ntap * 8), *woff = mcx_alloc((size_t)ntap * 8);
    char *acc = mcx_alloc((size_t)(cm * ves));
    for (int64_t n = 0; n < g.n; ++n)
        for (int64_t oh = 0; oh < g.oh; ++oh)
            for (int64_t ow = 0; ow < g.ow; ++ow) {
                const int nt = taps_(&g, oh, ow, es, xoff, woff);
                for (int t = 0; t < nt; ++t)
                    woff[t] *= g.c;
                mc_dw_scalar_(x + n * g.h * g.w * g.c * es, xt, xoff, w, woff, nt, 0, g.c, g.c,
                              mult, ntap * g.c, acc);
                const int64_t p = (n * g.oh + oh) * g.ow + ow;
                for (int64_t ch = 0; ch < g.c; ++ch)
                    for (int64_t m = 0; m < mult; ++m) {
                        const int64_t o = p * cm + ch * mult + m;
                        if (f64) {
                            double s = ((double *)acc)[m * g.c + ch];
                            if (bias)
                                s += ((double *)bias)[ch * mult + m];
                            memcpy(ref + o * 8, &s, 8);
                            continue;
                        }
                        float s = ((float *)acc)[m * g.c + ch];
                        if (bias)
                            s += ((float *)bias)[ch * mult + m];
                        mcx_store(ref, ot, o, mc_act_scalar_f32_(act, s));
                    }
            }
    same_bits_(out, ref, ot, no);
    MCX_CHECK(mcx_untouched(out, (size_t)(no * oes), (size_t)(no * oes) + 64),
              "wrote past the end");
    free(xoff);
    free(woff);
    free(acc);
    free(x);
    free(w);
    free(bias);
    free(out);
    free(ref);
}

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
    MCX_CHECK(mc_conv_pool(&call) == MC_CONV_OK, "status");

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
    MCX_CHECK(mc_conv_pool_grad(&call, dy, dx) == MC_CONV_OK, "status");
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

/* --- convolution as a product -------------------------------------------------------------------- */

static void check_conv_gemm(const geo_in_ *gi, int xt, int ot, int64_t groups, int64_t f,
                            int bias_on, int act)
{
    const mc_conv_geom g = geom_(gi);
    const int64_t es = mcx_elem_size(xt), oes = mcx_elem_size(ot);
    const int64_t cg = g.c / groups, fg = f / groups, kdim = g.kh * g.kw * cg;
    const int64_t nx = g.n * g.h * g.w * g.c, m = g.n * g.oh * g.ow, no = m * f;
    char *x = mcx_alloc((size_t)(nx * es)), *w = mcx_alloc((size_t)(kdim * f * es));
    float *bias = bias_on ? mcx_alloc((size_t)f * 4) : NULL;
    char *out = mcx_alloc((size_t)(no * oes) + 64), *ref = mcx_alloc((size_t)(no * oes) + 64);
    fill_any_(x, xt, nx, 2.0);
    fill_any_(w, xt, kdim * f, 1.0);
    if (bias)
        mcx_fill(bias, f, 1.0, 0);
    char where[160];
    describe_(&g, "conv_gemm", xt, ot, where, sizeof where);
    mcx_case(where);
    mc_packed *pk = mcx_alloc((size_t)groups * sizeof(mc_packed));
    const mc_packed **pw = mcx_alloc((size_t)groups * sizeof(void *));
    for (int64_t gr = 0; gr < groups; ++gr) {
        memset(&pk[gr], 0, sizeof pk[gr]);
        /* group gr's weights: the (K, F) kernel's columns [gr * fg, (gr + 1) * fg) */
        MCX_CHECK(mc_gemm_pack(w + gr * fg * es, f * es, es, xt, kdim, fg, &pk[gr]) == MC_GEMM_OK,
                  "pack status");
        pw[gr] = &pk[gr];
    }
    const mc_conv_call call = {.geo = g, .groups = groups, .f = f, .x = x, .x_type = xt,
                               .w = pw, .out = out, .out_type = ot, .bias = bias, .act = act};
    MCX_CHECK(mc_conv_gemm(&call) == MC_CONV_OK, "status");
    MCX_CHECK(mcx_untouched(out, (size_t)(no * oes), (size_t)(no * oes) + 64),
              "wrote past the end");

    /* the product of the explicit im2col matrix with the same packed weights */
    char *cols = mcx_alloc((size_t)(m * kdim * es) + 1);
    for (int64_t gr = 0; gr < groups; ++gr) {
        mc_conv_im2col(&g, x, (int)es, gr * cg, cg, cols);
        mc_gemm_call gc;
        memset(&gc, 0, sizeof gc);
        gc.g.m = m;
        gc.g.n = fg;
        gc.g.k = kdim;
        gc.g.a = cols;
        gc.g.a_rs = kdim * es;
        gc.g.a_cs = es;
        gc.g.a_type = xt;
        gc.g.b_type = xt;
        gc.g.out = ref + gr * fg * oes;
        gc.g.o_rs = f * oes;
        gc.g.o_cs = oes;
        gc.g.out_type = ot;
        gc.g.bias = bias != NULL ? bias + gr * fg : NULL;
        gc.g.bias_s = 4;
        gc.g.act = act;
        gc.alpha = 1.0;
        gc.beta = 0.0;
        gc.batch = 1;
        gc.packed = &pk[gr];
        MCX_CHECK(mc_gemm(&gc) == MC_GEMM_OK, "gemm status");
    }
    same_bits_(out, ref, ot, no);

    /* the documented bound, for float32 results without bias and activation */
    if (ot == MC_F32 && bias == NULL && act == MC_ACT_NONE) {
        int64_t *xoff = mcx_alloc((size_t)(g.kh * g.kw) * 8), *tap = mcx_alloc((size_t)(g.kh * g.kw) * 8);
        int bad = 0;
        for (int64_t p = 0; p < m && bad < 3; ++p) {
            const int64_t n = p / (g.oh * g.ow), oh = p / g.ow % g.oh, ow = p % g.ow;
            const int nt = taps_(&g, oh, ow, es, xoff, tap);
            const char *img = x + n * g.h * g.w * g.c * es;
            for (int64_t j = 0; j < f && bad < 3; ++j) {
                const int64_t gr = j / fg;
                double s = 0.0, mag = 0.0;
                for (int t = 0; t < nt; ++t)
                    for (int64_t c = 0; c < cg; ++c) {
                        const double a = mcx_load(img + xoff[t], xt, gr * cg + c);
                        const double b = mcx_load(w, xt, (tap[t] * cg + c) * f + j);
                        s += a * b;
                        mag += fabs(a * b);
                    }
                const double got = ((float *)out)[p * f + j];
                if (fabs(got - s) > 2.0 * (double)kdim * ldexp(1.0, -24) * mag) {
                    MCX_FAIL("out[%lld, %lld] = %.9g, the float64 product %.17g, beyond the bound",
                             (long long)p, (long long)j, got, s);
                    ++bad;
                }
            }
        }
        ++mcx_checks_;
        free(xoff);
        free(tap);
    }
    for (int64_t gr = 0; gr < groups; ++gr)
        mc_gemm_packed_free(&pk[gr]);
    free(pk);
    free(pw);
    free(cols);
    free(x);
    free(w);
    free(bias);
    free(out);
    free(ref);
}

int main(void)
{
    int levels[MC_ISA_COUNT];
    mcx_begin();
    const int nl = mcx_levels(levels);
    static const int threads[] = {1, 3};
    static const int types[] = {MC_F16, MC_BF16, MC_F32, MC_F64};
    static const int acts[] = {MC_ACT_NONE, MC_ACT_RELU, MC_ACT_GELU, MC_ACT_TANH};
    const int ng = (int)(sizeof geos_ / sizeof geos_[0]);
    for (int li = 0; li < nl; ++li)
        for (int ti = 0; ti < 2; ++ti) {
            mcx_use(levels[li], threads[ti]);
            mcx_seed(71);
            for (int gi = 0; gi < ng; ++gi) {
                for (int t = 0; t < 4; ++t) {
                    const int xt = types[t];
                    const int ot = xt == MC_F64 ? MC_F64 : types[(t + gi) % 3];
                    check_depthwise(&geos_[gi], xt, ot, 1 + gi % 2, gi % 3 != 0, acts[gi % 4]);
                    check_pool(&geos_[gi], xt, MC_POOL_MAX);
                    check_pool(&geos_[gi], xt, MC_POOL_SUM);
                }
                for (int t = 0; t < 3; ++t) {
                    const int xt = types[t];
                    const int64_t c = geos_[gi].c;
                    const int64_t groups = c % 2 == 0 && gi % 2 == 1 ? 2 : 1;
                    /* float32 without epilogue (the bound), then another output with one */
                    check_conv_gemm(&geos_[gi], xt, MC_F32, groups, groups * (3 + gi * 3), 0,
                                    MC_ACT_NONE);
                    check_conv_gemm(&geos_[gi], xt, types[(t + 1) % 3], groups,
                                    groups * (5 + gi), 1, acts[1 + gi % 3]);
                }
            }
        }
    return mcx_end("test_conv");
}
