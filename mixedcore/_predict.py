"""``python -m mixedcore predict``: run a saved model over an array file, batch by batch.

Design:
  A. The input is read with ``mmap_mode="r"`` (a ``.npy``) or member by member (a ``.npz``), and
     a single output is written through a memory-mapped ``.npy``: an input larger than memory
     streams through, one batch of it in memory at a time.  Several outputs are gathered and
     written to a ``.npz``, one array per output name.
  B. Everything the user can get wrong (files, shapes, dtypes, policy names, the output name) is
     checked before the first batch runs, and reported as a :class:`CommandError`, which the
     command line prints and turns into exit code 2.
  C. Outputs keep their dtype, except bfloat16, which ``.npy`` files cannot name portably: it is
     widened to float32 (exactly).
  D. The output file is written under a temporary name beside it and renamed when complete.
"""
import contextlib
import os
import sys
import time

import numpy as np

__all__ = ["CommandError", "run"]


class CommandError(Exception):
    """A user error of the command: printed as ``error: <message>``, exit code 2."""


def _policy(name):
    from mixedcore import dtype_policies as policies
    if name is None:
        return None
    try:
        policy = policies.get(name)
    except (TypeError, ValueError) as exc:
        raise CommandError(f"--policy: {exc}") from None
    if policy.compute_dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise CommandError(f"--policy: {name!r} is not a floating-point policy; use float32, "
                           f"mixed_float16, mixed_bfloat16, float16, bfloat16 or float64")
    return policy


def _load_model(path, policy):
    from mixedcore import models
    if not os.path.isfile(path):
        raise CommandError(f"model file {path!r} does not exist" if not os.path.exists(path)
                           else f"model file {path!r} is not a regular file")
    try:
        return models.load_model(path, compile=False, dtype_policy=policy)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None


def _numeric(what, array):
    if array.dtype.kind not in "biuf" and array.dtype.name not in ("bfloat16", "float8_e4m3fn",
                                                                   "float8_e5m2"):
        raise CommandError(f"{what} holds {array.dtype} data; numeric data are needed")
    if array.ndim == 0:
        raise CommandError(f"{what} is a scalar; an array with a batch dimension is needed")
    return array


def _read_inputs(path, model):
    """The input arrays, in the order of ``model.inputs`` (memory-mapped where possible)."""
    if not os.path.exists(path):
        raise CommandError(f"input file {path!r} does not exist")
    if not os.path.isfile(path):
        raise CommandError(f"input file {path!r} is not a regular file")
    names = list(model.input_names)
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError as exc:
        raise CommandError(f"cannot read input file {path!r} ({exc})") from None
    if head == b"\x93NUMPY":
        if len(names) != 1:
            raise CommandError(f"the model has {len(names)} inputs {names}: give an .npz file "
                               f"with one array per input name")
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read input file {path!r} as .npy ({exc})") from None
        return [_numeric(f"input file {path!r}", array)]
    if head[:4] != b"PK\x03\x04":
        raise CommandError(f"input file {path!r} is neither a .npy nor a .npz file (it starts "
                           f"with {head!r})")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read input file {path!r} as .npz ({exc})") from None
    with data:
        keys = list(data.files)
        if len(names) == 1 and len(keys) == 1:
            chosen = keys
        else:
            missing = [n for n in names if n not in keys]
            if missing:
                raise CommandError(f"input file {path!r} has arrays {keys}; the model's inputs "
                                   f"are {names} (missing: {missing})")
            extra = [k for k in keys if k not in names]
            if extra:
                raise CommandError(f"input file {path!r} has arrays {extra} that are not "
                                   f"inputs of the model (its inputs: {names})")
            chosen = names
        try:
            arrays = [data[k] for k in chosen]
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read input file {path!r} ({exc})") from None
    return [_numeric(f"array {k!r} of {path!r}", a) for k, a in zip(chosen, arrays)]


def _check_shapes(model, arrays):
    """Every array fits its input; all have one number of samples, which is returned."""
    for t, a, name in zip(model.inputs, arrays, model.input_names):
        expected = tuple(t.shape)
        if a.ndim != len(expected) or any(e is not None and e != s
                                          for e, s in zip(expected[1:], a.shape[1:])):
            label = f"input '{name}'" if len(arrays) > 1 else "the input"
            raise CommandError(f"{label} has shape {a.shape}; the model expects "
                               f"{expected} (None: any size)")
    counts = [a.shape[0] for a in arrays]
    if len(set(counts)) != 1:
        raise CommandError(f"the inputs have different numbers of samples: "
                           f"{dict(zip(model.input_names, counts))}")
    if counts[0] == 0:
        raise CommandError("the input has no samples (its first dimension is 0)")
    return counts[0]


def _check_out(path, several, names):
    lower = path.lower()
    if several and not lower.endswith(".npz"):
        raise CommandError(f"the model has {len(names)} outputs {names}: --out must end in "
                           f".npz (one array per output name), got {path!r}")
    if not several and not lower.endswith((".npy", ".npz")):
        raise CommandError(f"--out must end in .npy (or .npz), got {path!r}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CommandError(f"--out: the directory {directory!r} does not exist")
    if os.path.isdir(path):
        raise CommandError(f"--out: {path!r} is a directory")


class _Progress:
    """tqdm when it is installed, else a line on stderr at every tenth of the work."""

    def __init__(self, total, enabled):
        self.total, self.done, self.bar, self.next_report = total, 0, None, 0.1
        self.enabled = enabled
        self.start = time.perf_counter()
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            self.bar = tqdm(total=total, unit="sample", desc="predict", file=sys.stderr)

    def update(self, n):
        self.done += n
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
            return
        if self.done >= self.total or self.done >= self.next_report * self.total:
            elapsed = time.perf_counter() - self.start
            print(f"predict: {self.done}/{self.total} samples ({elapsed:.1f} s)",
                  file=sys.stderr, flush=True)
            while self.next_report * self.total <= self.done:
                self.next_report += 0.1

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _storable(a):
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


@contextlib.contextmanager
def _temporary_beside(path):
    directory, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{base}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def run(model_path, input_path, out_path, policy=None, batch_size=32, progress=None):
    """Predict ``input_path`` with the model in ``model_path`` and write ``out_path``.

    Parameters
    ----------
    model_path : str
        A ``.keras`` or ``.h5`` model (Keras's or mixedcore's).
    input_path : str
        A ``.npy`` array (a model with one input) or a ``.npz`` with one array per input name.
    out_path : str
        ``.npy`` for a model with one output; ``.npz`` (one array per output name) for several.
    policy : str, optional
        Serve the model under this policy (``load_model``'s ``dtype_policy``).
    batch_size : int, default 32
        Samples per batch.
    progress : bool, optional
        Show progress on stderr; by default when there are more than 8 batches.

    Returns
    -------
    dict
        ``{"samples": n, "outputs": {name: shape}}``.

    Raises
    ------
    CommandError
        Missing or unreadable files, inputs that do not fit the model, an unknown policy.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise CommandError(f"--batch-size must be a positive integer, got {batch_size!r}")
    policy = _policy(policy)
    model = _load_model(model_path, policy)
    arrays = _read_inputs(input_path, model)
    n = _check_shapes(model, arrays)
    names = list(model.output_names)
    several = len(model.outputs) > 1
    _check_out(out_path, several, names)
    batches = -(-n // batch_size)
    bar = _Progress(n, progress if progress is not None else batches > 8)
    gathered = [[] for _ in names]
    single = None
    try:
        with _temporary_beside(out_path) as tmp:
            for start in range(0, n, batch_size):
                chunk = [np.asarray(a[start:start + batch_size]) for a in arrays]
                try:
                    outs = model.predict(chunk if len(chunk) > 1 else chunk[0],
                                         batch_size=batch_size, verbose=0)
                except (ValueError, TypeError) as exc:
                    raise CommandError(f"samples {start}..{start + len(chunk[0]) - 1}: "
                                       f"{exc}") from None
                if isinstance(outs, dict):
                    outs = [outs[k] for k in names]
                elif not isinstance(outs, (list, tuple)):
                    outs = [outs]
                outs = [_storable(o) for o in outs]
                if several or out_path.lower().endswith(".npz"):
                    for store, o in zip(gathered, outs):
                        store.append(o)
                else:
                    if single is None:
                        single = np.lib.format.open_memmap(
                            tmp, mode="w+", dtype=outs[0].dtype, shape=(n,) + outs[0].shape[1:])
                    single[start:start + len(outs[0])] = outs[0]
                bar.update(len(chunk[0]))
            if single is not None:
                single.flush()
                shapes = {names[0]: single.shape}
                del single
            else:
                results = {k: np.concatenate(parts) for k, parts in zip(names, gathered)}
                with open(tmp, "wb") as f:
                    np.savez(f, **results)
                shapes = {k: v.shape for k, v in results.items()}
    finally:
        bar.close()
    return {"samples": n, "outputs": shapes}


def _read_labels(path, n):
    if not os.path.isfile(path):
        raise CommandError(f"labels file {path!r} does not exist" if not os.path.exists(path)
                           else f"labels file {path!r} is not a regular file")
    try:
        labels = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read labels file {path!r} as .npy ({exc})") from None
    if not isinstance(labels, np.ndarray):
        raise CommandError(f"labels file {path!r} is a .npz; give one .npy array")
    labels = _numeric(f"labels file {path!r}", labels)
    if labels.shape[0] != n:
        raise CommandError(f"labels file {path!r} has {labels.shape[0]} samples; the input has "
                           f"{n}")
    return labels


def report(model_path, input_path, labels_path=None, policy=None, batch_size=32,
           json_path=None):
    """The numerics report (``utils.numerics_report``) of a saved model over an array file.

    With ``labels_path`` (a ``.npy`` of targets) the gradients are reported too; the model must
    have been saved compiled (its loss is in the file).  With ``json_path`` the numbers are also
    written there as JSON (``report.as_dict()`` with the model, policy and sample count).

    Returns
    -------
    NumericsReport

    Raises
    ------
    CommandError
        Missing or unreadable files, inputs or labels that do not fit the model, an unknown
        policy, labels for a model saved without its loss.
    """
    import json
    from mixedcore.utils import numerics_report
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise CommandError(f"--batch-size must be a positive integer, got {batch_size!r}")
    policy = _policy(policy)
    if not os.path.isfile(model_path):
        raise CommandError(f"model file {model_path!r} does not exist"
                           if not os.path.exists(model_path)
                           else f"model file {model_path!r} is not a regular file")
    from mixedcore import models
    try:
        model = models.load_model(model_path, compile=labels_path is not None,
                                  dtype_policy=policy)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    arrays = _read_inputs(input_path, model)
    n = _check_shapes(model, arrays)
    labels = None
    if labels_path is not None:
        labels = _read_labels(labels_path, n)
        if not model.compiled:
            raise CommandError(f"--labels: model file {model_path!r} was saved without its "
                               f"loss (not compiled), so there is no gradient to report")
    if json_path is not None:
        directory = os.path.dirname(os.path.abspath(json_path))
        if not os.path.isdir(directory):
            raise CommandError(f"--json: directory {directory!r} does not exist")
    x = arrays[0] if len(arrays) == 1 else dict(zip(model.input_names, arrays))
    try:
        result = numerics_report(model, x, labels, batch_size=batch_size)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise CommandError(str(exc)) from None
    if json_path is not None:
        payload = {"model": result.model_name, "policy": result.policy,
                   "samples": result.samples, "loss_scale": result.loss_scale,
                   "layers": result.as_dict()}
        with _temporary_beside(json_path) as tmp:
            with open(tmp, "w") as f:
                json.dump(payload, f, indent=1)
    return result
