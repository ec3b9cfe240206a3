"""keras_hub's vision models read from the files Keras writes: ViTBackbone and ViTImageClassifier
built by keras_hub (tiny, random weights), saved as ``.keras``, loaded by mixedcore with no
custom_objects and compared with Keras's predictions (docs/keras_hub_vision.md)."""
import json
import zipfile

import numpy as np
import pytest

import mixedcore.hub._vision as vision
from mixedcore import models
from mixedcore._dtypes import np_dtype

pytestmark = pytest.mark.keras

TINY = dict(image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
            mlp_dim=64)

@pytest.fixture(scope="module")
def hub(keras):
    return pytest.importorskip("keras_hub", reason="keras_hub is not installed: pip install "
                               '--no-deps "keras-hub==0.32.0" regex tokenizers (README.md)')


def _images(n=3, shape=(32, 32, 3), seed=0):
    return np.random.default_rng(seed).normal(size=(n,) + shape).astype(np.float32)


def _np(keras, x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float32)


def _config_of(path):
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("config.json"))


def _vit(hub, **changes):
    return hub.models.ViTBackbone(**dict(TINY, **changes))


@pytest.fixture(scope="module")
def saved_vit(hub, keras, tmp_path_factory):
    """A float32 ViTBackbone saved by Keras, with its prediction on ``_images()``."""
    path = tmp_path_factory.mktemp("vit") / "vit.keras"
    model = _vit(hub)
    model.save(path)
    return path, model, _np(keras, model(_images()))


def test_the_file_is_keras_hubs(saved_vit):
    path, _, _ = saved_vit
    entry = _config_of(path)
    assert entry["class_name"] == "ViTBackbone"
    assert entry["registered_name"] == "keras_hub>ViTBackbone"
    assert "layers" not in entry["config"]


def test_backbone_float32_matches_keras(saved_vit):
    path, _, ref = saved_vit
    model = models.load_model(path)
    assert isinstance(model, vision.ViTBackbone)
    out = model.predict(_images(), verbose=0)
    assert out.shape == ref.shape == (3, 17, 32)
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


def test_weights_load_into_a_backbone_built_from_the_config(saved_vit, keras):
    """The weight layout alone (models.load_weights from the .keras file): every array at the
    place of Keras's get_weights, and the same prediction."""
    path, kmodel, ref = saved_vit
    keras_config = _config_of(path)["config"]
    model = vision.ViTBackbone.from_config(keras_config)
    config = model.get_config()
    assert config.pop("dtype")["config"] == keras_config.pop("dtype")["config"]
    assert config == keras_config
    model.load_weights(path)
    mine, theirs = model.get_weights(), [_np(keras, w) for w in kmodel.get_weights()]
    assert len(mine) == len(theirs) == 38
    for a, b in zip(mine, theirs):
        np.testing.assert_array_equal(a, b)
    out = model(_images())
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_backbone_mixed_policies(saved_vit, hub, keras, tmp_path, policy):
    """Under a mixed policy mixedcore is no farther from Keras's float32 prediction than 4x
    Keras's own prediction under that policy is; read both from the float32 file with
    dtype_policy= and from the file Keras writes under the policy."""
    path, kmodel, ref = saved_vit
    kmixed = _vit(hub, dtype=policy)
    kmixed.set_weights(kmodel.get_weights())
    keras_distance = np.abs(_np(keras, kmixed(_images())) - ref).max()
    assert keras_distance > 0
    mixed_path = tmp_path / "vit_mixed.keras"
    kmixed.save(mixed_path)
    for model in (models.load_model(path, dtype_policy=policy), models.load_model(mixed_path)):
        assert model.get_layer("vit_encoder").compute_dtype == policy.split("_")[1]
        assert model.get_layer("vit_encoder").variable_dtype == "float32"
        out = model.predict(_images(), verbose=0)
        assert out.dtype == np_dtype(policy.split("_")[1])
        distance = np.abs(out.astype(np.float32) - ref).max()
        assert distance <= 4 * keras_distance, (distance, keras_distance)


@pytest.mark.parametrize("head", [dict(), dict(pooling="gap", intermediate_dim=16)],
                         ids=["token", "gap-intermediate"])
def test_vit_image_classifier(hub, keras, tmp_path, head):
    backbone = _vit(hub, use_class_token=head.get("pooling", "token") == "token")
    kmodel = hub.models.ViTImageClassifier(backbone=backbone, num_classes=5,
                                           preprocessor=None, **head)
    path = tmp_path / "classifier.keras"
    kmodel.save(path)
    model = models.load_model(path)
    assert isinstance(model, vision.ViTImageClassifier)
    assert isinstance(model.backbone, vision.ViTBackbone)
    ref = _np(keras, kmodel(_images()))
    out = model.predict(_images(), verbose=0)
    assert out.shape == (3, 5)
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


def test_mixedcore_save_round_trips_through_keras(saved_vit, keras, tmp_path):
    """What mixedcore writes for a ViTBackbone, Keras (with keras_hub) and mixedcore read."""
    path, _, ref = saved_vit
    model = models.load_model(path)
    out_path = tmp_path / "mine.keras"
    model.save(out_path)
    entry = _config_of(out_path)
    assert (entry["class_name"], entry["module"]) == ("ViTBackbone",
                                                      "keras_hub.src.models.vit.vit_backbone")
    again = keras.saving.load_model(out_path)
    np.testing.assert_allclose(_np(keras, again(_images())), ref, rtol=0, atol=1e-6)
    mine = models.load_model(out_path)
    np.testing.assert_array_equal(mine.predict(_images(), verbose=0),
                                  model.predict(_images(), verbose=0))


def test_gradients_match_keras(hub, keras):
    """A training call's backward gives the input gradient and every weight gradient
    Keras's autodiff gives (float32, no dropout)."""
    import torch
    kmodel = _vit(hub, num_layers=1)
    model = vision.ViTBackbone(**TINY | {"num_layers": 1}, dtype="float32")
    model.set_weights([_np(keras, w) for w in kmodel.get_weights()])
    x = _images(2)
    dy = np.random.default_rng(1).normal(size=(2, 17, 32)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    (kmodel(xt) * torch.tensor(dy)).sum().backward()
    out = model(x, training=True)
    np.testing.assert_allclose(out, _np(keras, kmodel(x)), rtol=0, atol=1e-5)
    dx = model.backward(dy)
    scale = np.abs(xt.grad.numpy()).max()
    assert np.abs(dx - xt.grad.numpy()).max() <= 1e-4 * scale
    theirs = [v.value.grad.numpy() for v in kmodel.trainable_weights]
    assert len(model.gradients) == len(theirs) == 22
    for mine, ref in zip(model.gradients, theirs):
        assert mine.shape == ref.shape
        # the key bias gradient is zero up to rounding (softmax ignores a shift): scale >= 1
        assert np.abs(mine - ref).max() <= 1e-4 * max(np.abs(ref).max(), 1.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="ViTBackbone: image height 30 is not divisible"):
        vision.ViTBackbone(**TINY | {"image_shape": (30, 32, 3)})
    with pytest.raises(ValueError, match=r"ViTBackbone: image_shape must be \(height, width"):
        vision.ViTBackbone(**TINY | {"image_shape": (32, 32)})
    with pytest.raises(TypeError, match="ViTBackbone: patch_size must be a positive int"):
        vision.ViTBackbone(**TINY | {"patch_size": "8"})
    with pytest.raises(ValueError, match="ViTEncoderBlock: hidden_dim .2. must be at least"):
        vision.ViTBackbone(**TINY | {"hidden_dim": 2, "num_heads": 4})
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        vision.ViTBackbone.from_config(dict(TINY, bogus=1))
    backbone = vision.ViTBackbone(**TINY)
    with pytest.raises(ValueError, match="ViTImageClassifier: preprocessor="):
        vision.ViTImageClassifier(backbone, 3, preprocessor="images")
    with pytest.raises(ValueError, match="ViTImageClassifier: pooling must be"):
        vision.ViTImageClassifier(backbone, 3, pooling="avg")
    with pytest.raises(TypeError, match="ViTImageClassifier: backbone must be"):
        vision.ViTImageClassifier("vit", 3)
    with pytest.raises(ValueError, match="expected input of shape"):
        backbone(_images(1, (16, 16, 3)))


def test_image_classifier_head_on_a_feature_map():
    """The generic ImageClassifier head (pooler, dropout, predictions) on a backbone with a
    (batch, height, width, channels) output, and its config round trip."""
    from mixedcore import layers
    inputs = layers.Input(shape=(8, 8, 3), name="images")
    backbone = models.Model(inputs, layers.Conv2D(4, 3, name="conv")(inputs), name="tiny")
    model = vision.ImageClassifier(backbone, 3, pooling="max", activation="softmax")
    assert [layer.name for layer in model.layers][2:] == ["pooler", "output_dropout",
                                                          "predictions"]
    x = _images(2, (8, 8, 3))
    kernel, bias = model.get_layer("predictions").get_weights()
    logits = backbone(x).max(axis=(1, 2)) @ kernel + bias
    expected = np.exp(logits - logits.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-6)
    again = vision.ImageClassifier.from_config(model.get_config())
    assert again.get_config()["pooling"] == "max"
    again.set_weights(model.get_weights())
    np.testing.assert_array_equal(again(x), model(x))
    with pytest.raises(ValueError, match="ImageClassifier: pooling must be 'avg' or 'max'"):
        vision.ImageClassifier(backbone, 3, pooling="token")
