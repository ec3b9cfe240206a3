/* Per-thread workspaces; see mc_workspace.h for the design. */
#include "mc_workspace.h"
#include "mc_checked.h"

#include <stdlib.h>
#if defined(__unix__) || defined(__APPLE__)
#define MC_POSIX_ 1
#include <pthread.h>
#include <sys/mman.h>
#endif

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
    if (ws == NULL || slot < 0 || slot >= MC_WS_COUNT || bytes < 0 || bytes > MC_BYTES_MAX)
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
