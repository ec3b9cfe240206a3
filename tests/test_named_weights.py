"""Layers hold their weights under Keras's attribute names (``layer.kernel``, ``layer.bias``,
...): each attribute is the very array in ``layer.weights``, None while there is no such weight,
and cannot be assigned."""
import pickle

import numpy as np
import pytest

from mixedcore import layers

# (layer, input shape, {attribute: weight name}) -- the names Keras gives the attributes
CASES = [
    (lambda: layers.Dense(3), (2, 4), {"kernel": "kernel", "bias": "bias"}),
    (lambda: layers.Conv2D(3, 2), (1, 5, 5, 2), {"kernel": "kernel", "bias": "bias"}),
    (lambda: layers.Conv1D(4, 3, groups=2), (1, 6, 2), {"kernel": "kernel", "bias": "bias"}),
    (lambda: layers.DepthwiseConv2D(2), (1, 5, 5, 2), {"kernel": "kernel", "bias": "bias"}),
    (lambda: layers.SeparableConv2D(3, 2), (1, 5, 5, 2),
     {"depthwise_kernel": "depthwise_kernel", "pointwise_kernel": "pointwise_kernel",
      "bias": "bias"}),
    (lambda: layers.Embedding(7, 3), (2, 5), {"embeddings": "embeddings"}),
    (lambda: layers.PReLU(), (2, 4), {"alpha": "alpha"}),
    (lambda: layers.LayerNormalization(), (2, 4), {"gamma": "gamma", "beta": "beta"}),
    (lambda: layers.BatchNormalization(), (2, 4),
     {"gamma": "gamma", "beta": "beta", "moving_mean": "moving_mean",
      "moving_variance": "moving_variance"}),
]


def _input(shape):
    if len(shape) == 2 and shape[1] == 5:        # Embedding: indices
        return np.arange(10).reshape(shape) % 7
    return np.ones(shape, np.float32)


@pytest.mark.parametrize("make, shape, attrs", CASES)
def test_attributes_are_the_weights(make, shape, attrs):
    layer = make()
    assert all(getattr(layer, a) is None for a in attrs)          # not built yet
    layer(_input(shape))
    by_name = {n.split("/", 1)[1]: w for n, w in zip(layer.weight_names(), layer.weights)}
    for attr, name in attrs.items():
        assert getattr(layer, attr) is by_name[name]
    first = next(iter(attrs))
    with pytest.raises(AttributeError, match=f"{first} is a weight of the layer"):
        setattr(layer, first, np.zeros(1))
    restored = pickle.loads(pickle.dumps(layer))
    restored_by_name = {n.split("/", 1)[1]: w for n, w in zip(restored.weight_names(),
                                                               restored.weights)}
    for attr, name in attrs.items():
        assert getattr(restored, attr) is restored_by_name[name]
        assert getattr(restored, attr) is not getattr(layer, attr)
        np.testing.assert_array_equal(getattr(restored, attr), getattr(layer, attr))


@pytest.mark.parametrize("cls, shape", [(layers.Dense, (2, 4)), (layers.Conv2D, (1, 5, 5, 2))])
def test_no_bias_without_use_bias(cls, shape):
    layer = cls(3, use_bias=False) if cls is layers.Dense else cls(3, 2, use_bias=False)
    layer(np.ones(shape, np.float32))
    assert layer.bias is None and [w is layer.kernel for w in layer.weights] == [True]


def test_set_weights_writes_into_the_attributes():
    layer = layers.Dense(2)
    layer(np.ones((1, 3), np.float32))
    kernel, bias = layer.kernel, layer.bias
    layer.set_weights([np.full((3, 2), 0.5), np.array([1.0, 2.0])])
    assert layer.kernel is kernel and layer.bias is bias
    np.testing.assert_array_equal(kernel, 0.5)
    np.testing.assert_array_equal(bias, [1.0, 2.0])


def test_attention_projections_under_keras_attributes():
    layer = layers.MultiHeadAttention(2, 3, use_bias=True)
    assert layer.query_dense.kernel is None
    q = np.ones((1, 4, 5), np.float32)
    layer(q, q)
    by_name = dict(zip(layer.weight_names(), layer.weights))
    for attr, prefix in (("query_dense", "query"), ("key_dense", "key"),
                         ("value_dense", "value"), ("output_dense", "attention_output")):
        proj = getattr(layer, attr)
        assert proj.kernel is by_name[f"{layer.name}/{prefix}/kernel"]
        assert proj.bias is by_name[f"{layer.name}/{prefix}/bias"]
    assert layer.query_dense.kernel.shape == (5, 2, 3)
    assert layer.output_dense.kernel.shape == (2, 3, 5)
    no_bias = layers.MultiHeadAttention(2, 3, use_bias=False)
    no_bias(q, q)
    assert no_bias.value_dense.bias is None and no_bias.value_dense.kernel.shape == (5, 2, 3)
