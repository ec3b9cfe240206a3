"""Activation functions with their derivatives, on float32 or float64 numpy arrays.

Layers under a 16-bit policy bring their values to float32 (exactly, with ``kernels.cast``), apply
these, and round the result once to the compute dtype: elementwise math in 16-bit numpy would be
slow and no more faithful.  The names are Keras's.
"""
import math

import numpy as np

# Names the fused GEMM epilogue of kernels.matmul applies itself.
FUSED = ("relu", "gelu", "sigmoid", "tanh")
NAMES = ("linear", "relu", "gelu", "sigmoid", "tanh", "softmax")

_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_erf_exact = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    """erf elementwise: exact (``math.erf``) for float64, a float32-accurate rational form else.

    The float32 form is Abramowitz & Stegun 7.1.26 evaluated in float64 (|error| < 1.5e-7, the
    size of a float32 rounding step near 1), then rounded to float32.
    """
    if x.dtype == np.float64:
        return _erf_exact(x).astype(np.float64)
    z = x.astype(np.float64)
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - poly * np.exp(-a * a)
    return np.copysign(y, z).astype(x.dtype)


def resolve(owner, identifier):
    """The canonical activation name for ``identifier`` (None, a name, or "linear")."""
    if identifier is None:
        return "linear"
    if not isinstance(identifier, str):
        raise TypeError(f"{owner}: activation must be a str or None, got "
                        f"{type(identifier).__name__}")
    if identifier not in NAMES:
        raise ValueError(f"{owner}: unknown activation {identifier!r}; valid names: "
                         f"{list(NAMES)}")
    return identifier


def forward(name, x, axis=-1):
    """``name(x)`` for float32/float64 ``x`` (a new array unless linear)."""
    if name == "linear":
        return x
    if name == "relu":
        return np.maximum(x, 0, dtype=x.dtype)
    if name == "sigmoid":
        # 0.5 * (1 + tanh(x / 2)) never overflows (1 / (1 + exp(-x)) does for x < -88 in float32)
        half = x.dtype.type(0.5)
        return half + half * np.tanh(half * x)
    if name == "tanh":
        return np.tanh(x)
    if name == "gelu":
        return x.dtype.type(0.5) * x * (1 + _erf(x * x.dtype.type(_SQRT_HALF)))
    if name == "softmax":
        return softmax(x, axis)
    raise ValueError(f"unknown activation {name!r}")


def softmax(x, axis=-1):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def backward(name, dy, x, y, axis=-1):
    """Gradient with respect to the input, given the output gradient ``dy``, input ``x`` and
    output ``y`` (all float32 or all float64)."""
    if name == "linear":
        return dy
    if name == "relu":
        return np.where(x > 0, dy, dy.dtype.type(0))
    if name == "sigmoid":
        return dy * y * (1 - y)
    if name == "tanh":
        return dy * (1 - y * y)
    if name == "gelu":
        cdf = x.dtype.type(0.5) * (1 + _erf(x * x.dtype.type(_SQRT_HALF)))
        pdf = x.dtype.type(_INV_SQRT_2PI) * np.exp(x.dtype.type(-0.5) * x * x)
        return dy * (cdf + x * pdf)
    if name == "softmax":
        return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))
    raise ValueError(f"unknown activation {name!r}")
