/* The avx2 level of the int8 GEMM: VPMADDWD on sign-extended int16 (exact: each pair sum is at
 * most 2 * 16384), a 2 x 16 micro-kernel.
 *
 * Design:
 *   a. A is packed as int16 (4 values of one row per group of 4 k: one 64-bit broadcast); each
 *      B group of 4 columns x 4 k is sign-extended to 16 int16 (VPMOVSXBW).  VPMADDWD then gives,
 *      per column, two int32 partial sums (k 0-1 and k 2-3 of the group), accumulated apart and
 *      added pairwise at the end (VPHADDD): integer sums, so the order changes no bit.
 *   b. The epilogue is the scalar one (the driver's): this level is for CPUs without AVX-512.
 */
#include <immintrin.h>
#include <stdint.h>
#include "mc_igemm_kernels.h"
#include "mc_igemm_scalar.h"
#include "mc_simd_avx2.h"

#define MC_MR 2
#define MC_NR 16

static void mc_pack_a_avx2_(const int8_t *a, int64_t rs, int64_t cs, int64_t rows, int64_t kc,
                            int mr, void *dst)
{
    mc_igemm_pack_a_scalar_(a, rs, cs, rows, kc, mr, 2, dst);
}

MC_INLINE_ void mc_ukr_body_(const int rows, int64_t kq, const int16_t *a, const int8_t *b,
                             int32_t *tile)
{
    __m256i c[MC_MR][4];
    for (int i = 0; i < rows; ++i)
        for (int q = 0; q < 4; ++q)
            c[i][q] = _mm256_setzero_si256();
    for (int64_t p = 0; p < kq; ++p) {
        __m256i bv[4];
        for (int q = 0; q < 4; ++q)
            bv[q] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 16 * q)));
        for (int i = 0; i < rows; ++i) {
            int64_t w;
            memcpy(&w, a + 4 * i, 8);
            const __m256i ai = _mm256_set1_epi64x(w);
            for (int q = 0; q < 4; ++q)
                c[i][q] = _mm256_add_epi32(c[i][q], _mm256_madd_epi16(ai, bv[q]));
        }
        a += MC_MR * 4;
        b += MC_NR * 4;
    }
    for (int i = 0; i < rows; ++i)
        for (int h = 0; h < 2; ++h) {
            /* columns 8h .. 8h + 7: hadd gives (0 1 4 5 | 2 3 6 7), the permute puts them in order */
            const __m256i s = _mm256_hadd_epi32(c[i][2 * h], c[i][2 * h + 1]);
            _mm256_storeu_si256((__m256i *)(tile + i * MC_NR + 8 * h),
                                _mm256_permute4x64_epi64(s, 0xD8));
        }
}

static void mc_ukr_avx2_(int64_t kq, const void *ap, const void *bp, int32_t *tile, int mr)
{
    if (mr == 2)
        mc_ukr_body_(2, kq, (const int16_t *)ap, (const int8_t *)bp, tile);
    else
        mc_ukr_body_(1, kq, (const int16_t *)ap, (const int8_t *)bp, tile);
}

const mc_igemm_table mc_igemm_table_avx2 = {
    {MC_MR, MC_NR, 2, 0, mc_pack_a_avx2_, mc_ukr_avx2_, NULL, NULL, 72, 2048, 1024},
    NULL,
    NULL,
};
