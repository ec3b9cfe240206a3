"""mixedcore: CPU mixed-precision numerics with a Keras-compatible Python layer."""
__version__ = "0.1.0"

from mixedcore import kernels

__all__ = ["kernels", "__version__"]

from mixedcore import loss_scale, optimizers  # noqa: E402
from mixedcore.loss_scale import DynamicLossScale, FixedLossScale, LossScaleOptimizer  # noqa: E402

__all__ += ["loss_scale", "optimizers", "FixedLossScale", "DynamicLossScale",
            "LossScaleOptimizer"]
