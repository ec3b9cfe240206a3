"""Model configs: reading what Keras and tf.keras wrote, and writing Keras's form.

A model is rebuilt by the ``from_config`` of its class (``Sequential``, the functional ``Model``,
or the user's), which the registry gives.  The config is first normalized here: what tf.keras
2.x wrote (list-form inbound nodes, ``batch_input_shape``) becomes Keras 3's form, Keras's
object-sharing ids are dropped, every class name is checked (an unknown one is an error naming
the file and the classes mixedcore has), and ``dtype_policy=`` replaces the layers' policies.

``dtype_policy=`` replaces the model's policy, not every policy in the file.  The model's policy
(the "reference") is the policy most layers of the file carry (Input layers left out, nested
models' layers counted); a tie goes to the ``dtype`` of a top Sequential config (the global
policy when Keras built it) when that is among the tied, else to the policy met first.  Layers
stored with the reference policy, or with none, take the new policy; a layer stored with another
policy was set that way explicitly (a float32 softmax at the end of a mixed model) and keeps it,
as do integer and bool policies.  Input layers keep their dtype.

A config from a file is untrusted.  Its JSON is parsed within bounds (:func:`_loads`): a text
holding far more lists and objects than its entries (its ``"class_name"`` keys) can need is
refused before it is parsed, JSON nested deeper than ``_MAX_DEPTH`` levels after (Python's own
parser stops near 1000, which is a ValueError too), so the walks over the config that follow
its nesting (nested models, each a call within a call) stay far from the interpreter's limit.
Walks over the layers of one model (the graph's order, weights, serialization) keep their own
stacks and take any number of layers.  When the weights will come from the file, the model is
rebuilt with placeholder weights (``layers._base.weights_from_file``, entered by the loader): no initializer runs and
nothing is allocated until the loader has compared the file's shapes with the model's.  A
tensor whose one sample is larger than the machine's memory is refused after the build (an
absurd Input dimension), as ``add_weight`` refuses such a weight.
"""
import difflib
import inspect
import json

import numpy as np

from mixedcore import dtype_policies as _policies
from mixedcore.dtype_policies import DTypePolicy
from mixedcore._dtypes import np_dtype
from mixedcore.layers import _ops
from mixedcore.layers._base import memory_bytes, realize_placeholders
from mixedcore.saving import object_registration as _registry
from mixedcore.saving.file_utils import _SAFE_MODE, _fail
from mixedcore.saving.weight_structure import _is_model

_MODEL_CLASSES = ("Sequential", "Functional", "Model")
# Bounds of a config's JSON (see the module's docstring).  A model's config holds a few lists and objects per entry
# (measured: 3 to 8 per "class_name" in Keras's, tf.keras's and mixedcore's files); one with far
# more is refused before it is parsed, since parsing "[]," costs some 20 times its text.
_CONTAINERS_PER_ENTRY = 32
_CONTAINERS_FLOOR = 4096
# A model nested in another adds 3 levels; 256 levels leave room for models nested about 80
# deep, more than can run (each level of nesting is a call within a call).
_MAX_DEPTH = 256
def _loads(owner, source, text, what=None):
    """The value of the JSON ``text`` (str or bytes) of a config, parsed within bounds:
    refused before parsing when it holds far more lists and objects than its entries can need,
    and after parsing when nested deeper than ``_MAX_DEPTH``.  ``what`` names the text in the
    messages, which name ``source`` (the file) unless it is None."""
    def problem(text):
        return _fail(owner, source, text) if source is not None else ValueError(f"{owner}: {text}")
    subject = what or "the JSON"
    brackets = (b"[", b"{", b'"class_name"') if isinstance(text, (bytes, bytearray)) else \
        ("[", "{", '"class_name"')
    containers = text.count(brackets[0]) + text.count(brackets[1])
    entries = text.count(brackets[2])
    allowed = _CONTAINERS_FLOOR + _CONTAINERS_PER_ENTRY * entries
    if containers > allowed:
        raise problem(f"{subject} holds {containers} JSON lists and objects for {entries} "
                      f"entries (class names), more than the {allowed} a model's config can "
                      f"need; it is refused before it is parsed")
    try:
        value = json.loads(text)
    except RecursionError:
        raise problem(f"{subject} is nested deeper than Python's JSON parser goes; a model's "
                      f"config needs at most {_MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise problem(f"{what} is not valid JSON ({exc})" if what else
                      f"not valid JSON ({exc})") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise problem(f"{subject} is nested more than {_MAX_DEPTH} levels deep, more than a "
                          f"model's config can need (models nested about 80 deep)")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return value


def _layer_classes():
    return _registry.builtin_objects("layer")


def _model_classes():
    """(Sequential, the functional Model): the models register them as the layer classes
    "Sequential" and "Functional"."""
    classes = _registry.builtin_objects("layer")
    return classes["Sequential"], classes["Functional"]


def _strip_sharing(obj):
    """Drop Keras's ``shared_object_id`` keys (every occurrence keeps the full config)."""
    if isinstance(obj, dict):
        return {k: _strip_sharing(v) for k, v in obj.items() if k != "shared_object_id"}
    if isinstance(obj, list):
        return [_strip_sharing(v) for v in obj]
    return obj


def _legacy_tensor_ref(value, layer_names):
    return (isinstance(value, list) and len(value) == 3 and isinstance(value[0], str) and
            value[0] in layer_names and all(isinstance(v, int) for v in value[1:]))


def _tensor_dict(ref):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": None, "dtype": None, "keras_history": list(ref[:3])}}


def _convert_legacy_node(node, layer_names):
    """One tf.keras 2.x inbound node ``[[name, node, tensor, kwargs], ...]`` in Keras 3's form
    ``{"args": [...], "kwargs": {...}}``: one input is the first argument, several are a list."""
    tensors = [_tensor_dict(entry) for entry in node]
    kwargs = {}
    if node and len(node[-1]) >= 4 and isinstance(node[-1][3], dict):
        kwargs = node[-1][3]

    def convert(v):
        if _legacy_tensor_ref(v, layer_names):
            return _tensor_dict(v)
        if isinstance(v, dict):
            return {k: convert(x) for k, x in v.items()}
        if isinstance(v, list):
            return [convert(x) for x in v]
        return v
    first = tensors[0] if len(tensors) == 1 else tensors
    return {"args": [first] if tensors else [], "kwargs": convert(kwargs)}


class _Normalizer:
    """Normalizes one model config (B) and collects the class names it uses."""

    def __init__(self, owner, source, custom, policy):
        self.owner, self.source, self.custom, self.policy = owner, source, custom, policy
        self.classes = _layer_classes()
        self.unknown = []
        self.reference = None           # the model's policy name, what dtype_policy= replaces (G)

    def known(self, entry):
        return _registry.lookup("layer", entry, self.custom) is not None or \
            entry.get("class_name") in _MODEL_CLASSES

    def model(self, class_name, config):
        if class_name == "Sequential":
            return self.sequential(config)
        return self.functional(config)

    def sequential(self, config):
        if isinstance(config, list):                    # Keras 2.0-2.2: a bare layer list
            config = {"layers": config}
        if not isinstance(config, dict) or not isinstance(config.get("layers"), list):
            raise _fail(self.owner, self.source, "the Sequential config has no 'layers' list")
        config = dict(config)
        config["layers"] = [self.layer(entry) for entry in config["layers"]]
        if self.policy is not None and "dtype" in config and self.replaces(config["dtype"]):
            config["dtype"] = self.policy_config()
        return config

    def functional(self, config):
        if not isinstance(config, dict) or not isinstance(config.get("layers"), list):
            raise _fail(self.owner, self.source, "the model config has no 'layers' list")
        config = dict(config)
        names = {e.get("name") or e.get("config", {}).get("name") for e in config["layers"]
                 if isinstance(e, dict)}
        layers = []
        for entry in config["layers"]:
            entry = self.operation(entry) if _is_operation(entry) else self.layer(entry)
            nodes = entry.get("inbound_nodes")
            if isinstance(nodes, list):
                entry["inbound_nodes"] = [
                    _convert_legacy_node(node, names) if isinstance(node, list) else node
                    for node in nodes]
            layers.append(entry)
        config["layers"] = layers
        return config

    def operation(self, entry):
        """A Keras operation node (``x + y`` in a functional model, module keras.src.ops.*) as
        the registry's ``ops>Name`` entry; one mixedcore does not have is unknown."""
        name = entry.get("class_name")
        key = _ops.operation_class(name) if isinstance(name, str) else None
        if key not in self.classes:
            label = entry.get("name") or (entry.get("config") or {}).get("name")
            self.unknown.append((f"the Keras operation {name}", label, name))
            return entry
        return dict(entry, class_name=key, registered_name=key)

    def layer(self, entry):
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise _fail(self.owner, self.source, f"a layer entry is not a dict with "
                                                 f"'class_name': {str(entry)[:200]}")
        entry = dict(entry)
        name = entry["class_name"]
        inner = entry.get("config")
        if not self.known(entry):
            label = inner.get("name") if isinstance(inner, dict) else None
            self.unknown.append((str(name), label, name))
            return entry
        if name in _MODEL_CLASSES:
            entry["config"] = self.model(name, inner)
            return entry
        if name == "Lambda" and _SAFE_MODE.get():
            label = inner.get("name") if isinstance(inner, dict) else None
            raise _fail(self.owner, self.source,
                        f"layer '{label}' is a Lambda, whose function is code; it is refused "
                        f"unless you trust the file and pass safe_mode=False (then a named "
                        f"function is taken from custom_objects or the registered objects; "
                        f"Python bytecode is never run)")
        if not isinstance(inner, dict):
            raise _fail(self.owner, self.source, f"layer class {name} has no config dict")
        inner = dict(inner)
        found = _registry.lookup("layer", entry, self.custom)
        if found is not None and found.builtin:
            inner = _tf_keras_layer_config(self.owner, self.source, found.key, inner)
        if name != "InputLayer":
            self.check_policy(inner)
            if self.policy is not None and self.replaces(inner.get("dtype")):
                inner["dtype"] = self.policy_config(inner.get("dtype"))
        entry["config"] = inner
        return entry

    def check_policy(self, inner):
        dtype = inner.get("dtype")
        if isinstance(dtype, dict):
            cls = dtype.get("class_name")
            if _registry.lookup("dtype_policy", dtype, self.custom) is None:
                known = list(_registry.builtin_objects("dtype_policy"))
                raise _fail(self.owner, self.source,
                            f"layer '{inner.get('name')}' has a dtype policy of class {cls} "
                            f"({dtype.get('config')}); mixedcore knows {known}")

    def replaces(self, dtype):
        """Whether ``dtype_policy=`` replaces a stored policy (G)."""
        if not self.overridable(dtype):
            return False
        name = _policy_name(dtype)
        return name is None or self.reference is None or name == self.reference

    @staticmethod
    def overridable(dtype):
        """Whether a layer's stored policy is replaced by ``dtype_policy=``: floating (or unset)
        policies are; integer and bool ones, which a layer needs for what it computes, are not."""
        try:
            policy = _policies.get(dtype) if dtype is not None else None
        except (TypeError, ValueError):
            return True
        if policy is None or policy.compute_dtype is None:
            return True
        return policy.compute_dtype in ("float16", "bfloat16", "float32", "float64")

    def policy_config(self, stored=None):
        """The policy ``dtype_policy=`` puts in place of ``stored``: a quantized policy keeps its
        mode and quantizes the new policy ("int8_from_float32" -> "int8_from_mixed_bfloat16")."""
        if isinstance(stored, dict) and isinstance(stored.get("config"), dict) \
                and "source_name" in stored["config"]:
            return dict(stored, config=dict(stored["config"], source_name=self.policy.name))
        if isinstance(stored, dict) and stored.get("class_name") == "DTypePolicyMap" and \
                isinstance(stored.get("config"), dict) and \
                isinstance(stored["config"].get("policy_map", {}), dict):
            # a map (a layer's quantized sub-layers): each entry and the default replaced so
            inner = stored["config"]
            return dict(stored, config=dict(inner, default_policy=self.policy_config(
                inner.get("default_policy")), policy_map={
                    k: self.policy_config(v) for k, v in inner.get("policy_map", {}).items()}))
        return {"module": "keras", "class_name": "DTypePolicy",
                "config": {"name": self.policy.name}, "registered_name": None}


def _unknown_message(unknown, classes):
    """The error for classes the registry does not have: each class with (up to three of) the
    names of its layers in the model and the nearest supported class names, then all of them."""
    layers = sorted({k for k in classes if ">" not in k} | set(_MODEL_CLASSES))
    operations = sorted(k.split(">", 1)[1] for k in classes if k.startswith("ops>"))
    grouped = {}
    for what, label, name in unknown:
        grouped.setdefault(what, (name, []))[1].append(label)
    parts = []
    for what, (name, labels) in grouped.items():
        named = [f"'{label}'" for label in labels if label]
        where = ""
        if named:
            more = f" and {len(named) - 3} more" if len(named) > 3 else ""
            where = f"{'node' if what.startswith('the Keras') else 'layer'}" \
                    f"{'s' if len(named) > 1 else ''} {', '.join(named[:3])}{more}"
        pool = operations if what.startswith("the Keras") else layers
        near = difflib.get_close_matches(str(name), pool, n=3, cutoff=0.5) if \
            isinstance(name, str) else []
        if not near and isinstance(name, str):
            near = [c for c in pool if c.lower() in name.lower() or name.lower() in c.lower()][:3]
        hint = f"nearest supported: {', '.join(near)}" if near else ""
        detail = "; ".join(x for x in (where, hint) if x)
        parts.append(f"{what}" + (f" ({detail})" if detail else ""))
    return (f"unknown layer class(es) {', '.join(parts)}; mixedcore supports the layers "
            f"{layers} and the Keras operations {operations}; pass custom_objects="
            f"{{'ClassName': YourLayer}} to load your own layers")


def _is_operation(entry):
    """Whether a functional config's entry is a Keras operation rather than a layer: its
    module is keras.src.ops.*, or (legacy .h5 configs keep no module) its config lacks the
    ``trainable`` and ``dtype`` every layer's config has."""
    if not isinstance(entry, dict):
        return False
    module = entry.get("module")
    if isinstance(module, str):
        return module.startswith("keras.src.ops.") or module.startswith("keras.ops")
    config = entry.get("config")
    return isinstance(config, dict) and "trainable" not in config and "dtype" not in config \
        and isinstance(entry.get("class_name"), str) and \
        _ops.operation_class(entry["class_name"]) in _layer_classes()


def _policy_name(dtype):
    """The name of a stored policy (a name, a serialized policy dict of any known class), or
    None when unset or unreadable."""
    if dtype is None:
        return None
    if isinstance(dtype, dict):
        inner = dtype.get("config")
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            return inner["name"]
        if isinstance(inner, dict) and isinstance(inner.get("source_name"), str):
            return inner["source_name"]       # a quantized policy: the policy it quantizes
        return None
    if isinstance(dtype, str):
        try:
            return _policies.get(dtype).name
        except (TypeError, ValueError):
            return dtype
    return None


def _reference_policy(model_dict):
    """The name of the model's policy in a serialized model (G), or None."""
    config = model_dict.get("config")
    own = None
    if model_dict.get("class_name") == "Sequential" and isinstance(config, dict):
        own = _policy_name(config.get("dtype"))
    counts = {}

    def visit(entries):
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            inner = entry.get("config")
            if isinstance(inner, list):                 # Keras 2.0-2.2 Sequential
                visit(inner)
                continue
            if not isinstance(inner, dict):
                continue
            if entry.get("class_name") in _MODEL_CLASSES:
                visit(inner.get("layers"))
                continue
            if entry.get("class_name") == "InputLayer":
                continue
            name = _policy_name(inner.get("dtype"))
            if name is not None:
                counts[name] = counts.get(name, 0) + 1   # dicts keep the first-met order
    layers = config.get("layers") if isinstance(config, dict) else config
    visit(layers)
    if not counts:
        return own
    best = max(counts.values())
    tied = [name for name, n in counts.items() if n == best]
    return own if own in tied else tied[0]


def _model_class(owner, source, model_dict, custom):
    class_name = model_dict["class_name"]
    found = _registry.lookup("layer", model_dict, custom, builtins=False)
    if found is not None:
        return found.obj
    sequential, functional = _model_classes()
    if class_name == "Sequential":
        return sequential
    if class_name in ("Functional", "Model"):
        return functional
    raise _fail(owner, source, f"the file holds a {class_name!r}, not a Sequential or "
                               f"functional model; pass custom_objects={{{class_name!r}: "
                               f"YourModelClass}} for your own model class")


# Readers of model configs that are not graphs of layers (keras_hub's models keep their
# hyperparameters), registered by the packages that define such models (mixedcore.hub):
# reader(owner, source, model_dict, custom, policy) returns the model, or None for a config
# it does not read.
_MODEL_READERS: list = []


def register_model_reader(reader):
    """Add ``reader`` to the readers :func:`_model_from_dict` asks first."""
    if reader not in _MODEL_READERS:
        _MODEL_READERS.append(reader)
    return reader


def _model_from_dict(owner, source, model_dict, custom, policy):
    """A model from a serialized model dict ({"class_name", "config", ...}), normalized (B).
    Within ``layers._base.weights_from_file`` (a load whose weights the file gives) the
    library's layers get placeholder weights, which the loader checks against the file's shapes
    before any memory is given to them."""
    if not isinstance(model_dict, dict) or "class_name" not in model_dict or \
            "config" not in model_dict:
        raise _fail(owner, source, "the model config is not a dict with 'class_name' and "
                                   "'config'")
    model = _rebuild(owner, source, model_dict, custom, policy)
    _check_activations(owner, source, model)
    return model


def _rebuild(owner, source, model_dict, custom, policy):
    for reader in _MODEL_READERS:
        model = reader(owner, source, model_dict, custom, policy)
        if model is not None:
            return model
    model_dict = _strip_sharing(model_dict)
    class_name = model_dict["class_name"]
    cls = _model_class(owner, source, model_dict, custom)
    normalizer = _Normalizer(owner, source, custom, policy)
    if policy is not None:
        normalizer.reference = _reference_policy(model_dict)
    kind = "Sequential" if class_name == "Sequential" or (
        isinstance(cls, type) and issubclass(cls, _model_classes()[0])) else "Functional"
    config = normalizer.model(kind, model_dict["config"])
    if normalizer.unknown:
        raise _fail(owner, source, _unknown_message(normalizer.unknown, normalizer.classes))
    try:
        from_config = cls.from_config
        with _registry.custom_object_scope(custom):
            if "custom_objects" in inspect.signature(from_config).parameters:
                model = from_config(config, custom_objects=custom or None)
            else:
                model = from_config(config)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        raise _fail(owner, source, f"cannot rebuild the model from its config: "
                                   f"{type(exc).__name__}: {exc}") from exc
    build = model_dict.get("build_config")
    if not getattr(model, "built", True) and isinstance(build, dict) and \
            build.get("input_shape") is not None and hasattr(model, "build"):
        try:
            model.build(build["input_shape"])
        except (TypeError, ValueError) as exc:
            raise _fail(owner, source, f"cannot build the model for input shape "
                                       f"{build['input_shape']}: {exc}") from exc
    if policy is not None:
        _set_model_policies(model, policy)
    return model


def _nested(model):
    """``model`` and every model inside it, each once (a walk with its own stack)."""
    seen, stack, out = set(), [model], []
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append(m)
        stack.extend(layer for layer in getattr(m, "layers", ()) if _is_model(layer))
    return out


def _check_activations(owner, source, model):
    """Refuse a model one of whose tensors, for one sample, is larger than the machine's
    memory (an absurd Input dimension): it could never run."""
    limit = memory_bytes()
    for m in _nested(model):
        graph = getattr(m, "_graph", None)
        if graph is None:
            continue
        tensors = list(graph.inputs) + [t for node in graph.nodes for t in node.output_tensors]
        for t in tensors:
            elements = 1
            for d in t.shape[1:]:
                elements *= d if d is not None else 1
            try:
                itemsize = np_dtype(t.dtype).itemsize
            except (TypeError, ValueError):
                itemsize = 1
            if elements * itemsize > limit:
                layer = t.keras_history[0].name if t.keras_history else "?"
                raise _fail(owner, source, f"one sample of the output of layer '{layer}' has "
                                           f"shape {t.shape[1:]}, {elements * itemsize} bytes, "
                                           f"more than this machine's memory ({limit} bytes)")


def _initialize_pending(model):
    """Initialize the weights a load left as placeholders: those the file did not give."""
    holders = []
    for m in _nested(model):
        holders.append(m)
        holders.extend(layer for layer in m.layers if not _is_model(layer))
    realize_placeholders(holders, initialize=True)


def clone_with_policy(owner, model, policy):
    """A copy of a built ``model`` whose policy ``policy`` replaces its own as
    ``load_model(dtype_policy=)`` does (G), with the same weights."""
    policy = _as_policy(owner, policy)
    model_dict = _model_dict(owner, model)
    model_dict.pop("compile_config", None)
    custom = {}

    def collect(m):
        custom.setdefault(type(m).__name__, type(m))
        for layer in m.layers:
            if _is_model(layer):
                collect(layer)
            else:
                custom.setdefault(type(layer).__name__, type(layer))

    collect(model)
    builtin = set(_layer_classes()) | set(_MODEL_CLASSES)
    custom = {k: v for k, v in custom.items() if k not in builtin}
    clone = _model_from_dict(owner, f"model '{model.name}'", model_dict, custom, policy)
    clone.set_weights(model.get_weights())
    return clone


def _set_model_policies(model, policy):
    """Functional configs carry no policy of the model itself: under ``dtype_policy=`` the
    model and its nested functional models take it (compile reads it for loss scaling)."""
    sequential, functional = _model_classes()
    if not isinstance(model, sequential):
        model._dtype_policy = policy
    for layer in model.layers:
        if isinstance(layer, functional):
            _set_model_policies(layer, policy)


def _as_policy(owner, dtype_policy):
    if dtype_policy is None:
        return None
    policy = _policies.get(dtype_policy)
    if policy.compute_dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise ValueError(f"{owner}: dtype_policy must be a floating-point policy such as "
                         f"'float32', 'mixed_float16' or 'mixed_bfloat16', got {policy.name!r}")
    return policy


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, DTypePolicy):
        return _policies.serialize(value)
    raise TypeError(f"a value of type {type(value).__name__} ({value!r}) cannot be written "
                    f"to JSON")


def _dumps(owner, obj, **kwargs):
    try:
        return json.dumps(obj, default=_json_default, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{owner}: the model's config cannot be written: {exc}") from None


def _model_dict(owner, model, legacy=False):
    """The serialized model (Keras's top-level config.json form)."""
    if not getattr(model, "built", True):
        raise ValueError(f"{owner}: the model is not built yet; start it with "
                         f"Input(shape=...) or call build() first")
    try:
        config = model.get_config()
    except (NotImplementedError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{owner}: the model's config cannot be made: "
                         f"{type(exc).__name__}: {exc}") from exc
    cls = type(model)
    if "_keras_class" in cls.__dict__:
        class_name = cls.__dict__["_keras_class"]
        module = getattr(cls, "_keras_module", "keras")
        registered = "Functional" if class_name == "Functional" else None
    else:
        class_name, module = cls.__name__, cls.__module__
        registered = _registry.get_registered_name(cls)
    if legacy:
        return {"class_name": class_name, "config": config}
    build_shape = model._config_build_shape() if hasattr(model, "_config_build_shape") else None
    out = {"module": module, "class_name": class_name, "config": config,
           "registered_name": registered, "build_config": {"input_shape": build_shape}}
    get_compile_config = getattr(model, "get_compile_config", None)
    compile_config = get_compile_config() if get_compile_config is not None else None
    if compile_config is not None:
        out["compile_config"] = compile_config
    return out


# Keys tf.keras 2.x writes in the configs of layers whose computation does not read them (its
# depthwise and separable convolutions inherit them from its convolution base class), which
# mixedcore's layers do not take: dropped whatever their value.
_TF_KERAS_INERT_KEYS = {
    "DepthwiseConv2D": ("groups",),
    "SeparableConv2D": ("groups", "kernel_initializer", "kernel_regularizer",
                        "kernel_constraint"),
}
# tf.keras's choice of masked softmax ("robust" or not), a bool: the two agree wherever a
# slice has a position left unmasked, and a slice masked entirely comes out all zeros in
# mixedcore (Keras 3's rule) under either.
_TF_KERAS_SOFTMAX_FLAGS = {"Softmax": "robust_masking"}


def _tf_keras_layer_config(owner, source, class_name, inner):
    """The config of one of mixedcore's layers with tf.keras 2.x's own keys read: the keys its
    layers write without using them are dropped, Softmax's ``robust_masking`` is checked to be
    a bool and dropped.  Other spellings are read by the layers themselves."""
    for key in _TF_KERAS_INERT_KEYS.get(class_name, ()):
        inner.pop(key, None)
    flag = _TF_KERAS_SOFTMAX_FLAGS.get(class_name)
    if flag is not None and flag in inner:
        value = inner.pop(flag)
        if not isinstance(value, (bool, np.bool_)):
            raise _fail(owner, source, f"layer '{inner.get('name')}' ({class_name}) has "
                                       f"{flag}={value!r}; expected a bool")
    return inner


def _written_by_keras2(version):
    """Whether a ``keras_version`` (a file's attribute, metadata or JSON key) is Keras 2.x's
    (tf.keras 2.x, tf-keras, standalone Keras 2)."""
    if isinstance(version, bytes):
        version = version.decode("utf-8", "replace")
    return isinstance(version, str) and version.split(".")[0] == "2"


def _keras2_checked(owner, source, model_dict):
    """:func:`_keras2_model_dict` of a file Keras 2.x wrote, after refusing what Keras 2.x
    means otherwise than Keras 3: its ``hard_sigmoid`` is ``clip(0.2 * x + 0.5, 0, 1)``, Keras
    3's (and mixedcore's) ``clip(x / 6 + 0.5, 0, 1)``, under the same name."""
    def visit(obj, layer):
        if isinstance(obj, dict):
            inner = obj.get("config")
            if isinstance(inner, dict) and isinstance(inner.get("name"), str) and \
                    "class_name" in obj:
                layer = inner["name"]
            for key, value in obj.items():
                if key == "activation" and _activation_name(value) == "hard_sigmoid":
                    raise _fail(owner, source,
                                f"layer '{layer}' uses activation 'hard_sigmoid', which in a "
                                f"Keras 2.x file is clip(0.2 * x + 0.5, 0, 1), not Keras 3's "
                                f"clip(x / 6 + 0.5, 0, 1) that mixedcore computes")
                visit(value, layer)
        elif isinstance(obj, list):
            for value in obj:
                visit(value, layer)
    visit(model_dict, None)
    return _keras2_model_dict(model_dict)


def _activation_name(value):
    if isinstance(value, dict) and value.get("class_name") == "function":
        value = value.get("config")
    return value if isinstance(value, str) else None


def _keras2_model_dict(model_dict):
    """A model dict Keras 2.x wrote, read as Keras 2.x reads it: it writes the outputs of every
    functional model as a list (``[["dense", 0, 0]]`` for one output) and reads a list of one
    as that one output, so the model returns an array, not a list of one array.  Keras 3 keeps
    the structure it was given, so only files of Keras 2.x are read this way.  Nested models
    alike; the dict is not changed (a changed copy is returned)."""
    if not isinstance(model_dict, dict):
        return model_dict
    out = dict(model_dict)
    config = out.get("config")
    if isinstance(config, dict):
        config = dict(config)
        outputs = config.get("output_layers")
        if isinstance(outputs, list) and len(outputs) == 1 and isinstance(outputs[0], list) \
                and len(outputs[0]) == 3 and isinstance(outputs[0][0], str):
            config["output_layers"] = list(outputs[0])
        if isinstance(config.get("layers"), list):
            config["layers"] = [_keras2_model_dict(e) if isinstance(e, dict) and
                                e.get("class_name") in _MODEL_CLASSES else e
                                for e in config["layers"]]
        out["config"] = config
    elif isinstance(config, list):                      # Keras 2.0-2.2 Sequential
        out["config"] = [_keras2_model_dict(e) if isinstance(e, dict) and
                         e.get("class_name") in _MODEL_CLASSES else e for e in config]
    return out
