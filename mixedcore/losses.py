"""Losses (``keras.losses``): categorical, sparse categorical and binary crossentropy, mean
squared error, mean absolute error, Huber, Kullback-Leibler divergence.

Losses are computed in float32 whatever the model's compute dtype (float64 stays float64), and
reduced as Keras's default "sum_over_batch_size": the mean over the samples of each sample's loss
(for the elementwise losses, the sample's loss is the mean over the last axis; for the KL
divergence, the sum).  Each loss object also gives its gradient with respect to the predictions
(``value_and_grad``) and, for the categorical crossentropies, with respect to softmax logits
(``value_and_grad_logits``), which the models use when the last layer is a softmax: the same
fusion Keras makes for numerical stability.

Names and config entries are looked up in the one registry (:mod:`mixedcore.saving.
object_registration`): the user's losses (``custom_objects``, scopes, registered ones) first,
then these, under Keras's names and aliases.
"""
import math
import numbers

import numpy as np

from mixedcore._dtypes import as_numeric_array, to_compute, work_dtype
from mixedcore.saving import object_registration as _registry

__all__ = ["Loss", "CategoricalCrossentropy", "SparseCategoricalCrossentropy", "MeanSquaredError",
           "BinaryCrossentropy", "MeanAbsoluteError", "Huber", "KLDivergence",
           "categorical_crossentropy", "sparse_categorical_crossentropy", "mean_squared_error",
           "mse", "binary_crossentropy", "mean_absolute_error", "mae", "huber", "kl_divergence",
           "kld", "get", "serialize", "deserialize"]

EPSILON = 1e-7   # Keras's backend epsilon, the clip of probabilities


def _work(owner, y_pred):
    y_pred = as_numeric_array(owner, y_pred)
    if y_pred.dtype.kind in "biu":
        return y_pred.astype(np.float32)
    return to_compute(y_pred, work_dtype(y_pred.dtype))


def _labels_like(owner, y_true, y_pred):
    y_true = as_numeric_array(owner, y_true)
    if y_true.shape != y_pred.shape:
        hint = ""
        if y_true.ndim == y_pred.ndim - 1 or (y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1):
            hint = " (integer class labels need sparse_categorical_crossentropy)"
        raise ValueError(f"{owner}: y_true shape {y_true.shape} does not match y_pred shape "
                         f"{y_pred.shape}{hint}")
    return y_true.astype(y_pred.dtype, copy=False)


def _same_rank_targets(owner, y_true, p):
    """``y_true`` in ``p``'s dtype and shape, after Keras's rank rule: a trailing axis of 1 on
    one side is matched on the other (targets (N,) against predictions (N, 1), or the reverse)."""
    t = as_numeric_array(owner, y_true)
    if t.ndim == p.ndim - 1 and p.shape[-1:] == (1,):
        t = t.reshape(t.shape + (1,))
    elif p.ndim == t.ndim - 1 and t.shape[-1:] == (1,):
        t = t.reshape(t.shape[:-1])
    return _labels_like(owner, t, p)


def _samples(p):
    """The number of samples of a per-sample reduction over the last axis."""
    return max(1, int(np.prod(p.shape[:-1]))) if p.ndim else 1


def _sparse_labels(owner, y_true, y_pred):
    y_true = as_numeric_array(owner, y_true)
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
        y_true = y_true.reshape(y_true.shape[:-1])
    if y_true.shape != y_pred.shape[:-1]:
        raise ValueError(f"{owner}: labels of shape {y_true.shape} do not match predictions of "
                         f"shape {y_pred.shape} (expected labels of shape {y_pred.shape[:-1]})")
    if y_true.dtype.kind == "f" or y_true.dtype.kind == "V":
        as_float = y_true.astype(np.float64)
        if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
            raise ValueError(f"{owner}: labels must be whole numbers (class indices)")
    labels = y_true.astype(np.int64)
    classes = y_pred.shape[-1]
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"{owner}: labels must be in [0, {classes}), got values from "
                         f"{labels.min()} to {labels.max()}")
    return labels


def _sample_weights(owner, sample_weight, values_shape, dtype):
    """Per-sample weights shaped to multiply the per-element terms, or None.

    ``values_shape`` is the shape of the unreduced losses (the predictions' shape without the
    last axis); the weights cover its leading axes (``(batch,)`` or ``(batch, steps)``) and the
    reduction stays Keras's "sum_over_batch_size": the weighted sum over the number of values.
    """
    if sample_weight is None:
        return None
    w = as_numeric_array(f"{owner} (sample_weight)", sample_weight).astype(dtype, copy=False)
    if w.ndim == len(values_shape) + 1 and w.shape[-1] == 1:
        w = w.reshape(w.shape[:-1])
    if w.ndim > len(values_shape) or w.shape != tuple(values_shape[:w.ndim]):
        raise ValueError(f"{owner}: sample_weight of shape {w.shape} does not match the losses "
                         f"of shape {tuple(values_shape)}")
    return w.reshape(w.shape + (1,) * (len(values_shape) + 1 - w.ndim))


class Loss:
    """Base class: ``loss(y_true, y_pred, sample_weight=None)`` is the mean loss as a float.

    With ``sample_weight`` (one weight per sample) each sample's loss is multiplied by its
    weight and the sum divided by the number of losses, as Keras's "sum_over_batch_size".
    """

    name = "loss"

    def __call__(self, y_true, y_pred, sample_weight=None):
        return self.value_and_grad(y_true, y_pred, sample_weight)[0]

    def value_and_grad(self, y_true, y_pred, sample_weight=None):
        raise NotImplementedError

    def get_config(self):
        return {"name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class _Crossentropy(Loss):
    sparse = False

    def __init__(self, from_logits=False, name=None):
        self.from_logits = bool(from_logits)
        if name is not None:
            self.name = name

    def _targets(self, owner, y_true, pred):
        if self.sparse:
            labels = _sparse_labels(owner, y_true, pred)
            onehot = np.zeros(pred.shape, dtype=pred.dtype)
            np.put_along_axis(onehot, labels[..., None], 1, axis=-1)
            return onehot
        return _labels_like(owner, y_true, pred)

    def value_and_grad_logits(self, y_true, logits, sample_weight=None):
        """Loss and its gradient with respect to ``logits`` (softmax applied here)."""
        z = _work(self.name, logits)
        t = self._targets(self.name, y_true, z)
        w = _sample_weights(self.name, sample_weight, z.shape[:-1], z.dtype)
        if w is not None:
            t = t * w
        n = max(1, int(np.prod(z.shape[:-1])))
        shifted = z - np.max(z, axis=-1, keepdims=True)
        log_norm = np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))
        log_p = shifted - log_norm
        value = float(-(t * log_p).sum(dtype=np.float64)) / n
        grad = (np.exp(log_p) * t.sum(axis=-1, keepdims=True) - t) / z.dtype.type(n)
        return value, grad

    def value_and_grad(self, y_true, y_pred, sample_weight=None):
        if self.from_logits:
            return self.value_and_grad_logits(y_true, y_pred, sample_weight)
        p = _work(self.name, y_pred)
        t = self._targets(self.name, y_true, p)
        w = _sample_weights(self.name, sample_weight, p.shape[:-1], p.dtype)
        if w is not None:
            t = t * w
        n = max(1, int(np.prod(p.shape[:-1])))
        eps = p.dtype.type(EPSILON)
        clipped = np.clip(p, eps, 1 - eps)
        value = float(-(t * np.log(clipped)).sum(dtype=np.float64)) / n
        inside = (p > eps) & (p < 1 - eps)
        grad = np.where(inside, -t / clipped, 0).astype(p.dtype) / p.dtype.type(n)
        return value, grad

    def get_config(self):
        return {"from_logits": self.from_logits, "name": self.name}


class CategoricalCrossentropy(_Crossentropy):
    """Crossentropy against one-hot (or soft) labels of the predictions' shape."""

    name = "categorical_crossentropy"


class SparseCategoricalCrossentropy(_Crossentropy):
    """Crossentropy against integer class labels of shape (batch,) or (batch, 1)."""

    name = "sparse_categorical_crossentropy"
    sparse = True


class MeanSquaredError(Loss):
    """mean((y_true - y_pred) ** 2)."""

    name = "mean_squared_error"

    def __init__(self, name=None):
        if name is not None:
            self.name = name

    def value_and_grad(self, y_true, y_pred, sample_weight=None):
        p = _work(self.name, y_pred)
        t = _same_rank_targets(self.name, y_true, p)
        diff = p - t
        size = max(1, diff.size)
        w = _sample_weights(self.name, sample_weight, p.shape[:-1], p.dtype)
        if w is None:
            value = float(np.square(diff).sum(dtype=np.float64)) / size
            return value, diff * diff.dtype.type(2.0 / size)
        value = float((np.square(diff) * w).sum(dtype=np.float64)) / size
        return value, diff * w * diff.dtype.type(2.0 / size)


def _finite(owner, name, value, low=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise TypeError(f"{owner}: {name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or (low is not None and v < low):
        bound = "" if low is None else f" >= {low}"
        raise ValueError(f"{owner}: {name} must be a finite number{bound}, got {value!r}")
    return v


def _weighted(elem, grad, w, size):
    """(sum of the per-element losses / size, their gradient), each element's loss and
    gradient multiplied by its sample's weight first when there are weights."""
    if w is not None:
        elem = elem * w
        grad = grad * w
    return float(elem.sum(dtype=np.float64)) / size, grad.astype(elem.dtype, copy=False)


class BinaryCrossentropy(Loss):
    """Binary crossentropy of probabilities (or logits, ``from_logits=True``) against 0/1 (or
    soft) labels of the same shape (``keras.losses.BinaryCrossentropy``).

    Parameters
    ----------
    from_logits : bool, default False
        ``y_pred`` are logits (the sigmoid is applied here, in a stable form).
    label_smoothing : float, default 0.0
        In [0, 1]: labels become ``y * (1 - label_smoothing) + 0.5 * label_smoothing``.
    name : str, default "binary_crossentropy"

    Notes
    -----
    Probabilities are clipped to ``[1e-7, 1 - 1e-7]`` (Keras's epsilon); the gradient is zero
    outside that range, as the clip's.  The per-element loss
    ``-(y log p + (1 - y) log(1 - p))`` is averaged over all elements.
    """

    name = "binary_crossentropy"

    def __init__(self, from_logits=False, label_smoothing=0.0, name=None):
        if not isinstance(from_logits, (bool, np.bool_)):
            raise TypeError(f"BinaryCrossentropy: from_logits must be a bool, got "
                            f"{from_logits!r}")
        self.from_logits = bool(from_logits)
        smoothing = _finite("BinaryCrossentropy", "label_smoothing", label_smoothing, low=0.0)
        if smoothing > 1:
            raise ValueError(f"BinaryCrossentropy: label_smoothing must be in [0, 1], got "
                             f"{label_smoothing!r}")
        self.label_smoothing = label_smoothing
        if name is not None:
            self.name = name

    def value_and_grad(self, y_true, y_pred, sample_weight=None):
        p = _work(self.name, y_pred)
        t = _same_rank_targets(self.name, y_true, p)
        w = _sample_weights(self.name, sample_weight, p.shape[:-1], p.dtype)
        if self.label_smoothing:
            ls = float(self.label_smoothing)
            t = t * p.dtype.type(1.0 - ls) + p.dtype.type(0.5 * ls)
        size = max(1, p.size)
        one = p.dtype.type(1)
        if self.from_logits:
            # max(z, 0) - z y + log(1 + exp(-|z|)); d/dz = sigmoid(z) - y
            e = np.exp(-np.abs(p))
            elem = np.maximum(p, 0) - p * t + np.log1p(e)
            sig = np.where(p >= 0, one / (one + e), e / (one + e))
            grad = (sig - t) / p.dtype.type(size)
        else:
            eps = p.dtype.type(EPSILON)
            c = np.clip(p, eps, one - eps)
            elem = -(t * np.log(c) + (one - t) * np.log(one - c))
            inside = (p >= eps) & (p <= one - eps)
            grad = np.where(inside, (c - t) / (c * (one - c)), 0).astype(p.dtype)
            grad /= p.dtype.type(size)
        return _weighted(elem, grad, w, size)

    def get_config(self):
        return {"name": self.name, "from_logits": self.from_logits,
                "label_smoothing": self.label_smoothing}


class MeanAbsoluteError(Loss):
    """mean(|y_true - y_pred|) (``keras.losses.MeanAbsoluteError``); the gradient at a zero
    difference is 0."""

    name = "mean_absolute_error"

    def __init__(self, name=None):
        if name is not None:
            self.name = name

    def value_and_grad(self, y_true, y_pred, sample_weight=None):
        p = _work(self.name, y_pred)
        diff = p - _same_rank_targets(self.name, y_true, p)
        size = max(1, diff.size)
        w = _sample_weights(self.name, sample_weight, p.shape[:-1], p.dtype)
        return _weighted(np.abs(diff), np.sign(diff) / diff.dtype.type(size), w, size)


class Huber(Loss):
    """Huber loss (``keras.losses.Huber``): with ``e = y_pred - y_true``, ``0.5 e**2`` where
    ``|e| <= delta``, else ``delta * |e| - 0.5 delta**2``; averaged over all elements.

    Parameters
    ----------
    delta : float, default 1.0
        >= 0, where the loss turns from quadratic to linear.
    name : str, default "huber_loss"
    """

    name = "huber_loss"

    def __init__(self, delta=1.0, name=None):
        self.delta = _finite("Huber", "delta", delta, low=0.0)
        if name is not None:
            self.name = name

    def value_and_grad(self, y_true, y_pred, sample_weight=None):
        p = _work(self.name, y_pred)
        err = p - _same_rank_targets(self.name, y_true, p)
        w = _sample_weights(self.name, sample_weight, p.shape[:-1], p.dtype)
        a = np.abs(err)
        d = p.dtype.type(self.delta)
        half = p.dtype.type(0.5)
        small = a <= d
        elem = np.where(small, half * err * err, d * a - half * d * d)
        size = max(1, err.size)
        grad = np.where(small, err, d * np.sign(err)) / p.dtype.type(size)
        return _weighted(elem, grad, w, size)

    def get_config(self):
        return {"name": self.name, "delta": self.delta}


class KLDivergence(Loss):
    """Kullback-Leibler divergence (``keras.losses.KLDivergence``): both sides clipped to
    ``[1e-7, 1]``, ``sum(y_true * log(y_true / y_pred))`` over the last axis, averaged over the
    samples.  The gradient with respect to ``y_pred`` is ``-y_true / y_pred`` inside the clip
    range, 0 outside."""

    name = "kl_divergence"

    def __init__(self, name=None):
        if name is not None:
            self.name = name

    def value_and_grad(self, y_true, y_pred, sample_weight=None):
        p = _work(self.name, y_pred)
        t = _same_rank_targets(self.name, y_true, p)
        w = _sample_weights(self.name, sample_weight, p.shape[:-1], p.dtype)
        eps, one = p.dtype.type(EPSILON), p.dtype.type(1)
        tc = np.clip(t, eps, one)
        pc = np.clip(p, eps, one)
        n = _samples(p)
        inside = (p >= eps) & (p <= one)
        grad = np.where(inside, -tc / pc, 0).astype(p.dtype) / p.dtype.type(n)
        return _weighted(tc * np.log(tc / pc), grad, w, n)


def categorical_crossentropy(y_true, y_pred, from_logits=False):
    """Mean categorical crossentropy (a float)."""
    return CategoricalCrossentropy(from_logits=from_logits)(y_true, y_pred)


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False):
    """Mean sparse categorical crossentropy (a float)."""
    return SparseCategoricalCrossentropy(from_logits=from_logits)(y_true, y_pred)


def mean_squared_error(y_true, y_pred):
    """Mean squared error (a float)."""
    return MeanSquaredError()(y_true, y_pred)


mse = mean_squared_error


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0):
    """Mean binary crossentropy (a float)."""
    return BinaryCrossentropy(from_logits=from_logits, label_smoothing=label_smoothing)(
        y_true, y_pred)


def mean_absolute_error(y_true, y_pred):
    """Mean absolute error (a float)."""
    return MeanAbsoluteError()(y_true, y_pred)


mae = mean_absolute_error


def huber(y_true, y_pred, delta=1.0):
    """Mean Huber loss (a float)."""
    return Huber(delta=delta)(y_true, y_pred)


def kl_divergence(y_true, y_pred):
    """Kullback-Leibler divergence averaged over the samples (a float)."""
    return KLDivergence()(y_true, y_pred)


kld = kl_divergence

# the loss kind's built-in objects (the live registry table)
_BY_NAME = _registry.builtin_table("loss")
_BY_NAME.update({
    "categorical_crossentropy": CategoricalCrossentropy,
    "CategoricalCrossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "SparseCategoricalCrossentropy": SparseCategoricalCrossentropy,
    "mean_squared_error": MeanSquaredError,
    "MeanSquaredError": MeanSquaredError,
    "mse": MeanSquaredError,
    "MSE": MeanSquaredError,
    "binary_crossentropy": BinaryCrossentropy,
    "BinaryCrossentropy": BinaryCrossentropy,
    "bce": BinaryCrossentropy,
    "BCE": BinaryCrossentropy,
    "mean_absolute_error": MeanAbsoluteError,
    "MeanAbsoluteError": MeanAbsoluteError,
    "mae": MeanAbsoluteError,
    "MAE": MeanAbsoluteError,
    "huber": Huber,
    "Huber": Huber,
    "huber_loss": Huber,
    "kl_divergence": KLDivergence,
    "KLDivergence": KLDivergence,
    "kld": KLDivergence,
    "KLD": KLDivergence,
    "kullback_leibler_divergence": KLDivergence,
})


def get(identifier, custom_objects=None):
    """A loss object from a name, a config entry or an instance.

    Raises
    ------
    ValueError
        Unknown name (the message lists the valid ones).
    TypeError
        Neither a str nor a Loss.
    """
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        found = _registry.lookup_name("loss", identifier, custom_objects, builtins=False,
                                      owner="losses.get")
        if found is not None:
            return _registry.instantiate(found.obj)
        cls = _BY_NAME.get(identifier)
        if cls is None:
            raise ValueError(f"losses.get: unknown loss {identifier!r}; valid names: "
                             f"{sorted(_BY_NAME)}")
        return cls()
    if isinstance(identifier, dict):
        found = _registry.lookup("loss", identifier, custom_objects, owner="losses.get")
        if found is not None:
            return _registry.instantiate(found.obj, identifier.get("config", {}))
    raise TypeError(f"losses.get: expected a loss name or a mixedcore.losses.Loss, got "
                    f"{type(identifier).__name__}")


def deserialize(config, custom_objects=None):
    """The loss of a name or a config entry (:func:`serialize`'s, or Keras's).

    Raises
    ------
    ValueError
        A name or class mixedcore and the user's objects do not have.
    """
    if isinstance(config, dict) and _registry.lookup("loss", config, custom_objects,
                                                    owner="losses.deserialize") is None:
        raise ValueError(f"losses.deserialize: unknown loss {config.get('class_name')!r}; "
                         f"valid names: {sorted(_BY_NAME)}")
    return get(config, custom_objects)


def serialize(loss):
    """Keras's entry of a loss object: ``module``, ``class_name``, ``config`` and
    ``registered_name`` (None for mixedcore's, ``"package>Name"`` for a registered class)."""
    cls = type(loss)
    builtin = _registry.is_builtin("loss", cls)
    return {"module": "keras.losses" if builtin else cls.__module__,
            "class_name": cls.__name__, "config": loss.get_config(),
            "registered_name": None if builtin else _registry.get_registered_name(cls)}
