# Conversion driver.
#
# Design:
#   a. Dimensions of length 1 are dropped, the rest ordered by decreasing destination stride, and
#      neighbours that are contiguous in both arrays merged, so most inputs (C- or Fortran-ordered,
#      transposed, reversed) become one contiguous run handled by the vector kernel.
#   b. The innermost dimension is the unit of the kernels: the vector kernel when both sides are
#      contiguous along it, the scalar reference loop otherwise.
#   c. The work is cut into units of consecutive elements (in the coalesced order) that the
#      team takes dynamically, about CAST_UNITS_PER_THREAD per thread and at least
#      CAST_UNIT_MIN elements each; a unit may start or end inside a row.
#   d. Index arithmetic is 64-bit throughout.

cdef extern from "mc_convert.h" nogil:
    ctypedef void (*mc_cast_fn)(const void *src, void *dst, int64_t n) noexcept nogil
    void mc_cast_strided(int src_type, int dst_type, const char *src, int64_t src_stride,
                         char *dst, int64_t dst_stride, int64_t n)
    int mc_dtype_size(int type)

cdef extern from "mc_kernels.h" nogil:
    mc_cast_fn mc_cast_kernel(int level, int src_type, int dst_type)

cdef enum:
    MAXDIMS = 64
# elements below which a conversion stays on one thread
cdef int64_t CAST_PARALLEL_MIN = 1 << 16
cdef int64_t CAST_UNIT_MIN = 1 << 15
cdef int64_t CAST_UNITS_PER_THREAD = 16


cdef inline int64_t _abs64(int64_t v) noexcept nogil:
    return -v if v < 0 else v


cdef int _coalesce(int nd, const cnp.npy_intp *shape, const cnp.npy_intp *ss,
                   const cnp.npy_intp *ds, int64_t *oshape, int64_t *oss, int64_t *ods) noexcept:
    """Drop length-1 dimensions, order the rest by decreasing destination stride (an
    elementwise conversion may visit elements in any order, so a transposed or Fortran-ordered
    pair iterates like a C-ordered one), then merge neighbours contiguous in both arrays.
    Returns the new number of dimensions (0 for a single element)."""
    cdef int order[MAXDIMS]
    cdef int i, j, k = 0, n = 0, key
    for i in range(nd):
        if shape[i] == 1:
            continue
        # insertion sort by |ds| descending, then |ss| descending; stable for equal keys
        j = n
        while j > 0 and (_abs64(ds[order[j - 1]]) < _abs64(ds[i]) or
                         (_abs64(ds[order[j - 1]]) == _abs64(ds[i]) and
                          _abs64(ss[order[j - 1]]) < _abs64(ss[i]))):
            order[j] = order[j - 1]
            j -= 1
        order[j] = i
        n += 1
    for j in range(n):
        i = order[j]
        if k > 0 and oss[k - 1] == ss[i] * shape[i] and ods[k - 1] == ds[i] * shape[i]:
            oshape[k - 1] *= shape[i]
            oss[k - 1] = ss[i]
            ods[k - 1] = ds[i]
        else:
            oshape[k] = shape[i]
            oss[k] = ss[i]
            ods[k] = ds[i]
            k += 1
    return k


ctypedef struct _cast_job:
    int src_type
    int dst_type
    mc_cast_fn fn
    bint contiguous
    char *s
    char *d
    int nd
    const int64_t *shape
    const int64_t *ss
    const int64_t *ds
    int64_t total
    int64_t unit


cdef void _cast_unit(void *ctx, int64_t u) noexcept nogil:
    """Elements [u * unit, (u + 1) * unit) in the coalesced order (design c)."""
    cdef _cast_job *job = <_cast_job *>ctx
    cdef int nd = job.nd, j
    cdef int64_t inner = job.shape[nd - 1]
    cdef int64_t e = u * job.unit
    cdef int64_t e1 = min(e + job.unit, job.total)
    cdef int64_t row = e // inner, col = e - row * inner, rem, idx, soff, doff, cnt
    while e < e1:
        rem = row
        soff = col * job.ss[nd - 1]
        doff = col * job.ds[nd - 1]
        for j in range(nd - 2, -1, -1):
            idx = rem % job.shape[j]
            rem = rem // job.shape[j]
            soff += idx * job.ss[j]
            doff += idx * job.ds[j]
        cnt = min(inner - col, e1 - e)
        if job.contiguous:
            job.fn(job.s + soff, job.d + doff, cnt)
        else:
            mc_cast_strided(job.src_type, job.dst_type, job.s + soff, job.ss[nd - 1],
                            job.d + doff, job.ds[nd - 1], cnt)
        e += cnt
        row += 1
        col = 0


def cast_into(cnp.ndarray src, cnp.ndarray dst, int src_type, int dst_type):
    """Convert ``src`` into ``dst`` (same shape, validated by the caller)."""
    cdef int64_t shape[MAXDIMS]
    cdef int64_t ss[MAXDIMS]
    cdef int64_t ds[MAXDIMS]
    cdef int nd = _coalesce(cnp.PyArray_NDIM(src), cnp.PyArray_DIMS(src), cnp.PyArray_STRIDES(src),
                            cnp.PyArray_STRIDES(dst), shape, ss, ds)
    cdef _cast_job job
    cdef int nthreads
    job.total = cnp.PyArray_SIZE(src)
    if job.total == 0:
        return
    if nd == 0:
        shape[0] = 1
        ss[0] = mc_dtype_size(src_type)
        ds[0] = mc_dtype_size(dst_type)
        nd = 1
    job.src_type = src_type
    job.dst_type = dst_type
    job.fn = mc_cast_kernel(mc_rt_level(), src_type, dst_type)
    job.contiguous = ss[nd - 1] == mc_dtype_size(src_type) and ds[nd - 1] == mc_dtype_size(dst_type)
    job.s = <char *>cnp.PyArray_DATA(src)
    job.d = <char *>cnp.PyArray_DATA(dst)
    job.nd = nd
    job.shape = shape
    job.ss = ss
    job.ds = ds
    nthreads = mc_rt_threads_for(job.total, CAST_PARALLEL_MIN)
    # a multiple of 64 elements, so units of a contiguous run start on cache-line multiples
    job.unit = max(CAST_UNIT_MIN, (job.total + CAST_UNITS_PER_THREAD * nthreads - 1)
                   // (CAST_UNITS_PER_THREAD * nthreads))
    job.unit = (job.unit + 63) & ~(<int64_t>63)
    with nogil:
        mc_run(_cast_unit, &job, (job.total + job.unit - 1) // job.unit, nthreads)
