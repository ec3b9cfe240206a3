"""Input, Dense and Embedding."""
import numpy as np

from mixedcore import activations as _activations
from mixedcore import initializers as _initializers
from mixedcore import kernels
from mixedcore import quantizers as _quantizers
from mixedcore import regularizers as _regularizers
from mixedcore._dtypes import (as_numeric_array, dtype_name, is_floating, np_dtype, to_compute,
                               work_dtype)
from mixedcore.layers import _args, _node
from mixedcore.saving import object_registration as _registry
from mixedcore.layers._affine import _Affine
from mixedcore.layers._base import Layer, Weight
from mixedcore.layers._quantized import QuantizedDense, QuantizedEmbedding

_GEMM_DTYPES = ("float16", "bfloat16", "float32")


def _check_positive_int(owner, what, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}: {what} must be a positive int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{owner}: {what} must be a positive int, got {value}")
    return int(value)


class InputLayer(Layer):
    """The entry of a model: fixes the shape (and dtype) of one sample.

    Parameters
    ----------
    shape : tuple of int or None
        The shape of one sample, without the batch dimension (None for a free dimension).
    batch_size : int, optional
        A fixed batch size (None accepts any).
    dtype : str, optional
        The dtype of the input, "float32" by default (floating inputs are cast to each layer's
        compute dtype when the layer is called).

    Its ``output`` is the KerasTensor that :func:`Input` returns.
    """

    def __init__(self, shape=None, batch_size=None, name=None, dtype=None, input_shape=None,
                 batch_shape=None, sparse=None, ragged=None, optional=False,
                 batch_input_shape=None, **kwargs):
        if sparse or ragged or optional:
            raise ValueError(f"InputLayer: sparse, ragged and optional inputs are not supported "
                             f"(sparse={sparse}, ragged={ragged}, optional={optional})")
        if batch_input_shape is not None and batch_shape is None:   # tf.keras 2.x configs
            batch_shape = batch_input_shape
        if batch_shape is not None:
            if shape is not None or batch_size is not None:
                raise ValueError("InputLayer: give either batch_shape or shape (and batch_size),"
                                 f" not both; got batch_shape={batch_shape}, shape={shape}")
            batch_shape = tuple(batch_shape)
            if not batch_shape:
                raise ValueError("InputLayer: batch_shape needs at least the batch dimension")
            batch_size, shape = batch_shape[0], batch_shape[1:]
        if shape is None:
            shape = input_shape
        if shape is None:
            raise ValueError("InputLayer: a shape is required, e.g. Input(shape=(784,))")
        if isinstance(shape, (int, np.integer)):
            shape = (int(shape),)
        if not isinstance(shape, (tuple, list)):
            raise TypeError(f"InputLayer: shape must be a tuple of int or None, got {shape!r}")
        shape = tuple(None if d is None else _check_positive_int("InputLayer", "shape entry", d)
                      for d in shape)
        if batch_size is not None:
            batch_size = _check_positive_int("InputLayer", "batch_size", batch_size)
        self._dtype_given = dtype is not None
        if dtype is None:
            dtype = "float32"
        if not _is_dtype_name(dtype):
            raise ValueError(f"InputLayer: dtype must name a dtype ('float32', 'bfloat16', "
                             f"'int32', ...), got {dtype!r}")
        super().__init__(name=name, autocast=False, **kwargs)
        input_dtype = dtype_name(np_dtype(dtype))
        self.shape = shape
        self.batch_size = batch_size
        self.input_shape = (batch_size,) + shape
        self.output_shape = self.input_shape
        self.input_dtype = input_dtype
        self.built = True
        tensor = _node.KerasTensor(self.input_shape, input_dtype, name=self.name)
        _node.Node(self, (), {}, tensor)

    @property
    def batch_shape(self):
        return self.input_shape

    def __call__(self, inputs, training=False):
        x = as_numeric_array(f"InputLayer '{self.name}'", inputs)
        self.check_input_shape(x.shape)
        return x

    def check_input_shape(self, shape):
        expected = self.input_shape
        if len(shape) != len(expected) or any(e is not None and e != s
                                               for e, s in zip(expected, shape)):
            raise ValueError(f"InputLayer '{self.name}': expected input of shape {expected}, "
                             f"received {tuple(shape)}")

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        return dy

    def get_config(self):
        return {"name": self.name, "batch_shape": self.input_shape, "dtype": self.input_dtype,
                "sparse": False, "ragged": False}


def _is_dtype_name(name):
    if not isinstance(name, str):
        return False
    if name == "bfloat16":
        return True
    try:
        np.dtype(name)
    except TypeError:
        return False
    return True


def Input(shape=None, batch_size=None, dtype=None, name=None, batch_shape=None, sparse=None,
          ragged=None, tensor=None, optional=False):
    """``keras.Input``: a symbolic tensor (KerasTensor) to start a functional model from (or to
    put first in a Sequential model)."""
    if tensor is not None or optional:
        raise ValueError("Input: tensor= and optional=True are not supported")
    layer = InputLayer(shape=shape, batch_size=batch_size, name=name, dtype=dtype,
                       batch_shape=batch_shape, sparse=sparse, ragged=ragged)
    return layer.output


class Dense(QuantizedDense, _Affine):
    """Densely connected layer: ``activation(inputs @ kernel + bias)`` (``keras.layers.Dense``).

    Parameters
    ----------
    units : int
        Output features.
    activation : str, function or None
        Any name of ``mixedcore.activations`` (Keras's): those of ``activations.FUSED`` (relu,
        relu6, gelu, sigmoid, tanh, silu, hard_sigmoid, hard_silu) are fused into the GEMM's
        epilogue; the others are applied to the float32 result of the GEMM
        and rounded once to the compute dtype.  None or "linear" for none.
    use_bias : bool, default True
    kernel_initializer, bias_initializer : str or callable(shape, dtype)
    kernel_regularizer, bias_regularizer : None, "l1", "l2", "l1_l2" or a regularizer
    **kwargs
        Layer arguments: name, dtype, trainable, autocast, input_shape.

    Notes
    -----
    The kernel has shape (in, out) and the bias (out,), in that order, exactly as Keras stores
    them.  Under a 16-bit compute policy the GEMM takes the 16-bit inputs and kernel, accumulates
    in float32 and rounds once to the compute dtype after the bias and activation.
    """

    supports_masking = True
    kernel = Weight()

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, quantization_config=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.units = _check_positive_int("Dense", "units", units)
        self._init_affine("Dense", activation, use_bias, (kernel_initializer, bias_initializer),
                          (kernel_regularizer, bias_regularizer))
        self._init_quantization("Dense", quantization_config)
        self._train_cache = None

    def build(self, input_shape):
        if len(input_shape) < 2 or input_shape[-1] is None:
            raise ValueError(f"Dense '{self.name}': input must have shape (batch, ..., features) "
                             f"with known features, received {tuple(input_shape)}")
        if self.compute_dtype is not None and not is_floating(np_dtype(self.compute_dtype)):
            raise TypeError(f"Dense '{self.name}': compute dtype must be floating, got "
                            f"{self.compute_dtype}")
        shape = (int(input_shape[-1]), self.units)
        if self.quantization_mode is None:
            self._build_affine(shape, bias_shape=(self.units,))
            return
        # Keras's order: the quantized weights (float8: its scales, then the kernel), the bias
        self._build_quantized(shape)
        if self.use_bias:
            self.add_weight("bias", (self.units,), self.bias_initializer, self.bias_regularizer)

    def check_input_shape(self, shape):
        # GPTQ and AWQ kernels are stored transposed (units, features)
        features = self.kernel.shape[1 if self.quantization_mode in ("gptq", "awq") else 0]
        if len(shape) < 2 or shape[-1] != features:
            raise ValueError(f"Dense '{self.name}': expected input of shape "
                             f"(batch, ..., {features}), received {tuple(shape)}")

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def _gemm_ok(self, x):
        return dtype_name(x.dtype) in _GEMM_DTYPES

    def _product(self, x, kernel, bias, activation=None, out_dtype=None):
        return kernels.matmul(x, kernel, bias=bias, activation=activation, out_dtype=out_dtype)

    def call(self, inputs, training=False):
        x = inputs
        if not is_floating(x.dtype):
            x = x.astype(self._compute_np())
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])
        cd = x.dtype
        if self.quantization_mode is not None:
            return self._call_quantized(x2, lead, cd, training)
        if not training and self._gemm_ok(x):
            y = self._infer(x2, *self._inference_operands(), self.activation, cd)
            return y.reshape(lead + (self.units,))
        kernel = self._compute_weight("kernel")
        bias = self._compute_weight("bias") if self.use_bias else None
        z = self._affine(x2, kernel, bias)
        y, y_work = self._finish(z, cd)
        if training:
            self._train_cache = (x2, z, y_work, lead, kernel)
        return y.reshape(lead + (self.units,))

    def _affine(self, x2, kernel, bias):
        """z = x2 @ kernel + bias in the work dtype (float32, or float64 under float64).

        Whenever the inference path of ``call`` would use the GEMM, this uses the same GEMM (the
        float32 result the fused epilogue starts from), so training and inference agree bit for
        bit."""
        if self._gemm_ok(x2) and self._gemm_ok(kernel):
            return kernels.matmul(x2, kernel, bias=bias)
        w = work_dtype(x2.dtype)
        z = to_compute(x2, w) @ to_compute(kernel, w)
        if bias is not None:
            z += to_compute(bias, w)
        return z

    def call_folded(self, x, norm, activation=None):
        """Inference of ``activation(norm(self(x)))`` in one product, for a linear Dense followed
        by an affine normalization ``norm`` (a layer whose ``inference_affine()`` gives float32
        ``(scale, shift)`` over the units): the kernel's columns are scaled and the bias becomes
        ``bias * scale + shift`` in float32, packed once per weight version of both layers.
        ``x`` is already in the compute dtype, a GEMM dtype (float16, bfloat16, float32); the
        result is in the compute dtype."""
        lead = x.shape[:-1]
        y = self._infer(x.reshape(-1, x.shape[-1]), *self._folded_operands(norm),
                        activation or "linear", self._compute_np())
        return y.reshape(lead + (self.units,))

    def logits(self):
        """Pre-softmax values of the last training call (work dtype), when activation="softmax"."""
        if self.activation != "softmax" or self._train_cache is None:
            return None
        return self._train_cache[1]

    def _call_quantized(self, x2, lead, cd, training):
        if cd.name not in _GEMM_DTYPES:
            raise TypeError(f"Dense '{self.name}': a quantized layer computes in float32, "
                            f"bfloat16 or float16, not {cd.name}")
        if not training:
            return self._quantized_call(x2).reshape(lead + (self.units,))
        if self.quantization_mode == "float8":
            raise ValueError(f"Dense '{self.name}': float8 layers are inference-only in "
                             f"mixedcore (float8 training's scale updates are not implemented)")
        kernel = to_compute(self.dequantized_kernel(), cd)
        bias = self._compute_weight("bias") if self.use_bias else None
        z = self._affine(x2, kernel, bias)
        y, y_work = self._finish(z, cd)
        self._train_cache = (x2, z, y_work, lead, kernel)
        return y.reshape(lead + (self.units,))

    def backward(self, dy, need_input_grad=True):
        x2, z, y_work, lead, kernel = self._train_cache
        dy2 = dy.reshape(-1, self.units)
        if self.activation == "linear":
            dz = to_compute(dy2, x2.dtype)
        else:
            dyw = to_compute(dy2, z.dtype)
            dz = to_compute(_activations.backward(self.activation, dyw, z, y_work), x2.dtype)
        return self._backward_affine(dz, lead, need_input_grad)

    def backward_from_logits(self, dlogits, need_input_grad=True):
        """Backward when the loss was taken from :meth:`logits` (softmax + crossentropy fused)."""
        x2, z, y_work, lead, kernel = self._train_cache
        dz = to_compute(dlogits.reshape(-1, self.units), x2.dtype)
        return self._backward_affine(dz, lead, need_input_grad)

    def _backward_affine(self, dz, lead, need_input_grad):
        x2, z, y_work, _, kernel = self._train_cache
        if self._gemm_ok(x2):
            # fp32-accumulating GEMMs on transposed views: the kernel packs them, no copies here.
            dk = kernels.matmul(x2.T, dz)
            dx = None
            if need_input_grad:
                sixteen = x2.dtype.itemsize == 2
                dx = kernels.matmul(dz, kernel.T, out_dtype=dtype_name(x2.dtype) if sixteen
                                    else None)
        else:
            w = work_dtype(x2.dtype)
            dzw = to_compute(dz, w)
            dk = to_compute(x2, w).T @ dzw
            dx = dzw @ to_compute(kernel, w).T if need_input_grad else None
            if dx is not None:
                dx = to_compute(dx, x2.dtype)
        grads = {"kernel": dk} if self.quantization_mode is None else {}
        if self.use_bias:
            grads["bias"] = to_compute(dz, work_dtype(dz.dtype)).sum(axis=0)
        self._set_gradients(grads)
        if dx is None:
            return None
        return dx.reshape(lead + (x2.shape[1],))

    def get_config(self):
        config = super().get_config()
        config["units"] = self.units
        config.update(self._affine_config(constraints=False))
        config["quantization_config"] = _quantizers.serialize(self.quantization_config)
        return config


class Embedding(QuantizedEmbedding):
    """Turns integer indices into dense vectors (``keras.layers.Embedding``).

    Parameters
    ----------
    input_dim : int
        Size of the vocabulary: indices run from 0 to ``input_dim - 1``.
    output_dim : int
        Size of each vector.
    embeddings_initializer : str, dict or callable, default "uniform"
        Keras's default: uniform in [-0.05, 0.05].
    embeddings_regularizer : optional
    mask_zero : bool, default False
        Whether index 0 is padding: :meth:`compute_mask` then returns ``inputs != 0``.
    weights : array or [array], optional
        Initial table, (input_dim, output_dim).

    Notes
    -----
    Integer inputs are used as they are (never cast); a float input is truncated toward zero as
    Keras's cast to int32 does (NaN or an infinity is a ValueError), a bool input counts as 0 / 1.
    An index outside [0, input_dim) is a ValueError naming it (Keras's backends either fail or, on
    some devices, return zeros).  The output is the table in the compute dtype (cast once per weight
    version, like every layer's weights), shape ``inputs.shape + (output_dim,)``.  The table's
    gradient accumulates the rows of the output gradient in float32 (float64 under float64) with
    ``np.add.at``; there is no input gradient.  ``embeddings_constraint``, an activity regularizer
    and LoRA are not supported (the None values Keras's configs hold are accepted).
    ``quantize("int8")`` / ``quantize("int4")`` quantize the table as Keras does
    (docs/quantization.md); a quantized table is frozen.
    """

    embeddings = Weight()

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform",
                 embeddings_regularizer=None, embeddings_constraint=None, mask_zero=False,
                 weights=None, **kwargs):
        owner = "Embedding"
        _args.keras_only(owner, {"embeddings_constraint": embeddings_constraint},
                         {"embeddings_constraint": None})
        _args.keras_only(owner, kwargs, {"activity_regularizer": None, "lora_rank": None,
                                         "lora_alpha": None})
        quantization_config = kwargs.pop("quantization_config", None)
        kwargs.pop("input_length", None)       # deprecated in Keras 3, ignored there too
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.input_dim = _check_positive_int(owner, "input_dim", input_dim)
        self.output_dim = _check_positive_int(owner, "output_dim", output_dim)
        self.embeddings_initializer = _initializers.check(owner, embeddings_initializer)
        self.embeddings_regularizer = _regularizers.get(embeddings_regularizer)
        self.mask_zero = _args.boolean(owner, "mask_zero", mask_zero)
        self._init_quantization(owner, quantization_config)
        self._train_cache = None
        if weights is not None:
            self.build_from_shape((None,))
            self.set_weights(weights if isinstance(weights, (list, tuple)) else [weights])

    def build(self, input_shape=None):
        if self.compute_dtype is not None and not is_floating(np_dtype(self.compute_dtype)):
            raise TypeError(f"Embedding '{self.name}': compute dtype must be floating, got "
                            f"{self.compute_dtype}")
        if self.quantization_mode is not None:
            if not self._names:
                self._build_quantized((self.input_dim, self.output_dim))
        elif self.embeddings is None:
            self.add_weight("embeddings", (self.input_dim, self.output_dim),
                            self.embeddings_initializer, self.embeddings_regularizer)

    def check_input_shape(self, shape):
        """Any shape: every element is an index."""

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.output_dim,)

    def compute_output_dtype(self, input_dtype):
        return self.compute_dtype

    def compute_mask(self, inputs, mask=None):
        """``inputs != 0`` when ``mask_zero``, else None."""
        if not self.mask_zero:
            return None
        return np.not_equal(np.asarray(inputs), 0)

    def _indices(self, inputs):
        owner = f"Embedding '{self.name}'"
        x = inputs
        if x.dtype == np.bool_:
            x = x.astype(np.int64)
        elif is_floating(x.dtype):
            # Keras casts a float input to int32: truncation toward zero
            xf = to_compute(x, np.dtype(np.float64))
            finite = np.isfinite(xf)
            if not finite.all():
                pos = tuple(int(i) for i in np.argwhere(~finite)[0])
                raise ValueError(f"{owner}: inputs must be indices; the float input holds "
                                 f"{float(xf[pos])!r} at position {pos}")
            x = np.trunc(xf).astype(np.int64)
        if x.size:
            lo, hi = x.min(), x.max()
            if lo < 0 or hi >= self.input_dim:
                bad = (x < 0) | (x >= self.input_dim)
                pos = tuple(int(i) for i in np.argwhere(bad)[0])
                raise ValueError(f"{owner}: index {int(x[pos])} at position {pos} is out of "
                                 f"range for input_dim {self.input_dim} (valid indices: 0 to "
                                 f"{self.input_dim - 1})")
        return x

    def call(self, inputs, training=False):
        idx = self._indices(inputs)
        if self.quantization_mode is not None:
            if training:
                raise ValueError(f"Embedding '{self.name}': a quantized table is frozen; "
                                 f"train the float model and quantize it afterwards")
            return self._quantized_rows(idx)
        table = self._compute_weight("embeddings")
        y = np.take(table, idx, axis=0)
        if training:
            self._train_cache = idx
        return y

    def backward(self, dy, need_input_grad=True):
        idx = self._train_cache
        w = work_dtype(self.embeddings.dtype)
        grad = np.zeros((self.input_dim, self.output_dim), dtype=w)
        rows = to_compute(np.asarray(dy), w).reshape(-1, self.output_dim)
        np.add.at(grad, idx.reshape(-1), rows)
        self._set_gradients({"embeddings": grad})
        return None

    def get_config(self):
        config = super().get_config()
        config.update({
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "embeddings_initializer": _initializers.serialize(self.embeddings_initializer),
            "embeddings_regularizer": _regularizers.serialize(self.embeddings_regularizer),
            "mask_zero": self.mask_zero,
            "embeddings_constraint": None, "activity_regularizer": None,
            "quantization_config": _quantizers.serialize(self.quantization_config),
        })
        config.pop("autocast", None)      # Keras's Embedding never autocasts, nor says so
        return config


class Lambda(Layer):
    """``keras.layers.Lambda``: ``function(inputs, **arguments)`` on arrays in the compute dtype.

    ``function`` is any callable of arrays (numpy, ``mixedcore.kernels``).  ``output_shape``
    (a shape without the batch axis, or a function of the input shape) spares running the
    function once on zeros to find the output's shape when the layer is called on symbolic
    tensors.  Inference only (no ``backward``).

    Saving writes a named function as Keras does (its registered name, from
    ``register_keras_serializable``, or its name), which loading resolves only from
    ``custom_objects`` and the registered objects, and only under ``load_model(...,
    safe_mode=False)``: nothing is imported or executed from a file.  A Python ``lambda`` cannot
    be saved, and a file holding one (Keras writes its bytecode) is refused whatever
    ``safe_mode`` says.
    """

    def __init__(self, function, output_shape=None, mask=None, arguments=None, **kwargs):
        super().__init__(**kwargs)
        if not callable(function):
            raise TypeError(f"Lambda: function must be callable, got "
                            f"{type(function).__name__}: {function!r}")
        if mask is not None:
            raise ValueError(f"Lambda: mask={mask!r} is not supported (only None)")
        if arguments is not None and not isinstance(arguments, dict):
            raise TypeError(f"Lambda: arguments must be a dict, got {arguments!r}")
        if output_shape is not None and not callable(output_shape):
            if not isinstance(output_shape, (list, tuple)) or not all(
                    d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                  and d >= 0) for d in output_shape):
                raise ValueError(f"Lambda: output_shape must be a shape (ints >= 0 or None) "
                                 f"without the batch axis, or a function, got "
                                 f"{output_shape!r}")
            output_shape = tuple(output_shape)
        self.function = function
        self.output_shape_arg = output_shape
        self.arguments = dict(arguments or {})

    def compute_output_shape(self, input_shape):
        if self.output_shape_arg is None:
            return super().compute_output_shape(input_shape)
        if callable(self.output_shape_arg):
            return tuple(self.output_shape_arg(input_shape))
        return (input_shape[0],) + self.output_shape_arg

    def compute_output_spec(self, *args, **kwargs):
        if self.output_shape_arg is None:
            return self._spec_by_running(args, kwargs)
        return super().compute_output_spec(*args, **kwargs)

    def call(self, inputs):
        return self.function(inputs, **self.arguments)

    def get_config(self):
        fn = self.function
        name = getattr(fn, "__name__", None)
        if name is None or name == "<lambda>":
            raise ValueError(f"Lambda '{self.name}': a Python lambda cannot be saved (mixedcore "
                             f"never writes or runs code); use a named function, registered "
                             f"with saving.register_keras_serializable, and load with "
                             f"custom_objects or that registration")
        registered = _registry.get_registered_name(fn)
        config = super().get_config()
        config["function"] = {"module": getattr(fn, "__module__", None), "class_name": "function",
                              "config": name, "registered_name": registered}
        if self.output_shape_arg is not None and not callable(self.output_shape_arg):
            config["output_shape"] = list(self.output_shape_arg)
        config["arguments"] = self.arguments
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        entry = config.get("function")
        name = config.get("name")
        if isinstance(entry, dict) and entry.get("class_name") == "__lambda__":
            raise ValueError(f"Lambda '{name}': the function is Python bytecode, which mixedcore "
                             f"never runs; define it in your code as a named function and "
                             f"rebuild the layer, or load a file that names it")
        found = _registry.lookup_keys("function", _registry.function_keys(entry),
                                      custom_objects, builtins=False, owner="Lambda")
        if found is None or not callable(found.obj):
            raise ValueError(f"Lambda '{name}': its function {entry!r} is not among "
                             f"custom_objects or the registered objects; pass "
                             f"custom_objects={{'<name>': function}}")
        config["function"] = found.obj
        shape = config.get("output_shape")
        if isinstance(shape, dict):
            raise ValueError(f"Lambda '{name}': an output_shape function in a file is not read; "
                             f"got {shape!r}")
        return cls(**config)
