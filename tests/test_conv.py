"""Convolutions and pooling: mixedcore.kernels (conv2d, depthwise_conv2d, pool2d, im2col,
col2im) and the layers (Conv1D, Conv2D, DepthwiseConv2D, SeparableConv2D, the pooling layers).

Kernels: conv2d against the float64 product of the same (rounded) inputs within the GEMM's bound
``2 * K * 2**-24 * (|im2col(x)| @ |kernel|)`` (docs/gemm.md), and bit for bit against
``kernels.matmul`` of the im2col matrix with the same packed weights; depthwise and pooling bit
for bit against their scalar twins (the generic level) at every ISA level.  Layers: gradients
against float64 finite differences, training and inference agreeing, configs, bad input; and,
marked ``keras``, outputs against Keras 3 with the same weights.
"""
import os
import pickle

import ml_dtypes
import numpy as np
import pytest

import mixedcore
from mixedcore import kernels, layers, models, utils
from mixedcore.policy import policy_scope

from gradcheck import numeric_grad

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
U = 2.0 ** -24


@pytest.fixture
def rng():
    return np.random.default_rng(2024)


@pytest.fixture(autouse=True)
def _seed():
    utils.set_random_seed(11)


def _f64(a):
    return np.asarray(a).astype(np.float64)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


# -- independent numpy references ------------------------------------------------------------------

def _pads(size, k, s, d, padding):
    if padding == "valid":
        return 0, 0
    if padding == "same":
        span = (k - 1) * d + 1
        out = -(-size // s)
        total = max((out - 1) * s + span - size, 0)
        return total // 2, total - total // 2
    return padding


def ref_windows(x, ksize, strides, padding, dilation):
    """(N, OH, OW, KH, KW, C) float64 windows of x (NaN marks padding) for an explicit or
    named padding."""
    n, h, w, c = x.shape
    kh, kw = ksize
    sh, sw = strides
    dh, dw = dilation
    if isinstance(padding, str):
        pt, pb = _pads(h, kh, sh, dh, padding)
        pl, pr = _pads(w, kw, sw, dw, padding)
    else:
        (pt, pb), (pl, pr) = padding
    xp = np.full((n, h + pt + pb, w + pl + pr, c), np.nan)
    xp[:, pt:pt + h, pl:pl + w] = _f64(x)
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    out = np.empty((n, oh, ow, kh, kw, c))
    for i in range(kh):
        for j in range(kw):
            out[:, :, :, i, j] = xp[:, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                                    j * dw:j * dw + (ow - 1) * sw + 1:sw]
    return out


def ref_conv(x, kernel, strides, padding, dilation, groups):
    """(float64 result, float64 bound magnitude |windows| @ |kernel|)."""
    win = np.nan_to_num(ref_windows(x, kernel.shape[:2], strides, padding, dilation))
    kh, kw, cg, f = kernel.shape
    fg = f // groups
    k = _f64(kernel)
    outs, mags = [], []
    for g in range(groups):
        wg = win[..., g * cg:(g + 1) * cg].reshape(win.shape[:3] + (-1,))
        kg = k[..., g * fg:(g + 1) * fg].reshape(-1, fg)
        outs.append(wg @ kg)
        mags.append(np.abs(wg) @ np.abs(kg))
    return np.concatenate(outs, -1), np.concatenate(mags, -1)


def ref_depthwise(x, kernel, strides, padding, dilation):
    win = np.nan_to_num(ref_windows(x, kernel.shape[:2], strides, padding, dilation))
    out = np.einsum("nhwijc,ijcm->nhwcm", win, _f64(kernel))
    mag = np.einsum("nhwijc,ijcm->nhwcm", np.abs(win), np.abs(_f64(kernel)))
    s = out.shape
    return out.reshape(s[:3] + (-1,)), mag.reshape(s[:3] + (-1,))


def ref_pool(x, pool, strides, padding, mode):
    win = ref_windows(x, pool, strides, padding, (1, 1))
    win = win.reshape(win.shape[:3] + (-1, win.shape[-1]))
    if mode == "max":
        return np.nanmax(win, axis=3)
    return np.nanmean(win, axis=3)


# -- conv2d ---------------------------------------------------------------------------------------

CONV_CASES = [
    # shape, kernel (kh, kw), filters, strides, padding, dilation, groups
    ((2, 7, 9, 6), (3, 3), 5, (1, 1), "same", (1, 1), 1),
    ((1, 13, 11, 4), (3, 3), 33, (1, 1), "valid", (2, 2), 1),
    ((2, 11, 8, 6), (3, 2), 4, (2, 2), "same", (1, 1), 2),
    ((3, 5, 5, 8), (1, 1), 8, (1, 1), "valid", (1, 1), 4),
    ((2, 10, 9, 3), (5, 4), 7, (2, 3), "same", (1, 2), 1),
    ((1, 9, 17, 19), (3, 3), 70, (1, 2), "valid", (1, 1), 1),
    ((2, 6, 6, 12), (2, 2), 6, (1, 1), ((1, 0), (2, 1)), (1, 1), 3),
    ((1, 4, 40, 80), (1, 3), 20, (1, 1), "same", (1, 1), 1),
    ((1, 20, 20, 300), (3, 3), 17, (1, 1), "same", (1, 1), 1),   # K > KC: K blocks
    ((1, 7, 7, 240), (3, 3), 96, (1, 1), "same", (1, 1), 2),     # bands of filters, K blocks
    ((2, 6, 7, 20), (1, 1), 24, (1, 1), "same", (1, 1), 1),      # pointwise: the GEMM itself
    ((2, 7, 7, 8), (1, 1), 5, (2, 2), "valid", (1, 1), 1),
    # rows of pixels wide enough for micro-tiles whose windows lie inside the image (packed
    # straight from it) beside tiles at the edges and across output rows (copied first)
    ((2, 6, 40, 8), (3, 3), 40, (1, 1), "same", (1, 1), 1),
    ((1, 9, 50, 6), (3, 3), 16, (2, 2), "valid", (2, 1), 1),
    ((1, 5, 45, 3), (3, 3), 8, (1, 1), "same", (1, 1), 1),        # an odd run of taps
    # windows cut to the image: inner runs, edge rows, edge columns, several images
    ((3, 6, 6, 16), (3, 3), 40, (1, 1), "same", (1, 1), 1),
    ((2, 5, 30, 4), (3, 3), 20, (1, 1), ((2, 2), (2, 2)), (1, 1), 1),  # two edge rows a side
    ((2, 9, 8, 6), (3, 3), 33, (2, 2), ((3, 0), (4, 2)), (2, 1), 1),  # rows with one kernel row
    ((1, 3, 2, 4), (5, 5), 8, (1, 1), "same", (1, 1), 1),         # no inner row or column
    ((1, 4, 5, 2), (3, 3), 6, (1, 1), ((5, 0), (0, 6)), (1, 1), 1),  # windows wholly outside
]


def _case_id(case):
    shape, ks, f, st, pad, dl, g = case
    return (f"{'x'.join(map(str, shape))}-k{ks[0]}{ks[1]}-f{f}-s{st[0]}{st[1]}-{pad}"
            f"-d{dl[0]}{dl[1]}-g{g}")


@pytest.mark.parametrize("case", CONV_CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_conv2d_error_bound(isa_level, case, dtype, rng):
    shape, ks, f, st, pad, dl, g = case
    x = rng.standard_normal(shape).astype(dtype)
    kernel = rng.standard_normal(ks + (shape[3] // g, f)).astype(dtype)
    got = kernels.conv2d(x, kernel, strides=st, padding=pad, dilation_rate=dl, groups=g)
    assert got.dtype == F32
    ref, mag = ref_conv(x, kernel, st, pad, dl, g)
    assert got.shape == ref.shape
    k = ks[0] * ks[1] * shape[3] // g
    err = np.abs(_f64(got) - ref)
    assert np.all(err <= 2 * k * U * mag), np.max(err - 2 * k * U * mag)


@pytest.mark.parametrize("case", CONV_CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_conv2d_equals_matmul_of_im2col(isa_level, case, dtype, activation, rng):
    """The same bits as kernels.matmul of the explicit im2col matrix against the same packed
    weights, group by group, with bias, activation and the output rounding fused."""
    shape, ks, f, st, pad, dl, g = case
    x = rng.standard_normal(shape).astype(dtype)
    kernel = rng.standard_normal(ks + (shape[3] // g, f)).astype(np.float32)
    bias = rng.standard_normal(f).astype(np.float32)
    packed = kernels.pack_conv(kernel, g, dtype=dtype)
    out_dtype = None if dtype == F32 else dtype
    got = kernels.conv2d(x, packed, strides=st, padding=pad, dilation_rate=dl, groups=g,
                         bias=bias, activation=activation, out_dtype=out_dtype)
    cg, fg = shape[3] // g, f // g
    parts = []
    for gi in range(g):
        cols = kernels.im2col(x, ks, strides=st, padding=pad, dilation_rate=dl,
                              channels=(gi * cg, (gi + 1) * cg))
        parts.append(kernels.matmul(cols, packed.matrices[gi], bias=bias[gi * fg:(gi + 1) * fg],
                                    activation=activation, out_dtype=out_dtype))
    want = np.concatenate(parts, axis=1).reshape(got.shape)
    assert got.dtype == want.dtype
    assert np.array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("where", [(3, 20), (3, 0), (0, 20), (0, 39)],
                         ids=["inner", "edge-column", "edge-row", "corner"])
def test_conv2d_subnormal_bfloat16_inside_the_image(isa_level, rng, where):
    """A subnormal bfloat16 is found wherever the tiles read it (in place along a row or down
    an edge column, or packed with an edge row), as the im2col pack finds it: its products are
    not flushed to zero (VDPBF16PS would)."""
    x = np.zeros((1, 6, 40, 8), BF16)
    x[0, where[0], where[1], 5] = 2.0 ** -130
    packed = kernels.pack_conv(rng.standard_normal((3, 3, 8, 40)).astype(np.float32),
                               dtype=BF16)
    got = kernels.conv2d(x, packed, padding="same", out_dtype=np.float32)
    cols = kernels.im2col(x, (3, 3), padding="same")
    want = kernels.matmul(cols, packed.matrices[0], out_dtype=np.float32).reshape(got.shape)
    assert np.array_equal(_bits(got), _bits(want))
    windows = (3 if 0 < where[0] < 5 else 2) * (3 if 0 < where[1] < 39 else 2)
    assert np.count_nonzero(got) == windows * 40


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_conv2d_nonfinite_weights_meet_the_padding(isa_level, dtype, rng):
    """Windows are cut to the image only when every weight is finite: an infinite weight
    times a padded zero is NaN, as in the product with the explicit im2col matrix."""
    x = rng.standard_normal((2, 5, 30, 4)).astype(dtype)
    kernel = rng.standard_normal((3, 3, 4, 20)).astype(np.float32)
    kernel[0, 0, 1, 3] = np.inf
    packed = kernels.pack_conv(kernel, dtype=dtype)
    out_dtype = None if dtype == F32 else dtype
    got = kernels.conv2d(x, packed, padding="same", out_dtype=out_dtype)
    cols = kernels.im2col(x, (3, 3), padding="same")
    want = kernels.matmul(cols, packed.matrices[0], out_dtype=out_dtype).reshape(got.shape)
    assert np.array_equal(_bits(got), _bits(want))
    assert np.isnan(got[:, 0, :, 3].astype(np.float32)).all()    # tap (0, 0) on the padding
    assert np.isnan(got[:, :, 0, 3].astype(np.float32)).all()


def test_pack_conv_keeps_k_in_one_block(isa_level):
    """A kernel wider than one pixel is packed with its K in one block (up to 8192), a
    pointwise one in the level's blocks, as pack does; neither is stale."""
    level_kc = kernels.pack(np.ones((8, 8), BF16)).format[3]
    for shape, kc in (((3, 3, 300, 8), 2700), ((1, 1, 300, 8), 0), ((3, 3, 1000, 8), 0)):
        packed = kernels.pack_conv(np.ones(shape, np.float32), dtype=BF16)
        assert packed.matrices[0].format[3] == max(kc, level_kc)
        assert not packed.stale


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
def test_conv2d_ndarray_kernel_is_packed_in_x_dtype(isa_level, dtype, rng):
    x = rng.standard_normal((2, 6, 7, 5)).astype(dtype)
    kernel = rng.standard_normal((3, 3, 5, 9)).astype(np.float32)
    a = kernels.conv2d(x, kernel, padding="same")
    b = kernels.conv2d(x, kernels.pack_conv(kernel, dtype=dtype), padding="same")
    assert np.array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_conv2d_threads_do_not_change_bits(isa_level, dtype, rng):
    x = rng.standard_normal((4, 24, 24, 16)).astype(dtype)
    kernel = rng.standard_normal((3, 3, 16, 48)).astype(dtype)
    dwk = rng.standard_normal((3, 3, 16, 2)).astype(np.float32)
    # a small image against many filters: bands of filters as well as of pixels
    small = rng.standard_normal((1, 7, 7, 240)).astype(dtype)
    wide = kernels.pack_conv(rng.standard_normal((3, 3, 240, 200)).astype(np.float32) / 40,
                             dtype=dtype)
    results = []
    for n in (1, 2):
        with kernels.threads(n):
            results.append([
                kernels.conv2d(x, kernel, padding="same", activation="tanh"),
                kernels.conv2d(x, kernel[:, :, :8], strides=2, groups=2, padding="same"),
                kernels.conv2d(small, wide, padding="same", out_dtype=dtype, activation="relu"),
                kernels.depthwise_conv2d(x, dwk, padding="same"),
                kernels.pool2d(x, 3, strides=2, padding="same", mode="average"),
                kernels.pool2d(x, 2, mode="max"),
                kernels.pool2d_grad(x, np.ones((4, 12, 12, 16), np.float32), 3, strides=2,
                                    padding="same", mode="average"),
                kernels.col2im(np.ones((4 * 24 * 24, 9 * 16), np.float32), x.shape, 3,
                               padding="same"),
                kernels.im2col(x, 3, padding="same"),
            ])
    for a, b in zip(*results):
        assert np.array_equal(_bits(a), _bits(b))


def test_conv2d_output_dtypes_and_empty(isa_level, rng):
    x = rng.standard_normal((2, 5, 5, 3)).astype(np.float32)
    k = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    for name, dt in (("float16", F16), ("bfloat16", BF16), ("float32", F32)):
        y = kernels.conv2d(x, k, out_dtype=name)
        assert y.dtype == dt
        np.testing.assert_array_equal(
            y, kernels.cast(kernels.conv2d(x, k), dt))     # rounded once from float32
    empty = kernels.conv2d(np.zeros((0, 5, 5, 3), np.float32), k)
    assert empty.shape == (0, 3, 3, 4)


def test_pack_conv_unpack_and_pickle(rng):
    k = rng.standard_normal((3, 2, 4, 6)).astype(np.float32)
    p = kernels.pack_conv(k, groups=2)
    assert p.kernel_shape == (3, 2, 4, 6) and p.groups == 2 and len(p.matrices) == 2
    assert np.array_equal(p.unpack(), k)
    assert p.nbytes > 0 and not p.stale and "PackedConv" in repr(p)
    pb = kernels.pack_conv(k, dtype="bfloat16")
    assert pb.dtype == BF16
    assert np.array_equal(_bits(pb.unpack()), _bits(kernels.cast(k, BF16)))
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(p)


def test_conv2d_special_values_stay_in_their_windows(isa_level):
    x = np.zeros((1, 6, 6, 2), np.float32)
    x[0, 0, 0, 0] = np.nan
    k = np.ones((2, 2, 2, 3), np.float32)
    y = kernels.conv2d(x, k)
    assert np.isnan(y[0, 0, 0]).all()
    assert not np.isnan(y[0, 1:, :]).any() and not np.isnan(y[0, :, 1:]).any()


# -- im2col / col2im -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CONV_CASES[:7], ids=_case_id)
def test_im2col_against_windows_and_col2im_adjoint(case, rng):
    shape, ks, f, st, pad, dl, g = case
    x = rng.standard_normal(shape)
    cols = kernels.im2col(x, ks, strides=st, padding=pad, dilation_rate=dl)
    win = np.nan_to_num(ref_windows(x, ks, st, pad, dl))
    assert np.array_equal(cols, win.reshape(cols.shape))
    for dt in (F16, BF16, F32):
        xc = x.astype(dt)
        got = kernels.im2col(xc, ks, strides=st, padding=pad, dilation_rate=dl)
        assert got.dtype == dt
        assert np.array_equal(_bits(got), _bits(np.nan_to_num(
            ref_windows(xc, ks, st, pad, dl)).astype(np.float32).astype(dt).reshape(got.shape)))
    # <im2col(x), c> == <x, col2im(c)>
    c = rng.standard_normal(cols.shape)
    back = kernels.col2im(c, x.shape, ks, strides=st, padding=pad, dilation_rate=dl)
    assert np.isclose(np.sum(cols * c), np.sum(x * back), rtol=1e-12)
    # a channel range adds into its channels only
    c0, c1 = 1, shape[3]
    part = kernels.im2col(x, ks, strides=st, padding=pad, dilation_rate=dl, channels=(c0, c1))
    assert np.array_equal(part, win[..., c0:c1].reshape(part.shape))
    out = np.ones(x.shape)
    kernels.col2im(np.ones(part.shape), x.shape, ks, strides=st, padding=pad, dilation_rate=dl,
                   channels=(c0, c1), out=out)
    assert np.all(out[..., :c0] == 1.0)


# -- depthwise ------------------------------------------------------------------------------------

def _here_and_generic(run):
    """``run()`` at the current level and at the generic one (the scalar twins)."""
    got = run()
    level = kernels.isa()
    kernels.set_isa("generic")
    try:
        return got, run()
    finally:
        kernels.set_isa(level)


DW_CASES = [
    ((2, 7, 9, 5), (3, 3), 1, (1, 1), "same", (1, 1)),
    ((2, 11, 8, 3), (3, 2), 2, (2, 2), "same", (1, 1)),
    ((1, 13, 13, 17), (3, 3), 3, (1, 1), "valid", (2, 2)),
    ((2, 8, 8, 40), (5, 5), 1, (2, 1), "same", (1, 1)),
    ((1, 5, 6, 1), (2, 3), 4, (1, 1), "valid", (1, 1)),
]


@pytest.mark.parametrize("case", DW_CASES, ids=str)
@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
def test_depthwise_matches_scalar_twin_and_reference(isa_level, case, dtype, rng):
    shape, ks, mult, st, pad, dl = case
    x = rng.standard_normal(shape).astype(dtype)
    kdt = F64 if dtype == F64 else F32
    kernel = rng.standard_normal(ks + (shape[3], mult)).astype(kdt)
    bias = rng.standard_normal(shape[3] * mult).astype(kdt)
    act = None if dtype == F64 else "tanh"
    out = None if dtype in (F32, F64) else dtype

    got, want = _here_and_generic(lambda: kernels.depthwise_conv2d(
        x, kernel, strides=st, padding=pad, dilation_rate=dl, bias=bias, activation=act,
        out_dtype=out))
    assert np.array_equal(_bits(got), _bits(want))
    plain = kernels.depthwise_conv2d(x, kernel, strides=st, padding=pad, dilation_rate=dl)
    ref, mag = ref_depthwise(x, kernel, st, pad, dl)
    taps = ks[0] * ks[1]
    u = 2.0 ** -53 if dtype == F64 else U
    assert np.all(np.abs(_f64(plain) - ref) <= 2 * taps * u * mag)


# depth multiplier 1, one type in and out, an activation of a few instructions: the levels that
# have it run the epilogue on the sums in registers (and load a 3-wide row's pixels once)
DW_EPI_CASES = [
    ((2, 9, 13, 32), (3, 3), (1, 1), "same", (1, 1)),
    ((1, 7, 11, 47), (3, 3), (1, 1), "valid", (1, 1)),
    ((1, 12, 10, 144), (3, 3), (2, 2), "same", (1, 1)),
    ((2, 6, 14, 16), (3, 3), (1, 1), "same", (2, 2)),
    ((1, 5, 19, 80), (3, 3), (1, 2), "same", (1, 1)),
    ((1, 8, 9, 3), (5, 5), (1, 1), "same", (1, 1)),
    ((1, 4, 30, 64), (1, 3), (1, 1), "same", (1, 1)),
]


@pytest.mark.parametrize("case", DW_EPI_CASES, ids=str)
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
@pytest.mark.parametrize("act", [None, "relu", "relu6"])
def test_depthwise_epilogue_in_registers_matches_scalar_twin(isa_level, case, dtype, act, rng):
    shape, ks, st, pad, dl = case
    x = rng.standard_normal(shape).astype(np.float32) * 4
    # values the epilogue's rounding treats apart: halfway cases, NaN, infinities, subnormals
    flat = x.reshape(-1)
    flat[::97] = np.nan
    flat[5::101] = np.inf
    flat[7::103] = -np.inf
    flat[11::89] = 1e-39
    kernel = rng.standard_normal(ks + (shape[3], 1)).astype(np.float32)
    kernel[0, 0, 1 % shape[3], 0] = 1e-30
    tiny = (x * np.float32(2.0 ** -130)).astype(dtype)    # subnormal sums
    x = x.astype(dtype)
    for x, bias in ((x, rng.standard_normal(shape[3]).astype(np.float32)), (x, None),
                    (tiny, None)):
        got, want = _here_and_generic(lambda: kernels.depthwise_conv2d(
            x, kernel, strides=st, padding=pad, dilation_rate=dl, bias=bias, activation=act,
            out_dtype=dtype))
        assert got.dtype == dtype
        assert np.array_equal(_bits(got), _bits(want)), (kernels.isa(), bias is None)


# -- pooling --------------------------------------------------------------------------------------

POOL_CASES = [
    ((2, 7, 9, 5), (2, 2), (2, 2), "valid"),
    ((2, 7, 9, 5), (3, 3), (2, 2), "same"),
    ((1, 8, 8, 33), (3, 2), (1, 1), "same"),
    ((2, 9, 10, 4), (2, 3), (3, 2), "valid"),
    ((1, 1, 11, 70), (1, 4), (1, 3), "same"),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
@pytest.mark.parametrize("mode", ["max", "average"])
def test_pool_matches_scalar_twin_and_reference(isa_level, case, dtype, mode, rng):
    shape, pool, st, pad = case
    x = rng.standard_normal(shape).astype(dtype)
    got = kernels.pool2d(x, pool, strides=st, padding=pad, mode=mode)
    assert got.dtype == dtype
    level = kernels.isa()
    kernels.set_isa("generic")
    try:
        want = kernels.pool2d(x, pool, strides=st, padding=pad, mode=mode)
        gwant = kernels.pool2d_grad(x, np.ones(got.shape), pool, strides=st, padding=pad,
                                    mode=mode)
    finally:
        kernels.set_isa(level)
    assert np.array_equal(_bits(got), _bits(want))
    ggot = kernels.pool2d_grad(x, np.ones(got.shape), pool, strides=st, padding=pad, mode=mode)
    assert np.array_equal(ggot, gwant)
    ref = ref_pool(x, pool, st, pad, mode)
    if mode == "max":
        assert np.array_equal(_f64(got), ref)
    else:
        # float32 (float64) sum of at most pool taps, a division, one rounding to x's dtype
        taps = pool[0] * pool[1]
        u = 2.0 ** -53 if dtype == F64 else U
        out_u = {F32: U, F64: 2.0 ** -53, F16: 2.0 ** -11, BF16: 2.0 ** -8}[dtype]
        mag = ref_pool(np.abs(_f64(x)), pool, st, pad, "average")
        assert np.all(np.abs(_f64(got) - ref) <= (taps + 1) * u * mag + out_u * np.abs(ref))


def test_same_average_counts_real_pixels_only():
    x = np.ones((1, 3, 3, 1), np.float32)
    y = kernels.pool2d(x, 2, strides=2, padding="same", mode="average")
    assert y.shape == (1, 2, 2, 1) and np.all(y == 1.0)


def test_max_pool_nan_and_first_maximum(isa_level):
    x = np.array([[1.0, 3.0, 3.0, np.nan, 2.0, 5.0]], np.float32).reshape(1, 1, 6, 1)
    y = kernels.pool2d(x, (1, 2), mode="max")
    assert np.isnan(y[0, 0, 1, 0]) and y[0, 0, 0, 0] == 3.0 and y[0, 0, 2, 0] == 5.0
    g = kernels.pool2d_grad(x, np.ones((1, 1, 3, 1)), (1, 2), mode="max")
    assert g.ravel().tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    x = np.array([2.0, 2.0, 1.0], np.float32).reshape(1, 1, 3, 1)
    g = kernels.pool2d_grad(x, np.ones((1, 1, 1, 1)), (1, 3), mode="max")
    assert g.ravel().tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
@pytest.mark.parametrize("mode", ["max", "average"])
def test_pool_grad_against_finite_differences(case, mode, rng):
    shape, pool, st, pad = case
    x = rng.standard_normal(shape)
    y = kernels.pool2d(x, pool, strides=st, padding=pad, mode=mode)
    r = rng.standard_normal(y.shape)
    g = kernels.pool2d_grad(x, r, pool, strides=st, padding=pad, mode=mode)
    assert g.dtype == F64
    if x.size > 300:
        x, r = x[:1, :4, :5, :3].copy(), None
        y = kernels.pool2d(x, pool, strides=st, padding=pad, mode=mode)
        r = rng.standard_normal(y.shape)
        g = kernels.pool2d_grad(x, r, pool, strides=st, padding=pad, mode=mode)
    num = numeric_grad(lambda: float(np.sum(
        kernels.pool2d(x, pool, strides=st, padding=pad, mode=mode) * r)), x)
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-7)


# -- kernel errors --------------------------------------------------------------------------------

def test_kernel_errors(rng):
    x = rng.standard_normal((2, 5, 5, 4)).astype(np.float32)
    k = rng.standard_normal((3, 3, 4, 6)).astype(np.float32)
    with pytest.raises(TypeError, match="conv2d: x must be a numpy.ndarray"):
        kernels.conv2d(x.tolist(), k)
    with pytest.raises(TypeError, match="conv2d: unsupported dtype int32"):
        kernels.conv2d(x.astype(np.int32), k)
    with pytest.raises(TypeError, match="conv2d: unsupported dtype float64"):
        kernels.conv2d(x.astype(np.float64), k)
    with pytest.raises(ValueError, match=r"conv2d: x must have shape \(batch"):
        kernels.conv2d(x[0], k)
    with pytest.raises(ValueError, match="x has 4 channels"):
        kernels.conv2d(x, k[:, :, :3])
    with pytest.raises(ValueError, match=r"filters \(6\) must be a multiple of groups \(4\)"):
        kernels.conv2d(x, k[:, :, :1], groups=4)
    with pytest.raises(ValueError, match="groups must be a positive int"):
        kernels.conv2d(x, k, groups=0)
    with pytest.raises(ValueError, match="packed for 2 groups"):
        kernels.conv2d(x, kernels.pack_conv(k[:, :, :2], 2), groups=1)
    with pytest.raises(TypeError, match="kernel must be a numpy.ndarray or a PackedConv"):
        kernels.conv2d(x, k.tolist())
    with pytest.raises(ValueError, match="padding must be 'valid', 'same'"):
        kernels.conv2d(x, k, padding="full")
    with pytest.raises(ValueError, match="smaller than the kernel window"):
        kernels.conv2d(x, np.ones((7, 7, 4, 2), np.float32))
    with pytest.raises(ValueError, match="strides must be positive"):
        kernels.conv2d(x, k, strides=0)
    with pytest.raises(TypeError, match="dilation_rate must be an int or a pair"):
        kernels.conv2d(x, k, dilation_rate=(1, 2, 3))
    with pytest.raises(ValueError, match="unknown activation 'mish'"):
        kernels.conv2d(x, k, activation="mish")
    with pytest.raises(ValueError, match=r"bias has shape \(5,\), expected \(6,\)"):
        kernels.conv2d(x, k, bias=np.ones(5, np.float32))
    with pytest.raises(TypeError, match="conv2d: unsupported target dtype int8"):
        kernels.conv2d(x, k, out_dtype="int8")
    with pytest.raises(TypeError, match="conv2d: unsupported out_dtype float64"):
        kernels.conv2d(x, k, out_dtype=np.float64)
    with pytest.raises(ValueError, match=r"pack_conv: kernel must have shape"):
        kernels.pack_conv(np.ones((3, 3, 4)))
    with pytest.raises(ValueError, match=r"pack_conv: filters \(6\) must be a multiple"):
        kernels.pack_conv(k, groups=4)
    dw = rng.standard_normal((3, 3, 4, 2)).astype(np.float32)
    with pytest.raises(ValueError, match=r"depthwise_conv2d: kernel must have shape \(kh, kw, 4"):
        kernels.depthwise_conv2d(x, dw[:, :, :3])
    with pytest.raises(TypeError, match="depthwise_conv2d: kernel must be a numpy.ndarray"):
        kernels.depthwise_conv2d(x, dw.tolist())
    with pytest.raises(ValueError, match="float64 x takes no activation"):
        kernels.depthwise_conv2d(x.astype(np.float64), dw, activation="relu")
    with pytest.raises(ValueError, match="pool2d: mode must be 'max' or 'average'"):
        kernels.pool2d(x, 2, mode="min")
    with pytest.raises(ValueError, match="pool2d: padding must be 'valid' or 'same'"):
        kernels.pool2d(x, 2, padding=((1, 1), (1, 1)))
    with pytest.raises(ValueError, match=r"pool2d_grad: dy has shape \(2, 2, 2, 4\), expected"):
        kernels.pool2d_grad(x, np.ones((2, 2, 2, 4)), 3, strides=1)
    with pytest.raises(TypeError, match="col2im: cols must be float32 or float64"):
        kernels.col2im(np.ones((18, 36), np.float16), x.shape, 3)
    with pytest.raises(ValueError, match=r"col2im: cols has shape \(18, 35\), expected"):
        kernels.col2im(np.ones((18, 35), np.float32), x.shape, 3)
    with pytest.raises(ValueError, match="im2col: channels must be a range"):
        kernels.im2col(x, 3, channels=(2, 9))


# -- layers: gradients --------------------------------------------------------------------------

def _check_layer_gradients(layer, x, rng, mask=None):
    kw = {} if mask is None else {"mask": mask}
    y = layer(x, training=True, **kw)
    r = rng.normal(size=y.shape)
    dx = layer.backward(r.copy())
    grads = [g.copy() for g in layer.gradients]

    def loss_x():
        return float(np.sum(layer(x, training=False, **kw) * r))

    np.testing.assert_allclose(dx, numeric_grad(loss_x, x), rtol=1e-6, atol=1e-7)
    for w, g in zip(layer.trainable_weights, grads):
        def loss_w():
            layer.weights_updated()
            return loss_x()
        np.testing.assert_allclose(g, numeric_grad(loss_w, w), rtol=1e-6, atol=1e-7)
        layer.weights_updated()
    assert len(grads) == len(layer.trainable_weights)


GRAD_LAYERS = [
    (lambda: layers.Conv2D(4, 3, dtype="float64"), (2, 5, 6, 3)),
    (lambda: layers.Conv2D(4, (3, 2), strides=2, padding="same", activation="tanh", groups=2,
                           dtype="float64"), (2, 7, 6, 4)),
    (lambda: layers.Conv2D(3, 2, dilation_rate=2, activation="gelu", use_bias=False,
                           dtype="float64"), (1, 6, 7, 2)),
    (lambda: layers.Conv2D(5, 1, activation="softmax", dtype="float64"), (2, 3, 3, 2)),
    (lambda: layers.Conv1D(3, 3, padding="causal", dilation_rate=2, activation="sigmoid",
                           dtype="float64"), (2, 9, 2)),
    (lambda: layers.Conv1D(4, 4, strides=2, padding="same", groups=2, dtype="float64"),
     (2, 9, 4)),
    (lambda: layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same", activation="relu",
                                    dtype="float64"), (2, 5, 6, 3)),
    (lambda: layers.DepthwiseConv2D((2, 3), strides=2, dilation_rate=1, dtype="float64"),
     (1, 6, 7, 2)),
    (lambda: layers.SeparableConv2D(4, 3, depth_multiplier=2, padding="same",
                                    activation="tanh", dtype="float64"), (2, 5, 4, 3)),
    (lambda: layers.MaxPooling2D(3, strides=2, padding="same", dtype="float64"), (2, 7, 6, 3)),
    (lambda: layers.AveragePooling2D(3, strides=2, padding="same", dtype="float64"),
     (2, 7, 6, 3)),
    (lambda: layers.MaxPooling1D(3, strides=2, dtype="float64"), (2, 9, 3)),
    (lambda: layers.AveragePooling1D(2, padding="same", dtype="float64"), (2, 7, 3)),
    (lambda: layers.GlobalAveragePooling2D(dtype="float64"), (2, 4, 5, 3)),
    (lambda: layers.GlobalMaxPooling2D(keepdims=True, dtype="float64"), (2, 4, 5, 3)),
    (lambda: layers.GlobalAveragePooling1D(keepdims=True, dtype="float64"), (2, 6, 3)),
    (lambda: layers.GlobalMaxPooling1D(dtype="float64"), (2, 6, 3)),
]


@pytest.mark.parametrize("make, shape", GRAD_LAYERS,
                         ids=[f"{i}" for i in range(len(GRAD_LAYERS))])
def test_layer_gradients_float64(make, shape, rng):
    layer = make()
    x = rng.normal(size=shape)
    layer.build_from_shape(x.shape)
    weights = [rng.normal(size=w.shape) for w in layer.get_weights()]
    if weights:
        layer.set_weights(weights)
    _check_layer_gradients(layer, x, rng)


def test_global_average_pooling1d_mask_forward_and_gradient(rng):
    x = rng.normal(size=(3, 5, 4))
    mask = np.array([[1, 1, 0, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]], bool)
    layer = layers.GlobalAveragePooling1D(dtype="float64")
    y = layer(x, mask=mask)
    want = np.stack([x[i][mask[i]].mean(axis=0) for i in range(3)])
    np.testing.assert_allclose(y, want, rtol=1e-14)
    _check_layer_gradients(layer, x, rng, mask=mask)
    assert layer.compute_mask(x, mask) is None
    with pytest.raises(ValueError, match=r"mask must have shape \(3, 5\)"):
        layer(x, mask=mask[:, :4])


@pytest.mark.parametrize("make, shape", [
    (lambda p: layers.Conv2D(6, 3, padding="same", activation="gelu", groups=2, dtype=p),
     (3, 9, 8, 4)),
    (lambda p: layers.Conv1D(5, 3, padding="causal", dilation_rate=2, activation="tanh",
                             dtype=p), (3, 12, 4)),
    (lambda p: layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same", activation="relu",
                                      dtype=p), (3, 7, 8, 4)),
    (lambda p: layers.SeparableConv2D(6, 3, depth_multiplier=2, strides=2, activation="relu",
                                      dtype=p), (3, 9, 8, 4)),
], ids=["conv2d", "conv1d", "depthwise", "separable"])
def test_layer_backward_float32_matches_float64(make, shape, rng):
    x = rng.normal(size=shape)
    results = []
    for policy in ("float64", "float32"):
        layer = make(policy)
        layer.build_from_shape(shape)
        if not results:
            weights = [rng.normal(size=w.shape) * 0.3 for w in layer.get_weights()]
            r = None
        layer.set_weights(weights)
        y = layer(x, training=True)
        if r is None:
            r = rng.normal(size=y.shape)
        dx = layer.backward(r.astype(policy))
        results.append([y, dx] + list(layer.gradients))
    for ref, got in zip(*results):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-5)


# -- layers: policies, packing, fusion -------------------------------------------------------------

POLICY_LAYERS = [
    lambda p: layers.Conv2D(8, 3, strides=2, padding="same", activation="relu", dtype=p),
    lambda p: layers.Conv2D(4, 3, activation="softmax", dtype=p),
    lambda p: layers.Conv1D(4, 3, padding="causal", activation="gelu", dtype=p),
    lambda p: layers.DepthwiseConv2D(3, depth_multiplier=2, activation="sigmoid", dtype=p),
    lambda p: layers.SeparableConv2D(5, 3, activation="tanh", dtype=p),
    lambda p: layers.MaxPooling2D(2, dtype=p),
    lambda p: layers.AveragePooling1D(3, strides=2, padding="same", dtype=p),
    lambda p: layers.GlobalAveragePooling2D(dtype=p),
    lambda p: layers.GlobalMaxPooling1D(dtype=p),
]


@pytest.mark.parametrize("make", POLICY_LAYERS, ids=[str(i) for i in range(len(POLICY_LAYERS))])
@pytest.mark.parametrize("policy, dtype", [("float32", F32), ("mixed_float16", F16),
                                           ("mixed_bfloat16", BF16)])
def test_training_and_inference_agree_and_dtypes(make, policy, dtype, rng):
    layer = make(policy)
    probe = make("float32")
    shape = (2, 9, 4) if isinstance(probe, (layers.Conv1D, layers.AveragePooling1D,
                                            layers.GlobalMaxPooling1D)) else (2, 8, 9, 4)
    x = rng.normal(size=shape)
    infer = layer(x)
    train = layer(x, training=True)
    assert infer.dtype == dtype and train.dtype == dtype
    assert np.array_equal(_bits(infer), _bits(train))
    assert all(w.dtype == np.float32 for w in layer.get_weights())
    dx = layer.backward(np.ones(train.shape, dtype))
    assert dx.dtype == dtype and dx.shape == x.shape
    assert [g.dtype for g in layer.gradients] == [F32] * len(layer.trainable_weights)
    assert layer.backward(np.ones(train.shape, dtype), need_input_grad=False) is None


@pytest.mark.parametrize("policy, dtype", [("mixed_float16", F16), ("mixed_bfloat16", BF16)])
def test_conv_layers_run_the_16bit_gemm_with_kernels_packed_once(monkeypatch, policy, dtype,
                                                                 rng):
    packs, convs = [], []
    real_pack, real_conv = kernels.pack_conv, kernels.conv2d

    def counting_pack(k, groups=1, dtype=None):
        packs.append((k.shape, groups, np.dtype(dtype)))
        return real_pack(k, groups, dtype=dtype)

    def spy(x, k, **kw):
        convs.append((x.dtype, "packed" if isinstance(k, kernels.PackedConv) else k.dtype,
                      kw.get("activation"), kw.get("out_dtype")))
        return real_conv(x, k, **kw)

    monkeypatch.setattr(kernels, "pack_conv", counting_pack)
    monkeypatch.setattr(kernels, "conv2d", spy)
    name = "bfloat16" if dtype == BF16 else "float16"
    conv = layers.Conv2D(6, 3, padding="same", activation="relu", groups=2, dtype=policy)
    x = rng.normal(size=(2, 6, 7, 4)).astype(np.float32)
    first = conv(x)
    for _ in range(3):
        assert np.array_equal(_bits(conv(x)), _bits(first))
    assert packs == [((3, 3, 2, 6), 2, dtype)]
    assert convs == [(dtype, "packed", "relu", name)] * 4      # bias + activation fused
    assert conv.inference_nbytes() == conv.packed_weight(0).nbytes + 6 * 2
    conv.set_weights([w * 2 for w in conv.get_weights()])
    conv(x)
    assert len(packs) == 2
    convs.clear()
    y = conv(x, training=True)
    assert convs == [(dtype, dtype, None, None)]                # float32 pre-activation
    conv.backward(np.ones_like(y))
    c1 = layers.Conv1D(3, 2, dtype=policy)
    c1(rng.normal(size=(2, 5, 4)))
    assert packs[-1] == ((1, 2, 4, 3), 1, dtype)
    sep = layers.SeparableConv2D(3, 2, activation="gelu", dtype=policy)
    sep(x)
    assert packs[-1] == ((1, 1, 4, 3), 1, dtype)
    assert convs[-1] == (dtype, "packed", "gelu", name)


def test_conv_fully_convolutional_shapes_and_symbolic(rng):
    conv = layers.Conv2D(3, 3, strides=2, padding="same")
    assert conv(np.ones((1, 8, 8, 2))).shape == (1, 4, 4, 3)
    assert conv(np.ones((2, 5, 9, 2))).shape == (2, 3, 5, 3)
    assert conv.compute_output_shape((None, None, 7, 2)) == (None, None, 4, 3)
    inp = layers.Input((16, 16, 3))
    h = layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    h = layers.MaxPooling2D()(h)
    h = layers.DepthwiseConv2D(3, padding="same")(h)
    h = layers.SeparableConv2D(6, 3)(h)
    h = layers.GlobalAveragePooling2D()(h)
    out = layers.Dense(2)(h)
    assert h.shape == (None, 6) and out.shape == (None, 2)
    model = models.Model(inp, out)
    assert model(np.ones((3, 16, 16, 3), np.float32)).shape == (3, 2)
    seq = models.Sequential([layers.Input((10, 2)), layers.Conv1D(4, 3, padding="causal"),
                             layers.AveragePooling1D(), layers.GlobalMaxPooling1D()])
    assert seq.output_shape == (None, 4)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_conv_model_trains(policy, rng):
    model = models.Sequential([
        layers.Input((8, 8, 1)),
        layers.Conv2D(4, 3, padding="same", activation="relu", dtype=policy),
        layers.MaxPooling2D(dtype=policy),
        layers.SeparableConv2D(4, 3, padding="same", activation="relu", dtype=policy),
        layers.GlobalAveragePooling2D(dtype=policy),
        layers.Dense(2, activation="softmax", dtype="float32"),
    ])
    model.compile("adam", "sparse_categorical_crossentropy")
    x = rng.normal(size=(64, 8, 8, 1)).astype(np.float32)
    y = (x[:, :4].mean(axis=(1, 2, 3)) > x[:, 4:].mean(axis=(1, 2, 3))).astype(np.int64)
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=15, batch_size=16, verbose=0)
    assert model.evaluate(x, y, verbose=0) < before


# -- layers: configs and errors --------------------------------------------------------------------

CONFIG_LAYERS = [
    lambda: layers.Conv2D(4, (3, 2), strides=2, padding="same", dilation_rate=1, groups=2,
                          activation="relu", use_bias=False, kernel_regularizer="l2",
                          dtype="mixed_bfloat16", name="c2"),
    lambda: layers.Conv1D(3, 5, padding="causal", dilation_rate=2, kernel_initializer="he_normal"),
    lambda: layers.DepthwiseConv2D(3, depth_multiplier=2, padding="same", activation="tanh"),
    lambda: layers.SeparableConv2D(5, 3, depth_multiplier=3, pointwise_regularizer="l1"),
    lambda: layers.MaxPooling2D((3, 2), strides=1, padding="same"),
    lambda: layers.AveragePooling2D(dtype="mixed_float16"),
    lambda: layers.MaxPooling1D(4, strides=2),
    lambda: layers.AveragePooling1D(),
    lambda: layers.GlobalAveragePooling1D(keepdims=True),
    lambda: layers.GlobalAveragePooling2D(),
    lambda: layers.GlobalMaxPooling1D(),
    lambda: layers.GlobalMaxPooling2D(keepdims=True),
]


@pytest.mark.parametrize("make", CONFIG_LAYERS, ids=[str(i) for i in range(len(CONFIG_LAYERS))])
def test_config_round_trip(make):
    layer = make()
    config = layer.get_config()
    again = layers.deserialize(layers.serialize(layer))
    assert type(again) is type(layer)
    assert again.get_config() == config
    assert config["data_format"] == "channels_last"


def test_config_keys_and_tuples():
    c = layers.Conv1D(3, 5, strides=2, padding="CAUSAL").get_config()
    assert c["kernel_size"] == (5,) and c["strides"] == (2,) and c["padding"] == "causal"
    assert {"filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate",
            "groups", "activation", "use_bias", "kernel_initializer", "bias_initializer",
            "kernel_regularizer", "bias_regularizer", "activity_regularizer",
            "kernel_constraint", "bias_constraint"} <= set(c)
    p = layers.MaxPooling2D(3).get_config()
    assert p["pool_size"] == (3, 3) and p["strides"] == (3, 3)
    s = layers.SeparableConv2D(2, 3).get_config()
    assert {"depth_multiplier", "depthwise_initializer", "pointwise_initializer",
            "pointwise_regularizer", "pointwise_constraint"} <= set(s)


def test_weight_names_and_shapes():
    conv = layers.Conv2D(6, (3, 2), groups=2)
    conv.build_from_shape((None, 8, 8, 4))
    assert [w.shape for w in conv.get_weights()] == [(3, 2, 2, 6), (6,)]
    c1 = layers.Conv1D(5, 3)
    c1.build_from_shape((None, 10, 2))
    assert [w.shape for w in c1.get_weights()] == [(3, 2, 5), (5,)]
    dw = layers.DepthwiseConv2D(3, depth_multiplier=2)
    dw.build_from_shape((None, 8, 8, 3))
    assert [w.shape for w in dw.get_weights()] == [(3, 3, 3, 2), (6,)]
    sep = layers.SeparableConv2D(4, 3, depth_multiplier=2, name="sep")
    sep.build_from_shape((None, 8, 8, 3))
    assert sep.weight_names() == ["sep/depthwise_kernel", "sep/pointwise_kernel", "sep/bias"]
    assert [w.shape for w in sep.get_weights()] == [(3, 3, 3, 2), (1, 1, 6, 4), (4,)]


def test_layer_errors():
    with pytest.raises(ValueError, match="channels_first.*not supported"):
        layers.Conv2D(2, 3, data_format="channels_first")
    with pytest.raises(ValueError, match="channels_first.*not supported"):
        layers.MaxPooling1D(data_format="channels_first")
    with pytest.raises(ValueError, match="channels_first.*not supported"):
        layers.GlobalAveragePooling2D(data_format="channels_first")
    with pytest.raises(ValueError, match="data_format must be"):
        layers.Conv1D(2, 3, data_format="NHWC")
    with pytest.raises(ValueError, match=r"Conv2D: padding must be one of \['valid', 'same'\]"):
        layers.Conv2D(2, 3, padding="causal")
    with pytest.raises(ValueError, match="padding must be one of"):
        layers.AveragePooling2D(padding="full")
    with pytest.raises(ValueError, match="Conv2D: filters must be a positive int, got 0"):
        layers.Conv2D(0, 3)
    with pytest.raises(TypeError, match="filters must be a positive int"):
        layers.Conv2D("4", 3)
    with pytest.raises(ValueError, match=r"kernel_size must be an int or a tuple of 2 ints"):
        layers.Conv2D(2, (3, 3, 3))
    with pytest.raises(ValueError, match="strides must be a positive int"):
        layers.Conv1D(2, 3, strides=0)
    with pytest.raises(ValueError, match=r"filters \(5\) must be a multiple of groups \(2\)"):
        layers.Conv2D(5, 3, groups=2)
    with pytest.raises(ValueError, match="depth_multiplier must be a positive int"):
        layers.DepthwiseConv2D(3, depth_multiplier=0)
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        layers.SeparableConv2D(2, 3, activation="swishy")
    with pytest.raises(ValueError, match="unknown initializer"):
        layers.DepthwiseConv2D(3, depthwise_initializer="glorot")
    with pytest.raises(TypeError, match="unexpected keyword"):
        layers.Conv2D(2, 3, units=3)
    with pytest.raises(ValueError, match="not supported"):
        layers.Conv2D(2, 3, kernel_constraint="non_neg")
    conv = layers.Conv2D(4, 3, groups=2)
    with pytest.raises(ValueError, match=r"input channels \(3\) must be a multiple of groups"):
        conv(np.ones((1, 5, 5, 3)))
    conv = layers.Conv2D(4, 3)
    with pytest.raises(ValueError, match=r"input must have shape \(batch, height, width"):
        conv(np.ones((1, 5, 3)))
    with pytest.raises(ValueError, match="smaller than the kernel window"):
        conv(np.ones((1, 2, 5, 3)))
    conv(np.ones((1, 5, 5, 3)))
    with pytest.raises(ValueError, match=r"expected input of shape \(None, None, None, 3\)"):
        conv(np.ones((1, 5, 5, 2)))
    with pytest.raises(ValueError, match="smaller than the kernel window"):
        conv(np.ones((1, 2, 5, 3)))
    with pytest.raises(ValueError, match=r"input must have shape \(batch, steps, channels\)"):
        layers.Conv1D(2, 3)(np.ones((1, 5, 5, 3)))
    with pytest.raises(ValueError, match="smaller than the pool window"):
        layers.MaxPooling2D(3)(np.ones((1, 2, 5, 3)))
    with pytest.raises(ValueError, match=r"GlobalMaxPooling1D 'g1': input must have shape"):
        layers.GlobalMaxPooling1D(name="g1")(np.ones((1, 2, 5, 3)))
    with pytest.raises(TypeError, match="Conv2D"):
        layers.Conv2D(2, 3)(np.array([["a"]]))


# -- Keras interop ------------------------------------------------------------------------------

KERAS_CASES = [
    ("Conv2D", dict(filters=6, kernel_size=3, padding="same", strides=2, activation="relu"),
     (2, 9, 8, 4)),
    ("Conv2D", dict(filters=6, kernel_size=(3, 2), groups=2, dilation_rate=2), (2, 9, 8, 4)),
    ("Conv2D", dict(filters=8, kernel_size=1, activation="sigmoid"), (2, 5, 6, 7)),
    ("Conv1D", dict(filters=5, kernel_size=3, padding="causal", dilation_rate=2), (2, 11, 3)),
    ("Conv1D", dict(filters=4, kernel_size=4, padding="same", strides=2, groups=2,
                    activation="tanh"), (2, 11, 6)),
    ("DepthwiseConv2D", dict(kernel_size=3, depth_multiplier=2, padding="same", strides=2),
     (2, 9, 8, 3)),
    ("DepthwiseConv2D", dict(kernel_size=(2, 3), dilation_rate=2, activation="relu"),
     (1, 9, 8, 5)),
    ("SeparableConv2D", dict(filters=5, kernel_size=3, depth_multiplier=2, padding="same",
                             activation="tanh"), (2, 9, 8, 3)),
    ("SeparableConv2D", dict(filters=4, kernel_size=3, strides=2), (2, 9, 9, 3)),
    ("MaxPooling2D", dict(pool_size=3, strides=2, padding="same"), (2, 9, 8, 3)),
    ("MaxPooling2D", dict(pool_size=2), (2, 9, 8, 3)),
    # symmetric "same" padding: Keras's torch backend counts one-sided padding in averages
    ("AveragePooling2D", dict(pool_size=3, strides=2, padding="same"), (2, 9, 9, 3)),
    ("AveragePooling2D", dict(pool_size=3, strides=1, padding="same"), (2, 6, 7, 3)),
    ("AveragePooling2D", dict(pool_size=2, padding="valid"), (2, 9, 8, 3)),
    ("MaxPooling1D", dict(pool_size=3, strides=2, padding="same"), (2, 10, 3)),
    ("AveragePooling1D", dict(pool_size=3, strides=2, padding="same"), (2, 11, 3)),
    ("AveragePooling1D", dict(pool_size=2), (2, 10, 3)),
    ("GlobalAveragePooling2D", dict(keepdims=True), (2, 9, 8, 3)),
    ("GlobalMaxPooling2D", dict(), (2, 9, 8, 3)),
    ("GlobalAveragePooling1D", dict(), (2, 9, 3)),
    ("GlobalMaxPooling1D", dict(keepdims=True), (2, 9, 3)),
]


@pytest.mark.keras
@pytest.mark.parametrize("name, kwargs, shape", KERAS_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(KERAS_CASES)])
def test_keras_outputs_and_configs(keras, name, kwargs, shape, rng):
    x = rng.normal(size=shape).astype(np.float32)
    klayer = getattr(keras.layers, name)(**kwargs)
    kout = keras.ops.convert_to_numpy(klayer(x))
    layer = getattr(layers, name)(**kwargs)
    layer.build_from_shape(shape)
    kweights = klayer.get_weights()
    assert [w.shape for w in kweights] == [w.shape for w in layer.get_weights()]
    if kweights:
        kweights = [w + rng.normal(size=w.shape).astype(np.float32) * 0.1 for w in kweights]
        klayer.set_weights(kweights)
        kout = keras.ops.convert_to_numpy(klayer(x))
        layer.set_weights(kweights)
    out = layer(x)
    assert out.shape == kout.shape
    np.testing.assert_allclose(out, kout, rtol=1e-5, atol=1e-6)
    kconfig = klayer.get_config()
    assert set(kconfig) <= set(layer.get_config()) | {"build_config"}
    again = layers.deserialize({"class_name": name, "config": kconfig})
    for key in ("kernel_size", "strides", "padding", "pool_size", "filters", "groups",
                "depth_multiplier", "dilation_rate", "keepdims"):
        if key in kconfig:
            assert again.get_config()[key] == kconfig[key], key


@pytest.mark.keras
def test_keras_masked_global_average_pooling1d(keras, rng):
    x = rng.normal(size=(3, 6, 4)).astype(np.float32)
    mask = rng.random((3, 6)) > 0.4
    mask[:, 0] = True
    kout = keras.ops.convert_to_numpy(keras.layers.GlobalAveragePooling1D()(x, mask=mask))
    out = layers.GlobalAveragePooling1D()(x, mask=mask)
    np.testing.assert_allclose(out, kout, rtol=1e-5, atol=1e-6)


def test_packed_kernels_across_levels(rng):
    """Panels packed at one level: used where their format fits (the same bits as matmul with
    them), else a ValueError naming the level; a layer packs again when its panels are stale."""
    x = rng.standard_normal((2, 6, 6, 8)).astype(BF16)
    k = rng.standard_normal((3, 3, 8, 20)).astype(np.float32)
    cols = kernels.im2col(x, 3, padding="same")
    previous = kernels.isa()
    try:
        for src in kernels.available_isas():
            kernels.set_isa(src)
            packed = kernels.pack_conv(k, dtype=BF16)
            for dst in kernels.available_isas():
                kernels.set_isa(dst)
                try:
                    y = kernels.conv2d(x, packed, padding="same")
                except ValueError as exc:
                    assert f"packed at level {src!r}" in str(exc)
                    continue
                want = kernels.matmul(cols, packed.matrices[0]).reshape(y.shape)
                assert np.array_equal(y, want)
        conv = layers.Conv2D(20, 3, padding="same", dtype="mixed_bfloat16")
        for level in kernels.available_isas()[::-1] + kernels.available_isas():
            kernels.set_isa(level)
            got = conv(x)
            assert not conv.packed_weight(0).stale
            assert np.array_equal(_bits(got), _bits(conv(x, training=True)))
    finally:
        kernels.set_isa(previous)


class _ZeroStepMask(layers.Layer):
    """Masks the steps whose features are all zero (as Embedding's mask_zero)."""

    supports_masking = True

    def compute_mask(self, inputs, mask=None):
        return np.any(inputs != 0, axis=-1)

    def backward(self, dy, need_input_grad=True):
        self.gradients = []
        return dy


def test_global_average_pooling1d_takes_the_mask_in_a_model(rng):
    with policy_scope("float64"):
        x = layers.Input(shape=(6, 3))
        h = layers.Dense(4, name="steps")(_ZeroStepMask()(x))
        model = models.Model(x, layers.GlobalAveragePooling1D()(h))
    data = rng.normal(size=(2, 6, 3))
    data[0, 4:] = 0.0
    out = model.predict(data, verbose=0)
    k, b = model.get_layer("steps").get_weights()
    steps = data @ k + b
    np.testing.assert_allclose(out[0], steps[0, :4].mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(out[1], steps[1].mean(axis=0), rtol=1e-12)
    model.compile("sgd", "mse")
    before = model.evaluate(data, np.ones((2, 4)), verbose=0)
    model.fit(data, np.ones((2, 4)), epochs=5, verbose=0)
    assert model.evaluate(data, np.ones((2, 4)), verbose=0) < before


def test_conv_regularizer_penalty_and_gradient():
    layer = layers.Conv2D(3, 2, kernel_regularizer="l2", bias_regularizer="l1", dtype="float64")
    layer.build_from_shape((None, 4, 4, 2))
    layer.set_weights([np.full((2, 2, 2, 3), 0.5), np.full(3, -2.0)])
    penalty, grads = layer.regularization_losses()
    assert penalty == pytest.approx(0.01 * 24 * 0.25 + 0.01 * 6.0)
    np.testing.assert_allclose(grads[0], 0.02 * layer.kernel)
    np.testing.assert_allclose(grads[1], -0.01 * np.ones(3))


@pytest.mark.parametrize("policy, eps", [("mixed_float16", 2.0 ** -11),
                                         ("mixed_bfloat16", 2.0 ** -8)])
def test_layer_backward_16bit_close_to_float64(policy, eps, rng):
    """Under 16-bit policies: x, kernel and dz rounded to the compute dtype, float32 sums; every
    gradient within a few roundings of the float64 one, relative to its scale."""
    x = rng.normal(size=(2, 7, 6, 4))
    for make in (lambda p: layers.Conv2D(6, 3, padding="same", groups=2, dtype=p),
                 lambda p: layers.DepthwiseConv2D(3, depth_multiplier=2, dtype=p),
                 lambda p: layers.SeparableConv2D(5, 3, strides=2, padding="same", dtype=p)):
        results = []
        for p in ("float64", policy):
            layer = make(p)
            layer.build_from_shape(x.shape)
            if not results:
                weights = [rng.normal(size=w.shape) * 0.3 for w in layer.get_weights()]
            layer.set_weights(weights)
            y = layer(x, training=True)
            if not results:
                r = rng.normal(size=y.shape)
            results.append([layer.backward(r)] + list(layer.gradients))
        for ref, got in zip(*results):
            scale = np.max(np.abs(ref))
            assert np.max(np.abs(_f64(got) - ref)) <= 8 * eps * scale


@pytest.mark.parametrize("mode", ["max", "average"])
def test_pool_windows_larger_than_the_image(isa_level, mode, rng):
    # every window covering the whole axis is drawn no larger than the image: the same result
    for shape in [(1, 5, 7, 3), (2, 1, 4, 2), (1, 9, 2, 1)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for pool in [(6, 8), (11, 3), (20, 20), (5, 15)]:
            for st in [None, (1, 1), (2, 3), (7, 7)]:
                y = kernels.pool2d(x, pool, strides=st, padding="same", mode=mode)
                want = ref_pool(x, pool, pool if st is None else st, "same", mode)
                np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
                if x.size > 20:
                    continue
                x64 = x.astype(np.float64)
                dy = rng.standard_normal(y.shape)
                g = kernels.pool2d_grad(x64, dy, pool, strides=st, padding="same", mode=mode)
                num = numeric_grad(lambda: float(np.sum(kernels.pool2d(
                    x64, pool, strides=st, padding="same", mode=mode) * dy)), x64)
                np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-7)


def test_absurd_pool_sizes_give_the_global_pooling():
    """A 10 KB file may hold MaxPooling2D(pool_size=2**30, padding="same"): as Keras, the
    result is the pooling over the whole image, in time and memory of the image's size."""
    import subprocess
    import sys
    code = (
        "import numpy as np\n"
        "from mixedcore import kernels, layers, models\n"
        "x = np.arange(1, 193, dtype=np.float32).reshape(1, 8, 8, 3)\n"
        "for mode in ('max', 'average'):\n"
        "    y = kernels.pool2d(x, (2**30, 2**30), padding='same', mode=mode)\n"
        "    want = x.max(axis=(1, 2)) if mode == 'max' else x.mean(axis=(1, 2))\n"
        "    assert y.shape == (1, 1, 1, 3) and np.allclose(y[0, 0, 0], want[0])\n"
        "    g = kernels.pool2d_grad(x, np.ones((1, 8, 8, 3), np.float32), 2**62, strides=1,\n"
        "                            padding='same', mode=mode)\n"
        "    assert g.shape == x.shape and abs(float(g.sum()) - 192.0) < 1e-3\n"
        "i = layers.Input((8, 3))\n"
        "m = models.Model(i, layers.MaxPooling1D(pool_size=2**60, padding='same')(i))\n"
        "assert m.predict(x[0, :1], verbose=0).shape == (1, 1, 3)\n"
        "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=os.path.dirname(os.path.abspath(__file__)),
                            env=dict(os.environ, PYTHONPATH=os.path.dirname(
                                os.path.dirname(mixedcore.__file__))))
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
