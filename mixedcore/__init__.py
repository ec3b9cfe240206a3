"""mixedcore: CPU mixed-precision numerics with a Keras-compatible Python layer.

- ``mixedcore.kernels``: bit-exact float16/bfloat16 conversions, the overflow scan, the
  fp32-accumulating GEMM (docs/conversions.md, docs/kernels_scan.md, docs/gemm.md).
- Dtype policies (``DTypePolicy``, ``set_policy``, ``policy_scope``) and loss scaling
  (``LossScaleOptimizer``), with the names of ``keras.mixed_precision`` (docs/policies.md).
"""
from mixedcore._version import __version__

from mixedcore import kernels
from mixedcore.dtype_policies import (
    DTypePolicy,
    Policy,
    dtype_policy,
    global_policy,
    policy_scope,
    set_dtype_policy,
    set_global_policy,
    set_policy,
)
from mixedcore.loss_scale import DynamicLossScale, FixedLossScale
from mixedcore.optimizers import LossScaleOptimizer
from mixedcore import (dtype_policies, experimental, loss_scale, mixed_precision, optimizers,
                       policies)

__all__ = [
    "__version__",
    "kernels",
    "DTypePolicy",
    "Policy",
    "set_policy",
    "set_global_policy",
    "set_dtype_policy",
    "global_policy",
    "dtype_policy",
    "policy_scope",
    "FixedLossScale",
    "DynamicLossScale",
    "LossScaleOptimizer",
    "dtype_policies",
    "experimental",
    "loss_scale",
    "mixed_precision",
    "optimizers",
    "policies",
]

# The Keras-like inference and training layer (docs/user_guide.md, docs/api.md).
from mixedcore import (callbacks, datasets, initializers, layers, losses, metrics, models,
                       quantizers, regularizers, utils)
from mixedcore.models import Model, Sequential
from mixedcore import hub    # registers keras_hub's models and layers with the loader

__all__ += ["layers", "models", "losses", "metrics", "initializers", "regularizers", "utils",
            "datasets", "callbacks", "quantizers", "Model", "Sequential", "hub"]
