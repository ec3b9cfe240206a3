"""Max and average pooling over channels-last images (N, H, W, C), and its gradient.

The window geometry is the one convolution uses (``_window``); the core has pooling kernels of
their own at every level.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._cast import cast
from mixedcore.kernels._checks import FLOAT_CODES, as_native, check_bytes, new_array
from mixedcore.kernels._window import IntPair, image_operand, window_geometry

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
POOL_MODES = {"max": 0, "average": 1}


def _pool_mode(fname, mode):
    code = POOL_MODES.get(mode) if isinstance(mode, str) else None
    if code is None:
        raise ValueError(f"{fname}: mode must be 'max' or 'average', got {mode!r}")
    return code


def pool_geometry(fname, shape, pool_size, strides, padding, mode):
    """The core's mode code and the window geometry of pooling an input of ``shape``."""
    op = _pool_mode(fname, mode)
    if strides is None:
        strides = pool_size
    if not (isinstance(padding, str) and padding.lower() in ("valid", "same")):
        raise ValueError(f"{fname}: padding must be 'valid' or 'same', got {padding!r}")
    geom = list(window_geometry(fname, shape, pool_size, strides, padding, 1))
    for axis in (0, 1):
        size, k, s, p, out = (geom[1 + axis], geom[4 + axis], geom[6 + axis], geom[10 + axis],
                              geom[12 + axis])
        if out >= 1 and (out - 1) * s - p <= 0 and k - p >= size:
            # every window covers the whole axis (a window as large as the image, or larger:
            # Keras takes any pool size under "same"): the same windows, drawn no larger than
            # the image and its outputs, so that no size in the core grows with pool_size
            geom[4 + axis], geom[6 + axis], geom[10 + axis] = size + out - 1, 1, out - 1
    return op, tuple(geom)


def _pooling(fname, x, pool_size, strides, padding, mode):
    """The checked image, the core's mode code and the window geometry of a pooling call."""
    x = image_operand(fname, x, FLOAT_CODES, "float16, bfloat16, float32, float64")
    return (x,) + pool_geometry(fname, x.shape, pool_size, strides, padding, mode)


def pool2d(x: ArrayLike, pool_size: IntPair, *, strides: IntPair | None = None,
           padding: str = "valid", mode: str = "max") -> np.ndarray:
    """Max or average pooling over windows of channels-last images (Keras's pooling layers).

    Parameters
    ----------
    x : ndarray (batch, height, width, channels), float16, bfloat16, float32 or float64
    pool_size : int or (int, int)
    strides : int or (int, int), optional
        Defaults to ``pool_size``.
    padding : "valid" or "same"
        Padded positions take no part: a maximum is over the window's real pixels, an average
        divides by their number (as Keras's "same" average does).
    mode : "max" or "average"

    Returns
    -------
    ndarray of x's dtype
        A maximum is one of the inputs, bit for bit (NaN wins; the first of equal values);
        an average is the float32 sum (float64 for float64) in window order divided by the
        count, rounded once to x's dtype.
    """
    fname = "pool2d"
    x, op, geom = _pooling(fname, x, pool_size, strides, padding, mode)
    out = new_array(fname, "the output", (geom[0], geom[12], geom[13], geom[3]), x.dtype)
    if out.size:
        _lib.conv_pool(x, out, geom, op, FLOAT_CODES[x.dtype])
    return out


def pool2d_grad(x: ArrayLike, dy: ArrayLike, pool_size: IntPair, *,
                strides: IntPair | None = None, padding: str = "valid",
                mode: str = "max") -> np.ndarray:
    """The gradient of ``pool2d`` with respect to x for an output gradient ``dy``: float32
    (float64 for float64 x).  A maximum's gradient goes to the input the forward pass chose
    (the first maximum of the window); an average's is spread evenly over the real pixels."""
    fname = "pool2d_grad"
    x, op, geom = _pooling(fname, x, pool_size, strides, padding, mode)
    work = _F64 if x.dtype == _F64 else _F32
    if not isinstance(dy, np.ndarray):
        raise TypeError(f"{fname}: dy must be a numpy.ndarray, got {type(dy).__name__}")
    expected = (geom[0], geom[12], geom[13], geom[3])
    if dy.shape != expected:
        raise ValueError(f"{fname}: dy has shape {dy.shape}, expected {expected}")
    if FLOAT_CODES.get(dy.dtype.newbyteorder("=")) is None:
        raise TypeError(f"{fname}: unsupported dy dtype {dy.dtype}")
    check_bytes(fname, "dy", dy.shape, work.itemsize)
    dx = new_array(fname, "dx", x.shape, work, zeros=True)
    dy = np.ascontiguousarray(cast(as_native(dy), work))
    if dy.size:
        _lib.conv_pool_grad(x, dy, dx, geom, op, FLOAT_CODES[x.dtype])
    return dx
