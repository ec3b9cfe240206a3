/* Accuracy of the activation functions against long double references, over every float32 in
 * [-limit, limit] (or every step-th one).
 *
 * Build and run from the repository root (the generic kernels; every level gives the same bits):
 *
 *     gcc -O2 -ffp-contract=off -fno-math-errno -I mixedcore/_core/src/act tools/act_accuracy.c \
 *         mixedcore/_core/src/act/mc_act_generic.c -lm -o /tmp/act_accuracy
 *     /tmp/act_accuracy [step=1] [limit=20] [dy]
 *
 * With "dy" the derivatives are multiplied by random dy = +-(1 + f) * 2**e, e in [-27, 36],
 * instead of 1.  For each function it prints the number of inputs, how many results are not the
 * correctly rounded float32 of the reference, the largest distance from it (in ulps, as a
 * difference of ordered bit patterns) and the largest error against the reference itself (in
 * ulps of the float32 spacing there), and lists every input that is not correctly rounded.
 *
 * Design:
 *   a. References in long double (x87, 64-bit significand: erfcl, expl, tanhl), written without
 *      cancellation except gelu' = Phi + x phi near its root, where the 11 extra bits still
 *      leave far more than float32 needs (the float32 x nearest the root gives |gelu'| ~ 1e-9,
 *      the reference's absolute error is ~3e-20).  A miss can still be the reference's fault
 *      when the exact value is within ~1e-19 of a float32 midpoint; check those with mpmath.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mc_act_kernels.h"

typedef long double ld;
static const ld SQRT_HALF = 0.707106781186547524400844362104849039L;
static const ld INV_SQRT_2PI = 0.398942280401432677939946059934381868L;

static ld ref_forward(int act, ld x)
{
    if (act == MC_ACT_GELU)
        return x * 0.5L * erfcl(-x * SQRT_HALF);
    if (act == MC_ACT_SIGMOID)
        return x >= 0 ? 1.0L / (1.0L + expl(-x)) : expl(x) / (1.0L + expl(x));
    return tanhl(x);
}

static ld ref_grad(int act, ld x)
{
    ld e;
    if (act == MC_ACT_GELU)
        return 0.5L * erfcl(-x * SQRT_HALF) + x * expl(-x * x * 0.5L) * INV_SQRT_2PI;
    if (act == MC_ACT_SIGMOID) {
        e = expl(-fabsl(x));
        return e / ((1 + e) * (1 + e));
    }
    e = expl(-2 * fabsl(x));
    return 4 * e / ((1 + e) * (1 + e));
}

static int64_t ordered(float f)
{
    int32_t i;
    memcpy(&i, &f, 4);
    return i < 0 ? (int64_t)INT32_MIN - i : i;
}

static ld ulp32(ld r)
{
    int e;
    r = fabsl(r);
    if (r < 0x1p-126L)
        return 0x1p-149L;
    frexpl(r, &e);
    return ldexpl(1.0L, e - 24);
}

int main(int argc, char **argv)
{
    const uint32_t step = argc > 1 ? (uint32_t)atoi(argv[1]) : 1;
    const float limit = argc > 2 ? (float)atof(argv[2]) : 20.0f;
    const int random_dy = argc > 3 && strcmp(argv[3], "dy") == 0;
    const char *names[] = {"", "", "gelu", "sigmoid", "tanh"};
    const int64_t B = 1 << 16;
    float *x = malloc(B * 4), *y = malloc(B * 4), *dy = malloc(B * 4);
    uint32_t top, rng = 99;
    memcpy(&top, &limit, 4);
    if (!x || !y || !dy || step == 0)
        return 1;
    for (int act = MC_ACT_GELU; act <= MC_ACT_TANH; ++act) {
        for (int grad = random_dy; grad < 2; ++grad) {
            ld worst = 0;
            float worst_x = 0;
            uint64_t count = 0, missed = 0;
            int64_t max_ulps = 0;
            for (uint32_t sign = 0; sign < 2; ++sign) {
                for (uint64_t base = 0; base <= top; base += (uint64_t)B * step) {
                    int64_t n = 0;
                    for (; n < B && base + (uint64_t)n * step <= top; ++n) {
                        const uint32_t u = (uint32_t)(base + (uint64_t)n * step) | (sign << 31);
                        memcpy(&x[n], &u, 4);
                        dy[n] = 1.0f;
                        if (random_dy) {
                            rng = rng * 1664525u + 1013904223u;
                            const uint32_t v = (rng & 0x807fffffu) | ((100u + ((rng >> 23) & 63u)) << 23);
                            memcpy(&dy[n], &v, 4);
                        }
                    }
                    if (grad)
                        mc_act_table_generic.backward(act, dy, x, y, n);
                    else
                        mc_act_table_generic.forward(act, x, y, n);
                    for (int64_t i = 0; i < n; ++i) {
                        const ld r = grad ? ref_grad(act, x[i]) * (ld)dy[i] : ref_forward(act, x[i]);
                        const int64_t d = llabs(ordered(y[i]) - ordered((float)r));
                        const ld err = fabsl((ld)y[i] - r) / ulp32(r);
                        if (d) {
                            ++missed;
                            printf("  not correctly rounded: %s%s x=%a dy=%a got=%a reference=%.21Lg\n",
                                   names[act], grad ? "'" : "", x[i], dy[i], y[i], r);
                        }
                        if (d > max_ulps)
                            max_ulps = d;
                        if (err > worst) {
                            worst = err;
                            worst_x = x[i];
                        }
                        ++count;
                    }
                }
            }
            printf("%-8s%s: %llu inputs, %llu not correctly rounded, at most %lld ulp from it; "
                   "largest error %.6Lf ulp (x = %a)\n", names[act], grad ? "'" : " ",
                   (unsigned long long)count, (unsigned long long)missed, (long long)max_ulps,
                   worst, worst_x);
            fflush(stdout);
        }
    }
    return 0;
}
