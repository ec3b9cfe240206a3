"""DTypePolicy names, errors, identity and config; the global policy and policy_scope."""
import asyncio
import copy
import pickle
import re
import threading

import ml_dtypes
import numpy as np
import pytest

import mixedcore as mc
from mixedcore.dtype_policies import _policy as policy_mod
from mixedcore.policy import DTypePolicy


@pytest.fixture(autouse=True)
def _reset_global_policy():
    mc.set_policy(None)
    yield
    mc.set_policy(None)


# --------------------------------------------------------------------------- names

MIXED = [("mixed_float16", "float16", "float32"), ("mixed_bfloat16", "bfloat16", "float32")]
DTYPE_NAMES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
               "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128",
               "float8_e4m3fn", "float8_e5m2", "int4", "uint4"]


@pytest.mark.parametrize("name,compute,variable", MIXED)
def test_mixed_policies(name, compute, variable):
    p = DTypePolicy(name)
    assert (p.name, p.compute_dtype, p.variable_dtype) == (name, compute, variable)
    assert p.should_cast_variables is True


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_dtype_names(name):
    p = DTypePolicy(name)
    assert (p.name, p.compute_dtype, p.variable_dtype) == (name, name, name)
    assert p.should_cast_variables is False


def test_every_listed_name_is_accepted_and_canonical():
    names = policy_mod.dtype_names()
    assert set(DTYPE_NAMES) <= set(names)
    for name in names:
        assert np.dtype(name).name == name
        p = DTypePolicy(name)
        assert p.compute_dtype == p.variable_dtype == name
    assert policy_mod.policy_names() == ["mixed_float16", "mixed_bfloat16"] + names


def test_ml_dtypes_names_come_from_ml_dtypes():
    # Every ml_dtypes scalar type whose canonical name is numeric is a valid policy name.
    for attr in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "int4", "uint4"):
        t = getattr(ml_dtypes, attr)
        assert DTypePolicy(np.dtype(t).name).compute_dtype == attr


VALID_FORMS = ("'mixed_float16'", "'mixed_bfloat16'", "'float32'")

BAD_NAMES = ["Float32", " float32", "float32 ", "", "mixed_int8", "mixed_float32",
             "MIXED_FLOAT16", "mixed-float16", "f4", "float", "half", "double", "long", "int",
             "intc", "longdouble", "bool_", "float32\n", "object", "str", "bytes", "void",
             "datetime64", "timedelta64", "float17", "mixed_float16 ", "float32,float16"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_names_raise_value_error_quoting_the_name(name):
    with pytest.raises(ValueError) as info:
        DTypePolicy(name)
    message = str(info.value)
    assert message.startswith("DTypePolicy:")
    assert repr(name) in message
    for form in VALID_FORMS:
        assert form in message


@pytest.mark.parametrize("name,instead", [
    ("float16_with_float32_vars", ["'mixed_float16'"]),
    ("bfloat16_with_float32_vars", ["'mixed_bfloat16'"]),
    ("float32_with_float32_vars", ["'mixed_float16'", "'mixed_bfloat16'"]),
    ("infer_with_float32_vars", ["'mixed_float16'", "'mixed_bfloat16'"]),
    ("infer_float32_vars", ["'mixed_float16'", "'mixed_bfloat16'"]),
    ("nonsense_float32_vars", ["'mixed_float16'", "'mixed_bfloat16'"]),
    ("infer", ["'mixed_float16'", "'mixed_bfloat16'"]),
])
def test_deprecated_names_refused_with_replacement(name, instead):
    with pytest.raises(ValueError) as info:
        DTypePolicy(name)
    message = str(info.value)
    assert repr(name) in message
    assert "experimental.Policy" in message
    for word in instead:
        assert word in message


@pytest.mark.parametrize("value", [5, 1.5, None, b"float32", np.dtype("float32"), np.float32,
                                   ["float32"], DTypePolicy("float32")])
def test_non_str_name_raises_type_error_naming_the_type(value):
    with pytest.raises(TypeError, match=re.escape(type(value).__name__)):
        DTypePolicy(value)


def test_str_subclass_name_is_stored_as_str():
    class Name(str):
        pass

    p = DTypePolicy(Name("mixed_float16"))
    assert type(p.name) is str
    assert p == DTypePolicy("mixed_float16")


def test_policy_alias():
    assert mc.Policy is DTypePolicy
    assert mc.mixed_precision.Policy is DTypePolicy
    assert mc.mixed_precision.DTypePolicy is DTypePolicy


# --------------------------------------------------------------------------- identity

def test_properties_are_read_only():
    p = DTypePolicy("mixed_float16")
    for attr in ("name", "compute_dtype", "variable_dtype", "should_cast_variables"):
        with pytest.raises(AttributeError):
            setattr(p, attr, "float64")
    with pytest.raises(AttributeError):
        p.extra = 1
    assert p.compute_dtype == "float16"


def test_repr():
    assert repr(DTypePolicy("mixed_float16")) == '<DTypePolicy "mixed_float16">'
    assert repr(DTypePolicy("float32")) == '<DTypePolicy "float32">'


def test_equality_and_hash():
    a, b, c = DTypePolicy("mixed_float16"), DTypePolicy("mixed_float16"), DTypePolicy("float16")
    assert a == b and not (a != b)
    assert hash(a) == hash(b)
    assert a != c
    assert a != "mixed_float16"
    assert len({a, b, c}) == 2
    assert {a: 1}[b] == 1


def test_subclass_instances_are_not_equal_to_the_base():
    class MyPolicy(DTypePolicy):
        pass

    assert MyPolicy("float32") != DTypePolicy("float32")
    assert DTypePolicy("float32") != MyPolicy("float32")
    assert MyPolicy("float32") == MyPolicy("float32")
    assert repr(MyPolicy("float32")) == '<MyPolicy "float32">'


@pytest.mark.parametrize("name", ["mixed_float16", "bfloat16", "int8"])
def test_pickle_and_copy(name):
    p = DTypePolicy(name)
    for q in (pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)):
        assert q == p and q.compute_dtype == p.compute_dtype
        assert q.variable_dtype == p.variable_dtype


def test_infer_from_returns_concrete_policy_itself():
    p = DTypePolicy("mixed_float16")
    assert p.infer_from(np.float64) is p
    assert p.infer_from(np.int32) is p


# --------------------------------------------------------------------------- config

@pytest.mark.parametrize("name", policy_mod.policy_names())
def test_config_round_trip(name):
    p = DTypePolicy(name)
    assert p.get_config() == {"name": name}
    assert DTypePolicy.from_config(p.get_config()) == p


def test_from_config_drops_legacy_loss_scale():
    legacy = {"name": "mixed_float16",
              "loss_scale": {"class_name": "FixedLossScale",
                             "config": {"loss_scale_value": 128.0}}}
    p = DTypePolicy.from_config(legacy)
    assert type(p) is DTypePolicy and p == DTypePolicy("mixed_float16")
    plain = DTypePolicy.from_config({"name": "float32", "loss_scale": None})
    assert plain == DTypePolicy("float32")
    assert "loss_scale" in legacy  # the caller's dict is not modified


def test_from_config_errors():
    with pytest.raises(TypeError, match="from_config.*dict.*list"):
        DTypePolicy.from_config(["float32"])
    with pytest.raises(ValueError, match="no 'name'"):
        DTypePolicy.from_config({})
    with pytest.raises(ValueError, match="unexpected config keys.*'dtype'"):
        DTypePolicy.from_config({"name": "float32", "dtype": "float32"})
    with pytest.raises(ValueError, match="'f4'"):
        DTypePolicy.from_config({"name": "f4"})
    with pytest.raises(TypeError, match="int"):
        DTypePolicy.from_config({"name": 32})


# --------------------------------------------------------------------------- global policy

def test_default_global_policy_is_float32():
    assert mc.global_policy() == DTypePolicy("float32")
    assert mc.dtype_policy() == DTypePolicy("float32")


def test_aliases_behave_the_same():
    for setter in (mc.set_global_policy, mc.set_dtype_policy, mc.mixed_precision.set_global_policy,
                   mc.mixed_precision.set_dtype_policy):
        setter("mixed_bfloat16")
        assert mc.global_policy() == DTypePolicy("mixed_bfloat16")
        setter(None)
        assert mc.global_policy() == DTypePolicy("float32")
    assert mc.dtype_policy is mc.global_policy
    mp = mc.mixed_precision
    assert (mp.set_global_policy, mp.set_dtype_policy) == (mc.set_global_policy,
                                                           mc.set_dtype_policy)
    assert (mp.global_policy, mp.dtype_policy) == (mc.global_policy, mc.global_policy)


def test_set_policy_str_policy_and_none():
    mc.set_policy("mixed_float16")
    assert mc.global_policy() == DTypePolicy("mixed_float16")
    p = DTypePolicy("mixed_bfloat16")
    mc.set_global_policy(p)
    assert mc.global_policy() is p
    mc.set_dtype_policy(None)
    assert mc.global_policy() == DTypePolicy("float32")


@pytest.mark.keras
def test_set_global_policy_none_resets_where_keras3_refuses(keras):
    """A deliberate difference (docs/porting.md, 'Different, and why'): Keras 3 refuses None,
    mixedcore resets the default to float32 as tf.keras did."""
    before = keras.mixed_precision.global_policy().name
    with pytest.raises(ValueError, match="policy"):
        keras.mixed_precision.set_global_policy(None)
    assert keras.mixed_precision.global_policy().name == before
    for reset in (mc.set_global_policy, mc.set_policy, mc.set_dtype_policy,
                  mc.mixed_precision.set_global_policy):
        mc.set_global_policy("mixed_bfloat16")
        reset(None)
        assert mc.global_policy() == DTypePolicy("float32")


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float64", "float8_e4m3fn",
                                  "mixed_float16", "mixed_bfloat16"])
def test_set_policy_accepts_floating(name):
    mc.set_policy(name)
    assert mc.global_policy().name == name


@pytest.mark.parametrize("name", ["int32", "int8", "uint8", "bool", "complex64", "int4"])
def test_set_policy_refuses_non_floating(name):
    mc.set_policy("mixed_float16")
    for arg in (name, DTypePolicy(name)):
        with pytest.raises(ValueError, match=rf"set_policy: .*floating.*'{name}'"):
            mc.set_policy(arg)
    assert mc.global_policy() == DTypePolicy("mixed_float16")


@pytest.mark.parametrize("value", [5, np.float32, np.dtype("float32"), b"float32",
                                   {"name": "float32"}, ["float32"]])
def test_set_policy_other_types(value):
    with pytest.raises(TypeError, match=rf"set_policy: .*{re.escape(type(value).__name__)}"):
        mc.set_policy(value)
    assert mc.global_policy() == DTypePolicy("float32")


def test_set_policy_invalid_name():
    with pytest.raises(ValueError, match="'Float32'"):
        mc.set_policy("Float32")


def _in_thread(fn):
    out, errors = [], []

    def run():
        try:
            out.append(fn())
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert not t.is_alive()
    if errors:
        raise errors[0]
    return out[0]


def test_global_policy_is_seen_by_other_threads():
    mc.set_policy("mixed_float16")
    assert _in_thread(mc.global_policy) == DTypePolicy("mixed_float16")
    _in_thread(lambda: mc.set_policy("mixed_bfloat16"))
    assert mc.global_policy() == DTypePolicy("mixed_bfloat16")


# --------------------------------------------------------------------------- policy_scope

def test_policy_scope_sets_and_restores():
    mc.set_policy("mixed_float16")
    with mc.policy_scope("bfloat16") as p:
        assert p == DTypePolicy("bfloat16")
        assert mc.global_policy() is p
        assert mc.dtype_policy() is p
    assert mc.global_policy() == DTypePolicy("mixed_float16")


def test_policy_scope_nests():
    with mc.policy_scope("mixed_float16"):
        with mc.policy_scope(DTypePolicy("float64")):
            with mc.policy_scope(None):
                assert mc.global_policy() == DTypePolicy("float32")
            assert mc.global_policy() == DTypePolicy("float64")
        assert mc.global_policy() == DTypePolicy("mixed_float16")
    assert mc.global_policy() == DTypePolicy("float32")


def test_policy_scope_restores_after_exception():
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with mc.policy_scope("mixed_float16"):
            with mc.policy_scope("mixed_bfloat16"):
                raise Boom()
    assert mc.global_policy() == DTypePolicy("float32")
    with mc.policy_scope("float16"):
        with pytest.raises(Boom):
            with mc.policy_scope("mixed_bfloat16"):
                raise Boom()
        assert mc.global_policy() == DTypePolicy("float16")


def test_policy_scope_bad_arguments():
    with pytest.raises(TypeError, match="policy_scope: .*int"):
        with mc.policy_scope(3):
            pass
    with pytest.raises(ValueError, match="policy_scope: .*floating"):
        with mc.policy_scope("int32"):
            pass
    with pytest.raises(ValueError, match="'Float16'"):
        with mc.policy_scope("Float16"):
            pass
    assert mc.global_policy() == DTypePolicy("float32")


def test_set_policy_inside_a_scope_changes_the_default_underneath():
    with mc.policy_scope("mixed_bfloat16"):
        mc.set_policy("mixed_float16")
        assert mc.global_policy() == DTypePolicy("mixed_bfloat16")
        assert _in_thread(mc.global_policy) == DTypePolicy("mixed_float16")
    assert mc.global_policy() == DTypePolicy("mixed_float16")


def test_policy_scope_as_decorator():
    @mc.policy_scope("mixed_bfloat16")
    def f():
        return mc.global_policy()

    assert f() == DTypePolicy("mixed_bfloat16")
    assert mc.global_policy() == DTypePolicy("float32")


def test_policy_scope_does_not_leak_into_a_new_thread():
    mc.set_policy("float64")
    with mc.policy_scope("mixed_float16"):
        assert _in_thread(mc.global_policy) == DTypePolicy("float64")


def test_policy_scope_isolated_between_concurrent_threads():
    # Both threads are inside their own scope at the same time (the barrier guarantees the
    # overlap), while the main thread, with no scope, keeps seeing the process default.
    mc.set_policy("float64")
    barrier = threading.Barrier(3, timeout=30)
    seen, errors = {}, []

    def worker(key, name):
        try:
            with mc.policy_scope(name):
                barrier.wait()          # both scopes entered
                seen[key] = mc.global_policy()
                barrier.wait()          # both have read while the other was inside
            seen[key + "_after"] = mc.global_policy()
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=("a", "mixed_float16")),
               threading.Thread(target=worker, args=("b", "mixed_bfloat16"))]
    for t in threads:
        t.start()
    barrier.wait()
    main_inside = mc.global_policy()
    barrier.wait()
    for t in threads:
        t.join(30)
    assert not errors
    assert seen["a"] == DTypePolicy("mixed_float16")
    assert seen["b"] == DTypePolicy("mixed_bfloat16")
    assert main_inside == DTypePolicy("float64")
    assert seen["a_after"] == seen["b_after"] == DTypePolicy("float64")


def test_policy_scope_isolated_between_asyncio_tasks():
    async def main():
        entered = {"a": asyncio.Event(), "b": asyncio.Event()}
        checked = {"a": asyncio.Event(), "b": asyncio.Event()}

        async def task(me, other, name):
            with mc.policy_scope(name):
                entered[me].set()
                await entered[other].wait()   # the other task is inside its scope now
                inside = mc.global_policy()
                checked[me].set()
                await checked[other].wait()
                inside_later = mc.global_policy()
            return inside, inside_later, mc.global_policy()

        a = asyncio.create_task(task("a", "b", "mixed_float16"))
        b = asyncio.create_task(task("b", "a", "mixed_bfloat16"))
        await asyncio.sleep(0)
        outside = mc.global_policy()
        return await a, await b, outside

    (a_in, a_later, a_after), (b_in, b_later, b_after), outside = asyncio.run(main())
    assert a_in == a_later == DTypePolicy("mixed_float16")
    assert b_in == b_later == DTypePolicy("mixed_bfloat16")
    assert a_after == b_after == outside == DTypePolicy("float32")
    assert mc.global_policy() == DTypePolicy("float32")


# --------------------------------------------------------------------------- docs

def test_docs_table_matches_the_parser():
    """docs/policies.md lists every accepted name with the dtypes the parser gives."""
    import pathlib

    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "policies.md").read_text()
    table = text.split("## Accepted names", 1)[1]
    table = table.split("The deprecated `mixedcore.experimental.Policy`", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    assert rows, "table not found"
    names = set(policy_mod.policy_names())
    # Every name of this platform is documented; documented names missing here are the
    # platform-dependent ones (long double) and ml_dtypes types an older ml_dtypes lacks.
    assert names <= set(rows)
    from_ml_dtypes = {name for name, cells in rows.items() if cells[4] == "ml_dtypes"}
    assert set(rows) - names <= {"float128", "complex256"} | from_ml_dtypes
    for name, (_, compute, variable, _, _, glob) in rows.items():
        if name in names:
            p = DTypePolicy(name)
            assert (compute, variable) == (p.compute_dtype, p.variable_dtype), name
            assert (glob == "yes") == policy_mod._is_floating(p.compute_dtype), name


def test_a_misspelt_name_gets_the_nearest_names():
    with pytest.raises(ValueError, match=r"Did you mean 'mixed_float16'"):
        mc.DTypePolicy("mixed_float61")
    with pytest.raises(ValueError, match=r"Did you mean 'float32'\?"):
        mc.set_policy("Float32")
    with pytest.raises(ValueError) as info:
        mc.DTypePolicy("xyz")
    assert "Did you mean" not in str(info.value)
