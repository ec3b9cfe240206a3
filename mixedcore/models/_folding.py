"""Folding at inference: chains of layer calls that a graph runs as one fused call.

Design:
  A. What folds.  A BatchNormalization over the last axis whose input comes only from
     a Dense, convolution or depthwise convolution with a linear activation is, at inference,
     an affine map of that layer's output per output channel; the producer runs once with its
     kernel columns and bias scaled and shifted (``call_folded``), and an activation layer that
     alone reads the normalization's output (or the product's, when no normalization follows)
     and whose function the product's epilogue has (``activations.FUSED``: relu, relu6 --
     ``ReLU(max_value=6)`` --, gelu, sigmoid, tanh, silu, hard_sigmoid, hard_silu) is applied
     in the same epilogue.  The three calls become one product and
     one rounding.  Likewise a merge (``Add``...) whose result only such an activation reads
     applies it before its one rounding, and the sum of two tensors that only a
     LayerNormalization reads is normalized in the same pass (``call_with_residual``).
     Training, masks and anything that reads the intermediate tensors run the layers one by
     one.
  B. The graph (``_graph``) finds its folds once, with :func:`find_folds`, and runs a fold's
     fused call in place of the calls it covers at inference only, when no mask reaches the
     producer and no observer is set; ``Graph._folds`` holds them.
"""
from typing import Any, Callable, NamedTuple

import numpy as np

from mixedcore import activations
from mixedcore.layers._activation import Activation, ReLU
from mixedcore.layers._merging import Add
from mixedcore.layers._node import KerasTensor

__all__ = ["Fold", "find_folds"]


class Fold(NamedTuple):
    """One fused call: ``run(layer, argument values)`` computes tensor ``out`` (an id) in place
    of the producer's node and the nodes ``skipped``; ``norm`` is the normalization layer folded
    in (or None) and ``activation`` the epilogue activation's name (or None)."""
    run: Callable
    skipped: list
    out: int
    norm: Any
    activation: Any

# compute dtypes whose products run on the GEMM, whose epilogue takes the folded bias
_FOLD_DTYPES = ("float16", "bfloat16", "float32")


def find_folds(nodes, outputs, uses):
    """The folds of a graph: ``{id(producer node): Fold}``.

    ``nodes``: the graph's nodes in run order; ``outputs``: its output tensors; ``uses``: the
    number of consumers of each tensor by id (an output counting as one).
    """
    output_ids = {id(t) for t in outputs}
    consumers = {}
    for node in nodes:
        for t in node.input_tensors:
            consumers.setdefault(id(t), []).append(node)

    def sole_consumer(tensor):
        """The node that alone reads ``tensor`` as its only argument, or None."""
        found = consumers.get(id(tensor), [])
        if (id(tensor) in output_ids or uses.get(id(tensor)) != 1 or len(found) != 1
                or not _plain_call(found[0])):
            return None
        return found[0]

    def activation_after(tensor, layer):
        """(the epilogue activation of the layer that alone reads ``tensor``, its node)."""
        act_node = sole_consumer(tensor)
        if act_node is None or act_node.layer.compute_dtype != layer.compute_dtype:
            return None, None
        activation = _fused_activation(act_node.layer)
        return (activation, act_node) if activation is not None else (None, None)

    folds = {}
    for node in nodes:
        layer = node.layer
        if layer.compute_dtype not in _FOLD_DTYPES or len(node.output_tensors) != 1:
            continue
        if hasattr(layer, "call_activated") and len(node.args) == 1 and not node.kwargs:
            # a merge whose result only an activation reads: one rounding after both
            activation, act_node = activation_after(node.output_tensors[0], layer)
            if activation is not None:
                folds[id(node)] = Fold(_merge_activated(activation), [id(act_node)],
                                       id(act_node.output_tensors[0]), None, activation)
                continue
            # a sum of two tensors that only a layer normalization reads: one kernel
            norm_node = sole_consumer(node.output_tensors[0])
            if (norm_node is not None and _is_sum_of_two(node)
                    and hasattr(norm_node.layer, "call_with_residual")
                    and norm_node.layer.compute_dtype == layer.compute_dtype):
                folds[id(node)] = Fold(_residual_normalized(norm_node.layer), [id(norm_node)],
                                       id(norm_node.output_tensors[0]), norm_node.layer, None)
            continue
        if (not _plain_call(node) or not hasattr(layer, "call_folded")
                or getattr(layer, "activation", None) != "linear"
                or getattr(layer, "quantization_mode", None) is not None):
            continue
        norm_node = sole_consumer(node.output_tensors[0])
        if norm_node is None:
            continue
        if not _folds_into(norm_node, layer):
            # an activation layer alone after the product: applied in its epilogue
            activation, act_node = activation_after(node.output_tensors[0], layer)
            if activation is not None:
                folds[id(node)] = Fold(_normalized(None, activation), [id(act_node)],
                                       id(act_node.output_tensors[0]), None, activation)
            continue
        skipped, out = [id(norm_node)], norm_node.output_tensors[0]
        activation, act_node = activation_after(out, layer)
        if act_node is not None:
            skipped.append(id(act_node))
            out = act_node.output_tensors[0]
        folds[id(node)] = Fold(_normalized(norm_node.layer, activation), skipped, id(out),
                               norm_node.layer, activation)
    return folds


def _normalized(norm, activation):
    """The fused call of a Dense or convolution with the normalization (and activation) after it."""
    def run(layer, args):
        x = layer._prepare_input(args[0])
        layer.check_input_shape(x.shape)
        return layer.call_folded(x, norm, activation)
    return run


def _is_sum_of_two(node):
    arg = node.args[0]
    return (type(node.layer) is Add and isinstance(arg, (list, tuple)) and len(arg) == 2
            and all(isinstance(t, KerasTensor) for t in arg)
            and tuple(arg[0].shape) == tuple(arg[1].shape))


def _residual_normalized(norm):
    """The fused call of ``norm(Add()([a, b]))``: the normalization of ``a + b`` in one pass,
    the sum not rounded first."""
    def run(layer, args):
        inputs, _ = layer._prepare_args(args, {})
        a, b = inputs[0]
        if a.shape != b.shape:          # a batch that broadcasts: the layers one by one
            return norm(layer(list(inputs[0])))
        return norm.call_with_residual(a, b)
    return run


def _merge_activated(activation):
    """The fused call of a merge with the activation after it."""
    def run(layer, args):
        inputs, _ = layer._prepare_args(args, {})
        return layer.call_activated(inputs[0], activation)
    return run


def _plain_call(node):
    """Whether the node is ``layer(tensor)``: one tensor argument, nothing else."""
    return (len(node.args) == 1 and not node.kwargs and isinstance(node.args[0], KerasTensor)
            and len(node.output_tensors) == 1)


def _folds_into(norm_node, producer):
    """Whether the node is an affine normalization over the producer's last axis, in the
    producer's compute dtype (the layer offers ``inference_affine``)."""
    norm = norm_node.layer
    if not hasattr(norm, "inference_affine") or not norm.built:
        return False
    if norm.compute_dtype != producer.compute_dtype:
        return False
    axis = getattr(norm, "axis", None)
    rank = len(norm_node.args[0].shape)
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    return len(axes) == 1 and isinstance(axes[0], (int, np.integer)) and axes[0] % rank == rank - 1


def _fused_activation(layer):
    """The name of the epilogue activation an activation layer applies, or None."""
    if isinstance(layer, ReLU):
        return layer.epilogue_name()
    if type(layer) is Activation and layer.activation in activations.FUSED:
        return layer.activation
    return None
