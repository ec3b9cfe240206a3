/* AVX2 + F16C conversion kernels.
 *
 * Design:
 *   a. The same algorithms as the AVX-512 unit (see mc_convert_avx512.c, design b-d) on 256-bit
 *      vectors.  AVX2 has no 16-bit masked loads, so the last partial block runs through the
 *      scalar twins.
 *   b. AVX2 cannot choose a rounding mode per instruction, so the float64 -> float32 round-to-odd
 *      step is built from the nearest-even conversion: when the rounded value's magnitude
 *      exceeds the input's, decrementing its bit pattern gives the truncated value (the patterns
 *      of same-signed floats are ordered like their magnitudes); then the last bit is set when
 *      the conversion was inexact.  This assumes the default rounding mode, as numpy does.
 *   c. Lanes holding NaNs that need a rule of their own are recomputed by the scalar twins.
 *   d. float8: the AVX-512 unit's integer algorithms (mc_convert_avx512.c, design f) on 8
 *      float32 lanes or 16 16-bit lanes; the subnormal table is looked up with VPSHUFB, each
 *      16-bit lane indexing its two bytes.  float16, bfloat16 and float32 sources and
 *      destinations; float64 and float8 <-> float8 take the generic kernels.
 */
#include <immintrin.h>
#include <stdint.h>
#include "mc_convert_kernels.h"
#include "mc_simd_avx2.h"

#define MC_FIX_LANES_(mask, step, s, d, twin)                                         \
    do {                                                                              \
        unsigned mc_m_ = (unsigned)(mask);                                            \
        while (mc_m_) {                                                               \
            const int k = __builtin_ctz(mc_m_) / (step);                              \
            (d)[k] = twin((s)[k]);                                                    \
            mc_m_ &= ~(((1u << (step)) - 1u) << (k * (step)));                       \
        }                                                                             \
    } while (0)

/* The kernel mc_cast_<name>_avx2: blocks of W elements, the scalar twin for the rest. */
#define MC_ENTRY_(name, STYPE, DTYPE, W, block, twin)                                 \
    static void mc_cast_##name##_avx2(const void *src, void *dst, int64_t n)                 \
    {                                                                                 \
        const STYPE *s = (const STYPE *)src;                                          \
        DTYPE *d = (DTYPE *)dst;                                                      \
        int64_t i = 0;                                                                \
        for (; i + (W) <= n; i += (W))                                                \
            block(s + i, d + i);                                                      \
        for (; i < n; ++i)                                                            \
            d[i] = twin(s[i]);                                                        \
    }

/* 16-bit lane mask (two movemask bits per lane) of float16 signalling NaNs. */
MC_INLINE_ unsigned f16_snan_bits_(__m128i h)
{
    const __m128i a = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    const __m128i nan = _mm_cmpgt_epi16(a, _mm_set1_epi16(0x7C00));
    const __m128i sig = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x0200)), _mm_setzero_si128());
    return (unsigned)_mm_movemask_epi8(_mm_and_si128(nan, sig));
}

/* Two vectors of 32-bit lanes holding 16-bit values -> 16 packed 16-bit values, in order. */
MC_INLINE_ __m256i pack_u32_to_u16_(__m256i lo, __m256i hi)
{
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
}

/* --- float32 <-> float16 ------------------------------------------------------------------- */

MC_INLINE_ void f32_f16_block_(const uint32_t *s, uint16_t *d)
{
    const __m256i b = _mm256_loadu_si256((const __m256i *)s);
    _mm_storeu_si128((__m128i *)d, _mm256_cvtps_ph(_mm256_castsi256_ps(b), MC_RNE_));
    const __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    const __m256i sig = _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x00400000)),
                                           _mm256_setzero_si256());
    const unsigned snan = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_and_si256(nan, sig)));
    if (snan)
        MC_FIX_LANES_(snan, 1, s, d, mc_f32_to_f16_bits);
}

MC_ENTRY_(f32_f16, uint32_t, uint16_t, 8, f32_f16_block_, mc_f32_to_f16_bits)

MC_INLINE_ void f16_f32_block_(const uint16_t *s, uint32_t *d)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)s);
    _mm256_storeu_ps((float *)d, _mm256_cvtph_ps(h));
    const unsigned snan = f16_snan_bits_(h);
    if (snan)
        MC_FIX_LANES_(snan, 2, s, d, mc_f16_to_f32_bits);
}

MC_ENTRY_(f16_f32, uint16_t, uint32_t, 8, f16_f32_block_, mc_f16_to_f32_bits)

/* --- float32 <-> bfloat16 ------------------------------------------------------------------ */

MC_INLINE_ void f32_bf16_block_(const uint32_t *s, uint16_t *d)
{
    const __m256i lo = mc_f32_to_bf16_lanes_avx2(_mm256_loadu_si256((const __m256i *)s));
    const __m256i hi = mc_f32_to_bf16_lanes_avx2(_mm256_loadu_si256((const __m256i *)(s + 8)));
    _mm256_storeu_si256((__m256i *)d, pack_u32_to_u16_(lo, hi));
}

MC_ENTRY_(f32_bf16, uint32_t, uint16_t, 16, f32_bf16_block_, mc_f32_to_bf16_bits)

MC_INLINE_ void bf16_f32_block_(const uint16_t *s, uint32_t *d)
{
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s));
    _mm256_storeu_si256((__m256i *)d, _mm256_slli_epi32(w, 16));
}

MC_ENTRY_(bf16_f32, uint16_t, uint32_t, 8, bf16_f32_block_, mc_bf16_to_f32_bits)

/* --- float64 -> 16-bit ----------------------------------------------------------------------- */

/* 64-bit lane masks -> 32-bit lane masks, in order. */
MC_INLINE_ __m128i narrow_mask_(__m256d m)
{
    const __m256i idx = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(m), idx));
}

/* float64 -> float32 bits by round-to-odd (design b). */
MC_INLINE_ __m128i f64_to_f32_odd_(__m256d x)
{
    const __m128 r = _mm256_cvtpd_ps(x);
    const __m256d back = _mm256_cvtps_pd(r);
    const __m256d sign = _mm256_set1_pd(-0.0);
    const __m256d gt = _mm256_cmp_pd(_mm256_andnot_pd(sign, back), _mm256_andnot_pd(sign, x), _CMP_GT_OQ);
    const __m256d ne = _mm256_cmp_pd(back, x, _CMP_NEQ_OQ);
    __m128i ri = _mm_add_epi32(_mm_castps_si128(r), narrow_mask_(gt));
    return _mm_or_si128(ri, _mm_and_si128(narrow_mask_(ne), _mm_set1_epi32(1)));
}

MC_INLINE_ unsigned f64_nan_bits_(__m256d x0, __m256d x1)
{
    return (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(x0, x0, _CMP_UNORD_Q)) |
           ((unsigned)_mm256_movemask_pd(_mm256_cmp_pd(x1, x1, _CMP_UNORD_Q)) << 4);
}

MC_INLINE_ void f64_f16_block_(const uint64_t *s, uint16_t *d)
{
    const __m256d x0 = _mm256_loadu_pd((const double *)s);
    const __m256d x1 = _mm256_loadu_pd((const double *)(s + 4));
    const __m256i f = _mm256_set_m128i(f64_to_f32_odd_(x1), f64_to_f32_odd_(x0));
    _mm_storeu_si128((__m128i *)d, _mm256_cvtps_ph(_mm256_castsi256_ps(f), MC_RNE_));
    const unsigned nan = f64_nan_bits_(x0, x1);
    if (nan)
        MC_FIX_LANES_(nan, 1, s, d, mc_f64_to_f16_bits);
}

MC_ENTRY_(f64_f16, uint64_t, uint16_t, 8, f64_f16_block_, mc_f64_to_f16_bits)

MC_INLINE_ __m256i f64x8_to_bf16_lanes_(const uint64_t *s)
{
    const __m256d x0 = _mm256_loadu_pd((const double *)s);
    const __m256d x1 = _mm256_loadu_pd((const double *)(s + 4));
    return mc_f32_to_bf16_lanes_avx2(_mm256_set_m128i(f64_to_f32_odd_(x1), f64_to_f32_odd_(x0)));
}

MC_INLINE_ void f64_bf16_block_(const uint64_t *s, uint16_t *d)
{
    _mm256_storeu_si256((__m256i *)d, pack_u32_to_u16_(f64x8_to_bf16_lanes_(s), f64x8_to_bf16_lanes_(s + 8)));
}

MC_ENTRY_(f64_bf16, uint64_t, uint16_t, 16, f64_bf16_block_, mc_f64_to_bf16_bits)

/* --- 16-bit -> float64 ----------------------------------------------------------------------- */

MC_INLINE_ void store_f32x8_as_f64_(uint64_t *d, __m256 f)
{
    _mm256_storeu_pd((double *)d, _mm256_cvtps_pd(_mm256_castps256_ps128(f)));
    _mm256_storeu_pd((double *)(d + 4), _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)));
}

MC_INLINE_ void f16_f64_block_(const uint16_t *s, uint64_t *d)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)s);
    store_f32x8_as_f64_(d, _mm256_cvtph_ps(h));
    const unsigned snan = f16_snan_bits_(h);
    if (snan)
        MC_FIX_LANES_(snan, 2, s, d, mc_f16_to_f64_bits);
}

MC_ENTRY_(f16_f64, uint16_t, uint64_t, 8, f16_f64_block_, mc_f16_to_f64_bits)

MC_INLINE_ void bf16_f64_block_(const uint16_t *s, uint64_t *d)
{
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s)), 16);
    store_f32x8_as_f64_(d, _mm256_castsi256_ps(w));
}

MC_ENTRY_(bf16_f64, uint16_t, uint64_t, 8, bf16_f64_block_, mc_bf16_to_f64_bits)

/* --- float16 <-> bfloat16 -------------------------------------------------------------------- */

MC_INLINE_ void f16_bf16_block_(const uint16_t *s, uint16_t *d)
{
    const __m256i lo = _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)s)));
    const __m256i hi = _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 8))));
    _mm256_storeu_si256((__m256i *)d, pack_u32_to_u16_(mc_f32_to_bf16_lanes_avx2(lo), mc_f32_to_bf16_lanes_avx2(hi)));
}

MC_ENTRY_(f16_bf16, uint16_t, uint16_t, 16, f16_bf16_block_, mc_f16_to_bf16_bits)

MC_INLINE_ void bf16_f16_block_(const uint16_t *s, uint16_t *d)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)s);
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    const __m128i r = _mm256_cvtps_ph(_mm256_castsi256_ps(w), MC_RNE_);
    const __m128i a = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    const __m128i nan = _mm_cmpgt_epi16(a, _mm_set1_epi16(0x7F80));
    const __m128i qnan = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)), _mm_set1_epi16(0x7E00));
    _mm_storeu_si128((__m128i *)d, _mm_blendv_epi8(r, qnan, nan));
}

MC_ENTRY_(bf16_f16, uint16_t, uint16_t, 8, bf16_f16_block_, mc_bf16_to_f16_bits)

/* --- float32 <-> float64 --------------------------------------------------------------------- */

MC_INLINE_ void f32_f64_block_(const uint32_t *s, uint64_t *d)
{
    store_f32x8_as_f64_(d, _mm256_loadu_ps((const float *)s));
}

MC_ENTRY_(f32_f64, uint32_t, uint64_t, 8, f32_f64_block_, mc_f32_to_f64_bits)

MC_INLINE_ void f64_f32_block_(const uint64_t *s, uint32_t *d)
{
    const __m128 lo = _mm256_cvtpd_ps(_mm256_loadu_pd((const double *)s));
    const __m128 hi = _mm256_cvtpd_ps(_mm256_loadu_pd((const double *)(s + 4)));
    _mm256_storeu_ps((float *)d, _mm256_set_m128(hi, lo));
}

MC_ENTRY_(f64_f32, uint64_t, uint32_t, 8, f64_f32_block_, mc_f64_to_f32_bits)


/* --- float8 (design d) ------------------------------------------------------------------------ */

/* float32 bits -> float8 codes in the low byte of each lane (see mc_convert_avx512.c). */
MC_INLINE_ __m256i f8_encode_(__m256i f, int e5m2, int sat)
{
    const int sh = e5m2 ? 21 : 20, k = e5m2 ? 16 : 9;
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i a = _mm256_and_si256(f, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(f, 24), _mm256_set1_epi32(0x80));
    const __m256i b = _mm256_sub_epi32(a, _mm256_set1_epi32((e5m2 ? 112 : 120) << 23));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, sh), one);
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32((1 << (sh - 1)) - 1)), lsb), sh);
    /* subnormal results: |x| + 2**(23 - k) rounded to nearest even (mc_convert_avx512.c,
     * design g; the default rounding mode, which every call runs under) */
    const __m256i magic = _mm256_set1_epi32((127 + 23 - k) << 23);
    const __m256i q = _mm256_sub_epi32(
        _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(magic))), magic);
    /* a has no sign bit: signed compares order it */
    const __m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(e5m2 ? 0x38800000 : 0x3C800000), a);
    r = _mm256_blendv_epi8(r, q, sub);
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    if (e5m2)
        r = _mm256_blendv_epi8(_mm256_min_epu32(r, _mm256_set1_epi32(sat ? 0x7B : 0x7C)),
                               _mm256_set1_epi32(0x7E), nan);
    else if (sat)
        r = _mm256_blendv_epi8(_mm256_min_epu32(r, _mm256_set1_epi32(0x7E)),
                               _mm256_set1_epi32(0x7F), nan);
    else
        r = _mm256_min_epu32(r, _mm256_set1_epi32(0x7F));
    return _mm256_or_si256(r, sign);
}

/* Four vectors of 8 codes (one per 32-bit lane) -> 32 bytes in order. */
MC_INLINE_ void store_codes32_(uint8_t *d, __m256i c0, __m256i c1, __m256i c2, __m256i c3)
{
    const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
    _mm256_storeu_si256((__m256i *)d,
                        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* 16 float8 codes (one per 16-bit lane) -> bfloat16 (f16 = 0) or float16 (f16 = 1) bits. */
MC_INLINE_ __m256i f8_decode_(__m256i w, int e5m2, int f16)
{
    static const uint16_t sub_table[2][2][8] = {
        {{0x0000, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60},
         {0x0000, 0x1800, 0x1C00, 0x1E00, 0x2000, 0x2100, 0x2200, 0x2300}},
        {{0x0000, 0x3780, 0x3800, 0x3840}, {0x0000, 0x0100, 0x0200, 0x0300}}};
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8);
    const int shift = f16 ? (e5m2 ? 8 : 7) : (e5m2 ? 5 : 4);
    const int rebias = f16 ? (e5m2 ? 0 : 8 << 10) : (e5m2 ? 112 << 7 : 120 << 7);
    __m256i r = _mm256_add_epi16(_mm256_slli_epi16(mag, shift), _mm256_set1_epi16((short)rebias));
    /* each lane's two table bytes: 2 * mag and 2 * mag + 1 */
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)sub_table[e5m2][f16]));
    const __m256i idx = _mm256_add_epi16(_mm256_mullo_epi16(mag, _mm256_set1_epi16(0x0202)),
                                         _mm256_set1_epi16(0x0100));
    r = _mm256_blendv_epi8(r, _mm256_shuffle_epi8(table, idx),
                           _mm256_cmpgt_epi16(_mm256_set1_epi16(e5m2 ? 4 : 8), mag));
    const __m256i qnan = _mm256_set1_epi16(f16 ? 0x7E00 : 0x7FC0);
    if (e5m2) {
        r = _mm256_blendv_epi8(r, _mm256_set1_epi16(f16 ? 0x7C00 : 0x7F80),
                               _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7C)));
        r = _mm256_blendv_epi8(r, qnan, _mm256_cmpgt_epi16(mag, _mm256_set1_epi16(0x7C)));
    } else {
        r = _mm256_blendv_epi8(r, qnan, _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F)));
    }
    return _mm256_or_si256(r, sign);
}

/* 8 float32 lanes of bits from each source type. */
MC_INLINE_ __m256i f32_bits_of_f16_(const uint16_t *s)
{
    return _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)s)));
}
MC_INLINE_ __m256i f32_bits_of_bf16_(const uint16_t *s)
{
    return _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s)), 16);
}
MC_INLINE_ __m256i f32_bits_of_f32_(const uint32_t *s)
{
    return _mm256_loadu_si256((const __m256i *)s);
}

#define MC_TO_F8_(src, STYPE, f8, e5m2, sat)                                          \
    MC_INLINE_ void src##_##f8##_block_(const STYPE *s, uint8_t *d)                   \
    {                                                                                 \
        store_codes32_(d, f8_encode_(f32_bits_of_##src##_(s), e5m2, sat),             \
                       f8_encode_(f32_bits_of_##src##_(s + 8), e5m2, sat),            \
                       f8_encode_(f32_bits_of_##src##_(s + 16), e5m2, sat),           \
                       f8_encode_(f32_bits_of_##src##_(s + 24), e5m2, sat));          \
    }                                                                                 \
    MC_ENTRY_(src##_##f8, STYPE, uint8_t, 32, src##_##f8##_block_, mc_##src##_to_##f8##_bits)

#define MC_TO_F8_ALL_(src, STYPE)                                                     \
    MC_TO_F8_(src, STYPE, e4m3, 0, 0)                                                 \
    MC_TO_F8_(src, STYPE, e5m2, 1, 0)                                                 \
    MC_TO_F8_(src, STYPE, e4m3_sat, 0, 1)                                             \
    MC_TO_F8_(src, STYPE, e5m2_sat, 1, 1)

MC_TO_F8_ALL_(f16, uint16_t)
MC_TO_F8_ALL_(bf16, uint16_t)
MC_TO_F8_ALL_(f32, uint32_t)

MC_INLINE_ __m256i f8_load16_(const uint8_t *s)
{
    return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s));
}

#define MC_FROM_F8_(f8, e5m2)                                                         \
    MC_INLINE_ void f8##_bf16_block_(const uint8_t *s, uint16_t *d)                   \
    {                                                                                 \
        _mm256_storeu_si256((__m256i *)d, f8_decode_(f8_load16_(s), e5m2, 0));        \
    }                                                                                 \
    MC_ENTRY_(f8##_bf16, uint8_t, uint16_t, 16, f8##_bf16_block_, mc_##f8##_to_bf16_bits) \
    MC_INLINE_ void f8##_f16_block_(const uint8_t *s, uint16_t *d)                    \
    {                                                                                 \
        _mm256_storeu_si256((__m256i *)d, f8_decode_(f8_load16_(s), e5m2, 1));        \
    }                                                                                 \
    MC_ENTRY_(f8##_f16, uint8_t, uint16_t, 16, f8##_f16_block_, mc_##f8##_to_f16_bits) \
    MC_INLINE_ void f8##_f32_block_(const uint8_t *s, uint32_t *d)                    \
    {                                                                                 \
        const __m256i w = f8_decode_(f8_load16_(s), e5m2, 0);                         \
        _mm256_storeu_si256((__m256i *)d,                                             \
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(w)), 16)); \
        _mm256_storeu_si256((__m256i *)(d + 8),                                       \
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(w, 1)), 16)); \
    }                                                                                 \
    MC_ENTRY_(f8##_f32, uint8_t, uint32_t, 16, f8##_f32_block_, mc_##f8##_to_f32_bits)

MC_FROM_F8_(e4m3, 0)
MC_FROM_F8_(e5m2, 1)

const mc_convert_table mc_convert_table_avx2 = {MC_CONVERT_WIDE_(avx2), MC_CONVERT_F8_(avx2)};
