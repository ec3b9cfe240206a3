"""GPTQ and AWQ layers (Keras 3's calibrated int-weight modes): Dense and EinsumDense read,
run and write them as Keras does -- the unsigned codes of the transposed kernel (4-bit ones
packed two to a byte), a scale and zero point per output column and group, AWQ's per-row
scales, the group of each row -- checked against the dequantization formula written out here,
against real Keras 3 both ways, and for the errors (docs/quantization.md)."""
import contextlib
import math
import zipfile

import numpy as np
import pytest

from mixedcore import layers
from mixedcore import quantizers as q
from mixedcore.models import Model, Sequential, load_model

RNG = np.random.default_rng(41)


def _codes(bits, cols, rows):
    """Random unsigned codes (cols, rows) and their stored form (packed for 4 bits: the low
    nibble the even column, the high nibble the odd one, a zero nibble past an odd count)."""
    codes = RNG.integers(0, 2 ** bits, size=(cols, rows)).astype(np.uint8)
    if bits != 4:
        return codes, codes
    padded = np.concatenate([codes, np.zeros((cols % 2, rows), np.uint8)])
    return codes, (padded[0::2] | (padded[1::2] << 4)).astype(np.uint8)


def _calibrated_weights(mode, bits, group, rows, cols, act_order=False):
    """{name: stored value} and the float32 (rows, cols) kernel they stand for, by the formula
    W[i, o] = (q[o, i] - zero[o, g(i)]) * scale[o, g(i)] (/ awq_scales[i])."""
    groups = 1 if group == -1 else math.ceil(rows / group)
    codes, stored = _codes(bits, cols, rows)
    scale = RNG.uniform(0.01, 0.2, size=(cols, groups)).astype(np.float32)
    zero = RNG.integers(0, 2 ** bits, size=(cols, groups)).astype(np.uint8)
    # Keras's GPTQ writes i / group_size (fractions); with activation order, permuted
    g = (np.arange(rows) / (rows if group == -1 else group)).astype(np.float32)
    if act_order:
        g = g[RNG.permutation(rows)]
    gi = g.astype(np.int64)
    w = ((codes.astype(np.float32) - zero[:, gi].astype(np.float32)) * scale[:, gi]).T
    values = {"kernel": stored, "kernel_scale": scale, "kernel_zero": zero, "g_idx": g}
    if mode == "awq":
        awq = RNG.uniform(0.8, 1.25, size=rows).astype(np.float32)
        values["awq_scales"] = awq
        w = w / awq[:, None]
    return values, np.ascontiguousarray(w, dtype=np.float32)


def _set(layer, values):
    for name, value in values.items():
        target = layer._weight("zero_point" if name == "kernel_zero" and
                               isinstance(layer, layers.EinsumDense) else name)
        assert target.shape == value.shape and target.dtype == value.dtype, name
        target[...] = value
    layer.weights_updated()


DENSE_CASES = [("gptq", 4, 16, 40, 7, False), ("gptq", 4, 16, 40, 8, True),
               ("gptq", 8, -1, 24, 9, False), ("gptq", 3, 8, 20, 6, False),
               ("gptq", 2, 16, 33, 5, True), ("awq", 4, 16, 40, 7, False),
               ("awq", 4, -1, 24, 10, False)]


@pytest.mark.parametrize("mode,bits,group,rows,cols,act_order", DENSE_CASES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_dense_runs_the_dequantized_kernel(mode, bits, group, rows, cols, act_order, bias):
    model = Sequential([layers.Input((rows,)),
                        layers.Dense(cols, use_bias=bias, activation="relu", name="fc",
                                     dtype=f"{mode}/{bits}/{group}_from_float32")])
    fc = model.get_layer("fc")
    assert fc.quantization_mode == mode
    assert fc._names[0] == "kernel" and fc.kernel.dtype == np.uint8
    values, w = _calibrated_weights(mode, bits, group, rows, cols, act_order)
    _set(fc, values)
    b = RNG.standard_normal(cols).astype(np.float32) if bias else np.zeros(cols, np.float32)
    if bias:
        fc._weight("bias")[...] = b
        fc.weights_updated()
    assert np.array_equal(fc.dequantized_kernel(), w)
    x = RNG.standard_normal((5, rows)).astype(np.float32)
    want = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b, 0)
    got = model.predict(x, verbose=0)
    assert got.dtype == np.float32
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5)
    # mixed_bfloat16: float32 products of the rounded inputs, one rounding at the end
    model_b = Sequential([layers.Input((rows,)),
                          layers.Dense(cols, use_bias=bias, activation="relu", name="fc",
                                       dtype=f"{mode}/{bits}/{group}_from_mixed_bfloat16")])
    model_b.set_weights(model.get_weights())
    xb = x.astype("bfloat16").astype(np.float32)
    want_b = np.maximum(xb.astype(np.float64) @ w.astype(np.float64) + b, 0)
    got_b = model_b.predict(x, verbose=0).astype(np.float32)
    bad = ~np.isclose(got_b, want_b, rtol=2 ** -7, atol=1e-3)
    assert not bad.any(), (got_b[bad], want_b[bad])


EINSUM_CASES = [("ab,bc->ac", (12,), (24,), None),          # 2-D kernel (24, 12)
                ("abc,cde->abde", (None, 3, 4), (5, 20), None),   # (20, 3, 4): input first
                ("abcd,cde->abe", (None, 16), (5, 3, 4), None)]   # (3, 4, 16): output last


@pytest.mark.parametrize("mode", ["gptq", "awq"])
@pytest.mark.parametrize("equation,out_shape,in_shape,_", EINSUM_CASES, ids=str)
def test_einsum_dense_runs_the_dequantized_kernel(mode, equation, out_shape, in_shape, _):
    layer = layers.EinsumDense(equation, out_shape, bias_axes=equation[-1], name="e",
                               dtype=f"{mode}/4/8_from_float32")
    model = Sequential([layers.Input(in_shape), layer])
    shape = layer._plan.kernel_shape
    if len(shape) == 2:
        rows, cols = shape
    elif shape.index(max(shape)) == 0:
        rows, cols = shape[0], shape[1] * shape[2]
    else:
        rows, cols = shape[0] * shape[1], shape[2]
    values, w = _calibrated_weights(mode, 4, 8, rows, cols)
    _set(layer, values)
    kernel = w.reshape(shape)
    assert np.array_equal(layer.dequantized_kernel(), kernel)
    x = RNG.standard_normal((3,) + in_shape).astype(np.float32)
    bias = layer._weight("bias")
    want = np.einsum(equation, x.astype(np.float64), kernel.astype(np.float64)) + bias
    assert np.allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=1e-5)
    names = layer._names
    assert "zero_point" in names and ("awq_scales" in names) == (mode == "awq")


def test_files_round_trip_and_training_keeps_the_codes(tmp_path):
    x = RNG.standard_normal((6, 40)).astype(np.float32)
    model = Sequential([layers.Input((40,)),
                        layers.Dense(7, name="fc", dtype="awq/4/16_from_float32"),
                        layers.EinsumDense("ab,bc->ac", 3, bias_axes="c", name="e",
                                           dtype="gptq/4/8_from_float32")])
    values, _ = _calibrated_weights("awq", 4, 16, 40, 7)
    _set(model.get_layer("fc"), values)
    values, _ = _calibrated_weights("gptq", 4, 8, 7, 3)
    _set(model.get_layer("e"), values)
    y = model.predict(x, verbose=0)
    model.save(tmp_path / "m.keras")
    back = load_model(tmp_path / "m.keras")
    assert back.get_layer("fc").dtype_policy.name == "awq/4/16_from_float32"
    assert np.array_equal(back.predict(x, verbose=0), y)
    before = {(n, w): np.array(back.get_layer(n)._weight(w))
              for n in ("fc", "e") for w in back.get_layer(n)._names}
    back.compile(optimizer="sgd", loss="mse")
    back.fit(x, np.ones((6, 3), np.float32), epochs=1, verbose=0)
    for (n, w), value in before.items():
        now = back.get_layer(n)._weight(w)
        if w == "bias":
            assert not np.array_equal(value, now), (n, w)        # the biases train
        else:
            assert np.array_equal(value, now), (n, w)            # the quantized weights do not


def test_errors():
    with pytest.raises(ValueError, match="calibrates the weights on data"):
        Sequential([layers.Input((8,)), layers.Dense(4, name="d")]).quantize(
            config=q.GPTQConfig())
    with pytest.raises(ValueError, match="needs calibration data"):
        Sequential([layers.Input((8,)), layers.Dense(4, name="d")]).quantize("gptq")
    with pytest.raises(ValueError, match="Unsupported weight_bits 5"):
        q.GPTQConfig(weight_bits=5)
    with pytest.raises(ValueError, match="AWQ only supports 4-bit"):
        q.AWQConfig(weight_bits=8)
    with pytest.raises(ValueError, match="group_size"):
        q.GPTQConfig(group_size=0)
    with pytest.raises(ValueError, match="hessian_damping"):
        q.GPTQConfig(hessian_damping=2.0)
    with pytest.raises(ValueError, match="num_samples"):
        q.AWQConfig(num_samples=0)
    assert q.GPTQConfig.from_config(q.GPTQConfig(group_size=-1).get_config()) == \
        q.GPTQConfig(group_size=-1)
    # a g_idx outside the groups, or not finite, is refused by name
    model = Sequential([layers.Input((16,)),
                        layers.Dense(4, name="fc", dtype="gptq/4/8_from_float32")])
    fc = model.get_layer("fc")
    for bad in (np.full(16, 2.0, np.float32), np.full(16, np.nan, np.float32),
                np.full(16, -1.0, np.float32)):
        fc._weight("g_idx")[...] = bad
        fc.weights_updated()
        with pytest.raises(ValueError, match="Dense 'fc': g_idx must hold group positions"):
            model.predict(np.ones((1, 16), np.float32), verbose=0)
    with pytest.raises(ValueError, match="2-D or 3-D kernels"):
        Sequential([layers.Input((2, 3, 4)),
                    layers.EinsumDense("abcd,cdef->abef", (2, 5, 6), name="e",
                                       dtype="gptq/4/8_from_float32")])
    with pytest.raises(ValueError, match="gptq_unpacked_column_size 9 does not fit"):
        Sequential([layers.Input((12,)),
                    layers.EinsumDense("ab,bc->ac", 5, name="e", gptq_unpacked_column_size=9,
                                       dtype="gptq/4/8_from_float32")])


# -- against Keras 3 ------------------------------------------------------------------------------

@contextlib.contextmanager
def _keras_save_with_zero_points():
    """Keras 3.15.1's save of a GPTQ / AWQ layer leaves out its zero points (its
    ``_get_kernel_with_merged_lora`` returns none for these modes), so that Keras cannot load
    its own file; while this runs, the zero points are written as Keras's loader expects."""
    from keras.src.layers.core.dense import Dense
    from keras.src.layers.core.einsum_dense import EinsumDense
    saved = {cls: cls._get_kernel_with_merged_lora for cls in (Dense, EinsumDense)}

    def merged(self, _orig):
        kernel, scale, zero = _orig(self)
        if self.quantization_mode in ("gptq", "awq"):
            zero = self.kernel_zero
        return kernel, scale, zero

    try:
        for cls, orig in saved.items():
            cls._get_kernel_with_merged_lora = lambda self, _o=orig: merged(self, _o)
        yield
    finally:
        for cls, orig in saved.items():
            cls._get_kernel_with_merged_lora = orig


def _keras_quantized(keras, mode):
    """A Keras Dense / EinsumDense stack on (4, 32) inputs quantized by Keras's own
    ``quantize`` (integer calibration data of 128 values reshaped to (4, 32) before the blocks,
    each quantized layer its own block)."""
    keras.utils.set_random_seed(3)
    inp = keras.Input((4, 32))
    h = keras.layers.Dense(24, activation="relu", name="fc1")(inp)
    h = keras.layers.EinsumDense("abc,cd->abd", (4, 20), bias_axes="d", name="e")(h)
    model = keras.Model(inp, keras.layers.Dense(7, use_bias=False, name="fc2")(h))
    blocks = [model.get_layer(n) for n in ("fc1", "e", "fc2")]
    model.get_quantization_layer_structure = lambda m: {
        "pre_block_layers": [keras.layers.Reshape((4, 32))], "sequential_blocks": blocks}
    calib = RNG.integers(-3, 4, size=(16, 128)).astype(np.int32)
    if mode == "gptq":
        config = keras.quantizers.GPTQConfig(dataset=calib, tokenizer=lambda s: s,
                                             num_samples=8, sequence_length=128, group_size=8)
    else:
        config = keras.quantizers.AWQConfig(dataset=calib, tokenizer=lambda s: s,
                                            num_samples=8, sequence_length=128, group_size=8)
    model.quantize(mode, config=config)
    # calibration gives the codes; zero points and scales (AWQ's too) that are not uniform
    for layer in blocks:
        layer.kernel_zero.assign(RNG.integers(0, 16, size=tuple(layer.kernel_zero.shape))
                                 .astype(np.uint8))
        layer.kernel_scale.assign(RNG.uniform(0.01, 0.2, size=tuple(layer.kernel_scale.shape))
                                  .astype(np.float32))
        if mode == "awq":
            layer.awq_scales.assign(RNG.uniform(0.8, 1.25, size=tuple(layer.awq_scales.shape))
                                    .astype(np.float32))
    return model


@pytest.mark.keras
@pytest.mark.parametrize("mode", ["gptq", "awq"])
def test_keras_files_both_ways(keras, tmp_path, mode):
    km = _keras_quantized(keras, mode)
    x = RNG.standard_normal((5, 4, 32)).astype(np.float32)
    want = np.asarray(km.predict(x, verbose=0))
    # Keras's own file lacks the zero points: refused with the layer and counts named
    km.save(tmp_path / "stock.keras")
    with pytest.raises(ValueError, match="the weights do not fit the model.*fc1.*zero points"):
        load_model(tmp_path / "stock.keras")
    with _keras_save_with_zero_points():
        km.save(tmp_path / "keras.keras")
    model = load_model(tmp_path / "keras.keras")
    assert model.get_layer("fc1").dtype_policy.name == f"{mode}/4/8_from_float32"
    tol = 1e-5 * np.abs(want).max()             # float32 sums of another order (torch's)
    assert np.allclose(model.predict(x, verbose=0), want, rtol=1e-5, atol=tol)
    for name in ("fc1", "e", "fc2"):
        kl, ml = km.get_layer(name), model.get_layer(name)
        assert sorted(w.name for w in kl.weights) == sorted(ml._names)
        for kw in kl.weights:
            assert np.array_equal(np.asarray(kw.numpy()), ml._weight(kw.name)), (name, kw.name)
    # written here, loaded by Keras: the same predictions
    model.save(tmp_path / "ours.keras")
    with zipfile.ZipFile(tmp_path / "ours.keras") as z:
        assert b"GPTQConfig" in z.read("config.json") or mode == "awq"
    back = keras.saving.load_model(tmp_path / "ours.keras")
    assert np.allclose(np.asarray(back.predict(x, verbose=0)), want, rtol=1e-5, atol=tol)
    # and under mixed_bfloat16 within the rounding of the inputs
    mixed = load_model(tmp_path / "keras.keras", dtype_policy="mixed_bfloat16")
    assert mixed.get_layer("e").dtype_policy.name == f"{mode}/4/8_from_mixed_bfloat16"
    assert np.allclose(mixed.predict(x, verbose=0).astype(np.float32), want, rtol=0.03,
                       atol=0.01 * np.abs(want).max())


def test_model_is_a_functional_model_too():
    inp = layers.Input((16,))
    out = layers.Dense(5, name="fc", dtype="gptq/8/-1_from_float32")(inp)
    model = Model(inp, out)
    values, w = _calibrated_weights("gptq", 8, -1, 16, 5)
    _set(model.get_layer("fc"), values)
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    want = x.astype(np.float64) @ w + model.get_layer("fc")._weight("bias")
    assert np.allclose(model(x), want, rtol=1e-5, atol=1e-5)
