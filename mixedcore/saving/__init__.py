"""Keras's files and the registry of serializable objects.

- ``saving_api``: ``save_model``, ``load_model``, ``save_weights``, ``load_weights``,
  ``model_to_json``, ``model_from_json``; the kind of a file is read from its content;
- ``object_registration``: the one registry every deserializer looks classes up in
  (``register_keras_serializable``, ``custom_object_scope``, ``custom_objects=``);
- ``file_utils`` (paths, kinds of file, atomic writes), ``archive`` (the ``.keras`` zip),
  ``h5_store`` (HDF5), ``npz_store`` (``.npz``, pickles read through a whitelist): the stores;
- ``config``: model configs (tf.keras forms, class checks, ``dtype_policy=``);
- ``weight_structure``: where Keras keeps each layer's weights in a file.

The file functions load on first use, so the lower modules can import the registry while
mixedcore itself is being imported.
"""
from mixedcore.saving.object_registration import (CustomObjectScope, custom_object_scope,
                                                  get_custom_objects, get_registered_name,
                                                  get_registered_object,
                                                  register_keras_serializable)

_API = ("save_model", "load_model", "save_weights", "load_weights", "model_to_json",
        "model_from_json")

__all__ = ["register_keras_serializable", "custom_object_scope", "CustomObjectScope",
           "get_custom_objects", "get_registered_name", "get_registered_object", *_API]


def __getattr__(name):
    if name in _API:
        from mixedcore.saving import saving_api
        return getattr(saving_api, name)
    raise AttributeError(f"module 'mixedcore.saving' has no attribute {name!r}")
