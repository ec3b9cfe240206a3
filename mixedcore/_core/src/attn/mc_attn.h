/* Fused attention for inference: O = softmax(scale * Q K^T + mask) V per (batch item, head),
 * without the scores in memory: the unit kernels, their selection by level and the driver.
 *
 * Design:
 *   a. The numbers are those of the batched-GEMM path of mixedcore.layers.MultiHeadAttention
 *      (GEMM, float32 softmax, GEMM), step for step:
 *        1. s[j] = sum_d q[i, d] k[j, d] in float32, the products added one fused multiply-add
 *           at a time (exact products for 16-bit inputs), in d order -- or, for bfloat16, in the
 *           order VDPBF16PS uses (pairs (2p, 2p + 1), the odd member first) -- in blocks of
 *           MC_ATTN_KC_PAIRS (bfloat16) or MC_ATTN_KC (float16 / float32) whose partial sums are
 *           added to the running total in block order: the GEMM's summation at its default
 *           block sizes (avx512bf16 pairs for bfloat16, the FMA kernels otherwise).
 *        2. x[j] = scale * s[j] (float32, skipped when scale is 1), then -1e9 where the mask
 *           excludes j (mask false, or j > i when causal).
 *        3. y = the float32 softmax of the row, exactly kernels.softmax's (mc_softmax_row_sd_,
 *           mc_act.h design e), then p[j] = 0 where masked, else y[j] rounded to p_type (the
 *           compute dtype: the probabilities the layer feeds the second product).
 *        4. o[i, c] = sum_j p[j] v[j, c] in float32 as in 1, rounded once to out_type.
 *      Masked entries still take part in the softmax (their terms are exp(-1e9 - max) = 0 unless
 *      the whole row is masked), so a fully masked row has y uniform and p all zero: its output
 *      is 0 * v summed, zero for finite v, as in the layer.
 *   b. One unit is one (batch item, head); the thread team takes units dynamically, and each
 *      unit's numbers depend only on its inputs, so results are the same for any thread count.
 *   c. Each level exports mc_attn_table_<isa> (one function computing a unit); avx2 is the
 *      scalar twin compiled with FMA; the AVX-512 level vectorises over 16 keys (step 1) and 16
 *      output columns (step 4) with FMA instructions performing exactly the scalar fmaf() calls
 *      of the twin, and the softmax with the vector twin of mc_softmax_row_sd_; avx512bf16
 *      runs bfloat16 units on VDPBF16PS (mc_attn_avx512bf16.c: the twin's pair order, with
 *      the GEMM's subnormal rules) and the others as avx512.  Every level gives the same bits,
 *      but for bfloat16 sums that pass below 2**-126 at avx512bf16 (flushed there).
 *   d. Strides are in bytes, any value (including 0 and negative); elements are loaded with
 *      memcpy.  The mask is bytes (0 = excluded) with its own four strides (0 broadcasts).
 *   e. The caller provides a per-thread workspace of mc_attn_work_bytes() bytes, 64-byte
 *      aligned: K transposed and V, converted to float32, and the row buffers.
 */
#ifndef MC_ATTN_H_
#define MC_ATTN_H_

#include <stdint.h>
#include "mc_attn_kernels.h"

/* --- driver (mc_attn.c) ------------------------------------------------------------------------
 * The fused attention of `a` (design a-e): reads the level and the thread count once, runs one
 * unit per (batch item, head) on the team with each thread's MC_WS_WORK workspace as scratch.
 * Returns MC_ATTN_OK; MC_ATTN_NOMEM when a thread could not get its workspace of
 * mc_attn_work_bytes(a) bytes (the units of the threads that had one are written);
 * MC_ATTN_EARG (nothing written) for a negative size, a type code other than MC_F16 / MC_BF16
 * / MC_F32, or a NULL q, k, v or out with work to do; MC_ATTN_TOOBIG (nothing written) when
 * the workspace's size overflows or exceeds MC_BYTES_MAX (mc_checked.h). */
enum { MC_ATTN_OK = 0, MC_ATTN_NOMEM = -1, MC_ATTN_EARG = -2, MC_ATTN_TOOBIG = -3 };
int mc_attention(const mc_attn_args *a);

#endif
