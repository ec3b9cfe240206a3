"""Quantized inference: mixedcore's int8 / int4 models against OpenVINO int8 (quantized by NNCF)
and ONNX Runtime int8 (``quantize_dynamic``) on the same model; interleaved rounds in one
process, 2 threads each; prints one markdown table with best and median times and each system's
error against Keras float32.

    python bench/compare_quantized.py                          # encoder batches 1, 8; MLP batch 1
    python bench/compare_quantized.py --models mlp --batches 1 --rounds 7
    python bench/compare_quantized.py --quick                  # smoke run, small sizes

Models, built on Keras 3's torch backend with random weights and saved as ``.keras``:

- ``encoder``: the BERT-base-size encoder of ``compare_architectures.py`` (12 blocks, width 768,
  12 heads, feed-forward 3072, sequence 128);
- ``mlp``: three Dense 4096 -> 4096 layers (relu, relu, linear) on a 4096-wide input: at batch 1
  each layer is a matrix-vector product that reads all its weights once, the case quantized
  weights are for.

Systems:

- mixedcore: ``load_model(path, dtype_policy="mixed_bfloat16")``, then ``model.quantize("int8")``
  (per-row int8 activations, VPDPBUSD), the same with ``Int8QuantizationConfig(
  activation_quantizer=MinMaxQuantizer())`` (per-row activations with a zero point: "min-max
  activations"), ``quantize("int4")`` (weight-only int4, groups of 128 input rows, the Keras
  default) or ``Int4QuantizationConfig(block_size=-1)`` (one scale per channel); and the
  unquantized mixed_bfloat16 model.  For the accuracy of ONNX Runtime's ``quantize_dynamic``,
  which quantizes the graph's MatMul nodes only (the encoder's feed-forward Dense layers; the
  attention projections are Einsum nodes it leaves in float32), also the model loaded in
  float32 with the same products quantized (``filters`` keeping Dense layers only), with
  min-max activations: "the FFN only, from float32"; and the same products quantized in the
  mixed_bfloat16 model ("the FFN only"), the products NNCF's transformer preset quantizes but
  for the attention scores (it too leaves the projections' Einsum nodes in float); and every
  product but MultiHeadAttention's output projection ("all but the attention output": the
  product whose quantization costs the encoder the most accuracy).  ``Model.quantize`` quantizes the Dense
  layers and MultiHeadAttention's projections (in the encoder: every product with weights;
  the attention's scores and weighted sums stay bfloat16, as in Keras);
- OpenVINO (``INFERENCE_NUM_THREADS`` 2, static input shape) on the ONNX export of the same
  Keras model (``compare_architectures.export_onnx``): bf16, and int8 from ``nncf.quantize``
  (its default post-training quantization, calibrated on 8 inputs of the benchmark's kind;
  ``ModelType.TRANSFORMER`` for the encoder), compiled with the bf16 hint;
- ONNX Runtime (2 intra-op threads): float32, and ``onnxruntime.quantization.quantize_dynamic``
  (int8 weights, dynamically quantized activations) of the same ONNX file.

Before timing, every system's output is compared with Keras float32's (largest absolute
difference over the largest absolute value; also the root mean square difference over the root
mean square value, which one unlucky element does not decide).  Quantized systems are allowed 0.5 (a mis-built
graph is of order 1), bfloat16 ones 0.1, float32 ones 1e-3; the error column is how far each
quantization takes the model.  The ratio is a system's time over mixedcore int8's.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchutil  # noqa: E402
import compare_architectures as arch  # noqa: E402

THREADS = 2
REFERENCE = "mixedcore int8"
TOLERANCE = {"float32": 1e-3, "bfloat16": 1e-1, "quantized": 0.5}


def _mlp(keras, width, layers):
    inp = keras.Input((width,))
    x = inp
    for k in range(layers):
        x = keras.layers.Dense(width, activation="relu" if k < layers - 1 else None)(x)
    return keras.Model(inp, x, name="mlp")


def write_model(name, quick, folder):
    """(keras model, path, input shape, input kind) of ``name``, built, randomized and saved."""
    keras = arch._keras()
    if name == "encoder":
        return arch.write_model("encoder", quick, folder)
    if name == "mlp":
        width = 512 if quick else 4096
        model = _mlp(keras, width, 3)
        arch.randomize(model)
        path = os.path.join(folder, "mlp.keras")
        model.save(path)
        return model, path, (width,), "dense"
    raise SystemExit(f"unknown model {name!r}; expected encoder or mlp")


def inputs(kind, shape, batch, seed=1):
    if kind == "dense":
        return np.random.default_rng(seed).standard_normal((batch,) + shape).astype(np.float32)
    return arch.inputs(kind, shape, batch, seed)


def _dense_only(layer):
    return type(layer).__name__ == "Dense"


def _but_attention_output(layer):
    return getattr(layer, "name", None) != "attention_output"


def _mixedcore(mode, block=None, min_max=False, policy="mixed_bfloat16", filters=None):
    def make(keras_path, onnx_path, x, calibration):
        from mixedcore import models, quantizers
        model = models.load_model(keras_path, dtype_policy=policy)
        if mode is not None:
            config = quantizers.Int4QuantizationConfig(block_size=block) if block else None
            if min_max:
                config = quantizers.Int8QuantizationConfig(
                    activation_quantizer=quantizers.MinMaxQuantizer())
            model.quantize(mode, config=config, filters=filters)
        return lambda: model.predict_on_batch(x)
    return make


def _openvino(int8):
    def make(keras_path, onnx_path, x, calibration):
        import openvino
        core = openvino.Core()
        model = core.read_model(onnx_path)
        model.reshape({0: list(x.shape)})
        if int8:
            import nncf
            kind = nncf.ModelType.TRANSFORMER if x.dtype != np.float32 else None
            dataset = nncf.Dataset([c[: x.shape[0]] for c in calibration])
            model = arch._quietly(lambda: nncf.quantize(model, dataset, model_type=kind,
                                                        subset_size=len(calibration)))
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "bf16",
                                                     "INFERENCE_NUM_THREADS": THREADS})
        request = compiled.create_infer_request()

        def infer():
            return request.infer({0: x}, share_inputs=True, share_outputs=True)[0]
        return infer
    return make


def _onnxruntime(int8):
    def make(keras_path, onnx_path, x, calibration):
        import onnxruntime
        path = onnx_path
        if int8:
            from onnxruntime.quantization import QuantType, quantize_dynamic
            path = onnx_path.replace(".onnx", ".int8.onnx")
            if not os.path.exists(path):
                arch._quietly(lambda: quantize_dynamic(onnx_path, path,
                                                       weight_type=QuantType.QInt8))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(path, options,
                                               providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: x}
        return lambda: session.run(None, feed)[0]
    return make


# (label, precision class, modules needed, needs the ONNX graph, make)
SYSTEMS = [
    ("mixedcore int8", "quantized", (), False, _mixedcore("int8")),
    ("mixedcore int8, min-max activations", "quantized", (), False,
     _mixedcore("int8", min_max=True)),
    ("mixedcore int8, min-max activations, all but the attention output", "quantized", (),
     False, _mixedcore("int8", min_max=True, filters=_but_attention_output)),
    ("mixedcore int8, min-max activations, the FFN only", "quantized", (), False,
     _mixedcore("int8", min_max=True, filters=_dense_only)),
    ("mixedcore int8, min-max activations, the FFN only, from float32", "quantized", (), False,
     _mixedcore("int8", min_max=True, policy="float32", filters=_dense_only)),
    ("mixedcore int4 (groups of 128)", "quantized", (), False, _mixedcore("int4")),
    ("mixedcore int4 (per channel)", "quantized", (), False, _mixedcore("int4", -1)),
    ("mixedcore mixed_bfloat16", "bfloat16", (), False, _mixedcore(None)),
    ("OpenVINO int8 (NNCF)", "quantized", ("openvino", "nncf"), True, _openvino(True)),
    ("OpenVINO bf16", "bfloat16", ("openvino",), True, _openvino(False)),
    ("ONNX Runtime int8 (quantize_dynamic)", "quantized", ("onnxruntime",), True,
     _onnxruntime(True)),
    ("ONNX Runtime float32", "float32", ("onnxruntime",), True, _onnxruntime(False)),
]


def prepare(keras_path, onnx, x, calibration):
    rows, fns = {}, {}
    ref = np.asarray(arch._keras_f32(keras_path, None, x)(), dtype=np.float64)
    onnx_path, onnx_note = onnx
    for label, precision, modules, needs_onnx, make in SYSTEMS:
        row = rows[label] = {"system": label, "error": None, "rms": None, "note": None,
                             "times": []}
        missing = arch._missing(modules)
        if missing:
            row["note"] = f"not installed: {', '.join(missing)}"
            continue
        if needs_onnx and onnx_path is None:
            row["note"] = onnx_note or "no ONNX graph"
            continue
        try:
            fn = make(keras_path, onnx_path, x, calibration)
            out = np.array(fn())
        except Exception as exc:                                # noqa: BLE001 - into the table
            row["note"] = f"failed: {type(exc).__name__}: {exc}"[:200]
            continue
        row["error"] = err = arch._relative_error(ref, out)
        diff = np.asarray(out, dtype=np.float64).reshape(ref.shape) - ref
        row["rms"] = float(np.sqrt(np.mean(diff ** 2) / np.mean(ref ** 2)))
        row["note"] = onnx_note if needs_onnx else None
        if not err <= TOLERANCE[precision]:
            row["note"] = f"output wrong (error {err:.2g} > {TOLERANCE[precision]:g}): not timed"
            continue
        fns[label] = fn
    return rows, fns


def table_lines(results):
    lines = ["| model | batch | system | best ms | median ms | vs mixedcore int8 (best / median) "
             "| error vs Keras f32 (max / rms) | note |", "|---|---|---|---|---|---|---|---|"]
    for res in results:
        ref = next((r for r in res["rows"] if r["system"] == REFERENCE and r["best"]), None)
        for row in res["rows"]:
            best = arch._ms(row["best"]) if row["best"] else "-"
            med = arch._ms(row["median"]) if row["median"] else "-"
            ratio = (f"{row['best'] / ref['best']:.2f}x / {row['median'] / ref['median']:.2f}x"
                     if ref and row["best"] else "-")
            err = (f"{row['error']:.1e} / {row['rms']:.1e}" if row["error"] is not None
                   else "-")
            lines.append(f"| {res['model']} | {res['batch']} | {row['system']} | {best} | {med} "
                         f"| {ratio} | {err} | {row['note'] or ''} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="encoder,mlp")
    parser.add_argument("--batches", default=None,
                        help="comma-separated batches (default: encoder 1,8; mlp 1)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "torch")
    from mixedcore import kernels
    kernels.set_num_threads(THREADS)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            model, path, shape, kind = write_model(name, args.quick, folder)
            default = "1,8" if name == "encoder" else "1"
            for batch in [int(b) for b in (args.batches or default).split(",")]:
                x = inputs(kind, shape, batch)
                calibration = [inputs(kind, shape, batch, seed=100 + k) for k in range(8)]
                onnx = arch.export_onnx(model, x, os.path.join(folder, f"{name}-{batch}.onnx"))
                rows, fns = prepare(path, onnx, x, calibration)
                for label, times in benchutil.interleaved_rounds(fns, args.rounds,
                                                                 args.calls).items():
                    rows[label]["times"].extend(times)
                for row in rows.values():
                    times = sorted(row.pop("times"))
                    row["best"] = times[0] if times else None
                    row["median"] = times[len(times) // 2] if times else None
                results.append({"model": name, "batch": batch, "rows": list(rows.values())})
                print("\n".join(table_lines(results[-1:])), flush=True)
    print()
    print("\n".join(table_lines(results)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
