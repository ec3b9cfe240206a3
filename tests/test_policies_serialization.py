"""mixedcore.policies: serialize / deserialize / get, legacy and Keras 3 dict forms."""
import json
import warnings

import ml_dtypes
import numpy as np
import pytest

import mixedcore as mc
from mixedcore import experimental, policies
from mixedcore import policy as policy_mod
from mixedcore.policy import DTypePolicy


@pytest.fixture(autouse=True)
def _reset_global_policy():
    mc.set_policy(None)
    yield
    mc.set_policy(None)


@pytest.mark.parametrize("name", policy_mod.policy_names())
def test_round_trip_every_name(name):
    p = DTypePolicy(name)
    data = policies.serialize(p)
    assert data == {"module": "keras", "class_name": "DTypePolicy", "config": {"name": name},
                    "registered_name": None}
    assert policies.deserialize(data) == p
    assert policies.deserialize(json.loads(json.dumps(data))) == p


@pytest.mark.parametrize("class_name", ["DTypePolicy", "FloatDTypePolicy", "Policy", "PolicyV1"])
def test_known_class_names_load_as_plain_policies(class_name):
    p = policies.deserialize({"class_name": class_name, "config": {"name": "mixed_bfloat16"}})
    assert type(p) is DTypePolicy and p == DTypePolicy("mixed_bfloat16")


@pytest.mark.parametrize("class_name", ["Policy", "PolicyV1"])
@pytest.mark.parametrize("loss_scale", [
    None, "dynamic", 128,
    {"class_name": "DynamicLossScale",
     "config": {"initial_loss_scale": 32768.0, "increment_period": 2000, "multiplier": 2.0}},
    {"class_name": "FixedLossScale", "config": {"loss_scale_value": 64.0}},
])
def test_legacy_experimental_configs_drop_the_loss_scale(class_name, loss_scale):
    # what tf.keras 2.0-2.4 wrote for an experimental policy with a non-default loss scale
    legacy = {"class_name": class_name,
              "config": {"name": "mixed_float16", "loss_scale": loss_scale}}
    p = policies.deserialize(legacy)
    assert type(p) is DTypePolicy
    assert p == DTypePolicy("mixed_float16")
    assert p.get_config() == {"name": "mixed_float16"}
    assert "loss_scale" in legacy["config"]            # input left as it was


def test_keras3_extra_keys_are_ignored():
    data = {"module": "keras", "class_name": "DTypePolicy",
            "config": {"name": "mixed_float16"}, "registered_name": None}
    assert policies.deserialize(data) == DTypePolicy("mixed_float16")


def test_deserialize_a_name():
    assert policies.deserialize("mixed_float16") == DTypePolicy("mixed_float16")
    with pytest.raises(ValueError, match="'F16'"):
        policies.deserialize("F16")


def test_serialize_an_experimental_policy_without_loss_scale():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = experimental.Policy("float32")
    assert policies.serialize(p) == {"class_name": "PolicyV1", "config": {"name": "float32"}}
    assert policies.deserialize(policies.serialize(p)) == DTypePolicy("float32")


def test_serialize_errors():
    for bad in ("float32", None, {"name": "float32"}):
        with pytest.raises(TypeError, match="serialize: expected a DTypePolicy"):
            policies.serialize(bad)


@pytest.mark.parametrize("bad,error,words", [
    (5, TypeError, "deserialize: expected a dict"),
    (None, TypeError, "NoneType"),
    (["DTypePolicy"], TypeError, "list"),
    ({"config": {"name": "float32"}}, ValueError, "no \\['class_name'\\]"),
    ({"class_name": "DTypePolicy"}, ValueError, "no \\['config'\\]"),
    ({}, ValueError, "'class_name', 'config'"),
    ({"class_name": "DTypePolicy", "config": {"name": "float32"}, "extra": 1}, ValueError,
     "unexpected keys \\['extra'\\]"),
    ({"class_name": "Dense", "config": {"name": "float32"}}, ValueError,
     "unknown policy class 'Dense'"),
    ({"class_name": "DTypePolicy", "config": "float32"}, ValueError, "'config' must be a dict"),
    ({"class_name": "DTypePolicy", "config": {}}, ValueError, "no 'name'"),
    ({"class_name": "DTypePolicy", "config": {"name": "float32", "x": 1}}, ValueError,
     "unexpected config keys \\['x'\\]"),
    ({"class_name": "DTypePolicy", "config": {"name": "Float32"}}, ValueError, "'Float32'"),
    ({"class_name": "DTypePolicy", "config": {"name": 32}}, TypeError, "int"),
    ({"class_name": "Policy", "config": {"name": "infer"}}, ValueError, "experimental.Policy"),
    ({"class_name": "Policy", "config": {"name": "float16_with_float32_vars"}}, ValueError,
     "'mixed_float16'"),
])
def test_malformed_configs(bad, error, words):
    with pytest.raises(error, match=words):
        policies.deserialize(bad)


def test_custom_objects():
    class MyPolicy(DTypePolicy):
        pass

    p = policies.deserialize({"class_name": "MyPolicy", "config": {"name": "float16"}},
                             custom_objects={"MyPolicy": MyPolicy})
    assert type(p) is MyPolicy and p.name == "float16"


# --------------------------------------------------------------------------- get

def test_get():
    assert policies.get(None) == DTypePolicy("float32")
    mc.set_policy("mixed_float16")
    assert policies.get(None) == DTypePolicy("mixed_float16")
    with mc.policy_scope("mixed_bfloat16"):
        assert policies.get(None) == DTypePolicy("mixed_bfloat16")
    p = DTypePolicy("float64")
    assert policies.get(p) is p
    assert policies.get("bfloat16") == DTypePolicy("bfloat16")
    assert policies.get({"class_name": "DTypePolicy", "config": {"name": "int8"}}) == \
        DTypePolicy("int8")
    assert policies.get(np.float16) == DTypePolicy("float16")
    assert policies.get(np.dtype("float32")) == DTypePolicy("float32")
    assert policies.get(ml_dtypes.bfloat16) == DTypePolicy("bfloat16")
    assert policies.get(np.dtype(ml_dtypes.float8_e5m2)) == DTypePolicy("float8_e5m2")
    assert policies.get(np.int32) == DTypePolicy("int32")
    assert policies.get(np.longdouble).compute_dtype == np.dtype(np.longdouble).name


@pytest.mark.parametrize("bad,error", [(5, ValueError), (1.5, ValueError), (float, ValueError),
                                       (np.dtype("O"), ValueError), (np.str_, ValueError),
                                       ("f4", ValueError), ({"class_name": "X", "config": {}},
                                                            ValueError)])
def test_get_errors(bad, error):
    with pytest.raises(error):
        policies.get(bad)


def test_get_error_has_keras_wording():
    with pytest.raises(ValueError, match=r"get: Cannot interpret `dtype` argument\. .*dtype=123"):
        policies.get(123)
    with pytest.raises(ValueError, match="Cannot convert 'mixed_float8' to a mixed precision "
                                         "DTypePolicy"):
        policies.get("mixed_float8")


def test_global_policy_setters_name_themselves():
    import mixedcore
    for fn in (mixedcore.set_global_policy, mixedcore.set_dtype_policy, mixedcore.set_policy):
        with pytest.raises(TypeError, match=f"^{fn.__name__}: "):
            fn(3)
        with pytest.raises(ValueError, match=f"^{fn.__name__}: Cannot convert 'mixed_float8' "
                                             f"to a mixed precision DTypePolicy"):
            fn("mixed_float8")
    assert mixedcore.global_policy().name == "float32"


class TaggedPolicy(DTypePolicy):
    pass


def test_subclass_keeps_its_class_name():
    config = policies.serialize(TaggedPolicy("mixed_bfloat16"))
    assert config == {"class_name": "TaggedPolicy", "config": {"name": "mixed_bfloat16"},
                      "registered_name": "TaggedPolicy"}
    again = policies.deserialize(config, custom_objects={"TaggedPolicy": TaggedPolicy})
    assert type(again) is TaggedPolicy and again.name == "mixed_bfloat16"
    with pytest.raises(ValueError, match="unknown policy class 'TaggedPolicy'"):
        policies.deserialize(config)
    with pytest.raises(TypeError, match="subclass of DTypePolicy"):
        policies.deserialize(config, custom_objects={"TaggedPolicy": dict})
