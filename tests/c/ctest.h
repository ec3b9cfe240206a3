/* ctest.h: the helpers of the C test programs (tests/c/test_*.c), which drive each kernel
 * family's C driver with no Python involved.
 *
 * Conventions every tests/c/test_<family>.c follows:
 *   1. It has its own main(), includes only "ctest.h" plus the core headers it needs (mc_X.h,
 *      mc_X_scalar.h, mc_runtime.h, ...; tests/c/run passes -I for every folder under
 *      mixedcore/_core/src) and is linked against every core object: tests/c/run builds each
 *      test_*.c into its own program, so a new family's test needs no change to the script.
 *   2. main() begins with ct_init(argc, argv) (resolves the kernel tables, as the Python module
 *      does at import) and ends with `return ct_finish();` (0 when every check passed, 1
 *      otherwise; tests/c/run fails when any program exits non-zero).
 *   3. It runs its cases at every level this build and CPU have:
 *          for (int level = 0; level < ct_levels(); ++level) { ct_set_level(level); ... }
 *      and at one thread and at several: ct_set_threads(1), ct_set_threads(CT_THREADS).  With a
 *      build without the thread team (MC_NO_THREADS) every call runs on its caller anyway.
 *   4. It calls the family's C driver (the entry point the .pxi calls) on a few sizes: 0, 1,
 *      vector tails (n % lanes != 0), odd and negative strides where the driver takes strides,
 *      and one size above the family's threading threshold; and checks every output element
 *      against the family's scalar twin (mc_X_scalar.h): bit for bit where the family promises
 *      it (CT_CHECK_BITS), else against a float64 reference within the bound its docs/ page
 *      derives.  Bytes just past an output are filled with CT_MARK and checked unchanged
 *      (ct_alloc_marked / ct_marks_intact).
 *   5. A failed check prints one line "FAIL file:line: message" (the first CT_MAX_REPORTS of
 *      them) with the context set by ct_context(), and the program carries on; ct_finish()
 *      prints "<program>: N checks, M failed".  Inputs come from ct_rand(), seeded the same
 *      way on every run, so a failure is reproducible.
 */
#ifndef MC_CTEST_H_
#define MC_CTEST_H_

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_cpu.h"
#include "mc_kernels.h"
#include "mc_runtime.h"

enum { CT_THREADS = 3, CT_MAX_REPORTS = 20, CT_MARK = 0xA5, CT_GUARD = 64 };

static const char *ct_program_ = "ctest";
static int64_t ct_checks_ = 0, ct_failed_ = 0;
static char ct_context_[256] = "";
static uint64_t ct_state_ = UINT64_C(0x9E3779B97F4A7C15);

static const char *const ct_level_names_[] = {"generic", "avx2", "avx512", "avx512bf16"};

static inline void ct_init(int argc, char **argv)
{
    if (argc > 0 && argv[0] != NULL) {
        const char *slash = strrchr(argv[0], '/');
        ct_program_ = slash ? slash + 1 : argv[0];
    }
    mc_kernels_init();
    mc_rt_set_cpu_budget(CT_THREADS);
}

/* Levels [0, ct_levels()) are the ones this CPU runs and this build compiled. */
static inline int ct_levels(void)
{
    const int s = mc_cpu_supported_level(), b = mc_cpu_built_level();
    return (s < b ? s : b) + 1;
}

static inline void ct_set_level(int level)
{
    mc_rt_set_level(level);
    printf("%s: level %s\n", ct_program_, ct_level_names_[level]);
    fflush(stdout);
}

static inline const char *ct_level_name(void) { return ct_level_names_[mc_rt_level()]; }

static inline void ct_set_threads(int n) { mc_rt_set_process_threads(n); }

/* What the failures reported next are about (printf format). */
static inline void ct_context(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ct_context_, sizeof ct_context_, fmt, ap);
    va_end(ap);
}

static inline int ct_report_(int ok, const char *file, int line, const char *fmt, ...)
{
    ct_checks_ += 1;
    if (ok)
        return 1;
    ct_failed_ += 1;
    if (ct_failed_ <= CT_MAX_REPORTS) {
        va_list ap;
        printf("FAIL %s:%d: [%s, %d threads, %s] ", file, line, ct_level_name(),
               mc_rt_process_threads(), ct_context_);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        fflush(stdout);
    }
    return 0;
}

/* CT_CHECK(cond, fmt, ...): one check; evaluates to cond (so a loop can stop at its first
 * failure). */
#define CT_CHECK(cond, ...) ct_report_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* CT_CHECK_BITS(got, want, what, index): two bit patterns (unsigned integers) equal. */
#define CT_CHECK_BITS(got, want, what, index)                                                   \
    CT_CHECK((uint64_t)(got) == (uint64_t)(want), "%s[%lld]: got 0x%llx, want 0x%llx", (what), \
             (long long)(index), (unsigned long long)(got), (unsigned long long)(want))

static inline int ct_finish(void)
{
    printf("%s: %lld checks, %lld failed\n", ct_program_, (long long)ct_checks_,
           (long long)ct_failed_);
    return ct_failed_ ? 1 : 0;
}

/* --- inputs ------------------------------------------------------------------------------------ */

static inline void ct_seed(uint64_t seed)
{
    ct_state_ = seed ? seed : UINT64_C(0x9E3779B97F4A7C15);
}

/* xorshift64*: deterministic, the same on every platform. */
static inline uint64_t ct_rand(void)
{
    ct_state_ ^= ct_state_ >> 12;
    ct_state_ ^= ct_state_ << 25;
    ct_state_ ^= ct_state_ >> 27;
    return ct_state_ * UINT64_C(0x2545F4914F6CDD1D);
}

/* Uniform in [lo, hi). */
static inline double ct_uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(ct_rand() >> 11) * (1.0 / 9007199254740992.0);
}

/* --- memory ------------------------------------------------------------------------------------ */

/* `bytes` of 64-byte aligned memory followed by CT_GUARD bytes of CT_MARK; exits when out of
 * memory.  Free with free(). */
static inline void *ct_alloc_marked(int64_t bytes)
{
    const size_t size = ((size_t)bytes + CT_GUARD + 63) & ~(size_t)63;
    unsigned char *p = (unsigned char *)aligned_alloc(64, size);
    if (p == NULL) {
        fprintf(stderr, "%s: out of memory (%lld bytes)\n", ct_program_, (long long)bytes);
        exit(2);
    }
    memset(p, CT_MARK, size);
    return p;
}

/* 1 when the CT_GUARD bytes after `bytes` of a ct_alloc_marked block still hold CT_MARK. */
static inline int ct_marks_intact(const void *p, int64_t bytes)
{
    const unsigned char *q = (const unsigned char *)p + bytes;
    for (int i = 0; i < CT_GUARD; ++i)
        if (q[i] != CT_MARK)
            return 0;
    return 1;
}

/* --- bit patterns ------------------------------------------------------------------------------ */

static inline float ct_f32(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static inline double ct_f64(uint64_t b) { double d; memcpy(&d, &b, 8); return d; }
static inline uint32_t ct_bits32(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }
static inline uint64_t ct_bits64(double d) { uint64_t b; memcpy(&b, &d, 8); return b; }

/* Element i of an array of `itemsize`-byte elements as an unsigned integer, and back. */
static inline uint64_t ct_load(const void *p, int itemsize)
{
    uint16_t h;
    uint32_t f;
    uint64_t d;
    switch (itemsize) {
    case 2: memcpy(&h, p, 2); return h;
    case 4: memcpy(&f, p, 4); return f;
    default: memcpy(&d, p, 8); return d;
    }
}

static inline void ct_store(void *p, int itemsize, uint64_t v)
{
    const uint16_t h = (uint16_t)v;
    const uint32_t f = (uint32_t)v;
    switch (itemsize) {
    case 2: memcpy(p, &h, 2); break;
    case 4: memcpy(p, &f, 4); break;
    default: memcpy(p, &v, 8); break;
    }
}

/* --- values of the four float types (MC_F16, MC_BF16, MC_F32, MC_F64) ------------------------- */

static inline int ct_itemsize(int type) { return type == MC_F64 ? 8 : type == MC_F32 ? 4 : 2; }
static inline const char *ct_type_name(int type)
{
    static const char *const names[] = {"float16", "bfloat16", "float32", "float64"};
    return type >= 0 && type < MC_NDTYPES ? names[type] : "?";
}

/* Signed zeros, both ends of the subnormal range, the largest finite values, infinities, quiet
 * and signalling NaNs with payloads, and rounding ties to float16 and bfloat16. */
static const uint64_t ct_specials_[MC_NDTYPES][14] = {
    {0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE01,
     0x3C00, 0xBC01, 0x5BFF},
    {0x0000, 0x8000, 0x0001, 0x007F, 0x0080, 0x7F7F, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFC1,
     0x3F80, 0x4780, 0x3300},
    {0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000,
     0xFF800000, 0x7FC00000, 0x7F800001, 0x477FF000, 0x33000000, 0x3F808000, 0x387FE000},
    {UINT64_C(0), UINT64_C(0x8000000000000000), UINT64_C(1), UINT64_C(0x000FFFFFFFFFFFFF),
     UINT64_C(0x0010000000000000), UINT64_C(0x7FEFFFFFFFFFFFFF), UINT64_C(0x7FF0000000000000),
     UINT64_C(0xFFF0000000000000), UINT64_C(0x7FF8000000000000), UINT64_C(0x7FF0000000000001),
     UINT64_C(0x40EFFE0000000000), UINT64_C(0x3E60000000000000), UINT64_C(0x47EFF00000000000),
     UINT64_C(0x3FF0000010000000)}};

/* 1 when the bits are those of a finite value of the type. */
static inline int ct_is_finite(int type, uint64_t bits)
{
    switch (type) {
    case MC_F16: return (bits & 0x7FFF) < 0x7C00;
    case MC_BF16: return (bits & 0x7FFF) < 0x7F80;
    case MC_F32: return (bits & 0x7FFFFFFF) < 0x7F800000;
    default: return (bits & UINT64_C(0x7FFFFFFFFFFFFFFF)) < UINT64_C(0x7FF0000000000000);
    }
}

enum { CT_ANY = 0, CT_FINITE = 1 };

/* One random bit pattern of the type: uniform bits or (one in eight) a special value; with
 * CT_FINITE only finite ones. */
static inline uint64_t ct_random_bits(int type, int mode)
{
    for (;;) {
        const uint64_t r = ct_rand();
        uint64_t v = (r & 7) == 0 ? ct_specials_[type][(r >> 3) % 14] : ct_rand();
        if (ct_itemsize(type) == 2)
            v &= 0xFFFF;
        else if (ct_itemsize(type) == 4)
            v &= 0xFFFFFFFFu;
        if (mode == CT_ANY || ct_is_finite(type, v))
            return v;
    }
}

/* n elements of the type, stride `stride` bytes apart, from ct_random_bits. */
static inline void ct_fill(int type, char *p, int64_t n, int64_t stride, int mode)
{
    for (int64_t i = 0; i < n; ++i)
        ct_store(p + i * stride, ct_itemsize(type), ct_random_bits(type, mode));
}

#endif
