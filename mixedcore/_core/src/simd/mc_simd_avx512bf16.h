/* The SIMD helpers of the avx512bf16 level (AVX-512 with BF16), written once for every family's
 * avx512bf16 file (the design of the simd headers is at the top of mc_simd_avx2.h).
 *
 * Design:
 *   a. VCVTNEPS2BF16 / VCVTNE2PS2BF16 round float32 to bfloat16 in one instruction and agree
 *      with mc_f32_to_bf16_bits for every normal number, zero and infinity.  They differ on two
 *      classes only: subnormal inputs (flushed to zero; ml_dtypes rounds them) and NaNs (payload
 *      kept; ml_dtypes gives 0x7FC0 with the sign).  One VFPCLASSPS per 16 values finds the lanes
 *      of those classes, which are rounded again the integer way (mc_simd_avx512.h): the bits of
 *      the integer rounding, for a fraction of its instructions.
 */
#ifndef MC_SIMD_AVX512BF16_H_
#define MC_SIMD_AVX512BF16_H_

#include <immintrin.h>
#include <stdint.h>

#include "mc_simd_avx512.h"

/* VFPCLASSPS categories the instructions round unlike ml_dtypes: QNaN 0x01, denormal 0x20,
 * SNaN 0x80. */
#define MC_BF16_FIXUP_CLASSES 0xA1

/* The lanes of m of v rounded to bfloat16 and stored at o (16-bit lanes). */
MC_INLINE_ void mc_store_bf16_avx512bf16(char *o, __mmask16 m, __m512 v)
{
    __m256i r = (__m256i)_mm512_cvtneps_pbh(v);
    const __mmask16 fix = _mm512_mask_fpclass_ps_mask(m, v, MC_BF16_FIXUP_CLASSES);
    if (__builtin_expect(fix != 0, 0))
        r = _mm256_mask_mov_epi16(r, fix, _mm512_cvtepi32_epi16(
                                      mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v))));
    _mm256_mask_storeu_epi16(o, m, r);
}

/* v0 and v1 rounded to bfloat16, the 32 values in order in one register (the bits of
 * mc_f32_to_bf16_join_avx512). */
MC_INLINE_ __m512i mc_bf16_join_avx512bf16(__m512 v0, __m512 v1)
{
    const __m512i r = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
    const __mmask32 fix = (__mmask32)_mm512_fpclass_ps_mask(v0, MC_BF16_FIXUP_CLASSES) |
                          ((__mmask32)_mm512_fpclass_ps_mask(v1, MC_BF16_FIXUP_CLASSES) << 16);
    if (__builtin_expect(fix == 0, 1))
        return r;
    return _mm512_mask_mov_epi16(r, fix, mc_f32_to_bf16_join_avx512(v0, v1));
}

#endif
