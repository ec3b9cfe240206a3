/* Conversions: the driver (mc_convert.c), the kernel table type, the strided reference loop.
 *
 * Design:
 *   a. A contiguous kernel converts n elements from src to dst (no overlap).  Each level's file
 *      (mc_convert_generic.c, mc_convert_<isa>.c) exports one table, indexed
 *      [source type][destination type] over the six type codes below MC_NCASTTYPES (the four
 *      wider types and the two float8 formats), plus the saturating float8 casts indexed
 *      [source type][float8 destination - MC_E4M3]; the generic table is complete (same-type
 *      entries are copies), a SIMD table holds the directions it speeds up and leaves the rest
 *      empty, to be inherited from the level below (mc_kernels.c).
 *   b. Strided data goes through mc_cast_strided(), the scalar twins in a loop: the reference
 *      (typed loops among the four wider types, the one-element twin mc_cast_bits when a side
 *      is float8).
 *   c. Kernels may raise floating-point flags inside; the engine restores the caller's
 *      environment after every call (mc_runtime.h).
 */
#ifndef MC_CONVERT_H_
#define MC_CONVERT_H_

#include <stdint.h>
#include "mc_convert_kernels.h"

/* --- the driver (mc_convert.c) ------------------------------------------------------------------ */

/* Bytes per element of a type code (float8 included). */
int mc_dtype_size(int type);

enum { MC_CAST_OK = 0, MC_CAST_EINVAL = -1, MC_CAST_MAXDIMS = 64 };

/* Converts the nd-dimensional array at src (type code src_type, byte strides src_strides) into
 * the one at dst (dst_type, dst_strides) of the same shape, at the current level, on the team
 * when it is large; the arrays must not overlap and must be aligned to their item size.  Any
 * strides (negative, zero for the source) are taken.  Type codes are those below MC_NCASTTYPES
 * (mc_types.h: the float8 formats included).  saturate = 1 clips to the float8 destination's
 * largest finite value before rounding (mc_convert_scalar.h, design d).  MC_CAST_EINVAL
 * (nothing written): a type code out of range, nd outside [0, MC_CAST_MAXDIMS], a negative
 * length, or saturate other than 0 / 1 or set for a destination that is not float8. */
int mc_cast(const char *src, int src_type, const int64_t *src_strides, char *dst, int dst_type,
            const int64_t *dst_strides, int nd, const int64_t *shape, int saturate);

#endif
