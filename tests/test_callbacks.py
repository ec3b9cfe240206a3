"""mixedcore.callbacks: each callback's behaviour in fit / evaluate / predict, and against
Keras 3 where the comparison is cheap."""
import csv
import math

import numpy as np
import pytest

import mixedcore
from mixedcore import callbacks, layers


def _model(seed=0, optimizer="sgd", units=3):
    mixedcore.utils.set_random_seed(seed)
    model = mixedcore.Sequential([layers.Input(shape=(4,)),
                                  layers.Dense(units, activation="softmax")])
    model.compile(optimizer, "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _data(n=40, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 3, n)


class Scripted(callbacks.Callback):
    """Puts a scripted value under ``key`` in each epoch's logs (before the callbacks after it)."""

    def __init__(self, key, values):
        super().__init__()
        self.key, self.values = key, list(values)

    def on_epoch_end(self, epoch, logs=None):
        logs[self.key] = self.values[epoch]


class Recorder(callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __getattribute__(self, name):
        if name.startswith("on_"):
            calls = object.__getattribute__(self, "calls")

            def hook(*args):
                calls.append((name,) + tuple(a for a in args if not isinstance(a, dict)
                                            and a is not None))
            return hook
        return object.__getattribute__(self, name)


def test_hook_order_in_fit_evaluate_predict():
    model = _model()
    x, y = _data(10)
    rec = Recorder()
    model.fit(x, y, batch_size=5, epochs=2, verbose=0, shuffle=False,
              validation_data=(x[:4], y[:4]), callbacks=[rec])
    assert rec.model is model
    assert rec.params == {"epochs": 2, "steps": 2, "verbose": 0}
    epoch = [("on_train_batch_begin", 0), ("on_train_batch_end", 0),
             ("on_train_batch_begin", 1), ("on_train_batch_end", 1),
             ("on_test_begin",), ("on_test_batch_begin", 0), ("on_test_batch_end", 0),
             ("on_test_end",)]
    assert rec.calls == ([("on_train_begin",)]
                         + [("on_epoch_begin", 0)] + epoch + [("on_epoch_end", 0)]
                         + [("on_epoch_begin", 1)] + epoch + [("on_epoch_end", 1)]
                         + [("on_train_end",)])
    rec.calls.clear()
    model.evaluate(x, y, batch_size=10, verbose=0, callbacks=[rec])
    assert rec.calls == [("on_test_begin",), ("on_test_batch_begin", 0),
                         ("on_test_batch_end", 0), ("on_test_end",)]
    rec.calls.clear()
    model.predict(x, batch_size=6, verbose=0, callbacks=[rec])
    assert rec.calls == [("on_predict_begin",), ("on_predict_batch_begin", 0),
                         ("on_predict_batch_end", 0), ("on_predict_batch_begin", 1),
                         ("on_predict_batch_end", 1), ("on_predict_end",)]


def test_history_is_a_callback_and_fit_returns_it():
    model = _model()
    x, y = _data()
    history = model.fit(x, y, epochs=3, verbose=0, initial_epoch=1)
    assert isinstance(history, callbacks.History)
    assert isinstance(history, callbacks.Callback)
    assert history is model.history
    assert history.epoch == [1, 2]
    assert sorted(history.history) == ["accuracy", "loss"]
    assert len(history.history["loss"]) == 2
    assert mixedcore.models.History is callbacks.History


def test_stop_training_from_a_batch_hook_ends_fit_after_that_batch():
    model = _model()
    x, y = _data(40)
    seen = []

    def stop(batch, logs):
        seen.append(batch)
        if batch == 1:
            model.stop_training = True
    history = model.fit(x, y, batch_size=10, epochs=5, verbose=0,
                        callbacks=[callbacks.LambdaCallback(on_train_batch_end=stop)])
    assert seen == [0, 1]
    assert history.epoch == [0]


def test_early_stopping_patience_and_restore_best_weights():
    model = _model()
    x, y = _data()
    weights = []
    keep = callbacks.LambdaCallback(on_epoch_end=lambda e, logs: weights.append(
        [w.copy() for w in model.get_weights()]))
    # val_loss per epoch: best at epoch 1, then 2 epochs without improvement (patience 2)
    script = Scripted("val_loss", [1.0, 0.5, 0.6, 0.55, 0.4, 0.3])
    stopper = callbacks.EarlyStopping(patience=2, restore_best_weights=True)
    history = model.fit(x, y, epochs=6, verbose=0, callbacks=[script, keep, stopper])
    assert history.epoch == [0, 1, 2, 3]
    assert stopper.stopped_epoch == 3
    assert stopper.best == 0.5 and stopper.best_epoch == 1
    for got, want in zip(model.get_weights(), weights[1]):
        np.testing.assert_array_equal(got, want)


def test_early_stopping_min_delta_mode_baseline_and_start():
    model = _model()
    x, y = _data()
    # mode max with min_delta: +0.005 is no improvement
    stopper = callbacks.EarlyStopping(monitor="acc_like", mode="max", min_delta=0.01)
    history = model.fit(x, y, epochs=5, verbose=0,
                        callbacks=[Scripted("acc_like", [0.5, 0.505, 0.6, 0.7, 0.8]), stopper])
    assert history.epoch == [0, 1]
    # baseline not beaten: improvements do not reset the counter (without one it stops a
    # epoch later)
    script = [1.0, 0.9, 0.95, 0.97, 0.99, 1.0]
    for baseline, epochs in ((0.1, [0, 1, 2]), (None, [0, 1, 2, 3])):
        stopper = callbacks.EarlyStopping(monitor="m", mode="min", patience=2, baseline=baseline)
        history = model.fit(x, y, epochs=6, verbose=0,
                            callbacks=[Scripted("m", script), stopper])
        assert history.epoch == epochs
    # epochs before start_from_epoch are not watched
    stopper = callbacks.EarlyStopping(monitor="m", mode="min", start_from_epoch=3)
    history = model.fit(x, y, epochs=6, verbose=0,
                        callbacks=[Scripted("m", [1, 2, 3, 4, 5, 6]), stopper])
    assert history.epoch == [0, 1, 2, 3, 4]


def test_early_stopping_matches_keras(keras):
    script = [1.0, 0.8, 0.81, 0.79, 0.795, 0.8, 0.7, 0.9, 0.9, 0.9]

    class KScript(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["val_loss"] = script[epoch]

    kmodel = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3)])
    kmodel.compile("sgd", "mse")
    x, _ = _data(8)
    yk = np.zeros((8, 3), np.float32)
    for kwargs in ({"patience": 1}, {"patience": 2, "min_delta": 0.015},
                   {"patience": 1, "start_from_epoch": 4}, {"patience": 3, "baseline": 0.75}):
        kstop = keras.callbacks.EarlyStopping(**kwargs)
        khist = kmodel.fit(x, yk, epochs=len(script), verbose=0, callbacks=[KScript(), kstop])
        model = _model()
        stop = callbacks.EarlyStopping(**kwargs)
        hist = model.fit(x, np.zeros(8, int), epochs=len(script), verbose=0,
                         callbacks=[Scripted("val_loss", script), stop])
        assert hist.epoch == khist.epoch, kwargs
        assert stop.stopped_epoch == kstop.stopped_epoch, kwargs


def test_reduce_lr_on_plateau_schedule():
    model = _model(optimizer=mixedcore.optimizers.SGD(learning_rate=1.0))
    x, y = _data()
    script = [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    reduce = callbacks.ReduceLROnPlateau(monitor="m", mode="min", factor=0.5, patience=2,
                                         cooldown=1, min_lr=0.2)
    history = model.fit(x, y, epochs=len(script), verbose=0,
                        callbacks=[Scripted("m", script), reduce])
    # lr logged at each epoch's end, before that epoch's reduction
    assert history.history["learning_rate"] == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.2,
                                                0.2]
    assert model.optimizer.learning_rate == 0.2


def test_reduce_lr_on_plateau_matches_keras(keras):
    script = [1.0, 0.99999, 1.0, 0.5, 0.6, 0.7, 0.45, 0.46, 0.47, 0.48, 0.49, 0.5]

    class KScript(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["val_loss"] = script[epoch]

    x, _ = _data(8)
    for kwargs in ({"factor": 0.5, "patience": 1}, {"factor": 0.3, "patience": 2, "cooldown": 2},
                   {"factor": 0.1, "patience": 1, "min_lr": 0.02, "min_delta": 0.2}):
        kmodel = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3)])
        kmodel.compile(keras.optimizers.SGD(learning_rate=1.0), "mse")
        khist = kmodel.fit(x, np.zeros((8, 3), np.float32), epochs=len(script), verbose=0,
                           callbacks=[KScript(), keras.callbacks.ReduceLROnPlateau(**kwargs)])
        model = _model(optimizer=mixedcore.optimizers.SGD(learning_rate=1.0))
        hist = model.fit(x, np.zeros(8, int), epochs=len(script), verbose=0,
                         callbacks=[Scripted("val_loss", script),
                                    callbacks.ReduceLROnPlateau(**kwargs)])
        np.testing.assert_allclose(hist.history["learning_rate"],
                                   khist.history["learning_rate"], rtol=1e-6, err_msg=str(kwargs))


def test_learning_rate_scheduler_sets_the_optimizer_and_loss_scale_optimizer():
    x, y = _data()
    for opt in (mixedcore.optimizers.SGD(learning_rate=0.1),
                mixedcore.optimizers.LossScaleOptimizer(mixedcore.optimizers.SGD(0.1))):
        model = _model(optimizer=opt)
        seen = []
        history = model.fit(x, y, epochs=3, verbose=0, callbacks=[
            callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5 if epoch else lr),
            callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: seen.append(
                model.optimizer.learning_rate))])
        assert seen == [0.1, 0.05, 0.025]
        assert history.history["learning_rate"] == [0.1, 0.05, 0.025]
    model = _model()
    model.fit(x, y, epochs=2, verbose=0,
              callbacks=[callbacks.LearningRateScheduler(lambda epoch: 0.01 * (epoch + 1))])
    assert model.optimizer.learning_rate == pytest.approx(0.02)
    with pytest.raises(ValueError, match="LearningRateScheduler: the schedule must return a "
                                         "float"):
        model.fit(x, y, epochs=1, verbose=0,
                  callbacks=[callbacks.LearningRateScheduler(lambda epoch: "fast")])
    with pytest.raises(TypeError, match="LearningRateScheduler: schedule must be callable"):
        callbacks.LearningRateScheduler(0.1)


def test_csv_logger_file_content(tmp_path):
    path = tmp_path / "log.csv"
    model = _model()
    x, y = _data()
    history = model.fit(x, y, epochs=2, verbose=0, validation_split=0.25,
                        callbacks=[callbacks.CSVLogger(path)])
    rows = list(csv.reader(open(path)))
    assert rows[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [r[0] for r in rows[1:]] == ["0", "1"]
    for row, epoch in zip(rows[1:], range(2)):
        for name, text in zip(rows[0][1:], row[1:]):
            assert float(text) == history.history[name][epoch]
    # append: no second header; separator
    model.fit(x, y, epochs=1, verbose=0, callbacks=[callbacks.CSVLogger(path, append=True)])
    rows = list(csv.reader(open(path)))
    assert len(rows) == 4 and rows[3][0] == "0"
    other = tmp_path / "semi.csv"
    model.fit(x, y, epochs=1, verbose=0, callbacks=[callbacks.CSVLogger(other, separator=";")])
    lines = open(other).read().splitlines()
    assert lines[0] == "epoch;accuracy;loss;val_accuracy;val_loss"
    assert lines[1].endswith(";NA;NA")
    with pytest.raises(ValueError, match="CSVLogger: separator must be one character"):
        callbacks.CSVLogger(path, separator=", ")


def test_csv_logger_matches_keras_columns(keras, tmp_path):
    x, y = _data()
    kmodel = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3,
                                                                           activation="softmax")])
    kmodel.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    kmodel.fit(x, y, epochs=2, verbose=0, callbacks=[keras.callbacks.CSVLogger(str(tmp_path / "k"))])
    model = _model()
    model.fit(x, y, epochs=2, verbose=0, callbacks=[callbacks.CSVLogger(tmp_path / "m")])
    klines = open(tmp_path / "k").read().splitlines()
    mlines = open(tmp_path / "m").read().splitlines()
    assert klines[0] == mlines[0]
    assert [line.split(",")[0] for line in klines] == [line.split(",")[0] for line in mlines]


def test_model_checkpoint_formats_paths_and_saves_best(tmp_path):
    model = _model()
    x, y = _data()
    pattern = str(tmp_path / "ck-{epoch:02d}-{m:.2f}.keras")
    ckpt = callbacks.ModelCheckpoint(pattern, monitor="m", mode="min", save_best_only=True)
    model.fit(x, y, epochs=4, verbose=0,
              callbacks=[Scripted("m", [0.5, 0.7, 0.25, 0.3]), ckpt])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck-01-0.50.keras",
                                                          "ck-03-0.25.keras"]
    loaded = mixedcore.models.load_model(tmp_path / "ck-03-0.25.keras")
    for got, want in zip(loaded.get_weights(), model.get_weights()):
        assert got.shape == want.shape
    weights = tmp_path / "w" / "last.weights.h5"
    model.fit(x, y, epochs=2, verbose=0,
              callbacks=[callbacks.ModelCheckpoint(weights, save_weights_only=True)])
    fresh = _model(seed=5)
    fresh.load_weights(weights)
    for got, want in zip(fresh.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="ModelCheckpoint: the filepath must end in .keras"):
        callbacks.ModelCheckpoint(tmp_path / "x.h5")
    with pytest.raises(ValueError, match="must end in .weights.h5"):
        callbacks.ModelCheckpoint(tmp_path / "x.keras", save_weights_only=True)
    with pytest.raises(KeyError, match="ModelCheckpoint: the filepath .* names 'nope'"):
        model.fit(x, y, epochs=1, verbose=0,
                  callbacks=[callbacks.ModelCheckpoint(str(tmp_path / "{nope}.keras"))])


def test_terminate_on_nan():
    model = _model(optimizer=mixedcore.optimizers.SGD(learning_rate=1.0))
    x, y = _data(40)
    x[25] = np.nan
    seen = []
    history = model.fit(x, y, batch_size=10, epochs=3, verbose=0, shuffle=False,
                        callbacks=[callbacks.TerminateOnNaN(),
                                   callbacks.LambdaCallback(
                                       on_train_batch_end=lambda b, logs: seen.append(b))])
    assert seen == [0, 1, 2]
    assert history.epoch == [0]
    assert math.isnan(history.history["loss"][0])


def test_lambda_callback_hooks_and_errors():
    model = _model()
    x, y = _data(10)
    events = []
    cb = callbacks.LambdaCallback(on_train_begin=lambda logs: events.append("begin"),
                                  on_batch_end=lambda b, logs: events.append(("batch", b)),
                                  on_epoch_end=lambda e, logs: events.append(("epoch", e)),
                                  on_predict_end=lambda logs: events.append("predicted"))
    model.fit(x, y, batch_size=5, epochs=1, verbose=0, callbacks=[cb])
    model.predict(x, verbose=0, callbacks=[cb])
    assert events == ["begin", ("batch", 0), ("batch", 1), ("epoch", 0), "predicted"]
    with pytest.raises(TypeError, match="LambdaCallback: unknown hooks \\['on_lunch'\\]"):
        callbacks.LambdaCallback(on_lunch=print)
    with pytest.raises(TypeError, match="LambdaCallback: on_epoch_end must be callable"):
        callbacks.LambdaCallback(on_epoch_end=3)


def test_bad_arguments():
    model = _model()
    x, y = _data(10)
    with pytest.raises(TypeError, match="fit: callbacks must be mixedcore.callbacks.Callback "
                                        "objects, got int"):
        model.fit(x, y, verbose=0, callbacks=[3])
    with pytest.raises(TypeError, match="evaluate: callbacks must be a list"):
        model.evaluate(x, y, verbose=0, callbacks="csv")
    with pytest.raises(ValueError, match="EarlyStopping: mode must be 'auto', 'min' or 'max', "
                                         "got 'up'"):
        callbacks.EarlyStopping(mode="up")
    with pytest.raises(ValueError, match="EarlyStopping: patience must be a non-negative int"):
        callbacks.EarlyStopping(patience=-1)
    with pytest.raises(ValueError, match="ReduceLROnPlateau: factor must be a number in "
                                         "\\[0, 1\\), got 1.5"):
        callbacks.ReduceLROnPlateau(factor=1.5)
    with pytest.raises(ValueError, match="cannot tell whether monitor='score'"):
        model.fit(x, y, epochs=2, verbose=0, callbacks=[Scripted("score", [1, 2]),
                                                        callbacks.EarlyStopping("score")])
    with pytest.warns(UserWarning, match="EarlyStopping: early stopping is conditioned on "
                                         "'val_loss', which is not in the logs"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[callbacks.EarlyStopping()])
