"""Convolution benchmarks: kernels.conv2d beside kernels.matmul of the same FLOPs.

Run:

    python -m pytest bench/bench_conv.py --benchmark-only --benchmark-group-by=group -s
    python bench/bench_conv.py [rounds]      # interleaved best-of comparison (docs/conv.md)

Each group is one convolution and one dtype: ``conv2d`` with packed weights, and ``matmul`` of
the (M, K) x (K, N) product the convolution amounts to (M = batch * out_height * out_width,
K = kh * kw * channels, N = filters), with the same weights packed the same way and its A
operand already in memory (the im2col matrix made ahead, outside the timing); and a square
``matmul`` (n, n) x (n, n) of about the same FLOPs, the GEMM at its best shape.  GFLOP/s
(FLOPs / time) of the median and of the best round is in extra_info; the conv test also records
``ratio`` and ``ratio_square``, the convolution's best rate over each GEMM's best rate in the
same group (the target is >= 0.70), and prints them.  Best rounds, because on a shared machine
the medians of consecutive tests see different loads.
The ``layer`` rows time ``layers.Conv2D`` inference under the matching policy (input already in
the compute dtype, kernel packed at the first call).
"""
import ml_dtypes
import numpy as np
import pytest

from mixedcore import kernels, layers

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"float32": np.dtype(np.float32), "bfloat16": BF16, "float16": np.dtype(np.float16)}
POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
# (batch, height, width, channels), kernel size, filters
CASES = [((64, 32, 32, 64), 3, 64), ((64, 32, 32, 64), 1, 64), ((16, 56, 56, 64), 3, 128)]
_GEMM_BEST = {}    # best time of each GEMM row, scaled to the convolution's FLOPs


def _id(case):
    (n, h, w, c), k, f = case
    return f"{n}x{h}x{w}x{c}-k{k}-f{f}"


@pytest.fixture(scope="module", params=CASES, ids=_id)
def case(request):
    (n, h, w, c), k, f = request.param
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    kernel = (rng.standard_normal((k, k, c, f)) * 0.1).astype(np.float32)
    return request.param, x, kernel


def _flops(case_params):
    (n, h, w, c), k, f = case_params
    return 2.0 * n * h * w * k * k * c * f          # "same" padding, stride 1


def _time(benchmark, group, label, fn, flops):
    benchmark.group = group
    benchmark.name = label
    fn()                                   # warm: thread team, work buffers
    benchmark(fn)
    if benchmark.stats is None:            # --benchmark-disable
        return None
    stats = benchmark.stats.stats
    benchmark.extra_info["gflops"] = round(flops / stats.median / 1e9, 1)
    benchmark.extra_info["gflops_best"] = round(flops / stats.min / 1e9, 1)
    return stats.min


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_gemm_same_flops(benchmark, case, dtype):
    params, x, kernel = case
    dt = DTYPES[dtype]
    xd = kernels.cast(x, dt)
    k = kernel.shape[0]
    cols = kernels.im2col(xd, k, padding="same")
    packed = kernels.pack(kernel.reshape(-1, kernel.shape[3]), dtype=dt)
    _GEMM_BEST[(_id(params), dtype)] = _time(
        benchmark, f"conv {_id(params)} {dtype}", "matmul (im2col ahead)",
        lambda: kernels.matmul(cols, packed), _flops(params))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_gemm_square_same_flops(benchmark, case, dtype):
    params, x, kernel = case
    dt = DTYPES[dtype]
    flops = _flops(params)
    n = int(round((flops / 2.0) ** (1.0 / 3.0)))
    rng = np.random.default_rng(1)
    a = kernels.cast(rng.standard_normal((n, n)).astype(np.float32), dt)
    packed = kernels.pack(rng.standard_normal((n, n)).astype(np.float32), dtype=dt)
    best = _time(benchmark, f"conv {_id(params)} {dtype}", f"matmul square {n}",
                 lambda: kernels.matmul(a, packed), 2.0 * n ** 3)
    if best:
        _GEMM_BEST[(_id(params), dtype, "square")] = best * flops / (2.0 * n ** 3)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_conv2d(benchmark, case, dtype):
    params, x, kernel = case
    dt = DTYPES[dtype]
    xd = kernels.cast(x, dt)
    packed = kernels.pack_conv(kernel, dtype=dt)
    best = _time(benchmark, f"conv {_id(params)} {dtype}", "conv2d",
                 lambda: kernels.conv2d(xd, packed, padding="same"), _flops(params))
    for key, label in ((None, "ratio"), ("square", "ratio_square")):
        gemm = _GEMM_BEST.get((_id(params), dtype) + ((key,) if key else ()))
        if best and gemm:
            ratio = gemm / best
            benchmark.extra_info[label] = round(ratio, 3)
            print(f"\nconv {_id(params)} {dtype}: conv2d rate / {label[6:] or 'im2col'} "
                  f"matmul rate = {ratio:.3f}")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_conv2d_layer(benchmark, case, dtype):
    params, x, kernel = case
    dt = DTYPES[dtype]
    layer = layers.Conv2D(kernel.shape[3], kernel.shape[0], padding="same",
                          dtype=POLICIES[dtype])
    layer.build_from_shape(x.shape)
    layer.set_weights([kernel, np.zeros(kernel.shape[3], np.float32)])
    xd = kernels.cast(x, dt)
    _time(benchmark, f"conv {_id(params)} {dtype}", f"layer Conv2D {POLICIES[dtype]}",
          lambda: layer(xd), _flops(params))


# -- interleaved comparison (python bench/bench_conv.py [rounds]) ----------------------------------

def _operands(params, dtype):
    """The three timed callables of one group: conv2d, matmul of the same product, square matmul
    (the last with its FLOPs scale to the convolution's)."""
    (n, h, w, c), k, f = params
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    kernel = (rng.standard_normal((k, k, c, f)) * 0.1).astype(np.float32)
    dt = DTYPES[dtype]
    xd = kernels.cast(x, dt)
    pconv = kernels.pack_conv(kernel, dtype=dt)
    cols = kernels.im2col(xd, k, padding="same")
    pmat = kernels.pack(kernel.reshape(-1, f), dtype=dt)
    flops = _flops(params)
    s = int(round((flops / 2.0) ** (1.0 / 3.0)))
    a = kernels.cast(rng.standard_normal((s, s)).astype(np.float32), dt)
    psq = kernels.pack(rng.standard_normal((s, s)).astype(np.float32), dtype=dt)
    return flops, {"conv2d": (lambda: kernels.conv2d(xd, pconv, padding="same"), 1.0),
                   "matmul": (lambda: kernels.matmul(cols, pmat), 1.0),
                   "square": (lambda: kernels.matmul(a, psq), flops / (2.0 * s ** 3))}


def main(rounds=12):
    """Best of ``rounds`` interleaved runs of each callable (a shared machine's load hits them
    alike); prints a markdown table of GFLOP/s and the ratios."""
    import time
    print("| case | dtype | conv2d | matmul, same product | ratio | square matmul, same FLOPs "
          "| ratio |")
    print("|---|---|---|---|---|---|---|")
    for params in CASES:
        for dtype in DTYPES:
            flops, fns = _operands(params, dtype)
            best = {key: float("inf") for key in fns}
            for fn, _ in fns.values():
                fn()
            for _ in range(rounds):
                for key, (fn, scale) in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    best[key] = min(best[key], (time.perf_counter() - t0) * scale)
            rate = {key: flops / t / 1e9 for key, t in best.items()}
            print(f"| {_id(params)} | {dtype} | {rate['conv2d']:.0f} | {rate['matmul']:.0f} | "
                  f"{rate['conv2d'] / rate['matmul']:.2f} | {rate['square']:.0f} | "
                  f"{rate['conv2d'] / rate['square']:.2f} |", flush=True)


if __name__ == "__main__":
    import sys
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 12)
