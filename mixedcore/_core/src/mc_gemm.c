/* GEMM: the blocked loops, the generic (portable C) kernels and the per-level selection.
 *
 * Design:
 *   a. One blocked loop nest for every level (mc_gemm.h, design a): mc_gemm_run() for one
 *      rectangle on the calling thread, mc_gemm_run_shared() for one product on an OpenMP team
 *      that shares the packed B block.  The blocking lives here, in C, rather than in the Cython
 *      driver, so that the shared variant can put barriers inside it; the Cython driver still
 *      decides the split and the thread count.  The level only supplies the pack /
 *      micro-kernel / epilogue functions and block sizes.
 *   b. The generic kernels are the scalar twins: packing through the conversion twins of
 *      mc_convert_scalar.h, a 4 x 16 micro-kernel that multiplies then adds (two roundings per
 *      step, since the baseline has no FMA; the error bound of docs/gemm.md still holds), and
 *      the epilogue in plain C.  Compilers may vectorise them for the baseline, never beyond it,
 *      and -ffp-contract=off keeps every rounding where the source puts it.
 *   c. The activation is the scalar twin of mc_act_scalar.h (float64 inside, rounded once to
 *      float32), the same function the elementwise kernels apply; the AVX-512 epilogue's vector
 *      version (mc_act_avx512_inl.h) gives the same bits.  gelu is the exact form x * Phi(x)
 *      (Keras' default, approximate=False).
 *   d. mc_gemm_select() picks the kernel of the highest level <= the requested one that has the
 *      input pair: bfloat16 x bfloat16 uses VDPBF16PS at avx512bf16; every other pair (and
 *      bfloat16 below that level) goes through float32 panels.
 *   e. Small M (<= MR rows) reads B in place (mc_gemm_direct_) when its rows are contiguous, and
 *      (<= MC_DIRECT_T_MAXM rows) by columns (mc_gemm_direct_t_) when they are contiguous along
 *      k: the same operations in the same order as the packed path, so the same bits.
 *   f. Scratch buffers are thread-local and kept for the life of the thread (OpenMP keeps its
 *      pool), so calls do not page-fault fresh allocations: at the avx512 levels about 4.6 MiB
 *      per thread that ran a large product, plus 4 MiB for the shared B block.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mc_act_scalar.h"
#include "mc_convert_scalar.h"
#include "mc_cpu.h"
#include "mc_gemm.h"
#if defined(_OPENMP)
#include <omp.h>
#endif

#define G_MR 4
#define G_NR 16

static inline float mc_f32_from_bits_(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t mc_bits_from_f32_(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float mc_load_elem_(const char *p, int type)
{
    if (type == MC_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return mc_f32_from_bits_(type == MC_F16 ? mc_f16_to_f32_bits(h) : mc_bf16_to_f32_bits(h));
}

/* --- activation ------------------------------------------------------------------------------ */

float mc_gemm_act_scalar_(int act, float v)
{
    return mc_act_scalar_f32_(act, v);
}

/* --- packing ---------------------------------------------------------------------------------- */

void mc_gemm_pack_generic_(const char *src, int type, int64_t ls, int64_t ks, int64_t lanes,
                           int64_t kc, int w, void *dst)
{
    float *d = (float *)dst;
    for (int64_t k = 0; k < kc; ++k) {
        const char *s = src + k * ks;
        int64_t l = 0;
        for (; l < lanes; ++l)
            d[l] = mc_load_elem_(s + l * ls, type);
        for (; l < w; ++l)
            d[l] = 0.0f;
        d += w;
    }
}

/* bfloat16 only: word l of pair p holds element 2p in its low half and 2p + 1 in its high half
 * (the layout VDPBF16PS multiplies pairwise); the element past an odd kc is zero. */
void mc_gemm_pack_pairs_generic_(const char *src, int type, int64_t ls, int64_t ks, int64_t lanes,
                                 int64_t kc, int w, void *dst)
{
    uint32_t *d = (uint32_t *)dst;
    (void)type;
    for (int64_t k = 0; k < kc; k += 2) {
        const char *s = src + k * ks;
        int64_t l = 0;
        for (; l < lanes; ++l) {
            uint16_t lo, hi = 0;
            memcpy(&lo, s + l * ls, 2);
            if (k + 1 < kc)
                memcpy(&hi, s + ks + l * ls, 2);
            d[l] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
        for (; l < w; ++l)
            d[l] = 0;
        d += w;
    }
}

/* --- generic micro-kernel --------------------------------------------------------------------- */

static void mc_gemm_ukr_generic_(int64_t kc, const void *ap, const void *bp, float *tile, int mr)
{
    const float *a = (const float *)ap, *b = (const float *)bp;
    float c[G_MR][G_NR];
    memset(c, 0, sizeof c);
    for (int64_t k = 0; k < kc; ++k) {
        for (int i = 0; i < G_MR; ++i) {
            const float ai = a[i];
            for (int j = 0; j < G_NR; ++j)
                c[i][j] += ai * b[j];
        }
        a += G_MR;
        b += G_NR;
    }
    for (int i = 0; i < mr; ++i)
        memcpy(tile + i * G_NR, c[i], sizeof c[i]);
}

/* --- epilogue --------------------------------------------------------------------------------- */

#define MC_AT_(base, rs, cs, i, j) ((base) + (i) * (rs) + (j) * (cs))

void mc_gemm_epi_generic_(const mc_gemm_args *g, const float *tile, int ldt, int mr, int nr,
                          int64_t i, int64_t j, int first, int last)
{
    for (int r = 0; r < mr; ++r) {
        for (int s = 0; s < nr; ++s) {
            const int64_t ii = i + r, jj = j + s;
            float t = tile[r * ldt + s];
            float *acc = (float *)MC_AT_((char *)g->acc, g->acc_rs, g->acc_cs, ii, jj);
            if (!first)
                t += *acc;
            if (!last) {
                *acc = t;
                continue;
            }
            float v = g->alpha == 1.0f ? t : g->alpha * t;
            if (g->beta != 0.0f)
                v += g->beta * *(const float *)MC_AT_((const char *)g->c, g->c_rs, g->c_cs, ii, jj);
            if (g->bias)
                v += *(const float *)((const char *)g->bias + jj * g->bias_s);
            v = mc_gemm_act_scalar_(g->act, v);
            char *o = MC_AT_(g->out, g->o_rs, g->o_cs, ii, jj);
            if (g->out_type == MC_F32) {
                memcpy(o, &v, 4);
            } else {
                const uint32_t u = mc_bits_from_f32_(v);
                const uint16_t h = g->out_type == MC_F16 ? mc_f32_to_f16_bits(u) : mc_f32_to_bf16_bits(u);
                memcpy(o, &h, 2);
            }
        }
    }
}

/* --- selection and blocks ---------------------------------------------------------------------- */

static const mc_gemm_kernel mc_gemm_generic_ = {
    G_MR, G_NR, 0, 4, mc_gemm_pack_generic_, mc_gemm_ukr_generic_, mc_gemm_epi_generic_, NULL,
    64, 256, 2048, 0, NULL,
};

const mc_gemm_kernel *mc_gemm_select(int level, int a_type, int b_type)
{
    const mc_gemm_kernel *k = NULL;
#if defined(MC_HAVE_AVX512BF16)
    if (!k && level >= MC_ISA_AVX512BF16)
        k = mc_gemm_kernel_avx512bf16(a_type, b_type);
#endif
#if defined(MC_HAVE_AVX512)
    if (!k && level >= MC_ISA_AVX512)
        k = mc_gemm_kernel_avx512(a_type, b_type);
#endif
#if defined(MC_HAVE_AVX2)
    if (!k && level >= MC_ISA_AVX2)
        k = mc_gemm_kernel_avx2(a_type, b_type);
#endif
    (void)level;
    (void)a_type;
    (void)b_type;
    return k ? k : &mc_gemm_generic_;
}

void mc_gemm_blocks_for(const mc_gemm_kernel *kern, const mc_gemm_blocks *want, mc_gemm_blocks *blk)
{
    int64_t mc = want && want->mc > 0 ? want->mc : kern->mc;
    int64_t kc = want && want->kc > 0 ? want->kc : kern->kc;
    int64_t nc = want && want->nc > 0 ? want->nc : kern->nc;
    mc = (mc + kern->mr - 1) / kern->mr * kern->mr;
    nc = (nc + kern->nr - 1) / kern->nr * kern->nr;
    kc = (kc + 1) / 2 * 2;
    blk->mc = mc;
    blk->kc = kc;
    blk->nc = nc;
}

static int64_t mc_round64_(int64_t x) { return (x + 63) & ~(int64_t)63; }

/* Bytes of a packed block of `lanes` lanes and kc deep (pairs take half the rows). */
static int64_t mc_block_bytes_(const mc_gemm_kernel *kern, int64_t lanes, int64_t kc)
{
    return mc_round64_(lanes * (kern->pairs ? (kc + 1) / 2 : kc) * 4);
}

int64_t mc_gemm_workspace_bytes(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk)
{
    return mc_block_bytes_(kern, blk->nc, blk->kc) + mc_block_bytes_(kern, blk->mc, blk->kc) +
           mc_round64_((int64_t)kern->mr * (blk->nc > kern->nr ? blk->nc : kern->nr) * 4) + 64;
}

static _Thread_local void *mc_ws_[2] = {NULL, NULL};
static _Thread_local int64_t mc_ws_bytes_[2] = {0, 0};

void *mc_gemm_workspace_(int slot, int64_t bytes)
{
    if (bytes <= mc_ws_bytes_[slot])
        return mc_ws_[slot];
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)bytes) != 0)
        return NULL;
    free(mc_ws_[slot]);
    mc_ws_[slot] = p;
    mc_ws_bytes_[slot] = bytes;
    return p;
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
    }
    const int64_t span = (int64_t)(nr - 1) * cs;
    for (int r = 0; r < mr; ++r) {
        const char *p = base + (i + r) * rs + j * cs;
        __builtin_prefetch(p, 1, 3);
        __builtin_prefetch(p + span, 1, 3);
    }
#else
    (void)g; (void)i; (void)j; (void)mr; (void)nr; (void)first; (void)last;
#endif
}

/* Rows of B in place (design of mc_gemm_run): the tile spans the whole nc columns; k advances
 * in steps of MC_DIRECT_KB rows, each step sweeping all column strips, so B is read row after
 * row (a strip alone would jump ldb bytes per k: with a power-of-two ldb every row falls in the
 * same cache set).  Each element still sees its products in k order, as in the packed path. */
#define MC_DIRECT_KB 16
static void mc_gemm_direct_(const mc_gemm_kernel *kern, const mc_gemm_args *g, const char *ap,
                            float *tile, int64_t ic, int64_t mcb, int64_t jc, int64_t nc,
                            int64_t pc, int64_t kc, int64_t ksteps, int first, int last)
{
    const int mr = kern->mr, nr = kern->nr;
    const int64_t ldt = (nc + nr - 1) / nr * nr;
    const int64_t es = g->b_type == MC_F32 ? 4 : 2;
    for (int64_t ir = 0; ir < mcb; ir += mr) {
        const int mrr = (int)(mcb - ir < mr ? mcb - ir : mr);
        const char *a = ap + ir * ksteps * 4;
        for (int64_t kk = 0; kk < kc; kk += MC_DIRECT_KB) {
            const int64_t kb = kc - kk < MC_DIRECT_KB ? kc - kk : MC_DIRECT_KB;
            const char *arow = a + (kern->pairs ? kk / 2 : kk) * mr * 4;
            const char *b = g->b + (pc + kk) * g->b_rs + jc * es;
            /* 1-3 rows hold too few accumulators to cover the FMA latency over NR columns:
             * such tiles take direct_wide columns per call when the level offers it */
            const int step = mrr <= 3 && kern->direct_wide > nr ? kern->direct_wide : nr;
            for (int64_t jr = 0; jr < nc; jr += step)
                kern->ukr_direct(kb, arow, b + jr * es, g->b_rs, g->b_type,
                                 (int)(nc - jr < step ? nc - jr : step), tile + jr, ldt, mrr,
                                 kk > 0);
        }
        for (int64_t jr = 0; jr < nc; jr += nr)
            kern->epi(g, tile + jr, (int)ldt, mrr, (int)(nc - jr < nr ? nc - jr : nr), ic + ir,
                      jc + jr, first, last);
    }
}

/* Columns of B in place (B contiguous along k): one call per NR-column strip over the whole
 * kc, loading 16 columns x 16 k and transposing them in registers; each element again sees
 * its products in k order. */
static void mc_gemm_direct_t_(const mc_gemm_kernel *kern, const mc_gemm_args *g, const char *ap,
                              float *tile, int64_t ic, int64_t mcb, int64_t jc, int64_t nc,
                              int64_t pc, int64_t kc, int first, int last)
{
    const int nr = kern->nr;
    const int64_t ldt = (nc + nr - 1) / nr * nr;
    const int mrr = (int)mcb;                        /* <= MC_DIRECT_T_MAXM: one tile row */
    for (int64_t jr = 0; jr < nc; jr += nr) {
        const int nrr = (int)(nc - jr < nr ? nc - jr : nr);
        kern->ukr_direct_t(kc, ap, g->b + pc * g->b_rs + (jc + jr) * g->b_cs, g->b_cs,
                           g->b_type, nrr, tile + jr, ldt, mrr);
        kern->epi(g, tile + jr, (int)ldt, mrr, nrr, ic, jc + jr, first, last);
    }
}

/* Packs the B panels q = q0, q0 + qstep, ... of the block at (pc, jc). */
static void mc_gemm_pack_b_(const mc_gemm_kernel *kern, const mc_gemm_args *g, int64_t jc,
                            int64_t nc, int64_t pc, int64_t kc, int64_t ksteps, char *bp,
                            int64_t q0, int64_t qstep)
{
    const int nr = kern->nr;
    for (int64_t jr = q0 * nr; jr < nc; jr += qstep * nr)
        kern->pack(g->b + pc * g->b_rs + (jc + jr) * g->b_cs, g->b_type, g->b_cs, g->b_rs,
                   nc - jr < nr ? nc - jr : nr, kc, nr, bp + jr * ksteps * 4);
}

/* Rows [m0, m1) of the block at (pc, jc), B already packed in bp (unless direct). */
static void mc_gemm_rows_(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk,
                          const mc_gemm_args *g, int64_t m0, int64_t m1, int64_t jc, int64_t nc,
                          int64_t pc, int64_t kc, int direct, const char *bp, char *ap, float *tile)
{
    const int mr = kern->mr, nr = kern->nr;
    const int64_t ksteps = kern->pairs ? (kc + 1) / 2 : kc;   /* packed rows: k steps or pairs */
    const int first = pc == 0, last = pc + kc >= g->k;
    for (int64_t ic = m0; ic < m1; ic += blk->mc) {
        const int64_t mcb = m1 - ic < blk->mc ? m1 - ic : blk->mc;
        for (int64_t ir = 0; ir < mcb; ir += mr)
            kern->pack(g->a + (ic + ir) * g->a_rs + pc * g->a_cs, g->a_type, g->a_rs, g->a_cs,
                       mcb - ir < mr ? mcb - ir : mr, kc, mr, ap + ir * ksteps * 4);
        if (direct == 2) {
            mc_gemm_direct_t_(kern, g, ap, tile, ic, mcb, jc, nc, pc, kc, first, last);
            continue;
        }
        if (direct) {
            mc_gemm_direct_(kern, g, ap, tile, ic, mcb, jc, nc, pc, kc, ksteps, first, last);
            continue;
        }
        for (int64_t jr = 0; jr < nc; jr += nr) {
            const int nrr = (int)(nc - jr < nr ? nc - jr : nr);
            for (int64_t ir = 0; ir < mcb; ir += mr) {
                const int mrr = (int)(mcb - ir < mr ? mcb - ir : mr);
                mc_prefetch_tile_(g, ic + ir, jc + jr, mrr, nrr, first, last);
                kern->ukr(ksteps, ap + ir * ksteps * 4, bp + jr * ksteps * 4, tile, mrr);
                kern->epi(g, tile, nr, mrr, nrr, ic + ir, jc + jr, first, last);
            }
        }
    }
}

static void mc_gemm_k_zero_(const mc_gemm_kernel *kern, const mc_gemm_args *g, int64_t m0,
                            int64_t m1, int64_t n0, int64_t n1, float *tile)
{
    const int mr = kern->mr, nr = kern->nr;
    memset(tile, 0, (size_t)mr * nr * 4);
    for (int64_t i = m0; i < m1; i += mr)
        for (int64_t j = n0; j < n1; j += nr)
            kern->epi(g, tile, nr, (int)(m1 - i < mr ? m1 - i : mr),
                      (int)(n1 - j < nr ? n1 - j : nr), i, j, 1, 1);
}

/* A product with at most MR rows reads each element of B once: the micro-kernel then reads B in
 * place rather than packing it (packing would write and read it once more).  Decided on the
 * whole item (g->m), never on the rectangle, so the thread split cannot change it. */
static int mc_gemm_direct_ok_(const mc_gemm_kernel *kern, const mc_gemm_args *g)
{
    const int64_t es = g->b_type == MC_F32 ? 4 : 2;
    if (kern->ukr_direct != NULL && g->m <= kern->mr && g->b_cs == es)
        return 1;                                    /* rows of B contiguous */
    if (kern->ukr_direct_t != NULL && g->m <= MC_DIRECT_T_MAXM && g->b_rs == es)
        return 2;                                    /* columns of B contiguous */
    return 0;
}

void mc_gemm_run(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk, const mc_gemm_args *g,
                 int64_t m0, int64_t m1, int64_t n0, int64_t n1, void *work)
{
    const int64_t K = g->k;
    char *bp = (char *)work;
    char *ap = bp + mc_block_bytes_(kern, blk->nc, blk->kc);
    float *tile = (float *)(ap + mc_block_bytes_(kern, blk->mc, blk->kc));
    const int direct = mc_gemm_direct_ok_(kern, g);

    if (K == 0) {
        mc_gemm_k_zero_(kern, g, m0, m1, n0, n1, tile);
        return;
    }
    for (int64_t jc = n0; jc < n1; jc += blk->nc) {
        const int64_t nc = n1 - jc < blk->nc ? n1 - jc : blk->nc;
        for (int64_t pc = 0; pc < K; pc += blk->kc) {
            const int64_t kc = K - pc < blk->kc ? K - pc : blk->kc;
            if (!direct)
                mc_gemm_pack_b_(kern, g, jc, nc, pc, kc, kern->pairs ? (kc + 1) / 2 : kc, bp, 0, 1);
            mc_gemm_rows_(kern, blk, g, m0, m1, jc, nc, pc, kc, direct, bp, ap, tile);
        }
    }
}

int mc_gemm_run_shared(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk,
                       const mc_gemm_args *g, int nthreads)
{
    const int64_t K = g->k, mr = kern->mr;
    const int64_t abytes = mc_block_bytes_(kern, blk->mc, blk->kc) +
                           mc_round64_(mr * (blk->nc > kern->nr ? blk->nc : kern->nr) * 4) + 64;
    char *bp = (char *)mc_gemm_workspace_(1, mc_block_bytes_(kern, blk->nc, blk->kc));
    int failed = bp == NULL;
    if (failed || K == 0 || nthreads < 2 || mc_gemm_direct_ok_(kern, g)) {
        if (failed)
            return -1;
        char *w = (char *)mc_gemm_workspace_(0, mc_gemm_workspace_bytes(kern, blk));
        if (w == NULL)
            return -1;
        mc_gemm_run(kern, blk, g, 0, g->m, 0, g->n, w);
        return 0;
    }
#if defined(_OPENMP)
#pragma omp parallel num_threads(nthreads)
#endif
    {
#if defined(_OPENMP)
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int t = 0, nt = 1;
#endif
        /* equal bands of rows (not of whole tiles): each band ends with its own partial tile,
         * which balances better than one thread holding every full tile (1024 rows: 36 tiles
         * + 8 rows each, instead of 37 tiles against 36 + 2 rows) */
        const int64_t chunk = (g->m + nt - 1) / nt;
        const int64_t m0 = t * chunk < g->m ? t * chunk : g->m;
        const int64_t m1 = m0 + chunk < g->m ? m0 + chunk : g->m;
        char *ap = (char *)mc_gemm_workspace_(0, abytes);
        float *tile = ap ? (float *)(ap + mc_block_bytes_(kern, blk->mc, blk->kc)) : NULL;
        if (ap == NULL) {
#if defined(_OPENMP)
#pragma omp atomic write
#endif
            failed = 1;
        }
        int stop;
#if defined(_OPENMP)
#pragma omp barrier
#pragma omp atomic read
#endif
        stop = failed;
        for (int64_t jc = 0; jc < g->n && !stop; jc += blk->nc) {
            const int64_t nc = g->n - jc < blk->nc ? g->n - jc : blk->nc;
            for (int64_t pc = 0; pc < K; pc += blk->kc) {
                const int64_t kc = K - pc < blk->kc ? K - pc : blk->kc;
                mc_gemm_pack_b_(kern, g, jc, nc, pc, kc, kern->pairs ? (kc + 1) / 2 : kc, bp, t, nt);
#if defined(_OPENMP)
#pragma omp barrier
#endif
                mc_gemm_rows_(kern, blk, g, m0, m1, jc, nc, pc, kc, 0, bp, ap, tile);
#if defined(_OPENMP)
#pragma omp barrier
#endif
            }
        }
    }
    return failed ? -1 : 0;
}
