# Convolution driver (pooling, on the same geometry, is _pool.pxi).
#
# Design:
#   a. The caller (mixedcore.kernels._conv) has validated everything: arrays are contiguous,
#      native and aligned, of the dtypes the codes say, of the shapes the geometry implies, and
#      outputs are separate from inputs.  The geometry travels as one tuple
#      (n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow).
#   b. The plan of a call (level, kernels, bands, threads) is made in C (src/conv/mc_conv.c);
#      this module fills the call descriptors and releases the GIL.

from libc.stdlib cimport malloc, free

cdef extern from "mc_conv.h" nogil:
    ctypedef struct mc_conv_geom:
        int64_t n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow
    ctypedef struct mc_conv_call:
        mc_conv_geom geo
        int64_t groups, f
        const char *x
        int x_type
        const mc_packed *const *w
        char *out
        int out_type
        const float *bias
        int act
        const char *res
    ctypedef struct mc_dw_call:
        mc_conv_geom geo
        int64_t mult
        const char *x
        int x_type
        const void *w
        char *out
        int out_type
        const void *bias
        int act
    int MC_CONV_OK, MC_CONV_NOMEM, MC_CONV_FORMAT, MC_CONV_TOOBIG
    int mc_conv_gemm(const mc_conv_call *call)
    void mc_conv_im2col(const mc_conv_geom *g, const char *x, int es, int64_t c0, int64_t cg,
                        char *dst)
    void mc_conv_col2im(const mc_conv_geom *g, const char *src, int type, int64_t c0,
                        int64_t cg, char *dx)
    int mc_conv_depthwise(const mc_dw_call *call)

CONV_FORMAT_ERROR = MC_CONV_FORMAT


cdef void _geom(mc_conv_geom *g, tuple t) except *:
    g.n, g.h, g.w, g.c, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.oh, g.ow = t


cdef inline char *_data(cnp.ndarray a) noexcept:
    return <char *>cnp.PyArray_DATA(a)


def conv_gemm(cnp.ndarray x, tuple packed, cnp.ndarray out, object bias, tuple geom,
              int64_t groups, int64_t f, int x_type, int out_type, int act):
    """Convolution as a product with weights packed per group (validated by the caller).
    Returns 0, or CONV_FORMAT_ERROR when the panels do not suit the current level."""
    cdef mc_conv_call call
    cdef int r
    cdef int64_t i
    memset(&call, 0, sizeof(call))
    cdef const mc_packed **w = <const mc_packed **>malloc(max(groups, 1) * sizeof(void *))
    if w == NULL:
        raise MemoryError("conv2d: cannot allocate the call descriptor")
    try:
        for i in range(groups):
            w[i] = &(<PackedMatrix>packed[i]).p
        _geom(&call.geo, geom)
        call.groups = groups
        call.f = f
        call.x = _data(x)
        call.x_type = x_type
        call.w = w
        call.out = _data(out)
        call.out_type = out_type
        call.bias = NULL
        if bias is not None:
            call.bias = <const float *>_data(<cnp.ndarray>bias)
        call.act = act
        with nogil:
            r = mc_conv_gemm(&call)
    finally:
        free(w)
    if r == MC_CONV_NOMEM:
        raise MemoryError("conv2d: cannot allocate the work buffers")
    if r == MC_CONV_TOOBIG:
        raise ValueError(f"conv2d: the work buffers of geometry {geom} with {groups} groups of "
                         f"{f // max(groups, 1)} filters need more than {MC_BYTES_MAX} bytes")
    return r


def conv_im2col(cnp.ndarray x, cnp.ndarray dst, tuple geom, int es, int64_t c0, int64_t cg):
    """The im2col matrix of channels [c0, c0 + cg) of x into dst (validated)."""
    cdef mc_conv_geom g
    _geom(&g, geom)
    cdef const char *xp = _data(x)
    cdef char *dp = _data(dst)
    with nogil:
        mc_conv_im2col(&g, xp, es, c0, cg, dp)


def conv_col2im(cnp.ndarray src, cnp.ndarray dx, tuple geom, int type_code, int64_t c0,
                int64_t cg):
    """dx += the scatter of an im2col-shaped src into channels [c0, c0 + cg) (validated)."""
    cdef mc_conv_geom g
    _geom(&g, geom)
    cdef const char *sp = _data(src)
    cdef char *dp = _data(dx)
    with nogil:
        mc_conv_col2im(&g, sp, type_code, c0, cg, dp)


def conv_depthwise(cnp.ndarray x, cnp.ndarray w, cnp.ndarray out, object bias, tuple geom,
                   int64_t mult, int x_type, int out_type, int act):
    """Depthwise convolution (validated by the caller)."""
    cdef mc_dw_call call
    cdef int r
    _geom(&call.geo, geom)
    call.mult = mult
    call.x = _data(x)
    call.x_type = x_type
    call.w = _data(w)
    call.out = _data(out)
    call.out_type = out_type
    call.bias = NULL
    if bias is not None:
        call.bias = <const void *>_data(<cnp.ndarray>bias)
    call.act = act
    with nogil:
        r = mc_conv_depthwise(&call)
    if r == MC_CONV_NOMEM:
        raise MemoryError("depthwise_conv2d: cannot allocate the work buffers")
    if r == MC_CONV_TOOBIG:
        raise ValueError(f"depthwise_conv2d: the work buffers of geometry {geom} with depth "
                         f"multiplier {mult} need more than {MC_BYTES_MAX} bytes")
