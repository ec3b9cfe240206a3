"""Sequential models: building, inference, training (float32 and mixed precision with real loss
scaling), gradients against finite differences, weights I/O, configs, losses and bad input."""
import warnings

import numpy as np
import pytest

import mixedcore
from mixedcore import datasets, layers, losses, models, utils
from mixedcore.optimizers import LossScaleOptimizer
from mixedcore.optimizers import SGD, Adam, Optimizer
from mixedcore.policy import policy_scope

from gradcheck import numeric_grad


@pytest.fixture(autouse=True)
def _seed():
    utils.set_random_seed(11)


@pytest.fixture(scope="module")
def demo_data():
    return datasets.load_demo(n_train=3000, n_test=1000, seed=3)


def scale_of(optimizer):
    value = optimizer.loss_scale
    return float(value() if callable(value) else value)


def mlp(n_in=6, hidden=8, n_out=3, policy=None, softmax_float32=True):
    with policy_scope(policy or "float32"):
        stack = [layers.Input(shape=(n_in,)), layers.Dense(hidden, activation="relu"),
                 layers.Dense(n_out)]
        if softmax_float32:
            stack.append(layers.Activation("softmax", dtype="float32"))
        return models.Sequential(stack)


class RecordingOptimizer(Optimizer):
    """Stands between the model and the update: keeps the gradients, applies nothing."""

    def __init__(self):
        super().__init__(learning_rate=1.0)

    def apply_gradients(self, grads_and_vars):
        self.grads = [np.array(g, copy=True) for g, _ in grads_and_vars]


# -- structure and inference ---------------------------------------------------------------------

def test_build_summary_and_shapes():
    model = mlp(policy="mixed_bfloat16")
    assert model.built and model.input_shape == (None, 6) and model.output_shape == (None, 3)
    lines = []
    model.summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert "(None, 8)" in text and "mixed_bfloat16" in text and "float32" in text
    assert f"Total params: {6 * 8 + 8 + 8 * 3 + 3:,}" in text
    assert model.count_params() == 6 * 8 + 8 + 8 * 3 + 3


def test_lazy_build_on_first_call():
    model = models.Sequential([layers.Dense(4), layers.Dense(2)])
    assert not model.built
    with pytest.raises(ValueError, match="not yet been built"):
        model.summary()
    out = model(np.ones((3, 5), np.float32))
    assert out.shape == (3, 2) and model.built and model.input_shape == (None, 5)
    model2 = models.Sequential([layers.Dense(4, input_shape=(7,))])
    assert model2.built and model2.output_shape == (None, 4)


def test_predict_matches_call_and_dtypes():
    model = mlp(policy="mixed_float16")
    x = np.random.default_rng(0).normal(size=(70, 6)).astype(np.float32)
    full = model(x)
    assert full.dtype == np.float32
    for batch in (1, 16, 32, 100):
        np.testing.assert_array_equal(model.predict(x, batch_size=batch, verbose=0), full)
    plain = mlp(policy="mixed_float16", softmax_float32=False)
    assert plain.predict(x, verbose=0).dtype == np.float16
    assert model.predict(x[:0], verbose=0).shape == (0, 3)


def test_predict_on_batch_is_predict_of_one_batch():
    """predict_on_batch runs the batch at once: predict's outputs, bit for bit, for one input
    or several (a list or a dict) and the empty batch; predict's errors."""
    model = mlp(policy="mixed_bfloat16")
    x = np.random.default_rng(1).normal(size=(9, 6)).astype(np.float32)
    got = model.predict_on_batch(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, model.predict(x, batch_size=9, verbose=0))
    np.testing.assert_array_equal(model.predict_on_batch(x.astype(np.float64)), got)
    assert model.predict_on_batch(x[:0]).shape == (0, 3)
    with pytest.raises(ValueError, match=r"predict: expected input of shape \(None, 6\)"):
        model.predict_on_batch(np.ones((4, 7)))
    with pytest.raises(TypeError, match="numeric"):
        model.predict_on_batch(np.full((4, 6), "a"))
    with policy_scope("float32"):
        a, b = layers.Input((3,), name="a"), layers.Input((2,), name="b")
        both = models.Model([a, b], [layers.Dense(4)(layers.Concatenate()([a, b])),
                                     layers.Dense(1)(b)])
    xa = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    xb = np.random.default_rng(3).normal(size=(5, 2)).astype(np.float32)
    want = both.predict([xa, xb], batch_size=5, verbose=0)
    for inputs in ([xa, xb], {"a": xa, "b": xb}):
        for g, w in zip(both.predict_on_batch(inputs), want):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(ValueError, match="numbers of samples|same number"):
        both.predict_on_batch([xa, xb[:4]])


def test_wrong_input_shape_and_non_numeric_data():
    model = mlp()
    with pytest.raises(ValueError, match=r"expected input of shape \(None, 6\), received \(4, 7\)"):
        model.predict(np.ones((4, 7)), verbose=0)
    with pytest.raises(ValueError, match="expected input of shape"):
        model(np.ones(6))
    with pytest.raises(TypeError, match="numeric"):
        model.predict(np.full((4, 6), "a"), verbose=0)
    model.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(TypeError, match="numeric"):
        model.fit(np.ones((4, 6)), np.array(["a", "b", "c", "d"]), verbose=0)
    with pytest.raises(ValueError, match="numbers of samples"):
        model.fit(np.ones((4, 6)), np.zeros(5), verbose=0)
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\)"):
        model.fit(np.ones((4, 6)), np.array([0, 1, 2, 3]), verbose=0)
    with pytest.raises(ValueError, match="batch_size"):
        model.predict(np.ones((4, 6)), batch_size=0, verbose=0)


def test_compile_errors():
    model = mlp()
    with pytest.raises(RuntimeError, match="compile"):
        model.fit(np.ones((2, 6)), np.zeros(2), verbose=0)
    with pytest.raises(ValueError):
        model.compile(optimizer="rmsprop_typo", loss="mse")
    with pytest.raises(ValueError, match="unknown loss 'crossentropy'"):
        model.compile(optimizer="sgd", loss="crossentropy")
    with pytest.raises(ValueError, match="unknown metric"):
        model.compile(optimizer="sgd", loss="mse", metrics=["precision"])
    model.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="without a loss"):
        model.fit(np.ones((2, 6)), np.zeros(2), verbose=0)
    with pytest.raises(TypeError):
        models.Sequential([np.ones(3)])


# -- loss scaling --------------------------------------------------------------------------------

def test_compile_wraps_optimizer_only_under_mixed_float16():
    for policy, wrapped in (("mixed_float16", True), ("mixed_bfloat16", False),
                            ("float32", False)):
        model = mlp(policy=policy)
        model.compile(SGD(), "sparse_categorical_crossentropy")
        assert isinstance(model.optimizer, LossScaleOptimizer) == wrapped, policy
    model = mlp(policy="mixed_float16")
    inner = LossScaleOptimizer(SGD(), dynamic=False, initial_scale=64)
    model.compile(inner, "sparse_categorical_crossentropy")
    assert model.optimizer is inner


def test_experimental_policy_loss_scale_is_used():
    from mixedcore import experimental
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy = experimental.Policy("mixed_float16", loss_scale=128)
    model = models.Sequential([layers.Input(shape=(3,)), layers.Dense(2)], dtype=policy)
    model.compile("sgd", "mse")
    assert isinstance(model.optimizer, LossScaleOptimizer)
    assert not model.optimizer.dynamic and scale_of(model.optimizer) == 128
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = experimental.Policy("mixed_float16",
                                      loss_scale=mixedcore.DynamicLossScale(1024, 50))
        none = experimental.Policy("mixed_float16", loss_scale=None)
    model = models.Sequential([layers.Input(shape=(3,)), layers.Dense(2)], dtype=dynamic)
    model.compile("sgd", "mse")
    assert model.optimizer.dynamic and scale_of(model.optimizer) == 1024
    assert model.optimizer.dynamic_growth_steps == 50
    model = models.Sequential([layers.Input(shape=(3,)), layers.Dense(2)], dtype=none)
    model.compile("sgd", "mse")
    assert not isinstance(model.optimizer, LossScaleOptimizer)


@pytest.mark.filterwarnings("ignore:fit. .* steps in a row were skipped")
def test_forced_overflow_skips_step_and_halves_scale():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(32, 6)).astype(np.float32)
    y = rng.integers(0, 3, 32)
    model = mlp(policy="mixed_float16")
    # 2**40 times the output gradient does not fit in float16 (max 65504): inf in the backward
    opt = LossScaleOptimizer(SGD(learning_rate=0.1), initial_scale=2.0 ** 40)
    model.compile(opt, "sparse_categorical_crossentropy")
    before = model.get_weights()
    loss = model.train_on_batch(x, y)
    assert np.isfinite(loss)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert scale_of(opt) == 2.0 ** 39
    assert int(opt.iterations) == 1
    # the scale keeps backing off until the gradients fit, then the steps apply
    for _ in range(40):
        model.train_on_batch(x, y)
    assert scale_of(opt) <= 2.0 ** 24
    assert any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_scaled_float16_step_matches_float32_step():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(64, 6)).astype(np.float32)
    y = rng.integers(0, 3, 64)
    ref_model = mlp(policy="float32")
    weights = ref_model.get_weights()
    deltas = []
    for policy in ("float32", "mixed_float16"):
        model = mlp(policy=policy)
        model.set_weights(weights)
        model.compile(SGD(learning_rate=1.0), "sparse_categorical_crossentropy")
        model.train_on_batch(x, y)
        deltas.append([a - b for a, b in zip(model.get_weights(), weights)])
    assert isinstance(model.optimizer, LossScaleOptimizer)
    for ref, got in zip(*deltas):
        assert np.abs(ref).max() > 0
        np.testing.assert_allclose(got, ref, rtol=0, atol=3e-3 * np.abs(ref).max() + 1e-6)


# -- gradients -----------------------------------------------------------------------------------

@pytest.mark.parametrize("loss", ["sparse_categorical_crossentropy", "categorical_crossentropy",
                                  "mse"])
def test_model_gradients_match_finite_differences(loss):
    rng = np.random.default_rng(8)
    with policy_scope("float64"):
        model = models.Sequential([
            layers.Input(shape=(2, 3)), layers.Flatten(), layers.Dense(5, activation="tanh"),
            layers.LayerNormalization(), layers.Dense(4, activation="gelu"),
            layers.ReLU(negative_slope=0.1), layers.Dense(3), layers.Softmax()])
    x = rng.normal(size=(6, 2, 3))
    labels = rng.integers(0, 3, 6)
    y = labels if loss.startswith("sparse") else np.eye(3)[labels]
    model.compile("sgd", loss)
    recorder = RecordingOptimizer()
    model.optimizer = recorder
    model.train_on_batch(x, y)
    loss_obj = losses.get(loss)
    for w, g in zip(model.trainable_weights, recorder.grads):
        def f():
            for layer in model.layers:
                layer.weights_updated()
            return loss_obj(y, model(x))
        np.testing.assert_allclose(g, numeric_grad(f, w), rtol=1e-5, atol=1e-8)


def test_softmax_crossentropy_fusion_equals_from_logits():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(16, 6)).astype(np.float32)
    y = rng.integers(0, 3, 16)
    probs = mlp()
    logits = models.Sequential([layers.Input(shape=(6,)), layers.Dense(8, activation="relu"),
                                layers.Dense(3)])
    logits.set_weights(probs.get_weights())
    probs.compile(SGD(0.5), "sparse_categorical_crossentropy")
    logits.compile(SGD(0.5), losses.SparseCategoricalCrossentropy(from_logits=True))
    l1 = probs.train_on_batch(x, y)
    l2 = logits.train_on_batch(x, y)
    assert l1 == pytest.approx(l2, rel=1e-5)
    for a, b in zip(probs.get_weights(), logits.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# -- training ------------------------------------------------------------------------------------

def _demo_model(policy):
    with policy_scope(policy):
        return models.Sequential([layers.Input(shape=(64,)),
                                  layers.Dense(64, activation="relu"),
                                  layers.Dense(10),
                                  layers.Activation("softmax", dtype="float32")])


def test_float32_and_mixed_float16_reach_same_accuracy(demo_data):
    (x, y), (xt, yt) = demo_data
    accuracy = {}
    for policy in ("float32", "mixed_float16", "mixed_bfloat16"):
        utils.set_random_seed(0)
        model = _demo_model(policy)
        model.compile(Adam(learning_rate=3e-3), "sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        history = model.fit(x, y, batch_size=64, epochs=4, verbose=0)
        accuracy[policy] = model.evaluate(xt, yt, verbose=0)[1]
        assert history.history["loss"][-1] < history.history["loss"][0]
    assert accuracy["float32"] > 0.85
    assert abs(accuracy["mixed_float16"] - accuracy["float32"]) <= 0.03
    assert abs(accuracy["mixed_bfloat16"] - accuracy["float32"]) <= 0.03


def test_fit_history_validation_and_progress(demo_data, capsys):
    (x, y), _ = demo_data
    model = _demo_model("mixed_float16")
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x[:640], y[:640], batch_size=64, epochs=2, validation_split=0.25,
                        verbose=1)
    assert set(history.history) == {"loss", "accuracy", "loss_scale", "val_loss",
                                    "val_accuracy"}
    assert history.epoch == [0, 1]
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out and "loss_scale" in out
    history = model.fit(x[:128], y[:128], epochs=1, verbose=2,
                        validation_data=(x[-64:], y[-64:]))
    line = capsys.readouterr().out
    assert line.startswith("Epoch 1/1") and "val_accuracy" in line
    logs = model.evaluate(x[-64:], y[-64:], verbose=0, return_dict=True)
    assert logs["accuracy"] == pytest.approx(
        history.history["val_accuracy"][0])


def test_one_hot_targets_and_mse():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(200, 6)).astype(np.float32)
    labels = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0)
    model = mlp()
    model.compile(SGD(0.5), "categorical_crossentropy", metrics=["accuracy"])
    h = model.fit(x, np.eye(3)[labels], epochs=15, verbose=0)
    assert h.history["accuracy"][-1] > 0.8
    reg = models.Sequential([layers.Input(shape=(6,)), layers.Dense(1)])
    reg.compile(SGD(0.1), "mse")
    target = x @ np.arange(6, dtype=np.float32)[:, None] / 10
    reg.fit(x, target, epochs=30, verbose=0)
    assert reg.evaluate(x, target, verbose=0) < 1e-3


def test_frozen_layers_and_dropout_in_training():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(64, 6)).astype(np.float32)
    y = rng.integers(0, 3, 64)
    model = models.Sequential([layers.Input(shape=(6,)), layers.Dense(8, trainable=False),
                               layers.Dropout(0.5), layers.Dense(3, activation="softmax")])
    frozen = model.layers[0].get_weights()
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=2, verbose=0)
    for a, b in zip(frozen, model.layers[0].get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(model.predict(x, verbose=0), model.predict(x, verbose=0))
    assert not np.array_equal(model(x, training=True), model(x, training=True))


def test_regularization_adds_to_loss():
    x = np.ones((4, 6), np.float32)
    y = np.zeros(4, int)
    model = models.Sequential([layers.Input(shape=(6,)),
                               layers.Dense(3, kernel_regularizer="l2", activation="softmax")])
    model.compile(RecordingOptimizer(), "sparse_categorical_crossentropy")
    k = model.layers[0].kernel.copy()
    loss = model.train_on_batch(x, y)
    plain = losses.sparse_categorical_crossentropy(y, model(x))
    assert loss == pytest.approx(plain + 0.01 * float(np.sum(k.astype(np.float64) ** 2)),
                                 rel=1e-5)


# -- weights and configs ---------------------------------------------------------------------------

def test_weights_round_trip_save_load_and_get_set(tmp_path):
    model = mlp(policy="mixed_bfloat16")
    x = np.random.default_rng(1).normal(size=(10, 6)).astype(np.float32)
    expected = model.predict(x, verbose=0)
    shapes = [w.shape for w in model.get_weights()]
    assert shapes == [(6, 8), (8,), (8, 3), (3,)]          # Keras order and layout
    path = tmp_path / "w.npz"
    model.save_weights(path)
    other = mlp(policy="mixed_bfloat16")
    other.load_weights(path)
    np.testing.assert_array_equal(other.predict(x, verbose=0), expected)
    third = mlp(policy="mixed_bfloat16")
    third.set_weights(model.get_weights())
    np.testing.assert_array_equal(third.predict(x, verbose=0), expected)
    with pytest.raises(ValueError, match=r"must end in '.weights.h5'.*'.npz'"):
        model.save_weights(tmp_path / "w.txt")
    plain = tmp_path / "keras_style.npz"
    np.savez(plain, *[w.astype(np.float64) for w in model.get_weights()] * 1)
    fourth = mlp(policy="mixed_bfloat16")
    fourth.load_weights(plain)
    np.testing.assert_array_equal(fourth.predict(x, verbose=0), expected)
    with pytest.raises(ValueError, match="cannot read"):
        fourth.load_weights(tmp_path / "missing.npz")
    bigger = mlp(hidden=9)
    with pytest.raises(ValueError, match=r"has shape \(6, 8\), expected \(6, 9\)"):
        bigger.load_weights(path)


def test_set_weights_count_error_lists_expected():
    model = mlp()
    with pytest.raises(ValueError, match=r"expected 4 weight arrays \(dense.*/kernel \(6, 8\)"
                                         r".*received 3"):
        model.set_weights(model.get_weights()[:3])
    with pytest.raises(ValueError, match="not built"):
        models.Sequential([layers.Dense(2)]).set_weights([])


def test_config_round_trip_keeps_policies():
    with policy_scope("mixed_float16"):
        model = models.Sequential([layers.Input(shape=(6,)), layers.Dense(8, activation="relu"),
                                   layers.LayerNormalization(), layers.Dense(3),
                                   layers.Activation("softmax", dtype="float32")])
    config = model.get_config()
    clone = models.Sequential.from_config(config)
    assert [type(l) for l in clone.layers] == [type(l) for l in model.layers]
    assert [l.dtype_policy for l in clone.layers] == [l.dtype_policy for l in model.layers]
    clone.set_weights(model.get_weights())
    x = np.random.default_rng(3).normal(size=(5, 6))
    np.testing.assert_array_equal(clone.predict(x, verbose=0), model.predict(x, verbose=0))
    assert clone.get_config()["layers"] == config["layers"]


# -- losses ----------------------------------------------------------------------------------------

def test_losses_against_references():
    rng = np.random.default_rng(12)
    z = rng.normal(size=(5, 4))
    labels = rng.integers(0, 4, 5)
    onehot = np.eye(4)[labels]
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    ref = -np.mean(np.log(p[np.arange(5), labels]))
    assert losses.sparse_categorical_crossentropy(labels, p) == pytest.approx(ref, rel=1e-6)
    assert losses.categorical_crossentropy(onehot, p) == pytest.approx(ref, rel=1e-6)
    assert losses.sparse_categorical_crossentropy(labels, z, from_logits=True) == \
        pytest.approx(ref, rel=1e-6)
    assert losses.sparse_categorical_crossentropy(labels[:, None], p) == pytest.approx(ref,
                                                                                      rel=1e-6)
    assert losses.mean_squared_error(onehot, p) == pytest.approx(np.mean((onehot - p) ** 2))
    value, grad = losses.MeanSquaredError().value_and_grad(onehot, p)
    np.testing.assert_allclose(grad, 2 * (p - onehot) / p.size)
    # float16 predictions: the loss is taken in float32
    assert losses.categorical_crossentropy(onehot, p.astype(np.float16)) == pytest.approx(
        ref, rel=2e-3)


def test_loss_errors():
    p = np.full((3, 4), 0.25)
    with pytest.raises(ValueError, match="sparse_categorical_crossentropy"):
        losses.categorical_crossentropy(np.array([0, 1, 2]), p)
    with pytest.raises(ValueError, match="whole numbers"):
        losses.sparse_categorical_crossentropy(np.array([0.5, 1, 2]), p)
    with pytest.raises(ValueError, match="do not match"):
        losses.sparse_categorical_crossentropy(np.array([0, 1]), p)
    with pytest.raises(TypeError):
        losses.get(3)
    with pytest.raises(ValueError, match="valid names"):
        losses.get("hinge")


def test_load_plain_savez_with_many_arrays(tmp_path):
    model = models.Sequential([layers.Input(shape=(3,))] + [layers.Dense(3 + k) for k in range(6)])
    weights = model.get_weights()
    assert len(weights) == 12       # arr_10 and arr_11 must come after arr_9, not after arr_1
    np.savez(tmp_path / "w.npz", *weights)
    clone = models.Sequential([layers.Input(shape=(3,))] + [layers.Dense(3 + k) for k in range(6)])
    clone.load_weights(tmp_path / "w.npz")
    for a, b in zip(weights, clone.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_fit_argument_errors():
    model = mlp()
    model.compile("sgd", "sparse_categorical_crossentropy")
    x, y = np.ones((10, 6), np.float32), np.zeros(10, int)
    with pytest.raises(ValueError, match="validation_split"):
        model.fit(x, y, validation_split=1.5, verbose=0)
    with pytest.raises(ValueError, match="leaves no"):
        model.fit(x[:1], y[:1], validation_split=0.5, verbose=0)
    with pytest.raises(ValueError, match="epochs"):
        model.fit(x, y, epochs=-1, verbose=0)
    with pytest.raises(ValueError, match="validation_data"):
        model.fit(x, y, validation_data=(x,), verbose=0)
    with pytest.raises(ValueError, match="expected input of shape"):
        model.fit(x, y, validation_data=(np.ones((4, 5)), y[:4]), verbose=0)
    with pytest.raises(TypeError, match="batch_size"):
        model.fit(x, y, batch_size=2.5, verbose=0)
    with pytest.raises(ValueError, match="Input layer may only come first"):
        models.Sequential([layers.Dense(2), layers.Input(shape=(3,))])


def test_infer_policy_layers_in_a_model():
    from mixedcore import experimental
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        infer = experimental.Policy("infer")
    model = models.Sequential([layers.Input(shape=(4,)), layers.Dense(3, dtype=infer),
                               layers.Dense(2, dtype=infer)])
    assert not model.built                       # waits for the first input's dtype
    out = model(np.ones((2, 4), np.float64))
    assert out.dtype == np.float64 and model.built
    assert [l.compute_dtype for l in model.layers] == ["float64", "float64"]


def test_keras_layout_weights_give_the_keras_function():
    """Arrays in Keras's layout (kernel (in, out), bias (out,)) compute x @ kernel + bias."""
    rng = np.random.default_rng(21)
    w1, b1 = rng.normal(size=(6, 8)) * 0.5, rng.normal(size=8)
    w2, b2 = rng.normal(size=(8, 3)) * 0.5, rng.normal(size=3)
    x = rng.normal(size=(12, 6))
    z = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    ref = np.exp(z - z.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    for policy, tol in (("float32", 1e-5), ("mixed_bfloat16", 5e-2), ("mixed_float16", 1e-2)):
        model = mlp(policy=policy)
        model.set_weights([w1, b1, w2, b2])           # float64 arrays, as Keras exports them
        np.testing.assert_allclose(model.predict(x, verbose=0), ref, atol=tol)


def _tiny_compiled():
    model = models.Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_fit_and_evaluate_refuse_empty_data():
    model = _tiny_compiled()
    empty_x, empty_y = np.zeros((0, 3), np.float32), np.zeros((0, 2), np.float32)
    with pytest.raises(ValueError, match="fit: the input data is empty"):
        model.fit(empty_x, empty_y, verbose=0)
    with pytest.raises(ValueError, match="evaluate: the input data is empty"):
        model.evaluate(empty_x, empty_y, verbose=0)
    assert model.predict(empty_x, verbose=0).shape == (0, 2)


def test_progress_redirected_is_one_line_per_epoch(capsys):
    model = _tiny_compiled()
    x, y = np.ones((64, 3), np.float32), np.zeros((64, 2), np.float32)
    model.fit(x, y, epochs=3, batch_size=4, verbose=1)       # stdout is captured: no terminal
    out = capsys.readouterr().out
    assert "\r" not in out
    lines = out.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith(f"Epoch {k + 1}/3 - ")
                                   for k, line in enumerate(lines))
    with pytest.raises(ValueError, match="fit: verbose must be"):
        model.fit(x, y, verbose=3)


@pytest.mark.parametrize("t_shape,p_shape", [((4,), (4, 1)), ((4, 1), (4,)), ((4, 3), (4, 3))])
def test_mean_squared_error_matches_ranks_as_keras(t_shape, p_shape):
    from mixedcore import losses
    rng = np.random.default_rng(0)
    t = rng.normal(size=t_shape)
    p = rng.normal(size=p_shape).astype(np.float32)
    value, grad = losses.MeanSquaredError().value_and_grad(t, p)
    expected = np.mean((t.reshape(-1) - p.reshape(-1).astype(np.float64)) ** 2)
    assert value == pytest.approx(expected, rel=1e-6)
    assert grad.shape == p.shape
    with pytest.raises(ValueError, match="does not match"):
        losses.mean_squared_error(np.zeros((4, 2)), np.zeros((4, 3), np.float32))


def test_dtype_policy_is_settable_as_in_keras3():
    dense = layers.Dense(3)
    dense.dtype_policy = "mixed_bfloat16"
    assert dense.compute_dtype == "bfloat16" and dense.variable_dtype == "float32"
    y = dense(np.ones((2, 4), np.float32))
    assert y.dtype.name == "bfloat16" and dense.kernel.dtype == np.float32
    dense.dtype_policy = "float32"                      # same variable dtype: allowed built
    assert dense(np.ones((2, 4), np.float32)).dtype == np.float32
    with pytest.raises(ValueError, match="can only be set before the layer is built"):
        dense.dtype_policy = "float16"
    with pytest.raises(ValueError, match="Cannot convert 'mixed_float8'"):
        dense.dtype_policy = "mixed_float8"


def test_compile_takes_keras3_arguments_in_keras3_order():
    import mixedcore
    with mixedcore.policy_scope("mixed_float16"):
        model = models.Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile("sgd", "mse", [0.5], ["mae"])                 # loss_weights, then metrics
    assert type(model.optimizer).__name__ == "LossScaleOptimizer"
    logs = model.evaluate(np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32), verbose=0,
                          return_dict=True)
    assert set(logs) == {"loss", "mae"}
    model.compile("sgd", "mse", auto_scale_loss=False, run_eagerly=True, jit_compile=False,
                  steps_per_execution=4)
    assert type(model.optimizer).__name__ == "SGD"
    with pytest.raises(TypeError, match="metrics is compile's fourth argument"):
        model.compile("sgd", "mse", ["accuracy"])
    with pytest.raises(ValueError, match="weighted_metrics"):
        model.compile("sgd", "mse", weighted_metrics=["mae"])
    with pytest.raises(TypeError, match="auto_scale_loss must be a bool"):
        model.compile("sgd", "mse", auto_scale_loss="yes")
    with pytest.raises(ValueError, match="steps_per_execution"):
        model.compile("sgd", "mse", steps_per_execution=0)


@pytest.mark.parametrize("n_features", [1, 5, 11, 12, 13])
def test_load_demo_any_feature_count(n_features):
    """Fewer than 12 features use the whole space for the centres; the shapes and labels hold."""
    (x, y), (xt, yt) = datasets.load_demo(n_train=50, n_test=20, n_features=n_features,
                                          n_classes=3, seed=1)
    assert x.shape == (50, n_features) and xt.shape == (20, n_features)
    assert x.dtype == np.float32 and y.dtype == np.int64 and set(y) <= {0, 1, 2}
    assert np.isfinite(x).all()


def test_load_demo_bad_arguments():
    with pytest.raises(ValueError, match=r"load_demo: n_features must be a positive int, got 0"):
        datasets.load_demo(n_features=0)
    with pytest.raises(ValueError, match=r"load_demo: n_classes must be >= 2, got 1"):
        datasets.load_demo(n_classes=1)
