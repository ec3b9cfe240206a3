"""Optimizers that update numpy arrays in place: ``SGD``, ``Adam``, ``AdamW``, ``RMSprop``,
``Adagrad`` and ``Nadam`` (Keras update rules).

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
       AdamW     Adam with weight_decay (default 0.004) applied as below
       RMSprop   v = rho * v + (1 - rho) * g*g;  centered: a = rho * a + (1 - rho) * g,
                 d = v - a*a + epsilon, else d = v + epsilon;  inc = lr * g / sqrt(d)
                 momentum > 0: m = momentum * m + inc; w -= m, else w -= inc
       Adagrad   acc += g*g (acc starts at initial_accumulator_value);
                 w -= lr * g / sqrt(acc + epsilon)
       Nadam     u_t = beta_1 * (1 - 0.5 * 0.96**t), the momentum cache
                 U_t = u_1 * ... * u_t (``u_product``, updated once per step);
                 m, v as Adam;  m_hat = u_{t+1} m / (1 - U_t u_{t+1}) + (1 - u_t) g / (1 - U_t)
                 v_hat = v / (1 - beta_2**t);  w -= lr * m_hat / (sqrt(v_hat) + epsilon)
     Weight decay (every optimizer): w -= w * weight_decay * lr before the update.
  C. Slots (momentum, m, v) are keyed by the variable object itself and created on first use.
  D. None gradients are skipped (Keras warns and skips them); a call where every gradient is
     None is an error, as in Keras.  ``iterations`` counts the calls of ``apply_gradients``.
"""
import math
import numbers
import re

import numpy as np

from mixedcore._dtypes import BF16
from mixedcore.optimizers import schedules as _schedules
from mixedcore.saving import object_registration as _registry

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Nadam", "get",
           "serialize", "deserialize"]

_FLOAT_DTYPES = (np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64))
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

    _slot_names: "tuple[str, ...]" = ()
    _slot_fill: "dict[str, float]" = {}     # slot name -> initial value (zeros otherwise)
    # how tf.keras's legacy optimizer of the same name updates, when that differs from the
    # rule here (``from_config`` refuses its configs then)
    _tf_keras_legacy_rule: "str | None" = None

    def __init__(self, learning_rate, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, use_ema=False, ema_momentum=0.99,
                 ema_overwrite_frequency=None, loss_scale_factor=None,
                 gradient_accumulation_steps=None, name=None, **kwargs):
        owner = type(self).__name__
        decay = kwargs.pop("decay", None)
        if kwargs:
            raise TypeError(f"{owner}: unexpected argument(s) {sorted(kwargs)}; Keras "
                            f"optimizers take learning_rate, weight_decay, clipnorm, clipvalue, "
                            f"global_clipnorm, use_ema, ema_momentum, ema_overwrite_frequency, "
                            f"loss_scale_factor, gradient_accumulation_steps, name and their "
                            f"own hyperparameters")
        if decay is not None and decay != 0:
            raise ValueError(f"{owner}: decay={decay!r} (the tf.keras 2 learning-rate decay) is "
                             f"not supported; give learning_rate a schedule (a callable of "
                             f"iterations) instead")
        self.learning_rate = learning_rate
        self.weight_decay = None if weight_decay is None else _real(
            "weight_decay", owner, weight_decay, low=0.0)
        clips = {"clipnorm": clipnorm, "clipvalue": clipvalue, "global_clipnorm": global_clipnorm}
        given = {k: v for k, v in clips.items() if v is not None}
        if len(given) > 1:
            raise ValueError(f"{owner}: only one of clipnorm, clipvalue and global_clipnorm can "
                             f"be set, got {given}")
        for key, value in given.items():
            clips[key] = _real(key, owner, value, low=0.0)
        self.clipnorm = clips["clipnorm"]
        self.clipvalue = clips["clipvalue"]
        self.global_clipnorm = clips["global_clipnorm"]
        if not isinstance(use_ema, (bool, np.bool_)):
            raise TypeError(f"{owner}: use_ema must be a bool, got {use_ema!r}")
        if use_ema:
            raise ValueError(f"{owner}: use_ema=True (an exponential moving average of the "
                             f"weights) is not supported")
        self.use_ema = False
        self.ema_momentum = _real("ema_momentum", owner, ema_momentum, low=0.0, high=1.0)
        self.ema_overwrite_frequency = ema_overwrite_frequency
        if loss_scale_factor is not None:
            raise ValueError(f"{owner}: loss_scale_factor={loss_scale_factor!r} is not "
                             f"supported; scale the loss with LossScaleOptimizer")
        self.loss_scale_factor = None
        if gradient_accumulation_steps not in (None, 1):
            raise ValueError(f"{owner}: gradient_accumulation_steps="
                             f"{gradient_accumulation_steps!r} is not supported (each "
                             f"apply_gradients call is one step)")
        self.gradient_accumulation_steps = None
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{owner}: name must be a string, got {name!r}")
        self.name = name or _snake(owner)
        self._iterations = 0
        self._slots = {}
        self._no_decay = ()

    # -- hyperparameters ------------------------------------------------------------------------

    @property
    def learning_rate(self):
        """The learning rate: a float, or a callable of ``iterations`` (a
        :class:`~mixedcore.optimizers.schedules.LearningRateSchedule` or any function)."""
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

    def exclude_from_weight_decay(self, var_list=None):
        """Keep weight decay off the arrays in ``var_list`` (compared by identity)."""
        self._no_decay = tuple(var_list or ())

    def _decays(self, var):
        return not any(var is a for a in self._no_decay)

    def _clip(self, grads):
        """Keras's clipping: per gradient by norm, by the global norm, or by value."""
        if self.clipnorm:
            out = []
            for g in grads:
                norm = math.sqrt(float(np.sum(np.square(g, dtype=np.float64))))
                out.append(g * g.dtype.type(self.clipnorm / max(norm, self.clipnorm))
                           if norm > 0 else g)
            return out
        if self.global_clipnorm:
            total = math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads))
            scale = self.global_clipnorm / max(total, self.global_clipnorm) \
                if math.isfinite(total) else math.nan
            return [g * g.dtype.type(scale) for g in grads]
        if self.clipvalue:
            v = self.clipvalue
            return [np.clip(g, -v, v) for g in grads]
        return grads

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
        self._begin_step()
        works, grads = [], []
        for grad, var in pairs:
            work = var if var.dtype in _WIDE else var.astype(np.float32)
            g = np.asarray(grad)
            if g.dtype != work.dtype:
                g = g.astype(work.dtype)
            works.append(work)
            grads.append(g)
        grads = self._clip(grads)
        for (_, var), work, g in zip(pairs, works, grads):
            if self.weight_decay and self._decays(var):
                work -= work * work.dtype.type(self.weight_decay * lr)
            self._update(g, work, lr, self._slots_for(var, work.dtype))
            if work is not var:
                var[...] = work
        self._iterations += 1
        return self._iterations

    def _begin_step(self):
        """Called once per step, before the variables are updated (state shared by all)."""

    def __setstate__(self, state):
        self.__dict__.update(state)
        # slots are found by the id of their variable: unpickled variables have new ids
        if isinstance(self.__dict__.get("_slots"), dict):
            self._slots = {id(entry[0]): entry for entry in self._slots.values()}

    def _slots_for(self, var, dtype):
        entry = self._slots.get(id(var))
        if entry is None or entry[0] is not var:
            entry = (var, {name: np.full(var.shape, self._slot_fill.get(name, 0.0), dtype)
                           for name in self._slot_names})
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
        """Keras 3's optimizer config: the common keys, then the subclass's hyperparameters.
        A learning-rate schedule is given as its ``schedules.serialize`` dict."""
        lr = self._learning_rate
        if isinstance(lr, _schedules.LearningRateSchedule):
            lr = _schedules.serialize(lr)
        return {"name": self.name, "learning_rate": lr,
                "weight_decay": self.weight_decay, "clipnorm": self.clipnorm,
                "global_clipnorm": self.global_clipnorm, "clipvalue": self.clipvalue,
                "use_ema": self.use_ema, "ema_momentum": self.ema_momentum,
                "ema_overwrite_frequency": self.ema_overwrite_frequency,
                "loss_scale_factor": self.loss_scale_factor,
                "gradient_accumulation_steps": self.gradient_accumulation_steps}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A new optimizer from ``get_config()`` output, or from a config Keras 3 or tf.keras
        wrote (tf.keras 2's ``lr`` is read as ``learning_rate``; ``decay`` must be 0).  A
        learning rate given as a dict is a serialized schedule, read by
        ``schedules.deserialize`` with ``custom_objects``."""
        config = dict(config)
        if cls._tf_keras_legacy_rule is not None and _is_tf_keras_legacy(config):
            raise ValueError(
                f"{cls.__name__}.from_config: the config is that of tf.keras's legacy "
                f"{cls.__name__} (is_legacy_optimizer="
                f"{config.get('is_legacy_optimizer', 'absent')!r}, decay="
                f"{config.get('decay')!r}), which {cls._tf_keras_legacy_rule}; mixedcore's "
                f"{cls.__name__} follows Keras 3 and tf.keras 2.11+")
        for key in ("is_legacy_optimizer", "jit_compile"):     # tf.keras bookkeeping
            config.pop(key, None)
        if "lr" in config and "learning_rate" not in config:
            config["learning_rate"] = config.pop("lr")
        lr = config.get("learning_rate")
        if isinstance(lr, dict):
            config["learning_rate"] = _schedules.deserialize(lr, custom_objects=custom_objects)
        return cls(**config)

    def __repr__(self):
        common = Optimizer.get_config(self)
        defaults = {"name": _snake(type(self).__name__), "ema_momentum": 0.99, "use_ema": False}
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items()
                         if k == "learning_rate" or k not in common
                         or v != defaults.get(k, None))
        return f"{type(self).__name__}({args})"


def _is_tf_keras_legacy(config):
    """Whether an optimizer config is one of tf.keras's legacy optimizers
    (``tf.keras.optimizers.legacy``, the only ones before TF 2.11): it says so with
    ``is_legacy_optimizer``, or, written before that key existed, has tf.keras 2's ``decay``
    and none of the keys of the optimizers that replaced them (``use_ema``)."""
    flag = config.get("is_legacy_optimizer")
    if flag is not None:
        return bool(flag)
    return "decay" in config and "use_ema" not in config


def _snake(name):
    """Keras's default names: "SGD" -> "sgd", "RMSprop" -> "rm_sprop"."""
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


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

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, **kwargs):
        super().__init__(learning_rate, **kwargs)
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
        config = super().get_config()
        config.update({"momentum": self.momentum, "nesterov": self.nesterov})
        return config


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

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, **kwargs):
        super().__init__(learning_rate, **kwargs)
        if not isinstance(amsgrad, (bool, np.bool_)):
            raise TypeError(f"Adam: amsgrad must be a bool, got {amsgrad!r}")
        self.amsgrad = bool(amsgrad)
        if self.amsgrad:
            self._slot_names = ("m", "v", "vhat")
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
        if self.amsgrad:
            np.maximum(slots["vhat"], v, out=slots["vhat"])
            v = slots["vhat"]
        denom = np.sqrt(v)
        denom += t(self.epsilon)
        var -= (m * t(alpha)) / denom

    def get_config(self):
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
                       "amsgrad": self.amsgrad})
        return config


class AdamW(Adam):
    """Adam with decoupled weight decay (``keras.optimizers.AdamW``).

    Parameters
    ----------
    learning_rate : float or callable, default 0.001
    weight_decay : float, default 0.004
        >= 0; ``w -= w * weight_decay * lr`` before each Adam update.  None is an error (as in
        Keras).
    beta_1, beta_2, epsilon, amsgrad
        As for :class:`Adam`.
    """

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, amsgrad=False, **kwargs):
        if weight_decay is None:
            raise ValueError("AdamW: weight_decay must be a float, got None")
        super().__init__(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                         amsgrad=amsgrad, weight_decay=weight_decay, **kwargs)


class RMSprop(Optimizer):
    """RMSprop (``keras.optimizers.RMSprop``), Keras's default optimizer.

    Parameters
    ----------
    learning_rate : float or callable, default 0.001
    rho : float, default 0.9
        Decay of the mean square of the gradients, in [0, 1].
    momentum : float, default 0.0
        In [0, 1]; > 0 accumulates the increments in a "momentum" slot.
    epsilon : float, default 1e-7
        >= 0, added to the mean square inside the square root.
    centered : bool, default False
        Divide by the estimated variance (mean square minus the squared mean gradient) instead.

    Notes
    -----
    ``v = rho * v + (1 - rho) * g**2``; centered: ``a = rho * a + (1 - rho) * g``,
    ``inc = lr * g / sqrt(v - a**2 + epsilon)``, else ``inc = lr * g / sqrt(v + epsilon)``;
    with momentum ``m = momentum * m + inc; w -= m``, else ``w -= inc``.  Slots: "velocity",
    "momentum", "average_gradient" (Keras's names).
    """

    _tf_keras_legacy_rule = ("adds epsilon outside the square root when momentum is 0 "
                             "(w -= lr * g / (sqrt(v) + epsilon))")

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False,
                 **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.rho = _real("rho", "RMSprop", rho, low=0.0, high=1.0)
        self.momentum = _real("momentum", "RMSprop", momentum, low=0.0, high=1.0)
        self.epsilon = _real("epsilon", "RMSprop", epsilon, low=0.0)
        if not isinstance(centered, (bool, np.bool_)):
            raise TypeError(f"RMSprop: centered must be a bool, got {centered!r}")
        self.centered = bool(centered)
        names = ["velocity"]
        if self.momentum > 0:
            names.append("momentum")
        if self.centered:
            names.append("average_gradient")
        self._slot_names = tuple(names)

    def _update(self, grad, var, lr, slots):
        t = var.dtype.type
        rho = t(self.rho)
        v = slots["velocity"]
        v *= rho
        v += t(1.0 - self.rho) * np.square(grad)
        if self.centered:
            a = slots["average_gradient"]
            a *= rho
            a += t(1.0 - self.rho) * grad
            denom = v - np.square(a)
            denom += t(self.epsilon)
        else:
            denom = v + t(self.epsilon)
        increment = (grad * t(lr)) / np.sqrt(denom)
        if self.momentum > 0:
            m = slots["momentum"]
            m *= t(self.momentum)
            m += increment
            var -= m
        else:
            var -= increment

    def get_config(self):
        config = super().get_config()
        config.update({"rho": self.rho, "momentum": self.momentum, "epsilon": self.epsilon,
                       "centered": self.centered})
        return config


class Adagrad(Optimizer):
    """Adagrad (``keras.optimizers.Adagrad``).

    Parameters
    ----------
    learning_rate : float or callable, default 0.001
    initial_accumulator_value : float, default 0.1
        >= 0, the starting value of the "accumulator" slot.
    epsilon : float, default 1e-7
        >= 0.

    Notes
    -----
    ``acc += g**2; w -= lr * g / sqrt(acc + epsilon)``.
    """

    _slot_names = ("accumulator",)
    _tf_keras_legacy_rule = "adds epsilon outside the square root (w -= lr * g / (sqrt(acc) + " \
                            "epsilon))"

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7,
                 **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.initial_accumulator_value = _real("initial_accumulator_value", "Adagrad",
                                               initial_accumulator_value, low=0.0)
        self.epsilon = _real("epsilon", "Adagrad", epsilon, low=0.0)
        self._slot_fill = {"accumulator": self.initial_accumulator_value}

    def _update(self, grad, var, lr, slots):
        t = var.dtype.type
        acc = slots["accumulator"]
        acc += np.square(grad)
        var -= (grad * t(lr)) / np.sqrt(acc + t(self.epsilon))

    def get_config(self):
        config = super().get_config()
        config.update({"initial_accumulator_value": self.initial_accumulator_value,
                       "epsilon": self.epsilon})
        return config


class Nadam(Optimizer):
    """Adam with Nesterov momentum (``keras.optimizers.Nadam``, Keras 3's formula).

    Parameters
    ----------
    learning_rate : float or callable, default 0.001
    beta_1 : float, default 0.9
        In [0, 1).
    beta_2 : float, default 0.999
        In [0, 1).
    epsilon : float, default 1e-7
        >= 0.

    Notes
    -----
    At step ``t = iterations + 1`` the momentum cache is ``u_t = beta_1 * (1 - 0.5 * 0.96**t)``
    and ``u_product`` (1 before the first step) is multiplied by ``u_t`` once per step.  Then
    ``m += (g - m) * (1 - beta_1)``, ``v += (g*g - v) * (1 - beta_2)``,
    ``m_hat = u_{t+1} * m / (1 - u_product * u_{t+1}) + (1 - u_t) * g / (1 - u_product)``,
    ``v_hat = v / (1 - beta_2**t)``, ``w -= lr * m_hat / (sqrt(v_hat) + epsilon)``.
    Slots: "momentum", "velocity".
    """

    _slot_names = ("momentum", "velocity")

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, **kwargs):
        super().__init__(learning_rate, **kwargs)
        self.beta_1 = _real("beta_1", "Nadam", beta_1, low=0.0, high=1.0, high_open=True)
        self.beta_2 = _real("beta_2", "Nadam", beta_2, low=0.0, high=1.0, high_open=True)
        self.epsilon = _real("epsilon", "Nadam", epsilon, low=0.0)
        self.u_product = 1.0

    def _cache(self, step):
        return self.beta_1 * (1.0 - 0.5 * 0.96 ** step)

    def _begin_step(self):
        self.u_product *= self._cache(self._iterations + 1)

    def _update(self, grad, var, lr, slots):
        t = var.dtype.type
        step = self._iterations + 1
        u_t, u_next = self._cache(step), self._cache(step + 1)
        u_prod = self.u_product
        m, v = slots["momentum"], slots["velocity"]
        m += (grad - m) * t(1.0 - self.beta_1)
        v += (grad * grad - v) * t(1.0 - self.beta_2)
        m_hat = m * t(u_next / (1.0 - u_prod * u_next))
        m_hat += grad * t((1.0 - u_t) / (1.0 - u_prod))
        denom = np.sqrt(v * t(1.0 / (1.0 - self.beta_2 ** step)))
        denom += t(self.epsilon)
        var -= (m_hat * t(lr)) / denom

    def get_config(self):
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon})
        return config


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop, "adagrad": Adagrad,
            "nadam": Nadam}
# Classes ``deserialize`` knows by name (the registry's table); LossScaleOptimizer adds itself
# when its module loads.
_CLASSES = _registry.builtin_table("optimizer")
_registry.register_builtins("optimizer", [SGD, Adam, AdamW, RMSprop, Adagrad, Nadam])


def serialize(optimizer):
    """``{"class_name": ..., "config": ...}`` of an optimizer (Keras' format)."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"serialize: expected a mixedcore optimizer, got "
                        f"{type(optimizer).__name__}")
    entry = {"class_name": type(optimizer).__name__, "config": optimizer.get_config()}
    registered = _registry.registered_key(type(optimizer))
    if registered is not None:
        entry["registered_name"] = registered
    return entry


def deserialize(config, custom_objects=None):
    """The optimizer described by ``serialize()`` output, or by a config Keras 3 or tf.keras
    wrote (their "module" and "registered_name" keys are read as Keras reads them).  Class names
    are read in any case, with tf.keras's other names: ``ExperimentalAdam``,
    ``ExperimentalSGD``, ``ExperimentalAdagrad`` (TF 2.9-2.10), ``LossScaleOptimizerV3`` and
    ``LossScaleOptimizerV1`` (a LossScaleOptimizer).  tf.keras's legacy RMSprop and Adagrad,
    whose updates differ from Keras 3's, are a ValueError.

    Parameters
    ----------
    config : dict
        ``{"class_name": ..., "config": {...}}``.
    custom_objects : dict, optional
        ``{name: class}`` of the user's own optimizer classes (subclasses of ``Optimizer``),
        looked up first by ``registered_name`` then by ``class_name``; also used for the inner
        optimizer of a LossScaleOptimizer.

    Raises
    ------
    ValueError
        An unknown class name or a malformed dict.
    TypeError
        A ``custom_objects`` entry that is not an Optimizer subclass.
    """
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"deserialize: expected a dict with 'class_name' and 'config', got "
                         f"{config!r}")
    if custom_objects is not None and not isinstance(custom_objects, dict):
        raise TypeError(f"deserialize: custom_objects must be a dict of name -> class, got "
                        f"{type(custom_objects).__name__}")
    name = config["class_name"]
    found = _registry.lookup("optimizer", config, custom_objects,
                             owner="optimizers.deserialize")
    cls = found.obj if found is not None else _class_by_name(name)
    if cls is None:
        raise ValueError(f"deserialize: unknown optimizer class {name!r}; expected one of "
                         f"{sorted(_CLASSES)} or a class given in custom_objects")
    if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
        raise TypeError(f"deserialize: custom_objects[{name!r}] must be a subclass of "
                        f"mixedcore.optimizers.Optimizer, got {cls!r}")
    inner = config.get("config", {})
    if not isinstance(inner, dict):
        raise ValueError(f"deserialize: 'config' must be a dict, got {inner!r}")
    return cls.from_config(inner, custom_objects=custom_objects)


# tf.keras 2.x's other names of these classes: the optimizers of TF 2.9-2.10's
# ``optimizers.experimental`` and the loss-scale wrappers (LossScaleOptimizerV3 around the
# optimizers of TF 2.11+, LossScaleOptimizerV1 the name TF 2.3 and earlier used); its
# deserializer reads any class name in any case.
_TF_KERAS_NAMES = {"experimentaladam": "Adam", "experimentalsgd": "SGD",
                   "experimentaladagrad": "Adagrad", "lossscaleoptimizerv1": "LossScaleOptimizer",
                   "lossscaleoptimizerv3": "LossScaleOptimizer"}


def _class_by_name(name):
    """mixedcore's optimizer class of a Keras or tf.keras class name (any case), or None."""
    lower = str(name).lower()
    lower = _TF_KERAS_NAMES.get(lower, lower).lower()
    for key, cls in _CLASSES.items():
        if key.lower() == lower:
            return cls
    return None


def get(identifier):
    """An optimizer from a name, a config dict, or an optimizer (returned as is).

    Parameters
    ----------
    identifier : str, dict or Optimizer
        "sgd", "adam", "adamw", "rmsprop", "adagrad" or "nadam" (any case) for a new optimizer
        with default arguments; a
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
