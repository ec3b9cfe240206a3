"""Convolution layers: Conv1D, Conv2D, DepthwiseConv2D, SeparableConv2D (channels last).

Design:
  A. Every layer works on 4-D images (batch, height, width, channels); a 1-D layer is the 2-D one
     with height 1, its kernel (k, cin / groups, filters) seen as (1, k, cin / groups, filters),
     and "causal" padding is (k - 1) * dilation columns on the left only.
  B. Under float16, bfloat16 and float32 the convolution runs on ``kernels.conv2d``: the GEMM's
     float32-accumulating micro-kernels with the im2col rows formed in cache.  Inference uses the
     kernel packed once per weight version in the compute dtype (``packed_weight``, as Dense
     does) and fuses bias, activation and the rounding to the compute dtype into the product;
     training takes the float32 pre-activation from the same product, so both give the same bits.
     Depthwise convolution runs on ``kernels.depthwise_conv2d`` (float32 accumulation too).
     What they share with Dense (named kernel and bias weights, the inference product with
     bias, activation and rounding fused, folding) is ``_affine._Affine``; each layer gives its
     product (``_product``) and how its kernel is packed (``_pack``).
  C. Under float64 the same products run in numpy float64 on ``kernels.im2col``.
  D. Backward: the kernel gradient is ``im2col(x).T @ dz`` and the input gradient is
     ``col2im(dz @ kernel.T)`` per group, on ``kernels.matmul`` (16-bit operands, float32
     results) or float64 numpy, in batch chunks that bound the im2col matrix's size.  Depthwise
     gradients are per-channel contractions of the same im2col matrix, in float32 (float64).
"""
import numpy as np

from mixedcore import activations as _activations
from mixedcore import kernels
from mixedcore._dtypes import dtype_name, is_floating, to_compute
from mixedcore.layers import _args
from mixedcore.layers._affine import _Affine
from mixedcore.layers._base import Weight

_GEMM_DTYPES = ("float16", "bfloat16", "float32")
_F64 = np.dtype(np.float64)
# elements of one im2col chunk in the backward pass (the batch is split to stay below it)
_CHUNK_ELEMENTS = 1 << 24


# -- argument checks ---------------------------------------------------------------------------

def normalize_padding(owner, padding, allowed):
    if not isinstance(padding, str) or padding.lower() not in allowed:
        raise ValueError(f"{owner}: padding must be one of {list(allowed)}, got {padding!r}")
    return padding.lower()


def check_data_format(owner, data_format):
    """"channels_last" (also for None); channels_first is refused."""
    if data_format is None or data_format == "channels_last":
        return "channels_last"
    if data_format == "channels_first":
        raise ValueError(f"{owner}: data_format='channels_first' is not supported; mixedcore's "
                         f"convolutions and pooling take channels-last inputs (batch, ..., "
                         f"channels): transpose the input and use 'channels_last'")
    raise ValueError(f"{owner}: data_format must be 'channels_last' or 'channels_first', got "
                     f"{data_format!r}")


def output_length(size, k, stride, dilation, padding):
    """Output positions along one dimension (None stays None)."""
    if size is None:
        return None
    if padding in ("same", "causal"):
        return -(-size // stride)
    span = (k - 1) * dilation + 1
    return max((size - span) // stride + 1, 0)


def _chunks(n, per_image):
    """Batch ranges whose im2col matrices hold at most _CHUNK_ELEMENTS (at least one image)."""
    step = max(1, _CHUNK_ELEMENTS // max(per_image, 1))
    for n0 in range(0, n, step):
        yield n0, min(n, n0 + step)


# -- the shared base -----------------------------------------------------------------------------

class _ConvBase(_Affine):
    """What the convolution layers share: geometry, the 4-D view, the activation's gradient."""

    _rank = 2
    _paddings: "tuple[str, ...]" = ("valid", "same")

    def _init_geometry(self, kernel_size, strides, padding, data_format, dilation_rate):
        owner = type(self).__name__
        self.kernel_size = _args.int_tuple(owner, "kernel_size", kernel_size, self._rank)
        self.strides = _args.int_tuple(owner, "strides", strides, self._rank)
        self.padding = normalize_padding(owner, padding, self._paddings)
        self.data_format = check_data_format(owner, data_format)
        self.dilation_rate = _args.int_tuple(owner, "dilation_rate", dilation_rate, self._rank)
        self._train_cache = None

    # geometry of the 4-D operation
    def _opts(self):
        """Keyword arguments of the kernels' geometry for the 4-D view."""
        if self._rank == 1:
            k, d = self.kernel_size[0], self.dilation_rate[0]
            padding = ((0, 0), ((k - 1) * d, 0)) if self.padding == "causal" else self.padding
            return {"strides": (1, self.strides[0]), "padding": padding,
                    "dilation_rate": (1, d)}
        return {"strides": self.strides, "padding": self.padding,
                "dilation_rate": self.dilation_rate}

    def _ksize4(self):
        return (1,) + self.kernel_size if self._rank == 1 else self.kernel_size

    def _to4(self, x):
        return x.reshape(x.shape[0], 1, x.shape[1], x.shape[2]) if self._rank == 1 else x

    def _from4(self, y):
        return y.reshape(y.shape[0], y.shape[2], y.shape[3]) if self._rank == 1 else y

    def _spatial_out(self, spatial):
        return tuple(output_length(s, k, st, d, self.padding) for s, k, st, d in
                     zip(spatial, self.kernel_size, self.strides, self.dilation_rate))

    def _check_rank(self, shape):
        if len(shape) != self._rank + 2 or shape[-1] is None:
            kind = "(batch, steps, channels)" if self._rank == 1 else \
                "(batch, height, width, channels)"
            raise ValueError(f"{type(self).__name__} '{self.name}': input must have shape {kind} "
                             f"with known channels, received {tuple(shape)}")
        if self.compute_dtype is not None and not is_floating(np.dtype(self._compute_np())):
            raise TypeError(f"{type(self).__name__} '{self.name}': compute dtype must be "
                            f"floating, got {self.compute_dtype}")

    def _check_window(self, shape):
        out = self._spatial_out(tuple(shape[1:-1]))
        if any(o is not None and o < 1 for o in out):
            raise ValueError(f"{type(self).__name__} '{self.name}': input of shape {tuple(shape)} "
                             f"is smaller than the kernel window {self.kernel_size} (dilation "
                             f"{self.dilation_rate}, padding {self.padding!r})")
        return out

    def check_input_shape(self, shape):
        channels = self.input_shape[-1]
        if len(shape) != self._rank + 2 or shape[-1] != channels:
            raise ValueError(f"{type(self).__name__} '{self.name}': expected input of shape "
                             f"{(None,) * (self._rank + 1) + (channels,)}, received "
                             f"{tuple(shape)}")
        self._check_window(shape)

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def _prepare(self, x):
        """x in the compute dtype, as a 4-D image; its spatial size checked."""
        cd = self._compute_np()
        if x.dtype != cd:
            x = to_compute(x, cd) if is_floating(x.dtype) else x.astype(cd)
        self._check_window(x.shape)
        return self._to4(x)

    def _dz(self, dy, z, y_work):
        """The pre-activation gradient in the work dtype."""
        dyw = to_compute(dy, z.dtype) if is_floating(dy.dtype) else dy.astype(z.dtype)
        if self.activation == "linear":
            return dyw
        return _activations.backward(self.activation, dyw, z, y_work)

    def _set_conv_gradients(self, dz, grads):
        """``self.gradients`` from the kernels' gradients ``grads`` and, with ``use_bias``, the
        bias's: the pre-activation gradient dz (N, OH, OW, F) summed in its dtype."""
        if self.use_bias:
            grads["bias"] = dz.sum(axis=(0, 1, 2), dtype=dz.dtype)
        self._set_gradients(grads)

    def _geometry_config(self):
        return {"kernel_size": self.kernel_size, "strides": self.strides,
                "padding": self.padding, "data_format": self.data_format,
                "dilation_rate": self.dilation_rate}


# -- products shared by the layers ---------------------------------------------------------------

def _conv_forward(x4, kernel4, bias, groups, opts, activation=None, out_dtype=None):
    """conv(x4, kernel4) + bias in the work dtype (float32; float64 for float64 x4), or with a
    fused activation and ``out_dtype`` when given (GEMM dtypes only).  kernel4 is an ndarray in
    x4's dtype or a PackedConv."""
    if dtype_name(x4.dtype) in _GEMM_DTYPES:
        return kernels.conv2d(x4, kernel4, groups=groups, bias=bias, activation=activation,
                              out_dtype=out_dtype, **opts)
    kh, kw, cg, f = kernel4.shape
    fg = f // groups
    outs = []
    for g in range(groups):
        cols = kernels.im2col(x4, (kh, kw), channels=(g * cg, (g + 1) * cg), **opts)
        outs.append(cols @ kernel4[..., g * fg:(g + 1) * fg].reshape(kh * kw * cg, fg))
    z = outs[0] if groups == 1 else np.concatenate(outs, axis=1)
    if bias is not None:
        z += bias
    oh, ow = _out_hw(x4.shape, (kh, kw), opts)
    return z.reshape(x4.shape[0], oh, ow, f)


def _out_hw(shape, ksize, opts):
    """(out_height, out_width) of a 4-D operation with the geometry keywords ``opts``."""
    pad = opts["padding"]
    out = []
    for d in range(2):
        size, k = shape[1 + d], ksize[d]
        s, dl = opts["strides"][d], opts["dilation_rate"][d]
        if isinstance(pad, str):
            out.append(output_length(size, k, s, dl, pad))
        else:
            out.append((size + pad[d][0] + pad[d][1] - (k - 1) * dl - 1) // s + 1)
    return tuple(out)


def _conv_backward(x4, kernel4, dz, groups, opts, need_input_grad):
    """(dkernel4 in the work dtype, dx4 in the work dtype or None) for dz (N, OH, OW, F) in the
    work dtype.  16-bit x4: the products take dz rounded to x4's dtype (as Dense does) and
    accumulate in float32."""
    kh, kw, cg, f = kernel4.shape
    fg = f // groups
    k = kh * kw * cg
    n = x4.shape[0]
    gemm = dtype_name(x4.dtype) in _GEMM_DTYPES
    work = dz.dtype
    dzc = to_compute(dz, x4.dtype) if gemm else dz
    per_image = dz.shape[1] * dz.shape[2] * k
    dk = np.zeros((k, f), dtype=work)
    dx = np.zeros(x4.shape, dtype=work) if need_input_grad else None
    kmats = [np.ascontiguousarray(kernel4[..., g * fg:(g + 1) * fg].reshape(k, fg))
             for g in range(groups)]
    for n0, n1 in _chunks(n, per_image):
        xs = x4[n0:n1]
        for g in range(groups):
            dzg = dzc[n0:n1, ..., g * fg:(g + 1) * fg].reshape(-1, fg)
            cols = kernels.im2col(xs, (kh, kw), channels=(g * cg, (g + 1) * cg), **opts)
            if gemm:
                dk[:, g * fg:(g + 1) * fg] += kernels.matmul(cols.T, dzg)
            else:
                dk[:, g * fg:(g + 1) * fg] += cols.T @ dzg
            if dx is None:
                continue
            dcols = kernels.matmul(dzg, kmats[g].T) if gemm else dzg @ kmats[g].T
            kernels.col2im(dcols, xs.shape, (kh, kw), channels=(g * cg, (g + 1) * cg),
                           out=dx[n0:n1], **opts)
    return dk.reshape(kh, kw, cg, f), dx


def _depthwise_forward(x4, kernel, bias, opts, activation=None, out_dtype=None):
    """Depthwise convolution: float32 (float64 for float64 x4) unless an activation and an
    out_dtype are fused."""
    return kernels.depthwise_conv2d(x4, kernel, bias=bias, activation=activation,
                                    out_dtype=out_dtype, **opts)


def _depthwise_backward(x4, kernel, dz, opts, need_input_grad):
    """(dkernel (kh, kw, C, mult), dx4 or None) in dz's dtype (float32 or float64)."""
    kh, kw, c, mult = kernel.shape
    work = dz.dtype
    taps = kh * kw
    kw_ = to_compute(kernel, work).reshape(taps, c, mult)
    n = x4.shape[0]
    dk = np.zeros((taps, c, mult), dtype=work)
    dx = np.zeros(x4.shape, dtype=work) if need_input_grad else None
    per_image = dz.shape[1] * dz.shape[2] * taps * c
    for n0, n1 in _chunks(n, per_image):
        xs = x4[n0:n1]
        cols = to_compute(kernels.im2col(xs, (kh, kw), **opts), work)
        m = cols.shape[0]
        cols = cols.reshape(m, taps, c)
        dzr = dz[n0:n1].reshape(m, c, mult)
        dk += np.einsum("ptc,pcm->tcm", cols, dzr)
        if dx is not None:
            dcols = np.einsum("pcm,tcm->ptc", dzr, kw_).reshape(m, taps * c)
            kernels.col2im(np.ascontiguousarray(dcols), xs.shape, (kh, kw), out=dx[n0:n1],
                           **opts)
    return dk.reshape(kh, kw, c, mult), dx


# -- Conv1D / Conv2D -------------------------------------------------------------------------------

class _Conv(_ConvBase):
    """The convolution layers' implementation (rank 1 or 2)."""

    kernel = Weight()

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.filters = _args.positive_int(owner, "filters", filters)
        self._init_geometry(kernel_size, strides, padding, data_format, dilation_rate)
        self.groups = _args.positive_int(owner, "groups", groups)
        if self.filters % self.groups:
            raise ValueError(f"{owner}: filters ({self.filters}) must be a multiple of groups "
                             f"({self.groups})")
        self._init_affine(owner, activation, use_bias, (kernel_initializer, bias_initializer),
                          (kernel_regularizer, bias_regularizer))

    def call_folded(self, x, norm, activation=None):
        """Inference of ``activation(norm(self(x)))`` in one convolution, for a linear
        convolution followed by an affine normalization over the filters (``norm`` offers
        ``inference_affine()``, float32 ``(scale, shift)``): the kernel's filters are scaled and
        the bias becomes ``bias * scale + shift`` in float32, packed once per weight version of
        both layers (docs/models.md, "Folding").  ``x`` is in a GEMM compute dtype."""
        x4 = self._prepare(x)
        y = self._infer(x4, *self._folded_operands(norm), activation or "linear", x4.dtype)
        return self._from4(y)

    def build(self, input_shape):
        self._check_rank(input_shape)
        c = int(input_shape[-1])
        if c % self.groups:
            raise ValueError(f"{type(self).__name__} '{self.name}': input channels ({c}) must be "
                             f"a multiple of groups ({self.groups})")
        self._check_window(input_shape)
        self._build_affine(self.kernel_size + (c // self.groups, self.filters),
                           bias_shape=(self.filters,))

    def compute_output_shape(self, input_shape):
        return (input_shape[0],) + self._spatial_out(tuple(input_shape[1:-1])) + (self.filters,)

    def _kernel4(self, kernel):
        return kernel.reshape((1,) + kernel.shape) if self._rank == 1 else kernel

    def depthwise_form(self):
        """Whether every group has one input channel (``groups`` == input channels, as
        ConvNeXt's 7x7 convolutions): the convolution is then a depthwise one and runs on the
        depthwise kernel, output channel ``g * (filters / groups) + m`` being its ``(g, m)``."""
        return self.groups > 1 and self.built and self.kernel.shape[-2] == 1

    def _depthwise_kernel(self, kernel4):
        kh, kw = kernel4.shape[:2]
        return kernel4.reshape(kh, kw, self.groups, self.filters // self.groups)

    def _pack(self, name, value, cd):
        """The kernel packed by ``kernels.pack_conv`` (as its 4-D view); in the depthwise form,
        the depthwise kernel rounded to the compute dtype."""
        if name != "kernel":
            return super()._pack(name, value, cd)
        if self.depthwise_form():
            return to_compute(self._depthwise_kernel(self._kernel4(value)), cd)
        return kernels.pack_conv(self._kernel4(value), self.groups, dtype=cd)

    def _inference_operands(self, kernel="kernel"):
        if not self.depthwise_form():
            return super()._inference_operands(kernel)
        bias = None
        if self.use_bias:
            bias = self._compute_weight("bias") if self._compute_np() == _F64 \
                else self._bias32("bias")
        return self._depthwise_kernel(self._kernel4(self._compute_weight(kernel))), bias

    def _product(self, x, kernel, bias, activation=None, out_dtype=None):
        if self.depthwise_form():
            if kernel.shape[-2] == 1:          # the layer's own kernel, not its depthwise view
                kernel = self._depthwise_kernel(self._kernel4(kernel))
            return _depthwise_forward(x, kernel, bias, self._opts(), activation=activation,
                                      out_dtype=out_dtype)
        return _conv_forward(x, kernel, bias, self.groups, self._opts(), activation=activation,
                             out_dtype=out_dtype)

    def call(self, inputs, training=False):
        x4 = self._prepare(inputs)
        cd = x4.dtype
        gemm = dtype_name(cd) in _GEMM_DTYPES
        if not training and gemm:
            return self._from4(self._infer(x4, *self._inference_operands(), self.activation,
                                           cd))
        kernel4 = self._kernel4(self._compute_weight("kernel"))
        bias = None
        if self.use_bias:
            bias = self._bias32("bias") if gemm else self._compute_weight("bias")
        z = self._product(x4, kernel4, bias)
        y, y_work = self._finish(z, cd)
        if training:
            self._train_cache = (x4, z, y_work, kernel4)
        return self._from4(y)

    def backward(self, dy, need_input_grad=True):
        x4, z, y_work, kernel4 = self._train_cache
        dz = self._dz(self._to4(dy), z, y_work)
        dk, dx = _conv_backward(x4, kernel4, dz, self.groups, self._opts(), need_input_grad)
        self._set_conv_gradients(dz, {"kernel": dk.reshape(self.kernel.shape)})
        if dx is None:
            return None
        return self._from4(to_compute(dx, x4.dtype))

    def get_config(self):
        config = super().get_config()
        config.update({"filters": self.filters})
        config.update(self._geometry_config())
        config["groups"] = self.groups
        config.update(self._affine_config())
        return config


class Conv2D(_Conv):
    """2-D convolution over channels-last images (``keras.layers.Conv2D``).

    Parameters
    ----------
    filters : int
    kernel_size, strides, dilation_rate : int or (int, int)
    padding : "valid" or "same" (Keras's split: the odd padding row / column after)
    data_format : None or "channels_last" ("channels_first" raises ValueError)
    groups : int
        Input channels and filters split into this many independent groups.
    activation : str or None
        Those of ``activations.FUSED`` are fused into the product; any other Keras name is
        applied to its float32 result; "linear"/None for none.
    use_bias : bool, default True
    kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer
        As Dense.
    **kwargs
        Layer arguments: name, dtype, trainable, autocast, input_shape.

    Notes
    -----
    Weights as Keras stores them: kernel (kh, kw, in_channels / groups, filters), bias
    (filters,).  Under a 16-bit compute policy the product takes the 16-bit input and kernel,
    accumulates in float32 and rounds once to the compute dtype after bias and activation.
    """

    _rank = 2


class Conv1D(_Conv):
    """1-D convolution over sequences (``keras.layers.Conv1D``): inputs (batch, steps,
    channels), kernel (kernel_size, in_channels / groups, filters), bias (filters,).

    ``padding`` is "valid", "same" or "causal" (``(kernel_size - 1) * dilation_rate`` zeros
    before the first step, none after: output t sees inputs up to t).  Otherwise as Conv2D; it
    runs as a Conv2D with height 1.
    """

    _rank = 1
    _paddings = ("valid", "same", "causal")


# -- DepthwiseConv2D -------------------------------------------------------------------------------

class DepthwiseConv2D(_ConvBase):
    """Depthwise 2-D convolution (``keras.layers.DepthwiseConv2D``): every input channel is
    convolved with its own ``depth_multiplier`` filters; output channel ``c * depth_multiplier
    + m``.

    Weights: kernel (kh, kw, in_channels, depth_multiplier), bias (in_channels *
    depth_multiplier,).  It sums in float32 (float64 under float64) on ``kernels.depthwise_conv2d``
    and fuses bias, activation and the rounding to the compute dtype.
    """

    _KERNELS = (("kernel", "depthwise"),)
    kernel = Weight()

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1,
                 data_format=None, dilation_rate=(1, 1), activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", bias_initializer="zeros",
                 depthwise_regularizer=None, bias_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self._init_geometry(kernel_size, strides, padding, data_format, dilation_rate)
        self.depth_multiplier = _args.positive_int(owner, "depth_multiplier", depth_multiplier)
        self._init_affine(owner, activation, use_bias, (depthwise_initializer, bias_initializer),
                          (depthwise_regularizer, bias_regularizer))

    def build(self, input_shape):
        self._check_rank(input_shape)
        self._check_window(input_shape)
        c = int(input_shape[-1])
        self._build_affine(self.kernel_size + (c, self.depth_multiplier),
                           bias_shape=(c * self.depth_multiplier,))

    def compute_output_shape(self, input_shape):
        return ((input_shape[0],) + self._spatial_out(tuple(input_shape[1:-1])) +
                (input_shape[-1] * self.depth_multiplier,))

    def _product(self, x, kernel, bias, activation=None, out_dtype=None):
        return _depthwise_forward(x, kernel, bias, self._opts(), activation=activation,
                                  out_dtype=out_dtype)

    def _kernel_scale_shape(self):
        # output channel c * depth_multiplier + m is kernel[:, :, c, m]
        return (-1, self.depth_multiplier)

    def _pack(self, name, value, cd):
        """The depthwise kernel is not packed: it is rounded to the compute dtype (the product
        takes it as float32 values)."""
        return to_compute(value, cd)

    def _inference_operands(self, kernel="kernel"):
        bias = None
        if self.use_bias:
            bias = self._compute_weight("bias") if self._compute_np() == _F64 \
                else self._bias32("bias")
        return self._compute_weight(kernel), bias

    def call_folded(self, x, norm, activation=None):
        """Inference of ``activation(norm(self(x)))`` in one pass, as ``Conv2D.call_folded``:
        the kernel scaled per output channel and rounded to the compute dtype, the bias
        ``bias * scale + shift`` in float32 (docs/models.md, "Folding")."""
        x4 = self._prepare(x)
        return self._infer(x4, *self._folded_operands(norm), activation or "linear", x4.dtype)

    def call(self, inputs, training=False):
        x4 = self._prepare(inputs)
        cd = x4.dtype
        kernel, bias = self._inference_operands()
        f64 = cd == _F64
        if not training and not f64:
            return self._infer(x4, kernel, bias, self.activation, cd)
        z = self._product(x4, kernel, bias)
        y, y_work = self._finish(z, cd)
        if training:
            self._train_cache = (x4, z, y_work, kernel)
        return y

    def backward(self, dy, need_input_grad=True):
        x4, z, y_work, kernel = self._train_cache
        dz = self._dz(dy, z, y_work)
        dk, dx = _depthwise_backward(x4, kernel, dz, self._opts(), need_input_grad)
        self._set_conv_gradients(dz, {"kernel": dk})
        return None if dx is None else to_compute(dx, x4.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"depth_multiplier": self.depth_multiplier})
        config.update(self._geometry_config())
        config.update(self._affine_config())
        return config


# -- SeparableConv2D -------------------------------------------------------------------------------

class SeparableConv2D(_ConvBase):
    """Depthwise then pointwise convolution (``keras.layers.SeparableConv2D``).

    Weights, in Keras's order: depthwise_kernel (kh, kw, in_channels, depth_multiplier),
    pointwise_kernel (1, 1, in_channels * depth_multiplier, filters), bias (filters,).  The
    depthwise result is rounded to the compute dtype; the pointwise product runs on the GEMM with
    the packed pointwise kernel, bias and activation fused.
    """

    _KERNELS = (("depthwise_kernel", "depthwise"), ("pointwise_kernel", "pointwise"))
    depthwise_kernel = Weight()
    pointwise_kernel = Weight()

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), depth_multiplier=1, activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", pointwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None,
                 pointwise_regularizer=None, bias_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.filters = _args.positive_int(owner, "filters", filters)
        self._init_geometry(kernel_size, strides, padding, data_format, dilation_rate)
        self.depth_multiplier = _args.positive_int(owner, "depth_multiplier", depth_multiplier)
        self._init_affine(owner, activation, use_bias,
                          (depthwise_initializer, pointwise_initializer, bias_initializer),
                          (depthwise_regularizer, pointwise_regularizer, bias_regularizer))

    def build(self, input_shape):
        self._check_rank(input_shape)
        self._check_window(input_shape)
        c = int(input_shape[-1])
        cm = c * self.depth_multiplier
        self._build_affine(self.kernel_size + (c, self.depth_multiplier),
                           (1, 1, cm, self.filters), bias_shape=(self.filters,))

    def compute_output_shape(self, input_shape):
        return (input_shape[0],) + self._spatial_out(tuple(input_shape[1:-1])) + (self.filters,)

    def _pack(self, name, value, cd):
        """The pointwise kernel packed by ``kernels.pack_conv``."""
        if name != "pointwise_kernel":
            return super()._pack(name, value, cd)
        return kernels.pack_conv(value, 1, dtype=cd)

    _POINTWISE = {"strides": (1, 1), "padding": "valid", "dilation_rate": (1, 1)}

    def _product(self, x, kernel, bias, activation=None, out_dtype=None):
        """The pointwise product of the depthwise result ``x``."""
        return _conv_forward(x, kernel, bias, 1, self._POINTWISE, activation=activation,
                             out_dtype=out_dtype)

    def call(self, inputs, training=False):
        x4 = self._prepare(inputs)
        cd = x4.dtype
        opts = self._opts()
        dkernel = self._compute_weight("depthwise_kernel")
        f64 = cd == _F64
        sixteen = cd.itemsize == 2
        h = _depthwise_forward(x4, dkernel, None, opts,
                               out_dtype=dtype_name(cd) if sixteen else None)
        gemm = not f64
        if not training and gemm:
            return self._infer(h, *self._inference_operands("pointwise_kernel"),
                               self.activation, cd)
        pkernel = self._compute_weight("pointwise_kernel")
        bias = None
        if self.use_bias:
            bias = self._bias32("bias") if gemm else self._compute_weight("bias")
        z = self._product(h, pkernel, bias)
        y, y_work = self._finish(z, cd)
        if training:
            self._train_cache = (x4, h, z, y_work, dkernel, pkernel)
        return y

    def backward(self, dy, need_input_grad=True):
        x4, h, z, y_work, dkernel, pkernel = self._train_cache
        dz = self._dz(dy, z, y_work)
        dpk, dh = _conv_backward(h, pkernel, dz, 1, self._POINTWISE, True)
        if dh.dtype != dz.dtype:
            dh = to_compute(dh, dz.dtype)
        if h.dtype.itemsize == 2:       # the depthwise result was rounded to the compute dtype
            dh = to_compute(to_compute(dh, h.dtype), dh.dtype)
        ddk, dx = _depthwise_backward(x4, dkernel, dh, self._opts(), need_input_grad)
        self._set_conv_gradients(dz, {"depthwise_kernel": ddk, "pointwise_kernel": dpk})
        return None if dx is None else to_compute(dx, x4.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"depth_multiplier": self.depth_multiplier, "filters": self.filters})
        config.update(self._geometry_config())
        config.update(self._affine_config())
        return config
