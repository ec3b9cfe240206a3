/* The conversion driver mc_cast() at every level, one and several threads, against the scalar
 * twins of mc_convert_scalar.h, bit for bit: every pair of the four types, contiguous runs of
 * many lengths (vector tails, 0, 1, above the threading threshold), strided, reversed,
 * transposed and broadcast sources, 0-d arrays, and the refusal of bad arguments. */
#include "ctest.h"

#include "mc_convert.h"
#include "mc_convert_scalar.h"

/* The twin of one element. */
static uint64_t ref_cast(int s, int d, uint64_t v)
{
    if (s == d)
        return v;
    switch (s * MC_NDTYPES + d) {
    case MC_F16 * 4 + MC_BF16: return mc_f16_to_bf16_bits((uint16_t)v);
    case MC_F16 * 4 + MC_F32: return mc_f16_to_f32_bits((uint16_t)v);
    case MC_F16 * 4 + MC_F64: return mc_f16_to_f64_bits((uint16_t)v);
    case MC_BF16 * 4 + MC_F16: return mc_bf16_to_f16_bits((uint16_t)v);
    case MC_BF16 * 4 + MC_F32: return mc_bf16_to_f32_bits((uint16_t)v);
    case MC_BF16 * 4 + MC_F64: return mc_bf16_to_f64_bits((uint16_t)v);
    case MC_F32 * 4 + MC_F16: return mc_f32_to_f16_bits((uint32_t)v);
    case MC_F32 * 4 + MC_BF16: return mc_f32_to_bf16_bits((uint32_t)v);
    case MC_F32 * 4 + MC_F64: return mc_f32_to_f64_bits((uint32_t)v);
    case MC_F64 * 4 + MC_F16: return mc_f64_to_f16_bits(v);
    case MC_F64 * 4 + MC_BF16: return mc_f64_to_bf16_bits(v);
    default: return mc_f64_to_f32_bits(v);
    }
}

/* A 2-D case: rows x cols, source strides (element units, any sign), destination C-ordered or
 * transposed (Fortran-ordered). */
static void check_2d(int s, int d, int64_t rows, int64_t cols, int64_t srs, int64_t scs,
                     int dst_fortran)
{
    const int ss = ct_itemsize(s), ds = ct_itemsize(d);
    const int64_t n = rows * cols;
    /* the source spans every element its strides reach */
    const int64_t span = (rows > 0 ? (rows - 1) * (srs < 0 ? -srs : srs) : 0) +
                         (cols > 0 ? (cols - 1) * (scs < 0 ? -scs : scs) : 0) + 1;
    char *src = (char *)ct_alloc_marked(span * ss);
    char *dst = (char *)ct_alloc_marked(n * ds);
    ct_fill(s, src, span, ss, CT_ANY);
    /* the first element: the lowest address plus what negative strides go back */
    const int64_t first = (srs < 0 ? -(rows - 1) * srs : 0) + (scs < 0 ? -(cols - 1) * scs : 0);
    const char *base = src + first * ss;
    const int64_t shape[2] = {rows, cols};
    const int64_t sstr[2] = {srs * ss, scs * ss};
    const int64_t dstr[2] = {dst_fortran ? ds : cols * ds, dst_fortran ? rows * ds : ds};
    ct_context("%s -> %s, %lldx%lld, source strides (%lld, %lld), %s destination",
               ct_type_name(s), ct_type_name(d), (long long)rows, (long long)cols,
               (long long)srs, (long long)scs, dst_fortran ? "Fortran" : "C");
    CT_CHECK(mc_cast(base, s, sstr, dst, d, dstr, 2, shape) == MC_CAST_OK, "status");
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            const uint64_t v = ct_load(base + i * sstr[0] + j * sstr[1], ss);
            const uint64_t got = ct_load(dst + i * dstr[0] + j * dstr[1], ds);
            if (!CT_CHECK_BITS(got, ref_cast(s, d, v), "dst", i * cols + j))
                goto done;
        }
done:
    CT_CHECK(ct_marks_intact(dst, n * ds), "bytes past the output written");
    free(src);
    free(dst);
}

/* A contiguous run of n elements (1-D). */
static void check_run(int s, int d, int64_t n)
{
    const int ss = ct_itemsize(s), ds = ct_itemsize(d);
    char *src = (char *)ct_alloc_marked(n * ss);
    char *dst = (char *)ct_alloc_marked(n * ds);
    ct_fill(s, src, n, ss, CT_ANY);
    const int64_t shape[1] = {n}, sstr[1] = {ss}, dstr[1] = {ds};
    ct_context("%s -> %s, %lld contiguous", ct_type_name(s), ct_type_name(d), (long long)n);
    CT_CHECK(mc_cast(src, s, sstr, dst, d, dstr, 1, shape) == MC_CAST_OK, "status");
    for (int64_t i = 0; i < n; ++i)
        if (!CT_CHECK_BITS(ct_load(dst + i * ds, ds), ref_cast(s, d, ct_load(src + i * ss, ss)),
                           "dst", i))
            break;
    CT_CHECK(ct_marks_intact(dst, n * ds), "bytes past the output written");
    free(src);
    free(dst);
}

static void check_edges(void)
{
    /* a 0-d array: one element, no dimensions */
    uint32_t x = 0x3FC00001u;
    uint16_t y = 0;
    ct_context("0-d float32 -> float16");
    CT_CHECK(mc_cast((const char *)&x, MC_F32, NULL, (char *)&y, MC_F16, NULL, 0, NULL) ==
                 MC_CAST_OK, "status");
    CT_CHECK_BITS(y, mc_f32_to_f16_bits(x), "dst", 0);
    /* nothing to convert: nothing written */
    const int64_t shape0[2] = {3, 0}, str[2] = {0, 4};
    y = 0x1234;
    ct_context("zero-size");
    CT_CHECK(mc_cast((const char *)&x, MC_F32, str, (char *)&y, MC_F16, str, 2, shape0) ==
                 MC_CAST_OK, "status");
    CT_CHECK(y == 0x1234, "a zero-size conversion wrote");
    /* bad arguments: refused, nothing written */
    const int64_t shape1[1] = {1}, s4[1] = {4}, s2[1] = {2};
    ct_context("bad arguments");
    CT_CHECK(mc_cast((const char *)&x, 7, s4, (char *)&y, MC_F16, s2, 1, shape1) ==
                 MC_CAST_EINVAL, "bad source type accepted");
    CT_CHECK(mc_cast((const char *)&x, MC_F32, s4, (char *)&y, -1, s2, 1, shape1) ==
                 MC_CAST_EINVAL, "bad destination type accepted");
    CT_CHECK(mc_cast((const char *)&x, MC_F32, s4, (char *)&y, MC_F16, s2, MC_CAST_MAXDIMS + 1,
                     shape1) == MC_CAST_EINVAL, "too many dimensions accepted");
    CT_CHECK(y == 0x1234, "a refused conversion wrote");
}

int main(int argc, char **argv)
{
    static const int64_t sizes[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129,
                                    1000, 4099};
    ct_init(argc, argv);
    for (int level = 0; level < ct_levels(); ++level) {
        ct_set_level(level);
        for (int threads = 1; threads <= CT_THREADS; threads += CT_THREADS - 1) {
            ct_set_threads(threads);
            ct_seed(1 + (uint64_t)level * 16 + (uint64_t)threads);
            for (int s = 0; s < MC_NDTYPES; ++s)
                for (int d = 0; d < MC_NDTYPES; ++d) {
                    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
                        check_run(s, d, sizes[i]);
                    check_2d(s, d, 5, 33, 3 * 33, 3, 0);      /* odd column stride */
                    check_2d(s, d, 7, 19, -19, -1, 0);        /* reversed */
                    check_2d(s, d, 9, 17, 1, 9, 0);           /* transposed source */
                    check_2d(s, d, 17, 9, 9, 1, 1);           /* Fortran-ordered destination */
                    check_2d(s, d, 6, 40, 0, 1, 0);           /* broadcast rows */
                    check_2d(s, d, 1, 70, 0, -3, 0);
                }
            /* above the threading threshold (1 << 16 elements): one run, and strided rows */
            check_run(MC_F32, MC_F16, 70001);
            check_run(MC_F64, MC_BF16, 70001);
            check_run(MC_F16, MC_F32, 200003);
            check_2d(MC_F32, MC_BF16, 301, 257, 2 * 257, 2, 0);
            check_2d(MC_BF16, MC_F32, 257, 301, 1, 257, 0);
        }
    }
    check_edges();
    return ct_finish();
}
