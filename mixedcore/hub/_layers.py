"""keras_hub's modeling layers on mixedcore's layers: the transformer blocks and embeddings the
text backbones are made of, under keras_hub's registered names.

Design:
  A. A layer keras_hub builds from sub-layers (``TransformerEncoder``, ``TransformerDecoder``,
     ``TokenAndPositionEmbedding``) is a :class:`_Composite`: it holds mixedcore layers
     (MultiHeadAttention, LayerNormalization, Dense, Dropout, the embeddings) under the
     attribute names keras_hub gives them, made with the composite's dtype policy, and shows
     their weights as its own: ``weights`` is theirs in creation order, ``set_weights`` hands
     each its share (every shape checked before any is set), and ``keras_weight_paths`` files
     each sub-layer's variables under ``<attribute>/...``, where Keras's ``.keras`` and
     ``.weights.h5`` files keep them.
  B. Numerics are the sub-layers' own (float32 accumulation in the products, the softmax and
     the normalizations in float32, activations rounded to the compute dtype between steps);
     the residual sums are taken in the compute dtype, as Keras adds two tensors of it.
  C. Masks follow keras_hub: ``padding_mask`` (batch, S), nonzero for real tokens, masks the
     keys only (a padded query position still attends to the real tokens, so its output is
     defined, as in keras_hub); ``attention_mask`` (batch, T, S) is combined with it by "and";
     without ``padding_mask`` a mask the input carries in the graph (an ``Embedding`` with
     ``mask_zero``) is used in its place.  The decoder adds the causal mask.
  D. Inference only: these layers have no ``backward``, so a model holding them predicts and
     evaluates but cannot be trained by mixedcore (Layer.backward says so).
"""
from __future__ import annotations

import numpy as np

from mixedcore import activations as _activations
from mixedcore import initializers as _initializers
from mixedcore import kernels
from mixedcore._dtypes import as_numeric_array, dtype_name, is_floating, np_dtype, to_compute
from mixedcore.layers import _args, _node
from mixedcore.layers._attention import MultiHeadAttention
from mixedcore.layers._base import Layer, Weight, _as_shapes
from mixedcore.layers._core import Dense, Embedding
from mixedcore.layers._normalization import LayerNormalization
from mixedcore.layers._regularization import Dropout

__all__ = ["TransformerEncoder", "TransformerDecoder", "PositionEmbedding",
           "ReversibleEmbedding", "TokenAndPositionEmbedding", "TokenSelect"]

_GEMM_DTYPES = ("float16", "bfloat16", "float32")


def _layer_paths(layer):
    declared = getattr(layer, "keras_weight_paths", None)
    if callable(declared):
        return [(sub, list(pos)) for sub, pos in declared()]
    return [("", list(range(len(layer.weights))))]


class _Composite(Layer):
    """A layer made of sub-layers, as Keras nests them (design A).  Sub-layers are registered
    with :meth:`_track` under the attribute keras_hub keeps them in; the composite has no
    weights of its own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._sublayers = {}        # attribute name -> sub-layer, in creation order

    def _track(self, attr, layer):
        self._sublayers[attr] = layer
        setattr(self, attr, layer)
        return layer

    def _owner(self):
        return f"{type(self).__name__} '{self.name}'"

    # -- weights: the sub-layers' ---------------------------------------------------------------
    @property
    def weights(self):
        return [w for layer in self._sublayers.values() for w in layer.weights]

    @property
    def trainable_weights(self):
        if not self.trainable:
            return []
        return [w for layer in self._sublayers.values() for w in layer.trainable_weights]

    @property
    def non_trainable_weights(self):
        if not self.trainable:
            return self.weights
        return [w for layer in self._sublayers.values() for w in layer.non_trainable_weights]

    def keras_weight_paths(self):
        """Each sub-layer's variables under ``<attribute>/<its own sub-path>`` (design A)."""
        out, offset = [], 0
        for attr, layer in self._sublayers.items():
            for sub, positions in _layer_paths(layer):
                if positions:
                    out.append((f"{attr}/{sub}" if sub else attr,
                                [offset + p for p in positions]))
            offset += len(layer.weights)
        return out

    def weight_names(self):
        return [f"{self.name}/{name}" for layer in self._sublayers.values()
                for name in layer.weight_names()]

    def get_weights(self):
        return [w.copy() for w in self.weights]

    def set_weights(self, weights):
        """The sub-layers' weights, in :attr:`weights` order; every count and shape is checked
        before any weight is set."""
        owner = f"{self._owner()}.set_weights"
        if isinstance(weights, np.ndarray) or not hasattr(weights, "__len__"):
            raise TypeError(f"{owner}: expected a list of arrays, got {type(weights).__name__}")
        current = self.weights
        if len(weights) != len(current):
            raise ValueError(f"{owner}: expected {len(current)} weight arrays with shapes "
                             f"{[w.shape for w in current]}, received {len(weights)}")
        arrays = [as_numeric_array(owner, w) for w in weights]
        names = self.weight_names()
        for k, (w, target) in enumerate(zip(arrays, current)):
            if w.shape != target.shape:
                raise ValueError(f"{owner}: weight {k} ({names[k]}) has shape {w.shape}, "
                                 f"expected {target.shape}")
        start = 0
        for layer in self._sublayers.values():
            n = len(layer.weights)
            if n:
                layer.set_weights(arrays[start:start + n])
            start += n
        self.weights_updated()

    def weights_updated(self):
        self._version += 1
        for layer in self._sublayers.values():
            layer.weights_updated()

    def count_params(self):
        return int(sum(layer.count_params() for layer in self._sublayers.values()))

    def inference_nbytes(self):
        return sum(layer.inference_nbytes() for layer in self._sublayers.values())

    def regularization_losses(self):
        total, grads = 0.0, []
        for layer in self._sublayers.values():
            value, layer_grads = layer.regularization_losses()
            total += value
            grads.extend(layer_grads)
        return total, (grads if self.trainable else [])

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype


def _merged_mask(owner, padding_mask, attention_mask, b, t, s):
    """keras_hub's self-attention mask (design C) as bool, broadcastable to (b, t, s), or None."""
    mask = None
    if padding_mask is not None:
        p = np.asarray(padding_mask)
        if p.shape != (b, s):
            raise ValueError(f"{owner}: padding_mask must have shape (batch, sequence) = "
                             f"{(b, s)}, got {p.shape}")
        mask = (p != 0)[:, None, :]
    if attention_mask is not None:
        a = np.asarray(attention_mask)
        if a.ndim != 3 or a.shape[0] not in (1, b) or a.shape[1:] != (t, s):
            raise ValueError(f"{owner}: attention_mask must have shape (batch, target, "
                             f"source) = {(b, t, s)}, got {a.shape}")
        a = a != 0
        mask = a if mask is None else (mask & a)
    return mask


def _hidden_dim(owner, shape, num_heads):
    if len(shape) != 3 or shape[-1] is None:
        raise ValueError(f"{owner}: expected inputs of shape (batch, sequence, features) with "
                         f"a known feature size, got {tuple(shape)}")
    hidden = int(shape[-1])
    if hidden // num_heads == 0:
        raise ValueError(f"{owner}: the feature size {hidden} must be at least num_heads "
                         f"({num_heads}): the head size hidden_dim // num_heads is 0")
    return hidden


class _TransformerBlock(_Composite):
    """What the encoder and the decoder share: arguments, config, the feedforward part."""

    def __init__(self, intermediate_dim, num_heads, dropout=0, activation="relu",
                 layer_norm_epsilon=1e-05, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", normalize_first=False, **kwargs):
        owner = _args.owner_name(type(self).__name__, kwargs)
        super().__init__(**kwargs)
        self.intermediate_dim = _args.positive_int(owner, "intermediate_dim", intermediate_dim)
        self.num_heads = _args.positive_int(owner, "num_heads", num_heads)
        self.dropout = float(_args.number(owner, "dropout", dropout, low=0, high=1,
                                          high_open=True))
        self.activation = _activations.resolve(owner, activation)
        self.layer_norm_epsilon = float(_args.number(owner, "layer_norm_epsilon",
                                                     layer_norm_epsilon, low=0, low_open=True))
        self.kernel_initializer = _initializers.check(owner, kernel_initializer)
        self.bias_initializer = _initializers.check(owner, bias_initializer)
        self.normalize_first = _args.boolean(owner, "normalize_first", normalize_first)

    supports_masking = True

    def _attention(self, name, key_dim, value_dim=None):
        return MultiHeadAttention(num_heads=self.num_heads, key_dim=key_dim, value_dim=value_dim,
                                  dropout=self.dropout,
                                  kernel_initializer=self.kernel_initializer,
                                  bias_initializer=self.bias_initializer,
                                  dtype=self._dtype_policy, name=name)

    def _norm(self, name, shape):
        layer = LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=self._dtype_policy,
                                   name=name)
        layer.build_from_shape(shape)
        return layer

    def _drop(self, name):
        return Dropout(rate=self.dropout, dtype=self._dtype_policy, name=name)

    def _feedforward(self, shape):
        hidden = shape[-1]
        inner = Dense(self.intermediate_dim, activation=self.activation,
                      kernel_initializer=self.kernel_initializer,
                      bias_initializer=self.bias_initializer, dtype=self._dtype_policy,
                      name="feedforward_intermediate_dense")
        inner.build_from_shape(shape)
        outer = Dense(hidden, kernel_initializer=self.kernel_initializer,
                      bias_initializer=self.bias_initializer, dtype=self._dtype_policy,
                      name="feedforward_output_dense")
        outer.build_from_shape(tuple(shape[:-1]) + (self.intermediate_dim,))
        return inner, outer

    def _residual_block(self, x, norm, body, training):
        """``norm(x + body(x))``, or ``x + body(norm(x))`` with ``normalize_first``."""
        residual = x
        if self.normalize_first:
            x = norm(x)
        x = body(x)
        x = _add(x, residual)
        if not self.normalize_first:
            x = norm(x)
        return x

    def _feedforward_block(self, x, training):
        def body(h):
            h = self._feedforward_intermediate_dense(h)
            h = self._feedforward_output_dense(h)
            return self._feedforward_dropout(h, training=training)
        return self._residual_block(x, self._feedforward_layer_norm, body, training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "intermediate_dim": self.intermediate_dim,
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": _initializers.serialize(self.kernel_initializer),
            "bias_initializer": _initializers.serialize(self.bias_initializer),
            "normalize_first": self.normalize_first,
        })
        return config


def _add(x, residual):
    """``x + residual`` in the compute dtype of ``x`` (design B)."""
    if residual.dtype != x.dtype:
        residual = to_compute(residual, x.dtype)
    return x + residual


class TransformerEncoder(_TransformerBlock):
    """keras_hub's transformer encoder block (``keras_hub.layers.TransformerEncoder``).

    Parameters
    ----------
    intermediate_dim : int
        Width of the feedforward network's hidden layer.
    num_heads : int
        Attention heads; each has ``hidden_dim // num_heads`` features.
    dropout : float, default 0
        Rate of the attention-probability, attention-output and feedforward dropouts
        (training calls only).
    activation : str, default "relu"
        The feedforward network's activation (a name of ``mixedcore.activations``; keras_hub's
        ``gelu_approximate`` is the tanh form of gelu).
    layer_norm_epsilon : float, default 1e-5
    kernel_initializer, bias_initializer
        For the attention and feedforward projections.
    normalize_first : bool, default False
        Layer normalization before each residual branch (pre-norm) instead of after the sum.

    Call
    ----
    ``layer(inputs, padding_mask=None, attention_mask=None, return_attention_scores=False)``:
    ``inputs`` (batch, sequence, hidden); masks as in the module notes (design C).  Returns
    (batch, sequence, hidden) in the compute dtype (with the attention scores (batch, heads,
    sequence, sequence) when asked).

    Sub-layers (their weights in this order, filed under these attributes as Keras files
    them): ``_self_attention_layer`` (MultiHeadAttention), ``_self_attention_layer_norm``,
    ``_feedforward_layer_norm``, ``_feedforward_intermediate_dense``,
    ``_feedforward_output_dense``; two Dropout layers without weights.
    """

    _keras_module = "keras_hub.src.layers.modeling.transformer_encoder"

    def build(self, input_shape):
        shape = _as_shapes(input_shape)
        hidden = _hidden_dim(self._owner(), shape, self.num_heads)
        attention = self._attention("self_attention_layer", hidden // self.num_heads)
        attention.build_from_shape([shape, shape])
        self._track("_self_attention_layer", attention)
        self._track("_self_attention_layer_norm", self._norm("self_attention_layer_norm", shape))
        self._track("_self_attention_dropout", self._drop("self_attention_dropout"))
        self._track("_feedforward_layer_norm", self._norm("feedforward_layer_norm", shape))
        inner, outer = self._feedforward(shape)
        self._track("_feedforward_intermediate_dense", inner)
        self._track("_feedforward_output_dense", outer)
        self._track("_feedforward_dropout", self._drop("feedforward_dropout"))

    def call(self, inputs, padding_mask=None, attention_mask=None, mask=None, training=False,
             return_attention_scores=False):
        x = inputs
        b, t = x.shape[0], x.shape[1]
        if padding_mask is None:
            padding_mask = mask
        merged = _merged_mask(self._owner(), padding_mask, attention_mask, b, t, t)
        scores = []

        def attend(h):
            out = self._self_attention_layer(h, h, attention_mask=merged, training=training,
                                             return_attention_scores=return_attention_scores)
            if return_attention_scores:
                out, s = out
                scores.append(s)
            return self._self_attention_dropout(out, training=training)

        x = self._residual_block(x, self._self_attention_layer_norm, attend, training)
        x = self._feedforward_block(x, training)
        if return_attention_scores:
            return x, scores[0]
        return x

    def compute_output_spec(self, *args, **kwargs):
        out = super().compute_output_spec(args[0])
        if kwargs.get("return_attention_scores"):
            shape = args[0].shape
            return out, _node.KerasTensor((shape[0], self.num_heads, shape[1], shape[1]),
                                          self.compute_dtype)
        return out


class TransformerDecoder(_TransformerBlock):
    """keras_hub's transformer decoder block (``keras_hub.layers.TransformerDecoder``): causal
    self-attention, cross-attention over an encoder sequence when the layer is built with one,
    and the feedforward network.

    Parameters are :class:`TransformerEncoder`'s; ``decoder_sequence_shape`` and
    ``encoder_sequence_shape`` (what keras_hub's configs hold) build the layer at construction.

    Call
    ----
    ``layer(decoder_sequence, encoder_sequence=None, decoder_padding_mask=None,
    decoder_attention_mask=None, encoder_padding_mask=None, encoder_attention_mask=None,
    use_causal_mask=True)``.  A layer built with an encoder sequence must be called with one
    and one built without must not (ValueError), as in keras_hub.  The key/value caches of
    keras_hub's generation loop (``self_attention_cache``, ``cross_attention_cache`` and their
    update indices) are not supported: a call that passes one is a ValueError.

    Sub-layers, in weight order: ``_self_attention_layer``, ``_self_attention_layer_norm``,
    (``_cross_attention_layer``, ``_cross_attention_layer_norm``,)
    ``_feedforward_intermediate_dense``, ``_feedforward_output_dense``,
    ``_feedforward_layer_norm``.
    """

    _keras_module = "keras_hub.src.layers.modeling.transformer_decoder"

    def __init__(self, intermediate_dim, num_heads, dropout=0, activation="relu",
                 layer_norm_epsilon=1e-05, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", normalize_first=False, decoder_sequence_shape=None,
                 encoder_sequence_shape=None, **kwargs):
        super().__init__(intermediate_dim, num_heads, dropout=dropout, activation=activation,
                         layer_norm_epsilon=layer_norm_epsilon,
                         kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer, normalize_first=normalize_first,
                         **kwargs)
        self._decoder_sequence_shape = None
        self._encoder_sequence_shape = None
        self._cross_attention_layer = None
        if decoder_sequence_shape:
            shapes = [_as_shapes(decoder_sequence_shape)]
            if encoder_sequence_shape:
                shapes.append(_as_shapes(encoder_sequence_shape))
            self.build_from_shape(shapes[0] if len(shapes) == 1 else shapes)

    def build_from_shape(self, input_shape):
        """Build for the decoder sequence's shape, or ``[decoder_shape, encoder_shape]``."""
        shape = _as_shapes(input_shape)
        if isinstance(shape, list) and len(shape) == 2 and all(
                isinstance(s, tuple) for s in shape):
            decoder, encoder = shape
        elif isinstance(shape, tuple):
            decoder, encoder = shape, None
        else:
            raise ValueError(f"{self._owner()}: build_from_shape takes the decoder sequence's "
                             f"shape or [decoder_shape, encoder_shape], got {input_shape!r}")
        self.build(decoder, encoder)
        self.input_shape = (None,) + tuple(decoder[1:])
        self.output_shape = self.input_shape
        self.built = True

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        owner = self._owner()
        shape = _as_shapes(decoder_sequence_shape)
        hidden = _hidden_dim(owner, shape, self.num_heads)
        head = hidden // self.num_heads
        self._decoder_sequence_shape = list(shape)
        self._encoder_sequence_shape = None
        attention = self._attention("self_attention", head)
        attention.build_from_shape([shape, shape])
        self._track("_self_attention_layer", attention)
        self._track("_self_attention_layer_norm", self._norm("self_attention_layer_norm", shape))
        self._track("_self_attention_dropout", self._drop("self_attention_dropout"))
        if encoder_sequence_shape:
            encoder = _as_shapes(encoder_sequence_shape)
            if len(encoder) != 3 or encoder[-1] is None:
                raise ValueError(f"{owner}: the encoder sequence must have shape (batch, "
                                 f"sequence, features), got {tuple(encoder)}")
            self._encoder_sequence_shape = list(encoder)
            cross = self._attention("cross_attention", head, head)
            cross.build_from_shape([shape, encoder])
            self._track("_cross_attention_layer", cross)
            self._track("_cross_attention_layer_norm",
                        self._norm("cross_attention_layer_norm", shape))
            self._track("_cross_attention_dropout", self._drop("cross_attention_dropout"))
        inner, outer = self._feedforward(shape)
        self._track("_feedforward_intermediate_dense", inner)
        self._track("_feedforward_output_dense", outer)
        self._track("_feedforward_layer_norm", self._norm("feedforward_layer_norm", shape))
        self._track("_feedforward_dropout", self._drop("feedforward_dropout"))

    @staticmethod
    def _encoder_of(args, kwargs):
        if len(args) > 1:
            return args[1]
        return kwargs.get("encoder_sequence")

    def _build_for_call(self, args, kwargs):
        encoder = self._encoder_of(args, kwargs)
        decoder = tuple(args[0].shape)
        if encoder is None:
            self.build_from_shape(decoder)
        else:
            self.build_from_shape([decoder, tuple(encoder.shape)])

    def _check_call(self, args, kwargs):
        self.check_input_shape(tuple(args[0].shape))
        self._check_encoder(self._encoder_of(args, kwargs) is not None)

    def _check_encoder(self, given):
        built_with = self._cross_attention_layer is not None
        if given and not built_with:
            raise ValueError(f"{self._owner()}: the layer was built without cross-attention "
                             f"and is called with encoder_sequence; call it as it was first "
                             f"called (or built)")
        if built_with and not given:
            raise ValueError(f"{self._owner()}: the layer was built with cross-attention and "
                             f"is called without encoder_sequence")

    def call(self, decoder_sequence, encoder_sequence=None, decoder_padding_mask=None,
             decoder_attention_mask=None, encoder_padding_mask=None,
             encoder_attention_mask=None, self_attention_cache=None,
             self_attention_cache_update_index=None, cross_attention_cache=None,
             cross_attention_cache_update_index=None, use_causal_mask=True, mask=None,
             training=False):
        owner = self._owner()
        caches = {"self_attention_cache": self_attention_cache,
                  "self_attention_cache_update_index": self_attention_cache_update_index,
                  "cross_attention_cache": cross_attention_cache,
                  "cross_attention_cache_update_index": cross_attention_cache_update_index}
        given = sorted(k for k, v in caches.items() if v is not None)
        if given:
            raise ValueError(f"{owner}: {', '.join(given)} given; the key/value caches of "
                             f"keras_hub's generation loop are not supported by mixedcore "
                             f"(call the layer on the whole sequence)")
        self._check_encoder(encoder_sequence is not None)
        x = decoder_sequence
        b, t = x.shape[0], x.shape[1]
        if decoder_padding_mask is None:
            decoder_padding_mask = mask
        self_mask = _merged_mask(owner, decoder_padding_mask, decoder_attention_mask, b, t, t)
        causal = bool(use_causal_mask)

        def attend(h):
            out = self._self_attention_layer(h, h, attention_mask=self_mask, training=training,
                                             use_causal_mask=causal)
            return self._self_attention_dropout(out, training=training)

        x = self._residual_block(x, self._self_attention_layer_norm, attend, training)
        if self._cross_attention_layer is not None:
            enc = encoder_sequence
            if is_floating(enc.dtype) and enc.dtype != x.dtype:
                enc = to_compute(enc, x.dtype)
            s = enc.shape[1]
            cross_mask = _merged_mask(owner, encoder_padding_mask, encoder_attention_mask,
                                      b, t, s)

            def cross(h):
                out = self._cross_attention_layer(h, enc, attention_mask=cross_mask,
                                                  training=training)
                return self._cross_attention_dropout(out, training=training)

            x = self._residual_block(x, self._cross_attention_layer_norm, cross, training)
        return self._feedforward_block(x, training)

    def get_config(self):
        config = super().get_config()
        config.update({"decoder_sequence_shape": self._decoder_sequence_shape,
                       "encoder_sequence_shape": self._encoder_sequence_shape})
        return config


class PositionEmbedding(Layer):
    """Learned position embeddings (``keras_hub.layers.PositionEmbedding``).

    Parameters
    ----------
    sequence_length : int
        The number of positions the table holds (the longest sequence).
    initializer : default "glorot_uniform"

    Call
    ----
    ``layer(inputs, start_index=0, positions=None)``: ``inputs`` (batch, sequence, features)
    (usually the token embeddings); returns the rows ``start_index ... start_index + sequence
    - 1`` of the table (or the rows ``positions`` names, (sequence,) or (batch, sequence))
    broadcast to the inputs' shape, in the compute dtype.  Rows beyond the table are a
    ValueError naming them.

    Weights: ``embeddings`` (sequence_length, features) (keras_hub's
    ``position_embeddings``).
    """

    _keras_module = "keras_hub.src.layers.modeling.position_embedding"
    embeddings = Weight()

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        owner = _args.owner_name("PositionEmbedding", kwargs)
        super().__init__(**kwargs)
        if sequence_length is None:
            raise ValueError(f"{owner}: sequence_length must be an int, got None")
        self.sequence_length = _args.positive_int(owner, "sequence_length", sequence_length)
        self.initializer = _initializers.check(owner, initializer)

    @property
    def position_embeddings(self):
        return self.embeddings

    def build(self, input_shape):
        shape = _as_shapes(input_shape)
        if len(shape) < 2 or shape[-1] is None:
            raise ValueError(f"PositionEmbedding '{self.name}': expected inputs of shape "
                             f"(batch, sequence, features) with a known feature size, got "
                             f"{shape}")
        if self.embeddings is None:
            self.add_weight("embeddings", (self.sequence_length, shape[-1]), self.initializer)

    def call(self, inputs, start_index=0, positions=None):
        owner = f"PositionEmbedding '{self.name}'"
        shape = inputs.shape
        table = self._compute_weight("embeddings")
        if positions is not None:
            idx = np.asarray(positions)
            if not np.issubdtype(idx.dtype, np.integer):
                raise TypeError(f"{owner}: positions must be integers, got {idx.dtype}")
            if idx.size and (idx.min() < 0 or idx.max() >= self.sequence_length):
                raise ValueError(f"{owner}: positions must be in [0, {self.sequence_length}), "
                                 f"got values from {int(idx.min())} to {int(idx.max())}")
            rows = np.take(table, idx, axis=0)
        else:
            start = int(start_index)
            length = shape[-2]
            if start < 0 or start + length > self.sequence_length:
                raise ValueError(f"{owner}: positions {start} to {start + length - 1} are "
                                 f"asked (start_index={start}, sequence of {length}); the table "
                                 f"has sequence_length={self.sequence_length}")
            rows = table[start:start + length]
        return np.ascontiguousarray(np.broadcast_to(rows, shape))

    def check_input_shape(self, shape):
        if len(shape) < 2 or shape[-1] != self.embeddings.shape[-1]:
            raise ValueError(f"PositionEmbedding '{self.name}': expected inputs of shape (..., "
                             f"sequence, {self.embeddings.shape[-1]}), received {tuple(shape)}")

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def get_config(self):
        config = super().get_config()
        config.update({"sequence_length": self.sequence_length,
                       "initializer": _initializers.serialize(self.initializer)})
        return config


class ReversibleEmbedding(Embedding):
    """An embedding that also maps vectors back to logits over the vocabulary
    (``keras_hub.layers.ReversibleEmbedding``, Keras's ``ReversibleEmbedding``).

    Parameters are :class:`mixedcore.layers.Embedding`'s and:

    tie_weights : bool, default True
        The reverse projection uses the transposed embedding table; False gives it a weight of
        its own, ``reverse_embeddings`` (output_dim, input_dim).
    reverse_dtype : str, optional
        The dtype the reverse product's operands are cast to (e.g. "float32").
    logit_soft_cap : float, optional
        Logits become ``tanh(logits / cap) * cap``.

    Call
    ----
    ``layer(token_ids)`` embeds as Embedding does; ``layer(vectors, reverse=True)`` returns the
    logits ``vectors @ table.T`` (float32 accumulation).  As in Keras, whose embedding does not
    autocast its variables, the reverse product takes the table in its variable dtype: under
    the mixed policies the vectors are widened to float32 and the logits are float32.
    """

    _keras_module = "keras_hub.src.layers.modeling.reversible_embedding"

    def __init__(self, input_dim, output_dim, tie_weights=True, embeddings_initializer="uniform",
                 embeddings_regularizer=None, embeddings_constraint=None, mask_zero=False,
                 reverse_dtype=None, logit_soft_cap=None, **kwargs):
        owner = _args.owner_name("ReversibleEmbedding", kwargs)
        super().__init__(input_dim, output_dim, embeddings_initializer=embeddings_initializer,
                         embeddings_regularizer=embeddings_regularizer,
                         embeddings_constraint=embeddings_constraint, mask_zero=mask_zero,
                         **kwargs)
        self.tie_weights = _args.boolean(owner, "tie_weights", tie_weights)
        if reverse_dtype is not None:
            name = dtype_name(np_dtype(reverse_dtype))
            if name not in ("float16", "bfloat16", "float32", "float64"):
                raise ValueError(f"{owner}: reverse_dtype must be a floating dtype, got "
                                 f"{reverse_dtype!r}")
            reverse_dtype = name
        self.reverse_dtype = reverse_dtype
        if logit_soft_cap is not None:
            logit_soft_cap = float(_args.number(owner, "logit_soft_cap", logit_soft_cap, low=0,
                                                low_open=True))
        self.logit_soft_cap = logit_soft_cap

    def build(self, input_shape=None):
        super().build(input_shape)
        if not self.tie_weights and self._weight("reverse_embeddings") is None:
            self.add_weight("reverse_embeddings", (self.output_dim, self.input_dim),
                            self.embeddings_initializer)

    @property
    def reverse_embeddings(self):
        return self._weight("reverse_embeddings")

    def __call__(self, *args, training=False, **kwargs):
        if kwargs.get("reverse"):
            return self._reverse_call(args, kwargs)
        kwargs.pop("reverse", None)
        return super().__call__(*args, training=training, **kwargs)

    def _reverse_call(self, args, kwargs):
        owner = f"ReversibleEmbedding '{self.name}'"
        if len(args) != 1 or set(kwargs) != {"reverse"}:
            raise TypeError(f"{owner}: a reverse call takes one input, got {len(args)} "
                            f"positional and keywords {sorted(kwargs)}")
        x = args[0]
        if isinstance(x, _node.KerasTensor):
            if not self.built:
                raise ValueError(f"{owner}: embed with the layer before its reverse call")
            out = _node.KerasTensor(tuple(x.shape[:-1]) + (self.input_dim,), "float32"
                                    if self.reverse_dtype is None else self.reverse_dtype)
            _node.Node(self, (x,), {"reverse": True}, out)
            return out
        return self.call(as_numeric_array(owner, x), reverse=True)

    def call(self, inputs, reverse=False, training=False):
        if not reverse:
            return super().call(inputs, training=training)
        owner = f"ReversibleEmbedding '{self.name}'"
        if not self.built:
            raise ValueError(f"{owner}: embed with the layer before its reverse call")
        if inputs.shape[-1] != self.output_dim or not is_floating(inputs.dtype):
            raise ValueError(f"{owner}: a reverse call takes floating vectors of size "
                             f"{self.output_dim}, got shape {inputs.shape} ({inputs.dtype})")
        kernel = self.embeddings.T if self.tie_weights else self._weight("reverse_embeddings")
        x = to_compute(to_compute(inputs, self._compute_np()), kernel.dtype)
        if self.reverse_dtype is not None:
            target = np_dtype(self.reverse_dtype)
            x, kernel = to_compute(x, target), to_compute(kernel, target)
        if dtype_name(x.dtype) in _GEMM_DTYPES and dtype_name(kernel.dtype) in _GEMM_DTYPES:
            out = dtype_name(x.dtype) if x.dtype.itemsize == 2 else None
            flat = x.reshape(-1, self.output_dim)
            logits = kernels.matmul(flat, np.ascontiguousarray(kernel), out_dtype=out)
            logits = logits.reshape(x.shape[:-1] + (self.input_dim,))
        else:
            logits = np.matmul(x.astype(np.float64), kernel.astype(np.float64)).astype(x.dtype)
        if self.logit_soft_cap is not None:
            cap = self.logit_soft_cap
            w = np.float64 if logits.dtype == np.float64 else np.float32
            logits = to_compute(np.tanh(to_compute(logits, np.dtype(w)) / cap) * cap,
                                logits.dtype)
        return logits

    def compute_mask(self, inputs, mask=None):
        """``inputs != 0`` for token ids when ``mask_zero`` (the mask keras_hub's layer gives
        its output); None for a reverse call's vectors."""
        x = np.asarray(inputs)
        if is_floating(x.dtype) and x.ndim and x.shape[-1] == self.output_dim:
            return None
        return super().compute_mask(inputs, mask)

    def get_config(self):
        config = super().get_config()
        config.update({"tie_weights": self.tie_weights, "reverse_dtype": self.reverse_dtype,
                       "logit_soft_cap": self.logit_soft_cap})
        return config


class TokenAndPositionEmbedding(_Composite):
    """Token embeddings plus learned position embeddings
    (``keras_hub.layers.TokenAndPositionEmbedding``).

    Parameters
    ----------
    vocabulary_size, sequence_length, embedding_dim : int
    tie_weights : bool, default True
        Of the token embedding (a :class:`ReversibleEmbedding`).
    embeddings_initializer : default "uniform"
    mask_zero : bool, default False
        Token id 0 is padding: the output carries the mask ``token_ids != 0``.

    Call: ``layer(token_ids, start_index=0, positions=None)`` -> (batch, sequence,
    embedding_dim), the two embeddings' sum in the compute dtype.  Sub-layers:
    ``token_embedding``, ``position_embedding``.
    """

    _keras_module = "keras_hub.src.layers.modeling.token_and_position_embedding"

    def __init__(self, vocabulary_size, sequence_length, embedding_dim, tie_weights=True,
                 embeddings_initializer="uniform", mask_zero=False, **kwargs):
        owner = _args.owner_name("TokenAndPositionEmbedding", kwargs)
        super().__init__(**kwargs)
        for what, value in (("vocabulary_size", vocabulary_size),
                            ("sequence_length", sequence_length),
                            ("embedding_dim", embedding_dim)):
            if value is None:
                raise ValueError(f"{owner}: {what} must be an int, got None")
        self.vocabulary_size = _args.positive_int(owner, "vocabulary_size", vocabulary_size)
        self.sequence_length = _args.positive_int(owner, "sequence_length", sequence_length)
        self.embedding_dim = _args.positive_int(owner, "embedding_dim", embedding_dim)
        self.embeddings_initializer = _initializers.check(owner, embeddings_initializer)
        self._track("token_embedding", ReversibleEmbedding(
            self.vocabulary_size, self.embedding_dim, tie_weights=tie_weights,
            embeddings_initializer=self.embeddings_initializer, mask_zero=mask_zero,
            dtype=self._dtype_policy, name="token_embedding"))
        self._track("position_embedding", PositionEmbedding(
            sequence_length=self.sequence_length, initializer=self.embeddings_initializer,
            dtype=self._dtype_policy, name="position_embedding"))
        self.supports_masking = self.token_embedding.mask_zero

    def build(self, input_shape):
        shape = _as_shapes(input_shape)
        self.token_embedding.build_from_shape(shape)
        self.position_embedding.build_from_shape(tuple(shape) + (self.embedding_dim,))

    def check_input_shape(self, shape):
        """Any shape of token ids."""

    def call(self, inputs, start_index=0, positions=None):
        tokens = self.token_embedding(inputs)
        where = self.position_embedding(tokens, start_index=start_index, positions=positions)
        return _add(tokens, where)

    def compute_mask(self, inputs, mask=None):
        return self.token_embedding.compute_mask(inputs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.embedding_dim,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "sequence_length": self.sequence_length,
            "embedding_dim": self.embedding_dim,
            "embeddings_initializer": _initializers.serialize(self.embeddings_initializer),
            "tie_weights": self.token_embedding.tie_weights,
            "mask_zero": self.token_embedding.mask_zero,
        })
        return config


class TokenSelect(Layer):
    """``x[:, index, :]``: one position of a sequence (what Keras's graph slices for BERT's
    pooled output).  ``index`` may be negative (from the end)."""

    def __init__(self, index=0, **kwargs):
        owner = _args.owner_name("TokenSelect", kwargs)
        super().__init__(**kwargs)
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"{owner}: index must be an int, got {type(index).__name__}: "
                            f"{index!r}")
        self.index = int(index)

    def call(self, inputs):
        n = inputs.shape[1]
        if not -n <= self.index < n:
            raise ValueError(f"TokenSelect '{self.name}': index {self.index} is out of range "
                             f"for a sequence of {n}")
        return np.ascontiguousarray(inputs[:, self.index])

    def check_input_shape(self, shape):
        if len(shape) < 2:
            raise ValueError(f"TokenSelect '{self.name}': expected (batch, sequence, ...) "
                             f"inputs, received {tuple(shape)}")

    def compute_output_shape(self, input_shape):
        return (input_shape[0],) + tuple(input_shape[2:])

    def get_config(self):
        config = super().get_config()
        config["index"] = self.index
        return config

