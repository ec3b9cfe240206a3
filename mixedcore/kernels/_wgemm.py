"""Weight-only quantized matrix products: int4 / int8 weights in Keras's layouts, float inputs."""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore._core._mixedcore import PackedQuantized
from mixedcore.kernels._checks import (as_native, check_bytes, check_out, contiguous, new_array,
                                     product_bias)
from mixedcore.kernels._gemm import _OUT_DTYPES, ACTIVATIONS, GEMM_CODES, GEMM_NAMES, _code

_I8 = np.dtype(np.int8)
_F32 = np.dtype(np.float32)


def _int_arg(fname, name, v):
    if isinstance(v, bool) or not isinstance(v, (numbers.Integral, np.integer)):
        raise TypeError(f"{fname}: {name} must be an int, got {type(v).__name__}")
    return int(v)


def _array(fname, name, x):
    if isinstance(x, np.ndarray):
        return x
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{fname}: {name} must be an array, got {type(x).__name__} "
                        f"({exc})") from None


def pack_quantized(kernel: ArrayLike, *, bits: int, scale: ArrayLike,
                   zero: ArrayLike | None = None, block_size: int | None = None,
                   n: int | None = None) -> PackedQuantized:
    """Pack a quantized Dense kernel, in Keras's storage layout, for ``matmul_quantized``.

    Parameters
    ----------
    kernel : int8 ndarray
        ``bits=8``: the codes, shape (k, n).  ``bits=4``: two int4 codes per byte along the
        last axis, shape (k, ceil(n / 2)): column 2c in the low nibble, column 2c + 1 in the
        high nibble (two's complement); an odd ``n`` leaves the last high nibble 0.
    bits : 4 or 8
    scale : float32 ndarray
        One per column, shape (n,), when ``block_size`` is None or -1: the weight is
        ``q / scale[j]``.  Else one per group of ``block_size`` rows, shape (ceil(k /
        block_size), n): the weight is ``(q - zero[g, j]) * scale[g, j]``.
    zero : int8 ndarray, optional
        The zero points of the groups, shape (ceil(k / block_size), n); 0 when omitted.  Only
        with ``block_size``.
    block_size : int, optional
        Rows per group (Keras's int4 sub-channel quantization; 128 by default there); None or
        -1 for one scale per column.
    n : int
        The number of columns; required for ``bits=4`` (the packed kernel has ceil(n / 2)).

    Returns
    -------
    PackedQuantized
        ``shape`` (k, n), ``bits``, ``block_size`` (-1 per column), ``nbytes``,
        ``quantized()`` (the q values) and ``dequantize()`` (the float32 weights as Keras
        computes them).

    Raises
    ------
    TypeError
        Arguments of the wrong type or dtype (kernel and zero int8, scale float32).
    ValueError
        Shapes that do not agree with k, n and block_size; a set padding nibble; scales that
        are not finite (or zero, per column: the weight divides by them); a matrix whose byte
        count overflows.
    """
    fname = "pack_quantized"
    bits = _int_arg(fname, "bits", bits)
    if bits not in (4, 8):
        raise ValueError(f"{fname}: bits must be 4 or 8, got {bits}")
    kern = _array(fname, "kernel", kernel)
    if kern.dtype != _I8:
        raise TypeError(f"{fname}: kernel must be int8 (Keras's storage), got {kern.dtype}")
    if kern.ndim != 2:
        raise ValueError(f"{fname}: kernel must be 2-D (k, n{' / 2' if bits == 4 else ''}), "
                         f"got shape {kern.shape}")
    k, cols = kern.shape
    if bits == 8:
        if n is not None and _int_arg(fname, "n", n) != cols:
            raise ValueError(f"{fname}: n = {n} does not match the int8 kernel's shape "
                             f"{kern.shape}")
        n = cols
    else:
        if n is None:
            raise ValueError(f"{fname}: n (the number of columns) is required for bits=4; "
                             f"the kernel of shape {kern.shape} holds two per byte")
        n = _int_arg(fname, "n", n)
        if n < 1 or cols != (n + 1) // 2:
            raise ValueError(f"{fname}: an int4 kernel of n = {n} columns has shape (k, "
                             f"{(n + 1) // 2 if n >= 1 else 'ceil(n / 2)'}), got {kern.shape}")
    if k < 1 or n < 1:
        raise ValueError(f"{fname}: kernel must have at least one row and column, got shape "
                         f"{kern.shape}")
    kern = contiguous(fname, "kernel", kern)
    if bits == 4 and n % 2:
        high = kern[:, -1].view(np.uint8) >> 4
        bad = np.flatnonzero(high)
        if bad.size:
            raise ValueError(f"{fname}: n = {n} is odd, so the high nibble of the last byte of "
                             f"each row is padding and must be 0; row {bad[0]} holds "
                             f"{int(high[bad[0]])}")

    if block_size is None or (not isinstance(block_size, bool) and
                              isinstance(block_size, (numbers.Integral, np.integer)) and
                              block_size == -1):
        block = 0
    else:
        block = _int_arg(fname, "block_size", block_size)
        if block < 1:
            raise ValueError(f"{fname}: block_size must be a positive int, or None / -1 for "
                             f"one scale per column, got {block}")
    groups = -(-k // block) if block else 0

    sc = _array(fname, "scale", scale)
    if sc.dtype.kind != "f" or sc.dtype.itemsize != 4:
        raise TypeError(f"{fname}: scale must be float32, got {sc.dtype}")
    want = (groups, n) if block else (n,)
    if sc.shape != want:
        what = (f"({groups}, {n}): ceil(k / block_size) = ceil({k} / {block}) groups"
                if block else f"({n},): one per column")
        raise ValueError(f"{fname}: scale has shape {sc.shape}, expected {what}")
    sc = np.ascontiguousarray(sc, dtype=_F32)
    bad = np.flatnonzero(~np.isfinite(sc) | ((sc == 0) if not block else False))
    if bad.size:
        at = np.unravel_index(bad[0], sc.shape)
        raise ValueError(f"{fname}: scale must be finite{' and nonzero' if not block else ''}"
                         f"{'' if block else ' (the weights are q / scale)'}; "
                         f"scale[{', '.join(str(int(i)) for i in at)}] = {float(sc[at])!r}")

    zp = None
    if zero is not None:
        if not block:
            raise ValueError(f"{fname}: zero points come with block_size (grouped scales); "
                             f"one scale per column has none")
        zp = _array(fname, "zero", zero)
        if zp.dtype != _I8:
            raise TypeError(f"{fname}: zero must be int8, got {zp.dtype}")
        if zp.shape != (groups, n):
            raise ValueError(f"{fname}: zero has shape {zp.shape}, expected ({groups}, {n}) "
                             f"like scale")
        zp = np.ascontiguousarray(zp)
    elif block:
        zp = np.zeros((groups, n), dtype=_I8)
    return _lib.wgemm_pack(kern, bits, k, n, sc, zp, block)


def matmul_quantized(a: ArrayLike, packed: PackedQuantized, *, bias: ArrayLike | None = None,
                     activation: str | None = None, out_dtype: DTypeLike | None = None,
                     out: np.ndarray | None = None) -> Any:
    """``activation(a @ W + bias)`` for weights packed by ``pack_quantized``.

    Parameters
    ----------
    a : ndarray of shape (..., m, k) or (k,)
        float16, bfloat16 or float32; any strides.
    packed : PackedQuantized
    bias : ndarray of shape (n,), optional
        float16, bfloat16 or float32 (shape () or (1,) broadcasts).
    activation : None or a name of ``activation`` ("relu", "gelu", "silu", ...)
    out_dtype : float32 (default), bfloat16 or float16
        The float32 result rounded once.
    out : ndarray, optional
        The result's shape and dtype, writable, not overlapping an input.

    Returns
    -------
    ndarray of shape (..., m, n) (or (n,) for a 1-D ``a``).

    Notes
    -----
    Per column (``block_size`` -1): ``s / scale[j]`` with s the float32 sum of ``a[r] * q[r,
    j]``, rows in order, one FMA each; grouped: ``t = fma(s_g, scale[g, j], t)`` over the
    groups, each s_g the same sum of ``a[r] * (q[r, j] - zero[g, j])`` over the group's rows.
    Then ``+ bias``, the activation and one rounding to ``out_dtype``, as ``matmul``.  The
    result is the same bits at every level and thread count (at the avx512bf16 level a
    partial sum below 2**-126 of a bfloat16 ``a`` is flushed to zero; docs/gemm.md).
    """
    fname = "matmul_quantized"
    if not isinstance(packed, PackedQuantized):
        raise TypeError(f"{fname}: packed must be a PackedQuantized (from pack_quantized), got "
                        f"{type(packed).__name__}")
    x = _array(fname, "a", a)
    if x.ndim == 0:
        raise ValueError(f"{fname}: a is 0-d; it needs at least 1 dimension (k,)")
    if _code(x) is None:
        raise TypeError(f"{fname}: unsupported dtype {x.dtype} for a; supported: {GEMM_NAMES}")
    x = as_native(x, fname)
    k, n = packed.shape
    if x.shape[-1] != k:
        raise ValueError(f"{fname}: a has shape {x.shape}, whose last dimension is not the "
                         f"packed matrix's k = {k} (shape {packed.shape})")
    out_shape = x.shape[:-1] + (n,)

    act = ACTIVATIONS.get(activation) if activation is None or isinstance(activation, str) \
        else None
    if act is None:
        raise ValueError(f"{fname}: unknown activation {activation!r}; expected one of "
                         f"{[name for name in ACTIVATIONS if name is not None]} or None")
    target: Any
    if out_dtype is None:
        target = out.dtype if isinstance(out, np.ndarray) else _F32
        if isinstance(out, np.ndarray) and _code(out) is None:
            raise TypeError(f"{fname}: unsupported out dtype {out.dtype}; supported: "
                            f"{GEMM_NAMES}")
    else:
        target = _OUT_DTYPES.get(out_dtype) if isinstance(out_dtype, str) else None
        if target is None:
            try:
                target = np.dtype(out_dtype)
            except TypeError as exc:
                raise TypeError(f"{fname}: cannot interpret {out_dtype!r} as a dtype "
                                f"({exc})") from None
            if target not in GEMM_CODES:
                raise TypeError(f"{fname}: unsupported out_dtype {target}; supported: "
                                f"{GEMM_NAMES}")

    inputs = [x]
    bias32 = None
    bias_stride = 0
    if bias is not None:
        bias = _array(fname, "bias", bias)
        bias32, bias_stride = product_bias(fname, bias, n, GEMM_CODES, GEMM_NAMES)
        inputs.append(bias)

    # the result, and the rows of an x that does not reshape without a copy
    check_bytes(fname, "x", x.shape, x.dtype.itemsize)
    if out is None:
        result = new_array(fname, "the result", out_shape, target)
    else:
        check_out(fname, out, out_shape, target, inputs)
        result = out
        target = np.dtype(target).newbyteorder("=")
    work = result if result.flags.aligned and result.dtype.isnative else \
        np.empty(out_shape, dtype=target)
    o2 = work.view()
    try:
        o2.shape = (-1, n)
    except AttributeError:                  # rows that no single stride reaches: a copy
        work = np.empty(out_shape, dtype=target)
        o2 = work.reshape(-1, n)
    a2 = x.reshape(-1, k)
    m = a2.shape[0]
    if m:
        _lib.wgemm_run(a2, packed, o2, bias32, m, a2.strides, o2.strides, bias_stride,
                       GEMM_CODES[a2.dtype], GEMM_CODES[target], act)
    if work is not result:
        result[...] = work
    return result
