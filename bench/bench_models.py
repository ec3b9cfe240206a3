"""Whole models from Keras files: a small residual CNN and a transformer encoder, loaded by
mixedcore from ``.keras`` files and run beside Keras itself on the same files.

Run:

    python -m pytest bench/bench_models.py --benchmark-only --benchmark-group-by=group
    python bench/report.py RESULTS.json      # after --benchmark-json=RESULTS.json

Models (built by ``keras_models.build``, the same code for Keras and for mixedcore):
- cnn: 32x32x3 images; Conv2D 32 3x3 + BatchNormalization + ReLU, a residual block of two such
  convolutions joined by Add, MaxPooling2D, Conv2D 64 3x3 + BatchNormalization + ReLU,
  GlobalAveragePooling2D, Dense 10 softmax in float32 (about 49 MFLOP per image);
- encoder: 64 tokens of a 1000-word vocabulary; Embedding 128, one transformer block
  (MultiHeadAttention 4 heads x 32 + Add + LayerNormalization, Dense 256 gelu + Dense 128 + Add +
  LayerNormalization), GlobalAveragePooling1D, Dense 2 softmax in float32.

For each policy (float32, mixed_float16, mixed_bfloat16) the model is built under that policy,
given random weights (BatchNormalization statistics too) and saved as ``.keras``: by Keras when
it is installed, else by mixedcore itself. Both systems load that file once, outside the timed
region; the timed call is ``predict_on_batch`` of one batch (1 or 64). Keras runs on the torch
backend (CPU) with torch's threads set to the machine's two cores. A system's first call is
checked against the other's output before timing.

Targets: mixedcore >= 5x Keras for the CNN under mixed_float16 and >= 2x Keras for the encoder
under mixed_bfloat16, at batch 64.
"""
import os

import numpy as np
import pytest

import keras_models

POLICIES = ["float32", "mixed_float16", "mixed_bfloat16"]
BATCHES = [1, 64]


@pytest.fixture(scope="module", params=keras_models.MODELS)
def model_files(request, tmp_path_factory):
    """{policy: path of the .keras file} for one model, written once per session."""
    folder = tmp_path_factory.mktemp(request.param)
    return request.param, {p: keras_models.write(request.param, p, folder) for p in POLICIES}


def _inputs(name, batch):
    return keras_models.inputs(name, batch, seed=1)


def _mixedcore(path, x):
    from mixedcore import models
    model = models.load_model(str(path))
    model.predict_on_batch(x)
    return lambda: model.predict_on_batch(x)


def _keras(path, x):
    keras = keras_models.keras_or_none()
    if keras is None:
        pytest.skip("keras is not installed")
    import torch
    torch.set_num_threads(2)
    model = keras.models.load_model(str(path))
    model.predict_on_batch(x)
    return lambda: model.predict_on_batch(x)


SYSTEMS = {"mixedcore": _mixedcore, "keras": _keras}


@pytest.mark.parametrize("system", list(SYSTEMS))
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("policy", POLICIES)
def test_model(benchmark, model_files, policy, batch, system):
    name, files = model_files
    x = _inputs(name, batch)
    fn = SYSTEMS[system](files[policy], x)
    out = np.asarray(fn(), dtype=np.float32)
    reference = keras_models.reference(name, files[policy], x)
    tol = 1e-4 if policy == "float32" else 5e-2
    np.testing.assert_allclose(out, reference, rtol=tol, atol=tol,
                               err_msg=f"{system} {name} {policy} disagrees")
    benchmark.group = f"{name} {policy} batch {batch}"
    benchmark.name = system
    benchmark.extra_info["impl"] = system
    benchmark(fn)


if __name__ == "__main__":
    raise SystemExit(pytest.main([os.path.abspath(__file__), "--benchmark-only",
                                  "--benchmark-group-by=group"]))
