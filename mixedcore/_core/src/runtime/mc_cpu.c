/* CPUID/XGETBV probing; see mc_cpu.h for the design. */
#include "mc_cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <stdint.h>

static uint64_t mc_xgetbv_(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

int mc_cpu_supported_level(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return MC_ISA_GENERIC;
    const int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx)
        return MC_ISA_GENERIC;
    const uint64_t xcr0 = mc_xgetbv_();
    if ((xcr0 & 0x6) != 0x6)            /* XMM and YMM state */
        return MC_ISA_GENERIC;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return MC_ISA_GENERIC;
    const int avx2 = (b >> 5) & 1;
    if (!(avx2 && fma && f16c))
        return MC_ISA_GENERIC;
    const int f512 = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    if (!(f512 && dq && bw && vl) || (xcr0 & 0xe6) != 0xe6)   /* opmask, ZMM_Hi256, Hi16_ZMM */
        return MC_ISA_AVX2;
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
    /* avx512bf16 also needs AVX512_VNNI (c: leaf 7 sub-leaf 0), for the int8 GEMM's VPDPBUSD;
     * every CPU with AVX512_BF16 has it */
    const int bf16 = (a1 >> 5) & 1, vnni = (c >> 11) & 1;
    return bf16 && vnni ? MC_ISA_AVX512BF16 : MC_ISA_AVX512;
}

unsigned mc_cpu_features(void)
{
    unsigned a, b, c, d, out = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    out |= ((c >> 12) & 1) ? MC_CPU_FMA : 0;
    out |= ((c >> 29) & 1) ? MC_CPU_F16C : 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return out;
    out |= ((b >> 5) & 1) ? MC_CPU_AVX2 : 0;
    out |= ((b >> 16) & 1) ? MC_CPU_AVX512F : 0;
    out |= ((b >> 17) & 1) ? MC_CPU_AVX512DQ : 0;
    out |= ((b >> 30) & 1) ? MC_CPU_AVX512BW : 0;
    out |= ((b >> 31) & 1) ? MC_CPU_AVX512VL : 0;
    if (a >= 1) {                            /* sub-leaf 1 exists */
        unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
        __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
        out |= ((a1 >> 5) & 1) ? MC_CPU_AVX512BF16 : 0;
    }
    return out;
}
#else
int mc_cpu_supported_level(void) { return MC_ISA_GENERIC; }
unsigned mc_cpu_features(void) { return 0; }
#endif

int mc_cpu_built_level(void)
{
#if defined(MC_HAVE_AVX512BF16)
    return MC_ISA_AVX512BF16;
#elif defined(MC_HAVE_AVX512)
    return MC_ISA_AVX512;
#elif defined(MC_HAVE_AVX2)
    return MC_ISA_AVX2;
#else
    return MC_ISA_GENERIC;
#endif
}
