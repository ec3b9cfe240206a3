"""Reading plain ``.npy`` files and ``.npz`` archives of them without trusting what they declare.

numpy's own reader allocates the array a header declares before it reads a byte of data, and a
``.npz`` member is inflated whole, however small its compressed form.  Here a header is read
first (numpy's ``read_magic`` / ``read_array_header_1_0`` / ``2_0``, which bound the header's
length) and checked before any data are read:

  A. The dtype holds no Python objects (no pickles are read) and has no fields; the shape is
     non-negative.  The data size (elements times item size, in Python integers) is then known.
  B. A ``.npz`` member's size in the archive's directory must be the header plus exactly that
     data size, and the data may not expand more than ``file_utils``' zip rule allows
     (``_MAX_EXPANSION`` past ``_EXPANSION_FLOOR``), so inflating a member never yields more than
     the array it declares and a small file cannot declare a large one.  A ``.npy`` file must
     hold the data it declares: it is memory-mapped, not read.
  C. The caller compares the declared shapes and dtypes with what it needs (a model's weights
     or inputs) before it asks for the data, which are then read into one array of exactly the
     declared size, member by member.

Every problem is a ValueError without the file's name; callers add it with their own prefix.
"""
import math
import os
import struct
import zipfile
import zlib

import numpy as np

from mixedcore.saving.file_utils import _EXPANSION_FLOOR, _MAX_EXPANSION

_CHUNK = 1 << 20
# Errors numpy's header parser and zipfile raise on malformed input.
_READ_ERRORS = (ValueError, SyntaxError, RecursionError, TypeError, EOFError, OSError,
                RuntimeError, NotImplementedError, zipfile.BadZipFile, zipfile.LargeZipFile,
                struct.error, zlib.error, KeyError)


class NpyHeader:
    """What a ``.npy`` header declares: ``shape``, ``dtype``, ``fortran`` order, ``nbytes``, and
    ``offset`` (where the data start)."""

    def __init__(self, shape, fortran, dtype, offset):
        self.shape, self.fortran, self.dtype, self.offset = shape, fortran, dtype, offset
        self.nbytes = math.prod(shape) * dtype.itemsize

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    def describe(self):
        return f"a {self.dtype} array of shape {self.shape} ({self.nbytes} bytes)"


def read_header(f):
    """The checked header of the ``.npy`` stream ``f`` (read from its start), leaving ``f`` at
    the first data byte; ValueError for anything else than a plain numeric-like array."""
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ValueError(f"a .npy of format version {version[0]}.{version[1]}, which is not "
                         f"read (1.0 and 2.0 are)")
    if dtype.hasobject:
        raise ValueError(f"an array of Python objects (dtype {dtype}), which is not read: "
                         f"it would be a pickle")
    if dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"an array of the structured dtype {dtype}, which is not read")
    if any(n < 0 for n in shape):
        raise ValueError(f"a negative dimension in the declared shape {shape}")
    return NpyHeader(tuple(shape), fortran, dtype, f.tell())


def _from_buffer(header, buffer):
    flat = np.frombuffer(buffer, dtype=header.dtype, count=header.size) if header.size else \
        np.empty(0, header.dtype)
    if header.fortran:
        return flat.reshape(header.shape[::-1]).transpose()
    return flat.reshape(header.shape)


def open_npy(path):
    """(header, array) of the ``.npy`` file ``path``: the array is a read-only memory map, after
    checking that the file holds every byte its header declares."""
    with open(path, "rb") as f:
        try:
            header = read_header(f)
        except _READ_ERRORS as exc:
            raise ValueError(f"not a readable .npy file ({exc})") from None
        size = os.fstat(f.fileno()).st_size
    if header.offset + header.nbytes > size:
        raise ValueError(f"its header declares {header.describe()} but the file holds "
                         f"{size - header.offset} bytes of data")
    if header.size == 0:
        return header, np.empty(header.shape, header.dtype, order="F" if header.fortran else "C")
    array = np.memmap(path, dtype=header.dtype, mode="r", offset=header.offset,
                      shape=header.shape, order="F" if header.fortran else "C")
    return header, array


class NpzReader:
    """A ``.npz`` archive read member by member: :meth:`header` reads and checks one member's
    header only, :meth:`read` its data (after the caller compared the header with its needs)."""

    def __init__(self, path):
        self.path = path
        try:
            self.zip = zipfile.ZipFile(path)
            infos = self.zip.infolist()
        except _READ_ERRORS as exc:
            raise ValueError(f"not a readable .npz file ({exc})") from None
        names = [info.filename for info in infos]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            self.zip.close()
            raise ValueError(f"the archive holds members of one name more than once "
                             f"({twice[:4]}), so which is meant is ambiguous")
        self.keys = [n[:-4] for n in names if n.endswith(".npy")]
        self._headers = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.zip.close()

    def header(self, key):
        """The checked header of member ``key`` (rule B of the module notes)."""
        if key in self._headers:
            return self._headers[key]
        info = self.zip.getinfo(key + ".npy")
        if info.flag_bits & 0x1:
            raise ValueError(f"{key} is encrypted")
        try:
            with self.zip.open(info) as f:
                header = read_header(f)
        except _READ_ERRORS as exc:
            raise ValueError(f"{key} is not a readable .npy member ({exc})") from None
        if info.file_size != header.offset + header.nbytes:
            raise ValueError(f"{key} declares {header.describe()} in a member of "
                             f"{info.file_size} bytes (header {header.offset} bytes): the "
                             f"sizes disagree")
        if header.nbytes > _EXPANSION_FLOOR and \
                header.nbytes > _MAX_EXPANSION * max(info.compress_size, 1):
            raise ValueError(f"{key} declares {header.describe()} stored in "
                             f"{info.compress_size} bytes: refusing a decompression bomb")
        self._headers[key] = header
        return header

    def read(self, key):
        """The array of member ``key``: exactly the bytes its checked header declares are
        inflated, into one new array, and the member's CRC is checked."""
        header = self.header(key)
        data = bytearray(header.nbytes)
        view = memoryview(data)
        try:
            with self.zip.open(key + ".npy") as f:
                f.seek(header.offset)
                done = 0
                while done < header.nbytes:
                    block = f.read(min(_CHUNK, header.nbytes - done))
                    if not block:
                        raise ValueError(f"the data end after {done} of {header.nbytes} bytes")
                    view[done:done + len(block)] = block
                    done += len(block)
                if f.read(1):
                    raise ValueError("the member holds more bytes than its header declares")
        except _READ_ERRORS as exc:
            raise ValueError(f"cannot read {key} ({exc})") from None
        return _from_buffer(header, data)
