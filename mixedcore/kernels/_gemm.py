"""Matrix products of float16 / bfloat16 / float32 operands with float32 accumulation."""
from __future__ import annotations

import math
import numbers
import os
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore._core._mixedcore import PackedMatrix
from mixedcore.kernels._act import ACT_CODES
from mixedcore.kernels._cast import cast
from mixedcore.kernels._checks import (as_native, bfloat16, check_bytes, check_out, float_code,
                                       new_array, out_dtype_of, product_bias, resolve_dtype)
from mixedcore.kernels._runtime import ISA_LEVELS

_F16, _BF16, _F32 = np.dtype(np.float16), bfloat16, np.dtype(np.float32)
_I8 = np.dtype(np.int8)
GEMM_CODES = {_F16: 0, _BF16: 1, _F32: 2}
GEMM_NAMES = "float16, bfloat16, float32"
ACTIVATIONS: dict[str | None, int] = {None: 0}
ACTIVATIONS.update(ACT_CODES)
# out_dtype names resolved without numpy's parser (layers pass them on every call)
_OUT_DTYPES = {"float16": _F16, "bfloat16": _BF16, "float32": _F32}

_F32_MAX = float(np.finfo(np.float32).max)



def _env_block(name):
    text = os.environ.get(name, "").strip()
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a positive integer") from None
    limit = _lib.BLOCK_MAX[name[-2:].lower()]
    if not 1 <= value <= limit:
        raise ValueError(f"{name}={text!r}: expected a positive integer of at most {limit}")
    return value


def set_gemm_blocks(mc: int | None = None, kc: int | None = None,
                    nc: int | None = None) -> None:
    """Override the GEMM block sizes, process-wide, from the next call on (tuning and tests).

    Parameters
    ----------
    mc, kc, nc : int, optional
        Rows of A per packed block, depth of K per block, columns of B per packed block.
        ``None`` (or 0) restores the kernel's default (docs/gemm.md lists them).  MC is rounded
        up to the micro-kernel's rows, NC to its columns, KC to even.  At most 16384 (MC, KC)
        and 65536 (NC).

    Raises
    ------
    TypeError
        A value that is not an int.
    ValueError
        A negative value, or one above its bound; nothing is changed then.

    Notes
    -----
    The environment variables ``MIXEDCORE_GEMM_MC``, ``MIXEDCORE_GEMM_KC`` and
    ``MIXEDCORE_GEMM_NC`` set them at import.  MC and NC never change the results; KC decides
    where the float32 partial sums of K blocks are added, so it can change the last bits
    (always within the error bound).  A call in progress keeps the sizes it started with, and a
    matrix packed by ``pack`` keeps its KC.
    """
    values = []
    for name, v in (("mc", mc), ("kc", kc), ("nc", nc)):
        if v is None:
            values.append(0)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"set_gemm_blocks: {name} must be an int, got {type(v).__name__}")
        limit = _lib.BLOCK_MAX[name]
        if not 0 <= v <= limit:
            raise ValueError(f"set_gemm_blocks: {name} must be between 0 and {limit}, got {v}")
        values.append(int(v))
    _lib.gemm_set_blocks(*values)


set_gemm_blocks(_env_block("MIXEDCORE_GEMM_MC"), _env_block("MIXEDCORE_GEMM_KC"),
                _env_block("MIXEDCORE_GEMM_NC"))


def _code(x):
    code = GEMM_CODES.get(x.dtype)
    if code is None and not x.dtype.isnative:
        code = GEMM_CODES.get(x.dtype.newbyteorder("="))
    return code


def _operand(name, x):
    if isinstance(x, PackedMatrix):
        raise TypeError(f"matmul: {name} must be a numpy.ndarray (only b may be a "
                        f"PackedMatrix), got PackedMatrix")
    if not isinstance(x, np.ndarray):              # array-likes, as numpy.matmul takes them
        try:
            x = np.asarray(x)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"matmul: {name} must be an array, got {type(x).__name__} "
                            f"({exc})") from None
    if x.ndim == 0:
        raise ValueError(f"matmul: {name} is 0-d (a scalar); operands need at least 1 "
                         f"dimension, as in numpy.matmul (use multiplication for a scalar)")
    if x.dtype in GEMM_CODES and x.flags.aligned:   # the common case: native, aligned
        return x
    if _code(x) is None:
        raise TypeError(f"matmul: unsupported dtype {x.dtype} for {name}; supported: {GEMM_NAMES}")
    return as_native(x, "matmul")


def _batch_offsets(x, batch_shape):
    """Byte offset of each batch item of ``x`` (shape batch_shape + (r, c)), C order."""
    off = np.zeros(batch_shape, dtype=np.int64)
    nb = len(batch_shape)
    for d in range(nb):
        shape = [1] * nb
        shape[d] = batch_shape[d]
        off = off + (np.arange(batch_shape[d], dtype=np.int64) * x.strides[d]).reshape(shape)
    return off.reshape(-1)


def matmul(a: ArrayLike, b: ArrayLike | PackedMatrix, *, out: np.ndarray | None = None,
           out_dtype: DTypeLike | None = None, bias: ArrayLike | None = None,
           activation: str | None = None, alpha: float = 1.0, beta: float = 0.0,
           c: ArrayLike | None = None) -> Any:
    """``activation(alpha * a @ b + beta * c + bias)`` with float32 products and sums.

    Parameters
    ----------
    a : ndarray of shape (..., m, k) or (k,)
        float16, bfloat16 (``ml_dtypes.bfloat16``) or float32.  Any strides: transposed,
        Fortran-ordered, reversed and sliced views are read in place.
    b : ndarray of shape (..., k, n) or (k,), or PackedMatrix
        Same dtypes as ``a`` (the two may differ).  Batch dimensions broadcast as in
        ``numpy.matmul``; a 1-D operand is a vector, as in numpy.  A matrix packed once by
        ``pack`` (shape (k, n), shared by every batch item) skips the packing of each call;
        the result is the same, bit for bit.
    out : ndarray, optional
        Where to write the result: the result's shape, dtype ``out_dtype`` (or, when
        ``out_dtype`` is None, its own dtype, which must be float16, bfloat16 or float32),
        writable, not overlapping any input.  Any strides.
    out_dtype : dtype-like, optional
        float32 (default), float16 or bfloat16.  A 16-bit result is the float32 result rounded
        once to nearest even, bit-identical to ``numpy``/``ml_dtypes`` ``astype``.
    bias : ndarray of shape (n,), optional
        Added to every row (float16, bfloat16 or float32; shape () or (1,) broadcasts).
    activation : None or a name of ``activation`` ("relu", "relu6", "gelu", "silu", ...)
        Applied last.  "gelu" is the exact form ``x * Phi(x)`` (erf based, Keras'
        ``approximate=False``).
    alpha, beta : float
        Scale factors, rounded to float32.
    c : ndarray, optional
        Broadcastable to the result's shape; required when ``beta != 0`` and never read when
        ``beta == 0``.

    Returns
    -------
    ndarray
        ``out`` if given, else a new C-contiguous array of the result's shape (a numpy scalar
        when both operands are 1-D).

    Raises
    ------
    TypeError
        An operand, ``bias``, ``c`` or ``out`` that is not an ndarray; an unsupported dtype
        (integers, complex, float64, object); alpha/beta that are not real numbers.
    ValueError
        0-d operands; inner or batch dimensions that do not match; ``bias`` or ``c`` of the
        wrong shape; ``beta != 0`` without ``c``; an unknown activation; ``out`` of the wrong
        shape or dtype, read-only, or overlapping an input; a PackedMatrix whose panels do not
        suit the current level (packed before ``set_isa`` changed it).

    Notes
    -----
    Each element is the float32 sum of float32 products (exact for 16-bit inputs), accumulated
    in blocks of KC products; then ``alpha * s``, ``+ beta * c``, ``+ bias``, the activation
    (computed in double, rounded once to float32) and the output rounding.  Every element is
    within ``2 * k * 2**-24 * (|a| @ |b|)`` of the exact product of the given inputs.  Results
    are bit-identical for any number of threads and any alignment.  At the avx512bf16 level,
    bfloat16 @ bfloat16 runs on VDPBF16PS, which flushes subnormal inputs and results to zero;
    docs/gemm.md has the details.
    """
    a = _operand("a", a)
    packed = isinstance(b, PackedMatrix)
    if isinstance(b, PackedMatrix) and b.dtype == _I8:
        raise TypeError("matmul: b is an int8 PackedMatrix; int8 products are "
                        "kernels.matmul_int8")
    if not isinstance(b, PackedMatrix):
        b = _operand("b", b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must have at least 1 dimension, got shapes "
                         f"{a.shape} @ {b.shape}")
    a2 = a[np.newaxis, :] if a.ndim == 1 else a
    b2 = b if isinstance(b, PackedMatrix) else (b[:, np.newaxis] if b.ndim == 1 else b)
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    try:
        batch = () if a2.ndim == 2 and (packed or b2.ndim == 2) else \
            np.broadcast_shapes(a2.shape[:-2], () if packed else b2.shape[:-2])
    except ValueError:
        raise ValueError(f"matmul: batch dimensions do not broadcast: {a.shape} @ {b.shape}") \
            from None
    out_shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())

    if isinstance(activation, str) or activation is None:
        act = ACTIVATIONS.get(activation)
    else:
        act = None
    if act is None:
        raise ValueError(f"matmul: unknown activation {activation!r}; expected one of "
                         f"{[x for x in ACTIVATIONS if x is not None]} or None")
    for name, v in (("alpha", alpha), ("beta", beta)):
        if type(v) is not float and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
            raise TypeError(f"matmul: {name} must be a real number, got {type(v).__name__}")
    # rounded to float32 (the defaults 1.0 and 0.0 are float32 values already)
    # the compiled core rounds them to float32 (to nearest, whatever the caller's mode)
    if type(alpha) is not float or type(beta) is not float:
        try:
            alpha, beta = float(alpha), float(beta)
        except OverflowError:
            raise ValueError(f"matmul: alpha and beta must be finite float32 values, got "
                             f"alpha={repr(alpha)[:40]}, beta={repr(beta)[:40]}") from None
    if not (abs(alpha) <= _F32_MAX and abs(beta) <= _F32_MAX):
        raise ValueError(f"matmul: alpha and beta must be finite float32 values (|v| <= "
                         f"{_F32_MAX:g}), got alpha={alpha!r}, beta={beta!r}")
    beta32 = 0.0 if beta == 0.0 else _lib.round_f32(beta)

    if out_dtype is None:
        target = out.dtype if isinstance(out, np.ndarray) else _F32
        if isinstance(out, np.ndarray) and _code(out) is None:
            raise TypeError(f"matmul: unsupported out dtype {out.dtype}; supported: {GEMM_NAMES}")
    else:
        target = out_dtype_of("matmul", out_dtype)

    inputs = [a] if packed else [a, b]
    bias32 = None
    bias_stride = 0
    if bias is not None:
        bias32, bias_stride = product_bias("matmul", bias, n, GEMM_CODES, GEMM_NAMES,
                                           f" for {a.shape} @ {b.shape}")
        inputs.append(bias)

    if c is None and beta32 != 0:
        raise ValueError(f"matmul: beta = {beta} needs c")
    check_bytes("matmul", "the result", out_shape, target.itemsize)
    c32 = None
    if c is not None:
        if not isinstance(c, np.ndarray):
            raise TypeError(f"matmul: c must be a numpy.ndarray, got {type(c).__name__}")
        if _code(c) is None:
            raise TypeError(f"matmul: unsupported c dtype {c.dtype}; supported: {GEMM_NAMES}")
        try:
            np.broadcast_shapes(c.shape, out_shape)
            cb = np.broadcast_to(c, out_shape)
        except ValueError:
            raise ValueError(f"matmul: c has shape {c.shape}, which does not broadcast to the "
                             f"result shape {out_shape}") from None
        inputs.append(c)
        if beta32 != 0:
            if _code(cb) != GEMM_CODES[_F32]:
                cb = np.broadcast_to(c.astype(np.float32), out_shape)
            c32 = as_native(cb)

    if out is None:
        result = new_array("matmul", "the result", out_shape, target)
        work_out = result
    else:
        check_out("matmul", out, out_shape, target, inputs)
        result = out
        target = target.newbyteorder("=")          # a byte-swapped out is filled from a copy
        work_out = out if out.flags.aligned and out.dtype.isnative else np.empty(
            out_shape, dtype=target)

    if result.size:
        _run(a2, b2, work_out, c32, bias32, bias_stride, batch, m, n, k, a.ndim == 1,
             b.ndim == 1, GEMM_CODES[target], alpha, beta, act)
        if work_out is not result:
            result[...] = work_out
    if out is None and out_shape == ():
        return result[()]
    return result


def _as_matrix(x, batch, vec_a, vec_b):
    """View of an output-shaped array with the 1-D operands' axes restored: batch + (m, n)."""
    if vec_a:
        x = np.expand_dims(x, x.ndim - (0 if vec_b else 1))
    if vec_b:
        x = np.expand_dims(x, x.ndim)
    return x


# at most this many columns (and fewer than half as many as rows), C^T = B^T A^T is computed
# instead: the narrow side becomes the rows of the micro-tile rather than 8 of its 32 columns
_SWAP_MAX_N = 8


def _run(a2, b2, out, c32, bias32, bias_stride, batch, m, n, k, vec_a, vec_b, out_code, alpha,
         beta, act):
    packed = isinstance(b2, PackedMatrix)
    a_code, b_code = GEMM_CODES[a2.dtype], GEMM_CODES[b2.dtype]
    o_m = _as_matrix(out, batch, vec_a, vec_b)
    c_m = _as_matrix(c32, batch, vec_a, vec_b) if c32 is not None else None
    a_b = np.broadcast_to(a2, batch + (m, k)) if batch else a2
    b_b = b2
    if batch and not packed:
        b_b = np.broadcast_to(b2, batch + (k, n))
    if not packed and n <= _SWAP_MAX_N and m > 2 * n and bias_stride == 0:
        # Every element is the same sequence of FMAs either way (fma(a, b, s) == fma(b, a, s)),
        # so the swap changes no bit; the decision depends on the shape only.  A bias along
        # the columns would lie along the rows of the swapped product: not swapped then.
        a_b, b_b = np.swapaxes(b_b, -1, -2), np.swapaxes(a_b, -1, -2)
        o_m = np.swapaxes(o_m, -1, -2)
        c_m = np.swapaxes(c_m, -1, -2) if c_m is not None else None
        a_code, b_code, m, n = b_code, a_code, n, m
    offsets = None
    if batch:
        offsets = np.zeros((math.prod(batch), 4), dtype=np.int64)
        offsets[:, 0] = _batch_offsets(a_b, batch)
        if not packed:
            offsets[:, 1] = _batch_offsets(b_b, batch)
        offsets[:, 2] = _batch_offsets(o_m, batch)
        if c_m is not None:
            offsets[:, 3] = _batch_offsets(c_m, batch)
    c_strides = (c_m.strides[-2], c_m.strides[-1]) if c_m is not None else (0, 0)
    b_strides = (0, 0) if packed else (b_b.strides[-2], b_b.strides[-1])
    r = _lib.gemm_run(a_b, b_b, o_m, c_m, bias32, offsets, m, n, k,
                      (a_b.strides[-2], a_b.strides[-1]), b_strides,
                      (o_m.strides[-2], o_m.strides[-1]), c_strides, bias_stride, a_code, b_code,
                      out_code, alpha, beta, act)
    if r == _lib.GEMM_FORMAT_ERROR:
        raise ValueError(
            f"matmul: b was packed at level {b2.isa!r} ({_format_name(b2.format)}), which the "
            f"current level {ISA_LEVELS[_lib.get_level()]!r} cannot use for {a2.dtype} @ "
            f"{b2.dtype} (it packs {_format_name(_lib.gemm_pack_format(b_code))}); pack it "
            f"again with kernels.pack(b.unpack())")


def _format_name(fmt):
    pairs, elem, nr = fmt[:3]
    kind = "bfloat16 pairs" if pairs else ("16-bit panels" if elem == 2 else "float32 panels")
    return f"{kind} of {nr} columns"


def _is_int8(dtype):
    try:
        return np.dtype(dtype) == _I8
    except TypeError:
        return False


# the deepest K that pack(whole_k=True) keeps in one block
_WHOLE_K = 4096


def pack(b: ArrayLike, dtype: DTypeLike | None = None, *, whole_k: bool = False) -> PackedMatrix:
    """Pack a matrix once for ``matmul``, in the current level's panel layout.

    Parameters
    ----------
    b : array_like of shape (k, n)
        float16, bfloat16, float32 or float64; any strides.  An int8 ``b`` gives an int8
        PackedMatrix for ``matmul_int8`` (panels of 4 k per column word, with the column sums;
        k at most 131071).
    dtype : dtype-like, optional
        The dtype the product takes ``b`` in: float16, bfloat16 or float32.  Defaults to
        ``b``'s dtype (which must then be one of those three).  ``b`` is converted to it first,
        rounded once to nearest even, exactly as ``cast`` does: a float32 master weight packs
        straight to the bfloat16 a mixed_bfloat16 layer computes with.
    whole_k : bool, optional
        Keep all of K in one block when k is at most 4096 (the level's K block: 2048 for
        bfloat16 and 1024 for float32 and float16 at the AVX-512 levels, 512 at avx2, 256 at
        generic; docs/gemm.md): each tile's sums then stay in registers from the first step
        to the epilogue, never stored and read back between blocks.  What inference layers
        pack their kernels with (a BERT-base encoder's 3072-deep products, batch 8: about 5%
        faster).  The sums are then taken in one block where an unpacked ``matmul`` takes two
        or more: the same bits for k up to the level's block, within the GEMM's error bound
        beyond it.

    Returns
    -------
    PackedMatrix
        Immutable; ``shape`` (k, n), ``dtype``, ``nbytes`` (the memory its panels take),
        ``isa`` (the level that packed it) and ``unpack()`` (the matrix again).  Pass it as
        ``b`` to ``matmul``: every call then skips packing ``b``, with the same result bit for
        bit.

    Raises
    ------
    TypeError
        An unsupported dtype of ``b`` or ``dtype``.
    ValueError
        ``b`` that is not 2-D.

    Notes
    -----
    The panels suit the level current when packing.  After ``set_isa`` changes the level,
    ``matmul`` uses them where the format is the same (bfloat16 pairs are widened per call for
    float32 kernels of the same width) and otherwise raises a ValueError asking for a new
    ``pack``.  bfloat16 values with subnormals are packed as float32 panels (VDPBF16PS would
    read them as zero), so they are never lost.  The K block depth (KC) is fixed when packing.
    """
    if not isinstance(whole_k, (bool, np.bool_)):
        raise TypeError(f"pack: whole_k must be a bool, got {type(whole_k).__name__} "
                        f"{whole_k!r}")
    k = np.shape(b)[0] if whole_k and np.ndim(b) == 2 else 0
    return _pack(b, dtype, k if k <= _WHOLE_K else 0)


def _pack(b, dtype, kc_min):
    """pack, in K blocks at least ``kc_min`` deep (``pack_conv``: a convolution's K whole)."""
    if not isinstance(b, np.ndarray):
        b = np.asarray(b)
    if b.ndim != 2:
        raise ValueError(f"pack: b must be 2-D (k, n), got shape {b.shape}")
    if b.dtype == _I8 and (dtype is None or _is_int8(dtype)):
        if b.shape[0] > _lib.IGEMM_MAX_K:
            raise ValueError(f"pack: an int8 b has at most {_lib.IGEMM_MAX_K} rows (k), got "
                             f"{b.shape[0]}")
        return _lib.igemm_pack(b)
    if dtype is not None and _is_int8(dtype):
        raise TypeError(f"pack: dtype int8 needs an int8 b (got {b.dtype}); quantize first "
                        f"(kernels.quantize_rows)")
    if dtype is None:
        if _code(b) is None:
            raise TypeError(f"pack: unsupported dtype {b.dtype}; supported: {GEMM_NAMES} "
                            f"(or pass dtype= to convert)")
        target = b.dtype.newbyteorder("=")
    else:
        target = resolve_dtype("pack", dtype)
        if target not in GEMM_CODES:
            raise TypeError(f"pack: unsupported dtype {target}; supported: {GEMM_NAMES}")
        if float_code(b.dtype) is None:
            raise TypeError(f"pack: unsupported dtype {b.dtype} of b; supported: "
                            f"{GEMM_NAMES}, float64")
    if b.dtype != target:
        check_bytes("pack", f"b converted to {target}", b.shape, target.itemsize)
        b = cast(b, target)
    b = as_native(b)
    # a convolution's kernel: whether every value is finite (its taps outside the image may
    # then be left out: 0 * w is exactly 0)
    finite = kc_min > 0 and bool(np.isfinite(b).all())
    return _lib.gemm_pack(b, GEMM_CODES[target], target, kc_min, finite)
