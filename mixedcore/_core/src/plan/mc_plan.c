/* The plan runner; see mc_plan.h. */
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_kernels.h"
#include "mc_plan.h"
#include "mc_runtime.h"

/* scale (m values of type) widened to float32 (exactly) into s32 */
static void mc_widen_scales_(const char *scale, int type, int64_t r0, int64_t r1, float *s32)
{
    for (int64_t i = r0; i < r1; ++i) {
        uint32_t bits;
        if (type == MC_F32) {
            memcpy(&bits, scale + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, scale + 2 * i, 2);
            bits = type == MC_BF16 ? mc_bf16_to_f32_bits(h) : mc_f16_to_f32_bits(h);
        }
        memcpy(s32 + i, &bits, 4);
    }
}

/* design d: a band of normalized rows quantized, their scales widened */
typedef struct {
    const mc_norm_job *job;
    mc_igemm_quant_fn quant;
    mc_igemm_quant_zp_fn quant_zp;
    int8_t *q;
    char *scale;
    float *s32;
    int32_t *zero;               /* NULL: no zero points */
} mc_nq_;

static void mc_nq_band_(void *ctx, int64_t r0, int64_t r1)
{
    const mc_nq_ *r = (const mc_nq_ *)ctx;
    const mc_norm_job *job = r->job;
    const int64_t es = job->y_type == MC_F32 ? 4 : 2;
    if (r->zero != NULL) {
        for (int64_t i = r0; i < r1; ++i)
            r->quant_zp((const char *)job->y + i * job->n * es, job->y_type, job->n, es,
                        r->q + i * job->n, 1, r->s32 + i, r->zero + i);
        return;
    }
    for (int64_t i = r0; i < r1; ++i)
        r->quant((const char *)job->y + i * job->n * es, job->y_type, job->n, es,
                 r->q + i * job->n, 1, r->scale + i * es);
    mc_widen_scales_(r->scale, job->y_type, r0, r1, r->s32);
}

/* mc_iq_call (mc_plan.h): quantize the rows, widen their scales, multiply */
static int mc_iq_(const mc_iq_call *iq, const char *a, char *const *bufs, char *out)
{
    mc_igemm_call c = iq->call;
    const int64_t m = c.g.m, k = c.g.k, es = iq->a_type == MC_F32 ? 4 : 2;
    int8_t *q = (int8_t *)bufs[iq->q];
    float *s32 = (float *)bufs[iq->scale32];
    if (iq->zero >= 0) {
        c.g.a_zero = (const int32_t *)bufs[iq->zero];
        if (!iq->quantized)
            mc_igemm_quantize_zp(a, iq->a_type, m, k, k * es, es, q, k, s32,
                                 (int32_t *)bufs[iq->zero]);
    } else if (!iq->quantized) {
        mc_igemm_quantize(a, iq->a_type, m, k, k * es, es, q, k, bufs[iq->scale]);
        mc_widen_scales_(bufs[iq->scale], iq->a_type, 0, m, s32);
    }
    c.g.a = q;
    c.g.a_scale = s32;
    c.g.out = out;
    const int r = mc_igemm(&c);
    return r == MC_IGEMM_OK ? MC_PLAN_OK : r == MC_IGEMM_FORMAT ? MC_PLAN_FORMAT
                                         : r == MC_IGEMM_TOOBIG ? MC_PLAN_TOOBIG
                                         : r == MC_IGEMM_SIZE ? MC_PLAN_EARG : MC_PLAN_NOMEM;
}

/* bytes of padded output below which a padding step stays on the calling thread; rows of an
 * image per unit of a threaded one */
#define MC_PAD_PARALLEL_MIN ((int64_t)1 << 18)
#define MC_PAD_UNIT_BYTES ((int64_t)1 << 16)

typedef struct {
    const mc_pad_call *p;
    const char *x;
    char *y;
    int64_t rows;                /* output rows of a unit */
    int64_t units;               /* units of an image */
} mc_pad_job_;

/* Output rows [u * rows, ...) of one image: zeros, or a row of x between its zeros. */
static void mc_pad_unit_(void *ctx, int64_t u)
{
    const mc_pad_job_ *job = (const mc_pad_job_ *)ctx;
    const mc_pad_call *p = job->p;
    const int64_t pix = p->c * p->es, row = p->w * pix;
    const int64_t orow = (p->pl + p->w + p->pr) * pix, oh = p->pt + p->h + p->pb;
    const int64_t n = u / job->units, r0 = (u % job->units) * job->rows;
    const int64_t r1 = r0 + job->rows < oh ? r0 + job->rows : oh;
    for (int64_t r = r0; r < r1; ++r) {
        char *o = job->y + (n * oh + r) * orow;
        const int64_t i = r - p->pt;
        if (i < 0 || i >= p->h) {
            memset(o, 0, (size_t)orow);
            continue;
        }
        memset(o, 0, (size_t)(p->pl * pix));
        memcpy(o + p->pl * pix, job->x + (n * p->h + i) * row, (size_t)row);
        memset(o + p->pl * pix + row, 0, (size_t)(p->pr * pix));
    }
}

/* The padded images, in bands of output rows on the team (ResNet50's padding before its max
 * pooling, 112 x 112 x 64 bfloat16: 93 us on one thread, 77 us on two: it is bound by memory). */
static void mc_pad_(const mc_pad_call *p, const char *x, char *y)
{
    const int64_t orow = (p->pl + p->w + p->pr) * p->c * p->es, oh = p->pt + p->h + p->pb;
    if (p->n <= 0 || oh <= 0 || orow <= 0)
        return;
    mc_pad_job_ job = {p, x, y, 1, 1};
    job.rows = MC_PAD_UNIT_BYTES / orow > 1 ? MC_PAD_UNIT_BYTES / orow : 1;
    job.rows = job.rows < oh ? job.rows : oh;
    job.units = (oh + job.rows - 1) / job.rows;
    const int nt = mc_rt_threads_for(mc_work_mul(mc_work_mul(p->n, oh), orow), MC_PAD_PARALLEL_MIN);
    mc_run(mc_pad_unit_, &job, p->n * job.units, nt);
}

static int mc_gemm_status_(int r)
{
    return r == MC_GEMM_OK ? MC_PLAN_OK : r == MC_GEMM_FORMAT ? MC_PLAN_FORMAT
                                        : r == MC_GEMM_TOOBIG ? MC_PLAN_TOOBIG : MC_PLAN_NOMEM;
}

static int mc_dw_status_(int r)
{
    return r == MC_CONV_OK ? MC_PLAN_OK : r == MC_CONV_TOOBIG ? MC_PLAN_TOOBIG : MC_PLAN_NOMEM;
}

/* --- design e: a pointwise product, a depthwise convolution and a pointwise product ---------- */

/* A band's output rows: as many as keep its expanded rows (its windows' rows) within
 * MC_BLOCK_BAND_BYTES, and at least MC_BLOCK_BAND_PIXELS output pixels (each band calls the
 * three drivers once); a run whose units would leave a thread more than MC_BLOCK_SKEW times its
 * share runs the three steps one by one.  Measured on MobileNetV2 (docs/inference.md). */
#define MC_BLOCK_BAND_BYTES (96 * 1024)
#define MC_BLOCK_BAND_PIXELS 224
#define MC_BLOCK_SKEW 1.1

typedef struct {
    const mc_plan_step *e, *d, *p;   /* the three steps */
    const char *x, *res;
    char *y;
    int64_t parts, band;         /* ranges of output rows per image; output rows per band */
    int64_t erow;                /* bytes of an expanded row */
    int64_t ebytes, wbytes;      /* bytes of a band's expanded rows (64-byte multiple), and of
                                    those and its depthwise rows */
    int status;                  /* the first failure, MC_PLAN_* */
} mc_block_job_;

static int64_t mc_min_(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t mc_max_(int64_t a, int64_t b) { return a > b ? a : b; }

/* The expanded rows [lo, hi) whose windows output rows [a, b) read. */
static void mc_block_rows_(const mc_conv_geom *g, int64_t a, int64_t b, int64_t *lo, int64_t *hi)
{
    *lo = mc_min_(mc_max_(a * g->sh - g->pt, 0), g->h);
    *hi = mc_max_(mc_min_((b - 1) * g->sh - g->pt + (g->kh - 1) * g->dh + 1, g->h), *lo);
}

static void mc_block_fail_(mc_block_job_ *job, int r)
{
    int expected = MC_PLAN_OK;
    __atomic_compare_exchange_n(&job->status, &expected, r, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
}

static int mc_block_band_(const mc_block_job_ *job, int64_t n, int64_t a, int64_t b,
                          int64_t lo, int64_t hi, int64_t from, char *ebuf, char *dbuf)
{
    const mc_conv_geom *g = &job->d->u.dw.geo;
    const mc_gemm_call *ec = &job->e->u.gemm, *pc = &job->p->u.gemm;
    int r = MC_PLAN_OK;
    if (from < hi) {                 /* the expanded rows [from, hi) of image n */
        mc_gemm_call c = *ec;
        c.g.a = job->x + (n * g->h + from) * g->w * ec->g.a_rs;
        c.g.m = (hi - from) * g->w;
        c.g.out = ebuf + (from - lo) * job->erow;
        r = mc_gemm_status_(mc_gemm(&c));
    }
    if (r == MC_PLAN_OK) {           /* output rows [a, b) from the expanded rows [lo, hi) */
        mc_dw_call c = job->d->u.dw;
        c.geo.n = 1;
        c.geo.h = hi - lo;
        c.geo.oh = b - a;
        c.geo.pt = g->pt + lo - a * g->sh;
        c.x = ebuf;
        c.out = dbuf;
        r = mc_dw_status_(mc_conv_depthwise(&c));
    }
    if (r == MC_PLAN_OK) {
        const int64_t first = (n * g->oh + a) * g->ow;
        mc_gemm_call c = *pc;
        c.g.a = dbuf;
        c.g.m = (b - a) * g->ow;
        c.g.out = job->y + first * pc->g.o_rs;
        c.g.res = job->res != NULL ? job->res + first * pc->g.res_rs : NULL;
        r = mc_gemm_status_(mc_gemm(&c));
    }
    return r;
}

static void mc_block_unit_(void *ctx, int64_t u)
{
    mc_block_job_ *job = (mc_block_job_ *)ctx;
    if (__atomic_load_n(&job->status, __ATOMIC_RELAXED) != MC_PLAN_OK)
        return;
    const mc_conv_geom *g = &job->d->u.dw.geo;
    const int64_t n = u / job->parts, part = u - n * job->parts;
    const int64_t r0 = part * g->oh / job->parts, r1 = (part + 1) * g->oh / job->parts;
    const int64_t erow = job->erow;
    char *ebuf = (char *)mc_workspace(MC_WS_BLOCK, job->wbytes);
    if (ebuf == NULL) {
        mc_block_fail_(job, MC_PLAN_NOMEM);
        return;
    }
    /* the drivers run on this thread: the unit is the team's share of the work */
    const int threads = mc_rt_thread_override();
    mc_rt_set_thread_override(1);
    int64_t e0 = 0, e1 = 0;          /* the expanded rows ebuf holds */
    for (int64_t a = r0; a < r1; a += job->band) {
        const int64_t b = mc_min_(a + job->band, r1);
        int64_t lo, hi;
        mc_block_rows_(g, a, b, &lo, &hi);
        int64_t from = lo;
        if (lo >= e0 && lo < e1) {   /* rows the previous band expanded: moved to the top */
            memmove(ebuf, ebuf + (lo - e0) * erow, (size_t)((e1 - lo) * erow));
            from = e1;
        }
        const int r = mc_block_band_(job, n, a, b, lo, hi, from, ebuf, ebuf + job->ebytes);
        if (r != MC_PLAN_OK) {
            mc_block_fail_(job, r);
            break;
        }
        e0 = lo;
        e1 = hi;
    }
    mc_rt_set_thread_override(threads);
}

/* A block's run, or 1 when its units would share out unevenly (the steps then run one by one) */
static int mc_plan_block_(const mc_plan_step *st, char *const *bufs)
{
    const mc_plan_step *d = st + 1, *p = st + 2;
    const mc_conv_geom *g = &d->u.dw.geo;
    if (g->n == 0 || g->oh == 0 || g->ow == 0)
        return MC_PLAN_OK;
    mc_block_job_ job;
    memset(&job, 0, sizeof job);
    job.e = st;
    job.d = d;
    job.p = p;
    job.x = bufs[st->src];
    job.y = bufs[p->dst];
    job.res = p->src2 >= 0 ? bufs[p->src2] : NULL;
    /* units: the images, or ranges of output rows of them (the fewest ranges per image that
     * give every thread a unit and share out within MC_BLOCK_SKEW); else one by one */
    const int nt = mc_rt_threads();
    const int64_t least = mc_max_((nt + g->n - 1) / g->n, 1);
    for (job.parts = least; job.parts <= mc_min_(4 * least, g->oh); ++job.parts) {
        const int64_t units = g->n * job.parts;
        const double busiest = (double)((units + nt - 1) / nt) *
                               (double)((g->oh + job.parts - 1) / job.parts);
        if (units >= nt && busiest <= MC_BLOCK_SKEW * (double)g->n * (double)g->oh / nt)
            break;
    }
    if (job.parts > mc_min_(4 * least, g->oh))
        return 1;
    /* output rows per band (sizes: at most the steps' own buffers') */
    const int64_t span = (g->kh - 1) * g->dh + 1;
    job.erow = g->w * st->u.gemm.g.o_rs;
    const int64_t fit = MC_BLOCK_BAND_BYTES / mc_max_(job.erow, 1);
    job.band = mc_max_(fit > span ? (fit - span) / g->sh + 1 : 1,
                       (MC_BLOCK_BAND_PIXELS + g->ow - 1) / g->ow);
    job.band = mc_min_(job.band, g->oh);
    job.ebytes = mc_size_round64(mc_size_mul(mc_min_((job.band - 1) * g->sh + span, g->h),
                                             job.erow));
    job.wbytes = mc_size_add(job.ebytes, mc_size_mul(job.band * g->ow, p->u.gemm.g.a_rs));
    if (job.ebytes < 0 || job.wbytes < 0 || job.wbytes > MC_BYTES_MAX)
        return MC_PLAN_TOOBIG;
    mc_run(mc_block_unit_, &job, g->n * job.parts, nt);
    return job.status;
}

static int mc_plan_step_(const mc_plan_step *st, char *const *bufs)
{
    switch (st->kind) {
    case MC_STEP_GEMM: {
        mc_gemm_call c = st->u.gemm;
        c.g.a = bufs[st->src];
        c.g.out = bufs[st->dst];
        c.g.res = st->src2 >= 0 ? bufs[st->src2] : NULL;
        return mc_gemm_status_(mc_gemm(&c));
    }
    case MC_STEP_CONV: {
        mc_conv_call c = st->u.conv;
        c.x = bufs[st->src];
        c.out = bufs[st->dst];
        c.res = st->src2 >= 0 ? bufs[st->src2] : NULL;
        const int r = mc_conv_gemm(&c);
        return r == MC_CONV_OK ? MC_PLAN_OK : r == MC_CONV_FORMAT ? MC_PLAN_FORMAT
                                            : r == MC_CONV_TOOBIG ? MC_PLAN_TOOBIG
                                                                   : MC_PLAN_NOMEM;
    }
    case MC_STEP_DW: {
        mc_dw_call c = st->u.dw;
        c.x = bufs[st->src];
        c.out = bufs[st->dst];
        return mc_dw_status_(mc_conv_depthwise(&c));
    }
    case MC_STEP_POOL: {
        mc_pool_call c = st->u.pool;
        c.x = bufs[st->src];
        c.out = bufs[st->dst];
        const int r = mc_pool(&c);
        return r == MC_POOL_OK ? MC_PLAN_OK : r == MC_POOL_TOOBIG ? MC_PLAN_TOOBIG
                                                                   : MC_PLAN_NOMEM;
    }
    case MC_STEP_ADD: {
        const mc_add_call *c = &st->u.add;
        return mc_add_act(c->act, bufs[st->src], c->a_type, bufs[st->src2], c->b_type,
                          bufs[st->dst], c->y_type, c->n) == MC_ACT_OK ? MC_PLAN_OK
                                                                       : MC_PLAN_EARG;
    }
    case MC_STEP_NORM: {
        mc_norm_job job = st->u.norm.job;
        job.x = bufs[st->src];
        job.res = st->src2 >= 0 ? bufs[st->src2] : NULL;
        job.y = bufs[st->dst];
        const mc_norm_call *nc = &st->u.norm;
        const mc_igemm_table *it = &mc_kernels(mc_rt_level())->igemm;
        mc_nq_ nq = {.job = &job, .quant = it->quant, .quant_zp = it->quant_zp,
                     .q = nc->q >= 0 ? (int8_t *)bufs[nc->q] : NULL,
                     .scale = nc->q >= 0 && nc->zero < 0 ? bufs[nc->scale] : NULL,
                     .s32 = nc->q >= 0 ? (float *)bufs[nc->scale32] : NULL,
                     .zero = nc->q >= 0 && nc->zero >= 0 ? (int32_t *)bufs[nc->zero] : NULL};
        return mc_layer_norm_then(&job, nc->rows, nc->q >= 0 ? mc_nq_band_ : NULL, &nq) ==
                       MC_NORM_OK ? MC_PLAN_OK : MC_PLAN_EARG;
    }
    case MC_STEP_PAD:
        mc_pad_(&st->u.pad, bufs[st->src], bufs[st->dst]);
        return MC_PLAN_OK;
    case MC_STEP_IGEMM:
        return mc_iq_(&st->u.iq, bufs[st->src], bufs, bufs[st->dst]);
    case MC_STEP_ATTN: {
        mc_attn_args a = st->u.attn.a;
        a.q = bufs[st->src] + st->u.attn.q_off;
        a.k = bufs[st->src] + st->u.attn.k_off;
        a.v = bufs[st->src] + st->u.attn.v_off;
        a.out = bufs[st->dst];
        const int r = mc_attention(&a);
        return r == MC_ATTN_OK ? MC_PLAN_OK : r == MC_ATTN_TOOBIG ? MC_PLAN_TOOBIG
                                            : r == MC_ATTN_EARG ? MC_PLAN_EARG : MC_PLAN_NOMEM;
    }
    case MC_STEP_CAST: {
        const mc_cast_call *c = &st->u.cast;
        const int64_t ss = mc_dtype_size(c->src_type), ds = mc_dtype_size(c->dst_type);
        return mc_cast(bufs[st->src], c->src_type, &ss, bufs[st->dst], c->dst_type, &ds, 1,
                       &c->n, 0) == MC_CAST_OK ? MC_PLAN_OK : MC_PLAN_EARG;
    }
    default:
        return MC_PLAN_EARG;
    }
}

int mc_plan_run(const mc_plan_step *steps, int64_t s0, int64_t s1, char *const *bufs,
                int64_t *failed)
{
    for (int64_t i = s0; i < s1;) {
        int r = 1, done = 1;
        if (steps[i].block && i + 3 <= s1) {
            r = mc_plan_block_(&steps[i], bufs);
            done = 3;
        }
        if (r == 1) {
            r = mc_plan_step_(&steps[i], bufs);
            done = 1;
        }
        if (r != MC_PLAN_OK) {
            *failed = i;
            return r;
        }
        i += done;
    }
    return MC_PLAN_OK;
}
