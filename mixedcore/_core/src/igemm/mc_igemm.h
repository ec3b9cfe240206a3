/* int8 x int8 -> int32 GEMM, optionally scaled back to floats:
 *     C = A @ B                                                    (exact int32), or
 *     C = act(float32(A @ B) / (b_scale[j] * a_scale[i]) + bias)   rounded once to the output,
 * the product of Keras's int8 Dense layer; and the dynamic row quantization that feeds it.
 *
 * Design:
 *   a. Exact: the sums are int32 and every true sum fits for K <= MC_IGEMM_MAX_K (the caller
 *      refuses more), so every level, block size, thread count and summation order gives the
 *      same bits; the kernels may sum in wrapping int32 (VPDPBUSD's offset sums overflow in
 *      between and come back exactly).
 *   b. BLIS-style loops as the float GEMM's (mc_gemm.h, design a): NC columns, KC depth, MC
 *      rows; B in panels of NR columns, A in panels of MR rows, zero-padded, a micro-kernel per
 *      MR x NR tile into an int32 buffer, a per-tile epilogue that adds the earlier K blocks'
 *      int32 partial sums (the output itself when it is int32, else the rectangle's scratch) or,
 *      on the last block, stores the sum or applies the scales, bias, activation and rounding.
 *   c. One B panel format at every level: for each group of 4 consecutive k, the 4 int8 of
 *      column 0, of column 1, ... (one 32-bit lane per column, as VPDPBUSD reads them), then NR
 *      int32 holding -128 times each column's sum over the block.  NR is 32 at the AVX-512
 *      levels, 16 below.  A panels have the level's element format: int8 (generic), int16
 *      sign-extended (avx2, avx512: VPMADDWD on pairs, exact), or uint8 a + 128 (avx512bf16,
 *      which requires AVX512_VNNI: VPDPBUSD multiplies unsigned by signed bytes; its
 *      accumulators start at the -128 * column sums, so the tile is exactly A @ B).
 *   d. B packed ahead (mc_igemm_pack) is the panels a call would make, with the column sums; a
 *      call uses them when their NR is its level's, and refuses them otherwise
 *      (MC_IGEMM_FORMAT).  Unpacked B is packed in a phase of its own into a buffer of the
 *      calling thread, all of it (int8: K x N bytes), then the rectangles share it.
 *   e. Work units, taken dynamically by the team: rectangles of the items of the batch, bands
 *      of rows for many rows, bands of columns for few (batch 1 streams each column band of
 *      the weights once, on the level's wide kernel when it has one).
 *   f. The epilogue is the float GEMM's order and rounding: float32(s) rounded once, the scale
 *      product b_scale[j] * a_scale[i] rounded once, the quotient rounded once, + bias rounded
 *      once, the activation of the act family (mc_act.h: float64 inside, rounded once; the
 *      level's row kernel in the scalar epilogue, mc_act_avx512_inl.h's in the vector one),
 *      and one rounding to nearest even to the output type.
 *   g. Quantization of rows (mc_igemm_quantize): mc_igemm_quant_row_scalar_ per row, on the
 *      team in bands of rows; with zero points (mc_igemm_quantize_zp) the min-max codes of
 *      mc_igemm_quant_row_zp_scalar_.
 *   h. The driver reads the level and thread count once per call, like the other families,
 *      and calls only the runtime and its level's table; it shares no code with the float
 *      GEMM (whose panels are float).
 *   i. Zero points (g.a_zero): the product is (A - z) @ B.  The kernels multiply the codes as
 *      they are; the epilogue of the last K block subtracts z[i] times column j's sum over all
 *      of K, which the driver adds up from the panels' per-block sums before the work starts.
 *      |a - z| <= 255, so K is limited to MC_IGEMM_MAX_K_ZP for the sums to stay exact.
 */
#ifndef MC_IGEMM_H_
#define MC_IGEMM_H_

#include <stdint.h>
#include "mc_igemm_kernels.h"

/* B packed ahead: all of K in blocks of kc (a multiple of 4), each block's panels for every
 * column (NR wide), as the call would pack them. */
typedef struct {
    int64_t k, n;
    int level;                 /* the level that packed it */
    int nr;
    int64_t kc;
    char *data;                /* 64-byte aligned, NULL when empty */
    int64_t nbytes;
} mc_ipacked;

typedef struct {
    mc_igemm_args g;           /* the first item (acc is the driver's) */
    int64_t batch;             /* items of A (and out); >= 1 */
    const int64_t *offs;       /* batch x 2 byte offsets of A and out, or NULL; item t's a_scale
                                  is g.a_scale + t * m */
    const int8_t *b; int64_t b_rs, b_cs;   /* B (k x n), when not packed */
    const mc_ipacked *packed;  /* or B packed ahead */
    int64_t kc;                /* K block depth when B is not packed (0: the level's) */
} mc_igemm_call;

enum { MC_IGEMM_OK = 0, MC_IGEMM_NOMEM = -1, MC_IGEMM_FORMAT = -2, MC_IGEMM_SIZE = -3,
       MC_IGEMM_TOOBIG = -4 };

/* One call, in the default floating-point environment.  MC_IGEMM_FORMAT: the packed B's NR is
 * not the current level's (nothing written).  MC_IGEMM_SIZE: K above MC_IGEMM_MAX_K.
 * MC_IGEMM_TOOBIG: a packing buffer or workspace whose size overflows or exceeds MC_BYTES_MAX
 * (mc_checked.h). */
int mc_igemm(const mc_igemm_call *call);
/* The epilogue in plain C (the generic and avx2 levels', and every strided layout's). */
void mc_igemm_epi_scalar(const mc_igemm_args *g, const int32_t *tile, int ldt, int mr, int nr,
                         int64_t i, int64_t j, int first, int last);
/* Bytes of B packed at a level's NR in blocks of kc, or -1 when the count overflows or exceeds
 * MC_BYTES_MAX (mc_checked.h). */
int64_t mc_igemm_packed_bytes(int nr, int64_t k, int64_t n, int64_t kc);
/* Packs B (k x n, byte strides rs, cs) at the current level (kc 0: its default).  OK, NOMEM,
 * SIZE or TOOBIG (out->nbytes 0, no buffer). */
int mc_igemm_pack(const int8_t *b, int64_t rs, int64_t cs, int64_t k, int64_t n, int64_t kc,
                  mc_ipacked *out);
void mc_igemm_packed_free(mc_ipacked *p);
/* Writes the values of a packed B into dst (k x n int8, byte strides rs, cs). */
void mc_igemm_unpack(const mc_ipacked *p, int8_t *dst, int64_t rs, int64_t cs);
/* The panel width and default K block of a level. */
void mc_igemm_format(int level, int *nr, int64_t *kc);
/* Quantizes `rows` rows of k values of type (byte strides: rows x_rs, elements x_cs) into q
 * (rows q_rs apart, contiguous) and scale (one value of type per row, contiguous). */
void mc_igemm_quantize(const char *x, int type, int64_t rows, int64_t k, int64_t x_rs,
                       int64_t x_cs, int8_t *q, int64_t q_rs, char *scale);
/* The same with zero points (min-max quantization, mc_igemm_quant_row_zp_scalar_): scale and
 * zero one float32 and one int32 per row, contiguous. */
void mc_igemm_quantize_zp(const char *x, int type, int64_t rows, int64_t k, int64_t x_rs,
                          int64_t x_cs, int8_t *q, int64_t q_rs, float *scale, int32_t *zero);

#endif
