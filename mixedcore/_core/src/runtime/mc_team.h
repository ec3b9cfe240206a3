/* The thread team: a call's units of work run on the caller and on helper threads that join it.
 *
 * The team is the lowest layer of the engine: it knows threads, jobs and waiting, and nothing of
 * the engine's settings, floating-point environment or workspaces.  What a helper must do for
 * the engine (install its floating-point environment, keep its workspaces, respect the CPU
 * budget) comes in with each call as an mc_team_env; mc_run() (mc_runtime.c) is the one caller.
 * The design of the team itself is at the top of mc_team.c.
 */
#ifndef MC_TEAM_H_
#define MC_TEAM_H_

#include <stdint.h>

/* Threads one call may use, the caller included. */
enum { MC_TEAM_MAX = 256 };

/* One unit of a call's work: fn(ctx, u) for u in [0, nunits). */
typedef void (*mc_unit_fn)(void *ctx, int64_t unit);

/* What the layer above gives the team; every member is a function the team calls on a helper
 * thread, and all of them are the same for every call of a process. */
typedef struct {
    /* CPUs the process may use: a helper joins only while fewer threads are computing. */
    int (*cpu_budget)(void);
    /* Run on a helper when it starts and before it runs units of a call. */
    void (*enter)(void);
    /* A new helper's per-thread state (its workspaces), kept by the team ... */
    void *(*thread_state)(void);
    /* ... and freed in a child after fork(), where that helper no longer exists. */
    void (*release)(void *state);
} mc_team_env;

/* Runs units [0, nunits) on at most nthreads threads (the caller included); returns when all
 * are done.  The caller's own thread runs as it is (its environment is the caller's concern). */
void mc_team_run(mc_unit_fn fn, void *ctx, int64_t nunits, int nthreads, const mc_team_env *env);
int mc_team_enabled(void);                  /* 0 when built without threads */
int mc_team_workers(void);                  /* helper threads started so far */
void mc_team_set_spin(int64_t idle_ns, int64_t wait_ns);   /* tuning; a negative value keeps */

#endif
