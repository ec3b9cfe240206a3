/* The thread team: helpers that join a call's units dynamically; see mc_team.h for its place.
 *
 * Design:
 *   a. A call (mc_team_run) publishes its units in one of a few job slots and works on them
 *      itself; idle workers join while units are left.  Every participant claims the next unit
 *      with one compare-and-swap on the slot's state word, so the split follows what each
 *      thread actually gets done: a worker the OS has not scheduled yet claims nothing, and
 *      the caller, having run out of units, waits only for units already claimed (the
 *      `done` count), never for a thread that has not started.
 *   b. The state word is gen << 40 | helpers << 32 | next.  gen is odd while the job is open;
 *      the owner closes it (gen + 1) once every unit is done.  A worker reads the job's fields
 *      after an acquire load of the state and uses them only if its claim succeeds against that
 *      same state, so fields read while the slot is being reused are never acted on.  The
 *      helper count travels in the same word: a job asking for t threads admits t - 1 helpers.
 *   c. No busy machine is made busier: a worker joins only while fewer threads than this
 *      process's CPU budget are computing (callers included, mc_team_run counts them), so calls from
 *      several user threads at once share the CPUs instead of oversubscribing them.
 *   d. Waiting: idle workers spin for a short bounded time (a call that follows within
 *      microseconds finds them awake), then sleep on a futex; a caller waiting for claimed
 *      units spins briefly, then sleeps until the last one wakes it.  Sleeping frees the CPU
 *      for the thread being waited for on a busy machine.
 *   e. Workers start lazily, on the first call that asks for them, with every signal blocked
 *      (Python handles signals on its main thread).  After fork() the child has none of them:
 *      the child handler forgets them and resets the slots, so the child's first threaded call
 *      starts a new team.  Their per-thread state (mc_team_env.thread_state: the engine's
 *      workspaces) is released there too.
 *   f. Everything the team does for the engine above it goes through the mc_team_env of a call:
 *      a helper calls env->enter before the units of each job it joins and when it starts, reads
 *      env->cpu_budget before joining, and keeps env->thread_state for the fork handler.
 *   g. A busy machine: when another process wants the CPUs, a caller's thread loses time to it
 *      -- its wall time less its own CPU time, over its shared calls and the code it runs
 *      between them (measured from the start of one shared call to the next when they come
 *      within MC_BUSY_GAP_NS_) -- and a helper that spins between calls keeps one more thread runnable
 *      than there are CPUs for, so that the caller, running its own code between calls, waits
 *      for a CPU while the helper's is idle.  Once a quarter of the last MC_BUSY_SPAN_NS_ or
 *      more was lost, the team records the time and for MC_BUSY_WINDOW_NS_ after it idle
 *      workers sleep at once instead of spinning; then the callers measure again.
 *      MobileNetV2 at batch 1 beside a process spinning on one of two cores: the caller lost
 *      1.5 ms of each 3.4 ms predict (median), which now takes 2.8 ms (1.4-1.5 ms alone,
 *      unchanged).  Running small calls on the caller alone as well gave 2.5 ms there, but on
 *      a machine where another library's threads spin for a while after each of its calls
 *      (the interleaved benchmarks) it made ResNet50's median 1.6 times slower; a short
 *      window keeps such a spell from costing the calls after it.
 */
#include "mc_team.h"

#include <stdint.h>
#include <string.h>

#if defined(MC_NO_THREADS) || !(defined(__unix__) || defined(__APPLE__))

int mc_team_enabled(void) { return 0; }
int mc_team_workers(void) { return 0; }
void mc_team_set_spin(int64_t idle_ns, int64_t wait_ns) { (void)idle_ns; (void)wait_ns; }
void mc_team_run(mc_unit_fn fn, void *ctx, int64_t nunits, int nthreads, const mc_team_env *env)
{
    (void)nthreads;
    (void)env;
    for (int64_t u = 0; u < nunits; ++u)
        fn(ctx, u);
}

#else

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define MC_SLOTS_ 16
#define MC_WORKERS_MAX_ (MC_TEAM_MAX - 1)

typedef struct {
    uint64_t state;          /* design b */
    int owner;               /* 1 while a call holds the slot */
    int sleeping;            /* the owner sleeps on `done` */
    int32_t done;            /* units finished */
    int32_t nunits;
    int max_helpers;
    mc_unit_fn fn;
    void *ctx;
    const mc_team_env *env;  /* the owner's (design f) */
} __attribute__((aligned(128))) mc_slot_;

static mc_slot_ mc_slots_[MC_SLOTS_];
static uint32_t mc_epoch_;           /* bumped whenever a job is published; workers sleep on it */
static int mc_sleepers_;             /* workers asleep on mc_epoch_ */
static int mc_active_;               /* threads computing: callers and joined workers */
static int mc_nworkers_;
static void *mc_worker_state_[MC_WORKERS_MAX_];   /* each worker's thread_state (design e) */
static const mc_team_env *mc_env_;   /* the env the workers were started with (design f) */
static int64_t mc_spin_idle_ns_ = 50000;
/* design g: the callers' wall and lost time over shared calls since the last verdict, and
 * when the machine was last found busy (0: never) */
static int64_t mc_busy_wall_ns_, mc_busy_lost_ns_, mc_busy_at_ns_;
#define MC_BUSY_SPAN_NS_ ((int64_t)1000000)
#define MC_BUSY_GAP_NS_ ((int64_t)10000000)
static _Thread_local int64_t mc_last_wall_ = INT64_MIN / 2, mc_last_cpu_ = -1;
#define MC_BUSY_WINDOW_NS_ ((int64_t)5000000)
static int64_t mc_spin_wait_ns_ = 20000;
static pthread_mutex_t mc_create_lock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t mc_atfork_once_ = PTHREAD_ONCE_INIT;

#define MC_GEN_(s) ((s) >> 40)
#define MC_HELPERS_(s) ((int)(((s) >> 32) & 0xFF))
#define MC_NEXT_(s) ((int64_t)((s) & 0xFFFFFFFFu))

int mc_team_enabled(void) { return 1; }

static int64_t mc_now_ns_(void);

/* Whether the machine was found busy within the window (design g). */
static int mc_busy_(void)
{
    const int64_t at = __atomic_load_n(&mc_busy_at_ns_, __ATOMIC_RELAXED);
    return at != 0 && mc_now_ns_() - at < MC_BUSY_WINDOW_NS_;
}
int mc_team_workers(void) { return __atomic_load_n(&mc_nworkers_, __ATOMIC_RELAXED); }

void mc_team_set_spin(int64_t idle_ns, int64_t wait_ns)
{
    if (idle_ns >= 0)
        __atomic_store_n(&mc_spin_idle_ns_, idle_ns, __ATOMIC_RELAXED);
    if (wait_ns >= 0)
        __atomic_store_n(&mc_spin_wait_ns_, wait_ns, __ATOMIC_RELAXED);
}

/* --- waiting primitives ------------------------------------------------------------------------ */

static inline void mc_pause_(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int64_t mc_now_ns_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The calling thread's CPU time, or -1 where there is no such clock. */
static int64_t mc_cpu_ns_(void)
{
#if defined(CLOCK_THREAD_CPUTIME_ID)
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
#endif
    return -1;
}

/* A caller's thread spent `wall` ns, of which it ran `cpu` (design g). */
static void mc_busy_account_(int64_t wall, int64_t cpu, int64_t now)
{
    const int64_t lost = wall > cpu ? wall - cpu : 0;
    const int64_t w = __atomic_add_fetch(&mc_busy_wall_ns_, wall, __ATOMIC_RELAXED);
    const int64_t l = __atomic_add_fetch(&mc_busy_lost_ns_, lost, __ATOMIC_RELAXED);
    if (w < MC_BUSY_SPAN_NS_)
        return;
    __atomic_store_n(&mc_busy_wall_ns_, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&mc_busy_lost_ns_, 0, __ATOMIC_RELAXED);
    if (4 * l > w)
        __atomic_store_n(&mc_busy_at_ns_, now, __ATOMIC_RELAXED);
}

#if defined(__linux__)
static void mc_futex_wait_(void *addr, uint32_t expected)
{
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void mc_futex_wake_(void *addr, int n)
{
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
#else
/* Elsewhere one mutex and condition variable stand in for the futex: wake all, recheck. */
static pthread_mutex_t mc_wait_lock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mc_wait_cond_ = PTHREAD_COND_INITIALIZER;

static void mc_futex_wait_(void *addr, uint32_t expected)
{
    pthread_mutex_lock(&mc_wait_lock_);
    if (__atomic_load_n((uint32_t *)addr, __ATOMIC_SEQ_CST) == expected)
        pthread_cond_wait(&mc_wait_cond_, &mc_wait_lock_);
    pthread_mutex_unlock(&mc_wait_lock_);
}

static void mc_futex_wake_(void *addr, int n)
{
    (void)addr;
    (void)n;
    pthread_mutex_lock(&mc_wait_lock_);
    pthread_cond_broadcast(&mc_wait_cond_);
    pthread_mutex_unlock(&mc_wait_lock_);
}
#endif

/* --- working on a job -------------------------------------------------------------------------- */

static void mc_unit_done_(mc_slot_ *s, int32_t nunits)
{
    const int32_t d = __atomic_add_fetch(&s->done, 1, __ATOMIC_SEQ_CST);
    if (d == nunits && __atomic_load_n(&s->sleeping, __ATOMIC_SEQ_CST))
        mc_futex_wake_(&s->done, 1);
}

/* One pass over the slots as a helper; 1 when some unit was run. */
static int mc_help_(void)
{
    int worked = 0;
    for (int i = 0; i < MC_SLOTS_; ++i) {
        mc_slot_ *s = &mc_slots_[i];
        uint64_t st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
        if (!(MC_GEN_(st) & 1))
            continue;
        const uint64_t gen = MC_GEN_(st);
        const int32_t nunits = __atomic_load_n(&s->nunits, __ATOMIC_RELAXED);
        const int maxh = __atomic_load_n(&s->max_helpers, __ATOMIC_RELAXED);
        const mc_unit_fn fn = __atomic_load_n(&s->fn, __ATOMIC_RELAXED);
        void *const ctx = __atomic_load_n(&s->ctx, __ATOMIC_RELAXED);
        const mc_team_env *const env = __atomic_load_n(&s->env, __ATOMIC_RELAXED);
        if (MC_NEXT_(st) >= nunits || MC_HELPERS_(st) >= maxh)
            continue;
        const int budget = env->cpu_budget();
        if (__atomic_load_n(&mc_active_, __ATOMIC_RELAXED) >= (budget > maxh + 1 ? budget : maxh + 1))
            continue;
        int joined = 0;
        while (MC_GEN_(st) == gen && MC_NEXT_(st) < nunits) {
            uint64_t want = st + 1;
            if (!joined) {
                if (MC_HELPERS_(st) >= maxh)
                    break;
                want += UINT64_C(1) << 32;
            }
            if (!__atomic_compare_exchange_n(&s->state, &st, want, 0, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE))
                continue;                 /* st reloaded: retry, or stop if the job changed */
            if (!joined) {
                joined = 1;
                __atomic_add_fetch(&mc_active_, 1, __ATOMIC_RELAXED);
                env->enter();
            }
            fn(ctx, MC_NEXT_(st));
            worked = 1;
            mc_unit_done_(s, nunits);
            st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
        }
        if (joined)
            __atomic_sub_fetch(&mc_active_, 1, __ATOMIC_RELAXED);
    }
    return worked;
}

static void *mc_worker_main_(void *arg)
{
    const mc_team_env *env = __atomic_load_n(&mc_env_, __ATOMIC_ACQUIRE);
    __atomic_store_n(&mc_worker_state_[(intptr_t)arg], env->thread_state(), __ATOMIC_RELEASE);
    env->enter();
    for (;;) {
        const uint32_t e = __atomic_load_n(&mc_epoch_, __ATOMIC_SEQ_CST);
        if (mc_help_())
            continue;
        const int64_t spin = mc_busy_() ? 0 : __atomic_load_n(&mc_spin_idle_ns_, __ATOMIC_RELAXED);
        const int64_t t0 = spin > 0 ? mc_now_ns_() : 0;
        int woke = 0;
        for (int n = 1; spin > 0; ++n) {
            mc_pause_();
            if (__atomic_load_n(&mc_epoch_, __ATOMIC_ACQUIRE) != e) {
                woke = 1;
                break;
            }
            if ((n & 15) == 0 && mc_now_ns_() - t0 > spin)
                break;
        }
        if (woke)
            continue;
        __atomic_add_fetch(&mc_sleepers_, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&mc_epoch_, __ATOMIC_SEQ_CST) == e)
            mc_futex_wait_(&mc_epoch_, e);
        __atomic_sub_fetch(&mc_sleepers_, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* --- fork --------------------------------------------------------------------------------------- */

static void mc_atfork_prepare_(void) { pthread_mutex_lock(&mc_create_lock_); }
static void mc_atfork_parent_(void) { pthread_mutex_unlock(&mc_create_lock_); }

static void mc_atfork_child_(void)
{
    /* only the forking thread exists here: no worker, no job in flight */
    for (int i = 0; i < mc_nworkers_; ++i) {
        if (mc_worker_state_[i] != NULL)
            mc_env_->release(mc_worker_state_[i]);
        mc_worker_state_[i] = NULL;
    }
    memset(mc_slots_, 0, sizeof mc_slots_);
    mc_epoch_ = 0;
    mc_sleepers_ = 0;
    mc_active_ = 0;
    mc_nworkers_ = 0;
    pthread_mutex_init(&mc_create_lock_, NULL);
}

static void mc_atfork_init_(void)
{
    pthread_atfork(mc_atfork_prepare_, mc_atfork_parent_, mc_atfork_child_);
}

/* Starts workers until there are `want` (at most MC_WORKERS_MAX_). */
static void mc_ensure_workers_(int want, const mc_team_env *env)
{
    if (want > MC_WORKERS_MAX_)
        want = MC_WORKERS_MAX_;
    if (__atomic_load_n(&mc_nworkers_, __ATOMIC_ACQUIRE) >= want)
        return;
    pthread_once(&mc_atfork_once_, mc_atfork_init_);
    pthread_mutex_lock(&mc_create_lock_);
    __atomic_store_n(&mc_env_, env, __ATOMIC_RELEASE);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (mc_nworkers_ < want) {
        pthread_t t;
        if (pthread_create(&t, &attr, mc_worker_main_, (void *)(intptr_t)mc_nworkers_) != 0)
            break;                        /* run with the workers there are */
        __atomic_add_fetch(&mc_nworkers_, 1, __ATOMIC_RELEASE);
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_unlock(&mc_create_lock_);
}

/* --- a call ------------------------------------------------------------------------------------- */

static void mc_run_inline_(mc_unit_fn fn, void *ctx, int64_t nunits)
{
    for (int64_t u = 0; u < nunits; ++u)
        fn(ctx, u);
}

static void mc_team_share_(mc_unit_fn fn, void *ctx, int64_t nunits, int nthreads,
                           const mc_team_env *env);

void mc_team_run(mc_unit_fn fn, void *ctx, int64_t nunits, int nthreads, const mc_team_env *env)
{
    __atomic_add_fetch(&mc_active_, 1, __ATOMIC_RELAXED);
    if (nthreads <= 1 || nunits <= 1 || nunits >= INT32_MAX)
        mc_run_inline_(fn, ctx, nunits);
    else
        mc_team_share_(fn, ctx, nunits, nthreads, env);
    __atomic_sub_fetch(&mc_active_, 1, __ATOMIC_RELAXED);
}

/* The caller's side of design a. */
static void mc_team_share_(mc_unit_fn fn, void *ctx, int64_t nunits, int nthreads,
                           const mc_team_env *env)
{
    if (nthreads > MC_TEAM_MAX)
        nthreads = MC_TEAM_MAX;
    mc_ensure_workers_(nthreads - 1, env);
    mc_slot_ *s = NULL;
    for (int i = 0; i < MC_SLOTS_ && s == NULL; ++i) {
        int expected = 0;
        if (__atomic_compare_exchange_n(&mc_slots_[i].owner, &expected, 1, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            s = &mc_slots_[i];
    }
    if (s == NULL) {                      /* many concurrent calls: this one runs alone */
        mc_run_inline_(fn, ctx, nunits);
        return;
    }
    const int32_t n = (int32_t)nunits;
    __atomic_store_n(&s->fn, fn, __ATOMIC_RELAXED);
    __atomic_store_n(&s->ctx, ctx, __ATOMIC_RELAXED);
    __atomic_store_n(&s->env, env, __ATOMIC_RELAXED);
    __atomic_store_n(&s->nunits, n, __ATOMIC_RELAXED);
    __atomic_store_n(&s->max_helpers, nthreads - 1 > 255 ? 255 : nthreads - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&s->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->sleeping, 0, __ATOMIC_RELAXED);
    const uint64_t gen = (MC_GEN_(__atomic_load_n(&s->state, __ATOMIC_RELAXED)) + 1) & 0xFFFFFF;
    __atomic_store_n(&s->state, gen << 40, __ATOMIC_RELEASE);

    __atomic_add_fetch(&mc_epoch_, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&mc_sleepers_, __ATOMIC_SEQ_CST) > 0)
        mc_futex_wake_(&mc_epoch_, nthreads - 1);

    /* design g: the caller's time from the start of its last shared call to this one's, when
     * that was recent (its calls on one thread and its own code in between: one inference);
     * one CPU-time reading per call */
    const int64_t t_start = mc_now_ns_(), cpu_start = mc_cpu_ns_();
    if (t_start - mc_last_wall_ < MC_BUSY_GAP_NS_ && mc_last_cpu_ >= 0 && cpu_start >= 0)
        mc_busy_account_(t_start - mc_last_wall_, cpu_start - mc_last_cpu_, t_start);
    mc_last_wall_ = t_start;
    mc_last_cpu_ = cpu_start;
    uint64_t st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    while (MC_NEXT_(st) < n) {
        if (!__atomic_compare_exchange_n(&s->state, &st, st + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        fn(ctx, MC_NEXT_(st));
        __atomic_add_fetch(&s->done, 1, __ATOMIC_SEQ_CST);
        st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    }

    /* wait for the units other threads claimed (design a, d) */
    if (__atomic_load_n(&s->done, __ATOMIC_SEQ_CST) < n) {
        const int64_t spin = __atomic_load_n(&mc_spin_wait_ns_, __ATOMIC_RELAXED);
        const int64_t t0 = mc_now_ns_();
        for (int k = 1; __atomic_load_n(&s->done, __ATOMIC_ACQUIRE) < n; ++k) {
            mc_pause_();
            if ((k & 15) == 0 && mc_now_ns_() - t0 > spin)
                break;
        }
        int32_t d;
        while ((d = __atomic_load_n(&s->done, __ATOMIC_SEQ_CST)) < n) {
            __atomic_store_n(&s->sleeping, 1, __ATOMIC_SEQ_CST);
            d = __atomic_load_n(&s->done, __ATOMIC_SEQ_CST);
            if (d >= n)
                break;
            mc_futex_wait_(&s->done, (uint32_t)d);
        }
        __atomic_store_n(&s->sleeping, 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&s->state, ((gen + 1) & 0xFFFFFF) << 40, __ATOMIC_RELEASE);
    __atomic_store_n(&s->owner, 0, __ATOMIC_RELEASE);
}

#endif
