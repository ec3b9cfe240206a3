"""Keras-like layers that follow a dtype policy and run on mixedcore's kernels.

Every layer takes ``dtype=`` (None for the global policy at construction, a policy name such as
"mixed_bfloat16", a policy, a numpy dtype or a serialized policy dict), stores its weights in the
policy's variable dtype and computes in its compute dtype (SPEC.md section 6).
"""
from mixedcore.layers._base import Layer
from mixedcore.layers._activation import Activation, ReLU, Softmax
from mixedcore.layers._core import Dense, Input, InputLayer
from mixedcore.layers._regularization import Dropout
from mixedcore.layers._reshaping import Flatten
from mixedcore.layers._normalization import LayerNormalization

__all__ = ["Layer", "Input", "InputLayer", "Dense", "Activation", "Softmax", "ReLU", "Dropout",
           "Flatten", "LayerNormalization", "serialize", "deserialize"]

_CLASSES = {cls.__name__: cls for cls in (InputLayer, Dense, Activation, Softmax, ReLU, Dropout,
                                          Flatten, LayerNormalization)}


def serialize(layer):
    """``{"class_name": ..., "config": ...}`` for a layer."""
    return {"class_name": type(layer).__name__, "config": layer.get_config()}


def deserialize(config, custom_objects=None):
    """A layer from :func:`serialize`'s form; ``custom_objects`` maps extra class names."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"layers.deserialize: expected a dict with 'class_name' and 'config', "
                         f"got {config!r}")
    classes = dict(_CLASSES)
    if custom_objects:
        classes.update(custom_objects)
    cls = classes.get(config["class_name"])
    if cls is None:
        raise ValueError(f"layers.deserialize: unknown layer class {config['class_name']!r}; "
                         f"known: {sorted(classes)} (pass custom_objects for your own)")
    return cls.from_config(dict(config.get("config", {})))
