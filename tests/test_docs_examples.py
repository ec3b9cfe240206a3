"""The examples of docs/ run as written, and the behaviour the pages describe holds."""
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import mixedcore
from mixedcore import layers, models

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(autouse=True)
def _reset_global_policy():
    mixedcore.set_global_policy(None)
    yield
    mixedcore.set_global_policy(None)


def python_blocks(page, heading):
    """The ```python blocks of the section of docs/<page> that starts at ``## <heading>``."""
    text = (DOCS / page).read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def float32_mlp():
    model = models.Sequential([layers.Input(shape=(784,)),
                               layers.Dense(512, activation="relu"),
                               layers.Dense(10, activation="softmax")])
    rng = np.random.default_rng(3)
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.05
                       for w in model.get_weights()])
    return model


def test_user_guide_porting_example(tmp_path, monkeypatch):
    """docs/user_guide.md, 'Porting a Keras model's weights': export, then build under the
    policy and load; every layer computes in bfloat16 with float32 weights."""
    export, build = python_blocks("user_guide.md", "Porting a Keras model's weights")
    monkeypatch.chdir(tmp_path)
    reference = float32_mlp()           # stands in for the Keras model: same layout and order
    exec(export, {"keras_model": reference})
    namespace = {"mixedcore": mixedcore, "layers": layers, "models": models}
    exec(build, namespace)
    model = namespace["model"]
    assert mixedcore.global_policy().name == "float32"      # the scope ended with the block
    assert [layer.dtype_policy.name for layer in model.layers] == ["mixed_bfloat16"] * 2
    assert all(w.dtype == np.float32 for w in model.get_weights())
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_array_equal(got, want)
    x = np.random.default_rng(4).standard_normal((8, 784)).astype(np.float32)
    out = model.predict(x, verbose=0)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(out.astype(np.float32), reference.predict(x, verbose=0),
                               atol=0.02)


def test_model_dtype_does_not_reach_its_layers():
    """The pitfall docs/user_guide.md and docs/layers.md ('Policies and autocasting') warn of."""
    model = models.Sequential([layers.Input(shape=(4,)), layers.Dense(3)],
                              dtype="mixed_bfloat16")
    assert model.dtype_policy.name == "mixed_bfloat16"
    assert model.layers[0].dtype_policy.name == "float32"
    assert model(np.ones((2, 4), np.float32)).dtype == np.float32


def test_layer_dtype_python_types():
    """docs/layers.md, 'Policies and autocasting': builtin float / int are a ValueError, other
    types a TypeError naming the layer."""
    for builtin in (float, int):
        with pytest.raises(ValueError, match="Cannot interpret `dtype` argument"):
            layers.Dense(2, dtype=builtin)
    with pytest.raises(TypeError, match=r"Dense: dtype must be None.*got int: 3"):
        layers.Dense(2, dtype=3)
    with pytest.raises(TypeError, match=r"Dense: dtype must be None.*got list"):
        layers.Dense(2, dtype=["float32"])


def test_layer_takes_the_policy_in_effect_at_construction():
    with mixedcore.policy_scope("mixed_float16"):
        dense = layers.Dense(2)
    assert dense.dtype_policy.name == "mixed_float16"
    x = np.ones((1, 3), np.float64)
    assert dense(x).dtype == np.float16
    assert dense.kernel.dtype == np.float32
    assert dense(np.ones((1, 3), np.int32)).dtype == np.float16


def test_numerics_report_example_finds_the_planted_overflow(capsys):
    blocks = python_blocks("numerics_report.md", "A planted overflow, found")
    assert len(blocks) == 1
    namespace = {}
    exec(blocks[0], namespace)
    printed = capsys.readouterr().out
    page = (DOCS / "numerics_report.md").read_text()
    shown = re.search(r"prints\n\n```\n(.*?)```", page, flags=re.S).group(1)
    # the table on the page is the one the example prints
    assert printed.strip() == shown.strip()
    report = namespace["report"]
    assert report.as_dict()["wide"]["output"]["inf"] == 47
    what_if = namespace["utils"].numerics_report(namespace["model"], namespace["x"])
    assert what_if.first_problem() == ("wide", "output", "float16 overflow")
    assert what_if.as_dict()["wide"]["output"]["float16_overflow"] == 47
    grads = python_blocks("numerics_report.md", "Gradients")
    exec(grads[0], namespace)


def test_inference_plan_example():
    """docs/inference.md, "The kernels underneath": the block is the chain of kernel calls."""
    from mixedcore import kernels
    [block] = python_blocks("inference.md", "The kernels underneath")
    scope = {}
    exec(block, scope)
    x = scope["x"]
    xb = kernels.cast(x, "bfloat16")
    h = kernels.conv2d(xb, scope["expand"], activation="relu6", out_dtype="bfloat16")
    h = kernels.depthwise_conv2d(h, scope["dw"], padding="same", activation="relu6",
                                 out_dtype="bfloat16")
    h = kernels.conv2d(h, scope["project"], out_dtype="bfloat16")
    want = kernels.add(h, xb, out_dtype="bfloat16")
    assert np.array_equal(scope["out"].view(np.uint16), want.view(np.uint16))


# ---- every ```python example of the README and docs/, run as a script ----------------------
#
# A page can mark the example that follows with an HTML comment on the line just above its
# fence (invisible on the rendered page):
#   <!-- example setup: WHAT IT MAKES ... code ... -->  code run first (the file or the arrays
#                                                        the reader would have)
#   <!-- example continues -->                          run after the page's previous example,
#                                                        as one script
#   <!-- example skip: REASON -->                       not run, for the reason given
# Every example runs from a fresh empty directory. The ones that use Dask run each in an
# interpreter of their own (dask.distributed starts workers that import the script again); the
# others run one after another in one interpreter, the global policy and dispatch level reset
# before each.

PAGES = [DOCS.parent / "README.md"] + sorted(DOCS.glob("*.md"))
_EXAMPLE = re.compile(
    r"(?:<!-- example (?P<kind>setup|skip|continues)(?P<note>(?:(?!-->).)*)-->\n)?"
    r"^```python\n(?P<code>.*?)^```", re.S | re.M)


def page_examples(page):
    """[(name, source or None, skip reason or None)] of ``page``: each example with its setup
    and, when it continues, the examples before it."""
    found, script = [], ""
    for number, match in enumerate(_EXAMPLE.finditer(page.read_text()), 1):
        kind, note, code = match.group("kind"), match.group("note"), match.group("code")
        name = f"{page.stem}_{number}"
        if kind == "skip":
            reason = note.lstrip(":").strip()
            assert reason, f"{page.name}: example {number} is skipped without a reason"
            found.append((name, None, reason))
            continue
        if kind != "continues":
            script = ""
        if kind == "setup":
            setup_lines = note.split("\n", 1)
            assert len(setup_lines) == 2 and setup_lines[0].startswith(":"), \
                f"{page.name}: example {number}: 'example setup: what' then the code"
            script += setup_lines[1]
        script += code
        found.append((name, script, None))
    return found


ALL_EXAMPLES = [example for page in PAGES for example in page_examples(page)]


def _uses_dask(source):
    return re.search(r"^\s*(import|from) (dask|distributed)\b", source, re.M) is not None


def _child_env():
    """The environment of an example's interpreter: the mixedcore this session imported first
    on the path (a checkout's or an installed one)."""
    env = dict(os.environ, MIXEDCORE_NUM_THREADS="2", KERAS_BACKEND="torch")
    package_parent = os.path.dirname(os.path.dirname(mixedcore.__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH"))
                                        if p)
    return env


_RUN_ALL = """\
import json, os, runpy, sys, traceback
import mixedcore
from mixedcore import kernels
best, results = kernels.isa(), {}
for script in sys.argv[2:]:
    mixedcore.set_global_policy(None)
    kernels.set_isa(best)
    os.chdir(os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
        results[script] = None
    except BaseException:
        results[script] = traceback.format_exc()
with open(sys.argv[1], "w") as f:
    json.dump(results, f)
"""


def _write_script(root, name, source):
    folder = root / name
    folder.mkdir()
    script = folder / f"{name}.py"
    script.write_text(source)
    return str(script)


@pytest.fixture(scope="module")
def plain_example_results(tmp_path_factory):
    """What each example without Dask raised (None when it ran), run in one interpreter."""
    root = tmp_path_factory.mktemp("examples")
    scripts = {name: _write_script(root, name, source) for name, source, _ in ALL_EXAMPLES
               if source is not None and not _uses_dask(source)}
    out = root / "results.json"
    proc = subprocess.run([sys.executable, "-c", _RUN_ALL, str(out), *scripts.values()],
                          capture_output=True, text=True, timeout=600, env=_child_env(),
                          cwd=root)
    assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    return {name: results[script] for name, script in scripts.items()}


def test_every_page_example_is_found():
    """Each ```python fence of the pages is one example (a marker that does not sit on the line
    above a fence, or a fence the pattern misses, fails here)."""
    for page in PAGES:
        text = page.read_text()
        assert len(page_examples(page)) == len(re.findall(r"^```python\n", text, re.M)), page
        attached = sum(1 for m in _EXAMPLE.finditer(text) if m.group("kind"))
        assert text.count("<!-- example ") == attached, page
    assert len(ALL_EXAMPLES) > 30


@pytest.mark.parametrize("name, source, skip", ALL_EXAMPLES, ids=[e[0] for e in ALL_EXAMPLES])
def test_docs_example_runs_as_a_script(name, source, skip, plain_example_results, tmp_path):
    if skip is not None:
        pytest.skip(f"marked in the page: {skip}")
    if not _uses_dask(source):
        error = plain_example_results[name]
        assert error is None, f"{name}:\n{source}\n{error}"
        return
    for module in ("dask.array", "distributed"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(f'{name} needs {module}: pip install "mixedcore[dask]"')
    script = _write_script(tmp_path, name, source)
    proc = subprocess.run([sys.executable, script], cwd=os.path.dirname(script),
                          capture_output=True, text=True, timeout=300, env=_child_env())
    assert proc.returncode == 0, f"{name}:\n{source}\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}"
    # a block that pickles its data into the task graph is what the pages warn against
    assert "Sending large graph" not in proc.stderr, proc.stderr[-3000:]
