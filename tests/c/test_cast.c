/* The conversion driver mc_cast() at every level, one and several threads, against the scalar
 * twins of mc_convert_scalar.h, bit for bit: every pair of the six types (the four wider ones
 * and float8_e4m3fn / float8_e5m2, saturating or not), contiguous runs of many lengths (vector
 * tails, 0, 1, above the threading threshold), strided, reversed, transposed and broadcast
 * sources, 0-d arrays, every float8 rounding boundary, and the refusal of bad arguments. */
#include "ctest.h"

#include "mc_convert.h"
#include "mc_convert_scalar.h"

/* ctest.h's type helpers know the four wider types; these add the float8 ones (one byte,
 * uniformly random bits: all 256 patterns are of interest). */
static int itemsize(int type) { return type < MC_NDTYPES ? ct_itemsize(type) : 1; }
static const char *type_name(int type)
{
    return type == MC_E4M3 ? "float8_e4m3fn" : type == MC_E5M2 ? "float8_e5m2" : ct_type_name(type);
}
static uint64_t load(const char *p, int type)
{
    return type < MC_NDTYPES ? ct_load(p, ct_itemsize(type)) : (uint64_t)(unsigned char)*p;
}
static void fill(int type, char *p, int64_t n, int64_t stride)
{
    if (type < MC_NDTYPES) {
        ct_fill(type, p, n, stride, CT_ANY);
        return;
    }
    for (int64_t i = 0; i < n; ++i)
        p[i * stride] = (char)(ct_rand() & 0xFF);
}

/* A 2-D case: rows x cols, source strides (element units, any sign), destination C-ordered or
 * transposed (Fortran-ordered). */
static void check_2d(int s, int d, int sat, int64_t rows, int64_t cols, int64_t srs, int64_t scs,
                     int dst_fortran)
{
    const int ss = itemsize(s), ds = itemsize(d);
    const int64_t n = rows * cols;
    /* the source spans every element its strides reach */
    const int64_t span = (rows > 0 ? (rows - 1) * (srs < 0 ? -srs : srs) : 0) +
                         (cols > 0 ? (cols - 1) * (scs < 0 ? -scs : scs) : 0) + 1;
    char *src = (char *)ct_alloc_marked(span * ss);
    char *dst = (char *)ct_alloc_marked(n * ds);
    fill(s, src, span, ss);
    /* the first element: the lowest address plus what negative strides go back */
    const int64_t first = (srs < 0 ? -(rows - 1) * srs : 0) + (scs < 0 ? -(cols - 1) * scs : 0);
    const char *base = src + first * ss;
    const int64_t shape[2] = {rows, cols};
    const int64_t sstr[2] = {srs * ss, scs * ss};
    const int64_t dstr[2] = {dst_fortran ? ds : cols * ds, dst_fortran ? rows * ds : ds};
    ct_context("%s -> %s%s, %lldx%lld, source strides (%lld, %lld), %s destination",
               type_name(s), type_name(d), sat ? " saturating" : "", (long long)rows, (long long)cols,
               (long long)srs, (long long)scs, dst_fortran ? "Fortran" : "C");
    CT_CHECK(mc_cast(base, s, sstr, dst, d, dstr, 2, shape, sat) == MC_CAST_OK, "status");
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            const uint64_t v = load(base + i * sstr[0] + j * sstr[1], s);
            const uint64_t got = load(dst + i * dstr[0] + j * dstr[1], d);
            if (!CT_CHECK_BITS(got, mc_cast_bits(s, d, sat, v), "dst", i * cols + j))
                goto done;
        }
done:
    CT_CHECK(ct_marks_intact(dst, n * ds), "bytes past the output written");
    free(src);
    free(dst);
}

/* A contiguous run of n elements (1-D). */
static void check_run(int s, int d, int sat, int64_t n)
{
    const int ss = itemsize(s), ds = itemsize(d);
    char *src = (char *)ct_alloc_marked(n * ss);
    char *dst = (char *)ct_alloc_marked(n * ds);
    fill(s, src, n, ss);
    const int64_t shape[1] = {n}, sstr[1] = {ss}, dstr[1] = {ds};
    ct_context("%s -> %s%s, %lld contiguous", type_name(s), type_name(d),
               sat ? " saturating" : "", (long long)n);
    CT_CHECK(mc_cast(src, s, sstr, dst, d, dstr, 1, shape, sat) == MC_CAST_OK, "status");
    for (int64_t i = 0; i < n; ++i)
        if (!CT_CHECK_BITS(load(dst + i * ds, d), mc_cast_bits(s, d, sat, load(src + i * ss, s)),
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
    CT_CHECK(mc_cast((const char *)&x, MC_F32, NULL, (char *)&y, MC_F16, NULL, 0, NULL, 0) ==
                 MC_CAST_OK, "status");
    CT_CHECK_BITS(y, mc_f32_to_f16_bits(x), "dst", 0);
    /* nothing to convert: nothing written */
    const int64_t shape0[2] = {3, 0}, str[2] = {0, 4};
    y = 0x1234;
    ct_context("zero-size");
    CT_CHECK(mc_cast((const char *)&x, MC_F32, str, (char *)&y, MC_F16, str, 2, shape0, 0) ==
                 MC_CAST_OK, "status");
    CT_CHECK(y == 0x1234, "a zero-size conversion wrote");
    /* bad arguments: refused, nothing written */
    const int64_t shape1[1] = {1}, s4[1] = {4}, s2[1] = {2};
    ct_context("bad arguments");
    CT_CHECK(mc_cast((const char *)&x, 7, s4, (char *)&y, MC_F16, s2, 1, shape1, 0) ==
                 MC_CAST_EINVAL, "bad source type accepted");
    CT_CHECK(mc_cast((const char *)&x, MC_NCASTTYPES, s4, (char *)&y, MC_F16, s2, 1, shape1, 0) ==
                 MC_CAST_EINVAL, "source type MC_NCASTTYPES accepted");
    CT_CHECK(mc_cast((const char *)&x, MC_F32, s4, (char *)&y, -1, s2, 1, shape1, 0) ==
                 MC_CAST_EINVAL, "bad destination type accepted");
    CT_CHECK(mc_cast((const char *)&x, MC_F32, s4, (char *)&y, MC_NCASTTYPES, s2, 1, shape1, 0) ==
                 MC_CAST_EINVAL, "destination type MC_NCASTTYPES accepted");
    CT_CHECK(mc_cast((const char *)&x, MC_F32, s4, (char *)&y, MC_F16, s2, MC_CAST_MAXDIMS + 1,
                     shape1, 0) == MC_CAST_EINVAL, "too many dimensions accepted");
    CT_CHECK(mc_cast((const char *)&x, MC_F32, s4, (char *)&y, MC_F16, s2, 1, shape1, 1) ==
                 MC_CAST_EINVAL, "saturating to float16 accepted");
    const int64_t s1[1] = {1};
    CT_CHECK(mc_cast((const char *)&x, MC_F32, s4, (char *)&y, MC_E4M3, s1, 1, shape1, 2) ==
                 MC_CAST_EINVAL, "saturate = 2 accepted");
    CT_CHECK(y == 0x1234, "a refused conversion wrote");
}

/* float32 sources at every float8 rounding boundary: each float8 magnitude's float32 value,
 * the midpoints to its neighbours, and their float32 neighbours, both signs; then the same
 * values as float64 (and one ulp of float64 around them, where rounding to float32 first
 * decides ties), through the driver at the current level. */
static void check_f8_boundaries(int d, int sat)
{
    enum { N = 128 * 2 * 5 * 2 };
    uint32_t *src = (uint32_t *)ct_alloc_marked(N * 4);
    uint64_t *src64 = (uint64_t *)ct_alloc_marked(N * 2 * 8);
    int64_t n = 0;
    for (uint32_t m = 0; m < 128; ++m) {
        const uint32_t lo = (uint32_t)mc_cast_bits(d, MC_F32, 0, m);
        const uint32_t hi = (uint32_t)mc_cast_bits(d, MC_F32, 0, m + 1);
        const double a = (double)ct_f32(lo);
        const double prev = m ? (double)ct_f32((uint32_t)mc_cast_bits(d, MC_F32, 0, m - 1)) : 0;
        double b = (double)ct_f32(hi);
        if (!(b == b) || b > 1e30)    /* above the largest finite value: its spacing continued */
            b = a + (a - prev);
        const uint32_t mid = a == a && a < 1e30 ? ct_bits32((float)((a + b) / 2)) : lo;
        for (int k = 0; k < 2; ++k) {
            const uint32_t c = k ? mid : lo;
            for (int dd = -2; dd <= 2; ++dd)
                for (int sign = 0; sign < 2; ++sign)
                    src[n++] = (c + (uint32_t)dd) ^ (sign ? 0x80000000u : 0u);
        }
    }
    char *dst = (char *)ct_alloc_marked(N * 2);
    const int64_t shape[1] = {n}, s4[1] = {4}, s8[1] = {8}, s1[1] = {1};
    ct_context("float32 -> %s%s at the rounding boundaries", type_name(d), sat ? " saturating" : "");
    CT_CHECK(mc_cast((const char *)src, MC_F32, s4, dst, d, s1, 1, shape, sat) == MC_CAST_OK, "status");
    for (int64_t i = 0; i < n; ++i)
        if (!CT_CHECK_BITS((unsigned char)dst[i], mc_cast_bits(MC_F32, d, sat, src[i]), "dst", i))
            break;
    CT_CHECK(ct_marks_intact(dst, n), "bytes past the output written");
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t x = ct_bits64((double)ct_f32(src[i]));
        src64[2 * i] = x + 1;
        src64[2 * i + 1] = x - 1;
    }
    const int64_t shape2[1] = {2 * n};
    ct_context("float64 -> %s%s at the rounding boundaries", type_name(d), sat ? " saturating" : "");
    CT_CHECK(mc_cast((const char *)src64, MC_F64, s8, dst, d, s1, 1, shape2, sat) == MC_CAST_OK, "status");
    for (int64_t i = 0; i < 2 * n; ++i)
        if (!CT_CHECK_BITS((unsigned char)dst[i], mc_cast_bits(MC_F64, d, sat, src64[i]), "dst", i))
            break;
    CT_CHECK(ct_marks_intact(dst, 2 * n), "bytes past the output written");
    free(src);
    free(src64);
    free(dst);
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
            for (int s = 0; s < MC_NCASTTYPES; ++s)
                for (int d = 0; d < MC_NCASTTYPES; ++d)
                    for (int sat = 0; sat <= (d >= MC_E4M3); ++sat) {
                        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
                            check_run(s, d, sat, sizes[i]);
                        check_2d(s, d, sat, 5, 33, 3 * 33, 3, 0);      /* odd column stride */
                        check_2d(s, d, sat, 7, 19, -19, -1, 0);        /* reversed */
                        check_2d(s, d, sat, 9, 17, 1, 9, 0);           /* transposed source */
                        check_2d(s, d, sat, 17, 9, 9, 1, 1);           /* Fortran-ordered destination */
                        check_2d(s, d, sat, 6, 40, 0, 1, 0);           /* broadcast rows */
                        check_2d(s, d, sat, 1, 70, 0, -3, 0);
                    }
            for (int d = MC_E4M3; d < MC_NCASTTYPES; ++d)
                for (int sat = 0; sat <= 1; ++sat)
                    check_f8_boundaries(d, sat);
            /* above the threading threshold (1 << 16 elements): one run, and strided rows */
            check_run(MC_F32, MC_F16, 0, 70001);
            check_run(MC_F64, MC_BF16, 0, 70001);
            check_run(MC_F16, MC_F32, 0, 200003);
            check_run(MC_F32, MC_E4M3, 0, 70001);
            check_run(MC_F32, MC_E5M2, 1, 70001);
            check_run(MC_E4M3, MC_BF16, 0, 200003);
            check_2d(MC_F32, MC_BF16, 0, 301, 257, 2 * 257, 2, 0);
            check_2d(MC_BF16, MC_F32, 0, 257, 301, 1, 257, 0);
            check_2d(MC_E5M2, MC_F32, 0, 257, 301, 1, 257, 0);
        }
    }
    check_edges();
    return ct_finish();
}
