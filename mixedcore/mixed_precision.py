"""One import that mirrors ``keras.mixed_precision``.

``from mixedcore import mixed_precision`` gives the names a Keras 3 / tf.keras 2.4+ program
uses through ``keras.mixed_precision`` / ``tf.keras.mixed_precision``: ``DTypePolicy``,
``Policy``, ``set_dtype_policy``, ``dtype_policy``, ``set_global_policy``, ``global_policy``,
``LossScaleOptimizer`` and the deprecated ``experimental`` namespace.
"""
from mixedcore import experimental
from mixedcore.optimizers import LossScaleOptimizer
from mixedcore.dtype_policies import (
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

