"""Central finite differences, shared by the layer and model gradient tests."""
import numpy as np


def numeric_grad(f, array, eps=1e-6):
    """d f() / d array by central differences, perturbing ``array`` in place element by element
    (each element is restored)."""
    grad = np.zeros_like(array)
    for idx in np.ndindex(array.shape):
        keep = array[idx]
        array[idx] = keep + eps
        up = f()
        array[idx] = keep - eps
        down = f()
        array[idx] = keep
        grad[idx] = (up - down) / (2 * eps)
    return grad
