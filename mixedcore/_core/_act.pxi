# Activation entry points: y = f(x), dx = dy * f'(x) and softmax on contiguous float32 arrays.
#
# Design:
#   a. The caller (mixedcore.kernels._act) has validated everything and made the arrays
#      contiguous float32 of the same size, the output separate from the inputs (or the same
#      array).  The plan (level, threads, units) is made in C (src/act/mc_act.c); this module hands
#      over the pointers and sizes and releases the GIL.

cdef extern from "mc_act.h" nogil:
    int MC_ACT_OK
    int mc_act_forward(int act, const float *x, float *y, int64_t n)
    int mc_act_backward(int act, const float *dy, const float *x, float *dx, int64_t n)
    int mc_softmax(const float *x, float *y, int64_t rows, int64_t n, int mode)


cdef inline int _act_check(int r, str name) except -1:
    if r != MC_ACT_OK:
        raise ValueError(f"{name}: invalid arguments for the C driver (status {r})")
    return 0


def act_forward(cnp.ndarray x, cnp.ndarray y, int act):
    """y = f(x) elementwise; x and y contiguous float32 of the same size (validated)."""
    cdef const float *xp = <const float *>cnp.PyArray_DATA(x)
    cdef float *yp = <float *>cnp.PyArray_DATA(y)
    cdef int64_t n = cnp.PyArray_SIZE(x)
    cdef int r
    with nogil:
        r = mc_act_forward(act, xp, yp, n)
    _act_check(r, "act_forward")


def act_backward(cnp.ndarray dy, cnp.ndarray x, cnp.ndarray dx, int act):
    """dx = dy * f'(x) elementwise; all contiguous float32 of the same size (validated)."""
    cdef const float *dyp = <const float *>cnp.PyArray_DATA(dy)
    cdef const float *xp = <const float *>cnp.PyArray_DATA(x)
    cdef float *dxp = <float *>cnp.PyArray_DATA(dx)
    cdef int64_t n = cnp.PyArray_SIZE(x)
    cdef int r
    with nogil:
        r = mc_act_backward(act, dyp, xp, dxp, n)
    _act_check(r, "act_backward")


def act_softmax(cnp.ndarray x, cnp.ndarray y, int64_t rows, int64_t n, int mode):
    """Softmax of ``rows`` contiguous rows of ``n`` float32 (validated): mode 0 softmax, 1
    log-softmax, 2 softmax for a 16-bit result (float32 inside)."""
    cdef const float *xp = <const float *>cnp.PyArray_DATA(x)
    cdef float *yp = <float *>cnp.PyArray_DATA(y)
    cdef int r
    with nogil:
        r = mc_softmax(xp, yp, rows, n, mode)
    _act_check(r, "softmax")
