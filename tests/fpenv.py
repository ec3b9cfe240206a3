"""The C library's floating-point environment, for tests that check what the kernels leave in
it or that set a caller's mode (x86-64 Linux for the MXCSR itself)."""
import ctypes
import ctypes.util
import platform
import sys

import pytest

HAVE_LIBM = ctypes.util.find_library("m") is not None
needs_libm = pytest.mark.skipif(not HAVE_LIBM, reason="needs the C math library")
FE_ALL = 0x3D   # glibc x86: INVALID | DIVBYZERO | OVERFLOW | UNDERFLOW | INEXACT (DENORM excluded)


def fetestexcept():
    """(fetestexcept, feclearexcept) of the C math library."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    return libm.fetestexcept, libm.feclearexcept


class X86FloatEnv:
    """The caller's MXCSR through glibc's fenv_t (x86-64: __mxcsr at byte 28)."""

    supported = platform.machine() in ("x86_64", "AMD64") and sys.platform.startswith("linux")

    def __init__(self):
        self.libc = ctypes.CDLL(None)
        self.buf = (ctypes.c_uint8 * 32)()

    def mxcsr(self):
        self.libc.fegetenv(self.buf)
        return int.from_bytes(bytes(self.buf[28:32]), "little")

    def set_mxcsr(self, value):
        self.libc.fegetenv(self.buf)
        self.buf[28:32] = list(value.to_bytes(4, "little"))
        assert self.libc.fesetenv(self.buf) == 0
