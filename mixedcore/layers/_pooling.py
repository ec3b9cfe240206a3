"""Pooling layers (channels last): MaxPooling1D/2D, AveragePooling1D/2D and the global ones.

Design:
  A. Window pooling runs on ``kernels.pool2d`` in the compute dtype; a 1-D layer is the 2-D one
     with height 1.  A maximum is one of the inputs; an average is the float32 sum (float64
     under float64) divided by the number of real pixels in the window (Keras's "same" average
     leaves the padding out of the count), rounded once to the compute dtype.  The gradient
     (``kernels.pool2d_grad``) goes to the first maximum of each window, or is spread evenly
     over the real pixels.
  B. Global pooling reduces in the work dtype (float32 for 16-bit compute dtypes, float64
     under float64) and rounds once.  A global average is the window average of A with the
     whole image as its window (``kernels.pool2d``: the sum pixel by pixel in row-major order,
     divided by their number), so a compiled plan's pooling step gives its bits; an image
     without pixels averages to NaN, as numpy's mean.  GlobalAveragePooling1D takes a mask
     (batch, steps): the mean over the unmasked steps.  A global maximum's gradient goes to
     the first maximum.
"""
import numpy as np

from mixedcore import kernels
from mixedcore._dtypes import is_floating, to_compute, work_dtype
from mixedcore.layers import _args
from mixedcore.layers._base import Layer
from mixedcore.layers._conv import (check_data_format, normalize_padding,
                                    output_length)


def _floating(layer, x):
    """x in the layer's compute dtype (integer and bool inputs too)."""
    cd = layer._compute_np()
    if x.dtype == cd:
        return x
    return to_compute(x, cd) if is_floating(x.dtype) else x.astype(cd)


class _ChannelsLast(Layer):
    """What the pooling layers share: an input check (``_check``) run at build and on every
    call, and the channel count fixed by a declared input shape."""

    def _check(self, shape):
        raise NotImplementedError

    def build(self, input_shape):
        self._check(input_shape)

    def check_input_shape(self, shape):
        self._check(shape)
        if self.input_shape is not None and shape[-1] != self.input_shape[-1]:
            raise ValueError(f"{type(self).__name__} '{self.name}': expected "
                             f"{self.input_shape[-1]} channels, received shape {tuple(shape)}")


class _Pooling(_ChannelsLast):
    _rank = 2
    _mode = "max"

    def __init__(self, pool_size, strides=None, padding="valid", data_format=None, **kwargs):
        super().__init__(**kwargs)
        owner = f"{type(self).__name__} '{self.name}'"
        self.pool_size = _args.int_tuple(owner, "pool_size", pool_size, self._rank)
        self.strides = self.pool_size if strides is None else \
            _args.int_tuple(owner, "strides", strides, self._rank)
        self.padding = normalize_padding(owner, padding, ("valid", "same"))
        self.data_format = check_data_format(owner, data_format)
        self._train_cache = None

    def _check(self, shape):
        if len(shape) != self._rank + 2:
            kind = "(batch, steps, channels)" if self._rank == 1 else \
                "(batch, height, width, channels)"
            raise ValueError(f"{type(self).__name__} '{self.name}': input must have shape {kind}, "
                             f"received {tuple(shape)}")
        out = self._spatial_out(tuple(shape[1:-1]))
        if any(o is not None and o < 1 for o in out):
            raise ValueError(f"{type(self).__name__} '{self.name}': input of shape "
                             f"{tuple(shape)} is smaller than the pool window {self.pool_size}")
        return out

    def _spatial_out(self, spatial):
        return tuple(output_length(s, p, st, 1, self.padding)
                     for s, p, st in zip(spatial, self.pool_size, self.strides))

    def compute_output_shape(self, input_shape):
        return (input_shape[0],) + self._spatial_out(tuple(input_shape[1:-1])) + \
            (input_shape[-1],)

    def _geometry(self):
        if self._rank == 1:
            return (1,) + self.pool_size, (1,) + self.strides
        return self.pool_size, self.strides

    def call(self, inputs, training=False):
        x = _floating(self, inputs)
        x4 = x.reshape(x.shape[0], 1, x.shape[1], x.shape[2]) if self._rank == 1 else x
        pool, strides = self._geometry()
        y = kernels.pool2d(x4, pool, strides=strides, padding=self.padding, mode=self._mode)
        if training:
            self._train_cache = x4
        return y.reshape(y.shape[0], y.shape[2], y.shape[3]) if self._rank == 1 else y

    def backward(self, dy, need_input_grad=True):
        x4 = self._train_cache
        self.gradients = []
        if not need_input_grad:
            return None
        pool, strides = self._geometry()
        dy4 = dy.reshape(dy.shape[0], 1, dy.shape[1], dy.shape[2]) if self._rank == 1 else dy
        dx = kernels.pool2d_grad(x4, dy4, pool, strides=strides, padding=self.padding,
                                 mode=self._mode)
        dx = to_compute(dx, x4.dtype)
        return dx.reshape(dx.shape[0], dx.shape[2], dx.shape[3]) if self._rank == 1 else dx

    def get_config(self):
        config = super().get_config()
        config.update({"pool_size": self.pool_size, "padding": self.padding,
                       "strides": self.strides, "data_format": self.data_format})
        return config


class MaxPooling2D(_Pooling):
    """Maximum over windows of channels-last images (``keras.layers.MaxPooling2D``).

    Parameters
    ----------
    pool_size : int or (int, int), default (2, 2)
    strides : int or (int, int), optional
        Defaults to ``pool_size``.
    padding : "valid" or "same"
        "same" pads as Keras does; padded positions never win.
    data_format : None or "channels_last"
    """

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None,
                 **kwargs):
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


class AveragePooling2D(_Pooling):
    """Average over windows of channels-last images (``keras.layers.AveragePooling2D``); with
    "same" padding the average is over the real pixels of each window only (as Keras)."""

    _mode = "average"

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None,
                 **kwargs):
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


class MaxPooling1D(_Pooling):
    """Maximum over windows of sequences (batch, steps, channels) (``keras.layers.MaxPooling1D``);
    pool_size defaults to 2, strides to pool_size."""

    _rank = 1

    def __init__(self, pool_size=2, strides=None, padding="valid", data_format=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


class AveragePooling1D(_Pooling):
    """Average over windows of sequences (``keras.layers.AveragePooling1D``); "same" averages
    over the real steps of each window only."""

    _rank = 1
    _mode = "average"

    def __init__(self, pool_size=2, strides=None, padding="valid", data_format=None, **kwargs):
        super().__init__(pool_size, strides, padding, data_format, **kwargs)


# -- global pooling --------------------------------------------------------------------------------

class _GlobalPooling(_ChannelsLast):
    _rank = 2

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        super().__init__(**kwargs)
        self.data_format = check_data_format(f"{type(self).__name__} '{self.name}'",
                                             data_format)
        self.keepdims = bool(keepdims)
        self._train_cache = None

    def _check(self, shape):
        if len(shape) != self._rank + 2:
            kind = "(batch, steps, channels)" if self._rank == 1 else \
                "(batch, height, width, channels)"
            raise ValueError(f"{type(self).__name__} '{self.name}': input must have shape {kind}, "
                             f"received {tuple(shape)}")

    def compute_output_shape(self, input_shape):
        if self.keepdims:
            return (input_shape[0],) + (1,) * self._rank + (input_shape[-1],)
        return (input_shape[0], input_shape[-1])

    def _axes(self):
        return tuple(range(1, self._rank + 1))

    def _out(self, y_work, cd):
        if not self.keepdims:
            y_work = y_work.reshape(y_work.shape[0], y_work.shape[-1])
        return to_compute(y_work, cd)

    def _dy(self, dy, shape, work):
        """dy (keepdims or not) as (batch, 1, ..., channels) in the work dtype."""
        dyw = to_compute(dy, work) if is_floating(dy.dtype) else dy.astype(work)
        return dyw.reshape((shape[0],) + (1,) * self._rank + (shape[-1],))

    def get_config(self):
        config = super().get_config()
        config.update({"data_format": self.data_format, "keepdims": self.keepdims})
        return config


class _GlobalAverage(_GlobalPooling):
    def call(self, inputs, training=False):
        x = _floating(self, inputs)
        if all(x.shape[1:-1]):
            # one window over the whole image (a sequence is an image of one row)
            images = x.reshape((x.shape[0],) + (1,) * (4 - x.ndim) + x.shape[1:])
            y = kernels.pool2d(images, images.shape[1:3], mode="average").reshape(
                (x.shape[0],) + (1,) * self._rank + (x.shape[-1],))
        else:
            w = work_dtype(x.dtype)
            y = to_compute(x, w).mean(axis=self._axes(), keepdims=True, dtype=w)
        if training:
            self._train_cache = (x.shape, x.dtype, None)
        return self._out(y, x.dtype)

    def backward(self, dy, need_input_grad=True):
        shape, cd, mask = self._train_cache
        self.gradients = []
        if not need_input_grad:
            return None
        w = work_dtype(cd)
        dyw = self._dy(dy, shape, w)
        if mask is None:
            count = int(np.prod(shape[1:-1]))
            dx = np.broadcast_to(dyw / w.type(count), shape)
        else:
            count = mask.sum(axis=1, dtype=w).reshape(-1, 1, 1)
            dx = dyw * (mask[:, :, None] / count).astype(w)
        return to_compute(np.ascontiguousarray(dx), cd)


class _GlobalMax(_GlobalPooling):
    def call(self, inputs, training=False):
        x = _floating(self, inputs)
        w = work_dtype(x.dtype)
        xw = to_compute(x, w)
        flat = xw.reshape(x.shape[0], -1, x.shape[-1])
        # the first maximum of each channel (NaN wins, as in kernels.pool2d)
        idx = np.argmax(flat, axis=1)
        y = np.take_along_axis(flat, idx[:, None, :], axis=1)
        y = y.reshape((x.shape[0],) + (1,) * self._rank + (x.shape[-1],))
        if training:
            self._train_cache = (x.shape, x.dtype, idx)
        return self._out(y, x.dtype)

    def backward(self, dy, need_input_grad=True):
        shape, cd, idx = self._train_cache
        self.gradients = []
        if not need_input_grad:
            return None
        w = work_dtype(cd)
        dyw = self._dy(dy, shape, w).reshape(shape[0], 1, shape[-1])
        dx = np.zeros((shape[0], int(np.prod(shape[1:-1])), shape[-1]), dtype=w)
        np.put_along_axis(dx, idx[:, None, :], dyw, axis=1)
        return to_compute(dx.reshape(shape), cd)


class GlobalAveragePooling2D(_GlobalAverage):
    """Mean over height and width (``keras.layers.GlobalAveragePooling2D``): (batch, channels),
    or (batch, 1, 1, channels) with ``keepdims=True``."""


class GlobalMaxPooling2D(_GlobalMax):
    """Maximum over height and width (``keras.layers.GlobalMaxPooling2D``)."""


class GlobalMaxPooling1D(_GlobalMax):
    """Maximum over steps (``keras.layers.GlobalMaxPooling1D``)."""

    _rank = 1


class GlobalAveragePooling1D(_GlobalAverage):
    """Mean over steps (``keras.layers.GlobalAveragePooling1D``).  With a mask (batch, steps),
    as a model hands over from a masking layer, the mean is over the unmasked steps only."""

    _rank = 1
    supports_masking = True

    def call(self, inputs, mask=None, training=False):
        if mask is None:
            return super().call(inputs, training=training)
        x = _floating(self, inputs)
        mask = np.asarray(mask)
        if mask.shape != x.shape[:2]:
            raise ValueError(f"GlobalAveragePooling1D '{self.name}': mask must have shape "
                             f"{x.shape[:2]} (batch, steps), got {mask.shape}")
        mask = mask.astype(bool)
        w = work_dtype(x.dtype)
        xw = np.where(mask[:, :, None], to_compute(x, w), w.type(0))
        with np.errstate(invalid="ignore", divide="ignore"):
            y = xw.sum(axis=1, keepdims=True, dtype=w) / \
                mask.sum(axis=1, dtype=w).reshape(-1, 1, 1)
        if training:
            self._train_cache = (x.shape, x.dtype, mask)
        return self._out(y, x.dtype)

    def compute_mask(self, inputs, mask=None):
        return None
