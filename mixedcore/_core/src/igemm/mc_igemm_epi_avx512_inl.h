/* The AVX-512 epilogue of the int8 GEMM (mc_igemm.h, design f), written once for the two levels
 * that share it (mc_igemm_avx512.c, mc_igemm_avx512bf16.c).  The including file defines
 * MC_IEPI_FN_ (the name of the epilogue) and includes mc_act_avx512_inl.h, mc_simd_avx512.h and
 * mc_igemm_kernels.h first.  The same operations, in the same order, as mc_igemm_epi_scalar:
 * VCVTDQ2PS, VMULPS, VDIVPS and VADDPS round once each to nearest even (the engine's MXCSR),
 * mc_act_ps_ is bit-identical to the act family's scalar functions, and the stores round as
 * mc_f32_to_f16_bits / mc_f32_to_bf16_bits do.
 */
#ifndef MC_IGEMM_EPI_AVX512_INL_H_
#define MC_IGEMM_EPI_AVX512_INL_H_

static void MC_IEPI_FN_(const mc_igemm_args *g, const int32_t *tile, int ldt, int mr, int nr,
                        int64_t i, int64_t j, int first, int last)
{
    /* every field read once: the stores go through char pointers, which may alias anything */
    const int out_type = g->out_type, act = g->act;
    const int64_t es = out_type == MC_IGEMM_I32 || out_type == MC_F32 ? 4 : 2;
    char *const out = g->out;
    const int64_t o_rs = g->o_rs, acc_rs = g->acc_rs, acc_r0 = g->acc_r0, acc_c0 = g->acc_c0;
    char *const accp = (char *)g->acc;
    const float *const a_scale = g->a_scale, *const b_scale = g->b_scale, *const bias = g->bias;
    const int32_t *const a_zero = g->a_zero, *const b_sum = g->b_sum;
    const int bias_one = g->bias_s == 0;
    for (int r = 0; r < mr; ++r) {
        const int64_t ii = i + r;
        int32_t *acc = first && last ? NULL
                                     : (int32_t *)(accp + (ii - acc_r0) * acc_rs + (j - acc_c0) * 4);
        char *orow = out + ii * o_rs + j * es;
        const __m512 as = last && a_scale != NULL ? _mm512_set1_ps(a_scale[ii]) : _mm512_setzero_ps();
        const __m512i zs = last && a_zero != NULL ? _mm512_set1_epi32(a_zero[ii])
                                                  : _mm512_setzero_si512();
        for (int s = 0; s < nr; s += 16) {
            const __mmask16 m = mc_mask16_avx512(nr - s);
            __m512i t = _mm512_maskz_loadu_epi32(m, tile + r * ldt + s);
            if (!first)
                t = _mm512_add_epi32(t, _mm512_maskz_loadu_epi32(m, acc + s));
            if (!last) {
                _mm512_mask_storeu_epi32(acc + s, m, t);
                continue;
            }
            if (a_zero != NULL)        /* mc_igemm.h, design i: wrapping, exact */
                t = _mm512_sub_epi32(t, _mm512_mullo_epi32(
                                            zs, _mm512_maskz_loadu_epi32(m, b_sum + j + s)));
            if (out_type == MC_IGEMM_I32) {
                _mm512_mask_storeu_epi32(orow + s * 4, m, t);
                continue;
            }
            __m512 v = _mm512_cvtepi32_ps(t);
            const __m512 d = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, b_scale + j + s), as);
            v = _mm512_div_ps(v, d);
            if (bias != NULL)
                v = _mm512_add_ps(v, bias_one ? _mm512_set1_ps(bias[0])
                                              : _mm512_maskz_loadu_ps(m, bias + j + s));
            if (act != MC_ACT_NONE)
                v = mc_act_ps_(act, v);
            if (out_type == MC_F32)
                _mm512_mask_storeu_ps(orow + s * 4, m, v);
            else if (out_type == MC_F16)
                _mm256_mask_storeu_epi16(orow + s * 2, m,
                                         _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT |
                                                                _MM_FROUND_NO_EXC));
            else
                _mm256_mask_storeu_epi16(orow + s * 2, m, _mm512_cvtepi32_epi16(
                    mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v))));
        }
    }
}

#endif
