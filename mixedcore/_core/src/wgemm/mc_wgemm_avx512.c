/* AVX-512 level of the weight-only quantized GEMM (the driver is mc_wgemm.c; the arithmetic is
 * the scalar twin's, mc_wgemm_scalar.h).
 *
 * Design:
 *   a. The dot kernel streams the packed panels once for up to 4 rows: per block of 8 rows of a
 *      panel, one 64-byte load gives the 16 columns' codes; a 32-bit shift by an immediate puts
 *      a row's code in the low bits of each lane.  Per channel, VPERMPS (which reads only the
 *      low 4 bits of its index) maps the code to the float32 weight q = code - 8; grouped, the
 *      code is OR-ed into the float 2**23 (exact: 2**23 + code) and 2**23 + off subtracted,
 *      exactly.  int8 codes are widened and converted.  Then one FMA per row and column, rows in
 *      order, so the bits of the scalar twin.
 *   b. Accumulators: mr rows x np panels of 16 columns, np chosen per mr (8, 4, 2, 2 for 1-4
 *      rows) to hide the FMA latency with one row; the kernel is instantiated for each pair.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_simd_avx512.h"
#include "mc_wgemm_kernels.h"
#include "mc_wgemm_scalar.h"

#define MC_MAGIC_ 0x4B000000          /* the bits of 2**23 */
#define MC_MAGIC_F_ 8388608.0f

/* The 16 float32 weights of padded row (block base) + pos of one panel (design a). */
MC_INLINE_ __m512 mc_w4_(__m512i d, const int pos, const int grouped, __m512 lut, __m512 moff)
{
    const int sh = (pos & 1) ? 4 * (pos / 2) : 16 + 4 * (pos / 2);
    const __m512i idx = _mm512_srli_epi32(d, (unsigned)sh);
    if (!grouped)
        return _mm512_permutexvar_ps(idx, lut);
    const __m512i f = _mm512_ternarylogic_epi32(idx, _mm512_set1_epi32(0xF),
                                                _mm512_set1_epi32(MC_MAGIC_), 0xEA);
    return _mm512_sub_ps(_mm512_castsi512_ps(f), moff);
}

MC_INLINE_ __m512 mc_w8_(const uint8_t *p, const int grouped, __m512 off)
{
    const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
    return grouped ? _mm512_sub_ps(v, off) : v;
}

/* The scale step of design a (mc_wgemm.h) on 16 lanes. */
MC_INLINE_ __m512 mc_scale_(__m512 s, __m512 sc, __m512 t, const int mode)
{
    if (mode == MC_WGEMM_DIV)
        return _mm512_div_ps(s, sc);
    return _mm512_fmadd_ps(s, sc, mode == MC_WGEMM_FIRST ? _mm512_setzero_ps() : t);
}

/* Rows [0, MR) x panels [p, p + NP) (design b). */
MC_INLINE_ void mc_dot_body_(const mc_wpacked *w, const float *a, int64_t lda, const int MR,
                             const int NP, const int bits, const int grouped, int64_t p,
                             float *tile, int64_t ldt)
{
    const int64_t cols = w->panels * MC_WGEMM_NW;
    const __m512 lut = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const uint8_t *qp[8];
#pragma GCC unroll 8
    for (int j = 0; j < NP; ++j)
        qp[j] = w->q + (p + j) * w->pbytes;
    for (int64_t g = 0; g < w->groups; ++g) {
        __m512 s[4][8], moff[8];
#pragma GCC unroll 8
        for (int j = 0; j < NP; ++j) {
            const __m512 off = _mm512_loadu_ps(w->off + g * cols + (p + j) * MC_WGEMM_NW);
            moff[j] = bits == 4 ? _mm512_add_ps(off, _mm512_set1_ps(MC_MAGIC_F_)) : off;
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i)
                s[i][j] = _mm512_setzero_ps();
        }
        const int64_t R0 = g * w->kg, R1 = R0 + w->kg;
        if (bits == 4) {
            for (int64_t R = R0; R < R1; R += MC_WGEMM_KB) {
                __m512i d[8];
#pragma GCC unroll 8
                for (int j = 0; j < NP; ++j) {
                    const uint8_t *src = qp[j] + (R / MC_WGEMM_KB) * 64;
                    _mm_prefetch((const char *)src + 2048, _MM_HINT_T0);
                    d[j] = _mm512_load_si512((const void *)src);
                }
#pragma GCC unroll 8
                for (int pos = 0; pos < MC_WGEMM_KB; ++pos)
#pragma GCC unroll 8
                    for (int j = 0; j < NP; ++j) {
                        const __m512 wv = mc_w4_(d[j], pos, grouped, lut, moff[j]);
#pragma GCC unroll 4
                        for (int i = 0; i < MR; ++i)
                            s[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * lda + R + pos]), wv,
                                                      s[i][j]);
                    }
            }
        } else {
            for (int64_t R = R0; R < R1; ++R)
#pragma GCC unroll 8
                for (int j = 0; j < NP; ++j) {
                    if ((R & 3) == 0)                /* one line per panel every 4 rows */
                        _mm_prefetch((const char *)(qp[j] + R * MC_WGEMM_NW) + 2048,
                                     _MM_HINT_T0);
                    const __m512 wv = mc_w8_(qp[j] + R * MC_WGEMM_NW, grouped, moff[j]);
#pragma GCC unroll 4
                    for (int i = 0; i < MR; ++i)
                        s[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * lda + R]), wv, s[i][j]);
                }
        }
#pragma GCC unroll 8
        for (int j = 0; j < NP; ++j) {
            const __m512 sc = _mm512_loadu_ps(w->scale + g * cols + (p + j) * MC_WGEMM_NW);
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i) {
                float *t = tile + i * ldt + j * MC_WGEMM_NW;
                const int mode = !grouped ? MC_WGEMM_DIV : g == 0 ? MC_WGEMM_FIRST : MC_WGEMM_NEXT;
                const __m512 prev =
                    mode == MC_WGEMM_NEXT ? _mm512_loadu_ps(t) : _mm512_setzero_ps();
                _mm512_storeu_ps(t, mc_scale_(s[i][j], sc, prev, mode));
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
MC_DOT_VARIANT_(1, 8) MC_DOT_VARIANT_(1, 4) MC_DOT_VARIANT_(1, 2) MC_DOT_VARIANT_(1, 1)
MC_DOT_VARIANT_(2, 4) MC_DOT_VARIANT_(2, 2) MC_DOT_VARIANT_(2, 1)
MC_DOT_VARIANT_(3, 2) MC_DOT_VARIANT_(3, 1)
MC_DOT_VARIANT_(4, 2) MC_DOT_VARIANT_(4, 1)

typedef void (*mc_dot_fn_)(const mc_wpacked *, const float *, int64_t, int64_t, float *, int64_t);
/* [mr - 1][log2 np]: the widest variant first */
static const mc_dot_fn_ mc_dots_[4][4] = {
    {mc_dot_1_1_, mc_dot_1_2_, mc_dot_1_4_, mc_dot_1_8_},
    {mc_dot_2_1_, mc_dot_2_2_, mc_dot_2_4_, NULL},
    {mc_dot_3_1_, mc_dot_3_2_, NULL, NULL},
    {mc_dot_4_1_, mc_dot_4_2_, NULL, NULL},
};
static const int mc_dot_widest_[4] = {3, 2, 1, 1};

static void mc_wgemm_dot_avx512_(const mc_wpacked *w, const void *ap, int64_t lda, int mr,
                                 int64_t p0, int64_t np, float *tile, int64_t ldt)
{
    const float *a = (const float *)ap;
    int64_t p = p0;
    for (int lg = mc_dot_widest_[mr - 1]; lg >= 0; --lg)
        for (; p0 + np - p >= (1 << lg); p += 1 << lg)
            mc_dots_[mr - 1][lg](w, a, lda, p, tile + (p - p0) * MC_WGEMM_NW, ldt);
}

static void mc_wgemm_widen_avx512_(const mc_wpacked *w, int64_t g, int64_t r0, int64_t rows,
                                   int64_t p0, int np, int nr, float *dst)
{
    const int64_t cols = w->panels * MC_WGEMM_NW;
    const __m512 lut = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    for (int j = 0; j < nr / MC_WGEMM_NW; ++j) {
        float *d = dst + j * MC_WGEMM_NW;
        if (j >= np) {
            for (int64_t r = 0; r < rows; ++r)
                _mm512_storeu_ps(d + r * nr, _mm512_setzero_ps());
            continue;
        }
        const uint8_t *q = w->q + (p0 + j) * w->pbytes;
        const __m512 off = _mm512_loadu_ps(w->off + g * cols + (p0 + j) * MC_WGEMM_NW);
        if (w->bits == 8) {
            for (int64_t r = 0; r < rows; ++r)
                _mm512_storeu_ps(d + r * nr, mc_w8_(q + (r0 + r) * MC_WGEMM_NW, 1, off));
            continue;
        }
        const __m512 moff = _mm512_add_ps(off, _mm512_set1_ps(MC_MAGIC_F_));
        for (int64_t r = 0; r < rows; r += MC_WGEMM_KB) {
            const __m512i dv = _mm512_load_si512((const void *)(q + ((r0 + r) / MC_WGEMM_KB) * 64));
#pragma GCC unroll 8
            for (int pos = 0; pos < MC_WGEMM_KB; ++pos)
                _mm512_storeu_ps(d + (r + pos) * nr, w->grouped ? mc_w4_(dv, pos, 1, lut, moff)
                                                                : mc_w4_(dv, pos, 0, lut, moff));
        }
    }
}

/* 16 columns at j (mask m) of rows [0, mr): the scale loaded once, the mode fixed (inlined per
 * mode, so the loop holds one load, one operation and one store per row). */
MC_INLINE_ void mc_combine_cols_(const float *tile, int64_t ldt, int mr, int64_t j, __mmask16 m,
                                 const float *scale, float *tot, int64_t ldo, const int mode)
{
    const __m512 sc = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, scale + j);
    for (int i = 0; i < mr; ++i) {
        const __m512 s = _mm512_maskz_loadu_ps(m, tile + i * ldt + j);
        const __m512 t = mode == MC_WGEMM_NEXT ? _mm512_maskz_loadu_ps(m, tot + i * ldo + j)
                                               : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(tot + i * ldo + j, m, mc_scale_(s, sc, t, mode));
    }
}

static void mc_wgemm_combine_avx512_(const float *tile, int64_t ldt, int mr, int nc,
                                     const float *scale, float *tot, int64_t ldo, int mode)
{
    for (int j = 0; j < nc; j += 16) {
        const __mmask16 m = mc_mask16_avx512(nc - j);
        if (mode == MC_WGEMM_DIV)
            mc_combine_cols_(tile, ldt, mr, j, m, scale, tot, ldo, MC_WGEMM_DIV);
        else if (mode == MC_WGEMM_FIRST)
            mc_combine_cols_(tile, ldt, mr, j, m, scale, tot, ldo, MC_WGEMM_FIRST);
        else
            mc_combine_cols_(tile, ldt, mr, j, m, scale, tot, ldo, MC_WGEMM_NEXT);
    }
}

const mc_wgemm_table mc_wgemm_table_avx512 = {
    .dot = mc_wgemm_dot_avx512_,
    .dot_bf16 = NULL,
    .widen = mc_wgemm_widen_avx512_,
    .combine = mc_wgemm_combine_avx512_,
};
