/* Drivers of the activation family: elementwise forward and backward, softmax; see mc_act.h.
 *
 * Design:
 *   a. The elementwise drivers treat their arrays as flat runs of n elements cut into units of
 *      consecutive elements (multiples of 64, at least MC_ACT_UNIT_MIN, about eight per
 *      thread), taken dynamically by the team; each element depends on its own inputs only, so
 *      the results do not depend on the split or the thread count.
 *   b. Softmax units are bands of whole rows (about eight per thread).
 *   c. Below MC_ACT_PARALLEL_MIN elements a call stays on its caller.
 */
#include <stddef.h>
#include "mc_act.h"
#include "mc_kernels.h"
#include "mc_runtime.h"

/* elements below which a call stays on one thread, and the smallest elementwise unit */
#define MC_ACT_PARALLEL_MIN ((int64_t)1 << 15)
#define MC_ACT_UNIT_MIN ((int64_t)1 << 13)
#define MC_ACT_UNITS_PER_THREAD_ 8

static int64_t mc_act_ceil_div_(int64_t a, int64_t b) { return (a + b - 1) / b; }

typedef struct {
    int act;
    mc_act_forward_fn fwd;       /* NULL for backward */
    mc_act_backward_fn bwd;
    const float *x, *dy;
    float *out;
    int64_t n, unit;
} mc_act_job_;

static void mc_act_unit_(void *ctx, int64_t u)
{
    const mc_act_job_ *job = (const mc_act_job_ *)ctx;
    const int64_t i0 = u * job->unit;
    const int64_t cnt = job->n - i0 < job->unit ? job->n - i0 : job->unit;
    if (job->fwd != NULL)
        job->fwd(job->act, job->x + i0, job->out + i0, cnt);
    else
        job->bwd(job->act, job->dy + i0, job->x + i0, job->out + i0, cnt);
}

static void mc_act_run_(mc_act_job_ *job)
{
    const int nt = mc_rt_threads_for(job->n, MC_ACT_PARALLEL_MIN);
    int64_t unit = mc_act_ceil_div_(job->n, MC_ACT_UNITS_PER_THREAD_ * (int64_t)nt);
    if (unit < MC_ACT_UNIT_MIN)
        unit = MC_ACT_UNIT_MIN;
    job->unit = (unit + 63) & ~(int64_t)63;
    mc_run(mc_act_unit_, job, mc_act_ceil_div_(job->n, job->unit), nt);
}

int mc_act_forward(int act, const float *x, float *y, int64_t n)
{
    if (n < 0 || (n > 0 && (x == NULL || y == NULL)))
        return MC_ACT_EARG;
    if (n == 0)
        return MC_ACT_OK;
    mc_act_job_ job = {.act = act, .fwd = mc_kernels(mc_rt_level())->act.forward, .bwd = NULL,
                       .x = x, .dy = NULL, .out = y, .n = n, .unit = 0};
    mc_act_run_(&job);
    return MC_ACT_OK;
}

int mc_act_backward(int act, const float *dy, const float *x, float *dx, int64_t n)
{
    if (n < 0 || (n > 0 && (dy == NULL || x == NULL || dx == NULL)))
        return MC_ACT_EARG;
    if (n == 0)
        return MC_ACT_OK;
    mc_act_job_ job = {.act = act, .fwd = NULL, .bwd = mc_kernels(mc_rt_level())->act.backward,
                       .x = x, .dy = dy, .out = dx, .n = n, .unit = 0};
    mc_act_run_(&job);
    return MC_ACT_OK;
}

typedef struct {
    mc_softmax_fn fn;
    const float *x;
    float *y;
    int64_t rows, n, unit;
    int log_;
} mc_softmax_job_;

static void mc_softmax_unit_(void *ctx, int64_t u)
{
    const mc_softmax_job_ *job = (const mc_softmax_job_ *)ctx;
    const int64_t r0 = u * job->unit;
    const int64_t cnt = job->rows - r0 < job->unit ? job->rows - r0 : job->unit;
    job->fn(job->x + r0 * job->n, job->y + r0 * job->n, cnt, job->n, job->log_);
}

int mc_softmax(const float *x, float *y, int64_t rows, int64_t n, int log_)
{
    if (rows < 0 || n < 0 || (rows > 0 && n > 0 && (x == NULL || y == NULL)))
        return MC_ACT_EARG;
    if (rows == 0 || n == 0)
        return MC_ACT_OK;
    mc_softmax_job_ job = {.fn = mc_kernels(mc_rt_level())->act.softmax, .x = x, .y = y,
                           .rows = rows, .n = n, .unit = 0, .log_ = log_ != 0};
    const int nt = mc_rt_threads_for(rows * n, MC_ACT_PARALLEL_MIN);
    job.unit = mc_act_ceil_div_(rows, MC_ACT_UNITS_PER_THREAD_ * (int64_t)nt);
    if (job.unit < 1)
        job.unit = 1;
    mc_run(mc_softmax_unit_, &job, mc_act_ceil_div_(rows, job.unit), nt);
    return MC_ACT_OK;
}
