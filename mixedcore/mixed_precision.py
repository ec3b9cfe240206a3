"""One import that mirrors ``keras.mixed_precision``.

``from mixedcore import mixed_precision`` gives the names a Keras 3 / tf.keras 2.4+ program
uses through ``keras.mixed_precision`` / ``tf.keras.mixed_precision``: ``DTypePolicy``,
``Policy``, ``set_dtype_policy``, ``dtype_policy``, ``set_global_policy``, ``global_policy``,
``LossScaleOptimizer`` and the deprecated ``experimental`` namespace.
"""
from mixedcore import experimental
from mixedcore.policy import (
    DTypePolicy,
    Policy,
    dtype_policy,
    global_policy,
    set_dtype_policy,
    set_global_policy,
)

__all__ = [
    "DTypePolicy",
    "Policy",
    "set_dtype_policy",
    "dtype_policy",
    "set_global_policy",
    "global_policy",
    "LossScaleOptimizer",
    "experimental",
]


def __getattr__(name):
    # The optimizer lives in mixedcore.loss_scale, imported on first use (see
    # mixedcore.experimental, decision D).
    if name == "LossScaleOptimizer":
        from mixedcore.loss_scale import LossScaleOptimizer
        return LossScaleOptimizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"LossScaleOptimizer"})
