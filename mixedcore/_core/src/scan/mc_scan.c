/* The scan driver: all_finite, unscale-and-check and the numerics statistics over many arrays
 * in one call.
 *
 * Design:
 *   a. One call takes every array as a descriptor (mc_scan_array: first element, type, shape,
 *      byte strides), so a list of hundreds of small gradients costs one call.  Arrays of no
 *      element are skipped.  The caller has checked types, byte order, alignment and, for
 *      unscale, that every array is writable.
 *   b. Each array is normalised for a scan in any order: length-1 dimensions dropped, negative
 *      strides flipped (the base moved to the lowest address), dimensions sorted by decreasing
 *      stride and contiguous neighbours merged.  So reversed and transposed views become one
 *      contiguous run for the vector kernels; only truly strided data takes the scalar loop.
 *      all_finite and stats drop stride-0 dimensions (the same elements again; stats' callers
 *      pass none, since every element counts).  unscale refuses them, and any array whose
 *      sorted strides do not prove it free of internal overlap (each stride at least the
 *      extent of the dimensions inside it), because an element reached twice would be
 *      multiplied twice: MC_SCAN_SELF_OVERLAP with the array's index; the caller decides
 *      exactly.
 *   c. The work units are byte ranges of the concatenation of all arrays (boundaries on 64-byte
 *      multiples; in each array an element belongs to the range holding its first byte), so one
 *      huge array and many small ones balance alike; about eight per thread and at least the
 *      piece size, taken dynamically by the team (mc_run).  A call stays on its caller below
 *      the scan's size threshold.  all_finite units share a stop flag, polled between chunks
 *      of MC_SCAN_CHUNK bytes, and all stop at the first non-finite block any of them finds.
 *   d. unscale first validates every array (no internal overlap; with check_extents, no overlap
 *      between arrays, by a sort of their byte extents: MC_SCAN_MAY_OVERLAP, the caller then
 *      checks every pair exactly), then writes: nothing is modified when something is refused.
 *   e. stats walks the same descriptors and byte-range units; each unit keeps its own tally,
 *      summed when the team is done.
 *   f. The thresholds are read once per call; mc_scan_set_thresholds changes them (for tuning,
 *      and for tests that exercise the splitting on small inputs).
 */
#include "mc_scan.h"

#include <stdlib.h>
#include <string.h>
#include "mc_checked.h"
#include "mc_convert.h"
#include "mc_kernels.h"
#include "mc_runtime.h"

/* bytes below which a scan / an unscale stays on the calling thread, and the smallest piece of
 * work a thread takes at a time (a multiple of 64) */
static int64_t mc_scan_parallel_min_ = (int64_t)1 << 20;
static int64_t mc_unscale_parallel_min_ = (int64_t)1 << 19;
static int64_t mc_scan_piece_min_ = (int64_t)1 << 18;
/* bytes between two polls of the shared stop flag */
#define MC_SCAN_CHUNK ((int64_t)1 << 16)

void mc_scan_set_thresholds(int64_t scan, int64_t unscale, int64_t piece, int64_t previous[3])
{
    previous[0] = __atomic_load_n(&mc_scan_parallel_min_, __ATOMIC_RELAXED);
    previous[1] = __atomic_load_n(&mc_unscale_parallel_min_, __ATOMIC_RELAXED);
    previous[2] = __atomic_load_n(&mc_scan_piece_min_, __ATOMIC_RELAXED);
    if (scan >= 0)
        __atomic_store_n(&mc_scan_parallel_min_, scan, __ATOMIC_RELAXED);
    if (unscale >= 0)
        __atomic_store_n(&mc_unscale_parallel_min_, unscale, __ATOMIC_RELAXED);
    if (piece >= 64)
        __atomic_store_n(&mc_scan_piece_min_, piece & ~(int64_t)63, __ATOMIC_RELAXED);
}

/* One array, normalised (design b). */
typedef struct {
    char *data;
    int type, itemsize, nd;
    int64_t size;              /* elements scanned */
    int64_t start;             /* byte offset in the concatenation */
    int64_t *shape, *stride;   /* outer first, strides > 0 */
} mc_scan_desc_;

typedef struct {
    mc_scan_desc_ *desc;
    int64_t *pool;
    int64_t count;
    int64_t total_bytes;
} mc_scan_set_;

static void mc_scan_set_free_(mc_scan_set_ *t)
{
    free(t->desc);
    free(t->pool);
}

/* Design b.  Fills shape/stride (outer first), returns the number of dimensions (>= 1), or -1
 * when an element is reached twice (only with for_write). */
static int mc_scan_normalize_(const mc_scan_array *a, int itemsize, int for_write, char **data,
                              int64_t *shape, int64_t *stride)
{
    char *base = a->data;
    int k = 0;
    for (int i = 0; i < a->nd; ++i) {
        const int64_t n = a->shape[i];
        int64_t s = a->strides[i];
        if (n == 1)
            continue;
        if (s < 0) {
            base += (n - 1) * s;
            s = -s;
        }
        if (s == 0) {
            if (for_write)
                return -1;
            continue;
        }
        /* insertion by decreasing stride */
        int j = k;
        while (j > 0 && stride[j - 1] < s) {
            stride[j] = stride[j - 1];
            shape[j] = shape[j - 1];
            --j;
        }
        stride[j] = s;
        shape[j] = n;
        ++k;
    }
    if (for_write) {
        int64_t extent = itemsize;
        for (int i = k - 1; i >= 0; --i) {
            if (stride[i] < extent)
                return -1;
            extent += stride[i] * (shape[i] - 1);
        }
    }
    /* merge neighbours that are contiguous */
    int j = 0;
    for (int i = 0; i < k; ++i) {
        if (j > 0 && stride[j - 1] == stride[i] * shape[i]) {
            shape[j - 1] *= shape[i];
            stride[j - 1] = stride[i];
        } else {
            shape[j] = shape[i];
            stride[j] = stride[i];
            ++j;
        }
    }
    if (j == 0) {
        shape[0] = 1;
        stride[0] = itemsize;
        j = 1;
    }
    *data = base;
    return j;
}

/* Fills t from the arrays (design a, b).  MC_SCAN_OK, or an error with *index set for
 * MC_SCAN_SELF_OVERLAP and MC_SCAN_EINVAL. */
static int mc_scan_build_(mc_scan_set_ *t, const mc_scan_array *arrays, int64_t count,
                          int for_write, int64_t *index)
{
    int64_t dims = 0, offset = 0;
    t->desc = NULL;
    t->pool = NULL;
    t->count = 0;
    t->total_bytes = 0;
    for (int64_t i = 0; i < count; ++i) {
        const mc_scan_array *a = &arrays[i];
        if (a->type < 0 || a->type >= MC_NDTYPES || a->nd < 0 || a->nd > MC_SCAN_MAXDIMS) {
            *index = i;
            return MC_SCAN_EINVAL;
        }
        dims += a->nd > 1 ? a->nd : 1;
    }
    t->desc = (mc_scan_desc_ *)malloc((size_t)(count > 1 ? count : 1) * sizeof(mc_scan_desc_));
    t->pool = (int64_t *)malloc((size_t)(dims > 1 ? 2 * dims : 2) * sizeof(int64_t));
    if (t->desc == NULL || t->pool == NULL) {
        mc_scan_set_free_(t);
        return MC_SCAN_NOMEM;
    }
    dims = 0;
    for (int64_t i = 0; i < count; ++i) {
        const mc_scan_array *a = &arrays[i];
        const int w = a->nd > 1 ? a->nd : 1;
        int64_t size = 1;
        for (int k = 0; k < a->nd; ++k)
            size = mc_size_mul(size, a->shape[k]);
        if (size == 0)
            continue;
        if (size < 0) {
            mc_scan_set_free_(t);
            *index = i;
            return MC_SCAN_TOOBIG;
        }
        mc_scan_desc_ *d = &t->desc[t->count];
        d->type = a->type;
        d->itemsize = mc_dtype_size(a->type);
        d->shape = t->pool + dims;
        d->stride = t->pool + dims + w;
        const int nd = mc_scan_normalize_(a, d->itemsize, for_write, &d->data, d->shape,
                                          d->stride);
        if (nd < 0) {
            mc_scan_set_free_(t);
            *index = i;
            return MC_SCAN_SELF_OVERLAP;
        }
        dims += 2 * w;
        d->nd = nd;
        /* what is actually scanned (all_finite drops stride-0 dimensions) */
        d->size = 1;
        for (int k = 0; k < nd; ++k)
            d->size *= d->shape[k];
        d->start = offset;
        offset = mc_size_add(offset, mc_size_mul(d->size, d->itemsize));
        t->count += 1;
        if (offset < 0) {
            mc_scan_set_free_(t);
            *index = i;
            return MC_SCAN_TOOBIG;
        }
    }
    t->total_bytes = offset;
    return MC_SCAN_OK;
}

typedef struct {
    uintptr_t lo, hi;
} mc_scan_extent_;

static int mc_scan_extent_cmp_(const void *x, const void *y)
{
    const uintptr_t a = ((const mc_scan_extent_ *)x)->lo, b = ((const mc_scan_extent_ *)y)->lo;
    return a < b ? -1 : a > b ? 1 : 0;
}

/* MC_SCAN_OK when the byte extents of the arrays are pairwise disjoint, else
 * MC_SCAN_MAY_OVERLAP (design d), or MC_SCAN_NOMEM. */
static int mc_scan_check_extents_(const mc_scan_set_ *t)
{
    const int64_t n = t->count;
    if (n < 2)
        return MC_SCAN_OK;
    mc_scan_extent_ *ext = (mc_scan_extent_ *)malloc((size_t)n * sizeof(mc_scan_extent_));
    if (ext == NULL)
        return MC_SCAN_NOMEM;
    for (int64_t i = 0; i < n; ++i) {
        const mc_scan_desc_ *d = &t->desc[i];
        int64_t span = d->itemsize;
        for (int k = 0; k < d->nd; ++k)
            span += d->stride[k] * (d->shape[k] - 1);
        ext[i].lo = (uintptr_t)d->data;
        ext[i].hi = (uintptr_t)d->data + (uintptr_t)span;
    }
    qsort(ext, (size_t)n, sizeof(mc_scan_extent_), mc_scan_extent_cmp_);
    int r = MC_SCAN_OK;
    uintptr_t hi = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (i > 0 && ext[i].lo < hi) {
            r = MC_SCAN_MAY_OVERLAP;
            break;
        }
        if (ext[i].hi > hi)
            hi = ext[i].hi;
    }
    free(ext);
    return r;
}

/* --- all_finite and unscale (design c, d) ------------------------------------------------------ */

typedef struct {
    const mc_scan_desc_ *desc;
    int64_t count;
    int64_t total;
    int64_t chunk;
    int write;
    const mc_scan_table *k;
    float inv32;
    double inv64;
    int stop;
    int64_t nbad;
} mc_scan_job_;

/* One row of n elements at p; returns 1 when all were finite.  all_finite polls the stop flag
 * between chunks and returns 0 once it is set. */
static int mc_scan_row_(const mc_scan_job_ *job, const mc_scan_desc_ *d, char *p, int64_t n,
                        int *stop)
{
    const int64_t s = d->stride[d->nd - 1];
    if (job->write) {
        if (s == d->itemsize)
            return job->k->unscale[d->type](p, n, job->inv32, job->inv64);
        return mc_unscale_strided(d->type, p, s, n, job->inv32, job->inv64);
    }
    const int64_t chunk = MC_SCAN_CHUNK / d->itemsize;
    while (n > 0) {
        if (mc_flag_get(stop))
            return 0;
        const int64_t step = n > chunk ? chunk : n;
        if (s == d->itemsize) {
            if (!job->k->all_finite[d->type](p, step)) {
                mc_flag_set(stop);
                return 0;
            }
        } else if (!mc_all_finite_strided(d->type, p, s, step)) {
            mc_flag_set(stop);
            return 0;
        }
        p += step * s;
        n -= step;
    }
    return 1;
}

/* Calls row(ctx, d, p, n) for the rows of elements [e0, e1) of one array in its normalised
 * order; for a scan that stops (row returns 0 and stop_early) returns 0 at once, else 0 when
 * any row returned 0. */
typedef int (*mc_scan_row_fn_)(void *ctx, const mc_scan_desc_ *d, char *p, int64_t n);

static int mc_scan_elements_(const mc_scan_desc_ *d, int64_t e0, int64_t e1, mc_scan_row_fn_ row,
                             void *ctx, int stop_early)
{
    int64_t idx[MC_SCAN_MAXDIMS];
    const int64_t inner = d->shape[d->nd - 1];
    int64_t off = 0, e = e0;
    int ok = 1;
    if (e0 >= e1)
        return 1;
    int64_t r = e0 / inner;
    int64_t col = e0 - r * inner;
    for (int j = d->nd - 2; j >= 0; --j) {
        idx[j] = r % d->shape[j];
        r /= d->shape[j];
        off += idx[j] * d->stride[j];
    }
    while (e < e1) {
        int64_t cnt = inner - col;
        if (cnt > e1 - e)
            cnt = e1 - e;
        if (!row(ctx, d, d->data + off + col * d->stride[d->nd - 1], cnt)) {
            ok = 0;
            if (stop_early)
                return 0;
        }
        e += cnt;
        col = 0;
        for (int j = d->nd - 2; j >= 0; --j) {
            idx[j] += 1;
            off += d->stride[j];
            if (idx[j] < d->shape[j])
                break;
            off -= d->stride[j] * d->shape[j];
            idx[j] = 0;
        }
    }
    return ok;
}

static inline int64_t mc_ceil_div_(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Every element whose first byte lies in [b0, b1) of the concatenation (design c). */
static int mc_scan_bytes_(const mc_scan_desc_ *desc, int64_t count, int64_t b0, int64_t b1,
                          mc_scan_row_fn_ row, void *ctx, int stop_early)
{
    int64_t lo_i = 0, hi_i = count;
    int ok = 1;
    /* the first array that ends after b0 (starts are increasing) */
    while (hi_i - lo_i > 1) {
        const int64_t mid = (lo_i + hi_i) / 2;
        if (desc[mid].start <= b0)
            lo_i = mid;
        else
            hi_i = mid;
    }
    for (int64_t i = lo_i; i < count; ++i) {
        const mc_scan_desc_ *d = &desc[i];
        const int64_t nbytes = d->size * d->itemsize;
        if (d->start >= b1)
            break;
        if (d->start + nbytes <= b0)
            continue;
        int64_t lo = b0 - d->start, hi = b1 - d->start;
        lo = lo > 0 ? mc_ceil_div_(lo, d->itemsize) : 0;
        hi = hi < nbytes ? mc_ceil_div_(hi, d->itemsize) : d->size;
        if (!mc_scan_elements_(d, lo, hi, row, ctx, stop_early)) {
            ok = 0;
            if (stop_early)
                return 0;
        }
    }
    return ok;
}

static int mc_scan_row_cb_(void *ctx, const mc_scan_desc_ *d, char *p, int64_t n)
{
    mc_scan_job_ *job = (mc_scan_job_ *)ctx;
    return mc_scan_row_(job, d, p, n, &job->stop);
}

/* Byte range c of the concatenation (design c). */
static void mc_scan_unit_(void *ctx, int64_t c)
{
    mc_scan_job_ *job = (mc_scan_job_ *)ctx;
    const int64_t b0 = c * job->chunk;
    const int64_t b1 = b0 + job->chunk < job->total ? b0 + job->chunk : job->total;
    if (job->write || !mc_flag_get(&job->stop)) {
        if (!mc_scan_bytes_(job->desc, job->count, b0, b1, mc_scan_row_cb_, job, !job->write))
            mc_fetch_add(&job->nbad, 1);
    }
}

/* Pieces of 1/8 of a thread's share, at least the piece size, 64-byte multiples. */
static int64_t mc_scan_chunk_(int64_t total, int nthreads)
{
    const int64_t piece = __atomic_load_n(&mc_scan_piece_min_, __ATOMIC_RELAXED);
    const int64_t share = total / (8 * (int64_t)nthreads);
    return (share > piece ? share : piece) & ~(int64_t)63;
}

static int mc_scan_execute_(const mc_scan_set_ *t, int write, float inv32, double inv64)
{
    mc_scan_job_ job;
    job.desc = t->desc;
    job.count = t->count;
    job.total = t->total_bytes;
    job.write = write;
    job.k = &mc_kernels(mc_rt_level())->scan;
    job.inv32 = inv32;
    job.inv64 = inv64;
    job.stop = 0;
    job.nbad = 0;
    const int64_t threshold = write ? __atomic_load_n(&mc_unscale_parallel_min_, __ATOMIC_RELAXED)
                                    : __atomic_load_n(&mc_scan_parallel_min_, __ATOMIC_RELAXED);
    const int nthreads = mc_rt_threads_for(job.total, threshold);
    job.chunk = mc_scan_chunk_(job.total, nthreads);
    mc_run(mc_scan_unit_, &job, mc_ceil_div_(job.total, job.chunk), nthreads);
    return job.nbad == 0;
}

int mc_scan_all_finite(const mc_scan_array *arrays, int64_t count, int *finite, int64_t *index)
{
    mc_scan_set_ t;
    const int r = mc_scan_build_(&t, arrays, count, 0, index);
    if (r != MC_SCAN_OK)
        return r;
    *finite = mc_scan_execute_(&t, 0, 0.0f, 0.0);
    mc_scan_set_free_(&t);
    return MC_SCAN_OK;
}

int mc_scan_unscale(const mc_scan_array *arrays, int64_t count, double scale, int check_extents,
                    int *finite, int64_t *index)
{
    float inv32;
    double inv64;
    mc_scan_set_ t;
    mc_reciprocal(scale, &inv32, &inv64);
    int r = mc_scan_build_(&t, arrays, count, 1, index);
    if (r != MC_SCAN_OK)
        return r;
    if (check_extents) {
        r = mc_scan_check_extents_(&t);
        if (r != MC_SCAN_OK) {
            *index = 0;
            mc_scan_set_free_(&t);
            return r;
        }
    }
    *finite = mc_scan_execute_(&t, 1, inv32, inv64);
    mc_scan_set_free_(&t);
    return MC_SCAN_OK;
}

/* --- stats (design e) -------------------------------------------------------------------------- */

typedef struct {
    const mc_scan_desc_ *desc;
    int64_t count;
    int64_t total;
    int64_t chunk;
    const mc_scan_table *k;
    mc_stats *tallies;
} mc_stats_job_;

typedef struct {
    const mc_scan_table *k;
    mc_stats *tally;
} mc_stats_row_ctx_;

static int mc_stats_row_(void *ctx, const mc_scan_desc_ *d, char *p, int64_t n)
{
    const mc_stats_row_ctx_ *c = (const mc_stats_row_ctx_ *)ctx;
    const int64_t s = d->stride[d->nd - 1];
    if (s == d->itemsize)
        c->k->stats[d->type](p, n, c->tally);
    else
        mc_stats_strided(d->type, p, s, n, c->tally);
    return 1;
}

/* Byte range c of the concatenation into tally c. */
static void mc_stats_unit_(void *ctx, int64_t c)
{
    const mc_stats_job_ *job = (const mc_stats_job_ *)ctx;
    const int64_t b0 = c * job->chunk;
    const int64_t b1 = b0 + job->chunk < job->total ? b0 + job->chunk : job->total;
    mc_stats_row_ctx_ rc = {job->k, &job->tallies[c]};
    mc_scan_bytes_(job->desc, job->count, b0, b1, mc_stats_row_, &rc, 0);
}

int mc_scan_stats(const mc_scan_array *arrays, int64_t count, mc_stats *total, int64_t *index)
{
    mc_scan_set_ t;
    mc_stats_job_ job;
    memset(total, 0, sizeof *total);
    int r = mc_scan_build_(&t, arrays, count, 0, index);
    if (r != MC_SCAN_OK)
        return r;
    job.desc = t.desc;
    job.count = t.count;
    job.total = t.total_bytes;
    job.k = &mc_kernels(mc_rt_level())->scan;
    const int nthreads = mc_rt_threads_for(job.total, __atomic_load_n(&mc_scan_parallel_min_,
                                                                      __ATOMIC_RELAXED));
    job.chunk = mc_scan_chunk_(job.total, nthreads);
    const int64_t units = mc_ceil_div_(job.total, job.chunk);
    job.tallies = (mc_stats *)calloc((size_t)(units > 1 ? units : 1), sizeof(mc_stats));
    if (job.tallies == NULL) {
        mc_scan_set_free_(&t);
        return MC_SCAN_NOMEM;
    }
    mc_run(mc_stats_unit_, &job, units, nthreads);
    for (int64_t u = 0; u < units; ++u) {
        for (int k = 0; k < MC_NSTATS; ++k)
            total->count[k] += job.tallies[u].count[k];
        if (job.tallies[u].max_bits > total->max_bits)
            total->max_bits = job.tallies[u].max_bits;
    }
    free(job.tallies);
    mc_scan_set_free_(&t);
    return MC_SCAN_OK;
}
