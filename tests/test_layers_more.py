"""Activation layers (LeakyReLU, PReLU, ELU), BatchNormalization, Embedding, the merging and
shaping layers, SpatialDropout and GaussianNoise: forward against float64 references written
here, backward against float64 finite differences, autocasting, configs, bad input."""
import ml_dtypes
import numpy as np
import pytest

from mixedcore import layers, models
from mixedcore.policy import policy_scope

from gradcheck import numeric_grad

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def rng():
    return np.random.default_rng(2024)


def check_gradients(layer, inputs, rng, call=None, to_list=None, loss_training=False,
                    rtol=1e-6, atol=1e-8):
    """Backward of a training call against central differences of sum(output * r): the inputs
    in ``inputs`` (float64 arrays) and every trainable weight.  ``call(inputs, training)`` runs the
    layer (default: on the single input), ``to_list`` turns backward's result into a list aligned
    with ``inputs``; ``loss_training`` evaluates the differences in training mode (batch
    statistics)."""
    call = call or (lambda xs, training: layer(xs[0], training=training))
    y = call(inputs, True)
    r = rng.normal(size=y.shape)
    g = layer.backward(r.copy())
    dxs = to_list(g) if to_list else [g]
    wgrads = [w.copy() for w in layer.gradients]
    assert len(wgrads) == len(layer.trainable_weights)

    def loss():
        layer.weights_updated()
        return float(np.sum(call(inputs, loss_training) * r))

    for x, dx in zip(inputs, dxs):
        assert dx.shape == x.shape
        np.testing.assert_allclose(dx, numeric_grad(loss, x), rtol=rtol, atol=atol)
    for w, gw in zip(layer.trainable_weights, wgrads):
        np.testing.assert_allclose(gw, numeric_grad(loss, w), rtol=rtol, atol=atol)
    layer.weights_updated()


def round_trip(layer):
    config = layer.get_config()
    again = type(layer).from_config(config)
    assert again.get_config() == config
    entry = layers.serialize(layer)
    assert type(layers.deserialize(entry)) is type(layer)
    return again


# -- activation layers ------------------------------------------------------------------------
def test_leaky_relu_forward_backward_and_config(rng):
    x = rng.normal(size=(4, 7))
    layer = layers.LeakyReLU(dtype="float64")
    assert layer.negative_slope == 0.3                      # Keras 3's default
    np.testing.assert_array_equal(layer(x), np.where(x > 0, x, 0.3 * x))
    check_gradients(layers.LeakyReLU(negative_slope=0.1, dtype="float64"), [x], rng)
    config = round_trip(layers.LeakyReLU(0.05)).get_config()
    assert config["negative_slope"] == 0.05 and "alpha" not in config
    # tf.keras configs name it alpha
    assert layers.LeakyReLU.from_config({"alpha": 0.2, "name": "lr"}).negative_slope == 0.2
    with pytest.raises(ValueError, match=r"LeakyReLU: negative_slope .* got -0.5"):
        layers.LeakyReLU(-0.5)
    with pytest.raises(TypeError, match="LeakyReLU: negative_slope must be a number"):
        layers.LeakyReLU("0.1")


def test_elu_forward_backward_and_config(rng):
    x = rng.normal(size=(3, 8)) * 3
    layer = layers.ELU(alpha=0.7, dtype="float64")
    np.testing.assert_allclose(layer(x), np.where(x > 0, x, 0.7 * np.expm1(x)), rtol=1e-15)
    check_gradients(layers.ELU(alpha=1.3, dtype="float64"), [x], rng)
    assert round_trip(layers.ELU(2.0)).alpha == 2.0


@pytest.mark.parametrize("shared_axes, alpha_shape", [(None, (3, 4, 2)), ([1, 2], (1, 1, 2)),
                                                      (1, (1, 4, 2))])
def test_prelu_weight_shape_forward_and_gradients(shared_axes, alpha_shape, rng):
    layer = layers.PReLU(shared_axes=shared_axes, dtype="float64")
    x = rng.normal(size=(5, 3, 4, 2))
    layer.build_from_shape(x.shape)
    assert layer.alpha.shape == alpha_shape
    np.testing.assert_array_equal(layer.alpha, 0.0)           # Keras's default: zeros
    alpha = rng.uniform(0.05, 0.5, size=alpha_shape)
    layer.set_weights([alpha])
    np.testing.assert_allclose(layer(x), np.where(x >= 0, x, alpha * x), rtol=1e-15)
    check_gradients(layer, [x], rng)


def test_prelu_config_and_errors():
    layer = layers.PReLU(alpha_initializer="ones", shared_axes=[1, 2], name="pr")
    layer.build_from_shape((None, 3, 4, 2))
    assert layer.get_weights()[0].shape == (1, 1, 2)
    config = round_trip(layer).get_config()
    assert config["shared_axes"] == [1, 2] and config["alpha_initializer"] == "ones"
    with pytest.raises(ValueError, match="PReLU: shared_axes must be ints >= 1"):
        layers.PReLU(shared_axes=[0])
    with pytest.raises(ValueError, match="PReLU: alpha_constraint"):
        layers.PReLU(alpha_constraint="non_neg")
    with pytest.raises(ValueError, match=r"PReLU 'pr': expected input of shape"):
        layer(np.zeros((2, 3, 4, 5), np.float32))
    bad = layers.PReLU(shared_axes=[4])
    with pytest.raises(ValueError, match="shared_axes .* out of range"):
        bad(np.zeros((2, 3, 4), np.float32))


@pytest.mark.parametrize("policy, dtype", [("mixed_float16", np.float16),
                                           ("mixed_bfloat16", BF16)])
def test_activation_layers_autocast(policy, dtype, rng):
    x = rng.normal(size=(4, 6)).astype(np.float32)
    for layer in (layers.LeakyReLU(dtype=policy), layers.ELU(dtype=policy),
                  layers.PReLU(alpha_initializer="constant", dtype=policy)):
        y = layer(x)
        assert y.dtype == dtype
        ref = {"LeakyReLU": np.where(x > 0, x, 0.3 * x),
               "ELU": np.where(x > 0, x, np.expm1(x.astype(np.float64))),
               "PReLU": np.maximum(x, 0)}[type(layer).__name__]
        # the input rounded to 16 bits, the result rounded once
        xr = x.astype(dtype).astype(np.float64)
        ref = {"LeakyReLU": np.where(xr > 0, xr, 0.3 * xr),
               "ELU": np.where(xr > 0, xr, np.expm1(xr)),
               "PReLU": np.maximum(xr, 0)}[type(layer).__name__]
        np.testing.assert_array_equal(y, ref.astype(dtype))
    prelu = layers.PReLU(dtype=policy)
    prelu(x)
    assert prelu.alpha.dtype == np.float32


# -- BatchNormalization -----------------------------------------------------------------------
def bn_reference(x, gamma, beta, axis, eps, mask=None):
    axis = axis % x.ndim
    red = tuple(a for a in range(x.ndim) if a != axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    if mask is None:
        mean = x.mean(axis=red)
        var = x.var(axis=red)
    else:
        m = np.broadcast_to(mask[..., None].astype(np.float64), x.shape)
        count = m.sum(axis=red) + 1e-7
        mean = (x * m).sum(axis=red) / count
        var = (((x - mean.reshape(shape)) ** 2) * m).sum(axis=red) / count
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    return y * gamma.reshape(shape) + beta.reshape(shape), mean, var


@pytest.mark.parametrize("axis, shape", [(-1, (6, 4)), (-1, (3, 5, 4)), (1, (2, 4, 3, 3)),
                                         (2, (3, 2, 4))])
def test_batch_norm_training_uses_batch_statistics_and_updates_moving_ones(axis, shape, rng):
    layer = layers.BatchNormalization(axis=axis, momentum=0.9, epsilon=1e-3, dtype="float64")
    x = rng.normal(size=shape) * 2 + 1
    layer.build_from_shape(x.shape)
    c = shape[axis]
    gamma, beta = rng.normal(size=c), rng.normal(size=c)
    mm, mv = rng.normal(size=c), rng.uniform(0.5, 2, size=c)
    layer.set_weights([gamma, beta, mm, mv])
    assert layer.weight_names() == [f"{layer.name}/{n}" for n in
                                    ("gamma", "beta", "moving_mean", "moving_variance")]
    y = layer(x, training=True)
    ref, mean, var = bn_reference(x, gamma, beta, axis, 1e-3)
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(layer.moving_mean, mm * 0.9 + mean * 0.1, rtol=1e-12)
    np.testing.assert_allclose(layer.moving_variance, mv * 0.9 + var * 0.1, rtol=1e-12)
    # inference: the moving statistics, and the affine form agrees with it
    y_inf = layer(x)
    ref_inf = (x - _bcast(layer.moving_mean, x.ndim, axis)) / np.sqrt(
        _bcast(layer.moving_variance, x.ndim, axis) + 1e-3) * _bcast(gamma, x.ndim, axis) + \
        _bcast(beta, x.ndim, axis)
    np.testing.assert_allclose(y_inf, ref_inf, rtol=1e-12, atol=1e-12)


def _bcast(v, ndim, axis):
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return v.reshape(shape)


def test_batch_norm_inference_affine(rng):
    layer = layers.BatchNormalization(dtype="float32")
    x = rng.normal(size=(8, 5)).astype(np.float32)
    layer.build_from_shape(x.shape)
    layer.set_weights([rng.normal(size=5), rng.normal(size=5), rng.normal(size=5),
                       rng.uniform(0.1, 3, size=5)])
    scale, shift = layer.inference_affine()
    assert scale.dtype == np.float32 and shift.dtype == np.float32 and scale.shape == (5,)
    np.testing.assert_array_equal(layer(x), x * scale + shift)
    g, b, m, v = (w.astype(np.float64) for w in layer.get_weights())
    np.testing.assert_allclose(scale, g / np.sqrt(v + 1e-3), rtol=1e-7)
    np.testing.assert_allclose(shift, b - m * g / np.sqrt(v + 1e-3), rtol=1e-6, atol=1e-7)
    # cached until the weights change
    assert layer.inference_affine()[0] is scale
    layer.set_weights([np.ones(5), np.zeros(5), np.zeros(5), np.ones(5)])
    np.testing.assert_allclose(layer.inference_affine()[0], 1 / np.sqrt(1 + 1e-3), rtol=1e-7)
    no_scale = layers.BatchNormalization(center=False, scale=False)
    no_scale.build_from_shape((None, 3))
    assert no_scale.get_weights()[0].shape == (3,) and len(no_scale.get_weights()) == 2
    np.testing.assert_allclose(no_scale.inference_affine()[1], 0.0)


@pytest.mark.parametrize("axis, shape", [(-1, (5, 3)), (1, (2, 3, 2, 2)), (-1, (2, 3, 4))])
@pytest.mark.parametrize("center, scale", [(True, True), (False, True), (True, False)])
def test_batch_norm_gradients_training_mode(axis, shape, center, scale, rng):
    layer = layers.BatchNormalization(axis=axis, center=center, scale=scale, dtype="float64")
    x = rng.normal(size=shape)
    layer.build_from_shape(x.shape)
    weights = [rng.normal(size=w.shape) for w in layer.trainable_weights]
    layer.set_weights(weights + [w for w in layer.get_weights()[len(weights):]])
    check_gradients(layer, [x], rng, loss_training=True, rtol=1e-5, atol=1e-7)


def test_batch_norm_gradients_inference_mode_and_frozen(rng):
    layer = layers.BatchNormalization(dtype="float64")
    x = rng.normal(size=(4, 3))
    layer.build_from_shape(x.shape)
    layer.set_weights([rng.normal(size=3), rng.normal(size=3), rng.normal(size=3),
                       rng.uniform(0.5, 2, size=3)])
    # a frozen layer normalizes with the moving statistics even in training calls (Keras)
    layer.trainable = False
    before = layer.moving_mean.copy()
    y = layer(x, training=True)
    np.testing.assert_array_equal(layer.moving_mean, before)
    np.testing.assert_allclose(y, layer(x), rtol=1e-15)
    check_gradients(layer, [x], rng)
    assert layer.gradients == []


def test_batch_norm_mask(rng):
    layer = layers.BatchNormalization(dtype="float64", momentum=0.5)
    x = rng.normal(size=(3, 5, 4))
    mask = rng.random((3, 5)) > 0.3
    layer.build_from_shape(x.shape)
    gamma, beta = rng.normal(size=4), rng.normal(size=4)
    layer.set_weights([gamma, beta, np.zeros(4), np.ones(4)])
    y = layer(x, training=True, mask=mask)
    ref, mean, var = bn_reference(x, gamma, beta, -1, 1e-3, mask=mask)
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(layer.moving_mean, mean * 0.5, rtol=1e-12)
    check_gradients(layer, [x], rng, call=lambda xs, training: layer(xs[0], training=training,
                                                                     mask=mask),
                    loss_training=True, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="BatchNormalization .* mask must have the input's "
                                         "shape without its last dimension"):
        layer(x, training=True, mask=mask[:, :, None])
    assert layer.compute_mask(x, mask) is mask


def test_batch_norm_statistics_in_float32_under_16bit(rng):
    # values near 300 with a spread of 0.1: a float16 variance would be mostly rounding error
    x = (300 + 0.1 * rng.normal(size=(64, 3))).astype(np.float32)
    layer = layers.BatchNormalization(dtype="mixed_float16")
    y = layer(x, training=True)
    assert y.dtype == np.float16
    assert layer.gamma.dtype == np.float32 and layer.moving_mean.dtype == np.float32
    x16 = x.astype(np.float16).astype(np.float64)
    ref, mean, _ = bn_reference(x16, np.ones(3), np.zeros(3), -1, 1e-3)
    np.testing.assert_allclose(y.astype(np.float64), ref, atol=4e-3)
    np.testing.assert_allclose(layer.moving_mean, 0.01 * mean, rtol=1e-6)
    assert layer(x).dtype == np.float16


def test_batch_norm_config_and_errors():
    layer = layers.BatchNormalization(axis=1, momentum=0.9, epsilon=1e-5, center=False,
                                      gamma_initializer="ones",
                                      moving_variance_initializer={"class_name": "Constant",
                                                                   "config": {"value": 2.0}})
    config = round_trip(layer).get_config()
    assert {"axis", "momentum", "epsilon", "center", "scale", "beta_initializer",
            "gamma_initializer", "moving_mean_initializer", "moving_variance_initializer",
            "beta_regularizer", "gamma_regularizer"} <= set(config)
    layer.build_from_shape((None, 3, 5))
    np.testing.assert_array_equal(layer.moving_variance, 2.0)
    # Keras's own off values are accepted
    layers.BatchNormalization(renorm=False, synchronized=False, renorm_clipping=None,
                              renorm_momentum=0.99)
    with pytest.raises(ValueError, match="BatchNormalization: renorm=True is not supported"):
        layers.BatchNormalization(renorm=True)
    with pytest.raises(ValueError, match="BatchNormalization: momentum must be .* got 1.5"):
        layers.BatchNormalization(momentum=1.5)
    with pytest.raises(ValueError, match="BatchNormalization: epsilon must be .* > 0"):
        layers.BatchNormalization(epsilon=0)
    with pytest.raises(TypeError, match="BatchNormalization: axis must be an int"):
        layers.BatchNormalization(axis=[1, 2])
    with pytest.raises(ValueError, match=r"axis 0 is invalid .* not the batch"):
        layers.BatchNormalization(axis=0)(np.zeros((2, 3), np.float32))
    built = layers.BatchNormalization(name="bn")
    built(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"BatchNormalization 'bn': expected input of rank 2 "
                                         r"with 3 features"):
        built(np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="not built yet"):
        layers.BatchNormalization(name="b2").inference_affine()


# -- Embedding --------------------------------------------------------------------------------
def test_embedding_lookup_mask_and_dtypes(rng):
    layer = layers.Embedding(10, 3, mask_zero=True, dtype="mixed_bfloat16")
    idx = np.array([[1, 2, 0], [9, 0, 0]], dtype=np.int32)
    y = layer(idx)
    table = layer.embeddings
    assert table.dtype == np.float32 and y.dtype == BF16 and y.shape == (2, 3, 3)
    np.testing.assert_array_equal(y, table.astype(BF16)[idx])
    np.testing.assert_array_equal(layer.compute_mask(idx), idx != 0)
    # the integer input is not cast; float inputs are truncated toward zero as Keras's cast
    np.testing.assert_array_equal(layer(np.array([[1.9, 2.0]])), table.astype(BF16)[[[1, 2]]])
    np.testing.assert_array_equal(layer(np.array([[-0.5, 3.7]], dtype=np.float32)),
                                  table.astype(BF16)[[[0, 3]]])
    plain = layers.Embedding(4, 2)
    assert plain.compute_mask(idx) is None


def test_embedding_gradient_is_a_scatter_add(rng):
    layer = layers.Embedding(6, 4, dtype="float64")
    idx = np.array([[0, 3, 3], [5, 3, 0]])
    layer.build_from_shape(idx.shape)
    y = layer(idx, training=True)
    r = rng.normal(size=y.shape)
    assert layer.backward(r) is None
    (g,) = layer.gradients
    expected = np.zeros((6, 4))
    for (i, j), k in np.ndenumerate(idx):
        expected[k] += r[i, j]
    np.testing.assert_allclose(g, expected, rtol=1e-15)

    def loss():
        layer.weights_updated()
        return float(np.sum(layer(idx) * r))
    np.testing.assert_allclose(g, numeric_grad(loss, layer.embeddings), rtol=1e-7, atol=1e-9)


def test_embedding_in_a_model_masks_and_trains(rng):
    with policy_scope("float32"):
        inp = layers.Input((4,), dtype="int32")
        emb = layers.Embedding(8, 3, mask_zero=True, name="emb")
        h = emb(inp)
        out = layers.Dense(2, name="out")(layers.Flatten()(h))
        model = models.Model(inp, out)
    data = rng.integers(0, 8, size=(16, 4))
    model.compile(optimizer="sgd", loss="mse")
    before = emb.get_weights()[0].copy()
    model.fit(data, rng.normal(size=(16, 2)), epochs=1, verbose=0)
    changed = np.any(emb.get_weights()[0] != before, axis=1)
    np.testing.assert_array_equal(changed, np.isin(np.arange(8), data))


def test_embedding_config_and_errors():
    layer = layers.Embedding(5, 2, mask_zero=True, name="emb")
    config = round_trip(layer).get_config()
    assert config["input_dim"] == 5 and config["output_dim"] == 2 and config["mask_zero"]
    layers.Embedding.from_config({**config, "embeddings_constraint": None, "input_length": 7,
                                  "lora_rank": None})
    with pytest.raises(ValueError, match=r"Embedding 'emb': index 5 at position \(0, 1\) is "
                                         r"out of range for input_dim 5"):
        layer(np.array([[1, 5]]))
    with pytest.raises(ValueError, match=r"Embedding 'emb': index -1 at position \(1,\)"):
        layer(np.array([2, -1]))
    with pytest.raises(ValueError, match="Embedding 'emb': inputs must be indices; the float "
                                         "input holds nan"):
        layer(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="input_dim must be a positive int, got 0"):
        layers.Embedding(0, 3)
    with pytest.raises(ValueError, match="Embedding: embeddings_constraint"):
        layers.Embedding(3, 3, embeddings_constraint="non_neg")
    init = layers.Embedding(3, 2, weights=np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(init(np.array([2])), [[4.0, 5.0]])


# -- merging ----------------------------------------------------------------------------------
MERGES = {
    "Add": lambda xs: sum(xs[1:], xs[0]),
    "Subtract": lambda xs: xs[0] - xs[1],
    "Multiply": lambda xs: np.prod(np.broadcast_arrays(*xs), axis=0),
    "Average": lambda xs: sum(xs[1:], xs[0]) / len(xs),
    "Maximum": lambda xs: np.maximum.reduce(np.broadcast_arrays(*xs)),
    "Minimum": lambda xs: np.minimum.reduce(np.broadcast_arrays(*xs)),
}


@pytest.mark.parametrize("name", sorted(MERGES))
@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4), (3, 4)], [(2, 3, 4), (2, 1, 4)],
                                    [(2, 3, 4), (2, 4)]])
def test_elementwise_merges_forward_and_gradients(name, shapes, rng):
    if name == "Subtract":
        shapes = shapes[:2]
    xs = [rng.normal(size=s) for s in shapes]
    layer = getattr(layers, name)(dtype="float64")
    y = layer(xs)
    # Keras broadcasts a lower-rank input by inserting axes after the batch axis
    expanded = [x.reshape(x.shape[:1] + (1,) * (len(shapes[0]) - x.ndim) + x.shape[1:])
                for x in xs]
    np.testing.assert_allclose(y, MERGES[name](expanded), rtol=1e-15)
    assert layer.compute_output_shape([(None,) + s[1:] for s in shapes]) == (None,) + y.shape[1:]
    check_gradients(layer, xs, rng, call=lambda v, training: layer(v, training=training),
                    to_list=list)


@pytest.mark.parametrize("axis", [-1, 1, -2])
def test_concatenate_forward_and_gradients(axis, rng):
    shapes = {-1: [(2, 3, 1), (2, 3, 4)], 1: [(2, 1, 4), (2, 5, 4)],
              -2: [(2, 2, 3, 2), (2, 2, 1, 2), (2, 2, 2, 2)]}[axis]
    xs = [rng.normal(size=s) for s in shapes]
    layer = layers.Concatenate(axis=axis, dtype="float64")
    np.testing.assert_array_equal(layer(xs), np.concatenate(xs, axis=axis))
    check_gradients(layer, xs, rng, call=lambda v, training: layer(v, training=training),
                    to_list=list)
    assert round_trip(layer).axis == axis


@pytest.mark.parametrize("policy, dtype", [("mixed_float16", np.float16),
                                           ("mixed_bfloat16", BF16)])
def test_merges_round_once_under_16bit(policy, dtype, rng):
    xs = [rng.normal(size=(3, 5)).astype(dtype) for _ in range(3)]
    y = layers.Add(dtype=policy)(xs)
    exact = sum(x.astype(np.float32) for x in xs)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, exact.astype(dtype))
    mixed = layers.Concatenate(dtype=policy)([xs[0], np.ones((3, 2), np.int32)])
    assert mixed.dtype == dtype


def test_merge_masks():
    a, b = np.array([[1, 1, 0]], bool), np.array([[1, 0, 0]], bool)
    x = np.zeros((1, 3, 2), np.float32)
    np.testing.assert_array_equal(layers.Add().compute_mask([x, x], [a, b]), [[1, 1, 0]])
    assert layers.Add().compute_mask([x, x], [a, None]) is None
    cat = layers.Concatenate(axis=1)
    np.testing.assert_array_equal(cat.compute_mask([x, x], [a, None]),
                                  [[1, 1, 0, 1, 1, 1]])
    np.testing.assert_array_equal(layers.Concatenate().compute_mask([x, x], [a, b]),
                                  [[1, 1, 0]])
    assert cat.compute_mask([x, x], [None, None]) is None


def test_merges_in_a_functional_model(rng):
    with policy_scope("float64"):
        a, b = layers.Input((4,)), layers.Input((4,))
        h = layers.Dense(4, name="d")(a)
        out = layers.concatenate([layers.add([h, b]), layers.multiply([h, b]),
                                  layers.maximum([a, b])])
        model = models.Model([a, b], out)
    assert model.output_shape == (None, 12)
    xa, xb = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    dy = rng.normal(size=(3, 12))
    model([xa, xb], training=True)
    ga, gb = model.backward(dy, need_input_grad=True)
    wgrads = list(model.gradients)

    def f():
        for layer in model.layers:
            layer.weights_updated()
        return float(np.sum(model([xa, xb]) * dy))
    np.testing.assert_allclose(ga, numeric_grad(f, xa), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, numeric_grad(f, xb), rtol=1e-6, atol=1e-8)
    for w, g in zip(model.trainable_weights, wgrads):
        np.testing.assert_allclose(g, numeric_grad(f, w), rtol=1e-6, atol=1e-8)


def test_merge_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"Subtract 'sub': takes exactly 2 inputs, received 3"):
        layers.Subtract(name="sub")([x, x, x])
    with pytest.raises(ValueError, match=r"Add 'add_x': inputs have incompatible shapes \(3,\) "
                                         r"and \(4,\)"):
        layers.Add(name="add_x")([x, np.zeros((2, 4))])
    with pytest.raises(ValueError, match="different batch sizes"):
        layers.Add()([x, np.zeros((3, 3))])
    with pytest.raises(ValueError, match="Multiply .* called on a list of inputs"):
        layers.Multiply()(x)
    with pytest.raises(ValueError, match=r"Concatenate 'cat': inputs must have matching shapes "
                                         r"except along axis -1"):
        layers.Concatenate(name="cat")([np.zeros((2, 3, 1)), np.zeros((2, 4, 1))])
    with pytest.raises(ValueError, match="Concatenate .* axis 3 is out of range"):
        layers.Concatenate(axis=3)([x, x])
    with pytest.raises(TypeError, match="Concatenate: axis must be an int"):
        layers.Concatenate(axis="1")


# -- shaping ----------------------------------------------------------------------------------
def _upsample_bilinear_reference(x, fh, fw):
    """Half-pixel centres, edge clamped, written as an explicit loop."""
    b, h, w, c = x.shape
    out = np.zeros((b, h * fh, w * fw, c))
    for i in range(h * fh):
        si = min(max((i + 0.5) / fh - 0.5, 0.0), h - 1)
        i0 = int(np.floor(si))
        i1 = min(i0 + 1, h - 1)
        ti = si - i0
        for j in range(w * fw):
            sj = min(max((j + 0.5) / fw - 0.5, 0.0), w - 1)
            j0 = int(np.floor(sj))
            j1 = min(j0 + 1, w - 1)
            tj = sj - j0
            out[:, i, j] = ((1 - ti) * (1 - tj) * x[:, i0, j0] + (1 - ti) * tj * x[:, i0, j1]
                            + ti * (1 - tj) * x[:, i1, j0] + ti * tj * x[:, i1, j1])
    return out


SHAPING = [
    (lambda: layers.Reshape((-1, 2)), (3, 4, 3), lambda x: x.reshape(3, 6, 2)),
    (lambda: layers.Reshape((12,)), (3, 4, 3), lambda x: x.reshape(3, 12)),
    (lambda: layers.Permute((2, 1)), (2, 3, 4), lambda x: x.transpose(0, 2, 1)),
    (lambda: layers.Permute((3, 1, 2)), (2, 3, 4, 5), lambda x: x.transpose(0, 3, 1, 2)),
    (lambda: layers.RepeatVector(3), (2, 4), lambda x: np.stack([x] * 3, axis=1)),
    (lambda: layers.ZeroPadding1D((1, 2)), (2, 3, 2),
     lambda x: np.pad(x, ((0, 0), (1, 2), (0, 0)))),
    (lambda: layers.ZeroPadding2D(((1, 0), (2, 1))), (2, 3, 2, 2),
     lambda x: np.pad(x, ((0, 0), (1, 0), (2, 1), (0, 0)))),
    (lambda: layers.ZeroPadding2D(1, data_format="channels_first"), (2, 2, 3, 2),
     lambda x: np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))),
    (lambda: layers.Cropping2D(((1, 0), (0, 2))), (2, 4, 5, 3), lambda x: x[:, 1:, :3]),
    (lambda: layers.Cropping2D(1, data_format="channels_first"), (2, 3, 4, 5),
     lambda x: x[:, :, 1:-1, 1:-1]),
    (lambda: layers.UpSampling2D((2, 3)), (2, 3, 2, 2),
     lambda x: x.repeat(2, axis=1).repeat(3, axis=2)),
    (lambda: layers.UpSampling2D(2, data_format="channels_first"), (1, 2, 3, 2),
     lambda x: x.repeat(2, axis=2).repeat(2, axis=3)),
    (lambda: layers.UpSampling2D((2, 3), interpolation="bilinear"), (2, 3, 4, 2),
     lambda x: _upsample_bilinear_reference(x, 2, 3)),
    (lambda: layers.Flatten(data_format="channels_first"), (2, 3, 2, 2),
     lambda x: x.transpose(0, 2, 3, 1).reshape(2, -1)),
]


@pytest.mark.parametrize("make, shape, ref", SHAPING)
def test_shaping_layers_forward_shapes_gradients_configs(make, shape, ref, rng):
    with policy_scope("float64"):
        layer = make()
    x = rng.normal(size=shape)
    y = layer(x)
    np.testing.assert_allclose(y, ref(x), rtol=1e-14, atol=1e-15)
    assert layer.compute_output_shape((None,) + shape[1:]) == (None,) + y.shape[1:]
    check_gradients(layer, [x], rng)
    round_trip(layer)


def test_shaping_layers_keep_integer_inputs_and_symbolic_shapes():
    idx = np.arange(12, dtype=np.int32).reshape(2, 3, 2)
    for layer in (layers.Reshape((-1,)), layers.Permute((2, 1)), layers.ZeroPadding1D(1)):
        assert layer(idx).dtype == np.int32
    inp = layers.Input((None, 4))
    assert layers.Reshape((-1, 2))(inp).shape == (None, None, 2)
    assert layers.Permute((2, 1))(inp).shape == (None, 4, None)
    assert layers.ZeroPadding1D(2)(inp).shape == (None, None, 4)
    assert layers.UpSampling2D(2)(layers.Input((3, None, 1))).shape == (None, 6, None, 1)


def test_shaping_errors():
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match=r"Reshape 'rs': cannot reshape samples of shape "
                                         r"\(3, 4\) \(12 values\) to \(5,\)"):
        layers.Reshape((5,), name="rs")(x)
    with pytest.raises(ValueError, match="Reshape: target_shape may hold at most one -1"):
        layers.Reshape((-1, -1))
    with pytest.raises(ValueError, match="Reshape: target_shape entries must be positive"):
        layers.Reshape((0, 3))
    with pytest.raises(ValueError, match="Permute: dims must be a permutation of 1..n"):
        layers.Permute((0, 1))
    with pytest.raises(ValueError, match=r"Permute 'pm': expected input of rank 3"):
        layers.Permute((2, 1), name="pm")(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="RepeatVector .* expected input of rank 2"):
        layers.RepeatVector(2)(x)
    with pytest.raises(ValueError, match="RepeatVector: n must be a positive int, got 0"):
        layers.RepeatVector(0)
    with pytest.raises(ValueError, match=r"Cropping2D 'cr': cropping \(\(2, 2\), \(0, 0\)\) "
                                         r"leaves nothing"):
        layers.Cropping2D(((2, 2), (0, 0)), name="cr")(np.zeros((1, 4, 4, 1)))
    with pytest.raises(ValueError, match="UpSampling2D: interpolation 'bicubic' is not "
                                         "supported"):
        layers.UpSampling2D(interpolation="bicubic")
    with pytest.raises(ValueError, match="ZeroPadding2D: padding must be an int, a tuple of 2"):
        layers.ZeroPadding2D((1, 2, 3))
    with pytest.raises(ValueError, match="data_format must be 'channels_last' or"):
        layers.ZeroPadding1D(data_format="NHWC")


# -- SpatialDropout, GaussianNoise ------------------------------------------------------------
def test_spatial_dropout_drops_whole_channels(rng):
    x = rng.normal(size=(4, 6, 5)) + 3
    layer = layers.SpatialDropout1D(0.5, seed=3, dtype="float64")
    np.testing.assert_array_equal(layer(x), x)
    y = layer(x, training=True)
    kept = y != 0
    assert np.all(kept == kept[:, :1, :])                # one draw per sample and channel
    np.testing.assert_allclose(y[kept], 2 * x[kept], rtol=1e-15)
    r = rng.normal(size=y.shape)
    np.testing.assert_allclose(layer.backward(r), np.where(kept, 2 * r, 0), rtol=1e-15)
    layer2 = layers.SpatialDropout2D(0.5, data_format="channels_first", seed=1, dtype="float64")
    y2 = layer2(rng.normal(size=(3, 4, 5, 5)) + 3, training=True)
    k2 = y2 != 0
    assert np.all(k2 == k2[:, :, :1, :1])
    assert round_trip(layer2).data_format == "channels_first"
    with pytest.raises(ValueError, match="SpatialDropout1D .* expected input of rank 3"):
        layers.SpatialDropout1D(0.2)(np.zeros((2, 3)))


def test_gaussian_noise(rng):
    x = np.zeros((2000, 10))
    layer = layers.GaussianNoise(0.5, seed=4, dtype="float64")
    np.testing.assert_array_equal(layer(x), x)
    y = layer(x, training=True)
    assert abs(y.std() - 0.5) < 0.02 and abs(y.mean()) < 0.01
    r = rng.normal(size=x.shape)
    np.testing.assert_array_equal(layer.backward(r), r)
    assert round_trip(layer).stddev == 0.5
    with pytest.raises(ValueError, match="GaussianNoise: stddev must be"):
        layers.GaussianNoise(-1.0)


class _ScalarGain(layers.Layer):
    """A user's layer written the Keras 3 way: keywords only, a scalar weight, a named regularizer."""

    def build(self, input_shape):
        self.gain = self.add_weight(shape=(), initializer="ones", regularizer="l2")
        self.offset = self.add_weight(shape=(input_shape[-1],))

    def call(self, inputs):
        return inputs * self.gain + self.offset


def test_add_weight_takes_keras_keywords_and_keeps_a_scalar_shape():
    layer = _ScalarGain()
    y = layer(np.ones((2, 3), np.float32))
    assert layer.gain.shape == () and layer.offset.shape == (3,)
    assert layer.weight_names() == [f"{layer.name}/variable", f"{layer.name}/variable_1"]
    # no initializer: glorot_uniform as Keras 3, so the offset is not all zeros
    assert np.any(layer.offset != 0) and np.all(np.abs(layer.offset) <= np.sqrt(6 / 6))
    np.testing.assert_array_equal(y, 1 + layer.offset[None, :].repeat(2, 0))
    value, _ = layer.regularization_losses()
    assert value == pytest.approx(0.01)             # l2 default factor on gain == 1


def test_add_weight_rejects_bad_shape_and_regularizer():
    layer = layers.Layer(name="w_checks")
    with pytest.raises(ValueError, match=r"add_weight: shape must not have negative .*\(2, -1\)"):
        layer.add_weight(shape=(2, -1))
    with pytest.raises(TypeError, match=r"add_weight: shape must be a tuple of ints, got 'ab'"):
        layer.add_weight(shape="ab")
    with pytest.raises(ValueError, match="unknown regularizer 'l3'"):
        layer.add_weight(shape=(2,), regularizer="l3")
    assert layer.weights == []
