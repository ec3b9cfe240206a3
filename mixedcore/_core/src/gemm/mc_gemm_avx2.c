/* AVX2 + FMA + F16C GEMM: float32 panels and a 6 x 16 FMA micro-kernel.
 *
 * Design:
 *   a. Micro-kernel 6 x 16: 12 ymm accumulators, 2 ymm of B and one broadcast of A per step
 *      (15 of the 16 ymm registers).  One FMA per product, k in order (as at the avx512 level).
 *      Tiles with fewer rows run a copy specialised to that many rows.
 *   b. Packing: lanes contiguous in memory are loaded 8 at a time (F16C or a shift converts
 *      16-bit types exactly), the partial group at the edge element by element through the scalar
 *      twins; lanes contiguous along k (rows of A) are loaded as 8 rows of 8 k and transposed in
 *      registers (the k columns after the last full group of 8 through the scalar twins); every
 *      other layout uses the scalar pack.  No load touches an element outside the
 *      operand.
 *   c. The epilogue is the scalar one (the table leaves it empty): this level is the fallback for
 *      CPUs without AVX-512, where the micro-kernel is what matters.
 *   d. An in-place variant of the micro-kernel reads rows of B (small M) or 16-bit panels,
 *      converting on load, with the same FMAs in the same order.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_gemm_kernels.h"
#include "mc_gemm_scalar.h"
#include "mc_simd_avx2.h"

#define MC_MR 6
#define MC_NV 2
#define MC_NR (8 * MC_NV)

/* Lanes contiguous along k (rows of A): 8 lanes x 8 k loaded as rows and transposed in
 * registers; the k columns past the last multiple of 8 go through the scalar pack. */
static void mc_pack_k_contig_(const char *src, int type, int64_t ls, int64_t lanes, int64_t kc,
                              int w, float *d)
{
    const int es = type == MC_F32 ? 4 : 2;
    const int64_t kfull = kc / 8 * 8;
    for (int l0 = 0; l0 < w; l0 += 8) {
        const int wl = w - l0 < 8 ? w - l0 : 8;
        const __m256i store_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(wl),
                                                      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const int64_t nl = lanes - l0 < 8 ? lanes - l0 : 8;
        for (int64_t k0 = 0; k0 < kfull; k0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; ++i)
                r[i] = i < nl ? mc_load8_avx2(src + (l0 + i) * ls + k0 * es, type) : _mm256_setzero_ps();
            mc_transpose8_avx2(r);
            for (int j = 0; j < 8; ++j)
                _mm256_maskstore_ps(d + (k0 + j) * w + l0, store_mask, r[j]);
        }
    }
    if (kfull < kc)
        mc_gemm_pack_scalar_(src + kfull * es, type, ls, es, lanes, kc - kfull, w, d + kfull * w);
}

static int mc_pack_avx2_(const char *src, int type, int64_t ls, int64_t ks, int64_t lanes,
                         int64_t kc, int w, void *dst)
{
    const int64_t es = type == MC_F32 ? 4 : 2;
    if (ls != es) {
        if (ks == es)
            mc_pack_k_contig_(src, type, ls, lanes, kc, w, (float *)dst);
        else
            mc_gemm_pack_scalar_(src, type, ls, ks, lanes, kc, w, dst);
        return 0;
    }
    float *d = (float *)dst;
    const int64_t full = lanes / 8 * 8;
    for (int64_t k = 0; k < kc; ++k) {
        const char *s = src + k * ks;
        int64_t l = 0;
        for (; l < full; l += 8)
            _mm256_storeu_ps(d + l, mc_load8_avx2(s + l * es, type));
        if (l < w)
            mc_gemm_pack_scalar_(s + l * es, type, es, 0, lanes - l, 1, (int)(w - l), d + l);
        d += w;
    }
    return 0;
}

MC_INLINE_ void mc_ukr_body_(const int rows, int64_t kc, const float *a, const float *b,
                             float *tile)
{
    __m256 c[MC_MR][MC_NV];
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            c[i][j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        __m256 bv[MC_NV];
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            bv[j] = _mm256_load_ps(b + 8 * j);
#pragma GCC unroll 8
        for (int i = 0; i < rows; ++i) {
            const __m256 ai = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 4
            for (int j = 0; j < MC_NV; ++j)
                c[i][j] = _mm256_fmadd_ps(ai, bv[j], c[i][j]);
        }
        a += MC_MR;
        b += MC_NR;
    }
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            _mm256_store_ps(tile + i * MC_NR + 8 * j, c[i][j]);
}

#define MC_UKR_ROWS_(R)                                                                     \
    static void mc_ukr_##R##_(int64_t kc, const float *a, const float *b, float *tile)      \
    {                                                                                       \
        mc_ukr_body_(R, kc, a, b, tile);                                                    \
    }
MC_UKR_ROWS_(1) MC_UKR_ROWS_(2) MC_UKR_ROWS_(3) MC_UKR_ROWS_(4) MC_UKR_ROWS_(5) MC_UKR_ROWS_(6)

typedef void (*mc_ukr_rows_fn_)(int64_t, const float *, const float *, float *);
static const mc_ukr_rows_fn_ mc_ukr_rows_[MC_MR + 1] = {
    NULL, mc_ukr_1_, mc_ukr_2_, mc_ukr_3_, mc_ukr_4_, mc_ukr_5_, mc_ukr_6_,
};

static void mc_ukr_f32_avx2_(int64_t kc, const void *ap, const void *bp, float *tile, int mr)
{
    mc_ukr_rows_[mr](kc, (const float *)ap, (const float *)bp, tile);
}

/* B read in place (small M) or from 16-bit panels: each row's 8-lane groups loaded with the
 * packing's conversion (a partial group through a zero-filled copy, so nothing past nr is
 * read), then the FMAs of mc_ukr_body_ in the same order. */
MC_INLINE_ __m256 mc_load8_part_(const char *p, int type, int n)
{
    if (n >= 8)
        return mc_load8_avx2(p, type);
    if (n <= 0)
        return _mm256_setzero_ps();
    char buf[32] = {0};
    memcpy(buf, p, (size_t)n * (type == MC_F32 ? 4 : 2));
    return mc_load8_avx2(buf, type);
}

MC_INLINE_ void mc_ukr_direct_body_(const int rows, int64_t kc, const float *a, const char *b,
                                    int64_t ldb, int type, int nr, float *tile, int64_t ldt,
                                    int accumulate)
{
    const int es = type == MC_F32 ? 4 : 2;
    __m256 c[MC_MR][MC_NV];
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            c[i][j] = accumulate && 8 * j < nr ? _mm256_loadu_ps(tile + i * ldt + 8 * j)
                                               : _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        __m256 bv[MC_NV];
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            bv[j] = mc_load8_part_(b + 8 * j * es, type, nr - 8 * j);
#pragma GCC unroll 8
        for (int i = 0; i < rows; ++i) {
            const __m256 ai = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 4
            for (int j = 0; j < MC_NV; ++j)
                c[i][j] = _mm256_fmadd_ps(ai, bv[j], c[i][j]);
        }
        a += MC_MR;
        b += ldb;
    }
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            if (8 * j < nr)    /* the tile row ends at the NR multiple after nr */
                _mm256_storeu_ps(tile + i * ldt + 8 * j, c[i][j]);
}

#define MC_UKR_DIRECT_ROWS_(R)                                                              \
    static void mc_ukr_direct_##R##_(int64_t kc, const float *a, const char *b, int64_t ldb, \
                                     int type, int nr, float *tile, int64_t ldt, int acc)   \
    {                                                                                       \
        if (type == MC_F32)                                                                 \
            mc_ukr_direct_body_(R, kc, a, b, ldb, MC_F32, nr, tile, ldt, acc);              \
        else if (type == MC_F16)                                                            \
            mc_ukr_direct_body_(R, kc, a, b, ldb, MC_F16, nr, tile, ldt, acc);              \
        else                                                                                \
            mc_ukr_direct_body_(R, kc, a, b, ldb, MC_BF16, nr, tile, ldt, acc);             \
    }
MC_UKR_DIRECT_ROWS_(1) MC_UKR_DIRECT_ROWS_(2) MC_UKR_DIRECT_ROWS_(3) MC_UKR_DIRECT_ROWS_(4)
MC_UKR_DIRECT_ROWS_(5) MC_UKR_DIRECT_ROWS_(6)

static int mc_ukr_direct_f32_avx2_(int64_t kc, const void *ap, const char *b, int64_t ldb,
                                   int64_t pstride, int b_type, int nr, float *tile, int64_t ldt,
                                   int mr, int accumulate)
{
    typedef void (*fn_t)(int64_t, const float *, const char *, int64_t, int, int, float *,
                         int64_t, int);
    static const fn_t rows[MC_MR + 1] = {NULL, mc_ukr_direct_1_, mc_ukr_direct_2_,
                                         mc_ukr_direct_3_, mc_ukr_direct_4_, mc_ukr_direct_5_,
                                         mc_ukr_direct_6_};
    (void)pstride;                       /* nr <= MC_NR: one group of columns */
    rows[mr](kc, (const float *)ap, b, ldb, b_type, nr, tile, ldt, accumulate);
    return 0;
}

const mc_gemm_table mc_gemm_table_avx2 = {
    .f32 = {.mr = MC_MR, .nr = MC_NR, .pairs = 0, .pack = mc_pack_avx2_, .ukr = mc_ukr_f32_avx2_,
            .ukr_direct = mc_ukr_direct_f32_avx2_, .mc = 72, .kc = 512, .nc = 1024},
};
