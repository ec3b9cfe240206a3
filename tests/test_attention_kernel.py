"""kernels.attention: the fused kernel against the unfused computation it replaces (matmul,
softmax, matmul), bit for bit where the GEMM sums in the same order; the same bits at every ISA
level and thread count; masks, strides, special values, errors; MultiHeadAttention inference
(the fused kernel) against its batched-GEMM path."""
import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels, layers

from levels import at_level

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
LEVELS = kernels.available_isas()


@pytest.fixture
def rng():
    return np.random.default_rng(5)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def assert_same(got, want):
    """Bit equality, NaNs compared as NaNs."""
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape
    nan_g, nan_w = np.isnan(g.astype(np.float32)), np.isnan(w.astype(np.float32))
    np.testing.assert_array_equal(nan_g, nan_w)
    gb, wb = bits(np.where(nan_g, 0, g).astype(g.dtype)), bits(np.where(nan_w, 0, w).astype(w.dtype))
    bad = np.flatnonzero(gb.ravel() != wb.ravel())
    assert bad.size == 0, f"{bad.size} of {gb.size} differ, first at {bad[:5]}"


def gemm_order_matches(level, dtype):
    """Where the GEMM sums as the fused kernel does (docs/layers.md): bfloat16 through VDPBF16PS
    at avx512bf16; float16 at every level (exact products); float32 where it uses FMA."""
    if dtype == BF16:
        return level == "avx512bf16"
    if dtype == F32:
        return level != "generic"
    return True


def unfused(q, k, v, scale, mask=None, causal=False, out_dtype=None):
    """The computation the kernel fuses, as MultiHeadAttention's batched-GEMM path does it."""
    cd = q.dtype
    sc = kernels.matmul(q, k.transpose(0, 1, 3, 2), alpha=scale)
    t, s = sc.shape[-2:]
    m = None if mask is None else np.broadcast_to(mask, sc.shape)
    if causal:
        band = np.arange(t)[:, None] >= np.arange(s)[None, :]
        m = band if m is None else m & band
    if m is not None:
        sc = np.where(m, sc, np.float32(-1e9))
    p = kernels.softmax(sc, -1, out_dtype=cd)       # 16-bit inputs: the float32 softmax
    if m is not None:
        p = np.where(m, p, cd.type(0))
    return kernels.matmul(p, v, out_dtype=out_dtype or cd)


def operands(rng, dtype, b, t, s, h, d, dv, spread=1.0):
    """Views (B, H, T, D) of (B, T, H, D) arrays, as the layer passes them."""
    q = (rng.standard_normal((b, t, h, d)) * spread).astype(dtype).transpose(0, 2, 1, 3)
    k = (rng.standard_normal((b, s, h, d)) * spread).astype(dtype).transpose(0, 2, 1, 3)
    v = rng.standard_normal((b, s, h, dv)).astype(dtype).transpose(0, 2, 1, 3)
    return q, k, v


SHAPES = [(2, 5, 7, 3, 4, 5), (2, 64, 64, 4, 32, 32), (1, 17, 33, 2, 9, 19), (1, 3, 70, 1, 3, 70),
          (1, 1, 1, 1, 1, 1), (3, 6, 16, 2, 16, 48)]


@pytest.mark.parametrize("dtype", [BF16, F16, F32])
@pytest.mark.parametrize("shape", SHAPES)
def test_equals_the_unfused_computation(isa_level, dtype, shape, rng):
    b, t, s, h, d, dv = shape
    q, k, v = operands(rng, dtype, *shape, spread=2.0)
    scale = 1 / np.sqrt(d)
    masks = [None, rng.random((b, 1, t, s)) > 0.3, rng.random((1, h, 1, s)) > 0.5,
             np.ones((t, s), bool)]
    for mask in masks:
        for causal in (False, True):
            for out_dtype in (None, "float32"):
                got = kernels.attention(q, k, v, scale=scale, mask=mask, causal=causal,
                                        out_dtype=out_dtype)
                want = unfused(q, k, v, scale, mask, causal, out_dtype)
                if gemm_order_matches(isa_level, dtype):
                    assert_same(got, want)
                else:
                    # the GEMM adds the products in another order: both within its bound
                    tol = 2 * (d + s) * 2.0 ** -24 * 64 + (2.0 ** -8 if out_dtype is None
                                                            and dtype != F32 else 0)
                    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                               rtol=0.02 if dtype != F32 else 1e-5, atol=tol)


@pytest.mark.parametrize("dtype", [BF16, F16, F32])
def test_same_bits_at_every_level_and_thread_count(dtype, rng):
    q, k, v = operands(rng, dtype, 3, 19, 45, 2, 13, 21, spread=3.0)
    mask = rng.random((3, 1, 19, 45)) > 0.2
    first = at_level("generic", kernels.attention, q, k, v, scale=0.3, mask=mask, causal=True,
                     out_dtype="float32")
    for level in LEVELS:
        for threads in (1, 2):
            with kernels.threads(threads):
                got = at_level(level, kernels.attention, q, k, v, scale=0.3, mask=mask,
                               causal=True, out_dtype="float32")
            assert_same(got, first)


def test_bfloat16_subnormals_take_the_fma_path(rng):
    """VDPBF16PS reads subnormal bfloat16 as zero (docs/layers.md): a head whose Q, K or V holds
    one, and rows whose rounded probabilities hold one (scores more than about 88 below the
    row's maximum), are computed on FMAs, so every level still gives the twin's bits."""
    q, k, v = operands(rng, BF16, 4, 9, 40, 3, 17, 33)
    k = k.copy()
    k[1, 2, 5, 3] = BF16.type(3e-39)                 # one subnormal key element
    v = v.copy()
    v[2, 0, 7, 1] = BF16.type(-2e-39)                # one subnormal value element
    q = q.copy()
    q[0, 1, 4, 0] = BF16.type(1e-39)
    # large scores in some rows: probabilities near exp(-100) round to subnormal bfloat16
    q[3] = (q[3].astype(np.float32) * 9).astype(BF16)
    first = at_level("generic", kernels.attention, q, k, v, scale=1.0, out_dtype="float32")
    for level in LEVELS:
        got = at_level(level, kernels.attention, q, k, v, scale=1.0, out_dtype="float32")
        assert_same(got, first)
    p = at_level("generic", kernels.softmax,
                 kernels.matmul(q[3], k[3].transpose(0, 2, 1)), -1, out_dtype=BF16)
    tiny = np.count_nonzero((np.abs(p.astype(np.float32)) < 2.0 ** -126) & (p != 0))
    assert tiny > 0                                  # the case is exercised


@pytest.mark.parametrize("dtype", [BF16, F32])
def test_long_rows_are_summed_in_the_gemm_blocks(dtype, rng):
    """S beyond the GEMM's KC (2048 bfloat16 pairs, 1024 float32): block partial sums."""
    level = "avx512bf16" if dtype == BF16 else "avx512"
    if level not in LEVELS:
        pytest.skip(f"no {level} level here")
    q, k, v = operands(rng, dtype, 1, 3, 2100, 1, 8, 20)
    v = (v.astype(np.float32) * 30).astype(dtype)   # stays in dtype with any ml_dtypes
    got = at_level("generic", kernels.attention, q, k, v, scale=0.01, out_dtype="float32")
    want = at_level(level, unfused, q, k, v, 0.01, out_dtype="float32")
    assert_same(got, want)


def test_strided_mask_and_out_views(rng):
    q, k, v = operands(rng, BF16, 2, 9, 11, 3, 8, 6)
    full = rng.random((2, 3, 11, 9)) > 0.4
    mask = full.transpose(0, 1, 3, 2)                     # non-contiguous
    out = np.zeros((2, 9, 3, 6), BF16)
    res = kernels.attention(q, k, v, scale=0.5, mask=mask, out=out.transpose(0, 2, 1, 3))
    assert res.base is out or np.shares_memory(res, out)
    want = kernels.attention(q, k, v, scale=0.5, mask=np.ascontiguousarray(mask))
    assert_same(out.transpose(0, 2, 1, 3), want)
    # reversed and byte-swapped inputs
    qr = q[:, :, ::-1]
    got = kernels.attention(qr, k, v, scale=0.5)
    assert_same(got, kernels.attention(np.ascontiguousarray(qr), k, v, scale=0.5))
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    swapped = kernels.attention(q32.astype(">f4"), k32, v32, scale=0.5)
    assert_same(swapped, kernels.attention(q32, k32, v32, scale=0.5))


def test_fully_masked_rows_and_special_values(isa_level, rng):
    q, k, v = operands(rng, F16, 1, 4, 6, 1, 5, 3)
    mask = np.ones((4, 6), bool)
    mask[1] = False                               # a fully masked row: zero output
    got = kernels.attention(q, k, v, scale=1.0, mask=mask)
    assert_same(got, unfused(q, k, v, 1.0, mask))
    assert np.all(got[0, 0, 1] == 0)
    k2 = k.copy()
    k2[0, 0, 2, 0] = np.nan                       # a NaN key: NaN rows, masked entries still 0
    mask2 = np.ones((4, 6), bool)
    mask2[:, 2] = False
    assert_same(kernels.attention(q, k2, v, scale=1.0, mask=mask2),
                unfused(q, k2, v, 1.0, mask2))
    got = kernels.attention(q, k2, v, scale=1.0)
    assert np.isnan(got).all()
    v2 = v.copy()
    v2[0, 0, 3, 1] = np.inf                        # inf * 0 where masked is NaN, as in the GEMM
    assert_same(kernels.attention(q, k, v2, scale=1.0, mask=mask), unfused(q, k, v2, 1.0, mask))


def test_empty_and_out_dtype(rng):
    q, k, v = operands(rng, F16, 0, 3, 4, 2, 5, 6)
    assert kernels.attention(q, k, v, scale=1.0).shape == (0, 2, 3, 6)
    q, k, v = operands(rng, F16, 1, 3, 4, 2, 5, 6)
    got = kernels.attention(q, k, v, scale=0.25, out_dtype=BF16)
    assert got.dtype == BF16
    assert_same(got, unfused(q, k, v, 0.25, out_dtype=BF16))


def test_errors(rng):
    q, k, v = operands(rng, F32, 1, 3, 4, 2, 5, 6)
    with pytest.raises(TypeError, match="attention: q must be a numpy.ndarray"):
        kernels.attention(q.tolist(), k, v, scale=1.0)
    with pytest.raises(TypeError, match="unsupported q dtype float64"):
        kernels.attention(q.astype(np.float64), k, v, scale=1.0)
    with pytest.raises(TypeError, match="one dtype"):
        kernels.attention(q, k.astype(F16), v, scale=1.0)
    with pytest.raises(ValueError, match="4 dimensions"):
        kernels.attention(q[0], k, v, scale=1.0)
    with pytest.raises(ValueError, match="shapes do not agree"):
        kernels.attention(q, k[..., :4], v, scale=1.0)
    with pytest.raises(ValueError, match="shapes do not agree"):
        kernels.attention(q, k, v[:, :, :3], scale=1.0)
    with pytest.raises(TypeError, match="scale must be a real number"):
        kernels.attention(q, k, v, scale="1")
    with pytest.raises(ValueError, match="scale must be finite"):
        kernels.attention(q, k, v, scale=float("nan"))
    with pytest.raises(TypeError, match="causal must be a bool"):
        kernels.attention(q, k, v, scale=1.0, causal=1)
    with pytest.raises(TypeError, match="mask must have dtype bool"):
        kernels.attention(q, k, v, scale=1.0, mask=np.ones((3, 4)))
    with pytest.raises(TypeError, match="mask must be a numpy.ndarray"):
        kernels.attention(q, k, v, scale=1.0, mask=[[True]])
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) does not broadcast"):
        kernels.attention(q, k, v, scale=1.0, mask=np.ones((3, 5), bool))
    with pytest.raises(TypeError, match="unsupported out_dtype float64"):
        kernels.attention(q, k, v, scale=1.0, out_dtype="float64")
    with pytest.raises(ValueError, match="out has shape"):
        kernels.attention(q, k, v, scale=1.0, out=np.empty((1, 2, 3, 5), np.float32))
    with pytest.raises(ValueError, match="out has dtype"):
        kernels.attention(q, k, v, scale=1.0, out=np.empty((1, 2, 3, 6), F16),
                          out_dtype="float32")
    with pytest.raises(TypeError, match="unsupported out dtype float64"):
        kernels.attention(q, k, v, scale=1.0, out=np.empty((1, 2, 3, 6)))
    with pytest.raises(TypeError, match="out must be a numpy.ndarray"):
        kernels.attention(q, k, v, scale=1.0, out=[0])
    ro = np.empty((1, 2, 3, 6), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        kernels.attention(q, k, v, scale=1.0, out=ro)
    with pytest.raises(ValueError, match="overlaps"):
        big = np.zeros((1, 2, 4, 6), np.float32)
        kernels.attention(q, k, big, scale=1.0, out=big[:, :, :3])


# --- MultiHeadAttention: inference runs the fused kernel -------------------------------------

def _mha_cases(rng):
    b, t, s, d = 2, 7, 9, 12
    q = rng.normal(size=(b, t, d)).astype(np.float32)
    v = rng.normal(size=(b, s, d)).astype(np.float32)
    kk = rng.normal(size=(b, s, 10)).astype(np.float32)
    qm = rng.random((b, t)) > 0.2
    vm = rng.random((b, s)) > 0.3
    am = rng.random((b, t, s)) > 0.25
    return [
        (q, v, {}),
        (q, v, {"query_mask": qm, "value_mask": vm}),
        (q, v, {"use_causal_mask": True}),
        (q, v, {"attention_mask": am}),
        (q, v, {"attention_mask": am, "use_causal_mask": True, "value_mask": vm}),
        (q, v, {"key": kk, "key_mask": vm}),
        (q, q[:, :, :12], {"use_causal_mask": True, "query_mask": qm}),
    ]


@pytest.mark.parametrize("policy, dtype", [("mixed_bfloat16", BF16), ("mixed_float16", F16),
                                           ("float32", F32)])
def test_mha_inference_equals_the_batched_gemm_path(isa_level, policy, dtype, rng):
    """The scores path (return_attention_scores) still runs matmul, softmax, matmul; the
    output of a plain inference call is the same, bit for bit where the GEMM sums in the
    kernel's order."""
    for sliding in (None, 3):
        for q, v, kw in _mha_cases(rng):
            layer = layers.MultiHeadAttention(3, 8, value_dim=5, dtype=policy,
                                              sliding_window=sliding)
            y = layer(q, v, **kw)
            y_old, _ = layer(q, v, return_attention_scores=True, **kw)
            assert y.dtype == dtype
            if gemm_order_matches(isa_level, dtype):
                assert_same(y, y_old)
            else:
                np.testing.assert_allclose(y.astype(np.float64), y_old.astype(np.float64),
                                           rtol=0.05 if dtype != F32 else 1e-5,
                                           atol=0.05 if dtype != F32 else 1e-6)


def test_mha_training_path_unchanged(rng):
    layer = layers.MultiHeadAttention(2, 4)
    q = rng.normal(size=(2, 5, 6)).astype(np.float32)
    y_train = layer(q, q, training=True, use_causal_mask=True)
    y_old, _ = layer(q, q, return_attention_scores=True, use_causal_mask=True)
    assert_same(y_train, y_old)
    assert layer._train_cache is not None


def test_mha_inference_calls_the_fused_kernel(monkeypatch, rng):
    calls = []
    real = kernels.attention

    def spy(*args, **kw):
        calls.append(kw.get("causal"))
        return real(*args, **kw)
    monkeypatch.setattr(kernels, "attention", spy)
    layer = layers.MultiHeadAttention(2, 4, dtype="mixed_bfloat16")
    q = rng.normal(size=(2, 5, 6)).astype(np.float32)
    layer(q, q, use_causal_mask=True)
    assert calls == [True]
    layer(q, q, return_attention_scores=True)
    layer(q, q, training=True)
    assert calls == [True]
    with pytest.MonkeyPatch.context():
        layers.MultiHeadAttention(2, 4, dtype="float64")(q, q)
    assert calls == [True]
