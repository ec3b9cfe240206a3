"""What the application zoo needs beyond the core layers: Keras operations recorded as graph
nodes (``x + 3.0``, ``x[:, 0]``, ``keras.ops.mean``), the preprocessing layers (Rescaling,
Normalization, Resizing, CenterCrop), the application layers (LayerScale, CustomScaleLayer),
and the loader's message for what mixedcore does not have."""
import json
import zipfile

import numpy as np
import pytest
from gradcheck import numeric_grad

from mixedcore import layers, models


def _predict_both(keras, model, x, tmp_path, formats=(".keras", ".h5")):
    """Keras's prediction, and mixedcore's from each file format Keras wrote."""
    ref = keras.ops.convert_to_numpy(model(x, training=False))
    out = {}
    for ext in formats:
        path = tmp_path / f"m{ext}"
        model.save(path)
        out[ext] = models.load_model(path).predict(x, verbose=0)
    return ref, out


@pytest.mark.keras
def test_operation_nodes_load_and_predict_like_keras(keras, tmp_path):
    ops = keras.ops
    x = keras.Input((5, 4))
    y = keras.layers.Dense(4)(x)
    outs = [y + 3.0, 2.0 * y, y - x, y / 4.0, -y, x[:, 1:4, :2], x[:, 0], ops.mean(y, axis=1),
            ops.sum(y, axis=-1, keepdims=True), ops.max(y, axis=2), ops.min(y, axis=1),
            ops.reshape(y, (-1, 20)), ops.transpose(y, (0, 2, 1)), ops.expand_dims(y, 1),
            ops.squeeze(ops.expand_dims(y, 2), 2), ops.concatenate([x, y], axis=-1),
            ops.sqrt(ops.abs(y)), ops.exp(-ops.square(y)), ops.tanh(y), ops.sigmoid(y),
            ops.relu(y), ops.maximum(y, x), ops.minimum(y, 0.5), ops.log(ops.abs(y) + 1.0)]
    model = keras.Model(x, outs)
    xs = np.random.default_rng(0).normal(size=(3, 5, 4)).astype("float32")
    refs = [keras.ops.convert_to_numpy(r) for r in model(xs)]
    for ext in (".keras", ".h5"):
        model.save(tmp_path / f"ops{ext}")
        mine = models.load_model(tmp_path / f"ops{ext}")
        assert [type(layer).__name__ for layer in mine.layers] == ["InputLayer", "Dense"]
        got = mine.predict(xs, verbose=0)
        assert len(got) == len(refs)
        for r, g in zip(refs, got):
            assert g.shape == r.shape and g.dtype == r.dtype
            np.testing.assert_allclose(g, r, rtol=2e-6, atol=2e-6)


@pytest.mark.keras
def test_operation_nodes_written_by_mixedcore_load_in_keras(keras, tmp_path):
    x = layers.Input((6,))
    d = layers.Dense(4)(x)
    y = (d + 1.0) * d - d[:, :1] / 2.0
    model = models.Model(x, [-y, d[:, 1:3]])
    xs = np.random.default_rng(1).normal(size=(2, 6)).astype("float32")
    model.save(tmp_path / "m.keras")
    config = json.loads(zipfile.ZipFile(tmp_path / "m.keras").read("config.json"))
    modules = {e["class_name"]: e["module"] for e in config["config"]["layers"]}
    assert modules["GetItem"] == "keras.src.ops.numpy" and modules["Dense"] == "keras.layers"
    theirs = keras.saving.load_model(tmp_path / "m.keras")
    for a, b in zip(model.predict(xs, verbose=0), theirs(xs)):
        np.testing.assert_allclose(a, keras.ops.convert_to_numpy(b), rtol=1e-6, atol=1e-6)
    again = models.load_model(tmp_path / "m.keras")
    for a, b in zip(model.predict(xs, verbose=0), again.predict(xs, verbose=0)):
        np.testing.assert_array_equal(a, b)


def _check_gradients(model, xs, dy):
    """The input and weight gradients of a float64 model against central differences."""
    model(xs, training=True)
    gx = model.backward(dy, need_input_grad=True)
    wgrads = list(model.gradients)

    def f():
        for layer in model.layers:
            layer.weights_updated()
        return float(np.sum(model(xs) * dy))

    for w, g in zip(model.trainable_weights, wgrads):
        np.testing.assert_allclose(g, numeric_grad(f, w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gx, numeric_grad(f, xs), rtol=1e-6, atol=1e-8)


def test_operation_result_dtypes_follow_keras():
    x = layers.Input((3,), dtype="bfloat16")
    y = layers.Input((3,), dtype="float32")
    assert (x * 3.0).dtype == "bfloat16"       # a Python number does not widen
    assert (x + y).dtype == "float32"
    xs = np.ones((2, 3), dtype="bfloat16")
    model = models.Model([x, y], [x * 3.0, x + y])
    a, b = model.predict([xs, np.ones((2, 3), "float32")], verbose=0)
    assert a.dtype == np.dtype("bfloat16") and b.dtype == np.float32


def test_operation_gradients_match_finite_differences():
    from mixedcore.policy import policy_scope
    with policy_scope("float64"):
        x = layers.Input((4,))
        d = layers.Dense(3, name="d")(x)
        e = layers.Dense(3, name="e")(x)
        y = (d * e - 2.0 * d) / (e * e + 1.0) + d[:, :1] - (-e)
        model = models.Model(x, y)
    rng = np.random.default_rng(3)
    xs = rng.normal(size=(2, 4))
    dy = rng.normal(size=(2, 3))
    _check_gradients(model, xs, dy)


def test_an_operation_along_the_batch_keeps_the_batch_whole():
    x = layers.Input((3,))
    d = layers.Dense(3)(x)
    model = models.Model(x, d - d[:1])           # every sample minus the first one
    xs = np.random.default_rng(4).normal(size=(64, 3)).astype("float32")
    out = model.predict(xs, batch_size=64, verbose=0)
    ref = xs @ model.layers[1].kernel + model.layers[1].bias
    np.testing.assert_allclose(out, ref - ref[:1], rtol=1e-5, atol=1e-5)


@pytest.mark.keras
@pytest.mark.parametrize("make", [
    lambda k: k.layers.Rescaling(1 / 127.5, offset=-1.0),
    lambda k: k.layers.Rescaling([0.5, 2.0, 1.0], offset=[0.0, 1.0, -1.0]),
    lambda k: k.layers.Normalization(mean=[10.0, 20.0, 30.0], variance=[4.0, 9.0, 0.0]),
    lambda k: k.layers.Normalization(axis=-1, mean=[1.0, 2.0, 3.0], variance=[4.0, 9.0, 16.0],
                                     invert=True),
    lambda k: k.layers.Resizing(12, 10, interpolation="nearest"),
    lambda k: k.layers.Resizing(16, 20, interpolation="bilinear"),
    lambda k: k.layers.CenterCrop(5, 6),
], ids=["rescaling", "rescaling-per-channel", "normalization", "normalization-invert",
        "resizing-nearest", "resizing-bilinear", "center-crop"])
def test_preprocessing_layers_match_keras(keras, tmp_path, make):
    x = keras.Input((8, 9, 3))
    y = keras.layers.Conv2D(3, 1)(make(keras)(x))
    model = keras.Model(x, y)
    xs = np.random.default_rng(5).uniform(0, 255, (2, 8, 9, 3)).astype("float32")
    ref, got = _predict_both(keras, model, xs, tmp_path)
    for y in got.values():
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.keras
def test_adapted_normalization_reads_its_statistics_from_the_weights(keras, tmp_path):
    norm = keras.layers.Normalization(axis=-1)
    data = np.random.default_rng(6).normal(5.0, 3.0, (50, 4)).astype("float32")
    norm.adapt(data)
    x = keras.Input((4,))
    model = keras.Model(x, keras.layers.Dense(2)(norm(x)))
    ref, got = _predict_both(keras, model, data[:3], tmp_path)
    for y in got.values():
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.keras
def test_application_layers_match_keras(keras, tmp_path):
    from keras.src.applications.convnext import LayerScale
    from keras.src.applications.inception_resnet_v2 import CustomScaleLayer
    x = keras.Input((4, 4, 6))
    a = keras.layers.Conv2D(6, 1)(x)
    b = LayerScale(0.5, 6)(a)
    y = CustomScaleLayer(0.17)([a, b])
    model = keras.Model(x, y)
    xs = np.random.default_rng(7).normal(size=(2, 4, 4, 6)).astype("float32")
    ref, got = _predict_both(keras, model, xs, tmp_path)
    for y in got.values():
        np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


def test_preprocessing_and_application_layer_gradients():
    from mixedcore.policy import policy_scope
    with policy_scope("float64"):
        x = layers.Input((3,))
        r = layers.Rescaling([0.5, -2.0, 1.0], offset=1.0)(x)
        n = layers.Normalization(mean=[1.0, 0.0, -1.0], variance=[4.0, 1.0, 0.25])(r)
        d = layers.Dense(3)(n)
        s = layers.LayerScale(0.3, 3)(d)
        y = layers.CustomScaleLayer(0.2)([d, s])
        model = models.Model(x, y)
    rng = np.random.default_rng(8)
    xs, dy = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    _check_gradients(model, xs, dy)


@pytest.mark.keras
def test_concatenate_then_relu_folds_like_keras(keras, tmp_path):
    x = keras.Input((4, 4, 3))
    a = keras.layers.Conv2D(2, 1)(x)
    b = keras.layers.Conv2D(3, 1)(x)
    y = keras.layers.Activation("relu")(keras.layers.Concatenate()([a, b]))
    model = keras.Model(x, y)
    xs = np.random.default_rng(9).normal(size=(2, 4, 4, 3)).astype("float32")
    ref, got = _predict_both(keras, model, xs, tmp_path, formats=(".keras",))
    np.testing.assert_allclose(got[".keras"], ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bad, match", [
    (lambda: layers.Rescaling("x"), "scale must be a number"),
    (lambda: layers.Rescaling(float("nan")), "finite"),
    (lambda: layers.Normalization(mean=[1.0]), "together"),
    (lambda: layers.Normalization(mean=[1.0, 2.0], variance=[1.0]), "same shape"),
    (lambda: layers.Normalization(mean=[1.0], variance=[-1.0]), ">= 0"),
    (lambda: layers.Resizing(4, 4, interpolation="bicubic"), "interpolation"),
    (lambda: layers.Resizing(4, 4, crop_to_aspect_ratio=True), "crop_to_aspect_ratio"),
    (lambda: layers.Resizing(0, 4), "height"),
    (lambda: layers.LayerScale(0.1, 0), "projection_dim"),
])
def test_bad_arguments_are_named(bad, match):
    with pytest.raises((TypeError, ValueError), match=match):
        bad()


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="smaller than"):
        layers.CenterCrop(5, 5)(np.zeros((1, 3, 3, 1), "float32"))
    with pytest.raises(ValueError, match="shrinking"):
        layers.Resizing(2, 2)(np.zeros((1, 4, 4, 1), "float32"))
    with pytest.raises(ValueError, match="channels"):
        layers.LayerScale(0.1, 3)(np.zeros((1, 4), "float32"))
    with pytest.raises(ValueError, match="two inputs"):
        layers.CustomScaleLayer(0.1)([np.zeros((1, 4), "float32")] * 3)
    with pytest.raises(ValueError, match="index"):
        x = layers.Input((3,))
        models.Model(x, x[:, 5])


def _write_config(tmp_path, entries):
    layer_list = [{"module": "keras.layers", "class_name": "InputLayer",
                   "config": {"batch_shape": [None, 3], "dtype": "float32", "name": "in"},
                   "name": "in", "inbound_nodes": []}]
    previous = "in"
    for cls, module, name in entries:
        layer_list.append({"module": module, "class_name": cls,
                           "config": {"name": name, "trainable": True, "dtype": "float32"},
                           "registered_name": None, "name": name,
                           "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__",
                                                        "config": {"shape": [None, 3],
                                                                   "dtype": "float32",
                                                                   "keras_history":
                                                                       [previous, 0, 0]}}],
                                              "kwargs": {}}]})
        previous = name
    config = {"module": "keras.src.models.functional", "class_name": "Functional",
              "config": {"name": "m", "trainable": True, "layers": layer_list,
                         "input_layers": [["in", 0, 0]], "output_layers": [[previous, 0, 0]]},
              "registered_name": "Functional"}
    path = tmp_path / "unknown.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(config))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
    return path


def test_unknown_classes_are_named_with_the_nearest_supported(tmp_path):
    path = _write_config(tmp_path, [("LayerScales", "my.layers", "scale_a"),
                                    ("GroupNormalization", "keras.layers", "gn"),
                                    ("LayerScales", "my.layers", "scale_b"),
                                    ("Cumsum", "keras.src.ops.numpy", "cumsum")])
    with pytest.raises(ValueError) as info:
        models.load_model(path)
    text = str(info.value)
    assert "unknown.keras" in text
    assert "LayerScales (layers 'scale_a', 'scale_b'; nearest supported: LayerScale)" in text
    assert "GroupNormalization (layer 'gn'; nearest supported:" in text and \
        "LayerNormalization" in text
    assert "the Keras operation Cumsum (node 'cumsum'; nearest supported: Sum)" in text


def _double(x):
    return x * 2


@pytest.mark.keras
def test_lambda_needs_safe_mode_false_and_a_named_function(keras, tmp_path):
    x = keras.Input((3,))
    y = keras.layers.Lambda(_double, name="twice")(keras.layers.Dense(3)(x))
    model = keras.Model(x, y)
    model.save(tmp_path / "named.keras")
    with pytest.raises(ValueError, match="layer 'twice' is a Lambda.*safe_mode=False"):
        models.load_model(tmp_path / "named.keras")
    with pytest.raises(ValueError, match="not among custom_objects"):
        models.load_model(tmp_path / "named.keras", safe_mode=False)
    mine = models.load_model(tmp_path / "named.keras", safe_mode=False,
                             custom_objects={"_double": _double})
    xs = np.random.default_rng(10).normal(size=(2, 3)).astype("float32")
    np.testing.assert_allclose(mine.predict(xs, verbose=0),
                               keras.ops.convert_to_numpy(model(xs)), rtol=1e-6, atol=1e-6)
    # a Python lambda is bytecode in the file: never run
    y = keras.layers.Lambda(lambda t: t + 1.0, name="plus")(x)
    keras.Model(x, y).save(tmp_path / "lambda.keras")
    with pytest.raises(ValueError, match="safe_mode=False"):
        models.load_model(tmp_path / "lambda.keras")
    with pytest.raises(ValueError, match="bytecode, which mixedcore never runs"):
        models.load_model(tmp_path / "lambda.keras", safe_mode=False)


def test_lambda_round_trip_and_refusals(tmp_path):
    x = layers.Input((3,))
    model = models.Model(x, layers.Lambda(_double, output_shape=(3,))(x))
    xs = np.ones((2, 3), "float32")
    np.testing.assert_array_equal(model.predict(xs, verbose=0), xs * 2)
    model.save(tmp_path / "m.keras")
    again = models.load_model(tmp_path / "m.keras", safe_mode=False,
                              custom_objects={"_double": _double})
    np.testing.assert_array_equal(again.predict(xs, verbose=0), xs * 2)
    unnamed = models.Model(x, layers.Lambda(lambda t: t - 1)(x))
    with pytest.raises(ValueError, match="a Python lambda cannot be saved"):
        unnamed.save(tmp_path / "u.keras")
    assert not (tmp_path / "u.keras").exists()
    with pytest.raises(TypeError, match="function must be callable"):
        layers.Lambda(3)
    with pytest.raises(ValueError, match="output_shape"):
        layers.Lambda(_double, output_shape=(-1,))


@pytest.mark.keras
@pytest.mark.parametrize("multiplier", [1, 2])
def test_grouped_conv_with_one_channel_per_group_runs_depthwise(keras, tmp_path, multiplier):
    x = keras.Input((9, 9, 6))
    y = keras.layers.Conv2D(6 * multiplier, 7, padding="same", groups=6)(x)
    y = keras.layers.LayerNormalization(epsilon=1e-6)(y)
    model = keras.Model(x, y)
    xs = np.random.default_rng(11).normal(size=(2, 9, 9, 6)).astype("float32")
    ref, got = _predict_both(keras, model, xs, tmp_path, formats=(".keras",))
    np.testing.assert_allclose(got[".keras"], ref, rtol=1e-5, atol=1e-5)
    mine = models.load_model(tmp_path / "m.keras")
    assert mine.layers[1].depthwise_form()
    np.testing.assert_array_equal(mine.predict(xs, verbose=0), mine(xs))    # plan == layers
    for policy in ("mixed_bfloat16", "mixed_float16"):
        mixed = models.load_model(tmp_path / "m.keras", dtype_policy=policy)
        a = np.asarray(mixed.predict(xs, verbose=0), dtype=np.float32)
        b = np.asarray(mixed(xs), dtype=np.float32)
        np.testing.assert_array_equal(a, b)
        assert np.max(np.abs(a - ref)) < 0.1 * np.max(np.abs(ref))
