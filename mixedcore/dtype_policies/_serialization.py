"""Serialization of dtype policies: ``serialize``, ``deserialize`` and ``get``.

The dict form is Keras's: ``{"class_name": "DTypePolicy", "config": {"name": ...}}``.

Decisions (see docs/porting.md):

A. Configs of the deprecated experimental class ("Policy" in tf.keras 2.0-2.3, "PolicyV1" in
   2.4) load as a plain :class:`~mixedcore.DTypePolicy`, dropping the loss scale, as TF 2.4
   does, so saved models outlive the experimental class.  Keras 3's
   "FloatDTypePolicy" (Keras 3.0-3.5) loads the same way.
B. The extra keys Keras 3 writes next to "class_name" / "config" ("module",
   "registered_name") are ignored; any other key is an error, as is a missing one.
C. ``serialize`` of an experimental policy writes class "PolicyV1" with its loss scale (what
   tf.keras 2.4 writes); ``deserialize`` of that is a plain policy (decision A).
"""
from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any, Iterator, Union

import numpy as np

from mixedcore.dtype_policies import _policy
from mixedcore.dtype_policies import _experimental
from mixedcore.dtype_policies import _quantized
from mixedcore.dtype_policies._policy import DTypePolicy
from mixedcore.saving import object_registration as _registry

__all__ = ["serialize", "deserialize", "get"]

# what get / deserialize give: a policy, or a map of layer paths to policies
AnyPolicy = Union[DTypePolicy, "DTypePolicyMap"]

# class_name -> how it loads: every float policy class loads as a plain DTypePolicy (decision
# A); the quantized ones and the map as themselves.
_registry.register_builtins("dtype_policy", {name: DTypePolicy for name in (
    "DTypePolicy", "FloatDTypePolicy", "Policy", "PolicyV1")})
_registry.register_builtins("dtype_policy", {cls.__name__: cls for cls in (
    _quantized.QuantizedDTypePolicy, _quantized.QuantizedFloat8DTypePolicy,
    _quantized.Int4DTypePolicy, _quantized.GPTQDTypePolicy, _quantized.AWQDTypePolicy)})
# what serialize writes as "module" for these (Keras's own module)
_KERAS_MODULE = "keras.dtype_policies"
_IGNORED_KEYS = ("module", "registered_name")


def serialize(policy: DTypePolicy) -> dict[str, Any]:
    """The dict form of a policy.

    Parameters
    ----------
    policy : DTypePolicy
        A policy (an experimental ``Policy`` is written as class "PolicyV1", its config
        including a non-default loss scale).

    Returns
    -------
    dict
        ``{"class_name": "DTypePolicy", "config": {"name": ...}}``.

    Raises
    ------
    TypeError
        If `policy` is not a DTypePolicy.
    """
    if isinstance(policy, (_quantized.QuantizedDTypePolicy, DTypePolicyMap)) \
            and _registry.is_builtin("dtype_policy", type(policy)):
        return {"module": _KERAS_MODULE, "class_name": type(policy).__name__,
                "config": policy.get_config(), "registered_name": None}
    if not isinstance(policy, DTypePolicy):
        raise TypeError(f"serialize: expected a DTypePolicy, got {type(policy).__name__}: "
                        f"{policy!r}")
    if isinstance(policy, _experimental.Policy):
        return {"class_name": "PolicyV1", "config": policy.get_config()}
    if type(policy) is DTypePolicy:
        return {"module": "keras", "class_name": "DTypePolicy", "config": policy.get_config(),
                "registered_name": None}
    # a user's subclass: its own name, which deserialize finds in custom_objects (Keras 3
    # writes it as the registered name too)
    name = type(policy).__name__
    return {"class_name": name, "config": policy.get_config(),
            "registered_name": _registry.get_registered_name(type(policy))}


def deserialize(config: dict[str, Any] | str,
                custom_objects: dict[str, Any] | None = None) -> AnyPolicy:
    """A policy from its dict form (or from a policy name).

    Parameters
    ----------
    config : dict or str
        ``{"class_name": C, "config": {"name": ...}}`` with C one of "DTypePolicy",
        "FloatDTypePolicy" (Keras 3), "Policy" or "PolicyV1" (tf.keras); a
        ``"loss_scale"`` in the inner config is dropped.  A str is taken as a policy name.
    custom_objects : dict, optional
        Maps other class names to DTypePolicy subclasses (their ``from_config`` is used).

    Returns
    -------
    DTypePolicy
        A plain ``DTypePolicy`` for the known class names.

    Raises
    ------
    TypeError
        If `config` is neither a dict nor a str.
    ValueError
        If the dict lacks "class_name" or "config", has other keys, names an unknown class,
        or its inner config is not a valid policy config.
    """
    if isinstance(config, str):
        return _by_name("deserialize", config)
    if not isinstance(config, dict):
        raise TypeError(
            f"deserialize: expected a dict such as {{'class_name': 'DTypePolicy', 'config': "
            f"{{'name': 'mixed_float16'}}}} or a policy name, got {type(config).__name__}: "
            f"{config!r}")
    missing = [k for k in ("class_name", "config") if k not in config]
    if missing:
        raise ValueError(f"deserialize: the policy dict has no {missing} key(s): {config!r}")
    unknown = sorted(str(k) for k in config
                     if k not in ("class_name", "config") + _IGNORED_KEYS)
    if unknown:
        raise ValueError(f"deserialize: unexpected keys {unknown} in the policy dict {config!r}")
    class_name, inner = config["class_name"], config["config"]
    if not isinstance(inner, dict):
        raise ValueError(f"deserialize: 'config' must be a dict such as {{'name': 'float32'}}, "
                         f"got {type(inner).__name__}: {inner!r}")
    found = _registry.lookup("dtype_policy", config, custom_objects,
                             owner="dtype_policies.deserialize")
    if found is None:
        raise ValueError(f"deserialize: unknown policy class {class_name!r}; expected one of "
                         f"{list(_registry.builtin_objects('dtype_policy'))}")
    if not (isinstance(found.obj, type)
            and issubclass(found.obj, (DTypePolicy, DTypePolicyMap))):
        raise TypeError(f"deserialize: custom_objects[{found.key!r}] must be a subclass "
                        f"of DTypePolicy, got {found.obj!r}")
    # DTypePolicy.from_config checks the keys and drops "loss_scale" (decision A).
    return found.obj.from_config(inner)


def _by_name(owner: str, name: str) -> DTypePolicy:
    """A policy from its name: a quantized one for ``"<mode>_from_<policy>"`` names, else
    ``DTypePolicy(name)`` (so "int8" and "float8_e4m3fn" stay dtype names)."""
    if _quantized.is_quantized_name(name):
        return _quantized.quantized_policy(owner, name)
    return DTypePolicy(name)


def get(identifier: Any) -> AnyPolicy:
    """The policy a layer's ``dtype`` argument stands for (docs/policies.md, 'Equality, hashing,
    configs').

    Parameters
    ----------
    identifier : None, str, DTypePolicy, numpy dtype / scalar type, or dict
        None -> the policy in effect (:func:`mixedcore.global_policy`); a str -> that
        policy; a policy -> itself; a dtype (``np.float16``, ``np.dtype("float32")``,
        ``ml_dtypes.bfloat16``) -> the policy of its canonical name; a dict ->
        :func:`deserialize`.

    Returns
    -------
    DTypePolicy

    Raises
    ------
    ValueError
        If `identifier` is none of these (as Keras 3), or the name or dict is not valid.
    """
    if identifier is None:
        return _policy.global_policy()
    if isinstance(identifier, (DTypePolicy, DTypePolicyMap)):
        return identifier
    if isinstance(identifier, (str, dict)):
        return deserialize(identifier)
    if isinstance(identifier, np.dtype) or (
            isinstance(identifier, type) and issubclass(identifier, np.generic)):
        return DTypePolicy(np.dtype(identifier).name)
    raise ValueError(
        f"get: Cannot interpret `dtype` argument. Expected a string or an instance of "
        f"DTypePolicy (or None, a numpy dtype or a serialized policy dict). Received: "
        f"dtype={identifier!r} (of type {type(identifier).__name__})")


# --------------------------------------------------------------------------- a layer's dtype

def resolve_policy(owner: str, dtype: Any, path: str | None = None) -> DTypePolicy:
    """The policy a layer's ``dtype`` argument stands for (docs/layers.md, 'Policies and
    autocasting'): :func:`get`, after a type check whose error names the layer (`owner`); a
    ``DTypePolicyMap`` gives the policy of the layer's ``path`` (its name)."""
    if dtype is not None and not isinstance(dtype, (str, dict, np.dtype, type)) \
            and not isinstance(dtype, (DTypePolicy, DTypePolicyMap)):
        raise TypeError(f"{owner}: dtype must be None, a str, a policy, a numpy dtype or a "
                        f"serialized policy dict, got {type(dtype).__name__}: {dtype!r}")
    policy = get(dtype)
    if isinstance(policy, DTypePolicyMap):
        return policy[path] if path is not None else policy.default_policy
    return policy


def policy_config(policy: DTypePolicy) -> dict[str, Any] | str:
    """What a layer's config holds for its policy: :func:`serialize`'s dict, or the policy's
    name when it cannot be serialized."""
    try:
        return serialize(policy)
    except Exception:
        return policy.name


# --------------------------------------------------------------------------- the map

class DTypePolicyMap(MutableMapping):
    """Layer paths -> dtype policies, with a default (``keras.dtype_policies.DTypePolicyMap``).

    Parameters
    ----------
    default_policy : policy, name or None
        The policy of paths no key matches; None: the global policy when asked.
    policy_map : dict, optional
        Keys are layer paths or regular expressions over them (``re.fullmatch``); values are
        policies or anything ``dtype_policies.get`` takes.

    Notes
    -----
    ``m[path]`` is the exact key's policy, else the one key matching as a regular expression
    (two matching keys are a ValueError), else the default.  A key can be set only once.
    ``compute_dtype``, ``variable_dtype``, ``quantization_mode`` and ``name`` are the default
    policy's (``name``: ``"map_<default>"``).
    """

    def __init__(self, default_policy: Any = None,
                 policy_map: dict[str, Any] | None = None) -> None:
        if isinstance(default_policy, DTypePolicyMap):
            raise ValueError("DTypePolicyMap: `default_policy` cannot be a `DTypePolicyMap`.")
        if policy_map is not None and not isinstance(policy_map, dict):
            raise TypeError(f"DTypePolicyMap: If specified, `policy_map` must be a dict. "
                            f"Received: policy_map={policy_map!r} of type "
                            f"{type(policy_map).__name__}")
        self._default_arg = default_policy
        default = None if default_policy is None else get(default_policy)
        if isinstance(default, DTypePolicyMap):
            raise ValueError("DTypePolicyMap: `default_policy` cannot be a `DTypePolicyMap`.")
        self._default = default
        self._map: dict[str, DTypePolicy] = {}
        for key, value in (policy_map or {}).items():
            self[key] = value

    @property
    def default_policy(self) -> DTypePolicy:
        return self._default if self._default is not None else _policy.global_policy()

    @property
    def name(self) -> str:
        return f"map_{self.default_policy.name}"

    @property
    def compute_dtype(self) -> str | None:
        return self.default_policy.compute_dtype

    @property
    def variable_dtype(self) -> str | None:
        return self.default_policy.variable_dtype

    @property
    def quantization_mode(self) -> str | None:
        return getattr(self.default_policy, "quantization_mode", None)

    def __getitem__(self, key: str) -> DTypePolicy:
        if key in self._map:
            return self._map[key]
        if not isinstance(key, str):
            raise TypeError(f"DTypePolicyMap: keys are layer paths (str), got "
                            f"{type(key).__name__}: {key!r}")
        matching = [p for p in self._map if re.fullmatch(p, key)]
        if len(matching) > 1:
            raise ValueError(f"DTypePolicyMap: Path '{key}' matches multiple dtype policy "
                             f"specification keys: {matching}. Please make sure each path only "
                             f"matches at most one dtype policy specification key in the "
                             f"DTypePolicyMap.")
        if matching:
            return self._map[matching[0]]
        return self.default_policy

    def __setitem__(self, key: str, policy: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"DTypePolicyMap: keys are layer paths (str), got "
                            f"{type(key).__name__}: {key!r}")
        if key in self._map:
            raise ValueError(f"DTypePolicyMap: {key} already exist in the DTypePolicyMap with "
                             f"value {self._map[key]}. Please make sure to not use duplicated "
                             f"keys.")
        try:
            re.compile(key)
        except re.error as exc:
            raise ValueError(f"DTypePolicyMap: key {key!r} is not a valid regular expression "
                             f"({exc})") from None
        try:
            value = get(policy)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"DTypePolicyMap: Cannot interpret the assigned value by "
                             f"`keras.dtype_policies.get`. Received: {policy!r} of type "
                             f"{type(policy).__name__} ({exc})") from None
        if isinstance(value, DTypePolicyMap):
            raise ValueError(f"DTypePolicyMap: the policy of {key!r} cannot be a map")
        self._map[key] = value

    def __delitem__(self, key: str) -> None:
        del self._map[key]

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __eq__(self, other):
        if not isinstance(other, DTypePolicyMap):
            return NotImplemented
        return self._default == other._default and self._map == other._map

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self):
        default = None if self._default is None else self._default.name
        mapping = [(k, v.name) for k, v in self._map.items()]
        return f"<DTypePolicyMap default_policy={default}, mapping={mapping}>"

    def get_config(self) -> dict[str, Any]:
        default = self._default_arg
        if isinstance(default, DTypePolicy):
            default = serialize(default)
        entries = {}
        for key, policy in self._map.items():
            entry = serialize(policy)
            if default is None:
                # as Keras writes it: without a default, the entries follow the global policy
                # of the process that loads them
                inner = dict(entry["config"])
                inner["source_name" if "source_name" in inner else "name"] = None
                entry = dict(entry, config=inner)
            entries[key] = entry
        return {"default_policy": default, "policy_map": entries}

    @classmethod
    def from_config(cls, config: dict[str, Any],
                    custom_objects: dict[str, Any] | None = None) -> DTypePolicyMap:
        owner = "DTypePolicyMap.from_config"
        if not isinstance(config, dict):
            raise TypeError(f"{owner}: config must be a dict, got {type(config).__name__}")
        unknown = sorted(str(k) for k in config if k not in ("default_policy", "policy_map"))
        if unknown:
            raise ValueError(f"{owner}: unexpected keys {unknown} in {config!r}")
        raw = config.get("policy_map") or {}
        if isinstance(raw, dict) and "class_name" in raw and raw.get("class_name") == "__dict__":
            raw = raw.get("config", {})
        if not isinstance(raw, dict):
            raise ValueError(f"{owner}: 'policy_map' must be a dict, got {raw!r}")
        default = config.get("default_policy")
        if isinstance(default, dict):
            default = deserialize(default, custom_objects)
        entries = {}
        for key, value in raw.items():
            if isinstance(value, dict) and isinstance(value.get("config"), dict) \
                    and "name" in value["config"] and value["config"]["name"] is None:
                value = dict(value, config=dict(value["config"], name=_policy.global_policy().name))
            entries[key] = deserialize(value, custom_objects) if isinstance(value, (dict, str)) \
                else value
        return cls(default, entries)


_registry.register_builtin("dtype_policy", DTypePolicyMap)
