"""``keras.quantizers``: the quantization configs, the abs-max quantizer and the int4 packing
(docs/quantization.md).

Every function computes as Keras 3.15 does on the host (its ``to_numpy=True`` path, which
``quantize`` uses for weights): numpy arithmetic in the input's dtype, ``np.round`` (half to
even), so a kernel quantized here and one quantized by Keras are the same bytes.

- ``abs_max_quantize``: ``scale = hi / (max|x| + epsilon)`` over ``axis``,
  ``q = clip(round(x * scale), lo, hi)``; the value is ``q / scale``.
- ``abs_max_quantize_grouped_with_zero_point``: groups of ``block_size`` rows (axis 0) with a
  scale ``(max - min + epsilon) / (hi - lo)`` and a zero point per group and column; the value
  is ``(q - zero) * scale``.
- ``pack_int4`` / ``unpack_int4``: two int4 values per byte along an axis, the first of each
  pair in the low nibble.
- ``quantize_and_dequantize``: float8's ``cast(clip(x / scale)) * scale``.
- ``min_max_quantize`` / ``MinMaxQuantizer`` (mixedcore's, not in Keras): asymmetric int8 codes
  with a zero point per row for the activations of int8 layers, in float32:
  ``scale = 255 / ((max(x, 0) - min(x, 0)) + epsilon)``, ``zero = round(-min(x, 0) * scale) -
  128``, ``q = clip(round(x * scale) + zero, -128, 127)``; the value is ``(q - zero) / scale``.
- Configs: ``Int8QuantizationConfig``, ``Int4QuantizationConfig`` (``block_size``, default
  128), ``Float8QuantizationConfig``, with Keras's checks and configs.
"""
from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike

from mixedcore._dtypes import np_dtype
from mixedcore.saving import object_registration as _registry

__all__ = ["QUANTIZATION_MODES", "EPSILON", "abs_max_quantize",
           "abs_max_quantize_grouped_with_zero_point", "pack_int4", "unpack_int4",
           "quantize_and_dequantize", "min_max_quantize", "Quantizer", "AbsMaxQuantizer",
           "MinMaxQuantizer", "QuantizationConfig",
           "Int8QuantizationConfig", "Int4QuantizationConfig", "Float8QuantizationConfig",
           "GPTQConfig", "AWQConfig", "resolve_config"]

QUANTIZATION_MODES = ("int8", "float8", "int4", "gptq", "awq")
EPSILON = 1e-7            # Keras's backend.epsilon()


def _floating(owner, name, x):
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype not in (np_dtype("bfloat16"),):
        raise TypeError(f"{owner}: {name} must be a floating array, got dtype {a.dtype}")
    return a


def _value_range(owner, value_range, dtype):
    try:
        lo, hi = (int(v) for v in value_range)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: value_range must be a pair of ints (lo, hi), got "
                         f"{value_range!r}") from None
    if not lo < 0 < hi:
        raise ValueError(f"{owner}: value_range must satisfy lo < 0 < hi, got {value_range!r}")
    info = np.iinfo(np.dtype(dtype))
    if lo < info.min or hi > info.max:
        raise ValueError(f"{owner}: Quantizer with output_dtype={str(dtype)!r} requires "
                         f"value_range to be within the interval [{info.min}, {info.max}]. "
                         f"Received: value_range={tuple(value_range)!r}")
    return lo, hi


def _axes(owner, axis, ndim):
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not isinstance(a, (int, np.integer)) or not -ndim <= a < ndim:
            raise ValueError(f"{owner}: axis {a!r} is out of range for an array of {ndim} "
                             f"dimensions")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{owner}: repeated axis in {axis!r}")
    return tuple(out)


def abs_max_quantize(inputs: ArrayLike, axis: Any, value_range=(-127, 127), dtype="int8",
                     epsilon: float = EPSILON) -> tuple[np.ndarray, np.ndarray]:
    """``(q, scale)``: ``scale = value_range[1] / (max|inputs| over axis + epsilon)`` (kept
    dims, the inputs' dtype), ``q = clip(round(inputs * scale), *value_range)`` as ``dtype``.

    Raises
    ------
    TypeError
        Non-floating inputs.
    ValueError
        A bad axis or value range, or a NaN / infinity in the inputs (its scale would be 0 or
        NaN, and every value of its group would be lost).
    """
    owner = "abs_max_quantize"
    x = _floating(owner, "inputs", inputs)
    lo, hi = _value_range(owner, value_range, dtype)
    axes = _axes(owner, axis, x.ndim)
    if x.size and not np.isfinite(x).all():
        raise ValueError(f"{owner}: inputs hold NaN or infinity; cannot quantize them")
    scale = np.divide(hi, np.add(np.max(np.abs(x), axis=axes, keepdims=True), epsilon))
    scale = scale.astype(x.dtype)
    q = np.clip(np.round(np.multiply(x, scale)), lo, hi).astype(dtype)
    return q, scale


def min_max_quantize(inputs: ArrayLike,
                     axis: Any = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q, scale, zero)``: asymmetric int8 codes with a zero point over ``axis``, computed in
    float32 whatever the inputs' floating dtype (each operation rounded once, ``np.rint``
    half to even): ``lo = min(0, min(inputs))``, ``hi = max(0, max(inputs))``,
    ``scale = 255 / ((hi - lo) + 1e-7)``, ``zero = rint(-lo * scale) - 128`` (int32, in
    [-128, 127]), ``q = clip(rint(inputs * scale) + zero, -128, 127)`` (int8); the value is
    ``(q - zero) / scale`` and 0 is exactly ``zero``.  ``scale`` and ``zero`` keep the reduced
    dims.  A group with a NaN or an infinity gets the scale NaN, the zero point 0 and codes 0.
    ``kernels.quantize_rows(x, zero_point=True)`` computes the same bits over the last axis.

    Raises
    ------
    TypeError
        Non-floating inputs.
    ValueError
        A bad axis.
    """
    owner = "min_max_quantize"
    x = _floating(owner, "inputs", inputs)
    axes = _axes(owner, axis, x.ndim)
    x32 = x.astype(np.float32)
    f32 = np.float32
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(x32).all(axis=axes, keepdims=True)
        clean = np.where(np.isfinite(x32), x32, f32(0))
        lo = np.minimum(np.min(clean, axis=axes, keepdims=True, initial=f32(0)), f32(0))
        hi = np.maximum(np.max(clean, axis=axes, keepdims=True, initial=f32(0)), f32(0))
        scale = (f32(255) / ((hi - lo) + f32(EPSILON))).astype(np.float32)
        zero = np.clip(np.rint(-lo * scale), 0, 255).astype(np.int32) - 128
        q = np.clip(np.rint(x32 * scale) + zero, -128, 127)
    q = np.where(finite, q, 0).astype(np.int8)
    scale = np.where(finite, scale, f32(np.nan)).astype(np.float32)
    zero = np.where(finite, zero, 0).astype(np.int32)
    return q, scale, zero


def abs_max_quantize_grouped_with_zero_point(inputs: ArrayLike, block_size: int,
                                             value_range=(-8, 7), dtype="int8",
                                             epsilon: float = EPSILON):
    """``(q, scale, zero)`` of a (rows, columns) matrix in groups of ``block_size`` rows, as
    Keras's int4 sub-channel quantization: per group and column ``scale = (max - min +
    epsilon) / (hi - lo)``, ``zero = clip(round(-min / scale) + lo, lo, hi)`` (int8),
    ``q = clip(round(x / scale) + zero, lo, hi)``; the last group is padded with zeros.
    ``scale`` and ``zero`` have shape (ceil(rows / block_size), columns)."""
    owner = "abs_max_quantize_grouped_with_zero_point"
    x = _floating(owner, "inputs", inputs)
    if x.ndim != 2:
        raise ValueError(f"{owner}: inputs must be a (rows, columns) matrix, got shape {x.shape}")
    if not isinstance(block_size, (int, np.integer)) or isinstance(block_size, bool) \
            or block_size < 1:
        raise ValueError(f"{owner}: block_size must be a positive int, got {block_size!r}")
    if x.size and not np.isfinite(x).all():
        raise ValueError(f"{owner}: inputs hold NaN or infinity; cannot quantize them")
    lo, hi = _value_range(owner, value_range, dtype)
    rows, cols = x.shape
    groups = max(1, math.ceil(rows / block_size))
    padded = groups * int(block_size)
    if padded > rows:
        x = np.concatenate([x, np.zeros((padded - rows, cols), dtype=x.dtype)], axis=0)
    blocks = x.reshape(groups, int(block_size), cols)
    low = np.min(blocks, axis=1, keepdims=True)
    high = np.max(blocks, axis=1, keepdims=True)
    scale = np.divide(np.subtract(high, low) + epsilon, hi - lo)
    zero = np.clip(np.round(np.divide(-low, scale)) + lo, lo, hi)
    q = np.clip(np.round(np.divide(blocks, scale)) + zero, lo, hi).astype(dtype)
    q = q.reshape(padded, cols)[:rows]
    return q, np.squeeze(scale, axis=1), np.squeeze(zero, axis=1).astype(np.int8)


def pack_int4(arr: ArrayLike, axis: int = 0, dtype="int8") -> tuple[np.ndarray, tuple, int]:
    """``(packed, packed_shape, length)``: pairs along ``axis`` in one byte each, the first in the
    low nibble (an odd length is padded with a 0); ``arr`` holds int4 values in [-8, 7]."""
    owner = "pack_int4"
    if dtype not in ("int8", "uint8"):
        raise ValueError(f"{owner}: Expected dtype to be 'int8' or 'uint8', but got {dtype!r}.")
    a = np.asarray(arr)
    if a.dtype != np.dtype(dtype):
        raise TypeError(f"{owner}: Expected {dtype} tensor for packing, got {a.dtype}.")
    if a.ndim == 0:
        raise ValueError(f"{owner}: cannot pack a 0-d array")
    ax = _axes(owner, axis, a.ndim)[0]
    if dtype == "int8" and a.size and (a.min() < -8 or a.max() > 7):
        raise ValueError(f"{owner}: values must be int4, in [-8, 7]; got {a.min()} .. {a.max()}")
    a = np.moveaxis(a, ax, 0)
    n = a.shape[0]
    if n % 2:
        a = np.concatenate([a, np.zeros((1,) + a.shape[1:], dtype=a.dtype)], axis=0)
    u = a.view(np.uint8) if a.dtype == np.int8 else a
    packed = ((u[0::2] & 0x0F) | ((u[1::2] & 0x0F) << 4)).astype(np.uint8).view(np.dtype(dtype))
    packed = np.moveaxis(packed, 0, ax)
    return np.ascontiguousarray(packed), tuple(packed.shape), n


def unpack_int4(packed: ArrayLike, orig_len: int, axis: int = 0, dtype="int8") -> np.ndarray:
    """The int4 values of ``pack_int4``'s bytes along ``axis``, ``orig_len`` of them (int8 in
    [-8, 7], or the raw nibbles for ``dtype="uint8"``)."""
    owner = "unpack_int4"
    if dtype not in ("int8", "uint8"):
        raise ValueError(f"{owner}: Expected dtype to be 'int8' or 'uint8', but got {dtype!r}.")
    p = np.asarray(packed)
    if p.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise TypeError(f"{owner}: Expected int8 or uint8 tensor for unpacking, got {p.dtype}")
    if p.ndim == 0:
        raise ValueError(f"{owner}: cannot unpack a 0-d array")
    ax = _axes(owner, axis, p.ndim)[0]
    if not isinstance(orig_len, (int, np.integer)) or not \
            2 * p.shape[ax] - 1 <= orig_len <= 2 * p.shape[ax]:
        raise ValueError(f"{owner}: orig_len {orig_len!r} does not fit {p.shape[ax]} packed "
                         f"bytes along axis {axis} (it must be {2 * p.shape[ax] - 1} or "
                         f"{2 * p.shape[ax]})")
    u = np.moveaxis(p.view(np.uint8), ax, 0)
    low, high = u & 0x0F, u >> 4
    both = np.stack([low, high], axis=1).reshape((-1,) + u.shape[1:])[:orig_len]
    if dtype == "int8":
        both = ((both ^ 8).astype(np.int8) - np.int8(8)).astype(np.int8)
    return np.ascontiguousarray(np.moveaxis(both, 0, ax))


def quantize_and_dequantize(inputs: ArrayLike, scale: Any, quantized_dtype: Any,
                            compute_dtype: Any) -> np.ndarray:
    """``cast(cast(clip(x / scale, -max, max), quantized_dtype), compute_dtype) * scale``, each
    step in ``compute_dtype`` (float8's fake quantization)."""
    cd = np_dtype(compute_dtype)
    qd = np.dtype(quantized_dtype)
    top = np.asarray(float(ml_dtypes.finfo(qd).max), dtype=cd)
    s = np.asarray(scale, dtype=cd)
    x = np.divide(np.asarray(inputs).astype(cd), s)
    x = np.clip(x, -top, top).astype(qd)
    return np.multiply(x.astype(cd), s)


# --------------------------------------------------------------------------- quantizer objects

class Quantizer:
    """Base of the quantizers (``keras.quantizers.Quantizer``)."""

    def __init__(self, output_dtype: str = "int8") -> None:
        self.output_dtype = output_dtype

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_config()")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Quantizer:
        return cls(**config)


class AbsMaxQuantizer(Quantizer):
    """``keras.quantizers.AbsMaxQuantizer``: :func:`abs_max_quantize` over ``axis`` (default
    the last)."""

    def __init__(self, axis: Any = None, value_range=(-127, 127), epsilon: float = EPSILON,
                 output_dtype: str = "int8") -> None:
        super().__init__(output_dtype)
        self.axis = None if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
        self.value_range = tuple(_value_range("AbsMaxQuantizer", value_range, output_dtype))
        if not isinstance(epsilon, (int, float)) or not epsilon > 0:
            raise ValueError(f"AbsMaxQuantizer: epsilon must be a positive number, got "
                             f"{epsilon!r}")
        self.epsilon = float(epsilon)

    def __call__(self, x, axis=None):
        axis = axis if axis is not None else (self.axis if self.axis is not None else -1)
        return abs_max_quantize(x, axis, self.value_range, self.output_dtype, self.epsilon)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"value_range": list(self.value_range), "epsilon": self.epsilon,
                                  "output_dtype": self.output_dtype}
        if self.axis is not None:
            config["axis"] = list(self.axis)
        return config

    def __eq__(self, other):
        return (isinstance(other, AbsMaxQuantizer) and self.get_config() == other.get_config())

    __hash__ = None  # type: ignore[assignment]


class MinMaxQuantizer(Quantizer):
    """Asymmetric int8 activations (mixedcore's; Keras has no such class): each row over the
    last axis quantized by :func:`min_max_quantize`, with its own zero point.  As an int8 (or
    per-channel int4) config's ``activation_quantizer`` it makes a layer's dynamic activation
    quantization use all 256 codes over the row's range instead of a range symmetric around 0:
    about half the rounding error for rows that are mostly of one sign (after a relu or gelu),
    at the cost of a zero-point correction in the product.  The weights are the same as with
    the default AbsMaxQuantizer; Keras cannot read a file whose config names this class."""

    def __init__(self, axis: Any = -1, output_dtype: str = "int8") -> None:
        if output_dtype != "int8":
            raise ValueError(f"MinMaxQuantizer: output_dtype must be 'int8', got "
                             f"{output_dtype!r}")
        super().__init__(output_dtype)
        axes = (axis,) if isinstance(axis, (int, np.integer)) else axis
        if not isinstance(axes, (tuple, list)) or list(axes) != [-1]:
            raise ValueError(f"MinMaxQuantizer: axis must be -1 (each row over the last axis, "
                             f"as the layers quantize their inputs), got {axis!r}")
        self.axis = (-1,)

    def __call__(self, x, axis=None):
        return min_max_quantize(x, -1 if axis is None else axis)

    def get_config(self) -> dict[str, Any]:
        return {"axis": list(self.axis), "output_dtype": self.output_dtype}

    def __eq__(self, other):
        return isinstance(other, MinMaxQuantizer)

    __hash__ = None  # type: ignore[assignment]


class QuantizationConfig:
    """Base of the quantization configs (``keras.quantizers.QuantizationConfig``)."""

    mode: str = ""

    def __init__(self, weight_quantizer: Any = None, activation_quantizer: Any = None) -> None:
        self.weight_quantizer = _quantizer(type(self).__name__, "weight_quantizer",
                                           weight_quantizer)
        self.activation_quantizer = _quantizer(type(self).__name__, "activation_quantizer",
                                               activation_quantizer)
        owner = type(self).__name__
        if isinstance(self.weight_quantizer, MinMaxQuantizer):
            raise ValueError(f"{owner}: MinMaxQuantizer quantizes activations (rows with zero "
                             f"points); the weights take an AbsMaxQuantizer (per channel)")
        act = self.activation_quantizer
        if isinstance(act, AbsMaxQuantizer) and not -128 <= act.value_range[0] < \
                act.value_range[1] <= 127:
            raise ValueError(f"{owner}: the activation_quantizer's codes feed an int8 product, so "
                             f"its value_range must lie within [-128, 127]; got "
                             f"{tuple(act.value_range)}")

    def get_config(self) -> dict[str, Any]:
        return {"weight_quantizer": _serialize(self.weight_quantizer),
                "activation_quantizer": _serialize(self.activation_quantizer)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> QuantizationConfig:
        return cls(**config)

    def __eq__(self, other):
        return type(self) is type(other) and self.get_config() == other.get_config()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self):
        return f"{type(self).__name__}({self.get_config()})"


class Int8QuantizationConfig(QuantizationConfig):
    """int8 weights per output channel; activations quantized per row at run time by
    ``activation_quantizer`` (default an AbsMaxQuantizer; None: weights only)."""

    mode = "int8"

    def __init__(self, weight_quantizer: Any = None,
                 activation_quantizer: Any = "default") -> None:
        if isinstance(activation_quantizer, str) and activation_quantizer == "default":
            activation_quantizer = AbsMaxQuantizer()
        super().__init__(weight_quantizer, activation_quantizer)
        if self.weight_quantizer is not None and self.weight_quantizer.output_dtype != "int8":
            raise ValueError(f"Int8QuantizationConfig requires a weight_quantizer with "
                             f"output_dtype='int8'. Received: "
                             f"output_dtype={self.weight_quantizer.output_dtype}")


class Int4QuantizationConfig(QuantizationConfig):
    """int4 weights: groups of ``block_size`` input rows with zero points (default 128), or one
    scale per output channel (``block_size`` None or -1); activations are not quantized unless
    an ``activation_quantizer`` is given (per channel only)."""

    mode = "int4"

    def __init__(self, weight_quantizer: Any = None, activation_quantizer: Any = "default",
                 block_size: int | None = 128) -> None:
        if isinstance(activation_quantizer, str) and activation_quantizer == "default":
            activation_quantizer = None
        super().__init__(weight_quantizer, activation_quantizer)
        if block_size is not None and (not isinstance(block_size, int)
                                       or isinstance(block_size, bool)
                                       or (block_size != -1 and block_size <= 0)):
            raise ValueError(f"Int4QuantizationConfig: block_size must be None, -1, or a "
                             f"positive integer. Received: block_size={block_size!r}")
        self.block_size = block_size
        grouped = block_size is not None and block_size > 0
        if grouped and (self.weight_quantizer is not None
                        or self.activation_quantizer is not None):
            raise ValueError(f"Int4QuantizationConfig: Int4 sub-channel quantization "
                             f"(block_size > 0) does not support custom quantizers. Either set "
                             f"block_size to None or -1 for per-channel quantization, or remove "
                             f"the custom quantizer arguments. Received: block_size={block_size}")
        if self.weight_quantizer is not None:
            if tuple(self.weight_quantizer.value_range) != (-8, 7):
                raise ValueError(f"Int4QuantizationConfig requires a weight_quantizer with "
                                 f"value_range=(-8, 7). Received: "
                                 f"value_range={self.weight_quantizer.value_range}")

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["block_size"] = self.block_size
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> QuantizationConfig:
        config = dict(config)
        config.setdefault("block_size", None)   # files from before block sizes: per channel
        return cls(**config)


class Float8QuantizationConfig(QuantizationConfig):
    """float8 (e4m3fn inputs and kernel, per-tensor scales held by the layer)."""

    mode = "float8"

    def __init__(self) -> None:
        super().__init__(None, None)

    def get_config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> QuantizationConfig:
        if config:
            raise ValueError(f"Float8QuantizationConfig.from_config: takes no settings, got "
                             f"{config!r}")
        return cls()


def _positive_int(owner, name, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{owner}: {name} must be a positive integer. Received: "
                         f"{name}={value!r}")
    return int(value)


def _group_size(owner, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < -1 \
            or value == 0:
        raise ValueError(f"{owner}: Invalid group_size. Supported values are -1 (per-channel) "
                         f"or a positive integer, but got {value!r}.")
    return int(value)


class _CalibratedConfig(QuantizationConfig):
    """What GPTQ and AWQ configs share.  mixedcore runs layers Keras quantized so (it
    dequantizes their weights) but does not calibrate: the settings are kept so that the
    configs of Keras's files read and write back unchanged (files hold no dataset or
    tokenizer), and ``quantize`` with these configs is refused."""

    def __init__(self, dataset: Any, tokenizer: Any, weight_bits: int, num_samples: int,
                 sequence_length: int, group_size: int,
                 quantization_layer_structure: Any) -> None:
        super().__init__(None, None)
        owner = type(self).__name__
        self.dataset, self.tokenizer = dataset, tokenizer
        self.weight_bits = weight_bits
        self.num_samples = _positive_int(owner, "num_samples", num_samples)
        self.sequence_length = _positive_int(owner, "sequence_length", sequence_length)
        self.group_size = _group_size(owner, group_size)
        self.quantization_layer_structure = quantization_layer_structure

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> QuantizationConfig:
        config = dict(config)
        return cls(config.pop("dataset", None), config.pop("tokenizer", None), **config)


class GPTQConfig(_CalibratedConfig):
    """``keras.quantizers.GPTQConfig``'s settings: weight_bits 2, 3, 4 or 8, group_size -1
    (one group per output channel) or positive."""

    mode = "gptq"

    def __init__(self, dataset: Any = None, tokenizer: Any = None, *, weight_bits: int = 4,
                 num_samples: int = 128, per_channel: bool = True, sequence_length: int = 512,
                 hessian_damping: float = 0.01, group_size: int = 128, symmetric: bool = False,
                 activation_order: bool = False,
                 quantization_layer_structure: Any = None) -> None:
        if weight_bits not in (2, 3, 4, 8) or isinstance(weight_bits, bool):
            raise ValueError(f"GPTQConfig: Unsupported weight_bits {weight_bits!r}. Supported "
                             f"values are 2, 3, 4, and 8.")
        if not isinstance(hessian_damping, (int, float)) or isinstance(hessian_damping, bool) \
                or not 0 <= hessian_damping <= 1:
            raise ValueError(f"GPTQConfig: hessian_damping must be between 0 and 1. Received: "
                             f"hessian_damping={hessian_damping!r}")
        super().__init__(dataset, tokenizer, int(weight_bits), num_samples, sequence_length,
                         group_size, quantization_layer_structure)
        self.per_channel = bool(per_channel)
        self.hessian_damping = float(hessian_damping)
        self.symmetric = bool(symmetric)
        self.activation_order = bool(activation_order)

    def get_config(self) -> dict[str, Any]:
        return {"dataset": None, "tokenizer": None, "weight_bits": self.weight_bits,
                "num_samples": self.num_samples, "per_channel": self.per_channel,
                "sequence_length": self.sequence_length,
                "hessian_damping": self.hessian_damping, "group_size": self.group_size,
                "symmetric": self.symmetric, "activation_order": self.activation_order,
                "quantization_layer_structure": self.quantization_layer_structure}


class AWQConfig(_CalibratedConfig):
    """``keras.quantizers.AWQConfig``'s settings: 4-bit weights, group_size -1 (one group per
    output channel) or positive."""

    mode = "awq"

    def __init__(self, dataset: Any = None, tokenizer: Any = None, *, weight_bits: int = 4,
                 num_samples: int = 128, sequence_length: int = 512, group_size: int = 128,
                 num_grid_points: int = 20, quantization_layer_structure: Any = None) -> None:
        if weight_bits != 4 or isinstance(weight_bits, bool):
            raise ValueError(f"AWQConfig: AWQ only supports 4-bit quantization. Received "
                             f"weight_bits={weight_bits!r}.")
        super().__init__(dataset, tokenizer, 4, num_samples, sequence_length, group_size,
                         quantization_layer_structure)
        self.num_grid_points = _positive_int("AWQConfig", "num_grid_points", num_grid_points)

    def get_config(self) -> dict[str, Any]:
        return {"dataset": None, "tokenizer": None, "weight_bits": self.weight_bits,
                "num_samples": self.num_samples, "sequence_length": self.sequence_length,
                "group_size": self.group_size, "num_grid_points": self.num_grid_points,
                "quantization_layer_structure": self.quantization_layer_structure}


_registry.register_builtins("quantizer", [AbsMaxQuantizer, MinMaxQuantizer,
                                          Int8QuantizationConfig,
                                          Int4QuantizationConfig, Float8QuantizationConfig,
                                          GPTQConfig, AWQConfig])


def _serialize(obj):
    if obj is None:
        return None
    module = "mixedcore.quantizers" if isinstance(obj, MinMaxQuantizer) else "keras.quantizers"
    return {"module": module, "class_name": type(obj).__name__, "config": obj.get_config(),
            "registered_name": None}


def _deserialize(owner, entry, expected):
    if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str) \
            or not isinstance(entry.get("config", {}), dict):
        raise ValueError(f"{owner}: expected a serialized {expected.__name__} "
                         f"({{'class_name': ..., 'config': {{...}}}}), got {entry!r}")
    found = _registry.lookup("quantizer", entry, None, owner=owner)
    if found is None or not (isinstance(found.obj, type) and issubclass(found.obj, expected)):
        raise ValueError(f"{owner}: unknown {expected.__name__} class "
                         f"{entry.get('class_name')!r}; mixedcore knows "
                         f"{[n for n, c in _registry.builtin_objects('quantizer').items() if issubclass(c, expected)]}")
    config = {k: v for k, v in entry.get("config", {}).items() if k != "shared_object_id"}
    try:
        return found.obj.from_config(config)
    except TypeError as exc:
        raise ValueError(f"{owner}: cannot rebuild {entry['class_name']} from {config!r} "
                         f"({exc})") from None


def _quantizer(owner, name, value):
    if value is None or isinstance(value, Quantizer):
        return value
    if isinstance(value, dict):
        return _deserialize(f"{owner}: {name}", value, Quantizer)
    raise TypeError(f"{owner}: {name} must be a Quantizer, its config dict or None, got "
                    f"{type(value).__name__}: {value!r}")


def resolve_config(owner: str, mode: str | None, config: Any) -> QuantizationConfig:
    """The config ``quantize(mode, config)`` uses (Keras's rules): a str config is a mode; a
    missing config is the mode's default; a config's mode must agree with ``mode``.  GPTQ and
    AWQ, which need calibration data, are refused."""
    if isinstance(config, str):
        mode, config = config, None
    if isinstance(config, dict):
        config = _deserialize(owner, config, QuantizationConfig)
    if mode is not None and mode not in QUANTIZATION_MODES:
        raise ValueError(f"{owner}: Invalid quantization mode. Expected one of "
                         f"{QUANTIZATION_MODES}. Received: mode={mode!r}")
    if config is None:
        if mode is None:
            raise ValueError(f"{owner}: You must provide either `mode` or `config` to "
                             f"`quantize`.")
        if mode in ("gptq", "awq"):
            raise ValueError(f"{owner}: mode {mode!r} needs calibration data and its config "
                             f"({mode.upper()}Config), which mixedcore does not implement; "
                             f"quantize with Keras and load the file")
        return {"int8": Int8QuantizationConfig, "int4": Int4QuantizationConfig,
                "float8": Float8QuantizationConfig}[mode]()
    if not isinstance(config, QuantizationConfig):
        raise ValueError(f"{owner}: Argument `config` must be an instance of "
                         f"`QuantizationConfig`. Received: config={config!r} (of type "
                         f"{type(config).__name__})")
    if mode is not None and config.mode != mode:
        raise ValueError(f"{owner}: Contradictory arguments: mode={mode!r} but "
                         f"config.mode={config.mode!r}")
    if config.mode in ("gptq", "awq"):
        raise ValueError(f"{owner}: mode {config.mode!r} calibrates the weights on data, which "
                         f"mixedcore does not implement; quantize with Keras and load the file "
                         f"(mixedcore runs such layers)")
    return config


def config_from_layer(owner: str, value: Any) -> QuantizationConfig | None:
    """A layer's ``quantization_config`` argument: None, a config, or its serialized dict."""
    if value is None or isinstance(value, QuantizationConfig):
        return value
    if isinstance(value, dict):
        return _deserialize(f"{owner}: quantization_config", value, QuantizationConfig)
    raise TypeError(f"{owner}: quantization_config must be a QuantizationConfig, its config "
                    f"dict or None, got {type(value).__name__}: {value!r}")


def serialize(config: QuantizationConfig | None) -> dict[str, Any] | None:
    """The dict Keras writes for a quantization config (None for None)."""
    return _serialize(config)
