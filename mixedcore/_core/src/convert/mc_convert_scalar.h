/* Scalar reference conversions between float16, bfloat16, float32 and float64.
 *
 * Design:
 *   a. These functions are the specification every SIMD conversion is tested against and the
 *      path taken for strided data, vector tails and the rare lanes (NaN) a vector path hands
 *      back.  They work on bit patterns with integer arithmetic only, so they raise no
 *      floating-point exception flags and do not depend on the rounding mode.
 *   b. The reference semantics are numpy's for float16 and ml_dtypes' for bfloat16, bit for bit,
 *      NaN payloads included (docs/conversions.md lists every NaN rule):
 *        f32 -> f16   round to nearest even; NaN keeps the top 10 payload bits, not quieted,
 *                     a payload that would vanish becomes 1 (stays a NaN).
 *        f64 -> f16   the same, rounded once from the double.
 *        f16 -> f32/f64  exact; NaN payload shifted up, not quieted.
 *        f32 -> bf16  round to nearest even, subnormals rounded; NaN -> 0x7FC0 with its sign.
 *        f64 -> bf16  rounded once from the double (ml_dtypes rounds twice; see the docs).
 *        bf16 -> f32  exact (the bits shifted up 16).
 *        bf16 -> f64  exact for numbers; a NaN is quieted, as ml_dtypes' float->double does.
 *        bf16 -> f16  through the exact float32 value; NaN -> 0x7E00 with its sign.
 *        f16 -> bf16  through the exact float32 value; NaN -> 0x7FC0 with its sign.
 *        f32 <-> f64  IEEE conversion (float64 -> float32 rounds to nearest even; both quiet a
 *                     signalling NaN and keep the payload), as the hardware and numpy do.
 *   c. Header-only (static inline) so every ISA unit can call the twins for its tails.
 */
#ifndef MC_CONVERT_SCALAR_H_
#define MC_CONVERT_SCALAR_H_

#include <stdint.h>
#include <string.h>
#include "mc_types.h"             /* MC_F16, MC_BF16, MC_F32, MC_F64 */

/* Round-to-nearest-even of m / 2**shift for 0 < shift < 64.  The quotient is incremented when
 * the remainder is above half, or exactly half with an odd quotient. */
static inline uint64_t mc_rne_shift_(uint64_t m, int shift)
{
    const uint64_t q = m >> shift;
    const uint64_t rem = m & ((UINT64_C(1) << shift) - 1);
    const uint64_t half = UINT64_C(1) << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1)));
}

/* float32 bits -> float16 bits (numpy).
 * Normal results: subtracting (127 - 15) << 23 rebiases the exponent in place; adding
 * 0xFFF + lsb then truncating 13 bits is round-to-nearest-even (a tie carries only when the
 * kept lsb is 1), and a carry out of the mantissa correctly bumps the exponent.  Inputs at or
 * above 65520 (0x477FF000: the tie between 65504 and 2**16, which goes to the even 2**16) round to
 * infinity.  Below 2**-14 the result is subnormal: the significand with its implicit bit is
 * shifted to units of 2**-24 with one RNE step; at or below 2**-25 (a tie with 0) it is zero. */
static inline uint16_t mc_f32_to_f16_bits(uint32_t f)
{
    const uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    const uint32_t a = f & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) {
        if (a == 0x7F800000u)
            return sign | 0x7C00u;
        const uint16_t payload = (uint16_t)((a & 0x7FFFFFu) >> 13);
        return sign | 0x7C00u | (payload ? payload : 1u);
    }
    if (a >= 0x477FF000u)
        return sign | 0x7C00u;
    if (a >= 0x38800000u) {
        const uint32_t b = a - ((uint32_t)(127 - 15) << 23);
        return sign | (uint16_t)((b + 0xFFFu + ((b >> 13) & 1u)) >> 13);
    }
    if (a <= 0x33000000u)
        return sign;
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - (int)(a >> 23);          /* 14 .. 24 */
    return sign | (uint16_t)mc_rne_shift_(m, shift);
}

/* float64 bits -> float16 bits (numpy), one rounding: the float32 scheme with 64-bit fields.
 * 0x40EFFE0000000000 is 65520, 0x3F10000000000000 is 2**-14, 0x3E70000000000000 is 2**-24 and
 * 0x3E60000000000000 is 2**-25. */
static inline uint16_t mc_f64_to_f16_bits(uint64_t d)
{
    const uint16_t sign = (uint16_t)((d >> 48) & 0x8000u);
    const uint64_t a = d & UINT64_C(0x7FFFFFFFFFFFFFFF);
    if (a >= UINT64_C(0x7FF0000000000000)) {
        if (a == UINT64_C(0x7FF0000000000000))
            return sign | 0x7C00u;
        const uint16_t payload = (uint16_t)((a & UINT64_C(0xFFFFFFFFFFFFF)) >> 42);
        return sign | 0x7C00u | (payload ? payload : 1u);
    }
    if (a >= UINT64_C(0x40EFFE0000000000))
        return sign | 0x7C00u;
    if (a >= UINT64_C(0x3F10000000000000)) {
        const uint64_t b = a - ((uint64_t)(1023 - 15) << 52);
        return sign | (uint16_t)mc_rne_shift_(b, 42);
    }
    if (a <= UINT64_C(0x3E60000000000000))
        return sign;
    const uint64_t m = (a & UINT64_C(0xFFFFFFFFFFFFF)) | (UINT64_C(1) << 52);
    const int shift = 1050 - (int)(a >> 52);          /* 43 .. 53 */
    return sign | (uint16_t)mc_rne_shift_(m, shift + 1);
}

/* float16 bits -> float32 bits (numpy): exact.  A subnormal m * 2**-24 with its top set bit at
 * position p (0..9) becomes exponent field p + 103 and the bits below p as the mantissa. */
static inline uint32_t mc_f16_to_f32_bits(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F)
        return sign | 0x7F800000u | (m << 13);
    if (e != 0)
        return sign | ((e + 112) << 23) | (m << 13);
    if (m == 0)
        return sign;
    int p = 9;
    while (!(m >> p))
        --p;
    return sign | ((uint32_t)(p + 103) << 23) | ((m << (23 - p)) & 0x7FFFFFu);
}

/* float16 bits -> float64 bits (numpy): exact, NaN payload kept and not quieted. */
static inline uint64_t mc_f16_to_f64_bits(uint16_t h)
{
    const uint64_t sign = (uint64_t)(h & 0x8000u) << 48;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F)
        return sign | UINT64_C(0x7FF0000000000000) | ((uint64_t)m << 42);
    if (e != 0)
        return sign | ((uint64_t)(e + 1008) << 52) | ((uint64_t)m << 42);
    if (m == 0)
        return sign;
    int p = 9;
    while (!(m >> p))
        --p;
    return sign | ((uint64_t)(p + 999) << 52) | (((uint64_t)m << (52 - p)) & UINT64_C(0xFFFFFFFFFFFFF));
}

/* float32 bits -> bfloat16 bits (ml_dtypes).  Adding 0x7FFF + lsb and truncating 16 bits is
 * round-to-nearest-even on the raw pattern; it is exact for subnormals (same exponent field) and
 * carries the largest finite values into infinity exactly when RNE says so. */
static inline uint16_t mc_f32_to_bf16_bits(uint32_t f)
{
    if ((f & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)(((f >> 16) & 0x8000u) | 0x7FC0u);
    return (uint16_t)((f + 0x7FFFu + ((f >> 16) & 1u)) >> 16);
}

/* float64 bits -> bfloat16 bits, rounded once.  Normal range: rebias the exponent by
 * (1023 - 127) << 52 and round away 45 mantissa bits; a carry to 0x7F80 is infinity.  Below
 * 2**-126 the result is subnormal, in units of 2**-133: shift = 942 - exponent field. */
static inline uint16_t mc_f64_to_bf16_bits(uint64_t d)
{
    const uint16_t sign = (uint16_t)((d >> 48) & 0x8000u);
    const uint64_t a = d & UINT64_C(0x7FFFFFFFFFFFFFFF);
    if (a > UINT64_C(0x7FF0000000000000))
        return sign | 0x7FC0u;
    if (a == UINT64_C(0x7FF0000000000000))
        return sign | 0x7F80u;
    const int e = (int)(a >> 52);
    if (e >= 1023 - 126) {
        const uint64_t r = mc_rne_shift_(a - ((uint64_t)(1023 - 127) << 52), 45);
        return sign | (uint16_t)(r >= 0x7F80u ? 0x7F80u : r);
    }
    const int shift = 942 - e;
    if (shift >= 64 || a == 0)
        return sign;
    const uint64_t m = (a & UINT64_C(0xFFFFFFFFFFFFF)) | (e ? (UINT64_C(1) << 52) : 0);
    return sign | (uint16_t)mc_rne_shift_(m, e ? shift : shift - 1);
}

static inline uint32_t mc_bf16_to_f32_bits(uint16_t h) { return (uint32_t)h << 16; }

/* bfloat16 -> float64 (ml_dtypes goes through float, whose conversion to double quiets a
 * signalling NaN: bit 51 is set, the payload kept). */
static inline uint64_t mc_bf16_to_f64_bits(uint16_t h)
{
    const uint64_t sign = (uint64_t)(h & 0x8000u) << 48;
    const uint32_t e = (h >> 7) & 0xFFu, m = h & 0x7Fu;
    if (e == 0xFF)
        return sign | UINT64_C(0x7FF0000000000000) | ((uint64_t)m << 45) | (m ? UINT64_C(1) << 51 : 0);
    if (e != 0)
        return sign | ((uint64_t)(e + 896) << 52) | ((uint64_t)m << 45);
    if (m == 0)
        return sign;
    int p = 6;
    while (!(m >> p))
        --p;
    /* m * 2**-133 with top bit p: exponent p - 133 + 1023 */
    return sign | ((uint64_t)(p + 890) << 52) | (((uint64_t)m << (52 - p)) & UINT64_C(0xFFFFFFFFFFFFF));
}

static inline uint16_t mc_bf16_to_f16_bits(uint16_t h)
{
    if ((h & 0x7FFFu) > 0x7F80u)
        return (uint16_t)((h & 0x8000u) | 0x7E00u);
    return mc_f32_to_f16_bits(mc_bf16_to_f32_bits(h));
}

static inline uint16_t mc_f16_to_bf16_bits(uint16_t h)
{
    return mc_f32_to_bf16_bits(mc_f16_to_f32_bits(h));
}

/* float32 <-> float64: IEEE conversion.  The float64 -> float32 direction is done on bits too so
 * that it raises no flags: RNE of 29 mantissa bits in the normal range, a subnormal shift below
 * 2**-126, overflow to infinity at the tie above FLT_MAX; NaN quieted with the top payload kept. */
static inline uint64_t mc_f32_to_f64_bits(uint32_t f)
{
    const uint64_t sign = (uint64_t)(f & 0x80000000u) << 32;
    const uint32_t e = (f >> 23) & 0xFFu, m = f & 0x7FFFFFu;
    if (e == 0xFF)
        return sign | UINT64_C(0x7FF0000000000000) | ((uint64_t)m << 29) | (m ? UINT64_C(1) << 51 : 0);
    if (e != 0)
        return sign | ((uint64_t)(e + 896) << 52) | ((uint64_t)m << 29);
    if (m == 0)
        return sign;
    int p = 22;
    while (!(m >> p))
        --p;
    return sign | ((uint64_t)(p + 874) << 52) | (((uint64_t)m << (52 - p)) & UINT64_C(0xFFFFFFFFFFFFF));
}

static inline uint32_t mc_f64_to_f32_bits(uint64_t d)
{
    const uint32_t sign = (uint32_t)((d >> 32) & 0x80000000u);
    const uint64_t a = d & UINT64_C(0x7FFFFFFFFFFFFFFF);
    if (a > UINT64_C(0x7FF0000000000000))
        return sign | 0x7FC00000u | (uint32_t)((a & UINT64_C(0xFFFFFFFFFFFFF)) >> 29);
    if (a == UINT64_C(0x7FF0000000000000))
        return sign | 0x7F800000u;
    const int e = (int)(a >> 52);
    if (e >= 1023 - 126) {
        const uint64_t r = mc_rne_shift_(a - ((uint64_t)(1023 - 127) << 52), 29);
        return sign | (uint32_t)(r >= 0x7F800000u ? 0x7F800000u : r);
    }
    /* subnormal float32: units of 2**-149, shift = 1075 - 149 - e = 926 - e (+1 for e == 0) */
    const int shift = 926 - e;
    if (shift >= 64 || a == 0)
        return sign;
    const uint64_t m = (a & UINT64_C(0xFFFFFFFFFFFFF)) | (e ? (UINT64_C(1) << 52) : 0);
    return sign | (uint32_t)mc_rne_shift_(m, e ? shift : shift - 1);
}

#endif
