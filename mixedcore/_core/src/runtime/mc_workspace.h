/* Per-thread workspaces: the scratch buffers of the kernels.
 *
 * Design:
 *   a. Workspaces are per thread, kept between calls (no page faults on repeated calls) and
 *      freed when the thread exits; buffers of a MiB and more are mapped directly, so that the
 *      memory goes back to the system.
 *   b. A thread's workspaces can be released from another thread (mc_workspace_release): the
 *      team does so, through mc_run, for its workers in a child after fork().
 */
#ifndef MC_WORKSPACE_H_
#define MC_WORKSPACE_H_

#include <stdint.h>

/* MC_WS_BLOCK: the bands of a plan's fused block (plan/mc_plan.h, design e), whose units call
 * the drivers that use the other two */
enum { MC_WS_WORK = 0, MC_WS_SHARED = 1, MC_WS_BLOCK = 2, MC_WS_COUNT = 3 };
/* Scratch buffer `slot` of the calling thread, at least `bytes`, 64-byte aligned, kept and grown
 * as needed; NULL when out of memory. */
void *mc_workspace(int slot, int64_t bytes);
/* The calling thread's workspaces as a handle, and their release from another thread (for a
 * thread that no longer exists: the workers, in a child after fork). */
void *mc_workspace_self(void);
void mc_workspace_release(void *handle);
/* Bytes held by the calling thread's workspaces (for tests and info). */
int64_t mc_workspace_held(void);

#endif
