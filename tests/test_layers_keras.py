"""The layers against Keras 3 itself (torch backend): the same weights give the same outputs at
float32, weights come in Keras's order and shapes, configs load both ways, and every activation
name gives Keras's values."""
import numpy as np
import pytest

from mixedcore import activations, layers, models

pytestmark = pytest.mark.keras


@pytest.fixture
def rng():
    return np.random.default_rng(5)


def np_of(keras, t):
    return np.asarray(keras.ops.convert_to_numpy(t))


def weight_suffixes(keras_layer):
    return ["/".join(w.path.split("/")[1:]) for w in keras_layer.weights]


def ours_suffixes(layer):
    return [n.split("/", 1)[1] for n in layer.weight_names()]


def copy_from_keras(keras, klayer, layer, build):
    """Build ``layer`` with ``build`` and load the Keras layer's weights; check the order."""
    build()
    assert ours_suffixes(layer) == weight_suffixes(klayer)
    kw = klayer.get_weights()
    assert [w.shape for w in layer.get_weights()] == [w.shape for w in kw]
    layer.set_weights(kw)


ACTIVATION_CASES = [
    ("relu", {}), ("relu6", {}), ("leaky_relu", {}), ("elu", {}), ("selu", {}), ("gelu", {}),
    ("gelu", {"approximate": True}), ("silu", {}), ("swish", {}), ("softplus", {}),
    ("softsign", {}), ("hard_sigmoid", {}), ("hard_silu", {}), ("mish", {}), ("tanh", {}),
    ("sigmoid", {}), ("softmax", {}), ("log_softmax", {}), ("exponential", {}), ("linear", {}),
]


@pytest.mark.parametrize("name, kwargs", ACTIVATION_CASES)
def test_activation_functions_match_keras(keras, name, kwargs, rng):
    x = (rng.normal(size=(6, 9)) * 4).astype(np.float32)
    x[0, :5] = [-6.0, -3.0, 0.0, 3.0, 6.0]
    ours = activations.get(name)
    theirs = keras.activations.get(name)
    y = np.asarray(ours(x, **kwargs))
    ref = np_of(keras, theirs(keras.ops.convert_to_tensor(x), **kwargs))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda L: L.LeakyReLU(negative_slope=0.15),
    lambda L: L.ELU(alpha=0.8),
    lambda L: L.ReLU(max_value=2.0, negative_slope=0.1, threshold=0.5),
    lambda L: L.Activation("mish"),
    lambda L: L.Softmax(axis=[1, 2]),
])
def test_weightless_activation_layers_match_keras(keras, make, rng):
    x = rng.normal(size=(3, 4, 5)).astype(np.float32) * 2
    klayer = make(keras.layers)
    layer = layers.deserialize({"class_name": type(klayer).__name__,
                                "config": klayer.get_config()})
    np.testing.assert_allclose(layer(x), np_of(keras, klayer(x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shared_axes", [None, [1, 2]])
def test_prelu_matches_keras(keras, shared_axes, rng):
    x = rng.normal(size=(4, 3, 5, 2)).astype(np.float32)
    klayer = keras.layers.PReLU(shared_axes=shared_axes,
                                alpha_initializer=keras.initializers.RandomUniform(0.1, 0.5))
    klayer(x)
    layer = layers.PReLU.from_config(klayer.get_config())
    copy_from_keras(keras, klayer, layer, lambda: layer.build_from_shape(x.shape))
    np.testing.assert_allclose(layer(x), np_of(keras, klayer(x)), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("axis, shape", [(-1, (8, 5)), (1, (4, 3, 2, 2)), (-1, (4, 3, 6))])
def test_batch_norm_matches_keras_in_training_and_inference(keras, axis, shape, rng):
    x = (rng.normal(size=shape) * 3 + 2).astype(np.float32)
    klayer = keras.layers.BatchNormalization(axis=axis, momentum=0.8, epsilon=1e-3)
    klayer.build(shape)
    c = shape[axis]
    kw = [rng.normal(size=c), rng.normal(size=c), rng.normal(size=c),
          rng.uniform(0.5, 2.0, size=c)]
    klayer.set_weights([w.astype(np.float32) for w in kw])
    layer = layers.BatchNormalization.from_config(klayer.get_config())
    copy_from_keras(keras, klayer, layer, lambda: layer.build_from_shape(shape))
    np.testing.assert_allclose(layer(x), np_of(keras, klayer(x, training=False)), rtol=1e-5,
                               atol=1e-5)
    y = layer(x, training=True)
    ky = np_of(keras, klayer(x, training=True))
    np.testing.assert_allclose(y, ky, rtol=1e-5, atol=1e-5)
    for ours, theirs in zip(layer.get_weights(), klayer.get_weights()):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_batch_norm_mask_matches_keras(keras, rng):
    x = rng.normal(size=(3, 6, 4)).astype(np.float32)
    mask = rng.random((3, 6)) > 0.4
    klayer = keras.layers.BatchNormalization(momentum=0.5)
    layer = layers.BatchNormalization(momentum=0.5)
    ky = np_of(keras, klayer(x, training=True, mask=mask))
    np.testing.assert_allclose(layer(x, training=True, mask=mask), ky, rtol=1e-5, atol=1e-5)
    for ours, theirs in zip(layer.get_weights(), klayer.get_weights()):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_embedding_matches_keras(keras, rng):
    klayer = keras.layers.Embedding(12, 4, mask_zero=True)
    idx = rng.integers(0, 12, size=(3, 5)).astype(np.int32)
    idx[0, 3:] = 0
    ky = np_of(keras, klayer(idx))
    layer = layers.Embedding.from_config(klayer.get_config())
    copy_from_keras(keras, klayer, layer, lambda: layer.build_from_shape(idx.shape))
    np.testing.assert_array_equal(layer(idx), ky)
    np.testing.assert_array_equal(layer.compute_mask(idx), np_of(keras, klayer.compute_mask(idx)))
    # float indices: Keras casts to int32
    xf = np.array([[1.7, 3.2, 0.4]], np.float32)
    np.testing.assert_array_equal(layer(xf), np_of(keras, klayer(xf)))


def _mha_pair(keras, rng, q, v, k=None, **kwargs):
    klayer = keras.layers.MultiHeadAttention(**kwargs)
    klayer(q, v, k)
    klayer.set_weights([(rng.normal(size=w.shape) * 0.4).astype(np.float32)
                        for w in klayer.get_weights()])
    layer = layers.MultiHeadAttention.from_config(klayer.get_config())
    copy_from_keras(keras, klayer, layer, lambda: layer(q, v, k))
    return klayer, layer


@pytest.mark.parametrize("kwargs", [
    {"num_heads": 2, "key_dim": 4},
    {"num_heads": 3, "key_dim": 2, "value_dim": 5, "output_shape": 6},
    {"num_heads": 1, "key_dim": 8, "use_bias": False},
])
@pytest.mark.parametrize("with_key", [False, True])
def test_multi_head_attention_matches_keras(keras, kwargs, with_key, rng):
    q = rng.normal(size=(2, 5, 7)).astype(np.float32)
    v = rng.normal(size=(2, 6, 3)).astype(np.float32)
    k = rng.normal(size=(2, 6, 4)).astype(np.float32) if with_key else None
    klayer, layer = _mha_pair(keras, rng, q, v, k, **kwargs)
    ky, ks = klayer(q, v, k, return_attention_scores=True)
    y, s = layer(q, v, k, return_attention_scores=True)
    np.testing.assert_allclose(y, np_of(keras, ky), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(s, np_of(keras, ks), rtol=1e-5, atol=1e-7)
    # Keras's fused path (no scores returned) gives the same
    np.testing.assert_allclose(layer(q, v, k), np_of(keras, klayer(q, v, k)), rtol=1e-5,
                               atol=2e-6)


def test_multi_head_attention_masks_match_keras(keras, rng):
    q = rng.normal(size=(2, 5, 6)).astype(np.float32)
    v = rng.normal(size=(2, 5, 6)).astype(np.float32)
    klayer, layer = _mha_pair(keras, rng, q, v, num_heads=2, key_dim=3)
    am = rng.random((2, 5, 5)) > 0.4
    am[:, :, 0] = True
    for kwargs in ({"use_causal_mask": True}, {"attention_mask": am},
                   {"attention_mask": am, "use_causal_mask": True}):
        ky, ks = klayer(q, v, return_attention_scores=True, **kwargs)
        y, s = layer(q, v, return_attention_scores=True, **kwargs)
        np.testing.assert_allclose(y, np_of(keras, ky), rtol=1e-5, atol=2e-6, err_msg=str(kwargs))
        np.testing.assert_allclose(s, np_of(keras, ks), rtol=1e-5, atol=1e-7, err_msg=str(kwargs))
        np.testing.assert_allclose(layer(q, v, **kwargs), np_of(keras, klayer(q, v, **kwargs)),
                                   rtol=1e-5, atol=2e-6, err_msg=str(kwargs))
    # padding masks carried by the tensors in Keras, given as arguments here
    keep = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    kq = keras.ops.convert_to_tensor(q)
    kv = keras.ops.convert_to_tensor(v)
    kq._keras_mask = keras.ops.convert_to_tensor(keep)
    kv._keras_mask = keras.ops.convert_to_tensor(keep)
    ky, ks = klayer(kq, kv, return_attention_scores=True)
    y, s = layer(q, v, query_mask=keep, value_mask=keep, return_attention_scores=True)
    np.testing.assert_allclose(y, np_of(keras, ky), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(s, np_of(keras, ks), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name, shapes", [
    ("Add", [(2, 3, 4), (2, 1, 4)]), ("Subtract", [(2, 3, 4), (2, 3, 4)]),
    ("Multiply", [(2, 3, 4), (2, 3, 4), (2, 3, 4)]), ("Average", [(2, 5), (2, 5)]),
    ("Maximum", [(2, 3, 4), (2, 3, 4)]), ("Minimum", [(2, 3, 4), (2, 3, 4)]),
    ("Concatenate", [(2, 3, 1), (2, 3, 4)]),
])
def test_merging_layers_match_keras(keras, name, shapes, rng):
    xs = [rng.normal(size=s).astype(np.float32) for s in shapes]
    klayer = getattr(keras.layers, name)()
    layer = layers.deserialize({"class_name": name, "config": klayer.get_config()})
    np.testing.assert_allclose(layer(xs), np_of(keras, klayer(xs)), rtol=1e-6)


@pytest.mark.parametrize("make, shape", [
    (lambda L: L.Reshape((-1, 2)), (2, 3, 4)),
    (lambda L: L.Permute((3, 1, 2)), (2, 3, 4, 5)),
    (lambda L: L.RepeatVector(3), (2, 4)),
    (lambda L: L.ZeroPadding1D((2, 1)), (2, 3, 4)),
    (lambda L: L.ZeroPadding2D(((1, 2), (0, 1))), (2, 3, 4, 2)),
    (lambda L: L.Cropping2D(((1, 0), (1, 2))), (2, 4, 5, 3)),
    (lambda L: L.UpSampling2D((2, 3)), (2, 3, 4, 2)),
    (lambda L: L.UpSampling2D(2, interpolation="bilinear"), (2, 3, 4, 2)),
    (lambda L: L.UpSampling2D((3, 2), interpolation="bilinear", data_format="channels_first"),
     (1, 2, 3, 4)),
    (lambda L: L.Flatten(data_format="channels_first"), (2, 3, 2, 2)),
])
def test_shaping_layers_match_keras(keras, make, shape, rng):
    x = rng.normal(size=shape).astype(np.float32)
    klayer = make(keras.layers)
    layer = layers.deserialize({"class_name": type(klayer).__name__,
                                "config": klayer.get_config()})
    y = layer(x)
    ky = np_of(keras, klayer(x))
    assert y.shape == ky.shape
    np.testing.assert_allclose(y, ky, rtol=1e-5, atol=1e-6)


def test_keras_configs_of_a_model_with_the_new_layers_load(keras, rng):
    tokens = keras.Input((6,), dtype="int32")
    h = keras.layers.Embedding(20, 8)(tokens)
    att = keras.layers.MultiHeadAttention(2, 4)(h, h)
    h = keras.layers.LayerNormalization()(keras.layers.Add()([h, att]))
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Dense(8, activation="gelu")(h)
    h = keras.layers.Flatten()(h)
    out = keras.layers.Dense(3)(keras.layers.LeakyReLU()(h))
    kmodel = keras.Model(tokens, out)
    model = models.Model.from_config(kmodel.get_config())
    model.set_weights(kmodel.get_weights())
    idx = rng.integers(0, 20, size=(4, 6)).astype(np.int32)
    np.testing.assert_allclose(model.predict(idx, verbose=0),
                               np_of(keras, kmodel.predict(idx, verbose=0)), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda: layers.LeakyReLU(0.1), lambda: layers.PReLU(shared_axes=[1]),
    lambda: layers.ELU(0.5), lambda: layers.BatchNormalization(axis=1, momentum=0.9),
    lambda: layers.Embedding(7, 3, mask_zero=True),
    lambda: layers.MultiHeadAttention(2, 4, value_dim=3, output_shape=5, dropout=0.1),
    lambda: layers.Add(), lambda: layers.Concatenate(axis=1), lambda: layers.Reshape((-1, 3)),
    lambda: layers.Permute((2, 1)), lambda: layers.RepeatVector(4),
    lambda: layers.ZeroPadding2D(((1, 2), (3, 4))), lambda: layers.Cropping2D(2),
    lambda: layers.UpSampling2D(3, interpolation="bilinear"), lambda: layers.SpatialDropout1D(0.2),
    lambda: layers.GaussianNoise(0.3),
])
def test_configs_have_keras_keys_and_load_into_keras(keras, make):
    layer = make()
    name = type(layer).__name__
    config = layer.get_config()
    klayer = getattr(keras.layers, name).from_config(config)
    kconfig = klayer.get_config()
    missing = set(kconfig) - set(config)
    assert not missing, missing
    for key in set(kconfig) & set(config) - {"dtype"}:
        if key.endswith("_initializer"):        # a name here, Keras's dict there
            continue
        a, b = kconfig[key], config[key]
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            a, b = np.asarray(a, dtype=object).tolist(), np.asarray(b, dtype=object).tolist()
        assert a == b, (key, a, b)
