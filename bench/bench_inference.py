"""Inference: mixedcore's Sequential under float32, mixed_float16 and mixed_bfloat16 beside the
same model in numpy float32 and, when installed, torch (float32, ``.to(bfloat16)``, autocast
bfloat16), OpenVINO (bf16 and f32 precision hints) and onnxruntime (float32).

Run (one group per workload; ``--busy`` adds a process spinning on one core for the session):

    python -m pytest bench/bench_inference.py --benchmark-only --benchmark-group-by=group
    python -m pytest bench/bench_inference.py --benchmark-only --benchmark-group-by=group --busy

Workloads (bench/peers.py): MLP 1024-1024-1024-10 at batch 256 and at batch 1, MLP
4096-4096-4096-1000 at batch 64 (Dense + relu twice, Dense, softmax in float32), and a
1024 x 1024 @ 1024 x 1024 GEMM whose right operand is constant (the weights; mixedcore's
bfloat16 row is ``kernels.matmul`` of operands cast to bfloat16 beforehand).

The timed call is one forward pass (one product) with the float32 input.  Every system has the
same weights; everything else happens once, outside the timed region, when the system is built:
its weights cast or packed, its ONNX graph compiled, one warm-up call, and a check of its output
against numpy float32 (a mis-built graph fails there).  A missing optional peer is skipped.
Targets: mixed_bfloat16 >= 1.5x numpy float32 (MLP 1024-wide, batch 256); >= 1.0x OpenVINO bf16
at the best on the MLP workloads.  The interleaved comparison, quiet and busy, with the ratios
the project is judged by, is ``python bench/compare_inference.py``.
"""
import pytest

import peers

MLPS = [k for k, w in peers.WORKLOADS.items() if w.kind == "mlp"]
GEMMS = [k for k, w in peers.WORKLOADS.items() if w.kind == "gemm"]


def _systems(kind):
    return [k for k, s in peers.SYSTEMS.items() if kind in s.kinds]


@pytest.fixture(scope="module", params=MLPS)
def mlp(request):
    """Weights, input and numpy float32 reference of an MLP workload, built once."""
    yield peers.workload_data(request.param)
    peers.remove_onnx_file(request.param)


@pytest.fixture(scope="module", params=GEMMS)
def gemm(request):
    yield peers.workload_data(request.param)
    peers.remove_onnx_file(request.param)


def _run(benchmark, data, system):
    spec = peers.SYSTEMS[system]
    for module in spec.requires:
        pytest.importorskip(module)
    fn = spec.build(data)           # prepared, warmed up and checked outside the timed region
    benchmark.group = data.workload.group
    benchmark.name = spec.label
    benchmark.extra_info["impl"] = spec.label
    benchmark(fn)


@pytest.mark.parametrize("system", _systems("mlp"))
def test_mlp(benchmark, mlp, system):
    _run(benchmark, mlp, system)


@pytest.mark.parametrize("system", _systems("gemm"))
def test_gemm(benchmark, gemm, system):
    _run(benchmark, gemm, system)
