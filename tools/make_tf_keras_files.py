"""Write the tf.keras 2.x model files that ``tests/test_tf_keras_files.py`` loads.

TensorFlow is not a dependency of mixedcore: it is needed only to (re)write these files, from
a virtual environment of its own::

    python -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0
    /tmp/tfvenv/bin/python tools/make_tf_keras_files.py [OUT_DIR]

``import tf_keras`` is tf.keras 2.x (the Keras 2 API); ``TF_USE_LEGACY_KERAS=1`` is set too, so
``tf.keras`` is the same package.  OUT_DIR defaults to ``tests/data/tf_keras/``.

For every model ``<name>`` it writes, with fixed seeds:

- ``<name>.h5``: ``model.save("<name>.h5")``, the legacy HDF5 model file;
- ``<name>.keras``: ``model.save("<name>.keras")``, tf.keras's zip archive;
- ``<name>.weights.h5``: ``model.save_weights("<name>.weights.h5")``;
- ``<name>_ckpt.h5``: ``model.save_weights("<name>_ckpt.h5")``, the legacy HDF5 weights file;
- ``<name>.json``: ``model.to_json()``, to rebuild the architecture for the weight-only files;
- ``<name>.ref.npz``: the input(s) (``x`` or ``x0``, ``x1``...) and tf.keras's prediction
  ``y`` (float32 whatever the output dtype).

The models: ``cnn_mixed_float16`` (functional, under ``mixed_float16``: Conv2D,
BatchNormalization with random moving statistics, ReLU(max_value=6), DepthwiseConv2D, a residual
Add, SeparableConv2D, swish, GlobalAveragePooling2D and a float32 softmax Dense),
``text_mixed_bfloat16`` (functional, under ``mixed_bfloat16``: Embedding, a causal Conv1D,
self-attention MultiHeadAttention, LayerNormalization, GlobalAveragePooling1D, Dense),
``mlp_float32`` (functional, float32: Dense, Dropout, Dense), ``mlp_sequential_float32`` (the
same layers as a Sequential model) and ``cnn_compiled_mixed_float16`` (the CNN compiled with
Adam under ``mixed_float16``, so wrapped in a LossScaleOptimizer, and trained for one step).
"""
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "data",
                   "tf_keras")
L = keras.layers


def randomize_batch_norm(model, rng):
    """Give every BatchNormalization non-trivial gamma, beta and moving statistics."""
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            n = layer.gamma.shape[0]
            layer.set_weights([
                rng.uniform(0.5, 1.5, n).astype(np.float32),
                rng.normal(0.0, 0.3, n).astype(np.float32),
                rng.normal(0.0, 0.5, n).astype(np.float32),
                rng.uniform(0.3, 2.0, n).astype(np.float32)])


def cnn(name):
    inp = keras.Input((16, 16, 3), name="image")
    x = L.Conv2D(8, 3, padding="same", name="stem")(inp)
    x = L.BatchNormalization(name="stem_bn")(x)
    x = L.ReLU(max_value=6.0, name="stem_relu6")(x)
    y = L.DepthwiseConv2D(3, padding="same", depth_multiplier=1, name="dw")(x)
    y = L.BatchNormalization(name="dw_bn")(y)
    y = L.ReLU(max_value=6.0, name="dw_relu6")(y)
    x = L.Add(name="residual")([x, y])
    x = L.SeparableConv2D(12, 3, padding="same", strides=2, name="sep")(x)
    x = L.Activation("swish", name="swish")(x)
    x = L.GlobalAveragePooling2D(name="gap")(x)
    out = L.Dense(10, activation="softmax", dtype="float32", name="probs")(x)
    return keras.Model(inp, out, name=name)


def make_cnn(name, rng):
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = cnn(name)
    randomize_batch_norm(model, rng)
    # spread the logits so that the softmax output is not near-uniform
    dense = model.get_layer("probs")
    kernel, bias = dense.get_weights()
    dense.set_weights([kernel * 4.0, rng.normal(0, 0.5, bias.shape).astype(np.float32)])
    x = rng.normal(size=(8, 16, 16, 3)).astype(np.float32)
    return model, [x]


def make_cnn_compiled(name, rng):
    model, inputs = make_cnn(name, rng)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    y = rng.integers(0, 10, size=inputs[0].shape[0])
    model.train_on_batch(inputs[0], y)
    return model, inputs


def make_text(name, rng):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    tokens = keras.Input((12,), dtype="int32", name="tokens")
    x = L.Embedding(40, 16, name="embed")(tokens)
    x = L.Conv1D(16, 3, padding="causal", activation="relu", name="causal_conv")(x)
    att = L.MultiHeadAttention(num_heads=2, key_dim=8, name="mha")(x, x)
    x = L.Add(name="att_residual")([x, att])
    x = L.LayerNormalization(epsilon=1e-5, name="ln")(x)
    x = L.GlobalAveragePooling1D(name="pool")(x)
    out = L.Dense(4, name="logits")(x)
    model = keras.Model(tokens, out, name=name)
    x = rng.integers(0, 40, size=(6, 12)).astype(np.int32)
    return model, [x]


def mlp_layers():
    return [L.Dense(24, activation="tanh", name="hidden"), L.Dropout(0.25, name="drop"),
            L.Dense(5, name="out")]


def make_mlp(name, rng):
    keras.mixed_precision.set_global_policy("float32")
    inp = keras.Input((10,), name="features")
    x = inp
    for layer in mlp_layers():
        x = layer(x)
    model = keras.Model(inp, x, name=name)
    return model, [rng.normal(size=(7, 10)).astype(np.float32)]


def make_mlp_sequential(name, rng):
    keras.mixed_precision.set_global_policy("float32")
    model = keras.Sequential([keras.Input((10,))] + mlp_layers(), name=name)
    return model, [rng.normal(size=(7, 10)).astype(np.float32)]


MODELS = {
    "cnn_mixed_float16": make_cnn,
    "text_mixed_bfloat16": make_text,
    "mlp_float32": make_mlp,
    "mlp_sequential_float32": make_mlp_sequential,
    "cnn_compiled_mixed_float16": make_cnn_compiled,
}


def write(out, name, make, seed):
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    model, inputs = make(name, rng)
    pred = model.predict(inputs[0] if len(inputs) == 1 else inputs, verbose=0)
    base = os.path.join(out, name)
    model.save(base + ".h5")
    model.save(base + ".keras")
    model.save_weights(base + ".weights.h5")
    model.save_weights(base + "_ckpt.h5")
    with open(base + ".json", "w", encoding="utf-8") as fh:
        fh.write(model.to_json())
    arrays = {"y": np.asarray(pred, dtype=np.float32)}
    if len(inputs) == 1:
        arrays["x"] = inputs[0]
    else:
        arrays.update({f"x{k}": v for k, v in enumerate(inputs)})
    np.savez(base + ".ref.npz", **arrays)
    keras.mixed_precision.set_global_policy("float32")


def main(argv):
    out = os.path.abspath(argv[1] if len(argv) > 1 else OUT)
    os.makedirs(out, exist_ok=True)
    for seed, (name, make) in enumerate(MODELS.items()):
        write(out, name, make, 1000 + seed)
    total = 0
    for entry in sorted(os.listdir(out)):
        size = os.path.getsize(os.path.join(out, entry))
        total += size
        print(f"{size:9d}  {entry}")
    print(f"{total:9d}  total ({keras.__version__}, TensorFlow {tf.__version__})")


if __name__ == "__main__":
    main(sys.argv)
