/* AVX2 + FMA level of the activation kernels: the scalar twins (mc_act_scalar.h) compiled with
 * this level's flags.
 *
 * Design:
 *   a. The same loops as the generic kernels (MC_ACT_SCALAR_KERNELS_), so the same bits; with
 *      -mfma the compiler emits the FMA instruction for fma() instead of a library call, which
 *      makes gelu, sigmoid and tanh 4-6 times faster than at the generic level.  Nothing else is
 *      specific to this level.
 */
#include <string.h>
#include "mc_act_kernels.h"
#include "mc_act_scalar.h"

MC_ACT_SCALAR_KERNELS_(avx2)

const mc_act_table mc_act_table_avx2 = MC_ACT_TABLE_(avx2);
