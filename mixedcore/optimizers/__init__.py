"""Optimizers that update numpy arrays in place (``SGD``, ``Adam``, Keras's update rules) and
``LossScaleOptimizer``, the wrapper that applies loss scaling."""
from mixedcore.optimizers._loss_scale_optimizer import LossScaleOptimizer
from mixedcore.optimizers._optimizer import SGD, Adam, Optimizer, deserialize, get, serialize

__all__ = ["Optimizer", "SGD", "Adam", "LossScaleOptimizer", "get", "serialize", "deserialize"]
