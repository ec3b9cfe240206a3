"""kernels.layer_norm: every level bit for bit equal to the scalar twin (generic level), accuracy
against a float64 reference (at most 1 ulp of the output type), the residual sum, 16-bit inputs
and outputs, row lengths with and without tails, thread counts, statistics, special values,
layouts and bad input."""
import ml_dtypes
import numpy as np
import pytest

import fpenv
from mixedcore import kernels

from levels import at_level

F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
TYPES = [F16, BF16, F32]
LENGTHS = [1, 3, 17, 128, 1000]
UINT = {2: np.uint16, 4: np.uint32}


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(UINT[a.dtype.itemsize])


def assert_bits_equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = bits(got).ravel(), bits(want).ravel()
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (f"{bad.size} of {g.size} differ, first at {bad[:5]}: "
                           f"{g[bad[:5]]} != {w[bad[:5]]}")


def ordered(a):
    """Bit patterns mapped to integers in the order of the values (adjacent values differ by 1)."""
    b = bits(a).astype(np.int64)
    top = 1 << (8 * a.dtype.itemsize - 1)
    return np.where(b >= top, top - b, b)


def sample(rng, shape, dtype, scale=3.0, shift=1.5):
    return (rng.standard_normal(shape) * scale + shift).astype(dtype)


def reference(x, gamma=None, beta=None, eps=1e-3, residual=None):
    """float64 reference of the documented semantics; s = x + residual formed in float32."""
    s = x.astype(F32)
    if residual is not None:
        s = s + residual.astype(F32)
    s = s.astype(np.float64)
    mean = s.mean(axis=-1, keepdims=True)
    var = ((s - mean) ** 2).mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    y = (s - mean) * rstd
    if gamma is not None:
        y = y * gamma.astype(np.float64)
    if beta is not None:
        y = y + beta.astype(np.float64)
    return y, mean[..., 0], rstd[..., 0]


def ulp16(r, dtype):
    """The spacing of ``dtype`` (bfloat16 or float16) at |r|, subnormals included."""
    bits, emin = (8, -126) if dtype == BF16 else (11, -14)
    e = np.frexp(np.abs(r))[1] - 1
    return np.ldexp(1.0, np.maximum(e, emin) - (bits - 1))


def round_once(y64, dtype):
    return kernels.cast(y64, dtype)          # float64 -> dtype, one rounding


# --- every level == the scalar twin -------------------------------------------------------------

@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("xt", TYPES, ids=lambda d: str(d))
def test_every_level_matches_the_scalar_twin(isa_level, n, xt):
    rng = np.random.default_rng(n)
    x = sample(rng, (9, n), xt)
    r = sample(rng, (9, n), BF16 if xt != BF16 else F16, scale=0.5)
    g = rng.standard_normal(n).astype(F32)
    b = rng.standard_normal(n).astype(F32)
    for yt in TYPES:
        for args, kw in [((), {}), ((g, b), {}), ((g, None), {}), ((None, b), {}),
                         ((g, b), {"residual": r}), ((g, b), {"residual": x.astype(F32),
                                                               "epsilon": 0.25})]:
            want = at_level("generic", kernels.layer_norm, x, *args, out_dtype=yt,
                            return_stats=True, **kw)
            got = kernels.layer_norm(x, *args, out_dtype=yt, return_stats=True, **kw)
            for a, w in zip(got, want):
                assert_bits_equal(a, w)


def test_levels_agree_on_wide_ranges_of_values():
    """Rows mixing magnitudes 2**-60 .. 2**60 (large cancellations in the mean), huge gamma
    (results beyond the 16-bit ranges) and tiny ones (subnormal results)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 37)) * np.exp2(rng.integers(-60, 60, (64, 1)))).astype(F32)
    x[::3, ::5] *= 1e6
    gammas = [(np.clip(rng.standard_normal(37), -3, 3) * s).astype(F32)
              for s in (1e-40, 1e-7, 1.0, 1e5, 1e38)]
    for g in gammas:
        for yt in TYPES:
            want = at_level("generic", kernels.layer_norm, x, g, g, out_dtype=yt)
            for level in kernels.available_isas()[1:]:
                assert_bits_equal(at_level(level, kernels.layer_norm, x, g, g, out_dtype=yt), want)


# --- accuracy -----------------------------------------------------------------------------------

@pytest.mark.parametrize("yt", TYPES, ids=lambda d: str(d))
def test_accuracy_against_float64(isa_level, yt):
    rng = np.random.default_rng(11)
    for n in LENGTHS:
        for xt in TYPES:
            x = sample(rng, (40, n), xt)
            r = sample(rng, (40, n), F32, scale=0.1)
            g = (rng.standard_normal(n) + 0.5).astype(F32)
            b = rng.standard_normal(n).astype(F32)
            for residual in (None, r):
                y64, mean, rstd = reference(x, g, b, 1e-3, residual)
                got, gm, gr = kernels.layer_norm(x, g, b, residual=residual, out_dtype=yt,
                                                 return_stats=True)
                if yt == F32:           # float64 statistics, rounded once
                    want = round_once(y64, yt)
                    assert np.abs(ordered(got) - ordered(want)).max() <= 1, (n, xt)
                    assert np.abs(ordered(gm) - ordered(mean.astype(F32))).max() <= 1
                    assert np.abs(ordered(gr) - ordered(rstd.astype(F32))).max() <= 1
                else:                   # float32 statistics (docs/layers.md)
                    # half a 16-bit unit, plus float32 roundings of the terms of the result
                    # (the mean's among them)
                    terms = (np.abs(y64 - b) + np.abs(b)
                             + np.abs(mean * rstd)[:, None] * np.abs(g))
                    err = np.abs(got.astype(np.float64) - y64)
                    assert (err <= 0.5 * ulp16(y64, yt) + 2.0 ** -20 * terms).all(), (n, xt)
                    spread = 1.0 / rstd
                    assert (np.abs(gm - mean) <= 2.0 ** -20 * (np.abs(mean) + spread)).all()
                    assert (np.abs(gr / rstd - 1) <= 2.0 ** -20).all()


def test_the_variance_is_the_two_pass_one():
    """A large mean with a small spread: E[x**2] - mean**2 in float32 would lose the variance."""
    x = (np.float32(1e4) + np.arange(8, dtype=F32) * np.float32(1e-3)).reshape(1, 8)
    y64, _, rstd = reference(x, eps=1e-12)
    got, _, gr = kernels.layer_norm(x, epsilon=1e-12, return_stats=True)
    assert np.abs(ordered(got) - ordered(y64.astype(F32))).max() <= 1
    assert abs(float(gr[0]) / rstd[0] - 1) < 1e-6


# --- the residual -------------------------------------------------------------------------------

def test_residual_is_summed_in_float32_without_rounding_in_between(isa_level):
    rng = np.random.default_rng(2)
    for xt, rt in [(BF16, BF16), (F16, F16), (BF16, F32), (F32, F16), (F16, BF16)]:
        x = sample(rng, (33, 100), xt)
        r = sample(rng, (33, 100), rt, scale=1.0, shift=0.0)
        summed = x.astype(F32) + r.astype(F32)
        want = kernels.layer_norm(summed, out_dtype=xt)
        assert_bits_equal(kernels.layer_norm(x, residual=r), want)
        assert_bits_equal(kernels.layer_norm(r, residual=x, out_dtype=xt), want)
    # rounding the sum to bfloat16 first gives another result: the kernel does not
    x = sample(rng, (64, 64), BF16)
    r = sample(rng, (64, 64), BF16, scale=0.01, shift=0.0)
    two = kernels.layer_norm(kernels.cast(x.astype(F32) + r.astype(F32), BF16), out_dtype=F32)
    one = kernels.layer_norm(x, residual=r, out_dtype=F32)
    assert not np.array_equal(one, two)


# --- 16-bit in and out --------------------------------------------------------------------------

def test_16bit_output_is_computed_in_float32(isa_level):
    """A 16-bit output: float32 statistics (docs/layers.md), so at most one unit from the
    float64 result rounded once -- and mostly equal to it; a float32 output keeps float64."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((400, 768)) * 2 + 0.5).astype(F32)
    y64, _, _ = reference(x)
    for yt in (F16, BF16):
        got = kernels.layer_norm(x, out_dtype=yt)
        units = np.abs(ordered(got) - ordered(round_once(y64, yt)))
        assert units.max() <= 1 and units.mean() < 1e-2
        assert_bits_equal(got, at_level("generic", kernels.layer_norm, x, out_dtype=yt))
    # a float32 output: y = rstd + b just above the midpoint between 1 and the next 16-bit
    # value, by less than half a float32 ulp, is still resolved by the float64 statistics
    x = np.array([[-1.0, 1.0]], F32)
    eps = 2.0 ** -30                      # rstd = 1 - 2**-31 (to float64 precision)
    b = np.array([0.0, 2.0 ** -8 + 2.0 ** -28], F32)
    y32 = kernels.layer_norm(x, None, b, epsilon=eps, out_dtype=F32)
    assert y32[0, 1] == np.float32(1 - 2.0 ** -31 + 2.0 ** -8 + 2.0 ** -28)


def test_dtypes_of_results():
    x = np.ones((2, 5), BF16)
    assert kernels.layer_norm(x).dtype == BF16
    assert kernels.layer_norm(x, out_dtype="float32").dtype == F32
    assert kernels.layer_norm(x, out_dtype=np.float16).dtype == F16
    y, m, r = kernels.layer_norm(np.ones((2, 3, 5), F16), return_stats=True)
    assert y.dtype == F16 and m.dtype == F32 and r.dtype == F32
    assert m.shape == (2, 3) and r.shape == (2, 3)
    out = np.empty((2, 5), F32)
    assert kernels.layer_norm(x, out=out) is out


# --- threads, tails, layouts --------------------------------------------------------------------

@pytest.mark.parametrize("n", [17, 128, 1000])
def test_threads_give_the_same_bits(isa_level, n):
    rng = np.random.default_rng(n)
    x = sample(rng, (80000 // n + 7, n), BF16)
    r = sample(rng, x.shape, BF16)
    g = rng.standard_normal(n).astype(F32)
    with kernels.threads(1):
        want = kernels.layer_norm(x, g, g, residual=r, return_stats=True)
    with kernels.threads(2):
        got = kernels.layer_norm(x, g, g, residual=r, return_stats=True)
    for a, w in zip(got, want):
        assert_bits_equal(a, w)


@pytest.mark.parametrize("yt", TYPES, ids=lambda d: str(d))
def test_tails_stay_inside_the_arrays(isa_level, yt):
    rng = np.random.default_rng(4)
    for n in range(1, 40):
        x = sample(rng, (3, n), F32)
        want = at_level("generic", kernels.layer_norm, x, out_dtype=yt)
        buf = np.full(3 * n + 34, 7.0, yt)
        out = buf[17:17 + 3 * n].reshape(3, n)
        kernels.layer_norm(x, out=out)
        assert_bits_equal(out, want)
        assert (buf[:17] == 7.0).all() and (buf[17 + 3 * n:] == 7.0).all()


def test_layouts(isa_level):
    rng = np.random.default_rng(6)
    base = sample(rng, (6, 10, 12), F32)
    g = rng.standard_normal(12).astype(F32)
    for x in [base, base[::2, 1::3], base[..., ::-1], np.asfortranarray(base),
              base.astype(">f4"), base[0, 0], base[:0], base.transpose(1, 0, 2)]:
        want = kernels.layer_norm(np.ascontiguousarray(x, dtype=F32), g)
        got = kernels.layer_norm(x, g)
        assert got.shape == x.shape and got.flags.c_contiguous
        assert_bits_equal(got, want)
        out = np.zeros(x.shape + (2,), F32)[..., 0]           # strided out
        assert kernels.layer_norm(x, g, out=out) is out
        assert_bits_equal(out, want)
    # gamma and beta: array-likes, strided
    g2 = np.zeros(24, F32)
    g2[::2] = g
    assert_bits_equal(kernels.layer_norm(base, g2[::2], list(g)),
                      kernels.layer_norm(base, g, g))


# --- special values -----------------------------------------------------------------------------

def test_special_values(isa_level):
    x = np.array([[1.0, 2.0, 3.0, 4.0],
                  [np.nan, 1.0, 2.0, 3.0],
                  [np.inf, 1.0, 2.0, 3.0],
                  [-np.inf, np.inf, 0.0, 0.0],
                  [5.0, 5.0, 5.0, 5.0]], F32)
    b = np.array([0.5, -1.0, 0.0, 2.0], F32)
    for yt, nan in [(F32, 0x7FC00000), (BF16, 0x7FC0), (F16, 0x7E00)]:
        y, mean, rstd = kernels.layer_norm(x, None, b, out_dtype=yt, return_stats=True)
        assert (bits(y[1:4]) == nan).all()
        assert np.isnan(mean[1]) and np.isnan(rstd[1]) and np.isinf(mean[2])
        assert_bits_equal(y[4], b.astype(yt))             # a constant row gives beta
        if yt == F32:
            assert rstd[4] == np.float32(1 / np.sqrt(1e-3))
        else:                       # float32: 1 / sqrtf(float32(1e-3))
            assert rstd[4] == np.float32(1) / np.sqrt(np.float32(1e-3))
        assert np.allclose(y[0].astype(F32), (x[0] - 2.5) / np.sqrt(1.25 + 1e-3) + b, rtol=1e-2)
    # NaN from gamma or beta stays in its column
    g = np.array([1.0, np.nan, 1.0, 1.0], F32)
    y = kernels.layer_norm(x[:1], g)
    assert bits(y)[0, 1] == 0x7FC00000 and np.isfinite(y[0, [0, 2, 3]]).all()


@fpenv.needs_libm
def test_no_floating_point_flags_leak(isa_level):
    fetestexcept, feclearexcept = fpenv.fetestexcept()
    x = np.array([[np.inf, -np.inf, 1.0], [np.nan, 0.0, 1.0], [3e38, -3e38, 0.0]], F32)
    feclearexcept(0x3D)
    for yt in TYPES:
        kernels.layer_norm(x, out_dtype=yt)
        kernels.layer_norm(x, np.full(3, 3e38, F32), out_dtype=yt)
    assert fetestexcept(0x3D) & 0x0D == 0   # no INVALID, OVERFLOW or DIVBYZERO raised


# --- bad input ----------------------------------------------------------------------------------

def _errors():
    x = np.ones((3, 4), F32)
    g = np.ones(4, F32)
    return [
        ((np.ones((3, 4)),), {}, TypeError,
         r"layer_norm: x must have dtype float16, bfloat16 or float32, got float64"),
        ((np.ones((3, 4), np.int32),), {}, TypeError, "x must have dtype .* got int32"),
        ((np.float32(1),), {}, ValueError, "layer_norm: x must have at least 1 dimension"),
        ((np.ones((3, 0), F32),), {}, ValueError,
         r"layer_norm: the last axis of x \(shape \(3, 0\)\) is empty"),
        ((x, np.ones(4)), {}, TypeError, "layer_norm: gamma must have dtype float32, got float64"),
        ((x, g, np.ones(5, F32)), {}, ValueError,
         r"layer_norm: beta has shape \(5,\), expected \(4,\)"),
        ((x, np.ones((1, 4), F32)), {}, ValueError,
         r"layer_norm: gamma has shape \(1, 4\), expected \(4,\)"),
        ((x,), {"epsilon": 0.0}, ValueError, "layer_norm: epsilon must be finite and > 0, got 0.0"),
        ((x,), {"epsilon": float("nan")}, ValueError, "epsilon must be finite and > 0, got nan"),
        ((x,), {"epsilon": "1e-3"}, TypeError, "layer_norm: epsilon must be a number, got str"),
        ((x,), {"epsilon": True}, TypeError, "layer_norm: epsilon must be a number, got bool"),
        ((x,), {"residual": np.ones((3, 4), np.float64)}, TypeError,
         "layer_norm: residual must have dtype float16, bfloat16 or float32, got float64"),
        ((x,), {"residual": np.ones((3, 1), F32)}, ValueError,
         r"layer_norm: residual has shape \(3, 1\) but x has shape \(3, 4\)"),
        ((x,), {"out_dtype": "float64"}, TypeError,
         "layer_norm: out_dtype must have dtype float16, bfloat16 or float32, got float64"),
        ((x,), {"out_dtype": "nope"}, TypeError, "layer_norm: cannot interpret 'nope' as a dtype"),
        ((x,), {"out": [0.0] * 12}, TypeError, "layer_norm: out must be a numpy.ndarray, got list"),
        ((x,), {"out": np.zeros((3, 4), F16), "out_dtype": F32}, ValueError,
         "layer_norm: out has dtype float16, expected float32"),
        ((x,), {"out": np.zeros((3, 4))}, TypeError,
         "layer_norm: out must have dtype float16, bfloat16 or float32, got float64"),
        ((x,), {"out": np.zeros((4, 3), F32)}, ValueError,
         r"layer_norm: out has shape \(4, 3\), expected \(3, 4\)"),
    ]


@pytest.mark.parametrize("args,kw,exc,msg", _errors())
def test_errors(args, kw, exc, msg):
    with pytest.raises(exc, match=msg):
        kernels.layer_norm(*args, **kw)


def test_errors_write_nothing():
    x = np.ones((3, 4), F32)
    out = np.full((3, 4), 9.0, F32)
    with pytest.raises(ValueError, match="layer_norm: out overlaps an input array"):
        kernels.layer_norm(x, out=x)
    with pytest.raises(ValueError, match="layer_norm: out overlaps an input array"):
        kernels.layer_norm(x, residual=out, out=out)
    with pytest.raises(ValueError, match=r"residual has shape"):
        kernels.layer_norm(x, residual=np.ones((2, 4), F32), out=out)
    with pytest.raises(TypeError, match="gamma must have dtype float32"):
        kernels.layer_norm(x, np.ones(4, F16), out=out)
    ro = np.zeros((3, 4), F32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="layer_norm: out is read-only"):
        kernels.layer_norm(x, out=ro)
    assert (out == 9.0).all() and (x == 1.0).all() and (ro == 0).all()


# --- LayerNormalization on the kernel -----------------------------------------------------------

POLICIES = ["float32", "mixed_float16", "mixed_bfloat16"]


def _layer(policy, shape, seed=0, **kw):
    from mixedcore import layers
    rng = np.random.default_rng(seed)
    ln = layers.LayerNormalization(dtype=policy, **kw)
    ln.build_from_shape(shape)
    ln.set_weights([rng.standard_normal(w.shape).astype(w.dtype) for w in ln.get_weights()])
    return ln


@pytest.mark.parametrize("policy", POLICIES)
def test_layer_runs_the_kernel_and_training_equals_inference(policy):
    rng = np.random.default_rng(1)
    x = sample(rng, (4, 6, 33), F32)
    ln = _layer(policy, x.shape, epsilon=1e-5)
    cd = np.dtype(ln.compute_dtype) if policy == "float32" else (
        F16 if policy == "mixed_float16" else BF16)
    xc = kernels.cast(x, cd) if cd != F32 else x
    g, b = [np.asarray(w, F32) for w in ln.get_weights()]
    want = kernels.layer_norm(xc, g, b, epsilon=1e-5)
    assert_bits_equal(ln(x), want)
    assert_bits_equal(ln(x, training=True), want)


def test_layer_without_gamma_or_beta():
    rng = np.random.default_rng(2)
    x = sample(rng, (5, 17), F32)
    for kw, args in [({"scale": False}, lambda w: (None, w[0])),
                     ({"center": False}, lambda w: (w[0], None)),
                     ({"scale": False, "center": False}, lambda w: (None, None))]:
        ln = _layer("mixed_bfloat16", x.shape, **kw)
        w = [np.asarray(v, F32) for v in ln.get_weights()]
        assert_bits_equal(ln(x), kernels.layer_norm(kernels.cast(x, BF16), *args(w)))


@pytest.mark.parametrize("kw", [{}, {"scale": False}, {"center": False}])
def test_layer_backward_on_the_kernel_matches_float64(kw):
    rng = np.random.default_rng(3)
    x = sample(rng, (3, 5, 24), F32)
    dy = rng.standard_normal(x.shape).astype(F32)
    ln32 = _layer("float32", x.shape, seed=4, **kw)
    ln64 = _layer("float64", x.shape, seed=4, **kw)
    ln64.set_weights([w.astype(np.float64) for w in ln32.get_weights()])
    ln32(x, training=True)
    ln64(x.astype(np.float64), training=True)
    dx32 = ln32.backward(dy)
    dx64 = ln64.backward(dy.astype(np.float64))
    assert dx32.dtype == F32
    np.testing.assert_allclose(dx32, dx64, rtol=1e-4, atol=1e-5)
    for g32, g64 in zip(ln32.gradients, ln64.gradients):
        np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-4)


def test_other_axes_and_float64_keep_numpy():
    rng = np.random.default_rng(5)
    x = sample(rng, (4, 6, 8), F32)
    ln = _layer("float32", x.shape, axis=(1, 2))
    y = ln(x)
    x64 = x.astype(np.float64)
    m = x64.mean(axis=(1, 2), keepdims=True)
    v = ((x64 - m) ** 2).mean(axis=(1, 2), keepdims=True)
    g, b = ln.get_weights()
    np.testing.assert_allclose(y, (x64 - m) / np.sqrt(v + 1e-3) * g + b, rtol=1e-5, atol=1e-5)
    ln1 = _layer("float32", x.shape, axis=1)
    assert ln1(x).shape == x.shape


@pytest.mark.parametrize("policy", POLICIES + ["float64"])
def test_call_with_residual(policy):
    rng = np.random.default_rng(6)
    ln = _layer(policy, (3, 7, 40))
    cd = {"float32": F32, "mixed_float16": F16, "mixed_bfloat16": BF16,
          "float64": np.dtype(np.float64)}[policy]
    x = sample(rng, (3, 7, 40), F32).astype(cd)
    r = sample(rng, (3, 7, 40), F32, scale=0.5).astype(cd)
    y = ln.call_with_residual(x, r)
    assert y.dtype == cd and y.shape == x.shape
    summed = x.astype(np.float64) + r.astype(np.float64)
    if cd == np.float64:
        np.testing.assert_array_equal(y, ln(summed))
        return
    g, b = [np.asarray(w, F32) for w in ln.get_weights()]
    assert_bits_equal(y, kernels.layer_norm(x, g, b, residual=r))
    # one rounding: the sum is not rounded to the compute dtype first
    assert_bits_equal(y, kernels.layer_norm(x.astype(F32) + r.astype(F32), g, b, out_dtype=cd))
    if cd == F32:
        assert_bits_equal(y, ln(x + r))             # float32: the same as Add then the layer
    # training: the same result, and backward gives the gradient of the sum
    assert_bits_equal(ln.call_with_residual(x, r, training=True), y)
    dy = rng.standard_normal(x.shape).astype(cd)
    d_sum = ln.backward(dy)
    grads = [np.array(gr) for gr in ln.gradients]
    assert d_sum.dtype == cd
    ref = _layer("float32", x.shape)
    ref.set_weights(ln.get_weights())
    ref(x.astype(F32) + r.astype(F32), training=True)
    d_ref = ref.backward(dy.astype(F32))
    if cd == F32:
        assert_bits_equal(d_sum, d_ref)
    else:
        np.testing.assert_allclose(d_sum.astype(F32), d_ref, rtol=2e-2, atol=2e-2)
    for a, b_ in zip(grads, ref.gradients):
        np.testing.assert_allclose(a, b_, rtol=1e-4, atol=1e-3)


def test_call_with_residual_builds_and_checks():
    from mixedcore import layers
    ln = layers.LayerNormalization()
    x = np.ones((2, 5), F32)
    y = ln.call_with_residual(x, x * 2)
    assert ln.built and y.shape == (2, 5) and np.all(y == 0)
    with pytest.raises(ValueError, match=r"call_with_residual needs x and residual of the same "
                                         r"shape, got \(2, 5\) and \(2, 4\)"):
        ln.call_with_residual(x, np.ones((2, 4), F32))
