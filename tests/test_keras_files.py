"""Files written by Keras 3 load in mixedcore and predict as Keras does; files mixedcore writes
load in Keras and predict the same.

Every model comes from a builder registered with ``@builder(...)``: a function of (keras, rng)
that returns a :class:`Case` (an untrained Keras model built under the current global policy,
and training data).  A model with other layers is one more builder; every test runs on every
builder, under float32, mixed_float16 and mixed_bfloat16, with every file format.  A builder
names the mixedcore layer classes it needs beyond the first ones; its tests are skipped while
``mixedcore.layers`` does not have them all.
"""
import dataclasses
import json
import zipfile

import numpy as np
import pytest

from mixedcore import layers, models

pytestmark = pytest.mark.keras

POLICIES = ["float32", "mixed_float16", "mixed_bfloat16"]
FORMATS = [".keras", ".h5", ".weights.h5"]
BUILDERS = {}


@dataclasses.dataclass
class Case:
    model: object           # a Keras model
    x: object               # inputs: an array, or a list / dict of arrays
    y: object               # targets, as fit takes them
    loss: object            # as compile takes it


def builder(*requires):
    """Register a model builder that needs the mixedcore layer classes ``requires`` (see the
    module notes)."""
    def register(fn):
        fn.requires = requires
        BUILDERS[fn.__name__] = fn
        return fn
    return register


@builder()
def mlp(keras, rng):
    L = keras.layers
    model = keras.Sequential([
        keras.Input((12,)), L.Dense(32, activation="relu"), L.Dropout(0.1), L.Dense(16),
        L.ReLU(), L.LayerNormalization(), L.Dense(5), L.Softmax(dtype="float32")], name="mlp")
    x = rng.normal(size=(96, 12)).astype(np.float32)
    y = rng.integers(0, 5, size=96)
    return Case(model, x, y, "sparse_categorical_crossentropy")


@builder()
def two_towers(keras, rng):
    """Two inputs (one 3-d, flattened), a shared layer, a nested Sequential, two outputs."""
    L = keras.layers
    a = keras.Input((3, 4), name="a")
    b = keras.Input((6,), name="b")
    shared = L.Dense(8, activation="tanh", name="shared")
    ha = shared(L.Dense(6, name="pre_a")(L.Flatten()(a)))
    hb = shared(b)
    tower = keras.Sequential([keras.Input((8,)), L.Dense(10), L.Activation("relu"),
                              L.LayerNormalization(epsilon=1e-4), L.Dense(8)], name="tower")
    out1 = L.Activation("softmax", dtype="float32", name="probs")(L.Dense(3)(tower(ha)))
    out2 = L.Dense(2, name="value", dtype="float32")(L.ReLU(max_value=6.0)(tower(hb)))
    model = keras.Model({"a": a, "b": b}, [out1, out2], name="two_towers")
    x = {"a": rng.normal(size=(64, 3, 4)).astype(np.float32),
         "b": rng.normal(size=(64, 6)).astype(np.float32)}
    y = [rng.integers(0, 3, size=64), rng.normal(size=(64, 2)).astype(np.float32)]
    return Case(model, x, y, ["sparse_categorical_crossentropy", "mse"])


@builder("Conv2D", "BatchNormalization", "MaxPooling2D", "GlobalAveragePooling2D")
def cnn(keras, rng):
    L = keras.layers
    model = keras.Sequential([
        keras.Input((10, 10, 3)), L.Conv2D(8, 3, padding="same", activation="relu"),
        L.BatchNormalization(), L.MaxPooling2D(), L.Conv2D(6, 3), L.GlobalAveragePooling2D(),
        L.Dense(4), L.Activation("softmax", dtype="float32")], name="cnn")
    x = rng.normal(size=(48, 10, 10, 3)).astype(np.float32)
    y = rng.integers(0, 4, size=48)
    return Case(model, x, y, "sparse_categorical_crossentropy")


@builder("Conv2D", "BatchNormalization", "Add", "MaxPooling2D", "GlobalAveragePooling2D")
def residual_cnn(keras, rng):
    """Convolutions without activation followed by BatchNormalization and ReLU (folded at
    inference), a residual Add before a ReLU, pooling."""
    L = keras.layers
    inp = keras.Input((12, 12, 3))
    x = L.ReLU()(L.BatchNormalization()(L.Conv2D(8, 3, padding="same", use_bias=False)(inp)))
    y = L.ReLU()(L.BatchNormalization()(L.Conv2D(8, 3, padding="same")(x)))
    y = L.BatchNormalization()(L.Conv2D(8, 3, padding="same", use_bias=False)(y))
    x = L.MaxPooling2D()(L.ReLU()(L.Add()([x, y])))
    x = L.Activation("relu")(L.BatchNormalization()(L.Conv2D(6, 3, strides=2)(x)))
    out = L.Dense(4, activation="softmax", dtype="float32")(L.GlobalAveragePooling2D()(x))
    model = keras.Model(inp, out, name="residual_cnn")
    x = rng.normal(size=(48, 12, 12, 3)).astype(np.float32)
    y = rng.integers(0, 4, size=48)
    return Case(model, x, y, "sparse_categorical_crossentropy")


@builder("Conv1D", "GlobalMaxPooling1D")
def causal_conv1d(keras, rng):
    """A causal, dilated 1-D convolution stack over sequences."""
    L = keras.layers
    model = keras.Sequential([
        keras.Input((16, 4)), L.Conv1D(8, 3, padding="causal", activation="relu"),
        L.Conv1D(8, 3, padding="causal", dilation_rate=2, activation="tanh"),
        L.Conv1D(6, 2, strides=2), L.GlobalMaxPooling1D(),
        L.Dense(1, dtype="float32")], name="causal_conv1d")
    x = rng.normal(size=(40, 16, 4)).astype(np.float32)
    return Case(model, x, rng.normal(size=(40, 1)).astype(np.float32), "mse")


@builder("Embedding", "MultiHeadAttention", "Add")
def attention_block(keras, rng):
    """Token ids -> embedding -> self-attention with a residual Add -> LayerNormalization."""
    L = keras.layers
    tokens = keras.Input((7,), dtype="int32", name="tokens")
    x = L.Embedding(30, 8)(tokens)
    attended = L.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
    x = L.LayerNormalization()(L.Add()([x, attended]))
    x = L.Flatten()(L.Dense(8, activation="relu")(x))
    out = L.Activation("softmax", dtype="float32")(L.Dense(3)(x))
    model = keras.Model(tokens, out, name="attention_block")
    x = rng.integers(0, 30, size=(48, 7)).astype(np.int32)
    y = rng.integers(0, 3, size=48)
    return Case(model, x, y, "sparse_categorical_crossentropy")


@builder("Concatenate", "Reshape")
def merge_and_reshape(keras, rng):
    L = keras.layers
    a = keras.Input((6,), name="a")
    b = keras.Input((2, 3), name="b")
    x = L.Concatenate()([L.Dense(6)(a), L.Flatten()(b)])
    x = L.Flatten()(L.Dense(4, activation="relu")(L.Reshape((3, 4))(x)))
    model = keras.Model([a, b], L.Dense(2, dtype="float32")(x), name="merge_and_reshape")
    x = [rng.normal(size=(40, 6)).astype(np.float32),
         rng.normal(size=(40, 2, 3)).astype(np.float32)]
    return Case(model, x, rng.normal(size=(40, 2)).astype(np.float32), "mse")


# -- helpers -------------------------------------------------------------------------------------

def as_list(outputs):
    if isinstance(outputs, dict):
        return [np.asarray(outputs[k], np.float64) for k in sorted(outputs)]
    if isinstance(outputs, (list, tuple)):
        return [np.asarray(o, np.float64) for o in outputs]
    return [np.asarray(outputs, np.float64)]


def max_error(a, b):
    """The largest absolute difference over all outputs."""
    return max(float(np.max(np.abs(u - v))) for u, v in zip(as_list(a), as_list(b)))


def scale(a):
    return max(float(np.max(np.abs(u))) for u in as_list(a))


def keras_predict(model, x):
    return model.predict(x, verbose=0, batch_size=32)


@pytest.fixture
def keras_policy(keras):
    """Sets Keras's global policy for building a model; restores float32 afterwards."""
    def set_policy(name):
        keras.mixed_precision.set_global_policy(name)
    yield set_policy
    keras.mixed_precision.set_global_policy("float32")


def trained(keras, keras_policy, name, policy, seed=0):
    """The builder's model trained briefly under ``policy``, and the same model (same weights)
    under float32: Keras's reference prediction."""
    missing = [c for c in BUILDERS[name].requires if c not in layers._CLASSES]
    if missing:
        pytest.skip(f"mixedcore.layers has no {missing} yet")
    keras.utils.set_random_seed(seed)
    keras_policy(policy)
    case = BUILDERS[name](keras, np.random.default_rng(seed))
    case.model.compile(optimizer="adam", loss=case.loss)
    case.model.fit(case.x, case.y, epochs=2, batch_size=16, verbose=0)
    keras_policy("float32")
    reference = BUILDERS[name](keras, np.random.default_rng(seed)).model
    reference.set_weights(case.model.get_weights())
    return case, reference


def save_with_keras(model, path, fmt):
    if fmt == ".weights.h5":
        model.save_weights(path)
    else:
        model.save(path)


def load_in_mixedcore(kmodel, path, fmt):
    if fmt == ".weights.h5":
        model = models.model_from_json(kmodel.to_json())
        model.load_weights(path)
        return model
    return models.load_model(path)


def load_in_keras(keras, kmodel, path, fmt):
    if fmt == ".weights.h5":
        model = keras.models.model_from_json(kmodel.to_json())
        model.load_weights(path)
        return model
    return keras.models.load_model(path)


def policies_of(model):
    """{layer name: policy name} of a Keras or mixedcore model, nested models walked."""
    out = {}
    for layer in model.layers:
        if hasattr(layer, "layers"):
            out.update(policies_of(layer))
        elif type(layer).__name__ != "InputLayer":
            out[layer.name] = layer.dtype_policy.name
    return out


# -- Keras's files in mixedcore ------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_keras_files_load_and_predict(keras, keras_policy, tmp_path, name, policy, fmt):
    case, reference = trained(keras, keras_policy, name, policy)
    path = tmp_path / f"model{fmt}"
    save_with_keras(case.model, path, fmt)
    model = load_in_mixedcore(case.model, path, fmt)
    assert policies_of(model) == policies_of(case.model)
    for ours, theirs in zip(model.get_weights(), case.model.get_weights()):
        np.testing.assert_array_equal(ours, np.asarray(theirs))
    check_predictions(model, case, reference, policy)


def check_predictions(model, case, reference, policy):
    """float32: mixedcore's predictions are Keras's to 1e-5 (relative to the outputs' scale);
    mixed: no farther from Keras's float32 predictions than 4 times Keras's own mixed ones."""
    expected = keras_predict(reference, case.x)             # Keras, float32
    got = model.predict(case.x, verbose=0)
    if policy == "float32":
        assert max_error(got, expected) <= 1e-5 * scale(expected)
        for u, v in zip(as_list(got), as_list(expected)):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-5 * scale(expected))
        return
    keras_mixed = keras_predict(case.model, case.x)
    theirs = max_error(keras_mixed, expected)
    ours = max_error(got, expected)
    assert theirs > 0                                       # the policy did change Keras's result
    assert ours <= 4 * theirs, (ours, theirs)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_keras_npz_variant_of_the_archive(keras, keras_policy, tmp_path, name, policy):
    """Keras's saving_lib can put the weights in model.weights.npz (pickled variables) instead
    of model.weights.h5; mixedcore reads them through its restricted unpickler."""
    from keras.src.saving import saving_lib
    case, reference = trained(keras, keras_policy, name, policy)
    saving_lib.save_model(case.model, str(tmp_path / "n.keras"), weights_format="npz")
    with zipfile.ZipFile(tmp_path / "n.keras") as z:
        assert "model.weights.npz" in z.namelist() and "model.weights.h5" not in z.namelist()
    model = models.load_model(tmp_path / "n.keras")
    assert policies_of(model) == policies_of(case.model)
    for ours, theirs in zip(model.get_weights(), case.model.get_weights()):
        np.testing.assert_array_equal(ours, np.asarray(theirs))
    check_predictions(model, case, reference, policy)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_keras_files_served_under_another_policy(keras, keras_policy, tmp_path, policy):
    """A model trained under mixed_float16 in Keras, served by mixedcore as float32 and
    mixed_bfloat16: the float32 softmax stays float32."""
    case, reference = trained(keras, keras_policy, "mlp", "mixed_float16")
    case.model.save(tmp_path / "m.keras")
    model = models.load_model(tmp_path / "m.keras", dtype_policy=policy)
    stored = policies_of(case.model)
    assert policies_of(model) == {k: policy if v == "mixed_float16" else v
                                  for k, v in stored.items()}
    expected = keras_predict(reference, case.x)
    got = model.predict(case.x, verbose=0)
    if policy == "float32":
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * scale(expected))
    else:
        keras_policy("mixed_bfloat16")
        keras_bf16 = BUILDERS["mlp"](keras, np.random.default_rng(0)).model
        keras_policy("float32")
        keras_bf16.set_weights(case.model.get_weights())
        theirs = max_error(keras_predict(keras_bf16, case.x), expected)
        assert max_error(got, expected) <= 4 * theirs


# -- mixedcore's files in Keras ------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_mixedcore_files_load_in_keras(keras, keras_policy, tmp_path, name, policy, fmt):
    case, _ = trained(keras, keras_policy, name, policy)
    case.model.save(tmp_path / "keras.keras")
    model = models.load_model(tmp_path / "keras.keras")
    path = tmp_path / f"ours{fmt}"
    if fmt == ".weights.h5":
        model.save_weights(path)
    else:
        model.save(path)
    again = load_in_keras(keras, case.model, path, fmt)
    assert policies_of(again) == policies_of(case.model)
    assert [l.name for l in again.layers] == [l.name for l in case.model.layers]
    for a, b in zip(again.get_weights(), case.model.get_weights()):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    expected = keras_predict(case.model, case.x)
    got = keras_predict(again, case.x)
    for u, v in zip(as_list(got), as_list(expected)):
        np.testing.assert_array_equal(u, v)
    # and what Keras reads back is what mixedcore predicts (float32: to 1e-5)
    if policy == "float32":
        assert max_error(model.predict(case.x, verbose=0), got) <= 1e-5 * scale(got)


def test_mixedcore_compile_state_reaches_keras(keras, keras_policy, tmp_path):
    case, _ = trained(keras, keras_policy, "mlp", "float32")
    model = models.Sequential.from_config(case.model.get_config())
    model.set_weights(case.model.get_weights())
    from mixedcore import optimizers
    model.compile(optimizer=optimizers.Adam(learning_rate=0.003),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.save(tmp_path / "c.keras")
    again = keras.models.load_model(tmp_path / "c.keras")
    assert type(again.optimizer).__name__ == "Adam"
    assert float(again.optimizer.learning_rate) == pytest.approx(0.003)
    config = json.loads(model.to_json())
    assert config["compile_config"]["loss"] == "sparse_categorical_crossentropy"
    again.fit(case.x, case.y, epochs=1, verbose=0)       # Keras trains what it loaded
