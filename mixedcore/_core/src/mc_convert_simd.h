/* Vector float32 -> bfloat16 rounding shared by the SIMD units (conversions, unscale, GEMM
 * output).
 *
 * Design:
 *   a. Lane by lane exactly mc_f32_to_bf16_bits (mc_convert_scalar.h, where the proof is): add
 *      0x7FFF plus the lowest kept bit and truncate 16 bits; a NaN lane becomes 0x7FC0 with its
 *      sign.  The result sits in the low 16 bits of each 32-bit lane.
 *   b. Header-only; each variant exists only in units compiled with the instructions it needs,
 *      so the generic unit never sees a vector type.
 */
#ifndef MC_CONVERT_SIMD_H_
#define MC_CONVERT_SIMD_H_

#include <immintrin.h>

#if defined(__AVX512F__) && defined(__AVX512VL__)
static inline __m512i mc_f32_to_bf16_lanes_avx512(__m512i b)
{
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __m512i a = _mm512_and_si512(b, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7F800000));
    const __m512i qnan = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x8000)),
        _mm512_set1_epi32(0x7FC0));
    return _mm512_mask_mov_epi32(r, nan, qnan);
}

static inline __m256i mc_f32_to_bf16_lanes_avx512vl(__m256i b)
{
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF));
    const __mmask8 nan = _mm256_cmpgt_epu32_mask(a, _mm256_set1_epi32(0x7F800000));
    const __m256i qnan = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x8000)),
        _mm256_set1_epi32(0x7FC0));
    return _mm256_mask_mov_epi32(r, nan, qnan);
}
#endif

#if defined(__AVX2__)
static inline __m256i mc_f32_to_bf16_lanes_avx2(__m256i b)
{
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    const __m256i qnan = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x8000)),
        _mm256_set1_epi32(0x7FC0));
    return _mm256_blendv_epi8(r, qnan, nan);
}
#endif

#endif
