"""The dtype helpers the Python layer shares: dtype names, casts to a compute dtype, input checks.

Layers, losses, metrics and models import these; they sit below all of them and import only
``kernels`` (for exact casts between the four floating types, and the one bfloat16 dtype
object, ``BF16``, which every module above the kernels takes from here).
"""
import numpy as np

from mixedcore import kernels
from mixedcore.kernels._checks import bfloat16 as BF16
CASTABLE = (np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64))
_NAMED = {"bfloat16": BF16}
_FLOATING: dict = {}


def np_dtype(name):
    """numpy dtype for a dtype name ("bfloat16" is ml_dtypes'); cached, as layers ask for their
    compute dtype on every call."""
    dt = _NAMED.get(name)
    if dt is None:
        dt = _NAMED[name] = np.dtype(name)
    return dt


def dtype_name(dtype):
    """The name of a numpy dtype as policies spell it ("bfloat16", "float16", "int32", ...)."""
    dtype = np.dtype(dtype)
    return "bfloat16" if dtype == BF16 else dtype.name


def is_floating(dtype):
    """True for a floating dtype, bfloat16 included."""
    try:
        return _FLOATING[dtype]
    except (KeyError, TypeError):
        pass
    dt = np.dtype(dtype)
    result = dt.kind == "f" or dt == BF16
    try:
        _FLOATING[dtype] = result
    except TypeError:       # an unhashable dtype-like
        pass
    return result


def to_compute(x, dtype):
    """``x`` in ``dtype`` (a numpy dtype): itself when already so, else cast exactly."""
    if x.dtype == dtype:
        return x
    if x.dtype in CASTABLE and dtype in CASTABLE:
        return kernels.cast(x, dtype)
    return x.astype(dtype)


def work_dtype(dtype):
    """The dtype elementwise math runs in for a compute dtype: float32 for 16-bit types."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def as_numeric_array(owner, x):
    """``x`` as an ndarray of a numeric or bool dtype, else a TypeError naming ``owner``."""
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except (ValueError, TypeError) as exc:
            raise TypeError(f"{owner}: cannot convert input of type {type(x).__name__} to a "
                            f"numeric array ({exc})") from None
    if not (x.dtype.kind in "biuf" or x.dtype == BF16):
        raise TypeError(f"{owner}: expected a numeric array (float, int or bool), got dtype "
                        f"{x.dtype}")
    return x
