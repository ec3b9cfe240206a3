/* AVX512-BF16 GEMM: bfloat16 x bfloat16 on VDPBF16PS over K-pair-interleaved panels.
 *
 * Design:
 *   a. Panels hold pairs: the 32-bit word of lane l for pair p is (x[l, 2p], x[l, 2p + 1]), the
 *      low half first; an odd K ends with a zero in the high half, written by the pack, never read
 *      from the array.  VDPBF16PS multiplies the two bfloat16 halves of a broadcast A word by the
 *      halves of 16 B words and adds both products to 16 float32 accumulators: 64 flops per
 *      instruction, twice the FMA rate.
 *   b. What VDPBF16PS computes (Intel SDM; the development machine agrees: tests/test_gemm.py,
 *      test_vdpbf16ps_rounding_order):
 *      acc = (acc + a_odd * b_odd) + a_even * b_even, each product exact (8 x 8 bit significands),
 *      each addition rounded to nearest even -- the same two roundings as two FMAs, the odd pair
 *      first -- but with denormals flushed: subnormal bfloat16 inputs are read as zero and
 *      subnormal results are flushed to zero, whatever MXCSR says.  The error bound of
 *      docs/gemm.md therefore holds for inputs whose products and partial sums stay in float32's
 *      normal range; below 2**-126 the flush adds up to 2**-126 per step.
 *   c. Micro-kernel 14 x 32 (28 zmm accumulators, as the float32 kernel), with copies specialised
 *      to fewer rows for the bottom edge and small batches.
 *   d. Packing: lanes contiguous in memory (rows of B) load two rows of k and interleave them
 *      with one VPERMT2W per 16 output words; lanes contiguous along k (rows of A) are loaded as
 *      rows of 32-bit words (each already a pair) and transposed in registers, 16 x 16 words at a
 *      time; other layouts use the scalar pack.
 *   e. The epilogue is the avx512 one (mc_gemm_epi_avx512_inl.h: float32 tile in, rounding on
 *      store) with one change: a bfloat16 output is rounded by VCVTNEPS2BF16 instead of the
 *      integer round-to-nearest-even.  The instruction agrees with mc_f32_to_bf16_bits on every
 *      normal number, zero and infinity, and differs only on subnormals (flushed) and NaNs
 *      (payload kept); one VFPCLASSPS per 16 values finds those lanes, which are rounded again
 *      the integer way (mc_simd_avx512bf16.h, design a, which the depthwise epilogue and the
 *      scan share).  The epilogue
 *      of a 14 x 32 tile is about a third as many instructions (1x1 convolutions and other
 *      small-K products: measured in docs/gemm.md).  The level's table gives it to both of its
 *      kernels, the pair kernel and the float32 one it inherits (runtime/mc_kernels.c).
 *   g. When the tile is the whole sum (K in one block, alpha 1, beta 0: every convolution and
 *      most products at inference), ukr_epi applies that epilogue to the accumulators in their
 *      registers instead of storing the tile and reading it back: the same operations in the
 *      same order, so the same bits, without 28 stores and 28 loads and a call per tile (a
 *      third of the time of a tile of a product with K = 16, MobileNetV2's first expansion).
 *   f. The packs and the in-place kernels also report subnormal bfloat16 inputs (design b: read
 *      as zero), so the driver can compute such a product on float32 panels instead: a running
 *      unsigned minimum of (h & 0x7FFF) - 1 per 16-bit lane falls below 0x7F exactly when some
 *      h was subnormal (mc_gemm_scalar.h, design b), three instructions per vector.
 *   h. Narrow tiles: a ukr_epi tile of at most 16 columns (a product with 16 columns, or the
 *      last panel of one with 144) computes one vector per row, and one of 17-24 columns its
 *      second vector as a 256-bit VDPBF16PS: the same lanes in the same order.  A 14 x 32 tile
 *      with 16 columns spent half its VDPBF16PS on the zero columns of the panel; a 256-bit
 *      one costs a double-pumping core (Zen 4) half a 512-bit one, and no other core more.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_act_avx512_inl.h"
#include "mc_gemm_kernels.h"
#include "mc_gemm_scalar.h"
#include "mc_simd_avx512bf16.h"

#define MC_MR 14
#define MC_NV 2
#define MC_NR (16 * MC_NV)

/* Design f: folds the 32 bfloat16 of v into the running minimum m (start: all ones). */
MC_INLINE_ __m512i mc_sub_min_(__m512i m, __m512i v)
{
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi16(0x7FFF));
    return _mm512_min_epu16(m, _mm512_sub_epi16(mag, _mm512_set1_epi16(1)));
}

MC_INLINE_ int mc_sub_seen_(__m512i m)
{
    return _mm512_cmplt_epu16_mask(m, _mm512_set1_epi16(0x7F)) != 0;
}

static int mc_pack_pairs_lanes_contig_(const char *src, int64_t ks, int64_t lanes, int64_t kc,
                                       int w, uint32_t *d)
{
    __m512i sub = _mm512_set1_epi16(-1);
    /* word j of the low output = (r0[j], r1[j]) for j < 16; the high output takes j + 16 */
    const __m512i lo_idx = _mm512_setr_epi32(
        0x00200000, 0x00210001, 0x00220002, 0x00230003, 0x00240004, 0x00250005, 0x00260006,
        0x00270007, 0x00280008, 0x00290009, 0x002A000A, 0x002B000B, 0x002C000C, 0x002D000D,
        0x002E000E, 0x002F000F);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    for (int64_t k = 0; k < kc; k += 2) {
        const char *s = src + k * ks;
        for (int l = 0; l < w; l += 32) {
            const __mmask32 m = mc_mask32_avx512(lanes - l);
            const __m512i r0 = _mm512_maskz_loadu_epi16(m, s + 2 * l);
            const __m512i r1 = k + 1 < kc ? _mm512_maskz_loadu_epi16(m, s + ks + 2 * l)
                                          : _mm512_setzero_si512();
            sub = mc_sub_min_(mc_sub_min_(sub, r0), r1);
            _mm512_mask_storeu_epi32(d + l, mc_mask16_avx512(w - l),
                                     _mm512_permutex2var_epi16(r0, lo_idx, r1));
            if (w - l > 16)
                _mm512_mask_storeu_epi32(d + l + 16, mc_mask16_avx512(w - l - 16),
                                         _mm512_permutex2var_epi16(r0, hi_idx, r1));
        }
        d += w;
    }
    return mc_sub_seen_(sub);
}

/* Lanes contiguous along k (rows of A): 16 lanes x 16 pairs (32 bfloat16) loaded as rows of
 * 32-bit words, transposed in registers (pure bit moves), stored as 16 packed pair rows.  An odd
 * kc ends with a half pair: its high half is masked off at the load, so it reads as zero. */
static int mc_pack_pairs_k_contig_(const char *src, int64_t ls, int64_t lanes, int64_t kc,
                                   int w, uint32_t *d)
{
    const int64_t kp = (kc + 1) / 2;
    __m512i sub = _mm512_set1_epi16(-1);
    for (int l0 = 0; l0 < w; l0 += 16) {
        const __mmask16 mw = mc_mask16_avx512(w - l0);
        const int64_t nl = lanes - l0 < 16 ? lanes - l0 : 16;
        for (int64_t p0 = 0; p0 < kp; p0 += 16) {
            const __mmask32 mk = mc_mask32_avx512(kc - 2 * p0);
            __m512 r[16];
            for (int i = 0; i < 16; ++i) {
                r[i] = i < nl ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(
                                    mk, src + (l0 + i) * ls + 4 * p0))
                              : _mm512_setzero_ps();
                sub = mc_sub_min_(sub, _mm512_castps_si512(r[i]));
            }
            mc_transpose16_avx512(r);
            const int64_t np_ = kp - p0 < 16 ? kp - p0 : 16;
            for (int j = 0; j < np_; ++j)
                _mm512_mask_storeu_epi32(d + (p0 + j) * w + l0, mw, _mm512_castps_si512(r[j]));
        }
    }
    return mc_sub_seen_(sub);
}

static int mc_pack_pairs_avx512bf16_(const char *src, int type, int64_t ls, int64_t ks,
                                     int64_t lanes, int64_t kc, int w, void *dst)
{
    if (ls == 2)
        return mc_pack_pairs_lanes_contig_(src, ks, lanes, kc, w, (uint32_t *)dst);
    if (ks == 2)
        return mc_pack_pairs_k_contig_(src, ls, lanes, kc, w, (uint32_t *)dst);
    return mc_gemm_pack_pairs_scalar_(src, type, ls, ks, lanes, kc, w, dst);
}

/* The accumulators of an mr x NR tile over kp pair steps (design c), of its first `cols`
 * columns (a constant: 16, 24 or 32, design h): 16 leaves the second vector of every row zero,
 * 24 computes it in 256-bit halves (its upper eight lanes zero); the lanes computed are the same
 * VDPBF16PS lanes in the same order, so the same bits. */
MC_INLINE_ void mc_ukr_acc_(const int rows, const int cols, int64_t kp, const char *a,
                            const int64_t ars, const int64_t aps, int nseg, int64_t sstride,
                            const uint32_t *b0, int64_t bsstride, __m512 c[MC_MR][MC_NV])
{
    /* nseg segments of kp steps, the pair of row i for step p of segment s at a + s * sstride
     * + i * ars + p * aps: a packed panel (one segment; 4, MR * 4) or rows of A in place (lda,
     * 4), a convolution's kernel rows read from the image one segment each (mc_conv.c), the
     * segment's panel steps from b0 + s * bsstride bytes */
    __m256 h[MC_MR];
#pragma GCC unroll 16
    for (int i = 0; i < rows; ++i) {
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            c[i][j] = _mm512_setzero_ps();
        h[i] = _mm256_setzero_ps();
    }
    for (int seg = 0; seg < nseg; ++seg) {
    const char *as = a + seg * sstride;
    const uint32_t *b = (const uint32_t *)((const char *)b0 + seg * bsstride);
    for (int64_t p = 0; p < kp; ++p) {
        __m512bh bv[MC_NV];
        /* B 32 pair steps (4 KiB) ahead: far enough to hide a memory access when the panel is
         * not cached (weights larger than the caches; 64 x 4096 x 4096: about 10% faster) */
        _mm_prefetch((const char *)(b + 32 * MC_NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + 32 * MC_NR + 16), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            bv[j] = (__m512bh)_mm512_load_si512(b + 16 * j);
        const __m256bh bh = (__m256bh)_mm512_castsi512_si256((__m512i)bv[MC_NV - 1]);
#pragma GCC unroll 16
        for (int i = 0; i < rows; ++i) {
            const __m512bh ai =
                (__m512bh)_mm512_broadcastd_epi32(_mm_loadu_si32(as + i * ars));
#pragma GCC unroll 4
            for (int j = 0; j < MC_NV; ++j)
                if (16 * (j + 1) <= cols)
                    c[i][j] = _mm512_dpbf16_ps(c[i][j], ai, bv[j]);
            if (cols % 16 == 8)
                h[i] = _mm256_dpbf16_ps(h[i], (__m256bh)_mm512_castsi512_si256((__m512i)ai), bh);
        }
        as += aps;
        b += MC_NR;
    }
    }
    if (cols % 16 == 8)
#pragma GCC unroll 16
        for (int i = 0; i < rows; ++i)
            c[i][cols / 16] = _mm512_zextps256_ps512(h[i]);
}

MC_INLINE_ void mc_ukr_body_(const int rows, int64_t kp, const uint32_t *a, const uint32_t *b,
                             float *tile)
{
    __m512 c[MC_MR][MC_NV];
    mc_ukr_acc_(rows, MC_NR, kp, (const char *)a, 4, MC_MR * 4, 1, 0, b, 0, c);
#pragma GCC unroll 16
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            _mm512_store_ps(tile + i * MC_NR + 16 * j, c[i][j]);
}

#define MC_UKR_ROWS_(R)                                                                     \
    static void mc_ukr_##R##_(int64_t kp, const uint32_t *a, const uint32_t *b, float *tile) \
    {                                                                                       \
        mc_ukr_body_(R, kp, a, b, tile);                                                    \
    }
MC_UKR_ROWS_(1) MC_UKR_ROWS_(2) MC_UKR_ROWS_(3) MC_UKR_ROWS_(4) MC_UKR_ROWS_(5)
MC_UKR_ROWS_(6) MC_UKR_ROWS_(7) MC_UKR_ROWS_(8) MC_UKR_ROWS_(9) MC_UKR_ROWS_(10)
MC_UKR_ROWS_(11) MC_UKR_ROWS_(12) MC_UKR_ROWS_(13) MC_UKR_ROWS_(14)

typedef void (*mc_ukr_rows_fn_)(int64_t, const uint32_t *, const uint32_t *, float *);
static const mc_ukr_rows_fn_ mc_ukr_rows_[MC_MR + 1] = {
    NULL, mc_ukr_1_, mc_ukr_2_, mc_ukr_3_, mc_ukr_4_, mc_ukr_5_, mc_ukr_6_, mc_ukr_7_,
    mc_ukr_8_, mc_ukr_9_, mc_ukr_10_, mc_ukr_11_, mc_ukr_12_, mc_ukr_13_, mc_ukr_14_,
};

static void mc_ukr_bf16_avx512bf16_(int64_t kp, const void *ap, const void *bp, float *tile,
                                    int mr)
{
    mc_ukr_rows_[mr](kp, (const uint32_t *)ap, (const uint32_t *)bp, tile);
}

/* 1-3 rows against np (<= MC_WIDE_PANELS) packed panels at once (B packed ahead, small
 * batches): the dot products of mc_ukr_body_, in the same order, with enough accumulators to
 * cover the VDPBF16PS latency. */
MC_INLINE_ void mc_ukr_wide_body_(const int rows, const int np, int64_t kp, const uint32_t *a,
                                  const uint32_t *b, int64_t ps, float *tile, int64_t ldt)
{
    __m512 c[3][MC_NV * MC_WIDE_PANELS];
#pragma GCC unroll 3
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < MC_NV * np; ++j)
            c[i][j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kp; ++p) {
        __m512bh bv[MC_NV * MC_WIDE_PANELS];
#pragma GCC unroll 8
        for (int j = 0; j < MC_NV * np; ++j)
            bv[j] = (__m512bh)_mm512_load_si512(b + (j / MC_NV) * ps + 16 * (j % MC_NV));
#pragma GCC unroll 3
        for (int i = 0; i < rows; ++i) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
#pragma GCC unroll 8
            for (int j = 0; j < MC_NV * np; ++j)
                c[i][j] = _mm512_dpbf16_ps(c[i][j], ai, bv[j]);
        }
        a += MC_MR;
        b += MC_NR;
    }
#pragma GCC unroll 3
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < MC_NV * np; ++j)
            _mm512_store_ps(tile + i * ldt + 16 * j, c[i][j]);
}

#define MC_UKR_WIDE_(R, P)                                                                  \
    static void mc_ukr_wide_##R##_##P##_(int64_t kp, const uint32_t *a, const uint32_t *b, \
                                         int64_t ps, float *tile, int64_t ldt)              \
    {                                                                                       \
        mc_ukr_wide_body_(R, P, kp, a, b, ps, tile, ldt);                                   \
    }
#define MC_UKR_WIDE_ROWS_(R) MC_UKR_WIDE_(R, 1) MC_UKR_WIDE_(R, 2) MC_UKR_WIDE_(R, 3) MC_UKR_WIDE_(R, 4)
MC_UKR_WIDE_ROWS_(1) MC_UKR_WIDE_ROWS_(2) MC_UKR_WIDE_ROWS_(3)

static void mc_ukr_wide_bf16_avx512bf16_(int64_t kp, const void *ap, const void *bp,
                                         int64_t pstride, int np, float *tile, int64_t ldt, int mr)
{
    typedef void (*fn_t)(int64_t, const uint32_t *, const uint32_t *, int64_t, float *, int64_t);
    static const fn_t fns[3][MC_WIDE_PANELS] = {
        {mc_ukr_wide_1_1_, mc_ukr_wide_1_2_, mc_ukr_wide_1_3_, mc_ukr_wide_1_4_},
        {mc_ukr_wide_2_1_, mc_ukr_wide_2_2_, mc_ukr_wide_2_3_, mc_ukr_wide_2_4_},
        {mc_ukr_wide_3_1_, mc_ukr_wide_3_2_, mc_ukr_wide_3_3_, mc_ukr_wide_3_4_}};
    fns[mr - 1][np - 1](kp, (const uint32_t *)ap, (const uint32_t *)bp, pstride / 4, tile, ldt);
}

/* B read in place (small M): rows k and k + 1 interleaved on the fly exactly as the pack does
 * (row k + 1 is zero past an odd kc), then the dot products of mc_ukr_body_ in the same order. */
#define MC_WIDE_NG 4   /* 32-column groups per row in the 1-3 row variant: 128 columns */

/* ng groups of 32 columns (each: two rows of 32 bfloat16 interleaved into 2 vectors of pairs). */
MC_INLINE_ int mc_ukr_direct_body_(const int rows, const int ng, int64_t kc, const uint32_t *a,
                                   const char *b, int64_t ldb, int64_t ps, int nr, float *tile,
                                   int64_t ldt, int accumulate)
{
    __m512i sub = _mm512_set1_epi16(-1);
    const __m512i lo_idx = _mm512_setr_epi32(
        0x00200000, 0x00210001, 0x00220002, 0x00230003, 0x00240004, 0x00250005, 0x00260006,
        0x00270007, 0x00280008, 0x00290009, 0x002A000A, 0x002B000B, 0x002C000C, 0x002D000D,
        0x002E000E, 0x002F000F);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    __mmask32 m[MC_WIDE_NG];
    __m512 c[MC_MR][2 * MC_WIDE_NG];
#pragma GCC unroll 4
    for (int q = 0; q < ng; ++q)
        m[q] = mc_mask32_avx512(nr - 32 * q);
#pragma GCC unroll 16
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < 2 * ng; ++j)
            c[i][j] = accumulate && 16 * j < nr ? _mm512_load_ps(tile + i * ldt + 16 * j)
                                                : _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k += 2) {
        __m512bh bv[2 * MC_WIDE_NG];
#pragma GCC unroll 4
        for (int q = 0; q < ng; ++q) {
            const __m512i r0 = _mm512_maskz_loadu_epi16(m[q], b + ps * q);
            const __m512i r1 = k + 1 < kc ? _mm512_maskz_loadu_epi16(m[q], b + ldb + ps * q)
                                          : _mm512_setzero_si512();
            sub = mc_sub_min_(mc_sub_min_(sub, r0), r1);
            bv[2 * q] = (__m512bh)_mm512_permutex2var_epi16(r0, lo_idx, r1);
            bv[2 * q + 1] = (__m512bh)_mm512_permutex2var_epi16(r0, hi_idx, r1);
        }
#pragma GCC unroll 16
        for (int i = 0; i < rows; ++i) {
            const __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[i]);
#pragma GCC unroll 8
            for (int j = 0; j < 2 * ng; ++j)
                c[i][j] = _mm512_dpbf16_ps(c[i][j], ai, bv[j]);
        }
        a += MC_MR;
        b += 2 * ldb;
    }
#pragma GCC unroll 16
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < 2 * ng; ++j)
            if (16 * j < nr)   /* the tile row ends at the 32-column multiple after nr */
                _mm512_store_ps(tile + i * ldt + 16 * j, c[i][j]);
    return mc_sub_seen_(sub);
}

#define MC_UKR_DIRECT_NG_(R, NG, name)                                                      \
    static int name(int64_t kc, const uint32_t *a, const char *b, int64_t ldb, int64_t ps, \
                    int nr, float *tile, int64_t ldt, int acc)                              \
    {                                                                                       \
        return mc_ukr_direct_body_(R, NG, kc, a, b, ldb, ps, nr, tile, ldt, acc);           \
    }
#define MC_UKR_DIRECT_ROWS_(R) MC_UKR_DIRECT_NG_(R, 1, mc_ukr_direct_##R##_)
MC_UKR_DIRECT_ROWS_(1) MC_UKR_DIRECT_ROWS_(2) MC_UKR_DIRECT_ROWS_(3) MC_UKR_DIRECT_ROWS_(4)
MC_UKR_DIRECT_ROWS_(5) MC_UKR_DIRECT_ROWS_(6) MC_UKR_DIRECT_ROWS_(7) MC_UKR_DIRECT_ROWS_(8)
MC_UKR_DIRECT_ROWS_(9) MC_UKR_DIRECT_ROWS_(10) MC_UKR_DIRECT_ROWS_(11) MC_UKR_DIRECT_ROWS_(12)
MC_UKR_DIRECT_ROWS_(13) MC_UKR_DIRECT_ROWS_(14)
MC_UKR_DIRECT_NG_(1, MC_WIDE_NG, mc_ukr_direct_wide_1_)
MC_UKR_DIRECT_NG_(2, MC_WIDE_NG, mc_ukr_direct_wide_2_)
MC_UKR_DIRECT_NG_(3, MC_WIDE_NG, mc_ukr_direct_wide_3_)

typedef int (*mc_ukr_direct_rows_fn_)(int64_t, const uint32_t *, const char *, int64_t, int64_t,
                                      int, float *, int64_t, int);
static const mc_ukr_direct_rows_fn_ mc_ukr_direct_rows_[MC_MR + 1] = {
    NULL, mc_ukr_direct_1_, mc_ukr_direct_2_, mc_ukr_direct_3_, mc_ukr_direct_4_,
    mc_ukr_direct_5_, mc_ukr_direct_6_, mc_ukr_direct_7_, mc_ukr_direct_8_, mc_ukr_direct_9_,
    mc_ukr_direct_10_, mc_ukr_direct_11_, mc_ukr_direct_12_, mc_ukr_direct_13_, mc_ukr_direct_14_,
};

static int mc_ukr_direct_bf16_avx512bf16_(int64_t kc, const void *ap, const char *b, int64_t ldb,
                                          int64_t pstride, int b_type, int nr, float *tile,
                                          int64_t ldt, int mr, int accumulate)
{
    (void)b_type;
    if (nr > MC_NR) {         /* mr <= 3: the wide variant (mc_gemm.c, mc_direct_) */
        static const mc_ukr_direct_rows_fn_ wide[4] = {
            NULL, mc_ukr_direct_wide_1_, mc_ukr_direct_wide_2_, mc_ukr_direct_wide_3_};
        return wide[mr](kc, (const uint32_t *)ap, b, ldb, pstride, nr, tile, ldt, accumulate);
    }
    return mc_ukr_direct_rows_[mr](kc, (const uint32_t *)ap, b, ldb, pstride, nr, tile, ldt,
                                   accumulate);
}

/* Columns of B in place (B contiguous along k, at most MC_DIRECT_T_MAXM rows): 16 columns x
 * 16 pairs loaded as rows of 32-bit words (an odd kc masks off the last high half, so it reads
 * as zero, as in the pack), transposed in registers, then the dot products of mc_ukr_body_ for
 * those pairs, in order; pairs past kc are skipped. */
MC_INLINE_ int mc_ukr_direct_t_body_(const int rows, int64_t kc, const uint32_t *a, const char *b,
                                     int64_t ldc, int nr, float *tile, int64_t ldt)
{
    const int64_t kp = (kc + 1) / 2;
    __m512i sub = _mm512_set1_epi16(-1);
    __m512 c[MC_DIRECT_T_MAXM][MC_NV];
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            c[i][j] = _mm512_setzero_ps();
    for (int64_t p0 = 0; p0 < kp; p0 += 16) {
        const __mmask32 mk = mc_mask32_avx512(kc - 2 * p0);
        const int64_t np_ = kp - p0 < 16 ? kp - p0 : 16;
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j) {
            const int ncol = nr - 16 * j;
            if (ncol <= 0)
                break;
            __m512 r[16];
#pragma GCC unroll 16
            for (int l = 0; l < 16; ++l) {
                r[l] = l < ncol ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(
                                      mk, b + (16 * j + l) * ldc + 4 * p0))
                                : _mm512_setzero_ps();
                sub = mc_sub_min_(sub, _mm512_castps_si512(r[l]));
            }
            mc_transpose16_avx512(r);
#pragma GCC unroll 16
            for (int pp = 0; pp < 16; ++pp) {
                if (pp < np_) {
#pragma GCC unroll 8
                    for (int i = 0; i < rows; ++i)
                        c[i][j] = _mm512_dpbf16_ps(
                            c[i][j], (__m512bh)_mm512_set1_epi32((int)a[(p0 + pp) * MC_MR + i]),
                            (__m512bh)_mm512_castps_si512(r[pp]));
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            _mm512_store_ps(tile + i * ldt + 16 * j, c[i][j]);
    return mc_sub_seen_(sub);
}

#define MC_UKR_DIRECT_T_ROWS_(R)                                                            \
    static int mc_ukr_direct_t_##R##_(int64_t kc, const uint32_t *a, const char *b,         \
                                      int64_t ldc, int nr, float *tile, int64_t ldt)        \
    {                                                                                       \
        return mc_ukr_direct_t_body_(R, kc, a, b, ldc, nr, tile, ldt);                      \
    }
MC_UKR_DIRECT_T_ROWS_(1) MC_UKR_DIRECT_T_ROWS_(2) MC_UKR_DIRECT_T_ROWS_(3)
MC_UKR_DIRECT_T_ROWS_(4) MC_UKR_DIRECT_T_ROWS_(5) MC_UKR_DIRECT_T_ROWS_(6)

static int mc_ukr_direct_t_bf16_avx512bf16_(int64_t kc, const void *ap, const char *b,
                                            int64_t ldc, int b_type, int nr, float *tile,
                                            int64_t ldt, int mr)
{
    typedef int (*fn_t)(int64_t, const uint32_t *, const char *, int64_t, int, float *, int64_t);
    static const fn_t rows[MC_DIRECT_T_MAXM + 1] = {
        NULL, mc_ukr_direct_t_1_, mc_ukr_direct_t_2_, mc_ukr_direct_t_3_, mc_ukr_direct_t_4_,
        mc_ukr_direct_t_5_, mc_ukr_direct_t_6_};
    (void)b_type;
    return rows[mr](kc, (const uint32_t *)ap, b, ldc, nr, tile, ldt);
}

/* --- epilogue (design e) ----------------------------------------------------------------------- */

#define MC_EPI_FN_ mc_gemm_epi_avx512bf16_
#define MC_EPI_PLAIN_FN_ mc_gemm_epi_plain_avx512bf16_
#define MC_EPI_BF16_STORE_(o, m, v) mc_store_bf16_avx512bf16((o), (m), (v))
#define MC_EPI_BF16_ROUND2_(v0, v1) mc_bf16_join_avx512bf16((v0), (v1))
#include "mc_gemm_epi_avx512_inl.h"

/* --- the micro-kernel with the epilogue in its registers (design g) ----------------------------- */

MC_UKR_EPI_DEFINE_(mc_ukr_epi_bf16_avx512bf16_, mc_ukr_epi_a_bf16_avx512bf16_, uint32_t)

static int mc_sub_rows_bf16_avx512bf16_(const char *a, int64_t lda, int64_t rows, int64_t kc)
{
    __m512i sub = _mm512_set1_epi16(-1);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < kc; k += 32)
            sub = mc_sub_min_(sub, _mm512_maskz_loadu_epi16(mc_mask32_avx512(kc - k),
                                                            a + r * lda + 2 * k));
    return mc_sub_seen_(sub);
}

const mc_gemm_table mc_gemm_table_avx512bf16 = {
    .pairs = {.mr = MC_MR, .nr = MC_NR, .pairs = 1, .pack = mc_pack_pairs_avx512bf16_,
              .ukr = mc_ukr_bf16_avx512bf16_, .ukr_wide = mc_ukr_wide_bf16_avx512bf16_,
              .ukr_direct = mc_ukr_direct_bf16_avx512bf16_, .direct_wide = 32 * MC_WIDE_NG,
              .ukr_direct_t = mc_ukr_direct_t_bf16_avx512bf16_, .epi = mc_gemm_epi_avx512bf16_,
              .ukr_epi = mc_ukr_epi_bf16_avx512bf16_, .ukr_epi_a = mc_ukr_epi_a_bf16_avx512bf16_,
              .sub_rows = mc_sub_rows_bf16_avx512bf16_,
              .mc = 140, .kc = 2048, .nc = 1024},
};
