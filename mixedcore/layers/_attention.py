"""MultiHeadAttention: Keras's layer on the batched GEMM (float32 accumulation), softmax in
float32."""
import math
import string

import numpy as np

from mixedcore import dtype_policies as _dtype_policies
from mixedcore import initializers as _initializers
from mixedcore import kernels
from mixedcore import quantizers as _quantizers
from mixedcore import random as _random
from mixedcore import regularizers as _regularizers
from mixedcore._dtypes import as_numeric_array, dtype_name, is_floating, np_dtype, to_compute, \
    work_dtype
from mixedcore.layers import _args, _node
from mixedcore.layers._base import Layer, _as_shapes, _batchless
from mixedcore.layers._einsum_dense import QuantizedEinsumDense, _Plan
from mixedcore.layers._quantized import check_quantize, int8_product, quantized_policy_name

_GEMM_DTYPES = ("float16", "bfloat16", "float32")
# what Keras's masked softmax puts at masked positions before normalizing
_MASKED = np.float32(-1e9)
_WEIGHTS = ("query", "key", "value", "attention_output")
# the sub-layer each projection is in Keras, under which its variables are filed
_SUBLAYERS = dict(zip(_WEIGHTS, ("query_dense", "key_dense", "value_dense", "output_dense")))
_F32 = np.dtype(np.float32)


def _gemm_ok(*arrays):
    return all(dtype_name(a.dtype) in _GEMM_DTYPES for a in arrays)


def _mm(a, b, alpha=1.0, out_dtype=None, out=None):
    """``alpha * a @ b`` (batched): ``kernels.matmul`` with float32 accumulation for float16 /
    bfloat16 / float32 operands (the result float32 unless ``out_dtype``), numpy in float64
    otherwise (the float64 policy)."""
    if _gemm_ok(a, b):
        if out is not None:
            return kernels.matmul(a, b, alpha=alpha, out=out)
        return kernels.matmul(a, b, alpha=alpha, out_dtype=out_dtype)
    r = np.matmul(a.astype(np.float64, copy=False), b.astype(np.float64, copy=False))
    if alpha != 1.0:
        r *= alpha
    if out is not None:
        out[...] = r
        return out
    return r


class MultiHeadAttention(Layer):
    """Multi-head scaled dot-product attention (``keras.layers.MultiHeadAttention``).

    Parameters
    ----------
    num_heads : int
    key_dim : int
        Size of each head for query and key.
    value_dim : int, optional
        Size of each head for value (``key_dim`` by default).
    dropout : float, default 0.0
        Dropout rate on the attention probabilities (training calls only).
    use_bias : bool, default True
    output_shape : int or tuple of int, optional
        The output's trailing shape (the query's last dimension by default).
    attention_axes : None or ints
        The axes attention runs over; None (Keras's default) is every axis between the batch and
        the features, taken jointly (the sequence axis of a (batch, seq, features) input).  Other
        values are a ValueError: they are not implemented.
    kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer
        As Keras's; the regularizers apply to the four kernels / biases.
    seed : int, optional
        Seed of the dropout.
    sliding_window : int, optional
        Each query position attends only to key positions less than this far away (Keras 3).
    softmax_robust_masking : bool, optional
        tf.keras 2.x's choice of masked softmax (masked scores replaced, or shifted, by a large
        negative number), read from its configs: the two agree wherever a query position has a
        key position it may attend to, and a query position with none gets all-zero attention
        here, as in Keras 3, whichever is given.  ``from_config`` also reads tf.keras's
        ``query_shape``, ``value_shape`` and ``key_shape`` and builds the layer for them.

    Weights, in Keras's order and shapes (d = the feature size of each input):
    query/kernel (d_query, num_heads, key_dim), query/bias (num_heads, key_dim), key/kernel,
    key/bias, value/kernel (d_value, num_heads, value_dim), value/bias, attention_output/kernel
    (num_heads, value_dim, *output_shape), attention_output/bias (output_shape).

    Call
    ----
    ``call(query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
    attention_mask=None, return_attention_scores=False, training=False, use_causal_mask=False)``

    Masks are boolean (a float or integer mask counts its nonzero entries): ``query_mask`` (batch,
    T) masks query positions (their rows of attention are all zero, so their output is the output
    bias), ``value_mask`` / ``key_mask`` (batch, S) mask key positions (``key_mask`` only when
    ``key`` is given, as in Keras), ``attention_mask`` (batch, T, S) (or anything that broadcasts to
    it, or (batch, num_heads, T, S)) masks pairs, ``use_causal_mask`` keeps the pairs with ``t >=
    s``; all are combined with "and".  Keras 3 reads ``query_mask`` only from the mask attached to
    the query tensor (an explicit ``query_mask=`` argument is ignored there); here the argument is
    used.

    Returns the output (batch, T, *output_shape) in the compute dtype, and with
    ``return_attention_scores`` also the attention probabilities (batch, num_heads, T, S) in the
    compute dtype (before dropout).

    Numerics
    --------
    The four projections are GEMMs of the inputs (compute dtype) with the kernels (packed once per
    weight version at inference, the compute-dtype copies in training), float32 accumulation, the
    bias in the epilogue, one rounding to the compute dtype.  ``Q K^T`` is a batched GEMM in the
    compute dtype whose float32 result is scaled by ``1 / sqrt(key_dim)`` in the epilogue (Keras
    scales the query before the product, in the compute dtype); the masked softmax runs in float32
    (the compiled kernel: float64 inside, one rounding), the probabilities are rounded to the
    compute dtype and ``P V`` is another batched GEMM.  Backward mirrors it: every product a GEMM in
    the compute dtype with float32 accumulation, the softmax's gradient in float32, the weight
    gradients in float32 (the variable dtype).  Under the float64 policy everything is numpy in
    float64.  ``dy`` is the output's gradient, or (output's, scores') after a call with
    ``return_attention_scores``.  ``backward(dy)`` returns ``{"query": dq, "value": dv, "key":
    dk}``; when the call had no ``key`` the key projection's input gradient is added into ``dv`` and
    ``"key"`` is None.

    Quantization: the projections quantize as Keras's EinsumDense sub-layers (``quantize``,
    ``Model.quantize``; docs/quantization.md): a quantized projection's weights replace its
    kernel under its name ("query/kernel" int8, "query/kernel_scale", ...), inference runs its
    quantized product (self-attention's three int8 projections as one), training its
    dequantized kernel with the kernel frozen.
    """

    supports_masking = True      # the output takes the query's mask, as in Keras
    _DERIVED_STATE = dict(Layer._DERIVED_STATE, _qprojections=dict)

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True,
                 output_shape=None, attention_axes=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                 seed=None, sliding_window=None, **kwargs):
        owner = "MultiHeadAttention"
        _args.keras_only(owner, {"activity_regularizer": activity_regularizer,
                                 "kernel_constraint": kernel_constraint,
                                 "bias_constraint": bias_constraint},
                         {"activity_regularizer": None, "kernel_constraint": None,
                          "bias_constraint": None})
        _args.keras_only(owner, kwargs, {"use_gate": False, "flash_attention": (None, False),
                                         "lora_rank": None, "quantization_config": None})
        if "softmax_robust_masking" in kwargs:
            # tf.keras's choice between two masked softmaxes that agree wherever a query
            # position has a key it may attend to (see the class notes)
            _args.boolean(_args.owner_name(owner, kwargs), "softmax_robust_masking",
                          kwargs.pop("softmax_robust_masking"))
        super().__init__(**kwargs)
        self.num_heads = _args.positive_int(owner, "num_heads", num_heads)
        self.key_dim = _args.positive_int(owner, "key_dim", key_dim)
        self.value_dim = self.key_dim if value_dim is None else \
            _args.positive_int(owner, "value_dim", value_dim)
        self.dropout = _args.number(owner, "dropout", dropout, low=0, high=1, high_open=True)
        self.use_bias = _args.boolean(owner, "use_bias", use_bias)
        if output_shape is None:
            self._output_shape_arg = None
        else:
            shape = (output_shape,) if isinstance(output_shape, (int, np.integer)) \
                and not isinstance(output_shape, bool) else output_shape
            if not isinstance(shape, (tuple, list)) or not shape:
                raise ValueError(f"{owner}: output_shape must be an int or a non-empty tuple "
                                 f"of ints, got {output_shape!r}")
            self._output_shape_arg = tuple(_args.positive_int(owner, "output_shape entry", d)
                                           for d in shape)
        if attention_axes is not None:
            axes = (attention_axes,) if isinstance(attention_axes, (int, np.integer)) \
                else attention_axes
            if not isinstance(axes, (tuple, list)) or not all(
                    isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes):
                raise ValueError(f"{owner}: attention_axes must be None, an int or a tuple of "
                                 f"ints, got {attention_axes!r}")
            attention_axes = tuple(int(a) for a in axes)
        self.attention_axes = attention_axes
        if sliding_window is not None:
            sliding_window = _args.positive_int(owner, "sliding_window", sliding_window)
        self.sliding_window = sliding_window
        self.kernel_initializer = _initializers.check(owner, kernel_initializer)
        self.bias_initializer = _initializers.check(owner, bias_initializer)
        self.kernel_regularizer = _regularizers.get(kernel_regularizer)
        self.bias_regularizer = _regularizers.get(bias_regularizer)
        if seed is not None:
            seed = _args.non_negative_int(owner, "seed", seed)
        self.seed = seed
        self._generator = _random.generator(seed) if seed is not None else None
        self._scale = 1.0 / math.sqrt(float(self.key_dim))
        self._train_cache = None
        # projection -> (quantized policy, config) for the quantized projections; a policy map
        # as ``dtype`` (what a file of a quantized attention holds) gives them by path
        self._projection_quant = {}
        self._qprojections = {}
        policy_map = _dtype_policies.get(kwargs["dtype"]) if isinstance(
            kwargs.get("dtype"), (dict, _dtype_policies.DTypePolicyMap)) else None
        if isinstance(policy_map, _dtype_policies.DTypePolicyMap):
            for sub in _WEIGHTS:
                policy = policy_map[f"{self.name}/{sub}"]
                if getattr(policy, "quantization_mode", None) is not None:
                    self._projection_quant[sub] = (self._check_projection_policy(
                        f"{owner} '{self.name}'", sub, policy), None)

    @classmethod
    def from_config(cls, config):
        """The layer from its config: Keras 3's, or tf.keras 2.x's, whose ``query_shape``,
        ``value_shape`` and ``key_shape`` (the shapes it was built for, or None) build it."""
        config = dict(config)
        shapes = {k: config.pop(k) for k in ("query_shape", "value_shape", "key_shape")
                  if k in config}
        layer = cls(**config)
        given = {k: v for k, v in shapes.items() if v is not None}
        if not given:
            return layer
        owner = f"MultiHeadAttention '{layer.name}'"
        for key, shape in given.items():
            if not isinstance(shape, (list, tuple)) or not all(
                    d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                  and d >= 0) for d in shape):
                raise ValueError(f"{owner}: {key} must be a shape (a list of ints or None), "
                                 f"got {shape!r}")
        if "query_shape" not in given or "value_shape" not in given:
            raise ValueError(f"{owner}: query_shape and value_shape must be given together "
                             f"(key_shape optional), got {shapes}")
        q, v = list(given["query_shape"]), list(given["value_shape"])
        k = given.get("key_shape")
        k = None if k is None or list(k) == v else list(k)
        layer.build_from_shape([q, v] if k is None else [q, v, k])
        return layer

    # the projections' weights under the attributes Keras keeps its EinsumDense sub-layers in
    # (``layer.query_dense.kernel``); the weights are named "query/kernel", ... (docs/layers.md)
    query_dense = property(lambda self: _Projection(self, "query"))
    key_dense = property(lambda self: _Projection(self, "key"))
    value_dense = property(lambda self: _Projection(self, "value"))
    output_dense = property(lambda self: _Projection(self, "attention_output"))

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, query=None, value=None, key=None, *, training=False, **kwargs):
        owner = f"MultiHeadAttention '{self.name}'"
        if query is None or value is None:
            raise TypeError(f"{owner}: call(query, value, key=None, ...) needs query and value")

        def array(what, x):
            if x is None or isinstance(x, (np.ndarray, _node.KerasTensor)):
                return x
            return as_numeric_array(f"{owner}: {what}", x)
        query, value, key = array("query", query), array("value", value), array("key", key)
        for k in ("query_mask", "value_mask", "key_mask", "attention_mask"):
            if kwargs.get(k) is not None:
                kwargs[k] = array(k, kwargs[k])
        if key is not None:
            kwargs["key"] = key
        return super().__call__(query, value, training=training, **kwargs)

    def _call_shapes(self, args, kwargs):
        q = tuple(args[0].shape)
        v = tuple(args[1].shape if len(args) > 1 else kwargs["value"].shape)
        k = kwargs.get("key")
        return q, v, None if k is None else tuple(k.shape)

    def _build_for_call(self, args, kwargs):
        q, v, k = self._call_shapes(args, kwargs)
        self.build_from_shape([q, v] if k is None else [q, v, k])

    def _check_call(self, args, kwargs):
        q, v, k = self._call_shapes(args, kwargs)
        self._check_shapes(q, v, k, built=True)

    def build_from_shape(self, input_shape):
        """Build for ``[query_shape, value_shape]`` or ``[query_shape, value_shape, key_shape]``
        (or a dict with those keys)."""
        owner = f"MultiHeadAttention '{self.name}'"
        if isinstance(input_shape, dict):
            q, v, k = input_shape.get("query"), input_shape.get("value"), input_shape.get("key")
        elif isinstance(input_shape, (list, tuple)) and len(input_shape) in (2, 3) and all(
                isinstance(s, (list, tuple)) for s in input_shape):
            q, v = input_shape[0], input_shape[1]
            k = input_shape[2] if len(input_shape) == 3 else None
        else:
            raise ValueError(f"{owner}: build_from_shape takes [query_shape, value_shape] or "
                             f"[query_shape, value_shape, key_shape], got {input_shape!r}")
        if q is None or v is None:
            raise ValueError(f"{owner}: build_from_shape needs the query and value shapes, got "
                             f"{input_shape!r}")
        q, v = _as_shapes(q), _as_shapes(v)
        k = None if k is None else _as_shapes(k)
        self.build(q, v, k)
        shapes = [q, v] + ([k] if k is not None else [])
        self.input_shape = [_batchless(s) for s in shapes]
        self.output_shape = self.compute_output_shape(*self.input_shape)
        self.built = True

    def _check_shapes(self, q, v, k, built=False):
        owner = f"MultiHeadAttention '{self.name}'"
        k_eff = v if k is None else k
        if len(q) < 3 or len(v) < 3:
            raise ValueError(f"{owner}: query and value must have shape (batch, positions..., "
                             f"features), got query {q} and value {v}")
        if len(q) != len(v) or len(k_eff) != len(v):
            raise ValueError(f"{owner}: query, value and key must have the same rank, got "
                             f"query {q}, value {v}, key {k}")
        if tuple(v[1:-1]) != tuple(k_eff[1:-1]):
            raise ValueError(f"{owner}: all dimensions of value and key except the last must be "
                             f"equal, got value {v} and key {k}")
        batches = {s[0] for s in (q, v, k_eff)} - {None}
        if len(batches) > 1:
            raise ValueError(f"{owner}: query, value and key have different batch sizes: query "
                             f"{q}, value {v}, key {k}")
        if any(s[-1] is None for s in (q, v, k_eff)):
            raise ValueError(f"{owner}: the feature (last) dimensions must be known, got query "
                             f"{q}, value {v}, key {k}")
        if built:
            dq, dk, dv = (self._weight(f"{n}/kernel").shape[0] for n in ("query", "key", "value"))
            if (q[-1], k_eff[-1], v[-1]) != (dq, dk, dv):
                raise ValueError(f"{owner}: built for query / key / value features ({dq}, {dk}, "
                                 f"{dv}), received query {q}, value {v}, key {k}")
            if len(q) != len(self.input_shape[0]):
                raise ValueError(f"{owner}: built for inputs of rank {len(self.input_shape[0])},"
                                 f" received query {q}")

    def _default_axes(self, rank):
        return tuple(range(1, rank - 1))

    def _check_attention_axes(self, rank):
        if self.attention_axes is None:
            return
        # Keras counts the axes of the projected (batch, positions..., heads, size) tensor;
        # negative ones from its last axis but one
        proj_rank = rank + 1
        axes = tuple(sorted(a if a >= 0 else (proj_rank - 1) + a for a in self.attention_axes))
        if axes != self._default_axes(rank):
            raise ValueError(f"MultiHeadAttention '{self.name}': attention_axes="
                             f"{self.attention_axes} is not implemented; only the default "
                             f"(every axis between the batch and the features: "
                             f"{self._default_axes(rank)} for inputs of rank {rank}) is")

    def build(self, query_shape, value_shape=None, key_shape=None):
        if value_shape is None and isinstance(query_shape, (list, tuple)) and query_shape and \
                isinstance(query_shape[0], (list, tuple)):
            query_shape, value_shape, key_shape = (list(query_shape) + [None])[:3]
        self._check_shapes(tuple(query_shape), tuple(value_shape),
                           None if key_shape is None else tuple(key_shape))
        if self.compute_dtype is not None and not is_floating(np_dtype(self.compute_dtype)):
            raise TypeError(f"MultiHeadAttention '{self.name}': compute dtype must be floating, "
                            f"got {self.compute_dtype}")
        self._check_attention_axes(len(query_shape))
        key_shape = value_shape if key_shape is None else key_shape
        n, h, hv = self.num_heads, self.key_dim, self.value_dim
        out = self._output_shape_arg or (int(query_shape[-1]),)
        self._out_tail = tuple(out)
        rank = len(query_shape)
        self._plans = {}
        for name, d, size in (("query", query_shape[-1], h), ("key", key_shape[-1], h),
                              ("value", value_shape[-1], hv)):
            self._plans[name] = _projection_plan(self.name, name, rank, (int(d),), (n, size))
            self._add_projection(name, (int(d), n, size))
        self._plans["attention_output"] = _projection_plan(self.name, "attention_output", rank,
                                                           (n, hv), tuple(out))
        self._add_projection("attention_output", (n, hv) + tuple(out), split=2)
        self._qprojections = {}

    def _add_projection(self, name, shape, split=1):
        """A projection's kernel and bias.  The float kernel is initialized as the matrix
        (prod(shape[:split]), prod(shape[split:])) of the GEMM it is used as (so the fans are a
        Dense layer's), stored in Keras's shape; a quantized projection has its mode's weights
        (Keras's EinsumDense's, at their initial values) in their place."""
        quantized = self._quantized(name)
        if quantized is not None:
            if self.compute_dtype not in _GEMM_DTYPES:
                raise ValueError(f"MultiHeadAttention '{self.name}': a quantized projection "
                                 f"({name}) computes in float32, bfloat16 or float16, not "
                                 f"{self.compute_dtype}")
            for weight, wshape, dtype, init, trainable in quantized._quantized_specs(
                    tuple(shape), quantized.quantization_mode, quantized._int4_block()):
                self.add_weight(f"{name}/{weight}", wshape, init, trainable=trainable,
                                dtype=dtype)
        else:
            matrix = (int(np.prod(shape[:split])), int(np.prod(shape[split:])))
            initializer = self.kernel_initializer

            def as_matrix(shape, dtype):
                return _initializers.initialize(initializer, matrix, dtype).reshape(shape)
            self.add_weight(f"{name}/kernel", shape, as_matrix, self.kernel_regularizer)
        if self.use_bias:
            self.add_weight(f"{name}/bias", shape[split:], self.bias_initializer,
                            self.bias_regularizer)

    # -- quantized projections (docs/quantization.md) ---------------------------------------------
    def _check_projection_policy(self, owner, name, policy):
        """A projection's quantized policy: a mode mixedcore runs, quantizing this layer's own
        policy (the projections compute in the layer's dtypes)."""
        mode = policy.quantization_mode
        if mode not in QuantizedEinsumDense._MODES:
            raise ValueError(f"{owner}: the {name} projection's policy {policy.name!r} "
                             f"quantizes in mode {mode!r}; mixedcore's MultiHeadAttention "
                             f"takes {list(QuantizedEinsumDense._MODES)}")
        if (policy.compute_dtype, policy.variable_dtype) != (self.compute_dtype,
                                                             self.variable_dtype):
            raise ValueError(f"{owner}: the {name} projection's policy {policy.name!r} "
                             f"computes in {policy.compute_dtype} with {policy.variable_dtype} "
                             f"weights; the layer's policy {self.dtype_policy.name!r} in "
                             f"{self.compute_dtype} with {self.variable_dtype}: they must agree")
        return policy

    def _quantized(self, name):
        """The quantized projection ``name`` (None when it is float), read through this
        layer's weights."""
        entry = self._projection_quant.get(name)
        if entry is None:
            return None
        proj = self._qprojections.get(name)
        if proj is None or proj.dtype_policy is not entry[0]:
            proj = _QuantizedProjection(self, name, self._plans[name], *entry)
            self._qprojections[name] = proj
        return proj

    @property
    def quantization_mode(self):
        """The mode of the quantized projections (None when all are float; "mixed" when they
        differ)."""
        modes = {p.quantization_mode for p, _ in self._projection_quant.values()}
        return None if not modes else modes.pop() if len(modes) == 1 else "mixed"

    def quantizable_parts(self):
        """The projections not yet quantized, as Keras's sub-layers show them (``name`` is
        the sub-layer's: "query", "key", "value", "attention_output"), for
        ``Model.quantize``'s filters."""
        return [_Projection(self, name) for name in _WEIGHTS
                if name not in self._projection_quant]

    def quantize(self, mode=None, config=None, type_check=True, parts=None):
        """Quantize the four projections' kernels in place, as Keras's ``Model.quantize``
        quantizes the layer's EinsumDense sub-layers (docs/quantization.md): int8, int4 or
        float8, with Keras's weights bit for bit.

        ``parts`` (projections from :meth:`quantizable_parts`, or their names) limits it to
        those.

        Raises
        ------
        ValueError
            Unbuilt; a projection already quantized; an unknown mode or a config contradicting
            it; int8 under a float16 policy; a float64 policy.
        """
        owner = f"MultiHeadAttention '{self.name}'.quantize"
        config = _quantizers.resolve_config(owner, mode, config)
        mode = config.mode
        check_quantize(owner, self, mode, QuantizedEinsumDense._MODES,
                       "MultiHeadAttention's projections")
        names = list(_WEIGHTS) if parts is None else [getattr(p, "name", p) for p in parts]
        for name in names:
            if name not in _WEIGHTS:
                raise ValueError(f"{owner}: no projection {name!r}; the projections are "
                                 f"{list(_WEIGHTS)}")
            if name in self._projection_quant:
                raise ValueError(f"{owner}: the {name} projection is already quantized with "
                                 f"dtype_policy='{self._projection_quant[name][0].name}'. "
                                 f"Received: mode={mode}")
        if self.compute_dtype not in _GEMM_DTYPES:
            raise ValueError(f"{owner}: quantized projections compute in float32, bfloat16 or "
                             f"float16, not {self.compute_dtype}")
        policy = _dtype_policies.get(quantized_policy_name(self, mode, config))
        # every new weight is computed before the layer changes
        new = {}
        for name in names:
            proj = _QuantizedProjection(self, name, self._plans[name], policy, config)
            kernel = self._weight(f"{name}/kernel")
            values = proj._quantized_values(mode, config)
            specs = proj._quantized_specs(tuple(kernel.shape), mode, proj._int4_block())
            weights = []
            for weight, wshape, dtype, init, trainable in specs:
                value = values.get(weight, kernel if weight == "kernel" else None)
                array = np.empty(wshape, dtype=np_dtype(dtype or self.variable_dtype))
                array[...] = value if value is not None else \
                    _initializers.initialize(init, wshape, array.dtype)
                weights.append((f"{name}/{weight}", array, trainable, None))
            new[name] = weights
        kept = [w for w in zip(self._names, self._values, self._trainable_flags,
                               self._regularizers)
                if w[0].split("/")[0] not in new or w[0].endswith("/bias")]
        self._set_weight_lists(kept + [w for name in names for w in new[name]])
        for name in names:
            self._projection_quant[name] = (policy, config)
        self._packed, self._bias_cache, self._qprojections = {}, {}, {}
        self.weights_updated()

    def _set_weight_lists(self, weights):
        """The weights [(name, value, trainable, regularizer)] as the layer's, grouped by
        projection in Keras's order (query, key, value, output), each projection's weights
        in a layer built under its policy's order: its mode's weights, then the bias."""
        def rank(w):
            name, weight = w[0].split("/", 1)
            return _WEIGHTS.index(name), weight == "bias"
        weights = sorted(weights, key=rank)
        self._names = [w[0] for w in weights]
        self._values = [w[1] for w in weights]
        self._trainable_flags = [w[2] for w in weights]
        self._regularizers = [w[3] for w in weights]

    def adopt_stored_layout(self, sub, shapes, read):
        """Take a quantized projection's layout from a file, before its weights are read.

        Keras's ``Model.quantize`` quantizes the layer's EinsumDense sub-layers in memory, and
        the file it then saves records no quantization in its config (Keras 3.15.1 cannot load
        it back); the variables filed under a sub-layer (``sub``: "query_dense", ...) show the
        mode: int8 (the kernel's shape and an output-aligned scale), int4 (a packed kernel,
        its scales, zero points and group indices) or float8 (the kernel and its scales and
        histories).  ``shapes`` maps the stored variables ("0", "1", ...) to their shapes;
        ``read(i)`` reads one (only the int4 group indices are read, after their shape is
        checked).  A projection whose stored shapes are a mode's default layout takes that
        mode; anything else is left for the loader's checks to report.
        """
        name = {v: k for k, v in _SUBLAYERS.items()}.get(sub.lstrip("_"))
        if not self.built or name is None or name in self._projection_quant:
            return
        kernel = self._weight(f"{name}/kernel")
        bias = self._weight(f"{name}/bias")
        stored = [shapes.get(str(i)) for i in range(len(shapes))]
        if None in stored or stored == [tuple(kernel.shape)] + (
                [] if bias is None else [tuple(bias.shape)]):
            return
        plan = self._plans[name]
        rows = plan.k
        candidates = [("int8", None), ("float8", None), ("int4", -1)]
        if len(stored) >= 4:                 # grouped int4: the group size
            groups = stored[-3][0] if len(stored[-3]) == 2 else 0
            block = 128 if groups == math.ceil(rows / 128) else None
            if block is None and stored[-1] == (rows,) and groups > 0:
                g = np.asarray(read(str(len(stored) - 1)))
                block = int(np.count_nonzero(g == 0)) or None
            if block is not None and groups == math.ceil(rows / block):
                candidates.append(("int4", block))
        for mode, block in candidates:
            config = None if block is None else _quantizers.Int4QuantizationConfig(
                block_size=block)
            policy = _dtype_policies.get(quantized_policy_name(self, mode, config))
            proj = _QuantizedProjection(self, name, plan, policy, None)
            try:
                specs = proj._quantized_specs(tuple(kernel.shape), mode, proj._int4_block())
            except ValueError:
                continue
            layout = {w: tuple(shape) for w, shape, *_ in specs}
            if bias is not None:
                layout["bias"] = tuple(bias.shape)
            if [layout[w] for w in proj._serialization_order(mode) if w in layout] == stored:
                self._projection_quant[name] = (self._check_projection_policy(
                    f"MultiHeadAttention '{self.name}'", name, policy), None)
                self._qprojections = {}
                others = [w for w in zip(self._names, self._values, self._trainable_flags,
                                         self._regularizers) if w[0].split("/")[0] != name]
                self._set_weight_lists(others)
                self._add_projection(name, tuple(kernel.shape),
                                     split=2 if name == "attention_output" else 1)
                self._set_weight_lists(list(zip(self._names, self._values,
                                                self._trainable_flags, self._regularizers)))
                self.weights_updated()
                return

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        if value_shape is None and isinstance(query_shape, (list, tuple)) and query_shape and \
                isinstance(query_shape[0], (list, tuple)):
            query_shape, value_shape, key_shape = (list(query_shape) + [None])[:3]
        query_shape, value_shape = tuple(query_shape), tuple(value_shape)
        k = value_shape if key_shape is None else tuple(key_shape)
        if value_shape[1:-1] != k[1:-1]:
            raise ValueError(f"MultiHeadAttention '{self.name}': all dimensions of value and "
                             f"key except the last must be equal, got value {value_shape} and "
                             f"key {key_shape}")
        if self._output_shape_arg:
            return query_shape[:-1] + self._output_shape_arg
        return query_shape

    def compute_output_spec(self, query, value, key=None, query_mask=None, value_mask=None,
                            key_mask=None, attention_mask=None, return_attention_scores=False,
                            training=False, use_causal_mask=False):
        out_shape = self.compute_output_shape(query.shape, value.shape,
                                              None if key is None else key.shape)
        out = _node.KerasTensor(out_shape, self.compute_dtype)
        if return_attention_scores:
            scores = (query.shape[0], self.num_heads) + tuple(query.shape[1:-1]) + \
                tuple(value.shape[1:-1])
            return out, _node.KerasTensor(scores, self.compute_dtype)
        return out

    # -- the computation -------------------------------------------------------------------------
    def _as_compute(self, x):
        return x if is_floating(x.dtype) else x.astype(self._compute_np())

    def _flat_mask(self, what, mask, shape):
        """A mask of ``shape`` (batch, positions...) as bool (batch or 1, positions)."""
        owner = f"MultiHeadAttention '{self.name}'"
        m = np.asarray(mask)
        if m.shape != tuple(shape) and not (m.ndim == len(shape) and m.shape[0] == 1
                                            and m.shape[1:] == tuple(shape[1:])):
            raise ValueError(f"{owner}: {what} must have shape {tuple(shape)} (batch, "
                             f"positions...), got {m.shape}")
        return (m != 0).reshape(m.shape[0], -1)

    def _attention_mask(self, b, t_dims, s_dims, query_mask, value_mask, key_mask,
                        attention_mask, use_causal_mask, key_given=True):
        """The combined boolean mask, broadcastable to (batch, heads, T, S), or None."""
        owner = f"MultiHeadAttention '{self.name}'"
        t, s = int(np.prod(t_dims)), int(np.prod(s_dims))
        mask = None

        def both(m):
            return m if mask is None else mask & m
        if query_mask is not None:
            mask = both(self._flat_mask("query_mask", query_mask, (b,) + t_dims)[:, :, None])
        key_mask = key_mask if key_given else None
        for what, m in (("value_mask", value_mask), ("key_mask", key_mask)):
            if m is not None:
                mask = both(self._flat_mask(what, m, (b,) + s_dims)[:, None, :])
        if use_causal_mask or self.sliding_window is not None:
            rows = np.arange(t)[:, None]
            cols = np.arange(s)[None, :]
            band = np.ones((t, s), dtype=bool)
            if use_causal_mask:
                band &= rows >= cols
            if self.sliding_window is not None:
                band &= np.abs(rows - cols) < self.sliding_window
            mask = both(band[None])
        if mask is not None:
            mask = mask[:, None]                        # the heads axis
        if attention_mask is not None:
            m = np.asarray(attention_mask) != 0
            full = (b,) + t_dims + s_dims
            if m.ndim == len(full) and len(t_dims) + len(s_dims) > 2 and all(
                    d in (1, e) for d, e in zip(m.shape, full)):
                m = np.broadcast_to(m, (m.shape[0],) + full[1:]).reshape(m.shape[0], t, s)
            if m.ndim <= 3:
                m = m.reshape((1,) * (3 - m.ndim) + m.shape)[:, None]
            target = (b, self.num_heads, t, s)
            if m.ndim != 4 or any(d not in (1, e) for d, e in zip(m.shape, target)):
                raise ValueError(f"{owner}: attention_mask of shape "
                                 f"{np.shape(attention_mask)} does not broadcast to (batch, T, "
                                 f"S) = {(b, t, s)} (or (batch, num_heads, T, S))")
            mask = m if mask is None else mask & m
        return mask

    def _project(self, x2, name, training):
        """x2 (rows, d) @ kernel (d, cols) + bias, in the compute dtype (float32 accumulation);
        a quantized projection's quantized product at inference, its dequantized kernel in
        training (as EinsumDense)."""
        kernel = f"{name}/kernel"
        cd = x2.dtype
        sixteen = cd.itemsize == 2
        out = dtype_name(cd) if sixteen else None
        quantized = self._quantized(name)
        if quantized is not None and not training:
            return quantized._quantized_rows(x2, self._projection_bias(name), None, out)
        if _gemm_ok(x2):
            if training:
                k = self._kernel_matrix(name)
            else:
                k = self.packed_weight(kernel)
            return kernels.matmul(x2, k, bias=self._projection_bias(name), out_dtype=out)
        w = work_dtype(cd)
        z = to_compute(x2, w) @ to_compute(self._kernel_matrix(name), w)
        if self.use_bias:
            z += to_compute(self._compute_weight(f"{name}/bias"), w).reshape(-1)
        return to_compute(z, cd)

    def _kernel_matrix(self, name):
        """A projection's kernel as its GEMM matrix in the compute dtype (the dequantized
        kernel of a quantized projection)."""
        quantized = self._quantized(name)
        if quantized is None:
            return self._matrix(self._compute_weight(f"{name}/kernel"), name)
        cd = self._compute_np()
        return self._matrix(to_compute(quantized._prepared(
            ("dequantized", cd), quantized.dequantized_kernel), cd), name)

    def _projection_bias(self, name):
        """A projection's bias as its product's epilogue adds it (float32, one value per
        column; None without); a float8 projection under float32 rounds it through bfloat16,
        as Keras's float8 layers do."""
        if not self.use_bias:
            return None
        b = self._bias32(f"{name}/bias")
        quantized = self._quantized(name)
        if quantized is not None and quantized.quantization_mode == "float8" and \
                self._compute_np() == _F32:
            b = to_compute(to_compute(b, np_dtype("bfloat16")), _F32)
        return b

    def _qkv_int8(self):
        """int8 query, key and value projections that quantize their inputs (the same input
        rows for the three): their kernels side by side, packed for one integer product, with
        their column scales and their epilogue biases (None without); None when the three are
        not alike so.  Cached per weight version, level and compute dtype."""
        names = ("query", "key", "value")
        projs = [self._quantized(p) for p in names]
        if any(p is None or p.quantization_mode != "int8" or not p._activation_quantized()
               for p in projs):
            return None
        key = (self._version, kernels.isa(), self._compute_np())
        entry = self._packed.get("qkv_int8")
        if entry is None or entry[0] != key:
            matrix = np.concatenate([p._plan.kernel_2d(p._weight("kernel")) for p in projs],
                                    axis=1)
            scale = np.concatenate([p._column_scale() for p in projs])
            bias = np.concatenate([self._projection_bias(p) for p in names]) \
                if self.use_bias else None
            entry = (key, (kernels.pack(np.ascontiguousarray(matrix)), scale, bias))
            self._packed["qkv_int8"] = entry
        return entry[1]

    def _packed_qkv(self):
        """The query, key and value kernels side by side, packed for one product, and their
        float32 biases likewise (None without); cached per weight version and compute dtype."""
        cd = self._compute_np()
        key = (self._version, cd)
        entry = self._packed.get("qkv")
        if entry is None or entry[0] != key or entry[1].stale:
            names = ("query", "key", "value")
            matrix = np.concatenate([self._matrix(self._weight(f"{p}/kernel"), p)
                                     for p in names], axis=1)
            bias = None
            if self.use_bias:
                bias = np.concatenate([self._bias32(f"{p}/bias") for p in names])
            entry = (key, kernels.pack(matrix, dtype=cd), bias)
            self._packed["qkv"] = entry
        return entry[1], entry[2]

    @staticmethod
    def _matrix(kernel, name):
        if name == "attention_output":
            return kernel.reshape(kernel.shape[0] * kernel.shape[1], -1)
        return kernel.reshape(kernel.shape[0], -1)

    def _pack(self, name, value, cd):
        """A projection's kernel packed as its GEMM matrix (for ``packed_weight``)."""
        return kernels.pack(self._matrix(value, name.split("/")[0]), dtype=cd)

    def call(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
             attention_mask=None, return_attention_scores=False, training=False,
             use_causal_mask=False):
        q_in = self._as_compute(query)
        v_in = self._as_compute(value)
        k_in = v_in if key is None else self._as_compute(key)
        cd = q_in.dtype
        v_in, k_in = to_compute(v_in, cd), to_compute(k_in, cd)
        b = q_in.shape[0]
        t_dims, s_dims = tuple(q_in.shape[1:-1]), tuple(v_in.shape[1:-1])
        t, s = int(np.prod(t_dims)), int(np.prod(s_dims))
        n, h, hv = self.num_heads, self.key_dim, self.value_dim
        sixteen = cd.itemsize == 2
        out16 = dtype_name(cd) if sixteen else None

        xq = q_in.reshape(b * t, -1)
        xv = v_in.reshape(b * s, -1)
        xk = xv if key is None else k_in.reshape(b * s, -1)
        qkv = None
        if not training and key is None and q_in is v_in and _gemm_ok(xq):
            # self-attention at inference: the three projections as one product (each column
            # is the same sum as in its own product, so the same bits), views of its columns
            if not any(p in self._projection_quant for p in ("query", "key", "value")):
                packed, bias = self._packed_qkv()
                qkv = kernels.matmul(xq, packed, bias=bias, out_dtype=out16)
            else:
                int8 = self._qkv_int8()
                if int8 is not None:
                    packed8, b_scale, bias = int8
                    quantizer = self._quantized("query")._activation_quantizer()
                    qkv = int8_product(xq, packed8, b_scale, quantizer, bias=bias,
                                       out_dtype=out16)
        if qkv is not None:
            qp = qkv[:, :n * h].reshape(b, t, n, h)
            kp = qkv[:, n * h:2 * n * h].reshape(b, s, n, h)
            vp = qkv[:, 2 * n * h:].reshape(b, s, n, hv)
        else:
            qp = self._project(xq, "query", training).reshape(b, t, n, h)
            kp = self._project(xk, "key", training).reshape(b, s, n, h)
            vp = self._project(xv, "value", training).reshape(b, s, n, hv)
        qh = qp.transpose(0, 2, 1, 3)                   # (b, n, t, h), views
        kh = kp.transpose(0, 2, 1, 3)
        vh = vp.transpose(0, 2, 1, 3)

        out_tail = self._out_tail
        if training and any(p.quantization_mode == "float8"
                            for p, _ in self._projection_quant.values()):
            raise ValueError(f"MultiHeadAttention '{self.name}': float8 projections are "
                             f"inference-only in mixedcore (float8 training's scale updates are "
                             f"not implemented)")
        if not training and not return_attention_scores and _gemm_ok(qh):
            # inference: the fused kernel, the same numbers as the path below without the
            # (b, n, t, s) scores in memory (docs/layers.md, MultiHeadAttention)
            causal = use_causal_mask and self.sliding_window is None
            mask = self._attention_mask(b, t_dims, s_dims, query_mask, value_mask, key_mask,
                                        attention_mask, use_causal_mask and not causal,
                                        key is not None)
            o = np.empty((b, t, n, hv), dtype=cd)
            kernels.attention(qh, kh, vh, scale=self._scale, mask=mask, causal=causal,
                              out=o.transpose(0, 2, 1, 3))
            y = self._project(o.reshape(b * t, n * hv), "attention_output", training)
            return y.reshape((b,) + t_dims + out_tail)

        scores = _mm(qh, kh.transpose(0, 1, 3, 2), alpha=self._scale)     # float32 (b, n, t, s)
        w = scores.dtype
        mask = self._attention_mask(b, t_dims, s_dims, query_mask, value_mask, key_mask,
                                    attention_mask, use_causal_mask, key is not None)
        if mask is not None:
            scores = np.where(mask, scores, w.type(_MASKED))
        probs = None
        if training or cd == w:             # the work-dtype probabilities the gradient uses
            probs = _softmax_last(scores)
            if mask is not None:
                probs = np.where(mask, probs, w.type(0))
        if cd == w:
            p_cd = probs
        else:
            # a 16-bit compute dtype: the fused kernel's float32 softmax rounded to it, so that
            # this path (training included) and the fused one give the same probabilities
            p_cd = _softmax_last(scores, cd)
            if mask is not None:
                p_cd = np.where(mask, p_cd, cd.type(0))

        keep = None
        p_used = p_cd
        if training and self.dropout > 0:
            rng = self._generator if self._generator is not None else _random.generator()
            keep = (rng.random(probs.shape) >= self.dropout).astype(w) * \
                w.type(1.0 / (1.0 - self.dropout))
            p_used = to_compute(to_compute(p_cd, w) * keep, cd)

        o = np.empty((b, t, n, hv), dtype=cd)
        _mm(p_used, vh, out=o.transpose(0, 2, 1, 3))     # (b, n, t, hv) into (b, t, n, hv)
        o2 = o.reshape(b * t, n * hv)
        y = self._project(o2, "attention_output", training)
        y = y.reshape((b,) + t_dims + out_tail)
        if training:
            self._train_cache = dict(xq=xq, xk=xk, xv=xv, qh=qh, kh=kh, vh=vh, probs=probs,
                                     p_used=p_used, keep=keep, o2=o2, cd=cd, key_given=key
                                     is not None, shapes=(q_in.shape, v_in.shape, k_in.shape),
                                     b=b, t=t, s=s, out16=out16)
        if return_attention_scores:
            return y, p_cd.reshape((b, n) + t_dims + s_dims)
        return y

    def backward(self, dy, need_input_grad=True):
        c = self._train_cache
        cd, b, t, s = c["cd"], c["b"], c["t"], c["s"]
        n, h, hv = self.num_heads, self.key_dim, self.value_dim
        out16 = c["out16"]
        grads = {}

        def dense_backward(name, x2, dz2, need_dx):
            """Weight gradients of a projection (float32), and the input gradient."""
            kernel, bias = f"{name}/kernel", f"{name}/bias"
            if name not in self._projection_quant:      # a quantized kernel is frozen
                grads[kernel] = np.asarray(_mm(x2.T, dz2)).reshape(self._weight(kernel).shape)
            if self.use_bias:
                db = to_compute(dz2, work_dtype(dz2.dtype)).sum(axis=0)
                grads[bias] = db.reshape(self._weight(bias).shape)
            if not need_dx:
                return None
            return _mm(dz2, self._kernel_matrix(name).T, out_dtype=out16)

        dy_scores = None
        if isinstance(dy, (list, tuple)):       # a call with return_attention_scores
            dy, dy_scores = dy
        dy2 = to_compute(np.asarray(dy), cd).reshape(b * t, -1)
        do2 = dense_backward("attention_output", c["o2"], dy2, True)
        doh = do2.reshape(b, t, n, hv).transpose(0, 2, 1, 3)             # (b, n, t, hv)

        d_pused = _mm(doh, c["vh"].transpose(0, 1, 3, 2))                 # float32 (b, n, t, s)
        dvp = np.empty((b, s, n, hv), dtype=cd)
        _mm(c["p_used"].transpose(0, 1, 3, 2), doh, out=dvp.transpose(0, 2, 1, 3))
        dp = d_pused if c["keep"] is None else d_pused * c["keep"]
        probs = c["probs"]
        if dy_scores is not None:
            dp = dp + to_compute(np.asarray(dy_scores), dp.dtype).reshape(probs.shape)
        dscores = probs * (dp - np.sum(dp * probs, axis=-1, keepdims=True))
        ds = to_compute(dscores, cd)

        dqp = np.empty((b, t, n, h), dtype=cd)
        _mm(ds, c["kh"], alpha=self._scale, out=dqp.transpose(0, 2, 1, 3))
        dkp = np.empty((b, s, n, h), dtype=cd)
        _mm(ds.transpose(0, 1, 3, 2), c["qh"], alpha=self._scale, out=dkp.transpose(0, 2, 1, 3))

        dxq = dense_backward("query", c["xq"], dqp.reshape(b * t, n * h), need_input_grad)
        dxk = dense_backward("key", c["xk"], dkp.reshape(b * s, n * h), need_input_grad)
        dxv = dense_backward("value", c["xv"], dvp.reshape(b * s, n * hv), need_input_grad)
        self._set_gradients(grads)
        if not need_input_grad:
            return None
        q_shape, v_shape, k_shape = c["shapes"]
        dq = to_compute(np.asarray(dxq), cd).reshape(q_shape)
        if c["key_given"]:
            return {"query": dq, "value": to_compute(np.asarray(dxv), cd).reshape(v_shape),
                    "key": to_compute(np.asarray(dxk), cd).reshape(k_shape)}
        w = work_dtype(cd)
        dv = to_compute(to_compute(np.asarray(dxv), w) + to_compute(np.asarray(dxk), w), cd)
        return {"query": dq, "value": dv.reshape(v_shape), "key": None}

    def keras_weight_paths(self):
        """Keras's layout: each projection's variables under its sub-layer's path, in the
        order Keras's EinsumDense files them (kernel, bias, then a quantized mode's scales)."""
        if not self._names:
            return super().keras_weight_paths()
        position = {creation: pos for pos, creation in enumerate(self._weight_index_order())}
        paths = []
        for name in _WEIGHTS:
            quantized = self._quantized(name)
            order = ["kernel", "bias"] if quantized is None else \
                quantized._serialization_order(quantized.quantization_mode)
            paths.append((_SUBLAYERS[name], [position[self._names.index(f"{name}/{w}")]
                                             for w in order if f"{name}/{w}" in self._names]))
        return paths

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads, "key_dim": self.key_dim, "value_dim": self.value_dim,
            "dropout": self.dropout, "use_bias": self.use_bias,
            "output_shape": self._output_shape_arg,
            "attention_axes": self.attention_axes,
            "sliding_window": self.sliding_window,
            "kernel_initializer": _initializers.serialize(self.kernel_initializer),
            "bias_initializer": _initializers.serialize(self.bias_initializer),
            "kernel_regularizer": _regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": _regularizers.serialize(self.bias_regularizer),
            "seed": self.seed,
            "activity_regularizer": None, "kernel_constraint": None, "bias_constraint": None,
            "use_gate": False,
        })
        if self._projection_quant:
            # Keras builds the projections as sub-layers under the layer's policy; a policy map
            # gives each quantized one its policy by path, so Keras loads the file
            policy_map = _dtype_policies.DTypePolicyMap(default_policy=self.dtype_policy)
            for name, (policy, _) in self._projection_quant.items():
                if not self._quantized(name).config_in_file():
                    raise ValueError(
                        f"MultiHeadAttention '{self.name}': the {name} projection was quantized "
                        f"with {self._projection_quant[name][1]!r}; a Keras file holds only "
                        f"the policy {policy.name!r} of each projection (the mode's default "
                        f"config), so this layer cannot be saved; quantize it with the mode's "
                        f"default config to save it")
                policy_map[f"{self.name}/{name}"] = policy
            config["dtype"] = _dtype_policies.serialize(policy_map)
        return config


def _projection_plan(layer_name, name, rank, contracted, tail):
    """The einsum product of a projection as Keras's MultiHeadAttention writes it for inputs of
    ``rank``: the free axes (batch, positions) kept, the ``contracted`` ones summed against the
    kernel's leading axes, the kernel's ``tail`` axes appended ("abc,cde->abde" for the query
    of a (batch, seq, features) input, "abcd,cde->abe" for the output)."""
    free = rank - 1
    letters = string.ascii_lowercase
    x = letters[:free + len(contracted)]
    w = letters[free:free + len(contracted) + len(tail)]
    y = letters[:free] + w[len(contracted):]
    shape = (None,) * free + tuple(contracted)
    partial = (None,) * (free - 1) + tuple(tail)
    return _Plan(f"MultiHeadAttention '{layer_name}' ({name})", f"{x},{w}->{y}",
                 w[len(contracted):], shape, partial)


class _QuantizedProjection(QuantizedEinsumDense):
    """One quantized projection of a MultiHeadAttention, as Keras's EinsumDense sub-layer
    quantizes it: the quantized einsum product read through the layer's weights
    ("query/kernel", "query/kernel_scale", ...)."""

    def __init__(self, layer, name, plan, policy, config):
        self._layer, self._sub = layer, name
        self._plan = plan
        self.dtype_policy = policy
        self.quantization_config = config
        self.kernel_initializer = layer.kernel_initializer
        self.name = f"{layer.name}/{name}"
        self._qcache = None

    @property
    def _version(self):
        return self._layer._version

    def _compute_np(self):
        return self._layer._compute_np()

    def _weight(self, name):
        return self._layer._weight(f"{self._sub}/{name}")

    def _owner(self):
        return f"MultiHeadAttention '{self._layer.name}' ({self._sub} projection)"

    def config_in_file(self):
        """Whether a Keras file can hold this projection's config: Keras gives the layer's
        sub-layers their policies only (from a policy map), so the mode's default config."""
        config = self.quantization_config
        if config is None:
            return True
        default = _quantizers.resolve_config(self._owner(), config.mode, None)
        if isinstance(config, _quantizers.Int4QuantizationConfig):
            default = _quantizers.Int4QuantizationConfig(block_size=config.block_size)
        return config == default


class _Projection:
    """One projection's weights as Keras's EinsumDense sub-layer shows them: ``kernel`` and
    ``bias`` (None before the layer is built, and the bias without ``use_bias``); ``name`` is
    the sub-layer's name, ``path`` its path."""

    __slots__ = ("_layer", "_name")

    def __init__(self, layer, name):
        self._layer, self._name = layer, name

    @property
    def name(self):
        return self._name

    @property
    def path(self):
        return f"{self._layer.name}/{self._name}"

    @property
    def kernel(self):
        return self._layer._weight(f"{self._name}/kernel")

    @property
    def bias(self):
        return self._layer._weight(f"{self._name}/bias")


def _softmax_last(scores, out_dtype=None):
    """Softmax along the last axis: the compiled float32 kernel (rounded to a 16-bit
    ``out_dtype`` when given), numpy for float64."""
    if scores.dtype == np.float32:
        return kernels.softmax(scores, -1, out_dtype=out_dtype)
    with np.errstate(under="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
