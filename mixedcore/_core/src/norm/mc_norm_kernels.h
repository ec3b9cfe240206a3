/* The layer-normalization family's level kernels: their types and the family's table (one per
 * level, exported by mc_norm_generic.c and mc_norm_<isa>.c, resolved by runtime/mc_kernels.c).
 * The level files, the scalar twins and the kernel tables include this header; the drivers' API
 * is mc_norm.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_NORM_KERNELS_H_
#define MC_NORM_KERNELS_H_

#include <stdint.h>

typedef struct {
    const void *x;          /* rows of n elements of x_type */
    const void *res;        /* NULL, or rows of n elements of res_type */
    const float *gamma;     /* NULL or n float32 */
    const float *beta;      /* NULL or n float32 */
    void *y;                /* rows of n elements of y_type */
    float *mean;            /* NULL or one float32 per row */
    float *rstd;            /* NULL or one float32 per row */
    int64_t n;
    double eps;
    int x_type, res_type, y_type;
} mc_norm_job;

/* Rows [r0, r1) of the job (design a-d). */
typedef void (*mc_layer_norm_fn)(const mc_norm_job *job, int64_t r0, int64_t r1);

typedef struct {
    mc_layer_norm_fn layer_norm;
} mc_norm_table;

extern const mc_norm_table mc_norm_table_generic;
extern const mc_norm_table mc_norm_table_avx2;
extern const mc_norm_table mc_norm_table_avx512;

#define MC_NORM_TABLE_(isa) {mc_layer_norm_##isa}

#endif
