/* AVX2 level of the weight-only quantized GEMM (the driver is mc_wgemm.c; the arithmetic is the
 * scalar twin's, mc_wgemm_scalar.h).
 *
 * Design: as the avx512 level (mc_wgemm_avx512.c), with each 16-column panel in two 8-lane
 * halves; the int4 code is masked, OR-ed into the float 2**23 and 2**23 + off subtracted
 * (exact) for every format, since VPERMPS of AVX2 has 8 entries.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_simd_avx2.h"
#include "mc_wgemm_kernels.h"
#include "mc_wgemm_scalar.h"

#define MC_MAGIC_ 0x4B000000
#define MC_MAGIC_F_ 8388608.0f

MC_INLINE_ __m256 mc_w4_(__m256i d, const int pos, __m256 moff)
{
    const int sh = (pos & 1) ? 4 * (pos / 2) : 16 + 4 * (pos / 2);
    const __m256i idx = _mm256_and_si256(_mm256_srli_epi32(d, sh), _mm256_set1_epi32(0xF));
    return _mm256_sub_ps(_mm256_castsi256_ps(_mm256_or_si256(idx, _mm256_set1_epi32(MC_MAGIC_))),
                         moff);
}

MC_INLINE_ __m256 mc_w8_(const uint8_t *p, const int grouped, __m256 off)
{
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
    return grouped ? _mm256_sub_ps(v, off) : v;
}

MC_INLINE_ __m256 mc_scale_(__m256 s, __m256 sc, __m256 t, const int mode)
{
    if (mode == MC_WGEMM_DIV)
        return _mm256_div_ps(s, sc);
    return _mm256_fmadd_ps(s, sc, mode == MC_WGEMM_FIRST ? _mm256_setzero_ps() : t);
}

/* Rows [0, MR) x panels [p, p + NP), each panel two halves h of 8 columns. */
MC_INLINE_ void mc_dot_body_(const mc_wpacked *w, const float *a, int64_t lda, const int MR,
                             const int NP, const int bits, const int grouped, int64_t p,
                             float *tile, int64_t ldt)
{
    const int64_t cols = w->panels * MC_WGEMM_NW;
    for (int64_t g = 0; g < w->groups; ++g) {
        __m256 s[4][8], moff[8];
#pragma GCC unroll 8
        for (int v = 0; v < 2 * NP; ++v) {
            const __m256 off = _mm256_loadu_ps(w->off + g * cols + p * MC_WGEMM_NW + 8 * v);
            moff[v] = bits == 4 ? _mm256_add_ps(off, _mm256_set1_ps(MC_MAGIC_F_)) : off;
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i)
                s[i][v] = _mm256_setzero_ps();
        }
        const int64_t R0 = g * w->kg, R1 = R0 + w->kg;
        if (bits == 4) {
            for (int64_t R = R0; R < R1; R += MC_WGEMM_KB) {
                __m256i d[8];
#pragma GCC unroll 8
                for (int v = 0; v < 2 * NP; ++v)
                    d[v] = _mm256_load_si256((const __m256i *)(
                        w->q + (p + v / 2) * w->pbytes + (R / MC_WGEMM_KB) * 64 + 32 * (v % 2)));
#pragma GCC unroll 8
                for (int pos = 0; pos < MC_WGEMM_KB; ++pos)
#pragma GCC unroll 8
                    for (int v = 0; v < 2 * NP; ++v) {
                        const __m256 wv = mc_w4_(d[v], pos, moff[v]);
#pragma GCC unroll 4
                        for (int i = 0; i < MR; ++i)
                            s[i][v] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + i * lda + R + pos),
                                                      wv, s[i][v]);
                    }
            }
        } else {
            for (int64_t R = R0; R < R1; ++R)
#pragma GCC unroll 8
                for (int v = 0; v < 2 * NP; ++v) {
                    const __m256 wv = mc_w8_(w->q + (p + v / 2) * w->pbytes + R * MC_WGEMM_NW +
                                                 8 * (v % 2), grouped, moff[v]);
#pragma GCC unroll 4
                    for (int i = 0; i < MR; ++i)
                        s[i][v] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + i * lda + R), wv,
                                                  s[i][v]);
                }
        }
        const int mode = !grouped ? MC_WGEMM_DIV : g == 0 ? MC_WGEMM_FIRST : MC_WGEMM_NEXT;
#pragma GCC unroll 8
        for (int v = 0; v < 2 * NP; ++v) {
            const __m256 sc = _mm256_loadu_ps(w->scale + g * cols + p * MC_WGEMM_NW + 8 * v);
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i) {
                float *t = tile + i * ldt + 8 * v;
                const __m256 prev =
                    mode == MC_WGEMM_NEXT ? _mm256_loadu_ps(t) : _mm256_setzero_ps();
                _mm256_storeu_ps(t, mc_scale_(s[i][v], sc, prev, mode));
            }
        }
    }
}

#define MC_DOT_VARIANT_(MR, NP)                                                               \
    static void mc_dot_##MR##_##NP##_(const mc_wpacked *w, const float *a, int64_t lda,       \
                                      int64_t p, float *tile, int64_t ldt)                    \
    {                                                                                         \
        if (w->bits == 4 && !w->grouped)                                                      \
            mc_dot_body_(w, a, lda, MR, NP, 4, 0, p, tile, ldt);                              \
        else if (w->bits == 4)                                                                \
            mc_dot_body_(w, a, lda, MR, NP, 4, 1, p, tile, ldt);                              \
        else if (!w->grouped)                                                                 \
            mc_dot_body_(w, a, lda, MR, NP, 8, 0, p, tile, ldt);                              \
        else                                                                                  \
            mc_dot_body_(w, a, lda, MR, NP, 8, 1, p, tile, ldt);                              \
    }
MC_DOT_VARIANT_(1, 4) MC_DOT_VARIANT_(1, 2) MC_DOT_VARIANT_(1, 1)
MC_DOT_VARIANT_(2, 2) MC_DOT_VARIANT_(2, 1)
MC_DOT_VARIANT_(3, 1) MC_DOT_VARIANT_(4, 1)

typedef void (*mc_dot_fn_)(const mc_wpacked *, const float *, int64_t, int64_t, float *, int64_t);
static const mc_dot_fn_ mc_dots_[4][3] = {
    {mc_dot_1_1_, mc_dot_1_2_, mc_dot_1_4_},
    {mc_dot_2_1_, mc_dot_2_2_, NULL},
    {mc_dot_3_1_, NULL, NULL},
    {mc_dot_4_1_, NULL, NULL},
};
static const int mc_dot_widest_[4] = {2, 1, 0, 0};

static void mc_wgemm_dot_avx2_(const mc_wpacked *w, const void *ap, int64_t lda, int mr,
                               int64_t p0, int64_t np, float *tile, int64_t ldt)
{
    const float *a = (const float *)ap;
    int64_t p = p0;
    for (int lg = mc_dot_widest_[mr - 1]; lg >= 0; --lg)
        for (; p0 + np - p >= (1 << lg); p += 1 << lg)
            mc_dots_[mr - 1][lg](w, a, lda, p, tile + (p - p0) * MC_WGEMM_NW, ldt);
}

static void mc_wgemm_combine_avx2_(const float *tile, int64_t ldt, int mr, int nc,
                                   const float *scale, float *tot, int64_t ldo, int mode)
{
    for (int i = 0; i < mr; ++i) {
        int j = 0;
        for (; j + 8 <= nc; j += 8) {
            const __m256 s = _mm256_loadu_ps(tile + i * ldt + j);
            const __m256 sc = _mm256_loadu_ps(scale + j);
            const __m256 t = _mm256_loadu_ps(tot + i * ldo + j);
            const __m256 v = mode == MC_WGEMM_DIV ? mc_scale_(s, sc, t, MC_WGEMM_DIV)
                             : mode == MC_WGEMM_FIRST ? mc_scale_(s, sc, t, MC_WGEMM_FIRST)
                                                      : mc_scale_(s, sc, t, MC_WGEMM_NEXT);
            _mm256_storeu_ps(tot + i * ldo + j, v);
        }
        for (; j < nc; ++j) {
            const float s = tile[i * ldt + j];
            float *t = tot + i * ldo + j;
            *t = mode == MC_WGEMM_DIV ? s / scale[j]
                                      : fmaf(s, scale[j], mode == MC_WGEMM_FIRST ? 0.0f : *t);
        }
    }
}

const mc_wgemm_table mc_wgemm_table_avx2 = {
    .dot = mc_wgemm_dot_avx2_,
    .combine = mc_wgemm_combine_avx2_,
};
