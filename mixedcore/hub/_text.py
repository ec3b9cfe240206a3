"""keras_hub's text backbones and BERT's text classifier as mixedcore functional models.

Design:
  A. A backbone is a :class:`mixedcore.models.Model` whose ``__init__`` builds the graph from
     the hyperparameters keras_hub's config holds (the same layers, in the same order, under
     the same names as keras_hub's backbone), and whose ``get_config`` / ``from_config`` are
     those hyperparameters: the config.json of a ``.keras`` file Keras wrote makes the model,
     and the weights are found by structure in model.weights.h5, as for any model
     (``mixedcore.saving.weight_structure``: the layer classes' snake-case names, suffixed
     in layer order).
  B. The inputs are keras_hub's: a dict with ``token_ids`` and ``padding_mask`` (int32,
     (batch, sequence); 1 for real tokens, 0 for padding) and, for BERT, ``segment_ids``.
     ``padding_mask`` masks the attention keys (see ``_layers``, design C); the outputs at
     padded positions are what keras_hub computes there, not zeros.
  C. The model's dtype policy is every layer's (keras_hub passes the backbone's ``dtype`` to
     all its layers); ``load_model(..., dtype_policy=)`` replaces it.
  D. Tokenizers and preprocessors are not supported.  A task model whose config holds one is
     refused (ValueError): keras_hub's ``predict`` / ``fit`` / ``evaluate`` run the
     preprocessor on their inputs (raw strings), so a model without it would not compute what
     the file's model computes for the same call.  Its backbone loads on its own (a file of the
     backbone, or of the task saved with ``preprocessor=None``).
"""
from __future__ import annotations

from mixedcore import activations as _activations
from mixedcore.hub._model import _HubModel
from mixedcore.hub._layers import (PositionEmbedding, ReversibleEmbedding,
                                   TokenAndPositionEmbedding, TokenSelect, TransformerDecoder,
                                   TransformerEncoder)
from mixedcore.layers import _args
from mixedcore.layers._core import Dense, Embedding, Input
from mixedcore.layers._merging import Add
from mixedcore.layers._normalization import LayerNormalization
from mixedcore.layers._regularization import Dropout
from mixedcore.saving import object_registration as _registry

__all__ = ["BertBackbone", "DistilBertBackbone", "RobertaBackbone", "GPT2Backbone",
           "BertTextClassifier"]


def _check_backbone_args(owner, values):
    for key in ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                "max_sequence_length", "num_segments"):
        if key in values:
            values[key] = _args.positive_int(owner, key, values[key])
    values["dropout"] = float(_args.number(owner, "dropout", values["dropout"], low=0, high=1,
                                           high_open=True))
    if values["hidden_dim"] < values["num_heads"]:
        raise ValueError(f"{owner}: hidden_dim ({values['hidden_dim']}) must be at least "
                         f"num_heads ({values['num_heads']})")
    return values


def _int_input(name):
    return Input(shape=(None,), dtype="int32", name=name)


class BertBackbone(_HubModel):
    """BERT's encoder (``keras_hub.models.BertBackbone``).

    Parameters
    ----------
    vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim : int
    dropout : float, default 0.1
    max_sequence_length : int, default 512
    num_segments : int, default 2
    dtype : policy-like, optional
        Every layer's policy (the global policy when None).

    Inputs ``{"token_ids", "segment_ids", "padding_mask"}``; outputs ``{"sequence_output":
    (batch, sequence, hidden_dim), "pooled_output": (batch, hidden_dim)}``.  Token, position
    and segment embeddings summed, layer-normalized (epsilon 1e-12); post-norm encoder blocks
    with the tanh form of gelu; the pooled output is a tanh Dense of the first token.
    """

    _keras_class = "BertBackbone"
    _keras_module = "keras_hub.src.models.bert.bert_backbone"
    _HYPERPARAMETERS = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim",
                        "intermediate_dim", "dropout", "max_sequence_length", "num_segments")

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.1, max_sequence_length=512, num_segments=2, dtype=None, name=None,
                 trainable=True, **kwargs):
        name = self._start(name, kwargs)
        v = _check_backbone_args("BertBackbone", dict(
            vocabulary_size=vocabulary_size, num_layers=num_layers, num_heads=num_heads,
            hidden_dim=hidden_dim, intermediate_dim=intermediate_dim, dropout=dropout,
            max_sequence_length=max_sequence_length, num_segments=num_segments))
        token_ids, segment_ids = _int_input("token_ids"), _int_input("segment_ids")
        padding_mask = _int_input("padding_mask")
        tokens = ReversibleEmbedding(v["vocabulary_size"], v["hidden_dim"], dtype=dtype,
                                     name="token_embedding")(token_ids)
        positions = PositionEmbedding(v["max_sequence_length"], dtype=dtype,
                                      name="position_embedding")(tokens)
        segments = Embedding(v["num_segments"], v["hidden_dim"], dtype=dtype,
                             name="segment_embedding")(segment_ids)
        x = Add(dtype=dtype, name="embeddings_add")([tokens, positions, segments])
        x = LayerNormalization(epsilon=1e-12, dtype=dtype, name="embeddings_layer_norm")(x)
        x = Dropout(v["dropout"], dtype=dtype, name="embeddings_dropout")(x)
        for i in range(v["num_layers"]):
            x = TransformerEncoder(num_heads=v["num_heads"],
                                   intermediate_dim=v["intermediate_dim"],
                                   activation="gelu_approximate", dropout=v["dropout"],
                                   layer_norm_epsilon=1e-12, dtype=dtype,
                                   name=f"transformer_layer_{i}")(x, padding_mask=padding_mask)
        first = TokenSelect(0, dtype=dtype, name="cls_token")(x)
        pooled = Dense(v["hidden_dim"], activation="tanh", dtype=dtype,
                       name="pooled_dense")(first)
        super().__init__(inputs={"token_ids": token_ids, "segment_ids": segment_ids,
                                 "padding_mask": padding_mask},
                         outputs={"sequence_output": x, "pooled_output": pooled},
                         name=name, trainable=trainable, dtype=dtype)
        for key, value in v.items():
            setattr(self, key, value)
        self.cls_token_index = 0


class _EncoderOnlyBackbone(_HubModel):
    """DistilBERT and RoBERTa: token-and-position embeddings, layer norm, post-norm encoder
    blocks with exact gelu; one output, the sequence."""

    _EMBEDDING_NAME = ""
    _EPSILON = 0.0
    _HYPERPARAMETERS = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim",
                        "intermediate_dim", "dropout", "max_sequence_length")

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.1, max_sequence_length=512, dtype=None, name=None, trainable=True,
                 **kwargs):
        owner = type(self).__name__
        name = self._start(name, kwargs)
        v = _check_backbone_args(owner, dict(
            vocabulary_size=vocabulary_size, num_layers=num_layers, num_heads=num_heads,
            hidden_dim=hidden_dim, intermediate_dim=intermediate_dim, dropout=dropout,
            max_sequence_length=max_sequence_length))
        token_ids, padding_mask = _int_input("token_ids"), _int_input("padding_mask")
        embeddings = TokenAndPositionEmbedding(
            vocabulary_size=v["vocabulary_size"], sequence_length=v["max_sequence_length"],
            embedding_dim=v["hidden_dim"], dtype=dtype, name=self._EMBEDDING_NAME)
        x = embeddings(token_ids)
        x = LayerNormalization(epsilon=self._EPSILON, dtype=dtype,
                               name="embeddings_layer_norm")(x)
        x = Dropout(v["dropout"], dtype=dtype, name="embeddings_dropout")(x)
        for i in range(v["num_layers"]):
            x = TransformerEncoder(num_heads=v["num_heads"],
                                   intermediate_dim=v["intermediate_dim"], activation="gelu",
                                   dropout=v["dropout"], layer_norm_epsilon=self._EPSILON,
                                   dtype=dtype,
                                   name=f"transformer_layer_{i}")(x, padding_mask=padding_mask)
        super().__init__(inputs={"token_ids": token_ids, "padding_mask": padding_mask},
                         outputs=x, name=name, trainable=trainable, dtype=dtype)
        for key, value in v.items():
            setattr(self, key, value)
        self.embeddings = embeddings
        self.token_embedding = embeddings.token_embedding


class DistilBertBackbone(_EncoderOnlyBackbone):
    """DistilBERT's encoder (``keras_hub.models.DistilBertBackbone``).

    Parameters: vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim (int),
    dropout (0.1), max_sequence_length (512), dtype.  Inputs ``{"token_ids",
    "padding_mask"}``; output (batch, sequence, hidden_dim).  Layer norms with epsilon 1e-12.
    """

    _keras_class = "DistilBertBackbone"
    _keras_module = "keras_hub.src.models.distil_bert.distil_bert_backbone"
    _EMBEDDING_NAME = "token_and_position_embedding"
    _EPSILON = 1e-12


class RobertaBackbone(_EncoderOnlyBackbone):
    """RoBERTa's encoder (``keras_hub.models.RobertaBackbone``).

    Parameters: vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim (int),
    dropout (0.1), max_sequence_length (512), dtype.  Inputs ``{"token_ids",
    "padding_mask"}``; output (batch, sequence, hidden_dim).  Layer norms with epsilon 1e-5.
    """

    _keras_class = "RobertaBackbone"
    _keras_module = "keras_hub.src.models.roberta.roberta_backbone"
    _EMBEDDING_NAME = "embeddings"
    _EPSILON = 1e-5


class GPT2Backbone(_HubModel):
    """GPT-2's decoder (``keras_hub.models.GPT2Backbone``).

    Parameters: vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim (int),
    dropout (0.1), max_sequence_length (1024), dtype.  Inputs ``{"token_ids",
    "padding_mask"}``; output (batch, sequence, hidden_dim).  Token plus position
    embeddings, pre-norm decoder blocks (causal self-attention, the tanh form of gelu,
    epsilon 1e-5) and a final layer norm.
    """

    _keras_class = "GPT2Backbone"
    _keras_module = "keras_hub.src.models.gpt2.gpt2_backbone"
    _HYPERPARAMETERS = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim",
                        "intermediate_dim", "dropout", "max_sequence_length")

    def __init__(self, vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim,
                 dropout=0.1, max_sequence_length=1024, dtype=None, name=None, trainable=True,
                 **kwargs):
        name = self._start(name, kwargs)
        v = _check_backbone_args("GPT2Backbone", dict(
            vocabulary_size=vocabulary_size, num_layers=num_layers, num_heads=num_heads,
            hidden_dim=hidden_dim, intermediate_dim=intermediate_dim, dropout=dropout,
            max_sequence_length=max_sequence_length))
        token_ids, padding_mask = _int_input("token_ids"), _int_input("padding_mask")
        token_embedding = ReversibleEmbedding(v["vocabulary_size"], v["hidden_dim"], dtype=dtype,
                                              name="token_embedding")
        tokens = token_embedding(token_ids)
        positions = PositionEmbedding(v["max_sequence_length"], dtype=dtype,
                                      name="position_embedding")(tokens)
        x = Add(dtype=dtype, name="embeddings_add")([tokens, positions])
        x = Dropout(v["dropout"], dtype=dtype, name="embeddings_dropout")(x)
        for i in range(v["num_layers"]):
            x = TransformerDecoder(intermediate_dim=v["intermediate_dim"],
                                   num_heads=v["num_heads"], dropout=v["dropout"],
                                   layer_norm_epsilon=1e-05, activation="gelu_approximate",
                                   normalize_first=True, dtype=dtype,
                                   name=f"transformer_layer_{i}")(
                x, decoder_padding_mask=padding_mask)
        x = LayerNormalization(epsilon=1e-05, dtype=dtype, name="layer_norm")(x)
        super().__init__(inputs={"token_ids": token_ids, "padding_mask": padding_mask},
                         outputs=x, name=name, trainable=trainable, dtype=dtype)
        for key, value in v.items():
            setattr(self, key, value)
        self.token_embedding = token_embedding


def _deserialize_backbone(owner, entry, custom_objects=None):
    """A backbone from its serialized entry (``{"class_name", "config", ...}``)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("config"), dict):
        raise ValueError(f"{owner}: the backbone must be a serialized model dict with "
                         f"'class_name' and 'config', got {str(entry)[:200]}")
    keys = _registry.entry_keys(entry)
    name = entry.get("class_name")
    if isinstance(name, str) and ">" not in name:
        keys.append(f"keras_hub>{name}")
    found = _registry.lookup_keys("layer", keys, custom_objects, owner=owner)
    if found is None:
        raise ValueError(f"{owner}: unknown backbone class {name!r} "
                         f"({entry.get('registered_name')})")
    return found.obj.from_config(dict(entry["config"]))


class BertTextClassifier(_HubModel):
    """BERT with a classification head (``keras_hub.models.BertTextClassifier``): the
    backbone's pooled output, dropout, and a Dense of ``num_classes``.

    Parameters
    ----------
    backbone : BertBackbone (or its serialized dict, as configs hold it)
    num_classes : int
    preprocessor : None
        Anything else is a ValueError: preprocessors and tokenizers are not supported (module
        notes, design D).
    activation : default None
        Of the Dense ("softmax" gives probabilities; None / "linear" logits).
    dropout : float, default 0.1

    Inputs: the backbone's; output (batch, num_classes).  The head's layers take the
    backbone's dtype policy.
    """

    _keras_class = "BertTextClassifier"
    _keras_module = "keras_hub.src.models.bert.bert_text_classifier"

    def __init__(self, backbone, num_classes, preprocessor=None, activation=None, dropout=0.1,
                 name=None, trainable=True, dtype=None, **kwargs):
        owner = "BertTextClassifier"
        name = self._start(name, kwargs)
        if preprocessor is not None:
            kind = preprocessor.get("class_name") if isinstance(preprocessor, dict) else \
                type(preprocessor).__name__
            raise ValueError(
                f"{owner}: the model has a preprocessor ({kind}); tokenizers and "
                f"preprocessors are not supported by mixedcore, and keras_hub's predict would "
                f"run it on the inputs, so the classifier cannot be loaded without changing "
                f"its predictions.  The backbone can be loaded: save classifier.backbone with "
                f"Keras (or the classifier with preprocessor=None) and load that file, with "
                f"token ids as inputs")
        if isinstance(backbone, dict):
            backbone = _deserialize_backbone(owner, backbone)
        if not isinstance(backbone, BertBackbone):
            raise TypeError(f"{owner}: backbone must be a BertBackbone, got "
                            f"{type(backbone).__name__}")
        self.num_classes = _args.positive_int(owner, "num_classes", num_classes)
        self.activation = _activations.resolve(owner, activation)
        self.dropout = float(_args.number(owner, "dropout", dropout, low=0, high=1,
                                          high_open=True))
        policy = backbone.dtype_policy
        inputs = backbone._inputs_struct
        pooled = backbone(inputs)["pooled_output"]
        pooled = Dropout(self.dropout, dtype=policy, name="classifier_dropout")(pooled)
        outputs = Dense(self.num_classes, activation=self.activation, dtype=policy,
                        name="logits")(pooled)
        super().__init__(inputs=inputs, outputs=outputs, name=name, trainable=trainable,
                         dtype=policy if dtype is None else dtype)
        self.backbone = backbone
        self.preprocessor = None

    def get_config(self):
        backbone = self.backbone
        cls = type(backbone)
        return {
            "backbone": {"module": cls._keras_module, "class_name": cls._keras_class,
                         "config": backbone.get_config(),
                         "registered_name": f"keras_hub>{cls._keras_class}",
                         "build_config": {"input_shape": None}},
            "preprocessor": None, "name": self.name, "num_classes": self.num_classes,
            "activation": self.activation, "dropout": self.dropout,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        if not isinstance(config, dict):
            raise ValueError(f"BertTextClassifier.from_config: expected a dict, got "
                             f"{type(config).__name__}")
        config = dict(config)
        if config.get("preprocessor") is not None:
            return cls(**config)        # the ValueError about preprocessors
        if isinstance(config.get("backbone"), dict):
            config["backbone"] = _deserialize_backbone("BertTextClassifier.from_config",
                                                       config["backbone"], custom_objects)
        return cls(**config)
