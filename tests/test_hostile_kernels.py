"""Adversarial arrays through every public kernel: broadcast and stride-0 views that claim absurd
shapes, dimensions near the int32 / int64 limits, products of operands' dimensions that overflow
int64, windows and strides far larger than the image, and zero-size dimensions.

Each case either returns (a legitimate result exists: ``ok``) or raises a ValueError whose message
names the public function (``refused``); nothing may crash, hang, or ask for the memory the
shapes claim (MemoryError).  The cases run in child interpreters with a time and an address-space
limit (tests/isolated.py), many per child.
"""
import re

import pytest

import mixedcore.kernels as K
from isolated import assert_finishes, assert_refused

_PRELUDE = """
import numpy as np
import ml_dtypes
from numpy.lib.stride_tricks import as_strided
import mixedcore.kernels as K

F32, BF16, I8 = np.float32, ml_dtypes.bfloat16, np.int8
done = []


def big(shape, dtype=F32):
    '''A view of one element claiming `shape` (every stride 0).'''
    return as_strided(np.zeros(1, dtype), shape=shape, strides=(0,) * len(shape))


def refused(fname, call):
    try:
        call()
    except ValueError as exc:
        assert fname in str(exc), (fname, str(exc))
        done.append(fname)
        return
    raise AssertionError(f"{fname}: accepted")


def ok(fname, call):
    call()
    done.append(fname)
"""

# public name -> cases (statements of the child, each a call of `refused` or `ok`)
CASES = {
    "cast": [
        'refused("cast", lambda: K.cast(big((2**30, 2**30)), np.float16))',
        'ok("cast", lambda: K.cast(np.zeros((0, 2**40), F32), np.float16))',
        'ok("cast", lambda: K.cast(big((2**10, 2**10)), BF16))',
    ],
    "all_finite": [
        'ok("all_finite", lambda: K.all_finite(big((2**30, 2**30)), big((2**61,), np.float16)))',
        'ok("all_finite", lambda: K.all_finite(np.zeros((0, 2**40), F32)))',
    ],
    "unscale_and_check": [
        'refused("unscale_and_check", lambda: K.unscale_and_check([big((2**30, 2**30))], 2.0))',
    ],
    "numerics_stats": [
        'refused("numerics_stats", lambda: K.numerics_stats(big((2**30, 2**30))))',
    ],
    "matmul": [
        # K = 2**60 of stride-0 operands: B's packed column alone is 2**66 bytes
        'refused("matmul", lambda: K.matmul(big((1, 2**60)), big((2**60, 1))))',
        # the same refusal on one thread, where B is packed block by block rather than by slabs
        'with K.threads(1): refused("matmul", lambda: K.matmul(big((1, 2**60)), big((2**60, 1))))',
        'refused("matmul", lambda: K.matmul(big((2**30, 1)), big((1, 2**30))))',
        'refused("matmul", lambda: K.matmul(big((2**40, 2**18, 1, 1)), big((1, 1))))',
        'refused("matmul", lambda: K.matmul(np.zeros((2**31, 0), F32), np.zeros((0, 2**31), F32)))',
        'ok("matmul", lambda: K.matmul(big((0, 2**40)), big((2**40, 5))))',
        'ok("matmul", lambda: K.matmul(big((3, 2**20)), big((2**20, 2))))',
    ],
    "pack": [
        # K = 2**64 / (NR * 4): the panels' byte count wraps to exactly 0 in 64 bits
        'refused("pack", lambda: K.pack(big((2**58, 1))))',
        'refused("pack", lambda: K.pack(big((2**58, 1)), dtype=BF16))',
        'refused("pack", lambda: K.pack(big((2**59, 1), BF16)))',
        'refused("pack", lambda: K.pack(big((2**59, 1), np.float16)))',
        'refused("pack", lambda: K.pack(big((1, 2**60))))',
        'refused("pack", lambda: K.pack(big((2**62 - 1, 1), I8)))',
        'refused("pack", lambda: K.pack(big((4, 2**58), I8)))',
        'ok("pack", lambda: K.pack(np.zeros((0, 2**40), F32)))',
        'ok("pack", lambda: K.pack(big((2**10, 3))).unpack())',
    ],
    "matmul_int8": [
        'refused("matmul_int8", lambda: K.matmul_int8(big((1, 2**62), I8), big((2**62, 1), I8)))',
        'refused("matmul_int8", lambda: K.matmul_int8(big((2**30, 4), I8), big((4, 2**30), I8)))',
        'ok("matmul_int8", lambda: K.matmul_int8(big((3, 8), I8), big((8, 2), I8)))',
        'refused("matmul_int8", lambda: K.matmul_int8(big((2**60, 1, 4), I8), big((4, 2), I8), '
        'a_zero=np.zeros(1, np.int32)))',
        'refused("matmul_int8", lambda: K.matmul_int8(big((2**60, 1, 4), I8), big((4, 2), I8), '
        'a_scale=np.ones(1, F32), b_scale=np.ones(2, F32)))',
        'ok("matmul_int8", lambda: K.matmul_int8(big((3, 8), I8), big((8, 2), I8), '
        'a_zero=big((3, 1), np.int32)))',
    ],
    "quantize_rows": [
        'refused("quantize_rows", lambda: K.quantize_rows(big((2**30, 2**30))))',
        'refused("quantize_rows", lambda: K.quantize_rows(big((2**20, 2**20, 2**20))))',
        'ok("quantize_rows", lambda: K.quantize_rows(big((4, 2**10))))',
        'refused("quantize_rows", lambda: K.quantize_rows(big((2**30, 2**30)), zero_point=True))',
        'ok("quantize_rows", lambda: K.quantize_rows(big((4, 2**10)), zero_point=True))',
    ],
    "pack_quantized": [
        'refused("pack_quantized", lambda: K.pack_quantized(big((2**44, 16), I8), bits=8, '
        'scale=np.ones(16, F32)))',
        'refused("pack_quantized", lambda: K.pack_quantized(big((16, 2**58), I8), bits=8, '
        'scale=big((2**58,))))',
    ],
    "matmul_quantized": [
        'pq = K.pack_quantized(np.ones((16, 16), I8), bits=8, scale=np.ones(16, F32))',
        'refused("matmul_quantized", lambda: K.matmul_quantized(big((2**45, 16)), pq))',
        'refused("matmul_quantized", lambda: K.matmul_quantized(big((2**20, 2**20, 2**10, 16)), pq))',
        'ok("matmul_quantized", lambda: K.matmul_quantized(big((5, 16)), pq))',
    ],
    "activation": [
        'refused("activation", lambda: K.activation(big((2**30, 2**30)), "relu"))',
        'ok("activation", lambda: K.activation(big((2**8, 2**8)), "gelu"))',
    ],
    "activation_grad": [
        'refused("activation_grad", lambda: K.activation_grad(big((2**30, 2**30)), '
        'big((2**30, 2**30)), "relu"))',
    ],
    "softmax": [
        'refused("softmax", lambda: K.softmax(big((2**30, 2**30))))',
        'refused("softmax", lambda: K.softmax(big((1, 2**60)), axis=0))',
        'ok("softmax", lambda: K.softmax(np.zeros((0, 2**40), F32)))',
    ],
    "add": [
        'refused("add", lambda: K.add(big((2**30, 2**30)), big((2**30, 2**30))))',
    ],
    "attention": [
        # D = 2**60: the unit's K^T alone would be 2**66 bytes (the byte count wrapped)
        'refused("attention", lambda: K.attention(big((1, 1, 1, 2**60)), big((1, 1, 1, 2**60)), '
        'big((1, 1, 1, 1)), scale=1.0))',
        'refused("attention", lambda: K.attention(big((1, 1, 1, 2**60)), big((1, 1, 1, 2**60)), '
        'big((1, 1, 1, 2**60)), scale=1.0))',
        # S = 2**45: V converted to float32 takes 2**51 bytes of every thread's workspace
        'refused("attention", lambda: K.attention(big((1, 1, 1, 4)), big((1, 1, 2**45, 4)), '
        'big((1, 1, 2**45, 4)), scale=1.0))',
        'refused("attention", lambda: K.attention(big((1, 1, 2**50, 4)), big((1, 1, 1, 4)), '
        'big((1, 1, 1, 4)), scale=1.0))',
        'refused("attention", lambda: K.attention(big((2**30, 2**30, 1, 1)), '
        'big((2**30, 2**30, 1, 1)), big((2**30, 2**30, 1, 1)), scale=1.0))',
        'ok("attention", lambda: K.attention(big((0, 2**20, 1, 4)), big((0, 2**20, 3, 4)), '
        'big((0, 2**20, 3, 4)), scale=1.0))',
        # an empty output under B x H = 2**60 units: nothing to compute
        'ok("attention", lambda: K.attention(big((2**30, 2**30, 1, 1)), big((2**30, 2**30, 1, 1)), '
        'big((2**30, 2**30, 1, 0)), scale=1.0))',
        'ok("attention", lambda: K.attention(big((1, 2, 3, 4)), big((1, 2, 2**12, 4)), '
        'big((1, 2, 2**12, 4)), scale=1.0))',
    ],
    "layer_norm": [
        'refused("layer_norm", lambda: K.layer_norm(big((2**30, 2**30))))',
        'refused("layer_norm", lambda: K.layer_norm(big((1, 2**60))))',
    ],
    "conv2d": [
        'x = np.zeros((1, 4, 4, 1), F32)',
        'refused("conv2d", lambda: K.conv2d(x, big((3, 3, 1, 2**55))))',
        # a kernel far larger than the image under explicit padding: one output pixel, but
        # 2**56 weights to pack
        'refused("conv2d", lambda: K.conv2d(np.zeros((1, 1, 1, 1), F32), big((2**28, 2**28, 1, 1)), '
        'padding=((2**28 - 1, 0), (2**28 - 1, 0))))',
        'refused("conv2d", lambda: K.conv2d(np.zeros((1, 1, 1, 1), F32), np.ones((1, 1, 1, 1), F32), '
        'padding=((2**40, 2**40), (2**40, 2**40))))',
        'refused("conv2d", lambda: K.conv2d(big((1, 2**23, 2**23, 1)), np.ones((3, 3, 1, 1), F32)))',
        # rows of the padded input beyond int64: oh * stride would wrap in the core
        'refused("conv2d", lambda: K.conv2d(np.zeros((1, 1, 1, 1), F32), np.ones((1, 1, 1, 1), F32), '
        'strides=2**62, padding=((2**62, 2**62), (0, 0))))',
        'ok("conv2d", lambda: K.conv2d(np.zeros((1, 1, 1, 1), F32), np.ones((1, 1, 1, 1), F32), '
        'strides=2**61, padding=((2**61, 2**61), (0, 0))))',
        'ok("conv2d", lambda: K.conv2d(x, np.ones((3, 3, 1, 2), F32), strides=2**62, '
        'padding="same"))',
        'ok("conv2d", lambda: K.conv2d(x, np.ones((64, 64, 1, 2), F32), padding="same"))',
        'ok("conv2d", lambda: K.conv2d(np.zeros((0, 4, 4, 1), F32), big((3, 3, 1, 2**40))))',
    ],
    "pack_conv": [
        'refused("pack_conv", lambda: K.pack_conv(big((2**28, 2**28, 1, 2))))',
        'refused("pack_conv", lambda: K.pack_conv(big((1, 1, 2**30, 2**30))))',
    ],
    "im2col": [
        'refused("im2col", lambda: K.im2col(np.zeros((1, 4, 4, 1), F32), (2**22, 2**22), '
        'padding="same"))',
        'refused("im2col", lambda: K.im2col(big((1, 2**30, 2**30, 1)), (2, 2)))',
        'ok("im2col", lambda: K.im2col(np.zeros((1, 4, 4, 1), F32), (2, 2), strides=2**62))',
    ],
    "col2im": [
        'refused("col2im", lambda: K.col2im(big((2**56, 1)), (1, 2**28, 2**28, 1), (1, 1)))',
        'refused("col2im", lambda: K.col2im(big((1, 2**46)), (1, 2**23, 2**23, 1), (2**23, 2**23)))',
        'ok("col2im", lambda: K.col2im(np.ones((1, 4), F32), (1, 2, 2, 1), (2, 2)))',
    ],
    "depthwise_conv2d": [
        'x = np.zeros((1, 4, 4, 1), F32)',
        'refused("depthwise_conv2d", lambda: K.depthwise_conv2d(x, big((2**23, 2**23, 1, 1)), '
        'padding="same"))',
        'refused("depthwise_conv2d", lambda: K.depthwise_conv2d(x, big((3, 3, 1, 2**55))))',
        'refused("depthwise_conv2d", lambda: K.depthwise_conv2d(big((1, 2**23, 2**23, 1)), '
        'np.ones((3, 3, 1, 1), F32)))',
        # windows far larger than the image under "same": the taps found are the image's
        'ok("depthwise_conv2d", lambda: K.depthwise_conv2d(x, np.ones((512, 512, 1, 1), F32), '
        'padding="same"))',
        'ok("depthwise_conv2d", lambda: K.depthwise_conv2d(x, np.ones((3, 3, 1, 1), F32), '
        'strides=2**62, dilation_rate=1))',
    ],
    "pool2d": [
        'x = np.arange(32, dtype=F32).reshape(1, 4, 4, 2)',
        'ok("pool2d", lambda: K.pool2d(x, (2**62, 2**62), padding="same"))',
        'ok("pool2d", lambda: K.pool2d(x, (2**62, 2**62), strides=1, padding="same", '
        'mode="average"))',
        'ok("pool2d", lambda: K.pool2d(x, 1, strides=2**62))',
        'refused("pool2d", lambda: K.pool2d(x, (2**40, 2**40)))',
        'refused("pool2d", lambda: K.pool2d(big((1, 2**30, 2**30, 1)), (2**29, 2**29), '
        'strides=2**29))',
        'ok("pool2d", lambda: K.pool2d(np.zeros((0, 4, 4, 2**40), F32), 2))',
    ],
    "pool2d_grad": [
        'x = np.arange(32, dtype=F32).reshape(1, 4, 4, 2)',
        'ok("pool2d_grad", lambda: K.pool2d_grad(x, np.ones((1, 1, 1, 2), F32), (2**62, 2**62), '
        'padding="same"))',
        'ok("pool2d_grad", lambda: K.pool2d_grad(x, np.ones((1, 4, 4, 2), F32), (2**62, 2**62), '
        'strides=1, padding="same", mode="average"))',
        'refused("pool2d_grad", lambda: K.pool2d_grad(x, big((1, 2**30, 2**30, 1)), 1))',
        'refused("pool2d_grad", lambda: K.pool2d_grad(big((1, 2**30, 2**30, 1)), '
        'big((1, 2, 2, 1)), (2**29, 2**29)))',
    ],
    "Plan": [
        'refused("Plan", lambda: K.Plan().input((2**40, 2**40), F32))',
        'ok("Plan", lambda: K.Plan().input((0, 2**60), F32))',
    ],
    "set_gemm_blocks": [
        'refused("set_gemm_blocks", lambda: K.set_gemm_blocks(mc=2**62))',
        'refused("set_gemm_blocks", lambda: K.set_gemm_blocks(kc=-2**63))',
    ],
    "set_isa": ['refused("set_isa", lambda: K.set_isa("avx" * 2**10))'],
    "set_num_threads": [
        'refused("set_num_threads", lambda: K.set_num_threads(-2**63))',
        'import warnings',
        'warnings.simplefilter("ignore")',
        'ok("set_num_threads", lambda: (K.set_num_threads(2**62), K.set_num_threads(2)))',
    ],
    "threads": ['refused("threads", lambda: K.threads(-2**63).__enter__())'],
    "isa": ['ok("isa", K.isa)'],
    "available_isas": ['ok("available_isas", K.available_isas)'],
    "get_num_threads": ['ok("get_num_threads", K.get_num_threads)'],
}

# the classes are made only by their functions, whose cases cover them
MADE_BY = {"PackedMatrix": "pack", "PackedQuantized": "pack_quantized", "PackedConv": "pack_conv"}

GROUPS = [
    ["cast", "all_finite", "unscale_and_check", "numerics_stats", "activation", "activation_grad",
     "softmax", "add", "layer_norm", "Plan", "set_gemm_blocks", "set_isa", "set_num_threads",
     "threads", "isa", "available_isas", "get_num_threads"],
    ["matmul", "pack", "matmul_int8", "quantize_rows", "pack_quantized", "matmul_quantized"],
    ["attention", "conv2d", "pack_conv", "im2col", "col2im"],
    ["depthwise_conv2d", "pool2d", "pool2d_grad"],
]


def test_every_public_kernel_has_cases():
    names = set(K.__all__)
    assert names == set(CASES) | set(MADE_BY), names ^ (set(CASES) | set(MADE_BY))
    assert sorted(sum(GROUPS, [])) == sorted(CASES)
    assert all(MADE_BY[c] in CASES for c in MADE_BY)


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g[0])
def test_hostile_arrays(group):
    body = _PRELUDE + "\n".join(line for name in group for line in CASES[name])
    expected = sum(1 for name in group for line in CASES[name]
                   if re.match(r"(with [^:]*: )?(refused|ok)\(", line))
    body += f"\nassert len(done) == {expected}, done\n"
    assert_finishes(body, timeout=120)


def test_byte_swapped_broadcast_views_are_refused_before_their_copy():
    assert_refused("""
        import numpy as np
        from mixedcore import kernels
        x = np.broadcast_to(np.ones(1, ">f4"), (2**40, 2**20))
        kernels.all_finite(x)
        """, error=ValueError, match=["all_finite", "byte-swapped", str((2**40, 2**20))])


def test_all_finite_reads_a_broadcast_view_once_per_distinct_element():
    """all_finite's answer depends on which values occur, not how often: a view claiming 2**51
    elements through stride-0 axes returns at once, with the answer of the values it holds."""
    assert_finishes("""
        import ml_dtypes
        import numpy as np
        from mixedcore import kernels
        for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
            for value, finite in ((1.0, True), (np.nan, False), (-np.inf, False)):
                x = np.broadcast_to(np.array([2.0, value], dtype), (2**30, 2**20, 2))
                assert kernels.all_finite(x, np.ones(3)) is finite, (dtype, value)
                assert kernels.all_finite(x[:, :, :1]) is True
        """, timeout=60)
