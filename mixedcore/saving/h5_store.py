"""The HDF5 store: reading an HDF5 file (a legacy ``.h5`` model, ``.weights.h5``, tf.keras
weights, the weights member of a ``.keras`` archive) with h5py, and writing datasets and
attributes as Keras does.

Every object read is checked to be of the file itself (no external links, no external or
virtual datasets) and of the wanted kind; datasets must hold numbers.  Keras 3's layout keeps a
layer's variables as ``<path>/vars/<i>`` datasets (:class:`_H5Store`); the legacy layout keeps
them by layer name, in the order of the ``weight_names`` attribute (:func:`_legacy_groups`).
"""
import numpy as np

from mixedcore._dtypes import BF16 as _BF16
from mixedcore.saving.file_utils import _Array, _fail

# HDF5 keeps attributes in the object header, whose limit Keras's legacy writer splits around.
_ATTR_LIMIT = 64512


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
