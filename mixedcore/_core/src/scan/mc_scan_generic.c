/* Generic (portable C) overflow-scan kernels, the strided reference loops, and the generic
 * table (the driver is mc_scan.c).
 *
 * Design:
 *   a. The finite test of a block is written so that the compiler vectorises it at the
 *      platform's baseline (SSE2 on x86-64): per element one AND, one ADD and one OR into an
 *      accumulator, and one test per block of MC_BLOCK_ elements (the early exit).
 *      The AND leaves the magnitude bits a = |x|; a is below the magnitude of infinity Inf
 *      exactly when a + (top_bit - Inf) does not reach the top bit of the word.  Since
 *      a <= top_bit - 1 the sum cannot carry out of the word, so the OR of the sums over a
 *      block has its top bit set exactly when some element is NaN or infinite:
 *        float16   top bit 0x8000, Inf 0x7C00 -> add 0x0400
 *        bfloat16  top bit 0x8000, Inf 0x7F80 -> add 0x0080
 *        float32   top bit 2**31,  Inf 0x7F800000 -> add 0x00800000
 *        float64   top bit 2**63,  Inf 0x7FF0000000000000 -> add 2**52
 *   b. The unscale kernels for float32 / float64 are a multiply fused with the same test; the
 *      16-bit ones call the scalar twins (exact widening, multiply, RNE rounding).
 *   c. avx512bf16 inherits the avx512 kernels except the bfloat16 unscale, which rounds with
 *      VCVTNEPS2BF16 there (mc_scan_avx512bf16.c).
 */
#include <string.h>
#include "mc_scan_kernels.h"

enum { MC_BLOCK_ = 256 };

#define MC_ALL_FINITE_GENERIC_(name, T, ADD, TOP, twin)                              \
    static int mc_all_finite_##name##_generic(const void *p, int64_t n)                      \
    {                                                                                 \
        const T *s = (const T *)p;                                                    \
        int64_t i = 0;                                                                \
        for (; i + MC_BLOCK_ <= n; i += MC_BLOCK_) {                                  \
            T acc = 0;                                                                \
            for (int j = 0; j < MC_BLOCK_; ++j)                                       \
                acc |= (T)((T)(s[i + j] & (T)(TOP - 1)) + (T)(ADD));                  \
            if (acc & (T)(TOP))                                                       \
                return 0;                                                             \
        }                                                                             \
        for (; i < n; ++i)                                                            \
            if (!twin(s[i]))                                                          \
                return 0;                                                             \
        return 1;                                                                     \
    }

MC_ALL_FINITE_GENERIC_(f16, uint16_t, 0x0400u, 0x8000u, mc_f16_finite_bits)
MC_ALL_FINITE_GENERIC_(bf16, uint16_t, 0x0080u, 0x8000u, mc_bf16_finite_bits)
MC_ALL_FINITE_GENERIC_(f32, uint32_t, 0x00800000u, 0x80000000u, mc_f32_finite_bits)
MC_ALL_FINITE_GENERIC_(f64, uint64_t, UINT64_C(0x0010000000000000), UINT64_C(0x8000000000000000),
                       mc_f64_finite_bits)

/* 16-bit data: twins in a loop, the finite test OR-accumulated (design a). */
#define MC_UNSCALE16_GENERIC_(name, ADD, twin)                                        \
    static int mc_unscale_##name##_generic(void *p, int64_t n, float inv32, double inv64)    \
    {                                                                                 \
        uint16_t *s = (uint16_t *)p;                                                  \
        uint16_t acc = 0;                                                             \
        (void)inv64;                                                                  \
        for (int64_t i = 0; i < n; ++i) {                                             \
            const uint16_t h = s[i];                                                  \
            acc |= (uint16_t)((uint16_t)(h & 0x7FFFu) + (ADD));                       \
            s[i] = twin(h, inv32);                                                    \
        }                                                                             \
        return !(acc & 0x8000u);                                                      \
    }

MC_UNSCALE16_GENERIC_(f16, 0x0400u, mc_f16_unscale_bits)
MC_UNSCALE16_GENERIC_(bf16, 0x0080u, mc_bf16_unscale_bits)

static int mc_unscale_f32_generic(void *p, int64_t n, float inv32, double inv64)
{
    float *x = (float *)p;
    uint32_t acc = 0;
    (void)inv64;
    for (int64_t i = 0; i < n; ++i) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        acc |= (b & 0x7FFFFFFFu) + 0x00800000u;
        x[i] = x[i] * inv32;
    }
    return !(acc & 0x80000000u);
}

static int mc_unscale_f64_generic(void *p, int64_t n, float inv32, double inv64)
{
    double *x = (double *)p;
    uint64_t acc = 0;
    (void)inv32;
    for (int64_t i = 0; i < n; ++i) {
        uint64_t b;
        memcpy(&b, x + i, 8);
        acc |= (b & UINT64_C(0x7FFFFFFFFFFFFFFF)) + UINT64_C(0x0010000000000000);
        x[i] = x[i] * inv64;
    }
    return !(acc >> 63);
}

MC_STATS_KERNELS_(generic)

/* --- strided reference loops --------------------------------------------------------------- */

#define MC_STRIDED_FINITE_(T, twin)                                                   \
    for (int64_t i = 0; i < n; ++i) {                                                 \
        T v;                                                                          \
        memcpy(&v, p + i * stride, sizeof v);                                         \
        if (!twin(v))                                                                 \
            return 0;                                                                 \
    }                                                                                 \
    return 1;

int mc_all_finite_strided(int type, const char *p, int64_t stride, int64_t n)
{
    switch (type) {
    case MC_F16: MC_STRIDED_FINITE_(uint16_t, mc_f16_finite_bits)
    case MC_BF16: MC_STRIDED_FINITE_(uint16_t, mc_bf16_finite_bits)
    case MC_F32: MC_STRIDED_FINITE_(uint32_t, mc_f32_finite_bits)
    case MC_F64: MC_STRIDED_FINITE_(uint64_t, mc_f64_finite_bits)
    default: return 1;
    }
}

#define MC_STRIDED_UNSCALE_(T, finite, unscale, inv)                                  \
    for (int64_t i = 0; i < n; ++i) {                                                 \
        T v;                                                                          \
        memcpy(&v, p + i * stride, sizeof v);                                         \
        ok &= finite(v);                                                              \
        v = unscale(v, inv);                                                          \
        memcpy(p + i * stride, &v, sizeof v);                                         \
    }                                                                                 \
    return ok;

int mc_unscale_strided(int type, char *p, int64_t stride, int64_t n, float inv32, double inv64)
{
    int ok = 1;
    switch (type) {
    case MC_F16: MC_STRIDED_UNSCALE_(uint16_t, mc_f16_finite_bits, mc_f16_unscale_bits, inv32)
    case MC_BF16: MC_STRIDED_UNSCALE_(uint16_t, mc_bf16_finite_bits, mc_bf16_unscale_bits, inv32)
    case MC_F32: MC_STRIDED_UNSCALE_(uint32_t, mc_f32_finite_bits, mc_f32_unscale_bits, inv32)
    case MC_F64: MC_STRIDED_UNSCALE_(uint64_t, mc_f64_finite_bits, mc_f64_unscale_bits, inv64)
    default: return 1;
    }
}

void mc_stats_strided(int type, const char *p, int64_t stride, int64_t n, mc_stats *tally)
{
    const mc_stat_limits *l = &mc_stat_limits_of[type];
    for (int64_t i = 0; i < n; ++i) {
        const char *e = p + i * stride;
        uint16_t h;
        uint32_t f;
        uint64_t d;
        switch (type) {
        case MC_F16:
        case MC_BF16: memcpy(&h, e, 2); mc_stats_add(tally, l, h & 0x7FFFu); break;
        case MC_F32: memcpy(&f, e, 4); mc_stats_add(tally, l, f & 0x7FFFFFFFu); break;
        case MC_F64:
            memcpy(&d, e, 8);
            mc_stats_add(tally, l, d & UINT64_C(0x7FFFFFFFFFFFFFFF));
            break;
        default: return;
        }
    }
}

const mc_scan_table mc_scan_table_generic = MC_SCAN_TABLE_(generic);
