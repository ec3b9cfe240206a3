"""Dropout, SpatialDropout1D, SpatialDropout2D, GaussianNoise: active in training calls only,
the identity at inference."""
import numpy as np

from mixedcore import random as _random
from mixedcore._dtypes import is_floating, to_compute, work_dtype
from mixedcore.layers import _args
from mixedcore.layers._base import Layer


class Dropout(Layer):
    """Sets a fraction ``rate`` of inputs to zero while training, scaling the rest by
    1 / (1 - rate); the identity at inference (``keras.layers.Dropout``).

    ``noise_shape`` (None entries take the input's dimension) shares one draw along the axes
    where it is 1.  The scaling runs in float32 (float64 under float64) and is rounded once.
    """

    supports_masking = True

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        if isinstance(rate, bool) or not isinstance(rate, (int, float, np.number)):
            raise TypeError(f"{owner}: rate must be a number, got {type(rate).__name__}")
        if not 0 <= rate < 1:
            raise ValueError(f"{owner}: rate must be in [0, 1), got {rate}")
        self.rate = float(rate)
        if noise_shape is not None:
            if not isinstance(noise_shape, (tuple, list)) or not all(
                    d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                  and d >= 1) for d in noise_shape):
                raise ValueError(f"{owner}: noise_shape must be a tuple of positive ints or "
                                 f"None, got {noise_shape!r}")
            noise_shape = tuple(None if d is None else int(d) for d in noise_shape)
        self.noise_shape = noise_shape
        if seed is not None:
            seed = _args.non_negative_int(owner, "seed", seed)
        self.seed = seed
        self._generator = _random.generator(seed) if seed is not None else None
        self._train_cache = None

    def _noise_shape(self, shape):
        if self.noise_shape is None:
            return shape
        if len(self.noise_shape) != len(shape) or any(
                n is not None and n != 1 and n != s for n, s in zip(self.noise_shape, shape)):
            raise ValueError(f"{type(self).__name__} '{self.name}': noise_shape "
                             f"{self.noise_shape} does not fit input of shape {shape}")
        return tuple(s if n is None else n for s, n in zip(shape, self.noise_shape))

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            self._train_cache = None
            return inputs
        shape = self._noise_shape(inputs.shape)
        rng = self._generator if self._generator is not None else _random.generator()
        w = work_dtype(inputs.dtype) if is_floating(inputs.dtype) else np.dtype(np.float32)
        keep = rng.random(shape) >= self.rate
        mask = keep.astype(w) * w.type(1.0 / (1.0 - self.rate))
        self._train_cache = mask
        xw = to_compute(inputs, w) if is_floating(inputs.dtype) else inputs.astype(w)
        out_dtype = inputs.dtype if is_floating(inputs.dtype) else w
        return to_compute(xw * mask, out_dtype)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        mask = self._train_cache
        if mask is None:
            return dy
        dyw = to_compute(dy, mask.dtype)
        return to_compute(dyw * mask, dy.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "noise_shape": self.noise_shape, "seed": self.seed})
        return config


class SpatialDropout1D(Dropout):
    """Dropout of whole channels of (batch, steps, channels) inputs
    (``keras.layers.SpatialDropout1D``): one draw per sample and channel."""

    _rank = 3

    def __init__(self, rate, seed=None, name=None, dtype=None, **kwargs):
        super().__init__(rate, seed=seed, name=name, dtype=dtype, **kwargs)

    def check_input_shape(self, shape):
        if len(shape) != self._rank:
            raise ValueError(f"{type(self).__name__} '{self.name}': expected input of rank "
                             f"{self._rank}, received shape {tuple(shape)}")

    def build(self, input_shape):
        self.check_input_shape(input_shape)

    def _noise_shape(self, shape):
        self.check_input_shape(shape)
        return (shape[0], 1, shape[2])

    def get_config(self):
        config = Layer.get_config(self)
        config.pop("trainable")         # Keras's spatial dropouts neither write nor take it
        config.update({"rate": self.rate, "seed": self.seed})
        return config


class SpatialDropout2D(SpatialDropout1D):
    """Dropout of whole feature maps of (batch, height, width, channels) inputs
    (``keras.layers.SpatialDropout2D``; (batch, channels, height, width) with
    data_format="channels_first")."""

    _rank = 4

    def __init__(self, rate, data_format=None, seed=None, name=None, dtype=None, **kwargs):
        super().__init__(rate, seed=seed, name=name, dtype=dtype, **kwargs)
        self.data_format = _args.data_format("SpatialDropout2D", data_format)

    def _noise_shape(self, shape):
        self.check_input_shape(shape)
        if self.data_format == "channels_first":
            return (shape[0], shape[1], 1, 1)
        return (shape[0], 1, 1, shape[3])

    def get_config(self):
        config = super().get_config()
        config["data_format"] = self.data_format
        return config


class GaussianNoise(Layer):
    """Adds zero-mean Gaussian noise of standard deviation ``stddev`` while training
    (``keras.layers.GaussianNoise``); the identity at inference.  The noise is drawn in float64,
    added in float32 (float64 under float64) and the sum rounded once to the compute dtype."""

    supports_masking = True

    def __init__(self, stddev, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.stddev = _args.number("GaussianNoise", "stddev", stddev, low=0, high=1)
        if seed is not None:
            seed = _args.non_negative_int("GaussianNoise", "seed", seed)
        self.seed = seed
        self._generator = _random.generator(seed) if seed is not None else None

    def call(self, inputs, training=False):
        if not training or self.stddev == 0:
            return inputs
        x = inputs if is_floating(inputs.dtype) else inputs.astype(self._compute_np())
        w = work_dtype(x.dtype)
        rng = self._generator if self._generator is not None else _random.generator()
        noise = rng.normal(0.0, self.stddev, size=x.shape).astype(w)
        return to_compute(to_compute(x, w) + noise, x.dtype)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        return dy if need_input_grad else None

    def get_config(self):
        config = super().get_config()
        config.update({"stddev": self.stddev, "seed": self.seed})
        return config
