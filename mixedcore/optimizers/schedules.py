"""Learning-rate schedules (``keras.optimizers.schedules``): callables of the optimizer's step.

An optimizer given a schedule as ``learning_rate`` calls it with ``iterations`` (the number of
steps already taken) before each step, as Keras does.  The values follow Keras 3's formulas; they
are computed in float64 (Keras computes them in float32, so they agree to float32 rounding).

Configs are Keras's: ``serialize`` gives ``{"module": "keras.optimizers.schedules",
"class_name": ..., "config": {...}, "registered_name": None}`` and ``deserialize`` reads that
form (and the older one without "module").
"""
import math
import numbers

import numpy as np

from mixedcore.saving import object_registration as _registry

__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay", "CosineDecay",
           "serialize", "deserialize"]


def _number(owner, name, value, low=None, low_open=False):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        raise TypeError(f"{owner}: {name} must be a real number, got {value!r}")
    v = float(value)
    bad = not math.isfinite(v)
    if low is not None:
        bad = bad or (v <= low if low_open else v < low)
    if bad:
        bound = "" if low is None else (f" > {low}" if low_open else f" >= {low}")
        raise ValueError(f"{owner}: {name} must be a finite number{bound}, got {value!r}")
    return value


def _step(owner, step):
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (numbers.Real, np.number)):
        raise TypeError(f"{owner}: step must be a number, got {step!r}")
    s = float(step)
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"{owner}: step must be a finite number >= 0, got {step!r}")
    return s


class LearningRateSchedule:
    """Base class: ``schedule(step)`` is the learning rate (a float) at optimizer step ``step``.

    Subclasses implement ``__call__(step)`` and ``get_config()``; ``from_config(config)`` calls
    the constructor with the config's keys.
    """

    def __call__(self, step):
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(step)")

    def get_config(self):
        raise NotImplementedError(f"{type(self).__name__} must implement get_config() to be "
                                  f"serialized")

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        try:
            args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        except NotImplementedError:
            args = ""
        return f"{type(self).__name__}({args})"


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``; with ``staircase`` the
    exponent is rounded down to an integer (``keras.optimizers.schedules.ExponentialDecay``).

    Parameters
    ----------
    initial_learning_rate : float
    decay_steps : number > 0
    decay_rate : float >= 0
    staircase : bool, default False
    name : str, default "ExponentialDecay"
    """

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False,
                 name="ExponentialDecay"):
        owner = "ExponentialDecay"
        self.initial_learning_rate = _number(owner, "initial_learning_rate",
                                             initial_learning_rate)
        self.decay_steps = _number(owner, "decay_steps", decay_steps, low=0, low_open=True)
        self.decay_rate = _number(owner, "decay_rate", decay_rate, low=0)
        if not isinstance(staircase, (bool, np.bool_)):
            raise TypeError(f"{owner}: staircase must be a bool, got {staircase!r}")
        self.staircase = bool(staircase)
        self.name = name

    def __call__(self, step):
        p = _step("ExponentialDecay", step) / float(self.decay_steps)
        if self.staircase:
            p = math.floor(p)
        return float(self.initial_learning_rate) * float(self.decay_rate) ** p

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate,
                "staircase": self.staircase, "name": self.name}


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[0]`` while ``step <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < step <= boundaries[i]``, ``values[-1]`` after the last boundary
    (``keras.optimizers.schedules.PiecewiseConstantDecay``).

    Parameters
    ----------
    boundaries : list of numbers, increasing
    values : list of floats, one more than ``boundaries``
    name : str, default "PiecewiseConstant"
    """

    def __init__(self, boundaries, values, name="PiecewiseConstant"):
        owner = "PiecewiseConstantDecay"
        if not isinstance(boundaries, (list, tuple)) or not isinstance(values, (list, tuple)):
            raise TypeError(f"{owner}: boundaries and values must be lists, got "
                            f"{type(boundaries).__name__} and {type(values).__name__}")
        if len(values) != len(boundaries) + 1 or not boundaries:
            raise ValueError(f"{owner}: values must have one more entry than boundaries (and "
                             f"boundaries at least one), got boundaries={list(boundaries)} of "
                             f"length {len(boundaries)} and values={list(values)} of length "
                             f"{len(values)}")
        for b in boundaries:
            _number(owner, "each boundary", b)
        for v in values:
            _number(owner, "each value", v)
        if any(later <= earlier for earlier, later in zip(boundaries, boundaries[1:])):
            raise ValueError(f"{owner}: boundaries must be strictly increasing, got "
                             f"{list(boundaries)}")
        self.boundaries = list(boundaries)
        self.values = list(values)
        self.name = name

    def __call__(self, step):
        s = _step("PiecewiseConstantDecay", step)
        for boundary, value in zip(self.boundaries, self.values):
            if s <= boundary:
                return float(value)
        return float(self.values[-1])

    def get_config(self):
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class CosineDecay(LearningRateSchedule):
    """Cosine decay with an optional linear warmup (``keras.optimizers.schedules.CosineDecay``).

    Without ``warmup_target``: with ``s = min(step, decay_steps)``,
    ``lr = initial_learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * s / decay_steps)) + alpha)``.
    With ``warmup_target``: for ``step < warmup_steps`` the rate goes linearly from
    ``initial_learning_rate`` to ``warmup_target``; then the cosine decay above runs from
    ``warmup_target`` over ``step - warmup_steps`` (capped at ``decay_steps``).

    Parameters
    ----------
    initial_learning_rate : float
    decay_steps : number > 0
    alpha : float, default 0.0
        The final rate as a fraction of the rate decayed from.
    name : str, default "CosineDecay"
    warmup_target : float, optional
    warmup_steps : number >= 0, default 0
    """

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay",
                 warmup_target=None, warmup_steps=0):
        owner = "CosineDecay"
        self.initial_learning_rate = _number(owner, "initial_learning_rate",
                                             initial_learning_rate)
        self.decay_steps = _number(owner, "decay_steps", decay_steps, low=0, low_open=True)
        self.alpha = _number(owner, "alpha", alpha)
        self.name = name
        self.warmup_target = None if warmup_target is None else _number(
            owner, "warmup_target", warmup_target)
        self.warmup_steps = _number(owner, "warmup_steps", warmup_steps, low=0)

    def _decay(self, s, start):
        fraction = s / float(self.decay_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * fraction))
        alpha = float(self.alpha)
        return start * ((1.0 - alpha) * cosine + alpha)

    def __call__(self, step):
        s = _step("CosineDecay", step)
        initial = float(self.initial_learning_rate)
        decay_steps = float(self.decay_steps)
        if self.warmup_target is None:
            return self._decay(min(s, decay_steps), initial)
        warmup = float(self.warmup_steps)
        target = float(self.warmup_target)
        s = min(s, decay_steps + warmup)
        if s < warmup:
            return (target - initial) * (s / warmup) + initial
        return self._decay(s - warmup, target)

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "name": self.name,
                "warmup_target": self.warmup_target, "warmup_steps": self.warmup_steps}


# The built-in schedules by class name (the registry's table).
_CLASSES = _registry.builtin_table("schedule")
_registry.register_builtins("schedule", [ExponentialDecay, PiecewiseConstantDecay, CosineDecay])


def serialize(schedule):
    """Keras's dict of a schedule: module, class_name, config, registered_name."""
    if not isinstance(schedule, LearningRateSchedule):
        raise TypeError(f"schedules.serialize: expected a LearningRateSchedule, got "
                        f"{type(schedule).__name__}")
    cls = type(schedule)
    builtin = _registry.is_builtin("schedule", cls)
    return {"module": "keras.optimizers.schedules" if builtin else cls.__module__,
            "class_name": cls.__name__, "config": schedule.get_config(),
            "registered_name": None if builtin else _registry.get_registered_name(cls)}


def deserialize(config, custom_objects=None):
    """The schedule described by ``serialize()`` output or a Keras config.

    Parameters
    ----------
    config : dict
        ``{"class_name": ..., "config": {...}}`` (other keys are ignored).
    custom_objects : dict, optional
        ``{name: class}`` of the user's own ``LearningRateSchedule`` subclasses, looked up first
        by ``registered_name`` then by ``class_name``.

    Raises
    ------
    ValueError
        A malformed dict or an unknown class.
    TypeError
        A ``custom_objects`` entry that is not a LearningRateSchedule subclass.
    """
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"schedules.deserialize: expected a dict with 'class_name' and "
                         f"'config', got {config!r}")
    if custom_objects is not None and not isinstance(custom_objects, dict):
        raise TypeError(f"schedules.deserialize: custom_objects must be a dict of name -> "
                        f"class, got {type(custom_objects).__name__}")
    name = str(config["class_name"]).split(">")[-1]
    found = _registry.lookup("schedule", config, custom_objects,
                             owner="schedules.deserialize")
    cls = found.obj if found is not None else None
    if cls is None:
        raise ValueError(f"schedules.deserialize: unknown learning-rate schedule {name!r}; "
                         f"expected one of {sorted(_CLASSES)} or a class given in "
                         f"custom_objects")
    if not (isinstance(cls, type) and issubclass(cls, LearningRateSchedule)):
        raise TypeError(f"schedules.deserialize: {name!r} must be a subclass of "
                        f"LearningRateSchedule, got {cls!r}")
    inner = config.get("config", {})
    if not isinstance(inner, dict):
        raise ValueError(f"schedules.deserialize: 'config' must be a dict, got {inner!r}")
    try:
        return cls.from_config(inner)
    except TypeError as exc:                      # missing or unknown arguments
        raise ValueError(f"schedules.deserialize: the {name} config {inner!r} does not fit "
                         f"({exc})") from None
