"""The training loop every model shares: compile, fit, evaluate, predict, train_on_batch.

Design:
  A. Inference runs the graph with ``training=False``: Dense and convolution layers use the fused
     GEMM (bias and activation in the epilogue) on weights packed once in the compute dtype.
  B. A training step runs the graph with ``training=True`` (each layer call keeps what backward
     needs), takes each output's loss in float32, and backpropagates through the graph.
     Gradients travel in each tensor's compute dtype (float16 under mixed_float16, where an
     overflow shows up as inf, exactly as in a framework's float16 tensors); weight gradients
     come out in the variable dtype.
  C. When an output's loss is a crossentropy on probabilities and the layer that makes the
     output is a softmax (and nothing else reads it), the loss is taken from the softmax's
     logits (Keras makes the same fusion): stable, gradient p - y.
  D. Loss scaling: ``compile`` wraps the optimizer in a LossScaleOptimizer when the
     model's policy is mixed_float16 (or an experimental policy carrying a loss scale).  The
     output gradients are multiplied by the current scale before backprop; the optimizer
     unscales, checks finiteness (skipping the step and backing the scale off on inf/NaN) and
     applies.
  E. After every applied step each layer's weight version is bumped, so the next call casts
     (or packs) the weights to the compute dtype once.
  F. Several outputs: ``loss`` is one loss for all, a list aligned with the outputs or a dict
     keyed by output names; the total loss is the ``loss_weights``-weighted sum.  Targets ``y``
     and inputs ``x`` are an array, a list aligned with the outputs / inputs, or a dict keyed by
     names.
  G. Callbacks (``mixedcore.callbacks``) are called around training, each epoch and each batch;
     ``fit`` always adds a History last (it sees what earlier callbacks add to the logs).
     ``model.stop_training = True`` ends training after the current batch.  Sample weights
     (``sample_weight``, or ``class_weight`` turned into them) weight each sample's loss, the
     sum divided by the batch size (Keras's "sum_over_batch_size"); metrics are unweighted, as
     Keras's ``metrics`` (it has ``weighted_metrics`` for weighted ones).
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Callable

import numpy as np

from mixedcore import kernels
from mixedcore import losses as _losses
from mixedcore import metrics as _metrics
from mixedcore._dtypes import as_numeric_array, to_compute
from mixedcore.callbacks import CallbackList, History
from mixedcore.trainers import compile_state, data_adapters
from mixedcore.trainers import scale_out as _scale_out
from mixedcore.trainers.data_adapters import check_batch_size, require_samples
from mixedcore.trainers.progress import format_log, progress_bar, verbosity

__all__ = ["Trainer", "History"]


def _loss_scale_value(optimizer):
    value = optimizer.loss_scale
    if callable(value):
        value = value()
    return float(value)


class Trainer:
    """compile / fit / evaluate / predict / train_on_batch, mixed into a model class.

    The model provides ``built``, ``inputs``, ``input_names``, ``outputs``, ``output_names``,
    ``_dtype_policy``, the weight lists, ``_leaf_layers()``, ``_standardize_inputs(owner, x)``
    (a flat list of arrays aligned with its inputs), ``_run(xs, training)`` (flat outputs and,
    when training, the saved states), ``_backward(states, output_grads, logits_grads)``
    (weight gradients by weight id), ``_output_logits(i, states)``, and three of the hooks
    below (``input_keys``, ``build_from_sample``, ``pack_outputs``).

    Hooks
    -----
    Code that runs a model somewhere else (:mod:`mixedcore.trainers.scale_out`, on Dask)
    calls these methods, ``predict``, ``evaluate`` and the public attributes above, and nothing
    else of the model: ``input_keys``, ``build_from_sample``, ``pack_outputs``,
    ``data_adapter``, ``batch_logs`` and ``mean_logs``.
    """

    # provided by the model class this is mixed into
    _dtype_policy: Any
    inputs: Any
    input_names: list[str]
    outputs: Any
    output_names: list[str]
    _run: Callable[..., Any]
    _standardize_inputs: Callable[..., Any]

    def _init_training(self):
        self.optimizer = None
        self.loss = None
        self.compiled = False
        self._loss_fns = None
        self._loss_weights = None
        self._metric_ids = []
        self._metric_fns = None
        self._compile_config = None
        self.history = None
        self.stop_training = False

    # -- hooks ----------------------------------------------------------------------------------
    def input_keys(self) -> list[str]:
        """Hook: the keys by which a dict of inputs is read, in the order of :attr:`inputs`."""
        raise NotImplementedError

    def build_from_sample(self, owner: str, sample: Any) -> None:
        """Hook: build a model that waits for its first batch (a Sequential without an input
        shape) from ``sample``, an array shaped and typed as one batch of inputs; nothing when
        the model is built."""
        raise NotImplementedError

    def pack_outputs(self, outputs: list) -> Any:
        """Hook: a flat list aligned with :attr:`outputs` arranged as the model's outputs (one
        array, or a list / dict of them), as ``predict`` returns them."""
        raise NotImplementedError

    def data_adapter(self, owner: str, x: Any, y: Any = None, sample_weight: Any = None,
                     class_weight: Any = None, batch_size: int = 32, shuffle: bool = False,
                     steps: int | None = None,
                     with_targets: bool = True) -> data_adapters.DataAdapter:
        """Hook: the batches of ``x`` (and ``y``, ``sample_weight``) as fit / evaluate / predict
        read them, with this model's checks (``owner`` names the caller in error messages).

        Returns a :class:`~mixedcore.trainers.data_adapters.DataAdapter`, whose ``epoch()``
        yields batches ``(xs, ys, sample_weights)``: flat lists aligned with the inputs and
        outputs (``ys`` and the weights None when ``with_targets`` is False, for predict).
        """
        steps = data_adapters.check_steps(owner, steps)
        if class_weight is not None and len(self.outputs) != 1:
            raise ValueError(f"{owner}: class_weight is only supported for models with one "
                             f"output; this model has {len(self.outputs)}")
        standardize = data_adapters.Standardizers(self._standardize_inputs, self._check_xy,
                                                  self._standardize_sample_weight)
        return data_adapters.get_data_adapter(owner, standardize, x, y, sample_weight,
                                              class_weight, batch_size, shuffle, steps,
                                              with_targets)

    def batch_logs(self, xs: list, ys: list, sample_weights: list | None = None) -> dict:
        """Hook: loss and metrics (``{name: value}``) of one batch from :meth:`data_adapter`,
        the model run for inference; the loss without the regularization penalty, which
        :meth:`mean_logs` adds once."""
        outs, _ = self._run(xs, training=False)
        total, per_output, _, _ = self._losses(ys, outs, None, False, sample_weights)
        return self._logs(total, per_output, ys, outs)

    def mean_logs(self, totals: dict, seen: int) -> dict:
        """Hook: the logs of a pass over ``seen`` samples from ``totals``, the sums of its
        :meth:`batch_logs` each multiplied by its batch size (added in batch order, so a pass
        split over several processes gives evaluate's bits): their mean, the regularization
        penalty added to the loss."""
        reg = self._regularization()[0]
        logs = {k: v / max(seen, 1) for k, v in totals.items()}
        logs["loss"] = logs.get("loss", 0.0) + reg
        return logs

    # -- compile --------------------------------------------------------------------------------
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, loss_weights: Any = None,
                metrics: Any = None, weighted_metrics: Any = None, run_eagerly: bool = False,
                steps_per_execution: int = 1, jit_compile: Any = "auto",
                auto_scale_loss: bool = True) -> None:
        """Configure training (Keras 3's signature and argument order).

        Parameters
        ----------
        optimizer : str or optimizer
            "rmsprop" (the default, as in Keras), "sgd", "adam", "adamw", "adagrad", "nadam" or
            an optimizer object.  Under a mixed_float16 model policy it is wrapped in a
            :class:`mixedcore.LossScaleOptimizer` (dynamic loss scaling), unless it already is
            one.
        loss : str, Loss, list or dict
            "categorical_crossentropy", "sparse_categorical_crossentropy", "binary_crossentropy",
            "mean_squared_error" ("mse"), "mean_absolute_error" ("mae"), "huber",
            "kl_divergence" ("kld") or a :mod:`mixedcore.losses` object; for several outputs one loss for all, a
            list aligned with the outputs, or a dict keyed by output names (None: no loss for
            that output).
        metrics : list of str, optional
            "accuracy" (chosen from the loss, as Keras does), "sparse_categorical_accuracy",
            "categorical_accuracy", "binary_accuracy", "top_k_categorical_accuracy", "mae",
            "mse" (and their long names); applied to every output that has a loss.
        loss_weights : list or dict, optional
            Weights of the outputs' losses in the total (default 1 each).
        weighted_metrics : None
            Keras's metrics weighted by sample_weight: not supported (a ValueError otherwise).
        run_eagerly, steps_per_execution, jit_compile
            Keras's execution options, accepted for its signature: mixedcore always runs each
            step eagerly, one at a time, compiled ahead.
        auto_scale_loss : bool, default True
            Wrap the optimizer in a LossScaleOptimizer under a mixed_float16 policy (Keras 3);
            False leaves it as given.
        """
        from mixedcore import optimizers as _optimizers
        if weighted_metrics is not None:
            raise ValueError(f"compile: weighted_metrics={weighted_metrics!r} is not supported; "
                             f"metrics are not weighted by sample_weight")
        for what, value in (("run_eagerly", run_eagerly), ("auto_scale_loss", auto_scale_loss)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"compile: {what} must be a bool, got {value!r}")
        if (isinstance(steps_per_execution, bool) or not isinstance(steps_per_execution, int)
                or steps_per_execution < 1):
            raise ValueError(f"compile: steps_per_execution must be a positive int, got "
                             f"{steps_per_execution!r}")
        if jit_compile not in ("auto", True, False):
            raise ValueError(f"compile: jit_compile must be 'auto', True or False, got "
                             f"{jit_compile!r}")
        opt = _optimizers.get(optimizer)
        if auto_scale_loss and not isinstance(opt, _optimizers.LossScaleOptimizer):
            policy = self._dtype_policy
            policy_scale = getattr(policy, "loss_scale", "no loss scale attribute")
            if policy_scale == "no loss scale attribute":
                if policy.name == "mixed_float16":
                    opt = _optimizers.LossScaleOptimizer(opt)
            elif policy_scale is not None:
                opt = _wrap_with_policy_scale(opt, policy_scale)
        names = list(self.output_names)
        loss_fns = self._per_output("compile", "loss", loss, names, _losses.get)
        weights = self._per_output("compile", "loss_weights", loss_weights, names,
                                   _loss_weight, default=1.0)
        if metrics is None:
            metrics = []
        elif isinstance(metrics, str) or callable(metrics):
            metrics = [metrics]
        elif isinstance(metrics, dict):
            raise ValueError("compile: metrics per output (a dict) are not supported; give one "
                             "list applied to every output")
        for m in metrics:
            _metrics.get(m, None)   # validates names now
        self.optimizer = opt
        self._loss_fns = loss_fns
        self._loss_weights = weights
        self.loss = loss_fns[0] if len(loss_fns) == 1 else loss_fns
        self._metric_ids = list(metrics)
        self._metric_fns = None
        self._compile_config = {"optimizer": optimizer, "loss": loss, "metrics": metrics,
                                "loss_weights": loss_weights}
        self.compiled = True

    # -- compile state, as model files keep it --------------------------------------------------
    def get_compile_config(self) -> dict | None:
        """Keras's compile config of the model (optimizer, loss, loss weights, metrics), what a
        ``.keras`` archive keeps; None when uncompiled or compiled with a schedule."""
        return compile_state.compile_config(self)

    def get_training_config(self) -> dict | None:
        """The compile config in the form of a legacy ``.h5`` file's ``training_config``."""
        return compile_state.legacy_training_config(self)

    def compile_from_config(self, config: Any, *, legacy: bool = False,
                            owner: str = "compile_from_config",
                            source: str = "the compile config", stacklevel: int = 2) -> None:
        """Compile the model from a compile config (``legacy=True``: a ``training_config``) with
        what mixedcore has; what it lacks leaves the model uncompiled, or drops a metric, with a
        warning naming ``owner`` and ``source`` (``stacklevel`` as ``warnings.warn``'s); a
        config that is not a dict is a TypeError."""
        if not isinstance(config, dict):
            raise TypeError(f"{owner}: {source} must be a dict, got {config!r}")
        compile_state.restore_compile(owner, source, self, config, legacy, stacklevel)

    @staticmethod
    def _per_output(owner, what, value, names, convert, default=None):
        """``value`` as a list aligned with the outputs (one value for all, a list, a dict)."""
        if value is None:
            return [None if default is None else default for _ in names]
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(names))
            if unknown:
                raise ValueError(f"{owner}: {what} names {unknown} are not outputs of the model; "
                                 f"outputs: {names}")
            return [default if value.get(n) is None else convert(value[n]) for n in names]
        if isinstance(value, (list, tuple)):
            if len(value) != len(names):
                raise ValueError(f"{owner}: {what} is a list of {len(value)} but the model has "
                                 f"{len(names)} outputs {names}")
            return [default if v is None else convert(v) for v in value]
        return [convert(value) for _ in names]

    def _uses_loss_scale(self):
        from mixedcore import optimizers as _optimizers
        return isinstance(self.optimizer, _optimizers.LossScaleOptimizer)

    def _resolve_metrics(self):
        """[(log name, output index, fn)] for every metric on every output with a loss."""
        if self._metric_fns is None:
            several = len(self.outputs) > 1
            fns = []
            for i, (loss, name) in enumerate(zip(self._loss_fns, self.output_names)):
                if loss is None:
                    continue
                for m in self._metric_ids:
                    mname, fn = _metrics.get(m, loss, self.outputs[i].shape)
                    fns.append((f"{name}_{mname}" if several else mname, i, fn))
            self._metric_fns = fns
        return self._metric_fns

    def _require_compiled(self, owner):
        if not self.compiled:
            raise RuntimeError(f"{owner}: you must call compile() before using the model for "
                               f"training or evaluation")
        if all(fn is None for fn in self._loss_fns):
            raise ValueError(f"{owner}: the model was compiled without a loss; pass loss= to "
                             f"compile()")

    # -- data -----------------------------------------------------------------------------------
    def _standardize_targets(self, owner, y):
        names = list(self.output_names)
        n = len(names)
        if isinstance(y, dict):
            missing = [nm for nm, fn in zip(names, self._loss_fns) if fn is not None
                       and nm not in y]
            if missing:
                raise ValueError(f"{owner}: targets for outputs {missing} are missing; y has "
                                 f"keys {sorted(y)}")
            ys = [y.get(nm) for nm in names]
        elif isinstance(y, (list, tuple)) and n > 1:
            if len(y) != n:
                raise ValueError(f"{owner}: y is a list of {len(y)} arrays but the model has {n} "
                                 f"outputs {names}")
            ys = list(y)
        else:
            if n != 1:
                raise ValueError(f"{owner}: the model has {n} outputs {names}; give y as a list "
                                 f"or a dict keyed by output names")
            ys = [y]
        return [None if v is None else as_numeric_array(f"{owner} (targets)", v) for v in ys]

    def _standardize_sample_weight(self, owner, sample_weight, n):
        """Per-output sample weights: one array for every output, a list aligned with the
        outputs or a dict keyed by output names; each of length ``n``."""
        names = list(self.output_names)
        if sample_weight is None:
            return [None] * len(names)
        if isinstance(sample_weight, dict):
            unknown = sorted(set(sample_weight) - set(names))
            if unknown:
                raise ValueError(f"{owner}: sample_weight names {unknown} are not outputs of the "
                                 f"model; outputs: {names}")
            sws = [sample_weight.get(nm) for nm in names]
        elif isinstance(sample_weight, (list, tuple)) and len(names) > 1:
            if len(sample_weight) != len(names):
                raise ValueError(f"{owner}: sample_weight is a list of {len(sample_weight)} but "
                                 f"the model has {len(names)} outputs {names}")
            sws = list(sample_weight)
        else:
            sws = [sample_weight] * len(names)
        out = []
        for w in sws:
            if w is not None:
                w = as_numeric_array(f"{owner} (sample_weight)", w)
                if w.ndim == 0 or w.shape[0] != n:
                    raise ValueError(f"{owner}: sample_weight of shape {w.shape} does not match "
                                     f"the {n} samples of x")
                if w.dtype.kind not in "biuf":
                    raise TypeError(f"{owner}: sample_weight must be numbers, got {w.dtype}")
                w = w.astype(np.float32, copy=False)
            out.append(w)
        return out

    def _check_xy(self, owner, x, y):
        xs = self._standardize_inputs(owner, x)
        ys = self._standardize_targets(owner, y)
        n = xs[0].shape[0] if xs and xs[0].ndim else None
        for k, v in enumerate(ys):
            if v is not None and (v.ndim == 0 or v.shape[0] != n):
                raise ValueError(f"{owner}: x and y have different numbers of samples: x "
                                 f"{[a.shape for a in xs]}, y {[None if a is None else a.shape for a in ys]}")
        return xs, ys

    # -- one step -------------------------------------------------------------------------------
    def _losses(self, ys, outs, states, with_grads, sws=None):
        """(total loss, per-output losses, output gradients, logits gradients by node id)."""
        if sws is None:
            sws = [None] * len(outs)
        total = 0.0
        per_output = []
        grads = [None] * len(outs)
        logits_grads = {}
        for i, (loss, weight, y, out, sw) in enumerate(zip(self._loss_fns, self._loss_weights,
                                                           ys, outs, sws)):
            if loss is None:
                per_output.append(None)
                continue
            if not with_grads:
                value = loss(y, out, sw)
            else:
                logits, node = None, None
                if isinstance(loss, _losses._Crossentropy) and not loss.from_logits:
                    logits, node = self._output_logits(i, states)
                if logits is not None:
                    value, g = loss.value_and_grad_logits(y, logits, sw)
                    logits_grads[id(node)] = g * g.dtype.type(weight) if weight != 1 else g
                else:
                    value, g = loss.value_and_grad(y, out, sw)
                    if weight != 1:
                        g = g * g.dtype.type(weight)
                    grads[i] = to_compute(g, out.dtype) if out.dtype != g.dtype else g
            per_output.append(value)
            total += weight * value
        return total, per_output, grads, logits_grads

    def _train_step(self, xs, ys, sws=None):
        """One step on a batch: returns (loss, per-output losses, predictions).

        numpy's floating-point warnings are silenced inside: an overflow to inf in the scaled
        backward pass is expected under loss scaling, and the optimizer deals with it.
        """
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            outs, states = self._run(xs, training=True)
            total, per_output, grads, logits_grads = self._losses(ys, outs, states, True, sws)
            reg_value, reg_grads = self._regularization()
            scaled = self._uses_loss_scale()
            if scaled:
                # the loss's gradients scaled: the backward pass of the scaled loss
                scale = self.optimizer.get_scaled_loss
                grads = [None if g is None else scale(g) for g in grads]
                logits_grads = {k: scale(g) for k, g in logits_grads.items()}
            weight_grads = self._backward(states, grads, logits_grads)
            variables = self.trainable_weights
            if self.trainable and variables:
                grads = [weight_grads.get(id(v)) for v in variables]
                if scaled:
                    grads = list(self.optimizer.get_unscaled_gradients(grads))
                for k, v in enumerate(variables):
                    rg = reg_grads.get(id(v))
                    if rg is not None:
                        grads[k] = rg if grads[k] is None else grads[k] + rg
                pairs = [(g, v) for g, v in zip(grads, variables)]
                if any(g is not None for g, _ in pairs):
                    applied = self.optimizer.apply_gradients(pairs)
                    if scaled:
                        self._watch_overflow(applied, pairs)
                self.weights_updated()
        return total + reg_value, per_output, outs

    def _watch_overflow(self, applied, pairs):
        """Warn once per model, naming the first weight whose gradient is not finite, when
        _SKIPPED_WARNING steps in a row were skipped or the dynamic loss scale sits at its floor
        of 1 and still overflows (then the model overflows in float16 whatever the scale)."""
        if applied:
            self._skipped_run = 0
            return
        self._skipped_run = getattr(self, "_skipped_run", 0) + 1
        scale = _loss_scale_value(self.optimizer)
        if getattr(self, "_overflow_warned", False) or not (
                self._skipped_run >= _SKIPPED_WARNING or scale <= 1.0):
            return
        self._overflow_warned = True
        names = _weight_names(self)
        first = next((names.get(id(v), "?") for g, v in pairs
                      if g is not None and not kernels.all_finite(g)), None)
        where = (f"the first non-finite gradient is that of {first!r}" if first else
                 "every gradient was finite after unscaling")
        warnings.warn(f"fit: {self._skipped_run} steps in a row were skipped because the "
                      f"scaled gradients overflowed (loss scale now {scale:g}); {where}",
                      RuntimeWarning, stacklevel=4)

    def _regularization(self):
        """(total penalty, {id(weight): gradient}) over the model's layers."""
        value = 0.0
        grads = {}
        for layer in self._leaf_layers():
            v, g = layer.regularization_losses()
            value += v
            for w, gw in zip(layer.trainable_weights, g):
                if gw is not None:
                    grads[id(w)] = gw
        return value, grads

    def _logs(self, total, per_output, ys, outs, reg_value=0.0):
        logs = {"loss": total + reg_value}
        if len(self.outputs) > 1:
            for name, value in zip(self.output_names, per_output):
                if value is not None:
                    logs[f"{name}_loss"] = value
        for name, i, fn in self._resolve_metrics():
            logs[name] = fn(ys[i], outs[i])
        return logs

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None,
                       return_dict=False):
        """One gradient step on one batch; returns the loss (and metrics) on that batch."""
        self._require_compiled("train_on_batch")
        batches = self.data_adapter("train_on_batch", x, y, sample_weight, class_weight)
        xs, ys, sws = batches.arrays
        loss, per_output, outs = self._train_step(xs, ys, sws)
        logs = self._logs(loss, per_output, ys, outs)
        if return_dict:
            return logs
        return loss if len(logs) == 1 else list(logs.values())

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        """Loss (and metrics) on one batch, without updating the weights."""
        self._require_compiled("test_on_batch")
        batches = self.data_adapter("test_on_batch", x, y, sample_weight,
                          batch_size=max(1, self._num_samples(x)))
        logs = self._evaluate_logs(batches)
        if return_dict:
            return logs
        return logs["loss"] if len(logs) == 1 else list(logs.values())

    def predict_on_batch(self, x):
        """Outputs for one batch (no batching, no progress bar): ``predict`` with the whole
        batch as one, its arrays checked once and run straight away (a batch of one image
        through a small network spent about 35 us in ``predict``'s batching)."""
        if _scale_out._has_dask(x):
            return self.predict(x, batch_size=max(1, self._num_samples(x)), verbose=0)
        xs = self._standardize_inputs("predict", x)
        if not (xs and xs[0].ndim and xs[0].shape[0]):
            return self.predict(x, batch_size=1, verbose=0)     # no samples: empty outputs
        outs, _ = self._run(xs, training=False)
        return self.pack_outputs(list(outs))

    # -- fit / evaluate / predict ---------------------------------------------------------------
    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1,
            verbose: int | str = "auto", callbacks: Any = None, validation_split: float = 0.0,
            validation_data: Any = None, shuffle: bool = True, class_weight: Any = None,
            sample_weight: Any = None, initial_epoch: int = 0,
            steps_per_epoch: int | None = None, validation_steps: int | None = None,
            validation_batch_size: int | None = None, validation_freq: int = 1) -> History:
        """Train for ``epochs`` passes over (x, y); returns a :class:`mixedcore.callbacks.History`.

        Parameters
        ----------
        x, y : array_like, list or dict
            Inputs and targets (class indices for the sparse crossentropy); lists or dicts for
            models with several inputs or outputs.  ``x`` may instead be a Sequence-like dataset
            (``__len__`` / ``__getitem__``, as Keras's PyDataset; its ``on_epoch_end`` is called
            after each epoch) or an iterable / generator, whose batches are ``(x, y)`` or
            ``(x, y, sample_weight)``; ``y`` is then not given.
        batch_size : int, default 32
            For arrays only.
        epochs : int, default 1
            The index of the last epoch (training runs ``initial_epoch`` .. ``epochs - 1``).
        verbose : "auto", 0, 1 or 2
            1 (and "auto"): a progress bar per epoch with loss, metrics and, under loss scaling,
            the current loss scale; 2: one line per epoch; 0: silent.
        callbacks : list of :class:`mixedcore.callbacks.Callback`, optional
        validation_split : float in [0, 1)
            Fraction of the samples (arrays only), taken from the end before shuffling, held out
            for validation.
        validation_data : tuple (x_val, y_val) or (x_val, y_val, sample_weight_val), or a
            dataset / generator; overrides ``validation_split``.
        shuffle : bool, default True
            Shuffle the training samples (or a dataset's batch order) before each epoch
            (``mixedcore.utils.set_random_seed`` makes it reproducible).
        class_weight : dict, optional
            Class index -> weight, turned into sample weights from the targets (one output
            only; not with ``sample_weight``).
        sample_weight : array_like (samples,), optional
            Weights of each sample's loss; a list or dict per output for several outputs.
        initial_epoch : int, default 0
            The epoch to start at (to resume training).
        steps_per_epoch : int, optional
            Batches per epoch; the next epoch continues where the last one stopped.
        validation_steps : int, optional
            Batches of ``validation_data`` to evaluate (default: all of it).
        validation_batch_size : int, optional
            Batch size of array validation data (default ``batch_size``).
        validation_freq : int, default 1
            Validate every ``validation_freq`` epochs.
        """
        self._require_compiled("fit")
        batch_size = check_batch_size("fit", batch_size)
        for what, v in (("epochs", epochs), ("initial_epoch", initial_epoch)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"fit: {what} must be a non-negative int, got {v!r}")
        if isinstance(validation_freq, bool) or not isinstance(validation_freq, (int, np.integer)) \
                or validation_freq < 1:
            raise ValueError(f"fit: validation_freq must be a positive int, got "
                             f"{validation_freq!r}")
        if isinstance(validation_split, bool) or not isinstance(validation_split, (int, float)) \
                or not 0 <= validation_split < 1:
            raise ValueError(f"fit: validation_split must be a float in [0, 1), got "
                             f"{validation_split!r}")
        train = self.data_adapter("fit", x, y, sample_weight, class_weight, batch_size, shuffle,
                        steps_per_epoch)
        if isinstance(train, data_adapters.ArrayDataAdapter):
            require_samples("fit", train.n)
        val_batch = check_batch_size("fit", validation_batch_size or batch_size)
        val = None
        if validation_data is not None:
            if isinstance(validation_data, (tuple, list)):
                if len(validation_data) not in (2, 3):
                    raise ValueError(f"fit: validation_data must be (x_val, y_val) or (x_val, "
                                     f"y_val, sample_weight_val), got {len(validation_data)} items")
                val_x, val_y, *val_w = validation_data
                val = self.data_adapter("fit (validation_data)", val_x, val_y,
                              sample_weight=val_w[0] if val_w else None, batch_size=val_batch,
                              steps=validation_steps)
            else:
                val = self.data_adapter("fit (validation_data)", validation_data,
                              batch_size=val_batch, steps=validation_steps)
        elif validation_split:
            val = train.split(validation_split, val_batch)
        verbose = verbosity("fit", verbose)
        steps = train.steps()
        history = History()
        cbs = CallbackList(callbacks, owner="fit")
        cbs.append(history)
        for cb in cbs:
            cb.set_model(self)
            cb.set_params({"epochs": epochs, "steps": steps, "verbose": verbose})
        scaled = self._uses_loss_scale()
        self.stop_training = False
        self.history = history
        cbs.on_train_begin()
        epoch_logs = {}
        for epoch in range(initial_epoch, epochs):
            cbs.on_epoch_begin(epoch)
            bar = progress_bar(steps, f"Epoch {epoch + 1}/{epochs}", verbose)
            start_time = time.perf_counter()
            totals: dict[str, float] = {}
            seen = 0
            try:
                for step, (xb, yb, swb) in enumerate(train.epoch()):
                    cbs.on_train_batch_begin(step)
                    loss, per_output, outs = self._train_step(xb, yb, swb)
                    m = xb[0].shape[0]
                    seen += m
                    for k, v in self._logs(loss, per_output, yb, outs).items():
                        totals[k] = totals.get(k, 0.0) + v * m
                    running = {k: v / seen for k, v in totals.items()}
                    if bar is not None:
                        post = {k: format_log(v) for k, v in running.items()}
                        if scaled:
                            post["loss_scale"] = format_log(_loss_scale_value(self.optimizer),
                                                      "loss_scale")
                        bar.set_postfix(post, refresh=False)
                        bar.update(1)
                    cbs.on_train_batch_end(step, running)
                    if self.stop_training:
                        break
                if train.exhausted and not seen:
                    break
                epoch_logs = {k: v / seen for k, v in totals.items()} if seen else {}
                if scaled:
                    epoch_logs["loss_scale"] = _loss_scale_value(self.optimizer)
                if val is not None and (epoch + 1) % validation_freq == 0:
                    val_logs = self._evaluate_logs(val, cbs)
                    epoch_logs.update({f"val_{k}": v for k, v in val_logs.items()})
                if bar is not None:
                    bar.set_postfix({k: format_log(v, k) for k, v in epoch_logs.items()},
                                    refresh=True)
            finally:
                if bar is not None:
                    bar.close()
            train.end_epoch()
            cbs.on_epoch_end(epoch, epoch_logs)
            if verbose == 2:
                elapsed = time.perf_counter() - start_time
                parts = " - ".join(f"{k}: {format_log(v, k)}" for k, v in epoch_logs.items())
                print(f"Epoch {epoch + 1}/{epochs} - {elapsed:.2f}s - {parts}", flush=True)
            if self.stop_training or train.exhausted:
                break
        cbs.on_train_end(epoch_logs)
        return history

    def _evaluate_logs(self, batches, cbs=None, bar=None):
        """Loss and metrics over ``batches`` (each batch's values weighted by its size)."""
        if cbs is not None:
            cbs.on_test_begin()
        totals = {}
        seen = 0
        for step, (xb, yb, swb) in enumerate(batches.epoch()):
            if cbs is not None:
                cbs.on_test_batch_begin(step)
            batch = self.batch_logs(xb, yb, swb)
            m = xb[0].shape[0]
            seen += m
            for k, v in batch.items():
                totals[k] = totals.get(k, 0.0) + v * m
            if bar is not None:
                bar.update(1)
            if cbs is not None:
                cbs.on_test_batch_end(step, {k: v / seen for k, v in totals.items()})
        batches.end_epoch()
        logs = self.mean_logs(totals, seen)
        if cbs is not None:
            cbs.on_test_end(logs)
        return logs

    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 verbose: int | str = "auto", sample_weight: Any = None, steps: int | None = None,
                 callbacks: Any = None, return_dict: bool = False) -> Any:
        """Loss (and metrics) on (x, y), batch by batch, without updating the weights.

        ``x`` may be a dataset or generator of ``(x, y)`` / ``(x, y, sample_weight)`` batches
        (``steps`` limits how many are read); ``sample_weight`` weights each sample's loss.
        Dask arrays are reduced chunk by chunk, each chunk's batches weighted as here
        (docs/scale_out.md).
        """
        self._require_compiled("evaluate")
        batch_size = check_batch_size("evaluate", batch_size)
        verbose = verbosity("evaluate", verbose)
        if _scale_out._has_dask(x) or _scale_out._has_dask(y):
            _no_dask_option("evaluate", steps=steps, callbacks=callbacks)
            logs = _scale_out.evaluate(self, x, y, sample_weight, batch_size)
            if return_dict:
                return logs
            return logs["loss"] if len(logs) == 1 else list(logs.values())
        batches = self.data_adapter("evaluate", x, y, sample_weight, None, batch_size, False, steps)
        if isinstance(batches, data_adapters.ArrayDataAdapter):
            require_samples("evaluate", batches.n)
        cbs = CallbackList(callbacks, model=self, owner="evaluate", verbose=verbose,
                           steps=batches.steps())
        bar = progress_bar(batches.steps(), "evaluate", verbose)
        try:
            logs = self._evaluate_logs(batches, cbs, bar)
        finally:
            if bar is not None:
                bar.close()
        if verbose:
            print(" - ".join(f"{k}: {format_log(v)}" for k, v in logs.items()), flush=True)
        if return_dict:
            return logs
        return logs["loss"] if len(logs) == 1 else list(logs.values())

    def _num_samples(self, x):
        xs = self._standardize_inputs("predict", x)
        return xs[0].shape[0] if xs and xs[0].ndim else 0

    def predict(self, x: Any, batch_size: int | None = None, verbose: int | str = "auto",
                steps: int | None = None, callbacks: Any = None) -> Any:
        """Outputs for ``x``, computed ``batch_size`` samples at a time (default 32).

        ``x`` may be a dataset or generator of batches (``x`` or tuples whose first item is
        ``x``); ``steps`` limits how many are read.

        Dask arrays (``dask.array.Array``, alone or in a list / dict, numpy arrays beside them
        taking their batch chunks) give lazy Dask arrays: one task per batch chunk, the model
        shipped once per worker (docs/scale_out.md).

        Returns
        -------
        ndarray, or a list / dict of them for several outputs (as the model's outputs)
            Each in its output layer's compute dtype (float32 with a float32 softmax on top).
        """
        batch_size = check_batch_size("predict", batch_size)
        if _scale_out._has_dask(x):
            _no_dask_option("predict", steps=steps, callbacks=callbacks)
            return _scale_out.predict(self, x, batch_size)
        batches = self.data_adapter("predict", x, batch_size=batch_size, steps=steps,
                          with_targets=False)
        verbose = verbosity("predict", verbose)
        total = batches.steps()
        cbs = CallbackList(callbacks, model=self, owner="predict", verbose=verbose, steps=total)
        bar = progress_bar(total, "predict", verbose)
        pieces: Any = None
        cbs.on_predict_begin()
        try:
            for step, (xb, _, _) in enumerate(batches.epoch()):
                cbs.on_predict_batch_begin(step)
                outs, _ = self._run(xb, training=False)
                if pieces is None:
                    pieces = [[] for _ in outs]
                for r, o in zip(pieces, outs):
                    r.append(o)
                if bar is not None:
                    bar.update(1)
                cbs.on_predict_batch_end(step, {"outputs": self.pack_outputs(list(outs))})
        finally:
            if bar is not None:
                bar.close()
        batches.end_epoch()
        if pieces is None:   # zero samples
            results = [np.empty((0,) + tuple(d or 0 for d in t.shape[1:]), dtype=np.float32)
                       for t in self.outputs]
        else:
            results = [r[0] if len(r) == 1 else np.concatenate(r, axis=0) for r in pieces]
        cbs.on_predict_end()
        return self.pack_outputs(results)


def _no_dask_option(owner, **options):
    given = {k: v for k, v in options.items() if v is not None}
    if given:
        raise ValueError(f"{owner}: {', '.join(f'{k}={v!r}' for k, v in given.items())} is not "
                         f"supported with Dask arrays (each chunk runs as one task)")


# consecutive skipped steps after which fit warns (docs/loss_scaling.md)
_SKIPPED_WARNING = 20


def _weight_names(model):
    """{id(weight array): "layer/weight"} over the model's layers, nested models included."""
    names = {}
    for layer in model.layers:
        if hasattr(layer, "layers") and layer is not model:
            names.update(_weight_names(layer))
            continue
        for name, w in zip(layer.weight_names(), layer.weights):
            names.setdefault(id(w), name)
    return names


def _loss_weight(value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        hint = (" (metrics is compile's fourth argument, after loss_weights, as in Keras 3: "
                "pass metrics=[...])" if isinstance(value, str) else "")
        raise TypeError(f"compile: loss_weights must be numbers, got {type(value).__name__}: "
                        f"{value!r}{hint}")
    return float(value)


def _wrap_with_policy_scale(opt, scale):
    from mixedcore.loss_scale import DynamicLossScale
    from mixedcore.optimizers import LossScaleOptimizer
    if isinstance(scale, DynamicLossScale):
        initial = getattr(scale, "initial_loss_scale", None)
        period = getattr(scale, "increment_period", None)
        return LossScaleOptimizer(opt, dynamic=True, initial_scale=initial,
                                  dynamic_growth_steps=period)
    value = scale() if callable(scale) else scale
    return LossScaleOptimizer(opt, dynamic=False, initial_scale=float(value))
