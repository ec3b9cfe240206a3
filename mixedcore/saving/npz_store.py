"""The npz store: Keras's ``model.weights.npz`` variant of the ``.keras`` archive, and plain
``.npz`` weight files.

``model.weights.npz`` holds pickled objects (Keras pickles its backend variables into it).  They
are read by an unpickler that knows numpy arrays, Keras variables and torch tensors only and
refuses any other class, so no code from a file runs.  A plain ``.npz`` is read with
``allow_pickle=False``.
"""
import io
import pickle
import struct
import zipfile

import ml_dtypes
import numpy as np

try:
    from numpy._core import multiarray as _multiarray
except ImportError:         # numpy < 2
    from numpy.core import multiarray as _multiarray  # type: ignore[no-redef]

from mixedcore._dtypes import BF16 as _BF16
from mixedcore.saving.file_utils import _EXPANSION_FLOOR, _MAX_EXPANSION, _Array, _fail


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
    except (ValueError, TypeError) as exc:          # the file's arrays, not the caller's
        raise _fail(owner, path, str(exc)) from None
