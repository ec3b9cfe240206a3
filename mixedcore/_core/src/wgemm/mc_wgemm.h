/* Weight-only quantized GEMM: y = act(a @ W + bias) with W stored as int4 or int8 codes and
 * float32 scales, in Keras's three layouts (per-channel int4, sub-channel int4 with zero
 * points, per-channel int8), float16 / bfloat16 / float32 activations, float32 sums.
 *
 * Design:
 *   a. What is computed (the scalar twin, mc_wgemm_scalar.h, is the specification).  The
 *      weights are exact small integers, w = q (per channel) or q - zero[g, j] (grouped).  For
 *      each output and each group of rows (all of K per channel) the float32 sum
 *      s = fmaf(a[r], w[r, j], s) runs over the group's rows in order, from +0; per channel
 *      the value is s / scale[j] (Keras computes (x @ q) / kernel_scale), grouped it is
 *      t = fmaf(s_g, scale[g, j], t) over the groups in order, from +0.  Then the epilogue of
 *      the GEMM (gemm's: + bias, the activation of act, one rounding to the output type).  The
 *      order is fixed by the matrix alone: every level, path, tile and thread count gives the
 *      same bits (threads split rows and columns, never K).
 *   b. Packed format (mc_wpacked): panels of 16 columns; each group's rows padded to a
 *      multiple of 8 (the padding multiplies a zero of a, so it adds nothing).  int4: each
 *      block of 8 rows of a panel is 16 32-bit words, one per column, holding the 8 codes
 *      (q + 8, 4 bits each) in the order of mc_wgemm_shift_; int8: 16 bytes per row.  The
 *      format is the same at every level, so a packed matrix serves any level.  Scales and the
 *      offsets subtracted from the codes are float32 arrays of groups x 16-padded columns.
 *   c. Small M (at most MC_WGEMM_SMALL_M rows, MC_WGEMM_PAIRS_M for bfloat16 a at the avx512bf16
 *      level (design g); every M at the generic level): a is converted once per call (256 rows at a
 *      time) into padded float32 rows (or bfloat16 pairs), and the level's `dot` kernel streams the
 *      packed weights, unpacking the codes in registers, for up to 4 rows at a time; threads split
 *      the columns in units of a few panels, whose weights stay in L2 from one group of rows to the
 *      next.  At 4096 x 4096, one thread, bfloat16 a, the pair kernel runs at 290-315 GFLOP/s for
 *      32 to 256 rows, gemm's float32 micro-kernel (design d) at 180-220.
 *   d. Larger M (avx2 and up; bfloat16 a at avx512bf16: design g): per unit of rows and columns,
 *      the rows of a are packed into gemm's float32 A panels (gemm's pack, the padding zeroed); 256
 *      rows at a time of a group of a strip of weights are widened to float32 rows in cache
 *      (`widen`), gemm's float32 in-place micro-kernel (ukr_direct) adds their products to the
 *      group sums of the rows before, and `combine` applies the scale step.  That micro-kernel sums
 *      with one FMA per row and gives the bits of one call when a run is split over k, so these are
 *      the bits of (a).
 *   e. At the avx512bf16 level, bfloat16 a and int4 weights (per channel, or grouped with zero
 *      points in [-8, 8], Keras's range) go through VDPBF16PS on the small-M path: the codes
 *      become bfloat16 weights by a table lookup in registers (exact), and a's rows
 *      are stored as pairs with the odd row in the low half, so that VDPBF16PS, which adds the
 *      high product first, adds the rows in order; the products are exact, so every step is
 *      the rounding of an FMA.  Subnormal bfloat16 values of a (read as zero by VDPBF16PS)
 *      send the call to the FMA kernel; a partial sum below 2**-126 is still flushed to zero
 *      by the instruction (docs/gemm.md).
 *   f. Every byte count is computed with overflow checks (MC_WGEMM_TOOBIG).
 *   g. Larger M with bfloat16 a at the avx512bf16 level (above MC_WGEMM_PAIRS_M rows; int4
 *      with zero points in [-8, 8], and int8, whose weights q - zero have at most 8
 *      significant bits, so are exact in bfloat16): gemm's bfloat16-pair micro-kernel (14 x 32,
 *      VDPBF16PS), run as design d runs the float32 one.  That kernel's panels hold elements 2t
 *      and 2t + 1 of pair t in the low and high halves, and VDPBF16PS adds the high product
 *      first, so on gemm's own panels it would add row 2t + 1 before row 2t: not the order of
 *      design a.  Here both operands' words have their halves swapped: the rows of a are
 *      packed by gemm's pair pack and each word rotated by 16 bits, and `widen_pairs` writes
 *      each group's weights straight into the swapped format (for int4 the packed 32-bit word
 *      already holds each pair that way: design b).  The kernel then adds row 2t, then row
 *      2t + 1, each product exact and each addition rounded once, from +0 per group (the
 *      kernel's tile starts from zero and one call covers the whole group, kg / 2 pair steps),
 *      which is the pair kernel of design e and the FMA chain of design a; `combine` and the
 *      epilogue follow as in design d.  So the bits are those of the small-M path at every M
 *      and thread count.  Scratch per unit: the band's A pair panels (band rows x kp 16-bit
 *      values), one group's widened panels (kg x 32 16-bit values), two sets of tiles.  A band
 *      whose rows hold a subnormal bfloat16 value (gemm's pack reports it) is computed on the
 *      float32 kernel instead, as the small-M path computes a chunk of 256 rows holding one;
 *      the two paths can then differ only where VDPBF16PS flushes a partial sum below 2**-126
 *      in a row of the one that was not sent to FMAs (design e).  int8 takes no pair kernel at
 *      small M, so int8 with bfloat16 a differs between M <= MC_WGEMM_PAIRS_M and larger M in
 *      that flush case only.  Measured (one thread, 768 x 3072 and 3072 x 768, GFLOP/s): the
 *      small-M pair kernel 290-320 at 32 and 64 rows; this path 320 at 16 rows, 400-410 at 24,
 *      430-470 from 48; int8 (small M on FMAs) 225 against 285-300 at 16: hence 16.
 */
#ifndef MC_WGEMM_H_
#define MC_WGEMM_H_

#include <stdint.h>
#include "mc_wgemm_kernels.h"

/* rows at most which a call takes the small-M path (design c): measured, the FMA dot kernel and
 * the larger-M path ran at the same speed (210-220 GFLOP/s, float32 a, one thread) from 64 rows */
#define MC_WGEMM_SMALL_M 64
/* rows above which bfloat16 a takes gemm's pair micro-kernel at avx512bf16 (design g) */
#define MC_WGEMM_PAIRS_M 16

enum { MC_WGEMM_OK = 0, MC_WGEMM_NOMEM = -1, MC_WGEMM_TOOBIG = -2 };

typedef struct {
    const mc_wpacked *w;
    int64_t m;                                          /* rows of a and out */
    const char *a; int64_t a_rs, a_cs; int a_type;      /* m x k, byte strides */
    char *out; int64_t o_rs, o_cs; int out_type;        /* m x n, byte strides */
    const float *bias; int64_t bias_s;                  /* float32 along n (stride 0: one) */
    int act;
} mc_wgemm_call;

/* Packs Keras's arrays (contiguous): kernel int8 (k, n), or int4 two per byte (k, ceil(n/2));
 * scale float32 (n,) per channel (block <= 0) or (groups, n) with zero int8 (groups, n) (NULL:
 * zero points 0).  Returns OK, NOMEM or TOOBIG (nbytes then holds what was asked, or -1 when
 * the count itself overflows). */
int mc_wgemm_pack(const int8_t *kernel, int bits, int64_t k, int64_t n, const float *scale,
                  const int8_t *zero, int64_t block, mc_wpacked *out);
void mc_wgemm_packed_free(mc_wpacked *p);
/* The codes as Keras's q values, into q (k x n int8, contiguous). */
void mc_wgemm_unpack(const mc_wpacked *p, int8_t *q);
/* One call (design c, d, e), in the default floating-point environment. */
int mc_wgemm(const mc_wgemm_call *call);

#endif
