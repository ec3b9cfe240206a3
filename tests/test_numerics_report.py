"""utils.numerics_report and `python -m mixedcore report`: per-layer statistics that match the
layers' own outputs, a planted overflow found where it is, gradients, nested models, errors."""
import json

import numpy as np
import pytest

import mixedcore
from mixedcore import layers, models, optimizers, utils
from mixedcore.cli.main import main
from mixedcore.policy import policy_scope

F16_MAX_TIE = 65520.0          # float16 rounds |x| >= this to infinity


def planted(seed=0, factor=1e5):
    """A float32 MLP whose middle layer's kernel is scaled so that its outputs exceed float16."""
    with policy_scope("float32"):
        model = models.Sequential([layers.Input((16,)),
                                   layers.Dense(32, activation="relu", name="hidden"),
                                   layers.Dense(32, name="wide"),
                                   layers.Dense(4, activation="softmax", name="probs")])
    rng = np.random.default_rng(seed)
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.3
                       for w in model.get_weights()])
    w, b = model.get_layer("wide").get_weights()
    model.get_layer("wide").set_weights([w * np.float32(factor), b])
    x = rng.standard_normal((70, 16)).astype(np.float32)
    return model, x


def layer_outputs(model, x):
    """Each layer's output, by calling the layers one after the other."""
    outs = {}
    for layer in model.layers:
        x = layer(x)
        outs[layer.name] = x
    return outs


def test_a_planted_overflow_is_found_in_float16_where_it_is():
    model, x = planted()
    before = [w.copy() for w in model.get_weights()]
    report = utils.numerics_report(model, x, policy="mixed_float16")
    assert report.first_problem() == ("wide", "output", "non-finite")
    assert [(r["layer"], r["tensor"]) for r in report.rows] == [
        ("hidden", "output"), ("wide", "output"), ("probs", "output")]
    table = str(report)
    assert "under mixed_float16 over 70 samples" in table
    assert "first problem: non-finite in the output of 'wide'" in table
    # the numbers are those of the float16 model's own outputs
    with policy_scope("mixed_float16"):
        ref = models.Sequential([layers.Input((16,)), layers.Dense(32, activation="relu"),
                                 layers.Dense(32), layers.Dense(4, activation="softmax")])
    ref.set_weights(model.get_weights())
    outs = list(layer_outputs(ref, x).values())
    stats = report.as_dict()
    for name, out in zip(["hidden", "wide", "probs"], outs):
        s = stats[name]["output"]
        assert s["dtype"] == "float16" and s["size"] == out.size
        assert s["inf"] == int(np.isinf(out).sum()) and s["nan"] == int(np.isnan(out).sum())
        finite = out[np.isfinite(out)]
        assert s["max_abs"] == (float(np.abs(finite).max()) if finite.size else 0.0)
    assert stats["wide"]["output"]["inf"] > 0
    # the model itself is untouched: same policies, same weights
    assert all(l.dtype_policy.name == "float32" for l in model.layers)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_float32_model_reports_what_would_overflow_in_float16():
    model, x = planted()
    report = utils.numerics_report(model, x)
    assert report.policy == "float32"
    wide = layer_outputs(model, x)["wide"]
    s = report.as_dict()["wide"]["output"]
    assert s["float16_overflow"] == int((np.abs(wide) >= F16_MAX_TIE).sum()) > 0
    assert s["inf"] == 0 and s["dtype"] == "float32"
    assert report.first_problem() == ("wide", "output", "float16 overflow")
    quiet, _ = planted(factor=1.0)
    clean = utils.numerics_report(quiet, x)
    assert clean.first_problem() is None
    assert "no NaN, Inf or float16 overflow" in clean.table()


def test_batches_add_up():
    model, x = planted()
    whole = utils.numerics_report(model, x, batch_size=len(x)).as_dict()
    assert utils.numerics_report(model, x, batch_size=7).as_dict() == whole
    assert whole["hidden"]["output"]["size"] == 70 * 32


def test_folding_is_off_while_observing_and_back_after():
    with policy_scope("float32"):
        inp = layers.Input((6,))
        h = layers.Dense(8, name="d")(inp)
        h = layers.BatchNormalization(name="bn")(h)
        out = layers.Activation("relu", name="act")(h)
        model = models.Model(inp, out)
    x = np.random.default_rng(1).standard_normal((10, 6)).astype(np.float32)
    expected = model.predict(x, verbose=0)
    report = utils.numerics_report(model, x)
    assert [r["layer"] for r in report.rows] == ["d", "bn", "act"]
    assert model._graph.observer is None
    np.testing.assert_array_equal(model.predict(x, verbose=0), expected)


def test_nested_models_and_shared_layers_are_named_by_path():
    with policy_scope("float32"):
        inner_in = layers.Input((4,))
        inner = models.Model(inner_in, layers.Dense(4, name="proj")(inner_in), name="inner")
        a = layers.Input((4,), name="a")
        shared = layers.Dense(4, name="shared")
        h = shared(shared(a))
        out = layers.Dense(2, name="head")(inner(h))
        model = models.Model(a, out)
    x = np.ones((3, 4), np.float32)
    names = [r["layer"] for r in utils.numerics_report(model, x).rows]
    assert names == ["shared#0", "shared#1", "inner/proj", "head"]
    assert inner._graph.observer is None and model._graph.observer is None


def test_gradients_with_targets_and_weights_left_as_they_were():
    model, x = planted(factor=1.0)
    with policy_scope("float32"):
        bn_model = models.Sequential([layers.Input((16,)), layers.Dense(8, name="d"),
                                      layers.BatchNormalization(name="bn"),
                                      layers.Dense(4, activation="softmax", name="out")])
    y = np.random.default_rng(2).integers(0, 4, len(x))
    for m in (model, bn_model):
        m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
        before = [w.copy() for w in m.get_weights()]
        report = utils.numerics_report(m, x, y, batch_size=32)
        assert all(np.array_equal(a, b) for a, b in zip(before, m.get_weights()))
        kinds = [(r["layer"], r["tensor"]) for r in report.rows]
        outputs = [k for k in kinds if k[1] == "output"]
        backward = [k for k in kinds if k[1] != "output"]
        assert kinds == outputs + backward
        layer_names = [l.name for l in m.layers]
        assert [k[0] for k in backward if k[1] == "gradient"] == layer_names[::-1]
        weight_rows = {r["layer"]: r for r in report.rows if r["tensor"] == "weight gradient"}
        for layer in m.layers:
            n_weights = sum(w.size for w in layer.trainable_weights)
            assert weight_rows[layer.name]["size"] == n_weights * 3       # 3 batches of 32
        assert report.loss_scale == 1.0 and report.first_problem() is None


def test_loss_scale_multiplies_the_gradients_and_overflows_float16():
    model, x = planted(factor=1.0)
    y = np.random.default_rng(2).integers(0, 4, len(x))
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    one = utils.numerics_report(model, x, y, loss_scale=1.0).as_dict()
    big = utils.numerics_report(model, x, y, loss_scale=1024.0).as_dict()
    g1, g2 = one["wide"]["gradient"]["max_abs"], big["wide"]["gradient"]["max_abs"]
    assert g2 == pytest.approx(1024 * g1, rel=1e-5)
    huge = utils.numerics_report(model, x, y, policy="mixed_float16", loss_scale=2.0 ** 40)
    first = huge.first_problem()
    assert first is not None and first[1] in ("gradient", "weight gradient")


def test_loss_scale_optimizer_supplies_the_scale():
    model, x = planted(factor=1.0)
    y = np.random.default_rng(2).integers(0, 4, len(x))
    model.compile(optimizer=optimizers.LossScaleOptimizer(optimizers.SGD(),
                                                           initial_scale=256.0),
                  loss="sparse_categorical_crossentropy")
    assert utils.numerics_report(model, x, y).loss_scale == 256.0


def test_bad_arguments():
    model, x = planted()
    with pytest.raises(TypeError, match="numerics_report: model must be a mixedcore Model"):
        utils.numerics_report(layers.Dense(3), x)
    with pytest.raises(RuntimeError, match="numerics_report: you must call compile"):
        utils.numerics_report(model, x, np.zeros(len(x)))
    with pytest.raises(ValueError, match=r"numerics_report: the input data is empty \(0 samples\)"):
        utils.numerics_report(model, x[:0])
    with pytest.raises(ValueError, match=r"numerics_report: expected input of shape \(None, 16\), "
                                         r"received \(3, 5\)"):
        utils.numerics_report(model, np.ones((3, 5), np.float32))
    with pytest.raises(ValueError, match="numerics_report: batch_size must be >= 1, got 0"):
        utils.numerics_report(model, x, batch_size=0)
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match=r"numerics_report: loss_scale must be a finite number "
                                         r"> 0, got -1"):
        utils.numerics_report(model, x, np.zeros((len(x), 4), np.float32), loss_scale=-1)
    with pytest.raises(ValueError, match=r"numerics_report: x has 70 samples but y has \[3\]"):
        utils.numerics_report(model, x, np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="dtype_policy must be a floating-point policy"):
        utils.numerics_report(model, x, policy="int32")
    assert model._graph.observer is None


def test_command_line_report(tmp_path, capsys):
    model, x = planted()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.save(tmp_path / "m.keras")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.zeros(len(x), np.int64))
    out = tmp_path / "r.json"
    assert main(["report", str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), "--policy",
                 "mixed_float16", "--labels", str(tmp_path / "y.npy"), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "first problem: non-finite in the output of 'wide'" in printed
    data = json.loads(out.read_text())
    assert data["policy"] == "mixed_float16" and data["samples"] == 70
    assert data["layers"]["wide"]["output"]["inf"] > 0
    assert "gradient" in data["layers"]["hidden"]
    # user errors: exit code 2 and a message
    assert main(["report", str(tmp_path / "m.keras"), str(tmp_path / "nope.npy")]) == 2
    assert "input file" in capsys.readouterr().err
    np.save(tmp_path / "y3.npy", np.zeros(3))
    assert main(["report", str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), "--labels",
                 str(tmp_path / "y3.npy")]) == 2
    assert "has 3 samples; the input has 70" in capsys.readouterr().err
    model2, _ = planted()
    model2.save(tmp_path / "u.keras")
    assert main(["report", str(tmp_path / "u.keras"), str(tmp_path / "x.npy"), "--labels",
                 str(tmp_path / "y.npy")]) == 2
    assert "saved without its loss" in capsys.readouterr().err
