/* The engine's settings: the dispatch level, thread counts, the CPU budget and the GEMM block
 * sizes.
 *
 * Design:
 *   a. Settings are atomics written by the setters and read once by each call when it makes its
 *      plan; a setter takes effect from the next call and never changes a call under way.  The
 *      block sizes share one 64-bit word, so a call sees all three from the same setter.
 *   b. The thread count of a call: the calling thread's own setting when it has one
 *      (kernels.threads(n)), else the process-wide one; 1 below the family's size threshold,
 *      and 1 in a build without the team (mc_team_enabled(), the one call this file makes).
 */
#ifndef MC_SETTINGS_H_
#define MC_SETTINGS_H_

#include <stdint.h>

#include "mc_team.h"

enum {
    MC_THREADS_MAX = MC_TEAM_MAX,   /* threads one call may use */
    MC_BLOCK_MAX_MC = 16384,   /* GEMM block sizes accepted by mc_rt_set_blocks */
    MC_BLOCK_MAX_KC = 16384,
    MC_BLOCK_MAX_NC = 65536,
};

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

/* For threadpoolctl: the calling thread's count, and its own setting. */
#if defined(__GNUC__)
#define MC_EXPORT_ __attribute__((visibility("default")))
#else
#define MC_EXPORT_
#endif
MC_EXPORT_ int mixedcore_get_num_threads(void);
MC_EXPORT_ void mixedcore_set_num_threads(int n);

#endif
