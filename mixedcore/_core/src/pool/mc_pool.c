/* Pooling drivers (the generic level's kernels are in mc_pool_generic.c); see mc_pool.h for
 * the design.
 *
 * Design (of this file):
 *   a. The drivers walk output pixels in bands of rows (the forward pass) or whole images (the
 *      gradient); for each pixel they list the valid taps (padding is skipped, so an average
 *      counts only real pixels, as Keras's "same" average does; mc_conv_geom.h), call the
 *      level's kernel, and divide a sum by the number of taps and round it to the output type
 *      (the level's conversion kernel).
 *   b. The plan (level, kernels, bands, threads) is made once per call, as in every driver.
 *   c. A tap list holds the taps of one window that fall in the image, at most
 *      min(KH, H) x min(KW, W) (mc_conv_tap_max_): a window larger than the image, or a padded
 *      geometry whose window count overflows, never sizes a buffer (mc_checked.h).
 */
#include <string.h>
#include "mc_checked.h"
#include "mc_conv_geom.h"
#include "mc_kernels.h"
#include "mc_pool.h"
#include "mc_pool_scalar.h"
#include "mc_runtime.h"

/* element-taps below which pooling stays on the calling thread */
#define MC_POOL_SMALL_MIN ((int64_t)1 << 16)

static int64_t mc_min_(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t mc_max_(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t mc_ceil_div_(int64_t a, int64_t b) { return (a + b - 1) / b; }

typedef struct {
    const mc_pool_call *call;
    mc_pool_fn pool;
    mc_cast_fn cast;             /* float32 -> the output type (averages), or NULL */
    const char *dy;
    char *dx;
    int64_t rows, nrows;
    int64_t tmax, tbytes;        /* taps of a tap list, bytes of the two lists */
    int status;
} mc_pjob_;

static void mc_pool_unit_(void *ctx, int64_t u)
{
    mc_pjob_ *job = (mc_pjob_ *)ctx;
    const mc_pool_call *call = job->call;
    const mc_conv_geom *g = &call->geo;
    const int f64 = call->x_type == MC_F64;
    const int64_t es = mc_conv_es_(call->x_type);
    /* the tap lists and a pixel's sums (sizes checked by mc_pool) */
    char *work = (char *)mc_workspace(MC_WS_WORK, job->tbytes + g->c * 8 + 64);
    if (work == NULL) {
        __atomic_store_n(&job->status, -1, __ATOMIC_RELAXED);
        return;
    }
    int64_t *xoff = (int64_t *)work, *tap = xoff + job->tmax;
    char *acc = work + job->tbytes;
    for (int64_t row = u * job->rows; row < mc_min_((u + 1) * job->rows, job->nrows); ++row) {
        const int64_t n = row / g->oh, oh = row - n * g->oh;
        const char *img = call->x + n * g->h * g->w * g->c * es;
        char *out = call->out + row * g->ow * g->c * es;
        for (int64_t ow = 0; ow < g->ow; ++ow, out += g->c * es) {
            const int nt = mc_conv_taps_(g, oh, ow, es, xoff, tap);
            if (nt == 0) {
                memset(out, 0, (size_t)(g->c * es));
                continue;
            }
            if (call->op == MC_POOL_MAX) {
                job->pool(img, call->x_type, xoff, nt, g->c, MC_POOL_MAX, out);
                continue;
            }
            job->pool(img, call->x_type, xoff, nt, g->c, MC_POOL_SUM, acc);
            if (f64) {
                const double *a = (const double *)acc;
                double *o = (double *)out;
                for (int64_t ch = 0; ch < g->c; ++ch)
                    o[ch] = a[ch] / (double)nt;
                continue;
            }
            float *a = (float *)acc;
            const float cnt = (float)nt;
            for (int64_t ch = 0; ch < g->c; ++ch)
                a[ch] = a[ch] / cnt;
            if (job->cast != NULL)
                job->cast(a, out, g->c);
            else
                memcpy(out, a, (size_t)(g->c * 4));
        }
    }
}

/* The tap lists' size into the job (design c): the taps of a window that fall in the image, so
 * bounded by the image however large the window; MC_POOL_TOOBIG when a count is too large. */
static int mc_pool_sizes_(const mc_conv_geom *g, mc_pjob_ *job)
{
    job->tmax = mc_conv_tap_max_(g);
    job->tbytes = mc_size_round64(mc_size_bytes(job->tmax, 16));
    const int64_t total = mc_size_add(job->tbytes, mc_size_bytes(g->c, 8));
    /* the taps' indices in the window (mc_conv_taps_) must be counts too */
    if (total < 0 || total > MC_BYTES_MAX - 64 || mc_size_mul(g->kh, g->kw) < 0)
        return MC_POOL_TOOBIG;
    return MC_POOL_OK;
}

int mc_pool(const mc_pool_call *call)
{
    const mc_conv_geom *g = &call->geo;
    if (g->n == 0 || g->oh == 0 || g->ow == 0 || g->c == 0)
        return MC_POOL_OK;
    mc_pjob_ job;
    memset(&job, 0, sizeof job);
    if (mc_pool_sizes_(g, &job) != MC_POOL_OK)
        return MC_POOL_TOOBIG;
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    const mc_level_kernels *lk = mc_kernels(mc_rt_level());
    job.call = call;
    job.pool = lk->pool.reduce;
    job.cast = call->x_type == MC_F16 || call->x_type == MC_BF16
                   ? lk->convert.cast[MC_F32][call->x_type] : NULL;
    job.nrows = g->n * g->oh;
    const int nt = mc_rt_threads_for(mc_work_mul(mc_work_mul(job.nrows, g->ow),
                                                 mc_work_mul(g->c, job.tmax)), MC_POOL_SMALL_MIN);
    job.rows = mc_max_(mc_ceil_div_(job.nrows, 8 * nt), 1);
    mc_run(mc_pool_unit_, &job, mc_ceil_div_(job.nrows, job.rows), nt);
    mc_fpenv_leave(&saved);
    return job.status < 0 ? MC_POOL_NOMEM : MC_POOL_OK;
}

static void mc_pool_grad_unit_(void *ctx, int64_t n)
{
    mc_pjob_ *job = (mc_pjob_ *)ctx;
    const mc_pool_call *call = job->call;
    const mc_conv_geom *g = &call->geo;
    const int f64 = call->x_type == MC_F64;
    const int64_t es = mc_conv_es_(call->x_type), ges = f64 ? 8 : 4;
    int64_t *xoff = (int64_t *)mc_workspace(MC_WS_WORK, job->tbytes);
    if (xoff == NULL) {
        __atomic_store_n(&job->status, -1, __ATOMIC_RELAXED);
        return;
    }
    int64_t *tap = xoff + job->tmax;
    const char *img = call->x + n * g->h * g->w * g->c * es;
    char *dimg = job->dx + n * g->h * g->w * g->c * ges;
    const char *dy = job->dy + n * g->oh * g->ow * g->c * ges;
    for (int64_t oh = 0; oh < g->oh; ++oh)
        for (int64_t ow = 0; ow < g->ow; ++ow, dy += g->c * ges) {
            const int nt = mc_conv_taps_(g, oh, ow, es, xoff, tap);
            if (nt == 0)
                continue;
            for (int64_t ch = 0; ch < g->c; ++ch) {
                if (call->op == MC_POOL_SUM) {
                    for (int t = 0; t < nt; ++t) {
                        const int64_t at = xoff[t] / es * ges + ch * ges;
                        if (f64)
                            *(double *)(dimg + at) += ((const double *)dy)[ch] / (double)nt;
                        else
                            *(float *)(dimg + at) += ((const float *)dy)[ch] / (float)nt;
                    }
                    continue;
                }
                /* the maximum the forward pass took (mc_pool_scalar.h, design a) */
                int best = 0;
                if (f64) {
                    double m = mc_conv_load_f64_(img + xoff[0] + ch * es);
                    for (int t = 1; t < nt; ++t) {
                        const double v = mc_conv_load_f64_(img + xoff[t] + ch * es);
                        if (v > m || (v != v && m == m)) {
                            m = v;
                            best = t;
                        }
                    }
                    *(double *)(dimg + xoff[best] / es * ges + ch * ges) += ((const double *)dy)[ch];
                } else {
                    float m = mc_gemm_load_elem_(img + xoff[0] + ch * es, call->x_type);
                    for (int t = 1; t < nt; ++t) {
                        const float v = mc_gemm_load_elem_(img + xoff[t] + ch * es, call->x_type);
                        if (v > m || (v != v && m == m)) {
                            m = v;
                            best = t;
                        }
                    }
                    *(float *)(dimg + xoff[best] / es * ges + ch * ges) += ((const float *)dy)[ch];
                }
            }
        }
}

int mc_pool_grad(const mc_pool_call *call, const char *dy, char *dx)
{
    const mc_conv_geom *g = &call->geo;
    if (g->n == 0 || g->oh == 0 || g->ow == 0 || g->c == 0)
        return MC_POOL_OK;
    mc_pjob_ job;
    memset(&job, 0, sizeof job);
    if (mc_pool_sizes_(g, &job) != MC_POOL_OK)
        return MC_POOL_TOOBIG;
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    job.call = call;
    job.dy = dy;
    job.dx = dx;
    const int nt = mc_rt_threads_for(mc_work_mul(mc_work_mul(mc_work_mul(g->n, g->oh), g->ow),
                                                 mc_work_mul(g->c, job.tmax)),
                                     MC_POOL_SMALL_MIN);
    mc_run(mc_pool_grad_unit_, &job, g->n, nt);
    mc_fpenv_leave(&saved);
    return job.status < 0 ? MC_POOL_NOMEM : MC_POOL_OK;
}
