"""CPU dispatch levels, MIXEDCORE_ISA, threads, and the info command."""
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import mixedcore
from mixedcore import kernels

LEVELS = ("generic", "avx2", "avx512", "avx512bf16")


# Subprocesses import the same mixedcore as this process, whatever the working directory.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(mixedcore.__file__)))


def run(args, **env):
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, full_env.get("PYTHONPATH")]))
    full_env.update(env)
    return subprocess.run([sys.executable] + args, capture_output=True, text=True,
                          env=full_env, timeout=120, cwd=PACKAGE_ROOT)


def run_python(code, **env):
    return run(["-c", code], **env)


def test_available_isas_is_an_ordered_prefix():
    avail = kernels.available_isas()
    assert avail == LEVELS[:len(avail)]
    assert avail[0] == "generic"
    assert kernels.isa() in avail


def test_set_isa_round_trip():
    previous = kernels.isa()
    try:
        for level in kernels.available_isas():
            kernels.set_isa(level)
            assert kernels.isa() == level
    finally:
        kernels.set_isa(previous)


def test_set_isa_errors():
    with pytest.raises(TypeError, match="set_isa: level must be a str, got int"):
        kernels.set_isa(2)
    with pytest.raises(ValueError, match=r"set_isa: unknown level 'sse9'; expected one of"):
        kernels.set_isa("sse9")
    missing = [lvl for lvl in LEVELS if lvl not in kernels.available_isas()]
    for level in missing:
        with pytest.raises(ValueError, match=f"set_isa: level '{level}' is not available"):
            kernels.set_isa(level)


@pytest.mark.parametrize("level", kernels.available_isas())
def test_environment_forces_a_level(level):
    r = run_python("from mixedcore import kernels; print(kernels.isa())", MIXEDCORE_ISA=level)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == level


def test_environment_with_unknown_level_is_an_error_not_a_crash():
    r = run_python("import mixedcore", MIXEDCORE_ISA="avx1024")
    assert r.returncode == 1
    assert "ValueError: MIXEDCORE_ISA='avx1024'" in r.stderr
    assert "unknown level" in r.stderr


@pytest.mark.skipif(kernels.available_isas()[-1] == "avx512bf16",
                    reason="this machine has every level")
def test_environment_with_missing_level_is_an_error():
    missing = LEVELS[len(kernels.available_isas())]
    r = run_python("import mixedcore", MIXEDCORE_ISA=missing)
    assert r.returncode == 1
    assert "is not available on this machine" in r.stderr


def test_set_num_threads_and_context_manager():
    """The settings round-trip; a build without the team always runs with one thread."""
    from mixedcore._core import _mixedcore as _lib
    eff = (lambda n: n) if _lib.threads_enabled() else (lambda n: 1)
    start = kernels.get_num_threads()
    with kernels.threads(1):
        assert kernels.get_num_threads() == 1
        with kernels.threads(3):
            assert kernels.get_num_threads() == eff(3)
        assert kernels.get_num_threads() == 1
    assert kernels.get_num_threads() == start
    previous = kernels.set_num_threads(2)
    assert kernels.get_num_threads() == eff(2)
    kernels.set_num_threads(previous)
    assert kernels.get_num_threads() == start


def test_threads_context_restores_on_exception():
    start = kernels.get_num_threads()
    with pytest.raises(RuntimeError):
        with kernels.threads(1):
            raise RuntimeError("boom")
    assert kernels.get_num_threads() == start


@pytest.mark.parametrize("bad,exc,msg", [
    (0, ValueError, "set_num_threads: n must be >= 1, got 0"),
    (-3, ValueError, "set_num_threads: n must be >= 1, got -3"),
    (1.5, TypeError, "set_num_threads: n must be an int, got float"),
    ("2", TypeError, "set_num_threads: n must be an int, got str"),
    (True, TypeError, "set_num_threads: n must be an int, got bool"),
])
def test_set_num_threads_errors(bad, exc, msg):
    with pytest.raises(exc, match=msg):
        kernels.set_num_threads(bad)


def test_omp_num_threads_is_honoured():
    r = run_python("from mixedcore import kernels; print(kernels.get_num_threads())",
                   OMP_NUM_THREADS="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"


def test_visible_to_threadpoolctl():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    info = threadpoolctl.threadpool_info()
    ours = [d for d in info if d["internal_api"] == "mixedcore"]
    assert len(ours) == 1, info
    assert ours[0]["user_api"] == "openmp"
    assert ours[0]["version"] == mixedcore.__version__
    start = kernels.get_num_threads()
    x = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    for limits in ({"limits": 1, "user_api": "openmp"}, {"limits": 1}):
        with threadpoolctl.threadpool_limits(**limits):
            assert kernels.get_num_threads() == 1
            y = kernels.cast(x, np.float16)   # runs with the limit in force
        assert kernels.get_num_threads() == start
    np.testing.assert_array_equal(y, x.astype(np.float16))


def test_kernels_release_the_gil_and_are_thread_safe():
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(1 << 18).astype(np.float32) for _ in range(4)]
    results = [None] * 4

    def work(i):
        for _ in range(5):
            results[i] = kernels.cast(xs[i], "bfloat16")

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for x, r in zip(xs, results):
        np.testing.assert_array_equal(r.view(np.uint16), x.astype(r.dtype).view(np.uint16))


def test_info_command():
    r = run(["-m", "mixedcore", "info"])
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert mixedcore.__version__ in out
    for key in ("selected", "threads", "thread team", "FP environment", "compiler", "flags",
                "CPU supports"):
        assert key in out
    assert kernels.isa() in out


def test_cli_without_command_is_a_usage_error():
    r = run(["-m", "mixedcore"])
    assert r.returncode == 2
    assert "usage" in r.stderr


def test_set_num_threads_beyond_the_budget_warns():
    from mixedcore.kernels._runtime import cpu_budget
    budget, _ = cpu_budget()
    previous = kernels.get_num_threads()
    try:
        with pytest.warns(RuntimeWarning, match=rf"may use {budget} CPUs"):
            kernels.set_num_threads(budget + 1000)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            kernels.set_num_threads(budget)
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kernels.set_num_threads(previous)
