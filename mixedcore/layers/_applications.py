"""Layers that ``keras.applications`` models define for themselves and record in their files:
ConvNeXt's LayerScale and InceptionResNetV2's CustomScaleLayer.  They are registered under the
names Keras gives them, so the application files load without ``custom_objects``.
"""

from mixedcore import initializers
from mixedcore._dtypes import to_compute, work_dtype
from mixedcore.layers import _args
from mixedcore.layers._base import Layer, Weight

__all__ = ["LayerScale", "CustomScaleLayer"]


class LayerScale(Layer):
    """ConvNeXt's per-channel scale: ``x * gamma`` with a learned ``gamma`` of
    ``projection_dim`` values (initialised to ``init_values``), along the last axis."""

    _keras_module = "keras.src.applications.convnext"
    supports_masking = True
    gamma = Weight()

    def __init__(self, init_values, projection_dim, **kwargs):
        super().__init__(**kwargs)
        self.init_values = _args.number("LayerScale", "init_values", init_values)
        self.projection_dim = _args.positive_int("LayerScale", "projection_dim", projection_dim)
        self._train_cache = None

    def build(self, input_shape):
        if not input_shape or input_shape[-1] != self.projection_dim:
            raise ValueError(f"LayerScale '{self.name}': inputs must have {self.projection_dim} "
                             f"channels (projection_dim), got shape {tuple(input_shape)}")
        self.add_weight("gamma", (self.projection_dim,),
                        initializers.Initializer("constant", {"value": self.init_values}))

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def call(self, inputs, training=False):
        cd = self._compute_np()
        w = work_dtype(cd)
        gamma = to_compute(self._compute_weight("gamma"), w)
        xw = to_compute(inputs, w)
        self._train_cache = (xw, gamma) if training else None
        return to_compute(xw * gamma, cd)

    def backward(self, dy, need_input_grad=True):
        xw, gamma = self._train_cache
        dyw = to_compute(dy, xw.dtype)
        grad = (dyw * xw).reshape(-1, gamma.shape[0]).sum(axis=0)
        self._set_gradients({"gamma": grad})
        return to_compute(dyw * gamma, dy.dtype) if need_input_grad else None

    def get_config(self):
        config = super().get_config()
        config.update({"init_values": self.init_values, "projection_dim": self.projection_dim})
        return config


class CustomScaleLayer(Layer):
    """InceptionResNetV2's residual sum: ``inputs[0] + inputs[1] * scale``."""

    _keras_module = "keras.src.applications.inception_resnet_v2"

    def __init__(self, scale, **kwargs):
        super().__init__(**kwargs)
        self.scale = _args.number("CustomScaleLayer", "scale", scale)
        self._train_cache = None

    def _check(self, shapes):
        if not isinstance(shapes, (list, tuple)) or len(shapes) != 2 or \
                tuple(shapes[0]) != tuple(shapes[1]):
            raise ValueError(f"CustomScaleLayer '{self.name}': takes a list of two inputs of "
                             f"one shape, got shapes {shapes!r}")

    def build(self, input_shape):
        self._check(input_shape)

    def check_input_shape(self, shape):
        self._check(shape)

    def compute_output_shape(self, input_shape):
        self._check(input_shape)
        return tuple(input_shape[0])

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def call(self, inputs, training=False):
        cd = self._compute_np()
        w = work_dtype(cd)
        a, b = (to_compute(to_compute(x, cd), w) for x in inputs)
        # Keras multiplies in the compute dtype, then adds: two roundings
        prod = to_compute(to_compute(b * w.type(self.scale), cd), w)
        self._train_cache = (w, cd) if training else None
        return to_compute(a + prod, cd)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        if not need_input_grad:
            return None
        w, _ = self._train_cache
        dyw = to_compute(dy, w)
        return [dy, to_compute(dyw * w.type(self.scale), dy.dtype)]

    def get_config(self):
        config = super().get_config()
        config["scale"] = self.scale
        return config
