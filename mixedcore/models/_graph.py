"""The graph of a functional model: which layer calls to run, in which order, and backwards.

Design:
  A. Order.  The nodes between the inputs and the outputs are found by a depth-first walk back
     from the outputs (stopping at the declared inputs); that walk's post-order runs them.  The
     layers are listed as Keras lists them: by depth (distance from the outputs, largest first),
     ties in the order the walk first met them.  Weight lists and files follow that order.
  B. Inference frees what it no longer needs: each tensor's value is dropped once its last
     consumer has run (a count per tensor, made once per graph).
  C. Masks (Keras's): a layer that makes a mask (``Embedding(mask_zero=True)``) or passes one
     on (``supports_masking``) gives its output a mask through ``compute_mask``; the layers that
     read that output receive it through their call's ``mask`` argument, or
     ``<parameter>_mask`` for a call with several tensor parameters (attention's
     ``query_mask``, ``value_mask``, ``key_mask``).  An explicit argument is never replaced.
  D. Training.  A training run keeps, per node, what its layer stored for ``backward`` (the
     layer's ``_train_cache``), so a layer called at several places (a shared layer) has one
     saved state per call; backward puts each back before calling ``backward``.  Gradients of
     a tensor used several times are summed (in float32 for 16-bit tensors); weight gradients
     are summed per weight array.  Nodes that lead to no trainable weight and to no input that
     needs a gradient are not visited.
  E. Folding at inference (``_folding``): the graph asks ``find_folds`` once which chains of
     calls run as one fused call at inference, and runs them so when nothing needs the
     tensors in between (not in training, not under masks, no observer).
  G. Compiled inference (``_plan``): ``infer`` runs a plan made for the inputs' shapes and
     dtypes unless an observer is set or the graph's layers make masks (found by the run that
     makes the plan, ``masked``): then ``run``.
  H. Chunks of the batch.  A batch whose activations would not stay in the caches runs as
     consecutive chunks of samples through one plan made for the chunk: each layer's output
     for a chunk is still in cache when the next layer reads it, instead of a round trip of
     the whole batch's tensor through memory (MobileNetV2 at batch 32 under mixed_bfloat16:
     about 2x faster).  The chunk is the number of samples whose arena (the plan's, made once
     for one sample at the first call of a shape) fits ``CHUNK_BYTES``, evened out over the
     chunks that takes (8 samples of which 7 fit: two chunks of 4).  Only graphs whose
     layers all compute each sample on its own at inference are split -- the library's own
     layers, and models made of them (``per_sample``); each sample's outputs are the bits of
     the whole batch's, since no kernel's result for a row depends on the other rows.
  F. Observation.  An observer set on the graph (``graph.observer``, the numerics report's)
     sees every node's outputs as they are made (``forward(node, outputs)``) and, in a
     backward pass, the gradient reaching each node's outputs together with its layer's weight
     gradients (``backward(node, output_grads, weight_grads)``).  Folding is off while one
     is set, so every layer's own output exists.
"""
import numpy as np

from mixedcore._dtypes import is_floating, to_compute, work_dtype
from mixedcore.layers._base import Layer
from mixedcore.layers._core import InputLayer
from mixedcore.layers._node import KerasTensor, flatten, map_structure, pack_like
from mixedcore.models._folding import find_folds
from mixedcore.models._plan import (CHUNK_BYTES, MAX_ARENA_BYTES, MAX_PLANS, InferencePlan,
                                    plan_key)

__all__ = ["Graph"]

_MASKED = "masked"          # in Graph._plans: the inputs' shapes for which masks flow



def _per_sample(node):
    """Whether a node computes each sample on its own at inference (design H): a layer of the
    library (a model: all of its nodes) that does not work along the batch axis (``axis`` 0,
    which Concatenate, Softmax and LayerNormalization accept)."""
    layer = node.layer
    if not type(layer).__module__.startswith("mixedcore."):
        return False
    own = getattr(layer, "per_sample", None)
    if callable(own):
        return bool(own(node))
    inner = getattr(layer, "_graph", None)
    if inner is not None:
        return inner.per_sample
    axis = getattr(layer, "axis", None)
    if axis is None:
        return True
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    ranks = {len(t.shape) for t in node.input_tensors}
    return all(isinstance(a, (int, np.integer)) and all(r > 0 and a % r != 0 for r in ranks)
               for a in axes)


class Graph:
    """The nodes that compute ``outputs`` from ``inputs`` (flat lists of KerasTensors)."""

    def __init__(self, owner, inputs, outputs):
        self.owner = owner
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        for t in self.inputs + self.outputs:
            if not isinstance(t, KerasTensor):
                raise TypeError(f"{owner}: inputs and outputs must be KerasTensors (from "
                                f"Input() and layer calls), got {type(t).__name__}: {t!r}")
            if t.keras_history is None:
                raise ValueError(f"{owner}: {t!r} was not made by Input() or a layer call")
        if len({id(t) for t in self.inputs}) != len(self.inputs):
            raise ValueError(f"{owner}: the same input tensor is given more than once")
        self.nodes, first_seen = self._walk()
        self.layers = self._order_layers(first_seen)
        self._check_computable()
        self._check_names()
        # consumers per tensor: the nodes that read it, plus one per appearance as an output
        self.uses = {}
        for node in self.nodes:
            for t in node.input_tensors:
                self.uses[id(t)] = self.uses.get(id(t), 0) + 1
        for t in self.outputs:
            self.uses[id(t)] = self.uses.get(id(t), 0) + 1
        # per node: the input tensor's id when the call is layer(tensor), the ids read and made
        self._steps = []
        for node in self.nodes:
            single = None
            if (len(node.args) == 1 and not node.kwargs and
                    isinstance(node.args[0], KerasTensor)):
                single = id(node.args[0])
            self._steps.append((node, single, [id(t) for t in node.input_tensors],
                                [id(t) for t in node.output_tensors], _masking(node.layer)))
        self._folds = find_folds(self.nodes, self.outputs, self.uses)
        self.observer = None            # F
        self._plans = {}                # G
        self._chunks = {}               # H: plan key of a batch -> the chunk it runs in
        self._per_sample = None
        self.masked = False             # whether the last run made a mask

    # -- structure ------------------------------------------------------------------------------
    def _walk(self):
        """The nodes in the post-order of a depth-first walk back from the outputs (design A),
        and ``{id(layer): (index, layer)}`` in the order the walk first met the layers.  The
        walk keeps its own stack, so a chain of any length is walked."""
        input_ids = {id(t) for t in self.inputs}
        done, in_progress, order, first_seen = set(), set(), [], {}

        def enter(tensor):
            """The node that made ``tensor`` when the walk must visit it, else None."""
            layer, node_index, _ = tensor.keras_history
            node = layer._inbound_nodes[node_index]
            if id(node) in done:
                return None
            if id(tensor) in input_ids and not isinstance(layer, InputLayer):
                done.add(id(node))           # an intermediate tensor given as an input
                return None
            if id(node) in in_progress:
                raise ValueError(f"{self.owner}: tensor {tensor!r} from layer '{layer.name}' is "
                                 f"part of a cycle")
            first_seen.setdefault(id(layer), (len(first_seen), layer))
            in_progress.add(id(node))
            return node

        for output in self.outputs:
            start = enter(output)
            stack = [] if start is None else [(start, iter(start.input_tensors))]
            while stack:
                node, pending = stack[-1]
                tensor = next(pending, None)
                if tensor is None:
                    stack.pop()
                    in_progress.discard(id(node))
                    done.add(id(node))
                    order.append(node)
                    continue
                child = enter(tensor)
                if child is not None:
                    stack.append((child, iter(child.input_tensors)))
        for t in self.inputs:               # unused inputs still belong to the model
            layer = t.keras_history[0]
            if isinstance(layer, InputLayer):
                first_seen.setdefault(id(layer), (len(first_seen), layer))
        nodes = [n for n in order if not isinstance(n.layer, InputLayer)
                 and not any(id(o) in input_ids for o in n.output_tensors)]
        return nodes, first_seen

    def _order_layers(self, first_seen):
        """Layers by depth from the outputs (deepest first), ties in first-seen order."""
        node_depth, layer_depth = {}, {}
        for node in reversed(self.nodes):
            depth = max(node_depth.get(id(node), 0), layer_depth.get(id(node.layer), 0))
            layer_depth[id(node.layer)] = depth
            node_depth[id(node)] = depth
            for t in node.input_tensors:
                parent = t.node
                node_depth[id(parent)] = max(node_depth.get(id(parent), 0), depth + 1)
        for t in self.inputs:
            layer = t.keras_history[0]
            if isinstance(layer, InputLayer):
                parent = layer._inbound_nodes[0]
                layer_depth[id(layer)] = node_depth.get(id(parent), 0)
        entries = [(-layer_depth.get(key, 0), index, layer)
                   for key, (index, layer) in first_seen.items()]
        entries.sort(key=lambda e: (e[0], e[1]))
        return [layer for _, _, layer in entries]

    def _check_computable(self):
        known = {id(t) for t in self.inputs}
        done = []
        for node in self.nodes:
            for t in node.input_tensors:
                if id(t) not in known:
                    raise ValueError(
                        f"{self.owner}: graph disconnected: cannot obtain the value of tensor "
                        f"{t!r} needed by layer '{node.layer.name}' from the given inputs. "
                        f"Layers reached without issue: {done}")
            done.append(node.layer.name)
            known.update(id(t) for t in node.output_tensors)
        for t in self.outputs:
            if id(t) not in known:
                raise ValueError(f"{self.owner}: graph disconnected: output {t!r} cannot be "
                                 f"computed from the given inputs")

    def _check_names(self):
        seen = {}
        for layer in self.layers:
            if layer.name in seen and seen[layer.name] is not layer:
                raise ValueError(f"{self.owner}: the name {layer.name!r} is used by two layers; "
                                 f"all layer names in a model must be unique")
            seen[layer.name] = layer

    # -- running --------------------------------------------------------------------------------
    def infer(self, values):
        """The outputs (flat list) of an inference call on input arrays ``values``: through a
        compiled plan when the graph allows one (design G), in chunks of the batch (H), else
        :meth:`run`."""
        if self.observer is not None:
            return self.run(values)[0]
        chunk = self._chunk(values)
        if chunk is None:
            return self._infer(values)
        batch = values[0].shape[0]
        parts = [self._infer([v[i:i + chunk] for v in values]) for i in range(0, batch, chunk)]
        return [np.concatenate(outs) for outs in zip(*parts)]

    @property
    def per_sample(self):
        """Whether every layer computes each sample on its own at inference (design H)."""
        if self._per_sample is None:
            self._per_sample = all(_per_sample(node) for node in self.nodes)
        return self._per_sample

    def _chunk(self, values):
        """The number of samples per chunk for a call on ``values`` (design H), or None when
        the call runs whole."""
        batch = values[0].shape[0] if values and values[0].ndim else 0
        if batch < 2 or any(v.ndim == 0 or v.shape[0] != batch for v in values) or \
                not self.per_sample:
            return None
        key = plan_key(values)
        if key not in self._chunks:
            one = [v[:1] for v in values]
            had = plan_key(one) in self._plans
            self._infer(one)                        # the plan for one sample
            plan = self._plans.get(plan_key(one))
            chunk = batch
            if isinstance(plan, InferencePlan) and all(s[:1] == (1,) for s in plan.out_shapes):
                chunk = max(1, CHUNK_BYTES // max(plan.nbytes, 1))
                # as many chunks as that needs, of equal sizes: 8 as 4 + 4, not 7 + 1 (a chunk
                # of one sample runs the products on few rows)
                chunk = -(-batch // -(-batch // chunk))
            if not had and chunk != 1:              # made only to measure
                self._plans.pop(plan_key(one), None)
            if len(self._chunks) >= 4 * MAX_PLANS:
                del self._chunks[next(iter(self._chunks))]
            self._chunks[key] = chunk
        chunk = self._chunks[key]
        return chunk if chunk < batch else None

    def _infer(self, values):
        """``infer`` of one call, whole."""
        key = plan_key(values)
        plan = self._plans.pop(key, None)
        outs = None
        if plan is None or (plan is not _MASKED and not plan.current()):
            # the layers one by one, recording what the plan needs; their outputs are the
            # plan's, bit for bit
            specs = {}
            outs = self.run(values, record=specs)[0]
            plan = _MASKED if self.masked else InferencePlan(self, values, specs)
        self._plans[key] = plan         # the most recent last
        while len(self._plans) > MAX_PLANS or (len(self._plans) > 1
                                               and self.arena_nbytes() > MAX_ARENA_BYTES):
            del self._plans[next(iter(self._plans))]
        if outs is not None:
            return outs
        if plan is _MASKED:
            return self.run(values)[0]
        return plan.run(values)

    def arena_nbytes(self):
        """Bytes of the arenas of the plans kept (design G)."""
        return sum(plan.nbytes for plan in self._plans.values() if plan is not _MASKED)

    def run(self, values, training=False, record=None):
        """The outputs (flat list) for input arrays ``values`` (flat list, aligned with
        ``inputs``).  With ``training``, also the saved per-node states for :meth:`backward`.
        ``record``: a dict that receives ``{id(tensor): (shape, dtype)}`` of every array made."""
        env = {id(t): v for t, v in zip(self.inputs, values)}
        remaining = dict(self.uses)
        states = {} if training else None
        masks = {}
        self.masked = False
        folded = set()
        observer = self.observer
        for node, single, in_ids, out_ids, masking in self._steps:
            layer = node.layer
            if folded and id(node) in folded:
                continue
            fold = (self._folds.get(id(node))
                    if not training and self._folds and observer is None else None)
            if (fold is not None and layer.built
                    and not (masks and any(key in masks for key in in_ids))):
                run_fused, skipped, out_key = fold.run, fold.skipped, fold.out
                env[out_key] = run_fused(layer, map_structure(
                    lambda t: env[id(t)] if isinstance(t, KerasTensor) else t, node.args))
                if record is not None:
                    record[out_key] = (env[out_key].shape, env[out_key].dtype)
                folded.update(skipped)
                for key in in_ids:
                    remaining[key] -= 1
                    if remaining[key] == 0:
                        del env[key]
                continue
            mask_kwargs = None
            if masks and any(key in masks for key in in_ids):
                mask_kwargs = _mask_arguments(node, masking, masks)
            if single is not None and not mask_kwargs:     # layer(tensor): the common case
                first = env[single]
                result = layer(first, training=training)
            else:
                def value(leaf):
                    return env[id(leaf)] if isinstance(leaf, KerasTensor) else leaf

                args = map_structure(value, node.args)
                kwargs = map_structure(value, node.kwargs)
                if mask_kwargs:
                    for key, m in mask_kwargs.items():
                        if kwargs.get(key) is None:
                            kwargs[key] = m
                first = args[0] if args else None
                result = layer(*args, training=training, **kwargs)
            outs = [result] if isinstance(result, np.ndarray) else flatten(result)
            if len(outs) != len(out_ids):
                raise ValueError(f"{self.owner}: layer '{layer.name}' returned {len(outs)} "
                                 f"outputs where its graph call made {len(out_ids)}")
            for key, v in zip(out_ids, outs):
                env[key] = v
                if record is not None and isinstance(v, np.ndarray):
                    record[key] = (v.shape, v.dtype)
            if observer is not None:
                observer.forward(node, outs, first,
                                 ((first,), {}) if single is not None and not mask_kwargs
                                 else (args, kwargs))
            if masking[0] or mask_kwargs is not None:
                in_mask = _first_mask(node, masks)
                out_mask = layer.compute_mask(first, in_mask)
                if out_mask is not None:
                    out_masks = [out_mask] if len(out_ids) == 1 else flatten(out_mask)
                    for key, m in zip(out_ids, out_masks):
                        if m is not None:
                            masks[key] = m
                            self.masked = True
            if training:
                states[id(node)] = (getattr(layer, "_train_cache", None),
                                    [(v.shape, v.dtype) for v in outs])
            else:
                for key in in_ids:
                    remaining[key] -= 1
                    if remaining[key] == 0:
                        del env[key]
                        masks.pop(key, None)
        return [env[id(t)] for t in self.outputs], states

    def backward(self, states, output_grads, need_input_grads=False, logits_grads=None):
        """Backpropagate.

        Parameters
        ----------
        states : what :meth:`run` returned with ``training=True``
        output_grads : list aligned with ``outputs`` (None where an output has no gradient)
        need_input_grads : bool
            Return the gradients of the inputs too (a model used as a layer of another).
        logits_grads : dict, optional
            ``{id(node): gradient}`` for output nodes whose loss was taken from their logits:
            those call ``backward_from_logits`` instead of ``backward``.

        Returns
        -------
        (input gradients (list aligned with ``inputs``, None where none), weight gradients
        ``{id(weight array): gradient}``)
        """
        needs = self._gradient_needs(need_input_grads)
        grads = {}
        for t, g in zip(self.outputs, output_grads):
            if g is not None:
                _accumulate(grads, id(t), g)
        weight_grads = {}
        logits_grads = logits_grads or {}
        for node in reversed(self.nodes):
            layer = node.layer
            saved, out_specs = states[id(node)]
            dys = [grads.pop(id(t), None) for t in node.output_tensors]
            special = logits_grads.get(id(node))
            if special is None and all(g is None for g in dys):
                continue
            need_input = any(needs[id(t)] for t in node.input_tensors)
            if not need_input and not layer.trainable_weights:
                continue
            if hasattr(layer, "_train_cache"):
                layer._train_cache = saved
            layer.gradients = None
            if special is not None:
                g = layer.backward_from_logits(special, need_input_grad=need_input)
            else:
                dys = [np.zeros(shape, dtype) if g is None else to_compute(g, dtype)
                       if is_floating(g.dtype) and is_floating(dtype) else g
                       for g, (shape, dtype) in zip(dys, out_specs)]
                g = layer.backward(pack_like(node.outputs, dys), need_input_grad=need_input)
            if layer.trainable_weights and layer.gradients:
                for w, gw in zip(layer.trainable_weights, layer.gradients):
                    if gw is not None:
                        _accumulate(weight_grads, id(w), gw)
            if self.observer is not None:
                self.observer.backward(node, dys if special is None else [special],
                                       layer.gradients if layer.trainable_weights else None)
            if need_input and g is not None:
                by_param = g if isinstance(g, dict) else {node.input_paths[0][0]: g} \
                    if node.input_paths else {}
                for t, (param, k) in zip(node.input_tensors, node.input_paths):
                    if not needs[id(t)] or param not in by_param:
                        continue
                    leaves = flatten(by_param[param])
                    gt = leaves[k] if k < len(leaves) else None
                    if gt is not None:
                        _accumulate(grads, id(t), gt)
        input_grads = [grads.get(id(t)) for t in self.inputs] if need_input_grads else None
        return input_grads, weight_grads

    def _gradient_needs(self, need_input_grads):
        """Per tensor: whether a gradient must reach it (it depends on a trainable weight, or
        on an input whose gradient is asked for)."""
        needs = {id(t): bool(need_input_grads) for t in self.inputs}
        for node in self.nodes:
            flag = bool(node.layer.trainable_weights) or any(needs.get(id(t), False)
                                                            for t in node.input_tensors)
            for t in node.output_tensors:
                needs[id(t)] = flag
        return needs


def _masking(layer):
    """(whether the layer makes masks of its own, the mask arguments its call takes)."""
    import inspect
    makes = type(layer).compute_mask is not Layer.compute_mask
    try:
        params = inspect.signature(layer.call).parameters
    except (TypeError, ValueError):
        params = {}
    takes = tuple(p for p in params if p == "mask" or p.endswith("_mask"))
    return makes, takes


def _first_mask(node, masks):
    """The mask of the call's first argument (a list of masks for a list input), or None."""
    if not node.input_paths:
        return None
    first = node.input_paths[0][0]
    found = [masks.get(id(t)) for t, (param, _) in zip(node.input_tensors, node.input_paths)
             if param == first]
    if all(m is None for m in found):
        return None
    leaves = flatten(node.args[0]) if node.args else []
    return found[0] if len(leaves) == 1 else found


def _mask_arguments(node, masking, masks):
    """Keyword arguments that hand the inputs' masks to the call: ``mask`` for the first
    argument, ``<parameter>_mask`` for a tensor parameter the call names so (Keras's
    ``query_mask`` / ``value_mask`` / ``key_mask``)."""
    takes = masking[1]
    out = {}
    if "mask" in takes:
        m = _first_mask(node, masks)
        if m is not None:
            out["mask"] = m
    for t, (param, _) in zip(node.input_tensors, node.input_paths):
        key = f"{param}_mask"
        if key in takes and key not in out and masks.get(id(t)) is not None:
            out[key] = masks[id(t)]
    return out


def _accumulate(table, key, g):
    previous = table.get(key)
    if previous is None:
        table[key] = g
        return
    if is_floating(g.dtype) and g.dtype.itemsize == 2:
        w = work_dtype(g.dtype)
        table[key] = to_compute(to_compute(previous, w) + to_compute(g, w), g.dtype)
    else:
        table[key] = previous + g
