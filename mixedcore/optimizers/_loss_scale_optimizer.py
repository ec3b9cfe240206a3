"""``LossScaleOptimizer``: an optimizer wrapper that applies loss scaling (tf.keras 2.4+).

Semantics are TensorFlow's (docs/loss_scaling.md, 'LossScaleOptimizer').  The scale itself is a
:class:`mixedcore.loss_scale.DynamicLossScale` or ``FixedLossScale``.

Design:
  A. The overflow check is ``kernels.all_finite`` over all gradients in one call (one pass, no
     temporary boolean arrays); ``get_unscaled_gradients`` copies the gradients and unscales
     the copies with ``kernels.unscale_and_check``.  None gradients pass through both.
  B. A LossScaleOptimizer is an optimizer (``optimizers.get`` takes it as is), so it cannot be
     wrapped again: TypeError, as in tf.keras.  An optimizer is wrapped by one
     LossScaleOptimizer at most (ValueError, as in tf.keras): two would each skip and scale on
     their own while sharing the slots.
  C. Of the inner optimizer, the wrapper reads only what tf.keras's wrapper does:
     ``learning_rate`` and ``iterations`` (read and written), ``use_ema`` and
     ``ema_momentum`` (read; mixedcore has no moving average to switch on).  Its other
     hyperparameters are an AttributeError through the wrapper, read or written (tf.keras
     raises on reading; a write would land on the wrapper and change nothing): they are
     reached as ``lso.inner_optimizer.beta_1``.
  D. ``apply_gradients`` warns once, as tf.keras does, when it runs without the loss having
     been scaled (``get_scaled_loss``) or the gradients unscaled (``get_unscaled_gradients``)
     since the previous step.
  E. Keras 3 configs carry the base optimizer's arguments (``weight_decay``, ``clipnorm``, ...)
     at their defaults; the constructor takes them at those values, as Keras 3 does, and
     refuses any other value (set it on the inner optimizer) or any other name.
"""
import warnings

import numpy as np

from mixedcore import kernels
from mixedcore import loss_scale as _loss_scale
from mixedcore.loss_scale import DynamicLossScale, FixedLossScale
from mixedcore.optimizers import _optimizer as _optimizers
from mixedcore.saving import object_registration as _registry

__all__ = ["LossScaleOptimizer"]


_DEFAULT_INITIAL_SCALE = 2 ** 15
_DEFAULT_GROWTH_STEPS = 2000
# The base optimizer's arguments Keras 3 writes into a LossScaleOptimizer's config, with the
# only values it takes (design E).
_KERAS3_BASE_DEFAULTS = {"weight_decay": None, "clipnorm": None, "global_clipnorm": None,
                         "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
                         "ema_overwrite_frequency": None, "loss_scale_factor": None,
                         "gradient_accumulation_steps": None}


def _check_keras3_base_arguments(kwargs):
    """Design E: the Keras 3 base-optimizer arguments at their defaults are dropped; any other
    value, or any other keyword, is a ValueError."""
    for key, default in _KERAS3_BASE_DEFAULTS.items():
        if key not in kwargs:
            continue
        value = kwargs.pop(key)
        if (value is None) != (default is None) or (default is not None and value != default):
            raise ValueError(f"LossScaleOptimizer does not take {key}={value!r} (only "
                             f"{default!r}, as Keras 3 writes it); set {key} on the inner "
                             f"optimizer instead")
    if kwargs:
        raise ValueError(f"LossScaleOptimizer: unexpected arguments {sorted(kwargs)}; it takes "
                         f"inner_optimizer, dynamic, initial_scale, dynamic_growth_steps and "
                         f"name")


class LossScaleOptimizer(_optimizers.Optimizer):
    """An optimizer wrapper that applies loss scaling (tf.keras 2.4+ ``LossScaleOptimizer``).

    Parameters
    ----------
    inner_optimizer : mixedcore.optimizers.Optimizer
        The optimizer to wrap (SGD, Adam, ...); not a LossScaleOptimizer.
    dynamic : bool, default True
        Dynamic loss scaling (a DynamicLossScale with multiplier 2) or a fixed scale.
    initial_scale : float, optional
        The starting (dynamic) or constant (fixed) scale.  Default 2**15 when dynamic;
        required when ``dynamic=False`` (then >= 1).
    dynamic_growth_steps : int, optional
        Finite steps before the dynamic scale doubles; default 2000 (a float holding a whole
        number, ``3.0``, is taken as that int).  Must be None when ``dynamic=False``.
    **kwargs
        Only Keras 3's base-optimizer arguments at their defaults (``weight_decay=None``,
        ``clipnorm=None``, ``use_ema=False``, ``ema_momentum=0.99``, ...), which Keras 3 writes
        into this wrapper's config.

    Raises
    ------
    TypeError
        ``inner_optimizer`` not an optimizer or a LossScaleOptimizer; ``dynamic`` not a bool.
    ValueError
        ``dynamic=False`` without ``initial_scale`` or with ``dynamic_growth_steps``; values
        out of range; a base-optimizer argument at another value than its default, or an
        unknown keyword.

    Notes
    -----
    A training step: ``scaled = opt.get_scaled_loss(loss)``; backpropagate ``scaled``;
    ``grads = opt.get_unscaled_gradients(grads)``; ``opt.apply_gradients(zip(grads, vars))``.
    ``apply_gradients`` checks the gradients (one ``kernels.all_finite`` pass over all of
    them): if any is NaN or infinite the inner update is skipped and the scale backs off;
    ``iterations`` advances either way.
    """

    def __init__(self, inner_optimizer, dynamic=True, initial_scale=None,
                 dynamic_growth_steps=None, name=None, **kwargs):
        _check_keras3_base_arguments(dict(kwargs))
        if isinstance(inner_optimizer, LossScaleOptimizer):
            raise TypeError(f"LossScaleOptimizer cannot wrap another LossScaleOptimizer, but "
                            f"got: {inner_optimizer!r}")
        if not isinstance(inner_optimizer, _optimizers.Optimizer):
            raise TypeError(f'LossScaleOptimizer: "inner_optimizer" must be a mixedcore '
                            f"optimizer (e.g. mixedcore.optimizers.SGD), but got: "
                            f"{type(inner_optimizer).__name__}")
        if not isinstance(dynamic, (bool, np.bool_)):
            raise TypeError(f'LossScaleOptimizer: "dynamic" must be a bool, but got: '
                            f"{dynamic!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"LossScaleOptimizer: name must be a string, got {name!r}")
        self.name = name or "loss_scale_optimizer"
        if getattr(inner_optimizer, "_wrapped_by_loss_scale", False):
            raise ValueError(f"LossScaleOptimizer: the inner optimizer {inner_optimizer!r} is "
                             f"already wrapped by a LossScaleOptimizer; an optimizer can only "
                             f"be wrapped by one")
        self._optimizer = inner_optimizer
        self._slots = {}
        self._scaled = self._unscaled = self._warned = False
        if dynamic:
            if initial_scale is None:
                initial_scale = _DEFAULT_INITIAL_SCALE
            if dynamic_growth_steps is None:
                dynamic_growth_steps = _DEFAULT_GROWTH_STEPS
            try:
                self._loss_scale = DynamicLossScale(initial_scale, dynamic_growth_steps, 2.0)
            except (TypeError, ValueError) as exc:
                raise type(exc)("LossScaleOptimizer: " + str(exc).replace(
                    "initial_loss_scale", "initial_scale").replace(
                    "increment_period", "dynamic_growth_steps")) from None
        else:
            if initial_scale is None:
                raise ValueError('LossScaleOptimizer: "initial_scale" must be specified if '
                                 '"dynamic" is False')
            if dynamic_growth_steps is not None:
                raise ValueError(f'LossScaleOptimizer: "dynamic_growth_steps" must be None if '
                                 f'"dynamic" is False, but got: {dynamic_growth_steps!r}')
            try:
                self._loss_scale = FixedLossScale(initial_scale)
            except ValueError as exc:
                raise ValueError("LossScaleOptimizer: " + str(exc).replace(
                    "loss_scale_value", "initial_scale")) from None

        inner_optimizer._wrapped_by_loss_scale = True

    # -- the wrapped optimizer ------------------------------------------------------------------

    def _inner_only(self, name):
        """True for a public hyperparameter of the inner optimizer the wrapper does not share
        (design C)."""
        inner = self.__dict__.get("_optimizer")
        return (inner is not None and not name.startswith("_") and name != "name"
                and name not in type(self).__dict__ and name in inner.get_config())

    def __getattr__(self, name):
        # only reached for names the wrapper lacks
        hint = (f"; {name!r} is a hyperparameter of the inner optimizer: read "
                f"inner_optimizer.{name}" if self._inner_only(name) else "")
        raise AttributeError(f"'LossScaleOptimizer' object has no attribute {name!r}{hint}")

    def __setattr__(self, name, value):
        if self._inner_only(name):
            raise AttributeError(f"LossScaleOptimizer: {name!r} is a hyperparameter of the "
                                 f"inner optimizer, which the wrapper does not set: set "
                                 f"inner_optimizer.{name} = {value!r}")
        object.__setattr__(self, name, value)

    @property
    def inner_optimizer(self):
        return self._optimizer

    def get_slot(self, var, slot_name):
        return self._optimizer.get_slot(var, slot_name)

    @property
    def iterations(self):
        """The inner optimizer's ``iterations`` (advances on skipped steps too)."""
        return self._optimizer.iterations

    @iterations.setter
    def iterations(self, value):
        self._optimizer.iterations = value

    @property
    def learning_rate(self):
        return self._optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self._optimizer.learning_rate = value

    @property
    def use_ema(self):
        return self._optimizer.use_ema

    @property
    def ema_momentum(self):
        return self._optimizer.ema_momentum

    # -- the loss scale -------------------------------------------------------------------------

    @property
    def dynamic(self):
        return isinstance(self._loss_scale, DynamicLossScale)

    @property
    def loss_scale(self):
        """The current loss scale (float)."""
        return self._loss_scale()

    @property
    def dynamic_counter(self):
        """Finite steps since the dynamic scale last changed; None for a fixed scale."""
        return self._loss_scale.num_good_steps if self.dynamic else None

    @property
    def initial_scale(self):
        ls = self._loss_scale
        return ls.initial_loss_scale if self.dynamic else ls()

    @property
    def dynamic_growth_steps(self):
        return self._loss_scale.increment_period if self.dynamic else None

    def get_scaled_loss(self, loss):
        """``loss * loss_scale`` (the scale converted to the loss's dtype, as tf.keras).

        ``loss`` may be a number, a numpy array / scalar, or a callable returning one (then a
        callable is returned).
        """
        if callable(loss):
            return lambda: self.get_scaled_loss(loss())
        self._scaled = True
        scale = self._loss_scale()
        dtype = getattr(loss, "dtype", None)
        if dtype is not None and isinstance(dtype, np.dtype) and dtype.kind == "f":
            with np.errstate(over="ignore"):
                return loss * dtype.type(scale)
        return loss * scale

    def get_unscaled_gradients(self, grads):
        """New arrays ``g * fp32(1 / fp64(loss_scale))``; None gradients pass through.

        16-bit gradients are unscaled through float32 and rounded back to nearest even;
        float64 gradients are multiplied by ``1 / loss_scale`` in float64
        (``kernels.unscale_and_check`` on copies).
        """
        self._unscaled = True
        out = [None if g is None else np.array(g, copy=True) for g in grads]
        kernels.unscale_and_check([g for g in out if g is not None], self._loss_scale())
        return out

    def apply_gradients(self, grads_and_vars):
        """Apply the step if every gradient is finite, and update the loss scale.

        Parameters
        ----------
        grads_and_vars : iterable of (ndarray or None, ndarray)
            Unscaled gradients and their variables (see ``get_unscaled_gradients``).

        Returns
        -------
        bool
            True when the inner optimizer's update was applied, False when the step was
            skipped (non-finite gradients with a dynamic scale).
        """
        pairs = _optimizers._check_pairs("LossScaleOptimizer", grads_and_vars)
        if not (self._scaled and self._unscaled) and not self._warned:
            self._warned = True
            warnings.warn("LossScaleOptimizer.apply_gradients: the loss was not scaled with "
                          "get_scaled_loss() or the gradients were not unscaled with "
                          "get_unscaled_gradients() before this step; without them, the "
                          "updates are wrong by the loss scale (this warning is shown once)",
                          UserWarning, stacklevel=2)
        self._scaled = self._unscaled = False
        should_apply = self._loss_scale.update([g for g, _ in pairs])
        if should_apply:
            self._optimizer.apply_gradients(pairs)
        else:
            self._optimizer.iterations = self._optimizer.iterations + 1
        return should_apply

    # -- configs --------------------------------------------------------------------------------

    def get_config(self):
        return {"inner_optimizer": _optimizers.serialize(self._optimizer),
                "dynamic": self.dynamic,
                "initial_scale": self.initial_scale,
                "dynamic_growth_steps": self.dynamic_growth_steps}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A new LossScaleOptimizer from ``get_config()`` output, or from the config Keras 3
        writes (with or without its base-optimizer keys at their defaults, design E).  A TF 2.3 config (keys "optimizer" and "loss_scale") is converted as tf.keras
        does.  ``custom_objects`` names the user's optimizer classes for the inner optimizer.
        """
        config = dict(config)
        if "loss_scale" in config:
            ls = config.pop("loss_scale")
            ls = (_loss_scale.deserialize(ls) if isinstance(ls, dict)
                  else _loss_scale.get(ls))
            if isinstance(ls, DynamicLossScale):
                if ls.multiplier != 2:
                    raise ValueError(f"LossScaleOptimizer.from_config: only a multiplier of 2 "
                                     f"is supported, got {ls.multiplier}")
                config.update(dynamic=True, initial_scale=ls.initial_loss_scale,
                              dynamic_growth_steps=ls.increment_period)
            elif isinstance(ls, FixedLossScale):
                config.update(dynamic=False, initial_scale=ls(), dynamic_growth_steps=None)
            else:
                raise ValueError(f"LossScaleOptimizer.from_config: cannot convert loss scale "
                                 f"{ls!r}")
        if "optimizer" in config:
            config["inner_optimizer"] = config.pop("optimizer")
        inner = config.get("inner_optimizer")
        if isinstance(inner, dict):
            config["inner_optimizer"] = _optimizers.deserialize(inner, custom_objects)
        return cls(**config)

    def __repr__(self):
        counter = f", dynamic_counter={self.dynamic_counter}" if self.dynamic else ""
        growth = (f", dynamic_growth_steps={self.dynamic_growth_steps}" if self.dynamic else "")
        return (f"LossScaleOptimizer(inner_optimizer={self._optimizer!r}, "
                f"dynamic={self.dynamic}, loss_scale={self.loss_scale!r}{counter}{growth})")


_registry.register_builtin("optimizer", LossScaleOptimizer)
