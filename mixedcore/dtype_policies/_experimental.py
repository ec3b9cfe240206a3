"""The deprecated experimental policy API of tf.keras 1.15 - 2.4 (docs/policies.md,
'The experimental Policy').

``mixedcore.experimental.Policy`` is the ``tf.keras.mixed_precision.experimental.Policy`` class:
a :class:`mixedcore.DTypePolicy` that also carries a loss scale and still takes the removed
names "infer", "infer_with_float32_vars" and "<dtype>_with_float32_vars".  New code should use
``mixedcore.DTypePolicy`` and ``mixedcore.LossScaleOptimizer``.  The ``mixedcore.experimental``
namespace adds tf.keras's ``experimental.LossScaleOptimizer`` to the names defined here.

Decisions (see docs/policies.md and docs/porting.md):

A. ``Policy`` subclasses ``DTypePolicy`` (TF 2.4's ``PolicyV1`` did the same), so layers
   accept it wherever they accept a policy.  It never compares equal to a plain DTypePolicy.
B. Two loss scales are "the same" for equality when they have the same class and the same
   ``get_config()``: loss-scale objects are mutable and compare by identity, but a policy
   built twice from one name must compare equal.  The hash uses only the loss scale's class,
   so it stays valid while a dynamic loss scale changes during training.
C. The "infer" policies really infer: :meth:`Policy.infer_from` returns the concrete policy
   for the dtype of a layer's first input.  A default ("auto") loss scale is resolved again
   for the inferred name, an explicit one is carried over.
D. The loss-scale classes are imported from :mod:`mixedcore.loss_scale` on first use, so
   that the policy layer does not depend on the import order of the training layer.
"""
import numbers
import warnings

import numpy as np

from mixedcore.dtype_policies import _policy
from mixedcore.dtype_policies._policy import DTypePolicy
from mixedcore.saving import object_registration as _registry

__all__ = ["Policy", "set_policy", "global_policy"]

_SUFFIX = "_with_float32_vars"
_AUTO_DYNAMIC = ("mixed_float16", "float16" + _SUFFIX)

_CLASS_DEPRECATION = (
    "mixedcore.experimental.Policy is deprecated and will be removed; use "
    "mixedcore.DTypePolicy (alias mixedcore.Policy) instead, and wrap the optimizer in "
    "mixedcore.LossScaleOptimizer for loss scaling.")
_INFER_DEPRECATION = (
    "The {name!r} policy is deprecated: a layer with it adopts the dtype of its first input. "
    "Pass an explicit policy such as 'float32', 'mixed_float16' or 'mixed_bfloat16' instead.")
_VARS_DEPRECATION = (
    "Policies ending in '_with_float32_vars' are deprecated; use {instead} instead "
    "(got {name!r}).")


def _loss_scale_module():
    from mixedcore import loss_scale
    return loss_scale


def _parse_experimental_name(name):
    """(compute, variable, deprecation message or None) for an experimental policy name."""
    if not isinstance(name, str):
        raise TypeError(
            f"Policy: 'name' must be a string such as 'mixed_float16' or 'float32', got "
            f"{type(name).__name__}: {name!r}")
    if name == "infer":
        return None, None, _INFER_DEPRECATION.format(name=name)
    if name == "infer" + _SUFFIX:
        return None, "float32", _INFER_DEPRECATION.format(name=name)
    if name.endswith(_SUFFIX):
        base = name[: -len(_SUFFIX)]
        if base in _policy._DTYPE_TABLE:
            instead = {"float16": "'mixed_float16'", "bfloat16": "'mixed_bfloat16'"}.get(
                base, "'mixed_float16' or 'mixed_bfloat16'")
            return base, "float32", _VARS_DEPRECATION.format(instead=instead, name=name)
    elif name in _policy._MIXED:
        compute, variable = _policy._MIXED[name]
        return compute, variable, None
    elif name in _policy._DTYPE_TABLE:
        return name, name, None
    raise ValueError(
        f"Policy: cannot convert {name!r} to a dtype policy. Valid policies are "
        f"'mixed_float16', 'mixed_bfloat16', a dtype name such as 'float32', and the deprecated "
        f"'<dtype>_with_float32_vars', 'infer' and 'infer_with_float32_vars' (names are exact "
        f"and lower-case).")


def _is_loss_scale_dict(value):
    return isinstance(value, dict) and "class_name" in value


def _deserialize_loss_scale(config, custom_objects=None):
    """A loss scale from its ``{"class_name": ..., "config": {...}}`` form (tf.keras format)."""
    _loss_scale_module()            # registers the built-in loss scales
    class_name = config.get("class_name")
    inner = config.get("config", {})
    found = _registry.lookup("loss_scale", config, custom_objects, owner="Policy")
    if found is None:
        known = set(_registry.builtin_objects("loss_scale")) | set(custom_objects or {})
        raise ValueError(
            f"Policy: unknown loss scale class {class_name!r} in {config!r}; expected one of "
            f"{sorted(known)}")
    cls = found.obj
    if not isinstance(inner, dict):
        raise ValueError(f"Policy: the 'config' of a serialized loss scale must be a dict, "
                         f"got {config!r}")
    return cls.from_config(inner)


def _serialize_loss_scale(loss_scale):
    if loss_scale is None:
        return None
    return {"class_name": type(loss_scale).__name__, "config": loss_scale.get_config()}


def _resolve_loss_scale(loss_scale, name, custom_objects=None):
    """The LossScale (or None) for a ``loss_scale`` argument (docs/policies.md, 'The experimental
    Policy')."""
    if isinstance(loss_scale, str) and loss_scale == "auto":
        loss_scale = "dynamic" if name in _AUTO_DYNAMIC else None
    if loss_scale is None:
        return None
    if isinstance(loss_scale, str) and loss_scale == "dynamic":
        return _loss_scale_module().DynamicLossScale()
    if isinstance(loss_scale, numbers.Real) and not isinstance(loss_scale, (bool, np.bool_)):
        value = int(loss_scale) if isinstance(loss_scale, numbers.Integral) else float(loss_scale)
        return _loss_scale_module().FixedLossScale(value)
    if _is_loss_scale_dict(loss_scale):
        return _deserialize_loss_scale(loss_scale, custom_objects)
    ls = _loss_scale_module()
    if isinstance(loss_scale, ls.LossScale):
        return loss_scale
    raise ValueError(
        f"Could not interpret loss scale identifier: {loss_scale!r} (expected 'auto', "
        f"'dynamic', a number >= 1, a LossScale, a serialized loss scale dict, or None)")


def _loss_scale_key(loss_scale):
    """What two policies must share for their loss scales to count as equal (decision B)."""
    if loss_scale is None:
        return None
    try:
        config = loss_scale.get_config()
    except Exception:  # a user LossScale without a config compares by identity
        return ("identity", id(loss_scale))
    return (type(loss_scale), config)


class Policy(DTypePolicy):
    """A deprecated dtype policy that also carries a loss scale (tf.keras 1.15 - 2.4).

    Constructing one emits a ``DeprecationWarning`` pointing to :class:`mixedcore.DTypePolicy`.

    Parameters
    ----------
    name : str
        Anything :class:`mixedcore.DTypePolicy` accepts, or one of the deprecated names (each
        warns again):

        - ``"infer"``: compute and variable dtypes are None until a layer's first call, then
          both become the dtype of its first input (see :meth:`infer_from`);
        - ``"infer_with_float32_vars"``: compute dtype inferred the same way, variables float32;
        - ``"<dtype>_with_float32_vars"``: compute ``<dtype>``, variables float32.
    loss_scale : 'auto', 'dynamic', int, float, LossScale, dict or None, default 'auto'
        ``"auto"`` means ``"dynamic"`` for ``"mixed_float16"`` and
        ``"float16_with_float32_vars"``, else None.  ``"dynamic"`` gives
        ``DynamicLossScale()``; a number gives ``FixedLossScale(number)``; a ``LossScale`` is
        used as is; a dict is a serialized loss scale (``get_config()["loss_scale"]``); None
        means no loss scaling.  A loss scale on a policy whose compute dtype is not float16
        emits a ``UserWarning``: it is only useful for float16.

    Raises
    ------
    TypeError
        If `name` is not a ``str``.
    ValueError
        If `name` is not a valid name, or `loss_scale` cannot be interpreted ("Could not
        interpret loss scale identifier: ..."), or a number below 1 is given.

    Notes
    -----
    Equal policies have the same name and loss scales of the same class with the same
    ``get_config()``.  ``get_config()`` includes ``"loss_scale"`` only when `loss_scale` was
    not ``"auto"``.  ``mixedcore.policies.deserialize`` loads the config of this class as a
    plain :class:`mixedcore.DTypePolicy`, dropping the loss scale, as tf.keras 2.4 does.
    """

    __slots__ = ("_loss_scale", "_using_default_loss_scale")

    def __init__(self, name, loss_scale="auto"):
        self._setup(name, loss_scale, warn=True, stacklevel=3)

    @classmethod
    def _create(cls, name, loss_scale, *, warn_class, warn_name, stacklevel, custom_objects=None):
        policy = cls.__new__(cls)
        policy._setup(name, loss_scale, warn=warn_class, warn_name=warn_name,
                      stacklevel=stacklevel + 1, custom_objects=custom_objects)
        return policy

    def _setup(self, name, loss_scale, *, warn, stacklevel, warn_name=None, custom_objects=None):
        if warn:
            warnings.warn(_CLASS_DEPRECATION, DeprecationWarning, stacklevel=stacklevel)
        if warn_name is None:
            warn_name = warn
        compute, variable, deprecation = _parse_experimental_name(name)
        if deprecation is not None and warn_name:
            warnings.warn(deprecation, DeprecationWarning, stacklevel=stacklevel)
        resolved = _resolve_loss_scale(loss_scale, name, custom_objects)
        if resolved is not None and compute != "float16" and warn_name:
            warnings.warn(
                f"Policy: a loss scale is only useful for float16 policies; got "
                f"loss_scale={resolved!r} for policy {name!r}. Consider passing no loss scale.",
                UserWarning, stacklevel=stacklevel)
        self._name = str(name)
        self._compute_dtype = compute
        self._variable_dtype = variable
        self._loss_scale = resolved
        self._using_default_loss_scale = isinstance(loss_scale, str) and loss_scale == "auto"

    @property
    def loss_scale(self):
        """The policy's loss scale (a ``mixedcore.LossScale``), or None."""
        return self._loss_scale

    def infer_from(self, dtype):
        """The concrete policy for a layer whose first input has dtype `dtype`.

        This is the hook of the deprecated "infer" policies.  On its first call, a layer whose
        policy has ``compute_dtype is None`` calls ``policy.infer_from(first_input.dtype)``
        and keeps the returned policy for the rest of its life:

        - ``Policy("infer")`` -> ``Policy(<dtype>)``;
        - ``Policy("infer_with_float32_vars")`` -> ``Policy("<dtype>_with_float32_vars")``.

        The result carries this policy's loss scale if one was given explicitly; with the
        default ``"auto"`` it is resolved again for the new name (so an inferred float16
        with float32 variables gets a dynamic loss scale).  No deprecation warning is emitted
        again.  Policies that already have a compute dtype return themselves.

        Parameters
        ----------
        dtype : dtype-like
            The dtype of the first input: a ``numpy.dtype``, a scalar type such as
            ``numpy.float16`` or ``ml_dtypes.bfloat16``, or a dtype name.

        Returns
        -------
        Policy
            The concrete policy (``self`` if it was not an "infer" policy).

        Raises
        ------
        TypeError
            If `dtype` is not a dtype, or is not floating (an "infer" layer cannot compute in
            integers or bool; give such a layer an explicit policy).
        """
        if self._compute_dtype is not None:
            return self
        if dtype is None:
            raise TypeError("Policy.infer_from: expected the dtype of the layer's first input, "
                            "got None")
        try:
            dtype_name = np.dtype(dtype).name
        except TypeError as exc:
            raise TypeError(f"Policy.infer_from: cannot interpret {dtype!r} as a dtype "
                            f"({exc})") from None
        if not _policy._is_floating(dtype_name):
            raise TypeError(
                f"Policy.infer_from: the {self._name!r} policy adopts the dtype of the layer's "
                f"first input, which must be floating; got {dtype_name!r}. Give this layer an "
                f"explicit policy such as 'float32'.")
        name = dtype_name if self._variable_dtype is None else dtype_name + _SUFFIX
        loss_scale = "auto" if self._using_default_loss_scale else self._loss_scale
        return type(self)._create(name, loss_scale, warn_class=False, warn_name=False,
                                  stacklevel=2)

    def __repr__(self):
        return f'<{type(self).__name__} "{self._name}", loss_scale={self._loss_scale!r}>'

    def __eq__(self, other):
        if not isinstance(other, DTypePolicy):
            return NotImplemented
        return (type(self) is type(other) and self._name == other._name
                and _loss_scale_key(self._loss_scale) == _loss_scale_key(other._loss_scale))

    def __hash__(self):
        return hash((DTypePolicy, type(self).__name__, self._name, type(self._loss_scale)))

    def get_config(self):
        """``{"name": name}``, plus ``"loss_scale"`` (serialized) if it was not ``"auto"``."""
        config = {"name": self._name}
        if not self._using_default_loss_scale:
            config["loss_scale"] = _serialize_loss_scale(self._loss_scale)
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuild an experimental policy, loss scale included, from :meth:`get_config` output.

        Parameters
        ----------
        config : dict
            ``{"name": str}``, optionally with ``"loss_scale"`` (any `loss_scale` argument,
            usually a serialized ``{"class_name": ..., "config": ...}`` dict).
        custom_objects : dict, optional
            Extra loss-scale classes by class name.
        """
        _policy._check_config("Policy.from_config", config, allowed=("name", "loss_scale"))
        return cls._create(config["name"], config.get("loss_scale", "auto"), warn_class=True,
                           warn_name=True, stacklevel=3, custom_objects=custom_objects)


def set_policy(policy):
    """Deprecated spelling of :func:`mixedcore.set_global_policy`.

    A string is turned into an experimental :class:`Policy` (so the deprecated names such as
    "infer" are still accepted and "mixed_float16" carries a dynamic loss scale), then set as
    the process-wide policy.  Emits a ``DeprecationWarning``.

    Parameters
    ----------
    policy : str, DTypePolicy or None
        As for :func:`mixedcore.set_policy`.
    """
    warnings.warn("mixedcore.experimental.set_policy is deprecated; use "
                  "mixedcore.set_global_policy instead.", DeprecationWarning, stacklevel=2)
    if isinstance(policy, str):
        policy = Policy._create(policy, "auto", warn_class=False, warn_name=True, stacklevel=3)
    _policy.set_policy(policy)


def global_policy():
    """Deprecated spelling of :func:`mixedcore.global_policy`; emits a ``DeprecationWarning``."""
    warnings.warn("mixedcore.experimental.global_policy is deprecated; use "
                  "mixedcore.global_policy instead.", DeprecationWarning, stacklevel=2)
    return _policy.global_policy()

