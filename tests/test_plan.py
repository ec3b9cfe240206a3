"""Compiled inference plans: ``kernels.Plan`` step by step against the kernel functions,
``kernels.add``, and models' plans against the graph run layer by layer (models/_plan.py)."""
import threading

import ml_dtypes
import numpy as np
import pytest

import mixedcore
from mixedcore import kernels, layers, models, quantizers

F32 = np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
DTYPES = [F32, BF16, F16]
POLICIES = ["float32", "mixed_float16", "mixed_bfloat16"]


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def rand(rng, shape, dtype, scale=1.0):
    return kernels.cast((rng.standard_normal(shape) * scale).astype(np.float32), dtype)


# -- kernels.add ---------------------------------------------------------------------------------

@pytest.mark.parametrize("da", DTYPES)
@pytest.mark.parametrize("db", DTYPES)
def test_add_is_the_float32_sum_activated_and_rounded_once(isa_level, da, db):
    rng = np.random.default_rng(1)
    for n in (0, 1, 15, 17, 1023, 1025, 70001):
        a, b = rand(rng, (n,), da, 4), rand(rng, (n,), db, 4)
        for act in (None, "relu", "relu6", "gelu", "silu"):
            for out in DTYPES:
                want = kernels.cast(a, F32) + kernels.cast(b, F32)
                want = kernels.cast(want, out) if act is None else \
                    kernels.activation(want, act, out_dtype=out)
                got = kernels.add(a, b, activation=act, out_dtype=out)
                assert same_bits(got, want), (n, act, out)


def test_add_special_values_and_layouts():
    a = np.array([np.inf, -np.inf, np.nan, 3e38, -0.0, 1.0], F32)
    b = np.array([-np.inf, -1.0, 1.0, 3e38, -0.0, -1.0], F32)
    got = kernels.add(a, b)
    with np.errstate(all="ignore"):
        assert same_bits(got, a + b)
    x = np.arange(24, dtype=F32).reshape(4, 6)
    assert same_bits(kernels.add(x[:, ::2], x.T.copy().T[:, 1::2]), x[:, ::2] + x[:, 1::2])
    assert same_bits(kernels.add(x.astype(">f4"), x), x + x)


def test_add_bad_input():
    x = np.ones(4, F32)
    with pytest.raises(TypeError, match=r"add: a must be a numpy.ndarray, got list"):
        kernels.add([1.0] * 4, x)
    with pytest.raises(TypeError, match=r"add: b must be float16, bfloat16 or float32, got "
                                        r"float64"):
        kernels.add(x, np.ones(4))
    with pytest.raises(ValueError, match=r"add: a and b must have one shape, got \(4,\) and "
                                         r"\(5,\)"):
        kernels.add(x, np.ones(5, F32))
    with pytest.raises(ValueError, match="add: unknown activation 'mish'"):
        kernels.add(x, x, activation="mish")
    with pytest.raises(TypeError, match="add: out_dtype must be float16, bfloat16 or float32"):
        kernels.add(x, x, out_dtype=np.float64)


# -- kernels.Plan, step by step ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_every_step_equals_its_kernel_function(isa_level, dtype):
    rng = np.random.default_rng(2)
    x = rand(rng, (2, 13, 11, 8), dtype)
    k3 = kernels.pack_conv(rand(rng, (3, 3, 8, 12), F32, 0.3), dtype=dtype)
    kg = kernels.pack_conv(rand(rng, (3, 3, 4, 6), F32, 0.3), groups=2, dtype=dtype)
    k1 = kernels.pack_conv(rand(rng, (1, 1, 12, 8), F32, 0.3), dtype=dtype)
    kd = rand(rng, (3, 3, 8, 2), dtype, 0.5)
    w = kernels.pack(rand(rng, (16, 5), F32, 0.3), dtype=dtype)
    bias12, bias16, bias5 = (rng.standard_normal(n).astype(F32) for n in (12, 16, 5))

    plan = kernels.Plan()
    i = plan.input(x.shape, dtype)
    h1 = plan.conv2d(i, k3, strides=2, padding="same", bias=bias12, activation="relu6",
                     out_dtype=dtype)
    h2 = plan.conv2d(h1, k1, activation="hard_silu", out_dtype=dtype)     # pointwise: the GEMM
    h3 = plan.add(h2, plan.conv2d(h1, k1, out_dtype=dtype), activation="relu", out_dtype=dtype)
    h4 = plan.conv2d(h3, kg, padding=((1, 0), (2, 1)), dilation_rate=(1, 2), out_dtype=F32)
    h5 = plan.depthwise_conv2d(i, kd, strides=(2, 1), padding=((0, 1), (1, 1)), bias=bias16,
                               activation="silu", out_dtype=dtype)
    h6 = plan.pool2d(h5, 3, strides=2, padding="same", mode="average")
    h7 = plan.pool2d(h5, 2, mode="max")
    flat = plan.reshape(h7, (2, plan.shape(h7)[1] * plan.shape(h7)[2], 16))
    h8 = plan.matmul(flat, w, bias=bias5, activation="gelu", out_dtype=dtype)
    plan.finish([h1, h2, h3, h4, h6, h8])
    got = plan.run([x])

    e1 = kernels.conv2d(x, k3, strides=2, padding="same", bias=bias12, activation="relu6",
                        out_dtype=dtype)
    e2 = kernels.conv2d(e1, k1, activation="hard_silu", out_dtype=dtype)
    e3 = kernels.add(e2, kernels.conv2d(e1, k1, out_dtype=dtype), activation="relu",
                     out_dtype=dtype)
    e4 = kernels.conv2d(e3, kg, groups=2, padding=((1, 0), (2, 1)), dilation_rate=(1, 2))
    e5 = kernels.depthwise_conv2d(x, kd, strides=(2, 1), padding=((0, 1), (1, 1)), bias=bias16,
                                  activation="silu", out_dtype=dtype)
    e6 = kernels.pool2d(e5, 3, strides=2, padding="same", mode="average")
    e7 = kernels.pool2d(e5, 2, mode="max")
    e8 = kernels.matmul(e7.reshape(2, -1, 16), w, bias=bias5, activation="gelu",
                        out_dtype=dtype)
    for g, e in zip(got, [e1, e2, e3, e4, e6, e8]):
        assert same_bits(g, e)
    # the same bits on every run, the outputs new arrays each time
    again = plan.run([x])
    assert all(same_bits(g, e) for g, e in zip(again, got))
    assert all(a is not b for a, b in zip(again, got))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 8, 20, 9), (1, 16, 40, 7), (1, 24, 64, 6),
                                   (3, 8, 32, 5), (3, 300, 33, 5), (1, 2100, 17, 3)])
def test_a_residual_is_the_product_then_the_sum(isa_level, dtype, shape):
    """conv2d / matmul with a residual: the bits of the step then ``add`` (the two last shapes
    are deeper than one K block, so the partial sums go through the accumulator first; rows of
    32 and 64 columns take the bfloat16 epilogue's paired path), with NaN, infinite, subnormal
    and overflowing values in the product and the residual."""
    kh, c, f, hw = shape
    rng = np.random.default_rng(kh * c + f)
    x = rand(rng, (2, hw, hw, c), dtype)
    res = rand(rng, (2, hw, hw, f), dtype, 2.0)
    big = float(ml_dtypes.finfo(dtype).max) / 4
    x[0, 0, 1] = big                              # products that overflow or come near it
    x[1, 1, 0, 0] = np.nan
    res[0, 1, 1, :4] = [np.nan, np.inf, -np.inf, float(ml_dtypes.finfo(dtype).smallest_subnormal)]
    res[1, 0, 0] = -big
    k = kernels.pack_conv(rand(rng, (kh, kh, c, f), F32, 1 / np.sqrt(kh * kh * c)), dtype=dtype)
    bias = rng.standard_normal(f).astype(F32)
    for act in (None, "relu", "gelu"):
        plan = kernels.Plan()
        i, r = plan.input(x.shape, dtype), plan.input(res.shape, dtype)
        conv = plan.conv2d(i, k, padding="same", bias=bias, activation=act, out_dtype=dtype,
                           residual=r)
        flat = plan.reshape(i, (2 * hw * hw, c))
        prod = plan.matmul(flat, k.matrices[0], activation=act, out_dtype=dtype,
                           residual=plan.reshape(r, (2 * hw * hw, f))) if kh == 1 else None
        plan.finish([conv] + ([prod] if prod is not None else []))
        got = plan.run([x, res])
        y = kernels.conv2d(x, k, padding="same", bias=bias, out_dtype=dtype)
        assert same_bits(got[0], kernels.add(y, res, activation=act, out_dtype=dtype))
        if prod is not None:
            y = kernels.matmul(x.reshape(-1, c), k.matrices[0], out_dtype=dtype)
            assert same_bits(got[1], kernels.add(y, res.reshape(-1, f), activation=act,
                                                 out_dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_layer_norm_step_is_the_kernel_function(isa_level, dtype):
    rng = np.random.default_rng(23)
    x = rand(rng, (3, 5, 40), dtype, 3.0)
    res = rand(rng, (3, 5, 40), F32)
    gamma, beta = rng.standard_normal(40).astype(F32), rng.standard_normal(40).astype(F32)
    plan = kernels.Plan()
    i, r = plan.input(x.shape, dtype), plan.input(res.shape, F32)
    outs = [plan.layer_norm(i, gamma, beta, epsilon=1e-5),
            plan.layer_norm(i, None, beta, residual=r, out_dtype=F32),
            plan.layer_norm(plan.reshape(i, (15, 40)), gamma)]
    plan.finish(outs)
    got = plan.run([x, res])
    want = [kernels.layer_norm(x, gamma, beta, epsilon=1e-5),
            kernels.layer_norm(x, None, beta, residual=res, out_dtype=F32),
            kernels.layer_norm(x.reshape(15, 40), gamma)]
    assert [op[2] for op in plan._ops] == ["layer_norm"] * 3
    for g, w in zip(got, want):
        assert same_bits(g, w)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_matmul_int8_step_is_quantize_rows_then_matmul_int8(isa_level, dtype):
    rng = np.random.default_rng(29)
    x = rand(rng, (3, 7, 70), dtype, 2.0)
    x[1, 2] = 0                                   # a row of zeros: scale 127 / 1e-7
    w = rng.integers(-127, 128, (70, 45)).astype(np.int8)
    packed = kernels.pack(w)
    b_scale = rng.uniform(20, 60, 45).astype(F32)
    bias = rng.standard_normal(45).astype(F32)
    plan = kernels.Plan()
    i = plan.input(x.shape, dtype)
    outs = [plan.matmul_int8(i, packed, b_scale, bias=bias, activation=act, out_dtype=out)
            for act, out in ((None, None), ("relu", dtype), ("gelu", dtype))]
    plan.finish(outs)
    got = plan.run([x])
    xq, xs = kernels.quantize_rows(x)
    for g, (act, out) in zip(got, ((None, None), ("relu", dtype), ("gelu", dtype))):
        want = kernels.matmul_int8(xq, packed, a_scale=xs, b_scale=b_scale, bias=bias,
                                   activation=act, out_dtype=out)
        assert g.shape == (3, 7, 45) and same_bits(g, want)
    assert [op[2] for op in plan._ops] == ["matmul_int8"] * 3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("zero_point", [False, True])
def test_a_layer_norm_quantizes_the_rows_its_int8_step_reads(isa_level, dtype, zero_point):
    """A layer normalization step followed by an int8 step on its rows quantizes them itself
    (the int8 step multiplies only), with zero points or not; the results are the separate
    calls' bits."""
    rng = np.random.default_rng(30)
    x = rand(rng, (4, 9, 96), dtype, 3.0)
    x[1, 2] = 1.5                                 # a constant row: beta
    gamma = rng.uniform(0.5, 2, 96).astype(F32)
    beta = rng.standard_normal(96).astype(F32)
    w96 = kernels.pack(rng.integers(-127, 128, (96, 40)).astype(np.int8))
    w48 = kernels.pack(rng.integers(-127, 128, (48, 24)).astype(np.int8))
    s40, s24 = rng.uniform(20, 60, 40).astype(F32), rng.uniform(20, 60, 24).astype(F32)
    plan = kernels.Plan()
    i = plan.input(x.shape, dtype)
    h = plan.add(i, i, out_dtype=dtype)           # an arena buffer the normalization reads last
    y = plan.layer_norm(h, gamma, beta, epsilon=1e-5)
    zp = {"zero_point": zero_point}
    fused = plan.matmul_int8(y, w96, s40, activation="gelu", out_dtype=dtype, **zp)
    again = plan.matmul_int8(y, w96, s40, **zp)  # a second reader quantizes for itself
    halves = plan.matmul_int8(plan.reshape(y, (4, 9, 2, 48)), w48, s24, **zp)
    z = plan.layer_norm(i, gamma, beta, epsilon=1e-5)
    after_view = plan.matmul_int8(plan.reshape(z, (36, 96)), w96, s40, **zp)
    plan.finish([y, fused, again, halves, after_view])
    assert plan._quantized_norms == {1, 5}
    got = plan.run([x])
    hk = kernels.add(x, x, out_dtype=dtype)
    yk = kernels.layer_norm(hk, gamma, beta, epsilon=1e-5)
    zk = kernels.layer_norm(x, gamma, beta, epsilon=1e-5)

    def product(rows, packed, b_scale, **kw):
        if zero_point:
            q, s, zero = kernels.quantize_rows(rows, zero_point=True)
            kw["a_zero"] = zero
        else:
            q, s = kernels.quantize_rows(rows)
        return kernels.matmul_int8(q, packed, a_scale=s, b_scale=b_scale, **kw)

    want = [yk, product(yk, w96, s40, activation="gelu", out_dtype=dtype),
            product(yk, w96, s40), product(yk.reshape(4, 9, 2, 48), w48, s24),
            product(zk.reshape(36, 96), w96, s40)]
    for g, wnt in zip(got, want):
        assert same_bits(g, wnt)
    steps = plan._core
    for bad in (-1, 0, 2, len(steps)):       # the sum, an int8 step, past the end
        with pytest.raises(ValueError, match=rf"PlanSteps.quantize_after: step {bad} is not a "
                                             r"layer normalization step"):
            steps.quantize_after(bad, 0, 0, 0)


def test_matmul_int8_step_errors():
    plan = kernels.Plan()
    i = plan.input((4, 16), F32)
    w = kernels.pack(np.ones((16, 8), np.int8))
    with pytest.raises(TypeError, match="int8 PackedMatrix"):
        plan.matmul_int8(i, kernels.pack(np.ones((16, 8), F32)), np.ones(8, F32))
    with pytest.raises(ValueError, match="cannot multiply b of shape"):
        plan.matmul_int8(i, kernels.pack(np.ones((12, 8), np.int8)), np.ones(8, F32))
    with pytest.raises(ValueError, match="b_scale must be a float32 array of shape"):
        plan.matmul_int8(i, w, np.ones(7, F32))
    with pytest.raises(ValueError, match="unknown activation"):
        plan.matmul_int8(i, w, np.ones(8, F32), activation="nope")
    j = plan.input((4, 16), np.int8)
    with pytest.raises(TypeError, match="has dtype int8"):
        plan.matmul_int8(j, w, np.ones(8, F32))
    with pytest.raises(TypeError, match=r"Plan.matmul_int8: zero_point must be a bool, got "
                                        r"str: 'yes'"):
        plan.matmul_int8(i, w, np.ones(8, F32), zero_point="yes")
    k = plan.input((1, 65794), F32)
    wide = kernels.pack(np.ones((65794, 1), np.int8))
    plan.matmul_int8(k, wide, np.ones(1, F32))              # within the limit without zero points
    with pytest.raises(ValueError, match=r"k = 65794 is above 65793, the largest k whose int32 "
                                         r"sums cannot overflow with zero points"):
        plan.matmul_int8(k, wide, np.ones(1, F32), zero_point=True)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_int8_dense_layers_are_plan_steps(isa_level, policy):
    """Dense layers quantized to int8 with per-row input quantization run as matmul_int8 steps
    with the bits of their own calls; weight-only int8 and int4 keep their calls."""
    from mixedcore import quantizers
    inp = layers.Input((6, 24))
    h = layers.LayerNormalization(dtype=policy)(inp)
    h = layers.Dense(40, activation="gelu", dtype=policy, name="a")(h)
    h = layers.Dense(40, activation="relu", use_bias=False, dtype=policy, name="b")(h)
    h = layers.Dense(24, dtype=policy, name="c")(h)
    y = layers.Add(dtype=policy)([h, layers.LayerNormalization(dtype=policy)(inp)])
    model = models.Model(inp, layers.Dense(5, dtype=policy, name="d")(y))
    model.quantize("int8", filters="a|b|c")
    model.quantize(config=quantizers.Int8QuantizationConfig(activation_quantizer=None),
                   filters="d")
    x = np.random.default_rng(31).standard_normal((3, 6, 24)).astype(F32)
    got = model.predict_on_batch(x)
    assert same_bits(got, model._graph.run([x])[0][0])
    plan = next(iter(model._graph._plans.values())).plan
    kinds = [op[2] if op[0] == "c" else "py" for op in plan._ops]
    assert kinds.count("matmul_int8") == 3 and kinds[-1] == "py", kinds


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_attention_step_is_the_kernel_on_views_of_the_projections(isa_level, dtype):
    rng = np.random.default_rng(33)
    b, t, n, h, hv = 2, 11, 3, 8, 5
    qkv = rand(rng, (b, t, n * (2 * h + hv)), dtype, 2.0)
    plan = kernels.Plan()
    i = plan.input(qkv.shape, dtype)
    outs = [plan.attention(i, heads=n, key_dim=h, value_dim=hv, scale=0.3, causal=c)
            for c in (False, True)]
    plan.finish(outs)
    got = plan.run([qkv])
    q = qkv[..., :n * h].reshape(b, t, n, h).transpose(0, 2, 1, 3)
    k = qkv[..., n * h:2 * n * h].reshape(b, t, n, h).transpose(0, 2, 1, 3)
    v = qkv[..., 2 * n * h:].reshape(b, t, n, hv).transpose(0, 2, 1, 3)
    for g, c in zip(got, (False, True)):
        want = kernels.attention(q, k, v, scale=0.3, causal=c)
        assert g.shape == (b, t, n * hv)
        assert same_bits(g.reshape(b, t, n, hv).transpose(0, 2, 1, 3), want)
    assert [op[2] for op in plan._ops] == ["attention"] * 2


def test_attention_step_errors():
    plan = kernels.Plan()
    i = plan.input((2, 5, 3 * 2 * 4), F32)
    with pytest.raises(ValueError, match="is not \\(B, T, 30\\)"):
        plan.attention(i, heads=2, key_dim=4, value_dim=7, scale=1.0)
    with pytest.raises(ValueError, match="heads must be a positive int"):
        plan.attention(i, heads=0, key_dim=4, value_dim=4, scale=1.0)
    with pytest.raises(ValueError, match="scale must be a finite real number"):
        plan.attention(i, heads=2, key_dim=4, value_dim=4, scale=float("nan"))
    with pytest.raises(TypeError, match="causal must be a bool"):
        plan.attention(i, heads=2, key_dim=4, value_dim=4, scale=1.0, causal=1)


def _attention_model(policy, call=None, **kwargs):
    inp = layers.Input((7, 16))
    x = layers.Dense(16, dtype=policy)(inp)
    mha = layers.MultiHeadAttention(2, 8, dtype=policy, name="mha", **kwargs)
    a = call(mha, x) if call is not None else mha(x, x)
    y = layers.LayerNormalization(dtype=policy)(layers.Add(dtype=policy)([x, a])) \
        if a.shape == x.shape else a
    return models.Model(inp, y)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", ["plain", "causal", "value_dim", "tail", "int8",
                                  "int8 but the output", "int8 output only", "int8 min-max"])
def test_self_attention_runs_as_plan_steps(isa_level, policy, case):
    """MultiHeadAttention called as self-attention is the QKV product, the fused attention and
    the output projection as plan steps, with the bits of the layer's call: float, int8, or
    int8 input projections with a float output projection or the other way round."""
    if case.startswith("int8") and policy == "mixed_float16":
        pytest.skip("int8 quantization is refused under float16")
    call = (lambda m, x: m(x, x, use_causal_mask=True)) if case == "causal" else None
    kwargs = {"value_dim": {"value_dim": 5}, "tail": {"output_shape": (2, 3)}}.get(case, {})
    model = _attention_model(policy, call, **kwargs)
    if case.startswith("int8"):
        filters = {"int8 but the output": lambda p: getattr(p, "name", "") != "attention_output",
                   "int8 output only": lambda p: getattr(p, "name", "") == "attention_output"}
        config = quantizers.Int8QuantizationConfig(
            activation_quantizer=quantizers.MinMaxQuantizer()) if case == "int8 min-max" \
            else None
        model.quantize("int8", config=config, filters=filters.get(case))
        names = [p for p in ("query", "key", "value", "attention_output")
                 if model.get_layer("mha")._quantized(p) is not None]
        assert names == {"int8 but the output": ["query", "key", "value"],
                         "int8 output only": ["attention_output"]}.get(
            case, ["query", "key", "value", "attention_output"])
    x = np.random.default_rng(35).standard_normal((3, 7, 16)).astype(F32)
    got = model.predict_on_batch(x)
    assert same_bits(got, model._graph.run([x])[0][0])
    plan = next(iter(model._graph._plans.values())).plan
    kinds = [op[2] if op[0] == "c" else "py" for op in plan._ops]
    assert "attention" in kinds and kinds.count("py") <= 1, kinds


@pytest.mark.parametrize("case", ["cross", "mask", "sliding", "int4"])
def test_other_attention_calls_keep_the_layer_call(case):
    if case == "cross":
        model = _attention_model("float32", lambda m, x: m(x, layers.Dense(16)(x)))
    elif case == "mask":
        inp = layers.Input((7, 16))
        mask = layers.Input((7, 7), dtype="bool")
        x = layers.Dense(16)(inp)
        y = layers.MultiHeadAttention(2, 8)(x, x, attention_mask=mask)
        model = models.Model([inp, mask], y)
    elif case == "sliding":
        model = _attention_model("float32", sliding_window=3)
    else:
        model = _attention_model("float32")
        model.quantize("int4")
    rng = np.random.default_rng(37)
    x = rng.standard_normal((2, 7, 16)).astype(F32)
    inputs = [x, rng.random((2, 7, 7)) > 0.3] if case == "mask" else [x]
    got = model.predict_on_batch(inputs if case == "mask" else x)
    want = model._graph.run(inputs)[0][0]
    assert same_bits(got, want)
    plans = list(model._graph._plans.values())
    if plans:
        kinds = [op[2] if op[0] == "c" else "py" for op in plans[0].plan._ops]
        assert "attention" not in kinds


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_pad_step_puts_zeros_around_the_images(dtype):
    x = rand(np.random.default_rng(25), (2, 3, 4, 5), dtype)
    plan = kernels.Plan()
    i = plan.input(x.shape, dtype)
    outs = [plan.pad2d(i, ((1, 2), (0, 3))), plan.pad2d(i, ((0, 0), (0, 0)))]
    plan.finish(outs)
    got = plan.run([x])
    assert same_bits(got[0], np.pad(x, ((0, 0), (1, 2), (0, 3), (0, 0))))
    assert same_bits(got[1], x)
    assert [op[2] for op in plan._ops] == ["pad2d"] * 2


def test_the_arena_is_reused_by_liveness():
    """A chain of 40 steps over 1 MB buffers takes two buffers' worth, not 40, and gives the
    chain's result."""
    rng = np.random.default_rng(3)
    x = rand(rng, (1, 64, 64, 64), F32)
    k = kernels.pack_conv(rand(rng, (1, 1, 64, 64), F32, 0.1))
    plan = kernels.Plan()
    h = plan.input(x.shape, F32)
    for _ in range(40):
        h = plan.conv2d(h, k, activation="tanh")
    plan.finish([h])
    assert plan.nbytes <= 2 * x.nbytes + 64
    want = x
    for _ in range(40):
        want = kernels.conv2d(want, k, activation="tanh")
    assert same_bits(plan.run([x])[0], want)


def test_a_buffer_read_later_is_not_overwritten():
    """A residual: the input of the block is read after several steps that could take its
    place."""
    rng = np.random.default_rng(4)
    x = rand(rng, (1, 16, 16, 8), BF16)
    k = kernels.pack_conv(rand(rng, (3, 3, 8, 8), F32, 0.2), dtype=BF16)
    plan = kernels.Plan()
    i = plan.input(x.shape, BF16)
    h0 = plan.conv2d(i, k, padding="same", out_dtype=BF16)
    h = h0
    for _ in range(5):
        h = plan.conv2d(h, k, padding="same", activation="relu", out_dtype=BF16)
    out = plan.add(h, h0, out_dtype=BF16)
    plan.finish([out])
    e0 = kernels.conv2d(x, k, padding="same", out_dtype=BF16)
    e = e0
    for _ in range(5):
        e = kernels.conv2d(e, k, padding="same", activation="relu", out_dtype=BF16)
    assert same_bits(plan.run([x])[0], kernels.add(e, e0, out_dtype=BF16))


def test_call_steps():
    rng = np.random.default_rng(5)
    x = rand(rng, (3, 4), F32)
    w = kernels.pack(rand(rng, (4, 4), F32))
    plan = kernels.Plan()
    i = plan.input(x.shape, F32)
    h = plan.matmul(i, w)
    lo, hi = plan.call(lambda a: [np.minimum(a, 0), a.T], [h], [((3, 4), F32), ((4, 3), F32)])
    # a call that returns a view of its input (in the arena) is copied before the arena is
    # used again
    same = plan.call(lambda a: [a], [h], [((3, 4), F32)])[0]
    g = plan.matmul(same, w)
    plan.finish([lo, hi, same, g])
    h_ = kernels.matmul(x, w)
    got = plan.run([x])
    assert same_bits(got[0], np.minimum(h_, 0)) and same_bits(got[1], h_.T)
    assert same_bits(got[2], h_) and same_bits(got[3], kernels.matmul(h_, w))

    bad = kernels.Plan()
    i = bad.input((2,), F32)
    o = bad.call(lambda a: [a.astype(np.float64)], [i], [((2,), F32)])[0]
    bad.finish([o])
    with pytest.raises(ValueError, match=r"Plan.run: a call step returned \(2,\) float64 where "
                                         r"the plan expects shape \(2,\) and dtype float32"):
        bad.run([np.ones(2, F32)])
    worse = kernels.Plan()
    i = worse.input((2,), F32)
    o = worse.call(lambda a: a, [i], [((2,), F32)])[0]
    worse.finish([o])
    with pytest.raises(ValueError, match="a call step must return a list of 1 arrays"):
        worse.run([np.ones(2, F32)])


FLOATS = [F16, BF16, F32, np.dtype(np.float64)]


@pytest.mark.parametrize("src", FLOATS, ids=str)
def test_a_cast_step_is_kernels_cast(isa_level, src):
    rng = np.random.default_rng(26)
    wide = rng.standard_normal(70007) * np.exp2(rng.integers(-140, 130, 70007))
    wide[:8] = [np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4e38, 1e300, -1e-310]
    x = kernels.cast(wide, src) if src != np.float64 else wide
    for dst in FLOATS:
        for shape in ((70007,), (7, 1, 10001), (0, 3)):
            xs = x[:int(np.prod(shape))].reshape(shape)
            plan = kernels.Plan()
            i = plan.input(shape, src)
            o = plan.cast(i, dst)
            plan.finish([o])
            with np.errstate(all="ignore"):
                assert same_bits(plan.run([xs])[0], kernels.cast(xs, dst)), (dst, shape)
            assert [op[2] for op in plan._ops] == (["cast"] if xs.size else [])


def test_cast_step_errors():
    plan = kernels.Plan()
    i = plan.input((2, 3), np.int32)
    j = plan.input((2, 3), F32)
    with pytest.raises(TypeError, match="Plan.cast: buffer 0 has dtype int32; supported: "
                                        "float16, bfloat16, float32, float64"):
        plan.cast(i, F32)
    with pytest.raises(TypeError, match="Plan.cast: unsupported target dtype int8"):
        plan.cast(j, np.int8)
    with pytest.raises(ValueError, match=r"Plan.cast: no buffer 5 in this plan \(2 buffers\)"):
        plan.cast(5, F32)
    assert len(plan) == 0


@pytest.mark.parametrize("policy", POLICIES + ["float64"])
def test_global_average_pooling_is_a_pooling_step(isa_level, policy):
    with mixedcore.policy_scope(policy):
        img = layers.Input((7, 5, 6))
        seq = layers.Input((9, 4))
        outs = [layers.GlobalAveragePooling2D()(img),
                layers.GlobalAveragePooling2D(keepdims=True)(img),
                layers.GlobalAveragePooling1D()(seq),
                layers.GlobalAveragePooling1D(keepdims=True)(seq)]
        model = models.Model([img, seq], outs)
    rng = np.random.default_rng(27)
    xs = [rng.standard_normal((3, 7, 5, 6)).astype(F32) * 5,
          rng.standard_normal((3, 9, 4)).astype(F32) * 5]
    xs[0][1, 2, 3, 4] = np.inf
    xs[1][2, 5, 1] = np.nan
    got = model.predict(xs, verbose=0)
    want = model._graph.run(xs)[0]
    assert all(same_bits(a, b) for a, b in zip(got, want))
    plan = next(iter(model._graph._plans.values())).plan
    methods = [op[2] if op[0] == "c" else "py" for op in plan._ops]
    if policy == "float64":         # no float64 pooling step: the layers' calls
        assert methods == ["py"] * 4
    else:
        assert methods.count("pool2d") == 4 and "py" not in methods
    # the mean of each image, in the work dtype, rounded once
    cd = np.dtype(model.layers[2].compute_dtype) if policy != "float64" else \
        np.dtype(np.float64)
    for y, x, axes in zip(got, [xs[0], xs[0], xs[1], xs[1]], [(1, 2), (1, 2), (1,), (1,)]):
        with np.errstate(invalid="ignore"):
            mean = kernels.cast(x, cd).astype(np.float64).mean(axis=axes, keepdims=y.ndim == x.ndim)
        tol = 1e-6 if cd in (F32, np.float64) else 1e-2
        np.testing.assert_allclose(y.astype(np.float64), mean, rtol=tol, atol=tol)


def test_global_average_pooling_of_no_pixels_is_nan():
    x = np.ones((2, 0, 3), F32)
    with np.errstate(invalid="ignore", divide="ignore"), \
            pytest.warns(RuntimeWarning, match="Mean of empty slice"):
        y = layers.GlobalAveragePooling1D()(x)
    assert y.shape == (2, 3) and np.isnan(y).all()


def test_plan_bad_input():
    rng = np.random.default_rng(6)
    k = kernels.pack_conv(rand(rng, (3, 3, 4, 2), F32))
    plan = kernels.Plan()
    i = plan.input((1, 5, 5, 4), F32)
    j = plan.input((1, 5, 5, 3), np.float64)
    with pytest.raises(ValueError, match=r"Plan.conv2d: no buffer 7 in this plan \(2 buffers\)"):
        plan.conv2d(7, k)
    with pytest.raises(TypeError, match="Plan.conv2d: buffer 1 has dtype float64"):
        plan.conv2d(j, k)
    with pytest.raises(TypeError, match="Plan.conv2d: kernel must be a PackedConv, got ndarray"):
        plan.conv2d(i, np.ones((3, 3, 4, 2), F32))
    with pytest.raises(ValueError, match="Plan.conv2d: buffer 0 has 4 channels; a kernel of "
                                         r"shape \(3, 3, 2, 2\)"):
        plan.conv2d(i, kernels.pack_conv(np.ones((3, 3, 2, 2), F32)))
    with pytest.raises(ValueError, match="smaller than the kernel window"):
        plan.conv2d(i, kernels.pack_conv(np.ones((7, 7, 4, 2), F32)))
    with pytest.raises(TypeError, match="Plan.matmul: b must be a PackedMatrix, got ndarray"):
        plan.matmul(i, np.ones((4, 2), F32))
    with pytest.raises(ValueError, match=r"Plan.depthwise_conv2d: kernel must have shape "
                                         r"\(kh, kw, 4, depth_multiplier\) for x of shape "
                                         r"\(1, 5, 5, 4\), got \(3, 3, 3, 1\)"):
        plan.depthwise_conv2d(i, np.ones((3, 3, 3, 1), F32))
    with pytest.raises(TypeError, match="Plan.depthwise_conv2d: unsupported kernel dtype int64"):
        plan.depthwise_conv2d(i, np.ones((3, 3, 4, 1), np.int64))
    with pytest.raises(ValueError, match="Plan.pool2d: mode must be 'max' or 'average'"):
        plan.pool2d(i, 2, mode="min")
    with pytest.raises(TypeError, match="Plan.add: unsupported out_dtype float64"):
        plan.add(i, i, out_dtype=np.float64)
    with pytest.raises(ValueError, match="Plan.conv2d: unknown activation 'mish'"):
        plan.conv2d(i, k, activation="mish")
    with pytest.raises(ValueError, match=r"Plan.matmul: buffer 0 of shape \(1, 5, 5, 4\) cannot "
                                         r"multiply b of shape \(3, 2\)"):
        plan.matmul(i, kernels.pack(np.ones((3, 2), F32)))
    with pytest.raises(ValueError, match=r"Plan.add: buffers 0 and 2 have shapes"):
        plan.add(i, plan.conv2d(i, k), activation="relu")
    with pytest.raises(ValueError, match=r"Plan.conv2d: the residual \(buffer 0, \(1, 5, 5, 4\) "
                                         r"float32\) must have the output's shape and dtype, "
                                         r"\(1, 3, 3, 2\) float32"):
        plan.conv2d(i, k, residual=i)
    with pytest.raises(ValueError, match=r"Plan.matmul: no buffer 9 in this plan"):
        plan.matmul(i, kernels.pack(np.ones((4, 2), F32)), residual=9)
    with pytest.raises(ValueError, match=r"Plan.pad2d: padding must be non-negative ints, got "
                                         r"\(\(1, -1\), \(0, 0\)\)"):
        plan.pad2d(i, ((1, -1), (0, 0)))
    with pytest.raises(ValueError, match=r"Plan.pad2d: padding must be \(\(top, bottom\), "
                                         r"\(left, right\)\), got 3"):
        plan.pad2d(i, 3)
    with pytest.raises(ValueError, match=r"Plan.pad2d: buffer 3 must have shape \(batch, "):
        plan.pad2d(plan.reshape(i, (25, 4)), ((1, 1), (1, 1)))
    with pytest.raises(ValueError, match=r"Plan.layer_norm: gamma has shape \(3,\), expected "
                                         r"\(4,\)"):
        plan.layer_norm(i, np.ones(3, F32))
    with pytest.raises(TypeError, match="Plan.layer_norm: beta must have dtype float32, got "
                                        "float64"):
        plan.layer_norm(i, None, np.ones(4))
    with pytest.raises(ValueError, match="Plan.layer_norm: epsilon must be finite and > 0, "
                                         "got 0"):
        plan.layer_norm(i, epsilon=0)
    with pytest.raises(ValueError, match=r"Plan.layer_norm: the residual \(buffer \d+\) has "
                                         r"shape \(1, 3, 3, 2\)"):
        plan.layer_norm(i, residual=plan.conv2d(i, k))
    with pytest.raises(ValueError, match=r"Plan.reshape: cannot reshape buffer 0 of shape "
                                         r"\(1, 5, 5, 4\) into \(3, 3\)"):
        plan.reshape(i, (3, 3))
    with pytest.raises(ValueError, match=r"Plan.reshape: negative dimension in shape \(-1, 4\)"):
        plan.reshape(i, (-1, 4))
    with pytest.raises(TypeError, match=r"Plan.input: a shape must be a sequence of ints, got "
                                        r"\(2.5, 3\)"):
        plan.input((2.5, 3), F32)
    with pytest.raises(ValueError, match="Plan.pool2d: padding must be 'valid' or 'same'"):
        plan.pool2d(i, 2, padding="full")
    with pytest.raises(TypeError, match="Plan.call: fn must be callable, got int"):
        plan.call(3, [i], [((1,), F32)])
    with pytest.raises(ValueError, match="Plan.run: finish the plan first"):
        plan.run([np.ones((1, 5, 5, 4), F32)])
    out = plan.conv2d(i, k)
    plan.finish([out])
    with pytest.raises(ValueError, match="Plan.finish: the plan is already finished"):
        plan.finish([out])
    with pytest.raises(ValueError, match="the plan is finished; no step can be added"):
        plan.conv2d(i, k)
    with pytest.raises(ValueError, match="Plan.run: the plan takes 2 inputs, got 1"):
        plan.run([np.ones((1, 5, 5, 4), F32)])
    with pytest.raises(ValueError, match=r"Plan.run: input 0 must be an array of shape "
                                         r"\(1, 5, 5, 4\) and dtype float32, got \(1, 5, 5, 4\) "
                                         r"float64"):
        plan.run([np.ones((1, 5, 5, 4)), np.ones((1, 5, 5, 3))])
    other = kernels.Plan()
    with pytest.raises(TypeError, match="Plan.matmul: b is an int8 PackedMatrix"):
        other.matmul(other.input((2, 8), F32), kernels.pack(np.ones((8, 4), np.int8)))


def test_compiled_steps_refuse_ranges_and_buffers_they_do_not_have():
    """The compiled steps (the object ``Plan.run`` drives) check a range of steps and the
    buffers its steps use before running them: never a read of a missing buffer."""
    rng = np.random.default_rng(8)
    x = rand(rng, (3, 7, 70), F32, 2.0)
    plan = kernels.Plan()
    i = plan.input(x.shape, F32)
    a = plan.matmul(i, kernels.pack(rand(rng, (70, 12), F32)))
    q = plan.matmul_int8(i, kernels.pack(rng.integers(-127, 128, (70, 5)).astype(np.int8)),
                         rng.uniform(20, 60, 5).astype(F32))
    plan.finish([a, q])
    want = plan.run([x])
    steps = plan._core
    arena, views = plan._new_arena()
    arrays = list(views)
    arrays[i] = x
    for index in (a, q):
        arrays[index] = np.empty(plan.shape(index), plan.dtype(index))
    for s0, s1 in ((-1, 1), (1, 0), (0, len(steps) + 1)):
        with pytest.raises(ValueError, match=rf"PlanSteps.run: steps \[{s0}, {s1}\) are not "
                                             rf"within the plan's {len(steps)} steps"):
            steps.run(s0, s1, arrays)
    with pytest.raises(ValueError, match=rf"PlanSteps.run: step 0 uses buffer {i}, which is "
                                         r"not among the \d+ given \(or is None\)"):
        steps.run(0, 1, [None] * len(arrays))
    with pytest.raises(ValueError, match="PlanSteps.run: step 0 uses buffer"):
        steps.run(0, 1, arrays[:max(i, a)])
    for buf in range(len(arrays)):            # the int8 step's own buffers (codes, scales)
        if arrays[buf] is not None and buf not in (i, a, q):
            held, arrays[buf] = arrays[buf], None
            with pytest.raises(ValueError, match=rf"step 1 uses buffer {buf}"):
                steps.run(1, 2, arrays)
            arrays[buf] = held
    with pytest.raises(TypeError):
        steps.run(0, 2, [x.tolist() if b is x else b for b in arrays])
    assert steps.run(0, 2, arrays) == (0, -1)
    assert same_bits(arrays[a], want[0]) and same_bits(arrays[q], want[1])
    # a layer normalization that quantizes for the int8 step after it uses that step's buffers
    plan = kernels.Plan()
    i = plan.input(x.shape, F32)
    y = plan.layer_norm(i)
    q = plan.matmul_int8(y, kernels.pack(rng.integers(-127, 128, (70, 5)).astype(np.int8)),
                         rng.uniform(20, 60, 5).astype(F32))
    plan.finish([q])
    arena, views = plan._new_arena()
    arrays = list(views)
    arrays[i], arrays[q] = x, np.empty(plan.shape(q), F32)
    own = [buf for buf in range(len(arrays)) if arrays[buf] is not None and buf not in (i, y, q)]
    assert len(own) == 3                      # the codes, the scales, the widened scales
    for buf in own:
        held, arrays[buf] = arrays[buf], None
        with pytest.raises(ValueError, match=rf"step 0 uses buffer {buf}"):
            plan._core.run(0, 1, arrays)
        arrays[buf] = held
    assert plan._core.run(0, 2, arrays) == (0, -1)
    assert same_bits(arrays[q], plan.run([x])[0])


def test_runs_in_several_threads_at_once_give_each_its_own_result():
    rng = np.random.default_rng(7)
    k = kernels.pack_conv(rand(rng, (3, 3, 16, 16), F32, 0.2), dtype=BF16)
    plan = kernels.Plan()
    h = i = plan.input((2, 32, 32, 16), BF16)
    for _ in range(6):
        h = plan.conv2d(h, k, padding="same", activation="tanh", out_dtype=BF16)
    plan.finish([h])
    xs = [rand(np.random.default_rng(s), (2, 32, 32, 16), BF16) for s in range(4)]
    want = [plan.run([x])[0] for x in xs]
    got = [None] * 4

    def work(j):
        for _ in range(5):
            got[j] = plan.run([xs[j]])[0]

    threads = [threading.Thread(target=work, args=(j,)) for j in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(same_bits(g, w) for g, w in zip(got, want))
    assert i == 0


# -- models --------------------------------------------------------------------------------------

def _bn(rng, bn):
    c = bn.get_weights()[0].shape[0]
    bn.set_weights([rng.uniform(0.5, 1.5, c), rng.normal(0, 0.3, c), rng.normal(0, 0.3, c),
                    rng.uniform(0.5, 1.5, c)])


def _mobile_block(x, expand, out, stride):
    """MobileNetV2's inverted residual block."""
    c = x.shape[-1]
    h = layers.ReLU(6.0)(layers.BatchNormalization()(layers.Conv2D(c * expand, 1,
                                                                   use_bias=False)(x)))
    if stride == 2:
        h = layers.ZeroPadding2D(((0, 1), (0, 1)))(h)
    h = layers.DepthwiseConv2D(3, strides=stride, padding="same" if stride == 1 else "valid",
                               use_bias=False)(h)
    h = layers.ReLU(6.0)(layers.BatchNormalization()(h))
    h = layers.BatchNormalization()(layers.Conv2D(out, 1, use_bias=False)(h))
    return layers.Add()([x, h]) if stride == 1 and c == out else h


def _resnet_block(x, filters):
    h = layers.Activation("relu")(layers.BatchNormalization()(layers.Conv2D(filters, 3,
                                                                            padding="same")(x)))
    h = layers.BatchNormalization()(layers.Conv2D(x.shape[-1], 3, padding="same")(h))
    return layers.Activation("relu")(layers.Add()([x, h]))


def _image_model(policy):
    with mixedcore.policy_scope(policy):
        inp = layers.Input((33, 31, 3))
        h = layers.ZeroPadding2D(1)(inp)
        h = layers.ReLU(6.0)(layers.BatchNormalization()(layers.Conv2D(8, 3, strides=2,
                                                                       use_bias=False)(h)))
        h = _mobile_block(h, 2, 8, 1)
        h = _mobile_block(h, 3, 12, 2)
        h = _resnet_block(h, 6)
        h = layers.MaxPooling2D(3, strides=2, padding="same")(h)
        h = layers.AveragePooling2D(2, padding="same")(h)
        h = layers.Conv2D(10, 1, activation="swish")(h)
        h = layers.DepthwiseConv2D(2, depth_multiplier=2, activation="hard_swish")(h)
        side = layers.GlobalAveragePooling2D()(h)
        flat = layers.Dense(6, activation="gelu")(layers.Flatten()(h))
        out = layers.Dense(4, activation="softmax", dtype="float32")(
            layers.Concatenate()([side, flat]))
        model = models.Model(inp, [out, layers.Reshape((-1,))(h)])
    rng = np.random.default_rng(8)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            _bn(rng, layer)
    return model


@pytest.mark.parametrize("policy", POLICIES)
def test_a_model_plan_gives_the_bits_of_the_layers(isa_level, policy):
    model = _image_model(policy)
    x = np.random.default_rng(9).uniform(-2, 2, (3, 33, 31, 3)).astype(F32)
    graph = model._graph
    first = model.predict(x, verbose=0)                  # makes the plan
    assert graph.arena_nbytes() > 0 and model.arena_nbytes() == graph.arena_nbytes()
    assert model.inference_nbytes() == model.arena_nbytes() + sum(
        layer.inference_nbytes() for layer in model.layers)
    lines = []
    model.summary(print_fn=lines.append)
    assert lines[-1] == (f"Inference arenas: {graph.arena_nbytes() / 1024:.1f} KB (the plans "
                         f"of 1 input shapes)")
    plan = next(iter(graph._plans.values()))
    kinds = {op[0] for op in plan.plan._ops}
    assert kinds == {"c", "py"}
    # every convolution, depthwise convolution, pooling (the global one too) and the Dense
    # with a fused activation is a C step, and both sums run in the epilogue of the
    # convolution before them; under a 16-bit policy the cast of the float32 input is one more;
    # the concatenation and the softmax Dense run in Python
    methods = [op[2] for op in plan.plan._ops if op[0] == "c"]
    assert len(methods) == (15 if policy == "float32" else 16)
    assert methods.count("cast") == (0 if policy == "float32" else 1)
    assert methods.count("pool2d") == 3
    assert sum(op[0] == "py" for op in plan.plan._ops) == 2
    planned = model.predict(x, verbose=0)               # runs it
    layered = graph.run([x])[0]
    for f, p, r in zip(first, planned, layered):
        assert same_bits(f, r) and same_bits(p, r)
    # model(x) and predict_on_batch take the plan too
    assert all(same_bits(a, b) for a, b in zip(model(x), layered))


def _bottleneck(x, filters, *, kernel=3, dilation=1, pad=False):
    """ResNet's identity block: 1x1, kernel x kernel, 1x1 and the sum with its input."""
    h = layers.Activation("relu")(layers.BatchNormalization()(layers.Conv2D(filters, 1)(x)))
    if pad:
        h = layers.ZeroPadding2D(kernel // 2)(h)
    h = layers.Conv2D(filters, kernel, padding="valid" if pad else "same",
                      dilation_rate=dilation)(h)
    h = layers.Activation("relu")(layers.BatchNormalization()(h))
    h = layers.BatchNormalization()(layers.Conv2D(x.shape[-1], 1)(h))
    return layers.Activation("relu")(layers.Add()([h, x]))


def _downsample(x, filters, out, strides, *, kernel=1):
    """ResNet's first block of a stage: its first convolution and the shortcut's at strides."""
    h = layers.Activation("relu")(layers.BatchNormalization()(
        layers.Conv2D(filters, kernel, strides=strides, padding="same")(x)))
    h = layers.BatchNormalization()(layers.Conv2D(out, 1)(h))
    shortcut = layers.BatchNormalization()(layers.Conv2D(out, 1, strides=strides)(x))
    return layers.Activation("relu")(layers.Add()([h, shortcut]))


def _strided_model(policy, hw, block=None, tail=None, block_out=False):
    """Two identity blocks each read by a downsampling block (the second's 3x3 convolution
    after a ZeroPadding2D, the second downsampling at strides (2, 3)); ``block_out``: the first
    identity block's output is the model's second output."""
    with mixedcore.policy_scope(policy):
        inp = layers.Input(hw + (5,))
        h = layers.Conv2D(12, 1, activation="relu")(inp)
        first = h = (block or _bottleneck)(h, 4)
        h = (tail or _downsample)(h, 6, 16, 2)
        h = _bottleneck(h, 6, pad=True)
        h = _downsample(h, 6, 16, (2, 3))
        out = layers.GlobalAveragePooling2D()(h)
        model = models.Model(inp, [out, first] if block_out else out)
    rng = np.random.default_rng(12)
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            _bn(rng, layer)
    return model


def _step_shapes(model, x):
    """The plan's result and its C steps as (method, output shape)."""
    got = model.predict(x, verbose=0)
    plan = next(iter(model._graph._plans.values())).plan
    made = {b.first: b.shape for b in plan._buffers if b.first is not None}
    return got, [(op[2], made[k]) for k, op in enumerate(plan._ops) if op[0] == "c"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("hw", [(12, 12), (13, 11), (2, 1)])
def test_a_block_read_at_strides_is_computed_at_them(isa_level, policy, hw):
    """An identity block whose output only pointwise convolutions at strides s read is
    computed at s from its 3x3 convolution on, the shortcut subsampled (inference.md,
    "Strides taken early"): the bits of the layers."""
    model = _strided_model(policy, hw)
    x = np.random.default_rng(13).uniform(-2, 2, (2,) + hw + (5,)).astype(F32)
    got, steps = _step_shapes(model, x)
    want = model._graph.run([x])[0][0]
    assert same_bits(got, want)
    h, w = hw
    subsampled = [shape for method, shape in steps if method == "pool2d"][:-1]
    assert subsampled == [(2, -(-h // 2), -(-w // 2), 12),
                          (2, -(-h // 4), -(-w // 6), 16)]
    convs = [shape for method, shape in steps if method == "conv2d"]
    assert (2, -(-h // 2), -(-w // 2), 4) in convs and (2, -(-h // 4), -(-w // 6), 6) in convs
    # the bits of a plan made without the rule
    plain = _strided_model(policy, hw)
    plain.set_weights(model.get_weights())
    with_rule = models._plan.InferencePlan._find_strided
    try:
        models._plan.InferencePlan._find_strided = lambda self, graph: None
        assert same_bits(plain.predict(x, verbose=0), got)
    finally:
        models._plan.InferencePlan._find_strided = with_rule


def _other_reader(x, filters):
    """An identity block whose output a stride-1 convolution reads too."""
    h = _bottleneck(x, filters)
    return layers.Add()([_downsample(h, filters, 16, 2),
                         layers.Conv2D(16, 1, strides=2, padding="same")(
                             layers.Conv2D(12, 1)(h))])


def _other_strides(x, filters):
    h = _bottleneck(x, filters)
    a = layers.Conv2D(16, 1, strides=2)(h)
    b = layers.Conv2D(16, 1, strides=(2, 1))(h)
    return layers.Add()([a, layers.MaxPooling2D((1, 2), strides=(1, 2), padding="same")(b)])


@pytest.mark.parametrize("case", ["dilated", "read by another", "other strides",
                                  "3x3 reader", "output too"])
def test_blocks_not_read_at_one_stride_keep_their_strides(case):
    """Where the rule does not hold the block runs at full size: still the layers' bits."""
    hw = (12, 12)
    block = {"dilated": lambda x, f: _bottleneck(x, f, dilation=2),
             "read by another": _other_reader,
             "other strides": _other_strides}.get(case)
    tail = {"3x3 reader": lambda x, f, o, s: _downsample(x, f, o, s, kernel=3),
            "read by another": lambda x, f, o, s: x,
            "other strides": lambda x, f, o, s: x}.get(case)
    model = _strided_model("mixed_bfloat16", hw, block, tail, block_out=case == "output too")
    x = np.random.default_rng(14).uniform(-2, 2, (2,) + hw + (5,)).astype(F32)
    got, steps = _step_shapes(model, x)
    want = model._graph.run([x])[0]
    for g, w in zip(got if isinstance(got, list) else [got], want):
        assert same_bits(g, w)
    convs = [shape for method, shape in steps if method == "conv2d"]
    # the first identity block's 3x3 convolution keeps the full size, and its input (12
    # channels) is not subsampled
    assert (2, 12, 12, 4) in convs
    assert not [shape for method, shape in steps if method == "pool2d" and shape[-1] == 12]


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_activations_stay_in_the_compute_dtype(policy):
    model = _image_model(policy)
    x = np.ones((1, 33, 31, 3), F32)
    model.predict(x, verbose=0)
    plan = next(iter(model._graph._plans.values())).plan
    cd = np.dtype(ml_dtypes.bfloat16) if policy == "mixed_bfloat16" else F32
    arena = [b for i, b in enumerate(plan._buffers) if b.kind == "arena"]
    assert arena and all(b.dtype == cd for b in arena)


def test_the_plan_follows_weights_policies_levels_and_shapes(tmp_path):
    model = _image_model("mixed_bfloat16")
    graph = model._graph
    x = np.random.default_rng(10).uniform(-2, 2, (2, 33, 31, 3)).astype(F32)

    def check():
        got = model.predict(x, verbose=0)
        want = graph.run([x])[0]
        assert all(same_bits(g, w) for g, w in zip(got, want))
        return got

    before = check()
    conv = next(layer for layer in model.layers if isinstance(layer, layers.Conv2D))
    conv.set_weights([w * 1.5 for w in conv.get_weights()])
    after = check()
    assert not same_bits(before[0], after[0])
    bn = next(layer for layer in model.layers if isinstance(layer, layers.BatchNormalization))
    _bn(np.random.default_rng(11), bn)
    check()
    model.save_weights(tmp_path / "w.weights.h5")
    _image_model("mixed_bfloat16").save_weights(tmp_path / "other.weights.h5")
    model.load_weights(tmp_path / "other.weights.h5")
    check()
    # another batch size: another plan, the first kept
    check_x = x[:1]
    got = model.predict(check_x, verbose=0)
    assert all(same_bits(g, w) for g, w in zip(got, graph.run([check_x])[0]))
    assert len(graph._plans) == 2
    # another level
    previous = kernels.isa()
    try:
        for level in kernels.available_isas():
            kernels.set_isa(level)
            check()
    finally:
        kernels.set_isa(previous)
    # a policy changed on a layer
    conv.dtype_policy = "float32"
    check()


def test_a_plan_checks_its_layers_only_after_a_change():
    from mixedcore.layers._base import state_epoch
    model = _image_model("mixed_bfloat16")
    x = np.random.default_rng(12).uniform(-2, 2, (1, 33, 31, 3)).astype(F32)
    model.predict(x, verbose=0)
    [plan] = model._graph._plans.values()
    assert plan.current() and plan._epoch == state_epoch()
    # a change elsewhere moves the epoch: the plan checks its layers, finds them its own, stays
    other = layers.Dense(3)
    other.build((None, 2))
    epoch = state_epoch()
    other.weights_updated()
    assert state_epoch() != epoch and plan._epoch != state_epoch()
    model.predict(x, verbose=0)
    assert next(iter(model._graph._plans.values())) is plan and plan._epoch == state_epoch()
    # a change of its own: not current, made again
    conv = next(layer for layer in model.layers if isinstance(layer, layers.Conv2D))
    conv.weights_updated()
    assert not plan.current()
    conv.dtype_policy = "float32"
    assert not plan.current()
    got = model.predict(x, verbose=0)
    assert next(iter(model._graph._plans.values())) is not plan
    assert all(same_bits(g, w) for g, w in zip(got, model._graph.run([x])[0]))


def test_training_and_masks_run_the_layers():
    model = _image_model("float32")
    x = np.random.default_rng(12).uniform(-2, 2, (4, 33, 31, 3)).astype(F32)
    model.compile(optimizer="sgd", loss=["mse", None])
    model.fit(x, [np.full((4, 4), 0.25, F32), None], epochs=1, verbose=0)
    got = model.predict(x, verbose=0)         # the weights moved: a plan of the new ones
    assert all(same_bits(g, w) for g, w in zip(got, model._graph.run([x])[0]))
    inp = layers.Input((6,), dtype="int32")
    h = layers.Embedding(10, 4, mask_zero=True)(inp)
    out = layers.Dense(3)(layers.GlobalAveragePooling1D()(h))
    masked = models.Model(inp, out)
    ids = np.array([[1, 2, 0, 0, 0, 0], [3, 4, 5, 6, 0, 0]])
    got = masked.predict(ids, verbose=0)
    assert same_bits(got, masked._graph.run([ids])[0][0])
    assert masked.arena_nbytes() == 0


def test_a_nested_model_and_a_sequential_run_plans():
    inner = models.Sequential([layers.Input((5, 5, 2)), layers.Conv2D(3, 3, padding="same"),
                               layers.BatchNormalization(), layers.ReLU(6)])
    _bn(np.random.default_rng(13), inner.layers[1])
    inp = layers.Input((5, 5, 2))
    outer = models.Model(inp, layers.Add()([inner(inp), layers.Conv2D(3, 1)(inp)]))
    x = np.random.default_rng(14).standard_normal((2, 5, 5, 2)).astype(F32)
    got = outer.predict(x, verbose=0)
    assert same_bits(got, outer._graph.run([x])[0][0])
    assert inner.arena_nbytes() > 0 and outer.arena_nbytes() > 0


def _planned_steps(model, xs):
    """The methods of the C steps of the plan ``model.predict(xs)`` makes, after checking its
    outputs against the graph run layer by layer, bit for bit."""
    got = model.predict(xs, verbose=0)
    got = got if isinstance(got, list) else [got]
    for g, r in zip(got, model._graph.run(xs if isinstance(xs, list) else [xs])[0]):
        assert same_bits(g, r)
    plan = next(iter(model._graph._plans.values())).plan
    return [op[2] for op in plan._ops if op[0] == "c"]


@pytest.mark.parametrize("policy", POLICIES)
def test_sums_run_in_the_epilogue_of_the_product_before_them(isa_level, policy):
    """A sum whose one operand is a product read by it alone, without an activation of its own,
    runs in that product's step; other sums stay steps of their own."""
    with mixedcore.policy_scope(policy):
        tokens = layers.Input((6, 8))
        first = layers.Dense(8, activation="tanh")(tokens)     # in the compute dtype from here
        h = layers.Add()([layers.Dense(8)(first), first])               # fused
        h = layers.LayerNormalization()(h)
        wide = layers.Dense(8)(h)
        h = layers.Add()([wide, layers.Dense(8)(wide)])                 # fused (the 2nd Dense)
        act = layers.Dense(8, activation="relu")(h)
        h = layers.Add()([act, h])                                      # not: relu before it
        pixels = layers.Input((7, 7, 3))
        img = layers.Conv2D(3, 1, activation="relu")(pixels)
        c = layers.Conv2D(3, 3, padding="same")(img)
        g = layers.Add()([c, img])                                      # not: c read twice
        g = layers.Activation("relu")(layers.Add()([g, c]))
        g = layers.Add()([g, layers.SeparableConv2D(3, 3, padding="same")(g)])   # fused
        s = layers.BatchNormalization()(layers.Conv2D(3, 1, use_bias=False)(g))
        g = layers.Add()([s, g])                                        # fused
        model = models.Model([tokens, pixels], [h, g])
    _bn(np.random.default_rng(19),
        next(layer for layer in model.layers if isinstance(layer, layers.BatchNormalization)))
    rng = np.random.default_rng(20)
    xs = [rng.standard_normal((3, 6, 8)).astype(F32),
          rng.standard_normal((3, 7, 7, 3)).astype(F32)]
    assert _planned_steps(model, xs).count("add") == 3


@pytest.mark.parametrize("policy", POLICIES)
def test_a_padding_before_a_pooling_is_a_pad_step(isa_level, policy):
    """ResNet's stem: ZeroPadding2D then a "valid" max pooling; a channels-first padding is the
    layer's call."""
    with mixedcore.policy_scope(policy):
        inp = layers.Input((9, 8, 4))
        h = layers.Conv2D(6, 3, activation="relu")(inp)
        h = layers.MaxPooling2D(3, strides=2)(layers.ZeroPadding2D(((1, 1), (2, 1)))(h))
        side = layers.ZeroPadding2D(((1, 0), (0, 2)), data_format="channels_first")(h)
        model = models.Model(inp, [h, layers.Conv2D(2, 2)(side)])
    x = np.random.default_rng(26).standard_normal((3, 9, 8, 4)).astype(F32)
    assert _planned_steps(model, x).count("pad2d") == 1


@pytest.mark.parametrize("policy", POLICIES)
def test_layer_normalizations_are_c_steps(isa_level, policy):
    """A transformer block's normalizations: of a tensor, and of a sum read only by them (the
    residual of the step); one over another axis stays in Python."""
    with mixedcore.policy_scope(policy):
        tokens = layers.Input((6, 16))
        h = layers.LayerNormalization(epsilon=1e-5)(layers.Dense(16)(tokens))
        a = layers.MultiHeadAttention(2, 8)(h, h)
        h = layers.LayerNormalization()(layers.Add()([h, a]))
        f = layers.Dense(16)(layers.Dense(32, activation="gelu")(h))
        h = layers.LayerNormalization(center=False)(layers.Add()([f, h]))
        other = layers.LayerNormalization(axis=1)(h)
        model = models.Model(tokens, [h, other])
    rng = np.random.default_rng(24)
    for layer in model.layers:
        if isinstance(layer, layers.LayerNormalization):
            layer.set_weights([rng.standard_normal(w.shape).astype(F32)
                               for w in layer.get_weights()])
    x = rng.standard_normal((3, 6, 16)).astype(F32)
    assert _planned_steps(model, x).count("layer_norm") == 3


@pytest.mark.parametrize("policy", POLICIES)
def test_sequence_and_separable_convolutions_are_c_steps(isa_level, policy):
    with mixedcore.policy_scope(policy):
        seq = layers.Input((19, 6))
        h = layers.Conv1D(8, 3, padding="causal", dilation_rate=2, activation="relu")(seq)
        h = layers.ReLU(6.0)(layers.BatchNormalization()(layers.Conv1D(8, 3, strides=2,
                                                                       use_bias=False)(h)))
        h = layers.Conv1D(5, 2, padding="same", activation="swish")(h)
        img = layers.Input((11, 9, 4))
        g = layers.SeparableConv2D(7, 3, strides=2, padding="same", depth_multiplier=2,
                                   activation="relu6")(img)
        g = layers.SeparableConv2D(3, 2, use_bias=False)(g)
        model = models.Model([seq, img], [h, g])
    _bn(np.random.default_rng(15),
        next(layer for layer in model.layers if isinstance(layer, layers.BatchNormalization)))
    rng = np.random.default_rng(16)
    xs = [rng.standard_normal((2, 19, 6)).astype(F32), rng.standard_normal((2, 11, 9, 4))
          .astype(F32)]
    model.predict(xs, verbose=0)
    plan = next(iter(model._graph._plans.values())).plan
    # three convolutions, and a depthwise and a pointwise step per separable convolution;
    # under a 16-bit policy the casts of the two float32 inputs are steps too
    methods = [op[2] for op in plan._ops if op[0] == "c"]
    assert len(methods) == (7 if policy == "float32" else 9) and len(methods) == len(plan._ops)
    assert methods.count("cast") == len(methods) - 7
    got = model.predict(xs, verbose=0)
    want = model._graph.run(xs)[0]
    assert all(same_bits(a, b) for a, b in zip(got, want))


def test_graph_shapes_the_plan_must_keep():
    """Shared layers, a tensor that is both an output and read further, an input that is an
    output, integer inputs, and a layer with two outputs (a Python step)."""
    class Split(layers.Layer):
        def call(self, x):
            return [x[..., :2], x[..., 2:]]

        def compute_output_shape(self, input_shape):
            lead = tuple(input_shape[:-1])
            return [lead + (2,), lead + (input_shape[-1] - 2,)]

    a = layers.Input((6, 6, 3))
    ids = layers.Input((4,), dtype="int32")
    shared = layers.Conv2D(5, 3, padding="same", activation="relu")
    h1 = shared(a)
    h2 = shared(layers.Conv2D(3, 1)(a))          # the same layer called twice
    s = layers.Add()([h1, h2])
    left, right = Split()(s)
    e = layers.Flatten()(layers.Embedding(9, 2)(ids))
    model = models.Model([a, ids], [s, layers.Conv2D(2, 1)(s), left, right, e, a])
    rng = np.random.default_rng(17)
    xs = [rng.standard_normal((3, 6, 6, 3)).astype(F32), rng.integers(0, 9, (3, 4))]
    model.predict(xs, verbose=0)
    got = model.predict(xs, verbose=0)
    want = model._graph.run(xs)[0]
    assert len(got) == len(want) == 6
    assert all(same_bits(g, w) for g, w in zip(got, want))
    assert got[5] is not None and same_bits(got[5], xs[0])


def test_a_call_on_another_thread_while_a_plan_runs():
    model = _image_model("mixed_bfloat16")
    xs = [np.random.default_rng(s).uniform(-2, 2, (2, 33, 31, 3)).astype(F32) for s in range(3)]
    want = [model._graph.run([x])[0] for x in xs]
    model.predict(xs[0], verbose=0)
    got = [None] * 3

    def work(j):
        for _ in range(3):
            got[j] = model.predict(xs[j], verbose=0)

    threads = [threading.Thread(target=work, args=(j,)) for j in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        assert all(same_bits(a, b) for a, b in zip(g, w))


def test_plans_kept_are_bounded(monkeypatch):
    import mixedcore.models._graph as graph_module
    model = _image_model("float32")
    graph = model._graph
    for batch in (1, 2, 3, 4, 5):
        model.predict(np.ones((batch, 33, 31, 3), F32), verbose=0)
    assert len(graph._plans) == 4                      # the four most recent shapes
    monkeypatch.setattr(graph_module, "MAX_ARENA_BYTES", 1)
    model.predict(np.ones((6, 33, 31, 3), F32), verbose=0)
    assert len(graph._plans) == 1                      # only the one in use: arenas too large
    x = np.random.default_rng(18).uniform(-2, 2, (6, 33, 31, 3)).astype(F32)
    assert all(same_bits(g, w) for g, w in zip(model.predict(x, verbose=0),
                                                graph.run([x])[0]))
    # arenas of overlapping runs are not all kept
    plan = next(iter(graph._plans.values())).plan
    assert len(plan._free) <= 2


# -- chunks of a batch ---------------------------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES)
def test_a_batch_runs_in_chunks_with_the_bits_of_the_whole(isa_level, policy, monkeypatch):
    import mixedcore.models._graph as graph_module
    model = _image_model(policy)
    graph = model._graph
    model.predict_on_batch(np.ones((1, 33, 31, 3), F32))
    one = next(iter(graph._plans.values())).nbytes
    monkeypatch.setattr(graph_module, "CHUNK_BYTES", 3 * one + 100)
    x = np.random.default_rng(21).uniform(-2, 2, (7, 33, 31, 3)).astype(F32)
    got = model.predict_on_batch(x)
    assert list(graph._chunks.values()) == [3]
    # chunks of 3, 3 and 1: the plans of 3 and of 1 samples, none of 7
    assert sorted(key[0][0][0][0] for key in graph._plans) == [1, 3]
    for g, w in zip(got, graph.run([x])[0]):
        assert same_bits(g, w)
    assert all(same_bits(g, w) for g, w in zip(model(x), got))
    # chunks of equal sizes: 8 samples of which 7 fit run as 4 + 4, not 7 + 1
    graph._plans.clear()
    graph._chunks.clear()
    monkeypatch.setattr(graph_module, "CHUNK_BYTES", 7 * one + 100)
    x8 = np.concatenate([x, x[:1] * 0.5])
    got = model.predict_on_batch(x8)
    assert list(graph._chunks.values()) == [4]
    assert sorted(key[0][0][0][0] for key in graph._plans) == [4]
    for g, w in zip(got, graph.run([x8])[0]):
        assert same_bits(g, w)
    # a batch that fits runs whole
    graph._plans.clear()
    graph._chunks.clear()
    monkeypatch.setattr(graph_module, "CHUNK_BYTES", 100 * one)
    model.predict_on_batch(x)
    assert sorted(key[0][0][0][0] for key in graph._plans) == [7]


class _Custom(layers.Layer):
    """A layer from outside the library: it might mix the samples of a batch."""

    def call(self, x):
        return x * 2.0


@pytest.mark.parametrize("make", [
    lambda h: _Custom()(h),
    lambda h: layers.Concatenate(axis=0)([h, h]),
    lambda h: layers.Softmax(axis=0)(h),
    lambda h: layers.Softmax(axis=[-2, -1])(h),
])
def test_a_graph_that_may_mix_samples_runs_whole(make, monkeypatch):
    import mixedcore.models._graph as graph_module
    monkeypatch.setattr(graph_module, "CHUNK_BYTES", 1)
    inp = layers.Input((5,))
    model = models.Model(inp, make(layers.Dense(4)(inp)))
    assert not model._graph.per_sample
    x = np.random.default_rng(22).standard_normal((6, 5)).astype(F32)
    got = model.predict_on_batch(x)
    assert not model._graph._chunks
    assert same_bits(got, model._graph.run([x])[0][0])
    # the library's layers along other axes do not
    inp = layers.Input((5,))
    h = layers.Concatenate(axis=1)([layers.Dense(4)(inp), inp])
    plain = models.Model(inp, layers.Softmax(axis=-1)(layers.LayerNormalization()(h)))
    assert plain._graph.per_sample
    got = plain.predict_on_batch(x)
    assert list(plain._graph._chunks.values()) == [1]
    assert same_bits(got, plain._graph.run([x])[0][0])


def test_a_masked_graph_is_not_split(monkeypatch):
    import mixedcore.models._graph as graph_module
    monkeypatch.setattr(graph_module, "CHUNK_BYTES", 1)
    inp = layers.Input((6,), dtype="int32")
    h = layers.Embedding(10, 4, mask_zero=True)(inp)
    model = models.Model(inp, layers.Dense(3)(layers.GlobalAveragePooling1D()(h)))
    ids = np.array([[1, 2, 0, 0, 0, 0], [3, 4, 5, 6, 0, 0], [7, 0, 0, 0, 0, 0]])
    got = model.predict_on_batch(ids)
    assert list(model._graph._chunks.values()) == [3]
    assert same_bits(got, model._graph.run([ids])[0][0])


# -- blocks: expand -> depthwise -> project as one step -------------------------------------------

def _block_plan(x_shape, dtype, expand, out, blocks, stride=1, padding="same", dilation=1,
                mult=1, residual=False, seed=0):
    rng = np.random.default_rng(seed)
    c = x_shape[-1]
    plan = kernels.Plan(blocks=blocks)
    x = plan.add(*[plan.input(x_shape, dtype)] * 2, out_dtype=dtype)   # in the arena
    we = kernels.pack(rng.standard_normal((c, expand)).astype(F32) / 3, dtype=dtype)
    e = plan.matmul(x, we, bias=rng.standard_normal(expand).astype(F32), activation="relu6",
                    out_dtype=dtype)
    dk = rng.standard_normal((3, 3, expand, mult)).astype(F32) / 2
    d = plan.depthwise_conv2d(e, dk, strides=stride, padding=padding, dilation_rate=dilation,
                              bias=rng.standard_normal(expand * mult).astype(F32),
                              activation="relu6", out_dtype=dtype)
    wp = kernels.pack(rng.standard_normal((expand * mult, out)).astype(F32) / 4, dtype=dtype)
    y = plan.matmul(d, wp, bias=rng.standard_normal(out).astype(F32), out_dtype=dtype,
                    residual=x if residual else None)
    plan.finish([plan.add(y, y, out_dtype=dtype)])     # y in the arena too
    return plan


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [
    dict(x_shape=(1, 40, 40, 8), expand=256, out=8, residual=True),       # bands carry rows
    dict(x_shape=(1, 40, 40, 8), expand=256, out=8),
    dict(x_shape=(1, 40, 40, 8), expand=16, out=64),      # y where x would be, x read once
    dict(x_shape=(2, 41, 23, 6), expand=96, out=10, stride=2),
    dict(x_shape=(3, 17, 16, 8), expand=24, out=8, padding=((0, 1), (0, 1)), stride=2),
    dict(x_shape=(1, 30, 21, 5), expand=40, out=7, dilation=2, mult=2),
    dict(x_shape=(1, 7, 7, 16), expand=64, out=16, residual=True),        # few rows
    dict(x_shape=(1, 3, 40, 4), expand=300, out=4, padding="valid"),
], ids=["carry", "no-residual", "y-after-x", "stride2", "pad", "dilated-mult2", "7x7", "one-row"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_block_gives_the_bits_of_its_three_steps(isa_level, dtype, case, threads):
    x = rand(np.random.default_rng(1), case["x_shape"], dtype)
    one_by_one = _block_plan(dtype=dtype, blocks=False, **case)
    block = _block_plan(dtype=dtype, blocks=True, **case)
    assert one_by_one.blocks == [] and block.blocks == [1]
    with kernels.threads(threads):
        [want] = one_by_one.run([x])
        for _ in range(2):                      # the workspaces kept from the run before
            [got] = block.run([x])
            assert same_bits(got, want)
        # a range that holds part of a block runs its steps one by one
        arrays = [None] * len(block._buffers)
        arena, views = block._free[0]
        arrays = list(views)
        arrays[0] = x
        arrays[block._outputs[0]] = out = np.empty_like(want)
        for s in range(5):
            assert block._core.run(s, s + 1, arrays) == (0, -1)
        assert same_bits(out, want)


def test_what_is_not_a_block():
    rng = np.random.default_rng(2)
    w = kernels.pack(rng.standard_normal((8, 16)).astype(F32), dtype=BF16)
    wp = kernels.pack(rng.standard_normal((16, 8)).astype(F32), dtype=BF16)
    dk = rng.standard_normal((3, 3, 16, 1)).astype(F32)
    # the expanded buffer read again later, the depthwise output an output, a view between
    for case in ("reread", "output", "view"):
        plan = kernels.Plan()
        x = plan.input((1, 8, 8, 8), BF16)
        e = plan.matmul(x, w, out_dtype=BF16)
        d = plan.depthwise_conv2d(e, dk, padding="same", out_dtype=BF16)
        src = plan.reshape(d, (1, 64, 16)) if case == "view" else d
        y = plan.matmul(src, wp, out_dtype=BF16)
        outs = [y, plan.add(e, e) if case == "reread" else y]
        plan.finish(outs + ([d] if case == "output" else []))
        assert plan.blocks == [], case
    steps = _block_plan((1, 8, 8, 4), BF16, 8, 4, blocks=False)._core
    for bad in (-1, 2, 5):
        with pytest.raises(ValueError, match=r"PlanSteps.fuse_block: (steps|step) "):
            steps.fuse_block(bad)
    with pytest.raises(ValueError, match="are not a product, the depthwise convolution"):
        steps.fuse_block(0)
    steps.fuse_block(1)
    with pytest.raises(ValueError, match="PlanSteps.fuse_block: step 1 starts a block already"):
        steps.fuse_block(1)
    plan = kernels.Plan(blocks=False)               # three products
    h = plan.input((1, 8, 8, 8), BF16)
    for _ in range(3):
        h = plan.matmul(h, kernels.pack(rng.standard_normal((8, 8)).astype(F32), dtype=BF16))
    with pytest.raises(ValueError, match="are not a product, the depthwise convolution of its "
                                         "output and a product of that"):
        plan._core.fuse_block(0)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_block_with_a_subnormal_bfloat16_in_one_band(isa_level, threads):
    """A subnormal bfloat16 sends a product on VDPBF16PS back to float32 panels: the whole
    product when it runs as a step, the band's when it runs in a block -- the same bits."""
    x = rand(np.random.default_rng(3), (1, 40, 40, 8), BF16)
    x.view(np.uint16)[0, 30, 5, 3] = 0x0001
    with kernels.threads(threads):
        [want] = _block_plan(x.shape, BF16, 256, 8, blocks=False, residual=True).run([x])
        [got] = _block_plan(x.shape, BF16, 256, 8, blocks=True, residual=True).run([x])
    assert same_bits(got, want)
