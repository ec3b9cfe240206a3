"""Activation layers: Activation, Softmax, ReLU."""
import numpy as np

from mixedcore import activations as _activations
from mixedcore._dtypes import is_floating, to_compute, work_dtype
from mixedcore.layers._base import Layer


class _Elementwise(Layer):
    """A weightless layer whose math runs in float32 (float64 under float64), result rounded once
    to the compute dtype."""

    supports_masking = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._train_cache = None

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def _forward_work(self, xw):
        raise NotImplementedError

    def _backward_work(self, dyw, xw, yw):
        raise NotImplementedError

    def call(self, inputs, training=False):
        if not is_floating(inputs.dtype):
            inputs = inputs.astype(self._compute_np())
        xw = to_compute(inputs, work_dtype(inputs.dtype))
        yw = self._forward_work(xw)
        if training:
            self._train_cache = (xw, yw, inputs.dtype)
        return to_compute(yw, inputs.dtype)

    def backward(self, dy, need_input_grad=True):
        xw, yw, in_dtype = self._train_cache
        self.gradients = []
        if not need_input_grad:
            return None
        dyw = to_compute(dy, xw.dtype)
        return to_compute(self._backward_work(dyw, xw, yw), in_dtype)


class Activation(_Elementwise):
    """Applies an activation function (``keras.layers.Activation``).

    ``Activation("softmax", dtype="float32")`` is the usual last layer of a mixed-precision model:
    its input is cast up to float32 and the probabilities come out in float32.
    """

    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self.activation = _activations.resolve("Activation", activation)
        self.axis = -1

    def _forward_work(self, xw):
        return _activations.forward(self.activation, xw, self.axis)

    def _backward_work(self, dyw, xw, yw):
        return _activations.backward(self.activation, dyw, xw, yw, self.axis)

    def logits(self):
        if self.activation != "softmax" or self.axis != -1 or self._train_cache is None:
            return None
        return self._train_cache[0]

    def backward_from_logits(self, dlogits, need_input_grad=True):
        xw, yw, in_dtype = self._train_cache
        self.gradients = []
        return to_compute(dlogits, in_dtype) if need_input_grad else None

    def get_config(self):
        config = super().get_config()
        config["activation"] = self.activation
        return config


class Softmax(Activation):
    """Softmax over ``axis`` (``keras.layers.Softmax``)."""

    def __init__(self, axis=-1, **kwargs):
        super().__init__("softmax", **kwargs)
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"Softmax: axis must be an int, got {type(axis).__name__}")
        self.axis = int(axis)

    def check_input_shape(self, shape):
        if not -len(shape) <= self.axis < len(shape):
            raise ValueError(f"Softmax '{self.name}': axis {self.axis} is out of range for input "
                             f"of shape {tuple(shape)}")

    def build(self, input_shape):
        self.check_input_shape(input_shape)

    def get_config(self):
        config = Layer.get_config(self)
        config["axis"] = self.axis
        return config


class ReLU(_Elementwise):
    """``keras.layers.ReLU(max_value=None, negative_slope=0.0, threshold=0.0)``."""

    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, **kwargs):
        super().__init__(**kwargs)
        for what, v in (("negative_slope", negative_slope), ("threshold", threshold)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
                raise TypeError(f"ReLU: {what} must be a number, got {type(v).__name__}")
        if max_value is not None:
            if isinstance(max_value, bool) or not isinstance(max_value, (int, float, np.number)):
                raise TypeError(f"ReLU: max_value must be a number or None, got "
                                f"{type(max_value).__name__}")
            if max_value < 0:
                raise ValueError(f"ReLU: max_value must be >= 0, got {max_value}")
        if negative_slope < 0:
            raise ValueError(f"ReLU: negative_slope must be >= 0, got {negative_slope}")
        self.max_value = None if max_value is None else float(max_value)
        self.negative_slope = float(negative_slope)
        self.threshold = float(threshold)

    def _forward_work(self, xw):
        t = xw.dtype.type
        y = np.where(xw >= t(self.threshold), xw, t(self.negative_slope) * (xw - t(self.threshold)))
        if self.max_value is not None:
            y = np.minimum(y, t(self.max_value))
        return y

    def _backward_work(self, dyw, xw, yw):
        t = xw.dtype.type
        slope = np.where(xw >= t(self.threshold), t(1), t(self.negative_slope))
        if self.max_value is not None:
            slope = np.where(xw >= t(self.max_value), t(0), slope)
        return dyw * slope

    def get_config(self):
        config = super().get_config()
        config.update({"max_value": self.max_value, "negative_slope": self.negative_slope,
                       "threshold": self.threshold})
        return config
