"""The numerics report: where in a model values overflow, underflow or stop being finite.

Design:
  A. One observer per graph (``Graph.observer``, _graph.py design F) records each node's
     outputs, and in a backward pass the gradient reaching them and the layer's weight
     gradients.  Nested models get an observer of their own whose names carry the outer
     model's layer name ("encoder/dense").  Every tensor is summarised by
     ``kernels.numerics_stats``: one vectorised pass, nothing kept but the counts.
  B. Batches.  ``x`` is taken ``batch_size`` samples at a time, as ``predict`` takes it, and
     the counts of a tensor are summed over the batches (the maximum is the largest).
  C. Without ``y`` the model runs as ``predict`` does, with folding off so that each layer's
     own output exists.  With ``y`` each batch is a training step that applies nothing: the
     forward pass in training mode (dropout, batch statistics), the compiled loss, its gradient
     multiplied by the loss scale (the optimizer's current dynamic scale under a
     ``LossScaleOptimizer``, or ``loss_scale=``), and the backward pass in the compute dtype.
     Gradients are reported scaled, as the backward pass carries them, since that is where a
     float16 gradient overflows.  The model's weights (batch statistics too) are put back after.
  D. ``policy=`` reports a copy of the model under another policy (as
     ``load_model(dtype_policy=)`` replaces it) with the same weights; the model itself is not
     changed.
  E. ``quantize=`` (a mode or a quantization config) measures, for each layer that mode would
     quantize, the error its quantized form makes: a quantized copy of the layer (its weights
     quantized as ``Model.quantize`` would) runs on the very inputs the float layer received,
     and its output is compared with the float layer's.  Errors do not compound from layer to
     layer, so each row is that layer's own share: the rows to keep in float with a
     ``DTypePolicyMap`` or ``quantize(filters=...)`` are the large ones.  A MultiHeadAttention
     is one row: its four projections quantized, the error of its output.
"""
import numpy as np

from mixedcore import kernels
from mixedcore.kernels._scan import STAT_KEYS

__all__ = ["NumericsReport", "numerics_report"]

# what the table shows, after the layer and the tensor: (key, heading)
_COLUMNS = (("dtype", "dtype"), ("size", "size"), ("max_abs", "max |x|"), ("nan", "nan"),
            ("inf", "inf"), ("float16_overflow", "f16 over"),
            ("float16_subnormal", "f16 subn"), ("float16_underflow", "f16 ->0"),
            ("bfloat16_overflow", "bf16 over"), ("bfloat16_subnormal", "bf16 subn"),
            ("bfloat16_underflow", "bf16 ->0"))
# the dtypes kernels.numerics_stats reads; other outputs (integer ids, masks) have no row
_SCANNED = ("float16", "bfloat16", "float32", "float64")


def _merge(total, stats):
    if total is None:
        return dict(stats)
    total["size"] += stats["size"]
    total["max_abs"] = max(total["max_abs"], stats["max_abs"])
    for key in STAT_KEYS:
        total[key] += stats[key]
    return total


def _problem(stats, what_if):
    """Non-finite values; or, when the model computes in float32/float64 (``what_if``), values
    float16 cannot hold.  None when neither.  Under a mixed policy a float32 tensor holding
    large values is no problem: it is float32 on purpose."""
    if stats["nan"] or stats["inf"]:
        return "non-finite"
    if what_if and stats["float16_overflow"]:
        return "float16 overflow"
    return None


class NumericsReport:
    """What :func:`numerics_report` found: one row per (layer, tensor).

    ``rows`` is a list of dicts with ``layer``, ``tensor`` ("output", "gradient" or "weight
    gradient") and the statistics of ``kernels.numerics_stats`` summed over the batches;
    ``as_dict()`` nests them as ``{layer: {tensor: stats}}``; ``str(report)`` (or
    ``table()``) is the table.  Rows are in the order the values were computed: the outputs
    layer by layer, then the gradients from the last layer back.  ``first_problem()`` names the
    first row holding NaN or Inf, or, for a model computing in float32 or float64, values that
    would overflow float16.
    """

    def __init__(self, model_name, policy, loss_scale, samples, rows, quantization=None):
        self.model_name = model_name
        self.policy = policy
        self.loss_scale = loss_scale
        self.samples = samples
        self.rows = rows
        # {layer: {"mode", "max_abs_error", "rms_error", "max_abs_output", "relative_error"}}
        self.quantization = quantization or {}

    def as_dict(self):
        out = {}
        for layer, stats in self.quantization.items():
            out.setdefault(layer, {})["quantization error"] = dict(stats)
        for row in self.rows:
            stats = {k: v for k, v in row.items() if k not in ("layer", "tensor")}
            out.setdefault(row["layer"], {})[row["tensor"]] = stats
        return out

    def _what_if(self):
        return self.policy in ("float32", "float64")

    def first_problem(self):
        """``(layer, tensor, what)`` of the first row with a problem, or None."""
        for row in self.rows:
            what = _problem(row, self._what_if())
            if what is not None:
                return row["layer"], row["tensor"], what
        return None

    def table(self):
        head = ["layer", "tensor"] + [h for _, h in _COLUMNS] + [""]
        body = []
        for row in self.rows:
            cells = [row["layer"], row["tensor"]]
            for key, _ in _COLUMNS:
                v = row[key]
                cells.append(f"{v:.4g}" if key == "max_abs" else str(v))
            cells.append("<-" if _problem(row, self._what_if()) else "")
            body.append(cells)
        widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
        left = {0, 1, 2}

        def line(cells):
            return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        scale = "" if self.loss_scale is None else f", loss scale {self.loss_scale:g}"
        title = (f"numerics of model '{self.model_name}' under {self.policy} over "
                 f"{self.samples} samples{scale}")
        rule = "-" * len(line(head))
        first = self.first_problem()
        verdict = (("no NaN, Inf or float16 overflow" if self._what_if() else "no NaN or Inf")
                   if first is None else
                   f"first problem: {first[2]} in the {first[1]} of '{first[0]}'")
        lines = [title, line(head), rule] + [line(c) for c in body] + [rule, verdict]
        if self.quantization:
            lines += ["", "quantization error of each layer on its own float inputs "
                          "(max |quantized - float|, relative to max |float|)"]
            width = max(len(k) for k in self.quantization)
            for layer, q in sorted(self.quantization.items(),
                                   key=lambda kv: -kv[1]["relative_error"]):
                lines.append(f"{layer.ljust(width)}  {q['mode']:<8} max {q['max_abs_error']:.4g}"
                             f"  rms {q['rms_error']:.4g}  relative {q['relative_error']:.4g}")
        return "\n".join(lines)

    __str__ = table

    def __repr__(self):
        return (f"<NumericsReport of '{self.model_name}' under {self.policy}: "
                f"{len(self.rows)} rows>")


class _Observer:
    """Per-graph recorder (design A); ``tally`` is shared by a model and its nested models."""

    def __init__(self, graph, prefix, tally, quantize=None):
        self.prefix = prefix
        self.tally = tally
        self.quantize = quantize        # (config, {layer name: stats}, {id: copy}) or None
        counts = {}
        for node in graph.nodes:
            counts[id(node.layer)] = counts.get(id(node.layer), 0) + 1
        seen = {}
        self.names = {}
        for node in graph.nodes:
            layer = node.layer
            k = seen.get(id(layer), 0)
            seen[id(layer)] = k + 1
            name = layer.name if counts[id(layer)] == 1 else f"{layer.name}#{k}"
            self.names[id(node)] = prefix + name

    def record(self, node, kind, arrays):
        arrays = [a for a in arrays if isinstance(a, np.ndarray) and a.dtype.name in _SCANNED]
        if not arrays:
            return
        key = (self.names[id(node)], kind)
        total = self.tally.get(key)
        for a in arrays:
            total = _merge(total, kernels.numerics_stats(a))
        self.tally[key] = total

    def forward(self, node, outputs, first=None, call=None):
        from mixedcore.models._model import Model
        if isinstance(node.layer, Model):        # its own layers are recorded inside
            return
        self.record(node, "output", outputs)
        if self.quantize is not None and first is not None and len(outputs) == 1:
            self.quantization_error(node, outputs[0], call or ((first,), {}))

    def quantization_error(self, node, output, call):
        """Design E: the quantized copy of the node's layer on the same inputs (``call``: the
        node's arguments and keyword arguments)."""
        config, found, copies = self.quantize
        layer = node.layer
        args, kwargs = call
        if getattr(layer, "quantization_mode", "x") is not None:
            return
        whole = getattr(layer, "quantizable_parts", None) is not None
        if whole:
            # a layer Keras builds from sub-layers (MultiHeadAttention): all its projections
            # quantized, the error of its output
            if config.mode not in ("int8", "int4", "float8"):
                return
        elif config.mode not in getattr(layer, "_MODES", ()):
            return
        copy = copies.get(id(layer))
        if copy is None:
            copy = type(layer).from_config(layer.get_config())
            if whole:
                copy(*args, **kwargs)                       # built for these inputs
            else:
                copy.build_from_shape((None,) + tuple(layer.input_shape))
            copy.set_weights(layer.get_weights())
            copy.quantize(config.mode, config=config)
            copies[id(layer)] = copy
        f64 = np.dtype(np.float64)
        ref = np.asarray(output).astype(f64)
        err = np.asarray(copy(*args, **kwargs)).astype(f64) - ref
        name = self.names[id(node)]
        total = found.get(name, {"mode": config.mode, "max_abs_error": 0.0, "sq": 0.0,
                                 "size": 0, "max_abs_output": 0.0})
        if err.size:
            total["max_abs_error"] = max(total["max_abs_error"], float(np.abs(err).max()))
            total["max_abs_output"] = max(total["max_abs_output"], float(np.abs(ref).max()))
        total["sq"] += float(np.square(err).sum())
        total["size"] += err.size
        found[name] = total

    def backward(self, node, output_grads, weight_grads):
        from mixedcore.models._model import Model
        if isinstance(node.layer, Model):
            return
        self.record(node, "gradient", output_grads)
        if weight_grads:
            self.record(node, "weight gradient", weight_grads)


def _attach(model, prefix, tally, attached, quantize=None):
    from mixedcore.models._model import Model
    graph = model._graph
    graph.observer = _Observer(graph, prefix, tally, quantize)
    attached.append(graph)
    for node in graph.nodes:
        if isinstance(node.layer, Model):
            _attach(node.layer, f"{prefix}{node.layer.name}/", tally, attached, quantize)


def _loss_scale(owner, model, loss_scale):
    if loss_scale is not None:
        if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float, np.number)) \
                or not np.isfinite(loss_scale) or loss_scale <= 0:
            raise ValueError(f"{owner}: loss_scale must be a finite number > 0, got "
                             f"{loss_scale!r}")
        return float(loss_scale)
    if model._uses_loss_scale():
        value = model.optimizer.loss_scale
        return float(value() if callable(value) else value)
    return 1.0


def numerics_report(model, x, y=None, policy=None, batch_size=32, loss_scale=None,
                    quantize=None):
    """Where a model's values overflow, underflow or stop being finite, layer by layer.

    Parameters
    ----------
    model : mixedcore.models.Model (or Sequential), built
    x : array, or a list / dict of arrays for a model with several inputs
    y : array or list / dict of arrays, optional
        Targets: with them each batch also runs the backward pass of the compiled loss (the
        model must be compiled), and the report adds, per layer, the gradient reaching its
        output and its weight gradients.  Nothing is applied to the weights.
    policy : str or DTypePolicy, optional
        Report the model as it computes under this policy (``"mixed_float16"`` to see where a
        float32 model would overflow in float16); the model itself is not changed.
    batch_size : int
        Samples per forward pass, as ``predict``.
    loss_scale : float, optional
        The factor the loss gradient is multiplied by before the backward pass; by default the
        current scale of the model's ``LossScaleOptimizer``, else 1.
    quantize : str or QuantizationConfig, optional
        A quantization mode ("int8", "int4", "float8") or config: the report adds, for each
        float layer that ``model.quantize`` would quantize, the error of its quantized form on
        the inputs the layer received (``report.quantization``; design E), largest first in the
        table.

    Returns
    -------
    NumericsReport
        Per layer, in the order the model computes them: the output's dtype, size (elements
        over all batches), largest finite magnitude, and the counts of NaN, Inf, zeros, and of
        values that overflow float16, become float16 subnormals or flush to zero in float16,
        and the same for bfloat16 (``kernels.numerics_stats``); with ``y`` the same for the
        gradients.  ``str(report)`` is a table, ``report.as_dict()`` the numbers.

    Raises
    ------
    TypeError
        ``model`` is not a mixedcore model.
    ValueError
        ``x`` (or ``y``) does not fit the model, no samples, or a bad ``batch_size`` /
        ``loss_scale`` / ``policy``.
    RuntimeError
        ``y`` is given and the model is not compiled (as ``evaluate``).
    """
    from mixedcore.models._model import Model
    from mixedcore.saving.config import clone_with_policy
    from mixedcore.trainers.data_adapters import check_batch_size, require_samples
    owner = "numerics_report"
    if not isinstance(model, Model):
        raise TypeError(f"{owner}: model must be a mixedcore Model or Sequential, got "
                        f"{type(model).__name__}")
    batch_size = check_batch_size(owner, batch_size)
    if y is not None:
        model._require_compiled(owner)
    scale = _loss_scale(owner, model, loss_scale) if y is not None else None
    xs = model._standardize_inputs(owner, x)
    n = xs[0].shape[0] if xs and xs[0].ndim else 0
    require_samples(owner, n)
    target = model if policy is None else clone_with_policy(owner, model, policy)
    if policy is not None and y is not None:
        target._loss_fns, target._loss_weights = model._loss_fns, model._loss_weights
    ys = model._standardize_targets(owner, y) if y is not None else None
    if ys is not None and any(t is not None and t.shape[0] != n for t in ys):
        raise ValueError(f"{owner}: x has {n} samples but y has "
                         f"{[None if t is None else t.shape[0] for t in ys]}")
    quantizing = None
    if quantize is not None:
        from mixedcore import quantizers
        quantizing = (quantizers.resolve_config(owner, None, quantize), {}, {})
    tally, attached = {}, []
    saved = target.get_weights() if y is not None else None
    _attach(target, "", tally, attached, quantizing)
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for start in range(0, n, batch_size):
                bx = [a[start:start + batch_size] for a in xs]
                if ys is None:
                    target._run(bx, training=False)
                    continue
                by = [None if t is None else t[start:start + batch_size] for t in ys]
                outs, states = target._run(bx, training=True)
                _, _, grads, logits_grads = target._losses(by, outs, states, True)
                if scale != 1.0:
                    grads = [None if g is None else g * g.dtype.type(scale) for g in grads]
                    logits_grads = {k: g * g.dtype.type(scale) for k, g in logits_grads.items()}
                target._backward(states, grads, logits_grads)
    finally:
        for graph in attached:
            graph.observer = None
        if saved is not None:
            target.set_weights(saved)
    # computation order: the forward pass, then the backward pass (design A)
    keys = sorted(tally, key=lambda k: k[1] != "output")
    rows = [dict(layer=name, tensor=kind, **tally[(name, kind)]) for name, kind in keys]
    policy_name = _policy_name(target)
    quantization = {}
    for name, q in (quantizing[1] if quantizing else {}).items():
        rms = float(np.sqrt(q["sq"] / q["size"])) if q["size"] else 0.0
        top = q["max_abs_output"]
        quantization[name] = {"mode": q["mode"], "max_abs_error": q["max_abs_error"],
                              "rms_error": rms, "max_abs_output": top,
                              "relative_error": q["max_abs_error"] / top if top else 0.0}
    return NumericsReport(model.name, policy_name, scale, n, rows, quantization)


def _policy_name(model):
    names = [layer.dtype_policy.name for layer in model.layers
             if getattr(layer, "dtype_policy", None) is not None
             and type(layer).__name__ != "InputLayer"]
    if not names:
        return "float32"
    return max(set(names), key=names.count)
