"""``python -m mixedcore bench``: a quick table of the kernels beside numpy, ml_dtypes and torch.

For a careful measurement use the pytest-benchmark suites in bench/; this is the two-minute look.
Each entry is the best of several timed runs (at least ``min_time`` seconds in all).
"""
import time

import numpy as np

from mixedcore import kernels
from mixedcore._dtypes import BF16


def _best(fn, min_time):
    fn()
    best = float("inf")
    total = 0.0
    runs = 0
    while total < min_time or runs < 3:
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best = min(best, dt)
        total += dt
        runs += 1
    return best


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_mlp(torch, x, width):
    net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                              torch.nn.Linear(width, width), torch.nn.ReLU(),
                              torch.nn.Linear(width, 10)).eval()
    tx = torch.from_numpy(x)

    def forward():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return net(tx)
    return forward


def _mlp_rows(add, rng, torch, width, batch=256):
    """Inference of an MLP width-width-width-10 under mixed_bfloat16 and mixed_float16, beside
    the same model in numpy float32 and torch (bfloat16 autocast)."""
    from mixedcore import layers, models
    from mixedcore.dtype_policies import policy_scope
    x = rng.normal(size=(batch, width)).astype(np.float32)
    weights = []
    for n_in, n_out in ((width, width), (width, width), (width, 10)):
        weights += [rng.uniform(-1, 1, size=(n_in, n_out)).astype(np.float32) / np.sqrt(n_in),
                    np.zeros(n_out, np.float32)]
    w1, b1, w2, b2, w3, b3 = weights

    def numpy_forward():
        h = np.maximum(x @ w1 + b1, 0)
        return np.maximum(h @ w2 + b2, 0) @ w3 + b3

    torch_forward = None if torch is None else _torch_mlp(torch, x, width)

    for policy in ("mixed_bfloat16", "mixed_float16"):
        with policy_scope(policy):
            model = models.Sequential([layers.Input(shape=(width,)),
                                       layers.Dense(width, activation="relu"),
                                       layers.Dense(width, activation="relu"),
                                       layers.Dense(10)])
        model.set_weights(weights)
        add(f"MLP {width}x3, batch {batch}, {policy}", "samples/s", lambda s: batch / s,
            lambda m=model: m(x), numpy_forward, None,
            torch_forward if policy == "mixed_bfloat16" else None)


def run(size=1 << 22, gemm=1024, min_time=0.2, out=print):
    """Print the table; returns its rows (name, unit, mixedcore, numpy, ml_dtypes, torch)."""
    torch = _torch()
    rng = np.random.default_rng(0)
    f32 = rng.normal(size=size).astype(np.float32)
    f16 = f32.astype(np.float16)
    bf16 = f32.astype(BF16)
    rows = []

    def gbs(nbytes, seconds):
        return nbytes / seconds / 1e9

    def add(name, unit, work, mc, base_np=None, base_ml=None, base_torch=None):
        vals = [work(_best(mc, min_time))]
        for fn in (base_np, base_ml, base_torch):
            vals.append(None if fn is None else work(_best(fn, min_time)))
        rows.append((name, unit, *vals))

    nb = size * 6
    add("cast float32 -> float16", "GB/s", lambda s: gbs(nb, s),
        lambda: kernels.cast(f32, np.float16), lambda: f32.astype(np.float16), None,
        None if torch is None else (lambda t=torch.from_numpy(f32): t.to(torch.float16)))
    add("cast float16 -> float32", "GB/s", lambda s: gbs(nb, s),
        lambda: kernels.cast(f16, np.float32), lambda: f16.astype(np.float32), None,
        None if torch is None else (lambda t=torch.from_numpy(f16): t.to(torch.float32)))
    add("cast float32 -> bfloat16", "GB/s", lambda s: gbs(nb, s),
        lambda: kernels.cast(f32, BF16), None, lambda: f32.astype(BF16),
        None if torch is None else (lambda t=torch.from_numpy(f32): t.to(torch.bfloat16)))
    add("cast bfloat16 -> float32", "GB/s", lambda s: gbs(nb, s),
        lambda: kernels.cast(bf16, np.float32), None, lambda: bf16.astype(np.float32), None)
    if hasattr(kernels, "all_finite"):
        add("all_finite float32", "GB/s", lambda s: gbs(size * 4, s),
            lambda: kernels.all_finite(f32), lambda: bool(np.isfinite(f32).all()), None,
            None if torch is None else (lambda t=torch.from_numpy(f32):
                                        bool(torch.isfinite(t).all())))
        add("all_finite float16", "GB/s", lambda s: gbs(size * 2, s),
            lambda: kernels.all_finite(f16), lambda: bool(np.isfinite(f16).all()), None, None)
    n = gemm
    a32 = rng.normal(size=(n, n)).astype(np.float32)
    b32 = rng.normal(size=(n, n)).astype(np.float32)
    a16, b16 = a32.astype(BF16), b32.astype(BF16)
    h16, g16 = a32.astype(np.float16), b32.astype(np.float16)
    flop = 2.0 * n ** 3

    def gflops(s):
        return flop / s / 1e9

    add(f"matmul float32 {n}^3", "GFLOP/s", gflops, lambda: kernels.matmul(a32, b32),
        lambda: a32 @ b32, None,
        None if torch is None else (lambda x=torch.from_numpy(a32), y=torch.from_numpy(b32):
                                    x @ y))
    add(f"matmul bfloat16 {n}^3", "GFLOP/s", gflops,
        lambda: kernels.matmul(a16, b16, out_dtype=BF16), None, lambda: a16 @ b16,
        None if torch is None else (lambda x=torch.from_numpy(a32).bfloat16(),
                                    y=torch.from_numpy(b32).bfloat16(): x @ y))
    add(f"matmul float16 {n}^3", "GFLOP/s", gflops,
        lambda: kernels.matmul(h16, g16, out_dtype=np.float16),
        lambda: (h16.astype(np.float32) @ g16.astype(np.float32)).astype(np.float16), None,
        None)
    _mlp_rows(add, rng, torch, min(gemm, 1024))
    header = ("operation", "unit", "mixedcore", "numpy", "ml_dtypes",
              "torch" if torch is not None else "torch (not installed)")
    table = [header] + [(r[0], r[1]) + tuple("-" if v is None else f"{v:,.1f}" for v in r[2:])
                        for r in rows]
    widths = [max(len(r[c]) for r in table) for c in range(len(header))]
    out(f"mixedcore kernels, ISA {kernels.isa()}, {kernels.get_num_threads()} thread(s); "
        f"{size:,} elements per scan/cast. numpy's float16 matmul is upcast + sgemm; the MLP "
        f"baselines are numpy float32 and torch bfloat16 autocast")
    for i, r in enumerate(table):
        out("  ".join(c.rjust(w) if i and k >= 2 else c.ljust(w)
                      for k, (c, w) in enumerate(zip(r, widths))).rstrip())
        if i == 0:
            out("  ".join("-" * w for w in widths))
    return rows
