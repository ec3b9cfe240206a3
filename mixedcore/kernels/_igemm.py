"""int8 matrix products with exact int32 sums, scaled back to floats as Keras's int8 Dense
layer does, and the dynamic row quantization that feeds them."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore._core._mixedcore import PackedInt8Matrix, PackedMatrix
from mixedcore.kernels._checks import (as_native, bfloat16, check_bytes, check_out, new_array,
                                     product_bias)
from mixedcore.kernels._gemm import ACTIVATIONS, _batch_offsets
from mixedcore.kernels._runtime import ISA_LEVELS

_I8, _I32 = np.dtype(np.int8), np.dtype(np.int32)
_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)
_FLOAT_CODES = {_F16: 0, bfloat16: 1, _F32: 2}
_FLOAT_NAMES = "float32, bfloat16, float16"
_OUT_NAMES = {"float16": _F16, "bfloat16": bfloat16, "float32": _F32, "int32": _I32}
MAX_K = _lib.IGEMM_MAX_K
MAX_K_ZP = _lib.IGEMM_MAX_K_ZP


def _float_array(fname, name, x):
    """``x`` as a native, aligned float32 / bfloat16 / float16 ndarray, or TypeError."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{fname}: {name} must be a numpy.ndarray, got {type(x).__name__}")
    native = x.dtype.newbyteorder("=") if x.dtype.byteorder not in "=|" else x.dtype
    if native not in _FLOAT_CODES:
        raise TypeError(f"{fname}: unsupported dtype {x.dtype} for {name}; supported: "
                        f"{_FLOAT_NAMES}")
    return as_native(x, fname)


def quantize_rows(x: np.ndarray, *, zero_point: bool = False, out: np.ndarray | None = None,
                  scale_out: np.ndarray | None = None,
                  zero_out: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Keras's dynamic int8 quantization of each row (last axis) of ``x``, or, with
    ``zero_point``, min-max quantization with a zero point per row.

    ``scale = 127 / (max(|x|, axis=-1, keepdims=True) + 1e-7)`` and
    ``q = clip(round_half_even(x * scale), -127, 127)`` as int8, computed as torch computes
    that expression in ``x``'s dtype: float32 operations for float32; for bfloat16 and float16
    each operation in float32 rounded to the dtype (1e-7 converted to the dtype first, as torch
    converts the Python scalar; the division is one rounding, ``torch.divide``).

    With ``zero_point`` (asymmetric codes, in float32 whatever ``x``'s dtype, each operation
    rounded once): ``lo = min(0, min(x))``, ``hi = max(0, max(x))`` over the row,
    ``scale = 255 / ((hi - lo) + 1e-7)``, ``zero = round_half_even(-lo * scale) - 128`` (in
    [-128, 127]) and ``q = clip(round_half_even(x * scale) + zero, -128, 127)``: the row's
    range takes all 256 codes, 0 is exactly ``zero``, and ``x ~ (q - zero) / scale``.
    ``matmul_int8(q, b, a_zero=zero, ...)`` multiplies such rows.

    Parameters
    ----------
    x : ndarray of shape (..., k)
        float32, bfloat16 or float16; any strides.
    zero_point : bool, optional
        Min-max codes with a zero point per row (default False: Keras's symmetric codes).
    out : ndarray, optional
        int8 of ``x``'s shape, writable, not overlapping ``x``.
    scale_out : ndarray, optional
        ``x``'s dtype (float32 with ``zero_point``), shape ``x.shape[:-1] + (1,)``.
    zero_out : ndarray, optional
        Only with ``zero_point``: int32, shape ``x.shape[:-1] + (1,)``.

    Returns
    -------
    (q, scale), or (q, scale, zero) with ``zero_point``
        int8 of ``x``'s shape and the scales, of ``x``'s dtype (float32 with ``zero_point``),
        shape ``(..., 1)``; the zero points int32, shape ``(..., 1)``.

    Raises
    ------
    TypeError
        ``x`` not an ndarray or of another dtype; ``out`` / ``scale_out`` / ``zero_out`` not
        ndarrays; ``zero_point`` not a bool.
    ValueError
        0-d ``x``; ``out`` / ``scale_out`` / ``zero_out`` of the wrong shape or dtype,
        read-only or overlapping ``x``; ``zero_out`` without ``zero_point``.

    Notes
    -----
    A row of zeros gives the scale ``127 / 1e-7`` rounded to the dtype and zeros.  As in
    torch: a NaN in a row makes its scale NaN and its values 0; an infinity makes the scale 0
    and every value 0 (``inf * 0`` is NaN, which torch's conversion to int8 makes 0 on
    x86-64); in float16 a row with ``max|x|`` below about 0.00194 overflows the scale to inf,
    its zeros become 0 and its other values +-127.  The scale then carries the problem into
    ``matmul_int8``'s result (NaN or inf) rather than hiding it.  With ``zero_point``, a row
    with a NaN or an infinity gets the scale NaN, the zero point 0 and codes 0 (its products
    are NaN).
    """
    fname = "quantize_rows"
    x = _float_array(fname, "x", x)
    if not isinstance(zero_point, (bool, np.bool_)):
        raise TypeError(f"{fname}: zero_point must be a bool, got {type(zero_point).__name__}: "
                        f"{zero_point!r}")
    if x.ndim == 0:
        raise ValueError(f"{fname}: x is 0-d; it needs a last axis to quantize along")
    if zero_out is not None and not zero_point:
        raise ValueError(f"{fname}: zero_out is for zero_point=True (Keras's symmetric codes "
                         f"have no zero points)")
    code = _FLOAT_CODES[x.dtype]
    k = x.shape[-1]
    scale_shape = x.shape[:-1] + (1,)
    scale_dtype = _F32 if zero_point else x.dtype
    if out is not None:
        check_out(fname, out, x.shape, _I8, [x])
    given = [x] + ([out] if out is not None else [])
    for name, arr, dtype in (("scale_out", scale_out, scale_dtype), ("zero_out", zero_out, _I32)):
        if arr is None:
            continue
        try:
            check_out(fname, arr, scale_shape, dtype, given)
        except (TypeError, ValueError) as exc:   # the message names `out`: say which one
            raise type(exc)(str(exc).replace(f"{fname}: out", f"{fname}: {name}", 1)) \
                from None
        given.append(arr)
    # the result, and the rows of a view that does not reshape without a copy
    check_bytes(fname, "x", x.shape, x.dtype.itemsize)
    check_bytes(fname, "the scales", scale_shape, max(x.dtype.itemsize, 4 * zero_point))
    rows = math.prod(x.shape[:-1])
    x2 = x.reshape(rows, k)

    def result(given, shape, dtype):
        if given is not None and given.flags.c_contiguous and given.dtype.isnative:
            return given
        return np.empty(shape, dtype)

    q = result(out, x.shape, _I8)
    s = result(scale_out, scale_shape, scale_dtype)
    z = result(zero_out, scale_shape, _I32) if zero_point else None
    if rows:
        _lib.igemm_quantize(x2, code, q.reshape(rows, k), s.reshape(rows),
                            None if z is None else z.reshape(rows))
    for given_out, made in ((out, q), (scale_out, s), (zero_out, z)):
        if given_out is not None and made is not given_out:
            given_out[...] = made
    q = q if out is None else out
    s = s if scale_out is None else scale_out
    if z is None:
        return q, s
    return q, s, z if zero_out is None else zero_out


def _int8_operand(fname, name, x):
    if isinstance(x, PackedMatrix):
        raise TypeError(f"{fname}: {name} must be a numpy.ndarray (only b may be a "
                        f"PackedMatrix), got PackedMatrix")
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{fname}: {name} must be an array, got {type(x).__name__} "
                            f"({exc})") from None
    if x.dtype != _I8:
        raise TypeError(f"{fname}: {name} must be int8, got {x.dtype}")
    return x


def _per_row(x, batch, m):
    """Per-row values given as (..., m, 1) viewed as (..., m); anything else as it is."""
    if isinstance(x, np.ndarray) and x.ndim >= 2 and x.shape[-2:] == (m, 1) and \
            (m != 1 or x.ndim == len(batch) + 2):
        return x[..., 0]
    return x


def _broadcast32(fname, name, x, shape, dtype):
    """``x`` broadcast to ``shape`` as a new contiguous 1-D array of ``dtype`` (4 bytes), its
    size checked before the copy (a broadcast view may claim more than memory holds)."""
    try:
        x = np.broadcast_to(x, shape)
    except ValueError:
        raise ValueError(f"{fname}: {name} has shape {x.shape}, expected {shape}") from None
    check_bytes(fname, name, shape, 4)
    return np.ascontiguousarray(x, dtype=dtype).reshape(-1)


def _scale32(fname, name, s, shape):
    return _broadcast32(fname, name, _float_array(fname, name, s), shape, np.float32)


def matmul_int8(a: ArrayLike, b: np.ndarray | PackedMatrix, *, a_scale: np.ndarray | None = None,
                b_scale: np.ndarray | None = None, a_zero: np.ndarray | None = None,
                bias: np.ndarray | None = None, activation: str | None = None,
                out_dtype: DTypeLike | None = None, out: np.ndarray | None = None) -> Any:
    """``a @ b`` of int8 operands with exact int32 sums, optionally scaled back to floats;
    with ``a_zero``, ``(a - a_zero) @ b`` (rows quantized with zero points).

    Parameters
    ----------
    a : ndarray of shape (..., m, k), int8
        Any strides (transposed, reversed, sliced views are read in place).
    b : ndarray of shape (k, n), int8, or a PackedMatrix of int8 (``kernels.pack``)
    a_scale : ndarray of shape (..., m, 1) or (..., m), optional
        One scale per row of ``a`` (float32, bfloat16 or float16: taken exactly as float32);
        the batch dimensions as ``a``'s or broadcasting to them.
    b_scale : ndarray of shape (n,), optional
        One scale per column of ``b``.  Both scales or neither.
    a_zero : ndarray of shape (..., m, 1) or (..., m), optional
        One zero point per row of ``a`` (an integer dtype, values in [-128, 127]: those of
        ``quantize_rows(x, zero_point=True)``), broadcasting as ``a_scale``; the product is
        then ``(a - a_zero) @ b``, exact, for k up to 65793.
    bias : ndarray of shape (n,), optional
        float32 / bfloat16 / float16 (shape () or (1,) broadcasts); only with the scales.
    activation : None or a name of ``activation`` ("relu", "gelu", ...), optional
        Only with the scales.
    out_dtype : dtype-like, optional
        Without scales: int32 (the default, and the only choice).  With scales: float32
        (default), bfloat16 or float16.
    out : ndarray, optional
        The result's shape and dtype (``out_dtype``, or its own dtype when ``out_dtype`` is
        None), writable, not overlapping an input; any strides.

    Returns
    -------
    ndarray
        Without scales, the exact int32 product.  With scales,
        ``activation(float32(a @ b) / (b_scale[j] * a_scale[i]) + bias)`` (``a - a_zero`` for
        ``a`` with zero points): each operation in
        float32 rounded once, in that order (bit-identical to that float32 formula in numpy),
        the activation as ``kernels.activation`` computes it, then rounded once to nearest
        even to ``out_dtype``.

    Raises
    ------
    TypeError
        Operands that are not int8 (or not arrays), a PackedMatrix of another dtype, scales or
        bias of another dtype, an unsupported ``out_dtype``.
    ValueError
        Shapes that do not match (inner dimensions, scales, zero points, bias), ``b`` not 2-D,
        k above 131071 (the largest k whose int32 sums cannot overflow, -128 included; 65793
        with zero points), zero points outside [-128, 127], one scale
        without the other, bias / activation / a float ``out_dtype`` without scales, an unknown
        activation, a bad ``out``, a PackedMatrix packed at a level with another panel width.

    Notes
    -----
    The sums are exact, so the result is the same bits at every level, thread count and
    block size, packed or not.
    """
    fname = "matmul_int8"
    a = _int8_operand(fname, "a", a)
    packed = isinstance(b, PackedMatrix)
    if packed and not isinstance(b, PackedInt8Matrix):
        raise TypeError(f"{fname}: b is a PackedMatrix of {b.dtype}; pack an int8 matrix "
                        f"(kernels.pack(b) with b of dtype int8)")
    if not packed:
        b = _int8_operand(fname, "b", b)
    if a.ndim < 2:
        raise ValueError(f"{fname}: a must have shape (..., m, k), got {a.shape}")
    if b.ndim != 2:
        raise ValueError(f"{fname}: b must be 2-D (k, n), got shape {b.shape}")
    m, k = a.shape[-2:]
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"{fname}: inner dimensions differ: {a.shape} @ {b.shape}")
    if k > MAX_K:
        raise ValueError(f"{fname}: k = {k} is above {MAX_K}, the largest k whose int32 sums "
                         f"cannot overflow for int8 inputs")
    if a_zero is not None and k > MAX_K_ZP:
        raise ValueError(f"{fname}: k = {k} is above {MAX_K_ZP}, the largest k whose int32 "
                         f"sums cannot overflow for int8 inputs with zero points")
    batch = a.shape[:-2]
    out_shape = batch + (m, n)
    if (a_scale is None) != (b_scale is None):
        raise ValueError(f"{fname}: a_scale and b_scale go together; got only "
                         f"{'a_scale' if a_scale is not None else 'b_scale'}")
    scaled = a_scale is not None
    if isinstance(activation, str) or activation is None:
        act = ACTIVATIONS.get(activation)
    else:
        act = None
    if act is None:
        raise ValueError(f"{fname}: unknown activation {activation!r}; expected one of "
                         f"{[x for x in ACTIVATIONS if x is not None]} or None")
    if out_dtype is None:
        target = out.dtype if isinstance(out, np.ndarray) else (_F32 if scaled else _I32)
    else:
        target = _OUT_NAMES.get(out_dtype) if isinstance(out_dtype, str) else None
        if target is None:
            try:
                target = np.dtype(out_dtype)
            except TypeError as exc:
                raise TypeError(f"{fname}: cannot interpret {out_dtype!r} as a dtype "
                                f"({exc})") from None
    if scaled and target not in _FLOAT_CODES:
        raise TypeError(f"{fname}: unsupported out dtype {target} with scales; supported: "
                        f"{_FLOAT_NAMES}")
    if not scaled:
        if target != _I32:
            raise ValueError(f"{fname}: out dtype {target} needs a_scale and b_scale; the "
                             f"unscaled product is int32")
        if bias is not None or act:
            raise ValueError(f"{fname}: bias and activation apply to the scaled product; "
                             f"pass a_scale and b_scale")
    inputs = [a] if packed else [a, b]
    a32 = b32 = None
    if scaled:
        a_scale = _per_row(a_scale, batch, m)
        a32 = _scale32(fname, "a_scale", a_scale, batch + (m,))
        b32 = _scale32(fname, "b_scale", b_scale, (n,))
        inputs += [a_scale, b_scale]
    zero32 = None
    if a_zero is not None:
        zero32 = _zero32(fname, a_zero, batch, m)
        inputs.append(a_zero)
    bias32, bias_stride = None, 0
    if bias is not None:
        bias32, bias_stride = product_bias(fname, bias, n, _FLOAT_CODES, _FLOAT_NAMES)
        inputs.append(bias)
    if out is None:
        result = work = new_array(fname, "the result", out_shape, target)
    else:
        check_out(fname, out, out_shape, target, inputs)
        result = out
        work = out if out.flags.aligned and out.dtype.isnative else np.empty(
            out_shape, dtype=target.newbyteorder("="))
    if result.size:
        _run(a, b, work, a32, b32, zero32, bias32, bias_stride, batch, m, n, k, target, act)
        if work is not result:
            result[...] = work
    return result


def _zero32(fname, a_zero, batch, m):
    """The zero points as contiguous int32 (batch * m,), checked: integers in [-128, 127]."""
    if not isinstance(a_zero, np.ndarray):
        raise TypeError(f"{fname}: a_zero must be a numpy.ndarray, got {type(a_zero).__name__}")
    if a_zero.dtype.kind not in "iu":
        raise TypeError(f"{fname}: a_zero must have an integer dtype, got {a_zero.dtype}")
    # each value checked once: a broadcast axis (stride 0) holds one value along it
    given = a_zero[tuple(slice(0, 1) if st == 0 else slice(None) for st in a_zero.strides)]
    if given.size and (given.min() < -128 or given.max() > 127):
        bad = given[(given < -128) | (given > 127)]
        raise ValueError(f"{fname}: a_zero holds values outside [-128, 127] (the zero points of "
                         f"int8 codes), such as {bad.reshape(-1)[:4].tolist()}")
    return _broadcast32(fname, "a_zero", _per_row(a_zero, batch, m), batch + (m,), np.int32)


def _run(a, b, out, a32, b32, zero32, bias32, bias_stride, batch, m, n, k, target, act):
    packed = isinstance(b, PackedMatrix)
    offsets = None
    if batch:
        offsets = np.zeros((math.prod(batch), 2), dtype=np.int64)
        offsets[:, 0] = _batch_offsets(a, batch)
        offsets[:, 1] = _batch_offsets(out, batch)
    out_code = _lib.IGEMM_I32 if target == _I32 else _FLOAT_CODES[target.newbyteorder("=")]
    r = _lib.igemm_run(a, b, out, a32, b32, bias32, offsets, m, n, k,
                       (a.strides[-2], a.strides[-1]),
                       (0, 0) if packed else (b.strides[0], b.strides[1]),
                       (out.strides[-2], out.strides[-1]), bias_stride, out_code, act, zero32)
    if r == _lib.IGEMM_FORMAT_ERROR:
        raise ValueError(
            f"matmul_int8: b was packed at level {b.isa!r} in panels of {b.format[2]} "
            f"columns; the current level {ISA_LEVELS[_lib.get_level()]!r} uses "
            f"{_lib.igemm_format()[0]}; pack it again with kernels.pack(b.unpack())")
