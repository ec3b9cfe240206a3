"""Models pickle: weights, configs, policies and compile state travel; nothing derived from the
weights (compute-dtype copies, packed panels, folded operands) does; and an unpickled model
predicts the same bits.  Also: ``import mixedcore`` and in-memory predict never import Dask."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import mixedcore
from mixedcore import layers, models

POLICIES = ["float32", "mixed_bfloat16", "mixed_float16"]


def _conv_model(policy):
    inp = layers.Input((12, 12, 3))
    h = layers.Conv2D(8, 3, padding="same", dtype=policy)(inp)
    h = layers.BatchNormalization(dtype=policy)(h)
    h = layers.ReLU(dtype=policy)(h)
    h = layers.MaxPooling2D(dtype=policy)(h)
    h = layers.Flatten(dtype=policy)(h)
    h = layers.Dense(16, activation="relu", dtype=policy)(h)
    out = layers.Dense(5, activation="softmax", dtype=policy)(h)
    return models.Model(inp, out)


def _attention_model(policy):
    inp = layers.Input((6, 8))
    h = layers.MultiHeadAttention(2, 4, dtype=policy)(inp, inp)
    h = layers.LayerNormalization(dtype=policy)(h)
    h = layers.GlobalAveragePooling1D(dtype=policy)(h)
    return models.Model(inp, layers.Dense(3, dtype=policy)(h))


def _two_io_model(policy):
    a, b = layers.Input((5,), name="a"), layers.Input((7,), name="b")
    h = layers.Concatenate()([layers.Dense(6, dtype=policy)(a), layers.Dense(6, dtype=policy)(b)])
    return models.Model({"a": a, "b": b}, [layers.Dense(2, dtype=policy, name="p")(h),
                                           layers.Dense(3, dtype=policy, name="q")(h)])


def _data(model, n, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((n,) + tuple(t.shape[1:])).astype(np.float32)
          for t in model.inputs]
    if isinstance(model._inputs_struct, dict):
        return dict(zip(sorted(model._inputs_struct), xs))
    return xs[0] if len(xs) == 1 else xs


def _same_bits(a, b):
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_bits(u, v) for u, v in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("build", [_conv_model, _attention_model, _two_io_model])
def test_unpickled_model_predicts_the_same_bits(policy, build):
    model = build(policy)
    x = _data(model, 40)
    before = model.predict(x, verbose=0)          # fills the packed / folded caches
    restored = pickle.loads(pickle.dumps(model))
    assert restored is not model
    assert [lay.dtype_policy.name for lay in restored.layers] == \
           [lay.dtype_policy.name for lay in model.layers]
    assert _same_bits(restored.predict(x, verbose=0), before)
    # the restored weights are copies, not views of the original
    restored.layers[-1].weights[0][...] = 0
    restored.layers[-1].weights_updated()
    assert _same_bits(model.predict(x, verbose=0), before)


@pytest.mark.parametrize("policy", POLICIES)
def test_pickle_holds_the_weights_once_and_no_derived_copies(policy):
    model = models.Sequential([layers.Input((256,)), layers.Dense(512, activation="relu",
                                                                  dtype=policy),
                               layers.Dense(256, dtype=policy), layers.Dense(10, dtype=policy)])
    model.compile("sgd", "mse")
    raw = sum(w.nbytes for w in model.weights)
    model.predict(np.ones((64, 256), np.float32), verbose=0)   # packs every Dense kernel
    assert any(layer._packed for layer in model.layers)
    size = len(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL))
    assert raw <= size < raw * 1.05 + 50_000, (size, raw)
    for layer in model.layers:       # pickling left the live model's caches alone
        assert layer._packed


def test_a_pickle_without_some_derived_state_unpickles_and_predicts_the_same_bits():
    """A layer pickled before a cache of derived state existed lacks its attribute; the
    unpickled layer starts with the cache empty."""
    model = _conv_model("mixed_bfloat16")
    x = _data(model, 8)
    want = model.predict(x, verbose=0)
    for layer in model.layers:
        layer.__dict__.pop("_bias_cache", None)
        layer.__dict__.pop("_folded", None)
    again = pickle.loads(pickle.dumps(model))
    assert all(hasattr(layer, "_bias_cache") for layer in again.layers)
    assert _same_bits(again.predict(x, verbose=0), want)


def test_compile_state_and_optimizer_slots_survive_pickling():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = rng.standard_normal((64, 2)).astype(np.float32)
    model = models.Sequential([layers.Input((8,)), layers.Dense(16, activation="tanh"),
                               layers.Dense(2)])
    model.compile("adam", "mse", metrics=["mae"])
    model.fit(x, y, epochs=2, verbose=0, shuffle=False)
    restored = pickle.loads(pickle.dumps(model))
    assert restored.evaluate(x, y, verbose=0) == model.evaluate(x, y, verbose=0)
    assert restored.optimizer.iterations == model.optimizer.iterations
    first = restored.layers[0].weights[0]
    assert np.array_equal(restored.optimizer.get_slot(first, "m"),
                          model.optimizer.get_slot(model.layers[0].weights[0], "m"))
    model.fit(x, y, epochs=1, verbose=0, shuffle=False)
    restored.fit(x, y, epochs=1, verbose=0, shuffle=False)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(),
                                                    restored.get_weights()))


def test_unbuilt_sequential_pickles_and_builds_later():
    model = models.Sequential([layers.Dense(4), layers.Dense(2)])
    restored = pickle.loads(pickle.dumps(model))
    out = restored.predict(np.ones((3, 5), np.float32), verbose=0)
    assert out.shape == (3, 2)


def _run_python(code):
    # the mixedcore this process tested (a checkout's or an installed one), run from tests/,
    # where no source tree shadows it
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(mixedcore.__file__)))
    proc = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(__file__), env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_import_and_in_memory_predict_never_import_dask():
    out = _run_python(
        "import sys, numpy as np, mixedcore\n"
        "from mixedcore import layers, models\n"
        "m = models.Sequential([layers.Input((3,)), layers.Dense(2)])\n"
        "m.compile('sgd', 'mse')\n"
        "x = np.ones((4, 3), np.float32)\n"
        "m.predict(x, verbose=0); m.evaluate(x, np.ones((4, 2), np.float32), verbose=0)\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('dask', 'distributed')))\n")
    assert out.strip() == "[]"


def test_everything_works_when_dask_cannot_be_imported():
    out = _run_python(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('dask', 'distributed'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import numpy as np, pickle\n"
        "from mixedcore import layers, models, scale_out\n"
        "m = models.Sequential([layers.Input((3,)), layers.Dense(2)])\n"
        "x = np.ones((4, 3), np.float32)\n"
        "a = m.predict(x, verbose=0); b = pickle.loads(pickle.dumps(m)).predict(x, verbose=0)\n"
        "print(np.array_equal(a, b), scale_out.is_dask_array(x), scale_out._has_dask([x]))\n"
        "try:\n"
        "    scale_out.delayed_model(m)\n"
        "except ImportError as e:\n"
        "    print(e)\n")
    lines = out.strip().splitlines()
    assert lines[0] == "True False False"
    assert "delayed_model: Dask is needed here (pip install mixedcore[dask])" in lines[1]
