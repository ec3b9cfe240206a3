"""Weight-only quantized GEMM at large M: single products of a BERT-base encoder's feed-forward
sizes at batch 8 x sequence 128 (M = 1024 rows; K x N = 768 x 3072 and 3072 x 768), bfloat16
activations, the weights int4 per column, int4 in groups of 128 rows with zero points, and int8
(kernels.pack_quantized + matmul_quantized), against kernels.matmul on a bfloat16 packed copy
of the dequantized weights.  Interleaved rounds in one process; prints best and median per
product and the speed ratios (bfloat16 time over quantized time: above 1, the quantized
product is faster).

    python bench/compare_quantized_large.py                  # 2 threads, 15 rounds of 10 calls
    python bench/compare_quantized_large.py --m 256 --threads 1 --isa avx512
"""
import argparse
import os
import statistics
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import interleaved_rounds  # noqa: E402
from compare_quantized_chain import int4_storage, quantize  # noqa: E402

from mixedcore import kernels  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
LAYOUTS = (("int4", 4, None), ("int4 block 128", 4, 128), ("int8", 8, None))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--isa", default=None, help="a lower dispatch level (kernels.set_isa)")
    args = ap.parse_args()
    if args.isa:
        kernels.set_isa(args.isa)
    rng = np.random.default_rng(0)
    fns = {}
    for k, n in ((768, 3072), (3072, 768)):
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        x = rng.standard_normal((args.m, k)).astype(BF16)
        shape = f"{k}x{n}"
        for name, bits, block in LAYOUTS:
            q, scale, zero = quantize(w, bits, block)
            kernel = int4_storage(q) if bits == 4 else q
            pq = kernels.pack_quantized(kernel, bits=bits, scale=scale, zero=zero,
                                        block_size=block, n=n if bits == 4 else None)
            pb = kernels.pack(pq.dequantize(), dtype="bfloat16")
            fns[(shape, name, "quantized")] = (
                lambda x=x, p=pq: kernels.matmul_quantized(x, p, out_dtype="bfloat16"))
            fns[(shape, name, "bfloat16")] = (
                lambda x=x, p=pb: kernels.matmul(x, p, out_dtype="bfloat16"))
    with kernels.threads(args.threads):
        for fn in fns.values():
            fn()
        times = interleaved_rounds(fns, args.rounds, args.calls)
    print(f"M {args.m}, bfloat16 a and out, {args.threads} threads, level {kernels.isa()}, "
          f"{args.rounds} interleaved rounds of {args.calls} calls")
    print("| K x N | weights | quantized best ms | median ms | bfloat16 best ms | median ms | "
          "ratio best | ratio median | quantized GFLOP/s (best) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (shape, name, kind), t in times.items():
        if kind != "quantized":
            continue
        b = times[(shape, name, "bfloat16")]
        k, n = map(int, shape.split("x"))
        qb, qm, bb, bm = min(t), statistics.median(t), min(b), statistics.median(b)
        print(f"| {shape} | {name} | {qb * 1e3:.3f} | {qm * 1e3:.3f} | {bb * 1e3:.3f} | "
              f"{bm * 1e3:.3f} | {bb / qb:.2f}x | {bm / qm:.2f}x | "
              f"{2 * args.m * k * n / qb / 1e9:.0f} |")


if __name__ == "__main__":
    main()
