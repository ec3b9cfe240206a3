"""Model configs from untrusted files: declared sizes, JSON bounds, deep graphs, registered names.

Each crafted file is made here, in tmp_path.  A load that could crash, hang or exhaust memory if
the library failed runs in a child interpreter (tests/isolated.py) with a time and an
address-space limit; the child also reports its peak resident memory, which must stay a small
multiple of what the model the file really holds needs.
"""
import json
import zipfile

import h5py
import numpy as np
import pytest

from mixedcore import initializers, layers, models
from mixedcore.layers._base import memory_bytes
from mixedcore.saving.config import _MAX_DEPTH

from isolated import run_isolated

# What a child that imports mixedcore and h5py and loads a small model may reach (it starts
# near 60 MB); every refusal below is of a model whose config declares far more.
PEAK_KB = 300 * 1024


def _refused_in_child(path, match, timeout=60):
    """Load ``path`` in a child; it must raise ValueError whose message names the file and holds
    every string of ``match``, within ``timeout`` seconds and PEAK_KB of resident memory."""
    # the peak of this interpreter's own memory (VmHWM; ru_maxrss would count the parent's
    # memory at the fork)
    body = f"""
from mixedcore import models
try:
    models.load_model({str(path)!r})
finally:
    with open("/proc/self/status") as status:
        peak = [line.split()[1] for line in status if line.startswith("VmHWM:")]
    print("peak", peak[0], flush=True)
"""
    outcome = run_isolated(body, timeout=timeout)
    raised = outcome.raised()
    assert raised is not None and raised[0] == "ValueError", outcome.describe()
    for text in [str(path)] + list(match):
        assert text in raised[1], (text, raised[1])
    peak = [line for line in outcome.stdout.splitlines() if line.startswith("peak ")]
    assert peak and int(peak[-1].split()[1]) < PEAK_KB, outcome.describe()
    return raised[1]


def _small_keras(tmp_path, kernel_initializer="glorot_uniform"):
    """A saved Input(4) -> Dense(3) model: its archive's members."""
    inp = layers.Input(shape=(4,), name="x")
    out = layers.Dense(3, kernel_initializer=kernel_initializer, name="dense")(inp)
    model = models.Model(inp, out)
    model.save(tmp_path / "small.keras")
    with zipfile.ZipFile(tmp_path / "small.keras") as z:
        return {name: z.read(name) for name in z.namelist()}


def _write_archive(path, members, config, compress=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compress) as z:
        for name, data in members.items():
            z.writestr(name, json.dumps(config) if name == "config.json" else data)


def _entries(config):
    """{name: layer entry} of a functional config."""
    return {e["config"]["name"]: e for e in config["config"]["layers"]}


def _resized(members, inputs, units, initializer=None):
    """The small model's config with the Input's and the Dense's sizes replaced."""
    config = json.loads(members["config.json"])
    entries = _entries(config)
    entries["x"]["config"]["batch_shape"] = [None, inputs]
    dense = entries["dense"]["config"]
    dense["units"] = units
    if initializer is not None:
        dense["kernel_initializer"] = initializer
    for node in entries["dense"]["inbound_nodes"]:
        node["args"][0]["config"]["shape"] = [None, inputs]
    config.pop("build_config", None)
    return config


# -- declared sizes (the weights a file gives are checked before anything is allocated) ---------

def test_huge_input_with_twelve_floats_is_refused_before_allocation(tmp_path):
    members = _small_keras(tmp_path)
    path = tmp_path / "huge_input.keras"
    _write_archive(path, members, _resized(members, 1_000_000, 300))
    _refused_in_child(path, ["layer 'dense' (Dense) expects (1000000, 300)", "(4, 3)"])


def test_orthogonal_kernel_is_not_initialized_before_the_shapes_are_checked(tmp_path):
    members = _small_keras(tmp_path)
    path = tmp_path / "orthogonal.keras"
    orthogonal = {"module": "keras.initializers", "class_name": "Orthogonal",
                  "config": {"gain": 1.0, "seed": None}, "registered_name": None}
    _write_archive(path, members, _resized(members, 8192, 8192, orthogonal))
    # a QR of 8192 x 8192 alone takes far longer than this on the shared machine
    _refused_in_child(path, ["expects (8192, 8192)"], timeout=20)


def test_units_of_a_trillion_in_a_file_are_a_value_error(tmp_path):
    members = _small_keras(tmp_path)
    path = tmp_path / "units.keras"
    _write_archive(path, members, _resized(members, 4, 10**12))
    _refused_in_child(path, ["weight 'kernel' of shape (4, 1000000000000)",
                             "more than this machine's memory"])


def test_units_of_a_trillion_without_weights_are_a_value_error(tmp_path):
    members = _small_keras(tmp_path)
    text = json.dumps(_resized(members, 4, 10**12))
    with pytest.raises(ValueError, match=r"model_from_json: .*weight 'kernel' of shape "
                                         r"\(4, 1000000000000\).*more than this machine"):
        models.model_from_json(text)


def test_absurd_input_dimension_is_refused(tmp_path):
    members = _small_keras(tmp_path)
    config = json.loads(members["config.json"])
    entries = _entries(config)
    size = memory_bytes()              # float32: four times the machine's memory per sample
    entries["x"]["config"]["batch_shape"] = [None, size]
    relu = {"module": "keras.layers", "class_name": "ReLU", "registered_name": None,
            "config": {"name": "relu", "trainable": True, "dtype": "float32"},
            "inbound_nodes": entries["dense"]["inbound_nodes"]}
    relu["inbound_nodes"][0]["args"][0]["config"]["shape"] = [None, size]
    config["config"]["layers"] = [entries["x"], relu]
    config["config"]["output_layers"] = [["relu", 0, 0]]
    config.pop("build_config", None)
    with pytest.raises(ValueError, match=rf"model_from_json: the JSON string: one sample of the "
                                         rf"output of layer '(x|relu)' has shape \({size},\)"):
        models.model_from_json(json.dumps(config))
    path = tmp_path / "wide.keras"
    _write_archive(path, members, config)
    _refused_in_child(path, ["one sample of the output of layer", "more than this machine"])


def _legacy_h5(path, inputs, units, kernel_shape, bias_shape):
    """A legacy .h5 model Input(inputs) -> Dense(units) whose datasets declare the given
    shapes and store no data (HDF5 allocates chunks only when written)."""
    config = {"class_name": "Functional", "config": {
        "name": "m", "layers": [
            {"class_name": "InputLayer", "name": "x",
             "config": {"batch_input_shape": [None, inputs], "dtype": "float32", "name": "x"},
             "inbound_nodes": []},
            {"class_name": "Dense", "name": "dense",
             "config": {"name": "dense", "trainable": True, "dtype": "float32",
                        "units": units, "activation": "linear", "use_bias": True},
             "inbound_nodes": [[["x", 0, 0, {}]]]}],
        "input_layers": [["x", 0, 0]], "output_layers": [["dense", 0, 0]]}}
    with h5py.File(path, "w") as h5:
        h5.attrs["keras_version"] = "2.15.0"
        h5.attrs["backend"] = "tensorflow"
        h5.attrs["model_config"] = json.dumps(config).encode()
        weights = h5.create_group("model_weights")
        weights.attrs["layer_names"] = np.array([b"x", b"dense"])
        weights.create_group("x").attrs["weight_names"] = np.array([], dtype="S1")
        group = weights.create_group("dense")
        group.attrs["weight_names"] = np.array([b"dense/kernel:0", b"dense/bias:0"])
        inner = group.create_group("dense")
        inner.create_dataset("kernel:0", shape=kernel_shape, dtype="f4", chunks=True)
        inner.create_dataset("bias:0", shape=bias_shape, dtype="f4", chunks=True)


def test_legacy_h5_datasets_larger_than_the_file_are_refused_before_reading(tmp_path):
    path = tmp_path / "hollow.h5"
    _legacy_h5(path, 1_000_000, 300, (1_000_000, 300), (300,))
    assert path.stat().st_size < 100_000
    _refused_in_child(path, ["the weights declare 300000300 numbers",
                             "/model_weights/dense/dense/kernel:0", "can hold"])


def test_legacy_h5_shape_mismatch_is_refused_before_allocation(tmp_path):
    path = tmp_path / "mismatch.h5"
    _legacy_h5(path, 1_000_000, 300, (4, 3), (3,))
    _refused_in_child(path, ["has shape (4, 3)", "expects (1000000, 300)"])


def test_load_runs_no_initializer_and_gives_the_file_weights(tmp_path, monkeypatch):
    inp = layers.Input(shape=(64,))
    x = layers.Dense(256, kernel_initializer="orthogonal")(inp)
    x = layers.BatchNormalization()(x)
    out = layers.Dense(8)(x)
    model = models.Model(inp, out)
    for suffix in (".keras", ".h5"):
        model.save(tmp_path / f"m{suffix}")
    calls = []
    real = initializers.initialize
    monkeypatch.setattr(initializers, "initialize",
                        lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    x = np.random.default_rng(0).normal(size=(5, 64)).astype(np.float32)
    for suffix in (".keras", ".h5"):
        loaded = models.load_model(tmp_path / f"m{suffix}")
        assert calls == []
        for a, b in zip(model.get_weights(), loaded.get_weights()):
            np.testing.assert_array_equal(a, b)
        assert all(w.flags.writeable and w.flags.owndata for w in loaded.weights)
        np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    # without weights to come, the initializers run as before
    fresh = models.model_from_json(model.to_json())
    assert len(calls) == len(model.weights)
    assert all(w.flags.writeable for w in fresh.weights)


# -- JSON bounds and deep configs ----------------------------------------------------------------

def test_json_amplification_is_refused_before_parsing(tmp_path):
    members = _small_keras(tmp_path)
    path = tmp_path / "brackets.keras"
    text = "[" + "[]," * 20_000_000 + "[]]"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, text if name == "config.json" else data)
    assert path.stat().st_size < 1_000_000
    _refused_in_child(path, ["config.json holds 20000002 JSON lists and objects for 0 entries",
                             "refused before it is parsed"])


@pytest.mark.parametrize("depth, match", [
    (3000, "nested deeper than Python's JSON parser goes"),
    (_MAX_DEPTH + 40, f"nested more than {_MAX_DEPTH} levels deep")])
def test_deep_json_is_a_value_error(tmp_path, depth, match):
    members = _small_keras(tmp_path)
    path = tmp_path / "deep.keras"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, "[" * depth + "]" * depth if name == "config.json" else data)
    _refused_in_child(path, ["config.json", match])
    with pytest.raises(ValueError, match=f"model_from_json: the JSON is {match}"):
        models.model_from_json("[" * depth + "]" * depth)


def test_legacy_model_config_bounds_name_the_file(tmp_path):
    path = tmp_path / "deep.h5"
    with h5py.File(path, "w") as h5:
        h5.attrs["model_config"] = ("{\"a\":" * 400 + "1" + "}" * 400).encode()
    _refused_in_child(path, ["its model_config is nested more than"])


def _nested_sequential(depth):
    """The config of a Sequential holding a Sequential ... ``depth`` deep around a Dense."""
    inner = {"class_name": "Sequential", "config": {"name": "s0", "layers": [
        {"class_name": "InputLayer", "config": {"batch_shape": [None, 2], "name": "in0"}},
        {"class_name": "Dense", "config": {"name": "d", "units": 2}}]}}
    for k in range(1, depth + 1):
        inner = {"class_name": "Sequential", "config": {"name": f"s{k}", "layers": [
            {"class_name": "InputLayer", "config": {"batch_shape": [None, 2], "name": f"in{k}"}},
            inner]}}
    return inner


def test_sequential_nested_250_deep_is_a_value_error(tmp_path):
    members = _small_keras(tmp_path)
    path = tmp_path / "nested.keras"
    _write_archive(path, members, _nested_sequential(250))
    _refused_in_child(path, ["config.json is nested more than", "models nested about 80 deep"])


def test_sequential_nested_40_deep_round_trips(tmp_path):
    model = models.model_from_json(json.dumps(_nested_sequential(40)))
    x = np.ones((2, 2), np.float32)
    model.save(tmp_path / "nested.keras")
    loaded = models.load_model(tmp_path / "nested.keras")
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_a_1200_layer_chain_saves_loads_predicts_and_trains(tmp_path, suffix):
    inp = layers.Input(shape=(4,))
    x = inp
    for _ in range(1200):
        x = layers.Dense(4, kernel_initializer="identity", bias_initializer="zeros")(x)
    model = models.Model(inp, x)
    data = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    expected = model.predict(data)
    np.testing.assert_allclose(expected, data, rtol=1e-6)
    model.save(tmp_path / f"chain{suffix}")
    loaded = models.load_model(tmp_path / f"chain{suffix}")
    assert len(loaded.layers) == 1201
    np.testing.assert_array_equal(loaded.predict(data), expected)
    loaded.compile(optimizer="sgd", loss="mse")
    loaded.fit(data, np.zeros_like(data), epochs=1, verbose=0)
    assert not np.array_equal(loaded.predict(data), expected)


# -- registered names ----------------------------------------------------------------------------

class _Doubling(layers.Dense):
    _keras_class = "Dense"          # its weights are filed where a Dense's are

    def call(self, inputs, training=False):
        return super().call(inputs, training=training) * 2


def test_registered_name_binds_only_its_own_entry(tmp_path):
    inp = layers.Input(shape=(3,))
    out = layers.Dense(3, name="second")(layers.Dense(3, name="first")(inp))
    model = models.Model(inp, out)
    model.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        members = {name: z.read(name) for name in z.namelist()}
    config = json.loads(members["config.json"])
    _entries(config)["first"]["registered_name"] = "Mine>Doubling"
    path = tmp_path / "registered.keras"
    _write_archive(path, members, config)
    for text in (None, json.dumps(config)):
        loaded = (models.load_model(path, custom_objects={"Mine>Doubling": _Doubling})
                  if text is None else
                  models.model_from_json(text, custom_objects={"Mine>Doubling": _Doubling}))
        kinds = {layer.name: type(layer) for layer in loaded.layers}
        assert kinds["first"] is _Doubling
        assert kinds["second"] is layers.Dense
