"""mixedcore: CPU mixed-precision numerics with a Keras-compatible Python layer."""
__version__ = "0.1.0"

from mixedcore import kernels

__all__ = ["kernels", "__version__"]
