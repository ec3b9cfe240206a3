/* The engine's settings; see mc_settings.h for the design. */
#include "mc_settings.h"

#include "mc_team.h"

static int mc_level_ = 0;
static int mc_threads_ = 1;
static int mc_budget_ = 1;
static _Thread_local int mc_override_ = 0;
/* mc | kc << 21 | nc << 42; every field below 2**21 (MC_BLOCK_MAX_* are) */
static uint64_t mc_blocks_word_ = 0;

int mc_rt_level(void) { return __atomic_load_n(&mc_level_, __ATOMIC_ACQUIRE); }
void mc_rt_set_level(int level) { __atomic_store_n(&mc_level_, level, __ATOMIC_RELEASE); }
int mc_rt_process_threads(void) { return __atomic_load_n(&mc_threads_, __ATOMIC_RELAXED); }

static int mc_clamp_threads_(int n) { return n < 1 ? 1 : n > MC_THREADS_MAX ? MC_THREADS_MAX : n; }

void mc_rt_set_process_threads(int n)
{
    __atomic_store_n(&mc_threads_, mc_clamp_threads_(n), __ATOMIC_RELAXED);
}

int mc_rt_thread_override(void) { return mc_override_; }
void mc_rt_set_thread_override(int n) { mc_override_ = n <= 0 ? 0 : mc_clamp_threads_(n); }

int mc_rt_threads(void)
{
    const int n = mc_override_ > 0 ? mc_override_ : mc_rt_process_threads();
    return mc_team_enabled() ? n : 1;
}

int mc_rt_threads_for(int64_t work, int64_t threshold)
{
    return work < threshold ? 1 : mc_rt_threads();
}

int mc_rt_cpu_budget(void) { return __atomic_load_n(&mc_budget_, __ATOMIC_RELAXED); }
void mc_rt_set_cpu_budget(int n) { __atomic_store_n(&mc_budget_, mc_clamp_threads_(n), __ATOMIC_RELAXED); }

void mc_rt_blocks(mc_blocks *b)
{
    const uint64_t w = __atomic_load_n(&mc_blocks_word_, __ATOMIC_ACQUIRE);
    const uint64_t field = (UINT64_C(1) << 21) - 1;
    b->mc = (int64_t)(w & field);
    b->kc = (int64_t)((w >> 21) & field);
    b->nc = (int64_t)((w >> 42) & field);
}

int mc_rt_set_blocks(int64_t mc, int64_t kc, int64_t nc)
{
    if (mc < 0 || kc < 0 || nc < 0 || mc > MC_BLOCK_MAX_MC || kc > MC_BLOCK_MAX_KC ||
        nc > MC_BLOCK_MAX_NC)
        return -1;
    const uint64_t w = (uint64_t)mc | ((uint64_t)kc << 21) | ((uint64_t)nc << 42);
    __atomic_store_n(&mc_blocks_word_, w, __ATOMIC_RELEASE);
    return 0;
}

MC_EXPORT_ int mixedcore_get_num_threads(void) { return mc_rt_threads(); }
MC_EXPORT_ void mixedcore_set_num_threads(int n) { mc_rt_set_thread_override(n); }
