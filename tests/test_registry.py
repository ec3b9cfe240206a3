"""One registry for every kind of serializable object: ``custom_objects=``,
``register_keras_serializable``, ``custom_object_scope`` and ``"package>Name"`` work the same
for layers, optimizers, learning-rate schedules, activations, loss scales, dtype policies,
regularizers, initializers, losses and metrics."""
import importlib
import json

import numpy as np
import pytest

from mixedcore import (activations, experimental, initializers, layers, loss_scale, losses,
                       metrics, models, optimizers, policies, regularizers)
from mixedcore.optimizers import schedules
from mixedcore.policy import DTypePolicy, policy_scope
from mixedcore.saving import object_registration

saving = importlib.import_module("mixedcore.saving")


@pytest.fixture(autouse=True)
def restore_registrations():
    """Registrations are global: each test's are undone after it."""
    registered = dict(object_registration._REGISTERED)
    names = dict(object_registration._REGISTERED_NAMES)
    yield
    object_registration._REGISTERED.clear()
    object_registration._REGISTERED.update(registered)
    object_registration._REGISTERED_NAMES.clear()
    object_registration._REGISTERED_NAMES.update(names)


# -- one user class (or function) of each kind ---------------------------------------------------

class Doubling(layers.Layer):
    def call(self, inputs):
        return inputs * inputs.dtype.type(2)


class MySGD(optimizers.SGD):
    pass


class MyDecay(schedules.ExponentialDecay):
    pass


def twice(x):
    return 2 * x


class MyFixedLossScale(loss_scale.FixedLossScale):
    pass


class MyPolicy(DTypePolicy):
    pass


class MyL2(regularizers.L2):
    pass


class MyInit:
    """An initializer of the user's, as Keras's: ``__call__(shape, dtype)`` and ``get_config``."""

    def __init__(self, value=0.5):
        self.value = value

    def __call__(self, shape, dtype=None):
        return np.full(shape, self.value)

    def get_config(self):
        return {"value": self.value}


class MyLoss(losses.MeanSquaredError):
    pass


def my_metric(y_true, y_pred):
    return float(np.mean(np.abs(np.asarray(y_true) - np.asarray(y_pred))))


def _activation_entry(fn):
    return {"module": fn.__module__, "class_name": "function", "config": fn.__name__,
            "registered_name": object_registration.get_registered_name(fn)}


class Kind:
    """How one kind of object is made, serialized and deserialized."""

    def __init__(self, name, obj, make, serialize, deserialize, builtin_name=None):
        self.name, self.obj, self.make = name, obj, make
        self.serialize, self.deserialize = serialize, deserialize
        self.builtin_name = builtin_name     # a function kind: the name of a built-in one

    def check(self, result):
        if self.builtin_name is not None:
            assert result is self.obj
        else:
            assert type(result) is self.obj

    def __repr__(self):
        return self.name


KINDS = [
    Kind("layer", Doubling, lambda: Doubling(name="twice"), layers.serialize,
         layers.deserialize),
    Kind("optimizer", MySGD, lambda: MySGD(learning_rate=0.1), optimizers.serialize,
         optimizers.deserialize),
    Kind("schedule", MyDecay, lambda: MyDecay(0.1, 10, 0.5), schedules.serialize,
         schedules.deserialize),
    Kind("activation", twice, lambda: twice, _activation_entry, activations.deserialize,
         builtin_name="relu"),
    Kind("loss scale", MyFixedLossScale, lambda: MyFixedLossScale(128), loss_scale.serialize,
         loss_scale.deserialize),
    Kind("dtype policy", MyPolicy, lambda: MyPolicy("mixed_float16"), policies.serialize,
         policies.deserialize),
    Kind("regularizer", MyL2, lambda: MyL2(0.02), regularizers.serialize,
         regularizers.deserialize),
    Kind("initializer", MyInit, lambda: MyInit(0.25), initializers.serialize,
         initializers.deserialize),
    Kind("loss", MyLoss, lambda: MyLoss(), losses.serialize, losses.deserialize),
    Kind("metric", my_metric, lambda: my_metric, metrics.serialize, metrics.deserialize,
         builtin_name="mae"),
]


def _short(kind):
    return kind.obj.__name__


def _with_package(kind, entry):
    """The entry as a Keras file names a class of a package: "Test>Name"."""
    entry = dict(entry)
    entry.pop("registered_name", None)
    key = "config" if kind.builtin_name is not None else "class_name"
    entry[key] = f"Test>{entry[key]}"
    return entry


# -- the same rules for every kind -------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS, ids=repr)
def test_unknown_until_given_in_custom_objects(kind):
    entry = kind.serialize(kind.make())
    with pytest.raises(ValueError):
        kind.deserialize(entry)
    kind.check(kind.deserialize(entry, custom_objects={_short(kind): kind.obj}))


@pytest.mark.parametrize("kind", KINDS, ids=repr)
def test_custom_objects_that_are_not_a_dict_are_a_type_error(kind):
    entry = kind.serialize(kind.make())
    for bad in ([("x", kind.obj)], 5, "custom"):
        with pytest.raises(TypeError, match="custom_objects must be a dict"):
            kind.deserialize(entry, custom_objects=bad)


@pytest.mark.parametrize("get, name", [(regularizers.get, "l2"), (losses.get, "mse"),
                                       (lambda n, custom_objects: metrics.get(
                                           n, custom_objects=custom_objects), "mae")])
def test_get_names_itself_for_custom_objects_that_are_not_a_dict(get, name):
    with pytest.raises(TypeError, match=r"^\w+\.get: custom_objects must be a dict"):
        get(name, custom_objects=[1])


def test_register_keras_serializable_refuses_bad_names_and_objects():
    for bad in (5, "", "a>b"):
        with pytest.raises(ValueError, match="register_keras_serializable: name must be"):
            object_registration.register_keras_serializable(name=bad)
    decorate = object_registration.register_keras_serializable(package="Test")
    for bad in (5, "text", None):
        with pytest.raises(TypeError, match="register_keras_serializable: expected a class"):
            decorate(bad)
    assert "Test>5" not in object_registration.get_custom_objects()


def test_compile_from_config_refuses_a_config_that_is_not_a_dict():
    model = models.Sequential([layers.Input((3,)), layers.Dense(2)])
    for bad in ("adam", ["mse"], 5):
        with pytest.raises(TypeError, match="compile_from_config: the compile config must be"):
            model.compile_from_config(bad)
    assert not model.compiled


def test_a_file_whose_compile_config_is_not_a_dict_loads_uncompiled_with_a_warning(tmp_path):
    model = models.Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile("sgd", "mse")
    config = json.loads(model.to_json())
    config["compile_config"] = ["sgd", "mse"]
    with pytest.warns(UserWarning, match="compile config is not a dict"):
        again = models.model_from_json(json.dumps(config))
    assert not again.compiled


@pytest.mark.parametrize("kind", KINDS, ids=repr)
def test_registered_objects_need_no_custom_objects(kind):
    saving.register_keras_serializable(package="Test")(kind.obj)
    entry = kind.serialize(kind.make())
    assert entry["registered_name"] == f"Test>{_short(kind)}"
    assert object_registration.get_registered_object(f"Test>{_short(kind)}") is kind.obj
    kind.check(kind.deserialize(entry))


@pytest.mark.parametrize("kind", KINDS, ids=repr)
def test_package_names(kind):
    entry = _with_package(kind, kind.serialize(kind.make()))
    with pytest.raises(ValueError):
        kind.deserialize(entry)
    kind.check(kind.deserialize(entry, custom_objects={_short(kind): kind.obj}))
    saving.register_keras_serializable(package="Test")(kind.obj)
    kind.check(kind.deserialize(entry))


@pytest.mark.parametrize("kind", KINDS, ids=repr)
def test_custom_object_scope(kind):
    entry = kind.serialize(kind.make())
    with saving.custom_object_scope({_short(kind): kind.obj}):
        kind.check(kind.deserialize(entry))
    with pytest.raises(ValueError):
        kind.deserialize(entry)


@pytest.mark.parametrize("kind", KINDS, ids=repr)
def test_custom_objects_win_over_registered_and_builtin(kind):
    class Other(kind.obj if isinstance(kind.obj, type) else object):
        pass
    saving.register_keras_serializable(package="Test")(kind.obj)
    entry = kind.serialize(kind.make())
    if kind.builtin_name is not None:
        def other(x):
            return x
        assert kind.deserialize(entry, custom_objects={f"Test>{_short(kind)}": other}) is other
        assert kind.deserialize(kind.builtin_name,
                                custom_objects={kind.builtin_name: other}) is other
        return
    result = kind.deserialize(entry, custom_objects={f"Test>{_short(kind)}": Other})
    assert type(result) is Other


# -- through the files and the configs that hold them --------------------------------------------

def _model_with(layer=None, dtype=None):
    with policy_scope("float32"):
        hidden = layer if layer is not None else layers.Dense(4, dtype=dtype, name="d")
        return models.Sequential([layers.Input(shape=(3,)), hidden, layers.Dense(2)])


@pytest.mark.parametrize("ext", [".keras", ".h5"])
@pytest.mark.parametrize("how", ["custom_objects", "registered", "scope"])
def test_layer_through_load_model(tmp_path, ext, how):
    model = _model_with(Doubling(name="twice"))
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    if how == "registered":
        saving.register_keras_serializable(package="Test")(Doubling)
    model.save(tmp_path / f"m{ext}")
    if how == "custom_objects":
        loaded = models.load_model(tmp_path / f"m{ext}", custom_objects={"Doubling": Doubling})
    elif how == "scope":
        with saving.custom_object_scope({"Doubling": Doubling}):
            loaded = models.load_model(tmp_path / f"m{ext}")
    else:
        loaded = models.load_model(tmp_path / f"m{ext}")
    assert type(loaded.get_layer("twice")) is Doubling
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.parametrize("how", ["custom_objects", "registered"])
def test_dtype_policy_through_load_model(tmp_path, how):
    model = _model_with(dtype=MyPolicy("mixed_float16"))
    if how == "registered":
        saving.register_keras_serializable(package="Test")(MyPolicy)
    model.save(tmp_path / "m.keras")
    custom = {"MyPolicy": MyPolicy} if how == "custom_objects" else None
    loaded = models.load_model(tmp_path / "m.keras", custom_objects=custom)
    policy = loaded.get_layer("d").dtype_policy
    assert type(policy) is MyPolicy and policy.name == "mixed_float16"


@pytest.mark.parametrize("ext", [".keras", ".h5"])
@pytest.mark.parametrize("how", ["custom_objects", "registered"])
def test_optimizer_through_load_model(tmp_path, ext, how):
    model = _model_with()
    model.compile(optimizer=MySGD(learning_rate=0.05), loss="mse")
    if how == "registered":
        saving.register_keras_serializable(package="Test")(MySGD)
    model.save(tmp_path / f"m{ext}")
    custom = {"MySGD": MySGD} if how == "custom_objects" else None
    loaded = models.load_model(tmp_path / f"m{ext}", custom_objects=custom)
    assert type(loaded.optimizer) is MySGD
    assert loaded.optimizer.get_config()["learning_rate"] == pytest.approx(0.05)


@pytest.mark.parametrize("how", ["custom_objects", "registered"])
def test_schedule_through_optimizer_from_config(how):
    config = optimizers.serialize(optimizers.Adam(learning_rate=MyDecay(0.1, 10, 0.5)))
    custom = {"MyDecay": MyDecay}
    if how == "registered":
        saving.register_keras_serializable(package="Test")(MyDecay)
        config = optimizers.serialize(optimizers.Adam(learning_rate=MyDecay(0.1, 10, 0.5)))
        custom = None
    else:
        with pytest.raises(ValueError, match="unknown learning-rate schedule 'MyDecay'"):
            optimizers.Adam.from_config(config["config"])
    optimizer = optimizers.Adam.from_config(config["config"], custom_objects=custom)
    assert type(optimizer.learning_rate) is MyDecay


@pytest.mark.parametrize("how", ["custom_objects", "registered"])
def test_loss_scale_through_policy_from_config(how):
    if how == "registered":
        saving.register_keras_serializable(package="Test")(MyFixedLossScale)
    config = {"name": "mixed_float16", "loss_scale": loss_scale.serialize(MyFixedLossScale(64))}
    custom = {"MyFixedLossScale": MyFixedLossScale} if how == "custom_objects" else None
    with pytest.warns(Warning):
        policy = experimental.Policy.from_config(config, custom_objects=custom)
    assert type(policy.loss_scale) is MyFixedLossScale


@pytest.mark.parametrize("ext", [".keras", ".h5"])
@pytest.mark.parametrize("how", ["custom_objects", "registered", "scope"])
def test_regularizer_and_initializer_through_load_model(tmp_path, ext, how):
    model = _model_with(layers.Dense(4, kernel_regularizer=MyL2(0.03),
                                     kernel_initializer=MyInit(0.25), name="d"))
    if how == "registered":
        saving.register_keras_serializable(package="Test")(MyL2)
        saving.register_keras_serializable(package="Test")(MyInit)
    model.save(tmp_path / f"m{ext}")
    custom = {"MyL2": MyL2, "MyInit": MyInit}
    if how != "registered":
        with pytest.raises(ValueError, match="MyL2"):
            models.load_model(tmp_path / f"m{ext}", custom_objects={"MyInit": MyInit})
        with pytest.raises(ValueError, match="MyInit"):
            models.load_model(tmp_path / f"m{ext}", custom_objects={"MyL2": MyL2})
    if how == "custom_objects":
        loaded = models.load_model(tmp_path / f"m{ext}", custom_objects=custom)
    elif how == "scope":
        with saving.custom_object_scope(custom):
            loaded = models.load_model(tmp_path / f"m{ext}")
    else:
        loaded = models.load_model(tmp_path / f"m{ext}")
    dense = loaded.get_layer("d")
    assert type(dense.kernel_regularizer) is MyL2
    assert dense.kernel_regularizer.l2 == pytest.approx(0.03)
    assert type(dense.kernel_initializer) is MyInit and dense.kernel_initializer.value == 0.25
    np.testing.assert_array_equal(dense.get_weights()[0], model.get_layer("d").get_weights()[0])


@pytest.mark.parametrize("ext", [".keras", ".h5"])
@pytest.mark.parametrize("how", ["custom_objects", "registered", "scope"])
def test_loss_and_metric_through_load_model(tmp_path, ext, how):
    model = _model_with()
    model.compile(optimizer="sgd", loss=MyLoss(), metrics=[my_metric])
    if how == "registered":
        saving.register_keras_serializable(package="Test")(MyLoss)
        saving.register_keras_serializable(package="Test")(my_metric)
    model.save(tmp_path / f"m{ext}")
    if how != "registered":
        with pytest.warns(UserWarning, match="MyLoss"):
            assert not models.load_model(tmp_path / f"m{ext}").compiled
    custom = {"MyLoss": MyLoss, "my_metric": my_metric}
    if how == "custom_objects":
        loaded = models.load_model(tmp_path / f"m{ext}", custom_objects=custom)
    elif how == "scope":
        with saving.custom_object_scope(custom):
            loaded = models.load_model(tmp_path / f"m{ext}")
    else:
        loaded = models.load_model(tmp_path / f"m{ext}")
    assert loaded.compiled and type(loaded.loss) is MyLoss
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 3)).astype(np.float32), rng.normal(size=(6, 2)).astype(np.float32)
    logs = loaded.evaluate(x, y, verbose=0, return_dict=True)
    assert logs == pytest.approx(model.evaluate(x, y, verbose=0, return_dict=True))
    assert set(logs) == {"loss", "my_metric"}


def test_names_of_the_users_objects_through_get():
    for obj in (MyL2, MyInit, MyLoss, my_metric):
        saving.register_keras_serializable(package="Test")(obj)
    assert type(regularizers.get("Test>MyL2")) is MyL2
    assert type(initializers.get("Test>MyInit")) is MyInit
    assert type(losses.get("Test>MyLoss")) is MyLoss
    assert metrics.get("Test>my_metric") == ("my_metric", my_metric)
    with saving.custom_object_scope({"l2": MyL2, "mse": MyLoss, "zeros": MyInit}):
        assert type(regularizers.get("l2")) is MyL2
        assert type(losses.get("mse")) is MyLoss
        assert type(initializers.get("zeros")) is MyInit
    assert type(regularizers.get("l2")) is regularizers.L2
    assert initializers.get("zeros") == "zeros"
    assert type(losses.get({"class_name": "MyLoss", "config": {}},
                           custom_objects={"MyLoss": MyLoss})) is MyLoss


def test_builtin_names_keep_working():
    assert type(regularizers.get({"class_name": "L1L2", "config": {"l1": 0.1}})) is \
        regularizers.L1L2
    assert regularizers.get("l1_l2").l2 == 0.01
    assert initializers.get("GlorotUniform") == "glorot_uniform"
    assert initializers.get({"class_name": "Zeros", "config": {}}) == "zeros"
    assert type(losses.get("MSE")) is losses.MeanSquaredError
    assert losses.deserialize(losses.serialize(losses.Huber(delta=2.0))).delta == 2.0
    assert metrics.deserialize(metrics.serialize(metrics.mae)) is metrics.mae
    with pytest.raises(ValueError, match="unknown regularizer 'nope'; valid names"):
        regularizers.get("nope")
    with pytest.raises(ValueError, match="unknown initializer 'nope'; valid names"):
        initializers.get("nope")
    with pytest.raises(ValueError, match="unknown loss 'nope'; valid names"):
        losses.get("nope")
    with pytest.raises(ValueError, match="unknown metric 'nope'; valid names"):
        metrics.get("nope")


def test_compile_state_is_the_trainers():
    model = _model_with()
    assert model.get_compile_config() is None and model.get_training_config() is None
    model.compile(optimizer="sgd", loss="mse", metrics=["mae", metrics.mse, lambda t, p: 0.0])
    config = model.get_compile_config()
    assert config["loss"] == "mean_squared_error"
    assert config["metrics"] == ["mae", "mean_squared_error"]       # the lambda is left out
    assert model.get_training_config()["optimizer_config"]["class_name"] == "SGD"
    for legacy, cfg in ((False, config), (True, model.get_training_config())):
        fresh = _model_with()
        fresh.compile_from_config(cfg, legacy=legacy)
        assert fresh.compiled and fresh.get_compile_config() == config
    fresh = _model_with()
    with pytest.warns(UserWarning, match="compile_from_config: the compile config: .*'nope'"):
        fresh.compile_from_config(dict(config, optimizer="nope"))
    assert not fresh.compiled


def test_activation_names_in_a_function_dict():
    saving.register_keras_serializable(package="Test")(twice)
    entry = {"class_name": "function", "config": "twice", "registered_name": "Test>twice"}
    assert activations.deserialize(entry) is twice
    assert activations.deserialize("Test>twice") is twice
    assert activations.deserialize("relu") is activations.relu


# -- the registry's own rules ------------------------------------------------------------------

def test_builtin_tables_are_the_registry():
    assert object_registration.builtin_objects("layer")["Dense"] is layers.Dense
    assert object_registration.builtin_objects("layer")["Functional"] is models.Model
    assert object_registration.builtin_objects("optimizer")["LossScaleOptimizer"] is \
        optimizers.LossScaleOptimizer
    assert list(object_registration.builtin_objects("dtype_policy")) == [
        "DTypePolicy", "FloatDTypePolicy", "Policy", "PolicyV1", "QuantizedDTypePolicy",
        "QuantizedFloat8DTypePolicy", "Int4DTypePolicy", "GPTQDTypePolicy", "AWQDTypePolicy",
        "DTypePolicyMap"]
    assert object_registration.builtin_objects("activation")["relu"] is activations.relu
    assert object_registration.builtin_objects("regularizer")["L2"] is regularizers.L2
    assert object_registration.builtin_objects("initializer")["HeNormal"] == "he_normal"
    assert object_registration.builtin_objects("loss")["mse"] is losses.MeanSquaredError
    assert object_registration.builtin_objects("metric")["mae"] is metrics.mean_absolute_error


def test_register_keras_serializable_checks_its_arguments():
    with pytest.raises(ValueError, match="without '>'"):
        saving.register_keras_serializable(package="a>b")

    class NoConfig:
        pass
    with pytest.raises(ValueError, match="no get_config"):
        saving.register_keras_serializable()(NoConfig)
    saving.register_keras_serializable(package="Pkg", name="Renamed")(MySGD)
    assert object_registration.get_registered_name(MySGD) == "Pkg>Renamed"
    assert saving.get_custom_objects()["Pkg>Renamed"] is MySGD
    assert object_registration.get_registered_name(optimizers.SGD) == "SGD"


def test_custom_objects_must_be_a_dict_of_names(tmp_path):
    with pytest.raises(TypeError, match="load_model: custom_objects must be a dict"):
        models.load_model(tmp_path / "m.keras", custom_objects=[Doubling])
    with pytest.raises(TypeError, match="custom_object_scope: expected dicts"):
        saving.custom_object_scope([Doubling])


def test_saving_exports():
    missing = [n for n in saving.__all__ if not hasattr(saving, n)]
    assert not missing
    namespace = {}
    exec("from mixedcore.saving import *", namespace)
    assert set(saving.__all__) <= set(namespace)
    assert saving.load_model is models.load_model
