"""Weight initializers by Keras name; values drawn in float64, then stored in the variable dtype.

Layers take an initializer argument through :func:`check` (at construction), write it into their
config with :func:`serialize` and draw their weights with :func:`initialize`, from the generator
of :mod:`mixedcore.random` unless the initializer carries its own seed.

Names and config entries are looked up in the one registry (:mod:`mixedcore.saving.
object_registration`): the user's initializers (``custom_objects``, scopes, registered ones:
classes with ``__call__(shape, dtype)`` and ``get_config``, or functions) first, then these,
whose registered object is the name of their maker below.
"""
import numpy as np

from mixedcore import random as _random
from mixedcore.saving import object_registration as _registry

__all__ = ["Initializer", "check", "get", "serialize", "deserialize", "initialize"]


def _fans(shape):
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def _variance_scaling(scale, mode, distribution):
    def init(shape, rng):
        fan_in, fan_out = _fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[mode]
        var = scale / max(1.0, n)
        if distribution == "uniform":
            limit = np.sqrt(3.0 * var)
            return rng.uniform(-limit, limit, size=shape)
        if distribution == "untruncated_normal":
            return rng.normal(0.0, np.sqrt(var), size=shape)
        # truncated normal at 2 stddev, stddev corrected as Keras does (0.8796...)
        std = np.sqrt(var) / 0.87962566103423978
        out = rng.normal(0.0, std, size=shape)
        bad = np.abs(out) > 2 * std
        while bad.any():
            out[bad] = rng.normal(0.0, std, size=int(bad.sum()))
            bad = np.abs(out) > 2 * std
        return out
    return init


def _truncated_normal(mean, stddev, shape, rng):
    out = rng.normal(mean, stddev, size=shape)
    bad = np.abs(out - mean) > 2 * stddev
    while bad.any():
        out[bad] = rng.normal(mean, stddev, size=int(bad.sum()))
        bad = np.abs(out - mean) > 2 * stddev
    return out


def _orthogonal(gain):
    def init(shape, rng):
        if len(shape) < 2:
            raise ValueError(f"the orthogonal initializer needs a shape of 2 or more dimensions, "
                             f"got {shape}")
        rows = int(np.prod(shape[:-1]))
        cols = shape[-1]
        flat = rng.normal(0.0, 1.0, size=(max(rows, cols), min(rows, cols)))
        q, r = np.linalg.qr(flat)
        q *= np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        return gain * q.reshape(shape)
    return init


def _identity(gain):
    def init(shape, rng):
        if len(shape) != 2:
            raise ValueError(f"the identity initializer needs a 2-D shape, got {shape}")
        return gain * np.eye(*shape)
    return init


# name -> (maker(**arguments) -> init(shape, rng), the arguments and their Keras defaults)
_MAKERS = {
    "zeros": (lambda: lambda shape, rng: np.zeros(shape), {}),
    "ones": (lambda: lambda shape, rng: np.ones(shape), {}),
    "constant": (lambda value: lambda shape, rng: np.full(shape, value, dtype=np.float64),
                 {"value": 0.0}),
    "glorot_uniform": (lambda: _variance_scaling(1.0, "fan_avg", "uniform"), {}),
    "glorot_normal": (lambda: _variance_scaling(1.0, "fan_avg", "normal"), {}),
    "he_uniform": (lambda: _variance_scaling(2.0, "fan_in", "uniform"), {}),
    "he_normal": (lambda: _variance_scaling(2.0, "fan_in", "normal"), {}),
    "lecun_uniform": (lambda: _variance_scaling(1.0, "fan_in", "uniform"), {}),
    "lecun_normal": (lambda: _variance_scaling(1.0, "fan_in", "normal"), {}),
    "variance_scaling": (lambda scale, mode, distribution: _variance_scaling(
        scale, mode, "normal" if distribution.startswith("truncated") or
        distribution == "normal" else distribution),
        {"scale": 1.0, "mode": "fan_in", "distribution": "truncated_normal"}),
    "random_normal": (lambda mean, stddev: lambda shape, rng: rng.normal(mean, stddev, size=shape),
                      {"mean": 0.0, "stddev": 0.05}),
    "random_uniform": (lambda minval, maxval: lambda shape, rng: rng.uniform(minval, maxval,
                                                                             size=shape),
                       {"minval": -0.05, "maxval": 0.05}),
    "truncated_normal": (lambda mean, stddev: lambda shape, rng: _truncated_normal(
        mean, stddev, shape, rng), {"mean": 0.0, "stddev": 0.05}),
    "orthogonal": (lambda gain: _orthogonal(gain), {"gain": 1.0}),
    "identity": (lambda gain: _identity(gain), {"gain": 1.0}),
}
# the initializer kind's built-in objects: each maker's name under itself, Keras's class names
# and aliases (the live registry table, name -> maker's name)
_ALIASES = _registry.builtin_table("initializer")
_ALIASES.update({name: name for name in _MAKERS})
_ALIASES.update({
    "GlorotUniform": "glorot_uniform", "GlorotNormal": "glorot_normal",
    "HeUniform": "he_uniform", "HeNormal": "he_normal", "LecunUniform": "lecun_uniform",
    "LecunNormal": "lecun_normal", "Zeros": "zeros", "Ones": "ones", "Constant": "constant",
    "VarianceScaling": "variance_scaling", "RandomNormal": "random_normal",
    "RandomUniform": "random_uniform", "TruncatedNormal": "truncated_normal",
    "Orthogonal": "orthogonal", "OrthogonalInitializer": "orthogonal", "Identity": "identity",
    "IdentityInitializer": "identity", "zero": "zeros", "one": "ones",
    "uniform": "random_uniform", "normal": "random_normal"})
_IGNORED = ("seed", "input_axes", "output_axes", "dtype")


class Initializer:
    """An initializer with arguments (``RandomNormal(stddev=0.02)`` as a Keras config gives):
    ``init(shape, dtype)`` returns float64 values; ``get_config`` is Keras's dict form."""

    def __init__(self, name, arguments, seed=None):
        self.name = name
        self.arguments = dict(arguments)
        self.seed = seed
        self._init = _MAKERS[name][0](**self.arguments)

    def values(self, shape, rng):
        return self._init(shape, rng)

    def get_config(self):
        class_name = next(k for k, v in _ALIASES.items() if v == self.name and k[0].isupper())
        config = dict(self.arguments)
        config["seed"] = self.seed
        return {"module": "keras.initializers", "class_name": class_name, "config": config,
                "registered_name": None}

    def __eq__(self, other):
        return (isinstance(other, Initializer) and other.name == self.name
                and other.arguments == self.arguments and other.seed == self.seed)

    def __repr__(self):
        return f"Initializer({self.name!r}, {self.arguments})"


def _check_arguments(owner, class_name, name, arguments, config):
    """Refuse argument values Keras would refuse (or that would fail only at build time)."""
    def bad(what):
        raise ValueError(f"{owner}: initializer {class_name!r}: {what}")
    for key in ("value", "mean", "stddev", "minval", "maxval", "scale", "gain"):
        if key in arguments:
            v = arguments[key]
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(v):
                bad(f"{key} must be a finite number, got {v!r}")
            arguments[key] = float(v)
    if arguments.get("stddev", 0.0) < 0:
        bad(f"stddev must be >= 0, got {arguments['stddev']}")
    if "minval" in arguments and arguments["minval"] > arguments["maxval"]:
        bad(f"minval {arguments['minval']} is greater than maxval {arguments['maxval']}")
    if name == "variance_scaling":
        if not arguments["scale"] > 0:
            bad(f"scale must be > 0, got {arguments['scale']}")
        if arguments["mode"] not in ("fan_in", "fan_out", "fan_avg"):
            bad(f"mode must be 'fan_in', 'fan_out' or 'fan_avg', got {arguments['mode']!r}")
        dist = arguments["distribution"]
        if not isinstance(dist, str) or dist.lower() not in ("uniform", "normal",
                                                             "truncated_normal",
                                                             "untruncated_normal"):
            bad(f"distribution must be 'uniform', 'truncated_normal' or 'untruncated_normal', "
                f"got {dist!r}")
        arguments["distribution"] = dist.lower()
    for key in ("input_axes", "output_axes"):
        if config.get(key) is not None:
            bad(f"{key}={config[key]!r} is not supported (the fans come from the last two "
                f"dimensions)")
    seed = config.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or seed < 0):
        bad(f"seed must be None or an int >= 0, got {seed!r}")


def _made(owner, found, config=None):
    """One of the user's initializers, found in the registry: a class is made from the config
    (``from_config`` when it has one), anything else is taken as it is."""
    try:
        return _registry.instantiate(found.obj, config)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{owner}: initializer {found.key!r} with {config}: {exc}") from None


def _from_dict(owner, identifier, custom_objects=None):
    class_name = identifier.get("class_name")
    found = _registry.lookup("initializer", identifier, custom_objects, builtins=False,
                             owner=owner)
    config = identifier.get("config") or {}
    if found is not None:
        return _made(owner, found, config if isinstance(config, dict) else {})
    name = _ALIASES.get(class_name, class_name)
    if name not in _MAKERS:
        raise ValueError(f"{owner}: unknown initializer {class_name!r}; known: "
                         f"{sorted(k for k in _ALIASES if k[0].isupper())}")
    if not isinstance(config, dict):
        raise ValueError(f"{owner}: the config of initializer {class_name!r} must be a dict, got "
                         f"{config!r}")
    defaults = _MAKERS[name][1]
    unknown = sorted(k for k in config if k not in defaults and k not in _IGNORED)
    if unknown:
        raise ValueError(f"{owner}: initializer {class_name!r} does not take {unknown}")
    arguments = {k: config.get(k, v) for k, v in defaults.items()}
    _check_arguments(owner, class_name, name, arguments, config)
    if not arguments and config.get("seed") is None:
        return name
    try:
        return Initializer(name, arguments, config.get("seed"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{owner}: initializer {class_name!r} with {arguments}: {exc}") from None


def check(owner, identifier, custom_objects=None):
    """Validate an initializer argument early (at layer construction): a name, a Keras config
    dict, an :class:`Initializer` or a callable(shape, dtype)."""
    if isinstance(identifier, str):
        found = _registry.lookup_name("initializer", identifier, custom_objects,
                                      builtins=False, owner=owner)
        if found is not None:
            return _made(owner, found)
        name = _ALIASES.get(identifier, identifier)
        if name not in _MAKERS:
            raise ValueError(f"{owner}: unknown initializer {identifier!r}; valid names: "
                             f"{sorted(_MAKERS)}")
        return name
    if isinstance(identifier, dict):
        return _from_dict(owner, identifier, custom_objects)
    if isinstance(identifier, Initializer) or callable(identifier):
        return identifier
    raise TypeError(f"{owner}: initializer must be a name, a config dict or a callable(shape, "
                    f"dtype), got {type(identifier).__name__}")


def get(identifier, custom_objects=None):
    """:func:`check` under the name ``initializers.get``."""
    return check("initializers.get", identifier, custom_objects)


def deserialize(config, custom_objects=None):
    """The initializer of a name or a config entry (:func:`serialize`'s, or Keras's)."""
    return check("initializers.deserialize", config, custom_objects)


def serialize(identifier):
    """What a layer's config holds for an initializer: its name or Keras's dict form (with the
    ``registered_name`` of one of the user's initializers that has a ``get_config``)."""
    if isinstance(identifier, Initializer):
        return identifier.get_config()
    if not isinstance(identifier, str) and hasattr(identifier, "get_config"):
        cls = type(identifier)
        return {"module": cls.__module__, "class_name": cls.__name__,
                "config": identifier.get_config(),
                "registered_name": _registry.get_registered_name(cls)}
    return identifier


def initialize(identifier, shape, dtype, seed=None):
    """Values of ``shape`` in ``dtype``; a callable is called as ``identifier(shape, dtype)``."""
    shape = tuple(int(d) for d in shape)
    if isinstance(identifier, str):
        maker, defaults = _MAKERS[identifier]
        values = maker(**defaults)(shape, _random.generator(seed))
    elif isinstance(identifier, Initializer):
        values = identifier.values(shape, _random.generator(identifier.seed if seed is None else seed))
    else:
        values = np.asarray(identifier(shape, dtype))
        if values.shape != shape:
            raise ValueError(f"initializer {identifier!r} returned shape {values.shape}, "
                             f"expected {shape}")
    return np.array(values, dtype=dtype, order="C")
