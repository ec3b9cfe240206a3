/* The int8 GEMM family's level kernels: their types and the family's table (one per level,
 * exported by mc_igemm_generic.c and mc_igemm_<isa>.c, resolved by runtime/mc_kernels.c).  The
 * level files, the scalar twins and the kernel tables include this header; the driver's API is
 * mc_igemm.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_IGEMM_KERNELS_H_
#define MC_IGEMM_KERNELS_H_

#include <stdint.h>
#include "mc_act_kernels.h"          /* MC_ACT_*, mc_act_forward_fn */
#include "mc_types.h"

/* The output type of the exact product (the float outputs are MC_F32 / MC_BF16 / MC_F16). */
#define MC_IGEMM_I32 16
/* The largest K whose int32 sums cannot overflow for any int8 inputs: |a * b| <= 128 * 128,
 * and 131071 * 16384 < 2**31 <= 131072 * 16384. */
#define MC_IGEMM_MAX_K 131071
/* The same with zero points (codes minus a zero point in [-128, 127]: |a - z| <= 255):
 * 65793 * 255 * 128 < 2**31. */
#define MC_IGEMM_MAX_K_ZP 65793
/* B panels group 4 consecutive k of one column in a 32-bit word (VPDPBUSD's layout). */
#define MC_IGEMM_KG 4

typedef struct {
    int64_t m, n, k;
    const int8_t *a; int64_t a_rs, a_cs;                 /* strides in bytes (= elements) */
    char *out; int64_t o_rs, o_cs; int out_type;         /* MC_IGEMM_I32 / MC_F32 / MC_BF16 / MC_F16 */
    /* int32 partial sums of earlier K blocks: element (i, j) at
     * (char *)acc + (i - acc_r0) * acc_rs + (j - acc_c0) * acc_cs */
    int32_t *acc; int64_t acc_rs, acc_cs, acc_r0, acc_c0;
    const float *a_scale;      /* m float32, one per row, or NULL (then b_scale is NULL too) */
    const float *b_scale;      /* n float32, one per column */
    const float *bias; int64_t bias_s;                   /* float32, stride 0 or 4 bytes, or NULL */
    /* zero points: the product is (A - a_zero[i]) @ B, the tile corrected on the last K block
     * by - a_zero[i] * b_sum[j] (b_sum: each column's sum over all of K, the driver's); NULL:
     * none */
    const int32_t *a_zero; const int32_t *b_sum;
    int act;
    mc_act_forward_fn act_row; /* the level's activation kernel, for the scalar epilogue */
} mc_igemm_args;

/* Packs `rows` (<= mr) rows of kc int8 values of A (byte strides rs, cs) into a panel of mr
 * rows: for each group of 4 k, the 4 values of row 0, of row 1, ... (a_elem bytes each: int8
 * as it is, int16 sign-extended, or uint8 a + 128 for VPDPBUSD); k past kc and rows past
 * `rows` are zero (a + 128 = 128 for the uint8 format). */
typedef void (*mc_igemm_pack_a_fn)(const int8_t *a, int64_t rs, int64_t cs, int64_t rows,
                                   int64_t kc, int mr, void *dst);
/* The mr x NR int32 tile (mr <= MR, row length NR) of an A panel times a B panel over kq groups
 * of 4 k: overwritten, exact (wrapping int32 arithmetic: the true sums fit, see MAX_K). */
typedef void (*mc_igemm_ukr_fn)(int64_t kq, const void *ap, const void *bp, int32_t *tile, int mr);
/* One row of A against np (<= MC_IGEMM_WIDE) consecutive B panels pstride bytes apart, into
 * tile (np * NR int32): the batch-1 loop streaming the weights, with enough accumulators. */
#define MC_IGEMM_WIDE 4
typedef void (*mc_igemm_ukr_wide_fn)(int64_t kq, const void *ap, const void *bp, int64_t pstride,
                                     int np, int32_t *tile);
/* The epilogue of the mr x nr tile at (i, j) (row length ldt): adds the partial sums of earlier
 * K blocks unless `first`, keeps them unless `last`, else stores the int32 sum or
 * act(float32(s) / (b_scale[j] * a_scale[i]) + bias[j]) rounded once to the output type.  Level
 * epilogues are called only for rows of out (and acc) contiguous. */
typedef void (*mc_igemm_epi_fn)(const mc_igemm_args *g, const int32_t *tile, int ldt, int mr,
                                int nr, int64_t i, int64_t j, int first, int last);
/* Dynamic quantization of one row of k values of type (MC_F32 / MC_BF16 / MC_F16) at x
 * (elements xs bytes apart): q[t * qs] int8 and *scale (of type) as mc_igemm_quant_row_scalar_
 * computes them. */
typedef void (*mc_igemm_quant_fn)(const char *x, int type, int64_t k, int64_t xs, int8_t *q,
                                  int64_t qs, char *scale);
/* Min-max quantization of one row with a zero point: q[t * qs], *scale (float32) and *zero as
 * mc_igemm_quant_row_zp_scalar_ computes them. */
typedef void (*mc_igemm_quant_zp_fn)(const char *x, int type, int64_t k, int64_t xs, int8_t *q,
                                     int64_t qs, float *scale, int32_t *zero);

typedef struct {
    int mr, nr;
    int a_elem;                /* bytes per packed A value: 1 (int8 / uint8) or 2 (int16) */
    int vnni;                  /* 1: A packed as a + 128; B's column sums correct the result */
    mc_igemm_pack_a_fn pack_a;
    mc_igemm_ukr_fn ukr;
    mc_igemm_ukr_wide_fn ukr_wide;   /* NULL: the level has none */
    mc_igemm_epi_fn epi;             /* NULL: the scalar epilogue */
    int64_t mc, kc, nc;        /* default block sizes (kc a multiple of 4; docs/gemm.md) */
} mc_igemm_kernel;

typedef struct {
    mc_igemm_kernel gemm;      /* taken whole from the level below when pack_a is NULL */
    mc_igemm_quant_fn quant;   /* NULL: the level below's */
    mc_igemm_quant_zp_fn quant_zp;   /* NULL: the level below's */
} mc_igemm_table;

extern const mc_igemm_table mc_igemm_table_generic;
extern const mc_igemm_table mc_igemm_table_avx2;
extern const mc_igemm_table mc_igemm_table_avx512;
extern const mc_igemm_table mc_igemm_table_avx512bf16;

#endif
