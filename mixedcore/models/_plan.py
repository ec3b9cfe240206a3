"""Compiled inference: a functional model's graph lowered once into a ``kernels.Plan``.

Design:
  A. When.  A graph's inference call (``Graph.infer``: ``predict``, ``model(x)``, the command
     line's ``predict``) in which no masks flow and no observer is set runs a plan.  A plan is made
     at the first call for a tuple of input shapes and dtypes at the current ISA level, and is
     kept (the last ``MAX_PLANS`` of them, whose arenas hold at most ``MAX_ARENA_BYTES``
     together besides the newest one's) while the weights it holds are current: it records
     each such layer's weight version (``_version``, which every weight change moves) and dtype
     policy object, and is made again when one differs; the layers are compared only when
     some layer's weights or policy changed since the last comparison (``state_epoch``, one
     number every such change moves: a predict does not walk the model's layers).  Training
     runs the graph layer by layer.
  B. How.  The graph first runs once layer by layer (with its folds), recording every tensor's
     shape and dtype -- that run's outputs are the call's --; then each node, in run order,
     becomes plan steps, a fold (``_folding``) lowered as its fused call:
       - Conv1D, Conv2D and DepthwiseConv2D (a BatchNormalization folded in or not; an
         activation of ``activations.FUSED`` or linear, its own or folded) -> a convolution
         step with the layer's packed (folded) weights and float32 bias, epilogue activation and
         output in the compute dtype (Conv1D on the one-row image view); a pointwise Conv2D is
         the GEMM's step; SeparableConv2D -> its depthwise step, rounded to the compute dtype,
         then its pointwise step;
       - Dense (its kernel applied over the last axis) -> the GEMM's step; a Dense quantized
         to int8 whose inputs are quantized per row -> the int8 step (row quantization, then
         the int8 GEMM);
       - MultiHeadAttention called as self-attention (``mha(x, x)``, causal or not, no masks)
         on (batch, T, features), its projections float or int8 with quantized inputs -> the
         one QKV product, the fused attention over views of it, the output projection (an Add
         after it in its epilogue, as for Dense);
       - Add of two tensors of one shape, with the activation folded after it or not -> the
         sum's step; or, when one of them is made by a Conv2D, SeparableConv2D or Dense step
         without an activation of its own and read by the Add alone, and the other is ready by
         then, the sum and its activation run in that step's epilogue (``residual``: the
         product is rounded to the compute dtype first, so the bits are the two steps');
       - MaxPooling2D / AveragePooling2D -> the pooling step; GlobalAveragePooling1D/2D -> the
         pooling step with each whole image as its window;
       - LayerNormalization over the last axis, and the fold of an Add read only by one (the
         sum normalized in one pass) -> the layer normalization step, its residual the second
         operand;
       - ZeroPadding2D read only by a convolution with "valid" padding -> that padding in the
         convolution's window (no padded copy; an input in another floating dtype cast first,
         as the layer's call casts it); read by anything else -> the padding step (a copy with
         zeros around it); Flatten and Reshape -> views;
       - an operand of a step above in another float type than the layer computes in -> first
         the conversion step (``Plan.cast``: the cast the layer's call makes), so the model's
         input cast under a mixed policy is a C step too;
       - anything else (and anything above whose operands are not in a float type) -> a Python
         step that calls the layer (or runs the fold) as the graph does.
     Each lowered step is the kernel call the layer (or fold) makes at inference with the same
     operands, so a plan gives the bits of the layer-by-layer inference with the same folds,
     under every policy (tests/test_plan.py).
  C. Activations stay in each layer's compute dtype between layers (16-bit under the mixed
     policies): the layers' outputs are, and the plan keeps them in its arena (``Plan``);
     only a layer whose operands are in another dtype casts them, as its own call would.
  D. Strides taken early.  A residual block's output ``T = act(conv1x1(U) + Q)`` read only by
     1x1 Conv2D steps of one stride s (> 1), where ``U`` is made by a stride-1 Conv2D step
     (dilation 1) read only by that 1x1 convolution, is computed at s: the convolution making
     ``U`` takes s with its stride-1 padding written out, the 1x1 product runs on that
     subsample with ``Q`` subsampled by a 1x1 max pooling at s (a bitwise copy) as its
     residual, and the readers run at stride 1.  ``_find_strided`` finds such blocks before
     lowering, checking every condition the lowering of their steps needs, so none of them
     becomes a Python step.
"""
from __future__ import annotations

import numpy as np

from mixedcore import activations as _activations
from mixedcore import kernels
from mixedcore._dtypes import CASTABLE, dtype_name, is_floating, to_compute
from mixedcore.layers._attention import MultiHeadAttention
from mixedcore.layers._base import state_epoch
from mixedcore.layers._conv import Conv1D, Conv2D, DepthwiseConv2D, SeparableConv2D
from mixedcore.layers._core import Dense
from mixedcore.layers._merging import Add
from mixedcore.layers._node import KerasTensor, flatten, map_structure
from mixedcore.layers._normalization import LayerNormalization
from mixedcore.layers._pooling import (AveragePooling2D, GlobalAveragePooling1D,
                                       GlobalAveragePooling2D, MaxPooling2D)
from mixedcore.layers._quantized import in_kernels
from mixedcore.layers._reshaping import Flatten, Reshape, ZeroPadding2D

__all__ = ["InferencePlan", "CHUNK_BYTES", "MAX_PLANS", "MAX_ARENA_BYTES"]

# plans kept per graph, and the bytes their arenas may hold together (the plan in use is kept
# whatever its size)
MAX_PLANS = 4
MAX_ARENA_BYTES = 1 << 30
# the arena bytes a chunk of a batch may fill (Graph, design H): a quarter of a 32 MiB L3, so
# that a chunk's activations and the weights of the layers at hand stay in cache; measured
# best among 2-32 MiB for MobileNetV2 and ResNet50 (bench/compare_architectures.py)
CHUNK_BYTES = 8 << 20
_GEMM = ("float16", "bfloat16", "float32")
_PROJECTIONS = ("query", "key", "value", "attention_output")


def plan_key(values):
    """What a plan is made for: the inputs' shapes and dtypes and the ISA level."""
    return (tuple((v.shape, v.dtype.str) for v in values), kernels.isa())


class InferencePlan:
    """A graph's inference for one tuple of input shapes and dtypes (design A, B)."""

    def __init__(self, graph, values, specs):
        """``specs``: ``{id(tensor): (shape, dtype)}`` of a run of the graph on ``values``."""
        self.key = plan_key(values)
        self._specs = specs
        for t, v in zip(graph.inputs, values):
            self._specs[id(t)] = (v.shape, v.dtype)
        # the state_epoch() when the plan's layers were last found current: read before the
        # plan reads them, so that a change while it does moves the epoch past it
        self._epoch = state_epoch()
        self._held = []                 # (layer, weight version, dtype policy) the plan holds
        self.plan = kernels.Plan()
        self._env = {}                  # id(tensor) -> (buffer, pending padding layer or None)
        for t, v in zip(graph.inputs, values):
            self._env[id(t)] = (self.plan.input(v.shape, v.dtype), None)
        self._uses = graph.uses
        self._folds = graph._folds
        self._readers = {}               # id(tensor) -> the nodes that read it
        for node in graph.nodes:
            for t in node.input_tensors:
                self._readers.setdefault(id(t), []).append(node)
        self._skipped = set()
        # design D: tensors computed at the strides their readers take (key -> strides), the
        # convolutions that take those strides and the readers that no longer do
        self._strided, self._absorb, self._drop = {}, {}, set()
        self._find_strided(graph)
        for node, single, _, _, _ in graph._steps:
            if id(node) in self._skipped:
                continue
            fold = self._fold(node)
            if fold is not None:
                self._skipped.update(fold.skipped)
            if not self._lower(node, single, fold):
                self._python_step(node, fold)
        outputs = [self._buffer(id(t)) for t in graph.outputs]
        self.plan.finish(outputs)
        self.out_shapes = [self.plan.shape(o) for o in outputs]
        del self._env, self._specs, self._uses, self._folds, self._readers, self._skipped
        del self._strided, self._absorb, self._drop

    # -- validity and running ------------------------------------------------------------------
    def current(self):
        """Whether the weights and policies the plan holds are still the layers' (design A):
        checked layer by layer only when some layer's weights or policy changed since the
        last check (``layers._base.state_epoch``)."""
        epoch = state_epoch()             # read first: a change during the check moves it
        if epoch == self._epoch:
            return True
        if all(layer._version == version and layer._dtype_policy is policy
               for layer, version, policy in self._held):
            self._epoch = epoch
            return True
        return False

    def run(self, values):
        return self.plan.run(values)

    @property
    def nbytes(self):
        return self.plan.nbytes

    # -- strides taken early (design D) ---------------------------------------------------------
    def _find_strided(self, graph):
        """Marks the tensors of design D: a residual block's output ``T = act(P + Q)`` read
        only by pointwise convolutions of one stride s, ``P = conv1x1(U)`` and ``U = conv(V)``
        (stride 1, each read only by the next): ``U``, ``P`` and ``T`` are computed at s, the
        convolution making ``U`` takes s, and the readers read ``T`` at stride 1."""
        skipped = set()
        for node, _, _, _, _ in graph._steps:
            fold = self._fold(node)
            if fold is not None:
                skipped.update(fold.skipped)
        made = {}                    # tensor id -> the node of the step that makes it
        for node, _, _, out_ids, _ in graph._steps:
            if id(node) not in skipped:
                fold = self._fold(node)
                for key in ([fold.out] if fold is not None else out_ids):
                    made[key] = node
        order = {id(node): i for i, node in enumerate(graph.nodes)}
        single = {id(node): key for node, key, _, _, _ in graph._steps}

        def conv_step(node, key):
            """Whether ``node`` lowers to a Conv2D step of its own reading ``key``."""
            layer = node.layer
            return type(layer) is Conv2D and key is not None and single[id(node)] == key and \
                len(node.output_tensors) == 1 and layer.groups == 1 and \
                layer.dilation_rate == (1, 1) and dtype_name(layer._compute_np()) in _GEMM and \
                self._epilogue(layer, self._fold(node)) is not None

        def only_reader(key):
            readers = self._readers.get(key, [])
            return readers[0] if self._uses.get(key) == 1 and len(readers) == 1 else None

        for key, add in made.items():
            readers = self._readers.get(key, [])
            fold = self._fold(add)
            if not readers or self._uses.get(key) != len(readers) or \
                    type(add.layer) is not Add or (fold is not None and fold.norm is not None) \
                    or len(self._specs[key][0]) != 4:
                continue
            if not all(conv_step(r, key) and r.layer.kernel_size == (1, 1) for r in readers):
                continue
            strides = {r.layer.strides for r in readers}
            if len(strides) != 1 or strides == {(1, 1)}:
                continue
            operands = _sum_operands(add)
            if operands is None or operands[0] is operands[1]:
                continue
            # P: the operand made last, whose product takes the sum in its epilogue
            q_key, p_key = sorted((id(t) for t in operands),
                                  key=lambda k: order[id(made[k])] if k in made else -1)
            c1 = made.get(p_key)
            cd = add.layer._compute_np()
            if c1 is None or only_reader(p_key) is not add or c1.layer._compute_np() != cd or \
                    self._specs[q_key] != self._specs[p_key] or self._specs[p_key][1] != cd:
                continue
            u_key = single[id(c1)]
            if not conv_step(c1, u_key) or c1.layer.kernel_size != (1, 1) or \
                    c1.layer.strides != (1, 1) or \
                    self._epilogue(c1.layer, self._fold(c1))[1] is not None or \
                    u_key not in made or only_reader(u_key) is not c1:
                continue
            c0 = made[u_key]
            if not conv_step(c0, single[id(c0)]) or c0.layer.strides != (1, 1) or \
                    id(c0) in self._drop or any(id(r) in self._absorb for r in readers):
                continue
            [s] = strides
            self._strided.update({u_key: s, p_key: s, key: s})
            self._absorb[id(c0)] = s
            self._drop.update(id(r) for r in readers)

    def _shape(self, key):
        """The shape of tensor ``key``'s buffer: the graph's, at its strides (design D)."""
        shape = tuple(self._specs[key][0])
        if key not in self._strided:
            return shape
        (sh, sw), (n, h, w, c) = self._strided[key], shape
        return n, -(-h // sh), -(-w // sw), c

    # -- lowering -------------------------------------------------------------------------------
    def _hold(self, layer):
        self._held.append((layer, layer._version, layer._dtype_policy))

    def _fold(self, node):
        return self._folds.get(id(node)) if node.layer.built else None

    def _residual(self, key, cd):
        """When the tensor ``key`` (a product's result, in ``cd``) is read by one Add alone
        whose other operand is ready in ``cd`` with its shape: (that operand's buffer, the Add's
        activation, the Add's output key), and the Add is taken as lowered; else None."""
        readers = self._readers.get(key, [])
        if self._uses.get(key) != 1 or len(readers) != 1 or type(readers[0].layer) is not Add:
            return None
        node = readers[0]
        arg = _sum_operands(node)
        if arg is None:
            return None
        others = [t for t in arg if id(t) != key]
        if len(others) != 1 or id(others[0]) not in self._env or \
                node.layer._compute_np() != cd:
            return None
        fold = self._fold(node)
        if fold is not None and fold.norm is not None:
            return None
        other = self._buffer(id(others[0]))
        if self.plan.dtype(other) != cd or self.plan.shape(other) != tuple(self._specs[key][0]):
            return None
        if key in self._strided:            # design D: the other operand at those strides
            other = self.plan.pool2d(other, (1, 1), strides=self._strided[key], mode="max")
        self._skipped.add(id(node))
        if fold is not None:
            self._skipped.update(fold.skipped)
            return other, fold.activation, fold.out
        return other, None, id(node.output_tensors[0])

    def _buffer(self, key):
        """The buffer of a tensor, a pending padding made real first (the padding step when it
        gives the layer's shape and dtype, else the layer's call)."""
        buf, pad = self._env[key]
        if pad is not None:
            shape, dtype = self._specs[key]
            (top, bottom), (left, right) = pad.padding
            n, h, w, c = self.plan.shape(buf)
            if self.plan.dtype(buf) == dtype and \
                    tuple(shape) == (n, h + top + bottom, w + left + right, c):
                padded = self.plan.pad2d(buf, pad.padding)
            else:
                [padded] = self.plan.call(_calling(pad), [buf], [(shape, dtype)])
            buf = padded
            self._env[key] = (buf, None)
        return buf

    def _operand(self, key, cd):
        """The buffer of a tensor for a layer computing in ``cd``: cast first when in another
        floating dtype (as the layer's call casts it); None when it cannot be."""
        buf = self._buffer(key)
        dt = self.plan.dtype(buf)
        if dt == cd:
            return buf
        if not is_floating(dt):
            return None
        if dt in CASTABLE and cd in CASTABLE:       # to_compute's kernels.cast
            return self.plan.cast(buf, cd)
        [buf] = self.plan.call(lambda a: [to_compute(a, cd)], [buf],
                               [(self.plan.shape(buf), cd)])
        return buf

    def _lower(self, node, single, fold):
        layer = node.layer
        if type(layer) is MultiHeadAttention and fold is None:
            return self._lower_attention(node)
        if single is None or len(node.output_tensors) != 1:
            return self._lower_add(node, fold) if type(layer) is Add else False
        out = fold.out if fold is not None else id(node.output_tensors[0])
        kind = type(layer)
        cd = layer._compute_np()
        if kind in (Conv1D, Conv2D, DepthwiseConv2D, SeparableConv2D):
            return self._lower_conv(node, single, fold, out, cd)
        if kind is Dense:
            if layer.quantization_mode is not None:
                return self._lower_dense_int8(layer, single, fold, out, cd)
            return self._lower_dense(layer, single, fold, out, cd)
        if fold is not None:
            return False
        if kind is LayerNormalization:
            return self._lower_norm(layer, [single], out, cd)
        if kind in (MaxPooling2D, AveragePooling2D):
            if dtype_name(cd) not in _GEMM:
                return False
            src = self._operand(single, cd)
            if src is None:
                return False
            self._env[out] = (self.plan.pool2d(src, layer.pool_size, strides=layer.strides,
                                               padding=layer.padding, mode=layer._mode), None)
            return True
        if kind in (GlobalAveragePooling1D, GlobalAveragePooling2D):
            return self._lower_global_average(single, out, cd)
        if kind is ZeroPadding2D:
            buf, pad = self._env[single]
            if pad is not None or self._uses.get(out) != 1 or dtype_name(cd) not in _GEMM or \
                    layer.data_format != "channels_last":
                return False
            if self.plan.dtype(buf) != cd:
                if not layer.autocast:
                    return False
                buf = self._operand(single, cd)     # the cast the layer's call makes first
                if buf is None:
                    return False
            self._env[out] = (buf, layer)
            return True
        if kind in (Flatten, Reshape):
            buf = self._buffer(single)
            if self.plan.dtype(buf) != cd:
                return False
            self._env[out] = (self.plan.reshape(buf, self._specs[out][0]), None)
            return True
        return False

    def _lower_global_average(self, single, out, cd):
        """The pooling step over each whole image (a sequence: an image of one row), as the
        layer's call pools."""
        if dtype_name(cd) not in _GEMM:
            return False
        src = self._operand(single, cd)
        if src is None:
            return False
        shape = self.plan.shape(src)
        if not all(shape[1:-1]):
            return False
        if len(shape) == 3:
            src = self.plan.reshape(src, (shape[0], 1) + shape[1:])
        pooled = self.plan.pool2d(src, self.plan.shape(src)[1:3], mode="average")
        self._env[out] = (self.plan.reshape(pooled, self._specs[out][0]), None)
        return True

    def _epilogue(self, layer, fold):
        """(norm or None, activation name or None) of a product's fused call, or None when
        its activation does not run in the epilogue."""
        if fold is not None:
            return fold.norm, fold.activation
        act = layer.activation
        if act != "linear" and act not in _activations.FUSED:
            return None
        return None, None if act == "linear" else act

    def _lower_conv(self, node, single, fold, out, cd):
        layer = node.layer
        epilogue = self._epilogue(layer, fold)
        if epilogue is None or dtype_name(cd) not in _GEMM:
            return False
        norm, act = epilogue
        buf, pad = self._env[single]
        opts = layer._opts()
        if pad is not None and opts["padding"] == "valid" and self.plan.dtype(buf) == cd:
            opts["padding"] = pad.padding   # the zeros in the window, not in a copy
        else:
            buf = self._operand(single, cd)
            if buf is None:
                return False
        if id(node) in self._absorb:        # design D: the readers' strides taken here
            opts["padding"] = _explicit_padding(opts["padding"], layer.kernel_size)
            opts["strides"] = self._absorb[id(node)]
        elif id(node) in self._drop:        # reads its input at those strides already
            opts["strides"] = (1, 1)
        if layer._rank == 1:                # (batch, steps, channels) as a one-row image
            n, w, c = self.plan.shape(buf)
            buf = self.plan.reshape(buf, (n, 1, w, c))
        kind = type(layer)
        depthwise = kind is DepthwiseConv2D or (kind is not SeparableConv2D and
                                                layer.depthwise_form())
        residual = None
        if layer._rank == 2 and not depthwise and act is None:
            residual = self._residual(out, cd)
        if kind is SeparableConv2D:         # depthwise, rounded to the compute dtype, pointwise
            buf = self.plan.depthwise_conv2d(buf, layer._compute_weight("depthwise_kernel"),
                                             out_dtype=cd, **opts)
            kernel, bias = layer._inference_operands("pointwise_kernel")
            opts = dict(SeparableConv2D._POINTWISE)
        else:
            kernel, bias = layer._folded_operands(norm)
        if depthwise:
            dst = self.plan.depthwise_conv2d(buf, kernel, bias=bias, activation=act,
                                             out_dtype=cd, **opts)
        elif residual is not None:
            other, act, out = residual
            dst = self.plan.conv2d(buf, kernel, bias=bias, activation=act, out_dtype=cd,
                                   residual=other, **opts)
        else:
            dst = self.plan.conv2d(buf, kernel, bias=bias, activation=act, out_dtype=cd, **opts)
        if layer._rank == 1:
            dst = self.plan.reshape(dst, self._specs[out][0])
        elif self.plan.shape(dst) != self._shape(out):
            raise RuntimeError(f"inference plan: {layer.name} gives shape "
                               f"{self.plan.shape(dst)}, the graph {self._shape(out)}")
        self._hold(layer)
        if norm is not None:
            self._hold(norm)
        self._env[out] = (dst, None)
        return True

    def _lower_dense(self, layer, single, fold, out, cd):
        epilogue = self._epilogue(layer, fold)
        if epilogue is None or dtype_name(cd) not in _GEMM:
            return False
        buf = self._buffer(single)
        if self.plan.dtype(buf) != cd:      # Dense computes in its input's dtype
            return False
        norm, act = epilogue
        kernel, bias = layer._folded_operands(norm)
        residual = self._residual(out, cd) if act is None else None
        if residual is not None:
            other, act, out = residual
            dst = self.plan.matmul(buf, kernel, bias=bias, activation=act, out_dtype=cd,
                                   residual=other)
        else:
            dst = self.plan.matmul(buf, kernel, bias=bias, activation=act, out_dtype=cd)
        self._hold(layer)
        if norm is not None:
            self._hold(norm)
        self._env[out] = (dst, None)
        return True

    def _lower_dense_int8(self, layer, single, fold, out, cd):
        """A Dense quantized to int8 whose inputs are quantized per row: one matmul_int8 step,
        the calls its inference makes (quantize_rows, then the int8 product with the bias and
        a fused activation in the epilogue).  Other quantized modes keep their own call."""
        if fold is not None or layer.quantization_mode != "int8" or \
                not layer._activation_quantized() or dtype_name(cd) not in _GEMM or \
                not in_kernels(layer._activation_quantizer()):
            return False
        act = layer.activation
        if act != "linear" and act not in _activations.FUSED:
            return False
        buf = self._buffer(single)
        if self.plan.dtype(buf) != cd:      # Dense computes in its input's dtype
            return False
        packed, b_scale = layer._prepared("int8", layer._int8_operands)
        bias = layer._bias32("bias") if layer.use_bias else None
        dst = self.plan.matmul_int8(buf, packed, b_scale, bias=bias,
                                    activation=None if act == "linear" else act, out_dtype=cd,
                                    zero_point=layer._activation_zero_point())
        self._hold(layer)
        self._env[out] = (dst, None)
        return True

    def _lower_attention(self, node):
        """A MultiHeadAttention called as self-attention, ``layer(x, x)`` (or with
        ``use_causal_mask=True``), on a (batch, T, features) tensor of its compute dtype: its
        inference call as steps -- the three projections as one product, the fused attention
        over views of it, the output projection (with a following Add in its epilogue) -- the
        same calls, so the same bits.  The three input projections float or all int8 ones that
        quantize their inputs in the kernels, and the output projection either (whichever the
        others are); anything else keeps the layer's call."""
        layer = node.layer
        args, kwargs = node.args, node.kwargs
        if len(args) != 2 or args[0] is not args[1] or not isinstance(args[0], KerasTensor) or \
                len(node.output_tensors) != 1:
            return False
        if any(value is not None and value is not False for name, value in kwargs.items()
               if name != "use_causal_mask") or layer.sliding_window is not None:
            return False
        causal = kwargs.get("use_causal_mask", False) is True
        cd = layer._compute_np()
        key = id(args[0])
        if dtype_name(cd) not in _GEMM or len(self._specs[key][0]) != 3:
            return False
        buf = self._buffer(key)
        if self.plan.dtype(buf) != cd:
            return False
        quant = {name: layer._quantized(name) for name in _PROJECTIONS}
        int8 = {name: q is not None and q.quantization_mode == "int8" and
                q._activation_quantized() and in_kernels(q._activation_quantizer())
                for name, q in quant.items()}
        inputs = ("query", "key", "value")
        if any(quant[p] is not None and not int8[p] for p in _PROJECTIONS) or \
                len({int8[p] for p in inputs}) != 1:
            return False
        n, h, hv = layer.num_heads, layer.key_dim, layer.value_dim
        out = id(node.output_tensors[0])
        if int8["query"]:
            zero_point = quant["query"]._activation_zero_point()
            packed, b_scale, bias = layer._qkv_int8()
            qkv = self.plan.matmul_int8(buf, packed, b_scale, bias=bias, out_dtype=cd,
                                        zero_point=zero_point)
        else:
            packed, bias = layer._packed_qkv()
            qkv = self.plan.matmul(buf, packed, bias=bias, out_dtype=cd)
        o = self.plan.attention(qkv, heads=n, key_dim=h, value_dim=hv, scale=layer._scale,
                                causal=causal)
        tail = layer._out_tail
        bias = layer._projection_bias("attention_output")
        if int8["attention_output"]:
            proj = quant["attention_output"]
            packed, b_scale = proj._prepared("int8", proj._int8_operands)
            dst = self.plan.matmul_int8(o, packed, b_scale, bias=bias, out_dtype=cd,
                                        zero_point=proj._activation_zero_point())
        else:
            kernel = layer.packed_weight("attention_output/kernel")
            residual = self._residual(out, cd) if len(tail) == 1 else None
            if residual is not None:
                other, act, out = residual
                dst = self.plan.matmul(o, kernel, bias=bias, activation=act, out_dtype=cd,
                                       residual=other)
            else:
                dst = self.plan.matmul(o, kernel, bias=bias, out_dtype=cd)
        if len(tail) != 1:
            dst = self.plan.reshape(dst, self._specs[out][0])
        self._hold(layer)
        self._env[out] = (dst, None)
        return True

    def _lower_add(self, node, fold):
        layer = node.layer
        arg = _sum_operands(node)
        if arg is None:
            return False
        if fold is not None and fold.norm is not None:
            return type(fold.norm) is LayerNormalization and self._lower_norm(
                fold.norm, [id(t) for t in arg], fold.out, layer._compute_np(), layer.autocast)
        cd = layer._compute_np()
        if dtype_name(cd) not in _GEMM:
            return False
        a, b = (self._buffer(id(t)) for t in arg)
        if self.plan.shape(a) != self.plan.shape(b) or \
                self.plan.dtype(a) != cd or self.plan.dtype(b) != cd:
            return False
        out = fold.out if fold is not None else id(node.output_tensors[0])
        act = fold.activation if fold is not None else None
        self._env[out] = (self.plan.add(a, b, activation=act, out_dtype=cd), None)
        return True

    def _lower_norm(self, norm, keys, out, cd, autocast=None):
        """LayerNormalization of the tensor ``keys[0]`` (of the sum of two, their shapes
        equal), in ``cd``, over the last axis, as the layer's call (``call_with_residual``)
        computes it; ``autocast``: whether the operands are cast to ``cd`` first (the layer's
        own setting, or the Add's for a sum)."""
        if dtype_name(cd) not in _GEMM or norm._compute_np() != cd:
            return False
        autocast = norm.autocast if autocast is None else autocast
        if not autocast and any(self.plan.dtype(self._buffer(k)) != cd for k in keys):
            return False
        bufs = [self._operand(k, cd) for k in keys]
        if any(b is None for b in bufs) or len({self.plan.shape(b) for b in bufs}) != 1:
            return False
        ndim = len(self.plan.shape(bufs[0]))
        if ndim < 1 or norm._axes(ndim) != (ndim - 1,):
            return False
        gamma, beta = norm._kernel_params()
        dst = self.plan.layer_norm(bufs[0], gamma, beta, epsilon=norm.epsilon,
                                   residual=bufs[1] if len(bufs) == 2 else None, out_dtype=cd)
        self._hold(norm)
        self._env[out] = (dst, None)
        return True

    def _python_step(self, node, fold):
        """The node (or its fold) as the graph runs it, in Python."""
        inputs = []
        for t in node.input_tensors:
            if id(t) not in inputs:
                inputs.append(id(t))
        if any(key in self._strided for key in inputs):
            raise RuntimeError(f"inference plan: {node.layer.name} would read a tensor "
                               f"computed at strides (design D) in Python")
        srcs = [self._buffer(key) for key in inputs]
        outs = [fold.out] if fold is not None else [id(t) for t in node.output_tensors]
        dsts = self.plan.call(_node_call(node, fold, inputs), srcs,
                              [self._specs[key] for key in outs])
        for key, dst in zip(outs, dsts):
            self._env[key] = (dst, None)


def _sum_operands(node):
    """The two tensors of a node called as ``layer([a, b])`` (an Add's sum), or None."""
    arg = node.args[0] if len(node.args) == 1 and not node.kwargs else None
    if isinstance(arg, (list, tuple)) and len(arg) == 2 and \
            all(isinstance(t, KerasTensor) for t in arg):
        return arg
    return None


def _explicit_padding(padding, kernel_size):
    """((top, bottom), (left, right)) of a stride-1 convolution's ``padding`` (``"valid"``,
    ``"same"`` or those pairs) with dilation 1: the same zeros at any strides."""
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding == "same":
        return tuple(((k - 1) // 2, k - 1 - (k - 1) // 2) for k in kernel_size)
    return padding


def _calling(layer):
    """A Python step calling a one-input layer at inference."""
    def step(x):
        return [layer(x, training=False)]
    return step


def _node_call(node, fold, keys):
    """A Python step running ``node`` (or its fold) on the arrays of the tensors ``keys``."""
    layer = node.layer

    def value(leaf, env):
        return env[id(leaf)] if isinstance(leaf, KerasTensor) else leaf

    def step(*arrays):
        env = dict(zip(keys, arrays))
        args = map_structure(lambda leaf: value(leaf, env), node.args)
        if fold is not None:
            return [fold.run(layer, args)]
        kwargs = map_structure(lambda leaf: value(leaf, env), node.kwargs)
        result = layer(*args, training=False, **kwargs)
        return [result] if isinstance(result, np.ndarray) else flatten(result)
    return step
