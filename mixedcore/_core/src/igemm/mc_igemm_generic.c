/* The generic level of the int8 GEMM: portable C, the scalar twins' arithmetic (mc_igemm_scalar.h).
 * A 4 x 16 micro-kernel over int8 A panels, summing in wrapping uint32 (the same value as the
 * int64 reference, since every true sum fits in int32: mc_igemm_kernels.h). */
#include <stdint.h>
#include "mc_igemm_kernels.h"
#include "mc_igemm_scalar.h"

#define MC_MR 4
#define MC_NR 16

static void mc_pack_a_generic_(const int8_t *a, int64_t rs, int64_t cs, int64_t rows, int64_t kc,
                               int mr, void *dst)
{
    mc_igemm_pack_a_scalar_(a, rs, cs, rows, kc, mr, 1, dst);
}

static void mc_ukr_generic_(int64_t kq, const void *ap, const void *bp, int32_t *tile, int mr)
{
    const int8_t *a = (const int8_t *)ap, *b = (const int8_t *)bp;
    uint32_t c[MC_MR][MC_NR];
    memset(c, 0, sizeof c);
    for (int64_t q = 0; q < kq; ++q) {
        for (int r = 0; r < mr; ++r)
            for (int l = 0; l < MC_NR; ++l) {
                int32_t s = 0;               /* at most 4 * 16384: no overflow */
                for (int t = 0; t < 4; ++t)
                    s += (int32_t)a[r * 4 + t] * b[l * 4 + t];
                c[r][l] += (uint32_t)s;
            }
        a += MC_MR * 4;
        b += MC_NR * 4;
    }
    for (int r = 0; r < mr; ++r)
        for (int l = 0; l < MC_NR; ++l)
            tile[r * MC_NR + l] = (int32_t)c[r][l];
}

static void mc_quant_generic_(const char *x, int type, int64_t k, int64_t xs, int8_t *q,
                              int64_t qs, char *scale)
{
    mc_igemm_quant_row_scalar_(x, type, k, xs, q, qs, scale);
}

static void mc_quant_zp_generic_(const char *x, int type, int64_t k, int64_t xs, int8_t *q,
                                 int64_t qs, float *scale, int32_t *zero)
{
    mc_igemm_quant_row_zp_scalar_(x, type, k, xs, q, qs, scale, zero);
}

const mc_igemm_table mc_igemm_table_generic = {
    {MC_MR, MC_NR, 1, 0, mc_pack_a_generic_, mc_ukr_generic_, NULL, NULL, 64, 1024, 2048},
    mc_quant_generic_,
    mc_quant_zp_generic_,
};
