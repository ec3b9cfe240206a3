"""Dtype policies: ``DTypePolicy``, the process-wide global policy and ``policy_scope``.

A dtype policy names the two dtypes a layer works with: the *compute* dtype (inputs, outputs
and arithmetic) and the *variable* dtype (storage of the weights).  The names and semantics are
those of ``keras.mixed_precision`` (Keras 3), see docs/policies.md.

Decisions (see docs/policies.md and docs/porting.md):

A. Names are exact.  A name is accepted when it is "mixed_float16", "mixed_bfloat16" or the
   canonical name of a numeric dtype that numpy or ml_dtypes defines, i.e. a name ``n`` with
   ``np.dtype(n).name == n``.  Aliases that numpy also understands ("f4", "float", "half",
   "double", "long", ...) are refused: they would make two spellings of one policy compare
   unequal and Keras itself only documents canonical names.
B. Non-numeric numpy dtypes (object, str, bytes, void, datetime64, timedelta64) are refused:
   no layer can compute in them.
C. The table of valid names is built once, at import, from ``np.sctypeDict`` (which ml_dtypes
   extends when it is imported).  Parsing is then a dictionary lookup: no call into numpy's
   string parser, which accepts many non-canonical forms and warns on some of them.
D. The global policy is one module variable, replaced atomically under a lock: every thread
   sees it.  ``policy_scope`` stores its override in a ``contextvars.ContextVar``, so it is
   local to the thread or asyncio task that entered it (a task created inside a scope starts
   with a copy of the creator's context, as contextvars specify).
"""
from __future__ import annotations

import contextlib
import contextvars
import difflib
import threading
from typing import Any, Iterator, Union

import ml_dtypes  # noqa: F401  (registers bfloat16, float8_*, int4, ... with numpy)
import numpy as np
from numpy.typing import DTypeLike

__all__ = [
    "DTypePolicy",
    "Policy",
    "set_policy",
    "set_global_policy",
    "set_dtype_policy",
    "global_policy",
    "dtype_policy",
    "policy_scope",
    "dtype_names",
    "policy_names",
]

# --------------------------------------------------------------------------- name table

_MIXED = {
    "mixed_float16": ("float16", "float32"),
    "mixed_bfloat16": ("bfloat16", "float32"),
}

_VALID_FORMS = "'mixed_float16', 'mixed_bfloat16', or a dtype name such as 'float32'"


def _category(name, dtype):
    """Kind of a canonical dtype name: 'floating', 'integer', 'complex', 'bool' or None.

    numpy builtins are classified by ``dtype.kind``.  ml_dtypes types all report kind 'V'
    (or 'W', or even 'f' for float8_e5m2), so they are classified by their canonical name,
    which ml_dtypes always spells '<b?float|int|uint|b?complex><bits>...'.
    """
    if dtype.type.__module__.split(".")[0] == "numpy":
        return {"b": "bool", "i": "integer", "u": "integer", "f": "floating",
                "c": "complex"}.get(dtype.kind)
    if "complex" in name:
        return "complex"
    if name.startswith(("float", "bfloat")):
        return "floating"
    if name.startswith(("int", "uint")):
        return "integer"
    return None


def _build_dtype_table():
    table = {}
    for key in np.sctypeDict:
        # 'a' is a deprecated alias that warns when parsed; it is never canonical anyway.
        if not isinstance(key, str) or key == "a" or key in table:
            continue
        try:
            dtype = np.dtype(key)
        except TypeError:
            continue
        if dtype.name != key:
            continue
        category = _category(key, dtype)
        if category is not None:
            table[key] = category
    return table


# canonical dtype name -> 'floating' / 'integer' / 'complex' / 'bool'
_DTYPE_TABLE = _build_dtype_table()


def dtype_names() -> list[str]:
    """Every dtype name a policy accepts on this platform, sorted.

    Returns
    -------
    list of str
        Canonical numpy / ml_dtypes names of the numeric dtypes, e.g. 'bfloat16', 'bool',
        'float16', 'float32', 'int8', ...  ('float128' / 'complex256' only where numpy's long
        double is 128 bits wide).
    """
    return sorted(_DTYPE_TABLE)


def policy_names() -> list[str]:
    """Every name ``DTypePolicy`` accepts: the two mixed policies, then :func:`dtype_names`."""
    return list(_MIXED) + dtype_names()


def _is_floating(dtype_name):
    return _DTYPE_TABLE.get(dtype_name) == "floating"


def _deprecated_name_message(owner, name):
    """Message for the '*_float32_vars' and 'infer' names, which only experimental.Policy takes."""
    if name == "float16_with_float32_vars":
        instead = "'mixed_float16'"
    elif name == "bfloat16_with_float32_vars":
        instead = "'mixed_bfloat16'"
    else:
        instead = "'mixed_float16' or 'mixed_bfloat16'"
    if name == "infer":
        what = ("the 'infer' policy was removed from DTypePolicy: a policy's dtypes are fixed "
                "when it is created")
    else:
        what = "policies ending in '_float32_vars' were removed from DTypePolicy"
    return (f"{owner}: {what}; got {name!r}. Use {instead} instead, or a dtype name such as "
            f"'float32' (the deprecated mixedcore.experimental.Policy still accepts {name!r}).")


def _parse_dtype_policy_name(owner, name):
    """(compute_dtype, variable_dtype) for a DTypePolicy name, or the error of docs/policies.md,
    'Refused names and the errors'."""
    if not isinstance(name, str):
        raise TypeError(
            f"{owner}: 'name' must be a string such as 'mixed_float16' or 'float32', got "
            f"{type(name).__name__}: {name!r}")
    if name in _MIXED:
        return _MIXED[name]
    if name in _DTYPE_TABLE:
        return name, name
    if name == "infer" or name.endswith("_float32_vars"):
        raise ValueError(_deprecated_name_message(owner, name))
    near = difflib.get_close_matches(name, policy_names(), n=3, cutoff=0.7)
    hint = f" Did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
    raise ValueError(
        f"{owner}: Cannot convert {name!r} to a mixed precision DTypePolicy.{hint} Valid "
        f"policies are {_VALID_FORMS} "
        f"(the exact, lower-case numpy / ml_dtypes name; mixedcore.policy.policy_names() lists "
        f"them all).")


# --------------------------------------------------------------------------- the class

class DTypePolicy:
    """A dtype policy for a layer: the dtype it computes in and the dtype of its variables.

    Parameters
    ----------
    name : str
        ``"mixed_float16"`` (compute float16, variables float32), ``"mixed_bfloat16"``
        (compute bfloat16, variables float32), or the exact name of a numeric numpy /
        ml_dtypes dtype such as ``"float32"``, ``"float64"``, ``"bfloat16"``, ``"int32"``,
        ``"bool"`` (both dtypes are that dtype).

    Raises
    ------
    TypeError
        If `name` is not a ``str``.
    ValueError
        If `name` is not one of the forms above.  Names are exact: ``"Float32"``,
        ``" float32"``, ``"f4"``, ``""`` are refused.  The deprecated names ``"infer"`` and
        ``"<dtype>_with_float32_vars"`` are refused with a message naming the replacement
        (only :class:`mixedcore.experimental.Policy` takes them).

    Notes
    -----
    Policies are immutable, compare equal when they have the same class and name, and are
    hashable (Keras 3 policies are not hashable).  ``Policy`` is an alias of this class, as in
    ``keras.mixed_precision``.

    Examples
    --------
    >>> p = DTypePolicy("mixed_float16")
    >>> p
    <DTypePolicy "mixed_float16">
    >>> p.compute_dtype, p.variable_dtype, p.should_cast_variables
    ('float16', 'float32', True)
    """

    __slots__ = ("_name", "_compute_dtype", "_variable_dtype")

    def __init__(self, name: str) -> None:
        compute, variable = self._parse_name(name)
        self._name = str(name)
        self._compute_dtype = compute
        self._variable_dtype = variable

    def _parse_name(self, name):
        return _parse_dtype_policy_name(type(self).__name__, name)

    # -- read-only properties ---------------------------------------------------------
    @property
    def name(self) -> str:
        """The name of this policy (str)."""
        return self._name

    @property
    def compute_dtype(self) -> str | None:
        """Dtype name the layer computes in: its inputs are cast to it, its outputs have it."""
        return self._compute_dtype

    @property
    def variable_dtype(self) -> str | None:
        """Dtype name the layer creates its weights in (regularizers run in it too)."""
        return self._variable_dtype

    @property
    def quantization_mode(self) -> str | None:
        """None: a float policy's layers hold float weights (the quantized policies of
        ``dtype_policies`` name their mode here)."""
        return None

    @property
    def should_cast_variables(self) -> bool:
        """True when the variable dtype differs from the compute dtype."""
        return self._compute_dtype != self._variable_dtype

    # -- the 'infer' hook -----------------------------------------------------------
    def infer_from(self, dtype: DTypeLike) -> DTypePolicy:
        """The concrete policy a layer with this policy uses for a first input of `dtype`.

        A layer calls this once, on its first call, with the dtype of its first input when
        ``policy.compute_dtype is None``.  Only the deprecated ``experimental.Policy("infer")``
        and ``experimental.Policy("infer_with_float32_vars")`` have no compute dtype; every
        other policy is already concrete and returns itself, whatever `dtype` is.

        Parameters
        ----------
        dtype : dtype-like
            The dtype of the layer's first input (unused here).

        Returns
        -------
        DTypePolicy
            ``self``.
        """
        return self

    # -- identity -------------------------------------------------------------------
    def __repr__(self):
        return f'<{type(self).__name__} "{self._name}">'

    def __eq__(self, other):
        if not isinstance(other, DTypePolicy):
            return NotImplemented
        return type(self) is type(other) and self._name == other._name

    def __hash__(self):
        return hash((DTypePolicy, type(self).__name__, self._name))

    # -- config ---------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The policy's config: ``{"name": name}``."""
        return {"name": self._name}

    @classmethod
    def from_config(cls, config: dict[str, Any],
                    custom_objects: dict[str, Any] | None = None) -> DTypePolicy:
        """Rebuild a policy from :meth:`get_config` output.

        A ``"loss_scale"`` key, written by the deprecated experimental policy of tf.keras
        2.0-2.4, is dropped silently: such configs load as plain policies.

        Parameters
        ----------
        config : dict
            ``{"name": str}``, optionally with ``"loss_scale"``.
        custom_objects : dict, optional
            Accepted for tf.keras compatibility; unused.

        Raises
        ------
        TypeError
            If `config` is not a dict.
        ValueError
            If `config` has no ``"name"`` or has keys other than ``"name"`` / ``"loss_scale"``.
        """
        owner = f"{cls.__name__}.from_config"
        _check_config(owner, config, allowed=("name", "loss_scale"))
        return cls(config["name"])


Policy = DTypePolicy


# what set_policy, policy_scope and the layers' dtype argument accept: a policy or its name
PolicyLike = Union["DTypePolicy", str]


def _check_config(owner, config, allowed):
    if not isinstance(config, dict):
        raise TypeError(f"{owner}: config must be a dict such as {{'name': 'mixed_float16'}}, "
                        f"got {type(config).__name__}: {config!r}")
    if "name" not in config:
        raise ValueError(f"{owner}: config has no 'name' key: {config!r}")
    unknown = sorted(str(k) for k in config if k not in allowed)
    if unknown:
        raise ValueError(f"{owner}: unexpected config keys {unknown} in {config!r} "
                         f"(allowed: {list(allowed)})")


# --------------------------------------------------------------------------- global policy

# (test, parse) pairs for names of policy classes defined above this module (the quantized
# ones): set_policy / policy_scope take their names too
_NAME_PARSERS: list = []


def register_name_parser(test, parse) -> None:
    """Let ``set_policy`` / ``policy_scope`` build ``parse(owner, name)`` for names ``test``
    accepts (the quantized policies register theirs)."""
    _NAME_PARSERS.append((test, parse))


_DEFAULT_POLICY = DTypePolicy("float32")
_global_lock = threading.Lock()
_global = _DEFAULT_POLICY
# The policy_scope override of the current thread / asyncio task; None when there is none.
_scoped = contextvars.ContextVar("mixedcore_policy_scope", default=None)


def _as_global_policy(owner, policy):
    """Convert a set_policy / policy_scope argument into a policy that may be global."""
    if policy is None:
        return _DEFAULT_POLICY
    if isinstance(policy, str):
        try:
            parse = next((p for test, p in _NAME_PARSERS if test(policy)), DTypePolicy)
            policy = parse(policy) if parse is DTypePolicy else parse("DTypePolicy", policy)
        except ValueError as exc:           # keep Keras's wording, say who was called
            message = str(exc)
            if message.startswith("DTypePolicy: "):
                message = message[len("DTypePolicy: "):]
            raise ValueError(f"{owner}: {message}") from None
    elif not isinstance(policy, DTypePolicy):
        raise TypeError(
            f"{owner}: expected a policy name such as 'mixed_float16', a DTypePolicy or None, "
            f"got {type(policy).__name__}: {policy!r}")
    # compute_dtype is None only for the deprecated "infer" policies, which infer a floating
    # dtype from the first input; tf.keras accepted them as the global policy (it was the
    # TF 1 default), and so do we.
    if policy.compute_dtype is not None and not _is_floating(policy.compute_dtype):
        raise ValueError(
            f"{owner}: the global policy must be a floating-point policy such as 'float32', "
            f"'mixed_float16' or 'mixed_bfloat16'; got {policy!r} whose compute dtype "
            f"{policy.compute_dtype!r} is not floating. Pass dtype={policy.name!r} to the "
            f"layers that need it instead.")
    return policy


def set_policy(policy: PolicyLike) -> None:
    """Set the process-wide default dtype policy.

    Every thread sees the new policy, except inside a :func:`policy_scope`, whose override
    wins in the thread / task that entered it.  Layers take the policy in effect when they
    are constructed.

    Parameters
    ----------
    policy : str, DTypePolicy or None
        A policy name (``"mixed_float16"``...), a policy, or None to reset to ``"float32"``.

    Raises
    ------
    TypeError
        If `policy` is of another type.
    ValueError
        If the name is invalid, or the policy's compute dtype is not floating (``"int32"``,
        ``"bool"``, ``"complex64"``...), as in tf.keras 2.4+.
    """
    _set_global("set_policy", policy)


def _set_global(owner, policy):
    global _global
    policy = _as_global_policy(owner, policy)
    with _global_lock:
        _global = policy


def set_global_policy(policy: PolicyLike) -> None:
    """``set_policy`` under tf.keras's name (its errors name ``set_global_policy``)."""
    _set_global("set_global_policy", policy)


def set_dtype_policy(policy: PolicyLike) -> None:
    """``set_policy`` under Keras 3's name (its errors name ``set_dtype_policy``)."""
    _set_global("set_dtype_policy", policy)


def global_policy() -> DTypePolicy:
    """The dtype policy in effect here.

    Returns
    -------
    DTypePolicy
        The innermost :func:`policy_scope` of the current thread / asyncio task if there is
        one, else the process-wide policy of :func:`set_policy` (``"float32"`` by default).
    """
    scoped = _scoped.get()
    return _global if scoped is None else scoped


dtype_policy = global_policy


@contextlib.contextmanager
def policy_scope(policy: PolicyLike) -> Iterator[DTypePolicy]:
    """Context manager that overrides the dtype policy inside the block.

    The override is local to the current thread or asyncio task (a ``contextvars`` variable):
    other threads and tasks keep seeing their own policy.  Scopes nest, and the previous
    policy is restored on exit, also when the block raises.  ``set_policy`` inside a scope
    changes the process-wide default, which becomes visible again after the scope exits.

    Parameters
    ----------
    policy : str, DTypePolicy or None
        As for :func:`set_policy` (None means ``"float32"``).

    Yields
    ------
    DTypePolicy
        The policy in effect inside the block.

    Raises
    ------
    TypeError, ValueError
        As :func:`set_policy`, when the block is entered.

    Examples
    --------
    >>> with policy_scope("mixed_bfloat16"):
    ...     global_policy()
    <DTypePolicy "mixed_bfloat16">
    """
    policy = _as_global_policy("policy_scope", policy)
    token = _scoped.set(policy)
    try:
        yield policy
    finally:
        _scoped.reset(token)
