"""Keras-like layers that follow a dtype policy and run on mixedcore's kernels.

Every layer takes ``dtype=`` (None for the global policy at construction, a policy name such as
"mixed_bfloat16", a policy, a numpy dtype or a serialized policy dict), stores its weights in the
policy's variable dtype and computes in its compute dtype (SPEC.md section 6).  docs/layers.md
lists them with their arguments and numerics.
"""
from mixedcore.layers._base import Layer
from mixedcore.layers._activation import (ELU, Activation, LeakyReLU, PReLU, ReLU, Softmax)
from mixedcore.layers._attention import MultiHeadAttention
from mixedcore.layers._core import Dense, Embedding, Input, InputLayer
from mixedcore.layers._merging import (Add, Average, Concatenate, Maximum, Minimum, Multiply,
                                       Subtract, add, average, concatenate, maximum, minimum,
                                       multiply, subtract)
from mixedcore.layers._normalization import BatchNormalization, LayerNormalization
from mixedcore.layers._regularization import (Dropout, GaussianNoise, SpatialDropout1D,
                                              SpatialDropout2D)
from mixedcore.layers._reshaping import (Cropping2D, Flatten, Permute, RepeatVector, Reshape,
                                         UpSampling2D, ZeroPadding1D, ZeroPadding2D)

__all__ = ["Layer", "Input", "InputLayer", "Dense", "Embedding", "Activation", "Softmax", "ReLU",
           "LeakyReLU", "PReLU", "ELU", "Dropout", "SpatialDropout1D", "SpatialDropout2D",
           "GaussianNoise", "Flatten", "Reshape", "Permute", "RepeatVector", "ZeroPadding1D",
           "ZeroPadding2D", "UpSampling2D", "Cropping2D", "LayerNormalization",
           "BatchNormalization", "MultiHeadAttention", "Add", "Subtract", "Multiply", "Average",
           "Maximum", "Minimum", "Concatenate", "add", "subtract", "multiply", "average",
           "maximum", "minimum", "concatenate", "serialize", "deserialize"]

_CLASSES = {cls.__name__: cls for cls in (
    InputLayer, Dense, Embedding, Activation, Softmax, ReLU, LeakyReLU, PReLU, ELU, Dropout,
    SpatialDropout1D, SpatialDropout2D, GaussianNoise, Flatten, Reshape, Permute, RepeatVector,
    ZeroPadding1D, ZeroPadding2D, UpSampling2D, Cropping2D, LayerNormalization,
    BatchNormalization, MultiHeadAttention, Add, Subtract, Multiply, Average, Maximum, Minimum,
    Concatenate)}


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
