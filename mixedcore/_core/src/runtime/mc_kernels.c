/* Resolution of the per-level kernel tables; see mc_kernels.h for the design. */
#include "mc_kernels.h"

#include <string.h>
#include "mc_cpu.h"

static mc_level_kernels mc_resolved_[MC_ISA_COUNT];

/* Fills the empty entries of `k` from `below` (design b). */
static void mc_inherit_(mc_level_kernels *k, const mc_level_kernels *below)
{
    for (int s = 0; s < MC_NCASTTYPES; ++s) {
        for (int d = 0; d < MC_NCASTTYPES; ++d)
            if (k->convert.cast[s][d] == NULL)
                k->convert.cast[s][d] = below->convert.cast[s][d];
        for (int d = 0; d < MC_NCASTTYPES - MC_E4M3; ++d)
            if (k->convert.cast_sat[s][d] == NULL)
                k->convert.cast_sat[s][d] = below->convert.cast_sat[s][d];
    }
    for (int s = 0; s < MC_NDTYPES; ++s) {
        if (k->scan.all_finite[s] == NULL)
            k->scan.all_finite[s] = below->scan.all_finite[s];
        if (k->scan.unscale[s] == NULL)
            k->scan.unscale[s] = below->scan.unscale[s];
        if (k->scan.stats[s] == NULL)
            k->scan.stats[s] = below->scan.stats[s];
    }
    if (k->act.forward == NULL)
        k->act = below->act;
    if (k->conv.dw == NULL)
        k->conv.dw = below->conv.dw;
    if (k->conv.dw_epi == NULL)
        k->conv.dw_epi = below->conv.dw_epi;
    if (k->pool.reduce == NULL)
        k->pool = below->pool;
    if (k->attn.unit == NULL)
        k->attn = below->attn;
    if (k->norm.layer_norm == NULL)
        k->norm = below->norm;
    if (k->igemm.gemm.pack_a == NULL)
        k->igemm.gemm = below->igemm.gemm;
    if (k->igemm.quant == NULL)
        k->igemm.quant = below->igemm.quant;
    if (k->igemm.quant_zp == NULL)
        k->igemm.quant_zp = below->igemm.quant_zp;
    if (k->wgemm.dot == NULL)
        k->wgemm.dot = below->wgemm.dot;
    if (k->wgemm.dot_bf16 == NULL)
        k->wgemm.dot_bf16 = below->wgemm.dot_bf16;
    if (k->wgemm.widen == NULL)
        k->wgemm.widen = below->wgemm.widen;
    if (k->wgemm.combine == NULL)
        k->wgemm.combine = below->wgemm.combine;
    if (k->gemm.f32.pack == NULL) {
        k->gemm.f32 = below->gemm.f32;
        /* a level's own epilogue serves the float32 kernel it inherits too */
        if (k->gemm.pairs.pack != NULL && k->gemm.pairs.epi != NULL)
            k->gemm.f32.epi = k->gemm.pairs.epi;
    }
    if (k->gemm.pairs.pack == NULL)
        k->gemm.pairs = below->gemm.pairs;
    else if (k->gemm.pairs.epi == NULL)
        k->gemm.pairs.epi = k->gemm.f32.epi;
}

static void mc_level_(int level, const mc_convert_table *convert, const mc_scan_table *scan,
                      const mc_gemm_table *gemm, const mc_act_table *act,
                      const mc_conv_table *conv, const mc_pool_table *pool,
                      const mc_attn_table *attn, const mc_norm_table *norm,
                      const mc_igemm_table *igemm, const mc_wgemm_table *wgemm)
{
    mc_level_kernels *k = &mc_resolved_[level];
    memset(k, 0, sizeof *k);
    if (convert != NULL)
        k->convert = *convert;
    if (scan != NULL)
        k->scan = *scan;
    if (gemm != NULL)
        k->gemm = *gemm;
    if (act != NULL)
        k->act = *act;
    if (conv != NULL)
        k->conv = *conv;
    if (pool != NULL)
        k->pool = *pool;
    if (attn != NULL)
        k->attn = *attn;
    if (norm != NULL)
        k->norm = *norm;
    if (igemm != NULL)
        k->igemm = *igemm;
    if (wgemm != NULL)
        k->wgemm = *wgemm;
    if (level > 0)
        mc_inherit_(k, &mc_resolved_[level - 1]);
}

void mc_kernels_init(void)
{
    mc_level_(MC_ISA_GENERIC, &mc_convert_table_generic, &mc_scan_table_generic,
              &mc_gemm_table_generic, &mc_act_table_generic, &mc_conv_table_generic,
              &mc_pool_table_generic, &mc_attn_table_generic, &mc_norm_table_generic,
              &mc_igemm_table_generic, &mc_wgemm_table_generic);
#if defined(MC_HAVE_AVX2)
    mc_level_(MC_ISA_AVX2, &mc_convert_table_avx2, &mc_scan_table_avx2, &mc_gemm_table_avx2,
              &mc_act_table_avx2, &mc_conv_table_avx2, &mc_pool_table_avx2, &mc_attn_table_avx2,
              &mc_norm_table_avx2, &mc_igemm_table_avx2, &mc_wgemm_table_avx2);
#else
    mc_level_(MC_ISA_AVX2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
#endif
#if defined(MC_HAVE_AVX512)
    mc_level_(MC_ISA_AVX512, &mc_convert_table_avx512, &mc_scan_table_avx512,
              &mc_gemm_table_avx512, &mc_act_table_avx512, &mc_conv_table_avx512,
              &mc_pool_table_avx512, &mc_attn_table_avx512, &mc_norm_table_avx512,
              &mc_igemm_table_avx512, &mc_wgemm_table_avx512);
#else
    mc_level_(MC_ISA_AVX512, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
#endif
#if defined(MC_HAVE_AVX512BF16)
    mc_level_(MC_ISA_AVX512BF16, NULL, &mc_scan_table_avx512bf16, &mc_gemm_table_avx512bf16,
              NULL, &mc_conv_table_avx512bf16, NULL, &mc_attn_table_avx512bf16, NULL, &mc_igemm_table_avx512bf16,
              &mc_wgemm_table_avx512bf16);
#else
    mc_level_(MC_ISA_AVX512BF16, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
#endif
}

const mc_level_kernels *mc_kernels(int level)
{
    if (level < 0)
        level = 0;
    if (level >= MC_ISA_COUNT)
        level = MC_ISA_COUNT - 1;
    return &mc_resolved_[level];
}
