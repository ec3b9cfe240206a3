"""Every ``keras.applications`` architecture: Keras 3 (torch backend) against mixedcore, each
loaded from the ``.keras`` file Keras saved; interleaved rounds in one process, 2 threads each;
prints one markdown table (docs/applications.md keeps the measured one).

    python bench/compare_applications.py                        # every architecture, batch 1
    python bench/compare_applications.py --models ResNet50,EfficientNetB0 --batch 8
    python bench/compare_applications.py --small --rounds 2     # the tests' small inputs

Each model is built with ``weights=None`` and logits out at its default input size (299 for
the Inception models and Xception, 331 for NASNetLarge, else 224; ``--small``: the tests' sizes),
its BatchNormalization statistics calibrated on random images
(``keras_models.calibrate_batchnorm``), saved as ``.keras`` into a temporary directory and
loaded back by Keras and by mixedcore (float32 and ``dtype_policy="mixed_bfloat16"``).  Keras
runs ``model(x, training=False)`` under ``torch.no_grad()`` (its fastest call: ``predict_on_batch``
adds several times that at batch 1); mixedcore ``predict_on_batch``.  Before
timing, each system's output is compared with Keras float32's (largest absolute difference over
the largest absolute logit) and reported.  A float32 system is not timed over 1e-4, unless
Keras's own output moves by a tenth of its error when the input moves by 2**-20 of itself (a
random-weight network that amplifies any rounding; that sensitivity is the last column); a bf16
one over 0.2 or 4x the distance of Keras's own mixed_bfloat16 prediction, whichever is larger
(the column before).  Each round times ``--calls`` calls of ``predict_on_batch`` per system, the order of
the systems reversed every other round.  Best and median are over all calls; "x Keras" is
Keras float32's time over the system's (above 1: faster than Keras).
"""
import argparse
import gc
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from keras_models import (APPLICATION_SIZES, SMALL_SIZES, application,  # noqa: E402
                          application_names, calibrate_batchnorm, keras_or_none)

SYSTEMS = ("Keras float32", "mixedcore float32", "mixedcore mixed_bfloat16")


def _systems(keras, path):
    from mixedcore import models
    theirs = keras.saving.load_model(path)
    ours32 = models.load_model(path)
    ours16 = models.load_model(path, dtype_policy="mixed_bfloat16")

    import torch

    def keras_call(x):
        with torch.no_grad():
            return keras.ops.convert_to_numpy(theirs(x, training=False))

    return {"Keras float32": keras_call,
            "mixedcore float32": lambda x: np.asarray(ours32.predict_on_batch(x)),
            "mixedcore mixed_bfloat16": lambda x: np.asarray(ours16.predict_on_batch(x),
                                                             dtype=np.float32)}


def measure(keras, name, size, batch, rounds, calls, folder):
    rng = np.random.default_rng(0)
    model = application(keras, name, size)
    calibrate_batchnorm(keras, model, rng, rng.uniform(0, 255, (8, size, size, 3)).astype("f4"))
    path = os.path.join(folder, f"{name}.keras")
    model.save(path)
    x = rng.uniform(0, 255, (batch, size, size, 3)).astype(np.float32)
    # Keras's own mixed_bfloat16 prediction, the yardstick of mixedcore's
    mixed = application(keras, name, size, "mixed_bfloat16")
    mixed.set_weights(model.get_weights())
    import torch
    with torch.no_grad():
        keras_bf16 = keras.ops.convert_to_numpy(keras.ops.cast(mixed(x, training=False),
                                                                "float32"))
    del model, mixed
    gc.collect()
    fns = _systems(keras, path)
    ref = fns["Keras float32"](x)
    scale = float(np.max(np.abs(ref)))
    # how far Keras itself moves when the input moves by 2**-20 of itself: random-weight deep
    # networks can amplify any rounding difference (EfficientNetB4-B7 at 224)
    moved = fns["Keras float32"](x * np.float32(1 + 2.0 ** -20))
    row = {"errors": {}, "times": {},
           "sensitivity": float(np.max(np.abs(moved - ref))) / scale,
           "keras_bf16": float(np.max(np.abs(keras_bf16 - ref))) / scale}
    for system, fn in fns.items():
        err = float(np.max(np.abs(fn(x) - ref))) / scale
        row["errors"][system] = err
        bound = (max(0.2, 4 * row["keras_bf16"]) if "bfloat16" in system else
                 max(1e-4, 10 * row["sensitivity"]))
        if err > bound:
            continue
        row["times"][system] = []
    order = [s for s in SYSTEMS if s in row["times"]]
    for r in range(rounds):
        for system in (order if r % 2 == 0 else order[::-1]):
            fn = fns[system]
            for _ in range(calls):
                t = time.perf_counter()
                fn(x)
                row["times"][system].append(time.perf_counter() - t)
    os.remove(path)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="the tests' small input sizes")
    args = parser.parse_args()
    keras = keras_or_none()
    if keras is None:
        sys.exit("compare_applications: Keras 3 is not installed (pip install keras torch)")
    import torch
    torch.set_num_threads(2)
    from mixedcore import kernels
    kernels.set_num_threads(2)
    names = args.models.split(",") if args.models else application_names(keras)
    unknown = sorted(set(names) - set(application_names(keras)))
    if unknown:
        sys.exit(f"compare_applications: unknown architectures {unknown}")
    print(f"batch {args.batch}, {args.rounds} rounds x {args.calls} calls, 2 threads; "
          f"times in ms, best / median; x Keras = Keras float32's time over the system's\n")
    print("| model | input | Keras float32 | mixedcore float32 | x Keras | mixedcore "
          "mixed_bfloat16 | x Keras | error f32 / bf16 | Keras bf16 | Keras's sensitivity |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            size = (SMALL_SIZES.get(name, 64) if args.small else
                    APPLICATION_SIZES.get(name, 224))
            row = measure(keras, name, size, args.batch, args.rounds, args.calls, folder)
            t = {s: (min(v) * 1e3, statistics.median(v) * 1e3) for s, v in row["times"].items()}

            def cell(system):
                return "%.1f / %.1f" % t[system] if system in t else "not timed"

            def ratio(system):
                if system not in t or "Keras float32" not in t:
                    return "-"
                k = t["Keras float32"]
                return "%.1fx / %.1fx" % (k[0] / t[system][0], k[1] / t[system][1])

            e = row["errors"]
            print(f"| {name} | {size} | {cell('Keras float32')} | {cell('mixedcore float32')} | "
                  f"{ratio('mixedcore float32')} | {cell('mixedcore mixed_bfloat16')} | "
                  f"{ratio('mixedcore mixed_bfloat16')} | {e['mixedcore float32']:.0e} / "
                  f"{e['mixedcore mixed_bfloat16']:.0e} | {row['keras_bf16']:.0e} | "
                  f"{row['sensitivity']:.0e} |",
                  flush=True)
            gc.collect()


if __name__ == "__main__":
    main()
