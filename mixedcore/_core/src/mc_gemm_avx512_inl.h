/* In-register helpers shared by the AVX-512 GEMM units (include only where AVX-512F is enabled).
 *
 * Design:
 *   a. Header-only static inline functions, so each ISA unit compiles them with its own flags.
 */
#ifndef MC_GEMM_AVX512_INL_H_
#define MC_GEMM_AVX512_INL_H_

#include <immintrin.h>

/* r[i] = row i (16 values along k) -> r[j] = column j (16 rows).  Three rounds: 2 x 2 blocks
 * of elements (unpack), of pairs (shuffle_ps), then of 128-bit lanes (shuffle_f32x4 twice). */
static inline __attribute__((always_inline)) void mc_transpose16_(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4q + e] holds, in 128-bit lane L, column 4L + e of rows 4q .. 4q + 3 */
    for (int q = 0; q < 4; ++q) {
        u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0x44);
        u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q + 0], t[4 * q + 2], 0xEE);
        u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
        u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
    }
    for (int e = 0; e < 4; ++e) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
        r[e] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[8 + e] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[4 + e] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + e] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

#endif
