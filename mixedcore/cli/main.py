"""The command line's argument parsing and dispatch: ``python -m mixedcore info | demo | bench |
predict | report``.

Each command's work is in its own module of this package (``info``, ``demo``, ``bench``,
``predict``, ``report``); the handlers here turn the parsed arguments into its call, and its
user errors into ``error: <message>`` on stderr with exit code 2: one line, no traceback, for
an unreadable or corrupt file, an output that cannot be written, a size too large to run, or a
malformed option alike.
"""
import argparse
import os
import sys


def _info(args):
    from mixedcore.cli import info
    info.run()
    return 0


def _demo(args):
    from mixedcore.cli import demo
    try:
        demo.run(data=args.data, epochs=args.epochs, batch_size=args.batch_size,
                 hidden=args.hidden, samples=args.samples, seed=args.seed,
                 verbose=args.verbose, timing=args.timing)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _bench(args):
    from mixedcore.cli import bench
    bench.run(size=args.size, gemm=args.gemm, min_time=args.min_time)
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (``prog: error: ...; usage: ...``) with exit
    code 2."""

    def error(self, message):
        usage = " ".join(self.format_usage().split())
        print(f"{self.prog}: error: {message}; {usage} (--help for more)", file=sys.stderr)
        sys.exit(2)


def _predict(args):
    from mixedcore.cli import predict
    from mixedcore.cli.common import CommandError
    predict.retain_freed_memory()
    try:
        result = predict.run(args.model, args.input, args.out, policy=args.policy,
                             batch_size=args.batch_size,
                             progress=False if args.quiet else None)
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    shapes = ", ".join(f"{k} {v}" for k, v in result["outputs"].items())
    print(f"predicted {result['samples']} samples -> {args.out} ({shapes})")
    return 0


def _report(args):
    from mixedcore.cli import report
    from mixedcore.cli.common import CommandError
    try:
        result = report.run(args.model, args.input, labels_path=args.labels,
                            policy=args.policy, batch_size=args.batch_size,
                            json_path=args.json, quantize=args.quantize)
    except CommandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.table())
    return 0


def _positive_int(text, limit=1 << 31):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 1 <= value <= limit:
        raise argparse.ArgumentTypeError(f"must be between 1 and {limit}, got {value}")
    return value


def _positive_float(text, limit=3600.0):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value <= limit:
        raise argparse.ArgumentTypeError(f"must be > 0 and at most {limit:g}, got {value}")
    return value


def _at_most(limit, kind=_positive_int):
    """An argparse type: ``kind`` up to ``limit`` (sizes whose memory grows with them)."""
    def check(text):
        return kind(text, limit)
    check.__name__ = kind.__name__
    return check


def _model_over_array_arguments(parser, verb):
    """MODEL, INPUT, --policy and --batch-size: what predict and report share."""
    parser.add_argument("model", metavar="MODEL", help="a .keras or .h5 model file")
    parser.add_argument("input", metavar="INPUT", help="a .npy or .npz file")
    parser.add_argument("--policy", metavar="NAME",
                        help=f"{verb} under this dtype policy, e.g. float32, mixed_float16, "
                             f"mixed_bfloat16 (default: the policies stored in the file)")
    parser.add_argument("--batch-size", type=_positive_int, default=32,
                        help="samples per batch (default 32)")


# The largest sizes the demo and the bench take: their arrays grow with them (the bench holds
# about 14 bytes per --size element and six --gemm squares of 4 bytes; the demo's Adam training
# about 16 bytes per weight of its --hidden squares and 256 bytes per --samples sample), and
# these keep each under about a GiB.
_BENCH_MAX_SIZE = 1 << 26
_BENCH_MAX_GEMM = 4096
_DEMO_MAX_HIDDEN = 4096
_DEMO_MAX_SAMPLES = 4_000_000


def main(argv=None):
    from mixedcore._version import __version__
    parser = _Parser(prog="python -m mixedcore", description="mixedcore command line")
    parser.add_argument("--version", action="version", version=f"mixedcore {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="version, CPU dispatch level, threads, build")
    demo = sub.add_parser(
        "demo", help="train a classifier under mixed_float16 with dynamic loss scaling, then "
                     "compare inference under float32, mixed_float16 and mixed_bfloat16")
    demo.add_argument("--data", metavar="PATH.npz",
                      help="your own data: arrays x_train, y_train (integer labels or one-hot) "
                           "and optionally x_test, y_test (else the last 20%% of train)")
    demo.add_argument("--epochs", type=_at_most(10000), default=5)
    demo.add_argument("--batch-size", type=_at_most(1 << 20), default=64)
    demo.add_argument("--hidden", type=_at_most(_DEMO_MAX_HIDDEN), default=512,
                      help=f"width of the two hidden layers (default 512, at most "
                           f"{_DEMO_MAX_HIDDEN})")
    demo.add_argument("--samples", type=_at_most(_DEMO_MAX_SAMPLES), default=16000,
                      help=f"training samples of the synthetic data (test: a quarter of it; at "
                           f"most {_DEMO_MAX_SAMPLES})")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--verbose", type=int, choices=(0, 1, 2), default=1,
                      help="1: progress bar per epoch (default), 2: one line per epoch")
    demo.add_argument("--timing", type=_positive_float, default=0.5,
                      help="seconds spent timing each inference policy (default 0.5)")
    bench = sub.add_parser("bench", help="a quick table of the kernels beside numpy, ml_dtypes "
                                         "and torch (when installed)")
    bench.add_argument("--size", type=_at_most(_BENCH_MAX_SIZE), default=1 << 22,
                       help="elements per cast / scan (default 4 Mi, at most 64 Mi)")
    bench.add_argument("--gemm", type=_at_most(_BENCH_MAX_GEMM), default=1024,
                       help=f"square GEMM size (default 1024, at most {_BENCH_MAX_GEMM})")
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
    report.add_argument("--quantize", choices=("int8", "int4", "float8"),
                        help="also each layer's own error when quantized in this mode")
    args = parser.parse_args(argv)
    handler = {"info": _info, "demo": _demo, "bench": _bench, "predict": _predict,
               "report": _report}[args.command]
    try:
        return handler(args)
    except BrokenPipeError:
        # the reader went away (``... | head``): the rest of the output is not wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
