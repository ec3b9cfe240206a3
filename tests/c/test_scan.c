/* The scan driver (mc_scan_all_finite, mc_scan_unscale, mc_scan_stats) at every level, one and
 * several threads, against the scalar twins of mc_scan_scalar.h, bit for bit: contiguous runs
 * of many lengths (vector tails, 0, 1, above the threading threshold), strided, reversed,
 * transposed and broadcast views, many arrays of mixed types in one call, 0-d arrays, small work
 * pieces (the splitting exercised on small inputs), and the refusals of unscale (an array
 * reaching an element twice, arrays whose extents intersect), which write nothing. */
#include "ctest.h"

#include "mc_scan.h"
#include "mc_scan_scalar.h"

/* An array view of up to 3 dimensions on a buffer of its own. */
typedef struct {
    int type, nd;
    int64_t shape[3], strides[3];   /* strides in bytes */
    char *buf;                      /* the allocation */
    int64_t bytes;                  /* its size */
    char *data;                     /* the first element */
} view;

/* A view of `shape` with strides in elements (any sign, 0 for broadcast), on a new buffer
 * filled with ct_random_bits(mode). */
static view make(int type, int nd, const int64_t *shape, const int64_t *estrides, int mode)
{
    view v;
    const int is = ct_itemsize(type);
    int64_t lo = 0, hi = 0, size = 1;
    v.type = type;
    v.nd = nd;
    for (int k = 0; k < nd; ++k) {
        v.shape[k] = shape[k];
        v.strides[k] = estrides[k] * is;
        size *= shape[k];
        if (shape[k] > 0) {
            if (estrides[k] < 0)
                lo += (shape[k] - 1) * estrides[k];
            else
                hi += (shape[k] - 1) * estrides[k];
        }
    }
    const int64_t n = size ? hi - lo + 1 : 1;
    v.bytes = n * is;
    v.buf = (char *)ct_alloc_marked(v.bytes);
    ct_fill(type, v.buf, n, is, mode);
    v.data = v.buf - lo * is;
    return v;
}

static view make1(int type, int64_t n, int mode)
{
    const int64_t shape[1] = {n}, one[1] = {1};
    return make(type, 1, shape, one, mode);
}

static int64_t size_of(const view *v)
{
    int64_t n = 1;
    for (int k = 0; k < v->nd; ++k)
        n *= v->shape[k];
    return n;
}

/* Element e (C order over the view's indices). */
static char *at(const view *v, int64_t e)
{
    char *p = v->data;
    for (int k = v->nd - 1; k >= 0; --k) {
        p += (e % v->shape[k]) * v->strides[k];
        e /= v->shape[k];
    }
    return p;
}

static mc_scan_array desc(const view *v)
{
    mc_scan_array a;
    a.data = v->data;
    a.type = v->type;
    a.nd = v->nd;
    a.shape = v->shape;
    a.strides = v->strides;
    return a;
}

static int ref_all_finite(const view *vs, int count)
{
    for (int i = 0; i < count; ++i)
        for (int64_t e = 0; e < size_of(&vs[i]); ++e)
            if (!ct_is_finite(vs[i].type, ct_load(at(&vs[i], e), ct_itemsize(vs[i].type))))
                return 0;
    return 1;
}

static void check_all_finite(const view *vs, int count, const char *what)
{
    mc_scan_array a[64];
    int finite = -1;
    int64_t index = -1;
    for (int i = 0; i < count; ++i)
        a[i] = desc(&vs[i]);
    ct_context("all_finite, %s", what);
    CT_CHECK(mc_scan_all_finite(a, count, &finite, &index) == MC_SCAN_OK, "status");
    CT_CHECK(finite == ref_all_finite(vs, count), "got %d", finite);
}

/* all_finite of one view, as filled (finite), then with one non-finite element at a few
 * positions. */
static void all_finite_positions(view *v, const char *what)
{
    static const uint64_t bad[MC_NDTYPES] = {0x7C00, 0xFFC1, 0x7F800001,
                                             UINT64_C(0xFFF0000000000000)};
    const int64_t n = size_of(v);
    const int is = ct_itemsize(v->type);
    check_all_finite(v, 1, what);
    const int64_t pos[4] = {0, n / 2, n - 1, n > 3 ? n - 3 : 0};
    for (int p = 0; p < 4 && n > 0; ++p) {
        char *e = at(v, pos[p]);
        const uint64_t keep = ct_load(e, is);
        ct_store(e, is, bad[v->type]);
        check_all_finite(v, 1, what);
        ct_store(e, is, keep);
    }
}

static void test_all_finite(void)
{
    static const int64_t sizes[] = {0, 1, 2, 7, 15, 16, 17, 31, 33, 63, 64, 65, 255, 256, 257,
                                    1000, 4099, 40000};
    char what[96];
    for (int t = 0; t < MC_NDTYPES; ++t) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
            view v = make1(t, sizes[i], CT_FINITE);
            snprintf(what, sizeof what, "%s, %lld contiguous", ct_type_name(t),
                     (long long)sizes[i]);
            all_finite_positions(&v, what);
            free(v.buf);
        }
        /* strided, reversed, transposed, broadcast */
        static const int64_t shapes[][2] = {{37, 29}, {29, 37}, {64, 3}, {5, 300}};
        static const int64_t strides[][2] = {{3 * 29, 3}, {-37, -1}, {1, 64}, {0, 1}};
        for (int k = 0; k < 4; ++k) {
            view v = make(t, 2, shapes[k], strides[k], CT_FINITE);
            snprintf(what, sizeof what, "%s, %lldx%lld strides (%lld, %lld)", ct_type_name(t),
                     (long long)shapes[k][0], (long long)shapes[k][1],
                     (long long)strides[k][0], (long long)strides[k][1]);
            all_finite_positions(&v, what);
            free(v.buf);
        }
    }
    /* above the threading threshold (1 << 20 bytes), contiguous and strided */
    view big = make1(MC_F32, 300001, CT_FINITE);
    all_finite_positions(&big, "float32, 300001 contiguous");
    free(big.buf);
    const int64_t shape[2] = {700, 1001}, str[2] = {2 * 1001, 2};
    view bigs = make(MC_F16, 2, shape, str, CT_FINITE);
    all_finite_positions(&bigs, "float16, 700x1001 every other element");
    free(bigs.buf);
    /* many arrays of every type, with 0-d and empty ones, in one call */
    view vs[40];
    for (int i = 0; i < 40; ++i) {
        const int64_t n = (int64_t)(ct_rand() % 300);
        if (i % 9 == 4) {
            vs[i] = make(i % 4, 0, NULL, NULL, CT_FINITE);
        } else {
            vs[i] = make1(i % 4, i % 13 == 0 ? 0 : n, CT_FINITE);
        }
    }
    check_all_finite(vs, 40, "40 arrays, all finite");
    for (int k = 0; k < 40; k += 7) {
        const int64_t n = size_of(&vs[k]);
        if (n == 0)
            continue;
        const int is = ct_itemsize(vs[k].type);
        char *e = at(&vs[k], n - 1);
        const uint64_t keep = ct_load(e, is);
        ct_store(e, is, is == 2 ? 0x7E00 : is == 4 ? 0x7FC00000 : UINT64_C(0x7FF8000000000000));
        check_all_finite(vs, 40, "40 arrays, one NaN");
        ct_store(e, is, keep);
    }
    for (int i = 0; i < 40; ++i)
        free(vs[i].buf);
    check_all_finite(NULL, 0, "no arrays");
}

/* --- unscale ----------------------------------------------------------------------------------- */

static uint64_t ref_unscale(int type, uint64_t v, float inv32, double inv64)
{
    switch (type) {
    case MC_F16: return mc_f16_unscale_bits((uint16_t)v, inv32);
    case MC_BF16: return mc_bf16_unscale_bits((uint16_t)v, inv32);
    case MC_F32: return mc_f32_unscale_bits((uint32_t)v, inv32);
    default: return mc_f64_unscale_bits(v, inv64);
    }
}

/* Unscales the views in one call; checks every element reached, every byte not reached, the
 * bytes past each buffer and the finite flag. */
static void check_unscale(view *vs, int count, double scale, const char *what)
{
    mc_scan_array a[64];
    char *before[64];
    float inv32;
    double inv64;
    int finite = -1;
    int64_t index = -1;
    mc_reciprocal(scale, &inv32, &inv64);
    for (int i = 0; i < count; ++i) {
        a[i] = desc(&vs[i]);
        before[i] = (char *)malloc((size_t)vs[i].bytes);
        memcpy(before[i], vs[i].buf, (size_t)vs[i].bytes);
    }
    ct_context("unscale by %g, %s", scale, what);
    CT_CHECK(mc_scan_unscale(a, count, scale, 1, &finite, &index) == MC_SCAN_OK, "status");
    int want_finite = 1;
    for (int i = 0; i < count; ++i) {
        const int is = ct_itemsize(vs[i].type);
        /* the expected buffer: the original with every reached element unscaled */
        char *want = before[i];
        const int64_t n = size_of(&vs[i]);
        for (int64_t e = 0; e < n; ++e) {
            char *p = want + (at(&vs[i], e) - vs[i].buf);
            const uint64_t v = ct_load(p, is);
            want_finite &= ct_is_finite(vs[i].type, v);
            ct_store(p, is, ref_unscale(vs[i].type, v, inv32, inv64));
        }
        for (int64_t b = 0; b < vs[i].bytes; b += is)
            if (!CT_CHECK_BITS(ct_load(vs[i].buf + b, is), ct_load(want + b, is), "buffer",
                               b / is))
                break;
        CT_CHECK(ct_marks_intact(vs[i].buf, vs[i].bytes), "bytes past array %d written", i);
        free(before[i]);
    }
    CT_CHECK(finite == want_finite, "finite: got %d, want %d", finite, want_finite);
}

static void test_unscale(void)
{
    static const int64_t sizes[] = {0, 1, 2, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1000, 4099};
    static const double scales[] = {1024.0, 3.0, 0.001};
    char what[96];
    for (int t = 0; t < MC_NDTYPES; ++t) {
        for (int sc = 0; sc < 3; ++sc) {
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
                for (int mode = CT_ANY; mode <= CT_FINITE; ++mode) {
                    view v = make1(t, sizes[i], mode);
                    snprintf(what, sizeof what, "%s, %lld contiguous", ct_type_name(t),
                             (long long)sizes[i]);
                    check_unscale(&v, 1, scales[sc], what);
                    free(v.buf);
                }
            }
            static const int64_t shapes[][2] = {{37, 29}, {29, 37}, {64, 3}};
            static const int64_t strides[][2] = {{3 * 29, 3}, {-37, -1}, {1, 64}};
            for (int k = 0; k < 3; ++k) {
                view v = make(t, 2, shapes[k], strides[k], CT_ANY);
                snprintf(what, sizeof what, "%s, %lldx%lld strides (%lld, %lld)",
                         ct_type_name(t), (long long)shapes[k][0], (long long)shapes[k][1],
                         (long long)strides[k][0], (long long)strides[k][1]);
                check_unscale(&v, 1, scales[sc], what);
                free(v.buf);
            }
        }
    }
    /* above the threading threshold (1 << 19 bytes) */
    view big[2] = {make1(MC_BF16, 300001, CT_FINITE), make1(MC_F64, 70001, CT_FINITE)};
    check_unscale(big, 2, 3.0, "bfloat16 300001 and float64 70001");
    free(big[0].buf);
    free(big[1].buf);
    /* many arrays of every type, 0-d and empty ones among them */
    view vs[30];
    for (int i = 0; i < 30; ++i)
        vs[i] = i % 7 == 3 ? make(i % 4, 0, NULL, NULL, CT_ANY)
                           : make1(i % 4, (int64_t)(ct_rand() % 200), CT_ANY);
    check_unscale(vs, 30, 3.0, "30 arrays");
    for (int i = 0; i < 30; ++i)
        free(vs[i].buf);
}

/* The refusals: nothing written, the array's index reported. */
static void test_unscale_refusals(void)
{
    float buf[64];
    float copy[64];
    int finite = -1;
    int64_t index = -1;
    for (int i = 0; i < 64; ++i)
        buf[i] = (float)i;
    memcpy(copy, buf, sizeof buf);
    const int64_t n16[1] = {16}, s4[1] = {4}, s0[1] = {0};
    const int64_t n8[1] = {8}, s8[1] = {8};
    const int64_t n2x4[2] = {2, 4}, ov[2] = {4, 4};  /* rows overlap: element 1 = row 1 col 0 */
    mc_scan_array a[3];
    ct_context("unscale refusals");
    /* a broadcast array */
    a[0] = (mc_scan_array){(char *)buf, MC_F32, 1, n16, s4};
    a[1] = (mc_scan_array){(char *)(buf + 32), MC_F32, 1, n16, s0};
    CT_CHECK(mc_scan_unscale(a, 2, 2.0, 1, &finite, &index) == MC_SCAN_SELF_OVERLAP &&
                 index == 1, "broadcast: index %lld", (long long)index);
    /* rows that overlap each other */
    a[1] = (mc_scan_array){(char *)(buf + 32), MC_F32, 2, n2x4, ov};
    index = -1;
    CT_CHECK(mc_scan_unscale(a, 2, 2.0, 1, &finite, &index) == MC_SCAN_SELF_OVERLAP &&
                 index == 1, "overlapping rows: index %lld", (long long)index);
    /* two arrays sharing memory, and two interleaved ones (extents intersect) */
    a[1] = (mc_scan_array){(char *)(buf + 8), MC_F32, 1, n16, s4};
    CT_CHECK(mc_scan_unscale(a, 2, 2.0, 1, &finite, &index) == MC_SCAN_MAY_OVERLAP,
             "shared memory accepted");
    a[0] = (mc_scan_array){(char *)buf, MC_F32, 1, n8, s8};
    a[1] = (mc_scan_array){(char *)(buf + 1), MC_F32, 1, n8, s8};
    CT_CHECK(mc_scan_unscale(a, 2, 2.0, 1, &finite, &index) == MC_SCAN_MAY_OVERLAP,
             "interleaved arrays: not reported");
    CT_CHECK(memcmp(buf, copy, sizeof buf) == 0, "a refused unscale wrote");
    /* interleaved arrays, the caller having checked them: both unscaled */
    CT_CHECK(mc_scan_unscale(a, 2, 2.0, 0, &finite, &index) == MC_SCAN_OK && finite == 1,
             "interleaved arrays without the extent check");
    int ok = 1;
    for (int i = 0; i < 16; ++i)
        ok &= buf[i] == (float)i * 0.5f;
    CT_CHECK(ok, "interleaved arrays not unscaled");
    /* a bad descriptor */
    a[0].type = 9;
    CT_CHECK(mc_scan_unscale(a, 1, 2.0, 1, &finite, &index) == MC_SCAN_EINVAL && index == 0,
             "bad type accepted");
    CT_CHECK(mc_scan_all_finite(a, 1, &finite, &index) == MC_SCAN_EINVAL, "bad type accepted");
}

/* --- stats ------------------------------------------------------------------------------------- */

static void check_stats(const view *v, const char *what)
{
    mc_stats got, want;
    int64_t index = -1;
    memset(&want, 0, sizeof want);
    const int is = ct_itemsize(v->type);
    const uint64_t mask = is == 2 ? 0x7FFF : is == 4 ? 0x7FFFFFFF : UINT64_C(0x7FFFFFFFFFFFFFFF);
    /* stride-0 dimensions are scanned once */
    view once = *v;
    for (int k = 0; k < once.nd; ++k)
        if (once.strides[k] == 0)
            once.shape[k] = once.shape[k] ? 1 : 0;
    for (int64_t e = 0; e < size_of(&once); ++e)
        mc_stats_add(&want, &mc_stat_limits_of[v->type], ct_load(at(&once, e), is) & mask);
    const mc_scan_array a = desc(v);
    ct_context("stats, %s", what);
    CT_CHECK(mc_scan_stats(&a, 1, &got, &index) == MC_SCAN_OK, "status");
    for (int k = 0; k < MC_NSTATS; ++k)
        CT_CHECK(got.count[k] == want.count[k], "count %d: got %lld, want %lld", k,
                 (long long)got.count[k], (long long)want.count[k]);
    CT_CHECK_BITS(got.max_bits, want.max_bits, "max_bits", 0);
}

static void test_stats(void)
{
    static const int64_t sizes[] = {0, 1, 2, 7, 15, 16, 17, 33, 63, 64, 65, 1000, 20000};
    char what[96];
    for (int t = 0; t < MC_NDTYPES; ++t) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
            view v = make1(t, sizes[i], CT_ANY);
            snprintf(what, sizeof what, "%s, %lld contiguous", ct_type_name(t),
                     (long long)sizes[i]);
            check_stats(&v, what);
            free(v.buf);
        }
        static const int64_t shapes[][2] = {{37, 29}, {29, 37}, {5, 300}};
        static const int64_t strides[][2] = {{3 * 29, 3}, {-37, -1}, {0, 1}};
        for (int k = 0; k < 3; ++k) {
            view v = make(t, 2, shapes[k], strides[k], CT_ANY);
            snprintf(what, sizeof what, "%s, %lldx%lld strides (%lld, %lld)", ct_type_name(t),
                     (long long)shapes[k][0], (long long)shapes[k][1],
                     (long long)strides[k][0], (long long)strides[k][1]);
            check_stats(&v, what);
            free(v.buf);
        }
        view z = make(t, 0, NULL, NULL, CT_ANY);
        check_stats(&z, "0-d");
        free(z.buf);
    }
    view big = make1(MC_F32, 300001, CT_ANY);
    check_stats(&big, "float32, 300001 contiguous");
    free(big.buf);
}

int main(int argc, char **argv)
{
    ct_init(argc, argv);
    for (int level = 0; level < ct_levels(); ++level) {
        ct_set_level(level);
        for (int threads = 1; threads <= CT_THREADS; threads += CT_THREADS - 1) {
            ct_set_threads(threads);
            ct_seed(7 + (uint64_t)level * 16 + (uint64_t)threads);
            test_all_finite();
            test_unscale();
            test_stats();
            test_unscale_refusals();
            /* every call split into 64-byte pieces and threaded from the first byte */
            int64_t previous[3], ignored[3];
            mc_scan_set_thresholds(0, 0, 64, previous);
            test_all_finite();
            test_unscale();
            test_stats();
            mc_scan_set_thresholds(previous[0], previous[1], previous[2], ignored);
        }
    }
    return ct_finish();
}
