"""LayerNormalization and BatchNormalization: statistics in float32 (float64 under float64)
whatever the compute dtype."""
import numpy as np

from mixedcore import initializers as _initializers
from mixedcore import kernels
from mixedcore import regularizers as _regularizers
from mixedcore.layers import _args
from mixedcore._dtypes import BF16, is_floating, to_compute, work_dtype
from mixedcore.layers._base import Layer, Weight


_F32 = np.dtype(np.float32)
# compute dtypes LayerNormalization hands to kernels.layer_norm
_KERNEL_DTYPES = (np.dtype(np.float16), BF16, _F32)


def _set_scale_shift_gradients(layer, dyw, xhat, axes):
    """The gradients of gamma (``dy * xhat``) and beta (``dy``) summed over ``axes``, for those
    the layer has (``scale``, ``center``)."""
    grads = {}
    if layer.scale:
        grads["gamma"] = (dyw * xhat).sum(axis=axes)
    if layer.center:
        grads["beta"] = dyw.sum(axis=axes)
    layer._set_gradients(grads)


class LayerNormalization(Layer):
    """Normalizes each sample over ``axis``: ``gamma * (x - mean) / sqrt(var + epsilon) + beta``.

    Parameters
    ----------
    axis : int or sequence of int, default -1
    epsilon : float, default 1e-3
    center, scale : bool, default True
        Whether ``beta`` / ``gamma`` exist.  Weight order is Keras's: gamma, then beta.
    beta_initializer, gamma_initializer, beta_regularizer, gamma_regularizer
        As Keras's (names, config dicts or objects).  The constraints must be None, and Keras's
        deprecated ``rms_scaling`` False.

    Notes
    -----
    As in Keras, a 16-bit input is brought to float32 for the mean and variance; the float32
    weights are used as they are (not rounded to the compute dtype first), and the result is rounded
    once to the compute dtype.

    Over the last axis alone with a float16, bfloat16 or float32 compute dtype (the usual case)
    the layer runs ``kernels.layer_norm``: statistics in float64 (two passes), the whole
    expression in float64 and one rounding to the compute dtype -- within 1 ulp of the float64
    result, the same bits in training and at inference, at every ISA level and thread count.
    Other axes, and float64, use numpy in the work dtype (float32 or float64).
    :meth:`call_with_residual` normalizes the sum of two inputs in one kernel call.
    """

    supports_masking = True
    gamma = Weight()
    beta = Weight()

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones", beta_regularizer=None,
                 gamma_regularizer=None, beta_constraint=None, gamma_constraint=None, **kwargs):
        _args.keras_only("LayerNormalization",
                         {"beta_constraint": beta_constraint, "gamma_constraint": gamma_constraint},
                         {"beta_constraint": None, "gamma_constraint": None})
        _args.keras_only("LayerNormalization", kwargs, {"rms_scaling": False})
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

    def _kernel_params(self):
        """gamma and beta as float32 arrays (None where absent) for ``kernels.layer_norm``."""
        gamma = beta = None
        if self.scale:
            gamma = to_compute(self.gamma, _F32)
        if self.center:
            beta = to_compute(self.beta, _F32)
        return gamma, beta

    def _uses_kernel(self, x):
        return x.dtype in _KERNEL_DTYPES and x.ndim >= 1 and self._axes(x.ndim) == (x.ndim - 1,)

    def _kernel_call(self, x, residual, training):
        gamma, beta = self._kernel_params()
        if not training:
            return kernels.layer_norm(x, gamma, beta, epsilon=self.epsilon, residual=residual)
        y, mean, rstd = kernels.layer_norm(x, gamma, beta, epsilon=self.epsilon,
                                           residual=residual, return_stats=True)
        gview = gamma.reshape((1,) * (x.ndim - 1) + gamma.shape) if gamma is not None else None
        self._train_cache = ("kernel", x, residual, mean[..., None], rstd[..., None], gview,
                             (x.ndim - 1,), x.dtype)
        return y

    def call(self, inputs, training=False):
        x = inputs if is_floating(inputs.dtype) else inputs.astype(self._compute_np())
        if self._uses_kernel(x):
            return self._kernel_call(x, None, training)
        return self._numpy_call(x, training)

    def call_with_residual(self, x, residual, training=False):
        """``LN(x + residual)``: an ``Add`` whose only consumer is this layer, in one kernel call.

        Parameters
        ----------
        x, residual : ndarray
            Arrays of the same shape, already in the compute dtype (the layer is built here from
            their shape when it is not yet).
        training : bool, default False
            Keep what :meth:`backward` needs; its input gradient is then the gradient of the sum,
            which is that of ``x`` and of ``residual`` alike.

        Returns
        -------
        ndarray
            In the compute dtype.  Under float16, bfloat16 and float32 with the last axis the
            sum is formed in float32 and not rounded to the compute dtype before it is
            normalized: one rounding (of the result) instead of the two of ``Add`` followed by
            the layer, so the result can differ from that pair in the last bit.  Elsewhere the
            sum is formed in the work dtype (float32, or float64) and normalized as
            :meth:`call` does.

        Raises
        ------
        ValueError
            ``x`` and ``residual`` of different shapes, or a shape the layer cannot take.
        """
        x = np.asarray(x)
        residual = np.asarray(residual)
        if x.shape != residual.shape:
            raise ValueError(f"LayerNormalization '{self.name}': call_with_residual needs x and "
                             f"residual of the same shape, got {x.shape} and {residual.shape}")
        if not self.built:
            self.build_from_shape(x.shape)
        else:
            self.check_input_shape(x.shape)
        if self._uses_kernel(x) and residual.dtype in _KERNEL_DTYPES:
            return self._kernel_call(x, residual, training)
        w = work_dtype(x.dtype)
        return to_compute(self._numpy_call(to_compute(x, w) + to_compute(residual, w), training),
                          x.dtype)

    def _numpy_call(self, x, training):
        w = work_dtype(x.dtype)
        xw = to_compute(x, w)
        axes = self._axes(x.ndim)
        mean = xw.mean(axis=axes, keepdims=True)
        centered = xw - mean
        var = np.mean(centered * centered, axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(var + w.type(self.epsilon))
        xhat = centered * inv
        y = xhat
        gamma = None
        if self.scale:
            gamma = self._param_view(to_compute(self.gamma, w), x.ndim, axes)
            y = y * gamma
        if self.center:
            y = y + self._param_view(to_compute(self.beta, w), x.ndim, axes)
        if training:
            self._train_cache = ("numpy", xhat, inv, gamma, axes, x.dtype)
        return to_compute(y, x.dtype)

    def backward(self, dy, need_input_grad=True):
        cache = self._train_cache
        if cache[0] == "kernel":
            # xhat from the kernel's statistics, in float32, with s = x (+ residual) formed as
            # the kernel formed it
            _, x, residual, mean, inv, gamma, axes, in_dtype = cache
            s = to_compute(x, _F32)
            if residual is not None:
                s = s + to_compute(residual, _F32)
            xhat = (s - mean) * inv
        else:
            _, xhat, inv, gamma, axes, in_dtype = cache
        dyw = to_compute(dy, xhat.dtype)
        _set_scale_shift_gradients(self, dyw, xhat,
                                   tuple(a for a in range(xhat.ndim) if a not in axes))
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


def _feature_axis_arg(owner, axis):
    """BatchNormalization's ``axis`` as an int: an int, or a list (tuple) of one int, the form
    tf.keras writes (``[3]``).  Several axes (tf.keras normalizes over their product) are an
    ``_args.UnsupportedValue``."""
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            raise _args.UnsupportedValue(
                f"{owner}: axis must be an int (or a list of one int, as tf.keras writes it), "
                f"got {axis!r}; normalizing over several feature axes is not supported")
        axis = axis[0]
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{owner}: axis must be an int, got {type(axis).__name__}: {axis!r}")
    return int(axis)


class BatchNormalization(Layer):
    """Normalizes over the batch (and every axis but ``axis``) while training, with moving
    statistics at inference (``keras.layers.BatchNormalization``).

    Parameters
    ----------
    axis : int, default -1
        The feature axis (channels_last: the last one).  A list of one int (tf.keras's form,
        ``[3]``) is read as that int; several axes are a ValueError.
    momentum : float, default 0.99
        ``moving = moving * momentum + batch * (1 - momentum)`` after each training call.
    epsilon : float, default 1e-3
    center, scale : bool, default True
        Whether ``beta`` / ``gamma`` exist.
    beta_initializer, gamma_initializer, moving_mean_initializer, moving_variance_initializer
        Keras's defaults: zeros, ones, zeros, ones.
    beta_regularizer, gamma_regularizer : optional

    Weights, in Keras's order: gamma, beta (trainable), moving_mean, moving_variance
    (non-trainable), each of shape (features,).

    Notes
    -----
    A training call (``training=True`` on a trainable layer) normalizes with the batch mean and
    the biased batch variance, computed in float32 (float64 under float64) from the input
    brought to float32 whatever the compute dtype (two passes: the mean, then the mean square of
    the centred values), and updates the moving statistics in the variable dtype.  Otherwise
    (inference, or a frozen layer, as in Keras) the output is ``x * scale + shift`` with the
    float32 affine of :meth:`inference_affine`.  gamma and beta are used in float32, not
    rounded to the compute dtype (Keras creates them with ``autocast=False``); the output is
    rounded once to the compute dtype.  ``mask`` (the input's shape without the last axis, as
    Keras takes it) restricts a training call's statistics to the kept positions, with Keras's
    formula (sums over the kept positions divided by their count + 1e-7); every position is
    normalized.  Keras's ``renorm``, ``synchronized``, tf.keras's ``virtual_batch_size`` and
    constraints are not supported (the off values their configs hold are accepted).
    """

    supports_masking = True
    # created in this order: [gamma], [beta], moving_mean, moving_variance
    gamma = Weight()
    beta = Weight()
    moving_mean = Weight()
    moving_variance = Weight()

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones",
                 moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                 gamma_constraint=None, **kwargs):
        owner = "BatchNormalization"
        _args.keras_only(owner, {"beta_constraint": beta_constraint,
                                 "gamma_constraint": gamma_constraint},
                         {"beta_constraint": None, "gamma_constraint": None})
        _args.keras_only(owner, kwargs, {"synchronized": False, "renorm": False,
                                         "renorm_clipping": (None, {})})
        if "renorm_momentum" in kwargs:      # only used with renorm, which is off
            _args.number(owner, "renorm_momentum", kwargs.pop("renorm_momentum"))
        # tf.keras's ghost batch normalization splits training batches: refused unless off
        _args.keras_only(_args.owner_name(owner, kwargs), kwargs, {"virtual_batch_size": None})
        axis = _feature_axis_arg(_args.owner_name(owner, kwargs), axis)
        super().__init__(**kwargs)
        self.axis = axis
        self.momentum = _args.number(owner, "momentum", momentum, low=0, high=1)
        self.epsilon = _args.number(owner, "epsilon", epsilon, low=0, low_open=True)
        self.center = _args.boolean(owner, "center", center)
        self.scale = _args.boolean(owner, "scale", scale)
        self.beta_initializer = _initializers.check(owner, beta_initializer)
        self.gamma_initializer = _initializers.check(owner, gamma_initializer)
        self.moving_mean_initializer = _initializers.check(owner, moving_mean_initializer)
        self.moving_variance_initializer = _initializers.check(owner,
                                                               moving_variance_initializer)
        self.beta_regularizer = _regularizers.get(beta_regularizer)
        self.gamma_regularizer = _regularizers.get(gamma_regularizer)
        self._train_cache = None
        self._affine_key = None
        self._affine = None

    def _feature_axis(self, ndim):
        return self.axis % ndim

    def build(self, input_shape):
        ndim = len(input_shape)
        if ndim < 2 or not -ndim <= self.axis < ndim or self.axis % ndim == 0:
            raise ValueError(f"BatchNormalization '{self.name}': axis {self.axis} is invalid "
                             f"for input of shape {tuple(input_shape)} (it must name a "
                             f"feature axis, not the batch)")
        features = input_shape[self.axis]
        if features is None:
            raise ValueError(f"BatchNormalization '{self.name}': the feature axis {self.axis} "
                             f"must be known, received shape {tuple(input_shape)}")
        shape = (int(features),)
        if self.scale:
            self.add_weight("gamma", shape, self.gamma_initializer, self.gamma_regularizer)
        if self.center:
            self.add_weight("beta", shape, self.beta_initializer, self.beta_regularizer)
        self.add_weight("moving_mean", shape, self.moving_mean_initializer, trainable=False)
        self.add_weight("moving_variance", shape, self.moving_variance_initializer,
                        trainable=False)

    def check_input_shape(self, shape):
        expected = self.input_shape
        ok = len(shape) == len(expected) and shape[self.axis] == self.moving_mean.shape[0]
        if not ok:
            raise ValueError(f"BatchNormalization '{self.name}': expected input of rank "
                             f"{len(expected)} with {self.moving_mean.shape[0]} features on "
                             f"axis {self.axis}, received shape {tuple(shape)}")

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def compute_output_shape(self, input_shape):
        n = len(input_shape)
        if not -n <= self.axis < n:
            raise ValueError(f"BatchNormalization '{self.name}': axis {self.axis} is out of "
                             f"range for input of shape {tuple(input_shape)}")
        return input_shape

    def inference_affine(self, dtype=np.float32):
        """``(scale, shift)`` with ``inference(x) = x * scale + shift`` along the feature axis:
        ``scale = gamma / sqrt(moving_variance + epsilon)``, ``shift = beta - moving_mean *
        scale``, computed in float64 and rounded once to ``dtype`` (float32 by default, what a
        GEMM epilogue takes to fold the normalization into the layer before).  Cached until the
        weights change."""
        dtype = np.dtype(dtype)
        key = (self._version, dtype)
        if self._affine_key != key:
            if not self.built:
                raise ValueError(f"BatchNormalization '{self.name}': not built yet, it has no "
                                 f"statistics")
            var = self.moving_variance.astype(np.float64)
            scale = 1.0 / np.sqrt(var + self.epsilon)
            if self.scale:
                scale = scale * self.gamma.astype(np.float64)
            shift = -self.moving_mean.astype(np.float64) * scale
            if self.center:
                shift = shift + self.beta.astype(np.float64)
            self._affine = (scale.astype(dtype), shift.astype(dtype))
            self._affine_key = key
        return self._affine

    def _view(self, v, ndim, axis):
        shape = [1] * ndim
        shape[axis] = v.shape[0]
        return v.reshape(shape)

    def _mask_weights(self, mask, shape, w):
        """The mask as 0 / 1 weights broadcastable to the input: one dimension less than the
        input, a trailing axis added (as Keras does)."""
        m = np.asarray(mask)
        if m.ndim != len(shape) - 1 or m.shape != tuple(shape[:-1]):
            raise ValueError(f"BatchNormalization '{self.name}': the mask must have the input's "
                             f"shape without its last dimension, received mask shape {m.shape} "
                             f"for input shape {tuple(shape)}")
        return (m != 0).astype(w)[..., None]

    def call(self, inputs, training=False, mask=None):
        x = inputs if is_floating(inputs.dtype) else inputs.astype(self._compute_np())
        w = work_dtype(x.dtype)
        xw = to_compute(x, w)
        axis = self._feature_axis(x.ndim)
        if training and self.trainable:
            red = tuple(a for a in range(x.ndim) if a != axis)
            n = int(np.prod([x.shape[a] for a in red]))
            if n == 0:
                raise ValueError(f"BatchNormalization '{self.name}': a training call needs at "
                                 f"least one value per feature, received shape {x.shape}")
            if mask is None:
                weights, c = w.type(1.0 / n), None
                mean = xw.mean(axis=red, keepdims=True)
                centered = xw - mean
                var = np.mean(centered * centered, axis=red, keepdims=True)
            else:
                # Keras's masked moments: sums over the kept positions divided by their count
                # plus 1e-7 (its backend epsilon)
                m = np.broadcast_to(self._mask_weights(mask, x.shape, w), x.shape)
                count = m.sum(axis=red, keepdims=True) + w.type(1e-7)
                weights = m / count
                mean = (xw * m).sum(axis=red, keepdims=True) / count
                centered = xw - mean
                var = (centered * centered * m).sum(axis=red, keepdims=True) / count
                # sum of weights * (x - mean): mean * 1e-7 / count, kept for exact gradients
                c = (weights * centered).sum(axis=red, keepdims=True)
            inv = w.type(1) / np.sqrt(var + w.type(self.epsilon))
            xhat = centered * inv
            y = xhat
            gamma = None
            if self.scale:
                gamma = self._view(to_compute(self.gamma, w), x.ndim, axis)
                y = y * gamma
            if self.center:
                y = y + self._view(to_compute(self.beta, w), x.ndim, axis)
            self._update_moving(mean.reshape(-1), var.reshape(-1))
            self._train_cache = ("batch", xhat, inv, gamma, red, x.dtype, weights, c)
            return to_compute(y, x.dtype)
        scale, shift = self.inference_affine(np.float64 if w == np.float64 else np.float32)
        scale, shift = self._view(scale, x.ndim, axis), self._view(shift, x.ndim, axis)
        if mask is not None:
            self._mask_weights(mask, x.shape, w)
        y = xw * scale + shift
        if training:
            self._train_cache = ("moving", scale, x.dtype)
        return to_compute(y, x.dtype)

    def _update_moving(self, mean, var):
        m = self.momentum
        for target, batch in ((self.moving_mean, mean), (self.moving_variance, var)):
            t = target.dtype.type
            value = target * t(m) + to_compute(batch, target.dtype) * t(1.0 - m)
            target[...] = value
        self.weights_updated()

    def backward(self, dy, need_input_grad=True):
        cache = self._train_cache
        if cache[0] == "moving":
            _, scale, in_dtype = cache
            self.gradients = []
            if not need_input_grad:
                return None
            return to_compute(to_compute(dy, scale.dtype) * scale, in_dtype)
        _, xhat, inv, gamma, red, in_dtype, weights, c = cache
        dyw = to_compute(dy, xhat.dtype)
        _set_scale_shift_gradients(self, dyw, xhat, red)
        if not need_input_grad:
            return None
        # d xhat_i / d x_j = inv * (delta_ij - w_j - xhat_i * w_j * (xhat_j - c * inv)) with
        # w the weights of the moments (1 / n, or mask / (count + 1e-7))
        g = dyw * gamma if gamma is not None else dyw
        sum_g = g.sum(axis=red, keepdims=True)
        sum_gx = (g * xhat).sum(axis=red, keepdims=True)
        xs = xhat if c is None else xhat - c * inv
        return to_compute(inv * (g - weights * (sum_g + xs * sum_gx)), in_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({
            "axis": self.axis, "momentum": self.momentum, "epsilon": self.epsilon,
            "center": self.center, "scale": self.scale,
            "beta_initializer": _initializers.serialize(self.beta_initializer),
            "gamma_initializer": _initializers.serialize(self.gamma_initializer),
            "moving_mean_initializer": _initializers.serialize(self.moving_mean_initializer),
            "moving_variance_initializer":
                _initializers.serialize(self.moving_variance_initializer),
            "beta_regularizer": _regularizers.serialize(self.beta_regularizer),
            "gamma_regularizer": _regularizers.serialize(self.gamma_regularizer),
            # Keras's keys for what mixedcore does not have, at their off values
            "beta_constraint": None, "gamma_constraint": None, "synchronized": False,
            "renorm": False, "renorm_clipping": None, "renorm_momentum": 0.99,
        })
        return config
