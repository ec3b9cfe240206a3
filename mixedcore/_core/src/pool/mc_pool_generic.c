/* Generic (portable C) level of the pooling kernels (the drivers are in mc_pool.c).
 *
 * Design:
 *   a. The generic kernels are the scalar twins of mc_pool_scalar.h over all channels: the
 *      specification the vector kernels are tested against.
 */
#include "mc_pool_kernels.h"
#include "mc_pool_scalar.h"

static void mc_pool_generic_(const char *x, int type, const int64_t *xoff, int ntaps, int64_t c,
                             int op, void *acc)
{
    mc_pool_scalar_(x, type, xoff, ntaps, 0, c, op, acc);
}

const mc_pool_table mc_pool_table_generic = {.reduce = mc_pool_generic_};
