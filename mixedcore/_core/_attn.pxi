# Fused attention driver: O = softmax(scale * Q K^T + mask) V per (batch item, head).
#
# Design:
#   a. The caller (mixedcore.kernels._attn) has validated everything: q (B, H, T, D), k (B, H,
#      S, D), v (B, H, S, Dv) of one float16 / bfloat16 / float32 dtype, native and aligned, any
#      strides; the mask a bool array of four dimensions broadcast to (B, H, T, S) (strides 0
#      where it broadcasts) or None; out (B, H, T, Dv), writable, not overlapping the inputs.
#   b. One unit per (batch item, head), taken dynamically by the team (src/mc_attn.h design b);
#      each thread's scratch is its MC_WS_WORK workspace.  The GIL is released.

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
    ctypedef void (*mc_attn_unit_fn)(const mc_attn_args *a, int64_t bh, void *work) noexcept nogil
    int64_t mc_attn_work_bytes(const mc_attn_args *a)

cdef extern from "mc_kernels.h" nogil:
    mc_attn_unit_fn mc_attn_unit_kernel(int level)

cdef extern from "mc_runtime.h" nogil:
    int MC_WS_WORK
    void *mc_workspace(int slot, int64_t bytes)

# multiply-adds below which an attention call stays on one thread
cdef int64_t ATTN_PARALLEL_MIN = 1 << 16

ctypedef struct _attn_job:
    mc_attn_args args
    mc_attn_unit_fn fn
    int64_t work_bytes
    int nomem


cdef void _attn_unit(void *ctx, int64_t u) noexcept nogil:
    cdef _attn_job *job = <_attn_job *>ctx
    cdef void *work = mc_workspace(MC_WS_WORK, job.work_bytes)
    if work == NULL:
        mc_flag_set(&job.nomem)
        return
    job.fn(&job.args, u, work)


cdef void _attn_strides(cnp.ndarray a, int64_t *st):
    cdef int i
    for i in range(4):
        st[i] = cnp.PyArray_STRIDES(a)[i]


def attention(cnp.ndarray q, cnp.ndarray k, cnp.ndarray v, mask, cnp.ndarray out, int type_code,
              int out_code, double scale, bint causal):
    """The fused attention of validated arrays (design a) into ``out``."""
    cdef _attn_job job
    cdef cnp.ndarray m
    cdef int nthreads
    cdef int64_t units, work
    cdef int i
    job.args.b = q.shape[0]
    job.args.h = q.shape[1]
    job.args.t = q.shape[2]
    job.args.d = q.shape[3]
    job.args.s = k.shape[2]
    job.args.dv = v.shape[3]
    job.args.q = <const char *>cnp.PyArray_DATA(q)
    job.args.k = <const char *>cnp.PyArray_DATA(k)
    job.args.v = <const char *>cnp.PyArray_DATA(v)
    _attn_strides(q, job.args.q_st)
    _attn_strides(k, job.args.k_st)
    _attn_strides(v, job.args.v_st)
    job.args.type = type_code
    if mask is None:
        job.args.mask = NULL
        for i in range(4):
            job.args.m_st[i] = 0
    else:
        m = mask
        job.args.mask = <const unsigned char *>cnp.PyArray_DATA(m)
        _attn_strides(m, job.args.m_st)
    job.args.causal = causal
    job.args.out = <char *>cnp.PyArray_DATA(out)
    _attn_strides(out, job.args.o_st)
    job.args.out_type = out_code
    job.args.scale = <float>scale
    job.fn = mc_attn_unit_kernel(mc_rt_level())
    job.work_bytes = mc_attn_work_bytes(&job.args)
    job.nomem = 0
    units = job.args.b * job.args.h
    if units == 0 or job.args.t == 0:
        return
    work = units * job.args.t * job.args.s * (job.args.d + job.args.dv)
    with nogil:
        nthreads = mc_rt_threads_for(work, ATTN_PARALLEL_MIN)
        if nthreads > units:
            nthreads = <int>units
        mc_run(_attn_unit, &job, units, nthreads)
    if mc_flag_get(&job.nomem):
        raise MemoryError("attention: out of memory for the per-thread workspace "
                          f"({job.work_bytes} bytes)")
