"""Keras 3's quantized policies and layers: the policies against Keras's own, files quantized by
real Keras loaded here, models quantized here loaded by Keras, and the errors
(docs/quantization.md)."""
import numpy as np
import pytest

import mixedcore as mc
from mixedcore import dtype_policies as dp
from mixedcore import quantizers as q
from mixedcore.layers import Dense, Embedding, Input
from mixedcore.models import Model, load_model

RNG = np.random.default_rng(7)


# --------------------------------------------------------------------------- policies

NAMES = ["int8_from_float32", "int8_from_mixed_bfloat16", "int4_from_float32",
         "int4/128_from_float32", "int4/-1_from_mixed_bfloat16", "int4/32_from_bfloat16",
         "float8_from_float32", "float8_from_mixed_float16", "gptq/4/128_from_float32",
         "gptq/8/-1_from_mixed_bfloat16", "awq/4/64_from_float32"]
BAD_NAMES = ["int8_from_float16", "int8_from_", "int8_from_foo", "int4/0_from_float32",
             "int4/x_from_float32", "int4/-2_from_float32", "gptq/5/128_from_float32",
             "gptq/4_from_float32", "awq/8/128_from_float32", "awq/4/0_from_float32",
             "int8_from_float32_from_float32"]


@pytest.mark.keras
@pytest.mark.parametrize("name", NAMES)
def test_policy_matches_keras(keras, name):
    ours, theirs = dp.get(name), keras.dtype_policies.get(name)
    assert type(ours).__name__ == type(theirs).__name__
    assert (ours.name, ours.compute_dtype, ours.variable_dtype, ours.quantization_mode) == \
        (theirs.name, theirs.compute_dtype, theirs.variable_dtype, theirs.quantization_mode)
    assert ours.get_config() == theirs.get_config()
    assert repr(ours) == repr(theirs)
    # Keras's dict form loads here, ours in Keras
    assert dp.deserialize(keras.dtype_policies.serialize(theirs)) == ours
    assert keras.dtype_policies.deserialize(dp.serialize(ours)) == theirs
    assert dp.deserialize(dp.serialize(ours)) == ours
    assert hash(dp.get(name)) == hash(ours)


@pytest.mark.keras
@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_policy_names_fail_as_in_keras(keras, name):
    with pytest.raises(ValueError) as theirs:
        keras.dtype_policies.get(name)
    with pytest.raises(ValueError) as ours:
        dp.get(name)
    assert name.split("_from_")[0] in str(ours.value) or "foo" in str(ours.value) or \
        "Cannot convert" in str(ours.value), (str(ours.value), str(theirs.value))


def test_policy_properties_and_errors():
    p = dp.QuantizedDTypePolicy("int8", "mixed_bfloat16")
    assert (p.compute_dtype, p.variable_dtype, p.source_name) == ("bfloat16", "float32",
                                                                 "mixed_bfloat16")
    assert dp.DTypePolicy("float32").quantization_mode is None
    assert p != dp.DTypePolicy("mixed_bfloat16") and p == dp.get("int8_from_mixed_bfloat16")
    with pytest.raises(ValueError, match="Invalid quantization mode"):
        dp.QuantizedDTypePolicy("int2", "float32")
    with pytest.raises(TypeError, match="mode must be a str"):
        dp.QuantizedDTypePolicy(8, "float32")
    with pytest.raises(TypeError, match="amax_history_length"):
        dp.QuantizedFloat8DTypePolicy("float8", "float32", amax_history_length=2.5)
    f = dp.QuantizedFloat8DTypePolicy("float8", "float32", amax_history_length=16)
    assert f != dp.get("float8_from_float32") and f.get_config()["amax_history_length"] == 16
    with pytest.raises(ValueError, match="unexpected|expected the keys"):
        dp.QuantizedDTypePolicy.from_config({"mode": "int8", "source_name": "float32", "x": 1})
    with mc.policy_scope("mixed_bfloat16"):
        assert dp.QuantizedDTypePolicy("int4").name == "int4_from_mixed_bfloat16"
    mc.set_policy("int8_from_float32")
    try:
        assert mc.global_policy() == dp.get("int8_from_float32")
        assert Dense(3).dtype_policy.quantization_mode == "int8"
    finally:
        mc.set_policy(None)


@pytest.mark.keras
def test_policy_map_matches_keras(keras):
    ours = dp.DTypePolicyMap(default_policy="mixed_bfloat16")
    theirs = keras.dtype_policies.DTypePolicyMap(default_policy="mixed_bfloat16")
    for m in (ours, theirs):
        m["encoder/layer_0/dense"] = "int8_from_mixed_bfloat16"
        m["encoder/.*"] = "float16"
        m["decoder"] = "bfloat16"
    for path in ["encoder/layer_0/dense", "encoder/attention/query", "decoder",
                 "decoder/attention", "other"]:
        assert ours[path].name == theirs[path].name
    assert (ours.name, ours.compute_dtype, ours.variable_dtype) == \
        (theirs.name, theirs.compute_dtype, theirs.variable_dtype)
    with pytest.raises(ValueError, match="already exist"):
        ours["decoder"] = "float32"
    for m in (ours, theirs):
        m["encoder/attention/.*"] = "bfloat16"
    with pytest.raises(ValueError, match="matches multiple"):
        ours["encoder/attention/query"]
    with pytest.raises(ValueError, match="matches multiple"):
        theirs["encoder/attention/query"]
    del ours["encoder/attention/.*"]
    del theirs["encoder/attention/.*"]
    loaded = dp.deserialize(keras.dtype_policies.serialize(theirs))
    assert loaded == ours and len(loaded) == 3
    back = keras.dtype_policies.deserialize(dp.serialize(ours))
    assert {k: v.name for k, v in back._policy_map.items()} == \
        {k: v.name for k, v in ours.items()}
    with pytest.raises(ValueError, match="cannot be a `DTypePolicyMap`"):
        dp.DTypePolicyMap(default_policy=ours)
    with pytest.raises(TypeError, match="must be a dict"):
        dp.DTypePolicyMap(policy_map=[("a", "float32")])
    with pytest.raises(ValueError, match="Cannot interpret"):
        ours["x"] = 3.5


# --------------------------------------------------------------------------- quantizers

def test_int4_packing_matches_keras_layout():
    values = RNG.integers(-8, 8, size=(5, 7)).astype(np.int8)
    for axis in (0, 1, -1):
        packed, shape, n = q.pack_int4(values, axis=axis)
        assert packed.shape == shape and n == values.shape[axis]
        np.testing.assert_array_equal(q.unpack_int4(packed, n, axis=axis), values)
    packed, _, _ = q.pack_int4(np.array([[-3, 7], [2, -8], [1, 0]], np.int8), axis=0)
    np.testing.assert_array_equal(packed, [[45, -121], [1, 0]])   # Keras's documented example
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        q.pack_int4(np.array([9], np.int8))
    with pytest.raises(TypeError, match="int8 tensor"):
        q.pack_int4(np.array([1.0]))
    with pytest.raises(ValueError, match="orig_len"):
        q.unpack_int4(packed, 9, axis=0)


@pytest.mark.keras
def test_quantizers_match_keras(keras):
    w = RNG.standard_normal((300, 17)).astype(np.float32)
    ours = q.abs_max_quantize(w, axis=0)
    theirs = keras.quantizers.abs_max_quantize(w, axis=0, to_numpy=True)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, np.asarray(b))
    ours = q.abs_max_quantize_grouped_with_zero_point(w, 64)
    theirs = keras.quantizers.abs_max_quantize_grouped_with_zero_point(w, 64, to_numpy=True)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, np.asarray(b))
    vals = RNG.integers(-8, 8, size=(6, 9)).astype(np.int8)
    np.testing.assert_array_equal(q.pack_int4(vals, axis=-1)[0],
                                  np.asarray(keras.quantizers.pack_int4(vals, axis=-1)[0]))
    with pytest.raises(ValueError, match="NaN"):
        q.abs_max_quantize(np.array([[np.nan, 1.0]], np.float32), axis=-1)


def test_config_rules():
    assert isinstance(q.resolve_config("t", "int8", None), q.Int8QuantizationConfig)
    assert q.resolve_config("t", None, "int4").block_size == 128
    with pytest.raises(ValueError, match="Contradictory"):
        q.resolve_config("t", "int8", q.Int4QuantizationConfig())
    with pytest.raises(ValueError, match="calibration"):
        q.resolve_config("t", "gptq", None)
    with pytest.raises(ValueError, match="either `mode` or `config`"):
        q.resolve_config("t", None, None)
    with pytest.raises(ValueError, match="block_size"):
        q.Int4QuantizationConfig(block_size=0)
    with pytest.raises(ValueError, match="custom quantizers"):
        q.Int4QuantizationConfig(weight_quantizer=q.AbsMaxQuantizer(value_range=(-8, 7)))
    with pytest.raises(ValueError, match="value_range"):
        q.AbsMaxQuantizer(value_range=(-300, 300))
    config = q.Int8QuantizationConfig(activation_quantizer=None)
    assert q.config_from_layer("t", q.serialize(config)) == config


# --------------------------------------------------------------------------- models

def _dense_model(keras, policy, units=(67, 33, 9)):
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(3)
        inputs = keras.Input((200,))
        x = keras.layers.Dense(units[0], activation="relu")(inputs)
        x = keras.layers.Dense(units[1], activation="gelu")(x)
        x = keras.layers.Dense(units[2], use_bias=False)(x)
        model = keras.Model(inputs, x)
    finally:
        keras.config.set_dtype_policy("float32")
    for layer in model.layers[1:3]:
        kernel, bias = layer.get_weights()
        layer.set_weights([kernel, RNG.standard_normal(bias.shape).astype(np.float32) * 0.1])
    return model


def _keras_configs(keras):
    kq = keras.quantizers
    return {
        "int8": ("int8", None, None),
        "int8-weights": ("int8", kq.Int8QuantizationConfig(activation_quantizer=None),
                         q.Int8QuantizationConfig(activation_quantizer=None)),
        # an activation quantizer of its own range and epsilon: its codes, not the default's
        "int8-act-range": ("int8", kq.Int8QuantizationConfig(
            activation_quantizer=kq.AbsMaxQuantizer(axis=-1, value_range=(-100, 100),
                                                    epsilon=1e-3)),
            q.Int8QuantizationConfig(activation_quantizer=q.AbsMaxQuantizer(
                axis=-1, value_range=(-100, 100), epsilon=1e-3))),
        "int4": ("int4", None, None),
        "int4-64": ("int4", kq.Int4QuantizationConfig(block_size=64),
                    q.Int4QuantizationConfig(block_size=64)),
        "int4-channel": ("int4", kq.Int4QuantizationConfig(block_size=-1),
                         q.Int4QuantizationConfig(block_size=-1)),
        "int4-channel-act": ("int4", kq.Int4QuantizationConfig(
            block_size=-1, activation_quantizer=kq.AbsMaxQuantizer()),
            q.Int4QuantizationConfig(block_size=-1, activation_quantizer=q.AbsMaxQuantizer())),
        "float8": ("float8", None, None),
    }


def _ulp(x, dtype):
    """A unit in the last place of max|x| in ``dtype`` (float32 for float32)."""
    top = float(np.abs(x).max())
    bits = {"float32": 23, "bfloat16": 7, "float16": 10}[dtype]
    return 2.0 ** (np.floor(np.log2(top)) - bits) if top > 0 else 0.0


CASES = [(p, c) for p in ("float32", "mixed_bfloat16")
         for c in ("int8", "int8-weights", "int8-act-range", "int4", "int4-64", "int4-channel",
                   "int4-channel-act", "float8")]


@pytest.mark.keras
@pytest.mark.parametrize("policy,case", CASES)
def test_keras_quantized_file_loads_and_predicts(keras, tmp_path, policy, case):
    mode, kconfig, _ = _keras_configs(keras)[case]
    km = _dense_model(keras, policy)
    x = RNG.standard_normal((6, 200)).astype(np.float32)
    float_out = np.asarray(km.predict(x, verbose=0)).astype(np.float32)
    km.quantize(mode, config=kconfig)
    if mode == "float8":         # scales as float8 training would leave them
        for layer, (sx, sk) in zip(km.layers[1:], [(0.05, 0.002), (0.02, 0.003), (0.1, 0.004)]):
            layer.inputs_scale.assign(sx)
            layer.kernel_scale.assign(sk)
    path = tmp_path / "q.keras"
    km.save(path)
    ref = np.asarray(km.predict(x, verbose=0)).astype(np.float32)
    model = load_model(path)
    assert [layer.dtype_policy.name for layer in model.layers[1:]] == \
        [layer.dtype_policy.name for layer in km.layers[1:]]
    # Keras's view of the file (a float8 layer built from a file orders its weights as a
    # float8 layer built fresh, unlike one quantized in memory)
    ours_w, theirs_w = model.get_weights(), keras.models.load_model(path).get_weights()
    assert [(w.shape, str(w.dtype)) for w in ours_w] == \
        [(tuple(w.shape), str(w.dtype)) for w in map(np.asarray, theirs_w)]
    for a, b in zip(ours_w, theirs_w):
        np.testing.assert_array_equal(a, np.asarray(b))
    out = model.predict(x, verbose=0).astype(np.float32)
    cd = "float32" if policy == "float32" else "bfloat16"
    keras_error = float(np.abs(ref - float_out).max())
    bound = 4 * _ulp(ref, cd) + (1e-5 if cd == "float32" else keras_error)
    assert np.abs(out - ref).max() <= bound, (np.abs(out - ref).max(), bound, keras_error)
    assert keras_error > 0             # the case does quantize


@pytest.mark.keras
@pytest.mark.parametrize("policy,case", CASES)
def test_quantize_here_matches_keras_and_loads_in_keras(keras, tmp_path, policy, case):
    mode, kconfig, config = _keras_configs(keras)[case]
    km = _dense_model(keras, policy)
    km.save(tmp_path / "float.keras")
    model = load_model(tmp_path / "float.keras")
    km.quantize(mode, config=kconfig)
    model.quantize(mode, config=config)
    for a, b in zip(model.get_weights(), km.get_weights()):
        assert a.dtype == np.asarray(b).dtype
        np.testing.assert_array_equal(a, np.asarray(b))
    model.save(tmp_path / "ours.keras")
    back = keras.models.load_model(tmp_path / "ours.keras")
    x = RNG.standard_normal((4, 200)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(back.predict(x, verbose=0)),
                                  np.asarray(km.predict(x, verbose=0)))


@pytest.mark.keras
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("mode,block", [("int8", None), ("int4", None), ("int4", 4),
                                        ("int4", -1)])
def test_embedding_quantization_matches_keras(keras, tmp_path, policy, mode, block):
    kconfig = None if block is None else keras.quantizers.Int4QuantizationConfig(block_size=block)
    config = None if block is None else q.Int4QuantizationConfig(block_size=block)
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(5)
        inputs = keras.Input((7,), dtype="int32")
        km = keras.Model(inputs, keras.layers.Embedding(50, 11)(inputs))
    finally:
        keras.config.set_dtype_policy("float32")
    km.save(tmp_path / "f.keras")
    model = load_model(tmp_path / "f.keras")
    km.quantize(mode, config=kconfig)
    model.quantize(mode, config=config)
    for a, b in zip(model.get_weights(), km.get_weights()):
        np.testing.assert_array_equal(a, np.asarray(b))
    km.save(tmp_path / "k.keras")
    x = RNG.integers(0, 50, size=(4, 7))
    ref = np.asarray(km.predict(x, verbose=0)).astype(np.float32)
    for m in (model, load_model(tmp_path / "k.keras")):
        out = m.predict(x, verbose=0).astype(np.float32)
        assert np.abs(out - ref).max() <= 2 * _ulp(ref, "float32" if policy == "float32"
                                                   else "bfloat16")


def test_quantized_dense_trains_its_bias_only():
    mc.random.set_random_seed(1)
    inputs = Input((16,))
    model = Model(inputs, Dense(4)(Dense(8, activation="relu")(inputs)))
    model.quantize("int8")
    kernels_before = [layer.kernel.copy() for layer in model.layers[1:]]
    bias_before = model.layers[1].bias.copy()
    model.compile(optimizer="sgd", loss="mse")
    x = RNG.standard_normal((32, 16)).astype(np.float32)
    model.fit(x, RNG.standard_normal((32, 4)).astype(np.float32), epochs=2, verbose=0)
    for layer, before in zip(model.layers[1:], kernels_before):
        np.testing.assert_array_equal(layer.kernel, before)
    assert not np.array_equal(model.layers[1].bias, bias_before)
    assert len(model.trainable_weights) == 2


def test_quantize_errors():
    layer = Dense(4)
    with pytest.raises(ValueError, match="isn't yet built"):
        layer.quantize("int8")
    layer.build_from_shape((None, 8))
    with pytest.raises(ValueError, match="Invalid quantization mode"):
        layer.quantize("int3")
    with pytest.raises(ValueError, match="Contradictory"):
        layer.quantize("int8", config=q.Int4QuantizationConfig())
    layer.quantize("int8")
    with pytest.raises(ValueError, match="already quantized"):
        layer.quantize("int4")
    half = Dense(4, dtype="mixed_float16")
    half.build_from_shape((None, 8))
    with pytest.raises(ValueError, match="float16"):
        half.quantize("int8")
    emb = Embedding(10, 4)
    emb.build_from_shape((None,))
    with pytest.raises(ValueError, match="cannot be quantized in mode 'float8'"):
        emb.quantize("float8")
    with pytest.raises(ValueError, match="takes"):
        Embedding(10, 4, dtype="float8_from_float32")
    inputs = Input((8,))
    model = Model(inputs, Dense(3, dtype="float8_from_float32")(inputs))
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="inference-only"):
        model.fit(np.ones((4, 8), np.float32), np.ones((4, 3), np.float32), verbose=0)


@pytest.mark.keras
def test_file_with_wrong_scale_shape_is_refused(keras, tmp_path):
    import h5py
    import zipfile
    km = _dense_model(keras, "float32")
    km.quantize("int8")
    path = tmp_path / "q.keras"
    km.save(path)
    bad = tmp_path / "bad.keras"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "model.weights.h5":
                (tmp_path / "w.h5").write_bytes(data)
                with h5py.File(tmp_path / "w.h5", "r+") as f:
                    group = f["layers/dense/vars"]
                    del group["2"]
                    group["2"] = np.ones((66,), np.float32)
                data = (tmp_path / "w.h5").read_bytes()
            dst.writestr(item, data)
    with pytest.raises(ValueError, match=r"\(66,\)|66"):
        load_model(bad)


def test_global_quantized_policy_layer_is_built_quantized():
    layer = Dense(5, dtype="int4/8_from_float32")
    layer.build_from_shape((None, 20))
    assert [w.shape for w in layer.get_weights()] == [(5,), (20, 3), (3, 5), (3, 5), (20,)]
    np.testing.assert_array_equal(layer.g_idx if hasattr(layer, "g_idx") else
                                  layer._weight("g_idx"), np.arange(20) // 8)


def test_numerics_report_measures_each_layers_quantization_error():
    mc.random.set_random_seed(2)
    inputs = Input((64,))
    hidden = Dense(32, activation="relu", name="first")(inputs)
    model = Model(inputs, Dense(8, name="second")(hidden))
    x = RNG.standard_normal((40, 64)).astype(np.float32)
    errors = {}
    for mode in ("int8", "int4"):
        report = mc.utils.numerics_report(model, x, quantize=mode, batch_size=16)
        assert set(report.quantization) == {"first", "second"}
        errors[mode] = report.quantization["first"]["relative_error"]
        assert report.as_dict()["first"]["quantization error"]["mode"] == mode
        assert "quantization error" in report.table()
    assert 0 < errors["int8"] < errors["int4"]
    # the first layer's row is its own error: a quantized copy on the same inputs
    copy = Dense(32, activation="relu")
    copy.build_from_shape((None, 64))
    copy.set_weights(model.get_layer("first").get_weights())
    copy.quantize("int4")
    want = np.abs(copy(x) - model.get_layer("first")(x)).max()
    report = mc.utils.numerics_report(model, x, quantize=q.Int4QuantizationConfig(), batch_size=40)
    assert report.quantization["first"]["max_abs_error"] == pytest.approx(float(want), rel=1e-6)
    assert model.get_layer("first").quantization_mode is None    # the model is untouched
    with pytest.raises(ValueError, match="Invalid quantization mode"):
        mc.utils.numerics_report(model, x, quantize="int3")


def test_numerics_report_measures_attention_as_one_layer():
    mc.random.set_random_seed(4)
    query, value = Input((6, 16)), Input((5, 12))
    mha = mc.layers.MultiHeadAttention(num_heads=2, key_dim=8, name="mha")
    model = Model([query, value], Dense(4, name="head")(mha(query, value)))
    xq = RNG.standard_normal((3, 6, 16)).astype(np.float32)
    xv = RNG.standard_normal((3, 5, 12)).astype(np.float32)
    report = mc.utils.numerics_report(model, [xq, xv], quantize="int8", batch_size=3)
    assert set(report.quantization) == {"mha", "head"}
    # the row is the error of the attention with its projections quantized, on its own inputs
    copy = mc.layers.MultiHeadAttention.from_config(mha.get_config())
    copy(xq, xv)
    copy.set_weights(mha.get_weights())
    copy.quantize("int8")
    want = np.abs(copy(xq, xv) - mha(xq, xv)).max()
    assert want > 0
    assert report.quantization["mha"]["max_abs_error"] == pytest.approx(float(want), rel=1e-6)
    assert mha.quantization_mode is None
    # float8 as well
    assert set(mc.utils.numerics_report(model, [xq, xv], quantize="float8",
                                        batch_size=3).quantization) == {"mha", "head"}


def test_policy_map_as_a_layers_dtype():
    policy_map = dp.DTypePolicyMap(default_policy="mixed_bfloat16")
    policy_map["head"] = "float32"
    assert Dense(3, name="head", dtype=policy_map).dtype_policy == dp.DTypePolicy("float32")
    assert Dense(3, name="body", dtype=policy_map).compute_dtype == "bfloat16"


@pytest.mark.keras
def test_gptq_policy_over_float_weights_is_refused(keras, tmp_path):
    """A file whose Dense says GPTQ but holds a float kernel and bias: refused by name."""
    km = _dense_model(keras, "float32")
    km.save(tmp_path / "f.keras")
    import json
    import zipfile
    with zipfile.ZipFile(tmp_path / "f.keras") as src, \
            zipfile.ZipFile(tmp_path / "g.keras", "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                config["config"]["layers"][1]["config"]["dtype"] = {
                    "module": "keras.dtype_policies", "class_name": "GPTQDTypePolicy",
                    "config": {"mode": "gptq/4/128", "source_name": "float32"},
                    "registered_name": None}
                data = json.dumps(config).encode()
            dst.writestr(item, data)
    with pytest.raises(ValueError, match=r"g\.keras.*the weights do not fit the model"):
        load_model(tmp_path / "g.keras")
