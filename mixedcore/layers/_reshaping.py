"""Flatten."""
import numpy as np

from mixedcore.layers._base import Layer


class Flatten(Layer):
    """Flattens each sample: (batch, d1, d2, ...) -> (batch, d1 * d2 * ...)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._train_cache = None

    def check_input_shape(self, shape):
        if len(shape) < 1:
            raise ValueError(f"Flatten '{self.name}': input needs a batch dimension, received "
                             f"shape {tuple(shape)}")
        super().check_input_shape(shape)

    def build(self, input_shape):
        if len(input_shape) < 1:
            raise ValueError(f"Flatten '{self.name}': input needs a batch dimension, received "
                             f"shape {tuple(input_shape)}")

    def compute_output_shape(self, input_shape):
        rest = input_shape[1:]
        if any(d is None for d in rest):
            return (input_shape[0], None)
        return (input_shape[0], int(np.prod(rest, dtype=np.int64)))

    def call(self, inputs, training=False):
        if training:
            self._train_cache = inputs.shape
        return inputs.reshape(inputs.shape[0], -1)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        return dy.reshape(self._train_cache) if need_input_grad else None
