/* Activation functions on float32 arrays: the activation codes, the elementwise kernels, their
 * selection by level and the drivers.
 *
 * Design:
 *   a. One set of codes (MC_ACT_*) for the elementwise kernels and the GEMM epilogue
 *      (mc_gemm.h includes this header), so both apply the same functions.
 *   b. A forward kernel computes y[i] = f(x[i]), a backward kernel dx[i] = dy[i] * f'(x[i]), for
 *      n contiguous float32 elements (an output is either the same array as an input or
 *      disjoint from the inputs: each element is read before it is written).  Each element is a
 *      function of its own inputs only (mc_act_scalar.h), so the results do not depend on the
 *      level, on the alignment of the arrays or on how a caller cuts them into pieces.
 *   c. Kernels are named mc_act_<direction>_f32_<isa>; each level's file exports them in one
 *      table (mc_act_table_<isa>; mc_kernels.c resolves the levels).  The generic level is the
 *      scalar twins in a loop; avx2 is the same loop compiled with FMA (fma() inlined instead
 *      of called); the avx512 level evaluates 16 elements at a time (mc_act_avx512_inl.h) with
 *      a masked tail; avx512bf16 inherits the avx512 kernels.
 *   d. Kernels raise no floating-point flags that outlive them (the driver restores the
 *      caller's flags around every call).
 *   e. Softmax works row by row in float64: m = max(x) (NaN in the row, or m = +-inf, gives a
 *      row of NaN, as exp(x - m) / sum does in numpy), t = the sum of exp(x[i] - m) over every
 *      i but the first one holding m (whose term is exactly 1) -- term i added to partial sum
 *      i % 8, the eight partial sums added as a fixed tree (mc_softmax_tree_) -- then
 *      y[i] = exp(x[i] - m) / (1 + t), or for log-softmax (x[i] - m) - log1p(t), each rounded
 *      once to float32 (log1p keeps log-softmax accurate where the sum is close to 1).  exp is mc_act_exp_neg_sd_ (x[i] - m <= 0), its vector twin
 *      at the AVX-512 levels, whose eight double lanes are the eight partial sums; every level
 *      adds the same terms in the same order and gives the same bits.
 *   f. The sum of two arrays with an activation (a residual Add, and the activation after it):
 *      each element is widened exactly to float32, added (one rounding), activated as above and
 *      rounded once to the output type -- what numpy gives for the float32 sum of the widened
 *      values, activated and cast with kernels.cast.  Blocks of elements go through the level's
 *      conversion and activation kernels in a buffer on the stack.
 */
#ifndef MC_ACT_H_
#define MC_ACT_H_

#include <stdint.h>
#include "mc_act_kernels.h"

/* --- drivers (mc_act.c) ------------------------------------------------------------------------
 * Each reads the level and the thread count once, cuts the work into units and runs them with
 * mc_run (the default floating-point environment, the caller's given back).  The arrays are as
 * for the kernels (design b, e); nothing is checked but the sizes and the pointers.  Return
 * MC_ACT_OK, or MC_ACT_EARG (nothing written) for a negative size or a NULL array with work to
 * do. */
enum { MC_ACT_OK = 0, MC_ACT_EARG = -2 };

/* y = f(x) for n float32 (act: MC_ACT_*; another code copies, as MC_ACT_NONE). */
int mc_act_forward(int act, const float *x, float *y, int64_t n);
/* dx = dy * f'(x) for n float32. */
int mc_act_backward(int act, const float *dy, const float *x, float *dx, int64_t n);
/* Softmax of `rows` contiguous rows of n float32: mode MC_SOFTMAX_EXP (softmax), MC_SOFTMAX_LOG
 * (log-softmax) or MC_SOFTMAX_16 (softmax for a 16-bit result, in float32). */
int mc_softmax(const float *x, float *y, int64_t rows, int64_t n, int mode);
/* y = f(a + b) for n contiguous elements (design f): a, b and y each MC_F16, MC_BF16 or MC_F32
 * (a type code of mc_types.h); y may be a or b itself (same type), or disjoint from both. */
int mc_add_act(int act, const char *a, int a_type, const char *b, int b_type, char *y,
               int y_type, int64_t n);

#endif
