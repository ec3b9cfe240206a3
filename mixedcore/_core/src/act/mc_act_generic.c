/* Generic (portable C) level of the activation kernels (the drivers are in mc_act.c).
 *
 * Design:
 *   a. The generic kernels are the scalar twins of mc_act_scalar.h in a loop
 *      (MC_ACT_SCALAR_KERNELS_): the specification the vector kernels are tested against.
 *      Compilers may vectorise them for the platform's baseline, never beyond it; fma() is a
 *      library call there (correctly rounded; glibc runs the FMA instruction when the CPU has
 *      one, after a call through the PLT, which makes these loops 4-6 times slower than the
 *      same loops compiled with -mfma in mc_act_avx2.c).
 *   b. Every level's kernels give the same bits as these; only the speed differs.
 */
#include <string.h>
#include "mc_act_kernels.h"
#include "mc_act_scalar.h"

MC_ACT_SCALAR_KERNELS_(generic)

const mc_act_table mc_act_table_generic = MC_ACT_TABLE_(generic);
