/* Conversion kernels: the table type, the strided reference loop, and the generic table.
 *
 * Design:
 *   a. A contiguous kernel converts n elements from src to dst (no overlap).  Each level's file
 *      (mc_convert.c for generic, mc_convert_<isa>.c) exports one table, indexed
 *      [source type][destination type]; the generic table is complete (same-type entries are
 *      copies), a SIMD table holds the directions it speeds up and leaves the rest empty, to be
 *      inherited from the level below (mc_kernels.c).
 *   b. Strided data goes through mc_cast_strided(), the scalar twins in a loop: the reference.
 *   c. Kernels may raise floating-point flags inside; the engine restores the caller's
 *      environment after every call (mc_runtime.h).
 */
#ifndef MC_CONVERT_H_
#define MC_CONVERT_H_

#include <stdint.h>
#include "mc_convert_scalar.h"

typedef void (*mc_cast_fn)(const void *src, void *dst, int64_t n);

typedef struct {
    mc_cast_fn cast[MC_NDTYPES][MC_NDTYPES];
} mc_convert_table;

extern const mc_convert_table mc_convert_table_generic;
extern const mc_convert_table mc_convert_table_avx2;
extern const mc_convert_table mc_convert_table_avx512;

void mc_cast_strided(int src_type, int dst_type, const char *src, int64_t src_stride,
                     char *dst, int64_t dst_stride, int64_t n);
int mc_dtype_size(int type);

/* The table of a level whose kernels are named mc_cast_<src>_<dst>_<isa>. */
#define MC_CONVERT_TABLE_(isa)                                                        \
    {{[MC_F16] = {[MC_BF16] = mc_cast_f16_bf16_##isa, [MC_F32] = mc_cast_f16_f32_##isa,  \
                  [MC_F64] = mc_cast_f16_f64_##isa},                                  \
      [MC_BF16] = {[MC_F16] = mc_cast_bf16_f16_##isa, [MC_F32] = mc_cast_bf16_f32_##isa, \
                   [MC_F64] = mc_cast_bf16_f64_##isa},                                \
      [MC_F32] = {[MC_F16] = mc_cast_f32_f16_##isa, [MC_BF16] = mc_cast_f32_bf16_##isa,  \
                  [MC_F64] = mc_cast_f32_f64_##isa},                                  \
      [MC_F64] = {[MC_F16] = mc_cast_f64_f16_##isa, [MC_BF16] = mc_cast_f64_bf16_##isa,  \
                  [MC_F32] = mc_cast_f64_f32_##isa}}}

#endif
