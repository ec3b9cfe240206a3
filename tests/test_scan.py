"""all_finite and unscale_and_check: every dtype, size, position, layout and ISA level."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixedcore import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}

# bit patterns: (+inf, -inf, quiet NaN, signalling NaN, negative NaN with payload)
NONFINITE = {
    "float16": [0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFD55],
    "bfloat16": [0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFA5],
    "float32": [0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFA5A5A5],
    "float64": [0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000,
                0x7FF0000000000001, 0xFFF5A5A5A5A5A5A5],
}
# finite edge cases: smallest subnormal, largest subnormal, -0.0, largest finite, its negative
FINITE_EDGES = {
    "float16": [0x0001, 0x03FF, 0x8000, 0x7BFF, 0xFBFF, 0x8001],
    "bfloat16": [0x0001, 0x007F, 0x8000, 0x7F7F, 0xFF7F, 0x8001],
    "float32": [0x00000001, 0x007FFFFF, 0x80000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x80000001],
    "float64": [0x1, 0x000FFFFFFFFFFFFF, 0x8000000000000000, 0x7FEFFFFFFFFFFFFF,
                0xFFEFFFFFFFFFFFFF, 0x8000000000000001],
}
# around the vector widths (8..64 elements) and the 1 KiB early-exit block of every dtype
SIZES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97, 127, 128, 129, 255, 256,
         257, 511, 512, 513, 1023, 1024, 1025, 1100]


def bits(x):
    return x.view(UINT[x.dtype.itemsize])


def filled(dtype, n, pattern):
    x = np.ones(n, dtype)
    bits(x)[...] = pattern
    return x


def with_value(dtype, n, pos, pattern):
    x = np.full(n, 1.5, dtype)
    bits(x)[pos] = pattern
    return x


def positions(n):
    """First, middle, last, and every position of the last 65 (all vector tails)."""
    return sorted({0, n // 2, n - 1} | set(range(max(0, n - 65), n)))


# ---------------------------------------------------------------------------------------------
# all_finite


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_finite_every_position(isa_level, dtype):
    for n in SIZES:
        assert kernels.all_finite(np.full(n, 1.5, dtype))
        for pos in positions(n):
            x = np.full(n, 1.5, dtype)
            b = bits(x)
            for pattern in NONFINITE[dtype.name]:
                b[pos] = pattern
                assert not kernels.all_finite(x), (n, pos, hex(pattern))
            b[pos] = bits(np.full(1, 1.5, dtype))[0]
            assert kernels.all_finite(x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_finite_edges_are_finite(isa_level, dtype):
    for n in (1, 5, 64, 333, 2000):
        for pattern in FINITE_EDGES[dtype.name]:
            assert kernels.all_finite(filled(dtype, n, pattern)), (n, hex(pattern))
    edges = np.array(FINITE_EDGES[dtype.name], dtype=UINT[dtype.itemsize]).view(dtype)
    assert kernels.all_finite(np.tile(edges, 300))


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=str)
def test_all_finite_every_16bit_pattern(isa_level, dtype):
    """Each of the 65536 patterns alone in a vector-sized array, against the twin rule."""
    pats = np.arange(1 << 16, dtype=np.uint16)
    inf = 0x7C00 if dtype == np.float16 else 0x7F80
    expected = (pats & 0x7FFF) < inf
    x = np.zeros((1 << 16, 40), np.uint16)
    x[:, 17] = pats
    views = x.view(dtype)
    got = np.array([kernels.all_finite(views[i]) for i in range(1 << 16)])
    np.testing.assert_array_equal(got, expected)
    assert kernels.all_finite(pats[expected].view(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_finite_views(isa_level, dtype):
    base = np.arange(6 * 70 * 9, dtype=np.float64).reshape(6, 70, 9).astype(dtype)
    views = [base, base[::-1], base.T, base.transpose(1, 0, 2), base[:, ::3], base[::2, ::-5, 1:],
             base[..., 4], base[:, 7], np.asfortranarray(base), base.reshape(-1)[::7],
             np.broadcast_to(base[:1, :1, :], (6, 70, 9))]
    for v in views:
        assert kernels.all_finite(v)
    for idx in [(0, 0, 0), (5, 69, 8), (3, 33, 4), (2, 0, 8), (5, 60, 0)]:
        x = base.copy()
        bits(x)[idx] = NONFINITE[dtype.name][3]
        for view, sub in [(x, idx), (x[::-1], (5 - idx[0],) + idx[1:]), (x.T, idx[::-1]),
                          (np.asfortranarray(x), idx)]:
            assert not kernels.all_finite(view), (idx, view.strides)
            with np.errstate(invalid="ignore"):
                assert not np.isfinite(view[sub].astype(np.float64))
        if idx[1] % 3 == 0:
            assert not kernels.all_finite(x[:, ::3])
        else:
            assert kernels.all_finite(x[:, ::3])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_finite_zero_size_and_scalar_arrays(isa_level, dtype):
    assert kernels.all_finite()
    assert kernels.all_finite(np.empty(0, dtype), np.empty((3, 0), dtype))
    assert kernels.all_finite(np.array(1.0, dtype))
    assert not kernels.all_finite(np.array(np.inf, dtype))
    assert not kernels.all_finite(np.empty(0, dtype), np.array(np.nan, dtype))


def test_all_finite_many_arrays_and_dtypes(isa_level):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(rng.integers(0, 300)).astype(DTYPES[i % 4]) for i in range(200)]
    assert kernels.all_finite(*arrays)
    for k in (0, 57, 123, 199):
        if arrays[k].size == 0:
            continue
        saved = arrays[k].copy()
        arrays[k][-1] = np.inf
        assert not kernels.all_finite(*arrays)
        arrays[k][...] = saved
    assert kernels.all_finite(*arrays)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_all_finite_threaded(isa_level, nthreads):
    """Large totals are split across threads: a NaN anywhere, including at the split points,
    in one big array and in many arrays, is found."""
    n = 1 << 21  # 8 MiB of float32, above the threading threshold
    x = np.ones(n, np.float32)
    with kernels.threads(nthreads):
        assert kernels.all_finite(x)
        for pos in (0, n // 2 - 1, n // 2, n // 2 + 1, n - 1, 12345, n - 17):
            x[pos] = np.nan
            assert not kernels.all_finite(x), pos
            x[pos] = 1.0
        parts = [np.ones(4099, DTYPES[i % 4]) for i in range(700)]
        assert kernels.all_finite(*parts)
        for k in (0, 349, 350, 351, 699):
            parts[k][k % 4099] = -np.inf
            assert not kernels.all_finite(*parts), k
            parts[k][k % 4099] = 1.0
        assert kernels.all_finite(x[::-1], x.reshape(1024, -1).T, *parts)


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=4),
       steps=st.lists(st.sampled_from([1, -1, 2, -3]), min_size=4, max_size=4),
       dtype_index=st.integers(0, 3), seed=st.integers(0, 2**31))
def test_all_finite_random_views(shape, steps, dtype_index, seed):
    rng = np.random.default_rng(seed)
    dtype = DTYPES[dtype_index]
    full = rng.standard_normal([s * 3 for s in shape]).astype(dtype)
    flat = bits(full).reshape(-1)
    flat[rng.integers(0, flat.size, rng.integers(0, 3))] = NONFINITE[dtype.name][
        rng.integers(0, 5)]
    view = full[tuple(slice(None, None, steps[i]) for i in range(len(shape)))]
    view = view.transpose(rng.permutation(view.ndim))
    with np.errstate(invalid="ignore"):
        expected = bool(np.isfinite(view.astype(np.float64)).all())
    assert kernels.all_finite(view) == expected


def test_all_finite_byte_order_and_alignment(isa_level):
    x = np.ones(100, np.float32).astype(">f4")
    assert kernels.all_finite(x)
    x[37] = np.nan
    assert not kernels.all_finite(x)
    raw = np.zeros(401, np.uint8)
    y = raw[1:].view(np.float32)
    assert not y.flags.aligned
    assert kernels.all_finite(y)
    y[99] = np.inf
    assert not kernels.all_finite(y)


def test_all_finite_takes_array_likes_as_numpy():
    assert kernels.all_finite([1.0, 2.0], 3.0, np.float32(1.0), (np.float16(2),))
    assert not kernels.all_finite([1.0, float("nan")])
    assert not kernels.all_finite(np.float32(np.inf))
    with pytest.raises(TypeError, match="all_finite: argument 0 has unsupported dtype int64"):
        kernels.all_finite([1, 2])


@pytest.mark.parametrize("bad, shown", [
    (None, "NoneType"), ("text", "str"), (True, "bool"),
    (np.arange(3), "int64"), (np.array(["a"]), "<U1"), (np.array([1.0], object), "object"),
    (np.ones(2, bool), "bool"), (np.ones(2, np.complex64), "complex64"),
])
def test_all_finite_bad_input(bad, shown):
    with pytest.raises(TypeError, match="all_finite") as info:
        kernels.all_finite(np.ones(3, np.float32), bad)
    assert shown in str(info.value)
    assert "argument 1" in str(info.value)


# ---------------------------------------------------------------------------------------------
# unscale_and_check


def reference_unscale(x, scale):
    """numpy / ml_dtypes: float64 by 1/scale in float64; the others through float32."""
    inv64 = 1.0 / scale
    with np.errstate(all="ignore"):
        if x.dtype == np.float64:
            return x * inv64
        return (x.astype(np.float32) * np.float32(inv64)).astype(x.dtype)


def assert_bits_equal(got, expected):
    np.testing.assert_array_equal(bits(np.ascontiguousarray(got)),
                                  bits(np.ascontiguousarray(expected)))


SCALES = [32768.0, 3.0, 1000.7, 0.5, 2.0**-20, 7e30]


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=str)
def test_unscale_every_16bit_pattern(isa_level, dtype):
    pats = np.arange(1 << 16, dtype=np.uint16)
    for scale in SCALES:
        x = pats.view(dtype).copy()
        expected_finite = bool(np.isfinite(x.astype(np.float32)).all())
        assert kernels.unscale_and_check([x], scale) is expected_finite is False
        assert_bits_equal(x, reference_unscale(pats.view(dtype), scale))
        finite = pats.view(dtype)[np.isfinite(pats.view(dtype).astype(np.float32))]
        y = finite.copy()
        assert kernels.unscale_and_check([y], scale) is True
        assert_bits_equal(y, reference_unscale(finite, scale))


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64)], ids=str)
def test_unscale_wide_random_patterns(isa_level, dtype):
    rng = np.random.default_rng(1)
    u = UINT[dtype.itemsize]
    pats = rng.integers(0, np.iinfo(u).max, 200_000, dtype=u, endpoint=True)
    pats[:len(NONFINITE[dtype.name])] = NONFINITE[dtype.name]
    pats[10:10 + len(FINITE_EDGES[dtype.name])] = FINITE_EDGES[dtype.name]
    for scale in SCALES:
        x = pats.view(dtype).copy()
        assert kernels.unscale_and_check([x], scale) is False
        assert_bits_equal(x, reference_unscale(pats.view(dtype), scale))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unscale_every_position(isa_level, dtype):
    rng = np.random.default_rng(2)
    for n in SIZES:
        src = (rng.standard_normal(n) * 1000).astype(dtype)   # in dtype with any ml_dtypes
        x = src.copy()
        assert kernels.unscale_and_check([x], 512.0) is True
        assert_bits_equal(x, reference_unscale(src, 512.0))
        for pos in positions(n):
            for pattern in NONFINITE[dtype.name][::2]:
                src2 = src.copy()
                bits(src2)[pos] = pattern
                x = src2.copy()
                assert kernels.unscale_and_check([x], 512.0) is False, (n, pos)
                assert_bits_equal(x, reference_unscale(src2, 512.0))


def test_unscale_mixed_dtypes_and_views(isa_level):
    rng = np.random.default_rng(3)
    base = [rng.standard_normal((37, 29)).astype(dt) for dt in DTYPES]
    arrays = [base[0], base[1].T, base[2][::-1, ::2], base[3][:, 3]]
    before = [a.copy() for a in arrays]
    assert kernels.unscale_and_check(arrays, 8.0) is True
    for a, b in zip(arrays, before):
        assert_bits_equal(a, reference_unscale(b, 8.0))
    untouched = rng.standard_normal((37, 29)).astype(np.float32)
    full = untouched.copy()
    kernels.unscale_and_check([full[:, ::2]], 4.0)
    assert_bits_equal(full[:, 1::2], untouched[:, 1::2])
    assert_bits_equal(full[:, ::2], reference_unscale(untouched[:, ::2], 4.0))
    # interleaved views of one buffer do not overlap: accepted
    buf = rng.standard_normal(1000).astype(np.float32)
    ref = reference_unscale(buf, 16.0)
    assert kernels.unscale_and_check([buf[::2], buf[1::2]], 16.0) is True
    assert_bits_equal(buf, ref)


def test_unscale_many_arrays_one_nonfinite(isa_level):
    arrays = [np.full(100 + i, 3.0, DTYPES[i % 4]) for i in range(300)]
    arrays[150][7] = np.nan
    assert kernels.unscale_and_check(arrays, 2.0) is False
    # every array was unscaled, the non-finite one included
    for i, a in enumerate(arrays):
        finite = a[np.isfinite(a.astype(np.float64))]
        assert (finite.astype(np.float64) == 1.5).all(), i
    assert kernels.unscale_and_check([], 2.0) is True
    assert kernels.unscale_and_check([np.empty(0, np.float16)], 2.0) is True


@pytest.mark.parametrize("nthreads", [1, 2])
def test_unscale_threaded(isa_level, nthreads):
    rng = np.random.default_rng(4)
    src = [rng.standard_normal(1 << 19).astype(dt) for dt in DTYPES]
    src[2][(1 << 18) + 1] = np.inf
    arrays = [a.copy() for a in src]
    with kernels.threads(nthreads):
        assert kernels.unscale_and_check(arrays, 1024.0) is False
    for a, b in zip(arrays, src):
        assert_bits_equal(a, reference_unscale(b, 1024.0))


def test_unscale_byte_order_and_alignment(isa_level):
    x = (np.arange(50, dtype=np.float32) + 0.25).astype(">f4")
    expected = reference_unscale(x.astype(np.float32), 3.0)
    raw = np.zeros(4 * 50 + 1, np.uint8)
    y = raw[1:].view(np.float32)
    y[...] = np.arange(50, dtype=np.float32) + 0.25
    assert kernels.unscale_and_check([x, y], 3.0) is True
    assert x.dtype == np.dtype(">f4")
    assert_bits_equal(x.astype(np.float32), expected)
    assert_bits_equal(y.copy(), expected)


def test_unscale_no_floating_point_warnings(isa_level):
    x = np.array([3e38, np.nan, 1e-45, -np.inf], np.float32)
    with np.errstate(all="raise"):
        assert kernels.unscale_and_check([x], 0.25) is False
        assert not kernels.all_finite(x)


@pytest.mark.parametrize("scale, exc", [
    (0.0, ValueError), (-2.0, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
    (1e-300, ValueError), (1e300, ValueError), (10 ** 400, ValueError), ("2", TypeError),
    (True, TypeError),
    (None, TypeError), ([2.0], TypeError),
])
def test_unscale_bad_scale(scale, exc):
    x = np.ones(4, np.float32)
    with pytest.raises(exc, match="unscale_and_check"):
        kernels.unscale_and_check([x], scale)
    assert (x == 1).all()


def test_unscale_refusals_write_nothing():
    good = np.ones(10, np.float32)
    ro = np.ones(10, np.float16)
    ro.flags.writeable = False
    cases = [
        ([good, ro], ValueError, "read-only"),
        ([good, np.arange(3)], TypeError, "int64"),
        ([good, np.array(["x"])], TypeError, "<U1"),
        ([good, [1.0]], TypeError, "list"),
        ([good, None], TypeError, "NoneType"),
        ([good, good], ValueError, "share memory"),
        ([good, good[3:5]], ValueError, "share memory"),
        ([good, np.lib.stride_tricks.as_strided(np.ones(3, np.float32), (3, 2), (4, 0))],
         ValueError, "more than one index"),
        ([good, np.lib.stride_tricks.as_strided(np.ones(8, np.float64), (3, 3), (16, 8))],
         ValueError, "more than one index"),
        ([good, np.broadcast_to(np.ones(3, np.float32), (2, 3))], ValueError, "read-only"),
    ]
    for arrays, exc, text in cases:
        with pytest.raises(exc, match=text) as info:
            kernels.unscale_and_check(arrays, 2.0)
        assert "unscale_and_check" in str(info.value)
        assert (good == 1).all()
    with pytest.raises(TypeError, match="unscale_and_check"):
        kernels.unscale_and_check(5, 2.0)
    # strides (12, 8) over float32 reach distinct elements although the inner dimension spans
    # more than the outer stride: accepted, each element unscaled once
    buf = np.arange(8, dtype=np.float32)
    odd = np.lib.stride_tricks.as_strided(buf, (2, 3), (12, 8))
    expected = buf.copy()
    expected[[0, 2, 4, 3, 5, 7]] /= 2
    assert kernels.unscale_and_check([odd], 2.0) is True
    assert_bits_equal(buf, expected)
    single = np.full(3, 4.0, np.float32)
    assert kernels.unscale_and_check(single, 2.0) is True
    assert (single == 2).all()


# ---------------------------------------------------------------------------------------------
# thread splitting on small inputs: every 64-byte piece is its own piece of work


@pytest.fixture
def tiny_pieces():
    from mixedcore._core import _mixedcore as _lib
    previous = _lib.scan_thresholds(0, 0, 64)
    try:
        with kernels.threads(2):
            yield
    finally:
        _lib.scan_thresholds(*previous)


def test_split_all_finite_every_position(isa_level, tiny_pieces):
    """Pieces of 64 bytes cut arrays at every element size; odd-sized 16-bit arrays make the
    float32 / float64 arrays after them start off the 64-byte grid."""
    sizes = [3, 17, 1, 40, 33, 9, 64, 5]
    arrays = [np.full(n, 2.0, DTYPES[i % 4]) for i, n in enumerate(sizes)]
    assert kernels.all_finite(*arrays)
    for k, a in enumerate(arrays):
        for pos in range(a.size):
            bits(a)[pos] = NONFINITE[a.dtype.name][3]
            assert not kernels.all_finite(*arrays), (k, pos)
            a[pos] = 2.0
    assert kernels.all_finite(*arrays)
    strided = np.full((50, 7), 1.0, np.float32)[:, ::3]
    assert kernels.all_finite(strided, arrays[0])
    strided.base[49, 6] = np.nan
    assert not kernels.all_finite(strided, arrays[0])


def test_split_unscale(isa_level, tiny_pieces):
    rng = np.random.default_rng(5)
    src = [rng.standard_normal(n).astype(DTYPES[i % 4]) for i, n in
           enumerate([3, 17, 1, 40, 33, 9, 64, 5, 1000, 7])]
    src.append(rng.standard_normal((40, 30)).astype(np.float32)[::-2, ::3])
    arrays = [a.copy() for a in src]
    assert kernels.unscale_and_check(arrays, 3.0) is True
    for a, b in zip(arrays, src):
        assert_bits_equal(a, reference_unscale(b, 3.0))
    arrays[4][32] = np.inf
    assert kernels.unscale_and_check(arrays, 1.0) is False


@pytest.mark.parametrize("split", [False, True])
def test_concurrent_python_threads(isa_level, split, request):
    """Kernels release the GIL and keep no shared state: calls from several Python threads
    at once give each its own answer, also when each call runs its own thread team."""
    if split:
        request.getfixturevalue("tiny_pieces")
    import threading
    rng = np.random.default_rng(6)
    work = []
    for i in range(8):
        x = rng.standard_normal(50_000 + i).astype(DTYPES[i % 4])
        if i % 2:
            x[i * 1000] = np.nan
        work.append(x)
    results = {}

    def run(i):
        for _ in range(20):
            ok = kernels.all_finite(work[i])
            if ok != (i % 2 == 0):
                results[i] = False
                return
            y = work[i].copy()
            if kernels.unscale_and_check([y], 2.0) != (i % 2 == 0):
                results[i] = False
                return
        results[i] = True

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: True for i in range(8)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_start_offset(isa_level, dtype):
    """Arrays starting at each element offset within 64 bytes: the kernels peel a masked head
    up to the first aligned vector."""
    per_line = 64 // dtype.itemsize
    rng = np.random.default_rng(7)
    for offset in range(per_line):
        for n in (1, per_line - offset, per_line, 2 * per_line + 3, 700):
            buf = np.full(n + per_line, 1.25, dtype)
            x = buf[offset:offset + n]
            assert kernels.all_finite(x)
            for pos in sorted({0, n - 1, min(n - 1, per_line - offset), n // 2}):
                bits(x)[pos] = NONFINITE[dtype.name][3]
                assert not kernels.all_finite(x), (offset, n, pos)
                x[pos] = 1.25
            src = (rng.standard_normal(n) * 100).astype(dtype)
            x[...] = src
            assert kernels.unscale_and_check([x], 6.0) is True
            assert_bits_equal(x, reference_unscale(src, 6.0))
            assert (buf[:offset].astype(np.float64) == 1.25).all()
            assert (buf[offset + n:].astype(np.float64) == 1.25).all()


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=3),
       steps=st.lists(st.sampled_from([1, -1, 2, -3]), min_size=3, max_size=3),
       dtype_index=st.integers(0, 3), seed=st.integers(0, 2**31),
       scale=st.sampled_from([1.0, 3.0, 1024.0, 0.75]))
def test_unscale_random_views(shape, steps, dtype_index, seed, scale):
    rng = np.random.default_rng(seed)
    dtype = DTYPES[dtype_index]
    full = (rng.standard_normal([s * 3 for s in shape]) * 50).astype(dtype)
    if rng.integers(0, 2):
        bits(full).reshape(-1)[rng.integers(0, full.size)] = NONFINITE[dtype.name][
            rng.integers(0, 5)]
    before = full.copy()
    index = tuple(slice(None, None, steps[i]) for i in range(len(shape)))
    view = full[index].transpose(rng.permutation(len(shape)))
    expected_finite = bool(np.isfinite(before[index].astype(np.float32)).all()) \
        if dtype != np.float64 else bool(np.isfinite(before[index]).all())
    assert kernels.unscale_and_check([view], scale) is expected_finite
    expected = before.copy()
    expected[index] = reference_unscale(before[index], scale)
    assert_bits_equal(full, expected)


@pytest.mark.parametrize("dtype, stride", [(np.float16, 1), (">f4", 2), ("<f4", 2)])
def test_unscale_refuses_self_overlap_through_the_copy_path_too(dtype, stride):
    """Swapped and unaligned arrays are unscaled through a copy; one that reaches an element
    through two indices is refused first, and nothing is written."""
    buf = np.arange(40, dtype=np.uint8)
    x = np.ndarray((6,), dtype=dtype, buffer=buf, offset=1, strides=(stride,))
    before = buf.copy()
    with pytest.raises(ValueError, match="unscale_and_check: array 0 reaches some elements"):
        kernels.unscale_and_check([x], 2.0)
    np.testing.assert_array_equal(buf, before)
