/* The depthwise kernel with its epilogue at the AVX512-BF16 level (mc_conv_avx512.c, design d):
 * the avx512 kernel (mc_conv_avx512_inl.h) with a bfloat16 output rounded by VCVTNE2PS2BF16,
 * 32 values an instruction, instead of the integer rounding.  The instruction agrees with
 * mc_f32_to_bf16_bits except on subnormal inputs (flushed) and NaNs (payload kept); one
 * VFPCLASSPS per 16 values finds those lanes, rounded again the integer way (the helpers of
 * mc_simd_avx512bf16.h, which the GEMM's epilogue at this level uses as well).  Every other kernel
 * of the family is the avx512 level's.
 */
#include <immintrin.h>
#include <stdint.h>
#include "mc_act_avx512_inl.h"
#include "mc_conv_kernels.h"
#include "mc_simd_avx512bf16.h"

#define MC_DW_EPI_FN_ mc_dw_epi_avx512bf16_
#define MC_DW_BF16_STORE_(o, m, v) mc_store_bf16_avx512bf16((o), (m), (v))
#define MC_DW_BF16_JOIN_(v0, v1) mc_bf16_join_avx512bf16((v0), (v1))
#include "mc_conv_avx512_inl.h"

const mc_conv_table mc_conv_table_avx512bf16 = {.dw_epi = mc_dw_epi_avx512bf16_};
