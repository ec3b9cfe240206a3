"""int8 GEMM benchmarks: kernels.matmul_int8 against the project's own bfloat16 GEMM.

Two comparisons (docs/gemm.md, "int8 products"):
  - 1024^3 with B packed ahead, on 2 threads: matmul_int8 (int32 result) against
    kernels.matmul of bfloat16 operands with a bfloat16 PackedMatrix;
  - batch 1 through three 4096 x 4096 layers: per layer quantize_rows then matmul_int8 with
    the scales (the float32 result feeds the next layer), against the same chain in bfloat16
    with packed bfloat16 weights.

As a pytest-benchmark suite:

    python -m pytest bench/bench_int8.py --benchmark-only --benchmark-group-by=group

As a script, the ratios of interleaved rounds (each round times every system `--calls` times,
the order reversed every other round; a round's time is its best call), best and median:

    python bench/bench_int8.py --rounds 15 --calls 10
"""
import argparse
import statistics

import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)


def gemm_systems(n=1024):
    rng = np.random.default_rng(0)
    a8 = rng.integers(-128, 128, (n, n), dtype=np.int8)
    b8 = kernels.pack(rng.integers(-128, 128, (n, n), dtype=np.int8))
    a16 = rng.standard_normal((n, n)).astype(BF16)
    b16 = kernels.pack(rng.standard_normal((n, n)).astype(BF16))
    return {"int8": lambda: kernels.matmul_int8(a8, b8),
            "bfloat16": lambda: kernels.matmul(a16, b16)}


def chain_systems(k=4096, layers=3):
    rng = np.random.default_rng(0)
    w8, s8, w16 = [], [], []
    for _ in range(layers):
        w = rng.standard_normal((k, k)).astype(np.float32)
        ks = (np.float32(127) / (np.abs(w).max(axis=0) + np.float32(1e-7))).astype(np.float32)
        w8.append(kernels.pack(np.clip(np.round(w * ks), -127, 127).astype(np.int8)))
        s8.append(ks)
        w16.append(kernels.pack(w, dtype="bfloat16"))
    x = rng.standard_normal((1, k)).astype(np.float32)
    x16 = x.astype(BF16)

    def int8():
        h = x
        for w, s in zip(w8, s8):
            q, sx = kernels.quantize_rows(h)
            h = kernels.matmul_int8(q, w, a_scale=sx, b_scale=s)
        return h

    def bfloat16():
        h = x16
        for w in w16:
            h = kernels.matmul(h, w, out_dtype="bfloat16")
        return h

    return {"int8": int8, "bfloat16": bfloat16}


@pytest.fixture(scope="module")
def gemm():
    return gemm_systems()


@pytest.fixture(scope="module")
def chain():
    return chain_systems()


@pytest.mark.parametrize("system", ["int8", "bfloat16"])
def test_gemm_1024(benchmark, gemm, system):
    benchmark.group = "int8 vs bfloat16 1024^3, B packed"
    benchmark.name = system
    with kernels.threads(2):
        gemm[system]()
        benchmark(gemm[system])
    if benchmark.stats is not None:
        benchmark.extra_info["gops"] = round(2.0 * 1024 ** 3 / benchmark.stats.stats.median / 1e9)


@pytest.mark.parametrize("system", ["int8", "bfloat16"])
def test_chain_4096(benchmark, chain, system):
    benchmark.group = "batch 1, three 4096 x 4096 layers"
    benchmark.name = system
    with kernels.threads(2):
        chain[system]()
        benchmark(chain[system])


def ratios(fns, rounds, calls):
    """The speed ratio time(bfloat16) / time(int8) of the best times of all rounds, and the
    median of the rounds' ratios (a round's time is its best call)."""
    import time
    per = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            best = float("inf")
            for _ in range(calls):
                t = time.perf_counter()
                fns[name]()
                best = min(best, time.perf_counter() - t)
            per[name].append(best)
    rs = [b / i for b, i in zip(per["bfloat16"], per["int8"])]
    return min(per["bfloat16"]) / min(per["int8"]), statistics.median(rs), per


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    with kernels.threads(2):
        for label, fns, ops in (("1024^3, B packed", gemm_systems(), 2.0 * 1024 ** 3),
                                ("batch 1, 3 x 4096^2", chain_systems(), None)):
            for f in fns.values():
                f()
            best, med, per = ratios(fns, args.rounds, args.calls)
            line = f"{label}: int8 / bfloat16 speed ratio best {best:.2f}, median {med:.2f}"
            for name, ts in per.items():
                t = min(ts)
                line += f"; {name} best {t * 1e3:.3f} ms"
                if ops:
                    line += f" ({ops / t / 1e9:.0f} GOP/s)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
