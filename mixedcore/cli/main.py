"""Command line: ``python -m mixedcore info | demo | bench | predict``."""
import argparse
import sys


def _info(args):
    import numpy as np
    import ml_dtypes

    import mixedcore
    from mixedcore import kernels
    from mixedcore.kernels import _runtime

    build = _runtime.build_info()
    fpenv = _runtime.fp_environment()
    rows = [
        ("mixedcore", mixedcore.__version__),
        ("numpy", np.__version__),
        ("ml_dtypes", ml_dtypes.__version__),
        ("python", sys.version.split()[0]),
        ("CPU supports", kernels.ISA_LEVELS[_runtime._lib.supported_level()]),
        ("built levels", ", ".join(build["isa_levels"])),
        ("available", ", ".join(kernels.available_isas())),
        ("selected", kernels.isa() + _isa_source()),
        ("CPU detection", _detection_row(_runtime.cpu_detection())),
        ("threads", _threads_row()),
        ("thread team", "the project's own (POSIX threads); no OpenMP runtime"
         if build["threads"] else "none (built without threads: every call runs on its caller)"),
        ("FP environment", fpenv["engine"] + " in every call; the caller's is restored after it"),
        ("caller's FP env", fpenv["caller"] if fpenv["caller"] is not None
         else "not shown (no MXCSR on this platform)"),
        ("compiler", build["compiler"]),
        ("flags", build["flags"]),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _isa_source():
    import os
    text = os.environ.get("MIXEDCORE_ISA", "").strip()
    return f" (MIXEDCORE_ISA={text})" if text else ""


def _detection_row(d):
    found = ", ".join(n for n, on in d["detected"].items() if on) or "none of the x86 extensions"
    if d["cpuinfo"] is None:
        return f"{found} (/proc/cpuinfo not readable: not compared)"
    if d["disagree"]:
        diff = ", ".join(f"{n} (CPUID {'yes' if d['detected'][n] else 'no'}, /proc/cpuinfo "
                         f"{'yes' if d['cpuinfo'][n] else 'no'})" for n in d["disagree"])
        return f"{found}; DISAGREES with /proc/cpuinfo on {diff}"
    return f"{found}; agrees with /proc/cpuinfo"


def _threads_row():
    from mixedcore.kernels._runtime import thread_info
    t = thread_info()
    return (f"{t['threads']} (from {t['source']}; CPU budget {t['cpu_budget']} from "
            f"{t['budget_source']})")


def _demo(args):
    from mixedcore.cli import demo as _demo
    try:
        _demo.run(data=args.data, epochs=args.epochs, batch_size=args.batch_size,
                  hidden=args.hidden, samples=args.samples, seed=args.seed,
                  verbose=args.verbose, timing=args.timing)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _bench(args):
    from mixedcore.cli import bench as _bench
    _bench.run(size=args.size, gemm=args.gemm, min_time=args.min_time)
    return 0


def _retain_freed_memory():
    """Keep freed memory in the process (glibc's malloc only), for the predict command.

    Inference frees each intermediate array as soon as it is read; glibc then hands large blocks
    back to the kernel and the next batch faults fresh, zeroed pages in again, about a seventh of
    a transformer encoder's time on the development machine.  A process that runs the same
    model batch after batch is better off keeping them.  The command owns its process, so it
    sets this; a server that imports mixedcore can set MALLOC_TRIM_THRESHOLD_ and
    MALLOC_MMAP_THRESHOLD_ itself (docs/from_keras.md).  Variables already set win."""
    import ctypes
    import ctypes.util
    import os
    if "MALLOC_TRIM_THRESHOLD_" in os.environ or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return                                       # not glibc: leave the allocator alone
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 64 << 20)
    mallopt(m_trim_threshold, 512 << 20)


def _predict(args):
    from mixedcore.cli import predict as _predict
    _retain_freed_memory()
    try:
        result = _predict.run(args.model, args.input, args.out, policy=args.policy,
                              batch_size=args.batch_size,
                              progress=False if args.quiet else None)
    except _predict.CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shapes = ", ".join(f"{k} {v}" for k, v in result["outputs"].items())
    print(f"predicted {result['samples']} samples -> {args.out} ({shapes})")
    return 0


def _report(args):
    from mixedcore.cli import predict as _predict
    try:
        result = _predict.report(args.model, args.input, labels_path=args.labels,
                                 policy=args.policy, batch_size=args.batch_size,
                                 json_path=args.json)
    except _predict.CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.table())
    return 0


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _model_over_array_arguments(parser, verb):
    """MODEL, INPUT, --policy and --batch-size: what predict and report share."""
    parser.add_argument("model", metavar="MODEL", help="a .keras or .h5 model file")
    parser.add_argument("input", metavar="INPUT", help="a .npy or .npz file")
    parser.add_argument("--policy", metavar="NAME",
                        help=f"{verb} under this dtype policy, e.g. float32, mixed_float16, "
                             f"mixed_bfloat16 (default: the policies stored in the file)")
    parser.add_argument("--batch-size", type=_positive_int, default=32,
                        help="samples per batch (default 32)")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mixedcore",
                                     description="mixedcore command line")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="version, CPU dispatch level, threads, build")
    demo = sub.add_parser(
        "demo", help="train a classifier under mixed_float16 with dynamic loss scaling, then "
                     "compare inference under float32, mixed_float16 and mixed_bfloat16")
    demo.add_argument("--data", metavar="PATH.npz",
                      help="your own data: arrays x_train, y_train (integer labels or one-hot) "
                           "and optionally x_test, y_test (else the last 20%% of train)")
    demo.add_argument("--epochs", type=_positive_int, default=5)
    demo.add_argument("--batch-size", type=_positive_int, default=64)
    demo.add_argument("--hidden", type=_positive_int, default=512,
                      help="width of the two hidden layers (default 512)")
    demo.add_argument("--samples", type=_positive_int, default=16000,
                      help="training samples of the synthetic data (test: a quarter of it)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--verbose", type=int, choices=(0, 1, 2), default=1,
                      help="1: progress bar per epoch (default), 2: one line per epoch")
    demo.add_argument("--timing", type=_positive_float, default=0.5,
                      help="seconds spent timing each inference policy (default 0.5)")
    bench = sub.add_parser("bench", help="a quick table of the kernels beside numpy, ml_dtypes "
                                         "and torch (when installed)")
    bench.add_argument("--size", type=_positive_int, default=1 << 22,
                       help="elements per cast / scan (default 4 Mi)")
    bench.add_argument("--gemm", type=_positive_int, default=1024,
                       help="square GEMM size (default 1024)")
    bench.add_argument("--min-time", type=_positive_float, default=0.2,
                       help="seconds of timing per entry (default 0.2)")
    predict = sub.add_parser(
        "predict", help="run a saved model (.keras or .h5) over an array file, batch by batch",
        description="Run a saved model over INPUT and write its outputs to --out.  INPUT is a "
                    ".npy array (one input) or a .npz with one array per input name; --out is "
                    ".npy (one output) or .npz (one array per output name).  bfloat16 outputs "
                    "are written as float32.")
    _model_over_array_arguments(predict, "serve")
    predict.add_argument("--out", required=True, metavar="OUT", help="where to write the outputs")
    predict.add_argument("--quiet", action="store_true", help="no progress display")
    report = sub.add_parser(
        "report", help="per layer: max |x|, NaN/Inf, float16/bfloat16 overflow, subnormals and "
                       "underflow of a saved model over an array file",
        description="Run a saved model over INPUT (.npy, or .npz with one array per input "
                    "name) and print, per layer, the output's dtype, largest magnitude, and "
                    "counts of NaN, Inf, and values that overflow, become subnormal or flush "
                    "to zero in float16 and bfloat16.  With --labels, also the gradients "
                    "(the model must have been saved compiled).")
    _model_over_array_arguments(report, "report the model")
    report.add_argument("--labels", metavar="Y.npy", help="targets: report gradients too")
    report.add_argument("--json", metavar="OUT.json", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    return {"info": _info, "demo": _demo, "bench": _bench, "predict": _predict,
            "report": _report}[args.command](args)

