/* mc_run(): a call's units on the team, inside the engine's floating-point environment; see
 * mc_runtime.h for the design. */
#include "mc_runtime.h"

/* What the team's helpers do for the engine (mc_team.h): the default floating-point
 * environment, the CPU budget, and their workspaces, released after fork(). */
static const mc_team_env mc_team_env_ = {
    .cpu_budget = mc_rt_cpu_budget,
    .enter = mc_fpenv_default,
    .thread_state = mc_workspace_self,
    .release = mc_workspace_release,
};

void mc_run(mc_unit_fn fn, void *ctx, int64_t nunits, int nthreads)
{
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    mc_team_run(fn, ctx, nunits, nthreads, &mc_team_env_);
    mc_fpenv_leave(&saved);
}
