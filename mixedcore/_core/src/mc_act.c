/* Generic (portable C) activation kernels and the per-level selection.
 *
 * Design:
 *   a. The generic kernels are the scalar twins of mc_act_scalar.h in a loop: the specification
 *      the vector kernels are tested against.  Compilers may vectorise them for the platform's
 *      baseline, never beyond it; fma() is a library call there (correctly rounded, and the FMA
 *      instruction itself when the CPU has one).
 *   b. mc_act_kernel_forward() / _backward() pick, for a level, the kernel of the highest level
 *      <= it that was built: avx512 and avx512bf16 use the AVX-512 kernels, avx2 and generic the
 *      generic ones (an AVX2 version would only change the speed, never a bit).
 */
#include <string.h>
#include "mc_act.h"
#include "mc_act_scalar.h"
#include "mc_cpu.h"

/* One loop per activation (the code a constant, so each loop body is one function). */
#define MC_ACT_FORWARD_LOOP_(ACT)                                                             \
    for (int64_t i = 0; i < n; ++i)                                                           \
        y[i] = mc_act_scalar_f32_(ACT, x[i]);

#define MC_ACT_BACKWARD_LOOP_(ACT)                                                            \
    for (int64_t i = 0; i < n; ++i)                                                           \
        dx[i] = mc_act_grad_scalar_f32_(ACT, dy[i], x[i]);

void mc_act_forward_f32_generic(int act, const float *x, float *y, int64_t n)
{
    switch (act) {
    case MC_ACT_RELU: MC_ACT_FORWARD_LOOP_(MC_ACT_RELU) break;
    case MC_ACT_GELU: MC_ACT_FORWARD_LOOP_(MC_ACT_GELU) break;
    case MC_ACT_SIGMOID: MC_ACT_FORWARD_LOOP_(MC_ACT_SIGMOID) break;
    case MC_ACT_TANH: MC_ACT_FORWARD_LOOP_(MC_ACT_TANH) break;
    default:
        if (n > 0)
            memcpy(y, x, (size_t)n * 4);
        break;
    }
}

void mc_act_backward_f32_generic(int act, const float *dy, const float *x, float *dx, int64_t n)
{
    switch (act) {
    case MC_ACT_RELU: MC_ACT_BACKWARD_LOOP_(MC_ACT_RELU) break;
    case MC_ACT_GELU: MC_ACT_BACKWARD_LOOP_(MC_ACT_GELU) break;
    case MC_ACT_SIGMOID: MC_ACT_BACKWARD_LOOP_(MC_ACT_SIGMOID) break;
    case MC_ACT_TANH: MC_ACT_BACKWARD_LOOP_(MC_ACT_TANH) break;
    default:
        if (n > 0)
            memcpy(dx, dy, (size_t)n * 4);
        break;
    }
}

mc_act_forward_fn mc_act_kernel_forward(int level)
{
#if defined(MC_HAVE_AVX512)
    if (level >= MC_ISA_AVX512)
        return mc_act_forward_f32_avx512;
#endif
    (void)level;
    return mc_act_forward_f32_generic;
}

mc_act_backward_fn mc_act_kernel_backward(int level)
{
#if defined(MC_HAVE_AVX512)
    if (level >= MC_ISA_AVX512)
        return mc_act_backward_f32_avx512;
#endif
    (void)level;
    return mc_act_backward_f32_generic;
}
