# Overflow-scan driver: all_finite and unscale_and_check over many arrays in one call.
#
# Design:
#   a. One call takes every array: the driver reads each ndarray's pointer, dtype, shape and
#      strides straight from the object into a packed descriptor table (one allocation), so a
#      list of hundreds of small gradients costs one trip into compiled code.  Arrays the fast
#      path cannot take (not an ndarray, unsupported dtype, swapped byte order, unaligned) are
#      reported back by index, as is anything unscale refuses; the validation layer turns the
#      report into an error message or a copy.
#   b. Each array is normalised for a scan in any order: length-1 dimensions dropped, negative
#      strides flipped (the base moved to the lowest address), dimensions sorted by decreasing
#      stride and contiguous neighbours merged.  So reversed and transposed views become one
#      contiguous run for the vector kernels; only truly strided data takes the scalar loop.
#      all_finite also drops stride-0 dimensions (the same elements again).  unscale reports
#      them, and any array whose sorted strides do not prove it free of internal overlap
#      (each stride at least the extent of the dimensions inside it), because an element
#      reached twice would be multiplied twice; the validation layer then decides exactly.
#   c. The work units are byte ranges of the concatenation of all arrays (boundaries on 64-byte
#      multiples; in each array an element belongs to the range holding its first byte), so one
#      huge array and many small ones balance alike; about eight per thread, taken dynamically
#      by the team (mc_run).  all_finite units share a stop flag, polled between chunks of
#      SCAN_CHUNK bytes, and all stop at the first non-finite block any of them finds.
#   e. stats (the numerics report) walks the same descriptor table and byte-range units; each
#      unit keeps its own tally (mc_stats), summed when the team is done.  Its callers pass
#      arrays without stride-0 dimensions (normalisation would drop them, and every element
#      counts).
#   d. unscale first validates every array (writable, no overlap between arrays by a sort of
#      their byte extents), then writes: nothing is modified when something is refused.

from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdlib cimport qsort
from libc.string cimport memset
import numpy as _np

cdef extern from "mc_scan.h" nogil:
    ctypedef int (*mc_all_finite_fn)(const void *p, int64_t n) noexcept nogil
    ctypedef int (*mc_unscale_fn)(void *p, int64_t n, float inv32, double inv64) noexcept nogil
    int mc_all_finite_strided(int type, const char *p, int64_t stride, int64_t n)
    int mc_unscale_strided(int type, char *p, int64_t stride, int64_t n, float inv32, double inv64)

    ctypedef struct mc_stats:
        int64_t count[9]
        uint64_t max_bits
    ctypedef void (*mc_stats_fn)(const void *p, int64_t n, mc_stats *tally) noexcept nogil
    void mc_stats_strided(int type, const char *p, int64_t stride, int64_t n, mc_stats *tally)

cdef extern from "mc_kernels.h" nogil:
    mc_all_finite_fn mc_all_finite_kernel(int level, int type)
    mc_unscale_fn mc_unscale_kernel(int level, int type)
    mc_stats_fn mc_stats_kernel(int level, int type)

ctypedef struct _scan_desc:
    char *data
    int type
    int itemsize
    int nd
    int64_t size
    int64_t start
    int64_t *shape
    int64_t *stride

ctypedef struct _scan_extent:
    uintptr_t lo
    uintptr_t hi
    int64_t index

# bytes below which a scan stays on the calling thread
cdef int64_t SCAN_PARALLEL_MIN = 1 << 20
cdef int64_t UNSCALE_PARALLEL_MIN = 1 << 19
# bytes between two polls of the shared stop flag
cdef int64_t SCAN_CHUNK = 1 << 16
# smallest piece of work a thread takes at a time
cdef int64_t SCAN_PIECE_MIN = 1 << 18


def scan_thresholds(int64_t scan=-1, int64_t unscale=-1, int64_t piece=-1):
    """Bytes from which all_finite / unscale use threads, and the smallest piece of work a
    thread takes (a multiple of 64); returns the previous values (-1 keeps a value).  For
    tuning and for tests that exercise the splitting on small inputs."""
    global SCAN_PARALLEL_MIN, UNSCALE_PARALLEL_MIN, SCAN_PIECE_MIN
    previous = (SCAN_PARALLEL_MIN, UNSCALE_PARALLEL_MIN, SCAN_PIECE_MIN)
    if scan >= 0:
        SCAN_PARALLEL_MIN = scan
    if unscale >= 0:
        UNSCALE_PARALLEL_MIN = unscale
    if piece >= 64:
        SCAN_PIECE_MIN = piece & ~(<int64_t>63)
    return previous



# reasons reported to the validation layer: index * 8 + reason, negated, minus one
cdef enum:
    SCAN_BAD_ARRAY = 0      # not a native, aligned ndarray of a supported dtype
    SCAN_READONLY = 1
    SCAN_SELF_OVERLAP = 2
    SCAN_MAY_OVERLAP = 3    # byte extents of two arrays intersect: the caller checks exactly

cdef int _scan_typenums[4]
_scan_typenums[0] = _np.dtype(_np.float16).num
_scan_typenums[1] = -1
_scan_typenums[2] = _np.dtype(_np.float32).num
_scan_typenums[3] = _np.dtype(_np.float64).num


def scan_set_bfloat16(dtype):
    """Register the bfloat16 dtype (ml_dtypes') the scan kernels accept."""
    _scan_typenums[1] = dtype.num


cdef inline int _scan_code(object obj, bint need_writable) noexcept:
    """Type code of obj for the scan, -1 when the fast path cannot take it, -2 read-only."""
    cdef cnp.ndarray a
    cdef int t, k
    if not isinstance(obj, cnp.ndarray):
        return -1
    a = <cnp.ndarray>obj
    t = cnp.PyArray_TYPE(a)
    for k in range(4):
        if t == _scan_typenums[k]:
            if not cnp.PyArray_ISNOTSWAPPED(a) or not cnp.PyArray_ISALIGNED(a):
                return -1
            if need_writable and not cnp.PyArray_ISWRITEABLE(a):
                return -2
            return k
    return -1


cdef int _scan_normalize(cnp.ndarray a, int itemsize, bint for_write, char **data,
                         int64_t *shape, int64_t *stride) noexcept:
    """Design b.  Fills shape/stride (outer first), returns the number of dimensions (>= 1), or
    -1 when an element is reached twice (only with for_write)."""
    cdef int nd = cnp.PyArray_NDIM(a), i, j, k = 0
    cdef const cnp.npy_intp *dims = cnp.PyArray_DIMS(a)
    cdef const cnp.npy_intp *strides = cnp.PyArray_STRIDES(a)
    cdef char *base = <char *>cnp.PyArray_DATA(a)
    cdef int64_t n, s, extent
    for i in range(nd):
        n = dims[i]
        s = strides[i]
        if n == 1:
            continue
        if s < 0:
            base += (n - 1) * s
            s = -s
        if s == 0:
            if for_write:
                return -1
            continue
        # insertion by decreasing stride
        j = k
        while j > 0 and stride[j - 1] < s:
            stride[j] = stride[j - 1]
            shape[j] = shape[j - 1]
            j -= 1
        stride[j] = s
        shape[j] = n
        k += 1
    if for_write:
        extent = itemsize
        for i in range(k - 1, -1, -1):
            if stride[i] < extent:
                return -1
            extent += stride[i] * (shape[i] - 1)
    # merge neighbours that are contiguous
    j = 0
    for i in range(k):
        if j > 0 and stride[j - 1] == stride[i] * shape[i]:
            shape[j - 1] *= shape[i]
            stride[j - 1] = stride[i]
        else:
            shape[j] = shape[i]
            stride[j] = stride[i]
            j += 1
    if j == 0:
        shape[0] = 1
        stride[0] = itemsize
        j = 1
    data[0] = base
    return j


cdef int _scan_extent_cmp(const void *x, const void *y) noexcept nogil:
    cdef uintptr_t a = (<const _scan_extent *>x).lo, b = (<const _scan_extent *>y).lo
    return -1 if a < b else (1 if a > b else 0)


cdef class _ScanTable:
    """The packed descriptor table of one call (design a)."""
    cdef _scan_desc *desc
    cdef int64_t *pool
    cdef int count
    cdef int64_t total_bytes

    def __dealloc__(self):
        PyMem_Free(self.desc)
        PyMem_Free(self.pool)


cdef int _scan_build(_ScanTable table, object arrays, bint for_write) except? -2:
    """Fill ``table`` from the sequence ``arrays``.  Returns -1 on success, else the report
    index * 8 + reason of the first array refused (design a)."""
    cdef Py_ssize_t n = len(arrays), i, dims = 0
    cdef int code, nd, k
    cdef object obj
    cdef cnp.ndarray a
    cdef _scan_desc *d
    cdef int64_t size, offset = 0
    for i in range(n):
        obj = arrays[i]
        code = _scan_code(obj, for_write)
        if code == -1:
            return i * 8 + SCAN_BAD_ARRAY
        if code == -2:
            return i * 8 + SCAN_READONLY
        dims += max(cnp.PyArray_NDIM(<cnp.ndarray>obj), 1)
    table.desc = <_scan_desc *>PyMem_Malloc(max(n, 1) * sizeof(_scan_desc))
    table.pool = <int64_t *>PyMem_Malloc(max(2 * dims, 2) * sizeof(int64_t))
    if table.desc == NULL or table.pool == NULL:
        raise MemoryError()
    dims = 0
    table.count = 0
    for i in range(n):
        a = <cnp.ndarray>arrays[i]
        size = cnp.PyArray_SIZE(a)
        if size == 0:
            continue
        d = &table.desc[table.count]
        d.type = _scan_code(a, False)
        d.itemsize = mc_dtype_size(d.type)
        d.shape = table.pool + dims
        d.stride = table.pool + dims + max(cnp.PyArray_NDIM(a), 1)
        nd = _scan_normalize(a, d.itemsize, for_write, &d.data, d.shape, d.stride)
        if nd < 0:
            return i * 8 + SCAN_SELF_OVERLAP
        dims += 2 * max(cnp.PyArray_NDIM(a), 1)
        d.nd = nd
        # what is actually scanned (all_finite drops stride-0 dimensions)
        d.size = 1
        for k in range(nd):
            d.size *= d.shape[k]
        d.start = offset
        offset += d.size * d.itemsize
        table.count += 1
    table.total_bytes = offset
    return -1


cdef int _scan_check_extents(_ScanTable table, object arrays) except? -2:
    """-1 when the byte extents of the arrays are pairwise disjoint, else SCAN_MAY_OVERLAP (with
    index 0: the caller then checks every pair exactly)."""
    cdef int n = table.count, i, k
    cdef _scan_extent *ext
    cdef _scan_desc *d
    cdef uintptr_t hi = 0
    cdef int64_t span
    if n < 2:
        return -1
    ext = <_scan_extent *>PyMem_Malloc(n * sizeof(_scan_extent))
    if ext == NULL:
        raise MemoryError()
    for i in range(n):
        d = &table.desc[i]
        span = d.itemsize
        for k in range(d.nd):
            span += d.stride[k] * (d.shape[k] - 1)
        ext[i].lo = <uintptr_t>d.data
        ext[i].hi = <uintptr_t>d.data + <uintptr_t>span
        ext[i].index = i
    qsort(ext, n, sizeof(_scan_extent), _scan_extent_cmp)
    k = -1
    for i in range(n):
        if i > 0 and ext[i].lo < hi:
            k = i
            break
        if ext[i].hi > hi:
            hi = ext[i].hi
    PyMem_Free(ext)
    return -1 if k < 0 else SCAN_MAY_OVERLAP


cdef int _scan_run(const _scan_desc *d, char *p, int64_t n, bint write, mc_all_finite_fn *fin,
                   mc_unscale_fn *uns, float inv32, double inv64, int *stop) noexcept nogil:
    """One row of n elements at p; returns 1 when all were finite.  all_finite polls the stop
    flag between chunks and returns 0 once it is set."""
    cdef int64_t step, chunk
    cdef int64_t s = d.stride[d.nd - 1]
    if write:
        if s == d.itemsize:
            return uns[d.type](p, n, inv32, inv64)
        return mc_unscale_strided(d.type, p, s, n, inv32, inv64)
    chunk = SCAN_CHUNK // d.itemsize
    while n > 0:
        if mc_flag_get(stop):
            return 0
        step = chunk if n > chunk else n
        if s == d.itemsize:
            if not fin[d.type](p, step):
                mc_flag_set(stop)
                return 0
        elif not mc_all_finite_strided(d.type, p, s, step):
            mc_flag_set(stop)
            return 0
        p += step * s
        n -= step
    return 1


cdef int _scan_elements(const _scan_desc *d, int64_t e0, int64_t e1, bint write,
                        mc_all_finite_fn *fin, mc_unscale_fn *uns, float inv32, double inv64,
                        int *stop) noexcept nogil:
    """Elements [e0, e1) of one array in its normalised order; 1 when all were finite."""
    cdef int64_t idx[64]
    cdef int64_t inner = d.shape[d.nd - 1], row, col, off = 0, e = e0, cnt, rem
    cdef int j, ok = 1
    if e0 >= e1:
        return 1
    row = e0 // inner
    col = e0 - row * inner
    rem = row
    for j in range(d.nd - 2, -1, -1):
        idx[j] = rem % d.shape[j]
        rem = rem // d.shape[j]
        off += idx[j] * d.stride[j]
    while e < e1:
        cnt = inner - col
        if cnt > e1 - e:
            cnt = e1 - e
        if not _scan_run(d, d.data + off + col * d.stride[d.nd - 1], cnt, write, fin, uns,
                         inv32, inv64, stop):
            ok = 0
            if not write:
                return 0
        e += cnt
        col = 0
        for j in range(d.nd - 2, -1, -1):
            idx[j] += 1
            off += d.stride[j]
            if idx[j] < d.shape[j]:
                break
            off -= d.stride[j] * d.shape[j]
            idx[j] = 0
    return ok


cdef inline int64_t _ceil_div(int64_t a, int64_t b) noexcept nogil:
    return (a + b - 1) // b


cdef int _scan_bytes(const _scan_desc *desc, int count, int64_t b0, int64_t b1, bint write,
                     mc_all_finite_fn *fin, mc_unscale_fn *uns, float inv32, double inv64,
                     int *stop) noexcept nogil:
    """Every element whose first byte lies in [b0, b1) of the concatenation (design c)."""
    cdef int i, lo_i = 0, hi_i = count, mid, ok = 1
    cdef const _scan_desc *d
    cdef int64_t lo, hi, nbytes
    # the first array that ends after b0 (starts are increasing)
    while hi_i - lo_i > 1:
        mid = (lo_i + hi_i) // 2
        if desc[mid].start <= b0:
            lo_i = mid
        else:
            hi_i = mid
    for i in range(lo_i, count):
        d = &desc[i]
        nbytes = d.size * d.itemsize
        if d.start >= b1:
            break
        if d.start + nbytes <= b0:
            continue
        lo = b0 - d.start
        hi = b1 - d.start
        lo = _ceil_div(lo, d.itemsize) if lo > 0 else 0
        hi = _ceil_div(hi, d.itemsize) if hi < nbytes else d.size
        if not _scan_elements(d, lo, hi, write, fin, uns, inv32, inv64, stop):
            ok = 0
            if not write:
                return 0
    return ok


ctypedef struct _scan_job:
    const _scan_desc *desc
    int count
    int64_t total
    int64_t chunk
    bint write
    mc_all_finite_fn *fin
    mc_unscale_fn *uns
    float inv32
    double inv64
    int stop
    int64_t nbad


cdef void _scan_unit(void *ctx, int64_t c) noexcept nogil:
    """Byte range c of the concatenation (design c)."""
    cdef _scan_job *job = <_scan_job *>ctx
    cdef int64_t b0 = c * job.chunk
    cdef int64_t b1 = min(b0 + job.chunk, job.total)
    if job.write or not mc_flag_get(&job.stop):
        if not _scan_bytes(job.desc, job.count, b0, b1, job.write, job.fin, job.uns, job.inv32,
                           job.inv64, &job.stop):
            mc_fetch_add(&job.nbad, 1)


cdef int _scan_execute(_ScanTable table, bint write, float inv32, double inv64) noexcept:
    cdef mc_all_finite_fn fin[4]
    cdef mc_unscale_fn uns[4]
    cdef int k, nthreads, level = mc_rt_level()
    cdef _scan_job job
    for k in range(4):
        fin[k] = mc_all_finite_kernel(level, k)
        uns[k] = mc_unscale_kernel(level, k)
    job.desc = table.desc
    job.count = table.count
    job.total = table.total_bytes
    job.write = write
    job.fin = fin
    job.uns = uns
    job.inv32 = inv32
    job.inv64 = inv64
    job.stop = 0
    job.nbad = 0
    nthreads = mc_rt_threads_for(job.total, UNSCALE_PARALLEL_MIN if write else SCAN_PARALLEL_MIN)
    # pieces of 1/8 of a thread's share, at least SCAN_PIECE_MIN bytes, 64-byte multiples
    job.chunk = max(job.total // (8 * nthreads), SCAN_PIECE_MIN) & ~(<int64_t>63)
    with nogil:
        mc_run(_scan_unit, &job, (job.total + job.chunk - 1) // job.chunk, nthreads)
    return job.nbad == 0


def all_finite(arrays):
    """1 when every element of every array is finite, 0 otherwise; a negative value
    -(index * 8 + reason) - 1 when the fast path cannot take arrays[index] (design a)."""
    cdef _ScanTable table = _ScanTable.__new__(_ScanTable)
    cdef int report
    arrays = tuple(arrays)
    report = _scan_build(table, arrays, False)
    if report >= 0:
        return -report - 1
    return _scan_execute(table, False, 0.0, 0.0)


def unscale_check(arrays, double scale, bint check_extents=True):
    """Multiply every array in place by 1 / scale (float64 arrays by the float64 reciprocal,
    the others by its float32 rounding, through float32); 1 when every input element was
    finite.  Negative reports as all_finite, before anything is written; with
    check_extents=False the caller has verified the arrays do not overlap."""
    cdef _ScanTable table = _ScanTable.__new__(_ScanTable)
    cdef int report
    cdef float inv32
    cdef double inv64
    mc_reciprocal(scale, &inv32, &inv64)
    # a tuple of our own keeps every array alive while the GIL is released
    arrays = tuple(arrays)
    report = _scan_build(table, arrays, True)
    if report >= 0:
        return -report - 1
    if check_extents:
        report = _scan_check_extents(table, arrays)
        if report >= 0:
            return -report - 1
    return _scan_execute(table, True, inv32, inv64)


ctypedef struct _stats_job:
    const _scan_desc *desc
    int count
    int64_t total
    int64_t chunk
    mc_stats_fn *fns
    mc_stats *tallies


cdef void _stats_elements(const _scan_desc *d, int64_t e0, int64_t e1, mc_stats_fn *fns,
                          mc_stats *tally) noexcept nogil:
    """Elements [e0, e1) of one array in its normalised order added to ``tally``."""
    cdef int64_t idx[64]
    cdef int64_t inner = d.shape[d.nd - 1], row, col, off = 0, e = e0, cnt, rem
    cdef int64_t s = d.stride[d.nd - 1]
    cdef int j
    if e0 >= e1:
        return
    row = e0 // inner
    col = e0 - row * inner
    rem = row
    for j in range(d.nd - 2, -1, -1):
        idx[j] = rem % d.shape[j]
        rem = rem // d.shape[j]
        off += idx[j] * d.stride[j]
    while e < e1:
        cnt = inner - col
        if cnt > e1 - e:
            cnt = e1 - e
        if s == d.itemsize:
            fns[d.type](d.data + off + col * s, cnt, tally)
        else:
            mc_stats_strided(d.type, d.data + off + col * s, s, cnt, tally)
        e += cnt
        col = 0
        for j in range(d.nd - 2, -1, -1):
            idx[j] += 1
            off += d.stride[j]
            if idx[j] < d.shape[j]:
                break
            off -= d.stride[j] * d.shape[j]
            idx[j] = 0


cdef void _stats_unit(void *ctx, int64_t c) noexcept nogil:
    """Byte range c of the concatenation into tally c (design e)."""
    cdef _stats_job *job = <_stats_job *>ctx
    cdef int64_t b0 = c * job.chunk
    cdef int64_t b1 = min(b0 + job.chunk, job.total)
    cdef int i, lo_i = 0, hi_i = job.count, mid
    cdef const _scan_desc *d
    cdef int64_t lo, hi, nbytes
    while hi_i - lo_i > 1:
        mid = (lo_i + hi_i) // 2
        if job.desc[mid].start <= b0:
            lo_i = mid
        else:
            hi_i = mid
    for i in range(lo_i, job.count):
        d = &job.desc[i]
        nbytes = d.size * d.itemsize
        if d.start >= b1:
            break
        if d.start + nbytes <= b0:
            continue
        lo = b0 - d.start
        hi = b1 - d.start
        lo = _ceil_div(lo, d.itemsize) if lo > 0 else 0
        hi = _ceil_div(hi, d.itemsize) if hi < nbytes else d.size
        _stats_elements(d, lo, hi, job.fns, &job.tallies[c])


def stats(arr):
    """Numerics statistics over every element of one array (design e): a tuple of the nine
    counts (NaN, Inf, zero, float16 overflow / subnormal / underflow, bfloat16 overflow /
    subnormal / underflow) and the bit pattern of the largest finite magnitude (0 when none),
    or a negative report as all_finite when the fast path cannot take the array."""
    cdef _ScanTable table = _ScanTable.__new__(_ScanTable)
    cdef int report, k, nthreads, level = mc_rt_level()
    cdef mc_stats_fn fns[4]
    cdef _stats_job job
    cdef int64_t units, u
    cdef mc_stats total
    arrays = (arr,)
    report = _scan_build(table, arrays, False)
    if report >= 0:
        return -report - 1
    for k in range(4):
        fns[k] = mc_stats_kernel(level, k)
    memset(&total, 0, sizeof(mc_stats))
    job.desc = table.desc
    job.count = table.count
    job.total = table.total_bytes
    job.fns = fns
    nthreads = mc_rt_threads_for(job.total, SCAN_PARALLEL_MIN)
    job.chunk = max(job.total // (8 * nthreads), SCAN_PIECE_MIN) & ~(<int64_t>63)
    units = (job.total + job.chunk - 1) // job.chunk
    job.tallies = <mc_stats *>PyMem_Malloc(max(units, 1) * sizeof(mc_stats))
    if job.tallies == NULL:
        raise MemoryError()
    try:
        memset(job.tallies, 0, max(units, 1) * sizeof(mc_stats))
        with nogil:
            mc_run(_stats_unit, &job, units, nthreads)
        for u in range(units):
            for k in range(9):
                total.count[k] += job.tallies[u].count[k]
            if job.tallies[u].max_bits > total.max_bits:
                total.max_bits = job.tallies[u].max_bits
    finally:
        PyMem_Free(job.tallies)
    return tuple(total.count[k] for k in range(9)), total.max_bits
