"""Keras-like layers that follow a dtype policy and run on mixedcore's kernels.

Every layer takes ``dtype=`` (None for the global policy at construction, a policy name such as
"mixed_bfloat16", a policy, a numpy dtype or a serialized policy dict), stores its weights in the
policy's variable dtype and computes in its compute dtype (docs/layers.md, 'Policies and
autocasting').  docs/layers.md
lists them with their arguments and numerics.
"""
from mixedcore.saving import object_registration as _registry
from mixedcore.layers._base import Layer
from mixedcore.layers import _ops
from mixedcore.layers._activation import (ELU, Activation, LeakyReLU, PReLU, ReLU, Softmax)
from mixedcore.layers._applications import CustomScaleLayer, LayerScale
from mixedcore.layers._attention import MultiHeadAttention
from mixedcore.layers._conv import Conv1D, Conv2D, DepthwiseConv2D, SeparableConv2D
from mixedcore.layers._core import Dense, Embedding, Input, InputLayer, Lambda
from mixedcore.layers._einsum_dense import EinsumDense
from mixedcore.layers._merging import (Add, Average, Concatenate, Maximum, Minimum, Multiply,
                                       Subtract, add, average, concatenate, maximum, minimum,
                                       multiply, subtract)
from mixedcore.layers._normalization import BatchNormalization, LayerNormalization
from mixedcore.layers._pooling import (AveragePooling1D, AveragePooling2D, GlobalAveragePooling1D,
                                       GlobalAveragePooling2D, GlobalMaxPooling1D,
                                       GlobalMaxPooling2D, MaxPooling1D, MaxPooling2D)
from mixedcore.layers._preprocessing import CenterCrop, Normalization, Rescaling, Resizing
from mixedcore.layers._regularization import (Dropout, GaussianNoise, SpatialDropout1D,
                                              SpatialDropout2D)
from mixedcore.layers._reshaping import (Cropping2D, Flatten, Permute, RepeatVector, Reshape,
                                         UpSampling2D, ZeroPadding1D, ZeroPadding2D)

__all__ = ["Layer", "Input", "InputLayer", "Dense", "EinsumDense", "Embedding", "Activation", "Softmax", "ReLU",
           "LeakyReLU", "PReLU", "ELU", "Dropout", "SpatialDropout1D", "SpatialDropout2D",
           "GaussianNoise", "Flatten", "Reshape", "Permute", "RepeatVector", "ZeroPadding1D",
           "ZeroPadding2D", "UpSampling2D", "Cropping2D", "LayerNormalization",
           "BatchNormalization", "MultiHeadAttention", "Add", "Subtract", "Multiply", "Average",
           "Maximum", "Minimum", "Concatenate", "add", "subtract", "multiply", "average",
           "maximum", "minimum", "concatenate", "Conv1D", "Conv2D", "DepthwiseConv2D",
           "SeparableConv2D", "MaxPooling1D", "MaxPooling2D", "AveragePooling1D",
           "AveragePooling2D", "GlobalAveragePooling1D", "GlobalAveragePooling2D",
           "GlobalMaxPooling1D", "GlobalMaxPooling2D", "Rescaling", "Normalization", "Resizing",
           "CenterCrop", "LayerScale", "CustomScaleLayer", "Lambda", "serialize", "deserialize"]

# The built-in layer classes, by the class name configs give them (the registry's table).
_CLASSES = _registry.builtin_table("layer")
_registry.register_builtins("layer", [
    InputLayer, Dense, EinsumDense, Embedding, Activation, Softmax, ReLU, LeakyReLU, PReLU, ELU, Dropout,
    SpatialDropout1D, SpatialDropout2D, GaussianNoise, Flatten, Reshape, Permute, RepeatVector,
    ZeroPadding1D, ZeroPadding2D, UpSampling2D, Cropping2D, LayerNormalization,
    BatchNormalization, MultiHeadAttention, Add, Subtract, Multiply, Average, Maximum, Minimum,
    Concatenate, Conv1D, Conv2D, DepthwiseConv2D, SeparableConv2D, MaxPooling1D, MaxPooling2D,
    AveragePooling1D, AveragePooling2D, GlobalAveragePooling1D, GlobalAveragePooling2D,
    GlobalMaxPooling1D, GlobalMaxPooling2D, Rescaling, Normalization, Resizing, CenterCrop,
    LayerScale, CustomScaleLayer, Lambda])
# Keras operations recorded as graph nodes (layers/_ops.py), apart from the layers of the same
# class names
_registry.register_builtins("layer", {_ops.operation_class(op._keras_class): op
                                      for op in _ops.OPERATIONS})


def register(cls, name=None):
    """Make ``cls`` known to :func:`deserialize` under ``name`` (its class name by default)."""
    return _registry.register_builtin("layer", cls, name)


def _jsonable_shape(shape):
    if isinstance(shape, tuple) and all(d is None or isinstance(d, int) for d in shape):
        return list(shape)
    if isinstance(shape, dict):
        return {k: _jsonable_shape(v) for k, v in shape.items()}
    if isinstance(shape, (list, tuple)):
        return [_jsonable_shape(v) for v in shape]
    return shape


def serialize(layer):
    """Keras 3's dict form of a layer: ``{"module", "class_name", "config", "registered_name",
    "build_config"}`` (classes mixedcore does not know are named by their module)."""
    cls = type(layer)
    name = cls.__dict__.get("_keras_class", cls.__name__)
    if getattr(cls, "_is_operation", False):
        return {"module": cls._keras_module, "class_name": name, "config": layer.get_config(),
                "registered_name": name}
    known = _registry.is_builtin("layer", cls, name)
    packaged = None if known else next(
        (k for k, v in _CLASSES.items() if v is cls and ">" in k and not k.startswith("ops>")),
        None)               # a class registered under another package's name (keras_hub's)
    entry = {"module": getattr(cls, "_keras_module", "keras.layers") if known or packaged
             else cls.__module__,
             "class_name": name, "config": layer.get_config(),
             "registered_name": ("Functional" if name == "Functional" else None) if known
             else packaged or _registry.get_registered_name(cls)}
    if layer.built and not isinstance(layer, InputLayer):
        shape = layer._config_build_shape() if hasattr(layer, "_set_graph") \
            else layer.input_shape
        entry["build_config"] = {"input_shape": _jsonable_shape(shape)}
        shapes = None if hasattr(layer, "_set_graph") else _call_shapes(layer)
        if shapes is not None and len(shapes) > 1:
            entry["build_config"] = {"shapes_dict": shapes}
    return entry


def _call_shapes(layer):
    """{"<argument>_shape": shape} of the tensor arguments of the layer's first call in a graph
    (masks left out), named by ``call``'s parameters: the build config Keras writes, and reads
    with ``build(**shapes)``, for a layer called with several tensors (MultiHeadAttention's
    query, value, key)."""
    from mixedcore.layers._node import KerasTensor
    if not layer._inbound_nodes:
        return None
    node = layer._inbound_nodes[0]
    try:
        params = [p for p in _signature(layer.call).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None

    def shape_of(value):
        if isinstance(value, KerasTensor):
            return list(value.shape)
        if isinstance(value, (list, tuple)) and value and \
                all(isinstance(v, KerasTensor) for v in value):
            return [list(v.shape) for v in value]
        return None

    named = list(zip((p.name for p in params), node.args)) + list(node.kwargs.items())
    shapes = {}
    for name, value in named:
        if name == "mask" or name.endswith("_mask"):
            continue
        shape = shape_of(value)
        if shape is not None:
            shapes[f"{name}_shape"] = shape
    return shapes


def deserialize(config, custom_objects=None):
    """A layer (or a model) from :func:`serialize`'s form, Keras 3's or tf.keras 2.x's;
    ``custom_objects`` maps class names to the user's own classes."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"layers.deserialize: expected a dict with 'class_name' and 'config', "
                         f"got {config!r}"[:300])
    name = config["class_name"]
    found = _registry.lookup("layer", config, custom_objects, owner="layers.deserialize")
    if found is None:
        raise ValueError(f"layers.deserialize: unknown layer class {name!r}; supported: "
                         f"{sorted(_CLASSES)} (pass custom_objects={{{name!r}: YourClass}} for "
                         f"your own layers)")
    cls = found.obj
    inner = config.get("config", {})
    if not isinstance(inner, dict):
        raise ValueError(f"layers.deserialize: the config of {name!r} must be a dict, got "
                         f"{type(inner).__name__}")
    if hasattr(cls, "_set_graph") or "custom_objects" in _from_config_params(cls):
        return cls.from_config(dict(inner), custom_objects=custom_objects)
    return cls.from_config(dict(inner))


def _signature(fn):
    import inspect
    return inspect.signature(fn)


def _from_config_params(cls):
    try:
        return _signature(cls.from_config).parameters
    except (TypeError, ValueError):
        return {}
