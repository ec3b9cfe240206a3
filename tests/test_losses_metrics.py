"""BinaryCrossentropy, MeanAbsoluteError, Huber, KLDivergence and the metrics mae, mse,
binary_accuracy, top_k_categorical_accuracy: values and gradients against Keras 3 and finite
differences, names, compile, saving, errors."""
import warnings

import numpy as np
import pytest

from gradcheck import numeric_grad
from mixedcore import layers, losses, metrics, models, optimizers


def _data(kind, shape=(4, 3), seed=0, dtype=np.float64):
    """(y_true, y_pred) suited to a loss, away from clips and kinks."""
    rng = np.random.default_rng(seed)
    if kind == "probs":           # binary labels, probabilities in (0.05, 0.95)
        y = rng.integers(0, 2, shape).astype(dtype)
        p = rng.uniform(0.05, 0.95, shape).astype(dtype)
    elif kind == "soft":           # soft labels, logits
        y = rng.uniform(0, 1, shape).astype(dtype)
        p = rng.normal(scale=3.0, size=shape).astype(dtype)
    elif kind == "dist":           # two distributions over the last axis
        a = rng.uniform(0.1, 1, shape)
        b = rng.uniform(0.1, 1, shape)
        y = (a / a.sum(-1, keepdims=True)).astype(dtype)
        p = (b / b.sum(-1, keepdims=True)).astype(dtype)
    else:                          # regression
        y = rng.normal(size=shape).astype(dtype)
        p = (y + rng.normal(scale=1.5, size=shape)).astype(dtype)
    return y, p


CASES = [
    ("BinaryCrossentropy", {}, "probs"),
    ("BinaryCrossentropy", {"label_smoothing": 0.2}, "probs"),
    ("BinaryCrossentropy", {"from_logits": True}, "soft"),
    ("BinaryCrossentropy", {"from_logits": True, "label_smoothing": 0.1}, "probs"),
    ("MeanAbsoluteError", {}, "reg"),
    ("Huber", {}, "reg"),
    ("Huber", {"delta": 0.4}, "reg"),
    ("KLDivergence", {}, "dist"),
]


@pytest.mark.parametrize("cls,kwargs,kind", CASES)
def test_gradients_match_finite_differences(cls, kwargs, kind):
    loss = getattr(losses, cls)(**kwargs)
    y, p = _data(kind, seed=1)
    value, grad = loss.value_and_grad(y, p)
    assert grad.dtype == np.float64 and grad.shape == p.shape
    assert value == pytest.approx(loss(y, p), rel=0, abs=0)
    np.testing.assert_allclose(grad, numeric_grad(lambda: loss(y, p), p), rtol=1e-5, atol=1e-9)


@pytest.mark.keras
@pytest.mark.parametrize("cls,kwargs,kind", CASES)
@pytest.mark.parametrize("shape", [(5, 3), (6, 1), (2, 3, 4)])
def test_values_and_gradients_match_keras(keras, cls, kwargs, kind, shape):
    import torch
    y, p = _data(kind, shape=shape, seed=2, dtype=np.float32)
    yp = torch.tensor(p, requires_grad=True)
    kloss = getattr(keras.losses, cls)(**kwargs)(torch.tensor(y), yp)
    kloss.backward()
    value, grad = getattr(losses, cls)(**kwargs).value_and_grad(y, p)
    assert grad.dtype == np.float32
    assert value == pytest.approx(float(kloss.detach()), rel=2e-6, abs=1e-7)
    np.testing.assert_allclose(grad, yp.grad.numpy(), rtol=2e-5, atol=1e-8)


@pytest.mark.keras
@pytest.mark.parametrize("cls,kwargs", [("BinaryCrossentropy", {}), ("KLDivergence", {})])
def test_clipped_values_match_keras(keras, cls, kwargs):
    """Predictions at and beyond the clip range: Keras's values, zero gradient outside."""
    import torch
    y = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.5, 1.0]], np.float32)
    p = np.array([[0.0, 1.0, 1e-9, 0.3], [1e-12, 0.999, 0.5, 0.2]], np.float32)
    yp = torch.tensor(p, requires_grad=True)
    kloss = getattr(keras.losses, cls)(**kwargs)(torch.tensor(y), yp)
    kloss.backward()
    value, grad = getattr(losses, cls)(**kwargs).value_and_grad(y, p)
    assert value == pytest.approx(float(kloss.detach()), rel=2e-6)
    outside = (p < 1e-7) | (p > 1)
    assert np.all(grad[outside] == 0)
    np.testing.assert_allclose(grad[~outside], yp.grad.numpy()[~outside], rtol=2e-5)


def test_binary_crossentropy_from_logits_is_stable():
    z = np.array([[-200.0, 200.0, 0.0]], np.float32)
    y = np.array([[0.0, 1.0, 1.0]], np.float32)
    value, grad = losses.BinaryCrossentropy(from_logits=True).value_and_grad(y, z)
    assert value == pytest.approx(np.log(2) / 3, rel=1e-6)
    np.testing.assert_allclose(grad, [[0.0, 0.0, -0.5 / 3]], atol=1e-12)
    value, _ = losses.BinaryCrossentropy(from_logits=True).value_and_grad(1 - y, z)
    assert value == pytest.approx((200 + 200 + np.log(2)) / 3, rel=1e-6)


def test_reductions_and_rank_rule():
    y = np.array([0.0, 1.0, 2.0, 3.0])
    p = np.array([[0.5], [1.0], [4.0], [3.0]])
    assert losses.mae(y, p) == pytest.approx(2.5 / 4)
    assert losses.mean_absolute_error(p, y) == pytest.approx(2.5 / 4)
    # Huber delta 1: 0.125, 0, 2 - 0.5, 0
    assert losses.huber(y, p) == pytest.approx(1.625 / 4)
    assert losses.huber(y, p, delta=3.0) == pytest.approx((0.125 + 2.0) / 4)
    # KL divergence sums over the last axis and averages the samples
    t = np.array([[0.5, 0.5], [1.0, 0.0]])
    q = np.array([[0.25, 0.75], [0.5, 0.5]])
    per_sample = [0.5 * np.log(2) + 0.5 * np.log(0.5 / 0.75),
                  np.log(2) + 1e-7 * np.log(1e-7 / 0.5)]       # y_true 0 is clipped to 1e-7
    assert losses.kld(t, q) == pytest.approx(np.mean(per_sample), rel=1e-6)
    assert losses.binary_crossentropy([1.0, 0.0], [0.75, 0.5]) == pytest.approx(
        -(np.log(0.75) + np.log(0.5)) / 2, rel=1e-6)


def test_float16_inputs_work_in_float32():
    y, p = _data("reg", dtype=np.float16)
    for cls in (losses.MeanAbsoluteError, losses.Huber, losses.BinaryCrossentropy,
                losses.KLDivergence):
        _, grad = cls().value_and_grad(np.clip(y, 0, 1), np.clip(p, 0.01, 0.99))
        assert grad.dtype == np.float32


LOSS_NAMES = {
    "binary_crossentropy": losses.BinaryCrossentropy, "BinaryCrossentropy":
    losses.BinaryCrossentropy, "bce": losses.BinaryCrossentropy,
    "mae": losses.MeanAbsoluteError, "mean_absolute_error": losses.MeanAbsoluteError,
    "MeanAbsoluteError": losses.MeanAbsoluteError, "huber": losses.Huber,
    "Huber": losses.Huber, "kld": losses.KLDivergence, "kl_divergence": losses.KLDivergence,
    "KLDivergence": losses.KLDivergence, "MSE": losses.MeanSquaredError,
}


@pytest.mark.parametrize("name", sorted(LOSS_NAMES))
def test_loss_names(name):
    assert type(losses.get(name)) is LOSS_NAMES[name]


@pytest.mark.keras
def test_keras_accepts_the_same_loss_names(keras):
    for name in LOSS_NAMES:
        assert keras.losses.get(name) is not None


@pytest.mark.keras
@pytest.mark.parametrize("cls,kwargs", [("BinaryCrossentropy", {"label_smoothing": 0.1}),
                                        ("Huber", {"delta": 2.0}), ("KLDivergence", {}),
                                        ("MeanAbsoluteError", {})])
def test_names_and_configs_match_keras(keras, cls, kwargs):
    mine, theirs = getattr(losses, cls)(**kwargs), getattr(keras.losses, cls)(**kwargs)
    assert mine.name == theirs.name
    kconf = theirs.get_config()
    for key, value in mine.get_config().items():
        if key != "delta":                  # Keras 3 leaves Huber's delta out of its config
            assert kconf[key] == value, key
    # Keras reads mixedcore's config (delta included)
    assert getattr(keras.losses, cls).from_config(mine.get_config()).name == mine.name
    # a Keras-style config (with its reduction and axis) loads through load_model's reader
    from mixedcore.trainers.compile_state import _loss_from_config
    again = _loss_from_config({"class_name": cls, "config": dict(kconf, **mine.get_config())})
    assert type(again) is type(mine) and again.get_config() == mine.get_config()


@pytest.mark.parametrize("make, error, match", [
    (lambda: losses.Huber(delta=-1.0), ValueError, "Huber: delta"),
    (lambda: losses.Huber(delta="big"), TypeError, "Huber: delta"),
    (lambda: losses.BinaryCrossentropy(label_smoothing=1.5), ValueError, "label_smoothing"),
    (lambda: losses.BinaryCrossentropy(from_logits="no"), TypeError, "from_logits"),
    (lambda: losses.mae(np.ones((2, 3)), np.ones((3, 2))), ValueError,
     "mean_absolute_error: y_true shape"),
    (lambda: losses.kld(np.ones(3), np.array(["a", "b", "c"])), TypeError, "kl_divergence"),
    (lambda: losses.binary_crossentropy(np.ones(4), np.ones(3)), ValueError,
     "binary_crossentropy: y_true shape"),
    (lambda: losses.get("hinge"), ValueError, "valid names"),
])
def test_loss_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


# -- metrics ------------------------------------------------------------------------------------

def test_metric_values():
    y = np.array([[1.0], [2.0], [0.0]])
    p = np.array([1.5, 2.0, -1.0])
    assert metrics.mae(y, p) == pytest.approx(0.5)
    assert metrics.mse(y, p) == pytest.approx(1.25 / 3)
    assert metrics.binary_accuracy([1, 0, 1, 0], [0.9, 0.6, 0.4, 0.1]) == 0.5
    onehot = np.eye(6)[[0, 1, 2]]
    scores = np.array([[0.9, 0.5, 0.4, 0.3, 0.2, 0.1],      # rank 1: hit
                       [0.9, 0.0, 0.4, 0.3, 0.2, 0.1],      # rank 6: miss
                       [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]])     # rank 4: hit for k=5, miss k=3
    assert metrics.top_k_categorical_accuracy(onehot, scores) == pytest.approx(2 / 3)
    assert metrics.top_k_categorical_accuracy(onehot, scores, k=3) == pytest.approx(1 / 3)
    assert metrics.top_k_categorical_accuracy(onehot, scores, k=6) == 1.0
    ties = np.array([[0.5, 0.5, 0.5, 0.5, 0.5, 0.5]])
    assert metrics.top_k_categorical_accuracy(np.eye(6)[[5]], ties, k=1) == 1.0


@pytest.mark.keras
def test_metrics_match_keras(keras):
    rng = np.random.default_rng(5)
    y_reg, p_reg = _data("reg", shape=(8, 3), seed=6, dtype=np.float32)
    for name, fn in (("mae", metrics.mae), ("mse", metrics.mse)):
        k = keras.metrics.get(name)
        k.update_state(y_reg, p_reg)
        assert fn(y_reg, p_reg) == pytest.approx(float(k.result()), rel=1e-6)
    labels = rng.integers(0, 10, 40)
    scores = rng.normal(size=(40, 10)).astype(np.float32)
    for k in (1, 3, 5):
        km = keras.metrics.TopKCategoricalAccuracy(k=k)
        km.update_state(np.eye(10)[labels], scores)
        assert metrics.top_k_categorical_accuracy(np.eye(10)[labels], scores, k=k) == \
            pytest.approx(float(km.result()))
    yb = rng.integers(0, 2, (30, 1)).astype(np.float32)
    pb = rng.uniform(size=(30, 1)).astype(np.float32)
    kb = keras.metrics.BinaryAccuracy()
    kb.update_state(yb, pb)
    assert metrics.binary_accuracy(yb, pb) == pytest.approx(float(kb.result()))


def test_metric_get():
    for name, fn in (("mae", metrics.mae), ("mean_absolute_error", metrics.mae),
                     ("mse", metrics.mse), ("mean_squared_error", metrics.mse),
                     ("binary_accuracy", metrics.binary_accuracy),
                     ("top_k_categorical_accuracy", metrics.top_k_categorical_accuracy)):
        assert metrics.get(name) == (name, fn)
    assert metrics.get("accuracy", losses.BinaryCrossentropy(), (None, 3)) == \
        ("accuracy", metrics.binary_accuracy)
    with pytest.raises(ValueError, match="unknown metric 'auc'"):
        metrics.get("auc")
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        metrics.top_k_categorical_accuracy(np.eye(3), np.eye(3), k=0)
    with pytest.raises(ValueError, match="one-hot labels"):
        metrics.top_k_categorical_accuracy(np.array([0, 1, 2]), np.eye(3))


# -- in models ----------------------------------------------------------------------------------

def _binary_model():
    return models.Sequential([layers.Input(shape=(4,)), layers.Dense(8, activation="relu"),
                              layers.Dense(1, activation="sigmoid")])


def test_compile_with_new_losses_metrics_and_default_optimizer():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(32, 4)).astype(np.float32)
    y = (x[:, :1] + x[:, 1:2] > 0).astype(np.float32)
    model = _binary_model()
    model.compile(loss="binary_crossentropy", metrics=["accuracy", "mae", "mse"])
    assert isinstance(model.optimizer, optimizers.RMSprop)
    history = model.fit(x, y, epochs=3, batch_size=8, verbose=0)
    assert set(history.history) >= {"loss", "accuracy", "mae", "mse"}
    assert history.history["loss"][-1] < history.history["loss"][0]
    logs = model.evaluate(x, y, verbose=0, return_dict=True)
    p = model.predict(x, verbose=0)
    assert logs["mae"] == pytest.approx(metrics.mae(y, p), rel=1e-5)
    assert logs["accuracy"] == pytest.approx(metrics.binary_accuracy(y, p))
    for loss in ("mae", "huber", losses.Huber(delta=0.5), "kld"):
        model.compile(optimizers.Adagrad(0.1), loss=loss)
        model.train_on_batch(x, y)


def test_model_gradient_through_binary_crossentropy_matches_finite_differences():
    from mixedcore import policy_scope

    class Recording(optimizers.SGD):
        def apply_gradients(self, grads_and_vars):
            self.grads = [np.array(g) for g, _ in grads_and_vars]
            return super().apply_gradients(grads_and_vars)

    rng = np.random.default_rng(4)
    with policy_scope("float64"):
        model = _binary_model()
    x = rng.normal(size=(6, 4))
    y = rng.integers(0, 2, (6, 1)).astype(np.float64)
    model.compile(Recording(learning_rate=0.0), "binary_crossentropy")
    model.train_on_batch(x, y)
    loss = losses.BinaryCrossentropy()
    for w, g in zip(model.trainable_weights, model.optimizer.grads):
        def f():
            for layer in model.layers:
                layer.weights_updated()
            return loss(y, model(x))
        np.testing.assert_allclose(g, numeric_grad(f, w), rtol=1e-5, atol=1e-8)


def test_saved_loss_keeps_its_settings(tmp_path):
    model = _binary_model()
    model.compile(optimizers.Nadam(learning_rate=optimizers.schedules.ExponentialDecay(
        0.01, 10, 0.9)), loss=losses.Huber(delta=0.25), metrics=["mae"])
    path = tmp_path / "m.keras"
    model.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = models.load_model(path)
    assert isinstance(loaded.loss, losses.Huber) and loaded.loss.delta == 0.25
    assert isinstance(loaded.optimizer, optimizers.Nadam)
    assert loaded.optimizer.learning_rate.get_config() == \
        model.optimizer.learning_rate.get_config()
    assert loaded._metric_ids == ["mae"]


@pytest.mark.keras
def test_keras_file_with_schedule_and_new_loss_loads(keras, tmp_path):
    kmodel = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3, activation="relu"),
                               keras.layers.Dense(1, activation="sigmoid")])
    sched = keras.optimizers.schedules.CosineDecay(0.01, decay_steps=50, alpha=0.1,
                                                   warmup_target=0.02, warmup_steps=5)
    kmodel.compile(optimizer=keras.optimizers.RMSprop(learning_rate=sched, momentum=0.5),
                   loss=keras.losses.BinaryCrossentropy(label_smoothing=0.1),
                   metrics=["mae", "binary_accuracy"])
    kmodel.save(tmp_path / "k.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = models.load_model(tmp_path / "k.keras")
    assert isinstance(model.optimizer, optimizers.RMSprop) and model.optimizer.momentum == 0.5
    assert model.optimizer.learning_rate.get_config() == sched.get_config()
    assert isinstance(model.loss, losses.BinaryCrossentropy)
    assert model.loss.label_smoothing == pytest.approx(0.1)
    assert model._metric_ids == ["mae", "binary_accuracy"]
    x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    y = (x[:, :1] > 0).astype(np.float32)
    # loss, mae, binary_accuracy
    assert model.evaluate(x, y, verbose=0) == pytest.approx(kmodel.evaluate(x, y, verbose=0),
                                                            rel=1e-5)


@pytest.mark.keras
def test_mixedcore_file_with_schedule_and_huber_loads_in_keras(keras, tmp_path):
    model = _binary_model()
    sched = optimizers.schedules.PiecewiseConstantDecay([10, 20], [0.01, 0.005, 0.001])
    model.compile(optimizers.Nadam(learning_rate=sched), loss=losses.Huber(delta=0.3),
                  metrics=["top_k_categorical_accuracy", "mse"])
    model.save(tmp_path / "m.keras")
    again = keras.models.load_model(tmp_path / "m.keras")
    assert type(again.optimizer).__name__ == "Nadam"
    assert again.optimizer.get_config()["learning_rate"]["config"] == sched.get_config()
    assert type(again.loss).__name__ == "Huber"


@pytest.mark.parametrize("loss", [losses.BinaryCrossentropy(), losses.BinaryCrossentropy(
    from_logits=True), losses.MeanAbsoluteError(), losses.Huber(0.3), losses.KLDivergence()])
def test_sample_weights_weigh_each_sample_as_keras(loss):
    """Keras's "sum_over_batch_size": each sample's loss times its weight, summed, divided by the
    number of samples; the gradient is weighted the same way."""
    rng = np.random.default_rng(5)
    yt = rng.uniform(size=(6, 3)).astype(np.float32)
    yp = rng.uniform(0.05, 0.95, size=(6, 3)).astype(np.float32)
    w = rng.uniform(size=6).astype(np.float32)
    value, grad = loss.value_and_grad(yt, yp, w)
    per = np.array([loss(yt[i:i + 1], yp[i:i + 1]) for i in range(6)])
    assert value == pytest.approx(float((per * w).mean()), rel=1e-5)
    _, plain = loss.value_and_grad(yt, yp)
    np.testing.assert_allclose(grad, plain * w[:, None], rtol=1e-6)
    with pytest.raises(ValueError, match="sample_weight of shape"):
        loss.value_and_grad(yt, yp, np.ones(5, np.float32))
