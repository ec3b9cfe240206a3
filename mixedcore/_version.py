"""The version of mixedcore (a leaf module: the package and its layers import it from here)."""
__version__ = "0.1.0"
