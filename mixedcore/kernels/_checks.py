"""The argument checks every kernel family shares: the float dtypes of the compiled core and
their type codes, dtype names, byte order and alignment, overlapping arrays, ``out=``, and the
sizes of the arrays a kernel makes.

Each check raises the ``TypeError`` / ``ValueError`` the public function documents, with the
function's name first.
"""
from __future__ import annotations

import math

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

# The largest byte count the compiled core allocates (src/mc_checked.h): 2**47, the user address
# space of a 64-bit Linux process.  A broadcast or stride-0 view can claim any shape, and shapes
# of several operands multiply (M x N of a product, the windows of a convolution); an array or
# buffer above this size cannot be allocated anywhere, so asking for it is an argument error.
BYTES_MAX = _lib.BYTES_MAX


def float_code(dtype):
    """The core's type code of a dtype object (either byte order), or None if unsupported."""
    code = FLOAT_CODES.get(dtype)
    if code is None and not dtype.isnative:
        code = FLOAT_CODES.get(dtype.newbyteorder("="))
    return code


def as_native(x, fname="mixedcore.kernels"):
    """``x`` in native byte order and aligned: a bit-exact copy when it is not (after
    check_bytes: a broadcast view copied takes the memory its shape claims)."""
    if x.dtype.isnative and x.flags.aligned:
        return x
    check_bytes(fname, "a byte-swapped or unaligned input", x.shape, x.dtype.itemsize)
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


# the types a product, a convolution or an activation can round its result to
_OUT_DTYPES = {"float16": np.dtype(np.float16), "bfloat16": bfloat16, "float32": np.dtype(np.float32)}
_OUT_NAMES = "float16, bfloat16, float32"


def out_dtype_of(fname, out_dtype, default=_OUT_DTYPES["float32"]):
    """The float16, bfloat16 or float32 dtype ``out_dtype`` names (``default`` for None)."""
    if out_dtype is None:
        return default
    target = _OUT_DTYPES.get(out_dtype) if isinstance(out_dtype, str) else None
    if target is None:
        target = resolve_dtype(fname, out_dtype)
        if target not in _OUT_DTYPES.values():
            raise TypeError(f"{fname}: unsupported out_dtype {target}; supported: {_OUT_NAMES}")
    return target


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


def check_bytes(fname, what, shape, itemsize):
    """Refuse ``what`` of ``shape`` items of ``itemsize`` bytes when it is larger than
    BYTES_MAX, with the ValueError of ``fname``."""
    nbytes = math.prod(int(d) for d in shape) * int(itemsize)
    if nbytes > BYTES_MAX:
        raise ValueError(f"{fname}: {what} of shape {tuple(int(d) for d in shape)} would need "
                         f"{nbytes} bytes, more than the {BYTES_MAX} a process can address (a "
                         f"broadcast view or a large window claims more than memory can hold)")


def new_array(fname, what, shape, dtype, *, zeros=False, order="C"):
    """A new array (``np.empty``, or ``np.zeros``) of ``shape`` and ``dtype``, after
    check_bytes."""
    dt = np.dtype(dtype)
    check_bytes(fname, what, shape, dt.itemsize)
    return (np.zeros if zeros else np.empty)(shape, dt, order=order)


def contiguous(fname, what, x):
    """``x`` C-contiguous: itself, or a copy after check_bytes (a broadcast view copied takes
    the memory its shape claims)."""
    if not x.flags.c_contiguous:
        check_bytes(fname, what, x.shape, x.dtype.itemsize)
    return np.ascontiguousarray(x)


def product_bias(fname, bias, n, codes, names, context=""):
    """``(bias32, stride)`` for the ``bias`` of a matrix product with ``n`` columns: an ndarray
    of a dtype in ``codes`` (either byte order) and shape (), (1,) or (n,), as a contiguous
    float32 vector, and its stride in bytes for the core (0: one value for every column)."""
    if not isinstance(bias, np.ndarray):
        raise TypeError(f"{fname}: bias must be a numpy.ndarray, got {type(bias).__name__}")
    native = bias.dtype if bias.dtype.isnative else bias.dtype.newbyteorder("=")
    if native not in codes:
        raise TypeError(f"{fname}: unsupported bias dtype {bias.dtype}; supported: {names}")
    if bias.shape not in ((), (1,), (n,)):
        raise ValueError(f"{fname}: bias has shape {bias.shape}, expected ({n},){context}")
    if bias.dtype == np.float32 and bias.ndim == 1 and bias.flags.c_contiguous:
        bias32 = bias
    else:
        bias32 = np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
    return bias32, (4 if bias32.shape[0] == n and n > 1 else 0)
