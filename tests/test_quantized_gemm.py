"""Weight-only quantized GEMM (kernels.pack_quantized / matmul_quantized) against a float64
reference of Keras's formulas, bit for bit across levels and thread counts, and its errors."""
import pickle

import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels
from levels import at_level

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"float32": np.dtype(np.float32), "bfloat16": BF16, "float16": np.dtype(np.float16)}
U = 2.0 ** -24


# --- Keras's storage layout, written from its description -------------------------------------

def keras_pack_int4(q):
    """(k, n) values in [-8, 7] -> int8 (k, ceil(n / 2)): column 2c in the low nibble."""
    k, n = q.shape
    qq = np.zeros((k, n + n % 2), dtype=np.int16)
    qq[:, :n] = q
    lo = qq[:, 0::2] & 0xF
    hi = qq[:, 1::2] & 0xF
    return (lo | (hi << 4)).astype(np.uint8).view(np.int8)


def keras_unpack_int4(kernel, n):
    b = kernel.view(np.uint8).astype(np.int16)
    out = np.empty((kernel.shape[0], 2 * kernel.shape[1]), dtype=np.int16)
    out[:, 0::2] = b & 0xF
    out[:, 1::2] = (b >> 4) & 0xF
    return ((out[:, :n] ^ 8) - 8).astype(np.int8)


def make_weights(rng, k, n, bits, block):
    lo, hi = (-8, 7) if bits == 4 else (-128, 127)
    q = rng.integers(lo, hi + 1, size=(k, n)).astype(np.int8)
    kernel = keras_pack_int4(q) if bits == 4 else q
    if block:
        g = -(-k // block)
        scale = (rng.uniform(0.5, 2.0, size=(g, n)) * 2.0 ** rng.integers(-8, -3, size=(g, n))
                 ).astype(np.float32)
        zero = rng.integers(-8, 8, size=(g, n)).astype(np.int8)
    else:
        scale = (rng.uniform(0.5, 2.0, size=n) * 2.0 ** rng.integers(2, 6, size=n)
                 ).astype(np.float32)
        zero = None
    return q, kernel, scale, zero


def exact_weights(q, scale, zero, block):
    """The exact (float64) weight matrix and the number of groups."""
    k = q.shape[0]
    if not block:
        return q.astype(np.float64) / scale.astype(np.float64), 1
    rows = np.arange(k) // block
    return (q.astype(np.float64) - zero[rows]) * scale[rows].astype(np.float64), -(-k // block)


def check_bound(got, a, w64, groups, bias=None, out_dtype="float32"):
    a64 = a.astype(np.float64)
    exact = a64 @ w64
    mag = np.abs(a64) @ np.abs(w64)
    k = w64.shape[0]
    tol = 2 * (k + groups + 1) * U * mag
    if bias is not None:
        exact = exact + bias.astype(np.float64)
        tol = tol + U * np.abs(exact)
    if out_dtype != "float32":
        tol = tol + (2.0 ** -8 if out_dtype == "bfloat16" else 2.0 ** -11) * np.abs(exact) * 1.01
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= tol), f"max excess {np.max(err - tol)}"


def bits_of(x):
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


CASES = [
    # m, k, n, bits, block
    (1, 64, 48, 4, None),
    (1, 37, 33, 4, None),
    (1, 300, 70, 4, 64),
    (1, 129, 17, 4, 32),
    (3, 200, 160, 4, 128),
    (5, 250, 47, 4, 128),
    (20, 200, 50, 4, None),
    (33, 300, 65, 4, 32),
    (70, 530, 40, 4, None),
    (300, 64, 20, 4, 32),
    (1, 100, 20, 8, None),
    (2, 513, 130, 8, None),
    (30, 64, 40, 8, None),
    (90, 100, 36, 8, None),
]


@pytest.mark.parametrize("m,k,n,bits,block", CASES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_against_float64_and_levels(m, k, n, bits, block, dtype):
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    q, kernel, scale, zero = make_weights(rng, k, n, bits, block)
    pw = kernels.pack_quantized(kernel, bits=bits, scale=scale, zero=zero, block_size=block,
                                n=n if bits == 4 else None)
    assert pw.shape == (k, n) and pw.bits == bits and pw.block_size == (block or -1)
    np.testing.assert_array_equal(pw.quantized(), q)
    a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-3, 3, size=(m, k))).astype(
        DTYPES[dtype])
    w64, groups = exact_weights(q, scale, zero, block)
    first = None
    for level in kernels.available_isas():
        for nt in (1, 2):
            with kernels.threads(nt):
                y = at_level(level, kernels.matmul_quantized, a, pw)
            assert y.dtype == np.float32 and y.shape == (m, n)
            if first is None:
                first = y
                check_bound(y, a, w64, groups)
            else:
                np.testing.assert_array_equal(bits_of(y), bits_of(first),
                                              err_msg=f"{level}, {nt} threads")


def test_dequantize_is_keras_float32():
    rng = np.random.default_rng(1)
    q, kernel, scale, _ = make_weights(rng, 40, 21, 4, None)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, n=21)
    np.testing.assert_array_equal(pw.dequantize(), q.astype(np.float32) / scale)
    q, kernel, scale, zero = make_weights(rng, 70, 21, 4, 32)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, zero=zero, block_size=32, n=21)
    rows = np.arange(70) // 32
    want = (q.astype(np.float32) - zero[rows].astype(np.float32)) * scale[rows]
    np.testing.assert_array_equal(pw.dequantize(), want)
    assert pw.dequantize().dtype == np.float32
    q, kernel, scale, _ = make_weights(rng, 40, 9, 8, None)
    pw = kernels.pack_quantized(kernel, bits=8, scale=scale)
    np.testing.assert_array_equal(pw.dequantize(), q.astype(np.float32) / scale)


def test_keras_layout_helpers_roundtrip():
    rng = np.random.default_rng(2)
    for n in (1, 2, 7, 16, 33):
        q = rng.integers(-8, 8, size=(5, n)).astype(np.int8)
        packed = keras_pack_int4(q)
        assert packed.shape == (5, (n + 1) // 2)
        np.testing.assert_array_equal(keras_unpack_int4(packed, n), q)
        if n % 2:
            assert not np.any(packed[:, -1].view(np.uint8) >> 4)


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu", "tanh"])
def test_bias_activation_out_dtype(out_dtype, activation):
    """The epilogue is gemm's: the same bits as the unactivated float32 product, then bias,
    kernels.activation and the rounding."""
    rng = np.random.default_rng(3)
    q, kernel, scale, zero = make_weights(rng, 150, 45, 4, 64)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, zero=zero, block_size=64, n=45)
    a = rng.standard_normal((6, 150)).astype(BF16)
    bias = rng.standard_normal(45).astype(np.float32)
    plain = kernels.matmul_quantized(a, pw)
    want = (plain + bias).astype(np.float32)
    if activation is None:
        want = want.astype(DTYPES[out_dtype])
    else:
        want = kernels.activation(want, activation, out_dtype=DTYPES[out_dtype])
    for level in kernels.available_isas():
        got = at_level(level, kernels.matmul_quantized, a, pw, bias=bias, activation=activation,
                       out_dtype=out_dtype)
        assert got.dtype == DTYPES[out_dtype]
        np.testing.assert_array_equal(bits_of(got), bits_of(want), err_msg=level)


def test_batch_dims_strided_a_and_out():
    rng = np.random.default_rng(4)
    q, kernel, scale, _ = make_weights(rng, 96, 40, 4, None)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, n=40)
    base = rng.standard_normal((2, 3, 5, 2 * 96)).astype(np.float32)
    a = base[:, :, :, ::2]                         # strided along k
    want = kernels.matmul_quantized(np.ascontiguousarray(a), pw)
    got = kernels.matmul_quantized(a, pw)
    assert got.shape == (2, 3, 5, 40)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(kernels.matmul_quantized(a[1, 2, 3], pw), want[1, 2, 3])
    t = np.ascontiguousarray(a.swapaxes(-1, -2)).swapaxes(-1, -2)   # column-major rows
    np.testing.assert_array_equal(kernels.matmul_quantized(t, pw), want)
    out = np.full((2, 3, 5, 80), 7.0, dtype=np.float32)[..., ::2]     # strided out
    r = kernels.matmul_quantized(a, pw, out=out)
    assert r is out
    np.testing.assert_array_equal(out, want)
    big = np.zeros((5, 2, 3, 40), dtype=np.float32).transpose(1, 2, 0, 3)  # rows not mergeable
    kernels.matmul_quantized(a, pw, out=big)
    np.testing.assert_array_equal(big, want)
    empty = kernels.matmul_quantized(np.zeros((0, 96), np.float32), pw)
    assert empty.shape == (0, 40)


def test_subnormal_bfloat16_rows():
    """VDPBF16PS would read subnormal bfloat16 values as zero: those calls use FMAs instead."""
    rng = np.random.default_rng(5)
    q, kernel, scale, _ = make_weights(rng, 64, 32, 4, None)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, n=32)
    a = np.zeros((1, 64), dtype=BF16)
    a[0, 3] = np.float32(2.0 ** -130)
    a[0, 5] = np.float32(1.0)
    ref = None
    for level in kernels.available_isas():
        y = at_level(level, kernels.matmul_quantized, a, pw)
        want = (np.float32(2.0 ** -130) * q[3].astype(np.float32) + q[5].astype(np.float32))
        np.testing.assert_array_equal(y[0], want / scale)
        if ref is None:
            ref = y
        np.testing.assert_array_equal(bits_of(y), bits_of(ref))


def test_nan_and_inf_propagate():
    rng = np.random.default_rng(6)
    q, kernel, scale, zero = make_weights(rng, 50, 20, 4, 16)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, zero=zero, block_size=16, n=20)
    a = rng.standard_normal((3, 50)).astype(np.float32)
    a[1, 7] = np.nan
    y = kernels.matmul_quantized(a, pw)
    assert np.all(np.isnan(y[1])) and np.all(np.isfinite(y[[0, 2]]))


def test_large_call_threads_bit_identical():
    rng = np.random.default_rng(7)
    q, kernel, scale, zero = make_weights(rng, 1024, 512, 4, 128)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, zero=zero, block_size=128, n=512)
    for m in (1, 4, 64):
        a = rng.standard_normal((m, 1024)).astype(BF16)
        with kernels.threads(1):
            one = kernels.matmul_quantized(a, pw, out_dtype="bfloat16")
        with kernels.threads(2):
            two = kernels.matmul_quantized(a, pw, out_dtype="bfloat16")
        np.testing.assert_array_equal(bits_of(one), bits_of(two))


LARGE_M_CASES = [
    # m, k, n, bits, block: bfloat16 a above 16 rows takes gemm's bfloat16-pair micro-kernel at
    # the avx512bf16 level (tails of rows, columns and K; a last group shorter than the block)
    (17, 64, 40, 4, None),
    (65, 768, 96, 4, None),
    (150, 300, 70, 4, 128),
    (129, 257, 33, 4, 64),
    (200, 95, 50, 8, None),
    (300, 200, 48, 4, None),
]


def _small_m(a, pw, **kw):
    """The rows of a 16 at a time (the small-M path at every level)."""
    return np.concatenate([kernels.matmul_quantized(a[i:i + 16], pw, **kw)
                           for i in range(0, a.shape[0], 16)])


@pytest.mark.parametrize("m,k,n,bits,block", LARGE_M_CASES)
def test_large_m_bfloat16_matches_small_m_and_levels(m, k, n, bits, block):
    rng = np.random.default_rng(m * 13 + k + n)
    q, kernel, scale, zero = make_weights(rng, k, n, bits, block)
    pw = kernels.pack_quantized(kernel, bits=bits, scale=scale, zero=zero, block_size=block,
                                n=n if bits == 4 else None)
    a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-3, 3, size=(m, k))).astype(BF16)
    bias = rng.standard_normal(n).astype(np.float32)
    w64, groups = exact_weights(q, scale, zero, block)
    first = None
    for level in kernels.available_isas():
        for nt in (1, 2):
            with kernels.threads(nt):
                y = at_level(level, kernels.matmul_quantized, a, pw, bias=bias)
                small = at_level(level, _small_m, a, pw, bias=bias)
            np.testing.assert_array_equal(bits_of(y), bits_of(small),
                                          err_msg=f"{level}, {nt} threads: large against small M")
            if first is None:      # the generic level: the scalar twin's arithmetic
                first = y
                check_bound(y, a, w64, groups, bias=bias)
            else:
                np.testing.assert_array_equal(bits_of(y), bits_of(first),
                                              err_msg=f"{level}, {nt} threads")


def test_large_m_bfloat16_strided_and_subnormal_rows():
    """A strided a, and a band of rows holding subnormal bfloat16 values (which VDPBF16PS would
    read as zero: that band is computed with FMAs), give the generic level's bits."""
    rng = np.random.default_rng(11)
    q, kernel, scale, zero = make_weights(rng, 160, 64, 4, 32)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, zero=zero, block_size=32, n=64)
    full = (rng.standard_normal((300, 320))).astype(BF16)
    a = full[:, ::2]
    a[150] = (rng.integers(-127, 128, size=160) * 2.0 ** -133).astype(np.float32).astype(BF16)
    assert np.all(np.abs(a[150].astype(np.float32)) < 2.0 ** -126)
    ref = at_level("generic", kernels.matmul_quantized, a, pw)
    assert np.any(ref[150] != 0)
    for x in (a, np.asfortranarray(a)):       # k strided; rows contiguous along m
        for level in kernels.available_isas():
            for nt in (1, 2):
                with kernels.threads(nt):
                    y = at_level(level, kernels.matmul_quantized, x, pw, out_dtype="bfloat16")
                    want = at_level("generic", kernels.matmul_quantized, x, pw,
                                    out_dtype="bfloat16")
                np.testing.assert_array_equal(bits_of(y), bits_of(want),
                                              err_msg=f"{level}, {nt} threads")


# --- errors -------------------------------------------------------------------------------------

def _int4(k=8, n=6, block=None, seed=0):
    return make_weights(np.random.default_rng(seed), k, n, 4, block)


def test_pack_errors():
    q, kernel, scale, zero = _int4()
    pq = kernels.pack_quantized
    with pytest.raises(ValueError, match="pack_quantized: bits must be 4 or 8, got 3"):
        pq(kernel, bits=3, scale=scale, n=6)
    with pytest.raises(TypeError, match="bits must be an int, got bool"):
        pq(kernel, bits=True, scale=scale, n=6)
    with pytest.raises(TypeError, match="kernel must be int8.*got uint8"):
        pq(kernel.view(np.uint8), bits=4, scale=scale, n=6)
    with pytest.raises(ValueError, match=r"kernel must be 2-D .*got shape \(24,\)"):
        pq(kernel.reshape(-1), bits=4, scale=scale, n=6)
    with pytest.raises(ValueError, match="n .* is required for bits=4"):
        pq(kernel, bits=4, scale=scale)
    with pytest.raises(ValueError, match=r"n = 8 columns has shape \(k, 4\), got \(8, 3\)"):
        pq(kernel, bits=4, scale=np.ones(8, np.float32), n=8)
    with pytest.raises(ValueError, match=r"does not match the int8 kernel's shape \(8, 6\)"):
        pq(q, bits=8, scale=scale, n=5)
    with pytest.raises(TypeError, match="scale must be float32, got float64"):
        pq(kernel, bits=4, scale=scale.astype(np.float64), n=6)
    with pytest.raises(ValueError, match=r"scale has shape \(5,\), expected \(6,\)"):
        pq(kernel, bits=4, scale=scale[:5], n=6)
    bad = scale.copy()
    bad[2] = 0
    with pytest.raises(ValueError, match=r"finite and nonzero .*scale\[2\] = 0.0"):
        pq(kernel, bits=4, scale=bad, n=6)
    bad[2] = np.inf
    with pytest.raises(ValueError, match=r"scale\[2\] = inf"):
        pq(kernel, bits=4, scale=bad, n=6)
    with pytest.raises(ValueError, match="zero points come with block_size"):
        pq(kernel, bits=4, scale=scale, zero=np.zeros((1, 6), np.int8), n=6)
    # an odd n leaves the last high nibble as padding
    q5, k5, s5, _ = make_weights(np.random.default_rng(1), 8, 5, 4, None)
    k5 = k5.copy()
    k5.view(np.uint8)[3, -1] |= 0x30
    with pytest.raises(ValueError, match="high nibble .* row 3 holds 3"):
        pq(k5, bits=4, scale=s5, n=5)
    # grouped
    q, kernel, scale, zero = _int4(k=10, n=6, block=4)
    with pytest.raises(ValueError, match="block_size must be a positive int.*got 0"):
        pq(kernel, bits=4, scale=scale, zero=zero, block_size=0, n=6)
    with pytest.raises(TypeError, match="block_size must be an int, got float"):
        pq(kernel, bits=4, scale=scale, zero=zero, block_size=4.0, n=6)
    with pytest.raises(ValueError, match=r"scale has shape \(3, 6\), expected \(2, 6\)"):
        pq(kernel, bits=4, scale=scale, zero=zero, block_size=8, n=6)
    with pytest.raises(TypeError, match="zero must be int8, got uint8"):
        pq(kernel, bits=4, scale=scale, zero=zero.view(np.uint8), block_size=4, n=6)
    with pytest.raises(ValueError, match=r"zero has shape \(3, 5\), expected \(3, 6\)"):
        pq(kernel, bits=4, scale=scale, zero=zero[:, :5], block_size=4, n=6)
    s = scale.copy()
    s[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"scale\[1, 2\] = nan"):
        pq(kernel, bits=4, scale=s, zero=zero, block_size=4, n=6)
    # a grouped zero scale is a zero weight, accepted; no zero points means zero points 0
    s[1, 2] = 0
    pq(kernel, bits=4, scale=s, zero=zero, block_size=4, n=6)
    w = pq(kernel, bits=4, scale=scale, block_size=4, n=6)
    rows = np.arange(10) // 4
    np.testing.assert_array_equal(w.dequantize(), q.astype(np.float32) * scale[rows])
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(w)


def test_pack_size_overflow_is_refused():
    """A matrix whose byte count overflows int64 is refused before anything is allocated (the
    C check; the kernel array here only pretends to be that large)."""
    from mixedcore._core import _mixedcore as lib
    kernel = np.zeros((1, 1), np.int8)
    with pytest.raises(ValueError, match="too large to pack"):
        lib.wgemm_pack(kernel, 4, 2 ** 62, 2 ** 40, np.ones(1, np.float32), None, 0)


def test_matmul_errors():
    q, kernel, scale, _ = _int4(k=8, n=6)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, n=6)
    mq = kernels.matmul_quantized
    a = np.ones((2, 8), np.float32)
    with pytest.raises(TypeError, match="packed must be a PackedQuantized.*got ndarray"):
        mq(a, q)
    with pytest.raises(TypeError, match="unsupported dtype float64 for a"):
        mq(a.astype(np.float64), pw)
    with pytest.raises(TypeError, match="unsupported dtype int32 for a"):
        mq(a.astype(np.int32), pw)
    with pytest.raises(ValueError, match="a is 0-d"):
        mq(np.float32(1), pw)
    with pytest.raises(ValueError, match=r"a has shape \(2, 7\).*k = 8"):
        mq(a[:, :7], pw)
    with pytest.raises(ValueError, match="unknown activation 'swoosh'"):
        mq(a, pw, activation="swoosh")
    with pytest.raises(TypeError, match="unsupported out_dtype int8"):
        mq(a, pw, out_dtype=np.int8)
    with pytest.raises(ValueError, match=r"bias has shape \(5,\), expected \(6,\)"):
        mq(a, pw, bias=np.ones(5, np.float32))
    with pytest.raises(TypeError, match="unsupported bias dtype int64"):
        mq(a, pw, bias=np.ones(6, np.int64))
    with pytest.raises(ValueError, match=r"out has shape \(2, 5\), expected \(2, 6\)"):
        mq(a, pw, out=np.empty((2, 5), np.float32))
    with pytest.raises(ValueError, match="out has dtype float16, expected float32"):
        mq(a, pw, out=np.empty((2, 6), np.float16), out_dtype="float32")
    ro = np.empty((2, 6), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        mq(a, pw, out=ro)
    buf = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="out overlaps an input"):
        mq(buf[:16].reshape(2, 8), pw, out=buf[4:16].reshape(2, 6))


@pytest.mark.keras
def test_against_keras(keras):
    """pack_int4 / unpack_int4 and the grouped quantizer of Keras give what pack_quantized
    reads and what dequantize returns."""
    from keras import quantizers
    rng = np.random.default_rng(8)
    for n in (6, 7):
        q = rng.integers(-8, 8, size=(12, n)).astype(np.int8)
        ours = keras_pack_int4(q)
        theirs = np.asarray(keras.ops.convert_to_numpy(quantizers.pack_int4(q, axis=-1)[0]))
        np.testing.assert_array_equal(ours.view(np.uint8), theirs.view(np.uint8))
        back = keras.ops.convert_to_numpy(quantizers.unpack_int4(theirs, n, axis=-1))
        np.testing.assert_array_equal(back, q)
        pw = kernels.pack_quantized(theirs.astype(np.int8), bits=4,
                                    scale=np.ones(n, np.float32), n=n)
        np.testing.assert_array_equal(pw.quantized(), q)
    w = rng.standard_normal((300, 40)).astype(np.float32)
    qk, sk, zk = quantizers.abs_max_quantize_grouped_with_zero_point(w, block_size=128)
    qk = keras.ops.convert_to_numpy(qk).astype(np.int8)
    sk = keras.ops.convert_to_numpy(sk).astype(np.float32)
    zk = keras.ops.convert_to_numpy(zk).astype(np.int8)
    packed = keras.ops.convert_to_numpy(quantizers.pack_int4(qk, axis=-1)[0])
    pw = kernels.pack_quantized(packed.astype(np.int8), bits=4, scale=sk, zero=zk,
                                block_size=128, n=40)
    np.testing.assert_array_equal(pw.quantized(), qk)
    from keras.src.quantizers.quantizers import dequantize_with_sz_map
    g_idx = (np.arange(300) // 128).astype(np.float32)
    want = keras.ops.convert_to_numpy(dequantize_with_sz_map(qk, sk, zk, g_idx, group_axis=0))
    np.testing.assert_array_equal(pw.dequantize(), want.astype(np.float32))
    np.testing.assert_allclose(pw.dequantize(), w, atol=float(np.max(1.0 / sk)))
    x = rng.standard_normal((3, 300)).astype(np.float32)
    w64, groups = exact_weights(qk, sk, zk, 128)
    check_bound(kernels.matmul_quantized(x, pw), x, w64, groups)


def test_zero_points_outside_keras_range():
    """Zero points beyond [-8, 8] (not Keras's, but accepted) take the FMA kernel at the
    avx512bf16 level: the same bits as every other level."""
    rng = np.random.default_rng(9)
    q, kernel, scale, _ = make_weights(rng, 96, 40, 4, 32)
    zero = rng.integers(-100, 100, size=(3, 40)).astype(np.int8)
    pw = kernels.pack_quantized(kernel, bits=4, scale=scale, zero=zero, block_size=32, n=40)
    a = rng.standard_normal((3, 96)).astype(BF16)
    w64, groups = exact_weights(q, scale, zero, 32)
    ys = [at_level(level, kernels.matmul_quantized, a, pw) for level in kernels.available_isas()]
    check_bound(ys[0], a, w64, groups)
    for y in ys[1:]:
        np.testing.assert_array_equal(bits_of(y), bits_of(ys[0]))


def test_docs_example():
    """The example of docs/gemm.md runs as written on Keras-shaped arrays."""
    import pathlib
    import re
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "gemm.md").read_text()
    start = text.index("\n## Weight-only quantized products")
    block = re.findall(r"```python\n(.*?)```", text[start:], flags=re.S)[0]
    rng = np.random.default_rng(10)
    k, units = 300, 45
    q4, kernel4, scale, _ = make_weights(rng, k, units, 4, None)
    _, _, group_scale, group_zero = make_weights(rng, k, units, 4, 128)
    q8, kernel8, _, _ = make_weights(rng, k, units, 8, None)
    ns = dict(kernels=kernels, kernel4=kernel4, kernel8=kernel8, scale=scale,
              group_scale=group_scale, group_zero=group_zero, units=units,
              x=rng.standard_normal((2, k)).astype(BF16), b=np.zeros(units, np.float32))
    exec(block, ns)
    assert ns["y"].shape == (2, units) and ns["y"].dtype == BF16
    assert ns["p8"].shape == (k, units) and ns["w"].dtype == np.float32
