"""Functional models: graphs of layer calls, several inputs and outputs, shared layers, nested
models, training through the graph, configs (ours and Keras's)."""
import weakref

import numpy as np
import pytest

import mixedcore
from mixedcore import layers, models
from mixedcore.layers._node import KerasTensor
from mixedcore.policy import policy_scope

from gradcheck import numeric_grad


class Sum(layers.Layer):
    """A user's own two-input layer: inputs[0] + 2 * inputs[1] (list input, list gradient)."""

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def call(self, inputs):
        a, b = inputs
        return a + b.dtype.type(2) * b

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        return [dy, dy * dy.dtype.type(2)]


class Scale(layers.Layer):
    """A user's layer with a weight and no compute_output_shape: y = x * w (per feature)."""

    def build(self, input_shape):
        self.w = self.add_weight("w", (input_shape[-1],), "ones")

    def call(self, inputs, training=False):
        self._train_cache = inputs
        return inputs * self.compute_weights()[0]

    def backward(self, dy, need_input_grad=True):
        x = self._train_cache
        self.gradients = [(dy * x).reshape(-1, x.shape[-1]).sum(axis=0)]
        return dy * self.compute_weights()[0] if need_input_grad else None


def two_tower(policy="float64"):
    with policy_scope(policy):
        a = layers.Input(shape=(4,), name="a")
        b = layers.Input(shape=(3,), name="b")
        shared = layers.Dense(5, activation="tanh", name="shared")
        ha = shared(layers.Dense(4, name="pre_a")(a))
        hb = shared(layers.Dense(4, name="pre_b")(b))
        merged = Sum(name="sum")([ha, hb])
        out1 = layers.Dense(2, name="out1")(merged)
        out2 = layers.Dense(3, activation="sigmoid", name="out2")(hb)
        return models.Model([a, b], [out1, out2], name="two_tower")


def test_input_returns_a_keras_tensor_and_layers_make_nodes():
    x = layers.Input(shape=(16,), name="x")
    assert isinstance(x, KerasTensor)
    assert x.shape == (None, 16) and x.dtype == "float32"
    dense = layers.Dense(4)
    y = dense(x)
    assert isinstance(y, KerasTensor) and y.shape == (None, 4)
    assert dense.built and dense.kernel.shape == (16, 4)
    assert dense.input is x and dense.output is y
    with pytest.raises(TypeError, match="symbolic"):
        np.asarray(y)


def test_dense_on_an_input_builds_a_model():
    inputs = layers.Input((16,))
    model = models.Model(inputs, layers.Dense(4)(inputs))
    assert model.predict(np.ones((3, 16), np.float32), verbose=0).shape == (3, 4)


def test_layer_order_and_weights_follow_keras():
    model = two_tower()
    names = [layer.name for layer in model.layers]
    # inputs first (deepest), then by depth; ties in the order the walk met them
    assert names[:2] == ["a", "b"]
    assert set(names) == {"a", "b", "pre_a", "pre_b", "shared", "sum", "out1", "out2"}
    assert names.index("shared") < names.index("sum") < names.index("out1")
    # a shared layer's weights appear once
    assert len(model.weights) == 2 * 5
    assert model.count_params() == (4 * 4 + 4) + (3 * 4 + 4) + (4 * 5 + 5) + (5 * 2 + 2) + \
        (5 * 3 + 3)


def test_multi_input_output_predict_matches_manual_composition():
    model = two_tower()
    rng = np.random.default_rng(0)
    xa, xb = rng.normal(size=(7, 4)), rng.normal(size=(7, 3))
    o1, o2 = model.predict([xa, xb], verbose=0)
    get = {layer.name: layer for layer in model.layers}

    def dense(name, x, act=None):
        k, b = get[name].get_weights()
        z = x @ k + b
        return np.tanh(z) if act == "tanh" else 1 / (1 + np.exp(-z)) if act else z

    ha = dense("shared", dense("pre_a", xa), "tanh")
    hb = dense("shared", dense("pre_b", xb), "tanh")
    np.testing.assert_allclose(o1, dense("out1", ha + 2 * hb), rtol=1e-12)
    np.testing.assert_allclose(o2, dense("out2", hb, "sigmoid"), rtol=1e-12)
    # by name, and the single call equals predict
    d1, d2 = model({"a": xa, "b": xb})
    np.testing.assert_array_equal(d1, o1)
    np.testing.assert_array_equal(d2, o2)


def test_dict_outputs_and_dict_losses_train():
    mixedcore.utils.set_random_seed(1)
    with policy_scope("float32"):
        a = layers.Input(shape=(6,), name="a")
        h = layers.Dense(16, activation="relu")(a)
        outputs = {"cls": layers.Dense(3, activation="softmax", name="cls")(h),
                   "reg": layers.Dense(1, name="reg")(h)}
        model = models.Model(a, outputs)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(256, 6)).astype(np.float32)
    labels = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)
    target = x[:, :1] * 2.0
    model.compile(mixedcore.optimizers.Adam(0.01),
                  loss={"cls": "sparse_categorical_crossentropy", "reg": "mse"},
                  loss_weights={"cls": 1.0, "reg": 0.5}, metrics=["accuracy"])
    before = model.evaluate(x, {"cls": labels, "reg": target}, verbose=0, return_dict=True)
    history = model.fit(x, {"cls": labels, "reg": target}, epochs=15, batch_size=32, verbose=0)
    after = model.evaluate(x, {"cls": labels, "reg": target}, verbose=0, return_dict=True)
    assert set(before) == {"loss", "cls_loss", "reg_loss", "cls_accuracy", "reg_accuracy"}
    assert after["loss"] < 0.5 * before["loss"]
    assert after["loss"] == pytest.approx(after["cls_loss"] + 0.5 * after["reg_loss"], rel=1e-5)
    assert len(history.history["loss"]) == 15
    out = model.predict(x[:5], verbose=0)
    assert set(out) == {"cls", "reg"} and out["cls"].shape == (5, 3)


def _loss_and_grads(model, xs, dys):
    outs = model(xs, training=True)
    outs = outs if isinstance(outs, list) else [outs]
    grads = model.backward(dys if len(dys) > 1 else dys[0], need_input_grad=True)
    value = sum(float(np.sum(o * d)) for o, d in zip(outs, dys))
    return value, grads, list(model.gradients)


def test_gradients_through_shared_layers_and_two_outputs_match_finite_differences():
    model = two_tower("float64")
    rng = np.random.default_rng(2)
    xa, xb = rng.normal(size=(3, 4)), rng.normal(size=(3, 3))
    dys = [rng.normal(size=(3, 2)), rng.normal(size=(3, 3))]
    _, (ga, gb), wgrads = _loss_and_grads(model, [xa, xb], dys)

    def f():
        for layer in model.layers:
            layer.weights_updated()
        o1, o2 = model([xa, xb])
        return float(np.sum(o1 * dys[0]) + np.sum(o2 * dys[1]))

    for w, g in zip(model.trainable_weights, wgrads):
        np.testing.assert_allclose(g, numeric_grad(f, w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ga, numeric_grad(f, xa), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, numeric_grad(f, xb), rtol=1e-6, atol=1e-8)


def test_nested_model_as_a_layer_called_twice():
    with policy_scope("float64"):
        inner_in = layers.Input(shape=(3,))
        inner = models.Model(inner_in, Scale(name="scale")(layers.Dense(3, activation="tanh",
                                                                        name="d")(inner_in)),
                             name="inner")
        x = layers.Input(shape=(3,))
        y = inner(inner(x))                 # the same nested model twice
        outer = models.Model(x, layers.Dense(2, name="head")(y), name="outer")
    assert [layer.name for layer in outer.layers][-2:] == ["inner", "head"]
    assert len(outer.weights) == 2 + 1 + 2
    rng = np.random.default_rng(4)
    xv = rng.normal(size=(4, 3))
    inner.get_layer("scale").set_weights([np.array([0.5, -1.5, 2.0])])
    dy = rng.normal(size=(4, 2))
    _, gx, wgrads = _loss_and_grads(outer, [xv], [dy])

    def f():
        outer.weights_updated()
        return float(np.sum(outer(xv) * dy))

    for w, g in zip(outer.trainable_weights, wgrads):
        np.testing.assert_allclose(g, numeric_grad(f, w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gx, numeric_grad(f, xv), rtol=1e-6, atol=1e-8)


def test_user_layer_without_compute_output_shape_gets_its_shape_by_running():
    x = layers.Input(shape=(5,))
    y = Scale()(x)
    assert y.shape == (None, 5)
    model = models.Model(x, layers.Dense(2)(y))
    assert model.predict(np.ones((2, 5)), verbose=0).shape == (2, 2)


def test_intermediates_are_freed_during_inference():
    alive = []

    class Probe(layers.Layer):
        def call(self, inputs):
            # at this point, outputs two steps back have no reader left and must be gone
            if len(alive) >= 2:
                assert alive[-2]() is None, "an intermediate outlived its last reader"
            out = inputs + inputs.dtype.type(1)
            alive.append(weakref.ref(out))
            return out

    x = layers.Input(shape=(8,))
    y = x
    for _ in range(5):
        y = Probe()(y)
    model = models.Model(x, y)
    alive.clear()
    out = model(np.zeros((2, 8), np.float32))
    assert len(alive) == 5
    np.testing.assert_array_equal(out, np.full((2, 8), 5, np.float32))


def test_config_round_trip_with_shared_and_nested_layers():
    model = two_tower("float32")
    config = model.get_config()
    custom = {"Sum": Sum}
    clone = models.Model.from_config(config, custom_objects=custom)
    assert [layer.name for layer in clone.layers] == [layer.name for layer in model.layers]
    clone.set_weights(model.get_weights())
    rng = np.random.default_rng(5)
    xs = [rng.normal(size=(4, 4)).astype(np.float32), rng.normal(size=(4, 3)).astype(np.float32)]
    for a, b in zip(model.predict(xs, verbose=0), clone.predict(xs, verbose=0)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="unknown layer class 'Sum'"):
        models.Model.from_config(model.get_config())


def test_graph_errors_are_clear():
    a = layers.Input(shape=(3,), name="ga")
    b = layers.Input(shape=(3,), name="gb")
    y = Sum()([a, b])
    with pytest.raises(ValueError, match="graph disconnected"):
        models.Model(a, y)
    with pytest.raises(TypeError, match="KerasTensors"):
        models.Model(a, np.zeros(3))
    with pytest.raises(TypeError, match="give inputs and outputs"):
        models.Model()
    with pytest.raises(ValueError, match="more than once"):
        models.Model([a, a], y)
    model = models.Model([a, b], y)
    with pytest.raises(ValueError, match="2 inputs"):
        model.predict(np.zeros((2, 3)), verbose=0)
    with pytest.raises(ValueError, match="expected input of shape"):
        model.predict([np.zeros((2, 3)), np.zeros((2, 4))], verbose=0)
    with pytest.raises(ValueError, match="missing"):
        model.predict({"ga": np.zeros((2, 3))}, verbose=0)
    with pytest.raises(ValueError, match="same number of samples"):
        model([np.zeros((2, 3)), np.zeros((3, 3))])
    c = layers.Input(shape=(3,), name="dup")
    d = layers.Dense(3, name="dup")(c)
    with pytest.raises(ValueError, match="used by two layers"):
        models.Model(c, d)


def test_summary_shows_connections():
    lines = []
    two_tower().summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert "Connected to" in text and "pre_a[0][0]" in text and "shared[1][0]" in text
    assert "Total params" in text


def test_sequential_is_a_graph():
    model = models.Sequential([layers.Input(shape=(4,)), layers.Dense(3), layers.Dense(2)])
    assert [type(layer).__name__ for layer in model.layers] == ["Dense", "Dense"]
    assert len(model._graph.nodes) == 2
    deferred = models.Sequential([layers.Dense(3), layers.Dense(2)])
    assert not deferred.built
    out = deferred.predict(np.ones((5, 4)), verbose=0)
    assert out.shape == (5, 2) and deferred.built and deferred.input_shape == (None, 4)
    # a Sequential nested in a functional model
    x = layers.Input(shape=(4,))
    outer = models.Model(x, model(x))
    np.testing.assert_array_equal(outer.predict(np.ones((2, 4)), verbose=0),
                                  model.predict(np.ones((2, 4)), verbose=0))


@pytest.mark.keras
def test_keras_functional_config_and_weights_load(keras):
    a = keras.Input((4,), name="a")
    b = keras.Input((3,), name="b")
    shared = keras.layers.Dense(5, activation="tanh", name="shared")
    ha = shared(keras.layers.Dense(4, name="pre_a")(a))
    hb = shared(keras.layers.Dense(4, name="pre_b")(b))
    inner_in = keras.Input((5,), name="inner_in")
    inner = keras.Model(inner_in, keras.layers.Dense(5, activation="relu", name="inner_d")(
        inner_in), name="inner")
    out1 = keras.layers.Dense(2, name="out1")(inner(ha))
    out2 = keras.layers.Dense(3, activation="sigmoid", name="out2")(inner(hb))
    kmodel = keras.Model({"a": a, "b": b}, [out1, out2])
    model = models.Model.from_config(kmodel.get_config())
    assert [layer.name for layer in model.layers] == [layer.name for layer in kmodel.layers]
    model.set_weights(kmodel.get_weights())
    rng = np.random.default_rng(6)
    xs = {"a": rng.normal(size=(5, 4)).astype(np.float32),
          "b": rng.normal(size=(5, 3)).astype(np.float32)}
    expected = kmodel.predict(xs, verbose=0)
    got = model.predict(xs, verbose=0)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    # and our config of it is Keras's to read
    again = keras.Model.from_config(model.get_config())
    again.set_weights(model.get_weights())
    for e, g in zip(expected, again.predict(xs, verbose=0)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.keras
def test_keras_sequential_config_loads(keras):
    kmodel = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                               keras.layers.Dense(3, activation="softmax")])
    model = models.Sequential.from_config(kmodel.get_config())
    model.set_weights(kmodel.get_weights())
    x = np.random.default_rng(7).normal(size=(4, 6)).astype(np.float32)
    np.testing.assert_allclose(model.predict(x, verbose=0), kmodel.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-7)
    again = keras.Sequential.from_config(model.get_config())
    again.set_weights(model.get_weights())
    np.testing.assert_allclose(again.predict(x, verbose=0), kmodel.predict(x, verbose=0),
                               rtol=1e-6)


class ZeroMask(layers.Layer):
    """Makes a per-step mask: steps whose features are all zero are masked (as mask_zero)."""

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, inputs):
        return inputs

    def compute_mask(self, inputs, mask=None):
        return np.any(inputs != 0, axis=-1)


class MaskedMean(layers.Layer):
    """Mean over the steps the mask keeps (as GlobalAveragePooling1D with a mask)."""

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])

    def call(self, inputs, mask=None):
        if mask is None:
            return inputs.mean(axis=1)
        keep = mask[..., None].astype(inputs.dtype)
        return (inputs * keep).sum(axis=1) / keep.sum(axis=1)


def test_masks_travel_through_layers_that_support_them():
    with policy_scope("float64"):
        x = layers.Input(shape=(5, 3))
        h = layers.Dense(4, name="per_step")(ZeroMask()(x))     # Dense passes the mask on
        model = models.Model(x, MaskedMean()(h))
    rng = np.random.default_rng(8)
    data = rng.normal(size=(2, 5, 3))
    data[0, 3:] = 0.0                       # the last two steps of sample 0 are padding
    out = model.predict(data, verbose=0)
    k, b = model.get_layer("per_step").get_weights()
    steps = data @ k + b
    np.testing.assert_allclose(out[0], steps[0, :3].mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(out[1], steps[1].mean(axis=0), rtol=1e-12)
    # a layer that does not support masking stops the mask
    with policy_scope("float64"):
        x2 = layers.Input(shape=(5, 3))
        blocked = Scale()(ZeroMask()(x2))
        model2 = models.Model(x2, MaskedMean()(blocked))
    np.testing.assert_allclose(model2.predict(data, verbose=0)[0], data[0].mean(axis=0),
                               rtol=1e-12)
