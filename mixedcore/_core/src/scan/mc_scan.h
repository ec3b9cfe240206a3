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
#include "mc_scan_kernels.h"

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
    MC_SCAN_TOOBIG = -5,       /* with array *index the bytes to scan pass INT64_MAX
                                  (mc_checked.h: each array's fit, not their sum) */
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

#endif
