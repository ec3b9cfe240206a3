"""Property-based fuzzing of cast, all_finite, unscale_and_check and matmul against numpy /
ml_dtypes / float64 references: arbitrary shapes (0-d, zero-size), strides (negative, stride-0
broadcasts, transposed, stepped), byte order, misalignment, read-only inputs, overlapping
``out=``, special values (NaN payloads, signalling NaNs, subnormals, infinities, rounding ties),
every dispatch level and 1-3 threads; every error path leaves its outputs untouched.

Each property runs under a quick profile (derandomized, part of every test run) and a long one
(marker ``fuzz``: ``python -m pytest tests/test_fuzz_kernels.py -m fuzz``).
"""
import contextlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mixedcore import kernels
from test_cast import assert_bits_equal, exact_bf16_bits
from test_cast import reference as cast_reference
from test_gemm import _check as check_product_bound

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
FLOATS = [F16, BF16, F32, F64]
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
LEVELS = kernels.available_isas()

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
PROFILES = {"quick": settings(max_examples=40, deadline=None, derandomize=True,
                              suppress_health_check=_SLOW_OK, database=None),
            "long": settings(max_examples=1500, deadline=None, suppress_health_check=_SLOW_OK)}
PROFILE_PARAMS = [pytest.param("quick"), pytest.param("long", marks=pytest.mark.fuzz)]

# bit patterns worth hitting on purpose: signed zeros, the subnormal range's ends, the largest
# finite, infinities, quiet and signalling NaNs with payloads (and a payload float16 keeps none
# of), and ties of the conversions to float16 / bfloat16
SPECIALS = {
    "float16": [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
                0x7C01, 0x7E00, 0xFE55, 0x3C00, 0x3C01],
    "bfloat16": [0x0000, 0x8000, 0x0001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
                 0x7F81, 0x7FC0, 0xFFA5, 0x3F80, 0x3F81],
    "float32": [0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF,
                0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00001, 0xFFBFFFFF, 0x7F802000,
                0x3F801000, 0x3F803000, 0x3F808000, 0x3F818000, 0x477FF000, 0x477FEFFF,
                0x33000000, 0x33000001, 0x387FE000, 0x00008000, 0x7F7F8000],
    "float64": [0x0, 0x8000000000000000, 0x1, 0x000FFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF,
                0x7FF0000000000000, 0xFFF0000000000000, 0x7FF0000000000001,
                0x7FF8000000000001, 0x3FF0000010000000, 0x3FF0000030000000,
                0x3FF0100000000000, 0x3FF0100000000001, 0x47EFF00000000000, 0x3E60000000000000,
                0x36A0000000000000, 0x3810000000000000],
}


def run(profile, prop):
    PROFILES[profile](prop)()


@contextlib.contextmanager
def level_and_threads(level, threads):
    """Calls inside run at dispatch ``level`` with ``threads`` kernel threads."""
    previous = kernels.isa()
    kernels.set_isa(level)
    try:
        with kernels.threads(threads):
            yield
    finally:
        kernels.set_isa(previous)


def draw_values(data, dtype, shape):
    """Raw bit patterns of ``dtype``: specials mixed with uniformly random bits."""
    u = UINT[dtype.itemsize]
    pool = st.one_of(st.sampled_from(SPECIALS[dtype.name]),
                     st.integers(0, int(np.iinfo(u).max)))
    return data.draw(hnp.arrays(u, shape, elements=pool)).view(dtype)


def draw_layout(data, x, writable=False, broadcast=True):
    """``x`` (same values) in a drawn layout: stepped / reversed / transposed views, and one of
    native, byte-swapped (not bfloat16: ml_dtypes has no swapped form), unaligned, read-only or
    stride-0 broadcast (a leading axis of 2, unless ``broadcast`` is False).  With ``writable``
    only layouts that can be written are drawn."""
    steps = tuple(slice(None, None, data.draw(st.sampled_from([1, -1, 2, -2])))
                  for _ in range(x.ndim))
    if x.ndim:
        big = np.empty(tuple(2 * n for n in x.shape), x.dtype)
        view = big[steps][tuple(slice(0, n) for n in x.shape)]
        view[...] = x
        x = view
    if x.ndim >= 2 and data.draw(st.booleans()):
        x = np.ascontiguousarray(x.T).T
    kinds = ["native", "unaligned"] + ([] if x.dtype == BF16 else ["swapped"])
    if not writable:
        kinds += ["readonly"] + (["broadcast"] if broadcast else [])
    kind = data.draw(st.sampled_from(kinds))
    if kind == "swapped":
        x = x.astype(x.dtype.newbyteorder())
    elif kind == "unaligned":
        raw = np.empty(x.nbytes + 1, np.uint8)
        y = raw[1:].view(x.dtype).reshape(x.shape)
        y[...] = x
        x = y
    elif kind == "readonly":
        x = x.view()
        x.flags.writeable = False
    elif kind == "broadcast":
        x = np.broadcast_to(x, (2,) + x.shape)
    return x


def native(x):
    """A native-order, contiguous copy of ``x``'s values."""
    return np.array(x, dtype=x.dtype.newbyteorder("="), order="C")


def draw_operand(data, dtypes=FLOATS, min_dims=0, max_side=6, writable=False):
    dtype = data.draw(st.sampled_from(dtypes))
    shape = data.draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=0,
                                       max_side=max_side))
    return draw_layout(data, draw_values(data, dtype, shape), writable)


def expected_cast(x, dst):
    """What ``cast`` must give: numpy / ml_dtypes astype, float64 -> bfloat16 rounded once."""
    x = native(x)
    if not (x.dtype == F64 and dst == BF16):
        return cast_reference(x, dst)
    flat = x.ravel()
    out = np.empty(flat.shape, np.uint16)
    for i, v in enumerate(flat):
        sign = 0x8000 if np.signbit(v) else 0
        out[i] = (sign | 0x7FC0 if np.isnan(v) else sign | 0x7F80 if np.isinf(v)
                  else exact_bf16_bits(v))
    return out.view(BF16).reshape(x.shape)


def finite(arrays):
    """Whether every element of every array is finite, from float64 copies."""
    with np.errstate(invalid="ignore"):
        return all(bool(np.isfinite(native(a).astype(F64)).all()) for a in arrays)


def marked(shape, dtype):
    """An output array filled with a recognisable pattern."""
    out = np.empty(shape, dtype)
    out.reshape(-1).view(np.uint8)[...] = 0xA5
    return out


# ---------------------------------------------------------------------------------------------
# cast

@pytest.mark.parametrize("profile", PROFILE_PARAMS)
def test_cast(profile):
    @given(st.data())
    def prop(data):
        x = draw_operand(data)
        dst = data.draw(st.sampled_from(FLOATS))
        level = data.draw(st.sampled_from(LEVELS))
        threads = data.draw(st.integers(1, 3))
        use_out = data.draw(st.booleans())
        with level_and_threads(level, threads):
            if use_out:
                out = marked(x.shape, dst)
                got = kernels.cast(x, dst, out=out)
                assert got is out
            else:
                got = kernels.cast(x, dst)
        assert got.shape == x.shape
        assert_bits_equal(got, expected_cast(x, dst))

    run(profile, prop)


@pytest.mark.parametrize("profile", PROFILE_PARAMS)
def test_cast_into_an_overlapping_out_raises_and_writes_nothing(profile):
    @given(st.data())
    def prop(data):
        src = data.draw(st.sampled_from(FLOATS))
        dst = data.draw(st.sampled_from(FLOATS))
        n = data.draw(st.integers(1, 40))
        buf = np.zeros(n * 32 + 64, np.uint8)
        buf[...] = np.frombuffer(data.draw(st.binary(min_size=buf.size, max_size=buf.size)),
                                 np.uint8)
        start = n * 8 + data.draw(st.integers(0, 4)) * 8
        nx, no, size = n * src.itemsize, n * dst.itemsize, dst.itemsize
        x = buf[start:start + nx].view(src)
        # an out aligned for its dtype whose bytes intersect x's: lo < start + nx, lo + no > start
        k = data.draw(st.integers(-((no - start - 1) // size) if start - no + 1 > 0 else 0,
                                  (start + nx - 1) // size))
        out = buf[k * size:k * size + no].view(dst)
        before = buf.copy()
        with pytest.raises(ValueError, match="cast: out overlaps an input"):
            kernels.cast(x, dst, out=out)
        assert np.array_equal(buf, before)

    run(profile, prop)


# ---------------------------------------------------------------------------------------------
# all_finite

@pytest.mark.parametrize("profile", PROFILE_PARAMS)
def test_all_finite(profile):
    @given(st.data())
    def prop(data):
        arrays = [draw_operand(data) for _ in range(data.draw(st.integers(0, 3)))]
        level = data.draw(st.sampled_from(LEVELS))
        want = finite(arrays)
        with level_and_threads(level, data.draw(st.integers(1, 3))):
            assert kernels.all_finite(*arrays) is want

    run(profile, prop)


# ---------------------------------------------------------------------------------------------
# unscale_and_check

def expected_unscale(x, scale):
    x = native(x)
    with np.errstate(all="ignore"):
        if x.dtype == F64:
            return x * (1.0 / scale)
        inv = np.float32(1.0 / scale)
        return (x.astype(F32) * inv).astype(x.dtype)


@pytest.mark.parametrize("profile", PROFILE_PARAMS)
def test_unscale_and_check(profile):
    @given(st.data())
    def prop(data):
        arrays = [draw_operand(data, writable=True) for _ in range(data.draw(st.integers(1, 3)))]
        scale = data.draw(st.sampled_from([1.0, 2.0, 0.5, 3.0, 1024.0, 65536.0, 2.0 ** -10,
                                           2.0 ** 24]))
        want_ok = finite(arrays)
        want = [expected_unscale(a, scale) for a in arrays]
        level = data.draw(st.sampled_from(LEVELS))
        with level_and_threads(level, data.draw(st.integers(1, 3))):
            ok = kernels.unscale_and_check(arrays, scale)
        assert ok is want_ok
        for a, w in zip(arrays, want):
            assert_bits_equal(native(a), w)

    run(profile, prop)


@pytest.mark.parametrize("profile", PROFILE_PARAMS)
def test_unscale_and_check_refusals_write_nothing(profile):
    @given(st.data())
    def prop(data):
        good = [draw_operand(data, writable=True, min_dims=1)
                for _ in range(data.draw(st.integers(0, 2)))]
        base = draw_values(data, data.draw(st.sampled_from(FLOATS)), (5,))
        bad_kind = data.draw(st.sampled_from(["readonly", "broadcast", "shared"]))
        if bad_kind == "readonly":
            bad = base.copy()
            bad.flags.writeable = False
            arrays = good + [bad]
        elif bad_kind == "broadcast":
            arrays = good + [np.broadcast_to(base.copy(), (3, 5))]
        else:                                   # two arrays over the same memory
            shared = base.copy()
            arrays = good + [shared[:4], shared[1:]]
        order = data.draw(st.permutations(range(len(arrays))))
        arrays = [arrays[i] for i in order]
        before = [native(a).view(UINT[a.dtype.itemsize]).copy() for a in arrays]
        with pytest.raises(ValueError, match="unscale_and_check: "):
            kernels.unscale_and_check(arrays, 1024.0)
        for a, b in zip(arrays, before):
            assert np.array_equal(native(a).view(UINT[a.dtype.itemsize]), b)

    run(profile, prop)


# ---------------------------------------------------------------------------------------------
# matmul

PAIRS = [(F32, F32), (F16, F16), (BF16, BF16), (F32, BF16), (F16, BF16), (BF16, F32),
         (F16, F32)]


def draw_matrix(data, dtype, shape):
    """Finite values over many binades (subnormals and zeros included), in a drawn layout."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-30, 8, shape))
    x[rng.random(shape) < 0.1] = 0.0
    with np.errstate(all="ignore"):
        x = x.astype(dtype)
    return draw_layout(data, x, broadcast=False)


@pytest.mark.parametrize("profile", PROFILE_PARAMS)
def test_matmul(profile):
    @given(st.data())
    def prop(data):
        da, db = data.draw(st.sampled_from(PAIRS))
        m, k, n = (data.draw(st.integers(0, 40)) for _ in range(3))
        a = draw_matrix(data, da, (m, k))
        b = draw_matrix(data, db, (k, n))
        vector = data.draw(st.sampled_from([None, "a", "b"]))
        if vector == "a" and m:
            a = a[0]
        elif vector == "b" and n:
            b = b[:, 0]
        level = data.draw(st.sampled_from(LEVELS))
        use_out = data.draw(st.booleans())
        with level_and_threads(level, data.draw(st.integers(1, 3))):
            if use_out:
                want_shape = np.matmul(np.zeros(a.shape, F32), np.zeros(b.shape, F32)).shape
                out = marked(want_shape, F32)
                got = kernels.matmul(a, b, out=out)
                assert got is out
            else:
                got = kernels.matmul(a, b)
        a2 = native(a)[None] if a.ndim == 1 else native(a)
        b2 = native(b)[:, None] if b.ndim == 1 else native(b)
        got2 = np.asarray(got, dtype=F64).reshape(a2.shape[0], b2.shape[1])
        check_product_bound(got2, a2, b2)

    run(profile, prop)


@pytest.mark.parametrize("profile", PROFILE_PARAMS)
def test_matmul_refusals_write_nothing(profile):
    @given(st.data())
    def prop(data):
        m, k, n = (data.draw(st.integers(1, 12)) for _ in range(3))
        buf = np.zeros((m + k, k + n + m), np.float32)
        buf[...] = np.random.default_rng(data.draw(st.integers(0, 1000))).standard_normal(
            buf.shape)
        a = buf[:m, :k]
        b = buf[m:m + k, k:k + n]
        case = data.draw(st.sampled_from(["overlap", "shape", "dtype", "readonly"]))
        if case == "overlap":                          # out reads from a's rows
            out = buf[:m, k - 1:k - 1 + n] if k >= 1 else buf[:m, :n]
            match = "matmul: out overlaps an input"
        elif case == "shape":
            out = np.zeros((m + 1, n), np.float32)
            match = r"matmul: out has shape"
        elif case == "dtype":
            out = np.zeros((m, n), np.int32)
            match = "matmul: unsupported out dtype int32"
        else:
            out = np.zeros((m, n), np.float32)
            out.flags.writeable = False
            match = "matmul: out is read-only"
        before, out_before = buf.copy(), out.copy()
        with pytest.raises((ValueError, TypeError), match=match):
            kernels.matmul(a, b, out=out)
        assert np.array_equal(buf, before) and np.array_equal(out, out_before)

    run(profile, prop)


def test_zero_d_operands_are_refused_as_numpy_does():
    for a, b in ((np.float32(2), np.ones(3, F32)), (np.ones(3, F32), np.float32(2))):
        with pytest.raises(ValueError):
            np.matmul(a, b)
        with pytest.raises(ValueError, match="matmul"):
            kernels.matmul(a, b)


# -- absurd shapes through broadcast views -------------------------------------------------------
#
# Every dimension is either small (0 to 3) or absurd (2**48 and up, as a stride-0 view claims it):
# a result or buffer that involves an absurd dimension exceeds the 2**47 bytes the core allocates
# and must be refused with a ValueError or TypeError, and one that does not is small; a crash, a
# hang or a MemoryError fails.  The calls run in one child interpreter (tests/isolated.py), with
# the drawing seeded so a failure is reproducible.

_ABSURD_BODY = """
import random
import numpy as np
from numpy.lib.stride_tricks import as_strided
import mixedcore.kernels as K

rng = random.Random(%(seed)d)
F32 = np.float32


def dim():
    return rng.randrange(4) if rng.random() < 0.6 else 2 ** rng.randrange(48, 61)


def view(ndim, dtype=F32, dims=(), last=()):
    # a stride-0 view of ndim dimensions: `dims` first, `last` last, drawn ones between (a
    # view numpy can describe: fewer than 2**62 bytes claimed)
    for _ in range(50):
        shape = tuple(dims) + tuple(dim() for _ in range(ndim - len(dims) - len(last))) + \
            tuple(last)
        if np.prod([max(d, 1) for d in shape], dtype=object) * np.dtype(dtype).itemsize < 2**62:
            return as_strided(np.zeros(1, dtype), shape=shape, strides=(0,) * ndim)
    raise LookupError       # the fixed dimensions already claim too much: another case


def case():
    kind = rng.randrange(9)
    if kind == 0:
        a = view(2)
        b = view(2, dims=(a.shape[1],))
        return lambda: K.matmul(a, b)
    if kind == 1:
        b = view(2)
        return lambda: K.pack(b)
    if kind == 2:
        q = view(4)
        k = view(4, dims=q.shape[:2], last=q.shape[3:])
        v = view(4, dims=k.shape[:3])
        return lambda: K.attention(q, k, v, scale=1.0)
    if kind == 3:
        x = view(4)
        w = view(4, dims=(1 + rng.randrange(3), 1 + rng.randrange(3), x.shape[3]))
        return lambda: K.conv2d(x, w, padding="same")
    if kind == 4:
        x = view(4)
        w = view(4, dims=(1 + rng.randrange(3), 1 + rng.randrange(3), x.shape[3]))
        return lambda: K.depthwise_conv2d(x, w, padding="same")
    if kind == 5:
        x = view(4)
        size, strides = (dim() or 1, dim() or 1), (dim() or 1, dim() or 1)
        mode = rng.choice(["max", "average"])
        return lambda: K.pool2d(x, size, strides=strides, padding="same", mode=mode)
    if kind == 6:
        x = view(2)
        return lambda: K.softmax(x)
    if kind == 7:
        x = view(2)
        return lambda: K.layer_norm(x)
    x = view(2)
    return lambda: K.quantize_rows(x)


for _ in range(%(count)d):
    try:
        call = case()
    except LookupError:
        continue
    try:
        call()
    except (ValueError, TypeError):
        pass
print("cases", %(count)d)
"""


@pytest.mark.parametrize("profile", PROFILE_PARAMS)
def test_absurd_broadcast_shapes(profile):
    from isolated import assert_finishes
    count = 40 if profile == "quick" else 1500
    seed = 1 if profile == "quick" else np.random.SeedSequence().entropy % 2**32
    outcome = assert_finishes(_ABSURD_BODY % {"seed": seed, "count": count}, timeout=300)
    assert f"cases {count}" in outcome.stdout, (seed, outcome.describe())
