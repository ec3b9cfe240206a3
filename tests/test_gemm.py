"""mixedcore.kernels.matmul: error bound, layouts, epilogue, determinism, bad input.

Every numerical test runs at every ISA level (the ``isa_level`` fixture).  The reference is the
float64 product of the same (already rounded) inputs; every element must lie within
``2 * k * 2**-24 * (|a| @ |b|)`` of it (docs/gemm.md derives the bound).  Inputs are drawn from a
normal distribution, so no product or partial sum is subnormal: at the avx512bf16 level
VDPBF16PS flushes subnormals, which ``test_bf16_subnormals`` shows separately.
"""
import math
import warnings

import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
U = 2.0 ** -24

PAIRS = [(F32, F32), (F16, F16), (BF16, BF16), (F32, BF16), (F16, BF16), (BF16, F32)]
EDGES = [1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97]


def _rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def _f64(x):
    return np.asarray(x).astype(np.float64)


def _bound(a, b, k):
    return 2 * max(k, 1) * U * (np.abs(_f64(a)) @ np.abs(_f64(b)))


def _check(got, a, b):
    """Every element within the bound of the float64 product of the same inputs."""
    a64, b64 = _f64(a), _f64(b)
    ref = a64 @ b64
    k = a.shape[-1]
    err = np.abs(_f64(got) - ref)
    bound = _bound(a, b, k)
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{bad.sum()} elements outside the bound; worst excess "
        f"{np.max(np.where(bad, err - bound, 0))}")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# ---------------------------------------------------------------------------------------------
# error bound over the shape grid


def _grid():
    # every edge size once in each role, plus shapes crossing several block edges at once
    shapes = []
    for i, s in enumerate(EDGES):
        t = EDGES[(i * 5 + 3) % len(EDGES)]
        u = EDGES[(i * 7 + 1) % len(EDGES)]
        shapes += [(s, t, u), (t, s, u), (u, t, s)]
    shapes += [(130, 300, 70), (29, 1100, 45)]
    return sorted(set(shapes))


@pytest.mark.parametrize("da,db", PAIRS, ids=lambda d: str(d))
def test_error_bound_shape_grid(isa_level, da, db, rng):
    for m, k, n in _grid():
        a = _rand(rng, (m, k), da)
        b = _rand(rng, (k, n), db)
        _check(kernels.matmul(a, b), a, b)


@pytest.mark.parametrize("da,db", [(F32, F32), (BF16, BF16), (F16, F32)], ids=str)
def test_error_bound_beyond_every_block(isa_level, da, db, rng):
    # small blocks so that M, N and K each span several MC / NC / KC blocks cheaply
    kernels.set_gemm_blocks(mc=28, kc=40, nc=64)
    try:
        for m, k, n in [(97, 131, 200), (65, 81, 129), (3, 97, 65)]:
            a = _rand(rng, (m, k), da)
            b = _rand(rng, (k, n), db)
            _check(kernels.matmul(a, b), a, b)
            got16 = kernels.matmul(a, b, out_dtype=F16)
            assert np.array_equal(got16.view(np.uint16),
                                  kernels.matmul(a, b).astype(F16).view(np.uint16))
    finally:
        kernels.set_gemm_blocks()


@pytest.mark.parametrize("out_dtype", [F16, BF16])
@pytest.mark.parametrize("da,db", [(F32, F32), (BF16, BF16), (F16, F16)], ids=str)
def test_16bit_output_is_rounded_once(isa_level, out_dtype, da, db, rng):
    """A 16-bit result is the float32 result rounded as numpy / ml_dtypes round it."""
    for m, k, n in [(17, 33, 65), (33, 600, 31), (1, 1100, 3)]:
        a = _rand(rng, (m, k), da) * 300
        b = _rand(rng, (k, n), db)
        a = a.astype(da)
        got = kernels.matmul(a, b, out_dtype=out_dtype)
        assert got.dtype == out_dtype
        want = kernels.matmul(a, b).astype(out_dtype)
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_k_zero_and_empty(isa_level):
    a = np.ones((3, 0), F16)
    b = np.ones((0, 4), BF16)
    got = kernels.matmul(a, b)
    assert got.shape == (3, 4) and got.dtype == F32 and not got.any()
    bias = np.arange(4, dtype=F32)
    got = kernels.matmul(a, b, bias=bias, activation="relu")
    assert np.array_equal(got, np.broadcast_to(bias, (3, 4)))
    assert kernels.matmul(np.ones((0, 5), F32), np.ones((5, 4), F32)).shape == (0, 4)
    assert kernels.matmul(np.ones((3, 5), F32), np.ones((5, 0), F32)).shape == (3, 0)
    assert kernels.matmul(np.ones((0, 3, 5), F32), np.ones((5, 2), F32)).shape == (0, 3, 2)


# ---------------------------------------------------------------------------------------------
# layouts


def _layouts(x):
    """Views of the same values in different memory layouts."""
    yield "C", x
    yield "F", np.asfortranarray(x)
    big = np.zeros((x.shape[0] * 2, x.shape[1] * 3), x.dtype)
    big[::2, ::3] = x
    yield "strided", big[::2, ::3]
    rev = np.ascontiguousarray(x[::-1, ::-1])
    yield "reversed", rev[::-1, ::-1]
    yield "transposed", np.ascontiguousarray(x.T).T


@pytest.mark.parametrize("da,db", [(F32, F32), (F16, F16), (BF16, BF16), (BF16, F16)], ids=str)
def test_layouts_give_identical_results(isa_level, da, db, rng):
    a0 = _rand(rng, (37, 71), da)
    b0 = _rand(rng, (71, 45), db)
    want = kernels.matmul(a0, b0)
    _check(want, a0, b0)
    for name_a, a in _layouts(a0):
        for name_b, b in _layouts(b0):
            got = kernels.matmul(a, b)
            assert np.array_equal(got, want), (name_a, name_b)


def test_batched_broadcast_and_vectors(isa_level, rng):
    a = _rand(rng, (2, 1, 19, 33), BF16)
    b = _rand(rng, (3, 33, 21), F16)
    got = kernels.matmul(a, b)
    ref = np.matmul(_f64(a), _f64(b))
    assert got.shape == ref.shape == (2, 3, 19, 21)
    bound = 2 * 33 * U * np.matmul(np.abs(_f64(a)), np.abs(_f64(b)))
    assert (np.abs(got - ref) <= bound).all()
    # batch items equal the single products, bit for bit
    for i in range(2):
        for j in range(3):
            assert np.array_equal(got[i, j], kernels.matmul(a[i, 0], b[j]))
    # 1-D operands follow numpy.matmul's shapes
    v = _rand(rng, (33,), F32)
    w = _rand(rng, (33,), F32)
    for x, y in [(v, b), (a, v), (v, w), (v, _rand(rng, (33, 5), F32))]:
        got = kernels.matmul(x, y)
        ref = np.matmul(_f64(x), _f64(y))
        assert np.shape(got) == ref.shape
        bound = 2 * 33 * U * np.matmul(np.abs(_f64(x)), np.abs(_f64(y)))
        assert np.all(np.abs(_f64(got) - ref) <= bound)
    # a broadcast (stride 0) batch of B and a transposed batch of A
    bb = np.broadcast_to(_rand(rng, (33, 21), F32), (4, 33, 21))
    at = np.ascontiguousarray(np.swapaxes(_rand(rng, (4, 19, 33), F16), 1, 2))
    got = kernels.matmul(np.swapaxes(at, 1, 2), bb)
    for i in range(4):
        assert np.array_equal(got[i], kernels.matmul(np.ascontiguousarray(at[i].T), bb[0]))


def test_misaligned_copies_bit_identical(isa_level, rng):
    for dt in (F32, F16, BF16):
        a = _rand(rng, (45, 77), dt)
        b = _rand(rng, (77, 50), dt)
        want = kernels.matmul(a, b)
        for shift in (1, 2, 3, 5):
            buf_a = np.zeros(a.size + 16, dt)
            buf_b = np.zeros(b.size + 16, dt)
            a2 = buf_a[shift:shift + a.size].reshape(a.shape)
            b2 = buf_b[shift:shift + b.size].reshape(b.shape)
            a2[...] = a
            b2[...] = b
            assert np.array_equal(kernels.matmul(a2, b2), want)
        # not even aligned to the element size: a view into a byte buffer
        raw = np.zeros(a.nbytes + 1, np.uint8)
        a3 = raw[1:].view(dt).reshape(a.shape)
        a3[...] = a
        assert np.array_equal(kernels.matmul(a3, b), want)


@pytest.mark.parametrize("shape", [(300, 200, 90), (150, 1100, 70), (2, 700, 3000),
                                   (3, 100, 100, 200)])
@pytest.mark.parametrize("dt", [F32, BF16])
def test_thread_count_does_not_change_bits(isa_level, shape, dt, rng):
    if len(shape) == 4:
        a = _rand(rng, shape[:3], dt)
        b = _rand(rng, (shape[0], shape[2], shape[3]), dt)
    else:
        a = _rand(rng, shape[:2], dt)
        b = _rand(rng, shape[1:], dt)
    with kernels.threads(1):
        one = kernels.matmul(a, b)
    with kernels.threads(2):
        two = kernels.matmul(a, b)
    assert np.array_equal(one, two)


# ---------------------------------------------------------------------------------------------
# special values


@pytest.mark.parametrize("dt", [F32, F16, BF16])
def test_nan_inf_stay_in_their_rows_and_columns(isa_level, dt, rng):
    m, k, n = 33, 70, 40
    a = (np.abs(_rand(rng, (m, k), np.float32)) + 0.5).astype(dt)
    b = (np.abs(_rand(rng, (k, n), np.float32)) + 0.5).astype(dt)
    a[5, 13] = np.nan
    b[20, 31] = np.inf
    got = kernels.matmul(a, b)
    assert np.isnan(got[5]).all()
    assert np.isposinf(np.delete(got[:, 31], 5)).all()
    rest = np.delete(np.delete(got, 5, axis=0), 31, axis=1)
    assert np.isfinite(rest).all()
    for od in (F16, BF16):
        got16 = kernels.matmul(a, b, out_dtype=od).astype(np.float32)
        assert np.isnan(got16[5]).all() and np.isposinf(np.delete(got16[:, 31], 5)).all()


@pytest.mark.parametrize("act", [None, "relu", "gelu"])
def test_bf16_output_rounding_of_subnormals_and_nans(act):
    """The epilogue's rounding to bfloat16 (VCVTNEPS2BF16 at avx512bf16, with the lanes it
    does not round as ml_dtypes does stored again) gives the generic level's bits on subnormal,
    NaN, infinite and huge results."""
    rng = np.random.default_rng(31)
    a = rng.standard_normal((37, 40)).astype(F32)
    b = rng.standard_normal((40, 70)).astype(F32)
    a[3] *= 1e-39
    a[7] *= 3e-40
    a[5, :] = np.nan
    a[9, 0] = np.inf
    a[11] *= 3e19
    # bfloat16 inputs (the pair kernels; rows of 32 columns rounded two vectors at a time),
    # whose sums stay normal (VDPBF16PS flushes subnormal sums: docs/gemm.md) and become
    # subnormal when the bias is added
    a16 = rng.standard_normal((37, 40)).astype(BF16)
    a16[3] = 0
    a16[3, 0] = 1
    a16[5, :] = np.nan
    a16[9, 0] = np.inf
    b16 = rng.standard_normal((40, 70)).astype(BF16)
    b16[0] = BF16.type(1.5e-38)
    bias16 = np.full(70, -1.4e-38, F32)
    for x, w, bias in ((a, b, None), (a16, b16, bias16)):
        bits = {}
        before = kernels.isa()
        try:
            for level in kernels.available_isas():
                kernels.set_isa(level)
                bits[level] = kernels.matmul(x, kernels.pack(w), bias=bias, activation=act,
                                             out_dtype=BF16).view(np.uint16)
        finally:
            kernels.set_isa(before)
        ref = bits["generic"]
        subnormal = ((ref & 0x7F80) == 0) & ((ref & 0x7F) != 0)
        assert subnormal.sum() > (50 if bias is None else 30)
        assert np.isnan(ref[5].view(BF16).astype(F32)).all()
        for level, got in bits.items():
            assert np.array_equal(got, ref), level


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=lambda d: np.dtype(d).name)
def test_narrow_tiles_same_bits_as_full_tiles(isa_level, dtype):
    """Tiles of at most 16 and of 17-24 columns (products that narrow, and the last panel of
    wider ones) compute only those columns at the AVX-512 levels, the second vector of a 17-24
    column tile in 256-bit halves, and products of at most 64 columns (two panels) read A in
    place instead of packing it (a subnormal bfloat16 in it found as the pack finds it): their columns have
    the bits of the same columns computed in full 32-column tiles from packed A (the product
    with more columns after them), with and without bias and activation, into each output
    dtype, rows of full and partial tiles."""
    rng = np.random.default_rng(47)
    x = rng.standard_normal((37, 40)).astype(dtype)
    if dtype == BF16:
        x[20, 7] = BF16.type(2.0 ** -130)         # subnormal: the pairs kernels leave it
    for n in (9, 15, 16, 17, 23, 24, 25, 32, 33, 40, 48, 56, 63, 64, 65, 144):
        w = rng.standard_normal((40, n + 64)).astype(dtype)
        bias = rng.standard_normal(n + 64).astype(F32)
        for kw in ({}, {"bias": bias, "activation": "relu6", "out_dtype": dtype},
                   {"bias": bias, "out_dtype": BF16}):
            wide = kernels.matmul(x, kernels.pack(w), **kw)
            kn = dict(kw, bias=bias[:n]) if "bias" in kw else kw
            got = kernels.matmul(x, kernels.pack(np.ascontiguousarray(w[:, :n])), **kn)
            assert np.array_equal(got.view(np.uint8),
                                  np.ascontiguousarray(wide[:, :n]).view(np.uint8)), (n, kw)


def test_beta_zero_never_reads_c(isa_level, rng):
    a = _rand(rng, (20, 30), F16)
    b = _rand(rng, (30, 10), F16)
    c = np.full((20, 10), np.nan, F32)
    got = kernels.matmul(a, b, c=c, beta=0.0)
    assert np.array_equal(got, kernels.matmul(a, b))
    got = kernels.matmul(a, b, c=c, beta=1.0)
    assert np.isnan(got).all()


def test_bf16_subnormals(isa_level):
    """Subnormal bfloat16 inputs are exact at every level (at avx512bf16 such a product runs on
    float32 panels); a float32 result below 2**-126 of normal inputs is flushed by VDPBF16PS
    at that level (documented in docs/gemm.md) and exact at the others."""
    a = np.array([[2.0 ** -130, 1.0]], BF16)
    b = np.array([[1.0], [0.0]], BF16)
    tiny_in = kernels.matmul(a, b)[0, 0]
    a = np.array([[2.0 ** -70, 0.0]], BF16)
    b = np.array([[2.0 ** -70], [0.0]], BF16)
    tiny_out = kernels.matmul(a, b)[0, 0]
    assert tiny_in == np.float32(2.0 ** -130)
    if isa_level == "avx512bf16":
        assert tiny_out == 0.0
    else:
        assert tiny_out == np.float32(2.0 ** -140)


def test_vdpbf16ps_rounding_order(isa_level, rng):
    """Within each pair the odd product is added first, each addition rounded (as two FMAs);
    at the other levels bfloat16 goes through float32 and every product is added in k order."""
    k = 8
    a = (rng.standard_normal((300, k)) * 2.0 ** rng.integers(-12, 12, (300, k))).astype(BF16)
    b = rng.standard_normal((k, 1)).astype(BF16)
    got = kernels.matmul(a, b)[:, 0]
    pa, pb = a.astype(np.float32), b[:, 0].astype(np.float32)
    acc = np.zeros(300, np.float32)
    order = [1, 0, 3, 2, 5, 4, 7, 6] if isa_level == "avx512bf16" else range(k)
    for i in order:
        acc = acc + pa[:, i] * pb[i]      # products of bfloat16 values are exact in float32
    if isa_level == "generic":
        _check(got[:, None], a, b)        # multiply then add: no FMA, same bound
    else:
        assert np.array_equal(got, acc)


# ---------------------------------------------------------------------------------------------
# epilogue


def _act64(name, x):
    if name is None:
        return x
    if name == "relu":
        return np.maximum(x, 0)
    if name == "gelu":
        return 0.5 * x * np.vectorize(math.erfc)(-x / math.sqrt(2))
    if name == "sigmoid":
        return 1 / (1 + np.exp(-x))
    return np.tanh(x)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "sigmoid", "tanh"])
@pytest.mark.parametrize("out_dtype", [F32, BF16])
def test_epilogue_against_numpy(isa_level, activation, out_dtype, rng):
    m, k, n = 21, 300, 37
    a = _rand(rng, (m, k), BF16)
    b = (_rand(rng, (k, n), np.float32) * 0.1).astype(F16)
    c = _rand(rng, (m, n), F16)
    bias = _rand(rng, (n,), F32)
    alpha, beta = 0.75, -1.5
    got = kernels.matmul(a, b, c=c, beta=beta, alpha=alpha, bias=bias, activation=activation,
                         out_dtype=out_dtype)
    assert got.dtype == out_dtype
    # float64 reference; the tolerance is the product's bound scaled by alpha, plus one float32
    # rounding of each of the three epilogue operations and of the activation, plus the output
    # rounding; the activations are 1-Lipschitz or less (gelu: 1.13).
    s = _f64(a) @ _f64(b)
    pre = alpha * s + beta * _f64(c) + _f64(bias)
    want = _act64(activation, pre)
    err_pre = abs(alpha) * _bound(a, b, k) + 3 * U * (np.abs(alpha * s) + np.abs(beta * _f64(c))
                                                      + np.abs(_f64(bias)) + np.abs(pre))
    tol = 1.13 * err_pre + 2 * U * np.abs(want) + 2.0 ** -149
    if out_dtype == BF16:
        tol = tol + 2.0 ** -8 * np.abs(want) + 2.0 ** -133
    assert (np.abs(_f64(got) - want) <= tol).all()
    if out_dtype == F32 and activation in (None, "relu"):
        # the vector epilogue agrees bit for bit with the scalar formula applied to the product
        base = kernels.matmul(a, b)
        v = np.float32(alpha) * base + np.float32(beta) * c.astype(F32)
        v = v + bias
        if activation == "relu":
            v = np.where(v < 0, np.float32(0), v)
        assert np.array_equal(got, v)


def test_bias_and_c_broadcast(isa_level, rng):
    a = _rand(rng, (2, 9, 14), F32)
    b = _rand(rng, (14, 6), F32)
    base = kernels.matmul(a, b)
    row = _rand(rng, (6,), F32)
    col = _rand(rng, (9, 1), BF16)
    assert np.array_equal(kernels.matmul(a, b, c=row, beta=1.0), base + row)
    assert np.array_equal(kernels.matmul(a, b, c=col, beta=1.0), base + col.astype(F32))
    assert np.array_equal(kernels.matmul(a, b, bias=np.float32(2.0) * np.ones(1, F32)), base + 2)
    assert np.array_equal(kernels.matmul(a, b, bias=row.astype(F16)),
                          base + row.astype(F16).astype(F32))


def test_out_argument(isa_level, rng):
    a = _rand(rng, (10, 20), F16)
    b = _rand(rng, (20, 12), F16)
    want = kernels.matmul(a, b)
    out = np.zeros((10, 12), F32)
    assert kernels.matmul(a, b, out=out) is out and np.array_equal(out, want)
    big = np.zeros((20, 36), F32)
    view = big[::2, ::3]
    kernels.matmul(a, b, out=view)
    assert np.array_equal(view, want) and not big[1::2].any()
    out16 = np.zeros((12, 10), BF16).T
    kernels.matmul(a, b, out=out16)
    assert np.array_equal(out16.view(np.uint16), want.astype(BF16).view(np.uint16))
    raw = np.zeros(10 * 12 * 4 + 1, np.uint8)
    unaligned = raw[1:].view(F32).reshape(10, 12)
    kernels.matmul(a, b, out=unaligned)
    assert np.array_equal(unaligned, want)


# ---------------------------------------------------------------------------------------------
# bad input


def test_bad_types():
    a = np.ones((2, 3), F32)
    b = np.ones((3, 4), F32)
    for bad in (np.ones((3, 4), np.int32), np.ones((3, 4), np.complex64),
                np.ones((3, 4), np.float64), np.array([[1]] * 3, dtype=object)):
        with pytest.raises(TypeError, match="matmul: unsupported dtype"):
            kernels.matmul(a, bad)
    # array-likes are taken as numpy takes them: a list of Python floats is float64
    with pytest.raises(TypeError, match="matmul: unsupported dtype float64 for a"):
        kernels.matmul([[1.0, 2.0, 3.0]], b)
    np.testing.assert_array_equal(kernels.matmul([np.float32(1)] * 3, b), [3.0] * 4)
    with pytest.raises(TypeError, match="out_dtype"):
        kernels.matmul(a, b, out_dtype=np.float64)
    with pytest.raises(TypeError, match="bias"):
        kernels.matmul(a, b, bias=[1.0, 2.0, 3.0, 4.0])
    with pytest.raises(TypeError, match="bias dtype"):
        kernels.matmul(a, b, bias=np.ones(4, np.int64))
    with pytest.raises(TypeError, match="c dtype"):
        kernels.matmul(a, b, c=np.ones((2, 4), np.float64), beta=1.0)
    with pytest.raises(TypeError, match="alpha"):
        kernels.matmul(a, b, alpha="2")
    with pytest.raises(TypeError, match="out"):
        kernels.matmul(a, b, out=[[0.0] * 4] * 2)


def test_scalars_and_byte_order_as_numpy():
    a = np.ones((2, 3), F32)
    b = np.ones((3, 4), F32)
    with pytest.raises(ValueError, match="matmul: a is 0-d"):
        kernels.matmul(np.float32(2), b)
    with pytest.raises(ValueError, match="matmul: b is 0-d"):
        kernels.matmul(a, np.array(2, F32))
    out = np.zeros((2, 4), ">f4")
    assert kernels.matmul(a, b, out=out) is out
    np.testing.assert_array_equal(out, np.full((2, 4), 3.0))
    for alpha in (1e300, 10 ** 400, float("nan"), -float("inf")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match="alpha and beta must be finite float32"):
                kernels.matmul(a, b, alpha=alpha)
    with pytest.raises(ValueError, match="alpha and beta must be finite float32"):
        kernels.matmul(a, b, c=np.ones((2, 4), F32), beta=1e39)


def test_bad_values():
    a = np.ones((2, 3), F32)
    b = np.ones((3, 4), F32)
    with pytest.raises(ValueError, match=r"inner dimensions differ: \(2, 3\) @ \(4, 3\)"):
        kernels.matmul(a, np.ones((4, 3), F32))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        kernels.matmul(np.ones((), F32), b)
    with pytest.raises(ValueError, match="batch dimensions"):
        kernels.matmul(np.ones((2, 2, 3), F32), np.ones((3, 3, 4), F32))
    with pytest.raises(ValueError, match=r"bias has shape \(3,\)"):
        kernels.matmul(a, b, bias=np.ones(3, F32))
    with pytest.raises(ValueError, match="c has shape"):
        kernels.matmul(a, b, c=np.ones((3, 4), F32), beta=1.0)
    with pytest.raises(ValueError, match="needs c"):
        kernels.matmul(a, b, beta=0.5)
    with pytest.raises(ValueError, match="unknown activation"):
        kernels.matmul(a, b, activation="mish")
    with pytest.raises(ValueError, match="out has shape"):
        kernels.matmul(a, b, out=np.zeros((4, 2), F32))
    with pytest.raises(ValueError, match="out has dtype"):
        kernels.matmul(a, b, out=np.zeros((2, 4), F16), out_dtype=F32)
    ro = np.zeros((2, 4), F32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        kernels.matmul(a, b, out=ro)
    buf = np.ones((3, 4), F32)
    with pytest.raises(ValueError, match="overlaps"):
        kernels.matmul(np.ones((3, 3), F32), buf, out=buf)
    c = np.ones((2, 4), F32)
    with pytest.raises(ValueError, match="overlaps"):
        kernels.matmul(a, b, c=c, beta=1.0, out=c)


@pytest.mark.parametrize("dt", [F32, F16, BF16])
def test_small_m_reads_b_in_place_with_the_same_bits(isa_level, dt, rng):
    """Up to MR rows, B is read in place instead of packed: the same operations, the same bits
    as the rows of a taller product (which packs B), for odd K and ragged N too."""
    for k, n in [(1, 1), (77, 45), (1101, 33)]:
        a = _rand(rng, (40, k), dt)
        b = _rand(rng, (k, n), dt)
        tall = kernels.matmul(a, b)
        for m in (1, 2, 5, 13, 14):
            assert np.array_equal(kernels.matmul(a[:m], b), tall[:m])
            assert np.array_equal(kernels.matmul(a[:m], np.asfortranarray(b)), tall[:m])


@pytest.mark.parametrize("activation", ["gelu", "sigmoid", "tanh"])
def test_vector_activations_match_the_scalar_twin(isa_level, activation):
    """The vector epilogue against the scalar twin (mc_act_scalar.h, the same float64 operations
    in the same order): the same bits, NaNs included (docs/gemm.md).  Covers both sides of the
    gelu branch points (|x| = 2 sqrt 2), tiny, huge and special values; tests/test_activations.py
    has the denser sweeps."""
    x = np.concatenate([np.linspace(-30, 30, 40001), np.geomspace(1e-30, 60, 5000),
                        -np.geomspace(1e-30, 60, 5000),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-45]])
    col = x.astype(np.float32).reshape(-1, 1)
    one = np.ones((1, 1), np.float32)
    got = kernels.matmul(col, one, activation=activation)[:, 0]
    level = kernels.isa()
    kernels.set_isa("generic")
    try:
        want = kernels.matmul(col, one, activation=activation)[:, 0]
    finally:
        kernels.set_isa(level)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    ref = np.array([math.erfc(-v / math.sqrt(2)) * 0.5 * v if activation == "gelu" else
                    (1 / (1 + math.exp(-v)) if activation == "sigmoid" else math.tanh(v))
                    for v in col[:40001:97, 0].astype(np.float64)])
    assert np.all(np.abs(got[:40001:97] - ref) <= 2.0 ** -23 * np.abs(ref) + 2.0 ** -149)


def test_mc_nc_do_not_change_bits(isa_level, rng):
    """MC and NC only reorder whole tiles: the same bits (KC, by design, may change them)."""
    a = _rand(rng, (100, 150), BF16)
    b = _rand(rng, (150, 90), F16)
    want = kernels.matmul(a, b)
    kernels.set_gemm_blocks(mc=14, nc=32)
    try:
        assert np.array_equal(kernels.matmul(a, b), want)
    finally:
        kernels.set_gemm_blocks()
    kernels.set_gemm_blocks(kc=40)
    try:
        _check(kernels.matmul(a, b), a, b)
    finally:
        kernels.set_gemm_blocks()


def test_dtype_names_and_result_types(isa_level):
    a = np.ones((2, 3), F16)
    b = np.ones((3, 4), BF16)
    assert kernels.matmul(a, b, out_dtype="bfloat16").dtype == BF16
    assert kernels.matmul(a, b, out_dtype="float16").dtype == F16
    assert kernels.matmul(a, b).dtype == F32
    s = kernels.matmul(np.ones(3, F32), np.ones(3, BF16))
    assert np.ndim(s) == 0 and s == 3.0
    big_endian = np.ones((3, 4), ">f4")
    assert np.array_equal(kernels.matmul(a, big_endian), np.full((2, 4), 3.0, F32))


def test_block_size_settings():
    with pytest.raises(ValueError, match="set_gemm_blocks: kc"):
        kernels.set_gemm_blocks(kc=-5)
    with pytest.raises(TypeError, match="set_gemm_blocks: mc must be an int, got float"):
        kernels.set_gemm_blocks(mc=2.5)
    import os
    import subprocess
    import sys
    env = dict(os.environ, MIXEDCORE_GEMM_KC="abc")
    run = subprocess.run([sys.executable, "-c", "import mixedcore.kernels"], env=env,
                         capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(kernels.__file__)))))
    assert run.returncode != 0 and "MIXEDCORE_GEMM_KC='abc'" in run.stderr


@pytest.mark.parametrize("out_dtype", [F32, F16, BF16])
def test_partial_sums_through_strided_out(isa_level, out_dtype, rng):
    """K over several KC blocks with an output that is not contiguous along rows: the partial
    sums go through the output itself (float32) or a scratch array (16-bit), then the epilogue."""
    a = _rand(rng, (23, 90), F16)
    b = _rand(rng, (90, 37), BF16)
    c = _rand(rng, (23, 37), F32)
    want = kernels.matmul(a, b, c=c, beta=0.5, bias=np.ones(37, F32), activation="tanh",
                          out_dtype=out_dtype)
    kernels.set_gemm_blocks(kc=16)
    try:
        out = np.zeros((37, 23), out_dtype).T
        got = kernels.matmul(a, b, c=c, beta=0.5, bias=np.ones(37, F32), activation="tanh",
                             out=out)
        assert got is out
        ref = kernels.matmul(a, b, c=c, beta=0.5, bias=np.ones(37, F32), activation="tanh",
                             out_dtype=out_dtype)
        assert np.array_equal(got.view(np.uint16 if out_dtype != F32 else np.uint32),
                              ref.view(np.uint16 if out_dtype != F32 else np.uint32))
    finally:
        kernels.set_gemm_blocks()
    # a different KC moves where block sums are added: within a few float32 roundings
    tol = 4 * 90 * U * (np.abs(_f64(a)) @ np.abs(_f64(b))) + 2.0 ** -8 * np.abs(_f64(want)) \
        + 2.0 ** -126
    assert np.all(np.abs(_f64(got) - _f64(want)) <= tol)


@pytest.mark.parametrize("dt", [F32, F16, BF16])
def test_small_m_wide_n(isa_level, dt, rng):
    """1-3 rows against many columns (the in-place path takes up to 128 columns per call): the
    bound, and the same bits as the rows of a taller product, for N not a multiple of 128."""
    for m, k, n in [(1, 40, 300), (2, 33, 129), (3, 70, 1000), (2, 5, 3000)]:
        a = _rand(rng, (m, k), dt)
        b = _rand(rng, (k, n), dt)
        got = kernels.matmul(a, b)
        _check(got, a, b)
        tall = kernels.matmul(np.concatenate([a, _rand(rng, (20, k), dt)]), b)
        assert np.array_equal(got, tall[:m])
        # B contiguous along k (a transposed weight matrix): read in place by columns
        assert np.array_equal(kernels.matmul(a, np.asfortranarray(b)), tall[:m])


@pytest.mark.parametrize("dt", [F32, F16, BF16])
def test_narrow_products_same_bits(isa_level, dt, rng):
    """At most 8 columns (and twice as many rows) are computed as C^T = B^T A^T: the same
    operations per element, so the same bits as the columns of a wider product; also with the
    epilogue, a 1-D b, batches, and a column-major A (which then takes the in-place path)."""
    a = _rand(rng, (300, 70), dt)
    b = _rand(rng, (70, 40), dt)
    c = _rand(rng, (300, 40), F32)
    wide = kernels.matmul(a, b, c=c, beta=0.5, activation="sigmoid")
    for n in (1, 3, 8):
        got = kernels.matmul(a, b[:, :n], c=c[:, :n], beta=0.5, activation="sigmoid")
        assert np.array_equal(got, wide[:, :n])
        assert np.array_equal(kernels.matmul(np.asfortranarray(a), b[:, :n], c=c[:, :n],
                                             beta=0.5, activation="sigmoid"), wide[:, :n])
    plain = kernels.matmul(a, b)
    assert np.array_equal(kernels.matmul(a, b[:, 5]), plain[:, 5])
    batched = kernels.matmul(np.stack([a, a[::-1]]), b[:, :2], out_dtype=F16)
    assert np.array_equal(batched[1].view(np.uint16),
                          plain[::-1, :2].astype(F16).view(np.uint16))
    _check(kernels.matmul(a, b[:, :1]), a, b[:, :1])


def test_concurrent_calls_from_python_threads(rng):
    """The GIL is released and every scratch buffer is per thread: concurrent calls agree with
    sequential ones, bit for bit."""
    from concurrent.futures import ThreadPoolExecutor
    jobs = []
    for i in range(8):
        m, k, n = 150 + 7 * i, 300 + 50 * i, 90 + 11 * i
        dt = (F32, F16, BF16)[i % 3]
        jobs.append((_rand(rng, (m, k), dt), _rand(rng, (k, n), dt), (F32, BF16)[i % 2]))
    want = [kernels.matmul(a, b, out_dtype=od) for a, b, od in jobs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda j: kernels.matmul(j[0], j[1], out_dtype=j[2]), jobs * 3))
    for i, g in enumerate(got):
        w = want[i % len(jobs)]
        assert np.array_equal(g.view(np.uint8), w.view(np.uint8))
