"""What Dense and the convolutions share: ``activation(x (*) kernel + bias)``, where ``(*)`` is
the layer's product (a GEMM, a convolution, a depthwise convolution).

Design:
  A. Weights by Keras's names: the kernel(s) of ``_KERNELS`` (each with the weight's name and
     the prefix of its ``*_initializer`` / ``*_regularizer`` arguments: "kernel", or
     "depthwise" / "pointwise"), then ``bias`` when ``use_bias``, in that order, as Keras makes
     them.  The layer reads them as attributes (``self.kernel``, ``self.bias``: ``Weight``).
  B. Inference makes one call of the product (``_product``) on the kernel packed once per weight
     version in the compute dtype (``packed_weight``, the layer's ``_pack``) and the bias rounded
     to the compute dtype and held in float32 (``_bias32``), with the activation and the one
     rounding to the compute dtype fused in for ``activations.FUSED`` and linear; the other
     activations are applied to the product's float32 result, rounded once (``_infer``).
  C. Folding (docs/models.md, "Folding"): an affine normalization after a linear layer becomes
     the kernel scaled over its last axis and ``bias * scale + shift``, packed once per weight
     version of both layers (``_folded_operands``), run through the same ``_infer``.
  D. Training: the layer forms the pre-activation ``z`` in the work dtype from its compute-dtype
     weights (the same product and bits as inference); ``_finish`` applies the activation and
     rounds once.
"""
import numpy as np

from mixedcore import activations as _activations
from mixedcore import initializers as _initializers
from mixedcore import regularizers as _regularizers
from mixedcore._dtypes import dtype_name, to_compute
from mixedcore.layers._base import Layer, Weight

_F32 = np.dtype(np.float32)


class _Affine(Layer):
    """Base of Dense and the convolution layers (design notes in the module docstring)."""

    # (weight name, argument prefix) of each kernel, in creation order
    _KERNELS: "tuple[tuple[str, str], ...]" = (("kernel", "kernel"),)
    bias = Weight()

    def _init_affine(self, owner, activation, use_bias, initializers, regularizers):
        """Check and keep the arguments shared by these layers: ``initializers`` and
        ``regularizers`` hold one value per kernel of ``_KERNELS``, then the bias's."""
        self.activation = _activations.resolve(owner, activation)
        self.use_bias = bool(use_bias)
        prefixes = self._prefixes()
        for prefix, value in zip(prefixes, initializers):
            setattr(self, f"{prefix}_initializer", _initializers.check(owner, value))
        for prefix, value in zip(prefixes, regularizers):
            setattr(self, f"{prefix}_regularizer", _regularizers.get(value))
        self._folded = None

    def _prefixes(self):
        return [prefix for _, prefix in self._KERNELS] + ["bias"]

    def _build_affine(self, *kernel_shapes, bias_shape):
        """Create the kernels (one shape each, in ``_KERNELS`` order) and, with ``use_bias``,
        the bias."""
        for (name, prefix), shape in zip(self._KERNELS, kernel_shapes):
            self.add_weight(name, shape, getattr(self, f"{prefix}_initializer"),
                            getattr(self, f"{prefix}_regularizer"))
        if self.use_bias:
            self.add_weight("bias", bias_shape, self.bias_initializer, self.bias_regularizer)

    def _affine_config(self, constraints=True):
        """The config keys of activation, bias and kernel arguments, in Keras's order; with
        ``constraints`` also the off values of the activity regularizer and the constraints."""
        prefixes = self._prefixes()
        config = {"activation": self.activation, "use_bias": self.use_bias}
        for prefix in prefixes:
            config[f"{prefix}_initializer"] = _initializers.serialize(
                getattr(self, f"{prefix}_initializer"))
        for prefix in prefixes:
            config[f"{prefix}_regularizer"] = _regularizers.serialize(
                getattr(self, f"{prefix}_regularizer"))
        if constraints:
            config["activity_regularizer"] = None
            config.update({f"{prefix}_constraint": None for prefix in prefixes})
        return config

    # -- products --------------------------------------------------------------------------------
    def _product(self, x, kernel, bias, activation=None, out_dtype=None):
        """``x (*) kernel + bias``: the float32 result (float64 for float64 operands), or with
        ``activation`` and the rounding to ``out_dtype`` fused (GEMM dtypes only)."""
        raise NotImplementedError

    def _inference_operands(self, kernel="kernel"):
        """The kernel ``kernel`` packed for inference and the float32 bias (None without)."""
        return self.packed_weight(kernel), self._bias32("bias") if self.use_bias else None

    def _infer(self, x, kernel, bias, activation, cd):
        """``activation(x (*) kernel + bias)`` rounded once to ``cd``: in the product's
        epilogue for the fused activations and linear, else applied to its float32 result."""
        if activation in _activations.FUSED or activation == "linear":
            out = dtype_name(cd) if cd.itemsize == 2 else None
            return self._product(x, kernel, bias, None if activation == "linear" else activation,
                                 out)
        z = self._product(x, kernel, bias)
        return _activations.forward_to(activation, z, cd)

    def _folded_operands(self, norm):
        """The operands with the affine normalization ``norm`` after the layer folded in, for
        inference: ``(kernel * scale packed as _pack packs it, bias * scale + shift)``, the
        products and the bias in float32, ``(scale, shift) = norm.inference_affine()`` over the
        last axis of the kernel.  Cached per weight version of both layers and per compute
        dtype.  ``norm`` None: the layer's own operands (``_inference_operands``)."""
        if norm is None:
            return self._inference_operands()
        cd = self._compute_np()
        key = (self._version, cd, id(norm), norm._version)
        entry = self._folded
        if entry is None or entry[0] != key or getattr(entry[1], "stale", False):
            scale, shift = norm.inference_affine()
            bias = shift if not self.use_bias else to_compute(self.bias, _F32) * scale + shift
            kernel = to_compute(self._weight("kernel"), _F32) * scale.reshape(
                self._kernel_scale_shape())
            entry = (key, self._pack("kernel", kernel, cd),
                     np.ascontiguousarray(bias, dtype=_F32))
            self._folded = entry
        return entry[1], entry[2]

    def _kernel_scale_shape(self):
        """The shape a per-output-channel scale takes to multiply the kernel (its last axis)."""
        return (-1,)

    def _finish(self, z, cd):
        """y from the pre-activation z (work dtype), the activation rounded once to the compute
        dtype as inference rounds it, and the activation in the work dtype when the gradient
        needs it (softmax's), else None."""
        if self.activation in ("softmax", "log_softmax"):
            y_work = _activations.forward(self.activation, z)
            return to_compute(y_work, cd), y_work
        return _activations.forward_to(self.activation, z, cd), None
