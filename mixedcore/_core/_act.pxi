# Activation driver: y = f(x) and dx = dy * f'(x) on contiguous float32 arrays.
#
# Design:
#   a. The caller (mixedcore.kernels._act) has validated everything and made the arrays
#      contiguous float32 of the same size, the output separate from the inputs (or the same
#      array); the driver treats them as flat runs of n elements.
#   b. Units of consecutive elements (multiples of 64), taken dynamically by the team; each
#      element depends on its own inputs only, so the results do not depend on the split.
#   c. The GIL is released; mc_run gives the kernels the default floating-point environment and
#      the caller its own back.

cdef extern from "mc_act.h" nogil:
    ctypedef void (*mc_act_forward_fn)(int act, const float *x, float *y, int64_t n) noexcept nogil
    ctypedef void (*mc_act_backward_fn)(int act, const float *dy, const float *x, float *dx,
                                        int64_t n) noexcept nogil
    ctypedef void (*mc_softmax_fn)(const float *x, float *y, int64_t rows, int64_t n,
                                   int log_) noexcept nogil

cdef extern from "mc_kernels.h" nogil:
    mc_act_forward_fn mc_act_forward_kernel(int level)
    mc_act_backward_fn mc_act_backward_kernel(int level)
    mc_softmax_fn mc_softmax_kernel(int level)

# elements below which an activation stays on one thread, and the smallest unit
cdef int64_t ACT_PARALLEL_MIN = 1 << 15
cdef int64_t ACT_UNIT_MIN = 1 << 13

ctypedef struct _act_job:
    int act
    mc_act_forward_fn fwd
    mc_act_backward_fn bwd
    const float *x
    const float *dy
    float *out
    int64_t n
    int64_t unit


cdef void _act_unit(void *ctx, int64_t u) noexcept nogil:
    cdef _act_job *job = <_act_job *>ctx
    cdef int64_t i0 = u * job.unit
    cdef int64_t cnt = min(job.unit, job.n - i0)
    if job.fwd != NULL:
        job.fwd(job.act, job.x + i0, job.out + i0, cnt)
    else:
        job.bwd(job.act, job.dy + i0, job.x + i0, job.out + i0, cnt)


cdef void _act_run(_act_job *job) noexcept nogil:
    cdef int nthreads = mc_rt_threads_for(job.n, ACT_PARALLEL_MIN)
    job.unit = max(ACT_UNIT_MIN, (job.n + 8 * nthreads - 1) // (8 * nthreads))
    job.unit = (job.unit + 63) & ~(<int64_t>63)
    mc_run(_act_unit, job, (job.n + job.unit - 1) // job.unit, nthreads)


def act_forward(cnp.ndarray x, cnp.ndarray y, int act):
    """y = f(x) elementwise; x and y contiguous float32 of the same size (validated)."""
    cdef _act_job job
    job.act = act
    job.fwd = mc_act_forward_kernel(mc_rt_level())
    job.bwd = NULL
    job.x = <const float *>cnp.PyArray_DATA(x)
    job.dy = NULL
    job.out = <float *>cnp.PyArray_DATA(y)
    job.n = cnp.PyArray_SIZE(x)
    if job.n == 0:
        return
    with nogil:
        _act_run(&job)


def act_backward(cnp.ndarray dy, cnp.ndarray x, cnp.ndarray dx, int act):
    """dx = dy * f'(x) elementwise; all contiguous float32 of the same size (validated)."""
    cdef _act_job job
    job.act = act
    job.fwd = NULL
    job.bwd = mc_act_backward_kernel(mc_rt_level())
    job.x = <const float *>cnp.PyArray_DATA(x)
    job.dy = <const float *>cnp.PyArray_DATA(dy)
    job.out = <float *>cnp.PyArray_DATA(dx)
    job.n = cnp.PyArray_SIZE(x)
    if job.n == 0:
        return
    with nogil:
        _act_run(&job)


ctypedef struct _softmax_job:
    mc_softmax_fn fn
    const float *x
    float *y
    int64_t rows
    int64_t n
    int64_t unit
    int log_


cdef void _softmax_unit(void *ctx, int64_t u) noexcept nogil:
    cdef _softmax_job *job = <_softmax_job *>ctx
    cdef int64_t r0 = u * job.unit
    job.fn(job.x + r0 * job.n, job.y + r0 * job.n, min(job.unit, job.rows - r0), job.n, job.log_)


def act_softmax(cnp.ndarray x, cnp.ndarray y, int64_t rows, int64_t n, bint log_):
    """Softmax (or log-softmax) of ``rows`` contiguous rows of ``n`` float32 (validated)."""
    cdef _softmax_job job
    cdef int nthreads
    job.fn = mc_softmax_kernel(mc_rt_level())
    job.x = <const float *>cnp.PyArray_DATA(x)
    job.y = <float *>cnp.PyArray_DATA(y)
    job.rows = rows
    job.n = n
    job.log_ = log_
    if rows == 0 or n == 0:
        return
    with nogil:
        nthreads = mc_rt_threads_for(rows * n, ACT_PARALLEL_MIN)
        job.unit = max(1, (rows + 8 * nthreads - 1) // (8 * nthreads))
        mc_run(_softmax_unit, &job, (rows + job.unit - 1) // job.unit, nthreads)
