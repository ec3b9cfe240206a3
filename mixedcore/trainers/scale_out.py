"""Predict and evaluate over Dask arrays, on Dask's local schedulers or a dask.distributed cluster.

``Model.predict`` and ``Model.evaluate`` come here when given ``dask.array.Array`` inputs; the
functions below are also what a ``map_blocks`` of your own needs (docs/scale_out.md; users
import them from ``mixedcore.scale_out``).  Dask is optional: nothing here imports it until a
Dask array or :func:`delayed_model` asks for it.

This module receives the model and never imports ``mixedcore.models``: it uses the model's
public attributes (``built``, ``inputs``, ``input_names``, ``outputs``, ``output_names``),
``predict`` and the trainer's hooks (:class:`mixedcore.trainers.trainer.Trainer`):
``input_keys``, ``build_from_sample``, ``pack_outputs``, ``data_adapter``, ``batch_logs`` and
``mean_logs``.

How the model travels
---------------------
The model is pickled once, on the client, into a :class:`ModelHandle` (the pickle holds the
weights, the layers' configs and policies and the compile state, never the packed or
compute-dtype copies of the weights).  The handle is one key of the task graph, which every
chunk task depends on, so a distributed scheduler copies it to each worker once per
computation; on the worker, :meth:`ModelHandle.model` unpickles it the first time a thread asks
and keeps it in a per-process cache, so later chunks and later computations with the same model
on that thread reuse it.

The cache (design):
  A. Keyed by the SHA-256 of the pickle's bytes, computed by the process that uses the handle,
     the first time it uses it, and held in this module's table beside the very bytes object
     it was computed from (never in the handle, never sent: a pickled handle is its bytes
     alone).  A handle cannot name the key it is stored under, so a handle with other bytes
     never replaces, nor is mistaken for, a cached model.
  B. One model per thread: the key also holds the thread, so two tasks running at once never
     share a model object (a worker with n threads holds up to n copies of a model), and
     nothing a task does to its model reaches a task on another thread.  The chunk tasks of
     ``predict`` and ``evaluate`` only run the model (tested to leave its weights and
     configuration as they were), so the next task on the thread sees the same model.
  C. The single lock guards the table only: a model is unpickled with no lock held (only the
     thread that asks unpickles under its own key, so no two threads wait on one unpickle
     nor unpickle the same key) and then inserted.  At most ``_CACHE_SIZE`` models per thread;
     the entries of threads that have ended are dropped at the next insertion.
  D. The blob is a pickle, and unpickling runs whatever code the pickle names: a handle must
     come from a trusted client (docs/scale_out.md).  What comes out must be a model
     (TypeError otherwise).

Threads
-------
A chunk task runs the model with one kernel thread when it runs on one of several Dask threads
of a process (Dask's threaded scheduler, a distributed worker with ``nthreads > 1``): Dask's
threads already keep the CPUs busy.  A count set explicitly wins: the calling thread's own
(``kernels.threads``, threadpoolctl), the process-wide ``kernels.set_num_threads``, or
``MIXEDCORE_NUM_THREADS`` / ``OMP_NUM_THREADS`` in the process's environment (read when the task
runs, so a distributed nanny's ``OMP_NUM_THREADS=1`` applies to forked workers too).
"""
import collections
import contextlib
import hashlib
import operator
import os
import pickle
import sys
import threading
import weakref
from typing import Any

import numpy as np

from mixedcore import kernels

__all__ = ["ModelHandle", "delayed_model", "is_dask_array", "model_threads", "worker_info"]

# what a model offers this module besides its public attributes (see the module notes)
_HOOKS = ("predict", "input_keys", "build_from_sample", "pack_outputs", "data_adapter",
          "batch_logs", "mean_logs")


def is_dask_array(x):
    """True for a ``dask.array.Array`` (without importing Dask when it is not loaded yet)."""
    mod = sys.modules.get("dask.array")
    return mod is not None and isinstance(x, mod.Array)


def _has_dask(x):
    """Any Dask array in ``x`` (an array, or a list / tuple / dict of them)."""
    if "dask.array" not in sys.modules:
        return False
    if isinstance(x, dict):
        return any(is_dask_array(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(is_dask_array(v) for v in x)
    return is_dask_array(x)


def _import_dask(owner):
    try:
        import dask
        import dask.array as da
    except ImportError as exc:        # pragma: no cover - only without dask
        raise ImportError(f"{owner}: Dask is needed here (pip install mixedcore[dask])") from exc
    return dask, da


# -- the model, once per thread of a process (the module notes' design) -----------------------------
_CACHE_SIZE = 4                          # models per thread
# (SHA-256 of the pickle, thread ident) -> model, least recently used first
_models: "collections.OrderedDict[tuple[str, int], Any]" = collections.OrderedDict()
_models_lock = threading.Lock()          # guards _models and _unpickled, never held to unpickle
_unpickled = 0                           # models unpickled by this process (tests read it)
# handle -> (the bytes object hashed, its SHA-256), filled only by _digest (design A)
_digests: "weakref.WeakKeyDictionary[ModelHandle, tuple[bytes, str]]" = \
    weakref.WeakKeyDictionary()


def _is_model(obj):
    return not isinstance(obj, type) and all(callable(getattr(obj, hook, None))
                                             for hook in _HOOKS)


def _handle_from_blob(blob):
    """A handle from its pickle's bytes, as a pickled handle is rebuilt."""
    handle = ModelHandle.__new__(ModelHandle)
    handle.__setstate__({"_blob": blob})
    return handle


def _digest(handle):
    """SHA-256 of the handle's bytes, hashed by this process once per handle and bytes object
    (design A)."""
    blob = handle._blob
    with _models_lock:
        entry = _digests.get(handle)
    if entry is not None and entry[0] is blob:
        return entry[1]
    digest = hashlib.sha256(blob).hexdigest()
    with _models_lock:
        _digests[handle] = (blob, digest)
    return digest


def _drop_ended_threads_and_trim(ident):
    """With the lock held: drop the entries of threads that have ended, and this thread's
    least recently used ones beyond ``_CACHE_SIZE``."""
    alive = {t.ident for t in threading.enumerate()}
    mine = []
    for key in list(_models):
        if key[1] not in alive:
            del _models[key]
        elif key[1] == ident:
            mine.append(key)
    for key in mine[:-_CACHE_SIZE]:
        del _models[key]


class ModelHandle:
    """A model pickled once, unpickled at most once per thread of a process that runs it.

    Parameters
    ----------
    model : Model
        Pickled now: later changes to its weights do not reach the handle.

    Attributes
    ----------
    token : str
        SHA-256 of the pickle, computed in this process from the bytes (never taken from a
        sender): the key of the cached models.
    nbytes : int
        Size of the pickle.

    Notes
    -----
    The handle is a pickle and :meth:`model` unpickles it: build handles only from models and
    accept them only from clients you trust, as with any pickle.
    """

    def __init__(self, model):
        if not _is_model(model):
            raise TypeError(f"ModelHandle: expected a mixedcore Model, got "
                            f"{type(model).__name__}: {model!r}")
        self._blob = pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)

    def __reduce__(self):
        # only the bytes travel; the receiving process hashes them itself (design A)
        return _handle_from_blob, (self._blob,)

    def __setstate__(self, state):
        # a handle pickled with its attributes (by an earlier version) keeps its bytes only
        blob = state.get("_blob") if isinstance(state, dict) else None
        if not isinstance(blob, bytes):
            raise TypeError(f"ModelHandle: a pickled handle must hold its model's pickle as "
                            f"bytes, got {type(blob).__name__}")
        self.__dict__.clear()
        self._blob = blob

    @property
    def token(self):
        return _digest(self)

    @property
    def nbytes(self):
        return len(self._blob)

    def model(self):
        """This thread's copy of the model, unpickled the first time this thread asks for
        these bytes (later calls on the thread return the same object)."""
        global _unpickled
        ident = threading.current_thread().ident   # registers a thread threading did not start
        key = (_digest(self), ident)
        with _models_lock:
            found = _models.get(key)
            if found is not None:
                _models.move_to_end(key)
                return found
        found = pickle.loads(self._blob)            # no lock held (design C)
        if not _is_model(found):
            raise TypeError(f"ModelHandle.model: the pickle holds a {type(found).__name__}, "
                            f"not a mixedcore Model")
        with _models_lock:
            _unpickled += 1
            _models[key] = found
            _drop_ended_threads_and_trim(ident)
        return found

    def __repr__(self):
        return f"ModelHandle(token={self.token[:12]}..., nbytes={self.nbytes})"


def delayed_model(model):
    """A ``dask.delayed`` object holding a :class:`ModelHandle` of ``model`` under one key.

    Pass it to ``map_blocks`` (or any task) as an argument: every task then depends on that one
    key, so the model goes to each worker once; call ``handle.model()`` inside the task::

        m = mixedcore.scale_out.delayed_model(model)

        def block_predict(block, handle):
            with mixedcore.scale_out.model_threads():
                return handle.model().predict(block, verbose=0)

        y = x.map_blocks(block_predict, m, dtype="float32", chunks=(x.chunks[0], (10,)))
    """
    dask, _ = _import_dask("delayed_model")
    handle = model if isinstance(model, ModelHandle) else ModelHandle(model)
    return dask.delayed(handle, name=f"mixedcore-model-{handle.token[:32]}", pure=True,
                        traverse=False)


# -- threads --------------------------------------------------------------------------------------
def _environment_threads():
    from mixedcore.kernels import _runtime
    for var in ("MIXEDCORE_NUM_THREADS", "OMP_NUM_THREADS"):
        text = os.environ.get(var)
        if text:
            try:
                return _runtime._positive_count(var, text)
            except ValueError:
                return None
    return None


def _dask_threads_here():
    """How many Dask threads share this process, as seen from a task: the distributed worker's
    ``nthreads``; 1 on the main thread (the synchronous scheduler); otherwise several (the
    threaded scheduler runs its tasks on a pool of its own)."""
    if "distributed" in sys.modules:
        try:
            from distributed import get_worker
            return get_worker().state.nthreads
        except (ImportError, ValueError, AttributeError):
            pass
    if threading.current_thread() is threading.main_thread():
        return 1
    return 2


@contextlib.contextmanager
def model_threads():
    """Context manager for a task that runs a model: the kernel thread count it should use.

    An explicit count is kept (this thread's ``kernels.threads`` / threadpoolctl setting, the
    process-wide ``kernels.set_num_threads``); else ``MIXEDCORE_NUM_THREADS`` or
    ``OMP_NUM_THREADS`` from the environment now; else one thread when several Dask threads
    share the process, and the process default when the task has the process to itself.
    """
    from mixedcore.kernels import _runtime
    if _runtime._explicit_threads():
        yield
        return
    n = _environment_threads()
    if n is None and _dask_threads_here() > 1:
        n = 1
    if n is None:
        yield
        return
    with kernels.threads(n):
        yield


def worker_info():
    """This process's view, for ``client.run(mixedcore.scale_out.worker_info)``: how many
    models it has unpickled (``models_unpickled``), how many it holds (``models_cached``, one
    copy per thread that ran a model counting once each), and
    the kernel threads a task would use here (``task_threads``), and the peak resident memory
    of the process so far in bytes (``peak_rss``, where the system reports it)."""
    with model_threads():
        threads = kernels.get_num_threads()
    try:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # KiB on Linux
    except (ImportError, OSError):
        peak = None
    return {"models_unpickled": _unpickled, "models_cached": len(_models),
            "task_threads": threads, "peak_rss": peak}


# -- inputs ---------------------------------------------------------------------------------------
def _as_list(model, owner, x, what):
    """``x`` as a list aligned with the model's inputs (``what``: "x")."""
    names = model.input_names
    n = len(model.inputs)
    if isinstance(x, dict):
        keys = model.input_keys()
        missing = [k for k in keys if k not in x]
        if missing:
            raise ValueError(f"{owner}: inputs {missing} are missing; got keys {sorted(x)}, the "
                             f"model's inputs are {keys}")
        return [x[k] for k in keys]
    if isinstance(x, (list, tuple)):
        if len(x) != n:
            raise ValueError(f"{owner}: the model has {n} inputs {names}, got {len(x)} arrays "
                             f"for {what}")
        return list(x)
    if n != 1:
        raise ValueError(f"{owner}: the model has {n} inputs {names}: give {what} as a list or "
                         f"dict of {n} arrays, got one {type(x).__name__}")
    return [x]


def _targets_list(model, owner, y):
    n = len(model.outputs)
    if isinstance(y, dict):
        missing = [k for k in model.output_names if k not in y]
        if missing:
            raise ValueError(f"{owner}: targets {missing} are missing; got keys {sorted(y)}, the "
                             f"model's outputs are {model.output_names}")
        return [y[k] for k in model.output_names]
    if isinstance(y, (list, tuple)):
        if len(y) != n:
            raise ValueError(f"{owner}: the model has {n} outputs, got {len(y)} targets")
        return list(y)
    if n != 1:
        raise ValueError(f"{owner}: the model has {n} outputs {model.output_names}: give y as a "
                         f"list or dict of {n} arrays, got one {type(y).__name__}")
    return [y]


def _batch_chunks(owner, arrays, labels):
    """The batch-axis chunks all Dask arrays share; numpy arrays take them (converted)."""
    _, da = _import_dask(owner)
    k_first = next(k for k, a in enumerate(arrays) if is_dask_array(a))
    chunks0 = arrays[k_first].chunks[0]
    if any(np.isnan(c) for c in chunks0):
        raise ValueError(f"{owner}: the batch axis has unknown chunk sizes {chunks0}; call "
                         f"compute_chunk_sizes() on the array first")
    n = sum(chunks0)
    out = []
    for a, label in zip(arrays, labels):
        if a is None:
            out.append(None)
            continue
        if not is_dask_array(a):
            a = np.asarray(a)
            if a.ndim == 0 or a.shape[0] != n:
                raise ValueError(f"{owner}: {label} has shape {a.shape}; the Dask inputs have "
                                 f"{n} samples")
            a = da.from_array(a, chunks=(chunks0,) + tuple((d,) for d in a.shape[1:]))
        if a.ndim == 0:
            raise ValueError(f"{owner}: {label} is a 0-d Dask array; expected a batch axis")
        if a.chunks[0] != chunks0:
            raise ValueError(f"{owner}: the Dask inputs must share their batch chunks: "
                             f"{labels[k_first]} has {chunks0}, {label} has "
                             f"{a.chunks[0]} (rechunk them alike)")
        if any(len(c) != 1 for c in a.chunks[1:]):
            a = a.rechunk({i: -1 for i in range(1, a.ndim)})
        out.append(a)
    return out, chunks0


def _check_features(model, owner, xs):
    for a, t, name in zip(xs, model.inputs, model.input_names):
        expected = tuple(t.shape)
        if a.ndim != len(expected) or any(e is not None and e != s
                                          for e, s in zip(expected[1:], a.shape[1:])):
            raise ValueError(f"{owner}: input '{name}' expects shape {expected}, got a Dask "
                             f"array of shape {a.shape}")


def _ensure_built(model, owner, x):
    """Build a model that waits for its data (a Sequential without an input shape) from the
    Dask array's shape and dtype, without computing it."""
    if not model.built:
        first = next(iter(x.values())) if isinstance(x, dict) else (
            x[0] if isinstance(x, (list, tuple)) else x)
        model.build_from_sample(owner, np.zeros((1,) + tuple(first.shape[1:]),
                                                dtype=first.dtype))


def _output_specs(model):
    """[(shape without the batch axis, dtype)] of the model's outputs, from its graph."""
    specs = []
    for t in model.outputs:
        tail = tuple(t.shape[1:])
        if any(d is None for d in tail):
            raise ValueError(f"predict: output '{t.keras_history[0].name}' has shape "
                             f"{tuple(t.shape)}; a Dask result needs every axis but the batch "
                             f"axis known")
        specs.append((tail, np.dtype(t.dtype)))
    return specs


# -- predict --------------------------------------------------------------------------------------
def _predict_chunk(handle, batch_size, *arrays):
    model = handle.model()
    with model_threads():
        out = model.predict(list(arrays) if len(arrays) > 1 else arrays[0],
                            batch_size=batch_size, verbose=0)
    return tuple(out) if isinstance(out, list) else out


def _zero_padded(k):
    return (0,) * k


def predict(model, x, batch_size=32):
    """``model.predict`` over Dask arrays: lazy Dask arrays, one task per batch chunk."""
    owner = "predict"
    dask, da = _import_dask(owner)
    from dask.highlevelgraph import HighLevelGraph
    _ensure_built(model, owner, x)
    raw = _as_list(model, owner, x, "x")
    labels = [f"input '{n}'" for n in model.input_names] if len(raw) > 1 else ["x"]
    xs, chunks0 = _batch_chunks(owner, raw, labels)
    _check_features(model, owner, xs)
    specs = _output_specs(model)
    handle = delayed_model(model)
    token = dask.base.tokenize(handle.key, batch_size, *[a.name for a in xs])
    run = f"mixedcore-predict-{token}"
    several = len(model.outputs) > 1
    hkey = handle.key
    dsk = {}
    for i in range(len(chunks0)):
        dsk[(run, i)] = (_predict_chunk, hkey, batch_size,
                         *[(a.name, i) + _zero_padded(a.ndim - 1) for a in xs])
    deps = list(xs) + [handle]
    results = []
    if not several:
        tail, dtype = specs[0]
        name = f"mixedcore-predict-out-{token}"
        layer = {(name, i) + _zero_padded(len(tail)): (run, i) for i in range(len(chunks0))}
        layer.update(dsk)
        graph = HighLevelGraph.from_collections(name, layer, dependencies=deps)
        results.append(da.Array(graph, name, chunks=(chunks0,) + tuple((d,) for d in tail),
                                dtype=dtype, meta=np.empty((0,) * (1 + len(tail)), dtype)))
    else:
        graph_run = HighLevelGraph.from_collections(run, dsk, dependencies=deps)
        for j, (tail, dtype) in enumerate(specs):
            name = f"mixedcore-predict-out{j}-{token}"
            layer = {(name, i) + _zero_padded(len(tail)): (operator.getitem, (run, i), j)
                     for i in range(len(chunks0))}
            graph = HighLevelGraph.merge(
                HighLevelGraph({name: layer}, {name: set()}), graph_run)
            graph.dependencies[name] = {run}
            results.append(da.Array(graph, name, chunks=(chunks0,) + tuple((d,) for d in tail),
                                    dtype=dtype, meta=np.empty((0,) * (1 + len(tail)), dtype)))
    return model.pack_outputs(results)


# -- evaluate -------------------------------------------------------------------------------------
def _evaluate_chunk(handle, batch_size, n_x, n_y, *arrays):
    """The chunk's per-batch contributions, as the in-memory evaluate adds them up:
    ({log name: [value * batch size, ...]}, [batch sizes])."""
    model = handle.model()
    xs = list(arrays[:n_x])
    ys = list(arrays[n_x:n_x + n_y])
    sws = list(arrays[n_x + n_y:]) or None
    if sws is not None and all(s is None for s in sws):
        sws = None
    with model_threads():
        batches = model.data_adapter("evaluate", xs if len(xs) > 1 else xs[0],
                                     ys if len(ys) > 1 else ys[0],
                                     None if sws is None else (sws if len(sws) > 1 else sws[0]),
                                     None, batch_size, False, None)
        parts = {}
        sizes = []
        for xb, yb, swb in batches.epoch():
            m = xb[0].shape[0]
            sizes.append(m)
            for k, v in model.batch_logs(xb, yb, swb).items():
                parts.setdefault(k, []).append(v * m)
    return parts, sizes


def _combine(model, *chunk_results):
    """(On the client.) Add the chunks' contributions in order, as the in-memory evaluate does batch by batch."""
    totals = {}
    seen = 0
    for parts, sizes in chunk_results:
        for b, m in enumerate(sizes):
            seen += m
            for k, values in parts.items():
                totals[k] = totals.get(k, 0.0) + values[b]
    return model.mean_logs(totals, seen)


def evaluate(model, x, y, sample_weight=None, batch_size=32):
    """``model.evaluate`` over Dask arrays: the logs dict, computed with the current scheduler."""
    owner = "evaluate"
    dask, _ = _import_dask(owner)
    if y is None:
        raise ValueError(f"{owner}: Dask inputs need targets y (Dask or numpy arrays)")
    _ensure_built(model, owner, x)
    raw_x = _as_list(model, owner, x, "x")
    raw_y = _targets_list(model, owner, y)
    if sample_weight is None:
        raw_sw = []
    elif isinstance(sample_weight, dict):
        raw_sw = [sample_weight.get(k) for k in model.output_names]
    elif isinstance(sample_weight, (list, tuple)):
        raw_sw = list(sample_weight)
    else:
        raw_sw = [sample_weight] + [None] * (len(model.outputs) - 1)
    labels = ([f"input '{n}'" for n in model.input_names]
              + [f"target '{n}'" for n in model.output_names]
              + [f"sample_weight '{n}'" for n in model.output_names][:len(raw_sw)])
    arrays, chunks0 = _batch_chunks(owner, raw_x + raw_y + raw_sw, labels)
    xs = arrays[:len(raw_x)]
    _check_features(model, owner, xs)
    handle = delayed_model(model)
    n_x, n_y = len(raw_x), len(raw_y)
    parts = []
    for i in range(len(chunks0)):
        blocks = [None if a is None else a.blocks[(i,) + _zero_padded(a.ndim - 1)]
                  for a in arrays]
        parts.append(dask.delayed(_evaluate_chunk, pure=True)(handle, batch_size, n_x, n_y,
                                                              *blocks))
    return _combine(model, *dask.compute(*parts))
