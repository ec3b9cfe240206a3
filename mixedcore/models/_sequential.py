"""Sequential models: a linear stack of layers, run as a functional graph.

Design:
  A. Once the input shape is known (an ``Input`` first, a first layer with ``input_shape=``, a
     ``build`` call, or the first batch of data), the stack is called on an ``Input`` tensor
     layer by layer and becomes a graph like any functional model's: one engine runs, trains
     and saves both.  Adding or removing a layer afterwards remakes the graph.
  B. ``layers`` lists the stacked layers without the InputLayer, as Keras 3 does; configs are
     Keras 3's (an InputLayer entry first when the input is known, ``build_input_shape``).
  C. A stack whose first layers have an experimental "infer" policy is built from the first
     batch: the input tensor then carries that batch's dtype, from which they resolve.
"""
import numpy as np

from mixedcore import layers as _layers
from mixedcore._dtypes import as_numeric_array, dtype_name
from mixedcore.layers._base import Layer
from mixedcore.layers._core import InputLayer
from mixedcore.layers._node import KerasTensor
from mixedcore.models._model import Model

__all__ = ["Sequential"]


class Sequential(Model):
    """A linear stack of layers (``keras.Sequential``).

    Parameters
    ----------
    layers : list of Layer, optional
        May start with ``Input(shape=...)`` (or give the first layer ``input_shape=``): the model
        is then built at once; otherwise it builds on its first call.
    name : str, optional
    dtype : policy-like, optional
        The model's own policy (global policy at construction by default): ``compile`` adds loss
        scaling when it is mixed_float16, as Keras does.
    trainable : bool, default True

    Examples
    --------
    >>> mixedcore.set_policy("mixed_bfloat16")
    >>> model = Sequential([Input(shape=(784,)), Dense(256, activation="relu"),
    ...                     Dense(10), Activation("softmax", dtype="float32")])
    >>> probs = model.predict(x)
    """

    _keras_module = "keras"
    _keras_class = "Sequential"
    _own_node = 0

    def __init__(self, layers=None, name=None, dtype=None, trainable=True):
        self._init_model(name, trainable, dtype, {}, "sequential")
        self._stack = []
        self._input_layer = None
        self._input_shape = None
        if layers is not None:
            if isinstance(layers, Layer) or not hasattr(layers, "__iter__"):
                raise TypeError(f"Sequential: layers must be a list of layers, got "
                                f"{type(layers).__name__}")
            for layer in layers:
                self.add(layer, rebuild=False)
            self._maybe_build()

    # -- structure ------------------------------------------------------------------------------
    @property
    def layers(self):
        """The stacked layers (without the InputLayer)."""
        return list(self._stack)

    def add(self, layer, rebuild=True):
        """Append a layer (an ``Input`` / ``InputLayer`` only as the first)."""
        if isinstance(layer, KerasTensor) and isinstance(layer.keras_history[0], InputLayer):
            layer = layer.keras_history[0]
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add: expected a mixedcore layer, got "
                            f"{type(layer).__name__}")
        if isinstance(layer, InputLayer):
            if self._stack or self._input_layer is not None:
                raise ValueError("Sequential.add: an Input layer may only come first")
            self._input_layer = layer
            self._input_shape = layer.input_shape
            return
        if any(existing is layer for existing in self._stack):
            raise ValueError(f"Sequential.add: layer '{layer.name}' is already in the model")
        if not self._stack and self._input_shape is None and layer._input_shape_arg is not None:
            self._input_shape = (None,) + layer._input_shape_arg
        self._stack.append(layer)
        if rebuild:
            self._maybe_build()

    def pop(self, rebuild=True):
        """Remove and return the last layer."""
        if not self._stack:
            raise ValueError("Sequential.pop: the model has no layers")
        layer = self._stack.pop()
        self._graph = None
        self.built = False
        if rebuild:
            self._maybe_build()
        return layer

    def _maybe_build(self):
        if self._input_shape is not None and self._stack and not self._needs_data_dtype():
            self._make_graph(None)
        else:
            self._graph = None
            self.built = False

    def _needs_data_dtype(self):
        """An experimental "infer" policy in the stack resolves from the data's dtype."""
        return any(layer.compute_dtype is None for layer in self._stack)

    def _make_graph(self, dtype):
        """Call the stack on an Input tensor; ``dtype`` (the data's) when the stack needs it."""
        input_layer = self._input_layer
        if input_layer is None or (dtype is not None and not input_layer._dtype_given):
            name = input_layer.name if input_layer is not None else "input_layer"
            input_layer = InputLayer(batch_shape=self._input_shape, dtype=dtype, name=name)
            input_layer._dtype_given = False
            if self._input_layer is None:
                self._input_layer = input_layer
        x = input_layer.output
        for layer in self._stack:
            x = layer(x)
            if isinstance(x, (list, tuple, dict)):
                raise ValueError(f"Sequential: layer '{layer.name}' returns several outputs; "
                                 f"a Sequential model needs one tensor between layers (use "
                                 f"models.Model)")
        self._set_graph(input_layer.output, x)

    def _build_from_data(self, owner, x):
        if not self._stack:
            raise ValueError(f"{owner}: the model has no layers")
        a = as_numeric_array(owner, x)
        if a.ndim == 0:
            raise ValueError(f"{owner}: expected a batch (an array with a batch dimension), "
                             f"received shape {a.shape}")
        if self._input_shape is None:
            self._input_shape = (None,) + a.shape[1:]
        self._make_graph(dtype_name(a.dtype) if self._needs_data_dtype() else None)

    def build(self, input_shape=None):
        """Build for inputs of ``input_shape`` (batch dimension first, may be None)."""
        if input_shape is not None:
            input_shape = tuple(input_shape)
            self._input_shape = (None,) + input_shape[1:]
        if self._input_shape is None:
            raise ValueError("Sequential.build: give an input shape, e.g. build((None, 784)), or "
                             "start the model with Input(shape=...)")
        if not self._stack:
            raise ValueError("Sequential.build: the model has no layers")
        self._make_graph(None)

    @property
    def input_shape(self):
        return self._input_shape if self._graph is None else Model.input_shape.fget(self)

    @input_shape.setter
    def input_shape(self, value):
        pass

    @property
    def output_shape(self):
        return None if self._graph is None else Model.output_shape.fget(self)

    @output_shape.setter
    def output_shape(self, value):
        pass

    # -- weights and calling --------------------------------------------------------------------
    def _leaf_layers(self):
        seen, out = set(), []
        for layer in self._stack:
            subs = layer._leaf_layers() if isinstance(layer, Model) else [layer]
            for sub in subs:
                if id(sub) not in seen:
                    seen.add(id(sub))
                    out.append(sub)
        return out

    def _standardize_inputs(self, owner, x):
        self.build_from_sample(owner, x)
        if isinstance(x, (list, tuple)) and not isinstance(x, np.ndarray):
            x = as_numeric_array(owner, x)      # one input: a nested list is array data
        return Model._standardize_inputs(self, owner, x)

    def summary(self, line_length=None, print_fn=None, show_connections=False):
        Model.summary(self, line_length, print_fn, show_connections)

    def _config_build_shape(self):
        return None if self._input_shape is None else list(self._input_shape)

    # -- config ---------------------------------------------------------------------------------
    def get_config(self):
        entries = [_layers.serialize(layer) for layer in self._stack]
        if self._input_layer is not None:
            entries.insert(0, _layers.serialize(self._input_layer))
        config = {"name": self.name, "trainable": self.trainable,
                  "dtype": self._policy_config(), "layers": entries}
        if self._input_shape is not None:
            config["build_input_shape"] = list(self._input_shape)
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        if not isinstance(config, dict) or "layers" not in config:
            raise ValueError("Sequential.from_config: expected a dict with a 'layers' list")
        if not isinstance(config["layers"], list):
            raise ValueError(f"Sequential.from_config: 'layers' must be a list, got "
                             f"{type(config['layers']).__name__}")
        model = cls(name=config.get("name"), dtype=config.get("dtype"),
                    trainable=config.get("trainable", True))
        for layer_config in config["layers"]:
            model.add(_layers.deserialize(layer_config, custom_objects), rebuild=False)
        shape = config.get("build_input_shape")
        if shape is not None and model._input_shape is None and model._input_layer is None:
            model._input_shape = (None,) + tuple(shape)[1:]
        model._maybe_build()
        return model
