/* Layer normalization over the last axis: y = LN(x [+ residual]) * gamma + beta, row by row:
 * the kernels, their selection by level and the driver.
 *
 * Design:
 *   a. A row is n contiguous elements of x (float16, bfloat16 or float32; codes of
 *      mc_convert_scalar.h), optionally plus the same row of a residual of any of those types.
 *      The element s[i] is x[i] converted to float32, plus residual[i] converted to float32, the
 *      sum rounded once in float32 (no rounding to a 16-bit type in between).
 *   b. Statistics in float64, two passes: mean = (sum of s[i]) / n, var = (sum of
 *      (s[i] - mean)**2) / n (the variance of s, not E[s**2] - mean**2), rstd = 1 / sqrt(var +
 *      eps).  Each sum takes term i into partial sum i % 16, added in index order; the 16
 *      partial sums are added as a fixed tree (mc_norm_tree_): every level adds the same terms in
 *      the same order, so every level gives the same bits.  No FMA anywhere (products and sums
 *      are separate roundings at every level).
 *   c. y[i] = ((s[i] - mean) * rstd) * gamma[i] + beta[i] in float64 (the product with gamma
 *      left out when gamma is NULL, the sum with beta when beta is NULL), rounded once to the
 *      output type (float64 -> float16/bfloat16 directly, not through float32).  A NaN result is
 *      written as the positive quiet NaN of the output type (0x7E00, 0x7FC0, 0x7FC00000); a row
 *      holding a NaN or an infinity gives a row of it.
 *   d. mean and rstd, rounded to float32, are written per row when the pointers are not NULL.
 *   f. A float16 or bfloat16 output is computed in float32 instead: the same two passes and
 *      16-lane partial sums in float32 (the 16 added as a tree of halves: lanes l and l + 8,
 *      then l + 4, l + 2, l + 1), (s - mean)**2 added by FMA, rstd = 1 / sqrt(var + eps) in
 *      float32, y = fma((s - mean) * rstd, gamma, beta) (a product or a sum when one is NULL),
 *      rounded once to the output type; mean and rstd written as computed.  The output drops
 *      the bits float64 statistics pay for: against them the 16-bit result stays within one
 *      unit (tests/test_norm.py bounds it by half a unit plus 2**-20 of the terms'
 *      magnitudes), and a row of 768 takes about 40% less time.
 *   e. Kernels are named mc_layer_norm_<isa>; each level's file exports mc_norm_table_<isa>
 *      (mc_kernels.c resolves the levels).  generic and avx2 are the scalar twins of
 *      mc_norm_scalar.h in a loop (the specification); avx512 works 8 doubles at a time
 *      (mc_norm_avx512.c); avx512bf16 inherits it.
 */
#ifndef MC_NORM_H_
#define MC_NORM_H_

#include <stdint.h>
#include "mc_norm_kernels.h"

/* --- driver (mc_norm.c) ------------------------------------------------------------------------
 * Layer normalization of `rows` rows of the job (design a-d): reads the level and the thread
 * count once, cuts the rows into bands (about eight per thread, taken dynamically by the team;
 * each row depends on its own inputs only, so the results do not depend on the split) and runs
 * them with mc_run.  Returns MC_NORM_OK, or MC_NORM_EARG (nothing written) for a negative size,
 * a type code other than MC_F16 / MC_BF16 / MC_F32, or a NULL x or y with work to do. */
enum { MC_NORM_OK = 0, MC_NORM_EARG = -2 };
int mc_layer_norm(const mc_norm_job *job, int64_t rows);
/* mc_layer_norm, and after each band of rows [r0, r1) is normalized, after(ctx, r0, r1) on the
 * thread that normalized it, while the rows are in its cache (the plan quantizes them there
 * for an int8 step: mc_plan.h, design d); after NULL: mc_layer_norm. */
typedef void (*mc_norm_after_fn)(void *ctx, int64_t r0, int64_t r1);
int mc_layer_norm_then(const mc_norm_job *job, int64_t rows, mc_norm_after_fn after, void *ctx);

#endif
