# Fused attention entry point: O = softmax(scale * Q K^T + mask) V per (batch item, head).
#
# Design:
#   a. The caller (mixedcore.kernels._attn) has validated everything: q (B, H, T, D), k (B, H,
#      S, D), v (B, H, S, Dv) of one float16 / bfloat16 / float32 dtype, native and aligned, any
#      strides; the mask a bool array of four dimensions broadcast to (B, H, T, S) (strides 0
#      where it broadcasts) or None; out (B, H, T, Dv), writable, not overlapping the inputs.
#   b. The plan (level, threads, one unit per (batch item, head), per-thread workspaces) is made
#      in C (src/attn/mc_attn.c); this module fills the descriptor and releases the GIL.

cdef extern from "mc_attn.h" nogil:
    ctypedef struct mc_attn_args:
        int64_t b, h, t, s, d, dv
        const char *q
        int64_t q_st[4]
        const char *k
        int64_t k_st[4]
        const char *v
        int64_t v_st[4]
        int type
        const unsigned char *mask
        int64_t m_st[4]
        int causal
        char *out
        int64_t o_st[4]
        int out_type
        float scale
    int MC_ATTN_OK, MC_ATTN_NOMEM, MC_ATTN_TOOBIG
    int64_t mc_attn_work_bytes(const mc_attn_args *a)
    int mc_attention(const mc_attn_args *a)


cdef void _attn_strides(cnp.ndarray a, int64_t *st):
    cdef int i
    for i in range(4):
        st[i] = cnp.PyArray_STRIDES(a)[i]


def attention(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, mask, cnp.ndarray out, int type_code,
              int out_code, double scale, bint causal):
    """The fused attention of validated arrays (design a) into ``out``."""
    cdef mc_attn_args args
    cdef cnp.ndarray m
    cdef int r
    cdef int i
    args.b = q.shape[0]
    args.h = q.shape[1]
    args.t = q.shape[2]
    args.d = q.shape[3]
    args.s = k.shape[2]
    args.dv = v.shape[3]
    args.q = <const char *>cnp.PyArray_DATA(q)
    args.k = <const char *>cnp.PyArray_DATA(k)
    args.v = <const char *>cnp.PyArray_DATA(v)
    _attn_strides(q, args.q_st)
    _attn_strides(k, args.k_st)
    _attn_strides(v, args.v_st)
    args.type = type_code
    if mask is None:
        args.mask = NULL
        for i in range(4):
            args.m_st[i] = 0
    else:
        m = mask
        args.mask = <const unsigned char *>cnp.PyArray_DATA(m)
        _attn_strides(m, args.m_st)
    args.causal = causal
    args.out = <char *>cnp.PyArray_DATA(out)
    _attn_strides(out, args.o_st)
    args.out_type = out_code
    args.scale = <float>scale
    with nogil:
        r = mc_attention(&args)
    if r == MC_ATTN_NOMEM:
        raise MemoryError("attention: out of memory for the per-thread workspace "
                          f"({mc_attn_work_bytes(&args)} bytes)")
    if r == MC_ATTN_TOOBIG:
        raise ValueError(f"attention: the per-thread workspace of D = {args.d}, S = {args.s}, "
                         f"Dv = {args.dv} would need more than {MC_BYTES_MAX} bytes")
    if r != MC_ATTN_OK:
        raise ValueError(f"attention: invalid arguments for the C driver (status {r})")
