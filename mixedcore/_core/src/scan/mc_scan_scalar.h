/* Overflow scans, the scalar twins: the specification every scan kernel is tested against, and
 * the element loop of the strided reference paths (mc_scan_generic.c).
 *
 * Design:
 *   a. all_finite and unscale of one element (the operations are described in mc_scan.h):
 *      finiteness is an integer test on the exponent field -- a value is finite exactly when its
 *      magnitude bits |x| are below those of +Inf -- so no flag is raised and signalling NaNs
 *      are caught like any other NaN; unscale widens 16-bit data exactly to float32, multiplies
 *      by the float32 factor and rounds back to nearest even with the conversion twins
 *      (mc_convert_scalar.h).
 *   b. The numerics statistics of one element (mc_stats_add): an integer compare of its
 *      magnitude bits against per-dtype limits (mc_stat_limits below), the ends of the ranges
 *      being the first bit patterns that convert differently.
 *   c. Header-only (static inline) so every level's file and the tests can call them.
 */
#ifndef MC_SCAN_SCALAR_H_
#define MC_SCAN_SCALAR_H_

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

/* --- numerics statistics (design e) --------------------------------------------------------- */

enum {
    MC_STAT_NAN, MC_STAT_INF, MC_STAT_ZERO,
    MC_STAT_F16_OVERFLOW, MC_STAT_F16_SUBNORMAL, MC_STAT_F16_UNDERFLOW,
    MC_STAT_BF16_OVERFLOW, MC_STAT_BF16_SUBNORMAL, MC_STAT_BF16_UNDERFLOW,
    MC_NSTATS
};

typedef struct {
    int64_t count[MC_NSTATS];
    uint64_t max_bits;          /* magnitude bits of the largest finite |x|; 0 when none */
} mc_stats;

/* Magnitude-bit limits of one dtype.  With a = |x| as bits:
 *   NaN a > inf;  Inf a == inf;  zero a == 0;
 *   overflows to Inf in T        over <= a < inf
 *   rounds to zero in T          0 < a <= flush
 *   rounds to a subnormal of T   flush < a < sub, a != 0
 * A class that cannot happen for the dtype has over = inf, or flush = 0 and sub = 1. */
typedef struct {
    uint64_t inf, f16_over, f16_flush, f16_sub, bf16_over, bf16_flush, bf16_sub;
} mc_stat_limits;

/* float16 data: its own subnormals; every finite float16 is a normal bfloat16 */
#define MC_STAT_LIMITS_F16_ 0x7C00u, 0x7C00u, 0u, 0x0400u, 0x7C00u, 0u, 1u
/* bfloat16 data: 65536 (0x4780) is the first value float16 cannot hold, 2**-25 (0x3300) the
 * last that rounds to zero, 2**-14 (0x3880) the first normal; its own subnormals below 0x0080 */
#define MC_STAT_LIMITS_BF16_ 0x7F80u, 0x4780u, 0x3300u, 0x3880u, 0x7F80u, 0u, 0x0080u
/* float32 data: 65520 = 65504 + half an ulp (ties round to Inf), 2**-25 (ties to zero),
 * 2**-14 - 2**-25 (ties to 2**-14); bfloat16: (2 - 2**-8) * 2**127, 2**-134, 2**-126 - 2**-134 */
#define MC_STAT_LIMITS_F32_ 0x7F800000u, 0x477FF000u, 0x33000000u, 0x387FE000u, 0x7F7F8000u, \
    0x00008000u, 0x007F8000u
/* float64 data: the same real limits as float32's */
#define MC_STAT_LIMITS_F64_ UINT64_C(0x7FF0000000000000), UINT64_C(0x40EFFE0000000000),        \
    UINT64_C(0x3E60000000000000), UINT64_C(0x3F0FFC0000000000), UINT64_C(0x47EFF00000000000), \
    UINT64_C(0x3790000000000000), UINT64_C(0x380FE00000000000)

static const mc_stat_limits mc_stat_limits_of[MC_NDTYPES] = {
    {MC_STAT_LIMITS_F16_}, {MC_STAT_LIMITS_BF16_}, {MC_STAT_LIMITS_F32_}, {MC_STAT_LIMITS_F64_}};

/* The scalar twin: one element's magnitude bits added to the tally. */
static inline void mc_stats_add(mc_stats *t, const mc_stat_limits *l, uint64_t a)
{
    if (a > l->inf) {
        t->count[MC_STAT_NAN] += 1;
        return;
    }
    if (a == l->inf) {
        t->count[MC_STAT_INF] += 1;
        return;
    }
    if (a > t->max_bits)
        t->max_bits = a;
    if (a == 0) {
        t->count[MC_STAT_ZERO] += 1;
        return;
    }
    t->count[MC_STAT_F16_OVERFLOW] += a >= l->f16_over;
    t->count[MC_STAT_F16_UNDERFLOW] += a <= l->f16_flush;
    t->count[MC_STAT_F16_SUBNORMAL] += a > l->f16_flush && a < l->f16_sub;
    t->count[MC_STAT_BF16_OVERFLOW] += a >= l->bf16_over;
    t->count[MC_STAT_BF16_UNDERFLOW] += a <= l->bf16_flush;
    t->count[MC_STAT_BF16_SUBNORMAL] += a > l->bf16_flush && a < l->bf16_sub;
}

#endif
