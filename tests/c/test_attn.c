/* The attention family's driver (mc_attention) at every level and 1 or 3 threads, against the
 * scalar twin of mc_attn_scalar.h run unit by unit, bit for bit (mc_attn.h design c: every
 * level gives the same bits).  Every input type with a few output types, no mask, a mask that
 * broadcasts over batch and heads, causal masking, contiguous and (B, T, H, D) layouts, sizes
 * of 1, the vector tails (17, 33 keys) and calls above the threading threshold. */
#include "ctest_extra.h"
#include "mc_attn.h"
#include "mc_attn_scalar.h"

typedef struct {
    int64_t b, h, t, s, d, dv;
} shape_;

static const shape_ shapes_[] = {{1, 1, 1, 1, 1, 1}, {1, 2, 3, 17, 5, 7}, {2, 3, 17, 33, 16, 24},
                                 {1, 1, 5, 40, 33, 3}, {2, 2, 32, 40, 24, 20}, {0, 2, 3, 4, 5, 6},
                                 {2, 2, 0, 4, 5, 6}};
static const int types_[] = {MC_F16, MC_BF16, MC_F32};

/* Byte strides of a (B, H, T, X) array stored contiguously as (B, H, T, X), or as (B, T, H, X)
 * when bthx. */
static void strides_(int64_t b, int64_t h, int64_t t, int64_t x, int es, int bthx, int64_t *st)
{
    (void)b;
    st[3] = es;
    if (bthx) {
        st[1] = x * es;
        st[2] = h * x * es;
        st[0] = t * h * x * es;
    } else {
        st[2] = x * es;
        st[1] = t * x * es;
        st[0] = h * t * x * es;
    }
}

static void check_case(const shape_ *sh, int type, int out_type, int mask_kind, int causal,
                       int bthx)
{
    const int es = mcx_elem_size(type), oes = mcx_elem_size(out_type);
    const int64_t nq = sh->b * sh->h * sh->t * sh->d, nk = sh->b * sh->h * sh->s * sh->d;
    const int64_t nv = sh->b * sh->h * sh->s * sh->dv, no = sh->b * sh->h * sh->t * sh->dv;
    char *q = mcx_alloc((size_t)(nq * es)), *k = mcx_alloc((size_t)(nk * es));
    char *v = mcx_alloc((size_t)(nv * es));
    char *out = mcx_alloc((size_t)(no * oes) + 64), *ref = mcx_alloc((size_t)(no * oes) + 64);
    unsigned char *mask = NULL;
    mcx_fill_typed(q, type, nq, 2.0, 0);
    mcx_fill_typed(k, type, nk, 2.0, 0);
    mcx_fill_typed(v, type, nv, 3.0, 0);
    mc_attn_args a;
    memset(&a, 0, sizeof a);
    a.b = sh->b;
    a.h = sh->h;
    a.t = sh->t;
    a.s = sh->s;
    a.d = sh->d;
    a.dv = sh->dv;
    a.q = q;
    a.k = k;
    a.v = v;
    strides_(sh->b, sh->h, sh->t, sh->d, es, bthx, a.q_st);
    strides_(sh->b, sh->h, sh->s, sh->d, es, 0, a.k_st);
    strides_(sh->b, sh->h, sh->s, sh->dv, es, bthx, a.v_st);
    a.type = type;
    if (mask_kind) {
        /* (1, 1, T, S) broadcast over batch and heads, or the full (B, H, T, S) */
        const int64_t nm = (mask_kind == 1 ? 1 : sh->b * sh->h) * sh->t * sh->s;
        mask = mcx_alloc((size_t)nm + 1);
        for (int64_t i = 0; i < nm; ++i)
            mask[i] = (mcx_next() % 5) != 0;
        a.mask = mask;
        a.m_st[3] = 1;
        a.m_st[2] = sh->s;
        a.m_st[1] = mask_kind == 1 ? 0 : sh->t * sh->s;
        a.m_st[0] = mask_kind == 1 ? 0 : sh->h * sh->t * sh->s;
    }
    a.causal = causal;
    a.out = out;
    strides_(sh->b, sh->h, sh->t, sh->dv, oes, bthx, a.o_st);
    a.out_type = out_type;
    a.scale = sh->d > 0 ? (float)(1.0 / sqrt((double)sh->d)) : 1.0f;

    char where[160];
    snprintf(where, sizeof where,
             "attention b%lld h%lld t%lld s%lld d%lld dv%lld %s -> %s mask %d causal %d%s",
             (long long)sh->b, (long long)sh->h, (long long)sh->t, (long long)sh->s,
             (long long)sh->d, (long long)sh->dv, mcx_type_name(type), mcx_type_name(out_type),
             mask_kind, causal, bthx ? " bthx" : "");
    mcx_case(where);
    MCX_CHECK(mc_attention(&a) == MC_ATTN_OK, "status");

    mc_attn_args r = a;
    r.out = ref;
    const int64_t wb = (mc_attn_work_bytes(&r) + 63) / 64 * 64;
    void *work = aligned_alloc(64, (size_t)wb);
    if (work == NULL) {
        MCX_FAIL("out of memory for the reference workspace");
    } else {
        for (int64_t bh = 0; bh < (sh->t > 0 ? sh->b * sh->h : 0); ++bh)
            mc_attn_unit_scalar_(&r, bh, work);
        free(work);
    }
    if (memcmp(out, ref, (size_t)(no * oes)) != 0) {
        int bad = 0;
        for (int64_t i = 0; i < no && bad < 3; ++i)
            if (mcx_bits_f32(mcx_load(out, out_type, i)) !=
                mcx_bits_f32(mcx_load(ref, out_type, i))) {
                MCX_FAIL("out[%lld] = %a, the twin %a", (long long)i,
                         (double)mcx_load(out, out_type, i), (double)mcx_load(ref, out_type, i));
                ++bad;
            }
    }
    ++mcx_checks_;
    MCX_CHECK(mcx_untouched(out, (size_t)(no * oes), (size_t)(no * oes) + 64),
              "wrote past the end of out");
    free(q);
    free(k);
    free(v);
    free(out);
    free(ref);
    free(mask);
}

static void check_arguments(void)
{
    float q = 1.0f, o = 7.0f;
    mc_attn_args a;
    memset(&a, 0, sizeof a);
    a.b = a.h = a.t = a.s = a.d = a.dv = 1;
    a.q = a.k = a.v = (const char *)&q;
    a.out = (char *)&o;
    a.type = a.out_type = MC_F32;
    a.scale = 1.0f;
    mcx_case("arguments");
    a.t = -1;
    MCX_CHECK(mc_attention(&a) == MC_ATTN_EARG, "t < 0 accepted");
    a.t = 1;
    a.type = MC_F64;
    MCX_CHECK(mc_attention(&a) == MC_ATTN_EARG, "float64 accepted");
    a.type = MC_F32;
    a.out = NULL;
    MCX_CHECK(mc_attention(&a) == MC_ATTN_EARG, "NULL out accepted");
    MCX_CHECK(o == 7.0f, "a refused call wrote");
    a.out = (char *)&o;
    MCX_CHECK(mc_attention(&a) == MC_ATTN_OK && o == 1.0f, "one element: softmax of one, times v");
}

int main(void)
{
    int levels[MC_ISA_COUNT];
    mcx_begin();
    const int nl = mcx_levels(levels);
    static const int threads[] = {1, 3};
    for (int li = 0; li < nl; ++li)
        for (int ti = 0; ti < 2; ++ti) {
            mcx_use(levels[li], threads[ti]);
            mcx_seed(43);
            int k = 0;
            for (size_t s = 0; s < sizeof shapes_ / sizeof shapes_[0]; ++s)
                for (int ty = 0; ty < 3; ++ty)
                    for (int variant = 0; variant < 4; ++variant, ++k)
                        check_case(&shapes_[s], types_[ty], types_[(ty + variant) % 3],
                                   variant % 3, variant == 1 || variant == 3, k % 2);
            check_arguments();
        }
    return mcx_end("test_attn");
}
