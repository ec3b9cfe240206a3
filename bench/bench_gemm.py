"""GEMM benchmarks: mixedcore.kernels.matmul beside numpy, "upcast then matmul" and torch.

Run (a fair OpenBLAS baseline needs its own core-type detection, see
docs/benchmarks.md, 'How to run'):

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \\
        python -m pytest bench/bench_gemm.py --benchmark-only --benchmark-group-by=group

Each group is one shape; GFLOP/s (2 * m * n * k / time, on the median) is in extra_info.
"""
import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels

try:
    import torch
except ImportError:          # optional baseline
    torch = None

BF16 = np.dtype(ml_dtypes.bfloat16)
SHAPES = [(256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048),
          (1, 1024, 1024), (32, 1024, 1024), (256, 1024, 1024)]


def _id(shape):
    return "x".join(map(str, shape))


@pytest.fixture(scope="module", params=SHAPES, ids=_id)
def operands(request):
    m, k, n = request.param
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return request.param, {
        "float32": (a, b),
        "float16": (a.astype(np.float16), b.astype(np.float16)),
        "bfloat16": (a.astype(BF16), b.astype(BF16)),
    }


def _run(benchmark, shape, label, fn):
    m, k, n = shape
    benchmark.group = f"gemm {_id(shape)}"
    benchmark.name = label
    fn()                                   # warm: thread pools, packing buffers
    benchmark(fn)
    if benchmark.stats is not None:        # None under --benchmark-disable
        median = benchmark.stats.stats.median
        benchmark.extra_info["gflops"] = round(2.0 * m * n * k / median / 1e9, 1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_mixedcore(benchmark, operands, dtype):
    shape, data = operands
    a, b = data[dtype]
    _run(benchmark, shape, f"mixedcore {dtype}", lambda: kernels.matmul(a, b))


def test_numpy_float32(benchmark, operands):
    shape, data = operands
    a, b = data["float32"]
    _run(benchmark, shape, "numpy float32", lambda: a @ b)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_numpy_upcast_then_matmul(benchmark, operands, dtype):
    shape, data = operands
    a, b = data[dtype]
    _run(benchmark, shape, f"numpy {dtype} upcast+sgemm",
         lambda: a.astype(np.float32) @ b.astype(np.float32))


def test_numpy_float16(benchmark, operands):
    shape, data = operands
    if shape != (256, 256, 256):
        pytest.skip("numpy's float16 matmul is far too slow beyond 256")
    a, b = data["float16"]
    _run(benchmark, shape, "numpy float16 @", lambda: a @ b)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch(benchmark, operands, dtype):
    if torch is None:
        pytest.skip("torch is not installed")
    shape, data = operands
    if dtype == "float16" and shape[1] * shape[2] * shape[0] > 1024 * 1024 * 32:
        pytest.skip("torch's CPU float16 matmul is far too slow at this size")
    ta = torch.from_numpy(data["float32"][0]).to(getattr(torch, dtype))
    tb = torch.from_numpy(data["float32"][1]).to(getattr(torch, dtype))
    _run(benchmark, shape, f"torch {dtype}", lambda: ta @ tb)
