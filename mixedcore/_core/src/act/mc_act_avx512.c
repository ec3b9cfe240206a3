/* AVX-512 (F/DQ + FMA) activation kernels: 16 float32 per step through mc_act_avx512_inl.h.
 *
 * Design:
 *   a. Each element's result is that of the scalar twin (mc_act_scalar.h), bit for bit; the
 *      kernels only add the loop: full vectors of 16, then one masked vector for the remaining
 *      n % 16 elements (masked loads and stores never touch memory outside the arrays; the
 *      zeros in the unused lanes are computed and dropped).
 *   b. The activation is chosen once per call, outside the loop, so each loop body is one
 *      function inlined (MC_ACT_LOOP_).
 *   c. MC_ACT_NONE copies (memcpy): the identity and dy, bit for bit.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "mc_act_kernels.h"
#include "mc_act_avx512_inl.h"
#include "mc_simd_avx512.h"

#define MC_ACT_FORWARD_LOOP_(ACT)                                                             \
    do {                                                                                      \
        int64_t i = 0;                                                                        \
        for (; i + 16 <= n; i += 16)                                                          \
            _mm512_storeu_ps(y + i, mc_act_ps_(ACT, _mm512_loadu_ps(x + i)));                 \
        if (i < n) {                                                                          \
            const __mmask16 m = mc_mask16_avx512(n - i);                                     \
            _mm512_mask_storeu_ps(y + i, m, mc_act_ps_(ACT, _mm512_maskz_loadu_ps(m, x + i))); \
        }                                                                                     \
    } while (0)

#define MC_ACT_BACKWARD_LOOP_(ACT)                                                            \
    do {                                                                                      \
        int64_t i = 0;                                                                        \
        for (; i + 16 <= n; i += 16)                                                          \
            _mm512_storeu_ps(dx + i, mc_act_grad_ps_(ACT, _mm512_loadu_ps(dy + i),            \
                                                     _mm512_loadu_ps(x + i)));                \
        if (i < n) {                                                                          \
            const __mmask16 m = mc_mask16_avx512(n - i);                                     \
            _mm512_mask_storeu_ps(dx + i, m,                                                  \
                                  mc_act_grad_ps_(ACT, _mm512_maskz_loadu_ps(m, dy + i),      \
                                                  _mm512_maskz_loadu_ps(m, x + i)));          \
        }                                                                                     \
    } while (0)

static void mc_act_forward_f32_avx512(int act, const float *x, float *y, int64_t n)
{
    switch (act) {
    case MC_ACT_RELU: MC_ACT_FORWARD_LOOP_(MC_ACT_RELU); break;
    case MC_ACT_GELU: MC_ACT_FORWARD_LOOP_(MC_ACT_GELU); break;
    case MC_ACT_GELU_16: MC_ACT_FORWARD_LOOP_(MC_ACT_GELU_16); break;
    case MC_ACT_SIGMOID: MC_ACT_FORWARD_LOOP_(MC_ACT_SIGMOID); break;
    case MC_ACT_TANH: MC_ACT_FORWARD_LOOP_(MC_ACT_TANH); break;
    case MC_ACT_RELU6: MC_ACT_FORWARD_LOOP_(MC_ACT_RELU6); break;
    case MC_ACT_SILU: MC_ACT_FORWARD_LOOP_(MC_ACT_SILU); break;
    case MC_ACT_HARD_SIGMOID: MC_ACT_FORWARD_LOOP_(MC_ACT_HARD_SIGMOID); break;
    case MC_ACT_HARD_SILU: MC_ACT_FORWARD_LOOP_(MC_ACT_HARD_SILU); break;
    default:
        if (n > 0)
            memcpy(y, x, (size_t)n * 4);
        break;
    }
}

static void mc_act_backward_f32_avx512(int act, const float *dy, const float *x, float *dx, int64_t n)
{
    switch (act) {
    case MC_ACT_RELU: MC_ACT_BACKWARD_LOOP_(MC_ACT_RELU); break;
    case MC_ACT_GELU: MC_ACT_BACKWARD_LOOP_(MC_ACT_GELU); break;
    case MC_ACT_SIGMOID: MC_ACT_BACKWARD_LOOP_(MC_ACT_SIGMOID); break;
    case MC_ACT_TANH: MC_ACT_BACKWARD_LOOP_(MC_ACT_TANH); break;
    case MC_ACT_RELU6: MC_ACT_BACKWARD_LOOP_(MC_ACT_RELU6); break;
    case MC_ACT_SILU: MC_ACT_BACKWARD_LOOP_(MC_ACT_SILU); break;
    case MC_ACT_HARD_SIGMOID: MC_ACT_BACKWARD_LOOP_(MC_ACT_HARD_SIGMOID); break;
    case MC_ACT_HARD_SILU: MC_ACT_BACKWARD_LOOP_(MC_ACT_HARD_SILU); break;
    default:
        if (n > 0)
            memcpy(dx, dy, (size_t)n * 4);
        break;
    }
}

/* Softmax: mc_softmax_row_avx512_ or mc_softmax16_row_avx512_ (mc_act_avx512_inl.h), row by
 * row. */
static void mc_softmax_f32_avx512(const float *x, float *y, int64_t rows, int64_t n, int mode)
{
    for (int64_t r = 0; r < rows; ++r) {
        if (mode == MC_SOFTMAX_16)
            mc_softmax16_row_avx512_(x + r * n, y + r * n, n);
        else
            mc_softmax_row_avx512_(x + r * n, y + r * n, n, mode == MC_SOFTMAX_LOG);
    }
}

const mc_act_table mc_act_table_avx512 = MC_ACT_TABLE_(avx512);
