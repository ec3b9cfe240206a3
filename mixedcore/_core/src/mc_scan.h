/* Overflow-scan kernels: scalar twins, declarations and the per-level selection.
 *
 * Design:
 *   a. Two operations on float16, bfloat16, float32 and float64 data:
 *        all_finite  n contiguous elements -> 1 when none is NaN or +-Inf, else 0;
 *        unscale     n contiguous elements multiplied in place by 1/scale, -> 1 when every INPUT
 *                    element was finite.  16-bit data is widened exactly to float32, multiplied
 *                    by the float32 factor and rounded back to nearest even with the conversion
 *                    twins (mc_convert_scalar.h), so the result is bit-identical to numpy /
 *                    ml_dtypes doing (x.astype(float32) * inv32).astype(x.dtype).  float32 data
 *                    is multiplied by inv32, float64 data by inv64 = 1 / scale in float64.
 *   b. Finiteness is an integer test on the exponent field: a value is finite exactly when its
 *      magnitude bits |x| are below those of +Inf.  No floating-point compare is involved, so no
 *      flag is raised and signalling NaNs are caught like any other NaN.
 *   c. Kernels are named mc_all_finite_<dtype>_<isa> and mc_unscale_<dtype>_<isa>; each level's
 *      file exports them in one table (mc_scan_table_<isa>), entries it leaves empty inherited
 *      from the level below (mc_kernels.c).  The strided loops (the scalar twins in a loop) are
 *      the reference and serve non-contiguous data.
 *   d. all_finite may stop at the first block holding a non-finite value; unscale always
 *      processes every element (the caller relies on all of them being unscaled).
 */
#ifndef MC_SCAN_H_
#define MC_SCAN_H_

#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"

/* --- scalar twins: the specification ------------------------------------------------------- */

/* |x| below the magnitude of +Inf (0x7C00 for float16, 0x7F80 for bfloat16, 0x7F800000 for
 * float32, 0x7FF0000000000000 for float64) <=> x is neither NaN nor infinite. */
static inline int mc_f16_finite_bits(uint16_t h) { return (h & 0x7FFFu) < 0x7C00u; }
static inline int mc_bf16_finite_bits(uint16_t h) { return (h & 0x7FFFu) < 0x7F80u; }
static inline int mc_f32_finite_bits(uint32_t f) { return (f & 0x7FFFFFFFu) < 0x7F800000u; }
static inline int mc_f64_finite_bits(uint64_t d)
{
    return (d & UINT64_C(0x7FFFFFFFFFFFFFFF)) < UINT64_C(0x7FF0000000000000);
}

static inline float mc_bits_f32_(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static inline uint32_t mc_f32_bits_(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }
static inline double mc_bits_f64_(uint64_t b) { double d; memcpy(&d, &b, 8); return d; }
static inline uint64_t mc_f64_bits_(double d) { uint64_t b; memcpy(&b, &d, 8); return b; }

/* One element unscaled: exact widening, one IEEE multiply, one RNE rounding back. */
static inline uint16_t mc_f16_unscale_bits(uint16_t h, float inv)
{
    return mc_f32_to_f16_bits(mc_f32_bits_(mc_bits_f32_(mc_f16_to_f32_bits(h)) * inv));
}
static inline uint16_t mc_bf16_unscale_bits(uint16_t h, float inv)
{
    return mc_f32_to_bf16_bits(mc_f32_bits_(mc_bits_f32_(mc_bf16_to_f32_bits(h)) * inv));
}
static inline uint32_t mc_f32_unscale_bits(uint32_t f, float inv)
{
    return mc_f32_bits_(mc_bits_f32_(f) * inv);
}
static inline uint64_t mc_f64_unscale_bits(uint64_t d, double inv)
{
    return mc_f64_bits_(mc_bits_f64_(d) * inv);
}

/* --- kernels ------------------------------------------------------------------------------- */

typedef int (*mc_all_finite_fn)(const void *p, int64_t n);
typedef int (*mc_unscale_fn)(void *p, int64_t n, float inv32, double inv64);

typedef struct {
    mc_all_finite_fn all_finite[MC_NDTYPES];
    mc_unscale_fn unscale[MC_NDTYPES];
} mc_scan_table;

extern const mc_scan_table mc_scan_table_generic;
extern const mc_scan_table mc_scan_table_avx2;
extern const mc_scan_table mc_scan_table_avx512;
extern const mc_scan_table mc_scan_table_avx512bf16;

int mc_all_finite_strided(int type, const char *p, int64_t stride, int64_t n);
int mc_unscale_strided(int type, char *p, int64_t stride, int64_t n, float inv32, double inv64);

/* The table of a level whose kernels are named mc_all_finite_<type>_<isa> / mc_unscale_<...>. */
#define MC_SCAN_TABLE_(isa)                                                           \
    {{mc_all_finite_f16_##isa, mc_all_finite_bf16_##isa, mc_all_finite_f32_##isa,     \
      mc_all_finite_f64_##isa},                                                       \
     {mc_unscale_f16_##isa, mc_unscale_bf16_##isa, mc_unscale_f32_##isa,              \
      mc_unscale_f64_##isa}}

#endif
