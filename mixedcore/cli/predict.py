"""``python -m mixedcore predict``: run a saved model over an array file, batch by batch.

Design:
  A. The input streams through (``common.read_inputs``: memory-mapped where possible), one
     batch of it in memory at a time, and a single output is written through a memory-mapped
     ``.npy``: an input larger than memory goes through.  Several outputs are gathered and
     written to a ``.npz``, one array per output name.
  B. Everything the user can get wrong is checked before the first batch runs and reported as
     a ``CommandError`` (exit code 2).
  C. Outputs keep their dtype, except bfloat16, which ``.npy`` files cannot name portably: it is
     widened to float32 (exactly).
  D. The output file is written under a temporary name beside it and renamed when complete.
"""
import os
import sys
import time

import numpy as np

from mixedcore.cli.common import (CommandError, check_output, check_shapes, policy_option,
                                  read_inputs, written)

__all__ = ["CommandError", "retain_freed_memory", "run"]


def _load_model(path, policy):
    from mixedcore import models
    if not os.path.isfile(path):
        raise CommandError(f"model file {path!r} does not exist" if not os.path.exists(path)
                           else f"model file {path!r} is not a regular file")
    try:
        return models.load_model(path, compile=False, dtype_policy=policy)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None


def _check_out(path, several, names):
    lower = path.lower()
    if several and not lower.endswith(".npz"):
        raise CommandError(f"the model has {len(names)} outputs {names}: --out must end in "
                           f".npz (one array per output name), got {path!r}")
    if not several and not lower.endswith((".npy", ".npz")):
        raise CommandError(f"--out must end in .npy (or .npz), got {path!r}")


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
    policy = policy_option(policy)
    check_output("--out", out_path, (("the model", model_path), ("the input", input_path)))
    model = _load_model(model_path, policy)
    arrays = read_inputs(input_path, model)
    n = check_shapes(model, arrays)
    names = list(model.output_names)
    several = len(model.outputs) > 1
    _check_out(out_path, several, names)
    batches = -(-n // batch_size)
    bar = _Progress(n, progress if progress is not None else batches > 8)
    gathered = [[] for _ in names]
    single = None
    try:
        with written("--out", out_path) as tmp:
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


def retain_freed_memory():
    """Keep freed memory in the process (glibc's malloc only), for the predict command.

    Inference frees each intermediate array as soon as it is read; glibc then hands large blocks
    back to the kernel and the next batch faults fresh, zeroed pages in again, about a seventh of
    a transformer encoder's time on the development machine.  A process that runs the same
    model batch after batch is better off keeping them.  The command owns its process, so it
    sets this; a server that imports mixedcore can set MALLOC_TRIM_THRESHOLD_ and
    MALLOC_MMAP_THRESHOLD_ itself (docs/from_keras.md).  Variables already set win."""
    import ctypes
    import ctypes.util
    if "MALLOC_TRIM_THRESHOLD_" in os.environ or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return                                       # not glibc: leave the allocator alone
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 64 << 20)
    mallopt(m_trim_threshold, 512 << 20)
