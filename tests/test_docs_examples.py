"""The examples of docs/ run as written, and the behaviour the pages describe holds."""
import pathlib
import re

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
