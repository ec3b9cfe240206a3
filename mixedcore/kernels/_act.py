"""Elementwise activation functions and their derivatives on float32 arrays."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._cast import cast
from mixedcore.kernels._checks import (FLOAT_CODES, as_native, check_bytes, check_out,
                                       float_code, new_array, out_dtype_of, resolve_dtype)

# name -> activation code of the compiled core (mc_act.h); the same codes as matmul's epilogue
ACT_CODES = {"linear": 0, "relu": 1, "gelu": 2, "sigmoid": 3, "tanh": 4, "relu6": 5, "silu": 6,
             "hard_sigmoid": 7, "hard_silu": 8, "swish": 6, "hard_swish": 8}
# gelu evaluated in float32, the core's gelu for a 16-bit result, and the softmax modes
# (mc_act_kernels.h)
_GELU_16 = 9
_SOFTMAX_EXP, _SOFTMAX_LOG, _SOFTMAX_16 = 0, 1, 2
_F32 = np.dtype(np.float32)
_OUT_16 = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_F32_CODE = FLOAT_CODES[_F32]


def _act_code(fname, name):
    if not isinstance(name, str):
        raise TypeError(f"{fname}: name must be a str, got {type(name).__name__}")
    code = ACT_CODES.get(name)
    if code is None:
        raise ValueError(f"{fname}: unknown activation {name!r}; valid names: {list(ACT_CODES)}")
    return code


def _float32_input(fname, what, a):
    if not isinstance(a, np.ndarray):
        a = np.asarray(a)
    if float_code(a.dtype) != _F32_CODE:
        raise TypeError(f"{fname}: {what} must have dtype float32, got {a.dtype}")
    return a


def _order(x):
    """The element order the kernel walks: Fortran for a Fortran-ordered ``x``, else C."""
    return "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"


def _flat(a, order):
    """``a`` as a flat, native, aligned float32 run in ``order`` (a view when it already is)."""
    if not (a.dtype.isnative and a.flags.aligned):
        a = as_native(a)
    return a.ravel(order=order)


def _output(fname, out, shape, order, inputs):
    """(result, flat work array, whether work is a view of result)."""
    if out is None:
        result = new_array(fname, "the result", shape, _F32, order=order)
        return result, result.ravel(order=order), True
    check_out(fname, out, shape, _F32, inputs)
    contiguous = out.flags.f_contiguous if order == "F" else out.flags.c_contiguous
    if contiguous and out.flags.aligned:
        return out, out.ravel(order=order), True
    return out, np.empty(out.size, _F32), False


def _finish(result, work, direct, order):
    if not direct:
        result[...] = work.reshape(result.shape, order=order)
    return result


def activation(x: ArrayLike, name: str, *, out: np.ndarray | None = None,
               out_dtype: DTypeLike | None = None) -> np.ndarray:
    """Apply an activation function elementwise to a float32 array.

    Parameters
    ----------
    x : array_like
        float32 values (either byte order), any shape and strides.
    name : str
        One of "linear" (the identity), "relu", "gelu", "sigmoid", "tanh", "relu6", "silu"
        ("swish"), "hard_sigmoid", "hard_silu" ("hard_swish").
    out : ndarray, optional
        Where to write the result: ``out_dtype``, ``x``'s shape, writable, not overlapping ``x``.
        Any strides (a non-contiguous ``out`` is filled from a contiguous result).
    out_dtype : float32, float16 or bfloat16, optional
        The type the result is rounded to, as the fused epilogue of ``matmul``, ``conv2d`` and
        ``add`` rounds it (see Notes for gelu); by default ``out``'s dtype when it is a 16-bit
        one, else float32.

    Returns
    -------
    ndarray
        ``out`` if given, else a new array of ``out_dtype`` and ``x``'s shape (Fortran-ordered
        when ``x`` is Fortran-ordered, else C-ordered).

    Raises
    ------
    TypeError
        ``x`` not float32; ``name`` not a str; ``out`` not an ndarray.
    ValueError
        Unknown ``name`` (the message lists the valid ones); ``out`` of the wrong shape or dtype,
        read-only, or overlapping ``x``.  Nothing is written when an error is raised.

    Notes
    -----
    The same functions as the fused epilogue of ``matmul(..., activation=name)``, bit for bit:
    ``relu`` is ``0 if v < 0 else v`` (NaN and -0.0 pass through); ``gelu`` is the exact form
    ``x * Phi(x)`` (Keras' default, not the tanh approximation); ``sigmoid`` is
    ``1 / (1 + exp(-x))`` and ``tanh`` is ``tanh(x)``; ``relu6`` is ``min(max(v, 0), 6)`` (exact,
    NaN and -0.0 pass as for relu), ``silu`` is ``x * sigmoid(x)``, ``hard_sigmoid`` is
    ``clip(x / 6 + 0.5, 0, 1)`` (Keras 3's) and ``hard_silu`` is ``x * hard_sigmoid(x)``.  The
    others are evaluated in float64 and rounded once: within 1 ulp of the correctly rounded
    float32 result, and equal to it except when the exact value lies within about 1e-15
    (relative) of a rounding boundary.
    With a float16 or bfloat16 ``out_dtype``, gelu is evaluated in float32 instead (relative
    error below 2**-18 before the rounding to 16 bits; docs/gemm.md), as every fused epilogue
    with a 16-bit output evaluates it: the result is the correctly rounded 16-bit value or,
    within 2**-18 of a rounding boundary, its neighbour.
    Results are bit-identical at every ISA level.  A NaN input gives that NaN (quieted; relu
    passes it unchanged); infinities give the limits (``gelu(-inf) = -0.0``).  No floating-point
    warnings are raised.  docs/gemm.md ("Activation") has the algorithms and measured accuracy.
    """
    code = _act_code("activation", name)
    x = _float32_input("activation", "x", x)
    if out_dtype is None and isinstance(out, np.ndarray) and out.dtype in _OUT_16:
        out_dtype = out.dtype
    target = out_dtype_of("activation", out_dtype)
    order = _order(x)
    if target == _F32:
        result, work, direct = _output("activation", out, x.shape, order, (x,))
        _lib.act_forward(_flat(x, order), work, code)
        return _finish(result, work, direct, order)
    if out is not None:
        check_out("activation", out, x.shape, target, (x,))
    work = new_array("activation", "the float32 values", (x.size,), _F32)
    _lib.act_forward(_flat(x, order), work, _GELU_16 if code == ACT_CODES["gelu"] else code)
    return cast(work.reshape(x.shape, order=order), target, out=out)


def activation_grad(dy: ArrayLike, x: ArrayLike, name: str, *,
                    out: np.ndarray | None = None) -> np.ndarray:
    """The gradient of an activation function: ``dy * f'(x)`` elementwise, on float32 arrays.

    Parameters
    ----------
    dy : array_like
        float32 gradient with respect to the activation's output.
    x : array_like
        float32 input the activation was applied to (not its output); ``dy``'s shape.
    name : str
        As for ``activation`` ("linear" returns ``dy``).
    out : ndarray, optional
        Where to write the result: float32, ``x``'s shape, writable, not overlapping ``dy`` or
        ``x``.  Any strides.

    Returns
    -------
    ndarray
        ``out`` if given, else a new float32 array of ``x``'s shape.

    Raises
    ------
    TypeError
        ``dy`` or ``x`` not float32; ``name`` not a str; ``out`` not an ndarray.
    ValueError
        Unknown ``name``; ``dy`` and ``x`` of different shapes (no broadcasting); ``out`` of the
        wrong shape or dtype, read-only, or overlapping an input.  Nothing is written when an
        error is raised.

    Notes
    -----
    The derivatives: ``relu'(x) = 1 if x > 0 else 0``; ``gelu'(x) = Phi(x) + x * phi(x)``;
    ``sigmoid'(x) = s * (1 - s)``; ``tanh'(x) = 1 - tanh(x)**2``; ``relu6'(x) = 1 if 0 < x < 6
    else 0``; ``silu'(x) = s + x * s * (1 - s)``; ``hard_sigmoid'(x) = 1/6 on (-3, 3)``;
    ``hard_silu'(x) = x / 3 + 1/2 on [-3, 3]`` (0 below, 1 above).  Each is evaluated in
    float64 from ``x`` (accurate even where these formulas cancel: near gelu's minimum
    x = -0.7518 and for large ``|x|``), multiplied by ``dy`` in float64 and rounded once, so the
    result is within 1 ulp of the correctly rounded ``dy * f'(x)`` -- except within 0.01 of the
    roots of silu' (-1.2785) and hard_silu' (-1.5), where the error is absolute, below 2**-52.  A NaN in ``x`` gives that NaN, else a
    NaN in ``dy`` gives ``dy``'s (quieted); an infinite ``dy`` where ``f'(x)`` is 0 gives NaN
    (IEEE ``inf * 0``), including relu at ``x <= 0``.  Bit-identical at every ISA level.
    """
    code = _act_code("activation_grad", name)
    dy = _float32_input("activation_grad", "dy", dy)
    x = _float32_input("activation_grad", "x", x)
    if dy.shape != x.shape:
        raise ValueError(f"activation_grad: dy has shape {dy.shape} but x has shape {x.shape}; "
                         f"they must be equal")
    order = _order(x)
    result, work, direct = _output("activation_grad", out, x.shape, order, (dy, x))
    _lib.act_backward(_flat(dy, order), _flat(x, order), work, code)
    return _finish(result, work, direct, order)


def softmax(x: ArrayLike, axis: int = -1, *, log: bool = False, out: np.ndarray | None = None,
            out_dtype: DTypeLike | None = None) -> np.ndarray:
    """Softmax (or log-softmax) of a float32 array along one axis.

    Parameters
    ----------
    x : array_like
        float32 values (either byte order), at least 1-D, any strides.
    axis : int, default -1
        The axis the probabilities sum to 1 along.
    log : bool, default False
        Return ``log(softmax(x))``, computed without forming the softmax.
    out : ndarray, optional
        Where to write the result: ``out_dtype``, ``x``'s shape, writable, not overlapping ``x``.
    out_dtype : float32, float16 or bfloat16, optional
        The type the result is rounded to; by default ``out``'s dtype when it is a 16-bit one,
        else float32.

    Returns
    -------
    ndarray
        ``out`` if given, else a new C-ordered array of ``out_dtype`` and ``x``'s shape.

    Raises
    ------
    TypeError
        ``x`` not float32; ``axis`` not an int; ``out`` not an ndarray.
    ValueError
        ``x`` 0-d; ``axis`` out of range; ``out`` of the wrong shape or dtype, read-only or
        overlapping ``x``.  Nothing is written when an error is raised.

    Notes
    -----
    Each row along ``axis`` is computed in float64: ``m = max(x)``, ``s`` the sum of
    ``exp(x - m)`` in index order, then ``exp(x - m) / s`` (or ``(x - m) - log(s)``), rounded
    once to float32 -- within about 1 ulp of the exact result, and bit-identical at every ISA
    level and thread count.  A row holding a NaN, ``+inf``, or only ``-inf`` gives NaN, as
    ``exp(x - max) / sum`` does in numpy; ``-inf`` elements of other rows give 0 (``-inf`` for
    ``log``).  No floating-point warnings are raised.
    With a float16 or bfloat16 ``out_dtype`` (and ``log`` False) the row is computed in float32
    instead, as the fused ``attention`` computes its probabilities for 16-bit inputs: within
    2**-17 (relative) of the exact value wherever ``x - max(x) >= -88``, then rounded once to
    the 16-bit type (docs/layers.md).
    """
    x = _float32_input("softmax", "x", x)
    if x.ndim == 0:
        raise ValueError("softmax: x must have at least 1 dimension, got a 0-d array")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"softmax: axis must be an int, got {type(axis).__name__}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"softmax: axis {axis} is out of range for an array of {x.ndim} "
                         f"dimensions")
    axis = int(axis) % x.ndim
    if out_dtype is None and isinstance(out, np.ndarray) and out.dtype in _OUT_16:
        out_dtype = out.dtype
    target = out_dtype_of("softmax", out_dtype)
    if out is not None:
        check_out("softmax", out, x.shape, target, (x,))
    check_bytes("softmax", "the float32 result", x.shape, 4)
    last = axis == x.ndim - 1
    rows = x if last else np.moveaxis(x, axis, -1)
    if not (rows.flags.c_contiguous and rows.dtype.isnative and rows.flags.aligned):
        rows = np.ascontiguousarray(as_native(rows))
    work = np.empty(rows.shape, _F32)
    n = rows.shape[-1]
    mode = _SOFTMAX_LOG if log else _SOFTMAX_EXP if target == _F32 else _SOFTMAX_16
    _lib.act_softmax(rows, work, rows.size // n if n else 0, n, mode)
    result = work if last else np.ascontiguousarray(np.moveaxis(work, -1, axis))
    if target != _F32:
        return cast(result, target, out=out)
    if out is not None:
        out[...] = result
        return out
    return result


def add(a: ArrayLike, b: ArrayLike, *, activation: str | None = None,
        out_dtype: DTypeLike | None = None) -> np.ndarray:
    """``activation(a + b)`` elementwise for two arrays of one shape (float16, bfloat16 or
    float32, each its own), rounded once to ``out_dtype`` (default float32).

    Each element is widened exactly to float32, the sum rounded once to float32, the activation
    (a name of ``activation``) applied as ``activation`` applies it and the result rounded once
    to ``out_dtype``: the bits of ``cast(activation(cast(a, f32) + cast(b, f32), name),
    out_dtype)``, at every level and thread count (the sum of two NaNs is one of the two: which
    one IEEE leaves open, and compiled loops differ in it).
    """
    fname = "add"
    arrays = []
    for what, v in (("a", a), ("b", b)):
        if not isinstance(v, np.ndarray):
            raise TypeError(f"{fname}: {what} must be a numpy.ndarray, got {type(v).__name__}")
        code = float_code(v.dtype)
        if code not in (0, 1, 2):
            raise TypeError(f"{fname}: {what} must be float16, bfloat16 or float32, got "
                            f"{v.dtype}")
        check_bytes(fname, what, v.shape, 4)    # its copy, and the result (at most float32)
        arrays.append(np.ascontiguousarray(as_native(v, fname)))
    if arrays[0].shape != arrays[1].shape:
        raise ValueError(f"{fname}: a and b must have one shape, got {arrays[0].shape} and "
                         f"{arrays[1].shape}")
    act = 0 if activation is None else _act_code(fname, activation)
    target = _F32 if out_dtype is None else resolve_dtype(fname, out_dtype)
    out_code = float_code(target)
    if out_code not in (0, 1, 2):
        raise TypeError(f"{fname}: out_dtype must be float16, bfloat16 or float32, got {target}")
    out = np.empty(arrays[0].shape, target)
    if out.size:
        _lib.add_act(arrays[0], arrays[1], out, out.size, act, float_code(arrays[0].dtype),
                     float_code(arrays[1].dtype), out_code)
    return out
