/* The activation family's drivers (mc_act_forward, mc_act_backward, mc_softmax) at every level
 * and 1 or 3 threads, against the scalar twins of mc_act_scalar.h, bit for bit (mc_act.h design
 * b, e: every level gives the twins' bits).  Sizes cover the empty call, one element, the
 * vector tails and calls above the threading threshold; outputs are checked for writes past
 * their end, and the in-place forms (y = x, dx = dy) are run too. */
#include "ctest_extra.h"
#include "mc_act.h"
#include "mc_act_scalar.h"

static const int64_t sizes_[] = {0, 1, 7, 15, 16, 17, 63, 64, 65, 1000, 8197, 40000, 100003};
static const int acts_[] = {MC_ACT_NONE, MC_ACT_RELU, MC_ACT_GELU, MC_ACT_SIGMOID, MC_ACT_TANH,
                            MC_ACT_RELU6, MC_ACT_SILU, MC_ACT_HARD_SIGMOID, MC_ACT_HARD_SILU};
static const char *const act_names_[] = {"none", "relu", "gelu", "sigmoid", "tanh", "relu6",
                                         "silu", "hard_sigmoid", "hard_silu"};

static void check_elementwise(int64_t n)
{
    float *x = mcx_alloc((size_t)(n + 16) * 4), *dy = mcx_alloc((size_t)(n + 16) * 4);
    float *y = mcx_alloc((size_t)(n + 16) * 4), *tmp = mcx_alloc((size_t)(n + 16) * 4);
    mcx_fill(x, n, 12.0, 1);
    mcx_fill(dy, n, 3.0, 1);
    for (size_t a = 0; a < sizeof acts_ / sizeof acts_[0]; ++a) {
        const int act = acts_[a];
        char where[64];
        snprintf(where, sizeof where, "forward %s n=%lld", act_names_[a], (long long)n);
        mcx_case(where);
        memset(y, 0xA5, (size_t)(n + 16) * 4);
        MCX_CHECK(mc_act_forward(act, x, y, n) == MC_ACT_OK, "status");
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i) {
            const float want = mc_act_scalar_f32_(act, x[i]);
            if (mcx_bits_f32(y[i]) != mcx_bits_f32(want) && bad++ < 3)
                MCX_FAIL("x[%lld]=%a gives %a (0x%08x), the twin %a (0x%08x)", (long long)i,
                         (double)x[i], (double)y[i], mcx_bits_f32(y[i]), (double)want,
                         mcx_bits_f32(want));
        }
        ++mcx_checks_;
        MCX_CHECK(mcx_untouched(y, (size_t)n * 4, (size_t)(n + 16) * 4), "wrote past the end");

        /* in place: y = x */
        memcpy(tmp, x, (size_t)n * 4);
        MCX_CHECK(mc_act_forward(act, tmp, tmp, n) == MC_ACT_OK, "status in place");
        MCX_CHECK(n == 0 || memcmp(tmp, y, (size_t)n * 4) == 0, "in place differs");

        snprintf(where, sizeof where, "backward %s n=%lld", act_names_[a], (long long)n);
        mcx_case(where);
        memset(y, 0xA5, (size_t)(n + 16) * 4);
        MCX_CHECK(mc_act_backward(act, dy, x, y, n) == MC_ACT_OK, "status");
        bad = 0;
        for (int64_t i = 0; i < n; ++i) {
            const float want = mc_act_grad_scalar_f32_(act, dy[i], x[i]);
            if (mcx_bits_f32(y[i]) != mcx_bits_f32(want) && bad++ < 3)
                MCX_FAIL("dy=%a x[%lld]=%a gives %a, the twin %a", (double)dy[i], (long long)i,
                         (double)x[i], (double)y[i], (double)want);
        }
        ++mcx_checks_;
        MCX_CHECK(mcx_untouched(y, (size_t)n * 4, (size_t)(n + 16) * 4), "wrote past the end");
        memcpy(tmp, dy, (size_t)n * 4);
        MCX_CHECK(mc_act_backward(act, tmp, x, tmp, n) == MC_ACT_OK, "status in place");
        MCX_CHECK(n == 0 || memcmp(tmp, y, (size_t)n * 4) == 0, "in place (dx = dy) differs");
    }
    free(x);
    free(dy);
    free(y);
    free(tmp);
}

/* gelu for 16-bit outputs (mc_act_scalar.h design f), forward only: every level equals the
 * float32 twin mc_gelu_ss_, and the twin is within 2**-18 (relative) of the float64 gelu
 * wherever the result is a normal float32, on every 257th bit pattern (17 million values). */
static void check_gelu_16(void)
{
    enum { N = 1 << 16 };
    float *x = mcx_alloc(N * 4), *y = mcx_alloc(N * 4);
    mcx_case("gelu_16 bit patterns");
    int64_t bad = 0, far = 0;
    for (uint64_t lo = 0; lo < ((uint64_t)1 << 32); lo += (uint64_t)N * 257) {
        int64_t n = 0;
        for (uint64_t u = lo; u < lo + (uint64_t)N * 257 && u < ((uint64_t)1 << 32); u += 257) {
            const uint32_t b = (uint32_t)u;
            memcpy(&x[n++], &b, 4);
        }
        MCX_CHECK(mc_act_forward(MC_ACT_GELU_16, x, y, n) == MC_ACT_OK, "status");
        for (int64_t i = 0; i < n; ++i) {
            const float want = mc_act_scalar_f32_(MC_ACT_GELU_16, x[i]);
            if (mcx_bits_f32(y[i]) != mcx_bits_f32(want) && bad++ < 3)
                MCX_FAIL("x=%a gives %a, the twin %a", (double)x[i], (double)y[i], (double)want);
            if (x[i] != x[i])
                continue;
            const double ref = mc_gelu_sd_((double)x[i]);
            if (fabs(ref) < 0x1p-126)
                continue;
            const double rel = fabs((double)want - ref) / fabs(ref);
            if (rel > 0x1p-18 && far++ < 3)
                MCX_FAIL("x=%a: %a against %a, relative error %g", (double)x[i], (double)want,
                         ref, rel);
        }
        mcx_checks_ += 2;
    }
    free(x);
    free(y);
}

/* The attention's float32 softmax for 16-bit inputs (mc_act_scalar.h design g) against the
 * float64 one: within 2**-17 (relative) wherever the probability is above 1e-30 and the score
 * within 88 of the maximum; masked scores (-1e9) give 0; the probabilities sum to 1. */
static void check_softmax16(void)
{
    static const int64_t ns[] = {1, 5, 16, 17, 128, 1000};
    static const double spreads[] = {1.0, 6.0, 40.0};
    float *x = mcx_alloc(1000 * 4), *y = mcx_alloc(1000 * 4), *z = mcx_alloc(1000 * 4);
    mcx_case("softmax16 against the float64 softmax");
    int64_t bad = 0;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; ++a)
        for (size_t b = 0; b < sizeof spreads / sizeof spreads[0]; ++b) {
            const int64_t n = ns[a];
            for (int64_t i = 0; i < n; ++i)
                x[i] = (float)mcx_uniform(-spreads[b], spreads[b]);
            if (n > 4)
                x[3] = -1e9f;
            mc_softmax16_row_ss_(x, y, n);
            mc_softmax_row_sd_(x, z, n, 0);
            double sum = 0.0, mx = -1e30;
            for (int64_t i = 0; i < n; ++i)
                mx = x[i] > mx ? x[i] : mx;
            for (int64_t i = 0; i < n; ++i) {
                sum += y[i];
                const double rel = fabs((double)y[i] - z[i]) / z[i];
                const int checked = z[i] > 1e-30 && mx - x[i] <= 88.0;
                if (((checked && rel > 0x1p-17) || (x[i] == -1e9f && y[i] != 0.0f)) &&
                    bad++ < 3)
                    MCX_FAIL("n=%lld x[%lld]=%a: %a against %a", (long long)n, (long long)i,
                             (double)x[i], (double)y[i], (double)z[i]);
            }
            MCX_CHECK(fabs(sum - 1.0) < 1e-5, "n=%lld: the probabilities sum to %.9g",
                      (long long)n, sum);
        }
    ++mcx_checks_;
    free(x);
    free(y);
    free(z);
}

static void check_softmax(int64_t rows, int64_t n, int specials)
{
    const int64_t total = rows * n;
    float *x = mcx_alloc((size_t)(total + 16) * 4), *y = mcx_alloc((size_t)(total + 16) * 4);
    float *want = mcx_alloc((size_t)(n + 1) * 4);
    mcx_fill(x, total, 30.0, specials);
    for (int log_ = 0; log_ < 2; ++log_) {
        char where[80];
        snprintf(where, sizeof where, "%s rows=%lld n=%lld", log_ ? "log_softmax" : "softmax",
                 (long long)rows, (long long)n);
        mcx_case(where);
        memset(y, 0xA5, (size_t)(total + 16) * 4);
        MCX_CHECK(mc_softmax(x, y, rows, n, log_) == MC_ACT_OK, "status");
        int64_t bad = 0;
        for (int64_t r = 0; r < rows && n > 0; ++r) {
            mc_softmax_row_sd_(x + r * n, want, n, log_);
            for (int64_t i = 0; i < n; ++i)
                if (mcx_bits_f32(y[r * n + i]) != mcx_bits_f32(want[i]) && bad++ < 3)
                    MCX_FAIL("row %lld [%lld] gives %a, the twin %a", (long long)r, (long long)i,
                             (double)y[r * n + i], (double)want[i]);
        }
        ++mcx_checks_;
        MCX_CHECK(mcx_untouched(y, (size_t)total * 4, (size_t)(total + 16) * 4),
                  "wrote past the end");
    }
    free(x);
    free(y);
    free(want);
}

/* mc_add_act (design f): every pair of input types and every output type, against the
 * widened sum, the scalar twin's activation and one rounding */
static void check_add(int64_t n)
{
    static const int types[] = {MC_F16, MC_BF16, MC_F32};
    static const int acts[] = {MC_ACT_NONE, MC_ACT_RELU, MC_ACT_RELU6, MC_ACT_GELU, MC_ACT_SILU};
    char *a = mcx_alloc((size_t)(n + 16) * 4), *b = mcx_alloc((size_t)(n + 16) * 4);
    char *y = mcx_alloc((size_t)(n + 16) * 4);
    for (int ta = 0; ta < 3; ++ta)
        for (int tb = 0; tb < 3; ++tb)
            for (int ty = 0; ty < 3; ++ty)
                for (int ai = 0; ai < 5; ++ai) {
                    char where[96];
                    snprintf(where, sizeof where, "add types %d %d -> %d act %d n=%lld",
                             types[ta], types[tb], types[ty], acts[ai], (long long)n);
                    mcx_case(where);
                    mcx_fill_typed(a, types[ta], n, 8.0, 1);
                    mcx_fill_typed(b, types[tb], n, 8.0, 1);
                    memset(y, 0xA5, (size_t)(n + 16) * 4);
                    MCX_CHECK(mc_add_act(acts[ai], a, types[ta], b, types[tb], y, types[ty], n)
                                  == MC_ACT_OK, "status");
                    int64_t bad = 0;
                    for (int64_t i = 0; i < n; ++i) {
                        const float s = mcx_load(a, types[ta], i) + mcx_load(b, types[tb], i);
                        float w = mc_act_scalar_f32_(mc_act_for_output(acts[ai], types[ty]), s);
                        uint32_t want = mcx_bits_f32(w), got;
                        if (types[ty] != MC_F32) {
                            want = types[ty] == MC_BF16 ? mc_f32_to_bf16_bits(want)
                                                        : mc_f32_to_f16_bits(want);
                            uint16_t h;
                            memcpy(&h, y + i * 2, 2);
                            got = h;
                        } else {
                            memcpy(&got, y + i * 4, 4);
                        }
                        /* the sum of two NaNs is one of them: which one is the compiler's
                         * choice of operand order (IEEE leaves it open) */
                        const float va = mcx_load(a, types[ta], i), vb = mcx_load(b, types[tb], i);
                        const int both_nan = va != va && vb != vb;
                        const uint32_t ex = types[ty] == MC_F32 ? 0x7F800000u
                                            : types[ty] == MC_BF16 ? 0x7F80u : 0x7C00u;
                        const int got_nan = (got & ex) == ex && (got & ~(ex | (ex << 1))) != 0;
                        if (got != want && !(both_nan && got_nan) && bad++ < 3)
                            MCX_FAIL("[%lld] gives 0x%x, want 0x%x", (long long)i, got, want);
                    }
                    ++mcx_checks_;
                    const size_t ey = (size_t)mcx_elem_size(types[ty]);
                    MCX_CHECK(mcx_untouched(y, (size_t)n * ey, (size_t)(n + 16) * 4),
                              "wrote past the end");
                }
    free(a);
    free(b);
    free(y);
}

static void check_arguments(void)
{
    float v = 1.0f;
    mcx_case("arguments");
    MCX_CHECK(mc_act_forward(MC_ACT_GELU, &v, &v, -1) == MC_ACT_EARG, "n < 0 accepted");
    MCX_CHECK(mc_act_forward(MC_ACT_GELU, NULL, &v, 1) == MC_ACT_EARG, "NULL x accepted");
    MCX_CHECK(mc_act_backward(MC_ACT_GELU, &v, &v, NULL, 1) == MC_ACT_EARG, "NULL dx accepted");
    MCX_CHECK(mc_act_forward(MC_ACT_GELU, NULL, NULL, 0) == MC_ACT_OK, "empty call refused");
    MCX_CHECK(mc_softmax(&v, &v, -1, 1, 0) == MC_ACT_EARG, "rows < 0 accepted");
    MCX_CHECK(mc_softmax(&v, &v, 1, -1, 0) == MC_ACT_EARG, "n < 0 accepted");
    MCX_CHECK(mc_softmax(NULL, NULL, 0, 5, 0) == MC_ACT_OK, "empty call refused");
    MCX_CHECK(mc_add_act(MC_ACT_NONE, (char *)&v, MC_F32, (char *)&v, MC_F64, (char *)&v, MC_F32,
                         1) == MC_ACT_EARG, "a float64 operand accepted");
    MCX_CHECK(mc_add_act(MC_ACT_NONE, NULL, MC_F32, (char *)&v, MC_F32, (char *)&v, MC_F32, 1)
                  == MC_ACT_EARG, "NULL a accepted");
    MCX_CHECK(mc_add_act(MC_ACT_NONE, NULL, MC_F32, NULL, MC_F32, NULL, MC_F32, 0) == MC_ACT_OK,
              "empty sum refused");
    MCX_CHECK(v == 1.0f, "a refused call wrote");
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
            mcx_seed(17);
            for (size_t s = 0; s < sizeof sizes_ / sizeof sizes_[0]; ++s)
                check_elementwise(sizes_[s]);
            if (ti == 0) {
                check_gelu_16();
                check_softmax16();
            }
            check_softmax(0, 5, 1);
            check_softmax(3, 0, 1);
            check_softmax(1, 1, 0);
            check_softmax(4, 17, 1);
            check_softmax(7, 31, 0);
            check_softmax(5, 1000, 1);
            check_softmax(3, 4099, 0);
            check_softmax(96, 700, 1);     /* 67200 elements: above the threshold */
            check_add(0);
            check_add(1);
            check_add(1500);
            check_add(70001);
            check_arguments();
        }
    return mcx_end("test_act");
}
