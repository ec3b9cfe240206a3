# cython: language_level=3
"""mixedcore's compiled core: the engine's settings and the kernel drivers.

Design:
  a. One module, so there is one engine (levels, settings, thread team) in the process; the
     drivers of every kernel family are included from ``_*.pxi`` files.  The engine itself is C
     (``src/runtime/``: ``mc_runtime.h``, ``mc_team.h``, ``mc_kernels.h``); this module reads arrays into the
     C descriptors, releases the GIL and calls it.
  b. Callers (``mixedcore.kernels``) have validated everything: dtypes are supported, shapes
     agree, outputs are writable, aligned to their item size and do not overlap inputs.
  c. Every call's work runs through ``mc_run``: dynamic units on the calling thread and the
     team, in the default floating-point environment, with the caller's given back.
"""
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memset

cnp.import_array()

cdef extern from "mc_cpu.h" nogil:
    int MC_ISA_GENERIC, MC_ISA_AVX2, MC_ISA_AVX512, MC_ISA_AVX512BF16
    int mc_cpu_supported_level()
    int mc_cpu_built_level()
    unsigned mc_cpu_features()
    unsigned MC_CPU_AVX2, MC_CPU_FMA, MC_CPU_F16C, MC_CPU_AVX512F, MC_CPU_AVX512BW
    unsigned MC_CPU_AVX512VL, MC_CPU_AVX512DQ, MC_CPU_AVX512BF16

cdef extern from *:
    """
    #ifndef MC_BUILD_COMPILER
    #define MC_BUILD_COMPILER "unknown"
    #endif
    #ifndef MC_BUILD_FLAGS
    #define MC_BUILD_FLAGS ""
    #endif
    #ifndef MC_BUILD_LEVELS
    #define MC_BUILD_LEVELS "generic"
    #endif
    """
    const char *MC_BUILD_COMPILER
    const char *MC_BUILD_FLAGS
    const char *MC_BUILD_LEVELS

cdef extern from "mc_checked.h" nogil:
    int64_t MC_BYTES_MAX

# The largest byte count the core allocates (src/mc_checked.h): the kernels refuse larger
# outputs and buffers with a ValueError before asking for memory.
BYTES_MAX = MC_BYTES_MAX

cdef extern from "mc_runtime.h" nogil:
    ctypedef void (*mc_unit_fn)(void *ctx, int64_t unit) noexcept nogil
    int MC_THREADS_MAX, MC_BLOCK_MAX_MC, MC_BLOCK_MAX_KC, MC_BLOCK_MAX_NC
    int mc_rt_level()
    void mc_rt_set_level(int level)
    int mc_rt_process_threads()
    void mc_rt_set_process_threads(int n)
    int mc_rt_thread_override()
    void mc_rt_set_thread_override(int n)
    int mc_rt_threads()
    int mc_rt_threads_for(int64_t work, int64_t threshold)
    int mc_rt_cpu_budget()
    void mc_rt_set_cpu_budget(int n)
    int mc_rt_set_blocks(int64_t mc, int64_t kc, int64_t nc)
    int64_t mc_workspace_held()
    void mc_run(mc_unit_fn fn, void *ctx, int64_t nunits, int nthreads)
    int mc_flag_get(const int *f)
    void mc_flag_set(int *f)
    int64_t mc_fetch_add(int64_t *p, int64_t v)
    void mc_reciprocal(double x, float *r32, double *r64)
    int mc_fpenv_mxcsr(unsigned int *engine, unsigned int *current)
    float mc_round_f32(double x)

cdef extern from "mc_team.h" nogil:
    int mc_team_workers()
    void mc_team_set_spin(int64_t idle_ns, int64_t wait_ns)
    int mc_team_enabled()

cdef extern from "mc_kernels.h" nogil:
    void mc_kernels_init()

mc_kernels_init()

ISA_NAMES = ("generic", "avx2", "avx512", "avx512bf16")
BLOCK_MAX = {"mc": MC_BLOCK_MAX_MC, "kc": MC_BLOCK_MAX_KC, "nc": MC_BLOCK_MAX_NC}
THREADS_MAX = MC_THREADS_MAX

mc_rt_set_level(min(mc_cpu_supported_level(), mc_cpu_built_level()))


def supported_level():
    """Highest level the CPU and OS allow (it may exceed what was built)."""
    return mc_cpu_supported_level()


def built_level():
    """Highest level this build compiled kernels for."""
    return mc_cpu_built_level()


def cpu_features():
    """The instruction-set extensions CPUID reports (empty off x86-64), by /proc/cpuinfo name."""
    cdef unsigned bits = mc_cpu_features()
    names = (("avx2", MC_CPU_AVX2), ("fma", MC_CPU_FMA), ("f16c", MC_CPU_F16C),
             ("avx512f", MC_CPU_AVX512F), ("avx512bw", MC_CPU_AVX512BW),
             ("avx512vl", MC_CPU_AVX512VL), ("avx512dq", MC_CPU_AVX512DQ),
             ("avx512_bf16", MC_CPU_AVX512BF16))
    return {name: bool(bits & flag) for name, flag in names}


def build_info():
    """What setup.py compiled into this module: compiler, flags and the ISA levels built."""
    return {"compiler": MC_BUILD_COMPILER.decode("utf-8", "replace"),
            "flags": MC_BUILD_FLAGS.decode("utf-8", "replace"),
            "isa_levels": MC_BUILD_LEVELS.decode("utf-8", "replace").split(","),
            "threads": bool(mc_team_enabled())}


def fpenv_mxcsr():
    """(engine, current): the MXCSR every call runs under and the calling thread's own, or
    None off x86 (there the engine installs the C library's FE_DFL_ENV)."""
    cdef unsigned int engine = 0, current = 0
    if not mc_fpenv_mxcsr(&engine, &current):
        return None
    return engine, current


def get_level():
    return mc_rt_level()


def set_level(int level):
    mc_rt_set_level(level)


def threads_enabled():
    """True when the build has the thread team (False: every call runs on its caller)."""
    return bool(mc_team_enabled())


def get_num_threads():
    """Threads a call from this thread may use: its own setting, else the process's."""
    return mc_rt_threads()


def get_process_threads():
    return mc_rt_process_threads()


def set_process_threads(int n):
    mc_rt_set_process_threads(n)


def get_thread_override():
    """The calling thread's own thread count, 0 when it has none."""
    return mc_rt_thread_override()


def set_thread_override(int n):
    mc_rt_set_thread_override(n)


def get_cpu_budget():
    return mc_rt_cpu_budget()


def set_cpu_budget(int n):
    mc_rt_set_cpu_budget(n)


def pool_workers():
    """Worker threads the team has started in this process."""
    return mc_team_workers()


def pool_set_spin(int64_t idle_ns=-1, int64_t wait_ns=-1):
    """How long idle workers and waiting callers spin before they sleep (for tuning)."""
    mc_team_set_spin(idle_ns, wait_ns)


def round_f32(double x):
    """x rounded to float32 (to nearest even, whatever the caller's rounding mode)."""
    return mc_round_f32(x)


def workspace_bytes():
    """Bytes of scratch the calling thread holds (kept between calls, freed at its exit)."""
    return mc_workspace_held()


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


include "_cast.pxi"
include "_scan.pxi"
include "_gemm.pxi"
include "_igemm.pxi"
include "_wgemm.pxi"
include "_act.pxi"
include "_conv.pxi"
include "_pool.pxi"
include "_attn.pxi"
include "_norm.pxi"
include "_plan.pxi"
