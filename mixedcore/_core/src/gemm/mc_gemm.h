/* GEMM with float32 accumulation: C = act(alpha * A @ B + beta * Cin + bias).
 *
 * Design:
 *   a. BLIS-style loops over one rectangle of C: NC columns, KC depth, MC rows; B and A blocks
 *      are packed into micro-panels of NR / MR lanes (zero-padded to a full panel, so the
 *      micro-kernel always computes a full MR x NR tile).  Packing reads A and B through byte
 *      strides and converts float16/bfloat16 on the way, so any view (transposed, strided,
 *      reversed) needs no copy by the caller.
 *   b. A micro-kernel computes a tile of products over kc into a local MR x NR float32 buffer;
 *      a per-tile epilogue, while the tile is in L1, adds the partial sums of earlier KC blocks
 *      (kept in `acc`, float32), or, on the last KC block, applies alpha, beta * Cin, bias, the
 *      activation and the output rounding.  beta == 0 never reads Cin.
 *   c. Three panel formats: float32 (one lane per element, k-major); bfloat16 pairs (one
 *      32-bit word holds elements k and k+1 of a lane, for VDPBF16PS), an odd K padded with a
 *      zero inside the panel, never read from the array; and, for float16/bfloat16 B at levels
 *      with in-place kernels, 16-bit panels: the values as they are, k-major, converted to
 *      float32 on load by those kernels (the same FMAs as float32 panels, half the bytes).
 *      A is always packed as float32 (or pairs).
 *   d. Every element is computed the same way whatever rectangle, thread or path computes it:
 *      the K blocking depends only on K and KC, so results are bit-identical for any thread
 *      count, any alignment of the operands, and B packed ahead (mc_gemm_pack) or not.
 *   e. Index arithmetic is 64-bit; strides are in bytes.
 *   f. Each level's file exports one table (mc_gemm_table_<isa>): a float32-panel kernel and,
 *      where the level has one, a bfloat16-pair kernel.  Kernels are inherited whole from the
 *      level below when a level leaves one out; a pair kernel without an epilogue uses its
 *      level's float32 epilogue.  Level files include this header for the types and
 *      mc_gemm_scalar.h for the scalar pieces; they call nothing in the driver (mc_gemm.c).
 */
#ifndef MC_GEMM_H_
#define MC_GEMM_H_

#include <stdint.h>
#include "mc_gemm_kernels.h"

/* --- the driver (mc_gemm.c) -------------------------------------------------------------------- */

/* B packed ahead: all of K, in blocks of kc, each block's panels for every column. */
typedef struct {
    int64_t k, n;
    int type;                  /* MC_F16 / MC_BF16 / MC_F32: the values it holds */
    int level;                 /* the level that packed it */
    int pairs, elem, nr;       /* the panel format: pairs, bytes per element (4, or 2 for 16-bit
                                  panels), panel width */
    int64_t kc;
    int finite;                /* 1: its packer found every value finite (mc_conv.c, design h);
                                  0: not known */
    char *data;                /* 64-byte aligned, NULL when empty */
    int64_t nbytes;
} mc_packed;

typedef struct {
    mc_gemm_args g;            /* the first item (acc, alpha and beta are the driver's) */
    double alpha, beta;        /* rounded to float32 by the driver, in the default mode */
    int64_t batch;             /* items; >= 1 */
    const int64_t *offs;       /* batch x 4 byte offsets of A, B, out and Cin, or NULL */
    const mc_packed *packed;   /* B packed ahead (g.b unused), or NULL */
} mc_gemm_call;

enum { MC_GEMM_OK = 0, MC_GEMM_NOMEM = -1, MC_GEMM_FORMAT = -2, MC_GEMM_TOOBIG = -3 };

/* One call: makes the plan (level, kernels, blocks, threads, accumulator, scratch) and runs it
 * on the team, all in the default floating-point environment.  MC_GEMM_FORMAT: the packed B's format
 * does not suit the current level.  MC_GEMM_TOOBIG: a packing buffer or workspace whose size
 * overflows or exceeds MC_BYTES_MAX (mc_checked.h; nothing is allocated for it). */
int mc_gemm(const mc_gemm_call *call);
/* The epilogue in plain C (mc_gemm_epi_fn; the generic level's, and every layout's the vector
 * epilogues do not take). */
void mc_gemm_epi_scalar(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                        int64_t i, int64_t j, int first, int last);
/* Packs B (k x n, byte strides rs / cs) at the current level, in K blocks of the level's KC
 * or of kc_min when that is deeper (rounded up to even; a convolution's whole K in one block,
 * mc_conv.c design h).  OK, MC_GEMM_NOMEM, or MC_GEMM_TOOBIG when the panels' size overflows
 * or exceeds MC_BYTES_MAX (out->nbytes 0, no buffer). */
int mc_gemm_pack(const char *b, int64_t rs, int64_t cs, int type, int64_t k, int64_t n,
                 int64_t kc_min, mc_packed *out);
void mc_gemm_packed_free(mc_packed *p);
/* Panels [q0, q1) of K block `blockno` of p (pairs or 16-bit) widened exactly to float32
 * panels of the same NR, into dst laid out as float32 panels of the whole matrix (block b at
 * dst + b * npad * kc floats). */
void mc_gemm_widen_panels(const mc_packed *p, int64_t blockno, int64_t q0, int64_t q1,
                          float *dst);
/* Writes the values of a packed B into dst (k x n of its type, byte strides rs / cs). */
void mc_gemm_unpack(const mc_packed *p, char *dst, int64_t rs, int64_t cs);
/* The kernel a level uses for an input pair and its block sizes under the current settings. */
void mc_gemm_kernel_info(int level, int a_type, int b_type, int *mr, int *nr, int *pairs,
                         mc_gemm_blocks *blk);
/* The packed format a level would give B of this type: pairs, elem, nr, and kc. */
void mc_gemm_pack_format(int level, int type, int *pairs, int *elem, int *nr, int64_t *kc);

#endif
