"""Layers: policies and autocasting, the compute-dtype weight cache, forward and backward passes
against float64 numpy references (finite differences in float64), bad input, configs."""
import math
import warnings

import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels, layers, utils
from mixedcore.layers._base import Layer
from mixedcore.policy import DTypePolicy, policy_scope

from gradcheck import numeric_grad

BF16 = np.dtype(ml_dtypes.bfloat16)
_erf = np.vectorize(math.erf)


def ref_activation(name, z):
    """float64 references, written independently of mixedcore.activations."""
    if name in ("linear", None):
        return z
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "tanh":
        return np.tanh(z)
    if name == "gelu":
        return 0.5 * z * (1.0 + _erf(z / np.sqrt(2.0)))
    if name == "softmax":
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    raise AssertionError(name)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _seed():
    utils.set_random_seed(7)


class Recorder(Layer):
    """Remembers the dtype its call received."""

    def call(self, inputs, training=False):
        self.seen = inputs.dtype
        return inputs


# -- policies and autocasting -------------------------------------------------------------------

@pytest.mark.parametrize("dtype, compute, variable", [
    ("mixed_float16", "float16", "float32"),
    ("mixed_bfloat16", "bfloat16", "float32"),
    ("float64", "float64", "float64"),
    (np.float16, "float16", "float16"),
    (np.dtype("float64"), "float64", "float64"),
    (ml_dtypes.bfloat16, "bfloat16", "bfloat16"),
    (DTypePolicy("mixed_float16"), "float16", "float32"),
    ({"class_name": "DTypePolicy", "config": {"name": "mixed_bfloat16"}}, "bfloat16", "float32"),
])
def test_dtype_argument_forms(dtype, compute, variable):
    layer = layers.Dense(2, dtype=dtype)
    assert layer.compute_dtype == compute
    assert layer.variable_dtype == variable
    assert layer.dtype == variable


def test_dtype_argument_errors():
    with pytest.raises(TypeError):
        layers.Dense(2, dtype=3)
    with pytest.raises(ValueError):
        layers.Dense(2, dtype="mixed_int8")


def test_global_policy_is_snapshotted_at_construction():
    with policy_scope("mixed_bfloat16"):
        layer = layers.Dense(2)
    assert layer.compute_dtype == "bfloat16"
    out = layer(np.ones((3, 4), np.float32))
    assert out.dtype == BF16
    assert layers.Dense(2).compute_dtype == "float32"


@pytest.mark.parametrize("policy, expected", [("mixed_float16", np.float16),
                                              ("mixed_bfloat16", BF16)])
def test_float_inputs_cast_to_compute_dtype(policy, expected):
    for src in (np.float64, np.float32, np.float16, BF16):
        rec = Recorder(dtype=policy)
        rec(np.ones((2, 3), dtype=src))
        assert rec.seen == expected


@pytest.mark.parametrize("src", [np.int8, np.int32, np.int64, np.uint8, np.bool_])
def test_integer_and_bool_inputs_untouched(src):
    rec = Recorder(dtype="mixed_float16")
    rec(np.ones((2, 3), dtype=src))
    assert rec.seen == np.dtype(src)
    out = layers.Flatten(dtype="mixed_float16")(np.ones((2, 3, 2), dtype=src))
    assert out.dtype == np.dtype(src) and out.shape == (2, 6)


def test_autocast_false_leaves_inputs():
    rec = Recorder(dtype="mixed_float16", autocast=False)
    rec(np.ones((2, 3)))
    assert rec.seen == np.float64


def test_float64_input_cast_down_and_float32_weights():
    layer = layers.Dense(5, activation="relu", dtype="mixed_float16")
    out = layer(np.random.default_rng(0).normal(size=(4, 3)))
    assert out.dtype == np.float16
    assert layer.kernel.dtype == np.float32 and layer.bias.dtype == np.float32
    assert all(w.dtype == np.float32 for w in layer.get_weights())
    assert [w.dtype for w in layer.compute_weights()] == [np.float16, np.float16]


def test_softmax_float32_output_from_16bit_input():
    for policy in ("mixed_float16", "mixed_bfloat16"):
        dense = layers.Dense(4, dtype=policy)
        h = dense(np.ones((2, 3), np.float32))
        assert h.dtype.itemsize == 2
        probs = layers.Activation("softmax", dtype="float32")(h)
        assert probs.dtype == np.float32
        assert layers.Softmax(dtype="float32")(h).dtype == np.float32


def test_infer_policies_adopt_first_input_dtype():
    from mixedcore import experimental
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        infer = experimental.Policy("infer")
        infer32 = experimental.Policy("infer_with_float32_vars")
    layer = layers.Dense(3, dtype=infer)
    assert layer.compute_dtype is None
    out = layer(np.ones((2, 4), np.float16))
    assert out.dtype == np.float16
    assert layer.compute_dtype == "float16" and layer.kernel.dtype == np.float16
    # the policy is kept: a later float32 input is cast to float16
    assert layer(np.ones((2, 4), np.float32)).dtype == np.float16

    layer = layers.Dense(3, dtype=infer32)
    out = layer(np.ones((2, 4), BF16))
    assert out.dtype == BF16
    assert layer.compute_dtype == "bfloat16" and layer.kernel.dtype == np.float32

    layer = layers.Dense(3, dtype=infer)
    with pytest.raises(TypeError):
        layer(np.ones((2, 4), np.int32))


# -- the compute-dtype weight cache ---------------------------------------------------------------

def test_weights_packed_once_and_again_after_changes(monkeypatch, rng):
    """Inference packs the kernel once per weight version (and the bias is cast once); the
    training path's cast copies are made only when training."""
    calls = []
    real_cast, real_pack = kernels.cast, kernels.pack

    def counting_cast(x, dtype, **kw):
        calls.append(("cast", x.shape))
        return real_cast(x, dtype, **kw)

    def counting_pack(b, dtype=None, **kw):
        calls.append(("pack", b.shape))
        return real_pack(b, dtype=dtype, **kw)

    layer = layers.Dense(6, dtype="mixed_bfloat16")
    x = rng.normal(size=(5, 4)).astype(BF16)   # already in the compute dtype: no input cast
    monkeypatch.setattr(kernels, "cast", counting_cast)
    monkeypatch.setattr(kernels, "pack", counting_pack)
    first = layer(x)
    once = [("cast", (6,)), ("cast", (6,)), ("pack", (4, 6))]   # bias: to bfloat16, to float32
    assert sorted(calls) == once
    calls.clear()
    for _ in range(3):
        np.testing.assert_array_equal(layer(x).astype(np.float32), first.astype(np.float32))
    assert calls == []

    new = [w + 1 for w in layer.get_weights()]
    layer.set_weights(new)
    layer(x)
    assert sorted(calls) == once
    np.testing.assert_array_equal(layer.packed_weight(0).unpack(),
                                  new[0].astype(np.float32).astype(BF16))
    calls.clear()
    layer.kernel[...] = 0
    layer.weights_updated()
    out = layer(x).astype(np.float32)
    bias = layer.bias.astype(BF16).astype(np.float32)
    np.testing.assert_array_equal(out, np.broadcast_to(bias, out.shape))
    assert sorted(calls) == once

    calls.clear()
    previous = kernels.isa()
    try:
        for level in kernels.available_isas():
            kernels.set_isa(level)
            layer(x)                               # packs again only if the panels differ
            assert not layer.packed_weight(0).stale
    finally:
        kernels.set_isa(previous)
    assert ("cast", (4, 6)) not in calls           # no cast copy for inference

    calls.clear()
    layer(x, training=True)
    assert ("cast", (4, 6)) in calls               # training takes the cast copy
    cached = layer.compute_weights()
    calls.clear()
    layer(x, training=True)
    assert [c for c in calls if c[1] in ((4, 6), (6,))] == []   # weights not cast again
    assert layer.compute_weights() is cached


def test_float32_policy_uses_weights_without_copies():
    layer = layers.Dense(3)
    layer(np.ones((2, 2), np.float32))
    assert layer.compute_weights()[0] is layer.kernel


# -- forward passes against float64 references --------------------------------------------------

@pytest.mark.parametrize("activation", ["linear", "relu", "gelu", "sigmoid", "tanh", "softmax"])
@pytest.mark.parametrize("training", [False, True])
def test_dense_forward_float32(activation, training, rng):
    layer = layers.Dense(17, activation=activation)
    x = rng.normal(size=(9, 33)).astype(np.float32)
    layer.build_from_shape(x.shape)
    layer.set_weights([rng.normal(size=(33, 17)), rng.normal(size=(17,))])
    k, b = (w.astype(np.float64) for w in layer.get_weights())
    ref = ref_activation(activation, x.astype(np.float64) @ k + b)
    out = layer(x, training=training)
    assert out.dtype == np.float32
    bound = 64 * 2.0 ** -24 * (np.abs(x) @ np.abs(k) + np.abs(b)) + 2e-7 * np.abs(ref) + 1e-7
    assert np.all(np.abs(out - ref) <= bound)


@pytest.mark.parametrize("policy, dtype, ulp", [("mixed_float16", np.float16, 2.0 ** -10),
                                                ("mixed_bfloat16", BF16, 2.0 ** -7)])
@pytest.mark.parametrize("activation", ["linear", "relu", "gelu", "sigmoid", "tanh", "softmax"])
def test_dense_forward_16bit(policy, dtype, ulp, activation, rng):
    layer = layers.Dense(19, activation=activation, dtype=policy)
    x = rng.normal(size=(7, 40))
    layer.build_from_shape(x.shape)
    layer.set_weights([rng.normal(size=(40, 19)) * 0.2, rng.normal(size=(19,))])
    out = layer(x)
    assert out.dtype == dtype
    # reference from the rounded operands, in float64
    x16 = x.astype(np.float32).astype(dtype).astype(np.float64)
    k16, b16 = (w.astype(np.float64) for w in layer.compute_weights())
    ref = ref_activation(activation, x16 @ k16 + b16)
    got = out.astype(np.float64)
    assert np.all(np.abs(got - ref) <= ulp * np.abs(ref) + 1e-5 * (np.abs(x16) @ np.abs(k16)).max()
                  + ulp * 1e-2)


def test_dense_accepts_batched_inputs(rng):
    layer = layers.Dense(4)
    x = rng.normal(size=(2, 3, 5)).astype(np.float32)
    out = layer(x)
    assert out.shape == (2, 3, 4)
    np.testing.assert_allclose(out, x @ layer.kernel + layer.bias, rtol=1e-5, atol=1e-6)
    assert layer.compute_output_shape((None, 3, 5)) == (None, 3, 4)


@pytest.mark.parametrize("name", ["linear", "relu", "gelu", "sigmoid", "tanh", "softmax"])
@pytest.mark.parametrize("policy", ["float32", "float64"])
def test_activation_forward(name, policy, rng):
    x = rng.normal(size=(6, 11)) * 3
    out = layers.Activation(name, dtype=policy)(x)
    assert out.dtype == np.dtype(policy)
    tol = 1e-6 if policy == "float32" else 1e-13
    np.testing.assert_allclose(out, ref_activation(name, x), rtol=tol, atol=tol)


def test_sigmoid_and_softmax_do_not_overflow():
    x = np.array([[-1e4, 0.0, 1e4]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = layers.Activation("sigmoid")(x)
        p = layers.Softmax()(x)
    np.testing.assert_allclose(s, [[0.0, 0.5, 1.0]])
    np.testing.assert_allclose(p, [[0.0, 0.0, 1.0]])


def test_softmax_axis(rng):
    x = rng.normal(size=(3, 4, 5))
    out = layers.Softmax(axis=1, dtype="float64")(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-12)


def test_relu_options(rng):
    x = rng.normal(size=(50,)) * 4
    out = layers.ReLU(max_value=2.0, negative_slope=0.1, threshold=0.5, dtype="float64")(x[None])
    ref = np.where(x >= 0.5, x, 0.1 * (x - 0.5))
    ref = np.minimum(ref, 2.0)
    np.testing.assert_allclose(out[0], ref)


def test_layer_normalization_forward(rng):
    x = rng.normal(size=(4, 3, 8)) * 2 + 1
    layer = layers.LayerNormalization(dtype="float64")
    layer.build_from_shape(x.shape)
    gamma, beta = rng.normal(size=8), rng.normal(size=8)
    layer.set_weights([gamma, beta])
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    ref = (x - mean) / np.sqrt(var + 1e-3) * gamma + beta
    np.testing.assert_allclose(layer(x), ref, rtol=1e-12, atol=1e-12)
    assert [w.shape for w in layer.get_weights()] == [(8,), (8,)]


def test_layer_normalization_statistics_in_float32_under_float16(rng):
    # values near 1000 vary by ~0.5: float16 steps there are 0.5 wide, but the statistics of
    # the (exactly representable) float16 inputs must be taken in float32.
    x = (1000 + np.round(rng.normal(size=(5, 64)) * 4) / 2).astype(np.float16)
    out = layers.LayerNormalization(dtype="mixed_float16")(x)
    assert out.dtype == np.float16
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-3)
    assert np.max(np.abs(out.astype(np.float64) - ref)) < 4e-3
    naive = x - x.mean(-1, keepdims=True, dtype=np.float16)   # what float16 statistics would give
    assert np.max(np.abs(naive.astype(np.float64) - (x64 - x64.mean(-1, keepdims=True)))) > 0.05


def test_dropout_inference_identity_and_training_mask():
    x = np.ones((200, 50), np.float32)
    drop = layers.Dropout(0.25, seed=3)
    assert drop(x) is not None and np.array_equal(drop(x), x)
    y = drop(x, training=True)
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    dx = drop.backward(np.ones_like(y))
    np.testing.assert_array_equal(dx, y)


def test_flatten_shapes():
    flat = layers.Flatten()
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    out = flat(x, training=True)
    assert out.shape == (2, 12)
    np.testing.assert_array_equal(out, x.reshape(2, 12))
    assert flat.backward(np.ones((2, 12), np.float32)).shape == (2, 3, 4)
    assert flat.compute_output_shape((None, 3, 4)) == (None, 12)


# -- backward passes: finite differences in float64 ---------------------------------------------

def _check_layer_gradients(layer, x, rng):
    y = layer(x, training=True)
    r = rng.normal(size=y.shape)
    dx = layer.backward(r.copy())
    grads = [g.copy() for g in layer.gradients]

    def loss_x():
        return float(np.sum(layer(x, training=False) * r))

    np.testing.assert_allclose(dx, numeric_grad(loss_x, x), rtol=1e-6, atol=1e-7)
    for w, g in zip(layer.trainable_weights, grads):
        def loss_w():
            layer.weights_updated()
            return loss_x()
        np.testing.assert_allclose(g, numeric_grad(loss_w, w), rtol=1e-6, atol=1e-7)
        layer.weights_updated()
    assert len(grads) == len(layer.trainable_weights)


@pytest.mark.parametrize("activation", ["linear", "relu", "gelu", "sigmoid", "tanh", "softmax"])
@pytest.mark.parametrize("use_bias", [True, False])
def test_dense_gradients_float64(activation, use_bias, rng):
    layer = layers.Dense(5, activation=activation, use_bias=use_bias, dtype="float64")
    x = rng.normal(size=(4, 6))
    layer.build_from_shape(x.shape)
    if use_bias:
        layer.set_weights([rng.normal(size=(6, 5)), rng.normal(size=(5,))])
    _check_layer_gradients(layer, x, rng)


@pytest.mark.parametrize("name", ["linear", "relu", "gelu", "sigmoid", "tanh", "softmax"])
def test_activation_gradients_float64(name, rng):
    _check_layer_gradients(layers.Activation(name, dtype="float64"), rng.normal(size=(3, 7)), rng)


def test_other_layer_gradients_float64(rng):
    _check_layer_gradients(layers.Softmax(axis=1, dtype="float64"), rng.normal(size=(2, 4, 3)),
                           rng)
    _check_layer_gradients(layers.ReLU(max_value=1.5, negative_slope=0.2, threshold=-0.3,
                                       dtype="float64"), rng.normal(size=(4, 9)), rng)
    _check_layer_gradients(layers.Flatten(dtype="float64"), rng.normal(size=(2, 3, 2)), rng)
    ln = layers.LayerNormalization(dtype="float64")
    x = rng.normal(size=(3, 6))
    ln.build_from_shape(x.shape)
    ln.set_weights([rng.normal(size=6), rng.normal(size=6)])
    _check_layer_gradients(ln, x, rng)
    ln2 = layers.LayerNormalization(axis=(1, 2), center=False, dtype="float64")
    _check_layer_gradients(ln2, rng.normal(size=(2, 3, 4)), rng)


def test_dropout_gradient_float64(rng):
    drop = layers.Dropout(0.4, seed=1, dtype="float64")
    x = rng.normal(size=(5, 6))
    y = drop(x, training=True)
    r = rng.normal(size=y.shape)
    mask = y / x
    np.testing.assert_allclose(drop.backward(r), r * mask, rtol=1e-12)


@pytest.mark.parametrize("activation", ["linear", "relu", "gelu", "tanh"])
def test_dense_backward_float32_matches_float64(activation, rng):
    x = rng.normal(size=(16, 24))
    k, b = rng.normal(size=(24, 10)) * 0.3, rng.normal(size=10)
    r = rng.normal(size=(16, 10))
    results = []
    for policy in ("float64", "float32"):
        layer = layers.Dense(10, activation=activation, dtype=policy)
        layer.build_from_shape(x.shape)
        layer.set_weights([k, b])
        layer(x, training=True)
        dx = layer.backward(r.astype(policy))
        results.append([dx] + list(layer.gradients))
    for ref, got in zip(*results):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-5)


def test_dense_backward_16bit_dtypes(rng):
    layer = layers.Dense(8, activation="relu", dtype="mixed_float16")
    x = rng.normal(size=(4, 5))
    y = layer(x, training=True)
    dx = layer.backward(np.ones_like(y))
    assert dx.dtype == np.float16
    assert [g.dtype for g in layer.gradients] == [np.float32, np.float32]
    assert layer.backward(np.ones_like(y), need_input_grad=False) is None


# -- bad input -----------------------------------------------------------------------------------

def test_constructor_errors():
    with pytest.raises(ValueError, match="units"):
        layers.Dense(0)
    with pytest.raises(TypeError, match="units"):
        layers.Dense("3")
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        layers.Dense(3, activation="swishy")
    with pytest.raises(ValueError, match="unknown activation"):
        layers.Activation("elu_")
    with pytest.raises(TypeError):
        layers.Activation(3)
    with pytest.raises(ValueError, match="unknown initializer"):
        layers.Dense(3, kernel_initializer="glorot")
    with pytest.raises(ValueError, match="rate"):
        layers.Dropout(1.0)
    with pytest.raises(ValueError, match="epsilon"):
        layers.LayerNormalization(epsilon=0)
    with pytest.raises(ValueError, match="unknown regularizer"):
        layers.Dense(3, kernel_regularizer="l3")
    with pytest.raises(TypeError, match="unexpected keyword"):
        layers.Dense(3, kernel_size=3)
    with pytest.raises(ValueError, match="shape"):
        layers.Input()


def test_wrong_input_shape_for_built_layer():
    layer = layers.Dense(3)
    layer(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"\(batch, \.\.\., 4\), received \(2, 5\)"):
        layer(np.ones((2, 5), np.float32))
    with pytest.raises(ValueError):
        layers.Dense(3)(np.ones(4, np.float32))


def test_non_numeric_input():
    with pytest.raises(TypeError, match="numeric"):
        layers.Dense(3)(np.array([["a", "b"]]))
    with pytest.raises(TypeError, match="numeric"):
        layers.Activation("relu")([[object()]])
    with pytest.raises(TypeError):
        layers.Dense(3)([[1.0], [1.0, 2.0]])


def test_set_weights_errors():
    layer = layers.Dense(3)
    layer(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"expected 2 weight arrays with shapes \[\(4, 3\), "
                                         r"\(3,\)\], received 1"):
        layer.set_weights([np.zeros((4, 3))])
    with pytest.raises(ValueError, match=r"shape \(3, 4\), expected \(4, 3\)"):
        layer.set_weights([np.zeros((3, 4)), np.zeros(3)])
    with pytest.raises(TypeError, match="numeric"):
        layer.set_weights([np.full((4, 3), "x"), np.zeros(3)])
    with pytest.raises(TypeError):
        layer.set_weights(np.zeros((4, 3)))
    before = layer.get_weights()
    with pytest.raises(ValueError):
        layer.set_weights([np.ones((4, 3)), np.ones(4)])
    np.testing.assert_array_equal(layer.get_weights()[0], before[0])   # nothing changed


def test_set_weights_converts_to_variable_dtype():
    layer = layers.Dense(2, dtype="mixed_float16")
    layer.build_from_shape((None, 3))
    layer.set_weights([np.full((3, 2), 0.1), np.arange(2)])
    assert layer.kernel.dtype == np.float32
    np.testing.assert_array_equal(layer.kernel, np.float32(0.1))
    np.testing.assert_array_equal(layer.bias, [0.0, 1.0])


# -- configs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: layers.Dense(4, activation="gelu", use_bias=False, kernel_regularizer="l2",
                         dtype="mixed_bfloat16", name="d"),
    lambda: layers.Activation("tanh", dtype="float32"),
    lambda: layers.Softmax(axis=-2),
    lambda: layers.ReLU(max_value=6.0),
    lambda: layers.Dropout(0.3, seed=2),
    lambda: layers.Flatten(dtype="mixed_float16"),
    lambda: layers.LayerNormalization(axis=[1, 2], epsilon=1e-5, center=False),
    lambda: layers.InputLayer(shape=(3, None)),
])
def test_config_round_trip(make):
    layer = make()
    config = layer.get_config()
    again = layers.deserialize(layers.serialize(layer))
    assert type(again) is type(layer)
    assert again.get_config() == config
    assert again.dtype_policy == layer.dtype_policy


def test_regularizer_penalty_and_gradient(rng):
    layer = layers.Dense(3, kernel_regularizer="l2", dtype="float64")
    layer.build_from_shape((None, 4))
    penalty, grads = layer.regularization_losses()
    k = layer.kernel
    assert penalty == pytest.approx(0.01 * np.sum(k * k))
    np.testing.assert_allclose(grads[0], 0.02 * k)
    assert grads[1] is None


@pytest.mark.parametrize("policy, dtype", [("mixed_float16", np.float16),
                                           ("mixed_bfloat16", BF16)])
def test_dense_forward_and_backward_call_the_gemm_with_16bit_operands(monkeypatch, policy, dtype,
                                                                      rng):
    calls = []
    real_matmul = kernels.matmul

    def spy(a, b, **kw):
        packed = isinstance(b, kernels.PackedMatrix)
        calls.append((a.dtype, b.dtype, kw.get("out_dtype"), kw.get("activation"),
                      a.flags.c_contiguous, "packed" if packed else b.flags.c_contiguous))
        return real_matmul(a, b, **kw)

    monkeypatch.setattr(kernels, "matmul", spy)
    layer = layers.Dense(6, activation="relu", dtype=policy)
    x = rng.normal(size=(5, 4)).astype(np.float32)
    assert layer(x).dtype == dtype
    name = "bfloat16" if dtype == BF16 else "float16"
    assert calls == [(dtype, dtype, name, "relu", True, "packed")]  # fused bias + activation
    calls.clear()
    y = layer(x, training=True)
    layer.backward(np.ones_like(y))
    a_dtypes = [(c[0], c[1]) for c in calls]
    assert a_dtypes == [(dtype, dtype)] * 3      # forward, x.T @ dz, dz @ kernel.T
    assert calls[1][2] is None                   # kernel gradient accumulated and kept in float32
    assert calls[2][2] == name                   # input gradient rounded to the compute dtype
    assert not calls[1][4] and not calls[2][5]   # transposed views, not copies
