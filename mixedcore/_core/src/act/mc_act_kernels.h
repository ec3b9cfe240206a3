/* The activation family's level kernels: their types and the family's table (one per level,
 * exported by mc_act_generic.c and mc_act_<isa>.c, resolved by runtime/mc_kernels.c).  The
 * level files, the scalar twins and the kernel tables include this header; the drivers' API is
 * mc_act.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_ACT_KERNELS_H_
#define MC_ACT_KERNELS_H_

#include <stdint.h>
#include "mc_types.h"

/* The activation codes the bindings pass (MC_ACT_COUNT of them), then the drivers' own:
 * MC_ACT_GELU_16 is gelu evaluated in float32 for a 16-bit output (mc_act_scalar.h, design f),
 * forward only. */
enum {
    MC_ACT_NONE = 0, MC_ACT_RELU = 1, MC_ACT_GELU = 2, MC_ACT_SIGMOID = 3, MC_ACT_TANH = 4,
    MC_ACT_RELU6 = 5, MC_ACT_SILU = 6, MC_ACT_HARD_SIGMOID = 7, MC_ACT_HARD_SILU = 8,
    MC_ACT_GELU_16 = 9
};
#define MC_ACT_COUNT 9

/* The activation a driver applies to values it then rounds to out_type (a type code). */
static inline int mc_act_for_output(int act, int out_type)
{
    return act == MC_ACT_GELU && (out_type == MC_F16 || out_type == MC_BF16) ? MC_ACT_GELU_16
                                                                              : act;
}

typedef void (*mc_act_forward_fn)(int act, const float *x, float *y, int64_t n);
typedef void (*mc_act_backward_fn)(int act, const float *dy, const float *x, float *dx, int64_t n);
/* The softmax modes: softmax and log-softmax (float64 inside, design e), and softmax for a
 * 16-bit result (float32 inside, mc_act_scalar.h design g). */
enum { MC_SOFTMAX_EXP = 0, MC_SOFTMAX_LOG = 1, MC_SOFTMAX_16 = 2 };

/* Softmax (mode MC_SOFTMAX_*) of each of `rows` contiguous rows of n float32
 * (design e). */
typedef void (*mc_softmax_fn)(const float *x, float *y, int64_t rows, int64_t n, int mode);

typedef struct {
    mc_act_forward_fn forward;
    mc_act_backward_fn backward;
    mc_softmax_fn softmax;
} mc_act_table;

extern const mc_act_table mc_act_table_generic;
extern const mc_act_table mc_act_table_avx2;
extern const mc_act_table mc_act_table_avx512;

#define MC_ACT_TABLE_(isa) {mc_act_forward_f32_##isa, mc_act_backward_f32_##isa, mc_softmax_f32_##isa}

#endif
