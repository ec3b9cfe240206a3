/* AVX2 + FMA level of the layer-normalization kernel: the scalar twin (mc_norm_scalar.h)
 * compiled with this level's flags; the same bits as the generic level (no FMA is formed:
 * -ffp-contract=off, and the twin calls no fma()). */
#include "mc_norm_kernels.h"
#include "mc_norm_scalar.h"

MC_NORM_SCALAR_KERNELS_(avx2)

const mc_norm_table mc_norm_table_avx2 = MC_NORM_TABLE_(avx2);
