"""Dtype policies: what a layer computes in and stores its weights in (docs/policies.md).

- ``_policy``: the ``DTypePolicy`` class, the names it accepts, and the global policy
  (``set_policy`` and its Keras / tf.keras spellings, ``global_policy``, ``policy_scope``);
- ``_serialization``: ``get`` (what a layer's ``dtype`` argument stands for), ``serialize`` and
  ``deserialize`` (Keras's dict form), ``DTypePolicyMap`` (layer paths -> policies);
- ``_quantized``: Keras 3's quantized policies ("int8_from_float32", ...), docs/quantization.md;
- ``_experimental``: the deprecated tf.keras 1.15 - 2.4 ``Policy``, which carries a loss scale
  (public as ``mixedcore.experimental``).

The older import paths ``mixedcore.policy``, ``mixedcore.policies``, ``mixedcore.experimental``
and ``mixedcore.mixed_precision`` name the same objects.
"""
from mixedcore.dtype_policies import _policy
from mixedcore.dtype_policies._policy import (
    DTypePolicy,
    Policy,
    dtype_names,
    dtype_policy,
    global_policy,
    policy_names,
    policy_scope,
    set_dtype_policy,
    set_global_policy,
    set_policy,
)
from mixedcore.dtype_policies._quantized import (
    QUANTIZATION_MODES,
    AWQDTypePolicy,
    GPTQDTypePolicy,
    Int4DTypePolicy,
    QuantizedDTypePolicy,
    QuantizedFloat8DTypePolicy,
)
from mixedcore.dtype_policies._serialization import DTypePolicyMap, deserialize, get, serialize
# for the layers: a layer's dtype argument checked and resolved, and its policy's config entry
from mixedcore.dtype_policies._serialization import policy_config, resolve_policy  # noqa: F401

__all__ = [*_policy.__all__, "get", "serialize", "deserialize", "QUANTIZATION_MODES",
           "QuantizedDTypePolicy", "QuantizedFloat8DTypePolicy", "Int4DTypePolicy",
           "GPTQDTypePolicy", "AWQDTypePolicy", "DTypePolicyMap"]
