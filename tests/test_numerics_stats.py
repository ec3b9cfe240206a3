"""kernels.numerics_stats: every class against a reference built from the conversions
themselves, every bit pattern of the 16-bit types, the limits of float32/float64, every level."""
import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels
from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._scan import STAT_KEYS

from levels import at_level

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
LEVELS = kernels.available_isas()


def reference(x):
    """The classes from their definition: convert with ``kernels.cast`` (bit-exact, tested on
    its own) and look at what came out."""
    x = np.asarray(x)
    with np.errstate(invalid="ignore"):
        wide = x.astype(np.float64)
    finite = np.isfinite(wide)
    nonzero = finite & (wide != 0)
    out = {"dtype": str(x.dtype), "size": int(x.size),
           "max_abs": float(np.abs(wide[finite]).max()) if finite.any() else 0.0,
           "nan": int(np.isnan(wide).sum()), "inf": int(np.isinf(wide).sum()),
           "zero": int((finite & (wide == 0)).sum())}
    for name, dtype, tiny in (("float16", F16, 2.0 ** -14), ("bfloat16", BF16, 2.0 ** -126)):
        if x.dtype == dtype:
            y = wide
        else:
            y = kernels.cast(np.ascontiguousarray(x), dtype).astype(np.float64)
        out[f"{name}_overflow"] = int((finite & np.isinf(y)).sum())
        out[f"{name}_underflow"] = int((nonzero & (y == 0)).sum())
        out[f"{name}_subnormal"] = int((nonzero & (y != 0) & (np.abs(y) < tiny)).sum())
    return out


def all_patterns(dtype):
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)


def around(dtype, limits):
    """Bit patterns at, just below and just above each limit, both signs."""
    u = UINT[np.dtype(dtype).itemsize]
    pats = {int(p) + d for p in limits for d in (-2, -1, 0, 1, 2) if int(p) + d >= 0}
    sign = 1 << (8 * np.dtype(dtype).itemsize - 1)
    pats = sorted(pats | {p | sign for p in pats})
    return np.array(pats, dtype=u).view(dtype)


# the first bit pattern of each class change, per dtype (from the definitions, not the C)
F32_LIMITS = [np.float32(v).view(np.uint32) for v in
              (65504.0, 65520.0, 2.0 ** -25, 2.0 ** -24, 2.0 ** -14 - 2.0 ** -25, 2.0 ** -14)] + [
    0x7F7F8000, 0x00008000, 0x007F8000, 0x00800000, 0x7F800000, 0x7F7FFFFF, 1]
F64_LIMITS = [np.float64(v).view(np.uint64) for v in
              (65504.0, 65520.0, 2.0 ** -25, 2.0 ** -14 - 2.0 ** -25, (2 - 2.0 ** -8) * 2.0 ** 127,
               2.0 ** -134, 2.0 ** -126 - 2.0 ** -134, 2.0 ** -133, 2.0 ** -126, 1e-300, 1e300,
               np.finfo(np.float32).max, np.finfo(np.float32).tiny)] + [0x7FF0000000000000, 1]


def random_values(dtype, n, seed):
    """Bits drawn across every exponent (so each class is populated)."""
    rng = np.random.default_rng(seed)
    size = np.dtype(dtype).itemsize
    u = UINT[size]
    raw = rng.integers(0, np.iinfo(u).max, n, dtype=u, endpoint=True)
    return raw.view(dtype)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", [F16, BF16], ids=str)
def test_every_16_bit_pattern(level, dtype):
    x = all_patterns(dtype)
    assert at_level(level, kernels.numerics_stats, x) == reference(x)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype,limits", [(np.float32, F32_LIMITS), (np.float64, F64_LIMITS)],
                         ids=["float32", "float64"])
def test_limits_and_random_bits(level, dtype, limits):
    x = np.concatenate([around(dtype, limits), random_values(dtype, 20000, 7)])
    assert at_level(level, kernels.numerics_stats, x) == reference(x)
    y = np.concatenate([np.zeros(3000, dtype), -np.zeros(10, dtype), x[:50]])
    assert at_level(level, kernels.numerics_stats, y) == reference(y)


@pytest.mark.parametrize("level", LEVELS)
def test_every_length_through_the_vector_tails(level):
    for dtype in (F16, BF16, np.dtype(np.float32), np.dtype(np.float64)):
        pool = random_values(dtype, 200, 3)
        for n in range(0, 140):
            x = pool[:n]
            assert at_level(level, kernels.numerics_stats, x) == reference(x), (dtype, n)


def test_levels_agree_on_large_arrays_split_across_threads():
    x = random_values(np.float32, 600_000, 11)
    previous = _lib.scan_thresholds(0, 0, 64)
    try:
        with kernels.threads(2):
            results = [at_level(level, kernels.numerics_stats, x) for level in LEVELS]
    finally:
        _lib.scan_thresholds(*previous)
    assert all(r == reference(x) for r in results)


def test_layouts_count_every_element():
    x = random_values(np.float32, 4 * 6 * 5, 5).reshape(4, 6, 5)
    expected = reference(x)
    for view in (x.T, x[::-1, :, ::-1], np.swapaxes(x, 0, 2)):
        assert kernels.numerics_stats(view) == expected
    part = x[:, ::2, 1:]
    assert kernels.numerics_stats(part) == reference(part)
    swapped = x.astype(x.dtype.newbyteorder())
    assert kernels.numerics_stats(swapped) == expected          # named as the native dtype
    buf = np.zeros(x.nbytes + 1, np.uint8)
    unaligned = buf[1:].view(np.float32).reshape(x.shape)
    unaligned[...] = x
    assert kernels.numerics_stats(unaligned) == expected
    # a broadcast view: each element counts, as numpy's size does
    row = np.array([np.inf, 1e-30, 70000.0], np.float32)
    stats = kernels.numerics_stats(np.broadcast_to(row, (5, 3)))
    assert (stats["size"], stats["inf"], stats["float16_underflow"], stats["float16_overflow"]) \
        == (15, 5, 5, 5)


def test_array_likes_and_keys():
    stats = kernels.numerics_stats([1.0, -2.5, 0.0])
    assert list(stats) == ["dtype", "size", "max_abs"] + list(STAT_KEYS)
    assert stats["dtype"] == "float64" and stats["max_abs"] == 2.5 and stats["zero"] == 1
    assert kernels.numerics_stats(np.float16(-3))["max_abs"] == 3.0
    nothing = kernels.numerics_stats(np.array([np.nan, -np.inf], np.float32))
    assert nothing["max_abs"] == 0.0 and nothing["nan"] == 1 and nothing["inf"] == 1


@pytest.mark.parametrize("bad,match", [
    (np.arange(3), r"numerics_stats: x has unsupported dtype int64"),
    ("abc", r"numerics_stats: x must be a numpy.ndarray .* got str"),
    (None, r"numerics_stats: x must be a numpy.ndarray .* got NoneType"),
    (np.array([1 + 2j]), r"numerics_stats: x has unsupported dtype complex128"),
])
def test_bad_input_is_a_type_error(bad, match):
    with pytest.raises(TypeError, match=match):
        kernels.numerics_stats(bad)
