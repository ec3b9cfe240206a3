"""kernels.cast with the float8 formats (ml_dtypes' float8_e4m3fn and float8_e5m2): bit-exactness
against numpy + ml_dtypes ``astype`` at every ISA level, saturate against ``numpy.clip`` followed
by ``astype``, layouts, ``out=``, threads, and every bad input."""
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fpenv
from levels import at_level
from mixedcore import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E5M2 = np.dtype(ml_dtypes.float8_e5m2)
WIDE = [F16, BF16, F32, F64]
F8 = [E4M3, E5M2]
ALL = WIDE + F8
WIDE_IDS = ["f16", "bf16", "f32", "f64"]
F8_IDS = ["e4m3", "e5m2"]
ALL_IDS = WIDE_IDS + F8_IDS
MAX = {E4M3: 448.0, E5M2: 57344.0}
# every pair with a float8 side (tests/test_cast.py has the others)
PAIRS = [(s, d) for s in ALL for d in ALL if s in F8 or d in F8]
PAIR_IDS = [f"{ALL_IDS[ALL.index(s)]}-{ALL_IDS[ALL.index(d)]}" for s, d in PAIRS]
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(UINT[a.dtype.itemsize])


def assert_bits_equal(got, want, x=None):
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = bits(got), bits(want)
    bad = np.flatnonzero(g.ravel() != w.ravel())
    if bad.size:
        i = bad[0]
        src = "" if x is None else f" (input {bits(x).ravel()[i]:#x})"
        raise AssertionError(f"{bad.size} mismatches; first at {i}{src}: got {g.ravel()[i]:#x}, "
                             f"want {w.ravel()[i]:#x}")


def reference(x, dtype, saturate=False):
    """numpy + ml_dtypes: ``astype``, after ``numpy.clip(x, -max, max)`` when saturating (as
    Keras's float8 quantization does)."""
    with np.errstate(all="ignore"):
        if saturate:
            x = np.clip(x, -MAX[dtype], MAX[dtype])
        return x.astype(dtype)


def check(x, dtype, saturate=False):
    assert_bits_equal(kernels.cast(x, dtype, saturate=saturate), reference(x, dtype, saturate), x)


ALL8 = np.arange(256, dtype=np.uint16).astype(np.uint8)
ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


# --- the formats themselves, as ml_dtypes has them -----------------------------------------------

def test_reference_rules():
    """The rules docs/conversions.md states, checked on ml_dtypes itself."""
    def f8(values, dtype):
        return bits(reference(np.array(values, np.float32), dtype)).tolist()
    # e4m3fn: 464 is the tie between 448 and the NaN pattern and goes to the even 448; above it,
    # and infinity, become NaN (there is no infinity)
    assert f8([448, 464, 464.00003, 1e6, np.inf, -np.inf, np.nan], E4M3) == \
        [0x7E, 0x7E, 0x7F, 0x7F, 0x7F, 0xFF, 0x7F]
    # e5m2: overflow to infinity from the tie 61440 up
    assert f8([57344, 61439.996, 61440, np.inf, np.nan], E5M2) == [0x7B, 0x7B, 0x7C, 0x7C, 0x7E]
    # subnormals: 2**-10 is the tie between 0 and 2**-9 (e4m3fn's smallest)
    assert f8([2.0 ** -9, 2.0 ** -10, 1.5 * 2.0 ** -10, -(2.0 ** -10)], E4M3) == [1, 0, 1, 0x80]
    # float64 goes through float32 first: 1 + 2**-4 + 2**-40 lands on a tie and rounds to 1.0
    assert bits(reference(np.array([1 + 2.0 ** -4 + 2.0 ** -40]), E4M3)).tolist() == [0x38]
    # saturate: clipped first, infinities to the largest finite value, NaN stays NaN
    assert bits(reference(np.array([1e6, -np.inf, np.nan], np.float32), E4M3, True)).tolist() == \
        [0x7E, 0xFE, 0x7F]


# --- every float8 pattern to every type ----------------------------------------------------------

@pytest.mark.parametrize("src", F8, ids=F8_IDS)
@pytest.mark.parametrize("dst", ALL, ids=ALL_IDS)
def test_every_float8_pattern(isa_level, src, dst):
    x = ALL8.view(src)
    check(x, dst)
    if dst in F8:
        check(x, dst, saturate=True)


# --- every 16-bit pattern to float8 -------------------------------------------------------------

@pytest.mark.parametrize("src", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("dst", F8, ids=F8_IDS)
@pytest.mark.parametrize("saturate", [False, True], ids=["plain", "saturate"])
def test_every_16bit_pattern(isa_level, src, dst, saturate):
    check(ALL16.view(src), dst, saturate)


# --- float32 and float64 sources -----------------------------------------------------------------

def f8_boundaries(dtype):
    """Every float8 value, the midpoints between neighbours (and above the largest finite value,
    its spacing continued), as float64, both signs."""
    v = ALL8[:128].view(dtype).astype(np.float64)
    v = v[np.isfinite(v)]
    top = v[-1] + (v[-1] - v[-2])
    mids = (v + np.append(v[1:], top)) / 2
    pts = np.concatenate([v, mids, [top, 2 * top]])
    return np.concatenate([pts, -pts])


def f32_patterns(dtype):
    """The float8 boundaries as float32 with their neighbours (+-3 ulp), the float32 subnormal
    range ends, infinities and NaNs with payloads."""
    centre = bits(f8_boundaries(dtype).astype(np.float32)).astype(np.int64)
    pats = (centre[:, None] + np.arange(-3, 4)[None, :]).ravel()
    specials = np.array([0, 1, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x7F800000, 0x7F800001,
                         0x7FA00000, 0x7FC00000, 0x7FFFFFFF, 0x3F800000], dtype=np.int64)
    pats = np.concatenate([pats, specials, specials | 0x80000000])
    return (pats & 0xFFFFFFFF).astype(np.uint32)


def f32_sample():
    """Every 4099th float32 pattern plus 2**20 random ones plus 2**18 random values in and
    around the float8 ranges (uniform bits mostly fall far outside them)."""
    rng = np.random.default_rng(2024)
    stride = np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32)
    rand = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    near = (rng.standard_normal(1 << 18) * np.exp2(rng.integers(-20, 18, 1 << 18)))
    return np.concatenate([stride, rand, bits(near.astype(np.float32))])


F32_SAMPLE = f32_sample()


@pytest.mark.parametrize("dst", F8, ids=F8_IDS)
@pytest.mark.parametrize("saturate", [False, True], ids=["plain", "saturate"])
def test_float32_boundaries(isa_level, dst, saturate):
    for fmt in F8:
        check(f32_patterns(fmt).view(np.float32), dst, saturate)


@pytest.mark.parametrize("dst", F8, ids=F8_IDS)
@pytest.mark.parametrize("saturate", [False, True], ids=["plain", "saturate"])
def test_float32_sample(isa_level, dst, saturate):
    check(F32_SAMPLE.view(np.float32), dst, saturate)


def f64_sample():
    rng = np.random.default_rng(77)
    pts = np.concatenate([f8_boundaries(E4M3), f8_boundaries(E5M2)])
    u = bits(pts).astype(np.int64)
    # one and a few float64 ulps around each boundary: rounded to float32 first, these land on
    # the tie (ml_dtypes' double rounding), which a single rounding would not
    nudged = (u[:, None] + np.array([-(1 << 28), -2, -1, 0, 1, 2, 1 << 28])[None, :]).ravel()
    with np.errstate(invalid="ignore"):
        widened = F32_SAMPLE.view(np.float32).astype(np.float64)
    rand = rng.integers(0, 1 << 64, 1 << 18, dtype=np.uint64).view(np.float64)
    near = rng.standard_normal(1 << 18) * np.exp2(rng.integers(-30, 20, 1 << 18))
    nans = np.array([0x7FF0000000000001, 0xFFF4000000000000, 0x7FF8000000000001,
                     0x7FF0000000000000, 0xFFF0000000000000, 1, 0x8000000000000001,
                     0x7FEFFFFFFFFFFFFF], dtype=np.uint64).view(np.float64)
    return np.concatenate([nudged.astype(np.uint64).view(np.float64), widened, rand, near, nans])


F64_SAMPLE = f64_sample()


@pytest.mark.parametrize("dst", F8, ids=F8_IDS)
@pytest.mark.parametrize("saturate", [False, True], ids=["plain", "saturate"])
def test_float64_sample(isa_level, dst, saturate):
    check(F64_SAMPLE, dst, saturate)


@pytest.mark.slow
@pytest.mark.parametrize("dst", F8, ids=F8_IDS)
def test_every_float32_pattern(dst):
    """All 2**32 inputs at every level, plain and saturating, in slices of 2**26."""
    previous = kernels.isa()
    step = 1 << 26
    try:
        for start in range(0, 1 << 32, step):
            x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
            for saturate in (False, True):
                want = reference(x, dst, saturate)
                for level in kernels.available_isas():
                    kernels.set_isa(level)
                    assert_bits_equal(kernels.cast(x, dst, saturate=saturate), want, x)
    finally:
        kernels.set_isa(previous)


# --- lengths, layouts, out= ----------------------------------------------------------------------

def value_pool(n=300):
    rng = np.random.default_rng(11)
    pool = rng.standard_normal(n) * np.exp2(rng.integers(-12, 17, n))
    pool[::7] = np.nan
    pool[3::11] = np.inf
    pool[5::13] = -1e6
    return pool.astype(np.float32)


@pytest.mark.parametrize("src, dst", PAIRS, ids=PAIR_IDS)
def test_lengths_around_vector_widths(isa_level, src, dst):
    pool = value_pool()
    for n in list(range(0, 70)) + [127, 128, 129, 255, 257]:
        with np.errstate(all="ignore"):
            x = np.resize(pool, n).astype(src)
        check(x, dst)
        if dst in F8:
            check(x, dst, saturate=True)


def layouts(x):
    yield "reversed", x[::-1]
    yield "step3", x[::3]
    yield "transposed", x.reshape(12, -1).T
    yield "fortran", np.asfortranarray(x.reshape(12, -1))
    yield "reversed-2d", x.reshape(12, -1)[::-1, ::-2]
    yield "broadcast", np.broadcast_to(x[:7], (5, 3, 7))
    yield "3d-slices", x.reshape(4, 6, -1)[1:, ::2, 1::3]


@pytest.mark.parametrize("src, dst", PAIRS, ids=PAIR_IDS)
def test_strided_views(isa_level, src, dst):
    with np.errstate(all="ignore"):
        base = value_pool(12 * 40).astype(src)
    for name, x in layouts(base):
        for saturate in ([False, True] if dst in F8 else [False]):
            got = kernels.cast(x, dst, saturate=saturate)
            assert got.strides == np.empty_like(x, dtype=dst).strides, name   # order="K"
            assert_bits_equal(got, reference(np.ascontiguousarray(x), dst, saturate))


def test_out_parameter(isa_level):
    x = (value_pool(60).astype(np.float64)).reshape(6, 10)
    out = np.empty((10, 6), dtype=E4M3).T     # strided out
    assert kernels.cast(x, E4M3, out=out) is out
    assert_bits_equal(out, reference(x, E4M3))
    out2 = np.empty_like(x, dtype=E5M2)
    assert kernels.cast(x, "float8_e5m2", out=out2, saturate=True) is out2
    assert_bits_equal(out2, reference(x, E5M2, saturate=True))
    # float8 into a strided and into a misaligned wider array
    y = ALL8.view(E4M3)
    out3 = np.empty((256, 2), F32)[:, 1]
    assert kernels.cast(y, F32, out=out3) is out3
    assert_bits_equal(out3, reference(y, F32))
    raw = np.zeros(2 * 256 + 1, np.uint8)
    out4 = raw[1:].view(BF16)
    assert not out4.flags.aligned
    assert kernels.cast(y, BF16, out=out4) is out4
    assert_bits_equal(out4, reference(y, BF16))


@pytest.mark.parametrize("order", [">", "<"])
def test_non_native_and_misaligned_sources(isa_level, order):
    x = np.array([1.0, -2.5, np.nan, np.inf, 464.0, 61440.0, 1e-3], dtype=order + "f4")
    for dst in F8:
        assert_bits_equal(kernels.cast(x, dst), reference(x.astype(F32), dst))
    raw = np.zeros(4 * 100 + 1, dtype=np.uint8)
    y = raw[1:].view(np.float32)
    y[:] = np.linspace(-500, 500, 100, dtype=np.float32)
    assert_bits_equal(kernels.cast(y, E4M3, saturate=True),
                      reference(np.array(y), E4M3, saturate=True))


def test_zero_d_and_zero_size(isa_level):
    r = kernels.cast(np.array(1.25, np.float32), E4M3)
    assert r.shape == () and r.dtype == E4M3 and float(r) == 1.25
    r = kernels.cast(np.array(1.25, E5M2), F32)
    assert r.shape == () and r.dtype == F32 and float(r) == 1.25
    for shape in [(0,), (3, 0)]:
        r = kernels.cast(np.empty(shape, E4M3), E5M2, saturate=True)
        assert r.shape == shape and r.dtype == E5M2


@settings(max_examples=60, deadline=None)
@given(data=st.data(), src=st.sampled_from(ALL), dst=st.sampled_from(F8),
       saturate=st.booleans())
def test_random_shapes_and_strides(data, src, dst, saturate):
    base = data.draw(hnp.arrays(np.uint64, hnp.array_shapes(min_dims=0, max_dims=4, max_side=9)))
    x = np.ascontiguousarray(base.astype(UINT[src.itemsize])).view(src)
    slices = tuple(slice(None, None, data.draw(st.sampled_from([1, -1, 2, -3])))
                   for _ in range(x.ndim))
    x = x[slices]
    if x.ndim >= 2 and data.draw(st.booleans()):
        x = x.T
    assert_bits_equal(kernels.cast(x, dst, saturate=saturate),
                      reference(np.array(x), dst, saturate))


# --- threads and flags --------------------------------------------------------------------------

def test_threads_give_identical_results(isa_level):
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(1 << 20) * 100).astype(np.float32)
    y = rng.integers(0, 256, 1 << 20, dtype=np.uint8).view(E4M3)
    with kernels.threads(1):
        a, b = kernels.cast(x, E4M3), kernels.cast(y, BF16)
    with kernels.threads(2):
        a2, b2 = kernels.cast(x, E4M3), kernels.cast(y, BF16)
    assert_bits_equal(a, a2)
    assert_bits_equal(b, b2)
    assert_bits_equal(a, reference(x, E4M3))
    assert_bits_equal(b, reference(y, BF16))


@fpenv.needs_libm
def test_no_floating_point_flags_leak(isa_level):
    fetestexcept, feclearexcept = fpenv.fetestexcept()
    fe_all = 0x3D
    x = np.array([1e300, -1e300, np.nan, 1e-300, 70000.0, 1e-30], dtype=np.float64)
    x32 = np.array([3e38, -np.inf, np.nan, 1e-40, 70000.0, 1e-30], dtype=np.float32)
    feclearexcept(fe_all)
    for dst in F8:
        kernels.cast(x, dst)
        kernels.cast(x32, dst, saturate=True)
        kernels.cast(ALL8.view(dst), F64)
    assert fetestexcept(fe_all) & 0x0D == 0


# --- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dst", WIDE, ids=WIDE_IDS)
def test_saturate_needs_a_float8_target(dst):
    with pytest.raises(ValueError, match=r"cast: saturate=True needs a float8 target dtype "
                                         r"\(float8_e4m3fn or float8_e5m2\), got " + str(dst)):
        kernels.cast(np.ones(3, np.float32), dst, saturate=True)


@pytest.mark.parametrize("saturate", [1, "yes", None, 1.0])
def test_saturate_must_be_a_bool(saturate):
    with pytest.raises(TypeError, match="cast: saturate must be a bool, got " +
                       type(saturate).__name__):
        kernels.cast(np.ones(3, np.float32), E4M3, saturate=saturate)


def test_numpy_bool_saturate():
    assert_bits_equal(kernels.cast(np.array([1e6], np.float32), E4M3, saturate=np.True_),
                      np.array([448.0], E4M3))


@pytest.mark.parametrize("name", ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz"])
def test_other_float8_formats_are_refused(name):
    other = np.dtype(getattr(ml_dtypes, name))
    with pytest.raises(TypeError, match=f"cast: unsupported source dtype {name}; supported: "
                                        "float16, bfloat16, float32, float64, float8_e4m3fn, "
                                        "float8_e5m2"):
        kernels.cast(np.zeros(3, other), F32)
    with pytest.raises(TypeError, match=f"cast: unsupported target dtype {name}; supported: .*"
                                        "float8_e4m3fn, float8_e5m2"):
        kernels.cast(np.zeros(3, np.float32), other)


def test_uninterpretable_target_dtype():
    with pytest.raises(TypeError, match="cast: cannot interpret 'float8_nonsense' as a dtype"):
        kernels.cast(np.ones(3, np.float32), "float8_nonsense")


def test_out_errors():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="cast: out has dtype float8_e5m2, expected float8_e4m3fn"):
        kernels.cast(x, E4M3, out=np.empty((3, 4), E5M2))
    with pytest.raises(ValueError, match=r"cast: out has shape \(4, 3\), expected \(3, 4\)"):
        kernels.cast(x, E4M3, out=np.empty((4, 3), E4M3))
    ro = np.empty((3, 4), E5M2)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="cast: out is read-only"):
        kernels.cast(x, E5M2, out=ro, saturate=True)
    raw = np.zeros(64, np.uint8)
    with pytest.raises(ValueError, match="cast: out overlaps an input"):
        kernels.cast(raw[:32].view(E4M3), E5M2, out=raw[16:48].view(E5M2))
    with pytest.raises(ValueError, match="cast: out overlaps an input"):
        kernels.cast(raw[:32].view(np.float32), E4M3, out=raw[8:16].view(E4M3))
    assert not raw.any()     # nothing was written


# --- no access outside the operands --------------------------------------------------------------

@pytest.mark.skipif(sys.platform != "linux", reason="mmap guard pages need Linux")
@pytest.mark.parametrize("src, dst", PAIRS, ids=PAIR_IDS)
def test_against_guard_pages(src, dst):
    """Every float8 pair at every level with each operand against a PROT_NONE page (its last
    byte the last before the page, or its first the first after one), for every length up to
    70 and a few more: the aligned first block and the masked last one must stay inside (a stray
    access faults and kills the run); the bytes around the output stay unchanged."""
    from test_guard_pages import Guarded
    sizes = list(range(1, 71)) + [127, 128, 129, 255, 256, 257, 1000]
    inp, outp = Guarded(1000 * 8), Guarded(1000 * 8)
    pool = value_pool(1000)
    for level in kernels.available_isas():
        for n in sizes:
            for at_end in (True, False):
                inp.raw[:] = outp.raw[:] = 0xA5
                x = inp.array(n, src, at_end)
                with np.errstate(all="ignore"):
                    x[:] = pool[:n].astype(src)
                for saturate in ([False, True] if dst in F8 else [False]):
                    out = outp.array(n, dst, at_end)
                    at_level(level, kernels.cast, x, dst, out=out, saturate=saturate)
                    assert_bits_equal(out, reference(np.array(x), dst, saturate))
                    assert outp.untouched_outside(n, dst, at_end), (level, n, at_end)
