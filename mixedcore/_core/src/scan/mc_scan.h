/* Overflow scans: kernel declarations and tables, and the driver (mc_scan.c); the scalar twins
 * are in mc_scan_scalar.h.
 *
 * Design:
 *   a. Two operations on float16, bfloat16, float32 and float64 data:
 *        all_finite  n contiguous elements -> 1 when none is NaN or +-Inf, else 0;
 *        unscale     n contiguous elements multiplied in place by 1/scale, -> 1 when every INPUT
 *                    element was finite.  16-bit data is widened exactly to float32, multiplied
 *                    by the float32 factor and rounded back to nearest even with the conversion
 *                    twins (mc_convert_scalar.h), so the result is bit-identical to numpy /
 *                    ml_dtypes doing (x.astype(float32) * inv32).astype(x.dtype).  float32 data
 *                    is multiplied by inv32, float64 data by inv64 = 1 / scale in float64.
 *   b. Finiteness is an integer test on the exponent field: a value is finite exactly when its
 *      magnitude bits |x| are below those of +Inf.  No floating-point compare is involved, so no
 *      flag is raised and signalling NaNs are caught like any other NaN.
 *   c. Kernels are named mc_all_finite_<dtype>_<isa> and mc_unscale_<dtype>_<isa>; each level's
 *      file exports them in one table (mc_scan_table_<isa>), entries it leaves empty inherited
 *      from the level below (mc_kernels.c).  The strided loops (the scalar twins in a loop) are
 *      the reference and serve non-contiguous data.
 *   d. all_finite may stop at the first block holding a non-finite value; unscale always
 *      processes every element (the caller relies on all of them being unscaled).
 *   e. stats (the numerics report's scan) reads n elements once and adds to a running tally:
 *      counts of NaN, Inf and zero, of finite values that round to Inf, to a nonzero subnormal
 *      or to zero when converted to float16 and to bfloat16 (round to nearest even, the
 *      conversions of mc_convert_scalar.h), and the largest finite magnitude.  Every test is an
 *      integer compare of the magnitude bits a = |x| against per-dtype limits (the magnitude
 *      order of IEEE values is that of their bits): a value is in a class exactly when a lies
 *      in a range whose ends are the first bit patterns that convert differently.  The ranges
 *      are in mc_stat_limits (mc_scan_scalar.h); the tests derive them from the conversions
 *      themselves.
 */
#ifndef MC_SCAN_H_
#define MC_SCAN_H_

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

/* --- the driver (mc_scan.c) --------------------------------------------------------------------- */

/* One array: its first element, type code (MC_F16 .. MC_F64), nd dimensions (at most
 * MC_SCAN_MAXDIMS; 0 for a single element) and byte strides of any sign, zero included.  The
 * data is native-endian and aligned to its item size. */
typedef struct {
    char *data;
    int type;
    int nd;
    const int64_t *shape;
    const int64_t *strides;
} mc_scan_array;

enum {
    MC_SCAN_OK = 0,
    MC_SCAN_NOMEM = -1,
    MC_SCAN_SELF_OVERLAP = -2, /* unscale: array *index may reach an element twice */
    MC_SCAN_MAY_OVERLAP = -3,  /* unscale: the byte extents of two arrays intersect */
    MC_SCAN_EINVAL = -4,       /* array *index: a type code or nd out of range */
    MC_SCAN_MAXDIMS = 64,
};

/* *finite = 1 when no element of the count arrays is NaN or infinite, else 0.  Returns
 * MC_SCAN_OK, MC_SCAN_NOMEM or MC_SCAN_EINVAL. */
int mc_scan_all_finite(const mc_scan_array *arrays, int64_t count, int *finite, int64_t *index);
/* Multiplies every element in place by 1 / scale (float64 data by the float64 reciprocal, the
 * others by its float32 rounding, through float32: design a above) and sets *finite = 1 when
 * every input element was finite.  The arrays must not share memory: with check_extents, arrays
 * whose byte ranges intersect are refused (MC_SCAN_MAY_OVERLAP; the caller then checks
 * exactly and calls again without).  Nothing is written when an error is returned. */
int mc_scan_unscale(const mc_scan_array *arrays, int64_t count, double scale, int check_extents,
                    int *finite, int64_t *index);
/* The numerics statistics (design e) of every element of the arrays, into *total (zeroed
 * first).  Stride-0 dimensions are scanned once. */
int mc_scan_stats(const mc_scan_array *arrays, int64_t count, mc_stats *total, int64_t *index);
/* Bytes from which all_finite / stats and unscale use threads, and the smallest piece of work a
 * thread takes (a multiple of 64); the previous values into previous[3] (a negative value, or a
 * piece below 64, keeps a value). */
void mc_scan_set_thresholds(int64_t scan, int64_t unscale, int64_t piece, int64_t previous[3]);

/* The table of a level whose kernels are named mc_all_finite_<type>_<isa> / mc_unscale_<...>. */
#define MC_SCAN_TABLE_(isa)                                                           \
    {{mc_all_finite_f16_##isa, mc_all_finite_bf16_##isa, mc_all_finite_f32_##isa,     \
      mc_all_finite_f64_##isa},                                                       \
     {mc_unscale_f16_##isa, mc_unscale_bf16_##isa, mc_unscale_f32_##isa,              \
      mc_unscale_f64_##isa},                                                          \
     {mc_stats_f16_##isa, mc_stats_bf16_##isa, mc_stats_f32_##isa, mc_stats_f64_##isa}}

#endif
