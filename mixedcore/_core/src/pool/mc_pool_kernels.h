/* The pooling family's level kernels: their types and the family's table (one per level,
 * exported by mc_pool_generic.c and mc_pool_<isa>.c, resolved by runtime/mc_kernels.c).  The
 * level files, the scalar twins and the kernel tables include this header; the drivers' API is
 * mc_pool.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_POOL_KERNELS_H_
#define MC_POOL_KERNELS_H_

#include <stdint.h>
#include "mc_conv_geom.h"

/* acc[ch] = max (op MC_POOL_MAX) or sum (op MC_POOL_SUM) over t < ntaps of x[xoff[t] + ch * es],
 * from the first tap's value, in tap order (ntaps >= 1).  The maximum takes v when v > m or v
 * is NaN, so the first NaN met stays.  float for float16, bfloat16 and float32 data, double for
 * float64. */
typedef void (*mc_pool_fn)(const char *x, int type, const int64_t *xoff, int ntaps, int64_t c,
                           int op, void *acc);
enum { MC_POOL_MAX = 0, MC_POOL_SUM = 1 };

typedef struct {
    mc_pool_fn reduce;
} mc_pool_table;

extern const mc_pool_table mc_pool_table_generic;
extern const mc_pool_table mc_pool_table_avx2;
extern const mc_pool_table mc_pool_table_avx512;

#endif
