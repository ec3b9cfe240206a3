"""Keras 3's quantized dtype policies and ``DTypePolicyMap`` (docs/quantization.md).

A quantized policy is a float policy (its *source*, e.g. "float32" or "mixed_bfloat16") plus a
quantization mode: its name is ``"<mode>_from_<source>"``, its compute and variable dtypes are the
source's, and ``quantization_mode`` names the mode.  The classes, their names, errors, equality
and configs are Keras 3.15's:

- ``QuantizedDTypePolicy``: modes "int8" and "int4" (per-channel int4 files written before
  block sizes existed);
- ``Int4DTypePolicy``: mode ``"int4/<block_size>"`` (-1 per channel, else groups of that many
  input rows);
- ``QuantizedFloat8DTypePolicy``: mode "float8", with ``amax_history_length``;
- ``GPTQDTypePolicy`` / ``AWQDTypePolicy``: ``"gptq/<bits>/<group>"``, ``"awq/4/<group>"``;
- ``DTypePolicyMap``: layer paths (or regular expressions over them) -> policies, with a default.

Decisions:
A. Policies stay immutable and hashable, as mixedcore's ``DTypePolicy`` is (Keras 3 mutates a
   map's policies in ``get_config``; here ``get_config`` builds new dicts).  A ``DTypePolicyMap``
   is mutable (it is a mapping) and so, like a dict, not hashable.
B. ``quantized_policy`` parses a name as ``keras.dtype_policies.get`` does: a name starting with
   a mode is split at ``"_from_"``.
"""
from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any, Iterator

from mixedcore.dtype_policies._policy import DTypePolicy, global_policy

__all__ = ["QUANTIZATION_MODES", "QuantizedDTypePolicy", "QuantizedFloat8DTypePolicy",
           "Int4DTypePolicy", "GPTQDTypePolicy", "AWQDTypePolicy", "DTypePolicyMap",
           "quantized_policy"]

QUANTIZATION_MODES = ("int8", "float8", "int4", "gptq", "awq")


class QuantizedDTypePolicy(DTypePolicy):
    """A float policy whose layers hold quantized weights (``keras.dtype_policies.
    QuantizedDTypePolicy``).

    Parameters
    ----------
    mode : str
        "int8", "int4", "float8", "gptq" or "awq" (the subclasses take the longer forms).
    source_name : str, optional
        The float policy it quantizes ("float32", "mixed_bfloat16", ...); default: the global
        policy's name.

    Raises
    ------
    ValueError
        An unknown mode; a source that is not a policy name; mode "int8" with a float16
        compute dtype (Keras refuses it: float16 cannot hold the int32 sums' scale).
    """

    __slots__ = ("_source_name", "_quantization_mode")

    def __init__(self, mode: str, source_name: str | None = None) -> None:
        if source_name is None:
            source_name = global_policy().name
        if not isinstance(mode, str):
            raise TypeError(f"{type(self).__name__}: mode must be a str such as 'int8', got "
                            f"{type(mode).__name__}: {mode!r}")
        compute, variable = self._parse_name(source_name)
        self._check_mode(mode, compute)
        self._name = f"{mode}_from_{source_name}"
        self._compute_dtype = compute
        self._variable_dtype = variable
        self._source_name = source_name
        self._quantization_mode = mode

    def _check_mode(self, mode, compute):
        owner = type(self).__name__
        if mode not in QUANTIZATION_MODES:
            raise ValueError(f"{owner}: Invalid quantization mode. Expected one of "
                             f"{QUANTIZATION_MODES}. Received: mode={mode!r}")
        if compute == "float16" and mode == "int8":
            raise ValueError(f"{owner}: Quantization mode='{mode}' doesn't work well with "
                             f"compute_dtype='float16'.")

    @property
    def quantization_mode(self) -> str | None:
        """The base mode: "int8", "int4", "float8", "gptq" or "awq"."""
        return self._quantization_mode

    @property
    def source_name(self) -> str:
        """The name of the float policy this one quantizes."""
        return self._source_name

    def __eq__(self, other):
        if not isinstance(other, DTypePolicy):
            return NotImplemented
        return type(self) is type(other) and self._name == other._name

    def __hash__(self):
        return hash((DTypePolicy, type(self).__name__, self._name))

    def get_config(self) -> dict[str, Any]:
        return {"mode": self._quantization_mode, "source_name": self._source_name}

    @classmethod
    def from_config(cls, config: dict[str, Any],
                    custom_objects: dict[str, Any] | None = None) -> QuantizedDTypePolicy:
        owner = f"{cls.__name__}.from_config"
        if not isinstance(config, dict):
            raise TypeError(f"{owner}: config must be a dict such as {{'mode': 'int8', "
                            f"'source_name': 'float32'}}, got {type(config).__name__}: "
                            f"{config!r}")
        allowed = cls._config_keys()
        unknown = sorted(str(k) for k in config if k not in allowed)
        if unknown or "mode" not in config:
            raise ValueError(f"{owner}: expected the keys {list(allowed)} ('mode' required), "
                             f"got {config!r}")
        return cls(**config)

    @classmethod
    def _config_keys(cls):
        return ("mode", "source_name")


class QuantizedFloat8DTypePolicy(QuantizedDTypePolicy):
    """Mode "float8" (``keras.dtype_policies.QuantizedFloat8DTypePolicy``): inputs and kernel
    pass through float8_e4m3fn with per-tensor scales; ``amax_history_length`` is the length of
    the amax history float8 training keeps (inference reads only the scales)."""

    __slots__ = ("_amax_history_length",)
    default_amax_history_length = 1024

    def __init__(self, mode: str, source_name: str | None = None,
                 amax_history_length: int = 1024) -> None:
        super().__init__(mode, source_name)
        if not isinstance(amax_history_length, int) or isinstance(amax_history_length, bool):
            raise TypeError(f"QuantizedFloat8DTypePolicy: `amax_history_length` must be an "
                            f"integer. Received: amax_history_length={amax_history_length!r}")
        if amax_history_length < 1:
            raise ValueError(f"QuantizedFloat8DTypePolicy: amax_history_length must be >= 1, "
                             f"got {amax_history_length}")
        self._amax_history_length = amax_history_length

    @property
    def amax_history_length(self) -> int:
        return self._amax_history_length

    def __eq__(self, other):
        result = super().__eq__(other)
        if result is not True:
            return result
        return self._amax_history_length == other._amax_history_length

    def __hash__(self):
        return hash((super().__hash__(), self._amax_history_length))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["amax_history_length"] = self._amax_history_length
        return config

    @classmethod
    def _config_keys(cls):
        return ("mode", "source_name", "amax_history_length")


def _mode_ints(owner, mode, head, fields):
    """The integers of ``"<head>/<a>/<b>..."``, with Keras's errors."""
    parts = mode.split("/") if isinstance(mode, str) else []
    form = "'" + "/".join([head] + [f"<{f}>" for f in fields]) + "'"
    if len(parts) != len(fields) + 1 or parts[0] != head:
        raise ValueError(f"{owner}: Invalid mode for {owner}. Expected format {form}, but got "
                         f"{mode!r}.")
    try:
        return [int(p) for p in parts[1:]]
    except ValueError:
        raise ValueError(f"{owner}: Invalid mode for {owner}. {', '.join(f'<{f}>' for f in fields)}"
                         f" must be integers. Expected format {form}, but got {mode!r}.") from None


def _check_group(owner, what, value, mode):
    if value < -1 or value == 0:
        raise ValueError(f"{owner}: Invalid {what} in mode. Supported values are -1 or a "
                         f"positive integer, but got {value} from {mode!r}.")


class Int4DTypePolicy(QuantizedDTypePolicy):
    """Mode ``"int4/<block_size>"`` (``keras.dtype_policies.Int4DTypePolicy``): int4 weights
    with one scale per output channel (block_size -1) or per group of ``block_size`` input rows
    and output channel, with zero points."""

    __slots__ = ("block_size",)

    def __init__(self, mode: str, source_name: str | None = None) -> None:
        (block,) = _mode_ints("Int4DTypePolicy", mode, "int4", ["block_size"])
        _check_group("Int4DTypePolicy", "block_size", block, mode)
        super().__init__("int4", source_name)
        self._name = f"{mode}_from_{self._source_name}"
        self.block_size = block

    def get_config(self) -> dict[str, Any]:
        return {"mode": f"int4/{self.block_size}", "source_name": self._source_name}


class GPTQDTypePolicy(QuantizedDTypePolicy):
    """Mode ``"gptq/<weight_bits>/<group_size>"`` (``keras.dtype_policies.GPTQDTypePolicy``)."""

    __slots__ = ("weight_bits", "group_size")

    def __init__(self, mode: str, source_name: str | None = None) -> None:
        bits, group = _mode_ints("GPTQDTypePolicy", mode, "gptq", ["weight_bits", "group_size"])
        if bits not in (2, 3, 4, 8):
            raise ValueError(f"GPTQDTypePolicy: Invalid weight_bits in mode. Supported values "
                             f"are 2, 3, 4, and 8, but got {bits} from {mode!r}.")
        _check_group("GPTQDTypePolicy", "group_size", group, mode)
        super().__init__("gptq", source_name)
        self._name = f"{mode}_from_{self._source_name}"
        self.weight_bits = bits
        self.group_size = group

    def get_config(self) -> dict[str, Any]:
        return {"mode": f"gptq/{self.weight_bits}/{self.group_size}",
                "source_name": self._source_name}


class AWQDTypePolicy(QuantizedDTypePolicy):
    """Mode ``"awq/4/<group_size>"`` (``keras.dtype_policies.AWQDTypePolicy``)."""

    __slots__ = ("weight_bits", "group_size")

    def __init__(self, mode: str, source_name: str | None = None) -> None:
        bits, group = _mode_ints("AWQDTypePolicy", mode, "awq", ["weight_bits", "group_size"])
        if bits != 4:
            raise ValueError(f"AWQDTypePolicy: Invalid weight_bits in mode. AWQ only supports "
                             f"4-bit quantization, but got {bits} from {mode!r}.")
        _check_group("AWQDTypePolicy", "group_size", group, mode)
        super().__init__("awq", source_name)
        self._name = f"{mode}_from_{self._source_name}"
        self.weight_bits = bits
        self.group_size = group

    def get_config(self) -> dict[str, Any]:
        return {"mode": f"awq/{self.weight_bits}/{self.group_size}",
                "source_name": self._source_name}


def is_quantized_name(name: str) -> bool:
    """Whether a policy name is a quantized policy's: it starts with a quantization mode and
    names its source after "_from_" (Keras takes every name starting with a mode; here "int8",
    "int4" and "float8_e4m3fn" remain the dtype names they are)."""
    return name.startswith(QUANTIZATION_MODES) and "_from" in name


def quantized_policy(owner: str, name: str) -> QuantizedDTypePolicy:
    """The policy of a name ``"<mode>_from_<source>"`` (``keras.dtype_policies.get``'s rule)."""
    parts = name.split("_from_")
    if len(parts) != 2:
        raise ValueError(f"{owner}: Cannot convert {name!r} into a valid pair (`mode`, "
                         f"`source_name`) to instantiate `QuantizedDTypePolicy`: a quantized "
                         f"policy is named '<mode>_from_<policy>', e.g. 'int8_from_float32'")
    mode, source = parts
    if mode.startswith("int4/"):
        return Int4DTypePolicy(mode, source)
    if mode.startswith("gptq"):
        return GPTQDTypePolicy(mode, source)
    if mode.startswith("awq"):
        return AWQDTypePolicy(mode, source)
    if mode == "float8":
        return QuantizedFloat8DTypePolicy(mode, source)
    return QuantizedDTypePolicy(mode, source)


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
        from mixedcore.dtype_policies._serialization import get
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
        return self._default if self._default is not None else global_policy()

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
        from mixedcore.dtype_policies._serialization import get
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
        from mixedcore.dtype_policies._serialization import serialize
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
        from mixedcore.dtype_policies._serialization import deserialize
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
                value = dict(value, config=dict(value["config"], name=global_policy().name))
            entries[key] = deserialize(value, custom_objects) if isinstance(value, (dict, str)) \
                else value
        return cls(default, entries)
