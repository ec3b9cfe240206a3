"""Shared fixtures: every kernel test runs at every ISA level this machine has."""
import pytest

from mixedcore import kernels


@pytest.fixture(params=kernels.available_isas())
def isa_level(request):
    """Runs the test with the kernels forced to one ISA level, then restores the previous one."""
    previous = kernels.isa()
    kernels.set_isa(request.param)
    try:
        yield request.param
    finally:
        kernels.set_isa(previous)


# what a skipped interop test tells the reader to install (README.md, "The interop tests")
KERAS_EXTRA = 'pip install "mixedcore[keras]" (Keras 3 and torch as CI tests them)'


@pytest.fixture(scope="session")
def keras():
    """Keras 3 on a CPU backend (torch, else jax), or the test is skipped.  Tests that use it are
    marked ``keras``."""
    import os
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras", reason=f"Keras 3 is not installed: {KERAS_EXTRA}")
    if not keras.__version__.startswith("3."):
        pytest.skip(f"Keras 3 is needed, found {keras.__version__}: {KERAS_EXTRA}")
    return keras
