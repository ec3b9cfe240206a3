"""The models of bench_models.py, written once against the names Keras and mixedcore share, so
that the same function builds either system's model, and the files they are measured on."""
import contextlib
import functools
import os

import numpy as np

MODELS = ["cnn", "encoder"]
VOCAB, TOKENS, WIDTH = 1000, 64, 128


@functools.lru_cache(maxsize=None)
def keras_or_none():
    """Keras 3 on the torch backend when installed, else None."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    try:
        import keras
    except ImportError:
        return None
    return keras


def _conv_bn_relu(L, x, filters):
    x = L.Conv2D(filters, 3, padding="same", use_bias=False)(x)
    x = L.BatchNormalization()(x)
    return L.ReLU()(x)


def build(ns, name):
    """Model ``name`` built with ``ns`` (the keras module or mixedcore) under its global policy."""
    L = ns.layers
    if name == "cnn":
        inp = L.Input((32, 32, 3))
        x = _conv_bn_relu(L, inp, 32)
        y = _conv_bn_relu(L, x, 32)
        y = L.Conv2D(32, 3, padding="same", use_bias=False)(y)
        y = L.BatchNormalization()(y)
        x = L.ReLU()(L.Add()([x, y]))
        x = L.MaxPooling2D(2)(x)
        x = _conv_bn_relu(L, x, 64)
        x = L.GlobalAveragePooling2D()(x)
        out = L.Dense(10, activation="softmax", dtype="float32")(x)
        return ns.models.Model(inp, out)
    if name == "encoder":
        inp = L.Input((TOKENS,), dtype="int32")
        x = L.Embedding(VOCAB, WIDTH)(inp)
        a = L.MultiHeadAttention(num_heads=4, key_dim=WIDTH // 4)(x, x)
        x = L.LayerNormalization()(L.Add()([x, a]))
        f = L.Dense(2 * WIDTH, activation="gelu")(x)
        f = L.Dense(WIDTH)(f)
        x = L.LayerNormalization()(L.Add()([x, f]))
        x = L.GlobalAveragePooling1D()(x)
        out = L.Dense(2, activation="softmax", dtype="float32")(x)
        return ns.models.Model(inp, out)
    raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")


def randomize(model, seed=0):
    """Random weights in Keras order: kernels scaled by their fan-in, normalization scales near
    1 and BatchNormalization statistics away from (0, 1), other vectors small."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        weights = layer.get_weights()
        kind = type(layer).__name__
        if kind == "BatchNormalization":
            new = [rng.uniform(0.5, 1.5, w.shape) if i in (0, 3) else rng.normal(0, 0.1, w.shape)
                   for i, w in enumerate(weights)]
        elif kind == "LayerNormalization":
            new = [1 + rng.normal(0, 0.1, w.shape) if i == 0 else rng.normal(0, 0.1, w.shape)
                   for i, w in enumerate(weights)]
        elif kind == "Embedding":
            new = [rng.normal(0, 1, w.shape) for w in weights]
        else:
            new = [rng.normal(0, 1 / np.sqrt(np.prod(w.shape[:-1])), w.shape) if w.ndim > 1
                   else rng.normal(0, 0.1, w.shape) for w in weights]
        if weights:
            layer.set_weights([np.asarray(v, dtype=w.dtype) for v, w in zip(new, weights)])


def write(name, policy, folder):
    """Build, randomize and save model ``name`` under ``policy``: by Keras when installed, else by
    mixedcore.  Returns the path."""
    path = os.path.join(str(folder), f"{name}_{policy}.keras")
    keras = keras_or_none()
    if keras is not None:
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(policy)
        try:
            model = build(keras, name)
        finally:
            keras.config.set_dtype_policy(previous)
    else:
        import mixedcore
        with mixedcore.policy_scope(policy):
            model = build(mixedcore, name)
    randomize(model)
    model.save(path)
    return path


def inputs(name, batch, seed=1):
    rng = np.random.default_rng(seed)
    if name == "cnn":
        return rng.normal(size=(batch, 32, 32, 3)).astype(np.float32)
    return rng.integers(1, VOCAB, size=(batch, TOKENS)).astype(np.int32)


def reference(name, path, x):
    """mixedcore's float32 prediction of the file's model (its policy overridden)."""
    from mixedcore import models
    model = models.load_model(str(path), dtype_policy="float32")
    return np.asarray(model.predict_on_batch(x), dtype=np.float32)


# --- keras.applications ---------------------------------------------------------------------

# the input size each architecture is measured at (its default; 224 for the others), and the
# small size the tests build it at where 64 is too small for it
APPLICATION_SIZES = {"InceptionV3": 299, "InceptionResNetV2": 299, "Xception": 299,
                     "NASNetLarge": 331}
SMALL_SIZES = {"InceptionV3": 75, "InceptionResNetV2": 75, "Xception": 71}


def application_names(keras):
    """Every architecture of ``keras.applications``."""
    return sorted(n for n in dir(keras.applications) if n[0].isupper())


def application(keras, name, size, policy="float32", seed=0):
    """``keras.applications.<name>`` with ``weights=None`` (Keras's initializers, seeded with
    ``seed``) and logits out, built under ``policy``.  NASNetMobile, which keras.applications
    refuses on the torch backend by name, is its NASNet builder with NASNetMobile's
    arguments."""
    if name == "NASNetMobile":
        from keras.src.applications import nasnet

        def make(**kwargs):
            return nasnet.NASNet(penultimate_filters=1056, num_blocks=4, stem_block_filters=32,
                                 skip_reduction=False, filter_multiplier=2, default_size=224,
                                 **kwargs)
    else:
        make = getattr(keras.applications, name)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(seed)
    try:
        return make(weights=None, input_shape=(size, size, 3), classifier_activation=None)
    finally:
        keras.config.set_dtype_policy(previous)


def calibrate_batchnorm(keras, model, rng, images):
    """BatchNormalization statistics of a random-weight model set to those of each layer's inputs
    on ``images`` (one training pass with momentum 0), then perturbed, with gamma and beta
    random: activations keep their scale through depth, so that comparisons between systems
    measure the implementations rather than a chaotic network."""
    norms = [layer for layer in model.layers
             if isinstance(layer, keras.layers.BatchNormalization)]
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0
    # without recording a graph for gradients (NASNetLarge at 331x331 held 24 GB with it)
    recording = contextlib.nullcontext()
    if keras.backend.backend() == "torch":
        import torch
        recording = torch.no_grad()
    with recording:
        model(images, training=True)
    for layer, momentum in zip(norms, momenta):
        layer.momentum = momentum
        values = []
        for w in layer.weights:
            v = keras.ops.convert_to_numpy(w.value).astype(np.float64)
            if "moving_variance" in w.path:
                v = np.maximum(v, 0.5 * np.median(v)) * rng.uniform(0.8, 1.25, v.shape)
            elif "moving_mean" in w.path:
                v = v + rng.normal(0, 0.05, v.shape) * np.sqrt(np.abs(v) + 1e-3)
            elif "gamma" in w.path:
                v = rng.uniform(0.8, 1.2, v.shape)
            else:
                v = rng.normal(0, 0.05, v.shape)
            values.append(v.astype(np.float32))
        layer.set_weights(values)
