"""Weight initializers by Keras name; values drawn in float64, then stored in the variable dtype.

An initializer argument may be a name ("glorot_uniform", or Keras's class name "GlorotUniform"),
a Keras config dict (``{"class_name": "RandomUniform", "config": {"minval": -0.1, ...}}``, what
Keras 3 writes into a layer's config; "module" and "registered_name" are ignored), or a
callable ``(shape, dtype) -> array``.
"""
import numpy as np

from mixedcore import utils


def _fans(shape):
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def _truncated_normal(rng, mean, std, shape):
    """Normal draws, those beyond 2 standard deviations drawn again (Keras's truncation)."""
    out = rng.normal(0.0, std, size=shape)
    bad = np.abs(out) > 2 * std
    while bad.any():
        out[bad] = rng.normal(0.0, std, size=int(bad.sum()))
        bad = np.abs(out) > 2 * std
    return out + mean


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
        return _truncated_normal(rng, 0.0, np.sqrt(var) / 0.87962566103423978, shape)
    return init


def _orthogonal(gain):
    def init(shape, rng):
        if len(shape) < 2:
            raise ValueError(f"orthogonal initializer: the shape must have at least 2 "
                             f"dimensions, got {shape}")
        rows = int(np.prod(shape[:-1]))
        cols = shape[-1]
        a = rng.normal(size=(max(rows, cols), min(rows, cols)))
        q, r = np.linalg.qr(a)
        q = q * np.where(np.diag(r) < 0, -1.0, 1.0)
        if rows < cols:
            q = q.T
        return gain * q.reshape(shape)
    return init


def _identity(gain):
    def init(shape, rng):
        if len(shape) != 2:
            raise ValueError(f"identity initializer: the shape must have 2 dimensions, got "
                             f"{shape}")
        return gain * np.eye(*shape)
    return init


_INITIALIZERS = {
    "zeros": lambda shape, rng: np.zeros(shape),
    "ones": lambda shape, rng: np.ones(shape),
    "glorot_uniform": _variance_scaling(1.0, "fan_avg", "uniform"),
    "glorot_normal": _variance_scaling(1.0, "fan_avg", "normal"),
    "he_uniform": _variance_scaling(2.0, "fan_in", "uniform"),
    "he_normal": _variance_scaling(2.0, "fan_in", "normal"),
    "lecun_uniform": _variance_scaling(1.0, "fan_in", "uniform"),
    "lecun_normal": _variance_scaling(1.0, "fan_in", "normal"),
    "random_normal": lambda shape, rng: rng.normal(0.0, 0.05, size=shape),
    "random_uniform": lambda shape, rng: rng.uniform(-0.05, 0.05, size=shape),
    "truncated_normal": lambda shape, rng: _truncated_normal(rng, 0.0, 0.05, shape),
    "orthogonal": _orthogonal(1.0),
    "identity": _identity(1.0),
}
# Keras's other spellings of the same initializers
_ALIASES = {"uniform": "random_uniform", "normal": "random_normal", "Zeros": "zeros",
            "Ones": "ones", "GlorotUniform": "glorot_uniform", "GlorotNormal": "glorot_normal",
            "HeUniform": "he_uniform", "HeNormal": "he_normal", "LecunUniform": "lecun_uniform",
            "LecunNormal": "lecun_normal", "RandomNormal": "random_normal",
            "RandomUniform": "random_uniform", "TruncatedNormal": "truncated_normal",
            "Orthogonal": "orthogonal", "Identity": "identity",
            "OrthogonalInitializer": "orthogonal", "IdentityInitializer": "identity",
            "Constant": "constant", "VarianceScaling": "variance_scaling",
            "constant": "constant", "variance_scaling": "variance_scaling"}

# Keras config classes: the config keys each takes, with their defaults
_CONFIG_CLASSES = {
    "Zeros": {}, "Ones": {},
    "Constant": {"value": 0.0},
    "RandomNormal": {"mean": 0.0, "stddev": 0.05, "seed": None},
    "RandomUniform": {"minval": -0.05, "maxval": 0.05, "seed": None},
    "TruncatedNormal": {"mean": 0.0, "stddev": 0.05, "seed": None},
    "VarianceScaling": {"scale": 1.0, "mode": "fan_in", "distribution": "truncated_normal",
                        "seed": None, "input_axes": None, "output_axes": None},
    "GlorotUniform": {"seed": None, "input_axes": None, "output_axes": None},
    "GlorotNormal": {"seed": None, "input_axes": None, "output_axes": None},
    "HeUniform": {"seed": None, "input_axes": None, "output_axes": None},
    "HeNormal": {"seed": None, "input_axes": None, "output_axes": None},
    "LecunUniform": {"seed": None, "input_axes": None, "output_axes": None},
    "LecunNormal": {"seed": None, "input_axes": None, "output_axes": None},
    "Orthogonal": {"gain": 1.0, "seed": None},
    "Identity": {"gain": 1.0},
}
_CONFIG_ALIASES = {"OrthogonalInitializer": "Orthogonal", "IdentityInitializer": "Identity",
                   "zeros": "Zeros", "ones": "Ones", "constant": "Constant",
                   "random_normal": "RandomNormal", "random_uniform": "RandomUniform",
                   "truncated_normal": "TruncatedNormal", "variance_scaling": "VarianceScaling",
                   "glorot_uniform": "GlorotUniform", "glorot_normal": "GlorotNormal",
                   "he_uniform": "HeUniform", "he_normal": "HeNormal",
                   "lecun_uniform": "LecunUniform", "lecun_normal": "LecunNormal",
                   "orthogonal": "Orthogonal", "identity": "Identity"}
_VS_FIXED = {"GlorotUniform": (1.0, "fan_avg", "uniform"),
             "GlorotNormal": (1.0, "fan_avg", "truncated_normal"),
             "HeUniform": (2.0, "fan_in", "uniform"), "HeNormal": (2.0, "fan_in", "truncated_normal"),
             "LecunUniform": (1.0, "fan_in", "uniform"),
             "LecunNormal": (1.0, "fan_in", "truncated_normal")}


def _real(owner, class_name, key, value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value):
        raise ValueError(f"{owner}: initializer {class_name}: {key} must be a finite number, "
                         f"got {value!r}")
    return float(value)


def _check_config(owner, identifier):
    """The normalized ``{"class_name": C, "config": {...}}`` of a Keras initializer dict."""
    unknown = set(identifier) - {"class_name", "config", "module", "registered_name"}
    if "class_name" not in identifier or unknown:
        raise ValueError(f"{owner}: an initializer dict needs 'class_name' (and 'config'), "
                         f"got {identifier!r}")
    class_name = identifier["class_name"]
    class_name = _CONFIG_ALIASES.get(class_name, class_name)
    defaults = _CONFIG_CLASSES.get(class_name)
    if defaults is None:
        raise ValueError(f"{owner}: unknown initializer class {identifier['class_name']!r}; "
                         f"known: {sorted(_CONFIG_CLASSES)}")
    config = identifier.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError(f"{owner}: initializer {class_name}: 'config' must be a dict, got "
                         f"{config!r}")
    extra = sorted(set(config) - set(defaults))
    if extra:
        raise ValueError(f"{owner}: initializer {class_name} takes no {extra}; its config "
                         f"keys are {sorted(defaults)}")
    full = dict(defaults)
    full.update(config)
    for key in ("input_axes", "output_axes"):
        if full.get(key) is not None:
            raise ValueError(f"{owner}: initializer {class_name}: {key}={full[key]!r} is not "
                             f"supported (fans are taken from the last two dimensions)")
    seed = full.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or seed < 0):
        raise ValueError(f"{owner}: initializer {class_name}: seed must be None or an int >= "
                         f"0, got {seed!r}")
    for key in ("value", "mean", "stddev", "minval", "maxval", "scale", "gain"):
        if key in full:
            full[key] = _real(owner, class_name, key, full[key])
    if class_name in ("RandomNormal", "TruncatedNormal") and full["stddev"] < 0:
        raise ValueError(f"{owner}: initializer {class_name}: stddev must be >= 0, got "
                         f"{full['stddev']}")
    if class_name == "RandomUniform" and full["minval"] > full["maxval"]:
        raise ValueError(f"{owner}: initializer RandomUniform: minval {full['minval']} is "
                         f"greater than maxval {full['maxval']}")
    if class_name == "VarianceScaling":
        if not full["scale"] > 0:
            raise ValueError(f"{owner}: initializer VarianceScaling: scale must be > 0, got "
                             f"{full['scale']}")
        if full["mode"] not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"{owner}: initializer VarianceScaling: mode must be 'fan_in', "
                             f"'fan_out' or 'fan_avg', got {full['mode']!r}")
        dist = str(full["distribution"]).lower()
        dist = "truncated_normal" if dist == "normal" else dist
        if dist not in ("uniform", "truncated_normal", "untruncated_normal"):
            raise ValueError(f"{owner}: initializer VarianceScaling: distribution must be "
                             f"'uniform', 'truncated_normal' or 'untruncated_normal', got "
                             f"{full['distribution']!r}")
        full["distribution"] = dist
    return {"class_name": class_name, "config": full}


def check(owner, identifier):
    """Validate an initializer argument early (at layer construction); returns what the layer
    keeps (and writes into its config): the name, a normalized config dict, or the callable."""
    if isinstance(identifier, str):
        if identifier not in _INITIALIZERS and identifier not in _ALIASES:
            raise ValueError(f"{owner}: unknown initializer {identifier!r}; valid names: "
                             f"{sorted(_INITIALIZERS)} (or Keras's class names, or a config "
                             f"dict)")
        if _ALIASES.get(identifier) in ("constant", "variance_scaling"):
            return _check_config(owner, {"class_name": identifier, "config": {}})
        return identifier
    if isinstance(identifier, dict):
        return _check_config(owner, identifier)
    if callable(identifier):
        return identifier
    raise TypeError(f"{owner}: initializer must be a name, a Keras config dict or a "
                    f"callable(shape, dtype), got {type(identifier).__name__}: {identifier!r}")


def _from_config(config, shape, seed):
    class_name, c = config["class_name"], config["config"]
    rng = utils._rng(c["seed"] if c.get("seed") is not None else seed)
    if class_name == "Zeros":
        return np.zeros(shape)
    if class_name == "Ones":
        return np.ones(shape)
    if class_name == "Constant":
        return np.full(shape, c["value"])
    if class_name == "RandomNormal":
        return rng.normal(c["mean"], c["stddev"], size=shape)
    if class_name == "RandomUniform":
        return rng.uniform(c["minval"], c["maxval"], size=shape)
    if class_name == "TruncatedNormal":
        return _truncated_normal(rng, c["mean"], c["stddev"], shape)
    if class_name == "Orthogonal":
        return _orthogonal(c["gain"])(shape, rng)
    if class_name == "Identity":
        return _identity(c["gain"])(shape, rng)
    if class_name == "VarianceScaling":
        scale, mode, dist = c["scale"], c["mode"], c["distribution"]
    else:
        scale, mode, dist = _VS_FIXED[class_name]
    return _variance_scaling(scale, mode, dist)(shape, rng)


def initialize(identifier, shape, dtype, seed=None):
    """Values of ``shape`` in ``dtype``; a callable is called as ``identifier(shape, dtype)``."""
    shape = tuple(int(d) for d in shape)
    if isinstance(identifier, str):
        name = _ALIASES.get(identifier, identifier)
        values = _INITIALIZERS[name](shape, utils._rng(seed))
    elif isinstance(identifier, dict):
        values = _from_config(identifier, shape, seed)
    else:
        values = np.asarray(identifier(shape, dtype))
        if values.shape != shape:
            raise ValueError(f"initializer {identifier!r} returned shape {values.shape}, "
                             f"expected {shape}")
    return np.ascontiguousarray(values).astype(dtype)
