/* The avx512 level of the int8 GEMM: VPMADDWD on sign-extended int16 in zmm registers, a
 * 6 x 32 micro-kernel (24 accumulators), the AVX-512 epilogue, and vector row quantization.
 *
 * Design:
 *   a. As the avx2 level (mc_igemm_avx2.c, design a) on 512 bits: A int16, one 64-bit broadcast
 *      per row and group of 4 k; each 32-byte quarter of a B group (8 columns x 4 k) sign-extended
 *      to 32 int16; per column two int32 partial sums, added pairwise at the end (two
 *      VPERMT2D and a VPADDD per 16 columns).
 *   b. Row quantization (mc_igemm_quant_row_scalar_ in vectors): a pass for max|x| (VMAXPS on
 *      absolute values, NaN lanes found by a compare), then x * s rounded to the dtype,
 *      VRNDSCALEPS to nearest even, clipped, NaN lanes zeroed, narrowed with saturation.
 *   c. The codes are narrowed in registers, 64 to a store (two VPACKSSDW-VPACKSSWB stages and a
 *      dword permutation; the tail by VPMOVSDB): VPMOVSDB into memory, which the compiler made
 *      of a narrowing followed by a masked store, took a third of the pass (1024 x 3072 bfloat16
 *      on one thread: 0.61 ms before).
 *   d. Min-max quantization with a zero point (mc_igemm_quant_row_zp_scalar_ in vectors): a
 *      pass for the smallest and largest values (VMINPS / VMAXPS from 0, so masked-off lanes
 *      loaded as 0 change nothing; NaN and infinite lanes found by a compare of |x| with
 *      FLT_MAX), then x * s, VRNDSCALEPS, + z, clipped to [-128, 127], narrowed as in c.
 */
#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_act_avx512_inl.h"
#include "mc_igemm_kernels.h"
#include "mc_igemm_scalar.h"
#include "mc_simd_avx512.h"

#define MC_MR 6
#define MC_NR 32

static void mc_pack_a_avx512_(const int8_t *a, int64_t rs, int64_t cs, int64_t rows, int64_t kc,
                              int mr, void *dst)
{
    mc_igemm_pack_a_scalar_(a, rs, cs, rows, kc, mr, 2, dst);
}

/* the pairwise sums of the 2 x 16 partial sums of x (columns 0-7) and y (8-15) */
MC_INLINE_ __m512i mc_pairs_(__m512i x, __m512i y)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_permutex2var_epi32(x, even, y),
                            _mm512_permutex2var_epi32(x, odd, y));
}

MC_INLINE_ void mc_ukr_body_(const int rows, int64_t kq, const int16_t *a, const int8_t *b,
                             int32_t *tile)
{
    __m512i c[MC_MR][4];
#pragma GCC unroll 6
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)
            c[i][q] = _mm512_setzero_si512();
    for (int64_t p = 0; p < kq; ++p) {
        __m512i bv[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)
            bv[q] = _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *)(b + 32 * q)));
#pragma GCC unroll 6
        for (int i = 0; i < rows; ++i) {
            int64_t w;
            memcpy(&w, a + 4 * i, 8);
            const __m512i ai = _mm512_set1_epi64(w);
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q)
                c[i][q] = _mm512_add_epi32(c[i][q], _mm512_madd_epi16(ai, bv[q]));
        }
        a += MC_MR * 4;
        b += MC_NR * 4;
    }
#pragma GCC unroll 6
    for (int i = 0; i < rows; ++i) {
        _mm512_storeu_si512(tile + i * MC_NR, mc_pairs_(c[i][0], c[i][1]));
        _mm512_storeu_si512(tile + i * MC_NR + 16, mc_pairs_(c[i][2], c[i][3]));
    }
}

#define MC_UKR_ROWS_(R)                                                                     \
    static void mc_ukr_##R##_(int64_t kq, const void *a, const void *b, int32_t *tile)      \
    {                                                                                       \
        mc_ukr_body_(R, kq, (const int16_t *)a, (const int8_t *)b, tile);                   \
    }
MC_UKR_ROWS_(1) MC_UKR_ROWS_(2) MC_UKR_ROWS_(3) MC_UKR_ROWS_(4) MC_UKR_ROWS_(5) MC_UKR_ROWS_(6)

typedef void (*mc_ukr_rows_fn_)(int64_t, const void *, const void *, int32_t *);
static const mc_ukr_rows_fn_ mc_ukr_rows_[MC_MR + 1] = {
    NULL, mc_ukr_1_, mc_ukr_2_, mc_ukr_3_, mc_ukr_4_, mc_ukr_5_, mc_ukr_6_,
};

static void mc_ukr_avx512_(int64_t kq, const void *ap, const void *bp, int32_t *tile, int mr)
{
    mc_ukr_rows_[mr](kq, ap, bp, tile);
}

#define MC_IEPI_FN_ mc_epi_avx512_
#include "mc_igemm_epi_avx512_inl.h"

/* --- row quantization (design b) ------------------------------------------------------------- */

/* v rounded to type and back (f16: VCVTPS2PH; bf16: the integer rounding of mc_simd_avx512.h) */
MC_INLINE_ __m512 mc_round_type_(__m512 v, int type)
{
    if (type == MC_F16)
        return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (type == MC_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v)), 16));
    return v;
}

/* The int32 codes of 16 elements (mask m) at scale sv: x * s rounded to the dtype, to nearest
 * even, clipped to [-127, 127], NaN lanes 0 (design b). */
MC_INLINE_ __m512i mc_quant16_(const char *x, int type, __mmask16 m, __m512 sv)
{
    const __m512 y = mc_round_type_(_mm512_mul_ps(mc_load16_avx512(x, type, m), sv), type);
    const __mmask16 ok = _mm512_cmp_ps_mask(y, y, _CMP_ORD_Q);
    const __m512 r = _mm512_roundscale_ps(
        _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_maskz_cvtps_epi32(ok, r);
}

static void mc_quant_avx512_(const char *x, int type, int64_t k, int64_t xs, int8_t *q,
                             int64_t qs, char *scale)
{
    const int64_t es = type == MC_F32 ? 4 : 2;
    if (xs != es || qs != 1) {
        mc_igemm_quant_row_scalar_(x, type, k, xs, q, qs, scale);
        return;
    }
    /* max|x| in four independent chains (the maximum of non-NaN values is the same in any
     * order; with a NaN the scale is NaN whatever the maximum) */
    __m512 mx[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                    _mm512_setzero_ps()};
    __mmask16 nan = 0;
    int64_t t = 0;
    for (; t + 64 <= k; t += 64)
        for (int u = 0; u < 4; ++u) {
            const __m512 a = _mm512_abs_ps(mc_load16_avx512(x + (t + 16 * u) * es, type,
                                                            (__mmask16)0xFFFF));
            nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
            mx[u] = _mm512_max_ps(mx[u], a);
        }
    for (; t < k; t += 16) {
        const __mmask16 m = mc_mask16_avx512(k - t);
        const __m512 a = _mm512_abs_ps(mc_load16_avx512(x + t * es, type, m));
        nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
        mx[0] = _mm512_max_ps(mx[0], a);
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(mx[0], mx[1]),
                                                          _mm512_max_ps(mx[2], mx[3])));
    const float eps = mc_igemm_round_(1e-7f, type);
    const float tt = mc_igemm_round_(nan ? NAN : amax + eps, type);
    const float s = mc_igemm_round_(127.0f / tt, type);
    const __m512 sv = _mm512_set1_ps(s);
    /* design c: 64 codes per store, narrowed in registers */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (t = 0; t + 64 <= k; t += 64) {
        __m512i v[4];
        for (int u = 0; u < 4; ++u)
            v[u] = mc_quant16_(x + (t + 16 * u) * es, type, (__mmask16)0xFFFF, sv);
        const __m512i b = _mm512_packs_epi16(_mm512_packs_epi32(v[0], v[1]),
                                             _mm512_packs_epi32(v[2], v[3]));
        _mm512_storeu_si512(q + t, _mm512_permutexvar_epi32(order, b));
    }
    for (; t < k; t += 16) {
        const __mmask16 m = mc_mask16_avx512(k - t);
        _mm_mask_storeu_epi8(q + t, m, _mm512_cvtsepi32_epi8(mc_quant16_(x + t * es, type, m, sv)));
    }
    mc_igemm_store_(scale, s, type);
}

/* The int32 codes of 16 elements (mask m) at scale sv and zero point zv (design d). */
MC_INLINE_ __m512i mc_quant_zp16_(const char *x, int type, __mmask16 m, __m512 sv, __m512 zv)
{
    const __m512 r = _mm512_add_ps(
        _mm512_roundscale_ps(_mm512_mul_ps(mc_load16_avx512(x, type, m), sv),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), zv);
    return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-128.0f)),
                                            _mm512_set1_ps(127.0f)));
}

static void mc_quant_zp_avx512_(const char *x, int type, int64_t k, int64_t xs, int8_t *q,
                                int64_t qs, float *scale, int32_t *zero)
{
    const int64_t es = type == MC_F32 ? 4 : 2;
    if (xs != es || qs != 1) {
        mc_igemm_quant_row_zp_scalar_(x, type, k, xs, q, qs, scale, zero);
        return;
    }
    /* the extremes in four independent chains (order does not matter for non-NaN values) */
    __m512 lo[4], hi[4];
    for (int u = 0; u < 4; ++u)
        lo[u] = hi[u] = _mm512_setzero_ps();
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    __mmask16 bad = 0;
    int64_t t = 0;
    for (; t + 64 <= k; t += 64)
        for (int u = 0; u < 4; ++u) {
            const __m512 v = mc_load16_avx512(x + (t + 16 * u) * es, type, (__mmask16)0xFFFF);
            bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(v), big, _CMP_NLE_UQ);
            lo[u] = _mm512_min_ps(lo[u], v);
            hi[u] = _mm512_max_ps(hi[u], v);
        }
    for (; t < k; t += 16) {
        const __m512 v = mc_load16_avx512(x + t * es, type, mc_mask16_avx512(k - t));
        bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(v), big, _CMP_NLE_UQ);
        lo[0] = _mm512_min_ps(lo[0], v);
        hi[0] = _mm512_max_ps(hi[0], v);
    }
    if (bad) {
        memset(q, 0, (size_t)k);
        *scale = NAN;
        *zero = 0;
        return;
    }
    float s;
    int32_t z;
    mc_igemm_zp_params_(
        _mm512_reduce_min_ps(_mm512_min_ps(_mm512_min_ps(lo[0], lo[1]), _mm512_min_ps(lo[2], lo[3]))),
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(hi[0], hi[1]), _mm512_max_ps(hi[2], hi[3]))),
        &s, &z);
    const __m512 sv = _mm512_set1_ps(s), zv = _mm512_set1_ps((float)z);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (t = 0; t + 64 <= k; t += 64) {
        __m512i v[4];
        for (int u = 0; u < 4; ++u)
            v[u] = mc_quant_zp16_(x + (t + 16 * u) * es, type, (__mmask16)0xFFFF, sv, zv);
        const __m512i b = _mm512_packs_epi16(_mm512_packs_epi32(v[0], v[1]),
                                             _mm512_packs_epi32(v[2], v[3]));
        _mm512_storeu_si512(q + t, _mm512_permutexvar_epi32(order, b));
    }
    for (; t < k; t += 16) {
        const __mmask16 m = mc_mask16_avx512(k - t);
        _mm_mask_storeu_epi8(q + t, m,
                             _mm512_cvtsepi32_epi8(mc_quant_zp16_(x + t * es, type, m, sv, zv)));
    }
    *scale = s;
    *zero = z;
}

const mc_igemm_table mc_igemm_table_avx512 = {
    {MC_MR, MC_NR, 2, 0, mc_pack_a_avx512_, mc_ukr_avx512_, NULL, mc_epi_avx512_, 138, 4096, 1024},
    mc_quant_avx512_,
    mc_quant_zp_avx512_,
};
