"""The base of keras_hub's model classes in mixedcore: functional models made from their
hyperparameters, whose config is those hyperparameters (not a layer list)."""
from __future__ import annotations

from typing import Any

from mixedcore.dtype_policies import policy_config
from mixedcore.layers._base import _snake, _unique_name
from mixedcore.models._model import Model


class _HubModel(Model):
    """A functional model built from hyperparameters.  Subclasses list theirs in
    ``_HYPERPARAMETERS`` (or override ``_arguments``) and build the graph in ``__init__``."""

    _HYPERPARAMETERS: tuple[str, ...] = ()

    def _start(self, name, kwargs):
        owner = type(self).__name__
        if kwargs:
            raise TypeError(f"{owner}: unexpected argument(s) {sorted(kwargs)}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{owner}: name must be a str, got {type(name).__name__}")
        return name or _unique_name(_snake(owner))

    def _arguments(self) -> dict[str, Any]:
        """The hyperparameters the config holds (besides name, trainable and dtype)."""
        return {key: getattr(self, key) for key in self._HYPERPARAMETERS}

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable,
                  "dtype": policy_config(self._dtype_policy)}
        config.update(self._arguments())
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        if not isinstance(config, dict):
            raise TypeError(f"{cls.__name__}.from_config: expected a dict of hyperparameters, "
                            f"got {type(config).__name__}")
        return cls(**config)
