"""Small utilities: the random seed every mixedcore layer, initializer and ``fit`` draws from."""
import numpy as np

__all__ = ["set_random_seed"]

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


def _rng(seed=None):
    """A generator: a fresh one for an explicit ``seed``, else the shared one."""
    if seed is not None:
        return np.random.default_rng(seed)
    return _generator
