/* Generic (portable C) level of the GEMM kernels (the driver is in mc_gemm.c).
 *
 * Design (mc_gemm.c, design g):
 *   a. The generic kernels are the scalar twins: packing through the conversion twins of
 *      mc_convert_scalar.h (mc_gemm_pack_scalar_), a 4 x 16 micro-kernel that multiplies then
 *      adds (two roundings per step, since the baseline has no FMA; the error bound of
 *      docs/gemm.md still holds), and the same products with B read in place.
 *   b. The table leaves the epilogue empty: the driver's scalar epilogue (mc_gemm.c), which
 *      also serves every layout the vector epilogues do not take.  -ffp-contract=off keeps every
 *      rounding where the source puts it.
 */
#include <string.h>
#include "mc_convert_scalar.h"
#include "mc_gemm_kernels.h"
#include "mc_gemm_scalar.h"

#define G_MR 4
#define G_NR 16

/* --- generic micro-kernel --------------------------------------------------------------------- */

static void mc_gemm_ukr_generic_(int64_t kc, const void *ap, const void *bp, float *tile, int mr)
{
    const float *a = (const float *)ap, *b = (const float *)bp;
    float c[G_MR][G_NR];
    memset(c, 0, sizeof c);
    for (int64_t k = 0; k < kc; ++k) {
        for (int i = 0; i < G_MR; ++i) {
            const float ai = a[i];
            for (int j = 0; j < G_NR; ++j)
                c[i][j] += ai * b[j];
        }
        a += G_MR;
        b += G_NR;
    }
    for (int i = 0; i < mr; ++i)
        memcpy(tile + i * G_NR, c[i], sizeof c[i]);
}

/* The same products with B read in place or from 16-bit panels (mc_gemm.h): every lane of a
 * row converted by the scalar twins, then the multiply-then-add of the generic micro-kernel, in
 * the same order, so the same bits. */
static int mc_gemm_ukr_direct_generic_(int64_t kc, const void *ap, const char *b, int64_t ldb,
                                       int64_t pstride, int b_type, int nr, float *tile,
                                       int64_t ldt, int mr, int accumulate)
{
    const float *a = (const float *)ap;
    const int64_t es = b_type == MC_F32 ? 4 : 2;
    float c[G_MR][G_NR];
    (void)pstride;                           /* nr <= G_NR: one group of columns */
    for (int i = 0; i < G_MR; ++i)
        for (int j = 0; j < G_NR; ++j)
            c[i][j] = accumulate && i < mr && j < nr ? tile[i * ldt + j] : 0.0f;
    for (int64_t k = 0; k < kc; ++k) {
        float bk[G_NR];
        for (int j = 0; j < nr; ++j)
            bk[j] = mc_gemm_load_elem_(b + k * ldb + j * es, b_type);
        for (int i = 0; i < G_MR; ++i) {
            const float ai = a[i];
            for (int j = 0; j < nr; ++j)
                c[i][j] += ai * bk[j];
        }
        a += G_MR;
    }
    for (int i = 0; i < mr; ++i)
        memcpy(tile + i * ldt, c[i], (size_t)nr * 4);
    return 0;
}

const mc_gemm_table mc_gemm_table_generic = {
    .f32 = {.mr = G_MR, .nr = G_NR, .pairs = 0, .pack = mc_gemm_pack_scalar_,
            .ukr = mc_gemm_ukr_generic_, .ukr_direct = mc_gemm_ukr_direct_generic_,
            .mc = 64, .kc = 256, .nc = 2048},
};
