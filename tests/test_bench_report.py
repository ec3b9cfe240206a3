"""bench/report.py: every group of the benchmark suites prints its ratios, each to the right
reference (the rows are named as the suites name them)."""
import importlib.util
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("bench_report",
                                                  os.path.join(ROOT, "bench", "report.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(group, name, median, impl=None, **extra):
    if impl is not None:
        extra["impl"] = impl
    return {"group": group, "name": name, "stats": {"median": median}, "extra_info": extra}


ROWS = [
    # bench_convert / bench_scan: impl in extra_info, "mixedcore" the reference
    _row("f32->f16 16Mi", "test_convert[a]", 2e-3, "mixedcore", **{"GB/s": 50.0}),
    _row("f32->f16 16Mi", "test_convert[b]", 3e-2, "numpy", **{"GB/s": 3.3}),
    # bench_gemm: benchmark.name "mixedcore <dtype>", baselines of each precision
    _row("gemm 1024x1024x1024", "mixedcore float32", 4e-3, gflops=500.0),
    _row("gemm 1024x1024x1024", "mixedcore bfloat16", 2e-3, gflops=1000.0),
    _row("gemm 1024x1024x1024", "numpy float32", 6e-3, gflops=333.0),
    _row("gemm 1024x1024x1024", "numpy bfloat16 upcast+sgemm", 1e-2, gflops=200.0),
    _row("gemm 1024x1024x1024", "torch bfloat16", 3e-3, gflops=666.0),
    # bench_inference: policies in the mixedcore rows, "bf16" / "f32" in OpenVINO's
    _row("mlp 1024-1024-1024-10, batch 256", "mixedcore float32", 2e-2, "mixedcore float32"),
    _row("mlp 1024-1024-1024-10, batch 256", "mixedcore mixed_bfloat16", 1e-2,
         "mixedcore mixed_bfloat16"),
    _row("mlp 1024-1024-1024-10, batch 256", "OpenVINO bf16", 8e-3, "OpenVINO bf16"),
    _row("mlp 1024-1024-1024-10, batch 256", "OpenVINO f32", 3e-2, "OpenVINO f32"),
    _row("mlp 1024-1024-1024-10, batch 256", "torch .to(bfloat16)", 4e-2, "torch .to(bfloat16)"),
    # bench_conv: rates, the square matmul doing other FLOPs than the convolution
    _row("conv 64x32x32x64-k3-f64 bfloat16", "matmul (im2col ahead)", 4e-2, gflops=100.0),
    _row("conv 64x32x32x64-k3-f64 bfloat16", "matmul square 1342", 3e-2, gflops=160.0),
    _row("conv 64x32x32x64-k3-f64 bfloat16", "conv2d", 2e-2, gflops=200.0),
    # bench_models
    _row("cnn mixed_float16 batch 64", "mixedcore", 1e-2, "mixedcore"),
    _row("cnn mixed_float16 batch 64", "keras", 9e-2, "keras"),
    # bench_int8 and bench_quantized: the quantized rows against bfloat16
    _row("int8 vs bfloat16 1024^3, B packed", "int8", 5e-3, gops=430),
    _row("int8 vs bfloat16 1024^3, B packed", "bfloat16", 1e-2, gops=215),
    _row("1 x 4096 x 4096", "test_layer[1-int4]", 1e-4, "int4"),
    _row("1 x 4096 x 4096", "test_layer[1-int8]", 2.5e-4, "int8"),
    _row("1 x 4096 x 4096", "test_layer[1-bfloat16]", 1e-3, "bfloat16"),
    # bench_scale: the row recorded first
    _row("predict rows/s", "test_inprocess", 0.5, "in-process, 2 threads", **{"rows/s": 1000}),
    _row("predict rows/s", "test_distributed[1]", 1.0, "LocalCluster, 1 x 1 thread",
         **{"rows/s": 500}),
]


def _lines(report, tmp_path, capsys, rows=ROWS):
    path = tmp_path / "out.json"
    path.write_text(json.dumps({"benchmarks": rows}))
    report.main(str(path))
    lines = capsys.readouterr().out.splitlines()
    by_group = {g: [line for line in lines if line.startswith(f"{g:28s} ")]
                for g in {r["group"] for r in rows}}
    assert all(len(found) == 1 for found in by_group.values()) and len(lines) == len(by_group)
    return {g: found[0] for g, found in by_group.items()}


def test_every_group_prints_its_ratios(report, tmp_path, capsys):
    lines = _lines(report, tmp_path, capsys)
    assert len(lines) == len({r["group"] for r in ROWS})
    for group, line in lines.items():
        assert " x" in line, f"no ratio for {group}: {line}"


def test_each_ratio_is_taken_against_its_reference(report, tmp_path, capsys):
    out = "\n".join(_lines(report, tmp_path, capsys).values())
    assert "numpy 30000.0us 3.3 GB/s x15.00" in out
    assert "numpy float32 6000.0us 333.0 gflops x1.50 vs mixedcore float32" in out
    assert "numpy bfloat16 upcast+sgemm 10000.0us 200.0 gflops x5.00 vs mixedcore bfloat16" \
        in out
    assert "torch bfloat16 3000.0us 666.0 gflops x1.50 vs mixedcore bfloat16" in out
    assert "OpenVINO bf16 8000.0us x0.80 vs mixedcore mixed_bfloat16" in out
    assert "OpenVINO f32 30000.0us x1.50 vs mixedcore float32" in out
    assert "torch .to(bfloat16) 40000.0us x4.00 vs mixedcore mixed_bfloat16" in out
    # conv2d's rate over the row's rate
    assert "matmul (im2col ahead) 40000.0us 100.0 gflops x2.00" in out
    assert "matmul square 1342 30000.0us 160.0 gflops x1.25" in out
    assert "keras 90000.0us x9.00" in out
    assert "bfloat16 10000.0us 215 gops x2.00" in out
    assert "bfloat16 1000.0us x10.00 vs int4, x4.00 vs int8" in out
    assert "LocalCluster, 1 x 1 thread 1000000.0us 500 rows/s x2.00" in out


def test_references_are_listed_first(report, tmp_path, capsys):
    lines = _lines(report, tmp_path, capsys)
    gemm = "gemm 1024x1024x1024"
    names = [re.match(r"(.*?) [\d.]+us", part).group(1)
             for part in lines[gemm][len(f"{gemm:28s} "):].split(" | ")]
    assert names == ["mixedcore float32", "mixedcore bfloat16", "numpy bfloat16 upcast+sgemm",
                     "numpy float32", "torch bfloat16"]
    conv = "conv 64x32x32x64-k3-f64 bfloat16"
    assert lines[conv].startswith(f"{conv} conv2d 20000.0us 200.0 gflops | matmul")
    refs, measure = report.references(["int8", "bfloat16"])
    assert refs == {"bfloat16": ["int8"]} and measure == "time"
    refs, _ = report.references(["mixedcore float32", "mixedcore mixed_float16", "torch float16",
                                 "numpy int8"])
    assert refs == {"torch float16": ["mixedcore mixed_float16"],
                    "numpy int8": ["mixedcore float32"]}
    assert report.references(["only"]) == ({}, "time")
