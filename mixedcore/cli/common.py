"""What the predict and report commands share: their error type, the --policy option, reading
the input arrays and checking them against the model's inputs, and writing a file whole.

Design:
  A. The input is memory-mapped (a ``.npy``) or read member by member (a ``.npz``), each header
     checked against the model's inputs and the file's real size before any data are read.
  B. Everything the user can get wrong (files, shapes, dtypes, policy names, the output name) is
     checked before the first batch runs, and reported as a :class:`CommandError`, which the
     command line prints and turns into exit code 2.
  C. A file is written under a temporary name beside it and renamed when complete, as the
     saving functions write theirs (``temporary_beside``, re-exported from there).
"""
import contextlib
import os

import numpy as np

from mixedcore.saving.file_utils import temporary_beside
from mixedcore.saving.npy_reader import NpzReader, open_npy

__all__ = ["CommandError", "check_output", "check_shapes", "numeric", "policy_option",
           "read_inputs", "temporary_beside", "written"]


class CommandError(Exception):
    """A user error of the command: printed as ``error: <message>``, exit code 2."""


def check_output(option, path, inputs):
    """Refuse an output ``path`` (given by ``option``) that names one of ``inputs`` (what -> path),
    is a directory, or lies in a directory that is missing or not writable."""
    for what, source in inputs:
        if source is not None and os.path.exists(path) and os.path.exists(source) and \
                os.path.samefile(path, source):
            raise CommandError(f"{option} {path!r} is {what} file; write elsewhere")
    if os.path.isdir(path):
        raise CommandError(f"{option}: {path!r} is a directory")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CommandError(f"{option}: the directory {directory!r} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CommandError(f"{option}: the directory {directory!r} is not writable")


@contextlib.contextmanager
def written(option, path):
    """``temporary_beside(path)``, with a failure to write it (a full disk, a permission
    refused) reported as a CommandError naming ``path``."""
    try:
        with temporary_beside(path) as tmp:
            yield tmp
    except OSError as exc:
        raise CommandError(f"{option}: cannot write {path!r} ({exc.strerror or exc})") from None


def policy_option(name):
    """The policy named by --policy (None: the policies stored in the file), or CommandError."""
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


def numeric(what, array):
    if array.dtype.kind not in "biuf" and array.dtype.name not in ("bfloat16", "float8_e4m3fn",
                                                                   "float8_e5m2"):
        raise CommandError(f"{what} holds {array.dtype} data; numeric data are needed")
    if array.ndim == 0:
        raise CommandError(f"{what} is a scalar; an array with a batch dimension is needed")
    return array


def read_inputs(path, model):
    """The input arrays, in the order of ``model.inputs``: a ``.npy`` memory-mapped, a ``.npz``
    read member by member.  Every header is checked against the model's inputs (names, dtype,
    shapes, one number of samples) and against the bytes the file holds before any data are
    read (``saving.npy_reader``)."""
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
            header, array = open_npy(path)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read input file {path!r} as .npy: {exc}") from None
        check_shapes(model, [numeric(f"input file {path!r}", header)])
        return [array]
    if head[:4] != b"PK\x03\x04":
        raise CommandError(f"input file {path!r} is neither a .npy nor a .npz file (it starts "
                           f"with {head!r})")
    try:
        reader = NpzReader(path)
    except ValueError as exc:
        raise CommandError(f"cannot read input file {path!r} as .npz: {exc}") from None
    with reader:
        keys = list(reader.keys)
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
            headers = [reader.header(k) for k in chosen]
        except ValueError as exc:
            raise CommandError(f"input file {path!r}: {exc}") from None
        check_shapes(model, [numeric(f"array {k!r} of {path!r}", h)
                             for k, h in zip(chosen, headers)])
        try:
            return [reader.read(k) for k in chosen]
        except ValueError as exc:
            raise CommandError(f"input file {path!r}: {exc}") from None


def check_shapes(model, arrays):
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
