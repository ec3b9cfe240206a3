"""``python -m mixedcore demo``: mixed-precision training with loss scaling, then inference under
three policies, on a deterministic synthetic dataset or on the user's own ``.npz``."""
import time

import numpy as np

from mixedcore import datasets, kernels, layers, models, utils
from mixedcore.trainers import progress
from mixedcore._dtypes import as_numeric_array
from mixedcore.optimizers import LossScaleOptimizer
from mixedcore.optimizers import Adam
from mixedcore.dtype_policies import policy_scope
from mixedcore.saving.npy_reader import NpzReader

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


def load_npz(path):
    """(x_train, y_train, x_test, y_test) from a user's file; test split = last 20 % if absent.
    Every header is checked (numeric dtype, matching sample counts, the bytes the file holds)
    before any data are read."""
    try:
        reader = NpzReader(path)
    except ValueError as exc:
        raise ValueError(f"demo: cannot read {path!r} as a .npz file ({exc})") from None
    with reader:
        missing = [k for k in ("x_train", "y_train") if k not in reader.keys]
        if missing:
            raise ValueError(f"demo: {path!r} has no {missing} array(s); it needs x_train and "
                             f"y_train (and optionally x_test, y_test); found {reader.keys}")
        keys = [k for k in ("x_train", "y_train", "x_test", "y_test") if k in reader.keys]
        if ("x_test" in keys) != ("y_test" in keys):
            raise ValueError("demo: give both x_test and y_test, or neither")
        try:
            headers = {k: reader.header(k) for k in keys}
        except ValueError as exc:
            raise ValueError(f"demo: {path!r}: {exc}") from None
        for key, header in headers.items():
            as_numeric_array(f"demo ({key})", np.empty(0, header.dtype))
        for split in ("train", "test"):
            if f"x_{split}" in headers:
                x, y = headers[f"x_{split}"].shape, headers[f"y_{split}"].shape
                if len(x) < 2:
                    raise ValueError(f"demo: x_{split} must have shape (samples, features...), "
                                     f"got {x}")
                if len(y) == 0:
                    raise ValueError(f"demo: y_{split} must hold one class label per sample, "
                                     f"got a scalar")
                if x[0] != y[0]:
                    raise ValueError(f"demo: x_{split} has {x[0]} samples, y_{split} {y[0]} "
                                     f"(shapes {x} and {y} in {path!r})")
        try:
            arrays = {k: reader.read(k) for k in keys}
        except ValueError as exc:
            raise ValueError(f"demo: {path!r}: {exc}") from None
    if "x_test" not in arrays:
        n = arrays["x_train"].shape[0]
        split = n - max(1, n // 5)
        arrays["x_test"], arrays["y_test"] = arrays["x_train"][split:], arrays["y_train"][split:]
        arrays["x_train"], arrays["y_train"] = arrays["x_train"][:split], arrays["y_train"][:split]
    return tuple(_prepare(arrays[f"x_{s}"], arrays[f"y_{s}"], s) for s in ("train", "test"))


def _prepare(x, y, split):
    if y.ndim == 2 and y.shape[1] > 1:      # one-hot
        y = np.argmax(y, axis=1)
    y = y.reshape(y.shape[0], -1)
    if y.shape[1] != 1:
        raise ValueError(f"demo: y_{split} must hold one class label per sample, got shape "
                         f"{y.shape}")
    y = y[:, 0]
    if y.dtype.kind == "f" and np.any(y != np.round(y)):
        raise ValueError(f"demo: y_{split} must hold integer class labels")
    if y.size and y.min() < 0:
        raise ValueError(f"demo: y_{split} has negative labels")
    return x.astype(np.float32), y.astype(np.int64)


def build_model(input_shape, n_classes, hidden, policy):
    """The demo classifier: a Keras-style MLP with a float32 softmax on top."""
    with policy_scope(policy):
        stack = [layers.Input(shape=input_shape)]
        if len(input_shape) > 1:
            stack.append(layers.Flatten())
        stack += [layers.Dense(hidden, activation="relu"),
                  layers.Dense(hidden, activation="relu"),
                  layers.Dense(n_classes),
                  layers.Activation("softmax", dtype="float32")]
        return models.Sequential(stack, name=f"mlp_{policy}")


def _throughput(model, x, batch_size, min_time):
    model.predict(x[:batch_size], batch_size=batch_size, verbose=0)   # warm-up (weight cast)
    runs, start = 0, time.perf_counter()
    while True:
        model.predict(x, batch_size=batch_size, verbose=0)
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return runs * x.shape[0] / elapsed


def run(data=None, epochs=5, batch_size=64, hidden=512, samples=16000, seed=0, verbose=1,
        timing=0.5, out=print):
    """Train under mixed_float16 with dynamic loss scaling, then compare inference policies."""
    t0 = time.perf_counter()
    utils.set_random_seed(seed)
    if data is not None:
        (x, y), (xt, yt) = load_npz(data)
        # standardize with the training statistics (raw pixels and the like train badly)
        mean = x.mean(axis=0, dtype=np.float64).astype(np.float32)
        std = x.std(axis=0, dtype=np.float64).astype(np.float32)
        std[std == 0] = 1
        x, xt = (x - mean) / std, (xt - mean) / std
        source = f"{data} (standardized with the training mean and std)"
    else:
        (x, y), (xt, yt) = datasets.load_demo(n_train=samples, n_test=max(samples // 4, 1),
                                              seed=seed)
        source = "synthetic, 10 classes of 3 Gaussian clusters in 64 features (seeded)"
    n_classes = int(max(y.max(), yt.max() if yt.size else 0)) + 1
    out(f"data: {source}")
    out(f"      train {x.shape}, test {xt.shape}, {n_classes} classes")
    out(f"kernels: ISA {kernels.isa()}, {kernels.get_num_threads()} thread(s)")
    out("")
    model = build_model(x.shape[1:], n_classes, hidden, "mixed_float16")
    # compile("adam", ...) alone would wrap Adam in a LossScaleOptimizer with Keras's defaults
    # (growth every 2000 steps); a shorter growth period makes the dynamics visible per epoch.
    steps_per_epoch = -(-x.shape[0] // batch_size)
    opt = LossScaleOptimizer(Adam(learning_rate=1e-3),
                             dynamic_growth_steps=max(50, steps_per_epoch))
    model.compile(opt, "sparse_categorical_crossentropy", metrics=["accuracy"])
    out("training under mixed_float16: float16 compute, float32 weights, dynamic loss scaling "
        f"(initial scale {opt.loss_scale:g}, doubles after {opt.dynamic_growth_steps} finite "
        f"steps, halves and skips the step on overflow)")
    model.summary(print_fn=out)
    history = model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=verbose,
                        validation_data=(xt, yt))
    if verbose != 1 and verbose != 2:
        for e in range(len(history.epoch)):
            out(f"epoch {e + 1}/{epochs}: " + ", ".join(
                f"{k} {progress.format_log(v[e], k)}" for k, v in history.history.items()))
    out(f"final loss scale {opt.loss_scale:.0f} after {int(opt.iterations)} steps")
    out("")
    weights = model.get_weights()
    rows = []
    reference = None
    for policy in POLICIES:
        m = build_model(x.shape[1:], n_classes, hidden, policy)
        m.set_weights(weights)
        probs = m.predict(xt, batch_size=256, verbose=0)
        pred = np.argmax(probs, axis=1)
        if reference is None:
            reference = pred
        speed = _throughput(m, xt, 256, timing)
        memory = sum(layer.inference_nbytes() for layer in m.layers)
        rows.append((policy, f"{np.mean(pred == yt):.4f}", f"{np.mean(pred == reference):.4f}",
                     f"{speed:,.0f}", f"{memory / 1024:,.1f} KiB"))
    header = ("policy", "accuracy", "agrees w/ float32", "samples/s", "weight memory")
    widths = [max(len(r[c]) for r in rows + [header]) for c in range(len(header))]
    out("inference on the test set (batch 256; weight memory = the weights as inference holds "
        "them: kernels packed in the compute dtype):")
    out("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    out("  ".join("-" * w for w in widths))
    for r in rows:
        out("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    out("")
    out(f"demo finished in {time.perf_counter() - t0:.1f} s")
    return rows
