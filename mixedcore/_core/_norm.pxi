# Layer-normalization driver: each row of n elements normalized over itself (mc_norm.h).
#
# Design:
#   a. The caller (mixedcore.kernels._norm) has validated everything: x (and the residual) are
#      C-contiguous rows of n elements of float16, bfloat16 or float32, native and aligned; gamma
#      and beta float32 of n elements or None; y a C-contiguous array of rows of n elements,
#      separate from the inputs; mean and rstd float32 arrays of one element per row, or None.
#   b. Units of consecutive rows, taken dynamically by the team; each row depends on its own
#      inputs only, so the results do not depend on the split or the thread count.
#   c. The GIL is released; mc_run gives the kernels the default floating-point environment and
#      the caller its own back.

cdef extern from "mc_norm.h" nogil:
    ctypedef struct mc_norm_job:
        const void *x
        const void *res
        const float *gamma
        const float *beta
        void *y
        float *mean
        float *rstd
        int64_t n
        double eps
        int x_type
        int res_type
        int y_type
    ctypedef void (*mc_layer_norm_fn)(const mc_norm_job *job, int64_t r0,
                                      int64_t r1) noexcept nogil

cdef extern from "mc_kernels.h" nogil:
    mc_layer_norm_fn mc_layer_norm_kernel(int level)

# elements below which a normalization stays on one thread
cdef int64_t NORM_PARALLEL_MIN = 1 << 15

ctypedef struct _norm_run:
    mc_layer_norm_fn fn
    mc_norm_job job
    int64_t rows
    int64_t unit


cdef void _norm_unit(void *ctx, int64_t u) noexcept nogil:
    cdef _norm_run *run = <_norm_run *>ctx
    cdef int64_t r0 = u * run.unit
    run.fn(&run.job, r0, min(r0 + run.unit, run.rows))


cdef inline void *_opt_data(object a):
    if a is None:
        return NULL
    return cnp.PyArray_DATA(<cnp.ndarray>a)


def layer_norm(cnp.ndarray x, int x_type, object res, int res_type, object gamma, object beta,
               cnp.ndarray y, int y_type, object mean, object rstd, int64_t rows, int64_t n,
               double eps):
    """LN of ``rows`` contiguous rows of ``n`` elements (validated; see mc_norm.h)."""
    cdef _norm_run run
    cdef int nthreads
    run.fn = mc_layer_norm_kernel(mc_rt_level())
    run.job.x = cnp.PyArray_DATA(x)
    run.job.res = _opt_data(res)
    run.job.gamma = <const float *>_opt_data(gamma)
    run.job.beta = <const float *>_opt_data(beta)
    run.job.y = cnp.PyArray_DATA(y)
    run.job.mean = <float *>_opt_data(mean)
    run.job.rstd = <float *>_opt_data(rstd)
    run.job.n = n
    run.job.eps = eps
    run.job.x_type = x_type
    run.job.res_type = res_type
    run.job.y_type = y_type
    run.rows = rows
    if rows == 0 or n == 0:
        return
    with nogil:
        nthreads = mc_rt_threads_for(rows * n, NORM_PARALLEL_MIN)
        run.unit = max(1, (rows + 8 * nthreads - 1) // (8 * nthreads))
        mc_run(_norm_unit, &run, (rows + run.unit - 1) // run.unit, nthreads)
