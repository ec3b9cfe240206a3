"""Small utilities, as ``keras.utils``: ``set_random_seed`` (of :mod:`mixedcore.random`),
``to_categorical``, and ``numerics_report`` (of the models).

A facade over the rest of the package: it may import anything, and no module of mixedcore
imports it."""
import numpy as np

from mixedcore.models._report import NumericsReport, numerics_report
from mixedcore.random import set_random_seed

__all__ = ["set_random_seed", "to_categorical", "numerics_report", "NumericsReport"]


def to_categorical(y, num_classes=None):
    """One-hot float32 rows for integer class labels, as ``keras.utils.to_categorical``.

    Parameters
    ----------
    y : array_like of ints
        Class indices, any shape; a trailing axis of 1 is dropped (labels of shape (n, 1)
        give (n, num_classes)).
    num_classes : int, optional
        Defaults to ``max(y) + 1``.

    Raises
    ------
    ValueError
        Labels that are negative, not whole numbers, or not below ``num_classes``.
    """
    arr = np.asarray(y)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"to_categorical: labels must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError("to_categorical: labels must be whole numbers (class indices)")
    labels = arr.astype(np.int64)
    if labels.ndim > 1 and labels.shape[-1] == 1:
        labels = labels.reshape(labels.shape[:-1])
    if labels.size and labels.min() < 0:
        raise ValueError(f"to_categorical: labels must be >= 0, got {labels.min()}")
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if labels.size else 0
    elif isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) \
            or num_classes < 1:
        raise ValueError(f"to_categorical: num_classes must be a positive int, got "
                         f"{num_classes!r}")
    if labels.size and labels.max() >= num_classes:
        raise ValueError(f"to_categorical: label {labels.max()} is out of range for "
                         f"num_classes={num_classes}")
    out = np.zeros(labels.shape + (int(num_classes),), dtype=np.float32)
    np.put_along_axis(out, labels[..., None], 1.0, axis=-1)
    return out

