/* AVX-512 (F/BW/VL/DQ + F16C) conversion kernels.
 *
 * Design:
 *   a. Full vectors in the main loop, one masked block for the tail: no scalar tail, no read or
 *      write past the arrays.
 *   b. float16 goes through F16C (VCVTPS2PH / VCVTPH2PS), which rounds to nearest even and keeps
 *      subnormals exactly as numpy does.  The one difference is signalling NaNs: F16C quiets
 *      them, numpy does not.  Lanes holding a signalling NaN are rare, so they are detected with
 *      one integer compare and recomputed by the scalar twin; every other lane is already right.
 *   c. bfloat16 rounding is integer arithmetic on the float32 bits (see mc_f32_to_bf16_bits),
 *      NaN lanes replaced in-register by 0x7FC0 with their sign.  No VCVTNEPS2BF16: it flushes
 *      subnormals and keeps payloads, which would need the same fix-ups for no gain.
 *   d. float64 sources are rounded once: first to float32 by round-to-odd (truncate, then set
 *      the last bit when the truncation was inexact), then to the 16-bit format.  Round-to-odd
 *      into a format with at least two more significand bits than the target makes the second
 *      rounding exact (Boldo & Melquiond): float32 keeps 24 bits, float16 needs 11, bfloat16 8,
 *      and every float16 subnormal is a float32 normal.  Below 2**-126 the 16-bit result is zero
 *      (float16) or the float32 subnormal still carries 16 more bits than the bfloat16 one.
 *      Above FLT_MAX truncation gives FLT_MAX with the odd bit set, which rounds to infinity.
 *   e. Conversions use {sae} forms where they exist; the driver restores the caller's flags.
 */
#include <immintrin.h>
#include <stdint.h>
#include "mc_convert_kernels.h"
#include "mc_simd_avx512.h"

/* Recompute the lanes named by a mask with a scalar twin. */
#define MC_FIX_LANES_(mask, s, d, twin)                                               \
    do {                                                                              \
        unsigned mc_m_ = (unsigned)(mask);                                            \
        while (mc_m_) {                                                               \
            const int k = __builtin_ctz(mc_m_);                                       \
            (d)[k] = twin((s)[k]);                                                    \
            mc_m_ &= mc_m_ - 1;                                                       \
        }                                                                             \
    } while (0)

/* The kernel mc_cast_<name>_avx512: blocks of W elements; the last, partial block runs with a
 * mask of its length. */
#define MC_ENTRY_(name, STYPE, DTYPE, W, MASK_T, block)                               \
    static void mc_cast_##name##_avx512(const void *src, void *dst, int64_t n)               \
    {                                                                                 \
        const STYPE *s = (const STYPE *)src;                                          \
        DTYPE *d = (DTYPE *)dst;                                                      \
        int64_t i = 0;                                                                \
        for (; i + (W) <= n; i += (W))                                                \
            block(s + i, d + i, (MASK_T)~(MASK_T)0);                                  \
        if (i < n)                                                                    \
            block(s + i, d + i, (MASK_T)mc_lanes_avx512(n - i));                       \
    }

/* --- float32 <-> float16 ------------------------------------------------------------------- */

MC_INLINE_ void f32_f16_block_(const uint32_t *s, uint16_t *d, __mmask16 m)
{
    const __m512i b = _mm512_maskz_loadu_epi32(m, s);
    const __m256i h = _mm512_cvtps_ph(_mm512_castsi512_ps(b), MC_RNE_SAE_);
    _mm256_mask_storeu_epi16(d, m, h);
    const __m512i a = _mm512_and_si512(b, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 snan = _mm512_mask_cmpgt_epu32_mask(m, a, _mm512_set1_epi32(0x7F800000)) &
                           _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x00400000));
    if (snan)
        MC_FIX_LANES_(snan, s, d, mc_f32_to_f16_bits);
}

MC_ENTRY_(f32_f16, uint32_t, uint16_t, 16, __mmask16, f32_f16_block_)

/* float16 signalling NaN: exponent all ones, mantissa non-zero, quiet bit (0x200) clear. */
MC_INLINE_ __mmask16 f16_snan_(__m256i h, __mmask16 m)
{
    const __m256i a = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
    return _mm256_mask_cmpgt_epu16_mask(m, a, _mm256_set1_epi16(0x7C00)) &
           _mm256_testn_epi16_mask(h, _mm256_set1_epi16(0x0200));
}

MC_INLINE_ void f16_f32_block_(const uint16_t *s, uint32_t *d, __mmask16 m)
{
    const __m256i h = _mm256_maskz_loadu_epi16(m, s);
    _mm512_mask_storeu_ps(d, m, _mm512_cvt_roundph_ps(h, _MM_FROUND_NO_EXC));
    const __mmask16 snan = f16_snan_(h, m);
    if (snan)
        MC_FIX_LANES_(snan, s, d, mc_f16_to_f32_bits);
}

MC_ENTRY_(f16_f32, uint16_t, uint32_t, 16, __mmask16, f16_f32_block_)

/* --- float32 <-> bfloat16 ------------------------------------------------------------------ */

MC_INLINE_ void f32_bf16_block_(const uint32_t *s, uint16_t *d, __mmask16 m)
{
    const __m512i b = _mm512_maskz_loadu_epi32(m, s);
    _mm256_mask_storeu_epi16(d, m, _mm512_cvtepi32_epi16(mc_f32_to_bf16_lanes_avx512(b)));
}

MC_ENTRY_(f32_bf16, uint32_t, uint16_t, 16, __mmask16, f32_bf16_block_)

MC_INLINE_ void bf16_f32_block_(const uint16_t *s, uint32_t *d, __mmask16 m)
{
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s));
    _mm512_mask_storeu_epi32(d, m, _mm512_slli_epi32(w, 16));
}

MC_ENTRY_(bf16_f32, uint16_t, uint32_t, 16, __mmask16, bf16_f32_block_)

/* --- float64 -> 16-bit ----------------------------------------------------------------------- */

/* float64 -> float32 bits by round-to-odd (design d).  NaN lanes come out as NaN. */
MC_INLINE_ __m256i f64_to_f32_odd_(__m512d x)
{
    const __m256 t = _mm512_cvt_roundpd_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvt_roundps_pd(t, _MM_FROUND_NO_EXC), x,
                                                _CMP_NEQ_UQ);
    const __m256i ti = _mm256_castps_si256(t);
    return _mm256_mask_or_epi32(ti, inexact, ti, _mm256_set1_epi32(1));
}

MC_INLINE_ void f64_f16_block_(const uint64_t *s, uint16_t *d, __mmask8 m)
{
    const __m512d x = _mm512_castsi512_pd(_mm512_maskz_loadu_epi64(m, s));
    const __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(f64_to_f32_odd_(x)), MC_RNE_SAE_);
    _mm_mask_storeu_epi16(d, m, h);
    const __mmask8 nan = _mm512_mask_cmp_pd_mask(m, x, x, _CMP_UNORD_Q);
    if (nan)
        MC_FIX_LANES_(nan, s, d, mc_f64_to_f16_bits);
}

MC_ENTRY_(f64_f16, uint64_t, uint16_t, 8, __mmask8, f64_f16_block_)

MC_INLINE_ void f64_bf16_block_(const uint64_t *s, uint16_t *d, __mmask8 m)
{
    const __m512d x = _mm512_castsi512_pd(_mm512_maskz_loadu_epi64(m, s));
    _mm_mask_storeu_epi16(d, m, _mm256_cvtepi32_epi16(mc_f32_to_bf16_lanes_avx2(f64_to_f32_odd_(x))));
}

MC_ENTRY_(f64_bf16, uint64_t, uint16_t, 8, __mmask8, f64_bf16_block_)

/* --- 16-bit -> float64 ----------------------------------------------------------------------- */

MC_INLINE_ void f16_f64_block_(const uint16_t *s, uint64_t *d, __mmask8 m)
{
    const __m128i h = _mm_maskz_loadu_epi16(m, s);
    const __m512d x = _mm512_cvt_roundps_pd(_mm256_cvtph_ps(h), _MM_FROUND_NO_EXC);
    _mm512_mask_storeu_pd(d, m, x);
    const __m128i a = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    const __mmask8 snan = _mm_mask_cmpgt_epu16_mask(m, a, _mm_set1_epi16(0x7C00)) &
                          _mm_testn_epi16_mask(h, _mm_set1_epi16(0x0200));
    if (snan)
        MC_FIX_LANES_(snan, s, d, mc_f16_to_f64_bits);
}

MC_ENTRY_(f16_f64, uint16_t, uint64_t, 8, __mmask8, f16_f64_block_)

/* VCVTPS2PD quiets a signalling NaN and keeps its payload: exactly mc_bf16_to_f64_bits. */
MC_INLINE_ void bf16_f64_block_(const uint16_t *s, uint64_t *d, __mmask8 m)
{
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(m, s)), 16);
    _mm512_mask_storeu_pd(d, m, _mm512_cvt_roundps_pd(_mm256_castsi256_ps(w), _MM_FROUND_NO_EXC));
}

MC_ENTRY_(bf16_f64, uint16_t, uint64_t, 8, __mmask8, bf16_f64_block_)

/* --- float16 <-> bfloat16 -------------------------------------------------------------------- */

/* Through float32, which holds every float16 exactly; a quieted NaN still maps to 0x7FC0. */
MC_INLINE_ void f16_bf16_block_(const uint16_t *s, uint16_t *d, __mmask16 m)
{
    const __m512 f = _mm512_cvt_roundph_ps(_mm256_maskz_loadu_epi16(m, s), _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(d, m, _mm512_cvtepi32_epi16(mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(f))));
}

MC_ENTRY_(f16_bf16, uint16_t, uint16_t, 16, __mmask16, f16_bf16_block_)

/* bfloat16 NaN lanes become 0x7E00 with their sign (ml_dtypes); the rest rounds by F16C. */
MC_INLINE_ void bf16_f16_block_(const uint16_t *s, uint16_t *d, __mmask16 m)
{
    const __m256i h = _mm256_maskz_loadu_epi16(m, s);
    const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    const __m256i r = _mm512_cvtps_ph(_mm512_castsi512_ps(w), MC_RNE_SAE_);
    const __m256i a = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
    const __mmask16 nan = _mm256_cmpgt_epu16_mask(a, _mm256_set1_epi16(0x7F80));
    const __m256i qnan = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16((short)0x8000)),
                                         _mm256_set1_epi16(0x7E00));
    _mm256_mask_storeu_epi16(d, m, _mm256_mask_mov_epi16(r, nan, qnan));
}

MC_ENTRY_(bf16_f16, uint16_t, uint16_t, 16, __mmask16, bf16_f16_block_)

/* --- float32 <-> float64 --------------------------------------------------------------------- */

MC_INLINE_ void f32_f64_block_(const uint32_t *s, uint64_t *d, __mmask8 m)
{
    const __m256 f = _mm256_castsi256_ps(_mm256_maskz_loadu_epi32(m, s));
    _mm512_mask_storeu_pd(d, m, _mm512_cvt_roundps_pd(f, _MM_FROUND_NO_EXC));
}

MC_ENTRY_(f32_f64, uint32_t, uint64_t, 8, __mmask8, f32_f64_block_)

MC_INLINE_ void f64_f32_block_(const uint64_t *s, uint32_t *d, __mmask8 m)
{
    const __m512d x = _mm512_castsi512_pd(_mm512_maskz_loadu_epi64(m, s));
    _mm256_mask_storeu_ps(d, m, _mm512_cvt_roundpd_ps(x, MC_RNE_SAE_));
}

MC_ENTRY_(f64_f32, uint64_t, uint32_t, 8, __mmask8, f64_f32_block_)

const mc_convert_table mc_convert_table_avx512 = {MC_CONVERT_WIDE_(avx512)};
