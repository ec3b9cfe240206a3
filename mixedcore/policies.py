"""Serialization of dtype policies (``serialize``, ``deserialize``, ``get``): the names of
:mod:`mixedcore.dtype_policies`, where they are defined (in ``_serialization.py``)."""
from mixedcore.dtype_policies._serialization import __all__, deserialize, get, serialize  # noqa: F401
