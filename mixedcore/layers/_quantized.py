"""Quantized weights of Dense and Embedding: Keras 3's int8, int4 and float8 modes
(docs/quantization.md).

Design:
  A. A layer is quantized when its policy has a ``quantization_mode``: built that way (a file's
     layer, or a layer made under a quantized policy, which Keras quantizes right after building
     it), or by ``quantize(mode)``.  Its weights are Keras's, by Keras's names, dtypes, shapes and
     creation order (``get_weights`` order), and files list them in Keras's
     ``variable_serialization_spec`` order (``keras_weight_paths``).
  B. Quantizing (``quantize``) runs ``mixedcore.quantizers``' numpy formulas on the float32
     weights, the same arithmetic as Keras's ``quantize``, so both give the same bytes.
  C. Inference: int8 with an activation quantizer quantizes each row of the input (abs-max, in
     the compute dtype) and runs the integer product with the scales, bias and activation in its
     epilogue (``kernels.quantize_rows`` + ``kernels.matmul_int8``); weight-only int8 and int4
     run the float inputs against the packed quantized weights (``kernels.matmul_quantized``);
     float8 rounds the inputs and the kernel to float8_e4m3fn by their scales
     (``kernels.cast``) and multiplies them exactly in a bfloat16 GEMM whose ``alpha`` is the
     product of the two scales.  Each prepared operand is cached per weight version and compute
     dtype.  The results are within Keras's own rounding of Keras's results (Keras rounds each
     step to the compute dtype, these round once).  GPTQ and AWQ layers (Keras-calibrated; not
     quantized here) run as Keras runs them: the compute-dtype inputs times the float32 kernel
     their codes, scales and zero points stand for, in float32.
  D. Training: the quantized kernel is frozen (as in Keras); the input gradient goes through the
     dequantized kernel, the bias trains.  float8's delayed scaling is not implemented: a float8
     layer is inference-only.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import ml_dtypes
import numpy as np

from mixedcore import activations as _activations
from mixedcore import kernels
from mixedcore import quantizers as _quantizers
from mixedcore._dtypes import np_dtype, to_compute
from mixedcore.dtype_policies import get as _get_policy
from mixedcore.layers._base import Layer

_F32 = np.dtype(np.float32)
_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
_E4M3_MAX = float(ml_dtypes.finfo(_E4M3).max)


def block_size_of(policy, config):
    """The int4 group size: the config's, else the policy's (None: one scale per channel)."""
    size = None
    if isinstance(config, _quantizers.Int4QuantizationConfig):
        size = config.block_size
    elif hasattr(policy, "block_size"):
        size = policy.block_size
    return None if size is None or size == -1 else int(size)


def check_quantize(owner, layer, mode, modes, what, already=False):
    """Keras's refusals of ``quantize(mode)``, for any layer: unbuilt, already quantized
    (``already``), a mode ``what`` cannot take, int8 under a float16 policy."""
    if not layer.built:
        raise ValueError(f"{owner}: Cannot quantize a layer that isn't yet built. Layer "
                         f"'{layer.name}' (of type '{type(layer).__name__}') is not built yet.")
    if already:
        raise ValueError(f"{owner}: Layer '{layer.name}' is already quantized with "
                         f"dtype_policy='{layer.dtype_policy.name}'. Received: mode={mode}")
    if mode not in modes:
        raise ValueError(f"{owner}: {what} cannot be quantized in mode {mode!r} (it takes "
                         f"{list(modes)})")
    if mode == "int8" and layer.compute_dtype == "float16":
        raise ValueError(f"{owner}: Quantization mode='int8' doesn't work well with "
                         f"compute_dtype='float16'. Consider loading model/layer with another "
                         f"dtype policy such as 'mixed_bfloat16' before calling `quantize()`.")


def quantized_policy_name(layer, mode, config):
    """The policy a layer takes when ``quantize(mode)`` changes it: ``<mode>_from_<policy>``."""
    name = mode
    if mode == "int4":
        size = block_size_of(None, config)
        name = f"int4/{-1 if size is None else size}"
    return f"{name}_from_{layer.dtype_policy.name}"


def in_kernels(quantizer):
    """Whether the kernels quantize the rows as ``quantizer`` does (None: the default): a
    MinMaxQuantizer, or an AbsMaxQuantizer of Keras's default value range and epsilon."""
    return quantizer is None or isinstance(quantizer, _quantizers.MinMaxQuantizer) or (
        isinstance(quantizer, _quantizers.AbsMaxQuantizer)
        and tuple(quantizer.value_range) == (-127, 127)
        and quantizer.epsilon == _quantizers.EPSILON)


def int8_product(x2, packed, b_scale, quantizer, *, bias=None, activation=None,
                 out_dtype=None):
    """The int8 product of rows ``x2`` quantized at run time by ``quantizer`` (the config's
    activation quantizer; None: the default) by the packed int8 kernel with its column scales:
    ``kernels.quantize_rows`` (with zero points for a MinMaxQuantizer), or, for an
    AbsMaxQuantizer of another value range or epsilon, that quantizer's own call over the last
    axis, as Keras calls it."""
    kw = {"b_scale": b_scale, "bias": bias, "activation": activation, "out_dtype": out_dtype}
    if isinstance(quantizer, _quantizers.MinMaxQuantizer):
        xq, xscale, xzero = kernels.quantize_rows(x2, zero_point=True)
        return kernels.matmul_int8(xq, packed, a_scale=xscale, a_zero=xzero, **kw)
    if in_kernels(quantizer):
        xq, xscale = kernels.quantize_rows(x2)
    else:
        xq, xscale = quantizer(x2, axis=-1)
        xq = xq.astype(np.int8)          # the config checked that its codes fit
    return kernels.matmul_int8(xq, packed, a_scale=xscale, **kw)


class QuantizedWeights:
    """What reading a quantized weight set needs, whoever holds it: a layer, or one projection
    of a MultiHeadAttention.  The holder provides ``dtype_policy``, ``quantization_config``,
    ``_weight(name)``, ``_version`` and ``_compute_np()``, and a ``_qcache`` slot."""

    _qcache: Any = None
    _weight: Callable[[str], Any]

    @property
    def quantization_mode(self) -> str | None:
        return getattr(getattr(self, "dtype_policy", None), "quantization_mode", None)

    def _int4_block(self):
        return block_size_of(self.dtype_policy, self.quantization_config)

    def _activation_quantized(self):
        """Whether inputs are quantized at run time (int8's default; int4 only on request)."""
        mode = self.quantization_mode
        config = self.quantization_config
        if mode == "int8":
            return config is None or config.activation_quantizer is not None
        if mode == "int4":
            return config is not None and config.activation_quantizer is not None \
                and self._int4_block() is None
        return False

    def _activation_quantizer(self):
        """The config's activation quantizer (None: the default config's)."""
        config = self.quantization_config
        return None if config is None else config.activation_quantizer

    def _activation_zero_point(self):
        """Whether the inputs are quantized with zero points (a MinMaxQuantizer config)."""
        return isinstance(self._activation_quantizer(), _quantizers.MinMaxQuantizer)

    def _prepared(self, key, make):
        """``make()``, cached per weight version, compute dtype, ISA level and ``key``."""
        entry = self._qcache
        full = (self._version, self._compute_np(), kernels.isa(), key)
        if entry is None or entry[0] != full:
            entry = (full, make())
            self._qcache = entry
        return entry[1]


class Quantizable(QuantizedWeights, Layer):
    """What Dense and Embedding share for quantized weights (module docstring).

    A subclass sets ``_FLOAT`` (its float weight: "kernel" or "embeddings"), ``_MODES`` (the
    modes it takes) and implements ``_quantized_specs(shape, mode, block)`` (the weights a mode
    needs, in creation order) and ``_serialization_order(mode)``."""

    _FLOAT = "kernel"
    _MODES: tuple = ("int8", "int4", "float8")

    # -- state --------------------------------------------------------------------------------
    def _init_quantization(self, owner, quantization_config):
        self.quantization_config = _quantizers.config_from_layer(owner, quantization_config)
        mode = self.quantization_mode
        if mode is not None and mode not in self._MODES:
            raise ValueError(f"{owner}: the dtype policy {self.dtype_policy.name!r} quantizes "
                             f"in mode {mode!r}; mixedcore's {type(self).__name__} takes "
                             f"{list(self._MODES)}")
        self._qcache = None

    def _build_quantized(self, shape):
        """Create the weights of the current mode for a float weight of ``shape`` (A)."""
        for name, wshape, dtype, init, trainable in self._quantized_specs(
                tuple(shape), self.quantization_mode, self._int4_block()):
            self.add_weight(name, wshape, init, trainable=trainable, dtype=dtype)
        self._qcache = None

    # -- quantize -----------------------------------------------------------------------------
    def quantize(self, mode: str | None = None, config: Any = None, type_check: bool = True):
        """Quantize the layer's weights in place (``keras.layers.Dense.quantize``): int8 or int4
        (default groups of 128 input rows), or float8 (adds the scales; inference only).

        Raises
        ------
        ValueError
            The layer is not built or already quantized; an unknown mode or a mode the layer
            does not take; a config that contradicts ``mode``; int8 under a float16 policy.
        """
        owner = f"{type(self).__name__} '{self.name}'.quantize"
        config = _quantizers.resolve_config(owner, mode, config)
        mode = config.mode
        check_quantize(owner, self, mode, self._MODES, type(self).__name__,
                       already=self.quantization_mode is not None and
                       self._weight(self._FLOAT) is None or getattr(self, "_is_quantized", False))
        values = self._quantized_values(mode, config)
        policy = _get_policy(quantized_policy_name(self, mode, config)) \
            if self.quantization_mode is None else self.dtype_policy
        float_value = self._weight(self._FLOAT)
        self._replace_weights(self._FLOAT, float_value, policy, config, values)

    def _quantized_values(self, mode, config):
        """{weight name: value} of the quantized weights, from the float weight (B)."""
        raise NotImplementedError

    def _replace_weights(self, float_name, float_value, policy, config, values):
        """Swap the float weight for the quantized ones, in the order a layer built under the
        quantized policy has them, keeping every other weight."""
        self._dtype_policy = policy
        self.quantization_config = config
        if policy.quantization_mode == "float8":
            # the float kernel stays; its scales and histories come after the layer's weights
            for name, shape, dtype, init, trainable in self._quantized_specs(
                    tuple(float_value.shape), "float8", None):
                if name not in self._names:
                    self.add_weight(name, shape, init, trainable=trainable, dtype=dtype)
            keep = []
        else:
            keep = [(n, v, t, r) for n, v, t, r in zip(self._names, self._values,
                                                       self._trainable_flags, self._regularizers)
                    if n != float_name]
            self._names, self._values, self._trainable_flags, self._regularizers = [], [], [], []
            self._build_quantized(float_value.shape)
        for name, value in values.items():
            target = self._weight(name)
            target[...] = value
        for n, v, t, r in keep:
            if n not in self._names:
                self._names.append(n)
                self._values.append(v)
                self._trainable_flags.append(t)
                self._regularizers.append(r)
        self._packed, self._bias_cache = {}, {}
        self._is_quantized = True
        self.weights_updated()

    # -- files --------------------------------------------------------------------------------
    def keras_weight_paths(self):
        mode = self.quantization_mode
        if mode is None:
            return super().keras_weight_paths()
        order = self._weight_index_order()
        position = {creation: pos for pos, creation in enumerate(order)}
        names = [n for n in self._serialization_order(mode) if n in self._names]
        return [("", [position[self._names.index(n)] for n in names])]

    def weights_updated(self):
        super().weights_updated()
        self._qcache = None


# --------------------------------------------------------------------------- Dense

def int4_specs(rows, cols, block):
    """Keras's int4 weights for a (rows, cols) float kernel: the codes packed two to a byte
    along cols, and one scale per column, or per group of ``block`` rows and column with zero
    points and the group of each row (``g_idx``)."""
    specs = [("kernel", (rows, (cols + 1) // 2), "int8", "zeros", False)]
    if block is None:
        return specs + [("kernel_scale", (cols,), "float32", "ones", False)]
    groups = math.ceil(rows / block)
    return specs + [("kernel_scale", (groups, cols), "float32", "ones", False),
                    ("kernel_zero", (groups, cols), "int8", "zeros", False),
                    ("g_idx", (rows,), "float32", _GroupIndex(block), False)]


def float8_specs(policy):
    """Keras's float8 scales and amax histories (trainable, float32), before the kernel."""
    length = getattr(policy, "amax_history_length", 1024)
    scalar = ((), "float32", "ones", True)
    history = ((length,), "float32", "zeros", True)
    return [("inputs_scale",) + scalar, ("inputs_amax_history",) + history,
            ("kernel_scale",) + scalar, ("kernel_amax_history",) + history,
            ("outputs_grad_scale",) + scalar, ("outputs_grad_amax_history",) + history]


class _GroupIndex:
    """Initializer of ``g_idx``: the group of each input row, ``arange(k) // block``."""

    def __init__(self, block):
        self.block = block

    def __call__(self, shape, dtype=None):
        return (np.arange(shape[0]) // self.block).astype(dtype or _F32)

    def get_config(self):
        return {"block": self.block}


def calibrated_specs(policy, rows, cols, zero_name="kernel_zero"):
    """Keras's weights of a GPTQ or AWQ layer for a (rows, cols) float kernel: the unsigned
    codes of the transposed kernel, (cols, rows), 4-bit ones packed two to a byte along cols;
    a scale and a zero point per output column and group of ``group_size`` rows (one group
    for -1); AWQ's per-row scales; the group of each row (``g_idx``)."""
    bits, size = policy.weight_bits, policy.group_size
    groups = 1 if size == -1 else math.ceil(rows / size)
    packed = (cols + 1) // 2 if bits == 4 else cols
    specs = [("kernel", (packed, rows), "uint8", "zeros", False),
             ("kernel_scale", (cols, groups), "float32", "ones", False),
             (zero_name, (cols, groups), "uint8", "zeros", False)]
    if policy.quantization_mode == "awq":
        specs.append(("awq_scales", (rows,), "float32", "ones", False))
    return specs + [("g_idx", (rows,), "float32", "zeros", False)]


def calibrated_kernel(layer, q, scale, zero, g_idx, awq_scales, cols):
    """The float32 (rows, cols) kernel of GPTQ / AWQ weights, as Keras dequantizes them:
    ``(q - zero[:, g]) * scale[:, g]`` on the transposed codes (unpacked first for 4 bits),
    transposed, divided by AWQ's per-row scales; ``g = int(g_idx)``."""
    if layer.dtype_policy.weight_bits == 4:
        q = _quantizers.unpack_int4(q, cols, axis=0, dtype="uint8")
    g = np.asarray(g_idx, dtype=_F32)
    groups = scale.shape[1]
    if g.size and not (np.all(np.isfinite(g)) and g.min() >= 0 and g.max() < groups):
        raise ValueError(f"{type(layer).__name__} '{layer.name}': g_idx must hold group "
                         f"positions in [0, {groups}); got values {g.min()} .. {g.max()}")
    g = g.astype(np.int64)
    scale32 = to_compute(scale, _F32)
    w = np.multiply(np.subtract(q.astype(_F32), zero[:, g].astype(_F32)), scale32[:, g]).T
    if awq_scales is not None:
        w = np.divide(w, to_compute(awq_scales, _F32)[:, None])
    return np.ascontiguousarray(w, dtype=_F32)


class QuantizedDense(Quantizable):
    """Dense's quantized modes (module docstring): int8, int4, float8; GPTQ and AWQ layers
    (Keras-calibrated) run on their dequantized kernel."""

    _FLOAT = "kernel"
    _MODES = ("int8", "int4", "float8", "gptq", "awq")

    def _quantized_specs(self, shape, mode, block):
        k, n = shape
        if mode in ("gptq", "awq"):
            return calibrated_specs(self.dtype_policy, k, n)
        if mode == "int8":
            return [("kernel", (k, n), "int8", "zeros", False),
                    ("kernel_scale", (n,), "float32", "ones", False)]
        if mode == "int4":
            return int4_specs(k, n, block)
        return float8_specs(self.dtype_policy) + [
            ("kernel", shape, None, self.kernel_initializer, True)]

    def _serialization_order(self, mode):
        if mode == "float8":
            return ["kernel", "bias", "inputs_scale", "inputs_amax_history", "kernel_scale",
                    "kernel_amax_history", "outputs_grad_scale", "outputs_grad_amax_history"]
        if mode in ("gptq", "awq"):
            return ["bias", "kernel", "kernel_scale", "kernel_zero", "awq_scales", "g_idx"]
        return ["kernel", "bias", "kernel_scale", "kernel_zero", "g_idx"]

    def _quantized_values(self, mode, config):
        w = to_compute(self._weight("kernel"), _F32)
        if mode == "float8":
            return {}
        if mode == "int8":
            quantizer = config.weight_quantizer or _quantizers.AbsMaxQuantizer(axis=0)
            q, scale = quantizer(w, axis=quantizer.axis or 0)
            return {"kernel": q, "kernel_scale": np.squeeze(scale, axis=0)}
        block = block_size_of(None, config)
        if block is None:
            quantizer = config.weight_quantizer or _quantizers.AbsMaxQuantizer(
                axis=0, value_range=(-8, 7))
            q, scale = quantizer(w, axis=quantizer.axis or 0)
            packed, _, _ = _quantizers.pack_int4(q, axis=-1)
            return {"kernel": packed, "kernel_scale": np.squeeze(scale, axis=0)}
        q, scale, zero = _quantizers.abs_max_quantize_grouped_with_zero_point(w, block)
        packed, _, _ = _quantizers.pack_int4(q, axis=-1)
        return {"kernel": packed, "kernel_scale": scale, "kernel_zero": zero}

    # -- the float kernel a quantized layer stands for -------------------------------------------
    def dequantized_kernel(self) -> np.ndarray:
        """The float32 (in, units) kernel the quantized weights stand for, as Keras dequantizes
        them (int8 / per-channel int4: ``q / kernel_scale``; grouped int4:
        ``(q - kernel_zero[g]) * kernel_scale[g]``; float8: the kernel rounded through
        float8_e4m3fn by its scale)."""
        mode = self.quantization_mode
        if mode is None:
            return to_compute(self._weight("kernel"), _F32)
        if mode in ("gptq", "awq"):
            scale = self._weight("kernel_scale")         # (units, groups)
            return calibrated_kernel(self, self._weight("kernel"), scale,
                                     self._weight("kernel_zero"), self._weight("g_idx"),
                                     self._weight("awq_scales") if mode == "awq" else None,
                                     scale.shape[0])
        if mode == "float8":
            return fake_float8(to_compute(self._weight("kernel"), _F32),
                               np.float32(self._weight("kernel_scale")))
        q = self._int_kernel()
        scale = to_compute(self._weight("kernel_scale"), _F32)
        if mode == "int4" and self._int4_block() is not None:
            groups = self._group_rows()
            zero = self._weight("kernel_zero").astype(_F32)
            return (q.astype(_F32) - zero[groups]) * scale[groups]
        return np.divide(q.astype(_F32), scale)

    def _int_kernel(self):
        """The int8 (in, units) values of an int8 or int4 kernel."""
        q = self._weight("kernel")
        if self.quantization_mode == "int4":
            return _quantizers.unpack_int4(q, self.units, axis=-1)
        return q

    def _group_rows(self):
        """The group of each input row (``g_idx``), checked against the scales' groups."""
        return _group_index(self, self._weight("g_idx"), self._weight("kernel_scale").shape[0])

    # -- inference ----------------------------------------------------------------------------
    def _quantized_call(self, x2):
        """``activation(x2 @ kernel + bias)`` of a quantized layer, x2 (m, in) in the compute
        dtype; the result in the compute dtype."""
        mode = self.quantization_mode
        cd = x2.dtype
        out = None if cd == _F32 else cd.name
        bias = None
        if self.use_bias:
            # GPTQ and AWQ layers add the float32 bias to float32 products (Keras)
            bias = np.ascontiguousarray(to_compute(self._weight("bias"), _F32)) \
                if mode in ("gptq", "awq") else self._bias32("bias")
        fused = self.activation in _activations.FUSED or self.activation == "linear"
        act = None if self.activation == "linear" or not fused else self.activation
        if mode == "float8":
            y = self._float8_product(x2, bias, act if fused else None, out if fused else None)
        elif mode in ("gptq", "awq"):
            # Keras multiplies the compute-dtype inputs by the float32 dequantized kernel in
            # float32; here too, with one rounding to the compute dtype at the end
            packed = self._prepared("calibrated", lambda: kernels.pack(self.dequantized_kernel()))
            x32 = x2 if cd == _F32 else kernels.cast(x2, _F32)
            y = kernels.matmul(x32, packed, bias=bias, activation=act if fused else None,
                               out_dtype=out if fused else None)
        elif self._activation_quantized():
            packed, bscale = self._prepared("int8", self._int8_operands)
            y = int8_product(x2, packed, bscale, self._activation_quantizer(), bias=bias,
                             activation=act if fused else None,
                             out_dtype=out if fused else None)
        else:
            packed = self._prepared("weights", self._weight_only_operand)
            y = kernels.matmul_quantized(x2, packed, bias=bias, activation=act if fused else None,
                                         out_dtype=out if fused else None)
        if not fused:
            y = _activations.forward_to(self.activation, y, cd)
        return y

    def _int8_operands(self):
        scale = to_compute(self._weight("kernel_scale"), _F32)
        return kernels.pack(np.ascontiguousarray(self._int_kernel())), scale

    def _weight_only_operand(self):
        mode = self.quantization_mode
        scale = to_compute(self._weight("kernel_scale"), _F32)
        if mode == "int8":
            return kernels.pack_quantized(self._weight("kernel"), bits=8, scale=scale)
        block = self._int4_block()
        if block is None:
            return kernels.pack_quantized(self._weight("kernel"), bits=4, scale=scale,
                                          n=self.units)
        self._group_rows()
        return kernels.pack_quantized(self._weight("kernel"), bits=4, scale=scale,
                                      zero=self._weight("kernel_zero"), block_size=block,
                                      n=self.units)

    def _float8_product(self, x2, bias, act, out):
        cd = x2.dtype
        sx = np.float32(self._weight("inputs_scale"))
        sk = np.float32(self._weight("kernel_scale"))
        for what, s in (("inputs_scale", sx), ("kernel_scale", sk)):
            if not (np.isfinite(s) and s > 0):
                raise ValueError(f"Dense '{self.name}': {what} must be a positive finite "
                                 f"number, got {s}")
        packed = self._prepared("float8", lambda: kernels.pack(
            fake_float8(to_compute(self._weight("kernel"), cd), sk), dtype=cd))
        if bias is not None and cd == _F32:
            # Keras adds a float32 bias rounded through bfloat16 in float8 layers
            bias = to_compute(to_compute(bias, np_dtype("bfloat16")), _F32)
        return kernels.matmul(fake_float8(x2, sx), packed, bias=bias, activation=act,
                              out_dtype=out)


class QuantizedEmbedding(Quantizable):
    """Embedding's quantized modes: int8 (one scale per row of the table) and int4 (one scale
    per row, or groups of ``block_size`` columns with zero points).  The rows looked up are
    dequantized as Keras does: ``q / scale`` or ``(q - zero[g]) * scale[g]``."""

    _FLOAT = "embeddings"
    _MODES = ("int8", "int4")

    def _quantized_specs(self, shape, mode, block):
        rows, cols = shape
        if mode == "int8":
            return [("embeddings", (rows, cols), "int8", "zeros", False),
                    ("embeddings_scale", (rows,), "float32", "ones", False)]
        specs = [("embeddings", (rows, (cols + 1) // 2), "int8", "zeros", False)]
        if block is None:
            return specs + [("embeddings_scale", (rows,), "float32", "ones", False)]
        groups = math.ceil(cols / block)
        return specs + [("embeddings_scale", (rows, groups), "float32", "ones", False),
                        ("embeddings_zero", (rows, groups), "int8", "zeros", False),
                        ("g_idx", (cols,), "float32", _GroupIndex(block), False)]

    def _serialization_order(self, mode):
        return ["embeddings", "embeddings_scale", "embeddings_zero", "g_idx"]

    def _quantized_values(self, mode, config):
        w = to_compute(self._weight("embeddings"), _F32)
        if mode == "int8":
            quantizer = config.weight_quantizer or _quantizers.AbsMaxQuantizer(axis=-1)
            q, scale = quantizer(w, axis=quantizer.axis or -1)
            return {"embeddings": q, "embeddings_scale": np.squeeze(scale, axis=-1)}
        block = block_size_of(None, config)
        if block is None:
            quantizer = config.weight_quantizer or _quantizers.AbsMaxQuantizer(
                axis=-1, value_range=(-8, 7))
            q, scale = quantizer(w, axis=quantizer.axis or -1)
            packed, _, _ = _quantizers.pack_int4(q, axis=-1)
            return {"embeddings": packed, "embeddings_scale": np.squeeze(scale, axis=-1)}
        q, scale, zero = _quantizers.abs_max_quantize_grouped_with_zero_point(
            np.ascontiguousarray(w.T), block)
        packed, _, _ = _quantizers.pack_int4(np.ascontiguousarray(q.T), axis=-1)
        return {"embeddings": packed, "embeddings_scale": scale.T, "embeddings_zero": zero.T}

    def _quantized_rows(self, idx):
        """The rows ``idx`` of the table, dequantized in the compute dtype."""
        cd = self._compute_np()
        mode = self.quantization_mode
        q = self._weight("embeddings")[idx]
        if mode == "int4":
            q = _quantizers.unpack_int4(q, self.output_dim, axis=-1)
        scale = to_compute(self._weight("embeddings_scale"), cd)[idx]
        values = q.astype(cd)
        if mode == "int4" and self._int4_block() is not None:
            groups = _group_index(self, self._weight("g_idx"), scale.shape[-1])
            zero = self._weight("embeddings_zero")[idx].astype(cd)
            return np.multiply(np.subtract(values, zero[..., groups]), scale[..., groups])
        return np.divide(values, scale[..., None])


def _group_index(layer, g, count):
    """``g_idx`` as group numbers, checked against the number of groups."""
    groups = g.astype(np.int64)
    if g.size and (not np.array_equal(groups, g) or groups.min() < 0 or groups.max() >= count):
        raise ValueError(f"{type(layer).__name__} '{layer.name}': g_idx must hold group numbers "
                         f"in [0, {count}); got values {g.min()} .. {g.max()}")
    return groups


def fake_float8(x, scale):
    """Keras's float8 fake quantization in ``x``'s dtype: ``cast(clip(x / scale),
    float8_e4m3fn) * scale``, each step rounded to that dtype."""
    cd = x.dtype
    s = np.asarray(scale, dtype=cd)
    q8 = kernels.cast(np.ascontiguousarray(np.divide(x, s)), _E4M3, saturate=True)
    return np.multiply(kernels.cast(q8, cd), s)


__all__ = ["QuantizedWeights", "Quantizable", "check_quantize", "QuantizedDense", "QuantizedEmbedding", "int4_specs", "float8_specs", "calibrated_specs", "calibrated_kernel", "block_size_of", "quantized_policy_name"]
