"""Weight regularizers (``keras.regularizers``): L1, L2, L1L2.

A regularizer is called with a weight array (in the layer's variable dtype, float32 under the mixed
policies: docs/layers.md, 'Policies and autocasting') and returns the penalty as a Python float;
``gradient(w)`` returns the penalty's gradient in the same dtype.  Any object with both methods
may be passed to a layer.

Names and config entries are looked up in the one registry (:mod:`mixedcore.saving.
object_registration`): the user's regularizers (``custom_objects``, scopes, registered ones)
first, then these, under Keras's class names and snake-case names.
"""
import numpy as np

from mixedcore.saving import object_registration as _registry

__all__ = ["Regularizer", "L1", "L2", "L1L2", "l1", "l2", "l1_l2", "get", "serialize",
           "deserialize"]


def _check_factor(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name}: factor must be a number, got {type(value).__name__}")
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name}: factor must be finite and >= 0, got {value}")
    return value


class Regularizer:
    """Base class: ``__call__(w) -> float`` and ``gradient(w) -> ndarray``."""

    def __call__(self, w):
        raise NotImplementedError

    def gradient(self, w):
        raise NotImplementedError

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class L1L2(Regularizer):
    """``l1 * sum(|w|) + l2 * sum(w ** 2)``."""

    def __init__(self, l1=0.0, l2=0.0):
        self.l1 = _check_factor("L1L2", l1)
        self.l2 = _check_factor("L1L2", l2)

    def __call__(self, w):
        w = np.asarray(w)
        total = 0.0
        if self.l1:
            total += self.l1 * float(np.abs(w).sum(dtype=w.dtype))
        if self.l2:
            total += self.l2 * float(np.square(w).sum(dtype=w.dtype))
        return total

    def gradient(self, w):
        w = np.asarray(w)
        g = np.zeros_like(w)
        if self.l1:
            g += w.dtype.type(self.l1) * np.sign(w)
        if self.l2:
            g += w.dtype.type(2.0 * self.l2) * w
        return g

    def get_config(self):
        return {"l1": self.l1, "l2": self.l2}

    def __repr__(self):
        return f"{type(self).__name__}(l1={self.l1}, l2={self.l2})"


class L1(L1L2):
    """``l1 * sum(|w|)`` (default factor 0.01, as Keras)."""

    def __init__(self, l1=0.01):
        super().__init__(l1=l1)

    def get_config(self):
        return {"l1": self.l1}


class L2(L1L2):
    """``l2 * sum(w ** 2)`` (default factor 0.01, as Keras)."""

    def __init__(self, l2=0.01):
        super().__init__(l2=l2)

    def get_config(self):
        return {"l2": self.l2}


l1 = L1
l2 = L2


def l1_l2(l1=0.01, l2=0.01):
    """``L1L2`` with Keras' defaults for this spelling (both factors 0.01)."""
    return L1L2(l1=l1, l2=l2)


# the names a string may give (a maker called without arguments), then Keras's class names
_registry.register_builtins("regularizer", {"l1": L1, "l2": L2, "l1_l2": l1_l2, "l1l2": l1_l2})
_registry.register_builtins("regularizer", [L1, L2, L1L2])


def _names():
    return sorted(k for k in _registry.builtin_table("regularizer") if k.islower())


def get(identifier, custom_objects=None):
    """A regularizer from None, a name ("l1", "l2", "l1_l2", or one of the user's), a config
    dict or an instance."""
    if identifier is None:
        return None
    if isinstance(identifier, str):
        found = _registry.lookup_name("regularizer", identifier, custom_objects,
                                      builtins=False, owner="regularizers.get")
        if found is not None:
            return _registry.instantiate(found.obj)
        if identifier not in _names():
            raise ValueError(f"regularizers.get: unknown regularizer {identifier!r}; "
                             f"valid names: {_names()}")
        return _registry.builtin_table("regularizer")[identifier]()    # a class or maker
    if isinstance(identifier, dict):
        found = _registry.lookup("regularizer", identifier, custom_objects,
                                 owner="regularizers.get")
        cls = found.obj if found is not None else None
        if not isinstance(cls, type):
            raise ValueError(f"regularizers.get: unknown regularizer config {identifier!r}")
        return _registry.instantiate(cls, identifier.get("config", {}))
    if callable(identifier) and hasattr(identifier, "gradient"):
        return identifier
    raise TypeError(f"regularizers.get: expected None, a name, a config dict or an object with "
                    f"__call__ and gradient, got {type(identifier).__name__}")


def deserialize(config, custom_objects=None):
    """The regularizer of a name or a config entry (:func:`serialize`'s, or Keras's)."""
    return get(config, custom_objects)


def serialize(regularizer):
    """``{"class_name": ..., "config": ...}`` of a regularizer (None stays None); one of the
    user's with a ``get_config`` also gets Keras's ``module`` and ``registered_name``."""
    if regularizer is None:
        return None
    cls = type(regularizer)
    if _registry.is_builtin("regularizer", cls):
        return {"class_name": cls.__name__, "config": regularizer.get_config()}
    if hasattr(regularizer, "get_config"):
        return {"module": cls.__module__, "class_name": cls.__name__,
                "config": regularizer.get_config(),
                "registered_name": _registry.get_registered_name(cls)}
    return regularizer
