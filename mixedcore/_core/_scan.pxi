# Overflow scans: all_finite, unscale_and_check and the numerics statistics over many arrays in
# one call.  The driver is C (src/scan/mc_scan.c: normalisation, overlap checks, thresholds, work
# units, the run); this part reads each ndarray's pointer, dtype, shape and strides into a
# packed table of C descriptors (one allocation), calls it without the GIL, and turns what it
# reports into the report the validation layer (mixedcore.kernels._scan) decodes.
#
# Reports: -(index * 8 + reason) - 1 for arrays[index].  Arrays the fast path cannot take (not
# an ndarray, unsupported dtype, swapped byte order, unaligned) and read-only arrays given to
# unscale are found here, before the call; an array that may reach an element twice and arrays
# whose extents intersect are found by the driver.  Nothing is written when a report is made.

from cpython.mem cimport PyMem_Malloc, PyMem_Free
import numpy as _np

cdef extern from "mc_scan.h" nogil:
    ctypedef struct mc_stats:
        int64_t count[9]
        uint64_t max_bits
    ctypedef struct mc_scan_array:
        char *data
        int type
        int nd
        const int64_t *shape
        const int64_t *strides
    int MC_SCAN_OK, MC_SCAN_NOMEM, MC_SCAN_SELF_OVERLAP, MC_SCAN_MAY_OVERLAP, MC_SCAN_TOOBIG
    int mc_scan_all_finite(const mc_scan_array *arrays, int64_t count, int *finite,
                           int64_t *index)
    int mc_scan_unscale(const mc_scan_array *arrays, int64_t count, double scale,
                        int check_extents, int *finite, int64_t *index)
    int mc_scan_stats(const mc_scan_array *arrays, int64_t count, mc_stats *total,
                      int64_t *index)
    void mc_scan_set_thresholds(int64_t scan, int64_t unscale, int64_t piece,
                                int64_t *previous)


def scan_thresholds(int64_t scan=-1, int64_t unscale=-1, int64_t piece=-1):
    """Bytes from which all_finite / unscale use threads, and the smallest piece of work a
    thread takes (a multiple of 64); returns the previous values (-1 keeps a value).  For
    tuning and for tests that exercise the splitting on small inputs."""
    cdef int64_t previous[3]
    mc_scan_set_thresholds(scan, unscale, piece, previous)
    return (previous[0], previous[1], previous[2])


# reasons reported to the validation layer
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


cdef class _ScanTable:
    """The C descriptors of one call's arrays, and the shapes and strides they point into."""
    cdef mc_scan_array *desc
    cdef int64_t *pool
    cdef Py_ssize_t count

    def __dealloc__(self):
        PyMem_Free(self.desc)
        PyMem_Free(self.pool)


cdef int _scan_build(_ScanTable table, tuple arrays, bint for_write) except? -2:
    """Fill ``table`` from ``arrays``.  Returns -1 on success, else the report index * 8 +
    reason of the first array refused."""
    cdef Py_ssize_t n = len(arrays), i, dims = 0
    cdef int code, nd, k
    cdef object obj
    cdef cnp.ndarray a
    cdef mc_scan_array *d
    cdef int64_t *shape
    cdef int64_t *strides
    for i in range(n):
        obj = arrays[i]
        code = _scan_code(obj, for_write)
        if code == -1:
            return i * 8 + SCAN_BAD_ARRAY
        if code == -2:
            return i * 8 + SCAN_READONLY
        dims += cnp.PyArray_NDIM(<cnp.ndarray>obj)
    table.desc = <mc_scan_array *>PyMem_Malloc(max(n, 1) * sizeof(mc_scan_array))
    table.pool = <int64_t *>PyMem_Malloc(max(2 * dims, 1) * sizeof(int64_t))
    if table.desc == NULL or table.pool == NULL:
        raise MemoryError()
    dims = 0
    for i in range(n):
        a = <cnp.ndarray>arrays[i]
        nd = cnp.PyArray_NDIM(a)
        d = &table.desc[i]
        d.data = <char *>cnp.PyArray_DATA(a)
        d.type = _scan_code(a, False)
        d.nd = nd
        shape = table.pool + dims
        strides = shape + nd
        for k in range(nd):
            shape[k] = cnp.PyArray_DIM(a, k)
            strides[k] = cnp.PyArray_STRIDE(a, k)
        d.shape = shape
        d.strides = strides
        dims += 2 * nd
    table.count = n
    return -1


cdef int _scan_error(str fname, int r, int64_t index) except? -2:
    """The report of the driver's error ``r`` (MemoryError for an allocation that failed,
    ValueError naming ``fname`` for arrays whose bytes add up past INT64_MAX)."""
    if r == MC_SCAN_SELF_OVERLAP:
        return index * 8 + SCAN_SELF_OVERLAP
    if r == MC_SCAN_MAY_OVERLAP:
        return index * 8 + SCAN_MAY_OVERLAP
    if r == MC_SCAN_NOMEM:
        raise MemoryError()
    if r == MC_SCAN_TOOBIG:
        raise ValueError(f"{fname}: the arrays up to array {index} hold more than 2**63 bytes "
                         f"together (views that claim more than memory can hold)")
    raise ValueError(f"scan: invalid descriptor of array {index} (error {r})")


def all_finite(arrays):
    """1 when every element of every array is finite, 0 otherwise; a negative value
    -(index * 8 + reason) - 1 when the fast path cannot take arrays[index]."""
    cdef _ScanTable table = _ScanTable.__new__(_ScanTable)
    cdef int report, r, finite = 1
    cdef int64_t index = 0
    # a tuple of our own keeps every array alive while the GIL is released
    arrays = tuple(arrays)
    report = _scan_build(table, arrays, False)
    if report >= 0:
        return -report - 1
    with nogil:
        r = mc_scan_all_finite(table.desc, table.count, &finite, &index)
    if r != MC_SCAN_OK:
        return -_scan_error("all_finite", r, index) - 1
    return finite


def unscale_check(arrays, double scale, bint check_extents=True):
    """Multiply every array in place by 1 / scale (float64 arrays by the float64 reciprocal,
    the others by its float32 rounding, through float32); 1 when every input element was
    finite.  Negative reports as all_finite, before anything is written; with
    check_extents=False the caller has verified the arrays do not overlap."""
    cdef _ScanTable table = _ScanTable.__new__(_ScanTable)
    cdef int report, r, finite = 1
    cdef int64_t index = 0
    arrays = tuple(arrays)
    report = _scan_build(table, arrays, True)
    if report >= 0:
        return -report - 1
    with nogil:
        r = mc_scan_unscale(table.desc, table.count, scale, check_extents, &finite, &index)
    if r != MC_SCAN_OK:
        return -_scan_error("unscale_and_check", r, index) - 1
    return finite


def stats(arr):
    """Numerics statistics over every element of one array: a tuple of the nine counts (NaN,
    Inf, zero, float16 overflow / subnormal / underflow, bfloat16 overflow / subnormal /
    underflow) and the bit pattern of the largest finite magnitude (0 when none), or a negative
    report as all_finite when the fast path cannot take the array."""
    cdef _ScanTable table = _ScanTable.__new__(_ScanTable)
    cdef int report, r, k
    cdef int64_t index = 0
    cdef mc_stats total
    arrays = (arr,)
    report = _scan_build(table, arrays, False)
    if report >= 0:
        return -report - 1
    with nogil:
        r = mc_scan_stats(table.desc, table.count, &total, &index)
    if r != MC_SCAN_OK:
        return -_scan_error("numerics_stats", r, index) - 1
    return tuple(total.count[k] for k in range(9)), total.max_bits
