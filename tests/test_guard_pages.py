"""Kernels must not read or write one byte outside their operands.

Each operand is placed against an inaccessible (PROT_NONE) page: either its last byte is the
last byte before the page, or its first byte is the first one after it.  A read or write past
either end faults and kills the process (which fails the run).  AddressSanitizer does not see
AVX-512 masked loads and stores, so this is the check for the vector tails at every level.
The bytes around each output are filled with a marker and must be unchanged afterwards.
"""
import ctypes
import ctypes.util
import mmap
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import mixedcore
from mixedcore import kernels
from levels import at_level

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="mmap guard pages need Linux")

PAGE = mmap.PAGESIZE
DTYPES = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32),
          np.dtype(np.float64)]
SIZES = list(range(1, 71)) + [127, 128, 129, 255, 256, 257, 1000]
LEVELS = kernels.available_isas()
MARK = 0xA5

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


class Guarded:
    """``pages`` accessible pages with a PROT_NONE page on each side."""

    def __init__(self, nbytes):
        self.pages = -(-nbytes // PAGE) + 1
        self.map = mmap.mmap(-1, (self.pages + 2) * PAGE)
        self._anchor = ctypes.c_char.from_buffer(self.map)
        base = ctypes.addressof(self._anchor)
        for where in (base, base + (self.pages + 1) * PAGE):
            if _libc.mprotect(where, PAGE, 0) != 0:
                raise OSError(ctypes.get_errno(), "mprotect failed")
        self.raw = np.frombuffer(self.map, np.uint8)[PAGE:(self.pages + 1) * PAGE]
        self.raw[:] = MARK

    def array(self, n, dtype, at_end):
        """An ``n``-element array touching the upper guard page (at_end) or the lower one."""
        dtype = np.dtype(dtype)
        nbytes = n * dtype.itemsize
        start = self.raw.size - nbytes if at_end else 0
        return self.raw[start:start + nbytes].view(dtype)

    def untouched_outside(self, n, dtype, at_end):
        nbytes = n * np.dtype(dtype).itemsize
        rest = self.raw[:self.raw.size - nbytes] if at_end else self.raw[nbytes:]
        return bool(np.all(rest == MARK))


def _values(n, dtype, seed=0):
    rng = np.random.default_rng(seed + n)
    return (rng.standard_normal(n) * 4).astype(np.float32).astype(dtype)


@pytest.fixture(scope="module")
def arenas():
    biggest = max(SIZES) * 8
    return Guarded(biggest), Guarded(biggest)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("src", DTYPES, ids=str)
@pytest.mark.parametrize("dst", DTYPES, ids=str)
def test_cast_against_guard_pages(arenas, level, src, dst):
    inp, outp = arenas
    for n in SIZES:
        for at_end in (True, False):
            inp.raw[:] = MARK
            outp.raw[:] = MARK
            x = inp.array(n, src, at_end)
            x[:] = _values(n, src)
            out = outp.array(n, dst, at_end)
            at_level(level, kernels.cast, x, dst, out=out)
            expect = x.astype(np.float32).astype(dst) if src.itemsize <= 4 else x.astype(dst)
            np.testing.assert_array_equal(out.view(np.uint8), expect.view(np.uint8),
                                          err_msg=f"cast {src}->{dst} n={n} at_end={at_end}")
            assert outp.untouched_outside(n, dst, at_end), (src, dst, n, at_end)
            # a fresh result from an input touching the page
            np.testing.assert_array_equal(at_level(level, kernels.cast, x, dst).view(np.uint8),
                                          expect.view(np.uint8))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_finite_against_guard_pages(arenas, level, dtype):
    inp, _ = arenas
    for n in SIZES:
        for at_end in (True, False):
            x = inp.array(n, dtype, at_end)
            x[:] = _values(n, dtype)
            assert at_level(level, kernels.all_finite, x) is True
            x[n - 1 if at_end else 0] = np.inf
            assert at_level(level, kernels.all_finite, x) is False
            x[n - 1 if at_end else 0] = 1
            x[0 if at_end else n - 1] = np.nan
            assert at_level(level, kernels.all_finite, x) is False


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unscale_and_check_against_guard_pages(arenas, level, dtype):
    buf, _ = arenas
    for n in SIZES:
        for at_end in (True, False):
            buf.raw[:] = MARK
            x = buf.array(n, dtype, at_end)
            x[:] = _values(n, dtype)
            before = x.copy()
            assert at_level(level, kernels.unscale_and_check, [x], 4.0) is True
            expect = (before.astype(np.float64) / 4.0).astype(dtype)
            np.testing.assert_array_equal(x.view(np.uint8), expect.view(np.uint8))
            assert buf.untouched_outside(n, dtype, at_end), (dtype, n, at_end)


def test_guard_page_faults_on_access():
    """The guard pages are live: one byte past an operand kills a child process."""
    import subprocess
    import textwrap
    tests = os.path.dirname(os.path.abspath(__file__))
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {tests!r})
        from test_guard_pages import Guarded
        import ctypes
        g = Guarded(64)
        from test_guard_pages import PAGE
        print(ctypes.string_at(ctypes.addressof(g._anchor) + (g.pages + 1) * PAGE, 1))
    """)
    # the child imports the mixedcore this process tested (a checkout's or an installed one),
    # from tests/, where no source tree shadows it
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(mixedcore.__file__)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                          cwd=tests, env=env)
    assert proc.returncode < 0, (proc.returncode, proc.stderr.decode()[-500:])


# the other kernels with vector tails: products, row-wise float32 kernels, the statistics scan
GEMM_PAIRS = [(np.float32, np.float32), (np.float16, np.float16),
              (ml_dtypes.bfloat16, ml_dtypes.bfloat16), (np.float16, np.float32)]
GEMM_SHAPES = [(1, 1, 1), (3, 5, 7), (17, 33, 15), (8, 16, 32), (5, 64, 47), (31, 7, 65),
               (2, 129, 18)]


@pytest.fixture(scope="module")
def three_arenas():
    return Guarded(64 * 1024), Guarded(64 * 1024), Guarded(64 * 1024)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("da,db", GEMM_PAIRS, ids=lambda d: np.dtype(d).name)
def test_matmul_and_pack_against_guard_pages(three_arenas, level, da, db):
    ga, gb, go = three_arenas
    for m, k, n in GEMM_SHAPES:
        a0 = _values(m * k, da, seed=1).reshape(m, k)
        b0 = _values(k * n, db, seed=2).reshape(k, n)
        want = at_level(level, kernels.matmul, a0, b0)
        for at_end in (True, False):
            for g in three_arenas:
                g.raw[:] = MARK
            a = ga.array(m * k, da, at_end).reshape(m, k)
            b = gb.array(k * n, db, not at_end).reshape(k, n)
            a[...] = a0
            b[...] = b0
            out = go.array(m * n, np.float32, at_end).reshape(m, n)
            at_level(level, kernels.matmul, a, b, out=out)
            np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32),
                                          err_msg=f"matmul {(m, k, n)} at_end={at_end}")
            assert go.untouched_outside(m * n, np.float32, at_end), ((m, k, n), at_end)
            packed = at_level(level, kernels.pack, b)
            out[...] = 0
            at_level(level, kernels.matmul, a, packed, out=out)
            np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
            assert go.untouched_outside(m * n, np.float32, at_end)


@pytest.mark.parametrize("level", LEVELS)
def test_row_kernels_against_guard_pages(arenas, level):
    inp, outp = arenas
    for n in SIZES[::3]:
        x0 = _values(n, np.float32).reshape(1, n)
        want = {"softmax": at_level(level, kernels.softmax, x0),
                "gelu": at_level(level, kernels.activation, x0, "gelu"),
                "layer_norm": at_level(level, kernels.layer_norm, x0)}
        for at_end in (True, False):
            for name, fn in (("softmax", lambda x, out: kernels.softmax(x, out=out)),
                             ("gelu", lambda x, out: kernels.activation(x, "gelu", out=out)),
                             ("layer_norm", lambda x, out: kernels.layer_norm(x, out=out))):
                inp.raw[:] = MARK
                outp.raw[:] = MARK
                x = inp.array(n, np.float32, at_end).reshape(1, n)
                x[...] = x0
                out = outp.array(n, np.float32, at_end).reshape(1, n)
                at_level(level, fn, x, out)
                np.testing.assert_array_equal(out.view(np.uint32), want[name].view(np.uint32),
                                              err_msg=f"{name} n={n} at_end={at_end}")
                assert outp.untouched_outside(n, np.float32, at_end), (name, n, at_end)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_numerics_stats_against_guard_pages(arenas, level, dtype):
    inp, _ = arenas
    for n in SIZES:
        x0 = _values(n, dtype) * dtype.type(1000)
        want = at_level(level, kernels.numerics_stats, x0)
        for at_end in (True, False):
            x = inp.array(n, dtype, at_end)
            x[:] = x0
            assert at_level(level, kernels.numerics_stats, x) == want
