"""Files written by tf.keras 2.x (tf-keras 2.21, TensorFlow 2.21) load in mixedcore and predict as
tf.keras did.

The files are in ``tests/data/tf_keras/``, written by ``tools/make_tf_keras_files.py`` (which needs
TensorFlow; these tests do not): every model as a legacy ``.h5``, a tf.keras ``.keras``, a
``.weights.h5`` and a legacy weights ``_ckpt.h5``, with its ``model.to_json()`` (``.json``) and its
input and tf.keras prediction (``.ref.npz``).  The weight-only files are loaded into the model
``models.model_from_json`` builds from the JSON.

The ``layers_*`` models hold every layer class of ``mixedcore.layers`` that tf.keras 2.x has,
with non-default arguments (strides, dilation, groups, same / valid / causal padding, ReLU's
three arguments, bilinear resizing...) and random biases and statistics.

Tolerances, relative to ``max|ref|``: 1e-4 for float32 (measured 1.4e-7 to 3.2e-7); 4e-3 under
mixed_float16 and 3e-2 under mixed_bfloat16, about 5x the largest measured gap (4.6e-4 and
6.7e-4 for the CNNs, 8.1e-4 for ``layers_image_mixed_float16``; 6.2e-3 under mixed_bfloat16),
the same at every ISA level and about the same as mixedcore's float32 result against tf.keras's
16-bit one (7.5e-4 for ``layers_image_mixed_float16``): the gap is tf.keras's rounding to 16
bits, a few units in the last place of float16 and bfloat16.
"""
import json
import os
import shutil
import warnings

import h5py
import numpy as np
import pytest

from mixedcore import layers, models, optimizers
from mixedcore.loss_scale import FixedLossScale

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tf_keras")
TOLERANCE = {"float32": 1e-4, "mixed_float16": 4e-3, "mixed_bfloat16": 3e-2}
MODELS = {
    "mlp_float32": "float32",
    "mlp_sequential_float32": "float32",
    "cnn_mixed_float16": "mixed_float16",
    "text_mixed_bfloat16": "mixed_bfloat16",
    "cnn_compiled_mixed_float16": "mixed_float16",
    "layers_image_float32": "float32",
    "layers_image_mixed_float16": "mixed_float16",
    "layers_sequence_float32": "float32",
    "layers_masked_text_float32": "float32",
    "layers_merge_float32": "float32",
}
# the layer a mixed model keeps in float32 (its head)
FLOAT32_HEAD = {"cnn_mixed_float16": "probs", "cnn_compiled_mixed_float16": "probs",
                "layers_image_mixed_float16": "logits"}
FORMS = [".h5", ".keras", ".weights.h5", "_ckpt.h5"]


def path(name):
    return os.path.join(DATA, name)


def reference(name):
    with np.load(path(f"{name}.ref.npz")) as ref:
        return ref["x"], ref["y"]


def json_text(name):
    with open(path(f"{name}.json"), encoding="utf-8") as fh:
        return fh.read()


def load(name, form, **kwargs):
    """The model of ``name`` from one of its files; no warnings allowed."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if form in (".h5", ".keras"):
            return models.load_model(path(name + form), **kwargs)
        model = models.model_from_json(json_text(name))
        model.load_weights(path(name + form))
        return model


def relative_error(model, name):
    x, y = reference(name)
    pred = np.asarray(model.predict(x, verbose=0), dtype=np.float32)
    assert pred.shape == y.shape
    return float(np.abs(pred - y).max() / np.abs(y).max())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", list(MODELS))
def test_loads_and_predicts_like_tf_keras(name, form):
    model = load(name, form)
    policy = MODELS[name]
    err = relative_error(model, name)
    assert err <= TOLERANCE[policy], f"{name}{form}: relative error {err:.3g}"
    # the layers keep the file's policies: the model's, and float32 on a mixed model's head
    policies = {layer.name: layer.dtype_policy.name for layer in model.layers
                if type(layer).__name__ != "InputLayer"}
    if name in FLOAT32_HEAD:
        assert policies.pop(FLOAT32_HEAD[name]) == "float32"
    assert set(policies.values()) == {policy}


def test_weights_from_every_form_are_the_same():
    """The four files of a model hold the same weights, and mixedcore reads them alike."""
    for name in MODELS:
        weights = [load(name, form).get_weights() for form in FORMS]
        for other in weights[1:]:
            assert len(other) == len(weights[0])
            for a, b in zip(weights[0], other):
                np.testing.assert_array_equal(a, b)


def test_the_comparison_detects_a_wrong_weight():
    """Moving statistics left at their initial values put the prediction far outside the
    tolerance: the check above can fail."""
    model = load("cnn_mixed_float16", ".h5")
    bn = model.get_layer("dw_bn")
    gamma, beta, mean, var = bn.get_weights()
    assert np.abs(mean).max() > 0.1 and np.abs(var - 1).max() > 0.1
    bn.set_weights([gamma, beta, np.zeros_like(mean), np.ones_like(var)])
    assert relative_error(model, "cnn_mixed_float16") > 10 * TOLERANCE["mixed_float16"]


def test_compiled_h5_comes_back_with_its_loss_scale_optimizer():
    model = load("cnn_compiled_mixed_float16", ".h5")
    assert model.compiled
    opt = model.optimizer
    assert type(opt) is optimizers.LossScaleOptimizer          # the file's LossScaleOptimizerV3
    assert type(opt.inner_optimizer) is optimizers.Adam
    assert opt.dynamic and opt.initial_scale == 32768.0 and opt.dynamic_growth_steps == 2000
    assert opt.inner_optimizer.learning_rate == pytest.approx(1e-3)
    assert (opt.inner_optimizer.beta_1, opt.inner_optimizer.beta_2) == (0.9, 0.999)
    assert type(model.loss).__name__ == "SparseCategoricalCrossentropy"
    assert model._metric_ids == ["accuracy"]


def test_compiled_keras_archive_comes_back_with_the_optimizer_it_names():
    """tf.keras's .keras keeps the optimizer given to compile() (Adam), not the wrapper:
    loaded as tf.keras loads it; under a mixed_float16 model policy compile wraps it."""
    model = load("cnn_compiled_mixed_float16", ".keras")
    assert model.compiled and type(model.optimizer) is optimizers.Adam
    model = load("cnn_compiled_mixed_float16", ".keras", dtype_policy="mixed_float16")
    assert type(model.optimizer) is optimizers.LossScaleOptimizer
    assert type(model.optimizer.inner_optimizer) is optimizers.Adam
    assert relative_error(model, "cnn_compiled_mixed_float16") <= TOLERANCE["mixed_float16"]


@pytest.mark.parametrize("name", ["mlp_float32", "cnn_mixed_float16", "text_mixed_bfloat16"])
def test_uncompiled_files_load_uncompiled(name):
    for form in (".h5", ".keras"):
        assert not load(name, form).compiled


def test_compiled_model_trains_after_loading():
    model = load("cnn_compiled_mixed_float16", ".h5")
    x, _ = reference("cnn_compiled_mixed_float16")
    y = np.arange(len(x)) % 10
    before = model.get_layer("stem").get_weights()[0].copy()
    model.fit(x, y, epochs=1, batch_size=8, verbose=0)
    assert model.optimizer.iterations == 1
    assert not np.array_equal(before, model.get_layer("stem").get_weights()[0])


# -- tf.keras's config spellings ----------------------------------------------------------------

def functional_json(*entries, input_shape=(None, 6, 6, 4), input_dtype="float32"):
    """A tf.keras 2.x functional model config: an InputLayer, then ``entries`` (class_name,
    config) each called on the previous one, in tf.keras's list form."""
    layers_ = [{"class_name": "InputLayer", "config": {"batch_input_shape": list(input_shape),
                                                       "dtype": input_dtype, "name": "in"},
                "name": "in", "inbound_nodes": []}]
    previous = "in"
    for k, (cls, config) in enumerate(entries):
        name = config.setdefault("name", f"l{k}")
        layers_.append({"module": "keras.layers", "class_name": cls, "config": config,
                        "registered_name": None, "name": name,
                        "inbound_nodes": [[[previous, 0, 0, {}]]]})
        previous = name
    return json.dumps({"class_name": "Functional", "config": {
        "name": "m", "layers": layers_, "input_layers": [["in", 0, 0]],
        "output_layers": [[previous, 0, 0]]}, "keras_version": "2.21.0",
        "backend": "tensorflow"})


def test_batch_normalization_axis_as_a_list():
    model = models.model_from_json(functional_json(("BatchNormalization", {"axis": [3]})))
    bn = model.get_layer("l0")
    assert bn.axis == 3 and bn.moving_mean.shape == (4,)
    assert layers.BatchNormalization(axis=(-1,)).axis == -1
    with pytest.raises(ValueError, match=r"model_from_json: .*BatchNormalization 'l0': axis must "
                                         r"be an int .* got \[1, 3\]; normalizing over several"):
        models.model_from_json(functional_json(("BatchNormalization", {"axis": [1, 3]})))
    with pytest.raises(ValueError, match=r"BatchNormalization 'bn': axis .* got \[\]"):
        layers.BatchNormalization(axis=[], name="bn")
    with pytest.raises(TypeError, match=r"BatchNormalization: axis must be an int, got str"):
        layers.BatchNormalization(axis=["3"])


def test_batch_normalization_virtual_batch_size():
    layers.BatchNormalization(virtual_batch_size=None)
    with pytest.raises(ValueError, match=r"BatchNormalization 'bn': virtual_batch_size=4 is not "
                                         r"supported"):
        layers.BatchNormalization(virtual_batch_size=4, name="bn")


def mha_config(**extra):
    config = {"name": "mha", "num_heads": 2, "key_dim": 3, "value_dim": 3, "dropout": 0.0,
              "use_bias": True, "output_shape": None, "attention_axes": [1],
              "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                                     "config": {"seed": None}, "registered_name": None},
              "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros",
                                   "config": {}, "registered_name": None},
              "kernel_regularizer": None, "bias_regularizer": None,
              "activity_regularizer": None, "kernel_constraint": None, "bias_constraint": None,
              "query_shape": [None, 5, 4], "key_shape": [None, 7, 6], "value_shape": [None, 7, 6],
              "softmax_robust_masking": False}
    config.update(extra)
    return config


def test_multi_head_attention_tf_keras_config():
    layer = layers.MultiHeadAttention.from_config(mha_config())
    assert layer.built                      # built for tf.keras's query/key/value shapes
    assert layer.query_dense.kernel.shape == (4, 2, 3)
    assert layer.key_dense.kernel.shape == (6, 2, 3)
    assert layer.output_dense.kernel.shape == (2, 3, 4)
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 5, 4)).astype(np.float32)
    v = rng.normal(size=(2, 7, 6)).astype(np.float32)
    assert layer(q, v).shape == (2, 5, 4)
    robust = layers.MultiHeadAttention.from_config(mha_config(softmax_robust_masking=True))
    robust.set_weights(layer.get_weights())
    np.testing.assert_array_equal(robust(q, v), layer(q, v))
    unbuilt = layers.MultiHeadAttention.from_config(
        mha_config(query_shape=None, key_shape=None, value_shape=None))
    assert not unbuilt.built
    different_key = layers.MultiHeadAttention.from_config(mha_config(key_shape=[None, 7, 2]))
    assert different_key.key_dense.kernel.shape == (2, 2, 3)
    with pytest.raises(TypeError, match=r"MultiHeadAttention 'mha': softmax_robust_masking must "
                                        r"be a bool, got str: 'yes'"):
        layers.MultiHeadAttention.from_config(mha_config(softmax_robust_masking="yes"))
    with pytest.raises(ValueError, match=r"MultiHeadAttention 'mha': query_shape must be a "
                                         r"shape .* got 'abc'"):
        layers.MultiHeadAttention.from_config(mha_config(query_shape="abc"))
    with pytest.raises(ValueError, match=r"query_shape and value_shape must be given together"):
        layers.MultiHeadAttention.from_config(mha_config(value_shape=None))
    with pytest.raises(ValueError, match=r"built for query / key / value features"):
        layers.MultiHeadAttention.from_config(mha_config())(v, v)


def test_convolution_keys_tf_keras_writes_without_using():
    """tf.keras's DepthwiseConv2D and SeparableConv2D configs carry its convolution base's
    groups / kernel_* keys, which its layers do not read."""
    inert = {"groups": 1, "kernel_initializer": {"class_name": "GlorotUniform", "config": {}},
             "kernel_regularizer": None, "kernel_constraint": None}
    text = functional_json(
        ("DepthwiseConv2D", {"kernel_size": [3, 3], "padding": "same", "groups": 1}),
        ("SeparableConv2D", {"filters": 5, "kernel_size": [3, 3], **inert}))
    model = models.model_from_json(text)
    assert model.outputs[0].shape == (None, 4, 4, 5)


def test_softmax_robust_masking():
    text = functional_json(("Softmax", {"axis": -1, "robust_masking": True}),
                           input_shape=(None, 4))
    assert models.model_from_json(text).get_layer("l0").axis == -1
    with pytest.raises(ValueError, match=r"model_from_json: .*layer 'l0' \(Softmax\) has "
                                         r"robust_masking='on'; expected a bool"):
        models.model_from_json(functional_json(("Softmax", {"robust_masking": "on"}),
                                               input_shape=(None, 4)))


def test_tf_keras_optimizer_names():
    inner = {"module": "keras.optimizers", "class_name": "Adam",
             "config": {"name": "Adam", "learning_rate": 0.01, "is_legacy_optimizer": False,
                        "jit_compile": False, "use_ema": False}, "registered_name": None}
    for name in ("LossScaleOptimizerV3", "lossscaleoptimizerv3", "LossScaleOptimizerV1",
                 "LossScaleOptimizer"):
        opt = optimizers.deserialize({"class_name": name, "config": {
            "inner_optimizer": inner, "dynamic": True, "initial_scale": 256.0,
            "dynamic_growth_steps": 100}})
        assert type(opt) is optimizers.LossScaleOptimizer
        assert (opt.initial_scale, opt.dynamic_growth_steps) == (256.0, 100)
        assert opt.inner_optimizer.learning_rate == 0.01
    fixed = optimizers.deserialize({"class_name": "LossScaleOptimizerV3", "config": {
        "inner_optimizer": inner, "dynamic": False, "initial_scale": 128.0,
        "dynamic_growth_steps": None}})
    assert not fixed.dynamic and isinstance(fixed._loss_scale, FixedLossScale)
    assert fixed.loss_scale == 128.0
    for name, cls in (("ExperimentalAdam", optimizers.Adam), ("ExperimentalSGD", optimizers.SGD),
                      ("experimentaladagrad", optimizers.Adagrad), ("RMSPROP", optimizers.RMSprop),
                      ("adamw", optimizers.AdamW)):
        opt = optimizers.deserialize({"class_name": name, "config": {"learning_rate": 0.5}})
        assert type(opt) is cls and opt.learning_rate == 0.5
    with pytest.raises(ValueError, match=r"deserialize: unknown optimizer class 'Ftrl'"):
        optimizers.deserialize({"class_name": "Ftrl", "config": {}})


def test_tf_keras_legacy_optimizers():
    # legacy Adam and SGD update as Keras 3's: read
    adam = optimizers.deserialize({"class_name": "Adam", "config": {
        "name": "Adam", "learning_rate": 0.002, "decay": 0.0, "beta_1": 0.8, "beta_2": 0.99,
        "epsilon": 1e-7, "amsgrad": False, "is_legacy_optimizer": True}})
    assert (adam.learning_rate, adam.beta_1) == (0.002, 0.8)
    # legacy RMSprop and Adagrad add epsilon outside the square root: refused
    with pytest.raises(ValueError, match=r"RMSprop.from_config: the config is that of "
                                         r"tf.keras's legacy RMSprop \(is_legacy_optimizer=True"):
        optimizers.deserialize({"class_name": "RMSprop", "config": {
            "name": "RMSprop", "learning_rate": 0.001, "decay": 0.0, "rho": 0.9,
            "momentum": 0.0, "epsilon": 1e-7, "centered": False, "is_legacy_optimizer": True}})
    with pytest.raises(ValueError, match=r"Adagrad.from_config: .*is_legacy_optimizer='absent', "
                                         r"decay=0.0\)"):
        optimizers.deserialize({"class_name": "Adagrad", "config": {
            "name": "Adagrad", "learning_rate": 0.001, "decay": 0.0,
            "initial_accumulator_value": 0.1, "epsilon": 1e-7}})
    rms = optimizers.deserialize({"class_name": "RMSprop", "config": {
        "name": "RMSprop", "learning_rate": 0.001, "rho": 0.8, "is_legacy_optimizer": False,
        "use_ema": False}})
    assert rms.rho == 0.8


def test_legacy_optimizer_in_a_file_leaves_the_model_uncompiled(tmp_path):
    import h5py
    target = tmp_path / "legacy_rmsprop.h5"
    shutil.copy(path("cnn_compiled_mixed_float16.h5"), target)
    with h5py.File(target, "r+") as h5:
        training = json.loads(h5.attrs["training_config"])
        training["optimizer_config"]["config"]["inner_optimizer"] = {
            "class_name": "RMSprop", "config": {"name": "RMSprop", "learning_rate": 0.001,
                                                "decay": 0.0, "rho": 0.9, "momentum": 0.0,
                                                "epsilon": 1e-7, "centered": False,
                                                "is_legacy_optimizer": True}}
        h5.attrs["training_config"] = json.dumps(training).encode("utf-8")
    with pytest.warns(UserWarning, match=r"load_model: .*legacy_rmsprop.h5: the model was saved "
                                         r"compiled, but .*legacy RMSprop"):
        model = models.load_model(target)
    assert not model.compiled
    assert relative_error(model, "cnn_compiled_mixed_float16") <= TOLERANCE["mixed_float16"]


def test_one_output_is_an_array_in_keras2_files_only():
    """Keras 2.x writes every single output as a list of one and reads it back as the output;
    Keras 3 keeps the structure, so a list of one stays a list there."""
    text = functional_json(("Dense", {"units": 3}), input_shape=(None, 4))
    x = np.ones((2, 4), np.float32)
    assert isinstance(models.model_from_json(text).predict(x, verbose=0), np.ndarray)
    keras3 = json.loads(text)
    del keras3["keras_version"]
    out = models.model_from_json(json.dumps(keras3)).predict(x, verbose=0)
    assert isinstance(out, list) and len(out) == 1 and out[0].shape == (2, 3)
    # a functional model nested in a Keras 2.x Sequential (one tensor between its layers)
    inner = json.loads(text)
    outer = {"class_name": "Sequential", "keras_version": "2.15.0", "config": {
        "name": "outer", "layers": [
            {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 4],
                                                    "dtype": "float32", "name": "x"}},
            {"module": "tf_keras.src.engine.functional", "class_name": "Functional",
             "config": inner["config"]},
            {"class_name": "Dense", "config": {"name": "head", "units": 2}}]}}
    assert models.model_from_json(json.dumps(outer)).predict(x, verbose=0).shape == (2, 2)
    del outer["keras_version"]
    with pytest.raises(ValueError, match=r"layer 'm' returns several outputs"):
        models.model_from_json(json.dumps(outer))


def test_module_paths_of_keras_and_tf_keras():
    """The ``module`` of an entry (keras.layers, keras.src.*, tf_keras.src.*) plays no part."""
    config = json.loads(functional_json(("Dense", {"units": 3}), input_shape=(None, 4)))
    config["module"] = "tf_keras.src.engine.functional"
    config["registered_name"] = "Functional"
    dense = config["config"]["layers"][1]
    dense["module"] = "keras.src.layers.core.dense"
    dense["config"]["dtype"] = {"module": "keras.src.mixed_precision.policy",
                                "class_name": "Policy", "config": {"name": "mixed_float16"},
                                "registered_name": None}
    dense["config"]["kernel_initializer"] = {"module": "keras.src.initializers",
                                             "class_name": "Ones", "config": {},
                                             "registered_name": None}
    model = models.model_from_json(json.dumps(config))
    assert model.get_layer("l0").dtype_policy.name == "mixed_float16"
    np.testing.assert_array_equal(model.get_layer("l0").get_weights()[0], np.ones((4, 3)))
    for module in ("keras.optimizers", "keras.src.optimizers", "keras.optimizers.legacy",
                   "tf_keras.src.optimizers.adam"):
        opt = optimizers.deserialize({"module": module, "class_name": "Adam",
                                      "config": {"learning_rate": 0.25},
                                      "registered_name": None})
        assert type(opt) is optimizers.Adam and opt.learning_rate == 0.25


# -- every layer class ---------------------------------------------------------------------------

LAYER_MODELS = [name for name in MODELS if name.startswith("layers_")]
# mixedcore's layer classes that no tf.keras 2.x file can hold: Layer is the base class; tf.keras
# writes the function of every Lambda as Python bytecode, which mixedcore never runs (see
# test_tf_keras_lambda_is_refused)
NOT_IN_TF_KERAS_FILES = {"Layer", "Lambda"}


def layer_classes(config):
    """The class names of the layers in a model config, nested models included."""
    found = set()
    for entry in config["config"]["layers"]:
        if entry["class_name"] in ("Functional", "Sequential", "Model"):
            found |= layer_classes(entry)
        else:
            found.add(entry["class_name"])
    return found


def test_the_files_hold_every_layer_class_tf_keras_has():
    classes = {name for name in layers.__all__ if isinstance(getattr(layers, name), type)}
    written = set().union(*(layer_classes(json.loads(json_text(name))) for name in MODELS))
    assert classes - NOT_IN_TF_KERAS_FILES <= written, \
        sorted(classes - NOT_IN_TF_KERAS_FILES - written)
    # and each of them in a float32 model, where the comparison is tightest
    float32 = set().union(*(layer_classes(json.loads(json_text(name))) for name in LAYER_MODELS
                            if MODELS[name] == "float32"))
    assert classes - NOT_IN_TF_KERAS_FILES <= float32


def edited_model(name, layer, key, value):
    """The model of ``name`` from its JSON with ``layer``'s ``key`` set to ``value``, with the
    file's weights."""
    config = json.loads(json_text(name))
    entries = [e for e in config["config"]["layers"] if e["config"]["name"] == layer]
    assert len(entries) == 1 and key in entries[0]["config"]
    assert entries[0]["config"][key] != value
    entries[0]["config"][key] = value
    model = models.model_from_json(json.dumps(config))
    model.load_weights(path(f"{name}.weights.h5"))
    return model


ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid", "softmax", "elu", "selu", "softplus",
               "softsign", "swish", "mish", "exponential", "linear")


@pytest.mark.parametrize("name, layer, key, value", [
    ("layers_image_float32", "relu_full", "threshold", 0.0),
    ("layers_image_float32", "relu_full", "negative_slope", 0.0),
    ("layers_image_float32", "relu_full", "max_value", None),
    ("layers_image_float32", "leaky", "alpha", 0.3),                  # tf.keras's name
    ("layers_image_float32", "elu", "alpha", 1.0),
    ("layers_image_float32", "up_bilinear", "interpolation", "nearest"),
    ("layers_image_float32", "resize_bilinear", "interpolation", "nearest"),
    ("layers_image_float32", "resize_nearest", "interpolation", "bilinear"),
    ("layers_image_float32", "rescale", "offset", 0.0),
    ("layers_image_float32", "norm_given", "variance", [1.0, 1.0, 1.0]),
    ("layers_sequence_float32", "softmax_time", "axis", -1),
    ("layers_sequence_float32", "conv_causal_groups", "padding", "same"),
    ("layers_sequence_float32", "ln", "epsilon", 0.5),
    ("layers_masked_text_float32", "embed", "mask_zero", False),
    ("layers_merge_float32", "custom_scale", "scale", 1.0),
] + [("layers_merge_float32", f"act_{act}", "activation",
      "tanh" if act == "softsign" else "softsign") for act in ACTIVATIONS])
def test_the_arguments_in_the_files_are_honoured(name, layer, key, value):
    """Each argument the comparison relies on moves the prediction far outside the tolerance
    when changed: the files' values are read, not defaults (the mask of Embedding(mask_zero)
    among them: without it MultiHeadAttention and the pooling see the padding)."""
    err = relative_error(edited_model(name, layer, key, value), name)
    assert err > 10 * TOLERANCE[MODELS[name]], f"{layer}.{key}={value!r}: {err:.3g}"


def test_adapted_normalization_statistics_come_from_the_weights():
    model = load("layers_image_float32", ".weights.h5")
    norm = model.get_layer("norm_adapted")
    mean, variance, count = norm.get_weights()
    assert mean.shape == variance.shape == (3,) and int(count) == 64 * 10 * 10
    np.testing.assert_allclose(mean, 0.4, atol=0.05)
    np.testing.assert_allclose(variance, 0.49, rtol=0.1)
    norm.set_weights([np.zeros_like(mean), np.ones_like(variance), count])
    assert relative_error(model, "layers_image_float32") > 10 * TOLERANCE["float32"]


TF_KERAS_IMAGE = (None, 4, 4, 3)


@pytest.mark.parametrize("entry, shape, message", [
    (("UpSampling2D", {"size": [2, 2], "interpolation": "bicubic",
                       "data_format": "channels_last"}), TF_KERAS_IMAGE,
     r"UpSampling2D 'l0': interpolation 'bicubic' is not supported"),
    (("UpSampling2D", {"size": [2, 2], "interpolation": "area", "data_format": "channels_last"}),
     TF_KERAS_IMAGE, r"UpSampling2D 'l0': interpolation 'area' is not supported"),
    (("Resizing", {"height": 8, "width": 6, "interpolation": "bilinear",
                   "crop_to_aspect_ratio": True}), TF_KERAS_IMAGE,
     r"Resizing 'l0': crop_to_aspect_ratio=True is not supported"),
    (("Resizing", {"height": 8, "width": 8, "interpolation": "lanczos3",
                   "crop_to_aspect_ratio": False}), TF_KERAS_IMAGE,
     r"Resizing 'l0': interpolation must be 'bilinear' or 'nearest', got 'lanczos3'"),
    (("Resizing", {"height": 2, "width": 6, "interpolation": "bilinear",
                   "crop_to_aspect_ratio": False}), TF_KERAS_IMAGE,
     r"Resizing 'l0': bilinear shrinking from 4x4 to 2x6 is not supported .*"
     r"interpolation='bilinear', height=2, width=6"),
    (("CenterCrop", {"height": 8, "width": 3}), TF_KERAS_IMAGE,
     r"CenterCrop 'l0': inputs of 4x4 are smaller than the 8x3 window \(height=8, width=3\)"),
    (("MaxPooling2D", {"pool_size": [2, 2], "padding": "valid", "strides": [2, 2],
                       "data_format": "channels_first"}), TF_KERAS_IMAGE,
     r"MaxPooling2D 'l0': data_format='channels_first' is not supported"),
    (("AveragePooling1D", {"pool_size": [2], "padding": "valid", "strides": [2],
                           "data_format": "channels_first"}), (None, 4, 3),
     r"AveragePooling1D 'l0': data_format='channels_first' is not supported"),
    (("GlobalAveragePooling1D", {"data_format": "channels_first", "keepdims": False}),
     (None, 4, 3), r"GlobalAveragePooling1D 'l0': data_format='channels_first' is not supported"),
    (("PReLU", {"alpha_initializer": {"class_name": "Zeros", "config": {}},
                "alpha_regularizer": None, "shared_axes": None,
                "alpha_constraint": {"class_name": "NonNeg", "config": {}}}), (None, 4),
     r"PReLU 'l0': alpha_constraint=\{'class_name': 'NonNeg', 'config': \{\}\} is not "
     r"supported"),
])
def test_tf_keras_arguments_mixedcore_cannot_honour(entry, shape, message):
    """A tf.keras argument that changes the result and that mixedcore lacks is a ValueError at
    loading naming the layer, the argument and its value (not a silently different model, nor
    an error at the first predict)."""
    with pytest.raises(ValueError, match=r"model_from_json: .*" + message):
        models.model_from_json(functional_json(entry, input_shape=shape))


def test_tf_keras_lambda_is_refused():
    """tf.keras writes the function of any Lambda (a named one too) as Python bytecode."""
    text = functional_json(("Lambda", {"function": ["4wEAAAAAAAAA", None, None],
                                       "function_type": "lambda", "module": "__main__",
                                       "output_shape": None, "output_shape_type": "raw",
                                       "output_shape_module": None, "arguments": {}}),
                           input_shape=(None, 4))
    with pytest.raises(ValueError, match=r"model_from_json: .*layer 'l0' is a Lambda"):
        models.model_from_json(text)


# -- bad files -----------------------------------------------------------------------------------

def test_missing_attention_weights_are_named(tmp_path):
    import h5py
    target = tmp_path / "no_value.weights.h5"
    shutil.copy(path("text_mixed_bfloat16.weights.h5"), target)
    with h5py.File(target, "r+") as h5:
        del h5["layers/multi_head_attention/_value_dense"]
    model = models.model_from_json(json_text("text_mixed_bfloat16"))
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(ValueError, match=r"load_weights: .*no_value.weights.h5: the weights do "
                                         r"not fit the model: layers/multi_head_attention/"
                                         r"value_dense is missing from the file \(layer 'mha'"):
        model.load_weights(target)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_truncated_tf_keras_file(tmp_path):
    target = tmp_path / "cut.h5"
    with open(path("cnn_mixed_float16.h5"), "rb") as fh:
        target.write_bytes(fh.read()[:5000])
    with pytest.raises(ValueError, match=r"load_model: .*cut.h5"):
        models.load_model(target)


def test_weights_of_another_model_are_refused():
    model = models.model_from_json(json_text("cnn_mixed_float16"))
    with pytest.raises(ValueError, match=r"load_weights: .*mlp_float32.weights.h5: the weights "
                                         r"do not fit the model"):
        model.load_weights(path("mlp_float32.weights.h5"))


def test_keras2_hard_sigmoid_is_refused_not_misread(tmp_path):
    """Keras 2.x's hard_sigmoid is clip(0.2 x + 0.5, 0, 1), Keras 3's clip(x / 6 + 0.5, 0, 1):
    a Keras 2.x file using it is refused, by JSON and from its files, wherever it appears."""
    config = json.loads(json_text("mlp_float32"))
    dense = next(e for e in config["config"]["layers"] if e["class_name"] == "Dense")
    dense["config"]["activation"] = "hard_sigmoid"
    with pytest.raises(ValueError, match=r"model_from_json: .*layer '.*' uses activation "
                                         r"'hard_sigmoid'.*0\.2 \* x"):
        models.model_from_json(json.dumps(config))
    src = h5py.File(os.path.join(DATA, "mlp_float32.h5"), "r")
    path = tmp_path / "hs.h5"
    with src, h5py.File(path, "w") as dst:
        for key in src:
            src.copy(key, dst)
        for key, value in src.attrs.items():
            dst.attrs[key] = value
        dst.attrs["model_config"] = json.dumps(config)
    with pytest.raises(ValueError, match=r"hs\.h5: layer '.*' uses activation 'hard_sigmoid'"):
        models.load_model(path)
    config3 = json.loads(json_text("mlp_float32"))
    config3.pop("keras_version", None)           # Keras 3's meaning: read
    next(e for e in config3["config"]["layers"]
         if e["class_name"] == "Dense")["config"]["activation"] = "hard_sigmoid"
    models.model_from_json(json.dumps(config3))
