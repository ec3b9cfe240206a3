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
