"""The runtime of the compiled core: the instruction-set level, the thread count, the floating-
point environment kernels run under, and what the build holds (``python -m mixedcore info``).

Importing this module applies the environment: ``MIXEDCORE_ISA``, ``MIXEDCORE_NUM_THREADS`` /
``OMP_NUM_THREADS`` and the CPU budget (affinity, cgroup quota); threadpoolctl, when installed,
is told about the thread team.  The argument checks the kernels share are in ``_checks``.
"""
from __future__ import annotations

import contextlib
import os
import threading
import warnings
from typing import Any, Iterator

import numpy as np

from mixedcore._core import _mixedcore as _lib
from mixedcore._version import __version__

ISA_LEVELS = _lib.ISA_NAMES

# ---------------------------------------------------------------------------------------------
# instruction-set level

def available_isas() -> tuple[str, ...]:
    """The instruction-set levels usable on this machine, lowest first.

    Returns
    -------
    tuple of str
        A prefix of ``("generic", "avx2", "avx512", "avx512bf16")``: the levels both this CPU
        (with its operating system) and this build of mixedcore support.
    """
    top = min(_lib.supported_level(), _lib.built_level())
    return ISA_LEVELS[: top + 1]

def isa() -> str:
    """The instruction-set level the kernels run at now (a name from ``available_isas()``)."""
    return ISA_LEVELS[_lib.get_level()]

def set_isa(level: str) -> None:
    """Run the kernels at ``level`` from now on, process-wide.

    Parameters
    ----------
    level : str
        One of ``available_isas()``.  Lower levels than the best are for testing and comparison;
        results are identical at every level except where docs/gemm.md says otherwise.

    Notes
    -----
    Safe to call from any thread: it applies from the next kernel call on, and a call already
    running keeps the level it started with.  Matrices packed by ``pack`` at another level are
    used where their panels suit, else ``matmul`` asks for a new ``pack``.

    Raises
    ------
    TypeError
        If ``level`` is not a str.
    ValueError
        If ``level`` is not a level name, or this CPU or build lacks it.
    """
    if not isinstance(level, str):
        raise TypeError(f"set_isa: level must be a str, got {type(level).__name__}")
    if level not in ISA_LEVELS:
        raise ValueError(f"set_isa: unknown level {level!r}; expected one of {list(ISA_LEVELS)}")
    avail = available_isas()
    if level not in avail:
        raise ValueError(
            f"set_isa: level {level!r} is not available on this machine "
            f"(available: {list(avail)}; CPU supports up to "
            f"{ISA_LEVELS[_lib.supported_level()]!r}, build has up to "
            f"{ISA_LEVELS[_lib.built_level()]!r})")
    _lib.set_level(ISA_LEVELS.index(level))

def _apply_isa_environment():
    level = os.environ.get("MIXEDCORE_ISA")
    if level:
        try:
            set_isa(level)
        except ValueError as exc:
            raise ValueError(f"MIXEDCORE_ISA={level!r}: {exc}") from None

_apply_isa_environment()

# ---------------------------------------------------------------------------------------------
# threads

def _positive_count(name, text):
    """The first entry of a thread-count variable such as OMP_NUM_THREADS="4,2", or ValueError."""
    first = text.split(",")[0].strip()
    try:
        value = int(first)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{name}={text!r}: expected a positive integer")
    return value


def _cgroup_cpu_limit(proc_cgroup="/proc/self/cgroup", root="/sys/fs/cgroup"):
    """CPUs the cgroup CPU quota of this process allows (rounded up), or None without a quota.

    cgroup v2: ``cpu.max`` ("max 100000" or "<quota> <period>") of the process's group and its
    parents; v1: ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` of its ``cpu`` group.  The
    smallest quota on the path wins.
    """
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        path = path.strip("/")
        if controllers == "":
            dirs, files = os.path.join(root, "unified") if os.path.isdir(
                os.path.join(root, "unified")) else root, ("cpu.max",)
        elif "cpu" in controllers.split(","):
            dirs, files = os.path.join(root, controllers), ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        pieces = [p for p in path.split("/") if p]
        for depth in range(len(pieces), -1, -1):
            d = os.path.join(dirs, *pieces[:depth])
            try:
                if len(files) == 1:
                    with open(os.path.join(d, files[0])) as f:
                        quota, period = (f.read().split() + ["100000"])[:2]
                else:
                    with open(os.path.join(d, files[0])) as f:
                        quota = f.read().strip()
                    with open(os.path.join(d, files[1])) as f:
                        period = f.read().strip()
            except OSError:
                continue
            if quota in ("max", "-1"):
                continue
            try:
                q, p = int(quota), int(period)
            except ValueError:
                continue
            if q > 0 and p > 0:
                limits.append(max(1, -(-q // p)))
    return min(limits) if limits else None


def cpu_budget() -> tuple[int, str]:
    """CPUs this process may use: its CPU affinity, capped by a cgroup CPU quota.

    Returns
    -------
    (int, str)
        The count and where it comes from ("affinity", "cgroup quota" or "cpu count").
    """
    try:
        count, source = len(os.sched_getaffinity(0)), "affinity"
    except (AttributeError, OSError):
        count, source = os.cpu_count() or 1, "cpu count"
    quota = _cgroup_cpu_limit()
    if quota is not None and quota < count:
        count, source = quota, "cgroup quota"
    return max(count, 1), source


def _default_threads():
    """The process-wide thread count at import, and its source: MIXEDCORE_NUM_THREADS, else
    OMP_NUM_THREADS (as OpenMP libraries do), else the CPU budget."""
    for name in ("MIXEDCORE_NUM_THREADS", "OMP_NUM_THREADS"):
        text = os.environ.get(name, "").strip()
        if text:
            return _positive_count(name, text), name
    return cpu_budget()


_budget, _budget_source = cpu_budget()
_lib.set_cpu_budget(_budget)
_start_threads, THREADS_SOURCE = _default_threads()
_lib.set_process_threads(min(_start_threads, _lib.THREADS_MAX))
_threads_lock = threading.Lock()


def _check_count(fname, n):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{fname}: n must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"{fname}: n must be >= 1, got {n}")
    return int(min(n, _lib.THREADS_MAX))


def get_num_threads() -> int:
    """The number of threads a kernel called from this thread may use.

    The calling thread's own setting (``threads(n)``, threadpoolctl) when it has one, else the
    process-wide one (``set_num_threads``); small problems still run on one thread.
    """
    return _lib.get_num_threads()


def set_num_threads(n: int) -> int:
    """Set the number of threads the kernels may use, process-wide.

    Parameters
    ----------
    n : int
        At least 1 (values above 256 count as 256).  A thread's own setting (``threads(n)``)
        takes precedence for calls from that thread.  Small problems always run on one thread.
        More than the CPUs the process may use (its affinity, capped by a cgroup quota) is
        accepted with a RuntimeWarning: no call uses more threads than that budget.

    Returns
    -------
    int
        The previous process-wide setting.

    Raises
    ------
    TypeError
        If ``n`` is not an int.
    ValueError
        If ``n`` < 1.

    Notes
    -----
    The default is ``MIXEDCORE_NUM_THREADS``, else ``OMP_NUM_THREADS``, else the CPUs this
    process may use (its affinity mask, capped by a cgroup CPU quota).
    """
    asked = n
    n = _check_count("set_num_threads", n)
    budget, source = cpu_budget()
    if asked > budget:
        warnings.warn(f"set_num_threads({asked}): this process may use {budget} CPUs (from its "
                      f"{source}); calls run on at most {budget} threads, helpers joining only "
                      f"while CPUs are free", RuntimeWarning, stacklevel=2)
    global _process_threads_set
    with _threads_lock:
        previous = _lib.get_process_threads()
        _lib.set_process_threads(n)
        _process_threads_set = True
    return previous


_process_threads_set = False     # set_num_threads was called in this process


def _explicit_threads():
    """Whether the thread count of a call from this thread was chosen explicitly: this
    thread's own count (``threads(n)``, threadpoolctl) or ``set_num_threads``."""
    return bool(_lib.get_thread_override()) or _process_threads_set


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Context manager: kernels called from this thread use ``n`` threads inside the block.

    The setting belongs to the calling thread only: other threads, and the process-wide
    setting, are unaffected, and blocks nest.

    Examples
    --------
    >>> with mixedcore.kernels.threads(1):
    ...     y = mixedcore.kernels.cast(x, "bfloat16")
    """
    n = _check_count("threads", n)
    previous = _lib.get_thread_override()
    _lib.set_thread_override(n)
    try:
        yield
    finally:
        _lib.set_thread_override(previous)


def thread_info() -> dict[str, Any]:
    """How the thread count was decided, for ``python -m mixedcore info``.

    Returns
    -------
    dict
        ``threads`` (this thread's count), ``process`` (the process-wide setting), ``source``
        (where the starting value came from), ``cpu_budget`` and ``budget_source``, ``team``
        (worker threads started so far) and ``enabled`` (False in a build without threads).
    """
    return {"threads": _lib.get_num_threads(), "process": _lib.get_process_threads(),
            "source": THREADS_SOURCE, "cpu_budget": _budget, "budget_source": _budget_source,
            "team": _lib.pool_workers(), "enabled": _lib.threads_enabled()}


# ---------------------------------------------------------------------------------------------
# floating-point environment

_ROUNDING = ("to nearest even", "toward -inf", "toward +inf", "toward zero")


def describe_mxcsr(value: int) -> str:
    """An x86 MXCSR value in words: rounding mode, FTZ, DAZ and the exceptions left unmasked.

    Parameters
    ----------
    value : int
        The register, 0 <= value < 2**32.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"describe_mxcsr: value must be an int, got {type(value).__name__}")
    if not 0 <= value < 1 << 32:
        raise ValueError(f"describe_mxcsr: value must be in [0, 2**32), got {value}")
    value = int(value)
    names = ("invalid", "denormal", "divide-by-zero", "overflow", "underflow", "inexact")
    unmasked = [n for i, n in enumerate(names) if not value >> (7 + i) & 1]
    raised = [n for i, n in enumerate(names) if value >> i & 1]
    return (f"MXCSR {value:#06x}: round {_ROUNDING[value >> 13 & 3]}, "
            f"FTZ {'on' if value >> 15 & 1 else 'off'}, DAZ {'on' if value >> 6 & 1 else 'off'}, "
            + (f"exceptions unmasked: {', '.join(unmasked)}" if unmasked
               else "all exceptions masked")
            + (f" (flags raised: {', '.join(raised)})" if raised else ""))


def fp_environment() -> dict[str, Any]:
    """The floating-point environment every kernel call runs under, and the caller's.

    Returns
    -------
    dict
        ``engine`` and ``caller``: descriptions (x86: of the MXCSR, see ``describe_mxcsr``;
        elsewhere the engine installs the C library's default environment, FE_DFL_ENV, and
        ``caller`` is None); ``engine_mxcsr`` and ``caller_mxcsr``: the raw registers or None.
    """
    regs = _lib.fpenv_mxcsr()
    if regs is None:
        return {"engine": "the C library's default environment (FE_DFL_ENV): round to nearest, "
                          "no flush to zero", "caller": None,
                "engine_mxcsr": None, "caller_mxcsr": None}
    engine, caller = regs
    return {"engine": describe_mxcsr(engine), "caller": describe_mxcsr(caller),
            "engine_mxcsr": engine, "caller_mxcsr": caller}


# ---------------------------------------------------------------------------------------------
# CPU detection and build

CPUINFO_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                 "avx512_bf16")


def _cpuinfo_flags(path="/proc/cpuinfo"):
    """The first processor's flags in ``path``, or None when it cannot be read or has none."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        return None
    return None


def cpu_detection(cpuinfo: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The engine's CPUID detection beside the operating system's view of the same features.

    Returns
    -------
    dict
        ``detected`` (feature -> bool, from CPUID), ``cpuinfo`` (feature -> bool, or None when
        ``cpuinfo`` is unreadable) and ``disagree`` (the features on which they differ).
    """
    detected = _lib.cpu_features()
    flags = _cpuinfo_flags(cpuinfo)
    if flags is None:
        return {"detected": detected, "cpuinfo": None, "disagree": []}
    seen = {name: name in flags for name in CPUINFO_FLAGS}
    return {"detected": detected, "cpuinfo": seen,
            "disagree": [n for n in CPUINFO_FLAGS if detected[n] != seen[n]]}


def build_info() -> dict[str, Any]:
    """What this build of the compiled core holds: compiler, flags, ISA levels and threads."""
    return _lib.build_info()


# ---------------------------------------------------------------------------------------------
# threadpoolctl

def _register_threadpoolctl():
    """Let threadpoolctl see and limit the team: ``threadpool_limits(n)`` and
    ``threadpool_limits(n, user_api="openmp")`` set the calling thread's count, as they do for
    OpenMP libraries (the team honours OMP_NUM_THREADS too)."""
    try:
        import threadpoolctl
    except ImportError:
        return
    if not hasattr(threadpoolctl, "register"):
        return

    class MixedcoreController(threadpoolctl.LibController):
        user_api = "openmp"
        internal_api = "mixedcore"
        filename_prefixes = ("_mixedcore",)

        def get_num_threads(self):
            return self.dynlib.mixedcore_get_num_threads()

        def set_num_threads(self, num_threads):
            self.dynlib.mixedcore_set_num_threads(int(num_threads))

        def get_version(self):
            return __version__

    threadpoolctl.register(MixedcoreController)


_register_threadpoolctl()
