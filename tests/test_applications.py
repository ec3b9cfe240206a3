"""Every ``keras.applications`` architecture, built by Keras 3 with random weights and saved as
``.keras`` and ``.h5``, loads in mixedcore and predicts like Keras.

The models are made here (no download): ``weights=None``, logits out
(``classifier_activation=None``), BatchNormalization statistics set to those of the layer's
inputs on random images and then perturbed, so activations keep their scale through depth and
the comparison measures the implementation, not a chaotic network.  Bounds (docs/applications.md):
float32 within 1e-4 of the largest logit, or within twice the distance Keras's own output moves
when its input moves by 2**-23 of itself, when that is larger (a network that amplifies every
rounding); under mixed_float16 and mixed_bfloat16 no farther from Keras's float32 logits than 4x
Keras's own prediction under the same policy.

The default run covers one model of each family and every layer and operation the family adds;
``-m slow`` runs all of them, at the small sizes and at their default sizes.
"""
import os
import sys

import numpy as np
import pytest

from mixedcore import models

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "bench"))
from keras_models import (APPLICATION_SIZES, application, application_names,  # noqa: E402
                          calibrate_batchnorm)

pytestmark = pytest.mark.keras

# name -> input size (the smallest each architecture takes, or 64)
FAST = {"MobileNet": 64, "MobileNetV2": 64, "MobileNetV3Small": 64, "EfficientNetB0": 64,
        "EfficientNetV2B0": 64, "ResNet50": 64, "ResNet50V2": 64, "DenseNet121": 64,
        "InceptionV3": 75, "Xception": 71, "VGG16": 64, "ConvNeXtTiny": 64}
SLOW = {"MobileNetV3Large": 64, "EfficientNetB1": 64, "EfficientNetB2": 64,
        "EfficientNetB3": 64, "EfficientNetB4": 64, "EfficientNetB5": 64, "EfficientNetB6": 64,
        "EfficientNetB7": 64, "EfficientNetV2B1": 64, "EfficientNetV2B2": 64,
        "EfficientNetV2B3": 64, "EfficientNetV2S": 64, "EfficientNetV2M": 64,
        "EfficientNetV2L": 64, "ResNet101": 64, "ResNet152": 64, "ResNet101V2": 64,
        "ResNet152V2": 64, "DenseNet169": 64, "DenseNet201": 64, "VGG19": 64,
        "InceptionResNetV2": 75, "ConvNeXtSmall": 64, "ConvNeXtBase": 64, "ConvNeXtLarge": 64,
        "ConvNeXtXLarge": 64, "NASNetMobile": 64, "NASNetLarge": 64}
POLICIES = ("mixed_float16", "mixed_bfloat16")
_CACHE = {}


def _case(keras, name, size, tmp_path_factory):
    """(directory with <name>.keras and <name>.h5, images, {policy: Keras's logits})."""
    if (name, size) in _CACHE:
        return _CACHE[name, size]
    rng = np.random.default_rng(0)
    model = application(keras, name, size)
    calibrate_batchnorm(keras, model, rng,           # 16 small images, or 4 large ones
                        rng.uniform(0, 255, (16 if size <= 128 else 4, size, size, 3))
                        .astype("float32"))
    where = tmp_path_factory.mktemp(f"{name}_{size}")
    model.save(where / f"{name}.keras")
    model.save(where / f"{name}.h5")
    x = rng.uniform(0, 255, (2, size, size, 3)).astype("float32")
    refs = {"float32": keras.ops.convert_to_numpy(model(x, training=False)),
            "moved": keras.ops.convert_to_numpy(model(x * np.float32(1 + 2.0 ** -23),
                                                      training=False))}
    weights = model.get_weights()
    for policy in POLICIES:
        mixed = application(keras, name, size, policy)
        mixed.set_weights(weights)
        refs[policy] = keras.ops.convert_to_numpy(
            keras.ops.cast(mixed(x, training=False), "float32"))
    _CACHE.clear()                     # one model's files at a time
    _CACHE[name, size] = (where, x, refs)
    return _CACHE[name, size]


def _check(keras, name, size, tmp_path_factory):
    where, x, refs = _case(keras, name, size, tmp_path_factory)
    y32 = refs["float32"]
    scale = float(np.max(np.abs(y32)))
    assert np.all(np.isfinite(y32)) and scale > 0
    # Keras's own float32 reproducibility: how far its output moves when the input moves by
    # about one float32 rounding (2**-23 of itself); some random-weight networks amplify
    # roundings a thousandfold (EfficientNetB3: 8e-4 of the largest logit)
    noise = float(np.max(np.abs(refs["moved"] - y32)))
    for ext in (".keras", ".h5"):
        model = models.load_model(where / f"{name}{ext}")
        y = model.predict(x, verbose=0)
        err = float(np.max(np.abs(y - y32)))
        assert err <= max(1e-4 * scale, 2 * noise), (name, ext, err / scale, noise / scale)
    for policy in POLICIES:
        model = models.load_model(where / f"{name}.keras", dtype_policy=policy)
        y = np.asarray(model.predict(x, verbose=0), dtype=np.float32)
        # a sample whose activations overflow float16 in Keras too (EfficientNetB7's second
        # image reaches 5e4 before its last block) is left out of the comparison
        kept = np.all(np.isfinite(refs[policy]), axis=1)
        assert kept.any(), (name, policy, "Keras overflows on every sample")
        assert np.all(np.isfinite(y[kept])), (name, policy)
        ours = float(np.max(np.abs(y[kept] - y32[kept])))
        theirs = float(np.max(np.abs(refs[policy][kept] - y32[kept])))
        assert ours <= 4 * theirs + 1e-6 * scale, (name, policy, ours / scale, theirs / scale)


@pytest.mark.parametrize("name", sorted(FAST))
def test_application_matches_keras(keras, name, tmp_path_factory):
    _check(keras, name, FAST[name], tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_application_matches_keras_all(keras, name, tmp_path_factory):
    _check(keras, name, SLOW[name], tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(FAST) | set(SLOW)))
def test_application_matches_keras_full_size(keras, name, tmp_path_factory):
    """At each architecture's default input size (224; 299 for the Inception models and
    Xception, 331 for NASNetLarge)."""
    _check(keras, name, APPLICATION_SIZES.get(name, 224), tmp_path_factory)


def test_every_application_is_listed(keras):
    """A Keras release with a new architecture makes this fail until it is added above."""
    assert set(application_names(keras)) == set(FAST) | set(SLOW)
