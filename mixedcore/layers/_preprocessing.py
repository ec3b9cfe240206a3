"""Preprocessing layers that models hold in their graphs: Rescaling, Normalization, Resizing,
CenterCrop (``keras.layers``; EfficientNet, MobileNetV3 and ConvNeXt start with them).

Each computes in its compute dtype as Keras does: the input is cast to it, the arithmetic runs in
float32 (float64 under float64) and the result is rounded once.  Rescaling and Normalization are
also trained through (their ``backward`` scales the gradient); Resizing and CenterCrop pass no
gradient (Keras's neither: they sit on the input).
"""
import numpy as np

from mixedcore._dtypes import is_floating, to_compute, work_dtype
from mixedcore.layers import _args
from mixedcore.layers._base import Layer, Weight

__all__ = ["Rescaling", "Normalization", "Resizing", "CenterCrop"]

_EPSILON = 1e-7          # Keras's backend.epsilon(), the floor of Normalization's deviation


def _number_or_list(owner, name, value):
    """A float, or a list of floats (per channel), as a float64 array."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{owner}: {name} must be a number or a list of numbers, got "
                        f"{value!r}") from None
    if arr.ndim > 1 or isinstance(value, bool) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{owner}: {name} must be a finite number or a list of them, got "
                         f"{value!r}")
    return arr


def _as_config_value(arr, original):
    return original if not isinstance(original, np.ndarray) else arr.tolist()


class _ScaleShift(Layer):
    """y = x * scale + shift, per channel (last axis) or scalar, in the work dtype."""

    supports_masking = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._train_cache = None

    def _coefficients(self, ndim):
        raise NotImplementedError

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def call(self, inputs, training=False):
        cd = self._compute_np()
        x = inputs if inputs.dtype == cd else to_compute(inputs, cd) if is_floating(
            inputs.dtype) else inputs.astype(cd)
        w = work_dtype(cd)
        scale, shift = self._coefficients(x.ndim)
        y = to_compute(x, w) * scale.astype(w) + shift.astype(w)
        self._train_cache = (scale.astype(w), x.shape) if training else None
        return to_compute(y, cd)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        scale, shape = self._train_cache
        g = to_compute(dy, scale.dtype) * scale
        if g.shape != shape:
            g = np.broadcast_to(g, shape)
        return to_compute(g, dy.dtype)


class Rescaling(_ScaleShift):
    """``keras.layers.Rescaling``: ``x * scale + offset`` in the compute dtype (``scale`` and
    ``offset`` numbers or per-channel lists along the last axis)."""

    def __init__(self, scale, offset=0.0, **kwargs):
        super().__init__(**kwargs)
        owner = f"Rescaling '{self.name}'"
        self.scale = scale
        self.offset = offset
        self._scale = _number_or_list(owner, "scale", scale)
        self._offset = _number_or_list(owner, "offset", offset)

    def build(self, input_shape):
        last = input_shape[-1] if len(input_shape) else None
        for name, arr in (("scale", self._scale), ("offset", self._offset)):
            if arr.ndim == 1 and arr.size != 1 and last is not None and arr.size != last:
                raise ValueError(f"Rescaling '{self.name}': {name} has {arr.size} values for "
                                 f"inputs with {last} channels (shape {tuple(input_shape)})")

    def _coefficients(self, ndim):
        return self._scale, self._offset

    def get_config(self):
        config = super().get_config()
        config.update({"scale": _as_config_value(self._scale, self.scale),
                       "offset": _as_config_value(self._offset, self.offset)})
        return config


class Normalization(_ScaleShift):
    """``keras.layers.Normalization`` at inference: ``(x - mean) / max(sqrt(variance), 1e-7)``
    (``invert``: ``mean + x * max(sqrt(variance), 1e-7)``), per index of ``axis``.

    ``mean`` and ``variance`` come from the config when given there, else from the weights
    ``mean``, ``variance`` and ``count`` a Keras file holds for an adapted layer.  ``adapt`` is
    not offered: a model's statistics come with its file.
    """

    mean = Weight()
    variance = Weight()
    count = Weight()

    def __init__(self, axis=-1, mean=None, variance=None, invert=False, **kwargs):
        super().__init__(**kwargs)
        owner = f"Normalization '{self.name}'"
        if axis is None:
            axis = ()
        axes = (axis,) if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) \
            else axis
        if not isinstance(axes, (list, tuple)) or not all(
                isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes):
            raise TypeError(f"{owner}: axis must be an int, a list of ints or None, got "
                            f"{axis!r}")
        self.axis = tuple(int(a) for a in axes)
        if (mean is None) != (variance is None):
            raise ValueError(f"{owner}: mean and variance must be given together, got "
                             f"mean={mean!r}, variance={variance!r}")
        self.input_mean, self.input_variance = mean, variance
        self._given = None
        if mean is not None:
            m = np.asarray(mean, dtype=np.float64)
            v = np.asarray(variance, dtype=np.float64)
            if m.shape != v.shape:
                raise ValueError(f"{owner}: mean and variance must have the same shape, got "
                                 f"{m.shape} and {v.shape}")
            if m.ndim > len(self.axis):
                raise ValueError(f"{owner}: mean has rank {m.ndim}, more than the {len(self.axis)}"
                                 f" axes {self.axis}")
            if np.any(v < 0) or not np.all(np.isfinite(m)) or not np.all(np.isfinite(v)):
                raise ValueError(f"{owner}: variance must be finite and >= 0 and mean finite, "
                                 f"got mean={mean!r}, variance={variance!r}")
            self._given = (m, v)
        self.invert = bool(invert)
        self._keep = None

    def build(self, input_shape):
        ndim = len(input_shape)
        owner = f"Normalization '{self.name}'"
        if any(a < -ndim or a >= ndim for a in self.axis):
            raise ValueError(f"{owner}: axis {self.axis} out of range for inputs of shape "
                             f"{tuple(input_shape)}")
        self._keep = tuple(sorted(a % ndim for a in self.axis))
        if 0 in self._keep:
            raise ValueError(f"{owner}: axis {self.axis} includes the batch axis")
        kept = tuple(input_shape[a] for a in self._keep)
        if any(d is None for d in kept):
            raise ValueError(f"{owner}: the kept axes {self.axis} must have known sizes, got "
                             f"inputs of shape {tuple(input_shape)}")
        if self._given is None:
            self.add_weight("mean", kept, "zeros", trainable=False)
            self.add_weight("variance", kept, "ones", trainable=False)
            self.add_weight("count", (), "zeros", trainable=False, dtype="int64")
        else:
            m = self._given[0]
            try:
                np.broadcast_to(m, kept) if m.ndim else None
            except ValueError:
                raise ValueError(f"{owner}: mean of shape {m.shape} does not fit the kept axes "
                                 f"of size {kept}") from None

    def _statistics(self, ndim):
        """(mean, deviation) in the work dtype, shaped to broadcast against inputs of rank
        ``ndim``: Keras rounds the statistics to the compute dtype, and floors the deviation at
        1e-7."""
        if self._given is not None:
            mean, var = self._given
            axes = self._keep[len(self._keep) - mean.ndim:]
        else:
            mean = self._weight("mean").astype(np.float64)
            var = self._weight("variance").astype(np.float64)
            axes = self._keep
        shape = [1] * ndim
        for a, d in zip(axes, mean.shape):
            shape[a] = d
        cd = self._compute_np()
        w = work_dtype(cd)
        mean = to_compute(to_compute(mean.reshape(shape).astype(w), cd), w)
        var = to_compute(to_compute(var.reshape(shape).astype(w), cd), w)
        return mean, np.maximum(np.sqrt(var), w.type(_EPSILON))

    def _coefficients(self, ndim):
        mean, dev = self._statistics(ndim)
        if self.invert:
            return dev, mean
        return 1.0 / dev, -mean / dev

    def call(self, inputs, training=False):
        if self.invert:
            return super().call(inputs, training=training)
        # (x - mean) / dev, as Keras orders it (not x * (1 / dev) - mean / dev)
        cd = self._compute_np()
        x = inputs if inputs.dtype == cd else to_compute(inputs, cd) if is_floating(
            inputs.dtype) else inputs.astype(cd)
        mean, dev = self._statistics(x.ndim)
        y = (to_compute(x, mean.dtype) - mean) / dev
        self._train_cache = (1.0 / dev, x.shape) if training else None
        return to_compute(y, cd)

    def get_config(self):
        config = super().get_config()
        listed = [] if self.axis == () else list(self.axis)
        config.update({"axis": listed, "invert": self.invert,
                       "mean": _plain(self.input_mean), "variance": _plain(self.input_variance)})
        return config


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class _Image(Layer):
    """Base of the layers that change an image's height and width (channels last)."""

    def __init__(self, height, width, data_format=None, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.height = _args.positive_int(owner, "height", height)
        self.width = _args.positive_int(owner, "width", width)
        if data_format not in (None, "channels_last"):
            raise ValueError(f"{owner}: only data_format='channels_last' is supported, got "
                             f"{data_format!r}")
        self.data_format = "channels_last"

    def _axes(self, shape):
        if len(shape) not in (3, 4):
            raise ValueError(f"{type(self).__name__} '{self.name}': expected images of rank 3 "
                             f"(h, w, c) or 4 (batch, h, w, c), got shape {tuple(shape)}")
        return (0, 1) if len(shape) == 3 else (1, 2)

    def _check_sizes(self, shape):
        """Raise ValueError if the layer cannot take images of ``shape``."""
        self._axes(shape)

    def build(self, input_shape):
        self._check_sizes(input_shape)

    def check_input_shape(self, shape):
        self._check_sizes(shape)

    def _image(self, inputs):
        """(inputs in the compute dtype, height axis, width axis), the sizes checked."""
        cd = self._compute_np()
        x = inputs if inputs.dtype == cd else to_compute(inputs, cd) if is_floating(
            inputs.dtype) else inputs.astype(cd)
        self._check_sizes(x.shape)
        return (x,) + self._axes(x.shape)

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        h, w = self._axes(shape)
        shape[h], shape[w] = self.height, self.width
        return tuple(shape)

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def get_config(self):
        config = super().get_config()
        config.update({"height": self.height, "width": self.width,
                       "data_format": self.data_format})
        return config


def _source_coordinates(out_size, in_size):
    """Half-pixel source coordinates of ``out_size`` samples over ``in_size`` pixels."""
    scale = in_size / out_size
    return (np.arange(out_size, dtype=np.float64) + 0.5) * scale - 0.5


class Resizing(_Image):
    """``keras.layers.Resizing`` with ``interpolation`` "bilinear" or "nearest" (half-pixel
    centers, no antialiasing, as Keras's backends compute them when enlarging).

    ``crop_to_aspect_ratio``, ``pad_to_aspect_ratio`` and ``antialias`` must be False, and
    shrinking with "bilinear" is refused (the backends filter differently there).
    """

    def __init__(self, height, width, interpolation="bilinear", crop_to_aspect_ratio=False,
                 pad_to_aspect_ratio=False, fill_mode="constant", fill_value=0.0,
                 antialias=False, data_format=None, **kwargs):
        super().__init__(height, width, data_format=data_format, **kwargs)
        owner = f"Resizing '{self.name}'"
        if interpolation not in ("bilinear", "nearest"):
            raise ValueError(f"{owner}: interpolation must be 'bilinear' or 'nearest', got "
                             f"{interpolation!r}")
        for name, value in (("crop_to_aspect_ratio", crop_to_aspect_ratio),
                            ("pad_to_aspect_ratio", pad_to_aspect_ratio),
                            ("antialias", antialias)):
            if value:
                raise ValueError(f"{owner}: {name}={value!r} is not supported (only False)")
        self.interpolation = interpolation
        self.fill_mode, self.fill_value = fill_mode, fill_value

    def _check_sizes(self, shape):
        ha, wa = self._axes(shape)
        ih, iw = shape[ha], shape[wa]
        if self.interpolation == "bilinear" and (
                ih is not None and self.height < ih or iw is not None and self.width < iw):
            raise ValueError(f"Resizing '{self.name}': bilinear shrinking from {ih}x{iw} to "
                             f"{self.height}x{self.width} is not supported (only enlarging "
                             f"or 'nearest'; interpolation='bilinear', height={self.height}, "
                             f"width={self.width})")

    def call(self, inputs):
        x, ha, wa = self._image(inputs)
        ih, iw = x.shape[ha], x.shape[wa]
        if self.interpolation == "nearest":
            rows = np.minimum(np.floor((np.arange(self.height) + 0.5) * ih / self.height),
                              ih - 1).astype(np.intp)
            cols = np.minimum(np.floor((np.arange(self.width) + 0.5) * iw / self.width),
                              iw - 1).astype(np.intp)
            return np.take(np.take(x, rows, axis=ha), cols, axis=wa)
        w = work_dtype(x.dtype)
        xw = to_compute(x, w)
        for axis, out_size, in_size in ((ha, self.height, ih), (wa, self.width, iw)):
            src = np.clip(_source_coordinates(out_size, in_size), 0.0, in_size - 1)
            lo = np.floor(src).astype(np.intp)
            hi = np.minimum(lo + 1, in_size - 1)
            frac = (src - lo).astype(w)
            shape = [1] * xw.ndim
            shape[axis] = out_size
            frac = frac.reshape(shape)
            a, b = np.take(xw, lo, axis=axis), np.take(xw, hi, axis=axis)
            xw = a + (b - a) * frac
        return to_compute(xw, x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"interpolation": self.interpolation, "crop_to_aspect_ratio": False,
                       "pad_to_aspect_ratio": False, "fill_mode": self.fill_mode,
                       "fill_value": self.fill_value, "antialias": False})
        return config


class CenterCrop(_Image):
    """``keras.layers.CenterCrop``: the central ``height`` x ``width`` window (offsets rounded
    down, as Keras).  Inputs smaller than the window are refused (Keras resizes them)."""

    def _check_sizes(self, shape):
        ha, wa = self._axes(shape)
        ih, iw = shape[ha], shape[wa]
        if ih is not None and ih < self.height or iw is not None and iw < self.width:
            raise ValueError(f"CenterCrop '{self.name}': inputs of {ih}x{iw} are smaller than "
                             f"the {self.height}x{self.width} window (height={self.height}, "
                             f"width={self.width}); only cropping is supported")

    def call(self, inputs):
        x, ha, wa = self._image(inputs)
        ih, iw = x.shape[ha], x.shape[wa]
        top, left = (ih - self.height) // 2, (iw - self.width) // 2
        index = [slice(None)] * x.ndim
        index[ha] = slice(top, top + self.height)
        index[wa] = slice(left, left + self.width)
        return np.ascontiguousarray(x[tuple(index)])
