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
 *   c. The epilogue is the scalar one (mc_gemm.c): this level is the fallback for CPUs without
 *      AVX-512, where the micro-kernel is what matters.  Only gelu, sigmoid and tanh take a
 *      detour (mc_gemm_epi_avx2_): the scalar epilogue without the activation into a float32
 *      row, then the activation kernel of this level (mc_act_avx2.c), then the output rounding.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_gemm.h"

#define MC_INLINE_ static inline __attribute__((always_inline))
#define MC_MR 6
#define MC_NV 2
#define MC_NR (8 * MC_NV)

MC_INLINE_ __m256 mc_load8_(const char *p, int type)
{
    if (type == MC_F32)
        return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (type == MC_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* r[i] = row i (8 values along k) -> r[j] = column j (8 rows): unpack, shuffle pairs, swap
 * 128-bit halves. */
MC_INLINE_ void mc_transpose8_(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int q = 0; q < 2; ++q) {
        u[4 * q + 0] = _mm256_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0x44);
        u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0xEE);
        u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
    }
    for (int e = 0; e < 4; ++e) {
        r[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
        r[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
    }
}

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
                r[i] = i < nl ? mc_load8_(src + (l0 + i) * ls + k0 * es, type) : _mm256_setzero_ps();
            mc_transpose8_(r);
            for (int j = 0; j < 8; ++j)
                _mm256_maskstore_ps(d + (k0 + j) * w + l0, store_mask, r[j]);
        }
    }
    if (kfull < kc)
        mc_gemm_pack_generic_(src + kfull * es, type, ls, es, lanes, kc - kfull, w, d + kfull * w);
}

static void mc_pack_avx2_(const char *src, int type, int64_t ls, int64_t ks, int64_t lanes,
                          int64_t kc, int w, void *dst)
{
    const int64_t es = type == MC_F32 ? 4 : 2;
    if (ls != es) {
        if (ks == es)
            mc_pack_k_contig_(src, type, ls, lanes, kc, w, (float *)dst);
        else
            mc_gemm_pack_generic_(src, type, ls, ks, lanes, kc, w, dst);
        return;
    }
    float *d = (float *)dst;
    const int64_t full = lanes / 8 * 8;
    for (int64_t k = 0; k < kc; ++k) {
        const char *s = src + k * ks;
        int64_t l = 0;
        for (; l < full; l += 8)
            _mm256_storeu_ps(d + l, mc_load8_(s + l * es, type));
        if (l < w)
            mc_gemm_pack_generic_(s + l * es, type, es, 0, lanes - l, 1, (int)(w - l), d + l);
        d += w;
    }
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

/* The scalar epilogue, with gelu / sigmoid / tanh applied by mc_act_forward_f32_avx2 (the scalar
 * twin compiled with FMA) instead of by the baseline-compiled twin in mc_gemm_epi_generic_, whose
 * fma() calls go through the C library: the same bits, in a third of the time.  Each row of the
 * tile goes, 64 columns at a time, through the generic epilogue with no activation into a float32
 * buffer (its pointers moved to the row, so that it indexes from (0, 0)), through the activation,
 * then to the output with the same rounding as the generic epilogue. */
static void mc_gemm_epi_avx2_(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                              int64_t i, int64_t j, int first, int last)
{
    if (!last || g->act == MC_ACT_NONE || g->act == MC_ACT_RELU) {
        mc_gemm_epi_generic_(g, tile, ldt, mr, nr, i, j, first, last);
        return;
    }
    float v[64];
    for (int r = 0; r < mr; ++r) {
        for (int s = 0; s < nr; s += 64) {
            const int cn = nr - s < 64 ? nr - s : 64;
            const int64_t ii = i + r, jj = j + s;
            mc_gemm_args h = *g;
            h.act = MC_ACT_NONE;
            if (g->acc)
                h.acc = (float *)((char *)g->acc + ii * g->acc_rs + jj * g->acc_cs);
            if (g->c)
                h.c = (const float *)((const char *)g->c + ii * g->c_rs + jj * g->c_cs);
            if (g->bias)
                h.bias = (const float *)((const char *)g->bias + jj * g->bias_s);
            h.out = (char *)v;
            h.o_rs = 0;
            h.o_cs = 4;
            h.out_type = MC_F32;
            mc_gemm_epi_generic_(&h, tile + r * ldt + s, ldt, 1, cn, 0, 0, first, last);
            mc_act_forward_f32_avx2(g->act, v, v, cn);
            char *o = g->out + ii * g->o_rs + jj * g->o_cs;
            for (int t = 0; t < cn; ++t, o += g->o_cs) {
                if (g->out_type == MC_F32) {
                    memcpy(o, &v[t], 4);
                } else {
                    uint32_t u;
                    memcpy(&u, &v[t], 4);
                    const uint16_t b = g->out_type == MC_F16 ? mc_f32_to_f16_bits(u)
                                                             : mc_f32_to_bf16_bits(u);
                    memcpy(o, &b, 2);
                }
            }
        }
    }
}

static const mc_gemm_kernel mc_gemm_f32_avx2_ = {
    MC_MR, MC_NR, 0, 4, mc_pack_avx2_, mc_ukr_f32_avx2_, mc_gemm_epi_avx2_, NULL,
    72, 512, 1024, 0, NULL,
};

const mc_gemm_kernel *mc_gemm_kernel_avx2(int a_type, int b_type)
{
    (void)a_type;
    (void)b_type;
    return &mc_gemm_f32_avx2_;
}
