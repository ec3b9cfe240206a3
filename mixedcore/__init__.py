"""mixedcore: CPU mixed-precision numerics with a Keras-compatible Python layer."""
__version__ = "0.1.0"

from mixedcore import kernels
from mixedcore import optimizers
from mixedcore import loss_scale
from mixedcore.loss_scale import DynamicLossScale, FixedLossScale, LossScaleOptimizer

__all__ = ["kernels", "optimizers", "loss_scale", "FixedLossScale", "DynamicLossScale",
           "LossScaleOptimizer", "__version__"]
