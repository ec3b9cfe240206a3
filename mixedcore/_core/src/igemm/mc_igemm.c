/* int8 GEMM: the plan, the blocked loops, the work units, packing ahead, the scalar epilogue
 * and row quantization (mc_igemm.h has the design; the generic kernels are in
 * mc_igemm_generic.c). */
#include <stdlib.h>
#include <string.h>
#include "mc_checked.h"
#include "mc_igemm.h"
#include "mc_igemm_scalar.h"
#include "mc_kernels.h"
#include "mc_runtime.h"

/* multiply-adds below which a call stays on the calling thread (as the float GEMM's) */
#define MC_IGEMM_PARALLEL_MIN ((int64_t)1 << 19)
/* bytes of B below which packing stays on the calling thread */
#define MC_IPACK_PARALLEL_MIN ((int64_t)1 << 18)
/* values below which quantization stays on the calling thread */
#define MC_IQUANT_PARALLEL_MIN ((int64_t)1 << 17)
#define MC_UNITS_PER_THREAD_ 4
#define MC_EPI_ROW_ 64

static int64_t mc_min_(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t mc_max_(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t mc_ceil_div_(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t mc_round64_(int64_t x) { return (x + 63) & ~(int64_t)63; }

/* --- the scalar epilogue (design f) ------------------------------------------------------------ */

void mc_igemm_epi_scalar(const mc_igemm_args *g, const int32_t *tile, int ldt, int mr, int nr,
                         int64_t i, int64_t j, int first, int last)
{
    float v[MC_EPI_ROW_];
    for (int r = 0; r < mr; ++r) {
        const int64_t ii = i + r;
        for (int s0 = 0; s0 < nr; s0 += MC_EPI_ROW_) {
            const int n = nr - s0 < MC_EPI_ROW_ ? nr - s0 : MC_EPI_ROW_;
            for (int s = 0; s < n; ++s) {
                const int64_t jj = j + s0 + s;
                uint32_t t = (uint32_t)tile[r * ldt + s0 + s];
                char *acc = first && last ? NULL
                                          : (char *)g->acc + (ii - g->acc_r0) * g->acc_rs +
                                                (jj - g->acc_c0) * g->acc_cs;
                if (!first) {
                    int32_t p;
                    memcpy(&p, acc, 4);
                    t += (uint32_t)p;
                }
                int32_t st = (int32_t)t;
                if (last && g->a_zero != NULL)
                    st = mc_igemm_zp_(st, g->a_zero[ii], g->b_sum[jj]);
                if (!last || g->out_type == MC_IGEMM_I32) {
                    memcpy(last ? g->out + ii * g->o_rs + jj * g->o_cs : acc, &st, 4);
                    continue;
                }
                v[s] = mc_igemm_value_(st, g->a_scale[ii], g->b_scale[jj],
                                       g->bias ? (const float *)((const char *)g->bias +
                                                                 jj * g->bias_s)
                                               : NULL);
            }
            if (!last || g->out_type == MC_IGEMM_I32)
                continue;
            if (g->act != MC_ACT_NONE)
                g->act_row(g->act, v, v, n);
            for (int s = 0; s < n; ++s)
                mc_igemm_store_(g->out + ii * g->o_rs + (j + s0 + s) * g->o_cs, v[s], g->out_type);
        }
    }
}

/* --- sizes ----------------------------------------------------------------------------------- */

int64_t mc_igemm_packed_bytes(int nr, int64_t k, int64_t n, int64_t kc)
{
    /* per panel: every block's groups of 4 k and its nr sums (mc_checked.h) */
    if (k < 0 || kc <= 0)
        return -1;
    const int64_t blocks = mc_size_ceil_div(k, kc), full = k / kc, rest = k - full * kc;
    const int64_t words = mc_size_add(mc_size_mul(full, (kc + 3) / 4), (rest + 3) / 4 + blocks);
    return mc_size_bytes(mc_size_mul(mc_size_round_up(n, nr), words), 4);
}

/* --- the plan --------------------------------------------------------------------------------- */

typedef struct {
    const mc_igemm_kernel *kern;
    mc_igemm_epi_fn epi;
    int64_t mc, kc, nc;
    int nthreads;
} mc_iplan_;

/* Where B comes from: panels for columns [0, npad) in K blocks of kc. */
typedef struct {
    const char *data;
    int64_t npad, kc;
} mc_ibsrc_;

static const char *mc_panels_(const mc_iplan_ *p, const mc_ibsrc_ *bs, int64_t pc, int64_t kc,
                              int64_t jc)
{
    const int nr = p->kern->nr;
    const int64_t block = (pc / bs->kc) * (bs->npad / nr) * mc_igemm_panel_bytes_(nr, bs->kc);
    return bs->data + block + jc / nr * mc_igemm_panel_bytes_(nr, kc);
}

/* --- the blocked loops (design b) ----------------------------------------------------------- */

static int mc_irect_(const mc_iplan_ *p, const mc_igemm_args *gi, const mc_ibsrc_ *bs, int64_t m0,
                     int64_t m1, int64_t n0, int64_t n1)
{
    const mc_igemm_kernel *kern = p->kern;
    const int mr = kern->mr, nr = kern->nr;
    const int64_t K = gi->k;
    const int use_acc = gi->out_type != MC_IGEMM_I32 && K > p->kc;
    const int64_t ncmax = mc_min_(p->nc, n1 - n0);
    const int64_t ldt = mc_max_(mc_ceil_div_(ncmax, nr) * nr, (int64_t)MC_IGEMM_WIDE * nr);
    const int64_t kqmax = (p->kc + 3) / 4;
    const int64_t abytes = mc_round64_(p->mc * kqmax * 4 * kern->a_elem);
    const int64_t tbytes = mc_round64_((int64_t)mr * ldt * 4);
    const int64_t cbytes = use_acc ? mc_size_round64(mc_size_bytes(mc_size_mul(m1 - m0, ncmax), 4)) : 0;
    const int64_t wbytes = mc_size_add(mc_size_add(abytes, tbytes), cbytes);
    if (wbytes < 0 || wbytes > MC_BYTES_MAX)
        return -2;
    char *work = (char *)mc_workspace(MC_WS_WORK, wbytes);
    if (work == NULL)
        return -1;
    char *ap = work;
    int32_t *tile = (int32_t *)(work + abytes);
    mc_igemm_args g = *gi;
    if (K == 0) {
        memset(tile, 0, (size_t)mr * nr * 4);
        for (int64_t i = m0; i < m1; i += mr)
            for (int64_t j = n0; j < n1; j += nr)
                p->epi(&g, tile, nr, (int)mc_min_(m1 - i, mr), (int)mc_min_(n1 - j, nr), i, j, 1, 1);
        return 0;
    }
    for (int64_t jc = n0; jc < n1; jc += p->nc) {
        const int64_t nc = mc_min_(n1 - jc, p->nc);
        if (use_acc) {
            g.acc = (int32_t *)(work + abytes + tbytes);
            g.acc_rs = nc * 4;
            g.acc_cs = 4;
            g.acc_r0 = m0;
            g.acc_c0 = jc;
        }
        for (int64_t pc = 0; pc < K; pc += p->kc) {
            const int64_t kc = mc_min_(K - pc, p->kc), kq = (kc + 3) / 4;
            const int first = pc == 0, last = pc + kc >= K;
            const char *bp = mc_panels_(p, bs, pc, kc, jc);
            const int64_t pstride = mc_igemm_panel_bytes_(nr, kc);
            for (int64_t ic = m0; ic < m1; ic += p->mc) {
                const int64_t mcb = mc_min_(m1 - ic, p->mc);
                const int64_t apanel = kq * 4 * mr * kern->a_elem;
                for (int64_t ir = 0; ir < mcb; ir += mr)
                    kern->pack_a(g.a + (ic + ir) * g.a_rs + pc * g.a_cs, g.a_rs, g.a_cs,
                                 mc_min_(mcb - ir, mr), kc, mr, ap + (ir / mr) * apanel);
                if (mcb == 1 && kern->ukr_wide != NULL) {
                    const int64_t wide = (int64_t)MC_IGEMM_WIDE * nr;
                    for (int64_t jr = 0; jr < nc; jr += wide) {
                        const int np = (int)mc_min_(mc_ceil_div_(nc - jr, nr), MC_IGEMM_WIDE);
                        kern->ukr_wide(kq, ap, bp + (jr / nr) * pstride, pstride, np, tile);
                        p->epi(&g, tile, (int)wide, 1, (int)mc_min_(nc - jr, wide), ic, jc + jr,
                               first, last);
                    }
                    continue;
                }
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    const int nrr = (int)mc_min_(nc - jr, nr);
                    for (int64_t ir = 0; ir < mcb; ir += mr) {
                        const int mrr = (int)mc_min_(mcb - ir, mr);
                        kern->ukr(kq, ap + (ir / mr) * apanel, bp + (jr / nr) * pstride, tile, mrr);
                        p->epi(&g, tile, nr, mrr, nrr, ic + ir, jc + jr, first, last);
                    }
                }
            }
        }
    }
    return 0;
}

/* --- work units (design e) ------------------------------------------------------------------- */

typedef struct {
    const mc_iplan_ *p;
    const mc_igemm_call *call;
    mc_ibsrc_ bs;
    int64_t rows_per, cols_per, rg, cg;       /* rectangles of each item */
    /* packing units */
    const int8_t *b; int64_t b_rs, b_cs, k, n, group, ngroups;
    char *dst;
    int status;
} mc_ijob_;

static void mc_ijob_fail_(mc_ijob_ *job, int r)
{
    int expected = 0;
    __atomic_compare_exchange_n(&job->status, &expected, r, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static void mc_iunit_rect_(void *ctx, int64_t u)
{
    mc_ijob_ *job = (mc_ijob_ *)ctx;
    if (__atomic_load_n(&job->status, __ATOMIC_RELAXED))
        return;
    const mc_igemm_call *call = job->call;
    const int64_t per = job->rg * job->cg, item = u / per, r = (u % per) / job->cg, c = u % job->cg;
    mc_igemm_args g = call->g;
    if (call->offs != NULL) {
        g.a += call->offs[2 * item];
        g.out += call->offs[2 * item + 1];
    }
    if (g.a_scale != NULL)
        g.a_scale += item * g.m;
    if (g.a_zero != NULL)
        g.a_zero += item * g.m;
    g.acc = NULL;
    if (g.out_type == MC_IGEMM_I32) {
        g.acc = (int32_t *)g.out;
        g.acc_rs = g.o_rs;
        g.acc_cs = g.o_cs;
        g.acc_r0 = g.acc_c0 = 0;
    }
    const int64_t m0 = r * job->rows_per, n0 = c * job->cols_per;
    const int res = mc_irect_(job->p, &g, &job->bs, m0, mc_min_(m0 + job->rows_per, g.m), n0,
                              mc_min_(n0 + job->cols_per, g.n));
    if (res)
        mc_ijob_fail_(job, res);
}

/* unit u packs panel group u % ngroups of K block u / ngroups */
static void mc_iunit_pack_(void *ctx, int64_t u)
{
    mc_ijob_ *job = (mc_ijob_ *)ctx;
    const int nr = job->p->kern->nr;
    const int64_t kc0 = job->p->kc, blockno = u / job->ngroups;
    const int64_t npanels = mc_ceil_div_(job->n, nr);
    const int64_t q0 = (u % job->ngroups) * job->group, q1 = mc_min_(q0 + job->group, npanels);
    const int64_t pc = blockno * kc0, kc = mc_min_(job->k - pc, kc0);
    const int64_t pbytes = mc_igemm_panel_bytes_(nr, kc);
    char *block = job->dst + blockno * npanels * mc_igemm_panel_bytes_(nr, kc0);
    for (int64_t q = q0; q < q1; ++q)
        mc_igemm_pack_b_scalar_(job->b + pc * job->b_rs + q * nr * job->b_cs, job->b_rs,
                                job->b_cs, mc_min_(job->n - q * nr, nr), kc, nr,
                                block + q * pbytes);
}

/* Packs all of B into dst on up to nt threads. */
static void mc_ipack_all_(mc_ijob_ *job, int nt)
{
    const int nr = job->p->kern->nr;
    const int64_t blocks = mc_max_(mc_ceil_div_(job->k, job->p->kc), 1);
    const int64_t panels = mc_ceil_div_(job->n, nr);
    const int64_t want = mc_ceil_div_((int64_t)MC_UNITS_PER_THREAD_ * nt, blocks);
    job->group = mc_max_(mc_ceil_div_(panels, mc_max_(want, 1)), 1);
    job->ngroups = mc_ceil_div_(panels, job->group);
    if (job->k > 0 && panels > 0)
        mc_run(mc_iunit_pack_, job, blocks * job->ngroups, nt);
}

/* Rectangles of each item: about MC_UNITS_PER_THREAD_ units per thread in all; bands of
 * columns (whole panels) while the rows are few, else bands of rows. */
static void mc_irects_(mc_ijob_ *job, int64_t batch, int64_t m, int64_t n, int nt)
{
    const mc_igemm_kernel *kern = job->p->kern;
    const int64_t want = nt == 1 ? 1 : mc_ceil_div_((int64_t)MC_UNITS_PER_THREAD_ * nt, batch);
    const int64_t tiles_m = mc_max_(mc_ceil_div_(m, kern->mr), 1);
    const int64_t tiles_n = mc_max_(mc_ceil_div_(n, kern->nr), 1);
    int64_t rg, cg;
    if (m <= 4 * kern->mr) {
        cg = mc_min_(want, tiles_n);
        rg = mc_min_(mc_ceil_div_(want, cg), tiles_m);
    } else {
        rg = mc_min_(want, tiles_m);
        cg = mc_min_(mc_ceil_div_(want, rg), tiles_n);
    }
    job->rows_per = mc_ceil_div_(tiles_m, rg) * kern->mr;
    job->cols_per = mc_ceil_div_(tiles_n, cg) * kern->nr;
    job->rg = mc_max_(mc_ceil_div_(m, job->rows_per), 1);
    job->cg = mc_max_(mc_ceil_div_(n, job->cols_per), 1);
}

/* Each column's sum over all of K into sum (n values), from the panels' per-block sums (-128
 * times each block's; all of them fit, and so does their total) */
static void mc_ibsum_(const mc_iplan_ *p, const mc_ibsrc_ *bs, int64_t k, int64_t n, int32_t *sum)
{
    const int nr = p->kern->nr;
    memset(sum, 0, (size_t)n * 4);
    for (int64_t pc = 0; pc < k; pc += bs->kc) {
        const int64_t kc = mc_min_(k - pc, bs->kc);
        for (int64_t j = 0; j < n; j += nr) {
            const int32_t *sums = (const int32_t *)(mc_panels_(p, bs, pc, kc, j) +
                                                    ((kc + 3) / 4) * nr * 4);
            for (int64_t l = 0; l < mc_min_(nr, n - j); ++l)
                sum[j + l] = (int32_t)((uint32_t)sum[j + l] + (uint32_t)sums[l]);
        }
    }
    for (int64_t j = 0; j < n; ++j)
        sum[j] /= -128;
}

int mc_igemm(const mc_igemm_call *call)
{
    const mc_igemm_args *g0 = &call->g;
    if (g0->k > (g0->a_zero != NULL ? MC_IGEMM_MAX_K_ZP : MC_IGEMM_MAX_K))
        return MC_IGEMM_SIZE;
    const int level = mc_rt_level();
    const mc_level_kernels *lk = mc_kernels(level);
    mc_iplan_ p;
    p.kern = &lk->igemm.gemm;
    const int64_t es = g0->out_type == MC_IGEMM_I32 || g0->out_type == MC_F32 ? 4 : 2;
    const int contiguous = g0->o_cs == es && (g0->bias == NULL || g0->bias_s == 0 || g0->bias_s == 4);
    p.epi = contiguous && p.kern->epi != NULL ? p.kern->epi : mc_igemm_epi_scalar;
    p.mc = p.kern->mc;
    p.nc = p.kern->nc;
    p.kc = call->kc > 0 ? (call->kc + 3) / 4 * 4 : p.kern->kc;
    if (call->packed != NULL) {
        if (call->packed->nr != p.kern->nr)
            return MC_IGEMM_FORMAT;
        p.kc = call->packed->kc;
    }
    if (call->batch == 0 || g0->m == 0 || g0->n == 0)
        return MC_IGEMM_OK;
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    mc_igemm_call c = *call;
    c.g.act_row = lk->act.forward;
    c.g.act = mc_act_for_output(c.g.act, c.g.out_type);
    p.nthreads = mc_rt_threads_for(mc_work_mul(mc_work_mul(call->batch, g0->m),
                                               mc_work_mul(g0->n, mc_max_(g0->k, 1))),
                                   MC_IGEMM_PARALLEL_MIN);
    int32_t *b_sum = NULL;
    mc_ijob_ job;
    memset(&job, 0, sizeof job);
    job.p = &p;
    job.call = &c;
    const int nr = p.kern->nr;
    job.bs.npad = mc_size_round_up(g0->n, nr);
    job.bs.kc = p.kc;
    int r = MC_IGEMM_OK;
    if (call->packed != NULL) {
        job.bs.data = call->packed->data;
    } else if (g0->k > 0) {
        const int64_t bytes = mc_igemm_packed_bytes(nr, g0->k, g0->n, p.kc);
        if (bytes < 0) {
            r = MC_IGEMM_TOOBIG;
            goto done;
        }
        job.dst = (char *)mc_workspace(MC_WS_SHARED, bytes);
        if (job.dst == NULL) {
            r = MC_IGEMM_NOMEM;
            goto done;
        }
        job.b = call->b;
        job.b_rs = call->b_rs;
        job.b_cs = call->b_cs;
        job.k = g0->k;
        job.n = g0->n;
        mc_ipack_all_(&job, mc_rt_threads_for(mc_work_mul(g0->k, g0->n), MC_IPACK_PARALLEL_MIN));
        job.bs.data = job.dst;
    }
    if (g0->a_zero != NULL) {
        const int64_t sbytes = mc_size_bytes(g0->n, 4);
        if (sbytes < 0) {                  /* above MC_BYTES_MAX */
            r = MC_IGEMM_TOOBIG;
            goto done;
        }
        b_sum = (int32_t *)malloc((size_t)sbytes);
        if (b_sum == NULL) {
            r = MC_IGEMM_NOMEM;
            goto done;
        }
        mc_ibsum_(&p, &job.bs, g0->k, g0->n, b_sum);
        c.g.b_sum = b_sum;
    }
    mc_irects_(&job, call->batch, g0->m, g0->n, p.nthreads);
    mc_run(mc_iunit_rect_, &job, call->batch * job.rg * job.cg, p.nthreads);
    if (job.status)
        r = job.status == -2 ? MC_IGEMM_TOOBIG : MC_IGEMM_NOMEM;
done:
    free(b_sum);
    mc_fpenv_leave(&saved);
    return r;
}

/* --- packing ahead (design d) ----------------------------------------------------------------- */

int mc_igemm_pack(const int8_t *b, int64_t rs, int64_t cs, int64_t k, int64_t n, int64_t kc,
                  mc_ipacked *out)
{
    memset(out, 0, sizeof *out);
    if (k > MC_IGEMM_MAX_K)
        return MC_IGEMM_SIZE;
    const int level = mc_rt_level();
    mc_iplan_ p;
    memset(&p, 0, sizeof p);
    p.kern = &mc_kernels(level)->igemm.gemm;
    p.kc = kc > 0 ? (kc + 3) / 4 * 4 : p.kern->kc;
    out->k = k;
    out->n = n;
    out->level = level;
    out->nr = p.kern->nr;
    out->kc = p.kc;
    out->nbytes = mc_igemm_packed_bytes(p.kern->nr, k, n, p.kc);
    if (out->nbytes < 0) {
        out->nbytes = 0;
        return MC_IGEMM_TOOBIG;
    }
    if (out->nbytes == 0 || k == 0)
        return MC_IGEMM_OK;
    void *data = NULL;
    if (posix_memalign(&data, 64, (size_t)out->nbytes) != 0)
        return MC_IGEMM_NOMEM;
    out->data = (char *)data;
    mc_ijob_ job;
    memset(&job, 0, sizeof job);
    job.p = &p;
    job.b = b;
    job.b_rs = rs;
    job.b_cs = cs;
    job.k = k;
    job.n = n;
    job.dst = out->data;
    mc_ipack_all_(&job, mc_rt_threads_for(mc_work_mul(k, n), MC_IPACK_PARALLEL_MIN));
    return MC_IGEMM_OK;
}

void mc_igemm_packed_free(mc_ipacked *p)
{
    free(p->data);
    p->data = NULL;
    p->nbytes = 0;
}

void mc_igemm_unpack(const mc_ipacked *p, int8_t *dst, int64_t rs, int64_t cs)
{
    const int nr = p->nr;
    const int64_t npanels = mc_ceil_div_(p->n, nr);
    for (int64_t pc = 0; pc < p->k; pc += p->kc) {
        const int64_t kc = mc_min_(p->k - pc, p->kc);
        const char *block = p->data + (pc / p->kc) * npanels * mc_igemm_panel_bytes_(nr, p->kc);
        for (int64_t j = 0; j < p->n; ++j) {
            const int8_t *panel =
                (const int8_t *)(block + (j / nr) * mc_igemm_panel_bytes_(nr, kc));
            const int64_t l = j % nr;
            for (int64_t kk = 0; kk < kc; ++kk)
                dst[(pc + kk) * rs + j * cs] = panel[((kk / 4) * nr + l) * 4 + kk % 4];
        }
    }
}

void mc_igemm_format(int level, int *nr, int64_t *kc)
{
    const mc_igemm_kernel *kern = &mc_kernels(level)->igemm.gemm;
    *nr = kern->nr;
    *kc = kern->kc;
}

/* --- quantization (design g) ----------------------------------------------------------------- */

typedef struct {
    mc_igemm_quant_fn fn;
    mc_igemm_quant_zp_fn fn_zp;      /* with zero points (then scale is float32) */
    const char *x; int type; int64_t rows, k, x_rs, x_cs, q_rs, band;
    int8_t *q; char *scale; int32_t *zero;
} mc_iquant_job_;

static void mc_iunit_quant_(void *ctx, int64_t u)
{
    const mc_iquant_job_ *j = (const mc_iquant_job_ *)ctx;
    const int64_t es = j->type == MC_F32 ? 4 : 2;
    const int64_t r1 = mc_min_((u + 1) * j->band, j->rows);
    for (int64_t r = u * j->band; r < r1; ++r) {
        if (j->zero != NULL)
            j->fn_zp(j->x + r * j->x_rs, j->type, j->k, j->x_cs, j->q + r * j->q_rs, 1,
                     (float *)j->scale + r, j->zero + r);
        else
            j->fn(j->x + r * j->x_rs, j->type, j->k, j->x_cs, j->q + r * j->q_rs, 1,
                  j->scale + r * es);
    }
}

static void mc_iquantize_(const char *x, int type, int64_t rows, int64_t k, int64_t x_rs,
                          int64_t x_cs, int8_t *q, int64_t q_rs, char *scale, int32_t *zero)
{
    if (rows == 0)
        return;
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    const int nt = mc_rt_threads_for(mc_work_mul(rows, mc_max_(k, 1)), MC_IQUANT_PARALLEL_MIN);
    const mc_igemm_table *t = &mc_kernels(mc_rt_level())->igemm;
    mc_iquant_job_ j = {t->quant, t->quant_zp, x, type, rows, k, x_rs, x_cs, q_rs, 0, q, scale,
                        zero};
    j.band = mc_max_(mc_ceil_div_(rows, (int64_t)MC_UNITS_PER_THREAD_ * nt), 1);
    mc_run(mc_iunit_quant_, &j, mc_ceil_div_(rows, j.band), nt);
    mc_fpenv_leave(&saved);
}

void mc_igemm_quantize(const char *x, int type, int64_t rows, int64_t k, int64_t x_rs,
                       int64_t x_cs, int8_t *q, int64_t q_rs, char *scale)
{
    mc_iquantize_(x, type, rows, k, x_rs, x_cs, q, q_rs, scale, NULL);
}

void mc_igemm_quantize_zp(const char *x, int type, int64_t rows, int64_t k, int64_t x_rs,
                          int64_t x_cs, int8_t *q, int64_t q_rs, float *scale, int32_t *zero)
{
    mc_iquantize_(x, type, rows, k, x_rs, x_cs, q, q_rs, (char *)scale, zero);
}
