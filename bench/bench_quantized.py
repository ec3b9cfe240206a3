"""Weight-only quantized GEMM: kernels.matmul_quantized beside kernels.matmul on bfloat16 weights
packed by kernels.pack, batch 1 and 32, one 4096 x 4096 layer, bfloat16 activations.

    python -m pytest bench/bench_quantized.py --benchmark-only --benchmark-group-by=group

For the three-layer chain in interleaved rounds (the figures of docs/benchmarks.md), run
``python bench/compare_quantized_chain.py``.
"""
import ml_dtypes
import numpy as np
import pytest

from benchutil import run
from compare_quantized_chain import int4_storage, quantize
from mixedcore import kernels

BF16 = np.dtype(ml_dtypes.bfloat16)
D = 4096
FORMATS = {"int4": (4, None), "int4 block 128": (4, 128), "int8": (8, None)}


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32)
    packed = {"bfloat16": kernels.pack(w, dtype="bfloat16")}
    for name, (bits, block) in FORMATS.items():
        q, scale, zero = quantize(w, bits, block)
        kernel = int4_storage(q) if bits == 4 else q
        packed[name] = kernels.pack_quantized(kernel, bits=bits, scale=scale, zero=zero,
                                              block_size=block, n=D if bits == 4 else None)
    return packed


@pytest.mark.parametrize("m", [1, 32])
@pytest.mark.parametrize("fmt", ["bfloat16", *FORMATS])
def test_layer(benchmark, weights, fmt, m):
    x = np.random.default_rng(1).standard_normal((m, D)).astype(BF16)
    p = weights[fmt]
    if fmt == "bfloat16":
        def fn():
            return kernels.matmul(x, p, out_dtype="bfloat16")
    else:
        def fn():
            return kernels.matmul_quantized(x, p, out_dtype="bfloat16")
    fn()
    run(benchmark, f"{m} x {D} x {D}", fmt, fn, nbytes=p.nbytes, flops=2.0 * m * D * D)
