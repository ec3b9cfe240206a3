"""Real architectures (MobileNetV2, ResNet50, a BERT-base-size encoder) saved by Keras 3, loaded
by mixedcore, against Keras itself, ONNX Runtime and OpenVINO; interleaved rounds in one process,
2 threads each; prints one markdown table with best and median times per system.

    python bench/compare_architectures.py                                   # every model, batch
    python bench/compare_architectures.py --models mobilenetv2,resnet50 --batches 1
    python bench/compare_architectures.py --quick                           # smoke run, small sizes
    python bench/compare_architectures.py --models encoder --batches 8 --json out.json
    python bench/compare_architectures.py --busy       # beside one process spinning on a core

Models, built on Keras 3's torch backend with random weights and saved as ``.keras`` into a
temporary directory, one file per model (every system runs that model):

- ``mobilenetv2``: ``keras.applications.MobileNetV2`` at 224x224 (batches 1 and 32);
- ``resnet50``: ``keras.applications.ResNet50`` at 224x224 (batches 1 and 16);
- ``encoder``: a BERT-base-size encoder: Embedding (vocabulary 1000, width 768), then 12 blocks of
  MultiHeadAttention (12 heads, key_dim 64) + Add + LayerNormalization and a Dense 3072 gelu /
  Dense 768 feed-forward + Add + LayerNormalization, sequence 128 (batches 1 and 8).

``weights=None`` and ``classifier_activation=None`` (the logits are compared, not a 1000-way
softmax of near-uniform probabilities).  Kernels keep Keras's initializers; every
BatchNormalization gets non-trivial statistics (gamma and moving_variance uniform in [0.5, 1.5],
beta and moving_mean normal with standard deviation 0.1), LayerNormalization a gamma near 1 and a
small beta, every bias small normal values.  ``--quick`` builds the same architectures small
(MobileNetV2 alpha 0.35 at 96x96, ResNet50 at 64x64, a 2-block encoder of width 128, sequence
32) for a smoke run.

Systems (each skipped with a note when the module it needs is not installed; the peers are for
benchmarks only and imported lazily):

- mixedcore ``float32`` and ``mixed_bfloat16``: ``load_model(path, dtype_policy=...)``,
  ``predict_on_batch``;
- Keras 3 float32 on the torch backend (``torch.set_num_threads(2)``), ``predict_on_batch`` of
  the model loaded from the same file;
- ONNX Runtime float32 (CPU provider, ``intra_op_num_threads`` 2) and OpenVINO with
  ``INFERENCE_PRECISION_HINT`` ``bf16`` and ``f32`` (``INFERENCE_NUM_THREADS`` 2, input shape
  made static) on ``model.export(path, format="onnx")`` of the same Keras model (Keras's
  torch-backend export: NHWC, every convolution wrapped in Transposes, BatchNormalization as
  separate arithmetic; each runtime applies its own graph optimizations on top).

For the image models the ONNX peers also run two cleaned graphs. "BN folded": :func:`fold_batchnorm`
folds the per-channel Sub/Mul/Add that Keras's export writes for each BatchNormalization into
the preceding convolution's weights and bias, drops its float-to-float Casts, and removes the
NCHW/NHWC Transpose pairs around a Clip or Relu between two convolutions (the Transposes around
residual Adds stay).  "NCHW, BN folded": the same architecture built channels-first in Keras
(``image_data_format`` "channels_first"), given the same weights, exported (an all-NCHW graph
without Transposes), BatchNormalization folded the same way; it is fed the input transposed to
NCHW (outside the timing), and its output is checked like every other.
Keras's export fails on the encoder (MultiHeadAttention); there the ONNX peers run
``torch.onnx.export`` (dynamo) of the same Keras model, with the batch fixed, and the rows say so.

Before timing, every system's output on the timed input is compared with Keras float32's: the
largest absolute difference divided by the largest absolute value of the reference.  A system
over its tolerance (1e-3 for float32 systems, 1e-1 for bf16 ones, where a mis-built graph gives
errors of order 1) is not timed, and the table says so.  In round r each system makes
``--calls`` timed calls, the order of the systems reversed every other round so that a slow
phase of the shared machine falls on all of them.  Best and median are over all calls; the
ratio is a system's time over mixedcore mixed_bfloat16's (above 1: mixedcore mixed_bfloat16 is
faster), for best and for median.  ``--blocks`` times each system's calls in one block instead
(after one untimed call), so that no other library's threads, which may spin for a while after
their calls, share the machine with the system timed.
"""
import argparse
import gc
import importlib
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "torch")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchutil  # noqa: E402
import numpy as np  # noqa: E402

THREADS = 2
MODELS = ["mobilenetv2", "resnet50", "encoder"]
BATCHES = {"mobilenetv2": [1, 32], "resnet50": [1, 16], "encoder": [1, 8]}
QUICK_BATCHES = {"mobilenetv2": [1, 4], "resnet50": [1, 2], "encoder": [1, 2]}
TOLERANCE = {"float32": 1e-3, "bfloat16": 1e-1}
REFERENCE = "mixedcore mixed_bfloat16"


# ---------------------------------------------------------------------------------------------
# the models

def _keras():
    import keras
    import torch
    torch.set_num_threads(THREADS)
    if keras.backend.backend() != "torch":
        raise SystemExit("compare_architectures: set KERAS_BACKEND=torch (Keras's peer row and "
                         "the ONNX export are for the torch backend)")
    return keras


def _encoder(keras, blocks, width, heads, ffn, tokens, vocab=1000):
    L = keras.layers
    inp = L.Input((tokens,), dtype="int32")
    x = L.Embedding(vocab, width)(inp)
    for _ in range(blocks):
        a = L.MultiHeadAttention(num_heads=heads, key_dim=width // heads)(x, x)
        x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, a]))
        f = L.Dense(ffn, activation="gelu")(x)
        f = L.Dense(width)(f)
        x = L.LayerNormalization(epsilon=1e-6)(L.Add()([x, f]))
    return keras.Model(inp, x, name="encoder")


def build(name, quick, channels_first=False):
    """(keras model, input shape without the batch, input kind) of model ``name`` (an image
    model's layers channels-first with ``channels_first``, under Keras's image data format set
    so by the caller)."""
    keras = _keras()
    apps = keras.applications

    def image(size):
        return (3, size, size) if channels_first else (size, size, 3)

    if name == "mobilenetv2":
        size, alpha = (96, 0.35) if quick else (224, 1.0)
        model = apps.MobileNetV2(input_shape=image(size), alpha=alpha, weights=None,
                                 classifier_activation=None)
        return model, image(size), "image"
    if name == "resnet50":
        size = 64 if quick else 224
        model = apps.ResNet50(input_shape=image(size), weights=None,
                              classifier_activation=None)
        return model, image(size), "image"
    if name == "encoder":
        if quick:
            return _encoder(keras, 2, 128, 4, 512, 32), (32,), "tokens"
        return _encoder(keras, 12, 768, 12, 3072, 128), (128,), "tokens"
    raise SystemExit(f"unknown model {name!r}; expected some of {','.join(MODELS)}")


def randomize(model, seed=0):
    """Non-trivial normalization statistics and small biases; kernels keep Keras's initializers."""
    rng = np.random.default_rng(seed)
    for layer in model._flatten_layers(include_self=False, recursive=True):
        kind = type(layer).__name__
        for var in layer.weights:
            if var.path.rsplit("/", 1)[0] != layer.path:        # a sublayer's own variable
                continue
            shape, last = tuple(var.shape), var.path.rsplit("/", 1)[-1]
            if kind == "BatchNormalization":
                if last in ("gamma", "moving_variance"):
                    value = rng.uniform(0.5, 1.5, shape)
                else:                                           # beta, moving_mean
                    value = rng.normal(0, 0.1, shape)
            elif kind == "LayerNormalization":
                value = (1 + rng.normal(0, 0.1, shape)) if last == "gamma" else \
                    rng.normal(0, 0.1, shape)
            elif last == "bias":
                value = rng.normal(0, 0.1, shape)
            elif kind == "Embedding":
                value = rng.normal(0, 1, shape)
            else:
                continue
            var.assign(value.astype(np.float32))


def inputs(kind, shape, batch, seed=1):
    rng = np.random.default_rng(seed)
    if kind == "tokens":
        return rng.integers(1, 1000, size=(batch,) + shape).astype(np.int32)
    return rng.uniform(-1, 1, size=(batch,) + shape).astype(np.float32)


def write_model(name, quick, folder):
    """Build, randomize and save model ``name``; returns (keras model, path, shape, kind)."""
    model, shape, kind = build(name, quick)
    randomize(model)
    path = os.path.join(folder, f"{name}.keras")
    model.save(path)
    return model, path, shape, kind


def export_onnx(model, x, path):
    """ONNX export of the Keras model for input ``x``: Keras's ``model.export`` (torch backend)
    when it succeeds, else ``torch.onnx.export`` of the model (a torch module on this backend,
    dynamo exporter, the shape of ``x`` static).  Returns (path or None, how or why not)."""
    try:
        importlib.import_module("onnx")
    except ImportError:
        return None, "onnx not installed: no ONNX export"
    model.predict_on_batch(x)                                   # Keras exports called models only
    try:
        _quietly(lambda: model.export(path, format="onnx", verbose=False))
        return path, None
    except Exception as exc:                                    # noqa: BLE001 - try torch's
        first = f"{type(exc).__name__}"
    try:
        import torch
        _quietly(lambda: torch.onnx.export(model, (torch.from_numpy(x),), path, dynamo=True,
                                           external_data=False, verbose=False))
        return path, f"Keras's export failed ({first}): torch.onnx.export (dynamo)"
    except Exception as exc:                                    # noqa: BLE001 - into the table
        return None, f"no ONNX export: Keras's {first}, torch's {type(exc).__name__}"


def _quietly(fn):
    """Run fn with warnings off and file descriptors 1 and 2 to /dev/null (the exporters print
    their graphs and progress there)."""
    import warnings
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [null]:
            os.close(fd)


# ---------------------------------------------------------------------------------------------
# the peers' better graph: BatchNormalization folded into the convolutions of Keras's export

_AFFINE = ("Sub", "Mul", "Add", "Div")


def fold_batchnorm(src, dst):
    """Write ``src``'s ONNX graph to ``dst`` with the per-channel arithmetic that follows each
    convolution (Keras's BatchNormalization: Sub, Mul, Add with constants of one value per
    channel, behind the Transpose back to NHWC) folded into the convolution's weights and bias,
    float-to-float Casts removed, and Transpose pairs that cancel around Clip/Relu removed.
    Returns the number of convolutions folded into."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(src)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    const_nodes = {n.output[0]: n for n in g.node if n.op_type == "Constant"}
    alias = {n.output[0]: n.input[0] for n in g.node
             if n.op_type == "Identity" and n.input[0] in inits}

    def constant(name):
        name = alias.get(name, name)
        if name in inits:
            return numpy_helper.to_array(inits[name])
        if name in const_nodes:
            return numpy_helper.to_array(const_nodes[name].attribute[0].t)
        return None

    def rename_input(old, new):
        """Make every consumer of ``old`` read ``new``; refused for the graph's outputs."""
        if any(out.name == old for out in g.output):
            return False
        for n in g.node:
            for i, name in enumerate(n.input):
                if name == old:
                    n.input[i] = new
        return True

    float_inputs = {i.name for i in g.input
                    if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    producers = {o: n for n in g.node for o in n.output}
    drop = set()
    for n in g.node:                                            # float -> float Casts
        src_node = producers.get(n.input[0]) if n.op_type == "Cast" else None
        if (n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT
                and (n.input[0] in float_inputs or (src_node is not None and src_node.op_type
                                                    not in ("Shape", "Gather", "Constant")))
                and rename_input(n.output[0], n.input[0])):
            drop.add(id(n))
    nodes = [n for n in g.node if id(n) not in drop]

    def consumers(name):
        return [n for n in nodes if name in n.input]

    folded = 0
    for conv in [n for n in nodes if n.op_type == "Conv"]:
        after = consumers(conv.output[0])
        if len(after) != 1:
            continue
        if after[0].op_type == "Transpose" and list(after[0].attribute[0].ints) == [0, 2, 3, 1]:
            start = after[0].output[0]                          # NHWC: behind the Transpose
        elif after[0].op_type in _AFFINE:
            start = conv.output[0]                              # NCHW: right after the Conv
        else:
            continue
        w = constant(conv.input[1])
        if w is None:
            continue
        channels = w.shape[0]
        bias = constant(conv.input[2]) if len(conv.input) > 2 else np.zeros(channels, w.dtype)
        scale, shift = np.ones(channels, np.float64), bias.astype(np.float64)
        chain, out = [], start
        while True:
            nxt = consumers(out)
            if len(nxt) != 1 or nxt[0].op_type not in _AFFINE or nxt[0].input[0] != out:
                break
            c = constant(nxt[0].input[1])
            if c is None or c.size not in (1, channels):
                break
            c = np.broadcast_to(c.reshape(-1).astype(np.float64), (channels,))
            op = nxt[0].op_type
            if op == "Sub":
                shift = shift - c
            elif op == "Add":
                shift = shift + c
            elif op == "Mul":
                scale, shift = scale * c, shift * c
            else:
                scale, shift = scale / c, shift / c
            chain.append(nxt[0])
            out = nxt[0].output[0]
        if not chain:
            continue
        if start == conv.output[0]:                             # the Conv makes the chain's end
            if any(o.name == out for o in g.output):
                continue
            for n in nodes:
                for i, name in enumerate(n.input):
                    if name == out:
                        n.input[i] = start
        elif not rename_input(out, start):
            continue
        w_name, b_name = f"{conv.name or conv.output[0]}_folded_w", \
            f"{conv.name or conv.output[0]}_folded_b"
        new_w = (w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1)))
        g.initializer.extend([numpy_helper.from_array(new_w.astype(np.float32), w_name),
                              numpy_helper.from_array(shift.astype(np.float32), b_name)])
        del conv.input[1:]
        conv.input.extend([w_name, b_name])
        drop.update(id(n) for n in chain)
        nodes = [n for n in nodes if id(n) not in drop]
        folded += 1

    for t2 in [n for n in nodes if n.op_type == "Transpose"]:   # NHWC <-> NCHW around Clip/Relu
        if list(t2.attribute[0].ints) != [0, 3, 1, 2]:
            continue
        producers = {o: n for n in nodes for o in n.output}
        p = producers.get(t2.input[0])
        if p is None or p.op_type not in ("Clip", "Relu") or len(consumers(p.output[0])) != 1:
            continue
        t1 = producers.get(p.input[0])
        if t1 is None or t1.op_type != "Transpose" or list(t1.attribute[0].ints) != [0, 2, 3, 1] \
                or len(consumers(t1.output[0])) != 1:
            continue
        p.input[0] = t1.input[0]
        if rename_input(t2.output[0], p.output[0]):
            drop.update((id(t1), id(t2)))
            nodes = [n for n in nodes if id(n) not in drop]

    del g.node[:]
    g.node.extend(nodes)
    used = {name for n in nodes for name in n.input}
    kept = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
    onnx.save(model, dst)
    return folded


# ---------------------------------------------------------------------------------------------
# the systems: each make(paths, x) -> a zero-argument callable returning a numpy array

def _mixedcore(policy):
    def make(keras_path, onnx_path, x):
        from mixedcore import models
        model = models.load_model(keras_path, dtype_policy=policy)
        return lambda: model.predict_on_batch(x)
    return make


def _keras_f32(keras_path, onnx_path, x):
    keras = _keras()
    model = keras.models.load_model(keras_path)
    return lambda: model.predict_on_batch(x)


def _onnxruntime(keras_path, onnx_path, x):
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3                              # errors only
    session = onnxruntime.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    return lambda: session.run(None, feed)[0]


def _openvino(hint):
    def make(keras_path, onnx_path, x):
        import openvino
        core = openvino.Core()
        model = core.read_model(onnx_path)
        model.reshape({0: list(x.shape)})                       # a static shape, the fast path
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": hint,
                                                     "INFERENCE_NUM_THREADS": THREADS})
        request = compiled.create_infer_request()
        actual = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()

        def infer():
            return request.infer({0: x}, share_inputs=True, share_outputs=True)[0]
        infer.note = None if actual == hint else f"compiled with precision {actual}"
        return infer
    return make


# (label, precision class, modules needed, the ONNX graph it runs: None, "export", "folded" or
# "nchw", make)
SYSTEMS = [
    ("mixedcore mixed_bfloat16", "bfloat16", (), None, _mixedcore("mixed_bfloat16")),
    ("mixedcore float32", "float32", (), None, _mixedcore("float32")),
    ("Keras 3 float32 (torch)", "float32", ("keras", "torch"), None, _keras_f32),
    ("ONNX Runtime float32, Keras export", "float32", ("onnxruntime",), "export", _onnxruntime),
    ("OpenVINO bf16, Keras export", "bfloat16", ("openvino",), "export", _openvino("bf16")),
    ("OpenVINO f32, Keras export", "float32", ("openvino",), "export", _openvino("f32")),
    ("ONNX Runtime float32, BN folded", "float32", ("onnxruntime",), "folded", _onnxruntime),
    ("OpenVINO bf16, BN folded", "bfloat16", ("openvino",), "folded", _openvino("bf16")),
    ("OpenVINO f32, BN folded", "float32", ("openvino",), "folded", _openvino("f32")),
    ("ONNX Runtime float32, NCHW, BN folded", "float32", ("onnxruntime",), "nchw",
     _onnxruntime),
    ("OpenVINO bf16, NCHW, BN folded", "bfloat16", ("openvino",), "nchw", _openvino("bf16")),
    ("OpenVINO f32, NCHW, BN folded", "float32", ("openvino",), "nchw", _openvino("f32")),
]


def _missing(modules):
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    return missing


def _relative_error(ref, out):
    out = np.asarray(out, dtype=np.float64).reshape(ref.shape)
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def prepare(keras_path, graphs, x, only=None):
    """The timed callables of every system that is installed and right, and a row per system;
    ``graphs`` maps "export", "folded" and "nchw" to (ONNX path or None, note or None, the input
    that graph takes: ``x``, or ``x`` channels-first for "nchw"); ``only``: the systems whose
    label contains one of these strings (all when None)."""
    rows, fns = {}, {}
    ref = np.asarray(_keras_f32(keras_path, None, x)(), dtype=np.float64)
    for label, precision, modules, graph, make in SYSTEMS:
        if graph and graph not in graphs:                       # BN folding: image models only
            continue
        if only and not any(part in label for part in only):
            continue
        onnx_path, onnx_note, feed = graphs.get(graph, (None, None, x)) if graph else \
            (None, None, x)
        row = rows[label] = {"system": label, "error": None, "note": None, "times": []}
        missing = _missing(modules)
        if missing:
            row["note"] = f"not installed: {', '.join(missing)}"
            continue
        if graph and onnx_path is None:
            row["note"] = onnx_note or "no ONNX graph"
            continue
        try:
            fn = make(keras_path, onnx_path, feed)
            out = np.array(fn())                                # warm-up and check
        except Exception as exc:                                # noqa: BLE001 - into the table
            row["note"] = f"failed: {type(exc).__name__}: {exc}"[:200]
            continue
        row["error"] = err = _relative_error(ref, out)
        notes = [getattr(fn, "note", None), onnx_note]
        row["note"] = "; ".join(n for n in notes if n) or None
        if not err <= TOLERANCE[precision]:
            row["note"] = (f"output wrong (error {err:.2g} > {TOLERANCE[precision]:g}): "
                           f"not timed")
            continue
        fns[label] = fn
    return rows, fns


def timed_rounds(fns, rows, rounds, calls, blocks=False):
    run = benchutil.blocked_runs if blocks else benchutil.interleaved_rounds
    for name, times in run(fns, rounds, calls).items():
        rows[name]["times"].extend(times)


# ---------------------------------------------------------------------------------------------
# the table

def _ms(seconds):
    return f"{seconds * 1e3:.1f}" if seconds >= 0.1 else f"{seconds * 1e3:.2f}"


def table_lines(results):
    lines = ["| model | batch | system | best ms | median ms | vs mixedcore mixed_bfloat16 "
             "(best / median) | error vs Keras f32 | note |",
             "|---|---|---|---|---|---|---|---|"]
    for res in results:
        ref = next((r for r in res["rows"] if r["system"] == REFERENCE and r["best"]), None)
        for row in res["rows"]:
            best = _ms(row["best"]) if row["best"] else "-"
            med = _ms(row["median"]) if row["median"] else "-"
            ratio = (f"{row['best'] / ref['best']:.2f}x / {row['median'] / ref['median']:.2f}x"
                     if ref and row["best"] else "-")
            err = f"{row['error']:.1e}" if row["error"] is not None else "-"
            lines.append(f"| {res['model']} | {res['batch']} | {row['system']} | {best} | {med} "
                         f"| {ratio} | {err} | {row['note'] or ''} |")
    return lines


def channels_first_graph(name, quick, model, x, folder):
    """(path, note) of the peers' best graph of an image model: the same model built
    channels-first (Keras's NCHW layers; the same weights), exported (for ``x`` transposed to
    NCHW; any batch), BatchNormalization folded into the convolutions."""
    keras = _keras()
    previous = keras.config.image_data_format()
    keras.config.set_image_data_format("channels_first")
    try:
        twin, shape, _ = build(name, quick, channels_first=True)
    finally:
        keras.config.set_image_data_format(previous)
    twin.set_weights(model.get_weights())
    xc = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    path, note = export_onnx(twin, xc, os.path.join(folder, f"{name}_nchw.onnx"))
    if path is None:
        return None, note
    return folded_graph(path)


def folded_graph(onnx_path):
    """(path, note) of the BN-folded graph beside ``onnx_path``."""
    if onnx_path is None:
        return None, "no ONNX export"
    path = onnx_path[:-len(".onnx")] + "_folded.onnx"
    try:
        folded = fold_batchnorm(onnx_path, path)
    except Exception as exc:                                    # noqa: BLE001 - into the table
        return None, f"folding failed: {type(exc).__name__}: {exc}"[:200]
    return path, f"{folded} convolutions folded into"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated, of " + ",".join(MODELS))
    parser.add_argument("--batches", default=None,
                        help="comma-separated batch sizes for every model (default: each "
                             "model's own, e.g. 1,32 for mobilenetv2)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=None,
                        help="timed calls per system per round (default: 3 at batch 1, else 1)")
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    parser.add_argument("--blocks", action="store_true",
                        help="time each system's calls in one block, not in interleaved rounds "
                             "(no other library's threads spinning beside it)")
    parser.add_argument("--busy", action="store_true",
                        help="time beside one process spinning on a core (the busy machine)")
    parser.add_argument("--systems", default=None,
                        help="comma-separated parts of system labels to run (e.g. "
                             "'mixedcore,NCHW'; default: all)")
    args = parser.parse_args(argv)

    import mixedcore
    print(f"mixedcore from {os.path.dirname(mixedcore.__file__)}; {THREADS} threads per system; "
          f"{args.rounds} rounds{' (quick sizes)' if args.quick else ''}"
          f"{'; beside one spinning process' if args.busy else ''}"
          f"{'; each system in one block' if args.blocks else ''}", file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory(prefix="mixedcore-arch-") as folder:
        for name in [m.strip() for m in args.models.split(",") if m.strip()]:
            t0 = time.perf_counter()
            model, keras_path, shape, kind = write_model(name, args.quick, folder)
            onnx_path = onnx_note = None
            print(f"{name}: built and saved in {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
            if args.batches:
                batches = [int(b) for b in args.batches.split(",")]
            else:
                batches = (QUICK_BATCHES if args.quick else BATCHES)[name]
            for batch in batches:
                x = inputs(kind, shape, batch)
                if onnx_path is None or onnx_note:              # Keras's export has any batch
                    onnx_path, onnx_note = export_onnx(
                        model, x, os.path.join(folder, f"{name}_b{batch}.onnx"))
                    if kind == "image":
                        folded = folded_graph(onnx_path)
                        nchw = channels_first_graph(name, args.quick, model, x, folder)
                graphs = {"export": (onnx_path, onnx_note, x)}
                if kind == "image":
                    graphs["folded"] = folded + (x,)
                    graphs["nchw"] = nchw + (np.ascontiguousarray(x.transpose(0, 3, 1, 2)),)
                rows, fns = prepare(keras_path, graphs, x,
                                    args.systems.split(",") if args.systems else None)
                calls = args.calls or (3 if batch == 1 else 1)
                t0 = time.perf_counter()
                spinner = benchutil.start_spinner() if args.busy else None
                try:
                    timed_rounds(fns, rows, args.rounds, calls, args.blocks)
                finally:
                    if spinner is not None:
                        benchutil.stop_spinner(spinner)
                for row in rows.values():
                    times = row.pop("times")
                    row["best"] = min(times) if times else None
                    row["median"] = statistics.median(times) if times else None
                    row["calls"] = len(times)
                results.append({"model": name, "batch": batch, "rows": list(rows.values())})
                print(f"{name} batch {batch}: timed in {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr, flush=True)
                print("\n".join(table_lines(results[-1:])[2 if len(results) > 1 else 0:]),
                      flush=True)
                del fns
                gc.collect()
            del model
            gc.collect()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "quick": args.quick, "busy": args.busy,
                       "rounds": args.rounds, "threads": THREADS, "results": results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
