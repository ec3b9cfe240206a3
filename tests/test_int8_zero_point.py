"""int8 activations with zero points: ``kernels.quantize_rows(x, zero_point=True)`` (min-max
codes) against ``quantizers.min_max_quantize`` at every level, ``matmul_int8(..., a_zero=)``
exact against int64 numpy at every level and thread count, the layers and the plan with a
``MinMaxQuantizer`` config, and the errors."""
import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels, layers, models, quantizers
from levels import at_level
from test_int8_gemm import i8, scaled_ref, special_rows

BF16 = np.dtype(ml_dtypes.bfloat16)
MAX_K_ZP = 65793


@pytest.fixture
def rng():
    return np.random.default_rng(4321)


def zp_ref(a, b, zero):
    """(a - zero) @ b in int64."""
    return np.matmul(a.astype(np.int64) - np.asarray(zero, np.int64).reshape(
        a.shape[:-1] + (1,)), b.astype(np.int64))


def same_scales(got, want):
    g, w = got.astype(np.float32), want.astype(np.float32)
    return np.all((g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w)))


# --- quantize_rows(zero_point=True) ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
def test_min_max_codes_are_the_numpy_formula(isa_level, dtype, rng):
    x = np.concatenate([special_rows(dtype, rng),
                        (rng.standard_normal((40, 37)) * 10.0 ** rng.integers(-6, 4, (40, 1)))
                        .astype(np.float32).astype(dtype),
                        np.abs(rng.standard_normal((5, 37))).astype(dtype),        # one sign
                        -np.abs(rng.standard_normal((5, 37))).astype(dtype)])
    q, s, z = kernels.quantize_rows(x, zero_point=True)
    assert q.dtype == np.int8 and s.dtype == np.float32 and z.dtype == np.int32
    assert s.shape == z.shape == (x.shape[0], 1)
    wq, ws, wz = quantizers.min_max_quantize(x)
    np.testing.assert_array_equal(q, wq)
    np.testing.assert_array_equal(z, wz)
    assert same_scales(s, ws)
    # what the codes mean: x ~ (q - z) / s within half a step, 0 exactly z, the range used
    x32 = x.astype(np.float64)
    finite = np.isfinite(x32).all(axis=1)
    assert np.isnan(s[~finite]).all() and (q[~finite] == 0).all() and (z[~finite] == 0).all()
    xf, qf, sf, zf = x32[finite], q[finite].astype(np.float64), s[finite], z[finite]
    step = 1 / sf.astype(np.float64)
    err = np.abs((qf - zf) * step - xf)
    inner = (qf > -128) & (qf < 127)          # a clipped end code may be a step away
    assert (err <= step * (1 + 1e-5)).all()
    assert (err <= 0.5 * step * (1 + 1e-4) + 0 * qf)[inner].all()
    assert ((-128 <= zf) & (zf <= 127)).all()
    ranged = np.ptp(xf, axis=1) > 0
    assert ((qf.min(axis=1) == -128) | (qf.max(axis=1) == 127))[ranged].all()


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
def test_min_max_codes_layouts_and_levels(dtype, rng):
    x = (rng.standard_normal((3, 4, 1000)) * 5 + 2).astype(np.float32).astype(dtype)
    x[1, 2, 17] = np.nan
    want = at_level("generic", kernels.quantize_rows, x, zero_point=True)
    for level in kernels.available_isas():
        got = at_level(level, kernels.quantize_rows, x, zero_point=True)
        np.testing.assert_array_equal(got[0], want[0])
        assert same_scales(got[1], want[1])
        np.testing.assert_array_equal(got[2], want[2])
    xt = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)   # strided rows
    got = kernels.quantize_rows(xt, zero_point=True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[2], want[2])
    out = np.zeros((3, 4, 2000), np.int8)[..., ::2]
    sout = np.zeros((3, 4, 2), np.float32)[..., :1]
    zout = np.zeros((3, 4, 1), np.int32)
    q, s, z = kernels.quantize_rows(x, zero_point=True, out=out, scale_out=sout, zero_out=zout)
    assert q is out and s is sout and z is zout
    np.testing.assert_array_equal(out, want[0])
    assert same_scales(sout, want[1])
    np.testing.assert_array_equal(zout, want[2])
    q, s, z = kernels.quantize_rows(x[0, 0], zero_point=True)          # 1-D: one row
    np.testing.assert_array_equal(q, want[0][0, 0])
    assert s.shape == z.shape == (1,)
    q, s, z = kernels.quantize_rows(np.zeros((2, 0), dtype), zero_point=True)
    assert q.shape == (2, 0) and s.shape == z.shape == (2, 1) and (z == -128).all()


def test_min_max_quantize_over_other_axes(rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    q, s, z = quantizers.min_max_quantize(x, axis=0)
    wq, ws, wz = quantizers.min_max_quantize(x.T, axis=-1)
    np.testing.assert_array_equal(q, wq.T)
    np.testing.assert_array_equal(s, ws.T)
    np.testing.assert_array_equal(z, wz.T)
    assert s.shape == (1, 5)


# --- matmul_int8(a_zero=) -------------------------------------------------------------------------

SHAPES = [(1, 1, 1), (1, 7, 5), (1, 300, 130), (2, 3, 2), (6, 8, 32), (15, 129, 65),
          (29, 255, 97), (64, 300, 70), (130, 1030, 257), (1, 4100, 130), (20, 5000, 33)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_products_with_zero_points_are_exact(isa_level, m, k, n, rng):
    a, b = i8(rng, (m, k)), i8(rng, (k, n))
    zero = rng.integers(-128, 128, (m, 1)).astype(np.int32)
    want = zp_ref(a, b, zero)
    got = kernels.matmul_int8(a, b, a_zero=zero)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(kernels.matmul_int8(a, kernels.pack(b), a_zero=zero[:, 0]),
                                  want)


@pytest.mark.parametrize("out_dtype", [np.float32, BF16, np.float16])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_scaled_products_with_zero_points(isa_level, out_dtype, activation, rng):
    m, k, n = 37, 700, 45
    x = (rng.standard_normal((m, k)) + 1).astype(np.float32)
    q, s, z = kernels.quantize_rows(x, zero_point=True)
    b = i8(rng, (k, n))
    b_scale = rng.uniform(20, 60, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    got = kernels.matmul_int8(q, kernels.pack(b), a_scale=s, b_scale=b_scale, a_zero=z,
                              bias=bias, activation=activation, out_dtype=out_dtype)
    want = scaled_ref(zp_ref(q, b, z), s, b_scale, bias, activation, out_dtype)
    assert got.dtype == np.dtype(out_dtype)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("threads", [1, 2])
def test_zero_points_threads_batches_and_levels_identical(threads, rng):
    a, b = i8(rng, (2, 3, 90, 600)), i8(rng, (600, 300))
    zero = rng.integers(-128, 128, (2, 3, 90, 1)).astype(np.int32)
    sa = rng.uniform(0.5, 2, (2, 3, 90, 1)).astype(np.float32)
    sb = rng.uniform(0.5, 2, 300).astype(np.float32)
    want = zp_ref(a, b, zero)
    previous = kernels.get_num_threads()
    kernels.set_num_threads(threads)
    try:
        for level in kernels.available_isas():
            got = at_level(level, kernels.matmul_int8, a, b, a_zero=zero)
            np.testing.assert_array_equal(got, want)
            f = at_level(level, kernels.matmul_int8, a, b, a_scale=sa, b_scale=sb, a_zero=zero)
            np.testing.assert_array_equal(f, scaled_ref(want, sa, sb))
    finally:
        kernels.set_num_threads(previous)
    one = kernels.matmul_int8(a[0, 0, :1], b, a_zero=zero[0, 0, :1])        # the batch-1 path
    np.testing.assert_array_equal(one, want[0, 0, :1])


def test_zero_points_at_the_largest_k(isa_level):
    """(a - z) = -255 or 255 at every k up to MAX_K_ZP: the largest sums, exact."""
    k = MAX_K_ZP
    a = np.concatenate([np.full((1, k), -128, np.int8), np.full((1, k), 127, np.int8)])
    zero = np.array([127, -128], np.int32)
    b = np.stack([np.full(k, -128, np.int8), np.full(k, 127, np.int8)], axis=1)
    got = kernels.matmul_int8(a, kernels.pack(b), a_zero=zero)
    np.testing.assert_array_equal(got, zp_ref(a, b, zero))
    assert got[0, 0] == 255 * 128 * k


def test_zero_point_errors(rng):
    a, b = i8(rng, (4, 8)), i8(rng, (8, 3))
    with pytest.raises(TypeError, match=r"matmul_int8: a_zero must be a numpy.ndarray, got list"):
        kernels.matmul_int8(a, b, a_zero=[0, 0, 0, 0])
    with pytest.raises(TypeError, match=r"matmul_int8: a_zero must have an integer dtype, got "
                                        r"float32"):
        kernels.matmul_int8(a, b, a_zero=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"matmul_int8: a_zero has shape \(3,\), expected "
                                         r"\(4,\)"):
        kernels.matmul_int8(a, b, a_zero=np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"matmul_int8: a_zero holds values outside \[-128, "
                                         r"127\] \(the zero points of int8 codes\), such as "
                                         r"\[128, -129\]"):
        kernels.matmul_int8(a, b, a_zero=np.array([0, 128, -129, 5]))
    big = np.zeros((1, MAX_K_ZP + 1), np.int8)
    kernels.matmul_int8(big, np.zeros((MAX_K_ZP + 1, 1), np.int8))     # fine without
    with pytest.raises(ValueError, match=r"matmul_int8: k = 65794 is above 65793, the largest k "
                                         r"whose int32 sums cannot overflow for int8 inputs "
                                         r"with zero points"):
        kernels.matmul_int8(big, np.zeros((MAX_K_ZP + 1, 1), np.int8), a_zero=np.zeros(1, int))
    x = np.ones((2, 5), np.float32)
    with pytest.raises(TypeError, match=r"quantize_rows: zero_point must be a bool, got int: 1"):
        kernels.quantize_rows(x, zero_point=1)
    with pytest.raises(ValueError, match=r"quantize_rows: zero_out is for zero_point=True"):
        kernels.quantize_rows(x, zero_out=np.zeros((2, 1), np.int32))
    with pytest.raises((TypeError, ValueError), match=r"quantize_rows: zero_out"):
        kernels.quantize_rows(x, zero_point=True, zero_out=np.zeros((2, 1), np.int64))
    with pytest.raises((TypeError, ValueError), match=r"quantize_rows: scale_out"):
        kernels.quantize_rows(x.astype(BF16), zero_point=True,
                              scale_out=np.zeros((2, 1), BF16))      # float32 with zero points
    with pytest.raises(TypeError, match=r"min_max_quantize: inputs must be a floating array"):
        quantizers.min_max_quantize(np.ones(3, np.int32))
    with pytest.raises(ValueError, match=r"min_max_quantize: axis 2 is out of range"):
        quantizers.min_max_quantize(x, axis=2)


# --- the quantizer, the layers and the plan -------------------------------------------------------

def test_min_max_quantizer_config():
    mm = quantizers.MinMaxQuantizer()
    config = quantizers.Int8QuantizationConfig(activation_quantizer=mm)
    again = quantizers.Int8QuantizationConfig.from_config(config.get_config())
    assert again == config and isinstance(again.activation_quantizer, quantizers.MinMaxQuantizer)
    entry = config.get_config()["activation_quantizer"]
    assert entry["module"] == "mixedcore.quantizers" and entry["class_name"] == "MinMaxQuantizer"
    assert config != quantizers.Int8QuantizationConfig()
    with pytest.raises(ValueError, match=r"MinMaxQuantizer: axis must be -1 \(each row over the "
                                         r"last axis, as the layers quantize their inputs\), "
                                         r"got 0"):
        quantizers.MinMaxQuantizer(axis=0)
    with pytest.raises(ValueError, match=r"MinMaxQuantizer: output_dtype must be 'int8', got "
                                         r"'int16'"):
        quantizers.MinMaxQuantizer(output_dtype="int16")


def _encoder_block(rng, width=48, heads=4, ffn=96):
    """A small transformer block: the products an int8 config quantizes (MultiHeadAttention's
    projections, two Dense) after layer normalizations, as the plan lowers them."""
    inp = layers.Input((10, width))
    x = layers.LayerNormalization()(inp)
    a = layers.MultiHeadAttention(heads, width // heads)(x, x)
    x = layers.LayerNormalization()(layers.Add()([inp, a]))
    h = layers.Dense(ffn, activation="gelu")(x)
    h = layers.Dense(width)(h)
    model = models.Model(inp, layers.Add()([x, h]))
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.2
                       for w in model.get_weights()])
    return model


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_min_max_activations_in_layers_and_plan(isa_level, policy, rng, tmp_path):
    model = _encoder_block(rng)
    x = rng.standard_normal((3, 10, 48)).astype(np.float32)
    ref = model.predict_on_batch(x)
    path = tmp_path / "block.keras"
    model.save(path)
    results = {}
    for name, config in (("absmax", None), ("minmax", quantizers.Int8QuantizationConfig(
            activation_quantizer=quantizers.MinMaxQuantizer()))):
        m = models.load_model(path, dtype_policy=policy)
        m.quantize("int8", config=config)
        first = m.predict_on_batch(x)           # the layers one by one
        second = m.predict_on_batch(x)          # the plan
        np.testing.assert_array_equal(first.view(np.uint8), second.view(np.uint8))
        results[name] = np.asarray(first, np.float64)
        if name == "minmax":
            # a Keras file keeps only the policy of MultiHeadAttention's projections
            with pytest.raises(ValueError, match=r"the query projection was quantized with "
                                                 r"Int8QuantizationConfig.*MinMaxQuantizer"):
                m.save(tmp_path / "minmax.keras")
            assert not (tmp_path / "minmax.keras").exists()
    assert not np.array_equal(results["absmax"], results["minmax"])
    err = {k: np.sqrt(np.mean((v - ref) ** 2)) for k, v in results.items()}
    bound = 0.05 * np.sqrt(np.mean(np.asarray(ref, np.float64) ** 2))
    assert err["minmax"] < bound and err["absmax"] < bound


def test_a_dense_with_min_max_activations_saves_and_loads(rng, tmp_path):
    inp = layers.Input((32,))
    model = models.Model(inp, layers.Dense(8)(layers.Dense(16, activation="relu")(inp)))
    model.quantize("int8", config=quantizers.Int8QuantizationConfig(
        activation_quantizer=quantizers.MinMaxQuantizer()))
    x = rng.standard_normal((5, 32)).astype(np.float32)
    want = model.predict_on_batch(x)
    model.save(tmp_path / "m.keras")
    back = models.load_model(tmp_path / "m.keras")
    config = back.layers[-1].quantization_config
    assert isinstance(config.activation_quantizer, quantizers.MinMaxQuantizer)
    np.testing.assert_array_equal(back.predict_on_batch(x), want)
    plain = models.Model.from_config(model.get_config())
    plain.set_weights(model.get_weights())
    assert np.array_equal(plain.predict_on_batch(x), want)


def test_min_max_activations_halve_the_error_of_one_signed_rows(rng):
    """Inputs after a relu use only half of the symmetric codes; min-max codes use all of
    them, so the product's error is about half (the weights are integers up to 127 in every
    column, which int8 holds exactly)."""
    x = np.maximum(rng.standard_normal((256, 512)), 0).astype(np.float32)
    w = rng.integers(-127, 128, (512, 64)).astype(np.float32)
    w[0] = 127
    exact = x.astype(np.float64) @ w
    errors = []
    for config in (None, quantizers.Int8QuantizationConfig(
            activation_quantizer=quantizers.MinMaxQuantizer())):
        d = layers.Dense(64, use_bias=False)
        d(x[:1])
        d.set_weights([w])
        d.quantize("int8", config=config)
        errors.append(np.sqrt(np.mean((np.asarray(d(x), np.float64) - exact) ** 2)))
    assert errors[1] < 0.75 * errors[0]


def test_per_channel_int4_with_min_max_activations(rng):
    """int4 per channel with an activation quantizer multiplies int8 codes too: with a
    MinMaxQuantizer, the zero-point product of its unpacked weights."""
    x = rng.standard_normal((7, 40)).astype(np.float32) + 0.5
    d = layers.Dense(24)
    d(x[:1])
    d.set_weights([rng.standard_normal((40, 24)).astype(np.float32),
                   rng.standard_normal(24).astype(np.float32)])
    d.quantize("int4", config=quantizers.Int4QuantizationConfig(
        block_size=-1, activation_quantizer=quantizers.MinMaxQuantizer()))
    q, s, z = kernels.quantize_rows(x, zero_point=True)
    kernel = quantizers.unpack_int4(d._weight("kernel"), 24, axis=-1)
    scale, bias = d._weight("kernel_scale"), d._weight("bias")
    want = kernels.matmul_int8(q, kernel, a_scale=s, b_scale=np.asarray(scale, np.float32),
                               a_zero=z, bias=np.asarray(bias, np.float32))
    np.testing.assert_array_equal(np.asarray(d(x)), want)


def test_an_activation_quantizer_of_its_own_range_is_followed(rng):
    """An AbsMaxQuantizer with another value range and epsilon quantizes the inputs as it says
    (Keras calls it over the last axis), in the layers and in the plan (which leaves such a
    product to the layer's call)."""
    inp = layers.Input((24,))
    model = models.Model(inp, layers.Dense(6)(layers.Dense(12, activation="relu")(inp)))
    mine = quantizers.AbsMaxQuantizer(axis=-1, value_range=(-100, 100), epsilon=1e-3)
    model.quantize("int8", config=quantizers.Int8QuantizationConfig(activation_quantizer=mine))
    x = rng.standard_normal((5, 24)).astype(np.float32)
    first, second = model.predict_on_batch(x), model.predict_on_batch(x)
    np.testing.assert_array_equal(first, second)
    h = x
    for layer in model.layers[1:]:
        q, s = quantizers.abs_max_quantize(h, -1, (-100, 100), "int8", 1e-3)
        h = kernels.matmul_int8(q, layer._weight("kernel"), a_scale=s,
                                b_scale=layer._weight("kernel_scale"), bias=layer._weight("bias"),
                                activation=None if layer.activation == "linear"
                                else layer.activation)
    np.testing.assert_array_equal(first, h)


def test_quantizers_a_config_refuses():
    with pytest.raises(ValueError, match=r"Int8QuantizationConfig: MinMaxQuantizer quantizes "
                                         r"activations"):
        quantizers.Int8QuantizationConfig(weight_quantizer=quantizers.MinMaxQuantizer())
    with pytest.raises(ValueError, match=r"Int8QuantizationConfig: the activation_quantizer's "
                                         r"codes feed an int8 product, so its value_range must "
                                         r"lie within \[-128, 127\]; got \(-1000, 1000\)"):
        quantizers.Int8QuantizationConfig(activation_quantizer=quantizers.AbsMaxQuantizer(
            value_range=(-1000, 1000), output_dtype="int16"))
