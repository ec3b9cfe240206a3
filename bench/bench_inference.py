"""Inference of an MLP 1024-1024-1024-10 at batch 256: mixedcore's Sequential under float32,
mixed_float16 and mixed_bfloat16, beside the same model in plain numpy float32 and, when
installed, torch on the CPU (float32, and bfloat16 autocast).

Run: python -m pytest bench/bench_inference.py --benchmark-only --benchmark-group-by=group
Target (BENCH.md): mixed_bfloat16 >= 1.5x numpy float32 and >= 1.0x torch autocast.
The timed call is one forward pass of a 256-sample batch; every model has the same weights, and
the weights' cast to the compute dtype happens once, in the warm-up outside the timed region.
"""
import numpy as np
import pytest

from mixedcore import layers, models
from mixedcore.policy import policy_scope

WIDTHS = (1024, 1024, 1024, 10)
BATCH = 256
GROUP = "mlp 1024-1024-1024-10, batch 256"


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(0)
    ws = []
    fan_in = WIDTHS[0]
    for width in WIDTHS[1:]:
        limit = np.sqrt(6.0 / (fan_in + width))
        ws.append(rng.uniform(-limit, limit, size=(fan_in, width)).astype(np.float32))
        ws.append(rng.normal(scale=0.01, size=width).astype(np.float32))
        fan_in = width
    return ws


@pytest.fixture(scope="module")
def batch():
    return np.random.default_rng(1).normal(size=(BATCH, WIDTHS[0])).astype(np.float32)


def _model(policy, weights):
    with policy_scope(policy):
        model = models.Sequential([layers.Input(shape=(WIDTHS[0],)),
                                   layers.Dense(WIDTHS[1], activation="relu"),
                                   layers.Dense(WIDTHS[2], activation="relu"),
                                   layers.Dense(WIDTHS[3]),
                                   layers.Activation("softmax", dtype="float32")])
    model.set_weights(weights)
    return model


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_mixedcore(benchmark, policy, weights, batch):
    model = _model(policy, weights)
    model(batch)   # warm-up: weights cast to the compute dtype once, then cached
    benchmark.group = GROUP
    benchmark.name = f"mixedcore {policy}"
    out = benchmark(model, batch)
    assert out.shape == (BATCH, WIDTHS[-1])


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_numpy_float32(benchmark, weights, batch):
    w1, b1, w2, b2, w3, b3 = weights

    def forward(x):
        h = np.maximum(x @ w1 + b1, 0)
        h = np.maximum(h @ w2 + b2, 0)
        return _softmax(h @ w3 + b3)

    benchmark.group = GROUP
    benchmark.name = "numpy float32"
    assert benchmark(forward, batch).shape == (BATCH, WIDTHS[-1])


def _torch_model(weights):
    torch = pytest.importorskip("torch")
    mods = []
    for k in range(0, len(weights), 2):
        lin = torch.nn.Linear(weights[k].shape[0], weights[k].shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(weights[k].T.copy()))
            lin.bias.copy_(torch.from_numpy(weights[k + 1]))
        mods.append(lin)
        if k + 2 < len(weights):
            mods.append(torch.nn.ReLU())
    mods.append(torch.nn.Softmax(dim=1))
    return torch, torch.nn.Sequential(*mods).eval()


def test_torch_float32(benchmark, weights, batch):
    torch, net = _torch_model(weights)
    x = torch.from_numpy(batch)

    def forward():
        with torch.inference_mode():
            return net(x)

    benchmark.group = GROUP
    benchmark.name = "torch float32"
    assert tuple(benchmark(forward).shape) == (BATCH, WIDTHS[-1])


def test_torch_autocast_bfloat16(benchmark, weights, batch):
    torch, net = _torch_model(weights)
    x = torch.from_numpy(batch)

    def forward():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return net(x)

    forward()
    benchmark.group = GROUP
    benchmark.name = "torch autocast bfloat16"
    assert tuple(benchmark(forward).shape) == (BATCH, WIDTHS[-1])
