"""The command line: ``demo`` (fast, on synthetic and user data), ``bench``, ``predict``."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mixedcore
from mixedcore.cli.main import main

# child processes run beside the package the tests import (the checkout root, or site-packages
# when the tests of an unpacked sdist run against the installed package)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(mixedcore.__file__)))


def test_demo_fast_variant(capsys):
    assert main(["demo", "--epochs", "2", "--samples", "2000", "--hidden", "32", "--verbose",
                 "2", "--timing", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out and "loss_scale" in out
    assert "mixed_float16" in out and "mixed_bfloat16" in out
    table = out[out.index("inference on the test set"):]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[3:6]}
    assert set(rows) == {"float32", "mixed_float16", "mixed_bfloat16"}
    assert rows["float32"][2] == "1.0000"                      # agrees with itself
    for policy in rows:
        assert float(rows[policy][1]) > 0.25                   # chance is 0.1
        assert float(rows[policy][2]) > 0.9                    # agreement with float32
    assert rows["mixed_bfloat16"][4] == rows["mixed_float16"][4]
    assert float(rows["float32"][4]) == pytest.approx(2 * float(rows["mixed_float16"][4]),
                                                      rel=0.01)


def test_demo_on_user_data(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, size=(600, 4, 4)).astype(np.uint8)
    y = (x.reshape(600, -1)[:, :3].sum(1) > 380).astype(np.int64)
    path = tmp_path / "mine.npz"
    np.savez(path, x_train=x, y_train=y)
    assert main(["demo", "--data", str(path), "--epochs", "1", "--hidden", "16", "--verbose",
                 "0", "--timing", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "train (480, 4, 4), test (120, 4, 4), 2 classes" in out
    assert "flatten" in out


def test_demo_bad_data(tmp_path, capsys):
    path = tmp_path / "bad.npz"
    np.savez(path, x=np.ones((3, 2)))
    assert main(["demo", "--data", str(path)]) == 2
    assert "x_train" in capsys.readouterr().err
    path2 = tmp_path / "text.npz"
    np.savez(path2, x_train=np.array([["a", "b"]] * 4), y_train=np.zeros(4))
    assert main(["demo", "--data", str(path2)]) == 2
    assert "numeric" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "--epochs", "0"])


def test_bench_quick(capsys):
    assert main(["bench", "--size", "4096", "--gemm", "64", "--min-time", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "cast float32 -> bfloat16" in out and "matmul bfloat16 64^3" in out


def test_module_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "mixedcore", "demo", "--epochs", "1",
                             "--samples", "500", "--hidden", "16", "--verbose", "0",
                             "--timing", "0.01"], capture_output=True, text=True, timeout=120,
                            cwd=PACKAGE_ROOT)
    assert result.returncode == 0, result.stderr
    assert "demo finished" in result.stdout


# -- predict -------------------------------------------------------------------------------------

def _saved_mlp(tmp_path, policy="mixed_float16", name="m.keras"):
    from mixedcore import layers, models
    from mixedcore.policy import policy_scope
    with policy_scope(policy):
        model = models.Sequential([layers.Input(shape=(5,)), layers.Dense(7, activation="relu"),
                                   layers.Dense(3), layers.Softmax(dtype="float32")])
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(size=w.shape).astype(np.float32)
                       for w in model.get_weights()])
    model.save(tmp_path / name)
    return model


def _saved_two_io(tmp_path):
    from mixedcore import layers, models
    from mixedcore.policy import policy_scope
    with policy_scope("float32"):
        a = layers.Input(shape=(4,), name="a")
        b = layers.Input(shape=(2, 3), name="b")
        h = layers.Dense(3, name="ha")(a)
        g = layers.Dense(2, name="hb")(layers.Flatten()(b))
        model = models.Model({"a": a, "b": b}, [h, layers.Dense(1, name="y2")(g)])
    model.save(tmp_path / "two.keras")
    return model


def test_predict_writes_what_model_predict_gives(tmp_path, capsys):
    from mixedcore import models
    _saved_mlp(tmp_path)
    x = np.random.default_rng(1).normal(size=(103, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npy"
    for policy in (None, "mixed_bfloat16", "float32"):
        args = ["predict", str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), "--out", str(out),
                "--batch-size", "16", "--quiet"] + (["--policy", policy] if policy else [])
        assert main(args) == 0
        assert "predicted 103 samples" in capsys.readouterr().out
        expected = models.load_model(tmp_path / "m.keras", dtype_policy=policy).predict(
            x, batch_size=16, verbose=0)
        got = np.load(out)
        assert got.dtype == np.float32 and got.shape == (103, 3)
        np.testing.assert_array_equal(got, expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.keras", "x.npy", "y.npy"]


def test_predict_bfloat16_outputs_are_written_as_float32(tmp_path):
    from mixedcore import layers, models
    from mixedcore.policy import policy_scope
    with policy_scope("mixed_bfloat16"):
        model = models.Sequential([layers.Input(shape=(5,)), layers.Dense(2)])
    model.save(tmp_path / "b.keras")
    x = np.random.default_rng(2).normal(size=(9, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["predict", str(tmp_path / "b.keras"), str(tmp_path / "x.npy"), "--out",
                 str(tmp_path / "y.npy")]) == 0
    got = np.load(tmp_path / "y.npy")
    expected = model.predict(x, verbose=0)
    assert expected.dtype.name == "bfloat16" and got.dtype == np.float32
    np.testing.assert_array_equal(got, expected.astype(np.float32))


def test_predict_progress_on_long_inputs(tmp_path, capsys, monkeypatch):
    _saved_mlp(tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((200, 5), np.float32))
    args = ["predict", str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), "--out",
            str(tmp_path / "y.npy"), "--batch-size", "10"]
    monkeypatch.setitem(sys.modules, "tqdm", None)           # tqdm absent: plain lines
    assert main(args) == 0
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("predict: ")]
    assert lines[-1].startswith("predict: 200/200 samples") and 5 <= len(lines) <= 11
    assert main(args + ["--quiet"]) == 0
    assert capsys.readouterr().err == ""
    short = ["predict", str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), "--out",
             str(tmp_path / "y.npy"), "--batch-size", "100"]
    assert main(short) == 0                                    # two batches: no progress
    assert capsys.readouterr().err == ""


def test_predict_several_inputs_and_outputs(tmp_path, capsys):
    model = _saved_two_io(tmp_path)
    rng = np.random.default_rng(3)
    a = rng.normal(size=(11, 4)).astype(np.float32)
    b = rng.normal(size=(11, 2, 3)).astype(np.float32)
    np.savez(tmp_path / "in.npz", a=a, b=b)
    assert main(["predict", str(tmp_path / "two.keras"), str(tmp_path / "in.npz"), "--out",
                 str(tmp_path / "out.npz"), "--batch-size", "4"]) == 0
    expected = model.predict({"a": a, "b": b}, verbose=0)
    with np.load(tmp_path / "out.npz") as got:
        assert sorted(got.files) == ["ha", "y2"]
        np.testing.assert_array_equal(got["ha"], expected[0])
        np.testing.assert_array_equal(got["y2"], expected[1])
    capsys.readouterr()
    cases = [
        (["in.npz", "--out", "out.npy"], "--out must end in .npz"),
        (["x.npy", "--out", "out.npz"], "the model has 2 inputs ['a', 'b']: give an .npz"),
        (["missing_b.npz", "--out", "out.npz"], "(missing: ['b'])"),
        (["extra.npz", "--out", "out.npz"], "has arrays ['c'] that are not inputs"),
        (["uneven.npz", "--out", "out.npz"], "different numbers of samples: {'a': 11, 'b': 10}"),
    ]
    np.save(tmp_path / "x.npy", a)
    np.savez(tmp_path / "missing_b.npz", a=a)
    np.savez(tmp_path / "extra.npz", a=a, b=b, c=a)
    np.savez(tmp_path / "uneven.npz", a=a, b=b[:10])
    for args, message in cases:
        argv = ["predict", str(tmp_path / "two.keras"), str(tmp_path / args[0])] + \
            [args[1], str(tmp_path / args[2])]
        assert main(argv) == 2, args
        assert message in capsys.readouterr().err, args


def test_predict_errors_exit_2_with_a_message(tmp_path, capsys):
    _saved_mlp(tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((4, 5), np.float32))
    np.save(tmp_path / "wrong.npy", np.zeros((4, 6), np.float32))
    np.save(tmp_path / "flat.npy", np.zeros(5, np.float32))
    np.save(tmp_path / "text.npy", np.array([["a"] * 5] * 4))
    np.save(tmp_path / "empty.npy", np.zeros((0, 5), np.float32))
    (tmp_path / "junk.npy").write_bytes(b"not an array at all")
    (tmp_path / "junk.keras").write_bytes(b"not a model at all")
    m, x, out = str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")
    cases = [
        ([str(tmp_path / "nope.keras"), x, "--out", out], "model file", "does not exist"),
        ([m, str(tmp_path / "nope.npy"), "--out", out], "input file", "does not exist"),
        ([m, str(tmp_path / "wrong.npy"), "--out", out], "the input has shape (4, 6)",
         "expects (None, 5)"),
        ([m, str(tmp_path / "flat.npy"), "--out", out], "has shape (5,)", "expects (None, 5)"),
        ([m, str(tmp_path / "text.npy"), "--out", out], "<U1 data", "numeric"),
        ([m, str(tmp_path / "empty.npy"), "--out", out], "no samples", ""),
        ([m, str(tmp_path / "junk.npy"), "--out", out], "neither a .npy nor a .npz", ""),
        ([str(tmp_path / "junk.keras"), x, "--out", out], "junk.keras", "neither a zip"),
        ([m, x, "--out", out, "--policy", "mixed_float17"], "--policy", "mixed_float17"),
        ([m, x, "--out", out, "--policy", "int32"], "not a floating-point policy", ""),
        ([m, x, "--out", str(tmp_path / "y.csv")], "--out must end in .npy", ""),
        ([m, x, "--out", str(tmp_path / "no" / "y.npy")], "does not exist", ""),
        ([m, x, "--out", x], "is the input file", ""),
        ([m, x, "--out", m], "is the model file", ""),
    ]
    for args, first, second in cases:
        assert main(["predict"] + args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error: ") and first in err and second in err, (args, err)
    assert not os.path.exists(out)
    assert np.load(x).shape == (4, 5)                           # --out naming it left it alone
    with pytest.raises(SystemExit):
        main(["predict", m, x, "--out", out, "--batch-size", "0"])
    with pytest.raises(SystemExit):
        main(["predict", m, x])                                  # --out is required


def test_predict_module_entry_point(tmp_path):
    _saved_mlp(tmp_path, name="m.h5")
    np.save(tmp_path / "x.npy", np.ones((3, 5), np.float32))
    result = subprocess.run([sys.executable, "-m", "mixedcore", "predict", str(tmp_path / "m.h5"),
                             str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy")],
                            capture_output=True, text=True, timeout=120, cwd=PACKAGE_ROOT)
    assert result.returncode == 0, result.stderr
    assert np.load(tmp_path / "y.npy").shape == (3, 3)
    result = subprocess.run([sys.executable, "-m", "mixedcore", "predict", str(tmp_path / "m.h5"),
                             str(tmp_path / "missing.npy"), "--out", str(tmp_path / "y.npy")],
                            capture_output=True, text=True, timeout=120, cwd=PACKAGE_ROOT)
    assert result.returncode == 2 and "does not exist" in result.stderr


def test_files_are_written_under_an_unpredictable_name_and_replaced_whole(tmp_path):
    """predict and report write through the same helper as the saving functions: a new file
    created exclusively beside the target, renamed over it when complete, removed on failure."""
    from mixedcore.cli.common import temporary_beside
    from mixedcore.saving.file_utils import temporary_beside as saving_helper
    assert temporary_beside is saving_helper
    target = tmp_path / "out.npy"
    target.write_bytes(b"old")
    with temporary_beside(str(target)) as a, temporary_beside(str(target)) as b:
        assert a != b and os.path.exists(a) and os.path.exists(b)
        with open(a, "wb") as f:
            f.write(b"new")
        with open(b, "wb") as f:
            f.write(b"newer")
    assert target.read_bytes() == b"new"
    try:
        with temporary_beside(str(target)) as c:
            with open(c, "wb") as f:
                f.write(b"half")
            raise RuntimeError("interrupted")
    except RuntimeError:
        pass
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npy"]


def test_version_and_a_closed_pipe(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mixedcore", "--version"], capture_output=True,
                            text=True, timeout=60, cwd=PACKAGE_ROOT)
    assert result.returncode == 0 and result.stdout.startswith("mixedcore ")
    _saved_mlp(tmp_path, policy="float32")
    np.save(tmp_path / "x.npy", np.zeros((4, 5), np.float32))
    # `report ... | head -1` where the reader has already left: no traceback, exit 0
    code = ("import os, sys\n"
            "r, w = os.pipe()\n"
            "os.close(r)\n"
            "sys.stdout = os.fdopen(w, 'w', buffering=1)\n"
            "from mixedcore.cli.main import main\n"
            f"sys.exit(main(['report', {str(tmp_path / 'm.keras')!r}, "
            f"{str(tmp_path / 'x.npy')!r}, '--quantize', 'int8']))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=PACKAGE_ROOT)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr


def test_report_quantize_option(tmp_path, capsys):
    _saved_mlp(tmp_path, policy="float32")
    np.save(tmp_path / "x.npy", np.random.default_rng(1).normal(size=(16, 5)).astype(np.float32))
    args = ["report", str(tmp_path / "m.keras"), str(tmp_path / "x.npy")]
    assert main(args + ["--quantize", "int4"]) == 0
    out = capsys.readouterr().out
    assert "quantization error of each layer" in out and "int4" in out
    with pytest.raises(SystemExit):
        main(args + ["--quantize", "int3"])


@pytest.mark.parametrize("variable, value", [("MIXEDCORE_ISA", "foo"),
                                             ("MIXEDCORE_NUM_THREADS", "x"),
                                             ("MIXEDCORE_GEMM_MC", "-3")])
def test_a_bad_environment_variable_is_one_line_and_exit_2(variable, value):
    """The command line reports a MIXEDCORE_* variable the engine cannot take as its other user
    errors; a program importing mixedcore gets the ValueError."""
    env = dict(os.environ, **{variable: value})
    result = subprocess.run([sys.executable, "-m", "mixedcore", "info"], capture_output=True,
                            text=True, timeout=60, cwd=PACKAGE_ROOT, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"error: {variable}={value!r}") and "Traceback" not in \
        result.stderr
    result = subprocess.run([sys.executable, "-c", "import mixedcore"], capture_output=True,
                            text=True, timeout=60, cwd=PACKAGE_ROOT, env=env)
    assert result.returncode == 1 and f"ValueError: {variable}={value!r}" in result.stderr
