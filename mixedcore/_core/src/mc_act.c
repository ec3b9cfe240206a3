/* Generic (portable C) activation kernels and the per-level selection.
 *
 * Design:
 *   a. The generic kernels are the scalar twins of mc_act_scalar.h in a loop
 *      (MC_ACT_SCALAR_KERNELS_): the specification the vector kernels are tested against.
 *      Compilers may vectorise them for the platform's baseline, never beyond it; fma() is a
 *      library call there (correctly rounded; glibc runs the FMA instruction when the CPU has
 *      one, after a call through the PLT, which makes these loops 4-6 times slower than the
 *      same loops compiled with -mfma in mc_act_avx2.c).
 *   b. mc_act_kernel_forward() / _backward() pick, for a level, the kernel of the highest level
 *      <= it that was built: avx512 and avx512bf16 use the AVX-512 kernels, avx2 the scalar
 *      twins compiled with FMA (mc_act_avx2.c), generic these.  Every choice gives the same
 *      bits; only the speed differs.
 */
#include <string.h>
#include "mc_act.h"
#include "mc_act_scalar.h"
#include "mc_cpu.h"

MC_ACT_SCALAR_KERNELS_(generic)

mc_act_forward_fn mc_act_kernel_forward(int level)
{
#if defined(MC_HAVE_AVX512)
    if (level >= MC_ISA_AVX512)
        return mc_act_forward_f32_avx512;
#endif
#if defined(MC_HAVE_AVX2)
    if (level >= MC_ISA_AVX2)
        return mc_act_forward_f32_avx2;
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
#if defined(MC_HAVE_AVX2)
    if (level >= MC_ISA_AVX2)
        return mc_act_backward_f32_avx2;
#endif
    (void)level;
    return mc_act_backward_f32_generic;
}
