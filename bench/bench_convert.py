"""Conversions: mixedcore.kernels.cast beside numpy / ml_dtypes astype, torch's .to(), and a
threaded plain copy of the same number of bytes (the memory-bandwidth limit).

    pytest bench/bench_convert.py --benchmark-only --benchmark-group-by=group
    python bench/report.py .benchmarks/.../*.json     # ratios per group
    python bench/bench_convert.py [rounds]            # float8 against the copy, interleaved
"""
import ml_dtypes
import numpy as np
import pytest

from benchutil import normal_data, optional_torch, run
from mixedcore import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
DT = {"f16": np.dtype(np.float16), "bf16": BF16, "f32": np.dtype(np.float32),
      "f64": np.dtype(np.float64), "e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
      "e5m2": np.dtype(ml_dtypes.float8_e5m2)}
SIZES = {"1Ki": 1 << 10, "256Ki": 1 << 18, "16Mi": 1 << 24}
DIRECTIONS = ["f32-f16", "f16-f32", "f64-f16", "f16-f64", "f32-bf16", "bf16-f32",
              "f64-bf16", "bf16-f64", "f16-bf16", "bf16-f16", "f32-f64", "f64-f32",
              "f32-e4m3", "e4m3-bf16", "e4m3-f32", "f32-e5m2", "e5m2-f32", "bf16-e4m3"]
IMPLS = ["mixedcore", "peer", "torch", "copy"]
UINT = {1: np.uint8, 2: np.uint16}


def source(name, n):
    return normal_data(DT[name], n)


def copy_of_same_bytes(nbytes):
    """A threaded plain copy moving ``nbytes`` (half read, half written), as the suite's "copy"."""
    a = np.ones(nbytes // 4, dtype=np.float16)
    b = np.empty_like(a)
    return lambda: kernels.cast(a, a.dtype, out=b)


def peer_name(src, dst):
    return "numpy" if {src, dst} <= {"f16", "f32", "f64"} else "ml_dtypes"


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
               "f64": torch.float64, "e4m3": getattr(torch, "float8_e4m3fn", None),
               "e5m2": getattr(torch, "float8_e5m2", None)}
        if tdt[src] is None or tdt[dst] is None:
            pytest.skip("this torch has no float8 types")
        if src in ("bf16", "e4m3", "e5m2"):     # ml_dtypes' types: shared as raw bits
            t = torch.from_numpy(x.view(UINT[x.dtype.itemsize])).view(tdt[src])
        else:
            t = torch.from_numpy(x)
        tout = torch.empty(n, dtype=tdt[dst])
        run(benchmark, group, "torch", lambda: tout.copy_(t), nbytes)
    else:
        run(benchmark, group, "copy", copy_of_same_bytes(nbytes), nbytes)


# -- float8 against the copy, interleaved (python bench/bench_convert.py [rounds]) -------------------

FLOAT8_CASES = ["f32-e4m3", "e4m3-bf16", "e4m3-f32", "f32-e5m2", "e5m2-f32", "bf16-e4m3"]


def main(rounds=25, n=SIZES["16Mi"]):
    """Each float8 direction at 16 Mi elements, timed alternately ``rounds`` times with two
    threaded copies (a shared machine's load hits all three alike): the suite's copy moving the
    same number of bytes, and a copy of a destination-sized buffer (destination bytes read and
    written).  Prints best and median times and the ratios copy time / cast time (>= 1 means
    as fast as that copy)."""
    import time
    print(f"| direction ({n} elements) | cast best / median | copy of the same bytes: best / "
          f"median, ratio best / median | copy of the destination: best / median, ratio "
          f"best / median |")
    print("|---|---|---|---|")
    for direction in FLOAT8_CASES:
        src, dst = direction.split("-")
        x, out = source(src, n), np.empty(n, DT[dst])
        fns = [lambda: kernels.cast(x, DT[dst], out=out),
               copy_of_same_bytes(n * (DT[src].itemsize + DT[dst].itemsize)),
               copy_of_same_bytes(2 * n * DT[dst].itemsize)]
        times = [[] for _ in fns]
        for fn in fns:
            fn()
        for _ in range(rounds):
            for fn, t in zip(fns, times):
                t0 = time.perf_counter()
                fn()
                t.append(time.perf_counter() - t0)
        tc, *copies = (np.array(t) for t in times)
        cells = [f"{tp.min() * 1e3:.2f} / {np.median(tp) * 1e3:.2f} ms, "
                 f"{tp.min() / tc.min():.2f} / {np.median(tp / tc):.2f}" for tp in copies]
        print(f"| {src} -> {dst} | {tc.min() * 1e3:.2f} / {np.median(tc) * 1e3:.2f} ms "
              f"| {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    import sys
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 25)
