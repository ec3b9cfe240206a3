/* AVX-512 BF16 overflow-scan kernel: bfloat16 unscale rounded by VCVTNEPS2BF16.
 *
 * Design:
 *   a. The bfloat16 unscale of the AVX-512 unit spends most of its instructions on the integer
 *      round-to-nearest-even.  VCVTNEPS2BF16 does that rounding in one instruction and agrees
 *      with mc_f32_to_bf16_bits for every float32 input that is a normal number, zero or an
 *      infinity (round to nearest even, ties to even, overflow to infinity).  It differs on
 *      two classes only: subnormal inputs (it flushes them to zero; ml_dtypes rounds them) and
 *      NaNs (it keeps payload bits; ml_dtypes gives 0x7FC0 with the sign).
 *   b. One VFPCLASSPS per vector finds the lanes of the product in those two classes.  A
 *      product is a NaN only when the input was one, and subnormal only for gradients below
 *      about 2**-126 * scale, so the mask is almost always empty; when it is not, those lanes
 *      are recomputed from their input by the scalar twin after the vector store.
 *   c. The finite test of the inputs is the AVX-512 unit's (mc_scan_avx512.c, design a).
 */
#include <immintrin.h>
#include <stdint.h>
#include "mc_scan_kernels.h"
#include "mc_simd_avx512bf16.h"

/* 16 values at s[0..] (the lanes of k): unscale, store, fix the rare lanes (design b). */
MC_INLINE_ void bf16_unscale16_(uint16_t *s, __m256i h, __m512 inv, __mmask16 k, float inv32)
{
    const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    const __m512 f = _mm512_mul_ps(_mm512_castsi512_ps(w), inv);
    _mm256_mask_storeu_epi16(s, k, (__m256i)_mm512_cvtneps_pbh(f));
    const __mmask16 fix = _mm512_mask_fpclass_ps_mask(k, f, MC_BF16_FIXUP_CLASSES);
    if (__builtin_expect(fix != 0, 0)) {
        uint16_t in[16];
        _mm256_storeu_si256((__m256i *)in, h);
        unsigned m = fix;
        while (m) {
            const int lane = __builtin_ctz(m);
            s[lane] = mc_bf16_unscale_bits(in[lane], inv32);
            m &= m - 1;
        }
    }
}

static int mc_unscale_bf16_avx512bf16(void *p, int64_t n, float inv32, double inv64)
{
    uint16_t *s = (uint16_t *)p;
    const __m512 inv = _mm512_set1_ps(inv32);
    const __m256i m = _mm256_set1_epi16(0x7FFF);
    __m256i acc = _mm256_setzero_si256();
    /* elements before the first 32-byte boundary, so that the main loop's stores are aligned */
    int64_t i = mc_aligned_head(s, 32u, 2u, n);
    (void)inv64;
    if (i > 0) {
        const __mmask16 k = mc_mask16_avx512(i);
        const __m256i h = _mm256_maskz_loadu_epi16(k, s);
        acc = _mm256_and_si256(h, m);
        bf16_unscale16_(s, h, inv, k, inv32);
    }
    for (; i + 16 <= n; i += 16) {
        const __m256i h = _mm256_load_si256((const __m256i *)(s + i));
        acc = _mm256_max_epi16(acc, _mm256_and_si256(h, m));
        bf16_unscale16_(s + i, h, inv, (__mmask16)0xFFFF, inv32);
    }
    if (i < n) {
        const __mmask16 k = mc_mask16_avx512(n - i);
        const __m256i h = _mm256_maskz_loadu_epi16(k, s + i);
        acc = _mm256_max_epi16(acc, _mm256_and_si256(h, m));
        bf16_unscale16_(s + i, h, inv, k, inv32);
    }
    return !_mm256_cmpge_epi16_mask(acc, _mm256_set1_epi16(0x7F80));
}

const mc_scan_table mc_scan_table_avx512bf16 = {.unscale = {[MC_BF16] = mc_unscale_bf16_avx512bf16}};
