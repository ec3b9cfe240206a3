/* GEMM with float32 accumulation: C = act(alpha * A @ B + beta * Cin + bias).
 *
 * Design:
 *   a. BLIS-style loops over one rectangle of C (mc_gemm_run): NC columns, KC depth, MC rows;
 *      B and A blocks are packed into micro-panels of NR / MR lanes (zero-padded to a full
 *      panel, so the micro-kernel always computes a full MR x NR tile).  Packing reads A and B
 *      through byte strides and converts float16/bfloat16 on the way, so any view (transposed,
 *      strided, reversed) needs no copy by the caller.
 *   b. A micro-kernel computes a tile of products over kc into a local MR x NR float32 buffer;
 *      a per-tile epilogue, while the tile is in L1, adds the partial sums of earlier KC blocks
 *      (kept in `acc`, float32), or, on the last KC block, applies alpha, beta * Cin, bias, the
 *      activation and the output rounding.  beta == 0 never reads Cin.
 *   c. Two packed formats: float32 (one lane per element, k-major), and bfloat16 pairs (one
 *      32-bit word holds elements k and k+1 of a lane, for VDPBF16PS); an odd K is padded with
 *      a zero inside the panel, never read from the array.
 *   d. Every element is computed the same way whatever rectangle it belongs to: the K blocking
 *      depends only on K and KC, never on the thread split, so results are bit-identical for any
 *      thread count and any alignment of the operands.
 *   e. Index arithmetic is 64-bit; strides are in bytes.
 */
#ifndef MC_GEMM_H_
#define MC_GEMM_H_

#include <stdint.h>
#include "mc_act.h"                  /* MC_ACT_* */

typedef struct {
    int64_t m, n, k;
    const char *a; int64_t a_rs, a_cs; int a_type;       /* MC_F16 / MC_BF16 / MC_F32 */
    const char *b; int64_t b_rs, b_cs; int b_type;
    char *out; int64_t o_rs, o_cs; int out_type;         /* MC_F16 / MC_BF16 / MC_F32 */
    float *acc; int64_t acc_rs, acc_cs;                  /* float32 partial sums (K > KC) */
    const float *c; int64_t c_rs, c_cs;                  /* float32, read only if beta != 0 */
    const float *bias; int64_t bias_s;                   /* float32 along n, or NULL */
    float alpha, beta;
    int act;
} mc_gemm_args;

typedef struct {
    int64_t mc, kc, nc;
} mc_gemm_blocks;

/* Packs `lanes` (<= w) lanes of kc elements, lane stride ls and k stride ks (bytes), into a
 * panel of w lanes: float32 k-major, or bfloat16 pairs (kc rounded up to even). */
typedef void (*mc_gemm_pack_fn)(const char *src, int type, int64_t ls, int64_t ks,
                                int64_t lanes, int64_t kc, int w, void *dst);
/* Computes the mr x nr tile (mr <= MR) of panel products over kc (kc even for pair formats)
 * into tile (row-major, row length NR). */
typedef void (*mc_gemm_ukr_fn)(int64_t kc, const void *ap, const void *bp, float *tile, int mr);
/* Applies the epilogue to the mr x nr tile at (i, j); see design b. */
typedef void (*mc_gemm_epi_fn)(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                               int64_t i, int64_t j, int first, int last);

/* The same tile as mc_gemm_ukr_fn, with B read in place instead of from a packed panel: kc rows
 * of nr (<= NR) elements of type b_type, contiguous, ldb bytes apart (kc counts elements of k and
 * is even except at the end of K for pair formats).  The tile has row length ldt; when
 * `accumulate` is set the products are added to the tile's values (the partial sums of the
 * previous kc rows), so a run split over k gives the same bits as one call. */
typedef void (*mc_gemm_ukr_direct_fn)(int64_t kc, const void *ap, const char *b, int64_t ldb,
                                      int b_type, int nr, float *tile, int64_t ldt, int mr,
                                      int accumulate);

/* The same tile again, for B whose columns are contiguous along k (a transposed B, or A^T of
 * a swapped matrix-vector product): nr columns ldc bytes apart, all kc rows in one call, at
 * most MC_DIRECT_T_MAXM rows; the tile (row length ldt) is overwritten. */
typedef void (*mc_gemm_ukr_direct_t_fn)(int64_t kc, const void *ap, const char *b, int64_t ldc,
                                        int b_type, int nr, float *tile, int64_t ldt, int mr);
#define MC_DIRECT_T_MAXM 6

typedef struct {
    int mr, nr;
    int pairs;                 /* 1: bfloat16-pair panels, kc stepped by 2 */
    int elem;                  /* bytes per packed element (4) */
    mc_gemm_pack_fn pack;
    mc_gemm_ukr_fn ukr;
    mc_gemm_epi_fn epi;
    mc_gemm_ukr_direct_fn ukr_direct;   /* NULL when the level has none */
    int64_t mc, kc, nc;        /* default block sizes, chosen by measurement (docs/gemm.md) */
    int direct_wide;           /* columns per ukr_direct call for tiles of <= 3 rows (0: NR) */
    mc_gemm_ukr_direct_t_fn ukr_direct_t;   /* NULL when the level has none */
} mc_gemm_kernel;

/* The kernel set for a level and pair of input types, falling back level by level. */
const mc_gemm_kernel *mc_gemm_select(int level, int a_type, int b_type);
/* Block sizes: the kernel's defaults, overridden by the non-zero fields of `want`, rounded to
 * the micro-tile (mc to MR, nc to NR, kc to even). */
void mc_gemm_blocks_for(const mc_gemm_kernel *kern, const mc_gemm_blocks *want, mc_gemm_blocks *blk);
/* Bytes of workspace one thread needs (aligned to 64 by the caller). */
int64_t mc_gemm_workspace_bytes(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk);
/* Computes rows [m0, m1) x columns [n0, n1) of C; work is 64-byte aligned. */
void mc_gemm_run(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk, const mc_gemm_args *g,
                 int64_t m0, int64_t m1, int64_t n0, int64_t n1, void *work);

/* Scalar pieces shared by every level: the activation (float32 in, float32 out,
 * mc_act_scalar.h), the generic pack and the scalar epilogue (the specification of the vector
 * ones). */
float mc_gemm_act_scalar_(int act, float v);
void mc_gemm_pack_generic_(const char *src, int type, int64_t ls, int64_t ks, int64_t lanes,
                           int64_t kc, int w, void *dst);
void mc_gemm_pack_pairs_generic_(const char *src, int type, int64_t ls, int64_t ks, int64_t lanes,
                                 int64_t kc, int w, void *dst);
void mc_gemm_epi_generic_(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                          int64_t i, int64_t j, int first, int last);
/* Thread-local, 64-byte aligned scratch buffer number `slot` (0 or 1) of at least `bytes`, kept
 * for the thread's lifetime and grown when needed; NULL when out of memory. */
void *mc_gemm_workspace_(int slot, int64_t bytes);
/* The whole of one item on `nthreads` OpenMP threads that share each packed B block: the
 * threads pack its panels round-robin, wait, then each computes its own band of MR-tile rows.
 * Returns -1 when out of memory. */
int mc_gemm_run_shared(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk,
                       const mc_gemm_args *g, int nthreads);

/* The AVX-512 vector epilogue (mc_gemm_avx512.c), shared by the avx512bf16 kernels. */
void mc_gemm_epi_avx512_(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                         int64_t i, int64_t j, int first, int last);

const mc_gemm_kernel *mc_gemm_kernel_avx2(int a_type, int b_type);
const mc_gemm_kernel *mc_gemm_kernel_avx512(int a_type, int b_type);
const mc_gemm_kernel *mc_gemm_kernel_avx512bf16(int a_type, int b_type);

#endif
