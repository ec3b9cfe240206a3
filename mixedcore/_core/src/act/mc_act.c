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
#include "mc_checked.h"
#include "mc_kernels.h"
#include "mc_runtime.h"
#include "mc_types.h"

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
    int mode;
} mc_softmax_job_;

static void mc_softmax_unit_(void *ctx, int64_t u)
{
    const mc_softmax_job_ *job = (const mc_softmax_job_ *)ctx;
    const int64_t r0 = u * job->unit;
    const int64_t cnt = job->rows - r0 < job->unit ? job->rows - r0 : job->unit;
    job->fn(job->x + r0 * job->n, job->y + r0 * job->n, cnt, job->n, job->mode);
}

int mc_softmax(const float *x, float *y, int64_t rows, int64_t n, int mode)
{
    if (rows < 0 || n < 0 || (rows > 0 && n > 0 && (x == NULL || y == NULL)))
        return MC_ACT_EARG;
    if (mode != MC_SOFTMAX_EXP && mode != MC_SOFTMAX_LOG && mode != MC_SOFTMAX_16)
        return MC_ACT_EARG;
    if (rows == 0 || n == 0)
        return MC_ACT_OK;
    mc_softmax_job_ job = {.fn = mc_kernels(mc_rt_level())->act.softmax, .x = x, .y = y,
                           .rows = rows, .n = n, .unit = 0, .mode = mode};
    const int nt = mc_rt_threads_for(mc_work_mul(rows, n), MC_ACT_PARALLEL_MIN);
    job.unit = mc_act_ceil_div_(rows, MC_ACT_UNITS_PER_THREAD_ * (int64_t)nt);
    if (job.unit < 1)
        job.unit = 1;
    mc_run(mc_softmax_unit_, &job, mc_act_ceil_div_(rows, job.unit), nt);
    return MC_ACT_OK;
}

/* --- the sum with an activation (mc_act.h, design f) --------------------------------------------- */

#define MC_ADD_BLOCK_ 1024

typedef struct {
    const mc_level_kernels *lk;
    int act, a_type, b_type, y_type;
    const char *a, *b;
    char *y;
    int64_t n, unit;
} mc_add_job_;

static int mc_add_es_(int type) { return type == MC_F32 ? 4 : 2; }

/* n (<= MC_ADD_BLOCK_) elements of type `type` at src as float32 in buf (or src itself) */
static const float *mc_add_widen_(const mc_level_kernels *lk, int type, const char *src,
                                  float *buf, int64_t n)
{
    if (type == MC_F32)
        return (const float *)src;
    lk->convert.cast[type][MC_F32](src, buf, n);
    return buf;
}

static void mc_add_unit_(void *ctx, int64_t u)
{
    const mc_add_job_ *job = (const mc_add_job_ *)ctx;
    const mc_level_kernels *lk = job->lk;
    const int ea = mc_add_es_(job->a_type), eb = mc_add_es_(job->b_type);
    const int ey = mc_add_es_(job->y_type);
    float ba[MC_ADD_BLOCK_], bb[MC_ADD_BLOCK_], sum[MC_ADD_BLOCK_];
    const int64_t end = (u + 1) * job->unit < job->n ? (u + 1) * job->unit : job->n;
    for (int64_t i0 = u * job->unit; i0 < end; i0 += MC_ADD_BLOCK_) {
        const int64_t cnt = end - i0 < MC_ADD_BLOCK_ ? end - i0 : MC_ADD_BLOCK_;
        const float *pa = mc_add_widen_(lk, job->a_type, job->a + i0 * ea, ba, cnt);
        const float *pb = mc_add_widen_(lk, job->b_type, job->b + i0 * eb, bb, cnt);
        float *ps = job->y_type == MC_F32 ? (float *)(job->y + i0 * ey) : sum;
        for (int64_t i = 0; i < cnt; ++i)
            ps[i] = pa[i] + pb[i];
        if (job->act != MC_ACT_NONE)
            lk->act.forward(job->act, ps, ps, cnt);
        if (job->y_type != MC_F32)
            lk->convert.cast[MC_F32][job->y_type](ps, job->y + i0 * ey, cnt);
    }
}

int mc_add_act(int act, const char *a, int a_type, const char *b, int b_type, char *y,
               int y_type, int64_t n)
{
    const int ok_type = (a_type == MC_F16 || a_type == MC_BF16 || a_type == MC_F32) &&
                        (b_type == MC_F16 || b_type == MC_BF16 || b_type == MC_F32) &&
                        (y_type == MC_F16 || y_type == MC_BF16 || y_type == MC_F32);
    if (n < 0 || !ok_type || (n > 0 && (a == NULL || b == NULL || y == NULL)))
        return MC_ACT_EARG;
    if (n == 0)
        return MC_ACT_OK;
    mc_add_job_ job = {.lk = mc_kernels(mc_rt_level()), .act = mc_act_for_output(act, y_type),
                       .a_type = a_type,
                       .b_type = b_type, .y_type = y_type, .a = a, .b = b, .y = y, .n = n,
                       .unit = 0};
    const int nt = mc_rt_threads_for(n, MC_ACT_PARALLEL_MIN);
    int64_t unit = mc_act_ceil_div_(n, MC_ACT_UNITS_PER_THREAD_ * (int64_t)nt);
    if (unit < MC_ACT_UNIT_MIN)
        unit = MC_ACT_UNIT_MIN;
    job.unit = (unit + MC_ADD_BLOCK_ - 1) / MC_ADD_BLOCK_ * MC_ADD_BLOCK_;
    mc_run(mc_add_unit_, &job, mc_act_ceil_div_(n, job.unit), nt);
    return MC_ACT_OK;
}
