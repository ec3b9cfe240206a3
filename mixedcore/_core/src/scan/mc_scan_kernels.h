/* The scan family's level kernels: their types and the family's table (one per level, exported
 * by mc_scan_generic.c and mc_scan_<isa>.c, resolved by runtime/mc_kernels.c).  The level
 * files, the scalar twins and the kernel tables include this header; the drivers' API is
 * mc_scan.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_SCAN_KERNELS_H_
#define MC_SCAN_KERNELS_H_

#include <stdint.h>
#include <string.h>
#include "mc_scan_scalar.h"

/* A block of contiguous elements, written for the compiler to vectorise under the flags of the
 * file that expands it (each level's file does): one counter per class in the element's own
 * width (BLOCK elements at most, so a 16-bit counter cannot wrap), added to the tally per block.
 * Same classes as mc_stats_add, without branches; a range test lo < a < hi is the one unsigned
 * compare a - lo - 1 < hi - lo - 1, and the finite magnitude is a AND-ed with the all-ones
 * mask of a < inf (GCC leaves the loop scalar when that is a conditional expression). */
#define MC_STATS_KERNEL_(name, T, BLOCK, isa, LIMITS)                                           \
    static void mc_stats_##name##_##isa(const void *p, int64_t n, mc_stats *t)                  \
    {                                                                                           \
        enum { INF, F16O, F16F, F16S, BFO, BFF, BFS };                                          \
        static const T L[7] = {LIMITS};                                                         \
        const T inf = L[INF], f16o = L[F16O], f16f = L[F16F], f16s = L[F16S], bfo = L[BFO],     \
                bff = L[BFF], bfs = L[BFS];                                                     \
        const T mask = (T)((T)~(T)0 >> 1);                                                      \
        const T *s = (const T *)p;                                                              \
        uint64_t mx = t->max_bits;                                                              \
        for (int64_t i0 = 0; i0 < n; i0 += (BLOCK)) {                                           \
            const int64_t m = n - i0 < (BLOCK) ? n - i0 : (BLOCK);                              \
            T c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0, c8 = 0, bm = 0;   \
            const T *b = s + i0;                                                                \
            for (int64_t j = 0; j < m; ++j) {                                                   \
                const T a = (T)(b[j] & mask);                                                   \
                c0 += (T)(a > inf);                                                             \
                c1 += (T)(a == inf);                                                            \
                c2 += (T)(a == 0);                                                              \
                c3 += (T)((T)(a - f16o) < (T)(inf - f16o));                                     \
                c4 += (T)((T)(a - f16f - 1) < (T)(f16s - f16f - 1));                            \
                c5 += (T)((T)(a - 1) < f16f);                                                   \
                c6 += (T)((T)(a - bfo) < (T)(inf - bfo));                                       \
                c7 += (T)((T)(a - bff - 1) < (T)(bfs - bff - 1));                               \
                c8 += (T)((T)(a - 1) < bff);                                                    \
                const T f = (T)(a & (T)((T)0 - (T)(a < inf)));                                  \
                bm = bm > f ? bm : f;                                                           \
            }                                                                                   \
            t->count[MC_STAT_NAN] += c0;                                                        \
            t->count[MC_STAT_INF] += c1;                                                        \
            t->count[MC_STAT_ZERO] += c2;                                                       \
            t->count[MC_STAT_F16_OVERFLOW] += c3;                                               \
            t->count[MC_STAT_F16_SUBNORMAL] += c4;                                              \
            t->count[MC_STAT_F16_UNDERFLOW] += c5;                                              \
            t->count[MC_STAT_BF16_OVERFLOW] += c6;                                              \
            t->count[MC_STAT_BF16_SUBNORMAL] += c7;                                             \
            t->count[MC_STAT_BF16_UNDERFLOW] += c8;                                             \
            if (bm > mx)                                                                        \
                mx = bm;                                                                        \
        }                                                                                       \
        t->max_bits = mx;                                                                       \
    }

/* The four stats kernels of a level, expanded in that level's file. */
#define MC_STATS_KERNELS_(isa)                                                                  \
    MC_STATS_KERNEL_(f16, uint16_t, 16384, isa, MC_STAT_LIMITS_F16_)                            \
    MC_STATS_KERNEL_(bf16, uint16_t, 16384, isa, MC_STAT_LIMITS_BF16_)                          \
    MC_STATS_KERNEL_(f32, uint32_t, 16384, isa, MC_STAT_LIMITS_F32_)                            \
    MC_STATS_KERNEL_(f64, uint64_t, 16384, isa, MC_STAT_LIMITS_F64_)

/* --- kernels ------------------------------------------------------------------------------- */

typedef int (*mc_all_finite_fn)(const void *p, int64_t n);
typedef int (*mc_unscale_fn)(void *p, int64_t n, float inv32, double inv64);
typedef void (*mc_stats_fn)(const void *p, int64_t n, mc_stats *tally);

typedef struct {
    mc_all_finite_fn all_finite[MC_NDTYPES];
    mc_unscale_fn unscale[MC_NDTYPES];
    mc_stats_fn stats[MC_NDTYPES];
} mc_scan_table;

extern const mc_scan_table mc_scan_table_generic;
extern const mc_scan_table mc_scan_table_avx2;
extern const mc_scan_table mc_scan_table_avx512;
extern const mc_scan_table mc_scan_table_avx512bf16;

int mc_all_finite_strided(int type, const char *p, int64_t stride, int64_t n);
int mc_unscale_strided(int type, char *p, int64_t stride, int64_t n, float inv32, double inv64);
void mc_stats_strided(int type, const char *p, int64_t stride, int64_t n, mc_stats *tally);

/* The table of a level whose kernels are named mc_all_finite_<type>_<isa> / mc_unscale_<...>. */
#define MC_SCAN_TABLE_(isa)                                                           \
    {{mc_all_finite_f16_##isa, mc_all_finite_bf16_##isa, mc_all_finite_f32_##isa,     \
      mc_all_finite_f64_##isa},                                                       \
     {mc_unscale_f16_##isa, mc_unscale_bf16_##isa, mc_unscale_f32_##isa,              \
      mc_unscale_f64_##isa},                                                          \
     {mc_stats_f16_##isa, mc_stats_bf16_##isa, mc_stats_f32_##isa, mc_stats_f64_##isa}}

#endif
