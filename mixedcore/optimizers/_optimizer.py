"""Optimizers that update numpy arrays in place: ``SGD`` and ``Adam`` (Keras update rules).

Design:
  A. A variable is a writable numpy array; ``apply_gradients`` updates it in place, so layers
     that hold the arrays see the new values without a copy.  float32 and float64 variables
     are updated in their own dtype; float16 and bfloat16 variables are updated in float32 and
     rounded back (Keras would do the arithmetic in 16 bits; mixed policies keep float32
     variables anyway).
  B. The update formulas are those of Keras (``keras.optimizers.SGD`` / ``Adam``), with the
     hyperparameters converted to the variable's dtype before use:
       SGD       w -= lr * g
       momentum  m = momentum * m - lr * g;  w += m   (nesterov: w += momentum * m - lr * g)
       Adam      t = iterations + 1;  alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)
                 m += (g - m) * (1 - beta_1);  v += (g*g - v) * (1 - beta_2)
                 w -= alpha * m / (sqrt(v) + epsilon)
  C. Slots (momentum, m, v) are keyed by the variable object itself and created on first use.
  D. None gradients are skipped (Keras warns and skips them); a call where every gradient is
     None is an error, as in Keras.  ``iterations`` counts the calls of ``apply_gradients``.
"""
import math
import numbers

import ml_dtypes
import numpy as np

__all__ = ["Optimizer", "SGD", "Adam", "get", "serialize", "deserialize"]

_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32),
                 np.dtype(np.float64))
_WIDE = (np.dtype(np.float32), np.dtype(np.float64))


def _real(name, owner, value, low=None, high=None, low_open=False, high_open=False):
    """``value`` as a float after checking its type and range (ValueError / TypeError)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise TypeError(f"{owner}: {name} must be a real number, got {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    bad = not math.isfinite(v)
    if low is not None:
        bad = bad or (v <= low if low_open else v < low)
    if high is not None:
        bad = bad or (v >= high if high_open else v > high)
    if bad:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        raise ValueError(f"{owner}: {name} must be in {lo}{low}, {high}{hi}, got {value!r}")
    return v


class Optimizer:
    """Base class: the ``apply_gradients`` loop, ``iterations``, slots and configs.

    Subclasses implement ``_update(grad, var, lr, slots)`` and ``get_config``.
    """

    _slot_names = ()

    def __init__(self, learning_rate):
        self.learning_rate = learning_rate
        self._iterations = 0
        self._slots = {}

    # -- hyperparameters ------------------------------------------------------------------------

    @property
    def learning_rate(self):
        """The learning rate: a float, or a callable of ``iterations`` (a schedule)."""
        return self._learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        if callable(value):
            self._learning_rate = value
        else:
            self._learning_rate = _real("learning_rate", type(self).__name__, value, low=0.0)

    def _current_learning_rate(self):
        lr = self._learning_rate
        if callable(lr):
            lr = _real("learning_rate", type(self).__name__, lr(self._iterations), low=0.0)
        return lr

    @property
    def iterations(self):
        """Number of ``apply_gradients`` calls so far (an int, settable)."""
        return self._iterations

    @iterations.setter
    def iterations(self, value):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral,)):
            raise TypeError(f"{type(self).__name__}: iterations must be an int, got "
                            f"{type(value).__name__}")
        if value < 0:
            raise ValueError(f"{type(self).__name__}: iterations must be >= 0, got {value}")
        self._iterations = int(value)

    # -- updates --------------------------------------------------------------------------------

    def apply_gradients(self, grads_and_vars):
        """Apply one step of the optimizer to each variable, in place.

        Parameters
        ----------
        grads_and_vars : iterable of (ndarray or None, ndarray)
            Pairs of a gradient and the variable it belongs to.  A variable is a writable
            numpy array of a float dtype; its gradient has the same shape (any float dtype,
            converted to the variable's).  None gradients are skipped.

        Returns
        -------
        int
            ``iterations`` after the step.

        Raises
        ------
        TypeError
            A pair that is not (gradient, variable), a variable that is not a float ndarray,
            a gradient of a non-float dtype.
        ValueError
            Every gradient None, a shape mismatch, a read-only variable.
        """
        pairs = _check_pairs(type(self).__name__, grads_and_vars)
        lr = self._current_learning_rate()
        for grad, var in pairs:
            work = var if var.dtype in _WIDE else var.astype(np.float32)
            g = np.asarray(grad)
            if g.dtype != work.dtype:
                g = g.astype(work.dtype)
            self._update(g, work, lr, self._slots_for(var, work.dtype))
            if work is not var:
                var[...] = work
        self._iterations += 1
        return self._iterations

    def _slots_for(self, var, dtype):
        entry = self._slots.get(id(var))
        if entry is None or entry[0] is not var:
            entry = (var, {name: np.zeros(var.shape, dtype) for name in self._slot_names})
            self._slots[id(var)] = entry
        return entry[1]

    def get_slot(self, var, slot_name):
        """The slot array ``slot_name`` (e.g. "momentum", "m", "v") of ``var``.

        Raises
        ------
        KeyError
            When ``var`` has not been updated yet or has no such slot.
        """
        entry = self._slots.get(id(var))
        if entry is None or entry[0] is not var:
            raise KeyError(f"{type(self).__name__}: no slots for this variable yet")
        if slot_name not in entry[1]:
            raise KeyError(f"{type(self).__name__}: unknown slot {slot_name!r}; slots: "
                           f"{list(entry[1])}")
        return entry[1][slot_name]

    def _update(self, grad, var, lr, slots):
        raise NotImplementedError

    # -- configs --------------------------------------------------------------------------------

    def get_config(self):
        raise NotImplementedError

    @classmethod
    def from_config(cls, config):
        """A new optimizer from ``get_config()`` output (a Keras config's "name" is ignored)."""
        config = dict(config)
        config.pop("name", None)
        return cls(**config)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _check_pairs(owner, grads_and_vars):
    try:
        items = list(grads_and_vars)
    except TypeError:
        raise TypeError(f"{owner}.apply_gradients: grads_and_vars must be an iterable of "
                        f"(gradient, variable) pairs, got "
                        f"{type(grads_and_vars).__name__}") from None
    pairs = []
    for k, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(f"{owner}.apply_gradients: item {k} is not a (gradient, variable) "
                            f"pair: {type(item).__name__}")
        grad, var = item
        if not isinstance(var, np.ndarray) or var.dtype not in _FLOAT_DTYPES:
            what = f"dtype {var.dtype}" if isinstance(var, np.ndarray) else type(var).__name__
            raise TypeError(f"{owner}.apply_gradients: variable {k} must be a numpy array of "
                            f"dtype float16, bfloat16, float32 or float64, got {what}")
        if not var.flags.writeable:
            raise ValueError(f"{owner}.apply_gradients: variable {k} is read-only")
        if grad is None:
            continue
        g = np.asarray(grad)
        if g.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"{owner}.apply_gradients: gradient {k} has dtype {g.dtype}; "
                            f"expected a float dtype")
        if g.shape != var.shape:
            raise ValueError(f"{owner}.apply_gradients: gradient {k} has shape {g.shape}, its "
                             f"variable {var.shape}")
        pairs.append((g, var))
    if not pairs:
        raise ValueError(f"{owner}.apply_gradients: no gradients provided for any variable "
                         f"({len(items)} pairs, every gradient None)")
    return pairs


class SGD(Optimizer):
    """Gradient descent with optional momentum and Nesterov momentum (``keras.optimizers.SGD``).

    Parameters
    ----------
    learning_rate : float or callable, default 0.01
        >= 0, or a callable taking ``iterations`` and returning the rate.
    momentum : float, default 0.0
        In [0, 1].  0 is plain gradient descent.
    nesterov : bool, default False
        Nesterov momentum.

    Notes
    -----
    ``m = momentum * m - lr * g; w += m``, or with Nesterov ``w += momentum * m - lr * g``;
    without momentum ``w -= lr * g`` (Keras' formulas).
    """

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False):
        super().__init__(learning_rate)
        self.momentum = _real("momentum", "SGD", momentum, low=0.0, high=1.0)
        if not isinstance(nesterov, (bool, np.bool_)):
            raise TypeError(f"SGD: nesterov must be a bool, got {type(nesterov).__name__}")
        self.nesterov = bool(nesterov)
        self._slot_names = ("momentum",) if self.momentum != 0 else ()

    def _update(self, grad, var, lr, slots):
        t = var.dtype.type
        step = grad * t(lr)
        if self.momentum == 0:
            var -= step
            return
        m = slots["momentum"]
        m *= t(self.momentum)
        m -= step
        if self.nesterov:
            var += m * t(self.momentum) - step
        else:
            var += m

    def get_config(self):
        return {"learning_rate": self._learning_rate, "momentum": self.momentum,
                "nesterov": self.nesterov}


class Adam(Optimizer):
    """Adam (``keras.optimizers.Adam``).

    Parameters
    ----------
    learning_rate : float or callable, default 0.001
    beta_1 : float, default 0.9
        Decay of the first-moment estimate, in [0, 1).
    beta_2 : float, default 0.999
        Decay of the second-moment estimate, in [0, 1).
    epsilon : float, default 1e-7
        >= 0, added to ``sqrt(v)`` (Keras' "epsilon hat").

    Notes
    -----
    With ``t = iterations + 1`` and ``alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)``:
    ``m += (g - m) * (1 - beta_1)``, ``v += (g*g - v) * (1 - beta_2)``,
    ``w -= alpha * m / (sqrt(v) + epsilon)``.
    """

    _slot_names = ("m", "v")

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
        super().__init__(learning_rate)
        self.beta_1 = _real("beta_1", "Adam", beta_1, low=0.0, high=1.0, high_open=True)
        self.beta_2 = _real("beta_2", "Adam", beta_2, low=0.0, high=1.0, high_open=True)
        self.epsilon = _real("epsilon", "Adam", epsilon, low=0.0)

    def _update(self, grad, var, lr, slots):
        t = var.dtype.type
        step = self._iterations + 1
        alpha = lr * math.sqrt(1.0 - self.beta_2 ** step) / (1.0 - self.beta_1 ** step)
        m, v = slots["m"], slots["v"]
        m += (grad - m) * t(1.0 - self.beta_1)
        v += (grad * grad - v) * t(1.0 - self.beta_2)
        denom = np.sqrt(v)
        denom += t(self.epsilon)
        var -= (m * t(alpha)) / denom

    def get_config(self):
        return {"learning_rate": self._learning_rate, "beta_1": self.beta_1,
                "beta_2": self.beta_2, "epsilon": self.epsilon}


_BY_NAME = {"sgd": SGD, "adam": Adam}
# Classes ``deserialize`` knows by name; LossScaleOptimizer adds itself when its module loads.
_CLASSES = {"SGD": SGD, "Adam": Adam}


def serialize(optimizer):
    """``{"class_name": ..., "config": ...}`` of an optimizer (Keras' format)."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"serialize: expected a mixedcore optimizer, got "
                        f"{type(optimizer).__name__}")
    return {"class_name": type(optimizer).__name__, "config": optimizer.get_config()}


def deserialize(config):
    """The optimizer described by ``serialize()`` output.

    Raises
    ------
    ValueError
        An unknown class name or a malformed dict.
    """
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"deserialize: expected a dict with 'class_name' and 'config', got "
                         f"{config!r}")
    classes = _CLASSES
    name = config["class_name"]
    cls = classes.get(name) or _BY_NAME.get(str(name).lower())
    if cls is None:
        raise ValueError(f"deserialize: unknown optimizer class {name!r}; expected one of "
                         f"{sorted(classes)}")
    inner = config.get("config", {})
    if not isinstance(inner, dict):
        raise ValueError(f"deserialize: 'config' must be a dict, got {inner!r}")
    return cls.from_config(inner)


def get(identifier):
    """An optimizer from a name, a config dict, or an optimizer (returned as is).

    Parameters
    ----------
    identifier : str, dict or Optimizer
        "sgd" or "adam" (any case) for a new optimizer with default arguments; a
        ``serialize()`` dict; or an optimizer instance (a LossScaleOptimizer included).

    Raises
    ------
    ValueError
        An unknown name.
    TypeError
        Any other kind of object.
    """
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(f"Could not interpret optimizer identifier: {identifier!r}; "
                             f"expected one of {sorted(_BY_NAME)} (any case), a config dict "
                             f"or an optimizer")
        return cls()
    if isinstance(identifier, dict):
        return deserialize(identifier)
    raise TypeError(f"Could not interpret optimizer identifier of type "
                    f"{type(identifier).__name__}: {identifier!r}")
