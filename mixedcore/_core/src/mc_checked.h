/* Checked arithmetic of sizes: element counts and byte counts that come from the caller's shapes.
 *
 * Design:
 *   a. A shape can claim any size: a broadcast or stride-0 view of one element has whatever
 *      dimensions its strides allow, and products of several operands' dimensions (M x N of a
 *      product, T x S of attention, the taps of a window) are bounded by no array.  Every count
 *      the core allocates or indexes by is therefore computed here, never with a bare `*` or
 *      `+` on caller sizes.
 *   b. A failed count is -1, and -1 propagates: mc_size_mul(-1, x) and mc_size_add(-1, x) are
 *      -1, so a driver chains the arithmetic of one size and tests the result once (< 0), then
 *      turns it into its family's "too big" status (MC_<FAMILY>_TOOBIG), which the wrapper
 *      raises as a ValueError naming the function.  A negative operand fails too.
 *   c. mc_size_bytes() also refuses counts above MC_BYTES_MAX, the user address space of an
 *      x86-64 (or 48-bit AArch64) Linux process: no allocation above it can succeed, so such a
 *      request is an error in the arguments, not a shortage of memory.
 *   d. mc_work_mul() saturates instead of failing: it sizes work (thread thresholds, cost
 *      estimates), where "more than INT64_MAX" and INT64_MAX mean the same.
 *   e. Header-only, standard headers only: every folder of src/ includes it (it lives in src/
 *      itself, like mc_types.h), and tests/c/ tests it directly.
 */
#ifndef MC_CHECKED_H_
#define MC_CHECKED_H_

#include <stdint.h>

/* The largest byte count the core asks for (design c): 2**47. */
#define MC_BYTES_MAX ((int64_t)1 << 47)

/* a * b, or -1 when an operand is negative or the product does not fit in int64. */
static inline int64_t mc_size_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        return -1;
    return r;
}

/* a + b, or -1 when an operand is negative or the sum does not fit in int64. */
static inline int64_t mc_size_add(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
        return -1;
    return r;
}

/* a rounded up to a multiple of m (m > 0), or -1 (a negative, or the result too large). */
static inline int64_t mc_size_round_up(int64_t a, int64_t m)
{
    if (a < 0 || m <= 0)
        return -1;
    const int64_t q = a / m + (a % m != 0);
    return mc_size_mul(q, m);
}

/* ceil(a / m) for a >= 0, m > 0 (never overflows), or -1. */
static inline int64_t mc_size_ceil_div(int64_t a, int64_t m)
{
    if (a < 0 || m <= 0)
        return -1;
    return a / m + (a % m != 0);
}

/* count * size as a byte count no larger than MC_BYTES_MAX, or -1 (design c). */
static inline int64_t mc_size_bytes(int64_t count, int64_t size)
{
    const int64_t r = mc_size_mul(count, size);
    return r > MC_BYTES_MAX ? -1 : r;
}

/* bytes rounded up to a multiple of 64, or -1. */
static inline int64_t mc_size_round64(int64_t bytes)
{
    return mc_size_round_up(bytes, 64);
}

/* a * b for sizing work: INT64_MAX when the product overflows; 0 for a negative operand. */
static inline int64_t mc_work_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a <= 0 || b <= 0)
        return 0;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

#endif
