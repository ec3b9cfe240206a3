/* The depthwise kernel with its epilogue at the AVX512-BF16 level (mc_conv_avx512.c, design d):
 * the avx512 kernel (mc_conv_avx512_inl.h) with a bfloat16 output rounded by VCVTNE2PS2BF16,
 * 32 values an instruction, instead of the integer rounding.  The instruction agrees with
 * mc_f32_to_bf16_bits except on subnormal inputs (flushed) and NaNs (payload kept); one
 * VFPCLASSPS per 16 values finds those lanes, rounded again the integer way (the GEMM's
 * epilogue at this level does the same: mc_gemm_avx512bf16.c, design e).  Every other kernel
 * of the family is the avx512 level's.
 */
#include <immintrin.h>
#include <stdint.h>
#include "mc_act_avx512_inl.h"
#include "mc_conv_kernels.h"
#include "mc_simd_avx512.h"

/* VFPCLASSPS categories: QNaN 0x01, denormal 0x20, SNaN 0x80. */
#define MC_DW_FIXUP_CLASSES_ 0xA1

MC_INLINE_ __m512i mc_dw_bf16_join_(__m512 v0, __m512 v1)
{
    const __m512i r = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
    const __mmask32 fix = (__mmask32)_mm512_fpclass_ps_mask(v0, MC_DW_FIXUP_CLASSES_) |
                          ((__mmask32)_mm512_fpclass_ps_mask(v1, MC_DW_FIXUP_CLASSES_) << 16);
    if (__builtin_expect(fix == 0, 1))
        return r;
    return _mm512_mask_mov_epi16(r, fix, mc_f32_to_bf16_join_avx512(v0, v1));
}

MC_INLINE_ void mc_dw_bf16_store_(char *o, __mmask16 m, __m512 v)
{
    __m256i r = (__m256i)_mm512_cvtneps_pbh(v);
    const __mmask16 fix = _mm512_mask_fpclass_ps_mask(m, v, MC_DW_FIXUP_CLASSES_);
    if (__builtin_expect(fix != 0, 0))
        r = _mm256_mask_mov_epi16(r, fix, _mm512_cvtepi32_epi16(
                                      mc_f32_to_bf16_lanes_avx512(_mm512_castps_si512(v))));
    _mm256_mask_storeu_epi16(o, m, r);
}

#define MC_DW_EPI_FN_ mc_dw_epi_avx512bf16_
#define MC_DW_BF16_STORE_(o, m, v) mc_dw_bf16_store_((o), (m), (v))
#define MC_DW_BF16_JOIN_(v0, v1) mc_dw_bf16_join_((v0), (v1))
#include "mc_conv_avx512_inl.h"

const mc_conv_table mc_conv_table_avx512bf16 = {.dw_epi = mc_dw_epi_avx512bf16_};
