# GEMM driver.
#
# Design:
#   a. The caller (mixedcore.kernels._gemm) has validated everything and reduced the problem to
#      `batch` matrix products of the same (M, N, K): per batch item it passes the byte offsets of
#      A, B, Cin, out and the float32 accumulator inside their arrays, plus one set of byte strides.
#   b. Threads split C, never K: when the items divide evenly among the threads (or there are
#      many), whole items go round-robin to threads; otherwise each item is cut into one band per
#      thread: along N, at NR-tile boundaries, when N has at least as many tiles as M (so batch-1
#      inference splits its columns) or its tiles divide clearly more evenly (_split_along_n);
#      else along M, in equal bands of rows, with the threads sharing each packed B block
#      (mc_gemm_run_shared: an OpenMP region in C, a barrier after packing and one before the
#      next block) instead of each packing all of B.  The K blocking does not depend on the
#      split (mc_gemm.h, d), nor does any element's sequence of operations.
#   c. Below GEMM_PARALLEL_MIN multiply-adds the call stays on the calling thread.
#   d. Packing buffers are thread-local and kept (mc_gemm_workspace_), so repeated small calls
#      do not page-fault fresh allocations.

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
        int64_t acc_rs, acc_cs
        const float *c
        int64_t c_rs, c_cs
        const float *bias
        int64_t bias_s
        float alpha, beta
        int act
    ctypedef struct mc_gemm_blocks:
        int64_t mc, kc, nc
    ctypedef struct mc_gemm_kernel:
        int mr, nr, pairs, elem
        int64_t mc, kc, nc
    const mc_gemm_kernel *mc_gemm_select(int level, int a_type, int b_type)
    void mc_gemm_blocks_for(const mc_gemm_kernel *kern, const mc_gemm_blocks *want,
                            mc_gemm_blocks *blk)
    int64_t mc_gemm_workspace_bytes(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk)
    void *mc_gemm_workspace_(int slot, int64_t nbytes)
    int mc_gemm_run_shared(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk,
                           const mc_gemm_args *g, int nthreads)
    void mc_gemm_run(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk, const mc_gemm_args *g,
                     int64_t m0, int64_t m1, int64_t n0, int64_t n1, void *work)

# multiply-adds below which a GEMM stays on one thread: measured, 2 threads win from about
# 512 Ki (8 x 256 x 256: 10.3 -> 8.6 us; 1 x 1024 x 1024: 80 -> 51 us) and lose at 64**3
cdef int64_t GEMM_PARALLEL_MIN = 1 << 19
cdef mc_gemm_blocks _gemm_want


def gemm_set_blocks(int64_t mc, int64_t kc, int64_t nc):
    """Override the block sizes (0 keeps the kernel's default)."""
    _gemm_want.mc = mc
    _gemm_want.kc = kc
    _gemm_want.nc = nc


def gemm_kernel_info(int a_type, int b_type):
    """(MR, NR, pairs, MC, KC, NC) of the kernel the current level uses for this input pair."""
    cdef const mc_gemm_kernel *kern = mc_gemm_select(_level, a_type, b_type)
    cdef mc_gemm_blocks blk
    mc_gemm_blocks_for(kern, &_gemm_want, &blk)
    return (kern.mr, kern.nr, kern.pairs, blk.mc, blk.kc, blk.nc)


gemm_set_blocks(0, 0, 0)


cdef void _item_args(const mc_gemm_args *g, int64_t item, const int64_t *offs,
                     mc_gemm_args *h) noexcept nogil:
    """The arguments of batch item `item`: g with the item's byte offsets applied."""
    h[0] = g[0]
    h.a = g.a + offs[5 * item + 0]
    h.b = g.b + offs[5 * item + 1]
    h.out = g.out + offs[5 * item + 2]
    h.acc = <float *>(<char *>g.acc + offs[5 * item + 3])
    if g.c != NULL:
        h.c = <const float *>(<const char *>g.c + offs[5 * item + 4])


cdef int _gemm_item(const mc_gemm_kernel *kern, const mc_gemm_blocks *blk, mc_gemm_args *g,
                    int64_t item, const int64_t *offs, int parts, int part,
                    bint split_n) noexcept nogil:
    """Computes part `part` of `parts` of batch item `item`; returns 1 when out of memory."""
    cdef mc_gemm_args h
    cdef int64_t lo, hi, chunk, tiles, unit, total
    cdef void *work = mc_gemm_workspace_(0, mc_gemm_workspace_bytes(kern, blk))
    if work == NULL:
        return 1
    _item_args(g, item, offs, &h)
    if parts == 1:
        mc_gemm_run(kern, blk, &h, 0, h.m, 0, h.n, work)
        return 0
    unit = kern.nr if split_n else kern.mr
    total = h.n if split_n else h.m
    tiles = (total + unit - 1) // unit
    chunk = (tiles + parts - 1) // parts * unit
    lo = part * chunk
    hi = min(lo + chunk, total)
    if lo < hi:
        if split_n:
            mc_gemm_run(kern, blk, &h, 0, h.m, lo, hi, work)
        else:
            mc_gemm_run(kern, blk, &h, lo, hi, 0, h.n, work)
    return 0


cdef bint _split_along_n(int64_t mtiles, int64_t ntiles, int nthreads) noexcept nogil:
    """Cut along N when it has at least as many tiles as M, or when its tiles divide among
    the threads clearly more evenly (256 x 256: 8 column tiles split 4 + 4, while 19 row tiles
    split 10 + 9)."""
    cdef double eff_m, eff_n
    if ntiles >= mtiles:
        return True
    eff_m = mtiles / <double>(nthreads * ((mtiles + nthreads - 1) // nthreads))
    eff_n = ntiles / <double>(nthreads * ((ntiles + nthreads - 1) // nthreads))
    return eff_n > eff_m + 0.02


def gemm_run(cnp.ndarray a, cnp.ndarray b, cnp.ndarray out, object acc, object c, object bias,
             cnp.ndarray offsets, int64_t m, int64_t n, int64_t k, tuple a_strides,
             tuple b_strides, tuple o_strides, tuple acc_strides, tuple c_strides,
             int64_t bias_stride, int a_type, int b_type, int out_type, float alpha, float beta,
             int act):
    """Runs the batched GEMM (validated by the caller); offsets is int64 of shape (batch, 5):
    byte offsets of A, B, out, acc and Cin for each item."""
    cdef const mc_gemm_kernel *kern = mc_gemm_select(_level, a_type, b_type)
    cdef mc_gemm_blocks blk
    cdef mc_gemm_args g, h
    cdef int64_t batch = offsets.shape[0]
    cdef const int64_t *offs = <const int64_t *>cnp.PyArray_DATA(offsets)
    cdef int64_t item, it
    cdef int nthreads, parts, t, failed = 0
    cdef bint split_n
    cdef mc_fpflags_t flags
    mc_gemm_blocks_for(kern, &_gemm_want, &blk)
    g.m = m
    g.n = n
    g.k = k
    g.a = <const char *>cnp.PyArray_DATA(a)
    g.a_rs, g.a_cs = a_strides
    g.a_type = a_type
    g.b = <const char *>cnp.PyArray_DATA(b)
    g.b_rs, g.b_cs = b_strides
    g.b_type = b_type
    g.out = <char *>cnp.PyArray_DATA(out)
    g.o_rs, g.o_cs = o_strides
    g.out_type = out_type
    g.acc = <float *>cnp.PyArray_DATA(<cnp.ndarray>acc)
    g.acc_rs, g.acc_cs = acc_strides
    g.c = NULL
    g.c_rs = g.c_cs = 0
    if c is not None:
        g.c = <const float *>cnp.PyArray_DATA(<cnp.ndarray>c)
        g.c_rs, g.c_cs = c_strides
    g.bias = NULL
    g.bias_s = bias_stride
    if bias is not None:
        g.bias = <const float *>cnp.PyArray_DATA(<cnp.ndarray>bias)
    g.alpha = alpha
    g.beta = beta
    g.act = act
    if batch == 0 or m == 0 or n == 0:
        return
    nthreads = _threads_for(batch * m * n * max(k, 1), GEMM_PARALLEL_MIN)
    split_n = _split_along_n((m + kern.mr - 1) // kern.mr, (n + kern.nr - 1) // kern.nr,
                             nthreads)
    with nogil:
        mc_fpflags_save(&flags)
        if nthreads == 1:
            for item in range(batch):
                if _gemm_item(kern, &blk, &g, item, offs, 1, 0, split_n) != 0:
                    failed = 1
                    break
        elif batch % nthreads == 0 or batch >= 4 * nthreads:
            # whole items per thread (a remainder of a few items would leave threads idle)
            for t in prange(nthreads, num_threads=nthreads, schedule="static"):
                it = t
                while it < batch:
                    failed += _gemm_item(kern, &blk, &g, it, offs, 1, 0, split_n)
                    it = it + nthreads
        elif not split_n:
            # cut along M: the threads share each packed B block (mc_gemm_run_shared)
            for item in range(batch):
                _item_args(&g, item, offs, &h)
                if mc_gemm_run_shared(kern, &blk, &h, nthreads) != 0:
                    failed = 1
                    break
        else:
            parts = nthreads
            for item in range(batch):
                for t in prange(parts, num_threads=nthreads, schedule="static"):
                    failed += _gemm_item(kern, &blk, &g, item, offs, parts, t, split_n)
        mc_fpflags_restore(&flags)
    if failed:
        raise MemoryError("matmul: cannot allocate the packing buffers")
