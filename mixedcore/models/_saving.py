"""Keras model and weights files: ``.keras`` archives, legacy ``.h5`` files, ``.weights.h5``.

Design:
  A. A file is recognised by its content, not its name: a zip archive (a ``.keras`` model, or a
     ``.npz`` of weights) or an HDF5 file (a legacy ``.h5`` model, ``.weights.h5``, tf.keras
     weights).  The name only chooses what to write.
  B. A model is rebuilt by ``models.Sequential.from_config`` / ``models.Model.from_config``.  The
     config is first normalized here: what tf.keras 2.x wrote (list-form inbound nodes,
     ``batch_input_shape``) becomes Keras 3's form, Keras's object-sharing ids are dropped, every
     class name is checked (an unknown one is an error naming the file and the classes mixedcore
     has), and ``dtype_policy=`` replaces the layers' policies (see G).
  C. In a ``.keras`` archive and a ``.weights.h5`` file, weights are found by structure, as Keras
     finds them: the k-th layer of a model is the group ``layers/<snake_case(class)>[_n]`` (the
     suffix counts earlier layers of the same class), its own variables are the datasets
     ``vars/0``, ``vars/1``... in creation order, trainable ones first.  Layer names are not used.
     In a legacy ``.h5`` weights are found by layer name, in the order of the ``weight_names``
     attribute; ``load_weights`` into another model falls back to the position among the layers
     that have weights, Keras's rule.
  D. Everything is checked (counts, shapes, numeric dtypes) before any weight is set, so a failed
     load leaves the model as it was; shapes are checked before data are read, so a file cannot
     make mixedcore allocate more than the model's own weights.
  E. Files are written to a temporary file beside the target and renamed over it once complete:
     a failed save leaves no partial file and an existing file intact.
  F. The ``model.weights.npz`` variant of the archive holds pickled objects (Keras pickles its
     backend variables into it).  They are read by an unpickler that knows numpy arrays, Keras
     variables and torch tensors only and refuses any other class, so no code from a file runs.
  G. ``dtype_policy=`` replaces the model's policy, not every policy in the file.  The model's
     policy (the "reference") is the policy most layers of the file carry (Input layers left
     out, nested models' layers counted); a tie goes to the ``dtype`` of a top Sequential config
     (the global policy when Keras built it) when that is among the tied, else to the policy
     met first.  Layers stored with the reference policy, or
     with none, take the new policy; a layer stored with another policy was set that way
     explicitly (a float32 softmax at the end of a mixed model) and keeps it, as do integer
     and bool policies.  Input layers keep their dtype.
"""
import contextlib
import datetime
import inspect
import io
import json
import os
import pickle
import re
import secrets
import shutil
import struct
import tempfile
import warnings
import zipfile
import zlib

import ml_dtypes
import numpy as np

try:
    from numpy._core import multiarray as _multiarray
except ImportError:         # numpy < 2
    from numpy.core import multiarray as _multiarray  # type: ignore[no-redef]

from mixedcore import dtype_policies as _policies
from mixedcore._dtypes import BF16 as _BF16
from mixedcore.dtype_policies import DTypePolicy

__all__ = ["save_model", "load_model", "save_weights", "load_weights", "model_to_json",
           "model_from_json"]

_CONFIG = "config.json"
_METADATA = "metadata.json"
_WEIGHTS_H5 = "model.weights.h5"
_WEIGHTS_NPZ = "model.weights.npz"
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# The Keras format generation these files follow (Keras reads this field only for display).
_KERAS_FORMAT_VERSION = "3.0.0"
_MAX_JSON_BYTES = 64 << 20
# A zip member that expands more than this much and past the floor is refused (a "zip bomb").
_MAX_EXPANSION = 100
_EXPANSION_FLOOR = 256 << 20
# HDF5 keeps attributes in the object header, whose limit Keras's legacy writer splits around.
_ATTR_LIMIT = 64512
_POLICY_CLASSES = ("DTypePolicy", "FloatDTypePolicy", "Policy", "PolicyV1")
_MODEL_CLASSES = ("Sequential", "Functional", "Model")


# ================================================================================================
# errors, paths, kinds of file
# ================================================================================================

def _fail(owner, source, what):
    return ValueError(f"{owner}: {source}: {what}")


def _path_of(owner, filepath):
    try:
        path = os.fspath(filepath)
    except TypeError:
        raise TypeError(f"{owner}: filepath must be a str or os.PathLike, got "
                        f"{type(filepath).__name__}") from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return path


def _hdf5_at(path, size):
    """True when an HDF5 superblock signature is at offset 0, 512, 1024, 2048, ...: HDF5 puts
    it at one of these (after a user block) and nowhere else."""
    offset = 0
    with open(path, "rb") as f:
        while offset + 8 <= size:
            f.seek(offset)
            if f.read(8) == _HDF5_SIGNATURE:
                return True
            offset = 512 if offset == 0 else offset * 2
    return False


def _kind(owner, path):
    """"zip", "hdf5" or "npy", from the file's first bytes; ValueError for anything else."""
    if not os.path.exists(path):
        raise ValueError(f"{owner}: cannot read {path!r}: no such file")
    if os.path.isdir(path):
        raise ValueError(f"{owner}: {path!r} is a directory, not a model file (a TensorFlow "
                         f"SavedModel?); mixedcore reads .keras, .h5 and .weights.h5 files")
    if not os.path.isfile(path):
        raise ValueError(f"{owner}: {path!r} is not a regular file")
    size = os.path.getsize(path)
    if size == 0:
        raise ValueError(f"{owner}: {path!r} is empty")
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if _hdf5_at(path, size):
        return "hdf5"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    raise ValueError(f"{owner}: {path!r} is neither a zip archive (.keras) nor an HDF5 file "
                     f"(.h5, .weights.h5); it starts with {head!r}")


# ================================================================================================
# reading: zip archives
# ================================================================================================

class _Window(io.RawIOBase):
    """A read-only, seekable view of ``size`` bytes of an open file from ``start``: h5py reads a
    stored (uncompressed) zip member through it in place, without a copy."""

    def __init__(self, f, start, size):
        super().__init__()
        self._f, self._start, self._size, self._pos = f, start, size, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        pos = base + offset
        if pos < 0:
            raise OSError(f"seek to a negative position ({pos})")
        self._pos = pos
        return pos

    def readinto(self, b):
        n = min(len(b), max(0, self._size - self._pos))
        if n == 0:
            return 0
        self._f.seek(self._start + self._pos)
        data = self._f.read(n)
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)


class _Archive:
    """A ``.keras`` zip archive opened for reading; every zip error becomes a ValueError naming
    the file."""

    def __init__(self, owner, path):
        self.owner, self.path = owner, path
        self._cleanup = contextlib.ExitStack()
        try:
            self._file = self._cleanup.enter_context(open(path, "rb"))
            self.zip = self._cleanup.enter_context(zipfile.ZipFile(self._file))
            self.names = set(self.zip.namelist())
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError,
                struct.error) as exc:
            self._cleanup.close()
            raise _fail(owner, path, f"not a readable zip archive, the file is truncated or "
                                     f"corrupt ({exc})") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._cleanup.close()

    def _info(self, name):
        info = self.zip.getinfo(name)
        if info.flag_bits & 0x1:
            raise _fail(self.owner, self.path, f"{name} is encrypted")
        if info.file_size > _EXPANSION_FLOOR and \
                info.file_size > _MAX_EXPANSION * max(info.compress_size, 1):
            raise _fail(self.owner, self.path,
                        f"{name} declares {info.file_size} bytes stored in "
                        f"{info.compress_size}: refusing a decompression bomb")
        return info

    def read(self, name, limit):
        info = self._info(name)
        if info.file_size > limit:
            raise _fail(self.owner, self.path, f"{name} is {info.file_size} bytes, more than "
                                               f"the {limit} a model config can need")
        try:
            return self.zip.read(name)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error) as exc:
            raise _fail(self.owner, self.path, f"cannot read {name}: the archive is truncated "
                                               f"or corrupt ({exc})") from None

    def json(self, name):
        if name not in self.names:
            return None
        data = self.read(name, _MAX_JSON_BYTES)
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise _fail(self.owner, self.path, f"{name} is not valid JSON ({exc})") from None

    def member_file(self, name):
        """A seekable binary file of member ``name``: a window on the archive when the member is
        stored, else a temporary file it is extracted to (zipfile checks its CRC)."""
        info = self._info(name)
        try:
            if info.compress_type == zipfile.ZIP_STORED:
                self._file.seek(info.header_offset)
                header = self._file.read(30)
                if len(header) != 30 or header[:4] != b"PK\x03\x04":
                    raise zipfile.BadZipFile(f"bad local header for {name}")
                name_len, extra_len = struct.unpack("<HH", header[26:30])
                start = info.header_offset + 30 + name_len + extra_len
                if start + info.file_size > os.fstat(self._file.fileno()).st_size:
                    raise zipfile.BadZipFile(f"{name} runs past the end of the file")
                window = _Window(self._file, start, info.file_size)
                crc = 0
                while True:
                    block = window.read(1 << 20)
                    if not block:
                        break
                    crc = zlib.crc32(block, crc)
                if crc != info.CRC:
                    raise zipfile.BadZipFile(f"{name} fails its CRC check ({crc:08x}, the "
                                             f"archive says {info.CRC:08x})")
                window.seek(0)
                return window
            tmp = self._cleanup.enter_context(tempfile.TemporaryFile())
            with self.zip.open(name) as src:
                shutil.copyfileobj(src, tmp, 1 << 20)
            tmp.seek(0)
            return tmp
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error,
                NotImplementedError) as exc:
            raise _fail(self.owner, self.path, f"cannot read {name}: the archive is truncated "
                                               f"or corrupt ({exc})") from None

    def weights_store(self):
        if _WEIGHTS_H5 in self.names:
            fileobj = self.member_file(_WEIGHTS_H5)
            h5 = _open_h5(self.owner, f"{self.path} ({_WEIGHTS_H5})", fileobj)
            self._cleanup.callback(h5.close)
            return _H5Store(self.owner, f"{self.path} ({_WEIGHTS_H5})", h5)
        if _WEIGHTS_NPZ in self.names:
            return _NpzStore(self.owner, f"{self.path} ({_WEIGHTS_NPZ})",
                             self.member_file(_WEIGHTS_NPZ))
        raise _fail(self.owner, self.path, f"the archive has neither {_WEIGHTS_H5} nor "
                                           f"{_WEIGHTS_NPZ}: the weights are missing "
                                           f"(members: {sorted(self.names)})")


# ================================================================================================
# reading: HDF5
# ================================================================================================

def _h5py():
    import h5py
    return h5py


def _h5_errors():
    return (OSError, RuntimeError, ValueError, KeyError, TypeError)


def _open_h5(owner, source, path_or_file):
    h5py = _h5py()
    try:
        return h5py.File(path_or_file, "r")
    except _h5_errors() as exc:
        raise _fail(owner, source, f"cannot be read as an HDF5 file; it is truncated or "
                                   f"corrupt ({exc})") from None


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


class _Array:
    """A weight in a file: its shape, and its values read on demand."""

    def __init__(self, where, shape, read):
        self.where, self.shape, self._read = where, tuple(shape), read

    def read(self):
        return self._read()


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


# ================================================================================================
# reading: the npz variant (pickled objects, read through a whitelist)
# ================================================================================================

class _PickledVariable:
    """What a pickled Keras variable becomes: its state, of which ``_value`` is used."""

    def __init__(self, *args, **kwargs):
        self.state = {}

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:    # (dict, slots) form
            state = {**(state[0] or {}), **(state[1] or {})}
        self.state = state if isinstance(state, dict) else {}


_TORCH_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": _BF16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class _StorageType:
    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)


def _rebuild_tensor(storage, offset, size, stride, *rest):
    """A torch tensor from its storage (a 1-d numpy array), offset, size and stride, bounds
    checked, as a new numpy array."""
    if not isinstance(storage, np.ndarray) or storage.ndim != 1:
        raise pickle.UnpicklingError("a tensor without a storage")
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    offset = int(offset)
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size) or \
            any(s < 0 for s in stride):
        raise pickle.UnpicklingError(f"a tensor of size {size}, stride {stride}")
    if 0 in size:
        return np.zeros(size, storage.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= storage.size:
        raise pickle.UnpicklingError(f"a tensor reaches element {last} of a storage of "
                                     f"{storage.size}")
    item = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=size,
                                           strides=tuple(s * item for s in stride),
                                           writeable=False)
    return np.array(view)


def _rebuild_parameter(data, *rest):
    return data


def _ordered_dict(*args):
    return dict(*args)


_TORCH_MAGIC = 0x1950A86A20F9469CFC6C
_TORCH_PROTOCOL = 1001


class _TorchStorage:
    """A storage named by a torch pickle; its data follow the pickle."""

    def __init__(self, dtype, numel):
        self.dtype, self.numel, self.array = np.dtype(dtype), numel, None


class _TorchUnpickler(pickle.Unpickler):
    """The object pickle of torch's (non-zip) serialization: storages are persistent ids
    ``("storage", type, key, location, numel, view)``."""

    def __init__(self, fileobj):
        super().__init__(fileobj)
        self.storages = {}

    def find_class(self, module, name):
        return _restricted_class(module, name)

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent id {str(pid)[:80]}")
        storage_type, key, numel, view = pid[1], str(pid[2]), int(pid[4]), pid[5]
        if not isinstance(storage_type, _StorageType) or view is not None or numel < 0:
            raise pickle.UnpicklingError(f"a storage {str(pid)[:80]} that is not a plain "
                                         f"array")
        storage = self.storages.setdefault(key, _TorchStorage(storage_type.dtype, numel))
        return storage


def _load_torch_bytes(data):
    """What torch pickled a storage as (``torch.storage._load_from_bytes``'s argument: torch's
    serialization without zip): magic number, protocol, system info, the object's pickle with
    storages as persistent ids, the list of storage keys, then each storage's data (an int64
    element count and the elements).  Returns the storage as a 1-d numpy array."""
    f = io.BytesIO(bytes(data))
    if _RestrictedUnpickler(f).load() != _TORCH_MAGIC:
        raise pickle.UnpicklingError("a torch blob without torch's magic number")
    if _RestrictedUnpickler(f).load() != _TORCH_PROTOCOL:
        raise pickle.UnpicklingError("a torch blob of an unknown protocol version")
    info = _RestrictedUnpickler(f).load()
    if not isinstance(info, dict) or not info.get("little_endian", False):
        raise pickle.UnpicklingError("a torch blob written on a big-endian machine")
    unpickler = _TorchUnpickler(f)
    result = unpickler.load()
    keys = _RestrictedUnpickler(f).load()
    if not isinstance(keys, list):
        raise pickle.UnpicklingError("a torch blob without its list of storages")
    for key in keys:
        storage = unpickler.storages.get(str(key))
        if storage is None:
            raise pickle.UnpicklingError(f"a torch blob lists storage {key!r} it never uses")
        header = f.read(8)
        if len(header) != 8:
            raise pickle.UnpicklingError("a torch blob cut short")
        count = struct.unpack("<q", header)[0]
        size = count * storage.dtype.itemsize
        if count != storage.numel or size > len(f.getbuffer()) - f.tell():
            raise pickle.UnpicklingError(f"storage {key!r} holds {count} elements, "
                                         f"{storage.numel} expected, or runs past the blob")
        storage.array = np.frombuffer(f.read(size), dtype=storage.dtype).copy()
    if not isinstance(result, _TorchStorage) or result.array is None:
        raise pickle.UnpicklingError("a torch blob that is not one storage with its data")
    return result.array


def _restricted_class(module, name):
    """The only globals a pickle in a weights file may name: numpy's array reconstruction,
    Keras variables (as state holders), torch tensor rebuilding (done here, in numpy)."""
    if module in ("numpy.core.multiarray", "numpy._core.multiarray") and \
            name in ("_reconstruct", "scalar"):
        return getattr(_multiarray, name)
    if module == "numpy" and name in ("ndarray", "dtype"):
        return getattr(np, name)
    if module.startswith("numpy") and name.endswith("DType") and module.endswith("dtypes"):
        return getattr(np.dtypes, name)
    if module == "collections" and name == "OrderedDict":
        return _ordered_dict
    if (module == "keras" or module.startswith("keras.")) and name in ("Variable",
                                                                       "KerasVariable"):
        return _PickledVariable
    if module == "torch._utils" and name == "_rebuild_tensor_v2":
        return _rebuild_tensor
    if module == "torch._utils" and name == "_rebuild_parameter":
        return _rebuild_parameter
    if module == "torch.storage" and name == "_load_from_bytes":
        return _load_torch_bytes
    if module == "torch" and name in _TORCH_STORAGE_DTYPES:
        return _StorageType(_TORCH_STORAGE_DTYPES[name])
    if module == "ml_dtypes" and name == "bfloat16":
        return ml_dtypes.bfloat16
    raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return _restricted_class(module, name)


def _as_weight(value):
    if isinstance(value, _PickledVariable):
        value = value.state.get("_value")
    if isinstance(value, np.ndarray) and (value.dtype.kind in "biuf" or value.dtype == _BF16):
        return value
    raise pickle.UnpicklingError(f"a variable of type {type(value).__name__}")


class _NpzStore:
    """Keras's ``model.weights.npz``: one member per path, each a pickled dict of variables."""

    def __init__(self, owner, source, fileobj):
        self.owner, self.source = owner, source
        try:
            self.zip = zipfile.ZipFile(fileobj)
            self.members = {n[:-4]: n for n in self.zip.namelist() if n.endswith(".npy")}
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error) as exc:
            raise _fail(owner, source, f"not a readable .npz ({exc})") from None
        self._cache = {}

    def _load(self, path):
        if path in self._cache:
            return self._cache[path]
        member = self.members[path]
        info = self.zip.getinfo(member)
        if info.file_size > _EXPANSION_FLOOR and \
                info.file_size > _MAX_EXPANSION * max(info.compress_size, 1):
            raise _fail(self.owner, self.source, f"{member} declares {info.file_size} bytes "
                                                 f"stored in {info.compress_size}: refusing a "
                                                 f"decompression bomb")
        try:
            with self.zip.open(member) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                if dtype != np.dtype(object) or shape != ():
                    raise pickle.UnpicklingError(f"a {dtype} array of shape {shape} where Keras "
                                                 f"keeps a pickled dict")
                holder = _RestrictedUnpickler(io.BytesIO(f.read())).load()
            entries = holder.item() if isinstance(holder, np.ndarray) else holder
            if not isinstance(entries, dict):
                raise pickle.UnpicklingError(f"a {type(entries).__name__} instead of a dict")
            values = {str(k): _as_weight(v) for k, v in entries.items()}
        except (pickle.UnpicklingError, zipfile.BadZipFile, OSError, ValueError, EOFError,
                struct.error, TypeError, AttributeError, IndexError, KeyError) as exc:
            raise _fail(self.owner, self.source, f"cannot read {member}: {exc}") from None
        self._cache[path] = values
        return values

    def vars(self, path):
        if path not in self.members:
            return {}
        values = self._load(path)
        return {k: _Array(f"{path}/{k}", v.shape, lambda v=v: v) for k, v in values.items()}

    def paths_with_vars(self, prefix="layers"):
        return [p for p in self.members if p.startswith(prefix + "/") and self._load(p)]

    def close(self):
        self.zip.close()


# ================================================================================================
# model structure: layers, Keras's weight paths, weight order
# ================================================================================================

def _models():
    from mixedcore import models
    return models


def _layers_module():
    from mixedcore import layers
    return layers


def _is_model(obj):
    return isinstance(obj, _models().Model)


def _model_layers(model):
    return list(model.layers)


def keras_snake_case(name):
    """Keras's ``to_snake_case`` of a class name (the weight-file key of a layer):
    "Dense" -> "dense", "Conv2D" -> "conv2d", "ReLU" -> "re_lu"."""
    name = re.sub(r"\W+", "", name)
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def _unique_key(base, used):
    if base in used:
        used[base] += 1
        return f"{base}_{used[base]}"
    used[base] = 0
    return base


def _keras_class_name(layer):
    """The class name Keras gives the layer (a functional model is Keras's "Functional")."""
    cls = type(layer)
    return cls.__dict__.get("_keras_class") or cls.__name__


def _file_positions(layer):
    """Positions in ``layer.weights`` of the layer's variables in the order Keras files them:
    creation order, trainable variables first (independent of ``layer.trainable``)."""
    n = len(layer.weights)
    flags = getattr(layer, "_trainable_flags", None)
    index_order = getattr(layer, "_weight_index_order", None)
    if flags is None or index_order is None or len(flags) != n:
        return list(range(n))
    weights_order = index_order()
    where = {creation: pos for pos, creation in enumerate(weights_order)}
    creation_order = ([i for i, t in enumerate(flags) if t] +
                      [i for i, t in enumerate(flags) if not t])
    return [where[i] for i in creation_order]


# Layers whose Keras class keeps its variables in sub-layers: the attribute names Keras files
# them under, in the order their variables come in the layer's weights.
_SUBLAYER_PATHS = {
    "MultiHeadAttention": ("query_dense", "key_dense", "value_dense", "output_dense"),
}


def _layer_slots(layer):
    """[(sub-path, positions in layer.weights)] of a layer in Keras's layout; sub-path "" is the
    layer's own ``vars``."""
    positions = _file_positions(layer)
    subpaths = _SUBLAYER_PATHS.get(_keras_class_name(layer))
    custom = getattr(layer, "keras_weight_paths", None)
    if callable(custom):
        return [(sub, list(pos)) for sub, pos in custom()]
    if subpaths and positions:
        if len(positions) % len(subpaths):
            raise ValueError(f"{type(layer).__name__} '{layer.name}': {len(positions)} weights "
                             f"do not split into the {len(subpaths)} sub-layers Keras files "
                             f"them under")
        k = len(positions) // len(subpaths)
        return [(sub, list(range(i * k, (i + 1) * k))) for i, sub in enumerate(subpaths)]
    return [("", positions)]


def _structured_entries(model, prefix="", visited=None):
    """[(path, layer, positions)] for every layer of ``model`` (nested models walked), where
    ``path`` is the group Keras keeps the layer's variables in.  A layer met a second time (a
    layer shared by two nested models) is filed only under its first path, as Keras does; it
    still counts for the suffixes of the later ones."""
    visited = set() if visited is None else visited
    out = []
    used = {}
    for layer in _model_layers(model):
        key = _unique_key(keras_snake_case(_keras_class_name(layer)), used)
        if id(layer) in visited:
            continue
        visited.add(id(layer))
        base = f"{prefix}layers/{key}"
        if _is_model(layer):
            out.append((base, layer, []))
            out.extend(_structured_entries(layer, base + "/", visited))
            continue
        for sub, positions in _layer_slots(layer):
            out.append((f"{base}/{sub}" if sub else base, layer, positions))
    return out


def _legacy_positions(layer):
    """Positions in ``layer.weights`` of the layer's weights in the order legacy files keep
    them: its trainable weights, then the others (for a nested model: over all its layers)."""
    where = {id(w): pos for pos, w in enumerate(layer.weights)}
    order = list(layer.trainable_weights) + list(layer.non_trainable_weights)
    positions = [where[id(w)] for w in order if id(w) in where]
    if sorted(positions) != list(range(len(where))):
        return list(range(len(where)))
    return positions


def _legacy_names(layer):
    """The names of ``layer.weights`` ("dense/kernel"...), nested models' leaf layers asked."""
    names = {}
    leaves = layer._leaf_layers() if _is_model(layer) else [layer]
    for leaf in leaves:
        labels = leaf.weight_names() if callable(getattr(leaf, "weight_names", None)) else []
        for label, w in zip(labels, leaf.weights):
            names.setdefault(id(w), label)
    return [names.get(id(w), f"{layer.name}/weight_{pos}")
            for pos, w in enumerate(layer.weights)]


def _describe(layer):
    return f"layer '{layer.name}' ({type(layer).__name__})"


def _weight_label(layer, pos):
    names = getattr(layer, "weight_names", None)
    if callable(names):
        try:
            return names()[pos]
        except (IndexError, TypeError):
            pass
    return f"{layer.name}/{pos}"


def _apply(owner, source, plan, skip_mismatch, problems):
    """Check the plan (layer -> {position: _Array}), then read and set every layer's weights;
    nothing is set when a problem remains (unless skip_mismatch, which drops those layers)."""
    bad_layers = {layer for layer, _ in problems}
    if problems and not skip_mismatch:
        listing = "; ".join(text for _, text in problems[:8])
        more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        raise _fail(owner, source, f"the weights do not fit the model: {listing}{more}")
    for layer, text in problems:
        warnings.warn(f"{owner}: {source}: skipping {_describe(layer)}: {text}", stacklevel=4)
    values = {}
    for layer, arrays in plan.items():
        if layer in bad_layers:
            continue
        current = layer.weights
        new = []
        for pos in range(len(current)):
            value = arrays[pos].read()
            if value.shape != tuple(current[pos].shape):    # a file that lied about its shape
                raise _fail(owner, source, f"{arrays[pos].where} has shape {value.shape}, "
                                           f"expected {tuple(current[pos].shape)}")
            new.append(value)
        values[layer] = new
    for layer, new in values.items():
        layer.set_weights(new)


def _check_array(layer, pos, arr, label):
    expected = tuple(layer.weights[pos].shape)
    if arr.shape != expected:
        return (f"{label} has shape {arr.shape}, {_describe(layer)} expects "
                f"{expected} for {_weight_label(layer, pos)}")
    return None


def _load_structured(owner, source, model, store, skip_mismatch):
    """Keras 3 layout (C): every layer's variables from its structural path."""
    plan, problems, used_paths = {}, [], set()
    for path, layer, positions in _structured_entries(model):
        found = store.vars(path)
        if not positions:
            if found and not _is_model(layer):
                problems.append((layer, f"{path} holds {len(found)} arrays, {_describe(layer)} "
                                        f"has no weights"))
            used_paths.add(path)
            continue
        used_paths.add(path)
        want = {str(i) for i in range(len(positions))}
        if set(found) != want:
            if not found:
                text = (f"{path} is missing from the file ({_describe(layer)} has "
                        f"{len(positions)} weights)")
            else:
                text = (f"{path} holds arrays {sorted(found, key=_natural)}, "
                        f"{_describe(layer)} has {len(positions)} weights")
            problems.append((layer, text))
            continue
        entry = plan.setdefault(layer, {})
        for i, pos in enumerate(positions):
            text = _check_array(layer, pos, found[str(i)], f"{path}/vars/{i}")
            if text:
                problems.append((layer, text))
            entry[pos] = found[str(i)]
    extra = [p for p in store.paths_with_vars("layers") if p not in used_paths]
    if extra:
        problems.append((None, f"the file has weights at {sorted(extra)[:6]} for which the "
                               f"model has no layer"))
    unmatched = [(layer, text) for layer, text in problems if layer is None]
    if unmatched and skip_mismatch:
        for _, text in unmatched:
            warnings.warn(f"{owner}: {source}: {text}", stacklevel=3)
        problems = [p for p in problems if p[0] is not None]
    _apply(owner, source, plan, skip_mismatch, problems)


def _natural(key):
    return (0, int(key)) if key.isdigit() else (1, key)


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


def _load_legacy(owner, source, model, group, skip_mismatch, by_name_only):
    """Legacy layout (C): by layer name, or by position among the layers with weights."""
    names, groups = _legacy_groups(owner, source, group)
    layers = [layer for layer in _model_layers(model) if layer.weights]
    with_weights = [n for n in names if groups[n]]
    if by_name_only or all(layer.name in groups for layer in layers):
        pairs = []
        missing = [layer.name for layer in layers if layer.name not in groups]
        if missing:
            raise _fail(owner, source, f"no weights for layers {missing}: the weights are "
                                       f"missing")
        pairs = [(layer, layer.name) for layer in layers]
        unused = [n for n in with_weights if n not in {layer.name for layer in layers}]
    else:
        if len(with_weights) != len(layers):
            raise _fail(owner, source, f"the file has weights for {len(with_weights)} layers "
                                       f"({with_weights}), the model has {len(layers)} layers "
                                       f"with weights ({[layer.name for layer in layers]})")
        pairs = list(zip(layers, with_weights))
        unused = []
    problems = []
    if unused:
        problems.append((None, f"the file has weights for layers {unused} that the model "
                               f"does not have"))
    plan = {}
    for layer, name in pairs:
        arrays = groups[name]
        if len(arrays) != len(layer.weights):
            problems.append((layer, f"'{name}' holds {len(arrays)} weights, {_describe(layer)} "
                                    f"has {len(layer.weights)}"))
            continue
        entry = plan.setdefault(layer, {})
        for pos, arr in zip(_legacy_positions(layer), arrays):
            text = _check_array(layer, pos, arr, arr.where)
            if text:
                problems.append((layer, text))
            entry[pos] = arr
    if skip_mismatch:
        for _, text in [p for p in problems if p[0] is None]:
            warnings.warn(f"{owner}: {source}: {text}", stacklevel=3)
        problems = [p for p in problems if p[0] is not None]
    _apply(owner, source, plan, skip_mismatch, problems)


# ================================================================================================
# configs: normalization, class checks, policy override
# ================================================================================================

def _layer_classes():
    layers = _layers_module()
    classes = getattr(layers, "_CLASSES", None)
    if isinstance(classes, dict):
        return dict(classes)
    base = layers.Layer
    return {name: getattr(layers, name) for name in getattr(layers, "__all__", [])
            if isinstance(getattr(layers, name, None), type) and
            issubclass(getattr(layers, name), base)}


def _strip_sharing(obj):
    """Drop Keras's ``shared_object_id`` keys (every occurrence keeps the full config)."""
    if isinstance(obj, dict):
        return {k: _strip_sharing(v) for k, v in obj.items() if k != "shared_object_id"}
    if isinstance(obj, list):
        return [_strip_sharing(v) for v in obj]
    return obj


def _check_custom_objects(owner, custom_objects):
    if custom_objects is None:
        return {}
    if not isinstance(custom_objects, dict):
        raise TypeError(f"{owner}: custom_objects must be a dict of name -> class, got "
                        f"{type(custom_objects).__name__}")
    for key in custom_objects:
        if not isinstance(key, str):
            raise TypeError(f"{owner}: custom_objects keys must be class names (str), got "
                            f"{key!r}")
    return dict(custom_objects)


def _legacy_tensor_ref(value, layer_names):
    return (isinstance(value, list) and len(value) == 3 and isinstance(value[0], str) and
            value[0] in layer_names and all(isinstance(v, int) for v in value[1:]))


def _tensor_dict(ref):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": None, "dtype": None, "keras_history": list(ref[:3])}}


def _convert_legacy_node(node, layer_names):
    """One tf.keras 2.x inbound node ``[[name, node, tensor, kwargs], ...]`` in Keras 3's form
    ``{"args": [...], "kwargs": {...}}``: one input is the first argument, several are a list."""
    tensors = [_tensor_dict(entry) for entry in node]
    kwargs = {}
    if node and len(node[-1]) >= 4 and isinstance(node[-1][3], dict):
        kwargs = node[-1][3]

    def convert(v):
        if _legacy_tensor_ref(v, layer_names):
            return _tensor_dict(v)
        if isinstance(v, dict):
            return {k: convert(x) for k, x in v.items()}
        if isinstance(v, list):
            return [convert(x) for x in v]
        return v
    first = tensors[0] if len(tensors) == 1 else tensors
    return {"args": [first] if tensors else [], "kwargs": convert(kwargs)}


class _Normalizer:
    """Normalizes one model config (B) and collects the class names it uses."""

    def __init__(self, owner, source, custom, policy):
        self.owner, self.source, self.custom, self.policy = owner, source, custom, policy
        self.classes = _layer_classes()
        self.unknown = []
        self.reference = None           # the model's policy name, what dtype_policy= replaces (G)

    def known(self, entry):
        name = entry.get("class_name")
        registered = entry.get("registered_name")
        if name in self.custom or (registered and registered in self.custom):
            if registered in self.custom and name not in self.custom:
                self.custom[name] = self.custom[registered]
            return True
        return name in self.classes or name in _MODEL_CLASSES

    def model(self, class_name, config):
        if class_name == "Sequential":
            return self.sequential(config)
        return self.functional(config)

    def sequential(self, config):
        if isinstance(config, list):                    # Keras 2.0-2.2: a bare layer list
            config = {"layers": config}
        if not isinstance(config, dict) or not isinstance(config.get("layers"), list):
            raise _fail(self.owner, self.source, "the Sequential config has no 'layers' list")
        config = dict(config)
        config["layers"] = [self.layer(entry) for entry in config["layers"]]
        if self.policy is not None and "dtype" in config and self.replaces(config["dtype"]):
            config["dtype"] = self.policy_config()
        return config

    def functional(self, config):
        if not isinstance(config, dict) or not isinstance(config.get("layers"), list):
            raise _fail(self.owner, self.source, "the model config has no 'layers' list")
        config = dict(config)
        names = {e.get("name") or e.get("config", {}).get("name") for e in config["layers"]
                 if isinstance(e, dict)}
        layers = []
        for entry in config["layers"]:
            entry = self.layer(entry)
            nodes = entry.get("inbound_nodes")
            if isinstance(nodes, list):
                entry["inbound_nodes"] = [
                    _convert_legacy_node(node, names) if isinstance(node, list) else node
                    for node in nodes]
            layers.append(entry)
        config["layers"] = layers
        return config

    def layer(self, entry):
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise _fail(self.owner, self.source, f"a layer entry is not a dict with "
                                                 f"'class_name': {str(entry)[:200]}")
        entry = dict(entry)
        name = entry["class_name"]
        inner = entry.get("config")
        if not self.known(entry):
            label = inner.get("name") if isinstance(inner, dict) else None
            self.unknown.append(f"{name}" + (f" (layer '{label}')" if label else ""))
            return entry
        if name in _MODEL_CLASSES:
            entry["config"] = self.model(name, inner)
            return entry
        if not isinstance(inner, dict):
            raise _fail(self.owner, self.source, f"layer class {name} has no config dict")
        inner = dict(inner)
        if name != "InputLayer":
            self.check_policy(inner)
            if self.policy is not None and self.replaces(inner.get("dtype")):
                inner["dtype"] = self.policy_config()
        entry["config"] = inner
        return entry

    def check_policy(self, inner):
        dtype = inner.get("dtype")
        if isinstance(dtype, dict):
            cls = dtype.get("class_name")
            if cls not in _POLICY_CLASSES and cls not in self.custom:
                raise _fail(self.owner, self.source,
                            f"layer '{inner.get('name')}' has a dtype policy of class {cls} "
                            f"({dtype.get('config')}); mixedcore knows {list(_POLICY_CLASSES)} "
                            f"(quantized weights are not supported)")

    def replaces(self, dtype):
        """Whether ``dtype_policy=`` replaces a stored policy (G)."""
        if not self.overridable(dtype):
            return False
        name = _policy_name(dtype)
        return name is None or self.reference is None or name == self.reference

    @staticmethod
    def overridable(dtype):
        """Whether a layer's stored policy is replaced by ``dtype_policy=``: floating (or unset)
        policies are; integer and bool ones, which a layer needs for what it computes, are not."""
        try:
            policy = _policies.get(dtype) if dtype is not None else None
        except (TypeError, ValueError):
            return True
        if policy is None or policy.compute_dtype is None:
            return True
        return policy.compute_dtype in ("float16", "bfloat16", "float32", "float64")

    def policy_config(self):
        return {"module": "keras", "class_name": "DTypePolicy",
                "config": {"name": self.policy.name}, "registered_name": None}


def _policy_name(dtype):
    """The name of a stored policy (a name, a serialized policy dict of any known class), or
    None when unset or unreadable."""
    if dtype is None:
        return None
    if isinstance(dtype, dict):
        inner = dtype.get("config")
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            return inner["name"]
        return None
    if isinstance(dtype, str):
        try:
            return _policies.get(dtype).name
        except (TypeError, ValueError):
            return dtype
    return None


def _reference_policy(model_dict):
    """The name of the model's policy in a serialized model (G), or None."""
    config = model_dict.get("config")
    own = None
    if model_dict.get("class_name") == "Sequential" and isinstance(config, dict):
        own = _policy_name(config.get("dtype"))
    counts = {}

    def visit(entries):
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            inner = entry.get("config")
            if isinstance(inner, list):                 # Keras 2.0-2.2 Sequential
                visit(inner)
                continue
            if not isinstance(inner, dict):
                continue
            if entry.get("class_name") in _MODEL_CLASSES:
                visit(inner.get("layers"))
                continue
            if entry.get("class_name") == "InputLayer":
                continue
            name = _policy_name(inner.get("dtype"))
            if name is not None:
                counts[name] = counts.get(name, 0) + 1   # dicts keep the first-met order
    layers = config.get("layers") if isinstance(config, dict) else config
    visit(layers)
    if not counts:
        return own
    best = max(counts.values())
    tied = [name for name, n in counts.items() if n == best]
    return own if own in tied else tied[0]


def _model_class(owner, source, class_name, custom):
    models = _models()
    if class_name in custom:
        return custom[class_name]
    if class_name == "Sequential":
        return models.Sequential
    if class_name in ("Functional", "Model"):
        return models.Model
    raise _fail(owner, source, f"the file holds a {class_name!r}, not a Sequential or "
                               f"functional model; pass custom_objects={{{class_name!r}: "
                               f"YourModelClass}} for your own model class")


def _model_from_dict(owner, source, model_dict, custom, policy):
    """A model from a serialized model dict ({"class_name", "config", ...}), normalized (B)."""
    if not isinstance(model_dict, dict) or "class_name" not in model_dict or \
            "config" not in model_dict:
        raise _fail(owner, source, "the model config is not a dict with 'class_name' and "
                                   "'config'")
    model_dict = _strip_sharing(model_dict)
    class_name = model_dict["class_name"]
    registered = model_dict.get("registered_name")
    if registered and registered in custom and class_name not in custom:
        custom[class_name] = custom[registered]
    cls = _model_class(owner, source, class_name, custom)
    normalizer = _Normalizer(owner, source, custom, policy)
    if policy is not None:
        normalizer.reference = _reference_policy(model_dict)
    kind = "Sequential" if class_name == "Sequential" or (
        isinstance(cls, type) and issubclass(cls, _models().Sequential)) else "Functional"
    config = normalizer.model(kind, model_dict["config"])
    if normalizer.unknown:
        supported = sorted(set(normalizer.classes) | set(_MODEL_CLASSES))
        raise _fail(owner, source,
                    f"unknown layer class(es) {', '.join(normalizer.unknown)}; mixedcore "
                    f"supports {supported}; pass custom_objects={{'ClassName': YourLayer}} to "
                    f"load your own layers")
    try:
        from_config = cls.from_config
        if "custom_objects" in inspect.signature(from_config).parameters:
            model = from_config(config, custom_objects=custom or None)
        else:
            model = from_config(config)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise _fail(owner, source, f"cannot rebuild the model from its config: "
                                   f"{type(exc).__name__}: {exc}") from exc
    build = model_dict.get("build_config")
    if not getattr(model, "built", True) and isinstance(build, dict) and \
            build.get("input_shape") is not None and hasattr(model, "build"):
        try:
            model.build(build["input_shape"])
        except (TypeError, ValueError) as exc:
            raise _fail(owner, source, f"cannot build the model for input shape "
                                       f"{build['input_shape']}: {exc}") from exc
    if policy is not None:
        _set_model_policies(model, policy)
    return model


def clone_with_policy(owner, model, policy):
    """A copy of a built ``model`` whose policy ``policy`` replaces its own as
    ``load_model(dtype_policy=)`` does (G), with the same weights."""
    policy = _as_policy(owner, policy)
    model_dict = _model_dict(owner, model)
    model_dict.pop("compile_config", None)
    custom = {}

    def collect(m):
        custom.setdefault(type(m).__name__, type(m))
        for layer in m.layers:
            if _is_model(layer):
                collect(layer)
            else:
                custom.setdefault(type(layer).__name__, type(layer))

    collect(model)
    builtin = set(_layer_classes()) | set(_MODEL_CLASSES)
    custom = {k: v for k, v in custom.items() if k not in builtin}
    clone = _model_from_dict(owner, f"model '{model.name}'", model_dict, custom, policy)
    clone.set_weights(model.get_weights())
    return clone


def _set_model_policies(model, policy):
    """Functional configs carry no policy of the model itself: under ``dtype_policy=`` the
    model and its nested functional models take it (compile reads it for loss scaling)."""
    models = _models()
    if not isinstance(model, models.Sequential):
        model._dtype_policy = policy
    for layer in model.layers:
        if isinstance(layer, models.Model):
            _set_model_policies(layer, policy)


def _as_policy(owner, dtype_policy):
    if dtype_policy is None:
        return None
    policy = _policies.get(dtype_policy)
    if policy.compute_dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise ValueError(f"{owner}: dtype_policy must be a floating-point policy such as "
                         f"'float32', 'mixed_float16' or 'mixed_bfloat16', got {policy.name!r}")
    return policy


# ================================================================================================
# compile state
# ================================================================================================

class _Unsupported(Exception):
    pass


_LOSS_NEUTRAL = {
    "reduction": ("auto", "sum_over_batch_size", None), "ignore_class": (None,),
    "label_smoothing": (0, 0.0), "axis": (-1,), "dtype": (None, "float32"),
}


def _short_class(entry):
    return str(entry.get("class_name", "")).split(">")[-1]


def _optimizer_from_config(cfg):
    """The optimizer of a compile config (Keras 3, tf.keras 2 or TF 2.3 forms), through
    ``optimizers.get`` / ``deserialize``; _Unsupported when mixedcore cannot rebuild it."""
    from mixedcore import optimizers
    if isinstance(cfg, str):
        try:
            return optimizers.get(cfg)
        except ValueError:
            raise _Unsupported(f"its optimizer {cfg!r} is not one mixedcore has") from None
    if not isinstance(cfg, dict) or "class_name" not in cfg:
        raise _Unsupported(f"its optimizer config {str(cfg)[:120]} cannot be read")
    cfg = dict(cfg, class_name=_short_class(cfg))
    try:
        return optimizers.deserialize(cfg)
    except (TypeError, ValueError) as exc:
        raise _Unsupported(f"its {cfg['class_name']} optimizer cannot be rebuilt ({exc})") \
            from None


def _loss_from_config(cfg):
    from mixedcore import losses
    if cfg is None:
        return None
    if isinstance(cfg, list) and len(cfg) == 1:
        return _loss_from_config(cfg[0])
    if isinstance(cfg, str):
        try:
            return losses.get(cfg)
        except ValueError:
            raise _Unsupported(f"its loss {cfg!r} is not one mixedcore has") from None
    if isinstance(cfg, dict) and "class_name" in cfg:
        name = _short_class(cfg)
        inner = cfg.get("config")
        if name == "function" and isinstance(inner, str):
            return _loss_from_config(inner)
        inner = inner if isinstance(inner, dict) else {}
        try:
            cls = type(losses.get(name))
        except (ValueError, TypeError):
            raise _Unsupported(f"its loss {name} is not one mixedcore has") from None
        params = inspect.signature(cls.__init__).parameters
        kwargs = {}
        for key, value in inner.items():
            if key in params and key != "self":
                kwargs[key] = value
            elif key in _LOSS_NEUTRAL and value in _LOSS_NEUTRAL[key]:
                continue
            elif key == "fn":
                continue
            else:
                raise _Unsupported(f"its loss {name} sets {key}={value!r}, which mixedcore's "
                                   f"loss does not have")
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise _Unsupported(f"its loss {name} cannot be rebuilt ({exc})") from None
    raise _Unsupported(f"its loss {str(cfg)[:120]} (several outputs?) cannot be rebuilt")


def _metrics_from_config(cfg, dropped):
    from mixedcore import metrics
    if cfg is None:
        return []
    if isinstance(cfg, (str, dict)):
        cfg = [cfg]
    if isinstance(cfg, list) and len(cfg) == 1 and isinstance(cfg[0], list):
        cfg = cfg[0]                                    # tf.keras 2.x: one list per output
    if not isinstance(cfg, list):
        dropped.append(str(cfg)[:80])
        return []
    out = []
    for item in cfg:
        candidates = []
        if isinstance(item, str):
            candidates = [item]
        elif isinstance(item, dict):
            inner = item.get("config") if isinstance(item.get("config"), dict) else {}
            # the metric's own name first ("accuracy" names the logs as tf.keras did)
            candidates = [inner.get("name"), inner.get("fn"), keras_snake_case(_short_class(item))]
        for name in candidates:
            if not isinstance(name, str):
                continue
            try:
                metrics.get(name)
            except (ValueError, TypeError):
                continue
            out.append(name)
            break
        else:
            dropped.append(item if isinstance(item, str) else _short_class(item))
    return out


def _restore_compile(owner, source, model, cfg, legacy):
    """Compile ``model`` from a Keras compile config (``training_config`` of a legacy .h5)."""
    if not isinstance(cfg, dict):
        return
    try:
        opt_cfg = cfg.get("optimizer_config") if legacy else cfg.get("optimizer")
        if opt_cfg is None:
            raise _Unsupported("it names no optimizer")
        optimizer = _optimizer_from_config(opt_cfg)
        loss_cfg = cfg.get("loss")
        if isinstance(loss_cfg, dict) and "class_name" not in loss_cfg:    # per output name
            loss = {k: _loss_from_config(v) for k, v in loss_cfg.items()}
        elif isinstance(loss_cfg, list) and len(loss_cfg) > 1:             # per output
            loss = [_loss_from_config(v) for v in loss_cfg]
        else:
            loss = _loss_from_config(loss_cfg)
        weights = cfg.get("loss_weights")
        if isinstance(weights, (int, float)) and not isinstance(weights, bool):
            weights = [weights]
        values = list(weights.values()) if isinstance(weights, dict) else weights or []
        if not isinstance(values, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise _Unsupported(f"its loss_weights {str(weights)[:80]} cannot be read")
        dropped = []
        metric_ids = _metrics_from_config(cfg.get("metrics"), dropped)
        if cfg.get("weighted_metrics"):
            dropped.append(f"weighted_metrics {cfg['weighted_metrics']}")
    except _Unsupported as exc:
        warnings.warn(f"{owner}: {source}: the model was saved compiled, but {exc}; it is "
                      f"loaded uncompiled (call compile() before training)", stacklevel=3)
        return
    if dropped:
        warnings.warn(f"{owner}: {source}: metrics {dropped} are not ones mixedcore has and "
                      f"are left out of compile()", stacklevel=3)
    try:
        model.compile(optimizer=optimizer, loss=loss, metrics=metric_ids,
                      loss_weights=weights or None)
    except (TypeError, ValueError) as exc:
        warnings.warn(f"{owner}: {source}: the model was saved compiled, but compile() refused "
                      f"its settings ({exc}); it is loaded uncompiled", stacklevel=3)


def _optimizer_to_keras(opt):
    from mixedcore import optimizers
    if isinstance(opt, optimizers.LossScaleOptimizer):
        inner = _optimizer_to_keras(opt.inner_optimizer)
        if not opt.dynamic:         # Keras 3 scales dynamically only: the inner optimizer
            return inner
        return {"module": "keras.optimizers", "class_name": "LossScaleOptimizer",
                "config": {"name": "loss_scale_optimizer", "inner_optimizer": inner,
                           "initial_scale": float(opt.initial_scale),
                           "dynamic_growth_steps": int(opt.dynamic_growth_steps)},
                "registered_name": None}
    config = opt.get_config()
    if callable(config.get("learning_rate")):
        return None
    name = type(opt).__name__
    return {"module": "keras.optimizers", "class_name": name,
            "config": {"name": name.lower(), **config}, "registered_name": None}


def _loss_to_keras(loss):
    if loss is None:
        return None
    name = getattr(loss, "name", None)
    config = loss.get_config()
    # the short string form only for a loss with its default settings, under a name Keras reads
    try:
        default = type(loss)().get_config()
    except TypeError:
        default = None
    if not getattr(loss, "from_logits", False) and isinstance(name, str) \
            and name != "huber_loss" and config == default:
        return name
    return {"module": "keras.losses", "class_name": type(loss).__name__, "config": config,
            "registered_name": None}


def _compile_config(model):
    """Keras's compile config of a compiled model, or None."""
    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        return None
    optimizer = _optimizer_to_keras(model.optimizer)
    if optimizer is None:
        return None
    metric_ids = [m for m in getattr(model, "_metric_ids", []) if isinstance(m, str)]
    names = list(getattr(model, "output_names", []))
    fns = getattr(model, "_loss_fns", None)
    if fns is None or len(fns) != len(names):
        loss = _loss_to_keras(getattr(model, "loss", None))
    elif len(fns) == 1:
        loss = _loss_to_keras(fns[0])
    else:
        loss = {n: _loss_to_keras(f) for n, f in zip(names, fns) if f is not None}
    weights = getattr(model, "_loss_weights", None)
    loss_weights = None
    if weights and len(weights) == len(names) and any(w != 1.0 for w in weights):
        loss_weights = dict(zip(names, map(float, weights))) if len(names) > 1 else \
            [float(weights[0])]
    return {"optimizer": optimizer, "loss": loss, "loss_weights": loss_weights,
            "metrics": metric_ids or None, "weighted_metrics": None,
            "run_eagerly": False, "steps_per_execution": 1, "jit_compile": False}


# ================================================================================================
# writing
# ================================================================================================

def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, DTypePolicy):
        return _policies.serialize(value)
    raise TypeError(f"a value of type {type(value).__name__} ({value!r}) cannot be written "
                    f"to JSON")


def _dumps(owner, obj, **kwargs):
    try:
        return json.dumps(obj, default=_json_default, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{owner}: the model's config cannot be written: {exc}") from None


def _model_dict(owner, model, legacy=False):
    """The serialized model (Keras's top-level config.json form)."""
    if not getattr(model, "built", True):
        raise ValueError(f"{owner}: the model is not built yet; start it with "
                         f"Input(shape=...) or call build() first")
    try:
        config = model.get_config()
    except (NotImplementedError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{owner}: the model's config cannot be made: "
                         f"{type(exc).__name__}: {exc}") from exc
    cls = type(model)
    if "_keras_class" in cls.__dict__:
        class_name = cls.__dict__["_keras_class"]
        module = getattr(cls, "_keras_module", "keras")
        registered = "Functional" if class_name == "Functional" else None
    else:
        class_name, module, registered = cls.__name__, cls.__module__, cls.__name__
    if legacy:
        return {"class_name": class_name, "config": config}
    build_shape = model._config_build_shape() if hasattr(model, "_config_build_shape") else None
    out = {"module": module, "class_name": class_name, "config": config,
           "registered_name": registered, "build_config": {"input_shape": build_shape}}
    compile_config = _compile_config(model)
    if compile_config is not None:
        out["compile_config"] = compile_config
    return out


@contextlib.contextmanager
def _atomic_write(owner, path, overwrite):
    """Yield a temporary path beside ``path``; rename it over ``path`` when the block succeeds,
    remove it when it fails (E)."""
    if os.path.isdir(path):
        raise ValueError(f"{owner}: {path!r} is a directory")
    if not overwrite and os.path.exists(path):
        raise ValueError(f"{owner}: {path!r} exists and overwrite=False")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"{owner}: the directory {directory!r} does not exist")
    base = os.path.basename(path)
    while True:
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            break
        except FileExistsError:
            continue
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_dataset(group, key, value):
    value = np.asarray(value)
    if value.dtype == _BF16:
        ds = group.create_dataset(key, data=value)
        ds.attrs["dtype"] = "bfloat16"
    else:
        group.create_dataset(key, data=value)


def _write_structured(model, h5):
    """The weights in Keras 3's layout (C), into an open, empty h5py file."""
    h5.create_group("vars").attrs["name"] = model.name
    for path, layer, positions in _structured_entries(model):
        group = h5.require_group(path).require_group("vars")
        group.attrs["name"] = layer.name
        weights = layer.weights
        for i, pos in enumerate(positions):
            _write_dataset(group, str(i), weights[pos])


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


def _write_legacy_weights(model, group):
    """The weights in the legacy layout (C): a group per layer, datasets named in weight_names."""
    from mixedcore import __version__
    everything = _model_layers(model)
    _write_attr_list(group, "layer_names", [layer.name for layer in everything])
    group.attrs["backend"] = "mixedcore".encode("utf-8")
    group.attrs["keras_version"] = _KERAS_FORMAT_VERSION.encode("utf-8")
    group.attrs["mixedcore_version"] = __version__.encode("utf-8")
    for layer in sorted(everything, key=lambda layer: layer.name):
        g = group.create_group(layer.name)
        weights, labels = layer.weights, _legacy_names(layer)
        positions = _legacy_positions(layer)
        names = [labels[pos] for pos in positions]
        if len(set(names)) != len(names):
            raise ValueError(f"{_describe(layer)} has two weights of one name: {names}")
        _write_attr_list(g, "weight_names", names)
        for name, pos in zip(names, positions):
            _write_dataset(g, name, weights[pos])
    top = group.create_group("top_level_model_weights")
    _write_attr_list(top, "weight_names", [])


def _legacy_training_config(model):
    cfg = _compile_config(model)
    if cfg is None:
        return None
    out = {k: cfg[k] for k in ("loss", "metrics", "weighted_metrics", "loss_weights")}
    opt = cfg["optimizer"]
    out["optimizer_config"] = {"class_name": opt["class_name"], "config": opt["config"]}
    return out


# ================================================================================================
# the public functions
# ================================================================================================

def save_model(model, filepath, overwrite=True):
    """Write a model to a Keras file: a ``.keras`` archive, or a legacy ``.h5`` file.

    Parameters
    ----------
    model : models.Sequential or models.Model
        A built model.
    filepath : str or os.PathLike
        Ends in ``.keras`` (config.json, metadata.json and model.weights.h5 in a zip archive,
        Keras 3's format) or ``.h5`` / ``.hdf5`` (the config in the root attribute
        ``model_config``, the weights under ``model_weights/<layer name>/``).
    overwrite : bool, default True
        False raises ValueError when the file exists.

    Raises
    ------
    ValueError
        Another file name, an unbuilt model, a config that cannot be written, or an existing
        file with ``overwrite=False``.  Nothing is left behind when writing fails.

    Notes
    -----
    Keras 3 loads both kinds (``keras.models.load_model``).  The compile state (optimizer,
    loss, metrics) is written when the model is compiled; optimizer variables are not.
    """
    owner = "save_model"
    path = _path_of(owner, filepath)
    lower = path.lower()
    if lower.endswith(".keras"):
        _save_keras(owner, model, path, overwrite)
    elif lower.endswith((".h5", ".hdf5")):
        _save_legacy_h5(owner, model, path, overwrite)
    else:
        raise ValueError(f"{owner}: the file name must end in '.keras' (or '.h5' for the "
                         f"legacy format), received {path!r}")


def _save_keras(owner, model, path, overwrite):
    from mixedcore import __version__
    config_json = _dumps(owner, _model_dict(owner, model))
    metadata_json = json.dumps({
        "keras_version": _KERAS_FORMAT_VERSION, "mixedcore_version": __version__,
        "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")})
    h5py = _h5py()
    with _atomic_write(owner, path, overwrite) as tmp:
        weights_tmp = tmp + ".weights"
        try:
            with h5py.File(weights_tmp, "w") as h5:
                _write_structured(model, h5)
            with open(tmp, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as zf:
                zf.writestr(zipfile.ZipInfo(_METADATA), metadata_json)
                zf.writestr(zipfile.ZipInfo(_CONFIG), config_json)
                zf.write(weights_tmp, _WEIGHTS_H5)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(weights_tmp)


def _save_legacy_h5(owner, model, path, overwrite):
    from mixedcore import __version__
    config_json = _dumps(owner, _model_dict(owner, model, legacy=True))
    training = _legacy_training_config(model)
    training_json = _dumps(owner, training) if training is not None else None
    h5py = _h5py()
    with _atomic_write(owner, path, overwrite) as tmp:
        with h5py.File(tmp, "w") as h5:
            h5.attrs["backend"] = "mixedcore"
            h5.attrs["keras_version"] = _KERAS_FORMAT_VERSION
            h5.attrs["mixedcore_version"] = __version__
            h5.attrs["model_config"] = config_json.encode("utf-8")
            if training_json is not None:
                h5.attrs["training_config"] = training_json.encode("utf-8")
            _write_legacy_weights(model, h5.create_group("model_weights"))


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True, dtype_policy=None):
    """Read a model from a Keras file.

    Parameters
    ----------
    filepath : str or os.PathLike
        A ``.keras`` archive written by Keras 3 or mixedcore (weights in model.weights.h5, or
        Keras's model.weights.npz variant), or a legacy ``.h5`` model written by tf.keras 2.x,
        Keras 3 (``model.save("m.h5")``) or mixedcore.  The kind is read from the content.
    custom_objects : dict, optional
        Maps class names (or Keras registered names such as "MyPackage>MyLayer") to your own
        layer or model classes.
    compile : bool, default True
        Restore the optimizer, loss and metrics from the file's compile config when mixedcore
        has them; else the model is returned uncompiled with a warning.  Optimizer variables
        are not restored.
    safe_mode : bool, default True
        Accepted for Keras compatibility: mixedcore never runs code from a file (no lambdas,
        pickles only through a whitelist of array types), whatever its value.
    dtype_policy : str, DTypePolicy or dict, optional
        A floating policy that replaces the model's policy, e.g. serve a model trained under
        mixed_float16 in "mixed_bfloat16" or "float32".  It replaces the policy of the layers
        stored with the model's policy (the one most layers carry) or with none, and the
        model's own; layers stored with another policy (a float32 softmax closing a mixed
        model) keep theirs, as do Input layers.  Weights take the new variable dtype (float32
        under the mixed policies).

    Returns
    -------
    models.Sequential or models.Model

    Raises
    ------
    ValueError
        A missing, corrupt, truncated or wrong kind of file, an unknown layer class (the message
        names it, the file and the classes mixedcore has), missing weights or weights that do not
        fit the model.  The message names the file.
    """
    owner = "load_model"
    path = _path_of(owner, filepath)
    custom = _check_custom_objects(owner, custom_objects)
    policy = _as_policy(owner, dtype_policy)
    if not isinstance(compile, (bool, np.bool_)):
        raise TypeError(f"{owner}: compile must be a bool, got {compile!r}")
    if not isinstance(safe_mode, (bool, np.bool_)):
        raise TypeError(f"{owner}: safe_mode must be a bool, got {safe_mode!r}")
    kind = _kind(owner, path)
    if kind == "npy":
        raise _fail(owner, path, "is a .npy array, not a model file")
    if kind == "zip":
        with _Archive(owner, path) as archive:
            config = archive.json(_CONFIG)
            if config is None:
                raise _fail(owner, path, f"the zip archive has no {_CONFIG}, so it is not a "
                                         f"Keras model (a .npz of weights? use "
                                         f"model.load_weights)")
            model = _model_from_dict(owner, path, config, custom, policy)
            store = archive.weights_store()
            try:
                _load_structured(owner, path, model, store, skip_mismatch=False)
            finally:
                store.close()
        if compile and config.get("compile_config"):
            _restore_compile(owner, path, model, config["compile_config"], legacy=False)
        return model
    h5 = _open_h5(owner, path, path)
    with h5:
        raw = h5.attrs.get("model_config") if "model_config" in h5.attrs else None
        if raw is None:
            what = ("a weights file (Keras 3 layout)" if "layers" in h5 or "vars" in h5 else
                    "a weights file" if _legacy_weights_group(owner, path, h5) is not None
                    else "an HDF5 file without a model")
            raise _fail(owner, path, f"has no model_config attribute: it is {what}; build the "
                                     f"model and call model.load_weights({path!r})")
        try:
            config = json.loads(_text(raw))
        except (UnicodeDecodeError, ValueError) as exc:
            raise _fail(owner, path, f"its model_config is not valid JSON ({exc})") from None
        model = _model_from_dict(owner, path, config, custom, policy)
        group = _legacy_weights_group(owner, path, h5)
        if group is None:
            if model.weights:
                raise _fail(owner, path, "the file has no model_weights group: the weights are "
                                         "missing")
        else:
            _load_legacy(owner, path, model, group, skip_mismatch=False, by_name_only=True)
        training = h5.attrs.get("training_config") if "training_config" in h5.attrs else None
        training = _text(training) if training is not None else None
    if compile and training:
        try:
            training = json.loads(training)
        except ValueError:
            warnings.warn(f"{owner}: {path}: its training_config is not valid JSON; the model "
                          f"is loaded uncompiled", stacklevel=2)
            return model
        _restore_compile(owner, path, model, training, legacy=True)
    return model


def save_weights(model, filepath, overwrite=True):
    """Write the model's weights.

    Parameters
    ----------
    model : models.Sequential or models.Model
    filepath : str or os.PathLike
        ``*.weights.h5``: Keras 3's layout (``layers/<class>[_n]/vars/<i>``), which Keras's
        ``model.load_weights`` reads; ``*.h5`` / ``*.hdf5``: the legacy layout of tf.keras
        (``layer_names``, ``weight_names``); ``*.npz``: arrays in ``get_weights()`` order with
        their names.
    overwrite : bool, default True

    Raises
    ------
    ValueError
        Another file name, an unbuilt model, or an existing file with ``overwrite=False``.
    """
    owner = "save_weights"
    path = _path_of(owner, filepath)
    if not getattr(model, "built", True):
        raise ValueError(f"{owner}: the model is not built yet")
    lower = path.lower()
    h5py = _h5py()
    if lower.endswith(".weights.h5"):
        with _atomic_write(owner, path, overwrite) as tmp:
            with h5py.File(tmp, "w") as h5:
                _write_structured(model, h5)
    elif lower.endswith((".h5", ".hdf5")):
        with _atomic_write(owner, path, overwrite) as tmp:
            with h5py.File(tmp, "w") as h5:
                _write_legacy_weights(model, h5)
    elif lower.endswith(".npz"):
        arrays = {f"w{k:04d}": w for k, w in enumerate(model.get_weights())}
        names = [name for name, _ in model._weight_specs()] if hasattr(
            model, "_weight_specs") else [f"w{k}" for k in range(len(arrays))]
        with _atomic_write(owner, path, overwrite) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, __names__=np.array(names, dtype=str), **arrays)
    else:
        raise ValueError(f"{owner}: the file name must end in '.weights.h5' (Keras 3), '.h5' "
                         f"(legacy) or '.npz', received {path!r}")


def load_weights(model, filepath, skip_mismatch=False):
    """Read weights into a built model.

    Parameters
    ----------
    model : models.Sequential or models.Model
    filepath : str or os.PathLike
        A ``.weights.h5`` file (Keras 3), a ``.keras`` archive (its weights), a legacy ``.h5``
        (a tf.keras weights file, or the weights of a legacy model file), or a ``.npz`` (what
        ``save_weights`` writes, or ``np.savez(path, *keras_model.get_weights())``).
    skip_mismatch : bool, default False
        Skip (with a warning) the layers whose weights do not fit, instead of raising.

    Raises
    ------
    ValueError
        A missing, corrupt or wrong kind of file, or weights that do not fit the model (the
        message lists them); nothing is changed then.
    """
    owner = "load_weights"
    path = _path_of(owner, filepath)
    if not getattr(model, "built", True):
        raise ValueError(f"{owner}: the model is not built yet; start it with Input(shape=...) "
                         f"or call build() first")
    kind = _kind(owner, path)
    if kind == "npy":
        raise _fail(owner, path, "is a single .npy array; save weights with np.savez")
    if kind == "zip":
        with _Archive(owner, path) as archive:
            if _CONFIG in archive.names or _WEIGHTS_H5 in archive.names or \
                    _WEIGHTS_NPZ in archive.names:
                store = archive.weights_store()
                try:
                    _load_structured(owner, path, model, store, skip_mismatch)
                finally:
                    store.close()
                return
        _load_npz(owner, path, model)
        return
    with _open_h5(owner, path, path) as h5:
        if "layers" in h5 or "vars" in h5:
            _load_structured(owner, path, model, _H5Store(owner, path, h5), skip_mismatch)
            return
        group = _legacy_weights_group(owner, path, h5)
        if group is None:
            raise _fail(owner, path, "holds no weights in a layout mixedcore knows (neither "
                                     "Keras 3's layers/.../vars nor tf.keras's layer_names)")
        _load_legacy(owner, path, model, group, skip_mismatch, by_name_only=False)


def _load_npz(owner, path, model):
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise _fail(owner, path, f"cannot be read as a .npz file ({exc})") from None
    try:
        with data:
            ours = [k for k in data.files if k.startswith("w") and k[1:].isdigit()]
            plain = [k for k in data.files if k.startswith("arr_") and k[4:].isdigit()]
            keys = sorted(ours, key=lambda k: int(k[1:])) if ours else \
                sorted(plain, key=lambda k: int(k[4:]))
            if not keys:
                raise _fail(owner, path, f"holds no weight arrays (keys {data.files[:8]})")
            arrays = [data[k] for k in keys]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith(owner):
            raise
        raise _fail(owner, path, f"cannot be read as a .npz file ({exc})") from None
    try:
        model.set_weights(arrays)
    except ValueError as exc:
        raise _fail(owner, path, str(exc)) from None


def model_to_json(model, **kwargs):
    """The model's architecture (and compile config) as a JSON string, Keras's ``to_json``;
    ``kwargs`` go to ``json.dumps``."""
    return _dumps("to_json", _model_dict("to_json", model), **kwargs)


def model_from_json(json_string, custom_objects=None):
    """A new model from :func:`model_to_json` output or Keras's ``model.to_json()`` (Keras 3 or
    tf.keras 2.x); compiled when the JSON holds a compile config mixedcore can follow.

    Raises
    ------
    ValueError
        Invalid JSON, an unknown class, or a config that cannot be rebuilt.
    """
    owner = "model_from_json"
    if not isinstance(json_string, (str, bytes)):
        raise TypeError(f"{owner}: expected a JSON string, got {type(json_string).__name__}")
    try:
        config = json.loads(json_string)
    except ValueError as exc:
        raise ValueError(f"{owner}: not valid JSON ({exc})") from None
    custom = _check_custom_objects(owner, custom_objects)
    model = _model_from_dict(owner, "the JSON string", config, custom, None)
    if isinstance(config, dict) and config.get("compile_config"):
        _restore_compile(owner, "the JSON string", model, config["compile_config"], legacy=False)
    return model
