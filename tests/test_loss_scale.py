"""FixedLossScale, DynamicLossScale and LossScaleOptimizer against hand-computed trajectories."""
import json
import os
import subprocess
import warnings

import ml_dtypes

import numpy as np
import pytest

import mixedcore
from mixedcore import loss_scale as ls_mod
from mixedcore import optimizers
from mixedcore.loss_scale import DynamicLossScale, FixedLossScale, LossScale
from mixedcore.optimizers import LossScaleOptimizer

FINITE = [np.ones(3, np.float32), np.ones((2, 2), np.float16)]
NAN = [np.ones(3, np.float32), np.array([1.0, np.nan], np.float16)]
INF = [np.array([np.inf], ml_dtypes.bfloat16), None]


def test_public_names():
    assert mixedcore.FixedLossScale is FixedLossScale
    assert mixedcore.DynamicLossScale is DynamicLossScale
    assert mixedcore.LossScaleOptimizer is LossScaleOptimizer
    assert mixedcore.loss_scale is ls_mod
    assert mixedcore.optimizers is optimizers
    with pytest.raises(TypeError):
        LossScale()


# ---------------------------------------------------------------------------------------------
# FixedLossScale


def test_fixed_loss_scale():
    ls = FixedLossScale(128)
    assert ls() == 128.0 and isinstance(ls(), float)
    assert ls.update(FINITE) is True
    assert ls.update(NAN) is True          # never skips
    assert ls() == 128.0
    assert repr(ls) == "FixedLossScale(128.0)"
    assert ls.get_config() == {"loss_scale_value": 128.0}
    again = FixedLossScale.from_config(ls.get_config())
    assert type(again) is FixedLossScale and again() == 128.0
    assert FixedLossScale(1)() == 1.0


@pytest.mark.parametrize("value", [0.5, 0, -3, float("nan"), float("inf"), "8", None, True, [2],
                                   10 ** 400])
def test_fixed_loss_scale_bad(value):
    with pytest.raises(ValueError, match="FixedLossScale"):
        FixedLossScale(value)


# ---------------------------------------------------------------------------------------------
# DynamicLossScale


def test_dynamic_defaults_and_repr():
    ls = DynamicLossScale()
    assert ls() == 32768.0
    assert (ls.initial_loss_scale, ls.increment_period, ls.multiplier) == (32768.0, 2000, 2.0)
    assert repr(ls) == ("DynamicLossScale(current_loss_scale=32768.0, num_good_steps=0, "
                        "initial_loss_scale=32768.0, increment_period=2000, multiplier=2.0)")
    ls.update(FINITE)
    assert "num_good_steps=1" in repr(ls)


def test_dynamic_trajectory_growth_and_backoff():
    """initial 8, period 3, multiplier 2; hand-computed (finite?, scale after, good after)."""
    ls = DynamicLossScale(initial_loss_scale=8, increment_period=3, multiplier=2.0)
    steps = [
        (FINITE, True, 8.0, 1),
        (FINITE, True, 8.0, 2),
        (FINITE, True, 16.0, 0),    # good + 1 == 3 >= period: grow, reset
        (FINITE, True, 16.0, 1),
        (NAN, False, 8.0, 0),       # back off, reset
        (FINITE, True, 8.0, 1),
        (FINITE, True, 8.0, 2),
        (INF, False, 4.0, 0),       # the counter restarts after an overflow
        (FINITE, True, 4.0, 1),
        (FINITE, True, 4.0, 2),
        (FINITE, True, 8.0, 0),
    ]
    for k, (grads, applied, scale, good) in enumerate(steps):
        assert ls.update(grads) is applied, k
        assert ls() == scale, k
        assert ls.num_good_steps == good, k
        assert ls.current_loss_scale == scale


def test_dynamic_floor_of_one():
    ls = DynamicLossScale(initial_loss_scale=5, increment_period=10, multiplier=2.0)
    expected = [2.5, 1.25, 1.0, 1.0, 1.0]
    for e in expected:
        assert ls.update(NAN) is False
        assert ls() == e
    ls = DynamicLossScale(initial_loss_scale=1, increment_period=1, multiplier=4.0)
    assert ls.update(NAN) is False and ls() == 1.0
    assert ls.update(FINITE) is True and ls() == 4.0


def test_dynamic_period_one_grows_every_finite_step():
    ls = DynamicLossScale(initial_loss_scale=2, increment_period=1, multiplier=3.0)
    for expected in (6.0, 18.0, 54.0):
        assert ls.update(FINITE) is True
        assert ls() == expected and ls.num_good_steps == 0


def test_dynamic_finite_guard():
    """Growth only to a value finite in float32: 2**127 * 2 would be inf, so it stays."""
    ls = DynamicLossScale(initial_loss_scale=2.0 ** 126, increment_period=1, multiplier=2.0)
    assert ls.update(FINITE) is True and ls() == 2.0 ** 127
    assert ls.update(FINITE) is True and ls() == 2.0 ** 127 and ls.num_good_steps == 0
    assert ls.update(NAN) is False and ls() == 2.0 ** 126
    big = DynamicLossScale(initial_loss_scale=3e38, increment_period=1, multiplier=1.5)
    start = big()
    assert big.update(FINITE) is True and big() == start


def test_dynamic_scale_is_float32():
    ls = DynamicLossScale(initial_loss_scale=1000.7, increment_period=1, multiplier=3.0)
    assert ls() == float(np.float32(1000.7))
    ls.update(FINITE)
    assert ls() == float(np.float32(1000.7) * np.float32(3.0))
    ls.update(NAN)
    ls.update(NAN)
    assert ls() == float(np.float32(float(np.float32(1000.7) * np.float32(3.0))) /
                         np.float32(3.0) / np.float32(3.0))


def test_dynamic_update_inputs():
    ls = DynamicLossScale(initial_loss_scale=4, increment_period=100)
    assert ls.update([]) is True
    assert ls.update([None, None]) is True
    assert ls.update(np.ones(4, np.float64)) is True
    assert ls.update({"a": [np.ones(2, np.float32)], "b": (None, np.ones(1, np.float16))}) is True
    assert ls.update([[np.ones(2)], [np.array([np.nan])]]) is False
    assert ls.update([1.0, 2.0]) is True
    assert ls.update([float("inf")]) is False
    sig = np.array([0x7F800001], np.uint32).view(np.float32)
    assert ls.update([sig]) is False
    with pytest.raises(TypeError, match="all_finite"):
        ls.update([np.arange(3)])


def test_dynamic_config_round_trip():
    ls = DynamicLossScale(initial_loss_scale=64, increment_period=7, multiplier=4.0)
    ls.update(NAN)
    config = ls.get_config()
    assert config == {"initial_loss_scale": 64.0, "increment_period": 7, "multiplier": 4.0}
    again = DynamicLossScale.from_config(config)
    assert again.get_config() == config
    assert again() == 64.0 and again.num_good_steps == 0
    assert ls_mod.deserialize(ls_mod.serialize(ls)).get_config() == config
    assert ls_mod.serialize(ls) == {"class_name": "DynamicLossScale", "config": config}


@pytest.mark.parametrize("kwargs, exc", [
    ({"initial_loss_scale": 0}, ValueError), ({"initial_loss_scale": -1.0}, ValueError),
    ({"initial_loss_scale": float("inf")}, ValueError), ({"initial_loss_scale": 1e39}, ValueError),
    ({"initial_loss_scale": "big"}, TypeError), ({"increment_period": 0}, ValueError),
    ({"increment_period": 2.5}, ValueError), ({"increment_period": True}, TypeError),
    ({"increment_period": "3"}, TypeError), ({"increment_period": float("inf")}, ValueError),
    ({"increment_period": float("nan")}, ValueError), ({"increment_period": 0.0}, ValueError),
    ({"multiplier": 0.5}, ValueError), ({"multiplier": float("nan")}, ValueError),
    ({"multiplier": "2"}, TypeError), ({"initial_loss_scale": 10 ** 400}, ValueError),
    ({"multiplier": 10 ** 400}, ValueError),
])
def test_dynamic_bad_arguments(kwargs, exc):
    with pytest.raises(exc, match="DynamicLossScale"):
        DynamicLossScale(**kwargs)


def test_get_identifiers():
    assert isinstance(ls_mod.get("dynamic"), DynamicLossScale)
    assert ls_mod.get(256)() == 256.0
    assert ls_mod.get(None) is None
    d = DynamicLossScale()
    assert ls_mod.get(d) is d
    assert ls_mod.get({"class_name": "FixedLossScale", "config": {"loss_scale_value": 4}})() == 4
    for bad in ("static", [1], object()):
        with pytest.raises(ValueError, match="Could not interpret loss scale identifier"):
            ls_mod.get(bad)
    with pytest.raises(ValueError, match="unknown loss scale class"):
        ls_mod.deserialize({"class_name": "Nope", "config": {}})


# ---------------------------------------------------------------------------------------------
# LossScaleOptimizer


def test_lso_defaults_and_properties():
    inner = optimizers.SGD(0.1)
    opt = LossScaleOptimizer(inner)
    assert opt.inner_optimizer is inner
    assert opt.dynamic is True
    assert opt.loss_scale == 32768.0
    assert opt.initial_scale == 32768.0
    assert opt.dynamic_growth_steps == 2000
    assert opt.dynamic_counter == 0
    assert opt.iterations == 0
    assert opt.learning_rate == 0.1
    opt.learning_rate = 0.5
    assert inner.learning_rate == 0.5
    fixed = LossScaleOptimizer(optimizers.Adam(), dynamic=False, initial_scale=64)
    assert fixed.dynamic is False and fixed.loss_scale == 64.0
    assert fixed.dynamic_counter is None and fixed.dynamic_growth_steps is None
    assert fixed.initial_scale == 64.0
    assert repr(opt).startswith("LossScaleOptimizer(inner_optimizer=SGD(learning_rate=0.5")
    assert "loss_scale=32768.0" in repr(opt) and "dynamic_counter=0" in repr(opt)
    assert optimizers.get(opt) is opt


@pytest.mark.filterwarnings("ignore:LossScaleOptimizer.apply_gradients")
def test_lso_skipped_step_leaves_weights_untouched():
    w = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([0.5], np.float32)
    inner = optimizers.SGD(learning_rate=0.5, momentum=0.9)
    opt = LossScaleOptimizer(inner, initial_scale=1024, dynamic_growth_steps=2)
    g_w = np.array([0.25, 0.5, 1.0], np.float32)
    assert opt.apply_gradients([(g_w, w), (np.array([1.0], np.float32), b)]) is True
    np.testing.assert_array_equal(w, [0.875, 1.75, 2.5])
    assert opt.iterations == 1 and opt.dynamic_counter == 1 and opt.loss_scale == 1024
    before_w, before_b = w.copy(), b.copy()
    momentum_before = inner.get_slot(w, "momentum").copy()
    bad = np.array([0.25, np.inf, 1.0], np.float32)
    assert opt.apply_gradients([(bad, w), (np.array([1.0], np.float32), b)]) is False
    np.testing.assert_array_equal(w, before_w)
    np.testing.assert_array_equal(b, before_b)
    np.testing.assert_array_equal(inner.get_slot(w, "momentum"), momentum_before)
    assert opt.iterations == 2            # still advances
    assert inner.iterations == 2
    assert opt.loss_scale == 512 and opt.dynamic_counter == 0
    assert opt.apply_gradients([(g_w, w), (None, b)]) is True
    assert opt.dynamic_counter == 1
    assert opt.apply_gradients([(g_w, w)]) is True
    assert opt.loss_scale == 1024 and opt.dynamic_counter == 0 and opt.iterations == 4
    np.testing.assert_array_equal(b, before_b)


@pytest.mark.filterwarnings("ignore:LossScaleOptimizer.apply_gradients")
def test_lso_fixed_never_skips():
    w = np.ones(2, np.float32)
    opt = LossScaleOptimizer(optimizers.SGD(1.0), dynamic=False, initial_scale=8)
    assert opt.apply_gradients([(np.array([np.nan, 1.0], np.float32), w)]) is True
    assert np.isnan(w[0]) and w[1] == 0.0
    assert opt.loss_scale == 8 and opt.iterations == 1


def test_lso_scaled_loss_and_unscaled_gradients():
    opt = LossScaleOptimizer(optimizers.SGD(), initial_scale=2.0 ** 10)
    assert opt.get_scaled_loss(1.5) == 1536.0
    loss16 = np.float16(3.0)
    scaled = opt.get_scaled_loss(loss16)
    assert scaled.dtype == np.float16 and scaled == 3072.0
    arr = np.array([1.0, 2.0], np.float32)
    np.testing.assert_array_equal(opt.get_scaled_loss(arr), [1024.0, 2048.0])
    assert opt.get_scaled_loss(lambda: 2.0)() == 2048.0
    grads = [np.array([1024.0, 3.0], np.float32), None,
             np.array([2048.0, 1.0], np.float16), np.array([512.0], np.float64),
             np.array([np.inf], ml_dtypes.bfloat16)]
    originals = [None if g is None else g.copy() for g in grads]
    out = opt.get_unscaled_gradients(grads)
    assert out[1] is None
    np.testing.assert_array_equal(out[0], np.array([1.0, 3.0 / 1024], np.float32))
    assert out[2].dtype == np.float16 and (out[2] == [2.0, np.float16(1 / 1024)]).all()
    assert out[3].dtype == np.float64 and out[3][0] == 0.5
    assert np.isinf(out[4][0].astype(np.float32))
    for g, o in zip(grads, originals):   # inputs untouched
        if g is not None:
            np.testing.assert_array_equal(g, o)
    # fp32(1/fp64(scale)) for a scale whose reciprocal is not exact
    opt3 = LossScaleOptimizer(optimizers.SGD(), dynamic=False, initial_scale=3)
    g = np.array([1.0, 7.0], np.float32)
    np.testing.assert_array_equal(opt3.get_unscaled_gradients([g])[0],
                                  g * np.float32(1.0 / 3.0))


def test_lso_custom_loop_end_to_end():
    """A float16 gradient that overflows at the initial scale: the step is skipped and the
    scale backs off until the scaled gradient is finite, then the update is applied."""
    w = np.array([1.0], np.float32)
    opt = LossScaleOptimizer(optimizers.SGD(0.1), initial_scale=2.0 ** 15)
    true_grad = 4.0
    skipped = 0
    for _ in range(10):
        with np.errstate(over="ignore"):
            scaled_grad = np.array([true_grad * opt.loss_scale], np.float32).astype(np.float16)
        opt.get_scaled_loss(1.0)
        (grad,) = opt.get_unscaled_gradients([scaled_grad])
        if not opt.apply_gradients([(grad, w)]):
            skipped += 1
            continue
        break
    # 4 * 2**15 = 131072 > 65504 overflows; 4 * 2**14 = 65536 too; 4 * 2**13 = 32768 fits
    assert skipped == 2 and opt.loss_scale == 2.0 ** 13
    np.testing.assert_allclose(w, [1.0 - 0.1 * 4.0], rtol=1e-6)
    assert opt.iterations == 3


def test_lso_config_round_trip():
    opt = LossScaleOptimizer(optimizers.Adam(learning_rate=0.01, beta_1=0.8), initial_scale=256,
                             dynamic_growth_steps=50)
    config = opt.get_config()
    assert set(config) == {"inner_optimizer", "dynamic", "initial_scale", "dynamic_growth_steps"}
    assert config["inner_optimizer"] == {"class_name": "Adam",
                                         "config": opt.inner_optimizer.get_config()}
    assert config["inner_optimizer"]["config"]["beta_1"] == 0.8
    again = LossScaleOptimizer.from_config(config)
    assert again.get_config() == config
    assert isinstance(again.inner_optimizer, optimizers.Adam)
    fixed = LossScaleOptimizer(optimizers.SGD(), dynamic=False, initial_scale=16)
    assert LossScaleOptimizer.from_config(fixed.get_config()).get_config() == fixed.get_config()
    assert optimizers.deserialize(optimizers.serialize(opt)).get_config() == config
    legacy = {"optimizer": {"class_name": "SGD", "config": {"learning_rate": 0.1}},
              "loss_scale": {"class_name": "DynamicLossScale",
                             "config": {"initial_loss_scale": 128.0, "increment_period": 10,
                                        "multiplier": 2.0}}}
    old = LossScaleOptimizer.from_config(legacy)
    assert old.dynamic and old.initial_scale == 128.0 and old.dynamic_growth_steps == 10
    # TensorFlow 2.3 wrote the inner optimizer with tf.keras 2's "decay" and "name"
    legacy["optimizer"]["config"].update({"decay": 0.0, "name": "SGD", "momentum": 0.0,
                                          "nesterov": False})
    assert LossScaleOptimizer.from_config(legacy).inner_optimizer.learning_rate == 0.1
    legacy["loss_scale"] = {"class_name": "FixedLossScale", "config": {"loss_scale_value": 4}}
    assert LossScaleOptimizer.from_config(legacy).get_config()["initial_scale"] == 4.0


def tf23_lso_config(inner=None, loss_scale=None):
    """A LossScaleOptimizer config as TensorFlow 2.3 wrote it (docs/loss_scaling.md, 'Configs
    from TensorFlow 2.3 and Keras 3')."""
    config = {"name": "SGD", "learning_rate": 0.1, "decay": 0.0, "momentum": 0.9,
              "nesterov": False}
    config.update(inner or {})
    if loss_scale is None:
        loss_scale = {"class_name": "DynamicLossScale",
                      "config": {"initial_loss_scale": 512.0, "increment_period": 100,
                                 "multiplier": 2.0}}
    return {"optimizer": {"class_name": "SGD", "config": config}, "loss_scale": loss_scale}


def test_lso_tf23_configs_that_load():
    opt = LossScaleOptimizer.from_config(tf23_lso_config())
    assert opt.dynamic and opt.initial_scale == 512.0 and opt.dynamic_growth_steps == 100
    assert isinstance(opt.inner_optimizer, optimizers.SGD)
    assert opt.inner_optimizer.learning_rate == 0.1 and opt.inner_optimizer.momentum == 0.9
    assert optimizers.deserialize({"class_name": "LossScaleOptimizer",
                                   "config": tf23_lso_config()}).get_config() == opt.get_config()
    # tf.keras 2's "lr" spelling and bookkeeping keys
    old = tf23_lso_config(inner={"lr": 0.25, "is_legacy_optimizer": True, "jit_compile": False})
    del old["optimizer"]["config"]["learning_rate"]
    assert LossScaleOptimizer.from_config(old).inner_optimizer.learning_rate == 0.25
    fixed = LossScaleOptimizer.from_config(tf23_lso_config(
        loss_scale={"class_name": "FixedLossScale", "config": {"loss_scale_value": 64.0}}))
    assert not fixed.dynamic and fixed.loss_scale == 64.0 and fixed.dynamic_growth_steps is None
    assert LossScaleOptimizer.from_config(tf23_lso_config(loss_scale="dynamic")).initial_scale \
        == 2.0 ** 15
    assert LossScaleOptimizer.from_config(tf23_lso_config(loss_scale=8)).loss_scale == 8.0


def test_lso_tf23_configs_that_do_not_load():
    with pytest.raises(ValueError, match="decay=0.01"):
        LossScaleOptimizer.from_config(tf23_lso_config(inner={"decay": 0.01}))
    with pytest.raises(ValueError, match="only a multiplier of 2 is supported, got 3"):
        LossScaleOptimizer.from_config(tf23_lso_config(loss_scale={
            "class_name": "DynamicLossScale",
            "config": {"initial_loss_scale": 8.0, "increment_period": 10, "multiplier": 3.0}}))
    schedule = {"class_name": "ExponentialDecay", "config": {"initial_learning_rate": 0.1}}
    with pytest.raises(ValueError, match="the ExponentialDecay config .* does not fit"):
        LossScaleOptimizer.from_config(tf23_lso_config(inner={"learning_rate": schedule}))
    schedule["config"].update(decay_steps=10, decay_rate=0.5)
    opt = LossScaleOptimizer.from_config(tf23_lso_config(inner={"learning_rate": schedule}))
    assert type(opt.inner_optimizer.learning_rate).__name__ == "ExponentialDecay"


def test_lso_refused_arguments():
    with pytest.raises(TypeError, match="cannot wrap another LossScaleOptimizer"):
        LossScaleOptimizer(LossScaleOptimizer(optimizers.SGD()))
    with pytest.raises(TypeError, match="inner_optimizer"):
        LossScaleOptimizer("sgd")
    with pytest.raises(TypeError, match="dynamic"):
        LossScaleOptimizer(optimizers.SGD(), "dynamic")
    with pytest.raises(TypeError, match="dynamic"):
        LossScaleOptimizer(optimizers.SGD(), 1.0)
    with pytest.raises(ValueError, match="initial_scale.*must be specified"):
        LossScaleOptimizer(optimizers.SGD(), dynamic=False)
    with pytest.raises(ValueError, match="dynamic_growth_steps.*must be None"):
        LossScaleOptimizer(optimizers.SGD(), dynamic=False, initial_scale=8, dynamic_growth_steps=10)
    with pytest.raises(ValueError, match="LossScaleOptimizer.*initial_scale"):
        LossScaleOptimizer(optimizers.SGD(), dynamic=False, initial_scale=0.5)
    with pytest.raises(ValueError, match="LossScaleOptimizer.*initial_scale"):
        LossScaleOptimizer(optimizers.SGD(), initial_scale=-4)
    with pytest.raises(ValueError, match="LossScaleOptimizer.*dynamic_growth_steps"):
        LossScaleOptimizer(optimizers.SGD(), dynamic_growth_steps=0)
    sgd = optimizers.SGD()
    opt = LossScaleOptimizer(sgd)
    with pytest.raises(ValueError, match="no gradients"):
        opt.apply_gradients([(None, np.ones(2, np.float32))])
    with pytest.raises(TypeError, match="pair"):
        opt.apply_gradients([np.ones(2, np.float32)])
    with pytest.raises(ValueError, match="shape"):
        opt.apply_gradients([(np.ones(3, np.float32), np.ones(2, np.float32))])
    assert opt.iterations == 0 and opt.dynamic_counter == 0


KERAS3_LSO = {"module": "keras.optimizers", "class_name": "LossScaleOptimizer", "config": {
    "name": "loss_scale_optimizer",
    "inner_optimizer": {"module": "keras.src.backend.torch.optimizers.torch_adam",
                        "class_name": "Adam", "registered_name": "Adam", "config": {
                            "name": "adam", "learning_rate": 0.0010000000474974513,
                            "weight_decay": None, "clipnorm": None, "global_clipnorm": None,
                            "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
                            "ema_overwrite_frequency": None, "loss_scale_factor": None,
                            "gradient_accumulation_steps": None, "beta_1": 0.9,
                            "beta_2": 0.999, "epsilon": 1e-07, "amsgrad": False}},
    "initial_scale": 32768.0, "dynamic_growth_steps": 2000}, "registered_name": None}


def test_lso_from_a_keras3_config():
    opt = optimizers.deserialize(KERAS3_LSO)
    assert isinstance(opt, LossScaleOptimizer) and opt.dynamic
    assert opt.initial_scale == 32768.0 and opt.dynamic_growth_steps == 2000
    assert isinstance(opt.inner_optimizer, optimizers.Adam)
    assert opt.name == "loss_scale_optimizer"


class MySGD(optimizers.SGD):
    pass


def test_lso_around_a_user_optimizer_reloads_with_custom_objects():
    opt = LossScaleOptimizer(MySGD(learning_rate=0.3), initial_scale=8)
    config = optimizers.serialize(opt)
    with pytest.raises(ValueError, match="unknown optimizer class 'MySGD'"):
        optimizers.deserialize(config)
    again = optimizers.deserialize(config, custom_objects={"MySGD": MySGD})
    assert type(again.inner_optimizer) is MySGD and again.learning_rate == 0.3
    with pytest.raises(TypeError, match="subclass of mixedcore.optimizers.Optimizer"):
        optimizers.deserialize(config, custom_objects={"MySGD": dict})
    with pytest.raises(TypeError, match="custom_objects must be a dict"):
        optimizers.deserialize(config, custom_objects=[MySGD])


def test_lso_shares_only_what_tf_keras_shares():
    inner = optimizers.Adam(learning_rate=0.01, beta_1=0.8)
    opt = LossScaleOptimizer(inner)
    assert opt.learning_rate == 0.01 and opt.iterations == 0
    assert opt.use_ema is False and opt.ema_momentum == 0.99
    opt.learning_rate = 0.5
    opt.iterations = 3
    assert inner.learning_rate == 0.5 and inner.iterations == 3
    assert opt.name == "loss_scale_optimizer" and inner.name == "adam"
    for name in ("beta_1", "epsilon", "amsgrad", "weight_decay", "clipnorm", "global_clipnorm",
                 "clipvalue", "ema_overwrite_frequency"):
        with pytest.raises(AttributeError, match=f"no attribute '{name}'.*inner_optimizer"):
            getattr(opt, name)
        assert not hasattr(opt, name)
    with pytest.raises(AttributeError, match="'beta_1'.*set inner_optimizer.beta_1 = 0.7"):
        opt.beta_1 = 0.7
    assert inner.beta_1 == 0.8 and "beta_1" not in vars(opt)
    with pytest.raises(AttributeError, match="use_ema"):
        opt.use_ema = True
    assert inner.use_ema is False
    with pytest.raises(AttributeError, match="no attribute 'momentum'$"):
        opt.momentum
    opt.note = "a user's attribute"               # names the inner optimizer lacks stay free
    assert opt.note == "a user's attribute" and not hasattr(inner, "note")
    again = LossScaleOptimizer.from_config(opt.get_config())
    assert again.inner_optimizer.beta_1 == 0.8


def test_lso_dynamic_growth_steps_whole_floats():
    opt = LossScaleOptimizer(optimizers.SGD(), dynamic_growth_steps=3.0)
    assert opt.dynamic_growth_steps == 3 and type(opt.dynamic_growth_steps) is int
    assert LossScaleOptimizer(optimizers.SGD(),
                              dynamic_growth_steps=np.float32(2)).dynamic_growth_steps == 2
    assert LossScaleOptimizer.from_config(opt.get_config()).dynamic_growth_steps == 3
    grads = [np.ones(2, np.float32)]
    for step in range(3):                         # the scale doubles after 3 finite steps
        opt.get_scaled_loss(1.0)
        opt.apply_gradients(zip(opt.get_unscaled_gradients(grads), [np.ones(2, np.float32)]))
        assert opt.loss_scale == (2.0 ** 16 if step == 2 else 2.0 ** 15)
    with pytest.raises(ValueError, match=r"dynamic_growth_steps must be a whole number, got 2\.5"):
        LossScaleOptimizer(optimizers.SGD(), dynamic_growth_steps=2.5)
    with pytest.raises(TypeError, match="dynamic_growth_steps must be an int, got str: '3'"):
        LossScaleOptimizer(optimizers.SGD(), dynamic_growth_steps="3")
    with pytest.raises(ValueError, match=r"dynamic_growth_steps must be >= 1, got 0\.0"):
        LossScaleOptimizer(optimizers.SGD(), dynamic_growth_steps=0.0)


# Keras 3 writes these into a LossScaleOptimizer's config (its base optimizer's arguments)
KERAS3_BASE = {"weight_decay": None, "clipnorm": None, "global_clipnorm": None,
               "clipvalue": None, "use_ema": False, "ema_momentum": 0.99,
               "ema_overwrite_frequency": None, "loss_scale_factor": None,
               "gradient_accumulation_steps": None}
KERAS3_BASE_CASES = [
    {}, KERAS3_BASE, {"weight_decay": None}, {"use_ema": 0}, {"weight_decay": 0.1},
    {"clipnorm": 1.0}, {"use_ema": True}, {"ema_momentum": 0.5},
    {"gradient_accumulation_steps": 2}, {"loss_scale_factor": 128.0}, {"foo": 1},
    {"learning_rate": 0.001}, {"jit_compile": True}, {"is_legacy_optimizer": False},
]


def _mixedcore_from_keras3_config(extra):
    config = dict(KERAS3_LSO, config=dict(KERAS3_LSO["config"], **extra))
    try:
        return optimizers.deserialize(config)
    except ValueError as exc:
        return exc


def test_lso_keras3_base_optimizer_arguments():
    opt = _mixedcore_from_keras3_config(KERAS3_BASE)
    assert isinstance(opt, LossScaleOptimizer) and opt.initial_scale == 32768.0
    assert opt.dynamic_growth_steps == 2000 and opt.name == "loss_scale_optimizer"
    assert LossScaleOptimizer(optimizers.SGD(), weight_decay=None, use_ema=False).dynamic
    with pytest.raises(ValueError, match=r"does not take weight_decay=0\.1 \(only None.*"
                                         r"set weight_decay on the inner optimizer"):
        LossScaleOptimizer(optimizers.SGD(), weight_decay=0.1)
    with pytest.raises(ValueError, match=r"does not take ema_momentum=0\.5 \(only 0\.99"):
        LossScaleOptimizer(optimizers.SGD(), ema_momentum=0.5)
    with pytest.raises(ValueError, match=r"does not take use_ema=True"):
        LossScaleOptimizer.from_config(dict(KERAS3_LSO["config"], use_ema=True))
    with pytest.raises(ValueError, match=r"unexpected arguments \['foo', 'lr'\]"):
        LossScaleOptimizer(optimizers.SGD(), foo=1, lr=0.1)


@pytest.mark.keras
@pytest.mark.parametrize("extra", KERAS3_BASE_CASES, ids=lambda e: ",".join(e) or "none")
def test_lso_keras3_base_arguments_as_keras(keras, extra):
    """Keras 3 and mixedcore accept and refuse the same LossScaleOptimizer configs."""
    lso = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
    config = dict(lso.get_config(), **extra)
    try:
        keras.optimizers.LossScaleOptimizer.from_config(dict(config))   # it pops keys
        keras_outcome = None
    except ValueError:
        keras_outcome = ValueError
    ours = _mixedcore_from_keras3_config(extra)
    assert (type(ours) if isinstance(ours, Exception) else None) is keras_outcome
    if keras_outcome is None:
        assert isinstance(ours, LossScaleOptimizer)
        loaded = optimizers.deserialize(keras.optimizers.serialize(
            keras.optimizers.LossScaleOptimizer.from_config(dict(config))))
        assert loaded.initial_scale == 32768.0 and loaded.dynamic_growth_steps == 2000


@pytest.mark.keras
def test_lso_dynamic_growth_steps_as_keras(keras):
    lso = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(), dynamic_growth_steps=3.0)
    assert lso.dynamic_growth_steps == 3.0
    ours = optimizers.deserialize(keras.optimizers.serialize(lso))
    assert ours.dynamic_growth_steps == 3
    with pytest.raises(AttributeError):
        keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam()).beta_1


TF_KERAS_PYTHON = os.environ.get("MIXEDCORE_TF_KERAS_PYTHON", "/tmp/tfvenv/bin/python")
TF_KERAS_PROBE = """
import json, tf_keras
opt = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.Adam(beta_1=0.8))
names = json.loads(input())
print(json.dumps({name: hasattr(opt, name) for name in names}))
print(json.dumps(tf_keras.mixed_precision.LossScaleOptimizer(
    tf_keras.optimizers.SGD(), dynamic_growth_steps=3.0).dynamic_growth_steps))
"""


def test_lso_attributes_as_tf_keras():
    """The wrapper's readable names are tf.keras 2's (an interpreter with tf-keras is found at
    $MIXEDCORE_TF_KERAS_PYTHON, else the test is skipped); ``name`` is Keras 3's addition."""
    if not os.path.exists(TF_KERAS_PYTHON):
        pytest.skip(f"no Python with tf-keras at {TF_KERAS_PYTHON} "
                    f"(set MIXEDCORE_TF_KERAS_PYTHON)")
    names = ["beta_1", "beta_2", "epsilon", "amsgrad", "weight_decay", "clipnorm",
             "global_clipnorm", "clipvalue", "ema_overwrite_frequency", "jit_compile",
             "learning_rate", "iterations", "use_ema", "ema_momentum", "inner_optimizer",
             "dynamic", "initial_scale", "dynamic_growth_steps", "loss_scale"]
    done = subprocess.run([TF_KERAS_PYTHON, "-c", TF_KERAS_PROBE], input=json.dumps(names),
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if done.returncode != 0:
        pytest.skip(f"tf-keras could not run: {done.stderr[-300:]}")
    lines = done.stdout.strip().splitlines()
    tf_has, tf_growth = json.loads(lines[-2]), json.loads(lines[-1])
    opt = LossScaleOptimizer(optimizers.Adam(beta_1=0.8))
    assert {name: hasattr(opt, name) for name in names} == tf_has
    assert tf_growth == 3 == LossScaleOptimizer(optimizers.SGD(),
                                                dynamic_growth_steps=3.0).dynamic_growth_steps


def test_lso_wraps_an_optimizer_once():
    inner = optimizers.SGD()
    LossScaleOptimizer(inner)
    with pytest.raises(ValueError, match="already wrapped by a LossScaleOptimizer"):
        LossScaleOptimizer(inner)


def test_lso_warns_once_when_the_loss_was_not_scaled():
    opt = LossScaleOptimizer(optimizers.SGD(0.1), initial_scale=4)
    w = np.ones(1, np.float32)
    g = np.ones(1, np.float32)
    with pytest.warns(UserWarning, match="get_scaled_loss.*shown once"):
        opt.apply_gradients([(g, w)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.apply_gradients([(g, w)])              # once only
        fresh = LossScaleOptimizer(optimizers.SGD(0.1), initial_scale=4)
        fresh.get_scaled_loss(np.float32(2.0))
        (g,) = fresh.get_unscaled_gradients([np.float32(4) * g])
        fresh.apply_gradients([(g, w)])            # the tf.keras steps: no warning


def test_fit_warns_naming_the_weight_when_steps_keep_overflowing():
    import mixedcore
    from mixedcore import layers, models
    with mixedcore.policy_scope("mixed_float16"):
        model = models.Sequential([layers.Input((4,)), layers.Dense(3, name="big"),
                                   layers.Dense(1, name="out", dtype="float32")])
    # a target of 1e6: the float16 backward pass overflows at every scale
    model.compile("sgd", "mse")
    x = np.ones((8, 4), np.float32)
    y = np.full((8, 1), 1e6, np.float32)
    with pytest.warns(RuntimeWarning, match=r"steps in a row were skipped .*'big/"):
        model.fit(x, y, epochs=30, batch_size=8, verbose=0)
    assert model.optimizer.loss_scale == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model.fit(x, y, epochs=2, batch_size=8, verbose=0)       # once per model
