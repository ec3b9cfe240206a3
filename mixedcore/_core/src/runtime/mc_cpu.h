/* CPU feature detection for mixedcore's run-time dispatch.
 *
 * Design:
 *   a. Levels are totally ordered: generic < avx2 < avx512 < avx512bf16.  A level is usable when
 *      the CPU reports every instruction it needs AND the OS saves the registers it uses
 *      (XGETBV: XMM|YMM for avx2, plus opmask|ZMM_Hi256|Hi16_ZMM for the AVX-512 levels).
 *   b. A level is also "built" only when setup.py compiled its kernels; mc_cpu_best_level()
 *      returns the highest level that is both usable and built.
 */
#ifndef MC_CPU_H_
#define MC_CPU_H_

enum { MC_ISA_GENERIC = 0, MC_ISA_AVX2 = 1, MC_ISA_AVX512 = 2, MC_ISA_AVX512BF16 = 3, MC_ISA_COUNT = 4 };

int mc_cpu_supported_level(void);   /* highest level the CPU and OS allow */
int mc_cpu_built_level(void);       /* highest level this build compiled kernels for */

/* The instruction-set bits CPUID reports, one MC_CPU_* flag each (0 off x86-64), for comparing
 * the detection with the operating system's view (/proc/cpuinfo). */
enum {
    MC_CPU_AVX2 = 1 << 0, MC_CPU_FMA = 1 << 1, MC_CPU_F16C = 1 << 2, MC_CPU_AVX512F = 1 << 3,
    MC_CPU_AVX512BW = 1 << 4, MC_CPU_AVX512VL = 1 << 5, MC_CPU_AVX512DQ = 1 << 6,
    MC_CPU_AVX512BF16 = 1 << 7
};
unsigned mc_cpu_features(void);

#endif
