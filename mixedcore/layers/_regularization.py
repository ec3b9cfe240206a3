"""Dropout."""
import numpy as np

from mixedcore import utils
from mixedcore._dtypes import is_floating, to_compute, work_dtype
from mixedcore.layers._base import Layer


class Dropout(Layer):
    """Sets a fraction ``rate`` of inputs to zero while training, scaling the rest by
    1 / (1 - rate); the identity at inference (``keras.layers.Dropout``)."""

    supports_masking = True

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.number)):
            raise TypeError(f"Dropout: rate must be a number, got {type(rate).__name__}")
        if not 0 <= rate < 1:
            raise ValueError(f"Dropout: rate must be in [0, 1), got {rate}")
        self.rate = float(rate)
        self.noise_shape = None if noise_shape is None else tuple(noise_shape)
        self.seed = seed
        self._generator = utils._rng(seed) if seed is not None else None
        self._train_cache = None

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            self._train_cache = None
            return inputs
        shape = inputs.shape
        if self.noise_shape is not None:
            shape = tuple(s if n is None else n for s, n in zip(inputs.shape, self.noise_shape))
        rng = self._generator if self._generator is not None else utils._rng()
        w = work_dtype(inputs.dtype) if is_floating(inputs.dtype) else np.dtype(np.float32)
        keep = rng.random(shape) >= self.rate
        self._train_cache = keep.astype(w) * w.type(1.0 / (1.0 - self.rate))
        xw = to_compute(inputs, w) if is_floating(inputs.dtype) else inputs.astype(w)
        out_dtype = inputs.dtype if is_floating(inputs.dtype) else w
        return to_compute(xw * self._train_cache, out_dtype)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        if self._train_cache is None:
            return dy
        dyw = to_compute(dy, self._train_cache.dtype)
        return to_compute(dyw * self._train_cache, dy.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "noise_shape": self.noise_shape, "seed": self.seed})
        return config
