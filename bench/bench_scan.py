"""Overflow scans: kernels.all_finite beside numpy's isfinite().all() and a read of the same
bytes (numpy's sum, and torch's threaded sum when installed); kernels.unscale_and_check beside
torch's fused _amp_foreach_non_finite_check_and_unscale_ and numpy's two passes.

    pytest bench/bench_scan.py --benchmark-only --benchmark-group-by=group
    python bench/report.py .benchmarks/.../*.json     # ratios per group

"mixedcore-1t" is mixedcore held to one thread.  On a shared machine, threaded timings (ours
and torch's) can include waits for a core; compare the single-thread figures too.

unscale_and_check runs in place with scale 1.0 for every implementation, so that repeated
rounds leave the data unchanged (the cost of a multiply does not depend on the factor).
"""
import ml_dtypes
import numpy as np
import pytest

from benchutil import normal_data, optional_torch, run
from mixedcore import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
DT = {"f16": np.dtype(np.float16), "bf16": BF16, "f32": np.dtype(np.float32),
      "f64": np.dtype(np.float64)}
SIZES = {"1Ki": 1 << 10, "256Ki": 1 << 18, "16Mi": 1 << 24}


def data(name, n):
    return normal_data(DT[name], n)


def torch_view(torch, x):
    if x.dtype == BF16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


@pytest.mark.parametrize("impl", ["mixedcore", "mixedcore-1t", "numpy", "numpy-sum",
                                  "torch-sum"])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("dtype", list(DT))
def test_all_finite(benchmark, dtype, size, impl):
    x = data(dtype, SIZES[size])
    group = f"all_finite {dtype} {size}"
    if impl == "mixedcore":
        assert run(benchmark, group, impl, lambda: kernels.all_finite(x), x.nbytes) is True
    elif impl == "mixedcore-1t":
        with kernels.threads(1):
            assert run(benchmark, group, impl, lambda: kernels.all_finite(x), x.nbytes) is True
    elif impl == "numpy":
        run(benchmark, group, impl, lambda: np.isfinite(x).all(), x.nbytes)
    elif impl == "numpy-sum":
        if dtype not in ("f32", "f64"):
            pytest.skip("the read reference is timed on float32 / float64")
        run(benchmark, group, impl, lambda: x.sum(), x.nbytes)
    else:
        torch = optional_torch()
        if torch is None:
            pytest.skip("torch is not installed")
        if dtype not in ("f32", "f64"):
            pytest.skip("the read reference is timed on float32 / float64")
        t = torch_view(torch, x)
        run(benchmark, group, impl, lambda: t.sum(), x.nbytes)


def test_all_finite_many_small(benchmark):
    """200 gradients of 1-64 Ki elements, mixed dtypes: one call into the compiled core."""
    rng = np.random.default_rng(1)
    arrays = [data(list(DT)[i % 4], 1 << int(rng.integers(10, 17))) for i in range(200)]
    nbytes = sum(a.nbytes for a in arrays)
    group = "all_finite 200 arrays"
    assert run(benchmark, group, "mixedcore", lambda: kernels.all_finite(*arrays), nbytes)


def test_all_finite_many_small_numpy(benchmark):
    rng = np.random.default_rng(1)
    arrays = [data(list(DT)[i % 4], 1 << int(rng.integers(10, 17))) for i in range(200)]
    nbytes = sum(a.nbytes for a in arrays)
    run(benchmark, "all_finite 200 arrays", "numpy",
        lambda: all(np.isfinite(a).all() for a in arrays), nbytes)


@pytest.mark.parametrize("impl", ["mixedcore", "mixedcore-1t", "torch", "numpy"])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_unscale_and_check(benchmark, dtype, size, impl):
    x = data(dtype, SIZES[size]).copy()
    group = f"unscale {dtype} {size}"
    nbytes = 2 * x.nbytes
    if impl == "mixedcore":
        run(benchmark, group, impl, lambda: kernels.unscale_and_check([x], 1.0), nbytes)
    elif impl == "mixedcore-1t":
        with kernels.threads(1):
            run(benchmark, group, impl, lambda: kernels.unscale_and_check([x], 1.0), nbytes)
    elif impl == "numpy":
        one = x.dtype.type(1.0)

        def two_passes():
            ok = np.isfinite(x).all()
            np.multiply(x, one, out=x)
            return ok
        run(benchmark, group, impl, two_passes, nbytes)
    else:
        torch = optional_torch()
        if torch is None:
            pytest.skip("torch is not installed")
        t = torch_view(torch, x)
        found = torch.zeros(1)
        inv = torch.ones(1)
        run(benchmark, group, impl,
            lambda: torch._amp_foreach_non_finite_check_and_unscale_([t], found, inv), nbytes)
