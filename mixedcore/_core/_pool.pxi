# Pooling driver (max and average pooling and their gradient).
#
# Design:
#   a. The caller (mixedcore.kernels._pool) has validated everything: arrays are contiguous,
#      native and aligned, of the dtypes the codes say, of the shapes the geometry implies, and
#      outputs are separate from inputs.  The geometry travels as the convolution's tuple
#      (_conv.pxi: mc_conv_geom, _geom).
#   b. The plan of a call (level, kernels, bands, threads) is made in C (src/pool/mc_pool.c);
#      this module fills the call descriptor and releases the GIL.

cdef extern from "mc_pool.h" nogil:
    ctypedef struct mc_pool_call:
        mc_conv_geom geo
        int op
        const char *x
        int x_type
        char *out
    int MC_POOL_OK, MC_POOL_NOMEM, MC_POOL_TOOBIG
    int mc_pool(const mc_pool_call *call)
    int mc_pool_grad(const mc_pool_call *call, const char *dy, char *dx)


def conv_pool(cnp.ndarray x, cnp.ndarray out, tuple geom, int op, int x_type):
    """Max (op 0) or average (op 1) pooling (validated by the caller)."""
    cdef mc_pool_call call
    cdef int r
    _geom(&call.geo, geom)
    call.op = op
    call.x = _data(x)
    call.x_type = x_type
    call.out = _data(out)
    with nogil:
        r = mc_pool(&call)
    if r == MC_POOL_NOMEM:
        raise MemoryError("pool2d: cannot allocate the work buffers")
    if r == MC_POOL_TOOBIG:
        raise ValueError(f"pool2d: the windows (geometry {geom}) need tap lists larger than "
                         f"{MC_BYTES_MAX} bytes")


def conv_pool_grad(cnp.ndarray x, cnp.ndarray dy, cnp.ndarray dx, tuple geom, int op,
                   int x_type):
    """dx += the gradient of pooling for dy (validated by the caller)."""
    cdef mc_pool_call call
    cdef int r
    _geom(&call.geo, geom)
    call.op = op
    call.x = _data(x)
    call.x_type = x_type
    call.out = NULL
    cdef const char *dyp = _data(dy)
    cdef char *dxp = _data(dx)
    with nogil:
        r = mc_pool_grad(&call, dyp, dxp)
    if r == MC_POOL_NOMEM:
        raise MemoryError("pool2d_grad: cannot allocate the work buffers")
    if r == MC_POOL_TOOBIG:
        raise ValueError(f"pool2d_grad: the windows (geometry {geom}) need tap lists larger than "
                         f"{MC_BYTES_MAX} bytes")
