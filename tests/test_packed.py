"""kernels.pack / PackedMatrix: B packed once gives the same bits as B packed by every call.

Every test runs at every ISA level (the ``isa_level`` fixture).  The reference for a product
with a packed B is the same product with the plain B: the two must agree bit for bit (the
packed panels are the panels the call would make, with the same K blocking).
"""
import pickle

import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
DTYPES = [F32, F16, BF16]


@pytest.fixture
def rng():
    return np.random.default_rng(77)


def _rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def _same(x, y):
    assert x.dtype == y.dtype and x.shape == y.shape
    assert np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 6, 7, 14, 15, 33, 100, 257])
@pytest.mark.parametrize("n", [1, 31, 32, 33, 129])
def test_packed_equals_unpacked(isa_level, rng, dtype, m, n):
    k = 75
    a, b = _rand(rng, (m, k), dtype), _rand(rng, (k, n), dtype)
    pb = kernels.pack(b)
    assert pb.shape == (k, n) and pb.dtype == dtype and pb.isa == isa_level
    for kw in ({}, {"out_dtype": dtype}, {"bias": _rand(rng, (n,), F32), "activation": "gelu"}):
        _same(kernels.matmul(a, pb, **kw), kernels.matmul(a, b, **kw))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_packed_large_and_threads(isa_level, rng, dtype):
    """Many K blocks (K > KC), a 16-bit output (float32 partial sums in scratch), several
    thread counts: the same bits as the unpacked product with one thread."""
    a, b = _rand(rng, (300, 2500), dtype), _rand(rng, (2500, 200), dtype)
    pb = kernels.pack(b)
    with kernels.threads(1):
        want = kernels.matmul(a, b, out_dtype=dtype)
    for t in (1, 2, 3):
        with kernels.threads(t):
            _same(kernels.matmul(a, pb, out_dtype=dtype), want)
            _same(kernels.matmul(a, b, out_dtype=dtype), want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pack_whole_k(isa_level, rng, dtype):
    """whole_k keeps K in one block up to 4096: within every level's first block, the bits of
    the unpacked product; deeper (2500: two blocks or more at every level), within the GEMM's
    bound, the same bits at every thread count, with the epilogue and 16-bit outputs, rows in
    several blocks of A; beyond 4096, the level's blocks again, so the unpacked bits."""
    a, b = _rand(rng, (300, 200), dtype), _rand(rng, (200, 70), dtype)
    _same(kernels.matmul(a, kernels.pack(b, whole_k=True)), kernels.matmul(a, b))
    a, b = _rand(rng, (300, 2500), dtype), _rand(rng, (2500, 70), dtype)
    pb = kernels.pack(b, whole_k=True)
    bias = _rand(rng, (70,), F32)
    got = kernels.matmul(a, pb)
    _check_close(got, a, b)
    for kw in ({}, {"out_dtype": dtype, "bias": bias, "activation": "gelu"}):
        with kernels.threads(1):
            want = kernels.matmul(a, pb, **kw)
        for t in (2, 3):
            with kernels.threads(t):
                _same(kernels.matmul(a, pb, **kw), want)
    a, b = _rand(rng, (20, 5000), dtype), _rand(rng, (5000, 40), dtype)
    _same(kernels.matmul(a, kernels.pack(b, whole_k=True)), kernels.matmul(a, b))


def test_pack_whole_k_errors():
    b = np.ones((4, 4), F32)
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match=f"pack: whole_k must be a bool, got "
                                            f"{type(bad).__name__} {bad!r}"):
            kernels.pack(b, whole_k=bad)
    assert kernels.pack(b, whole_k=np.bool_(True)).shape == (4, 4)


def test_packed_batched_and_vectors(isa_level, rng):
    b = _rand(rng, (40, 50), BF16)
    pb = kernels.pack(b)
    a = _rand(rng, (3, 4, 6, 40), BF16)
    _same(kernels.matmul(a, pb), kernels.matmul(a, b))
    v = _rand(rng, (40,), BF16)
    _same(kernels.matmul(v, pb), kernels.matmul(v, b))
    out = np.empty((3, 4, 6, 50), F32)
    assert kernels.matmul(a, pb, out=out) is out
    _same(out, kernels.matmul(a, b))


def test_mixed_input_dtypes_against_packed(isa_level, rng):
    """A packed bfloat16 B against float32 / float16 A (pairs are widened for the float32
    kernel at avx512bf16), and float32 B against bfloat16 A."""
    for adt, bdt in [(F32, BF16), (F16, BF16), (BF16, F32), (F16, F16)]:
        a, b = _rand(rng, (37, 64), adt), _rand(rng, (64, 70), bdt)
        _same(kernels.matmul(a, kernels.pack(b)), kernels.matmul(a, b))


def test_pack_converts_with_dtype(rng):
    w = rng.standard_normal((64, 48))                     # float64 master weights
    for dt in (F32, F16, BF16, "bfloat16"):
        p = kernels.pack(w, dtype=dt)
        assert p.dtype == np.dtype(dt)
        _same(p.unpack(), kernels.cast(w, dt))
    p = kernels.pack(w.astype(F32), dtype="bfloat16")
    _same(p.unpack(), kernels.cast(w.astype(F32), BF16))


def test_unpack_round_trip(isa_level, rng):
    for dt in DTYPES:
        for shape in [(1, 1), (3, 5), (75, 33), (2100, 7)]:
            b = _rand(rng, shape, dt)
            _same(kernels.pack(b).unpack(), b)
    b = _rand(rng, (50, 40), F32)[::-2, ::3]              # any strides
    _same(kernels.pack(b).unpack(), np.ascontiguousarray(b))


def test_empty_and_zero_k(rng):
    p = kernels.pack(np.zeros((0, 5), F32))
    assert p.nbytes == 0 and p.shape == (0, 5)
    got = kernels.matmul(np.ones((3, 0), F32), p, bias=np.arange(5, dtype=F32))
    _same(got, np.broadcast_to(np.arange(5, dtype=F32), (3, 5)).copy())
    p = kernels.pack(np.zeros((4, 0), BF16))
    assert kernels.matmul(np.ones((3, 4), BF16), p).shape == (3, 0)


def test_nbytes_reflects_the_panels(isa_level):
    """float32 B takes 4 bytes per element; float16 and bfloat16 B take 2 (bfloat16 pairs or
    16-bit panels) wherever the level can read them, else 4 (float32 panels)."""
    for dt in DTYPES:
        p = kernels.pack(np.ones((1024, 1000), dt))
        pairs, elem, nr, kc = p.format
        npad = -(-1000 // nr) * nr
        per = 2 if pairs else elem
        assert p.nbytes == npad * 1024 * per
        if dt == F32:
            assert (pairs, elem) == (0, 4)
        elif isa_level in ("avx512", "avx512bf16"):
            assert per == 2
        assert p.format == kernels.pack(np.ones((3, 3), dt)).format[:3] + (kc,)


def test_packed_is_immutable_and_not_picklable():
    p = kernels.pack(np.ones((4, 4), F32))
    with pytest.raises(AttributeError):
        p.shape = (2, 2)
    with pytest.raises(AttributeError):
        p.dtype = F16
    with pytest.raises(TypeError, match="PackedMatrix cannot be pickled"):
        pickle.dumps(p)
    assert "PackedMatrix(shape=(4, 4)" in repr(p)


def test_bf16_subnormals_are_packed_exactly(isa_level):
    """VDPBF16PS reads subnormal bfloat16 as zero: such a B is packed as float32 panels, and a
    subnormal A with pair-packed B is computed on widened panels; exact either way."""
    a = np.array([[1.0, 0.0]], BF16)
    b = np.array([[2.0 ** -130], [0.0]], BF16)
    assert kernels.matmul(a, kernels.pack(b))[0, 0] == np.float32(2.0 ** -130)
    p = kernels.pack(b)
    _same(p.unpack(), b)
    a = np.array([[2.0 ** -130, 0.0]], BF16)
    b = np.array([[2.0 ** 100], [0.0]], BF16)
    assert kernels.matmul(a, kernels.pack(b))[0, 0] == np.float32(2.0 ** -30)
    b = np.array([[np.inf], [0.0]], BF16)
    assert kernels.matmul(a, kernels.pack(b))[0, 0] == np.inf


def test_level_change_widens_or_refuses(rng):
    """Panels packed at one level, used at every level: the same bits as an unpacked product
    where the format is the level's own, within the bound where they are widened, and a
    ValueError (nothing written) where the width differs."""
    levels = kernels.available_isas()
    if len(levels) < 2:
        pytest.skip("one level only")
    previous = kernels.isa()
    try:
        for dt in (BF16, F16, F32):
            a, b = _rand(rng, (20, 30), dt), _rand(rng, (30, 40), dt)
            for packed_at in levels:
                kernels.set_isa(packed_at)
                p = kernels.pack(b)
                for used_at in levels:
                    kernels.set_isa(used_at)
                    own = kernels.pack(b).format
                    if p.format == own:
                        _same(kernels.matmul(a, p), kernels.matmul(a, b))
                    elif p.format[2] == own[2]:
                        _check_close(kernels.matmul(a, p), a, b)
                    else:
                        out = np.full((20, 40), 7.0, F32)
                        with pytest.raises(ValueError, match=f"packed at level '{packed_at}'"):
                            kernels.matmul(a, p, out=out)
                        assert (out == 7.0).all()            # nothing written
                        _same(kernels.matmul(a, kernels.pack(p.unpack())), kernels.matmul(a, b))
    finally:
        kernels.set_isa(previous)


def _check_close(got, a, b):
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = 2 * a.shape[1] * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert (np.abs(got - ref) <= bound).all()


@pytest.mark.parametrize("bad,exc,msg", [
    (np.ones(4, F32), ValueError, r"pack: b must be 2-D \(k, n\), got shape \(4,\)"),
    (np.ones((2, 2, 2), F32), ValueError, "pack: b must be 2-D"),
    (np.ones((3, 3), np.int32), TypeError, "pack: unsupported dtype int32"),
    (np.ones((3, 3), np.float64), TypeError, "pack: unsupported dtype float64"),
    (np.ones((3, 3), np.complex64), TypeError, "pack: unsupported dtype complex64"),
    ("abc", ValueError, "pack: b must be 2-D"),
])
def test_pack_errors(bad, exc, msg):
    with pytest.raises(exc, match=msg):
        kernels.pack(bad)


def test_pack_dtype_errors():
    with pytest.raises(TypeError, match="pack: unsupported dtype float64"):
        kernels.pack(np.ones((2, 2), F32), dtype=np.float64)
    with pytest.raises(TypeError, match="pack: cannot interpret 'nope' as a dtype"):
        kernels.pack(np.ones((2, 2), F32), dtype="nope")
    with pytest.raises(TypeError, match="pack: unsupported dtype int64 of b"):
        kernels.pack(np.ones((2, 2), np.int64), dtype=F32)


def test_matmul_with_packed_errors(rng):
    p = kernels.pack(_rand(rng, (8, 5), F32))
    with pytest.raises(ValueError, match=r"matmul: inner dimensions differ: \(3, 7\) @ \(8, 5\)"):
        kernels.matmul(np.ones((3, 7), F32), p)
    with pytest.raises(ValueError, match=r"bias has shape \(4,\), expected \(5,\)"):
        kernels.matmul(np.ones((3, 8), F32), p, bias=np.ones(4, F32))
    with pytest.raises(TypeError, match=r"matmul: a must be a numpy.ndarray \(only b may be a PackedMatrix\), got PackedMatrix"):
        kernels.matmul(p, p)
