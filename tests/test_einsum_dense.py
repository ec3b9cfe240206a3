"""EinsumDense against Keras 3: files both ways, predictions, weights, gradients, the errors, and
the quantized modes (docs/layers.md, docs/quantization.md)."""
import numpy as np
import pytest

from mixedcore import layers
from mixedcore import quantizers as q
from mixedcore.models import Model, load_model

from gradcheck import numeric_grad

RNG = np.random.default_rng(11)

# (equation, output_shape, bias_axes, input shape without the batch)
FORMS = [
    ("ab,bc->ac", (16,), "c", (12,)),
    ("...b,bc->...c", (16,), "c", (5, 12)),
    ("abc,cd->abd", (None, 16), "d", (5, 12)),
    ("abc,cde->abde", (None, 4, 8), "de", (5, 12)),
    ("abcd,cde->abe", (None, 16), "e", (5, 3, 4)),
    ("ab...,bc->ac...", (16,), "c", (12, 5)),
    ("abc,cd->abd", (5, 16), "bd", (5, 12)),         # a bias over an input axis
    ("abc,cde->abde", (None, 4, 8), None, (5, 12)),   # no bias
    ("abc,bcd->abd", (5, 16), "d", (5, 12)),         # a label in all three: not one GEMM
]
IDS = [f"{eq}-{bias}" for eq, _, bias, _ in FORMS]


def _ulp(x, dtype):
    top = float(np.abs(x).max())
    bits = {"float32": 23, "bfloat16": 7}[dtype]
    return 2.0 ** (np.floor(np.log2(top)) - bits) if top > 0 else 0.0


def _keras_model(keras, form, policy, activation="relu"):
    eq, out, bias, shape = form
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(4)
        inputs = keras.Input(shape)
        layer = keras.layers.EinsumDense(eq, out, bias_axes=bias, activation=activation)
        model = keras.Model(inputs, layer(inputs))
    finally:
        keras.config.set_dtype_policy("float32")
    if bias is not None:
        kernel, b = layer.get_weights()
        layer.set_weights([kernel, RNG.standard_normal(b.shape).astype(np.float32) * 0.2])
    return model


@pytest.mark.keras
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_keras_file_loads_predicts_and_goes_back(keras, tmp_path, policy, form):
    km = _keras_model(keras, form, policy)
    km.save(tmp_path / "k.keras")
    model = load_model(tmp_path / "k.keras")
    ours, theirs = model.layers[1], km.layers[1]
    assert [n.split("/")[-1] for n in ours.weight_names()] == \
        [w.path.split("/")[-1] for w in theirs.weights]
    for a, b in zip(model.get_weights(), km.get_weights()):
        assert a.shape == tuple(b.shape)
        np.testing.assert_array_equal(a, np.asarray(b))
    assert ours.get_config().keys() == theirs.get_config().keys()
    x = RNG.standard_normal((4,) + form[3]).astype(np.float32)
    ref = np.asarray(km.predict(x, verbose=0)).astype(np.float32)
    out = model.predict(x, verbose=0).astype(np.float32)
    assert out.shape == ref.shape
    cd = "float32" if policy == "float32" else "bfloat16"
    assert np.abs(out - ref).max() <= (4 * _ulp(ref, cd) if cd == "bfloat16" else 1e-5)
    # saved here, Keras loads it with the same weights and predictions
    model.save(tmp_path / "ours.keras")
    back = keras.models.load_model(tmp_path / "ours.keras")
    for a, b in zip(model.get_weights(), back.get_weights()):
        np.testing.assert_array_equal(a, np.asarray(b))
    np.testing.assert_array_equal(np.asarray(back.predict(x, verbose=0)),
                                  np.asarray(km.predict(x, verbose=0)))


def _reference(form, kernel, bias, x):
    eq, _, bias_axes, _ = form
    z = np.einsum(eq, x.astype(np.float64), kernel.astype(np.float64))
    return z if bias is None else z + bias


@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_float32_matches_float64_einsum(isa_level, form):
    eq, out, bias_axes, shape = form
    layer = layers.EinsumDense(eq, out, bias_axes=bias_axes)
    x = RNG.standard_normal((3,) + shape).astype(np.float32)
    y = layer(x)
    weights = layer.get_weights()
    bias = weights[1].astype(np.float64) + 0.5 if bias_axes else None
    if bias is not None:
        layer.set_weights([weights[0], bias])
        y = layer(x)
    ref = _reference(form, weights[0], bias, x)
    assert y.dtype == np.float32 and y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", ["linear", "tanh", "softmax"])
@pytest.mark.parametrize("form", FORMS, ids=IDS)
def test_gradients(isa_level, form, activation):
    eq, out, bias_axes, shape = form
    layer = layers.EinsumDense(eq, out, bias_axes=bias_axes, activation=activation,
                               dtype="float64")
    x = RNG.standard_normal((2,) + shape)
    layer.build_from_shape(x.shape)
    if bias_axes:
        layer.set_weights([layer.get_weights()[0],
                           RNG.standard_normal(layer.get_weights()[1].shape)])
    r = RNG.standard_normal(layer(x).shape)
    layer(x, training=True)
    dx = layer.backward(r)
    grads = layer.gradients
    assert len(grads) == len(layer.trainable_weights) == (2 if bias_axes else 1)

    def loss():
        return float(np.sum(layer(x) * r))

    np.testing.assert_allclose(dx, numeric_grad(loss, x), rtol=1e-6, atol=1e-7)
    for w, g in zip(layer.trainable_weights, grads):
        def loss_w():
            layer.weights_updated()
            return loss()
        np.testing.assert_allclose(g, numeric_grad(loss_w, w), rtol=1e-6, atol=1e-7)
        layer.weights_updated()
    # the float32 GEMM path gives the same gradients within float32 rounding
    l32 = layers.EinsumDense(eq, out, bias_axes=bias_axes, activation=activation)
    l32.build_from_shape(x.shape)
    l32.set_weights(layer.get_weights())
    x32 = x.astype(np.float32)
    y32 = l32(x32, training=True)
    np.testing.assert_array_equal(l32(x32), y32)      # inference: the same bits
    np.testing.assert_allclose(y32, layer(x), rtol=1e-4, atol=1e-5)
    dx32 = l32.backward(r.astype(np.float32))
    np.testing.assert_allclose(dx32, dx, rtol=1e-4, atol=1e-4)
    for g32, g in zip(l32.gradients, grads):
        np.testing.assert_allclose(g32, g, rtol=1e-4, atol=1e-4)


def test_bfloat16_rounds_once(isa_level):
    form = FORMS[3]
    eq, out, bias_axes, shape = form
    layer = layers.EinsumDense(eq, out, bias_axes=bias_axes, activation="gelu",
                               dtype="mixed_bfloat16")
    x = RNG.standard_normal((3,) + shape).astype(np.float32)
    y = layer(x)
    assert str(y.dtype) == "bfloat16"
    import ml_dtypes
    bf = np.dtype(ml_dtypes.bfloat16)
    k = layer.get_weights()[0].astype(bf).astype(np.float64)
    xb = x.astype(bf).astype(np.float64)
    z = np.einsum(eq, xb, k)
    from math import erf
    ref = z * 0.5 * (1 + np.vectorize(erf)(z / np.sqrt(2)))
    assert np.abs(y.astype(np.float64) - ref).max() <= 2 * _ulp(ref, "bfloat16")
    # training and inference agree bit for bit
    np.testing.assert_array_equal(layer(x, training=True).astype(np.float32),
                                  y.astype(np.float32))


BAD = [
    (dict(equation="ab,bc", output_shape=4), r"invalid equation 'ab,bc'"),
    (dict(equation=3, output_shape=4), "equation must be a str"),
    (dict(equation="ab,bd->ac", output_shape=4), r"output label 'c'"),
    (dict(equation="ab,bcx->ac", output_shape=4), r"kernel label 'x'"),
    (dict(equation="aab,bc->ac", output_shape=4), r"repeats a label"),
    (dict(equation="ab,bc->ac", output_shape=0), r"output_shape .* got \(0,\)"),
    (dict(equation="ab,bc->ac", output_shape="4"), r"output_shape .* got '4'"),
    (dict(equation="ab,bc->ac", output_shape=4, bias_axes="z"), r"bias axis 'z'.*'ac'"),
    (dict(equation="ab,bc->ac", output_shape=4, bias_axes=""), r"bias_axes .* got ''"),
    (dict(equation="ab,bc->ac", output_shape=4, kernel_constraint="non_neg"),
     "kernel_constraint"),
]


@pytest.mark.parametrize("kwargs,match", BAD)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        layers.EinsumDense(**kwargs)
    assert "EinsumDense" in str(info.value)


@pytest.mark.parametrize("eq,out,shape,match", [
    ("ab,bc->ac", (4, 5), (None, 3), r"output_shape \(4, 5\) must have 1 entries"),
    ("abc,cd->abd", (7, 4), (None, 5, 3), r"shared label 'b'.*has 5.*gives 7"),
    ("ab,bc->ac", (4,), (None, 3, 2), r"takes inputs of rank 2"),
    ("abc,cd->abd", (None, 4), (None, None, 3), None),
    ("abc,bcd->abd", (None, 4), (None, None, 3), r"kernel's axis 'b' needs a known size"),
])
def test_bad_shapes(eq, out, shape, match):
    layer = layers.EinsumDense(eq, out)
    if match is None:
        layer.build_from_shape(shape)
        assert layer(np.zeros((2, 7, 3), np.float32)).shape == (2, 7, 4)   # b is free
        with pytest.raises(ValueError, match=r"EinsumDense .* expected input of shape "
                                             r"\(None, None, 3\).*received \(2, 4, 5\)"):
            layer(np.zeros((2, 4, 5), np.float32))
        return
    with pytest.raises(ValueError, match=match) as info:
        layer.build_from_shape(shape)
    assert "EinsumDense" in str(info.value)


# --------------------------------------------------------------------------- quantized

QFORMS = [(eq, out, bias, shape) for eq, out, bias, shape in [
    ("ab,bc->ac", (16,), "c", (200,)),
    ("abc,cd->abd", (None, 16), "d", (5, 200)),
    ("abc,cde->abde", (None, 4, 8), "de", (5, 200)),
    ("abcd,cde->abe", (None, 16), "e", (5, 20, 10)),
    ("ab...,bc->ac...", (16,), "c", (200, 5)),
    ("abc,dc->abd", (None, 16), "d", (5, 200)),     # the contracted axis last in the kernel
]]
QIDS = [f[0] for f in QFORMS]


def _configs(keras):
    kq = keras.quantizers
    return {
        "int8": ("int8", None, None),
        "int8-weights": ("int8", kq.Int8QuantizationConfig(activation_quantizer=None),
                         q.Int8QuantizationConfig(activation_quantizer=None)),
        "int4": ("int4", None, None),
        "int4-channel": ("int4", kq.Int4QuantizationConfig(block_size=-1),
                         q.Int4QuantizationConfig(block_size=-1)),
        "float8": ("float8", None, None),
    }


QCASES = [(p, c, f) for p in ("float32", "mixed_bfloat16")
          for c in ("int8", "int8-weights", "int4", "int4-channel", "float8") for f in QFORMS
          # Keras 3.15 cannot quantize an equation with a right ellipsis to int8 / int4
          if not (f[0].endswith("...") and c != "float8")]


@pytest.mark.keras
@pytest.mark.parametrize("policy,case,form", QCASES,
                         ids=[f"{p}-{c}-{f[0]}" for p, c, f in QCASES])
def test_quantized_both_ways(keras, tmp_path, policy, case, form):
    mode, kconfig, config = _configs(keras)[case]
    km = _keras_model(keras, form, policy)
    km.save(tmp_path / "float.keras")
    model = load_model(tmp_path / "float.keras")
    x = RNG.standard_normal((3,) + form[3]).astype(np.float32)
    float_out = np.asarray(km.predict(x, verbose=0)).astype(np.float32)
    km.quantize(mode, config=kconfig)
    model.quantize(mode, config=config)
    # quantizing here gives Keras's bytes
    for a, b in zip(model.get_weights(), km.get_weights()):
        assert a.dtype == np.asarray(b).dtype and a.shape == tuple(b.shape)
        np.testing.assert_array_equal(a, np.asarray(b))
    if mode == "float8":
        km.layers[1].inputs_scale.assign(0.05)
        km.layers[1].kernel_scale.assign(0.002)
        model.layers[1].set_weights([np.float32(0.05) if n.endswith("/inputs_scale")
                                     else np.float32(0.002) if n.endswith("/kernel_scale")
                                     else w for n, w in zip(model.layers[1].weight_names(),
                                                            model.layers[1].get_weights())])
    assert model.layers[1].dtype_policy.name == km.layers[1].dtype_policy.name
    km.save(tmp_path / "q.keras")
    ref = np.asarray(km.predict(x, verbose=0)).astype(np.float32)
    keras_error = float(np.abs(ref - float_out).max())
    assert keras_error > 0
    cd = "float32" if policy == "float32" else "bfloat16"
    bound = 4 * _ulp(ref, cd) + (1e-5 if cd == "float32" else keras_error)
    # Keras's quantized file loads here with Keras's weights (as Keras reads them back)
    loaded = load_model(tmp_path / "q.keras")
    theirs = keras.models.load_model(tmp_path / "q.keras").get_weights()
    for a, b in zip(loaded.get_weights(), theirs):
        np.testing.assert_array_equal(a, np.asarray(b))
    for m in (loaded, model):
        out = m.predict(x, verbose=0).astype(np.float32)
        assert np.abs(out - ref).max() <= bound, (np.abs(out - ref).max(), bound)
    # saved here, Keras loads it and predicts as its own quantized model
    model.save(tmp_path / "ours.keras")
    back = keras.models.load_model(tmp_path / "ours.keras")
    np.testing.assert_array_equal(np.asarray(back.predict(x, verbose=0)), ref)


@pytest.mark.keras
def test_quantized_grouped_block_and_training(keras):
    form = QFORMS[2]
    layer = layers.EinsumDense(form[0], form[1], bias_axes=form[2], activation="relu")
    x = RNG.standard_normal((2,) + form[3]).astype(np.float32)
    layer(x)
    klayer = keras.layers.EinsumDense(form[0], form[1], bias_axes=form[2], activation="relu")
    klayer.build((None,) + form[3])
    klayer.set_weights(layer.get_weights())
    layer.quantize("int4", config=q.Int4QuantizationConfig(block_size=64))
    klayer.quantize("int4", config=keras.quantizers.Int4QuantizationConfig(block_size=64))
    for a, b in zip(layer.get_weights(), klayer.get_weights()):
        np.testing.assert_array_equal(a, np.asarray(b))
    ref = keras.ops.convert_to_numpy(klayer(x)).astype(np.float32)
    np.testing.assert_allclose(layer(x), ref, rtol=1e-5, atol=1e-5)
    # training: the kernel frozen, the bias trains, the input gradient through the
    # dequantized kernel
    y = layer(x, training=True)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    dx = layer.backward(np.ones_like(y))
    assert len(layer.gradients) == 1 and layer.gradients[0].shape == (4, 8)
    k = layer.dequantized_kernel()
    mask = (y > 0).astype(np.float32)
    np.testing.assert_allclose(dx, np.einsum("abde,cde->abc", mask, k), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode,config", [
    ("int8", None), ("int8", q.Int8QuantizationConfig(activation_quantizer=None)),
    ("int4", None), ("int4", q.Int4QuantizationConfig(block_size=-1)), ("float8", None)])
@pytest.mark.parametrize("form", QFORMS[1:4], ids=QIDS[1:4])
def test_quantized_against_dequantized_einsum(isa_level, form, mode, config):
    """At every ISA level: the quantized GEMMs against numpy on the same quantized values."""
    eq, out, bias_axes, shape = form
    layer = layers.EinsumDense(eq, out, bias_axes=bias_axes, activation="tanh")
    x = RNG.standard_normal((3,) + shape).astype(np.float32)
    layer.build_from_shape(x.shape)
    bias = RNG.standard_normal(layer.get_weights()[1].shape).astype(np.float32)
    layer.set_weights([layer.get_weights()[0], bias])
    layer.quantize(mode, config=config)
    if mode == "float8":
        names = [n.split("/")[-1] for n in layer.weight_names()]
        values = dict(zip(names, layer.get_weights()))
        values["inputs_scale"], values["kernel_scale"] = np.float32(0.02), np.float32(0.003)
        layer.set_weights([values[n] for n in names])
    kernel = layer.dequantized_kernel().astype(np.float64)
    xs = x.astype(np.float64)
    if mode == "float8":
        xs = layers._einsum_dense.fake_float8(x, np.float32(0.02)).astype(np.float64)
        bias = bias.astype("bfloat16").astype(np.float32)
    elif mode == "int8" and config is None:
        # inputs quantized row by row over the contracted axes, as Keras does
        axes = tuple(i for i, c in enumerate(eq.split(",")[0]) if c not in eq.split("->")[1])
        scale = 127.0 / (np.abs(x).max(axis=axes, keepdims=True) + np.float32(1e-7))
        xs = np.clip(np.round(x * scale.astype(np.float32)), -127, 127) / scale
    ref = np.tanh(np.einsum(eq, xs, kernel) + bias)
    np.testing.assert_allclose(layer(x), ref, rtol=1e-5, atol=2e-5)


def test_quantize_errors():
    layer = layers.EinsumDense("abc,cd->abd", (None, 4), bias_axes="d")
    with pytest.raises(ValueError, match="isn't yet built"):
        layer.quantize("int8")
    layer.build_from_shape((None, 3, 5))
    with pytest.raises(ValueError, match="int2"):
        layer.quantize("int2")
    layer.quantize("float8")
    with pytest.raises(ValueError, match="already quantized"):
        layer.quantize("int8")
    with pytest.raises(ValueError, match="inference-only"):
        layer(np.zeros((2, 3, 5), np.float32), training=True)
    shared = layers.EinsumDense("abc,bcd->abd", (3, 4))
    shared.build_from_shape((None, 3, 5))
    with pytest.raises(ValueError, match=r"EinsumDense .*one GEMM.*'abc,bcd->abd'"):
        shared.quantize("int8")


@pytest.mark.keras
def test_model_quantize_takes_einsum_dense(keras):
    inputs = layers.Input((5, 12))
    x = layers.EinsumDense("abc,cd->abd", (None, 8), bias_axes="d")(inputs)
    x = layers.Dense(3)(x)
    model = Model(inputs, x)
    model.quantize("int8")
    assert [l.dtype_policy.name for l in model.layers[1:]] == ["int8_from_float32"] * 2


def test_bias_over_an_input_axis_fixes_its_size():
    layer = layers.EinsumDense("abc,cd->abd", (5, 16), bias_axes="bd")
    assert layer(np.ones((2, 5, 12), np.float32)).shape == (2, 5, 16)
    assert layer.get_weights()[1].shape == (5, 16)
    with pytest.raises(ValueError, match=r"expected input of shape \(None, 5, 12\)"):
        layer(np.ones((2, 6, 12), np.float32))
