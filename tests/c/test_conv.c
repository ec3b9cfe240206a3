/* The convolution family's drivers at every level and 1 or 3 threads:
 *   - mc_conv_depthwise against the scalar twins of mc_conv_scalar.h run pixel by pixel over
 *     the same tap lists, with the driver's epilogue (bias, activation, rounding), bit for bit
 *     (mc_conv.h design c);
 *   - mc_conv_gemm bit for bit against mc_gemm of the explicit im2col matrix (mc_conv_im2col)
 *     with the same packed weights (mc_conv.h design b), and within the documented bound
 *     2 * K * 2**-24 * (|im2col(x)| @ |w|) of the float64 product (docs/conv.md, "Numerics").
 * Geometries (ctest_window.h) cover 1 x 1 images, padding on every side, strides, dilation,
 * groups, channel counts that leave vector tails, and calls above the threading thresholds. */
#include "ctest_extra.h"
#include "ctest_window.h"
#include "mc_act_scalar.h"
#include "mc_conv.h"
#include "mc_conv_scalar.h"
#include "mc_gemm.h"

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
                        mcx_store(ref, ot, o, mc_act_scalar_f32_(mc_act_for_output(act, ot), s));
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
        /* as pack_conv packs: K in one block for a kernel wider than a pixel, the weights
         * (finite) marked so, so that the windows are cut to the image (mc_conv.c, design h) */
        const int64_t kc_min = g.kh * g.kw > 1 && kdim <= 8192 ? kdim : 0;
        MCX_CHECK(mc_gemm_pack(w + gr * fg * es, f * es, es, xt, kdim, fg, kc_min, &pk[gr]) ==
                      MC_GEMM_OK,
                  "pack status");
        pk[gr].finite = 1;
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
    static const int acts[] = {MC_ACT_NONE, MC_ACT_RELU, MC_ACT_GELU, MC_ACT_TANH, MC_ACT_RELU6,
                               MC_ACT_SILU};
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
