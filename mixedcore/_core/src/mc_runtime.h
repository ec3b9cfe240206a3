/* Thread count and floating-point-flag helpers shared by the Cython drivers.
 *
 * Design:
 *   a. Without OpenMP the module still builds: the helpers report one thread.
 *   b. Kernels may raise floating-point exception flags inside (hardware conversions of NaN or
 *      of values out of range); the driver saves the caller's flags before and restores them
 *      after, so nothing leaks into numpy's error reporting.
 */
#ifndef MC_RUNTIME_H_
#define MC_RUNTIME_H_

#include <fenv.h>

#ifdef _OPENMP
#include <omp.h>
static inline int mc_omp_max_threads(void) { return omp_get_max_threads(); }
static inline int mc_omp_enabled(void) { return 1; }
#else
static inline int mc_omp_max_threads(void) { return 1; }
static inline int mc_omp_enabled(void) { return 0; }
#endif

typedef fexcept_t mc_fpflags_t;
static inline void mc_fpflags_save(mc_fpflags_t *f) { fegetexceptflag(f, FE_ALL_EXCEPT); }
static inline void mc_fpflags_restore(const mc_fpflags_t *f) { fesetexceptflag(f, FE_ALL_EXCEPT); }

#endif
