"""Write the tf.keras 2.x model files that ``tests/test_tf_keras_files.py`` loads.

TensorFlow is not a dependency of mixedcore: it is needed only to (re)write these files, from
a virtual environment of its own::

    python -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0
    /tmp/tfvenv/bin/python tools/make_tf_keras_files.py [OUT_DIR [NAME ...]]

``import tf_keras`` is tf.keras 2.x (the Keras 2 API); ``TF_USE_LEGACY_KERAS=1`` is set too, so
``tf.keras`` is the same package.  OUT_DIR defaults to ``tests/data/tf_keras/``; the
NAMEs, when given, choose the models to (re)write (each keeps its seed).

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

The ``layers_*`` models hold every layer class of ``mixedcore.layers`` that tf.keras 2.x has,
with non-default arguments, random biases, PReLU slopes and BatchNormalization statistics:
``layers_image_float32`` and the same under ``mixed_float16`` with a float32 head
(``layers_image_mixed_float16``): Resizing (bilinear, nearest), CenterCrop, Rescaling,
Normalization (given mean and variance, and adapted), Conv2D (strides, dilation, groups, valid
and same, no bias), BatchNormalization, ReLU(max_value, negative_slope, threshold), PReLU
(shared_axes), DepthwiseConv2D(depth_multiplier=2), LeakyReLU, SeparableConv2D, ELU,
ZeroPadding2D, UpSampling2D (nearest, bilinear), Cropping2D, Max/AveragePooling2D (valid and
same, strides), SpatialDropout2D, GaussianNoise, GlobalMax/AveragePooling2D, Flatten,
Concatenate; ``layers_sequence_float32``: Conv1D (dilation, strides, same, causal with groups),
Max/AveragePooling1D, ZeroPadding1D, Concatenate on the time axis, SpatialDropout1D,
LayerNormalization, Permute, Reshape, a Dense and an EinsumDense on a sequence, Softmax(axis=1),
GlobalMax/AveragePooling1D, BatchNormalization on 2-D input, RepeatVector;
``layers_masked_text_float32``: Embedding(mask_zero=True) whose mask reaches
LayerNormalization, MultiHeadAttention, Add and GlobalAveragePooling1D (zero-padded inputs);
``layers_merge_float32``: Add, Subtract, Multiply, Average, Maximum, Minimum, Concatenate, every
activation name tf.keras has but ``hard_sigmoid`` (ACTIVATIONS), Dropout, PReLU and the
applications' LayerScale (ConvNeXt) and CustomScaleLayer (InceptionResNetV2).
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


def randomize_biases(model, rng, scale=0.3):
    """Give every bias (Dense, convolutions) and every PReLU alpha random values."""
    for layer in model.layers:
        if isinstance(layer, L.PReLU):
            alpha = layer.alpha
            layer.set_weights([rng.uniform(0.05, 0.5, alpha.shape).astype(np.float32)])
            continue
        bias = getattr(layer, "bias", None)
        if bias is None:
            continue
        weights = layer.get_weights()
        weights[-1] = rng.normal(0.0, scale, weights[-1].shape).astype(np.float32)
        layer.set_weights(weights)


def image_layers(name, rng):
    """Preprocessing, convolutions, pooling, shaping and activation layers on 8x8x3 images."""
    adapted = L.Normalization(name="norm_adapted")
    adapted.adapt(rng.normal(0.4, 0.7, size=(64, 10, 10, 3)).astype(np.float32))
    inp = keras.Input((8, 8, 3), name="image")
    x = L.Resizing(11, 11, interpolation="bilinear", name="resize_bilinear")(inp)
    x = L.Resizing(13, 13, interpolation="nearest", name="resize_nearest")(x)
    x = L.CenterCrop(10, 10, name="center_crop")(x)                          # 10x10x3
    x = L.Rescaling(1 / 1.5, offset=0.1, name="rescale")(x)
    x = L.Normalization(mean=[0.1, -0.2, 0.3], variance=[0.5, 1.5, 2.0], name="norm_given")(x)
    x = adapted(x)
    a = L.Conv2D(8, 3, strides=2, padding="same", name="conv_s2")(x)         # 5x5x8
    a = L.BatchNormalization(name="bn")(a)
    a = L.ReLU(max_value=1.5, negative_slope=0.1, threshold=0.2, name="relu_full")(a)
    b = L.Conv2D(8, 3, dilation_rate=2, use_bias=False, name="conv_dilated")(x)  # 6x6x8
    b = L.Conv2D(8, 3, groups=4, padding="same", name="conv_groups")(b)
    b = L.PReLU(shared_axes=[1, 2], name="prelu")(b)
    b = L.MaxPooling2D(2, strides=1, name="max_valid")(b)                    # 5x5x8
    c = L.Concatenate(name="concat_channels")([a, b])                        # 5x5x16
    c = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", name="dw_x2")(c)  # 5x5x32
    c = L.LeakyReLU(alpha=0.2, name="leaky")(c)
    c = L.SeparableConv2D(12, 3, name="sep_valid")(c)                        # 3x3x12
    c = L.ELU(alpha=0.7, name="elu")(c)
    c = L.ZeroPadding2D(((1, 0), (0, 2)), name="zero_pad")(c)                # 4x5x12
    c = L.UpSampling2D(2, interpolation="nearest", name="up_nearest")(c)     # 8x10x12
    c = L.Cropping2D(((1, 0), (2, 1)), name="crop")(c)                       # 7x7x12
    c = L.AveragePooling2D(3, strides=2, padding="same", name="avg_same")(c)  # 4x4x12
    c = L.UpSampling2D((2, 3), interpolation="bilinear", name="up_bilinear")(c)  # 8x12x12
    c = L.AveragePooling2D(2, name="avg_valid")(c)                           # 4x6x12
    c = L.MaxPooling2D(3, strides=2, padding="same", name="max_same")(c)     # 2x3x12
    c = L.SpatialDropout2D(0.3, name="spatial_drop")(c)
    c = L.GaussianNoise(0.5, name="noise")(c)
    c = L.Activation("tanh", name="tanh")(c)
    g = L.Concatenate(name="concat_pooled")([
        L.GlobalMaxPooling2D(name="gmp")(c), L.GlobalAveragePooling2D(name="gap")(c),
        L.Flatten(name="flatten")(c)])
    out = L.Dense(6, dtype="float32", name="logits")(g)
    return keras.Model(inp, out, name=name)


def make_image_layers(policy):
    def make(name, rng):
        keras.mixed_precision.set_global_policy(policy)
        model = image_layers(name, rng)
        randomize_batch_norm(model, rng)
        randomize_biases(model, rng)
        x = rng.uniform(0.0, 2.0, size=(4, 8, 8, 3)).astype(np.float32)
        return model, [x]
    return make


def make_sequence_layers(name, rng):
    """1-D convolutions and pooling, shaping and normalization on (12, 6) sequences."""
    keras.mixed_precision.set_global_policy("float32")
    inp = keras.Input((12, 6), name="sequence")
    a = L.Conv1D(8, 3, dilation_rate=2, name="conv_dilated")(inp)               # 8x8
    a = L.MaxPooling1D(2, strides=1, name="max_valid")(a)                       # 7x8
    a = L.AveragePooling1D(3, strides=2, padding="same", name="avg_same")(a)    # 4x8
    b = L.Conv1D(8, 3, strides=2, padding="same", activation="relu", name="conv_s2")(inp)  # 6x8
    b = L.Conv1D(8, 2, padding="causal", groups=2, name="conv_causal_groups")(b)
    b = L.MaxPooling1D(3, strides=2, padding="same", name="max_same")(b)        # 3x8
    b = L.AveragePooling1D(2, strides=1, name="avg_valid")(b)                   # 2x8
    b = L.ZeroPadding1D((1, 2), name="zero_pad")(b)                             # 5x8
    x = L.Concatenate(axis=1, name="concat_time")([a, b])                       # 9x8
    x = L.SpatialDropout1D(0.4, name="spatial_drop")(x)
    x = L.LayerNormalization(name="ln")(x)
    x = L.Permute((2, 1), name="permute")(x)                                    # 8x9
    x = L.Reshape((6, 12), name="reshape")(x)                                   # 6x12
    x = L.Dense(5, name="per_step")(x)                                          # 6x5
    x = L.EinsumDense("abc,cd->abd", output_shape=(6, 5), bias_axes="d", activation="tanh",
                      name="einsum")(x)                                          # 6x5
    x = L.Softmax(axis=1, name="softmax_time")(x)
    s = L.Concatenate(name="concat_pooled")([
        L.GlobalMaxPooling1D(name="gmp")(x), L.GlobalAveragePooling1D(name="gap")(x)])  # 10
    s = L.Dense(4, activation="selu", name="dense")(s)
    s = L.BatchNormalization(name="bn_2d")(s)
    s = L.RepeatVector(3, name="repeat")(s)                                     # 3x4
    s = L.Flatten(name="flatten")(s)
    out = L.Dense(3, name="out")(s)
    model = keras.Model(inp, out, name=name)
    randomize_batch_norm(model, rng)
    randomize_biases(model, rng)
    return model, [rng.normal(size=(5, 12, 6)).astype(np.float32)]


def make_masked_text(name, rng):
    """Embedding(mask_zero=True): the mask reaches MultiHeadAttention and GlobalAveragePooling1D."""
    keras.mixed_precision.set_global_policy("float32")
    tokens = keras.Input((10,), dtype="int32", name="tokens")
    x = L.Embedding(30, 12, mask_zero=True, name="embed")(tokens)
    x = L.LayerNormalization(axis=-1, name="ln")(x)
    att = L.MultiHeadAttention(num_heads=2, key_dim=6, name="mha")(x, x)
    x = L.Add(name="residual")([x, att])
    x = L.GlobalAveragePooling1D(name="masked_mean")(x)
    out = L.Dense(3, name="out")(x)
    model = keras.Model(tokens, out, name=name)
    randomize_biases(model, rng)
    x = rng.integers(1, 30, size=(6, 10)).astype(np.int32)
    for row, length in enumerate((10, 7, 5, 3, 2, 8)):      # zero padding after the tokens
        x[row, length:] = 0
    return model, [x]


# the activation names tf.keras 2.x has (tf_keras.activations) that the merge model applies;
# "hard_sigmoid" is left out: tf.keras's is clip(0.2 x + 0.5, 0, 1), mixedcore's (Keras 3's)
# clip(x / 6 + 0.5, 0, 1), and the file does not say which one it means
ACTIVATIONS = ("relu", "gelu", "tanh", "sigmoid", "softmax", "elu", "selu", "softplus",
               "softsign", "swish", "mish", "exponential", "linear")


def make_merge_layers(name, rng):
    """Merging layers on two Dense branches, every tf.keras activation name, BatchNormalization
    and LayerNormalization on 2-D inputs, PReLU, and the applications' LayerScale and
    CustomScaleLayer."""
    from tf_keras.src.applications.convnext import LayerScale
    from tf_keras.src.applications.inception_resnet_v2 import CustomScaleLayer

    keras.mixed_precision.set_global_policy("float32")
    inp = keras.Input((10,), name="features")
    a = L.Dense(8, name="a")(inp)
    b = L.Dense(8, name="b")(inp)
    merged = [L.Add(name="add")([a, b]), L.Subtract(name="subtract")([a, b]),
              L.Multiply(name="multiply")([a, b]), L.Average(name="average")([a, b]),
              L.Maximum(name="maximum")([a, b]), L.Minimum(name="minimum")([a, b])]
    x = L.Concatenate(name="concat")(merged)                                    # 48
    x = L.BatchNormalization(name="bn_2d")(x)
    x = L.Dropout(0.5, name="drop")(x)
    x = L.Dense(16, name="mix")(x)
    acts = [L.Activation(act, name=f"act_{act}")(x) for act in ACTIVATIONS]
    x = L.Concatenate(name="concat_acts")(acts)                                 # 16 * 13
    x = L.LayerNormalization(name="ln")(x)
    x = L.Dense(12, name="squeeze")(x)
    x = L.PReLU(name="prelu")(x)
    x = LayerScale(0.5, 12, name="layer_scale")(x)
    x = CustomScaleLayer(0.3, name="custom_scale")([x, L.Activation("tanh", name="res")(x)])
    out = L.Dense(4, name="out")(x)
    model = keras.Model(inp, out, name=name)
    randomize_batch_norm(model, rng)
    randomize_biases(model, rng)
    scale = model.get_layer("layer_scale")
    scale.set_weights([rng.uniform(0.3, 1.5, 12).astype(np.float32)])
    return model, [rng.normal(size=(6, 10)).astype(np.float32)]


MODELS = {
    "cnn_mixed_float16": make_cnn,
    "text_mixed_bfloat16": make_text,
    "mlp_float32": make_mlp,
    "mlp_sequential_float32": make_mlp_sequential,
    "cnn_compiled_mixed_float16": make_cnn_compiled,
    "layers_image_float32": make_image_layers("float32"),
    "layers_image_mixed_float16": make_image_layers("mixed_float16"),
    "layers_sequence_float32": make_sequence_layers,
    "layers_masked_text_float32": make_masked_text,
    "layers_merge_float32": make_merge_layers,
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
    only = set(argv[2:])            # model names to (re)write; all of them when none is given
    unknown = only - set(MODELS)
    if unknown:
        raise SystemExit(f"unknown model(s) {sorted(unknown)}; known: {list(MODELS)}")
    os.makedirs(out, exist_ok=True)
    for seed, (name, make) in enumerate(MODELS.items()):     # a model's seed is its position
        if not only or name in only:
            write(out, name, make, 1000 + seed)
    total = 0
    for entry in sorted(os.listdir(out)):
        size = os.path.getsize(os.path.join(out, entry))
        total += size
        print(f"{size:9d}  {entry}")
    print(f"{total:9d}  total ({keras.__version__}, TensorFlow {tf.__version__})")


if __name__ == "__main__":
    main(sys.argv)
