"""The ``.keras`` archive: a zip of config.json, metadata.json and the weights
(model.weights.h5, or Keras's model.weights.npz variant), read without extracting a stored
member and written uncompressed, as Keras writes it.

An archive is read only when each member has one unambiguous name: two entries of one name
(zipfile would read the last one, other readers the first), a name holding a NUL byte (zipfile
cuts it there, so ``config.json\0.txt`` reads as ``config.json``), or names that differ only by
a leading ``./`` or ``/`` or by backslashes are refused, as is a member whose local header names
another file than the central directory does.
"""
import contextlib
import io
import os
import shutil
import struct
import tempfile
import time
import zipfile
import zlib

from mixedcore.saving.config import _loads
from mixedcore.saving.file_utils import _EXPANSION_FLOOR, _MAX_EXPANSION, _fail
from mixedcore.saving.h5_store import _H5Store, _open_h5
from mixedcore.saving.npz_store import _NpzStore

_CONFIG = "config.json"
_METADATA = "metadata.json"
_WEIGHTS_H5 = "model.weights.h5"
_WEIGHTS_NPZ = "model.weights.npz"
_MAX_JSON_BYTES = 64 << 20


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

    def extent(self):
        """(file descriptor, start, size) of the bytes this window shows."""
        return self._f.fileno(), self._start, self._size

    def readinto(self, b):
        n = min(len(b), max(0, self._size - self._pos))
        if n == 0:
            return 0
        self._f.seek(self._start + self._pos)
        data = self._f.read(n)
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)


def _unambiguous_names(owner, path, infos):
    """The set of member names, or ValueError when two members could be taken for one another."""
    seen = {}
    for info in infos:
        name = info.orig_filename
        if "\0" in name:
            raise _fail(owner, path, f"the member name {name!r} holds a NUL byte (zip readers "
                                     f"differ on where it ends): refusing an ambiguous archive")
        key = name.replace("\\", "/")
        while key.startswith(("./", "/")):
            key = key[2:] if key.startswith("./") else key[1:]
        if key in seen:
            first = seen[key]
            what = "twice" if first == name else f"as {first!r} and {name!r}"
            raise _fail(owner, path, f"the member {key!r} is stored {what} (readers differ on "
                                     f"which one counts): refusing an ambiguous archive")
        seen[key] = name
    return set(seen.values())


class _Archive:
    """A ``.keras`` zip archive opened for reading; every zip error becomes a ValueError naming
    the file."""

    def __init__(self, owner, path):
        self.owner, self.path = owner, path
        self._cleanup = contextlib.ExitStack()
        try:
            self._file = self._cleanup.enter_context(open(path, "rb"))
            self.zip = self._cleanup.enter_context(zipfile.ZipFile(self._file))
            infos = self.zip.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError,
                struct.error) as exc:
            self._cleanup.close()
            raise _fail(owner, path, f"not a readable zip archive, the file is truncated or "
                                     f"corrupt ({exc})") from None
        try:
            self.names = _unambiguous_names(owner, path, infos)
        except BaseException:
            self._cleanup.close()
            raise

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
        return _loads(self.owner, self.path, self.read(name, _MAX_JSON_BYTES), name)

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
                local_name = self._file.read(name_len)
                if local_name not in (info.orig_filename.encode("utf-8"),
                                      info.orig_filename.encode("cp437", "replace")):
                    raise zipfile.BadZipFile(f"the local header of {name} names {local_name!r}")
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


def write_archive(path, metadata_json, config_json, weights_h5):
    """Write the archive ``path`` from the JSON texts and an open HDF5 weights file
    (``weights_h5``, a binary file read from its start)."""
    size = weights_h5.seek(0, io.SEEK_END)
    weights_h5.seek(0)
    member = zipfile.ZipInfo(_WEIGHTS_H5, date_time=time.localtime()[:6])
    member.file_size = size
    with open(path, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(zipfile.ZipInfo(_METADATA), metadata_json)
        zf.writestr(zipfile.ZipInfo(_CONFIG), config_json)
        with zf.open(member, "w") as dest:
            shutil.copyfileobj(weights_h5, dest, 1 << 20)
