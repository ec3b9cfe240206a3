"""``DTypePolicy``, the global policy and ``policy_scope``: the names of
:mod:`mixedcore.dtype_policies`, where they are defined (in ``_policy.py``)."""
from mixedcore.dtype_policies._policy import *  # noqa: F401,F403
from mixedcore.dtype_policies._policy import PolicyLike, __all__  # noqa: F401
