/* The scalar twin of the layer-normalization kernel (mc_norm.h): the specification every level
 * is tested against, bit for bit.
 *
 * Design:
 *   a. Conversions are the bit-exact ones of mc_convert_scalar.h: 16-bit inputs to float32
 *      exactly, float64 results to the output type rounded once (round to nearest even).
 *   b. Sums follow mc_norm.h design b: term i into acc[i % 16], then mc_norm_tree_.  The build's
 *      -ffp-contract=off keeps the compiler from fusing a product with a sum.
 *   c. Static inline, standard headers only: each unit compiles it with its own flags.
 *   d. A 16-bit output takes mc_norm_row_ss_ (mc_norm.h design f): float32 throughout, fmaf
 *      where the vector code has an FMA.
 */
#ifndef MC_NORM_SCALAR_H_
#define MC_NORM_SCALAR_H_

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_norm_kernels.h"

/* The sum of 16 partial sums: lanes j and j + 8 first, then the eight as
 * ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)). */
static inline double mc_norm_tree_(const double *a)
{
    double b[8];
    for (int j = 0; j < 8; ++j)
        b[j] = a[j] + a[j + 8];
    return ((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7]));
}

static inline float mc_norm_f32_(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Element i of a row of type `type`, as float32 (exact). */
static inline float mc_norm_load_(const void *p, int type, int64_t i)
{
    if (type == MC_F32)
        return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return mc_norm_f32_(type == MC_BF16 ? mc_bf16_to_f32_bits(h) : mc_f16_to_f32_bits(h));
}

/* s[i] of mc_norm.h design a. */
static inline float mc_norm_elem_(const void *x, int xt, const void *r, int rt, int64_t i)
{
    const float v = mc_norm_load_(x, xt, i);
    return r != NULL ? v + mc_norm_load_(r, rt, i) : v;
}

/* Writes t to element i of a row of type `type`, rounded once; NaN as the positive quiet NaN. */
static inline void mc_norm_store_(void *p, int type, int64_t i, double t)
{
    if (type == MC_F32) {
        float f = (float)t;
        if (t != t)
            f = mc_norm_f32_(0x7FC00000u);
        ((float *)p)[i] = f;
        return;
    }
    uint16_t h;
    if (t != t) {
        h = type == MC_BF16 ? 0x7FC0u : 0x7E00u;
    } else {
        uint64_t u;
        memcpy(&u, &t, 8);
        h = type == MC_BF16 ? mc_f64_to_bf16_bits(u) : mc_f64_to_f16_bits(u);
    }
    ((uint16_t *)p)[i] = h;
}

static inline void mc_norm_row_sd_(const mc_norm_job *job, int64_t row)
{
    const int64_t n = job->n;
    const int xs = job->x_type == MC_F32 ? 4 : 2, rs = job->res_type == MC_F32 ? 4 : 2;
    const int ys = job->y_type == MC_F32 ? 4 : 2;
    const void *x = (const char *)job->x + row * n * xs;
    const void *r = job->res != NULL ? (const char *)job->res + row * n * rs : NULL;
    void *y = (char *)job->y + row * n * ys;
    double acc[16];
    for (int j = 0; j < 16; ++j)
        acc[j] = 0.0;
    for (int64_t i = 0; i < n; ++i)
        acc[i & 15] += (double)mc_norm_elem_(x, job->x_type, r, job->res_type, i);
    const double mean = mc_norm_tree_(acc) / (double)n;
    for (int j = 0; j < 16; ++j)
        acc[j] = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = (double)mc_norm_elem_(x, job->x_type, r, job->res_type, i) - mean;
        acc[i & 15] += d * d;
    }
    const double var = mc_norm_tree_(acc) / (double)n;
    const double rstd = 1.0 / sqrt(var + job->eps);
    for (int64_t i = 0; i < n; ++i) {
        double t = ((double)mc_norm_elem_(x, job->x_type, r, job->res_type, i) - mean) * rstd;
        if (job->gamma != NULL)
            t = t * (double)job->gamma[i];
        if (job->beta != NULL)
            t = t + (double)job->beta[i];
        mc_norm_store_(y, job->y_type, i, t);
    }
    if (job->mean != NULL)
        job->mean[row] = (float)mean;
    if (job->rstd != NULL)
        job->rstd[row] = (float)rstd;
}

/* The sum of 16 float32 partial sums as a tree of halves: lanes l and l + 8, then l and l + 4,
 * l + 2, l + 1 (mc_norm.h design f). */
static inline float mc_norm_tree_ss_(float *a)
{
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; ++l)
            a[l] = a[l] + a[l + h];
    return a[0];
}

/* Writes the float32 t to element i of a 16-bit row, rounded to nearest even; NaN as the
 * positive quiet NaN. */
static inline void mc_norm_store16_(void *p, int type, int64_t i, float t)
{
    uint32_t u;
    memcpy(&u, &t, 4);
    uint16_t h;
    if (t != t)
        h = type == MC_BF16 ? 0x7FC0u : 0x7E00u;
    else
        h = type == MC_BF16 ? mc_f32_to_bf16_bits(u) : mc_f32_to_f16_bits(u);
    ((uint16_t *)p)[i] = h;
}

/* A row with a 16-bit output, in float32 (mc_norm.h design f). */
static inline void mc_norm_row_ss_(const mc_norm_job *job, int64_t row)
{
    const int64_t n = job->n;
    const int xs = job->x_type == MC_F32 ? 4 : 2, rs = job->res_type == MC_F32 ? 4 : 2;
    const void *x = (const char *)job->x + row * n * xs;
    const void *r = job->res != NULL ? (const char *)job->res + row * n * rs : NULL;
    void *y = (char *)job->y + row * n * 2;
    float acc[16];
    for (int j = 0; j < 16; ++j)
        acc[j] = 0.0f;
    for (int64_t i = 0; i < n; ++i)
        acc[i & 15] += mc_norm_elem_(x, job->x_type, r, job->res_type, i);
    const float mean = mc_norm_tree_ss_(acc) / (float)n;
    for (int j = 0; j < 16; ++j)
        acc[j] = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        const float d = mc_norm_elem_(x, job->x_type, r, job->res_type, i) - mean;
        acc[i & 15] = fmaf(d, d, acc[i & 15]);
    }
    const float var = mc_norm_tree_ss_(acc) / (float)n;
    const float rstd = 1.0f / sqrtf(var + (float)job->eps);
    for (int64_t i = 0; i < n; ++i) {
        float t = (mc_norm_elem_(x, job->x_type, r, job->res_type, i) - mean) * rstd;
        if (job->gamma != NULL && job->beta != NULL)
            t = fmaf(t, job->gamma[i], job->beta[i]);
        else if (job->gamma != NULL)
            t = t * job->gamma[i];
        else if (job->beta != NULL)
            t = t + job->beta[i];
        mc_norm_store16_(y, job->y_type, i, t);
    }
    if (job->mean != NULL)
        job->mean[row] = mean;
    if (job->rstd != NULL)
        job->rstd[row] = rstd;
}

/* A row: float64 statistics for a float32 output, float32 for a 16-bit one. */
static inline void mc_norm_row_(const mc_norm_job *job, int64_t row)
{
    if (job->y_type == MC_F32)
        mc_norm_row_sd_(job, row);
    else
        mc_norm_row_ss_(job, row);
}

#define MC_NORM_SCALAR_KERNELS_(isa)                                                          \
    static void mc_layer_norm_##isa(const mc_norm_job *job, int64_t r0, int64_t r1)           \
    {                                                                                         \
        for (int64_t row = r0; row < r1; ++row)                                               \
            mc_norm_row_(job, row);                                                           \
    }

#endif
