"""The deprecated experimental Policy (docs/policies.md, 'The experimental Policy'): names,
warnings, loss scale, config, infer hook."""
import re
import warnings

import ml_dtypes
import numpy as np
import pytest

import mixedcore as mc
from mixedcore import experimental, policies
from mixedcore import policy as policy_mod
from mixedcore.loss_scale import DynamicLossScale, FixedLossScale, LossScale
from mixedcore.optimizers import LossScaleOptimizer
from mixedcore.policy import DTypePolicy


@pytest.fixture(autouse=True)
def _reset_global_policy():
    mc.set_policy(None)
    yield
    mc.set_policy(None)


def make(*args, **kwargs):
    """experimental.Policy(...) with its warnings silenced (tests of other behaviour)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return experimental.Policy(*args, **kwargs)


def record(fn, *args, **kwargs):
    """(result, [warnings]) of fn(*args, **kwargs), every warning recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    return result, caught


def deprecations(caught):
    return [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


# --------------------------------------------------------------------------- construction

def test_construction_warns_deprecation_pointing_to_dtype_policy():
    p, caught = record(experimental.Policy, "mixed_float16")
    messages = deprecations(caught)
    assert len(messages) == 1
    assert "deprecated" in messages[0] and "mixedcore.DTypePolicy" in messages[0]
    # stacklevel: the warning is attributed to the caller's line, not to mixedcore.
    assert caught[0].filename == __file__
    assert isinstance(p, DTypePolicy) and type(p) is experimental.Policy


def test_pytest_warns_form():
    with pytest.warns(DeprecationWarning, match="DTypePolicy"):
        experimental.Policy("float32")


@pytest.mark.parametrize("name", policy_mod.policy_names())
def test_accepts_every_dtype_policy_name(name):
    p, caught = record(experimental.Policy, name, loss_scale=None)
    q = DTypePolicy(name)
    assert (p.name, p.compute_dtype, p.variable_dtype) == (q.name, q.compute_dtype,
                                                           q.variable_dtype)
    assert len(deprecations(caught)) == 1
    assert not [w for w in caught if w.category is UserWarning]


@pytest.mark.parametrize("name,compute,variable", [
    ("infer", None, None),
    ("infer_with_float32_vars", None, "float32"),
    ("float16_with_float32_vars", "float16", "float32"),
    ("bfloat16_with_float32_vars", "bfloat16", "float32"),
    ("float32_with_float32_vars", "float32", "float32"),
    ("float64_with_float32_vars", "float64", "float32"),
])
def test_deprecated_names(name, compute, variable):
    p, caught = record(experimental.Policy, name)
    assert (p.name, p.compute_dtype, p.variable_dtype) == (name, compute, variable)
    assert p.should_cast_variables == (compute != variable)
    messages = deprecations(caught)
    assert len(messages) == 2                      # the class, then the name
    assert repr(name) in messages[1] and "deprecated" in messages[1]
    assert all(w.filename == __file__ for w in caught)


def test_float32_vars_warning_names_the_replacement():
    _, caught = record(experimental.Policy, "float16_with_float32_vars")
    assert "'mixed_float16'" in deprecations(caught)[1]
    _, caught = record(experimental.Policy, "bfloat16_with_float32_vars")
    assert "'mixed_bfloat16'" in deprecations(caught)[1]


@pytest.mark.parametrize("name", ["Float32", " float32", "", "mixed_int8", "f4", "Infer",
                                  "infer_float32_vars", "mixed_float16_with_float32_vars",
                                  "f4_with_float32_vars", "_with_float32_vars",
                                  "infer_with_float32_vars_with_float32_vars", "object"])
def test_invalid_names(name):
    with pytest.raises(ValueError) as info:
        make(name)
    message = str(info.value)
    assert repr(name) in message
    for form in ("'mixed_float16'", "'mixed_bfloat16'", "'float32'", "'infer'",
                 "_with_float32_vars"):
        assert form in message


@pytest.mark.parametrize("value", [None, 3, b"infer", np.dtype("float16")])
def test_non_str_name(value):
    with pytest.raises(TypeError, match=re.escape(type(value).__name__)):
        make(value)


# --------------------------------------------------------------------------- loss scale

@pytest.mark.parametrize("name", ["mixed_float16", "float16_with_float32_vars"])
def test_auto_loss_scale_is_dynamic_for_float16_mixed(name):
    p = make(name)
    assert isinstance(p.loss_scale, DynamicLossScale)
    assert p.loss_scale.get_config() == DynamicLossScale().get_config()


@pytest.mark.parametrize("name", ["float16", "mixed_bfloat16", "float32",
                                  "bfloat16_with_float32_vars",
                                  "infer", "infer_with_float32_vars"])
def test_auto_loss_scale_is_none_otherwise(name):
    assert make(name).loss_scale is None


def test_loss_scale_identifiers():
    assert isinstance(make("mixed_float16", loss_scale="dynamic").loss_scale, DynamicLossScale)
    for value in (128, 2.5, np.float32(4.0), np.int64(8)):
        ls = make("mixed_float16", loss_scale=value).loss_scale
        assert isinstance(ls, FixedLossScale)
        assert float(ls()) == float(value)
    given = FixedLossScale(64)
    assert make("mixed_float16", loss_scale=given).loss_scale is given
    given = DynamicLossScale(initial_loss_scale=256, increment_period=10, multiplier=4.0)
    assert make("float16", loss_scale=given).loss_scale is given
    assert make("mixed_float16", loss_scale=None).loss_scale is None
    assert isinstance(given, LossScale)


@pytest.mark.parametrize("value", ["static", "Dynamic", "auto ", "", True, False, [128],
                                   object(), np.ones(2), {"name": "x"}])
def test_loss_scale_not_interpretable(value):
    with pytest.raises(ValueError, match="^Could not interpret loss scale identifier"):
        make("mixed_float16", loss_scale=value)


def test_fixed_loss_scale_below_one_refused():
    with pytest.raises(ValueError):
        make("mixed_float16", loss_scale=0.5)


@pytest.mark.parametrize("name,loss_scale", [("float32", 128), ("mixed_bfloat16", "dynamic"),
                                             ("float32_with_float32_vars", 8.0),
                                             ("infer", "dynamic")])
def test_loss_scale_on_non_float16_policy_warns(name, loss_scale):
    _, caught = record(experimental.Policy, name, loss_scale=loss_scale)
    user = [w for w in caught if w.category is UserWarning]
    assert len(user) == 1
    assert "only useful for float16" in str(user[0].message)
    assert repr(name) in str(user[0].message)


@pytest.mark.parametrize("name,loss_scale", [("mixed_float16", 128), ("float16", "dynamic"),
                                             ("mixed_bfloat16", "auto"), ("float32", None)])
def test_no_loss_scale_warning_where_useful_or_absent(name, loss_scale):
    _, caught = record(experimental.Policy, name, loss_scale=loss_scale)
    assert not [w for w in caught if w.category is UserWarning]


# --------------------------------------------------------------------------- identity

def test_repr():
    p = make("mixed_float16")
    assert repr(p) == f'<Policy "mixed_float16", loss_scale={p.loss_scale!r}>'
    assert repr(p).startswith('<Policy "mixed_float16", loss_scale=DynamicLossScale(')
    assert repr(make("float32")) == '<Policy "float32", loss_scale=None>'
    assert repr(make("infer")) == '<Policy "infer", loss_scale=None>'


def test_equality_includes_the_loss_scale():
    a, b = make("mixed_float16"), make("mixed_float16")
    assert a.loss_scale is not b.loss_scale
    assert a == b and hash(a) == hash(b)
    assert a == make("mixed_float16", loss_scale="dynamic")
    assert a != make("mixed_float16", loss_scale=None)
    assert a != make("mixed_float16", loss_scale=128)
    assert a != make("mixed_float16", loss_scale=DynamicLossScale(initial_loss_scale=8))
    assert make("mixed_float16", loss_scale=128) == make("mixed_float16", loss_scale=128)
    assert make("mixed_float16", loss_scale=128) != make("mixed_float16", loss_scale=256)
    assert make("float32") == make("float32") and make("float32") != make("float64")
    assert len({a, b, make("mixed_float16", loss_scale=None)}) == 2


def test_never_equal_to_a_plain_dtype_policy():
    for name in ("float32", "mixed_bfloat16", "mixed_float16"):
        assert make(name, loss_scale=None) != DTypePolicy(name)
        assert DTypePolicy(name) != make(name, loss_scale=None)


def test_loss_scale_is_read_only():
    p = make("mixed_float16")
    with pytest.raises(AttributeError):
        p.loss_scale = None


# --------------------------------------------------------------------------- config

def test_get_config_omits_the_default_loss_scale():
    assert make("mixed_float16").get_config() == {"name": "mixed_float16"}
    assert make("float32").get_config() == {"name": "float32"}
    assert make("infer").get_config() == {"name": "infer"}


def test_get_config_includes_an_explicit_loss_scale():
    config = make("mixed_float16", loss_scale="dynamic").get_config()
    assert config == {"name": "mixed_float16",
                      "loss_scale": {"class_name": "DynamicLossScale",
                                     "config": DynamicLossScale().get_config()}}
    config = make("mixed_float16", loss_scale=128).get_config()
    assert config == {"name": "mixed_float16",
                      "loss_scale": {"class_name": "FixedLossScale",
                                     "config": FixedLossScale(128).get_config()}}
    assert make("mixed_float16", loss_scale=None).get_config() == {"name": "mixed_float16",
                                                                  "loss_scale": None}


@pytest.mark.parametrize("name,loss_scale", [
    ("mixed_float16", "auto"), ("mixed_float16", "dynamic"), ("mixed_float16", None),
    ("mixed_float16", 512), ("float16", DynamicLossScale(initial_loss_scale=64,
                                                         increment_period=7, multiplier=3.0)),
    ("infer_with_float32_vars", "auto"), ("bfloat16_with_float32_vars", None),
])
def test_config_round_trip(name, loss_scale):
    p = make(name, loss_scale=loss_scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = experimental.Policy.from_config(p.get_config())
    assert q == p
    assert q.get_config() == p.get_config()


def test_from_config_of_a_tf_keras_2_4_config_with_a_loss_scale():
    legacy = {"name": "mixed_float16",
              "loss_scale": {"class_name": "FixedLossScale", "config": {"loss_scale_value": 128.0}}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = experimental.Policy.from_config(legacy)
    assert isinstance(p.loss_scale, FixedLossScale) and float(p.loss_scale()) == 128.0
    # the same config loads as a plain policy through DTypePolicy / policies (tf.keras 2.4)
    assert DTypePolicy.from_config(legacy) == DTypePolicy("mixed_float16")
    plain = policies.deserialize({"class_name": "Policy", "config": legacy})
    assert type(plain) is DTypePolicy and plain.name == "mixed_float16"


def test_from_config_errors():
    with pytest.raises(ValueError, match="unknown loss scale class 'StaticLossScale'"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            experimental.Policy.from_config(
                {"name": "mixed_float16", "loss_scale": {"class_name": "StaticLossScale",
                                                         "config": {}}})
    with pytest.raises(ValueError, match="no 'name'"):
        experimental.Policy.from_config({"loss_scale": None})
    with pytest.raises(TypeError, match="dict"):
        experimental.Policy.from_config("mixed_float16")


def test_serialize_writes_policy_v1_and_deserialize_drops_the_loss_scale():
    p = make("mixed_float16", loss_scale=256)
    data = policies.serialize(p)
    assert data["class_name"] == "PolicyV1"
    assert data["config"]["loss_scale"]["class_name"] == "FixedLossScale"
    back = policies.deserialize(data)
    assert type(back) is DTypePolicy and back == DTypePolicy("mixed_float16")


# --------------------------------------------------------------------------- infer hook

def test_infer_adopts_the_first_input_dtype():
    p = make("infer")
    for dtype, name in [(np.float16, "float16"), (np.dtype("float64"), "float64"),
                        (ml_dtypes.bfloat16, "bfloat16"), ("float32", "float32"),
                        (np.dtype(ml_dtypes.float8_e4m3fn), "float8_e4m3fn")]:
        q, caught = record(p.infer_from, dtype)
        assert not caught                             # no second round of warnings
        assert type(q) is experimental.Policy
        assert (q.name, q.compute_dtype, q.variable_dtype) == (name, name, name)
        assert q.loss_scale is None
    assert p.compute_dtype is None                    # the infer policy itself is unchanged


def test_infer_with_float32_vars_keeps_float32_variables():
    p = make("infer_with_float32_vars")
    q = p.infer_from(np.float16)
    assert (q.name, q.compute_dtype, q.variable_dtype) == ("float16_with_float32_vars",
                                                           "float16", "float32")
    assert q.should_cast_variables
    # the default loss scale is resolved again for the inferred name
    assert isinstance(q.loss_scale, DynamicLossScale)
    assert q.get_config() == {"name": "float16_with_float32_vars"}
    q = p.infer_from(ml_dtypes.bfloat16)
    assert (q.name, q.variable_dtype, q.loss_scale) == ("bfloat16_with_float32_vars",
                                                        "float32", None)


def test_infer_carries_an_explicit_loss_scale():
    given = FixedLossScale(32)
    p = make("infer_with_float32_vars", loss_scale=given)
    q, caught = record(p.infer_from, np.float16)
    assert q.loss_scale is given and not caught
    no_scale = make("infer_with_float32_vars", loss_scale=None)
    assert no_scale.infer_from(np.float16).loss_scale is None
    q, caught = record(make("infer", loss_scale=given).infer_from, np.float32)
    assert q.loss_scale is given and not caught      # no "only useful for float16" again


@pytest.mark.parametrize("dtype", [np.int32, np.dtype("int8"), np.bool_, np.complex64,
                                   ml_dtypes.int4, "uint8"])
def test_infer_refuses_non_floating_inputs(dtype):
    with pytest.raises(TypeError, match="Policy.infer_from: .*floating"):
        make("infer").infer_from(dtype)


@pytest.mark.parametrize("dtype", [None, "notadtype", 3.5])
def test_infer_refuses_non_dtypes(dtype):
    with pytest.raises(TypeError, match="Policy.infer_from"):
        make("infer").infer_from(dtype)


def test_concrete_experimental_policy_infers_itself():
    p = make("mixed_float16")
    assert p.infer_from(np.float64) is p
    assert p.infer_from(np.int32) is p


def test_a_layer_like_caller_uses_the_hook():
    # How a layer uses it: the policy snapshot taken at construction, resolved on first call.
    class TinyLayer:
        def __init__(self, dtype=None):
            self.dtype_policy = policies.get(dtype)

        def __call__(self, x):
            if self.dtype_policy.compute_dtype is None:
                self.dtype_policy = self.dtype_policy.infer_from(x.dtype)
            return x.astype(self.dtype_policy.compute_dtype)

    layer = TinyLayer(make("infer"))
    out = layer(np.ones(3, np.float16))
    assert out.dtype == np.float16 and layer.dtype_policy.name == "float16"
    assert layer(np.ones(3, np.float64)).dtype == np.float16   # inferred once, then fixed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        experimental.set_policy("infer")
    layer = TinyLayer()
    assert layer(np.ones(2, np.float64)).dtype == np.float64


# --------------------------------------------------------------------------- global policy

def test_experimental_set_policy_and_global_policy():
    _, caught = record(experimental.set_policy, "mixed_float16")
    messages = deprecations(caught)
    assert len(messages) == 1 and "mixedcore.set_global_policy" in messages[0]
    assert caught[0].filename == __file__
    p = mc.global_policy()
    assert type(p) is experimental.Policy and isinstance(p.loss_scale, DynamicLossScale)
    q, caught = record(experimental.global_policy)
    assert q is p
    assert "mixedcore.global_policy" in deprecations(caught)[0]
    _, caught = record(experimental.set_policy, DTypePolicy("mixed_bfloat16"))
    assert mc.global_policy() == DTypePolicy("mixed_bfloat16")
    record(experimental.set_policy, None)
    assert mc.global_policy() == DTypePolicy("float32")


def test_experimental_set_policy_accepts_infer_names():
    _, caught = record(experimental.set_policy, "infer_with_float32_vars")
    assert len(deprecations(caught)) == 2        # the function, then the name
    assert mc.global_policy().compute_dtype is None
    assert mc.global_policy().variable_dtype == "float32"
    mc.set_policy(make("infer"))
    assert mc.global_policy() == make("infer")


def test_experimental_set_policy_errors():
    with pytest.raises(ValueError, match="floating"):
        record(experimental.set_policy, "int32")
    with pytest.raises(ValueError, match="floating"):
        mc.set_policy(make("int8_with_float32_vars"))
    with pytest.raises(ValueError, match="'Float16'"):
        record(experimental.set_policy, "Float16")
    with pytest.raises(TypeError):
        record(experimental.set_policy, 16)
    assert mc.global_policy() == DTypePolicy("float32")


def test_policy_scope_with_an_experimental_policy():
    p = make("mixed_float16")
    with mc.policy_scope(p):
        assert mc.global_policy() is p
    assert mc.global_policy() == DTypePolicy("float32")


# --------------------------------------------------------------------------- namespaces

def test_loss_scale_optimizer_is_one_class():
    assert experimental.LossScaleOptimizer is LossScaleOptimizer
    assert mc.mixed_precision.LossScaleOptimizer is LossScaleOptimizer
    assert "LossScaleOptimizer" in dir(experimental)
    assert "LossScaleOptimizer" in dir(mc.mixed_precision)
    from mixedcore.mixed_precision import LossScaleOptimizer as via_from
    assert via_from is LossScaleOptimizer
    with pytest.raises(AttributeError):
        experimental.NoSuchThing
    with pytest.raises(AttributeError):
        mc.mixed_precision.NoSuchThing


def test_mixed_precision_namespace_mirrors_keras():
    mp = mc.mixed_precision
    for name in ("DTypePolicy", "Policy", "set_dtype_policy", "dtype_policy",
                 "set_global_policy", "global_policy", "LossScaleOptimizer", "experimental"):
        assert hasattr(mp, name), name
        assert name in mp.__all__
    assert mp.experimental is experimental
    assert mp.experimental.Policy is experimental.Policy
