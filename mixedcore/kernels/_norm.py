"""Layer normalization over the last axis, with an optional residual added first."""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._checks import (as_native, check_bytes, float_code, overlaps,
                                       resolve_dtype)

_F32 = np.dtype(np.float32)
# the types the kernel reads and writes: float16, bfloat16, float32 (codes of mc_convert_scalar.h)
_CODES = (0, 1, 2)
_NAMES = "float16, bfloat16 or float32"


def _type_code(what, dtype):
    code = float_code(dtype)
    if code not in _CODES:
        raise TypeError(f"layer_norm: {what} must have dtype {_NAMES}, got {dtype}")
    return code


def _as_array(what, a):
    if isinstance(a, np.ndarray):
        return a
    try:
        return np.asarray(a)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"layer_norm: cannot convert {what} of type {type(a).__name__} to an "
                        f"array ({exc})") from None


def _rows(a):
    """``a`` as native, aligned, C-contiguous memory (a view when it already is)."""
    if not (a.dtype.isnative and a.flags.aligned and a.flags.c_contiguous):
        a = np.ascontiguousarray(as_native(a))
    return a


def norm_param(fname, what, p, c):
    """gamma or beta checked: None, or float32 of shape (c,) as contiguous memory."""
    if p is None:
        return None
    p = _as_array(what, p)
    if float_code(p.dtype) != 2:
        raise TypeError(f"{fname}: {what} must have dtype float32, got {p.dtype}")
    if p.shape != (c,):
        raise ValueError(f"{fname}: {what} has shape {p.shape}, expected ({c},) (the length "
                         f"of x's last axis)")
    return _rows(p)


def norm_epsilon(fname, epsilon):
    """epsilon checked: a finite number > 0, as a float."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"{fname}: epsilon must be a number, got {type(epsilon).__name__}")
    eps = float(epsilon)
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"{fname}: epsilon must be finite and > 0, got {epsilon!r}")
    return eps


def layer_norm(x: ArrayLike, gamma: ArrayLike | None = None, beta: ArrayLike | None = None, *,
               epsilon: float = 1e-3, residual: ArrayLike | None = None,
               out: np.ndarray | None = None, out_dtype: DTypeLike | None = None,
               return_stats: bool = False) -> Any:
    """Normalize each row over the last axis: ``(s - mean) / sqrt(var + epsilon) * gamma + beta``.

    Parameters
    ----------
    x : array_like
        float16, bfloat16 or float32 values (either byte order), at least 1-D; the last axis
        (of length C >= 1) is the one normalized.  Any strides (rows are copied to contiguous
        memory when they are not).
    gamma, beta : array_like, optional
        float32 of shape ``(C,)``: the scale and the offset.  None leaves the product (the sum)
        out.
    epsilon : float, default 1e-3
        Added to the variance; a finite number > 0.
    residual : array_like, optional
        Added to ``x`` first: ``s = x + residual`` (float16, bfloat16 or float32, ``x``'s shape),
        the sum formed in float32 (one rounding, none to a 16-bit type), so
        ``layer_norm(x, residual=r)`` normalizes ``x + r``.
    out : ndarray, optional
        Where to write the result: ``x``'s shape, writable, not overlapping an input, any
        strides.
    out_dtype : dtype, optional
        float16, bfloat16 or float32.  Default: ``out``'s dtype when ``out`` is given, else
        ``x``'s.
    return_stats : bool, default False
        Also return ``mean`` and ``rstd = 1 / sqrt(var + epsilon)`` of each row, float32 arrays
        of shape ``x.shape[:-1]``.

    Returns
    -------
    ndarray, or (ndarray, ndarray, ndarray)
        ``out`` if given, else a new C-ordered array; with ``return_stats``, then mean and rstd.

    Raises
    ------
    TypeError
        ``x``, ``residual`` or ``out_dtype`` not float16, bfloat16 or float32; ``gamma`` or
        ``beta`` not float32; ``epsilon`` not a number; ``out`` not an ndarray.
    ValueError
        ``x`` 0-d or its last axis empty; ``residual``, ``gamma``, ``beta`` or ``out`` of the
        wrong shape; ``epsilon`` not finite and > 0; ``out`` of another dtype than
        ``out_dtype``, read-only or overlapping an input.  Nothing is written when an error is
        raised.

    Notes
    -----
    Statistics are taken in float64 over the float32 values ``s``: ``mean = sum(s) / C``,
    ``var = sum((s - mean)**2) / C`` (two passes: the variance of ``s``, as Keras computes it,
    not ``E[s**2] - mean**2``), ``rstd = 1 / sqrt(var + epsilon)``; then
    ``((s - mean) * rstd) * gamma + beta`` in float64, rounded once to the output dtype.  The
    result is within 1 ulp of the correctly rounded float64 reference (in practice equal to it
    but for values within about 1e-15, relative, of a rounding boundary), and bit-identical at
    every ISA level and thread count.  A row holding a NaN or an infinity gives a row of NaN
    (the positive quiet NaN); no floating-point warnings are raised.
    With a float16 or bfloat16 output the same passes run in float32 instead (the squares
    added by FMA, ``fma((s - mean) * rstd, gamma, beta)``, then one rounding to 16 bits): the
    result stays within one unit of the float64 one (docs/layers.md), and ``mean`` / ``rstd``
    are the float32 values it used.
    """
    x = _as_array("x", x)
    xc = _type_code("x", x.dtype)
    if x.ndim == 0:
        raise ValueError("layer_norm: x must have at least 1 dimension, got a 0-d array")
    c = x.shape[-1]
    if c == 0:
        raise ValueError(f"layer_norm: the last axis of x (shape {x.shape}) is empty; there is "
                         f"nothing to normalize over")
    eps = norm_epsilon("layer_norm", epsilon)
    gamma = norm_param("layer_norm", "gamma", gamma, c)
    beta = norm_param("layer_norm", "beta", beta, c)
    rc = 0
    if residual is not None:
        residual = _as_array("residual", residual)
        rc = _type_code("residual", residual.dtype)
        if residual.shape != x.shape:
            raise ValueError(f"layer_norm: residual has shape {residual.shape} but x has shape "
                             f"{x.shape}; they must be equal (no broadcasting)")
    if out is not None and not isinstance(out, np.ndarray):
        raise TypeError(f"layer_norm: out must be a numpy.ndarray, got {type(out).__name__}")
    if out_dtype is not None:
        target = resolve_dtype("layer_norm", out_dtype)
        _type_code("out_dtype", target)
    elif out is not None:
        _type_code("out", out.dtype)
        target = out.dtype.newbyteorder("=")
    else:
        target = x.dtype.newbyteorder("=")
    yc = float_code(target)
    if out is not None:
        if out.dtype != target:
            raise ValueError(f"layer_norm: out has dtype {out.dtype}, expected {target}")
        if out.shape != x.shape:
            raise ValueError(f"layer_norm: out has shape {out.shape}, expected {x.shape}")
        if not out.flags.writeable:
            raise ValueError("layer_norm: out is read-only")
        for a in (x, residual, gamma, beta):
            if a is not None and overlaps(out, a):
                raise ValueError("layer_norm: out overlaps an input array; pass a separate array")
    check_bytes("layer_norm", "the result", x.shape, max(target.itemsize, x.dtype.itemsize))
    xr = _rows(x)
    rr = _rows(residual) if residual is not None else None
    rows = x.size // c
    if out is not None and out.flags.c_contiguous and out.flags.aligned:
        work = out
    else:
        work = np.empty(x.shape, target)
    mean = rstd = None
    if return_stats:
        mean = np.empty(x.shape[:-1], _F32)
        rstd = np.empty(x.shape[:-1], _F32)
    _lib.layer_norm(xr, xc, rr, rc, gamma, beta, work, yc, mean, rstd, rows, c, eps)
    result = work
    if out is not None and work is not out:
        out[...] = work
        result = out
    if return_stats:
        return result, mean, rstd
    return result
