/* The weight-only quantized GEMM family's level kernels: the packed weights, the kernel types
 * and the family's table (one per level, exported by mc_wgemm_generic.c and mc_wgemm_<isa>.c,
 * resolved by runtime/mc_kernels.c).  The driver's API is mc_wgemm.h, which includes this
 * header; the family's design is at its top.
 */
#ifndef MC_WGEMM_KERNELS_H_
#define MC_WGEMM_KERNELS_H_

#include <stdint.h>

/* Columns per packed panel, and padded rows per 8-row block of an int4 panel. */
#define MC_WGEMM_NW 16
#define MC_WGEMM_KB 8

/* Weights packed once (mc_wgemm_pack; mc_wgemm.h, design b).  Row r of group g sits at padded
 * row g * kg + (r - g * block); rows past a group's end (to kg) hold a zero weight. */
typedef struct {
    int64_t k, n;              /* the matrix */
    int bits;                  /* 4 or 8 */
    int grouped;               /* 0: y = s / scale[j]; 1: y = sum_g scale[g, j] * s_g */
    int64_t block;             /* rows per group (k when per channel) */
    int64_t groups, kg;        /* groups; rows per group padded to a multiple of 8 */
    int64_t panels;            /* ceil(n / 16) */
    int64_t pbytes;            /* bytes per panel: groups * kg * 16 / (8 / bits) */
    uint8_t *q;                /* the panels, 64-byte aligned */
    float *scale;              /* groups x panels * 16 (1 in the padded columns) */
    float *off;                /* groups x panels * 16: code - off is the weight (int4: the
                                  code is q + 8 and off 8 + zero; int8: q and zero) */
    int pairs_ok;              /* int4 with every off in [0, 16]: the bfloat16-pair kernel
                                  takes it (mc_wgemm.h, design e) */
    int64_t nbytes;            /* bytes of q, scale and off */
    void *mem;                 /* the one allocation, NULL when empty */
} mc_wpacked;

/* The float32 sums of rows [0, mr) of `a` (mr <= MC_WGEMM_MR; row i at a + i * lda, padded
 * rows as in mc_wpacked, zero in the padding) against panels [p0, p0 + np) of w, after the
 * scale (mc_wgemm.h, design a), into tile (row i at tile + i * ldt, np * 16 values).  `a` is
 * float32 for `dot`, bfloat16 pairs for `dot_bf16` (design e). */
typedef void (*mc_wgemm_dot_fn)(const mc_wpacked *w, const void *a, int64_t lda, int mr,
                                int64_t p0, int64_t np, float *tile, int64_t ldt);
/* Padded rows [r0, r0 + rows) (a multiple of 8, inside one group g) of panels [p0, p0 + np)
 * as float32 rows of nr values (k-major, as gemm's micro-kernels read B), the columns past
 * np * 16 zero. */
typedef void (*mc_wgemm_widen_fn)(const mc_wpacked *w, int64_t g, int64_t r0, int64_t rows,
                                  int64_t p0, int np, int nr, float *dst);

/* Padded rows of group g of panels [p0, p0 + np) as bfloat16 pairs in gemm's pair panel format
 * (kg / 2 rows of nr 32-bit words, one per column, k-major) with the halves swapped: the word
 * of pair t holds the weight of row 2t in its high half and that of row 2t + 1 in its low half,
 * the order the small-M pair kernel reads (mc_wgemm.h, design g); the columns past np * 16
 * zero.  int4 with pairs_ok, or int8 (every weight an integer of at most 8 significant bits,
 * so exact in bfloat16). */
typedef void (*mc_wgemm_widen_pairs_fn)(const mc_wpacked *w, int64_t g, int64_t p0, int np,
                                        int nr, uint32_t *dst);

/* The scale step of rows [0, mr) x columns [0, nc) of a tile of group sums (row length ldt)
 * into the totals `tot` (row length ldo), with scale[c] the group's scales of those columns:
 * MC_WGEMM_DIV tot = s / scale; MC_WGEMM_FIRST tot = fmaf(s, scale, +0); MC_WGEMM_NEXT
 * tot = fmaf(s, scale, tot) (design a). */
typedef void (*mc_wgemm_combine_fn)(const float *tile, int64_t ldt, int mr, int nc,
                                    const float *scale, float *tot, int64_t ldo, int mode);
enum { MC_WGEMM_DIV = 0, MC_WGEMM_FIRST = 1, MC_WGEMM_NEXT = 2 };

#define MC_WGEMM_MR 4

typedef struct {
    mc_wgemm_dot_fn dot;       /* float32 rows, every format */
    mc_wgemm_dot_fn dot_bf16;  /* bfloat16-pair rows, int4 with pairs_ok; NULL when none */
    mc_wgemm_widen_fn widen;
    mc_wgemm_combine_fn combine;
    mc_wgemm_widen_pairs_fn widen_pairs;   /* NULL below the avx512bf16 level */
} mc_wgemm_table;

extern const mc_wgemm_table mc_wgemm_table_generic;
extern const mc_wgemm_table mc_wgemm_table_avx2;
extern const mc_wgemm_table mc_wgemm_table_avx512;
extern const mc_wgemm_table mc_wgemm_table_avx512bf16;

#endif
