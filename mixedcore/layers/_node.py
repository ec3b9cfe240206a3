"""Symbolic tensors and the nodes that connect layers into a graph (the functional API).

``Input(shape)`` returns a :class:`KerasTensor`; calling a layer on KerasTensors builds the layer
from their shapes, records a :class:`Node` (the layer, the arguments of the call, its outputs) and
returns new KerasTensors for the outputs.  ``models.Model(inputs, outputs)`` then walks the nodes
back from the outputs.  Nothing is computed symbolically: shapes come from each layer's
``compute_output_shape``.

Nested arguments follow one convention everywhere (``flatten``): lists and tuples in order, dicts
in sorted key order, anything else a leaf.
"""
import inspect

import numpy as np

from mixedcore._dtypes import dtype_name

__all__ = ["KerasTensor", "Node", "flatten", "map_structure", "pack_like", "any_symbolic"]


def flatten(structure):
    """The leaves of a nest of lists, tuples and dicts (dicts in sorted key order)."""
    out = []
    _flatten_into(structure, out)
    return out


def _flatten_into(s, out):
    if isinstance(s, (list, tuple)):
        for item in s:
            _flatten_into(item, out)
    elif isinstance(s, dict):
        for key in sorted(s):
            _flatten_into(s[key], out)
    else:
        out.append(s)


def map_structure(fn, structure):
    """``structure`` with every leaf replaced by ``fn(leaf)``."""
    if isinstance(structure, list):
        return [map_structure(fn, s) for s in structure]
    if isinstance(structure, tuple):
        return tuple(map_structure(fn, s) for s in structure)
    if isinstance(structure, dict):
        return {k: map_structure(fn, v) for k, v in structure.items()}
    return fn(structure)


def map_structure_shapes(fn, structure):
    """Like :func:`map_structure`, with tuples of ints (shapes) as the leaves."""
    if isinstance(structure, tuple) and all(d is None or isinstance(d, (int, np.integer))
                                            for d in structure):
        return fn(structure)
    if isinstance(structure, (list, tuple)):
        return type(structure)(map_structure_shapes(fn, s) for s in structure)
    if isinstance(structure, dict):
        return {k: map_structure_shapes(fn, v) for k, v in structure.items()}
    return fn(structure)


def pack_like(structure, leaves):
    """The inverse of :func:`flatten`: ``leaves`` put back into the shape of ``structure``."""
    it = iter(leaves)

    def rebuild(s):
        if isinstance(s, list):
            return [rebuild(x) for x in s]
        if isinstance(s, tuple):
            return tuple(rebuild(x) for x in s)
        if isinstance(s, dict):
            rebuilt = {k: rebuild(s[k]) for k in sorted(s)}
            return {k: rebuilt[k] for k in s}
        return next(it)

    return rebuild(structure)


def any_symbolic(args, kwargs=None):
    """True when a KerasTensor is among the leaves of ``args`` (and ``kwargs``)."""
    if any(isinstance(leaf, KerasTensor) for leaf in flatten(args)):
        return True
    return kwargs is not None and any(isinstance(leaf, KerasTensor)
                                      for leaf in flatten(list(kwargs.values())))


# Keras's operation classes by name ("Add", "GetItem", ...), filled by layers/_ops.py
_OPERATIONS: dict = {}


class KerasTensor:
    """A symbolic tensor: a shape (batch dimension first, None where unknown) and a dtype name.

    ``keras_history`` is ``(layer, node_index, tensor_index)``: the layer call that produced it.
    """

    __slots__ = ("shape", "dtype", "name", "_history", "__weakref__")

    def __init__(self, shape, dtype="float32", name=None):
        self.shape = tuple(None if d is None else int(d) for d in shape)
        self.dtype = dtype_name(dtype) if dtype is not None else None
        self.name = name
        self._history = None

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def keras_history(self):
        return self._history

    @property
    def node(self):
        layer, node_index, _ = self._history
        return layer._inbound_nodes[node_index]

    def __array__(self, *args, **kwargs):
        raise TypeError(f"KerasTensor {self.name!r} (shape {self.shape}) is symbolic: it has no "
                        f"values.  Use it as the input of a layer or of models.Model, and call "
                        f"the model on arrays to compute")

    def __bool__(self):
        raise TypeError(f"KerasTensor {self.name!r} is symbolic and has no truth value")

    # Arithmetic and indexing record Keras's operation nodes (layers/_ops.py), as ``x + y`` in
    # a Keras 3 functional model does.
    def _operation(self, name, *args):
        return _OPERATIONS[name]()(*args)

    def __add__(self, other):
        return self._operation("Add", self, other)

    def __radd__(self, other):
        return self._operation("Add", other, self)

    def __sub__(self, other):
        return self._operation("Subtract", self, other)

    def __rsub__(self, other):
        return self._operation("Subtract", other, self)

    def __mul__(self, other):
        return self._operation("Multiply", self, other)

    def __rmul__(self, other):
        return self._operation("Multiply", other, self)

    def __truediv__(self, other):
        return self._operation("Divide", self, other)

    def __rtruediv__(self, other):
        return self._operation("Divide", other, self)

    def __neg__(self):
        return self._operation("Negative", self)

    def __getitem__(self, key):
        return self._operation("GetItem", self, key)

    def __repr__(self):
        return f"<KerasTensor shape={self.shape}, dtype={self.dtype}, name={self.name}>"


class Node:
    """One call of a layer on symbolic tensors.

    Attributes
    ----------
    layer : Layer
    args, kwargs : the call's arguments (KerasTensors among other values)
    outputs : the call's result (a KerasTensor or a nest of them)
    input_tensors, output_tensors : the KerasTensors of the arguments / result, flattened
    input_paths : for each input tensor, ``(parameter name, position among that parameter's
        leaves)``: where ``layer.backward``'s gradient for it is found (see ``Layer.backward``)
    """

    def __init__(self, layer, args, kwargs, outputs):
        self.layer = layer
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.outputs = outputs
        self.output_tensors = flatten(outputs)
        self.input_paths = []
        self.input_tensors = []
        for param, value in _bind(layer, self.args, self.kwargs):
            for k, leaf in enumerate(flatten(value)):
                if isinstance(leaf, KerasTensor):
                    self.input_tensors.append(leaf)
                    self.input_paths.append((param, k))
        self.index = len(layer._inbound_nodes)
        layer._inbound_nodes.append(self)
        for i, t in enumerate(self.output_tensors):
            t._history = (layer, self.index, i)

    @property
    def parent_nodes(self):
        return [t.node for t in self.input_tensors]

    def __repr__(self):
        return f"<Node {self.layer.name}#{self.index}>"


def _bind(layer, args, kwargs):
    """(parameter name, value) pairs of a call of ``layer.call``, in the signature's order."""
    try:
        sig = inspect.signature(layer.call)
        bound = sig.bind_partial(*args, **kwargs)
        return list(bound.arguments.items())
    except (TypeError, ValueError):
        pairs = [(f"arg{i}", a) for i, a in enumerate(args)]
        return pairs + sorted(kwargs.items())


def first_parameter(layer):
    """The name of the first parameter of ``layer.call`` (``inputs`` for most layers)."""
    try:
        return next(iter(inspect.signature(layer.call).parameters))
    except (TypeError, ValueError, StopIteration):
        return "arg0"


def shapes_of(structure):
    """The shapes of a nest of arrays or KerasTensors (same nest)."""
    return map_structure(lambda t: tuple(t.shape), structure)


def dtype_of(t):
    """The dtype name of an array or a KerasTensor."""
    if isinstance(t, KerasTensor):
        return t.dtype
    return dtype_name(np.asarray(t).dtype) if not hasattr(t, "dtype") else dtype_name(t.dtype)
