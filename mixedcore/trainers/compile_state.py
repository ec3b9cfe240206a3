"""A model's compile state (optimizer, loss, loss weights, metrics) to and from Keras's compile
config, the form ``.keras`` archives (``compile_config``) and legacy ``.h5`` files
(``training_config``) keep it in.

Reading recompiles the model with what mixedcore has; anything else (an optimizer, loss or
setting mixedcore lacks) leaves the model uncompiled with a warning, or drops the metric with a
warning.  Optimizer variables are neither written nor read.
"""
import inspect
import warnings

from mixedcore.saving import object_registration as _registry
from mixedcore.saving.object_registration import keras_snake_case


class _Unsupported(Exception):
    pass


_LOSS_NEUTRAL = {
    "reduction": ("auto", "sum_over_batch_size", None), "ignore_class": (None,),
    "label_smoothing": (0, 0.0), "axis": (-1,), "dtype": (None, "float32"),
}


def _short_class(entry):
    return str(entry.get("class_name", "")).split(">")[-1]


def _optimizer_from_config(cfg):
    """The optimizer of a compile config (Keras 3, tf.keras 2 or TF 2.3 forms), through
    ``optimizers.get`` / ``deserialize``; _Unsupported when mixedcore cannot rebuild it."""
    from mixedcore import optimizers
    if isinstance(cfg, str):
        try:
            return optimizers.get(cfg)
        except ValueError:
            raise _Unsupported(f"its optimizer {cfg!r} is not one mixedcore has") from None
    if not isinstance(cfg, dict) or "class_name" not in cfg:
        raise _Unsupported(f"its optimizer config {str(cfg)[:120]} cannot be read")
    # "package>Name" (what tf.keras writes for a registered class) is kept as the registered
    # name, the registry's first key
    registered = cfg.get("registered_name") or (
        cfg["class_name"] if ">" in str(cfg["class_name"]) else None)
    cfg = dict(cfg, class_name=_short_class(cfg), registered_name=registered)
    try:
        return optimizers.deserialize(cfg)
    except (TypeError, ValueError) as exc:
        raise _Unsupported(f"its {cfg['class_name']} optimizer cannot be rebuilt ({exc})") \
            from None


def _loss_from_config(cfg):
    from mixedcore import losses
    if cfg is None:
        return None
    if isinstance(cfg, list) and len(cfg) == 1:
        return _loss_from_config(cfg[0])
    if isinstance(cfg, str):
        try:
            return losses.get(cfg)
        except ValueError:
            raise _Unsupported(f"its loss {cfg!r} is not one mixedcore has") from None
    if isinstance(cfg, dict) and "class_name" in cfg:
        name = _short_class(cfg)
        inner = cfg.get("config")
        if name == "function" and isinstance(inner, str):
            return _loss_from_config(inner)
        inner = inner if isinstance(inner, dict) else {}
        # the user's losses (custom_objects, scopes, registered ones), then mixedcore's
        found = _registry.lookup("loss", cfg)
        if found is None or not isinstance(found.obj, type):
            raise _Unsupported(f"its loss {name} is not one mixedcore has")
        cls = found.obj
        params = inspect.signature(cls.__init__).parameters
        any_key = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        kwargs = {}
        for key, value in inner.items():
            if (key in params or any_key) and key != "self":
                kwargs[key] = value
            elif key in _LOSS_NEUTRAL and value in _LOSS_NEUTRAL[key]:
                continue
            elif key == "fn":
                continue
            else:
                raise _Unsupported(f"its loss {name} sets {key}={value!r}, which mixedcore's "
                                   f"loss does not have")
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise _Unsupported(f"its loss {name} cannot be rebuilt ({exc})") from None
    raise _Unsupported(f"its loss {str(cfg)[:120]} (several outputs?) cannot be rebuilt")


def _metrics_from_config(cfg, dropped):
    from mixedcore import metrics
    if cfg is None:
        return []
    if isinstance(cfg, (str, dict)):
        cfg = [cfg]
    if isinstance(cfg, list) and len(cfg) == 1 and isinstance(cfg[0], list):
        cfg = cfg[0]                                    # tf.keras 2.x: one list per output
    if not isinstance(cfg, list):
        dropped.append(str(cfg)[:80])
        return []
    out = []
    for item in cfg:
        # the user's metric functions (custom_objects, scopes, registered ones) first
        keys = _registry.function_keys(item) if isinstance(item, (str, dict)) else []
        found = _registry.lookup_keys("metric", keys, builtins=False)
        if found is not None and callable(found.obj):
            out.append(found.obj)
            continue
        candidates = []
        if isinstance(item, str):
            candidates = [item]
        elif isinstance(item, dict):
            inner = item.get("config") if isinstance(item.get("config"), dict) else {}
            # the metric's own name first ("accuracy" names the logs as tf.keras did)
            candidates = [inner.get("name"), inner.get("fn"), keras_snake_case(_short_class(item))]
        for name in candidates:
            if not isinstance(name, str):
                continue
            try:
                metrics.get(name)
            except (ValueError, TypeError):
                continue
            out.append(name)
            break
        else:
            dropped.append(item if isinstance(item, str) else _short_class(item))
    return out


def restore_compile(owner, source, model, cfg, legacy, stacklevel=2):
    """Compile ``model`` from a Keras compile config (``training_config`` of a legacy .h5);
    the warnings name ``owner`` and ``source``; ``stacklevel`` counts from the caller of this
    function, as ``warnings.warn``'s does from its own (2: that caller's caller)."""
    stacklevel += 1
    try:
        opt_cfg = cfg.get("optimizer_config") if legacy else cfg.get("optimizer")
        if opt_cfg is None:
            raise _Unsupported("it names no optimizer")
        optimizer = _optimizer_from_config(opt_cfg)
        loss_cfg = cfg.get("loss")
        if isinstance(loss_cfg, dict) and "class_name" not in loss_cfg:    # per output name
            loss = {k: _loss_from_config(v) for k, v in loss_cfg.items()}
        elif isinstance(loss_cfg, list) and len(loss_cfg) > 1:             # per output
            loss = [_loss_from_config(v) for v in loss_cfg]
        else:
            loss = _loss_from_config(loss_cfg)
        weights = cfg.get("loss_weights")
        if isinstance(weights, (int, float)) and not isinstance(weights, bool):
            weights = [weights]
        values = list(weights.values()) if isinstance(weights, dict) else weights or []
        if not isinstance(values, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise _Unsupported(f"its loss_weights {str(weights)[:80]} cannot be read")
        dropped = []
        metric_ids = _metrics_from_config(cfg.get("metrics"), dropped)
        if cfg.get("weighted_metrics"):
            dropped.append(f"weighted_metrics {cfg['weighted_metrics']}")
    except _Unsupported as exc:
        warnings.warn(f"{owner}: {source}: the model was saved compiled, but {exc}; it is "
                      f"loaded uncompiled (call compile() before training)",
                      stacklevel=stacklevel)
        return
    if dropped:
        warnings.warn(f"{owner}: {source}: metrics {dropped} are not ones mixedcore has and "
                      f"are left out of compile()", stacklevel=stacklevel)
    try:
        model.compile(optimizer=optimizer, loss=loss, metrics=metric_ids,
                      loss_weights=weights or None)
    except (TypeError, ValueError) as exc:
        warnings.warn(f"{owner}: {source}: the model was saved compiled, but compile() refused "
                      f"its settings ({exc}); it is loaded uncompiled", stacklevel=stacklevel)


def _optimizer_to_keras(opt):
    from mixedcore import optimizers
    if isinstance(opt, optimizers.LossScaleOptimizer):
        inner = _optimizer_to_keras(opt.inner_optimizer)
        if not opt.dynamic:         # Keras 3 scales dynamically only: the inner optimizer
            return inner
        return {"module": "keras.optimizers", "class_name": "LossScaleOptimizer",
                "config": {"name": "loss_scale_optimizer", "inner_optimizer": inner,
                           "initial_scale": float(opt.initial_scale),
                           "dynamic_growth_steps": int(opt.dynamic_growth_steps)},
                "registered_name": None}
    config = opt.get_config()
    if callable(config.get("learning_rate")):
        return None
    name = type(opt).__name__
    return {"module": "keras.optimizers", "class_name": name,
            "config": {"name": name.lower(), **config},
            "registered_name": _registry.registered_key(type(opt))}


def _loss_to_keras(loss):
    from mixedcore import losses
    if loss is None:
        return None
    if not _registry.is_builtin("loss", type(loss)):
        return losses.serialize(loss)
    name = getattr(loss, "name", None)
    config = loss.get_config()
    # the short string form only for a loss with its default settings, under a name Keras reads
    try:
        default = type(loss)().get_config()
    except TypeError:
        default = None
    if not getattr(loss, "from_logits", False) and isinstance(name, str) \
            and name != "huber_loss" and config == default:
        return name
    return losses.serialize(loss)


def _metric_to_keras(metric):
    """A metric given to compile() as a compile config keeps it: a name stays, a named function
    becomes its name or Keras's function entry, a lambda (or a nameless callable) is left out."""
    from mixedcore import metrics
    if isinstance(metric, str):
        return metric
    if getattr(metric, "__name__", "<lambda>") == "<lambda>":
        return None
    return metrics.serialize(metric)


def compile_config(model):
    """Keras's compile config of a compiled model, or None."""
    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        return None
    optimizer = _optimizer_to_keras(model.optimizer)
    if optimizer is None:
        return None
    metric_ids = [entry for entry in map(_metric_to_keras, getattr(model, "_metric_ids", []))
                  if entry is not None]
    names = list(getattr(model, "output_names", []))
    fns = getattr(model, "_loss_fns", None)
    if fns is None or len(fns) != len(names):
        loss = _loss_to_keras(getattr(model, "loss", None))
    elif len(fns) == 1:
        loss = _loss_to_keras(fns[0])
    else:
        loss = {n: _loss_to_keras(f) for n, f in zip(names, fns) if f is not None}
    weights = getattr(model, "_loss_weights", None)
    loss_weights = None
    if weights and len(weights) == len(names) and any(w != 1.0 for w in weights):
        loss_weights = dict(zip(names, map(float, weights))) if len(names) > 1 else \
            [float(weights[0])]
    return {"optimizer": optimizer, "loss": loss, "loss_weights": loss_weights,
            "metrics": metric_ids or None, "weighted_metrics": None,
            "run_eagerly": False, "steps_per_execution": 1, "jit_compile": False}


def legacy_training_config(model):
    """The compile config in the form of a legacy .h5 ``training_config``, or None."""
    cfg = compile_config(model)
    if cfg is None:
        return None
    out = {k: cfg[k] for k in ("loss", "metrics", "weighted_metrics", "loss_weights")}
    opt = cfg["optimizer"]
    # tf.keras names a registered class by its registered name
    out["optimizer_config"] = {"class_name": opt["registered_name"] or opt["class_name"],
                               "config": opt["config"]}
    return out
