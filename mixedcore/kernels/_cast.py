"""Conversions between float16, bfloat16, float32, float64 and the float8 formats
float8_e4m3fn and float8_e5m2."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._checks import (FLOAT_CODES, SUPPORTED_NAMES, as_native, check_bytes,
                                       check_out, float_code, resolve_dtype)

# The float8 formats only the cast family takes (type codes after the four of FLOAT_CODES,
# src/mc_types.h).
FLOAT8_CODES = {
    np.dtype(ml_dtypes.float8_e4m3fn): 4,
    np.dtype(ml_dtypes.float8_e5m2): 5,
}
CAST_NAMES = SUPPORTED_NAMES + ", float8_e4m3fn, float8_e5m2"


_float8_targets: dict = {}


def _target(dtype):
    """The native dtype ``cast`` converts to, or the TypeError naming every supported one."""
    try:
        return _float8_targets[dtype]
    except (KeyError, TypeError):
        pass
    try:
        return resolve_dtype("cast", dtype)
    except TypeError as exc:
        error = exc
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise error from None
    if dt not in FLOAT8_CODES:
        raise TypeError(f"cast: unsupported target dtype {dt}; supported: {CAST_NAMES}") from None
    try:
        _float8_targets[dtype] = dt
    except TypeError:   # an unhashable dtype-like
        pass
    return dt


def cast(x: ArrayLike, dtype: DTypeLike, *, out: np.ndarray | None = None,
         saturate: bool = False) -> np.ndarray:
    """Convert between float16, bfloat16, float32, float64, float8_e4m3fn and float8_e5m2,
    bit-exactly.

    Parameters
    ----------
    x : array_like
        Source values, of dtype float16, bfloat16 (``ml_dtypes.bfloat16``), float32, float64,
        float8_e4m3fn or float8_e5m2 (``ml_dtypes``).  Any shape, any strides (negative, zero,
        transposed), either byte order.
    dtype : dtype-like
        The target: one of the same six dtypes ("bfloat16", "float8_e4m3fn" and "float8_e5m2"
        name ml_dtypes' types).
    out : ndarray, optional
        Where to write the result: exactly ``dtype``, ``x``'s shape, writable, not overlapping
        ``x``.  Any strides.
    saturate : bool, optional
        Only for a float8 target: clip to its largest finite value (448 for float8_e4m3fn, 57344
        for float8_e5m2) before rounding, exactly ``numpy.clip(x, -max, max).astype(dtype)``:
        infinities become +-max, NaN stays NaN.  Without it values beyond the range become NaN
        (float8_e4m3fn, which has no infinity) or infinity (float8_e5m2), as ``astype`` does.

    Returns
    -------
    ndarray
        ``out`` if given, else a new contiguous array laid out like ``x`` (numpy's
        ``order="K"``, as ``astype`` does): a Fortran-ordered or transposed ``x`` gives a
        Fortran-ordered result, which keeps the conversion on the vector path.

    Raises
    ------
    TypeError
        Unsupported source or target dtype; ``out`` that is not an ndarray; ``saturate`` that
        is not a bool.
    ValueError
        ``out`` of the wrong shape or dtype, read-only, or overlapping ``x``; ``saturate=True``
        with a target that is not float8.

    Notes
    -----
    The results are bit-identical to numpy's ``astype`` for float16 and to ml_dtypes' for
    bfloat16 and float8, NaN payloads included, except that float64 -> bfloat16 is rounded once
    (ml_dtypes rounds through float32 first; for float8 targets mixedcore rounds through
    float32 as ml_dtypes does).  No floating-point warnings are raised.  docs/conversions.md has
    every rule.
    """
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    src_code = float_code(x.dtype)
    if src_code is None:
        src_code = FLOAT8_CODES.get(x.dtype)
        if src_code is None:
            raise TypeError(f"cast: unsupported source dtype {x.dtype}; supported: {CAST_NAMES}")
    target = _target(dtype)
    if not isinstance(saturate, (bool, np.bool_)):
        raise TypeError(f"cast: saturate must be a bool, got {type(saturate).__name__} "
                        f"{saturate!r}")
    if saturate and target not in FLOAT8_CODES:
        raise ValueError(f"cast: saturate=True needs a float8 target dtype (float8_e4m3fn or "
                         f"float8_e5m2), got {target}")
    if out is None:
        check_bytes("cast", "the result", x.shape, target.itemsize)
        result = work = np.empty_like(x, dtype=target, subok=False)
    else:
        check_out("cast", out, x.shape, target, (x,))
        result = work = out
        if not out.flags.aligned:
            work = np.empty(x.shape, dtype=target)
    if not (x.dtype.isnative and x.flags.aligned):
        x = as_native(x, "cast")
    dst_code = FLOAT8_CODES[target] if target in FLOAT8_CODES else FLOAT_CODES[target]
    _lib.cast_into(x, work, src_code, dst_code, bool(saturate))
    if work is not result:
        result[...] = work
    return result
