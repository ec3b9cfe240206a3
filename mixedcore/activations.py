"""Activation functions with their derivatives (``keras.activations``), on numpy arrays.

Two interfaces:

* Keras's functions, ``relu(x, negative_slope=0.0, max_value=None, threshold=0.0)``,
  ``gelu(x, approximate=False)``, ``softmax(x, axis=-1)``, ...: any float array in, the same
  dtype out (integers give float32); ``get``, ``serialize`` and ``deserialize`` by name as in
  Keras 3, whose layer configs hold an activation as its name.
* What the layers use: ``resolve(owner, identifier)`` (the canonical name, or a TypeError /
  ValueError naming ``owner``), ``forward(name, x, axis)`` and ``backward(name, dy, x, y, axis)``
  on float32 or float64 arrays, and ``FUSED``, the names the GEMM epilogue applies itself.

Numerics.  Layers under a 16-bit policy bring their values to float32 (exactly, with
``kernels.cast``), apply these, and round the result once to the compute dtype.  float32 arrays
go through ``kernels.activation`` / ``kernels.activation_grad`` for the names the compiled core
has (``FUSED``: relu, gelu, sigmoid, tanh, relu6, silu, hard_sigmoid, hard_silu, the functions
the fused epilogue of ``kernels.matmul`` applies, so a Dense layer computes the same bits
whether it fuses the activation or not).  For the other
names a float32 array is evaluated in float64 and rounded once to float32 (within an ulp of the
correctly rounded result); float64 arrays are evaluated in float64.  Every formula is written so
that nothing overflows or cancels: softplus as ``max(x, 0) + log1p(exp(-|x|))``, sigmoid-based
functions through ``exp(-|x|)``, mish's ``tanh(softplus(x))`` and its derivative as rational
functions of ``exp(-|x|)``, selu and elu through ``expm1`` of the negative part only, squareplus
through ``hypot``, tanh_shrink by its series near 0.  Infinite inputs give the limits; no
floating-point warnings are raised.
"""
import functools
import math

import ml_dtypes
import numpy as np

from mixedcore import kernels
from mixedcore.saving import object_registration as _registry

__all__ = ["relu", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu", "silu", "swish",
           "softplus", "softsign", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh",
           "mish", "tanh", "sigmoid", "log_sigmoid", "sparse_sigmoid", "softmax", "log_softmax",
           "exponential", "linear", "tanh_shrink", "squareplus", "sparse_plus", "soft_shrink",
           "hard_shrink", "get", "serialize", "deserialize", "resolve", "forward", "forward_to",
           "backward", "FUSED", "NAMES"]

# Names the fused GEMM epilogue of kernels.matmul applies itself.
FUSED = ("relu", "gelu", "sigmoid", "tanh", "relu6", "silu", "hard_sigmoid", "hard_silu")
# Names kernels.activation / activation_grad compute for float32 arrays.
_COMPILED = FUSED

_OUT_16 = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))

_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_SQRT_2_OVER_PI = 0.7978845608028654
_GELU_C = 0.044715
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946
_erfc = np.frompyfunc(math.erfc, 1, 1)


# -- float64 implementations ---------------------------------------------------------------------
# Each takes a float (float64, or float32 for the exact piecewise-linear ones) array and returns
# f(x); each derivative returns f'(x).  Infinite inputs are patched afterwards (_LIMITS).

def _exp_neg_abs(x):
    return np.exp(-np.abs(x))


def _sigmoid(x):
    e = _exp_neg_abs(x)                              # <= 1: no overflow for either sign
    return np.where(x < 0, e, 1.0) / (1.0 + e)


def _sigmoid_grad(x):
    e = _exp_neg_abs(x)                              # s (1 - s) = e / (1 + e)**2
    return e / ((1.0 + e) * (1.0 + e))


def _phi_cdf(x):
    """Phi(x) = erfc(-x / sqrt 2) / 2: erfc keeps the relative accuracy for negative x, where
    1 + erf(x / sqrt 2) cancels."""
    return 0.5 * _erfc(-x * _SQRT_HALF).astype(np.float64)


def _gelu(x):
    return x * _phi_cdf(x)


def _gelu_grad(x):
    return _phi_cdf(x) + x * (_INV_SQRT_2PI * np.exp(-0.5 * x * x))


def _gelu_tanh_parts(x):
    """u = sqrt(2/pi) (x + 0.044715 x^3) and e = exp(-|2u|): 0.5 (1 + tanh u) = sigmoid(2u)
    without the cancellation of 1 + tanh u for negative x."""
    u = _SQRT_2_OVER_PI * (x + _GELU_C * x * x * x)
    e = np.exp(-np.abs(2.0 * u))
    return u, e


def _gelu_tanh(x):
    u, e = _gelu_tanh_parts(x)
    return x * (np.where(u < 0, e, 1.0) / (1.0 + e))


def _gelu_tanh_grad(x):
    u, e = _gelu_tanh_parts(x)
    s = np.where(u < 0, e, 1.0) / (1.0 + e)
    du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_C * x * x)
    tail = np.where(e > 0, x * (2.0 * du) * (e / ((1.0 + e) * (1.0 + e))), 0.0)
    return s + tail


def _relu(x):
    return np.where(x < 0, x.dtype.type(0), x)       # NaN and -0.0 pass through


def _relu_grad(x):
    return (x > 0).astype(x.dtype)


def _relu6(x):
    return np.minimum(np.maximum(x, x.dtype.type(0)), x.dtype.type(6))


def _relu6_grad(x):
    return ((x > 0) & (x < 6)).astype(x.dtype)


def _leaky_relu(x, negative_slope=0.2):
    return np.where(x > 0, x, negative_slope * x)


def _leaky_relu_grad(x, negative_slope=0.2):
    return np.where(x > 0, 1.0, negative_slope).astype(x.dtype)


def _elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


def _elu_grad(x, alpha=1.0):
    return np.where(x > 0, 1.0, alpha * np.exp(np.minimum(x, 0.0)))


def _selu(x):
    return _SELU_SCALE * _elu(x, _SELU_ALPHA)


def _selu_grad(x):
    return _SELU_SCALE * _elu_grad(x, _SELU_ALPHA)


def _celu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0) / alpha))


def _celu_grad(x, alpha=1.0):
    return np.where(x > 0, 1.0, np.exp(np.minimum(x, 0.0) / alpha))


def _silu(x):
    return x * _sigmoid(x)


def _silu_grad(x):
    e = _exp_neg_abs(x)
    tail = np.where(e > 0, x * (e / ((1.0 + e) * (1.0 + e))), 0.0)
    return _sigmoid(x) + tail


def _softplus(x):
    return np.maximum(x, 0.0) + np.log1p(_exp_neg_abs(x))


def _log_sigmoid(x):
    return np.minimum(x, 0.0) - np.log1p(_exp_neg_abs(x))


def _log_sigmoid_grad(x):
    return _sigmoid(-x)


def _softsign(x):
    return x / (1.0 + np.abs(x))


def _softsign_grad(x):
    d = 1.0 + np.abs(x)
    return 1.0 / (d * d)


def _hard_sigmoid(x):
    return np.clip(x / 6.0 + 0.5, 0.0, 1.0)


def _hard_sigmoid_grad(x):
    return np.where((x > -3.0) & (x < 3.0), 1.0 / 6.0, 0.0)


def _hard_silu(x):
    return x * _hard_sigmoid(x)


def _hard_silu_grad(x):
    return np.where(x < -3.0, 0.0, np.where(x > 3.0, 1.0, x / 3.0 + 0.5))


def _hard_tanh(x):
    return np.clip(x, -1.0, 1.0)


def _hard_tanh_grad(x):
    return ((x > -1.0) & (x < 1.0)).astype(np.float64)


def _mish_parts(x):
    """t = tanh(softplus(x)) and 1 - t**2 as rational functions of n = exp(-|x|):
    x > 0: t = (1 + 2n) / (1 + 2n + 2n^2), 1 - t^2 = 4 n^2 (1 + n)^2 / D^2;
    x <= 0: t = (2n + n^2) / (2 + 2n + n^2), 1 - t^2 = 4 (1 + n)^2 / D^2."""
    n = _exp_neg_abs(x)
    pos = x > 0
    num = np.where(pos, 1.0 + 2.0 * n, n * (2.0 + n))
    den = np.where(pos, 1.0 + 2.0 * n * (1.0 + n), 2.0 + n * (2.0 + n))
    t = num / den
    one_minus_t2 = np.where(pos, 4.0 * (n * (1.0 + n) / den) ** 2, 4.0 * ((1.0 + n) / den) ** 2)
    return t, one_minus_t2


def _mish(x):
    t, _ = _mish_parts(x)
    return x * t


def _mish_grad(x):
    t, one_minus_t2 = _mish_parts(x)
    return t + x * one_minus_t2 * _sigmoid(x)


def _tanh(x):
    return np.tanh(x)


def _tanh_grad(x):
    e = np.exp(-2.0 * np.abs(x))                    # 1 - tanh**2 = 4 e / (1 + e)**2
    return (4.0 * e) / ((1.0 + e) * (1.0 + e))


def _exponential(x):
    return np.exp(x)


# x - tanh(x) = sum c_k x^(2k+1) for |x| < pi/2; used for |x| < 0.1, where the difference cancels
_TANH_SHRINK_SERIES = (1.0 / 3.0, -2.0 / 15.0, 17.0 / 315.0, -62.0 / 2835.0,
                       1382.0 / 155925.0, -21844.0 / 6081075.0, 929569.0 / 638512875.0)


def _tanh_shrink(x):
    x2 = x * x
    series = np.zeros_like(x)
    for c in reversed(_TANH_SHRINK_SERIES):
        series = series * x2 + c
    series = series * x2 * x
    return np.where(np.abs(x) < 0.1, series, x - np.tanh(x))


def _tanh_shrink_grad(x):
    t = np.tanh(x)
    return t * t


def _squareplus(x, b=4.0):
    s = np.hypot(x, math.sqrt(b))                   # sqrt(x^2 + b) without overflow
    # (x + s) / 2 cancels for negative x: there it is b / (2 (s - x))
    return np.where(x >= 0, 0.5 * (x + s), 0.5 * b / (s - x))


def _squareplus_grad(x, b=4.0):
    s = np.hypot(x, math.sqrt(b))
    ax = np.abs(x)
    # (1 + x / s) / 2; for x < 0 that is b / (2 s (s + |x|))
    return np.where(x >= 0, 0.5 * (1.0 + x / s), 0.5 * b / (s * (s + ax)))


def _sparse_plus(x):
    return np.where(x <= -1.0, 0.0, np.where(x >= 1.0, x, 0.25 * (x + 1.0) * (x + 1.0)))


def _sparse_plus_grad(x):
    return np.where(x <= -1.0, 0.0, np.where(x >= 1.0, 1.0, 0.5 * (x + 1.0)))


def _sparse_sigmoid(x):
    return np.where(x <= -1.0, 0.0, np.where(x >= 1.0, 1.0, 0.5 * (x + 1.0)))


def _sparse_sigmoid_grad(x):
    return np.where((x > -1.0) & (x < 1.0), 0.5, 0.0)


def _soft_shrink(x, threshold=0.5):
    return np.where(x > threshold, x - threshold, np.where(x < -threshold, x + threshold, 0.0))


def _soft_shrink_grad(x, threshold=0.5):
    return (np.abs(x) > threshold).astype(np.float64)


def _hard_shrink(x, threshold=0.5):
    return np.where(np.abs(x) > threshold, x, 0.0)


def _hard_shrink_grad(x, threshold=0.5):
    return (np.abs(x) > threshold).astype(np.float64)


# name -> (f, f', (f(-inf), f(+inf)), (f'(-inf), f'(+inf)))
_TABLE = {
    "relu": (_relu, _relu_grad, (0.0, np.inf), (0.0, 1.0)),
    "relu6": (_relu6, _relu6_grad, (0.0, 6.0), (0.0, 0.0)),
    "leaky_relu": (_leaky_relu, _leaky_relu_grad, None, None),
    "elu": (_elu, _elu_grad, (-1.0, np.inf), (0.0, 1.0)),
    "selu": (_selu, _selu_grad, (-_SELU_SCALE * _SELU_ALPHA, np.inf), (0.0, _SELU_SCALE)),
    "celu": (_celu, _celu_grad, (-1.0, np.inf), (0.0, 1.0)),
    "gelu": (_gelu, _gelu_grad, (-0.0, np.inf), (0.0, 1.0)),
    "gelu_approximate": (_gelu_tanh, _gelu_tanh_grad, (-0.0, np.inf), (0.0, 1.0)),
    "silu": (_silu, _silu_grad, (-0.0, np.inf), (0.0, 1.0)),
    "softplus": (_softplus, _sigmoid, (0.0, np.inf), (0.0, 1.0)),
    "softsign": (_softsign, _softsign_grad, (-1.0, 1.0), (0.0, 0.0)),
    "hard_sigmoid": (_hard_sigmoid, _hard_sigmoid_grad, (0.0, 1.0), (0.0, 0.0)),
    "hard_silu": (_hard_silu, _hard_silu_grad, (-0.0, np.inf), (0.0, 1.0)),
    "hard_tanh": (_hard_tanh, _hard_tanh_grad, (-1.0, 1.0), (0.0, 0.0)),
    "mish": (_mish, _mish_grad, (-0.0, np.inf), (0.0, 1.0)),
    "tanh": (_tanh, _tanh_grad, (-1.0, 1.0), (0.0, 0.0)),
    "sigmoid": (_sigmoid, _sigmoid_grad, (0.0, 1.0), (0.0, 0.0)),
    "log_sigmoid": (_log_sigmoid, _log_sigmoid_grad, (-np.inf, -0.0), (1.0, 0.0)),
    "sparse_sigmoid": (_sparse_sigmoid, _sparse_sigmoid_grad, (0.0, 1.0), (0.0, 0.0)),
    "exponential": (_exponential, _exponential, (0.0, np.inf), (0.0, np.inf)),
    "tanh_shrink": (_tanh_shrink, _tanh_shrink_grad, (-np.inf, np.inf), (1.0, 1.0)),
    "squareplus": (_squareplus, _squareplus_grad, (0.0, np.inf), (0.0, 1.0)),
    "sparse_plus": (_sparse_plus, _sparse_plus_grad, (0.0, np.inf), (0.0, 1.0)),
    "soft_shrink": (_soft_shrink, _soft_shrink_grad, (-np.inf, np.inf), (1.0, 1.0)),
    "hard_shrink": (_hard_shrink, _hard_shrink_grad, (-np.inf, np.inf), (1.0, 1.0)),
}
# piecewise-linear functions that are exact (or one rounding) in float32 itself
_EXACT32 = ("relu6", "hard_tanh", "leaky_relu")

NAMES = ("linear", "relu", "relu6", "leaky_relu", "elu", "selu", "celu", "gelu",
         "gelu_approximate", "silu", "softplus", "softsign", "hard_sigmoid", "hard_silu",
         "hard_tanh", "mish", "tanh", "sigmoid", "log_sigmoid", "sparse_sigmoid", "softmax",
         "log_softmax", "exponential", "tanh_shrink", "squareplus", "sparse_plus", "soft_shrink",
         "hard_shrink")
_ALIASES = {"swish": "silu", "hard_swish": "hard_silu"}
# Keras activations that are not elementwise functions of one argument
_UNSUPPORTED = {"glu": "it halves its axis; split the tensor and use sigmoid",
                "sparsemax": "it is not implemented",
                "threshold": "it needs threshold and default_value arguments"}


def _patch_limits(name, x, out, grad, params=None):
    """Replace the results at infinite inputs by the function's (or derivative's) limits, and
    at NaN inputs by that NaN (the piecewise definitions would otherwise pick a branch)."""
    if np.isfinite(x).all():
        return out
    out = np.where(np.isnan(x), x, out)
    entry = _TABLE[name][3 if grad else 2]
    if entry is None:
        return out
    if name in ("elu", "celu") and not grad and params:
        entry = (-params.get("alpha", 1.0), np.inf)
    lo, hi = entry
    out = np.where(x == -np.inf, lo, out)
    return np.where(x == np.inf, hi, out)


def _eval(name, x, grad=False, **params):
    """f(x) (or f'(x)) for float32/float64 ``x``, in ``x``'s dtype: float32 through float64."""
    fn = _TABLE[name][1 if grad else 0]
    with np.errstate(all="ignore"):
        if x.dtype == np.float32 and name not in _EXACT32:
            r = fn(x.astype(np.float64), **params)
            r = _patch_limits(name, x, r, grad, params)
            return r.astype(np.float32)
        r = fn(x, **params)
        r = _patch_limits(name, x, r, grad, params)
        return np.asarray(r, dtype=x.dtype)


def _eval_grad(name, dy, x, **params):
    """dy * f'(x), the product in float64 for float32 arrays (one rounding)."""
    with np.errstate(all="ignore"):
        if x.dtype == np.float32:
            d = _TABLE[name][1](x.astype(np.float64), **params)
            d = _patch_limits(name, x, d, True, params)
            return (dy.astype(np.float64) * d).astype(np.float32)
        d = _TABLE[name][1](x, **params)
        d = _patch_limits(name, x, d, True, params)
        return dy * d


# -- what the layers use ---------------------------------------------------------------------------

def resolve(owner, identifier):
    """The canonical activation name for ``identifier``.

    ``identifier`` may be None ("linear"), a name (Keras's, with "swish" and "hard_swish" their
    aliases; "gelu" is the exact form and "gelu_approximate" the tanh form), one of this module's
    functions (``functools.partial(gelu, approximate=True)`` included), or a Keras serialized
    function dict.  Raises TypeError / ValueError naming ``owner`` otherwise.
    """
    if identifier is None:
        return "linear"
    if isinstance(identifier, dict):
        identifier = _name_from_dict(owner, identifier)
    if isinstance(identifier, str):
        name = _ALIASES.get(identifier, identifier)
        if name in NAMES:
            return name
        if name in _UNSUPPORTED:
            raise ValueError(f"{owner}: activation {identifier!r} is not supported "
                             f"({_UNSUPPORTED[name]})")
        raise ValueError(f"{owner}: unknown activation {identifier!r}; valid names: "
                         f"{sorted(NAMES + tuple(_ALIASES))}")
    if callable(identifier):
        name = _name_of_function(identifier)
        if name is None:
            raise ValueError(f"{owner}: activation {identifier!r} is not one of "
                             f"mixedcore.activations' functions (with their default "
                             f"arguments); layers need the derivative, which only those have")
        return name
    raise TypeError(f"{owner}: activation must be a str, a function of mixedcore.activations "
                    f"or None, got {type(identifier).__name__}: {identifier!r}")


def _name_from_dict(owner, config):
    name = config.get("config")
    if config.get("class_name") != "function" or not isinstance(name, str):
        raise ValueError(f"{owner}: an activation dict must be Keras's serialized function "
                         f"{{'class_name': 'function', 'config': <name>}}, got {config!r}")
    return name


def forward(name, x, axis=-1):
    """``name(x)`` for float32/float64 ``x`` (a new array unless linear)."""
    if name == "linear":
        return x
    if name == "softmax":
        return softmax(x, axis)
    if name == "log_softmax":
        return log_softmax(x, axis)
    if x.dtype == np.float32 and name in _COMPILED:
        return kernels.activation(x, name)
    return _eval(name, x)


def forward_to(name, x, dtype, axis=-1):
    """``name(x)`` rounded once to ``dtype`` (a numpy dtype).  Into float16 or bfloat16 from
    float32, the compiled functions give the value a fused epilogue stores for that output
    type (gelu evaluated in float32; docs/gemm.md, "Activation")."""
    if (x.dtype == np.float32 and name in _COMPILED and dtype != x.dtype
            and dtype in _OUT_16):
        return kernels.activation(x, name, out_dtype=dtype)
    return _finish(forward(name, x, axis), dtype)


def backward(name, dy, x, y, axis=-1):
    """Gradient with respect to the input, given the output gradient ``dy``, input ``x`` and
    output ``y`` (all float32 or all float64; only softmax and log_softmax use ``y``)."""
    if name == "linear":
        return dy
    if name == "softmax":
        return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))
    if name == "log_softmax":
        with np.errstate(under="ignore"):
            return dy - np.exp(y) * np.sum(dy, axis=axis, keepdims=True)
    if x.dtype == np.float32 and name in _COMPILED:
        return kernels.activation_grad(dy, x, name)
    return _eval_grad(name, dy, x)


# -- Keras's functions -------------------------------------------------------------------------------

def _as_float(x):
    """(work array, dtype of the result): 16-bit floats computed in float32, integers give
    float32."""
    x = np.asarray(x)
    if x.dtype == np.float64 or x.dtype == np.float32:
        return x, x.dtype
    if x.dtype.kind in "biu":
        return x.astype(np.float32), np.dtype(np.float32)
    if x.dtype.itemsize == 2 and (x.dtype.kind == "f" or x.dtype.name == "bfloat16"):
        return kernels.cast(np.ascontiguousarray(x), np.float32), x.dtype
    raise TypeError(f"activations: expected a float or integer array, got dtype {x.dtype}")


def _finish(y, dtype):
    if y.dtype == dtype:
        return y
    return kernels.cast(np.ascontiguousarray(y), dtype)


def _elementwise(name, x, **params):
    xw, dtype = _as_float(x)
    if not params and name in _COMPILED and xw.dtype == np.float32:
        return kernels.activation(xw, name, out_dtype=dtype if dtype in _OUT_16 else None)
    return _finish(_eval(name, xw, **params), dtype)


def linear(x):
    """The identity."""
    return x


def relu(x, negative_slope=0.0, max_value=None, threshold=0.0):
    """``max(x, 0)``; with ``negative_slope``, ``max_value`` and ``threshold`` as Keras's:
    ``x`` for ``threshold <= x < max_value``, ``max_value`` above, and
    ``negative_slope * (x - threshold)`` below the threshold."""
    if negative_slope == 0.0 and max_value is None and threshold == 0.0:
        return _elementwise("relu", x)
    xw, dtype = _as_float(x)
    t = xw.dtype.type
    with np.errstate(all="ignore"):
        y = np.where(xw >= t(threshold), xw, t(negative_slope) * (xw - t(threshold)))
        if max_value is not None:
            y = np.minimum(y, t(max_value))
    return _finish(y.astype(xw.dtype), dtype)


def relu6(x):
    """``min(max(x, 0), 6)``."""
    return _elementwise("relu6", x)


def leaky_relu(x, negative_slope=0.2):
    """``x`` for ``x > 0``, ``negative_slope * x`` otherwise (Keras's default slope 0.2)."""
    return _elementwise("leaky_relu", x, negative_slope=float(negative_slope))


def elu(x, alpha=1.0):
    """``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise."""
    return _elementwise("elu", x, alpha=float(alpha))


def selu(x):
    """``scale * elu(x, alpha)`` with Klambauer et al.'s constants."""
    return _elementwise("selu", x)


def celu(x, alpha=1.0):
    """``x`` for ``x > 0``, ``alpha * (exp(x / alpha) - 1)`` otherwise."""
    return _elementwise("celu", x, alpha=float(alpha))


def gelu(x, approximate=False):
    """Gaussian error linear unit: ``x * Phi(x)``, or its tanh approximation
    ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`` with ``approximate=True``."""
    return _elementwise("gelu_approximate" if approximate else "gelu", x)


def silu(x):
    """``x * sigmoid(x)`` (also called swish)."""
    return _elementwise("silu", x)


swish = silu


def softplus(x):
    """``log(1 + exp(x))``, as ``max(x, 0) + log1p(exp(-|x|))``."""
    return _elementwise("softplus", x)


def softsign(x):
    """``x / (1 + |x|)``."""
    return _elementwise("softsign", x)


def hard_sigmoid(x):
    """``0`` below -3, ``1`` above 3, ``x / 6 + 0.5`` between."""
    return _elementwise("hard_sigmoid", x)


def hard_silu(x):
    """``x * hard_sigmoid(x)`` (also called hard_swish)."""
    return _elementwise("hard_silu", x)


hard_swish = hard_silu


def hard_tanh(x):
    """``x`` clipped to [-1, 1]."""
    return _elementwise("hard_tanh", x)


def mish(x):
    """``x * tanh(softplus(x))``."""
    return _elementwise("mish", x)


def tanh(x):
    """Hyperbolic tangent."""
    return _elementwise("tanh", x)


def sigmoid(x):
    """``1 / (1 + exp(-x))``."""
    return _elementwise("sigmoid", x)


def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``."""
    return _elementwise("log_sigmoid", x)


def sparse_sigmoid(x):
    """``0`` at or below -1, ``1`` at or above 1, ``(x + 1) / 2`` between."""
    return _elementwise("sparse_sigmoid", x)


def exponential(x):
    """``exp(x)``."""
    return _elementwise("exponential", x)


def tanh_shrink(x):
    """``x - tanh(x)`` (by its series for |x| < 0.1, where the difference cancels)."""
    return _elementwise("tanh_shrink", x)


def squareplus(x, b=4):
    """``(x + sqrt(x^2 + b)) / 2``."""
    return _elementwise("squareplus", x, b=float(b))


def sparse_plus(x):
    """``0`` at or below -1, ``x`` at or above 1, ``(x + 1)^2 / 4`` between."""
    return _elementwise("sparse_plus", x)


def soft_shrink(x, threshold=0.5):
    """``x - threshold`` above ``threshold``, ``x + threshold`` below ``-threshold``, else 0."""
    return _elementwise("soft_shrink", x, threshold=float(threshold))


def hard_shrink(x, threshold=0.5):
    """``x`` where ``|x| > threshold``, else 0."""
    return _elementwise("hard_shrink", x, threshold=float(threshold))


def _softmax64(x, axis, log):
    with np.errstate(under="ignore"):
        shifted = x - np.max(x, axis=axis, keepdims=True)
        if log:
            return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
        e = np.exp(shifted)
        return e / np.sum(e, axis=axis, keepdims=True)


def softmax(x, axis=-1):
    """Softmax along ``axis``: the compiled kernel for float32 (float64 inside, one rounding),
    numpy for float64; 16-bit arrays through float32, rounded once."""
    if isinstance(x, np.ndarray) and x.dtype == np.float32:
        return kernels.softmax(x, axis)
    xw, dtype = _as_float(x)
    if xw.dtype == np.float32:
        return _finish(kernels.softmax(xw, axis), dtype)
    return _softmax64(xw, axis, log=False)


def log_softmax(x, axis=-1):
    """``log(softmax(x))`` along ``axis``, computed without forming the softmax."""
    xw, dtype = _as_float(x)
    if xw.dtype == np.float32:
        return _finish(kernels.softmax(xw, axis, log=True), dtype)
    return _softmax64(xw, axis, log=True)


# -- get / serialize / deserialize ---------------------------------------------------------------

_FUNCTIONS = {
    "linear": linear, "relu": relu, "relu6": relu6, "leaky_relu": leaky_relu, "elu": elu,
    "selu": selu, "celu": celu, "gelu": gelu, "silu": silu, "softplus": softplus,
    "softsign": softsign, "hard_sigmoid": hard_sigmoid, "hard_silu": hard_silu,
    "hard_tanh": hard_tanh, "mish": mish, "tanh": tanh, "sigmoid": sigmoid,
    "log_sigmoid": log_sigmoid, "sparse_sigmoid": sparse_sigmoid, "softmax": softmax,
    "log_softmax": log_softmax, "exponential": exponential, "tanh_shrink": tanh_shrink,
    "squareplus": squareplus, "sparse_plus": sparse_plus, "soft_shrink": soft_shrink,
    "hard_shrink": hard_shrink,
}
_registry.register_builtins("activation", _FUNCTIONS)
_GELU_APPROXIMATE = functools.partial(gelu, approximate=True)


def _name_of_function(fn):
    """The canonical name of one of this module's functions (None for anything else)."""
    for name, f in _FUNCTIONS.items():
        if fn is f:
            return name
    if isinstance(fn, functools.partial) and fn.func is gelu and not fn.args \
            and set(fn.keywords) == {"approximate"}:
        return "gelu_approximate" if fn.keywords["approximate"] else "gelu"
    return None


def get(identifier):
    """The function for an identifier, as ``keras.activations.get``: None -> ``linear``; a name
    (or "swish", "hard_swish", "gelu_approximate"); a serialized dict; one of these functions.

    Raises ValueError for an unknown name, TypeError for anything else.
    """
    name = resolve("activations.get", identifier)
    if name == "gelu_approximate":
        return _GELU_APPROXIMATE
    return _FUNCTIONS[name]


def serialize(activation):
    """The name of an activation function, what Keras 3 writes into a layer config."""
    name = _name_of_function(activation) if callable(activation) else None
    if name is None:
        raise ValueError(f"activations.serialize: {activation!r} is not one of "
                         f"mixedcore.activations' functions")
    return name


def deserialize(config, custom_objects=None):
    """The function for a name or a Keras serialized function dict ``{"class_name":
    "function", "config": name, ...}``; ``custom_objects`` maps other names to functions."""
    found = _registry.lookup_keys("activation", _registry.function_keys(config), custom_objects,
                                  owner="activations.deserialize")
    if found is not None:
        return found.obj
    if not isinstance(config, (str, dict)):
        raise TypeError(f"activations.deserialize: expected a name or a dict, got "
                        f"{type(config).__name__}: {config!r}")
    return get(config)
