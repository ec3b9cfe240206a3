"""mixedcore: CPU mixed-precision numerics with a Keras-compatible Python layer.

- ``mixedcore.kernels``: bit-exact float16/bfloat16 conversions, the overflow scan, the
  fp32-accumulating GEMM (docs/conversions.md, docs/kernels_scan.md, docs/gemm.md).
- Dtype policies (``DTypePolicy``, ``set_policy``, ``policy_scope``) and loss scaling
  (``LossScaleOptimizer``), with the names of ``keras.mixed_precision`` (docs/policies.md).
"""


# What an in-place build needs (pyproject.toml's build-system requires, as one pip command).
_BUILD_TOOLS = 'python -m pip install "setuptools>=77" wheel "Cython>=3.0" "numpy>=2.0"'


def _compiled_core_missing():
    """Raise an ImportError saying what to do when the compiled core cannot be found: a source
    tree that was never built (or was built for another Python) on the path ahead of any
    installed copy."""
    import glob
    import importlib.machinery
    import importlib.util
    import os
    import sys
    if importlib.util.find_spec("mixedcore._core._mixedcore") is not None:
        return
    package = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.dirname(package)
    built = sorted(os.path.basename(p) for p in glob.glob(os.path.join(
        package, "_core", "_mixedcore.*")) if p.endswith((".so", ".pyd")))
    message = f"mixedcore's compiled core (mixedcore._core._mixedcore) is not built in {package}"
    if built:
        message += (f": {', '.join(built)} is built for another Python (this one loads "
                    f"_mixedcore{importlib.machinery.EXTENSION_SUFFIXES[0]})")
    if os.path.exists(os.path.join(tree, "setup.py")):
        message += (f".\nThis is a source tree: build it in place (in {tree}: {_BUILD_TOOLS}, "
                    f"then python setup.py build_ext --inplace), or install it (pip install "
                    f"{tree}).")
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != tree]
    installed = importlib.machinery.PathFinder.find_spec("mixedcore", others)
    if installed is not None and installed.origin:
        message += (f"\nAn installed mixedcore is at {os.path.dirname(installed.origin)}, hidden "
                    f"by this one because {tree} comes first on sys.path (the current "
                    "directory, or PYTHONPATH): run from another directory to use it.")
    elif tree == os.path.abspath(os.curdir):
        message += ("\nTo use an installed mixedcore instead, run from another directory: "
                    "Python looks in the current directory first.")
    raise ImportError(message, name="mixedcore")


_compiled_core_missing()
del _compiled_core_missing

from mixedcore._version import __version__  # noqa: E402

def _engine_setting_error(exc):
    """The kernels apply the MIXEDCORE_* variables on import.  A variable the engine cannot take
    is a ValueError for a program importing mixedcore; run as the command line (``python -m
    mixedcore``, whose package import happens while sys.argv[0] is still "-m", or the
    ``mixedcore`` script) it is the command line's one-line error with exit code 2."""
    import os
    import sys
    command = sys.argv[:1] == ["-m"] or \
        os.path.basename(sys.argv[0] if sys.argv else "") == "mixedcore"
    if command and str(exc).startswith(("MIXEDCORE_", "OMP_NUM_THREADS")):
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


try:
    from mixedcore import kernels
except ValueError as _exc:
    _engine_setting_error(_exc)
    raise
del _engine_setting_error

from mixedcore.dtype_policies import (  # noqa: E402
    DTypePolicy,
    Policy,
    dtype_policy,
    global_policy,
    policy_scope,
    set_dtype_policy,
    set_global_policy,
    set_policy,
)
from mixedcore.loss_scale import DynamicLossScale, FixedLossScale
from mixedcore.optimizers import LossScaleOptimizer
from mixedcore import (dtype_policies, experimental, loss_scale, mixed_precision, optimizers,
                       policies)

__all__ = [
    "__version__",
    "kernels",
    "DTypePolicy",
    "Policy",
    "set_policy",
    "set_global_policy",
    "set_dtype_policy",
    "global_policy",
    "dtype_policy",
    "policy_scope",
    "FixedLossScale",
    "DynamicLossScale",
    "LossScaleOptimizer",
    "dtype_policies",
    "experimental",
    "loss_scale",
    "mixed_precision",
    "optimizers",
    "policies",
]

# The Keras-like inference and training layer (docs/user_guide.md, docs/api.md).
from mixedcore import (callbacks, datasets, initializers, layers, losses, metrics, models,
                       quantizers, regularizers, utils)
from mixedcore.models import Model, Sequential
from mixedcore import hub    # registers keras_hub's models and layers with the loader

__all__ += ["layers", "models", "losses", "metrics", "initializers", "regularizers", "utils",
            "datasets", "callbacks", "quantizers", "Model", "Sequential", "hub"]
