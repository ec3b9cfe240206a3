"""The HDF5 store: reading an HDF5 file (a legacy ``.h5`` model, ``.weights.h5``, tf.keras
weights, the weights member of a ``.keras`` archive) with h5py, and writing datasets and
attributes as Keras does.

Every object read is checked to be of the file itself (no external links, no external or
virtual datasets) and of the wanted kind; datasets must hold numbers.  Keras 3's layout keeps a
layer's variables as ``<path>/vars/<i>`` datasets (:class:`_H5Store`); the legacy layout keeps
them by layer name, in the order of the ``weight_names`` attribute (:func:`_legacy_groups`).

libhdf5 trusts the structure of the file it parses: a single changed byte can make it crash
(SIGSEGV) or loop forever while reading an attribute or a group, in this process or in Keras's.
So, in safe mode (``load_model``'s default, and always for ``load_weights``), a file is first
read in full by a separate process (:func:`_vet`: every group, link, attribute and dataset, the
datasets in bounded slices) under a time and memory limit, from the very file descriptor this
process then reads; only when that process finishes is the file opened here.  The same bytes
give libhdf5 the same paths, so what crashed or hung there is refused here as a ValueError.
"""
import os
import signal
import subprocess
import sys

import numpy as np

from mixedcore._dtypes import BF16 as _BF16
from mixedcore.saving.file_utils import (_SAFE_MODE, _CHECKED, _WRITTEN, _Array, _fail,
                                         _identity)

# HDF5 keeps attributes in the object header, whose limit Keras's legacy writer splits around.
_ATTR_LIMIT = 64512


def _h5py():
    import h5py
    return h5py


def _h5_errors():
    return (OSError, RuntimeError, ValueError, KeyError, TypeError)


# The program the separate process runs: argv = fd, start, size.  Once h5py is imported it
# limits its address space to what it has plus twice the file and a margin, reads what this
# module reads (and more), and prints "vetted" when every read succeeded, else "failed" and the
# first error.
_VET_PROGRAM = r"""
import io, os, resource, sys
fd, start, size, margin = (int(a) for a in sys.argv[1:5])
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
import h5py
pages = int(open("/proc/self/statm").read().split()[0])
limit = pages * os.sysconf("SC_PAGE_SIZE") + 2 * size + margin
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print("ready", flush=True)

class Window(io.RawIOBase):
    def __init__(self):
        super().__init__()
        self.pos = 0
    def readable(self):
        return True
    def seekable(self):
        return True
    def tell(self):
        return self.pos
    def seek(self, offset, whence=0):
        self.pos = (0, self.pos, size)[whence] + offset
        if self.pos < 0:
            raise OSError("negative seek")
        return self.pos
    def readinto(self, b):
        if self.pos + len(b) > size + (1 << 20):
            raise OSError(f"a read of {len(b)} bytes at {self.pos}, past the end of the file")
        n = min(len(b), max(0, size - self.pos))
        data = os.pread(fd, n, start + self.pos) if n else b""
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)

NAMES = ("model_config", "training_config", "keras_version", "backend", "layer_names",
         "layer_names0", "weight_names", "weight_names0", "dtype")
SLICE = 32 << 20
seen = set()
errors = []

def attempt(fn, *args):
    try:
        return fn(*args)
    except BaseException as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        return None

def attrs(obj):
    a = obj.attrs
    for name in list(attempt(list, a) or []) + list(NAMES):
        if attempt(a.__contains__, name):
            attempt(a.__getitem__, name)

def dataset(ds):
    info = attempt(lambda: (ds.external, ds.is_virtual, ds.dtype, ds.shape, ds.size))
    if info is None or info[0] or info[1]:
        return
    _, _, dtype, shape, count = info
    if len(shape) == 0 or dtype.itemsize * max(1, count) <= SLICE:
        attempt(ds.__getitem__, ())
        return
    row = max(1, dtype.itemsize * (count // max(shape[0], 1)))
    step = max(1, SLICE // row)
    for i in range(0, shape[0], step):
        attempt(ds.__getitem__, slice(i, i + step))

def walk(group, depth):
    key = attempt(hash, group.id)
    if key in seen or depth > 64 or len(seen) > 200000:
        return
    seen.add(key)
    attrs(group)
    for name in attempt(list, group) or []:
        attempt(group.__contains__, name)
        link = attempt(group.get, name, None, False, True)
        if link is None or isinstance(link, h5py.ExternalLink):
            continue
        obj = attempt(group.__getitem__, name)
        if isinstance(obj, h5py.Group):
            walk(obj, depth + 1)
        elif isinstance(obj, h5py.Dataset) and attempt(hash, obj.id) not in seen:
            seen.add(attempt(hash, obj.id))
            attrs(obj)
            dataset(obj)

f = attempt(h5py.File, Window(), "r")
if f is not None:
    walk(f, 0)
    attempt(f.visititems, lambda name, obj: None)
    attempt(f.close)
if errors:
    print("failed", errors[0].replace("\n", " ")[:500], flush=True)
else:
    print("vetted", flush=True)
"""
# The address space the separate process may take beyond what it holds once h5py is imported
# and twice the file: 32 MiB slices of the datasets, h5py's chunk cache, the objects of the walk.
_VET_MARGIN = 256 << 20
# Seconds the separate process may take, plus one per 50 MB of the file.
_VET_TIMEOUT = 60


def _vet(owner, source, fd, start, size):
    """Read the HDF5 file of ``size`` bytes at ``start`` of the open file ``fd`` in a separate
    process; ValueError naming ``source`` when libhdf5 fails, crashes, hangs or asks for more
    memory than the file can need there."""
    timeout = _VET_TIMEOUT + size / 50e6
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _VET_PROGRAM, str(fd), str(start), str(size),
             str(_VET_MARGIN)], pass_fds=(fd,), capture_output=True, text=True,
            errors="replace", timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise _fail(owner, source, f"reading its HDF5 structure did not finish within "
                                   f"{timeout:.0f} s in a separate process (libhdf5 loops on "
                                   f"it): the file is corrupt or crafted, and is not read")
    lines = proc.stdout.splitlines()
    if proc.returncode == 0 and lines[-1:] == ["vetted"]:
        _CHECKED.add((_identity(fd), start, size))
        return
    if proc.returncode == 0 and lines and lines[-1].startswith("failed "):
        raise _fail(owner, source, f"cannot be read as an HDF5 file; it is truncated or "
                                   f"corrupt ({lines[-1][len('failed '):]})")
    if "ready" not in lines and proc.returncode >= 0:
        raise RuntimeError(f"{owner}: cannot start the process that checks HDF5 files "
                           f"(exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    if proc.returncode < 0:
        try:
            how = f"signal {signal.Signals(-proc.returncode).name}"
        except ValueError:
            how = f"signal {-proc.returncode}"
    else:
        how = f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"
    raise _fail(owner, source, f"reading its HDF5 structure crashed libhdf5 in a separate "
                               f"process ({how}): the file is corrupt or crafted, and is not "
                               f"read")


def _open_h5(owner, source, path_or_file):
    """The HDF5 file at a path or in a seekable binary file (a window on an archive member, or
    a temporary file), opened for reading; first read in a separate process in safe mode."""
    h5py = _h5py()
    opened = None
    try:
        if _SAFE_MODE.get():
            if isinstance(path_or_file, str):
                opened = open(path_or_file, "rb")
                fd, start, size = opened.fileno(), 0, os.fstat(opened.fileno()).st_size
                # read what was vetted, even if the name now points elsewhere (Linux)
                proc_path = f"/proc/self/fd/{fd}"
                if os.path.exists(proc_path):
                    path_or_file = proc_path
            else:
                fd, start, size = _file_extent(path_or_file)
            identity = _identity(fd)
            if identity not in _WRITTEN and (identity, start, size) not in _CHECKED:
                _vet(owner, source, fd, start, size)
        return h5py.File(path_or_file, "r")
    except _h5_errors() as exc:
        if isinstance(exc, ValueError) and str(exc).startswith(f"{owner}: "):
            raise
        raise _fail(owner, source, f"cannot be read as an HDF5 file; it is truncated or "
                                   f"corrupt ({exc})") from None
    finally:
        if opened is not None:
            opened.close()


def _file_extent(fileobj):
    """(fd, start, size) of a binary file object: a window on an open file, or a whole file."""
    window = getattr(fileobj, "extent", None)
    if window is not None:
        return window()
    fd = fileobj.fileno()
    return fd, 0, os.fstat(fd).st_size


def _text(value):
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8")
    if isinstance(value, np.ndarray) and value.shape == ():
        return _text(value[()])
    return str(value)


def _attr_list(group, name):
    """A list-of-strings attribute, also when Keras split it into name0, name1, ... because it
    did not fit in an HDF5 object header."""
    if name in group.attrs:
        chunks = [group.attrs[name]]
    else:
        chunks, k = [], 0
        while f"{name}{k}" in group.attrs:
            chunks.append(group.attrs[f"{name}{k}"])
            k += 1
    out = []
    for chunk in chunks:
        if isinstance(chunk, (str, bytes, np.bytes_)):
            chunk = [chunk]
        out.extend(_text(item) for item in np.asarray(chunk, dtype=object).ravel())
    return out


def _child(owner, source, group, name, want_group):
    """``group[name]`` after checking it is an object of the file itself (no external links, no
    external or virtual datasets) and of the wanted kind; None when absent."""
    h5py = _h5py()
    try:
        if name not in group:
            return None
        link = group.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            raise _fail(owner, source, f"{group.name}/{name} is an external link to another "
                                       f"file, which is not read")
        obj = group[name]
    except _h5_errors() as exc:
        if isinstance(exc, ValueError) and str(exc).startswith(owner):
            raise
        raise _fail(owner, source, f"cannot read {group.name}/{name}: the file is truncated or "
                                   f"corrupt ({exc})") from None
    if want_group:
        if not isinstance(obj, h5py.Group):
            raise _fail(owner, source, f"{obj.name} is not a group")
    else:
        if not isinstance(obj, h5py.Dataset):
            raise _fail(owner, source, f"{obj.name} is not a dataset")
        if obj.external or obj.is_virtual:
            raise _fail(owner, source, f"{obj.name} keeps its data outside the file, which is "
                                       f"not read")
    return obj


def _dataset_array(owner, source, ds):
    def read():
        try:
            value = ds[()]
        except _h5_errors() as exc:
            raise _fail(owner, source, f"cannot read {ds.name}: the file is truncated or "
                                       f"corrupt ({exc})") from None
        value = np.asarray(value)
        tag = ds.attrs.get("dtype") if "dtype" in ds.attrs else None
        if tag is not None and _text(tag) == "bfloat16" and value.dtype.itemsize == 2 and \
                value.dtype.kind == "V":
            value = value.view(_BF16)
        if not (value.dtype.kind in "biuf" or value.dtype == _BF16):
            raise _fail(owner, source, f"{ds.name} holds {value.dtype} data, not numbers")
        return value
    return _Array(ds.name, ds.shape, read)


class _H5Store:
    """The weights of Keras 3's layout: ``<path>/vars/<i>`` datasets."""

    def __init__(self, owner, source, h5):
        self.owner, self.source, self.h5 = owner, source, h5

    def vars(self, path):
        """{index str: _Array} of the variables at ``path`` ({} when the file has none)."""
        group = self.h5
        for part in (path.split("/") if path else []) + ["vars"]:
            group = _child(self.owner, self.source, group, part, want_group=True)
            if group is None:
                return {}
        out = {}
        for name in group:
            ds = _child(self.owner, self.source, group, name, want_group=False)
            if ds is None:
                raise _fail(self.owner, self.source, f"{group.name}/{name} is listed but cannot "
                                                     f"be opened: the file is corrupt")
            out[name] = _dataset_array(self.owner, self.source, ds)
        return out

    def paths_with_vars(self, prefix="layers"):
        """Every ``path`` under ``prefix`` whose ``vars`` group holds datasets."""
        h5py = _h5py()
        found = []
        top = _child(self.owner, self.source, self.h5, prefix, want_group=True)
        if top is None:
            return found

        def visit(name, obj):
            if isinstance(obj, h5py.Group) and name.split("/")[-1] == "vars" and len(obj):
                found.append(f"{prefix}/{name[:-len('/vars')]}" if "/" in name else prefix)
        try:
            top.visititems(visit)
        except _h5_errors() as exc:
            raise _fail(self.owner, self.source, f"cannot list the weights: the file is "
                                                 f"truncated or corrupt ({exc})") from None
        return found

    def close(self):
        pass


def _legacy_groups(owner, source, group):
    """{layer name: [_Array in weight_names order]} and the layer names, of a legacy group."""
    names = _attr_list(group, "layer_names")
    result = {}
    for name in names:
        g = _child(owner, source, group, name, want_group=True)
        if g is None:
            raise _fail(owner, source, f"layer '{name}' is listed in layer_names but has no "
                                       f"group: the weights are missing")
        arrays = []
        for wname in _attr_list(g, "weight_names"):
            ds = g
            for part in wname.split("/"):
                ds = _child(owner, source, ds, part, want_group=part != wname.split("/")[-1])
                if ds is None:
                    raise _fail(owner, source, f"weight '{wname}' of layer '{name}' is listed "
                                               f"but missing: the weights are missing")
            arrays.append(_dataset_array(owner, source, ds))
        result[name] = arrays
    return names, result


def _legacy_weights_group(owner, source, h5):
    if "model_weights" in h5:
        return _child(owner, source, h5, "model_weights", want_group=True)
    if "layer_names" in h5.attrs or "layer_names0" in h5.attrs:
        return h5
    return None


def _write_dataset(group, key, value):
    value = np.asarray(value)
    if value.dtype == _BF16:
        ds = group.create_dataset(key, data=value)
        ds.attrs["dtype"] = "bfloat16"
    else:
        group.create_dataset(key, data=value)


def _write_attr_list(group, name, values):
    """A list-of-strings attribute, split into name0, name1, ... past the object-header limit,
    as Keras's legacy writer does."""
    if not values:
        group.attrs[name] = np.array([], dtype=np.float64)
        return
    data = np.array([v.encode("utf-8") for v in values])
    if max(len(v) for v in data) > _ATTR_LIMIT:
        raise ValueError(f"a name longer than {_ATTR_LIMIT} bytes cannot be written to HDF5")
    chunks = 1
    while any(part.nbytes > _ATTR_LIMIT for part in np.array_split(data, chunks)):
        chunks += 1
    if chunks == 1:
        group.attrs[name] = data
    else:
        for k, part in enumerate(np.array_split(data, chunks)):
            group.attrs[f"{name}{k}"] = part
