"""``tf.keras.mixed_precision.experimental``: the deprecated experimental ``Policy``,
``set_policy`` and ``global_policy`` (defined in ``mixedcore/dtype_policies/_experimental.py``,
docs/policies.md, 'The experimental Policy'), and ``LossScaleOptimizer``."""
from mixedcore.dtype_policies._experimental import Policy, global_policy, set_policy
from mixedcore.optimizers import LossScaleOptimizer

__all__ = ["Policy", "set_policy", "global_policy", "LossScaleOptimizer"]
