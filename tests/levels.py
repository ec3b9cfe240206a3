"""Running a kernel at a given dispatch level, for the tests that compare levels bit for bit."""
from mixedcore import kernels


def at_level(level, fn, *args, **kw):
    """``fn(*args, **kw)`` with the dispatch level set to ``level``, the previous one restored."""
    previous = kernels.isa()
    kernels.set_isa(level)
    try:
        return fn(*args, **kw)
    finally:
        kernels.set_isa(previous)
