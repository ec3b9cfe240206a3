/* AVX-512 (F/BW/VL/DQ + F16C + FMA) GEMM: float32 panels, FMA micro-kernel, vector epilogue.
 *
 * Design:
 *   a. Micro-kernel MC_MR x MC_NR = 14 x 32: 28 zmm accumulators, 2 zmm of B per k, A broadcast
 *      from memory for each row.  28 independent accumulators cover the FMA latency (4 cycles)
 *      at two 512-bit FMAs per cycle, the rate measured on the development machine (one core
 *      reaches ~205 GFLOP/s, so its FMA units are 512 bits wide: a Zen 5 class core; a Zen 4
 *      core double-pumps and does one per cycle, still covered);
 *      16 loads per 28 FMAs fit the load ports.  Tiles with fewer rows (the bottom edge, and
 *      small-batch inference) run a copy of the kernel specialised to that many rows, so
 *      batch 1 costs 1/14 of a full tile, not a full tile.  The small-M variant reads rows of B
 *      in place (mc_gemm.c, mc_gemm_direct_) with the same FMAs in the same order.
 *   b. Each product is one FMA into its accumulator, k in order: the same sequence of float32
 *      operations as sum += a[k] * b[k] with one rounding per step.
 *   c. Packing converts float16 (F16C, exact) and bfloat16 (a shift, exact) to float32 on the
 *      way.  Lanes contiguous in memory (rows of B, columns of a Fortran-ordered A) are masked
 *      vector loads; lanes contiguous along k (rows of A, a transposed B) are loaded as 16 rows
 *      of 16 k (masked at the k edge) and transposed in registers (64 shuffles per 256 values,
 *      measured 10% faster overall at 256^3 than 16-lane gathers); any other layout uses the
 *      scalar pack.  No load ever touches an element outside the operand.
 *   d. The epilogue works on rows of 16 lanes with a mask for the right edge; the driver calls it
 *      when the output, the accumulator and Cin are contiguous along rows (the scalar epilogue
 *      takes every other layout).  The activation is mc_act_ps_ (mc_act_avx512_inl.h),
 *      bit-identical to the scalar twin (mc_act_scalar.h).  Rounding
 *      to float16 is VCVTPS2PH (round to nearest even, subnormals kept; its results equal the
 *      scalar twin for every non-signalling input, and an arithmetic result is never a
 *      signalling NaN); to bfloat16 it is the integer RNE of
 *      mc_f32_to_bf16_bits.  The epilogue is written once, in mc_gemm_epi_avx512_inl.h, for this
 *      level and the avx512bf16 one, which rounds to bfloat16 with its own instruction.
 *   e. Narrow tiles (as mc_gemm_avx512bf16.c, design h): a ukr_epi tile of at most 16 columns
 *      computes one vector per row, one of 17-24 columns its second vector with 256-bit FMAs.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_act_avx512_inl.h"
#include "mc_gemm_kernels.h"
#include "mc_gemm_scalar.h"
#include "mc_simd_avx512.h"

#define MC_MR 14
#define MC_NV 2
#define MC_NR (16 * MC_NV)

/* --- packing ---------------------------------------------------------------------------------- */

static void mc_pack_lanes_contig_(const char *src, int type, int64_t ks, int64_t lanes,
                                  int64_t kc, int w, float *d)
{
    const int es = type == MC_F32 ? 4 : 2;
    for (int64_t k = 0; k < kc; ++k) {
        const char *s = src + k * ks;
        for (int l = 0; l < w; l += 16) {
            const __mmask16 m = mc_mask16_avx512(lanes - l), mw = mc_mask16_avx512(w - l);
            _mm512_mask_storeu_ps(d + l, mw, mc_load16_avx512(s + l * es, type, m));
        }
        d += w;
    }
}

/* Lanes contiguous along k (rows of A): 16 lanes x 16 k loaded as rows (masked at the k edge,
 * absent lanes are zero), transposed in registers, stored as 16 packed k rows. */
static void mc_pack_k_contig_(const char *src, int type, int64_t ls, int64_t lanes, int64_t kc,
                              int w, float *d)
{
    const int es = type == MC_F32 ? 4 : 2;
    for (int l0 = 0; l0 < w; l0 += 16) {
        const __mmask16 mw = mc_mask16_avx512(w - l0);
        const int64_t nl = lanes - l0 < 16 ? lanes - l0 : 16;
        for (int64_t k0 = 0; k0 < kc; k0 += 16) {
            const __mmask16 mk = mc_mask16_avx512(kc - k0);
            __m512 r[16];
            for (int i = 0; i < 16; ++i)
                r[i] = i < nl ? mc_load16_avx512(src + (l0 + i) * ls + k0 * es, type, mk)
                              : _mm512_setzero_ps();
            mc_transpose16_avx512(r);
            const int64_t nk = kc - k0 < 16 ? kc - k0 : 16;
            for (int j = 0; j < nk; ++j)
                _mm512_mask_storeu_ps(d + (k0 + j) * w + l0, mw, r[j]);
        }
    }
}

static int mc_pack_avx512_(const char *src, int type, int64_t ls, int64_t ks, int64_t lanes,
                           int64_t kc, int w, void *dst)
{
    const int64_t es = type == MC_F32 ? 4 : 2;
    if (ls == es)
        mc_pack_lanes_contig_(src, type, ks, lanes, kc, w, (float *)dst);
    else if (ks == es)
        mc_pack_k_contig_(src, type, ls, lanes, kc, w, (float *)dst);
    else
        mc_gemm_pack_scalar_(src, type, ls, ks, lanes, kc, w, dst);
    return 0;
}

/* --- micro-kernel ------------------------------------------------------------------------------ */

/* The accumulators of an mr x NR tile over kc steps (design a, b), of its first `cols` columns
 * (a constant: 16, 24 or 32, design e): 16 leaves the second vector of every row zero, 24
 * computes it in 256-bit halves (its upper eight lanes zero); the same FMAs lane by lane. */
MC_INLINE_ void mc_ukr_acc_(const int rows, const int cols, int64_t kc, const char *a,
                            const int64_t ars, const int64_t aks, int nseg, int64_t sstride,
                            const float *b0, int64_t bsstride, __m512 c[MC_MR][MC_NV])
{
    /* nseg segments of kc steps, A's value of row i for step k of segment s at a + s * sstride
     * + i * ars + k * aks: a packed panel (one segment; 4, MR * 4) or rows of A in place (lda,
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
    const float *b = (const float *)((const char *)b0 + seg * bsstride);
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; ++k) {
        __m512 bv[MC_NV];
        _mm_prefetch((const char *)(b + 8 * MC_NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + 8 * MC_NR + 16), _MM_HINT_T0);
        _mm_prefetch(as + 8 * aks, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            bv[j] = _mm512_load_ps(b + 16 * j);
        const __m256 bh = _mm512_castps512_ps256(bv[MC_NV - 1]);
#pragma GCC unroll 16
        for (int i = 0; i < rows; ++i) {
            const __m512 ai =
                _mm512_castsi512_ps(_mm512_broadcastd_epi32(_mm_loadu_si32(as + i * ars)));
#pragma GCC unroll 4
            for (int j = 0; j < MC_NV; ++j)
                if (16 * (j + 1) <= cols)
                    c[i][j] = _mm512_fmadd_ps(ai, bv[j], c[i][j]);
            if (cols % 16 == 8)
                h[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(ai), bh, h[i]);
        }
        as += aks;
        b += MC_NR;
    }
    }
    if (cols % 16 == 8)
#pragma GCC unroll 16
        for (int i = 0; i < rows; ++i)
            c[i][cols / 16] = _mm512_zextps256_ps512(h[i]);
}

MC_INLINE_ void mc_ukr_body_(const int rows, int64_t kc, const float *a, const float *b,
                             float *tile)
{
    __m512 c[MC_MR][MC_NV];
    mc_ukr_acc_(rows, MC_NR, kc, (const char *)a, 4, MC_MR * 4, 1, 0, b, 0, c);
#pragma GCC unroll 16
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            _mm512_store_ps(tile + i * MC_NR + 16 * j, c[i][j]);
}

#define MC_UKR_ROWS_(R)                                                                     \
    static void mc_ukr_##R##_(int64_t kc, const float *a, const float *b, float *tile)      \
    {                                                                                       \
        mc_ukr_body_(R, kc, a, b, tile);                                                    \
    }
MC_UKR_ROWS_(1) MC_UKR_ROWS_(2) MC_UKR_ROWS_(3) MC_UKR_ROWS_(4) MC_UKR_ROWS_(5)
MC_UKR_ROWS_(6) MC_UKR_ROWS_(7) MC_UKR_ROWS_(8) MC_UKR_ROWS_(9) MC_UKR_ROWS_(10)
MC_UKR_ROWS_(11) MC_UKR_ROWS_(12) MC_UKR_ROWS_(13) MC_UKR_ROWS_(14)

typedef void (*mc_ukr_rows_fn_)(int64_t, const float *, const float *, float *);
static const mc_ukr_rows_fn_ mc_ukr_rows_[MC_MR + 1] = {
    NULL, mc_ukr_1_, mc_ukr_2_, mc_ukr_3_, mc_ukr_4_, mc_ukr_5_, mc_ukr_6_, mc_ukr_7_,
    mc_ukr_8_, mc_ukr_9_, mc_ukr_10_, mc_ukr_11_, mc_ukr_12_, mc_ukr_13_, mc_ukr_14_,
};

static void mc_ukr_f32_avx512_(int64_t kc, const void *ap, const void *bp, float *tile, int mr)
{
    mc_ukr_rows_[mr](kc, (const float *)ap, (const float *)bp, tile);
}

/* 1-3 rows against np (<= MC_WIDE_PANELS) packed panels at once (B packed ahead, small
 * batches): up to 24 accumulators instead of 2-6, so the FMA latency is covered; each
 * accumulator sees the FMAs of mc_ukr_body_ in the same order. */
MC_INLINE_ void mc_ukr_wide_body_(const int rows, const int np, int64_t kc, const float *a,
                                  const float *b, int64_t ps, float *tile, int64_t ldt)
{
    __m512 c[3][MC_NV * MC_WIDE_PANELS];
#pragma GCC unroll 3
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < MC_NV * np; ++j)
            c[i][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        __m512 bv[MC_NV * MC_WIDE_PANELS];
#pragma GCC unroll 8
        for (int j = 0; j < MC_NV * np; ++j)
            bv[j] = _mm512_load_ps(b + (j / MC_NV) * ps + 16 * (j % MC_NV));
#pragma GCC unroll 3
        for (int i = 0; i < rows; ++i) {
            const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 8
            for (int j = 0; j < MC_NV * np; ++j)
                c[i][j] = _mm512_fmadd_ps(ai, bv[j], c[i][j]);
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
    static void mc_ukr_wide_##R##_##P##_(int64_t kc, const float *a, const float *b,       \
                                         int64_t ps, float *tile, int64_t ldt)              \
    {                                                                                       \
        mc_ukr_wide_body_(R, P, kc, a, b, ps, tile, ldt);                                   \
    }
#define MC_UKR_WIDE_ROWS_(R) MC_UKR_WIDE_(R, 1) MC_UKR_WIDE_(R, 2) MC_UKR_WIDE_(R, 3) MC_UKR_WIDE_(R, 4)
MC_UKR_WIDE_ROWS_(1) MC_UKR_WIDE_ROWS_(2) MC_UKR_WIDE_ROWS_(3)

static void mc_ukr_wide_f32_avx512_(int64_t kc, const void *ap, const void *bp, int64_t pstride,
                                    int np, float *tile, int64_t ldt, int mr)
{
    typedef void (*fn_t)(int64_t, const float *, const float *, int64_t, float *, int64_t);
    static const fn_t fns[3][MC_WIDE_PANELS] = {
        {mc_ukr_wide_1_1_, mc_ukr_wide_1_2_, mc_ukr_wide_1_3_, mc_ukr_wide_1_4_},
        {mc_ukr_wide_2_1_, mc_ukr_wide_2_2_, mc_ukr_wide_2_3_, mc_ukr_wide_2_4_},
        {mc_ukr_wide_3_1_, mc_ukr_wide_3_2_, mc_ukr_wide_3_3_, mc_ukr_wide_3_4_}};
    fns[mr - 1][np - 1](kc, (const float *)ap, (const float *)bp, pstride / 4, tile, ldt);
}

/* B read in place (small M), or from 16-bit panels: rows of B loaded with the packing's
 * conversion, masked at the right edge, each group of MC_NR columns pstride bytes after the
 * previous one; the FMAs are those of mc_ukr_body_, in the same order, continuing from the
 * tile's partial sums when `accumulate` is set. */
#define MC_WIDE_NV 8   /* vectors per row in the 1-3 row variant: 128 columns, <= 24 accumulators */

MC_INLINE_ void mc_ukr_direct_body_(const int rows, const int nv, int64_t kc, const float *a,
                                    const char *b, int64_t ldb, int64_t ps, int type, int nr,
                                    float *tile, int64_t ldt, int accumulate)
{
    const int es = type == MC_F32 ? 4 : 2;
    __mmask16 m[MC_WIDE_NV];
    __m512 c[MC_MR][MC_WIDE_NV];
#pragma GCC unroll 8
    for (int j = 0; j < nv; ++j)
        m[j] = mc_mask16_avx512(nr - 16 * j);
#pragma GCC unroll 16
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < nv; ++j)
            c[i][j] = accumulate && 16 * j < nr ? _mm512_load_ps(tile + i * ldt + 16 * j)
                                                : _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        __m512 bv[MC_WIDE_NV];
#pragma GCC unroll 8
        for (int j = 0; j < nv; ++j)
            bv[j] = mc_load16_avx512(b + (j / MC_NV) * ps + 16 * (j % MC_NV) * es, type, m[j]);
#pragma GCC unroll 16
        for (int i = 0; i < rows; ++i) {
            const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 8
            for (int j = 0; j < nv; ++j)
                c[i][j] = _mm512_fmadd_ps(ai, bv[j], c[i][j]);
        }
        a += MC_MR;
        b += ldb;
    }
#pragma GCC unroll 16
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < nv; ++j)
            if (16 * j < nr)   /* the tile row ends at the 32-column multiple after nr */
                _mm512_store_ps(tile + i * ldt + 16 * j, c[i][j]);
}

#define MC_UKR_DIRECT_NV_(R, NV, name)                                                      \
    static void name(int64_t kc, const float *a, const char *b, int64_t ldb, int64_t ps,   \
                     int type, int nr, float *tile, int64_t ldt, int acc)                   \
    {                                                                                       \
        if (type == MC_F32)                                                                 \
            mc_ukr_direct_body_(R, NV, kc, a, b, ldb, ps, MC_F32, nr, tile, ldt, acc);      \
        else if (type == MC_F16)                                                            \
            mc_ukr_direct_body_(R, NV, kc, a, b, ldb, ps, MC_F16, nr, tile, ldt, acc);      \
        else                                                                                \
            mc_ukr_direct_body_(R, NV, kc, a, b, ldb, ps, MC_BF16, nr, tile, ldt, acc);     \
    }
#define MC_UKR_DIRECT_ROWS_(R) MC_UKR_DIRECT_NV_(R, MC_NV, mc_ukr_direct_##R##_)
MC_UKR_DIRECT_NV_(1, MC_WIDE_NV, mc_ukr_direct_wide_1_)
MC_UKR_DIRECT_NV_(2, MC_WIDE_NV, mc_ukr_direct_wide_2_)
MC_UKR_DIRECT_NV_(3, MC_WIDE_NV, mc_ukr_direct_wide_3_)
MC_UKR_DIRECT_ROWS_(1) MC_UKR_DIRECT_ROWS_(2) MC_UKR_DIRECT_ROWS_(3) MC_UKR_DIRECT_ROWS_(4)
MC_UKR_DIRECT_ROWS_(5) MC_UKR_DIRECT_ROWS_(6) MC_UKR_DIRECT_ROWS_(7) MC_UKR_DIRECT_ROWS_(8)
MC_UKR_DIRECT_ROWS_(9) MC_UKR_DIRECT_ROWS_(10) MC_UKR_DIRECT_ROWS_(11) MC_UKR_DIRECT_ROWS_(12)
MC_UKR_DIRECT_ROWS_(13) MC_UKR_DIRECT_ROWS_(14)

typedef void (*mc_ukr_direct_rows_fn_)(int64_t, const float *, const char *, int64_t, int64_t,
                                       int, int, float *, int64_t, int);
static const mc_ukr_direct_rows_fn_ mc_ukr_direct_rows_[MC_MR + 1] = {
    NULL, mc_ukr_direct_1_, mc_ukr_direct_2_, mc_ukr_direct_3_, mc_ukr_direct_4_,
    mc_ukr_direct_5_, mc_ukr_direct_6_, mc_ukr_direct_7_, mc_ukr_direct_8_, mc_ukr_direct_9_,
    mc_ukr_direct_10_, mc_ukr_direct_11_, mc_ukr_direct_12_, mc_ukr_direct_13_, mc_ukr_direct_14_,
};

static int mc_ukr_direct_f32_avx512_(int64_t kc, const void *ap, const char *b, int64_t ldb,
                                     int64_t pstride, int b_type, int nr, float *tile,
                                     int64_t ldt, int mr, int accumulate)
{
    if (nr > MC_NR) {         /* mr <= 3: the wide variant (mc_gemm.c, mc_direct_) */
        static const mc_ukr_direct_rows_fn_ wide[4] = {
            NULL, mc_ukr_direct_wide_1_, mc_ukr_direct_wide_2_, mc_ukr_direct_wide_3_};
        wide[mr](kc, (const float *)ap, b, ldb, pstride, b_type, nr, tile, ldt, accumulate);
        return 0;
    }
    mc_ukr_direct_rows_[mr](kc, (const float *)ap, b, ldb, pstride, b_type, nr, tile, ldt,
                            accumulate);
    return 0;
}

/* --- epilogue ----------------------------------------------------------------------------------- */

/* Columns of B in place (B contiguous along k, at most MC_DIRECT_T_MAXM rows): 16 columns x
 * 16 k loaded as rows (masked at the k edge and the right edge), transposed in registers, then
 * the FMAs of mc_ukr_body_ for those 16 k, in order; k past kc is skipped, never multiplied. */
MC_INLINE_ void mc_ukr_direct_t_body_(const int rows, int64_t kc, const float *a, const char *b,
                                      int64_t ldc, int type, int nr, float *tile, int64_t ldt)
{
    const int es = type == MC_F32 ? 4 : 2;
    __m512 c[MC_DIRECT_T_MAXM][MC_NV];
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            c[i][j] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
        const __mmask16 mk = mc_mask16_avx512(kc - k0);
        const int64_t nk = kc - k0 < 16 ? kc - k0 : 16;
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j) {
            const int ncol = nr - 16 * j;
            if (ncol <= 0)
                break;
            __m512 r[16];
#pragma GCC unroll 16
            for (int l = 0; l < 16; ++l)
                r[l] = l < ncol ? mc_load16_avx512(b + (16 * j + l) * ldc + k0 * es, type, mk)
                                : _mm512_setzero_ps();
            mc_transpose16_avx512(r);
#pragma GCC unroll 16
            for (int kk = 0; kk < 16; ++kk) {
                if (kk < nk) {
#pragma GCC unroll 8
                    for (int i = 0; i < rows; ++i)
                        c[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(a[(k0 + kk) * MC_MR + i]), r[kk],
                                                  c[i][j]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < MC_NV; ++j)
            _mm512_store_ps(tile + i * ldt + 16 * j, c[i][j]);
}

#define MC_UKR_DIRECT_T_ROWS_(R)                                                            \
    static void mc_ukr_direct_t_##R##_(int64_t kc, const float *a, const char *b, int64_t ldc, \
                                       int type, int nr, float *tile, int64_t ldt)          \
    {                                                                                       \
        if (type == MC_F32)                                                                 \
            mc_ukr_direct_t_body_(R, kc, a, b, ldc, MC_F32, nr, tile, ldt);                 \
        else if (type == MC_F16)                                                            \
            mc_ukr_direct_t_body_(R, kc, a, b, ldc, MC_F16, nr, tile, ldt);                 \
        else                                                                                \
            mc_ukr_direct_t_body_(R, kc, a, b, ldc, MC_BF16, nr, tile, ldt);                \
    }
MC_UKR_DIRECT_T_ROWS_(1) MC_UKR_DIRECT_T_ROWS_(2) MC_UKR_DIRECT_T_ROWS_(3)
MC_UKR_DIRECT_T_ROWS_(4) MC_UKR_DIRECT_T_ROWS_(5) MC_UKR_DIRECT_T_ROWS_(6)

static int mc_ukr_direct_t_f32_avx512_(int64_t kc, const void *ap, const char *b, int64_t ldc,
                                       int b_type, int nr, float *tile, int64_t ldt, int mr)
{
    typedef void (*fn_t)(int64_t, const float *, const char *, int64_t, int, int, float *, int64_t);
    static const fn_t rows[MC_DIRECT_T_MAXM + 1] = {
        NULL, mc_ukr_direct_t_1_, mc_ukr_direct_t_2_, mc_ukr_direct_t_3_, mc_ukr_direct_t_4_,
        mc_ukr_direct_t_5_, mc_ukr_direct_t_6_};
    rows[mr](kc, (const float *)ap, b, ldc, b_type, nr, tile, ldt);
    return 0;
}

/* float32 -> bfloat16 bits, packed to 16 lanes of 16 bits (mc_simd_avx512.h). */
MC_INLINE_ __m256i mc_f32_to_bf16_v_(__m512 v)
{
    return _mm512_cvtepi32_epi16(mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v)));
}

#define MC_EPI_FN_ mc_gemm_epi_avx512_
#define MC_EPI_PLAIN_FN_ mc_gemm_epi_plain_avx512_
#define MC_EPI_BF16_STORE_(o, m, v) _mm256_mask_storeu_epi16((o), (m), mc_f32_to_bf16_v_(v))
#define MC_EPI_BF16_ROUND2_(v0, v1) mc_f32_to_bf16_join_avx512((v0), (v1))
#include "mc_gemm_epi_avx512_inl.h"

/* the micro-kernel with the epilogue in its registers (mc_gemm_avx512bf16.c, design g) */
MC_UKR_EPI_DEFINE_(mc_ukr_epi_f32_avx512_, mc_ukr_epi_a_f32_avx512_, float)

const mc_gemm_table mc_gemm_table_avx512 = {
    .f32 = {.mr = MC_MR, .nr = MC_NR, .pairs = 0, .pack = mc_pack_avx512_,
            .ukr = mc_ukr_f32_avx512_, .ukr_wide = mc_ukr_wide_f32_avx512_,
            .epi = mc_gemm_epi_avx512_, .ukr_epi = mc_ukr_epi_f32_avx512_,
            .ukr_epi_a = mc_ukr_epi_a_f32_avx512_,
            .ukr_direct = mc_ukr_direct_f32_avx512_,
            .direct_wide = 16 * MC_WIDE_NV, .ukr_direct_t = mc_ukr_direct_t_f32_avx512_,
            .mc = 140, .kc = 1024, .nc = 1024},
};
