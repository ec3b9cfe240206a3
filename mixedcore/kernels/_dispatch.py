"""Dispatch levels, threads, and the validation helpers every kernel shares."""
import contextlib
import os
import threading

import ml_dtypes
import numpy as np

from mixedcore._core import _lib

ISA_LEVELS = _lib.ISA_NAMES
bfloat16 = np.dtype(ml_dtypes.bfloat16)

# dtype -> type code of the compiled core (mc_convert_scalar.h)
FLOAT_CODES = {
    np.dtype(np.float16): 0,
    bfloat16: 1,
    np.dtype(np.float32): 2,
    np.dtype(np.float64): 3,
}
SUPPORTED_NAMES = "float16, bfloat16, float32, float64"

def available_isas():
    """The instruction-set levels usable on this machine, lowest first.

    Returns
    -------
    tuple of str
        A prefix of ``("generic", "avx2", "avx512", "avx512bf16")``: the levels both this CPU
        (with its operating system) and this build of mixedcore support.
    """
    top = min(_lib.supported_level(), _lib.built_level())
    return ISA_LEVELS[: top + 1]

def isa():
    """The instruction-set level the kernels run at now (a name from ``available_isas()``)."""
    return ISA_LEVELS[_lib.get_level()]

def set_isa(level):
    """Run the kernels at ``level`` from now on, process-wide.

    Parameters
    ----------
    level : str
        One of ``available_isas()``.  Lower levels than the best are for testing and comparison;
        results are identical at every level (see docs/numerics.md).

    Raises
    ------
    TypeError
        If ``level`` is not a str.
    ValueError
        If ``level`` is not a level name, or this CPU or build lacks it.
    """
    if not isinstance(level, str):
        raise TypeError(f"set_isa: level must be a str, got {type(level).__name__}")
    if level not in ISA_LEVELS:
        raise ValueError(f"set_isa: unknown level {level!r}; expected one of {list(ISA_LEVELS)}")
    avail = available_isas()
    if level not in avail:
        raise ValueError(
            f"set_isa: level {level!r} is not available on this machine "
            f"(available: {list(avail)}; CPU supports up to "
            f"{ISA_LEVELS[_lib.supported_level()]!r}, build has up to "
            f"{ISA_LEVELS[_lib.built_level()]!r})")
    _lib.set_level(ISA_LEVELS.index(level))

def _apply_isa_environment():
    level = os.environ.get("MIXEDCORE_ISA")
    if level:
        try:
            set_isa(level)
        except ValueError as exc:
            raise ValueError(f"MIXEDCORE_ISA={level!r}: {exc}") from None

_apply_isa_environment()

# ---------------------------------------------------------------------------------------------
# threads

_threads_lock = threading.Lock()

def get_num_threads():
    """The number of threads the kernels may use (before the per-call size threshold)."""
    return _lib.get_num_threads()

def set_num_threads(n):
    """Set the number of threads the kernels may use, process-wide.

    Parameters
    ----------
    n : int
        At least 1.  The OpenMP limit of the calling thread (``OMP_NUM_THREADS``, or a
        threadpoolctl limit) still caps it.  Small problems always run on one thread.

    Returns
    -------
    int
        The previous setting.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"set_num_threads: n must be >= 1, got {n}")
    with _threads_lock:
        previous = _lib.get_num_threads()
        _lib.set_num_threads(int(min(n, 1 << 16)))
    return previous

@contextlib.contextmanager
def threads(n):
    """Context manager: run the kernels with at most ``n`` threads inside the block.

    Examples
    --------
    >>> with mixedcore.kernels.threads(1):
    ...     y = mixedcore.kernels.cast(x, "bfloat16")
    """
    previous = set_num_threads(n)
    try:
        yield
    finally:
        set_num_threads(previous)

# ---------------------------------------------------------------------------------------------
# helpers shared by the kernels

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

_resolved = {}


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
