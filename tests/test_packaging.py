"""The source distribution's contents (built from this checkout with ``python -m build``)."""
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

import mixedcore

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


def _pyproject():
    """pyproject.toml of the checkout the tests run from (skipped elsewhere)."""
    if not IN_CHECKOUT:
        pytest.skip("not run from a source checkout")
    try:
        import tomllib
    except ImportError:
        pytest.skip("tomllib needs Python 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_licence_is_declared():
    project = _pyproject()["project"]
    assert project["license"] == "BSD-3-Clause"
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert "BSD 3-Clause License" in text and "The mixedcore developers" in text
    # tqdm is optional: an extra, not a requirement
    assert not any(d.startswith("tqdm") for d in project["dependencies"])
    assert any(d.startswith("tqdm") for d in project["optional-dependencies"]["progress"])


# ---- importing mixedcore from where it cannot work says what to do ---------------------------

PACKAGE = os.path.dirname(os.path.abspath(mixedcore.__file__))


def _run(code, cwd, pythonpath=None):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def _unbuilt_tree(root):
    """A copy of the package without its compiled module, beside a setup.py: a fresh clone."""
    shutil.copytree(PACKAGE, root / "mixedcore",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    (root / "setup.py").write_text("")
    return root


def test_an_unbuilt_tree_says_how_to_build_it(tmp_path):
    tree = _unbuilt_tree(tmp_path / "clone")
    r = _run("import mixedcore", cwd=tree)
    assert r.returncode == 1
    last = r.stderr[r.stderr.index("ImportError: "):]
    assert f"compiled core (mixedcore._core._mixedcore) is not built in {tree / 'mixedcore'}" \
        in last
    assert '"Cython>=3.0"' in last and "python setup.py build_ext --inplace" in last
    assert f"pip install {tree}" in last
    assert "run from another directory" in last
    # an installed copy further down the path is named
    r = _run("import mixedcore", cwd=tree, pythonpath=os.path.dirname(PACKAGE))
    assert f"An installed mixedcore is at {PACKAGE}, hidden by this one" in r.stderr


def test_a_module_built_for_another_python_is_named(tmp_path):
    tree = _unbuilt_tree(tmp_path / "clone")
    (tree / "mixedcore" / "_core" / "_mixedcore.cpython-00-x86_64-linux-gnu.so").write_bytes(b"")
    r = _run("import mixedcore", cwd=tree)
    assert "_mixedcore.cpython-00-x86_64-linux-gnu.so is built for another Python" in r.stderr


def test_the_build_tools_command_matches_the_build_requirements():
    requires = _pyproject()["build-system"]["requires"]
    command = mixedcore._BUILD_TOOLS
    assert command.startswith("python -m pip install ")
    named = [w.strip('"') for w in command.split()[4:]]
    assert sorted(named) == sorted(requires)
    # the README and docs/building.md give the same command
    for page in ("README.md", os.path.join("docs", "building.md")):
        with open(os.path.join(ROOT, page)) as f:
            assert command in f.read(), page


def test_python_m_mixedcore_from_the_clones_parent_says_so(tmp_path):
    """From the directory a clone was made in, ``mixedcore`` is the clone's root, a namespace
    package; an editable install still finds the package's submodules (as here, by the
    namespace's path), so ``python -m mixedcore`` runs and says what is wrong."""
    clone = tmp_path / "mixedcore"
    clone.mkdir()
    # with no installed package on the path (as when it is installed in editable mode, by a
    # finder that comes after the path's)
    code = ("import os, runpy, sys\n"
            "sys.path[:] = [p for p in sys.path\n"
            "               if not os.path.exists(os.path.join(p or '.', 'mixedcore', '__init__.py'))]\n"
            f"import mixedcore; mixedcore.__path__.append({PACKAGE!r})\n"
            "sys.argv = ['mixedcore', 'info']; runpy.run_module('mixedcore', run_name='__main__')")
    r = _run(code, cwd=tmp_path, pythonpath=None)
    assert r.returncode == 1
    assert f"python -m mixedcore: 'mixedcore' here is the directory {clone}, not the package" \
        in r.stderr
    assert "Run from another directory" in r.stderr


def test_the_keras_extra_pins_what_ci_tests_with():
    """The ``keras`` extra is the Keras and torch that .ci/run installs for the interop tests."""
    if not os.path.exists(os.path.join(ROOT, ".ci", "run")):
        pytest.skip("not run from a source checkout")
    extra = _pyproject()["project"]["optional-dependencies"]["keras"]
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        installs = [line for line in f if line.startswith("python -m pip install") and "keras=" in line]
    assert len(installs) == 1
    assert sorted(extra) == sorted(w.strip('"') for w in installs[0].split()[4:])
    # the skip reason of a test that needs Keras names the extra
    import conftest
    assert '"mixedcore[keras]"' in conftest.KERAS_EXTRA
