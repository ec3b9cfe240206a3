"""``python -m mixedcore report``: the numerics report of a saved model over an array file,
per layer (``utils.numerics_report``), optionally with gradients and as JSON."""
import os

import numpy as np

from mixedcore.cli.common import (CommandError, check_output, check_shapes, numeric,
                                  policy_option, read_inputs, written)

__all__ = ["run"]


def _read_labels(path, n):
    if not os.path.isfile(path):
        raise CommandError(f"labels file {path!r} does not exist" if not os.path.exists(path)
                           else f"labels file {path!r} is not a regular file")
    try:
        labels = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read labels file {path!r} as .npy ({exc})") from None
    if not isinstance(labels, np.ndarray):
        raise CommandError(f"labels file {path!r} is a .npz; give one .npy array")
    labels = numeric(f"labels file {path!r}", labels)
    if labels.shape[0] != n:
        raise CommandError(f"labels file {path!r} has {labels.shape[0]} samples; the input has "
                           f"{n}")
    return labels


def run(model_path, input_path, labels_path=None, policy=None, batch_size=32, json_path=None,
        quantize=None):
    """The numerics report (``utils.numerics_report``) of a saved model over an array file.

    With ``labels_path`` (a ``.npy`` of targets) the gradients are reported too; the model must
    have been saved compiled (its loss is in the file).  With ``json_path`` the numbers are also
    written there as JSON (``report.as_dict()`` with the model, policy and sample count).  With
    ``quantize`` (a mode: "int8", "int4" or "float8") each quantizable layer's own quantization
    error is reported too (docs/quantization.md).

    Returns
    -------
    NumericsReport

    Raises
    ------
    CommandError
        Missing or unreadable files, inputs or labels that do not fit the model, an unknown
        policy, labels for a model saved without its loss.
    """
    import json
    from mixedcore.utils import numerics_report
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise CommandError(f"--batch-size must be a positive integer, got {batch_size!r}")
    policy = policy_option(policy)
    if json_path is not None:
        check_output("--json", json_path, (("the model", model_path), ("the input", input_path),
                                          ("the labels", labels_path)))
    if not os.path.isfile(model_path):
        raise CommandError(f"model file {model_path!r} does not exist"
                           if not os.path.exists(model_path)
                           else f"model file {model_path!r} is not a regular file")
    from mixedcore import models
    try:
        model = models.load_model(model_path, compile=labels_path is not None,
                                  dtype_policy=policy)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    arrays = read_inputs(input_path, model)
    n = check_shapes(model, arrays)
    labels = None
    if labels_path is not None:
        labels = _read_labels(labels_path, n)
        if not model.compiled:
            raise CommandError(f"--labels: model file {model_path!r} was saved without its "
                               f"loss (not compiled), so there is no gradient to report")
    x = arrays[0] if len(arrays) == 1 else dict(zip(model.input_names, arrays))
    try:
        result = numerics_report(model, x, labels, batch_size=batch_size, quantize=quantize)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise CommandError(str(exc)) from None
    if json_path is not None:
        payload = {"model": result.model_name, "policy": result.policy,
                   "samples": result.samples, "loss_scale": result.loss_scale,
                   "layers": result.as_dict()}
        with written("--json", json_path) as tmp:
            with open(tmp, "w") as f:
                json.dump(payload, f, indent=1)
    return result
