/* The conversion driver: mc_cast() converts an array of any shape and strides.
 *
 * Design:
 *   a. Dimensions of length 1 are dropped, the rest ordered by decreasing destination stride, and
 *      neighbours that are contiguous in both arrays merged, so most inputs (C- or Fortran-ordered,
 *      transposed, reversed) become one contiguous run handled by the vector kernel.
 *   b. The innermost dimension is the unit of the kernels: the level's kernel (mc_kernels.h) when
 *      both sides are contiguous along it, the strided reference loop otherwise.
 *   c. The work is cut into units of consecutive elements (in the coalesced order) that the
 *      team takes dynamically (mc_run), about MC_CAST_UNITS_PER_THREAD per thread and at least
 *      MC_CAST_UNIT_MIN elements each; a unit may start or end inside a row.  Below
 *      MC_CAST_PARALLEL_MIN elements the call stays on its caller.
 *   d. The level and the thread count are read once, when the call starts.
 *   e. Index arithmetic is 64-bit throughout.
 */
#include "mc_checked.h"
#include "mc_convert.h"

#include "mc_kernels.h"
#include "mc_runtime.h"

/* elements below which a conversion stays on one thread */
#define MC_CAST_PARALLEL_MIN ((int64_t)1 << 16)
#define MC_CAST_UNIT_MIN ((int64_t)1 << 15)
#define MC_CAST_UNITS_PER_THREAD 16

int mc_dtype_size(int type)
{
    return type == MC_F64 ? 8 : type == MC_F32 ? 4 : type < MC_NDTYPES ? 2 : 1;
}

static inline int64_t mc_abs64_(int64_t v) { return v < 0 ? -v : v; }

/* Design a.  Orders by |destination stride| descending, then |source stride| descending
 * (stable for equal keys: an elementwise conversion may visit elements in any order, so a
 * transposed or Fortran-ordered pair iterates like a C-ordered one), then merges neighbours
 * contiguous in both arrays.  Returns the new number of dimensions (0 for a single element). */
static int mc_coalesce_(int nd, const int64_t *shape, const int64_t *ss, const int64_t *ds,
                        int64_t *oshape, int64_t *oss, int64_t *ods)
{
    int order[MC_CAST_MAXDIMS];
    int n = 0, k = 0;
    for (int i = 0; i < nd; ++i) {
        if (shape[i] == 1)
            continue;
        int j = n;
        while (j > 0 && (mc_abs64_(ds[order[j - 1]]) < mc_abs64_(ds[i]) ||
                         (mc_abs64_(ds[order[j - 1]]) == mc_abs64_(ds[i]) &&
                          mc_abs64_(ss[order[j - 1]]) < mc_abs64_(ss[i])))) {
            order[j] = order[j - 1];
            --j;
        }
        order[j] = i;
        ++n;
    }
    for (int j = 0; j < n; ++j) {
        const int i = order[j];
        if (k > 0 && oss[k - 1] == ss[i] * shape[i] && ods[k - 1] == ds[i] * shape[i]) {
            oshape[k - 1] *= shape[i];
            oss[k - 1] = ss[i];
            ods[k - 1] = ds[i];
        } else {
            oshape[k] = shape[i];
            oss[k] = ss[i];
            ods[k] = ds[i];
            ++k;
        }
    }
    return k;
}

typedef struct {
    int src_type, dst_type, saturate;
    mc_cast_fn fn;
    int contiguous;
    const char *s;
    char *d;
    int nd;
    const int64_t *shape, *ss, *ds;
    int64_t total, unit;
} mc_cast_job_;

/* Elements [u * unit, (u + 1) * unit) in the coalesced order (design c). */
static void mc_cast_unit_(void *ctx, int64_t u)
{
    const mc_cast_job_ *job = (const mc_cast_job_ *)ctx;
    const int nd = job->nd;
    const int64_t inner = job->shape[nd - 1];
    int64_t e = u * job->unit;
    const int64_t e1 = e + job->unit < job->total ? e + job->unit : job->total;
    int64_t row = e / inner, col = e - row * inner;
    while (e < e1) {
        int64_t rem = row;
        int64_t soff = col * job->ss[nd - 1];
        int64_t doff = col * job->ds[nd - 1];
        for (int j = nd - 2; j >= 0; --j) {
            const int64_t idx = rem % job->shape[j];
            rem /= job->shape[j];
            soff += idx * job->ss[j];
            doff += idx * job->ds[j];
        }
        const int64_t cnt = inner - col < e1 - e ? inner - col : e1 - e;
        if (job->contiguous)
            job->fn(job->s + soff, job->d + doff, cnt);
        else
            mc_cast_strided(job->src_type, job->dst_type, job->saturate, job->s + soff,
                            job->ss[nd - 1],
                            job->d + doff, job->ds[nd - 1], cnt);
        e += cnt;
        ++row;
        col = 0;
    }
}

int mc_cast(const char *src, int src_type, const int64_t *src_strides, char *dst, int dst_type,
            const int64_t *dst_strides, int nd, const int64_t *shape, int saturate)
{
    int64_t cshape[MC_CAST_MAXDIMS], css[MC_CAST_MAXDIMS], cds[MC_CAST_MAXDIMS];
    if (src_type < 0 || src_type >= MC_NCASTTYPES || dst_type < 0 || dst_type >= MC_NCASTTYPES ||
        nd < 0 || nd > MC_CAST_MAXDIMS || (saturate != 0 && saturate != 1) ||
        (saturate && dst_type < MC_E4M3))
        return MC_CAST_EINVAL;
    int64_t total = 1;
    for (int i = 0; i < nd; ++i) {
        if (shape[i] < 0)
            return MC_CAST_EINVAL;
        total = shape[i] == 0 || total == 0 ? 0 : mc_size_mul(total, shape[i]);
    }
    if (total == 0)
        return MC_CAST_OK;
    if (total < 0)                           /* more elements than int64 counts */
        return MC_CAST_EINVAL;
    int cnd = mc_coalesce_(nd, shape, src_strides, dst_strides, cshape, css, cds);
    if (cnd == 0) {
        cshape[0] = 1;
        css[0] = mc_dtype_size(src_type);
        cds[0] = mc_dtype_size(dst_type);
        cnd = 1;
    }
    mc_cast_job_ job;
    job.src_type = src_type;
    job.dst_type = dst_type;
    job.saturate = saturate;
    const mc_convert_table *t = &mc_kernels(mc_rt_level())->convert;
    job.fn = saturate ? t->cast_sat[src_type][dst_type - MC_E4M3] : t->cast[src_type][dst_type];
    job.contiguous = css[cnd - 1] == mc_dtype_size(src_type) &&
                     cds[cnd - 1] == mc_dtype_size(dst_type);
    job.s = src;
    job.d = dst;
    job.nd = cnd;
    job.shape = cshape;
    job.ss = css;
    job.ds = cds;
    job.total = total;
    const int nthreads = mc_rt_threads_for(total, MC_CAST_PARALLEL_MIN);
    /* a multiple of 64 elements, so units of a contiguous run start on cache-line multiples */
    const int64_t per = (int64_t)MC_CAST_UNITS_PER_THREAD * nthreads;
    int64_t unit = (total + per - 1) / per;
    if (unit < MC_CAST_UNIT_MIN)
        unit = MC_CAST_UNIT_MIN;
    job.unit = (unit + 63) & ~(int64_t)63;
    mc_run(mc_cast_unit_, &job, (total + job.unit - 1) / job.unit, nthreads);
    return MC_CAST_OK;
}
