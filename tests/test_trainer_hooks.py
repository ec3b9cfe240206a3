"""The trainer's public hooks (docs/scale_out.md, "The trainer's hooks"): what scale-out and any
other distribution layer may call, and that scale-out calls nothing else of a model."""
import ast
import pathlib
import re

import numpy as np
import pytest

from mixedcore import layers, models
from mixedcore.trainers import data_adapters

ROOT = pathlib.Path(__file__).resolve().parent.parent
HOOKS = {"input_keys", "build_from_sample", "pack_outputs", "data_adapter", "batch_logs",
         "mean_logs"}


def _two_output_model():
    a = layers.Input((5,), name="a")
    b = layers.Input((3,), name="b")
    h = layers.Dense(8, activation="relu", kernel_regularizer="l2")(layers.Concatenate()([a, b]))
    p = layers.Dense(4, activation="softmax", name="p")(h)
    q = layers.Dense(1, name="q")(h)
    model = models.Model({"b": b, "a": a}, {"q": q, "p": p})
    model.compile("sgd", {"p": "sparse_categorical_crossentropy", "q": "mse"},
                  metrics=["accuracy"])
    return model


def _data(n=100):
    rng = np.random.default_rng(0)
    x = {"a": rng.standard_normal((n, 5)).astype(np.float32),
         "b": rng.standard_normal((n, 3)).astype(np.float32)}
    y = {"p": rng.integers(0, 4, n), "q": rng.standard_normal((n, 1)).astype(np.float32)}
    return x, y


def test_the_hooks_example_of_the_docs_gives_evaluates_bits():
    text = (ROOT / "docs" / "scale_out.md").read_text()
    start = text.index("\n## The trainer's hooks\n")
    (block,) = re.findall(r"```python\n(.*?)```", text[start:text.index("\n## ", start + 1)],
                          flags=re.S)
    model = models.Sequential([layers.Input((6,)), layers.Dense(16, activation="relu"),
                               layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((100, 6)).astype(np.float32)
    y = rng.integers(0, 3, 100)
    namespace = {"model": model, "x": x, "y": y}
    exec(block, namespace)
    assert namespace["logs"] == model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)


def test_input_keys_pack_outputs_and_build_from_sample():
    model = _two_output_model()
    assert model.input_keys() == ["a", "b"]
    u, v = layers.Input((2,), name="u"), layers.Input((2,), name="v")
    listed = models.Model([u, v], layers.Add()([u, v]))
    assert listed.input_keys() == ["u", "v"]
    assert model.output_names == ["p", "q"]                    # the dict's keys, sorted
    p, q = np.zeros((2, 4)), np.ones((2, 1))
    packed = model.pack_outputs([p, q])
    assert packed.keys() == {"p", "q"} and packed["p"] is p and packed["q"] is q
    assert listed.pack_outputs([p]) is p

    waiting = models.Sequential([layers.Dense(3)])
    assert not waiting.built
    waiting.build_from_sample("test", np.zeros((1, 7), np.float32))
    assert waiting.built and waiting.input_shape == (None, 7)
    graph = waiting._graph
    waiting.build_from_sample("test", np.zeros((1, 9), np.float32))    # built: nothing
    assert waiting._graph is graph


def test_data_adapter_batch_logs_and_mean_logs_make_evaluate():
    model = _two_output_model()
    x, y = _data()
    sw = np.linspace(0.5, 1.5, 100).astype(np.float32)
    batches = model.data_adapter("evaluate", x, y, {"p": sw}, batch_size=16)
    assert isinstance(batches, data_adapters.ArrayDataAdapter) and batches.steps() == 7
    totals, seen = {}, 0
    for xs, ys, sws in batches.epoch():
        assert [a.shape[1] for a in xs] == [5, 3]              # aligned with the inputs
        m = xs[0].shape[0]
        seen += m
        for k, v in model.batch_logs(xs, ys, sws).items():
            totals[k] = totals.get(k, 0.0) + v * m
    logs = model.mean_logs(totals, seen)
    assert logs == model.evaluate(x, y, batch_size=16, sample_weight={"p": sw}, verbose=0,
                                  return_dict=True)
    assert logs["loss"] > totals["loss"] / seen                # the regularization penalty
    predict = model.data_adapter("predict", x, batch_size=64, with_targets=False)
    assert [(ys, sws) for _, ys, sws in predict.epoch()] == [(None, None)] * 2


def test_data_adapter_keeps_the_messages_of_fit():
    model = _two_output_model()
    x, y = _data()
    with pytest.raises(ValueError, match="steps must be a positive int or None"):
        model.data_adapter("fit", x, y, class_weight={0: 1.0}, steps=0)
    with pytest.raises(ValueError, match="class_weight is only supported for models with one "
                                         "output; this model has 2"):
        model.data_adapter("fit", x, y, class_weight={0: 1.0})
    with pytest.raises(ValueError, match="when x is a dataset or generator"):
        model.data_adapter("fit", iter([]), y)


def test_data_adapters_know_nothing_of_the_model():
    calls = []

    def inputs(owner, x):
        calls.append(("inputs", owner))
        return [np.asarray(x)]

    def inputs_and_targets(owner, x, y):
        calls.append(("inputs_and_targets", owner))
        return [np.asarray(x)], [np.asarray(y)]

    def sample_weights(owner, sw, n):
        calls.append(("sample_weights", owner, n))
        return [None if sw is None else np.asarray(sw)]

    standardize = data_adapters.Standardizers(inputs, inputs_and_targets, sample_weights)
    adapter = data_adapters.get_data_adapter("mine", standardize, np.arange(10), np.arange(10),
                                             batch_size=4)
    assert [len(xs[0]) for xs, _, _ in adapter.epoch()] == [4, 4, 2]
    assert calls == [("inputs_and_targets", "mine"), ("sample_weights", "mine", 10)]
    seq = data_adapters.get_data_adapter("mine", standardize, [np.arange(3)] * 2, None,
                                         with_targets=False)
    assert isinstance(seq, data_adapters.ArrayDataAdapter)      # a list is arrays
    pairs = [(np.arange(2), np.arange(2) + 10), (np.arange(3), np.arange(3) + 10)]
    gen = data_adapters.get_data_adapter("mine", standardize, (b for b in pairs))
    assert isinstance(gen, data_adapters.GeneratorDataAdapter)
    assert [(len(xs[0]), ys[0][0]) for xs, ys, _ in gen.epoch()] == [(2, 10), (3, 10)]


def test_scale_out_uses_only_public_members_and_imports_no_models():
    source = (ROOT / "mixedcore" / "trainers" / "scale_out.py").read_text()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            assert not any("models" in n for n in names), ast.unparse(node)
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "model"):
            assert not node.attr.startswith("_"), f"scale_out reads model.{node.attr}"
    from mixedcore.trainers import scale_out
    assert set(scale_out._HOOKS) == HOOKS | {"predict"}


def test_no_trainers_module_imports_models():
    for path in (ROOT / "mixedcore" / "trainers").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("mixedcore.models"), (path.name, node.module)
                assert not (node.module == "mixedcore"
                            and any(a.name == "models" for a in node.names)), path.name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("mixedcore.models") for a in node.names)
