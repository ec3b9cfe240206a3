"""kernels.activation / activation_grad: scalar == vector bit for bit, GEMM epilogue == elementwise
kernel, accuracy against float64 (math) and 40-digit (mpmath) references, layouts, bad input,
and training == inference for Dense layers and Sequential models under every policy.

Every kernel test runs at every ISA level of this machine (the ``isa_level`` fixture).
"""
import math

import ml_dtypes
import numpy as np
import pytest

import fpenv
from mixedcore import kernels, layers, models

from levels import at_level

F32 = np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)
NAMES = ["linear", "relu", "gelu", "sigmoid", "tanh", "relu6", "silu", "hard_sigmoid",
         "hard_silu"]
FUSED = NAMES[1:]
SMOOTH = ["gelu", "sigmoid", "tanh", "silu", "hard_sigmoid", "hard_silu"]
X0 = -0.75179152469356445745790494678      # the root of gelu'


def bits(a):
    return np.ascontiguousarray(a, dtype=F32).view(np.uint32)


def assert_bits_equal(got, want):
    g, w = bits(got), bits(want)
    bad = np.flatnonzero(g.ravel() != w.ravel())
    assert bad.size == 0, (f"{bad.size} of {g.size} differ, first at {bad[:5]}: "
                           f"{g.ravel()[bad[:5]]} != {w.ravel()[bad[:5]]}")


def sweep_values():
    """Dense sweep with |x| to 20 and beyond, the branch points of the implementation and their
    float32 neighbours, zeros, subnormals, infinities, NaNs (quiet, signalling, negative, with
    payloads), the largest finite values and random bit patterns."""
    rng = np.random.default_rng(42)
    points = [0.0, 1.0 / 16, 2 * math.sqrt(2), 0.5, 1.0, -X0, 20.0, 37.6, 40.0, 88.7, 103.9, 354.0,
              708.0, 709.8, 1e4, 3.4028235e38, 1.17549435e-38, 1e-45, 1e-40, 2.0 ** -126]
    near = []
    with np.errstate(over="ignore"):
        for p in points:
            f = np.float32(p)
            for s in (1.0, -1.0):
                v = np.float32(s * f)
                near += [v, np.nextafter(v, np.float32(np.inf)),
                         np.nextafter(v, np.float32(-np.inf))]
    u = rng.integers(0, 2 ** 32, size=20000, dtype=np.uint64).astype(np.uint32)
    specials = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF80DEAD, 0x7FC01234, 0x7F800000,
                         0xFF800000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x80000000],
                        dtype=np.uint32)
    x = np.concatenate([
        np.linspace(-25, 25, 100003), np.linspace(-1.2, -0.3, 20001),
        np.geomspace(1e-30, 1e3, 4000), -np.geomspace(1e-30, 1e3, 4000),
        np.array(near, dtype=np.float64)]).astype(F32)
    return np.concatenate([x, u.view(F32), specials.view(F32)])


def finite_grads(n):
    """dy for the accuracy tests: normal values times 2**-10 .. 2**10, and ones."""
    rng = np.random.default_rng(9)
    dy = (rng.standard_normal(n) * np.exp2(rng.integers(-10, 11, n))).astype(F32)
    dy[::7] = 1.0
    return dy


def sweep_grads(n):
    rng = np.random.default_rng(7)
    dy = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(F32)
    dy[::97] = 1.0
    dy[5::997] = np.inf
    dy[6::997] = -np.inf
    dy[7::997] = np.nan
    dy[8::997] = 0.0
    dy[9::997] = 3.4e38
    return dy


# --- scalar == vector ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_every_level_matches_the_scalar_twin(isa_level, name):
    x = sweep_values()
    dy = sweep_grads(x.size)
    want = at_level("generic", kernels.activation, x, name)
    want_grad = at_level("generic", kernels.activation_grad, dy, x, name)
    assert_bits_equal(kernels.activation(x, name), want)
    assert_bits_equal(kernels.activation_grad(dy, x, name), want_grad)


def compare_levels_on_patterns(name, start, stop, step=1 << 24):
    """Every level against the generic one on the float32 bit patterns [start, stop), forward
    and backward (dy: the same patterns in reverse order, so every kind of dy occurs)."""
    previous = kernels.isa()
    try:
        for lo in range(start, stop, step):
            x = np.arange(lo, min(lo + step, stop), dtype=np.uint64).astype(np.uint32).view(F32)
            dy = x[::-1].copy()
            kernels.set_isa("generic")
            want, want_grad = kernels.activation(x, name), kernels.activation_grad(dy, x, name)
            for level in kernels.available_isas()[1:]:
                kernels.set_isa(level)
                assert_bits_equal(kernels.activation(x, name), want)
                assert_bits_equal(kernels.activation_grad(dy, x, name), want_grad)
    finally:
        kernels.set_isa(previous)


def test_levels_agree_on_a_slice_of_patterns():
    """A contiguous run of bit patterns around 1.0 and one of negative values near -4."""
    for name in NAMES:
        compare_levels_on_patterns(name, 0x3F7F0000, 0x3F810000, step=1 << 16)
        compare_levels_on_patterns(name, 0xC07F8000, 0xC0808000, step=1 << 16)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_float32_pattern(name):
    """All 2**32 inputs, forward and backward, every level against the generic one (about half
    an hour for the five names on the development machine, most of it at the generic level)."""
    compare_levels_on_patterns(name, 0, 1 << 32)


@pytest.mark.parametrize("name", NAMES)
def test_masked_tails_stay_inside_the_arrays(isa_level, name):
    rng = np.random.default_rng(3)
    src = (rng.standard_normal(64) * 4).astype(F32)
    dys = rng.standard_normal(64).astype(F32)
    full = at_level("generic", kernels.activation, src, name)
    full_grad = at_level("generic", kernels.activation_grad, dys, src, name)
    for n in range(0, 40):
        buf = np.full(n + 34, 7.0, F32)
        out = buf[17:17 + n]
        kernels.activation(src[3:3 + n], name, out=out)
        assert_bits_equal(out, full[3:3 + n])
        assert (buf[:17] == 7.0).all() and (buf[17 + n:] == 7.0).all()
        buf[:] = 7.0
        kernels.activation_grad(dys[5:5 + n], src[3:3 + n], name, out=out)
        assert_bits_equal(out, at_level("generic", kernels.activation_grad, dys[5:5 + n],
                                        src[3:3 + n], name))
        assert (buf[:17] == 7.0).all() and (buf[17 + n:] == 7.0).all()
    assert_bits_equal(kernels.activation_grad(dys, src, name), full_grad)


# --- the GEMM epilogue applies the same function -----------------------------------------------

@pytest.mark.parametrize("name", FUSED)
@pytest.mark.parametrize("strided", [False, True])
def test_gemm_epilogue_equals_the_elementwise_kernel(isa_level, name, strided):
    """x as a column times a 1 x 1 one: the product is x (with -0 becoming +0), so the fused
    activation must equal the elementwise kernel applied to the plain product.  A strided
    ``out=`` sends the epilogue down its scalar path."""
    x = sweep_values()
    col = x.reshape(-1, 1)
    one = np.ones((1, 1), F32)
    z = kernels.matmul(col, one)[:, 0]
    if strided:
        out = np.empty((x.size, 2), F32)[:, ::2]
        got = kernels.matmul(col, one, activation=name, out=out)[:, 0]
    else:
        got = kernels.matmul(col, one, activation=name)[:, 0]
    assert_bits_equal(got, kernels.activation(z, name))
    # 16-bit output: activation's value for that output type (gelu: evaluated in float32)
    got16 = kernels.matmul(col, one, activation=name, out_dtype="bfloat16")[:, 0]
    assert np.array_equal(got16.view(np.uint16),
                          kernels.activation(z, name, out_dtype=BF16).view(np.uint16))


@pytest.mark.parametrize("name", FUSED)
def test_gemm_epilogue_with_bias_over_full_tiles(isa_level, name):
    """A product with many columns (full vector tiles, the packed path) plus a bias; then with
    K cut into blocks, alpha, beta * c and a float16 output."""
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((37, 50)) * 2).astype(F32)
    b = (rng.standard_normal((50, 70)) * 0.5).astype(F32)
    bias = (rng.standard_normal(70) * 3).astype(F32)
    z = kernels.matmul(a, b, bias=bias)
    assert_bits_equal(kernels.matmul(a, b, bias=bias, activation=name),
                      kernels.activation(z, name))
    out = np.empty((37, 140), F32)[:, ::2]
    assert_bits_equal(kernels.matmul(a, b, bias=bias, activation=name, out=out),
                      kernels.activation(z, name))
    # several K blocks (partial sums carried between them), alpha, beta * c, 16-bit output
    c = rng.standard_normal((37, 70)).astype(F32)
    kernels.set_gemm_blocks(kc=16)
    try:
        z = kernels.matmul(a, b, bias=bias, c=c, alpha=0.75, beta=-0.5)
        got = kernels.matmul(a, b, bias=bias, c=c, alpha=0.75, beta=-0.5, activation=name,
                             out_dtype="float16")
    finally:
        kernels.set_gemm_blocks()
    assert np.array_equal(got.view(np.uint16),
                          kernels.activation(z, name, out_dtype=np.float16).view(np.uint16))


# --- accuracy -----------------------------------------------------------------------------------

def ulp32(r):
    """The float32 spacing at |r| (2**-149 in the subnormal range)."""
    e = np.frexp(np.abs(r))[1]
    return np.ldexp(1.0, np.maximum(e - 24, -149))


def _hard_sigmoid64(x):
    return min(max(x / 6.0 + 0.5, 0.0), 1.0)


def ref_forward64(name, x):
    if name == "silu":
        return x * ref_forward64("sigmoid", x)
    if name == "hard_sigmoid":
        return _hard_sigmoid64(x)
    if name == "hard_silu":
        return x * _hard_sigmoid64(x)
    if name == "gelu":
        return x * 0.5 * math.erfc(-x / math.sqrt(2))
    if name == "sigmoid":
        e = math.exp(-abs(x))
        return (e if x < 0 else 1.0) / (1.0 + e)
    return math.tanh(x)


def ref_grad64(name, x):
    if name == "silu":
        return ref_forward64("sigmoid", x) + x * ref_grad64("sigmoid", x)
    if name == "hard_sigmoid":
        return 1.0 / 6.0 if -3.0 < x < 3.0 else 0.0
    if name == "hard_silu":
        return 0.0 if x < -3.0 else 1.0 if x > 3.0 else x / 3.0 + 0.5
    if name == "gelu":
        return 0.5 * math.erfc(-x / math.sqrt(2)) + x * math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    if name == "sigmoid":
        e = math.exp(-abs(x))
        return e / (1.0 + e) ** 2
    e = math.exp(-2 * abs(x))
    return 4 * e / (1.0 + e) ** 2


def check_rounding(got, ref):
    """got (float32) is the rounding of ref to nearest: within half an ulp, plus the relative
    error the design allows before rounding (1e-12 here, far above the ~1e-15 it reaches and
    far below the 6e-8 of an ulp).  Implies the contract: within 1 ulp of the correctly rounded
    result."""
    err = np.abs(got.astype(np.float64) - ref) / ulp32(ref)
    slack = 1e-12 * np.abs(ref) / ulp32(ref)
    worst = np.argmax(err - slack)
    assert (err <= 0.5 + slack).all(), (f"{err[worst]:.6f} ulp at index {worst}: got "
                                        f"{got[worst]!r}, reference {ref[worst]!r}")


def accuracy_points():
    x = np.concatenate([np.linspace(-20, 20, 40001), np.linspace(-1, -0.5, 5001),
                        np.geomspace(1e-6, 20, 3000), -np.geomspace(1e-6, 20, 3000)])
    return np.unique(x.astype(F32))


@pytest.mark.parametrize("name", SMOOTH)
def test_forward_accuracy_against_math(isa_level, name):
    x = accuracy_points()
    got = kernels.activation(x, name)
    ref = np.array([ref_forward64(name, float(v)) for v in x])
    check_rounding(got, ref)


def ulp16(r, dtype):
    """The spacing of ``dtype`` (bfloat16 or float16) at |r|, subnormals included."""
    bits, emin = (8, -126) if dtype == BF16 else (11, -14)
    e = np.frexp(np.abs(r))[1] - 1
    return np.ldexp(1.0, np.maximum(e, emin) - (bits - 1))


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)], ids=["bfloat16", "float16"])
def test_gelu_for_16_bit_outputs(isa_level, dtype):
    """activation(x, "gelu", out_dtype=16 bits) is gelu evaluated in float32: within 2**-18
    (relative) of the exact value before its one rounding to 16 bits, so within half a 16-bit
    ulp plus that; the same bits at every level; the other activations round their float32
    value."""
    x = np.concatenate([accuracy_points(), np.linspace(-14.5, -2, 20001).astype(F32),
                        np.linspace(2, 30, 2001).astype(F32)])
    got = kernels.activation(x, "gelu", out_dtype=dtype)
    assert got.dtype == dtype
    ref = np.array([ref_forward64("gelu", float(v)) for v in x])
    with np.errstate(over="ignore"):
        err = np.abs(got.astype(np.float64) - ref)
    bound = 0.5 * ulp16(ref, dtype) + 2.0 ** -18 * np.abs(ref)
    worst = np.argmax(err / bound)
    assert (err <= bound).all(), (x[worst], got[worst], ref[worst])
    sweep = sweep_values()
    want = at_level("generic", kernels.activation, sweep, "gelu", out_dtype=dtype)
    assert np.array_equal(kernels.activation(sweep, "gelu", out_dtype=dtype).view(np.uint16),
                          want.view(np.uint16))
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, -20.0], F32)
    out = kernels.activation(special, "gelu", out_dtype=dtype).astype(np.float64)
    assert out[0] == np.inf and out[1] == 0.0 and np.isnan(out[2])
    assert (np.signbit(out[3:]) == [False, True, True]).all() and (out[3:] == 0).all()
    for name in ("relu", "silu", "tanh"):
        assert np.array_equal(kernels.activation(sweep, name, out_dtype=dtype).view(np.uint16),
                              kernels.cast(kernels.activation(sweep, name), dtype).view(np.uint16))


def test_activation_out_dtype_errors():
    x = np.linspace(-3, 3, 12, dtype=F32).reshape(3, 4)
    with pytest.raises(TypeError, match=r"activation: unsupported out_dtype float64"):
        kernels.activation(x, "gelu", out_dtype=np.float64)
    with pytest.raises(TypeError, match=r"activation: unsupported target dtype int8"):
        kernels.activation(x, "gelu", out_dtype=np.int8)
    with pytest.raises(ValueError, match=r"activation: out has dtype float32, expected bfloat16"):
        kernels.activation(x, "gelu", out_dtype=BF16, out=np.empty((3, 4), F32))
    out = np.empty((3, 4), BF16)
    assert kernels.activation(x, "gelu", out_dtype="bfloat16", out=out) is out
    out2 = np.empty((4, 3), BF16).T                 # out's own 16-bit dtype, any strides
    assert kernels.activation(x, "gelu", out=out2) is out2
    assert np.array_equal(out2.view(np.uint16), out.view(np.uint16))
    assert np.array_equal(out.view(np.uint16),
                          kernels.activation(x, "gelu", out_dtype=BF16).view(np.uint16))


@pytest.mark.parametrize("name", SMOOTH)
def test_backward_accuracy_against_math(isa_level, name):
    x = accuracy_points()
    if name == "gelu":   # the float64 reference itself cancels near the root: see the mpmath test
        x = x[np.abs(x.astype(np.float64) - X0) > 1e-3]
    for d in (np.ones_like(x), finite_grads(x.size)):
        got = kernels.activation_grad(d, x, name)
        ref = np.array([ref_grad64(name, float(v)) for v in x]) * d.astype(np.float64)
        keep = ref != 0
        check_rounding(got[keep], ref[keep])
        assert (got[~keep] == 0).all()


def test_relu_rules(isa_level):
    x = np.array([-2.0, -0.0, 0.0, 1e-45, 3.0, np.inf, -np.inf, np.nan], F32)
    y = kernels.activation(x, "relu")
    assert_bits_equal(y[:7], np.array([0.0, -0.0, 0.0, 1e-45, 3.0, np.inf, 0.0], F32))
    assert bits(y)[7] == bits(x)[7]
    dy = np.full(x.size, -2.5, F32)
    g = kernels.activation_grad(dy, x, "relu")
    assert_bits_equal(g[:7], np.array([-0.0, -0.0, -0.0, -2.5, -2.5, -2.5, -0.0], F32))
    assert np.isnan(g[7])
    # an infinite dy where relu' is 0 is IEEE inf * 0
    assert np.isnan(kernels.activation_grad(np.array([np.inf], F32), np.array([-1.0], F32),
                                            "relu"))[0]


def test_relu6_rules(isa_level):
    x = np.array([-2.0, -0.0, 0.0, 1e-45, 3.0, 6.0, np.nextafter(F32.type(6), F32.type(7)),
                  np.inf, -np.inf, np.nan], F32)
    y = kernels.activation(x, "relu6")
    assert_bits_equal(y[:9], np.array([0.0, -0.0, 0.0, 1e-45, 3.0, 6.0, 6.0, 6.0, 0.0], F32))
    assert bits(y)[9] == bits(x)[9]
    g = kernels.activation_grad(np.full(x.size, -2.5, F32), x, "relu6")
    assert_bits_equal(g[:9], np.array([-0.0, -0.0, -0.0, -2.5, -2.5, -0.0, -0.0, -0.0, -0.0],
                                      F32))
    assert np.isnan(g[9])


def test_special_values(isa_level):
    x = np.array([np.inf, -np.inf, 0.0, -0.0], F32)
    want = {"gelu": [np.inf, -0.0, 0.0, -0.0], "sigmoid": [1.0, 0.0, 0.5, 0.5],
            "tanh": [1.0, -1.0, 0.0, -0.0], "silu": [np.inf, -0.0, 0.0, -0.0],
            "hard_sigmoid": [1.0, 0.0, 0.5, 0.5], "hard_silu": [np.inf, -0.0, 0.0, -0.0]}
    want_grad = {"gelu": [1.0, 0.0, 0.5, 0.5], "sigmoid": [0.0, 0.0, 0.25, 0.25],
                 "tanh": [0.0, 0.0, 1.0, 1.0], "silu": [1.0, 0.0, 0.5, 0.5],
                 "hard_sigmoid": [0.0, 0.0, 1 / 6, 1 / 6], "hard_silu": [1.0, 0.0, 0.5, 0.5]}
    for name in SMOOTH:
        assert_bits_equal(kernels.activation(x, name), np.array(want[name], F32))
        g = kernels.activation_grad(np.ones(4, F32), x, name)
        np.testing.assert_array_equal(g, np.array(want_grad[name], F32))
        # NaN in: the same NaN, quieted; x's NaN before dy's
        nan = np.array([0x7F800001, 0xFFC0BEEF], np.uint32).view(F32)
        assert (bits(kernels.activation(nan, name)) == [0x7FC00001, 0xFFC0BEEF]).all()
        g = kernels.activation_grad(nan[::-1].copy(), nan, name)
        assert (bits(g) == [0x7FC00001, 0xFFC0BEEF]).all()
        g = kernels.activation_grad(nan, np.array([1.0, -1.0], F32), name)
        assert (bits(g) == [0x7FC00001, 0xFFC0BEEF]).all()


def test_gelu_is_accurate_in_its_tail_and_at_the_minimum(isa_level):
    """The tails, where gelu via 1 + erf(x) loses all accuracy (relative error 1 at x = -5.5
    with a float32-accurate erf) and 1 - tanh(x)**2 cancels (in float64 it keeps 6 digits at
    x = 12 and is 0 at x = 20): correctly rounded values, a subnormal gelu(-14) and a negative
    zero for gelu(-15)."""
    x = np.array([-5.5, -10.0, -13.0, -14.0, -15.0], F32)
    got = kernels.activation(x, "gelu")
    ref = np.array([ref_forward64("gelu", float(v)) for v in x])
    check_rounding(got, ref)
    assert got[3] == np.float32(-1.09301e-43)                  # subnormal
    assert got[4] == 0 and np.signbit(got[4])                   # -0.0: rounded from below
    g = kernels.activation_grad(np.ones(3, F32), np.array([12.0, -15.0, 20.0], F32), "tanh")
    check_rounding(g, np.array([ref_grad64("tanh", v) for v in (12.0, -15.0, 20.0)]))
    assert g[2] > 0


def _mp_refs():
    mpmath = pytest.importorskip("mpmath")
    mp = mpmath.mp
    mp.dps = 40

    def hard_sigmoid(x):
        return min(max(x / 6 + mp.mpf(1) / 2, 0), 1)

    def f(name, x):
        x = mp.mpf(x)
        if name == "silu":
            return x / (1 + mp.exp(-x))
        if name == "hard_sigmoid":
            return hard_sigmoid(x)
        if name == "hard_silu":
            return x * hard_sigmoid(x)
        if name == "gelu":
            return x * mpmath.ncdf(x)
        if name == "sigmoid":
            return 1 / (1 + mp.exp(-x))
        return mp.tanh(x)

    def d(name, x):
        x = mp.mpf(x)
        if name == "silu":
            s = 1 / (1 + mp.exp(-x))
            return s + x * s * (1 - s)
        if name == "hard_sigmoid":
            return mp.mpf(1) / 6 if -3 < x < 3 else 0
        if name == "hard_silu":
            return 0 if x < -3 else 1 if x > 3 else x / 3 + mp.mpf(1) / 2
        if name == "gelu":
            return mpmath.ncdf(x) + x * mpmath.npdf(x)
        if name == "sigmoid":
            s = 1 / (1 + mp.exp(-x))
            return s * (1 - s)
        return 1 / mp.cosh(x) ** 2

    return f, d


# the roots of silu' and hard_silu'
SILU_ROOTS = {"silu": -1.2784645427610738, "hard_silu": -1.5}


def test_silu_grads_near_their_roots(isa_level):
    """Near the root of silu' (hard_silu') the derivative is within 2**-52 of the exact value
    (absolute), far below a float32 ulp of 1."""
    f, d = _mp_refs()
    for name, root in SILU_ROOTS.items():
        x = np.linspace(root - 0.01, root + 0.01, 401).astype(F32)
        got = kernels.activation_grad(np.ones_like(x), x, name).astype(np.float64)
        ref = np.array([float(d(name, float(v))) for v in x])
        assert np.max(np.abs(got - ref) - ulp32(ref) / 2) <= 2.0 ** -52


def _mp_points():
    """The float32 values around gelu's minimum x0 (its derivative's root), around every branch
    point, where results become subnormal, and a spread over [-20, 20]."""
    pts = [np.float32(X0)]
    for _ in range(40):
        pts.append(np.nextafter(pts[-1], np.float32(0)))
    v = np.float32(X0)
    for _ in range(40):
        v = np.nextafter(v, np.float32(-1))
        pts.append(v)
    for p in (-1.0, -0.5, 1 / 16, -1 / 16, 2 * math.sqrt(2), -2 * math.sqrt(2)):
        v = np.float32(p)
        pts += [v, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf))]
    rng = np.random.default_rng(5)
    pts += list(rng.uniform(-20, 20, 600).astype(F32))
    pts += list(np.linspace(-14.2, -12.5, 60).astype(F32))     # gelu: subnormal results
    pts += list(np.linspace(-103.5, -87.0, 60).astype(F32))    # sigmoid: subnormal results
    pts += list(np.geomspace(1e-8, 1e-1, 60).astype(F32))
    return np.array(pts, F32)


@pytest.mark.parametrize("name", SMOOTH)
def test_accuracy_against_mpmath(isa_level, name):
    f, d = _mp_refs()
    x = _mp_points()
    if name != "sigmoid":
        x = x[np.abs(x) <= 20]
    got = kernels.activation(x, name)
    check_rounding(got, np.array([float(f(name, float(v))) for v in x]))
    # silu' and hard_silu' have a root (silu's and hard_silu's minimum) at which the sum that
    # forms them cancels: near it their error is absolute, not relative (see SILU_ROOTS)
    if name in SILU_ROOTS:
        x = x[np.abs(x.astype(np.float64) - SILU_ROOTS[name]) > 1e-2]
    dy = finite_grads(x.size)
    got = kernels.activation_grad(dy, x, name)
    ref = np.array([float(d(name, float(v)) * float(w)) for v, w in zip(x, dy)])
    keep = ref != 0
    check_rounding(got[keep], ref[keep])


@fpenv.needs_libm
def test_no_floating_point_flags_leak(isa_level):
    fetestexcept, feclearexcept = fpenv.fetestexcept()
    x = sweep_values()
    feclearexcept(0x3D)
    for name in NAMES:
        kernels.activation(x, name)
        kernels.activation_grad(sweep_grads(x.size), x, name)
    assert fetestexcept(0x3D) & 0x0D == 0   # no INVALID, OVERFLOW or DIVBYZERO raised


# --- layouts ------------------------------------------------------------------------------------

def test_layouts_and_out(isa_level):
    rng = np.random.default_rng(1)
    base = (rng.standard_normal((6, 10, 4)) * 3).astype(F32)
    views = [base, base[::2, 1::3], base.transpose(2, 0, 1), np.asfortranarray(base),
             base[::-1], base.astype(">f4"), base[0, 0, 0], base[:0]]
    for name in NAMES:
        for x in views:
            dy = rng.standard_normal(np.shape(x)).astype(F32)
            x_c = np.ascontiguousarray(x, dtype=F32)
            dy_c = np.ascontiguousarray(dy, dtype=F32)
            want = kernels.activation(x_c, name)
            got = kernels.activation(x, name)
            assert got.shape == np.shape(x) and got.dtype == F32
            assert_bits_equal(got, want)
            assert_bits_equal(kernels.activation_grad(dy, x, name),
                              kernels.activation_grad(dy_c, x_c, name))
            out = np.zeros(np.shape(x) + (2,), F32)[..., 0]          # strided out
            assert kernels.activation(x, name, out=out) is out
            assert_bits_equal(out, want)
            out_f = np.zeros(np.shape(x), F32, order="F")
            assert kernels.activation_grad(dy, x, name, out=out_f) is out_f
            assert_bits_equal(out_f, kernels.activation_grad(dy_c, x_c, name))
    assert np.asarray(kernels.activation(np.asfortranarray(base), "tanh")).flags.f_contiguous
    # array-likes
    assert_bits_equal(kernels.activation([np.float32(1.5), np.float32(-2)], "gelu"),
                      kernels.activation(np.array([1.5, -2], F32), "gelu"))


# --- bad input ----------------------------------------------------------------------------------

def test_errors_and_nothing_written():
    x = np.ones((3, 4), F32)
    out = np.full((3, 4), 9.0, F32)
    with pytest.raises(TypeError, match=r"activation: x must have dtype float32, got float64"):
        kernels.activation(np.ones(3), "relu", out=out[0, :3])
    with pytest.raises(TypeError, match=r"activation: x must have dtype float32, got float16"):
        kernels.activation(np.ones(3, np.float16), "relu")
    with pytest.raises(TypeError, match=r"activation_grad: dy must have dtype float32, got int64"):
        kernels.activation_grad(np.ones((3, 4), np.int64), x, "relu", out=out)
    with pytest.raises(ValueError, match=r"unknown activation 'mish'; valid names: \['linear', "
                                         r"'relu', 'gelu', 'sigmoid', 'tanh', 'relu6', "):
        kernels.activation(x, "mish", out=out)
    with pytest.raises(ValueError, match="activation_grad: unknown activation 'softmax'"):
        kernels.activation_grad(x, x, "softmax", out=out)
    with pytest.raises(TypeError, match="activation: name must be a str, got NoneType"):
        kernels.activation(x, None)
    with pytest.raises(ValueError, match=r"dy has shape \(4, 3\) but x has shape \(3, 4\)"):
        kernels.activation_grad(np.ones((4, 3), F32), x, "gelu", out=out)
    with pytest.raises(ValueError, match=r"activation: out has shape \(4, 3\), expected \(3, 4\)"):
        kernels.activation(x, "gelu", out=np.zeros((4, 3), F32))
    with pytest.raises(ValueError, match="activation: out has dtype float64, expected float32"):
        kernels.activation(x, "gelu", out=np.zeros((3, 4)))
    with pytest.raises(TypeError, match="activation: out must be a numpy.ndarray, got list"):
        kernels.activation(x, "gelu", out=[0.0] * 12)
    ro = np.zeros((3, 4), F32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="activation: out is read-only"):
        kernels.activation(x, "gelu", out=ro)
    with pytest.raises(ValueError, match="activation: out overlaps an input array"):
        kernels.activation(x, "gelu", out=x)
    with pytest.raises(ValueError, match="activation_grad: out overlaps an input array"):
        kernels.activation_grad(out, x, "gelu", out=out)
    assert (out == 9.0).all() and (x == 1.0).all()


# --- layers: training == inference --------------------------------------------------------------

POLICIES = ["float32", "mixed_float16", "mixed_bfloat16", "float64"]
ALL_ACTIVATIONS = ["linear", "relu", "gelu", "sigmoid", "tanh", "relu6", "silu", "hard_silu",
                   "softmax"]


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(np.ascontiguousarray(a).view(np.uint8),
                          np.ascontiguousarray(b).view(np.uint8))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", ALL_ACTIVATIONS)
def test_dense_training_equals_inference(policy, name):
    rng = np.random.default_rng(17)
    for units, use_bias in ((37, True), (3, False), (1, True)):
        layer = layers.Dense(units, activation=name, use_bias=use_bias, dtype=policy)
        x = (rng.standard_normal((29, 21)) * 2).astype(np.float32)
        layer.build_from_shape(x.shape)
        weights = [rng.standard_normal((21, units))]
        if use_bias:
            weights.append(rng.standard_normal(units))
        layer.set_weights(weights)
        _same(layer(x, training=True), layer(x, training=False))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", ALL_ACTIVATIONS)
def test_sequential_training_equals_inference(policy, name):
    rng = np.random.default_rng(23)
    model = models.Sequential([
        layers.Input(shape=(12,)),
        layers.Dense(40, activation="gelu", dtype=policy),
        layers.Dense(24, activation=name, dtype=policy),
        layers.Activation(name, dtype=policy),
        layers.Dense(10, activation=name, dtype=policy),
    ])
    x = (rng.standard_normal((33, 12)) * 3).astype(np.float32)
    _same(model(x, training=True), model(x, training=False))
    # one batch: under float64 numpy's BLAS rounds a 1-row product differently from a 32-row one
    _same(model(x, training=True), model.predict(x, batch_size=x.shape[0], verbose=0))


def test_activation_layer_uses_the_kernel_under_16bit_policies():
    """An Activation layer is kernels.activation, bit for bit: in float32, and under a 16-bit
    policy on the input widened exactly, rounded once to the compute dtype as a fused epilogue
    rounds (gelu evaluated in float32)."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((64, 256)) * 4).astype(np.float32)
    for name in FUSED:
        _same(layers.Activation(name)(x), kernels.activation(x, name))
        for policy, dt in (("mixed_bfloat16", BF16), ("mixed_float16", np.dtype(np.float16))):
            got = layers.Activation(name, dtype=policy)(x)
            _same(got, kernels.activation(kernels.cast(kernels.cast(x, dt), F32), name,
                                          out_dtype=dt))


# --- softmax ------------------------------------------------------------------------------------

def _softmax_ref(x, axis, log):
    """In long double (80-bit on x86-64), with the log of the sum as log1p of the terms other
    than the maximum's (exactly 1): accurate well past float32 even where the sum is close to 1
    (the log-softmax of the maximum is then about minus the other terms)."""
    xl = np.moveaxis(np.asarray(x, np.longdouble), axis, -1)
    m = np.max(xl, axis=-1, keepdims=True)
    e = np.exp(xl - m)
    first = np.argmax(xl, axis=-1)[..., None]
    np.put_along_axis(e, first, 0.0, axis=-1)
    t = np.sum(e, axis=-1, keepdims=True)
    np.put_along_axis(e, first, 1.0, axis=-1)
    ref = (xl - m) - np.log1p(t) if log else e / (1 + t)
    return np.moveaxis(ref, -1, axis)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_accuracy_and_levels(isa_level, log):
    """Within 1 ulp of the float64 softmax rounded once, and the same bits at every level."""
    rng = np.random.default_rng(5)
    for shape in [(1, 1), (3, 7), (64, 10), (5, 1000), (2, 33)]:
        x = (rng.standard_normal(shape) * 20).astype(np.float32)
        got = kernels.softmax(x, log=log)
        want = _softmax_ref(x, -1, log).astype(np.float32)
        ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
        assert ulps.max() <= 1, (shape, ulps.max())
        previous = kernels.isa()
        try:
            kernels.set_isa("generic")
            again = kernels.softmax(x, log=log)
        finally:
            kernels.set_isa(previous)
        np.testing.assert_array_equal(got.view(np.uint32), again.view(np.uint32))


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)], ids=["bfloat16", "float16"])
def test_softmax_for_16_bit_outputs(isa_level, dtype):
    """out_dtype float16 / bfloat16: the float32 softmax (the fused attention's), within 2**-17
    of the exact probabilities before the one rounding to 16 bits, so within half a 16-bit ulp
    plus that; the same bits at every level and along every axis; masked-style -1e9 scores and
    special rows as in float32."""
    rng = np.random.default_rng(8)
    for shape, spread in [((1, 1), 1), ((3, 7), 3), ((64, 128), 4), ((5, 1000), 20), ((2, 33), 40)]:
        x = (rng.standard_normal(shape) * spread).astype(np.float32)
        x[:, ::5] = -1e9
        got = kernels.softmax(x, out_dtype=dtype)
        assert got.dtype == dtype
        ref = _softmax_ref(x, -1, False).astype(np.float64)
        err = np.abs(got.astype(np.float64) - ref)
        near = x - x.max(axis=-1, keepdims=True) >= -88
        bound = np.where(near, 0.5 * ulp16(ref, dtype) + 2.0 ** -17 * ref, 0.5 * ulp16(ref, dtype)
                         + 2.0 ** -40)
        assert (err <= bound).all(), shape
        want = at_level("generic", kernels.softmax, x, out_dtype=dtype)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    y = rng.standard_normal((3, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(kernels.softmax(y, axis=1, out_dtype=dtype).view(np.uint16),
                                  np.moveaxis(kernels.softmax(np.moveaxis(y, 1, -1),
                                                              out_dtype=dtype), -1, 1)
                                  .view(np.uint16))
    special = np.array([[1, np.nan, 2], [np.inf, 0, 1], [-np.inf, 0, 0]], np.float32)
    got = kernels.softmax(special, out_dtype=dtype).astype(np.float32)
    assert np.isnan(got[:2]).all() and (got[2] == [0.0, 0.5, 0.5]).all()
    out = np.empty((3, 3), dtype)
    assert kernels.softmax(special, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint16),
                                  kernels.softmax(special, out_dtype=dtype).view(np.uint16))
    # log-softmax into 16 bits: the float64 one, rounded once
    np.testing.assert_array_equal(
        kernels.softmax(y, log=True, out_dtype=dtype).view(np.uint16),
        kernels.cast(kernels.softmax(y, log=True), dtype).view(np.uint16))
    with pytest.raises(TypeError, match="softmax: unsupported out_dtype float64"):
        kernels.softmax(y, out_dtype=np.float64)


def test_softmax_threads_and_axes():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4000, 50)).astype(np.float32)
    with kernels.threads(1):
        one = kernels.softmax(x)
    with kernels.threads(2):
        two = kernels.softmax(x)
    np.testing.assert_array_equal(one.view(np.uint32), two.view(np.uint32))
    y = rng.standard_normal((3, 4, 5)).astype(np.float32)
    for axis in (0, 1, 2, -1, -3):
        got = kernels.softmax(y, axis=axis)
        assert got.flags.c_contiguous
        np.testing.assert_allclose(got, _softmax_ref(y, axis, False), rtol=2e-7)
    np.testing.assert_array_equal(kernels.softmax(y.T, axis=0),
                                  kernels.softmax(np.ascontiguousarray(y.T), axis=0))
    out = np.empty((3, 4, 5), np.float32)
    assert kernels.softmax(y, axis=1, out=out) is out
    np.testing.assert_array_equal(out, kernels.softmax(y, axis=1))


def test_softmax_special_values():
    nan, inf = np.nan, np.inf
    x = np.array([[1, nan, 2], [inf, 0, 1], [-inf, -inf, -inf], [-inf, 0, 0]], np.float32)
    got = kernels.softmax(x)
    assert np.isnan(got[:3]).all()
    np.testing.assert_array_equal(got[3], [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(kernels.softmax(x[3:], log=True)[0],
                                  np.float32([-inf, -np.log(2), -np.log(2)]))
    assert kernels.softmax(np.zeros((3, 0), np.float32)).shape == (3, 0)
    assert kernels.softmax(np.zeros((0, 4), np.float32)).shape == (0, 4)


@pytest.mark.parametrize("args,kw,exc,msg", [
    ((np.float32(1.0),), {}, ValueError, "softmax: x must have at least 1 dimension"),
    ((np.ones(3),), {}, TypeError, "softmax: x must have dtype float32, got float64"),
    ((np.ones((2, 3), np.float32),), {"axis": 2}, ValueError,
     "softmax: axis 2 is out of range for an array of 2 dimensions"),
    ((np.ones((2, 3), np.float32),), {"axis": 1.0}, TypeError,
     "softmax: axis must be an int, got float"),
    ((np.ones((2, 3), np.float32),), {"out": np.ones((3, 2), np.float32)}, ValueError,
     r"softmax: out has shape \(3, 2\), expected \(2, 3\)"),
])
def test_softmax_errors(args, kw, exc, msg):
    out = kw.get("out")
    before = None if out is None else out.copy()
    with pytest.raises(exc, match=msg):
        kernels.softmax(*args, **kw)
    if out is not None:
        np.testing.assert_array_equal(out, before)
