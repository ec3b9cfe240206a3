"""The random state every mixedcore initializer, dropout and ``fit`` shuffle draws from.

``set_random_seed`` (also ``mixedcore.utils.set_random_seed``, as ``keras.utils``) replaces the
shared generator; ``generator(seed)`` is what layers, initializers and the data batching draw
from: a fresh generator for an explicit seed, else the shared one.
"""
import numpy as np

__all__ = ["set_random_seed", "generator"]

_generator = np.random.default_rng()


def set_random_seed(seed):
    """Make weight initialisation, dropout and shuffling reproducible.

    The counterpart of ``keras.utils.set_random_seed``.

    Parameters
    ----------
    seed : int
        A non-negative integer.

    Raises
    ------
    TypeError
        If ``seed`` is not an int.
    ValueError
        If ``seed`` is negative.
    """
    global _generator
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"set_random_seed: seed must be an int, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"set_random_seed: seed must be >= 0, got {seed}")
    _generator = np.random.default_rng(int(seed))


def generator(seed=None):
    """A numpy ``Generator``: a fresh one for an explicit ``seed``, else the shared one (the
    one :func:`set_random_seed` last set)."""
    if seed is not None:
        return np.random.default_rng(seed)
    return _generator
