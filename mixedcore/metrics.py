"""Accuracy metrics (``keras.metrics``), as functions counting correct predictions."""
import numpy as np

from mixedcore._dtypes import as_numeric_array

__all__ = ["sparse_categorical_accuracy", "categorical_accuracy", "binary_accuracy", "get"]


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


_BY_NAME = {
    "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "categorical_accuracy": categorical_accuracy,
    "binary_accuracy": binary_accuracy,
}


def get(identifier, loss=None, output_shape=None):
    """(name, function) for a metric identifier.

    "accuracy" / "acc" picks, as Keras does, from the loss: sparse categorical accuracy for the
    sparse crossentropy, categorical accuracy for the categorical one, else binary accuracy for a
    single output and categorical accuracy for several.
    """
    if callable(identifier):
        return getattr(identifier, "__name__", "metric"), identifier
    if not isinstance(identifier, str):
        raise TypeError(f"metrics.get: expected a metric name or a function, got "
                        f"{type(identifier).__name__}")
    if identifier in ("accuracy", "acc"):
        name = getattr(loss, "name", "")
        if name == "sparse_categorical_crossentropy":
            return identifier, sparse_categorical_accuracy
        if name == "categorical_crossentropy":
            return identifier, categorical_accuracy
        if output_shape is not None and output_shape[-1] == 1:
            return identifier, binary_accuracy
        return identifier, categorical_accuracy
    fn = _BY_NAME.get(identifier)
    if fn is None:
        raise ValueError(f"metrics.get: unknown metric {identifier!r}; valid names: "
                         f"{['accuracy'] + sorted(_BY_NAME)}")
    return identifier, fn
