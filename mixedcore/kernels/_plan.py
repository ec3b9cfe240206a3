"""Inference plans: a list of kernel calls over buffers, checked once and run by one C loop.

Design:
  a. A ``Plan`` is built step by step: each method checks its step as the kernel function of
     the same name checks a call (dtypes, shapes, the window geometry, packed weights) against
     the buffers it reads, then records the filled C descriptor (``_core/_plan.pxi``,
     ``src/plan/mc_plan.h``) and returns the buffer it writes.  A step computes exactly what the
     kernel function computes for the same arguments, bit for bit.
  b. Buffers are numbered.  ``input`` buffers are the arrays given to ``run``; the buffers
     ``finish`` names as outputs are new arrays on every run; a ``call`` step (any Python
     function of arrays, for what has no C step) binds its result; every other buffer is a
     piece of one arena allocated by ``finish``.  Pieces are placed by liveness: a buffer lives
     from the step that writes it to the last step that reads it, and two buffers share bytes
     only when their lives do not overlap (largest first, each at the lowest offset that
     fits).  ``reshape`` gives a view of a buffer under another shape, the same bytes.
  c. ``finish`` marks each pointwise product over images, the depthwise convolution of its
     output and the pointwise product of that -- MobileNetV2's expand -> depthwise -> project,
     the last with a residual or not -- whose two intermediates no other step reads, as one
     block (``src/plan/mc_plan.h``, design e: band by band of output rows in cache, the same
     bits), unless the plan was made with ``blocks=False``; the input of a block lives until
     its last step.
  d. ``run`` runs consecutive C steps as one range in the core without the GIL and the
     ``call`` steps between the ranges; nothing is allocated but the outputs (and what the
     ``call`` functions and the drivers' workspaces allocate).  A run takes an arena no other
     run is using -- another one is made when runs overlap in several threads -- and gives it
     back after; at most two are kept between runs.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import DTypeLike

from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels._checks import (BYTES_MAX, FLOAT_CODES, SUPPORTED_NAMES, check_bytes,
                                       out_dtype_of, resolve_dtype)
from mixedcore.kernels._conv import (PackedConv, _activation, _bias32, depthwise_kernel,
                                     depthwise_weights, pointwise)
from mixedcore.kernels._gemm import GEMM_CODES, GEMM_NAMES, PackedMatrix
from mixedcore.kernels._norm import norm_epsilon, norm_param
from mixedcore.kernels._pool import pool_geometry
from mixedcore.kernels._runtime import ISA_LEVELS
from mixedcore.kernels._window import IntPair, window_geometry

_F32 = np.dtype(np.float32)
_ALIGN = 64
# arenas kept for runs to come; more overlapping runs allocate their own and drop them after
_KEEP_ARENAS = 2

# buffer kinds
_ARENA, _INPUT, _OUTPUT, _BOUND = "arena", "input", "output", "bound"


class _Buffer:
    __slots__ = ("shape", "dtype", "kind", "root", "first", "last", "offset")

    def __init__(self, shape, dtype, kind, root, first):
        self.shape, self.dtype, self.kind, self.root = shape, dtype, kind, root
        self.first = self.last = first
        self.offset = None

    @property
    def nbytes(self):
        return math.prod(self.shape) * self.dtype.itemsize


class Plan:
    """A compiled list of kernel calls over buffers (see the module's design notes).

    Build it with ``input``, the step methods (``conv2d``, ``depthwise_conv2d``, ``matmul``,
    ``matmul_int8``, ``attention``, ``pool2d``, ``add``, ``layer_norm``, ``pad2d``, ``cast``,
    ``reshape``, ``call``), then ``finish(outputs)``; ``run(inputs)`` returns the outputs.  A
    step method returns the number of the buffer its result is in (``call``: a list of them).
    ``blocks=False`` runs every step on its own (design c).
    """

    def __init__(self, *, blocks: bool = True) -> None:
        self._core = _lib.PlanSteps()
        self._buffers: list[_Buffer] = []
        self._ops: list = []           # ("c", step index, method) or ("py", fn, srcs, dsts)
        self._inputs: list[int] = []
        self._outputs: list[int] | None = None
        self._segments: list = []
        self._arena_size: int | None = None
        self._free: list = []            # arenas no run is using: (arena, views)
        self._output_roots: list[int] = []
        self._views_of: dict[int, list[int]] = {}
        self._quantized_norms: set[int] = set()
        self._make_blocks = bool(blocks)
        self.blocks: list[int] = []      # the first steps of the blocks (design c)
        self._links: dict[int, tuple[int, int, int | None]] = {}   # op -> (src, dst, residual)
        self.level = ISA_LEVELS[_lib.get_level()]

    # -- buffers --------------------------------------------------------------------------------
    def _new(self, shape, dtype, kind, root=None):
        if self._outputs is not None:
            raise ValueError("Plan: the plan is finished; no step can be added")
        index = len(self._buffers)
        check_bytes("Plan", "a buffer", shape, np.dtype(dtype).itemsize)
        self._buffers.append(_Buffer(tuple(int(d) for d in shape), np.dtype(dtype), kind,
                                     index if root is None else root, len(self._ops)))
        return index

    def _lookup(self, fname, index):
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or \
                not 0 <= index < len(self._buffers):
            raise ValueError(f"{fname}: no buffer {index!r} in this plan "
                             f"({len(self._buffers)} buffers)")
        return self._buffers[index]

    def _read(self, fname, index):
        """The buffer a step about to be added reads: its life lasts until that step."""
        buf = self._lookup(fname, index)
        root = self._buffers[buf.root]
        root.last = max(root.last, len(self._ops))
        return buf

    def input(self, shape: Sequence[int], dtype: DTypeLike) -> int:
        """A buffer given to every run (in the order of the ``input`` calls)."""
        dt = np.dtype(dtype)
        shape = _shape("Plan.input", shape)
        index = self._new(shape, dt, _INPUT)
        self._inputs.append(index)
        return index

    def shape(self, index: int) -> tuple[int, ...]:
        return self._lookup("Plan.shape", index).shape

    def dtype(self, index: int) -> np.dtype:
        return self._lookup("Plan.dtype", index).dtype

    # -- steps ----------------------------------------------------------------------------------
    def _c_step(self, dst, method):
        """Records the C step just added to the core (by ``method``; it writes ``dst``)."""
        self._buffers[dst].first = len(self._ops)
        self._ops.append(("c", len(self._core) - 1, method))

    def _gemm_operand(self, fname, index):
        buf = self._read(fname, index)
        if buf.dtype not in GEMM_CODES:
            raise TypeError(f"{fname}: buffer {index} has dtype {buf.dtype}; supported: "
                            f"{GEMM_NAMES}")
        return buf

    def _residual(self, fname, residual, shape, dtype):
        """The number of a residual buffer of the output's shape and dtype, or -1."""
        if residual is None:
            return -1
        buf = self._read(fname, residual)
        if buf.shape != shape or buf.dtype != dtype:
            raise ValueError(f"{fname}: the residual (buffer {residual}, {buf.shape} "
                             f"{buf.dtype}) must have the output's shape and dtype, "
                             f"{shape} {dtype}")
        return residual

    def matmul(self, src: int, b: PackedMatrix, *, bias: np.ndarray | None = None,
               activation: str | None = None, out_dtype: DTypeLike | None = None,
               residual: int | None = None) -> int:
        """``activation(src @ b + bias)`` over the last axis of ``src``, as ``kernels.matmul``
        with a packed ``b`` computes it.  With a ``residual`` buffer (the output's shape and
        dtype): ``activation(y + residual)`` where ``y = src @ b + bias`` in ``out_dtype``, as
        the product then ``add`` give it, without storing ``y``."""
        fname = "Plan.matmul"
        buf = self._gemm_operand(fname, src)
        if not isinstance(b, PackedMatrix):
            raise TypeError(f"{fname}: b must be a PackedMatrix, got {type(b).__name__}")
        if b.dtype == np.dtype(np.int8):
            raise TypeError(f"{fname}: b is an int8 PackedMatrix, which matmul_int8 takes; a "
                            f"plan's products take float16, bfloat16 or float32 ones")
        k, n = b.shape
        if not buf.shape or buf.shape[-1] != k:
            raise ValueError(f"{fname}: buffer {src} of shape {buf.shape} cannot multiply b of "
                             f"shape {b.shape}")
        _check_packed(fname, b)
        act = _activation(fname, activation)
        target = out_dtype_of(fname, out_dtype)
        bias32 = _bias32(fname, bias, n)
        res = self._residual(fname, residual, buf.shape[:-1] + (n,), target)
        dst = self._new(buf.shape[:-1] + (n,), target, _ARENA)
        m = math.prod(buf.shape[:-1])
        if m and n:
            self._core.gemm(src, dst, b, m, GEMM_CODES[buf.dtype], GEMM_CODES[target], bias32,
                            act, res)
            self._links[len(self._ops)] = (src, dst, residual)
            self._c_step(dst, "matmul")
        return dst

    def matmul_int8(self, src: int, b: PackedMatrix, b_scale: np.ndarray, *,
                    bias: np.ndarray | None = None, activation: str | None = None,
                    out_dtype: DTypeLike | None = None, zero_point: bool = False) -> int:
        """The int8 product of ``src``'s rows quantized on the way: ``kernels.quantize_rows``
        of ``src`` (float16, bfloat16 or float32, over its last axis; with ``zero_point``,
        its min-max codes and their zero points, multiplied with ``a_zero``), then
        ``kernels.matmul_int8`` with the packed int8 ``b`` (k, n), its column scales
        ``b_scale`` (float32, (n,)), ``bias`` and ``activation``, rounded to ``out_dtype``
        (float32 by default) -- the calls of Keras's int8 Dense, the same bits.  The quantized
        rows and their scales are buffers of the step's own; when the step just before is the
        ``layer_norm`` that wrote ``src``'s rows, that step fills them (band by band, right
        after normalizing) and this one multiplies only."""
        fname = "Plan.matmul_int8"
        buf = self._gemm_operand(fname, src)
        if not isinstance(b, _lib.PackedInt8Matrix):
            raise TypeError(f"{fname}: b must be an int8 PackedMatrix (kernels.pack of an int8 "
                            f"matrix), got {type(b).__name__}"
                            f"{'' if not isinstance(b, PackedMatrix) else ' of ' + str(b.dtype)}")
        k, n = b.shape
        if not buf.shape or buf.shape[-1] != k:
            raise ValueError(f"{fname}: buffer {src} of shape {buf.shape} cannot multiply b of "
                             f"shape {b.shape}")
        if not isinstance(zero_point, (bool, np.bool_)):
            raise TypeError(f"{fname}: zero_point must be a bool, got "
                            f"{type(zero_point).__name__}: {zero_point!r}")
        limit = _lib.IGEMM_MAX_K_ZP if zero_point else _lib.IGEMM_MAX_K
        if k > limit:
            raise ValueError(f"{fname}: k = {k} is above {limit}, the largest k whose int32 "
                             f"sums cannot overflow{' with zero points' if zero_point else ''}")
        _check_packed(fname, b)
        if not isinstance(b_scale, np.ndarray) or b_scale.dtype != _F32 or \
                b_scale.shape != (n,):
            raise ValueError(f"{fname}: b_scale must be a float32 array of shape ({n},), got "
                             f"{getattr(b_scale, 'dtype', type(b_scale).__name__)} "
                             f"{getattr(b_scale, 'shape', '')}".rstrip())
        act = _activation(fname, activation)
        target = out_dtype_of(fname, out_dtype)
        bias32 = _bias32(fname, bias, n)
        m = math.prod(buf.shape[:-1])
        q = self._new((m, k), np.int8, _ARENA)
        scale32 = self._new((m,), _F32, _ARENA)
        # min-max codes: float32 scales straight into scale32, and the zero points
        scale = scale32 if zero_point else self._new((m,), buf.dtype, _ARENA)
        zero = self._new((m,), np.int32, _ARENA) if zero_point else -1
        mine = [i for i in (q, scale, scale32, zero) if i >= 0]
        dst = self._new(buf.shape[:-1] + (n,), target, _ARENA)
        if m and n:
            norm = self._claim_quantizing_norm(src)
            if norm is not None:       # that step quantizes the rows (mc_plan.h, design d)
                self._core.quantize_after(self._ops[norm][1], q, scale, scale32, zero)
                for i in mine:
                    self._buffers[i].first = norm
            self._core.igemm(src, dst, b, m, GEMM_CODES[buf.dtype], GEMM_CODES[target],
                             np.ascontiguousarray(b_scale), bias32, act, q, scale, scale32,
                             norm is not None, zero)
            self._c_step(dst, "matmul_int8")
        return dst

    def _claim_quantizing_norm(self, src):
        """The index of the op before this one when it is a layer normalization step that
        wrote the buffer ``src`` (or the buffer it is a view of) and quantizes no rows yet --
        recorded as quantizing them from now on --, else None."""
        if not self._ops:
            return None
        last = len(self._ops) - 1
        op = self._ops[last]
        root = self._buffers[self._buffers[src].root]
        if op[0] != "c" or op[2] != "layer_norm" or root.first != last or \
                self._buffers[src].shape[-1] != root.shape[-1] or last in self._quantized_norms:
            return None
        self._quantized_norms.add(last)
        return last

    def attention(self, src: int, *, heads: int, key_dim: int, value_dim: int, scale: float,
                  causal: bool = False) -> int:
        """Self-attention over the projections side by side in ``src`` (B, T, heads * (2 *
        key_dim + value_dim)): the queries (heads, key_dim), the keys (heads, key_dim), then the
        values (heads, value_dim) of each position, as MultiHeadAttention's one product writes
        them.  ``kernels.attention`` of their (B, heads, T, .) views with ``scale`` (and the
        causal mask), into (B, T, heads * value_dim) of ``src``'s dtype, the same bits."""
        fname = "Plan.attention"
        buf = self._gemm_operand(fname, src)
        for name, value in (("heads", heads), ("key_dim", key_dim), ("value_dim", value_dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{fname}: {name} must be a positive int, got {value!r}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or \
                not math.isfinite(scale):
            raise ValueError(f"{fname}: scale must be a finite real number, got {scale!r}")
        if not isinstance(causal, (bool, np.bool_)):
            raise TypeError(f"{fname}: causal must be a bool, got {type(causal).__name__}")
        width = heads * (2 * key_dim + value_dim)
        if len(buf.shape) != 3 or buf.shape[-1] != width:
            raise ValueError(f"{fname}: buffer {src} of shape {buf.shape} is not (B, T, "
                             f"{width}): heads {heads} x (2 x key_dim {key_dim} + value_dim "
                             f"{value_dim})")
        b, t, _ = buf.shape
        es = buf.dtype.itemsize
        dst = self._new((b, t, heads * value_dim), buf.dtype, _ARENA)
        if b and t:
            row, out_row = width * es, heads * value_dim * es
            q_st = (t * row, key_dim * es, row, es)
            v_st = (t * row, value_dim * es, row, es)
            o_st = (t * out_row, value_dim * es, out_row, es)
            self._core.attention(src, dst, (b, heads, t, t, key_dim, value_dim),
                                 (0, heads * key_dim * es, 2 * heads * key_dim * es), q_st, q_st,
                                 v_st, o_st, GEMM_CODES[buf.dtype], _lib.round_f32(float(scale)),
                                 bool(causal))
            self._c_step(dst, "attention")
        return dst

    def conv2d(self, src: int, kernel: PackedConv, *, strides: IntPair = 1,
               padding="valid", dilation_rate: IntPair = 1, bias: np.ndarray | None = None,
               activation: str | None = None, out_dtype: DTypeLike | None = None,
               residual: int | None = None) -> int:
        """A convolution as ``kernels.conv2d`` computes it with a ``PackedConv``; a
        ``residual`` buffer is added as ``matmul`` adds it."""
        fname = "Plan.conv2d"
        buf = self._gemm_operand(fname, src)
        if not isinstance(kernel, PackedConv):
            raise TypeError(f"{fname}: kernel must be a PackedConv, got {type(kernel).__name__}")
        if len(buf.shape) != 4:
            raise ValueError(f"{fname}: buffer {src} must have shape (batch, height, width, "
                             f"channels), got {buf.shape}")
        kh, kw, cg, f = kernel.kernel_shape
        groups = kernel.groups
        if buf.shape[3] != cg * groups:
            raise ValueError(f"{fname}: buffer {src} has {buf.shape[3]} channels; a kernel of "
                             f"shape {kernel.kernel_shape} with groups={groups} needs "
                             f"{cg * groups}")
        for m in kernel.matrices:
            _check_packed(fname, m)
        geom = window_geometry(fname, buf.shape, (kh, kw), strides, padding, dilation_rate)
        act = _activation(fname, activation)
        target = out_dtype_of(fname, out_dtype)
        bias32 = _bias32(fname, bias, f)
        if pointwise((kh, kw), groups, geom):
            # pointwise: the product of the pixels with the kernel, as kernels.conv2d runs it
            return self.matmul(src, kernel.matrices[0], bias=bias32, activation=activation,
                               out_dtype=target, residual=residual)
        shape = (geom[0], geom[12], geom[13], f)
        res = self._residual(fname, residual, shape, target)
        dst = self._new(shape, target, _ARENA)
        if math.prod(shape):
            self._core.conv(src, dst, tuple(kernel.matrices), geom, groups, f,
                            GEMM_CODES[buf.dtype], GEMM_CODES[target], bias32, act, res)
            self._c_step(dst, "conv2d")
        return dst

    def depthwise_conv2d(self, src: int, kernel: np.ndarray, *, strides: IntPair = 1,
                         padding="valid", dilation_rate: IntPair = 1,
                         bias: np.ndarray | None = None, activation: str | None = None,
                         out_dtype: DTypeLike | None = None) -> int:
        """A depthwise convolution as ``kernels.depthwise_conv2d`` computes it (float16,
        bfloat16 or float32 buffers; the kernel taken as float32 values)."""
        fname = "Plan.depthwise_conv2d"
        buf = self._gemm_operand(fname, src)
        kh, kw, c, mult = depthwise_kernel(fname, kernel, buf.shape).shape
        geom = window_geometry(fname, buf.shape, (kh, kw), strides, padding, dilation_rate)
        act = _activation(fname, activation)
        target = out_dtype_of(fname, out_dtype)
        w = depthwise_weights(kernel, _F32)
        bias32 = _bias32(fname, bias, c * mult)
        dst = self._new((geom[0], geom[12], geom[13], c * mult), target, _ARENA)
        if math.prod(self._buffers[dst].shape):
            self._core.depthwise(src, dst, w, bias32, geom, mult, FLOAT_CODES[buf.dtype],
                                 FLOAT_CODES[target], act)
            self._links[len(self._ops)] = (src, dst, None)
            self._c_step(dst, "depthwise_conv2d")
        return dst

    def pool2d(self, src: int, pool_size: IntPair, *, strides: IntPair | None = None,
               padding: str = "valid", mode: str = "max") -> int:
        """Pooling as ``kernels.pool2d`` computes it."""
        fname = "Plan.pool2d"
        buf = self._gemm_operand(fname, src)
        if len(buf.shape) != 4:
            raise ValueError(f"{fname}: buffer {src} must have shape (batch, height, width, "
                             f"channels), got {buf.shape}")
        op, geom = pool_geometry(fname, buf.shape, pool_size, strides, padding, mode)
        dst = self._new((geom[0], geom[12], geom[13], geom[3]), buf.dtype, _ARENA)
        if math.prod(self._buffers[dst].shape):
            self._core.pool(src, dst, geom, op, FLOAT_CODES[buf.dtype])
            self._c_step(dst, "pool2d")
        return dst

    def add(self, a: int, b: int, *, activation: str | None = None,
            out_dtype: DTypeLike | None = None) -> int:
        """``activation(a + b)`` of two buffers of one shape, as ``kernels.add``."""
        fname = "Plan.add"
        ba, bb = self._gemm_operand(fname, a), self._gemm_operand(fname, b)
        if ba.shape != bb.shape:
            raise ValueError(f"{fname}: buffers {a} and {b} have shapes {ba.shape} and "
                             f"{bb.shape}; they must be equal")
        act = _activation(fname, activation)
        target = out_dtype_of(fname, out_dtype)
        dst = self._new(ba.shape, target, _ARENA)
        n = math.prod(ba.shape)
        if n:
            self._core.add(a, b, dst, n, act, GEMM_CODES[ba.dtype], GEMM_CODES[bb.dtype],
                           GEMM_CODES[target])
            self._c_step(dst, "add")
        return dst

    def layer_norm(self, src: int, gamma: np.ndarray | None = None,
                   beta: np.ndarray | None = None, *, epsilon: float = 1e-3,
                   residual: int | None = None, out_dtype: DTypeLike | None = None) -> int:
        """Layer normalization over the last axis of ``src`` (of ``src + residual`` when a
        residual buffer of its shape is given), as ``kernels.layer_norm`` computes it."""
        fname = "Plan.layer_norm"
        buf = self._gemm_operand(fname, src)
        if not buf.shape or buf.shape[-1] == 0:
            raise ValueError(f"{fname}: the last axis of buffer {src} (shape {buf.shape}) is "
                             f"empty or missing; there is nothing to normalize over")
        c = buf.shape[-1]
        eps = norm_epsilon(fname, epsilon)
        gamma = norm_param(fname, "gamma", gamma, c)
        beta = norm_param(fname, "beta", beta, c)
        res, res_code = -1, 0
        if residual is not None:
            rbuf = self._gemm_operand(fname, residual)
            if rbuf.shape != buf.shape:
                raise ValueError(f"{fname}: the residual (buffer {residual}) has shape "
                                 f"{rbuf.shape}, buffer {src} {buf.shape}; they must be equal")
            res, res_code = residual, GEMM_CODES[rbuf.dtype]
        target = out_dtype_of(fname, out_dtype, buf.dtype)
        dst = self._new(buf.shape, target, _ARENA)
        rows = math.prod(buf.shape[:-1])
        if rows:
            self._core.layer_norm(src, res, dst, rows, c, GEMM_CODES[buf.dtype], res_code,
                                  GEMM_CODES[target], gamma, beta, eps)
            self._c_step(dst, "layer_norm")
        return dst

    def pad2d(self, src: int, padding: tuple[tuple[int, int], tuple[int, int]]) -> int:
        """The images of ``src`` (batch, height, width, channels) with zeros around them:
        ``padding`` is ((top, bottom), (left, right)) rows and columns, as ZeroPadding2D's."""
        fname = "Plan.pad2d"
        buf = self._read(fname, src)
        if len(buf.shape) != 4:
            raise ValueError(f"{fname}: buffer {src} must have shape (batch, height, width, "
                             f"channels), got {buf.shape}")
        try:
            (top, bottom), (left, right) = padding
        except (TypeError, ValueError):
            raise ValueError(f"{fname}: padding must be ((top, bottom), (left, right)), got "
                             f"{padding!r}") from None
        pads = (top, bottom, left, right)
        if any(isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 0
               for p in pads):
            raise ValueError(f"{fname}: padding must be non-negative ints, got {padding!r}")
        t, b, le, r = (int(p) for p in pads)
        n, h, w, c = buf.shape
        dst = self._new((n, h + t + b, w + le + r, c), buf.dtype, _ARENA)
        if math.prod(self._buffers[dst].shape):
            self._core.pad(src, dst, (n, h, w, c), (t, b, le, r), buf.dtype.itemsize)
            self._c_step(dst, "pad2d")
        return dst

    def cast(self, src: int, dtype: DTypeLike) -> int:
        """The buffer converted to ``dtype`` (float16, bfloat16, float32 or float64), as
        ``kernels.cast`` converts it."""
        fname = "Plan.cast"
        buf = self._read(fname, src)
        target = resolve_dtype(fname, dtype)
        if buf.dtype not in FLOAT_CODES:
            raise TypeError(f"{fname}: buffer {src} has dtype {buf.dtype}; supported: "
                            f"{SUPPORTED_NAMES}")
        dst = self._new(buf.shape, target, _ARENA)
        n = math.prod(buf.shape)
        if n:
            self._core.cast(src, dst, n, FLOAT_CODES[buf.dtype], FLOAT_CODES[target])
            self._c_step(dst, "cast")
        return dst

    def reshape(self, src: int, shape: Sequence[int]) -> int:
        """The buffer under another shape (the same elements, the same bytes)."""
        buf = self._read("Plan.reshape", src)
        shape = _shape("Plan.reshape", shape)
        if math.prod(shape) != math.prod(buf.shape):
            raise ValueError(f"Plan.reshape: cannot reshape buffer {src} of shape {buf.shape} "
                             f"into {shape}")
        return self._new(shape, buf.dtype, buf.kind if buf.kind != _OUTPUT else _ARENA,
                         root=buf.root)

    def call(self, fn: Callable[..., Sequence[np.ndarray]], srcs: Sequence[int],
             outputs: Sequence[tuple[Sequence[int], DTypeLike]]) -> list[int]:
        """A step in Python: ``fn(*arrays of srcs)`` returns a sequence of arrays, one per
        ``(shape, dtype)`` of ``outputs`` (checked on every run); the buffers they are bound to
        are returned."""
        if not callable(fn):
            raise TypeError(f"Plan.call: fn must be callable, got {type(fn).__name__}")
        srcs = [int(s) for s in srcs]
        for s in srcs:
            self._read("Plan.call", s)
        dsts = [self._new(_shape("Plan.call", shape), np.dtype(dtype), _BOUND)
                for shape, dtype in outputs]
        self._ops.append(("py", fn, srcs, dsts))
        return dsts

    # -- finishing and running -----------------------------------------------------------------
    def finish(self, outputs: Sequence[int]) -> None:
        """Ends the plan: ``outputs`` are returned by ``run`` (new arrays on every run); places
        the other buffers in the arena."""
        if self._outputs is not None:
            raise ValueError("Plan.finish: the plan is already finished")
        outputs = [int(o) for o in outputs]
        for o in outputs:
            self._read("Plan.finish", o)
        end = len(self._ops)
        for o in outputs:
            root = self._buffers[self._buffers[o].root]
            root.last = end
            if root.kind == _ARENA:
                root.kind = _OUTPUT
        self._outputs = outputs
        if self._make_blocks:
            self._fuse_blocks()
        self._place()
        self._segments = self._cut()
        # what a run binds: the outputs' roots (new arrays) and, per root outside the arena,
        # the buffers that are views of it
        self._output_roots = [i for i, b in enumerate(self._buffers)
                              if b.root == i and b.kind == _OUTPUT]
        self._views_of = {}
        for i, b in enumerate(self._buffers):
            if b.root != i and self._buffers[b.root].kind != _ARENA:
                self._views_of.setdefault(b.root, []).append(i)

    def _fuse_blocks(self) -> None:
        """Design c: marks the blocks in the core, each block's input kept until its end."""
        k = 0
        while k + 2 < len(self._ops):
            if self._block_at(k):
                self._core.fuse_block(self._ops[k][1])
                self.blocks.append(k)
                x = self._buffers[self._buffers[self._links[k][0]].root]
                x.last = max(x.last, k + 2)
                k += 3
            else:
                k += 1

    def _block_at(self, k):
        ops = self._ops[k:k + 3]
        if [op[0] for op in ops] != ["c"] * 3 or \
                [op[2] for op in ops] != ["matmul", "depthwise_conv2d", "matmul"] or \
                [op[1] for op in ops] != [ops[0][1], ops[0][1] + 1, ops[0][1] + 2]:
            return False
        (x, e, e_res), (d_src, d, _), (p_src, _, _) = (self._links[k + i] for i in range(3))
        if e_res is not None or len(self._buffers[x].shape) != 4:
            return False
        for i, (made, read) in enumerate(((e, d_src), (d, p_src))):
            buf = self._buffers[made]
            if made != read or buf.root != made or buf.kind != _ARENA or buf.last != k + i + 1:
                return False
        return True

    def _place(self) -> None:
        roots = [b for i, b in enumerate(self._buffers) if b.root == i and b.kind == _ARENA]
        placed: list[_Buffer] = []
        size = 0
        for buf in sorted(roots, key=lambda b: (-b.nbytes, b.first)):
            need = -(-buf.nbytes // _ALIGN) * _ALIGN
            busy = sorted((p.offset, p.offset + -(-p.nbytes // _ALIGN) * _ALIGN) for p in placed
                          if p.first <= buf.last and buf.first <= p.last)
            offset = 0
            for lo, hi in busy:
                if offset + need <= lo:
                    break
                offset = max(offset, hi)
            buf.offset = offset
            placed.append(buf)
            size = max(size, offset + need)
        if size > BYTES_MAX:
            raise ValueError(f"Plan.finish: the arena would need {size} bytes, more than the "
                             f"{BYTES_MAX} a process can address")
        self._arena_size = size
        self._free.append(self._new_arena())

    def _new_arena(self):
        """An arena and the views of the buffers in it (None for the others)."""
        arena = np.empty(self._arena_size + _ALIGN, np.uint8)
        base = (-arena.ctypes.data) % _ALIGN
        views = []
        for buf in self._buffers:
            root = self._buffers[buf.root]
            if root.kind == _ARENA:
                start = base + root.offset
                views.append(arena[start:start + buf.nbytes].view(buf.dtype).reshape(buf.shape))
            else:
                views.append(None)
        return arena, views

    def _cut(self):
        segments, start = [], None
        for op in self._ops:
            if op[0] == "c":
                if start is None:
                    start = op[1]
                end = op[1] + 1
            else:
                if start is not None:
                    segments.append(("c", start, end))
                    start = None
                segments.append(op)
        if start is not None:
            segments.append(("c", start, end))
        return segments

    @property
    def nbytes(self) -> int:
        """Bytes of the arena (the buffers between the steps; not the outputs or the weights)."""
        return 0 if self._arena_size is None else self._arena_size + _ALIGN

    def __len__(self):
        return len(self._ops)

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The outputs for ``inputs`` (one array per ``input`` buffer, of its shape and dtype;
        made C-contiguous when not)."""
        fname = "Plan.run"
        if self._outputs is None:
            raise ValueError(f"{fname}: finish the plan first")
        if len(inputs) != len(self._inputs):
            raise ValueError(f"{fname}: the plan takes {len(self._inputs)} inputs, got "
                             f"{len(inputs)}")
        for index, x in zip(self._inputs, inputs):
            buf = self._buffers[index]
            if not isinstance(x, np.ndarray) or x.shape != buf.shape or x.dtype != buf.dtype:
                raise ValueError(f"{fname}: input {index} must be an array of shape {buf.shape} "
                                 f"and dtype {buf.dtype}, got "
                                 f"{getattr(x, 'shape', type(x).__name__)} "
                                 f"{getattr(x, 'dtype', '')}".rstrip())
        try:            # an arena of its own: runs in other threads use others
            arena, views = self._free.pop()
        except IndexError:
            arena, views = self._new_arena()
        try:
            return self._run(inputs, arena, list(views))
        finally:
            if len(self._free) < _KEEP_ARENAS:
                self._free.append((arena, views))

    def _run(self, inputs, arena, arrays):
        fname = "Plan.run"
        for index, x in zip(self._inputs, inputs):
            arrays[index] = np.ascontiguousarray(x)
            self._bind_views(arrays, index)
        for i in self._output_roots:
            buf = self._buffers[i]
            arrays[i] = np.empty(buf.shape, buf.dtype)
            self._bind_views(arrays, i)
        for seg in self._segments:
            if seg[0] == "c":
                status, failed = self._core.run(seg[1], seg[2], arrays)
                if status:
                    self._fail(status, failed)
            else:
                _, fn, srcs, dsts = seg
                results = fn(*[arrays[s] for s in srcs])
                if not isinstance(results, (list, tuple)) or len(results) != len(dsts):
                    raise ValueError(f"{fname}: a call step must return a list of "
                                     f"{len(dsts)} arrays, got {type(results).__name__}")
                for dst, result in zip(dsts, results):
                    arrays[dst] = self._bound(result, dst, arena)
                    self._bind_views(arrays, dst)
        return [arrays[o] for o in self._outputs]

    def _bind_views(self, arrays, root):
        """The buffers that are views of ``root`` (a buffer outside the arena), from its array."""
        for i in self._views_of.get(root, ()):
            arrays[i] = arrays[root].reshape(self._buffers[i].shape)

    def _bound(self, result, dst, arena):
        buf = self._buffers[dst]
        if not isinstance(result, np.ndarray) or result.shape != buf.shape or \
                result.dtype != buf.dtype:
            raise ValueError(f"Plan.run: a call step returned "
                             f"{getattr(result, 'shape', type(result).__name__)} "
                             f"{getattr(result, 'dtype', '')} where the plan expects shape "
                             f"{buf.shape} and dtype {buf.dtype}")
        if np.may_share_memory(result, arena):
            return result.copy()            # a view of the arena would be overwritten
        return np.ascontiguousarray(result)

    def _fail(self, status, failed):
        if status == _lib.PLAN_FORMAT:
            raise ValueError(f"Plan.run: step {failed} holds weights packed at level "
                             f"{self.level!r}, which the current level "
                             f"{ISA_LEVELS[_lib.get_level()]!r} cannot use; build the plan "
                             f"again")
        if status == _lib.PLAN_TOOBIG:
            raise ValueError(f"Plan.run: step {failed} would need work buffers larger than "
                             f"{BYTES_MAX} bytes")
        raise MemoryError(f"Plan.run: step {failed} could not allocate its work buffers")


def _shape(fname, shape):
    """``shape`` as a tuple of non-negative ints."""
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"{fname}: a shape must be a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"{fname}: negative dimension in shape {dims}")
    return dims


def _check_packed(fname, packed):
    if packed.stale:
        raise ValueError(f"{fname}: the weights were packed at level {packed.isa!r} with other "
                         f"panels than the current level uses; pack them again")
