/* The scalar twin of the fused attention unit (mc_attn.h): the specification every level
 * reproduces bit for bit, and the pieces the vector units share (packing, rounding, stores).
 *
 * Design:
 *   a. Every float32 sum is a chain of fmaf() calls in the order of mc_attn.h design a.1
 *      (mc_attn_dot_); fmaf is correctly rounded, as the FMA instructions of the vector units
 *      are, and the build's -ffp-contract=off keeps the compiler from fusing anything else.
 *   b. The softmax is mc_softmax_row_sd_ itself, on the masked float32 scores; for 16-bit
 *      inputs, whose probabilities are rounded to that type, the float32 mc_softmax16_row_ss_
 *      (mc_act_scalar.h, design g).
 *   c. Static inline, standard headers only: each level file instantiates the unit with its
 *      own flags (MC_ATTN_SCALAR_UNIT_).
 */
#ifndef MC_ATTN_SCALAR_H_
#define MC_ATTN_SCALAR_H_

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_act_scalar.h"
#include "mc_attn_kernels.h"
#include "mc_gemm_scalar.h"

/* The float32 value v rounded to `type` (and widened back). */
static inline float mc_attn_round_(float v, int type)
{
    const uint32_t u = mc_gemm_bits_from_f32_(v);
    if (type == MC_BF16)
        return mc_gemm_f32_from_bits_(mc_bf16_to_f32_bits(mc_f32_to_bf16_bits(u)));
    if (type == MC_F16)
        return mc_gemm_f32_from_bits_(mc_f16_to_f32_bits(mc_f32_to_f16_bits(u)));
    return v;
}

static inline void mc_attn_store_(char *p, int type, float v)
{
    const uint32_t u = mc_gemm_bits_from_f32_(v);
    if (type == MC_F32) {
        memcpy(p, &u, 4);
        return;
    }
    const uint16_t h = type == MC_BF16 ? mc_f32_to_bf16_bits(u) : mc_f32_to_f16_bits(u);
    memcpy(p, &h, 2);
}

/* The workspace of a unit (mc_attn.h design e). */
typedef struct {
    float *kt;      /* d rows of sp: kt[dd * sp + j] = k[j, dd] */
    float *vv;      /* s rows of dvp: vv[j * dvp + c] = v[j, c] */
    float *x, *y;   /* 4 rows of sp: the scores, the probabilities */
    float *qr;      /* 4 query rows of d rounded up to 16 */
    float *orow;    /* 4 rows of dvp: the output */
    double *keep;   /* sp + 8: the softmax's terms (vector units) */
    void *vpairs;   /* (s + 1) / 2 rows of dvp 32-bit words: V as bfloat16 pairs */
    void *row16;    /* two rows of pad16(max(d, dv)) + 32 bfloat16: scratch */
    int64_t sp, dvp;
} mc_attn_ws;

static inline float *mc_attn_align64_(char *p)
{
    return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* Cuts the workspace (mc_attn.h design e). */
static inline void mc_attn_layout_(const mc_attn_args *a, void *work, mc_attn_ws *w)
{
    const int64_t sp = mc_attn_pad16_(a->s), dvp = mc_attn_pad16_(a->dv);
    w->sp = sp;
    w->dvp = dvp;
    w->kt = mc_attn_align64_((char *)work);
    w->vv = w->kt + a->d * sp + 64;
    w->x = w->vv + a->s * dvp + 64;
    w->y = w->x + 4 * sp;
    w->qr = w->y + 4 * sp;
    w->orow = w->qr + 4 * mc_attn_pad16_(a->d);
    w->keep = (double *)mc_attn_align64_((char *)(w->orow + 4 * dvp));
    w->vpairs = mc_attn_align64_((char *)(w->keep + sp + 8));
    w->row16 = mc_attn_align64_((char *)((float *)w->vpairs + (a->s + 1) / 2 * dvp + 64));
}

/* Cuts the workspace and fills kt and vv from unit bh's K and V (padding lanes zero). */
static inline void mc_attn_prepare_(const mc_attn_args *a, int64_t bh, void *work,
                                    mc_attn_ws *w)
{
    const int64_t bi = bh / a->h, hi = bh % a->h;
    mc_attn_layout_(a, work, w);
    const int64_t sp = w->sp, dvp = w->dvp;
    const char *k = a->k + bi * a->k_st[0] + hi * a->k_st[1];
    for (int64_t j = 0; j < a->s; ++j) {
        const char *kr = k + j * a->k_st[2];
        for (int64_t dd = 0; dd < a->d; ++dd)
            w->kt[dd * sp + j] = mc_gemm_load_elem_(kr + dd * a->k_st[3], a->type);
    }
    for (int64_t dd = 0; dd < a->d; ++dd)
        for (int64_t j = a->s; j < sp; ++j)
            w->kt[dd * sp + j] = 0.0f;
    const char *v = a->v + bi * a->v_st[0] + hi * a->v_st[1];
    for (int64_t j = 0; j < a->s; ++j) {
        const char *vr = v + j * a->v_st[2];
        float *dst = w->vv + j * dvp;
        int64_t c = 0;
        for (; c < a->dv; ++c)
            dst[c] = mc_gemm_load_elem_(vr + c * a->v_st[3], a->type);
        for (; c < dvp; ++c)
            dst[c] = 0.0f;
    }
}

/* Query row i of unit bh into qr (float32). */
static inline void mc_attn_load_q_(const mc_attn_args *a, int64_t bh, int64_t i, float *qr)
{
    const char *q = a->q + (bh / a->h) * a->q_st[0] + (bh % a->h) * a->q_st[1] + i * a->q_st[2];
    for (int64_t dd = 0; dd < a->d; ++dd)
        qr[dd] = mc_gemm_load_elem_(q + dd * a->q_st[3], a->type);
}

/* The mask row (i) of unit bh, or NULL. */
static inline const unsigned char *mc_attn_mask_row_(const mc_attn_args *a, int64_t bh,
                                                     int64_t i)
{
    if (a->mask == NULL)
        return NULL;
    return a->mask + (bh / a->h) * a->m_st[0] + (bh % a->h) * a->m_st[1] + i * a->m_st[2];
}

static inline int mc_attn_masked_(const mc_attn_args *a, const unsigned char *mrow, int64_t i,
                                  int64_t j)
{
    return (mrow != NULL && mrow[j * a->m_st[3]] == 0) || (a->causal && j > i);
}

/* sum_k x[k] * y[k * ys] over n terms in the order of mc_attn.h design a.1. */
static inline float mc_attn_dot_(const float *x, const float *y, int64_t ys, int64_t n,
                                 int pairs)
{
    const int64_t kc = pairs ? MC_ATTN_KC_PAIRS : MC_ATTN_KC;
    float total = 0.0f;
    for (int64_t k0 = 0; k0 < n; k0 += kc) {
        const int64_t k1 = n - k0 < kc ? n : k0 + kc;
        float acc = 0.0f;
        int64_t k = k0;
        if (pairs) {
            for (; k + 1 < k1; k += 2) {
                acc = fmaf(x[k + 1], y[(k + 1) * ys], acc);
                acc = fmaf(x[k], y[k * ys], acc);
            }
        }
        for (; k < k1; ++k)
            acc = fmaf(x[k], y[k * ys], acc);
        total = k0 == 0 ? acc : total + acc;
    }
    return total;
}

/* Output row i of unit bh from orow (float32), rounded to out_type. */
static inline void mc_attn_store_row_(const mc_attn_args *a, int64_t bh, int64_t i,
                                      const float *orow)
{
    char *o = a->out + (bh / a->h) * a->o_st[0] + (bh % a->h) * a->o_st[1] + i * a->o_st[2];
    for (int64_t c = 0; c < a->dv; ++c)
        mc_attn_store_(o + c * a->o_st[3], a->out_type, orow[c]);
}

static inline void mc_attn_unit_scalar_(const mc_attn_args *a, int64_t bh, void *work)
{
    mc_attn_ws w;
    mc_attn_prepare_(a, bh, work, &w);
    const int pairs = a->type == MC_BF16;
    for (int64_t i = 0; i < a->t; ++i) {
        const unsigned char *mrow = mc_attn_mask_row_(a, bh, i);
        mc_attn_load_q_(a, bh, i, w.qr);
        for (int64_t j = 0; j < a->s; ++j) {
            float sc = mc_attn_dot_(w.qr, w.kt + j, w.sp, a->d, pairs);
            if (a->scale != 1.0f)
                sc = a->scale * sc;
            w.x[j] = mc_attn_masked_(a, mrow, i, j) ? MC_ATTN_MASKED : sc;
        }
        if (a->type == MC_F32)
            mc_softmax_row_sd_(w.x, w.y, a->s, 0);
        else
            mc_softmax16_row_ss_(w.x, w.y, a->s);
        for (int64_t j = 0; j < a->s; ++j)
            w.y[j] = mc_attn_masked_(a, mrow, i, j) ? 0.0f : mc_attn_round_(w.y[j], a->type);
        for (int64_t c = 0; c < a->dv; ++c)
            w.orow[c] = mc_attn_dot_(w.y, w.vv + c, w.dvp, a->s, pairs);
        mc_attn_store_row_(a, bh, i, w.orow);
    }
}

#define MC_ATTN_SCALAR_UNIT_(isa)                                                            \
    static void mc_attn_unit_##isa(const mc_attn_args *a, int64_t bh, void *work)            \
    {                                                                                         \
        mc_attn_unit_scalar_(a, bh, work);                                                    \
    }

#endif
