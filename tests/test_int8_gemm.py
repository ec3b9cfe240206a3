"""kernels.matmul_int8, kernels.pack of int8 matrices and kernels.quantize_rows: exact int32
products at every level and thread count, the scaled epilogue bit for bit against its numpy
float32 formula, and row quantization bit for bit against torch."""
import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels
from levels import at_level

BF16 = np.dtype(ml_dtypes.bfloat16)
MAX_K = 131071


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def i8(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


def ref(a, b):
    return np.matmul(a.astype(np.int64), b.astype(np.int64))


def scaled_ref(acc, a_scale, b_scale, bias=None, activation=None, out_dtype=np.float32):
    """The float32 formula, one numpy float32 operation at a time."""
    y = acc.astype(np.float32) / (b_scale.astype(np.float32) * a_scale.astype(np.float32))
    if bias is not None:
        y = y + bias.astype(np.float32)
    if activation is not None and np.dtype(out_dtype) != np.float32:
        return kernels.activation(y, activation, out_dtype=out_dtype)   # gelu: float32-evaluated
    if activation is not None:
        y = kernels.activation(y, activation)
    with np.errstate(over="ignore"):               # float16 overflows to inf, as it should
        return y.astype(out_dtype)


SHAPES = [(1, 1, 1), (1, 7, 5), (1, 64, 33), (2, 3, 2), (3, 33, 17), (6, 8, 32), (14, 100, 40),
          (15, 129, 65), (29, 255, 97), (64, 300, 70), (130, 1030, 257), (1, 4100, 130)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_exact_packed_and_unpacked(isa_level, m, k, n, rng):
    a, b = i8(rng, (m, k)), i8(rng, (k, n))
    want = ref(a, b)
    got = kernels.matmul_int8(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    pb = kernels.pack(b)
    np.testing.assert_array_equal(kernels.matmul_int8(a, pb), want)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m,k,n", [(1, 4096, 1024), (200, 700, 300), (33, 5000, 96)])
def test_threads_and_levels_identical(threads, m, k, n, rng):
    a, b = i8(rng, (m, k)), i8(rng, (k, n))
    sa = rng.uniform(0.5, 2, (m, 1)).astype(np.float32)
    sb = rng.uniform(0.5, 2, n).astype(np.float32)
    want = ref(a, b)
    with kernels.threads(threads):
        for level in kernels.available_isas():
            got = at_level(level, kernels.matmul_int8, a, b)
            np.testing.assert_array_equal(got, want, err_msg=level)
            pb = at_level(level, kernels.pack, b)
            y = at_level(level, kernels.matmul_int8, a, pb, a_scale=sa, b_scale=sb)
            np.testing.assert_array_equal(y, scaled_ref(want, sa, sb), err_msg=level)


def test_extremes_and_largest_k(isa_level):
    for v in (-128, 127):
        for k in (4, 5, 1023, 4097):
            a = np.full((3, k), v, np.int8)
            b = np.full((k, 34), -128, np.int8)
            np.testing.assert_array_equal(kernels.matmul_int8(a, b), ref(a, b))
            np.testing.assert_array_equal(kernels.matmul_int8(a, kernels.pack(b)), ref(a, b))
    a = np.full((2, MAX_K), -128, np.int8)
    b = np.full((MAX_K, 3), -128, np.int8)
    b[:, 1] = 127
    got = kernels.matmul_int8(a, b)
    assert got[0, 0] == MAX_K * 16384 == 2**31 - 16384
    np.testing.assert_array_equal(got, ref(a, b))


def test_views_batches_and_out(isa_level, rng):
    a = i8(rng, (2, 3, 21, 50))
    b = i8(rng, (50, 37))
    want = ref(a, b)
    np.testing.assert_array_equal(kernels.matmul_int8(a, b), want)
    np.testing.assert_array_equal(kernels.matmul_int8(a, kernels.pack(b)), want)
    at = i8(rng, (50, 21)).T                      # transposed
    bt = i8(rng, (37, 50)).T
    np.testing.assert_array_equal(kernels.matmul_int8(at, bt), ref(at, bt))
    ar = i8(rng, (40, 101))[::-2, 1::3]           # reversed, stepped
    br = i8(rng, (68, 90))[::2, ::-3][:34]
    np.testing.assert_array_equal(kernels.matmul_int8(ar, br), ref(ar, br))
    np.testing.assert_array_equal(kernels.matmul_int8(ar, kernels.pack(br)), ref(ar, br))
    out = np.zeros((37, 21), np.int32).T          # strided out
    kernels.matmul_int8(at, bt, out=out)
    np.testing.assert_array_equal(out, ref(at, bt))
    big = np.zeros((2, 3, 21, 74), np.int32)
    r = kernels.matmul_int8(a, b, out=big[..., ::2])
    assert r.base is big
    np.testing.assert_array_equal(big[..., ::2], want)
    assert not big[..., 1::2].any()


def test_k_zero_and_empty(isa_level, rng):
    a, b = np.zeros((3, 0), np.int8), np.zeros((0, 5), np.int8)
    np.testing.assert_array_equal(kernels.matmul_int8(a, b), np.zeros((3, 5), np.int32))
    y = kernels.matmul_int8(a, kernels.pack(b), a_scale=np.ones((3, 1), np.float32),
                            b_scale=np.full(5, 2, np.float32), bias=np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(y, np.tile(np.arange(5, dtype=np.float32), (3, 1)))
    assert kernels.matmul_int8(np.zeros((0, 4), np.int8), i8(rng, (4, 3))).shape == (0, 3)
    assert kernels.matmul_int8(i8(rng, (2, 4)), np.zeros((4, 0), np.int8)).shape == (2, 0)


@pytest.mark.parametrize("out_dtype", [np.float32, BF16, np.float16])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu", "tanh"])
@pytest.mark.parametrize("m,k,n", [(1, 300, 130), (17, 64, 45), (40, 4500, 33)])
def test_scaled_epilogue_bit_identical(isa_level, out_dtype, activation, m, k, n, rng):
    a, b = i8(rng, (m, k)), i8(rng, (k, n))
    sa = (rng.uniform(1, 100, (m, 1)) / 3).astype(np.float32)
    sb = (rng.uniform(1, 200, n) / 7).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    want = scaled_ref(ref(a, b), sa, sb, bias, activation, out_dtype)
    for bb in (b, kernels.pack(b)):
        got = kernels.matmul_int8(a, bb, a_scale=sa, b_scale=sb, bias=bias,
                                  activation=activation, out_dtype=out_dtype)
        assert got.dtype == np.dtype(out_dtype)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    # strided out: the scalar epilogue gives the same bits
    out = np.zeros((n, m), out_dtype).T
    kernels.matmul_int8(a, b, a_scale=sa[:, 0], b_scale=sb, bias=bias, activation=activation,
                        out=out)
    np.testing.assert_array_equal(out.view(np.uint8) if out.flags.c_contiguous else
                                  np.ascontiguousarray(out).view(np.uint8), want.view(np.uint8))


def test_scales_of_16bit_and_batches(isa_level, rng):
    a = i8(rng, (2, 5, 9, 40))
    b = i8(rng, (40, 20))
    sa = rng.uniform(0.1, 5, (2, 5, 9, 1)).astype(BF16)
    sb = rng.uniform(0.1, 5, 20).astype(np.float16)
    bias = rng.standard_normal(20).astype(BF16)
    want = scaled_ref(ref(a, b), sa, sb, bias)
    got = kernels.matmul_int8(a, b, a_scale=sa, b_scale=sb, bias=bias)
    np.testing.assert_array_equal(got, want)
    got = kernels.matmul_int8(a, kernels.pack(b), a_scale=sa[..., 0], b_scale=sb, bias=bias)
    np.testing.assert_array_equal(got, want)
    # a scale broadcast over the batch; a scalar bias
    s1 = rng.uniform(0.1, 5, (9, 1)).astype(np.float32)
    got = kernels.matmul_int8(a, b, a_scale=s1, b_scale=sb, bias=np.float32(0.5) * np.ones(1, np.float32))
    np.testing.assert_array_equal(got, scaled_ref(ref(a, b), np.broadcast_to(s1, (2, 5, 9, 1)), sb,
                                                  np.full(20, 0.5, np.float32)))


def test_packed_matrix_int8(rng):
    b = i8(rng, (37, 45))
    pb = kernels.pack(b)
    assert isinstance(pb, kernels.PackedMatrix)
    assert pb.dtype == np.int8 and pb.shape == (37, 45) and pb.ndim == 2
    assert pb.isa == kernels.isa() and not pb.stale and pb.nbytes > 37 * 45
    np.testing.assert_array_equal(pb.unpack(), b)
    assert "int8" in repr(pb)
    np.testing.assert_array_equal(kernels.pack(b[::-1, ::2]).unpack(), b[::-1, ::2])
    assert kernels.pack(b, dtype="int8").dtype == np.int8
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(pb)


def test_quantize_then_multiply_is_keras_formula(isa_level, rng):
    x = rng.standard_normal((5, 300)).astype(np.float32) * 3
    w = rng.standard_normal((300, 70)).astype(np.float32)
    ks = (np.float32(127) / (np.abs(w).max(axis=0) + np.float32(1e-7))).astype(np.float32)
    kq = np.clip(np.round(w * ks), -127, 127).astype(np.int8)
    sx = np.float32(127) / (np.abs(x).max(axis=-1, keepdims=True) + np.float32(1e-7))
    xq = np.clip(np.round(x * sx), -127, 127).astype(np.int8)
    want = (ref(xq, kq).astype(np.float32) / (ks * sx)).astype(np.float32)
    q, s = kernels.quantize_rows(x)
    np.testing.assert_array_equal(q, xq)
    np.testing.assert_array_equal(s, sx)
    got = kernels.matmul_int8(q, kernels.pack(kq), a_scale=s, b_scale=ks)
    np.testing.assert_array_equal(got, want)


# --- quantize_rows --------------------------------------------------------------------------------

def special_rows(dtype, rng):
    k = 37
    rows = [rng.standard_normal(k) * 10.0 ** e for e in range(-9, 6)]
    rows.append(np.zeros(k))
    rows.append(-np.zeros(k))
    rows.append(np.full(k, 1e-8))
    rows.append(np.linspace(-1, 1, k))           # ties of x * s
    rows.append(np.arange(k) - 18.0)
    rows.append(np.full(k, 6e4))
    r = rng.standard_normal(k)
    r[3] = np.nan
    rows.append(r)
    r = rng.standard_normal(k)
    r[5] = np.inf
    rows.append(r)
    r = rng.standard_normal(k)
    r[7] = -np.inf
    rows.append(r)
    rows.append(rng.standard_normal(k) * 1e-4)   # float16: the scale overflows
    x = np.array(rows, dtype=np.float64)
    if dtype == np.float32:
        return x.astype(np.float32)
    with np.errstate(over="ignore"):               # float16: 1e5 rows overflow to inf
        return x.astype(np.float32).astype(dtype)


def same_bits_or_both_nan(got, want):
    g, w = got.astype(np.float32), want.astype(np.float32)
    return np.all((g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w)))


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
def test_quantize_rows_against_torch(isa_level, dtype, rng):
    torch = pytest.importorskip("torch")
    tdt = {np.dtype(np.float32): torch.float32, BF16: torch.bfloat16,
           np.dtype(np.float16): torch.float16}[np.dtype(dtype)]
    x = np.concatenate([special_rows(dtype, rng),
                        (rng.standard_normal((50, 37)) * 10.0 ** rng.integers(-6, 4, (50, 1)))
                        .astype(np.float32).astype(dtype)])
    t = torch.from_numpy(x.astype(np.float32)).to(tdt)
    # Keras's abs_max_quantize with the torch backend: ops.divide is torch.divide
    st = torch.divide(torch.tensor(127.0, dtype=tdt), t.abs().amax(-1, keepdim=True) + 1e-7)
    qt = torch.clamp(torch.round(t * st), -127, 127).to(torch.int8)
    q, s = kernels.quantize_rows(x)
    assert q.dtype == np.int8 and s.dtype == np.dtype(dtype) and s.shape == (x.shape[0], 1)
    np.testing.assert_array_equal(q, qt.numpy())
    assert same_bits_or_both_nan(s, st.float().numpy())


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
def test_quantize_rows_layouts_and_levels(dtype, rng):
    x = (rng.standard_normal((3, 4, 200)) * 5).astype(np.float32).astype(dtype)
    want_q, want_s = at_level("generic", kernels.quantize_rows, x)
    for level in kernels.available_isas():
        q, s = at_level(level, kernels.quantize_rows, x)
        np.testing.assert_array_equal(q, want_q)
        np.testing.assert_array_equal(s.view(np.uint8), want_s.view(np.uint8))
    xt = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)   # strided rows
    q, s = kernels.quantize_rows(xt)
    np.testing.assert_array_equal(q, want_q)
    out = np.zeros((3, 4, 400), np.int8)[..., ::2]
    sout = np.zeros((3, 4, 2), dtype)[..., :1]
    q, s = kernels.quantize_rows(x, out=out, scale_out=sout)
    assert q is out and s is sout
    np.testing.assert_array_equal(out, want_q)
    np.testing.assert_array_equal(sout.view(np.uint8), want_s.view(np.uint8))
    q, s = kernels.quantize_rows(x[0, 0])                # 1-D: one row
    np.testing.assert_array_equal(q, want_q[0, 0])
    assert s.shape == (1,)
    q, s = kernels.quantize_rows(np.zeros((2, 0), dtype))
    assert q.shape == (2, 0) and s.shape == (2, 1)


def test_quantize_rows_float32_numpy(isa_level, rng):
    x = (rng.standard_normal((64, 513)) * 10.0 ** rng.integers(-8, 8, (64, 1))).astype(np.float32)
    s = np.float32(127) / (np.abs(x).max(axis=-1, keepdims=True) + np.float32(1e-7))
    q = np.clip(np.round(x * s), -127, 127).astype(np.int8)
    gq, gs = kernels.quantize_rows(x)
    np.testing.assert_array_equal(gq, q)
    np.testing.assert_array_equal(gs, s)


# --- errors ---------------------------------------------------------------------------------------

def test_matmul_int8_errors(rng):
    a, b = i8(rng, (4, 8)), i8(rng, (8, 5))
    sa, sb = np.ones((4, 1), np.float32), np.ones(5, np.float32)
    mm = kernels.matmul_int8
    with pytest.raises(TypeError, match="matmul_int8: a must be int8, got float32"):
        mm(a.astype(np.float32), b)
    with pytest.raises(TypeError, match="b must be int8, got int16"):
        mm(a, b.astype(np.int16))
    with pytest.raises(TypeError, match="PackedMatrix of bfloat16"):
        mm(a, kernels.pack(b.astype(BF16)))
    with pytest.raises(TypeError, match="only b may be"):
        mm(kernels.pack(b), b)
    with pytest.raises(ValueError, match=r"inner dimensions differ: \(4, 8\) @ \(7, 5\)"):
        mm(a, b[:7])
    with pytest.raises(ValueError, match="a must have shape"):
        mm(a[0], b)
    with pytest.raises(ValueError, match="b must be 2-D"):
        mm(a, b[None])
    with pytest.raises(ValueError, match="a_scale and b_scale go together"):
        mm(a, b, a_scale=sa)
    with pytest.raises(ValueError, match=r"a_scale has shape \(3, 1\)|a_scale has shape \(3,\)"):
        mm(a, b, a_scale=np.ones((3, 1), np.float32), b_scale=sb)
    with pytest.raises(ValueError, match=r"b_scale has shape \(4,\), expected \(5,\)"):
        mm(a, b, a_scale=sa, b_scale=np.ones(4, np.float32))
    with pytest.raises(TypeError, match="unsupported dtype float64 for b_scale"):
        mm(a, b, a_scale=sa, b_scale=np.ones(5))
    with pytest.raises(TypeError, match="a_scale must be a numpy.ndarray"):
        mm(a, b, a_scale=1.0, b_scale=sb)
    with pytest.raises(ValueError, match=r"bias has shape \(4,\)"):
        mm(a, b, a_scale=sa, b_scale=sb, bias=np.ones(4, np.float32))
    with pytest.raises(ValueError, match="bias and activation apply to the scaled product"):
        mm(a, b, bias=np.ones(5, np.float32))
    with pytest.raises(ValueError, match="bias and activation apply"):
        mm(a, b, activation="relu")
    with pytest.raises(ValueError, match="unknown activation 'nope'"):
        mm(a, b, a_scale=sa, b_scale=sb, activation="nope")
    with pytest.raises(ValueError, match="out dtype float32 needs a_scale"):
        mm(a, b, out_dtype=np.float32)
    with pytest.raises(TypeError, match="unsupported out dtype int32 with scales"):
        mm(a, b, a_scale=sa, b_scale=sb, out_dtype=np.int32)
    with pytest.raises(ValueError, match=r"k = 131072 is above 131071"):
        mm(np.zeros((1, MAX_K + 1), np.int8), np.zeros((MAX_K + 1, 1), np.int8))
    with pytest.raises(ValueError, match=r"at most 131071 rows"):
        kernels.pack(np.zeros((MAX_K + 1, 1), np.int8))
    with pytest.raises(ValueError, match=r"out has shape \(4, 4\), expected \(4, 5\)"):
        mm(a, b, out=np.zeros((4, 4), np.int32))
    with pytest.raises(ValueError, match="out has dtype int64, expected int32"):
        mm(a, b, out_dtype="int32", out=np.zeros((4, 5), np.int64))
    with pytest.raises(ValueError, match="out is read-only"):
        o = np.zeros((4, 5), np.int32)
        o.flags.writeable = False
        mm(a, b, out=o)
    with pytest.raises(ValueError, match="overlaps"):
        buf = np.zeros(40, np.int32)
        mm(a, b, a_scale=sa, b_scale=sb, out=buf[:20].view(np.float32).reshape(4, 5),
           bias=buf[18:23].view(np.float32))
    with pytest.raises(TypeError, match="int8 PackedMatrix; int8 products are"):
        kernels.matmul(a.astype(np.float32), kernels.pack(b))
    with pytest.raises(TypeError, match="dtype int8 needs an int8 b"):
        kernels.pack(b.astype(np.float32), dtype="int8")


def test_packed_of_another_level(rng):
    levels = kernels.available_isas()
    if "avx512" not in levels:
        pytest.skip("needs an AVX-512 level and a level below it")
    a, b = i8(rng, (3, 20)), i8(rng, (20, 7))
    pb = at_level("avx2", kernels.pack, b)
    with pytest.raises(ValueError, match="packed at level 'avx2' in panels of 16 columns"):
        at_level("avx512", kernels.matmul_int8, a, pb)
    # same panel width: accepted, same bits
    pb = at_level("avx512", kernels.pack, b)
    for level in [lvl for lvl in levels if lvl.startswith("avx512")]:
        np.testing.assert_array_equal(at_level(level, kernels.matmul_int8, a, pb), ref(a, b))


def test_quantize_rows_errors():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(TypeError, match="quantize_rows: unsupported dtype float64 for x"):
        kernels.quantize_rows(np.ones((3, 4)))
    with pytest.raises(TypeError, match="x must be a numpy.ndarray"):
        kernels.quantize_rows([1.0, 2.0])
    with pytest.raises(ValueError, match="x is 0-d"):
        kernels.quantize_rows(np.array(1.0, np.float32))
    with pytest.raises(ValueError, match=r"out has shape \(3, 3\), expected \(3, 4\)"):
        kernels.quantize_rows(x, out=np.zeros((3, 3), np.int8))
    with pytest.raises(ValueError, match="out has dtype uint8, expected int8"):
        kernels.quantize_rows(x, out=np.zeros((3, 4), np.uint8))
    with pytest.raises(ValueError, match=r"scale_out has shape \(3,\), expected \(3, 1\)"):
        kernels.quantize_rows(x, scale_out=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="scale_out has dtype bfloat16, expected float32"):
        kernels.quantize_rows(x, scale_out=np.zeros((3, 1), BF16))
    with pytest.raises(ValueError, match="overlaps"):
        kernels.quantize_rows(x, out=x.view(np.int8)[:, :4])
