"""Inference folds an affine normalization (and a following activation) into the product of
the Dense or convolution before it (docs/models.md, "Folding")."""
import numpy as np
import pytest

import mixedcore
from mixedcore import layers, models


class ChannelAffine(layers.Layer):
    """y = x * scale + shift over the last axis: the protocol a normalization offers."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.axis = -1
        self.calls = 0

    def build(self, input_shape):
        c = input_shape[-1]
        self.add_weight("scale", (c,), "ones", trainable=False)
        self.add_weight("shift", (c,), "zeros", trainable=False)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def call(self, x, training=False):
        self.calls += 1
        w = [v.astype(np.float32) for v in self._values]
        return (x.astype(np.float32) * w[0] + w[1]).astype(x.dtype)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        return (dy.astype(np.float32) * self._values[0]).astype(dy.dtype)

    def inference_affine(self):
        return (self._values[0].astype(np.float32), self._values[1].astype(np.float32))


def _model(activation_layer=None, use_bias=True, dtype=None, extra_use=False):
    inp = layers.Input((12,))
    dense = layers.Dense(7, use_bias=use_bias, dtype=dtype, name="dense")
    norm = ChannelAffine(dtype=dtype, name="norm")
    h = norm(dense(inp))
    outs = [h]
    if activation_layer is not None:
        h = activation_layer(h)
        outs = [h]
    if extra_use:
        outs = [h, dense.output]
    model = models.Model(inp, outs if len(outs) > 1 else outs[0])
    rng = np.random.default_rng(0)
    norm.set_weights([rng.uniform(0.5, 2.0, 7).astype(np.float32),
                      rng.normal(size=7).astype(np.float32)])
    if use_bias:
        dense.set_weights([dense.get_weights()[0], rng.normal(size=7).astype(np.float32)])
    return model, dense, norm


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("act", [None, "relu", "gelu", "tanh", "sigmoid"])
def test_folded_equals_layer_by_layer(policy, act):
    act_layer = None if act is None else (layers.ReLU() if act == "relu" and policy == "float32"
                                          else layers.Activation(act))
    with mixedcore.policy_scope(policy):
        model, dense, norm = _model(act_layer)
    x = np.random.default_rng(1).normal(size=(33, 12)).astype(np.float32)
    folded = model.predict(x, verbose=0)
    assert norm.calls == 0                       # the normalization did not run on its own
    h = norm(dense(x))
    expected = h if act_layer is None else act_layer(h)
    assert folded.dtype == expected.dtype
    tol = {"float32": 1e-5, "mixed_float16": 4e-3, "mixed_bfloat16": 3e-2}[policy]
    np.testing.assert_allclose(folded.astype(np.float32), expected.astype(np.float32),
                               rtol=tol, atol=tol)


def test_fold_follows_weight_changes():
    model, dense, norm = _model(layers.Activation("relu"), use_bias=False)
    x = np.random.default_rng(2).normal(size=(5, 12)).astype(np.float32)
    first = model.predict(x, verbose=0)
    norm.set_weights([np.full(7, 3.0, np.float32), np.full(7, -1.0, np.float32)])
    second = model.predict(x, verbose=0)
    np.testing.assert_allclose(second, np.maximum(3.0 * (x @ dense.get_weights()[0]) - 1.0, 0),
                               rtol=1e-5, atol=1e-5)
    assert not np.allclose(first, second)
    dense.set_weights([np.eye(12, 7, dtype=np.float32)])
    third = model.predict(x, verbose=0)
    np.testing.assert_allclose(third, np.maximum(3.0 * x[:, :7] - 1.0, 0), rtol=1e-6, atol=1e-6)


def test_no_fold_when_the_intermediate_is_read_elsewhere():
    model, dense, norm = _model(extra_use=True)
    x = np.ones((3, 12), np.float32)
    out, raw = model.predict(x, verbose=0)
    assert norm.calls == 1
    np.testing.assert_allclose(raw, dense(x), rtol=1e-6)


def test_no_fold_for_a_nonlinear_producer_or_training():
    inp = layers.Input((4,))
    norm = ChannelAffine()
    model = models.Model(inp, norm(layers.Dense(3, activation="relu")(inp)))
    model.predict(np.ones((2, 4), np.float32), verbose=0)
    assert norm.calls == 1
    model, dense, norm = _model()
    model.compile(optimizer="sgd", loss="mse")
    model.train_on_batch(np.ones((2, 12), np.float32), np.zeros((2, 7), np.float32))
    assert norm.calls == 1


def test_activation_in_another_dtype_is_not_fused():
    with mixedcore.policy_scope("mixed_bfloat16"):
        model, dense, norm = _model(layers.Activation("relu", dtype="float32"))
    y = model.predict(np.ones((2, 12), np.float32), verbose=0)
    assert y.dtype == np.float32
    assert norm.calls == 0


def _bn_model(policy, axis=-1):
    with mixedcore.policy_scope(policy):
        inp = layers.Input((6, 12))
        dense = layers.Dense(8, name="dense")
        bn = layers.BatchNormalization(axis=axis, name="bn")
        act = layers.ReLU()
        model = models.Model(inp, act(bn(dense(inp))))
    rng = np.random.default_rng(4)
    c = bn.get_weights()[0].shape
    bn.set_weights([rng.uniform(0.5, 1.5, c), rng.normal(0, 0.3, c), rng.normal(0, 0.3, c),
                    rng.uniform(0.5, 1.5, c)])
    return model, dense, bn, act


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_batch_normalization_folds_and_follows_training(policy):
    model, dense, bn, act = _bn_model(policy)
    assert len(model._graph._folds) == 1
    x = np.random.default_rng(5).normal(size=(10, 6, 12)).astype(np.float32)
    tol = 1e-5 if policy == "float32" else 3e-2

    def layer_by_layer():
        return act(bn(dense(x))).astype(np.float32)

    np.testing.assert_allclose(model.predict(x, verbose=0).astype(np.float32), layer_by_layer(),
                               rtol=tol, atol=tol)
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, np.ones((10, 6, 8), np.float32), epochs=2, verbose=0)   # moves every weight
    np.testing.assert_allclose(model.predict(x, verbose=0).astype(np.float32), layer_by_layer(),
                               rtol=tol, atol=tol)


def test_batch_normalization_over_another_axis_is_not_folded():
    model, dense, bn, act = _bn_model("float32", axis=1)
    assert not model._graph._folds
    x = np.random.default_rng(6).normal(size=(3, 6, 12)).astype(np.float32)
    np.testing.assert_allclose(model.predict(x, verbose=0), act(bn(dense(x))), rtol=1e-6)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("rank,kwargs", [
    (2, {"padding": "same"}), (2, {"strides": 2, "groups": 2, "use_bias": False}),
    (1, {"padding": "causal", "dilation_rate": 2})])
def test_convolution_folds_a_batch_normalization(policy, rank, kwargs):
    shape = (9, 10, 4) if rank == 2 else (17, 4)
    with mixedcore.policy_scope(policy):
        inp = layers.Input(shape)
        conv = (layers.Conv2D if rank == 2 else layers.Conv1D)(6, 3, **kwargs)
        bn = layers.BatchNormalization()
        act = layers.Activation("relu")
        model = models.Model(inp, act(bn(conv(inp))))
    rng = np.random.default_rng(7)
    bn.set_weights([rng.uniform(0.5, 1.5, 6), rng.normal(0, 0.3, 6), rng.normal(0, 0.3, 6),
                    rng.uniform(0.5, 1.5, 6)])
    assert len(model._graph._folds) == 1
    x = rng.normal(size=(3,) + shape).astype(np.float32)
    folded = model.predict(x, verbose=0)
    expected = act(bn(conv(x)))
    assert folded.dtype == expected.dtype and folded.shape == expected.shape
    tol = {"float32": 1e-5, "mixed_float16": 4e-3, "mixed_bfloat16": 3e-2}[policy]
    np.testing.assert_allclose(folded.astype(np.float32), expected.astype(np.float32),
                               rtol=tol, atol=tol)


def test_float64_is_not_folded():
    with mixedcore.policy_scope("float64"):
        model, dense, norm = _model()
    assert not model._graph._folds
    x = np.ones((2, 12))
    np.testing.assert_allclose(model.predict(x, verbose=0), norm(dense(x)))


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("merge,act", [(layers.Add, layers.ReLU), (layers.Add, None),
                                       (layers.Maximum, lambda: layers.Activation("tanh"))])
def test_merge_then_activation_is_one_rounding(policy, merge, act):
    with mixedcore.policy_scope(policy):
        a, b = layers.Input((5,)), layers.Input((5,))
        m = merge()
        outs = m([a, b])
        act_layer = act() if act is not None else None
        model = models.Model([a, b], act_layer(outs) if act_layer is not None else outs)
    assert len(model._graph._folds) == (1 if act is not None else 0)
    rng = np.random.default_rng(8)
    xa, xb = (rng.normal(size=(4, 5)).astype(np.float32) for _ in range(2))
    y = model.predict([xa, xb], verbose=0)
    # the inputs as the layers take them (rounded to the compute dtype), then exact arithmetic
    xa, xb = (v.astype(y.dtype).astype(np.float32) for v in (xa, xb))
    exact = m._merge([xa.astype(np.float64), xb.astype(np.float64)])
    if act_layer is not None:
        exact = np.maximum(exact, 0) if act is layers.ReLU else np.tanh(exact)
    np.testing.assert_array_equal(y, exact.astype(np.float32).astype(y.dtype)
                                  if policy == "float32" else
                                  mixedcore.kernels.cast(exact.astype(np.float32), y.dtype))
    layer_by_layer = m([xa, xb]) if act_layer is None else act_layer(m([xa, xb]))
    if act is layers.ReLU or act is None:        # relu commutes with rounding: the same bits
        np.testing.assert_array_equal(y, layer_by_layer)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("act", [lambda: layers.ReLU(max_value=6.0), lambda: layers.ReLU(6),
                                 lambda: layers.Activation("swish"),
                                 lambda: layers.Activation("hard_swish"), None])
def test_depthwise_convolution_folds_a_batch_normalization(policy, act):
    """The MobileNet block: DepthwiseConv2D, BatchNormalization, ReLU(6) is one pass."""
    with mixedcore.policy_scope(policy):
        inp = layers.Input((9, 10, 4))
        dw = layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2, use_bias=False)
        bn = layers.BatchNormalization()
        act_layer = act() if act is not None else None
        h = bn(dw(inp))
        model = models.Model(inp, act_layer(h) if act_layer is not None else h)
    rng = np.random.default_rng(8)
    bn.set_weights([rng.uniform(0.5, 1.5, 8), rng.normal(0, 0.3, 8), rng.normal(0, 0.3, 8),
                    rng.uniform(0.5, 1.5, 8)])
    assert len(model._graph._folds) == 1
    x = (rng.normal(size=(3, 9, 10, 4)) * 3).astype(np.float32)
    folded = model.predict(x, verbose=0)
    expected = bn(dw(x))
    if act_layer is not None:
        expected = act_layer(expected)
    assert folded.dtype == expected.dtype and folded.shape == expected.shape
    tol = {"float32": 1e-5, "mixed_float16": 4e-3, "mixed_bfloat16": 3e-2}[policy]
    np.testing.assert_allclose(folded.astype(np.float32), expected.astype(np.float32),
                               rtol=tol, atol=tol * np.abs(expected.astype(np.float32)).max())
    # a new weight version of either layer gives a new fold
    bn.set_weights([w * 2 for w in bn.get_weights()[:2]] + bn.get_weights()[2:])
    expected = (bn(dw(x)) if act_layer is None else act_layer(bn(dw(x)))).astype(np.float32)
    np.testing.assert_allclose(model.predict(x, verbose=0).astype(np.float32), expected,
                               rtol=tol, atol=tol * np.abs(expected).max())


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("producer", [lambda: layers.Dense(6), lambda: layers.Conv2D(6, 3),
                                      lambda: layers.DepthwiseConv2D(3)])
def test_an_activation_layer_alone_after_a_product_runs_in_its_epilogue(policy, producer):
    """Without a normalization in between, the product's epilogue applies the activation layer
    that alone reads it: bit for bit the layers one by one (the epilogue's function is the
    elementwise kernel's, and relu6 commutes with the rounding)."""
    with mixedcore.policy_scope(policy):
        inp = layers.Input((7, 8, 6))
        prod = producer()
        act = layers.ReLU(max_value=6)
        model = models.Model(inp, act(prod(inp)))
    assert len(model._graph._folds) == 1
    x = (np.random.default_rng(9).normal(size=(2, 7, 8, 6)) * 8).astype(np.float32)
    folded = model.predict(x, verbose=0)
    expected = act(prod(x))
    assert folded.dtype == expected.dtype
    assert np.array_equal(folded.astype(np.float32), expected.astype(np.float32))
