/* Convolution drivers and im2col / col2im (the generic level's kernels are in
 * mc_conv_generic.c); see mc_conv.h for the design.
 *
 * Design (of this file):
 *   a. mc_conv_gemm() makes its plan once, like mc_gemm(): the level, the kernel (the bfloat16
 *      pair kernel for bfloat16 data against pair panels, else the float32-panel kernel), the
 *      panel format of the packed weights (used as they are, or widened to float32 panels when
 *      the current level's kernel cannot read them), the band height and the thread count.
 *   b. Work units are bands of output pixels (rows of the implicit im2col matrix), at most the
 *      kernel's MC rows, times bands of filters (mc_conv_units_: as even a share per thread as
 *      the shape allows).  A unit computes its rectangle for every group:
 *      for each K block (the packed weights' KC), the im2col rows of each micro-tile are copied
 *      into a small buffer (MR x KC elements: L1 or L2) and packed by the level's pack, then
 *      the micro-kernel runs against every panel of the weights, and the GEMM's epilogue adds
 *      the partial sums of earlier K blocks or, after the last one, the bias, the activation
 *      and the output rounding.  Every element therefore sees the operations kernels.matmul
 *      would apply to the explicit im2col matrix, in the same order.
 *   c. A subnormal bfloat16 met by the pair pack (VDPBF16PS would read it as zero) makes the
 *      call start again on float32 panels, as mc_gemm() does.
 *   d. The depthwise driver walks output pixels in bands of rows; for each pixel it lists the
 *      valid taps (padding is skipped; mc_conv_geom.h), calls the level's kernel, and applies
 *      the epilogue: bias, activation (the level's elementwise kernel, mc_act.h) and rounding
 *      to the output type (the level's conversion kernel).  With a depth multiplier of 1, one
 *      type in and out and an activation of a few instructions (none, relu, relu6), a level's
 *      mc_dw_epi_fn runs the epilogue on the sums in its registers instead (the same
 *      operations: the row's epilogue is the GEMM's).
 *   e. Backward helpers run image by image, so every sum into the input gradient is taken in
 *      one order whatever the threads do.
 *   f. A micro-tile of pixels of one output row whose windows lie inside the image (and whose
 *      taps cover whole pixels, K in one block) is packed straight from the image: per kernel
 *      row, its taps are one run of kw x C values at each pixel, the pixels stride x C apart,
 *      which the level's pack reads as rows contiguous along k into the same part of the panel
 *      that the im2col copy would have filled.  The same panel, without the copy: 3 x 3
 *      convolutions of 64 channels on 56 x 56 images spent a tenth of their time copying.
 *   g. When such a tile is the whole sum (K in one block, the epilogue from registers) and the
 *      image is of the kernel's A type (bfloat16 for the pair kernel, float32 for the float32
 *      one), it is not packed at all: the level's ukr_epi_a reads it in place, one segment per
 *      kernel row (its rows stride x C apart, its segments a dilated image row apart), the
 *      steps in the panel's order, so the same bits.  For the pair kernel the level's
 *      sub_rows scans the tile's segments for subnormal bfloat16 first (design c), the rows of
 *      a segment that overlap along the image row as one run (each value once: 3 x 3
 *      bfloat16 convolutions of 64 channels on 56 x 56 images, one thread, 1-3% faster).  3 x 3
 *      convolutions of 64 float32 channels on 56 x 56 images, one thread: 2.29 -> 2.21 ms;
 *      bfloat16 is level (its pack was already a small share).
 *   h. Windows cut to the image.  pack_conv keeps a kernel's K in one block (kc_min), so with
 *      one group, dilation 1 along w, weights all finite (its packer says so), an image of the
 *      kernel's A type and, for pairs, an even channel count, the call computes each pixel over
 *      only the taps of its window that lie inside the image: the taps left out would add
 *      0 * w, an exact zero, to a sum that starts at +0 and so is never -0 -- the same bits
 *      (for VDPBF16PS, which flushes a subnormal partial sum at every step, a partial sum below
 *      2**-126 at such a tap is kept instead of flushed).  The tiles (mc_cut_) are runs of
 *      pixels that share their taps: an inner row's inner pixels read in place over every
 *      kernel row; the other rows (kernel rows outside the image) packed from im2col rows of
 *      their kernel rows inside it, one segment; an edge column's inner rows read in place down
 *      the column (rows an output row apart, the epilogue's rows likewise), one segment per
 *      kernel row over its tap columns inside the image, the panel's steps for those taps
 *      (ukr_epi_a's bsstride).  Units are bands of tiles dealt out by their work
 *      (mc_cut_units_).  bfloat16 3 x 3 convolutions, one thread, against the same image with
 *      its padding written out: 7 x 7 x 512 0.85x the time, 14 x 14 x 256 0.92x, 28 x 28 x 128
 *      0.96x, 56 x 56 x 64 0.98x (the share of taps outside the image: 18%, 9%, 5%, 2%).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mc_checked.h"
#include "mc_conv.h"
#include "mc_convert_scalar.h"
#include "mc_gemm.h"
#include "mc_gemm_scalar.h"
#include "mc_kernels.h"
#include "mc_runtime.h"

/* the most micro-tiles of a unit whose rows are read from the image in place (design g, h) */
#define MC_CONV_TILES 16
/* the bytes of a unit's packed rows of one K block, at most (about an L2 cache) */
#define MC_CONV_ABLOCK ((int64_t)576 * 1024)
/* multiply-adds below which a convolution stays on the calling thread (the GEMM's threshold) */
#define MC_CONV_PARALLEL_MIN ((int64_t)1 << 19)
/* element-taps below which depthwise and the helpers stay on the calling thread */
#define MC_CONV_SMALL_MIN ((int64_t)1 << 16)

static int64_t mc_min_(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t mc_max_(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t mc_ceil_div_(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* --- im2col ------------------------------------------------------------------------------------ */

/* n bytes, inlined for the short runs of images with few channels: up to 64 bytes as a few
 * fixed-size moves, the last one overlapping the one before (no byte loop) */
static inline void mc_copy_(char *d, const char *s, int64_t n)
{
    if (n > 64) {
        memcpy(d, s, (size_t)n);
        return;
    }
    if (n >= 16) {
        for (int64_t o = 0; o + 16 < n; o += 16)
            memcpy(d + o, s + o, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else if (n >= 2) {
        memcpy(d, s, 2);
        memcpy(d + n - 2, s + n - 2, 2);
    } else if (n == 1) {
        *d = *s;
    }
}

/* One im2col row of a window that meets the padding: per kernel row, the valid taps are one
 * range of j, zeros around it. */
static void mc_im2col_edge_(const mc_conv_geom *g, const char *img, int64_t ih0, int64_t iw0,
                            int64_t pixb, int64_t rowb, int64_t tapb, int merge, char *d)
{
    /* valid taps j: 0 <= iw0 + j * dw < w */
    const int64_t jlo = iw0 >= 0 ? 0 : mc_ceil_div_(-iw0, g->dw);
    const int64_t jhi = iw0 >= g->w ? 0 : mc_min_(g->kw, mc_ceil_div_(g->w - iw0, g->dw));
    for (int64_t i = 0; i < g->kh; ++i, d += g->kw * tapb) {
        const int64_t ih = ih0 + i * g->dh;
        if (ih < 0 || ih >= g->h || jlo >= jhi) {
            memset(d, 0, (size_t)(g->kw * tapb));
            continue;
        }
        if (jlo > 0)
            memset(d, 0, (size_t)(jlo * tapb));
        const char *src = img + ih * rowb + (iw0 + jlo * g->dw) * pixb;
        if (merge) {
            mc_copy_(d + jlo * tapb, src, (jhi - jlo) * tapb);
        } else {
            for (int64_t j = jlo; j < jhi; ++j)
                mc_copy_(d + j * tapb, src + (j - jlo) * g->dw * pixb, tapb);
        }
        if (jhi < g->kw)
            memset(d + jhi * tapb, 0, (size_t)((g->kw - jhi) * tapb));
    }
}

/* Whole rows (all K columns): per kernel row, the valid taps are one range of j, copied in
 * one run when they cover every channel of adjacent pixels. */
static void mc_im2col_full_(const mc_conv_geom *g, const char *x, int es, int64_t c0, int64_t cg,
                            int64_t r0, int64_t r1, char *dst, int64_t ldd)
{
    const int64_t ohw = g->oh * g->ow;
    const int64_t pixb = g->c * es, rowb = g->w * pixb, imgb = g->h * rowb, tapb = cg * es;
    const int merge = cg == g->c && g->dw == 1;
    int64_t n = r0 / ohw, rem = r0 - n * ohw;
    int64_t oh = rem / g->ow, ow = rem - oh * g->ow;
    /* a window wholly inside the image, its taps covering whole pixels: one run per kernel row
     * (the common case, without the divisions below) */
    const int64_t span_h = (g->kh - 1) * g->dh, span_w = (g->kw - 1) * g->dw;
    for (int64_t r = r0; r < r1; ++r) {
        char *d = dst + (r - r0) * ldd;
        const int64_t ih0 = oh * g->sh - g->pt, iw0 = ow * g->sw - g->pl;
        const char *img = x + n * imgb + c0 * es;
        if (merge && ih0 >= 0 && iw0 >= 0 && ih0 + span_h < g->h && iw0 + span_w < g->w) {
            const char *src = img + ih0 * rowb + iw0 * pixb;
            for (int64_t i = 0; i < g->kh; ++i, d += g->kw * tapb, src += g->dh * rowb)
                mc_copy_(d, src, g->kw * tapb);
        } else {
            mc_im2col_edge_(g, img, ih0, iw0, pixb, rowb, tapb, merge, d);
        }
        if (++ow == g->ow) {
            ow = 0;
            if (++oh == g->oh) {
                oh = 0;
                ++n;
            }
        }
    }
}

void mc_conv_im2col_rows(const mc_conv_geom *g, const char *x, int es, int64_t c0, int64_t cg,
                         int64_t r0, int64_t r1, int64_t k0, int64_t k1, char *dst, int64_t ldd)
{
    if (r0 >= r1 || k0 >= k1)
        return;
    if (k0 == 0 && k1 == g->kh * g->kw * cg) {
        mc_im2col_full_(g, x, es, c0, cg, r0, r1, dst, ldd);
        return;
    }
    /* a range of columns (a K block): tap by tap, partial taps at both ends */
    const int64_t ohw = g->oh * g->ow;
    const int64_t pixb = g->c * es, rowb = g->w * pixb, imgb = g->h * rowb;
    /* taps j, j + 1, ... of one kernel row are adjacent runs in memory when they cover every
     * channel of consecutive pixels */
    const int merge = cg == g->c && g->dw == 1;
    int64_t n = r0 / ohw, rem = r0 - n * ohw;
    int64_t oh = rem / g->ow, ow = rem - oh * g->ow;
    const int64_t t0 = k0 / cg;
    for (int64_t r = r0; r < r1; ++r) {
        char *d = dst + (r - r0) * ldd;
        const int64_t ih0 = oh * g->sh - g->pt, iw0 = ow * g->sw - g->pl;
        const char *img = x + n * imgb + c0 * es;
        int64_t i = t0 / g->kw, j = t0 - i * g->kw, c = k0 - t0 * cg;
        for (int64_t k = k0; k < k1;) {
            const int64_t ih = ih0 + i * g->dh, iw = iw0 + j * g->dw;
            int64_t len = mc_min_(cg - c, k1 - k), taps = 1;
            if (ih >= 0 && ih < g->h && iw >= 0 && iw < g->w) {
                if (merge && c == 0) {
                    /* whole valid taps further along this kernel row, within [k, k1) */
                    taps = mc_min_(g->kw - j, g->w - iw);
                    while (taps > 1 && k + taps * cg > k1)
                        --taps;
                    len = taps == 1 ? len : taps * cg;
                }
                mc_copy_(d, img + ih * rowb + iw * pixb + c * es, len * es);
            } else {
                memset(d, 0, (size_t)(len * es));
            }
            d += len * es;
            k += len;
            c = 0;
            j += taps;
            if (j >= g->kw) {
                j = 0;
                ++i;
            }
        }
        if (++ow == g->ow) {
            ow = 0;
            if (++oh == g->oh) {
                oh = 0;
                ++n;
            }
        }
    }
}

typedef struct {
    const mc_conv_geom *g;
    const char *x;
    int es;
    int64_t c0, cg, rows, m, k;
    char *dst;
} mc_im2col_job_;

static void mc_im2col_unit_(void *ctx, int64_t u)
{
    const mc_im2col_job_ *job = (const mc_im2col_job_ *)ctx;
    const int64_t r0 = u * job->rows, r1 = mc_min_(r0 + job->rows, job->m);
    mc_conv_im2col_rows(job->g, job->x, job->es, job->c0, job->cg, r0, r1, 0, job->k,
                        job->dst + r0 * job->k * job->es, job->k * job->es);
}

void mc_conv_im2col(const mc_conv_geom *g, const char *x, int es, int64_t c0, int64_t cg,
                    char *dst)
{
    mc_im2col_job_ job = {g, x, es, c0, cg, 0, mc_size_mul(mc_size_mul(g->n, g->oh), g->ow),
                          mc_size_mul(mc_size_mul(g->kh, g->kw), cg), dst};
    if (job.m <= 0 || job.k <= 0)            /* empty, or larger than any dst (no dst then) */
        return;
    const int nt = mc_rt_threads_for(mc_work_mul(job.m, job.k), MC_CONV_SMALL_MIN);
    job.rows = mc_max_(mc_ceil_div_(job.m, 8 * nt), 1);
    mc_run(mc_im2col_unit_, &job, mc_ceil_div_(job.m, job.rows), nt);
}

/* --- col2im (design e) -------------------------------------------------------------------------- */

typedef struct {
    const mc_conv_geom *g;
    const char *src;
    int type;
    int64_t c0, cg;
    char *dx;
} mc_col2im_job_;

static void mc_col2im_unit_(void *ctx, int64_t n)
{
    const mc_col2im_job_ *job = (const mc_col2im_job_ *)ctx;
    const mc_conv_geom *g = job->g;
    const int64_t es = job->type == MC_F64 ? 8 : 4;
    const int64_t k = g->kh * g->kw * job->cg;
    const char *src = job->src + n * g->oh * g->ow * k * es;
    char *img = job->dx + (n * g->h * g->w * g->c + job->c0) * es;
    for (int64_t oh = 0; oh < g->oh; ++oh)
        for (int64_t ow = 0; ow < g->ow; ++ow, src += k * es) {
            const int64_t ih0 = oh * g->sh - g->pt, iw0 = ow * g->sw - g->pl;
            for (int64_t i = 0; i < g->kh; ++i) {
                const int64_t ih = ih0 + i * g->dh;
                if (ih < 0 || ih >= g->h)
                    continue;
                for (int64_t j = 0; j < g->kw; ++j) {
                    const int64_t iw = iw0 + j * g->dw;
                    if (iw < 0 || iw >= g->w)
                        continue;
                    const int64_t t = i * g->kw + j;
                    char *d = img + (ih * g->w + iw) * g->c * es;
                    if (job->type == MC_F64) {
                        double *dd = (double *)d;
                        const double *s = (const double *)src + t * job->cg;
                        for (int64_t c = 0; c < job->cg; ++c)
                            dd[c] += s[c];
                    } else {
                        float *df = (float *)d;
                        const float *s = (const float *)src + t * job->cg;
                        for (int64_t c = 0; c < job->cg; ++c)
                            df[c] += s[c];
                    }
                }
            }
        }
}

void mc_conv_col2im(const mc_conv_geom *g, const char *src, int type, int64_t c0, int64_t cg,
                    char *dx)
{
    mc_col2im_job_ job = {g, src, type, c0, cg, dx};
    if (g->n == 0 || g->oh == 0 || g->ow == 0 || cg == 0)
        return;
    const int nt = mc_rt_threads_for(mc_work_mul(mc_work_mul(mc_work_mul(g->n, g->oh), g->ow),
                                                 mc_work_mul(mc_work_mul(g->kh, g->kw), cg)),
                                     MC_CONV_SMALL_MIN);
    mc_run(mc_col2im_unit_, &job, g->n, nt);
}

/* --- convolution as a GEMM (design a, b, c) ----------------------------------------------------- */

/* The inner range [lo, hi) of one axis: the outputs o whose taps o * s - p + t * d (t < k) all
 * lie in [0, n), of nout outputs (empty: lo == hi). */
static void mc_inner_(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, int64_t nout,
                      int64_t *lo, int64_t *hi)
{
    const int64_t span = (k - 1) * d;
    int64_t l = (p + s - 1) / s;                                 /* o * s - p >= 0 */
    int64_t h = n - 1 - span + p >= 0 ? (n - 1 - span + p) / s + 1 : 0;
    l = mc_min_(l, nout);
    *lo = l;
    *hi = mc_max_(mc_min_(h, nout), l);
}

/* The taps [t0, t1) of one axis that lie in [0, n) for the window starting at i0 (an empty
 * range when none does). */
static void mc_taps_(int64_t i0, int64_t n, int64_t k, int64_t d, int64_t *t0, int64_t *t1)
{
    const int64_t lo = i0 >= 0 ? 0 : mc_ceil_div_(-i0, d);
    const int64_t hi = i0 >= n ? 0 : mc_min_(k, mc_ceil_div_(n - i0, d));
    *t0 = mc_min_(lo, k);
    *t1 = mc_max_(hi, *t0);
}

/* Design h: the tiles of one image.  Part A: per inner output row (every kernel row inside
 * the image), its inner pixels (every tap column inside) in `na` runs of at most MR, read in
 * place; per other row, all its pixels in `nf` runs, packed from im2col rows of its kernel rows
 * inside the image (in place when the run has only inner pixels).  Part B: per edge column (a
 * pixel some of whose tap columns fall outside: `edges` of them), its inner rows in `nbm` runs,
 * read in place.  No tile is a lone pixel unless its run is: a tile of one row keeps two
 * accumulator chains and waits on them. */
typedef struct {
    int64_t in0, in1, rin0, rin1;    /* the inner columns and rows */
    int64_t na, nf, nbm, edges;
    int64_t part_a, per_image;       /* tiles of part A, of an image */
} mc_cut_;

/* A tile of design h: `count` pixels of image n from (oh, ow), along the row or (down) down
 * the column. */
typedef struct {
    int64_t n, oh, ow, count;
    int down;
} mc_cut_tile_;

static int64_t mc_split_at_(int64_t lo, int64_t len, int64_t runs, int64_t q)
{
    const int64_t base = len / runs, extra = len - base * runs;
    return lo + q * base + mc_min_(q, extra);
}

static void mc_cut_geom_(const mc_conv_geom *g, int mr, mc_cut_ *c)
{
    mc_inner_(g->w, g->kw, g->sw, g->pl, g->dw, g->ow, &c->in0, &c->in1);
    mc_inner_(g->h, g->kh, g->sh, g->pt, g->dh, g->oh, &c->rin0, &c->rin1);
    c->na = mc_ceil_div_(c->in1 - c->in0, mr);
    c->nf = mc_ceil_div_(g->ow, mr);
    c->nbm = mc_ceil_div_(c->rin1 - c->rin0, mr);
    c->edges = g->ow - (c->in1 - c->in0);
    c->part_a = (c->rin1 - c->rin0) * c->na + (g->oh - (c->rin1 - c->rin0)) * c->nf;
    c->per_image = c->part_a + c->edges * c->nbm;
}

/* Tile t (of all images) of design h. */
static void mc_cut_tile_at_(const mc_cut_ *c, const mc_conv_geom *g, int64_t t, mc_cut_tile_ *o)
{
    o->n = t / c->per_image;
    t -= o->n * c->per_image;
    const int64_t inner = (c->rin1 - c->rin0) * c->na;
    o->down = 0;
    if (t < inner) {                                   /* an inner row's inner pixels */
        const int64_t q = t % c->na, len = c->in1 - c->in0;
        o->oh = c->rin0 + t / c->na;
        o->ow = mc_split_at_(c->in0, len, c->na, q);
        o->count = mc_split_at_(c->in0, len, c->na, q + 1) - o->ow;
        return;
    }
    if (t < c->part_a) {                               /* a row outside [rin0, rin1) */
        t -= inner;
        const int64_t e = t / c->nf, q = t - e * c->nf;
        o->oh = e < c->rin0 ? e : c->rin1 + (e - c->rin0);
        o->ow = mc_split_at_(0, g->ow, c->nf, q);
        o->count = mc_split_at_(0, g->ow, c->nf, q + 1) - o->ow;
        return;
    }
    t -= c->part_a;                                    /* an edge column's inner rows */
    const int64_t e = t / c->nbm, q = t - e * c->nbm, len = c->rin1 - c->rin0;
    o->ow = e < c->in0 ? e : c->in1 + (e - c->in0);
    o->oh = mc_split_at_(c->rin0, len, c->nbm, q);
    o->count = mc_split_at_(c->rin0, len, c->nbm, q + 1) - o->oh;
    o->down = 1;
}

typedef struct {
    const mc_conv_call *call;
    const mc_gemm_kernel *kern;
    mc_gemm_epi_fn epi;
    mc_act_forward_fn act_row;
    const char **bdata;          /* per group: panels, packed or widened */
    int belem;                   /* bytes per panel element: 4 (float32 or pairs) or 2 */
    int b_type;
    int64_t kc, npad, m, rows, k, cg, fg;
    int64_t cols, cbands;        /* a unit's columns (a multiple of NR) and the bands of them */
    int cut;                     /* design h: the windows cut to the image */
    int64_t tiles, cut_tiles;    /* design h: tiles of a unit, of the call */
    mc_cut_ cutg;                /* design h: the tiles of an image */
    int status;
} mc_cjob_;

static int64_t mc_steps_(const mc_gemm_kernel *kern, int64_t kc)
{
    return kern->pairs ? (kc + 1) / 2 : kc;
}

static int64_t mc_panel_bytes_(const mc_cjob_ *job, int64_t kc)
{
    return (int64_t)job->kern->nr * mc_steps_(job->kern, kc) * job->belem;
}

static void mc_cjob_fail_(mc_cjob_ *job, int r)
{
    int expected = 0;
    __atomic_compare_exchange_n(&job->status, &expected, r, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* The calling thread's work space of `bytes` (< 0: too large), or NULL with the job failed. */
static char *mc_cjob_work_(mc_cjob_ *job, int64_t bytes)
{
    if (bytes < 0 || bytes > MC_BYTES_MAX) {
        mc_cjob_fail_(job, -2);
        return NULL;
    }
    char *work = (char *)mc_workspace(MC_WS_WORK, bytes);
    if (work == NULL)
        mc_cjob_fail_(job, -1);
    return work;
}

/* The best split of units met so far: the least cost, ties to fewer units. */
typedef struct {
    double cost;                 /* < 0: none yet */
    int64_t t, c, units;         /* tiles of a band, bands of columns, units */
} mc_split_;

static void mc_split_take_(mc_split_ *best, double cost, int64_t t, int64_t c, int64_t units)
{
    if (best->cost < 0.0 || cost < best->cost - 1e-9 ||
        (cost < best->cost + 1e-9 && units < best->units)) {
        best->cost = cost;
        best->t = t;
        best->c = c;
        best->units = units;
    }
}

/* Sets the job's column bands of the split; returns its tiles of a band. */
static int64_t mc_split_apply_(mc_cjob_ *job, const mc_split_ *best, int64_t panels)
{
    const int nr = job->kern->nr;
    job->cols = mc_ceil_div_(panels, best->c) * nr;
    job->cbands = mc_ceil_div_(panels, job->cols / nr);
    return best->t;
}

/* Work units (design b, h): bands of the call's `tiles` micro-tiles times bands of columns.  Of
 * the splits with at most max_tiles tiles per band, the one whose busiest thread has the least
 * work when the units are dealt out in turn: a unit costs its tiles times (its panels + pack,
 * the packing of its rows: 0.4, measured at a fifth of the time of a two-panel tile, or 0 for
 * tiles read in place).  Ties go to fewer units.  Small images (ResNet50's 7 x 7 and 14 x 14
 * layers on two threads) get column bands instead of a last band of rows that one thread
 * computes alone.  Returns the tiles of a band; sets the column bands. */
static int64_t mc_conv_units_(mc_cjob_ *job, int64_t tiles, int64_t max_tiles, double pack,
                              int nt)
{
    const int nr = job->kern->nr;
    const int64_t panels = mc_max_(mc_ceil_div_(job->fg, nr), 1);
    tiles = mc_max_(tiles, 1);
    mc_split_ best = {-1.0, mc_min_(tiles, max_tiles), 1, 0};
    for (int64_t t = 1; t <= mc_min_(tiles, max_tiles); ++t) {
        const int64_t bands = mc_ceil_div_(tiles, t);
        for (int64_t c = 1; c <= panels && c <= 8; ++c) {
            const int64_t per = mc_ceil_div_(panels, c), units = bands * c;
            if (nt > 1 && units < nt)
                continue;
            mc_split_take_(&best,
                           (double)mc_ceil_div_(units, nt) *
                               ((double)t * ((double)per + pack) + 0.5 * (double)per),
                           t, c, units);
        }
    }
    return mc_split_apply_(job, &best, panels);
}

/* Where the im2col rows r .. r + mrr - 1 of a convolution whose K is one block lie in the image
 * (design f): when every window is inside the image, the rows are pixels of one output row, the
 * taps cover whole pixels (one group, no dilation along w) and, for pair panels, a kernel row's
 * run of taps is an even number of values, the first value of the first row's first kernel row;
 * rows *lda bytes apart, kernel rows *sstride bytes apart, each a run of *run values.  Else
 * NULL. */
static const char *mc_conv_tile_src_(const mc_conv_call *call, const mc_gemm_kernel *kern,
                                     int64_t cg, int64_t r, int64_t mrr, int xes, int64_t *lda,
                                     int64_t *sstride, int64_t *run)
{
    const mc_conv_geom *g = &call->geo;
    *run = g->kw * g->c;
    if (cg != g->c || g->dw != 1 || (kern->pairs && *run % 2 != 0))
        return NULL;
    const int64_t ohw = g->oh * g->ow;
    const int64_t n = r / ohw, rem = r - n * ohw, oh = rem / g->ow, ow = rem - oh * g->ow;
    if (ow + mrr > g->ow)
        return NULL;
    const int64_t ih0 = oh * g->sh - g->pt, iw0 = ow * g->sw - g->pl;
    const int64_t iw_last = (ow + mrr - 1) * g->sw - g->pl + g->kw - 1;
    if (ih0 < 0 || ih0 + (g->kh - 1) * g->dh >= g->h || iw0 < 0 || iw_last >= g->w)
        return NULL;
    const int64_t pixb = g->c * xes, rowb = g->w * pixb;
    *lda = g->sw * pixb;
    *sstride = g->dh * rowb;
    return call->x + (n * g->h + ih0) * rowb + iw0 * pixb;
}

/* Packs those rows straight from the image, one pack call per kernel row (design f).  Returns 1
 * when it packed them (the pack's subnormal report ORed into *sub), else 0. */
static int mc_conv_pack_direct_(const mc_conv_call *call, const mc_gemm_kernel *kern,
                                int64_t cg, int64_t r, int64_t mrr, int xes, char *dst, int *sub)
{
    int64_t lda, sstride, run;
    const char *src = mc_conv_tile_src_(call, kern, cg, r, mrr, xes, &lda, &sstride, &run);
    if (src == NULL)
        return 0;
    const int64_t steps = kern->pairs ? run / 2 : run;
    for (int64_t i = 0; i < call->geo.kh; ++i)
        *sub |= kern->pack(src + i * sstride, call->x_type, lda, xes, mrr, run, kern->mr,
                           dst + i * steps * kern->mr * 4);
    return 1;
}

/* Design h's units: its tiles differ in work (a pixel of an edge row or column takes only its
 * taps inside the image), so for a call of at most MC_CUT_SIM_TILES tiles the split is chosen
 * by dealing the units out as the team does (each to the thread that is free first), every unit
 * costing its tiles' work (pixels times the share of K they take, in whole tiles) times its
 * panels, plus half its panels (reading them).  14 x 14 x 256 at batch 1 on two threads: one
 * unit each (equal tile counts) left one thread 15% more work than the other.  Larger calls, or
 * more threads than MC_CUT_SIM_THREADS, take mc_conv_units_'s equal tiles. */
#define MC_CUT_SIM_TILES 256
#define MC_CUT_SIM_THREADS 16
static int64_t mc_cut_units_(mc_cjob_ *job, int64_t max_tiles, int nt)
{
    const mc_conv_geom *g = &job->call->geo;
    const mc_cut_ *c = &job->cutg;
    const int64_t T = job->cut_tiles;
    if (T > MC_CUT_SIM_TILES || nt > MC_CUT_SIM_THREADS)
        return mc_conv_units_(job, T, max_tiles, 0.0, nt);
    const int mr = job->kern->mr, nr = job->kern->nr;
    const int64_t panels = mc_max_(mc_ceil_div_(job->fg, nr), 1);
    double work[MC_CUT_SIM_TILES + 1];          /* prefix sums of the tiles' work */
    work[0] = 0.0;
    for (int64_t t = 0; t < T; ++t) {
        mc_cut_tile_ ct;
        mc_cut_tile_at_(c, g, t, &ct);
        int64_t i0, i1, q0 = 0, q1 = g->kw;
        mc_taps_(ct.oh * g->sh - g->pt, g->h, g->kh, g->dh, &i0, &i1);
        if (ct.down)
            mc_taps_(ct.ow * g->sw - g->pl, g->w, g->kw, 1, &q0, &q1);
        work[t + 1] = work[t] + (double)ct.count / mr * (double)((i1 - i0) * (q1 - q0)) /
                                    (double)(g->kh * g->kw);
    }
    mc_split_ best = {-1.0, 1, 1, 0};
    for (int64_t t = 1; t <= mc_min_(T, max_tiles); ++t) {
        const int64_t bands = mc_ceil_div_(T, t);
        for (int64_t cb = 1; cb <= panels && cb <= 8; cb *= 2) {
            const int64_t per = mc_ceil_div_(panels, cb), units = bands * cb;
            if (nt > 1 && units < nt)
                continue;
            double load[MC_CUT_SIM_THREADS] = {0.0};
            for (int64_t u = 0; u < units; ++u) {
                const int64_t a = (u / cb) * t, b = mc_min_(a + t, T);
                int th = 0;
                for (int q = 1; q < nt; ++q)
                    if (load[q] < load[th])
                        th = q;
                load[th] += (work[b] - work[a]) * (double)per + 0.5 * (double)per;
            }
            double span = 0.0;
            for (int q = 0; q < nt; ++q)
                span = load[q] > span ? load[q] : span;
            mc_split_take_(&best, span, t, cb, units);
        }
    }
    return mc_split_apply_(job, &best, panels);
}

/* The epilogue's arguments of group grp, without the accumulator (mc_conv_unit_ sets it). */
static void mc_conv_args_(const mc_cjob_ *job, int64_t grp, mc_gemm_args *ga)
{
    const mc_conv_call *call = job->call;
    const int oes = call->out_type == MC_F32 ? 4 : 2;
    memset(ga, 0, sizeof *ga);
    ga->m = job->m;
    ga->n = job->fg;
    ga->k = job->k;
    ga->out = call->out + grp * job->fg * oes;
    ga->o_rs = call->f * oes;
    ga->o_cs = oes;
    ga->out_type = call->out_type;
    ga->bias = call->bias != NULL ? call->bias + grp * job->fg : NULL;
    ga->bias_s = 4;
    ga->alpha = 1.0f;
    ga->beta = 0.0f;
    ga->act = mc_act_for_output(call->act, call->out_type);
    ga->act_row = job->act_row;
    if (call->res != NULL) {
        ga->res = call->res + grp * job->fg * oes;
        ga->res_rs = ga->o_rs;
    }
}

/* Whether a segment read in place (rows lda bytes apart, run values each) holds a subnormal
 * bfloat16 (design c).  Rows whose runs overlap or touch (windows along an image row) are
 * scanned as the one run from the first row's start to the last row's end: the values they
 * read, each once. */
static int mc_sub_segment_(const mc_gemm_kernel *kern, const char *src, int64_t lda, int64_t rows,
                           int64_t run, int64_t es)
{
    if (rows > 1 && lda >= 0 && lda <= run * es)
        return kern->sub_rows(src, 0, 1, ((rows - 1) * lda) / es + run);
    return kern->sub_rows(src, lda, rows, run);
}

/* A unit of design h: its tiles (at most MC_CONV_TILES), each over the taps of its windows
 * that lie inside the image, read in place or packed first, times its band of columns. */
static void mc_conv_cut_unit_(void *ctx, int64_t u)
{
    mc_cjob_ *job = (mc_cjob_ *)ctx;
    if (__atomic_load_n(&job->status, __ATOMIC_RELAXED))
        return;
    const mc_conv_call *call = job->call;
    const mc_conv_geom *g = &call->geo;
    const mc_gemm_kernel *kern = job->kern;
    const int mr = kern->mr, nr = kern->nr;
    const int xes = call->x_type == MC_F32 ? 4 : 2;
    const int64_t pixb = g->c * xes, rowb = g->w * pixb, imgb = g->h * rowb;
    const int64_t step_bytes = (int64_t)nr * 4;     /* one step of a panel (belem 4) */
    const int64_t krow = g->kw * g->c;              /* the values of one kernel row */
    const int64_t t0 = (u / job->cbands) * job->tiles;
    const int64_t t1 = mc_min_(t0 + job->tiles, job->cut_tiles);
    const int64_t j0 = (u % job->cbands) * job->cols, j1 = mc_min_(j0 + job->cols, job->fg);
    /* packed tiles: their im2col rows, then their panels, each of K's steps at most */
    const int64_t tbytes = mc_size_round64(mc_size_bytes((int64_t)mr * xes, job->k));
    const int64_t abytes = mc_size_round64(mc_size_bytes(mr * mc_steps_(kern, job->k), 4));
    const int64_t wbytes = mc_size_add(tbytes, mc_size_mul(abytes, t1 - t0));
    char *work = mc_cjob_work_(job, wbytes);
    if (work == NULL)
        return;
    mc_gemm_args base;
    mc_conv_args_(job, 0, &base);
    struct {
        const char *src;             /* the image, or the packed panel */
        int64_t lda, steps, boff, i;
        int nseg, count, packed, down;
        mc_gemm_args ga;             /* a tile down a column: rows an output row apart */
    } tl[MC_CONV_TILES];
    int sub = 0;
    for (int64_t t = t0; t < t1; ++t) {
        mc_cut_tile_ ct;
        mc_cut_tile_at_(&job->cutg, g, t, &ct);
        const int64_t ih0 = ct.oh * g->sh - g->pt, iw0 = ct.ow * g->sw - g->pl;
        const int64_t r = (ct.n * g->oh + ct.oh) * g->ow + ct.ow;
        int64_t i0, i1, q0 = 0, q1 = g->kw;
        mc_taps_(ih0, g->h, g->kh, g->dh, &i0, &i1);
        if (ct.down)
            mc_taps_(iw0, g->w, g->kw, 1, &q0, &q1);
        __typeof__(tl[0]) *d = &tl[t - t0];
        d->nseg = (int)(i1 - i0);
        d->count = (int)ct.count;
        d->down = ct.down;
        d->i = r;
        d->packed = !ct.down && (ct.ow < job->cutg.in0 || ct.ow + ct.count > job->cutg.in1);
        if (d->packed) {
            /* one segment: the im2col rows of the kernel rows [i0, i1), every tap column
             * (zeros where a window leaves the image) */
            const int64_t k0 = i0 * krow, k1 = i1 * krow;
            char *ap = work + tbytes + (t - t0) * abytes;
            d->steps = mc_steps_(kern, k1 - k0);
            d->boff = mc_steps_(kern, k0) * step_bytes;
            d->src = ap;
            d->nseg = 1;
            if (k1 > k0) {
                mc_conv_im2col_rows(g, call->x, xes, 0, g->c, r, r + ct.count, k0, k1, work,
                                    (k1 - k0) * xes);
                sub |= kern->pack(work, call->x_type, (k1 - k0) * xes, xes, ct.count, k1 - k0,
                                  mr, ap);
            }
            continue;
        }
        const int64_t run = (q1 - q0) * g->c;
        d->steps = mc_steps_(kern, run);
        d->boff = mc_steps_(kern, i0 * krow + q0 * g->c) * step_bytes;
        d->lda = ct.down ? g->sh * rowb : g->sw * pixb;
        d->src = call->x + ct.n * imgb;
        if (d->nseg > 0 && run > 0)
            d->src += (ih0 + i0 * g->dh) * rowb + (iw0 + q0) * pixb;
        if (ct.down) {
            d->ga = base;
            d->ga.out += r * base.o_rs;
            d->ga.o_rs *= g->ow;
            if (base.res != NULL) {
                d->ga.res += r * base.res_rs;
                d->ga.res_rs *= g->ow;
            }
            d->i = 0;
        }
        if (kern->sub_rows != NULL && run > 0)
            for (int s = 0; s < d->nseg; ++s)
                sub |= mc_sub_segment_(kern, d->src + s * g->dh * rowb, d->lda, ct.count, run,
                                       xes);
    }
    if (sub) {
        mc_cjob_fail_(job, 1);
        return;
    }
    const int64_t pstride = mc_panel_bytes_(job, job->k);      /* K is one block */
    const int64_t bsstride = mc_steps_(kern, krow) * step_bytes;
    for (int64_t jr = j0; jr < j1; jr += nr) {
        const int nrr = (int)mc_min_(job->fg - jr, nr);
        const char *bp = job->bdata[0] + (jr / nr) * pstride;
        for (int64_t t = 0; t < t1 - t0; ++t) {
            const __typeof__(tl[0]) *d = &tl[t];
            if (d->packed)
                kern->ukr_epi(d->steps, d->src, bp + d->boff, NULL, d->count, nrr, &base, d->i,
                              jr);
            else
                kern->ukr_epi_a(d->steps, d->src, d->lda, d->nseg, g->dh * rowb, bp + d->boff,
                                bsstride, d->count, nrr, d->down ? &d->ga : &base, d->i, jr);
        }
    }
}

static void mc_conv_unit_(void *ctx, int64_t u)
{
    mc_cjob_ *job = (mc_cjob_ *)ctx;
    if (__atomic_load_n(&job->status, __ATOMIC_RELAXED))
        return;
    const mc_conv_call *call = job->call;
    const mc_gemm_kernel *kern = job->kern;
    const int mr = kern->mr, nr = kern->nr;
    const int xes = call->x_type == MC_F32 ? 4 : 2;
    const int64_t r0 = (u / job->cbands) * job->rows, r1 = mc_min_(r0 + job->rows, job->m);
    const int64_t nrows = r1 - r0;
    const int64_t j0 = (u % job->cbands) * job->cols, j1 = mc_min_(j0 + job->cols, job->fg);
    const int use_acc = call->out_type != MC_F32 && job->k > job->kc;
    const int64_t abytes = mc_size_round64(
        mc_size_bytes(mc_size_mul(mc_size_round_up(nrows, mr), mc_steps_(kern, job->kc)), 4));
    const int64_t tbytes = mc_size_round64(mc_size_bytes((int64_t)mr * xes, job->kc));
    const int64_t lbytes = mc_size_round64((int64_t)mr * nr * 4);
    const int64_t cbytes = use_acc ? mc_size_round64(mc_size_bytes(mc_size_mul(nrows, job->fg), 4)) : 0;
    const int64_t wbytes = mc_size_add(mc_size_add(abytes, tbytes), mc_size_add(lbytes, cbytes));
    char *work = mc_cjob_work_(job, wbytes);
    if (work == NULL)
        return;
    char *ap = work, *tbuf = work + abytes;
    float *tile = (float *)(tbuf + tbytes), *accbuf = (float *)(tbuf + tbytes + lbytes);
    for (int64_t grp = 0; grp < call->groups; ++grp) {
        mc_gemm_args ga;
        mc_conv_args_(job, grp, &ga);
        if (call->out_type == MC_F32) {
            ga.acc = (float *)ga.out;
            ga.acc_rs = ga.o_rs;
            ga.acc_cs = 4;
        } else if (use_acc) {
            ga.acc = accbuf;
            ga.acc_rs = job->fg * 4;
            ga.acc_cs = 4;
            ga.acc_r0 = r0;
        }
        for (int64_t pc = 0; pc < job->k; pc += job->kc) {
            const int64_t kc = mc_min_(job->k - pc, job->kc), ksteps = mc_steps_(kern, kc);
            const int first = pc == 0, last = pc + kc >= job->k;
            /* the tile is the whole sum, its epilogue applied from the registers; in_place:
             * its rows read from the image (design g) */
            const int epi_regs = first && last && job->belem != 2 && kern->ukr_epi != NULL &&
                                 job->epi == kern->epi;
            const int in_place = epi_regs && kern->ukr_epi_a != NULL &&
                                 call->x_type == (kern->pairs ? MC_BF16 : MC_F32) &&
                                 nrows <= MC_CONV_TILES * mr;
            const char *src[MC_CONV_TILES];
            int64_t lda = 0, sstride = 0, run = 0;
            int sub = 0;
            for (int64_t ir = 0; ir < nrows; ir += mr) {
                const int64_t mrr = mc_min_(nrows - ir, mr);
                if (in_place) {
                    src[ir / mr] = mc_conv_tile_src_(call, kern, job->cg, r0 + ir, mrr, xes, &lda,
                                                     &sstride, &run);
                    if (src[ir / mr] != NULL) {
                        if (kern->sub_rows != NULL)
                            for (int64_t t = 0; t < call->geo.kh; ++t)
                                sub |= mc_sub_segment_(kern, src[ir / mr] + t * sstride, lda, mrr,
                                                       run, xes);
                        continue;
                    }
                }
                /* (a tile in_place could not read lies outside design f's tiles too) */
                if (!in_place && kc == job->k &&
                    mc_conv_pack_direct_(call, kern, job->cg, r0 + ir, mrr, xes,
                                         ap + ir * ksteps * 4, &sub))
                    continue;
                mc_conv_im2col_rows(&call->geo, call->x, xes, grp * job->cg, job->cg, r0 + ir,
                                    r0 + ir + mrr, pc, pc + kc, tbuf, kc * xes);
                sub |= kern->pack(tbuf, call->x_type, kc * xes, xes, mrr, kc, mr,
                                  ap + ir * ksteps * 4);
            }
            if (sub) {
                mc_cjob_fail_(job, 1);
                return;
            }
            const int64_t pstride = mc_panel_bytes_(job, kc);
            const char *block = job->bdata[grp] +
                                (pc / job->kc) * (job->npad / nr) * mc_panel_bytes_(job, job->kc);
            for (int64_t jr = j0; jr < j1; jr += nr) {
                const int nrr = (int)mc_min_(job->fg - jr, nr);
                const char *bp = block + (jr / nr) * pstride;
                for (int64_t ir = 0; ir < nrows; ir += mr) {
                    const int mrr = (int)mc_min_(nrows - ir, mr);
                    const char *a = ap + ir * ksteps * 4;
                    if (job->belem == 2) {
                        kern->ukr_direct(kc, a, bp, (int64_t)nr * 2, pstride, job->b_type, nrr,
                                         tile, nr, mrr, 0);
                    } else if (in_place && src[ir / mr] != NULL) {
                        kern->ukr_epi_a(mc_steps_(kern, run), src[ir / mr], lda,
                                        (int)call->geo.kh, sstride, bp,
                                        mc_steps_(kern, run) * nr * 4, mrr, nrr, &ga, r0 + ir,
                                        jr);
                        continue;
                    } else if (epi_regs) {
                        kern->ukr_epi(ksteps, a, bp, tile, mrr, nrr, &ga, r0 + ir, jr);
                        continue;
                    } else {
                        kern->ukr(ksteps, a, bp, tile, mrr);
                    }
                    job->epi(&ga, tile, nr, mrr, nrr, r0 + ir, jr, first, last);
                }
            }
        }
    }
}

/* Pair or 16-bit panels widened to float32 panels of the same width (design a, c). */
static void mc_widen_(const mc_packed *s, float *dst)
{
    const int64_t panels = mc_ceil_div_(s->n, s->nr);
    for (int64_t pc = 0, blockno = 0; pc < s->k; pc += s->kc, ++blockno)
        mc_gemm_widen_panels(s, blockno, 0, panels, dst);
}

static int mc_conv_run_(const mc_conv_call *call, const mc_level_kernels *lk, int force_f32)
{
    const mc_packed *pk = call->w[0];
    mc_cjob_ job;
    memset(&job, 0, sizeof job);
    job.call = call;
    job.act_row = lk->act.forward;
    job.b_type = pk->type;
    const int pairs_ok = !force_f32 && pk->pairs && call->x_type == MC_BF16 &&
                         lk->gemm.pairs.pack != NULL && lk->gemm.pairs.nr == pk->nr;
    job.kern = pairs_ok ? &lk->gemm.pairs : &lk->gemm.f32;
    if (job.kern->nr != pk->nr)
        return MC_CONV_FORMAT;
    for (int64_t grp = 1; grp < call->groups; ++grp) {
        const mc_packed *q = call->w[grp];
        if (q->pairs != pk->pairs || q->elem != pk->elem || q->nr != pk->nr || q->kc != pk->kc)
            return MC_CONV_FORMAT;
    }
    const int widen = (pk->pairs && !pairs_ok) ||
                      (!pk->pairs && pk->elem == 2 && job.kern->ukr_direct == NULL);
    job.belem = widen ? 4 : pk->elem;
    job.kc = pk->kc;
    job.npad = mc_size_round_up(pk->n, pk->nr);
    job.k = pk->k;
    job.fg = pk->n;
    job.cg = call->geo.c / call->groups;
    job.m = mc_size_mul(mc_size_mul(call->geo.n, call->geo.oh), call->geo.ow);
    if (job.npad < 0 || job.m < 0)
        return -2;
    job.epi = job.kern->epi != NULL ? job.kern->epi : mc_gemm_epi_scalar;
    const char *bdata_local[64];
    const char **bdata = bdata_local;
    if (call->groups > 64) {
        bdata = (const char **)malloc((size_t)call->groups * sizeof *bdata);
        if (bdata == NULL)
            return MC_CONV_NOMEM;
    }
    int r = 0;
    if (widen) {
        const int64_t per = mc_size_bytes(
            mc_size_mul(mc_size_mul(mc_size_ceil_div(pk->k, pk->kc), job.npad), pk->kc), 4);
        const int64_t bytes = mc_size_bytes(per, call->groups);
        char *buf = bytes < 0 ? NULL : (char *)mc_workspace(MC_WS_SHARED, bytes);
        if (buf == NULL)
            r = bytes < 0 ? -2 : -1;
        for (int64_t grp = 0; r == 0 && grp < call->groups; ++grp) {
            mc_widen_(call->w[grp], (float *)(buf + grp * per));
            bdata[grp] = buf + grp * per;
        }
    } else {
        for (int64_t grp = 0; grp < call->groups; ++grp)
            bdata[grp] = call->w[grp]->data;
    }
    job.bdata = bdata;
    if (r == 0 && job.m > 0 && call->f > 0) {
        mc_blocks want;
        mc_rt_blocks(&want);
        const int mr = job.kern->mr;
        const int64_t mc = mc_ceil_div_(want.mc > 0 ? want.mc : job.kern->mc, mr) * mr;
        const int nt = mc_rt_threads_for(mc_work_mul(mc_work_mul(job.m, call->f), job.k),
                                         MC_CONV_PARALLEL_MIN);
        const mc_conv_geom *g = &call->geo;
        /* design h: one group, taps of a kernel row adjacent, K in one block, weights all
         * finite (a tap outside the image adds an exact zero only then), the image of the
         * kernel's A type and, for pairs, every tap an even number of values */
        job.cut = call->groups == 1 && g->dw == 1 && job.k <= job.kc && pk->finite &&
                  job.belem != 2 && job.kern->ukr_epi != NULL && job.kern->ukr_epi_a != NULL &&
                  job.epi == job.kern->epi &&
                  call->x_type == (job.kern->pairs ? MC_BF16 : MC_F32) &&
                  (!job.kern->pairs || g->c % 2 == 0);
        if (job.cut) {
            mc_cut_geom_(g, mr, &job.cutg);
            job.cut_tiles = mc_size_mul(g->n, job.cutg.per_image);
            if (job.cut_tiles < 0)
                r = -2;
        }
        if (r == 0 && job.cut) {
            job.tiles = mc_cut_units_(&job, mc_min_(mc / mr, MC_CONV_TILES), nt);
            mc_run(mc_conv_cut_unit_, &job, mc_ceil_div_(job.cut_tiles, job.tiles) * job.cbands,
                   nt);
        } else if (r == 0) {
            /* the packed rows of a unit's K block within about an L2 cache (K blocks deeper
             * than the level's KC: design h's whole K) */
            const int64_t tile_bytes = (int64_t)mr * mc_steps_(job.kern, job.kc) * 4;
            const int64_t max_tiles = mc_max_(mc_min_(mc / mr, MC_CONV_ABLOCK / tile_bytes), 1);
            job.rows = mr * mc_conv_units_(&job, mc_ceil_div_(job.m, mr), max_tiles, 0.4, nt);
            mc_run(mc_conv_unit_, &job, mc_ceil_div_(job.m, job.rows) * job.cbands, nt);
        }
        if (r == 0)
            r = job.status;
    }
    if (bdata != bdata_local)
        free((void *)bdata);
    return r;
}

int mc_conv_gemm(const mc_conv_call *call)
{
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    const mc_level_kernels *lk = mc_kernels(mc_rt_level());
    int r = mc_conv_run_(call, lk, 0);
    if (r == 1)                              /* design c */
        r = mc_conv_run_(call, lk, 1);
    mc_fpenv_leave(&saved);
    return r == MC_CONV_FORMAT ? MC_CONV_FORMAT : r == -2 ? MC_CONV_TOOBIG
                                                : r < 0 ? MC_CONV_NOMEM : MC_CONV_OK;
}

/* --- depthwise (design d) ----------------------------------------------------------------------- */

typedef struct {
    const mc_dw_call *call;
    mc_dw_fn dw;
    mc_dw_epi_fn dw_epi;         /* the sums with their epilogue (design d), or NULL */
    int epi_act;                 /* its activation, for the output type */
    mc_act_forward_fn act_row;
    mc_cast_fn cast;             /* float32 -> the output type, or NULL */
    mc_gemm_epi_fn epi;          /* the GEMM's epilogue, for a row of a depth multiplier 1 */
    int64_t rows, nrows;         /* bands of rows (n, oh), and their number */
    int64_t tmax, tbytes, rbytes;  /* taps of a tap list, bytes of the two lists, of a row */
    int status;
} mc_dwjob_;

static void mc_dw_unit_(void *ctx, int64_t u)
{
    mc_dwjob_ *job = (mc_dwjob_ *)ctx;
    const mc_dw_call *call = job->call;
    const mc_conv_geom *g = &call->geo;
    const int f64 = call->x_type == MC_F64;
    const int64_t es = mc_conv_es_(call->x_type), oes = mc_conv_es_(call->out_type);
    const int64_t ntap = g->kh * g->kw, cm = g->c * call->mult, ves = f64 ? 8 : 4;
    /* the tap lists, the sums of one output row, and that row in float32 before rounding
     * (sizes checked by mc_conv_depthwise) */
    char *work = (char *)mc_workspace(MC_WS_WORK, job->tbytes + 2 * job->rbytes);
    if (work == NULL) {
        __atomic_store_n(&job->status, -1, __ATOMIC_RELAXED);
        return;
    }
    int64_t *xoff = (int64_t *)work, *woff = xoff + job->tmax;
    char *acc = work + job->tbytes, *v = acc + job->rbytes;
    const int64_t wm = ntap * g->c, pstride = g->sw * g->c * es;
    int64_t in0, in1;
    /* the pixels of an output row all of whose taps lie inside the input's columns: their tap
     * lists are one list shifted by sw pixels (design c) */
    mc_inner_(g->w, g->kw, g->sw, g->pl, g->dw, g->ow, &in0, &in1);
    /* a run of inner pixels of a 3-wide kernel at stride and dilation 1 has its taps in rows
     * of three neighbours (mc_dw_epi_fn) */
    const int rows3 = g->kw == 3 && g->sw == 1 && g->dw == 1;
    for (int64_t row = u * job->rows; row < mc_min_((u + 1) * job->rows, job->nrows); ++row) {
        const int64_t n = row / g->oh, oh = row - n * g->oh;
        const char *img = call->x + n * g->h * g->w * g->c * es;
        char *out = call->out + row * g->ow * cm * oes;
        for (int64_t ow = 0; ow < g->ow;) {
            /* a run of inner pixels in one call, every other pixel on its own */
            const int64_t npix = ow >= in0 && ow < in1 ? in1 - ow : 1;
            const int nt = mc_conv_taps_(g, oh, ow, es, xoff, woff);
            for (int t = 0; t < nt; ++t)
                woff[t] *= g->c;
            if (job->dw_epi != NULL)
                job->dw_epi(img, call->x_type, xoff, pstride, npix, (const float *)call->w, woff,
                            nt, g->c, (const float *)call->bias,
                            job->epi_act, out + ow * cm * oes,
                            rows3 && npix > 1);
            else
                job->dw(img, call->x_type, xoff, pstride, npix, call->w, woff, nt, g->c,
                        call->mult, wm, acc + ow * cm * ves);
            ow += npix;
        }
        if (job->dw_epi != NULL)
            continue;
        const int64_t total = g->ow * cm;
        if (f64) {
            const double *a = (const double *)acc, *b = (const double *)call->bias;
            double *o = (double *)out;
            for (int64_t p = 0; p < g->ow; ++p, a += cm, o += cm)
                for (int64_t ch = 0; ch < g->c; ++ch)
                    for (int64_t m = 0; m < call->mult; ++m) {
                        double s = a[m * g->c + ch];
                        if (b != NULL)
                            s += b[ch * call->mult + m];
                        o[ch * call->mult + m] = s;
                    }
            continue;
        }
        /* the epilogue of the whole row: bias, activation, rounding (each element's own) */
        const float *a = (const float *)acc, *b = (const float *)call->bias;
        if (call->mult == 1) {
            /* the row is an ow x c tile with a bias per column: the GEMM's epilogue, the same
             * operations (s + bias, activation, one rounding) in one pass */
            mc_gemm_args ga;
            memset(&ga, 0, sizeof ga);
            ga.out = out;
            ga.o_rs = cm * oes;
            ga.o_cs = oes;
            ga.out_type = call->out_type;
            ga.bias = b;
            ga.bias_s = 4;
            ga.alpha = 1.0f;
            ga.act = mc_act_for_output(call->act, call->out_type);
            ga.act_row = job->act_row;
            job->epi(&ga, a, (int)cm, (int)g->ow, (int)cm, 0, 0, 1, 1);
            continue;
        }
        float *vf = call->out_type == MC_F32 ? (float *)out : (float *)v;
        for (int64_t p = 0; p < g->ow; ++p)         /* channel ch * mult + m */
            for (int64_t ch = 0; ch < g->c; ++ch)
                for (int64_t m = 0; m < call->mult; ++m) {
                    float s = a[p * cm + m * g->c + ch];
                    if (b != NULL)
                        s += b[ch * call->mult + m];
                    vf[p * cm + ch * call->mult + m] = s;
                }
        if (call->act != MC_ACT_NONE)
            job->act_row(mc_act_for_output(call->act, call->out_type), vf, vf, total);
        if (job->cast != NULL)
            job->cast(vf, out, total);
    }
}

int mc_conv_depthwise(const mc_dw_call *call)
{
    const mc_conv_geom *g = &call->geo;
    if (g->n == 0 || g->oh == 0 || g->ow == 0 || g->c == 0 || call->mult == 0)
        return MC_CONV_OK;
    /* the tap lists (bounded by the image, mc_conv_geom.h), a row of sums and a row in float32:
     * a row is an ow x cm tile of the GEMM's epilogue, whose sizes are int; the weights'
     * KH x KW x C x mult (the tap offsets) must be a count */
    const int64_t cm = mc_size_mul(g->c, call->mult);
    const int64_t tmax = mc_conv_tap_max_(g);
    const int64_t tbytes = mc_size_round64(mc_size_bytes(tmax, 16));
    const int64_t rbytes = mc_size_round64(
        mc_size_bytes(mc_size_mul(g->ow, cm), call->x_type == MC_F64 ? 8 : 4));
    const int64_t wbytes = mc_size_add(tbytes, mc_size_mul(rbytes, 2));
    if (wbytes < 0 || wbytes > MC_BYTES_MAX || cm > INT_MAX || g->ow > INT_MAX ||
        mc_size_mul(mc_size_mul(g->kh, g->kw), cm) < 0)
        return MC_CONV_TOOBIG;
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    const mc_level_kernels *lk = mc_kernels(mc_rt_level());
    mc_dwjob_ job;
    memset(&job, 0, sizeof job);
    job.call = call;
    job.dw = lk->conv.dw;
    const int act = mc_act_for_output(call->act, call->out_type);
    if (call->mult == 1 && call->x_type == call->out_type && call->x_type != MC_F64 &&
        (act == MC_ACT_NONE || act == MC_ACT_RELU || act == MC_ACT_RELU6)) {
        job.dw_epi = lk->conv.dw_epi;
        job.epi_act = act;
    }
    job.act_row = lk->act.forward;
    job.cast = call->out_type == MC_F32 || call->out_type == MC_F64
                   ? NULL : lk->convert.cast[MC_F32][call->out_type];
    job.epi = lk->gemm.f32.epi != NULL ? lk->gemm.f32.epi : mc_gemm_epi_scalar;
    job.tmax = tmax;
    job.tbytes = tbytes;
    job.rbytes = rbytes;
    job.nrows = mc_size_mul(g->n, g->oh);
    const int nt = mc_rt_threads_for(mc_work_mul(mc_work_mul(job.nrows, g->ow),
                                                 mc_work_mul(cm, mc_work_mul(g->kh, g->kw))),
                                     MC_CONV_SMALL_MIN);
    job.rows = mc_max_(mc_ceil_div_(job.nrows, 8 * nt), 1);
    mc_run(mc_dw_unit_, &job, mc_ceil_div_(job.nrows, job.rows), nt);
    mc_fpenv_leave(&saved);
    return job.status < 0 ? MC_CONV_NOMEM : MC_CONV_OK;
}
