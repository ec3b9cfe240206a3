"""Fused scaled dot-product attention for inference (no scores in memory)."""
from __future__ import annotations

import math
import numbers

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._checks import as_native, bfloat16, check_out, float_code, new_array

_F16, _BF16, _F32 = np.dtype(np.float16), bfloat16, np.dtype(np.float32)
_CODES = {_F16: 0, _BF16: 1, _F32: 2}
_NAMES = "float16, bfloat16, float32"
_OUT_DTYPES = {"float16": _F16, "bfloat16": _BF16, "float32": _F32}
_BOOL = np.dtype(bool)


def _operand(what, x):
    if not isinstance(x, np.ndarray):
        raise TypeError(f"attention: {what} must be a numpy.ndarray, got {type(x).__name__}")
    code = float_code(x.dtype)
    if code is None or code not in _CODES.values():
        raise TypeError(f"attention: unsupported {what} dtype {x.dtype}; supported: {_NAMES}")
    if x.ndim != 4:
        raise ValueError(f"attention: {what} must have 4 dimensions (batch, heads, positions, "
                         f"features), got shape {x.shape}")
    if not (x.dtype.isnative and x.flags.aligned):
        x = as_native(x, "attention")
    return x


def _out_dtype(out_dtype, default):
    if out_dtype is None:
        return default
    target = _OUT_DTYPES.get(out_dtype) if isinstance(out_dtype, str) else None
    if target is None:
        try:
            target = np.dtype(out_dtype)
        except TypeError as exc:
            raise TypeError(f"attention: cannot interpret {out_dtype!r} as a dtype ({exc})") \
                from None
        if target not in _CODES:
            raise TypeError(f"attention: unsupported out_dtype {target}; supported: {_NAMES}")
    return target


def attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, scale: float,
              mask: ArrayLike | None = None, causal: bool = False, out: np.ndarray | None = None,
              out_dtype: DTypeLike | None = None) -> np.ndarray:
    """Scaled dot-product attention, ``softmax(scale * q @ k^T + mask) @ v``, per (batch item,
    head), without the (T, S) scores in memory.

    Parameters
    ----------
    q : ndarray, (B, H, T, D)
    k : ndarray, (B, H, S, D)
    v : ndarray, (B, H, S, Dv)
        One dtype for the three: float16, bfloat16 or float32 (either byte order); any strides
        (for example ``x.transpose(0, 2, 1, 3)`` of a (B, T, H, D) projection): nothing is
        copied unless the array is byte-swapped or misaligned.
    scale : float
        Multiplies the float32 product ``q @ k^T`` (rounded to float32 first).
    mask : ndarray of bool, optional
        Broadcastable to (B, H, T, S); True = attend.  A False entry gets the score -1e9 before
        the softmax and the probability 0 after it.
    causal : bool, default False
        Also exclude the pairs with key position > query position (a lower-triangular mask).
    out : ndarray, optional
        (B, H, T, Dv), dtype ``out_dtype`` (or its own, float16 / bfloat16 / float32), any
        strides (for example a transposed view of a (B, T, H, Dv) array), writable, not
        overlapping the inputs.
    out_dtype : dtype-like, optional
        The result's dtype (default: the inputs').

    Returns
    -------
    ndarray
        ``out`` if given, else a new (B, H, T, Dv) array.

    Raises
    ------
    TypeError
        An operand not an ndarray or of an unsupported dtype; the operands of different dtypes;
        ``mask`` not bool; ``scale`` not a real number; ``causal`` not a bool.
    ValueError
        Shapes that do not agree; a mask that does not broadcast; ``scale`` not finite; ``out``
        of the wrong shape or dtype, read-only or overlapping an input.

    Notes
    -----
    The numbers are those of the unfused computation (``kernels.matmul`` with ``alpha=scale``,
    ``numpy.where`` with -1e9, ``kernels.softmax``, the probabilities rounded to the inputs'
    dtype and zeroed where masked, ``kernels.matmul`` into ``out``), with both products summed
    in float32 as the GEMM's default kernels at the AVX-512 levels sum them: one fused
    multiply-add per product in index order (bfloat16: in VDPBF16PS's pair order, the odd index
    of each pair first), in blocks of 1024 (bfloat16: 2048) whose partial sums are added in
    order.  A fully masked row gets zero probabilities (its output is 0 for finite v).  Every
    ISA level and thread count gives the same bits (see docs/layers.md, MultiHeadAttention).
    """
    q = _operand("q", q)
    k = _operand("k", k)
    v = _operand("v", v)
    dt = q.dtype
    if k.dtype != dt or v.dtype != dt:
        raise TypeError(f"attention: q, k and v must have one dtype, got {q.dtype}, {k.dtype} "
                        f"and {v.dtype}")
    b, h, t, d = q.shape
    s = k.shape[2]
    if k.shape[:2] != (b, h) or k.shape[3] != d or v.shape[:3] != (b, h, s):
        raise ValueError(f"attention: shapes do not agree: q {q.shape} (B, H, T, D), k "
                         f"{k.shape} (B, H, S, D), v {v.shape} (B, H, S, Dv)")
    dv = v.shape[3]
    if type(scale) is not float and (isinstance(scale, bool) or
                                     not isinstance(scale, numbers.Real)):
        raise TypeError(f"attention: scale must be a real number, got {type(scale).__name__}")
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"attention: scale must be finite, got {scale}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"attention: causal must be a bool, got {type(causal).__name__}")
    m = None
    if mask is not None:
        if not isinstance(mask, np.ndarray):
            raise TypeError(f"attention: mask must be a numpy.ndarray of bool, got "
                            f"{type(mask).__name__}")
        if mask.dtype != _BOOL:
            raise TypeError(f"attention: mask must have dtype bool, got {mask.dtype}")
        target = (b, h, t, s)
        if mask.ndim > 4 or any(e not in (1, f) for e, f in
                                zip(mask.shape[::-1], target[::-1])):
            raise ValueError(f"attention: mask of shape {mask.shape} does not broadcast to "
                             f"(B, H, T, S) = {target}")
        m = np.broadcast_to(mask, target)
    target_dt = _out_dtype(out_dtype, dt)
    if out is not None:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"attention: out must be a numpy.ndarray, got {type(out).__name__}")
        if out_dtype is None:
            target_dt = out.dtype
            if target_dt not in _CODES:
                raise TypeError(f"attention: unsupported out dtype {out.dtype}; supported: "
                                f"{_NAMES}")
        inputs = (q, k, v) if mask is None else (q, k, v, mask)
        check_out("attention", out, (b, h, t, dv), target_dt, inputs)
    direct = out is not None and out.flags.aligned
    work = out if direct and out is not None else new_array("attention", "the output",
                                                            (b, h, t, dv), target_dt)
    if work.size:           # an empty output (Dv = 0 with a broadcast B x H) has nothing to do
        _lib.attention(q, k, v, m, work, _CODES[dt], _CODES[target_dt], _lib.round_f32(scale),
                       bool(causal))
    if out is not None and not direct:
        out[...] = work
        return out
    return work
