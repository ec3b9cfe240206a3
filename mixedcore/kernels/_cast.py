"""Conversions between float16, bfloat16, float32 and float64."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._checks import (FLOAT_CODES, SUPPORTED_NAMES, as_native, check_out,
                                       float_code, resolve_dtype)

def cast(x: ArrayLike, dtype: DTypeLike, *, out: np.ndarray | None = None) -> np.ndarray:
    """Convert between float16, bfloat16, float32 and float64, bit-exactly.

    Parameters
    ----------
    x : array_like
        Source values, of dtype float16, bfloat16 (``ml_dtypes.bfloat16``), float32 or float64.
        Any shape, any strides (negative, zero, transposed), either byte order.
    dtype : dtype-like
        The target: one of the same four dtypes ("bfloat16" names ``ml_dtypes.bfloat16``).
    out : ndarray, optional
        Where to write the result: exactly ``dtype``, ``x``'s shape, writable, not overlapping
        ``x``.  Any strides.

    Returns
    -------
    ndarray
        ``out`` if given, else a new contiguous array laid out like ``x`` (numpy's
        ``order="K"``, as ``astype`` does): a Fortran-ordered or transposed ``x`` gives a
        Fortran-ordered result, which keeps the conversion on the vector path.

    Raises
    ------
    TypeError
        Unsupported source or target dtype; ``out`` that is not an ndarray.
    ValueError
        ``out`` of the wrong shape or dtype, read-only, or overlapping ``x``.

    Notes
    -----
    The results are bit-identical to numpy's ``astype`` for float16 and to ml_dtypes' for
    bfloat16, NaN payloads included, except that float64 -> bfloat16 is rounded once (ml_dtypes
    rounds through float32 first).  No floating-point warnings are raised.  docs/conversions.md
    has every rule.
    """
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    src_code = float_code(x.dtype)
    if src_code is None:
        raise TypeError(f"cast: unsupported source dtype {x.dtype}; supported: {SUPPORTED_NAMES}")
    target = resolve_dtype("cast", dtype)
    if out is None:
        result = work = np.empty_like(x, dtype=target, subok=False)
    else:
        check_out("cast", out, x.shape, target, (x,))
        result = work = out
        if not out.flags.aligned:
            work = np.empty(x.shape, dtype=target)
    if not (x.dtype.isnative and x.flags.aligned):
        x = as_native(x)
    _lib.cast_into(x, work, src_code, FLOAT_CODES[target])
    if work is not result:
        result[...] = work
    return result
