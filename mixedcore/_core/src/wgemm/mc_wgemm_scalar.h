/* The weight-only quantized GEMM in plain C: the specification every level is tested against
 * (mc_wgemm.h, design a), and the packed format's accessors the generic kernels use.
 *
 * Design:
 *   a. Header-only static inline functions.  fmaf() is the one rounding of a multiply-add at
 *      every level (the instruction where the level has it, the correctly rounded library
 *      function at the generic level), so every level gives these bits.
 *   b. mc_wgemm_ref_scalar_ reads the weights in Keras's storage layout (int4: two values per
 *      byte along the last axis, column 2c in the low nibble), not the packed panels: it is
 *      the reference the packing and the kernels are checked against.
 */
#ifndef MC_WGEMM_SCALAR_H_
#define MC_WGEMM_SCALAR_H_

#include <math.h>
#include <stdint.h>
#include "mc_wgemm_kernels.h"

/* q[r, j] of a Keras kernel: int8 (k, n), or int4 packed (k, ceil(n / 2)); rows `ld` bytes
 * apart. */
static inline int mc_wgemm_q_keras_(const int8_t *kernel, int bits, int64_t ld, int64_t r,
                                    int64_t j)
{
    if (bits == 8)
        return kernel[r * ld + j];
    const unsigned byte = (uint8_t)kernel[r * ld + j / 2];
    const int v = (int)((j & 1) ? (byte >> 4) & 0xFu : byte & 0xFu);
    return (v ^ 8) - 8;
}

/* The value of element (i, j) before the bias and activation, from row i of a (k float32
 * values, contiguous) and the Keras arrays: per channel (block <= 0) the float32 sum of
 * a[r] * q[r, j] over r in order, one fmaf per row, divided by scale[j]; grouped, the same sum
 * over each group's rows of a[r] * (q[r, j] - zero[g, j]), then t = fmaf(s_g, scale[g, j], t)
 * over the groups in order (t from +0). */
static inline float mc_wgemm_ref_scalar_(const float *a, const int8_t *kernel, int bits,
                                         int64_t ld, int64_t k, int64_t n, const float *scale,
                                         const int8_t *zero, int64_t block, int64_t j)
{
    if (block <= 0) {
        float s = 0.0f;
        for (int64_t r = 0; r < k; ++r)
            s = fmaf(a[r], (float)mc_wgemm_q_keras_(kernel, bits, ld, r, j), s);
        return s / scale[j];
    }
    float t = 0.0f;
    for (int64_t g = 0, r0 = 0; r0 < k; ++g, r0 += block) {
        const int64_t r1 = r0 + block < k ? r0 + block : k;
        const int z = zero != NULL ? zero[g * n + j] : 0;
        float s = 0.0f;
        for (int64_t r = r0; r < r1; ++r)
            s = fmaf(a[r], (float)(mc_wgemm_q_keras_(kernel, bits, ld, r, j) - z), s);
        t = fmaf(s, scale[g * n + j], t);
    }
    return t;
}

/* --- the packed format (mc_wgemm.h, design b) ----------------------------------------------- */

/* Bit position of padded row R's code in its column's 32-bit word (int4): in each block of 8
 * rows, pair p's odd row at 4p and its even row at 16 + 4p, so that a 16-bit shift by 4p puts
 * the pair's two codes in the low bits of the word's two halves, odd row in the low half (the
 * order VDPBF16PS adds a pair in, design e). */
static inline int mc_wgemm_shift_(int64_t R)
{
    const int pos = (int)(R % MC_WGEMM_KB), pair = pos / 2;
    return (pos & 1) ? 4 * pair : 16 + 4 * pair;
}

/* The stored code of padded row R, column c (< 16) of panel p. */
static inline int mc_wgemm_code_(const mc_wpacked *w, int64_t p, int64_t R, int c)
{
    const uint8_t *base = w->q + p * w->pbytes;
    if (w->bits == 8)
        return (int8_t)base[R * MC_WGEMM_NW + c];
    uint32_t word;
    const uint8_t *wp = base + (R / MC_WGEMM_KB) * 4 * MC_WGEMM_NW + 4 * c;
    word = (uint32_t)wp[0] | (uint32_t)wp[1] << 8 | (uint32_t)wp[2] << 16 | (uint32_t)wp[3] << 24;
    return (int)((word >> mc_wgemm_shift_(R)) & 0xFu);
}

/* The weight of padded row R (in group g), column c of panel p: an exact small integer. */
static inline float mc_wgemm_weight_(const mc_wpacked *w, int64_t g, int64_t p, int64_t R, int c)
{
    return (float)mc_wgemm_code_(w, p, R, c) - w->off[g * w->panels * MC_WGEMM_NW +
                                                      p * MC_WGEMM_NW + c];
}

#endif
