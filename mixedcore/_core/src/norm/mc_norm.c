/* Driver of the normalization family (layer normalization); see mc_norm.h. */
#include <stddef.h>
#include "mc_checked.h"
#include "mc_convert_scalar.h"
#include "mc_kernels.h"
#include "mc_norm.h"
#include "mc_runtime.h"

/* elements below which a normalization stays on one thread */
#define MC_NORM_PARALLEL_MIN ((int64_t)1 << 15)
#define MC_NORM_UNITS_PER_THREAD_ 8

typedef struct {
    mc_layer_norm_fn fn;
    const mc_norm_job *job;
    int64_t rows, unit;
    mc_norm_after_fn after;
    void *ctx;
} mc_norm_run_;

static void mc_norm_unit_(void *ctx, int64_t u)
{
    const mc_norm_run_ *run = (const mc_norm_run_ *)ctx;
    const int64_t r0 = u * run->unit;
    const int64_t r1 = run->rows - r0 < run->unit ? run->rows : r0 + run->unit;
    run->fn(run->job, r0, r1);
    if (run->after != NULL)
        run->after(run->ctx, r0, r1);
}

static int mc_norm_type_ok_(int type)
{
    return type == MC_F16 || type == MC_BF16 || type == MC_F32;
}

int mc_layer_norm(const mc_norm_job *job, int64_t rows)
{
    return mc_layer_norm_then(job, rows, NULL, NULL);
}

int mc_layer_norm_then(const mc_norm_job *job, int64_t rows, mc_norm_after_fn after, void *ctx)
{
    if (job == NULL || rows < 0 || job->n < 0)
        return MC_NORM_EARG;
    if (!mc_norm_type_ok_(job->x_type) || !mc_norm_type_ok_(job->y_type) ||
        (job->res != NULL && !mc_norm_type_ok_(job->res_type)))
        return MC_NORM_EARG;
    if (rows == 0 || job->n == 0)
        return MC_NORM_OK;
    if (job->x == NULL || job->y == NULL)
        return MC_NORM_EARG;
    mc_norm_run_ run = {.fn = mc_kernels(mc_rt_level())->norm.layer_norm, .job = job,
                        .rows = rows, .unit = 0, .after = after, .ctx = ctx};
    const int nt = mc_rt_threads_for(mc_work_mul(rows, job->n), MC_NORM_PARALLEL_MIN);
    run.unit = (rows + MC_NORM_UNITS_PER_THREAD_ * (int64_t)nt - 1) /
               (MC_NORM_UNITS_PER_THREAD_ * (int64_t)nt);
    if (run.unit < 1)
        run.unit = 1;
    mc_run(mc_norm_unit_, &run, (rows + run.unit - 1) / run.unit, nt);
    return MC_NORM_OK;
}
