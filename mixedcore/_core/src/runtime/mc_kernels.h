/* The kernels of each level, resolved once at start-up (BLIS's context model).
 *
 * Design:
 *   a. Each level's files export one table per kernel family (mc_convert_table_<isa>,
 *      mc_scan_table_<isa>, mc_gemm_table_<isa>, mc_act_table_<isa>, mc_conv_table_<isa>,
 *      mc_pool_table_<isa>, mc_attn_table_<isa>, mc_norm_table_<isa>,
 *      mc_igemm_table_<isa>, mc_wgemm_table_<isa>), from the family's level
 *      files (<family>/mc_<family>_generic.c and mc_<family>_<isa>.c), declared with the
 *      kernels' types in <family>/mc_<family>_kernels.h.  The generic tables are complete; a
 *      SIMD table holds what its level speeds up and leaves the rest empty.
 *   b. mc_kernels_init() resolves one record per level, lowest first: an empty entry takes the
 *      resolved entry of the level below; GEMM kernels (float and int8) are taken whole (their
 *      parts share a panel format), and a pair kernel without an epilogue takes its level's float32 one.  A
 *      level that was not built resolves to the one below it (it is never selected:
 *      mc_cpu_built_level()).
 *   c. This is the one place that knows which levels were compiled (MC_HAVE_<ISA>); the drivers
 *      look kernels up by level, and the level files never call back into a driver: drivers
 *      -> this file -> level files, each calling only downwards.
 */
#ifndef MC_KERNELS_H_
#define MC_KERNELS_H_

#include "mc_act_kernels.h"
#include "mc_attn_kernels.h"
#include "mc_conv_kernels.h"
#include "mc_convert_kernels.h"
#include "mc_gemm_kernels.h"
#include "mc_igemm_kernels.h"
#include "mc_norm_kernels.h"
#include "mc_pool_kernels.h"
#include "mc_scan_kernels.h"
#include "mc_wgemm_kernels.h"

typedef struct {
    mc_convert_table convert;
    mc_scan_table scan;
    mc_gemm_table gemm;
    mc_act_table act;
    mc_conv_table conv;
    mc_pool_table pool;
    mc_attn_table attn;
    mc_norm_table norm;
    mc_igemm_table igemm;
    mc_wgemm_table wgemm;
} mc_level_kernels;

void mc_kernels_init(void);
/* The resolved kernels of `level` (clamped to the known levels). */
const mc_level_kernels *mc_kernels(int level);

#endif
