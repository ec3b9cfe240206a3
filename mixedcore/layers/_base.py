"""The Layer base class: dtype policies, autocasting, weights and their compute-dtype cache.

Design:
  A. A layer snapshots its policy at construction (docs/policies.md, 'The global policy and
     `policy_scope`'): None -> the policy in effect then.
  B. Weights live in the variable dtype (float32 under the mixed policies), in one list in
     creation order (parallel lists hold their names, trainable flags and regularizers); a layer
     reads its own by name, through ``Weight`` attributes (``self.kernel``, ``self.bias``) or
     the by-name helpers below, never by position.  What a training call uses is a copy in the
     compute dtype, made once with ``kernels.cast`` and cached; inference products take the
     weight packed once in the compute dtype instead (``packed_weight``: ``kernels.pack``
     unless the layer's ``_pack`` says otherwise; no cast copy, no packing per call), and a
     bias rounded to the compute dtype and held in float32 (``_bias32``).  These caches are
     keyed by a version counter that ``set_weights`` and every optimizer step of a model bump
     (``Layer.weights_updated``); a packed weight is made again when the kernels' level or block
     size changed since.
  C. Floating array inputs (float64 too) are cast to the compute dtype on the way in; integer and
     bool inputs pass untouched (docs/layers.md, 'Policies and autocasting').
  D. The experimental "infer" policies resolve on the first call, from the first input's dtype.
  E. Training: ``call(x, training=True)`` keeps what ``backward`` needs; ``backward(dy)`` returns
     the input gradient in the input's dtype and leaves the weight gradients (variable dtype) in
     ``self.gradients``, in the order of ``self.trainable_weights``.
  F. Weights that a file will give.  While a model is rebuilt from a file
     (``weights_from_file``), the library's layers create their weights as placeholders: the
     shape and dtype without memory, and no initializer run (no random draws, no QR of an
     orthogonal kernel).  The loader compares the file's shapes with them before it reads
     anything, then gives each an array of its own (``realize_placeholders``).  A weight
     larger than the machine's memory is refused by ``add_weight`` in every case.
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
import re
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from mixedcore import kernels
from mixedcore._dtypes import as_numeric_array, is_floating, np_dtype, to_compute
from mixedcore import initializers as _initializers
from mixedcore import regularizers as _regularizers
from mixedcore.dtype_policies import policy_config, resolve_policy
from mixedcore.layers import _node

_name_counts: dict = {}
# moved by every change of any layer's weights (``_version``) or dtype policy: a compiled plan
# (models/_plan.py) checks the layers it holds only when it moved since the last check
_state_epoch = 0


def state_epoch() -> int:
    """A number that changes whenever any layer's weights or dtype policy change."""
    return _state_epoch


def _moved() -> None:
    global _state_epoch
    _state_epoch += 1
# Within weights_from_file(): every layer made since (F); None outside
_FROM_FILE: contextvars.ContextVar = contextvars.ContextVar("mixedcore_weights_from_file",
                                                             default=None)


def memory_bytes() -> int:
    """The machine's physical memory in bytes (2**40 when the system does not say): no single
    weight or activation of a model that can run here is larger."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        total = -1
    return total if total > 0 else 1 << 40


@contextlib.contextmanager
def weights_from_file():
    """Within the block, the library's layers create each weight as a placeholder of its shape
    and dtype (a read-only view of one zero, which allocates nothing) instead of running its
    initializer (F): a model being loaded gets its values from the file, once the file's shapes
    have been checked against the placeholders'.  :func:`realize_placeholders` then gives them
    memory."""
    token = _FROM_FILE.set([])
    try:
        yield
    finally:
        _FROM_FILE.reset(token)


def realize_placeholders(holders, initialize=False):
    """Give every placeholder made so far in the enclosing :func:`weights_from_file` an array of
    its own: zeros for the loader to overwrite, or with ``initialize`` the values its
    initializer draws.  The new array replaces the placeholder in every layer made within the
    block (a composite layer adopts its parts' weights as its own) and in ``holders``."""
    made = _FROM_FILE.get()
    if not made:
        return
    fresh = {}
    for layer in made:
        for name, (initializer, seed) in getattr(layer, "_pending", {}).items():
            old = layer._values[layer._names.index(name)]
            fresh[id(old)] = (_initializers.initialize(initializer, old.shape, old.dtype, seed=seed)
                              if initialize else np.zeros(old.shape, old.dtype))
        layer._pending = {}
    for layer in list(made) + list(holders):
        values = getattr(layer, "_values", None)
        for i, v in enumerate(values or ()):
            if id(v) in fresh:
                values[i] = fresh[id(v)]
                layer.weights_updated()
    made.clear()


def _snake(name):
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()      # as Keras: "conv2d", "re_lu"


def _unique_name(base):
    count = _name_counts.get(base, 0)
    _name_counts[base] = count + 1
    return base if count == 0 else f"{base}_{count}"


# Keras arguments mixedcore accepts only as None (what Keras's configs hold by default)
_UNSUPPORTED_UNLESS_NONE = {
    "kernel_constraint": "weight constraints", "bias_constraint": "weight constraints",
    "beta_constraint": "weight constraints", "gamma_constraint": "weight constraints",
    "embeddings_constraint": "weight constraints", "depthwise_constraint": "weight constraints",
    "pointwise_constraint": "weight constraints", "alpha_constraint": "weight constraints",
    "activity_regularizer": "activity regularizers", "quantization_config": "quantized layers",
    "lora_rank": "LoRA layers", "lora_alpha": "LoRA layers",
}
_TAKES_TRAINING: dict = {}


def _takes_training(cls):
    """Whether ``cls.call`` accepts ``training`` (Keras passes it only then); cached per class."""
    result = _TAKES_TRAINING.get(cls)
    if result is None:
        try:
            params = inspect.signature(cls.call).parameters
            result = "training" in params or any(p.kind is p.VAR_KEYWORD
                                                 for p in params.values())
        except (TypeError, ValueError):
            result = True
        _TAKES_TRAINING[cls] = result
    return result


def _is_shape(s):
    return isinstance(s, tuple) and all(d is None or isinstance(d, (int, np.integer)) for d in s)


def _as_shapes(s):
    """A shape, or a nest of shapes, with every shape a tuple (lists of ints become tuples)."""
    if isinstance(s, (list, tuple)) and all(d is None or isinstance(d, (int, np.integer))
                                            for d in s):
        return tuple(None if d is None else int(d) for d in s)
    if isinstance(s, dict):
        return {k: _as_shapes(v) for k, v in s.items()}
    if isinstance(s, (list, tuple)):
        return type(s)(_as_shapes(v) for v in s)
    raise TypeError(f"expected a shape (tuple of int or None) or a list of shapes, got {s!r}")


def _batchless(shape):
    return (None,) + tuple(shape[1:]) if len(shape) else shape


def _shapes_compatible(expected, shape):
    if _is_shape(expected):
        return (_is_shape(shape) and len(shape) == len(expected) and
                all(e is None or e == d for e, d in zip(expected[1:], shape[1:])))
    if isinstance(expected, dict):
        return isinstance(shape, dict) and set(shape) == set(expected) and all(
            _shapes_compatible(expected[k], shape[k]) for k in expected)
    return (isinstance(shape, (list, tuple)) and not _is_shape(shape) and
            len(shape) == len(expected) and
            all(_shapes_compatible(e, d) for e, d in zip(expected, shape)))


def _spec(shape, dtype):
    """KerasTensors for an output shape (or a nest of shapes)."""
    if _is_shape(shape):
        return _node.KerasTensor(shape, dtype)
    if isinstance(shape, dict):
        return {k: _spec(v, dtype) for k, v in shape.items()}
    if isinstance(shape, (list, tuple)):
        return type(shape)(_spec(v, dtype) for v in shape)
    raise TypeError(f"compute_output_shape returned {shape!r}, not a shape")


class Weight:
    """A named weight as a layer attribute, as Keras's ``self.kernel``.

    ``kernel = Weight()`` in a layer class makes ``layer.kernel`` the array its ``build``
    created with ``add_weight("kernel", ...)`` (the weight named as the attribute), or None
    while the layer has no such weight (not built yet, or ``bias`` under ``use_bias=False``).
    The array itself lives in the layer's weight list, the one place ``weights``,
    ``get_weights`` / ``set_weights``, the optimizers, saving and pickling read and write; the
    attribute only finds it by name, so it cannot go stale.  It cannot be assigned: write into
    the array (``layer.kernel[...] = ...``, then ``layer.weights_updated()``) or call
    ``set_weights``.
    """

    def __set_name__(self, owner, attr):
        self.name = attr

    def __get__(self, layer, owner=None):
        if layer is None:
            return self
        return layer._weight(self.name)

    def __set__(self, layer, value):
        raise AttributeError(f"{type(layer).__name__} '{layer.name}': {self.name} is a weight of "
                             f"the layer; write into it ({self.name}[...] = ...) and call "
                             f"weights_updated(), or use set_weights")


class Layer:
    """Base class of mixedcore's layers (``keras.layers.Layer``).

    Parameters
    ----------
    trainable : bool, default True
        Whether the layer's weights are updated by training.
    name : str, optional
        Unique by default ("dense", "dense_1", ...).
    dtype : None, str, policy, numpy dtype or dict, optional
        The dtype policy.  None takes the global policy in effect now (a snapshot); a str names a
        policy ("mixed_float16") or a dtype; a dict is a serialized policy.
    autocast : bool, default True
        Cast floating inputs to the compute dtype on the way in.
    input_shape : tuple, optional
        The shape of one sample (without the batch dimension); lets a Sequential model build at
        construction, as in Keras 2.

    Notes
    -----
    Weights are numpy arrays in the variable dtype, updated in place by optimizers.  If you write
    into them yourself, call :meth:`weights_updated` so the cached compute-dtype copies are redone.
    mixedcore's layers show theirs as attributes named as Keras names them, declared on the class
    with :class:`Weight` (``kernel = Weight()``) and created in ``build`` by ``add_weight`` under
    the same name.
    """

    def __init__(self, trainable=True, name=None, dtype=None, autocast=True, input_shape=None,
                 **kwargs):
        owner = type(self).__name__
        for key in [k for k in kwargs if k in _UNSUPPORTED_UNLESS_NONE]:
            value = kwargs.pop(key)
            if value is not None:
                raise ValueError(f"{owner}: {key}={value!r} is not supported (only None); "
                                 f"mixedcore has no {_UNSUPPORTED_UNLESS_NONE[key]}")
        if "batch_input_shape" in kwargs:          # tf.keras 2.x configs
            batch_input_shape = kwargs.pop("batch_input_shape")
            if input_shape is None and batch_input_shape is not None:
                input_shape = tuple(batch_input_shape)[1:]
        if kwargs:
            raise TypeError(f"{owner}: unexpected keyword argument(s) {sorted(kwargs)}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{owner}: name must be a str, got {type(name).__name__}")
        self.name = name if name is not None else _unique_name(_snake(owner))
        self.trainable = bool(trainable)
        self.autocast = bool(autocast)
        self._dtype_policy = resolve_policy(owner, dtype, self.name)
        self._input_shape_arg = None if input_shape is None else tuple(input_shape)
        self.built = False
        self._names = []          # weight names
        self._values = []         # weight arrays, variable dtype
        self._trainable_flags = []
        self._regularizers = []
        self._pending = {}        # F: weight name -> (initializer, seed) of a placeholder
        made = _FROM_FILE.get()
        if made is not None:
            made.append(self)
        self._version = 0
        self._cache_key = None
        self._cache = None
        self._packed = {}
        self._bias_cache = {}
        self.gradients = None
        self._out_dtype = None
        self.input_shape = None
        self.output_shape = None
        self._inbound_nodes = []
        self._call_takes_training = _takes_training(type(self))

    # -- state the compiled plans hold ---------------------------------------------------------
    @property
    def _version(self):
        """The weights' version: moved by every change of them (``weights_updated``)."""
        return self._weights_version

    @_version.setter
    def _version(self, value):
        self._weights_version = value
        _moved()

    @property
    def _dtype_policy(self):
        return self._policy_object

    @_dtype_policy.setter
    def _dtype_policy(self, value):
        self._policy_object = value
        _moved()

    # -- policy ---------------------------------------------------------------------------------
    @property
    def dtype_policy(self):
        return self._dtype_policy

    @dtype_policy.setter
    def dtype_policy(self, value):
        """Replace the policy (Keras 3): any policy before the layer is built; after, one whose
        variable dtype is that of the weights already made (the compute dtype may change)."""
        owner = f"{type(self).__name__} '{self.name}'.dtype_policy"
        policy = resolve_policy(owner, value, self.name)
        if self._values and policy.variable_dtype != self._dtype_policy.variable_dtype:
            raise ValueError(f"{owner}: the layer's weights are {self._dtype_policy.variable_dtype}"
                             f"; a policy with variable dtype {policy.variable_dtype!r} "
                             f"({policy.name!r}) can only be set before the layer is built")
        self._dtype_policy = policy

    @property
    def compute_dtype(self):
        """Name of the dtype the layer computes in (None for an unresolved "infer" policy)."""
        return self._dtype_policy.compute_dtype

    @property
    def variable_dtype(self):
        """Name of the dtype the weights are stored in."""
        return self._dtype_policy.variable_dtype

    @property
    def dtype(self):
        """The variable dtype (as Keras's ``Layer.dtype``)."""
        return self._dtype_policy.variable_dtype

    def _compute_np(self):
        return np_dtype(self.compute_dtype)

    # -- weights --------------------------------------------------------------------------------
    def add_weight(self, name: str | None = None, shape: Sequence[int] | None = None,
                   initializer: Any = None, regularizer: Any = None, trainable: bool = True,
                   seed: int | None = None, dtype: DTypeLike | None = None) -> np.ndarray:
        """Create a weight and return the array, as Keras's ``add_weight`` (keywords as Keras).

        ``shape`` defaults to ``()``; ``initializer`` to "glorot_uniform" for floating weights
        (Keras 3's default); ``regularizer`` is anything ``regularizers.get`` takes; ``dtype``
        defaults to the policy's variable dtype; ``name`` to "variable", "variable_1", ...
        """
        owner = f"{type(self).__name__} '{self.name}'.add_weight"
        shape = () if shape is None else shape
        try:
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise TypeError(f"{owner}: shape must be a tuple of ints, got {shape!r}") from None
        if any(d < 0 for d in shape):
            raise ValueError(f"{owner}: shape must not have negative dimensions, got {shape}")
        vd = np_dtype(dtype) if dtype is not None else np_dtype(self.variable_dtype or "float32")
        if initializer is None:
            initializer = "glorot_uniform" if np.issubdtype(vd, np.floating) else "zeros"
        if name is None:
            name, n = "variable", 0
            while name in self._names:
                n += 1
                name = f"variable_{n}"
        regularizer = _regularizers.get(regularizer)
        nbytes = int(np.prod(shape, dtype=object)) * vd.itemsize
        if nbytes > memory_bytes():
            raise ValueError(f"{owner}: weight {name!r} of shape {shape} ({vd.name}) needs "
                             f"{nbytes} bytes, more than this machine's memory "
                             f"({memory_bytes()} bytes)")
        if _FROM_FILE.get() is not None and type(self).__module__.startswith("mixedcore."):
            value = np.broadcast_to(np.zeros((), vd), shape)
            self._pending[name] = (initializer, seed)
        else:
            value = _initializers.initialize(initializer, shape, vd, seed=seed)
        self._names.append(name)
        self._values.append(value)
        self._trainable_flags.append(bool(trainable))
        self._regularizers.append(regularizer)
        self._version += 1
        return value

    @property
    def weights(self):
        """The weight arrays (trainable first, then non-trainable, as Keras)."""
        return self.trainable_weights + self.non_trainable_weights

    @property
    def trainable_weights(self):
        if not self.trainable:
            return []
        return [v for v, t in zip(self._values, self._trainable_flags) if t]

    @property
    def non_trainable_weights(self):
        if not self.trainable:
            return list(self._values)
        return [v for v, t in zip(self._values, self._trainable_flags) if not t]

    def _weight_index_order(self):
        if not self.trainable:
            return list(range(len(self._values)))
        return ([i for i, t in enumerate(self._trainable_flags) if t]
                + [i for i, t in enumerate(self._trainable_flags) if not t])

    def keras_weight_paths(self):
        """Where Keras files this layer's variables: [(sub-path, positions in ``self.weights``)].

        Sub-path "" is the layer's own ``vars`` group, whose datasets ``0, 1, ...`` are the
        variables in creation order, trainable ones first (whatever ``self.trainable``).  A
        layer that Keras builds from sub-layers overrides this to file its weights under their
        paths; the loader checks every weight against it before it sets any.
        """
        flags = self._trainable_flags
        if len(flags) != len(self.weights):
            return [("", list(range(len(self.weights))))]
        where = {creation: pos for pos, creation in enumerate(self._weight_index_order())}
        creation_order = ([i for i, t in enumerate(flags) if t] +
                          [i for i, t in enumerate(flags) if not t])
        return [("", [where[i] for i in creation_order])]

    def weight_names(self):
        return [f"{self.name}/{self._names[i]}" for i in self._weight_index_order()]

    def get_weights(self) -> list[np.ndarray]:
        """Copies of the weights, in Keras order (Dense: kernel (in, out), bias (out,))."""
        return [self._values[i].copy() for i in self._weight_index_order()]

    def set_weights(self, weights: Sequence[ArrayLike]) -> None:
        """Replace the weights (Keras order and shapes); values are converted to the variable dtype.

        Raises
        ------
        ValueError
            Wrong number of arrays, or a shape that differs; the message shows expected and
            received.
        TypeError
            A non-numeric array.
        """
        owner = f"{type(self).__name__} '{self.name}'.set_weights"
        if isinstance(weights, np.ndarray) or not hasattr(weights, "__len__"):
            raise TypeError(f"{owner}: expected a list of arrays, got {type(weights).__name__}")
        order = self._weight_index_order()
        if len(weights) != len(order):
            expected = [self._values[i].shape for i in order]
            raise ValueError(f"{owner}: expected {len(order)} weight arrays with shapes "
                             f"{expected}, received {len(weights)}")
        arrays = [as_numeric_array(owner, w) for w in weights]
        for k, (i, w) in enumerate(zip(order, arrays)):
            if w.shape != self._values[i].shape:
                raise ValueError(f"{owner}: weight {k} ({self._names[i]!r}) has shape {w.shape}, "
                                 f"expected {self._values[i].shape}")
        for i, w in zip(order, arrays):
            target = self._values[i]
            target[...] = to_compute(w, target.dtype)
        self.weights_updated()

    def _weight(self, name):
        """The weight called ``name`` (None if the layer has none): what ``Weight`` reads."""
        try:
            return self._values[self._names.index(name)]
        except ValueError:
            return None

    def weights_updated(self):
        """Mark the weights as changed: the next call recasts them to the compute dtype."""
        self._version += 1

    def compute_weights(self):
        """The weights in the compute dtype, creation order; cached until the weights change."""
        cd = self._compute_np()
        key = (self._version, cd)
        if self._cache_key != key:
            self._cache = [to_compute(v, cd) if is_floating(v.dtype) else v for v in self._values]
            self._cache_key = key
        return self._cache

    def _compute_weight(self, name):
        """The weight called ``name`` in the compute dtype (from :meth:`compute_weights`)."""
        return self.compute_weights()[self._names.index(name)]

    def packed_weight(self, which):
        """A weight (``which``: its name, or its index in creation order) packed in the compute
        dtype for inference products, as :meth:`_pack` packs it; cached until the weights change
        or the packed panels go stale."""
        index = self._names.index(which) if isinstance(which, str) else which
        cd = self._compute_np()
        key = (self._version, cd)
        entry = self._packed.get(index)
        if entry is None or entry[0] != key or entry[1].stale:
            entry = (key, self._pack(self._names[index], self._values[index], cd))
            self._packed[index] = entry
        return entry[1]

    def _pack(self, name, value, cd):
        """The weight ``name`` (``value``) packed in ``cd`` for :meth:`packed_weight`: by
        ``kernels.pack``, as the right operand of a GEMM, its K whole (``whole_k``).  Layers
        whose products take a weight another way (convolutions, attention's projections)
        override this."""
        return kernels.pack(value, dtype=cd, whole_k=True)

    def _bias32(self, name):
        """The weight ``name`` (a bias) rounded to the compute dtype and held flat in float32,
        what a product's epilogue adds; cached per weight version."""
        cd = self._compute_np()
        key = (self._version, cd)
        entry = self._bias_cache.get(name)
        if entry is None or entry[0] != key:
            b = to_compute(to_compute(self._weight(name), cd), np.dtype(np.float32))
            entry = (key, np.ascontiguousarray(b.reshape(-1)))
            self._bias_cache[name] = entry
        return entry[1]

    def _set_gradients(self, grads):
        """``self.gradients`` from ``{weight name: gradient}``: each in its weight's variable
        dtype, in the order of ``trainable_weights`` (none for a frozen layer)."""
        if not self.trainable:
            self.gradients = []
            return
        self.gradients = [to_compute(grads[n], v.dtype) for n, v, t in
                          zip(self._names, self._values, self._trainable_flags) if t]

    def inference_nbytes(self):
        """Bytes of the weights as inference holds them: the packed panels of those packed for
        the current weights, the compute-dtype size of the others."""
        cd = self._compute_np()
        total = 0
        for i, v in enumerate(self._values):
            entry = self._packed.get(i)
            if entry is not None and entry[0] == (self._version, cd):
                total += entry[1].nbytes
            else:
                total += v.size * (cd.itemsize if is_floating(v.dtype) else v.itemsize)
        return total

    # pickling: what is derived from the weights (compute-dtype copies, packed panels, folded
    # operands, bias tiles) and what a training call kept for backward is left out; the
    # unpickled layer redoes the derived parts on its first call, to the same bits.
    _DERIVED_STATE = {"_cache": None, "_cache_key": None, "_packed": dict, "_folded": None,
                      "_bias_cache": dict, "_train_cache": None, "_pending": dict,
                      "_qcache": None}

    def __getstate__(self):
        state = dict(self.__dict__)
        for key, empty in self._DERIVED_STATE.items():
            if key in state:
                state[key] = empty() if callable(empty) else empty
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        # derived state a pickle may lack (one made before a cache existed) starts empty
        for key, empty in self._DERIVED_STATE.items():
            if key not in self.__dict__:
                self.__dict__[key] = empty() if callable(empty) else empty

    def count_params(self) -> int:
        return int(sum(v.size for v in self._values))

    def regularization_losses(self):
        """(penalty, [gradient per trainable weight or None]) of the weight regularizers."""
        total = 0.0
        grads = []
        for i in self._weight_index_order():
            if not (self.trainable and self._trainable_flags[i]):
                continue
            reg = self._regularizers[i]
            if reg is None:
                grads.append(None)
            else:
                total += float(reg(self._values[i]))
                grads.append(reg.gradient(self._values[i]))
        return total, grads

    # -- calling --------------------------------------------------------------------------------
    def _prepare_input(self, inputs):
        x = as_numeric_array(f"{type(self).__name__} '{self.name}'", inputs)
        if self._dtype_policy.compute_dtype is None:
            # experimental "infer" policies adopt the first input's dtype (TypeError if not float)
            self._dtype_policy = self._dtype_policy.infer_from(x.dtype)
        if self.autocast and is_floating(x.dtype):
            x = to_compute(x, self._compute_np())
        return x

    def _prepare_args(self, args, kwargs):
        """The call's arguments with every array checked and floating ones cast to the compute
        dtype: the first argument may be a nest (list, tuple, dict) of array-likes; later ones
        and keyword arguments are converted only when they are ndarrays (flags pass)."""
        first = args[0]
        if isinstance(first, (list, tuple, dict)):
            first = _node.map_structure(self._prepare_input, first)
        else:
            first = self._prepare_input(first)
        rest = tuple(self._prepare_input(a) if isinstance(a, np.ndarray) else a for a in args[1:])
        kwargs = {k: self._prepare_input(v) if isinstance(v, np.ndarray) else v
                  for k, v in kwargs.items()}
        return (first,) + rest, kwargs

    def __call__(self, *args: Any, training: bool = False, **kwargs: Any) -> Any:
        """Call the layer on arrays (compute) or on KerasTensors (build a graph node).

        The first argument is the input (an array, or a list / dict of arrays for layers that
        take several); ``training`` selects training behaviour and keeps what ``backward`` needs.
        """
        if len(args) == 1 and not kwargs and isinstance(args[0], np.ndarray):   # the common case
            x = self._prepare_input(args[0])
            if not self.built:
                self.build_from_shape(x.shape)
            else:
                self.check_input_shape(x.shape)
            if self._call_takes_training:
                return self.call(x, training=training)
            return self.call(x)
        if not args:
            raise TypeError(f"{type(self).__name__} '{self.name}': called without inputs")
        if _node.any_symbolic(args, kwargs):
            return self._call_symbolic(args, kwargs)
        args, kwargs = self._prepare_args(args, kwargs)
        if not self.built:
            self._build_for_call(args, kwargs)
        else:
            self._check_call(args, kwargs)
        if self._call_takes_training:
            kwargs["training"] = training
        return self.call(*args, **kwargs)

    def _call_symbolic(self, args, kwargs):
        leaves = [t for t in _node.flatten(args) if isinstance(t, _node.KerasTensor)]
        if self._dtype_policy.compute_dtype is None and leaves and leaves[0].dtype:
            self._dtype_policy = self._dtype_policy.infer_from(np_dtype(leaves[0].dtype))
        if not self.built:
            self._build_for_call(args, kwargs)
        else:
            self._check_call(args, kwargs)
        outputs = self.compute_output_spec(*args, **kwargs)
        _node.Node(self, args, kwargs, outputs)
        return outputs

    def _build_for_call(self, args, kwargs):
        """Build from the shapes of a call's arguments (arrays or KerasTensors).  Layers whose
        ``build`` takes more than the first argument's shape override this."""
        self.build_from_shape(_node.shapes_of(args[0]))

    def _check_call(self, args, kwargs):
        """Raise ValueError if a built layer cannot take these arguments."""
        self.check_input_shape(_node.shapes_of(args[0]))

    def compute_output_spec(self, *args, **kwargs):
        """KerasTensors for the outputs of a call on KerasTensors: shapes from
        :meth:`compute_output_shape`, dtypes from :meth:`compute_output_dtype`."""
        cls = type(self)
        if (cls.compute_output_shape is Layer.compute_output_shape
                and not cls.__module__.startswith("mixedcore.")):
            return self._spec_by_running(args, kwargs)
        inputs = args[0]
        first = next((t for t in _node.flatten(inputs) if isinstance(t, _node.KerasTensor)),
                     None)
        dtype = self.compute_output_dtype(first.dtype if first is not None else None)
        return _spec(self.compute_output_shape(_node.shapes_of(inputs)), dtype)

    def _spec_by_running(self, args, kwargs):
        """Output KerasTensors found by calling the layer on zeros (batch of 1 where the batch
        is free): for a user's layer that does not define ``compute_output_shape``."""
        free_batch = []

        def concrete(t):
            if not isinstance(t, _node.KerasTensor):
                return t
            free_batch.append(bool(t.shape) and t.shape[0] is None)
            return np.zeros(tuple(1 if d is None else d for d in t.shape),
                            dtype=np_dtype(t.dtype or "float32"))

        result = self(*_node.map_structure(concrete, list(args)),
                      **_node.map_structure(concrete, dict(kwargs)))
        batch_free = any(free_batch)

        def spec(a):
            a = np.asarray(a)
            shape = ((None,) + a.shape[1:]) if batch_free and a.ndim else a.shape
            return _node.KerasTensor(shape, a.dtype)

        return _node.map_structure(spec, result)

    def compute_output_dtype(self, input_dtype):
        """The dtype name of the output for an input of ``input_dtype``: the compute dtype for a
        floating input when the layer autocasts, else the input's dtype."""
        if input_dtype is None:
            return self.compute_dtype
        if self.autocast and self.compute_dtype is not None and is_floating(np_dtype(input_dtype)):
            return self.compute_dtype
        return input_dtype

    def build_from_shape(self, input_shape: Any) -> None:
        """Build for ``input_shape`` (a shape with the batch dimension first, or a list / dict of
        them for a layer with several inputs) and record the input and output shapes."""
        input_shape = _as_shapes(input_shape)
        self.build(input_shape)
        self.input_shape = _node.map_structure_shapes(_batchless, input_shape)
        self.output_shape = self.compute_output_shape(self.input_shape)
        self.built = True

    def build(self, input_shape: Any) -> None:
        """Create the weights for inputs of ``input_shape`` (batch dimension first)."""

    def check_input_shape(self, shape):
        """Raise ValueError if a built layer cannot take inputs of ``shape``."""
        expected = self.input_shape
        if expected is None:
            return
        if not _shapes_compatible(expected, _as_shapes(shape)):
            raise ValueError(f"{type(self).__name__} '{self.name}': expected input of shape "
                             f"{expected}, received {_as_shapes(shape)}")

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    # Masks (Keras's): a layer that supports masking passes its input's mask on unchanged; one
    # that makes or changes masks overrides compute_mask.  A model hands a tensor's mask to the
    # layers that read it through their call's ``mask`` (or ``<parameter>_mask``) argument.
    supports_masking = False

    def compute_mask(self, inputs, mask=None):
        """The mask of the output for ``inputs`` whose mask is ``mask`` (None: no mask)."""
        return mask if self.supports_masking else None

    def call(self, inputs: Any, training: bool = False) -> Any:
        return inputs

    def backward(self, dy: Any, need_input_grad: bool = True) -> Any:
        """Gradient of the last training call.

        ``dy`` has the structure of the call's output.  Returns the gradient of the first
        argument (same structure as it, None where there is none), or, for a layer whose call
        takes tensors in several parameters, a dict mapping parameter names to gradients.
        Weight gradients go to ``self.gradients``, aligned with ``self.trainable_weights``.

        Everything a training call keeps for ``backward`` lives in ``self._train_cache``: a
        model that calls one layer at several places swaps it per call.
        """
        raise NotImplementedError(f"{type(self).__name__} '{self.name}' has no backward pass; "
                                  f"it can be used for inference only")

    @property
    def input(self):
        """The KerasTensor(s) this layer was first called on in a graph."""
        if not self._inbound_nodes:
            raise AttributeError(f"Layer '{self.name}' has never been called on symbolic "
                                 f"inputs and thus has no defined input")
        node = self._inbound_nodes[0]
        return node.args[0] if len(node.args) == 1 and not node.kwargs else node.input_tensors

    @property
    def output(self):
        """The KerasTensor(s) this layer's first call in a graph returned."""
        if not self._inbound_nodes:
            raise AttributeError(f"Layer '{self.name}' has never been called on symbolic "
                                 f"inputs and thus has no defined output")
        return self._inbound_nodes[0].outputs

    # -- config ---------------------------------------------------------------------------------
    def _policy_config(self):
        return policy_config(self._dtype_policy)

    def get_config(self) -> dict[str, Any]:
        config = {"name": self.name, "trainable": self.trainable,
                  "dtype": self._policy_config()}
        if not self.autocast:
            config["autocast"] = False
        if self._input_shape_arg is not None:
            config["input_shape"] = self._input_shape_arg
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Layer:
        return cls(**config)

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name!r}, policy={self._dtype_policy.name!r}>"
