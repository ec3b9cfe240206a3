/* The run-time engine shared by every kernel family: settings, per-thread workspaces, the
 * floating-point environment, and running a call's work on the thread team (mc_team.h, the
 * layer below: the team calls nothing of this file except through what mc_run() hands it).
 *
 * Design:
 *   a. Settings (level, thread count, GEMM block sizes) are atomics written by the setters and
 *      read once by each call when it makes its plan; a setter takes effect from the next call
 *      and never changes a call under way.  The block sizes share one 64-bit word, so a call
 *      sees all three from the same setter.
 *   b. The thread count of a call: the calling thread's own setting when it has one
 *      (kernels.threads(n)), else the process-wide one; 1 below the family's size threshold.
 *   c. Every call runs with the default floating-point environment -- round to nearest, no
 *      flush-to-zero, no denormals-are-zero, exceptions masked -- on the caller and on every
 *      worker, and gives the caller its own environment back (its exception flags included,
 *      so nothing raised inside leaks to numpy).  Results never depend on the caller's mode.
 *   d. Work is a number of independent units, fn(ctx, u) for u in [0, n): mc_run() runs them on
 *      the calling thread alone, or with helpers from the team (mc_team.c) that claim units
 *      dynamically.  A unit must not wait for another unit of the same run.
 *   e. Workspaces are per thread, kept between calls (no page faults on repeated calls) and
 *      freed when the thread exits.
 */
#ifndef MC_RUNTIME_H_
#define MC_RUNTIME_H_

#include <stdint.h>

#include "mc_team.h"

enum {
    MC_THREADS_MAX = MC_TEAM_MAX,   /* threads one call may use */
    MC_BLOCK_MAX_MC = 16384,   /* GEMM block sizes accepted by mc_rt_set_blocks */
    MC_BLOCK_MAX_KC = 16384,
    MC_BLOCK_MAX_NC = 65536,
};

/* --- settings (design a, b) ------------------------------------------------------------------ */
int mc_rt_level(void);
void mc_rt_set_level(int level);
int mc_rt_process_threads(void);
void mc_rt_set_process_threads(int n);
int mc_rt_thread_override(void);            /* the calling thread's own count, 0 when none */
void mc_rt_set_thread_override(int n);      /* 0 removes it */
int mc_rt_threads(void);                    /* the count for a call from this thread */
/* Threads for `work` units of a family whose threshold is `threshold`: 1 below it. */
int mc_rt_threads_for(int64_t work, int64_t threshold);
/* CPUs this process may use (affinity and cgroup quota, set by the Python layer at import);
 * helpers do not join a call when that many threads are already computing. */
int mc_rt_cpu_budget(void);
void mc_rt_set_cpu_budget(int n);

typedef struct {
    int64_t mc, kc, nc;    /* 0: the kernel's default */
} mc_blocks;
void mc_rt_blocks(mc_blocks *b);
/* Returns -1 (and changes nothing) when a value is negative or above MC_BLOCK_MAX_*. */
int mc_rt_set_blocks(int64_t mc, int64_t kc, int64_t nc);

/* --- per-thread workspaces (design e) --------------------------------------------------------- */
enum { MC_WS_WORK = 0, MC_WS_SHARED = 1, MC_WS_COUNT = 2 };
/* Scratch buffer `slot` of the calling thread, at least `bytes`, 64-byte aligned, kept and grown
 * as needed; NULL when out of memory. */
void *mc_workspace(int slot, int64_t bytes);
/* The calling thread's workspaces as a handle, and their release from another thread (for a
 * thread that no longer exists: the workers, in a child after fork). */
void *mc_workspace_self(void);
void mc_workspace_release(void *handle);
/* Bytes held by the calling thread's workspaces (for tests and info). */
int64_t mc_workspace_held(void);

/* --- floating-point environment (design c) ----------------------------------------------------- */
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#define MC_FPENV_MXCSR_ 1
typedef struct {
    unsigned int mxcsr;
} mc_fpenv;
#else
#include <fenv.h>
typedef struct {
    fenv_t env;
} mc_fpenv;
#endif
void mc_fpenv_enter(mc_fpenv *saved);       /* save the caller's, install the default */
void mc_fpenv_leave(const mc_fpenv *saved);
void mc_fpenv_default(void);                /* install the default (workers) */
/* For info: on x86 the MXCSR every call installs (*engine) and the calling thread's (*current);
 * returns 1 there, 0 on a platform whose default is the C library's FE_DFL_ENV. */
int mc_fpenv_mxcsr(unsigned int *engine, unsigned int *current);
/* 1 / x in float64 and that rounded to float32, both in the default environment (the caller's
 * rounding mode must not change a kernel's scale factor). */
void mc_reciprocal(double x, float *r32, double *r64);
/* x rounded to float32 in the default environment. */
float mc_round_f32(double x);

/* --- running a call (design d) ----------------------------------------------------------------- */
/* Runs units [0, nunits) on at most nthreads threads (the caller included), inside the default
 * floating-point environment; returns when all are done. */
void mc_run(mc_unit_fn fn, void *ctx, int64_t nunits, int nthreads);

/* Relaxed atomics for the drivers' shared flags and counters (a flag seen late costs a little
 * more work, never a wrong result). */
static inline int mc_flag_get(const int *f) { return __atomic_load_n(f, __ATOMIC_RELAXED); }
static inline void mc_flag_set(int *f) { __atomic_store_n(f, 1, __ATOMIC_RELAXED); }
static inline int64_t mc_fetch_add(int64_t *p, int64_t v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

/* For threadpoolctl: the calling thread's count, and its own setting. */
#if defined(__GNUC__)
#define MC_EXPORT_ __attribute__((visibility("default")))
#else
#define MC_EXPORT_
#endif
MC_EXPORT_ int mixedcore_get_num_threads(void);
MC_EXPORT_ void mixedcore_set_num_threads(int n);

#endif
