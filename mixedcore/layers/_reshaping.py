"""Shaping layers: Flatten, Reshape, Permute, RepeatVector, ZeroPadding1D, ZeroPadding2D,
UpSampling2D, Cropping2D.

They move values without arithmetic (bilinear upsampling aside), so they keep their input's dtype:
floating inputs arrive in the compute dtype (autocast), integer and bool inputs pass through
untouched, as in Keras.  ``data_format`` is "channels_last" (Keras's default) or
"channels_first".
"""
import numpy as np

from mixedcore._dtypes import is_floating, to_compute, work_dtype
from mixedcore.layers import _args
from mixedcore.layers._base import Layer


class _Shaping(Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._train_cache = None

    def _owner(self):
        return f"{type(self).__name__} '{self.name}'"

    def _need_rank(self, shape, rank):
        if len(shape) != rank:
            raise ValueError(f"{self._owner()}: expected input of rank {rank}, received shape "
                             f"{tuple(shape)}")

    def build(self, input_shape):
        self.compute_output_shape(input_shape)

    def check_input_shape(self, shape):
        self.compute_output_shape(tuple(shape))


class Flatten(_Shaping):
    """Flattens each sample: (batch, d1, d2, ...) -> (batch, d1 * d2 * ...)
    (``keras.layers.Flatten``).  With data_format="channels_first" the channels axis is moved
    last first, so the order of the features is the channels_last one, as Keras does."""

    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.data_format = _args.data_format("Flatten", data_format)

    def compute_output_shape(self, input_shape):
        if len(input_shape) < 1:
            raise ValueError(f"{self._owner()}: input needs a batch dimension, received shape "
                             f"{tuple(input_shape)}")
        rest = input_shape[1:]
        if any(d is None for d in rest):
            return (input_shape[0], None)
        return (input_shape[0], int(np.prod(rest, dtype=np.int64)))

    def _perm(self, ndim):
        if self.data_format == "channels_first" and ndim > 2:
            return (0,) + tuple(range(2, ndim)) + (1,)
        return None

    def call(self, inputs, training=False):
        x = inputs
        perm = self._perm(x.ndim)
        if perm is not None:
            x = x.transpose(perm)
        if training:
            self._train_cache = (inputs.shape, perm)
        return x.reshape(x.shape[0], -1)

    def backward(self, dy, need_input_grad=True):
        shape, perm = self._train_cache
        self.gradients = []
        if not need_input_grad:
            return None
        if perm is None:
            return dy.reshape(shape)
        moved = tuple(shape[p] for p in perm)
        return np.ascontiguousarray(dy.reshape(moved).transpose(np.argsort(perm)))

    def get_config(self):
        config = super().get_config()
        config["data_format"] = self.data_format
        return config


class Reshape(_Shaping):
    """Reshapes each sample to ``target_shape`` (``keras.layers.Reshape``); one entry may be
    -1, inferred from the sample's size."""

    def __init__(self, target_shape, **kwargs):
        super().__init__(**kwargs)
        owner = "Reshape"
        if isinstance(target_shape, (int, np.integer)) and not isinstance(target_shape, bool):
            target_shape = (target_shape,)
        if not isinstance(target_shape, (tuple, list)):
            raise TypeError(f"{owner}: target_shape must be a tuple of ints, got "
                            f"{type(target_shape).__name__}: {target_shape!r}")
        dims = []
        for d in target_shape:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or (d < 1 and d != -1):
                raise ValueError(f"{owner}: target_shape entries must be positive ints or one "
                                 f"-1, got {tuple(target_shape)!r}")
            dims.append(int(d))
        if dims.count(-1) > 1:
            raise ValueError(f"{owner}: target_shape may hold at most one -1, got "
                             f"{tuple(target_shape)!r}")
        self.target_shape = tuple(dims)

    def _resolve(self, sample_shape):
        """The target shape for samples of ``sample_shape`` (None where it cannot be known)."""
        owner = self._owner()
        known = [d for d in self.target_shape if d != -1]
        target_size = int(np.prod(known, dtype=np.int64)) if known else 1
        if any(d is None for d in sample_shape):
            return tuple(None if d == -1 else d for d in self.target_shape)
        size = int(np.prod(sample_shape, dtype=np.int64)) if sample_shape else 1
        if -1 in self.target_shape:
            if target_size == 0 or size % target_size:
                raise ValueError(f"{owner}: cannot reshape samples of shape "
                                 f"{tuple(sample_shape)} ({size} values) to "
                                 f"{self.target_shape}")
            return tuple(size // target_size if d == -1 else d for d in self.target_shape)
        if size != target_size:
            raise ValueError(f"{owner}: cannot reshape samples of shape {tuple(sample_shape)} "
                             f"({size} values) to {self.target_shape} ({target_size} values)")
        return self.target_shape

    def compute_output_shape(self, input_shape):
        if len(input_shape) < 1:
            raise ValueError(f"{self._owner()}: input needs a batch dimension, received shape "
                             f"{tuple(input_shape)}")
        return (input_shape[0],) + self._resolve(tuple(input_shape[1:]))

    def call(self, inputs, training=False):
        target = self._resolve(inputs.shape[1:])
        if training:
            self._train_cache = inputs.shape
        return inputs.reshape((inputs.shape[0],) + target)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        return dy.reshape(self._train_cache) if need_input_grad else None

    def get_config(self):
        config = super().get_config()
        config["target_shape"] = self.target_shape
        return config


class Permute(_Shaping):
    """Permutes the axes of each sample (``keras.layers.Permute``): ``dims`` is a permutation of
    1..n (1 is the first axis after the batch)."""

    def __init__(self, dims, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(dims, (tuple, list)) or sorted(
                int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool) else -1
                for d in dims) != list(range(1, len(dims) + 1)):
            raise ValueError(f"Permute: dims must be a permutation of 1..n (the axes after the "
                             f"batch), got {dims!r}")
        self.dims = tuple(int(d) for d in dims)

    def compute_output_shape(self, input_shape):
        self._need_rank(input_shape, len(self.dims) + 1)
        return (input_shape[0],) + tuple(input_shape[d] for d in self.dims)

    def call(self, inputs, training=False):
        self._need_rank(inputs.shape, len(self.dims) + 1)
        perm = (0,) + self.dims
        if training:
            self._train_cache = perm
        return np.ascontiguousarray(inputs.transpose(perm))

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        return np.ascontiguousarray(dy.transpose(np.argsort(self._train_cache)))

    def get_config(self):
        config = super().get_config()
        config["dims"] = self.dims
        return config


class RepeatVector(_Shaping):
    """Repeats each sample ``n`` times: (batch, features) -> (batch, n, features)
    (``keras.layers.RepeatVector``)."""

    def __init__(self, n, **kwargs):
        super().__init__(**kwargs)
        self.n = _args.positive_int("RepeatVector", "n", n)

    def compute_output_shape(self, input_shape):
        self._need_rank(input_shape, 2)
        return (input_shape[0], self.n, input_shape[1])

    def call(self, inputs, training=False):
        self._need_rank(inputs.shape, 2)
        if training:
            self._train_cache = inputs.dtype
        return np.repeat(inputs[:, None, :], self.n, axis=1)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        dy = np.asarray(dy)
        if is_floating(dy.dtype):
            return to_compute(to_compute(dy, work_dtype(dy.dtype)).sum(axis=1), dy.dtype)
        return dy.sum(axis=1)

    def get_config(self):
        config = super().get_config()
        config["n"] = self.n
        return config


def _pair(owner, what, value):
    return _args.int_tuple(owner, what, value, 2, allow_zero=True)


def _pairs2d(owner, what, value):
    """An int, (symmetric_height, symmetric_width), or ((top, bottom), (left, right))."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        v = _args.non_negative_int(owner, what, value)
        return ((v, v), (v, v))
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{owner}: {what} must be an int, a tuple of 2 ints or a tuple of 2 "
                         f"tuples of 2 ints, got {value!r}")
    return (_pair(owner, f"1st entry of {what}", value[0]),
            _pair(owner, f"2nd entry of {what}", value[1]))


class _Spatial(_Shaping):
    """A layer on (batch, spatial..., channels) or (batch, channels, spatial...) inputs."""

    _rank: "int | None" = None

    def _spatial_axes(self):
        n = self._rank - 2
        return tuple(range(1, 1 + n)) if self.data_format == "channels_last" else \
            tuple(range(2, 2 + n))


class ZeroPadding1D(_Spatial):
    """Pads the steps axis of (batch, steps, channels) with zeros (``keras.layers.ZeroPadding1D``):
    ``padding`` is an int or (left, right)."""

    _rank = 3

    def __init__(self, padding=1, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.padding = _pair("ZeroPadding1D", "padding", padding)
        self.data_format = _args.data_format("ZeroPadding1D", data_format)

    def _pads(self):
        return (self.padding,)

    def compute_output_shape(self, input_shape):
        self._need_rank(input_shape, self._rank)
        out = list(input_shape)
        for axis, (a, b) in zip(self._spatial_axes(), self._pads()):
            if out[axis] is not None:
                out[axis] += a + b
        return tuple(out)

    def call(self, inputs, training=False):
        self._need_rank(inputs.shape, self._rank)
        widths = [(0, 0)] * inputs.ndim
        for axis, pad in zip(self._spatial_axes(), self._pads()):
            widths[axis] = pad
        if training:
            self._train_cache = inputs.shape
        return np.pad(inputs, widths)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        index = [slice(None)] * dy.ndim
        for axis, (a, b) in zip(self._spatial_axes(), self._pads()):
            index[axis] = slice(a, dy.shape[axis] - b)
        return np.ascontiguousarray(dy[tuple(index)])

    def get_config(self):
        config = super().get_config()
        config.update({"padding": self.padding, "data_format": self.data_format})
        return config


class ZeroPadding2D(ZeroPadding1D):
    """Pads the rows and columns of (batch, height, width, channels) with zeros
    (``keras.layers.ZeroPadding2D``): ``padding`` is an int, (symmetric_height,
    symmetric_width) or ((top, bottom), (left, right))."""

    _rank = 4

    def __init__(self, padding=(1, 1), data_format=None, **kwargs):
        _Spatial.__init__(self, **kwargs)
        self.padding = _pairs2d("ZeroPadding2D", "padding", padding)
        self.data_format = _args.data_format("ZeroPadding2D", data_format)

    def _pads(self):
        return self.padding


class Cropping2D(_Spatial):
    """Crops rows and columns of (batch, height, width, channels) (``keras.layers.Cropping2D``):
    ``cropping`` is an int, (symmetric_height, symmetric_width) or ((top, bottom), (left,
    right)); what is cropped must leave at least one row and one column."""

    _rank = 4

    def __init__(self, cropping=((0, 0), (0, 0)), data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.cropping = _pairs2d("Cropping2D", "cropping", cropping)
        self.data_format = _args.data_format("Cropping2D", data_format)

    def compute_output_shape(self, input_shape):
        self._need_rank(input_shape, 4)
        out = list(input_shape)
        for axis, (a, b) in zip(self._spatial_axes(), self.cropping):
            if out[axis] is not None:
                if a + b >= out[axis]:
                    raise ValueError(f"{self._owner()}: cropping {self.cropping} leaves nothing "
                                     f"of input shape {tuple(input_shape)}")
                out[axis] -= a + b
        return tuple(out)

    def call(self, inputs, training=False):
        self.compute_output_shape(inputs.shape)
        index = [slice(None)] * 4
        for axis, (a, b) in zip(self._spatial_axes(), self.cropping):
            index[axis] = slice(a, inputs.shape[axis] - b)
        if training:
            self._train_cache = inputs.shape
        return np.ascontiguousarray(inputs[tuple(index)])

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        widths = [(0, 0)] * 4
        for axis, pad in zip(self._spatial_axes(), self.cropping):
            widths[axis] = pad
        return np.pad(dy, widths)

    def get_config(self):
        config = super().get_config()
        config.update({"cropping": self.cropping, "data_format": self.data_format})
        return config


def _bilinear_matrix(n_in, factor, dtype):
    """(n_in * factor, n_in) interpolation matrix with half-pixel centres, clamped at the edges
    (what Keras's ``ops.image.resize(..., "bilinear")`` does when enlarging)."""
    n_out = n_in * factor
    src = (np.arange(n_out, dtype=np.float64) + 0.5) / factor - 0.5
    src = np.clip(src, 0.0, n_in - 1)
    i0 = np.floor(src).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    frac = src - i0
    m = np.zeros((n_out, n_in), dtype=np.float64)
    rows = np.arange(n_out)
    np.add.at(m, (rows, i0), 1.0 - frac)
    np.add.at(m, (rows, i1), frac)
    return m.astype(dtype)


class UpSampling2D(_Spatial):
    """Repeats rows and columns (``keras.layers.UpSampling2D``): ``size`` is an int or (rows,
    columns); ``interpolation`` "nearest" (copies, any dtype) or "bilinear" (half-pixel
    centres, edges clamped, as Keras; computed in float32 -- float64 under float64 -- from the
    compute-dtype input and rounded once).  Keras's other interpolations ("bicubic", "lanczos3",
    "lanczos5", "area") are a ValueError."""

    _rank = 4

    def __init__(self, size=(2, 2), data_format=None, interpolation="nearest", **kwargs):
        owner = _args.owner_name("UpSampling2D", kwargs)
        super().__init__(**kwargs)
        self.size = _args.int_tuple(owner, "size", size, 2)
        self.data_format = _args.data_format(owner, data_format)
        if not isinstance(interpolation, str):
            raise TypeError(f"{owner}: interpolation must be a str, got "
                            f"{type(interpolation).__name__}: {interpolation!r}")
        interpolation = interpolation.lower()
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"{owner}: interpolation {interpolation!r} is not supported; "
                             f"use 'nearest' or 'bilinear'")
        self.interpolation = interpolation
        self._matrices = {}

    def compute_output_shape(self, input_shape):
        self._need_rank(input_shape, 4)
        out = list(input_shape)
        for axis, f in zip(self._spatial_axes(), self.size):
            if out[axis] is not None:
                out[axis] *= f
        return tuple(out)

    def compute_output_dtype(self, input_dtype):
        if self.interpolation == "bilinear":
            return self.compute_dtype
        return super().compute_output_dtype(input_dtype)

    def _matrix(self, n, f, dtype):
        key = (n, f, dtype)
        m = self._matrices.get(key)
        if m is None:
            m = self._matrices[key] = _bilinear_matrix(n, f, dtype)
        return m

    def _channels_last(self, x):
        return x if self.data_format == "channels_last" else x.transpose(0, 2, 3, 1)

    def _restore(self, y):
        return y if self.data_format == "channels_last" else y.transpose(0, 3, 1, 2)

    def call(self, inputs, training=False):
        self._need_rank(inputs.shape, 4)
        sh, sw = self.size
        if self.interpolation == "nearest":
            y = inputs
            for axis, f in zip(self._spatial_axes(), self.size):
                y = np.repeat(y, f, axis=axis)
            if training:
                self._train_cache = inputs.shape
            return y
        x = inputs if is_floating(inputs.dtype) else inputs.astype(self._compute_np())
        w = work_dtype(x.dtype)
        xw = self._channels_last(to_compute(x, w))
        mh = self._matrix(xw.shape[1], sh, w)
        mw = self._matrix(xw.shape[2], sw, w)
        y = np.einsum("oh,bhwc->bowc", mh, xw, optimize=True)
        y = np.einsum("pw,bowc->bopc", mw, y, optimize=True)
        if training:
            self._train_cache = (x.dtype, mh, mw)
        return np.ascontiguousarray(to_compute(self._restore(y), x.dtype))

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        dy = np.asarray(dy)
        if self.interpolation == "nearest":
            shape = self._train_cache
            b = shape[0]
            if self.data_format == "channels_last":
                _, h, w_, c = shape
                g = dy.reshape(b, h, self.size[0], w_, self.size[1], c)
                axes = (2, 4)
            else:
                _, c, h, w_ = shape
                g = dy.reshape(b, c, h, self.size[0], w_, self.size[1])
                axes = (3, 5)
            if is_floating(dy.dtype):
                return to_compute(to_compute(g, work_dtype(dy.dtype)).sum(axis=axes), dy.dtype)
            return g.sum(axis=axes)
        in_dtype, mh, mw = self._train_cache
        gw = self._channels_last(to_compute(dy, mh.dtype))
        g = np.einsum("pw,bopc->bowc", mw, gw, optimize=True)
        g = np.einsum("oh,bowc->bhwc", mh, g, optimize=True)
        return np.ascontiguousarray(to_compute(self._restore(g), in_dtype))

    def get_config(self):
        config = super().get_config()
        config.update({"size": self.size, "data_format": self.data_format,
                       "interpolation": self.interpolation})
        return config
