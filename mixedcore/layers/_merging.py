"""Merging layers: Add, Subtract, Multiply, Average, Maximum, Minimum, Concatenate, and Keras's
functional forms (add, subtract, ...).

Each takes a list of arrays.  The elementwise ones broadcast as Keras does: an input of lower rank
gets axes inserted after the batch axis until the ranks agree, then dimensions of 1 broadcast.
Every input is cast to the compute dtype (integers too); the arithmetic runs in float32 (float64
under float64) and the result is rounded once to the compute dtype, so a sum of several 16-bit
inputs is rounded once, not after each addition.  ``backward(dy)`` returns a list of gradients
aligned with the inputs, each in its input's shape (broadcast dimensions summed) and the compute
dtype.
"""
from typing import Any, Callable

import numpy as np

from mixedcore import activations as _activations

from mixedcore._dtypes import to_compute, work_dtype
from mixedcore.layers._base import Layer

__all__ = ["Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate", "add",
           "subtract", "multiply", "average", "maximum", "minimum", "concatenate"]


def _is_shape_list(shapes):
    return isinstance(shapes, (list, tuple)) and all(
        isinstance(s, (list, tuple)) and all(d is None or isinstance(d, (int, np.integer))
                                             for d in s) for s in shapes)


def _unbroadcast(g, shape):
    """Sum ``g`` down to ``shape`` (numpy broadcasting in reverse)."""
    extra = g.ndim - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, (d, e) in enumerate(zip(shape, g.shape)) if d == 1 and e != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


class _Merge(Layer):
    """Base of the elementwise merging layers."""

    _exactly: "int | None" = None      # number of inputs required (None: at least one)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._train_cache = None

    def _owner(self):
        return f"{type(self).__name__} '{self.name}'"

    def _check_list(self, shapes):
        owner = self._owner()
        if not _is_shape_list(shapes) or not shapes:
            raise ValueError(f"{owner}: a merging layer is called on a list of inputs, received "
                             f"input shape {shapes!r}")
        if self._exactly is not None and len(shapes) != self._exactly:
            raise ValueError(f"{owner}: takes exactly {self._exactly} inputs, received "
                             f"{len(shapes)} (shapes {list(shapes)})")
        if any(len(s) < 1 for s in shapes):
            raise ValueError(f"{owner}: every input needs a batch dimension, received shapes "
                             f"{list(shapes)}")
        batches = {s[0] for s in shapes} - {None}
        if len(batches) > 1:
            raise ValueError(f"{owner}: cannot merge inputs with different batch sizes, "
                             f"received shapes {list(shapes)}")

    def _elementwise_shape(self, a, b):
        """Keras's broadcast of two shapes without the batch dimension."""
        if len(a) < len(b):
            a, b = b, a
        if not b:
            return tuple(a)
        out = list(a[:len(a) - len(b)])
        for i, j in zip(a[len(a) - len(b):], b):
            if i is None or j is None:
                out.append(None)
            elif i == 1:
                out.append(j)
            elif j == 1 or i == j:
                out.append(i)
            else:
                raise ValueError(f"{self._owner()}: inputs have incompatible shapes {a} and {b} "
                                 f"(without the batch dimension)")
        return tuple(out)

    def compute_output_shape(self, input_shape):
        self._check_list(input_shape)
        out = tuple(input_shape[0][1:])
        for s in input_shape[1:]:
            out = self._elementwise_shape(out, tuple(s[1:]))
        batches = {s[0] for s in input_shape} - {None}
        return (batches.pop() if batches else None,) + out

    def build(self, input_shape):
        self.compute_output_shape(input_shape)

    def check_input_shape(self, shape):
        self.compute_output_shape(shape)
        if len(shape) != len(self.input_shape):
            raise ValueError(f"{self._owner()}: built for {len(self.input_shape)} inputs, "
                             f"received {len(shape)}")

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def _inputs(self, inputs):
        """The inputs in the compute dtype, expanded to one rank (axes inserted at 1)."""
        if not isinstance(inputs, (list, tuple)):
            raise ValueError(f"{self._owner()}: a merging layer is called on a list of inputs, "
                             f"received {type(inputs).__name__}")
        cd = self._compute_np()
        xs = [to_compute(x, cd) if x.dtype != cd else x for x in inputs]
        rank = max(x.ndim for x in xs)
        expanded = []
        for x in xs:
            e = x
            while e.ndim < rank:
                e = np.expand_dims(e, 1)
            expanded.append(e)
        return xs, expanded, cd

    def _merged(self, inputs):
        """(inputs in the compute dtype, the inputs and the merge in the work dtype, the
        compute dtype)."""
        xs, expanded, cd = self._inputs(inputs)
        w = work_dtype(cd)
        xw = [to_compute(x, w) for x in expanded]
        with np.errstate(over="ignore", invalid="ignore"):
            yw = self._merge(xw)
        return xs, xw, yw, cd

    def call(self, inputs, training=False):
        xs, xw, yw, cd = self._merged(inputs)
        if training:
            self._train_cache = (xw, yw, [x.shape for x in xs], cd)
        return to_compute(yw, cd)

    def call_activated(self, inputs, activation):
        """Inference of ``activation(self(inputs))`` with one rounding to the compute dtype: the
        activation (one of ``activations.FUSED``) is applied to the merged values in the work
        dtype (a model runs an Add followed by a ReLU so, docs/models.md "Folding")."""
        _, _, yw, cd = self._merged(inputs)
        return _activations.forward_to(activation, yw, cd)

    def backward(self, dy, need_input_grad=True):
        xw, yw, shapes, cd = self._train_cache
        self.gradients = []
        if not need_input_grad:
            return None
        dyw = to_compute(np.asarray(dy), yw.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            grads = self._grads(dyw, xw, yw)
        out = []
        for g, x, shape in zip(grads, xw, shapes):
            g = np.broadcast_to(g, yw.shape)
            out.append(to_compute(np.ascontiguousarray(_unbroadcast(g, x.shape)).reshape(shape),
                                  cd))
        return out

    def compute_mask(self, inputs, mask=None):
        """Keras's: the "or" of the inputs' masks when every input has one, else None."""
        if mask is None or not isinstance(mask, (list, tuple)):
            return None
        if any(m is None for m in mask):
            return None
        out = np.asarray(mask[0], dtype=bool)
        for m in mask[1:]:
            out = out | np.asarray(m, dtype=bool)
        return out

    def _merge(self, xs):
        raise NotImplementedError

    def _grads(self, dy, xs, y):
        raise NotImplementedError


class Add(_Merge):
    """Sum of the inputs (``keras.layers.Add``)."""

    def _merge(self, xs):
        y = xs[0]
        for x in xs[1:]:
            y = y + x
        return y if len(xs) > 1 else y.copy()

    def _grads(self, dy, xs, y):
        return [dy] * len(xs)


class Subtract(_Merge):
    """``inputs[0] - inputs[1]`` (``keras.layers.Subtract``): exactly two inputs."""

    _exactly = 2

    def _merge(self, xs):
        return xs[0] - xs[1]

    def _grads(self, dy, xs, y):
        return [dy, -dy]


class Multiply(_Merge):
    """Elementwise product of the inputs (``keras.layers.Multiply``)."""

    def _merge(self, xs):
        y = xs[0]
        for x in xs[1:]:
            y = y * x
        return y if len(xs) > 1 else y.copy()

    def _grads(self, dy, xs, y):
        grads = []
        for i in range(len(xs)):
            g = dy
            for j, x in enumerate(xs):       # the product of the others (no division by x_i)
                if j != i:
                    g = g * x
            grads.append(g)
        return grads


class Average(_Merge):
    """Mean of the inputs (``keras.layers.Average``)."""

    def _merge(self, xs):
        y = xs[0]
        for x in xs[1:]:
            y = y + x
        return y / y.dtype.type(len(xs))

    def _grads(self, dy, xs, y):
        return [dy / dy.dtype.type(len(xs))] * len(xs)


class _Extremum(_Merge):
    _fn: "Callable[..., Any] | None" = None

    def _merge(self, xs):
        y = xs[0]
        for x in xs[1:]:
            y = type(self)._fn(y, x)
        return y if len(xs) > 1 else y.copy()

    def _grads(self, dy, xs, y):
        """The gradient goes to the input holding the extremum (the first one on ties)."""
        taken = np.zeros(y.shape, dtype=bool)
        grads = []
        for x in xs:
            sel = (np.broadcast_to(x, y.shape) == y) & ~taken
            taken |= sel
            grads.append(np.where(sel, dy, dy.dtype.type(0)))
        return grads


class Maximum(_Extremum):
    """Elementwise maximum of the inputs (``keras.layers.Maximum``); NaN propagates."""

    _fn = staticmethod(np.maximum)


class Minimum(_Extremum):
    """Elementwise minimum of the inputs (``keras.layers.Minimum``); NaN propagates."""

    _fn = staticmethod(np.minimum)


class Concatenate(_Merge):
    """Concatenation along ``axis`` (``keras.layers.Concatenate``): the inputs have one rank and
    equal dimensions except along ``axis``.  Exact: the inputs are only cast to the compute
    dtype."""

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"Concatenate: axis must be an int, got {type(axis).__name__}: "
                            f"{axis!r}")
        self.axis = int(axis)

    def compute_output_shape(self, input_shape):
        self._check_list(input_shape)
        owner = self._owner()
        ranks = {len(s) for s in input_shape}
        if len(ranks) != 1:
            raise ValueError(f"{owner}: inputs must have the same rank, received shapes "
                             f"{list(input_shape)}")
        rank = ranks.pop()
        if not -rank <= self.axis < rank:
            raise ValueError(f"{owner}: axis {self.axis} is out of range for inputs of rank "
                             f"{rank} (shapes {list(input_shape)})")
        axis = self.axis % rank
        out = list(input_shape[0])
        for s in input_shape[1:]:
            for i, (a, b) in enumerate(zip(out, s)):
                if i == axis:
                    continue
                if a is not None and b is not None and a != b:
                    raise ValueError(f"{owner}: inputs must have matching shapes except along "
                                     f"axis {self.axis}, received shapes {list(input_shape)}")
                if a is None:
                    out[i] = b
        sizes = [s[axis] for s in input_shape]
        out[axis] = None if any(d is None for d in sizes) else int(sum(sizes))
        return tuple(out)

    def compute_mask(self, inputs, mask=None):
        """Keras's: the masks (all True for an input without one, a mask of one rank less
        repeated along a new last axis) concatenated along ``axis``, then "any" over the last
        axis; None when no input has a mask."""
        if mask is None or not isinstance(mask, (list, tuple)) or all(m is None for m in mask):
            return None
        parts = []
        for x, m in zip(inputs, mask):
            shape = np.shape(x)
            if m is None:
                parts.append(np.ones(shape, dtype=bool))
                continue
            m = np.asarray(m, dtype=bool)
            if m.ndim < len(shape):
                m = np.broadcast_to(m[..., None], shape)
            parts.append(m)
        return np.concatenate(parts, axis=self.axis).any(axis=-1)

    def call(self, inputs, training=False):
        if not isinstance(inputs, (list, tuple)):
            raise ValueError(f"{self._owner()}: Concatenate is called on a list of inputs, "
                             f"received {type(inputs).__name__}")
        cd = self._compute_np()
        xs = [to_compute(x, cd) if x.dtype != cd else x for x in inputs]
        self.compute_output_shape([x.shape for x in xs])
        y = np.concatenate(xs, axis=self.axis)
        if training:
            self._train_cache = ([x.shape for x in xs], cd)
        return y

    def call_activated(self, inputs, activation):
        """``activation(self(inputs))``: the concatenation is exact, so the activation of the
        concatenated values in the work dtype, rounded once, is the two steps' result."""
        y = self.call(inputs)
        return _activations.forward_to(activation, to_compute(y, work_dtype(y.dtype)), y.dtype)

    def backward(self, dy, need_input_grad=True):
        shapes, cd = self._train_cache
        self.gradients = []
        if not need_input_grad:
            return None
        dy = np.asarray(dy)
        axis = self.axis % dy.ndim
        bounds = np.cumsum([s[axis] for s in shapes])[:-1]
        return [to_compute(np.ascontiguousarray(g), cd)
                for g in np.split(dy, bounds, axis=axis)]

    def get_config(self):
        config = super().get_config()
        config["axis"] = self.axis
        return config


def _functional(cls, inputs, kwargs):
    return cls(**kwargs)(inputs)


def add(inputs, **kwargs):
    """``Add(**kwargs)(inputs)``."""
    return _functional(Add, inputs, kwargs)


def subtract(inputs, **kwargs):
    """``Subtract(**kwargs)(inputs)``."""
    return _functional(Subtract, inputs, kwargs)


def multiply(inputs, **kwargs):
    """``Multiply(**kwargs)(inputs)``."""
    return _functional(Multiply, inputs, kwargs)


def average(inputs, **kwargs):
    """``Average(**kwargs)(inputs)``."""
    return _functional(Average, inputs, kwargs)


def maximum(inputs, **kwargs):
    """``Maximum(**kwargs)(inputs)``."""
    return _functional(Maximum, inputs, kwargs)


def minimum(inputs, **kwargs):
    """``Minimum(**kwargs)(inputs)``."""
    return _functional(Minimum, inputs, kwargs)


def concatenate(inputs, axis=-1, **kwargs):
    """``Concatenate(axis=axis, **kwargs)(inputs)``."""
    return Concatenate(axis=axis, **kwargs)(inputs)
