"""Overflow scans: all_finite and the fused unscale_and_check."""
from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike

from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._checks import (SUPPORTED_NAMES, as_native, bfloat16, contiguous,
                                       float_code, overlaps)

_lib.scan_set_bfloat16(bfloat16)

# reasons of a report from the compiled driver (_scan.pxi): -(index * 8 + reason) - 1
_BAD_ARRAY, _READONLY, _SELF_OVERLAP, _MAY_OVERLAP = range(4)


def _decode(report):
    code = -report - 1
    return code // 8, code % 8


def _operand(fname, what, x, array_like=False):
    """``x`` as an array the compiled core takes (a native, aligned copy if it must), or the
    TypeError that explains why it cannot be scanned.  With ``array_like``, lists, tuples and
    scalars are taken as ``numpy.asarray`` takes them (for a scan that only reads)."""
    if array_like and not isinstance(x, np.ndarray) and isinstance(
            x, (list, tuple, float, int, np.generic)) and not isinstance(x, bool):
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{fname}: {what} must be a numpy.ndarray of dtype {SUPPORTED_NAMES}; "
                        f"got {type(x).__name__}")
    if float_code(x.dtype) is None:
        raise TypeError(f"{fname}: {what} has unsupported dtype {x.dtype}; "
                        f"supported: {SUPPORTED_NAMES}")
    return as_native(x, fname)


def all_finite(*arrays: ArrayLike) -> bool:
    """True when no element of any of the arrays is NaN or infinite.

    Parameters
    ----------
    *arrays : ndarray or array-like
        Any number of arrays of dtype float16, bfloat16 (``ml_dtypes.bfloat16``), float32 or
        float64, in any mix; any shape, any strides (reversed, transposed, strided views).
        Lists, tuples and Python or numpy scalars are taken as ``numpy.asarray`` takes them.

    Returns
    -------
    bool
        True when every element is finite (also for no arrays and for empty arrays).

    Raises
    ------
    TypeError
        An argument that is not array-like, or an array of another dtype.

    Notes
    -----
    One pass over the data and no temporary arrays: the test is an integer compare of the
    exponent bits (signalling NaNs are caught, no floating-point flag is raised), vectorised at
    every instruction-set level, and the scan stops at the first block holding a non-finite
    value.  All the arrays are handed to the compiled core in one call; large totals are split
    across threads.  Arrays in a swapped byte order or unaligned are scanned through a copy.
    """
    report = _lib.all_finite(arrays)
    if report >= 0:
        return bool(report)
    ready = [_operand("all_finite", f"argument {i}", x, array_like=True)
             for i, x in enumerate(arrays)]
    report = _lib.all_finite(ready)
    if report < 0:  # every operand is now native and aligned
        raise RuntimeError(f"all_finite: internal error, report {_decode(report)}")
    return bool(report)


# float32 rounding of a positive double: infinity from 2**128 - 2**103 up (the tie above
# FLT_MAX goes to the even 2**128), zero at 2**-150 and below (the tie with the smallest
# subnormal goes to the even 0)
_F32_OVERFLOW = 2.0 ** 128 - 2.0 ** 103
_F32_UNDERFLOW = 2.0 ** -150


def _checked_scale(scale):
    """``scale`` as a float, after checking that the float32 rounding of 1 / scale is finite
    and > 0 (the compiled core computes the reciprocal and rounds it once, to nearest even, in
    the default floating-point environment)."""
    kind = type(scale)
    if kind is not float and kind is not int:
        if isinstance(scale, (bool, np.bool_)) or \
                not isinstance(scale, (numbers.Real, np.number)) or \
                isinstance(scale, np.complexfloating):
            raise TypeError(f"unscale_and_check: scale must be a real number, got "
                            f"{type(scale).__name__}")
    try:
        value = float(scale)
    except OverflowError:
        value = math.inf
    if not (value > 0 and value < math.inf):
        raise ValueError(f"unscale_and_check: scale must be a finite positive number, got "
                         f"{scale!r}")
    inv64 = 1.0 / value
    if not (_F32_UNDERFLOW < inv64 < _F32_OVERFLOW):
        raise ValueError(f"unscale_and_check: 1/scale is not a finite non-zero float32 "
                         f"(scale={scale!r})")
    return value


def unscale_and_check(arrays: Sequence[np.ndarray], scale: float) -> bool:
    """Divide gradients by the loss scale in place and report whether they were all finite.

    Every element becomes ``x * fp32(1 / fp64(scale))``: float16 and bfloat16 arrays are
    widened to float32 (exactly), multiplied, and rounded back to nearest even; float32 arrays
    are multiplied in float32; float64 arrays are multiplied by ``1 / scale`` in float64.

    Parameters
    ----------
    arrays : sequence of ndarray, or one ndarray
        Writable arrays of dtype float16, bfloat16, float32 or float64 (mixed allowed), any
        shape and strides, no two of them sharing memory.
    scale : float
        The loss scale: a finite number > 0 whose reciprocal is a finite, non-zero float32.

    Returns
    -------
    bool
        True when every element was finite BEFORE the multiplication (also for no arrays).

    Raises
    ------
    TypeError
        ``arrays`` not a sequence of ndarrays, an unsupported dtype, or a non-numeric scale.
    ValueError
        A read-only array, arrays that overlap each other or themselves (an element reached by
        two indices), or a scale that is not a finite positive number.  Nothing is written
        when an error is raised.

    Notes
    -----
    One pass: each element is read once, tested on its exponent bits, multiplied and stored,
    all arrays in one call into the compiled core (split across threads when large).  The
    results are bit-identical to numpy / ml_dtypes computing
    ``(x.astype(float32) * fp32(1 / scale)).astype(x.dtype)``, NaN payloads included, at every
    instruction-set level.  No floating-point warning is raised.
    """
    if isinstance(arrays, np.ndarray):
        arrays = (arrays,)
    elif not isinstance(arrays, (list, tuple)):
        try:
            arrays = list(arrays)
        except TypeError:
            raise TypeError(f"unscale_and_check: arrays must be a sequence of numpy.ndarray, "
                            f"got {type(arrays).__name__}") from None
    value = _checked_scale(scale)
    report = _lib.unscale_check(arrays, value, True)
    if report >= 0:
        return bool(report)
    index, reason = _decode(report)
    if reason == _READONLY:
        raise ValueError(f"unscale_and_check: array {index} is read-only (shape "
                         f"{arrays[index].shape}, dtype {arrays[index].dtype})")
    return _unscale_slow(arrays, value)


def _self_overlap_message(index, x):
    return (f"unscale_and_check: array {index} reaches some elements through more than one "
            f"index (shape {x.shape}, strides {x.strides}); pass an array without "
            f"internal overlap")


def _internal_overlap(x):
    """True when two indices of ``x`` reach overlapping bytes (exact: sorts every offset)."""
    if any(stride == 0 and n > 1 for n, stride in zip(x.shape, x.strides)):
        return True                 # a broadcast axis: found without listing its offsets
    offsets = np.zeros((), np.int64)
    for n, stride in zip(x.shape, x.strides):
        offsets = np.add.outer(offsets, np.arange(n, dtype=np.int64) * stride)
    flat = np.sort(offsets, axis=None)
    return bool((np.diff(flat) < x.itemsize).any())


def _unscale_slow(arrays, scale):
    """Arrays the fast path reported: validate each one exactly; run swapped, unaligned and
    oddly strided (but not self-overlapping) arrays through native contiguous copies, and copy
    those back."""
    ready = []
    for i, x in enumerate(arrays):
        y = _operand("unscale_and_check", f"array {i}", x)
        if not x.flags.writeable:
            raise ValueError(f"unscale_and_check: array {i} is read-only (shape {x.shape}, "
                             f"dtype {x.dtype})")
        # a swapped or unaligned array goes through a copy, which cannot show that the array
        # itself reaches some elements twice: check it here (a contiguous array cannot)
        if (y is not x and x.size > 1 and not (x.flags.c_contiguous or x.flags.f_contiguous)
                and _internal_overlap(x)):
            raise ValueError(_self_overlap_message(i, x))
        ready.append(y)
    for i in range(len(arrays)):
        for j in range(i):
            if arrays[i].size and arrays[j].size and overlaps(arrays[i], arrays[j]):
                raise ValueError(f"unscale_and_check: arrays {j} and {i} share memory; "
                                 f"each element must be unscaled once")
    while True:
        # nothing is written until every array passes, so retrying after a report is safe
        report = _lib.unscale_check(ready, scale, False)
        if report >= 0:
            break
        index, reason = _decode(report)
        x = arrays[index]
        if reason == _SELF_OVERLAP and ready[index] is x and not _internal_overlap(x):
            ready[index] = np.array(x, order="C")
            continue
        if reason == _SELF_OVERLAP:
            raise ValueError(_self_overlap_message(index, x))
        raise RuntimeError(f"unscale_and_check: internal error, report {(index, reason)}")
    for x, y in zip(arrays, ready):
        if y is not x:
            x[...] = y
    return bool(report)


# the classes numerics_stats counts, in the order of the compiled tally (mc_scan.h, design e)
STAT_KEYS = ("nan", "inf", "zero", "float16_overflow", "float16_subnormal",
             "float16_underflow", "bfloat16_overflow", "bfloat16_subnormal",
             "bfloat16_underflow")
_MAGNITUDE_VIEW = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def numerics_stats(x):
    """What a tensor holds, as seen from float16 and bfloat16, in one pass.

    Parameters
    ----------
    x : ndarray or array-like
        float16, bfloat16 (``ml_dtypes.bfloat16``), float32 or float64; any shape and strides.
        Lists, tuples and scalars are taken as ``numpy.asarray`` takes them.

    Returns
    -------
    dict
        ``dtype`` (name), ``size`` (elements), ``max_abs`` (the largest finite magnitude, 0.0
        when there is none), and the counts ``nan``, ``inf``, ``zero``; then, for the finite
        nonzero elements, how each would fare converted to float16 and to bfloat16 with round
        to nearest even (what ``cast`` does): ``float16_overflow`` (becomes infinite),
        ``float16_subnormal`` (becomes a nonzero subnormal, losing precision),
        ``float16_underflow`` (becomes zero), and the same three for bfloat16.  Elements
        already float16 count as subnormal when they are; nothing in float16 overflows or
        underflows its own dtype.

    Raises
    ------
    TypeError
        ``x`` is not array-like, or has another dtype.

    Notes
    -----
    Every class is an integer compare of the magnitude bits with limits that are the first bit
    patterns converting differently, so no floating-point flag is raised and counts are exact.
    The scan is vectorised at every instruction-set level and split across threads for large
    arrays; broadcast (stride-0), byte-swapped and unaligned arrays go through a copy.
    """
    x = _operand("numerics_stats", "x", x, array_like=True)
    if any(s == 0 and n > 1 for s, n in zip(x.strides, x.shape)):
        x = contiguous("numerics_stats", "x", x)
    report = _lib.stats(x)
    if not isinstance(report, tuple):           # the operand is native and aligned by now
        raise RuntimeError(f"numerics_stats: internal error, report {_decode(report)}")
    counts, max_bits = report
    magnitude = np.array(max_bits, dtype=_MAGNITUDE_VIEW[x.dtype.itemsize])
    stats = {"dtype": str(x.dtype), "size": int(x.size),
             "max_abs": float(magnitude.view(x.dtype))}
    stats.update(zip(STAT_KEYS, (int(c) for c in counts)))
    return stats
