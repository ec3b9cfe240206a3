"""Weight initializers by Keras name; values drawn in float64, then stored in the variable dtype."""
import numpy as np

from mixedcore import utils


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
        # truncated normal at 2 stddev, stddev corrected as Keras does (0.8796...)
        std = np.sqrt(var) / 0.87962566103423978
        out = rng.normal(0.0, std, size=shape)
        bad = np.abs(out) > 2 * std
        while bad.any():
            out[bad] = rng.normal(0.0, std, size=int(bad.sum()))
            bad = np.abs(out) > 2 * std
        return out
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
}


def check(owner, identifier):
    """Validate an initializer argument early (at layer construction)."""
    if isinstance(identifier, str):
        if identifier not in _INITIALIZERS:
            raise ValueError(f"{owner}: unknown initializer {identifier!r}; valid names: "
                             f"{sorted(_INITIALIZERS)}")
        return identifier
    if callable(identifier):
        return identifier
    raise TypeError(f"{owner}: initializer must be a name or a callable(shape, dtype), got "
                    f"{type(identifier).__name__}")


def initialize(identifier, shape, dtype, seed=None):
    """Values of ``shape`` in ``dtype``; a callable is called as ``identifier(shape, dtype)``."""
    shape = tuple(int(d) for d in shape)
    if isinstance(identifier, str):
        values = _INITIALIZERS[identifier](shape, utils._rng(seed))
    else:
        values = np.asarray(identifier(shape, dtype))
        if values.shape != shape:
            raise ValueError(f"initializer {identifier!r} returned shape {values.shape}, "
                             f"expected {shape}")
    return np.ascontiguousarray(values).astype(dtype)
