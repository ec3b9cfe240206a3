/* The SIMD helpers of the avx2 level (AVX2 + FMA + F16C), written once for every family's
 * avx2 file; the AVX-512 levels include them too (mc_simd_avx512.h), since their files are
 * compiled with these instructions as well.
 *
 * Design:
 *   a. Header-only static inline functions, so each level's file compiles them with its own
 *      flags; the generic files never include a simd header, so they never see a vector type.
 *   b. A helper here gives, lane for lane, the bits the per-family copies it replaced gave: the
 *      kernels' results are bit-identical at every level (the kernel tests check it).
 *   c. Element types are the codes of mc_types.h (MC_F16, MC_BF16, MC_F32).
 *   d. What belongs here: a load, store, mask, rounding or shuffle that two families (or two
 *      levels of one family, through mc_simd_avx512.h) would otherwise write each.  Vector math
 *      of one family stays with the family (the activations' in mc_act_avx512_inl.h).
 */
#ifndef MC_SIMD_AVX2_H_
#define MC_SIMD_AVX2_H_

#include <immintrin.h>
#include <stdint.h>

#include "mc_types.h"

#define MC_INLINE_ static inline __attribute__((always_inline))
/* The rounding argument of VCVTPS2PH: to nearest even. */
#define MC_RNE_ _MM_FROUND_TO_NEAREST_INT

/* Elements of `esize` bytes before the first `align`-byte boundary at or after p (align a power
 * of two), at most n: the head a kernel handles apart so that its main loop's accesses are
 * aligned. */
MC_INLINE_ int64_t mc_aligned_head(const void *p, unsigned align, unsigned esize, int64_t n)
{
    const int64_t head = (int64_t)(((0u - (uintptr_t)p) & (align - 1u)) / esize);
    return head < n ? head : n;
}

/* 8 elements of `type` (float16, bfloat16 or float32) at p as float32 lanes: exact. */
MC_INLINE_ __m256 mc_load8_avx2(const char *p, int type)
{
    if (type == MC_F32)
        return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (type == MC_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* r[i] = row i (8 values along k) -> r[j] = column j (8 rows): unpack, shuffle pairs, swap
 * 128-bit halves. */
MC_INLINE_ void mc_transpose8_avx2(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int q = 0; q < 2; ++q) {
        u[4 * q + 0] = _mm256_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0x44);
        u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0xEE);
        u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
    }
    for (int e = 0; e < 4; ++e) {
        r[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
        r[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
    }
}

/* float32 bits -> bfloat16, lane by lane exactly mc_f32_to_bf16_bits (mc_convert_scalar.h,
 * where the proof is): add 0x7FFF plus the lowest kept bit and truncate 16 bits; a NaN lane
 * becomes 0x7FC0 with its sign.  The result sits in the low 16 bits of each 32-bit lane. */
MC_INLINE_ __m256i mc_f32_to_bf16_lanes_avx2(__m256i b)
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
