# cython: language_level=3
"""mixedcore's compiled core: run-time dispatch state, threads, and the kernel drivers.

Design:
  a. One module holds the ISA level and the thread count; the drivers of every kernel family
     are included from ``_*.pxi`` files so they share that state and one OpenMP runtime.
  b. Callers (``mixedcore.kernels``) have validated everything: dtypes are supported, shapes
     agree, outputs are writable, aligned to their item size and do not overlap inputs.  The
     drivers only iterate, split work across threads and call C kernels, with the GIL released.
  c. Work below a size threshold stays on the calling thread: a fork/join costs microseconds.
"""
cimport numpy as cnp
from libc.stdint cimport int64_t, uint16_t, uint32_t, uint64_t, uintptr_t
from cython.parallel cimport prange

cnp.import_array()

cdef extern from "mc_cpu.h" nogil:
    int MC_ISA_GENERIC, MC_ISA_AVX2, MC_ISA_AVX512, MC_ISA_AVX512BF16
    int mc_cpu_supported_level()
    int mc_cpu_built_level()

cdef extern from "mc_runtime.h" nogil:
    ctypedef struct mc_fpflags_t:
        pass
    int mc_omp_max_threads()
    int mc_omp_enabled()
    void mc_fpflags_save(mc_fpflags_t *f)
    void mc_fpflags_restore(const mc_fpflags_t *f)

ISA_NAMES = ("generic", "avx2", "avx512", "avx512bf16")

cdef int _level = min(mc_cpu_supported_level(), mc_cpu_built_level())
cdef int _num_threads = max(1, mc_omp_max_threads())


def supported_level():
    """Highest level the CPU and OS allow (it may exceed what was built)."""
    return mc_cpu_supported_level()


def built_level():
    """Highest level this build compiled kernels for."""
    return mc_cpu_built_level()


def get_level():
    return _level


def set_level(int level):
    global _level
    _level = level


def openmp_enabled():
    return bool(mc_omp_enabled())


def get_num_threads():
    return _num_threads


def set_num_threads(int n):
    global _num_threads
    _num_threads = n


cdef void _extent(cnp.ndarray a, char **lo, char **hi) noexcept:
    """The byte range [lo, hi) that array ``a`` may touch."""
    cdef char *low = <char *>cnp.PyArray_DATA(a)
    cdef char *high = low + cnp.PyArray_ITEMSIZE(a)
    cdef int i
    cdef cnp.npy_intp extent
    for i in range(cnp.PyArray_NDIM(a)):
        if cnp.PyArray_DIM(a, i) == 0:
            lo[0] = hi[0] = low
            return
        extent = (cnp.PyArray_DIM(a, i) - 1) * cnp.PyArray_STRIDE(a, i)
        if extent < 0:
            low += extent
        else:
            high += extent
    lo[0] = low
    hi[0] = high


def extents_overlap(cnp.ndarray a, cnp.ndarray b):
    """True when the memory ranges of ``a`` and ``b`` intersect (numpy's may_share_memory,
    without its call overhead); a True still needs an exact check."""
    cdef char *alo
    cdef char *ahi
    cdef char *blo
    cdef char *bhi
    _extent(a, &alo, &ahi)
    _extent(b, &blo, &bhi)
    return alo < bhi and blo < ahi and alo < ahi and blo < bhi


cdef inline int _threads_for(int64_t work, int64_t threshold) noexcept nogil:
    """Threads to use for ``work`` units: 1 below the threshold, else the configured count,
    capped by the OpenMP limit of the calling thread (OMP_NUM_THREADS, threadpoolctl)."""
    cdef int t
    if work < threshold:
        return 1
    t = mc_omp_max_threads()
    if _num_threads < t:
        t = _num_threads
    return t if t > 1 else 1


include "_cast.pxi"
include "_scan.pxi"
include "_gemm.pxi"
include "_act.pxi"
