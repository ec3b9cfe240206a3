/* Generic (portable C) level of the weight-only quantized GEMM (the driver is mc_wgemm.c).
 *
 * Design: the kernels are the scalar twin's arithmetic (mc_wgemm_scalar.h) on the packed
 * format: one fmaf() per row (the correctly rounded library function in this baseline build),
 * the scale step in fmaf() or one division; -ffp-contract=off keeps every rounding where the
 * source puts it.
 */
#include <math.h>
#include <string.h>
#include "mc_wgemm_kernels.h"
#include "mc_wgemm_scalar.h"

static void mc_wgemm_dot_generic_(const mc_wpacked *w, const void *ap, int64_t lda, int mr,
                                  int64_t p0, int64_t np, float *tile, int64_t ldt)
{
    const float *a = (const float *)ap;
    const int64_t cols = w->panels * MC_WGEMM_NW;
    for (int64_t p = p0; p < p0 + np; ++p)
        for (int c = 0; c < MC_WGEMM_NW; ++c) {
            const int64_t col = p * MC_WGEMM_NW + c;
            for (int i = 0; i < mr; ++i) {
                const float *ai = a + i * lda;
                float t = 0.0f;
                for (int64_t g = 0; g < w->groups; ++g) {
                    float s = 0.0f;
                    for (int64_t R = g * w->kg; R < (g + 1) * w->kg; ++R)
                        s = fmaf(ai[R], mc_wgemm_weight_(w, g, p, R, c), s);
                    const float sc = w->scale[g * cols + col];
                    t = w->grouped ? fmaf(s, sc, t) : s / sc;
                }
                tile[i * ldt + (p - p0) * MC_WGEMM_NW + c] = t;
            }
        }
}

static void mc_wgemm_widen_generic_(const mc_wpacked *w, int64_t g, int64_t r0, int64_t rows,
                                    int64_t p0, int np, int nr, float *dst)
{
    for (int64_t R = r0; R < r0 + rows; ++R) {
        float *d = dst + (R - r0) * nr;
        for (int j = 0; j < nr; ++j)
            d[j] = j < np * MC_WGEMM_NW
                       ? mc_wgemm_weight_(w, g, p0 + j / MC_WGEMM_NW, R, j % MC_WGEMM_NW)
                       : 0.0f;
    }
}

static void mc_wgemm_combine_generic_(const float *tile, int64_t ldt, int mr, int nc,
                                      const float *scale, float *tot, int64_t ldo, int mode)
{
    for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nc; ++j) {
            const float s = tile[i * ldt + j];
            float *t = tot + i * ldo + j;
            *t = mode == MC_WGEMM_DIV ? s / scale[j]
                                      : fmaf(s, scale[j], mode == MC_WGEMM_FIRST ? 0.0f : *t);
        }
}

const mc_wgemm_table mc_wgemm_table_generic = {
    .dot = mc_wgemm_dot_generic_,
    .dot_bf16 = NULL,
    .widen = mc_wgemm_widen_generic_,
    .combine = mc_wgemm_combine_generic_,
};
