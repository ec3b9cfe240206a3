"""keras_hub models in mixedcore: the text backbones, BERT's classifier, the ViT backbone and the
image classifiers, and keras_hub's modeling layers, loaded from the ``.keras`` files Keras writes
(docs/keras_hub.md).

Importing this package (``import mixedcore`` does) registers its classes under keras_hub's
registered names ("keras_hub>BertBackbone", "keras_hub>TransformerEncoder", ...) as built-in
layer classes, so ``mixedcore.models.load_model`` reads such files without ``custom_objects``.

keras_hub's models are functional models whose config holds their hyperparameters, not a graph
of layers.  :func:`model_from_dict` is the model reader this package registers with
``mixedcore.saving.config``: a keras_hub model class is made by its ``from_config`` from those
hyperparameters (with the policy of ``dtype_policy=`` in place of the stored one); other configs
are left to the loader; a keras_hub class mixedcore does not have is a ValueError naming it.
"""
from __future__ import annotations

import inspect
from typing import Any

from mixedcore.dtype_policies import DTypePolicy
from mixedcore.hub._layers import (PositionEmbedding, ReversibleEmbedding,
                                   TokenAndPositionEmbedding, TokenSelect, TransformerDecoder,
                                   TransformerEncoder)
from mixedcore.hub._text import (BertBackbone, BertTextClassifier, DistilBertBackbone,
                                 GPT2Backbone, RobertaBackbone)
from mixedcore.hub._vision import ImageClassifier, ViTBackbone, ViTImageClassifier
from mixedcore.models._model import Model
from mixedcore.saving import config as _config
from mixedcore.saving import object_registration as _registry
from mixedcore.saving.file_utils import _fail

__all__ = ["BertBackbone", "DistilBertBackbone", "RobertaBackbone", "GPT2Backbone",
           "BertTextClassifier", "TransformerEncoder", "TransformerDecoder", "PositionEmbedding",
           "ReversibleEmbedding", "TokenAndPositionEmbedding", "TokenSelect", "ViTBackbone",
           "ViTImageClassifier", "ImageClassifier", "model_from_dict", "registered_names"]

_PACKAGE = "keras_hub"
_CLASSES = (TransformerEncoder, TransformerDecoder, PositionEmbedding, ReversibleEmbedding,
            TokenAndPositionEmbedding, BertBackbone, DistilBertBackbone, RobertaBackbone,
            GPT2Backbone, BertTextClassifier)
for _cls in _CLASSES:
    _registry.register_builtin("layer", _cls,
                               f"{_PACKAGE}>{_cls.__dict__.get('_keras_class', _cls.__name__)}")


def registered_names() -> list[str]:
    """The keras_hub registered names mixedcore loads ("keras_hub>BertBackbone", ...): this
    package's classes and those other modules registered under keras_hub's names."""
    return sorted(name for name in _registry.builtin_objects("layer")
                  if name.startswith(f"{_PACKAGE}>"))


def _is_hub_entry(entry: dict[str, Any]) -> bool:
    """Whether a serialized entry names a keras_hub class: by its registered name, or by the
    module keras_hub (or this package, in a file mixedcore wrote) keeps it in."""
    registered = entry.get("registered_name")
    module = entry.get("module")
    return (isinstance(registered, str) and registered.startswith(f"{_PACKAGE}>")) or (
        isinstance(module, str) and (module == _PACKAGE or module.startswith(
            (f"{_PACKAGE}.", "mixedcore.hub"))))


def _hub_keys(entry: dict[str, Any]) -> list[str]:
    keys = _registry.entry_keys(entry)
    name = entry.get("class_name")
    if _is_hub_entry(entry) and isinstance(name, str) and ">" not in name:
        keys.insert(0, f"{_PACKAGE}>{name}")
    return keys


def _named(obj: Any) -> Any:
    """``obj`` with every keras_hub entry's ``registered_name`` set to the key mixedcore has
    it under (a file mixedcore wrote names them by module and class only)."""
    if isinstance(obj, list):
        return [_named(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _named(v) for k, v in obj.items() if k != "shared_object_id"}
    name = out.get("class_name")
    if isinstance(name, str) and _is_hub_entry(out) and \
            f"{_PACKAGE}>{name}" in _registry.builtin_objects("layer"):
        out["registered_name"] = f"{_PACKAGE}>{name}"
    return out


def _with_policy(config: dict[str, Any], policy: DTypePolicy) -> dict[str, Any]:
    """A keras_hub model config whose policy (and its backbone's) is ``policy``: keras_hub
    gives every layer of a model the model's policy, so it is the one policy to replace."""
    config = dict(config)
    config["dtype"] = {"module": "keras", "class_name": "DTypePolicy",
                       "config": {"name": policy.name}, "registered_name": None}
    backbone = config.get("backbone")
    if isinstance(backbone, dict) and isinstance(backbone.get("config"), dict):
        backbone = dict(backbone)
        backbone["config"] = _with_policy(backbone["config"], policy)
        config["backbone"] = backbone
    return config


def model_from_dict(owner: str, source: str, model_dict: Any, custom: dict[str, Any],
                    policy: DTypePolicy | None) -> Any:
    """A keras_hub model from a file's serialized model (what ``load_model`` reads from
    config.json), made from its hyperparameters; None for any other config, which
    ``mixedcore.saving.config`` rebuilds (this is one of its model readers).

    Raises
    ------
    ValueError
        A keras_hub class mixedcore does not have (named, with the ones it has), or a config
        its class cannot be made from; the message names ``source``.
    """
    if not isinstance(model_dict, dict) or "class_name" not in model_dict:
        return None
    model_dict = _named(model_dict)
    if not _is_hub_entry(model_dict):
        return None
    class_name = model_dict["class_name"]
    found = _registry.lookup_keys("layer", _hub_keys(model_dict), custom, owner=owner)
    if found is None:
        raise _fail(owner, source,
                    f"unknown keras_hub class {class_name!r} (registered name "
                    f"{model_dict.get('registered_name')!r}); mixedcore loads "
                    f"{registered_names()}")
    cls = found.obj
    config = model_dict.get("config")
    if not (isinstance(cls, type) and issubclass(cls, Model)) or \
            (isinstance(config, dict) and isinstance(config.get("layers"), list)):
        return None
    if not isinstance(config, dict):
        raise _fail(owner, source, f"the config of {class_name} is not a dict")
    if policy is not None:
        config = _with_policy(config, policy)
    try:
        with _registry.custom_object_scope(custom):
            if "custom_objects" in inspect.signature(cls.from_config).parameters:
                return cls.from_config(config, custom_objects=custom or None)
            return cls.from_config(config)
    except (TypeError, ValueError, KeyError) as exc:
        raise _fail(owner, source, f"cannot make the {class_name} of the file: "
                                   f"{type(exc).__name__}: {exc}") from exc


_config.register_model_reader(model_from_dict)
