# Layer-normalization entry point: each row of n elements normalized over itself (mc_norm.h).
#
# Design:
#   a. The caller (mixedcore.kernels._norm) has validated everything: x (and the residual) are
#      C-contiguous rows of n elements of float16, bfloat16 or float32, native and aligned; gamma
#      and beta float32 of n elements or None; y a C-contiguous array of rows of n elements,
#      separate from the inputs; mean and rstd float32 arrays of one element per row, or None.
#   b. The plan (level, threads, bands of rows) is made in C (src/norm/mc_norm.c); this module fills
#      the job descriptor and releases the GIL.

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
    int MC_NORM_OK
    int mc_layer_norm(const mc_norm_job *job, int64_t rows)


cdef inline void *_opt_data(object a):
    if a is None:
        return NULL
    return cnp.PyArray_DATA(<cnp.ndarray>a)


def layer_norm(cnp.ndarray x, int x_type, object res, int res_type, object gamma, object beta,
               cnp.ndarray y, int y_type, object mean, object rstd, int64_t rows, int64_t n,
               double eps):
    """LN of ``rows`` contiguous rows of ``n`` elements (validated; see mc_norm.h)."""
    cdef mc_norm_job job
    cdef int r
    job.x = cnp.PyArray_DATA(x)
    job.res = _opt_data(res)
    job.gamma = <const float *>_opt_data(gamma)
    job.beta = <const float *>_opt_data(beta)
    job.y = cnp.PyArray_DATA(y)
    job.mean = <float *>_opt_data(mean)
    job.rstd = <float *>_opt_data(rstd)
    job.n = n
    job.eps = eps
    job.x_type = x_type
    job.res_type = res_type
    job.y_type = y_type
    with nogil:
        r = mc_layer_norm(&job, rows)
    if r != MC_NORM_OK:
        raise ValueError(f"layer_norm: invalid arguments for the C driver (status {r})")
