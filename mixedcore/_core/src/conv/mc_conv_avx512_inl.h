/* The AVX-512 depthwise kernel with its epilogue (mc_conv_avx512.c, design d), written once for
 * the levels that share it.  The including file defines, before including:
 *   MC_DW_EPI_FN_               the name of the kernel (an mc_dw_epi_fn),
 *   MC_DW_BF16_STORE_(o, m, v)  the store of the lanes m of v rounded to bfloat16 at o,
 *   MC_DW_BF16_JOIN_(v0, v1)    v0 and v1 rounded to bfloat16, 32 values in order,
 * both bit-identical to mc_f32_to_bf16_bits, and includes mc_act_avx512_inl.h and
 * mc_simd_avx512.h.
 */
#ifndef MC_CONV_AVX512_INL_H_
#define MC_CONV_AVX512_INL_H_

/* --- depth multiplier 1 with the epilogue (design d) ------------------------------------------- */

/* The sum v of the channels through the epilogue: the bias b added in the lanes of hb (all or
 * none), the activation ACT. */
MC_INLINE_ __m512 mc_dw_epi_(const int ACT, __m512 v, __mmask16 hb, __m512 b)
{
    return mc_act_ps_(ACT, _mm512_mask_add_ps(v, hb, v, b));
}

/* v rounded to T, stored at o under m */
MC_INLINE_ void mc_dw_store_(char *o, const int T, __mmask16 m, __m512 v)
{
    if (T == MC_F32)
        _mm512_mask_storeu_ps(o, m, v);
    else if (T == MC_F16)
        _mm256_mask_storeu_epi16(o, m, _mm512_cvtps_ph(v, MC_RNE_SAE_));
    else
        MC_DW_BF16_STORE_(o, m, v);
}

/* v0 and v1 (32 channels) rounded to T, stored at o */
MC_INLINE_ void mc_dw_store2_(char *o, const int T, __m512 v0, __m512 v1)
{
    if (T == MC_F32) {
        _mm512_storeu_ps(o, v0);
        _mm512_storeu_ps(o + 64, v1);
    } else if (T == MC_F16) {
        _mm256_storeu_si256((__m256i *)o, _mm512_cvtps_ph(v0, MC_RNE_SAE_));
        _mm256_storeu_si256((__m256i *)(o + 32), _mm512_cvtps_ph(v1, MC_RNE_SAE_));
    } else {
        _mm512_storeu_si512(o, MC_DW_BF16_JOIN_(v0, v1));
    }
}

MC_INLINE_ __m512 mc_dw_bias_(const float *bias, __mmask16 m)
{
    return bias != NULL ? _mm512_maskz_loadu_ps(m, bias) : _mm512_setzero_ps();
}

/* The sums of four pixels whose taps come in rows of three neighbours (mc_dw_epi_fn, rows3),
 * for the channels of the NV vectors at xt (masks k): the six input pixels of a row are loaded
 * once, and pixel q takes input pixel i with the row's tap i - q -- in the row's tap order, as
 * i ascends. */
#define MC_DW_ROWS3_(NV)                                                                    \
    for (int t = 0; t < ntaps; t += 3) {                                                    \
        const char *xr = xt + xoff[t];                                                      \
        __m512 wv[3][NV];                                                                   \
        _Pragma("GCC unroll 3") for (int j = 0; j < 3; ++j)                                 \
            _Pragma("GCC unroll 2") for (int v = 0; v < (NV); ++v)                          \
                wv[j][v] = _mm512_maskz_loadu_ps(k[v], wt + woff[t + j] + 16 * v);          \
        _Pragma("GCC unroll 6") for (int i = 0; i < 6; ++i)                                 \
            _Pragma("GCC unroll 2") for (int v = 0; v < (NV); ++v) {                        \
                const __m512 xv = mc_load16_avx512(xr + i * pstride + 16 * v * es, T, k[v]); \
                _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q)                         \
                    if (i - q >= 0 && i - q < 3)                                            \
                        s[q][v] = _mm512_fmadd_ps(xv, wv[i - q][v], s[q][v]);               \
            }                                                                               \
    }

/* Four pixels' sums s of two whole vectors of channels from ch (s[q][v]: pixel q, vector v)
 * through the epilogue, stored */
MC_INLINE_ void mc_dw_out4x2_(char *op, int64_t ps, int64_t ch, const int T, const int ACT,
                              __m512 s[4][2], __mmask16 hb, const float *bias)
{
    const int64_t es = T == MC_F32 ? 4 : 2;
    const __m512 b0 = mc_dw_bias_(bias == NULL ? NULL : bias + ch, 0xFFFF);
    const __m512 b1 = mc_dw_bias_(bias == NULL ? NULL : bias + ch + 16, 0xFFFF);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q)
        mc_dw_store2_(op + q * ps + ch * es, T, mc_dw_epi_(ACT, s[q][0], hb, b0),
                      mc_dw_epi_(ACT, s[q][1], hb, b1));
}

/* The same for one vector of channels from ch (mask k), s[q] pixel q's */
MC_INLINE_ void mc_dw_out4x1_(char *op, int64_t ps, int64_t ch, const int T, const int ACT,
                              const __m512 *s, __mmask16 k, __mmask16 hb, const float *bias)
{
    const int64_t es = T == MC_F32 ? 4 : 2;
    const __m512 b0 = mc_dw_bias_(bias == NULL ? NULL : bias + ch, k);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q)
        mc_dw_store_(op + q * ps + ch * es, T, k, mc_dw_epi_(ACT, s[q], hb, b0));
}

MC_INLINE_ void mc_dw_epi_body_(const char *x, const int T, const int64_t *xoff, int64_t pstride,
                                int64_t npix, const float *w, const int64_t *woff, int ntaps,
                                int64_t c, const float *bias, const int ACT, char *out,
                                int rows3)
{
    const int64_t es = T == MC_F32 ? 4 : 2, ps = c * es;
    const __mmask16 all = 0xFFFF, hb = bias != NULL ? all : 0;
    int64_t p = 0;
    for (; rows3 && p + 4 <= npix; p += 4) {
        const char *xp = x + p * pstride;
        char *op = out + p * ps;
        int64_t ch = 0;
        for (; ch + 32 <= c; ch += 32) {
            const __mmask16 k[2] = {all, all};
            const char *xt = xp + ch * es;
            const float *wt = w + ch;
            __m512 s[4][2];
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q)
                s[q][0] = s[q][1] = _mm512_setzero_ps();
            MC_DW_ROWS3_(2)
            mc_dw_out4x2_(op, ps, ch, T, ACT, s, hb, bias);
        }
        for (; ch < c; ch += 16) {
            const __mmask16 k[1] = {mc_mask16_avx512(c - ch)};
            const char *xt = xp + ch * es;
            const float *wt = w + ch;
            __m512 s[4][1];
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q)
                s[q][0] = _mm512_setzero_ps();
            MC_DW_ROWS3_(1)
            const __m512 t[4] = {s[0][0], s[1][0], s[2][0], s[3][0]};
            mc_dw_out4x1_(op, ps, ch, T, ACT, t, k[0], hb, bias);
        }
    }
    for (; p + 4 <= npix; p += 4) {
        const char *xp = x + p * pstride;
        char *op = out + p * ps;
        int64_t ch = 0;
        for (; ch + 32 <= c; ch += 32) {
            __m512 s[4][2];
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q)
                s[q][0] = s[q][1] = _mm512_setzero_ps();
            for (int t = 0; t < ntaps; ++t) {
                const char *xt = xp + xoff[t] + ch * es;
                const float *wt = w + woff[t] + ch;
                const __m512 w0 = _mm512_loadu_ps(wt), w1 = _mm512_loadu_ps(wt + 16);
#pragma GCC unroll 4
                for (int q = 0; q < 4; ++q) {
                    s[q][0] = _mm512_fmadd_ps(mc_load16_avx512(xt + q * pstride, T, all), w0,
                                              s[q][0]);
                    s[q][1] = _mm512_fmadd_ps(
                        mc_load16_avx512(xt + q * pstride + 16 * es, T, all), w1, s[q][1]);
                }
            }
            mc_dw_out4x2_(op, ps, ch, T, ACT, s, hb, bias);
        }
        for (; ch < c; ch += 16) {
            const __mmask16 k = mc_mask16_avx512(c - ch);
            __m512 s[4];
#pragma GCC unroll 4
            for (int q = 0; q < 4; ++q)
                s[q] = _mm512_setzero_ps();
            for (int t = 0; t < ntaps; ++t) {
                const char *xt = xp + xoff[t] + ch * es;
                const __m512 w0 = _mm512_maskz_loadu_ps(k, w + woff[t] + ch);
#pragma GCC unroll 4
                for (int q = 0; q < 4; ++q)
                    s[q] = _mm512_fmadd_ps(mc_load16_avx512(xt + q * pstride, T, k), w0, s[q]);
            }
            mc_dw_out4x1_(op, ps, ch, T, ACT, s, k, hb, bias);
        }
    }
    for (; p < npix; ++p) {                  /* one pixel: four vectors of channels at a time */
        const char *xp = x + p * pstride;
        char *op = out + p * ps;
        for (int64_t ch = 0; ch < c; ch += 64) {
            __mmask16 k[4];
            __m512 s[4];
#pragma GCC unroll 4
            for (int v = 0; v < 4; ++v) {
                k[v] = mc_mask16_avx512(c - ch - 16 * v);
                s[v] = _mm512_setzero_ps();
            }
            for (int t = 0; t < ntaps; ++t) {
                const char *xt = xp + xoff[t] + ch * es;
                const float *wt = w + woff[t] + ch;
#pragma GCC unroll 4
                for (int v = 0; v < 4; ++v)
                    s[v] = _mm512_fmadd_ps(mc_load16_avx512(xt + 16 * v * es, T, k[v]),
                                           _mm512_maskz_loadu_ps(k[v], wt + 16 * v), s[v]);
            }
#pragma GCC unroll 4
            for (int v = 0; v < 4; ++v)
                mc_dw_store_(op + (ch + 16 * v) * es, T, k[v],
                             mc_dw_epi_(ACT, s[v], hb,
                                        mc_dw_bias_(bias == NULL ? NULL : bias + ch + 16 * v,
                                                    k[v])));
        }
    }
}

#define MC_DW_EPI_ACTS_(T)                                                                  \
    switch (act) {                                                                          \
    case MC_ACT_NONE:                                                                       \
        mc_dw_epi_body_(x, T, xoff, pstride, npix, w, woff, ntaps, c, bias, MC_ACT_NONE, out, rows3); \
        break;                                                                              \
    case MC_ACT_RELU:                                                                       \
        mc_dw_epi_body_(x, T, xoff, pstride, npix, w, woff, ntaps, c, bias, MC_ACT_RELU, out, rows3); \
        break;                                                                              \
    default:                                                                                \
        mc_dw_epi_body_(x, T, xoff, pstride, npix, w, woff, ntaps, c, bias, MC_ACT_RELU6, out, rows3); \
        break;                                                                              \
    }

static void MC_DW_EPI_FN_(const char *x, int type, const int64_t *xoff, int64_t pstride,
                              int64_t npix, const float *w, const int64_t *woff, int ntaps,
                              int64_t c, const float *bias, int act, char *out, int rows3)
{
    if (type == MC_BF16) {
        MC_DW_EPI_ACTS_(MC_BF16)
    } else if (type == MC_F16) {
        MC_DW_EPI_ACTS_(MC_F16)
    } else {
        MC_DW_EPI_ACTS_(MC_F32)
    }
}

#endif
