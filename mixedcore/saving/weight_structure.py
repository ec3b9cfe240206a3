"""Where Keras keeps each layer's weights in a file, and loading them into a model.

In a ``.keras`` archive and a ``.weights.h5`` file, weights are found by structure, as Keras
finds them: the k-th layer of a model is the group ``layers/<snake_case(class)>[_n]`` (the
suffix counts earlier layers of the same class), its own variables are the datasets ``vars/0``,
``vars/1``... in creation order, trainable ones first.  Layer names are not used.  A layer
declares that layout itself (``Layer.keras_weight_paths``: a layer Keras builds from
sub-layers, such as MultiHeadAttention, files its weights under their paths; tf.keras 2.x's
``.keras`` and ``.weights.h5`` files name those sub-layers with a leading underscore,
``_query_dense``, which is read too).  In a legacy
``.h5`` weights are found by layer name, in the order of the ``weight_names`` attribute;
``load_weights`` into another model falls back to the position among the layers that have
weights, Keras's rule.

Everything is checked (counts, shapes, numeric dtypes) before any weight is set, so a failed
load leaves the model as it was; shapes are checked before data are read, so a file cannot make
mixedcore allocate more than the model's own weights.
"""
import math
import os
import warnings

from mixedcore._version import __version__
from mixedcore.layers._base import realize_placeholders
from mixedcore.saving import object_registration as _registry
from mixedcore.saving.file_utils import _KERAS_FORMAT_VERSION, _MAX_EXPANSION, _fail
from mixedcore.saving.h5_store import _legacy_groups, _write_attr_list, _write_dataset
from mixedcore.saving.object_registration import keras_snake_case


def _is_model(obj):
    model_class = _registry.builtin_objects("layer").get("Functional")
    return model_class is not None and isinstance(obj, model_class)


def _model_layers(model):
    return list(model.layers)


def _unique_key(base, used):
    if base in used:
        used[base] += 1
        return f"{base}_{used[base]}"
    used[base] = 0
    return base


def _keras_class_name(layer):
    """The class name Keras gives the layer (a functional model is Keras's "Functional")."""
    cls = type(layer)
    return cls.__dict__.get("_keras_class") or cls.__name__


def _layer_slots(layer):
    """[(sub-path, positions in layer.weights)] of a layer in Keras's layout, as the layer
    declares it; sub-path "" is the layer's own ``vars``."""
    declared = getattr(layer, "keras_weight_paths", None)
    if callable(declared):
        return [(sub, list(pos)) for sub, pos in declared()]
    return [("", list(range(len(layer.weights))))]


def _tf_keras_path(path, sub):
    """Where tf.keras 2.x files a sub-layer's variables: under the private attribute that holds
    the sub-layer (``layers/multi_head_attention/_query_dense``), where Keras 3 uses the public
    name (``.../query_dense``); None for a layer's own variables."""
    if not sub:
        return None
    head, _, last = path.rpartition("/")
    return f"{head}/_{last}" if not last.startswith("_") else None


def _structured_entries(model, prefix="", visited=None):
    """[(path, layer, positions)] for every layer of ``model`` (nested models walked), where
    ``path`` is the group Keras keeps the layer's variables in.  A layer met a second time (a
    layer shared by two nested models) is filed only under its first path, as Keras does; it
    still counts for the suffixes of the later ones."""
    return [(path, layer, positions) for path, _, layer, positions in
            _structured_slots(model, prefix, visited)]


def _structured_slots(model, prefix="", visited=None):
    """[(path, sub-path, layer, positions)]: :func:`_structured_entries` with the sub-path of
    each entry ("" for a layer's own variables)."""
    visited = set() if visited is None else visited
    out = []
    used = {}
    for layer in _model_layers(model):
        key = _unique_key(keras_snake_case(_keras_class_name(layer)), used)
        if id(layer) in visited:
            continue
        visited.add(id(layer))
        base = f"{prefix}layers/{key}"
        if _is_model(layer):
            out.append((base, "", layer, []))
            out.extend(_structured_slots(layer, base + "/", visited))
            continue
        for sub, positions in _layer_slots(layer):
            out.append((f"{base}/{sub}" if sub else base, sub, layer, positions))
    return out


def _legacy_positions(layer):
    """Positions in ``layer.weights`` of the layer's weights in the order legacy files keep
    them: its trainable weights, then the others (for a nested model: over all its layers)."""
    where = {id(w): pos for pos, w in enumerate(layer.weights)}
    order = list(layer.trainable_weights) + list(layer.non_trainable_weights)
    positions = [where[id(w)] for w in order if id(w) in where]
    if sorted(positions) != list(range(len(where))):
        return list(range(len(where)))
    return positions


def _legacy_names(layer):
    """The names of ``layer.weights`` ("dense/kernel"...), nested models' leaf layers asked."""
    names = {}
    leaves = layer._leaf_layers() if _is_model(layer) else [layer]
    for leaf in leaves:
        labels = leaf.weight_names() if callable(getattr(leaf, "weight_names", None)) else []
        for label, w in zip(labels, leaf.weights):
            names.setdefault(id(w), label)
    return [names.get(id(w), f"{layer.name}/weight_{pos}")
            for pos, w in enumerate(layer.weights)]


def _describe(layer):
    return f"layer '{layer.name}' ({type(layer).__name__})"


def _weight_label(layer, pos):
    names = getattr(layer, "weight_names", None)
    if callable(names):
        try:
            return names()[pos]
        except (IndexError, TypeError):
            pass
    return f"{layer.name}/{pos}"


def _apply(owner, source, plan, skip_mismatch, problems):
    """Check the plan (layer -> {position: _Array}), then read and set every layer's weights;
    nothing is set when a problem remains (unless skip_mismatch, which drops those layers)."""
    bad_layers = {layer for layer, _ in problems}
    if problems and not skip_mismatch:
        listing = "; ".join(text for _, text in problems[:8])
        more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        raise _fail(owner, source, f"the weights do not fit the model: {listing}{more}")
    for layer, text in problems:
        warnings.warn(f"{owner}: {source}: skipping {_describe(layer)}: {text}", stacklevel=4)
    _check_capacity(owner, source, [arr for layer, arrays in plan.items()
                                    if layer not in bad_layers for arr in arrays.values()])
    realize_placeholders(plan)          # a model being loaded: its weights get memory now
    values = {}
    for layer, arrays in plan.items():
        if layer in bad_layers:
            continue
        current = layer.weights
        new = []
        for pos in range(len(current)):
            value = arrays[pos].read()
            if value.shape != tuple(current[pos].shape):    # a file that lied about its shape
                raise _fail(owner, source, f"{arrays[pos].where} has shape {value.shape}, "
                                           f"expected {tuple(current[pos].shape)}")
            new.append(value)
        values[layer] = new
    for layer, new in values.items():
        layer.set_weights(new)


def _check_capacity(owner, source, arrays):
    """Refuse, before any is read, weights whose declared shapes hold more numbers than the
    file could store: at least a byte each, or a hundredth of one under compression (an HDF5
    dataset may declare a shape without storing its data, and reading it would make the
    missing numbers)."""
    try:
        size = os.path.getsize(source)
    except (OSError, TypeError, ValueError):
        return
    elements = sum(math.prod(int(d) for d in arr.shape) for arr in arrays)
    if elements > _MAX_EXPANSION * size:
        biggest = max(arrays, key=lambda arr: math.prod(int(d) for d in arr.shape))
        raise _fail(owner, source, f"the weights declare {elements} numbers (the largest, "
                                   f"{biggest.where}, has shape {biggest.shape}), more than a "
                                   f"file of {size} bytes can hold")


def _check_array(layer, pos, arr, label):
    expected = tuple(layer.weights[pos].shape)
    if arr.shape != expected:
        return (f"{label} has shape {arr.shape}, {_describe(layer)} expects "
                f"{expected} for {_weight_label(layer, pos)}")
    return None


def _adopt_stored_layouts(model, store):
    """Let layers whose file layout Keras's config does not record take it from the stored
    variables' shapes before anything is checked (``adopt_stored_layout``: a
    MultiHeadAttention whose projections Keras quantized in memory)."""
    for path, sub, layer, _ in _structured_slots(model):
        adopt = getattr(layer, "adopt_stored_layout", None)
        if not callable(adopt) or not sub:
            continue
        found = store.vars(path)
        alternative = _tf_keras_path(path, sub)
        if not found and alternative is not None:
            found = store.vars(alternative)
        if found:
            adopt(sub, {k: tuple(a.shape) for k, a in found.items()},
                  lambda key, found=found: found[key].read())


def _load_structured(owner, source, model, store, skip_mismatch, adopt=False):
    """Keras 3 layout (C): every layer's variables from its structural path; with ``adopt``
    (a model made from the same file), layers may first take their layout from it."""
    plan, problems, used_paths = {}, [], set()
    if adopt:
        _adopt_stored_layouts(model, store)
    slots = _structured_slots(model)
    expect = getattr(store, "expect", None)     # a store that must bound what it reads first
    if expect is not None:
        needs = {}
        for path, sub, layer, positions in slots:
            shapes = [tuple(layer.weights[pos].shape) for pos in positions]
            for where in (path, _tf_keras_path(path, sub)):
                if where is not None:
                    needs.setdefault(where, shapes)
        expect(needs)
    for path, sub, layer, positions in slots:
        found = store.vars(path)
        alternative = _tf_keras_path(path, sub)
        if not found and alternative is not None:
            found = store.vars(alternative)
            if found:
                path = alternative
        if not positions:
            if found and not _is_model(layer):
                problems.append((layer, f"{path} holds {len(found)} arrays, {_describe(layer)} "
                                        f"has no weights"))
            used_paths.add(path)
            continue
        used_paths.add(path)
        want = {str(i) for i in range(len(positions))}
        if set(found) != want:
            if not found:
                text = (f"{path} is missing from the file ({_describe(layer)} has "
                        f"{len(positions)} weights)")
            else:
                text = (f"{path} holds arrays {sorted(found, key=_natural)}, "
                        f"{_describe(layer)} has {len(positions)} weights")
                if len(found) == len(positions) - 1 and \
                        getattr(layer, "quantization_mode", None) in ("gptq", "awq"):
                    text += (" (Keras 3.15.1's save leaves a GPTQ / AWQ layer's zero points "
                             "out of its file, which no reader can then use, Keras included)")
            problems.append((layer, text))
            continue
        entry = plan.setdefault(layer, {})
        for i, pos in enumerate(positions):
            text = _check_array(layer, pos, found[str(i)], f"{path}/vars/{i}")
            if text:
                problems.append((layer, text))
            entry[pos] = found[str(i)]
    extra = [p for p in store.paths_with_vars("layers") if p not in used_paths]
    if extra:
        problems.append((None, f"the file has weights at {sorted(extra)[:6]} for which the "
                               f"model has no layer"))
    unmatched = [(layer, text) for layer, text in problems if layer is None]
    if unmatched and skip_mismatch:
        for _, text in unmatched:
            warnings.warn(f"{owner}: {source}: {text}", stacklevel=3)
        problems = [p for p in problems if p[0] is not None]
    _apply(owner, source, plan, skip_mismatch, problems)


def _natural(key):
    return (0, int(key)) if key.isdigit() else (1, key)


def _load_legacy(owner, source, model, group, skip_mismatch, by_name_only):
    """Legacy layout (C): by layer name, or by position among the layers with weights."""
    names, groups = _legacy_groups(owner, source, group)
    layers = [layer for layer in _model_layers(model) if layer.weights]
    with_weights = [n for n in names if groups[n]]
    if by_name_only or all(layer.name in groups for layer in layers):
        pairs = []
        missing = [layer.name for layer in layers if layer.name not in groups]
        if missing:
            raise _fail(owner, source, f"no weights for layers {missing}: the weights are "
                                       f"missing")
        pairs = [(layer, layer.name) for layer in layers]
        unused = [n for n in with_weights if n not in {layer.name for layer in layers}]
    else:
        if len(with_weights) != len(layers):
            raise _fail(owner, source, f"the file has weights for {len(with_weights)} layers "
                                       f"({with_weights}), the model has {len(layers)} layers "
                                       f"with weights ({[layer.name for layer in layers]})")
        pairs = list(zip(layers, with_weights))
        unused = []
    problems = []
    if unused:
        problems.append((None, f"the file has weights for layers {unused} that the model "
                               f"does not have"))
    plan = {}
    for layer, name in pairs:
        arrays = groups[name]
        if len(arrays) != len(layer.weights):
            problems.append((layer, f"'{name}' holds {len(arrays)} weights, {_describe(layer)} "
                                    f"has {len(layer.weights)}"))
            continue
        entry = plan.setdefault(layer, {})
        for pos, arr in zip(_legacy_positions(layer), arrays):
            text = _check_array(layer, pos, arr, arr.where)
            if text:
                problems.append((layer, text))
            entry[pos] = arr
    if skip_mismatch:
        for _, text in [p for p in problems if p[0] is None]:
            warnings.warn(f"{owner}: {source}: {text}", stacklevel=3)
        problems = [p for p in problems if p[0] is not None]
    _apply(owner, source, plan, skip_mismatch, problems)


def _write_structured(model, h5):
    """The weights in Keras 3's layout (C), into an open, empty h5py file."""
    h5.create_group("vars").attrs["name"] = model.name
    for path, layer, positions in _structured_entries(model):
        group = h5.require_group(path).require_group("vars")
        group.attrs["name"] = layer.name
        weights = layer.weights
        for i, pos in enumerate(positions):
            _write_dataset(group, str(i), weights[pos])


def _write_legacy_weights(model, group):
    """The weights in the legacy layout (C): a group per layer, datasets named in weight_names."""
    everything = _model_layers(model)
    _write_attr_list(group, "layer_names", [layer.name for layer in everything])
    group.attrs["backend"] = "mixedcore".encode("utf-8")
    group.attrs["keras_version"] = _KERAS_FORMAT_VERSION.encode("utf-8")
    group.attrs["mixedcore_version"] = __version__.encode("utf-8")
    for layer in sorted(everything, key=lambda layer: layer.name):
        g = group.create_group(layer.name)
        weights, labels = layer.weights, _legacy_names(layer)
        positions = _legacy_positions(layer)
        names = [labels[pos] for pos in positions]
        if len(set(names)) != len(names):
            raise ValueError(f"{_describe(layer)} has two weights of one name: {names}")
        _write_attr_list(g, "weight_names", names)
        for name, pos in zip(names, positions):
            _write_dataset(g, name, weights[pos])
    top = group.create_group("top_level_model_weights")
    _write_attr_list(top, "weight_names", [])
