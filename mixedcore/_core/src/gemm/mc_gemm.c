/* GEMM: the plan, the blocked loops, the work units, packing ahead and the scalar epilogue
 * (the generic level's kernels are in mc_gemm_generic.c).
 *
 * Design:
 *   a. One blocked loop nest for every level (mc_gemm.h, design a): mc_rect_() computes one
 *      rectangle of one item on the calling thread, with B packed ahead (all of K, panels for
 *      every column), packed here block by block, or read in place (design e).  Levels supply
 *      only the pack / micro-kernel / epilogue functions and block sizes (their tables).
 *   b. The plan is made once per call, in mc_gemm(): the level, the kernel, the block sizes,
 *      the thread count and whether float32 partial sums need scratch are read from the
 *      settings once and travel with the call, so a setter running meanwhile changes nothing
 *      in it.  The accumulator scratch is the participant's own (per unit rectangle), never a
 *      buffer chosen by a caller from an earlier reading of the settings.
 *   c. Work units, taken dynamically by the team (mc_runtime.h): whole batch items when they
 *      divide among the threads (or are many); else, per item, rectangles of C -- bands of
 *      rows, and of columns when the rows are few, about four units per thread.  B that is
 *      not packed ahead and not read in place is first packed in a phase of its own (units of
 *      panels, into a buffer of the caller's), a column slab of at most MC_SLAB_BYTES_ at a
 *      time; the rectangles then share it.  No unit waits for another: the only waits are
 *      the ends of the two phases, for units already claimed.
 *   d. Packed ahead (mc_gemm_pack): the same panels the call would pack, made once; a call
 *      uses them if their format (pairs, 16-bit or float32 panels; NR) suits its kernel.
 *      bfloat16 pairs used by a float32-panel kernel of the same NR (float16 or float32 A, or a
 *      lower level), and 16-bit panels at a level without in-place kernels, are widened to
 *      float32 panels per call; any other mismatch is refused (MC_GEMM_FORMAT).  The packed K
 *      blocking (its kc) is the call's, so the result equals the unpacked product computed
 *      with that KC, bit for bit.  A K block deeper than the level's KC (kernels.pack's
 *      whole_k, a convolution's whole K) takes proportionally fewer rows of A to a block, so
 *      that the packed block of A keeps the size the level's KC and MC give it.
 *   e. Small M (<= MR rows) reads B in place (mc_direct_) when its rows are contiguous, and
 *      (<= MC_DIRECT_T_MAXM rows) by columns (mc_direct_t_) when they are contiguous along
 *      k: the same operations in the same order as the packed path, so the same bits.  With B
 *      packed ahead, 1-3 rows use the level's wide kernel over several panels at once.
 *   f. Subnormal bfloat16 inputs: VDPBF16PS reads them as zero.  The pairs packs and the pairs
 *      in-place kernels report them; the call then stops and is computed again on float32
 *      panels (exact products, gradual underflow), so results never lose them.  A product of
 *      normal inputs whose float32 result or partial sum is subnormal is still flushed by
 *      VDPBF16PS (at most 2**-126 each; docs/gemm.md).
 *   g. The generic kernels (mc_gemm_generic.c) are the scalar twins: packing through the
 *      conversion twins of mc_convert_scalar.h, a 4 x 16 micro-kernel that multiplies then adds
 *      (two roundings per step, since the baseline has no FMA; the error bound of docs/gemm.md
 *      still holds).  The epilogue in plain C (here) serves the generic level and every layout
 *      the vector epilogues do not take.  -ffp-contract=off keeps every rounding where the
 *      source puts it.
 *   h. The activation is the one of mc_act.h (float64 inside, rounded once to float32): the
 *      scalar epilogue applies the level's elementwise kernel to each row of the tile
 *      (g->act_row), the vector epilogues the same functions inline, with the same bits.  gelu
 *      is the exact form x * Phi(x) (Keras' default, approximate=False).
 *   i. A residual (g->res, of the output's type) is the sum a network adds after the product
 *      (ResNet's shortcut): the value after the bias is rounded to the output type, the
 *      residual added in float32, then the activation and the rounding to the output type --
 *      the bits of the product stored, then kernels.add with the activation.  The vector
 *      epilogues do the same, one rounding each.
 *   j. A packed panel of A pays off when the micro-kernel reads it for many panels of B.
 *      With at most MC_A_IN_PLACE_PANELS_ panels of columns (1 x 1 convolutions that narrow
 *      to 64 channels or fewer), K in one block and rows of A contiguous along k
 *      (float32 rows for the float32-panel kernel, bfloat16 pairs for the pairs kernel, K
 *      even), the level's ukr_epi_a reads A in place, the same values for the same steps; a
 *      pairs kernel first scans the block's rows for subnormal bfloat16 (design f), as its pack
 *      would.  The packing was a fifth of the time of such products with one panel; with
 *      two (64 channels: ResNet50's 1 x 1 convolutions from 64 and 256 channels to 64, one
 *      thread) reading in place is 3% faster, with four or more level or slower.
 *   k. The tile's output rows are prefetched before its products, and with a residual its
 *      rows of the residual too: the epilogue reads them after the last step.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mc_checked.h"
#include "mc_convert_scalar.h"
#include "mc_gemm.h"
#include "mc_gemm_scalar.h"
#include "mc_kernels.h"
#include "mc_runtime.h"

/* multiply-adds below which a call stays on the calling thread: measured, two threads win from
 * about 512 Ki (8 x 256 x 256: 10.3 -> 8.6 us; 1 x 1024 x 1024: 80 -> 51 us) and lose at 64**3 */
#define MC_GEMM_PARALLEL_MIN ((int64_t)1 << 19)
/* elements of B below which packing ahead stays on the calling thread */
#define MC_PACK_PARALLEL_MIN ((int64_t)1 << 17)
/* the largest column slab of B packed in one phase (design c) */
#define MC_SLAB_BYTES_ ((int64_t)16 << 20)
/* panels of columns up to which rows of A are read in place (design j) */
#define MC_A_IN_PLACE_PANELS_ 2
/* work units per thread aimed at (design c) */
#define MC_UNITS_PER_THREAD_ 4

/* --- the scalar epilogue ---------------------------------------------------------------------- */

#define MC_AT_(base, rs, cs, i, j) ((base) + (i) * (rs) + (j) * (cs))
#define MC_EPI_ROW_ 64    /* values the scalar epilogue activates at a time */

/* f rounded to out's type and back (exact for float32) */
static float mc_round_to_(float f, int type)
{
    if (type == MC_F32)
        return f;
    const uint32_t u = mc_gemm_bits_from_f32_(f);
    return mc_gemm_f32_from_bits_(type == MC_F16 ? mc_f16_to_f32_bits(mc_f32_to_f16_bits(u))
                                                 : mc_bf16_to_f32_bits(mc_f32_to_bf16_bits(u)));
}

void mc_gemm_epi_scalar(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                        int64_t i, int64_t j, int first, int last)
{
    float v[MC_EPI_ROW_];
    for (int r = 0; r < mr; ++r) {
        const int64_t ii = i + r;
        for (int s0 = 0; s0 < nr; s0 += MC_EPI_ROW_) {
            const int n = nr - s0 < MC_EPI_ROW_ ? nr - s0 : MC_EPI_ROW_;
            for (int s = 0; s < n; ++s) {
                const int64_t jj = j + s0 + s;
                float t = tile[r * ldt + s0 + s];
                float *acc = first && last ? NULL
                                           : (float *)MC_AT_((char *)g->acc, g->acc_rs, g->acc_cs,
                                                             ii - g->acc_r0, jj - g->acc_c0);
                if (!first)
                    t += *acc;
                if (!last) {
                    *acc = t;
                    continue;
                }
                v[s] = g->alpha == 1.0f ? t : g->alpha * t;
                if (g->beta != 0.0f)
                    v[s] += g->beta * *(const float *)MC_AT_((const char *)g->c, g->c_rs, g->c_cs,
                                                             ii, jj);
                if (g->bias)
                    v[s] += *(const float *)((const char *)g->bias + jj * g->bias_s);
                if (g->res)
                    v[s] = mc_round_to_(v[s], g->out_type) +
                           mc_gemm_load_elem_(MC_AT_(g->res, g->res_rs, g->o_cs, ii, jj),
                                              g->out_type);
            }
            if (!last)
                continue;
            if (g->act != MC_ACT_NONE)
                g->act_row(g->act, v, v, n);
            for (int s = 0; s < n; ++s) {
                char *o = MC_AT_(g->out, g->o_rs, g->o_cs, ii, j + s0 + s);
                if (g->out_type == MC_F32) {
                    memcpy(o, &v[s], 4);
                } else {
                    const uint32_t u = mc_gemm_bits_from_f32_(v[s]);
                    const uint16_t h = g->out_type == MC_F16 ? mc_f32_to_f16_bits(u)
                                                             : mc_f32_to_bf16_bits(u);
                    memcpy(o, &h, 2);
                }
            }
        }
    }
}


/* --- sizes ----------------------------------------------------------------------------------- */

static int64_t mc_round64_(int64_t x) { return (x + 63) & ~(int64_t)63; }
static int64_t mc_min_(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t mc_max_(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t mc_ceil_div_(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Packed rows of a block kc deep: k steps, or pairs. */
static int64_t mc_steps_(const mc_gemm_kernel *kern, int64_t kc)
{
    return kern->pairs ? (kc + 1) / 2 : kc;
}

/* Bytes of a packed A block (float32 or pairs: 4 bytes per packed element). */
static int64_t mc_block_bytes_(const mc_gemm_kernel *kern, int64_t lanes, int64_t kc)
{
    return mc_round64_(lanes * mc_steps_(kern, kc) * 4);
}

/* The bytes of B packed in panels of `elem`-byte elements (npad columns, every K block), or -1
 * when the count is too large (mc_checked.h: a broadcast view can claim any k and n; the
 * caller reports MC_GEMM_TOOBIG). */
static int64_t mc_packed_bytes_(int pairs, int elem, int64_t npad, int64_t k, int64_t kc)
{
    const int64_t full = k / kc, rest = k - full * kc;
    const int64_t steps = pairs ? full * ((kc + 1) / 2) + (rest + 1) / 2 : k;
    return mc_size_bytes(mc_size_mul(npad, steps), elem);
}

static void mc_blocks_for_(const mc_gemm_kernel *kern, const mc_blocks *want, mc_gemm_blocks *blk)
{
    int64_t mc = want->mc > 0 ? want->mc : kern->mc;
    int64_t kc = want->kc > 0 ? want->kc : kern->kc;
    int64_t nc = want->nc > 0 ? want->nc : kern->nc;
    blk->mc = mc_ceil_div_(mc, kern->mr) * kern->mr;
    blk->nc = mc_ceil_div_(nc, kern->nr) * kern->nr;
    blk->kc = (kc + 1) / 2 * 2;
}

/* --- the plan (design b) ------------------------------------------------------------------------ */

typedef struct {
    const mc_gemm_kernel *kern;
    mc_gemm_epi_fn epi;        /* the level's vector epilogue, or the scalar one */
    mc_gemm_ukr_epi_fn ukr_epi; /* the kernel with the epilogue fused, when it applies */
    mc_gemm_blocks blk;
    int nthreads;
    int belem;                 /* bytes per B panel element: 4, or 2 for 16-bit panels */
} mc_plan_;

/* 16-bit panels (mc_gemm.h, design c) for float16/bfloat16 B with a float32-panel kernel that
 * has in-place kernels to read them. */
static int mc_b16_ok_(const mc_gemm_kernel *kern, int b_type)
{
    return !kern->pairs && b_type != MC_F32 && kern->ukr_direct != NULL;
}

/* Bytes of one packed B panel kc deep. */
static int64_t mc_bpanel_bytes_(const mc_plan_ *p, int64_t kc)
{
    return (int64_t)p->kern->nr * mc_steps_(p->kern, kc) * p->belem;
}

/* Where the B of one item comes from: panels packed ahead for columns [n0, n0 + npad), in K
 * blocks of kc, or (data NULL) the operand itself. */
typedef struct {
    const char *data;
    int64_t n0, npad, kc;
} mc_bsrc_;

static const char *mc_packed_panels_(const mc_plan_ *p, const mc_bsrc_ *bs, int64_t pc,
                                     int64_t kc, int64_t jc)
{
    const int64_t block = (pc / bs->kc) * (bs->npad / p->kern->nr) * mc_bpanel_bytes_(p, bs->kc);
    return bs->data + block + (jc - bs->n0) / p->kern->nr * mc_bpanel_bytes_(p, kc);
}

static const mc_gemm_kernel *mc_pick_(const mc_gemm_table *t, int a_type, int b_type)
{
    if (a_type == MC_BF16 && b_type == MC_BF16 && t->pairs.pack != NULL)
        return &t->pairs;
    return &t->f32;
}

/* The vector epilogues take rows contiguous in out (and Cin, acc) and a contiguous or scalar
 * bias; every other layout goes through the scalar epilogue. */
static void mc_plan_finish_(mc_plan_ *p, const mc_gemm_call *call, const mc_blocks *want)
{
    const mc_gemm_args *g = &call->g;
    const int64_t es = g->out_type == MC_F32 ? 4 : 2;
    const int contiguous = g->o_cs == es && (g->beta == 0.0f || g->c_cs == 4) &&
                           (g->bias == NULL || g->bias_s == 0 || g->bias_s == 4);
    mc_blocks_for_(p->kern, want, &p->blk);
    p->belem = mc_b16_ok_(p->kern, g->b_type) ? 2 : 4;
    if (call->packed != NULL) {
        p->blk.kc = call->packed->kc;
        p->belem = call->packed->elem == 2 && p->kern->ukr_direct != NULL ? 2 : 4;
        /* K blocks deeper than the level's KC (design d): fewer rows to a block of A, which
         * keeps its bytes */
        if (want->mc <= 0 && p->blk.kc > p->kern->kc)
            p->blk.mc = mc_max_(p->kern->mr,
                                p->blk.mc * p->kern->kc / p->blk.kc / p->kern->mr * p->kern->mr);
    }
    p->epi = contiguous && p->kern->epi != NULL ? p->kern->epi : mc_gemm_epi_scalar;
    p->ukr_epi = contiguous && p->kern->epi != NULL && g->alpha == 1.0f && g->beta == 0.0f
                     ? p->kern->ukr_epi : NULL;
    p->nthreads = mc_rt_threads_for(mc_work_mul(mc_work_mul(call->batch, g->m),
                                                mc_work_mul(g->n, mc_max_(g->k, 1))),
                                    MC_GEMM_PARALLEL_MIN);
}

/* --- the blocked loops ------------------------------------------------------------------------- */

/* The rows of C the epilogue will read or write next: fetched while the micro-kernel runs
 * (thousands of cycles), so the epilogue does not wait on L2/L3 for its 2 * MR cache lines. */
static inline void mc_prefetch_tile_(const mc_gemm_args *g, int64_t i, int64_t j, int mr, int nr,
                                     int first, int last)
{
#if defined(__GNUC__)
    const char *base;
    int64_t rs, cs;
    if (first && last) {
        base = g->out;
        rs = g->o_rs;
        cs = g->o_cs;
    } else {
        base = (const char *)g->acc;
        rs = g->acc_rs;
        cs = g->acc_cs;
        i -= g->acc_r0;
        j -= g->acc_c0;
    }
    const int64_t span = (int64_t)(nr - 1) * cs;
    for (int r = 0; r < mr; ++r) {
        const char *q = base + (i + r) * rs + j * cs;
        __builtin_prefetch(q, 1, 3);
        __builtin_prefetch(q + span, 1, 3);
    }
    if (g->res != NULL && last) {
        const int64_t esz = g->out_type == MC_F32 ? 4 : 2, rspan = (int64_t)(nr - 1) * esz;
        for (int r = 0; r < mr; ++r) {
            const char *q = g->res + (i + r) * g->res_rs + j * esz;
            __builtin_prefetch(q, 0, 3);
            __builtin_prefetch(q + rspan, 0, 3);
        }
    }
#else
    (void)g; (void)i; (void)j; (void)mr; (void)nr; (void)first; (void)last;
#endif
}

/* Rows of B in place (design e): the tile spans the whole nc columns; k advances in steps of
 * MC_DIRECT_KB rows, each step sweeping all column strips, so B is read row after row (a strip
 * alone would jump ldb bytes per k: with a power-of-two ldb every row falls in the same cache
 * set).  Each element still sees its products in k order, as in the packed path. */
#define MC_DIRECT_KB 16
static int mc_direct_(const mc_plan_ *p, const mc_gemm_args *g, const char *ap, float *tile,
                      int64_t ic, int64_t mcb, int64_t jc, int64_t nc, int64_t pc, int64_t kc,
                      int first, int last)
{
    const mc_gemm_kernel *kern = p->kern;
    const int mr = kern->mr, nr = kern->nr;
    const int64_t ldt = mc_ceil_div_(nc, nr) * nr;
    const int64_t es = g->b_type == MC_F32 ? 4 : 2;
    const int64_t ksteps = mc_steps_(kern, kc);
    int sub = 0;
    for (int64_t ir = 0; ir < mcb; ir += mr) {
        const int mrr = (int)mc_min_(mcb - ir, mr);
        const char *a = ap + ir * ksteps * 4;
        for (int64_t kk = 0; kk < kc; kk += MC_DIRECT_KB) {
            const int64_t kb = mc_min_(kc - kk, MC_DIRECT_KB);
            const char *arow = a + (kern->pairs ? kk / 2 : kk) * mr * 4;
            const char *b = g->b + (pc + kk) * g->b_rs + jc * es;
            /* 1-3 rows hold too few accumulators to cover the FMA latency over NR columns:
             * such tiles take direct_wide columns per call when the level offers it */
            const int step = mrr <= 3 && kern->direct_wide > nr ? kern->direct_wide : nr;
            for (int64_t jr = 0; jr < nc; jr += step)
                sub |= kern->ukr_direct(kb, arow, b + jr * es, g->b_rs, nr * es, g->b_type,
                                        (int)mc_min_(nc - jr, step), tile + jr, ldt, mrr, kk > 0);
        }
        if (sub)
            return 1;
        for (int64_t jr = 0; jr < nc; jr += nr)
            p->epi(g, tile + jr, (int)ldt, mrr, (int)mc_min_(nc - jr, nr), ic + ir, jc + jr,
                   first, last);
    }
    return 0;
}

/* Columns of B in place (B contiguous along k): one call per NR-column strip over the whole
 * kc, loading 16 columns x 16 k and transposing them in registers; each element again sees
 * its products in k order. */
static int mc_direct_t_(const mc_plan_ *p, const mc_gemm_args *g, const char *ap, float *tile,
                        int64_t ic, int64_t mcb, int64_t jc, int64_t nc, int64_t pc, int64_t kc,
                        int first, int last)
{
    const mc_gemm_kernel *kern = p->kern;
    const int nr = kern->nr;
    const int64_t ldt = mc_ceil_div_(nc, nr) * nr;
    const int mrr = (int)mcb;                        /* <= MC_DIRECT_T_MAXM: one tile row */
    for (int64_t jr = 0; jr < nc; jr += nr) {
        const int nrr = (int)mc_min_(nc - jr, nr);
        if (kern->ukr_direct_t(kc, ap, g->b + pc * g->b_rs + (jc + jr) * g->b_cs, g->b_cs,
                               g->b_type, nrr, tile + jr, ldt, mrr))
            return 1;
        p->epi(g, tile + jr, (int)ldt, mrr, nrr, ic, jc + jr, first, last);
    }
    return 0;
}

/* A 16-bit panel: `lanes` (<= w) lanes of kc elements copied as they are, k-major, lanes past
 * `lanes` zero. */
static void mc_pack16_(const char *src, int64_t ls, int64_t ks, int64_t lanes, int64_t kc, int w,
                       uint16_t *d)
{
    for (int64_t k = 0; k < kc; ++k, d += w) {
        const char *s = src + k * ks;
        if (ls == 2) {
            memcpy(d, s, (size_t)lanes * 2);
        } else {
            for (int64_t l = 0; l < lanes; ++l)
                memcpy(d + l, s + l * ls, 2);
        }
        memset(d + lanes, 0, (size_t)(w - lanes) * 2);
    }
}

/* Packs panels [q0, q1) (in units of NR columns) of the B block at (pc, jc..), kc deep, for
 * columns [jc, jc + nc) of the operand, into consecutive panels. */
static int mc_pack_b_(const mc_plan_ *p, const mc_gemm_args *g, int64_t jc, int64_t nc,
                      int64_t pc, int64_t kc, char *bp, int64_t q0, int64_t q1)
{
    const mc_gemm_kernel *kern = p->kern;
    const int nr = kern->nr;
    const int64_t pbytes = mc_bpanel_bytes_(p, kc);
    int sub = 0;
    for (int64_t q = q0; q < q1; ++q) {
        const int64_t jr = q * nr;
        const char *src = g->b + pc * g->b_rs + (jc + jr) * g->b_cs;
        if (p->belem == 2)
            mc_pack16_(src, g->b_cs, g->b_rs, mc_min_(nc - jr, nr), kc, nr,
                       (uint16_t *)(bp + q * pbytes));
        else
            sub |= kern->pack(src, g->b_type, g->b_cs, g->b_rs, mc_min_(nc - jr, nr), kc, nr,
                              bp + q * pbytes);
    }
    return sub;
}

/* Rows [m0, m1) of the block at (pc, jc): B packed in bp (panels NR * steps apart) unless
 * direct.  Returns 1 when a pairs kernel met a subnormal bfloat16 (design f). */
static int mc_rows_(const mc_plan_ *p, const mc_gemm_args *g, int64_t m0, int64_t m1,
                    int64_t jc, int64_t nc, int64_t pc, int64_t kc, int direct, const char *bp,
                    char *ap, float *tile)
{
    const mc_gemm_kernel *kern = p->kern;
    const int mr = kern->mr, nr = kern->nr;
    const int64_t ksteps = mc_steps_(kern, kc);
    const int64_t pstride = mc_bpanel_bytes_(p, kc);
    const int first = pc == 0, last = pc + kc >= g->k;
    /* design j: a few panels of columns, K in one block, rows of A contiguous along k */
    const int a_in_place = first && last && direct == 0 && p->belem != 2 &&
                           nc <= MC_A_IN_PLACE_PANELS_ * nr &&
                           p->ukr_epi != NULL && kern->ukr_epi_a != NULL &&
                           g->a_type == (kern->pairs ? MC_BF16 : MC_F32) &&
                           g->a_cs == (kern->pairs ? 2 : 4) && (!kern->pairs || kc % 2 == 0);
    for (int64_t ic = m0; ic < m1; ic += p->blk.mc) {
        const int64_t mcb = mc_min_(m1 - ic, p->blk.mc);
        int sub = 0;
        if (a_in_place) {
            const char *a = g->a + ic * g->a_rs;
            if (kern->sub_rows != NULL && kern->sub_rows(a, g->a_rs, mcb, kc))
                return 1;
            for (int64_t ir = 0; ir < mcb; ir += mr) {
                const int mrr = (int)mc_min_(mcb - ir, mr);
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    const int nrr = (int)mc_min_(nc - jr, nr);
                    mc_prefetch_tile_(g, ic + ir, jc + jr, mrr, nrr, first, last);
                    kern->ukr_epi_a(ksteps, a + ir * g->a_rs, g->a_rs, 1, 0,
                                    bp + (jr / nr) * pstride, 0, mrr, nrr, g, ic + ir, jc + jr);
                }
            }
            continue;
        }
        for (int64_t ir = 0; ir < mcb; ir += mr)
            sub |= kern->pack(g->a + (ic + ir) * g->a_rs + pc * g->a_cs, g->a_type, g->a_rs,
                              g->a_cs, mc_min_(mcb - ir, mr), kc, mr, ap + ir * ksteps * 4);
        if (sub)
            return 1;
        if (direct == 2) {
            if (mc_direct_t_(p, g, ap, tile, ic, mcb, jc, nc, pc, kc, first, last))
                return 1;
            continue;
        }
        if (direct) {
            if (mc_direct_(p, g, ap, tile, ic, mcb, jc, nc, pc, kc, first, last))
                return 1;
            continue;
        }
        if (p->belem == 2) {
            /* 16-bit panels: the in-place kernels, rows nr * 2 bytes apart, panels pstride
             * apart; 1-3 rows take direct_wide columns per call */
            const int64_t step = mcb <= 3 && kern->direct_wide > nr ? kern->direct_wide : nr;
            for (int64_t jr = 0; jr < nc; jr += step) {
                const int cols = (int)mc_min_(nc - jr, step);
                for (int64_t ir = 0; ir < mcb; ir += mr) {
                    const int mrr = (int)mc_min_(mcb - ir, mr);
                    kern->ukr_direct(kc, ap + ir * ksteps * 4, bp + (jr / nr) * pstride,
                                     (int64_t)nr * 2, pstride, g->b_type, cols, tile, step, mrr, 0);
                    for (int64_t q = 0; q < cols; q += nr)
                        p->epi(g, tile + q, (int)step, mrr, (int)mc_min_(cols - q, nr), ic + ir,
                               jc + jr + q, first, last);
                }
            }
            continue;
        }
        if (mcb <= 3 && kern->ukr_wide != NULL) {
            const int64_t ldt = (int64_t)MC_WIDE_PANELS * nr;
            for (int64_t jr = 0; jr < nc; jr += ldt) {
                const int np = (int)mc_min_(mc_ceil_div_(nc - jr, nr), MC_WIDE_PANELS);
                kern->ukr_wide(ksteps, ap, bp + (jr / nr) * pstride, pstride, np, tile, ldt,
                               (int)mcb);
                for (int q = 0; q < np; ++q)
                    p->epi(g, tile + q * nr, (int)ldt, (int)mcb,
                           (int)mc_min_(nc - jr - q * nr, nr), ic, jc + jr + q * nr, first, last);
            }
            continue;
        }
        for (int64_t jr = 0; jr < nc; jr += nr) {
            const int nrr = (int)mc_min_(nc - jr, nr);
            for (int64_t ir = 0; ir < mcb; ir += mr) {
                const int mrr = (int)mc_min_(mcb - ir, mr);
                mc_prefetch_tile_(g, ic + ir, jc + jr, mrr, nrr, first, last);
                if (first && last && p->ukr_epi != NULL) {
                    p->ukr_epi(ksteps, ap + ir * ksteps * 4, bp + (jr / nr) * pstride, tile,
                               mrr, nrr, g, ic + ir, jc + jr);
                    continue;
                }
                kern->ukr(ksteps, ap + ir * ksteps * 4, bp + (jr / nr) * pstride, tile, mrr);
                p->epi(g, tile, nr, mrr, nrr, ic + ir, jc + jr, first, last);
            }
        }
    }
    return 0;
}

static void mc_k_zero_(const mc_plan_ *p, const mc_gemm_args *g, int64_t m0, int64_t m1,
                       int64_t n0, int64_t n1, float *tile)
{
    const int mr = p->kern->mr, nr = p->kern->nr;
    memset(tile, 0, (size_t)mr * nr * 4);
    for (int64_t i = m0; i < m1; i += mr)
        for (int64_t j = n0; j < n1; j += nr)
            p->epi(g, tile, nr, (int)mc_min_(m1 - i, mr), (int)mc_min_(n1 - j, nr), i, j, 1, 1);
}

/* A product with at most MR rows reads each element of B once: the micro-kernel then reads B in
 * place rather than packing it (packing would write and read it once more).  Decided on the
 * whole item (g->m), never on the rectangle, so the split cannot change it. */
static int mc_direct_ok_(const mc_gemm_kernel *kern, const mc_gemm_args *g)
{
    const int64_t es = g->b_type == MC_F32 ? 4 : 2;
    if (kern->ukr_direct != NULL && g->m <= kern->mr && g->b_cs == es)
        return 1;                                    /* rows of B contiguous */
    if (kern->ukr_direct_t != NULL && g->m <= MC_DIRECT_T_MAXM && g->b_rs == es)
        return 2;                                    /* columns of B contiguous */
    return 0;
}

/* Rows [m0, m1) x columns [n0, n1) of one item, on the calling thread, with B from `bs`.
 * Returns 0, 1 (a subnormal bfloat16 met by a pairs kernel: design f), -1 (no memory) or -2
 * (a workspace too large to ask for). */
static int mc_rect_(const mc_plan_ *p, const mc_gemm_args *gi, const mc_bsrc_ *bs, int64_t m0,
                    int64_t m1, int64_t n0, int64_t n1)
{
    const mc_gemm_kernel *kern = p->kern;
    const mc_gemm_blocks *blk = &p->blk;
    const int64_t K = gi->k;
    const int direct = bs->data == NULL ? mc_direct_ok_(kern, gi) : 0;
    const int pack_b = bs->data == NULL && !direct;
    const int use_acc = gi->out_type != MC_F32 && K > blk->kc;
    const int64_t ncmax = mc_min_(blk->nc, n1 - n0);
    const int64_t ncpad = mc_ceil_div_(ncmax, kern->nr) * kern->nr;   /* whole panels */
    const int64_t ldt = mc_max_(ncpad, (int64_t)MC_WIDE_PANELS * kern->nr);
    const int64_t bbytes = pack_b ? mc_round64_(ncpad / kern->nr * mc_bpanel_bytes_(p, blk->kc)) : 0;
    const int64_t abytes = mc_block_bytes_(kern, blk->mc, blk->kc);
    const int64_t tbytes = mc_round64_((int64_t)kern->mr * ldt * 4);
    const int64_t cbytes = use_acc ? mc_size_round64(mc_size_bytes(mc_size_mul(m1 - m0, ncmax), 4)) : 0;
    const int64_t wbytes = mc_size_add(mc_size_add(bbytes, abytes), mc_size_add(tbytes, cbytes));
    if (wbytes < 0 || wbytes > MC_BYTES_MAX)
        return -2;
    char *work = (char *)mc_workspace(MC_WS_WORK, wbytes);
    if (work == NULL)
        return -1;
    char *bp = work, *ap = work + bbytes;
    float *tile = (float *)(ap + abytes);
    float *accbuf = (float *)(ap + abytes + tbytes);
    mc_gemm_args g = *gi;
    if (K == 0) {
        mc_k_zero_(p, &g, m0, m1, n0, n1, tile);
        return 0;
    }
    for (int64_t jc = n0; jc < n1; jc += blk->nc) {
        const int64_t nc = mc_min_(n1 - jc, blk->nc);
        if (use_acc) {
            g.acc = accbuf;
            g.acc_rs = nc * 4;
            g.acc_cs = 4;
            g.acc_r0 = m0;
            g.acc_c0 = jc;
        }
        for (int64_t pc = 0; pc < K; pc += blk->kc) {
            const int64_t kc = mc_min_(K - pc, blk->kc);
            const char *bblk = bp;
            if (bs->data != NULL)
                bblk = mc_packed_panels_(p, bs, pc, kc, jc);
            else if (pack_b && mc_pack_b_(p, &g, jc, nc, pc, kc, bp, 0, mc_ceil_div_(nc, kern->nr)))
                return 1;
            if (mc_rows_(p, &g, m0, m1, jc, nc, pc, kc, direct, bblk, ap, tile))
                return 1;
        }
    }
    return 0;
}

/* --- work units (design c) ------------------------------------------------------------------- */

typedef struct {
    const mc_plan_ *p;
    const mc_gemm_call *call;
    mc_bsrc_ bs;               /* B of the rectangles: packed ahead, a phase-1 slab, or none */
    mc_gemm_args gi;           /* the item the rectangles belong to */
    int64_t rows_per, cols_per, cg, n0, n1;   /* the rectangles */
    const mc_packed *src;      /* conversion units: the pairs to widen */
    char *dst;                 /* phase-1 and conversion units: where panels go */
    int64_t npad, group, ngroups;             /* panels of NR per block, per unit */
    int status;                /* 0, or the first nonzero result of a unit */
} mc_job_;

static void mc_job_fail_(mc_job_ *job, int r)
{
    int expected = 0;
    __atomic_compare_exchange_n(&job->status, &expected, r, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static int mc_job_failed_(mc_job_ *job) { return __atomic_load_n(&job->status, __ATOMIC_RELAXED); }

/* The arguments of batch item `item`; a float32 output holds its own partial sums. */
static void mc_item_args_(const mc_gemm_call *call, int64_t item, mc_gemm_args *h)
{
    *h = call->g;
    if (call->offs != NULL) {
        const int64_t *o = call->offs + 4 * item;
        h->a += o[0];
        h->b += o[1];
        h->out += o[2];
        if (h->c != NULL)
            h->c = (const float *)((const char *)h->c + o[3]);
    }
    h->acc = NULL;
    h->acc_rs = h->acc_cs = h->acc_r0 = h->acc_c0 = 0;
    if (h->out_type == MC_F32) {
        h->acc = (float *)h->out;
        h->acc_rs = h->o_rs;
        h->acc_cs = h->o_cs;
    }
}

static void mc_unit_item_(void *ctx, int64_t u)
{
    mc_job_ *job = (mc_job_ *)ctx;
    if (mc_job_failed_(job))
        return;
    mc_gemm_args g;
    mc_item_args_(job->call, u, &g);
    const int r = mc_rect_(job->p, &g, &job->bs, 0, g.m, 0, g.n);
    if (r)
        mc_job_fail_(job, r);
}

static void mc_unit_rect_(void *ctx, int64_t u)
{
    mc_job_ *job = (mc_job_ *)ctx;
    if (mc_job_failed_(job))
        return;
    const int64_t r = u / job->cg, c = u % job->cg;
    const int64_t m0 = r * job->rows_per, c0 = job->n0 + c * job->cols_per;
    const int res = mc_rect_(job->p, &job->gi, &job->bs, m0, mc_min_(m0 + job->rows_per, job->gi.m),
                             c0, mc_min_(c0 + job->cols_per, job->n1));
    if (res)
        mc_job_fail_(job, res);
}

/* Phase 1: unit u packs panel group u % ngroups of K block u / ngroups of columns [n0, n1). */
static void mc_unit_pack_(void *ctx, int64_t u)
{
    mc_job_ *job = (mc_job_ *)ctx;
    if (mc_job_failed_(job))
        return;
    const mc_gemm_kernel *kern = job->p->kern;
    const int64_t kc0 = job->p->blk.kc, blockno = u / job->ngroups, q0 = (u % job->ngroups) * job->group;
    const int64_t pc = blockno * kc0, kc = mc_min_(job->gi.k - pc, kc0);
    char *block = job->dst + blockno * (job->npad / kern->nr) * mc_bpanel_bytes_(job->p, kc0);
    const int64_t q1 = mc_min_(q0 + job->group, job->npad / kern->nr);
    if (mc_pack_b_(job->p, &job->gi, job->n0, job->n1 - job->n0, pc, kc, block, q0, q1))
        mc_job_fail_(job, 1);
}

void mc_gemm_widen_panels(const mc_packed *s, int64_t blockno, int64_t q0, int64_t q1, float *dst)
{
    const int nr = s->nr;
    const int64_t npad = mc_ceil_div_(s->n, nr) * nr;
    const int64_t pc = blockno * s->kc, kc = mc_min_(s->k - pc, s->kc);
    const int64_t full = s->pairs ? (s->kc + 1) / 2 * 4 : s->kc * s->elem;   /* bytes per lane */
    const int64_t here = s->pairs ? (kc + 1) / 2 * 4 : kc * s->elem;
    const char *src = s->data + blockno * npad * full;
    dst += blockno * npad * s->kc;
    for (int64_t q = q0; q < q1; ++q) {
        const char *sp = src + q * nr * here;
        float *dp = dst + q * nr * kc;
        for (int64_t kk = 0; kk < kc; ++kk)
            for (int l = 0; l < nr; ++l) {
                uint16_t h;
                if (s->pairs)
                    memcpy(&h, sp + ((kk / 2) * nr + l) * 4 + (kk % 2) * 2, 2);
                else
                    memcpy(&h, sp + (kk * nr + l) * 2, 2);
                dp[kk * nr + l] = mc_gemm_f32_from_bits_(
                    s->type == MC_F16 ? mc_f16_to_f32_bits(h) : mc_bf16_to_f32_bits(h));
            }
    }
}

/* bfloat16 pairs, or 16-bit panels, widened to float32 panels of the same NR (design d), one
 * group of panels of one K block per unit; exact. */
static void mc_unit_widen_(void *ctx, int64_t u)
{
    mc_job_ *job = (mc_job_ *)ctx;
    const mc_packed *s = job->src;
    const int64_t blockno = u / job->ngroups, q0 = (u % job->ngroups) * job->group;
    const int64_t q1 = mc_min_(q0 + job->group, job->npad / s->nr);
    mc_gemm_widen_panels(s, blockno, q0, q1, (float *)job->dst);
}

/* Units of panel groups over every K block of npad columns: about MC_UNITS_PER_THREAD_ per
 * thread. */
static void mc_panel_groups_(mc_job_ *job, int64_t k, int64_t kc, int nr, int nthreads)
{
    const int64_t blocks = mc_max_(mc_ceil_div_(k, kc), 1), panels = job->npad / nr;
    const int64_t want = mc_ceil_div_((int64_t)MC_UNITS_PER_THREAD_ * nthreads, blocks);
    job->group = mc_max_(mc_ceil_div_(panels, mc_max_(want, 1)), 1);
    job->ngroups = mc_ceil_div_(panels, job->group);
}

/* Rectangles over rows [0, m) x columns [n0, n1): about MC_UNITS_PER_THREAD_ per thread, as
 * rg bands of rows times cg bands of columns (at least 4 panels wide).  Each unit packs its rows
 * of A again (cg times A in all) and streams its columns of B (rg times B in all, overlapped
 * with the arithmetic unless B has to come from memory: bigger than MC_B_CACHED_ bytes).  The
 * split minimises rg * |B| * w + cg * |A|, w = 1 for B from memory, 1/8 when cached: bands of
 * rows for a large batch, bands of columns for a small batch against wide weights (batch 64
 * against 4096 x 4096 weights reads them once instead of five times). */
#define MC_B_CACHED_ ((int64_t)8 << 20)
static int64_t mc_rects_(mc_job_ *job, int64_t m, int64_t n0, int64_t n1, int nthreads)
{
    const mc_gemm_kernel *kern = job->p->kern;
    const int64_t target = (int64_t)MC_UNITS_PER_THREAD_ * nthreads;
    const int64_t k = mc_max_(job->gi.k, 1);
    const int64_t tiles = mc_ceil_div_(n1 - n0, kern->nr);
    const int64_t max_rg = mc_max_(mc_min_(mc_ceil_div_(m, kern->mr), target), 1);
    const int64_t max_cg = mc_max_(tiles / 4, 1);
    const double a_bytes = (double)m * k * 4, b_bytes = (double)(n1 - n0) * k * job->p->belem;
    const double w = b_bytes > (double)MC_B_CACHED_ ? 1.0 : 0.125;
    /* only splits that give as many units as the shape allows (parallelism first) */
    const int64_t want = mc_min_(target, max_rg * max_cg);
    int64_t best_rg = max_rg;
    double best = -1.0;
    for (int64_t rg = max_rg; rg >= 1; --rg) {
        const int64_t cg = mc_min_(mc_ceil_div_(target, rg), max_cg);
        const double cost = (double)rg * b_bytes * w + (double)cg * a_bytes;
        if (rg * cg >= want && (best < 0.0 || cost < best)) {
            best = cost;
            best_rg = rg;
        }
    }
    job->rows_per = mc_ceil_div_(m, best_rg);
    const int64_t rg = mc_ceil_div_(m, job->rows_per);
    const int64_t cbands = mc_max_(mc_min_(mc_ceil_div_(target, rg), max_cg), 1);
    job->cols_per = mc_ceil_div_(tiles, cbands) * kern->nr;
    job->cg = mc_ceil_div_(n1 - n0, job->cols_per);
    job->n0 = n0;
    job->n1 = n1;
    return rg * job->cg;
}

/* Runs the plan over every item; `pb` is B packed ahead (possibly widened), or NULL. */
static int mc_exec_(const mc_plan_ *p, const mc_gemm_call *call, const mc_bsrc_ *pb)
{
    mc_job_ job;
    memset(&job, 0, sizeof job);
    job.p = p;
    job.call = call;
    if (pb != NULL)
        job.bs = *pb;
    const int nt = p->nthreads;
    if (nt == 1 || call->batch % nt == 0 || call->batch >= 4 * nt) {
        mc_run(mc_unit_item_, &job, call->batch, nt);
        return job.status;
    }
    for (int64_t item = 0; item < call->batch && job.status == 0; ++item) {
        mc_item_args_(call, item, &job.gi);
        const int64_t m = job.gi.m, n = job.gi.n;
        if (pb != NULL || mc_direct_ok_(p->kern, &job.gi)) {
            mc_run(mc_unit_rect_, &job, mc_rects_(&job, m, 0, n, nt), nt);
            continue;
        }
        /* design c: pack a column slab of B (phase 1), then its rectangles (phase 2) */
        const int nr = p->kern->nr;
        const int64_t panel = mc_packed_bytes_(p->kern->pairs, p->belem, nr, job.gi.k, p->blk.kc);
        if (panel < 0)
            return -2;
        const int64_t colbytes = mc_max_(panel / nr, 1);
        const int64_t slab = mc_max_(MC_SLAB_BYTES_ / colbytes / nr, 1) * nr;
        for (int64_t s0 = 0; s0 < n && job.status == 0; s0 += slab) {
            const int64_t s1 = mc_min_(s0 + slab, n);
            job.npad = mc_ceil_div_(s1 - s0, nr) * nr;
            job.n0 = s0;
            job.n1 = s1;
            const int64_t bytes = mc_packed_bytes_(p->kern->pairs, p->belem, job.npad, job.gi.k,
                                                   p->blk.kc);
            if (bytes < 0)
                return -2;
            job.dst = (char *)mc_workspace(MC_WS_SHARED, bytes);
            if (job.dst == NULL)
                return -1;
            mc_panel_groups_(&job, job.gi.k, p->blk.kc, nr, nt);
            mc_run(mc_unit_pack_, &job, mc_ceil_div_(job.gi.k, p->blk.kc) * job.ngroups, nt);
            if (job.status)
                break;
            job.bs.data = job.dst;
            job.bs.n0 = s0;
            job.bs.npad = job.npad;
            job.bs.kc = p->blk.kc;
            mc_run(mc_unit_rect_, &job, mc_rects_(&job, m, s0, s1, nt), nt);
            job.bs.data = NULL;
        }
    }
    return job.status;
}

/* Runs the plan: B packed ahead is used as is or widened first (design d). */
static int mc_run_plan_(const mc_plan_ *p, const mc_gemm_call *call)
{
    const mc_packed *pk = call->packed;
    if (pk == NULL)
        return mc_exec_(p, call, NULL);
    mc_bsrc_ bs = {pk->data, 0, mc_size_round_up(pk->n, pk->nr), pk->kc};
    const int widen = (pk->pairs && !p->kern->pairs) || (pk->elem == 2 && p->belem == 4);
    if (widen && pk->k > 0 && pk->n > 0) {
        mc_job_ job;
        memset(&job, 0, sizeof job);
        job.src = pk;
        job.npad = bs.npad;
        const int64_t bytes = mc_packed_bytes_(0, 4, bs.npad, pk->k, pk->kc);
        if (bytes < 0)
            return -2;
        job.dst = (char *)mc_workspace(MC_WS_SHARED, bytes);
        if (job.dst == NULL)
            return -1;
        const int nt = mc_rt_threads_for(mc_work_mul(pk->k, pk->n), MC_PACK_PARALLEL_MIN);
        mc_panel_groups_(&job, pk->k, pk->kc, pk->nr, nt);
        mc_run(mc_unit_widen_, &job, mc_ceil_div_(pk->k, pk->kc) * job.ngroups, nt);
        bs.data = job.dst;
    }
    return mc_exec_(p, call, &bs);
}

static int mc_gemm_planned_(const mc_level_kernels *lk, const mc_gemm_call *call)
{
    const mc_packed *pk = call->packed;
    mc_blocks want;
    mc_rt_blocks(&want);
    mc_plan_ p;
    p.kern = mc_pick_(&lk->gemm, call->g.a_type, pk != NULL ? pk->type : call->g.b_type);
    if (pk != NULL) {
        if (!pk->pairs || !p.kern->pairs)
            p.kern = &lk->gemm.f32;          /* 16-bit or float32 panels, or pairs widened */
        if (p.kern->nr != pk->nr)
            return MC_GEMM_FORMAT;
    }
    mc_plan_finish_(&p, call, &want);
    /* B's panels of one column block over all of K must be a size, whichever path packs them
     * (a stride-0 B can claim any K; design b): the same refusal at every thread count */
    if (pk == NULL && mc_packed_bytes_(p.kern->pairs, p.belem, p.kern->nr, call->g.k, p.blk.kc) < 0)
        return MC_GEMM_TOOBIG;
    int r = mc_run_plan_(&p, call);
    if (r == 1) {                            /* design f: again, on float32 panels */
        p.kern = &lk->gemm.f32;
        if (pk != NULL && p.kern->nr != pk->nr)
            return MC_GEMM_FORMAT;
        mc_plan_finish_(&p, call, &want);
        r = mc_run_plan_(&p, call);
    }
    return r == -2 ? MC_GEMM_TOOBIG : r < 0 ? MC_GEMM_NOMEM : MC_GEMM_OK;
}

int mc_gemm(const mc_gemm_call *call)
{
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    const mc_level_kernels *lk = mc_kernels(mc_rt_level());
    mc_gemm_call c = *call;
    c.g.alpha = (float)call->alpha;
    c.g.beta = (float)call->beta;
    c.g.act_row = lk->act.forward;
    c.g.act = mc_act_for_output(c.g.act, c.g.out_type);
    const int r = mc_gemm_planned_(lk, &c);
    mc_fpenv_leave(&saved);
    return r;
}

/* --- packing ahead (design d) ------------------------------------------------------------------ */

int mc_gemm_pack(const char *b, int64_t rs, int64_t cs, int type, int64_t k, int64_t n,
                 int64_t kc_min, mc_packed *out)
{
    const int level = mc_rt_level();
    const mc_level_kernels *lk = mc_kernels(level);
    mc_blocks want;
    mc_rt_blocks(&want);
    mc_plan_ p;
    memset(&p, 0, sizeof p);
    p.kern = mc_pick_(&lk->gemm, type, type);
    for (;;) {
        mc_blocks_for_(p.kern, &want, &p.blk);
        if (kc_min > p.blk.kc && kc_min < ((int64_t)1 << 32))
            p.blk.kc = kc_min + (kc_min & 1);
        p.belem = mc_b16_ok_(p.kern, type) ? 2 : 4;
        const int nr = p.kern->nr;
        memset(out, 0, sizeof *out);
        out->k = k;
        out->n = n;
        out->type = type;
        out->level = level;
        out->pairs = p.kern->pairs;
        out->elem = p.belem;
        out->nr = nr;
        out->kc = p.blk.kc;
        const int64_t npad = mc_size_round_up(n, nr);
        out->nbytes = mc_packed_bytes_(p.kern->pairs, p.belem, npad, k, p.blk.kc);
        if (out->nbytes < 0) {
            out->nbytes = 0;
            return MC_GEMM_TOOBIG;
        }
        if (out->nbytes == 0)
            return MC_GEMM_OK;
        void *data = NULL;
        if (posix_memalign(&data, 64, (size_t)out->nbytes) != 0)
            return MC_GEMM_NOMEM;
        out->data = (char *)data;
        mc_job_ job;
        memset(&job, 0, sizeof job);
        job.p = &p;
        job.gi.k = k;
        job.gi.b = b;
        job.gi.b_rs = rs;
        job.gi.b_cs = cs;
        job.gi.b_type = type;
        job.dst = out->data;
        job.npad = npad;
        job.n0 = 0;
        job.n1 = n;
        const int nt = mc_rt_threads_for(mc_work_mul(k, n), MC_PACK_PARALLEL_MIN);
        mc_panel_groups_(&job, k, p.blk.kc, nr, nt);
        mc_run(mc_unit_pack_, &job, mc_ceil_div_(k, p.blk.kc) * job.ngroups, nt);
        if (job.status == 0)
            return MC_GEMM_OK;
        mc_gemm_packed_free(out);            /* subnormal bfloat16: float32 panels (design f) */
        p.kern = &lk->gemm.f32;
    }
}

void mc_gemm_packed_free(mc_packed *p)
{
    free(p->data);
    p->data = NULL;
    p->nbytes = 0;
}

void mc_gemm_unpack(const mc_packed *p, char *dst, int64_t rs, int64_t cs)
{
    const int nr = p->nr;
    const int64_t npad = mc_ceil_div_(p->n, nr) * nr;
    /* bytes per lane of a full K block and of this one */
    const int64_t full = p->pairs ? (p->kc + 1) / 2 * 4 : p->kc * p->elem;
    for (int64_t pc = 0; pc < p->k; pc += p->kc) {
        const int64_t kc = mc_min_(p->k - pc, p->kc);
        const int64_t here = p->pairs ? (kc + 1) / 2 * 4 : kc * p->elem;
        const char *block = p->data + (pc / p->kc) * npad * full;
        for (int64_t j = 0; j < p->n; ++j) {
            const char *panel = block + (j / nr) * nr * here;
            const int l = (int)(j % nr);
            for (int64_t kk = 0; kk < kc; ++kk) {
                char *d = dst + (pc + kk) * rs + j * cs;
                if (p->pairs) {
                    memcpy(d, panel + ((kk / 2) * nr + l) * 4 + (kk % 2) * 2, 2);
                } else if (p->elem == 2 || p->type == MC_F32) {
                    memcpy(d, panel + (kk * nr + l) * p->elem, (size_t)p->elem);
                } else {
                    /* float16 / bfloat16 values widened exactly: narrowing is exact too */
                    uint32_t w;
                    memcpy(&w, panel + (kk * nr + l) * 4, 4);
                    const uint16_t h = p->type == MC_F16 ? mc_f32_to_f16_bits(w) : (uint16_t)(w >> 16);
                    memcpy(d, &h, 2);
                }
            }
        }
    }
}

void mc_gemm_kernel_info(int level, int a_type, int b_type, int *mr, int *nr, int *pairs,
                         mc_gemm_blocks *blk)
{
    const mc_gemm_kernel *kern = mc_pick_(&mc_kernels(level)->gemm, a_type, b_type);
    mc_blocks want;
    mc_rt_blocks(&want);
    mc_blocks_for_(kern, &want, blk);
    *mr = kern->mr;
    *nr = kern->nr;
    *pairs = kern->pairs;
}

void mc_gemm_pack_format(int level, int type, int *pairs, int *elem, int *nr, int64_t *kc)
{
    const mc_gemm_kernel *kern = mc_pick_(&mc_kernels(level)->gemm, type, type);
    mc_blocks want;
    mc_gemm_blocks blk;
    mc_rt_blocks(&want);
    mc_blocks_for_(kern, &want, &blk);
    *pairs = kern->pairs;
    *elem = mc_b16_ok_(kern, type) ? 2 : 4;
    *nr = kern->nr;
    *kc = blk.kc;
}
