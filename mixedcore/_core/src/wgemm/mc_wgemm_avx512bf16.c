/* avx512bf16 level of the weight-only quantized GEMM: bfloat16 rows of a against int4 weights
 * on VDPBF16PS (mc_wgemm.h, design e); everything else is the avx512 level's.
 *
 * Design: per block of 8 rows of a panel, one 64-byte load gives the 16 columns' codes; a 16-bit
 * shift by 4p puts pair p's codes (odd row in the low half of each lane, even row in the high
 * half) in the low bits of the two halves, and VPERMW with a 32-entry table gives the pairs of
 * bfloat16 weights, exactly.  Per channel the table holds the 16 values q = code - 8 twice (so
 * the bit above the code does not matter); grouped, the code is masked and 16 - off of its
 * column added, and the table holds t - 16 for t = 0 .. 31, so the weight code - off comes out
 * for every offset in [0, 16] (zero points in [-8, 8]: mc_wpacked.pairs_ok).  a's rows come as
 * pairs in the same order (the driver's conversion), so VDPBF16PS adds the even row's product,
 * then the odd row's: the rows in order, each product exact, each addition rounded once, as
 * the FMAs of the scalar twin.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_simd_avx512.h"
#include "mc_wgemm_kernels.h"

/* bfloat16 bits of t - 16 for t = 0 .. 31 (grouped), and of -8 .. 7 twice (per channel) */
#define MC_BF16_RAMP_                                                                      \
    (short)0x4170, (short)0x4160, (short)0x4150, (short)0x4140, (short)0x4130, (short)0x4120,  \
    (short)0x4110, (short)0x4100, (short)0x40E0, (short)0x40C0, (short)0x40A0, (short)0x4080,  \
    (short)0x4040, (short)0x4000, (short)0x3F80, (short)0x0000, (short)0xBF80, (short)0xC000,  \
    (short)0xC040, (short)0xC080, (short)0xC0A0, (short)0xC0C0, (short)0xC0E0, (short)0xC100,  \
    (short)0xC110, (short)0xC120, (short)0xC130, (short)0xC140, (short)0xC150, (short)0xC160,  \
    (short)0xC170, (short)0xC180

MC_INLINE_ void mc_dot_bf16_body_(const mc_wpacked *w, const uint16_t *a, int64_t lda,
                                  const int MR, const int NP, const int grouped, int64_t p,
                                  float *tile, int64_t ldt)
{
    const __m512i lut = grouped ? _mm512_set_epi16(MC_BF16_RAMP_)
                                : _mm512_set_epi16(
        0x40E0, 0x40C0, 0x40A0, 0x4080, 0x4040, 0x4000, 0x3F80, 0x0000,
        (short)0xBF80, (short)0xC000, (short)0xC040, (short)0xC080, (short)0xC0A0, (short)0xC0C0,
        (short)0xC0E0, (short)0xC100,
        0x40E0, 0x40C0, 0x40A0, 0x4080, 0x4040, 0x4000, 0x3F80, 0x0000,
        (short)0xBF80, (short)0xC000, (short)0xC040, (short)0xC080, (short)0xC0A0, (short)0xC0C0,
        (short)0xC0E0, (short)0xC100);
    const __m512i nib = _mm512_set1_epi16(0xF);
    const int64_t cols = w->panels * MC_WGEMM_NW;
    const uint8_t *qp[8];
#pragma GCC unroll 8
    for (int j = 0; j < NP; ++j)
        qp[j] = w->q + (p + j) * w->pbytes;
    const uint32_t *a32 = (const uint32_t *)a;
    for (int64_t g = 0; g < w->groups; ++g) {
        __m512 s[4][8];
        __m512i bias[8];
#pragma GCC unroll 8
        for (int j = 0; j < NP; ++j) {
            if (grouped) {     /* 16 - off in both halves: code - off = lut[code + it] */
                const __m512i c = _mm512_cvtps_epi32(_mm512_sub_ps(
                    _mm512_set1_ps(16.0f),
                    _mm512_loadu_ps(w->off + g * cols + (p + j) * MC_WGEMM_NW)));
                bias[j] = _mm512_or_si512(c, _mm512_slli_epi32(c, 16));
            }
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i)
                s[i][j] = _mm512_setzero_ps();
        }
        const int64_t R0 = g * w->kg, R1 = R0 + w->kg;
        for (int64_t R = R0; R < R1; R += MC_WGEMM_KB) {
            __m512i d[8];
#pragma GCC unroll 8
            for (int j = 0; j < NP; ++j) {
                const uint8_t *src = qp[j] + (R / MC_WGEMM_KB) * 64;
                _mm_prefetch((const char *)src + 2048, _MM_HINT_T0);
                d[j] = _mm512_load_si512((const void *)src);
            }
#pragma GCC unroll 4
            for (int pp = 0; pp < MC_WGEMM_KB / 2; ++pp)
#pragma GCC unroll 8
                for (int j = 0; j < NP; ++j) {
                    __m512i idx = _mm512_srli_epi16(d[j], (unsigned)(4 * pp));
                    if (grouped)
                        idx = _mm512_add_epi16(_mm512_and_si512(idx, nib), bias[j]);
                    const __m512bh wv = (__m512bh)_mm512_permutexvar_epi16(idx, lut);
#pragma GCC unroll 4
                    for (int i = 0; i < MR; ++i)
                        s[i][j] = _mm512_dpbf16_ps(
                            s[i][j], (__m512bh)_mm512_set1_epi32((int)a32[(i * lda + R) / 2 + pp]),
                            wv);
                }
        }
#pragma GCC unroll 8
        for (int j = 0; j < NP; ++j) {
            const __m512 sc = _mm512_loadu_ps(w->scale + g * cols + (p + j) * MC_WGEMM_NW);
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i) {
                float *t = tile + i * ldt + j * MC_WGEMM_NW;
                __m512 v;
                if (!grouped)
                    v = _mm512_div_ps(s[i][j], sc);
                else
                    v = _mm512_fmadd_ps(s[i][j], sc, g == 0 ? _mm512_setzero_ps()
                                                            : _mm512_loadu_ps(t));
                _mm512_storeu_ps(t, v);
            }
        }
    }
}

#define MC_DOT_VARIANT_(MR, NP)                                                               \
    static void mc_dot_##MR##_##NP##_(const mc_wpacked *w, const uint16_t *a, int64_t lda,    \
                                      int64_t p, float *tile, int64_t ldt)                    \
    {                                                                                         \
        if (w->grouped)                                                                       \
            mc_dot_bf16_body_(w, a, lda, MR, NP, 1, p, tile, ldt);                            \
        else                                                                                  \
            mc_dot_bf16_body_(w, a, lda, MR, NP, 0, p, tile, ldt);                            \
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

/* Rows of bfloat16 pairs (lda elements apart, an even count), int4 with every offset in
 * [0, 16] (mc_wpacked.pairs_ok). */
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

/* The weights of group g as pair panels for gemm's pair micro-kernel (mc_wgemm_widen_pairs_fn):
 * int4 by the dot kernel's shift and table lookup (a 32-bit word of the packed block already
 * holds each pair with the even row in the high half), int8 converted to float32, the offset
 * subtracted (exact), and the high halves of rows 2t and 2t + 1 joined (exact: at most 8
 * significant bits). */
static void mc_wgemm_widen_pairs_avx512bf16_(const mc_wpacked *w, int64_t g, int64_t p0, int np,
                                             int nr, uint32_t *dst)
{
    const int64_t cols = w->panels * MC_WGEMM_NW, pr = w->kg / 2;
    const __m512i lut = w->grouped ? _mm512_set_epi16(MC_BF16_RAMP_)
                                   : _mm512_set_epi16(
        0x40E0, 0x40C0, 0x40A0, 0x4080, 0x4040, 0x4000, 0x3F80, 0x0000,
        (short)0xBF80, (short)0xC000, (short)0xC040, (short)0xC080, (short)0xC0A0, (short)0xC0C0,
        (short)0xC0E0, (short)0xC100,
        0x40E0, 0x40C0, 0x40A0, 0x4080, 0x4040, 0x4000, 0x3F80, 0x0000,
        (short)0xBF80, (short)0xC000, (short)0xC040, (short)0xC080, (short)0xC0A0, (short)0xC0C0,
        (short)0xC0E0, (short)0xC100);
    const __m512i nib = _mm512_set1_epi16(0xF);
    const __m512i himask = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int j = 0; j < nr / MC_WGEMM_NW; ++j) {
        uint32_t *d = dst + j * MC_WGEMM_NW;
        if (j >= np) {
            for (int64_t t = 0; t < pr; ++t)
                _mm512_storeu_si512((void *)(d + t * nr), _mm512_setzero_si512());
            continue;
        }
        const uint8_t *q = w->q + (p0 + j) * w->pbytes;
        const float *off = w->off + g * cols + (p0 + j) * MC_WGEMM_NW;
        if (w->bits == 8) {
            const __m512 o = _mm512_loadu_ps(off);
            const uint8_t *qr = q + g * w->kg * MC_WGEMM_NW;
            for (int64_t t = 0; t < pr; ++t) {
                const __m512 e = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                    _mm_load_si128((const __m128i *)(qr + 2 * t * MC_WGEMM_NW)))), o);
                const __m512 f = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                    _mm_load_si128((const __m128i *)(qr + (2 * t + 1) * MC_WGEMM_NW)))), o);
                _mm512_storeu_si512((void *)(d + t * nr),
                                    _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(e),
                                                                     himask),
                                                    _mm512_srli_epi32(_mm512_castps_si512(f),
                                                                      16)));
            }
            continue;
        }
        __m512i bias = _mm512_setzero_si512();
        if (w->grouped) {      /* 16 - off in both halves, as the dot kernel */
            const __m512i c = _mm512_cvtps_epi32(
                _mm512_sub_ps(_mm512_set1_ps(16.0f), _mm512_loadu_ps(off)));
            bias = _mm512_or_si512(c, _mm512_slli_epi32(c, 16));
        }
        const uint8_t *qb = q + g * w->kg / MC_WGEMM_KB * 64;
        for (int64_t b = 0; b < w->kg / MC_WGEMM_KB; ++b) {
            const __m512i dv = _mm512_load_si512((const void *)(qb + b * 64));
#pragma GCC unroll 4
            for (int pp = 0; pp < MC_WGEMM_KB / 2; ++pp) {
                __m512i idx = _mm512_srli_epi16(dv, (unsigned)(4 * pp));
                if (w->grouped)
                    idx = _mm512_add_epi16(_mm512_and_si512(idx, nib), bias);
                _mm512_storeu_si512((void *)(d + (b * (MC_WGEMM_KB / 2) + pp) * nr),
                                    _mm512_permutexvar_epi16(idx, lut));
            }
        }
    }
}

const mc_wgemm_table mc_wgemm_table_avx512bf16 = {
    .dot_bf16 = mc_wgemm_dot_bf16_avx512bf16_,
    .widen_pairs = mc_wgemm_widen_pairs_avx512bf16_,
};
