"""Model and weights files: round trips of every format, policies stored and overridden, the
compile state, and every way a file can be wrong."""
import json
import os
import zipfile

import h5py
import numpy as np
import pytest

from mixedcore import layers, models, optimizers
from mixedcore.policy import DTypePolicy, policy_scope

RNG = np.random.default_rng(0)
X6 = RNG.normal(size=(12, 6)).astype(np.float32)


class MyDense(layers.Dense):
    """A user's own layer class (a Dense by another name)."""


def mlp(policy="float32", hidden=8, softmax_dtype="float32", name=None):
    with policy_scope(policy):
        stack = [layers.Input(shape=(6,)), layers.Dense(hidden, activation="relu"),
                 layers.LayerNormalization(), layers.Dropout(0.25), layers.Dense(3)]
        stack.append(layers.Softmax(dtype=softmax_dtype))
        return models.Sequential(stack, name=name)


def graph(policy="float32"):
    """Two inputs, two outputs, a shared Dense, a nested Sequential and a nested functional
    model (called twice)."""
    with policy_scope(policy):
        a = layers.Input(shape=(4,), name="a")
        b = layers.Input(shape=(3,), name="b")
        shared = layers.Dense(5, activation="tanh", name="shared")
        ha = shared(layers.Dense(4, name="pre_a")(a))
        hb = shared(layers.Dense(4, name="pre_b")(b))
        tower = models.Sequential([layers.Input(shape=(5,)), layers.Dense(6, activation="relu"),
                                   layers.Dense(5)], name="tower")
        inner_in = layers.Input(shape=(5,))
        inner = models.Model(inner_in, layers.Dense(5, activation="tanh", name="inner_d")(inner_in),
                             name="inner")
        out1 = layers.Dense(2, name="out1")(inner(inner(tower(ha))))
        out2 = layers.Activation("sigmoid", name="out2", dtype="float32")(
            layers.Dense(3, name="pre_out2")(hb))
        return models.Model([a, b], [out1, out2], name="graph")


def graph_inputs(n=7, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, 4)).astype(np.float32), rng.normal(size=(n, 3)).astype(np.float32)]


def assert_same_predictions(a, b, x):
    pa, pb = a.predict(x, verbose=0), b.predict(x, verbose=0)
    if not isinstance(pa, list):
        pa, pb = [pa], [pb]
    assert len(pa) == len(pb)
    for u, v in zip(pa, pb):
        assert u.dtype == v.dtype
        np.testing.assert_array_equal(u, v)


def assert_same_weights(a, b):
    wa, wb = a.get_weights(), b.get_weights()
    assert len(wa) == len(wb)
    for u, v in zip(wa, wb):
        np.testing.assert_array_equal(u, v)


def policies_of(model):
    out = {}
    for layer in model.layers:
        if isinstance(layer, models.Model):
            out.update(policies_of(layer))
        elif not isinstance(layer, layers.InputLayer):
            out[layer.name] = layer.dtype_policy.name
    return out


def perturb(model, seed=3):
    """Move every weight away from its initial value, so a round trip has something to keep."""
    rng = np.random.default_rng(seed)
    model.set_weights([w + rng.normal(scale=0.1, size=w.shape).astype(w.dtype)
                       for w in model.get_weights()])


# -- round trips ---------------------------------------------------------------------------------

@pytest.mark.parametrize("ext", [".keras", ".h5"])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_sequential_round_trip(tmp_path, ext, policy):
    model = mlp(policy, name="stack")
    perturb(model)
    path = tmp_path / f"m{ext}"
    model.save(path)
    loaded = models.load_model(path)
    assert isinstance(loaded, models.Sequential) and loaded.name == "stack"
    assert [l.name for l in loaded.layers] == [l.name for l in model.layers]
    assert policies_of(loaded) == policies_of(model)
    assert policies_of(loaded)[model.layers[-1].name] == "float32"
    assert_same_weights(model, loaded)
    assert_same_predictions(model, loaded, X6)


@pytest.mark.parametrize("ext", [".keras", ".h5"])
def test_functional_round_trip_multi_io_shared_nested(tmp_path, ext):
    model = graph("mixed_bfloat16")
    perturb(model)
    path = tmp_path / f"g{ext}"
    models.save_model(model, path)
    loaded = models.load_model(str(path))
    assert type(loaded) is models.Model
    assert [l.name for l in loaded.layers] == [l.name for l in model.layers]
    assert isinstance(loaded.get_layer("tower"), models.Sequential)
    assert isinstance(loaded.get_layer("inner"), models.Model)
    assert loaded.input_names == ["a", "b"] and loaded.output_names == ["out1", "out2"]
    assert policies_of(loaded) == policies_of(model)
    assert_same_weights(model, loaded)
    assert_same_predictions(model, loaded, graph_inputs())
    # the shared layer stays one layer, called twice
    assert len(loaded.get_layer("shared")._inbound_nodes) == 2


@pytest.mark.parametrize("name", ["w.weights.h5", "w.h5", "w.npz"])
@pytest.mark.parametrize("build", [mlp, graph])
def test_weights_round_trip(tmp_path, name, build):
    model = build("mixed_bfloat16")
    perturb(model)
    model.save_weights(tmp_path / name)
    fresh = build("mixed_bfloat16")
    fresh.load_weights(tmp_path / name)
    assert_same_weights(model, fresh)
    x = X6 if build is mlp else graph_inputs()
    assert_same_predictions(model, fresh, x)
    with pytest.raises(ValueError, match="overwrite=False"):
        model.save_weights(tmp_path / name, overwrite=False)


def test_weights_h5_uses_keras3_layout(tmp_path):
    model = mlp()
    model.save_weights(tmp_path / "w.weights.h5")
    with h5py.File(tmp_path / "w.weights.h5", "r") as f:
        keys = sorted(f["layers"])
        assert keys == ["dense", "dense_1", "dropout", "layer_normalization", "softmax"]
        assert f["layers/dense/vars/0"].shape == (6, 8)
        assert f["layers/dense/vars/1"].shape == (8,)
        assert f["layers/layer_normalization/vars/0"].shape == (8,)
        assert len(f["layers/dropout/vars"]) == 0


def test_keras_archive_weights_load_into_a_built_model(tmp_path):
    model = mlp()
    perturb(model)
    model.save(tmp_path / "m.keras")
    fresh = mlp()
    fresh.load_weights(tmp_path / "m.keras")
    assert_same_weights(model, fresh)


def test_json_round_trip(tmp_path):
    for model, x in ((mlp("mixed_float16"), X6), (graph(), graph_inputs())):
        text = model.to_json()
        assert json.loads(text)["class_name"] in ("Sequential", "Functional")
        clone = models.model_from_json(text)
        assert type(clone) is type(model)
        assert policies_of(clone) == policies_of(model)
        clone.set_weights(model.get_weights())
        assert_same_predictions(model, clone, x)
    assert models.model_from_json(mlp().to_json(indent=2)).layers[0].units == 8
    with pytest.raises(ValueError, match="model_from_json: not valid JSON"):
        models.model_from_json("{not json")
    with pytest.raises(TypeError, match="model_from_json: expected a JSON string"):
        models.model_from_json({"class_name": "Sequential"})


def test_custom_objects_register_user_layers(tmp_path):
    with policy_scope("float32"):
        model = models.Sequential([layers.Input(shape=(6,)), MyDense(4, name="mine"),
                                   layers.Dense(2)])
    perturb(model)
    model.save(tmp_path / "c.keras")
    with pytest.raises(ValueError) as info:
        models.load_model(tmp_path / "c.keras")
    text = str(info.value)
    assert "MyDense (layer 'mine'; nearest supported: Dense, EinsumDense)" in text and \
        "c.keras" in text
    assert "'Dense'" in text and "'LayerNormalization'" in text        # the supported list
    assert "custom_objects" in text
    loaded = models.load_model(tmp_path / "c.keras", custom_objects={"MyDense": MyDense})
    assert type(loaded.get_layer("mine")) is MyDense
    assert_same_predictions(model, loaded, X6)
    clone = models.model_from_json(model.to_json(), custom_objects={"MyDense": MyDense})
    assert type(clone.get_layer("mine")) is MyDense
    with pytest.raises(TypeError, match="custom_objects must be a dict"):
        models.load_model(tmp_path / "c.keras", custom_objects=[MyDense])


def test_unknown_layer_class_named_with_file_and_supported_list(tmp_path):
    model = mlp()
    config = json.loads(model.to_json())
    config["config"]["layers"][2]["class_name"] = "GroupNormalization"
    path = tmp_path / "u.keras"
    model.save(tmp_path / "ok.keras")
    with zipfile.ZipFile(tmp_path / "ok.keras") as src, zipfile.ZipFile(path, "w") as dst:
        for name in src.namelist():
            data = json.dumps(config) if name == "config.json" else src.read(name)
            dst.writestr(name, data)
    with pytest.raises(ValueError, match=r"load_model: .*u\.keras: unknown layer class\(es\) "
                                         r"GroupNormalization \(layer 'layer_normalization.*"
                                         r"nearest supported: .*LayerNormalization.*"
                                         r"supports the layers \[.*'Dense'"):
        models.load_model(path)


def test_registry_finds_newly_registered_layers(tmp_path):
    """Classes come from the layers registry: a class registered there loads without
    custom_objects."""

    class Doubling(layers.Layer):
        def call(self, inputs):
            return inputs * inputs.dtype.type(2)

    with policy_scope("float32"):
        model = models.Sequential([layers.Input(shape=(6,)), Doubling(name="twice"),
                                   layers.Dense(2)])
    model.save(tmp_path / "r.keras")
    with pytest.raises(ValueError, match="Doubling"):
        models.load_model(tmp_path / "r.keras")
    layers.register(Doubling)
    try:
        loaded = models.load_model(tmp_path / "r.keras")
    finally:
        del layers._CLASSES["Doubling"]
    assert type(loaded.get_layer("twice")) is Doubling
    assert_same_predictions(model, loaded, X6)


# -- compile state -------------------------------------------------------------------------------

@pytest.mark.parametrize("ext", [".keras", ".h5"])
def test_compile_config_restored(tmp_path, ext):
    model = mlp()
    model.compile(optimizer=optimizers.Adam(learning_rate=0.0025),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    y = RNG.integers(0, 3, size=len(X6))
    model.fit(X6, y, epochs=1, verbose=0)
    model.save(tmp_path / f"m{ext}")
    loaded = models.load_model(tmp_path / f"m{ext}")
    assert loaded.compiled
    assert type(loaded.optimizer) is optimizers.Adam
    assert loaded.optimizer.get_config()["learning_rate"] == pytest.approx(0.0025)
    history = loaded.fit(X6, y, epochs=1, verbose=0)
    assert set(history.history) == {"loss", "accuracy"}
    uncompiled = models.load_model(tmp_path / f"m{ext}", compile=False)
    assert not uncompiled.compiled
    with pytest.raises(TypeError, match="compile must be a bool"):
        models.load_model(tmp_path / f"m{ext}", compile="yes")


def test_loss_scale_optimizer_round_trip(tmp_path):
    model = mlp("mixed_float16")
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    assert isinstance(model.optimizer, optimizers.LossScaleOptimizer)
    model.save(tmp_path / "m.keras")
    loaded = models.load_model(tmp_path / "m.keras")
    assert isinstance(loaded.optimizer, optimizers.LossScaleOptimizer)
    assert type(loaded.optimizer.inner_optimizer) is optimizers.SGD


def test_compile_config_of_two_outputs_restored(tmp_path):
    model = graph()
    model.compile(optimizer="adam", loss={"out1": "mse", "out2": "mean_squared_error"},
                  loss_weights={"out1": 1.0, "out2": 0.5})
    model.save(tmp_path / "g.keras")
    loaded = models.load_model(tmp_path / "g.keras")
    assert loaded.compiled
    rng = np.random.default_rng(2)
    targets = [rng.normal(size=(7, 2)).astype(np.float32),
               rng.integers(0, 2, size=(7, 3)).astype(np.float32)]
    a = model.evaluate(graph_inputs(), targets, verbose=0)
    loaded.set_weights(model.get_weights())
    b = loaded.evaluate(graph_inputs(), targets, verbose=0)
    np.testing.assert_allclose(a, b, rtol=1e-6)


# -- policies ------------------------------------------------------------------------------------

def rewrite_config(src, dst, edit):
    """Copy the .keras archive ``src`` to ``dst`` with its config.json passed through ``edit``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config)
            zout.writestr(name, data)


def test_policies_stored_as_names_or_dicts_are_honoured(tmp_path):
    model = mlp("mixed_bfloat16")
    model.save(tmp_path / "m.keras")

    def as_names(config):
        for entry in config["config"]["layers"]:
            dtype = entry["config"].get("dtype")
            if isinstance(dtype, dict):
                entry["config"]["dtype"] = dtype["config"]["name"]

    def as_old_classes(config):             # Keras 3.0-3.5 wrote FloatDTypePolicy
        for entry in config["config"]["layers"]:
            dtype = entry["config"].get("dtype")
            if isinstance(dtype, dict):
                dtype["class_name"] = "FloatDTypePolicy"

    for edit in (as_names, as_old_classes):
        rewrite_config(tmp_path / "m.keras", tmp_path / "e.keras", edit)
        loaded = models.load_model(tmp_path / "e.keras")
        assert policies_of(loaded) == policies_of(model)
        assert_same_predictions(model, loaded, X6)


def test_malformed_quantized_policy_is_refused(tmp_path):
    model = mlp()
    model.save(tmp_path / "m.keras")

    def quantize(config):
        config["config"]["layers"][1]["config"]["dtype"] = {
            "module": "keras", "class_name": "QuantizedDTypePolicy",
            "config": {"name": "int8_from_float32"}, "registered_name": None}

    rewrite_config(tmp_path / "m.keras", tmp_path / "q.keras", quantize)
    with pytest.raises(ValueError, match=r"q\.keras.*QuantizedDTypePolicy.*'mode'"):
        models.load_model(tmp_path / "q.keras")


@pytest.mark.parametrize("ext", [".keras", ".h5"])
def test_dtype_policy_override_replaces_the_model_policy_only(tmp_path, ext):
    model = mlp("mixed_float16")
    with policy_scope("mixed_float16"):
        model.add(layers.Dense(2, dtype="float64", name="wide"))
    perturb(model)
    path = tmp_path / f"m{ext}"
    model.save(path)
    stored = policies_of(model)
    assert list(stored.values()).count("mixed_float16") == 4
    for override in ("mixed_bfloat16", "float32", DTypePolicy("bfloat16"),
                     {"class_name": "DTypePolicy", "config": {"name": "float16"}}):
        loaded = models.load_model(path, dtype_policy=override)
        name = override if isinstance(override, str) else (
            override.name if isinstance(override, DTypePolicy) else "float16")
        got = policies_of(loaded)
        for layer, policy in stored.items():
            assert got[layer] == (name if policy == "mixed_float16" else policy), layer
        assert loaded.dtype_policy.name == name
        if name in ("mixed_bfloat16", "float32"):        # float32 variables: the same values
            assert_same_weights(model, loaded)
        else:                                           # the variables are in the new dtype
            kernel = loaded.layers[0].get_weights()[0]
            assert kernel.dtype.name == name
            np.testing.assert_array_equal(
                kernel, model.layers[0].get_weights()[0].astype(kernel.dtype))


def test_dtype_policy_override_predictions(tmp_path):
    model = mlp("mixed_float16")
    perturb(model)
    model.save(tmp_path / "m.keras")
    as_f32 = models.load_model(tmp_path / "m.keras", dtype_policy="float32")
    reference = mlp("float32")
    reference.set_weights(model.get_weights())
    assert_same_predictions(reference, as_f32, X6)
    as_bf16 = models.load_model(tmp_path / "m.keras", dtype_policy="mixed_bfloat16")
    out = as_bf16.predict(X6, verbose=0)
    assert out.dtype == np.float32                          # the float32 softmax is kept
    np.testing.assert_allclose(out, reference.predict(X6, verbose=0), atol=0.05)


def test_dtype_policy_override_of_functional_models(tmp_path):
    model = graph("mixed_bfloat16")
    model.save(tmp_path / "g.keras")
    loaded = models.load_model(tmp_path / "g.keras", dtype_policy="float32")
    got = policies_of(loaded)
    assert got["out2"] == "float32" and got["shared"] == "float32" and got["inner_d"] == "float32"
    assert loaded.dtype_policy.name == "float32"
    assert loaded.get_layer("inner").dtype_policy.name == "float32"
    loaded16 = models.load_model(tmp_path / "g.keras", dtype_policy="mixed_float16")
    got = policies_of(loaded16)
    assert got["out2"] == "float32"                         # stored explicitly: kept
    assert {p for k, p in got.items() if k != "out2"} == {"mixed_float16"}


def test_dtype_policy_override_errors(tmp_path):
    mlp().save(tmp_path / "m.keras")
    with pytest.raises(ValueError, match="load_model: dtype_policy must be a floating-point "
                                         "policy.*'int32'"):
        models.load_model(tmp_path / "m.keras", dtype_policy="int32")
    with pytest.raises(ValueError, match="mixed_float17"):
        models.load_model(tmp_path / "m.keras", dtype_policy="mixed_float17")


# -- errors: files -------------------------------------------------------------------------------

def test_save_errors(tmp_path):
    model = mlp()
    with pytest.raises(ValueError, match=r"save_model: the file name must end in '.keras'.*"
                                         r"m\.onnx"):
        model.save(tmp_path / "m.onnx")
    with pytest.raises(ValueError, match=r"save_weights: the file name must end in "
                                         r"'.weights.h5'.*w\.pt"):
        model.save_weights(tmp_path / "w.pt")
    model.save(tmp_path / "m.keras")
    with pytest.raises(ValueError, match="exists and overwrite=False"):
        model.save(tmp_path / "m.keras", overwrite=False)
    with pytest.raises(ValueError, match="does not exist"):
        model.save(tmp_path / "nowhere" / "m.keras")
    unbuilt = models.Sequential([layers.Dense(3)])
    with pytest.raises(ValueError, match="not built"):
        unbuilt.save(tmp_path / "u.keras")
    with pytest.raises(ValueError, match="not built"):
        unbuilt.save_weights(tmp_path / "u.weights.h5")
    with pytest.raises(TypeError, match="filepath must be a str or os.PathLike"):
        model.save(3)
    assert sorted(os.listdir(tmp_path)) == ["m.keras"]      # nothing half-written left behind


def test_missing_empty_and_wrong_kinds_of_files(tmp_path):
    with pytest.raises(ValueError, match=r"load_model: cannot read .*missing\.keras.*no such"):
        models.load_model(tmp_path / "missing.keras")
    (tmp_path / "empty.keras").write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.keras' is empty"):
        models.load_model(tmp_path / "empty.keras")
    with pytest.raises(ValueError, match="is a directory"):
        models.load_model(tmp_path)
    np.save(tmp_path / "a.npy", np.ones(3))
    with pytest.raises(ValueError, match=r"a\.npy: is a \.npy array, not a model file"):
        models.load_model(tmp_path / "a.npy")
    mlp().save_weights(tmp_path / "w.weights.h5")
    with pytest.raises(ValueError, match=r"has no model_config attribute: it is a weights file"):
        models.load_model(tmp_path / "w.weights.h5")
    mlp().save_weights(tmp_path / "w.npz")
    with pytest.raises(ValueError, match=r"w\.npz: the zip archive has no config\.json"):
        models.load_model(tmp_path / "w.npz")


@pytest.mark.parametrize("seed", range(4))
def test_random_bytes_are_a_clear_error(tmp_path, seed):
    rng = np.random.default_rng(seed)
    path = tmp_path / "noise.keras"
    path.write_bytes(rng.integers(0, 256, size=2000, dtype=np.uint8).tobytes())
    with pytest.raises(ValueError, match=r"noise\.keras"):
        models.load_model(path)
    with pytest.raises(ValueError, match=r"noise\.keras"):
        mlp().load_weights(path)
    # random bytes behind a valid signature
    for magic, name in ((b"PK\x03\x04", "z.keras"), (b"\x89HDF\r\n\x1a\n", "h.h5")):
        p = tmp_path / name
        p.write_bytes(magic + rng.integers(0, 256, size=3000, dtype=np.uint8).tobytes())
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            models.load_model(p)


@pytest.mark.parametrize("ext", [".keras", ".h5", ".weights.h5"])
def test_truncated_files_are_a_clear_error(tmp_path, ext):
    model = graph()
    full = tmp_path / f"full{ext}"
    if ext == ".weights.h5":
        model.save_weights(full)
    else:
        model.save(full)
    data = full.read_bytes()
    cut = tmp_path / f"cut{ext}"
    for keep in sorted({1, 8, 100, 1000, len(data) // 3, len(data) // 2, len(data) - 100,
                        len(data) - 1}):
        cut.write_bytes(data[:keep])
        target = graph()
        before = target.get_weights()
        with pytest.raises(ValueError, match=r"cut" + ext.replace(".", r"\.")):
            if ext == ".weights.h5":
                target.load_weights(cut)
            else:
                models.load_model(cut)
        assert_same_weights_list(before, target.get_weights())    # a failed load changes nothing


def assert_same_weights_list(a, b):
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def test_corrupted_bytes_inside_an_archive_are_caught(tmp_path):
    model = mlp()
    model.save(tmp_path / "m.keras")
    data = bytearray((tmp_path / "m.keras").read_bytes())
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        info = z.getinfo("model.weights.h5")
    middle = info.header_offset + 30 + len(info.filename) + info.file_size // 2
    data[middle] ^= 0xFF
    (tmp_path / "flip.keras").write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"flip\.keras.*model\.weights\.h5 fails its CRC check"):
        models.load_model(tmp_path / "flip.keras")


def test_archive_without_weights_or_with_bad_json(tmp_path):
    model = mlp()
    model.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as src:
        members = {n: src.read(n) for n in src.namelist()}
    with zipfile.ZipFile(tmp_path / "noweights.keras", "w") as z:
        z.writestr("config.json", members["config.json"])
        z.writestr("metadata.json", members["metadata.json"])
    with pytest.raises(ValueError, match=r"noweights\.keras: the archive has neither "
                                         r"model\.weights\.h5 nor model\.weights\.npz"):
        models.load_model(tmp_path / "noweights.keras")
    with zipfile.ZipFile(tmp_path / "badjson.keras", "w") as z:
        z.writestr("config.json", members["config.json"][:-20])
        z.writestr("model.weights.h5", members["model.weights.h5"])
    with pytest.raises(ValueError, match=r"badjson\.keras: config\.json is not valid JSON"):
        models.load_model(tmp_path / "badjson.keras")
    with zipfile.ZipFile(tmp_path / "notamodel.keras", "w") as z:
        z.writestr("config.json", json.dumps({"class_name": "Sequential"}))
        z.writestr("model.weights.h5", members["model.weights.h5"])
    with pytest.raises(ValueError, match=r"notamodel\.keras: the model config is not a dict "
                                         r"with 'class_name' and 'config'"):
        models.load_model(tmp_path / "notamodel.keras")


def test_legacy_h5_with_bad_config_json(tmp_path):
    model = mlp()
    model.save(tmp_path / "m.h5")
    with h5py.File(tmp_path / "m.h5", "a") as f:
        f.attrs["model_config"] = b'{"class_name": "Seq'
    with pytest.raises(ValueError, match=r"m\.h5: its model_config is not valid JSON"):
        models.load_model(tmp_path / "m.h5")


# -- errors: weights that do not fit --------------------------------------------------------------

def test_wrong_shapes_name_the_layer_and_shapes(tmp_path):
    model = mlp(hidden=8)
    model.save_weights(tmp_path / "w.weights.h5")
    model.save_weights(tmp_path / "w.h5")
    model.save(tmp_path / "m.keras")
    other = mlp(hidden=9)
    before = other.get_weights()
    with pytest.raises(ValueError, match=r"w\.weights\.h5: the weights do not fit the model: "
                                         r"layers/dense/vars/0 has shape \(6, 8\), layer "
                                         r"'dense.*' \(Dense\) expects \(6, 9\)"):
        other.load_weights(tmp_path / "w.weights.h5")
    with pytest.raises(ValueError, match=r"w\.h5: .*has shape \(6, 8\), layer 'dense.*' "
                                         r"\(Dense\) expects \(6, 9\)"):
        other.load_weights(tmp_path / "w.h5")
    assert_same_weights_list(before, other.get_weights())
    # a .keras whose config says 9 units but whose weights have 8

    def widen(config):
        config["config"]["layers"][1]["config"]["units"] = 9

    rewrite_config(tmp_path / "m.keras", tmp_path / "wide.keras", widen)
    with pytest.raises(ValueError, match=r"wide\.keras: the weights do not fit the model: "
                                         r"layers/dense/vars/0 has shape \(6, 8\).*expects "
                                         r"\(6, 9\)"):
        models.load_model(tmp_path / "wide.keras")
    with pytest.warns(UserWarning, match="skipping layer"):
        other.load_weights(tmp_path / "w.weights.h5", skip_mismatch=True)


def test_wrong_weight_counts_are_named(tmp_path):
    small = mlp()
    small.save_weights(tmp_path / "small.weights.h5")
    small.save_weights(tmp_path / "small.h5")
    with policy_scope("float32"):
        bigger = mlp()
        bigger.add(layers.Dense(4, name="extra"))
    with pytest.raises(ValueError, match=r"small\.weights\.h5: .*layers/dense_2 is missing from "
                                         r"the file \(layer 'extra' \(Dense\) has 2 weights\)"):
        bigger.load_weights(tmp_path / "small.weights.h5")
    with pytest.raises(ValueError, match=r"small\.h5: the file has weights for 3 layers.*the "
                                         r"model has 4 layers with weights"):
        bigger.load_weights(tmp_path / "small.h5")
    bigger.save_weights(tmp_path / "big.weights.h5")
    with pytest.raises(ValueError, match=r"big\.weights\.h5: .*weights at \['layers/dense_2'\] "
                                         r"for which the model has no layer"):
        small.load_weights(tmp_path / "big.weights.h5")
    # a layer whose group holds one array too few
    with h5py.File(tmp_path / "small.weights.h5", "a") as f:
        del f["layers/dense/vars/1"]
    with pytest.raises(ValueError, match=r"layers/dense holds arrays \['0'\], layer 'dense.*' "
                                         r"\(Dense\) has 2 weights"):
        mlp().load_weights(tmp_path / "small.weights.h5")
    with pytest.raises(ValueError, match=r"expected 6 weight arrays .* received 8"):
        np.savez(tmp_path / "many.npz", *bigger.get_weights())
        small.load_weights(tmp_path / "many.npz")


# -- Keras 3 config keys at their defaults -------------------------------------------------------

def test_layers_take_the_keys_keras3_configs_hold():
    norm = layers.LayerNormalization.from_config({"name": "ln", "rms_scaling": False})
    assert norm.name == "ln" and "rms_scaling" not in norm.get_config()
    with pytest.raises(ValueError, match=r"LayerNormalization: rms_scaling=True is not "
                                         r"supported"):
        layers.LayerNormalization(rms_scaling=True)
    flat = layers.Flatten.from_config({"name": "fl", "data_format": "channels_last"})
    assert flat(np.ones((2, 3, 4), np.float32)).shape == (2, 12)
    with pytest.raises(ValueError, match=r"Flatten: data_format.*'channels_middle'"):
        layers.Flatten(data_format="channels_middle")


# -- tf.keras 2.x files --------------------------------------------------------------------------

def _tf2_dense(name, units, activation, dtype, **extra):
    return {"class_name": "Dense", "config": {
        "name": name, "trainable": True, "dtype": dtype, "units": units,
        "activation": activation, "use_bias": True,
        "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}},
        "bias_initializer": {"class_name": "Zeros", "config": {}}, "kernel_regularizer": None,
        "bias_regularizer": None, "activity_regularizer": None, "kernel_constraint": None,
        "bias_constraint": None, **extra}}


def _write_tf2_h5(path, config, weights, training_config=None):
    """A legacy .h5 laid out as tf.keras 2.x's ``model.save("m.h5")`` writes it."""
    with h5py.File(path, "w") as f:
        f.attrs["backend"] = "tensorflow"
        f.attrs["keras_version"] = "2.13.1"
        f.attrs["model_config"] = json.dumps(config)
        if training_config is not None:
            f.attrs["training_config"] = json.dumps(training_config)
        group = f.create_group("model_weights")
        group.attrs["layer_names"] = np.array([n.encode() for n in weights])
        group.attrs["backend"] = b"tensorflow"
        group.attrs["keras_version"] = b"2.13.1"
        for layer, arrays in weights.items():
            g = group.create_group(layer)
            names = [f"{layer}/{w}:0" for w in arrays]
            g.attrs["weight_names"] = np.array([n.encode() for n in names])
            for n, value in zip(names, arrays.values()):
                g.create_dataset(n, data=value)


def test_tf_keras2_sequential_h5(tmp_path):
    rng = np.random.default_rng(9)
    mixed = {"class_name": "Policy", "config": {"name": "mixed_float16"}}
    config = {"class_name": "Sequential", "config": {"name": "sequential", "layers": [
        {"class_name": "InputLayer", "config": {"batch_input_shape": [None, 6],
                                                "dtype": "float32", "sparse": False,
                                                "ragged": False, "name": "dense_input"}},
        _tf2_dense("dense", 8, "relu", mixed, batch_input_shape=[None, 6]),
        _tf2_dense("dense_1", 3, "linear", mixed),
        {"class_name": "Activation", "config": {"name": "activation", "trainable": True,
                                                "dtype": "float32", "activation": "softmax"}}]}}
    weights = {"dense": {"kernel": rng.normal(size=(6, 8)).astype(np.float32),
                         "bias": rng.normal(size=8).astype(np.float32)},
               "dense_1": {"kernel": rng.normal(size=(8, 3)).astype(np.float32),
                           "bias": rng.normal(size=3).astype(np.float32)},
               "activation": {}}
    training = {"loss": "sparse_categorical_crossentropy",
                "metrics": [[{"class_name": "MeanMetricWrapper",
                              "config": {"name": "accuracy", "dtype": "float32",
                                         "fn": "sparse_categorical_accuracy"}}]],
                "weighted_metrics": None, "loss_weights": None,
                "optimizer_config": {"class_name": "Adam", "config": {
                    "name": "Adam", "learning_rate": 0.002, "decay": 0.0, "beta_1": 0.9,
                    "beta_2": 0.999, "epsilon": 1e-07, "amsgrad": False}}}
    _write_tf2_h5(tmp_path / "tf2.h5", config, weights, training)
    model = models.load_model(tmp_path / "tf2.h5")
    assert policies_of(model) == {"dense": "mixed_float16", "dense_1": "mixed_float16",
                                  "activation": "float32"}
    assert model.compiled and type(model.optimizer) is optimizers.Adam
    assert model.optimizer.get_config()["learning_rate"] == pytest.approx(0.002)
    history = model.fit(X6, np.arange(len(X6)) % 3, epochs=1, verbose=0)
    assert set(history.history) == {"loss", "accuracy"}
    expected = mlp_reference(X6, weights)
    f32 = models.load_model(tmp_path / "tf2.h5", dtype_policy="float32")
    np.testing.assert_allclose(f32.predict(X6, verbose=0), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(X6, verbose=0), expected, atol=5e-3)
    # the weights alone, as tf.keras's save_weights("w.h5") writes them
    with h5py.File(tmp_path / "w.h5", "w") as f:
        with h5py.File(tmp_path / "tf2.h5", "r") as src:
            for key, value in src["model_weights"].attrs.items():
                f.attrs[key] = value
            for key in src["model_weights"]:
                src.copy(src["model_weights"][key], f, key)
    fresh = models.load_model(tmp_path / "tf2.h5", dtype_policy="float32")
    fresh.set_weights([np.zeros_like(w) for w in fresh.get_weights()])
    fresh.load_weights(tmp_path / "w.h5")
    np.testing.assert_allclose(fresh.predict(X6, verbose=0), expected, rtol=1e-5, atol=1e-6)


def mlp_reference(x, weights):
    h = np.maximum(x.astype(np.float64) @ weights["dense"]["kernel"] + weights["dense"]["bias"],
                   0)
    z = h @ weights["dense_1"]["kernel"] + weights["dense_1"]["bias"]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_tf_keras2_functional_h5_with_list_nodes(tmp_path):
    rng = np.random.default_rng(10)

    def tf2_input(name, shape):
        return {"class_name": "InputLayer", "name": name, "inbound_nodes": [],
                "config": {"batch_input_shape": [None, *shape], "dtype": "float32",
                           "sparse": False, "ragged": False, "name": name}}

    def node(*sources):
        return [[[s, 0, 0, {}] for s in sources]]

    shared = _tf2_dense("shared", 4, "tanh", "float32")
    shared.update(name="shared", inbound_nodes=node("a") + node("b"))
    out1 = _tf2_dense("out1", 2, "linear", "float32")
    out1.update(name="out1", inbound_nodes=[[["shared", 0, 0, {}]]])
    out2 = _tf2_dense("out2", 1, "linear", "float32")
    out2.update(name="out2", inbound_nodes=[[["shared", 1, 0, {}]]])
    config = {"class_name": "Functional", "config": {
        "name": "model", "layers": [tf2_input("a", (5,)), tf2_input("b", (5,)), shared, out1,
                                    out2],
        "input_layers": [["a", 0, 0], ["b", 0, 0]],
        "output_layers": [["out1", 0, 0], ["out2", 0, 0]]}}
    w = {"shared": {"kernel": rng.normal(size=(5, 4)).astype(np.float32),
                    "bias": rng.normal(size=4).astype(np.float32)},
         "out1": {"kernel": rng.normal(size=(4, 2)).astype(np.float32),
                  "bias": rng.normal(size=2).astype(np.float32)},
         "out2": {"kernel": rng.normal(size=(4, 1)).astype(np.float32),
                  "bias": rng.normal(size=1).astype(np.float32)},
         "a": {}, "b": {}}
    _write_tf2_h5(tmp_path / "f.h5", config, w)
    model = models.load_model(tmp_path / "f.h5")
    assert model.input_names == ["a", "b"] and model.output_names == ["out1", "out2"]
    xa, xb = rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    ha = np.tanh(xa @ w["shared"]["kernel"] + w["shared"]["bias"])
    hb = np.tanh(xb @ w["shared"]["kernel"] + w["shared"]["bias"])
    got = model.predict([xa.astype(np.float32), xb.astype(np.float32)], verbose=0)
    np.testing.assert_allclose(got[0], ha @ w["out1"]["kernel"] + w["out1"]["bias"],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], hb @ w["out2"]["kernel"] + w["out2"]["bias"],
                               rtol=1e-5, atol=1e-5)


def test_build_config_of_a_layer_called_with_several_tensors():
    """Keras rebuilds such a layer with ``build(**shapes_dict)``: the shapes are named by the
    call's arguments (masks left out); one tensor argument (a list too) stays input_shape."""
    q = layers.Input(shape=(5, 8))
    v = layers.Input(shape=(3, 8))
    attention = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    out = attention(q, v, key=v)
    added = layers.Add()([out, q])
    config = models.Model([q, v], added).get_config()
    entries = {e["class_name"]: e for e in config["layers"]}
    assert entries["MultiHeadAttention"]["build_config"] == {"shapes_dict": {
        "query_shape": [None, 5, 8], "value_shape": [None, 3, 8], "key_shape": [None, 3, 8]}}
    assert entries["Add"]["build_config"] == {"input_shape": [[None, 5, 8], [None, 5, 8]]}
    plain = layers.MultiHeadAttention(num_heads=1, key_dim=2)
    plain(q, q)
    assert layers.serialize(plain)["build_config"] == {"shapes_dict": {
        "query_shape": [None, 5, 8], "value_shape": [None, 5, 8]}}
