/* Scalar reference conversions between float16, bfloat16, float32, float64 and the two float8
 * formats float8_e4m3fn and float8_e5m2.
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
 *   d. float8 (ml_dtypes, bit for bit; docs/conversions.md):
 *        e4m3fn  1-4-3, bias 7, no infinities, NaN S.1111.111 only, largest 448.
 *        e5m2    1-5-2, bias 15, infinities and NaNs as in IEEE, largest 57344.
 *        to float8    from the float32 value: exact for float16 and bfloat16, rounded to
 *                     float32 first for float64 (ml_dtypes rounds twice; mixedcore follows it);
 *                     then round to nearest even, subnormals rounded.  e4m3fn: a result
 *                     above 448 (from 464 up, and infinity) is NaN; e5m2: overflow to infinity
 *                     from 61440 up.  A NaN becomes 0x7F (e4m3fn) or 0x7E (e5m2) with its sign.
 *        saturating   the value clipped to +-largest first (numpy.clip, then astype): finite
 *                     values and infinities become at most +-largest, a NaN stays a NaN.
 *        from float8  exact; a NaN becomes the target's quiet NaN with the sign kept (0x7FC00000
 *                     in float32, as ml_dtypes goes through float); infinities stay.
 *        float8 <-> float8  through the exact float32 value.
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

/* --- float8 ---------------------------------------------------------------------------------- */

/* |f| (float32 bits without the sign) below a float8 format's smallest normal, in units of its
 * smallest subnormal 2**-k, rounded to nearest even: the significand with its implicit bit is
 * m * 2**(e - 150), so the shift is 150 - k - e.  At 25 and above the value is at most a quarter
 * unit (zero); float32 subnormals are far below. */
static inline uint32_t mc_f32_to_f8_sub_(uint32_t a, int k)
{
    const int e = (int)(a >> 23);
    const int shift = 150 - k - e;
    if (shift >= 25)
        return 0;
    return (uint32_t)mc_rne_shift_((a & 0x7FFFFFu) | 0x800000u, shift);
}

/* float32 bits -> float8_e4m3fn bits.  From 2**-6 (0x3C800000) up: rebias the exponent by
 * (127 - 7) << 23 and round 20 bits away (adding 0x7FFFF + lsb, as for bfloat16).  The code
 * after 0x7E (448) is the NaN pattern 0x7F, so every result above 0x7E -- values from 464 up,
 * infinity, NaN -- is clamped to 0x7F: overflow is NaN in this format, as in ml_dtypes. */
static inline uint8_t mc_f32_to_e4m3_bits(uint32_t f)
{
    const uint8_t sign = (uint8_t)((f >> 24) & 0x80u);
    const uint32_t a = f & 0x7FFFFFFFu;
    if (a < 0x3C800000u)
        return sign | (uint8_t)mc_f32_to_f8_sub_(a, 9);
    const uint32_t b = a - (120u << 23);
    const uint32_t r = (b + 0x7FFFFu + ((b >> 20) & 1u)) >> 20;
    return sign | (uint8_t)(r < 0x7Fu ? r : 0x7Fu);
}

/* The same after clipping to [-448, 448]: numbers and infinities saturate at 0x7E. */
static inline uint8_t mc_f32_to_e4m3_sat_bits(uint32_t f)
{
    const uint8_t sign = (uint8_t)((f >> 24) & 0x80u);
    const uint32_t a = f & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return sign | 0x7Fu;
    const uint8_t r = mc_f32_to_e4m3_bits(a);
    return sign | (r < 0x7Eu ? r : 0x7Eu);
}

/* float32 bits -> float8_e5m2 bits.  From 2**-14 (0x38800000) up: rebias by (127 - 15) << 23
 * and round 21 bits away; results from 0x7C up (61440 and above, infinity) are infinity.  A NaN
 * becomes 0x7E with its sign. */
static inline uint8_t mc_f32_to_e5m2_bits(uint32_t f)
{
    const uint8_t sign = (uint8_t)((f >> 24) & 0x80u);
    const uint32_t a = f & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return sign | 0x7Eu;
    if (a < 0x38800000u)
        return sign | (uint8_t)mc_f32_to_f8_sub_(a, 16);
    const uint32_t b = a - (112u << 23);
    const uint32_t r = (b + 0xFFFFFu + ((b >> 21) & 1u)) >> 21;
    return sign | (uint8_t)(r < 0x7Cu ? r : 0x7Cu);
}

/* The same after clipping to [-57344, 57344]: numbers and infinities saturate at 0x7B. */
static inline uint8_t mc_f32_to_e5m2_sat_bits(uint32_t f)
{
    const uint8_t r = mc_f32_to_e5m2_bits(f);
    return (r & 0x7Fu) == 0x7Cu ? (uint8_t)(r - 1u) : r;
}

/* float8_e4m3fn bits -> bfloat16 bits: exact (bfloat16 has the wider exponent and mantissa).
 * Normal codes (exponent field >= 1): the magnitude shifted up 4 puts exponent and mantissa in
 * place, plus the rebias (127 - 7) << 7.  A subnormal m * 2**-9 (m = 1..7) with its top bit at
 * p is normalised: exponent p - 9 + 127.  0x7F is NaN: 0x7FC0 with the sign. */
static inline uint16_t mc_e4m3_to_bf16_bits(uint8_t v)
{
    const uint16_t sign = (uint16_t)((v & 0x80u) << 8);
    const uint32_t mag = v & 0x7Fu;
    if (mag == 0x7Fu)
        return sign | 0x7FC0u;
    if (mag >= 8)
        return sign | (uint16_t)((mag << 4) + (120u << 7));
    if (mag == 0)
        return sign;
    const int p = mag >= 4 ? 2 : mag >= 2 ? 1 : 0;
    return sign | (uint16_t)(((uint32_t)(p + 118) << 7) | ((mag << (7 - p)) & 0x7Fu));
}

/* float8_e5m2 bits -> bfloat16 bits: exact.  Normal codes: shifted up 5 plus the rebias
 * (127 - 15) << 7; subnormals m * 2**-16 (m = 1..3) normalised; 0x7C infinity; above it NaN,
 * 0x7FC0 with the sign (the payload is dropped, as ml_dtypes does). */
static inline uint16_t mc_e5m2_to_bf16_bits(uint8_t v)
{
    const uint16_t sign = (uint16_t)((v & 0x80u) << 8);
    const uint32_t mag = v & 0x7Fu;
    if (mag > 0x7Cu)
        return sign | 0x7FC0u;
    if (mag == 0x7Cu)
        return sign | 0x7F80u;
    if (mag >= 4)
        return sign | (uint16_t)((mag << 5) + (112u << 7));
    if (mag == 0)
        return sign;
    const int p = mag >= 2 ? 1 : 0;
    return sign | (uint16_t)(((uint32_t)(p + 111) << 7) | ((mag << (7 - p)) & 0x7Fu));
}

static inline uint32_t mc_e4m3_to_f32_bits(uint8_t v) { return (uint32_t)mc_e4m3_to_bf16_bits(v) << 16; }
static inline uint32_t mc_e5m2_to_f32_bits(uint8_t v) { return (uint32_t)mc_e5m2_to_bf16_bits(v) << 16; }

/* The other directions go through the float32 value (design d): from float8 the value is exact
 * in every type, and the float32 NaN 0x7FC00000 becomes each type's quiet NaN. */
#define MC_F8_VIA_F32_(name, stype, dtype, to_f32, from_f32)                          \
    static inline dtype mc_##name##_bits(stype v) { return from_f32(to_f32(v)); }

#define MC_F8_INTO_(f8)                                                               \
    MC_F8_VIA_F32_(f16_to_##f8, uint16_t, uint8_t, mc_f16_to_f32_bits, mc_f32_to_##f8##_bits) \
    MC_F8_VIA_F32_(bf16_to_##f8, uint16_t, uint8_t, mc_bf16_to_f32_bits, mc_f32_to_##f8##_bits) \
    MC_F8_VIA_F32_(f64_to_##f8, uint64_t, uint8_t, mc_f64_to_f32_bits, mc_f32_to_##f8##_bits)
MC_F8_INTO_(e4m3)
MC_F8_INTO_(e4m3_sat)
MC_F8_INTO_(e5m2)
MC_F8_INTO_(e5m2_sat)
#undef MC_F8_INTO_

#define MC_F8_FROM_(f8)                                                               \
    MC_F8_VIA_F32_(f8##_to_f16, uint8_t, uint16_t, mc_##f8##_to_f32_bits, mc_f32_to_f16_bits) \
    MC_F8_VIA_F32_(f8##_to_f64, uint8_t, uint64_t, mc_##f8##_to_f32_bits, mc_f32_to_f64_bits)
MC_F8_FROM_(e4m3)
MC_F8_FROM_(e5m2)
#undef MC_F8_FROM_

MC_F8_VIA_F32_(e4m3_to_e5m2, uint8_t, uint8_t, mc_e4m3_to_f32_bits, mc_f32_to_e5m2_bits)
MC_F8_VIA_F32_(e5m2_to_e4m3, uint8_t, uint8_t, mc_e5m2_to_f32_bits, mc_f32_to_e4m3_bits)
MC_F8_VIA_F32_(e5m2_to_e4m3_sat, uint8_t, uint8_t, mc_e5m2_to_f32_bits, mc_f32_to_e4m3_sat_bits)
MC_F8_VIA_F32_(e5m2_to_e5m2_sat, uint8_t, uint8_t, mc_e5m2_to_f32_bits, mc_f32_to_e5m2_sat_bits)
#undef MC_F8_VIA_F32_

/* float32 bits -> float8 bits of type `dst` (MC_E4M3 or MC_E5M2), saturating or not. */
static inline uint8_t mc_f32_to_f8_bits(int dst, int saturate, uint32_t f)
{
    if (dst == MC_E4M3)
        return saturate ? mc_f32_to_e4m3_sat_bits(f) : mc_f32_to_e4m3_bits(f);
    return saturate ? mc_f32_to_e5m2_sat_bits(f) : mc_f32_to_e5m2_bits(f);
}

/* One element of any conversion, the specification in one function: the bits v of type src
 * (low bits of the argument) converted to type dst, saturating when `saturate` is set and dst is
 * a float8 type.  The same type is a copy of the bits (saturating float8 excepted: numpy.clip
 * computes in float32).  The conversions among the four wider types are the functions above;
 * every direction with a float8 side goes through the float32 value as design d says. */
static inline uint64_t mc_cast_bits(int src, int dst, int saturate, uint64_t v)
{
    saturate = saturate && dst >= MC_NDTYPES;
    if (src == dst && !saturate)
        return v;
    if (src < MC_NDTYPES && dst < MC_NDTYPES) {
        switch (src * MC_NDTYPES + dst) {
        case MC_F16 * 4 + MC_BF16: return mc_f16_to_bf16_bits((uint16_t)v);
        case MC_F16 * 4 + MC_F32: return mc_f16_to_f32_bits((uint16_t)v);
        case MC_F16 * 4 + MC_F64: return mc_f16_to_f64_bits((uint16_t)v);
        case MC_BF16 * 4 + MC_F16: return mc_bf16_to_f16_bits((uint16_t)v);
        case MC_BF16 * 4 + MC_F32: return mc_bf16_to_f32_bits((uint16_t)v);
        case MC_BF16 * 4 + MC_F64: return mc_bf16_to_f64_bits((uint16_t)v);
        case MC_F32 * 4 + MC_F16: return mc_f32_to_f16_bits((uint32_t)v);
        case MC_F32 * 4 + MC_BF16: return mc_f32_to_bf16_bits((uint32_t)v);
        case MC_F32 * 4 + MC_F64: return mc_f32_to_f64_bits((uint32_t)v);
        case MC_F64 * 4 + MC_F16: return mc_f64_to_f16_bits(v);
        case MC_F64 * 4 + MC_BF16: return mc_f64_to_bf16_bits(v);
        default: return mc_f64_to_f32_bits(v);
        }
    }
    uint32_t f;
    switch (src) {
    case MC_F16: f = mc_f16_to_f32_bits((uint16_t)v); break;
    case MC_BF16: f = mc_bf16_to_f32_bits((uint16_t)v); break;
    case MC_F32: f = (uint32_t)v; break;
    case MC_F64: f = mc_f64_to_f32_bits(v); break;
    case MC_E4M3: f = mc_e4m3_to_f32_bits((uint8_t)v); break;
    default: f = mc_e5m2_to_f32_bits((uint8_t)v); break;
    }
    switch (dst) {
    case MC_F16: return mc_f32_to_f16_bits(f);
    case MC_BF16: return mc_f32_to_bf16_bits(f);
    case MC_F32: return f;
    case MC_F64: return mc_f32_to_f64_bits(f);
    default: return mc_f32_to_f8_bits(dst, saturate, f);
    }
}

#endif
