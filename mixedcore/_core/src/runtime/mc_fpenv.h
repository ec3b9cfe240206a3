/* The floating-point environment of every call.
 *
 * Design:
 *   a. Every call runs with the default floating-point environment -- round to nearest, no
 *      flush-to-zero, no denormals-are-zero, exceptions masked -- on the caller and on every
 *      worker, and gives the caller its own environment back (its exception flags included,
 *      so nothing raised inside leaks to numpy).  Results never depend on the caller's mode.
 *   b. On x86 that is one MXCSR value; elsewhere the C library's FE_DFL_ENV.
 */
#ifndef MC_FPENV_H_
#define MC_FPENV_H_

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64)
#define MC_FPENV_MXCSR_ 1
typedef struct {
    unsigned int mxcsr;
} mc_fpenv;
#else
#include <fenv.h>
typedef struct {
    fenv_t env;
} mc_fpenv;
#endif
void mc_fpenv_enter(mc_fpenv *saved);       /* save the caller's, install the default */
void mc_fpenv_leave(const mc_fpenv *saved);
void mc_fpenv_default(void);                /* install the default (workers) */
/* For info: on x86 the MXCSR every call installs (*engine) and the calling thread's (*current);
 * returns 1 there, 0 on a platform whose default is the C library's FE_DFL_ENV. */
int mc_fpenv_mxcsr(unsigned int *engine, unsigned int *current);
/* 1 / x in float64 and that rounded to float32, both in the default environment (the caller's
 * rounding mode must not change a kernel's scale factor). */
void mc_reciprocal(double x, float *r32, double *r64);
/* x rounded to float32 in the default environment. */
float mc_round_f32(double x);

#endif
