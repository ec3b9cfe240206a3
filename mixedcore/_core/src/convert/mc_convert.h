/* Conversions: the driver (mc_convert.c), the kernel table type, the strided reference loop.
 *
 * Design:
 *   a. A contiguous kernel converts n elements from src to dst (no overlap).  Each level's file
 *      (mc_convert_generic.c, mc_convert_<isa>.c) exports one table, indexed
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

/* --- the driver (mc_convert.c) ------------------------------------------------------------------ */

enum { MC_CAST_OK = 0, MC_CAST_EINVAL = -1, MC_CAST_MAXDIMS = 64 };

/* Converts the nd-dimensional array at src (type code src_type, byte strides src_strides) into
 * the one at dst (dst_type, dst_strides) of the same shape, at the current level, on the team
 * when it is large; the arrays must not overlap and must be aligned to their item size.  Any
 * strides (negative, zero for the source) are taken.  MC_CAST_EINVAL (nothing written): a type
 * code out of range, nd outside [0, MC_CAST_MAXDIMS], or a negative length. */
int mc_cast(const char *src, int src_type, const int64_t *src_strides, char *dst, int dst_type,
            const int64_t *dst_strides, int nd, const int64_t *shape);

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
