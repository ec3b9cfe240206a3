/* avx512bf16 level of the weight-only quantized GEMM: bfloat16 rows of a against int4
 * per-channel weights on VDPBF16PS (mc_wgemm.h, design e); everything else is the avx512
 * level's.
 *
 * Design: per block of 8 rows of a panel, one 64-byte load gives the 16 columns' codes; a 16-bit
 * shift by 4p puts pair p's codes (odd row in the low half of each lane, even row in the high
 * half) in the low bits of the two halves, and VPERMW with a 32-entry table (the 16 bfloat16
 * values q = code - 8, twice, so the bit above the code does not matter) gives the pairs of
 * bfloat16 weights, exactly.  a's rows come as pairs in the same order (the driver's
 * conversion), so VDPBF16PS adds the even row's product, then the odd row's: the rows in order,
 * each product exact, each addition rounded once, as the FMAs of the scalar twin.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_simd_avx512.h"
#include "mc_wgemm_kernels.h"

MC_INLINE_ void mc_dot_bf16_body_(const mc_wpacked *w, const uint16_t *a, int64_t lda,
                                  const int MR, const int NP, int64_t p, float *tile, int64_t ldt)
{
    /* bfloat16 bits of -8 .. 7, twice */
    const __m512i lut = _mm512_set_epi16(
        0x40E0, 0x40C0, 0x40A0, 0x4080, 0x4040, 0x4000, 0x3F80, 0x0000,
        (short)0xBF80, (short)0xC000, (short)0xC040, (short)0xC080, (short)0xC0A0, (short)0xC0C0,
        (short)0xC0E0, (short)0xC100,
        0x40E0, 0x40C0, 0x40A0, 0x4080, 0x4040, 0x4000, 0x3F80, 0x0000,
        (short)0xBF80, (short)0xC000, (short)0xC040, (short)0xC080, (short)0xC0A0, (short)0xC0C0,
        (short)0xC0E0, (short)0xC100);
    const uint8_t *qp[8];
    __m512 s[4][8];
#pragma GCC unroll 8
    for (int j = 0; j < NP; ++j) {
        qp[j] = w->q + (p + j) * w->pbytes;
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i)
            s[i][j] = _mm512_setzero_ps();
    }
    const uint32_t *a32 = (const uint32_t *)a;
    for (int64_t R = 0; R < w->kg; R += MC_WGEMM_KB) {
        __m512i d[8];
#pragma GCC unroll 8
        for (int j = 0; j < NP; ++j) {
            const uint8_t *src = qp[j] + (R / MC_WGEMM_KB) * 64;
            _mm_prefetch((const char *)src + 1024, _MM_HINT_T0);
            d[j] = _mm512_load_si512((const void *)src);
        }
#pragma GCC unroll 4
        for (int pp = 0; pp < MC_WGEMM_KB / 2; ++pp)
#pragma GCC unroll 8
            for (int j = 0; j < NP; ++j) {
                const __m512bh wv = (__m512bh)_mm512_permutexvar_epi16(
                    _mm512_srli_epi16(d[j], (unsigned)(4 * pp)), lut);
#pragma GCC unroll 4
                for (int i = 0; i < MR; ++i)
                    s[i][j] = _mm512_dpbf16_ps(
                        s[i][j], (__m512bh)_mm512_set1_epi32((int)a32[(i * lda + R) / 2 + pp]), wv);
            }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NP; ++j) {
        const __m512 sc = _mm512_loadu_ps(w->scale + (p + j) * MC_WGEMM_NW);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i)
            _mm512_storeu_ps(tile + i * ldt + j * MC_WGEMM_NW, _mm512_div_ps(s[i][j], sc));
    }
}

#define MC_DOT_VARIANT_(MR, NP)                                                               \
    static void mc_dot_##MR##_##NP##_(const mc_wpacked *w, const uint16_t *a, int64_t lda,    \
                                      int64_t p, float *tile, int64_t ldt)                    \
    {                                                                                         \
        mc_dot_bf16_body_(w, a, lda, MR, NP, p, tile, ldt);                                   \
    }
MC_DOT_VARIANT_(1, 8) MC_DOT_VARIANT_(1, 4) MC_DOT_VARIANT_(1, 2) MC_DOT_VARIANT_(1, 1)
MC_DOT_VARIANT_(2, 4) MC_DOT_VARIANT_(2, 2) MC_DOT_VARIANT_(2, 1)
MC_DOT_VARIANT_(3, 2) MC_DOT_VARIANT_(3, 1)
MC_DOT_VARIANT_(4, 2) MC_DOT_VARIANT_(4, 1)

typedef void (*mc_dot_fn_)(const mc_wpacked *, const uint16_t *, int64_t, int64_t, float *,
                           int64_t);
static const mc_dot_fn_ mc_dots_[4][4] = {
    {mc_dot_1_1_, mc_dot_1_2_, mc_dot_1_4_, mc_dot_1_8_},
    {mc_dot_2_1_, mc_dot_2_2_, mc_dot_2_4_, NULL},
    {mc_dot_3_1_, mc_dot_3_2_, NULL, NULL},
    {mc_dot_4_1_, mc_dot_4_2_, NULL, NULL},
};
static const int mc_dot_widest_[4] = {3, 2, 1, 1};

/* Rows of bfloat16 pairs (lda elements apart, an even count), int4 per channel only. */
static void mc_wgemm_dot_bf16_avx512bf16_(const mc_wpacked *w, const void *ap, int64_t lda,
                                          int mr, int64_t p0, int64_t np, float *tile,
                                          int64_t ldt)
{
    const uint16_t *a = (const uint16_t *)ap;
    int64_t p = p0;
    for (int lg = mc_dot_widest_[mr - 1]; lg >= 0; --lg)
        for (; p0 + np - p >= (1 << lg); p += 1 << lg)
            mc_dots_[mr - 1][lg](w, a, lda, p, tile + (p - p0) * MC_WGEMM_NW, ldt);
}

const mc_wgemm_table mc_wgemm_table_avx512bf16 = {
    .dot_bf16 = mc_wgemm_dot_bf16_avx512bf16_,
};
