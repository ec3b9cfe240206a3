/* Scalar twins of the pooling kernels (mc_pool.h, design b): the specification the vector
 * kernels are tested against, and what they run for the channels a vector does not cover.
 *
 * Design:
 *   a. The maximum compares the float values and keeps the bit pattern of the winner: v
 *      replaces m when v > m, or when v is NaN and m is not, so the result is always one of the
 *      inputs (the first NaN met, payload and all; the first of equal values, so +0 and -0 keep
 *      their order).  The sum adds the float values in tap order, starting from the first.
 *   b. Header-only (static inline), so each level's file compiles the twins with its flags.
 */
#ifndef MC_POOL_SCALAR_H_
#define MC_POOL_SCALAR_H_

#include <stdint.h>
#include <string.h>
#include "mc_conv_geom.h"
#include "mc_gemm_scalar.h"          /* mc_gemm_load_elem_ */
#include "mc_pool_kernels.h"

/* Channels [c0, c1) of the pooling kernel (mc_pool_fn).  The maximum writes x's bit patterns
 * into acc (es bytes each); the sum writes float (double for float64). */
static inline void mc_pool_scalar_(const char *x, int type, const int64_t *xoff, int ntaps,
                                   int64_t c0, int64_t c1, int op, void *acc)
{
    const int64_t es = mc_conv_es_(type);
    for (int64_t ch = c0; ch < c1; ++ch) {
        const char *best = x + xoff[0] + ch * es;
        if (type == MC_F64) {
            double m = mc_conv_load_f64_(best);
            for (int t = 1; t < ntaps; ++t) {
                const char *p = x + xoff[t] + ch * es;
                const double v = mc_conv_load_f64_(p);
                if (op == MC_POOL_SUM) {
                    m += v;
                } else if (v > m || (v != v && m == m)) {
                    m = v;
                    best = p;
                }
            }
            if (op == MC_POOL_SUM)
                ((double *)acc)[ch] = m;
            else
                memcpy((char *)acc + ch * es, best, 8);
            continue;
        }
        float m = mc_gemm_load_elem_(best, type);
        for (int t = 1; t < ntaps; ++t) {
            const char *p = x + xoff[t] + ch * es;
            const float v = mc_gemm_load_elem_(p, type);
            if (op == MC_POOL_SUM) {
                m += v;
            } else if (v > m || (v != v && m == m)) {
                m = v;
                best = p;
            }
        }
        if (op == MC_POOL_SUM)
            ((float *)acc)[ch] = m;
        else
            memcpy((char *)acc + ch * es, best, (size_t)es);
    }
}

#endif
