/* The GEMM driver mc_gemm() at every level, one and several threads, against the float64
 * product of the same inputs within the bound docs/gemm.md derives:
 *     |C - C_exact| <= 2 * K * 2**-24 * (|A| @ |B|)  (+ 2 * K * 2**-126 for VDPBF16PS's flushes)
 * plus the rounding of a 16-bit output.  Shapes with tails of every block and panel, 1 and 0
 * (K = 0), transposed and padded operands, a size above the threading threshold; and, bit for
 * bit, the same call with B packed ahead (mc_gemm_pack) and with another thread count. */
#include <math.h>

#include "ctest.h"

#include "mc_convert_scalar.h"
#include "mc_gemm.h"

/* x rounded to the type (its bits), and the exact value of bits of the type. */
static uint64_t to_type(int type, double x)
{
    const uint32_t f = ct_bits32((float)x);
    return type == MC_F32 ? f : type == MC_F16 ? mc_f32_to_f16_bits(f) : mc_f32_to_bf16_bits(f);
}

static double value_of(int type, uint64_t bits)
{
    switch (type) {
    case MC_F16: return ct_f64(mc_f16_to_f64_bits((uint16_t)bits));
    case MC_BF16: return ct_f64(mc_bf16_to_f64_bits((uint16_t)bits));
    default: return (double)ct_f32((uint32_t)bits);
    }
}

/* A rows x cols matrix of the type with byte strides rs, cs on a marked buffer of `elems`
 * elements; values of both signs over a few binades. */
typedef struct {
    int type;
    int64_t rows, cols, rs, cs;
    char *buf;
} matrix;

static matrix make(int type, int64_t rows, int64_t cols, int transposed, int64_t pad)
{
    matrix x;
    const int is = ct_itemsize(type);
    x.type = type;
    x.rows = rows;
    x.cols = cols;
    if (transposed) {
        x.rs = is;
        x.cs = (rows + pad) * is;
    } else {
        x.rs = (cols + pad) * is;
        x.cs = is;
    }
    const int64_t elems = (transposed ? cols * (rows + pad) : rows * (cols + pad)) + 1;
    x.buf = (char *)ct_alloc_marked(elems * is);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
            ct_store(x.buf + i * x.rs + j * x.cs, is,
                     to_type(type, ct_uniform(-1.0, 1.0) * ldexp(1.0, (int)(ct_rand() % 9) - 4)));
    return x;
}

static double get(const matrix *x, int64_t i, int64_t j)
{
    return value_of(x->type, ct_load(x->buf + i * x->rs + j * x->cs, ct_itemsize(x->type)));
}

static int gemm(const matrix *a, const matrix *b, matrix *out, const mc_packed *packed)
{
    mc_gemm_call call;
    memset(&call, 0, sizeof call);
    call.g.m = a->rows;
    call.g.n = b->cols;
    call.g.k = a->cols;
    call.g.a = a->buf;
    call.g.a_rs = a->rs;
    call.g.a_cs = a->cs;
    call.g.a_type = a->type;
    call.g.b = packed ? NULL : b->buf;
    call.g.b_rs = packed ? 0 : b->rs;
    call.g.b_cs = packed ? 0 : b->cs;
    call.g.b_type = b->type;
    call.g.out = out->buf;
    call.g.o_rs = out->rs;
    call.g.o_cs = out->cs;
    call.g.out_type = out->type;
    call.g.act = MC_ACT_NONE;
    call.alpha = 1.0;
    call.beta = 0.0;
    call.batch = 1;
    call.packed = packed;
    return mc_gemm(&call);
}

static int64_t out_bytes(const matrix *o)
{
    return (o->rows - 1) * o->rs + (o->cols - 1) * o->cs + ct_itemsize(o->type);
}

static void check_case(int at, int bt, int ot, int64_t m, int64_t n, int64_t k, int a_t, int b_t)
{
    matrix a = make(at, m, k, a_t, a_t ? 3 : 0);
    matrix b = make(bt, k, n, b_t, b_t ? 0 : 5);
    matrix out = make(ot, m, n, 0, 1);
    const int os = ct_itemsize(ot);
    ct_context("%s @ %s -> %s, m=%lld n=%lld k=%lld%s%s", ct_type_name(at), ct_type_name(bt),
               ct_type_name(ot), (long long)m, (long long)n, (long long)k,
               a_t ? ", A transposed" : "", b_t ? ", B transposed" : ", B padded");
    CT_CHECK(gemm(&a, &b, &out, NULL) == MC_GEMM_OK, "status");
    const double u = ldexp(1.0, -24);
    const double out_rel = ot == MC_F16 ? ldexp(1.0, -11) : ot == MC_BF16 ? ldexp(1.0, -8) : 0.0;
    const double out_abs = ot == MC_F16 ? ldexp(1.0, -25) : ot == MC_BF16 ? ldexp(1.0, -134) : 0.0;
    int ok = 1;
    for (int64_t i = 0; i < m && ok; ++i)
        for (int64_t j = 0; j < n && ok; ++j) {
            double exact = 0.0, mag = 0.0;
            for (int64_t p = 0; p < k; ++p) {
                const double x = get(&a, i, p) * get(&b, p, j);
                exact += x;
                mag += fabs(x);
            }
            const double bound = 2.0 * (double)k * u * mag + 2.0 * (double)k * ldexp(1.0, -126);
            const double tol = bound + out_rel * (fabs(exact) + bound) + out_abs;
            const double got = get(&out, i, j);
            ok = CT_CHECK(fabs(got - exact) <= tol,
                          "C[%lld, %lld] = %.17g, exact %.17g, bound %.3g", (long long)i,
                          (long long)j, got, exact, tol);
        }
    CT_CHECK(ct_marks_intact(out.buf, out_bytes(&out)), "bytes past the output written");
    /* the same bits with B packed ahead, and with the other thread count */
    matrix again = make(ot, m, n, 0, 1);
    mc_packed packed;
    CT_CHECK(mc_gemm_pack(b.buf, b.rs, b.cs, bt, k, n, 0, &packed) == MC_GEMM_OK, "pack status");
    CT_CHECK(gemm(&a, &b, &again, &packed) == MC_GEMM_OK, "packed status");
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            if (!CT_CHECK_BITS(ct_load(again.buf + i * again.rs + j * again.cs, os),
                               ct_load(out.buf + i * out.rs + j * out.cs, os), "packed B",
                               i * n + j))
                i = m;
    mc_gemm_packed_free(&packed);
    const int threads = mc_rt_process_threads();
    ct_set_threads(threads == 1 ? CT_THREADS : 1);
    CT_CHECK(gemm(&a, &b, &again, NULL) == MC_GEMM_OK, "status");
    ct_set_threads(threads);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
            if (!CT_CHECK_BITS(ct_load(again.buf + i * again.rs + j * again.cs, os),
                               ct_load(out.buf + i * out.rs + j * out.cs, os),
                               "other thread count", i * n + j))
                i = m;
    free(a.buf);
    free(b.buf);
    free(out.buf);
    free(again.buf);
}

int main(int argc, char **argv)
{
    /* m, n, k: ones, zero depth, tails of every panel width and block, narrow and wide, and
     * one above the threading threshold (m * n * k >= 1 << 19) */
    static const int64_t shapes[][3] = {{1, 1, 1}, {1, 1, 0}, {3, 5, 0}, {1, 37, 19}, {37, 1, 19},
                                        {2, 33, 65}, {5, 7, 3}, {17, 31, 33}, {16, 16, 16},
                                        {33, 65, 130}, {100, 3, 257}, {7, 300, 40},
                                        {96, 97, 95}};
    static const int types[3] = {MC_F32, MC_F16, MC_BF16};
    ct_init(argc, argv);
    for (int level = 0; level < ct_levels(); ++level) {
        ct_set_level(level);
        for (int threads = 1; threads <= CT_THREADS; threads += CT_THREADS - 1) {
            ct_set_threads(threads);
            ct_seed(11 + (uint64_t)level * 16 + (uint64_t)threads);
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
                for (int ai = 0; ai < 3; ++ai)
                    for (int bi = 0; bi < 3; ++bi) {
                        const int64_t *sh = shapes[s];
                        /* the output type and layouts rotate over the cases */
                        const int ot = types[(ai + bi + (int)s) % 3];
                        check_case(types[ai], types[bi], ot, sh[0], sh[1], sh[2],
                                   (int)(s + bi) % 3 == 0, (int)(s + ai) % 2 == 1);
                    }
        }
    }
    return ct_finish();
}
