/* The floating-point environment of every call; see mc_fpenv.h for the design. */
#include "mc_fpenv.h"

#if defined(MC_FPENV_MXCSR_)
#include <xmmintrin.h>
#endif

#if defined(MC_FPENV_MXCSR_)
/* 0x1F80: all six exceptions masked, round to nearest, FTZ and DAZ off, no flags raised. */
#define MC_MXCSR_DEFAULT_ 0x1F80u

void mc_fpenv_enter(mc_fpenv *saved)
{
    saved->mxcsr = _mm_getcsr();
    _mm_setcsr(MC_MXCSR_DEFAULT_);
}

void mc_fpenv_leave(const mc_fpenv *saved) { _mm_setcsr(saved->mxcsr); }
void mc_fpenv_default(void) { _mm_setcsr(MC_MXCSR_DEFAULT_); }

int mc_fpenv_mxcsr(unsigned int *engine, unsigned int *current)
{
    *engine = MC_MXCSR_DEFAULT_;
    *current = _mm_getcsr();
    return 1;
}
#else
void mc_fpenv_enter(mc_fpenv *saved)
{
    fegetenv(&saved->env);
    fesetenv(FE_DFL_ENV);
}

void mc_fpenv_leave(const mc_fpenv *saved) { fesetenv(&saved->env); }
void mc_fpenv_default(void) { fesetenv(FE_DFL_ENV); }

int mc_fpenv_mxcsr(unsigned int *engine, unsigned int *current)
{
    *engine = 0;
    *current = 0;
    return 0;
}
#endif

void mc_reciprocal(double x, float *r32, double *r64)
{
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    volatile double r = 1.0 / x;              /* computed here, not folded by the compiler */
    *r64 = r;
    *r32 = (float)r;
    mc_fpenv_leave(&saved);
}

float mc_round_f32(double x)
{
    mc_fpenv saved;
    mc_fpenv_enter(&saved);
    volatile float r = (float)x;
    mc_fpenv_leave(&saved);
    return r;
}
