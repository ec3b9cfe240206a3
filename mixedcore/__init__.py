"""mixedcore: CPU mixed-precision numerics with a Keras-compatible Python layer."""
__version__ = "0.1.0"

from mixedcore import kernels
from mixedcore.policy import (
    DTypePolicy,
    Policy,
    dtype_policy,
    global_policy,
    policy_scope,
    set_dtype_policy,
    set_global_policy,
    set_policy,
)
from mixedcore import experimental, policies, mixed_precision

__all__ = ["kernels", "__version__"]
__all__ += [
    "DTypePolicy",
    "Policy",
    "set_policy",
    "set_global_policy",
    "set_dtype_policy",
    "global_policy",
    "dtype_policy",
    "policy_scope",
    "experimental",
    "policies",
    "mixed_precision",
]

# The Keras-like inference and training layer (SPEC.md section 1).
from mixedcore import datasets, layers, losses, metrics, models, regularizers, utils

__all__ += ["layers", "models", "losses", "metrics", "regularizers", "utils", "datasets"]
