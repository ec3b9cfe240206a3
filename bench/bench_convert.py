"""Conversions: mixedcore.kernels.cast beside numpy / ml_dtypes astype, torch's .to(), and a
threaded plain copy of the same number of bytes (the memory-bandwidth limit).

    pytest bench/bench_convert.py --benchmark-only --benchmark-group-by=group
    python bench/report.py .benchmarks/.../*.json     # ratios per group
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
DIRECTIONS = ["f32-f16", "f16-f32", "f64-f16", "f16-f64", "f32-bf16", "bf16-f32",
              "f64-bf16", "bf16-f64", "f16-bf16", "bf16-f16", "f32-f64", "f64-f32"]
IMPLS = ["mixedcore", "peer", "torch", "copy"]


def source(name, n):
    return normal_data(DT[name], n)


def peer_name(src, dst):
    return "ml_dtypes" if "bf16" in (src, dst) else "numpy"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_convert(benchmark, direction, size, impl):
    src, dst = direction.split("-")
    n = SIZES[size]
    x = source(src, n)
    out = np.empty(n, DT[dst])
    nbytes = n * (DT[src].itemsize + DT[dst].itemsize)
    group = f"{src}->{dst} {size}"
    if impl == "mixedcore":
        run(benchmark, group, "mixedcore", lambda: kernels.cast(x, DT[dst], out=out), nbytes)
    elif impl == "peer":
        with np.errstate(all="ignore"):
            run(benchmark, group, peer_name(src, dst), lambda: x.astype(DT[dst]), nbytes)
    elif impl == "torch":
        torch = optional_torch()
        if torch is None:
            pytest.skip("torch is not installed")
        tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
               "f64": torch.float64}
        t = torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16) if src == "bf16" \
            else torch.from_numpy(x)
        tout = torch.empty(n, dtype=tdt[dst])
        run(benchmark, group, "torch", lambda: tout.copy_(t), nbytes)
    else:
        # a plain threaded copy moving the same bytes: half of them read, half written
        half = nbytes // 2
        a = np.ones(half // 2, dtype=np.float16)
        b = np.empty_like(a)
        run(benchmark, group, "copy", lambda: kernels.cast(a, a.dtype, out=b), nbytes)
