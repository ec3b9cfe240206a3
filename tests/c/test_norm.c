/* The normalization family's driver (mc_layer_norm) at every level and 1 or 3 threads, against
 * the scalar twin of mc_norm_scalar.h, bit for bit (mc_norm.h design b: every level adds the
 * same terms in the same order).  Every pair of input and output types, with and without a
 * residual, gamma and beta, and the per-row statistics; row lengths of 1, the vector tails and
 * calls above the threading threshold; outputs are checked for writes past their end. */
#include "ctest_extra.h"
#include "mc_norm.h"
#include "mc_norm_scalar.h"

static const int types_[] = {MC_F16, MC_BF16, MC_F32};
static const int64_t shapes_[][2] = {{1, 1}, {3, 1}, {3, 15}, {2, 17}, {5, 33}, {4, 100},
                                     {40, 1000}, {0, 8}, {6, 0}};

/* mean and rstd: the same bits, or both NaN (their NaN is the row's arithmetic's, whose sign and
 * payload depend on the order the level combines NaN inputs in; y's NaN is the canonical one,
 * mc_norm.h design c) */
static int same_stat(float a, float b)
{
    return mcx_bits_f32(a) == mcx_bits_f32(b) || (a != a && b != b);
}

static void check_case(int64_t rows, int64_t n, int xt, int rt, int yt, int affine, int stats,
                       int specials)
{
    const int64_t total = rows * n;
    const size_t pad = 64;
    const size_t ybytes = (size_t)total * (size_t)mcx_elem_size(yt);
    void *x = mcx_alloc((size_t)total * 4 + 1), *res = NULL;
    float *gamma = NULL, *beta = NULL;
    mcx_fill_typed(x, xt, total, 5.0, specials);
    if (rt >= 0) {
        res = mcx_alloc((size_t)total * 4 + 1);
        mcx_fill_typed(res, rt, total, 2.0, 0);
    }
    if (affine) {
        gamma = mcx_alloc((size_t)n * 4 + 1);
        beta = mcx_alloc((size_t)n * 4 + 1);
        mcx_fill(gamma, n, 2.0, 0);
        mcx_fill(beta, n, 1.0, 0);
    }
    char *y = mcx_alloc(ybytes + pad), *y_ref = mcx_alloc(ybytes + pad);
    float *mean = NULL, *rstd = NULL, *mean_ref = NULL, *rstd_ref = NULL;
    if (stats) {
        mean = mcx_alloc((size_t)rows * 4 + pad);
        rstd = mcx_alloc((size_t)rows * 4 + pad);
        mean_ref = mcx_alloc((size_t)rows * 4 + pad);
        rstd_ref = mcx_alloc((size_t)rows * 4 + pad);
    }
    mc_norm_job job = {.x = x, .res = res, .gamma = gamma, .beta = beta, .y = y, .mean = mean,
                       .rstd = rstd, .n = n, .eps = 1e-3, .x_type = xt,
                       .res_type = rt >= 0 ? rt : -1, .y_type = yt};
    mc_norm_job ref = job;
    ref.y = y_ref;
    ref.mean = mean_ref;
    ref.rstd = rstd_ref;
    char where[120];
    snprintf(where, sizeof where, "layer_norm %lldx%lld x %s res %s y %s%s%s",
             (long long)rows, (long long)n, mcx_type_name(xt), rt >= 0 ? mcx_type_name(rt) : "-",
             mcx_type_name(yt), affine ? " affine" : "", stats ? " stats" : "");
    mcx_case(where);
    MCX_CHECK(mc_layer_norm(&job, rows) == MC_NORM_OK, "status");
    if (n > 0)
        for (int64_t r = 0; r < rows; ++r)
            mc_norm_row_(&ref, r);
    if (memcmp(y, y_ref, ybytes) != 0) {
        int bad = 0;
        for (int64_t i = 0; i < total && bad < 3; ++i)
            if (mcx_bits_f32(mcx_load(y, yt, i)) != mcx_bits_f32(mcx_load(y_ref, yt, i))) {
                MCX_FAIL("y[%lld] = %a, the twin %a", (long long)i, (double)mcx_load(y, yt, i),
                         (double)mcx_load(y_ref, yt, i));
                ++bad;
            }
    }
    ++mcx_checks_;
    MCX_CHECK(mcx_untouched(y, ybytes, ybytes + pad), "wrote past the end of y");
    if (stats && n > 0) {
        for (int64_t r = 0; r < rows; ++r) {
            MCX_CHECK(same_stat(mean[r], mean_ref[r]), "mean[%lld] = %a, the twin %a",
                      (long long)r, (double)mean[r], (double)mean_ref[r]);
            MCX_CHECK(same_stat(rstd[r], rstd_ref[r]), "rstd[%lld] = %a, the twin %a",
                      (long long)r, (double)rstd[r], (double)rstd_ref[r]);
        }
        MCX_CHECK(mcx_untouched(mean, (size_t)rows * 4, (size_t)rows * 4 + pad),
                  "wrote past the end of mean");
    }
    free(x);
    free(res);
    free(gamma);
    free(beta);
    free(y);
    free(y_ref);
    free(mean);
    free(rstd);
    free(mean_ref);
    free(rstd_ref);
}

/* mc_layer_norm_then: the hook sees every row once, each band already normalized */
typedef struct {
    const float *y, *y_ref;
    int64_t n;
    int *seen;
    int late;                    /* a band whose rows were not yet normalized */
} after_ctx_;

static void after_(void *ctx, int64_t r0, int64_t r1)
{
    after_ctx_ *c = (after_ctx_ *)ctx;
    for (int64_t r = r0; r < r1; ++r) {
        __atomic_add_fetch(&c->seen[r], 1, __ATOMIC_RELAXED);
        if (memcmp(c->y + r * c->n, c->y_ref + r * c->n, (size_t)c->n * 4) != 0)
            __atomic_store_n(&c->late, 1, __ATOMIC_RELAXED);
    }
}

static void check_after(void)
{
    enum { ROWS = 300, N = 200 };
    float *x = mcx_alloc(ROWS * N * 4), *y = mcx_alloc(ROWS * N * 4);
    float *y_ref = mcx_alloc(ROWS * N * 4);
    int seen[ROWS];
    memset(seen, 0, sizeof seen);
    for (int64_t i = 0; i < ROWS * N; ++i)
        x[i] = (float)((i * 7919) % 1000) / 100.0f;
    mc_norm_job job = {.x = x, .res = NULL, .gamma = NULL, .beta = NULL, .y = y_ref,
                       .mean = NULL, .rstd = NULL, .n = N, .eps = 1e-3, .x_type = MC_F32,
                       .res_type = -1, .y_type = MC_F32};
    mcx_case("layer_norm_then");
    MCX_CHECK(mc_layer_norm(&job, ROWS) == MC_NORM_OK, "status");
    job.y = y;
    after_ctx_ c = {.y = y, .y_ref = y_ref, .n = N, .seen = seen, .late = 0};
    MCX_CHECK(mc_layer_norm_then(&job, ROWS, after_, &c) == MC_NORM_OK, "status");
    for (int r = 0; r < ROWS; ++r)
        MCX_CHECK(seen[r] == 1, "row %d seen %d times", r, seen[r]);
    MCX_CHECK(!c.late, "a band reached the hook before it was normalized");
    MCX_CHECK(mc_layer_norm_then(&job, -1, after_, &c) == MC_NORM_EARG, "rows < 0 accepted");
    free(x);
    free(y);
    free(y_ref);
}

static void check_arguments(void)
{
    float v[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
    mc_norm_job job = {.x = v, .res = NULL, .gamma = NULL, .beta = NULL, .y = out, .mean = NULL,
                       .rstd = NULL, .n = 4, .eps = 1e-3, .x_type = MC_F32, .res_type = -1,
                       .y_type = MC_F32};
    mcx_case("arguments");
    MCX_CHECK(mc_layer_norm(&job, -1) == MC_NORM_EARG, "rows < 0 accepted");
    job.y_type = MC_F64;
    MCX_CHECK(mc_layer_norm(&job, 1) == MC_NORM_EARG, "float64 output accepted");
    job.y_type = MC_F32;
    job.res = v;
    MCX_CHECK(mc_layer_norm(&job, 1) == MC_NORM_EARG, "residual of type -1 accepted");
    job.res = NULL;
    job.y = NULL;
    MCX_CHECK(mc_layer_norm(&job, 1) == MC_NORM_EARG, "NULL y accepted");
    MCX_CHECK(mc_layer_norm(&job, 0) == MC_NORM_OK, "empty call refused");
    MCX_CHECK(out[0] == 0 && out[3] == 0, "a refused call wrote");
}

int main(void)
{
    int levels[MC_ISA_COUNT];
    mcx_begin();
    const int nl = mcx_levels(levels);
    static const int threads[] = {1, 3};
    for (int li = 0; li < nl; ++li)
        for (int ti = 0; ti < 2; ++ti) {
            mcx_use(levels[li], threads[ti]);
            mcx_seed(29);
            int k = 0;
            for (size_t s = 0; s < sizeof shapes_ / sizeof shapes_[0]; ++s)
                for (int xi = 0; xi < 3; ++xi)
                    for (int yi = 0; yi < 3; ++yi)
                        for (int ri = -1; ri < 3; ri += 2, ++k) {
                            const int rt = ri < 0 ? -1 : types_[(xi + ri) % 3];
                            check_case(shapes_[s][0], shapes_[s][1], types_[xi], rt, types_[yi],
                                       k % 2, k % 3 == 0, k % 5 == 0);
                        }
            check_arguments();
            check_after();
        }
    return mcx_end("test_norm");
}
