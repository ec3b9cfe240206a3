"""The source distribution's contents (built from this checkout with ``python -m build``)."""
import importlib.util
import os
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --no-isolation builds with what is installed: the build front end and the build requirements
HAVE_BUILD = all(importlib.util.find_spec(m) is not None
                 for m in ("build", "Cython", "setuptools", "wheel"))
IN_CHECKOUT = os.path.exists(os.path.join(ROOT, "setup.py")) and \
    os.path.exists(os.path.join(ROOT, "MANIFEST.in"))


@pytest.fixture(scope="module")
def sdist_names(tmp_path_factory):
    if not HAVE_BUILD:
        pytest.skip("building an sdist here needs build, Cython, setuptools and wheel installed")
    if not IN_CHECKOUT:
        pytest.skip("not run from a source checkout")
    out = tmp_path_factory.mktemp("sdist")
    r = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(out),
                        ROOT], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (archive,) = [p for p in os.listdir(out) if p.endswith(".tar.gz")]
    with tarfile.open(os.path.join(out, archive)) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    return {n[len(top) + 1:] for n in names if n.startswith(top + "/")}


def test_sdist_carries_tests_docs_bench_and_licence(sdist_names):
    for name in ("LICENSE", "README.md", "pyproject.toml", "setup.py", "MANIFEST.in",
                 "tests/conftest.py", "tests/gradcheck.py", "tests/fpenv.py", "tests/levels.py",
                 "tests/test_packaging.py", "tests/test_layers.py",
                 "docs/building.md", "docs/architecture.md", "bench/conftest.py",
                 "bench/benchutil.py", "mixedcore/py.typed", "mixedcore/_core/_mixedcore.pyi",
                 "mixedcore/_core/_mixedcore.pyx", "mixedcore/_core/_gemm.pxi",
                 "mixedcore/_core/src/runtime/mc_runtime.h",
                 "mixedcore/_core/src/gemm/mc_gemm_avx2.c", "mixedcore/_core/src/mc_types.h",
                 "mixedcore/_core/src/pool/mc_pool_kernels.h"):
        assert name in sdist_names, name
    # every tracked test, doc and C source is there
    tracked = subprocess.run(["git", "ls-files", "tests", "docs", "bench", "mixedcore/_core/src"],
                             cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode == 0:
        missing = set(tracked.stdout.split()) - sdist_names
        assert not missing, sorted(missing)


def test_sdist_has_no_generated_or_built_files(sdist_names):
    bad = [n for n in sdist_names
           if n.endswith(("_mixedcore.c", "_lib.c", ".so", ".pyd", ".o", ".pyc"))
           or "__pycache__" in n or n.startswith("build/") or n == "mixedcore/_build_info.py"]
    assert bad == []


def test_licence_is_declared():
    if not IN_CHECKOUT:
        pytest.skip("not run from a source checkout")
    try:
        import tomllib
    except ImportError:
        pytest.skip("tomllib needs Python 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["license"] == "BSD-3-Clause"
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert "BSD 3-Clause License" in text and "The mixedcore developers" in text
    # tqdm is optional: an extra, not a requirement
    assert not any(d.startswith("tqdm") for d in project["dependencies"])
    assert any(d.startswith("tqdm") for d in project["optional-dependencies"]["progress"])
