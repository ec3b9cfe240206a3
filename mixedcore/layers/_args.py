"""Argument checks shared by the layers, and the Keras 3 config keys they accept without
supporting them.

Every check names the layer (``owner``) and shows the value it received.  ``keras_only`` pops the
keys a real Keras 3 ``get_config()`` writes for features mixedcore does not have (constraints,
activity regularizers, quantization, LoRA, ...): their "off" value is accepted and dropped, any
other value is a ValueError that names the layer, the key and the value.
"""
import numpy as np

__all__ = ["positive_int", "non_negative_int", "number", "boolean", "int_tuple", "data_format",
           "keras_only", "owner_name", "UnsupportedValue"]


class UnsupportedValue(ValueError, TypeError):
    """A value of a form Keras or tf.keras writes that mixedcore cannot honour (a
    BatchNormalization over several axes).  A ValueError; also a TypeError, which is what such
    values raised before their form was read."""


def owner_name(cls_name, kwargs):
    """``"Class 'name'"`` when the layer's ``name`` is in ``kwargs``, else ``"Class"``: how a
    layer's argument checks name it."""
    name = kwargs.get("name")
    return f"{cls_name} '{name}'" if isinstance(name, str) and name else cls_name


def positive_int(owner, what, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}: {what} must be a positive int, got "
                        f"{type(value).__name__}: {value!r}")
    if value < 1:
        raise ValueError(f"{owner}: {what} must be a positive int, got {value}")
    return int(value)


def non_negative_int(owner, what, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}: {what} must be an int >= 0, got "
                        f"{type(value).__name__}: {value!r}")
    if value < 0:
        raise ValueError(f"{owner}: {what} must be an int >= 0, got {value}")
    return int(value)


def number(owner, what, value, low=None, high=None, low_open=False, high_open=False):
    """A finite real number as a float, optionally inside [low, high] (open ends on request)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{owner}: {what} must be a number, got {type(value).__name__}: "
                        f"{value!r}")
    value = float(value)
    bad = not np.isfinite(value)
    if low is not None:
        bad = bad or (value <= low if low_open else value < low)
    if high is not None:
        bad = bad or (value >= high if high_open else value > high)
    if bad:
        cond = []
        if low is not None:
            cond.append(f"{'>' if low_open else '>='} {low}")
        if high is not None:
            cond.append(f"{'<' if high_open else '<='} {high}")
        where = " " + " and ".join(cond) if cond else ""
        raise ValueError(f"{owner}: {what} must be a finite number{where}, got {value}")
    return value


def boolean(owner, what, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{owner}: {what} must be a bool, got {type(value).__name__}: "
                        f"{value!r}")
    return bool(value)


def int_tuple(owner, what, value, n, allow_zero=False):
    """An int, or a sequence of ``n`` ints, as a tuple of ``n`` ints (positive, or >= 0)."""
    check = non_negative_int if allow_zero else positive_int
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (check(owner, what, value),) * n
    if not isinstance(value, (tuple, list)) or len(value) != n:
        raise ValueError(f"{owner}: {what} must be an int or a tuple of {n} ints, got "
                         f"{value!r}")
    return tuple(check(owner, what, v) for v in value)


def data_format(owner, value):
    if value is None:
        return "channels_last"
    if value not in ("channels_last", "channels_first"):
        raise ValueError(f"{owner}: data_format must be 'channels_last' or 'channels_first', "
                         f"got {value!r}")
    return value


def keras_only(owner, kwargs, keys):
    """Pop the Keras-only ``keys`` from ``kwargs``: ``keys`` maps each name to the value (or
    tuple of values) that means the feature is off.  Anything else is a ValueError."""
    for key, off in keys.items():
        if key not in kwargs:
            continue
        value = kwargs.pop(key)
        allowed = off if isinstance(off, tuple) else (off,)
        if not any(_same(value, a) for a in allowed):
            shown = " or ".join(repr(a) for a in allowed)
            raise ValueError(f"{owner}: {key}={value!r} is not supported by mixedcore (only "
                             f"{shown} is accepted)")
    return kwargs


def _same(value, off):
    if off is None:
        return value is None
    if isinstance(off, bool):
        return isinstance(value, (bool, np.bool_)) and bool(value) == off
    if isinstance(off, dict):
        return isinstance(value, dict) and value == off
    return type(value) is type(off) and value == off
