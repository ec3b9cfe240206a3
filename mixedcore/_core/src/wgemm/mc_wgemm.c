/* Weight-only quantized GEMM: packing, the plan, the work units (the design is in
 * mc_wgemm.h; the kernels in mc_wgemm_generic.c and mc_wgemm_<isa>.c).
 *
 * Design:
 *   a. The driver uses gemm's driver API and kernels the way conv's driver does: gemm's
 *      float32 pack and micro-kernel for larger M (mc_wgemm.h, design d), its bfloat16-pair
 *      pack and micro-kernel for larger M with bfloat16 a (design g) and gemm's epilogue
 *      (the level's vector epilogue, or mc_gemm_epi_scalar) for the bias, the activation and
 *      the output rounding.
 *   b. Work units are columns (small M: a few panels each) or rows x columns (larger M), taken
 *      dynamically by the team; no unit waits for another.
 */
#include <stdlib.h>
#include <string.h>
#include "mc_checked.h"
#include "mc_convert_scalar.h"
#include "mc_cpu.h"
#include "mc_gemm.h"
#include "mc_kernels.h"
#include "mc_runtime.h"
#include "mc_wgemm.h"
#include "mc_wgemm_scalar.h"

/* multiply-adds below which a call stays on the calling thread (as gemm's) */
#define MC_WGEMM_PARALLEL_MIN ((int64_t)1 << 19)
/* rows of a converted at a time on the small-M path at the generic level (design c) */
#define MC_WGEMM_CHUNK_ROWS 256
/* most panels per small-M unit, and units per thread aimed at */
#define MC_WGEMM_UNIT_PANELS 8
#define MC_WGEMM_UNITS_PER_THREAD 4
/* rows of W widened and multiplied at a time on the larger-M path (a multiple of 8) */
#define MC_WGEMM_KCHUNK 256
/* tiles of rows per larger-M unit */
#define MC_WGEMM_BAND_TILES 8

static int64_t mc_min_(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t mc_ceil_div_(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* --- packing (mc_wgemm.h, design b) ------------------------------------------------------- */

int mc_wgemm_pack(const int8_t *kernel, int bits, int64_t k, int64_t n, const float *scale,
                  const int8_t *zero, int64_t block, mc_wpacked *out)
{
    memset(out, 0, sizeof *out);
    out->k = k;
    out->n = n;
    out->bits = bits;
    out->grouped = block > 0;
    out->block = block > 0 ? block : k;
    out->nbytes = -1;
    if (k <= 0 || n <= 0 || (bits != 4 && bits != 8))
        return MC_WGEMM_TOOBIG;
    out->groups = mc_size_ceil_div(k, out->block);
    out->kg = mc_size_round_up(out->block, MC_WGEMM_KB);
    out->panels = mc_size_ceil_div(n, MC_WGEMM_NW);
    /* the panels, then the scales and the zero points (or their place) of every column and
     * group, each rounded up to 64 bytes (mc_checked.h) */
    const int64_t pbytes = mc_size_mul(mc_size_mul(out->groups, out->kg), MC_WGEMM_NW * bits / 8);
    const int64_t qbytes = mc_size_round64(mc_size_bytes(pbytes, out->panels));
    const int64_t sbytes = mc_size_round64(
        mc_size_bytes(mc_size_mul(mc_size_mul(out->panels, MC_WGEMM_NW), out->groups), 4));
    const int64_t total = mc_size_add(qbytes, mc_size_mul(sbytes, 2));
    if (pbytes < 0 || total < 0 || total > MC_BYTES_MAX)
        return MC_WGEMM_TOOBIG;
    const int64_t cols = out->panels * MC_WGEMM_NW;
    out->pbytes = pbytes;
    out->nbytes = total;
    char *mem = NULL;
    if (posix_memalign((void **)&mem, 64, (size_t)total) != 0)
        return MC_WGEMM_NOMEM;
    memset(mem, 0, (size_t)total);
    out->mem = mem;
    out->q = (uint8_t *)mem;
    out->scale = (float *)(mem + qbytes);
    out->off = (float *)(mem + qbytes + sbytes);
    const int bias8 = bits == 4 ? 8 : 0;
    const int64_t ld = bits == 4 ? (n + 1) / 2 : n;
    for (int64_t g = 0; g < out->groups; ++g)
        for (int64_t j = 0; j < cols; ++j) {
            const int64_t at = g * cols + j;
            out->scale[at] = 1.0f;
            out->off[at] = (float)bias8;
            if (j < n) {
                out->scale[at] = scale[out->grouped ? g * n + j : j];
                if (out->grouped && zero != NULL)
                    out->off[at] = (float)(bias8 + zero[g * n + j]);
            }
        }
    out->pairs_ok = bits == 4;
    for (int64_t x = 0; x < out->groups * cols; ++x)
        out->pairs_ok &= out->off[x] >= 0.0f && out->off[x] <= 16.0f;
    for (int64_t r = 0; r < k; ++r) {
        const int64_t g = r / out->block, R = g * out->kg + (r - g * out->block);
        for (int64_t j = 0; j < n; ++j) {
            const int q = mc_wgemm_q_keras_(kernel, bits, ld, r, j);
            uint8_t *base = out->q + (j / MC_WGEMM_NW) * pbytes;
            const int c = (int)(j % MC_WGEMM_NW);
            if (bits == 8) {
                base[R * MC_WGEMM_NW + c] = (uint8_t)(int8_t)q;
            } else {
                const int sh = mc_wgemm_shift_(R);
                uint8_t *wp = base + (R / MC_WGEMM_KB) * 4 * MC_WGEMM_NW + 4 * c + sh / 8;
                *wp |= (uint8_t)((unsigned)(q + 8) << (sh % 8));
            }
        }
    }
    return MC_WGEMM_OK;
}

void mc_wgemm_packed_free(mc_wpacked *p)
{
    free(p->mem);
    p->mem = NULL;
    p->q = NULL;
    p->scale = p->off = NULL;
}

void mc_wgemm_unpack(const mc_wpacked *p, int8_t *q)
{
    const int bias8 = p->bits == 4 ? 8 : 0;
    for (int64_t r = 0; r < p->k; ++r) {
        const int64_t g = r / p->block, R = g * p->kg + (r - g * p->block);
        for (int64_t j = 0; j < p->n; ++j)
            q[r * p->n + j] = (int8_t)(mc_wgemm_code_(p, j / MC_WGEMM_NW, R,
                                                      (int)(j % MC_WGEMM_NW)) - bias8);
    }
}

/* --- the call ------------------------------------------------------------------------------- */

typedef struct {
    const mc_wgemm_call *call;
    const mc_wgemm_table *wk;
    const mc_gemm_kernel *kern;   /* gemm's float32 kernel (larger M), or NULL */
    const mc_gemm_kernel *pkern;  /* gemm's bfloat16-pair kernel (larger M, bfloat16 a), or NULL */
    mc_gemm_epi_fn epi;
    mc_gemm_args ga;              /* the epilogue's arguments */
    mc_wgemm_dot_fn dot;
    const char *abuf;             /* small M: padded rows of a (float32 or bfloat16 pairs) */
    int64_t lda, aes, kp;         /* elements per row, bytes per element, padded rows of W */
    int64_t row0, rows;           /* small M: the chunk of rows in abuf */
    int64_t unit_panels;          /* small M: panels per unit */
    int64_t band_rows, band_strips, cbands;   /* larger M: most rows and strips per unit */
    int64_t band_mr, tiles, rbands;           /* larger M: tiles of band_mr rows in rbands */
    int64_t abytes, bbytes, tbytes;           /* larger M: a unit's scratch (A, B, one tile set) */
    int status;
} mc_wjob_;

static void mc_wjob_fail_(mc_wjob_ *job)
{
    int expected = 0;
    __atomic_compare_exchange_n(&job->status, &expected, -1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* Rows [r0, r1) of a converted to padded float32 rows (or bfloat16 pairs, the odd row in the
 * low half: mc_wgemm.h, design e) at dst; returns 1 when a bfloat16 value is subnormal. */
static int mc_convert_rows_(const mc_wgemm_call *call, int64_t r0, int64_t r1, int pairs,
                            char *dst, int64_t lda)
{
    const mc_wpacked *w = call->w;
    uint16_t any = 0xFFFF;           /* the least (h & 0x7FFF) - 1 met (mc_gemm_scalar.h, b) */
    for (int64_t i = r0; i < r1; ++i) {
        const char *src = call->a + i * call->a_rs;
        if (pairs) {
            uint16_t *d = (uint16_t *)dst + (i - r0) * lda;
            memset(d, 0, (size_t)lda * 2);
            for (int64_t g = 0, k0 = 0; k0 < w->k; ++g, k0 += w->block) {
                const int64_t kc = mc_min_(w->k - k0, w->block);
                uint16_t *dg = d + g * w->kg;
                const char *sg = src + k0 * call->a_cs;
                for (int64_t r = 0; r < kc; ++r) {
                    uint16_t h;
                    memcpy(&h, sg + r * call->a_cs, 2);
                    const uint16_t t = (uint16_t)((h & 0x7FFFu) - 1u);
                    any = t < any ? t : any;
                    dg[r ^ 1] = h;
                }
            }
        } else {
            float *d = (float *)dst + (i - r0) * lda;
            memset(d, 0, (size_t)lda * 4);
            for (int64_t g = 0, k0 = 0; k0 < w->k; ++g, k0 += w->block) {
                const int64_t kc = mc_min_(w->k - k0, w->block);
                float *dg = d + g * w->kg;
                const char *sg = src + k0 * call->a_cs;
                if (call->a_type == MC_F32) {
                    for (int64_t r = 0; r < kc; ++r)
                        memcpy(&dg[r], sg + r * call->a_cs, 4);
                } else {
                    for (int64_t r = 0; r < kc; ++r) {
                        uint16_t h;
                        memcpy(&h, sg + r * call->a_cs, 2);
                        const uint32_t u = call->a_type == MC_F16 ? mc_f16_to_f32_bits(h)
                                                                  : mc_bf16_to_f32_bits(h);
                        memcpy(&dg[r], &u, 4);
                    }
                }
            }
        }
    }
    return any < 0x7Fu;
}

/* Small M (mc_wgemm.h, design c): panels [p0, p0 + unit_panels) for every row of the chunk. */
static void mc_unit_small_(void *ctx, int64_t u)
{
    mc_wjob_ *job = (mc_wjob_ *)ctx;
    if (__atomic_load_n(&job->status, __ATOMIC_RELAXED))
        return;
    const mc_wpacked *w = job->call->w;
    const int64_t p0 = u * job->unit_panels, np = mc_min_(job->unit_panels, w->panels - p0);
    const int64_t ldt = np * MC_WGEMM_NW;
    float *tile = (float *)mc_workspace(MC_WS_WORK, MC_WGEMM_MR * ldt * 4);
    if (tile == NULL) {
        mc_wjob_fail_(job);
        return;
    }
    const int nc = (int)(mc_min_(w->n, (p0 + np) * MC_WGEMM_NW) - p0 * MC_WGEMM_NW);
    for (int64_t i = 0; i < job->rows; i += MC_WGEMM_MR) {
        const int mr = (int)mc_min_(job->rows - i, MC_WGEMM_MR);
        job->dot(w, job->abuf + i * job->lda * job->aes, job->lda, mr, p0, np, tile, ldt);
        job->epi(&job->ga, tile, (int)ldt, mr, nc, job->row0 + i, p0 * MC_WGEMM_NW, 1, 1);
    }
}

/* Rows [i, i + rows) of a as gemm's bfloat16 pair panels, group by group (the rows past each
 * group's end zero), the halves of every word then swapped so that the even row of a pair is
 * in the high half (mc_wgemm.h, design g).  Returns 1 when a value is subnormal. */
static int mc_pack_pairs_(const mc_wgemm_call *call, const mc_gemm_kernel *pk, int64_t i,
                          int64_t rows, uint32_t *dst)
{
    const mc_wpacked *w = call->w;
    const int mr = pk->mr;
    const int64_t pr = w->kg / 2;
    int sub = 0;
    for (int64_t g = 0; g < w->groups; ++g) {
        const int64_t k0 = g * w->block, kc = mc_min_(w->k - k0, w->block);
        uint32_t *d = dst + g * pr * mr;
        sub |= pk->pack(call->a + i * call->a_rs + k0 * call->a_cs, MC_BF16, call->a_rs,
                        call->a_cs, rows, kc, mr, d);
        const int64_t used = (kc + 1) / 2;
        memset(d + used * mr, 0, (size_t)((pr - used) * mr) * 4);
    }
    const int64_t words = w->groups * pr * mr;
    for (int64_t x = 0; x < words; ++x)
        dst[x] = dst[x] >> 16 | dst[x] << 16;
    return sub;
}

/* Larger M (mc_wgemm.h, designs d and g): rows [r0, r1) x strips of NR columns.  On the float32
 * kernel each group's rows go through gemm's in-place micro-kernel in chunks of
 * MC_WGEMM_KCHUNK, each chunk adding to the tile of the chunk before (one FMA chain per
 * element, as in one call); on the pair kernel each group's weights are widened to pair panels
 * once per strip and gemm's pair micro-kernel sums the whole group in one call.  A band whose
 * rows of a hold a subnormal value goes through the float32 kernel (design g). */
static void mc_unit_large_(void *ctx, int64_t u)
{
    mc_wjob_ *job = (mc_wjob_ *)ctx;
    if (__atomic_load_n(&job->status, __ATOMIC_RELAXED))
        return;
    const mc_wgemm_call *call = job->call;
    const mc_wpacked *w = call->w;
    const int64_t b = u / job->cbands, q = job->tiles / job->rbands, e = job->tiles % job->rbands;
    const int64_t r0 = (b * q + mc_min_(b, e)) * job->band_mr;
    const int64_t r1 = mc_min_(r0 + (q + (b < e)) * job->band_mr, call->m);
    char *ws = (char *)mc_workspace(MC_WS_WORK, job->abytes + job->bbytes + 2 * job->tbytes);
    if (ws == NULL) {
        mc_wjob_fail_(job);
        return;
    }
    float *sums = (float *)(ws + job->abytes + job->bbytes);
    float *tot = (float *)(ws + job->abytes + job->bbytes + job->tbytes);
    const mc_gemm_kernel *kern = job->pkern;
    if (kern != NULL) {
        const int64_t tiles = mc_ceil_div_(r1 - r0, kern->mr);
        for (int64_t t = 0; t < tiles && kern != NULL; ++t) {
            const int64_t i = r0 + t * kern->mr, rows = mc_min_(r1 - i, kern->mr);
            if (mc_pack_pairs_(call, kern, i, rows, (uint32_t *)ws + t * kern->mr * (job->kp / 2)))
                kern = NULL;                            /* design g: subnormal a */
        }
    }
    const int pairs = kern != NULL;
    if (!pairs) {
        kern = job->kern;
        const int64_t tiles = mc_ceil_div_(r1 - r0, kern->mr);
        for (int64_t t = 0; t < tiles; ++t) {
            const int64_t i = r0 + t * kern->mr, rows = mc_min_(r1 - i, kern->mr);
            float *at = (float *)ws + t * kern->mr * job->kp;
            for (int64_t g = 0; g < w->groups; ++g) {
                const int64_t k0 = g * w->block, kc = mc_min_(w->k - k0, w->block);
                float *dst = at + g * w->kg * kern->mr;
                kern->pack(call->a + i * call->a_rs + k0 * call->a_cs, call->a_type, call->a_rs,
                           call->a_cs, rows, kc, kern->mr, dst);
                memset(dst + kc * kern->mr, 0, (size_t)((w->kg - kc) * kern->mr) * 4);
            }
        }
    }
    const int mr = kern->mr, nr = kern->nr;
    const int64_t tiles = mc_ceil_div_(r1 - r0, mr);
    const int64_t nstrips = mc_ceil_div_(w->n, nr);
    const int64_t s0 = (u % job->cbands) * job->band_strips;
    const int64_t s1 = mc_min_(s0 + job->band_strips, nstrips);
    const int64_t kchunk = mc_min_(w->kg, MC_WGEMM_KCHUNK);
    const int64_t cols = w->panels * MC_WGEMM_NW;
    const int64_t pr = w->kg / 2;
    void *bp = ws + job->abytes;
    for (int64_t s = s0; s < s1; ++s) {
        const int64_t p0 = s * (nr / MC_WGEMM_NW);
        const int np = (int)mc_min_(nr / MC_WGEMM_NW, w->panels - p0);
        const int nc = (int)mc_min_(w->n - p0 * MC_WGEMM_NW, nr);
        for (int64_t g = 0; g < w->groups; ++g) {
            if (pairs) {
                job->wk->widen_pairs(w, g, p0, np, nr, (uint32_t *)bp);
                for (int64_t t = 0; t < tiles; ++t) {
                    const int rows = (int)mc_min_(r1 - (r0 + t * mr), mr);
                    kern->ukr(pr, (const uint32_t *)ws + (t * (job->kp / 2) + g * pr) * mr, bp,
                              sums + t * mr * nr, rows);
                }
            } else {
                for (int64_t c0 = 0; c0 < w->kg; c0 += kchunk) {
                    const int64_t kc = mc_min_(w->kg - c0, kchunk);
                    job->wk->widen(w, g, g * w->kg + c0, kc, p0, np, nr, (float *)bp);
                    for (int64_t t = 0; t < tiles; ++t) {
                        const int rows = (int)mc_min_(r1 - (r0 + t * mr), mr);
                        kern->ukr_direct(kc, (const float *)ws + t * mr * job->kp +
                                                 (g * w->kg + c0) * mr,
                                         (const char *)bp, (int64_t)nr * 4, (int64_t)nr * 4,
                                         MC_F32, nr, sums + t * mr * nr, nr, rows, c0 > 0);
                    }
                }
            }
            const float *sc = w->scale + g * cols + p0 * MC_WGEMM_NW;
            const int mode = !w->grouped ? MC_WGEMM_DIV : g == 0 ? MC_WGEMM_FIRST : MC_WGEMM_NEXT;
            for (int64_t t = 0; t < tiles; ++t) {
                const int rows = (int)mc_min_(r1 - (r0 + t * mr), mr);
                job->wk->combine(sums + t * mr * nr, nr, rows, np * MC_WGEMM_NW, sc,
                                 tot + t * mr * nr, nr, mode);
            }
        }
        for (int64_t t = 0; t < tiles; ++t) {
            const int rows = (int)mc_min_(r1 - (r0 + t * mr), mr);
            job->epi(&job->ga, tot + t * mr * nr, nr, rows, nc, r0 + t * mr, p0 * MC_WGEMM_NW,
                     1, 1);
        }
    }
}

static int mc_wgemm_small_(mc_wjob_ *job, int nthreads, int try_pairs)
{
    const mc_wgemm_call *call = job->call;
    const mc_wpacked *w = call->w;
    const int64_t chunk = mc_min_(call->m, MC_WGEMM_CHUNK_ROWS);
    int pairs = try_pairs;
    job->lda = job->kp;
    const int64_t bytes = mc_size_bytes(mc_size_mul(chunk, job->kp), 4);
    if (bytes < 0)
        return MC_WGEMM_TOOBIG;
    char *abuf = (char *)mc_workspace(MC_WS_SHARED, bytes);
    if (abuf == NULL)
        return MC_WGEMM_NOMEM;
    job->abuf = abuf;
    const int64_t want = mc_ceil_div_(w->panels, (int64_t)nthreads * MC_WGEMM_UNITS_PER_THREAD);
    job->unit_panels = want < 1 ? 1 : want > MC_WGEMM_UNIT_PANELS ? MC_WGEMM_UNIT_PANELS : want;
    const int64_t nunits = mc_ceil_div_(w->panels, job->unit_panels);
    for (int64_t r0 = 0; r0 < call->m; r0 += chunk) {
        const int64_t r1 = mc_min_(r0 + chunk, call->m);
        if (pairs && mc_convert_rows_(call, r0, r1, 1, abuf, job->lda))
            pairs = 0;                                  /* design e: subnormal a */
        if (!pairs)
            mc_convert_rows_(call, r0, r1, 0, abuf, job->lda);
        job->dot = pairs ? job->wk->dot_bf16 : job->wk->dot;
        job->aes = pairs ? 2 : 4;
        job->row0 = r0;
        job->rows = r1 - r0;
        mc_run(mc_unit_small_, job, nunits, nthreads);
        if (job->status)
            return MC_WGEMM_NOMEM;
    }
    return MC_WGEMM_OK;
}

static int mc_wgemm_large_(mc_wjob_ *job, int nthreads)
{
    const mc_wgemm_call *call = job->call;
    const mc_wpacked *w = call->w;
    const mc_gemm_kernel *band = job->pkern != NULL ? job->pkern : job->kern;
    const int nr = job->kern->nr;
    const int64_t nstrips = mc_ceil_div_(w->n, nr);
    const int64_t tiles = mc_ceil_div_(call->m, band->mr);
    /* bands of up to MC_WGEMM_BAND_TILES tiles of rows (of the pair kernel when it is used);
     * the columns cut too when the bands are fewer than the units wanted.  A unit's scratch:
     * the band's A panels (float32: band rows x kp floats; pairs: half that), B (float32: a
     * chunk of rows x nr; pairs: a group's kg / 2 pair rows x nr words), two sets of tiles. */
    const int64_t tpb = tiles < MC_WGEMM_BAND_TILES ? tiles : MC_WGEMM_BAND_TILES;
    job->band_rows = tpb * band->mr;
    const int64_t ftiles = mc_ceil_div_(job->band_rows, job->kern->mr);
    const int64_t rows = mc_size_mul(ftiles, job->kern->mr);
    const int64_t ab = mc_size_round64(mc_size_bytes(mc_size_mul(rows, job->kp), 4));
    const int64_t bb = mc_size_round64(mc_size_bytes(mc_min_(w->kg, MC_WGEMM_KCHUNK), (int64_t)nr * 4));
    const int64_t tb = mc_size_round64(mc_size_bytes(rows, (int64_t)nr * 4));
    int64_t pab = 0, pbb = 0, ptb = 0;
    if (job->pkern != NULL) {
        pab = mc_size_round64(mc_size_bytes(mc_size_mul(job->band_rows, job->kp), 2));
        pbb = mc_size_round64(mc_size_bytes(w->kg, (int64_t)nr * 2));
        ptb = mc_size_round64(mc_size_bytes(job->band_rows, (int64_t)nr * 4));
    }
    if (ab < 0 || bb < 0 || tb < 0 || pab < 0 || pbb < 0 || ptb < 0)
        return MC_WGEMM_TOOBIG;
    job->abytes = ab > pab ? ab : pab;
    job->bbytes = bb > pbb ? bb : pbb;
    job->tbytes = tb > ptb ? tb : ptb;
    const int64_t total = mc_size_add(mc_size_add(job->abytes, job->bbytes), mc_size_mul(job->tbytes, 2));
    if (total < 0 || total > MC_BYTES_MAX)
        return MC_WGEMM_TOOBIG;
    /* the bands' tiles split evenly, in a multiple of the threads' count of bands when there
     * are enough tiles (no thread left with one band more than the other) */
    int64_t rbands = mc_ceil_div_(tiles, tpb);
    if (mc_ceil_div_(rbands, nthreads) * nthreads <= tiles)
        rbands = mc_ceil_div_(rbands, nthreads) * nthreads;
    job->band_mr = band->mr;
    job->tiles = tiles;
    job->rbands = rbands;
    int64_t cb = mc_ceil_div_((int64_t)nthreads * MC_WGEMM_UNITS_PER_THREAD, rbands);
    cb = cb < 1 ? 1 : cb > nstrips ? nstrips : cb;
    job->band_strips = mc_ceil_div_(nstrips, cb);
    job->cbands = mc_ceil_div_(nstrips, job->band_strips);
    mc_run(mc_unit_large_, job, rbands * job->cbands, nthreads);
    return job->status ? MC_WGEMM_NOMEM : MC_WGEMM_OK;
}

int mc_wgemm(const mc_wgemm_call *call)
{
    const mc_wpacked *w = call->w;
    if (call->m == 0)
        return MC_WGEMM_OK;
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    const int level = mc_rt_level();
    const mc_level_kernels *lk = mc_kernels(level);
    mc_wjob_ job;
    memset(&job, 0, sizeof job);
    job.call = call;
    job.wk = &lk->wgemm;
    job.kp = w->groups * w->kg;
    mc_gemm_args *g = &job.ga;
    g->m = call->m;
    g->n = w->n;
    g->k = w->k;
    g->out = call->out;
    g->o_rs = call->o_rs;
    g->o_cs = call->o_cs;
    g->out_type = call->out_type;
    g->bias = call->bias;
    g->bias_s = call->bias_s;
    g->alpha = 1.0f;
    g->beta = 0.0f;
    g->act = mc_act_for_output(call->act, call->out_type);
    g->act_row = lk->act.forward;
    const int64_t es = call->out_type == MC_F32 ? 4 : 2;
    const int contiguous = call->o_cs == es &&
                           (call->bias == NULL || call->bias_s == 0 || call->bias_s == 4);
    job.epi = contiguous && lk->gemm.f32.epi != NULL ? lk->gemm.f32.epi : mc_gemm_epi_scalar;
    int r;
    const int nthreads = mc_rt_threads_for(mc_work_mul(mc_work_mul(call->m, w->n), w->k),
                                           MC_WGEMM_PARALLEL_MIN);
    /* up to MC_WGEMM_PAIRS_M rows the small-M pair kernel streams the weights (design e), above
     * them gemm's pair micro-kernel (design g) is faster; gemm's float32 micro-kernels sum with
     * FMAs from the avx2 level up (design d), the generic one multiplies, then adds */
    const int pairs = job.wk->dot_bf16 != NULL && call->a_type == MC_BF16 && w->pairs_ok;
    const int fma_large = level >= MC_ISA_AVX2 && lk->gemm.f32.ukr_direct != NULL &&
                          lk->gemm.f32.nr % MC_WGEMM_NW == 0;
    /* design g: above MC_WGEMM_PAIRS_M rows, bfloat16 a and weights exact in bfloat16 on gemm's
     * pair micro-kernel (with the float32 one for bands of subnormal a) */
    const int pairs_large = fma_large && call->a_type == MC_BF16 &&
                            call->m > MC_WGEMM_PAIRS_M && job.wk->widen_pairs != NULL &&
                            (w->pairs_ok || w->bits == 8) && lk->gemm.pairs.pack != NULL &&
                            lk->gemm.pairs.ukr != NULL && lk->gemm.pairs.nr == lk->gemm.f32.nr;
    if (pairs_large || (!pairs && call->m > MC_WGEMM_SMALL_M && fma_large)) {
        job.kern = &lk->gemm.f32;
        job.pkern = pairs_large ? &lk->gemm.pairs : NULL;
        r = mc_wgemm_large_(&job, nthreads);
    } else {
        r = mc_wgemm_small_(&job, nthreads, pairs);
    }
    mc_fpenv_leave(&saved);
    return r;
}
