/* Generic (portable C) conversion kernels, the strided reference loop, and the per-level table.
 *
 * Design:
 *   a. The generic kernels are the scalar twins of mc_convert_scalar.h in a loop; compilers may
 *      auto-vectorise them for the platform's baseline, never beyond it.
 *   b. mc_cast_kernel() picks, for a level, the kernel of the highest level <= it that provides
 *      the direction: avx512bf16 uses the avx512 conversions, whose integer rounding is exact
 *      (VCVTNEPS2BF16 would need fix-ups for subnormals and NaNs and is no faster here).
 */
#include <string.h>
#include "mc_convert.h"
#include "mc_cpu.h"

int mc_dtype_size(int type)
{
    return type == MC_F64 ? 8 : type == MC_F32 ? 4 : 2;
}

#define MC_GENERIC_(name, stype, dtype, expr)                                         \
    void mc_cast_##name##_generic(const void *src, void *dst, int64_t n)              \
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

#define MC_TABLE_(isa)                                                                \
    {{NULL, mc_cast_f16_bf16_##isa, mc_cast_f16_f32_##isa, mc_cast_f16_f64_##isa},    \
     {mc_cast_bf16_f16_##isa, NULL, mc_cast_bf16_f32_##isa, mc_cast_bf16_f64_##isa},  \
     {mc_cast_f32_f16_##isa, mc_cast_f32_bf16_##isa, NULL, mc_cast_f32_f64_##isa},    \
     {mc_cast_f64_f16_##isa, mc_cast_f64_bf16_##isa, mc_cast_f64_f32_##isa, NULL}}

static const mc_cast_fn mc_generic_table_[4][4] = MC_TABLE_(generic);
#if defined(MC_HAVE_AVX2)
static const mc_cast_fn mc_avx2_table_[4][4] = MC_TABLE_(avx2);
#endif
#if defined(MC_HAVE_AVX512)
static const mc_cast_fn mc_avx512_table_[4][4] = MC_TABLE_(avx512);
#endif

mc_cast_fn mc_cast_kernel(int level, int src_type, int dst_type)
{
    if (src_type < 0 || src_type >= MC_NDTYPES || dst_type < 0 || dst_type >= MC_NDTYPES)
        return NULL;
    if (src_type == dst_type)
        return src_type == MC_F64 ? mc_copy8_ : src_type == MC_F32 ? mc_copy4_ : mc_copy2_;
#if defined(MC_HAVE_AVX512)
    if (level >= MC_ISA_AVX512)
        return mc_avx512_table_[src_type][dst_type];
#endif
#if defined(MC_HAVE_AVX2)
    if (level >= MC_ISA_AVX2)
        return mc_avx2_table_[src_type][dst_type];
#endif
    (void)level;
    return mc_generic_table_[src_type][dst_type];
}

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
