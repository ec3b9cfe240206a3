/* Small helpers for the C test programs of the kernel families (test_act.c, test_norm.c,
 * test_attn.c, test_conv.c, test_pool.c, ...): the levels to run, thread counts, a random
 * generator and values that make kernels work (specials, subnormals, 16-bit types), and
 * failure reports.
 *
 * Conventions:
 *   a. Each program has its own main(), includes only the core's headers and this one, prints
 *      one line per failure ("FAIL <file>:<line> [level/threads] <message>") and returns the
 *      number of failures, capped at 1 (0 when everything passed).
 *   b. mcx_begin() resolves the kernel tables; mcx_levels() lists the levels this build compiled
 *      and this CPU runs, lowest first (a level the CPU lacks is skipped, and says so on
 *      stderr); mcx_use() makes a level and a thread count current for the following calls.
 *   c. Header-only (static functions): each program compiles its own copy.
 */
#ifndef MCX_CTEST_EXTRA_H_
#define MCX_CTEST_EXTRA_H_

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mc_convert_scalar.h"
#include "mc_cpu.h"
#include "mc_kernels.h"
#include "mc_runtime.h"

static int mcx_failures_ = 0;
static int mcx_checks_ = 0;
static const char *mcx_where_ = "";
static char mcx_ctx_[64] = "";
static const char *const mcx_level_names_[MC_ISA_COUNT] = {"generic", "avx2", "avx512",
                                                           "avx512bf16"};

/* Records one failure (printed for the first 50, counted always). */
static inline void mcx_fail_(const char *file, int line, const char *fmt, ...)
{
    ++mcx_failures_;
    if (mcx_failures_ > 50)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s:%d [%s] %s: ", file, line, mcx_ctx_, mcx_where_);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

#define MCX_FAIL(...) mcx_fail_(__FILE__, __LINE__, __VA_ARGS__)
#define MCX_CHECK(cond, ...)                                                                  \
    do {                                                                                      \
        ++mcx_checks_;                                                                        \
        if (!(cond))                                                                          \
            MCX_FAIL(__VA_ARGS__);                                                            \
    } while (0)

/* Design b. */
static inline void mcx_begin(void)
{
    mc_kernels_init();
    mc_rt_set_cpu_budget(4);
}

static inline int mcx_levels(int *levels)
{
    const int built = mc_cpu_built_level(), cpu = mc_cpu_supported_level();
    int n = 0;
    for (int l = 0; l < MC_ISA_COUNT; ++l) {
        if (l > built)
            break;
        if (l > cpu) {
            fprintf(stderr, "skip level %s: this CPU lacks it\n", mcx_level_names_[l]);
            continue;
        }
        levels[n++] = l;
    }
    return n;
}

static inline void mcx_use(int level, int threads)
{
    mc_rt_set_level(level);
    mc_rt_set_process_threads(threads);
    snprintf(mcx_ctx_, sizeof mcx_ctx_, "%s/%d", mcx_level_names_[level], threads);
}

/* Names the case being checked, for the failure lines. */
static inline void mcx_case(const char *where) { mcx_where_ = where; }

static inline int mcx_end(const char *program)
{
    if (mcx_failures_)
        printf("%s: %d of %d checks failed\n", program, mcx_failures_, mcx_checks_);
    else
        printf("%s: %d checks passed\n", program, mcx_checks_);
    return mcx_failures_ ? 1 : 0;
}

/* --- values ----------------------------------------------------------------------------------- */

static uint64_t mcx_rng_ = 0x9E3779B97F4A7C15ull;

static inline void mcx_seed(uint64_t s) { mcx_rng_ = s * 0x9E3779B97F4A7C15ull + 1; }

static inline uint64_t mcx_next(void)
{
    uint64_t x = mcx_rng_;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    mcx_rng_ = x;
    return x;
}

/* uniform in [lo, hi) */
static inline double mcx_uniform(double lo, double hi)
{
    return lo + (hi - lo) * ((double)(mcx_next() >> 11) * (1.0 / 9007199254740992.0));
}

static inline float mcx_f32_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t mcx_bits_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A float32 test value: mostly in [-scale, scale], sometimes a special one (when specials is
 * nonzero): +-0, +-inf, NaN (quiet and signalling, with payloads), subnormals, huge values. */
static inline float mcx_value(double scale, int specials)
{
    const uint64_t r = mcx_next();
    if (specials && (r & 31) == 0) {
        static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                                      0x7FC00000u, 0xFFC00001u, 0x7F800123u, 0x00000001u,
                                      0x807FFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x00800000u};
        return mcx_f32_bits(sp[(r >> 5) % (sizeof sp / sizeof sp[0])]);
    }
    return (float)mcx_uniform(-scale, scale);
}

/* Fills n float32 values (design of mcx_value). */
static inline void mcx_fill(float *p, int64_t n, double scale, int specials)
{
    for (int64_t i = 0; i < n; ++i)
        p[i] = mcx_value(scale, specials);
}

static inline int mcx_elem_size(int type) { return type == MC_F64 ? 8 : type == MC_F32 ? 4 : 2; }

/* Element i of an array of `type` (F16, BF16, F32) as float32, exactly. */
static inline float mcx_load(const void *p, int type, int64_t i)
{
    if (type == MC_F32)
        return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return mcx_f32_bits(type == MC_BF16 ? mc_bf16_to_f32_bits(h) : mc_f16_to_f32_bits(h));
}

/* Writes v into element i of an array of `type` (F16, BF16, F32), rounded to nearest even. */
static inline void mcx_store(void *p, int type, int64_t i, float v)
{
    if (type == MC_F32) {
        ((float *)p)[i] = v;
        return;
    }
    const uint32_t u = mcx_bits_f32(v);
    ((uint16_t *)p)[i] = type == MC_BF16 ? mc_f32_to_bf16_bits(u) : mc_f32_to_f16_bits(u);
}

/* n random elements of `type` (values as mcx_value, rounded to the type). */
static inline void mcx_fill_typed(void *p, int type, int64_t n, double scale, int specials)
{
    for (int64_t i = 0; i < n; ++i)
        mcx_store(p, type, i, mcx_value(scale, specials));
}

/* malloc that the program may not survive without; every byte set to 0xA5 (a pattern the
 * checks of "nothing written past the end" look for). */
static inline void *mcx_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        printf("FAIL out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    memset(p, 0xA5, bytes ? bytes : 1);
    return p;
}

/* 1 when bytes [from, to) of p all still hold 0xA5. */
static inline int mcx_untouched(const void *p, size_t from, size_t to)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = from; i < to; ++i)
        if (b[i] != 0xA5)
            return 0;
    return 1;
}

static inline const char *mcx_type_name(int type)
{
    return type == MC_F16 ? "float16" : type == MC_BF16 ? "bfloat16" : type == MC_F32 ? "float32"
                                                                                       : "float64";
}

#endif
