"""Every public module's __all__ names real objects, and star-imports work."""
import importlib

import pytest

MODULES = ["mixedcore", "mixedcore.kernels", "mixedcore.mixed_precision", "mixedcore.experimental",
           "mixedcore.policies", "mixedcore.loss_scale", "mixedcore.optimizers", "mixedcore.layers",
           "mixedcore.models", "mixedcore.losses", "mixedcore.metrics", "mixedcore.regularizers",
           "mixedcore.utils", "mixedcore.datasets", "mixedcore.scale_out", "mixedcore.policy",
           "mixedcore.dtype_policies", "mixedcore.random", "mixedcore.initializers"]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist(name):
    module = importlib.import_module(name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names missing objects: {missing}"
    namespace = {}
    exec(f"from {name} import *", namespace)
    assert set(module.__all__) <= set(namespace)


@pytest.mark.parametrize("name", MODULES)
def test_public_callables_are_documented(name):
    module = importlib.import_module(name)
    undocumented = [n for n in module.__all__
                    if callable(getattr(module, n)) and not getattr(module, n).__doc__]
    assert not undocumented, f"{name}: no docstring for {undocumented}"


def test_keras_mixed_precision_names():
    from mixedcore import mixed_precision
    for n in ("DTypePolicy", "Policy", "set_dtype_policy", "dtype_policy", "set_global_policy",
              "global_policy", "LossScaleOptimizer", "experimental"):
        assert hasattr(mixed_precision, n), n
