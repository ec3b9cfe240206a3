"""Whole models from Keras files, mixedcore against Keras itself, in interleaved rounds; prints
one markdown table with best and median times and the ratios the project is judged by.

    python bench/compare_models.py                                  # every model, policy, batch
    python bench/compare_models.py --models encoder --policies mixed_bfloat16 --batches 64

The files are written by bench/keras_models.py (Keras when installed: each model built under
its policy, given random weights and saved as ``.keras``); both systems load the same file.
In round r each system makes ``--calls`` timed ``predict_on_batch`` calls of one batch, the
order of the two systems alternating per round, so that a slow phase of the shared machine
falls on both.  Best and median are over all calls.  Ratio = Keras time / mixedcore time
(above 1: mixedcore faster).  Targets (batch 64): the CNN under mixed_float16 >= 5x, the
encoder under mixed_bfloat16 >= 2x.
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchutil  # noqa: E402
import keras_models  # noqa: E402

TARGETS = {("cnn", "mixed_float16"): 5.0, ("encoder", "mixed_bfloat16"): 2.0}


def _systems(path, x):
    from mixedcore import models
    keras = keras_models.keras_or_none()
    if keras is None:
        raise SystemExit("compare_models: Keras 3 is not installed; pip install keras torch")
    import torch
    torch.set_num_threads(2)
    ours = models.load_model(path)
    theirs = keras.models.load_model(path)
    for m in (ours, theirs):
        m.predict_on_batch(x)
    return {"mixedcore": lambda: ours.predict_on_batch(x),
            "keras": lambda: theirs.predict_on_batch(x)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=keras_models.MODELS)
    parser.add_argument("--policies", nargs="+",
                        default=["float32", "mixed_float16", "mixed_bfloat16"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 64])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args(argv)
    print("| model | policy | batch | mixedcore best / median | Keras best / median | "
          "ratio best / median | target |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            for policy in args.policies:
                path = keras_models.write(name, policy, folder)
                for batch in args.batches:
                    x = keras_models.inputs(name, batch)
                    times = benchutil.interleaved_rounds(_systems(path, x), args.rounds, args.calls)
                    best = {k: min(v) for k, v in times.items()}
                    med = {k: statistics.median(v) for k, v in times.items()}
                    target = TARGETS.get((name, policy)) if batch == 64 else None
                    print(f"| {name} | {policy} | {batch} | "
                          f"{best['mixedcore'] * 1e3:.2f} / {med['mixedcore'] * 1e3:.2f} ms | "
                          f"{best['keras'] * 1e3:.2f} / {med['keras'] * 1e3:.2f} ms | "
                          f"{best['keras'] / best['mixedcore']:.2f}x / "
                          f"{med['keras'] / med['mixedcore']:.2f}x | "
                          f"{f'>= {target:g}x' if target else ''} |", flush=True)


if __name__ == "__main__":
    main()
