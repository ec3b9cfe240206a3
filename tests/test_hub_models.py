"""keras_hub's text backbones, BERT's classifier and keras_hub's layers, loaded from the files
Keras writes (mixedcore.hub, docs/keras_hub.md), compared with Keras's own predictions."""
import json
import zipfile

import numpy as np
import pytest

pytestmark = pytest.mark.keras

SIZES = dict(vocabulary_size=100, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
             max_sequence_length=24)
BACKBONES = ["BertBackbone", "GPT2Backbone", "DistilBertBackbone", "RobertaBackbone"]
POLICIES = ["mixed_bfloat16", "mixed_float16"]


@pytest.fixture(scope="session")
def keras_hub(keras):
    return pytest.importorskip("keras_hub", reason="keras_hub is not installed: pip install "
                               '--no-deps "keras-hub==0.32.0" regex tokenizers (README.md)')


def _inputs(segments, seed=0, batch=3, length=10):
    """Token ids with padding: row 0 full, row 1 padded after 6 tokens, row 2 after 3."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, length), "int32")
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    x = {"token_ids": rng.integers(1, SIZES["vocabulary_size"], (batch, length)).astype("int32")
         * mask, "padding_mask": mask}
    if segments:
        seg = np.zeros((batch, length), "int32")
        seg[:, 4:] = 1
        x["segment_ids"] = seg * mask
    return x


def _as_dict(out):
    return {k: np.asarray(v, np.float32) for k, v in out.items()} if isinstance(out, dict) \
        else {"output": np.asarray(out, np.float32)}


def _keras_call(keras, model, x):
    """The Keras model's output on numpy inputs (a direct call: a task's predict would ask for
    a data pipeline)."""
    out = model({k: keras.ops.convert_to_tensor(v) for k, v in x.items()}, training=False)
    if isinstance(out, dict):
        return {k: keras.ops.convert_to_numpy(v) for k, v in out.items()}
    return keras.ops.convert_to_numpy(out)


class _Saved:
    """One Keras model saved as .keras (and .weights.h5), with its float32 predictions."""

    def __init__(self, keras, cls, model, path, x):
        self.cls, self.model, self.path, self.x = cls, model, path, x
        self.weights_path = str(path).replace(".keras", ".weights.h5")
        model.save(path)
        model.save_weights(self.weights_path)
        self.ref = _as_dict(_keras_call(keras, model, x))


@pytest.fixture(scope="session")
def saved(keras, keras_hub, tmp_path_factory):
    """{name: _Saved} for the four backbones and the classifier, built and saved once."""
    keras.utils.set_random_seed(1)
    folder = tmp_path_factory.mktemp("hub")
    out = {}
    for name in BACKBONES:
        cls = getattr(keras_hub.models, name)
        model = cls(**SIZES)
        out[name] = _Saved(keras, cls, model, folder / f"{name}.keras",
                           _inputs(name == "BertBackbone"))
    backbone = keras_hub.models.BertBackbone(**SIZES)
    classifier = keras_hub.models.BertTextClassifier(backbone, num_classes=3,
                                                     preprocessor=None)
    out["BertTextClassifier"] = _Saved(keras, keras_hub.models.BertTextClassifier, classifier,
                                       folder / "BertTextClassifier.keras", _inputs(True, 1))
    return out


def _max_abs(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def _keras_mixed(keras, keras_hub, entry, policy):
    """The same Keras model built under ``policy`` with the float32 model's weights."""
    if entry.cls is keras_hub.models.BertTextClassifier:
        backbone = keras_hub.models.BertBackbone(**SIZES, dtype=policy)
        model = keras_hub.models.BertTextClassifier(backbone, num_classes=3, preprocessor=None)
    else:
        model = entry.cls(**SIZES, dtype=policy)
    model.set_weights(entry.model.get_weights())
    return model


@pytest.mark.parametrize("name", BACKBONES + ["BertTextClassifier"])
def test_float32_matches_keras(saved, name):
    from mixedcore import hub
    from mixedcore.models import load_model
    entry = saved[name]
    model = load_model(entry.path)
    assert type(model) is getattr(hub, name)
    assert model.dtype_policy.name == "float32"
    out = _as_dict(model.predict(entry.x, verbose=0))
    assert set(out) == set(entry.ref)
    for key, ref in entry.ref.items():
        assert out[key].shape == ref.shape
        err = _max_abs(out[key], ref)
        assert err <= 1e-4 * np.abs(ref).max(), (name, key, err)


@pytest.mark.parametrize("name", BACKBONES)
def test_weights_file_into_model_from_config(saved, name):
    from mixedcore import hub
    entry = saved[name]
    model = getattr(hub, name).from_config(entry.model.get_config())
    model.load_weights(entry.weights_path)
    out = _as_dict(model.predict(entry.x, verbose=0))
    for key, ref in entry.ref.items():
        assert _max_abs(out[key], ref) <= 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", BACKBONES + ["BertTextClassifier"])
def test_mixed_policies_as_close_as_keras(keras, keras_hub, saved, name, policy):
    from mixedcore.models import load_model
    entry = saved[name]
    model = load_model(entry.path, dtype_policy=policy)
    assert model.dtype_policy.name == policy
    assert all(layer.dtype_policy.name == policy for layer in model._leaf_layers()
               if layer.weights)
    out = _as_dict(model.predict(entry.x, verbose=0))
    reference = _as_dict(_keras_call(keras, _keras_mixed(keras, keras_hub, entry, policy),
                                     entry.x))
    for key, ref in entry.ref.items():
        ours, theirs = _max_abs(out[key], ref), _max_abs(reference[key], ref)
        assert 0 < theirs and ours <= 4 * theirs, (name, policy, key, ours, theirs)


@pytest.mark.parametrize("name", ["BertBackbone", "GPT2Backbone"])
def test_padding_tokens_do_not_reach_real_positions(saved, name):
    """keras_hub's padding mask masks the keys: what stands at padded positions changes
    nothing at the real ones."""
    from mixedcore.models import load_model
    entry = saved[name]
    model = load_model(entry.path)
    x = dict(entry.x)
    changed = dict(x)
    changed["token_ids"] = np.where(x["padding_mask"] == 1, x["token_ids"], 7).astype("int32")
    a = _as_dict(model.predict(x, verbose=0))
    b = _as_dict(model.predict(changed, verbose=0))
    key = "sequence_output" if "sequence_output" in a else "output"
    real = x["padding_mask"] == 1
    np.testing.assert_array_equal(a[key][real], b[key][real])
    assert not np.array_equal(a[key][~real], b[key][~real])


def test_saved_by_mixedcore_loads_back(saved, tmp_path):
    from mixedcore.models import load_model
    entry = saved["BertTextClassifier"]
    model = load_model(entry.path)
    path = tmp_path / "again.keras"
    model.save(path)
    again = load_model(path)
    assert again.get_config() == model.get_config()
    np.testing.assert_array_equal(again.predict(entry.x, verbose=0),
                                  model.predict(entry.x, verbose=0))


def _rewrite(src, dst, edit):
    """A copy of the .keras archive ``src`` whose config.json ``edit`` changed."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            zout.writestr(item, data)
    return dst


def test_unknown_keras_hub_class_is_named(saved, tmp_path):
    from mixedcore.models import load_model

    def rename(config):
        config["class_name"] = "LlamaBackbone"
        config["registered_name"] = "keras_hub>LlamaBackbone"
        config["module"] = "keras_hub.src.models.llama.llama_backbone"
    path = _rewrite(saved["GPT2Backbone"].path, tmp_path / "llama.keras", rename)
    with pytest.raises(ValueError, match="LlamaBackbone") as info:
        load_model(path)
    assert "keras_hub>GPT2Backbone" in str(info.value)


def test_classifier_with_preprocessor_is_refused(saved, tmp_path):
    from mixedcore.models import load_model

    def add_preprocessor(config):
        config["config"]["preprocessor"] = {
            "module": "keras_hub.src.models.bert.bert_text_classifier_preprocessor",
            "class_name": "BertTextClassifierPreprocessor",
            "config": {"name": "bert_text_classifier_preprocessor", "sequence_length": 16},
            "registered_name": "keras_hub>BertTextClassifierPreprocessor"}
    path = _rewrite(saved["BertTextClassifier"].path, tmp_path / "pre.keras", add_preprocessor)
    with pytest.raises(ValueError, match="preprocessors are not supported") as info:
        load_model(path)
    assert "BertTextClassifierPreprocessor" in str(info.value)
    assert "backbone can be loaded" in str(info.value)


def test_hub_layers_in_a_functional_model(keras, keras_hub, tmp_path):
    """keras_hub's layers in a model of one's own, cross-attention and an untied reversible
    embedding included, load by their registered names and give Keras's outputs."""
    from mixedcore.models import load_model
    keras.utils.set_random_seed(2)
    ids = keras.Input((None,), dtype="int32", name="ids")
    mask = keras.Input((None,), dtype="int32", name="mask")
    source = keras.Input((None,), dtype="int32", name="source")
    x = keras_hub.layers.TokenAndPositionEmbedding(50, 16, 16)(ids)
    e = keras_hub.layers.ReversibleEmbedding(50, 16, tie_weights=False)(source)
    e = keras.layers.Add()([e, keras_hub.layers.PositionEmbedding(16)(e)])
    e = keras_hub.layers.TransformerEncoder(32, 2, normalize_first=True,
                                            activation="gelu")(e, padding_mask=mask)
    y = keras_hub.layers.TransformerDecoder(32, 2)(x, e, decoder_padding_mask=mask,
                                                   encoder_padding_mask=mask)
    model = keras.Model([ids, mask, source], y)
    path = tmp_path / "layers.keras"
    model.save(path)
    rng = np.random.default_rng(3)
    m = np.ones((2, 8), "int32")
    m[1, 5:] = 0
    xs = [rng.integers(1, 50, (2, 8)).astype("int32"), m,
          rng.integers(1, 50, (2, 8)).astype("int32")]
    ref = keras.ops.convert_to_numpy(model([keras.ops.convert_to_tensor(v) for v in xs]))
    ours = load_model(path)
    out = ours.predict(xs, verbose=0)
    assert _max_abs(out, ref) <= 1e-4 * np.abs(ref).max()
    again = tmp_path / "again.keras"
    ours.save(again)
    np.testing.assert_array_equal(load_model(again).predict(xs, verbose=0), out)


def test_reverse_embedding_and_errors():
    from mixedcore import hub
    layer = hub.ReversibleEmbedding(10, 4, name="tokens")
    vectors = layer(np.array([[1, 2, 3]]))
    logits = layer(vectors, reverse=True)
    np.testing.assert_allclose(logits, vectors @ layer.embeddings.T, rtol=1e-6, atol=1e-6)
    capped = hub.ReversibleEmbedding(10, 4, logit_soft_cap=0.01)
    capped(np.array([[1]]))
    assert np.abs(capped(np.ones((1, 4), np.float32), reverse=True)).max() <= 0.01
    with pytest.raises(ValueError, match="sequence_length=4"):
        hub.PositionEmbedding(4, name="p")(np.zeros((1, 5, 3), np.float32))
    with pytest.raises(ValueError, match="num_heads"):
        hub.TransformerEncoder(8, 4)(np.zeros((1, 3, 2), np.float32))
    with pytest.raises(ValueError, match="padding_mask must have shape"):
        hub.TransformerEncoder(8, 2)(np.zeros((1, 3, 4), np.float32),
                                     padding_mask=np.ones((1, 4)))
    decoder = hub.TransformerDecoder(8, 2, name="dec")
    x = np.zeros((1, 3, 4), np.float32)
    decoder(x)
    with pytest.raises(ValueError, match="self_attention_cache"):
        decoder(x, self_attention_cache=np.zeros((1, 2, 3, 2, 2), np.float32))
    with pytest.raises(ValueError, match="built without cross-attention"):
        decoder(x, encoder_sequence=x)


def test_backbone_arguments_are_checked():
    from mixedcore import hub
    with pytest.raises(TypeError, match="num_layers"):
        hub.BertBackbone(100, 1.5, 2, 32, 64)
    with pytest.raises(ValueError, match="hidden_dim"):
        hub.GPT2Backbone(100, 1, 8, 4, 16)
    with pytest.raises(TypeError, match="unexpected argument"):
        hub.RobertaBackbone(100, 1, 2, 8, 16, num_segments=2)
    with pytest.raises(TypeError, match="must be a BertBackbone"):
        hub.BertTextClassifier(hub.DistilBertBackbone(100, 1, 2, 8, 16), num_classes=2)
