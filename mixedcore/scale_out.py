"""Predict and evaluate over Dask arrays: the public home of ``mixedcore.trainers.scale_out``
(docs/scale_out.md)."""
from mixedcore.trainers.scale_out import (ModelHandle, _has_dask, delayed_model, evaluate,
                                          is_dask_array, model_threads, predict, worker_info)

__all__ = ["ModelHandle", "delayed_model", "is_dask_array", "model_threads", "worker_info"]
