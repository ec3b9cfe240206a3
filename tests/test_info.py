"""``python -m mixedcore info`` and what it reads: the build description compiled into the
module, the floating-point environment, the CPU detection beside /proc/cpuinfo, the exported
symbols, and fit's progress display without tqdm."""
import os
import platform
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mixedcore
from mixedcore import kernels
from mixedcore.cli.main import main
from mixedcore.kernels import _runtime

from fpenv import X86FloatEnv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(mixedcore.__file__)))


def _info_rows(capsys, argv=("info",)):
    assert main(list(argv)) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        key, _, value = line.partition("  ")
        rows[key.strip()] = value.strip()
    return rows


def test_info_rows(capsys):
    rows = _info_rows(capsys)
    assert rows["mixedcore"] == mixedcore.__version__
    build = _runtime.build_info()
    assert rows["built levels"] == ", ".join(build["isa_levels"])
    assert rows["available"] == ", ".join(kernels.available_isas())
    assert rows["selected"].split()[0] == kernels.isa()
    if build["threads"]:
        assert rows["thread team"] == ("the project's own (POSIX threads); no OpenMP runtime")
    else:
        assert rows["thread team"].startswith("none (built without threads")
    if build["threads"]:
        assert rows["thread team"].startswith("the project's own (POSIX threads)")
    else:
        assert rows["thread team"].startswith("none")
    t = _runtime.thread_info()
    assert rows["threads"].startswith(f"{t['threads']} (from {t['source']};")
    assert t["source"] in ("affinity", "cgroup quota", "cpu count", "MIXEDCORE_NUM_THREADS",
                           "OMP_NUM_THREADS")
    assert rows["compiler"] == build["compiler"] and rows["flags"] == build["flags"]


def test_build_info_is_compiled_in():
    build = _runtime.build_info()
    assert build["isa_levels"][0] == "generic"
    assert build["isa_levels"] == list(kernels.ISA_LEVELS[: kernels._runtime._lib.built_level() + 1])
    assert build["threads"] == kernels._runtime._lib.threads_enabled()
    assert build["compiler"] and build["compiler"] != "unknown"
    if "gcc" in build["compiler"] or "cc" in build["compiler"] or "clang" in build["compiler"]:
        assert "-fvisibility=hidden" in build["flags"].split()
    # nothing is written next to the package: the description lives in the module
    assert not os.path.exists(os.path.join(os.path.dirname(mixedcore.__file__), "_build_info.py"))


def test_thread_source_from_environment():
    env = dict(os.environ, MIXEDCORE_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "mixedcore", "info"], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "threads" in out and "1 (from MIXEDCORE_NUM_THREADS;" in out


def test_info_names_a_forced_isa():
    env = dict(os.environ, MIXEDCORE_ISA="generic")
    out = subprocess.run([sys.executable, "-m", "mixedcore", "info"], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("selected"))
    assert line.split()[1:] == ["generic", "(MIXEDCORE_ISA=generic)"]


def test_describe_mxcsr():
    d = _runtime.describe_mxcsr
    assert d(0x1F80) == ("MXCSR 0x1f80: round to nearest even, FTZ off, DAZ off, "
                         "all exceptions masked")
    text = d(0x1F80 | 0x8000 | 0x40 | (3 << 13) | 0x20)
    assert "round toward zero" in text and "FTZ on" in text and "DAZ on" in text
    assert "flags raised: inexact" in text
    assert "exceptions unmasked: invalid" in d(0x1F80 & ~0x80)
    assert "round toward -inf" in d(0x3F80) and "round toward +inf" in d(0x5F80)
    with pytest.raises(TypeError, match=r"describe_mxcsr: value must be an int, got float"):
        d(1.5)
    with pytest.raises(ValueError, match=r"describe_mxcsr: value must be in \[0, 2\*\*32\), got -1"):
        d(-1)


@pytest.mark.skipif(not X86FloatEnv.supported, reason="the MXCSR is x86-64 Linux only")
def test_fp_environment_engine_and_caller(capsys):
    env = X86FloatEnv()
    before = env.mxcsr()
    try:
        # the caller runs toward zero with FTZ and DAZ: the engine's own stays the default
        env.set_mxcsr(0x1F80 | 0x8000 | 0x40 | (3 << 13))
        fp = _runtime.fp_environment()
        assert fp["engine_mxcsr"] == 0x1F80
        assert fp["caller_mxcsr"] & 0xFFC0 == 0x1F80 | 0x8000 | 0x40 | (3 << 13)
        rows = _info_rows(capsys)
        assert env.mxcsr() & 0xFFC0 == 0x1F80 | 0x8000 | 0x40 | (3 << 13)   # info restored it
    finally:
        env.set_mxcsr(before)
    assert rows["FP environment"].startswith("MXCSR 0x1f80: round to nearest even, FTZ off, "
                                             "DAZ off")
    # the caller's status flags (low six bits) may be anything by now
    assert "round toward zero, FTZ on, DAZ on, all exceptions masked" in rows["caller's FP env"]


def test_cpu_detection_against_a_cpuinfo_file(tmp_path):
    detected = kernels._runtime._lib.cpu_features()
    assert set(detected) == set(_runtime.CPUINFO_FLAGS)
    same = " ".join(n for n, on in detected.items() if on)
    f = tmp_path / "cpuinfo"
    f.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {same}\n\nprocessor\t: 1\n")
    d = _runtime.cpu_detection(str(f))
    assert d["disagree"] == [] and d["cpuinfo"] == detected
    # an operating system that hides avx2 (or shows it where CPUID has none)
    flipped = " ".join(n for n, on in detected.items() if on != (n == "avx2"))
    f.write_text(f"flags\t\t: {flipped}\n")
    d = _runtime.cpu_detection(str(f))
    assert d["disagree"] == ["avx2"]
    from mixedcore.cli.info import _detection_row
    assert "DISAGREES with /proc/cpuinfo on avx2 (CPUID " in _detection_row(d)
    d = _runtime.cpu_detection(str(tmp_path / "missing"))
    assert d["cpuinfo"] is None and d["disagree"] == []
    assert "not compared" in _detection_row(d)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64")
                    or not os.path.exists("/proc/cpuinfo"), reason="x86-64 Linux only")
def test_cpu_detection_agrees_with_proc_cpuinfo(capsys):
    d = _runtime.cpu_detection()
    assert d["cpuinfo"] is not None
    assert d["disagree"] == [], d
    assert _info_rows(capsys)["CPU detection"].endswith("agrees with /proc/cpuinfo")


def _exported(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3}


@pytest.mark.skipif(shutil.which("nm") is None or not sys.platform.startswith("linux"),
                    reason="needs nm and an ELF module")
def test_module_exports_only_its_entry_points():
    names = _exported(kernels._runtime._lib.__file__)
    # PyInit for Python, the two thread-count functions for threadpoolctl (MC_EXPORT_)
    assert names == {"PyInit__mixedcore", "mixedcore_get_num_threads",
                     "mixedcore_set_num_threads"}


def _tiny_model():
    from mixedcore import layers, models
    model = models.Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_fit_without_tqdm_prints_plain_lines(monkeypatch, capsys):
    from mixedcore.trainers import progress
    monkeypatch.setitem(sys.modules, "tqdm", None)             # tqdm not installed
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    monkeypatch.setattr(progress, "_interactive", lambda: True)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((40, 3)), rng.standard_normal((40, 2))
    model = _tiny_model()
    model.fit(x, y, batch_size=4, epochs=2, verbose=1)
    out = capsys.readouterr().out.splitlines()
    ends = [l for l in out if "10/10 steps" in l]
    assert [l.split(":")[0] for l in ends] == ["Epoch 1/2", "Epoch 2/2"]
    assert all(" - loss: " in l for l in ends)
    assert "Epoch 1/2: 1/10 steps - loss: " in out[0]
    model.predict(x, batch_size=8, verbose=1)
    assert capsys.readouterr().out.splitlines()[-1].startswith("predict: 5/5 steps")
    model.evaluate(x, y, batch_size=8, verbose=1)
    assert any(l.startswith("evaluate: 5/5 steps") for l in capsys.readouterr().out.splitlines())
