"""Keras model and weights files: ``.keras`` archives, legacy ``.h5`` files, ``.weights.h5``.

The public functions, and the choice of format: a file is read as what its content is (a zip
archive, an HDF5 file), whatever its name; the name only chooses what to write.  The stores
(``archive``, ``h5_store``, ``npz_store``), the configs (``config``) and where each layer's
weights go (``weight_structure``) live in their own modules; the compile state is the
model's: its trainer methods ``get_compile_config``, ``get_training_config`` and
``compile_from_config`` make and read it.
"""
import datetime
import json
import os
import tempfile
import warnings

import numpy as np

from mixedcore._version import __version__
from mixedcore.layers._base import weights_from_file
from mixedcore.saving import object_registration as _registry
from mixedcore.saving.archive import (_CONFIG, _METADATA, _WEIGHTS_H5, _WEIGHTS_NPZ, _Archive,
                                      write_archive)
from mixedcore.saving.config import (_as_policy, _dumps, _initialize_pending, _keras2_checked,
                                     _loads, _model_dict, _model_from_dict, _written_by_keras2)
from mixedcore.saving.file_utils import (_KERAS_FORMAT_VERSION, _atomic_write, _fail, _kind,
                                         _path_of, _reading, safe_mode_scope)
from mixedcore.saving.h5_store import _H5Store, _h5py, _legacy_weights_group, _open_h5, _text
from mixedcore.saving.npz_store import _load_npz
from mixedcore.saving.weight_structure import (_load_legacy, _load_structured,
                                               _write_legacy_weights, _write_structured)

__all__ = ["save_model", "load_model", "save_weights", "load_weights", "model_to_json",
           "model_from_json"]


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
    config_json = _dumps(owner, _model_dict(owner, model))
    metadata_json = json.dumps({
        "keras_version": _KERAS_FORMAT_VERSION, "mixedcore_version": __version__,
        "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")})
    h5py = _h5py()
    with _atomic_write(owner, path, overwrite) as tmp:
        # the weights go through a file without a name (no one can plant a link to follow)
        with tempfile.TemporaryFile(dir=os.path.dirname(tmp)) as weights:
            with h5py.File(weights, "w") as h5:
                _write_structured(model, h5)
            write_archive(tmp, metadata_json, config_json, weights)


def _save_legacy_h5(owner, model, path, overwrite):
    config_json = _dumps(owner, _model_dict(owner, model, legacy=True))
    get_training_config = getattr(model, "get_training_config", None)
    training = get_training_config() if get_training_config is not None else None
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
        As Keras: a Lambda layer is refused unless it is False.  Even then mixedcore runs no
        code from the file: a Lambda's named function is taken from ``custom_objects`` or the
        registered objects, and a Python lambda's bytecode is refused (pickles are read only
        through a whitelist of array types).  When True, an HDF5 file (a legacy ``.h5``, the
        weights of a ``.keras``) is first read by a separate process, so that a file that
        crashes or hangs libhdf5 is refused rather than taking this process down
        (docs/security.md); False skips that for a file you trust.
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
    custom = _registry.check_custom_objects(owner, custom_objects)
    policy = _as_policy(owner, dtype_policy)
    if not isinstance(compile, (bool, np.bool_)):
        raise TypeError(f"{owner}: compile must be a bool, got {compile!r}")
    if not isinstance(safe_mode, (bool, np.bool_)):
        raise TypeError(f"{owner}: safe_mode must be a bool, got {safe_mode!r}")
    with safe_mode_scope(safe_mode), _reading(owner, path):
        return _load_model(owner, path, custom, policy, compile)


def _load_model(owner, path, custom, policy, compile):
    kind = _kind(owner, path)
    if kind == "npy":
        raise _fail(owner, path, "is a .npy array, not a model file")
    if kind == "zip":
        with _Archive(owner, path) as archive, weights_from_file():
            config = archive.json(_CONFIG)
            if config is None:
                raise _fail(owner, path, f"the zip archive has no {_CONFIG}, so it is not a "
                                         f"Keras model (a .npz of weights? use "
                                         f"model.load_weights)")
            metadata = archive.json(_METADATA)
            if isinstance(metadata, dict) and _written_by_keras2(metadata.get("keras_version")):
                config = _keras2_checked(owner, path, config)
            model = _model_from_dict(owner, path, config, custom, policy)
            store = archive.weights_store()
            try:
                _load_structured(owner, path, model, store, skip_mismatch=False, adopt=True)
            finally:
                store.close()
            _initialize_pending(model)
        if compile and config.get("compile_config"):
            _compile_from_file(owner, path, model, config["compile_config"], custom)
        return model
    h5 = _open_h5(owner, path, path)
    with h5, weights_from_file():
        raw = h5.attrs.get("model_config") if "model_config" in h5.attrs else None
        if raw is None:
            what = ("a weights file (Keras 3 layout)" if "layers" in h5 or "vars" in h5 else
                    "a weights file" if _legacy_weights_group(owner, path, h5) is not None
                    else "an HDF5 file without a model")
            raise _fail(owner, path, f"has no model_config attribute: it is {what}; build the "
                                     f"model and call model.load_weights({path!r})")
        try:
            text = _text(raw)
        except UnicodeDecodeError as exc:
            raise _fail(owner, path, f"its model_config is not valid JSON ({exc})") from None
        config = _loads(owner, path, text, "its model_config")
        version = h5.attrs.get("keras_version") if "keras_version" in h5.attrs else None
        if _written_by_keras2(version) or (
                isinstance(config, dict) and _written_by_keras2(config.get("keras_version"))):
            config = _keras2_checked(owner, path, config)
        model = _model_from_dict(owner, path, config, custom, policy)
        group = _legacy_weights_group(owner, path, h5)
        if group is None:
            if model.weights:
                raise _fail(owner, path, "the file has no model_weights group: the weights are "
                                         "missing")
        else:
            _load_legacy(owner, path, model, group, skip_mismatch=False, by_name_only=True)
        _initialize_pending(model)
        training = h5.attrs.get("training_config") if "training_config" in h5.attrs else None
        training = _text(training) if training is not None else None
    if compile and training:
        try:
            training = _loads(owner, path, training, "its training_config")
        except ValueError:
            warnings.warn(f"{owner}: {path}: its training_config is not valid JSON; the model "
                          f"is loaded uncompiled", stacklevel=2)
            return model
        _compile_from_file(owner, path, model, training, custom, legacy=True)
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

    Notes
    -----
    An HDF5 file is first read by a separate process, as ``load_model`` does in safe mode
    (docs/security.md); a file this process wrote, or checked and not changed since, is not
    checked again.
    """
    owner = "load_weights"
    path = _path_of(owner, filepath)
    if not getattr(model, "built", True):
        raise ValueError(f"{owner}: the model is not built yet; start it with Input(shape=...) "
                         f"or call build() first")
    with _reading(owner, path):
        _load_weights(owner, path, model, skip_mismatch)


def _load_weights(owner, path, model, skip_mismatch):
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
    config = _loads(owner, None, json_string)
    custom = _registry.check_custom_objects(owner, custom_objects)
    if isinstance(config, dict) and _written_by_keras2(config.get("keras_version")):
        config = _keras2_checked(owner, "the JSON string", config)
    model = _model_from_dict(owner, "the JSON string", config, custom, None)
    if isinstance(config, dict) and config.get("compile_config"):
        _compile_from_file(owner, "the JSON string", model, config["compile_config"], custom)
    return model


def _compile_from_file(owner, source, model, cfg, custom, legacy=False):
    """Compile ``model`` from the compile state a file holds, with the file's custom objects;
    state that is not a dict leaves it uncompiled, with a warning, as any other state mixedcore
    cannot rebuild does."""
    if not isinstance(cfg, dict):
        warnings.warn(f"{owner}: {source}: its {'training' if legacy else 'compile'} config is "
                      f"not a dict ({type(cfg).__name__}); the model is loaded uncompiled",
                      stacklevel=3)
        return
    with _registry.custom_object_scope(custom):
        model.compile_from_config(cfg, legacy=legacy, owner=owner, source=source, stacklevel=4)
