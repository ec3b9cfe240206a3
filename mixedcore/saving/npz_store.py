"""The npz store: Keras's ``model.weights.npz`` variant of the ``.keras`` archive, and plain
``.npz`` weight files.

``model.weights.npz`` holds one member per layer path, each a 0-d object array whose pickle is
a dict of Keras variables (under the torch backend each variable's value is a torch tensor,
pickled as torch's legacy storage bytes).  Reading one trusts nothing in it:

  A. Only the members of the paths the model has are read, each when its path is asked for,
     and a member may be no larger than the model's variables there need (8 bytes an element,
     plus room for the pickle's bookkeeping), so the file cannot make the reader inflate more
     than a small multiple of the model's weights.  Members of other paths are only looked at
     when they are small enough to be empty.
  B. Before a pickle is run, its opcodes are listed (``pickletools.genops``, which reads nothing
     a length does not cover): only opcodes that build data, name a global or call one are
     allowed, their number is bounded by the member's variables, every length field must fit
     in the member and memo indices must come in order (the C unpickler sizes its memo by the
     largest index it is given).
  C. A global may only be one of a few names (numpy's array reconstruction, ``numpy.dtype``,
     Keras's variable, torch's tensor rebuilding, storage types, ``collections.OrderedDict``),
     each mapped to an object of this module: a wrapper that cannot be given state or items,
     or a marker usable only as an argument.  No numpy or torch function runs on the pickle's
     arguments, no object of numpy's or another module's can be reached, and a BUILD (state)
     is accepted only by the objects made for it (an array holder, a dtype holder, a variable).
  D. Every array is checked before it exists: a reconstructed array's shape must match the
     bytes given for it; a torch storage must hold the elements it declares; a tensor's strides
     must be positive and non-overlapping within its storage; and all that a pickle materialises
     is bounded by twice the member's size (a storage named twice through the memo counts
     twice).

A plain ``.npz`` is read by ``npy_reader``: every member's header is compared with the model's
weights (count and shapes) before any data are inflated.
"""
import functools
import io
import math
import pickle
import pickletools
import struct
import zipfile

import ml_dtypes
import numpy as np

from mixedcore._dtypes import BF16 as _BF16
from mixedcore.saving.file_utils import _EXPANSION_FLOOR, _MAX_EXPANSION, _Array, _fail
from mixedcore.saving.npy_reader import NpzReader

# What a member may hold beyond its variables' elements: the npy header and the pickle's
# names, shapes and attributes (about 1.5 KiB a variable in Keras's files).
_MEMBER_OVERHEAD = 4096
_VARIABLE_OVERHEAD = 8192
# A member of a path the model does not have is read only when it is this small (an empty dict
# of variables takes about 300 bytes); a larger one is taken to hold weights.
_EMPTY_MEMBER = 1024
# Opcodes a pickle may run, per variable expected (Keras's take about 120) and in all when the
# model's needs are not known.
_OPS_PER_VARIABLE = 2048
_MAX_OPS = 1 << 20
_MAX_DIMS = 32

_DATA_OPS = frozenset("""
    PROTO FRAME STOP MARK POP POP_MARK DUP
    NONE NEWTRUE NEWFALSE INT BININT BININT1 BININT2 LONG LONG1 LONG4 FLOAT BINFLOAT
    UNICODE SHORT_BINUNICODE BINUNICODE BINUNICODE8 SHORT_BINBYTES BINBYTES BINBYTES8
    BYTEARRAY8 EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_LIST LIST APPEND APPENDS
    EMPTY_DICT DICT SETITEM SETITEMS EMPTY_SET ADDITEMS FROZENSET
    GET BINGET LONG_BINGET PUT BINPUT LONG_BINPUT MEMOIZE
    GLOBAL STACK_GLOBAL REDUCE BUILD NEWOBJ
""".split())
_PUT_OPS = frozenset(("PUT", "BINPUT", "LONG_BINPUT"))


def _scan(f, max_ops, persistent=False):
    """Check the pickle at ``f``'s position (rule B of the module notes) and return to it."""
    start, ops, memo = f.tell(), 0, 0
    allowed = _DATA_OPS | ({"BINPERSID"} if persistent else frozenset())
    try:
        for opcode, arg, _ in pickletools.genops(f):
            ops += 1
            if ops > max_ops:
                raise pickle.UnpicklingError(f"a pickle of more than {max_ops} opcodes")
            if opcode.name not in allowed:
                raise pickle.UnpicklingError(f"a pickle using the opcode {opcode.name}, which "
                                             f"a weights file does not need")
            if opcode.name in _PUT_OPS:
                if not isinstance(arg, int) or not 0 <= arg <= memo:
                    raise pickle.UnpicklingError(f"a pickle storing memo entry {arg} after "
                                                 f"{memo} entries")
                memo += arg == memo
            elif opcode.name == "MEMOIZE":
                memo += 1
    except (ValueError, EOFError, struct.error, UnicodeDecodeError, OverflowError,
            MemoryError) as exc:
        raise pickle.UnpicklingError(f"a malformed pickle ({exc})") from None
    end = f.tell()
    f.seek(start)
    return end


def _load_pickle(f, unpickler, max_ops, persistent=False):
    end = _scan(f, max_ops, persistent)
    value = unpickler.load()
    if f.tell() != end:
        raise pickle.UnpicklingError("a pickle that does not end where its opcodes do")
    return value


class _Budget:
    """What the pickles of one member may materialise, in bytes."""

    def __init__(self, limit):
        self.limit, self.used = limit, 0

    def charge(self, nbytes, what):
        self.used += nbytes
        if self.used > self.limit:
            raise pickle.UnpicklingError(f"{what} brings what the pickle materialises to "
                                         f"{self.used} bytes, more than the {self.limit} its "
                                         f"member can hold")


class _Sealed:
    """An object a pickle can get but not change: no state, items, appends or attributes."""
    __slots__ = ()

    def __setstate__(self, state):
        raise pickle.UnpicklingError(f"a pickle setting the state of {self!r}")


class _Marker(_Sealed):
    """A global usable only as an argument (``numpy.ndarray`` for ``_reconstruct``, a dtype
    class for ``numpy.dtype``, a torch storage type for a storage's persistent id)."""
    __slots__ = ("name", "dtype")

    def __init__(self, name, dtype=None):
        self.name, self.dtype = name, dtype

    def __repr__(self):
        return self.name

    def __call__(self, *args):
        raise pickle.UnpicklingError(f"a pickle calling {self.name}, which a weights file may "
                                     f"only name as an argument")


class _Global(_Sealed):
    """A whitelisted callable global, bound to the budget of the pickle that named it."""
    __slots__ = ("name", "_fn")

    def __init__(self, name, fn):
        self.name, self._fn = name, fn

    def __repr__(self):
        return self.name

    def __call__(self, *args):
        return self._fn(*args)


def _ints(value, what, allow_negative=False):
    if not isinstance(value, tuple) or len(value) > _MAX_DIMS or \
            not all(type(v) is int and (allow_negative or v >= 0) for v in value):
        raise pickle.UnpicklingError(f"{what} must be a tuple of at most {_MAX_DIMS} "
                                     f"non-negative ints, got a {type(value).__name__}")
    return value


class _DType(_Sealed):
    """What ``numpy.dtype(name, align, copy)`` becomes: a numeric, bool or object dtype whose
    state may set its byte order and nothing else."""
    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype

    def __repr__(self):
        return f"dtype {self.dtype}"

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) in (8, 9) and state[0] == 3 and
                state[1] in ("<", ">", "|", "=") and state[2:5] == (None, None, None)):
            raise pickle.UnpicklingError("a dtype state with fields, a sub-array or an unknown "
                                         "layout")
        if state[1] == ">" and self.dtype.itemsize > 1:
            self.dtype = self.dtype.newbyteorder(">")


def _dtype(name, *flags):
    if isinstance(name, _Marker) and name.dtype is not None:
        dtype = name.dtype
    elif isinstance(name, str) and len(name) <= 16:
        try:
            dtype = np.dtype(name)
        except (TypeError, ValueError):
            raise pickle.UnpicklingError(f"an unknown dtype {name!r}") from None
    else:
        raise pickle.UnpicklingError(f"a dtype named by a {type(name).__name__}")
    if not (dtype.kind in "biufO" or dtype == _BF16) or dtype.fields is not None or \
            dtype.subdtype is not None:
        raise pickle.UnpicklingError(f"the dtype {dtype}, which a weight does not have")
    return _DType(dtype)


class _ArrayState(_Sealed):
    """What ``_reconstruct(numpy.ndarray, (0,), b'b')`` becomes: an array holder whose state
    (version, shape, dtype, Fortran order, data) is checked before the array exists."""
    __slots__ = ("budget", "array", "objects")

    def __init__(self, budget):
        self.budget, self.array, self.objects = budget, None, None

    def __repr__(self):
        return "an array"

    def __setstate__(self, state):
        if self.array is not None or self.objects is not None:
            raise pickle.UnpicklingError("a pickle setting an array's state twice")
        if not (isinstance(state, tuple) and len(state) == 5 and state[0] == 1 and
                isinstance(state[2], _DType) and type(state[3]) is bool):
            raise pickle.UnpicklingError("an array state that is not (1, shape, dtype, order, "
                                         "data)")
        shape, dtype, data = _ints(state[1], "an array's shape"), state[2].dtype, state[4]
        count = math.prod(shape)
        if dtype.hasobject:
            if shape != () or not isinstance(data, list) or len(data) != 1:
                raise pickle.UnpicklingError(f"an object array of shape {shape}: only the "
                                             f"0-d holder of a dict is read")
            self.objects = data
            return
        if not isinstance(data, (bytes, bytearray)) or len(data) != count * dtype.itemsize:
            size = len(data) if isinstance(data, (bytes, bytearray)) else type(data).__name__
            raise pickle.UnpicklingError(f"a {dtype} array of shape {shape} given {size} "
                                         f"bytes of data")
        self.budget.charge(count * dtype.itemsize, f"a {dtype} array of shape {shape}")
        flat = np.frombuffer(data, dtype=dtype) if count else np.empty(0, dtype)
        self.array = flat.reshape(shape, order="F" if state[3] else "C")

    def value(self):
        if self.objects is not None:
            return self.objects[0]
        if self.array is None:
            raise pickle.UnpicklingError("an array without its state")
        return _native(self.array)


def _native(array):
    return array.astype(array.dtype.newbyteorder("=")) if array.dtype.byteorder == ">" else array


def _reconstruct(budget, cls, shape, typecode):
    if not (isinstance(cls, _Marker) and cls.name == "numpy.ndarray" and shape == (0,) and
            typecode == b"b"):
        raise pickle.UnpicklingError("an array reconstructed otherwise than numpy pickles one")
    return _ArrayState(budget)


def _scalar(budget, dtype, data):
    if not isinstance(dtype, _DType) or dtype.dtype.hasobject or \
            not isinstance(data, bytes) or len(data) != dtype.dtype.itemsize:
        raise pickle.UnpicklingError("a numpy scalar that is not a number of its dtype's size")
    budget.charge(len(data), "a scalar")
    holder = _ArrayState(budget)
    holder.array = np.frombuffer(data, dtype=dtype.dtype).reshape(())
    return holder


class _PickledVariable:
    """What a pickled Keras variable becomes: its state, of which ``_value`` is used."""
    __slots__ = ("state",)

    def __init__(self, *args, **kwargs):
        self.state = {}

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and \
                all(s is None or isinstance(s, dict) for s in state):    # (dict, slots) form
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"a Keras variable whose state is a "
                                         f"{type(state).__name__}")
        self.state = state


_TORCH_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": _BF16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}
_TORCH_MAGIC = 0x1950A86A20F9469CFC6C
_TORCH_PROTOCOL = 1001


class _Holding(_Sealed):
    """A sealed holder of one array; its kind names it in errors."""
    __slots__ = ("array",)
    kind = ""

    def __init__(self, array):
        self.array = array

    def __repr__(self):
        return f"a {self.kind}"


class _Storage(_Holding):
    """A torch storage read from its bytes: a 1-d array."""
    __slots__ = ()
    kind = "storage"


class _Tensor(_Holding):
    """A torch tensor rebuilt from its storage."""
    __slots__ = ()
    kind = "tensor"


def _rebuild_tensor(budget, storage, offset, size, stride, *rest):
    """A torch tensor from its storage, offset, size and stride, all checked: positive strides
    whose elements do not overlap, within the storage (rule D)."""
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("a tensor without a storage")
    size = _ints(size, "a tensor's size")
    stride = _ints(stride, "a tensor's stride", allow_negative=True)
    if type(offset) is not int or offset < 0 or len(size) != len(stride):
        raise pickle.UnpicklingError(f"a tensor of size {size}, stride {stride}, offset "
                                     f"{offset!r}")
    array = storage.array
    count = math.prod(size)
    if count == 0:
        return _Tensor(np.zeros(size, array.dtype))
    spans = sorted((s, n) for n, s in zip(size, stride) if n > 1)
    reach = 1
    for s, n in spans:
        if s < reach:
            raise pickle.UnpicklingError(f"a tensor of size {size} with stride {stride}: "
                                         f"zero, negative or overlapping strides are refused")
        reach = s * n
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= array.size:
        raise pickle.UnpicklingError(f"a tensor of size {size}, stride {stride} and offset "
                                     f"{offset} reaches element {last} of a storage of "
                                     f"{array.size}")
    budget.charge(count * array.dtype.itemsize, f"a tensor of size {size}")
    item = array.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(array[offset:], shape=size,
                                           strides=tuple(s * item for s in stride),
                                           writeable=False)
    return _Tensor(np.array(view))


def _rebuild_parameter(budget, data, *rest):
    if not isinstance(data, _Tensor):
        raise pickle.UnpicklingError("a parameter without a tensor")
    return data


def _ordered_dict(budget, *args):
    if args and not (len(args) == 1 and isinstance(args[0], list) and
                     all(isinstance(p, tuple) and len(p) == 2 for p in args[0])):
        raise pickle.UnpicklingError("an OrderedDict made from something else than pairs")
    return dict(*args)


class _TorchStorageRef:
    """A storage named by a torch pickle; its data follow the pickle."""

    def __init__(self, dtype, numel):
        self.dtype, self.numel, self.array = dtype, numel, None


def _torch_class(module, name):
    """The globals of torch's storage pickles: storage types only."""
    if module == "torch" and name in _TORCH_STORAGE_DTYPES:
        return _Marker(f"torch.{name}", np.dtype(_TORCH_STORAGE_DTYPES[name]))
    raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name} in a torch storage")


class _PlainUnpickler(pickle.Unpickler):
    """The small pickles around a torch storage (magic number, protocol, system information,
    storage keys): no globals at all."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name} in a torch storage")


class _TorchUnpickler(pickle.Unpickler):
    """The object pickle of torch's (non-zip) serialization: storages are persistent ids
    ``("storage", type, key, location, numel, view)``."""

    def __init__(self, fileobj):
        super().__init__(fileobj)
        self.storages = {}

    def find_class(self, module, name):
        return _torch_class(module, name)

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 6 and pid[0] == "storage" and
                isinstance(pid[1], _Marker) and pid[1].dtype is not None and
                isinstance(pid[2], str) and type(pid[4]) is int and pid[4] >= 0 and
                pid[5] is None):
            raise pickle.UnpicklingError("a persistent id that is not a plain torch storage")
        return self.storages.setdefault(pid[2], _TorchStorageRef(pid[1].dtype, pid[4]))


def _load_torch_bytes(budget, data):
    """What torch pickled a storage as (``torch.storage._load_from_bytes``'s argument: torch's
    serialization without zip): magic number, protocol, system info, the object's pickle with
    storages as persistent ids, the list of storage keys, then each storage's data (an int64
    element count and the elements).  Returns the storage."""
    if not isinstance(data, bytes):
        raise pickle.UnpicklingError(f"a torch storage given a {type(data).__name__}")
    f = io.BytesIO(data)
    if _load_pickle(f, _PlainUnpickler(f), 64) != _TORCH_MAGIC:
        raise pickle.UnpicklingError("a torch blob without torch's magic number")
    if _load_pickle(f, _PlainUnpickler(f), 64) != _TORCH_PROTOCOL:
        raise pickle.UnpicklingError("a torch blob of an unknown protocol version")
    info = _load_pickle(f, _PlainUnpickler(f), 256)
    if not isinstance(info, dict) or info.get("little_endian") is not True:
        raise pickle.UnpicklingError("a torch blob written on a big-endian machine")
    unpickler = _TorchUnpickler(f)
    result = _load_pickle(f, unpickler, 256, persistent=True)
    keys = _load_pickle(f, _PlainUnpickler(f), 256)
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or \
            len(set(keys)) != len(keys):
        raise pickle.UnpicklingError("a torch blob without its list of storages")
    for key in keys:
        storage = unpickler.storages.get(key)
        if storage is None:
            raise pickle.UnpicklingError("a torch blob lists a storage it never uses")
        header = f.read(8)
        if len(header) != 8:
            raise pickle.UnpicklingError("a torch blob cut short")
        count = struct.unpack("<q", header)[0]
        size = count * storage.dtype.itemsize
        if count != storage.numel or size > len(data) - f.tell():
            raise pickle.UnpicklingError(f"a storage of {count} elements, {storage.numel} "
                                         f"declared, in a blob with {len(data) - f.tell()} "
                                         f"bytes left")
        budget.charge(size, f"a storage of {count} elements")
        storage.array = np.frombuffer(f.read(size), dtype=storage.dtype)
    if not isinstance(result, _TorchStorageRef) or result.array is None:
        raise pickle.UnpicklingError("a torch blob that is not one storage with its data")
    return _Storage(result.array)


_CALLABLES = {
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "scalar"): _scalar,
    ("numpy.core.multiarray", "scalar"): _scalar,
    ("numpy", "dtype"): lambda budget, *args: _dtype(*args),
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch.storage", "_load_from_bytes"): _load_torch_bytes,
}


class _RestrictedUnpickler(pickle.Unpickler):
    """A member's pickle: the globals of rule C, bound to the member's budget."""

    def __init__(self, fileobj, budget):
        super().__init__(fileobj)
        self.budget = budget

    def find_class(self, module, name):
        fn = _CALLABLES.get((module, name))
        if fn is not None:
            return _Global(f"{module}.{name}", functools.partial(fn, self.budget))
        if module == "numpy" and name == "ndarray":
            return _Marker("numpy.ndarray")
        if module == "ml_dtypes" and name == "bfloat16":
            return _Marker("ml_dtypes.bfloat16", np.dtype(ml_dtypes.bfloat16))
        if (module == "keras" or module.startswith("keras.")) and \
                name in ("Variable", "KerasVariable"):
            return _PickledVariable
        raise pickle.UnpicklingError(f"refusing to unpickle {module[:80]}.{name[:80]}")


def _as_weight(value):
    if isinstance(value, _PickledVariable):
        value = value.state.get("_value")
    if isinstance(value, _Tensor):
        array = value.array
    elif isinstance(value, _ArrayState) and value.objects is None:
        array = value.value()
    else:
        raise pickle.UnpicklingError(f"a variable holding {type(value).__name__}")
    if not (array.dtype.kind in "biuf" or array.dtype == _BF16):
        raise pickle.UnpicklingError(f"a variable holding {array.dtype} data")
    return array


class _NpzStore:
    """Keras's ``model.weights.npz``: one member per path, each a pickled dict of variables,
    read when its path is asked for (rule A of the module notes)."""

    def __init__(self, owner, source, fileobj):
        self.owner, self.source = owner, source
        try:
            self.zip = zipfile.ZipFile(fileobj)
            names = self.zip.namelist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError,
                struct.error) as exc:
            raise _fail(owner, source, f"not a readable .npz ({exc})") from None
        if len(set(names)) != len(names):
            raise _fail(owner, source, "holds members of one name more than once")
        self.members = {n[:-4]: n for n in names if n.endswith(".npy")}
        self._needs = None
        self._counts = {}

    def expect(self, needs):
        """The model's variables by path, ``{path: [shape, ...]}``: a member may hold only
        what they need (rule A)."""
        self._needs = {path: [tuple(s) for s in shapes] for path, shapes in needs.items()}

    def _limits(self, path):
        """(largest member size, most pickle opcodes) allowed at ``path``."""
        if self._needs is None:
            return None, _MAX_OPS
        shapes = self._needs.get(path)
        if shapes is None:
            return _EMPTY_MEMBER, _OPS_PER_VARIABLE
        size = sum(8 * math.prod(s) + _VARIABLE_OVERHEAD for s in shapes) + _MEMBER_OVERHEAD
        return size, _OPS_PER_VARIABLE * (len(shapes) + 1)

    def _load(self, path):
        member = self.members[path]
        try:
            info = self.zip.getinfo(member)
        except KeyError:
            raise _fail(self.owner, self.source, f"cannot read {member}") from None
        largest, max_ops = self._limits(path)
        if largest is not None and info.file_size > largest:
            what = (f"the model's {len(self._needs[path])} variables there need at most "
                    f"{largest}" if path in self._needs else
                    f"the model has no weights there, so at most {largest} (an empty dict)")
            raise _fail(self.owner, self.source, f"{member} is {info.file_size} bytes; {what}")
        if info.file_size > _EXPANSION_FLOOR and \
                info.file_size > _MAX_EXPANSION * max(info.compress_size, 1):
            raise _fail(self.owner, self.source, f"{member} declares {info.file_size} bytes "
                                                 f"stored in {info.compress_size}: refusing a "
                                                 f"decompression bomb")
        try:
            with self.zip.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                if dtype != np.dtype(object) or shape != ():
                    raise pickle.UnpicklingError(f"a {dtype} array of shape {shape} where Keras "
                                                 f"keeps a pickled dict")
                data = f.read()
            body = io.BytesIO(data)
            holder = _load_pickle(body, _RestrictedUnpickler(body, _Budget(2 * len(data))),
                                  max_ops)
            entries = holder.value() if isinstance(holder, _ArrayState) else None
            if not isinstance(entries, dict):
                raise pickle.UnpicklingError(f"a {type(entries).__name__} instead of a dict "
                                             f"of variables")
            values = {str(k): _as_weight(v) for k, v in entries.items()}
        except (pickle.UnpicklingError, zipfile.BadZipFile, OSError, ValueError, EOFError,
                struct.error, TypeError, AttributeError, IndexError, KeyError, RecursionError,
                NotImplementedError, RuntimeError) as exc:
            raise _fail(self.owner, self.source,
                        f"cannot read {member}: {type(exc).__name__}: {str(exc)[:300]}") from None
        self._counts[path] = len(values)
        return values

    def vars(self, path):
        if path not in self.members:
            return {}
        values = self._load(path)
        return {k: _Array(f"{path}/{k}", v.shape, lambda v=v: v) for k, v in values.items()}

    def paths_with_vars(self, prefix="layers"):
        """The paths under ``prefix`` whose members hold variables; a member not read yet is
        read only when it is small enough to be empty, a larger one is taken to hold some."""
        out = []
        for path, member in self.members.items():
            if not path.startswith(prefix + "/"):
                continue
            if path not in self._counts:
                if self.zip.getinfo(member).file_size > _EMPTY_MEMBER:
                    out.append(path)
                    continue
                self._load(path)
            if self._counts[path]:
                out.append(path)
        return out

    def close(self):
        self.zip.close()


def _load_npz(owner, path, model):
    """A plain ``.npz`` of weights (``save_weights``' ``w0000``... or ``np.savez``'s
    ``arr_0``...): every header is compared with the model's weights before data are read."""
    try:
        reader = NpzReader(path)
    except ValueError as exc:
        raise _fail(owner, path, f"cannot be read as a .npz file: {exc}") from None
    with reader:
        ours = [k for k in reader.keys if k.startswith("w") and k[1:].isdigit()]
        plain = [k for k in reader.keys if k.startswith("arr_") and k[4:].isdigit()]
        keys = sorted(ours, key=lambda k: int(k[1:])) if ours else \
            sorted(plain, key=lambda k: int(k[4:]))
        if not keys:
            raise _fail(owner, path, f"holds no weight arrays (keys {reader.keys[:8]})")
        specs = model._weight_specs() if hasattr(model, "_weight_specs") else \
            [(getattr(w, "name", f"weight_{k}"), tuple(w.shape))
             for k, w in enumerate(model.weights)]
        if len(keys) != len(specs):
            listing = ", ".join(f"{n} {s}" for n, s in specs)
            raise _fail(owner, path, f"expected {len(specs)} weight arrays ({listing}), "
                                     f"received {len(keys)}")
        try:
            headers = [reader.header(k) for k in keys]
        except ValueError as exc:
            raise _fail(owner, path, str(exc)) from None
        for k, (key, header, (name, shape)) in enumerate(zip(keys, headers, specs)):
            if header.dtype.kind not in "biuf":
                raise _fail(owner, path, f"{key} holds {header.dtype} data, not numbers")
            if header.shape != tuple(shape):
                raise _fail(owner, path, f"weight {k} ({name}): {key} has shape "
                                         f"{header.shape}, expected {tuple(shape)}")
        try:
            arrays = [reader.read(k) for k in keys]
        except ValueError as exc:
            raise _fail(owner, path, str(exc)) from None
    try:
        model.set_weights(arrays)
    except (ValueError, TypeError) as exc:          # the file's arrays, not the caller's
        raise _fail(owner, path, str(exc)) from None
