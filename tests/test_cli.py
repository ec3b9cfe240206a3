"""The command line: ``demo`` (a fast variant, synthetic and user data) and ``bench``."""
import subprocess
import sys

import numpy as np
import pytest

from mixedcore.__main__ import main


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
                             "--timing", "0.01"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "demo finished" in result.stdout
