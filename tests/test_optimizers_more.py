"""RMSprop, AdamW, Adagrad, Nadam and the learning-rate schedules: formulas, Keras 3's values,
configs and errors."""
import json
import math
import re

import numpy as np
import pytest

from mixedcore import optimizers
from mixedcore.optimizers import schedules


def grads_sequence(shape, steps, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(steps)]


# -- hand-written formulas (float64 references) -------------------------------------------------

@pytest.mark.parametrize("momentum, centered", [(0.0, False), (0.7, False), (0.0, True),
                                                (0.5, True)])
def test_rmsprop_matches_formula(momentum, centered):
    w = np.linspace(-1, 1, 5).astype(np.float32)
    ref = w.astype(np.float64)
    v, a, m = np.zeros(5), np.zeros(5), np.zeros(5)
    lr, rho, eps = 0.01, 0.8, 1e-6
    opt = optimizers.RMSprop(learning_rate=lr, rho=rho, momentum=momentum, epsilon=eps,
                             centered=centered)
    for g in grads_sequence(5, 6, seed=4):
        v = rho * v + (1 - rho) * g * g
        if centered:
            a = rho * a + (1 - rho) * g
            inc = lr * g / np.sqrt(v - a * a + eps)
        else:
            inc = lr * g / np.sqrt(v + eps)
        if momentum:
            m = momentum * m + inc
            ref = ref - m
        else:
            ref = ref - inc
        opt.apply_gradients([(g, w)])
        np.testing.assert_allclose(w, ref, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(opt.get_slot(w, "velocity"), v, rtol=1e-5)
    assert ("momentum" in opt.get_config()) and (opt.get_config()["centered"] is centered)
    if not centered:
        with pytest.raises(KeyError, match="average_gradient"):
            opt.get_slot(w, "average_gradient")


def test_adagrad_matches_formula():
    w = np.array([1.0, -0.5, 0.25], np.float32)
    ref = w.astype(np.float64)
    acc = np.full(3, 0.3)
    opt = optimizers.Adagrad(learning_rate=0.1, initial_accumulator_value=0.3, epsilon=1e-5)
    for g in grads_sequence(3, 5, seed=5):
        acc = acc + g * g
        ref = ref - 0.1 * g / np.sqrt(acc + 1e-5)
        opt.apply_gradients([(g, w)])
        np.testing.assert_allclose(w, ref, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(opt.get_slot(w, "accumulator"), acc, rtol=1e-6)


def test_nadam_matches_formula():
    w = np.array([0.3, -1.2, 2.0], np.float32)
    b = np.array([0.5], np.float32)
    refs = {"w": w.astype(np.float64), "b": b.astype(np.float64)}
    ms = {"w": np.zeros(3), "b": np.zeros(1)}
    vs = {"w": np.zeros(3), "b": np.zeros(1)}
    lr, b1, b2, eps = 0.02, 0.85, 0.99, 1e-7
    opt = optimizers.Nadam(learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps)
    u_prod = 1.0
    gws, gbs = grads_sequence(3, 6, seed=6), grads_sequence(1, 6, seed=7)
    for t, (gw, gb) in enumerate(zip(gws, gbs), start=1):
        u_t = b1 * (1 - 0.5 * 0.96 ** t)
        u_n = b1 * (1 - 0.5 * 0.96 ** (t + 1))
        u_prod *= u_t
        for key, g in (("w", gw), ("b", gb)):
            ms[key] = b1 * ms[key] + (1 - b1) * g
            vs[key] = b2 * vs[key] + (1 - b2) * g * g
            m_hat = u_n * ms[key] / (1 - u_prod * u_n) + (1 - u_t) * g / (1 - u_prod)
            v_hat = vs[key] / (1 - b2 ** t)
            refs[key] = refs[key] - lr * m_hat / (np.sqrt(v_hat) + eps)
        opt.apply_gradients([(gw, w), (gb, b)])
        np.testing.assert_allclose(w, refs["w"], rtol=3e-6, atol=1e-7)
        np.testing.assert_allclose(b, refs["b"], rtol=3e-6, atol=1e-7)
    assert opt.u_product == pytest.approx(u_prod, rel=1e-12)


def test_adamw_is_adam_after_decoupled_decay():
    w1 = np.array([1.0, -2.0], np.float32)
    w2 = w1.copy()
    g = np.array([0.5, 0.25], np.float32)
    optimizers.AdamW(learning_rate=0.1, weight_decay=0.2).apply_gradients([(g, w1)])
    w2 -= w2 * np.float32(0.2 * 0.1)
    optimizers.Adam(learning_rate=0.1).apply_gradients([(g, w2)])
    np.testing.assert_array_equal(w1, w2)
    assert optimizers.AdamW().weight_decay == 0.004
    with pytest.raises(ValueError, match="AdamW: weight_decay must be a float, got None"):
        optimizers.AdamW(weight_decay=None)


def test_float64_and_16bit_variables_keep_their_dtype():
    for cls in (optimizers.RMSprop, optimizers.Adagrad, optimizers.Nadam, optimizers.AdamW):
        for dtype in (np.float64, np.float16):
            w = np.ones(3, dtype)
            cls(learning_rate=0.1).apply_gradients([(np.array([1.0, -1.0, 0.5]), w)])
            assert w.dtype == dtype and np.all(w != 1.0), (cls, dtype)


# -- against Keras 3 ----------------------------------------------------------------------------

KERAS_CASES = [
    ("RMSprop", {}),
    ("RMSprop", {"learning_rate": 0.01, "rho": 0.8, "momentum": 0.6, "epsilon": 1e-5}),
    ("RMSprop", {"learning_rate": 0.01, "centered": True, "momentum": 0.3, "clipnorm": 1.0}),
    ("AdamW", {"learning_rate": 0.01}),
    ("AdamW", {"learning_rate": 0.01, "weight_decay": 0.1, "amsgrad": True,
               "global_clipnorm": 0.5}),
    ("Adagrad", {"learning_rate": 0.05}),
    ("Adagrad", {"learning_rate": 0.05, "initial_accumulator_value": 0.0, "epsilon": 1e-3,
                 "clipvalue": 0.5}),
    ("Nadam", {"learning_rate": 0.01}),
    ("Nadam", {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.95, "weight_decay": 0.05}),
]


def _run_against_keras(keras, cls, kwargs, make_schedule=None, steps=5):
    import torch
    vars_np = [np.linspace(-1, 1, 6).astype(np.float32).reshape(2, 3),
               np.array([0.5, -0.25, 2.0], np.float32)]
    kvars = [keras.Variable(v.copy()) for v in vars_np]
    kkw, mkw = dict(kwargs), dict(kwargs)
    if make_schedule is not None:
        kkw["learning_rate"] = make_schedule(keras.optimizers.schedules)
        mkw["learning_rate"] = make_schedule(schedules)
    kopt = getattr(keras.optimizers, cls)(**kkw)
    mopt = getattr(optimizers, cls)(**mkw)
    rng = np.random.default_rng(11)
    for _ in range(steps):
        grads = [rng.standard_normal(v.shape).astype(np.float32) * 2 for v in vars_np]
        kopt.apply_gradients([(torch.tensor(g), v) for g, v in zip(grads, kvars)])
        mopt.apply_gradients(list(zip(grads, vars_np)))
    for v, kv in zip(vars_np, kvars):
        np.testing.assert_allclose(v, keras.ops.convert_to_numpy(kv), rtol=3e-6, atol=3e-7)
    return mopt, kopt


@pytest.mark.keras
@pytest.mark.parametrize("cls,kwargs", KERAS_CASES)
def test_updates_and_configs_match_keras(keras, cls, kwargs):
    mopt, kopt = _run_against_keras(keras, cls, kwargs)
    mine, theirs = mopt.get_config(), kopt.get_config()
    assert mine["name"] == re.sub(r"_\d+$", "", theirs["name"])   # Keras numbers repeats
    assert set(mine) == set(theirs)
    assert {k: v for k, v in mine.items() if k != "name"} == pytest.approx(
        {k: v for k, v in theirs.items() if k != "name"})
    # a Keras config loads into the same optimizer
    again = optimizers.deserialize({"class_name": cls, "config": theirs})
    assert type(again) is type(mopt)
    loaded = again.get_config()
    assert loaded.pop("name") == theirs["name"]
    assert loaded == pytest.approx({k: v for k, v in mine.items() if k != "name"})


SCHEDULES = {
    "exponential": lambda s: s.ExponentialDecay(0.02, decay_steps=3, decay_rate=0.5),
    "exponential_staircase": lambda s: s.ExponentialDecay(0.1, 2, 0.7, staircase=True),
    "piecewise": lambda s: s.PiecewiseConstantDecay([1, 3], [0.1, 0.05, 0.01]),
    "cosine": lambda s: s.CosineDecay(0.1, decay_steps=4, alpha=0.1),
    "cosine_warmup": lambda s: s.CosineDecay(0.0, decay_steps=3, warmup_target=0.2,
                                             warmup_steps=2),
}


@pytest.mark.keras
@pytest.mark.parametrize("which", sorted(SCHEDULES))
def test_schedule_values_match_keras(keras, which):
    make = SCHEDULES[which]
    theirs, mine = make(keras.optimizers.schedules), make(schedules)
    for step in [0, 1, 2, 2.5, 3, 4, 5, 7, 20]:
        expected = float(keras.ops.convert_to_numpy(theirs(step)))
        assert mine(step) == pytest.approx(expected, rel=1e-6, abs=1e-9), step
    assert mine.get_config() == theirs.get_config()
    assert schedules.serialize(mine) == keras.optimizers.schedules.serialize(theirs)


@pytest.mark.keras
@pytest.mark.parametrize("cls", ["SGD", "Adam", "RMSprop"])
def test_optimizer_with_schedule_matches_keras(keras, cls):
    make = SCHEDULES["exponential"]
    mopt, kopt = _run_against_keras(keras, cls, {}, make_schedule=make, steps=6)
    theirs = kopt.get_config()
    mine = mopt.get_config()
    assert mine["learning_rate"] == theirs["learning_rate"]
    loaded = optimizers.deserialize({"class_name": cls, "config": theirs})
    assert isinstance(loaded.learning_rate, schedules.ExponentialDecay)
    again = loaded.get_config()
    assert again.pop("learning_rate") == mine.pop("learning_rate")
    assert again.pop("name") == theirs["name"]
    mine.pop("name")
    assert again == pytest.approx(mine)


# -- schedules without Keras --------------------------------------------------------------------

def test_schedule_formulas():
    exp = schedules.ExponentialDecay(1.0, decay_steps=10, decay_rate=0.5)
    assert exp(0) == 1.0 and exp(10) == 0.5 and exp(5) == pytest.approx(math.sqrt(0.5))
    stair = schedules.ExponentialDecay(1.0, 10, 0.5, staircase=True)
    assert stair(9.9) == 1.0 and stair(19) == 0.5
    pw = schedules.PiecewiseConstantDecay([2, 5], [1.0, 0.5, 0.1])
    assert [pw(s) for s in (0, 2, 3, 5, 6)] == [1.0, 1.0, 0.5, 0.5, 0.1]
    cos = schedules.CosineDecay(2.0, decay_steps=4)
    assert [cos(s) for s in (0, 2, 4, 9)] == pytest.approx([2.0, 1.0, 0.0, 0.0], abs=1e-15)
    warm = schedules.CosineDecay(0.0, decay_steps=2, warmup_target=1.0, warmup_steps=4)
    assert [warm(s) for s in (0, 1, 4, 5, 6, 100)] == pytest.approx(
        [0.0, 0.25, 1.0, 0.5, 0.0, 0.0], abs=1e-15)


def test_optimizer_uses_schedule_of_iterations():
    w = np.zeros(1, np.float32)
    opt = optimizers.SGD(learning_rate=schedules.PiecewiseConstantDecay([0, 1], [1.0, 0.5, 0.25]))
    for _ in range(4):
        opt.apply_gradients([(np.ones(1, np.float32), w)])
    # steps 0, 1, 2, 3 use 1.0, 0.5, 0.25, 0.25
    np.testing.assert_allclose(w, [-2.0])


def test_schedule_config_round_trip_through_json():
    sched = schedules.CosineDecay(0.1, 100, alpha=0.05, warmup_target=0.3, warmup_steps=10)
    opt = optimizers.AdamW(learning_rate=sched, weight_decay=0.01)
    text = json.dumps(optimizers.serialize(opt))
    loaded = optimizers.deserialize(json.loads(text))
    assert isinstance(loaded, optimizers.AdamW)
    assert loaded.learning_rate.get_config() == sched.get_config()
    assert loaded.get_config() == opt.get_config()
    assert loaded.get_config()["learning_rate"]["class_name"] == "CosineDecay"


class HalvingSchedule(schedules.LearningRateSchedule):
    def __init__(self, start):
        self.start = start

    def __call__(self, step):
        return self.start / 2 ** step

    def get_config(self):
        return {"start": self.start}


def test_custom_schedule_needs_custom_objects():
    opt = optimizers.SGD(learning_rate=HalvingSchedule(0.4))
    cfg = optimizers.serialize(opt)
    assert cfg["config"]["learning_rate"]["registered_name"] == "HalvingSchedule"
    with pytest.raises(ValueError, match="unknown learning-rate schedule 'HalvingSchedule'"):
        optimizers.deserialize(cfg)
    loaded = optimizers.deserialize(cfg, custom_objects={"HalvingSchedule": HalvingSchedule})
    assert loaded.learning_rate(1) == 0.2


def test_base_schedule_must_be_subclassed():
    base = schedules.LearningRateSchedule()
    with pytest.raises(NotImplementedError, match="__call__"):
        base(0)
    with pytest.raises(NotImplementedError, match="get_config"):
        schedules.serialize(base)


@pytest.mark.parametrize("make, error, match", [
    (lambda: schedules.ExponentialDecay(0.1, 0, 0.5), ValueError, "decay_steps must be"),
    (lambda: schedules.ExponentialDecay(0.1, 10, 0.5, staircase=1), TypeError, "staircase"),
    (lambda: schedules.ExponentialDecay(0.1, 10, -0.5), ValueError, "decay_rate must be"),
    (lambda: schedules.ExponentialDecay("a", 10, 0.5), TypeError, "initial_learning_rate"),
    (lambda: schedules.CosineDecay(0.1, -1), ValueError, "decay_steps"),
    (lambda: schedules.CosineDecay(0.1, 10, warmup_steps=-2), ValueError, "warmup_steps"),
    (lambda: schedules.PiecewiseConstantDecay([1, 2], [0.1, 0.2]), ValueError, "one more"),
    (lambda: schedules.PiecewiseConstantDecay([3, 2], [0.1, 0.2, 0.3]), ValueError,
     "strictly increasing"),
    (lambda: schedules.PiecewiseConstantDecay(5, [0.1]), TypeError, "lists"),
    (lambda: schedules.ExponentialDecay(0.1, 10, 0.5)(-1), ValueError, "step must be"),
    (lambda: schedules.CosineDecay(0.1, 10)("x"), TypeError, "step must be a number"),
    (lambda: schedules.serialize(lambda s: 0.1), TypeError, "LearningRateSchedule"),
    (lambda: schedules.deserialize({"class_name": "Nope", "config": {}}), ValueError,
     "unknown learning-rate schedule 'Nope'"),
    (lambda: schedules.deserialize([1]), ValueError, "class_name"),
    (lambda: schedules.deserialize({"class_name": "CosineDecay", "config": 3}), ValueError,
     "'config' must be a dict"),
    (lambda: schedules.deserialize({"class_name": "X", "config": {}}, custom_objects={"X": int}),
     TypeError, "subclass of LearningRateSchedule"),
])
def test_schedule_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


# -- names, get, errors -------------------------------------------------------------------------

def test_get_names_and_default_names():
    expected = {"rmsprop": (optimizers.RMSprop, "rm_sprop"), "adamw": (optimizers.AdamW, "adam_w"),
                "Adagrad": (optimizers.Adagrad, "adagrad"), "NADAM": (optimizers.Nadam, "nadam")}
    for key, (cls, name) in expected.items():
        opt = optimizers.get(key)
        assert type(opt) is cls and opt.name == name
        assert type(optimizers.deserialize(optimizers.serialize(opt))) is cls


@pytest.mark.parametrize("make, error, match", [
    (lambda: optimizers.RMSprop(rho=1.5), ValueError, "rho"),
    (lambda: optimizers.RMSprop(momentum=-0.1), ValueError, "momentum"),
    (lambda: optimizers.RMSprop(epsilon=-1.0), ValueError, "epsilon"),
    (lambda: optimizers.RMSprop(centered="yes"), TypeError, "centered"),
    (lambda: optimizers.Adagrad(initial_accumulator_value=-0.1), ValueError,
     "initial_accumulator_value"),
    (lambda: optimizers.Adagrad(epsilon="small"), TypeError, "epsilon"),
    (lambda: optimizers.Nadam(beta_1=1.0), ValueError, "beta_1"),
    (lambda: optimizers.Nadam(beta_2=-0.1), ValueError, "beta_2"),
    (lambda: optimizers.AdamW(weight_decay=-0.1), ValueError, "weight_decay"),
    (lambda: optimizers.Nadam(amsgrad=True), TypeError, "unexpected argument"),
])
def test_bad_hyperparameters(make, error, match):
    with pytest.raises(error, match=match):
        make()


# -- inside LossScaleOptimizer ------------------------------------------------------------------

def test_loss_scale_optimizer_keeps_inner_schedule_in_config():
    inner = optimizers.RMSprop(learning_rate=schedules.ExponentialDecay(0.01, 5, 0.5),
                               centered=True)
    lso = optimizers.LossScaleOptimizer(inner)
    again = optimizers.deserialize(json.loads(json.dumps(optimizers.serialize(lso))))
    assert isinstance(again, optimizers.LossScaleOptimizer)
    assert isinstance(again.inner_optimizer, optimizers.RMSprop)
    assert again.inner_optimizer.get_config() == inner.get_config()

