/* Fused attention at the AVX-512 level (F/BW/VL/DQ + FMA): the unit of mc_attn_avx512_inl.h. */
#include "mc_attn_avx512_inl.h"

const mc_attn_table mc_attn_table_avx512 = {mc_attn_unit_avx512_};
