"""Data adapters: where fit / evaluate / predict take their batches from: arrays, a Sequence-like
dataset (``__len__`` and ``__getitem__``, as Keras's PyDataset) or an iterable / generator of
batches.

An adapter knows nothing of the model.  The trainer hands it :class:`Standardizers`, the
callables that turn raw ``x``, ``y`` and sample weights into flat lists of arrays aligned with
the model's inputs and outputs (checked, converted); the adapter batches, shuffles and counts.

A batch from a dataset or generator is ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``.
With ``steps`` (``steps_per_epoch``) an epoch takes that many batches and the next epoch goes on
where it stopped, starting a new pass (reshuffled arrays, the dataset from its first batch)
when one runs out; a generator that runs out ends training with a warning, as in Keras.
"""
import copy
import warnings
from typing import Any, Callable, NamedTuple

import numpy as np

from mixedcore import random as _random

__all__ = ["Standardizers", "DataAdapter", "ArrayDataAdapter", "SequenceDataAdapter",
           "GeneratorDataAdapter", "get_data_adapter", "check_steps", "check_batch_size",
           "require_samples", "is_dataset", "unpack", "class_weight_to_sample_weight"]


class Standardizers(NamedTuple):
    """What an adapter calls to check and convert raw data (``owner`` names the caller in
    error messages).

    inputs(owner, x) -> xs
        ``x`` as a flat list of arrays aligned with the model's inputs.
    inputs_and_targets(owner, x, y) -> (xs, ys)
        Both, ``ys`` aligned with the outputs (None where an output takes no target), their
        sample counts checked against each other.
    sample_weights(owner, sample_weight, n) -> sws
        Sample weights aligned with the outputs (None where none), each of length ``n``.
    """
    inputs: Callable[[str, Any], list]
    inputs_and_targets: Callable[[str, Any, Any], tuple]
    sample_weights: Callable[[str, Any, int], list]


def is_dataset(x):
    """Whether ``x`` is a batch source rather than arrays (a list / tuple / dict of arrays and
    array-likes are arrays)."""
    if x is None or isinstance(x, (np.ndarray, list, tuple, dict, str, bytes)):
        return False
    if hasattr(x, "__array__") or hasattr(x, "__array_interface__"):
        return False
    if hasattr(x, "__len__") and hasattr(x, "__getitem__"):
        return True
    return hasattr(x, "__iter__") or hasattr(x, "__next__")


def _is_sequence(x):
    return hasattr(x, "__len__") and hasattr(x, "__getitem__") and not hasattr(x, "__next__")


def unpack(batch):
    """(x, y, sample_weight) from one batch of a dataset."""
    if isinstance(batch, list):
        batch = tuple(batch)
    if not isinstance(batch, tuple):
        return batch, None, None
    if len(batch) == 1:
        return batch[0], None, None
    if len(batch) == 2:
        return batch[0], batch[1], None
    if len(batch) == 3:
        return batch
    raise ValueError(f"a batch must be x, (x,), (x, y) or (x, y, sample_weight); got a tuple of "
                     f"{len(batch)} items")


def class_weight_to_sample_weight(owner, y, class_weight):
    """One weight per sample from its class: the argmax of one-hot targets, else the label;
    classes missing from ``class_weight`` weigh 1 (as in Keras)."""
    if not isinstance(class_weight, dict):
        raise TypeError(f"{owner}: class_weight must be a dict mapping class index to weight, "
                        f"got {type(class_weight).__name__}")
    for k, v in class_weight.items():
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"{owner}: class_weight keys must be class indices (ints), got {k!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
            raise TypeError(f"{owner}: class_weight values must be numbers, got {k}: {v!r}")
    y = np.asarray(y)
    if y.ndim > 1:
        y = np.argmax(y, axis=-1) if y.shape[-1] != 1 else y.reshape(y.shape[:-1])
    labels = np.round(y.astype(np.float64)).astype(np.int64).reshape(y.shape[0], -1)[:, 0]
    weights = np.ones(labels.shape[0], dtype=np.float32)
    for k, v in class_weight.items():
        weights[labels == k] = v
    return weights


def check_steps(owner, steps):
    """``steps`` (batches per epoch) as an int, or None."""
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, (int, np.integer))
                              or steps < 1):
        raise ValueError(f"{owner}: steps must be a positive int or None, got {steps!r}")
    return None if steps is None else int(steps)


def check_batch_size(owner, batch_size):
    """The ``batch_size`` argument as an int (32 when None)."""
    if batch_size is None:
        return 32
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"{owner}: batch_size must be an int, got {type(batch_size).__name__}")
    if batch_size < 1:
        raise ValueError(f"{owner}: batch_size must be >= 1, got {batch_size}")
    return int(batch_size)


def require_samples(owner, n):
    """A ValueError when the data holds no sample."""
    if not n:
        raise ValueError(f"{owner}: the input data is empty (0 samples); expected at least one "
                         f"sample")


def get_data_adapter(owner, standardize, x, y=None, sample_weight=None, class_weight=None,
                     batch_size=32, shuffle=False, steps=None, with_targets=True):
    """The adapter for ``x``: arrays, a Sequence-like dataset or an iterable / generator.

    ``standardize``: the model's :class:`Standardizers`; ``with_targets``: y is wanted (fit /
    evaluate), predict takes only x.
    """
    if not is_dataset(x):
        return ArrayDataAdapter(owner, standardize, x, y, sample_weight, class_weight,
                                batch_size, shuffle, steps, with_targets)
    if y is not None or sample_weight is not None:
        raise ValueError(f"{owner}: when x is a dataset or generator, y and "
                         f"sample_weight come from its batches; got y={type(y).__name__}, "
                         f"sample_weight={type(sample_weight).__name__}")
    kind = SequenceDataAdapter if _is_sequence(x) else GeneratorDataAdapter
    return kind(owner, standardize, x, class_weight, batch_size, shuffle, steps, with_targets)


class DataAdapter:
    """Batches of (xs, ys, sample weights) for a trainer, epoch by epoch: flat lists aligned
    with the model's inputs and outputs (``ys`` and the weights None without targets).

    ``kind`` is "arrays", "sequence" or "iterable".
    """

    kind = ""

    def __init__(self, owner, standardize, class_weight, batch_size, shuffle, steps,
                 with_targets):
        self.owner = owner
        self.standardize = standardize
        self.with_targets = with_targets
        self.class_weight = class_weight
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.limit = check_steps(owner, steps)
        self._iterator = None
        self.exhausted = False

    # -- sizes ----------------------------------------------------------------------------------
    def _full_steps(self):
        return None

    def steps(self):
        """Batches per epoch, or None when unknown (a generator without ``steps``)."""
        return self._full_steps() if self.limit is None else self.limit

    def split(self, fraction, batch_size):
        """Hold out the last ``fraction`` of the samples (arrays only)."""
        raise ValueError(f"{self.owner}: validation_split needs arrays; for a dataset or "
                         f"generator give validation_data")

    # -- iteration ------------------------------------------------------------------------------
    def _pass(self):
        """An iterator over one pass of the data (batches as (xs, ys, sws))."""
        raise NotImplementedError

    def _convert(self, batch):
        """One batch of a dataset, standardized."""
        x, y, sw = unpack(batch)
        owner = self.owner
        if not self.with_targets:
            return self.standardize.inputs(owner, x), None, None
        if y is None:
            raise ValueError(f"{owner}: the dataset's batches must hold targets: (x, y) or "
                             f"(x, y, sample_weight), got only x")
        xs, ys = self.standardize.inputs_and_targets(owner, x, y)
        n = xs[0].shape[0]
        sws = self.standardize.sample_weights(owner, sw, n)
        if self.class_weight is not None:
            if sw is not None:
                raise ValueError(f"{owner}: give sample weights in the batches or class_weight, "
                                 f"not both")
            sws = [class_weight_to_sample_weight(owner, ys[0], self.class_weight)]
        return xs, ys, sws

    def epoch(self):
        """The batches of one epoch."""
        if self.limit is None:
            count = 0
            for batch in self._pass():
                count += 1
                yield batch
            if count == 0 and self.kind != "arrays":
                self._ran_out()
            return
        taken = 0
        while taken < self.limit:
            fresh = self._iterator is None
            if fresh:
                self._iterator = self._pass()
            try:
                batch = next(self._iterator)
            except StopIteration:
                self._iterator = None
                if fresh or self._one_pass():
                    self._ran_out()
                    return
                continue
            taken += 1
            yield batch

    def _one_pass(self):
        """Whether the data cannot be read again once it runs out (a generator)."""
        return False

    def _ran_out(self):
        self.exhausted = True
        warnings.warn(f"{self.owner}: the input ran out of data; interrupting. Give a dataset "
                      f"that can yield steps_per_epoch * epochs batches", stacklevel=4)

    def end_epoch(self):
        """Called after each epoch (a Sequence-like dataset's own ``on_epoch_end``)."""


class ArrayDataAdapter(DataAdapter):
    """Arrays (or lists / dicts of them), standardized once and sliced into batches."""

    kind = "arrays"

    def __init__(self, owner, standardize, x, y=None, sample_weight=None, class_weight=None,
                 batch_size=32, shuffle=False, steps=None, with_targets=True):
        super().__init__(owner, standardize, class_weight, batch_size, shuffle, steps,
                         with_targets)
        if with_targets:
            xs, ys = standardize.inputs_and_targets(owner, x, y)
        else:
            xs, ys = standardize.inputs(owner, x), None
        n = xs[0].shape[0] if xs and xs[0].ndim else 0
        self.n = n
        if with_targets:
            if sample_weight is not None and class_weight is not None:
                raise ValueError(f"{owner}: give sample_weight or class_weight, not both")
            sws = standardize.sample_weights(owner, sample_weight, n)
            if class_weight is not None:
                sws = [class_weight_to_sample_weight(owner, ys[0], class_weight)]
        else:
            sws = None
        self.arrays = (xs, ys, sws)

    def _full_steps(self):
        return -(-self.n // self.batch_size)

    def split(self, fraction, batch_size):
        """Hold out the last ``fraction`` of the samples: returns them as an adapter
        (unshuffled, ``batch_size`` at a time) and keeps the rest."""
        xs, ys, sws = self.arrays
        n = self.n
        cut = int(n * (1 - fraction))
        if cut == 0 or cut == n:
            raise ValueError(f"{self.owner}: validation_split={fraction} leaves no training or "
                             f"no validation samples out of {n}")
        head = slice(None, cut)
        tail = slice(cut, None)

        def part(arrays, index):
            return None if arrays is None else [None if a is None else a[index] for a in arrays]
        held = copy.copy(self)
        held.owner = f"{self.owner} (validation_split)"
        held.arrays = (part(xs, tail), part(ys, tail), part(sws, tail))
        held.n = n - cut
        held.batch_size = batch_size
        held.shuffle = False
        held.limit = None
        self.arrays = (part(xs, head), part(ys, head), part(sws, head))
        self.n = cut
        return held

    def _pass(self):
        xs, ys, sws = self.arrays
        order = _random.generator().permutation(self.n) if self.shuffle else None
        for start in range(0, self.n, self.batch_size):
            idx = slice(start, min(self.n, start + self.batch_size))
            if order is not None:
                idx = np.sort(order[idx])
            yield ([a[idx] for a in xs],
                   None if ys is None else [None if a is None else a[idx] for a in ys],
                   None if sws is None else [None if a is None else a[idx] for a in sws])


class SequenceDataAdapter(DataAdapter):
    """A Sequence-like dataset (``__len__`` / ``__getitem__``, as Keras's PyDataset): its batches
    in order (shuffled with ``shuffle``), its ``on_epoch_end`` called after each epoch."""

    kind = "sequence"

    def __init__(self, owner, standardize, data, class_weight=None, batch_size=32,
                 shuffle=False, steps=None, with_targets=True):
        super().__init__(owner, standardize, class_weight, batch_size, shuffle, steps,
                         with_targets)
        self.data = data
        self.length = len(data)
        if self.length < 1:
            raise ValueError(f"{owner}: the dataset is empty (len 0)")

    def _full_steps(self):
        return self.length

    def _pass(self):
        order = (_random.generator().permutation(self.length) if self.shuffle
                 else range(self.length))
        for i in order:
            yield self._convert(self.data[int(i)])

    def end_epoch(self):
        hook = getattr(self.data, "on_epoch_end", None)
        if callable(hook):
            hook()


class GeneratorDataAdapter(DataAdapter):
    """An iterable (read again on each pass) or an iterator / generator (read once)."""

    kind = "iterable"
    _source = None

    def __init__(self, owner, standardize, data, class_weight=None, batch_size=32,
                 shuffle=False, steps=None, with_targets=True):
        super().__init__(owner, standardize, class_weight, batch_size, shuffle, steps,
                         with_targets)
        if class_weight is not None:
            raise ValueError(f"{owner}: class_weight is not supported for generator inputs "
                             f"(give sample weights in the batches, or a Sequence-like "
                             f"dataset)")
        self.data = data

    def _one_pass(self):
        return hasattr(self.data, "__next__")

    def _pass(self):
        if self._source is None:
            self._source = iter(self.data)
        for batch in self._source:
            yield self._convert(batch)
        if not hasattr(self.data, "__next__"):
            self._source = None    # an iterable starts again on the next pass

