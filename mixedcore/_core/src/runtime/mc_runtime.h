/* The run-time engine shared by every kernel family, in layers, each calling only the ones
 * below it:
 *
 *     mc_runtime.c    mc_run(): a call's units on the team, in the default FP environment
 *        |  \
 *        |   mc_settings.c  (level, threads, CPU budget, GEMM blocks)
 *        |   mc_fpenv.c     (the floating-point environment)
 *        |   mc_workspace.c (per-thread scratch buffers)
 *        |  /
 *     mc_team.c       the thread team: threads, job slots and waiting, nothing else
 *
 * (mc_settings.c asks the team only whether it was built, mc_team_enabled().)  This header is
 * the one the drivers include: it brings the settings, workspaces and FP environment with it.
 *
 * Design:
 *   a. Work is a number of independent units, fn(ctx, u) for u in [0, n): mc_run() runs them on
 *      the calling thread alone, or with helpers from the team (mc_team.h) that claim units
 *      dynamically.  A unit must not wait for another unit of the same run.
 *   b. mc_run() installs the default floating-point environment on the caller and gives its own
 *      back at the end (mc_fpenv.h); what a helper must do for the engine (that environment, the
 *      CPU budget, its workspaces) it hands the team with the call (mc_team_env), so the team
 *      calls nothing above it.
 */
#ifndef MC_RUNTIME_H_
#define MC_RUNTIME_H_

#include <stdint.h>

#include "mc_fpenv.h"
#include "mc_settings.h"
#include "mc_team.h"
#include "mc_workspace.h"

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

#endif
