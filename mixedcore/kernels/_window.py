"""The window geometry of channels-last images (N, H, W, C), which convolution and pooling
share: sizes, strides and dilations given as one int or a pair, "valid" / "same" / explicit
padding (split as Keras splits it), the output size, and the image operand itself.
"""
from __future__ import annotations

from typing import Tuple, Union

import numpy as np

from mixedcore.kernels._checks import as_native, contiguous

_INT64_MAX = 2**63 - 1

# a size, stride or dilation: one int for both spatial axes, or (rows, columns)
IntPair = Union[int, Tuple[int, int]]


def _pair(fname, what, value, positive=True):
    """(a, b) from an int or a sequence of two ints."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2 or any(
            isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in value):
        raise TypeError(f"{fname}: {what} must be an int or a pair of ints, got {value!r}")
    value = (int(value[0]), int(value[1]))
    low = 1 if positive else 0
    if value[0] < low or value[1] < low:
        raise ValueError(f"{fname}: {what} must be {'positive' if positive else '>= 0'}, "
                         f"got {value}")
    return value


def same_padding(size, k, stride, dilation):
    """(before, after) padding of one dimension for "same": the output has ceil(size / stride)
    positions and the padding is split as Keras (TensorFlow) splits it, the extra one after."""
    span = (k - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + span - size, 0)
    return total // 2, total - total // 2


def _padding(fname, padding, hw, ks, strides, dilation):
    """((top, bottom), (left, right)) from "valid", "same" or explicit pairs."""
    if isinstance(padding, str):
        mode = padding.lower()
        if mode == "valid":
            return (0, 0), (0, 0)
        if mode == "same":
            return tuple(same_padding(hw[d], ks[d], strides[d], dilation[d]) for d in range(2))
        raise ValueError(f"{fname}: padding must be 'valid', 'same' or ((top, bottom), "
                         f"(left, right)), got {padding!r}")
    try:
        pads = tuple(_pair(fname, "padding", tuple(p), positive=False) for p in padding)
    except TypeError:
        pads = ()
    if len(pads) != 2:
        raise ValueError(f"{fname}: padding must be 'valid', 'same' or ((top, bottom), "
                         f"(left, right)), got {padding!r}")
    return pads


def window_geometry(fname, shape, kernel_size, strides=1, padding="valid", dilation_rate=1):
    """The geometry tuple (n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow) of an operation
    on an input of ``shape`` (N, H, W, C)."""
    ks = _pair(fname, "kernel_size", kernel_size)
    st = _pair(fname, "strides", strides)
    dl = _pair(fname, "dilation_rate", dilation_rate)
    n, h, w, c = shape
    (pt, pb), (pl, pr) = _padding(fname, padding, (h, w), ks, st, dl)
    out = []
    for size, before, after, k, s, d in ((h, pt, pb, ks[0], st[0], dl[0]),
                                         (w, pl, pr, ks[1], st[1], dl[1])):
        span = (k - 1) * d + 1
        if max(size + before + after, span) > _INT64_MAX:
            # the core indexes rows and columns of the padded input in int64
            raise ValueError(f"{fname}: the padded input (spatial shape {(h, w)}, padding "
                             f"{((pt, pb), (pl, pr))}) or the window {ks} with dilation {dl} "
                             f"spans more than 2**63 - 1 positions")
        if size + before + after < span:
            raise ValueError(f"{fname}: the input (spatial shape {(h, w)}, padding "
                             f"{((pt, pb), (pl, pr))}) is smaller than the kernel window "
                             f"{ks} with dilation {dl}")
        out.append((size + before + after - span) // s + 1)
    return (n, h, w, c, ks[0], ks[1], st[0], st[1], dl[0], dl[1], pt, pl, out[0], out[1])


def image_operand(fname, x, dtypes, names):
    """x as a native, aligned, C-contiguous (N, H, W, C) array of one of ``dtypes`` (whose
    names ``names`` lists for the error)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{fname}: x must be a numpy.ndarray, got {type(x).__name__}")
    dt = x.dtype.newbyteorder("=") if not x.dtype.isnative else x.dtype
    if dt not in dtypes:
        raise TypeError(f"{fname}: unsupported dtype {x.dtype} for x; supported: {names}")
    if x.ndim != 4:
        raise ValueError(f"{fname}: x must have shape (batch, height, width, channels), got "
                         f"{x.shape}")
    return contiguous(fname, "x", as_native(x, fname))
