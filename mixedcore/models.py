"""Sequential models: inference, training with backpropagation and loss scaling, weights I/O.

Design:
  A. Inference runs each layer with ``training=False``: Dense layers use the fused GEMM (bias and
     activation in the epilogue) on weights cast once to the compute dtype and cached.
  B. A training step runs the layers with ``training=True`` (they keep what backward needs), takes
     the loss in float32, and backpropagates layer by layer.  Gradients travel between layers in
     each layer's compute dtype (float16 under mixed_float16, where an overflow shows up as inf,
     exactly as in a framework's float16 tensors); weight gradients come out in the variable dtype.
  C. When the loss is a crossentropy on probabilities and the last layer is a softmax, the loss
     is taken from the softmax's logits (Keras makes the same fusion): stable, gradient p - y.
  D. Loss scaling (SPEC 5.6): ``compile`` wraps the optimizer in a LossScaleOptimizer when the
     model's policy is mixed_float16 (or an experimental policy carrying a loss scale).  The output
     gradient is multiplied by the current scale before backprop; the optimizer unscales, checks
     finiteness (skipping the step and backing the scale off on inf/NaN) and applies.
  E. After every applied step each layer's weight version is bumped, so the next call recasts the
     weights to the compute dtype once.
"""
import sys
import time

import numpy as np

from mixedcore import losses as _losses
from mixedcore import metrics as _metrics
from mixedcore import utils
from mixedcore import layers as _layers
from mixedcore._dtypes import as_numeric_array, to_compute
from mixedcore.layers._base import Layer, _unique_name, resolve_policy
from mixedcore.layers._core import InputLayer

__all__ = ["Sequential", "History"]


class History:
    """What ``fit`` returns: ``history`` maps each metric name to its per-epoch values."""

    def __init__(self):
        self.history = {}
        self.epoch = []
        self.params = {}

    def _record(self, epoch, logs):
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)

    def __repr__(self):
        return f"<History epochs={len(self.epoch)} keys={list(self.history)}>"


def _progress(total, desc, verbose):
    """A tqdm progress bar on stdout (Keras's verbose=1), or None."""
    if verbose != 1:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, unit="step", file=sys.stdout, leave=True,
                dynamic_ncols=True, mininterval=0.2)


def _fmt(value, key=""):
    if key == "loss_scale":
        return f"{value:.0f}" if value < 1e15 else f"{value:g}"
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:.4f}"
    return str(value)


def _loss_scale_value(optimizer):
    value = optimizer.loss_scale
    if callable(value):
        value = value()
    return float(value)


class Sequential:
    """A linear stack of layers (``keras.Sequential``).

    Parameters
    ----------
    layers : list of Layer, optional
        May start with ``Input(shape=...)`` (or give the first layer ``input_shape=``): the model
        is then built at once; otherwise it builds on its first call.
    name : str, optional
    dtype : policy-like, optional
        The model's own policy (global policy at construction by default): ``compile`` adds loss
        scaling when it is mixed_float16, as Keras does.

    Examples
    --------
    >>> mixedcore.set_policy("mixed_bfloat16")
    >>> model = Sequential([Input(shape=(784,)), Dense(256, activation="relu"),
    ...                     Dense(10), Activation("softmax", dtype="float32")])
    >>> probs = model.predict(x)
    """

    def __init__(self, layers=None, name=None, dtype=None, trainable=True):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"Sequential: name must be a str, got {type(name).__name__}")
        self.name = name if name is not None else _unique_name("sequential")
        self._dtype_policy = resolve_policy("Sequential", dtype)
        self.trainable = bool(trainable)
        self._input_layer = None
        self._input_shape = None
        self.layers = []
        self.optimizer = None
        self.loss = None
        self.compiled = False
        self._metric_ids = []
        self._metric_fns = None
        self.history = None
        if layers is not None:
            if isinstance(layers, Layer) or not hasattr(layers, "__iter__"):
                raise TypeError(f"Sequential: layers must be a list of layers, got "
                                f"{type(layers).__name__}")
            for layer in layers:
                self.add(layer)

    # -- structure ------------------------------------------------------------------------------
    @property
    def dtype_policy(self):
        return self._dtype_policy

    def add(self, layer):
        """Append a layer (an ``InputLayer`` only as the first)."""
        from mixedcore.layers._node import KerasTensor
        if isinstance(layer, KerasTensor) and isinstance(layer.keras_history[0], InputLayer):
            layer = layer.keras_history[0]
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add: expected a mixedcore layer, got "
                            f"{type(layer).__name__}")
        if isinstance(layer, InputLayer):
            if self.layers or self._input_layer is not None:
                raise ValueError("Sequential.add: an Input layer may only come first")
            self._input_layer = layer
            self._input_shape = layer.input_shape
            return
        if not self.layers and self._input_shape is None and layer._input_shape_arg is not None:
            self._input_shape = (None,) + layer._input_shape_arg
        self.layers.append(layer)
        if self._input_shape is not None:
            self._build_layers()

    def pop(self):
        """Remove and return the last layer."""
        if not self.layers:
            raise ValueError("Sequential.pop: the model has no layers")
        return self.layers.pop()

    def _build_layers(self):
        shape = self._input_shape
        for layer in self.layers:
            if not layer.built:
                if layer.compute_dtype is None:   # "infer" policy: needs a real input
                    return
                layer.build_from_shape(shape)
            shape = layer.output_shape

    def build(self, input_shape=None):
        """Build for inputs of ``input_shape`` (batch dimension first, may be None)."""
        if input_shape is not None:
            input_shape = tuple(input_shape)
            self._input_shape = (None,) + input_shape[1:]
        if self._input_shape is None:
            raise ValueError("Sequential.build: give an input shape, e.g. build((None, 784)), or "
                             "start the model with Input(shape=...)")
        self._build_layers()

    @property
    def built(self):
        return bool(self.layers) and all(layer.built for layer in self.layers)

    @property
    def input_shape(self):
        return self._input_shape

    @property
    def output_shape(self):
        return self.layers[-1].output_shape if self.built else None

    @property
    def weights(self):
        return [w for layer in self.layers for w in layer.weights]

    @property
    def trainable_weights(self):
        if not self.trainable:
            return []
        return [w for layer in self.layers for w in layer.trainable_weights]

    def count_params(self):
        return int(sum(layer.count_params() for layer in self.layers))

    # -- inference ------------------------------------------------------------------------------
    def _check_input(self, x):
        owner = f"Sequential '{self.name}'"
        x = as_numeric_array(owner, x)
        if not self.layers:
            raise ValueError(f"{owner}: the model has no layers")
        expected = self._input_shape
        if expected is not None:
            if len(x.shape) != len(expected) or any(
                    e is not None and e != s for e, s in zip(expected, x.shape)):
                raise ValueError(f"{owner}: expected input of shape {expected}, received "
                                 f"{x.shape}")
        else:
            self._input_shape = (None,) + x.shape[1:]
        return x

    def _forward(self, x, training):
        for layer in self.layers:
            x = layer(x, training=training)
        return x

    def __call__(self, inputs, training=False):
        """Run the layers on one batch (no batching, no progress bar)."""
        x = self._check_input(inputs)
        return self._forward(x, training)

    def predict(self, x, batch_size=None, verbose="auto"):
        """Outputs for ``x``, computed ``batch_size`` samples at a time (default 32).

        Returns
        -------
        ndarray
            In the last layer's compute dtype (float32 with a float32 softmax on top).
        """
        x = self._check_input(x)
        batch_size = self._batch_size("predict", batch_size)
        n = x.shape[0]
        verbose = 1 if verbose == "auto" else verbose
        bar = _progress(-(-n // batch_size), "predict", verbose)
        out = None
        try:
            for start in range(0, n, batch_size):
                y = self._forward(x[start:start + batch_size], training=False)
                if out is None:
                    out = np.empty((n,) + y.shape[1:], dtype=y.dtype)
                out[start:start + y.shape[0]] = y
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        if out is None:   # zero samples
            self._build_layers()
            shape = self.output_shape or (None,)
            out = np.empty((0,) + tuple(d or 0 for d in shape[1:]), dtype=np.float32)
        return out

    @staticmethod
    def _batch_size(owner, batch_size):
        if batch_size is None:
            return 32
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"{owner}: batch_size must be an int, got {type(batch_size).__name__}")
        if batch_size < 1:
            raise ValueError(f"{owner}: batch_size must be >= 1, got {batch_size}")
        return int(batch_size)

    # -- training -------------------------------------------------------------------------------
    def compile(self, optimizer="adam", loss=None, metrics=None):
        """Configure training.

        Parameters
        ----------
        optimizer : str or optimizer
            "sgd", "adam" or an optimizer object.  Under a mixed_float16 model policy it is wrapped
            in a :class:`mixedcore.LossScaleOptimizer` (dynamic loss scaling), unless it already is
            one.  The default is "adam" (Keras's is "rmsprop", which mixedcore does not have).
        loss : str or Loss
            "categorical_crossentropy", "sparse_categorical_crossentropy", "mean_squared_error"
            ("mse") or a :mod:`mixedcore.losses` object.
        metrics : list of str, optional
            "accuracy" (chosen from the loss, as Keras does), "sparse_categorical_accuracy",
            "categorical_accuracy", "binary_accuracy".
        """
        from mixedcore import loss_scale as _loss_scale
        from mixedcore import optimizers as _optimizers
        opt = _optimizers.get(optimizer)
        if not isinstance(opt, _optimizers.LossScaleOptimizer):
            policy = self._dtype_policy
            policy_scale = getattr(policy, "loss_scale", "no loss scale attribute")
            if policy_scale == "no loss scale attribute":
                if policy.name == "mixed_float16":
                    opt = _optimizers.LossScaleOptimizer(opt)
            elif policy_scale is not None:
                opt = self._wrap_with_policy_scale(opt, policy_scale, _loss_scale)
        self.optimizer = opt
        self.loss = None if loss is None else _losses.get(loss)
        if metrics is None:
            metrics = []
        elif isinstance(metrics, str) or callable(metrics):
            metrics = [metrics]
        for m in metrics:
            _metrics.get(m, self.loss)   # validates names now
        self._metric_ids = list(metrics)
        self._metric_fns = None
        self.compiled = True

    @staticmethod
    def _wrap_with_policy_scale(opt, scale, module):
        from mixedcore.optimizers import LossScaleOptimizer
        if isinstance(scale, module.DynamicLossScale):
            initial = getattr(scale, "initial_loss_scale", None)
            period = getattr(scale, "increment_period", None)
            return LossScaleOptimizer(opt, dynamic=True, initial_scale=initial,
                                             dynamic_growth_steps=period)
        value = scale() if callable(scale) else scale
        return LossScaleOptimizer(opt, dynamic=False, initial_scale=float(value))

    def _uses_loss_scale(self):
        from mixedcore import optimizers as _optimizers
        return isinstance(self.optimizer, _optimizers.LossScaleOptimizer)

    def _resolve_metrics(self):
        if self._metric_fns is None:
            self._metric_fns = [_metrics.get(m, self.loss, self.output_shape)
                                for m in self._metric_ids]
        return self._metric_fns

    def _require_compiled(self, owner):
        if not self.compiled:
            raise RuntimeError(f"{owner}: you must call compile() before using the model for "
                               f"training or evaluation")
        if self.loss is None:
            raise ValueError(f"{owner}: the model was compiled without a loss; pass loss= to "
                             f"compile()")

    def _check_xy(self, owner, x, y):
        x = self._check_input(x)
        y = as_numeric_array(f"{owner} (targets)", y)
        if y.ndim == 0 or y.shape[0] != x.shape[0]:
            raise ValueError(f"{owner}: x and y have different numbers of samples: x {x.shape}, "
                             f"y {y.shape}")
        return x, y

    def _train_step(self, x, y):
        """One step on a batch: returns (loss, predictions).

        numpy's floating-point warnings are silenced inside: an overflow to inf in the scaled
        backward pass is expected under loss scaling, and the optimizer deals with it.
        """
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return self._train_step_inner(x, y)

    def _train_step_inner(self, x, y):
        layers = self.layers
        for layer in layers:
            layer.gradients = None
        out = self._forward(x, training=True)
        last = layers[-1]
        logits = None
        if isinstance(self.loss, _losses._Crossentropy) and not self.loss.from_logits \
                and hasattr(last, "logits"):
            logits = last.logits()
        if logits is not None:
            value, grad = self.loss.value_and_grad_logits(y, logits)
        else:
            value, grad = self.loss.value_and_grad(y, out)
        reg_value = 0.0
        reg_grads = []
        for layer in layers:
            v, g = layer.regularization_losses()
            reg_value += v
            reg_grads.extend(g)
        scaled = self._uses_loss_scale()
        if scaled:
            grad = grad * grad.dtype.type(_loss_scale_value(self.optimizer))
        # Backward: layers before the first one with trainable weights need no input gradient.
        with_weights = [i for i, layer in enumerate(layers) if layer.trainable_weights]
        first = with_weights[0] if with_weights else len(layers)
        if logits is not None:
            dx = last.backward_from_logits(grad, need_input_grad=len(layers) - 1 > first)
        else:
            dx = last.backward(to_compute(grad, out.dtype), need_input_grad=len(layers) - 1 > first)
        for i in range(len(layers) - 2, first - 1, -1):
            layer = layers[i]
            dx = layer.backward(to_compute(dx, layer._out_dtype), need_input_grad=i > first)
        grads, variables = [], []
        for layer in layers:
            if layer.trainable_weights:
                grads.extend(layer.gradients)
                variables.extend(layer.trainable_weights)
        if self.trainable and variables:
            if scaled:
                grads = list(self.optimizer.get_unscaled_gradients(grads))
            for k, g in enumerate(reg_grads):
                if g is not None:
                    grads[k] = grads[k] + g
            self.optimizer.apply_gradients(list(zip(grads, variables)))
            for layer in layers:
                layer.weights_updated()
        return value + reg_value, out

    def train_on_batch(self, x, y, return_dict=False):
        """One gradient step on one batch; returns the loss (and metrics) on that batch."""
        self._require_compiled("train_on_batch")
        x, y = self._check_xy("train_on_batch", x, y)
        loss, out = self._train_step(x, y)
        logs = {"loss": loss}
        for name, fn in self._resolve_metrics():
            logs[name] = fn(y, out)
        if return_dict:
            return logs
        return loss if len(logs) == 1 else list(logs.values())

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", validation_split=0.0,
            validation_data=None, shuffle=True, initial_epoch=0):
        """Train for ``epochs`` passes over (x, y); returns a :class:`History`.

        Parameters
        ----------
        x, y : array_like
            Inputs and targets (class indices for the sparse crossentropy).
        batch_size : int, default 32
        epochs : int, default 1
        verbose : "auto", 0, 1 or 2
            1 (and "auto"): a progress bar per epoch with loss, metrics and, under loss scaling,
            the current loss scale; 2: one line per epoch; 0: silent.
        validation_split : float in [0, 1)
            Fraction of the samples, taken from the end before shuffling, held out for validation.
        validation_data : tuple (x_val, y_val), optional
            Overrides ``validation_split``.
        shuffle : bool, default True
            Shuffle the training samples before each epoch (``mixedcore.utils.set_random_seed``
            makes it reproducible).
        """
        self._require_compiled("fit")
        x, y = self._check_xy("fit", x, y)
        batch_size = self._batch_size("fit", batch_size)
        for what, v in (("epochs", epochs), ("initial_epoch", initial_epoch)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"fit: {what} must be a non-negative int, got {v!r}")
        if isinstance(validation_split, bool) or not isinstance(validation_split, (int, float)) \
                or not 0 <= validation_split < 1:
            raise ValueError(f"fit: validation_split must be a float in [0, 1), got "
                             f"{validation_split!r}")
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise ValueError("fit: validation_data must be a tuple (x_val, y_val)")
            x_val, y_val = self._check_xy("fit (validation_data)", *validation_data)
        elif validation_split:
            split = int(x.shape[0] * (1 - validation_split))
            if split == 0 or split == x.shape[0]:
                raise ValueError(f"fit: validation_split={validation_split} leaves no training or "
                                 f"no validation samples out of {x.shape[0]}")
            x, x_val = x[:split], x[split:]
            y, y_val = y[:split], y[split:]
        else:
            x_val = y_val = None
        verbose = 1 if verbose == "auto" else verbose
        n = x.shape[0]
        steps = -(-n // batch_size)
        history = History()
        history.params = {"epochs": epochs, "steps": steps, "verbose": verbose}
        rng = utils._rng()
        scaled = self._uses_loss_scale()
        for epoch in range(initial_epoch, epochs):
            order = rng.permutation(n) if shuffle else None
            bar = _progress(steps, f"Epoch {epoch + 1}/{epochs}", verbose)
            start_time = time.perf_counter()
            totals = {}
            seen = 0
            try:
                for step in range(steps):
                    idx = slice(step * batch_size, min(n, (step + 1) * batch_size))
                    if order is not None:
                        idx = np.sort(order[idx])
                    xb, yb = x[idx], y[idx]
                    loss, out = self._train_step(xb, yb)
                    m = xb.shape[0]
                    seen += m
                    totals["loss"] = totals.get("loss", 0.0) + loss * m
                    for name, fn in self._resolve_metrics():
                        totals[name] = totals.get(name, 0.0) + fn(yb, out) * m
                    if bar is not None:
                        post = {k: _fmt(v / seen) for k, v in totals.items()}
                        if scaled:
                            post["loss_scale"] = _fmt(_loss_scale_value(self.optimizer),
                                                      "loss_scale")
                        bar.set_postfix(post, refresh=False)
                        bar.update(1)
                logs = {k: v / seen for k, v in totals.items()}
                if scaled:
                    logs["loss_scale"] = _loss_scale_value(self.optimizer)
                if x_val is not None:
                    val = self._evaluate_logs(x_val, y_val, batch_size)
                    logs.update({f"val_{k}": v for k, v in val.items()})
                if bar is not None:
                    bar.set_postfix({k: _fmt(v, k) for k, v in logs.items()}, refresh=True)
            finally:
                if bar is not None:
                    bar.close()
            if verbose == 2:
                elapsed = time.perf_counter() - start_time
                parts = " - ".join(f"{k}: {_fmt(v, k)}" for k, v in logs.items())
                print(f"Epoch {epoch + 1}/{epochs} - {elapsed:.2f}s - {parts}", flush=True)
            history._record(epoch, logs)
        self.history = history
        return history

    def _evaluate_logs(self, x, y, batch_size):
        n = x.shape[0]
        totals = {}
        for start in range(0, n, batch_size):
            xb, yb = x[start:start + batch_size], y[start:start + batch_size]
            out = self._forward(xb, training=False)
            m = xb.shape[0]
            totals["loss"] = totals.get("loss", 0.0) + self.loss(yb, out) * m
            for name, fn in self._resolve_metrics():
                totals[name] = totals.get(name, 0.0) + fn(yb, out) * m
        reg = sum(layer.regularization_losses()[0] for layer in self.layers)
        logs = {k: v / max(n, 1) for k, v in totals.items()}
        logs["loss"] = logs.get("loss", 0.0) + reg
        return logs

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", return_dict=False):
        """Loss (and metrics) on (x, y), batch by batch, without updating the weights."""
        self._require_compiled("evaluate")
        x, y = self._check_xy("evaluate", x, y)
        batch_size = self._batch_size("evaluate", batch_size)
        logs = self._evaluate_logs(x, y, batch_size)
        verbose = 1 if verbose == "auto" else verbose
        if verbose:
            print(" - ".join(f"{k}: {_fmt(v)}" for k, v in logs.items()), flush=True)
        if return_dict:
            return logs
        return logs["loss"] if len(logs) == 1 else list(logs.values())

    # -- weights --------------------------------------------------------------------------------
    def get_weights(self):
        """All weights, layer by layer, in Keras order and shapes."""
        return [w for layer in self.layers for w in layer.get_weights()]

    def _weight_specs(self):
        return [(name, value.shape) for layer in self.layers
                for name, value in zip(layer.weight_names(), layer.weights)]

    def set_weights(self, weights):
        """Set all weights from a list in :meth:`get_weights` order (e.g. a Keras model's).

        Raises
        ------
        ValueError
            The model is not built, the count differs or a shape differs (message: expected vs
            received).  Nothing is changed then.
        TypeError
            A non-numeric array.
        """
        owner = f"Sequential '{self.name}'.set_weights"
        if not self.built:
            raise ValueError(f"{owner}: the model is not built yet; start it with Input(shape=...) "
                             f"or call build() first")
        if isinstance(weights, np.ndarray) or not hasattr(weights, "__len__"):
            raise TypeError(f"{owner}: expected a list of arrays, got {type(weights).__name__}")
        specs = self._weight_specs()
        if len(weights) != len(specs):
            listing = ", ".join(f"{n} {s}" for n, s in specs)
            raise ValueError(f"{owner}: expected {len(specs)} weight arrays ({listing}), "
                             f"received {len(weights)}")
        arrays = [as_numeric_array(owner, w) for w in weights]
        for k, ((name, shape), w) in enumerate(zip(specs, arrays)):
            if w.shape != shape:
                raise ValueError(f"{owner}: weight {k} ({name}) has shape {w.shape}, expected "
                                 f"{shape}")
        k = 0
        for layer in self.layers:
            count = len(layer.weights)
            if count:
                layer.set_weights(arrays[k:k + count])
            k += count

    def save_weights(self, filepath, overwrite=True):
        """Write the weights to a ``.npz`` file (arrays in get_weights order, with their names)."""
        path = str(filepath)
        if not path.endswith(".npz"):
            raise ValueError(f"save_weights: the file name must end in '.npz', received {path!r}")
        import os
        if not overwrite and os.path.exists(path):
            raise ValueError(f"save_weights: {path!r} exists and overwrite=False")
        if not self.built:
            raise ValueError("save_weights: the model is not built yet")
        arrays = {f"w{k:04d}": w for k, w in enumerate(self.get_weights())}
        names = np.array([n for n, _ in self._weight_specs()], dtype=str)
        np.savez(path, __names__=names, **arrays)

    def load_weights(self, filepath):
        """Read weights from a ``.npz`` file and set them (count and shapes must match).

        Reads what :meth:`save_weights` writes, and also a plain ``np.savez(path, *weights)``
        file (keys ``arr_0``, ``arr_1``, ...), such as
        ``np.savez("w.npz", *keras_model.get_weights())``.
        """
        path = str(filepath)
        try:
            data = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ValueError(f"load_weights: cannot read {path!r} as a .npz file ({exc})") from None
        with data:
            ours = [k for k in data.files if k.startswith("w") and k[1:].isdigit()]
            plain = [k for k in data.files if k.startswith("arr_") and k[4:].isdigit()]
            keys = sorted(ours, key=lambda k: int(k[1:])) if ours else \
                sorted(plain, key=lambda k: int(k[4:]))
            arrays = [data[k] for k in keys]
        self.set_weights(arrays)

    # -- summary and config -----------------------------------------------------------------------
    def summary(self, line_length=None, print_fn=None):
        """Print layer names, output shapes, parameter counts and dtype policies."""
        if not self.built:
            raise ValueError("This model has not yet been built. Build the model first by "
                             "calling build() or by calling the model on a batch of data, or "
                             "start it with Input(shape=...).")
        print_fn = print_fn or print
        rows = [("Layer (type)", "Output Shape", "Param #", "Policy")]
        for layer in self.layers:
            rows.append((f"{layer.name} ({type(layer).__name__})", str(layer.output_shape),
                         f"{layer.count_params():,}", layer.dtype_policy.name))
        widths = [max(len(r[c]) for r in rows) + 3 for c in range(4)]
        total = line_length or sum(widths)
        print_fn(f'Model: "{self.name}"')
        print_fn("=" * total)
        for i, row in enumerate(rows):
            print_fn("".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
            if i == 0:
                print_fn("=" * total)
        print_fn("=" * total)
        trainable = sum(w.size for w in self.trainable_weights)
        total_params = self.count_params()
        memory = sum(w.nbytes for w in self.weights)
        print_fn(f"Total params: {total_params:,} ({memory / 1024:.1f} KB)")
        print_fn(f"Trainable params: {trainable:,}")
        print_fn(f"Non-trainable params: {total_params - trainable:,}")

    def get_config(self):
        layers = [_layers.serialize(layer) for layer in self.layers]
        if self._input_layer is not None:
            layers.insert(0, _layers.serialize(self._input_layer))
        config = {"name": self.name, "trainable": self.trainable, "layers": layers}
        try:
            from mixedcore import policies
            config["dtype"] = policies.serialize(self._dtype_policy)
        except Exception:
            config["dtype"] = self._dtype_policy.name
        if self._input_layer is None and self._input_shape is not None:
            config["build_input_shape"] = self._input_shape
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        if not isinstance(config, dict) or "layers" not in config:
            raise ValueError("Sequential.from_config: expected a dict with a 'layers' list")
        model = cls(name=config.get("name"), dtype=config.get("dtype"),
                    trainable=config.get("trainable", True))
        for layer_config in config["layers"]:
            model.add(_layers.deserialize(layer_config, custom_objects))
        if config.get("build_input_shape") is not None and not model.built:
            model.build(config["build_input_shape"])
        return model
