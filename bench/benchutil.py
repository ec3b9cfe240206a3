"""Shared pieces of the benchmark suites: data, optional baselines and throughput reporting."""
import functools

import numpy as np


def optional_torch():
    """torch when installed (a baseline only, never a dependency), else None."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(2)
    return torch


def run(benchmark, group, impl, fn, nbytes=None, flops=None):
    """Time ``fn`` as implementation ``impl`` in ``group``; record GB/s or GFLOP/s (median)."""
    benchmark.group = group
    benchmark.extra_info["impl"] = impl
    result = benchmark(fn)
    median = benchmark.stats.stats.median if benchmark.stats else None
    if median:
        if nbytes is not None:
            benchmark.extra_info["GB/s"] = round(nbytes / median / 1e9, 2)
        if flops is not None:
            benchmark.extra_info["GFLOP/s"] = round(flops / median / 1e9, 1)
    return result


@functools.lru_cache(maxsize=None)
def normal_data(dtype, n):
    """n normal values times 100 in ``dtype``, built once per (dtype, n) outside timed code."""
    rng = np.random.default_rng(0)
    return (rng.standard_normal(n, dtype=np.float32) * 100).astype(dtype)
