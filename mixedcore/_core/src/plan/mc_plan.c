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
    int8_t *q;
    char *scale;
    float *s32;
} mc_nq_;

static void mc_nq_band_(void *ctx, int64_t r0, int64_t r1)
{
    const mc_nq_ *r = (const mc_nq_ *)ctx;
    const mc_norm_job *job = r->job;
    const int64_t es = job->y_type == MC_F32 ? 4 : 2;
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
    if (!iq->quantized) {
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

static void mc_pad_(const mc_pad_call *p, const char *x, char *y)
{
    const int64_t pix = p->c * p->es, row = p->w * pix;
    const int64_t ow = p->pl + p->w + p->pr, orow = ow * pix, oh = p->pt + p->h + p->pb;
    for (int64_t n = 0; n < p->n; ++n) {
        char *img = y + n * oh * orow;
        memset(img, 0, (size_t)(p->pt * orow));
        for (int64_t i = 0; i < p->h; ++i) {
            char *r = img + (p->pt + i) * orow;
            memset(r, 0, (size_t)(p->pl * pix));
            memcpy(r + p->pl * pix, x + (n * p->h + i) * row, (size_t)row);
            memset(r + p->pl * pix + row, 0, (size_t)(p->pr * pix));
        }
        memset(img + (p->pt + p->h) * orow, 0, (size_t)(p->pb * orow));
    }
}

static int mc_plan_step_(const mc_plan_step *st, char *const *bufs)
{
    switch (st->kind) {
    case MC_STEP_GEMM: {
        mc_gemm_call c = st->u.gemm;
        c.g.a = bufs[st->src];
        c.g.out = bufs[st->dst];
        c.g.res = st->src2 >= 0 ? bufs[st->src2] : NULL;
        const int r = mc_gemm(&c);
        return r == MC_GEMM_OK ? MC_PLAN_OK : r == MC_GEMM_FORMAT ? MC_PLAN_FORMAT
                                            : r == MC_GEMM_TOOBIG ? MC_PLAN_TOOBIG
                                                                   : MC_PLAN_NOMEM;
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
        const int r = mc_conv_depthwise(&c);
        return r == MC_CONV_OK ? MC_PLAN_OK : r == MC_CONV_TOOBIG ? MC_PLAN_TOOBIG
                                                                   : MC_PLAN_NOMEM;
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
        mc_nq_ nq = {.job = &job, .quant = mc_kernels(mc_rt_level())->igemm.quant,
                     .q = nc->q >= 0 ? (int8_t *)bufs[nc->q] : NULL,
                     .scale = nc->q >= 0 ? bufs[nc->scale] : NULL,
                     .s32 = nc->q >= 0 ? (float *)bufs[nc->scale32] : NULL};
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
    for (int64_t i = s0; i < s1; ++i) {
        const int r = mc_plan_step_(&steps[i], bufs);
        if (r != MC_PLAN_OK) {
            *failed = i;
            return r;
        }
    }
    return MC_PLAN_OK;
}
