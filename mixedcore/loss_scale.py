"""Loss scales: ``FixedLossScale`` and ``DynamicLossScale`` (the optimizer that applies them,
``LossScaleOptimizer``, is in :mod:`mixedcore.optimizers`).

Semantics are TensorFlow's (``tf.train.experimental.*LossScale`` of TF 2.0-2.3 and
``tf.keras.mixed_precision.LossScaleOptimizer`` of tf.keras 2.4+); docs/loss_scaling.md, 'When a
step is skipped'.

Design:
  A. The current scale of a DynamicLossScale is held as a float32 value, as TF holds it in a
     float32 variable: growth happens only when ``scale * multiplier`` is finite in float32
     (at most 2**127 with the default multiplier), and every scale is exactly representable
     when the loss is scaled in float32.
  B. The overflow check is ``kernels.all_finite`` over all gradients in one call (one pass, no
     temporary boolean arrays); ``get_unscaled_gradients`` copies the gradients and unscales
     the copies with ``kernels.unscale_and_check``.  None gradients pass through both.
  C. A LossScaleOptimizer is an optimizer (``optimizers.get`` takes it as is), so it cannot be
     wrapped again: TypeError, as in tf.keras.
"""
from __future__ import annotations

import abc
import math
import numbers
from typing import Any, Sequence

import numpy as np

from mixedcore import kernels
from mixedcore.saving import object_registration as _registry

__all__ = ["LossScale", "FixedLossScale", "DynamicLossScale", "get", "serialize", "deserialize"]


def _is_real(value):
    return (isinstance(value, (numbers.Real, np.number)) and
            not isinstance(value, (bool, np.bool_)) and not isinstance(value, np.complexfloating))


def _float(owner: str, name: str, value: Any) -> float:
    """float(value); a value too large for a float64 is a ValueError."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{owner}: {name} is too large: {value!r}") from None


def _whole(owner: str, name: str, value: Any) -> int:
    """``value`` as an int: an int, or a float holding a whole number (``3.0``, as Keras takes
    it); a bool or a non-number is a TypeError, a fraction, NaN or infinity a ValueError."""
    if isinstance(value, (bool, np.bool_)) or not _is_real(value):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__}: "
                        f"{value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    number = float(value)
    if not number.is_integer():
        raise ValueError(f"{owner}: {name} must be a whole number, got {value!r}")
    return int(number)


def _f32(value: float) -> float:
    """``value`` rounded to float32, as a Python float (inf when it overflows)."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def _flatten(grads):
    """Gradients as a flat list of arrays (nested lists / tuples / dicts flattened, None
    dropped, other array-likes converted)."""
    out = []
    stack = [grads]
    while stack:
        item = stack.pop()
        if item is None:
            continue
        if isinstance(item, np.ndarray):
            out.append(item)
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        else:
            out.append(np.asarray(item))
    return out


class LossScale(abc.ABC):
    """Base class of loss scales (``tf.train.experimental.LossScale``).

    A loss scale is called to get the current scale, and updated once per step with the
    (unscaled) gradients; ``update`` returns whether the step should be applied.
    """

    @abc.abstractmethod
    def __call__(self) -> float:
        """The current loss scale, a float."""

    @abc.abstractmethod
    def update(self, grads: Sequence[np.ndarray | None]) -> bool:
        """Update the scale from this step's gradients; return True when the step should be
        applied."""

    @abc.abstractmethod
    def get_config(self) -> dict[str, Any]:
        """The constructor arguments, a dict."""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LossScale:
        """A new loss scale from ``get_config()`` output (in its initial state)."""
        return cls(**config)


class FixedLossScale(LossScale):
    """A loss scale that never changes and never skips a step.

    Parameters
    ----------
    loss_scale_value : int or float
        The scale, >= 1.

    Raises
    ------
    ValueError
        A value that is not an int or float, or below 1 (TF raises ValueError for both).
    """

    def __init__(self, loss_scale_value: float) -> None:
        if not _is_real(loss_scale_value):
            raise ValueError(f"FixedLossScale: loss_scale_value must be a Python int or float, "
                             f"got {type(loss_scale_value).__name__}: {loss_scale_value!r}")
        value = _float("FixedLossScale", "loss_scale_value", loss_scale_value)
        if not value >= 1 or math.isinf(value):
            raise ValueError(f"FixedLossScale: loss_scale_value must be a finite number >= 1, "
                             f"got {loss_scale_value!r}")
        self._loss_scale_value = value

    def __call__(self) -> float:
        return self._loss_scale_value

    def update(self, grads: Sequence[np.ndarray | None]) -> bool:
        """Returns True: a fixed scale applies every step, finite or not (as TF)."""
        return True

    def get_config(self) -> dict[str, Any]:
        return {"loss_scale_value": self._loss_scale_value}

    def __repr__(self):
        return f"FixedLossScale({self._loss_scale_value!r})"


class DynamicLossScale(LossScale):
    """A loss scale that grows after a run of finite steps and backs off on overflow.

    Parameters
    ----------
    initial_loss_scale : float, default 2**15
        The starting scale: finite and > 0 (kept in float32, design A).
    increment_period : int, default 2000
        Finite steps in a row before the scale is multiplied by ``multiplier``; >= 1.  A float
        holding a whole number (``3.0``) is taken as that int.
    multiplier : float, default 2.0
        Growth and back-off factor; finite and >= 1.

    Notes
    -----
    ``update(grads)``, with ``good`` the number of finite steps since the last change:

    - all gradients finite: if ``good + 1 >= increment_period`` the scale becomes
      ``scale * multiplier`` when that is finite in float32 (else it stays) and ``good = 0``;
      otherwise ``good += 1``.  Returns True.
    - any gradient NaN or infinite: ``good = 0`` and ``scale = max(scale / multiplier, 1)``.
      Returns False: the step must be skipped.
    """

    _initial_loss_scale: float
    _increment_period: int
    _multiplier: float
    _current_loss_scale: float
    _num_good_steps: int

    def __init__(self, initial_loss_scale: float = 2 ** 15, increment_period: int = 2000,
                 multiplier: float = 2.0) -> None:
        if not _is_real(initial_loss_scale):
            raise TypeError(f"DynamicLossScale: initial_loss_scale must be a number, got "
                            f"{type(initial_loss_scale).__name__}")
        initial = _float("DynamicLossScale", "initial_loss_scale", initial_loss_scale)
        if not (math.isfinite(_f32(initial)) and _f32(initial) > 0):
            raise ValueError(f"DynamicLossScale: initial_loss_scale must be a finite positive "
                             f"float32 value, got {initial_loss_scale!r}")
        period = _whole("DynamicLossScale", "increment_period", increment_period)
        if period < 1:
            raise ValueError(f"DynamicLossScale: increment_period must be >= 1, got "
                             f"{increment_period!r}")
        if not _is_real(multiplier):
            raise TypeError(f"DynamicLossScale: multiplier must be a number, got "
                            f"{type(multiplier).__name__}")
        if not (math.isfinite(_float("DynamicLossScale", "multiplier", multiplier)) and
                float(multiplier) >= 1):
            raise ValueError(f"DynamicLossScale: multiplier must be a finite number >= 1, got "
                             f"{multiplier!r}")
        self._initial_loss_scale = initial
        self._increment_period = period
        self._multiplier = float(multiplier)
        self._current_loss_scale = _f32(initial)
        self._num_good_steps = 0

    @property
    def initial_loss_scale(self) -> float:
        return self._initial_loss_scale

    @property
    def increment_period(self) -> int:
        return self._increment_period

    @property
    def multiplier(self) -> float:
        return self._multiplier

    @property
    def current_loss_scale(self) -> float:
        """The scale now (float)."""
        return self._current_loss_scale

    @property
    def num_good_steps(self) -> int:
        """Finite steps since the scale last changed (or since the last overflow)."""
        return self._num_good_steps

    def __call__(self) -> float:
        return self._current_loss_scale

    def update(self, grads: Sequence[np.ndarray | None]) -> bool:
        """Check ``grads`` and move the scale; True when the step should be applied.

        Parameters
        ----------
        grads : ndarray, sequence of ndarray (None entries allowed), or nested lists / dicts
            This step's gradients (float16, bfloat16, float32 or float64).

        Returns
        -------
        bool
            True when every gradient element is finite.
        """
        finite = kernels.all_finite(*_flatten(grads))
        self._advance(finite)
        return finite

    def _advance(self, finite):
        """The state machine of the class docstring, given the check's result; the arithmetic
        is float32's (design A)."""
        scale, multiplier = np.float32(self._current_loss_scale), np.float32(self._multiplier)
        if finite:
            if self._num_good_steps + 1 >= self._increment_period:
                with np.errstate(over="ignore"):
                    grown = float(scale * multiplier)
                if math.isfinite(grown):
                    self._current_loss_scale = grown
                self._num_good_steps = 0
            else:
                self._num_good_steps += 1
        else:
            self._num_good_steps = 0
            with np.errstate(under="ignore"):
                self._current_loss_scale = max(float(scale / multiplier), 1.0)

    def get_config(self) -> dict[str, Any]:
        return {"initial_loss_scale": self._initial_loss_scale,
                "increment_period": self._increment_period,
                "multiplier": self._multiplier}

    def __repr__(self):
        return (f"DynamicLossScale(current_loss_scale={self._current_loss_scale!r}, "
                f"num_good_steps={self._num_good_steps}, "
                f"initial_loss_scale={self._initial_loss_scale!r}, "
                f"increment_period={self._increment_period}, multiplier={self._multiplier!r})")


# The built-in loss scales by class name (the registry's table).
_LOSS_SCALE_CLASSES: dict[str, type[LossScale]] = _registry.builtin_table("loss_scale")
_registry.register_builtins("loss_scale", [FixedLossScale, DynamicLossScale])


def serialize(loss_scale: LossScale) -> dict[str, Any]:
    """``{"class_name": ..., "config": ...}`` of a loss scale (tf.keras' format)."""
    if not isinstance(loss_scale, LossScale):
        raise TypeError(f"serialize: expected a LossScale, got {type(loss_scale).__name__}")
    entry = {"class_name": type(loss_scale).__name__, "config": loss_scale.get_config()}
    registered = _registry.registered_key(type(loss_scale))
    if registered is not None:
        entry["registered_name"] = registered
    return entry


def deserialize(config: dict[str, Any],
                custom_objects: dict[str, Any] | None = None) -> LossScale:
    """The loss scale described by ``serialize()`` output (in its initial state)."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"deserialize: expected a dict with 'class_name' and 'config', got "
                         f"{config!r}")
    found = _registry.lookup("loss_scale", config, custom_objects,
                             owner="loss_scale.deserialize")
    if found is None:
        known = sorted(set(_LOSS_SCALE_CLASSES) | set(custom_objects or {}))
        raise ValueError(f"deserialize: unknown loss scale class {config['class_name']!r}; "
                         f"expected one of {known}")
    return found.obj.from_config(config.get("config", {}))


def get(identifier: Any) -> LossScale | None:
    """A loss scale from an identifier (tf.keras' ``loss_scale.get``).

    An int or float gives a FixedLossScale, "dynamic" a DynamicLossScale with the defaults, a
    LossScale or None is returned as is, a ``serialize()`` dict is deserialized.

    Raises
    ------
    ValueError
        ``"Could not interpret loss scale identifier: ..."`` for anything else.
    """
    if identifier is None or isinstance(identifier, LossScale):
        return identifier
    if _is_real(identifier):
        return FixedLossScale(identifier)
    if isinstance(identifier, str) and identifier == "dynamic":
        return DynamicLossScale()
    if isinstance(identifier, dict) and "class_name" in identifier:
        return deserialize(identifier)
    raise ValueError(f"Could not interpret loss scale identifier: {identifier!r}")
