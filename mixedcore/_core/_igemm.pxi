# int8 GEMM driver and row quantization.
#
# Design:
#   a. The caller (mixedcore.kernels._igemm) has validated everything: int8 operands, float32
#      scales and bias (contiguous), the batch reduced to byte offsets of A and out per item.
#      This module fills the C call descriptor; the plan is made in C (src/igemm/mc_igemm.c).
#   b. PackedInt8Matrix is a PackedMatrix (kernels.pack of an int8 matrix) that owns int8
#      panels with their column sums (src/igemm/mc_igemm.h, mc_ipacked), freed with it.  The
#      float GEMM sees it as a packed matrix with no panels of its own (nr 0), so its driver
#      refuses it (MC_GEMM_FORMAT) rather than read it.

cdef extern from "mc_igemm.h" nogil:
    ctypedef struct mc_igemm_args:
        int64_t m, n, k
        const signed char *a
        int64_t a_rs, a_cs
        char *out
        int64_t o_rs, o_cs
        int out_type
        const float *a_scale
        const float *b_scale
        const float *bias
        int64_t bias_s
        const int32_t *a_zero
        const int32_t *b_sum
        int act
    ctypedef struct mc_ipacked:
        int64_t k, n
        int level, nr
        int64_t kc
        char *data
        int64_t nbytes
    ctypedef struct mc_igemm_call:
        mc_igemm_args g
        int64_t batch
        const int64_t *offs
        const signed char *b
        int64_t b_rs, b_cs
        const mc_ipacked *packed
        int64_t kc
    int MC_IGEMM_OK, MC_IGEMM_NOMEM, MC_IGEMM_FORMAT, MC_IGEMM_SIZE, MC_IGEMM_TOOBIG, MC_IGEMM_I32, MC_IGEMM_MAX_K
    int MC_IGEMM_MAX_K_ZP
    int mc_igemm(const mc_igemm_call *call)
    int64_t mc_igemm_packed_bytes(int nr, int64_t k, int64_t n, int64_t kc)
    int mc_igemm_pack(const signed char *b, int64_t rs, int64_t cs, int64_t k, int64_t n,
                      int64_t kc, mc_ipacked *out)
    void mc_igemm_packed_free(mc_ipacked *p)
    void mc_igemm_unpack(const mc_ipacked *p, signed char *dst, int64_t rs, int64_t cs)
    void mc_igemm_format(int level, int *nr, int64_t *kc)
    void mc_igemm_quantize(const char *x, int type, int64_t rows, int64_t k, int64_t x_rs,
                           int64_t x_cs, signed char *q, int64_t q_rs, char *scale)
    void mc_igemm_quantize_zp(const char *x, int type, int64_t rows, int64_t k, int64_t x_rs,
                              int64_t x_cs, signed char *q, int64_t q_rs, float *scale,
                              int32_t *zero)

IGEMM_I32 = MC_IGEMM_I32
IGEMM_MAX_K = MC_IGEMM_MAX_K
IGEMM_MAX_K_ZP = MC_IGEMM_MAX_K_ZP
IGEMM_FORMAT_ERROR = MC_IGEMM_FORMAT


def igemm_format(int level=-1):
    """(NR, KC) of the int8 panels a level (default: the current one) packs."""
    cdef int nr
    cdef int64_t kc
    mc_igemm_format(mc_rt_level() if level < 0 else level, &nr, &kc)
    return (nr, kc)


cdef class PackedInt8Matrix(PackedMatrix):
    """An int8 matrix packed once for ``kernels.matmul_int8`` (made by ``kernels.pack``).

    Immutable; its memory is freed with it.  Its panels group 4 consecutive k of a column in a
    32-bit word and hold each column's sum per K block.
    """
    cdef mc_ipacked q

    def __cinit__(self):
        memset(&self.q, 0, sizeof(self.q))

    def __dealloc__(self):
        mc_igemm_packed_free(&self.q)

    @property
    def stale(self):
        """True when ``pack`` would now make other panels (the level's panel width or K block
        differs): ``matmul_int8`` then refuses it if the width differs."""
        return igemm_format() != self.format[2:]

    @property
    def format(self):
        """(pairs, element bytes, NR, KC) as for other packed matrices: (0, 1, NR, KC), int8
        panels of NR columns, K blocks of KC."""
        return (0, 1, self.q.nr, self.q.kc)

    def unpack(self):
        """The matrix again: a new (k, n) int8 array, bit for bit the packed values."""
        cdef cnp.ndarray out = _np.empty((self.q.k, self.q.n), dtype=_np.int8)
        with nogil:
            mc_igemm_unpack(&self.q, <signed char *>cnp.PyArray_DATA(out),
                            cnp.PyArray_STRIDE(out, 0), cnp.PyArray_STRIDE(out, 1))
        return out

    def __repr__(self):
        return (f"PackedMatrix(shape={self.shape}, dtype=int8, isa={self.isa!r}, "
                f"nbytes={self.nbytes})")


def igemm_pack(cnp.ndarray b):
    """Pack the 2-D int8 array ``b`` (validated) at the current level."""
    cdef PackedInt8Matrix pm = PackedInt8Matrix.__new__(PackedInt8Matrix)
    cdef int r
    cdef const signed char *data = <const signed char *>cnp.PyArray_DATA(b)
    cdef int64_t rs = cnp.PyArray_STRIDE(b, 0), cs = cnp.PyArray_STRIDE(b, 1)
    cdef int64_t k = cnp.PyArray_DIM(b, 0), n = cnp.PyArray_DIM(b, 1)
    pm.dtype = _np.dtype(_np.int8)
    with nogil:
        r = mc_igemm_pack(data, rs, cs, k, n, 0, &pm.q)
    if r == MC_IGEMM_TOOBIG:
        raise ValueError(f"pack: an int8 b of shape ({k}, {n}) would need more than "
                         f"{MC_BYTES_MAX} bytes of panels (a broadcast view claims more than "
                         f"memory can hold)")
    if r == MC_IGEMM_SIZE:
        raise ValueError(f"pack: an int8 b has at most {MC_IGEMM_MAX_K} rows (k), got {k}")
    if r != MC_IGEMM_OK:
        raise MemoryError(f"pack: cannot allocate {pm.q.nbytes} bytes for the packed matrix")
    pm.p.k = k
    pm.p.n = n
    pm.p.level = pm.q.level
    pm.p.nbytes = pm.q.nbytes
    pm.p.nr = 0
    return pm


def igemm_run(cnp.ndarray a, object b, cnp.ndarray out, object a_scale, object b_scale,
              object bias, object offsets, int64_t m, int64_t n, int64_t k, tuple a_strides,
              tuple b_strides, tuple o_strides, int64_t bias_stride, int out_type, int act,
              object a_zero=None):
    """Runs the batched int8 GEMM (validated by the caller).  ``b`` is an int8 ndarray or a
    PackedInt8Matrix; ``offsets`` None or int64 (batch, 2): byte offsets of A and out per item;
    ``a_scale`` float32 (batch * m,) and ``b_scale`` float32 (n,), or both None; ``a_zero``
    None or int32 (batch * m,) zero points in [-128, 127].  Returns 0, or IGEMM_FORMAT_ERROR
    when the packed matrix's panels do not suit the current level."""
    cdef mc_igemm_call call
    cdef int r
    cdef PackedInt8Matrix pm
    memset(&call, 0, sizeof(call))
    call.g.m = m
    call.g.n = n
    call.g.k = k
    call.g.a = <const signed char *>cnp.PyArray_DATA(a)
    call.g.a_rs, call.g.a_cs = a_strides
    call.g.out = <char *>cnp.PyArray_DATA(out)
    call.g.o_rs, call.g.o_cs = o_strides
    call.g.out_type = out_type
    call.g.act = act
    call.g.bias_s = bias_stride
    if a_scale is not None:
        call.g.a_scale = <const float *>cnp.PyArray_DATA(<cnp.ndarray>a_scale)
        call.g.b_scale = <const float *>cnp.PyArray_DATA(<cnp.ndarray>b_scale)
    if bias is not None:
        call.g.bias = <const float *>cnp.PyArray_DATA(<cnp.ndarray>bias)
    if a_zero is not None:
        call.g.a_zero = <const int32_t *>cnp.PyArray_DATA(<cnp.ndarray>a_zero)
    if isinstance(b, PackedInt8Matrix):
        pm = <PackedInt8Matrix>b
        call.packed = &pm.q
    else:
        call.b = <const signed char *>cnp.PyArray_DATA(<cnp.ndarray>b)
        call.b_rs, call.b_cs = b_strides
    call.batch = 1
    if offsets is not None:
        call.batch = (<cnp.ndarray>offsets).shape[0]
        call.offs = <const int64_t *>cnp.PyArray_DATA(<cnp.ndarray>offsets)
    with nogil:
        r = mc_igemm(&call)
    if r == MC_IGEMM_NOMEM:
        raise MemoryError("matmul_int8: cannot allocate the packing buffers")
    if r == MC_IGEMM_SIZE:
        raise ValueError(f"matmul_int8: k = {k} is above "
                         f"{MC_IGEMM_MAX_K if a_zero is None else MC_IGEMM_MAX_K_ZP}")
    if r == MC_IGEMM_TOOBIG:
        raise ValueError(f"matmul_int8: packing B ({k} x {n}) would need more than "
                         f"{MC_BYTES_MAX} bytes (a broadcast view claims more than memory "
                         f"can hold)")
    return r


def igemm_quantize(cnp.ndarray x, int type_code, cnp.ndarray q, cnp.ndarray scale,
                   object zero=None):
    """Quantizes the rows of the 2-D ``x`` (validated; any strides) into the C-contiguous
    int8 ``q`` of its shape and ``scale`` (rows,) of its dtype; with ``zero`` (int32 (rows,),
    contiguous) min-max codes with zero points, ``scale`` then float32."""
    cdef int64_t rows = cnp.PyArray_DIM(x, 0), k = cnp.PyArray_DIM(x, 1)
    cdef const char *xp = <const char *>cnp.PyArray_DATA(x)
    cdef int64_t x_rs = cnp.PyArray_STRIDE(x, 0), x_cs = cnp.PyArray_STRIDE(x, 1)
    cdef signed char *qp = <signed char *>cnp.PyArray_DATA(q)
    cdef int64_t q_rs = cnp.PyArray_STRIDE(q, 0)
    cdef char *sp = <char *>cnp.PyArray_DATA(scale)
    cdef int32_t *zp = NULL
    if zero is not None:
        zp = <int32_t *>cnp.PyArray_DATA(<cnp.ndarray>zero)
    with nogil:
        if zp != NULL:
            mc_igemm_quantize_zp(xp, type_code, rows, k, x_rs, x_cs, qp, q_rs, <float *>sp, zp)
        else:
            mc_igemm_quantize(xp, type_code, rows, k, x_rs, x_cs, qp, q_rs, sp)
