/* Driver of the fused attention; see mc_attn.h. */
#include <stddef.h>
#include "mc_attn.h"
#include "mc_convert_scalar.h"
#include "mc_kernels.h"
#include "mc_runtime.h"

/* multiply-adds below which an attention call stays on one thread */
#define MC_ATTN_PARALLEL_MIN ((int64_t)1 << 16)

typedef struct {
    const mc_attn_args *args;
    mc_attn_unit_fn fn;
    int64_t work_bytes;
    int nomem;
} mc_attn_job_;

static void mc_attn_unit_(void *ctx, int64_t u)
{
    mc_attn_job_ *job = (mc_attn_job_ *)ctx;
    void *work = mc_workspace(MC_WS_WORK, job->work_bytes);
    if (work == NULL) {
        mc_flag_set(&job->nomem);
        return;
    }
    job->fn(job->args, u, work);
}

static int mc_attn_type_ok_(int type)
{
    return type == MC_F16 || type == MC_BF16 || type == MC_F32;
}

int mc_attention(const mc_attn_args *a)
{
    if (a == NULL || a->b < 0 || a->h < 0 || a->t < 0 || a->s < 0 || a->d < 0 || a->dv < 0)
        return MC_ATTN_EARG;
    if (!mc_attn_type_ok_(a->type) || !mc_attn_type_ok_(a->out_type))
        return MC_ATTN_EARG;
    const int64_t units = mc_size_mul(a->b, a->h);
    if (units < 0)
        return MC_ATTN_TOOBIG;
    if (units == 0 || a->t == 0 || a->dv == 0)      /* an empty output: nothing to compute */
        return MC_ATTN_OK;
    if (a->q == NULL || a->k == NULL || a->v == NULL || a->out == NULL)
        return MC_ATTN_EARG;
    mc_attn_job_ job = {.args = a, .fn = mc_kernels(mc_rt_level())->attn.unit,
                        .work_bytes = mc_attn_work_bytes(a), .nomem = 0};
    if (job.work_bytes < 0)
        return MC_ATTN_TOOBIG;
    int nt = mc_rt_threads_for(mc_work_mul(mc_work_mul(units, a->t),
                                           mc_work_mul(a->s, a->d + a->dv)),
                               MC_ATTN_PARALLEL_MIN);
    if (nt > units)
        nt = (int)units;
    mc_run(mc_attn_unit_, &job, units, nt);
    return mc_flag_get(&job.nomem) ? MC_ATTN_NOMEM : MC_ATTN_OK;
}
