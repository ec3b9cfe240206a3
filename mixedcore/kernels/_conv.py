"""Convolutions over channels-last images (N, H, W, C), float32 accumulation.

The product of a convolution runs on the GEMM's micro-kernels against weights packed once
(``pack_conv``), with the im2col rows formed tile by tile in cache (docs/conv.md); depthwise
convolution has kernels of its own at every level.  Pooling is in ``_pool``; the window
geometry both use is in ``_window``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._cast import cast
from mixedcore.kernels._checks import (FLOAT_CODES, as_native, bfloat16, check_bytes, check_out,
                                       contiguous, new_array, out_dtype_of, resolve_dtype)
from mixedcore.kernels._gemm import ACTIVATIONS, GEMM_CODES, GEMM_NAMES, _pack, matmul
from mixedcore.kernels._window import IntPair, image_operand, window_geometry

_F16, _BF16, _F32, _F64 = np.dtype(np.float16), bfloat16, np.dtype(np.float32), np.dtype(np.float64)
# the deepest K a convolution kernel is packed with in one block (pack_conv)
_WHOLE_K = 8192


def _activation(fname, activation):
    if isinstance(activation, str) or activation is None:
        code = ACTIVATIONS.get(activation)
        if code is not None:
            return code
    raise ValueError(f"{fname}: unknown activation {activation!r}; expected one of "
                     f"{[a for a in ACTIVATIONS if a is not None]} or None")


def pointwise(kernel_size, groups, geom):
    """Whether a convolution of this kernel size, groups and window geometry is the product of
    the pixels with the kernel: 1 x 1, one group, stride 1, no padding."""
    return (tuple(kernel_size) == (1, 1) and groups == 1 and geom[6:8] == (1, 1)
            and geom[10:12] == (0, 0) and (geom[12], geom[13]) == (geom[1], geom[2]))


def depthwise_kernel(fname, kernel, x_shape):
    """The checked depthwise kernel (kh, kw, channels, depth_multiplier) for an input of
    ``x_shape``; TypeError / ValueError naming ``fname``."""
    if not isinstance(kernel, np.ndarray):
        raise TypeError(f"{fname}: kernel must be a numpy.ndarray, got {type(kernel).__name__}")
    if FLOAT_CODES.get(kernel.dtype.newbyteorder("=")) is None:
        raise TypeError(f"{fname}: unsupported kernel dtype {kernel.dtype}")
    if kernel.ndim != 4 or len(x_shape) != 4 or kernel.shape[2] != x_shape[3]:
        raise ValueError(f"{fname}: kernel must have shape (kh, kw, {x_shape[-1]}, "
                         f"depth_multiplier) for x of shape {tuple(x_shape)}, got "
                         f"{kernel.shape}")
    return kernel


def depthwise_weights(kernel, dtype):
    """The depthwise kernel as the core takes it: (multiplier, kh, kw, channels) of ``dtype``."""
    return np.ascontiguousarray(cast(as_native(kernel), dtype).transpose(3, 0, 1, 2))


def _bias32(fname, bias, n):
    if bias is None:
        return None
    if not isinstance(bias, np.ndarray):
        raise TypeError(f"{fname}: bias must be a numpy.ndarray, got {type(bias).__name__}")
    if FLOAT_CODES.get(bias.dtype.newbyteorder("=")) is None:
        raise TypeError(f"{fname}: unsupported bias dtype {bias.dtype}")
    if bias.shape != (n,):
        raise ValueError(f"{fname}: bias has shape {bias.shape}, expected ({n},)")
    if bias.dtype == _F32 and bias.flags.c_contiguous:
        return bias
    return np.ascontiguousarray(cast(as_native(bias), _F32))


# -- packed weights ------------------------------------------------------------------------------

class PackedConv:
    """Convolution weights packed once for ``conv2d`` (made by ``pack_conv``): one
    ``PackedMatrix`` of shape (kh * kw * cin / groups, filters / groups) per group.

    Attributes: ``kernel_shape`` (kh, kw, cin / groups, filters), ``groups``, ``dtype``,
    ``matrices``, ``nbytes``, ``isa``, ``stale``.
    """

    __slots__ = ("kernel_shape", "groups", "matrices")

    def __init__(self, kernel_shape, groups, matrices):
        self.kernel_shape = kernel_shape
        self.groups = groups
        self.matrices = matrices

    @property
    def dtype(self) -> np.dtype:
        return self.matrices[0].dtype

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in self.matrices)

    @property
    def isa(self) -> str:
        return self.matrices[0].isa

    @property
    def stale(self) -> bool:
        """True when ``pack_conv`` would now make other panels (the level or KC changed)."""
        return self.matrices[0].stale

    def unpack(self) -> np.ndarray:
        """The kernel again, (kh, kw, cin / groups, filters), bit for bit."""
        kh, kw, cg, f = self.kernel_shape
        parts = [m.unpack().reshape(kh, kw, cg, f // self.groups) for m in self.matrices]
        return np.concatenate(parts, axis=3)

    def __reduce__(self):
        raise TypeError("PackedConv cannot be pickled: pickle the kernel (unpack()) and pack "
                        "it again where it is loaded")

    def __repr__(self):
        return (f"PackedConv(kernel_shape={self.kernel_shape}, groups={self.groups}, "
                f"dtype={self.dtype}, isa={self.isa!r}, nbytes={self.nbytes})")


def pack_conv(kernel: ArrayLike, groups: int = 1, dtype: DTypeLike | None = None) -> PackedConv:
    """Pack convolution weights once for ``conv2d``.

    Parameters
    ----------
    kernel : array_like of shape (kh, kw, cin / groups, filters)
        Keras's kernel layout; float16, bfloat16, float32 or float64.
    groups : int
        Groups of the convolution; ``filters`` must be a multiple of it.
    dtype : dtype-like, optional
        The dtype the product takes the weights in (float16, bfloat16 or float32), rounded
        once to nearest even as ``pack`` does; defaults to the kernel's dtype.

    Returns
    -------
    PackedConv

    Notes
    -----
    A kernel wider than one pixel keeps its K (kh * kw * cin / groups, up to 8192) in one
    block of the panels, and with every weight finite ``conv2d`` leaves out the taps that fall
    outside the image (docs/conv.md).
    """
    return _pack_conv("pack_conv", kernel, groups, dtype)


def _pack_conv(fname, kernel, groups, dtype):
    """pack_conv, its errors naming ``fname``."""
    if not isinstance(kernel, np.ndarray):
        kernel = np.asarray(kernel)
    if kernel.ndim != 4:
        raise ValueError(f"{fname}: kernel must have shape (kh, kw, cin / groups, filters), got "
                         f"{kernel.shape}")
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{fname}: groups must be a positive int, got {groups!r}")
    kh, kw, cg, f = kernel.shape
    if f % groups:
        raise ValueError(f"{fname}: filters ({f}) must be a multiple of groups ({groups})")
    fg = f // groups
    # each group's matrix is a copy of the kernel's slice when the kernel is a view, and its
    # panels take at least as many bytes
    check_bytes(fname, "the kernel", kernel.shape, kernel.dtype.itemsize)
    # a kernel wider than one pixel keeps its K in one block (up to _WHOLE_K): a convolution
    # then sums every window in registers and can leave out the taps that fall outside the
    # image (docs/conv.md, "Windows cut to the image")
    k = kh * kw * cg
    kc_min = k if kh * kw > 1 and k <= _WHOLE_K else 0
    mats = tuple(_pack(kernel[..., g * fg:(g + 1) * fg].reshape(k, fg), dtype, kc_min)
                 for g in range(int(groups)))
    return PackedConv((kh, kw, cg, f), int(groups), mats)


# -- convolution ---------------------------------------------------------------------------------

def conv2d(x: ArrayLike, kernel: ArrayLike | PackedConv, *, strides: IntPair = 1,
           padding: str = "valid", dilation_rate: IntPair = 1, groups: int = 1,
           bias: ArrayLike | None = None, activation: str | None = None,
           out_dtype: DTypeLike | None = None) -> np.ndarray:
    """``activation(conv(x, kernel) + bias)`` over channels-last images, float32 accumulation.

    Parameters
    ----------
    x : ndarray of shape (batch, height, width, channels)
        float16, bfloat16 or float32; any strides (copied to C order when not).
    kernel : ndarray of shape (kh, kw, channels / groups, filters), or PackedConv
        Keras's layout.  An ndarray is packed for this call in x's dtype; ``pack_conv`` packs
        it once.
    strides, dilation_rate : int or (int, int)
    padding : "valid", "same" or ((top, bottom), (left, right))
        "same" pads as Keras does (the odd one after).
    groups : int
        channels and filters split into this many independent groups.
    bias : ndarray of shape (filters,), optional
    activation : None or a name of ``activation`` ("relu", "relu6", "gelu", "silu", ...)
    out_dtype : float32 (default), float16 or bfloat16

    Returns
    -------
    ndarray of shape (batch, out_height, out_width, filters)

    Notes
    -----
    Each output is the float32 sum over the kernel window of exact products (16-bit inputs)
    or single FMA roundings, in the order of the im2col row, blocked over K as
    ``matmul`` blocks it; then bias, activation and one rounding to ``out_dtype``.  The
    result equals ``matmul(im2col(x, ...), kernel.reshape(-1, filters))`` bit for bit.
    """
    fname = "conv2d"
    x = image_operand(fname, x, GEMM_CODES, GEMM_NAMES)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{fname}: groups must be a positive int, got {groups!r}")
    groups = int(groups)
    if isinstance(kernel, PackedConv):
        packed = kernel
        if packed.groups != groups:
            raise ValueError(f"{fname}: the kernel was packed for {packed.groups} groups, "
                             f"the call asks for {groups}")
    elif isinstance(kernel, np.ndarray):
        if kernel.ndim != 4:
            raise ValueError(f"{fname}: kernel must have shape (kh, kw, channels / groups, "
                             f"filters), got {kernel.shape}")
        if kernel.dtype.newbyteorder("=") not in FLOAT_CODES:
            raise TypeError(f"{fname}: unsupported kernel dtype {kernel.dtype}")
        if kernel.shape[3] % groups:
            raise ValueError(f"{fname}: filters ({kernel.shape[3]}) must be a multiple of "
                             f"groups ({groups})")
        packed = None
    else:
        raise TypeError(f"{fname}: kernel must be a numpy.ndarray or a PackedConv, got "
                        f"{type(kernel).__name__}")
    kh, kw, cg, f = kernel.kernel_shape if isinstance(kernel, PackedConv) else kernel.shape
    c = x.shape[3]
    if c % groups or c // groups != cg:
        raise ValueError(f"{fname}: x has {c} channels; a kernel of shape "
                         f"{(kh, kw, cg, f)} with groups={groups} needs {cg * groups}")
    geom = window_geometry(fname, x.shape, (kh, kw), strides, padding, dilation_rate)
    act = _activation(fname, activation)
    target = out_dtype_of(fname, out_dtype)
    bias32 = _bias32(fname, bias, f)
    shape = (geom[0], geom[12], geom[13], f)
    if 0 in shape:
        return np.empty(shape, dtype=target)
    check_bytes(fname, "the output", shape, target.itemsize)
    packed = kernel if isinstance(kernel, PackedConv) else _pack_conv(fname, kernel, groups,
                                                                      x.dtype)
    if pointwise((kh, kw), groups, geom):
        # a pointwise convolution's im2col matrix is x itself: the product is the GEMM's
        return matmul(x.reshape(-1, c), packed.matrices[0], bias=bias32,
                      activation=activation, out_dtype=target).reshape(shape)
    out = new_array(fname, "the output", shape, target)
    r = _lib.conv_gemm(x, packed.matrices, out, bias32, geom, groups, f, GEMM_CODES[x.dtype],
                       GEMM_CODES[target], act)
    if r == _lib.CONV_FORMAT_ERROR:
        raise ValueError(f"{fname}: the kernel was packed at level {packed.isa!r}, whose panels "
                         f"the current level cannot use; pack it again with "
                         f"kernels.pack_conv(packed.unpack(), groups)")
    return out


def _channels(fname, channels, c):
    if channels is None:
        return 0, c
    c0, c1 = channels
    if not (0 <= c0 < c1 <= c):
        raise ValueError(f"{fname}: channels must be a range (start, stop) inside [0, {c}], got "
                         f"{channels!r}")
    return int(c0), int(c1)


def im2col(x: ArrayLike, kernel_size: IntPair, *, strides: IntPair = 1, padding: str = "valid",
           dilation_rate: IntPair = 1, channels: tuple[int, int] | None = None) -> np.ndarray:
    """The im2col matrix of channels-last images: row (n, oh, ow) holds the kernel window's
    taps in row-major order, each with the channels [start, stop) (all by default), zeros for
    padding.  Shape (batch * out_height * out_width, kh * kw * (stop - start)), x's dtype
    (float16, bfloat16, float32 or float64)."""
    fname = "im2col"
    x = image_operand(fname, x, FLOAT_CODES, "float16, bfloat16, float32, float64")
    geom = window_geometry(fname, x.shape, kernel_size, strides, padding, dilation_rate)
    c0, c1 = _channels(fname, channels, x.shape[3])
    m = geom[0] * geom[12] * geom[13]
    out = new_array(fname, "the output", (m, geom[4] * geom[5] * (c1 - c0)), x.dtype)
    if out.size:
        _lib.conv_im2col(x, out, geom, x.dtype.itemsize, c0, c1 - c0)
    return out


def col2im(cols: ArrayLike, input_shape: Sequence[int], kernel_size: IntPair, *,
           strides: IntPair = 1, padding: str = "valid", dilation_rate: IntPair = 1,
           channels: tuple[int, int] | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """The adjoint of ``im2col``: every element of ``cols`` added to the input position it was
    taken from (float32 or float64, the dtype of ``cols``).  ``out`` (input_shape, cols'
    dtype, C-contiguous) is added to in place; by default a zeroed array.  Each image's sums
    are taken in one fixed order (output pixels in order, taps in order)."""
    fname = "col2im"
    if not isinstance(cols, np.ndarray):
        raise TypeError(f"{fname}: cols must be a numpy.ndarray, got {type(cols).__name__}")
    dt = cols.dtype.newbyteorder("=")
    if dt not in (_F32, _F64):
        raise TypeError(f"{fname}: cols must be float32 or float64, got {cols.dtype}")
    input_shape = tuple(int(d) for d in input_shape)
    if len(input_shape) != 4:
        raise ValueError(f"{fname}: input_shape must be (batch, height, width, channels), got "
                         f"{input_shape}")
    geom = window_geometry(fname, input_shape, kernel_size, strides, padding, dilation_rate)
    c0, c1 = _channels(fname, channels, input_shape[3])
    expected = (geom[0] * geom[12] * geom[13], geom[4] * geom[5] * (c1 - c0))
    if cols.shape != expected:
        raise ValueError(f"{fname}: cols has shape {cols.shape}, expected {expected}")
    cols = contiguous(fname, "cols", as_native(cols))
    if out is None:
        out = new_array(fname, "the output", input_shape, dt, zeros=True)
    else:
        check_out(fname, out, input_shape, dt, [cols])
        if not (out.flags.c_contiguous and out.flags.aligned):
            raise ValueError(f"{fname}: out must be C-contiguous and aligned")
    if cols.size:
        _lib.conv_col2im(cols, out, geom, FLOAT_CODES[dt], c0, c1 - c0)
    return out


# -- depthwise -----------------------------------------------------------------------------------

def depthwise_conv2d(x: ArrayLike, kernel: ArrayLike, *, strides: IntPair = 1,
                     padding: str = "valid", dilation_rate: IntPair = 1,
                     bias: ArrayLike | None = None, activation: str | None = None,
                     out_dtype: DTypeLike | None = None) -> np.ndarray:
    """Depthwise convolution (``keras.layers.DepthwiseConv2D``): output channel
    ``c * depth_multiplier + m`` is input channel c convolved with ``kernel[:, :, c, m]``.

    Parameters
    ----------
    x : ndarray (batch, height, width, channels)
        float16, bfloat16, float32 or float64.
    kernel : ndarray (kh, kw, channels, depth_multiplier)
        Any float dtype; taken as float32 (float64 for float64 x): pass it already rounded to
        the dtype the product should use (a 16-bit value is exact in float32).
    bias : ndarray (channels * depth_multiplier,), optional
    activation : as ``conv2d`` (None only for float64 x)
    out_dtype : float32 (default; float64 for float64 x), float16 or bfloat16

    Notes
    -----
    Each output is the sum of its valid taps in row-major order, one float32 FMA each from
    +0 (float64 for float64 x), then bias, activation and one rounding: the same bits at every
    ISA level.
    """
    fname = "depthwise_conv2d"
    x = image_operand(fname, x, FLOAT_CODES, "float16, bfloat16, float32, float64")
    f64 = x.dtype == _F64
    kh, kw, c, mult = depthwise_kernel(fname, kernel, x.shape).shape
    geom = window_geometry(fname, x.shape, (kh, kw), strides, padding, dilation_rate)
    act = _activation(fname, activation)
    if f64:
        if act:
            raise ValueError(f"{fname}: float64 x takes no activation (got {activation!r}); "
                             f"apply it to the result")
        if out_dtype is not None and resolve_dtype(fname, out_dtype) != _F64:
            raise TypeError(f"{fname}: float64 x gives a float64 result, not {out_dtype}")
        target, wdt = _F64, _F64
    else:
        target, wdt = out_dtype_of(fname, out_dtype), _F32
    check_bytes(fname, "the output", (geom[0], geom[12], geom[13], c * mult), target.itemsize)
    check_bytes(fname, "the kernel", (kh, kw, c, mult), wdt.itemsize)
    w = depthwise_weights(kernel, wdt)
    b = None
    if bias is not None:
        b = _bias32(fname, bias, c * mult)
        if f64:
            b = np.ascontiguousarray(cast(as_native(bias), _F64))
    out = new_array(fname, "the output", (geom[0], geom[12], geom[13], c * mult), target)
    if out.size:
        _lib.conv_depthwise(x, w, out, b, geom, mult, FLOAT_CODES[x.dtype], FLOAT_CODES[target],
                            act)
    return out
