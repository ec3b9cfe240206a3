"""SGD (plain, momentum, Nesterov) and Adam against hand-written numpy formulas."""
import math

import ml_dtypes
import numpy as np
import pytest

from mixedcore import optimizers


def grads_sequence(shape, steps, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(steps)]


def test_sgd_plain_matches_formula():
    w = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    expected = w.copy()
    opt = optimizers.SGD(learning_rate=0.1)
    for g in grads_sequence(w.shape, 5):
        expected = expected - np.float32(0.1) * g
        assert opt.apply_gradients([(g, w)]) == opt.iterations
        np.testing.assert_array_equal(w, expected)
    assert opt.iterations == 5


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_matches_formula(nesterov):
    w = np.linspace(-1, 1, 7).astype(np.float32)
    ref_w, m = w.astype(np.float64), np.zeros(7)
    lr, mom = 0.05, 0.9
    opt = optimizers.SGD(learning_rate=lr, momentum=mom, nesterov=nesterov)
    for g in grads_sequence(w.shape, 6, seed=1):
        m = mom * m - lr * g
        ref_w = ref_w + (mom * m - lr * g if nesterov else m)
        opt.apply_gradients([(g, w)])
        np.testing.assert_allclose(w, ref_w, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(opt.get_slot(w, "momentum"), m, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("beta_1, beta_2, epsilon", [(0.9, 0.999, 1e-7), (0.5, 0.9, 1e-3)])
def test_adam_matches_formula(beta_1, beta_2, epsilon):
    w = np.array([0.3, -1.2, 2.0, 0.0], np.float32)
    b = np.array([0.1], np.float32)
    ref = {id(w): w.astype(np.float64), id(b): b.astype(np.float64)}
    m = {id(w): np.zeros(4), id(b): np.zeros(1)}
    v = {id(w): np.zeros(4), id(b): np.zeros(1)}
    lr = 0.01
    opt = optimizers.Adam(learning_rate=lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
    gws = grads_sequence(4, 8, seed=2)
    gbs = grads_sequence(1, 8, seed=3)
    for step, (gw, gb) in enumerate(zip(gws, gbs), start=1):
        for var, g in ((w, gw), (b, gb)):
            k = id(var)
            m[k] = beta_1 * m[k] + (1 - beta_1) * g
            v[k] = beta_2 * v[k] + (1 - beta_2) * g * g
            alpha = lr * math.sqrt(1 - beta_2 ** step) / (1 - beta_1 ** step)
            ref[k] = ref[k] - alpha * m[k] / (np.sqrt(v[k]) + epsilon)
        opt.apply_gradients([(gw, w), (gb, b)])
        np.testing.assert_allclose(w, ref[id(w)], rtol=2e-6, atol=1e-7)
        np.testing.assert_allclose(b, ref[id(b)], rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(opt.get_slot(w, "m"), m[id(w)], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(opt.get_slot(w, "v"), v[id(w)], rtol=1e-5, atol=1e-9)
    assert opt.iterations == 8


def test_adam_first_step_is_lr_times_sign():
    """At t = 1, m / sqrt(v) = g / |g|, so each weight moves by about lr against g."""
    w = np.zeros(3, np.float32)
    optimizers.Adam(learning_rate=0.25, epsilon=0.0).apply_gradients(
        [(np.array([3.0, -0.5, 1e-3], np.float32), w)])
    np.testing.assert_allclose(w, [-0.25, 0.25, -0.25], rtol=1e-6)


def test_none_gradients_skipped_and_float64_and_16bit_variables():
    w32 = np.ones(2, np.float32)
    w64 = np.ones(2, np.float64)
    w16 = np.ones(2, np.float16)
    wbf = np.ones(2, ml_dtypes.bfloat16)
    untouched = np.ones(2, np.float32)
    opt = optimizers.SGD(0.5)
    g = np.array([1.0, 2.0], np.float16)
    opt.apply_gradients([(g, w32), (g, w64), (g, w16), (g, wbf), (None, untouched)])
    for w in (w32, w64, w16, wbf):
        np.testing.assert_array_equal(w.astype(np.float64), [0.5, 0.0])
    assert w64.dtype == np.float64 and w16.dtype == np.float16
    np.testing.assert_array_equal(untouched, [1.0, 1.0])


def test_learning_rate_schedule():
    w = np.zeros(1, np.float32)
    opt = optimizers.SGD(learning_rate=lambda it: 1.0 / (it + 1))
    for _ in range(3):
        opt.apply_gradients([(np.ones(1, np.float32), w)])
    np.testing.assert_allclose(w, [-(1 + 1 / 2 + 1 / 3)], rtol=1e-6)


def test_configs_and_reprs():
    sgd = optimizers.SGD(learning_rate=0.2, momentum=0.5, nesterov=True)
    keras_common = {"name": "sgd", "learning_rate": 0.2, "weight_decay": None, "clipnorm": None,
                    "global_clipnorm": None, "clipvalue": None, "use_ema": False,
                    "ema_momentum": 0.99, "ema_overwrite_frequency": None,
                    "loss_scale_factor": None, "gradient_accumulation_steps": None}
    assert sgd.get_config() == dict(keras_common, momentum=0.5, nesterov=True)
    assert optimizers.SGD.from_config(sgd.get_config()).get_config() == sgd.get_config()
    assert repr(sgd) == "SGD(learning_rate=0.2, momentum=0.5, nesterov=True)"
    adam = optimizers.Adam()
    assert adam.get_config() == dict(keras_common, name="adam", learning_rate=0.001, beta_1=0.9,
                                     beta_2=0.999, epsilon=1e-7, amsgrad=False)
    again = optimizers.Adam.from_config(dict(adam.get_config(), name="Adam"))
    assert again.get_config() == dict(adam.get_config(), name="Adam")
    assert repr(optimizers.Adam(0.1, clipnorm=1.0)) == (
        "Adam(learning_rate=0.1, clipnorm=1.0, beta_1=0.9, beta_2=0.999, epsilon=1e-07, "
        "amsgrad=False)")
    assert optimizers.deserialize(optimizers.serialize(sgd)).get_config() == sgd.get_config()


def test_get():
    assert isinstance(optimizers.get("sgd"), optimizers.SGD)
    assert isinstance(optimizers.get("SGD"), optimizers.SGD)
    assert isinstance(optimizers.get("Adam"), optimizers.Adam)
    opt = optimizers.Adam(0.1)
    assert optimizers.get(opt) is opt
    got = optimizers.get({"class_name": "SGD", "config": {"learning_rate": 0.3}})
    assert isinstance(got, optimizers.SGD) and got.learning_rate == 0.3
    with pytest.raises(ValueError, match="Could not interpret optimizer identifier: 'adadelta'"):
        optimizers.get("adadelta")
    with pytest.raises(TypeError, match="optimizer identifier"):
        optimizers.get(3)
    with pytest.raises(ValueError, match="unknown optimizer class"):
        optimizers.get({"class_name": "Lion", "config": {}})


@pytest.mark.parametrize("make, exc", [
    (lambda: optimizers.SGD(momentum=1.5), ValueError),
    (lambda: optimizers.SGD(momentum=-0.1), ValueError),
    (lambda: optimizers.SGD(learning_rate=-1.0), ValueError),
    (lambda: optimizers.SGD(learning_rate="fast"), TypeError),
    (lambda: optimizers.SGD(nesterov="yes"), TypeError),
    (lambda: optimizers.Adam(beta_1=1.0), ValueError),
    (lambda: optimizers.Adam(beta_2=-0.5), ValueError),
    (lambda: optimizers.Adam(epsilon=float("nan")), ValueError),
    (lambda: optimizers.SGD(learning_rate=10 ** 400), ValueError),
])
def test_bad_hyperparameters(make, exc):
    with pytest.raises(exc):
        make()


def test_bad_apply_gradients():
    opt = optimizers.SGD()
    w = np.ones(3, np.float32)
    ro = np.ones(3, np.float32)
    ro.flags.writeable = False
    cases = [
        ([(np.ones(3), [1.0, 2.0, 3.0])], TypeError, "variable 0"),
        ([(np.ones(3), np.arange(3))], TypeError, "int64"),
        ([(np.ones(2, np.float32), w)], ValueError, r"shape \(2,\)"),
        ([(np.arange(3), w)], TypeError, "gradient 0 has dtype int64"),
        ([(np.ones(3), ro)], ValueError, "read-only"),
        ([(None, w)], ValueError, "no gradients"),
        ([], ValueError, "no gradients"),
        ([w], TypeError, "pair"),
        (5, TypeError, "iterable"),
    ]
    for arg, exc, text in cases:
        with pytest.raises(exc, match=text):
            opt.apply_gradients(arg)
    np.testing.assert_array_equal(w, 1.0)
    assert opt.iterations == 0
    with pytest.raises(ValueError):
        opt.iterations = -1
    opt.iterations = 7
    assert opt.iterations == 7


# -- Keras 3's common optimizer arguments -------------------------------------------------------

KERAS_CASES = [
    ("SGD", {"learning_rate": 0.1, "weight_decay": 0.05}),
    ("SGD", {"learning_rate": 0.1, "momentum": 0.9, "clipnorm": 0.5}),
    ("SGD", {"learning_rate": 0.1, "clipvalue": 0.3}),
    ("Adam", {"learning_rate": 0.01, "global_clipnorm": 0.7}),
    ("Adam", {"learning_rate": 0.01, "weight_decay": 0.1, "amsgrad": True}),
]


@pytest.mark.keras
@pytest.mark.parametrize("cls,kwargs", KERAS_CASES)
def test_common_arguments_match_keras(keras, cls, kwargs):
    import torch
    vars_np = [np.linspace(-1, 1, 6).astype(np.float32).reshape(2, 3),
               np.array([0.5, -0.25, 2.0], np.float32)]
    kvars = [keras.Variable(v.copy()) for v in vars_np]
    kopt = getattr(keras.optimizers, cls)(**kwargs)
    mopt = getattr(optimizers, cls)(**kwargs)
    rng = np.random.default_rng(3)
    for _ in range(4):
        grads = [rng.standard_normal(v.shape).astype(np.float32) * 2 for v in vars_np]
        kopt.apply_gradients([(torch.tensor(g), v) for g, v in zip(grads, kvars)])
        mopt.apply_gradients(list(zip(grads, vars_np)))
    for v, kv in zip(vars_np, kvars):
        np.testing.assert_allclose(v, keras.ops.convert_to_numpy(kv), rtol=2e-6, atol=2e-7)
    mine, theirs = mopt.get_config(), kopt.get_config()
    assert set(mine) == set(theirs)
    assert {k: v for k, v in mine.items() if k != "name"} == pytest.approx(
        {k: v for k, v in theirs.items() if k != "name"})


def test_weight_decay_and_exclusion():
    w, b = np.ones(3, np.float32), np.ones(3, np.float32)
    opt = optimizers.SGD(learning_rate=0.5, weight_decay=0.2)
    opt.exclude_from_weight_decay(var_list=[b])
    zero = np.zeros(3, np.float32)
    opt.apply_gradients([(zero, w), (zero, b)])
    np.testing.assert_allclose(w, 1 - 0.5 * 0.2)
    np.testing.assert_array_equal(b, 1.0)


def test_clipping_formulas():
    g = np.array([3.0, 4.0], np.float32)                  # norm 5
    w = np.zeros(2, np.float32)
    optimizers.SGD(learning_rate=1.0, clipnorm=1.0).apply_gradients([(g, w)])
    np.testing.assert_allclose(w, [-0.6, -0.8], rtol=1e-6)
    w = np.zeros(2, np.float32)
    optimizers.SGD(learning_rate=1.0, clipvalue=3.5).apply_gradients([(g, w)])
    np.testing.assert_array_equal(w, [-3.0, -3.5])
    a, b = np.zeros(1, np.float32), np.zeros(1, np.float32)
    optimizers.SGD(learning_rate=1.0, global_clipnorm=2.5).apply_gradients(
        [(np.array([3.0], np.float32), a), (np.array([4.0], np.float32), b)])
    np.testing.assert_allclose([a[0], b[0]], [-1.5, -2.0], rtol=1e-6)


def test_keras_and_tf_keras_configs_load():
    keras3 = {"name": "adam", "learning_rate": 0.002, "weight_decay": None, "clipnorm": None,
              "global_clipnorm": None, "clipvalue": None, "use_ema": False,
              "ema_momentum": 0.99, "ema_overwrite_frequency": None, "loss_scale_factor": None,
              "gradient_accumulation_steps": None, "beta_1": 0.9, "beta_2": 0.999,
              "epsilon": 1e-07, "amsgrad": False}
    opt = optimizers.deserialize({"class_name": "Adam", "config": keras3})
    assert opt.learning_rate == 0.002 and opt.name == "adam"
    tf2 = {"name": "SGD", "lr": 0.05, "decay": 0.0, "momentum": 0.0, "nesterov": False}
    assert optimizers.SGD.from_config(tf2).learning_rate == 0.05


@pytest.mark.parametrize("kwargs,error,match", [
    ({"clipnorm": 1.0, "clipvalue": 1.0}, ValueError, "only one of clipnorm"),
    ({"clipnorm": -1.0}, ValueError, "clipnorm"),
    ({"weight_decay": "x"}, TypeError, "weight_decay"),
    ({"use_ema": True}, ValueError, "use_ema"),
    ({"loss_scale_factor": 128.0}, ValueError, "LossScaleOptimizer"),
    ({"gradient_accumulation_steps": 4}, ValueError, "gradient_accumulation_steps"),
    ({"decay": 0.01}, ValueError, "decay"),
    ({"rho": 0.9}, TypeError, "unexpected argument"),
    ({"name": 3}, TypeError, "name"),
])
def test_common_arguments_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        optimizers.SGD(**kwargs)
