"""fit / evaluate / predict arguments: sample_weight, class_weight, steps_per_epoch,
initial_epoch, datasets and generators of batches; utils.to_categorical, get_layer and the
top-level Model / Sequential."""
import numpy as np
import pytest

import mixedcore
from mixedcore import callbacks, layers, losses


def _data(n=24, seed=1, classes=3):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, classes, n),
            rng.uniform(0.0, 2.0, n).astype(np.float32))


def _model(loss="sparse_categorical_crossentropy", activation="softmax", seed=0, lr=0.1):
    mixedcore.utils.set_random_seed(seed)
    model = mixedcore.Sequential([layers.Input(shape=(4,)),
                                  layers.Dense(3, activation=activation)])
    model.compile(mixedcore.optimizers.SGD(learning_rate=lr), loss)
    return model


# -- losses with sample weights -----------------------------------------------------------------
@pytest.mark.parametrize("loss", [losses.SparseCategoricalCrossentropy(),
                                  losses.SparseCategoricalCrossentropy(from_logits=True),
                                  losses.CategoricalCrossentropy(),
                                  losses.MeanSquaredError()])
def test_weighted_loss_is_the_weighted_sum_over_the_batch_size(loss):
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((6, 3)).astype(np.float32)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    pred = logits if getattr(loss, "from_logits", False) else p
    labels = rng.integers(0, 3, 6)
    y = labels if isinstance(loss, losses.SparseCategoricalCrossentropy) else np.eye(3)[labels]
    w = rng.uniform(0, 2, 6).astype(np.float32)
    per_sample = [loss(y[i:i + 1], pred[i:i + 1]) for i in range(6)]
    assert loss(y, pred, sample_weight=w) == pytest.approx(float(np.dot(per_sample, w)) / 6,
                                                           rel=1e-5)
    # the gradient is the weighted one: weights of ones give the plain gradient
    v1, g1 = loss.value_and_grad(y, pred, np.ones(6))
    v0, g0 = loss.value_and_grad(y, pred)
    assert v1 == pytest.approx(v0, rel=1e-6)
    np.testing.assert_allclose(g1, g0, rtol=1e-6)
    _, gw = loss.value_and_grad(y, pred, w)
    np.testing.assert_allclose(gw, g0 * w[:, None], rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="sample_weight of shape \\(5,\\) does not match"):
        loss(y, pred, sample_weight=w[:5])


def _keras_twin(keras, model, loss):
    kmodel = keras.Sequential([keras.Input(shape=(4,)),
                               keras.layers.Dense(3, activation=model.layers[-1].activation
                                                  .__name__ if callable(
                                                      model.layers[-1].activation) else
                                                  model.layers[-1].get_config()["activation"])])
    kmodel.set_weights(model.get_weights())
    kmodel.compile(keras.optimizers.SGD(learning_rate=0.1), loss)
    return kmodel


@pytest.mark.keras
@pytest.mark.parametrize("loss, activation", [("sparse_categorical_crossentropy", "softmax"),
                                              ("mean_squared_error", "linear")])
def test_sample_weight_loss_and_step_match_keras(keras, loss, activation):
    x, y, w = _data()
    model = _model(loss, activation)
    kmodel = _keras_twin(keras, model, loss)
    target = y if loss.startswith("sparse") else np.eye(3, dtype=np.float32)[y]
    ours = model.evaluate(x, target, batch_size=8, sample_weight=w, verbose=0)
    theirs = kmodel.evaluate(x, target, batch_size=8, sample_weight=w, verbose=0)
    assert ours == pytest.approx(theirs, rel=1e-5)
    # one epoch of full-batch steps with the weights: the same trained weights
    h = model.fit(x, target, batch_size=24, epochs=2, sample_weight=w, shuffle=False, verbose=0)
    kh = kmodel.fit(x, target, batch_size=24, epochs=2, sample_weight=w, shuffle=False,
                    verbose=0)
    np.testing.assert_allclose(h.history["loss"], kh.history["loss"], rtol=1e-5)
    for a, b in zip(model.get_weights(), kmodel.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.keras
def test_class_weight_matches_keras(keras):
    x, y, _ = _data()
    cw = {0: 0.5, 1: 2.0}     # class 2 missing: weight 1
    model = _model()
    kmodel = _keras_twin(keras, model, "sparse_categorical_crossentropy")
    h = model.fit(x, y, batch_size=24, epochs=2, class_weight=cw, shuffle=False, verbose=0)
    kh = kmodel.fit(x, y, batch_size=24, epochs=2, class_weight=cw, shuffle=False, verbose=0)
    np.testing.assert_allclose(h.history["loss"], kh.history["loss"], rtol=1e-5)
    for a, b in zip(model.get_weights(), kmodel.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_class_weight_is_sample_weight_from_the_labels():
    x, y, _ = _data()
    cw = {0: 0.5, 1: 2.0, 2: 3.0}
    w = np.array([cw[int(k)] for k in y], np.float32)
    a, b = _model(), _model()
    a.fit(x, y, batch_size=8, epochs=2, class_weight=cw, shuffle=False, verbose=0)
    b.fit(x, y, batch_size=8, epochs=2, sample_weight=w, shuffle=False, verbose=0)
    for p, q in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(p, q)
    # one-hot targets use the argmax
    c = _model("categorical_crossentropy")
    c.fit(x, np.eye(3, dtype=np.float32)[y], batch_size=8, epochs=2, class_weight=cw,
          shuffle=False, verbose=0)
    for p, q in zip(c.get_weights(), b.get_weights()):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-7)


def test_sample_weight_errors():
    x, y, w = _data()
    model = _model()
    with pytest.raises(ValueError, match="fit: give sample_weight or class_weight, not both"):
        model.fit(x, y, sample_weight=w, class_weight={0: 1.0}, verbose=0)
    with pytest.raises(ValueError, match="fit: sample_weight of shape \\(5,\\) does not match "
                                         "the 24 samples"):
        model.fit(x, y, sample_weight=w[:5], verbose=0)
    with pytest.raises(TypeError, match="fit: class_weight must be a dict"):
        model.fit(x, y, class_weight=[1.0, 2.0], verbose=0)
    with pytest.raises(TypeError, match="fit: class_weight keys must be class indices"):
        model.fit(x, y, class_weight={"a": 1.0}, verbose=0)
    with pytest.raises(ValueError, match="evaluate: sample_weight of shape"):
        model.evaluate(x, y, sample_weight=w[:3], verbose=0)


# -- datasets and generators ----------------------------------------------------------------------
class Dataset:
    """Sequence-like, as Keras's PyDataset: batches by index, on_epoch_end after each epoch."""

    def __init__(self, x, y, w=None, batch_size=8):
        self.x, self.y, self.w, self.batch_size = x, y, w, batch_size
        self.epochs_ended = 0

    def __len__(self):
        return -(-len(self.x) // self.batch_size)

    def __getitem__(self, i):
        s = slice(i * self.batch_size, (i + 1) * self.batch_size)
        if self.w is None:
            return self.x[s], self.y[s]
        return self.x[s], self.y[s], self.w[s]

    def on_epoch_end(self):
        self.epochs_ended += 1


def test_dataset_input_equals_arrays_unshuffled():
    x, y, w = _data()
    a, b = _model(), _model()
    data = Dataset(x, y, w)
    ha = a.fit(data, epochs=3, shuffle=False, verbose=0)
    hb = b.fit(x, y, batch_size=8, epochs=3, sample_weight=w, shuffle=False, verbose=0)
    assert data.epochs_ended == 3
    assert ha.history == hb.history
    for p, q in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(p, q)
    assert a.evaluate(Dataset(x, y, w), verbose=0) == b.evaluate(x, y, batch_size=8,
                                                                 sample_weight=w, verbose=0)
    np.testing.assert_array_equal(a.predict(Dataset(x, y), verbose=0),
                                  a.predict(x, batch_size=8, verbose=0))
    # steps_per_epoch takes fewer batches; the next epoch starts a new pass
    seen = []
    a.fit(Dataset(x, y), epochs=2, steps_per_epoch=2, verbose=0, callbacks=[
        callbacks.LambdaCallback(on_train_batch_end=lambda b_, logs: seen.append(b_))])
    assert seen == [0, 1, 0, 1]
    # as validation data
    h = a.fit(x, y, epochs=1, verbose=0, validation_data=Dataset(x, y))
    assert h.history["val_loss"][0] == a.evaluate(x, y, batch_size=8, verbose=0)


@pytest.mark.keras
def test_pydataset_of_keras_is_accepted(keras):
    x, y, _ = _data()

    class KData(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()
            self.ended = 0

        def __len__(self):
            return 3

        def __getitem__(self, i):
            return x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]

        def on_epoch_end(self):
            self.ended += 1

    data = KData()
    model = _model()
    history = model.fit(data, epochs=2, verbose=0)
    assert data.ended == 2 and len(history.history["loss"]) == 2


def test_generator_input_with_steps_per_epoch_continues_across_epochs():
    x, y, w = _data()
    drawn = []

    def batches():
        for i in range(6):
            drawn.append(i)
            s = slice((i % 3) * 8, (i % 3 + 1) * 8)
            yield x[s], y[s], w[s]
    a, b = _model(), _model()
    ha = a.fit(batches(), steps_per_epoch=3, epochs=2, verbose=0)
    hb = b.fit(x, y, batch_size=8, epochs=2, sample_weight=w, shuffle=False, verbose=0)
    assert drawn == [0, 1, 2, 3, 4, 5]
    np.testing.assert_allclose(ha.history["loss"], hb.history["loss"], rtol=1e-12)
    # a generator that runs out ends training with a warning
    with pytest.warns(UserWarning, match="fit: the input ran out of data"):
        h = a.fit(batches(), steps_per_epoch=4, epochs=3, verbose=0)
    assert h.epoch == [0, 1]      # the second epoch got 2 of its 4 batches
    # without steps_per_epoch one epoch is the whole generator
    gen = ((x[i:i + 8], y[i:i + 8]) for i in range(0, 24, 8))
    with pytest.warns(UserWarning, match="ran out of data"):
        h = a.fit(gen, epochs=2, verbose=0)
    assert h.epoch == [0]
    # a re-iterable (a list of batches is arrays, so use an iterable object) restarts each epoch
    class Batches:
        def __iter__(self):
            return ((x[i:i + 8], y[i:i + 8]) for i in range(0, 24, 8))
    h = a.fit(Batches(), epochs=3, verbose=0)
    assert h.epoch == [0, 1, 2]


def test_dataset_errors():
    x, y, _ = _data()
    model = _model()
    with pytest.raises(ValueError, match="fit: when x is a dataset or generator, y and "
                                         "sample_weight come from its batches"):
        model.fit(Dataset(x, y), y, verbose=0)
    with pytest.raises(ValueError, match="fit: the dataset's batches must hold targets"):
        model.fit(iter([x[:8]]), verbose=0)
    with pytest.raises(ValueError, match="class_weight is not supported for generator inputs"):
        model.fit(iter([(x, y)]), class_weight={0: 2.0}, verbose=0)
    with pytest.raises(ValueError, match="fit: steps must be a positive int or None, got 0"):
        model.fit(Dataset(x, y), steps_per_epoch=0, verbose=0)
    with pytest.raises(ValueError, match="validation_split needs arrays"):
        model.fit(Dataset(x, y), validation_split=0.5, verbose=0)
    with pytest.raises(ValueError, match="a batch must be x, \\(x,\\), \\(x, y\\) or"):
        model.fit(iter([(x, y, y, y)]), verbose=0)


def test_initial_epoch_and_steps_per_epoch_with_arrays():
    x, y, _ = _data()
    model = _model()
    seen = []
    h = model.fit(x, y, batch_size=8, epochs=4, initial_epoch=2, steps_per_epoch=2, verbose=0,
                  callbacks=[callbacks.LambdaCallback(
                      on_epoch_begin=lambda e, logs: seen.append(e))])
    assert seen == [2, 3] and h.epoch == [2, 3]
    assert h.params["steps"] == 2


def test_train_and_test_on_batch_take_sample_weight():
    x, y, w = _data()
    a, b = _model(), _model()
    la = a.train_on_batch(x, y, sample_weight=w)
    lb = b.fit(x, y, batch_size=24, sample_weight=w, shuffle=False, verbose=0).history["loss"][0]
    assert la == pytest.approx(lb, rel=1e-12)
    assert a.test_on_batch(x, y, sample_weight=w) == pytest.approx(
        a.evaluate(x, y, batch_size=24, sample_weight=w, verbose=0), rel=1e-12)
    assert a.test_on_batch(x, y, sample_weight=np.zeros(24)) == 0.0


# -- utilities --------------------------------------------------------------------------------------
def test_to_categorical():
    out = mixedcore.utils.to_categorical([2, 0, 1])
    np.testing.assert_array_equal(out, np.eye(3, dtype=np.float32)[[2, 0, 1]])
    assert out.dtype == np.float32
    assert mixedcore.utils.to_categorical(np.array([[1], [0]]), num_classes=4).shape == (2, 4)
    assert mixedcore.utils.to_categorical(np.zeros((2, 3), int)).shape == (2, 3, 1)
    with pytest.raises(ValueError, match="to_categorical: label 3 is out of range for "
                                         "num_classes=3"):
        mixedcore.utils.to_categorical([3], num_classes=3)
    with pytest.raises(ValueError, match="to_categorical: labels must be >= 0"):
        mixedcore.utils.to_categorical([-1, 0])
    with pytest.raises(ValueError, match="to_categorical: labels must be whole numbers"):
        mixedcore.utils.to_categorical([0.5])
    with pytest.raises(ValueError, match="to_categorical: num_classes must be a positive int"):
        mixedcore.utils.to_categorical([0], num_classes=0)


@pytest.mark.keras
def test_to_categorical_matches_keras(keras):
    for y, k in (([0, 2, 1, 2], None), (np.array([[1], [3]]), 5), (np.array([[0, 1], [1, 0]]),
                                                                   None)):
        np.testing.assert_array_equal(mixedcore.utils.to_categorical(y, k),
                                      keras.utils.to_categorical(y, k))


def test_top_level_model_classes_and_get_layer():
    assert mixedcore.Model is mixedcore.models.Model
    assert mixedcore.Sequential is mixedcore.models.Sequential
    model = _model()
    dense = model.layers[-1]
    assert model.get_layer(dense.name) is dense
    assert model.get_layer(index=-1) is dense
    with pytest.raises(ValueError, match="get_layer: no layer named 'nope'"):
        model.get_layer("nope")
    with pytest.raises(ValueError, match="get_layer: index 7 is out of range"):
        model.get_layer(index=7)
