/* Conversion kernels: declarations and the per-level selection.
 *
 * Design:
 *   a. A contiguous kernel converts n elements from src to dst (no overlap) and is named
 *      mc_cast_<src>_<dst>_<isa>.  The generic level has all 16 directions; a SIMD level
 *      provides the directions it speeds up, and mc_cast_kernel() falls back level by level.
 *   b. Strided data goes through mc_cast_strided(), the scalar twins in a loop: the reference.
 *   c. Kernels raise no floating-point flags that outlive them (the driver restores the
 *      caller's flags around every call).
 */
#ifndef MC_CONVERT_H_
#define MC_CONVERT_H_

#include <stdint.h>
#include "mc_convert_scalar.h"

typedef void (*mc_cast_fn)(const void *src, void *dst, int64_t n);

mc_cast_fn mc_cast_kernel(int level, int src_type, int dst_type);
void mc_cast_strided(int src_type, int dst_type, const char *src, int64_t src_stride,
                     char *dst, int64_t dst_stride, int64_t n);
int mc_dtype_size(int type);

#define MC_CAST_DECLARE_(isa)                                                         \
    void mc_cast_f32_f16_##isa(const void *, void *, int64_t);                        \
    void mc_cast_f16_f32_##isa(const void *, void *, int64_t);                        \
    void mc_cast_f32_bf16_##isa(const void *, void *, int64_t);                       \
    void mc_cast_bf16_f32_##isa(const void *, void *, int64_t);                       \
    void mc_cast_f64_f16_##isa(const void *, void *, int64_t);                        \
    void mc_cast_f16_f64_##isa(const void *, void *, int64_t);                        \
    void mc_cast_f64_bf16_##isa(const void *, void *, int64_t);                       \
    void mc_cast_bf16_f64_##isa(const void *, void *, int64_t);                       \
    void mc_cast_f16_bf16_##isa(const void *, void *, int64_t);                       \
    void mc_cast_bf16_f16_##isa(const void *, void *, int64_t);                       \
    void mc_cast_f32_f64_##isa(const void *, void *, int64_t);                        \
    void mc_cast_f64_f32_##isa(const void *, void *, int64_t);

MC_CAST_DECLARE_(generic)
MC_CAST_DECLARE_(avx2)
MC_CAST_DECLARE_(avx512)

#endif
