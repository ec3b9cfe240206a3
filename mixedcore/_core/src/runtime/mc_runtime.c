/* Settings, per-thread workspaces, the floating-point environment and mc_run(); see
 * mc_runtime.h for the design. */
#include "mc_runtime.h"

#include <stdlib.h>
#include <string.h>
#if defined(MC_FPENV_MXCSR_)
#include <xmmintrin.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#define MC_POSIX_ 1
#include <pthread.h>
#include <sys/mman.h>
#endif

/* --- settings ---------------------------------------------------------------------------------- */

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

/* --- workspaces -------------------------------------------------------------------------------- */

/* Buffers of a MiB and more are mapped directly, so that a thread's exit returns them to the
 * system (malloc would keep them in its arenas); smaller ones come from malloc. */
#define MC_MAP_MIN_ ((int64_t)1 << 20)

static void *mc_ws_alloc_(int64_t bytes)
{
#if defined(MC_POSIX_)
    if (bytes >= MC_MAP_MIN_) {
        void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    void *p = NULL;
    return posix_memalign(&p, 64, (size_t)bytes) == 0 ? p : NULL;
#else
    return _aligned_malloc((size_t)bytes, 64);
#endif
}

static void mc_ws_free_(void *p, int64_t bytes)
{
    if (p == NULL)
        return;
#if defined(MC_POSIX_)
    if (bytes >= MC_MAP_MIN_)
        munmap(p, (size_t)bytes);
    else
        free(p);
#else
    (void)bytes;
    _aligned_free(p);
#endif
}

typedef struct {
    void *p[MC_WS_COUNT];
    int64_t bytes[MC_WS_COUNT];
} mc_ws_;

static void mc_ws_release_(void *arg)
{
    mc_ws_ *ws = (mc_ws_ *)arg;
    for (int i = 0; i < MC_WS_COUNT; ++i)
        mc_ws_free_(ws->p[i], ws->bytes[i]);
    free(ws);
}

#if defined(MC_POSIX_)
static pthread_key_t mc_ws_key_;
static pthread_once_t mc_ws_once_ = PTHREAD_ONCE_INIT;
static void mc_ws_key_init_(void) { pthread_key_create(&mc_ws_key_, mc_ws_release_); }

static mc_ws_ *mc_ws_get_(int create)
{
    pthread_once(&mc_ws_once_, mc_ws_key_init_);
    mc_ws_ *ws = (mc_ws_ *)pthread_getspecific(mc_ws_key_);
    if (ws == NULL && create) {
        ws = (mc_ws_ *)calloc(1, sizeof *ws);
        if (ws != NULL && pthread_setspecific(mc_ws_key_, ws) != 0) {
            free(ws);
            ws = NULL;
        }
    }
    return ws;
}
#else
static _Thread_local mc_ws_ mc_ws_local_;
static mc_ws_ *mc_ws_get_(int create) { (void)create; return &mc_ws_local_; }
#endif

void *mc_workspace(int slot, int64_t bytes)
{
    mc_ws_ *ws = mc_ws_get_(1);
    if (ws == NULL || slot < 0 || slot >= MC_WS_COUNT || bytes < 0)
        return NULL;
    if (bytes <= ws->bytes[slot])
        return ws->p[slot];
    /* grow by at least a quarter, so that slowly growing requests do not remap every call */
    int64_t want = bytes + bytes / 4;
    want = (want + 4095) & ~(int64_t)4095;
    mc_ws_free_(ws->p[slot], ws->bytes[slot]);
    ws->p[slot] = mc_ws_alloc_(want);
    ws->bytes[slot] = ws->p[slot] ? want : 0;
    return ws->p[slot];
}

void *mc_workspace_self(void) { return mc_ws_get_(1); }

void mc_workspace_release(void *handle)
{
    if (handle != NULL)
        mc_ws_release_(handle);
}

int64_t mc_workspace_held(void)
{
    mc_ws_ *ws = mc_ws_get_(0);
    int64_t total = 0;
    if (ws != NULL)
        for (int i = 0; i < MC_WS_COUNT; ++i)
            total += ws->bytes[i];
    return total;
}

/* --- floating-point environment ------------------------------------------------------------------ */

#if defined(MC_FPENV_MXCSR_)
/* 0x1F80: all six exceptions masked, round to nearest, FTZ and DAZ off, no flags raised. */
#define MC_MXCSR_DEFAULT_ 0x1F80u

void mc_fpenv_enter(mc_fpenv *saved)
{
    saved->mxcsr = _mm_getcsr();
    _mm_setcsr(MC_MXCSR_DEFAULT_);
}

void mc_fpenv_leave(const mc_fpenv *saved) { _mm_setcsr(saved->mxcsr); }
void mc_fpenv_default(void) { _mm_setcsr(MC_MXCSR_DEFAULT_); }

int mc_fpenv_mxcsr(unsigned int *engine, unsigned int *current)
{
    *engine = MC_MXCSR_DEFAULT_;
    *current = _mm_getcsr();
    return 1;
}
#else
void mc_fpenv_enter(mc_fpenv *saved)
{
    fegetenv(&saved->env);
    fesetenv(FE_DFL_ENV);
}

void mc_fpenv_leave(const mc_fpenv *saved) { fesetenv(&saved->env); }
void mc_fpenv_default(void) { fesetenv(FE_DFL_ENV); }

int mc_fpenv_mxcsr(unsigned int *engine, unsigned int *current)
{
    *engine = 0;
    *current = 0;
    return 0;
}
#endif

void mc_reciprocal(double x, float *r32, double *r64)
{
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    volatile double r = 1.0 / x;              /* computed here, not folded by the compiler */
    *r64 = r;
    *r32 = (float)r;
    mc_fpenv_leave(&saved);
}

float mc_round_f32(double x)
{
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    volatile float r = (float)x;
    mc_fpenv_leave(&saved);
    return r;
}

/* --- running ------------------------------------------------------------------------------------ */

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
