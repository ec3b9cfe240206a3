/* Generic (portable C) conversion kernels, the strided reference loop, and the generic table
 * (the driver is mc_convert.c).
 *
 * Design:
 *   a. The generic kernels are the scalar twins of mc_convert_scalar.h in a loop; compilers may
 *      auto-vectorise them for the platform's baseline, never beyond it.  That holds for the
 *      float8 directions and the saturating ones too: the generic table is complete.
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

/* float8 directions: the twins of design d (mc_convert_scalar.h) */
MC_GENERIC_(f32_e4m3, uint32_t, uint8_t, mc_f32_to_e4m3_bits)
MC_GENERIC_(f32_e5m2, uint32_t, uint8_t, mc_f32_to_e5m2_bits)
MC_GENERIC_(f32_e4m3_sat, uint32_t, uint8_t, mc_f32_to_e4m3_sat_bits)
MC_GENERIC_(f32_e5m2_sat, uint32_t, uint8_t, mc_f32_to_e5m2_sat_bits)
MC_GENERIC_(f16_e4m3, uint16_t, uint8_t, mc_f16_to_e4m3_bits)
MC_GENERIC_(f16_e5m2, uint16_t, uint8_t, mc_f16_to_e5m2_bits)
MC_GENERIC_(f16_e4m3_sat, uint16_t, uint8_t, mc_f16_to_e4m3_sat_bits)
MC_GENERIC_(f16_e5m2_sat, uint16_t, uint8_t, mc_f16_to_e5m2_sat_bits)
MC_GENERIC_(bf16_e4m3, uint16_t, uint8_t, mc_bf16_to_e4m3_bits)
MC_GENERIC_(bf16_e5m2, uint16_t, uint8_t, mc_bf16_to_e5m2_bits)
MC_GENERIC_(bf16_e4m3_sat, uint16_t, uint8_t, mc_bf16_to_e4m3_sat_bits)
MC_GENERIC_(bf16_e5m2_sat, uint16_t, uint8_t, mc_bf16_to_e5m2_sat_bits)
MC_GENERIC_(f64_e4m3, uint64_t, uint8_t, mc_f64_to_e4m3_bits)
MC_GENERIC_(f64_e5m2, uint64_t, uint8_t, mc_f64_to_e5m2_bits)
MC_GENERIC_(f64_e4m3_sat, uint64_t, uint8_t, mc_f64_to_e4m3_sat_bits)
MC_GENERIC_(f64_e5m2_sat, uint64_t, uint8_t, mc_f64_to_e5m2_sat_bits)
MC_GENERIC_(e4m3_f16, uint8_t, uint16_t, mc_e4m3_to_f16_bits)
MC_GENERIC_(e4m3_bf16, uint8_t, uint16_t, mc_e4m3_to_bf16_bits)
MC_GENERIC_(e4m3_f32, uint8_t, uint32_t, mc_e4m3_to_f32_bits)
MC_GENERIC_(e4m3_f64, uint8_t, uint64_t, mc_e4m3_to_f64_bits)
MC_GENERIC_(e5m2_f16, uint8_t, uint16_t, mc_e5m2_to_f16_bits)
MC_GENERIC_(e5m2_bf16, uint8_t, uint16_t, mc_e5m2_to_bf16_bits)
MC_GENERIC_(e5m2_f32, uint8_t, uint32_t, mc_e5m2_to_f32_bits)
MC_GENERIC_(e5m2_f64, uint8_t, uint64_t, mc_e5m2_to_f64_bits)
MC_GENERIC_(e4m3_e5m2, uint8_t, uint8_t, mc_e4m3_to_e5m2_bits)
MC_GENERIC_(e5m2_e4m3, uint8_t, uint8_t, mc_e5m2_to_e4m3_bits)
MC_GENERIC_(e5m2_e4m3_sat, uint8_t, uint8_t, mc_e5m2_to_e4m3_sat_bits)
MC_GENERIC_(e5m2_e5m2_sat, uint8_t, uint8_t, mc_e5m2_to_e5m2_sat_bits)

static void mc_copy1_(const void *s, void *d, int64_t n) { memcpy(d, s, (size_t)n); }
static void mc_copy2_(const void *s, void *d, int64_t n) { memcpy(d, s, (size_t)n * 2); }
static void mc_copy4_(const void *s, void *d, int64_t n) { memcpy(d, s, (size_t)n * 4); }
static void mc_copy8_(const void *s, void *d, int64_t n) { memcpy(d, s, (size_t)n * 8); }

/* Clipping changes no float8_e4m3fn value and keeps its NaNs: the saturating e4m3fn -> e4m3fn
 * and (every e4m3fn value being an e5m2 number) e4m3fn -> e5m2 casts are the plain ones. */
const mc_convert_table mc_convert_table_generic = {
    MC_CONVERT_WIDE_(generic),
    .cast[MC_F16][MC_F16] = mc_copy2_, .cast[MC_BF16][MC_BF16] = mc_copy2_,
    .cast[MC_F32][MC_F32] = mc_copy4_, .cast[MC_F64][MC_F64] = mc_copy8_,
    .cast[MC_E4M3][MC_E4M3] = mc_copy1_, .cast[MC_E5M2][MC_E5M2] = mc_copy1_,
    .cast[MC_F16][MC_E4M3] = mc_cast_f16_e4m3_generic, .cast[MC_F16][MC_E5M2] = mc_cast_f16_e5m2_generic,
    .cast[MC_BF16][MC_E4M3] = mc_cast_bf16_e4m3_generic, .cast[MC_BF16][MC_E5M2] = mc_cast_bf16_e5m2_generic,
    .cast[MC_F32][MC_E4M3] = mc_cast_f32_e4m3_generic, .cast[MC_F32][MC_E5M2] = mc_cast_f32_e5m2_generic,
    .cast[MC_F64][MC_E4M3] = mc_cast_f64_e4m3_generic, .cast[MC_F64][MC_E5M2] = mc_cast_f64_e5m2_generic,
    .cast[MC_E4M3][MC_F16] = mc_cast_e4m3_f16_generic, .cast[MC_E4M3][MC_BF16] = mc_cast_e4m3_bf16_generic,
    .cast[MC_E4M3][MC_F32] = mc_cast_e4m3_f32_generic, .cast[MC_E4M3][MC_F64] = mc_cast_e4m3_f64_generic,
    .cast[MC_E4M3][MC_E5M2] = mc_cast_e4m3_e5m2_generic,
    .cast[MC_E5M2][MC_F16] = mc_cast_e5m2_f16_generic, .cast[MC_E5M2][MC_BF16] = mc_cast_e5m2_bf16_generic,
    .cast[MC_E5M2][MC_F32] = mc_cast_e5m2_f32_generic, .cast[MC_E5M2][MC_F64] = mc_cast_e5m2_f64_generic,
    .cast[MC_E5M2][MC_E4M3] = mc_cast_e5m2_e4m3_generic,
    .cast_sat[MC_F16] = {mc_cast_f16_e4m3_sat_generic, mc_cast_f16_e5m2_sat_generic},
    .cast_sat[MC_BF16] = {mc_cast_bf16_e4m3_sat_generic, mc_cast_bf16_e5m2_sat_generic},
    .cast_sat[MC_F32] = {mc_cast_f32_e4m3_sat_generic, mc_cast_f32_e5m2_sat_generic},
    .cast_sat[MC_F64] = {mc_cast_f64_e4m3_sat_generic, mc_cast_f64_e5m2_sat_generic},
    .cast_sat[MC_E4M3] = {mc_copy1_, mc_cast_e4m3_e5m2_generic},
    .cast_sat[MC_E5M2] = {mc_cast_e5m2_e4m3_sat_generic, mc_cast_e5m2_e5m2_sat_generic}};

#define MC_STRIDED_(stype, dtype, expr)                                               \
    for (int64_t i = 0; i < n; ++i) {                                                 \
        stype v;                                                                      \
        memcpy(&v, src + i * ss, sizeof v);                                           \
        const dtype r = (dtype)expr(v);                                               \
        memcpy(dst + i * ds, &r, sizeof r);                                           \
    }                                                                                 \
    return;

#define MC_ID_(x) (x)

static uint64_t mc_load_bits_(const char *p, int size)
{
    uint8_t b; uint16_t h; uint32_t f; uint64_t d;
    switch (size) {
    case 1: memcpy(&b, p, 1); return b;
    case 2: memcpy(&h, p, 2); return h;
    case 4: memcpy(&f, p, 4); return f;
    default: memcpy(&d, p, 8); return d;
    }
}

static void mc_store_bits_(char *p, int size, uint64_t v)
{
    const uint8_t b = (uint8_t)v; const uint16_t h = (uint16_t)v; const uint32_t f = (uint32_t)v;
    switch (size) {
    case 1: memcpy(p, &b, 1); break;
    case 2: memcpy(p, &h, 2); break;
    case 4: memcpy(p, &f, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

static int mc_size_(int type)
{
    return type == MC_F64 ? 8 : type == MC_F32 ? 4 : type < MC_NDTYPES ? 2 : 1;
}

/* The four wider types by typed loops; a float8 side by the one-element twin mc_cast_bits. */
void mc_cast_strided(int src_type, int dst_type, int saturate, const char *src, int64_t ss,
                     char *dst, int64_t ds, int64_t n)
{
    if (src_type >= MC_NDTYPES || dst_type >= MC_NDTYPES) {
        const int sz = mc_size_(src_type), dz = mc_size_(dst_type);
        for (int64_t i = 0; i < n; ++i)
            mc_store_bits_(dst + i * ds, dz,
                           mc_cast_bits(src_type, dst_type, saturate, mc_load_bits_(src + i * ss, sz)));
        return;
    }
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
