/* The fused-attention family's level kernels: their types and the family's table (one per
 * level, exported by mc_attn_generic.c and mc_attn_<isa>.c, resolved by runtime/mc_kernels.c).
 * The level files, the scalar twins and the kernel tables include this header; the drivers' API
 * is mc_attn.h, which includes it, and the family's design is at its top.
 */
#ifndef MC_ATTN_KERNELS_H_
#define MC_ATTN_KERNELS_H_

#include <stdint.h>
#include "mc_checked.h"

#define MC_ATTN_KC 1024            /* float32-panel GEMM kernels' default KC */
#define MC_ATTN_KC_PAIRS 2048      /* bfloat16-pair kernel's default KC (1024 pairs) */
#define MC_ATTN_MASKED (-1e9f)

typedef struct {
    int64_t b, h, t, s, d, dv;
    const char *q; int64_t q_st[4];      /* (B, H, T, D) byte strides */
    const char *k; int64_t k_st[4];      /* (B, H, S, D) */
    const char *v; int64_t v_st[4];      /* (B, H, S, Dv) */
    int type;                            /* MC_F16 / MC_BF16 / MC_F32: q, k, v and p */
    const unsigned char *mask; int64_t m_st[4];   /* (B, H, T, S) or NULL */
    int causal;
    char *out; int64_t o_st[4]; int out_type;      /* (B, H, T, Dv) */
    float scale;
} mc_attn_args;

/* Computes unit bh = b * H + h; work as in design e. */
typedef void (*mc_attn_unit_fn)(const mc_attn_args *a, int64_t bh, void *work);

typedef struct {
    mc_attn_unit_fn unit;
} mc_attn_table;

extern const mc_attn_table mc_attn_table_generic;
extern const mc_attn_table mc_attn_table_avx2;
extern const mc_attn_table mc_attn_table_avx512;
extern const mc_attn_table mc_attn_table_avx512bf16;

/* Row length of the float32 buffers: n rounded up to 16. */
static inline int64_t mc_attn_pad16_(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* Bytes of workspace a unit needs (design e): K^T and V (with 64 floats of slack after each,
 * which the vector tiles may read past their last row), four rows of query, scores,
 * probabilities and output, V as bfloat16 pairs (with the same slack) and two bfloat16 scratch
 * rows (mc_attn_avx512bf16.c); -1 when the count overflows or exceeds MC_BYTES_MAX
 * (mc_checked.h: D, S and Dv come from the caller's shapes, broadcast views included). */
static inline int64_t mc_attn_work_bytes(const mc_attn_args *a)
{
    const int64_t sp = mc_size_round_up(a->s, 16), dvp = mc_size_round_up(a->dv, 16);
    const int64_t dp = mc_size_round_up(a->d, 16);
    const int64_t rows = mc_size_mul(mc_size_add(mc_size_add(mc_size_mul(sp, 2), dp), dvp), 4);
    const int64_t floats = mc_size_add(mc_size_add(mc_size_mul(a->d, sp), mc_size_mul(a->s, dvp)),
                                       mc_size_add(rows, 128));
    const int64_t pairs = mc_size_add(mc_size_mul(mc_size_add(a->s, 1) / 2, dvp), 64);
    const int64_t scratch = mc_size_add(dp > dvp ? dp : dvp, 32);      /* two rows of 16 bits */
    const int64_t words = mc_size_add(mc_size_add(floats, pairs), scratch);
    return mc_size_bytes(mc_size_add(mc_size_add(mc_size_mul(words, 4),
                                                 mc_size_mul(mc_size_add(sp, 8), 8)), 512), 1);
}

#endif
