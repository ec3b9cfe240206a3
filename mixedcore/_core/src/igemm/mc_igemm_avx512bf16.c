/* The avx512bf16 level of the int8 GEMM: VPDPBUSD (AVX512_VNNI, which every CPU with AVX512_BF16
 * has; the level requires both, runtime/mc_cpu.c).
 *
 * Design:
 *   a. VPDPBUSD multiplies 4 unsigned bytes by 4 signed bytes per 32-bit lane and adds the four
 *      products to the lane, wrapping (no saturation): 64 multiply-adds per instruction, twice
 *      VDPBF16PS's.  A is packed as a + 128 (uint8, XOR 0x80); each accumulator starts at
 *      -128 times its column's sum over the block (stored after the B panel's groups), so the
 *      tile is exactly sum (a + 128) b - 128 sum b = A @ B.  The intermediate sums may wrap in
 *      int32; the result does not (mc_igemm.h, design a), so it is exact.
 *   b. Micro-kernel 14 x 32 (28 zmm accumulators, as the bfloat16 kernel of mc_gemm_avx512bf16.c:
 *      two B loads and 14 broadcasts per group of 4 k), with copies for fewer rows.
 *   c. One row (batch 1) against up to 4 panels (mc_ukr_wide_): 16 accumulators, the even and
 *      odd groups of k apart (added at the end: integers), so the loop streams the weights at
 *      the load rate rather than waiting on VPDPBUSD's latency; B is prefetched 2 KiB ahead per
 *      panel.
 *   d. The epilogue and the row quantization are the avx512 level's (shared source / inherited).
 */
#include <immintrin.h>
#include <stdint.h>
#include "mc_act_avx512_inl.h"
#include "mc_igemm_kernels.h"
#include "mc_igemm_scalar.h"
#include "mc_simd_avx512.h"

#define MC_MR 14
#define MC_NR 32

/* a + 128 = a XOR 0x80.  Rows contiguous along k: 16 rows x 16 groups of 4 k loaded as rows of
 * 32-bit words, transposed in registers (pure bit moves), the first mr words of each stored; k
 * past kc is masked off at the load (0, then 128). */
static void mc_pack_a_vnni_(const int8_t *a, int64_t rs, int64_t cs, int64_t rows, int64_t kc,
                            int mr, void *dst)
{
    if (cs != 1) {
        mc_igemm_pack_a_scalar_(a, rs, cs, rows, kc, mr, -1, dst);
        return;
    }
    uint32_t *d = (uint32_t *)dst;
    const int64_t kq = (kc + 3) / 4;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __mmask16 mw = mc_mask16_avx512(mr);
    for (int64_t q0 = 0; q0 < kq; q0 += 16) {
        const int64_t left = kc - 4 * q0;
        const __mmask64 m = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        __m512 r[16];
        for (int i = 0; i < 16; ++i)
            r[i] = _mm512_castsi512_ps(_mm512_xor_si512(
                i < rows ? _mm512_maskz_loadu_epi8(m, a + i * rs + 4 * q0) : _mm512_setzero_si512(),
                flip));
        mc_transpose16_avx512(r);
        const int64_t nq = kq - q0 < 16 ? kq - q0 : 16;
        for (int64_t j = 0; j < nq; ++j)
            _mm512_mask_storeu_epi32(d + (q0 + j) * mr, mw, _mm512_castps_si512(r[j]));
    }
}

MC_INLINE_ void mc_ukr_body_(const int rows, int64_t kq, const uint8_t *a, const int8_t *b,
                             int32_t *tile)
{
    __m512i c[MC_MR][2];
    const int32_t *sums = (const int32_t *)(b + kq * MC_NR * 4);
    const __m512i s0 = _mm512_load_si512(sums), s1 = _mm512_load_si512(sums + 16);
#pragma GCC unroll 14
    for (int i = 0; i < rows; ++i) {
        c[i][0] = s0;
        c[i][1] = s1;
    }
    for (int64_t p = 0; p < kq; ++p) {
        _mm_prefetch((const char *)(b + 32 * MC_NR * 4), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + 32 * MC_NR * 4 + 64), _MM_HINT_T0);
        const __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 64);
#pragma GCC unroll 14
        for (int i = 0; i < rows; ++i) {
            int32_t w;
            memcpy(&w, a + 4 * i, 4);
            const __m512i ai = _mm512_set1_epi32(w);
            c[i][0] = _mm512_dpbusd_epi32(c[i][0], ai, b0);
            c[i][1] = _mm512_dpbusd_epi32(c[i][1], ai, b1);
        }
        a += MC_MR * 4;
        b += MC_NR * 4;
    }
#pragma GCC unroll 14
    for (int i = 0; i < rows; ++i) {
        _mm512_storeu_si512(tile + i * MC_NR, c[i][0]);
        _mm512_storeu_si512(tile + i * MC_NR + 16, c[i][1]);
    }
}

#define MC_UKR_ROWS_(R)                                                                     \
    static void mc_ukr_##R##_(int64_t kq, const void *a, const void *b, int32_t *tile)      \
    {                                                                                       \
        mc_ukr_body_(R, kq, (const uint8_t *)a, (const int8_t *)b, tile);                   \
    }
MC_UKR_ROWS_(1) MC_UKR_ROWS_(2) MC_UKR_ROWS_(3) MC_UKR_ROWS_(4) MC_UKR_ROWS_(5)
MC_UKR_ROWS_(6) MC_UKR_ROWS_(7) MC_UKR_ROWS_(8) MC_UKR_ROWS_(9) MC_UKR_ROWS_(10)
MC_UKR_ROWS_(11) MC_UKR_ROWS_(12) MC_UKR_ROWS_(13) MC_UKR_ROWS_(14)

typedef void (*mc_ukr_rows_fn_)(int64_t, const void *, const void *, int32_t *);
static const mc_ukr_rows_fn_ mc_ukr_rows_[MC_MR + 1] = {
    NULL, mc_ukr_1_, mc_ukr_2_, mc_ukr_3_, mc_ukr_4_, mc_ukr_5_, mc_ukr_6_, mc_ukr_7_,
    mc_ukr_8_, mc_ukr_9_, mc_ukr_10_, mc_ukr_11_, mc_ukr_12_, mc_ukr_13_, mc_ukr_14_,
};

static void mc_ukr_vnni_(int64_t kq, const void *ap, const void *bp, int32_t *tile, int mr)
{
    mc_ukr_rows_[mr](kq, ap, bp, tile);
}

/* design c */
MC_INLINE_ void mc_wide_body_(const int np, int64_t kq, const uint8_t *a, const int8_t *b,
                              int64_t pstride, int32_t *tile)
{
    __m512i c[2][2 * MC_IGEMM_WIDE];
    const int32_t *sums = (const int32_t *)(b + kq * MC_NR * 4);
#pragma GCC unroll 4
    for (int q = 0; q < np; ++q) {
        const int32_t *sq = (const int32_t *)((const char *)sums + q * pstride);
        c[0][2 * q] = _mm512_load_si512(sq);
        c[0][2 * q + 1] = _mm512_load_si512(sq + 16);
        c[1][2 * q] = _mm512_setzero_si512();
        c[1][2 * q + 1] = _mm512_setzero_si512();
    }
    int64_t p = 0;
    for (; p + 1 < kq; p += 2) {
        int32_t w0, w1;
        memcpy(&w0, a + p * MC_MR * 4, 4);
        memcpy(&w1, a + (p + 1) * MC_MR * 4, 4);
        const __m512i a0 = _mm512_set1_epi32(w0), a1 = _mm512_set1_epi32(w1);
#pragma GCC unroll 4
        for (int q = 0; q < np; ++q) {
            const int8_t *bq = b + q * pstride + p * MC_NR * 4;
            _mm_prefetch((const char *)(bq + 2048), _MM_HINT_T0);
            _mm_prefetch((const char *)(bq + 2048 + 64), _MM_HINT_T0);
            _mm_prefetch((const char *)(bq + 2048 + 128), _MM_HINT_T0);
            _mm_prefetch((const char *)(bq + 2048 + 192), _MM_HINT_T0);
            c[0][2 * q] = _mm512_dpbusd_epi32(c[0][2 * q], a0, _mm512_load_si512(bq));
            c[0][2 * q + 1] = _mm512_dpbusd_epi32(c[0][2 * q + 1], a0, _mm512_load_si512(bq + 64));
            c[1][2 * q] = _mm512_dpbusd_epi32(c[1][2 * q], a1, _mm512_load_si512(bq + 128));
            c[1][2 * q + 1] = _mm512_dpbusd_epi32(c[1][2 * q + 1], a1,
                                                  _mm512_load_si512(bq + 192));
        }
    }
    if (p < kq) {
        int32_t w0;
        memcpy(&w0, a + p * MC_MR * 4, 4);
        const __m512i a0 = _mm512_set1_epi32(w0);
#pragma GCC unroll 4
        for (int q = 0; q < np; ++q) {
            const int8_t *bq = b + q * pstride + p * MC_NR * 4;
            c[0][2 * q] = _mm512_dpbusd_epi32(c[0][2 * q], a0, _mm512_load_si512(bq));
            c[0][2 * q + 1] = _mm512_dpbusd_epi32(c[0][2 * q + 1], a0, _mm512_load_si512(bq + 64));
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < np; ++q) {
        _mm512_storeu_si512(tile + q * MC_NR, _mm512_add_epi32(c[0][2 * q], c[1][2 * q]));
        _mm512_storeu_si512(tile + q * MC_NR + 16,
                            _mm512_add_epi32(c[0][2 * q + 1], c[1][2 * q + 1]));
    }
}

static void mc_ukr_wide_vnni_(int64_t kq, const void *ap, const void *bp, int64_t pstride, int np,
                              int32_t *tile)
{
    const uint8_t *a = (const uint8_t *)ap;
    const int8_t *b = (const int8_t *)bp;
    switch (np) {
    case 4: mc_wide_body_(4, kq, a, b, pstride, tile); break;
    case 3: mc_wide_body_(3, kq, a, b, pstride, tile); break;
    case 2: mc_wide_body_(2, kq, a, b, pstride, tile); break;
    default: mc_wide_body_(1, kq, a, b, pstride, tile); break;
    }
}

#define MC_IEPI_FN_ mc_epi_vnni_
#include "mc_igemm_epi_avx512_inl.h"

const mc_igemm_table mc_igemm_table_avx512bf16 = {
    {MC_MR, MC_NR, 1, 1, mc_pack_a_vnni_, mc_ukr_vnni_, mc_ukr_wide_vnni_, mc_epi_vnni_, 140,
     4096, 1024},
    NULL,
    NULL,
};
