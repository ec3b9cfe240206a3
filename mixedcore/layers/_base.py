"""The Layer base class: dtype policies, autocasting, weights and their compute-dtype cache.

Design:
  A. A layer snapshots its policy at construction (SPEC 3.4): None -> the policy in effect then.
  B. Weights live in the variable dtype (float32 under the mixed policies).  What a training call
     uses is a copy in the compute dtype, made once with ``kernels.cast`` and cached; inference
     products take the weight packed once by ``kernels.pack`` in the compute dtype instead (no
     cast copy, no packing per call).  Both caches are keyed by a version counter that
     ``set_weights`` and every optimizer step of a model bump (``Layer.weights_updated``); a
     packed weight is made again when the kernels' level or block size changed since.
  C. Floating array inputs (float64 too) are cast to the compute dtype on the way in; integer and
     bool inputs pass untouched (SPEC 6.2).
  D. The experimental "infer" policies resolve on the first call, from the first input's dtype.
  E. Training: ``call(x, training=True)`` keeps what ``backward`` needs; ``backward(dy)`` returns
     the input gradient in the input's dtype and leaves the weight gradients (variable dtype) in
     ``self.gradients``, in the order of ``self.trainable_weights``.
"""
import re

import numpy as np

from mixedcore import kernels
from mixedcore._dtypes import as_numeric_array, is_floating, np_dtype, to_compute
from mixedcore import policies as _policies
from mixedcore import policy as _policy_mod
from mixedcore.layers import _initializers

_name_counts = {}


def _snake(name):
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def _unique_name(base):
    count = _name_counts.get(base, 0)
    _name_counts[base] = count + 1
    return base if count == 0 else f"{base}_{count}"


def resolve_policy(owner, dtype):
    """A policy object from what a layer's ``dtype`` argument may be (SPEC 6.1)."""
    if dtype is not None and not isinstance(dtype, (str, dict, np.dtype, type)) \
            and not isinstance(dtype, _policy_mod.DTypePolicy):
        raise TypeError(f"{owner}: dtype must be None, a str, a policy, a numpy dtype or a "
                        f"serialized policy dict, got {type(dtype).__name__}: {dtype!r}")
    return _policies.get(dtype)


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
    """

    def __init__(self, trainable=True, name=None, dtype=None, autocast=True, input_shape=None,
                 **kwargs):
        owner = type(self).__name__
        if kwargs:
            raise TypeError(f"{owner}: unexpected keyword argument(s) {sorted(kwargs)}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{owner}: name must be a str, got {type(name).__name__}")
        self.name = name if name is not None else _unique_name(_snake(owner))
        self.trainable = bool(trainable)
        self.autocast = bool(autocast)
        self._dtype_policy = resolve_policy(owner, dtype)
        self._input_shape_arg = None if input_shape is None else tuple(input_shape)
        self.built = False
        self._names = []          # weight names
        self._values = []         # weight arrays, variable dtype
        self._trainable_flags = []
        self._regularizers = []
        self._version = 0
        self._cache_key = None
        self._cache = None
        self._packed = {}
        self.gradients = None
        self._out_dtype = None
        self.input_shape = None
        self.output_shape = None

    # -- policy ---------------------------------------------------------------------------------
    @property
    def dtype_policy(self):
        return self._dtype_policy

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
    def add_weight(self, name, shape, initializer="zeros", regularizer=None, trainable=True,
                   seed=None):
        """Create a weight in the variable dtype and return the array."""
        vd = self.variable_dtype or "float32"
        value = _initializers.initialize(initializer, shape, np_dtype(vd), seed=seed)
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

    def weight_names(self):
        return [f"{self.name}/{self._names[i]}" for i in self._weight_index_order()]

    def get_weights(self):
        """Copies of the weights, in Keras order (Dense: kernel (in, out), bias (out,))."""
        return [self._values[i].copy() for i in self._weight_index_order()]

    def set_weights(self, weights):
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

    def packed_weight(self, index):
        """Weight ``index`` (creation order) packed by ``kernels.pack`` in the compute dtype, for
        inference products; cached until the weights change or the packed panels go stale."""
        cd = self._compute_np()
        key = (self._version, cd)
        entry = self._packed.get(index)
        if entry is None or entry[0] != key or entry[1].stale:
            entry = (key, kernels.pack(self._values[index], dtype=cd))
            self._packed[index] = entry
        return entry[1]

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

    def count_params(self):
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

    def __call__(self, inputs, training=False):
        x = self._prepare_input(inputs)
        if not self.built:
            self.build_from_shape(x.shape)
        else:
            self.check_input_shape(x.shape)
        y = self.call(x, training=training)
        self._out_dtype = y.dtype
        return y

    def build_from_shape(self, input_shape):
        input_shape = tuple(input_shape)
        self.build(input_shape)
        self.input_shape = (None,) + tuple(input_shape[1:])
        self.output_shape = self.compute_output_shape(self.input_shape)
        self.built = True

    def build(self, input_shape):
        """Create the weights for inputs of ``input_shape`` (batch dimension first)."""

    def check_input_shape(self, shape):
        """Raise ValueError if a built layer cannot take inputs of ``shape``."""
        if self.input_shape is None:
            return
        expected = self.input_shape
        if len(shape) != len(expected) or any(e is not None and e != s
                                               for e, s in zip(expected[1:], shape[1:])):
            raise ValueError(f"{type(self).__name__} '{self.name}': expected input of shape "
                             f"{expected}, received {tuple(shape)}")

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def call(self, inputs, training=False):
        return inputs

    def backward(self, dy, need_input_grad=True):
        """Gradient of the last training call: returns dL/dx; weight gradients go to
        ``self.gradients``."""
        raise NotImplementedError(f"{type(self).__name__} '{self.name}' has no backward pass; "
                                  f"it can be used for inference only")

    # -- config ---------------------------------------------------------------------------------
    def _policy_config(self):
        try:
            return _policies.serialize(self._dtype_policy)
        except Exception:
            return self._dtype_policy.name

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable,
                  "dtype": self._policy_config()}
        if not self.autocast:
            config["autocast"] = False
        if self._input_shape_arg is not None:
            config["input_shape"] = self._input_shape_arg
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name!r}, policy={self._dtype_policy.name!r}>"
