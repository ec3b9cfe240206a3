"""keras_hub's vision models on mixedcore's layers: ``ViTBackbone``, ``ViTImageClassifier`` and
the generic ``ImageClassifier`` head.

Design:
  A. A backbone is a functional :class:`mixedcore.models.Model` whose ``__init__`` builds its
     graph from the hyperparameters (the config is those hyperparameters, as keras_hub writes
     it: no layer list), so a ``.keras`` file keras_hub wrote is read back with
     ``from_config`` and its weights found by the paths Keras files them under.
  B. keras_hub builds the ViT from layers made of sub-layers (the patch embedding, the encoder
     and its blocks).  Here they are :class:`_Composite` layers: a mixedcore layer that owns
     mixedcore layers (Conv2D, Embedding, LayerNormalization, MultiHeadAttention, Dense,
     Dropout) under the attribute paths Keras uses ("mha", "mlp/dense_1",
     "encoder_layers/vi_t_encoder_block_1"...).  The composite's weight list holds the very
     arrays of its parts (own weights first, then each part's in build order, as Keras orders
     ``weights``), so ``get_weights``/``set_weights``, optimizers and saving see one list, and
     ``keras_weight_paths`` files each part's arrays under its path.  Every part takes the
     composite's dtype policy: float32, mixed_float16 and mixed_bfloat16 behave as mixedcore's
     own layers do (16-bit products with float32 accumulation, normalization in float32).
  C. Training: a composite records each part's training state on a tape during a training
     call and runs the parts' ``backward`` in reverse; residual sums add in float32 (float64
     under float64) and round once to the compute dtype, forwards and backwards.
  D. Registration: :func:`register` makes the classes known to configs as built-in layer
     classes under keras_hub's registered names ("keras_hub>ViTBackbone", ...); importing this
     module registers them.  The models carry keras_hub's class and module names
     (``_keras_class``, ``_keras_module``), so what mixedcore saves names keras_hub's classes
     and Keras with keras_hub reads it.
"""
from __future__ import annotations


import numpy as np

from mixedcore._dtypes import to_compute, work_dtype
from mixedcore.dtype_policies import resolve_policy
from mixedcore.layers import _args
from mixedcore.layers._base import Layer, Weight
from mixedcore.layers._conv import Conv2D
from mixedcore.layers._core import Dense, Embedding, Input
from mixedcore.layers._attention import MultiHeadAttention
from mixedcore.layers._normalization import LayerNormalization
from mixedcore.layers._pooling import (GlobalAveragePooling1D, GlobalAveragePooling2D,
                                       GlobalMaxPooling2D)
from mixedcore.layers._regularization import Dropout
from mixedcore.hub._model import _HubModel
from mixedcore.models._model import Model
from mixedcore.saving import object_registration as _registry

__all__ = ["ViTBackbone", "ViTImageClassifier", "ImageClassifier", "ViTPatchingAndEmbedding",
           "ViTEncoder", "ViTEncoderBlock", "ViTMLP", "register", "registered_names"]


# -- helpers --------------------------------------------------------------------------------------

def _add(a, b):
    """``a + b`` in the work dtype of ``a``'s dtype, rounded once to ``a``'s dtype."""
    w = work_dtype(a.dtype)
    return to_compute(to_compute(a, w) + to_compute(b, w), a.dtype)


def _pair(owner, what, value):
    """An int or a pair of ints as a pair of positive ints."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError(f"{owner}: {what} must be an int or a pair of ints, got {value!r}")
        return (_args.positive_int(owner, what, value[0]),
                _args.positive_int(owner, what, value[1]))
    n = _args.positive_int(owner, what, value)
    return (n, n)


def _data_format(owner, value):
    if value is None or value == "channels_last":
        return "channels_last"
    if value == "channels_first":
        return "channels_first"
    raise ValueError(f"{owner}: data_format must be None, 'channels_last' or 'channels_first', "
                     f"got {value!r}")


class _Composite(Layer):
    """A layer made of mixedcore layers (its parts), whose weights are theirs (B, C)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._parts = []                # [(Keras path, layer)] in build order
        self._train_cache = None
        self._tape = None               # the parts' training states, during a call

    # -- structure ---------------------------------------------------------------------------
    def _add_part(self, path, layer, input_shape):
        """Build ``layer`` for ``input_shape`` and make its weights (the same arrays) the
        composite's, named ``<path>/<name>``, in the part's creation order."""
        if not layer.built:
            layer.build_from_shape(input_shape)
        for i in range(len(layer._values)):
            self._names.append(f"{path}/{layer._names[i]}")
            self._values.append(layer._values[i])
            self._trainable_flags.append(layer._trainable_flags[i])
            self._regularizers.append(layer._regularizers[i])
        self._version += 1
        self._parts.append((path, layer))
        return layer

    def keras_weight_paths(self):
        """The composite's own weights under "" and each part's under its path (nested)."""
        where = {id(w): pos for pos, w in enumerate(self.weights)}
        adopted = {id(w) for _, part in self._parts for w in part.weights}
        own = [pos for pos, w in enumerate(self.weights) if id(w) not in adopted]
        out = [("", own)] if own else []
        for path, part in self._parts:
            weights = part.weights
            for sub, positions in part.keras_weight_paths():
                full = f"{path}/{sub}" if sub else path
                out.append((full, [where[id(weights[p])] for p in positions]))
        return out

    def weights_updated(self):
        super().weights_updated()
        for _, part in self._parts:
            part.weights_updated()

    def inference_nbytes(self):
        adopted = {id(w) for _, part in self._parts for w in part._values}
        cd = self._compute_np()
        own = sum(v.size * cd.itemsize for v in self._values if id(v) not in adopted)
        return own + sum(part.inference_nbytes() for _, part in self._parts)

    @property
    def dtype_policy(self):
        return self._dtype_policy

    @dtype_policy.setter
    def dtype_policy(self, value):
        Layer.dtype_policy.fset(self, value)
        for _, part in self._parts:
            part.dtype_policy = self._dtype_policy

    # -- training (C) ------------------------------------------------------------------------
    def _start(self, training):
        self._tape = [] if training else None

    def _run(self, layer, *args, training=False, **kwargs):
        out = layer(*args, training=training, **kwargs)
        if training and self._tape is not None:
            self._tape.append((layer, getattr(layer, "_train_cache", None)))
        return out

    def _finish(self, training):
        if training:
            self._train_cache = {"tape": self._tape, "grads": {}}
        self._tape = None

    def _back(self, layer, dy, need_input_grad=True):
        """The backward of the last recorded call of ``layer``; its weight gradients are
        summed into the composite's."""
        state = self._train_cache
        if state is None or not state["tape"]:
            raise ValueError(f"{type(self).__name__} '{self.name}'.backward: no training call "
                             f"to differentiate; call the layer with training=True first")
        recorded, cache = state["tape"].pop()
        if recorded is not layer:
            raise ValueError(f"{type(self).__name__} '{self.name}'.backward: the recorded calls "
                             f"do not match ({recorded.name} recorded, {layer.name} asked)")
        layer._train_cache = cache
        dx = layer.backward(dy, need_input_grad=need_input_grad)
        grads = state["grads"]
        for w, g in zip(layer.trainable_weights, layer.gradients or []):
            if g is None:
                continue
            g32 = to_compute(np.asarray(g), work_dtype(w.dtype))
            grads[id(w)] = g32 if id(w) not in grads else grads[id(w)] + g32
        return dx

    def _set_composite_gradients(self, own=None):
        """``self.gradients`` from the parts' (and ``own``: {id(weight): gradient})."""
        grads = dict(self._train_cache["grads"]) if self._train_cache else {}
        grads.update(own or {})
        self.gradients = [to_compute(grads[id(w)], w.dtype) if id(w) in grads
                          else np.zeros_like(w) for w in self.trainable_weights]

    def _base_config(self):
        return Layer.get_config(self)


# -- the ViT layers --------------------------------------------------------------------------------

class ViTMLP(_Composite):
    """The feed-forward part of a ViT block: Dense(mlp_dim, gelu), Dropout, Dense(hidden_dim),
    Dropout; Keras's paths "dense_1" and "dense_2"."""

    def __init__(self, hidden_dim, mlp_dim, use_bias=True, dropout_rate=0.0, **kwargs):
        owner = "ViTMLP"
        super().__init__(**kwargs)
        self.hidden_dim = _args.positive_int(owner, "hidden_dim", hidden_dim)
        self.mlp_dim = _args.positive_int(owner, "mlp_dim", mlp_dim)
        self.use_bias = _args.boolean(owner, "use_bias", use_bias)
        self.dropout_rate = _args.number(owner, "dropout_rate", dropout_rate, low=0, high=1,
                                         high_open=True)
        # one Dropout per place (a layer keeps the input shape it was built for)
        self.dropout_1 = Dropout(self.dropout_rate, dtype=self._dtype_policy,
                                 name=f"{self.name}_dropout_1")
        self.dropout_2 = Dropout(self.dropout_rate, dtype=self._dtype_policy,
                                 name=f"{self.name}_dropout_2")

    def build(self, input_shape):
        policy = self._dtype_policy
        self.dense_1 = self._add_part(
            "dense_1", Dense(self.mlp_dim, activation="gelu", use_bias=self.use_bias,
                             dtype=policy, name=f"{self.name}_dense_1"), input_shape)
        self.dense_2 = self._add_part(
            "dense_2", Dense(self.hidden_dim, use_bias=self.use_bias, dtype=policy,
                             name=f"{self.name}_dense_2"),
            tuple(input_shape[:-1]) + (self.mlp_dim,))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.hidden_dim,)

    def call(self, inputs, training=False):
        self._start(training)
        x = self._run(self.dense_1, inputs, training=training)
        x = self._run(self.dropout_1, x, training=training)
        x = self._run(self.dense_2, x, training=training)
        x = self._run(self.dropout_2, x, training=training)
        self._finish(training)
        return x

    def backward(self, dy, need_input_grad=True):
        g = self._back(self.dropout_2, dy)
        g = self._back(self.dense_2, g)
        g = self._back(self.dropout_1, g)
        g = self._back(self.dense_1, g, need_input_grad)
        self._set_composite_gradients()
        return g

    def get_config(self):
        config = self._base_config()
        config.update({"hidden_dim": self.hidden_dim, "mlp_dim": self.mlp_dim,
                       "use_bias": self.use_bias, "dropout_rate": self.dropout_rate})
        return config


class ViTPatchingAndEmbedding(_Composite):
    """Cuts the image into patches (a Conv2D of kernel and stride ``patch_size``), puts the
    class token in front (a weight of shape (1, 1, hidden_dim)) and adds the position
    embedding; output (batch, num_positions, hidden_dim).  Keras's paths: its own ``vars``
    (the class token), "patch_embedding", "position_embedding"."""

    class_token = Weight()

    def __init__(self, image_size, patch_size, hidden_dim, num_channels=3,
                 use_class_token=True, use_patch_bias=True, data_format=None,
                 num_patches=None, num_positions=None, **kwargs):
        owner = "ViTPatchingAndEmbedding"
        super().__init__(**kwargs)
        self.image_size = _pair(owner, "image_size", image_size)
        self.patch_size = _pair(owner, "patch_size", patch_size)
        self.hidden_dim = _args.positive_int(owner, "hidden_dim", hidden_dim)
        self.num_channels = _args.positive_int(owner, "num_channels", num_channels)
        self.use_class_token = _args.boolean(owner, "use_class_token", use_class_token)
        self.use_patch_bias = _args.boolean(owner, "use_patch_bias", use_patch_bias)
        self.data_format = _data_format(owner, data_format)
        grid = [s // p for s, p in zip(self.image_size, self.patch_size)]
        if min(grid) < 1:
            raise ValueError(f"{owner}: patch_size {self.patch_size} is larger than image_size "
                             f"{self.image_size}")
        self.grid_size = (grid[0], grid[1])
        self.num_patches = grid[0] * grid[1]
        self.num_positions = self.num_patches + (1 if self.use_class_token else 0)
        for what, given, derived in (("num_patches", num_patches, self.num_patches),
                                     ("num_positions", num_positions, self.num_positions)):
            if given is not None and given != derived:
                raise ValueError(f"{owner}: {what}={given!r} does not match image_size "
                                 f"{self.image_size}, patch_size {self.patch_size} and "
                                 f"use_class_token={self.use_class_token} ({derived})")

    def _image_shape(self, input_shape):
        owner = f"ViTPatchingAndEmbedding '{self.name}'"
        shape = tuple(input_shape)
        if len(shape) != 4:
            raise ValueError(f"{owner}: expected images of shape (batch, height, width, "
                             f"channels), received {shape}")
        h, w, c = (shape[2], shape[3], shape[1]) if self.data_format == "channels_first" \
            else shape[1:]
        if (h, w) != self.image_size or c != self.num_channels:
            raise ValueError(f"{owner}: built for images of size {self.image_size} with "
                             f"{self.num_channels} channels ({self.data_format}), received "
                             f"input of shape {shape}")
        return (shape[0], h, w, c)

    def build(self, input_shape):
        channels_last = self._image_shape(input_shape)
        policy = self._dtype_policy
        if self.use_class_token:
            self.add_weight("class_token", (1, 1, self.hidden_dim), "random_normal")
        self.patch_embedding = self._add_part(
            "patch_embedding",
            Conv2D(self.hidden_dim, self.patch_size, strides=self.patch_size, padding="valid",
                   use_bias=self.use_patch_bias, dtype=policy,
                   name=f"{self.name}_patch_embedding"), channels_last)
        self.position_embedding = self._add_part(
            "position_embedding",
            Embedding(self.num_positions, self.hidden_dim, dtype=policy,
                      name=f"{self.name}_position_embedding"), (1, self.num_positions))
        self._position_ids = np.arange(self.num_positions, dtype=np.int32)[None]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_positions, self.hidden_dim)

    def call(self, inputs, training=False):
        self._start(training)
        x = inputs
        if self.data_format == "channels_first":
            x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        patches = self._run(self.patch_embedding, x, training=training)
        b = patches.shape[0]
        cd = patches.dtype
        patches = patches.reshape(b, self.num_patches, self.hidden_dim)
        positions = self._run(self.position_embedding, self._position_ids, training=training)
        w = work_dtype(cd)
        if self.use_class_token:
            token = to_compute(to_compute(self.class_token, cd), w)
            tokens = np.empty((b, self.num_positions, self.hidden_dim), dtype=w)
            tokens[:, :1] = token
            tokens[:, 1:] = patches
        else:
            tokens = to_compute(patches, w)
        tokens += to_compute(positions, w)
        self._finish(training)
        if training:
            self._train_cache["shape"] = inputs.shape
        return to_compute(tokens, cd)

    def backward(self, dy, need_input_grad=True):
        cache = self._train_cache
        b = dy.shape[0]
        w = work_dtype(dy.dtype)
        dyw = to_compute(dy, w)
        own = {}
        self._back(self.position_embedding, to_compute(dyw.sum(axis=0, keepdims=True),
                                                          dy.dtype), False)
        if self.use_class_token:
            own[id(self.class_token)] = dyw[:, :1].sum(axis=0, keepdims=True)
            d_patches = dy[:, 1:]
        else:
            d_patches = dy
        gh, gw = self.grid_size
        d_patches = np.ascontiguousarray(d_patches).reshape(b, gh, gw, self.hidden_dim)
        dx = self._back(self.patch_embedding, d_patches, need_input_grad)
        self._set_composite_gradients(own)
        if not need_input_grad or dx is None:
            return None
        if self.data_format == "channels_first":
            dx = np.ascontiguousarray(dx.transpose(0, 3, 1, 2))
        return dx.reshape(cache["shape"])

    def get_config(self):
        config = self._base_config()
        config.update({"image_size": list(self.image_size), "patch_size": list(self.patch_size),
                       "hidden_dim": self.hidden_dim, "num_channels": self.num_channels,
                       "num_patches": self.num_patches, "num_positions": self.num_positions,
                       "use_class_token": self.use_class_token,
                       "use_patch_bias": self.use_patch_bias, "data_format": self.data_format})
        return config


class ViTEncoderBlock(_Composite):
    """One pre-norm transformer block: x + Dropout(MHA(LN(x))), then + MLP(LN(.)).  Keras's
    paths "layer_norm_1", "mha", "layer_norm_2", "mlp"."""

    def __init__(self, num_heads, hidden_dim, mlp_dim, use_mha_bias=True, use_mlp_bias=True,
                 dropout_rate=0.0, attention_dropout=0.0, layer_norm_epsilon=1e-6, key_dim=None,
                 **kwargs):
        owner = "ViTEncoderBlock"
        super().__init__(**kwargs)
        self.num_heads = _args.positive_int(owner, "num_heads", num_heads)
        self.hidden_dim = _args.positive_int(owner, "hidden_dim", hidden_dim)
        self.mlp_dim = _args.positive_int(owner, "mlp_dim", mlp_dim)
        if self.hidden_dim < self.num_heads:
            raise ValueError(f"{owner}: hidden_dim ({hidden_dim}) must be at least num_heads "
                             f"({num_heads}): each head has hidden_dim // num_heads features")
        self.key_dim = self.hidden_dim // self.num_heads
        if key_dim is not None and key_dim != self.key_dim:
            raise ValueError(f"{owner}: key_dim={key_dim!r} does not match hidden_dim "
                             f"{hidden_dim} // num_heads {num_heads} = {self.key_dim}")
        self.use_mha_bias = _args.boolean(owner, "use_mha_bias", use_mha_bias)
        self.use_mlp_bias = _args.boolean(owner, "use_mlp_bias", use_mlp_bias)
        self.dropout_rate = _args.number(owner, "dropout_rate", dropout_rate, low=0, high=1,
                                         high_open=True)
        self.attention_dropout = _args.number(owner, "attention_dropout", attention_dropout,
                                              low=0, high=1, high_open=True)
        self.layer_norm_epsilon = _args.number(owner, "layer_norm_epsilon", layer_norm_epsilon,
                                               low=0, low_open=True)
        self.dropout = Dropout(self.dropout_rate, dtype=self._dtype_policy,
                               name=f"{self.name}_dropout")

    def build(self, input_shape):
        owner = f"ViTEncoderBlock '{self.name}'"
        shape = tuple(input_shape)
        if len(shape) != 3 or shape[-1] != self.hidden_dim:
            raise ValueError(f"{owner}: expected input of shape (batch, positions, "
                             f"{self.hidden_dim}), received {shape}")
        policy = self._dtype_policy
        eps = self.layer_norm_epsilon
        self.layer_norm_1 = self._add_part(
            "layer_norm_1", LayerNormalization(epsilon=eps, dtype=policy,
                                               name=f"{self.name}_ln_1"), shape)
        self.mha = self._add_part(
            "mha", MultiHeadAttention(self.num_heads, self.key_dim, use_bias=self.use_mha_bias,
                                      dropout=self.attention_dropout, dtype=policy,
                                      name=f"{self.name}_mha"), [shape, shape])
        self.layer_norm_2 = self._add_part(
            "layer_norm_2", LayerNormalization(epsilon=eps, dtype=policy,
                                               name=f"{self.name}_ln_2"), shape)
        self.mlp = self._add_part(
            "mlp", ViTMLP(self.hidden_dim, self.mlp_dim, use_bias=self.use_mlp_bias,
                          dropout_rate=self.dropout_rate, dtype=policy,
                          name=f"{self.name}_mlp"), shape)

    def call(self, inputs, training=False):
        self._start(training)
        h = self._run(self.layer_norm_1, inputs, training=training)
        a = self._run(self.mha, h, h, training=training)
        a = self._run(self.dropout, a, training=training)
        x = _add(a, inputs)
        y = self._run(self.layer_norm_2, x, training=training)
        y = self._run(self.mlp, y, training=training)
        self._finish(training)
        return _add(x, y)

    def backward(self, dy, need_input_grad=True):
        g = self._back(self.mlp, dy)
        g = self._back(self.layer_norm_2, g)
        dx = _add(dy, g)
        g = self._back(self.dropout, dx)
        g = self._back(self.mha, g)
        dh = g["query"] if g["value"] is None else _add(g["query"], g["value"])
        g = self._back(self.layer_norm_1, dh, need_input_grad)
        self._set_composite_gradients()
        return _add(dx, g) if need_input_grad else None

    def get_config(self):
        config = self._base_config()
        config.update({"num_heads": self.num_heads, "hidden_dim": self.hidden_dim,
                       "key_dim": self.key_dim, "mlp_dim": self.mlp_dim,
                       "use_mha_bias": self.use_mha_bias, "use_mlp_bias": self.use_mlp_bias,
                       "dropout_rate": self.dropout_rate,
                       "attention_dropout": self.attention_dropout,
                       "layer_norm_epsilon": self.layer_norm_epsilon})
        return config


class ViTEncoder(_Composite):
    """Dropout, ``num_layers`` :class:`ViTEncoderBlock` and a final LayerNormalization.
    Keras's paths "encoder_layers/vi_t_encoder_block[_n]" and "layer_norm"."""

    def __init__(self, num_layers, num_heads, hidden_dim, mlp_dim, use_mha_bias=True,
                 use_mlp_bias=True, dropout_rate=0.0, attention_dropout=0.0,
                 layer_norm_epsilon=1e-6, **kwargs):
        owner = "ViTEncoder"
        super().__init__(**kwargs)
        self.num_layers = _args.positive_int(owner, "num_layers", num_layers)
        self.num_heads = _args.positive_int(owner, "num_heads", num_heads)
        self.hidden_dim = _args.positive_int(owner, "hidden_dim", hidden_dim)
        self.mlp_dim = _args.positive_int(owner, "mlp_dim", mlp_dim)
        self.use_mha_bias = _args.boolean(owner, "use_mha_bias", use_mha_bias)
        self.use_mlp_bias = _args.boolean(owner, "use_mlp_bias", use_mlp_bias)
        self.dropout_rate = _args.number(owner, "dropout_rate", dropout_rate, low=0, high=1,
                                         high_open=True)
        self.attention_dropout = _args.number(owner, "attention_dropout", attention_dropout,
                                              low=0, high=1, high_open=True)
        self.layer_norm_epsilon = _args.number(owner, "layer_norm_epsilon", layer_norm_epsilon,
                                               low=0, low_open=True)
        self.dropout = Dropout(self.dropout_rate, dtype=self._dtype_policy,
                               name=f"{self.name}_dropout")
        self.encoder_layers = []

    def build(self, input_shape):
        shape = tuple(input_shape)
        policy = self._dtype_policy
        for i in range(self.num_layers):
            block = ViTEncoderBlock(
                self.num_heads, self.hidden_dim, self.mlp_dim, use_mha_bias=self.use_mha_bias,
                use_mlp_bias=self.use_mlp_bias, dropout_rate=self.dropout_rate,
                attention_dropout=self.attention_dropout,
                layer_norm_epsilon=self.layer_norm_epsilon, dtype=policy,
                name=f"{self.name}_transformer_block_{i + 1}")
            key = "vi_t_encoder_block" + (f"_{i}" if i else "")
            self.encoder_layers.append(self._add_part(f"encoder_layers/{key}", block, shape))
        self.layer_norm = self._add_part(
            "layer_norm", LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=policy,
                                             name=f"{self.name}_ln"), shape)

    def call(self, inputs, training=False):
        self._start(training)
        x = self._run(self.dropout, inputs, training=training)
        for block in self.encoder_layers:
            x = self._run(block, x, training=training)
        x = self._run(self.layer_norm, x, training=training)
        self._finish(training)
        return x

    def backward(self, dy, need_input_grad=True):
        g = self._back(self.layer_norm, dy)
        for block in reversed(self.encoder_layers):
            g = self._back(block, g)
        g = self._back(self.dropout, g, need_input_grad)
        self._set_composite_gradients()
        return g if need_input_grad else None

    def get_config(self):
        config = self._base_config()
        config.update({"num_layers": self.num_layers, "num_heads": self.num_heads,
                       "hidden_dim": self.hidden_dim, "mlp_dim": self.mlp_dim,
                       "use_mha_bias": self.use_mha_bias, "use_mlp_bias": self.use_mlp_bias,
                       "dropout_rate": self.dropout_rate,
                       "attention_dropout": self.attention_dropout,
                       "layer_norm_epsilon": self.layer_norm_epsilon})
        return config


# -- backbones -------------------------------------------------------------------------------------

class ViTBackbone(_HubModel):
    """keras_hub's Vision Transformer backbone on mixedcore's layers.

    Input ``images`` of shape ``image_shape`` (height, width, channels; channels first under
    ``data_format="channels_first"``); output (batch, num_positions, hidden_dim): the class
    token (when ``use_class_token``) and one token per patch, after ``num_layers`` encoder
    blocks and a final layer normalization.  The arguments, the config and the weight layout
    are keras_hub's, so ``models.load_model`` reads the ``.keras`` file keras_hub writes.
    """

    _keras_class = "ViTBackbone"
    _keras_module = "keras_hub.src.models.vit.vit_backbone"

    def __init__(self, image_shape, patch_size, num_layers, num_heads, hidden_dim, mlp_dim,
                 dropout_rate=0.0, attention_dropout=0.0, layer_norm_epsilon=1e-6,
                 use_mha_bias=True, use_mlp_bias=True, use_class_token=True,
                 use_patch_bias=True, data_format=None, dtype=None, name=None, trainable=True,
                 **kwargs):
        owner = "ViTBackbone"
        data_format = _data_format(owner, data_format)
        if not isinstance(image_shape, (list, tuple)) or len(image_shape) != 3:
            raise ValueError(f"{owner}: image_shape must be (height, width, channels), got "
                             f"{image_shape!r}")
        if any(d is None for d in image_shape):
            raise ValueError(f"{owner}: image_shape must have known height, width and "
                             f"channels, got {image_shape!r}")
        image_shape = tuple(_args.positive_int(owner, "image_shape entry", d)
                            for d in image_shape)
        if data_format == "channels_last":
            height, width, channels = image_shape
        else:
            channels, height, width = image_shape
        patch = _pair(owner, "patch_size", patch_size)
        for what, size, p in (("height", height, patch[0]), ("width", width, patch[1])):
            if size % p:
                raise ValueError(f"{owner}: image {what} {size} is not divisible by patch size "
                                 f"{p} (image_shape {image_shape}, patch_size {patch_size!r})")
        policy = resolve_policy(owner, dtype)
        inputs = Input(shape=image_shape, name="images")
        x = ViTPatchingAndEmbedding(
            (height, width), patch, hidden_dim, num_channels=channels,
            use_class_token=use_class_token, use_patch_bias=use_patch_bias,
            data_format=data_format, dtype=policy, name="vit_patching_and_embedding")(inputs)
        outputs = ViTEncoder(
            num_layers, num_heads, hidden_dim, mlp_dim, use_mha_bias=use_mha_bias,
            use_mlp_bias=use_mlp_bias, dropout_rate=dropout_rate,
            attention_dropout=attention_dropout, layer_norm_epsilon=layer_norm_epsilon,
            dtype=policy, name="vit_encoder")(x)
        super().__init__(inputs, outputs, name=name, trainable=trainable, dtype=policy, **kwargs)
        self.image_shape = image_shape
        self.patch_size = patch
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.hidden_dim = int(hidden_dim)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout = float(attention_dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.use_mha_bias = bool(use_mha_bias)
        self.use_mlp_bias = bool(use_mlp_bias)
        self.use_class_token = bool(use_class_token)
        self.use_patch_bias = bool(use_patch_bias)
        self.data_format = data_format

    def _arguments(self):
        args = {"image_shape": list(self.image_shape), "patch_size": list(self.patch_size),
                "num_layers": self.num_layers, "num_heads": self.num_heads,
                "hidden_dim": self.hidden_dim, "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate, "attention_dropout": self.attention_dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "use_mha_bias": self.use_mha_bias, "use_mlp_bias": self.use_mlp_bias,
                "use_class_token": self.use_class_token, "use_patch_bias": self.use_patch_bias}
        if self.data_format != "channels_last":
            args["data_format"] = self.data_format
        return args


# -- task models -----------------------------------------------------------------------------------

class _SelectToken(Layer):
    """``x[:, index]`` of a (batch, positions, features) input (the "token" pooling)."""

    def __init__(self, index=0, **kwargs):
        super().__init__(**kwargs)
        self.index = _args.non_negative_int("_SelectToken", "index", index)
        self._train_cache = None

    def build(self, input_shape):
        if len(input_shape) != 3 or (input_shape[1] is not None
                                     and input_shape[1] <= self.index):
            raise ValueError(f"_SelectToken '{self.name}': expected (batch, positions, "
                             f"features) with more than {self.index} positions, received "
                             f"{tuple(input_shape)}")

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])

    def call(self, inputs, training=False):
        if training:
            self._train_cache = inputs.shape
        return np.ascontiguousarray(inputs[:, self.index])

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        dx = np.zeros(self._train_cache, dtype=dy.dtype)
        dx[:, self.index] = dy
        return dx

    def get_config(self):
        config = super().get_config()
        config["index"] = self.index
        return config


def _backbone_argument(owner, backbone, custom_objects):
    if isinstance(backbone, dict):
        from mixedcore import layers as _layers
        backbone = _layers.deserialize(backbone, custom_objects)
    if not isinstance(backbone, Model):
        raise TypeError(f"{owner}: backbone must be a mixedcore model (such as ViTBackbone) or "
                        f"its serialized config, got {type(backbone).__name__}")
    if len(backbone.inputs) != 1 or len(backbone.outputs) != 1:
        raise ValueError(f"{owner}: the backbone must have one input and one output, got "
                         f"{len(backbone.inputs)} and {len(backbone.outputs)}")
    return backbone


def _serialize_backbone(backbone):
    """The entry of a task's backbone in its config: a keras_hub backbone as keras_hub writes
    it (its module, class and registered name, so Keras reads it too), any other model as
    ``layers.serialize`` writes it."""
    cls = type(backbone)
    name = cls.__dict__.get("_keras_class")
    if isinstance(backbone, _HubModel) and name:
        return {"module": cls.__dict__.get("_keras_module"), "class_name": name,
                "config": backbone.get_config(), "registered_name": f"keras_hub>{name}",
                "build_config": {"input_shape": None}}
    from mixedcore import layers as _layers
    return _layers.serialize(backbone)


def _check_preprocessor(owner, preprocessor):
    if preprocessor is not None:
        raise ValueError(f"{owner}: preprocessor={preprocessor!r} is not supported (only None): "
                         f"give the model images already resized and rescaled")


class _HubTask(_HubModel):
    """A task model: a backbone and a head; its config holds the serialized backbone."""

    _task_arguments: tuple = ()

    @classmethod
    def from_config(cls, config, custom_objects=None):
        if not isinstance(config, dict):
            raise TypeError(f"{cls.__name__}.from_config: expected a dict of arguments, got "
                            f"{type(config).__name__}")
        config = dict(config)
        if "backbone" not in config:
            raise ValueError(f"{cls.__name__}.from_config: the config has no 'backbone'")
        config["backbone"] = _backbone_argument(f"{cls.__name__}.from_config",
                                                config["backbone"], custom_objects)
        return cls(**config)

    def get_config(self):
        config = {"backbone": _serialize_backbone(self.backbone), "preprocessor": None,
                  "name": self.name}
        if not self.trainable:
            config["trainable"] = False
        config.update(self._arguments())
        return config


class ImageClassifier(_HubTask):
    """keras_hub's ``ImageClassifier`` head on a backbone whose output is a feature map
    (batch, height, width, channels): global average (``pooling="avg"``) or max pooling,
    Dropout, Dense(num_classes, activation).  ``preprocessor`` must be None."""

    _keras_class = "ImageClassifier"
    _keras_module = "keras_hub.src.models.image_classifier"

    def __init__(self, backbone, num_classes, preprocessor=None, pooling="avg", activation=None,
                 dropout=0.0, head_dtype=None, name=None, trainable=True, dtype=None,
                 **kwargs):
        owner = type(self).__name__
        _check_preprocessor(owner, preprocessor)
        backbone = _backbone_argument(owner, backbone, None)
        if pooling not in ("avg", "max"):
            raise ValueError(f"{owner}: pooling must be 'avg' or 'max', got {pooling!r}")
        head = resolve_policy(owner, head_dtype if head_dtype is not None
                              else backbone.dtype_policy)
        data_format = getattr(backbone, "data_format", None)
        pool_cls = GlobalAveragePooling2D if pooling == "avg" else GlobalMaxPooling2D
        inputs = backbone.inputs[0]
        x = backbone(inputs)
        x = pool_cls(data_format=data_format, dtype=head, name="pooler")(x)
        x = Dropout(dropout, dtype=head, name="output_dropout")(x)
        outputs = Dense(num_classes, activation=activation, dtype=head, name="predictions")(x)
        super().__init__(inputs, outputs, name=name, trainable=trainable,
                         dtype=dtype if dtype is not None else backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.num_classes = int(num_classes)
        self.pooling = pooling
        self.activation = activation
        self.dropout = float(dropout)

    def _arguments(self):
        return {"num_classes": self.num_classes, "pooling": self.pooling,
                "activation": self.activation, "dropout": self.dropout}


class ViTImageClassifier(_HubTask):
    """keras_hub's ``ViTImageClassifier``: a :class:`ViTBackbone`, the class token
    (``pooling="token"``) or the mean over positions (``pooling="gap"``), an optional
    Dense(intermediate_dim, tanh), Dropout and Dense(num_classes, activation).
    ``preprocessor`` must be None."""

    _keras_class = "ViTImageClassifier"
    _keras_module = "keras_hub.src.models.vit.vit_image_classifier"

    def __init__(self, backbone, num_classes, preprocessor=None, pooling="token",
                 intermediate_dim=None, activation=None, dropout=0.0, head_dtype=None,
                 name=None, trainable=True, dtype=None, **kwargs):
        owner = type(self).__name__
        _check_preprocessor(owner, preprocessor)
        backbone = _backbone_argument(owner, backbone, None)
        if pooling not in ("token", "gap"):
            raise ValueError(f"{owner}: pooling must be 'token' or 'gap', got {pooling!r}")
        head = resolve_policy(owner, head_dtype if head_dtype is not None
                              else backbone.dtype_policy)
        inputs = backbone.inputs[0]
        x = backbone(inputs)
        if pooling == "token":
            x = _SelectToken(0, dtype=head, name="token_pooling")(x)
        else:
            x = GlobalAveragePooling1D(dtype=head, name="gap_pooling")(x)
        if intermediate_dim is not None:
            x = Dense(_args.positive_int(owner, "intermediate_dim", intermediate_dim),
                      activation="tanh", name="pre_logits")(x)
        x = Dropout(dropout, dtype=head, name="output_dropout")(x)
        outputs = Dense(num_classes, activation=activation, dtype=head, name="predictions")(x)
        super().__init__(inputs, outputs, name=name, trainable=trainable,
                         dtype=dtype if dtype is not None else backbone.dtype_policy, **kwargs)
        self.backbone = backbone
        self.num_classes = int(num_classes)
        self.pooling = pooling
        self.intermediate_dim = None if intermediate_dim is None else int(intermediate_dim)
        self.activation = activation
        self.dropout = float(dropout)

    def _arguments(self):
        return {"num_classes": self.num_classes, "pooling": self.pooling,
                "intermediate_dim": self.intermediate_dim, "activation": self.activation,
                "dropout": self.dropout}


# -- registration (D) ------------------------------------------------------------------------------

_MODELS = (ViTBackbone, ViTImageClassifier, ImageClassifier)
_LAYERS = (ViTPatchingAndEmbedding, ViTEncoder, ViTEncoderBlock)


def register():
    """Make the classes known to configs as built-in layer classes under keras_hub's registered
    names ("keras_hub>ViTBackbone", ...); returns those names."""
    names = []
    for cls in _MODELS + _LAYERS + (ViTMLP, _SelectToken):
        name = f"keras_hub>{cls.__dict__.get('_keras_class', cls.__name__)}"
        _registry.register_builtin("layer", cls, name)
        names.append(name)
    return names


REGISTERED_NAMES = register()


def registered_names():
    """The keras_hub registered names of this module's model classes."""
    return sorted(f"keras_hub>{cls._keras_class}" for cls in _MODELS)
