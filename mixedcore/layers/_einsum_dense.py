"""EinsumDense (``keras.layers.EinsumDense``), float and quantized (docs/layers.md,
docs/quantization.md).

Design:
  A. The equation is Keras's: ``X,Y->Z``, ``...X,Y->...Z`` or ``X...,Y->Z...``.  At build the
     ellipsis is replaced by labels of its own (the elided input axes), so the layer holds a
     plain three-spec equation, and every label is classed: contracted (input and kernel, not
     output), column (kernel and output), row (input and output, not kernel).  The kernel's and
     the bias's shapes, names and order are Keras's.
  B. When every label is one of those three kinds the equation is one GEMM: the input is
     transposed so its row axes come first and its contracted axes last (in the kernel's order)
     and reshaped to (rows, contracted); the kernel to (contracted, columns) in its own axis
     order, packed once per weight version (``packed_weight``); the (rows, columns) result is
     reshaped and transposed to the output.  A bias over column axes only is the GEMM's
     per-column bias, fused with the activation and the one rounding to the compute dtype, as
     Dense's inference does; a bias over row axes is added to the float32 result.  Other
     equations (a label in all three specs, or an input label summed alone) use ``np.einsum``
     in the work dtype (float32, float64 under float64), still rounding once.
  C. Training: the pre-activation in the work dtype from the compute-dtype weights (the same
     GEMM and bits as inference); ``backward`` gives the kernel, bias and input gradients
     through the same transposes (two GEMMs).
  D. Quantized modes (Keras's int8, int4 and float8, ``_quantized.Quantizable``): int8 keeps the
     kernel's shape with ``kernel_scale`` in Keras's output-aligned shape; int4 flattens the
     kernel to (rows = contracted, columns = the rest, by a plain reshape as Keras does) and
     packs the columns; float8 adds the scales.  Inference uses the quantized GEMMs (int8 with
     the inputs quantized row by row over the contracted axes, weight-only int8 / int4 on the
     packed quantized kernel, float8's fake quantization) on the same (rows, contracted) input.
"""
from __future__ import annotations

import math
import re
import string

import numpy as np

from mixedcore import activations as _activations
from mixedcore import kernels
from mixedcore import initializers as _initializers
from mixedcore import quantizers as _quantizers
from mixedcore import regularizers as _regularizers
from mixedcore._dtypes import dtype_name, is_floating, np_dtype, to_compute, work_dtype
from mixedcore.layers import _args
from mixedcore.layers._affine import _Affine
from mixedcore.layers._base import Weight
from mixedcore.layers._quantized import (Quantizable, QuantizedWeights, _group_index,
                                         block_size_of, calibrated_kernel, calibrated_specs,
                                         int8_product,
                                         fake_float8, float8_specs, int4_specs)

_F32 = np.dtype(np.float32)
_GEMM_DTYPES = ("float16", "bfloat16", "float32")
_FORMS = (("([a-zA-Z]+),([a-zA-Z]+)->([a-zA-Z]+)", None),
          (r"\.\.\.([a-zA-Z]+),([a-zA-Z]+)->\.\.\.([a-zA-Z]+)", "left"),
          (r"([a-zA-Z]{2,})\.\.\.,([a-zA-Z]+)->([a-zA-Z]+)\.\.\.", "right"))


def parse_equation(owner, equation):
    """(input spec, kernel spec, output spec, ellipsis side or None) of a Keras equation."""
    if not isinstance(equation, str):
        raise ValueError(f"{owner}: equation must be a str such as 'ab,bc->ac', got "
                         f"{equation!r}")
    for pattern, side in _FORMS:
        found = re.fullmatch(pattern, equation.replace(" ", ""))
        if found:
            specs = found.groups()
            for what, spec in zip(("input", "kernel", "output"), specs):
                if len(set(spec)) != len(spec):
                    raise ValueError(f"{owner}: the {what} spec {spec!r} of equation "
                                     f"{equation!r} repeats a label")
            ins, ws, outs = specs
            for label in outs:
                if label not in ins and label not in ws:
                    raise ValueError(f"{owner}: output label {label!r} of equation {equation!r} "
                                     f"is in neither the input spec {ins!r} nor the kernel "
                                     f"spec {ws!r}")
            for label in ws:
                if label not in ins and label not in outs:
                    raise ValueError(f"{owner}: kernel label {label!r} of equation "
                                     f"{equation!r} is in neither the input spec {ins!r} nor "
                                     f"the output spec {outs!r}; the kernel must be fully "
                                     f"specified")
            return ins, ws, outs, side
    raise ValueError(f"{owner}: invalid equation {equation!r}; equations take the forms "
                     f"X,Y->Z, ...X,Y->...Z or X...,Y->Z... (letters only)")


class _Plan:
    """The equation analysed for one input rank (design A, B)."""

    def __init__(self, owner, equation, bias_axes, input_shape, partial_output):
        ins, ws, outs, side = parse_equation(owner, equation)
        rank = len(input_shape)
        elided = rank - len(ins)
        if (side is None and elided != 0) or elided < 0:
            raise ValueError(f"{owner}: equation {equation!r} takes inputs of rank "
                             f"{len(ins)}{' or more' if side else ''}, received input shape "
                             f"{tuple(input_shape)}")
        used = set(ins + ws + outs + (bias_axes or ""))
        spare = [c for c in string.ascii_letters if c not in used][:elided]
        extra = "".join(spare)
        if side == "left":
            ins, outs = extra + ins, extra + outs
        elif side == "right":
            ins, outs = ins + extra, outs + extra
        self.ins, self.ws, self.outs = ins, ws, outs
        self.equation = f"{ins},{ws}->{outs}"
        # Keras's full output shape: batch, then (left ellipsis) the elided axes, the given shape,
        # then (right ellipsis) the elided axes
        given = list(partial_output)
        n_given = len(outs) - 1 - (max(elided - 1, 0) if side == "left" else 0) - \
            (elided if side == "right" else 0)
        if len(given) != n_given:
            raise ValueError(f"{owner}: output_shape {tuple(partial_output)} must have "
                             f"{n_given} entries (the output spec {outs!r} without the batch "
                             f"axis{' and the ellipsis' if side else ''}) for input shape "
                             f"{tuple(input_shape)}")
        full = [input_shape[0]]
        if side == "left":
            full += list(input_shape[1:elided])
        full += given
        if side == "right":
            full += list(input_shape[rank - elided:])
        self.full_output = full
        in_dim = {label: input_shape[i] for i, label in enumerate(ins)}
        for i, label in enumerate(outs):
            if label in in_dim and full[i] is not None and in_dim[label] is not None \
                    and full[i] != in_dim[label]:
                raise ValueError(f"{owner}: input shape and output shape differ at the shared "
                                 f"label {label!r}: input {tuple(input_shape)} has "
                                 f"{in_dim[label]}, output_shape {tuple(partial_output)} gives "
                                 f"{full[i]}")
        kshape = []
        for label in ws:
            dim = full[outs.index(label)] if label in outs else in_dim[label]
            if dim is None:
                raise ValueError(f"{owner}: the kernel's axis {label!r} needs a known size; "
                                 f"equation {equation!r}, input shape {tuple(input_shape)}, "
                                 f"output_shape {tuple(partial_output)}")
            kshape.append(int(dim))
        self.kernel_shape = tuple(kshape)
        self.bias_shape = None
        if bias_axes is not None:
            first = min(outs.index(c) for c in bias_axes)
            shape = []
            for i in range(first, len(outs)):
                label = outs[i]
                if label not in bias_axes:
                    shape.append(1)
                    continue
                dim = full[i] if full[i] is not None else in_dim.get(label)
                if dim is None:
                    raise ValueError(f"{owner}: bias axis {label!r} needs a known size; "
                                     f"input shape {tuple(input_shape)}")
                shape.append(int(dim))
            self.bias_shape = tuple(shape)
        # design B: the GEMM form
        self.contracted = [c for c in ws if c in ins and c not in outs]
        self.columns = [c for c in ws if c in outs and c not in ins]
        self.rows = [c for c in ins if c in outs and c not in ws]
        self.gemm = len(self.rows) + len(self.contracted) == len(ins) and \
            len(self.contracted) + len(self.columns) == len(ws)
        self.x_perm = [ins.index(c) for c in self.rows + self.contracted]
        self.k_perm = [ws.index(c) for c in self.contracted + self.columns]
        self.y_perm = [(self.rows + self.columns).index(c) for c in outs] if self.gemm else None
        self.k = math.prod(kshape[ws.index(c)] for c in self.contracted)
        self.n = math.prod(kshape[ws.index(c)] for c in self.columns)
        self.column_bias = False
        if self.bias_shape is not None and self.gemm:
            first = len(outs) - len(self.bias_shape)
            self.column_bias = all(size == 1 or outs[first + i] in self.columns
                                   for i, size in enumerate(self.bias_shape))
        self.reduced_axes = [i for i, c in enumerate(ws) if c not in outs]
        self.input_reduced_axes = [i for i, c in enumerate(ins) if c not in outs]

    def output_shape(self, input_shape):
        return tuple(input_shape[self.ins.index(c)] if c in self.ins
                     else self.kernel_shape[self.ws.index(c)] for c in self.outs)

    # -- GEMM form ------------------------------------------------------------------------------
    def rows_of(self, x):
        """x as (rows, contracted), and the row axes' sizes."""
        xt = np.transpose(x, self.x_perm)
        lead = xt.shape[:len(self.rows)]
        return xt.reshape(math.prod(lead), self.k), lead

    def kernel_2d(self, kernel):
        return np.transpose(kernel, self.k_perm).reshape(self.k, self.n)

    def kernel_from_2d(self, k2):
        shape = [self.kernel_shape[i] for i in self.k_perm]
        return np.transpose(k2.reshape(shape), np.argsort(self.k_perm))

    def to_output(self, y2, lead):
        shape = tuple(lead) + tuple(self.kernel_shape[self.ws.index(c)] for c in self.columns)
        return np.transpose(y2.reshape(shape), self.y_perm)

    def from_output(self, dy):
        """An output-shaped array as (rows, columns)."""
        inverse = np.argsort(self.y_perm)
        return np.transpose(dy, inverse).reshape(-1, self.n)

    def input_from_rows(self, dx2, lead):
        shape = tuple(lead) + tuple(self.kernel_shape[self.ws.index(c)]
                                    for c in self.contracted)
        return np.transpose(dx2.reshape(shape), np.argsort(self.x_perm))

    def column_vector(self, bias):
        """A bias over column axes as one value per GEMM column."""
        first = len(self.outs) - bias.ndim
        full = bias.reshape((1,) * first + bias.shape)
        order = [self.outs.index(c) for c in self.rows + self.columns]
        cols = np.transpose(full, order)[(0,) * len(self.rows)]
        shape = tuple(self.kernel_shape[self.ws.index(c)] for c in self.columns)
        return np.ascontiguousarray(np.broadcast_to(cols, shape).reshape(-1), dtype=_F32)

    # -- Keras's per-channel int8 kernel_scale shape ------------------------------------------
    def scale_layout(self, owner):
        """(transpose axes, expand axes) that take the kernel's abs-max (reduced axes kept as 1)
        to Keras's ``kernel_scale``, aligned with the output."""
        ws, outs = self.ws, self.outs
        transpose = [ws.index(c) for c in outs if c in ws]
        expand = [i for i, c in enumerate(outs) if c not in ws]
        for axis in self.reduced_axes:
            if not expand:
                raise ValueError(f"{owner}: int8 quantization of equation {self.equation!r} "
                                 f"is not supported (more contracted kernel axes than output "
                                 f"axes outside the kernel)")
            transpose.insert(expand.pop(0), axis)
        return transpose, expand


class _AxesInitializer:
    """The kernel's initializer drawn on the (contracted, columns) matrix, so its fans are the
    contracted and the column sizes (Keras's ``input_axes`` / ``output_axes``)."""

    def __init__(self, base, plan):
        self.base, self.plan = base, plan

    def __call__(self, shape, dtype=None):
        reduced = self.plan.reduced_axes
        perm = reduced + [i for i in range(len(shape)) if i not in reduced]
        fan_in = math.prod(shape[i] for i in reduced)
        drawn = _initializers.initialize(self.base, (fan_in, math.prod(shape) // max(fan_in, 1)),
                                         np_dtype(dtype or "float32"))
        return np.ascontiguousarray(np.transpose(drawn.reshape([shape[i] for i in perm]),
                                                 np.argsort(perm)))


class QuantizedEinsumDense(QuantizedWeights):
    """The quantized modes of an einsum product (module docstring, D), for EinsumDense and for
    MultiHeadAttention's projections: the holder provides ``_plan`` and what
    ``QuantizedWeights`` needs."""

    _FLOAT = "kernel"
    _MODES: tuple = ("int8", "int4", "float8")
    _plan: _Plan

    def _owner(self):
        return f"EinsumDense '{self.name}'"

    def _flat(self, shape):
        """Keras's int4 matrix of a kernel of ``shape``: (contracted sizes, the others')."""
        reduced = self._plan.reduced_axes
        return (math.prod(d for i, d in enumerate(shape) if i in reduced),
                math.prod(d for i, d in enumerate(shape) if i not in reduced))

    def _calibrated_matrix(self, shape):
        """Keras's (rows, columns) matrix of a GPTQ / AWQ kernel of ``shape``: a 2-D kernel as
        it is; a 3-D one (input, heads, head size) when its first axis is the largest, else
        (heads, head size, output)."""
        if len(shape) == 2:
            return tuple(shape)
        if len(shape) != 3:
            raise ValueError(f"{self._owner()}: GPTQ and AWQ layers take 2-D or 3-D kernels; "
                             f"the equation {self.equation!r} gives {tuple(shape)}")
        if shape.index(max(shape)) == 0:
            return shape[0], shape[1] * shape[2]
        return shape[0] * shape[1], shape[2]

    def _quantized_specs(self, shape, mode, block):
        plan = self._plan
        if mode in ("gptq", "awq"):
            return calibrated_specs(self.dtype_policy, *self._calibrated_matrix(shape),
                                    zero_name="zero_point")
        if not plan.gemm:
            raise ValueError(f"{self._owner()}: quantized layers need an equation that is one "
                             f"GEMM (contracted, row and column labels only); got "
                             f"{self.equation!r}")
        if mode == "int8":
            transpose, expand = plan.scale_layout(self._owner())
            kept = [1 if i in plan.reduced_axes else d for i, d in enumerate(shape)]
            scale = [kept[a] for a in transpose]
            for a in sorted(expand):
                scale.insert(a, 1)
            return [("kernel", shape, "int8", "zeros", False),
                    ("kernel_scale", tuple(scale), "float32", "ones", False)]
        if mode == "int4":
            return int4_specs(*self._flat(shape), block)
        return float8_specs(self.dtype_policy) + [
            ("kernel", shape, None, _AxesInitializer(self.kernel_initializer, plan), True)]

    def _serialization_order(self, mode):
        if mode == "float8":
            return ["kernel", "bias", "inputs_scale", "inputs_amax_history", "kernel_scale",
                    "kernel_amax_history", "outputs_grad_scale", "outputs_grad_amax_history"]
        if mode in ("gptq", "awq"):
            return ["bias", "kernel", "kernel_scale", "zero_point", "awq_scales", "g_idx"]
        return ["kernel", "bias", "kernel_scale", "kernel_zero", "g_idx"]

    def _quantized_values(self, mode, config):
        plan = self._plan
        w = to_compute(self._weight("kernel"), _F32)
        if mode == "float8":
            return {}
        if mode == "int8":
            transpose, expand = plan.scale_layout(self._owner())
            quantizer = config.weight_quantizer or _quantizers.AbsMaxQuantizer(
                axis=tuple(plan.reduced_axes))
            q, scale = quantizer(w, axis=quantizer.axis or tuple(plan.reduced_axes))
            scale = np.transpose(scale, transpose)
            if expand:
                scale = np.expand_dims(scale, tuple(expand))
            return {"kernel": q, "kernel_scale": scale}
        flat = w.reshape(self._flat(w.shape))
        block = block_size_of(None, config)
        if block is None:
            q, scale = _quantizers.abs_max_quantize(flat, 0, (-8, 7))
            packed, _, _ = _quantizers.pack_int4(q, axis=-1)
            return {"kernel": packed, "kernel_scale": np.squeeze(scale, axis=0)}
        q, scale, zero = _quantizers.abs_max_quantize_grouped_with_zero_point(flat, block)
        packed, _, _ = _quantizers.pack_int4(q, axis=-1)
        return {"kernel": packed, "kernel_scale": scale, "kernel_zero": zero}

    # -- the float kernel a quantized layer stands for -------------------------------------------
    def _column_scale(self):
        """int8: ``kernel_scale`` as one value per GEMM column."""
        plan = self._plan
        transpose, expand = plan.scale_layout(self._owner())
        scale = to_compute(self._weight("kernel_scale"), _F32)
        if expand:
            scale = np.squeeze(scale, tuple(expand))
        scale = np.transpose(scale, np.argsort(transpose))       # kernel's shape, reduced = 1
        return np.ascontiguousarray(np.transpose(scale, plan.k_perm).reshape(-1))

    def _kernel_scale_full(self):
        """int8: ``kernel_scale`` broadcastable against the kernel."""
        transpose, expand = self._plan.scale_layout(self._owner())
        scale = to_compute(self._weight("kernel_scale"), _F32)
        if expand:
            scale = np.squeeze(scale, tuple(expand))
        return np.transpose(scale, np.argsort(transpose))

    def _int4_flat(self):
        rows, cols = self._flat(self._plan.kernel_shape)
        return _quantizers.unpack_int4(self._weight("kernel"), cols, axis=-1)

    def dequantized_kernel(self) -> np.ndarray:
        """The float32 kernel (Keras's shape) the quantized weights stand for, as Keras
        dequantizes them."""
        mode = self.quantization_mode
        shape = self._plan.kernel_shape
        if mode is None:
            return to_compute(self._weight("kernel"), _F32)
        if mode in ("gptq", "awq"):
            cols = self._calibrated_matrix(shape)[1]
            return calibrated_kernel(self, self._weight("kernel"), self._weight("kernel_scale"),
                                     self._weight("zero_point"), self._weight("g_idx"),
                                     self._weight("awq_scales") if mode == "awq" else None,
                                     cols).reshape(shape)
        if mode == "float8":
            return fake_float8(to_compute(self._weight("kernel"), _F32),
                               np.float32(self._weight("kernel_scale")))
        if mode == "int8":
            return np.divide(self._weight("kernel").astype(_F32), self._kernel_scale_full())
        q = self._int4_flat().astype(_F32)
        scale = to_compute(self._weight("kernel_scale"), _F32)
        if self._int4_block() is not None:
            groups = _group_index(self, self._weight("g_idx"), scale.shape[0])
            zero = self._weight("kernel_zero").astype(_F32)
            return ((q - zero[groups]) * scale[groups]).reshape(shape)
        return np.divide(q, scale).reshape(shape)

    def _int4_in_gemm_order(self):
        """Whether Keras's flattened int4 kernel is the (contracted, columns) GEMM matrix: the
        contracted axes lead the kernel."""
        reduced = self._plan.reduced_axes
        return reduced == list(range(len(reduced)))

    # -- inference ----------------------------------------------------------------------------
    def _quantized_rows(self, x2, bias, act, out):
        """``x2 @ kernel (+ bias, activation, rounding to out)`` of a quantized layer on the
        (rows, contracted) input; float32 result when ``out`` is None and no activation."""
        plan = self._plan
        mode = self.quantization_mode
        if mode == "float8":
            cd = x2.dtype
            sx = np.float32(self._weight("inputs_scale"))
            sk = np.float32(self._weight("kernel_scale"))
            for what, s in (("inputs_scale", sx), ("kernel_scale", sk)):
                if not (np.isfinite(s) and s > 0):
                    raise ValueError(f"{self._owner()}: {what} must be a positive finite "
                                     f"number, got {s}")
            packed = self._prepared("float8", lambda: kernels.pack(plan.kernel_2d(
                fake_float8(to_compute(self._weight("kernel"), cd), sk)), dtype=cd))
            return kernels.matmul(fake_float8(x2, sx), packed, bias=bias, activation=act,
                                  out_dtype=out)
        if mode in ("gptq", "awq"):
            # Keras: the compute-dtype inputs times the float32 dequantized kernel, in float32
            packed = self._prepared("calibrated", lambda: kernels.pack(
                np.ascontiguousarray(plan.kernel_2d(self.dequantized_kernel()))))
            x32 = x2 if x2.dtype == _F32 else kernels.cast(x2, _F32)
            return kernels.matmul(x32, packed, bias=bias, activation=act, out_dtype=out)
        if mode == "int4" and not self._int4_in_gemm_order():
            packed = self._prepared("dequantized", lambda: kernels.pack(
                plan.kernel_2d(self.dequantized_kernel()), dtype=x2.dtype))
            return kernels.matmul(x2, packed, bias=bias, activation=act, out_dtype=out)
        if self._activation_quantized():
            packed, bscale = self._prepared("int8", self._int8_operands)
            return int8_product(x2, packed, bscale, self._activation_quantizer(), bias=bias,
                                activation=act, out_dtype=out)
        packed = self._prepared("weights", self._weight_only_operand)
        return kernels.matmul_quantized(x2, packed, bias=bias, activation=act, out_dtype=out)

    def _int8_operands(self):
        plan = self._plan
        if self.quantization_mode == "int8":
            q = plan.kernel_2d(self._weight("kernel"))
            scale = self._column_scale()
        else:
            q = self._int4_flat()
            scale = to_compute(self._weight("kernel_scale"), _F32)
        return kernels.pack(np.ascontiguousarray(q)), scale

    def _weight_only_operand(self):
        plan = self._plan
        if self.quantization_mode == "int8":
            q = np.ascontiguousarray(plan.kernel_2d(self._weight("kernel")))
            return kernels.pack_quantized(q, bits=8, scale=self._column_scale())
        scale = to_compute(self._weight("kernel_scale"), _F32)
        block = self._int4_block()
        if block is None:
            return kernels.pack_quantized(self._weight("kernel"), bits=4, scale=scale,
                                          n=plan.n)
        _group_index(self, self._weight("g_idx"), scale.shape[0])
        return kernels.pack_quantized(self._weight("kernel"), bits=4, scale=scale,
                                      zero=self._weight("kernel_zero"), block_size=block,
                                      n=plan.n)


class EinsumDense(QuantizedEinsumDense, Quantizable, _Affine):
    """A dense layer written as an einsum (``keras.layers.EinsumDense``):
    ``activation(einsum(equation, inputs, kernel) + bias)``.

    Parameters
    ----------
    equation : str
        ``X,Y->Z``, ``...X,Y->...Z`` or ``X...,Y->Z...`` with single letters: X labels the
        input's axes, Y the kernel's, Z the output's (e.g. "ab,bc->ac", "abc,cde->abde").
    output_shape : int or tuple of int / None
        The output's shape without the batch axis (and without the ellipsis's axes); None for
        an axis taken from the input.
    activation : str, function or None
        As Dense's: the fused ones run in the GEMM's epilogue when the bias is over the kernel's
        output axes only.
    bias_axes : str or None
        The output labels the bias runs over (None: no bias).
    kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer
        As Dense's; the kernel's initializer sees the contracted axes as its fan in and the
        kernel's output axes as its fan out.
    quantization_config : optional
        A quantization config (``mixedcore.quantizers``), for a layer built under a quantized
        policy.

    Notes
    -----
    Design in the module docstring.  The kernel's and the bias's shapes, names and order, the
    config keys and the quantized weights are Keras's.
    """

    kernel = Weight()
    _MODES = ("int8", "int4", "float8", "gptq", "awq")

    def __init__(self, equation, output_shape, activation=None, bias_axes=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, quantization_config=None,
                 **kwargs):
        owner = "EinsumDense"
        _args.keras_only(owner, kwargs, {"kernel_constraint": None, "bias_constraint": None,
                                         "activity_regularizer": None, "lora_rank": None,
                                         "lora_alpha": None})
        columns = kwargs.pop("gptq_unpacked_column_size", None)
        super().__init__(**kwargs)
        if columns is not None and (isinstance(columns, bool) or
                                    not isinstance(columns, (int, np.integer)) or columns < 1):
            raise ValueError(f"{owner} '{self.name}': gptq_unpacked_column_size must be a "
                             f"positive int or None, got {columns!r}")
        self._gptq_columns = None if columns is None else int(columns)
        ins, ws, outs, _ = parse_equation(f"{owner} '{self.name}'", equation)
        if isinstance(output_shape, (int, np.integer)) and not isinstance(output_shape, bool):
            output_shape = (output_shape,)
        if not isinstance(output_shape, (tuple, list)) or any(
                d is not None and (isinstance(d, bool) or not isinstance(d, (int, np.integer))
                                   or d < 1) for d in output_shape):
            raise ValueError(f"{owner} '{self.name}': output_shape must be an int or a tuple of "
                             f"positive ints / None, got {output_shape!r}")
        if bias_axes is not None:
            if not isinstance(bias_axes, str) or not bias_axes:
                raise ValueError(f"{owner} '{self.name}': bias_axes must be None or a str of "
                                 f"output labels, got {bias_axes!r}")
            for c in bias_axes:
                if c not in outs:
                    raise ValueError(f"{owner} '{self.name}': bias axis {c!r} of bias_axes "
                                     f"{bias_axes!r} is not in the output spec {outs!r} of "
                                     f"equation {equation!r}")
        self.equation = equation
        self.partial_output_shape = tuple(None if d is None else int(d) for d in output_shape)
        self.bias_axes = bias_axes
        self._init_affine(owner, activation, bias_axes is not None,
                          (kernel_initializer, bias_initializer),
                          (kernel_regularizer, bias_regularizer))
        self._init_quantization(owner, quantization_config)
        self._train_cache = None

    # -- build ----------------------------------------------------------------------------------
    def build(self, input_shape):
        owner = f"EinsumDense '{self.name}'"
        if self.compute_dtype is not None and not is_floating(np_dtype(self.compute_dtype)):
            raise TypeError(f"{owner}: compute dtype must be floating, got {self.compute_dtype}")
        plan = _Plan(owner, self.equation, self.bias_axes, tuple(input_shape),
                     self.partial_output_shape)
        self._plan = plan
        if self.quantization_mode is not None:
            if self.quantization_mode == "gptq" and self._gptq_columns is not None and \
                    self._gptq_columns != self._calibrated_matrix(plan.kernel_shape)[1]:
                raise ValueError(f"{owner}: gptq_unpacked_column_size "
                                 f"{self._gptq_columns} does not fit the kernel "
                                 f"{plan.kernel_shape} (its GPTQ matrix has "
                                 f"{self._calibrated_matrix(plan.kernel_shape)[1]} columns)")
            self._build_quantized(plan.kernel_shape)
        else:
            self.add_weight("kernel", plan.kernel_shape,
                            _AxesInitializer(self.kernel_initializer, plan),
                            self.kernel_regularizer)
        if plan.bias_shape is not None:
            self.add_weight("bias", plan.bias_shape, self.bias_initializer, self.bias_regularizer)

    def check_input_shape(self, shape):
        """The rank of the build, the kernel's sizes on the contracted axes and the bias's on
        the input axes it runs over; other input axes are free (the batch, a sequence)."""
        plan = self._plan
        fixed = {c: plan.kernel_shape[plan.ws.index(c)] for c in plan.ins if c in plan.ws}
        if plan.bias_shape is not None:
            first = len(plan.outs) - len(plan.bias_shape)
            for i, size in enumerate(plan.bias_shape):
                label = plan.outs[first + i]
                if label in plan.ins and size != 1:
                    fixed[label] = size
        if len(shape) != len(plan.ins) or any(shape[plan.ins.index(c)] != size
                                              for c, size in fixed.items()):
            expected = tuple(fixed.get(c) for c in plan.ins)
            raise ValueError(f"EinsumDense '{self.name}': expected input of shape {expected} "
                             f"(None: any size) for equation {self.equation!r}, received "
                             f"{tuple(shape)}")

    def compute_output_shape(self, input_shape):
        if not self.built:
            plan = _Plan(f"EinsumDense '{self.name}'", self.equation, self.bias_axes,
                         tuple(input_shape), self.partial_output_shape)
        else:
            plan = self._plan
        return plan.output_shape(tuple(input_shape))

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    # -- products ---------------------------------------------------------------------------------
    def _product(self, x, kernel, bias, activation=None, out_dtype=None):
        return kernels.matmul(x, kernel, bias=bias, activation=activation, out_dtype=out_dtype)

    def _pack(self, name, value, cd):
        if name == "kernel":
            value = self._plan.kernel_2d(value)
        return kernels.pack(value, dtype=cd, whole_k=True)

    def _prepared_bias(self):
        cd = self._compute_np()
        key = (self._version, cd)
        entry = self._bias_cache.get("columns")
        if entry is None or entry[0] != key:
            entry = (key, self._plan.column_vector(self._bias32("bias").reshape(
                self._plan.bias_shape)))
            self._bias_cache["columns"] = entry
        return entry[1]

    def _bias_value(self, cd):
        """The bias in float32 (rounded to ``cd`` first, but for GPTQ and AWQ layers, which
        add the float32 bias to float32 products as Keras does), in its own shape; float8
        under a float32 policy rounds it through bfloat16 as Keras does."""
        if self.quantization_mode in ("gptq", "awq"):
            return to_compute(self._weight("bias"), _F32)
        b = self._bias32("bias").reshape(self._plan.bias_shape)
        if self.quantization_mode == "float8" and cd == _F32:
            b = to_compute(to_compute(b, np_dtype("bfloat16")), _F32)
        return b

    def call(self, inputs, training=False):
        x = inputs
        if not is_floating(x.dtype):
            x = x.astype(self._compute_np())
        cd = x.dtype
        plan = self._plan
        quantized = self.quantization_mode is not None
        if quantized:
            if cd.name not in _GEMM_DTYPES:
                raise TypeError(f"EinsumDense '{self.name}': a quantized layer computes in "
                                f"float32, bfloat16 or float16, not {cd.name}")
            if training and self.quantization_mode == "float8":
                raise ValueError(f"EinsumDense '{self.name}': float8 layers are inference-only "
                                 f"in mixedcore (float8 training's scale updates are not "
                                 f"implemented)")
        gemm = plan.gemm and dtype_name(cd) in _GEMM_DTYPES
        fused = self.activation in _activations.FUSED or self.activation == "linear"
        use_bias = plan.bias_shape is not None
        if gemm and not training and fused and (not use_bias or plan.column_bias):
            x2, lead = plan.rows_of(x)
            act = None if self.activation == "linear" else self.activation
            out = dtype_name(cd) if cd.itemsize == 2 else None
            if quantized:
                bias = plan.column_vector(self._bias_value(cd)) if use_bias else None
                y2 = self._quantized_rows(x2, bias, act, out)
            else:
                bias = self._prepared_bias() if use_bias else None
                y2 = kernels.matmul(x2, self.packed_weight("kernel"), bias=bias, activation=act,
                                    out_dtype=out)
            return plan.to_output(y2, lead)
        if quantized and not training:
            x2, lead = plan.rows_of(x)
            z = plan.to_output(self._quantized_rows(x2, None, None, None), lead)
            if use_bias:
                z = z + self._bias_value(cd)
            y, _ = self._finish(z, cd)
            return y
        kernel = to_compute(self.dequantized_kernel(), cd) if quantized \
            else self._compute_weight("kernel")
        x2 = lead = None
        if gemm:
            x2, lead = plan.rows_of(x)
            # inference reuses the packed kernel: the same GEMM and bits as the raw one
            kernel2 = plan.kernel_2d(kernel) if training or quantized \
                else self.packed_weight("kernel")
            bias = self._prepared_bias() if use_bias and plan.column_bias else None
            z = plan.to_output(kernels.matmul(x2, kernel2, bias=bias), lead)
            if use_bias and not plan.column_bias:
                z = z + to_compute(self._compute_weight("bias"), z.dtype)
        else:
            w = work_dtype(cd)
            z = np.einsum(plan.equation, to_compute(x, w), to_compute(kernel, w))
            if use_bias:
                z = z + to_compute(self._compute_weight("bias"), w)
        y, y_work = self._finish(z, cd)
        if training:
            self._train_cache = (x, x2, lead, z, y_work, kernel)
        return y

    def backward(self, dy, need_input_grad=True):
        x, x2, lead, z, y_work, kernel = self._train_cache
        plan = self._plan
        cd = x.dtype
        if self.activation == "linear":
            dz = to_compute(dy, cd)
        else:
            dz = to_compute(_activations.backward(self.activation, to_compute(dy, z.dtype), z,
                                                  y_work), cd)
        grads = {}
        dx = None
        if x2 is not None:
            dz2 = np.ascontiguousarray(plan.from_output(dz))
            k2 = plan.kernel_2d(kernel)
            dk = plan.kernel_from_2d(kernels.matmul(x2.T, dz2))
            if need_input_grad:
                sixteen = cd.itemsize == 2
                dx2 = kernels.matmul(dz2, k2.T, out_dtype=dtype_name(cd) if sixteen else None)
                dx = plan.input_from_rows(dx2, lead)
        else:
            w = work_dtype(cd)
            dzw, xw, kw = to_compute(dz, w), to_compute(x, w), to_compute(kernel, w)
            dk = np.einsum(f"{plan.outs},{plan.ins}->{plan.ws}", dzw, xw)
            if need_input_grad:
                dx = to_compute(np.einsum(f"{plan.outs},{plan.ws}->{plan.ins}", dzw, kw), cd)
        if self.quantization_mode is None:
            grads["kernel"] = np.ascontiguousarray(dk)
        if plan.bias_shape is not None:
            dzw = to_compute(dz, work_dtype(cd))
            lead_axes = dzw.ndim - len(plan.bias_shape)
            db = dzw.sum(axis=tuple(range(lead_axes)))
            ones = tuple(i for i, s in enumerate(plan.bias_shape) if s == 1)
            grads["bias"] = db.sum(axis=ones, keepdims=True) if ones else db
        self._set_gradients(grads)
        if dx is None:
            return None
        return np.ascontiguousarray(dx)

    def get_config(self):
        config = super().get_config()
        config.update({
            "output_shape": self.partial_output_shape, "equation": self.equation,
            "activation": self.activation, "bias_axes": self.bias_axes,
            "kernel_initializer": _initializers.serialize(self.kernel_initializer),
            "bias_initializer": _initializers.serialize(self.bias_initializer),
            "kernel_regularizer": _regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": _regularizers.serialize(self.bias_regularizer),
            "activity_regularizer": None, "kernel_constraint": None, "bias_constraint": None,
            "quantization_config": _quantizers.serialize(self.quantization_config)})
        if self.quantization_mode == "gptq" and self.built:
            config["gptq_unpacked_column_size"] = self._calibrated_matrix(
                self._plan.kernel_shape)[1]
        return config


__all__ = ["EinsumDense"]
