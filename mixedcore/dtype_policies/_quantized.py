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
- ``GPTQDTypePolicy`` / ``AWQDTypePolicy``: ``"gptq/<bits>/<group>"``, ``"awq/4/<group>"``.

(``DTypePolicyMap``, which maps layer paths to policies of any class, is _serialization's.)

Decisions:
A. Policies stay immutable and hashable, as mixedcore's ``DTypePolicy`` is (Keras 3 mutates a
   map's policies in ``get_config``; here ``get_config`` builds new dicts).
B. ``quantized_policy`` parses a name as ``keras.dtype_policies.get`` does, split at
   ``"_from_"``; ``set_policy`` and ``policy_scope`` reach it through the name hook this module
   registers with ``_policy`` (which cannot import it: this module derives from its class).
"""
from __future__ import annotations

from typing import Any

from mixedcore.dtype_policies import _policy
from mixedcore.dtype_policies._policy import DTypePolicy, global_policy

__all__ = ["QUANTIZATION_MODES", "QuantizedDTypePolicy", "QuantizedFloat8DTypePolicy",
           "Int4DTypePolicy", "GPTQDTypePolicy", "AWQDTypePolicy", "quantized_policy",
           "is_quantized_name"]

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


class _BitsGroupPolicy(QuantizedDTypePolicy):
    """The policies of mode ``"<head>/<weight_bits>/<group_size>"``: GPTQ and AWQ."""

    __slots__ = ("weight_bits", "group_size")
    _head = ""

    def __init__(self, mode: str, source_name: str | None = None) -> None:
        owner = type(self).__name__
        bits, group = _mode_ints(owner, mode, self._head, ["weight_bits", "group_size"])
        self._check_bits(owner, bits, mode)
        _check_group(owner, "group_size", group, mode)
        super().__init__(self._head, source_name)
        self._name = f"{mode}_from_{self._source_name}"
        self.weight_bits = bits
        self.group_size = group

    @staticmethod
    def _check_bits(owner, bits, mode):
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        return {"mode": f"{self._head}/{self.weight_bits}/{self.group_size}",
                "source_name": self._source_name}


class GPTQDTypePolicy(_BitsGroupPolicy):
    """Mode ``"gptq/<weight_bits>/<group_size>"`` (``keras.dtype_policies.GPTQDTypePolicy``)."""

    __slots__ = ()
    _head = "gptq"

    @staticmethod
    def _check_bits(owner, bits, mode):
        if bits not in (2, 3, 4, 8):
            raise ValueError(f"{owner}: Invalid weight_bits in mode. Supported values are 2, 3, "
                             f"4, and 8, but got {bits} from {mode!r}.")


class AWQDTypePolicy(_BitsGroupPolicy):
    """Mode ``"awq/4/<group_size>"`` (``keras.dtype_policies.AWQDTypePolicy``)."""

    __slots__ = ()
    _head = "awq"

    @staticmethod
    def _check_bits(owner, bits, mode):
        if bits != 4:
            raise ValueError(f"{owner}: Invalid weight_bits in mode. AWQ only supports 4-bit "
                             f"quantization, but got {bits} from {mode!r}.")


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


_policy.register_name_parser(is_quantized_name, quantized_policy)
