"""Functional models: ``Model(inputs, outputs)`` (``keras.Model`` built from a graph).

Design:
  A. A model is a layer: it can be called on arrays, on KerasTensors (a node in another model)
     and trained inside another model.  Its weights are its layers' weights, layer by layer in
     ``model.layers`` order (each layer's trainable weights first), shared arrays counted once.
  B. Inputs are matched to the model's inputs by position (a list), by name (a dict keyed by
     the Input names) or as one array for a single input.  An ``Input`` with an explicit dtype
     converts what it receives to that dtype; one without (float32 in configs, as Keras)
     passes floating arrays through, so each layer rounds them once to its compute dtype.
  C. Configs are Keras 3's: layers with their inbound nodes (the KerasTensors of each call,
     named by [layer name, node index, tensor index]), ``input_layers`` and ``output_layers``.
     ``from_config`` reads that form and tf.keras 2.x's (nodes as lists of
     [layer name, node index, tensor index, kwargs]).  In ``input_layers`` and
     ``output_layers`` (not in the calls' arguments) a nested functional model's node indices
     count one extra node of its own, as Keras writes them.
"""
from __future__ import annotations

import os
import re
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike

from mixedcore import layers as _layers
from mixedcore import quantizers as _quantizers
from mixedcore._dtypes import as_numeric_array, is_floating, np_dtype, to_compute
from mixedcore.layers._base import Layer, _unique_name
from mixedcore.layers._core import InputLayer
from mixedcore.layers._node import KerasTensor, any_symbolic, flatten, pack_like
from mixedcore.models._graph import Graph
from mixedcore.trainers.trainer import Trainer

__all__ = ["Model"]


class Model(Trainer, Layer):
    """A model from a graph of layer calls (``keras.Model(inputs, outputs)``).

    Parameters
    ----------
    inputs : KerasTensor, or a list / dict of them
        What ``Input(...)`` returned (or intermediate tensors of a graph).
    outputs : KerasTensor, or a list / dict of them
        Tensors computed from ``inputs`` by layer calls.
    name : str, optional
    trainable : bool, default True
    dtype : policy-like, optional
        The model's own policy (global policy at construction by default): ``compile`` adds loss
        scaling when it is mixed_float16, as Keras does.

    Examples
    --------
    >>> inputs = layers.Input(shape=(784,))
    >>> x = layers.Dense(256, activation="relu")(inputs)
    >>> outputs = layers.Dense(10, activation="softmax", dtype="float32")(x)
    >>> model = models.Model(inputs, outputs)
    """

    _keras_module = "keras.src.models.functional"
    _keras_class = "Functional"
    _own_node = 1          # node indices in configs count one node of the model itself

    def __init__(self, inputs=None, outputs=None, name=None, trainable=True, dtype=None,
                 **kwargs):
        if inputs is None or outputs is None:
            raise TypeError("Model: give inputs and outputs, e.g. Model(inputs, outputs) with "
                            "inputs from layers.Input(...); mixedcore builds models from a graph "
                            "(or use models.Sequential)")
        self._init_model(name, trainable, dtype, kwargs, "functional")
        self._set_graph(inputs, outputs)

    def _init_model(self, name, trainable, dtype, kwargs, default_name):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}: name must be a str, got "
                            f"{type(name).__name__}")
        Layer.__init__(self, trainable=trainable, name=name or _unique_name(default_name),
                       dtype=dtype, autocast=False, **kwargs)
        self._init_training()
        self._graph = None
        self._inputs_struct = None
        self._outputs_struct = None
        self.inputs = []
        self.outputs = []
        self.output_names = []
        self.input_names = []
        self._train_cache = None

    def _set_graph(self, inputs, outputs):
        owner = f"{type(self).__name__} '{self.name}'"
        if isinstance(inputs, dict):
            for key, t in inputs.items():
                if not isinstance(key, str):
                    raise TypeError(f"{owner}: input dict keys must be str, got {key!r}")
        self._graph = Graph(owner, flatten(inputs), flatten(outputs))
        self._inputs_struct = inputs
        self._outputs_struct = outputs
        self.inputs = flatten(inputs)
        self.outputs = flatten(outputs)
        self.input_names = [t.keras_history[0].name for t in self.inputs]
        # names that losses, targets and logs use: the dict keys, else the output layers' names
        self.output_names = (sorted(outputs) if isinstance(outputs, dict) else
                             [t.keras_history[0].name for t in self.outputs])
        self._metric_fns = None
        self.built = True

    # -- pickling -------------------------------------------------------------------------------
    def __getstate__(self):
        """The layers (weights, configs, policies), the graph's tensors and the compile state;
        not the run plan (keyed by object ids, redone on unpickling) nor anything derived from
        the weights (Layer.__getstate__)."""
        state = super().__getstate__()
        state["_graph"] = None
        state["_metric_fns"] = None
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if self.__dict__.get("outputs") and self.__dict__.get("inputs") is not None \
                and state.get("built", False):
            owner = f"{type(self).__name__} '{self.name}'"
            self._graph = Graph(owner, self.inputs, self.outputs)

    # -- structure ------------------------------------------------------------------------------
    @property
    def layers(self):
        """The layers in Keras's order (InputLayers included; the Keras operations recorded
        as nodes, such as ``x + y``, left out, as Keras leaves them)."""
        if self._graph is None:
            return []
        return [layer for layer in self._graph.layers
                if not getattr(layer, "_is_operation", False)]

    def get_layer(self, name=None, index=None):
        """A layer by name or by index in :attr:`layers`."""
        layers = self.layers
        if index is not None:
            if name is not None:
                raise ValueError("get_layer: give a name or an index, not both")
            if not isinstance(index, (int, np.integer)) or not -len(layers) <= index < len(layers):
                raise ValueError(f"get_layer: index {index!r} is out of range for a model of "
                                 f"{len(layers)} layers")
            return layers[index]
        for layer in layers:
            if layer.name == name:
                return layer
        raise ValueError(f"get_layer: no layer named {name!r}; layers: "
                         f"{[layer.name for layer in layers]}")

    def quantize(self, mode: str | None = None, config: Any = None, filters: Any = None) -> None:
        """Quantize the weights of every layer that can be quantized, in place
        (``keras.Model.quantize``; docs/quantization.md).

        Parameters
        ----------
        mode : "int8", "int4" or "float8", optional
            With ``config`` None, the mode's default config (int8: per-row activation
            quantization; int4: weight-only, groups of 128 input rows; float8: unit scales).
        config : QuantizationConfig, optional
            ``mixedcore.quantizers.Int8QuantizationConfig`` / ``Int4QuantizationConfig`` /
            ``Float8QuantizationConfig`` (or its dict).
        filters : str, list of str or callable, optional
            Only layers whose name matches a regular expression (``re.search``), or for which
            the callable returns True.

        Notes
        -----
        The layers that hold quantizable weights (Dense, EinsumDense; Embedding for int8 /
        int4; MultiHeadAttention's four projections, which the filters see as Keras's
        sub-layers "query", "key", "value" and "attention_output") are quantized; layers
        already quantized and the others are left as they are, silently.
        The weights are the bytes Keras's ``quantize`` gives.

        Raises
        ------
        ValueError
            An unknown mode; a config contradicting ``mode``; bad ``filters``; int8 under a
            float16 policy; an unbuilt model.
        """
        owner = f"{type(self).__name__} '{self.name}'.quantize"
        config = _quantizers.resolve_config(owner, mode, config)
        if filters is not None and not (isinstance(filters, (str, list, tuple))
                                        or callable(filters)):
            raise ValueError(f"{owner}: The `filters` argument must be a regex string, a list "
                             f"of regex strings, or a callable. Received: "
                             f"{type(filters).__name__}")
        if isinstance(filters, (list, tuple)) and not all(isinstance(f, str) for f in filters):
            raise ValueError(f"{owner}: filters must be regular expressions (str), got "
                             f"{filters!r}")
        if not self.built:
            raise ValueError(f"{owner}: the model is not built; build or call it first")

        def wanted(layer):
            if filters is None:
                return True
            if isinstance(filters, str):
                return re.search(filters, layer.name) is not None
            if isinstance(filters, (list, tuple)):
                return any(re.search(f, layer.name) for f in filters)
            return bool(filters(layer))

        for layer in self._leaf_layers():
            parts = getattr(layer, "quantizable_parts", None)
            if parts is not None:
                # a layer Keras builds from sub-layers (MultiHeadAttention): Keras quantizes
                # the sub-layers, so the filters see them
                chosen = [p for p in parts() if wanted(p)]
                if chosen and config.mode in ("int8", "int4", "float8"):
                    layer.quantize(config.mode, config=config, parts=chosen)
                continue
            if not hasattr(layer, "quantize") or not wanted(layer):
                continue
            if layer.quantization_mode is not None or config.mode not in layer._MODES:
                continue
            layer.quantize(config.mode, config=config)

    def _leaf_layers(self):
        """Every layer with weights of its own, nested models expanded, each once."""
        seen, out = set(), []
        for layer in self.layers:
            subs = layer._leaf_layers() if isinstance(layer, Model) else [layer]
            for sub in subs:
                if id(sub) not in seen:
                    seen.add(id(sub))
                    out.append(sub)
        return out

    @property
    def input_shape(self):
        shapes = [t.shape for t in self.inputs]
        return shapes[0] if len(shapes) == 1 else shapes

    @input_shape.setter
    def input_shape(self, value):        # Layer.__init__ sets it; a model derives it
        pass

    @property
    def output_shape(self):
        shapes = [t.shape for t in self.outputs]
        if not shapes:
            return None
        return shapes[0] if len(shapes) == 1 else shapes

    @output_shape.setter
    def output_shape(self, value):
        pass

    # -- weights --------------------------------------------------------------------------------
    def _unique(self, arrays):
        seen, out = set(), []
        for w in arrays:
            if id(w) not in seen:
                seen.add(id(w))
                out.append(w)
        return out

    @property
    def weights(self):
        return self._unique(w for layer in self.layers for w in layer.weights)

    @property
    def trainable_weights(self):
        if not self.trainable:
            return []
        return self._unique(w for layer in self.layers for w in layer.trainable_weights)

    @property
    def non_trainable_weights(self):
        if not self.trainable:
            return self.weights
        trainable = {id(w) for w in self.trainable_weights}
        return [w for w in self.weights if id(w) not in trainable]

    def count_params(self):
        return int(sum(w.size for w in self.weights))

    def weights_updated(self):
        for layer in self._leaf_layers():
            layer.weights_updated()

    def regularization_losses(self):
        value, grads = self._regularization()
        return value, [grads.get(id(w)) for w in self.trainable_weights]

    def get_weights(self) -> list[np.ndarray]:
        """All weights, layer by layer, in Keras order and shapes (copies)."""
        return [w.copy() for w in self.weights]

    def _weight_specs(self):
        names = {}
        for layer in self._leaf_layers():
            for name, w in zip(layer.weight_names(), layer.weights):
                names.setdefault(id(w), name)
        return [(names.get(id(w), "?"), w.shape) for w in self.weights]

    def set_weights(self, weights: Sequence[ArrayLike]) -> None:
        """Set all weights from a list in :meth:`get_weights` order (e.g. a Keras model's).

        Raises
        ------
        ValueError
            The model is not built, the count differs or a shape differs (message: expected vs
            received).  Nothing is changed then.
        TypeError
            A non-numeric array.
        """
        owner = f"{type(self).__name__} '{self.name}'.set_weights"
        if not self.built:
            raise ValueError(f"{owner}: the model is not built yet; start it with Input(shape=...) "
                             f"or call build() first")
        if isinstance(weights, np.ndarray) or not hasattr(weights, "__len__"):
            raise TypeError(f"{owner}: expected a list of arrays, got {type(weights).__name__}")
        specs = self._weight_specs()
        if len(weights) != len(specs):
            listing = ", ".join(f"{n} {s}" for n, s in specs)
            raise ValueError(f"{owner}: expected {len(specs)} weight arrays ({listing}), "
                             f"received {len(weights)}")
        arrays = [as_numeric_array(owner, w) for w in weights]
        for k, ((name, shape), w) in enumerate(zip(specs, arrays)):
            if w.shape != shape:
                raise ValueError(f"{owner}: weight {k} ({name}) has shape {w.shape}, expected "
                                 f"{shape}")
        for target, w in zip(self.weights, arrays):
            target[...] = to_compute(w, target.dtype) if is_floating(w.dtype) else w
        self.weights_updated()

    def save_weights(self, filepath: str | os.PathLike, overwrite: bool = True) -> None:
        """Write the weights: ``*.weights.h5`` in Keras 3's layout (``keras.Model.load_weights``
        reads it), ``*.h5`` in tf.keras's legacy layout, ``*.npz`` as arrays in get_weights
        order with their names.  See ``models.save_weights``."""
        from mixedcore.saving import saving_api
        saving_api.save_weights(self, filepath, overwrite=overwrite)

    def load_weights(self, filepath: str | os.PathLike, skip_mismatch: bool = False) -> None:
        """Read weights into the built model and set them (counts and shapes must match).

        Reads ``.weights.h5`` (Keras 3), the weights of a ``.keras`` archive, legacy ``.h5``
        weights or model files, what :meth:`save_weights` writes as ``.npz``, and a plain
        ``np.savez(path, *weights)`` file (keys ``arr_0``, ``arr_1``, ...), such as
        ``np.savez("w.npz", *keras_model.get_weights())``.  See ``models.load_weights``.
        """
        from mixedcore.saving import saving_api
        saving_api.load_weights(self, filepath, skip_mismatch=skip_mismatch)

    def save(self, filepath: str | os.PathLike, overwrite: bool = True) -> None:
        """Write the model (config, weights, compile state) to ``*.keras`` (Keras 3's archive)
        or ``*.h5`` (the legacy format); any other name is a ValueError.  Keras's
        ``keras.models.load_model`` reads both.  See ``models.save_model``."""
        from mixedcore.saving import saving_api
        saving_api.save_model(self, filepath, overwrite=overwrite)

    def to_json(self, **kwargs):
        """The model's config (Keras's ``to_json`` form, with the compile config when compiled)
        as a JSON string; ``kwargs`` go to ``json.dumps``.  ``models.model_from_json`` reads it
        back."""
        from mixedcore.saving import saving_api
        return saving_api.model_to_json(self, **kwargs)

    # -- calling --------------------------------------------------------------------------------
    def input_keys(self):
        """The keys by which a dict of inputs is read, in the order of :attr:`inputs`: those of
        the dict the model was made from (sorted), else the input names."""
        if isinstance(self._inputs_struct, dict):
            return sorted(self._inputs_struct)
        return list(self.input_names)

    def build_from_sample(self, owner, sample):
        """Build a model that waits for its first batch from ``sample`` (one batch of inputs);
        nothing when the model is built."""
        if self._graph is None:
            self._build_from_data(owner, sample)

    def _standardize_inputs(self, owner, x):
        """``x`` as a flat list of arrays aligned with :attr:`inputs`, checked against them."""
        self.build_from_sample(owner, x)
        names = self.input_names
        n = len(self.inputs)
        if isinstance(x, dict):
            keys = self.input_keys()
            missing = [k for k in keys if k not in x]
            if missing:
                raise ValueError(f"{owner}: inputs {missing} are missing; got keys {sorted(x)}, "
                                 f"the model's inputs are {keys}")
            xs = [x[k] for k in keys]
        elif n > 1:
            if not isinstance(x, (list, tuple)) or len(x) != n:
                got = (f"a list of {len(x)}" if isinstance(x, (list, tuple))
                       else type(x).__name__)
                raise ValueError(f"{owner}: the model has {n} inputs {names}; give a list of "
                                 f"{n} arrays or a dict keyed by input names, got {got}")
            xs = list(x)
        elif isinstance(x, (list, tuple)) and len(x) == 1 and isinstance(x[0], np.ndarray):
            xs = [x[0]]
        else:
            xs = [x]
        out = []
        batch = None
        for t, v in zip(self.inputs, xs):
            a = as_numeric_array(owner, v)
            if a.ndim != len(t.shape) or any(e is not None and e != s
                                             for e, s in zip(t.shape, a.shape)):
                raise ValueError(f"{owner}: expected input of shape {t.shape}, received {a.shape}"
                                 + (f" for input '{t.keras_history[0].name}'" if n > 1 else ""))
            layer = t.keras_history[0]
            if isinstance(layer, InputLayer) and layer._dtype_given:
                target = np_dtype(layer.input_dtype)
                if a.dtype != target:
                    a = to_compute(a, target) if is_floating(a.dtype) and is_floating(target) \
                        else a.astype(target)
            if batch is None:
                batch = a.shape[0] if a.ndim else None
            elif a.ndim and a.shape[0] != batch:
                raise ValueError(f"{owner}: all inputs need the same number of samples, got "
                                 f"{[np.shape(v)[0] if np.ndim(v) else None for v in xs]}")
            out.append(a)
        return out

    def _build_from_data(self, owner, x):
        raise ValueError(f"{owner}: the model has no graph")

    def _run(self, xs, training):
        if not training:
            return self._graph.infer(xs), None
        return self._graph.run(xs, training=True)

    def _backward(self, states, output_grads, logits_grads):
        return self._graph.backward(states, output_grads, False, logits_grads)[1]

    def _output_logits(self, i, states):
        """The logits of output ``i`` when a softmax layer makes it and nothing else reads it."""
        t = self.outputs[i]
        layer = t.keras_history[0]
        if (not hasattr(layer, "logits") or self._graph.uses.get(id(t), 0) != 1
                or isinstance(layer, InputLayer)):
            return None, None
        node = t.node
        if len(node.output_tensors) != 1 or id(node) not in states:
            return None, None
        layer._train_cache = states[id(node)][0]
        logits = layer.logits()
        return (logits, node) if logits is not None else (None, None)

    def pack_outputs(self, outs):
        """A flat list aligned with :attr:`outputs` arranged as the model's outputs."""
        if isinstance(self._outputs_struct, (list, tuple, dict)):
            return pack_like(self._outputs_struct, outs)
        return outs[0]

    def __call__(self, *args, training=False, **kwargs):
        """Run the model on one batch (no batching, no progress bar), or add it to a graph
        when called on KerasTensors."""
        kwargs.pop("mask", None)
        if any_symbolic(args, kwargs):
            return self._call_symbolic(args, kwargs)
        if len(args) != 1 or kwargs:
            raise TypeError(f"{type(self).__name__} '{self.name}': call the model with one "
                            f"argument (an array, or a list / dict of arrays) and training=, got "
                            f"{len(args)} positional and keyword(s) {sorted(kwargs)}")
        return self.call(args[0], training=training)

    def call(self, inputs, training=False):
        xs = self._standardize_inputs(f"{type(self).__name__} '{self.name}'", inputs)
        outs, states = self._run(xs, training)
        if training:
            self._train_cache = states
        return self.pack_outputs(outs)

    def _build_for_call(self, args, kwargs):
        self._check_call(args, kwargs)

    def _check_call(self, args, kwargs):
        owner = f"{type(self).__name__} '{self.name}'"
        given = flatten(args[0]) if not isinstance(args[0], dict) else \
            [args[0][k] for k in sorted(args[0])]
        if len(given) != len(self.inputs):
            raise ValueError(f"{owner}: expected {len(self.inputs)} input(s), received "
                             f"{len(given)}")
        for t, g in zip(self.inputs, given):
            shape = tuple(g.shape)
            if len(shape) != len(t.shape) or any(e is not None and s is not None and e != s
                                                 for e, s in zip(t.shape[1:], shape[1:])):
                raise ValueError(f"{owner}: expected input of shape {t.shape}, received {shape}")

    def compute_output_spec(self, *args, **kwargs):
        given = flatten(args[0])
        batch = given[0].shape[0] if given and len(given[0].shape) else None
        outs = [KerasTensor((batch,) + tuple(t.shape[1:]), t.dtype) for t in self.outputs]
        return self.pack_outputs(outs)

    def backward(self, dy, need_input_grad=True):
        """Backpropagate the last training call (the model used as a layer of another)."""
        states = self._train_cache
        dys = flatten(dy) if isinstance(self._outputs_struct, (list, tuple, dict)) else [dy]
        input_grads, weight_grads = self._graph.backward(states, dys, need_input_grad)
        self.gradients = [weight_grads.get(id(w)) for w in self.trainable_weights]
        if not need_input_grad:
            return None
        if isinstance(self._inputs_struct, (list, tuple, dict)):
            return pack_like(self._inputs_struct, input_grads)
        return input_grads[0]

    def predict_step(self, x):
        return self(x)

    def inference_nbytes(self) -> int:
        """Bytes inference holds: its layers' weights as inference holds them (each layer's
        ``inference_nbytes()``) plus the activation arenas of the compiled inference plans the
        model keeps (one per input shape recently predicted, at most four; docs/inference.md);
        ``arena_nbytes()`` is the second part alone."""
        return sum(layer.inference_nbytes() for layer in self.layers) + self.arena_nbytes()

    def arena_nbytes(self) -> int:
        """Bytes of the activation arenas of the compiled inference plans this model keeps: 0
        before the first inference call, and for a model whose masks flow (it runs layer by
        layer)."""
        return self._graph.arena_nbytes() if self._graph is not None else 0

    def _config_build_shape(self):
        return None

    # -- summary and config ---------------------------------------------------------------------
    def _connections(self, layer):
        parts = []
        for node in self._graph.nodes:
            if node.layer is layer:
                for t in node.input_tensors:
                    src, index, k = t.keras_history
                    parts.append(f"{src.name}[{index}][{k}]")
        return ", ".join(parts) if parts else "-"

    def _shape_text(self, layer):
        for node in self._graph.nodes:
            if node.layer is layer:
                shapes = [t.shape for t in node.output_tensors]
                return str(shapes[0] if len(shapes) == 1 else shapes)
        if isinstance(layer, InputLayer):
            return str(layer.input_shape)
        return str(getattr(layer, "output_shape", "?"))

    def summary(self, line_length=None, print_fn=None, show_connections=True):
        """Print layer names, output shapes, parameter counts, dtype policies and (for a graph)
        which layer outputs each layer reads."""
        if not self.built:
            raise ValueError("This model has not yet been built. Build the model first by "
                             "calling build() or by calling the model on a batch of data, or "
                             "start it with Input(shape=...).")
        print_fn = print_fn or print
        header = ["Layer (type)", "Output Shape", "Param #", "Policy"]
        if show_connections:
            header.append("Connected to")
        rows = [tuple(header)]
        for layer in self.layers:
            policy = layer.dtype_policy.name if not isinstance(layer, InputLayer) else \
                layer.input_dtype
            row = [f"{layer.name} ({type(layer).__name__})", self._shape_text(layer),
                   f"{layer.count_params():,}", policy]
            if show_connections:
                row.append(self._connections(layer))
            rows.append(tuple(row))
        widths = [max(len(r[c]) for r in rows) + 3 for c in range(len(header))]
        total = line_length or sum(widths)
        print_fn(f'Model: "{self.name}"')
        print_fn("=" * total)
        for i, row in enumerate(rows):
            print_fn("".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
            if i == 0:
                print_fn("=" * total)
        print_fn("=" * total)
        trainable = sum(w.size for w in self.trainable_weights)
        total_params = self.count_params()
        memory = sum(w.nbytes for w in self.weights)
        print_fn(f"Total params: {total_params:,} ({memory / 1024:.1f} KB)")
        print_fn(f"Trainable params: {trainable:,}")
        print_fn(f"Non-trainable params: {total_params - trainable:,}")
        arena = self.arena_nbytes()
        if arena:
            print_fn(f"Inference arenas: {arena / 1024:.1f} KB (the plans of "
                     f"{len(self._graph._plans)} input shapes)")

    def get_config(self):
        """Keras 3's functional config (see the module notes)."""
        own = {id(n) for n in self._graph.nodes}
        own.update(id(t.node) for t in self.inputs if isinstance(t.keras_history[0], InputLayer))
        every = list(self._graph.layers)         # the operations' nodes included
        reindex = {}
        for layer in every:
            kept = 0
            for node in layer._inbound_nodes:
                if id(node) in own:
                    reindex[id(node)] = kept
                    kept += 1

        def tensor_ref(t):
            layer, _, k = t.keras_history
            return [layer.name, reindex[id(t.node)], k]

        def serialize_arg(value):
            if isinstance(value, KerasTensor):
                return {"class_name": "__keras_tensor__",
                        "config": {"shape": list(value.shape), "dtype": value.dtype,
                                   "keras_history": tensor_ref(value)}}
            if isinstance(value, (list, tuple)):
                return [serialize_arg(v) for v in value]
            if isinstance(value, dict):
                return {k: serialize_arg(v) for k, v in value.items()}
            if isinstance(value, np.generic):
                return value.item()
            if isinstance(value, slice):
                return {"class_name": "__slice__",
                        "config": {"start": value.start, "stop": value.stop,
                                   "step": value.step}}
            return value

        layer_configs = []
        for layer in every:
            entry = _layers.serialize(layer)
            entry["name"] = layer.name
            entry["inbound_nodes"] = [
                {"args": serialize_arg(list(node.args)), "kwargs": serialize_arg(node.kwargs)}
                for node in layer._inbound_nodes
                if id(node) in own and node.input_tensors]
            layer_configs.append(entry)

        def refs(structure):
            if isinstance(structure, KerasTensor):
                ref = tensor_ref(structure)
                ref[1] += getattr(structure.keras_history[0], "_own_node", 0)
                return ref
            if isinstance(structure, dict):
                return {k: refs(v) for k, v in structure.items()}
            return [refs(v) for v in structure]

        return {"name": self.name, "trainable": self.trainable, "layers": layer_configs,
                "input_layers": refs(self._inputs_struct),
                "output_layers": refs(self._outputs_struct)}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A model from :meth:`get_config`'s form (Keras 3's, or tf.keras 2.x's)."""
        owner = f"{cls.__name__}.from_config"
        if not isinstance(config, dict) or "layers" not in config:
            raise ValueError(f"{owner}: expected a dict with 'layers', 'input_layers' and "
                             f"'output_layers', got {_short(config)}")
        for key in ("input_layers", "output_layers"):
            if key not in config:
                raise ValueError(f"{owner}: the config has no {key!r}")
        created = {}
        pending = {}
        order = []
        for layer_data in config["layers"]:
            if not isinstance(layer_data, dict):
                raise ValueError(f"{owner}: a layer entry must be a dict, got "
                                 f"{_short(layer_data)}")
            name = layer_data.get("name") or layer_data.get("config", {}).get("name")
            layer = _layers.deserialize(layer_data, custom_objects)
            if name is None:
                name = layer.name
            if name in created:
                raise ValueError(f"{owner}: two layers are named {name!r}")
            created[name] = layer
            order.append(name)
            nodes = layer_data.get("inbound_nodes") or []
            if nodes:
                pending[name] = list(nodes)
        while pending:
            progress = False
            for name in order:
                queue = pending.get(name)
                if not queue:
                    continue
                layer = created[name]
                while queue:
                    try:
                        args, kwargs = _node_arguments(owner, queue[0], created)
                    except _NotYet:
                        break
                    layer(*args, **kwargs)
                    queue.pop(0)
                    progress = True
                if not queue:
                    del pending[name]
            if not progress:
                raise ValueError(f"{owner}: the graph has a cycle or calls that refer to nodes "
                                 f"that are never made; unresolved layers: {sorted(pending)}")

        def tensor(ref):
            name, index, k = ref[0], int(ref[1]), int(ref[2])
            if name not in created:
                raise ValueError(f"{owner}: unknown layer {name!r} in inputs/outputs")
            layer = created[name]
            index -= getattr(layer, "_own_node", 0)
            try:
                return layer._inbound_nodes[index].output_tensors[k]
            except IndexError:
                raise ValueError(f"{owner}: layer {name!r} has no output [{ref[1]}][{k}]") \
                    from None

        def tensors(structure):
            if (isinstance(structure, (list, tuple)) and len(structure) == 3
                    and isinstance(structure[0], str)):
                return tensor(structure)
            if isinstance(structure, dict):
                return {key: tensors(v) for key, v in structure.items()}
            if isinstance(structure, (list, tuple)):
                return [tensors(v) for v in structure]
            raise ValueError(f"{owner}: cannot read the tensor reference {structure!r}")

        inputs = tensors(config["input_layers"])
        outputs = tensors(config["output_layers"])
        if isinstance(inputs, list) and len(inputs) == 1 and \
                isinstance(config["input_layers"][0], (list, tuple)):
            inputs = inputs          # tf.keras writes [[name, 0, 0]] for one input: keep a list
        return cls(inputs, outputs, name=config.get("name"),
                   trainable=config.get("trainable", True))


class _NotYet(Exception):
    """A node refers to a layer call that has not been made yet."""


def _short(value, limit=200):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _node_arguments(owner, node_data, created):
    """(args, kwargs) of one serialized layer call, its tensors looked up among the layers
    made so far (raises _NotYet when one is not made yet)."""

    def lookup(name, index, k):
        if name not in created:
            raise ValueError(f"{owner}: a call refers to the unknown layer {name!r}")
        layer = created[name]
        index = int(index)
        if index >= len(layer._inbound_nodes):
            raise _NotYet()
        outs = layer._inbound_nodes[index].output_tensors
        if int(k) >= len(outs):
            raise ValueError(f"{owner}: layer {name!r} has no output [{index}][{k}]")
        return outs[int(k)]

    if isinstance(node_data, list):          # tf.keras 2.x: [[name, node, tensor, kwargs], ...]
        tensors, kwargs = [], {}
        for entry in node_data:
            if not isinstance(entry, (list, tuple)) or len(entry) not in (3, 4):
                raise ValueError(f"{owner}: cannot read the node entry {_short(entry)}")
            tensors.append(lookup(*entry[:3]))
            if len(entry) == 4 and entry[3]:
                kwargs.update(entry[3])
        args = [tensors[0] if len(tensors) == 1 else tensors]
        return args, _clean_kwargs(kwargs)
    if not isinstance(node_data, dict) or "args" not in node_data:
        raise ValueError(f"{owner}: cannot read the node {_short(node_data)}")

    def revive(value):
        if isinstance(value, dict):
            if value.get("class_name") == "__keras_tensor__":
                history = value.get("config", {}).get("keras_history")
                if not isinstance(history, (list, tuple)) or len(history) != 3:
                    raise ValueError(f"{owner}: a tensor without keras_history: {_short(value)}")
                return lookup(*history)
            if value.get("class_name") == "__slice__":
                return _slice(owner, value)
            return {k: revive(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [revive(v) for v in value]
        return value

    args = revive(node_data.get("args") or [])
    kwargs = revive(node_data.get("kwargs") or {})
    return list(args), _clean_kwargs(kwargs)


def _slice(owner, value):
    """A slice from Keras's ``{"class_name": "__slice__", "config": {start, stop, step}}``."""
    config = value.get("config")
    parts = [config.get(k) for k in ("start", "stop", "step")] if isinstance(config, dict) \
        else None
    if parts is None or not all(p is None or (isinstance(p, int) and not isinstance(p, bool))
                                for p in parts):
        raise ValueError(f"{owner}: cannot read the slice {_short(value)}")
    return slice(*parts)


def _clean_kwargs(kwargs):
    """Keyword arguments of a serialized call without those mixedcore's layers take otherwise
    (``training``; ``mask`` when None)."""
    out = dict(kwargs)
    out.pop("training", None)
    if out.get("mask", 0) is None:
        out.pop("mask")
    return out
