"""Keras operations recorded as nodes of a functional model.

Keras 3 records ``x + y``, ``x * 3.0``, ``x[:, 0]``, ``keras.ops.mean(x, axis=1)`` ... called on
symbolic tensors as nodes of the model's graph, written in its config like layers but with the
module ``keras.src.ops.<family>`` (MobileNetV3's hard-swish arithmetic, ConvNeXt's residual
sums, keras_hub's pooling by ``x[:, 0, :]``).  Here each is a :class:`Layer` without weights or
policy of its own (``model.layers`` leaves them out, as Keras's does), registered under
``ops>Name`` so the loader tells them from the layers of the same class name.

Semantics are Keras's: no autocast; the result dtype is the operands' promoted dtype (Python
numbers are weak: a bfloat16 tensor times 3.0 stays bfloat16; an integer result of a true
division is float32); arithmetic runs in float32 (float64 for float64 operands) and is rounded
once.  Operations are inference-only except Add, Subtract, Multiply, Divide, Negative and
GetItem, whose gradients ``backward`` gives.
"""
from typing import Any, Callable

import numpy as np

from mixedcore._dtypes import is_floating, np_dtype, to_compute, work_dtype
from mixedcore.layers import _node
from mixedcore.layers._base import Layer
from mixedcore.layers._node import KerasTensor

__all__ = ["OPERATIONS", "operation_class"]


def _dtype_of(value):
    if isinstance(value, (np.ndarray, KerasTensor)):
        return np_dtype(str(value.dtype)) if isinstance(value, KerasTensor) else value.dtype
    return None


def _result_dtype(values):
    """Keras's result dtype of an operation on ``values`` (arrays and Python numbers)."""
    dtypes = [d for d in (_dtype_of(v) for v in values) if d is not None]
    if not dtypes:
        return np.dtype(np.float32)
    floats = [d for d in dtypes if is_floating(d)]
    if floats:
        if any(d == np.float64 for d in floats):
            return np.dtype(np.float64)
        if any(d == np.float32 for d in floats):
            return np.dtype(np.float32)
        if len({d for d in floats}) > 1:         # float16 with bfloat16: float32
            return np.dtype(np.float32)
        return floats[0]
    if any(isinstance(v, float) for v in values):
        return np.dtype(np.float32)
    return np.result_type(*dtypes)


class _Operation(Layer):
    """Base of the operation nodes: ``call(*operands)`` on arrays, output specs by running."""

    _is_operation = True
    _keras_class = ""
    _keras_module = "keras.src.ops.numpy"
    _arguments: tuple[str, ...] = ()  # the config keys of the operation's own arguments

    def __init__(self, name=None, dtype=None, **kwargs):
        own = {k: kwargs.pop(k) for k in list(kwargs) if k in self._arguments}
        for key in ("trainable", "autocast"):
            kwargs.pop(key, None)
        super().__init__(name=name, dtype=dtype, autocast=False, **kwargs)
        self._set_arguments(**own)
        self._train_cache = None

    def _owner(self):
        return f"operation {type(self)._keras_class} '{self.name}'"

    def _set_arguments(self, **kwargs):
        missing = [k for k in self._arguments if k not in kwargs and not hasattr(self, k)]
        if missing:
            raise TypeError(f"{self._owner()}: missing argument(s) {missing}")
        for key, value in kwargs.items():
            setattr(self, key, value)

    # the operands may be tensors or numbers in any position: no shape bookkeeping
    def _build_for_call(self, args, kwargs):
        self.built = True

    def _check_call(self, args, kwargs):
        return None

    def compute_output_spec(self, *args, **kwargs):
        return self._spec_by_running(args, kwargs)

    def __call__(self, *args, training=False, **kwargs):
        if args and not any(isinstance(a, KerasTensor) for a in _leaves(args, kwargs)):
            self.built = True
            return self.call(*args, **kwargs)
        return super().__call__(*args, training=training, **kwargs)

    def per_sample(self, node):
        """Whether the node computes each sample on its own (the graph's batch chunks)."""
        return True

    def get_config(self):
        config = {"name": self.name}
        for key in self._arguments:
            value = getattr(self, key)
            config[key] = list(value) if isinstance(value, tuple) else value
        return config


def _leaves(args, kwargs):
    out = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, (list, tuple)):
            out.extend(a)
        else:
            out.append(a)
    return out


def _operand(owner, value, w):
    if isinstance(value, np.ndarray):
        return to_compute(value, w) if is_floating(value.dtype) else value.astype(w)
    if isinstance(value, (bool, int, float, np.number)):
        return w.type(value)
    raise TypeError(f"{owner}: operands must be arrays or numbers, got {type(value).__name__}")


class _Binary(_Operation):
    _fn: Callable[..., Any]

    def call(self, x1, x2):
        out = _result_dtype([x1, x2])
        if not is_floating(out) and type(self)._keras_class not in ("Divide", "TrueDivide"):
            return type(self)._fn(np.asarray(x1), np.asarray(x2)).astype(out)
        if not is_floating(out):
            out = np.dtype(np.float32)
        w = work_dtype(out)
        a, b = _operand(self._owner(), x1, w), _operand(self._owner(), x2, w)
        with np.errstate(all="ignore"):
            y = np.asarray(type(self)._fn(a, b))
        self._train_cache = (a, b, x1, x2, out)
        return to_compute(y.astype(w, copy=False), out)


def _sum_to(g, like):
    """``g`` summed down to the shape of the operand ``like`` (None for a number)."""
    if not isinstance(like, np.ndarray):
        return None
    extra = g.ndim - like.ndim
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, (d, e) in enumerate(zip(like.shape, g.shape)) if d == 1 and e != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return to_compute(g, like.dtype) if is_floating(like.dtype) else None


class _Arithmetic(_Binary):
    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        a, b, x1, x2, _ = self._train_cache
        g = to_compute(dy, a.dtype if isinstance(a, np.ndarray) else np.dtype(np.float32))
        g1, g2 = self._grads(g, a, b)
        return {"x1": _sum_to(g1, x1), "x2": _sum_to(g2, x2)}


class Add(_Arithmetic):
    _keras_class = "Add"
    _fn = np.add

    def _grads(self, g, a, b):
        return g, g


class Subtract(_Arithmetic):
    _keras_class = "Subtract"
    _fn = np.subtract

    def _grads(self, g, a, b):
        return g, -g


class Multiply(_Arithmetic):
    _keras_class = "Multiply"
    _fn = np.multiply

    def _grads(self, g, a, b):
        return g * b, g * a


class Divide(_Arithmetic):
    _keras_class = "Divide"
    _fn = np.true_divide

    def _grads(self, g, a, b):
        with np.errstate(all="ignore"):
            return g / b, -g * a / (b * b)


class TrueDivide(Divide):
    _keras_class = "TrueDivide"


class Maximum(_Binary):
    _keras_class = "Maximum"
    _fn = np.maximum


class Minimum(_Binary):
    _keras_class = "Minimum"
    _fn = np.minimum


class Power(_Binary):
    _keras_class = "Power"
    _fn = np.power


class _Unary(_Operation):
    _fn: Callable[..., Any]

    def call(self, x):
        out = _result_dtype([x])
        if not is_floating(out):
            out = np.dtype(np.float32)
        w = work_dtype(out)
        a = _operand(self._owner(), x, w)
        with np.errstate(all="ignore"):
            y = type(self)._fn(a)
        self._train_cache = x
        return to_compute(np.asarray(y, dtype=w), out)


def _sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


class Negative(_Unary):
    _keras_class = "Negative"
    _fn = np.negative

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        return -dy


class Absolute(_Unary):
    _keras_class = "Absolute"
    _fn = np.abs


class Sqrt(_Unary):
    _keras_class = "Sqrt"
    _fn = np.sqrt


class Square(_Unary):
    _keras_class = "Square"
    _fn = np.square


class Exp(_Unary):
    _keras_class = "Exp"
    _fn = np.exp


class Log(_Unary):
    _keras_class = "Log"
    _fn = np.log


class Tanh(_Unary):
    _keras_class = "Tanh"
    _fn = np.tanh


class Sigmoid(_Unary):
    _keras_class = "Sigmoid"
    _keras_module = "keras.src.ops.nn"
    _fn = staticmethod(_sigmoid)


class Relu(_Unary):
    _keras_class = "Relu"
    _keras_module = "keras.src.ops.nn"
    _fn = staticmethod(lambda x: np.maximum(x, 0))


def _revive_key(owner, key):
    """The index of a GetItem call (slices, ints, None and Ellipsis, or a tuple of them)."""
    if isinstance(key, (list, tuple)):
        return tuple(_revive_key(owner, k) for k in key)
    if isinstance(key, (slice, type(None), type(Ellipsis))):
        return key
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return int(key)
    raise ValueError(f"{owner}: an index must be made of slices, ints, None and Ellipsis, "
                     f"got {key!r}")


class GetItem(_Operation):
    """``x[key]``: basic indexing only (no array indices)."""

    _keras_class = "GetItem"

    def call(self, x, key):
        index = _revive_key(self._owner(), key)
        try:
            y = x[index]
        except IndexError as exc:
            raise ValueError(f"{self._owner()}: index {key!r} does not fit an input of shape "
                             f"{x.shape}: {exc}") from None
        self._train_cache = (x.shape, index)
        return np.ascontiguousarray(y)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        shape, index = self._train_cache
        g = np.zeros(shape, dtype=dy.dtype)
        g[index] = dy
        return {"x": g, "key": None}

    def per_sample(self, node):
        key = node.args[1] if len(node.args) > 1 else None
        first = key[0] if isinstance(key, (list, tuple)) and key else key
        return isinstance(first, slice) and first == slice(None)


def _axis_list(owner, axis, rank):
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not -rank <= a < rank:
            raise ValueError(f"{owner}: axis {axis!r} out of range for rank {rank}")
    return [int(a) % rank for a in axes]


class Reshape(_Operation):
    _keras_class = "Reshape"
    _arguments = ("newshape",)

    def call(self, x):
        try:
            return x.reshape(tuple(self.newshape))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{self._owner()}: cannot reshape {x.shape} to "
                             f"{self.newshape}: {exc}") from None

    def per_sample(self, node):
        return False


class Transpose(_Operation):
    _keras_class = "Transpose"
    _arguments = ("axes",)
    axes = None

    def call(self, x):
        axes = None if self.axes is None else _axis_list(self._owner(), self.axes, x.ndim)
        if axes is not None and sorted(axes) != list(range(x.ndim)):
            raise ValueError(f"{self._owner()}: axes {self.axes} are not a permutation of the "
                             f"{x.ndim} axes")
        return np.ascontiguousarray(np.transpose(x, axes))

    def per_sample(self, node):
        return self.axes is not None and len(self.axes) > 0 and self.axes[0] == 0


class ExpandDims(_Operation):
    _keras_class = "ExpandDims"
    _arguments = ("axis",)

    def call(self, x):
        axes = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        try:
            return np.expand_dims(x, tuple(int(a) for a in axes))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{self._owner()}: axis {self.axis!r} does not fit an input of "
                             f"shape {x.shape}: {exc}") from None

    def per_sample(self, node):
        axes = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        return all(a != 0 for a in axes)


class Squeeze(_Operation):
    _keras_class = "Squeeze"
    _arguments = ("axis",)
    axis = None

    def call(self, x):
        axes = None if self.axis is None else tuple(_axis_list(self._owner(), self.axis, x.ndim))
        if axes is not None and any(x.shape[a] != 1 for a in axes):
            raise ValueError(f"{self._owner()}: cannot squeeze axis {self.axis} of shape "
                             f"{x.shape}")
        return np.squeeze(x, axis=axes)

    def per_sample(self, node):
        return self.axis is not None and 0 not in (
            self.axis if isinstance(self.axis, (list, tuple)) else [self.axis])


class Concatenate(_Operation):
    _keras_class = "Concatenate"
    _arguments = ("axis",)
    axis = 0

    def call(self, xs):
        if not isinstance(xs, (list, tuple)) or not xs:
            raise ValueError(f"{self._owner()}: takes a list of arrays")
        out = _result_dtype(list(xs))
        try:
            return np.concatenate([to_compute(x, out) if is_floating(x.dtype) else x.astype(out)
                                   for x in xs], axis=int(self.axis))
        except (ValueError, np.exceptions.AxisError) as exc:
            raise ValueError(f"{self._owner()}: cannot concatenate shapes "
                             f"{[x.shape for x in xs]} along axis {self.axis}: {exc}") from None

    def per_sample(self, node):
        rank = len(node.input_tensors[0].shape)
        return int(self.axis) % rank != 0


class Cast(_Operation):
    _keras_class = "Cast"
    _keras_module = "keras.src.ops.core"
    _arguments = ("dtype",)

    def __init__(self, dtype=None, name=None, **kwargs):
        # the operation's own ``dtype`` is its target, not a policy
        super().__init__(name=name, **kwargs)
        target = dtype.get("config", {}).get("name") if isinstance(dtype, dict) else dtype
        try:
            self.dtype_target = np_dtype(str(target))
        except TypeError:
            raise ValueError(f"Cast: unknown dtype {dtype!r}") from None
        self.cast_to = str(target)

    def call(self, x):
        t = self.dtype_target
        if is_floating(x.dtype) and is_floating(t):
            return to_compute(x, t)
        return x.astype(t)

    def get_config(self):
        return {"name": self.name, "dtype": self.cast_to}


class _Reduction(_Operation):
    _arguments: tuple[str, ...] = ("axis", "keepdims")
    _fn: Callable[..., Any]

    def __init__(self, axis=None, keepdims=False, **kwargs):
        super().__init__(axis=axis, keepdims=keepdims, **kwargs)
        self.axis = tuple(axis) if isinstance(axis, list) else axis
        self.keepdims = bool(keepdims)

    def call(self, x):
        out = x.dtype if is_floating(x.dtype) else np.dtype(np.float32)
        axes = None if self.axis is None else tuple(_axis_list(self._owner(), self.axis, x.ndim))
        extra = {} if getattr(self, "initial", None) is None else {"initial": self.initial}
        y = type(self)._fn(to_compute(x, work_dtype(out)) if is_floating(x.dtype)
                           else x.astype(np.float32), axis=axes, keepdims=self.keepdims, **extra)
        return to_compute(np.asarray(y), out)

    def per_sample(self, node):
        if self.axis is None:
            return False
        rank = len(node.input_tensors[0].shape)
        axes = self.axis if isinstance(self.axis, tuple) else (self.axis,)
        return all(int(a) % rank != 0 for a in axes)


class Mean(_Reduction):
    _keras_class = "Mean"
    _fn = staticmethod(np.mean)


class Sum(_Reduction):
    _keras_class = "Sum"
    _fn = staticmethod(np.sum)


class Max(_Reduction):
    _keras_class = "Max"
    _arguments = ("axis", "keepdims", "initial")
    initial = None
    _fn = staticmethod(np.max)


class Min(_Reduction):
    _keras_class = "Min"
    _arguments = ("axis", "keepdims", "initial")
    initial = None
    _fn = staticmethod(np.min)


OPERATIONS = [Add, Subtract, Multiply, Divide, TrueDivide, Maximum, Minimum, Power, Negative,
              Absolute, Sqrt, Square, Exp, Log, Tanh, Sigmoid, Relu, GetItem, Reshape,
              Transpose, ExpandDims, Squeeze, Concatenate, Cast, Mean, Sum, Max, Min]


_node._OPERATIONS.update({op._keras_class: op for op in OPERATIONS})


def operation_class(name):
    """The registry name of the operation Keras calls ``name``."""
    return f"ops>{name}"
