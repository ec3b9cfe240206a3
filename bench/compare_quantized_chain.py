"""Weight-only quantized GEMM at batch 1: a chain of three 4096 x 4096 Dense products with
bfloat16 activations, the weights int4 (per column, and in groups of 128 rows with zero
points) or int8 (kernels.pack_quantized + matmul_quantized), against the same chain with
bfloat16 weights packed by kernels.pack + matmul.  Interleaved rounds in one process; prints
best and median per chain and the ratios (above 1: the quantized chain is faster).

    python bench/compare_quantized_chain.py                  # 2 threads, 15 rounds of 20 calls
    python bench/compare_quantized_chain.py --threads 1 --rounds 30 --size 4096 --m 1 --isa avx512
"""
import argparse
import os
import statistics
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import interleaved_rounds  # noqa: E402

from mixedcore import kernels  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)


def int4_storage(q):
    """(k, n) values in [-8, 7] -> Keras's int4 kernel (two per byte along the last axis)."""
    lo = q[:, 0::2].astype(np.int16) & 0xF
    hi = np.zeros_like(lo)
    hi[:, :q[:, 1::2].shape[1]] = q[:, 1::2].astype(np.int16) & 0xF
    return (lo | (hi << 4)).astype(np.uint8).view(np.int8)


def quantize(w, bits, block):
    """Keras-style abs-max quantization of a float32 (k, n) weight matrix."""
    qmax = 7 if bits == 4 else 127
    if not block:
        scale = (qmax / np.maximum(np.abs(w).max(axis=0), 1e-7)).astype(np.float32)
        q = np.clip(np.round(w * scale), -qmax - (bits == 4), qmax).astype(np.int8)
        return q, scale, None
    k, n = w.shape
    g = -(-k // block)
    wp = np.zeros((g * block, n), np.float32)
    wp[:k] = w
    wg = wp.reshape(g, block, n)
    lo, hi = wg.min(axis=1), wg.max(axis=1)
    scale = np.maximum((hi - lo) / 15.0, 1e-7).astype(np.float32)
    zero = np.clip(np.round(-8 - lo / scale), -8, 7).astype(np.int8)
    q = np.clip(np.round(wg / scale[:, None]) + zero[:, None], -8, 7).astype(np.int8)
    return q.reshape(g * block, n)[:k], scale, zero


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--isa", default=None, help="a lower dispatch level (kernels.set_isa)")
    args = ap.parse_args()
    if args.isa:
        kernels.set_isa(args.isa)
    rng = np.random.default_rng(0)
    d = args.size
    ws = [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
          for _ in range(args.layers)]
    x = rng.standard_normal((args.m, d)).astype(BF16)

    dense = [kernels.pack(w, dtype="bfloat16") for w in ws]
    chains = {}
    packs = {}
    for name, bits, block in (("int4", 4, None), ("int4 block 128", 4, 128), ("int8", 8, None)):
        pl = []
        for w in ws:
            q, scale, zero = quantize(w, bits, block)
            kernel = int4_storage(q) if bits == 4 else q
            pl.append(kernels.pack_quantized(kernel, bits=bits, scale=scale, zero=zero,
                                             block_size=block, n=d if bits == 4 else None))
        packs[name] = pl

    def bf16_chain():
        h = x
        for p in dense:
            h = kernels.matmul(h, p, activation="relu", out_dtype="bfloat16")
        return h

    def quant_chain(pl):
        def run():
            h = x
            for p in pl:
                h = kernels.matmul_quantized(h, p, activation="relu", out_dtype="bfloat16")
            return h
        return run

    chains["bfloat16 (kernels.pack)"] = bf16_chain
    for name, pl in packs.items():
        chains[name] = quant_chain(pl)
    with kernels.threads(args.threads):
        for fn in chains.values():
            fn()
        times = interleaved_rounds(chains, args.rounds, args.calls)
    base = times["bfloat16 (kernels.pack)"]
    print(f"batch {args.m}, {args.layers} x {d}x{d}, bfloat16 activations, {args.threads} "
          f"threads, level {kernels.isa()}, {args.rounds} interleaved rounds of {args.calls} "
          f"calls")
    print("| chain | weight MiB | best ms | median ms | speed-up best | speed-up median |")
    print("|---|---|---|---|---|---|")
    for name, t in times.items():
        mib = sum(p.nbytes for p in (dense if name in ("bfloat16 (kernels.pack)",)
                                     else packs[name])) / 2 ** 20
        best, med = min(t), statistics.median(t)
        print(f"| {name} | {mib:.0f} | {best * 1e3:.3f} | {med * 1e3:.3f} | "
              f"{min(base) / best:.2f}x | {statistics.median(base) / med:.2f}x |")


if __name__ == "__main__":
    main()
