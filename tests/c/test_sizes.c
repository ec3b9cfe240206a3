/* The checked size arithmetic (src/mc_checked.h), and every family's driver refusing a size that
 * overflows or exceeds MC_BYTES_MAX before it allocates or reads anything: absurd shapes, as a
 * broadcast view can claim them, with pointers to a few real bytes only.  A driver that computed
 * such a size with plain arithmetic would wrap to a small buffer and write past it (the
 * sanitizer run catches that); here each must return its "too big" status, or, where the
 * sizes are bounded by the image (pooling's tap lists), compute the right result. */
#include <limits.h>

#include "ctest.h"
#include "mc_attn.h"
#include "mc_checked.h"
#include "mc_conv.h"
#include "mc_convert.h"
#include "mc_gemm.h"
#include "mc_igemm.h"
#include "mc_pool.h"
#include "mc_scan.h"
#include "mc_wgemm.h"

static const int64_t big_ = (int64_t)1 << 60;

static void check_helpers(void)
{
    ct_context("mc_checked.h");
    CT_CHECK(mc_size_mul(3, 5) == 15, "3 * 5");
    CT_CHECK(mc_size_mul(0, INT64_MAX) == 0, "0 * max");
    CT_CHECK(mc_size_mul(INT64_MAX, 1) == INT64_MAX, "max * 1");
    CT_CHECK(mc_size_mul((int64_t)1 << 32, (int64_t)1 << 31) == -1, "2**32 * 2**31");
    CT_CHECK(mc_size_mul((int64_t)1 << 62, 4) == -1, "2**62 * 4");
    /* K near 2**64 / (NR * 4): the product wraps to exactly 0 in 64-bit unsigned arithmetic */
    CT_CHECK(mc_size_mul(mc_size_mul((int64_t)1 << 58, 16), 4) == -1, "2**58 * 16 * 4 (wraps to 0)");
    CT_CHECK(mc_size_mul(-1, 5) == -1 && mc_size_mul(5, -1) == -1, "a negative operand");
    CT_CHECK(mc_size_mul(mc_size_mul(INT64_MAX, 2), 0) == -1, "-1 propagates through * 0");
    CT_CHECK(mc_size_add(INT64_MAX - 1, 1) == INT64_MAX, "max - 1 + 1");
    CT_CHECK(mc_size_add(INT64_MAX, 1) == -1, "max + 1");
    CT_CHECK(mc_size_add(-1, 0) == -1, "-1 propagates through +");
    CT_CHECK(mc_size_round_up(17, 16) == 32 && mc_size_round_up(32, 16) == 32 &&
                 mc_size_round_up(0, 16) == 0, "round up");
    CT_CHECK(mc_size_round_up(INT64_MAX - 3, 16) == -1, "round up past max");
    CT_CHECK(mc_size_round_up(5, 0) == -1 && mc_size_round_up(-5, 16) == -1, "bad round up");
    CT_CHECK(mc_size_ceil_div(INT64_MAX, 16) == INT64_MAX / 16 + 1, "ceil div of max");
    CT_CHECK(mc_size_ceil_div(0, 16) == 0 && mc_size_ceil_div(-1, 16) == -1, "ceil div");
    CT_CHECK(mc_size_bytes(MC_BYTES_MAX, 1) == MC_BYTES_MAX, "MC_BYTES_MAX bytes");
    CT_CHECK(mc_size_bytes(MC_BYTES_MAX / 4 + 1, 4) == -1, "above MC_BYTES_MAX");
    CT_CHECK(mc_size_round64(1) == 64 && mc_size_round64(INT64_MAX - 10) == -1, "round64");
    CT_CHECK(mc_work_mul(big_, big_) == INT64_MAX && mc_work_mul(3, 4) == 12 &&
                 mc_work_mul(-3, 4) == 0, "work saturates");
}

static void check_gemm(void)
{
    float b[4] = {0};
    mc_packed p;
    ct_context("gemm pack");
    /* broadcast views: k near 2**64 / (NR * 4) (2**58 for NR 16), and n as large */
    CT_CHECK(mc_gemm_pack((const char *)b, 0, 0, MC_F32, (int64_t)1 << 58, 16, 0, &p) ==
                 MC_GEMM_TOOBIG && p.data == NULL && p.nbytes == 0, "k = 2**58");
    CT_CHECK(mc_gemm_pack((const char *)b, 0, 0, MC_F32, 1, INT64_MAX - 2, 0, &p) ==
                 MC_GEMM_TOOBIG && p.data == NULL, "n near INT64_MAX");
    CT_CHECK(mc_gemm_pack((const char *)b, 0, 0, MC_BF16, big_, big_, 0, &p) == MC_GEMM_TOOBIG,
             "bfloat16 pairs");
    CT_CHECK(mc_gemm_pack((const char *)b, 0, 0, MC_F32, (int64_t)1 << 42, 16, 0, &p) ==
                 MC_GEMM_TOOBIG, "2**48 bytes: above MC_BYTES_MAX without overflow");
    ct_context("gemm");
    float out[4] = {7.0f, 7.0f, 7.0f, 7.0f};
    mc_gemm_call c;
    memset(&c, 0, sizeof c);
    c.g.m = 1;
    c.g.n = 1;
    c.g.k = big_;                                   /* B's column to pack: 2**62 bytes */
    c.g.a = (const char *)b;
    c.g.b = (const char *)b;
    c.g.a_type = c.g.b_type = c.g.out_type = MC_F32;
    c.g.out = (char *)out;
    c.g.o_rs = c.g.o_cs = 4;
    c.alpha = 1.0;
    c.batch = 1;
    CT_CHECK(mc_gemm(&c) == MC_GEMM_TOOBIG, "k = 2**60 of stride-0 operands");
    CT_CHECK(out[0] == 7.0f, "a refused product wrote");
}

static void check_igemm(void)
{
    int8_t b[4] = {0};
    mc_ipacked p;
    ct_context("igemm");
    CT_CHECK(mc_igemm_packed_bytes(16, 4, INT64_MAX - 2, 64) == -1, "n near INT64_MAX");
    CT_CHECK(mc_igemm_packed_bytes(16, MC_IGEMM_MAX_K, (int64_t)1 << 40, 64) == -1,
             "above MC_BYTES_MAX");
    CT_CHECK(mc_igemm_packed_bytes(16, 4, 16, 64) == 16 * 4 * 2, "one block of 4 and the sums");
    CT_CHECK(mc_igemm_pack(b, 0, 0, 4, (int64_t)1 << 50, 0, &p) == MC_IGEMM_TOOBIG &&
                 p.data == NULL && p.nbytes == 0, "pack of n = 2**50");
}

static void check_wgemm(void)
{
    int8_t w[4] = {0};
    float s[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    mc_wpacked p;
    ct_context("wgemm");
    CT_CHECK(mc_wgemm_pack(w, 8, big_, 16, s, NULL, 0, &p) == MC_WGEMM_TOOBIG, "k = 2**60");
    CT_CHECK(mc_wgemm_pack(w, 4, 16, INT64_MAX - 2, s, NULL, 0, &p) == MC_WGEMM_TOOBIG,
             "n near INT64_MAX");
    CT_CHECK(mc_wgemm_pack(w, 8, 16, 16, s, NULL, INT64_MAX, &p) == MC_WGEMM_TOOBIG,
             "a block near INT64_MAX");
}

static void check_attn(void)
{
    float x[4] = {0}, out[4] = {7.0f, 7.0f, 7.0f, 7.0f};
    mc_attn_args a;
    memset(&a, 0, sizeof a);
    a.b = a.h = a.t = a.s = a.dv = 1;
    a.d = big_;                                     /* D = 2**60: K^T alone is 2**66 bytes */
    a.q = a.k = a.v = (const char *)x;
    a.type = a.out_type = MC_F32;
    a.out = (char *)out;
    a.scale = 1.0f;
    ct_context("attention");
    CT_CHECK(mc_attn_work_bytes(&a) == -1, "work bytes of D = 2**60");
    CT_CHECK(mc_attention(&a) == MC_ATTN_TOOBIG && out[0] == 7.0f, "D = 2**60");
    a.d = 1;
    a.s = (int64_t)1 << 45;                         /* 2**47 bytes of V and more */
    CT_CHECK(mc_attention(&a) == MC_ATTN_TOOBIG && out[0] == 7.0f, "S = 2**45");
    a.s = 1;
    a.b = a.h = (int64_t)1 << 32;
    CT_CHECK(mc_attention(&a) == MC_ATTN_TOOBIG, "B * H = 2**64");
}

static mc_conv_geom geom_(int64_t h, int64_t w, int64_t c, int64_t k, int64_t pad)
{
    mc_conv_geom g = {1, h, w, c, k, k, 1, 1, 1, 1, pad, pad, 1, 1};
    return g;
}

static void check_pool_and_depthwise(void)
{
    float x[4] = {1.0f, 4.0f, 3.0f, 2.0f}, out[4] = {7.0f, 7.0f, 7.0f, 7.0f};
    float dx[4] = {0};
    /* a window of 2**30 x 2**30 over a 2 x 2 image: the tap lists hold at most 4 taps (the
     * workspace of 2 * KH * KW * 8 bytes used to wrap) */
    mc_pool_call pc = {geom_(2, 2, 1, (int64_t)1 << 30, ((int64_t)1 << 30) - 2), MC_POOL_MAX,
                       (const char *)x, MC_F32, (char *)out};
    ct_context("pool, huge window");
    CT_CHECK(mc_pool(&pc) == MC_POOL_OK && out[0] == 4.0f, "max over the whole image");
    pc.op = MC_POOL_SUM;
    CT_CHECK(mc_pool(&pc) == MC_POOL_OK && out[0] == 2.5f, "average over the whole image");
    const float dy = 1.0f;
    CT_CHECK(mc_pool_grad(&pc, (const char *)&dy, (char *)dx) == MC_POOL_OK &&
                 dx[0] == 0.25f && dx[3] == 0.25f, "average gradient");
    /* an image claiming 2**31 x 2**31 pixels (a broadcast view) under a window as large: the
     * tap lists would take 2**66 bytes */
    pc.geo = geom_((int64_t)1 << 31, (int64_t)1 << 31, 1, (int64_t)1 << 31, 0);
    ct_context("pool, huge image and window");
    CT_CHECK(mc_pool(&pc) == MC_POOL_TOOBIG, "forward");
    CT_CHECK(mc_pool_grad(&pc, (const char *)&dy, (char *)dx) == MC_POOL_TOOBIG, "gradient");
    pc.geo = geom_(2, 2, 1, (int64_t)1 << 40, ((int64_t)1 << 40) - 2);
    CT_CHECK(mc_pool(&pc) == MC_POOL_TOOBIG, "KH x KW beyond int64");

    float w[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    mc_dw_call dc;
    memset(&dc, 0, sizeof dc);
    dc.mult = 1;
    dc.x = (const char *)x;
    dc.x_type = dc.out_type = MC_F32;
    dc.w = w;
    dc.out = (char *)out;
    ct_context("depthwise");
    dc.geo = geom_((int64_t)1 << 31, (int64_t)1 << 31, 1, (int64_t)1 << 31, 0);
    CT_CHECK(mc_conv_depthwise(&dc) == MC_CONV_TOOBIG, "huge image and window");
    dc.geo = geom_(2, 2, (int64_t)1 << 40, 1, 0);
    dc.mult = (int64_t)1 << 30;                     /* C x mult = 2**70 */
    CT_CHECK(mc_conv_depthwise(&dc) == MC_CONV_TOOBIG, "channels times multiplier");
    dc.geo = geom_(2, 2, (int64_t)1 << 32, 1, 0);
    dc.mult = 1;                                    /* a row wider than the epilogue's int */
    CT_CHECK(mc_conv_depthwise(&dc) == MC_CONV_TOOBIG, "channels above INT_MAX");
    dc.geo = geom_(2, 2, 1, (int64_t)1 << 40, 0);   /* KH x KW x C weights: 2**80 */
    CT_CHECK(mc_conv_depthwise(&dc) == MC_CONV_TOOBIG, "weights beyond int64");
}

static void check_scan_and_cast(void)
{
    float x[4] = {0};
    /* three arrays of 2**61 float32 elements read with stride 4 (overlapping views): each fits
     * in int64 bytes, their sum does not */
    const int64_t shape[1] = {(int64_t)1 << 61}, strides[1] = {4};
    mc_scan_array arrays[3];
    for (int i = 0; i < 3; ++i) {
        arrays[i].data = (char *)x;
        arrays[i].type = MC_F32;
        arrays[i].nd = 1;
        arrays[i].shape = shape;
        arrays[i].strides = strides;
    }
    int finite = -1;
    int64_t index = -1;
    ct_context("scan");
    CT_CHECK(mc_scan_all_finite(arrays, 3, &finite, &index) == MC_SCAN_TOOBIG && index == 0,
             "2**63 bytes and more");
    const int64_t shape2[2] = {(int64_t)1 << 40, (int64_t)1 << 40}, zero[2] = {0, 0};
    ct_context("cast");
    CT_CHECK(mc_cast((const char *)x, MC_F32, zero, (char *)x, MC_F16, zero, 2, shape2, 0) ==
                 MC_CAST_EINVAL, "2**80 elements");
}

int main(int argc, char **argv)
{
    ct_init(argc, argv);
    check_helpers();
    for (int level = 0; level < ct_levels(); ++level) {
        ct_set_level(level);
        for (int threads = 1; threads <= CT_THREADS; threads += CT_THREADS - 1) {
            ct_set_threads(threads);
            check_gemm();
            check_igemm();
            check_wgemm();
            check_attn();
            check_pool_and_depthwise();
            check_scan_and_cast();
        }
    }
    return ct_finish();
}
