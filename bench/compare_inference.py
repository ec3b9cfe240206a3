"""Inference against OpenVINO, onnxruntime, torch and numpy, in interleaved rounds, quiet and on
a busy machine; prints one markdown table per workload with the ratios the project is judged by.

    python bench/compare_inference.py                       # quiet, all workloads (~1 min)
    python bench/compare_inference.py --busy                # quiet, then beside a spinner (~4 min)
    python bench/compare_inference.py --workloads mlp1024-b256 mlp4096-b64 \
        --systems mixedcore-mixed_bfloat16 openvino-bf16 onnxruntime-float32
    python bench/compare_inference.py --demo --workloads    # only the demo's wall clock

For each workload every system (bench/peers.py: same weights, same float32 input, prepared,
warmed up and checked against numpy float32 first) runs in rounds: in round r each system makes
a fixed number of calls, each call timed on its own, and the order of the systems is rotated by
one per round, so that a slow phase of the shared machine falls on all of them.  Best and median
are over all calls of all rounds.  With ``--busy`` the rounds run twice: quiet, then with one
process spinning on a core (``python -c "while True: pass"``, killed afterwards) in a session of
its own, as another user's job would be: Linux's autogroup scheduling shares the CPU between
sessions first, and a spinner inside the benchmark's session costs two-thread calls far less.
Each table says how many cores other processes kept busy meanwhile.

Ratios (above 1: mixedcore faster): mixedcore mixed_bfloat16 against OpenVINO bf16, best against
best and median against median (target: >= 1.0x at the best; busy, >= 1.0x at the median);
mixedcore float32 against onnxruntime float32 at the best; mixedcore mixed_bfloat16's median
over its own quiet best (target, busy: <= 2.5).

``--demo`` times ``python -m mixedcore demo`` as a whole process (wall clock) held to one
thread and with the default threads, quiet and beside the spinner (target: the demo under load
within 1.5x of its single-thread time).
"""
import argparse
import datetime
import gc
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))          # the mixedcore of this checkout, not an installed one
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np                      # noqa: E402

import peers                            # noqa: E402
from benchutil import spinning          # noqa: E402

MC_BF16 = "mixedcore-mixed_bfloat16"
MC_F32 = "mixedcore-float32"
OV_BF16 = "openvino-bf16"
ORT_F32 = "onnxruntime-float32"
SETTLE = 0.5                            # seconds after starting the spinner before timing


def fmt_time(seconds):
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_ratio(value):
    return "-" if value is None else f"{value:.2f}x"


def summary(samples):
    """(best, median) of per-call times in seconds."""
    return min(samples), statistics.median(samples)


# ---------------------------------------------------------------------------------------------
# workloads

def measure(fns, rounds, calls):
    """Per-call times (seconds) of each callable over ``rounds`` interleaved rounds.

    A short unrecorded pass first (two calls each) refills caches and wakes thread pools after
    the previous phase; then in round r the systems run in the order rotated by r, each making
    ``calls`` calls, each timed with perf_counter_ns.
    """
    keys = list(fns)
    for key in keys:
        for _ in range(2):
            fns[key]()
    samples = {key: [] for key in keys}
    clock = time.perf_counter_ns
    for r in range(rounds):
        shift = r % len(keys)
        for key in keys[shift:] + keys[:shift]:
            fn, out = fns[key], samples[key]
            for _ in range(calls):
                t0 = clock()
                fn()
                out.append((clock() - t0) * 1e-9)
    return samples


def build_systems(data, system_keys):
    fns, notes = {}, []
    for key in system_keys:
        system = peers.SYSTEMS[key]
        if not system.applies(data.workload):
            continue
        missing = peers.missing_modules(system)
        if missing:
            notes.append(f"{system.label}: skipped, {', '.join(missing)} not installed")
            continue
        fn = system.build(data)        # raises when its output disagrees with numpy float32
        fns[key] = fn
        if getattr(fn, "note", None):
            notes.append(f"{system.label}: {fn.note}")
    return fns, notes


def ratio(times, num_key, den_key, stat):
    """times[num_key][stat] / times[den_key][stat], or None when one is missing."""
    if num_key not in times or den_key not in times:
        return None
    return times[num_key][stat] / times[den_key][stat]


def _busy_ticks():
    """Clock ticks all CPUs spent busy since boot (Linux /proc/stat), or None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal ...: everything but idle and iowait
    return sum(fields[:8]) - fields[3] - fields[4]


class OtherLoad:
    """Context manager measuring how many cores other processes kept busy during the block:
    the machine's busy time minus this process's and its reaped children's (the spinner's)
    CPU time, over the wall time.  ``cores`` stays None where /proc/stat is missing."""

    def __enter__(self):
        self.cores = None
        self._start = (_busy_ticks(), os.times(), time.perf_counter())
        return self

    def __exit__(self, *exc):
        ticks0, times0, wall0 = self._start
        ticks1, times1, wall1 = _busy_ticks(), os.times(), time.perf_counter()
        if ticks0 is None or ticks1 is None:
            return False
        hz = os.sysconf("SC_CLK_TCK")
        ours = sum(times1[:4]) - sum(times0[:4])       # user, system, children's user, system
        self.cores = max(0.0, ((ticks1 - ticks0) / hz - ours) / (wall1 - wall0))
        return False


def report_workload(workload, rounds, calls, quiet, busy, notes, others):
    phases = [("quiet", quiet)] + ([("busy", busy)] if busy is not None else [])
    stats = {name: {k: dict(zip(("best", "median"), summary(v))) for k, v in s.items()}
             for name, s in phases}
    q = stats["quiet"]
    other = ", ".join(f"{name} {meter.cores:.2f}" for name, meter in others.items()
                      if meter.cores is not None)
    lines = [f"### {workload.group}", "",
             f"{rounds} rounds x {calls} calls per system, per-call times"
             + (" (busy: one process spinning beside)" if busy is not None else "")
             + (f"; cores kept busy by other processes: {other}" if other else ""), ""]
    head = ["system", "quiet best", "quiet median"]
    if busy is not None:
        head += ["busy best", "busy median", "busy median / quiet best"]
    else:
        head += ["median / best"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in quiet:
        row = [peers.SYSTEMS[key].label, fmt_time(q[key]["best"]), fmt_time(q[key]["median"])]
        if busy is not None:
            b = stats["busy"][key]
            row += [fmt_time(b["best"]), fmt_time(b["median"]),
                    f"{b['median'] / q[key]['best']:.2f}"]
        else:
            row += [f"{q[key]['median'] / q[key]['best']:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")

    head = ["ratio (above 1: mixedcore faster)", "quiet"] + (["busy"] if busy is not None else [])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [
        ("mixedcore mixed_bfloat16 vs OpenVINO bf16, best",
         lambda s: fmt_ratio(ratio(s, OV_BF16, MC_BF16, "best"))),
        ("mixedcore mixed_bfloat16 vs OpenVINO bf16, median",
         lambda s: fmt_ratio(ratio(s, OV_BF16, MC_BF16, "median"))),
        ("mixedcore float32 vs onnxruntime float32, best",
         lambda s: fmt_ratio(ratio(s, ORT_F32, MC_F32, "best"))),
        ("mixedcore mixed_bfloat16 median / its quiet best (lower is better)",
         lambda s: "-" if MC_BF16 not in s else
         f"{s[MC_BF16]['median'] / q[MC_BF16]['best']:.2f}"),
    ]
    for label, cell in rows:
        lines.append("| " + " | ".join([label] + [cell(stats[name]) for name, _ in phases]) + " |")
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    print("\n".join(lines) + "\n", flush=True)


def run_workloads(args):
    for key in args.workloads:
        data = peers.workload_data(key)
        wl = data.workload
        calls = max(1, round(wl.calls * args.calls_scale))
        fns, notes = build_systems(data, args.systems)
        peers.remove_onnx_file(key)
        if not fns:
            print(f"### {wl.group}\n\nno system to run\n")
            continue
        gc.collect()
        others = {"quiet": OtherLoad(), "busy": OtherLoad()}
        with others["quiet"]:
            quiet = measure(fns, args.rounds, calls)
        busy = None
        if args.busy:
            with others["busy"]:
                with spinning():
                    time.sleep(SETTLE)
                    busy = measure(fns, args.rounds, calls)
        else:
            del others["busy"]
        report_workload(wl, args.rounds, calls, quiet, busy, notes, others)
        del fns
        gc.collect()


# ---------------------------------------------------------------------------------------------
# the demo, as a whole process

def demo_env(threads=None):
    """The environment of one demo run: ``threads`` None leaves mixedcore its default threads.

    mixedcore takes its thread count from MIXEDCORE_NUM_THREADS, else OMP_NUM_THREADS; both are
    set, so that numpy's and torch's OpenMP / OpenBLAS threads in the same process follow too.
    """
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MIXEDCORE_NUM_THREADS"):
        env.pop(name, None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
        env["MIXEDCORE_NUM_THREADS"] = str(threads)
    return env


DEMO_CONFIGS = [("one thread", demo_env(1)), ("default threads", demo_env())]


def time_demo(env):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mixedcore", "demo"], cwd=ROOT, env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"python -m mixedcore demo failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed


def demo_runs(runs):
    times = {name: [] for name, _ in DEMO_CONFIGS}
    for r in range(runs):
        order = DEMO_CONFIGS[r % 2:] + DEMO_CONFIGS[:r % 2]
        for name, env in order:
            times[name].append(time_demo(env))
    return times


def run_demo(args):
    with OtherLoad() as other_quiet:
        quiet = demo_runs(args.demo_runs)
    with OtherLoad() as other_busy:
        with spinning():
            time.sleep(SETTLE)
            busy = demo_runs(args.demo_runs)
    s = {phase: {name: summary(v) for name, v in t.items()}
         for phase, t in (("quiet", quiet), ("busy", busy))}
    lines = ["### python -m mixedcore demo (whole process, wall clock)", "",
             f"{args.demo_runs} runs per configuration and phase, interleaved; one thread = "
             "OMP_NUM_THREADS=1 (and MIXEDCORE_NUM_THREADS=1)"
             + ("" if other_quiet.cores is None else
                f"; cores kept busy by other processes: quiet {other_quiet.cores:.2f}, "
                f"busy {other_busy.cores:.2f}"), "",
             "| configuration | quiet best | quiet median | busy best | busy median |",
             "|---|---|---|---|---|"]
    for name, _ in DEMO_CONFIGS:
        lines.append(f"| {name} | {fmt_time(s['quiet'][name][0])} | "
                     f"{fmt_time(s['quiet'][name][1])} | {fmt_time(s['busy'][name][0])} | "
                     f"{fmt_time(s['busy'][name][1])} |")
    one_q, one_b = s["quiet"]["one thread"][1], s["busy"]["one thread"][1]
    dflt_q, dflt_b = s["quiet"]["default threads"][1], s["busy"]["default threads"][1]
    lines += ["", "| ratio (medians; target: busy default <= 1.5x one thread) | value |",
              "|---|---|",
              f"| default threads, busy / one thread, quiet | {dflt_b / one_q:.2f} |",
              f"| default threads, busy / one thread, busy | {dflt_b / one_b:.2f} |",
              f"| default threads, quiet / one thread, quiet | {dflt_q / one_q:.2f} |"]
    print("\n".join(lines) + "\n", flush=True)


# ---------------------------------------------------------------------------------------------

def header():
    import mixedcore
    parts = [f"mixedcore {mixedcore.__version__} ({Path(mixedcore.__file__).parent})",
             f"numpy {np.__version__}"]
    for name in ("torch", "openvino", "onnxruntime", "onnx"):
        try:
            module = __import__(name)
            parts.append(f"{name} {module.__version__.split('-')[0]}")
        except ImportError:
            parts.append(f"{name} not installed")
    return (f"{datetime.date.today().isoformat()}, {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs; " + ", ".join(parts))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6,
                        help="interleaved rounds per workload and phase (default 6)")
    parser.add_argument("--busy", action="store_true",
                        help="after the quiet rounds, run them again beside a spinning process")
    parser.add_argument("--workloads", nargs="*", choices=list(peers.WORKLOADS),
                        default=list(peers.WORKLOADS), metavar="WORKLOAD",
                        help=f"of {', '.join(peers.WORKLOADS)} (default all; none with --demo: "
                             f"only the demo)")
    parser.add_argument("--systems", nargs="+", choices=list(peers.SYSTEMS),
                        default=list(peers.SYSTEMS), metavar="SYSTEM",
                        help=f"of {', '.join(peers.SYSTEMS)} (default all installed)")
    parser.add_argument("--calls-scale", type=float, default=1.0,
                        help="multiply every workload's calls per round (default 1)")
    parser.add_argument("--demo", action="store_true",
                        help="also time python -m mixedcore demo, one thread and default, "
                             "quiet and busy")
    parser.add_argument("--demo-runs", type=int, default=2,
                        help="demo runs per configuration and phase (default 2)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.demo_runs < 1 or not args.calls_scale > 0:
        parser.error("--rounds, --demo-runs and --calls-scale must be positive")
    # SIGTERM as an exception, so that the spinner and the temporary files go with the script
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print(header() + "\n", flush=True)
    try:
        run_workloads(args)
        if args.demo:
            run_demo(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
