/* The scalar twins of the int8 GEMM family: the specification every level is tested against
 * (mc_igemm.h has the design).  Header-only, so each level file can use them for its edges.
 *
 *   - B panels (mc_igemm_pack_b_scalar_): the one format of every level, NR columns wide, for
 *     each group of 4 k the 4 values of column 0, of column 1, ... (zero past k and n), then NR
 *     int32: -128 times the sum of each column over the block (the correction of the uint8
 *     offset; unused by the levels that multiply signed values).
 *   - A panels in three element formats (int8, int16, uint8 a + 128).
 *   - The exact dot product, summed in int64 (the reference; the kernels sum in wrapping int32,
 *     which gives the same value since the true sum fits, mc_igemm_kernels.h).
 *   - The scaled value: float32(s) / (b_scale * a_scale) + bias, each operation rounded once
 *     in float32.
 *   - Dynamic row quantization as Keras computes it with torch: mc_igemm_quant_row_scalar_;
 *     and min-max quantization with a zero point: mc_igemm_quant_row_zp_scalar_.
 */
#ifndef MC_IGEMM_SCALAR_H_
#define MC_IGEMM_SCALAR_H_

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_igemm_kernels.h"

static inline float mc_igemm_f32_(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t mc_igemm_bits_(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The value of type MC_F32 / MC_BF16 / MC_F16 at p, as float32 (exact). */
static inline float mc_igemm_load_(const char *p, int type)
{
    if (type == MC_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return mc_igemm_f32_(type == MC_F16 ? mc_f16_to_f32_bits(h) : mc_bf16_to_f32_bits(h));
}

/* f rounded once to nearest even in type, stored at o. */
static inline void mc_igemm_store_(char *o, float f, int type)
{
    if (type == MC_F32) {
        memcpy(o, &f, 4);
        return;
    }
    const uint32_t u = mc_igemm_bits_(f);
    const uint16_t h = type == MC_F16 ? mc_f32_to_f16_bits(u) : mc_f32_to_bf16_bits(u);
    memcpy(o, &h, 2);
}

/* f rounded once to type and widened back (exact for float32). */
static inline float mc_igemm_round_(float f, int type)
{
    if (type == MC_F32)
        return f;
    const uint32_t u = mc_igemm_bits_(f);
    return mc_igemm_f32_(type == MC_F16 ? mc_f16_to_f32_bits(mc_f32_to_f16_bits(u))
                                        : mc_bf16_to_f32_bits(mc_f32_to_bf16_bits(u)));
}

/* Bytes of one B panel of nr columns over a block kc deep: the groups, then the nr sums. */
static inline int64_t mc_igemm_panel_bytes_(int nr, int64_t kc)
{
    return (int64_t)nr * 4 * ((kc + 3) / 4 + 1);
}

/* Packs columns [0, cols) (cols <= nr) of the kc x cols block at b (byte strides rs, cs). */
static inline void mc_igemm_pack_b_scalar_(const int8_t *b, int64_t rs, int64_t cs, int64_t cols,
                                           int64_t kc, int nr, void *dst)
{
    int8_t *d = (int8_t *)dst;
    const int64_t kq = (kc + 3) / 4;
    for (int64_t q = 0; q < kq; ++q)
        for (int l = 0; l < nr; ++l)
            for (int t = 0; t < 4; ++t) {
                const int64_t k = 4 * q + t;
                d[(q * nr + l) * 4 + t] = l < cols && k < kc ? b[k * rs + l * cs] : 0;
            }
    int32_t *sums = (int32_t *)(d + kq * nr * 4);
    for (int l = 0; l < nr; ++l) {
        int64_t s = 0;
        for (int64_t k = 0; l < cols && k < kc; ++k)
            s += b[k * rs + l * cs];
        sums[l] = (int32_t)(-128 * s);     /* |s| <= 128 * MAX_K: fits */
    }
}

/* Packs `rows` (<= mr) rows of A in the element format `elem` (1: int8, 2: int16, -1: uint8
 * a + 128), zero (or 128) padded. */
static inline void mc_igemm_pack_a_scalar_(const int8_t *a, int64_t rs, int64_t cs, int64_t rows,
                                           int64_t kc, int mr, int elem, void *dst)
{
    const int64_t kq = (kc + 3) / 4;
    for (int64_t q = 0; q < kq; ++q)
        for (int r = 0; r < mr; ++r)
            for (int t = 0; t < 4; ++t) {
                const int64_t k = 4 * q + t, at = (q * mr + r) * 4 + t;
                const int v = r < rows && k < kc ? a[r * rs + k * cs] : 0;
                if (elem == 2)
                    ((int16_t *)dst)[at] = (int16_t)v;
                else if (elem == 1)
                    ((int8_t *)dst)[at] = (int8_t)v;
                else
                    ((uint8_t *)dst)[at] = (uint8_t)(v + 128);
            }
}

/* The exact dot product of k int8 pairs (a stride as, b stride bs, in bytes). */
static inline int32_t mc_igemm_dot_scalar_(const int8_t *a, int64_t as, const int8_t *b,
                                           int64_t bs, int64_t k)
{
    int64_t s = 0;
    for (int64_t t = 0; t < k; ++t)
        s += (int64_t)a[t * as] * b[t * bs];
    return (int32_t)s;
}

/* s - zero * sum in wrapping int32 (exact when the true value fits, mc_igemm_kernels.h) */
static inline int32_t mc_igemm_zp_(int32_t s, int32_t zero, int32_t sum)
{
    return (int32_t)((uint32_t)s - (uint32_t)zero * (uint32_t)sum);
}

/* float32(s) / (b_scale * a_scale) (+ bias): each operation rounded once to float32. */
static inline float mc_igemm_value_(int32_t s, float a_scale, float b_scale, const float *bias)
{
    float v = (float)s;
    const float d = b_scale * a_scale;
    v = v / d;
    if (bias != NULL)
        v = v + *bias;
    return v;
}

/* One row of Keras's abs-max quantization as torch computes it in the row's dtype (each
 * operation in float32, rounded to the dtype):
 *     t = max|x| + eps        eps = 1e-7 converted to the dtype first (as torch converts the
 *                             Python scalar), t rounded to the dtype
 *     s = 127 / t             one division, rounded to the dtype
 *     q = clip(round_half_even(x * s), -127, 127)     x * s rounded to the dtype first
 * A NaN in the row makes max|x| NaN, so s and every x * s are NaN; an infinity makes s zero and
 * its own x * s NaN; float16's s overflows to inf for max|x| < 0.00194 (a zero times it is NaN).
 * A NaN x * s becomes 0, as torch's conversion to int8 gives on x86-64 (measured, 2.13 CPU). */
static inline void mc_igemm_quant_row_scalar_(const char *x, int type, int64_t k, int64_t xs,
                                              int8_t *q, int64_t qs, char *scale)
{
    float amax = 0.0f;
    int nan = 0;
    for (int64_t t = 0; t < k; ++t) {
        const float a = fabsf(mc_igemm_load_(x + t * xs, type));
        if (a != a)
            nan = 1;
        else if (a > amax)
            amax = a;
    }
    const float eps = mc_igemm_round_(1e-7f, type);
    const float tt = mc_igemm_round_(nan ? NAN : amax + eps, type);
    const float s = mc_igemm_round_(127.0f / tt, type);
    for (int64_t t = 0; t < k; ++t) {
        const float y = mc_igemm_round_(mc_igemm_load_(x + t * xs, type) * s, type);
        int v;
        if (y != y)
            v = 0;
        else if (y >= 127.0f)
            v = 127;
        else if (y <= -127.0f)
            v = -127;
        else
            v = (int)nearbyintf(y);         /* to nearest even: the engine's rounding mode */
        q[t * qs] = (int8_t)v;
    }
    mc_igemm_store_(scale, s, type);
}

/* The scale and zero point of a row whose smallest and largest values are lo <= 0 <= hi
 * (float32, each operation rounded once):
 *     s = 255 / ((hi - lo) + 1e-7)
 *     z = round_half_even(-lo * s) - 128            in [-128, 127]
 * -lo <= hi - lo, so -lo * s is at most 255 and a rounding. */
static inline void mc_igemm_zp_params_(float lo, float hi, float *s, int32_t *z)
{
    *s = 255.0f / ((hi - lo) + 1e-7f);
    float zf = nearbyintf(-lo * *s);
    zf = zf < 0.0f ? 0.0f : zf > 255.0f ? 255.0f : zf;
    *z = (int32_t)zf - 128;
}

/* The code of x at scale s and zero point z: clip(round_half_even(x * s) + z, -128, 127), x * s
 * rounded once (the sum is of small integers: exact). */
static inline int8_t mc_igemm_zp_code_(float x, float s, int32_t z)
{
    float r = nearbyintf(x * s) + (float)z;
    r = r < -128.0f ? -128.0f : r > 127.0f ? 127.0f : r;
    return (int8_t)(int)r;
}

/* One row of min-max quantization with a zero point, in float32 whatever the row's type:
 * lo = min(0, min x), hi = max(0, max x), s and z as mc_igemm_zp_params_, each code
 * mc_igemm_zp_code_; then x ~ (q - z) / s, and 0 is exactly z.  A row with a NaN or an
 * infinity gets s = NaN, z = 0 and codes 0 (its products are NaN). */
static inline void mc_igemm_quant_row_zp_scalar_(const char *x, int type, int64_t k, int64_t xs,
                                                 int8_t *q, int64_t qs, float *scale,
                                                 int32_t *zero)
{
    float lo = 0.0f, hi = 0.0f;
    int bad = 0;
    for (int64_t t = 0; t < k; ++t) {
        const float v = mc_igemm_load_(x + t * xs, type);
        if (!(fabsf(v) <= FLT_MAX))
            bad = 1;
        else if (v < lo)
            lo = v;
        else if (v > hi)
            hi = v;
    }
    if (bad) {
        for (int64_t t = 0; t < k; ++t)
            q[t * qs] = 0;
        *scale = NAN;
        *zero = 0;
        return;
    }
    float s;
    int32_t z;
    mc_igemm_zp_params_(lo, hi, &s, &z);
    for (int64_t t = 0; t < k; ++t)
        q[t * qs] = mc_igemm_zp_code_(mc_igemm_load_(x + t * xs, type), s, z);
    *scale = s;
    *zero = z;
}

#endif
