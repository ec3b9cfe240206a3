# Weight-only quantized GEMM driver.
#
# Design:
#   a. The caller (mixedcore.kernels._wgemm) has validated everything: Keras's arrays are
#      contiguous, of the right dtypes and shapes; a is (m, k) with any byte strides; out is
#      (m, n) of its type.  This module only fills the C descriptors (src/wgemm/mc_wgemm.h).
#   b. PackedQuantized owns the packed weights: immutable, freed with the object; it keeps
#      Keras's scales and zero points (small) for dequantize().

cdef extern from "mc_wgemm.h" nogil:
    ctypedef struct mc_wpacked:
        int64_t k, n
        int bits, grouped
        int64_t block, groups, kg, panels, pbytes
        float *scale
        float *off
        int64_t nbytes
        void *mem
    ctypedef struct mc_wgemm_call:
        const mc_wpacked *w
        int64_t m
        const char *a
        int64_t a_rs, a_cs
        int a_type
        char *out
        int64_t o_rs, o_cs
        int out_type
        const float *bias
        int64_t bias_s
        int act
    int MC_WGEMM_OK, MC_WGEMM_NOMEM, MC_WGEMM_TOOBIG
    int mc_wgemm_pack(const signed char *kernel, int bits, int64_t k, int64_t n,
                      const float *scale, const signed char *zero, int64_t block,
                      mc_wpacked *out)
    void mc_wgemm_packed_free(mc_wpacked *p)
    void mc_wgemm_unpack(const mc_wpacked *p, signed char *q)
    int mc_wgemm(const mc_wgemm_call *call)


cdef class PackedQuantized:
    """Quantized weights packed once for ``kernels.matmul_quantized`` (made by
    ``kernels.pack_quantized``).

    Immutable; its memory is freed with it.  ``shape`` is (k, n), ``bits`` 4 or 8,
    ``block_size`` the rows per group of scales (-1: one scale per column), ``nbytes`` the
    memory the packed codes, scales and offsets take.
    """
    cdef mc_wpacked p
    cdef readonly object scale
    cdef readonly object zero

    def __cinit__(self):
        self.p.mem = NULL
        self.p.nbytes = 0

    def __dealloc__(self):
        mc_wgemm_packed_free(&self.p)

    @property
    def shape(self):
        return (self.p.k, self.p.n)

    @property
    def ndim(self):
        return 2

    @property
    def bits(self):
        return self.p.bits

    @property
    def block_size(self):
        """Rows per group of scales and zero points; -1 for one scale per column."""
        return self.p.block if self.p.grouped else -1

    @property
    def nbytes(self):
        """Bytes the packed codes, scales and offsets take."""
        return self.p.nbytes

    def quantized(self):
        """The codes as Keras's q values: a new (k, n) int8 array."""
        cdef cnp.ndarray q = _np.empty((self.p.k, self.p.n), dtype=_np.int8)
        with nogil:
            mc_wgemm_unpack(&self.p, <signed char *>cnp.PyArray_DATA(q))
        return q

    def dequantize(self):
        """The float32 weight matrix as Keras computes it in float32: ``q / scale`` per
        column, or ``(q - zero) * scale`` with each group's scale and zero point."""
        q = self.quantized()
        if not self.p.grouped:
            return q.astype(_np.float32) / self.scale
        rows = _np.arange(self.p.k) // self.p.block
        return (q.astype(_np.int16) - self.zero[rows]).astype(_np.float32) * self.scale[rows]

    def __reduce__(self):
        raise TypeError("PackedQuantized cannot be pickled: pickle Keras's kernel, scale and "
                        "zero arrays and pack them again where they are loaded")

    def __repr__(self):
        return (f"PackedQuantized(shape={self.shape}, bits={self.bits}, "
                f"block_size={self.block_size}, nbytes={self.nbytes})")


def wgemm_pack(cnp.ndarray kernel, int bits, int64_t k, int64_t n, cnp.ndarray scale,
               object zero, int64_t block):
    """Pack Keras's arrays (validated: contiguous int8 kernel, float32 scale, int8 zero or
    None).  MemoryError when the packed matrix cannot be allocated."""
    cdef PackedQuantized pq = PackedQuantized.__new__(PackedQuantized)
    cdef int r
    cdef const signed char *kd = <const signed char *>cnp.PyArray_DATA(kernel)
    cdef const float *sd = <const float *>cnp.PyArray_DATA(scale)
    cdef const signed char *zd = NULL
    if zero is not None:
        zd = <const signed char *>cnp.PyArray_DATA(<cnp.ndarray>zero)
    pq.scale = scale
    pq.zero = zero
    with nogil:
        r = mc_wgemm_pack(kd, bits, k, n, sd, zd, block, &pq.p)
    if r == MC_WGEMM_TOOBIG:
        raise ValueError(f"pack_quantized: a ({k}, {n}) int{bits} matrix is too large to pack "
                         f"(its byte count overflows)")
    if r != MC_WGEMM_OK:
        raise MemoryError(f"pack_quantized: cannot allocate {pq.p.nbytes} bytes for the "
                          f"packed matrix")
    return pq


def wgemm_run(cnp.ndarray a, PackedQuantized w, cnp.ndarray out, object bias, int64_t m,
              tuple a_strides, tuple o_strides, int64_t bias_stride, int a_type, int out_type,
              int act):
    """Runs the product (validated by the caller): a (m, k) with byte strides a_strides, out
    (m, n) with o_strides, bias float32 contiguous or None."""
    cdef mc_wgemm_call call
    cdef int r
    memset(&call, 0, sizeof(call))
    call.w = &w.p
    call.m = m
    call.a = <const char *>cnp.PyArray_DATA(a)
    call.a_rs, call.a_cs = a_strides
    call.a_type = a_type
    call.out = <char *>cnp.PyArray_DATA(out)
    call.o_rs, call.o_cs = o_strides
    call.out_type = out_type
    call.bias = NULL
    call.bias_s = bias_stride
    if bias is not None:
        call.bias = <const float *>cnp.PyArray_DATA(<cnp.ndarray>bias)
    call.act = act
    if m == 0:
        return
    with nogil:
        r = mc_wgemm(&call)
    if r == MC_WGEMM_TOOBIG:
        raise ValueError(f"matmul_quantized: {m} rows of {w.p.k} values are too many to "
                         f"convert (the byte count overflows)")
    if r != MC_WGEMM_OK:
        raise MemoryError("matmul_quantized: cannot allocate the work buffers")
