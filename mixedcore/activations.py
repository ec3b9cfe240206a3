"""Activation functions with their derivatives, on float32 or float64 numpy arrays.

Layers under a 16-bit policy bring their values to float32 (exactly, with ``kernels.cast``), apply
these, and round the result once to the compute dtype: elementwise math in 16-bit numpy would be
slow and no more faithful.  The names are Keras's.

float32 arrays go through ``kernels.activation`` / ``kernels.activation_grad``: the compiled
functions the fused epilogue of ``kernels.matmul`` applies too, so a Dense layer computes the same
bits whether it fuses the activation into the GEMM (inference) or applies it after the GEMM
(training).  float64 arrays (the float64 policy) use numpy and ``math`` in float64, written so
that nothing cancels or overflows.  softmax is numpy in either dtype.
"""
import math

import numpy as np

from mixedcore import kernels

# Names the fused GEMM epilogue of kernels.matmul applies itself.
FUSED = ("relu", "gelu", "sigmoid", "tanh")
NAMES = ("linear", "relu", "gelu", "sigmoid", "tanh", "softmax")

_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_erfc = np.frompyfunc(math.erfc, 1, 1)


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


def _phi_cdf64(x):
    """Phi(x) = erfc(-x / sqrt 2) / 2 elementwise in float64: erfc keeps the relative accuracy
    for negative x, where 1 + erf(x / sqrt 2) cancels."""
    return 0.5 * _erfc(-x * _SQRT_HALF).astype(np.float64)


def _forward64(name, x):
    with np.errstate(all="ignore"):
        if name == "relu":
            return np.where(x < 0, x.dtype.type(0), x)      # NaN and -0.0 pass through
        if name == "sigmoid":
            # e = exp(-|x|) <= 1: neither overflows nor cancels, for either sign of x
            e = np.exp(-np.abs(x))
            return np.where(x < 0, e, 1.0) / (1.0 + e)
        if name == "tanh":
            return np.tanh(x)
        if name == "gelu":
            y = x * _phi_cdf64(x)
            return np.where(np.isneginf(x), -0.0, y)        # the limit, not -inf * 0
    raise ValueError(f"unknown activation {name!r}")


def _backward64(name, dy, x):
    with np.errstate(all="ignore"):
        if name == "relu":
            return np.where(np.isnan(x), x, dy * (x > 0))
        if name == "sigmoid":
            e = np.exp(-np.abs(x))                          # s (1 - s) = e / (1 + e)**2
            return dy * (e / ((1.0 + e) * (1.0 + e)))
        if name == "tanh":
            e = np.exp(-2.0 * np.abs(x))                    # 1 - tanh**2 = 4 e / (1 + e)**2
            return dy * ((4.0 * e) / ((1.0 + e) * (1.0 + e)))
        if name == "gelu":
            pdf = _INV_SQRT_2PI * np.exp(-0.5 * x * x)
            xpdf = np.where(np.isinf(x), 0.0, x * pdf)
            return dy * (_phi_cdf64(x) + xpdf)
    raise ValueError(f"unknown activation {name!r}")


def forward(name, x, axis=-1):
    """``name(x)`` for float32/float64 ``x`` (a new array unless linear)."""
    if name == "linear":
        return x
    if name == "softmax":
        return softmax(x, axis)
    if x.dtype == np.float32:
        return kernels.activation(x, name)
    return _forward64(name, x)


def softmax(x, axis=-1):
    """Softmax along ``axis``: the compiled kernel for float32 (float64 inside, one rounding),
    numpy for float64."""
    if x.dtype == np.float32:
        return kernels.softmax(x, axis)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def backward(name, dy, x, y, axis=-1):
    """Gradient with respect to the input, given the output gradient ``dy``, input ``x`` and
    output ``y`` (all float32 or all float64; only softmax uses ``y``)."""
    if name == "linear":
        return dy
    if name == "softmax":
        return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))
    if x.dtype == np.float32:
        return kernels.activation_grad(dy, x, name)
    return _backward64(name, dy, x)
