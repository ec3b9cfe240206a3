"""Inference workloads and the systems timed on them, shared by ``bench_inference.py`` (the
pytest-benchmark suite) and ``compare_inference.py`` (interleaved rounds, quiet and busy).

Workloads (``WORKLOADS``): three MLPs (Dense + relu, Dense + relu, Dense, softmax in float32)
and one GEMM whose right operand is constant (the weights).  Every system gets the same numpy
weights and the same float32 input, built once per workload by :func:`workload_data`.

Systems (``SYSTEMS``), each built by ``build(data)`` into a zero-argument callable that runs one
inference (weights prepared, graph compiled, one warm-up call and a check of its output against
numpy float32 done before it is returned):

- mixedcore under the ``float32``, ``mixed_float16`` and ``mixed_bfloat16`` policies: a
  ``models.Sequential`` of ``layers.Input``, ``layers.Dense`` and a float32
  ``layers.Activation("softmax")``, built in ``policy_scope``, weights set with ``set_weights``.
  On the GEMM: ``kernels.matmul`` against the weights packed once with ``kernels.pack`` (as
  OpenVINO reorders them once), float32, and bfloat16 with the float32 input cast to bfloat16
  in each call (the mixed_bfloat16 row; OpenVINO's bf16 hint converts its input in each call
  too).
- numpy float32: the same forward pass written with ``@``, ``np.maximum`` and a softmax.
- torch float32 (``nn.Sequential`` of ``nn.Linear``), torch bfloat16 (the model moved with
  ``.to(torch.bfloat16)``, the float32 input cast on the way in, the softmax in float32) and
  torch autocast bfloat16; ``inference_mode``, ``torch.set_num_threads(2)``.
- OpenVINO (``"INFERENCE_PRECISION_HINT"`` ``"bf16"`` and ``"f32"``, ``"INFERENCE_NUM_THREADS"``
  2) and onnxruntime float32 (CPU provider, ``intra_op_num_threads`` 2): an ONNX graph built with
  onnx's helper API (MatMul, Add, Relu, Softmax; weights as initializers; static input shape),
  saved to a temporary file and compiled once.

torch, OpenVINO, onnx and onnxruntime are optional: ``System.requires`` names the modules a
system needs, so that a caller can skip it when one is missing.
"""
import atexit
import functools
import os
import shutil
import tempfile
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from benchutil import optional_torch

BF16 = np.dtype(ml_dtypes.bfloat16)
THREADS = 2                     # every peer is held to the machine's two cores
ONNX_OPSET = 17                 # accepted by onnxruntime 1.x and OpenVINO's ONNX frontend
ONNX_IR_VERSION = 8


@dataclass(frozen=True)
class Workload:
    key: str
    group: str                  # the pytest-benchmark group, and the title of its table
    kind: str                   # "mlp" or "gemm"
    widths: tuple               # mlp: layer widths, input first; gemm: (k, n) of the weights
    batch: int                  # rows of the input
    calls: int                  # calls per system per round in compare_inference.py


WORKLOADS = {w.key: w for w in [
    Workload("mlp1024-b256", "mlp 1024-1024-1024-10, batch 256", "mlp", (1024, 1024, 1024, 10),
             256, 12),
    Workload("mlp1024-b1", "mlp 1024-1024-1024-10, batch 1", "mlp", (1024, 1024, 1024, 10),
             1, 50),
    Workload("mlp4096-b64", "mlp 4096-4096-4096-1000, batch 64", "mlp",
             (4096, 4096, 4096, 1000), 64, 4),
    Workload("gemm1024", "gemm 1024x1024 @ constant 1024x1024", "gemm", (1024, 1024), 1024, 8),
]}


@dataclass
class WorkloadData:
    workload: Workload
    weights: list               # mlp: [w1, b1, w2, b2, ...] (w of shape (in, out)); gemm: [b]
    x: np.ndarray               # the float32 input
    reference: np.ndarray       # numpy float32's output


@functools.lru_cache(maxsize=None)
def workload_data(key):
    """Weights, input and numpy float32 reference of a workload, built once per process."""
    wl = WORKLOADS[key]
    rng = np.random.default_rng(0)
    if wl.kind == "mlp":
        weights = []
        fan_in = wl.widths[0]
        for width in wl.widths[1:]:
            limit = np.sqrt(6.0 / (fan_in + width))      # Glorot uniform, as Dense initializes
            weights.append(rng.uniform(-limit, limit, size=(fan_in, width)).astype(np.float32))
            weights.append(rng.normal(scale=0.01, size=width).astype(np.float32))
            fan_in = width
        x = np.random.default_rng(1).normal(size=(wl.batch, wl.widths[0])).astype(np.float32)
    else:
        k, n = wl.widths
        weights = [rng.standard_normal((k, n), dtype=np.float32)]
        x = np.random.default_rng(1).standard_normal((wl.batch, k), dtype=np.float32)
    data = WorkloadData(wl, weights, x, None)
    data.reference = numpy_forward(data)(x)
    return data


# ---------------------------------------------------------------------------------------------
# checks: a system's output against numpy float32, loosely, by the precision it computes in

TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}


def _centered_log(p):
    logp = np.log(np.maximum(p.astype(np.float64), 1e-30))
    return logp - logp.mean(axis=1, keepdims=True)


def relative_error(data, out):
    """Largest deviation from numpy float32, relative to the reference's own spread.

    MLPs are compared on the logits recovered from the softmax (log-probabilities minus their
    row mean), so that a 1000-way softmax of small probabilities is checked as strictly as a
    10-way one; a GEMM on its result.  A mis-built graph (a transposed weight, a missing relu)
    gives errors of order 1; rounding to bfloat16 gives about 5e-3, float16 5e-4, a float32
    peer 1e-6.
    """
    out = np.asarray(out, dtype=np.float32).reshape(data.reference.shape)
    if data.workload.kind == "mlp":
        ref, got = _centered_log(data.reference), _centered_log(out)
    else:
        ref, got = data.reference.astype(np.float64), out.astype(np.float64)
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def check(system, data, out):
    """Raise AssertionError when ``out`` disagrees with numpy float32 beyond the tolerance."""
    err = relative_error(data, out)
    tol = TOLERANCE[system.precision]
    if not err <= tol:
        raise AssertionError(f"{system.label} on {data.workload.group}: relative error {err:.3g} "
                             f"against numpy float32 exceeds {tol:g}; the model or graph is "
                             f"mis-built")
    return err


# ---------------------------------------------------------------------------------------------
# the systems

@dataclass(frozen=True)
class System:
    key: str
    label: str
    precision: str              # the tolerance class of its output: float32, float16, bfloat16
    requires: tuple             # optional modules it needs
    kinds: tuple                # the workload kinds it runs
    make: object                # make(system, data) -> (fn, to_numpy)

    def applies(self, workload):
        return workload.kind in self.kinds

    def build(self, data):
        """The timed callable: built, warmed up once and checked against numpy float32."""
        fn, to_numpy = self.make(self, data)
        check(self, data, to_numpy(fn()))
        return fn


def _identity(out):
    return out


def _torch_to_numpy(out):
    return out.detach().float().numpy()


def _mlp_layers(data):
    w = data.weights
    return [(w[i], w[i + 1], i + 2 < len(w)) for i in range(0, len(w), 2)]   # (W, b, relu?)


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def numpy_forward(data):
    if data.workload.kind == "gemm":
        b = data.weights[0]
        return lambda x: x @ b
    layers_ = _mlp_layers(data)

    def forward(x):
        h = x
        for w, b, relu in layers_:
            h = h @ w + b
            if relu:
                h = np.maximum(h, 0)
        return _softmax(h)
    return forward


def _make_numpy(system, data):
    forward, x = numpy_forward(data), data.x
    return (lambda: forward(x)), _identity


def mixedcore_model(policy, data):
    """The MLP as a mixedcore ``models.Sequential`` under ``policy``, with the shared weights."""
    from mixedcore import layers, models
    from mixedcore.policy import policy_scope

    widths = data.workload.widths
    with policy_scope(policy):
        stack = [layers.Input(shape=(widths[0],))]
        for i, width in enumerate(widths[1:]):
            stack.append(layers.Dense(width, activation="relu" if i + 2 < len(widths) else None))
        stack.append(layers.Activation("softmax", dtype="float32"))
        model = models.Sequential(stack)
    model.set_weights(data.weights)
    return model


def _make_mixedcore(policy):
    def make(system, data):
        from mixedcore import kernels
        x = data.x
        if data.workload.kind == "gemm":
            b = data.weights[0]
            if policy == "float32":
                packed = kernels.pack(b)
                return (lambda: kernels.matmul(x, packed)), _identity
            packed = kernels.pack(b, dtype="bfloat16")    # once, outside the timed call
            return (lambda: kernels.matmul(kernels.cast(x, BF16), packed)), _identity
        model = mixedcore_model(policy, data)
        model(x)        # warm-up: the weights' cast to the compute dtype happens once, then cached
        return (lambda: model(x)), _identity
    return make


def _torch_mlp(torch, data, softmax=True):
    mods = []
    for w, b, relu in _mlp_layers(data):
        lin = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))
            lin.bias.copy_(torch.from_numpy(b))
        mods.append(lin)
        if relu:
            mods.append(torch.nn.ReLU())
    if softmax:
        mods.append(torch.nn.Softmax(dim=1))
    return torch.nn.Sequential(*mods).eval()


def _make_torch(mode):
    def make(system, data):
        torch = optional_torch()                       # set_num_threads(2)
        x = torch.from_numpy(data.x)
        if data.workload.kind == "gemm":
            b = torch.from_numpy(data.weights[0])
            if mode == "bfloat16":
                x, b = x.to(torch.bfloat16), b.to(torch.bfloat16)   # cast once, as mixedcore's

            def gemm():
                with torch.inference_mode():
                    return x @ b
            gemm()
            return gemm, _torch_to_numpy
        if mode == "float32":
            net = _torch_mlp(torch, data)

            def forward():
                with torch.inference_mode():
                    return net(x)
        elif mode == "bfloat16":
            body = _torch_mlp(torch, data, softmax=False).to(torch.bfloat16)

            def forward():
                with torch.inference_mode():
                    return torch.softmax(body(x.to(torch.bfloat16)).float(), dim=1)
        else:
            net = _torch_mlp(torch, data)

            def forward():
                with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
                    return net(x)
        forward()
        return forward, _torch_to_numpy
    return make


# ONNX graphs, written once per workload into a temporary directory removed at exit

_ONNX_DIR = None
_ONNX_FILES = {}


def onnx_model(data):
    """The workload as an ONNX ModelProto: MatMul, Add, Relu, Softmax, weights as initializers."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    wl = data.workload
    inits, nodes = [], []
    if wl.kind == "gemm":
        inits.append(numpy_helper.from_array(data.weights[0], "w0"))
        nodes.append(helper.make_node("MatMul", ["x", "w0"], ["y"]))
        out_width = wl.widths[1]
    else:
        h = "x"
        for i, (w, b, relu) in enumerate(_mlp_layers(data)):
            inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
            nodes.append(helper.make_node("MatMul", [h, f"w{i}"], [f"mm{i}"]))
            nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"z{i}"]))
            h = f"z{i}"
            if relu:
                nodes.append(helper.make_node("Relu", [h], [f"h{i}"]))
                h = f"h{i}"
        nodes.append(helper.make_node("Softmax", [h], ["y"], axis=1))
        out_width = wl.widths[-1]
    graph = helper.make_graph(
        nodes, wl.key,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(data.x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [data.x.shape[0], out_width])],
        initializer=inits)
    model = helper.make_model(graph, producer_name="mixedcore-bench",
                              opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model)
    return model


def onnx_file(key):
    """Path of the workload's ONNX graph, saved once into a temporary directory."""
    import onnx
    global _ONNX_DIR
    if key not in _ONNX_FILES:
        if _ONNX_DIR is None:
            _ONNX_DIR = tempfile.mkdtemp(prefix="mixedcore-bench-onnx-")
            atexit.register(shutil.rmtree, _ONNX_DIR, True)
        path = os.path.join(_ONNX_DIR, f"{key}.onnx")
        onnx.save(onnx_model(workload_data(key)), path)
        _ONNX_FILES[key] = path
    return _ONNX_FILES[key]


def remove_onnx_file(key):
    """Delete the workload's ONNX file once its sessions are compiled (they keep no reference)."""
    path = _ONNX_FILES.pop(key, None)
    if path is not None and os.path.exists(path):
        os.remove(path)


def openvino_compiled(data, hint):
    """``openvino.Core().compile_model`` of the workload's ONNX graph with a precision hint."""
    import openvino
    core = openvino.Core()
    return core.compile_model(onnx_file(data.workload.key), "CPU",
                              {"INFERENCE_PRECISION_HINT": hint, "INFERENCE_NUM_THREADS": THREADS})


def _make_openvino(hint):
    def make(system, data):
        compiled = openvino_compiled(data, hint)
        request = compiled.create_infer_request()
        inputs = {0: data.x}

        def infer():
            # the input is read in place and the output returned as a view of the request's
            # buffer (each peer's cheapest call); the check copies it
            return request.infer(inputs, share_inputs=True, share_outputs=True)[0]
        infer()
        # what it really runs in: a bf16 hint falls back to f32 on CPUs without bfloat16
        precision = compiled.get_property("INFERENCE_PRECISION_HINT")
        infer.note = f"compiled with inference precision {precision.to_string()}"
        return infer, np.array
    return make


def onnxruntime_session(data):
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(onnx_file(data.workload.key), options,
                                        providers=["CPUExecutionProvider"])


def _make_onnxruntime(system, data):
    session = onnxruntime_session(data)
    feed = {"x": data.x}

    def run():
        return session.run(None, feed)[0]
    run()
    return run, _identity


_MLP_GEMM = ("mlp", "gemm")
_ONNX = ("onnx",)
SYSTEMS = {s.key: s for s in [
    System("mixedcore-float32", "mixedcore float32", "float32", (), _MLP_GEMM,
           _make_mixedcore("float32")),
    System("mixedcore-mixed_float16", "mixedcore mixed_float16", "float16", (), ("mlp",),
           _make_mixedcore("mixed_float16")),
    System("mixedcore-mixed_bfloat16", "mixedcore mixed_bfloat16", "bfloat16", (), _MLP_GEMM,
           _make_mixedcore("mixed_bfloat16")),
    System("numpy-float32", "numpy float32", "float32", (), _MLP_GEMM, _make_numpy),
    System("torch-float32", "torch float32", "float32", ("torch",), _MLP_GEMM,
           _make_torch("float32")),
    System("torch-bfloat16", "torch .to(bfloat16)", "bfloat16", ("torch",), _MLP_GEMM,
           _make_torch("bfloat16")),
    System("torch-autocast-bfloat16", "torch autocast bfloat16", "bfloat16", ("torch",),
           ("mlp",), _make_torch("autocast")),
    System("openvino-bf16", "OpenVINO bf16", "bfloat16", _ONNX + ("openvino",), _MLP_GEMM,
           _make_openvino("bf16")),
    System("openvino-f32", "OpenVINO f32", "float32", _ONNX + ("openvino",), _MLP_GEMM,
           _make_openvino("f32")),
    System("onnxruntime-float32", "onnxruntime float32", "float32", _ONNX + ("onnxruntime",),
           _MLP_GEMM, _make_onnxruntime),
]}


def missing_modules(system):
    """The optional modules ``system`` needs that cannot be imported here."""
    import importlib
    missing = []
    for module in system.requires:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    return missing
