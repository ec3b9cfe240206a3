/* The int8 GEMM driver mc_igemm() at every level, one and several threads, against the scalar
 * twin (mc_igemm_scalar.h) bit for bit: the exact int32 product (every element against
 * mc_igemm_dot_scalar_), the scaled epilogue (mc_igemm_value_, the act family's activation and
 * the output rounding), B packed ahead (mc_igemm_pack) and not, K blocks of several depths
 * (the kc of the call), transposed and reversed operands, a batch, int8 extremes, K = 0 and
 * MC_IGEMM_MAX_K, a refusal above it and of panels of another width; and the row quantization
 * (mc_igemm_quantize) against mc_igemm_quant_row_scalar_; with zero points, the min-max row
 * quantization (mc_igemm_quantize_zp) against mc_igemm_quant_row_zp_scalar_ and the product
 * (A - z) @ B (g.a_zero) against the int64 sum, int32 and scaled, and its own K bound.  Bytes
 * past every output unchanged. */
#include <math.h>

#include "ctest.h"

#include "mc_act_scalar.h"
#include "mc_igemm.h"
#include "mc_igemm_scalar.h"

typedef struct {
    int64_t rows, cols, rs, cs;
    int8_t *base;   /* element (0, 0) */
    int8_t *buf;
} imatrix;

/* layout 0: row-major, 1: transposed, 2: rows reversed and columns stepped by 2 */
static imatrix make(int64_t rows, int64_t cols, int layout, int extreme)
{
    imatrix x;
    x.rows = rows;
    x.cols = cols;
    const int64_t elems = rows * cols * 2 + 1;
    x.buf = (int8_t *)ct_alloc_marked(elems);
    if (layout == 0) {
        x.rs = cols;
        x.cs = 1;
        x.base = x.buf;
    } else if (layout == 1) {
        x.rs = 1;
        x.cs = rows;
        x.base = x.buf;
    } else {
        x.rs = -2 * cols;
        x.cs = 2;
        x.base = x.buf + (rows - 1) * 2 * cols;
    }
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
            x.base[i * x.rs + j * x.cs] =
                extreme ? (int8_t)(ct_rand() & 1 ? -128 : 127) : (int8_t)(ct_rand() & 0xFF);
    return x;
}

static const int out_types[] = {MC_IGEMM_I32, MC_F32, MC_BF16, MC_F16};

static void run_case(int64_t batch, int64_t m, int64_t k, int64_t n, int la, int lb, int packed,
                     int64_t kc, int out_type, int act, int extreme)
{
    ct_context("batch %lld, %lld x %lld x %lld, layouts %d %d, packed %d, kc %lld, out %d, act %d",
               (long long)batch, (long long)m, (long long)k, (long long)n, la, lb, packed,
               (long long)kc, out_type, act);
    imatrix a = make(batch * m, k, la, extreme), b = make(k, n, lb, extreme);
    const int scaled = out_type != MC_IGEMM_I32;
    const int64_t es = out_type == MC_IGEMM_I32 || out_type == MC_F32 ? 4 : 2;
    const int64_t obytes = batch * m * n * es;
    char *out = (char *)ct_alloc_marked(obytes);
    float *as = (float *)ct_alloc_marked(batch * m * 4 + 4), *bs = (float *)ct_alloc_marked(n * 4 + 4);
    float *bias = (float *)ct_alloc_marked(n * 4 + 4);
    for (int64_t i = 0; i < batch * m; ++i)
        as[i] = (float)ct_uniform(0.01, 3.0);
    for (int64_t j = 0; j < n; ++j) {
        bs[j] = (float)ct_uniform(0.01, 3.0);
        bias[j] = (float)ct_uniform(-100.0, 100.0);
    }
    int64_t *offs = (int64_t *)malloc((size_t)(2 * batch) * 8);
    for (int64_t t = 0; t < batch; ++t) {
        offs[2 * t] = t * m * a.rs;
        offs[2 * t + 1] = t * m * n * es;
    }
    mc_igemm_call call;
    memset(&call, 0, sizeof call);
    call.g.m = m;
    call.g.n = n;
    call.g.k = k;
    call.g.a = a.base;
    call.g.a_rs = a.rs;
    call.g.a_cs = a.cs;
    call.g.out = out;
    call.g.o_rs = n * es;
    call.g.o_cs = es;
    call.g.out_type = out_type;
    if (scaled) {
        call.g.a_scale = as;
        call.g.b_scale = bs;
        call.g.bias = bias;
        call.g.bias_s = 4;
        call.g.act = act;
    }
    call.batch = batch;
    call.offs = offs;
    call.kc = kc;
    mc_ipacked pk;
    memset(&pk, 0, sizeof pk);
    if (packed) {
        CT_CHECK(mc_igemm_pack(b.base, b.rs, b.cs, k, n, kc, &pk) == MC_IGEMM_OK, "pack");
        call.packed = &pk;
        /* the packed values come back */
        int8_t *u = (int8_t *)ct_alloc_marked(k * n + 1);
        mc_igemm_unpack(&pk, u, n, 1);
        for (int64_t i = 0; i < k * n; ++i)
            if (!CT_CHECK(u[i] == b.base[(i / n) * b.rs + (i % n) * b.cs], "unpack [%lld]",
                          (long long)i))
                break;
        free(u);
    } else {
        call.b = b.base;
        call.b_rs = b.rs;
        call.b_cs = b.cs;
    }
    CT_CHECK(mc_igemm(&call) == MC_IGEMM_OK, "mc_igemm status");
    for (int64_t t = 0; t < batch; ++t)
        for (int64_t i = 0; i < m; ++i) {
            float row[1024];
            const int64_t ii = t * m + i;
            for (int64_t j = 0; j < n; ++j) {
                const int32_t s = mc_igemm_dot_scalar_(a.base + ii * a.rs, a.cs, b.base + j * b.cs,
                                                       b.rs, k);
                const char *o = out + (ii * n + j) * es;
                if (!scaled) {
                    int32_t got;
                    memcpy(&got, o, 4);
                    if (!CT_CHECK_BITS((uint32_t)got, (uint32_t)s, "C", ii * n + j))
                        return;
                    continue;
                }
                row[j] = mc_igemm_value_(s, as[ii], bs[j], &bias[j]);
            }
            if (!scaled)
                continue;
            if (act != MC_ACT_NONE)
                for (int64_t j = 0; j < n; ++j)
                    row[j] = mc_act_scalar_f32_(mc_act_for_output(act, out_type), row[j]);
            for (int64_t j = 0; j < n; ++j) {
                char want[4];
                mc_igemm_store_(want, row[j], out_type);
                uint32_t g = 0, w = 0;
                memcpy(&g, out + (ii * n + j) * es, (size_t)es);
                memcpy(&w, want, (size_t)es);
                if (!CT_CHECK_BITS(g, w, "C", ii * n + j))
                    return;
            }
        }
    CT_CHECK(ct_marks_intact(out, obytes), "bytes past C changed");
    mc_igemm_packed_free(&pk);
    free(offs);
    free(a.buf);
    free(b.buf);
    free(out);
    free(as);
    free(bs);
    free(bias);
}

static void quant_case(int type, int64_t rows, int64_t k, int special)
{
    ct_context("quantize type %d, %lld x %lld, special %d", type, (long long)rows, (long long)k,
               special);
    const int64_t es = type == MC_F32 ? 4 : 2;
    char *x = (char *)ct_alloc_marked(rows * k * es + 1);
    for (int64_t i = 0; i < rows; ++i) {
        const double mag = ldexp(1.0, (int)(ct_rand() % 40) - 30);
        for (int64_t t = 0; t < k; ++t) {
            double v = ct_uniform(-1.0, 1.0) * mag;
            if (special && i % 4 == 1 && t == k / 2)
                v = NAN;
            if (special && i % 4 == 2 && t == k / 3)
                v = -INFINITY;
            if (special && i % 4 == 3)
                v = 0.0;
            mc_igemm_store_(x + (i * k + t) * es, (float)v, type);
        }
    }
    int8_t *q = (int8_t *)ct_alloc_marked(rows * k + 1);
    char *s = (char *)ct_alloc_marked(rows * es + 1);
    mc_igemm_quantize(x, type, rows, k, k * es, es, q, k, s);
    int8_t wq[512];
    char ws[4];
    for (int64_t i = 0; i < rows; ++i) {
        mc_igemm_quant_row_scalar_(x + i * k * es, type, k, es, wq, 1, ws);
        for (int64_t t = 0; t < k; ++t)
            if (!CT_CHECK_BITS((uint8_t)q[i * k + t], (uint8_t)wq[t], "q", i * k + t))
                return;
        uint32_t g = 0, w = 0;
        memcpy(&g, s + i * es, (size_t)es);
        memcpy(&w, ws, (size_t)es);
        CT_CHECK_BITS(g, w, "scale", i);
    }
    CT_CHECK(ct_marks_intact(q, rows * k) && ct_marks_intact(s, rows * es), "bytes past q / scale");
    free(x);
    free(q);
    free(s);
}

static void quant_zp_case(int type, int64_t rows, int64_t k)
{
    ct_context("quantize with zero points, type %d, %lld x %lld", type, (long long)rows,
               (long long)k);
    const int64_t es = type == MC_F32 ? 4 : 2;
    char *x = (char *)ct_alloc_marked(rows * k * es + 1);
    for (int64_t i = 0; i < rows; ++i) {
        const double mag = ldexp(1.0, (int)(ct_rand() % 40) - 30), shift = ct_uniform(-1.0, 1.0);
        for (int64_t t = 0; t < k; ++t) {
            double v = (ct_uniform(-1.0, 1.0) + shift) * mag;
            if (i % 5 == 1 && t == k / 2)
                v = NAN;
            if (i % 5 == 2 && t == k / 3)
                v = INFINITY;
            if (i % 5 == 3)
                v = 0.0;
            mc_igemm_store_(x + (i * k + t) * es, (float)v, type);
        }
    }
    int8_t *q = (int8_t *)ct_alloc_marked(rows * k + 1);
    float *s = (float *)ct_alloc_marked(rows * 4 + 1);
    int32_t *z = (int32_t *)ct_alloc_marked(rows * 4 + 1);
    mc_igemm_quantize_zp(x, type, rows, k, k * es, es, q, k, s, z);
    int8_t wq[1024];
    for (int64_t i = 0; i < rows; ++i) {
        float ws;
        int32_t wz;
        mc_igemm_quant_row_zp_scalar_(x + i * k * es, type, k, es, wq, 1, &ws, &wz);
        for (int64_t t = 0; t < k; ++t)
            if (!CT_CHECK_BITS((uint8_t)q[i * k + t], (uint8_t)wq[t], "q", i * k + t))
                return;
        CT_CHECK_BITS(mc_igemm_bits_(s[i]), mc_igemm_bits_(ws), "scale", i);
        CT_CHECK_BITS((uint32_t)z[i], (uint32_t)wz, "zero", i);
    }
    CT_CHECK(ct_marks_intact(q, rows * k) && ct_marks_intact(s, rows * 4) &&
             ct_marks_intact(z, rows * 4), "bytes past q / scale / zero");
    free(x);
    free(q);
    free(s);
    free(z);
}

/* (A - z) @ B with zero points, int32 (out_type MC_IGEMM_I32) or float32 scaled, B packed or
 * not, in K blocks of kc; extreme: A all -128 and z = 127, B all -128 (the largest sums) */
static void zp_case(int64_t m, int64_t k, int64_t n, int packed, int64_t kc, int scaled,
                    int extreme)
{
    ct_context("zero points, %lld x %lld x %lld, packed %d, kc %lld, scaled %d, extreme %d",
               (long long)m, (long long)k, (long long)n, packed, (long long)kc, scaled, extreme);
    int8_t *a = (int8_t *)malloc((size_t)(m * k + 1));
    int8_t *b = (int8_t *)malloc((size_t)(k * n + 1));
    int32_t *z = (int32_t *)malloc((size_t)(m * 4 + 4));
    float *as = (float *)malloc((size_t)(m * 4 + 4)), *bs = (float *)malloc((size_t)(n * 4 + 4));
    for (int64_t i = 0; i < m * k; ++i)
        a[i] = extreme ? -128 : (int8_t)((int)(ct_rand() % 256) - 128);
    for (int64_t i = 0; i < k * n; ++i)
        b[i] = extreme ? -128 : (int8_t)((int)(ct_rand() % 256) - 128);
    for (int64_t i = 0; i < m; ++i) {
        z[i] = extreme ? 127 : (int32_t)(ct_rand() % 256) - 128;
        as[i] = (float)ct_uniform(0.5, 2.0);
    }
    for (int64_t j = 0; j < n; ++j)
        bs[j] = (float)ct_uniform(0.5, 2.0);
    const int64_t es = 4;
    char *out = (char *)ct_alloc_marked(m * n * es + 1);
    mc_igemm_call call;
    memset(&call, 0, sizeof call);
    call.g.m = m;
    call.g.n = n;
    call.g.k = k;
    call.g.a = a;
    call.g.a_rs = k;
    call.g.a_cs = 1;
    call.g.out = out;
    call.g.o_rs = n * es;
    call.g.o_cs = es;
    call.g.out_type = scaled ? MC_F32 : MC_IGEMM_I32;
    call.g.a_zero = z;
    if (scaled) {
        call.g.a_scale = as;
        call.g.b_scale = bs;
    }
    call.batch = 1;
    call.kc = kc;
    mc_ipacked pk;
    memset(&pk, 0, sizeof pk);
    if (packed) {
        CT_CHECK(mc_igemm_pack(b, n, 1, k, n, kc, &pk) == MC_IGEMM_OK, "pack");
        call.packed = &pk;
    } else {
        call.b = b;
        call.b_rs = n;
        call.b_cs = 1;
    }
    CT_CHECK(mc_igemm(&call) == MC_IGEMM_OK, "mc_igemm");
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            int64_t want = 0;
            for (int64_t t = 0; t < k; ++t)
                want += ((int64_t)a[i * k + t] - z[i]) * b[t * n + j];
            uint32_t g, w;
            memcpy(&g, out + (i * n + j) * es, 4);
            if (scaled)
                w = mc_igemm_bits_(mc_igemm_value_((int32_t)want, as[i], bs[j], NULL));
            else
                w = (uint32_t)(int32_t)want;
            if (!CT_CHECK_BITS(g, w, "out", i * n + j))
                goto end;
        }
    CT_CHECK(ct_marks_intact(out, m * n * es), "bytes past out");
end:
    mc_igemm_packed_free(&pk);
    free(a);
    free(b);
    free(z);
    free(as);
    free(bs);
    free(out);
}

int main(int argc, char **argv)
{
    ct_init(argc, argv);
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 7, 5}, {1, 300, 130}, {2, 3, 2}, {3, 33, 17}, {14, 64, 32},
        {15, 129, 65}, {29, 255, 97}, {64, 600, 300}, {1, 4100, 260}, {0, 5, 3}, {4, 0, 9},
    };
    for (int level = 0; level < ct_levels(); ++level) {
        ct_set_level(level);
        for (int th = 0; th < 2; ++th) {
            ct_set_threads(th ? CT_THREADS : 1);
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
                for (int packed = 0; packed < 2; ++packed) {
                    const int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
                    run_case(1, m, k, n, (int)(s % 3), (int)((s + packed) % 3), packed, 0,
                             out_types[s % 4], (int)(s % 5), 0);
                    run_case(1, m, k, n, 0, 0, packed, 12, out_types[(s + 1) % 4],
                             MC_ACT_GELU, s % 2 == 0);
                }
            run_case(3, 9, 70, 40, 0, 1, 1, 8, MC_IGEMM_I32, 0, 0);
            run_case(3, 9, 70, 40, 2, 0, 0, 0, MC_BF16, MC_ACT_RELU, 0);
            run_case(1, 2, MC_IGEMM_MAX_K, 3, 0, 0, 0, 0, MC_IGEMM_I32, 0, 1);
            quant_case(MC_F32, 37, 301, 1);
            quant_case(MC_BF16, 64, 100, 1);
            quant_case(MC_F16, 9, 17, 1);
            quant_case(MC_BF16, 13, 128, 1);     /* whole blocks of 64, no tail */
            quant_case(MC_F32, 600, 400, 0);
            quant_zp_case(MC_F32, 37, 301);
            quant_zp_case(MC_BF16, 21, 128);
            quant_zp_case(MC_F16, 9, 17);
            quant_zp_case(MC_BF16, 300, 1000);
            zp_case(1, 7, 5, 0, 0, 0, 0);
            zp_case(1, 300, 130, 1, 0, 1, 0);          /* the batch-1 path */
            zp_case(15, 129, 65, 0, 0, 1, 0);
            zp_case(29, 600, 97, 1, 64, 0, 0);         /* K blocks of 64 */
            zp_case(64, 700, 300, 0, 128, 1, 0);
            zp_case(2, MC_IGEMM_MAX_K_ZP, 3, 1, 0, 0, 1);
        }
        /* refusals: K above the bound, panels of another width */
        ct_context("refusals");
        mc_igemm_call call;
        memset(&call, 0, sizeof call);
        call.g.m = call.g.n = 1;
        call.g.k = MC_IGEMM_MAX_K + 1;
        call.batch = 1;
        CT_CHECK(mc_igemm(&call) == MC_IGEMM_SIZE, "k above the bound accepted");
        const int32_t zero = 0;
        call.g.a_zero = &zero;
        call.g.k = MC_IGEMM_MAX_K_ZP + 1;
        CT_CHECK(mc_igemm(&call) == MC_IGEMM_SIZE, "k above the bound with zero points accepted");
        call.g.a_zero = NULL;
        mc_ipacked pk;
        CT_CHECK(mc_igemm_pack(NULL, 1, 1, MC_IGEMM_MAX_K + 1, 1, 0, &pk) == MC_IGEMM_SIZE,
                 "pack above the bound accepted");
        mc_ipacked other;
        memset(&other, 0, sizeof other);
        other.nr = 8;
        call.g.k = 4;
        call.packed = &other;
        CT_CHECK(mc_igemm(&call) == MC_IGEMM_FORMAT, "panels of another width accepted");
        CT_CHECK(mc_igemm_packed_bytes(32, MC_IGEMM_MAX_K, INT64_MAX / 4, 4096) == -1,
                 "byte count overflow not seen");
    }
    return ct_finish();
}
