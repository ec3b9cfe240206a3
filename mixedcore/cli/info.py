"""``python -m mixedcore info``: the version, CPU dispatch level, threads, floating-point
environment and build of this installation, one row each."""
import sys


def run():
    """Print the table: versions, CPU dispatch, threads, FP environment and the build."""
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
