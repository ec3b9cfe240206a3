"""The argument checks every kernel family shares: the float dtypes of the compiled core and
their type codes, dtype names, byte order and alignment, overlapping arrays, and ``out=``.

Each check raises the ``TypeError`` / ``ValueError`` the public function documents, with the
function's name first.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from mixedcore._core import _mixedcore as _lib

bfloat16 = np.dtype(ml_dtypes.bfloat16)

# dtype -> type code of the compiled core (mc_convert_scalar.h)
FLOAT_CODES = {
    np.dtype(np.float16): 0,
    bfloat16: 1,
    np.dtype(np.float32): 2,
    np.dtype(np.float64): 3,
}
SUPPORTED_NAMES = "float16, bfloat16, float32, float64"


def float_code(dtype):
    """The core's type code of a dtype object (either byte order), or None if unsupported."""
    code = FLOAT_CODES.get(dtype)
    if code is None and not dtype.isnative:
        code = FLOAT_CODES.get(dtype.newbyteorder("="))
    return code


def as_native(x):
    """``x`` in native byte order and aligned: a bit-exact copy when it is not."""
    if not x.dtype.isnative:
        x = x.byteswap().view(x.dtype.newbyteorder("="))
    if not x.flags.aligned:
        x = x.copy()
    return x


def overlaps(a, b):
    """True when arrays ``a`` and ``b`` share at least one byte."""
    if not _lib.extents_overlap(a, b):
        return False
    try:
        return np.shares_memory(a, b, max_work=1 << 20)
    except np.exceptions.TooHardError:
        return True


_resolved: dict = {}


def resolve_dtype(fname, dtype):
    """The native float dtype named by ``dtype`` (a dtype, type or name), or TypeError."""
    try:
        return _resolved[dtype]
    except (KeyError, TypeError):
        pass
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{fname}: cannot interpret {dtype!r} as a dtype ({exc})") from None
    native = dt.newbyteorder("=")
    if native not in FLOAT_CODES:
        raise TypeError(f"{fname}: unsupported target dtype {dt}; supported: {SUPPORTED_NAMES}")
    try:
        _resolved[dtype] = native
    except TypeError:   # an unhashable dtype-like
        pass
    return native


def check_out(fname, out, shape, dtype, inputs=()):
    """Validate an ``out=`` array: ndarray, exact dtype, shape, writable, no overlap."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{fname}: out must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype != dtype:
        raise ValueError(f"{fname}: out has dtype {out.dtype}, expected {dtype}")
    shape = tuple(shape)
    if out.shape != shape:
        raise ValueError(f"{fname}: out has shape {out.shape}, expected {shape}")
    if not out.flags.writeable:
        raise ValueError(f"{fname}: out is read-only")
    for x in inputs:
        if overlaps(out, x):
            raise ValueError(f"{fname}: out overlaps an input array; pass a separate array")
