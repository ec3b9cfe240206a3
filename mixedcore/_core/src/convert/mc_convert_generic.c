/* Generic (portable C) conversion kernels, the strided reference loop, and the generic table
 * (the driver is mc_convert.c).
 *
 * Design:
 *   a. The generic kernels are the scalar twins of mc_convert_scalar.h in a loop; compilers may
 *      auto-vectorise them for the platform's baseline, never beyond it.
 *   b. avx512bf16 has no conversion table of its own: it inherits the avx512 conversions, whose
 *      integer rounding is exact (VCVTNEPS2BF16 would need fix-ups for subnormals and NaNs and
 *      is no faster here).
 */
#include <string.h>
#include "mc_convert_kernels.h"

#define MC_GENERIC_(name, stype, dtype, expr)                                         \
    static void mc_cast_##name##_generic(const void *src, void *dst, int64_t n)              \
    {                                                                                 \
        const stype *s = (const stype *)src;                                          \
        dtype *d = (dtype *)dst;                                                      \
        for (int64_t i = 0; i < n; ++i)                                               \
            d[i] = expr(s[i]);                                                        \
    }

MC_GENERIC_(f32_f16, uint32_t, uint16_t, mc_f32_to_f16_bits)
MC_GENERIC_(f16_f32, uint16_t, uint32_t, mc_f16_to_f32_bits)
MC_GENERIC_(f32_bf16, uint32_t, uint16_t, mc_f32_to_bf16_bits)
MC_GENERIC_(bf16_f32, uint16_t, uint32_t, mc_bf16_to_f32_bits)
MC_GENERIC_(f64_f16, uint64_t, uint16_t, mc_f64_to_f16_bits)
MC_GENERIC_(f16_f64, uint16_t, uint64_t, mc_f16_to_f64_bits)
MC_GENERIC_(f64_bf16, uint64_t, uint16_t, mc_f64_to_bf16_bits)
MC_GENERIC_(bf16_f64, uint16_t, uint64_t, mc_bf16_to_f64_bits)
MC_GENERIC_(f16_bf16, uint16_t, uint16_t, mc_f16_to_bf16_bits)
MC_GENERIC_(bf16_f16, uint16_t, uint16_t, mc_bf16_to_f16_bits)
MC_GENERIC_(f32_f64, uint32_t, uint64_t, mc_f32_to_f64_bits)
MC_GENERIC_(f64_f32, uint64_t, uint32_t, mc_f64_to_f32_bits)

static void mc_copy2_(const void *s, void *d, int64_t n) { memcpy(d, s, (size_t)n * 2); }
static void mc_copy4_(const void *s, void *d, int64_t n) { memcpy(d, s, (size_t)n * 4); }
static void mc_copy8_(const void *s, void *d, int64_t n) { memcpy(d, s, (size_t)n * 8); }

const mc_convert_table mc_convert_table_generic = {
    {{mc_copy2_, mc_cast_f16_bf16_generic, mc_cast_f16_f32_generic, mc_cast_f16_f64_generic},
     {mc_cast_bf16_f16_generic, mc_copy2_, mc_cast_bf16_f32_generic, mc_cast_bf16_f64_generic},
     {mc_cast_f32_f16_generic, mc_cast_f32_bf16_generic, mc_copy4_, mc_cast_f32_f64_generic},
     {mc_cast_f64_f16_generic, mc_cast_f64_bf16_generic, mc_cast_f64_f32_generic, mc_copy8_}}};

#define MC_STRIDED_(stype, dtype, expr)                                               \
    for (int64_t i = 0; i < n; ++i) {                                                 \
        stype v;                                                                      \
        memcpy(&v, src + i * ss, sizeof v);                                           \
        const dtype r = (dtype)expr(v);                                               \
        memcpy(dst + i * ds, &r, sizeof r);                                           \
    }                                                                                 \
    return;

#define MC_ID_(x) (x)

void mc_cast_strided(int src_type, int dst_type, const char *src, int64_t ss,
                     char *dst, int64_t ds, int64_t n)
{
    switch (src_type * MC_NDTYPES + dst_type) {
    case MC_F16 * 4 + MC_F16: MC_STRIDED_(uint16_t, uint16_t, MC_ID_)
    case MC_F16 * 4 + MC_BF16: MC_STRIDED_(uint16_t, uint16_t, mc_f16_to_bf16_bits)
    case MC_F16 * 4 + MC_F32: MC_STRIDED_(uint16_t, uint32_t, mc_f16_to_f32_bits)
    case MC_F16 * 4 + MC_F64: MC_STRIDED_(uint16_t, uint64_t, mc_f16_to_f64_bits)
    case MC_BF16 * 4 + MC_F16: MC_STRIDED_(uint16_t, uint16_t, mc_bf16_to_f16_bits)
    case MC_BF16 * 4 + MC_BF16: MC_STRIDED_(uint16_t, uint16_t, MC_ID_)
    case MC_BF16 * 4 + MC_F32: MC_STRIDED_(uint16_t, uint32_t, mc_bf16_to_f32_bits)
    case MC_BF16 * 4 + MC_F64: MC_STRIDED_(uint16_t, uint64_t, mc_bf16_to_f64_bits)
    case MC_F32 * 4 + MC_F16: MC_STRIDED_(uint32_t, uint16_t, mc_f32_to_f16_bits)
    case MC_F32 * 4 + MC_BF16: MC_STRIDED_(uint32_t, uint16_t, mc_f32_to_bf16_bits)
    case MC_F32 * 4 + MC_F32: MC_STRIDED_(uint32_t, uint32_t, MC_ID_)
    case MC_F32 * 4 + MC_F64: MC_STRIDED_(uint32_t, uint64_t, mc_f32_to_f64_bits)
    case MC_F64 * 4 + MC_F16: MC_STRIDED_(uint64_t, uint16_t, mc_f64_to_f16_bits)
    case MC_F64 * 4 + MC_BF16: MC_STRIDED_(uint64_t, uint16_t, mc_f64_to_bf16_bits)
    case MC_F64 * 4 + MC_F32: MC_STRIDED_(uint64_t, uint32_t, mc_f64_to_f32_bits)
    case MC_F64 * 4 + MC_F64: MC_STRIDED_(uint64_t, uint64_t, MC_ID_)
    default: return;
    }
}
