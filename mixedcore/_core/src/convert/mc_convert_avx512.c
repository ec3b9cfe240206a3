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
 *   f. float8 is integer arithmetic on 16 float32 lanes (to float8) or 32 16-bit lanes (from
 *      float8), the scalar twins' algorithms (mc_convert_scalar.h, design d) lane by lane:
 *      rebias and round the float32 bits (the subnormal lanes as design g says); decoding
 *      shifts a normal code into place and rebiases it, takes the eight or four subnormal codes
 *      from a table of 16-bit results (VPERMW) and blends the specials.  Every other source and
 *      destination goes through the exact float32 value, float64 by the nearest-even VCVTPD2PS
 *      as ml_dtypes does.  The codes are narrowed in registers (VPMOVDB) and stored plainly:
 *      the masked VPMOVDB store is slow, so only partial blocks use a masked store.  The first
 *      block is cut short so that the wider side's accesses are 64-byte aligned: a 64-byte
 *      access across two cache lines costs two (large numpy arrays start 16 bytes into a line).
 *   g. A float8 subnormal result is |x| rounded to a multiple of 2**-k (k = 9 for e4m3fn, 16
 *      for e5m2).  Adding the float 2**(23 - k) does exactly that in one instruction: the sum
 *      lies in [2**(23 - k), 2**(24 - k)), whose spacing is 2**-k, and the addition rounds to
 *      nearest even (embedded rounding, no flags); the sum's bits minus those of 2**(23 - k) are
 *      the code, 2**(mantissa bits) when it rounds up to the smallest normal.  Inputs below the
 *      smallest normal only reach this path; float32 subnormals are inputs like any other
 *      (every call runs without denormals-are-zero, mc_fpenv.h).
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

/* The same, the first block cut short so that the wider side's main-loop accesses are 64-byte
 * aligned (or aligned to a whole block, when that is less; design f). */
#define MC_ENTRY_ALIGNED_(name, STYPE, DTYPE, W, MASK_T, block)                       \
    static void mc_cast_##name##_avx512(const void *src, void *dst, int64_t n)               \
    {                                                                                 \
        const STYPE *s = (const STYPE *)src;                                          \
        DTYPE *d = (DTYPE *)dst;                                                      \
        const unsigned wide = sizeof(DTYPE) >= sizeof(STYPE) ? sizeof(DTYPE) : sizeof(STYPE); \
        const unsigned align = (W) * wide < 64 ? (W) * wide : 64;  /* a head below W */ \
        int64_t i = sizeof(DTYPE) >= sizeof(STYPE) ? mc_aligned_head(d, align, wide, n)  \
                                                   : mc_aligned_head(s, align, wide, n); \
        if (i > 0)                                                                    \
            block(s, d, (MASK_T)mc_lanes_avx512(i));                                  \
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


/* --- float8 (design f) ------------------------------------------------------------------------ */

/* float32 bits -> float8 codes in the low byte of each lane: mc_f32_to_e4m3_bits,
 * mc_f32_to_e5m2_bits or their saturating forms (e5m2 and sat are constants once inlined). */
MC_INLINE_ __m512i f8_encode_(__m512i f, int e5m2, int sat)
{
    const int sh = e5m2 ? 21 : 20, k = e5m2 ? 16 : 9;
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i a = _mm512_and_si512(f, _mm512_set1_epi32(0x7FFFFFFF));
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(f, 24), _mm512_set1_epi32(0x80));
    /* normal results: rebias, then round sh bits away to nearest even */
    const __m512i b = _mm512_sub_epi32(a, _mm512_set1_epi32((e5m2 ? 112 : 120) << 23));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, sh), one);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32((1 << (sh - 1)) - 1)), lsb), sh);
    /* subnormal results (design g): |x| + 2**(23 - k) rounds |x| to a multiple of 2**-k, the
     * float8 subnormal unit, to nearest even; the low bits of the sum are the code */
    const __m512i magic = _mm512_set1_epi32((127 + 23 - k) << 23);
    const __m512i q = _mm512_sub_epi32(
        _mm512_castps_si512(_mm512_add_round_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(magic),
                                                MC_RNE_SAE_)), magic);
    const __mmask16 sub = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(e5m2 ? 0x38800000 : 0x3C800000));
    r = _mm512_mask_mov_epi32(r, sub, q);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7F800000));
    if (e5m2)
        r = _mm512_mask_mov_epi32(_mm512_min_epu32(r, _mm512_set1_epi32(sat ? 0x7B : 0x7C)), nan,
                                  _mm512_set1_epi32(0x7E));
    else if (sat)
        r = _mm512_mask_mov_epi32(_mm512_min_epu32(r, _mm512_set1_epi32(0x7E)), nan,
                                  _mm512_set1_epi32(0x7F));
    else
        r = _mm512_min_epu32(r, _mm512_set1_epi32(0x7F));   /* overflow, infinity and NaN */
    return _mm512_or_si512(r, sign);
}

/* 16 codes (one per 32-bit lane) -> the bytes at d named by m (design f). */
MC_INLINE_ void store_codes16_(uint8_t *d, __mmask16 m, __m512i r)
{
    const __m128i b = _mm512_cvtepi32_epi8(r);
    if (m == (__mmask16)0xFFFF)
        _mm_storeu_si128((__m128i *)d, b);
    else
        _mm_mask_storeu_epi8(d, m, b);
}

/* 32 float8 codes (one per 16-bit lane) -> bfloat16 bits (f16 = 0) or float16 bits (f16 = 1),
 * exact: the normal codes shifted into place and rebiased, the subnormal codes from a table,
 * infinity and NaN blended in, the sign put back. */
MC_INLINE_ __m512i f8_decode_(__m512i w, int e5m2, int f16)
{
    static const uint16_t sub_table[2][2][32] = {
        {{0x0000, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60},     /* e4m3 -> bf16 */
         {0x0000, 0x1800, 0x1C00, 0x1E00, 0x2000, 0x2100, 0x2200, 0x2300}},    /* e4m3 -> f16 */
        {{0x0000, 0x3780, 0x3800, 0x3840},                                     /* e5m2 -> bf16 */
         {0x0000, 0x0100, 0x0200, 0x0300}}};                                   /* e5m2 -> f16 */
    const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7F));
    const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(w, _mm512_set1_epi16(0x80)), 8);
    const int shift = f16 ? (e5m2 ? 8 : 7) : (e5m2 ? 5 : 4);
    const int rebias = f16 ? (e5m2 ? 0 : 8 << 10) : (e5m2 ? 112 << 7 : 120 << 7);
    __m512i r = _mm512_add_epi16(_mm512_slli_epi16(mag, shift), _mm512_set1_epi16((short)rebias));
    const __m512i table = _mm512_loadu_si512(sub_table[e5m2][f16]);
    r = _mm512_mask_mov_epi16(r, _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(e5m2 ? 4 : 8)),
                              _mm512_permutexvar_epi16(mag, table));
    const short qnan = f16 ? 0x7E00 : 0x7FC0;
    if (e5m2) {
        r = _mm512_mask_mov_epi16(r, _mm512_cmpeq_epu16_mask(mag, _mm512_set1_epi16(0x7C)),
                                  _mm512_set1_epi16(f16 ? 0x7C00 : 0x7F80));
        r = _mm512_mask_mov_epi16(r, _mm512_cmpgt_epu16_mask(mag, _mm512_set1_epi16(0x7C)),
                                  _mm512_set1_epi16(qnan));
    } else {
        r = _mm512_mask_mov_epi16(r, _mm512_cmpeq_epu16_mask(mag, _mm512_set1_epi16(0x7F)),
                                  _mm512_set1_epi16(qnan));
    }
    return _mm512_or_si512(r, sign);
}

/* 32 float8 codes loaded (the lanes of m) into 16-bit lanes. */
MC_INLINE_ __m512i f8_load32_(const uint8_t *s, __mmask32 m)
{
    return _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, s));
}

/* The 16 float32 lanes of bfloat16 bits held in 16-bit lanes (half 0 or 1 of w). */
MC_INLINE_ __m512i bf16_half_to_f32_(__m512i w, int half)
{
    const __m256i h = half ? _mm512_extracti64x4_epi64(w, 1) : _mm512_castsi512_si256(w);
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

/* Sources to float8: 16 lanes of float32 bits, then f8_encode_. */
MC_INLINE_ __m512i f32_bits_of_f16_(const uint16_t *s, __mmask16 m)
{
    return _mm512_castps_si512(_mm512_cvt_roundph_ps(_mm256_maskz_loadu_epi16(m, s), _MM_FROUND_NO_EXC));
}
MC_INLINE_ __m512i f32_bits_of_bf16_(const uint16_t *s, __mmask16 m)
{
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s)), 16);
}
MC_INLINE_ __m512i f32_bits_of_f32_(const uint32_t *s, __mmask16 m)
{
    return _mm512_maskz_loadu_epi32(m, s);
}
/* ml_dtypes rounds a double to float first (to nearest even; NaN quieted, as every float8 NaN
 * is canonical anyway). */
MC_INLINE_ __m512i f32_bits_of_f64_(const uint64_t *s, __mmask16 m)
{
    const __m512d x0 = _mm512_castsi512_pd(_mm512_maskz_loadu_epi64((__mmask8)m, s));
    const __m512d x1 = _mm512_castsi512_pd(_mm512_maskz_loadu_epi64((__mmask8)(m >> 8), s + 8));
    const __m256i lo = _mm256_castps_si256(_mm512_cvt_roundpd_ps(x0, MC_RNE_SAE_));
    const __m256i hi = _mm256_castps_si256(_mm512_cvt_roundpd_ps(x1, MC_RNE_SAE_));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

#define MC_TO_F8_(src, STYPE, f8, e5m2, sat)                                          \
    MC_INLINE_ void src##_##f8##_block_(const STYPE *s, uint8_t *d, __mmask16 m)      \
    {                                                                                 \
        store_codes16_(d, m, f8_encode_(f32_bits_of_##src##_(s, m), e5m2, sat));      \
    }                                                                                 \
    MC_ENTRY_ALIGNED_(src##_##f8, STYPE, uint8_t, 16, __mmask16, src##_##f8##_block_)

#define MC_TO_F8_ALL_(src, STYPE)                                                     \
    MC_TO_F8_(src, STYPE, e4m3, 0, 0)                                                 \
    MC_TO_F8_(src, STYPE, e5m2, 1, 0)                                                 \
    MC_TO_F8_(src, STYPE, e4m3_sat, 0, 1)                                             \
    MC_TO_F8_(src, STYPE, e5m2_sat, 1, 1)

MC_TO_F8_ALL_(f16, uint16_t)
MC_TO_F8_ALL_(bf16, uint16_t)
MC_TO_F8_ALL_(f32, uint32_t)
MC_TO_F8_ALL_(f64, uint64_t)

/* float8 to the other types, 32 elements a block. */
#define MC_FROM_F8_(f8, e5m2)                                                         \
    MC_INLINE_ void f8##_bf16_block_(const uint8_t *s, uint16_t *d, __mmask32 m)      \
    {                                                                                 \
        _mm512_mask_storeu_epi16(d, m, f8_decode_(f8_load32_(s, m), e5m2, 0));        \
    }                                                                                 \
    MC_ENTRY_ALIGNED_(f8##_bf16, uint8_t, uint16_t, 32, __mmask32, f8##_bf16_block_)          \
    MC_INLINE_ void f8##_f16_block_(const uint8_t *s, uint16_t *d, __mmask32 m)       \
    {                                                                                 \
        _mm512_mask_storeu_epi16(d, m, f8_decode_(f8_load32_(s, m), e5m2, 1));        \
    }                                                                                 \
    MC_ENTRY_ALIGNED_(f8##_f16, uint8_t, uint16_t, 32, __mmask32, f8##_f16_block_)            \
    MC_INLINE_ void f8##_f32_block_(const uint8_t *s, uint32_t *d, __mmask32 m)       \
    {                                                                                 \
        const __m512i w = f8_decode_(f8_load32_(s, m), e5m2, 0);                      \
        _mm512_mask_storeu_epi32(d, (__mmask16)m, bf16_half_to_f32_(w, 0));           \
        _mm512_mask_storeu_epi32(d + 16, (__mmask16)(m >> 16), bf16_half_to_f32_(w, 1)); \
    }                                                                                 \
    MC_ENTRY_ALIGNED_(f8##_f32, uint8_t, uint32_t, 32, __mmask32, f8##_f32_block_)            \
    MC_INLINE_ void f8##_f64_block_(const uint8_t *s, uint64_t *d, __mmask32 m)       \
    {                                                                                 \
        const __m512i w = f8_decode_(f8_load32_(s, m), e5m2, 0);                      \
        for (int h = 0; h < 2; ++h) {                                                 \
            const __m512 f = _mm512_castsi512_ps(bf16_half_to_f32_(w, h));            \
            const __mmask16 mh = (__mmask16)(m >> (16 * h));                          \
            _mm512_mask_storeu_pd(d + 16 * h, (__mmask8)mh,                           \
                                  _mm512_cvt_roundps_pd(_mm512_castps512_ps256(f), _MM_FROUND_NO_EXC)); \
            _mm512_mask_storeu_pd(d + 16 * h + 8, (__mmask8)(mh >> 8),                \
                                  _mm512_cvt_roundps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd( \
                                      _mm512_castps_pd(f), 1)), _MM_FROUND_NO_EXC));   \
        }                                                                             \
    }                                                                                 \
    MC_ENTRY_ALIGNED_(f8##_f64, uint8_t, uint64_t, 32, __mmask32, f8##_f64_block_)

MC_FROM_F8_(e4m3, 0)
MC_FROM_F8_(e5m2, 1)

/* float8 -> float8: decoded to float32 bits, encoded again. */
#define MC_F8_F8_(name, se5m2, de5m2, sat)                                            \
    MC_INLINE_ void name##_block_(const uint8_t *s, uint8_t *d, __mmask32 m)          \
    {                                                                                 \
        const __m512i w = f8_decode_(f8_load32_(s, m), se5m2, 0);                     \
        store_codes16_(d, (__mmask16)m, f8_encode_(bf16_half_to_f32_(w, 0), de5m2, sat));   \
        store_codes16_(d + 16, (__mmask16)(m >> 16),                                  \
                       f8_encode_(bf16_half_to_f32_(w, 1), de5m2, sat));              \
    }                                                                                 \
    MC_ENTRY_ALIGNED_(name, uint8_t, uint8_t, 32, __mmask32, name##_block_)

MC_F8_F8_(e4m3_e5m2, 0, 1, 0)
MC_F8_F8_(e5m2_e4m3, 1, 0, 0)
MC_F8_F8_(e5m2_e4m3_sat, 1, 0, 1)
MC_F8_F8_(e5m2_e5m2_sat, 1, 1, 1)

const mc_convert_table mc_convert_table_avx512 = {
    MC_CONVERT_WIDE_(avx512), MC_CONVERT_F8_(avx512),
    .cast[MC_F64][MC_E4M3] = mc_cast_f64_e4m3_avx512, .cast[MC_F64][MC_E5M2] = mc_cast_f64_e5m2_avx512,
    .cast_sat[MC_F64] = {mc_cast_f64_e4m3_sat_avx512, mc_cast_f64_e5m2_sat_avx512},
    .cast[MC_E4M3][MC_F64] = mc_cast_e4m3_f64_avx512, .cast[MC_E5M2][MC_F64] = mc_cast_e5m2_f64_avx512,
    .cast[MC_E4M3][MC_E5M2] = mc_cast_e4m3_e5m2_avx512, .cast[MC_E5M2][MC_E4M3] = mc_cast_e5m2_e4m3_avx512,
    .cast_sat[MC_E4M3][MC_E5M2 - MC_E4M3] = mc_cast_e4m3_e5m2_avx512,    /* clipping changes nothing */
    .cast_sat[MC_E5M2] = {mc_cast_e5m2_e4m3_sat_avx512, mc_cast_e5m2_e5m2_sat_avx512}};
