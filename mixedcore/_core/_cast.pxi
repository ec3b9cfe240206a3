# Conversion driver.
#
# Design:
#   a. Dimensions of length 1 are dropped, the rest ordered by decreasing destination stride, and
#      neighbours that are contiguous in both arrays merged, so most inputs (C- or Fortran-ordered,
#      transposed, reversed) become one contiguous run handled by the vector kernel.
#   b. The innermost dimension is the unit of work: the vector kernel when both sides are
#      contiguous along it, the scalar reference loop otherwise.  Outer positions are split
#      across threads; a single contiguous run is split into equal chunks instead.
#   c. Index arithmetic is 64-bit throughout.

cdef extern from "mc_convert.h" nogil:
    ctypedef void (*mc_cast_fn)(const void *src, void *dst, int64_t n)
    mc_cast_fn mc_cast_kernel(int level, int src_type, int dst_type)
    void mc_cast_strided(int src_type, int dst_type, const char *src, int64_t src_stride,
                         char *dst, int64_t dst_stride, int64_t n)
    int mc_dtype_size(int type)

cdef enum:
    MAXDIMS = 64
# elements below which a conversion stays on one thread
cdef int64_t CAST_PARALLEL_MIN = 1 << 16


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


cdef void _cast_rows(int src_type, int dst_type, mc_cast_fn fn, bint contiguous,
                     char *src, char *dst, int nd, const int64_t *shape, const int64_t *ss,
                     const int64_t *ds, int64_t row_begin, int64_t row_end) noexcept nogil:
    """Convert rows [row_begin, row_end) of the outer dimensions (all but the last)."""
    cdef int64_t row, rem, idx, soff, doff
    cdef int j
    cdef int64_t inner = shape[nd - 1]
    for row in range(row_begin, row_end):
        rem = row
        soff = 0
        doff = 0
        for j in range(nd - 2, -1, -1):
            idx = rem % shape[j]
            rem = rem // shape[j]
            soff += idx * ss[j]
            doff += idx * ds[j]
        if contiguous:
            fn(src + soff, dst + doff, inner)
        else:
            mc_cast_strided(src_type, dst_type, src + soff, ss[nd - 1], dst + doff, ds[nd - 1], inner)


def cast_into(cnp.ndarray src, cnp.ndarray dst, int src_type, int dst_type):
    """Convert ``src`` into ``dst`` (same shape, validated by the caller)."""
    cdef int64_t shape[MAXDIMS]
    cdef int64_t ss[MAXDIMS]
    cdef int64_t ds[MAXDIMS]
    cdef int nd = _coalesce(cnp.PyArray_NDIM(src), cnp.PyArray_DIMS(src), cnp.PyArray_STRIDES(src),
                            cnp.PyArray_STRIDES(dst), shape, ss, ds)
    cdef char *s = <char *>cnp.PyArray_DATA(src)
    cdef char *d = <char *>cnp.PyArray_DATA(dst)
    cdef int64_t total = cnp.PyArray_SIZE(src)
    cdef mc_cast_fn fn = mc_cast_kernel(_level, src_type, dst_type)
    cdef int ssize = mc_dtype_size(src_type), dsize = mc_dtype_size(dst_type)
    cdef mc_fpflags_t flags
    cdef int nthreads, t
    cdef int64_t rows, chunk, begin, end, j
    cdef bint contiguous
    if total == 0:
        return
    if nd == 0:
        shape[0] = 1
        ss[0] = ssize
        ds[0] = dsize
        nd = 1
    contiguous = ss[nd - 1] == ssize and ds[nd - 1] == dsize
    rows = 1
    for j in range(nd - 1):
        rows *= shape[j]
    nthreads = _threads_for(total, CAST_PARALLEL_MIN)
    with nogil:
        mc_fpflags_save(&flags)
        if nthreads == 1:
            _cast_rows(src_type, dst_type, fn, contiguous, s, d, nd, shape, ss, ds, 0, rows)
        elif rows >= nthreads:
            chunk = (rows + nthreads - 1) // nthreads
            for t in prange(nthreads, num_threads=nthreads, schedule="static"):
                begin = t * chunk
                end = min(begin + chunk, rows)
                if begin < end:
                    _cast_rows(src_type, dst_type, fn, contiguous, s, d, nd, shape, ss, ds,
                               begin, end)
        else:
            # few long rows: split each row into chunks of a cache line's worth of elements
            chunk = ((shape[nd - 1] + nthreads - 1) // nthreads + 63) & ~(<int64_t>63)
            for j in range(rows):
                _split_row(src_type, dst_type, fn, contiguous, s, d, nd, shape, ss, ds, j,
                           chunk, nthreads)
        mc_fpflags_restore(&flags)


cdef void _split_row(int src_type, int dst_type, mc_cast_fn fn, bint contiguous, char *s,
                     char *d, int nd, const int64_t *shape, const int64_t *ss, const int64_t *ds,
                     int64_t row, int64_t chunk, int nthreads) noexcept nogil:
    cdef int64_t rem = row, idx, soff = 0, doff = 0, begin, end
    cdef int j, t
    cdef int64_t inner = shape[nd - 1]
    for j in range(nd - 2, -1, -1):
        idx = rem % shape[j]
        rem = rem // shape[j]
        soff += idx * ss[j]
        doff += idx * ds[j]
    for t in prange(nthreads, num_threads=nthreads, schedule="static"):
        begin = t * chunk
        end = min(begin + chunk, inner)
        if begin < end:
            if contiguous:
                fn(s + soff + begin * ss[nd - 1], d + doff + begin * ds[nd - 1], end - begin)
            else:
                mc_cast_strided(src_type, dst_type, s + soff + begin * ss[nd - 1], ss[nd - 1],
                                d + doff + begin * ds[nd - 1], ds[nd - 1], end - begin)
