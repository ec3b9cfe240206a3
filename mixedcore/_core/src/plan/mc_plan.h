/* An inference plan: a flat list of kernel calls over numbered buffers, run by one loop.
 *
 * Design:
 *   a. A step is one call of a family's driver -- the GEMM with weights packed ahead, the
 *      convolution, the depthwise convolution, pooling, the sum with an activation, layer
 *      normalization, zero padding (a copy of its own, here), the int8 product of rows
 *      quantized on the way (the row quantization, then the int8 GEMM), the fused attention
 *      over views of one buffer, the conversion of a buffer to another float type -- whose
 *      descriptor the caller filled once, with every array named by a buffer number instead of
 *      an address.  The runner copies the descriptor, puts the buffers' addresses in and calls
 *      the driver: the results are those of the same calls made one by one, bit for bit.
 *   b. The buffers' addresses are given per run (the caller cuts an arena into them and adds
 *      the inputs and outputs), so one plan runs any number of times without allocating; the
 *      drivers take their scratch from the workspace as always.
 *   c. The runner stops at the first step whose driver fails and says which.
 *   d. A layer normalization whose output an int8 step reads next quantizes each band of rows
 *      right after normalizing it, while the rows are in cache (mc_layer_norm_then's hook),
 *      into the int8 step's buffers (the level's row quantization kernel, the call
 *      mc_igemm_quantize makes per row: the same bits), and the int8 step multiplies only: one
 *      pass over the normalized rows fewer.
 *   e. A block: a pointwise product over images (the GEMM step of a 1 x 1 convolution), the
 *      depthwise convolution of its output and the pointwise product of that (MobileNetV2's
 *      expand -> depthwise -> project, the last one's residual included) run as one step when
 *      the first of them is marked (`block`): each unit of the team takes an image, or a range
 *      of its output rows when there are fewer images than threads, and goes down it a band of
 *      output rows at a time -- the expanded rows the band's windows read (those the previous
 *      band computed kept, the rest computed now), the band's depthwise rows, then its
 *      projected rows -- all in buffers of its own (MC_WS_BLOCK) that stay in cache, instead
 *      of three passes over full-size intermediates.  The three drivers run on the unit's
 *      thread with the same descriptors but for the rows, so every element is computed as
 *      the three steps compute it (their designs: an element's bits do not depend on the
 *      rectangle, band or thread that computes it): the same bits.  The rows at the edge of a
 *      range of rows are expanded by both units that read them.
 */
#ifndef MC_PLAN_H_
#define MC_PLAN_H_

#include <stdint.h>
#include "mc_act.h"
#include "mc_attn.h"
#include "mc_conv.h"
#include "mc_convert.h"
#include "mc_gemm.h"
#include "mc_igemm.h"
#include "mc_norm.h"
#include "mc_pool.h"

enum {
    MC_STEP_GEMM = 1, MC_STEP_CONV = 2, MC_STEP_DW = 3, MC_STEP_POOL = 4, MC_STEP_ADD = 5,
    MC_STEP_NORM = 6, MC_STEP_PAD = 7, MC_STEP_IGEMM = 8, MC_STEP_ATTN = 9,
    MC_STEP_CAST = 10
};

/* Zeros around images: N x H x W x C elements of es bytes into N x (pt + H + pb) x (pl + W + pr)
 * x C (ZeroPadding2D) */
typedef struct {
    int64_t n, h, w, c, pt, pb, pl, pr, es;
} mc_pad_call;

/* n contiguous elements of src_type converted to dst_type (mc_cast, the call kernels.cast makes
 * for a contiguous array) */
typedef struct {
    int src_type, dst_type;
    int64_t n;
} mc_cast_call;

/* mc_add_act's arguments but the arrays */
typedef struct {
    int act, a_type, b_type, y_type;
    int64_t n;
} mc_add_call;

/* mc_layer_norm's job but the arrays, and its rows; with q >= 0 the normalized rows are also
 * quantized for the int8 step that reads them (design d) */
typedef struct {
    mc_norm_job job;             /* x, res (the residual buffer, src2), y from the buffers */
    int64_t rows;
    int32_t q, scale, scale32;   /* buffer numbers of that int8 step's mc_iq_call, or -1 */
    int32_t zero;                /* its zero points' buffer, or -1 (no zero points) */
} mc_norm_call;

/* An int8 product of float rows (Keras's int8 Dense with its inputs quantized per row): the
 * m x k rows (a_type) quantized by mc_igemm_quantize into buffers q (m x k int8) and scale (m
 * values of a_type), the scales widened to float32 (exactly) into buffer scale32, then
 * mc_igemm with B packed ahead -- the calls kernels.quantize_rows and kernels.matmul_int8
 * make. */
typedef struct {
    mc_igemm_call call;          /* g.a, g.a_scale, g.out from the buffers */
    int a_type;
    int32_t q, scale, scale32;   /* buffer numbers */
    int32_t zero;                /* -1, or the buffer of one int32 zero point per row: then the
                                    rows are min-max quantized (mc_igemm_quantize_zp) straight
                                    into scale32, scale unused, and the product has zero points */
    int quantized;               /* 1: the normalization before it filled q, scale and scale32
                                    (design d); the product only */
} mc_iq_call;

/* The fused attention with Q, K and V views of one buffer (a self-attention's three projections
 * side by side) at byte offsets into it, the output in another */
typedef struct {
    mc_attn_args a;              /* q, k, v, out from the buffers (mask NULL) */
    int64_t q_off, k_off, v_off;
} mc_attn_call;

typedef struct {
    int kind;                    /* MC_STEP_* */
    int32_t src, src2, dst;      /* buffer numbers: the input (GEMM: A), the second input of a
                                    sum or the residual of a GEMM or convolution (else -1), the
                                    output */
    int32_t block;               /* 1: this GEMM step and the next two run as a block (design
                                    e), when a run has all three; else 0 */
    union {
        mc_gemm_call gemm;       /* g.a, g.out from the buffers; one item, B packed */
        mc_conv_call conv;       /* x, out from the buffers */
        mc_dw_call dw;
        mc_pool_call pool;
        mc_add_call add;
        mc_norm_call norm;
        mc_pad_call pad;
        mc_iq_call iq;
        mc_attn_call attn;
        mc_cast_call cast;
    } u;
} mc_plan_step;

enum { MC_PLAN_OK = 0, MC_PLAN_NOMEM = -1, MC_PLAN_FORMAT = -2, MC_PLAN_EARG = -3,
       MC_PLAN_TOOBIG = -4 };

/* Runs steps [s0, s1) with buffer i at bufs[i] (a block whose three steps are all in the
 * range as one, design e).  Returns MC_PLAN_OK, or the failure of the first step that failed
 * (its index in *failed; a block's is its first step's): MC_PLAN_NOMEM (scratch),
 * MC_PLAN_FORMAT (packed weights the current level cannot use), MC_PLAN_EARG (a step of
 * unknown kind), MC_PLAN_TOOBIG (a step's scratch whose size overflows or exceeds
 * MC_BYTES_MAX). */
int mc_plan_run(const mc_plan_step *steps, int64_t s0, int64_t s1, char *const *bufs,
                int64_t *failed);

#endif
