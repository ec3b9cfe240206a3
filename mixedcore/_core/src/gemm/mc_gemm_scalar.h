/* Scalar pieces of the GEMM shared by the driver and the level files: element loads and the
 * scalar packs (the specification of the vector ones).
 *
 * Design:
 *   a. Header-only static inline functions, so that a level file can fall back to them for
 *      layouts its vector pack does not take without calling into the driver.
 *   b. A bfloat16 is subnormal when its exponent field is zero and its fraction is not:
 *      (h & 0x7FFF) - 1 < 0x7F as unsigned 16-bit arithmetic (zero wraps to 0xFFFF).
 *      VDPBF16PS reads such inputs as zero, so the pairs packs report them and the driver
 *      computes the product on float32 panels instead.
 */
#ifndef MC_GEMM_SCALAR_H_
#define MC_GEMM_SCALAR_H_

#include <stdint.h>
#include <string.h>
#include "mc_convert_scalar.h"

static inline float mc_gemm_f32_from_bits_(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t mc_gemm_bits_from_f32_(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float mc_gemm_load_elem_(const char *p, int type)
{
    if (type == MC_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return mc_gemm_f32_from_bits_(type == MC_F16 ? mc_f16_to_f32_bits(h) : mc_bf16_to_f32_bits(h));
}

static inline int mc_bf16_subnormal_bits_(uint16_t h)
{
    return (uint16_t)((h & 0x7FFFu) - 1u) < 0x7Fu;
}

/* float32 panel: lane l of step k at dst[k * w + l]; lanes past `lanes` are zero. */
static inline int mc_gemm_pack_scalar_(const char *src, int type, int64_t ls, int64_t ks,
                                       int64_t lanes, int64_t kc, int w, void *dst)
{
    float *d = (float *)dst;
    for (int64_t k = 0; k < kc; ++k) {
        const char *s = src + k * ks;
        int64_t l = 0;
        for (; l < lanes; ++l)
            d[l] = mc_gemm_load_elem_(s + l * ls, type);
        for (; l < w; ++l)
            d[l] = 0.0f;
        d += w;
    }
    return 0;
}

/* bfloat16 only: word l of pair p holds element 2p in its low half and 2p + 1 in its high half
 * (the layout VDPBF16PS multiplies pairwise); the element past an odd kc is zero.  Returns 1
 * when an element is subnormal (design b). */
static inline int mc_gemm_pack_pairs_scalar_(const char *src, int type, int64_t ls, int64_t ks,
                                             int64_t lanes, int64_t kc, int w, void *dst)
{
    uint32_t *d = (uint32_t *)dst;
    int sub = 0;
    (void)type;
    for (int64_t k = 0; k < kc; k += 2) {
        const char *s = src + k * ks;
        int64_t l = 0;
        for (; l < lanes; ++l) {
            uint16_t lo, hi = 0;
            memcpy(&lo, s + l * ls, 2);
            if (k + 1 < kc)
                memcpy(&hi, s + ks + l * ls, 2);
            sub |= mc_bf16_subnormal_bits_(lo) | mc_bf16_subnormal_bits_(hi);
            d[l] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
        for (; l < w; ++l)
            d[l] = 0;
        d += w;
    }
    return sub;
}

#endif
