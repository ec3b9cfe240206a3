"""Metrics (``keras.metrics``) as functions of a batch: accuracies (the fraction of correct
predictions) and the regression errors ``mae`` / ``mse``.

Names and config entries are looked up in the one registry (:mod:`mixedcore.saving.
object_registration`): the user's metric functions (``custom_objects``, scopes, registered
ones) first, then these.
"""
import numbers

import numpy as np

from mixedcore import losses as _losses
from mixedcore._dtypes import as_numeric_array
from mixedcore.saving import object_registration as _registry

__all__ = ["sparse_categorical_accuracy", "categorical_accuracy", "binary_accuracy",
           "top_k_categorical_accuracy", "mean_absolute_error", "mean_squared_error", "mae",
           "mse", "get", "serialize", "deserialize"]


def _argmax(p):
    p = np.asarray(p)
    return np.argmax(p.astype(np.float32) if p.dtype.itemsize == 2 else p, axis=-1)


def sparse_categorical_accuracy(y_true, y_pred):
    """Fraction of samples whose arg-max prediction equals the integer label."""
    y_true = as_numeric_array("sparse_categorical_accuracy", y_true)
    if y_true.ndim == np.ndim(y_pred) and y_true.shape[-1] == 1:
        y_true = y_true.reshape(y_true.shape[:-1])
    return float(np.mean(_argmax(y_pred) == y_true.astype(np.int64)))


def categorical_accuracy(y_true, y_pred):
    """Fraction of samples whose arg-max prediction equals the arg-max of the one-hot label."""
    return float(np.mean(_argmax(y_pred) == _argmax(as_numeric_array("categorical_accuracy",
                                                                      y_true))))


def binary_accuracy(y_true, y_pred, threshold=0.5):
    """Fraction of entries where (prediction > threshold) equals the 0/1 label."""
    p = np.asarray(y_pred).astype(np.float32)
    y = as_numeric_array("binary_accuracy", y_true).astype(np.float32).reshape(p.shape)
    return float(np.mean((p > threshold) == (y > 0.5)))


def top_k_categorical_accuracy(y_true, y_pred, k=5):
    """Fraction of samples whose true class (the arg-max of the one-hot label) is among the
    ``k`` highest predictions; a tie with the k-th highest counts as a hit (as Keras)."""
    owner = "top_k_categorical_accuracy"
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"{owner}: k must be an int >= 1, got {k!r}")
    p = as_numeric_array(owner, y_pred)
    p = p.astype(np.float32) if p.dtype.itemsize == 2 or p.dtype.kind != "f" else p
    y = as_numeric_array(owner, y_true)
    if y.shape != p.shape or p.ndim < 1:
        raise ValueError(f"{owner}: y_true shape {y.shape} does not match y_pred shape "
                         f"{p.shape} (one-hot labels are expected)")
    classes = p.shape[-1]
    target = np.take_along_axis(p, _argmax(y)[..., None], axis=-1)[..., 0]
    if k >= classes:
        return 1.0 if target.size else float("nan")
    kth = np.partition(p, classes - k, axis=-1)[..., classes - k]
    return float(np.mean(target >= kth))


def mean_absolute_error(y_true, y_pred):
    """Mean of |y_true - y_pred| over all entries (Keras's rank rule for a trailing 1)."""
    return _losses.MeanAbsoluteError(name="mean_absolute_error")(y_true, y_pred)


def mean_squared_error(y_true, y_pred):
    """Mean of (y_true - y_pred)**2 over all entries (Keras's rank rule for a trailing 1)."""
    return _losses.MeanSquaredError(name="mean_squared_error")(y_true, y_pred)


mae = mean_absolute_error
mse = mean_squared_error

# the metric kind's built-in objects (the live registry table)
_BY_NAME = _registry.builtin_table("metric")
_BY_NAME.update({
    "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "categorical_accuracy": categorical_accuracy,
    "binary_accuracy": binary_accuracy,
    "top_k_categorical_accuracy": top_k_categorical_accuracy,
    "mean_absolute_error": mean_absolute_error,
    "mae": mean_absolute_error,
    "mean_squared_error": mean_squared_error,
    "mse": mean_squared_error,
})


def get(identifier, loss=None, output_shape=None, custom_objects=None):
    """(name, function) for a metric identifier.

    "accuracy" / "acc" picks, as Keras does, from the loss: sparse categorical accuracy for the
    sparse crossentropy, categorical accuracy for the categorical one, else binary accuracy for a
    single output and categorical accuracy for several; for the binary crossentropy, binary
    accuracy.  The other names: "sparse_categorical_accuracy", "categorical_accuracy",
    "binary_accuracy", "top_k_categorical_accuracy" (k=5), "mae" / "mean_absolute_error",
    "mse" / "mean_squared_error"; the log name is the name given.  A name of the user's
    (``custom_objects``, a scope, ``"package>name"`` of a registered function) comes first;
    its log name is the part after the ``>``.
    """
    if callable(identifier):
        return getattr(identifier, "__name__", "metric"), identifier
    if not isinstance(identifier, str):
        raise TypeError(f"metrics.get: expected a metric name or a function, got "
                        f"{type(identifier).__name__}")
    found = _registry.lookup_name("metric", identifier, custom_objects, builtins=False,
                                  owner="metrics.get")
    if found is not None:
        return identifier.split(">")[-1], found.obj
    if identifier in ("accuracy", "acc"):
        name = getattr(loss, "name", "")
        if name == "sparse_categorical_crossentropy":
            return identifier, sparse_categorical_accuracy
        if name == "categorical_crossentropy":
            return identifier, categorical_accuracy
        if isinstance(loss, _losses.BinaryCrossentropy):
            return identifier, binary_accuracy
        if output_shape is not None and output_shape[-1] == 1:
            return identifier, binary_accuracy
        return identifier, categorical_accuracy
    fn = _BY_NAME.get(identifier)
    if fn is None:
        raise ValueError(f"metrics.get: unknown metric {identifier!r}; valid names: "
                         f"{['accuracy'] + sorted(_BY_NAME)}")
    return identifier, fn


def serialize(metric):
    """The name of one of these metric functions; Keras's function entry (``class_name``
    "function", ``registered_name`` ``"package>name"`` when registered) of another."""
    for name, fn in _BY_NAME.items():
        if fn is metric:
            return name
    return {"module": getattr(metric, "__module__", None), "class_name": "function",
            "config": getattr(metric, "__name__", type(metric).__name__),
            "registered_name": _registry.get_registered_name(metric)}


def deserialize(config, custom_objects=None):
    """The function of a metric name or a Keras function entry (:func:`serialize`'s)."""
    found = _registry.lookup_keys("metric", _registry.function_keys(config), custom_objects,
                                  owner="metrics.deserialize")
    if found is not None:
        return found.obj
    if isinstance(config, dict):
        raise ValueError(f"metrics.deserialize: unknown metric {config.get('config') or config!r}"
                         f"; valid names: {['accuracy'] + sorted(_BY_NAME)}")
    return get(config)[1]
