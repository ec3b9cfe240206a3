/* The SIMD helpers of the AVX-512 levels (avx512: F, BW, VL, DQ; avx512bf16 adds BF16 and
 * uses these too), written once for every family's AVX-512 file.  The avx2 helpers come with
 * them (mc_simd_avx2.h: these files are compiled with AVX2, FMA and F16C as well); the design
 * of both headers is at the top of mc_simd_avx2.h.
 */
#ifndef MC_SIMD_AVX512_H_
#define MC_SIMD_AVX512_H_

#include <immintrin.h>
#include <stdint.h>

#include "mc_types.h"
#include "mc_simd_avx2.h"

/* The rounding argument of the AVX-512 conversions: to nearest even, no exception flags. */
#define MC_RNE_SAE_ (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* --- tail masks --------------------------------------------------------------------------------- */

/* The first n lanes set, n clamped to [0, 32]; the typed masks below cut it to their width (the
 * cut of a longer run of ones is all ones), so every width counts its lanes the same way. */
MC_INLINE_ uint32_t mc_lanes_avx512(int64_t n)
{
    return n >= 32 ? 0xFFFFFFFFu : n <= 0 ? 0u : (1u << n) - 1u;
}

MC_INLINE_ __mmask8 mc_mask8_avx512(int64_t n) { return (__mmask8)mc_lanes_avx512(n); }
MC_INLINE_ __mmask16 mc_mask16_avx512(int64_t n) { return (__mmask16)mc_lanes_avx512(n); }
MC_INLINE_ __mmask32 mc_mask32_avx512(int64_t n) { return (__mmask32)mc_lanes_avx512(n); }

/* --- loads -------------------------------------------------------------------------------------- */

/* The sum of the 16 lanes of a as a tree of halves: lanes l and l + 8, then l and l + 4, l + 2,
 * l + 1 (the order of the float32 twins that sum 16 partial sums so, e.g. the 16-bit softmax
 * and layer normalization). */
MC_INLINE_ float mc_sum16_halves_avx512(__m512 a)
{
    const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

/* The lanes of m of 16 contiguous elements of `type` (float16, bfloat16 or float32) at p as
 * float32 (exact; the other lanes are zero and their memory is not read). */
MC_INLINE_ __m512 mc_load16_avx512(const char *p, int type, __mmask16 m)
{
    if (type == MC_F32)
        return _mm512_maskz_loadu_ps(m, p);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (type == MC_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* --- float32 -> bfloat16 ------------------------------------------------------------------------- */

/* mc_f32_to_bf16_lanes_avx2 on 16 lanes, the NaN lanes found with a mask compare (8 lanes
 * take mc_f32_to_bf16_lanes_avx2 itself). */
MC_INLINE_ __m512i mc_f32_to_bf16_lanes_avx512(__m512i b)
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

/* v0 and v1 rounded to bfloat16 by mc_f32_to_bf16_lanes_avx512, the 32 values in order in one
 * register (the even 16-bit words of both; VPMOVDW into memory is slow) */
MC_INLINE_ __m512i mc_f32_to_bf16_join_avx512(__m512 v0, __m512 v1)
{
    const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36,
                                          34, 32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8,
                                          6, 4, 2, 0);
    return _mm512_permutex2var_epi16(mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v0)), even,
                                     mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v1)));
}

/* --- shuffles ------------------------------------------------------------------------------------ */

/* r[i] = row i (16 values along k) -> r[j] = column j (16 rows).  Three rounds: 2 x 2 blocks
 * of elements (unpack), of pairs (shuffle_ps), then of 128-bit lanes (shuffle_f32x4 twice). */
MC_INLINE_ void mc_transpose16_avx512(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4q + e] holds, in 128-bit lane L, column 4L + e of rows 4q .. 4q + 3 */
    for (int q = 0; q < 4; ++q) {
        u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0x44);
        u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0xEE);
        u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
    }
    for (int e = 0; e < 4; ++e) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
        r[e] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[8 + e] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[4 + e] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + e] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

#endif
