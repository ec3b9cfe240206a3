/* Fused attention at the avx2 level: the scalar twin compiled with FMA (fmaf inlined as one
 * instruction instead of a library call); the same bits as the generic level. */
#include "mc_attn_kernels.h"
#include "mc_attn_scalar.h"

MC_ATTN_SCALAR_UNIT_(avx2)

const mc_attn_table mc_attn_table_avx2 = {mc_attn_unit_avx2};
