/* The activation family's level kernels: their types and the family's table (one per level,
 * exported by mc_act_generic.c and mc_act_<isa>.c, resolved by runtime/mc_kernels.c).  The
 * level files, the scalar twins and the kernel tables include this header; the drivers' API is
 * mc_act.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_ACT_KERNELS_H_
#define MC_ACT_KERNELS_H_

#include <stdint.h>

enum {
    MC_ACT_NONE = 0, MC_ACT_RELU = 1, MC_ACT_GELU = 2, MC_ACT_SIGMOID = 3, MC_ACT_TANH = 4,
    MC_ACT_RELU6 = 5, MC_ACT_SILU = 6, MC_ACT_HARD_SIGMOID = 7, MC_ACT_HARD_SILU = 8
};
#define MC_ACT_COUNT 9

typedef void (*mc_act_forward_fn)(int act, const float *x, float *y, int64_t n);
typedef void (*mc_act_backward_fn)(int act, const float *dy, const float *x, float *dx, int64_t n);
/* Softmax (log_ 0) or log-softmax (log_ 1) of each of `rows` contiguous rows of n float32
 * (design e). */
typedef void (*mc_softmax_fn)(const float *x, float *y, int64_t rows, int64_t n, int log_);

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
