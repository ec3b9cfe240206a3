"""MultiHeadAttention's quantized projections against Keras 3: Keras's quantized weights bit for
bit, files both ways (Keras's own, which record no quantization, and the policy-map files
written here, which Keras loads), predictions, the fused int8 query/key/value product, training
and the errors (docs/quantization.md)."""
import io
import pickle
import zipfile

import numpy as np
import pytest

from mixedcore import layers
from mixedcore import quantizers as q
from mixedcore.models import Model, load_model

RNG = np.random.default_rng(23)

# (name, query shape, key/value shape or None for self-attention, MHA arguments)
FORMS = [
    ("self", (6, 24), None, dict(num_heads=3, key_dim=8)),
    ("cross", (5, 16), (7, 20), dict(num_heads=2, key_dim=8, value_dim=12, use_bias=False,
                                     output_shape=10)),
    ("rank4", (3, 4, 16), None, dict(num_heads=2, key_dim=4)),
]
CASES = ("int8", "int4", "int4-channel", "float8")


def _configs(keras):
    return {"int8": ("int8", None, None),
            "int4": ("int4", None, None),
            "int4-channel": ("int4", keras.quantizers.Int4QuantizationConfig(block_size=-1),
                             q.Int4QuantizationConfig(block_size=-1)),
            "float8": ("float8", None, None)}


def _ulp(x, dtype):
    top = float(np.abs(x).max())
    bits = {"float32": 23, "bfloat16": 7}[dtype]
    return 2.0 ** (np.floor(np.log2(top)) - bits) if top > 0 else 0.0


def _keras_model(keras, form, policy):
    _, qshape, vshape, args = form
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(5)
        query = keras.Input(qshape)
        mha = keras.layers.MultiHeadAttention(name="mha", **args)
        if vshape is None:
            inputs, y = query, mha(query, query)
        else:
            value, key = keras.Input(vshape), keras.Input(vshape)
            inputs, y = [query, value, key], mha(query, value, key)
        model = keras.Model(inputs, keras.layers.Dense(4, name="head")(y))
    finally:
        keras.config.set_dtype_policy("float32")
    # biases that are not zero, so the epilogues are tested
    for w in mha.weights:
        if w.path.endswith("bias"):
            w.assign(RNG.standard_normal(tuple(w.shape)).astype(np.float32) * 0.3)
    return model


def _inputs(form, batch=2):
    _, qshape, vshape, _ = form
    x = RNG.standard_normal((batch,) + qshape).astype(np.float32)
    if vshape is None:
        return x
    return [x, RNG.standard_normal((batch,) + vshape).astype(np.float32),
            RNG.standard_normal((batch,) + vshape).astype(np.float32)]


def _keras_weights(layer):
    """{'query/kernel': array, ...} of a Keras MultiHeadAttention."""
    return {w.path.split("/", 1)[1]: np.asarray(w.numpy()) for w in layer.weights}


def _ours(layer):
    return dict(zip(layer._names, layer._values))


@pytest.mark.keras
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
def test_quantized_attention_both_ways(keras, tmp_path, policy, case, form):
    mode, kconfig, config = _configs(keras)[case]
    km = _keras_model(keras, form, policy)
    km.save(tmp_path / "float.keras")
    model = load_model(tmp_path / "float.keras")
    x = _inputs(form)
    float_out = np.asarray(km.predict(x, verbose=0)).astype(np.float32)
    km.quantize(mode, config=kconfig)
    model.quantize(mode, config=config)
    # quantizing here gives Keras's bytes, projection by projection
    theirs, ours = _keras_weights(km.get_layer("mha")), _ours(model.get_layer("mha"))
    assert sorted(theirs) == sorted(ours)
    for name, value in theirs.items():
        assert ours[name].dtype == value.dtype and ours[name].shape == value.shape, name
        np.testing.assert_array_equal(ours[name], value, err_msg=name)
    if mode == "float8":
        for w in km.get_layer("mha").weights:
            if w.path.endswith("inputs_scale"):
                w.assign(0.05)
            elif w.path.endswith("/kernel_scale"):
                w.assign(0.002)
        mha = model.get_layer("mha")
        mha.set_weights([np.float32(0.05) if n.endswith("/inputs_scale") else np.float32(0.002)
                         if n.endswith("/kernel_scale") else w
                         for n, w in zip(mha.weight_names(), mha.get_weights())])
    km.save(tmp_path / "keras_q.keras")
    ref = np.asarray(km.predict(x, verbose=0)).astype(np.float32)
    keras_error = float(np.abs(ref - float_out).max())
    assert keras_error > 0
    cd = "float32" if policy == "float32" else "bfloat16"
    bound = 4 * _ulp(ref, cd) + (1e-5 if cd == "float32" else keras_error)
    # Keras's own file (its config records no quantization) loads here with its weights
    loaded = load_model(tmp_path / "keras_q.keras")
    assert loaded.get_layer("mha").quantization_mode == mode
    loaded_w = _ours(loaded.get_layer("mha"))
    for name, value in _keras_weights(km.get_layer("mha")).items():
        np.testing.assert_array_equal(loaded_w[name], value, err_msg=name)
    for m in (loaded, model):
        out = np.asarray(m.predict(x, verbose=0)).astype(np.float32)
        assert np.abs(out - ref).max() <= bound, (np.abs(out - ref).max(), bound)
    # saved here (the projections' policies in a policy map), Keras loads it and predicts as
    # its own quantized model, and so does mixedcore
    model.save(tmp_path / "ours.keras")
    back = keras.models.load_model(tmp_path / "ours.keras")
    np.testing.assert_array_equal(np.asarray(back.predict(x, verbose=0)), ref)
    again = load_model(tmp_path / "ours.keras")
    np.testing.assert_array_equal(again.predict(x), model.predict(x))


@pytest.mark.keras
def test_grouped_int4_with_several_groups_loads_from_keras(keras, tmp_path):
    """400 input features: four groups of 128 rows (the last one short)."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        inp = keras.Input((5, 400))
        km = keras.Model(inp, keras.layers.MultiHeadAttention(2, 16, use_bias=False,
                                                              name="mha")(inp, inp))
    finally:
        keras.config.set_dtype_policy("float32")
    km.save(tmp_path / "float.keras")
    x = RNG.standard_normal((2, 5, 400)).astype(np.float32)
    km.quantize("int4")
    km.save(tmp_path / "q.keras")
    ref = np.asarray(km.predict(x, verbose=0)).astype(np.float32)
    loaded = load_model(tmp_path / "q.keras")
    assert loaded.get_layer("mha")._weight("query/kernel_scale").shape == (4, 32)
    model = load_model(tmp_path / "float.keras")
    model.quantize("int4")
    for m in (loaded, model):
        out = np.asarray(m.predict(x)).astype(np.float32)
        assert np.abs(out - ref).max() <= 8 * _ulp(ref, "bfloat16")


def _mha_model(policy="float32", **kwargs):
    inp = layers.Input((6, 32))
    y = layers.MultiHeadAttention(4, 8, name="mha", dtype=policy, **kwargs)(inp, inp)
    model = Model(inp, layers.Dense(3, name="head", dtype=policy)(y))
    mha = model.get_layer("mha")
    mha.set_weights([w + RNG.standard_normal(w.shape).astype(w.dtype) * 0.1
                     if n.endswith("bias") else w
                     for n, w in zip(mha.weight_names(), mha.get_weights())])
    return model


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_fused_int8_qkv_equals_separate_projections(isa_level, policy):
    """Self-attention's three int8 projections run as one integer product; each column is
    the same exact sum and epilogue as in its own product."""
    model = _mha_model(policy)
    model.quantize("int8")
    mha = model.get_layer("mha")
    x = RNG.standard_normal((3, 6, 32)).astype(np.float32)
    fused = mha(x, x)                         # the same array: the fused product
    apart = mha(x, x.copy())                  # two arrays: three products
    np.testing.assert_array_equal(fused, apart)


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_dequantized_reference(isa_level, mode):
    """At every level, the quantized layer is the float layer with Keras's dequantized
    kernels, within the rounding of the quantized inputs (int8) or exactly in its GEMM's
    error (int4)."""
    model = _mha_model()
    model.quantize(mode)
    mha = model.get_layer("mha")
    float_mha = layers.MultiHeadAttention(4, 8)
    x = RNG.standard_normal((2, 6, 32)).astype(np.float32)
    float_mha(x, x)
    values = {n: mha._quantized(n.split("/")[0]).dequantized_kernel() if n.endswith("/kernel")
              else w for n, w in zip(mha._names, mha._values) if n.endswith(("kernel", "bias"))}
    float_mha.set_weights([values[n.split("/", 1)[1]] for n in float_mha.weight_names()])
    got = mha(x, x)
    want = float_mha(x, x)
    tol = 0.05 if mode == "int8" else 1e-5
    assert np.abs(got - want).max() <= tol * np.abs(want).max()


def test_training_keeps_kernels_and_trains_biases():
    model = _mha_model()
    model.quantize("int8")
    mha = model.get_layer("mha")
    frozen = {n: w.copy() for n, w in zip(mha._names, mha._values) if not n.endswith("bias")}
    biases = {n: w.copy() for n, w in zip(mha._names, mha._values) if n.endswith("bias")}
    assert len(mha.trainable_weights) == 4                 # the four biases
    x = RNG.standard_normal((16, 6, 32)).astype(np.float32)
    y = RNG.standard_normal((16, 6, 3)).astype(np.float32)
    model.compile(optimizer="adam", loss="mse")
    history = model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    now = dict(zip(mha._names, mha._values))
    for n, w in frozen.items():
        np.testing.assert_array_equal(now[n], w)
    assert all(not np.array_equal(now[n], w) for n, w in biases.items())
    # the input gradient goes through the dequantized kernels
    out = mha(x[:2], x[:2], training=True)
    dx = mha.backward(np.ones_like(out))
    assert np.all(np.isfinite(dx["query"])) and np.abs(dx["query"]).max() > 0


def test_float8_projections_are_inference_only():
    model = _mha_model()
    model.quantize("float8")
    x = RNG.standard_normal((4, 6, 32)).astype(np.float32)
    model.predict(x)
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="float8 projections are inference-only"):
        model.fit(x, np.zeros((4, 6, 3), np.float32), epochs=1, verbose=0)


def test_filters_see_the_projections_as_keras_sub_layers():
    model = _mha_model()
    model.quantize("int8", filters="query|key")
    mha = model.get_layer("mha")
    assert sorted(mha._projection_quant) == ["key", "query"]
    assert mha.quantization_mode == "int8"
    assert model.get_layer("head").quantization_mode is None
    seen = []
    model.quantize("int4", filters=lambda layer: seen.append(getattr(layer, "path", None))
                   or layer.name == "value")
    assert "mha/value" in seen and "mha/attention_output" in seen and "mha/query" not in seen
    assert mha.quantization_mode == "mixed"
    assert mha._projection_quant["value"][0].name == "int4/128_from_float32"
    x = RNG.standard_normal((2, 6, 32)).astype(np.float32)
    assert np.all(np.isfinite(model.predict(x)))


def test_pickle_and_policy_override(tmp_path):
    model = _mha_model()
    model.quantize("int8")
    x = RNG.standard_normal((2, 6, 32)).astype(np.float32)
    want = model.predict(x)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(model)).predict(x), want)
    model.save(tmp_path / "m.keras")
    bf = load_model(tmp_path / "m.keras", dtype_policy="mixed_bfloat16").get_layer("mha")
    assert bf.dtype_policy.name == "mixed_bfloat16"
    assert {p.name for p, _ in bf._projection_quant.values()} == {"int8_from_mixed_bfloat16"}


def test_errors(tmp_path):
    unbuilt = layers.MultiHeadAttention(2, 4)
    with pytest.raises(ValueError, match="isn't yet built"):
        unbuilt.quantize("int8")
    model = _mha_model()
    mha = model.get_layer("mha")
    with pytest.raises(ValueError, match="calibration data"):
        mha.quantize("gptq")
    with pytest.raises(ValueError, match="no projection 'gate'"):
        mha.quantize("int8", parts=["gate"])
    mha.quantize("int8", parts=["query"])
    with pytest.raises(ValueError, match="query projection is already quantized"):
        mha.quantize("int4")
    assert sorted(mha._projection_quant) == ["query"]          # nothing else changed
    with pytest.raises(ValueError, match="doesn't work well with compute_dtype='float16'"):
        _mha_model("mixed_float16").get_layer("mha").quantize("int8")
    with pytest.raises(ValueError, match="float32, bfloat16 or float16, not float64"):
        _mha_model("float64").get_layer("mha").quantize("int4")
    # a config a Keras file cannot hold: refused before anything is written
    weights_only = _mha_model()
    weights_only.quantize(config=q.Int8QuantizationConfig(activation_quantizer=None))
    with pytest.raises(ValueError, match="cannot be saved"):
        weights_only.save(tmp_path / "w.keras")
    assert not (tmp_path / "w.keras").exists()
    # a projection policy of another compute dtype than the layer's
    from mixedcore.dtype_policies import DTypePolicyMap
    with pytest.raises(ValueError, match="they must agree"):
        layers.MultiHeadAttention(2, 4, name="m", dtype=DTypePolicyMap(
            "float32", {"m/query": "int8_from_mixed_bfloat16"}))


def _edited(src, dst, edit_h5, edit_config=None):
    """A copy of the .keras file ``src`` at ``dst`` with its weights file edited in place by
    ``edit_h5(h5py.File)`` (and its config by ``edit_config(dict)``)."""
    import h5py
    import json
    with zipfile.ZipFile(src) as z:
        files = {n: z.read(n) for n in z.namelist()}
    buf = io.BytesIO(files["model.weights.h5"])
    with h5py.File(buf, "r+") as h5:
        edit_h5(h5)
    files["model.weights.h5"] = buf.getvalue()
    if edit_config is not None:
        config = json.loads(files["config.json"])
        edit_config(config)
        files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(dst, "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
    return dst


def test_hostile_group_indices(tmp_path):
    """A file's int4 group indices that name no group are a ValueError, not a wrong answer."""
    model = _mha_model()
    model.quantize("int4")
    model.save(tmp_path / "m.keras")

    def edit(h5):
        g = h5["layers/multi_head_attention/query_dense/vars/4"]
        g[...] = np.full(g.shape, 7.0, np.float32)
    bad = load_model(_edited(tmp_path / "m.keras", tmp_path / "bad.keras", edit))
    with pytest.raises(ValueError, match="g_idx must hold group numbers"):
        bad.predict(RNG.standard_normal((1, 6, 32)).astype(np.float32))


def test_masks_scores_and_cross_attention_against_the_dequantized_layer():
    """Every call form of a quantized layer (masks, causal, a key, the scores returned) is the
    float layer with the dequantized kernels, within the int8 rounding of the inputs."""
    q_in = layers.Input((5, 12))
    v_in = layers.Input((7, 10))
    mha = layers.MultiHeadAttention(2, 4, value_dim=6, name="mha")
    model = Model([q_in, v_in], mha(q_in, v_in))
    model.quantize("int8")
    ref = layers.MultiHeadAttention(2, 4, value_dim=6)
    q = RNG.standard_normal((3, 5, 12)).astype(np.float32)
    v = RNG.standard_normal((3, 7, 10)).astype(np.float32)
    k = RNG.standard_normal((3, 7, 10)).astype(np.float32)
    ref(q, v, key=k)
    values = {n: mha._quantized(n.split("/")[0]).dequantized_kernel() if n.endswith("/kernel")
              else w for n, w in zip(mha._names, mha._values) if n.endswith(("kernel", "bias"))}
    ref.set_weights([values[n.split("/", 1)[1]] for n in ref.weight_names()])
    mask = RNG.random((3, 5, 7)) > 0.3
    for kwargs in ({}, {"key": k}, {"attention_mask": mask}, {"use_causal_mask": True},
                   {"attention_mask": mask, "return_attention_scores": True}):
        got, want = mha(q, v, **kwargs), ref(q, v, **kwargs)
        for g, w in zip(*(((a,) if not isinstance(a, tuple) else a) for a in (got, want))):
            assert g.shape == w.shape
            assert np.abs(g - w).max() <= 0.05 * max(np.abs(w).max(), 1e-6), kwargs


def test_stored_shapes_of_no_mode_are_reported(tmp_path):
    """A projection filed with shapes that are neither float nor a mode's layout is left float,
    and the load fails with the loader's clear error, before any weight is set."""
    model = _mha_model()
    model.quantize("int8")
    model.save(tmp_path / "m.keras")

    def edit(h5):
        group = h5["layers/multi_head_attention/key_dense/vars"]
        del group["2"]
        group["2"] = np.ones((1, 1, 4, 9), np.float32)        # a scale of the wrong shape

    def plain(config):                                        # as Keras writes it: no map
        for entry in config["config"]["layers"]:
            if entry["class_name"] == "MultiHeadAttention":
                entry["config"]["dtype"] = "float32"
    for path in (_edited(tmp_path / "m.keras", tmp_path / "bad.keras", edit),
                 _edited(tmp_path / "m.keras", tmp_path / "bad_plain.keras", edit, plain)):
        with pytest.raises(ValueError, match="key_dense"):
            load_model(path)
