/* The conversion family's level kernels: their types and the family's table (one per level,
 * exported by mc_convert_generic.c and mc_convert_<isa>.c, resolved by runtime/mc_kernels.c).
 * The level files, the scalar twins and the kernel tables include this header; the drivers' API
 * is mc_convert.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_CONVERT_KERNELS_H_
#define MC_CONVERT_KERNELS_H_

#include <stdint.h>
#include "mc_convert_scalar.h"

typedef void (*mc_cast_fn)(const void *src, void *dst, int64_t n);

/* cast[src][dst] converts; cast_sat[src][dst - MC_E4M3] converts to a float8 type after
 * clipping to its largest finite value (the saturating casts). */
typedef struct {
    mc_cast_fn cast[MC_NCASTTYPES][MC_NCASTTYPES];
    mc_cast_fn cast_sat[MC_NCASTTYPES][MC_NCASTTYPES - MC_E4M3];
} mc_convert_table;

extern const mc_convert_table mc_convert_table_generic;
extern const mc_convert_table mc_convert_table_avx2;
extern const mc_convert_table mc_convert_table_avx512;

/* n elements from src (stride ss bytes) to dst (stride ds bytes) by the scalar twins. */
void mc_cast_strided(int src_type, int dst_type, int saturate, const char *src, int64_t ss,
                     char *dst, int64_t ds, int64_t n);

/* The table entries, as designators, of a level whose kernels among the four wider types are
 * named mc_cast_<src>_<dst>_<isa>. */
#define MC_CONVERT_WIDE_(isa)                                                                   \
    .cast[MC_F16][MC_BF16] = mc_cast_f16_bf16_##isa, .cast[MC_F16][MC_F32] = mc_cast_f16_f32_##isa, \
    .cast[MC_F16][MC_F64] = mc_cast_f16_f64_##isa, .cast[MC_BF16][MC_F16] = mc_cast_bf16_f16_##isa, \
    .cast[MC_BF16][MC_F32] = mc_cast_bf16_f32_##isa,                                            \
    .cast[MC_BF16][MC_F64] = mc_cast_bf16_f64_##isa, .cast[MC_F32][MC_F16] = mc_cast_f32_f16_##isa, \
    .cast[MC_F32][MC_BF16] = mc_cast_f32_bf16_##isa,                                            \
    .cast[MC_F32][MC_F64] = mc_cast_f32_f64_##isa, .cast[MC_F64][MC_F16] = mc_cast_f64_f16_##isa,   \
    .cast[MC_F64][MC_BF16] = mc_cast_f64_bf16_##isa,                                            \
    .cast[MC_F64][MC_F32] = mc_cast_f64_f32_##isa

/* The float8 entries every vector level has: float16, bfloat16 and float32 to float8 (plain and
 * saturating) and float8 to them, named mc_cast_<src>_<dst>[_sat]_<isa>. */
#define MC_CONVERT_F8_(isa)                                                                     \
    .cast[MC_F16][MC_E4M3] = mc_cast_f16_e4m3_##isa, .cast[MC_F16][MC_E5M2] = mc_cast_f16_e5m2_##isa, \
    .cast[MC_BF16][MC_E4M3] = mc_cast_bf16_e4m3_##isa,                                          \
    .cast[MC_BF16][MC_E5M2] = mc_cast_bf16_e5m2_##isa,                                          \
    .cast[MC_F32][MC_E4M3] = mc_cast_f32_e4m3_##isa, .cast[MC_F32][MC_E5M2] = mc_cast_f32_e5m2_##isa, \
    .cast_sat[MC_F16] = {mc_cast_f16_e4m3_sat_##isa, mc_cast_f16_e5m2_sat_##isa},                \
    .cast_sat[MC_BF16] = {mc_cast_bf16_e4m3_sat_##isa, mc_cast_bf16_e5m2_sat_##isa},             \
    .cast_sat[MC_F32] = {mc_cast_f32_e4m3_sat_##isa, mc_cast_f32_e5m2_sat_##isa},                \
    .cast[MC_E4M3][MC_F16] = mc_cast_e4m3_f16_##isa, .cast[MC_E4M3][MC_BF16] = mc_cast_e4m3_bf16_##isa, \
    .cast[MC_E4M3][MC_F32] = mc_cast_e4m3_f32_##isa, .cast[MC_E5M2][MC_F16] = mc_cast_e5m2_f16_##isa, \
    .cast[MC_E5M2][MC_BF16] = mc_cast_e5m2_bf16_##isa,                                          \
    .cast[MC_E5M2][MC_F32] = mc_cast_e5m2_f32_##isa

#endif
