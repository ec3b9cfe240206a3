"""The one registry of the classes and functions a config can name.

Every kind of serializable object (layers, optimizers, learning-rate schedules, activations,
loss scales, dtype policies, regularizers, initializers, losses, metrics) is found here from a
serialized entry, in one order:

1. the user's objects: the ``custom_objects=`` dict of the call, then those of the enclosing
   :class:`custom_object_scope` blocks (innermost first), then the objects registered with
   :func:`register_keras_serializable` (under ``"package>Name"``);
2. the kind's built-in objects, which the module defining them registers with
   :func:`register_builtin`.

Within each, the entry's keys are tried in order: its ``registered_name``, its ``class_name``,
then the part of a ``"package>Name"`` class name after the ``>``.  A deserializer that finds
nothing raises its own error, naming what its kind knows.

This module imports nothing from mixedcore, so every module can register into it.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

__all__ = ["register_keras_serializable", "custom_object_scope", "CustomObjectScope",
           "get_custom_objects", "get_registered_name", "get_registered_object"]

# kind -> {name: object}, the objects mixedcore defines (insertion order kept for messages)
_BUILTIN: dict[str, dict[str, Any]] = {}
# "package>Name" -> object, and back, of the user's registered objects
_REGISTERED: dict[str, Any] = {}
_REGISTERED_NAMES: dict[Any, str] = {}
_scopes = threading.local()


class Found(NamedTuple):
    """What :func:`lookup` found: the object, the key it was found under, and whether it is one
    of the kind's built-in objects."""
    obj: Any
    key: str
    builtin: bool


# -- built-in objects of each kind ---------------------------------------------------------------

def register_builtin(kind: str, obj: Any, name: str | None = None) -> Any:
    """Make ``obj`` the built-in object of ``kind`` named ``name`` (its ``__name__`` by
    default); returns ``obj``."""
    _BUILTIN.setdefault(kind, {})[name or obj.__name__] = obj
    return obj


def register_builtins(kind: str, objects: Mapping[str, Any] | Iterable[Any]) -> None:
    """:func:`register_builtin` for every ``{name: object}`` of a dict, or every object of a
    list under its ``__name__``."""
    if isinstance(objects, Mapping):
        for name, obj in objects.items():
            register_builtin(kind, obj, name)
    else:
        for obj in objects:
            register_builtin(kind, obj)


def builtin_table(kind: str) -> dict[str, Any]:
    """The kind's own ``{name: object}`` of built-in objects (the live dict: a module that
    keeps it under a name of its own registers by adding to it)."""
    return _BUILTIN.setdefault(kind, {})


def builtin_objects(kind: str) -> dict[str, Any]:
    """A copy of ``{name: object}`` of the kind's built-in objects, in registration order."""
    return dict(_BUILTIN.get(kind, {}))


def is_builtin(kind: str, obj: Any, name: str | None = None) -> bool:
    """Whether ``obj`` is the kind's built-in object under ``name`` (its ``__name__``)."""
    key = name or getattr(obj, "__name__", None)
    return isinstance(key, str) and _BUILTIN.get(kind, {}).get(key) is obj


# -- the user's objects ----------------------------------------------------------------------------

def register_keras_serializable(package: str = "Custom", name: str | None = None):
    """A decorator that makes a class or function known to every deserializer and file loader
    under ``"package>name"`` (``name`` defaults to its ``__name__``), as Keras's decorator of
    the same name; serializers write that as its ``registered_name``.

    Raises
    ------
    ValueError
        A ``package`` or ``name`` that is not a str or contains ``>``, or a class without a
        ``get_config`` method.
    TypeError
        Decorating something that is neither a class nor a function.
    """
    if not isinstance(package, str) or ">" in package:
        raise ValueError(f"register_keras_serializable: package must be a str without '>', got "
                         f"{package!r}")
    if name is not None and (not isinstance(name, str) or not name or ">" in name):
        raise ValueError(f"register_keras_serializable: name must be None or a non-empty str "
                         f"without '>', got {name!r}")

    def decorator(obj):
        if not callable(obj) or not hasattr(obj, "__name__"):
            raise TypeError(f"register_keras_serializable: expected a class or a function, got "
                            f"{type(obj).__name__}: {obj!r}")
        key = f"{package}>{name or obj.__name__}"
        if isinstance(obj, type) and not hasattr(obj, "get_config"):
            raise ValueError(f"register_keras_serializable: {obj.__name__} cannot be registered "
                             f"as {key!r}: it has no get_config() method")
        _REGISTERED[key] = obj
        _REGISTERED_NAMES[obj] = key
        return obj
    return decorator


def get_registered_name(obj: Any) -> str:
    """``"package>Name"`` of a registered object, else its ``__name__``."""
    return _REGISTERED_NAMES.get(obj, getattr(obj, "__name__", type(obj).__name__))


def registered_key(obj: Any) -> str | None:
    """``"package>Name"`` of a registered object, else None."""
    return _REGISTERED_NAMES.get(obj)


def get_custom_objects() -> dict[str, Any]:
    """The global ``{"package>Name": object}`` of the registered objects (the dict itself:
    adding to it registers)."""
    return _REGISTERED


class CustomObjectScope:
    """``with custom_object_scope({"MyLayer": MyLayer}):`` makes the dicts' objects known to
    every deserialization inside the block, as the ``custom_objects=`` of each call would."""

    def __init__(self, *custom_objects: Mapping[str, Any] | None):
        self._dicts: list[dict[str, Any]] = []
        for objects in custom_objects:
            if objects is None:
                continue
            if not isinstance(objects, Mapping):
                raise TypeError(f"custom_object_scope: expected dicts of name -> object, got "
                                f"{type(objects).__name__}")
            self._dicts.append(dict(objects))

    def __enter__(self) -> "CustomObjectScope":
        stack = _scope_stack()
        merged: dict[str, Any] = {}
        for objects in self._dicts:
            merged.update(objects)
        stack.append(merged)
        return self

    def __exit__(self, *exc: Any) -> None:
        _scope_stack().pop()


custom_object_scope = CustomObjectScope


def _scope_stack() -> list[dict[str, Any]]:
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    return stack


def get_registered_object(name: str, custom_objects: Mapping[str, Any] | None = None,
                          module_objects: Mapping[str, Any] | None = None) -> Any:
    """The object ``name`` stands for among the user's objects (``custom_objects``, the
    enclosing scopes, the registered ones), then ``module_objects``; None when none has it."""
    for objects in _user_dicts(custom_objects, "get_registered_object"):
        if name in objects:
            return objects[name]
    if module_objects and name in module_objects:
        return module_objects[name]
    return None


# -- lookups -----------------------------------------------------------------------------------

def _user_dicts(custom_objects, owner):
    if custom_objects is not None and not isinstance(custom_objects, Mapping):
        raise TypeError(f"{owner}: custom_objects must be a dict of name -> object, got "
                        f"{type(custom_objects).__name__}: {custom_objects!r}")
    dicts = [custom_objects] if custom_objects else []
    dicts.extend(reversed(_scope_stack()))
    dicts.append(_REGISTERED)
    return dicts


def entry_keys(entry: Mapping[str, Any]) -> list[str]:
    """The keys a serialized entry is looked up under: its ``registered_name``, its
    ``class_name``, and the ``Name`` of a ``"package>Name"`` class name."""
    keys = []
    for key in (entry.get("registered_name"), entry.get("class_name")):
        if isinstance(key, str) and key not in keys:
            keys.append(key)
    name = entry.get("class_name")
    if isinstance(name, str) and ">" in name:
        short = name.split(">")[-1]
        if short not in keys:
            keys.append(short)
    return keys


def lookup_keys(kind: str, keys: Iterable[str | None],
                custom_objects: Mapping[str, Any] | None = None, *,
                builtins: bool = True, owner: str = "deserialize") -> Found | None:
    """The first of ``keys`` found among the user's objects, else among the kind's built-in
    objects (unless ``builtins=False``); None when none is.  A ``custom_objects`` that is not a
    mapping is a TypeError naming ``owner``."""
    names = [k for k in keys if isinstance(k, str)]
    for objects in _user_dicts(custom_objects, owner):
        for key in names:
            if key in objects:
                return Found(objects[key], key, False)
    if builtins:
        own = _BUILTIN.get(kind, {})
        for key in names:
            if key in own:
                return Found(own[key], key, True)
    return None


def lookup(kind: str, entry: Mapping[str, Any],
           custom_objects: Mapping[str, Any] | None = None, *,
           builtins: bool = True, owner: str = "deserialize") -> Found | None:
    """What a serialized entry (``{"class_name", "config", "registered_name"...}``) of ``kind``
    names; None when neither the user's objects nor the kind's built-in ones have it."""
    return lookup_keys(kind, entry_keys(entry), custom_objects, builtins=builtins, owner=owner)


def name_keys(name: str) -> list[str]:
    """The keys a name is looked up under: itself, then the ``Name`` of ``"package>Name"``."""
    short = name.split(">")[-1]
    return [name] if short == name else [name, short]


def function_keys(entry: Any) -> list[str]:
    """The keys a function (an activation, a metric) is looked up under, from a bare name or
    Keras's function entry ``{"class_name": "function", "config": name, "registered_name"}``:
    its registered name, the name, then the ``name`` of ``"package>name"``."""
    if isinstance(entry, Mapping):
        name = entry.get("config") if entry.get("class_name") == "function" else None
        keys = [entry.get("registered_name")]
    else:
        name, keys = entry, []
    if isinstance(name, str):
        keys += name_keys(name)
    return [k for k in keys if isinstance(k, str)]


def lookup_name(kind: str, name: str, custom_objects: Mapping[str, Any] | None = None, *,
                builtins: bool = True, owner: str = "deserialize") -> Found | None:
    """What a name (``"name"`` or ``"package>Name"``) of ``kind`` stands for; None when
    neither the user's objects nor (unless ``builtins=False``) the kind's built-in ones have
    it."""
    return lookup_keys(kind, name_keys(name), custom_objects, builtins=builtins, owner=owner)


def instantiate(obj: Any, config: Mapping[str, Any] | None = None) -> Any:
    """The object a found class makes: from ``config`` (through ``from_config`` when the class
    has one), or with no arguments without a config; what is not a class is returned as is."""
    if not isinstance(obj, type):
        return obj
    if config is None:
        return obj()
    return obj.from_config(config) if hasattr(obj, "from_config") else obj(**config)


def check_custom_objects(owner: str, custom_objects: Any) -> dict[str, Any]:
    """A copy of a ``custom_objects=`` argument after checking it is a dict keyed by names."""
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


def keras_snake_case(name: str) -> str:
    """Keras's ``to_snake_case`` of a class name (the weight-file key of a layer, the name of
    a metric): "Dense" -> "dense", "Conv2D" -> "conv2d", "ReLU" -> "re_lu"."""
    name = re.sub(r"\W+", "", name)
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()
