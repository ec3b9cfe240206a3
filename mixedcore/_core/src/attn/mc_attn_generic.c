/* Generic (portable C) fused attention: the scalar twin of mc_attn_scalar.h, the specification
 * of the vector unit.  fmaf() is a library call at this level (correctly rounded). */
#include "mc_attn_kernels.h"
#include "mc_attn_scalar.h"

MC_ATTN_SCALAR_UNIT_(generic)

const mc_attn_table mc_attn_table_generic = {mc_attn_unit_generic};
