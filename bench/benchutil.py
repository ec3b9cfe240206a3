"""Shared pieces of the benchmark suites: data, optional baselines, throughput reporting, and the
spinning process of the busy-machine mode (``--busy``)."""
import contextlib
import functools
import os
import subprocess
import sys

import numpy as np


def optional_torch():
    """torch when installed (a baseline only, never a dependency), else None."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(2)
    return torch


def run(benchmark, group, impl, fn, nbytes=None, flops=None):
    """Time ``fn`` as implementation ``impl`` in ``group``; record GB/s or GFLOP/s (median)."""
    benchmark.group = group
    benchmark.extra_info["impl"] = impl
    result = benchmark(fn)
    median = benchmark.stats.stats.median if benchmark.stats else None
    if median:
        if nbytes is not None:
            benchmark.extra_info["GB/s"] = round(nbytes / median / 1e9, 2)
        if flops is not None:
            benchmark.extra_info["GFLOP/s"] = round(flops / median / 1e9, 1)
    return result


@functools.lru_cache(maxsize=None)
def normal_data(dtype, n):
    """n normal values times 100 in ``dtype``, built once per (dtype, n) outside timed code."""
    rng = np.random.default_rng(0)
    return (rng.standard_normal(n, dtype=np.float32) * 100).astype(dtype)


SPIN_CODE = "while True: pass"


def _die_with_parent(parent):
    """In the child before exec: ask Linux to SIGKILL it when ``parent`` exits, however it exits."""
    def setup():
        try:
            import ctypes
            import signal
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)       # PR_SET_PDEATHSIG
        except (OSError, AttributeError):                       # not Linux: cleanup paths only
            pass
        if os.getppid() != parent:                              # the parent died before prctl
            os._exit(0)
    return setup


def start_spinner(new_session=True):
    """Start one process that spins on a core (``python -c "while True: pass"``): a busy machine.

    By default it runs in a session of its own, as another user's job would: with Linux's
    autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) the CPU is shared
    fairly between sessions first, so a spinner in the benchmark's own session competes with it
    less than a foreign job does.  Stop it with :func:`stop_spinner`.  On Linux it is also
    killed by the kernel when this process dies, so even a SIGKILL of the benchmark leaves no
    spinner behind.
    """
    preexec = _die_with_parent(os.getpid()) if sys.platform.startswith("linux") else None
    return subprocess.Popen([sys.executable, "-c", SPIN_CODE], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=preexec, start_new_session=new_session)


def stop_spinner(proc):
    """Kill and reap a process from :func:`start_spinner` (idempotent)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@contextlib.contextmanager
def spinning(new_session=True):
    """Run the block beside one spinning process; it is killed on exit, also on exceptions."""
    proc = start_spinner(new_session)
    try:
        yield proc
    finally:
        stop_spinner(proc)


def blocked_runs(fns, rounds, calls):
    """{name: [seconds per call]} of each of ``fns`` making ``rounds * calls`` timed calls in one
    block, after one untimed call, the systems one after the other: no other system's threads
    (which may spin for a while after their calls) share the machine with the one timed, as in
    a process that uses one library; a slow phase of the machine falls on one system."""
    import time
    times = {}
    for name, fn in fns.items():
        fn()
        times[name] = []
        for _ in range(rounds * calls):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def interleaved_rounds(fns, rounds, calls):
    """{name: [seconds per call]} of ``rounds`` rounds in which each of ``fns`` makes ``calls``
    timed calls, the order of the systems reversed every other round so that a slow phase of
    the shared machine falls on all of them."""
    import time
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            fn = fns[name]
            for _ in range(calls):
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
    return times
