"""The engine under every kernel: threads, fork, floating-point mode, settings, workspaces.

These are the kernels' promises tested from outside, as a user's program meets them: a child
of fork() after threaded work, a caller that set flush-to-zero or another rounding mode,
another thread changing the level or block sizes during a product, short-lived threads, a
thread count of one's own, the CPU budget of a container.
"""
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading

import ml_dtypes
import numpy as np
import pytest

import mixedcore
from fpenv import X86FloatEnv
from mixedcore import kernels
from mixedcore._core import _mixedcore as _lib
from mixedcore.kernels import _runtime

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
U = 2.0 ** -24
needs_threads = pytest.mark.skipif(not _lib.threads_enabled(), reason="built without threads")


def _same(x, y):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    assert np.array_equal(x.view(np.uint8), y.view(np.uint8))


def _within_bound(got, a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    bound = 2 * a.shape[-1] * U * (np.abs(a64) @ np.abs(b64))
    return bool(np.all(np.abs(got.astype(np.float64) - a64 @ b64) <= bound))


# child processes run beside the package the tests import (the checkout root, or site-packages
# when the tests of an unpacked sdist run against the installed package)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(mixedcore.__file__)))


def run_python(code, **env):
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full, timeout=300, cwd=PACKAGE_ROOT)


# --- fork ---------------------------------------------------------------------------------------

def _child_work(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(1 << 21).astype(F32)
    a = rng.standard_normal((300, 400)).astype(BF16)
    b = rng.standard_normal((400, 500)).astype(BF16)
    with kernels.threads(2):
        return (kernels.cast(x, BF16).view(np.uint16).tobytes(),
                kernels.matmul(a, b).tobytes(), bool(kernels.all_finite(x)))


@needs_threads
def test_fork_child_after_threaded_work():
    """A child of fork() after threaded calls (multiprocessing's default on Linux) runs
    threaded kernels itself: the team is started again in the child."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    want = _child_work(5)                       # threaded work here first: workers exist
    assert _lib.pool_workers() >= 1
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        result = pool.map_async(_child_work, [5, 5, 5])
        got = result.get(timeout=120)           # a hang fails here instead of blocking CI
    assert all(g == want for g in got)


@needs_threads
def test_fork_while_another_thread_computes():
    """fork() while another thread of the parent is inside a threaded kernel: the child still
    works (its team is new) and the parent's call completes."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    stop = threading.Event()
    x = np.random.default_rng(2).standard_normal(1 << 22).astype(F32)

    def busy():
        with kernels.threads(2):
            while not stop.is_set():
                kernels.cast(x, F16)

    t = threading.Thread(target=busy)
    t.start()
    try:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(1) as pool:
            got = pool.apply_async(_child_work, (9,)).get(timeout=120)
    finally:
        stop.set()
        t.join()
    assert got == _child_work(9)


# --- floating-point environment ----------------------------------------------------------------

FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO = 0x800, 0x400, 0xC00


@pytest.fixture
def fpenv():
    if not X86FloatEnv.supported:
        pytest.skip("MXCSR through glibc's fenv_t: x86-64 Linux")
    env = X86FloatEnv()
    start = env.mxcsr()
    yield env
    env.set_mxcsr(start)
    env.libc.fesetround(0)


def _fp_inputs():
    """Inputs with subnormals and inexact values, made in the default mode (numpy's own
    arithmetic would flush them under FTZ/DAZ)."""
    tiny = np.float64(2.0) ** np.arange(-1080, -1000, 0.37)
    big = np.random.default_rng(3).standard_normal(1 << 18) * 1e-40
    mixed = np.concatenate([tiny, big, 1 / 3 + np.arange(1000.0)])
    sub32 = (np.float32(2.0) ** np.arange(-149, -120, 0.5, dtype=np.float32)).astype(F32)
    a = np.full((40, 64), 2.0 ** -70, F32)
    a[:, ::3] = 1 / 3
    b = np.full((64, 50), 2.0 ** -70, F32)
    b[::5] = 3.0
    grads = [(np.arange(50000, dtype=F32) + 1) * np.float32(2.0 ** -130),
             np.full(3000, 1 / 3, F16)]
    return {"mixed": mixed, "sub32": sub32, "sub16": sub32.astype(BF16),
            "a": {dt: a.astype(dt) for dt in (F32, F16)}, "b": {dt: b.astype(dt) for dt in (F32, F16)},
            "grads": grads}


def _fp_workload(inp, threads):
    """Conversions, products and unscaling whose results depend on FTZ/DAZ and rounding mode
    if a kernel ran in the caller's environment."""
    out = []
    with kernels.threads(threads):
        for dt in (F32, F16, BF16):
            out.append(kernels.cast(inp["mixed"], dt))
        out.append(kernels.cast(inp["sub32"], BF16))
        out.append(kernels.cast(inp["sub16"], F32))
        for dt in (F32, F16):
            out.append(kernels.matmul(inp["a"][dt], inp["b"][dt], out_dtype=dt, alpha=0.1))
        grads = [g.copy() for g in inp["grads"]]
        kernels.unscale_and_check(grads, 3.0)
        out += grads
    return out


def test_results_do_not_depend_on_the_callers_fp_mode(isa_level, fpenv):
    default = fpenv.mxcsr()
    inp = _fp_inputs()
    for threads in (1, 2):
        want = _fp_workload(inp, threads)
        for mode in ("ftz-daz", "upward", "downward", "towardzero"):
            if mode == "ftz-daz":
                fpenv.set_mxcsr(default | 0x8040)
            else:
                fpenv.libc.fesetround({"upward": FE_UPWARD, "downward": FE_DOWNWARD,
                                       "towardzero": FE_TOWARDZERO}[mode])
            caller = fpenv.mxcsr()
            try:
                got = _fp_workload(inp, threads)
                after = fpenv.mxcsr()
            finally:
                fpenv.set_mxcsr(default)
                fpenv.libc.fesetround(0)
            assert after == caller, f"{mode}: MXCSR {caller:#x} came back as {after:#x}"
            for g, w in zip(got, want):
                _same(g, w)


def test_no_exception_flags_leak(fpenv):
    default = fpenv.mxcsr() & ~0x3F
    fpenv.set_mxcsr(default)
    x = np.array([np.nan, np.inf, 1e300, 1e-300, -0.0], np.float64)
    kernels.cast(x, F16)
    kernels.cast(x, BF16)
    kernels.matmul(np.full((3, 3), 6e4, F16), np.full((3, 3), 6e4, F16), out_dtype=F16)
    assert fpenv.mxcsr() & 0x3F == 0


# --- settings changed during a call ------------------------------------------------------------

def test_setters_during_products_from_other_threads(rng=np.random.default_rng(4)):
    """One thread flips the level and the block sizes while others multiply with 16-bit
    outputs: every result stays within the error bound (each call keeps the plan it made)."""
    levels = kernels.available_isas()
    previous = kernels.isa()
    stop = threading.Event()
    errors = []
    cases = []
    for dt in (F16, BF16, F32):
        a = rng.standard_normal((70, 1500)).astype(dt)
        b = rng.standard_normal((1500, 90)).astype(dt)
        cases.append((a, b, dt))

    def flip():
        i = 0
        while not stop.is_set():
            kernels.set_isa(levels[i % len(levels)])
            kernels.set_gemm_blocks(mc=[14, 200, 0][i % 3], kc=[16, 4096, 0, 40][i % 4],
                                    nc=[32, 2048, 0][i % 3])
            i += 1

    def multiply():
        try:
            for _ in range(25):
                for a, b, dt in cases:
                    got = kernels.matmul(a, b, out_dtype=dt)
                    ok = _within_bound(got, a, b) if dt == F32 else np.allclose(
                        got.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64),
                        rtol=2.0 ** -7, atol=0.5)
                    if not ok:
                        errors.append((dt, "outside the bound"))
        except Exception as exc:            # noqa: BLE001 - reported below
            errors.append(exc)

    flipper = threading.Thread(target=flip)
    workers = [threading.Thread(target=multiply) for _ in range(2)]
    flipper.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    flipper.join()
    kernels.set_isa(previous)
    kernels.set_gemm_blocks()
    assert not errors, errors[:3]


@pytest.mark.parametrize("kw,msg", [
    ({"kc": 2 ** 62}, "set_gemm_blocks: kc must be between 0 and 16384, got 4611686018427387904"),
    ({"mc": 2 ** 40}, "set_gemm_blocks: mc must be between 0 and 16384"),
    ({"nc": 65537}, "set_gemm_blocks: nc must be between 0 and 65536, got 65537"),
    ({"nc": -1}, "set_gemm_blocks: nc must be between 0 and 65536, got -1"),
])
def test_huge_block_sizes_are_refused(kw, msg):
    before = _lib.gemm_kernel_info(2, 2)
    with pytest.raises(ValueError, match=msg):
        kernels.set_gemm_blocks(**kw)
    assert _lib.gemm_kernel_info(2, 2) == before       # nothing changed


@pytest.mark.parametrize("var", ["MIXEDCORE_GEMM_KC", "MIXEDCORE_GEMM_MC", "MIXEDCORE_GEMM_NC"])
def test_huge_block_size_variables_are_refused(var):
    r = run_python("import mixedcore", **{var: str(2 ** 62)})
    assert r.returncode == 1
    assert f"{var}='{2 ** 62}': expected a positive integer of at most" in r.stderr
    assert "ValueError" in r.stderr


def test_largest_block_sizes_work(rng=np.random.default_rng(6)):
    a = rng.standard_normal((30, 40)).astype(F32)
    b = rng.standard_normal((40, 20)).astype(F32)
    kernels.set_gemm_blocks(mc=16384, kc=16384, nc=65536)
    try:
        got = kernels.matmul(a, b, out_dtype=BF16)
    finally:
        kernels.set_gemm_blocks()
    _same(got, kernels.matmul(a, b, out_dtype=BF16))


# --- threads -----------------------------------------------------------------------------------

def test_thread_counts_belong_to_their_thread():
    """threads(n) in two threads at once: each sees its own count; the process-wide setting
    and other threads are unaffected."""
    start = kernels.get_num_threads()
    process = _lib.get_process_threads()
    barrier = threading.Barrier(2)
    seen = {}

    def worker(n):
        with kernels.threads(n):
            barrier.wait()
            seen[n] = kernels.get_num_threads()
            kernels.cast(np.ones(1 << 20, F32), F16)
            barrier.wait()
            seen[(n, "after")] = kernels.get_num_threads()
        seen[(n, "out")] = kernels.get_num_threads()

    ts = [threading.Thread(target=worker, args=(n,)) for n in (1, 3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    three = 3 if _lib.threads_enabled() else 1
    assert seen[1] == 1 and seen[3] == three
    assert seen[(1, "after")] == 1 and seen[(3, "after")] == three
    assert seen[(1, "out")] == seen[(3, "out")] == start
    assert kernels.get_num_threads() == start and _lib.get_process_threads() == process


def test_threads_errors():
    with pytest.raises(ValueError, match="threads: n must be >= 1, got 0"):
        with kernels.threads(0):
            pass
    with pytest.raises(TypeError, match="threads: n must be an int, got float"):
        with kernels.threads(1.0):
            pass


@needs_threads
def test_team_starts_and_results_do_not_depend_on_threads(rng=np.random.default_rng(8)):
    x = rng.standard_normal((3000, 700)).astype(F32)
    a = rng.standard_normal((500, 600)).astype(BF16)
    b = rng.standard_normal((600, 700)).astype(BF16)
    results = {}
    for t in (1, 2, 3, 4):
        with kernels.threads(t):
            results[t] = (kernels.cast(x, BF16), kernels.matmul(a, b, out_dtype=F16),
                          kernels.all_finite(x))
    assert _lib.pool_workers() >= 1
    for t in (2, 3, 4):
        for g, w in zip(results[t], results[1]):
            _same(g, w)


def test_short_lived_threads_free_their_workspaces():
    """200 threads, each doing one product that needs scratch (16-bit output, K > KC), then
    exiting: memory comes back (before: every thread kept about 2 MiB for good)."""
    code = """
    import threading, numpy as np, ml_dtypes
    from mixedcore import kernels
    from mixedcore._core import _mixedcore as _lib
    bf = ml_dtypes.bfloat16
    a = np.ones((200, 5000), bf); b = np.ones((5000, 300), bf)
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    held = []
    def one():
        with kernels.threads(1):
            kernels.matmul(a, b, out_dtype=bf)
        held.append(_lib.workspace_bytes())
    for _ in range(3):
        t = threading.Thread(target=one); t.start(); t.join()
    before = rss()
    for _ in range(200):
        t = threading.Thread(target=one); t.start(); t.join()
    grown = rss() - before
    print(min(held), grown)
    """
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    held, grown = map(int, r.stdout.split())
    assert held > 1 << 18                     # each thread did hold a workspace
    assert grown < 32 << 20, f"RSS grew by {grown / 2 ** 20:.0f} MiB over 200 threads"


def test_workspace_is_kept_between_calls_of_a_thread():
    a = np.ones((64, 3000), BF16)
    b = np.ones((3000, 64), BF16)
    with kernels.threads(1):
        kernels.matmul(a, b, out_dtype=BF16)
        first = _lib.workspace_bytes()
        kernels.matmul(a, b, out_dtype=BF16)
        assert _lib.workspace_bytes() == first > 0


def test_concurrent_calls_from_many_threads(rng=np.random.default_rng(11)):
    """More Python threads than CPUs calling threaded kernels at once: correct results (the
    team shares the CPUs rather than adding threads)."""
    a = rng.standard_normal((400, 300)).astype(BF16)
    b = rng.standard_normal((300, 500)).astype(BF16)
    x = rng.standard_normal(1 << 20).astype(F32)
    want = (kernels.matmul(a, b), kernels.cast(x, F16))
    errors = []

    def work():
        for _ in range(10):
            got = (kernels.matmul(a, b), kernels.cast(x, F16))
            if not all(np.array_equal(g.view(np.uint8), w.view(np.uint8))
                       for g, w in zip(got, want)):
                errors.append("mismatch")

    ts = [threading.Thread(target=work) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


# --- the default thread count ------------------------------------------------------------------

def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota(tmp_path):
    _write(tmp_path / "proc", "0::/job/step\n")
    _write(tmp_path / "cg" / "job" / "step" / "cpu.max", "max 100000\n")
    _write(tmp_path / "cg" / "job" / "cpu.max", "150000 100000\n")
    assert _runtime._cgroup_cpu_limit(str(tmp_path / "proc"), str(tmp_path / "cg")) == 2
    _write(tmp_path / "cg" / "job" / "step" / "cpu.max", "50000 100000\n")
    assert _runtime._cgroup_cpu_limit(str(tmp_path / "proc"), str(tmp_path / "cg")) == 1


def test_cgroup_v1_quota(tmp_path):
    _write(tmp_path / "proc", "4:memory:/x\n3:cpu,cpuacct:/box\n0::/\n")
    _write(tmp_path / "cg" / "cpu,cpuacct" / "box" / "cpu.cfs_quota_us", "300000\n")
    _write(tmp_path / "cg" / "cpu,cpuacct" / "box" / "cpu.cfs_period_us", "100000\n")
    assert _runtime._cgroup_cpu_limit(str(tmp_path / "proc"), str(tmp_path / "cg")) == 3
    _write(tmp_path / "cg" / "cpu,cpuacct" / "box" / "cpu.cfs_quota_us", "-1\n")
    assert _runtime._cgroup_cpu_limit(str(tmp_path / "proc"), str(tmp_path / "cg")) is None


def test_no_cgroup_files(tmp_path):
    assert _runtime._cgroup_cpu_limit(str(tmp_path / "missing"), str(tmp_path)) is None
    _write(tmp_path / "proc", "garbage\n0::/\n")
    assert _runtime._cgroup_cpu_limit(str(tmp_path / "proc"), str(tmp_path / "cg")) is None


def test_default_threads_follow_the_affinity_mask():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    cpu = sorted(os.sched_getaffinity(0))[0]
    r = run_python(f"""
    import os
    os.sched_setaffinity(0, {{{cpu}}})
    from mixedcore import kernels
    from mixedcore.kernels._runtime import thread_info
    t = thread_info()
    print(kernels.get_num_threads(), t["cpu_budget"], t["budget_source"])
    """, OMP_NUM_THREADS="", MIXEDCORE_NUM_THREADS="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["1", "1"]


@pytest.mark.parametrize("env,want", [
    ({"MIXEDCORE_NUM_THREADS": "3", "OMP_NUM_THREADS": "1"}, "3 MIXEDCORE_NUM_THREADS"),
    ({"MIXEDCORE_NUM_THREADS": "", "OMP_NUM_THREADS": "2,1"}, "2 OMP_NUM_THREADS"),
])
def test_thread_count_variables(env, want):
    r = run_python("from mixedcore import kernels\nfrom mixedcore.kernels._runtime import "
                   "thread_info\nprint(kernels.get_num_threads(), thread_info()['source'])", **env)
    assert r.returncode == 0, r.stderr
    count, source = want.split()
    assert r.stdout.split() == [count if _lib.threads_enabled() else "1", source]


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_bad_thread_count_variables(value):
    r = run_python("import mixedcore", MIXEDCORE_NUM_THREADS=value)
    assert r.returncode == 1
    assert f"MIXEDCORE_NUM_THREADS={value!r}: expected a positive integer" in r.stderr


def test_info_reports_the_engine():
    r = subprocess.run([sys.executable, "-m", "mixedcore", "info"], capture_output=True,
                       text=True, timeout=120, cwd=PACKAGE_ROOT)
    assert r.returncode == 0, r.stderr
    assert "thread team" in r.stdout and "FP environment" in r.stdout
    info = _runtime.thread_info()
    assert f"CPU budget {info['cpu_budget']}" in r.stdout
    assert mixedcore.__version__ in r.stdout
