# GEMM driver.
#
# Design:
#   a. The caller (mixedcore.kernels._gemm) has validated everything and reduced the problem to
#      `batch` matrix products of the same (M, N, K): per batch item it passes the byte offsets of
#      A, B, out and Cin inside their arrays, plus one set of byte strides.  This module only fills
#      the C call descriptor; the plan (level, kernels, blocks, threads, accumulator, scratch) is
#      made in C when the call starts (src/gemm/mc_gemm.c), so settings changed meanwhile by another
#      thread cannot mix into it.
#   b. PackedMatrix owns B packed ahead (src/gemm/mc_gemm.h, mc_packed): immutable, freed with the
#      object.

cdef extern from "mc_gemm.h" nogil:
    ctypedef struct mc_gemm_args:
        int64_t m, n, k
        const char *a
        int64_t a_rs, a_cs
        int a_type
        const char *b
        int64_t b_rs, b_cs
        int b_type
        char *out
        int64_t o_rs, o_cs
        int out_type
        float *acc
        int64_t acc_rs, acc_cs, acc_r0, acc_c0
        const float *c
        int64_t c_rs, c_cs
        const float *bias
        int64_t bias_s
        const char *res
        int64_t res_rs
        float alpha, beta
        int act
    ctypedef struct mc_gemm_blocks:
        int64_t mc, kc, nc
    ctypedef struct mc_packed:
        int64_t k, n
        int type, level, pairs, elem, nr
        int64_t kc
        int finite
        char *data
        int64_t nbytes
    ctypedef struct mc_gemm_call:
        mc_gemm_args g
        double alpha, beta
        int64_t batch
        const int64_t *offs
        const mc_packed *packed
    int MC_GEMM_OK, MC_GEMM_NOMEM, MC_GEMM_FORMAT, MC_GEMM_TOOBIG
    int mc_gemm(const mc_gemm_call *call)
    int mc_gemm_pack(const char *b, int64_t rs, int64_t cs, int type, int64_t k, int64_t n,
                     int64_t kc_min, mc_packed *out)
    void mc_gemm_packed_free(mc_packed *p)
    void mc_gemm_unpack(const mc_packed *p, char *dst, int64_t rs, int64_t cs)
    void mc_gemm_kernel_info(int level, int a_type, int b_type, int *mr, int *nr, int *pairs,
                             mc_gemm_blocks *blk)
    void mc_gemm_pack_format(int level, int type, int *pairs, int *elem, int *nr, int64_t *kc)

GEMM_FORMAT_ERROR = MC_GEMM_FORMAT


def gemm_set_blocks(int64_t mc, int64_t kc, int64_t nc):
    """Override the block sizes (0 keeps the kernel's default); ValueError when out of range."""
    if mc_rt_set_blocks(mc, kc, nc) != 0:
        raise ValueError(f"set_gemm_blocks: block sizes out of range: mc={mc}, kc={kc}, nc={nc}")


def gemm_kernel_info(int a_type, int b_type, int level=-1):
    """(MR, NR, pairs, MC, KC, NC) of the kernel a level (default: the current one) uses for an
    input pair, with the current block settings."""
    cdef int mr, nr, pairs
    cdef mc_gemm_blocks blk
    mc_gemm_kernel_info(mc_rt_level() if level < 0 else level, a_type, b_type, &mr, &nr, &pairs,
                        &blk)
    return (mr, nr, pairs, blk.mc, blk.kc, blk.nc)


def gemm_pack_format(int type_code, int level=-1):
    """(pairs, element bytes, NR, KC) of the panels a level (default: the current one) packs B
    of a type into."""
    cdef int pairs, elem, nr
    cdef int64_t kc
    mc_gemm_pack_format(mc_rt_level() if level < 0 else level, type_code, &pairs, &elem, &nr, &kc)
    return (pairs, elem, nr, kc)


cdef class PackedMatrix:
    """A matrix packed once for ``kernels.matmul`` (made by ``kernels.pack``).

    Immutable; its memory is freed with it.  ``shape``, ``dtype`` and ``nbytes`` describe the
    matrix and the memory its panels take; ``isa`` names the level that packed it.
    """
    cdef mc_packed p
    cdef readonly object dtype
    cdef int64_t kc_min          # the K block depth asked for when packing (gemm_pack)

    def __cinit__(self):
        self.p.data = NULL
        self.p.nbytes = 0

    def __dealloc__(self):
        mc_gemm_packed_free(&self.p)

    @property
    def shape(self):
        return (self.p.k, self.p.n)

    @property
    def ndim(self):
        return 2

    @property
    def nbytes(self):
        """Bytes the packed panels take."""
        return self.p.nbytes

    @property
    def isa(self):
        """The level that packed it."""
        return ISA_NAMES[self.p.level]

    @property
    def stale(self):
        """True when ``pack`` would now make other panels (the level or the K block size
        changed since): matmul still accepts it where it can, but packing again is faster."""
        pairs, elem, nr, kc = gemm_pack_format(self.p.type)
        if self.kc_min > kc:
            kc = self.kc_min + (self.kc_min & 1)
        return (pairs, elem, nr, kc) != self.format

    @property
    def format(self):
        """(pairs, element bytes, NR, KC): bfloat16 pairs, 16-bit or float32 panels, their width
        and K block depth."""
        return (self.p.pairs, self.p.elem, self.p.nr, self.p.kc)

    def unpack(self):
        """The matrix again: a new (k, n) array of ``dtype``, bit for bit the packed values."""
        cdef cnp.ndarray out = _np.empty((self.p.k, self.p.n), dtype=self.dtype)
        with nogil:
            mc_gemm_unpack(&self.p, <char *>cnp.PyArray_DATA(out), cnp.PyArray_STRIDE(out, 0),
                           cnp.PyArray_STRIDE(out, 1))
        return out

    def __reduce__(self):
        raise TypeError("PackedMatrix cannot be pickled: pickle the matrix (packed.unpack()) "
                        "and pack it again where it is loaded")

    def __repr__(self):
        return (f"PackedMatrix(shape={self.shape}, dtype={self.dtype}, isa={self.isa!r}, "
                f"nbytes={self.nbytes})")


def gemm_pack(cnp.ndarray b, int type_code, object dtype, int64_t kc_min=0, bint finite=False):
    """Pack the 2-D array ``b`` (validated: native, aligned, of type ``type_code``) in K
    blocks of the level's KC, or of ``kc_min`` (0 <= kc_min < 2**32) when that is deeper.
    ``finite``: the caller found every value of ``b`` finite (a convolution may then leave out
    the taps outside the image)."""
    cdef PackedMatrix pm = PackedMatrix.__new__(PackedMatrix)
    cdef int r
    cdef const char *data = <const char *>cnp.PyArray_DATA(b)
    cdef int64_t rs = cnp.PyArray_STRIDE(b, 0), cs = cnp.PyArray_STRIDE(b, 1)
    cdef int64_t k = cnp.PyArray_DIM(b, 0), n = cnp.PyArray_DIM(b, 1)
    if kc_min < 0 or kc_min >= (<int64_t>1 << 32):
        raise ValueError(f"pack: kc_min must be in [0, 2**32), got {kc_min}")
    pm.dtype = dtype
    pm.kc_min = kc_min
    with nogil:
        r = mc_gemm_pack(data, rs, cs, type_code, k, n, kc_min, &pm.p)
    pm.p.finite = finite
    if r == MC_GEMM_TOOBIG:
        raise ValueError(f"pack: b of shape ({k}, {n}) would need more than {MC_BYTES_MAX} "
                         f"bytes of panels (a broadcast view claims more than memory can hold)")
    if r != MC_GEMM_OK:
        raise MemoryError(f"pack: cannot allocate {pm.p.nbytes} bytes for the packed matrix")
    return pm


def gemm_run(cnp.ndarray a, object b, cnp.ndarray out, object c, object bias, object offsets,
             int64_t m, int64_t n, int64_t k, tuple a_strides, tuple b_strides, tuple o_strides,
             tuple c_strides, int64_t bias_stride, int a_type, int b_type, int out_type,
             double alpha, double beta, int act):
    """Runs the batched GEMM (validated by the caller).  ``b`` is an ndarray or a PackedMatrix;
    ``offsets`` is None (one item) or int64 of shape (batch, 4): byte offsets of A, B, out and
    Cin for each item.  Returns 0, or GEMM_FORMAT_ERROR when a PackedMatrix does not suit the
    current level (nothing is written then)."""
    cdef mc_gemm_call call
    cdef int r
    cdef PackedMatrix pm
    memset(&call, 0, sizeof(call))
    call.g.m = m
    call.g.n = n
    call.g.k = k
    call.g.a = <const char *>cnp.PyArray_DATA(a)
    call.g.a_rs, call.g.a_cs = a_strides
    call.g.a_type = a_type
    call.packed = NULL
    if isinstance(b, PackedMatrix):
        pm = <PackedMatrix>b
        call.packed = &pm.p
        call.g.b = NULL
        call.g.b_rs = call.g.b_cs = 0
    else:
        call.g.b = <const char *>cnp.PyArray_DATA(<cnp.ndarray>b)
        call.g.b_rs, call.g.b_cs = b_strides
    call.g.b_type = b_type
    call.g.out = <char *>cnp.PyArray_DATA(out)
    call.g.o_rs, call.g.o_cs = o_strides
    call.g.out_type = out_type
    call.g.acc = NULL
    call.g.acc_rs = call.g.acc_cs = call.g.acc_r0 = call.g.acc_c0 = 0
    call.g.c = NULL
    call.g.c_rs = call.g.c_cs = 0
    if c is not None:
        call.g.c = <const float *>cnp.PyArray_DATA(<cnp.ndarray>c)
        call.g.c_rs, call.g.c_cs = c_strides
    call.g.bias = NULL
    call.g.bias_s = bias_stride
    if bias is not None:
        call.g.bias = <const float *>cnp.PyArray_DATA(<cnp.ndarray>bias)
    call.alpha = alpha
    call.beta = beta
    call.g.act = act
    call.batch = 1
    call.offs = NULL
    if offsets is not None:
        call.batch = (<cnp.ndarray>offsets).shape[0]
        call.offs = <const int64_t *>cnp.PyArray_DATA(<cnp.ndarray>offsets)
    if call.batch == 0 or m == 0 or n == 0:
        return 0
    with nogil:
        r = mc_gemm(&call)
    if r == MC_GEMM_NOMEM:
        raise MemoryError("matmul: cannot allocate the packing buffers")
    if r == MC_GEMM_TOOBIG:
        raise ValueError(f"matmul: packing B ({k} x {n}) would need more than {MC_BYTES_MAX} "
                         f"bytes (a broadcast view claims more than memory can hold)")
    return r
