# Inference plans: a list of kernel calls over numbered buffers run by one C loop.
#
# Design:
#   a. The caller (mixedcore.kernels._plan) has validated every step against the buffers' shapes
#      and dtypes; this module fills the C descriptors (src/plan/mc_plan.h) once, keeps the
#      objects they point into (packed weights, biases, kernels) alive with the plan, and runs
#      ranges of steps with the buffers' addresses, without the GIL.

from libc.stdlib cimport malloc, realloc, free

cdef extern from "mc_act.h" nogil:
    int mc_add_act(int act, const char *a, int a_type, const char *b, int b_type, char *y,
                   int y_type, int64_t n)

cdef extern from "mc_plan.h" nogil:
    int MC_STEP_GEMM, MC_STEP_CONV, MC_STEP_DW, MC_STEP_POOL, MC_STEP_ADD, MC_STEP_NORM
    int MC_STEP_PAD, MC_STEP_IGEMM, MC_STEP_ATTN, MC_STEP_CAST
    int MC_F64
    ctypedef struct mc_pad_call:
        int64_t n, h, w, c, pt, pb, pl, pr, es
    ctypedef struct mc_cast_call:
        int src_type, dst_type
        int64_t n
    ctypedef struct mc_add_call:
        int act, a_type, b_type, y_type
        int64_t n
    ctypedef struct mc_norm_call:
        mc_norm_job job
        int64_t rows
        int q, scale, scale32
        int zero
    ctypedef struct mc_iq_call:
        mc_igemm_call call
        int a_type
        int q, scale, scale32
        int zero
        int quantized
    ctypedef struct mc_attn_call:
        mc_attn_args a
        int64_t q_off, k_off, v_off
    ctypedef union mc_plan_u:
        mc_gemm_call gemm
        mc_conv_call conv
        mc_dw_call dw
        mc_pool_call pool
        mc_add_call add
        mc_norm_call norm
        mc_pad_call pad
        mc_iq_call iq
        mc_attn_call attn
        mc_cast_call cast
    ctypedef struct mc_plan_step:
        int kind
        int src, src2, dst
        int block
        mc_plan_u u
    int MC_PLAN_OK, MC_PLAN_NOMEM, MC_PLAN_FORMAT, MC_PLAN_EARG, MC_PLAN_TOOBIG
    int mc_plan_run(const mc_plan_step *steps, int64_t s0, int64_t s1, char *const *bufs,
                    int64_t *failed)

PLAN_NOMEM = MC_PLAN_NOMEM
PLAN_FORMAT = MC_PLAN_FORMAT
PLAN_TOOBIG = MC_PLAN_TOOBIG


def add_act(cnp.ndarray a, cnp.ndarray b, cnp.ndarray y, int64_t n, int act, int a_type,
            int b_type, int y_type):
    """y = act(a + b) over n contiguous elements (validated by the caller)."""
    cdef const char *ap = _data(a)
    cdef const char *bp = _data(b)
    cdef char *yp = _data(y)
    cdef int r
    with nogil:
        r = mc_add_act(act, ap, a_type, bp, b_type, yp, y_type, n)
    if r != 0:
        raise ValueError("add: bad arguments")


cdef bint _missing_buffer(const mc_plan_step *st, char **bufs, int64_t nb, int *which):
    """Whether the step uses a buffer number that ``bufs`` (nb entries) lacks (in *which)."""
    cdef int ids[7]
    cdef int n = 3, j
    ids[0] = st.src
    ids[1] = st.src2             # -1: none
    ids[2] = st.dst
    if st.kind == MC_STEP_IGEMM:
        ids[3] = st.u.iq.q
        ids[4] = st.u.iq.scale
        ids[5] = st.u.iq.scale32
        ids[6] = st.u.iq.zero    # -1: none
        n = 7
    elif st.kind == MC_STEP_NORM and st.u.norm.q >= 0:
        ids[3] = st.u.norm.q
        ids[4] = st.u.norm.scale
        ids[5] = st.u.norm.scale32
        ids[6] = st.u.norm.zero  # -1: none
        n = 7
    for j in range(n):
        if ids[j] < 0 and (j == 1 or j == 6):
            continue
        if ids[j] < 0 or ids[j] >= nb or bufs[ids[j]] == NULL:
            which[0] = ids[j]
            return True
    return False


cdef class PlanSteps:
    """The C steps of an inference plan (made by ``kernels.Plan``)."""
    cdef mc_plan_step *steps
    cdef int64_t n, cap
    cdef list keep                # objects the descriptors point into
    cdef list blocks              # malloc'd pointer arrays (a convolution's groups)

    def __cinit__(self):
        self.steps = NULL
        self.n = self.cap = 0
        self.keep = []
        self.blocks = []

    def __dealloc__(self):
        cdef object p
        for p in self.blocks:
            free(<void *><uintptr_t>p)
        free(self.steps)

    def __len__(self):
        return self.n

    cdef mc_plan_step *_next(self, int kind, int src, int src2, int dst) except NULL:
        cdef mc_plan_step *grown
        if self.n == self.cap:
            grown = <mc_plan_step *>realloc(self.steps, (self.cap * 2 + 16) * sizeof(mc_plan_step))
            if grown == NULL:
                raise MemoryError("Plan: cannot allocate its steps")
            self.steps = grown
            self.cap = self.cap * 2 + 16
        cdef mc_plan_step *st = &self.steps[self.n]
        memset(st, 0, sizeof(mc_plan_step))
        st.kind = kind
        st.src = src
        st.src2 = src2
        st.dst = dst
        self.n += 1
        return st

    def gemm(self, int src, int dst, PackedMatrix w, int64_t m, int a_type, int out_type,
             object bias, int act, int res=-1):
        """out (m x n, out_type) = act(src (m x k, a_type) @ w + bias), or with a residual
        buffer (m x n, out_type): act(round(src @ w + bias) + res)."""
        cdef mc_plan_step *st = self._next(MC_STEP_GEMM, src, res, dst)
        cdef int64_t ea = 4 if a_type == 2 else 2, eo = 4 if out_type == 2 else 2
        st.u.gemm.g.m = m
        st.u.gemm.g.n = w.p.n
        st.u.gemm.g.k = w.p.k
        st.u.gemm.g.a_rs = w.p.k * ea
        st.u.gemm.g.a_cs = ea
        st.u.gemm.g.a_type = a_type
        st.u.gemm.g.b_type = w.p.type
        st.u.gemm.g.o_rs = w.p.n * eo
        st.u.gemm.g.res_rs = w.p.n * eo
        st.u.gemm.g.o_cs = eo
        st.u.gemm.g.out_type = out_type
        if bias is not None:
            st.u.gemm.g.bias = <const float *>_data(<cnp.ndarray>bias)
            st.u.gemm.g.bias_s = 4 if w.p.n > 1 else 0   # one value per column
        st.u.gemm.g.act = act
        st.u.gemm.alpha = 1.0
        st.u.gemm.beta = 0.0
        st.u.gemm.batch = 1
        st.u.gemm.packed = &w.p
        self.keep += [w, bias]

    def igemm(self, int src, int dst, PackedInt8Matrix w, int64_t m, int a_type, int out_type,
              object b_scale, object bias, int act, int q, int scale, int scale32,
              bint quantized=False, int zero=-1):
        """out (m x n, out_type) = act(quantized(src) @ w / (b_scale * row scales) + bias):
        src's rows (m x k, a_type) quantized into buffers q and scale (widened into scale32),
        then the int8 product, as quantize_rows and matmul_int8 compute it.  ``quantized``:
        the layer normalization step before it fills q, scale and scale32 (quantize_after).
        ``zero`` >= 0: min-max codes with their zero points in that buffer (int32 per row)
        and their float32 scales in scale32 (scale unused), the product with zero points."""
        cdef mc_plan_step *st = self._next(MC_STEP_IGEMM, src, -1, dst)
        cdef int64_t eo = 4 if out_type == 2 else 2
        st.u.iq.call.g.m = m
        st.u.iq.call.g.n = w.q.n
        st.u.iq.call.g.k = w.q.k
        st.u.iq.call.g.a_rs = w.q.k
        st.u.iq.call.g.a_cs = 1
        st.u.iq.call.g.o_rs = w.q.n * eo
        st.u.iq.call.g.o_cs = eo
        st.u.iq.call.g.out_type = out_type
        st.u.iq.call.g.b_scale = <const float *>_data(<cnp.ndarray>b_scale)
        if bias is not None:
            st.u.iq.call.g.bias = <const float *>_data(<cnp.ndarray>bias)
            st.u.iq.call.g.bias_s = 4 if w.q.n > 1 else 0   # one value per column
        st.u.iq.call.g.act = act
        st.u.iq.call.batch = 1
        st.u.iq.call.packed = &w.q
        st.u.iq.a_type = a_type
        st.u.iq.q = q
        st.u.iq.scale = scale
        st.u.iq.scale32 = scale32
        st.u.iq.zero = zero
        st.u.iq.quantized = quantized
        self.keep += [w, b_scale, bias]

    def attention(self, int src, int dst, tuple dims, tuple offsets, tuple q_st, tuple k_st,
                  tuple v_st, tuple o_st, int type_code, double scale, bint causal):
        """The fused attention of Q, K, V views of buffer src (byte offsets and (B, H, T, D)
        byte strides) into dst, in type_code, without a mask."""
        cdef mc_plan_step *st = self._next(MC_STEP_ATTN, src, -1, dst)
        cdef int i
        st.u.attn.a.b, st.u.attn.a.h, st.u.attn.a.t, st.u.attn.a.s, st.u.attn.a.d, \
            st.u.attn.a.dv = dims
        st.u.attn.q_off, st.u.attn.k_off, st.u.attn.v_off = offsets
        for i in range(4):
            st.u.attn.a.q_st[i] = q_st[i]
            st.u.attn.a.k_st[i] = k_st[i]
            st.u.attn.a.v_st[i] = v_st[i]
            st.u.attn.a.o_st[i] = o_st[i]
        st.u.attn.a.type = type_code
        st.u.attn.a.out_type = type_code
        st.u.attn.a.mask = NULL
        st.u.attn.a.causal = causal
        st.u.attn.a.scale = <float>scale

    def conv(self, int src, int dst, tuple packed, tuple geom, int64_t groups, int64_t f,
             int x_type, int out_type, object bias, int act, int res=-1):
        """Convolution as conv_gemm makes it (with a residual buffer when res >= 0)."""
        cdef mc_plan_step *st = self._next(MC_STEP_CONV, src, res, dst)
        cdef const mc_packed **w = <const mc_packed **>malloc(max(groups, 1) * sizeof(void *))
        cdef int64_t i
        if w == NULL:
            raise MemoryError("Plan: cannot allocate a step")
        self.blocks.append(<uintptr_t>w)
        for i in range(groups):
            w[i] = &(<PackedMatrix>packed[i]).p
        _geom(&st.u.conv.geo, geom)
        st.u.conv.groups = groups
        st.u.conv.f = f
        st.u.conv.x_type = x_type
        st.u.conv.w = w
        st.u.conv.out_type = out_type
        if bias is not None:
            st.u.conv.bias = <const float *>_data(<cnp.ndarray>bias)
        st.u.conv.act = act
        self.keep += [packed, bias]

    def depthwise(self, int src, int dst, cnp.ndarray w, object bias, tuple geom, int64_t mult,
                  int x_type, int out_type, int act):
        """Depthwise convolution as conv_depthwise makes it (w: mult x kh x kw x c)."""
        cdef mc_plan_step *st = self._next(MC_STEP_DW, src, -1, dst)
        _geom(&st.u.dw.geo, geom)
        st.u.dw.mult = mult
        st.u.dw.x_type = x_type
        st.u.dw.w = _data(w)
        st.u.dw.out_type = out_type
        if bias is not None:
            st.u.dw.bias = <const void *>_data(<cnp.ndarray>bias)
        st.u.dw.act = act
        self.keep += [w, bias]

    def pool(self, int src, int dst, tuple geom, int op, int x_type):
        """Max (op 0) or average (op 1) pooling."""
        cdef mc_plan_step *st = self._next(MC_STEP_POOL, src, -1, dst)
        _geom(&st.u.pool.geo, geom)
        st.u.pool.op = op
        st.u.pool.x_type = x_type

    def cast(self, int src, int dst, int64_t n, int src_type, int dst_type):
        """dst = src (n contiguous elements) converted from src_type to dst_type."""
        cdef mc_plan_step *st = self._next(MC_STEP_CAST, src, -1, dst)
        st.u.cast.src_type = src_type
        st.u.cast.dst_type = dst_type
        st.u.cast.n = n

    def add(self, int a, int b, int dst, int64_t n, int act, int a_type, int b_type,
            int y_type):
        """dst = act(a + b) over n elements."""
        cdef mc_plan_step *st = self._next(MC_STEP_ADD, a, b, dst)
        st.u.add.act = act
        st.u.add.a_type = a_type
        st.u.add.b_type = b_type
        st.u.add.y_type = y_type
        st.u.add.n = n

    def pad(self, int src, int dst, tuple shape, tuple padding, int64_t es):
        """dst = src (n, h, w, c elements of es bytes) with zeros around each image:
        padding = (top, bottom, left, right)."""
        cdef mc_plan_step *st = self._next(MC_STEP_PAD, src, -1, dst)
        st.u.pad.n, st.u.pad.h, st.u.pad.w, st.u.pad.c = shape
        st.u.pad.pt, st.u.pad.pb, st.u.pad.pl, st.u.pad.pr = padding
        st.u.pad.es = es

    def layer_norm(self, int src, int res, int dst, int64_t rows, int64_t n, int x_type,
                   int res_type, int y_type, object gamma, object beta, double eps):
        """dst = LN(src [+ res]) * gamma + beta over rows of n elements, as layer_norm."""
        cdef mc_plan_step *st = self._next(MC_STEP_NORM, src, res, dst)
        st.u.norm.rows = rows
        st.u.norm.q = st.u.norm.scale = st.u.norm.scale32 = st.u.norm.zero = -1
        st.u.norm.job.gamma = <const float *>_opt_data(gamma)
        st.u.norm.job.beta = <const float *>_opt_data(beta)
        st.u.norm.job.n = n
        st.u.norm.job.eps = eps
        st.u.norm.job.x_type = x_type
        st.u.norm.job.res_type = res_type
        st.u.norm.job.y_type = y_type
        self.keep += [gamma, beta]

    def quantize_after(self, int64_t step, int q, int scale, int scale32, int zero=-1):
        """Layer normalization step ``step`` also quantizes its output rows into buffers q,
        scale and scale32 (and zero: min-max codes), as an int8 step would (mc_plan.h,
        design d)."""
        if step < 0 or step >= self.n or self.steps[step].kind != MC_STEP_NORM:
            raise ValueError(f"PlanSteps.quantize_after: step {step} is not a layer "
                             f"normalization step")
        self.steps[step].u.norm.q = q
        self.steps[step].u.norm.scale = scale
        self.steps[step].u.norm.scale32 = scale32
        self.steps[step].u.norm.zero = zero

    def fuse_block(self, int64_t step):
        """Steps ``step`` (a pointwise product over images), ``step + 1`` (the depthwise
        convolution of its output) and ``step + 2`` (a pointwise product of that) run as one
        block (mc_plan.h, design e): band by band of output rows, their two intermediates in
        buffers of the block's own.  ValueError when the three are not such steps, or one of
        them is in a block already."""
        cdef mc_plan_step *e
        cdef mc_plan_step *d
        cdef mc_plan_step *p
        cdef mc_conv_geom *g
        cdef int64_t i
        if step < 0 or step + 3 > self.n:
            raise ValueError(f"PlanSteps.fuse_block: steps [{step}, {step + 3}) are not within "
                             f"the plan's {self.n} steps")
        for i in range(max(step - 2, 0), step + 3):
            if self.steps[i].block:
                raise ValueError(f"PlanSteps.fuse_block: step {i} starts a block already")
        e, d, p = &self.steps[step], &self.steps[step + 1], &self.steps[step + 2]
        if e.kind != MC_STEP_GEMM or d.kind != MC_STEP_DW or p.kind != MC_STEP_GEMM or \
                e.src2 >= 0 or d.src != e.dst or p.src != d.dst or d.u.dw.x_type == MC_F64:
            raise ValueError(f"PlanSteps.fuse_block: steps {step}, {step + 1}, {step + 2} are "
                             f"not a product, the depthwise convolution of its output and a "
                             f"product of that")
        g = &d.u.dw.geo
        if e.u.gemm.g.m != g.n * g.h * g.w or e.u.gemm.g.n != g.c or \
                e.u.gemm.g.out_type != d.u.dw.x_type or \
                p.u.gemm.g.k != g.c * d.u.dw.mult or p.u.gemm.g.m != g.n * g.oh * g.ow or \
                p.u.gemm.g.a_type != d.u.dw.out_type:
            raise ValueError(f"PlanSteps.fuse_block: the shapes or types of steps {step}, "
                             f"{step + 1}, {step + 2} do not chain: product {e.u.gemm.g.m} x "
                             f"{e.u.gemm.g.n}, depthwise {g.n} x {g.h} x {g.w} x {g.c} -> "
                             f"{g.oh} x {g.ow} (multiplier {d.u.dw.mult}), product "
                             f"{p.u.gemm.g.m} x {p.u.gemm.g.k}")
        e.block = 1

    def run(self, int64_t s0, int64_t s1, list buffers):
        """Runs steps [s0, s1) with buffer i the data of ``buffers[i]`` (C-contiguous arrays
        of the buffers' sizes, or None for a buffer no step in the range reads or writes).
        Returns (status, index of the step that failed).  Runs in several threads at once each
        have their own table.  A range outside the plan, or a buffer a step in it uses that is
        missing or None, is a ValueError; an entry that is not an array, a TypeError."""
        cdef int64_t nb = len(buffers), i, failed = -1
        cdef int missing = -1
        cdef char **bufs
        cdef int r
        if s0 < 0 or s0 > s1 or s1 > self.n:
            raise ValueError(f"PlanSteps.run: steps [{s0}, {s1}) are not within the plan's "
                             f"{self.n} steps")
        bufs = <char **>malloc(max(nb, 1) * sizeof(char *))
        if bufs == NULL:
            raise MemoryError("Plan: cannot allocate its buffer table")
        try:
            for i in range(nb):
                b = buffers[i]
                bufs[i] = NULL if b is None else _data(<cnp.ndarray?>b)
            for i in range(s0, s1):
                if _missing_buffer(&self.steps[i], bufs, nb, &missing):
                    raise ValueError(f"PlanSteps.run: step {i} uses buffer {missing}, which "
                                     f"is not among the {nb} given (or is None)")
            with nogil:
                r = mc_plan_run(self.steps, s0, s1, bufs, &failed)
        finally:
            free(bufs)
        return r, failed
