/* Generic (portable C) layer-normalization kernel: the scalar twin of mc_norm_scalar.h in a loop,
 * the specification the other levels are tested against. */
#include "mc_norm_kernels.h"
#include "mc_norm_scalar.h"

MC_NORM_SCALAR_KERNELS_(generic)

const mc_norm_table mc_norm_table_generic = MC_NORM_TABLE_(generic);
