"""Callbacks (``keras.callbacks``): code that ``fit``, ``evaluate`` and ``predict`` call at the
start and end of training, of each epoch and of each batch.

A callback gets the model through ``set_model`` (as ``self.model``) and the loop's parameters
(``epochs``, ``steps``, ``verbose``) through ``set_params``.  ``logs`` passed to the epoch hooks
hold the epoch's averaged loss and metrics (and ``val_*`` for validation); a callback may add
entries (``ReduceLROnPlateau`` and ``LearningRateScheduler`` add ``learning_rate``), which the
callbacks after it and the History see.  Setting ``model.stop_training = True`` ends ``fit``
after the current epoch (or batch).
"""
import csv
import math
import os
import warnings

import numpy as np

__all__ = ["Callback", "CallbackList", "History", "EarlyStopping", "ModelCheckpoint",
           "CSVLogger", "LearningRateScheduler", "ReduceLROnPlateau", "TerminateOnNaN",
           "LambdaCallback"]


class Callback:
    """Base class: every hook does nothing; override the ones you need."""

    def __init__(self):
        self.params = {}
        self._model = None

    @property
    def model(self):
        return self._model

    def set_model(self, model):
        self._model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_begin(self, batch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        pass

    def on_test_begin(self, logs=None):
        pass

    def on_test_end(self, logs=None):
        pass

    def on_test_batch_begin(self, batch, logs=None):
        pass

    def on_test_batch_end(self, batch, logs=None):
        pass

    def on_predict_begin(self, logs=None):
        pass

    def on_predict_end(self, logs=None):
        pass

    def on_predict_batch_begin(self, batch, logs=None):
        pass

    def on_predict_batch_end(self, batch, logs=None):
        pass

    # Keras's older names for the training batch hooks
    def on_batch_begin(self, batch, logs=None):
        self.on_train_batch_begin(batch, logs)

    def on_batch_end(self, batch, logs=None):
        self.on_train_batch_end(batch, logs)


_HOOKS = ("on_train_begin", "on_train_end", "on_test_begin", "on_test_end", "on_predict_begin",
          "on_predict_end")
_STEP_HOOKS = ("on_epoch_begin", "on_epoch_end", "on_train_batch_begin", "on_train_batch_end",
               "on_test_batch_begin", "on_test_batch_end", "on_predict_batch_begin",
               "on_predict_batch_end")


class CallbackList:
    """Several callbacks called in order; ``fit`` / ``evaluate`` / ``predict`` use one."""

    def __init__(self, callbacks=None, model=None, owner="fit", **params):
        if callbacks is None:
            callbacks = []
        elif isinstance(callbacks, Callback):
            callbacks = [callbacks]
        elif not isinstance(callbacks, (list, tuple)):
            raise TypeError(f"{owner}: callbacks must be a list of mixedcore.callbacks.Callback, "
                            f"got {type(callbacks).__name__}")
        for cb in callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"{owner}: callbacks must be mixedcore.callbacks.Callback objects, "
                                f"got {type(cb).__name__}: {cb!r}")
        self.callbacks = list(callbacks)
        if model is not None:
            for cb in self.callbacks:
                cb.set_model(model)
        if params:
            for cb in self.callbacks:
                cb.set_params(dict(params))

    def append(self, callback):
        self.callbacks.append(callback)

    def __iter__(self):
        return iter(self.callbacks)

    def __getattr__(self, name):
        if name in _HOOKS:
            def call(logs=None):
                for cb in self.callbacks:
                    getattr(cb, name)(logs)
            return call
        if name in _STEP_HOOKS:
            def call_step(index, logs=None):
                for cb in self.callbacks:
                    getattr(cb, name)(index, logs)
            return call_step
        raise AttributeError(name)


class History(Callback):
    """Records each epoch's logs: ``history`` maps each name to its per-epoch values, ``epoch``
    lists the epochs.  ``fit`` always adds one and returns it."""

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epoch = []

    def on_train_begin(self, logs=None):
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(value)
        if self.model is not None:
            self.model.history = self

    def __repr__(self):
        return f"<History epochs={len(self.epoch)} keys={list(self.history)}>"


def _check_mode(owner, mode):
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"{owner}: mode must be 'auto', 'min' or 'max', got {mode!r}")
    return mode


class _Monitor(Callback):
    """Watches one log entry; decides what counts as an improvement."""

    def __init__(self, monitor, mode, min_delta, baseline=None):
        super().__init__()
        owner = type(self).__name__
        if not isinstance(monitor, str):
            raise TypeError(f"{owner}: monitor must be a str, got {type(monitor).__name__}")
        self.monitor = monitor
        self.mode = _check_mode(owner, mode)
        if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float, np.number)):
            raise TypeError(f"{owner}: min_delta must be a number, got {min_delta!r}")
        self.min_delta = abs(float(min_delta))
        self.best = baseline
        self._lower_is_better = None

    def _direction(self):
        """True when a lower value is better ("min"); "auto" decides from the name."""
        if self._lower_is_better is None:
            if self.mode != "auto":
                self._lower_is_better = self.mode == "min"
            else:
                name = self.monitor[4:] if self.monitor.startswith("val_") else self.monitor
                if name == "loss" or name.endswith("_loss") or name in ("mse", "mae"):
                    self._lower_is_better = True
                elif "acc" in name:
                    self._lower_is_better = False
                else:
                    raise ValueError(f"{type(self).__name__}: cannot tell whether "
                                     f"monitor={self.monitor!r} should go down or up; pass "
                                     f"mode='min' or mode='max'")
        return self._lower_is_better

    def _is_improvement(self, value, reference):
        if reference is None:
            return True
        if self._direction():
            return value + self.min_delta < reference
        return value - self.min_delta > reference

    def _value(self, logs, what):
        value = (logs or {}).get(self.monitor)
        if value is None:
            warnings.warn(f"{type(self).__name__}: {what} on {self.monitor!r}, which is not in "
                          f"the logs; available: {', '.join(logs or {})}", stacklevel=3)
        return value


class EarlyStopping(_Monitor):
    """Stop training when ``monitor`` has not improved for ``patience`` epochs.

    Parameters
    ----------
    monitor : str, default "val_loss"
    min_delta : float, default 0
        A change smaller than this is no improvement.
    patience : int, default 0
        Epochs without improvement before stopping.
    verbose : int, default 0
    mode : "auto", "min" or "max"
    baseline : float, optional
        The wait counter only resets on an improvement that also beats the baseline.
    restore_best_weights : bool, default False
        At the end of training, set the weights of the best epoch seen (also when training
        did not stop early).
    start_from_epoch : int, default 0
        Epochs before this one are not watched.
    """

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto",
                 baseline=None, restore_best_weights=False, start_from_epoch=0):
        super().__init__(monitor, mode, min_delta)
        for what, v in (("patience", patience), ("start_from_epoch", start_from_epoch)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"EarlyStopping: {what} must be a non-negative int, got {v!r}")
        self.patience = int(patience)
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = bool(restore_best_weights)
        self.start_from_epoch = int(start_from_epoch)
        self.wait = 0
        self.stopped_epoch = 0
        self.best_weights = None
        self.best_epoch = 0

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = None
        self.best_weights = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch, logs=None):
        current = self._value(logs, "early stopping is conditioned")
        if current is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
            self.best_epoch = epoch
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping", flush=True)
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                print(f"Restoring model weights from the end of the best epoch: "
                      f"{self.best_epoch + 1}.", flush=True)
            self.model.set_weights(self.best_weights)


class ModelCheckpoint(_Monitor):
    """Save the model (``.keras``) or its weights (``.weights.h5``) after each epoch.

    Parameters
    ----------
    filepath : str or os.PathLike
        May hold ``{epoch}`` (1-based, as Keras) and log names with formats, as
        ``"ckpt-{epoch:02d}-{val_loss:.2f}.keras"``.  It must end in ``.keras`` (the whole
        model, ``model.save``) or, with ``save_weights_only=True``, in ``.weights.h5``.
    monitor : str, default "val_loss"
    verbose : int, default 0
    save_best_only : bool, default False
        Save only when ``monitor`` improves on the best value seen.
    save_weights_only : bool, default False
    mode : "auto", "min" or "max"
    save_freq : "epoch"
        Only per-epoch saving is supported.
    initial_value_threshold : float, optional
        The best value to beat at the start.
    """

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False,
                 save_weights_only=False, mode="auto", save_freq="epoch",
                 initial_value_threshold=None):
        super().__init__(monitor, mode, 0, baseline=initial_value_threshold)
        self.filepath = os.fspath(filepath)
        self.verbose = verbose
        self.save_best_only = bool(save_best_only)
        self.save_weights_only = bool(save_weights_only)
        if save_freq != "epoch":
            raise ValueError(f"ModelCheckpoint: only save_freq='epoch' is supported, got "
                             f"{save_freq!r}")
        self.save_freq = save_freq
        if self.save_weights_only:
            if not self.filepath.endswith(".weights.h5"):
                raise ValueError(f"ModelCheckpoint: with save_weights_only=True the filepath "
                                 f"must end in .weights.h5, got {self.filepath!r}")
        elif not self.filepath.endswith(".keras"):
            raise ValueError(f"ModelCheckpoint: the filepath must end in .keras (or use "
                             f"save_weights_only=True with .weights.h5), got {self.filepath!r}")

    def _path(self, epoch, logs):
        try:
            return self.filepath.format(epoch=epoch + 1, **(logs or {}))
        except KeyError as e:
            raise KeyError(f"ModelCheckpoint: the filepath {self.filepath!r} names {e}, which "
                           f"is not in the logs; available: {sorted(logs or {})}") from None

    def on_epoch_end(self, epoch, logs=None):
        path = self._path(epoch, logs)
        if self.save_best_only:
            current = self._value(logs, "can save the best model only")
            if current is None:
                return
            if not self._is_improvement(current, self.best):
                if self.verbose > 0:
                    print(f"Epoch {epoch + 1}: {self.monitor} did not improve from "
                          f"{self.best:.5f}", flush=True)
                return
            if self.verbose > 0:
                before = "inf" if self.best is None else f"{self.best:.5f}"
                print(f"Epoch {epoch + 1}: {self.monitor} improved from {before} to "
                      f"{current:.5f}, saving model to {path}", flush=True)
            self.best = current
        elif self.verbose > 0:
            print(f"Epoch {epoch + 1}: saving model to {path}", flush=True)
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        if self.save_weights_only:
            self.model.save_weights(path, overwrite=True)
        else:
            self.model.save(path, overwrite=True)


class CSVLogger(Callback):
    """Write each epoch's logs as a row of a CSV file (``epoch`` then the names in sorted
    order).

    Parameters
    ----------
    filename : str or os.PathLike
    separator : str, default ","
    append : bool, default False
        Add to an existing file (without a second header when it already has lines).
    """

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        if not isinstance(separator, str) or len(separator) != 1:
            raise ValueError(f"CSVLogger: separator must be one character, got {separator!r}")
        self.filename = os.fspath(filename)
        self.sep = separator
        self.append = bool(append)
        self.keys = None
        self._file = None
        self._writer = None
        self._header = True

    def on_train_begin(self, logs=None):
        self._header = True
        if self.append and os.path.exists(self.filename):
            with open(self.filename) as f:
                self._header = not f.readline()
        if self._file is not None and not self._file.closed:
            self._file.close()
        self._file = open(self.filename, "a" if self.append else "w", newline="")
        self._writer = None
        self.keys = None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.keys is None:
            self.keys = sorted(logs)
            if self.keys and not any(k.startswith("val_") for k in self.keys):
                # rows of later epochs with validation keep the same columns
                self.keys += [f"val_{k}" for k in self.keys]
        if self._writer is None:
            self._writer = csv.writer(self._file, delimiter=self.sep, lineterminator="\n")
            if self._header:
                self._writer.writerow(["epoch"] + self.keys)
        self._writer.writerow([epoch] + [_csv_value(logs.get(k, "NA")) for k in self.keys])
        self._file.flush()

    def on_train_end(self, logs=None):
        if self._file is not None and not self._file.closed:
            self._file.close()
        self._writer = None


def _csv_value(value):
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray) and value.ndim:
        return "[" + ", ".join(map(str, value.ravel())) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return value


def _learning_rate(owner, optimizer):
    if optimizer is None or not hasattr(optimizer, "learning_rate"):
        raise ValueError(f"{owner}: the model's optimizer has no learning_rate (compile the "
                         f"model first)")
    lr = optimizer.learning_rate
    if callable(lr):
        raise TypeError(f"{owner}: the optimizer's learning_rate is a schedule ({lr!r}); this "
                        f"callback needs a number")
    return float(lr)


class LearningRateScheduler(Callback):
    """At the start of each epoch set ``model.optimizer.learning_rate`` to
    ``schedule(epoch, lr)`` (or ``schedule(epoch)`` for a one-argument function); logs
    ``learning_rate`` at each epoch's end."""

    def __init__(self, schedule, verbose=0):
        super().__init__()
        if not callable(schedule):
            raise TypeError(f"LearningRateScheduler: schedule must be callable, got "
                            f"{type(schedule).__name__}")
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch, logs=None):
        lr = _learning_rate("LearningRateScheduler", self.model.optimizer)
        try:
            new = self.schedule(epoch, lr)
        except TypeError:
            new = self.schedule(epoch)
        if isinstance(new, bool) or not isinstance(new, (float, np.floating)):
            raise ValueError(f"LearningRateScheduler: the schedule must return a float, got "
                             f"{new!r}")
        self.model.optimizer.learning_rate = float(new)
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to "
                  f"{float(new)}.", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = _learning_rate("LearningRateScheduler", self.model.optimizer)


class ReduceLROnPlateau(_Monitor):
    """Multiply the learning rate by ``factor`` when ``monitor`` has not improved for
    ``patience`` epochs, then wait ``cooldown`` epochs; never below ``min_lr``.

    Parameters
    ----------
    monitor : str, default "val_loss"
    factor : float in (0, 1), default 0.1
    patience : int, default 10
    verbose : int, default 0
    mode : "auto", "min" or "max"
    min_delta : float, default 1e-4
    cooldown : int, default 0
    min_lr : float, default 0
    """

    def __init__(self, monitor="val_loss", factor=0.1, patience=10, verbose=0, mode="auto",
                 min_delta=1e-4, cooldown=0, min_lr=0.0):
        super().__init__(monitor, mode, min_delta)
        if isinstance(factor, bool) or not isinstance(factor, (int, float, np.number)) \
                or not 0 <= factor < 1:
            raise ValueError(f"ReduceLROnPlateau: factor must be a number in [0, 1), got "
                             f"{factor!r}")
        for what, v in (("patience", patience), ("cooldown", cooldown)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"ReduceLROnPlateau: {what} must be a non-negative int, got "
                                 f"{v!r}")
        self.factor = float(factor)
        self.patience = int(patience)
        self.verbose = verbose
        self.cooldown = int(cooldown)
        self.min_lr = float(min_lr)
        self.cooldown_counter = 0
        self.wait = 0

    def on_train_begin(self, logs=None):
        self.best = None
        self.cooldown_counter = 0
        self.wait = 0

    def in_cooldown(self):
        return self.cooldown_counter > 0

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        lr = _learning_rate("ReduceLROnPlateau", self.model.optimizer)
        logs["learning_rate"] = lr
        current = self._value(logs, "learning rate reduction is conditioned")
        if current is None:
            return
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self._is_improvement(current, self.best):
            self.best = current
            self.wait = 0
            return
        if self.in_cooldown():
            return
        self.wait += 1
        if self.wait >= self.patience and lr > np.float32(self.min_lr):
            new = max(lr * self.factor, self.min_lr)
            self.model.optimizer.learning_rate = new
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate to "
                      f"{new}.", flush=True)
            self.cooldown_counter = self.cooldown
            self.wait = 0


class TerminateOnNaN(Callback):
    """Stop training as soon as a batch's loss is NaN or infinite."""

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            print(f"Batch {batch}: invalid loss, terminating training", flush=True)
            self.model.stop_training = True


class LambdaCallback(Callback):
    """A callback made of functions: ``on_epoch_begin(epoch, logs)``, ``on_epoch_end``,
    ``on_train_batch_begin(batch, logs)``, ``on_train_batch_end``, ``on_train_begin(logs)``,
    ``on_train_end`` and likewise for test and predict; ``on_batch_begin`` / ``on_batch_end``
    stand for the training batch hooks."""

    _NAMES = ("on_epoch_begin", "on_epoch_end", "on_train_begin", "on_train_end",
              "on_train_batch_begin", "on_train_batch_end", "on_test_begin", "on_test_end",
              "on_test_batch_begin", "on_test_batch_end", "on_predict_begin", "on_predict_end",
              "on_predict_batch_begin", "on_predict_batch_end")

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None,
                 on_train_end=None, on_train_batch_begin=None, on_train_batch_end=None,
                 **kwargs):
        super().__init__()
        given = dict(kwargs)
        given.update(on_epoch_begin=on_epoch_begin, on_epoch_end=on_epoch_end,
                     on_train_begin=on_train_begin, on_train_end=on_train_end,
                     on_train_batch_begin=on_train_batch_begin,
                     on_train_batch_end=on_train_batch_end)
        for alias, name in (("on_batch_begin", "on_train_batch_begin"),
                            ("on_batch_end", "on_train_batch_end")):
            if alias in given:
                fn = given.pop(alias)
                if fn is not None:
                    given[name] = fn
        unknown = sorted(set(given) - set(self._NAMES))
        if unknown:
            raise TypeError(f"LambdaCallback: unknown hooks {unknown}; valid: "
                            f"{list(self._NAMES)}")
        for name, fn in given.items():
            if fn is None:
                continue
            if not callable(fn):
                raise TypeError(f"LambdaCallback: {name} must be callable, got "
                                f"{type(fn).__name__}")
            setattr(self, name, fn)
