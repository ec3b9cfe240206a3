"""LayerNormalization: statistics in float32 (float64 under float64) whatever the compute dtype."""
import numpy as np

from mixedcore import regularizers as _regularizers
from mixedcore.layers import _initializers
from mixedcore._dtypes import is_floating, to_compute, work_dtype
from mixedcore.layers._base import Layer


class LayerNormalization(Layer):
    """Normalizes each sample over ``axis``: ``gamma * (x - mean) / sqrt(var + epsilon) + beta``.

    Parameters
    ----------
    axis : int or sequence of int, default -1
    epsilon : float, default 1e-3
    center, scale : bool, default True
        Whether ``beta`` / ``gamma`` exist.  Weight order is Keras's: gamma, then beta.

    Notes
    -----
    As in Keras, a 16-bit input is brought to float32 for the mean and variance; the float32
    weights are used as they are (not rounded to the compute dtype first), and the result is rounded
    once to the compute dtype.
    """

    supports_masking = True

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones", beta_regularizer=None,
                 gamma_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        for a in axes:
            if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
                raise TypeError(f"LayerNormalization: axis must be an int or ints, got {axis!r}")
        if not axes:
            raise ValueError("LayerNormalization: axis must name at least one axis")
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.number)):
            raise TypeError(f"LayerNormalization: epsilon must be a number, got "
                            f"{type(epsilon).__name__}")
        if not epsilon > 0:
            raise ValueError(f"LayerNormalization: epsilon must be > 0, got {epsilon}")
        self.axis = tuple(int(a) for a in axes)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.beta_initializer = _initializers.check("LayerNormalization", beta_initializer)
        self.gamma_initializer = _initializers.check("LayerNormalization", gamma_initializer)
        self.beta_regularizer = _regularizers.get(beta_regularizer)
        self.gamma_regularizer = _regularizers.get(gamma_regularizer)
        self._train_cache = None

    def _axes(self, ndim):
        return tuple(sorted(a % ndim for a in self.axis))

    def build(self, input_shape):
        ndim = len(input_shape)
        for a in self.axis:
            if not -ndim <= a < ndim or (a % ndim) == 0:
                raise ValueError(f"LayerNormalization '{self.name}': axis {a} is invalid for "
                                 f"input of shape {tuple(input_shape)}")
        axes = self._axes(ndim)
        shape = tuple(input_shape[a] for a in axes)
        if any(d is None for d in shape):
            raise ValueError(f"LayerNormalization '{self.name}': normalized axes must be known, "
                             f"received shape {tuple(input_shape)}")
        if self.scale:
            self.add_weight("gamma", shape, self.gamma_initializer, self.gamma_regularizer)
        if self.center:
            self.add_weight("beta", shape, self.beta_initializer, self.beta_regularizer)

    def _param_view(self, value, ndim, axes):
        shape = [1] * ndim
        for a, d in zip(axes, value.shape):
            shape[a] = d
        return value.reshape(shape)

    def call(self, inputs, training=False):
        x = inputs if is_floating(inputs.dtype) else inputs.astype(self._compute_np())
        w = work_dtype(x.dtype)
        xw = to_compute(x, w)
        axes = self._axes(x.ndim)
        mean = xw.mean(axis=axes, keepdims=True)
        centered = xw - mean
        var = np.mean(centered * centered, axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(var + w.type(self.epsilon))
        xhat = centered * inv
        y = xhat
        k = 0
        gamma = None
        if self.scale:
            gamma = self._param_view(to_compute(self._values[k], w), x.ndim, axes)
            y = y * gamma
            k += 1
        if self.center:
            y = y + self._param_view(to_compute(self._values[k], w), x.ndim, axes)
        if training:
            self._train_cache = (xhat, inv, gamma, axes, x.dtype)
        return to_compute(y, x.dtype)

    def backward(self, dy, need_input_grad=True):
        xhat, inv, gamma, axes, in_dtype = self._train_cache
        w = xhat.dtype
        dyw = to_compute(dy, w)
        reduce_axes = tuple(a for a in range(xhat.ndim) if a not in axes)
        grads = []
        if self.scale:
            dgamma = (dyw * xhat).sum(axis=reduce_axes)
            grads.append(to_compute(dgamma, self._values[0].dtype))
        if self.center:
            dbeta = dyw.sum(axis=reduce_axes)
            grads.append(to_compute(dbeta, self._values[-1].dtype))
        self.gradients = grads if self.trainable else []
        if not need_input_grad:
            return None
        g = dyw * gamma if gamma is not None else dyw
        n = int(np.prod([xhat.shape[a] for a in axes]))
        mean_g = g.sum(axis=axes, keepdims=True) / n
        mean_gx = (g * xhat).sum(axis=axes, keepdims=True) / n
        dx = inv * (g - mean_g - xhat * mean_gx)
        return to_compute(dx, in_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({
            "axis": list(self.axis) if len(self.axis) > 1 else self.axis[0],
            "epsilon": self.epsilon, "center": self.center, "scale": self.scale,
            "beta_initializer": _initializers.serialize(self.beta_initializer),
            "gamma_initializer": _initializers.serialize(self.gamma_initializer),
            "beta_regularizer": _regularizers.serialize(self.beta_regularizer),
            "gamma_regularizer": _regularizers.serialize(self.gamma_regularizer),
        })
        return config
