"""What every file of this package needs: errors naming the file, the path argument, the kind
of a file read from its first bytes, writing through a temporary file, the zip limits.

Every failure to read a file is a ValueError naming the file: the stores raise their own, and
:func:`_reading` turns what the file readers underneath (h5py and libhdf5, zipfile, zlib, struct)
raise on a corrupt file into one, so that a caller catches one type whatever the damage.

A file is recognised by its content, not its name: a zip archive (a ``.keras`` model, or a
``.npz`` of weights) or an HDF5 file (a legacy ``.h5`` model, ``.weights.h5``, tf.keras
weights).  The name only chooses what to write.  Files are written to a temporary file beside
the target and renamed over it once complete: a failed save leaves no partial file and an
existing file intact.
"""
import contextlib
import contextvars
import os
import secrets

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# The Keras format generation these files follow (Keras reads this field only for display).
_KERAS_FORMAT_VERSION = "3.0.0"
# A zip member that expands more than this much and past the floor is refused (a "zip bomb").
_MAX_EXPANSION = 100
_EXPANSION_FLOOR = 256 << 20


# Files that need not be checked again before libhdf5 reads them (h5_store): those this process
# wrote, and parts of files (start, size) it checked, by identity (device, inode, size,
# modification and change times: a file changed since no longer matches).
_WRITTEN: set[tuple[int, ...]] = set()
_CHECKED: set[tuple[tuple[int, ...], int, int]] = set()


# load_model's safe_mode while it reads a file (True elsewhere, load_weights included): a
# Lambda layer is read only when it is False (config), and HDF5 files are read in a separate
# process before this one opens them when it is True (h5_store).
_SAFE_MODE = contextvars.ContextVar("mixedcore_safe_mode", default=True)


@contextlib.contextmanager
def safe_mode_scope(safe_mode):
    """Within: files are read under ``safe_mode``."""
    token = _SAFE_MODE.set(bool(safe_mode))
    try:
        yield
    finally:
        _SAFE_MODE.reset(token)


def _identity(fd):
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _fail(owner, source, what):
    return ValueError(f"{owner}: {source}: {what}")


# Where an exception raised while reading a file may come from for it to mean "this file is
# corrupt": the innermost frame of its traceback is in one of these modules (or their
# submodules): h5py, zipfile and what it calls, and numpy's .npy / .npz readers and what they
# call to parse a header.
_READERS = ("h5py", "zipfile", "struct", "zlib", "io", "_compression", "shutil",
            "numpy.lib.format", "numpy.lib._format_impl", "numpy.lib.npyio",
            "numpy.lib._npyio_impl", "tokenize", "ast")


def _raised_by_reader(exc):
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = str(tb.tb_frame.f_globals.get("__name__", ""))
    return any(module == r or module.startswith(r + ".") for r in _READERS)


@contextlib.contextmanager
def _reading(owner, path):
    """Within: an exception that the file readers raise on a damaged file (h5py's OSError,
    RuntimeError, KeyError, TypeError, NotImplementedError or ValueError, zipfile's and zlib's
    errors, struct.error, a header numpy cannot parse) becomes a ValueError naming ``owner`` and
    the file.  The library's own errors already name the file and pass through, as does an
    exception raised by code of the library itself (a bug shows as what it is) and a
    MemoryError."""
    try:
        yield
    except MemoryError:
        raise
    except ValueError as exc:
        if str(exc).startswith(f"{owner}: ") or not _raised_by_reader(exc):
            raise
        raise _fail(owner, path, f"cannot be read: the file is truncated or corrupt "
                                 f"({exc})") from None
    except Exception as exc:
        if not _raised_by_reader(exc):
            raise
        raise _fail(owner, path, f"cannot be read: the file is truncated or corrupt "
                                 f"({type(exc).__name__}: {exc})") from None


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
    with temporary_beside(path) as tmp:
        yield tmp


@contextlib.contextmanager
def temporary_beside(path):
    """Yield the path of a new, empty file beside ``path`` with a name no one could plant in
    advance (created exclusively); rename it over ``path`` when the block succeeds, remove it
    when it fails."""
    directory, base = os.path.split(os.path.abspath(path))
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
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            try:
                _WRITTEN.add(_identity(fd))
            finally:
                os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class _Array:
    """A weight in a file: its shape, and its values read on demand."""

    def __init__(self, where, shape, read):
        self.where, self.shape, self._read = where, tuple(shape), read

    def read(self):
        return self._read()
