/* The GEMM family's level kernels: their types and the family's table (one per level, exported
 * by mc_gemm_generic.c and mc_gemm_<isa>.c, resolved by runtime/mc_kernels.c).  The level
 * files, the scalar twins and the kernel tables include this header; the drivers' API is
 * mc_gemm.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_GEMM_KERNELS_H_
#define MC_GEMM_KERNELS_H_

#include <stdint.h>
#include "mc_act_kernels.h"          /* MC_ACT_*, mc_act_forward_fn */

typedef struct {
    int64_t m, n, k;
    const char *a; int64_t a_rs, a_cs; int a_type;       /* MC_F16 / MC_BF16 / MC_F32 */
    const char *b; int64_t b_rs, b_cs; int b_type;
    char *out; int64_t o_rs, o_cs; int out_type;         /* MC_F16 / MC_BF16 / MC_F32 */
    /* float32 partial sums (K > KC): element (i, j) at
     * acc + (i - acc_r0) * acc_rs + (j - acc_c0) * acc_cs */
    float *acc; int64_t acc_rs, acc_cs, acc_r0, acc_c0;
    const float *c; int64_t c_rs, c_cs;                  /* float32, read only if beta != 0 */
    const float *bias; int64_t bias_s;                   /* float32 along n, or NULL */
    /* a residual of out's type (rows res_rs bytes apart, columns contiguous), or NULL: added
     * to the value after the bias rounded to out's type, before the activation (mc_gemm.c, design i) */
    const char *res; int64_t res_rs;
    float alpha, beta;
    int act;
    mc_act_forward_fn act_row;   /* the level's activation kernel, for the scalar epilogue */
} mc_gemm_args;

typedef struct {
    int64_t mc, kc, nc;
} mc_gemm_blocks;

/* Packs `lanes` (<= w) lanes of kc elements, lane stride ls and k stride ks (bytes), into a
 * panel of w lanes: float32 k-major, or bfloat16 pairs (kc rounded up to even).  A pairs pack
 * returns 1 when it met a subnormal bfloat16 (VDPBF16PS would read it as zero), else 0. */
typedef int (*mc_gemm_pack_fn)(const char *src, int type, int64_t ls, int64_t ks,
                               int64_t lanes, int64_t kc, int w, void *dst);
/* Computes the mr x NR tile (mr <= MR) of panel products over kc (kc counts packed rows: k
 * steps, or pairs) into tile (row-major, row length NR). */
typedef void (*mc_gemm_ukr_fn)(int64_t kc, const void *ap, const void *bp, float *tile, int mr);
/* The same for mr <= 3 rows against np <= MC_WIDE_PANELS consecutive packed B panels, pstride
 * bytes apart, into a tile of row length ldt: enough accumulators to cover the FMA latency. */
#define MC_WIDE_PANELS 4
typedef void (*mc_gemm_ukr_wide_fn)(int64_t kc, const void *ap, const void *bp, int64_t pstride,
                                    int np, float *tile, int64_t ldt, int mr);
/* Applies the epilogue to the mr x nr tile at (i, j); see design b.  Level epilogues are called
 * only when out, acc and Cin are contiguous along rows and bias is contiguous or a scalar. */
typedef void (*mc_gemm_epi_fn)(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                               int64_t i, int64_t j, int first, int last);

/* The same tile as mc_gemm_ukr_fn, with B read in place, or from panels of 16-bit elements,
 * instead of from float32 panels: kc rows of nr (<= NR, or <= direct_wide for mr <= 3)
 * elements of type b_type, ldb bytes apart (kc counts elements of k and is even except at the
 * end of K for pair formats), each group of NR columns contiguous and pstride bytes after the
 * previous group (NR * element size in place; a panel's size for 16-bit panels).  The tile has
 * row length ldt; when `accumulate` is set the products are added to the tile's values (the
 * partial sums of the previous kc rows), so a run split over k gives the same bits as one
 * call.  Returns 1 when a pairs kernel met a subnormal bfloat16 in B, else 0. */
typedef int (*mc_gemm_ukr_direct_fn)(int64_t kc, const void *ap, const char *b, int64_t ldb,
                                     int64_t pstride, int b_type, int nr, float *tile,
                                     int64_t ldt, int mr, int accumulate);

/* The same tile again, for B whose columns are contiguous along k (a transposed B, or A^T of
 * a swapped matrix-vector product): nr columns ldc bytes apart, all kc rows in one call, at
 * most MC_DIRECT_T_MAXM rows; the tile (row length ldt) is overwritten.  Returns as above. */
typedef int (*mc_gemm_ukr_direct_t_fn)(int64_t kc, const void *ap, const char *b, int64_t ldc,
                                       int b_type, int nr, float *tile, int64_t ldt, int mr);
#define MC_DIRECT_T_MAXM 6

/* The micro-kernel and the common epilogue in one call: the mr x nr tile of mc_gemm_ukr_fn,
 * then the epilogue of a tile that is the whole sum (the only K block, alpha 1, beta 0, rows
 * of out contiguous) applied from the registers, with the bits of ukr followed by the level's
 * epi.  `tile` (MR x NR floats) is scratch for the cases the kernel hands to those two. */
typedef void (*mc_gemm_ukr_epi_fn)(int64_t kc, const void *ap, const void *bp, float *tile,
                                   int mr, int nr, const mc_gemm_args *g, int64_t i, int64_t j);

/* mc_gemm_ukr_epi_fn with A read in place instead of from its packed panel: rows of A lda bytes
 * apart, each contiguous along k (float32 elements for a float32-panel kernel, bfloat16 pairs
 * for a pairs kernel, kc even), mr <= MR rows from a; K made of nseg segments of kc values
 * each, segment s's rows at a + s * sstride and its panel steps at bp + s * bsstride bytes
 * (one segment for a matrix; a convolution's kernel rows, read from the image, and the rows of
 * the panel they meet).  The same operations in the same order as on the panel that packs the
 * segments one after the other against those steps. */
typedef void (*mc_gemm_ukr_epi_a_fn)(int64_t kc, const char *a, int64_t lda, int nseg,
                                     int64_t sstride, const void *bp, int64_t bsstride, int mr,
                                     int nr, const mc_gemm_args *g, int64_t i, int64_t j);
/* 1 when one of the first kc bfloat16 values of any of `rows` rows lda bytes apart from a is
 * subnormal (what a pairs kernel's pack reports), else 0 */
typedef int (*mc_gemm_sub_rows_fn)(const char *a, int64_t lda, int64_t rows, int64_t kc);

typedef struct {
    int mr, nr;
    int pairs;                 /* 1: bfloat16-pair panels, kc stepped by 2 */
    mc_gemm_pack_fn pack;
    mc_gemm_ukr_fn ukr;
    mc_gemm_ukr_wide_fn ukr_wide;         /* NULL when the level has none */
    mc_gemm_epi_fn epi;                   /* NULL: the scalar epilogue (or, for a pair kernel,
                                             its level's float32 one) */
    mc_gemm_ukr_direct_fn ukr_direct;     /* NULL when the level has none */
    int direct_wide;           /* columns per ukr_direct call for tiles of <= 3 rows (0: NR) */
    mc_gemm_ukr_direct_t_fn ukr_direct_t; /* NULL when the level has none */
    mc_gemm_ukr_epi_fn ukr_epi;           /* NULL when the level has none */
    mc_gemm_ukr_epi_a_fn ukr_epi_a;       /* NULL when the level has none */
    mc_gemm_sub_rows_fn sub_rows;         /* a pairs kernel with ukr_epi_a has one */
    int64_t mc, kc, nc;        /* default block sizes, chosen by measurement (docs/gemm.md) */
} mc_gemm_kernel;

typedef struct {
    mc_gemm_kernel f32;        /* float32 panels: every input pair */
    mc_gemm_kernel pairs;      /* bfloat16 pairs for bfloat16 x bfloat16 (pack NULL: none) */
} mc_gemm_table;

extern const mc_gemm_table mc_gemm_table_generic;
extern const mc_gemm_table mc_gemm_table_avx2;
extern const mc_gemm_table mc_gemm_table_avx512;
extern const mc_gemm_table mc_gemm_table_avx512bf16;

#endif
