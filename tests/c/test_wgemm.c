/* The weight-only quantized GEMM driver mc_wgemm() at every level, one and several threads,
 * bit for bit against its scalar twin (mc_wgemm_ref_scalar_ on Keras's arrays, then the bias,
 * the activation's twin and the output rounding): int4 per channel and grouped (block sizes
 * that do and do not divide K), int8; every input and output type; small M (the streaming
 * kernels, the bfloat16-pair kernel at avx512bf16, and the FMA kernel for zero points outside
 * its range; more than 256 rows, converted in chunks) and larger M (gemm's float32 micro-kernel
 * on widened rows, K in chunks; for bfloat16 a, gemm's pair micro-kernel on widened pair
 * panels, and the float32 one for a band with subnormal a); strided a and out; a size above
 * the threading threshold.  Larger M must also give the bits of the same rows computed
 * MC_WGEMM_PAIRS_M (<= MC_WGEMM_SMALL_M) at a time, on the small-M path.  mc_wgemm_unpack must
 * give the q values back, and the bytes past every output stay unchanged. */
#include <math.h>

#include "ctest.h"

#include "mc_act_scalar.h"
#include "mc_convert_scalar.h"
#include "mc_wgemm.h"
#include "mc_wgemm_scalar.h"

typedef struct {
    int64_t m, k, n;
    int bits;
    int64_t block;       /* <= 0: per channel */
    int a_type, out_type, act, bias, a_cs;   /* a_cs: elements between a's columns */
    int tiny;            /* 1: row m / 2 of a all subnormal (no bfloat16-pair kernel for it) */
} wcase;

static uint16_t to16(int type, float f)
{
    const uint32_t u = ct_bits32(f);
    return type == MC_F16 ? mc_f32_to_f16_bits(u) : mc_f32_to_bf16_bits(u);
}

static float from16(int type, uint16_t h)
{
    return ct_f32(type == MC_F16 ? mc_f16_to_f32_bits(h) : mc_bf16_to_f32_bits(h));
}

static void run_case(const wcase *c)
{
    const int64_t m = c->m, k = c->k, n = c->n;
    const int64_t groups = c->block > 0 ? (k + c->block - 1) / c->block : 1;
    const int64_t ld = c->bits == 4 ? (n + 1) / 2 : n;
    int8_t *q = (int8_t *)malloc((size_t)(k * n));
    int8_t *kernel = (int8_t *)calloc((size_t)(k * ld), 1);
    float *scale = (float *)malloc((size_t)(groups * n) * 4);
    int8_t *zero = (int8_t *)malloc((size_t)(groups * n));
    const int lo = c->bits == 4 ? -8 : -128, span = c->bits == 4 ? 16 : 256;
    for (int64_t r = 0; r < k; ++r)
        for (int64_t j = 0; j < n; ++j) {
            const int v = lo + (int)(ct_rand() % (uint64_t)span);
            q[r * n + j] = (int8_t)v;
            if (c->bits == 8)
                kernel[r * ld + j] = (int8_t)v;
            else
                kernel[r * ld + j / 2] = (int8_t)((uint8_t)kernel[r * ld + j / 2] |
                                                  (uint8_t)((v & 0xF) << ((j & 1) * 4)));
        }
    for (int64_t x = 0; x < groups * n; ++x) {
        scale[x] = (float)ct_uniform(0.5, 2.0) * (float)ldexp(1.0, (int)(ct_rand() % 5) - 6);
        /* Keras's int4 zero points lie in [-8, 7]; an odd block size here draws wider ones,
         * which the bfloat16-pair kernel does not take */
        zero[x] = (int8_t)(c->block % 2 ? (int)(ct_rand() % 41) - 20 : (int)(ct_rand() % 17) - 8);
    }
    mc_wpacked w;
    const int r = mc_wgemm_pack(kernel, c->bits, k, n, scale, c->block > 0 ? zero : NULL,
                                c->block, &w);
    CT_CHECK(r == MC_WGEMM_OK, "pack returned %d", r);
    if (r != MC_WGEMM_OK)
        return;
    int8_t *back = (int8_t *)malloc((size_t)(k * n));
    mc_wgemm_unpack(&w, back);
    for (int64_t x = 0; x < k * n; ++x)
        if (!CT_CHECK_BITS((uint8_t)back[x], (uint8_t)q[x], "unpack", x))
            break;

    /* a: rows padded by 3 elements, columns a_cs apart; values of a few binades */
    const int aes = ct_itemsize(c->a_type), oes = ct_itemsize(c->out_type);
    const int64_t a_cs = c->a_cs * aes, a_rs = (k * c->a_cs + 3) * aes;
    char *a = (char *)ct_alloc_marked(m * a_rs + aes);
    float *af = (float *)malloc((size_t)(k > 0 ? k : 1) * 4 * (size_t)(m > 0 ? m : 1));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t x = 0; x < k; ++x) {
            float f = (float)(ct_uniform(-1.0, 1.0) * ldexp(1.0, (int)(ct_rand() % 7) - 3));
            if (c->tiny && i == m / 2)
                f = (float)ldexp((double)((int)(ct_rand() % 255) - 127), -133);
            char *p = a + i * a_rs + x * a_cs;
            if (c->a_type == MC_F32) {
                memcpy(p, &f, 4);
            } else {
                const uint16_t h = to16(c->a_type, f);
                memcpy(p, &h, 2);
                f = from16(c->a_type, h);
            }
            af[i * k + x] = f;
        }
    float *bias = (float *)malloc((size_t)n * 4);
    for (int64_t j = 0; j < n; ++j)
        bias[j] = (float)ct_uniform(-1.0, 1.0);
    const int64_t o_rs = (n + 5) * oes, obytes = m * o_rs;
    char *out = (char *)ct_alloc_marked(obytes);
    char *want = (char *)malloc((size_t)(obytes > 0 ? obytes : 1));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            float v = mc_wgemm_ref_scalar_(af + i * k, kernel, c->bits, ld, k, n, scale,
                                           c->block > 0 ? zero : NULL, c->block, j);
            if (c->bias)
                v += bias[j];
            v = mc_act_scalar_f32_(mc_act_for_output(c->act, c->out_type), v);
            if (c->out_type == MC_F32) {
                memcpy(want + i * o_rs + j * 4, &v, 4);
            } else {
                const uint16_t h = to16(c->out_type, v);
                memcpy(want + i * o_rs + j * 2, &h, 2);
            }
        }
    static const int threads[2] = {1, CT_THREADS};
    for (int t = 0; t < 2; ++t) {
        ct_set_threads(threads[t]);
        memset(out, 0, (size_t)obytes);
        mc_wgemm_call call;
        memset(&call, 0, sizeof call);
        call.w = &w;
        call.m = m;
        call.a = a;
        call.a_rs = a_rs;
        call.a_cs = a_cs;
        call.a_type = c->a_type;
        call.out = out;
        call.o_rs = o_rs;
        call.o_cs = oes;
        call.out_type = c->out_type;
        call.bias = c->bias ? bias : NULL;
        call.bias_s = 4;
        call.act = c->act;
        const int rr = mc_wgemm(&call);
        CT_CHECK(rr == MC_WGEMM_OK, "mc_wgemm returned %d", rr);
        int bad = 0;
        for (int64_t i = 0; i < m && !bad; ++i)
            for (int64_t j = 0; j < n; ++j) {
                const uint64_t got = ct_load(out + i * o_rs + j * oes, oes);
                const uint64_t exp = ct_load(want + i * o_rs + j * oes, oes);
                if (!CT_CHECK_BITS(got, exp, "out", i * n + j)) {
                    bad = 1;
                    break;
                }
            }
        CT_CHECK(ct_marks_intact(out, obytes), "bytes past out changed");
        /* the same rows MC_WGEMM_PAIRS_M at a time (the small-M path): the same bits */
        if (m <= MC_WGEMM_PAIRS_M)
            continue;
        memset(out, 0, (size_t)obytes);
        for (int64_t i0 = 0; i0 < m; i0 += MC_WGEMM_PAIRS_M) {
            call.m = m - i0 < MC_WGEMM_PAIRS_M ? m - i0 : MC_WGEMM_PAIRS_M;
            call.a = a + i0 * a_rs;
            call.out = out + i0 * o_rs;
            CT_CHECK(mc_wgemm(&call) == MC_WGEMM_OK, "mc_wgemm (rows from %lld)", (long long)i0);
        }
        for (int64_t i = 0; i < m; ++i) {
            int ok = 1;
            for (int64_t j = 0; j < n && ok; ++j)
                ok = CT_CHECK_BITS(ct_load(out + i * o_rs + j * oes, oes),
                                   ct_load(want + i * o_rs + j * oes, oes), "out (small M)",
                                   i * n + j);
            if (!ok)
                break;
        }
    }
    mc_wgemm_packed_free(&w);
    free(a); free(out); free(q); free(kernel); free(scale); free(zero); free(back); free(af);
    free(bias); free(want);
}

int main(int argc, char **argv)
{
    ct_init(argc, argv);
    static const wcase cases[] = {
        {1, 1, 1, 4, 0, MC_F32, MC_F32, MC_ACT_NONE, 0, 1},
        {1, 37, 33, 4, 0, MC_BF16, MC_F32, MC_ACT_NONE, 1, 1},
        {1, 4096, 130, 4, 0, MC_BF16, MC_BF16, MC_ACT_RELU, 1, 1},
        {3, 300, 70, 4, 64, MC_F32, MC_F32, MC_ACT_GELU, 1, 2},
        {5, 129, 17, 4, 32, MC_F16, MC_F16, MC_ACT_NONE, 0, 1},
        {4, 250, 47, 4, 0, MC_F16, MC_F32, MC_ACT_SILU, 1, 1},
        {7, 200, 160, 4, 128, MC_BF16, MC_F32, MC_ACT_NONE, 1, 1},
        {20, 200, 50, 4, 0, MC_BF16, MC_F32, MC_ACT_NONE, 1, 1},
        {40, 1000, 100, 4, 128, MC_BF16, MC_BF16, MC_ACT_TANH, 1, 1},
        {33, 77, 65, 4, 0, MC_F32, MC_F32, MC_ACT_NONE, 0, 3},
        {17, 130, 33, 4, 7, MC_F16, MC_F32, MC_ACT_RELU, 1, 1},
        {3, 100, 40, 4, 25, MC_BF16, MC_F32, MC_ACT_NONE, 1, 1},
        {2, 515, 300, 4, 128, MC_BF16, MC_F16, MC_ACT_NONE, 1, 2},
        {1, 100, 20, 8, 0, MC_F32, MC_F32, MC_ACT_NONE, 1, 1},
        {2, 1000, 600, 8, 0, MC_BF16, MC_F32, MC_ACT_NONE, 1, 1},
        {30, 64, 40, 8, 0, MC_F16, MC_BF16, MC_ACT_SIGMOID, 1, 1},
        {9, 90, 31, 8, 16, MC_F32, MC_F32, MC_ACT_NONE, 1, 1},
        {24, 90, 31, 8, 16, MC_F32, MC_F32, MC_ACT_NONE, 1, 1},
        {70, 300, 70, 4, 64, MC_F32, MC_F32, MC_ACT_NONE, 1, 2},
        {100, 200, 50, 8, 0, MC_F16, MC_BF16, MC_ACT_RELU, 1, 1},
        {80, 530, 40, 4, 0, MC_BF16, MC_F32, MC_ACT_NONE, 0, 1},
        {300, 64, 20, 4, 32, MC_BF16, MC_F32, MC_ACT_NONE, 1, 1},
        /* bfloat16 a above MC_WGEMM_PAIRS_M rows: gemm's pair micro-kernel on widened
         * pair panels (int4 both layouts, int8), tails of rows, columns and K, odd groups,
         * strided a, a band with subnormal a (the float32 kernel for that band) */
        {65, 768, 96, 4, 0, MC_BF16, MC_F32, MC_ACT_NONE, 1, 1},
        {150, 300, 70, 4, 128, MC_BF16, MC_BF16, MC_ACT_RELU, 1, 1},
        {129, 257, 33, 4, 64, MC_BF16, MC_F32, MC_ACT_NONE, 0, 2},
        {200, 95, 50, 8, 0, MC_BF16, MC_F16, MC_ACT_GELU, 1, 1},
        {131, 77, 17, 8, 32, MC_BF16, MC_F32, MC_ACT_NONE, 1, 3},
        {120, 99, 40, 4, 25, MC_BF16, MC_F32, MC_ACT_NONE, 1, 1},
        {300, 200, 48, 4, 0, MC_BF16, MC_F32, MC_ACT_NONE, 1, 1, 1},
        {140, 160, 64, 8, 0, MC_BF16, MC_BF16, MC_ACT_NONE, 0, 1, 1},
        {0, 10, 10, 4, 0, MC_F32, MC_F32, MC_ACT_NONE, 0, 1},
    };
    for (int level = 0; level < ct_levels(); ++level) {
        ct_set_level(level);
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci) {
            const wcase *c = &cases[ci];
            ct_context("m=%lld k=%lld n=%lld int%d block=%lld a=%d out=%d act=%d",
                       (long long)c->m, (long long)c->k, (long long)c->n, c->bits,
                       (long long)c->block, c->a_type, c->out_type, c->act);
            ct_seed(1000 + ci);
            run_case(c);
        }
    }
    /* byte counts that overflow are refused, not wrapped */
    mc_wpacked w;
    static const int8_t one = 0;
    static const float sc = 1.0f;
    CT_CHECK(mc_wgemm_pack(&one, 4, INT64_MAX / 4, 1, &sc, NULL, 0, &w) == MC_WGEMM_TOOBIG,
             "an overflowing size is refused");
    CT_CHECK(mc_wgemm_pack(&one, 8, (int64_t)1 << 40, (int64_t)1 << 40, &sc, NULL, 0, &w) ==
                 MC_WGEMM_TOOBIG,
             "an overflowing size is refused");
    return ct_finish();
}
