# Activation driver: y = f(x) and dx = dy * f'(x) on contiguous float32 arrays.
#
# Design:
#   a. The caller (mixedcore.kernels._act) has validated everything and made the arrays
#      contiguous float32 of the same size, the output separate from the inputs; the driver
#      treats them as flat runs of n elements and calls the kernel of the current level once.
#   b. One thread: an elementwise pass is memory-bound for relu and cheap next to the GEMM that
#      produced its input for the others (threads will come with the shared thread pool).
#   c. The GIL is released; the caller's floating-point exception flags are saved before and
#      restored after (the kernels raise inexact, underflow and invalid flags inside).

cdef extern from "mc_act.h" nogil:
    ctypedef void (*mc_act_forward_fn)(int act, const float *x, float *y, int64_t n)
    ctypedef void (*mc_act_backward_fn)(int act, const float *dy, const float *x, float *dx,
                                        int64_t n)
    mc_act_forward_fn mc_act_kernel_forward(int level)
    mc_act_backward_fn mc_act_kernel_backward(int level)


def act_forward(cnp.ndarray x, cnp.ndarray y, int act):
    """y = f(x) elementwise; x and y contiguous float32 of the same size (validated)."""
    cdef const float *xp = <const float *>cnp.PyArray_DATA(x)
    cdef float *yp = <float *>cnp.PyArray_DATA(y)
    cdef int64_t n = cnp.PyArray_SIZE(x)
    cdef mc_act_forward_fn fn = mc_act_kernel_forward(_level)
    cdef mc_fpflags_t flags
    if n == 0:
        return
    with nogil:
        mc_fpflags_save(&flags)
        fn(act, xp, yp, n)
        mc_fpflags_restore(&flags)


def act_backward(cnp.ndarray dy, cnp.ndarray x, cnp.ndarray dx, int act):
    """dx = dy * f'(x) elementwise; all contiguous float32 of the same size (validated)."""
    cdef const float *dyp = <const float *>cnp.PyArray_DATA(dy)
    cdef const float *xp = <const float *>cnp.PyArray_DATA(x)
    cdef float *dxp = <float *>cnp.PyArray_DATA(dx)
    cdef int64_t n = cnp.PyArray_SIZE(x)
    cdef mc_act_backward_fn fn = mc_act_kernel_backward(_level)
    cdef mc_fpflags_t flags
    if n == 0:
        return
    with nogil:
        mc_fpflags_save(&flags)
        fn(act, dyp, xp, dxp, n)
        mc_fpflags_restore(&flags)
