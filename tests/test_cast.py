"""kernels.cast: bit-exactness against numpy (float16) and ml_dtypes (bfloat16) at every ISA level,
layouts, and every bad input."""
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fpenv
from mixedcore import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
FLOATS = [F16, BF16, F32, F64]
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(UINT[a.dtype.itemsize])


def assert_bits_equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = bits(got), bits(want)
    bad = np.flatnonzero(g.ravel() != w.ravel())
    if bad.size:
        i = bad[0]
        raise AssertionError(f"{bad.size} mismatches; first at {i}: got {g.ravel()[i]:#x}, "
                             f"want {w.ravel()[i]:#x}")


def reference(x, dtype):
    """The documented reference: numpy / ml_dtypes astype, except float64 -> bfloat16, which
    ml_dtypes rounds twice; that one is checked separately against exact arithmetic."""
    with np.errstate(all="ignore"):
        return x.astype(dtype)


ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


# --- every 16-bit pattern -----------------------------------------------------------------------

@pytest.mark.parametrize("src", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("dst", FLOATS, ids=["f16", "bf16", "f32", "f64"])
def test_every_16bit_pattern(isa_level, src, dst):
    x = ALL16.view(src)
    assert_bits_equal(kernels.cast(x, dst), reference(x, dst))


# --- float32 sources ----------------------------------------------------------------------------

def f32_special_patterns():
    """Tie points, overflow thresholds, subnormal boundaries and NaN payloads of both targets,
    with their neighbours, both signs."""
    centres = [
        0x00000000, 0x00000001, 0x007FFFFF, 0x00800000,            # float32 subnormals / min normal
        0x33000000, 0x33000001, 0x33800000, 0x33C00000,            # float16: 2**-25 (tie to 0), 2**-24
        0x387FC000, 0x387FE000, 0x38800000,                        # float16 subnormal -> normal
        0x3F800000, 0x3F801000, 0x3F802000, 0x3F803000,            # float16 ties near 1
        0x3F808000, 0x3F818000, 0x3F80C000,                        # bfloat16 ties near 1
        0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,  # float16 overflow threshold
        0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF,                        # bfloat16 overflow threshold
        0x7F800000, 0x7F800001, 0x7F801FFF, 0x7F802000, 0x7FA00000,  # inf, signalling NaNs
        0x7FBFFFFF, 0x7FC00000, 0x7FC00001, 0x7FFFE000, 0x7FFFFFFF,  # quiet NaNs
    ]
    pats = set()
    for c in centres:
        for d in range(-3, 4):
            v = c + d
            if 0 <= v <= 0x7FFFFFFF:
                pats.add(v)
                pats.add(v | 0x80000000)
    return np.array(sorted(pats), dtype=np.uint32)


def f32_dense_sample():
    """Every 4099th float32 pattern (a prime stride reaches every residue class of the low
    bits) plus 2**20 random patterns."""
    rng = np.random.default_rng(12345)
    stride = np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32)
    rand = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([stride, rand, f32_special_patterns()])


F32_SAMPLE = f32_dense_sample()


@pytest.mark.parametrize("dst", [F16, BF16, F64], ids=["f16", "bf16", "f64"])
def test_float32_special_patterns(isa_level, dst):
    x = f32_special_patterns().view(np.float32)
    assert_bits_equal(kernels.cast(x, dst), reference(x, dst))


@pytest.mark.parametrize("dst", [F16, BF16, F64], ids=["f16", "bf16", "f64"])
def test_float32_dense_sample(isa_level, dst):
    x = F32_SAMPLE.view(np.float32)
    assert_bits_equal(kernels.cast(x, dst), reference(x, dst))


@pytest.mark.slow
@pytest.mark.parametrize("dst", [F16, BF16], ids=["f16", "bf16"])
def test_every_float32_pattern(dst):
    """All 2**32 inputs at every level, in slices of 2**26 (one reference per slice)."""
    previous = kernels.isa()
    step = 1 << 26
    try:
        for start in range(0, 1 << 32, step):
            x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
            want = reference(x, dst)
            for level in kernels.available_isas():
                kernels.set_isa(level)
                assert_bits_equal(kernels.cast(x, dst), want)
    finally:
        kernels.set_isa(previous)


# --- float64 sources ----------------------------------------------------------------------------

def f64_sample():
    rng = np.random.default_rng(7)
    with np.errstate(invalid="ignore"):
        widened = F32_SAMPLE.view(np.float32).astype(np.float64)
    rand = rng.integers(0, 1 << 64, 1 << 18, dtype=np.uint64).view(np.float64)
    normal = rng.standard_normal(1 << 18) * np.exp2(rng.integers(-150, 130, 1 << 18))
    # float32 values nudged by less than half a float32 ulp: the double-rounding traps
    f = rng.standard_normal(1 << 16).astype(np.float32).astype(np.float64)
    nudged = f + f * rng.choice([-1, 1], f.size) * np.exp2(-30.0 - rng.integers(0, 20, f.size))
    nans = np.array([0x7FF0000000000001, 0xFFF4000000000000, 0x7FF8000000000001,
                     0x7FFFFFFFFFFFFFFF, 0x7FF0040000000000], dtype=np.uint64).view(np.float64)
    return np.concatenate([widened, rand, normal, nudged, nans])


F64_SAMPLE = f64_sample()


@pytest.mark.parametrize("dst", [F16, F32], ids=["f16", "f32"])
def test_float64_matches_numpy(isa_level, dst):
    assert_bits_equal(kernels.cast(F64_SAMPLE, dst), reference(F64_SAMPLE, dst))


def exact_bf16_bits(v):
    """Correct rounding of one finite float64 to bfloat16 by exact rational arithmetic."""
    if v == 0:
        return 0x8000 if np.signbit(v) else 0
    sign = 0x8000 if v < 0 else 0
    q = Fraction(abs(float(v)))
    candidates = np.arange(0, 0x7F81, dtype=np.uint16)  # all non-negative finite values and inf
    values = candidates.view(BF16).astype(np.float64)
    i = int(np.searchsorted(values, float(q), side="left"))  # values[i-1] < q <= values[i]
    if i < 0x7F80 and Fraction(float(values[i])) == q:
        return sign | int(candidates[i])
    lo, hi = i - 1, min(i, 0x7F80)
    if hi == 0x7F80:   # above the largest finite value: infinity from its tie up
        top = Fraction(float(values[0x7F7F]))
        ulp = top - Fraction(float(values[0x7F7E]))
        return sign | (0x7F80 if q >= top + ulp / 2 else 0x7F7F)
    dlo, dhi = q - Fraction(float(values[lo])), Fraction(float(values[hi])) - q
    pick = lo if dlo < dhi else hi if dhi < dlo else (lo if lo % 2 == 0 else hi)
    return sign | int(candidates[pick])


def test_float64_to_bfloat16_is_correctly_rounded(isa_level):
    rng = np.random.default_rng(3)
    finite = F64_SAMPLE[np.isfinite(F64_SAMPLE)]
    sample = np.concatenate([rng.choice(finite, 3000, replace=False), [
        1 + 2**-8 + 2**-40, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-60), 2.0**-133,
        2.0**-134, 2.0**-134 * (1 + 2**-40), 3 * 2.0**-135, 3.3895313892515355e38,
        3.3961775292304e38, 2.0**-1074, 1e308]])
    got = bits(kernels.cast(sample, BF16))
    want = np.array([exact_bf16_bits(v) for v in sample], dtype=np.uint16)
    assert_bits_equal(got.view(np.uint16), want)


def test_float64_double_rounding_trap():
    x = np.array([1 + 2**-8 + 2**-40], dtype=np.float64)
    assert bits(kernels.cast(x, BF16))[0] == 0x3F81
    assert bits(x.astype(BF16))[0] == 0x3F80   # ml_dtypes rounds through float32


def test_float64_to_bfloat16_specials(isa_level):
    x = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], dtype=np.float64)
    got = bits(kernels.cast(x, BF16))
    assert got.tolist() == [0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0, 0x8000]


def test_float64_to_bfloat16_matches_ml_dtypes_where_it_rounds_once(isa_level):
    """Where the float64 is exactly a float32, ml_dtypes' double rounding is a single one."""
    with np.errstate(invalid="ignore"):
        x = F32_SAMPLE.view(np.float32).astype(np.float64)
    assert_bits_equal(kernels.cast(x, BF16), reference(x, BF16))


# --- same-type copies and lengths around the vector widths --------------------------------------

@pytest.mark.parametrize("src", FLOATS, ids=["f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("dst", FLOATS, ids=["f16", "bf16", "f32", "f64"])
def test_lengths_around_vector_widths(isa_level, src, dst):
    rng = np.random.default_rng(11)
    pool = rng.standard_normal(200).astype(np.float32) * 300
    pool[::7] = np.nan
    pool[3::11] = np.inf
    for n in list(range(0, 70)) + [127, 128, 129, 255, 257]:
        x = np.resize(pool, n).astype(src)
        got = kernels.cast(x, dst)
        want = reference(x, dst)
        if src == F64 and dst == BF16:
            want = reference(x.astype(F32), dst)   # values are float32-exact: one rounding
        assert_bits_equal(got, want)


def test_signalling_nan_in_every_lane(isa_level):
    """A signalling NaN at every position of a block keeps numpy's result in that lane."""
    for n in (16, 17, 33):
        for pos in range(n):
            x = np.full(n, 1.5, dtype=np.float32)
            x.view(np.uint32)[pos] = 0x7F800001
            assert_bits_equal(kernels.cast(x, F16), reference(x, F16))
            h = np.full(n, 1.5, dtype=np.float16)
            h.view(np.uint16)[pos] = 0x7C01
            assert_bits_equal(kernels.cast(h, F32), reference(h, F32))
            assert_bits_equal(kernels.cast(h, F64), reference(h, F64))


# --- layouts ------------------------------------------------------------------------------------

def layouts(x):
    yield "reversed", x[::-1]
    yield "step3", x[::3]
    yield "transposed", x.reshape(12, -1).T
    yield "fortran", np.asfortranarray(x.reshape(12, -1))
    yield "reversed-2d", x.reshape(12, -1)[::-1, ::-2]
    yield "broadcast", np.broadcast_to(x[:7], (5, 3, 7))
    yield "3d-slices", x.reshape(4, 6, -1)[1:, ::2, 1::3]


@pytest.mark.parametrize("src", FLOATS, ids=["f16", "bf16", "f32", "f64"])
@pytest.mark.parametrize("dst", FLOATS, ids=["f16", "bf16", "f32", "f64"])
def test_strided_views(isa_level, src, dst):
    rng = np.random.default_rng(5)
    base = (rng.standard_normal(12 * 40) * 100).astype(np.float32).astype(src)
    for name, x in layouts(base):
        got = kernels.cast(x, dst)
        assert got.strides == np.empty_like(x, dtype=dst).strides, name   # numpy's order="K"
        want = reference(np.ascontiguousarray(x).astype(F32), dst)  # float32-exact values
        assert_bits_equal(got, want)


def test_zero_d_and_zero_size(isa_level):
    x0 = np.array(1.25, dtype=np.float32)
    r = kernels.cast(x0, F16)
    assert r.shape == () and r.dtype == F16 and float(r) == 1.25
    for shape in [(0,), (3, 0), (0, 5, 2)]:
        r = kernels.cast(np.empty(shape, np.float32), BF16)
        assert r.shape == shape and r.dtype == BF16


def test_python_scalars_and_lists():
    assert_bits_equal(kernels.cast([1.0, 2.5, -3.0], F16), np.array([1.0, 2.5, -3.0], F16))
    assert kernels.cast(0.1, BF16).dtype == BF16


@pytest.mark.parametrize("order", [">", "<"])
def test_non_native_byte_order(isa_level, order):
    x = np.array([1.0, -2.5, np.nan, np.inf, 65520.0, 1e-7], dtype=order + "f4")
    assert_bits_equal(kernels.cast(x, F16), reference(x.astype(F32), F16))
    y = np.array([1.0, -2.5, np.inf], dtype=order + "f8")
    assert_bits_equal(kernels.cast(y, BF16), reference(y.astype(F32), BF16))


def test_misaligned_arrays(isa_level):
    raw = np.zeros(4 * 100 + 1, dtype=np.uint8)
    x = raw[1:].view(np.float32)
    assert not x.flags.aligned
    x[:] = np.linspace(-5, 5, 100, dtype=np.float32)
    assert_bits_equal(kernels.cast(x, F16), reference(np.array(x), F16))
    out_raw = np.zeros(2 * 100 + 1, dtype=np.uint8)
    out = out_raw[1:].view(np.float16)
    assert kernels.cast(x, F16, out=out) is out
    assert_bits_equal(out, reference(np.array(x), F16))


def test_out_parameter(isa_level):
    x = np.linspace(-3, 3, 60, dtype=np.float64).reshape(6, 10)
    out = np.empty((10, 6), dtype=F16).T     # strided out
    assert kernels.cast(x, F16, out=out) is out
    assert_bits_equal(out, reference(x, F16))
    out2 = np.empty_like(x, dtype=BF16)
    assert kernels.cast(x, "bfloat16", out=out2) is out2


@settings(max_examples=60, deadline=None)
@given(data=st.data(),
       src=st.sampled_from(FLOATS), dst=st.sampled_from(FLOATS))
def test_random_shapes_and_strides(data, src, dst):
    base = data.draw(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=4, max_side=9),
                                elements=st.floats(-1e4, 1e4, width=32)))
    slices = tuple(slice(None, None, data.draw(st.sampled_from([1, -1, 2, -3])))
                   for _ in range(base.ndim))
    x = base.astype(src)[slices]
    if x.ndim >= 2 and data.draw(st.booleans()):
        x = x.T
    want = reference(np.array(x).astype(F32), dst)
    assert_bits_equal(kernels.cast(x, dst), want)


# --- threads and flags --------------------------------------------------------------------------

def test_threads_give_identical_results(isa_level):
    rng = np.random.default_rng(9)
    x = rng.standard_normal(1 << 20).astype(np.float32)
    x2 = rng.standard_normal((1 << 10, 1 << 9)).astype(np.float64)[:, ::2]
    with kernels.threads(1):
        a, a2 = kernels.cast(x, F16), kernels.cast(x2, BF16)
    with kernels.threads(2):
        b, b2 = kernels.cast(x, F16), kernels.cast(x2, BF16)
    assert_bits_equal(a, b)
    assert_bits_equal(a2, b2)
    assert_bits_equal(a, reference(x, F16))


@fpenv.needs_libm
def test_no_floating_point_flags_leak(isa_level):
    fetestexcept, feclearexcept = fpenv.fetestexcept()
    fe_all = 0x3D   # glibc x86: INVALID | DIVBYZERO | OVERFLOW | UNDERFLOW | INEXACT (DENORM excluded)
    x = np.array([1e300, -1e300, np.nan, 1e-300, 70000.0, 1e-30], dtype=np.float64)
    x32 = np.array([7e4, np.nan, 1e-30, 3.0e38], dtype=np.float32)
    x32.view(np.uint32)[1] = 0x7F800001   # signalling NaN
    feclearexcept(fe_all)
    for dst in (F16, BF16, F32):
        kernels.cast(x, dst)
    for dst in (F16, BF16, F64):
        kernels.cast(x32, dst)
    assert fetestexcept(fe_all) & 0x0D == 0   # no INVALID, OVERFLOW or DIVBYZERO raised


# --- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("x", [np.arange(4), np.arange(4, dtype=np.int8), np.ones(2, complex),
                               np.array(["a"]), np.array([object()]), np.ones(2, bool)])
def test_unsupported_source_dtype(x):
    with pytest.raises(TypeError, match=r"cast: unsupported source dtype " + str(x.dtype)):
        kernels.cast(x, F32)


@pytest.mark.parametrize("dtype", [np.int32, "int8", complex, np.float128 if hasattr(np, "float128") else "U3",
                                   "float8_e4m3fnuz", "float8_e4m3b11fnuz"])
def test_unsupported_target_dtype(dtype):
    with pytest.raises(TypeError, match="cast: unsupported target dtype"):
        kernels.cast(np.ones(3, np.float32), dtype)


def test_uninterpretable_target_dtype():
    with pytest.raises(TypeError, match="cast: cannot interpret 'nonsense' as a dtype"):
        kernels.cast(np.ones(3, np.float32), "nonsense")


def test_out_errors():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(TypeError, match="cast: out must be a numpy.ndarray, got list"):
        kernels.cast(x, F16, out=[0.0] * 12)
    with pytest.raises(ValueError, match=r"cast: out has shape \(4, 3\), expected \(3, 4\)"):
        kernels.cast(x, F16, out=np.empty((4, 3), F16))
    with pytest.raises(ValueError, match="cast: out has dtype float32, expected float16"):
        kernels.cast(x, F16, out=np.empty((3, 4), F32))
    with pytest.raises(ValueError, match="cast: out has dtype >f2, expected float16"):
        kernels.cast(x, F16, out=np.empty((3, 4), ">f2"))
    ro = np.empty((3, 4), F16)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="cast: out is read-only"):
        kernels.cast(x, F16, out=ro)


def test_out_overlapping_input():
    buf = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="cast: out overlaps an input"):
        kernels.cast(buf[:32], F32, out=buf[16:48])
    raw = np.zeros(64, np.uint8)
    with pytest.raises(ValueError, match="cast: out overlaps an input"):
        kernels.cast(raw[:32].view(np.float32), F16, out=raw[16:32].view(np.float16))
    with pytest.raises(ValueError, match="cast: out overlaps an input"):
        kernels.cast(buf[::-1][:32], F32, out=buf[16:48])   # a reversed view reaches down from its start
    # disjoint parts of one buffer are fine, interleaved ones included
    kernels.cast(buf[:32], F32, out=buf[32:])
    kernels.cast(buf[::-1][:32], F32, out=buf[:32])
    kernels.cast(buf[::2], F32, out=buf[1::2])
    assert_bits_equal(buf[1::2], buf[::2])


@pytest.mark.slow
def test_more_than_2_31_elements():
    """64-bit index arithmetic: a zero-stride source (scalar path) and a contiguous one."""
    n = 2**31 + 17
    x = np.broadcast_to(np.float32(1.5), (n,))
    y = kernels.cast(x, F16)
    probe = np.r_[0:3, 2**31 - 2:2**31 + 2, n - 3:n]
    assert (y[probe] == 1.5).all()
    del y
    h = np.full(n, -2.25, dtype=F16)
    h[-1] = 7.0
    b = kernels.cast(h, BF16)
    assert (b[probe[:-1]].astype(np.float32) == -2.25).all() and float(b[-1]) == 7.0


@settings(max_examples=60, deadline=None)
@given(data=st.data(), src=st.sampled_from(FLOATS), dst=st.sampled_from(FLOATS))
def test_random_layouts_of_out(data, src, dst):
    """Source and destination in unrelated layouts: the driver orders dimensions by the
    destination's strides, merges what it can and must still pair every element correctly."""
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, max_side=7))
    base = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 0.37 - 5
    perm_x = data.draw(st.permutations(range(len(shape))))
    perm_o = data.draw(st.permutations(range(len(shape))))
    x = np.ascontiguousarray(base.astype(src).transpose(perm_x)).transpose(np.argsort(perm_x))
    out = np.empty(tuple(shape[p] for p in perm_o), dtype=dst).transpose(np.argsort(perm_o))
    flips = tuple(slice(None, None, data.draw(st.sampled_from([1, -1]))) for _ in shape)
    x, out_view = x[flips], out[flips]
    kernels.cast(x, dst, out=out_view)
    assert_bits_equal(out_view, reference(np.array(x).astype(F32), dst))
