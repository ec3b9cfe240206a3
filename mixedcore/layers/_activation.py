"""Activation layers: Activation, Softmax, ReLU, LeakyReLU, PReLU, ELU."""
import numpy as np

from mixedcore import activations as _activations
from mixedcore import initializers as _initializers
from mixedcore import regularizers as _regularizers
from mixedcore._dtypes import is_floating, to_compute, work_dtype
from mixedcore.layers import _args
from mixedcore.layers._base import Layer, Weight


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

    def _forward_to(self, xw, dtype):
        """(the output in ``dtype``, the output in the work dtype for the gradient)."""
        yw = self._forward_work(xw)
        return to_compute(yw, dtype), yw

    def _backward_work(self, dyw, xw, yw):
        raise NotImplementedError

    def call(self, inputs, training=False):
        if not is_floating(inputs.dtype):
            inputs = inputs.astype(self._compute_np())
        xw = to_compute(inputs, work_dtype(inputs.dtype))
        y, yw = self._forward_to(xw, inputs.dtype)
        if training:
            self._train_cache = (xw, yw, inputs.dtype)
        return y

    def backward(self, dy, need_input_grad=True):
        xw, yw, in_dtype = self._train_cache
        self.gradients = []
        if not need_input_grad:
            return None
        dyw = to_compute(dy, xw.dtype)
        return to_compute(self._backward_work(dyw, xw, yw), in_dtype)


class Activation(_Elementwise):
    """Applies an activation function (``keras.layers.Activation``).

    ``activation`` is any name of :mod:`mixedcore.activations` (Keras's list: "relu", "gelu",
    "silu"/"swish", "mish", "softmax", "log_softmax", ...), one of its functions, or None.

    ``Activation("softmax", dtype="float32")`` is the usual last layer of a mixed-precision model:
    its input is cast up to float32 and the probabilities come out in float32.
    """

    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self.activation = _activations.resolve("Activation", activation)
        self.axis = -1

    def _forward_work(self, xw):
        return _activations.forward(self.activation, xw, self.axis)

    def _forward_to(self, xw, dtype):
        if self.activation in ("softmax", "log_softmax"):      # the gradient needs y
            return super()._forward_to(xw, dtype)
        return _activations.forward_to(self.activation, xw, dtype, self.axis), None

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


# what Keras's masked softmax puts at masked positions before normalizing
_MASKED = -1e9


class Softmax(Activation):
    """Softmax over ``axis`` (``keras.layers.Softmax``): an int or a list of ints (normalized
    jointly).

    ``call(inputs, mask=None)``: a mask broadcastable to the input (True or > 0.5 keeps a
    position) sets the masked positions to -1e9 before the softmax and to 0 after it, as Keras
    does: a slice that is masked entirely comes out all zeros.
    """

    def __init__(self, axis=-1, **kwargs):
        super().__init__("softmax", **kwargs)
        axes = axis if isinstance(axis, (list, tuple)) else (axis,)
        if not axes:
            raise ValueError(f"Softmax: axis must name at least one axis, got {axis!r}")
        for a in axes:
            if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
                raise TypeError(f"Softmax: axis must be an int or a list of ints, got "
                                f"{type(a).__name__}: {axis!r}")
        self._axes = tuple(int(a) for a in axes)
        self.axis = self._axes[0] if len(self._axes) == 1 and not isinstance(axis, (list, tuple)) \
            else list(self._axes)

    def _norm_axes(self, ndim):
        return tuple(sorted({a % ndim for a in self._axes}))

    def check_input_shape(self, shape):
        for a in self._axes:
            if not -len(shape) <= a < len(shape):
                raise ValueError(f"Softmax '{self.name}': axis {a} is out of range for input "
                                 f"of shape {tuple(shape)}")

    def build(self, input_shape):
        self.check_input_shape(input_shape)

    def _check_mask(self, mask, shape):
        if mask.ndim > len(shape) or any(m != 1 and m != s for m, s in
                                         zip(mask.shape[::-1], shape[::-1])):
            raise ValueError(f"Softmax '{self.name}': mask of shape {mask.shape} does not "
                             f"broadcast to the input's shape {tuple(shape)} (each dimension "
                             f"must be 1 or equal, and no more dimensions)")

    def call(self, inputs, mask=None, training=False):
        if not is_floating(inputs.dtype):
            inputs = inputs.astype(self._compute_np())
        xw = to_compute(inputs, work_dtype(inputs.dtype))
        keep = None
        if mask is not None:
            mask = np.asarray(mask)
            self._check_mask(mask, xw.shape)
            keep = mask if mask.dtype == np.bool_ else \
                to_compute(mask, np.dtype(np.float32)) > 0.5
            xw = np.where(keep, xw, xw.dtype.type(_MASKED))
        axes = self._norm_axes(xw.ndim)
        yw = self._softmax(xw, axes)
        if keep is not None:
            yw = np.where(keep, yw, yw.dtype.type(0))
        if training:
            self._train_cache = (xw, yw, inputs.dtype, axes, keep is not None)
        return to_compute(yw, inputs.dtype)

    @staticmethod
    def _softmax(xw, axes):
        if len(axes) == 1:
            return _activations.forward("softmax", xw, axes[0])
        # several axes: move them last, flatten them into one, normalize, and undo
        rest = [a for a in range(xw.ndim) if a not in axes]
        moved = np.transpose(xw, rest + list(axes))
        flat = np.ascontiguousarray(moved).reshape(moved.shape[:len(rest)] + (-1,))
        y = _activations.forward("softmax", flat, -1).reshape(moved.shape)
        return np.transpose(y, np.argsort(rest + list(axes)))

    def logits(self):
        if self._train_cache is None or self._train_cache[4] or \
                self._train_cache[3] != (self._train_cache[0].ndim - 1,):
            return None
        return self._train_cache[0]

    def backward(self, dy, need_input_grad=True):
        xw, yw, in_dtype, axes, _ = self._train_cache
        self.gradients = []
        if not need_input_grad:
            return None
        dyw = to_compute(dy, xw.dtype)
        dx = yw * (dyw - np.sum(dyw * yw, axis=axes, keepdims=True))
        return to_compute(dx, in_dtype)

    def backward_from_logits(self, dlogits, need_input_grad=True):
        self.gradients = []
        return to_compute(dlogits, self._train_cache[2]) if need_input_grad else None

    def get_config(self):
        config = Layer.get_config(self)
        config["axis"] = self.axis
        return config


class ReLU(_Elementwise):
    """``keras.layers.ReLU(max_value=None, negative_slope=0.0, threshold=0.0)``: ``x`` for
    ``threshold <= x < max_value``, ``max_value`` above, ``negative_slope * (x - threshold)``
    below the threshold."""

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

    def _plain(self):
        return self.max_value is None and self.negative_slope == 0 and self.threshold == 0

    def epilogue_name(self):
        """The name of the fused activation this layer is ("relu", "relu6"), or None."""
        if self.negative_slope == 0 and self.threshold == 0:
            if self.max_value is None:
                return "relu"
            if self.max_value == 6.0:
                return "relu6"
        return None

    def _forward_work(self, xw):
        name = self.epilogue_name()
        if name is not None:               # the compiled function (the epilogue's, bit for bit)
            return _activations.forward(name, xw)
        t = xw.dtype.type
        y = np.where(xw >= t(self.threshold), xw, t(self.negative_slope) * (xw - t(self.threshold)))
        if self.max_value is not None:
            y = np.minimum(y, t(self.max_value))
        return y

    def _backward_work(self, dyw, xw, yw):
        if self._plain():
            return _activations.backward("relu", dyw, xw, yw)
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


class LeakyReLU(_Elementwise):
    """``keras.layers.LeakyReLU(negative_slope=0.3)``: ``x`` for ``x > 0``, ``negative_slope * x``
    otherwise.  (``alpha=`` is Keras 2's name of ``negative_slope``, accepted as Keras 3 does.)"""

    def __init__(self, negative_slope=0.3, **kwargs):
        if "alpha" in kwargs:
            negative_slope = kwargs.pop("alpha")
        super().__init__(**kwargs)
        self.negative_slope = _args.number("LeakyReLU", "negative_slope", negative_slope, low=0)

    def _forward_work(self, xw):
        return np.where(xw > 0, xw, xw.dtype.type(self.negative_slope) * xw)

    def _backward_work(self, dyw, xw, yw):
        t = xw.dtype.type
        return dyw * np.where(xw > 0, t(1), t(self.negative_slope))

    def get_config(self):
        config = super().get_config()
        config["negative_slope"] = self.negative_slope
        return config


class ELU(_Elementwise):
    """``keras.layers.ELU(alpha=1.0)``: ``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise
    (computed in float64 for float32 inputs, rounded once)."""

    def __init__(self, alpha=1.0, **kwargs):
        super().__init__(**kwargs)
        self.alpha = _args.number("ELU", "alpha", alpha)

    def _forward_work(self, xw):
        return _activations._eval("elu", xw, alpha=self.alpha)

    def _backward_work(self, dyw, xw, yw):
        return _activations._eval_grad("elu", dyw, xw, alpha=self.alpha)

    def get_config(self):
        config = super().get_config()
        config["alpha"] = self.alpha
        return config


class PReLU(Layer):
    """``keras.layers.PReLU``: ``x`` for ``x >= 0``, ``alpha * x`` otherwise, with a learned
    ``alpha`` of the input's shape without the batch dimension (1 along ``shared_axes``).

    Parameters
    ----------
    alpha_initializer : str, dict or callable, default "Zeros"
    alpha_regularizer : None, str, dict or regularizer
    shared_axes : int or list of int, optional
        Axes (1 = the first after the batch) along which one alpha is shared, e.g. [1, 2] for
        one alpha per channel of (batch, height, width, channels) feature maps.

    Notes
    -----
    The weight is rounded to the compute dtype (as Keras autocasts it); the product runs in
    float32 (float64 under float64) and is rounded once.  ``alpha_constraint`` must be None.
    """

    supports_masking = True
    alpha = Weight()

    def __init__(self, alpha_initializer="Zeros", alpha_regularizer=None, alpha_constraint=None,
                 shared_axes=None, **kwargs):
        _args.keras_only(_args.owner_name("PReLU", kwargs),
                         {"alpha_constraint": alpha_constraint},
                         {"alpha_constraint": None})
        super().__init__(**kwargs)
        self.alpha_initializer = _initializers.check("PReLU", alpha_initializer)
        self.alpha_regularizer = _regularizers.get(alpha_regularizer)
        if shared_axes is None:
            self.shared_axes = None
        else:
            axes = list(shared_axes) if isinstance(shared_axes, (list, tuple)) else [shared_axes]
            for a in axes:
                if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or a < 1:
                    raise ValueError(f"PReLU: shared_axes must be ints >= 1 (axis 0 is the "
                                     f"batch), got {shared_axes!r}")
            self.shared_axes = [int(a) for a in axes]
        self._train_cache = None

    def build(self, input_shape):
        ndim = len(input_shape)
        if ndim < 2:
            raise ValueError(f"PReLU '{self.name}': input must have a batch dimension and at "
                             f"least one more, received shape {tuple(input_shape)}")
        shared = set(self.shared_axes or ())
        bad = [a for a in shared if a >= ndim]
        if bad:
            raise ValueError(f"PReLU '{self.name}': shared_axes {self.shared_axes} out of range "
                             f"for input of shape {tuple(input_shape)}")
        shape = tuple(1 if i in shared else input_shape[i] for i in range(1, ndim))
        if any(d is None for d in shape):
            raise ValueError(f"PReLU '{self.name}': the dimensions that are not shared must be "
                             f"known, received shape {tuple(input_shape)} with shared_axes "
                             f"{self.shared_axes}")
        self.add_weight("alpha", shape, self.alpha_initializer, self.alpha_regularizer)

    def check_input_shape(self, shape):
        alpha = self.alpha
        ok = len(shape) == alpha.ndim + 1 and all(
            a == 1 and (i + 1) in (self.shared_axes or ()) or a == d
            for i, (a, d) in enumerate(zip(alpha.shape, shape[1:])))
        if not ok:
            raise ValueError(f"PReLU '{self.name}': expected input of shape "
                             f"{(None,) + self.input_shape[1:]}, received {tuple(shape)}")

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def call(self, inputs, training=False):
        x = inputs if is_floating(inputs.dtype) else inputs.astype(self._compute_np())
        w = work_dtype(x.dtype)
        xw = to_compute(x, w)
        alpha = to_compute(self._compute_weight("alpha"), w)
        y = np.where(xw >= 0, xw, alpha * xw)
        if training:
            self._train_cache = (xw, alpha, x.dtype)
        return to_compute(y, x.dtype)

    def backward(self, dy, need_input_grad=True):
        xw, alpha, in_dtype = self._train_cache
        dyw = to_compute(dy, xw.dtype)
        neg = xw < 0
        dalpha = np.where(neg, dyw * xw, xw.dtype.type(0))
        # summed over the batch and the shared axes (alpha is 1 there)
        reduce_axes = (0,) + tuple(i + 1 for i, d in enumerate(alpha.shape) if d == 1)
        dalpha = dalpha.sum(axis=reduce_axes, keepdims=True).reshape(alpha.shape)
        self._set_gradients({"alpha": dalpha})
        if not need_input_grad:
            return None
        return to_compute(np.where(neg, alpha * dyw, dyw), in_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({
            "alpha_initializer": _initializers.serialize(self.alpha_initializer),
            "alpha_regularizer": _regularizers.serialize(self.alpha_regularizer),
            "alpha_constraint": None,
            "shared_axes": self.shared_axes,
        })
        return config
