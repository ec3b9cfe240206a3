# Conversion: the array pair as a C descriptor for mc_cast (src/convert/mc_convert.c), which
# coalesces the dimensions, picks the level's kernel, splits the work and runs it.

cdef extern from "mc_convert.h" nogil:
    int MC_CAST_OK, MC_CAST_MAXDIMS
    int mc_cast(const char *src, int src_type, const int64_t *src_strides, char *dst,
                int dst_type, const int64_t *dst_strides, int nd, const int64_t *shape,
                int saturate)


def cast_into(cnp.ndarray src, cnp.ndarray dst, int src_type, int dst_type, bint saturate=False):
    """Convert ``src`` into ``dst`` (same shape, validated by the caller); ``saturate`` clips
    to a float8 destination's largest finite value first."""
    cdef int64_t shape[64]
    cdef int64_t ss[64]
    cdef int64_t ds[64]
    cdef int nd = cnp.PyArray_NDIM(src), i, r
    cdef const char *s = <const char *>cnp.PyArray_DATA(src)
    cdef char *d = <char *>cnp.PyArray_DATA(dst)
    if nd > MC_CAST_MAXDIMS:
        raise ValueError(f"cast: at most {MC_CAST_MAXDIMS} dimensions, got {nd}")
    for i in range(nd):
        shape[i] = cnp.PyArray_DIM(src, i)
        ss[i] = cnp.PyArray_STRIDE(src, i)
        ds[i] = cnp.PyArray_STRIDE(dst, i)
    with nogil:
        r = mc_cast(s, src_type, ss, d, dst_type, ds, nd, shape, saturate)
    if r != MC_CAST_OK:
        raise ValueError(f"cast: invalid type codes ({src_type}, {dst_type}), saturate={saturate} "
                         f"or shape")
