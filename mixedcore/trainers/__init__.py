"""Trainers: what every model uses to learn and to be evaluated, apart from what a model is.

- ``trainer``: ``Trainer``, the compile / fit / evaluate / predict of every model;
- ``data_adapters``: batches from arrays, Sequence-like datasets and generators;
- ``progress``: the progress display of fit / evaluate / predict;
- ``compile_state``: the compile state to and from Keras's compile config, behind the trainer's
  ``get_compile_config``, ``get_training_config`` and ``compile_from_config`` (what saving
  calls);
- ``scale_out``: predict and evaluate over Dask arrays.
"""
