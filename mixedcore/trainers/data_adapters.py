"""Where fit / evaluate / predict take their batches from: arrays, a Sequence-like dataset
(``__len__`` and ``__getitem__``, as Keras's PyDataset) or an iterable / generator of batches.

A batch from a dataset or generator is ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``.
With ``steps`` (``steps_per_epoch``) an epoch takes that many batches and the next epoch goes on
where it stopped, starting a new pass (reshuffled arrays, the dataset from its first batch)
when one runs out; a generator that runs out ends training with a warning, as in Keras.
"""
import copy
import warnings

import numpy as np

import mixedcore.utils as utils


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


class Batches:
    """Batches of (xs, ys, sample weights) for a trainer, epoch by epoch.

    ``with_targets``: y is wanted (fit / evaluate); predict takes only x.
    """

    def __init__(self, trainer, owner, x, y=None, sample_weight=None, class_weight=None,
                 batch_size=32, shuffle=False, steps=None, with_targets=True):
        self.trainer = trainer
        self.owner = owner
        self.with_targets = with_targets
        self.class_weight = class_weight
        self.batch_size = batch_size
        self.shuffle = shuffle
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, (int, np.integer))
                                  or steps < 1):
            raise ValueError(f"{owner}: steps must be a positive int or None, got {steps!r}")
        self.limit = None if steps is None else int(steps)
        self._iterator = None
        self.exhausted = False
        if class_weight is not None and len(trainer.outputs) != 1:
            raise ValueError(f"{owner}: class_weight is only supported for models with one "
                             f"output; this model has {len(trainer.outputs)}")
        if is_dataset(x):
            if y is not None or sample_weight is not None:
                raise ValueError(f"{owner}: when x is a dataset or generator, y and "
                                 f"sample_weight come from its batches; got y={type(y).__name__}, "
                                 f"sample_weight={type(sample_weight).__name__}")
            self.kind = "sequence" if _is_sequence(x) else "iterable"
            if self.kind == "iterable" and class_weight is not None:
                raise ValueError(f"{owner}: class_weight is not supported for generator inputs "
                                 f"(give sample weights in the batches, or a Sequence-like "
                                 f"dataset)")
            self.data = x
            if self.kind == "sequence":
                self.length = len(x)
                if self.length < 1:
                    raise ValueError(f"{owner}: the dataset is empty (len 0)")
        else:
            self.kind = "arrays"
            if with_targets:
                xs, ys = trainer._check_xy(owner, x, y)
            else:
                xs, ys = trainer._standardize_inputs(owner, x), None
            n = xs[0].shape[0] if xs and xs[0].ndim else 0
            self.n = n
            if with_targets:
                if sample_weight is not None and class_weight is not None:
                    raise ValueError(f"{owner}: give sample_weight or class_weight, not both")
                sws = trainer._standardize_sample_weight(owner, sample_weight, n)
                if class_weight is not None:
                    sws = [class_weight_to_sample_weight(owner, ys[0], class_weight)]
            else:
                sws = None
            self.arrays = (xs, ys, sws)

    # -- sizes ----------------------------------------------------------------------------------
    def steps(self):
        """Batches per epoch, or None when unknown (a generator without ``steps``)."""
        if self.kind == "arrays":
            full = -(-self.n // self.batch_size)
        elif self.kind == "sequence":
            full = self.length
        else:
            full = None
        return full if self.limit is None else self.limit

    def split(self, fraction, batch_size):
        """Hold out the last ``fraction`` of the samples (arrays only): returns them as
        Batches (unshuffled, ``batch_size`` at a time) and keeps the rest."""
        if self.kind != "arrays":
            raise ValueError(f"{self.owner}: validation_split needs arrays; for a dataset or "
                             f"generator give validation_data")
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

    # -- iteration ------------------------------------------------------------------------------
    def _pass(self):
        """An iterator over one pass of the data (batches as (xs, ys, sws))."""
        if self.kind == "arrays":
            xs, ys, sws = self.arrays
            order = utils._rng().permutation(self.n) if self.shuffle else None
            for start in range(0, self.n, self.batch_size):
                idx = slice(start, min(self.n, start + self.batch_size))
                if order is not None:
                    idx = np.sort(order[idx])
                yield ([a[idx] for a in xs],
                       None if ys is None else [None if a is None else a[idx] for a in ys],
                       None if sws is None else [None if a is None else a[idx] for a in sws])
        elif self.kind == "sequence":
            order = (utils._rng().permutation(self.length) if self.shuffle
                     else range(self.length))
            for i in order:
                yield self._convert(self.data[int(i)])
        else:
            if self._source is None:
                self._source = iter(self.data)
            for batch in self._source:
                yield self._convert(batch)
            if not hasattr(self.data, "__next__"):
                self._source = None    # an iterable starts again on the next pass

    _source = None

    def _convert(self, batch):
        x, y, sw = unpack(batch)
        owner = self.owner
        if not self.with_targets:
            return self.trainer._standardize_inputs(owner, x), None, None
        if y is None:
            raise ValueError(f"{owner}: the dataset's batches must hold targets: (x, y) or "
                             f"(x, y, sample_weight), got only x")
        xs, ys = self.trainer._check_xy(owner, x, y)
        n = xs[0].shape[0]
        sws = self.trainer._standardize_sample_weight(owner, sw, n)
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
                if fresh or self.kind == "iterable" and hasattr(self.data, "__next__"):
                    self._ran_out()
                    return
                continue
            taken += 1
            yield batch

    def _ran_out(self):
        self.exhausted = True
        warnings.warn(f"{self.owner}: the input ran out of data; interrupting. Give a dataset "
                      f"that can yield steps_per_epoch * epochs batches", stacklevel=4)

    def end_epoch(self):
        """A Sequence-like dataset's own ``on_epoch_end``, if it has one."""
        if self.kind == "sequence":
            hook = getattr(self.data, "on_epoch_end", None)
            if callable(hook):
                hook()
