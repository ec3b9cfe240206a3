"""Models: functional graphs (``Model(inputs, outputs)``) and ``Sequential`` stacks, trained by
the one training loop of ``mixedcore.trainers``, saved in Keras's file formats.

- ``_graph``: the graph of layer calls: its order, run forwards and backwards;
  ``_folding``: which chains of calls the graph runs as one fused call at inference;
- ``_model``: ``Model``, a layer made of a graph (and a ``trainers.trainer.Trainer``);
  ``_sequential``: ``Sequential``, a stack that becomes such a graph;
- ``_report``: the numerics report (where a model overflows, underflows or makes NaN).

Keras's files (``.keras``, legacy ``.h5``, ``.weights.h5``) and JSON configs are
``mixedcore.saving``'s; ``load_model`` and the others are re-exported here.
"""
from mixedcore import layers as _layers
from mixedcore.models._model import Model
from mixedcore.models._sequential import Sequential
from mixedcore.callbacks import History
from mixedcore.saving.saving_api import (load_model, load_weights, model_from_json, save_model,
                                         save_weights)

__all__ = ["Model", "Sequential", "History", "load_model", "save_model", "model_from_json",
           "load_weights", "save_weights"]

# configs name models as Keras does: "Functional" (and "Model"), "Sequential"
_layers.register(Model, "Functional")
_layers.register(Model, "Model")
_layers.register(Sequential, "Sequential")
