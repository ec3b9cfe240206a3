"""Optimizers that update numpy arrays in place (``SGD``, ``Adam``, ``AdamW``, ``RMSprop``,
``Adagrad``, ``Nadam``: Keras's update rules), learning-rate ``schedules``, and
``LossScaleOptimizer``, the wrapper that applies loss scaling."""
from mixedcore.optimizers import schedules
from mixedcore.optimizers._loss_scale_optimizer import LossScaleOptimizer
from mixedcore.optimizers._optimizer import (SGD, Adagrad, Adam, AdamW, Nadam, Optimizer, RMSprop,
                                             deserialize, get, serialize)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Nadam",
           "LossScaleOptimizer", "schedules", "get", "serialize", "deserialize"]
