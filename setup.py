"""Build of mixedcore's compiled core.

Design:
  a. One extension module, ``mixedcore._core._mixedcore``, so that there is one engine (dispatch
     state, settings, thread team) in the process.
  b. SIMD kernels live in C files named ``*_<isa>.c``; each is compiled on its own with exactly
     the instruction-set flags of its level and linked into the module.  The rest of the module
     is compiled for the baseline of the platform, so the extension runs on any x86-64 CPU and
     picks the kernels at run time.  Never -march=native, never -ffast-math.  The C sources and
     headers are found anywhere below src/ (runtime/, simd/, a folder per kernel family), the
     level read from the file name alone, and every folder there is an include directory, so a
     file includes another by its name.
  c. Threads are the project's own team on POSIX threads (src/runtime/mc_team.c), no OpenMP
     runtime; MIXEDCORE_NO_THREADS=1 (or a platform without POSIX threads) builds it without,
     and every call then runs on its caller.
  d. On a platform that is not x86-64 (or a compiler that is not GCC-compatible) only the
     generic level is built.
  e. Every C object is compiled with -fvisibility=hidden: the module exports PyInit__mixedcore
     and the two thread-count entry points threadpoolctl calls (marked MC_EXPORT_), nothing else.
  f. What was built (compiler, flags, levels) is compiled into the module as string macros and
     read back by ``_mixedcore.build_info()``: nothing is written into the source tree, so a
     read-only tree builds and an in-place build carries its own description.
  g. A source tree that is not writable builds in a temporary directory (Cython's C and
     setuptools' build/), removed at exit.
  h. MIXEDCORE_SANITIZE=1 compiles and links the whole core with AddressSanitizer and
     UndefinedBehaviorSanitizer at -O1 (any UB report aborts); the interpreter then needs
     LD_PRELOAD of the compiler's libasan (see .ci/run).
  i. The C files are compiled in parallel, one compiler process per CPU this process may run on
     (MIXEDCORE_BUILD_JOBS overrides), the largest first: the build takes about as long as its
     largest file (Cython's C of the module) instead of the sum of all.
"""
import atexit
import os
from concurrent.futures import ThreadPoolExecutor
import platform
import shutil
import sys
import tempfile
import time

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join("mixedcore", "_core", "src")

BASE_FLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-fno-strict-aliasing",
              "-fvisibility=hidden"]
SANITIZE_FLAGS = ["-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                  "-fno-sanitize-recover=undefined"]
ISA_FLAGS = {
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "avx512": ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl",
               "-mavx512dq"],
    "avx512bf16": ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl",
                   "-mavx512dq", "-mavx512bf16", "-mavx512vnni"],
}


def _is_x86_64():
    return platform.machine().lower() in ("x86_64", "amd64")


def _compiler_is_gnu_like(compiler):
    return getattr(compiler, "compiler_type", "") == "unix"


def _try_compile(compiler, code, flags):
    """True when ``code`` compiles and links with ``flags``."""
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write(code)
        try:
            objs = compiler.compile([src], output_dir=tmp, extra_postargs=flags)
            compiler.link_executable(objs, os.path.join(tmp, "probe"), extra_postargs=flags)
        except Exception:
            return False
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


ISA_PROBE = {
    "avx2": "#include <immintrin.h>\nint main(void){__m256 a=_mm256_set1_ps(1.f);"
            "__m128i h=_mm256_cvtps_ph(_mm256_fmadd_ps(a,a,a),0);return _mm_extract_epi16(h,0)==0;}",
    "avx512": "#include <immintrin.h>\nint main(void){__m512i a=_mm512_set1_epi32(1);"
              "__m256i h=_mm512_cvtepi32_epi16(a);return _mm256_extract_epi16(h,0)!=1;}",
    "avx512bf16": "#include <immintrin.h>\nint main(void){__m512 a=_mm512_set1_ps(1.f);"
                  "__m512 c=_mm512_dpbf16_ps(a,(__m512bh)_mm512_cvtne2ps_pbh(a,a),"
                  "(__m512bh)_mm512_cvtne2ps_pbh(a,a));__m512i i=_mm512_set1_epi32(1);"
                  "i=_mm512_dpbusd_epi32(i,i,i);"
                  "return _mm512_reduce_add_ps(c)==0.f||_mm512_reduce_add_epi32(i)==0;}",
}


def _build_jobs():
    text = os.environ.get("MIXEDCORE_BUILD_JOBS", "")
    if text:
        if not text.isdigit() or int(text) < 1:
            raise SystemExit(f"setup.py: MIXEDCORE_BUILD_JOBS must be a positive integer, got "
                             f"{text!r}")
        return int(text)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _run_all(jobs, calls):
    """Run the zero-argument ``calls`` on ``jobs`` threads (each starts a compiler process);
    the first failure is raised once all have ended."""
    if jobs == 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(call) for call in calls]
        return [f.result() for f in futures]


def _by_size(paths):
    """Largest first, so the longest compilation starts at once."""
    return sorted(paths, key=lambda p: -os.path.getsize(p) if os.path.exists(p) else 0)


def _parallel_compile(compiler, jobs):
    """Make ``compiler.compile`` compile its sources ``jobs`` at a time (one call compiles the
    module's Cython C and the baseline C files together)."""
    serial = compiler.compile

    def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                extra_preargs=None, extra_postargs=None, depends=None):
        if jobs == 1 or len(sources) < 2:
            return serial(sources, output_dir, macros, include_dirs, debug, extra_preargs,
                          extra_postargs, depends)
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
        order = sorted((obj for obj in objects if obj in build),
                       key=lambda obj: -os.path.getsize(build[obj][0]))

        def one(obj):
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        _run_all(jobs, [lambda obj=obj: one(obj) for obj in order])
        return objects

    compiler.compile = compile


class BuildExt(build_ext):
    """Compiles each ``*_<isa>.c`` file with its level's flags, in parallel."""

    def build_extensions(self):
        compiler = self.compiler
        jobs = _build_jobs()
        gnu = _compiler_is_gnu_like(compiler)
        sanitize = gnu and os.environ.get("MIXEDCORE_SANITIZE") == "1"
        base = (BASE_FLAGS + (SANITIZE_FLAGS if sanitize else [])) if gnu else []
        x86 = _is_x86_64() and gnu and os.environ.get("MIXEDCORE_GENERIC_ONLY") != "1"
        levels = [lvl for lvl in ISA_FLAGS if x86 and _try_compile(compiler, ISA_PROBE[lvl], ISA_FLAGS[lvl])]
        threads = os.environ.get("MIXEDCORE_NO_THREADS") != "1" and os.name == "posix"
        thread_flags = ["-pthread"] if threads and gnu else []
        macros = [] if threads else [("MC_NO_THREADS", "1")]
        info_macros = _build_info_macros(compiler, base + thread_flags, ["generic"] + levels)
        # the only lines a quiet build (-q) prints: compiling takes minutes with no output
        started = time.monotonic()
        _say(f"mixedcore: compiling the compiled core ({len(_c_sources())} C files, levels "
             f"{', '.join(['generic'] + levels)}); this takes a minute or two")
        for ext in self.extensions:
            isa_sources = [s for s in ext.sources if _source_level(s) is not None]
            ext.sources = [s for s in ext.sources if s not in isa_sources]
            built = [src for src in _by_size(isa_sources) if _source_level(src) in levels]
            results = _run_all(jobs, [lambda src=src, ext=ext: compiler.compile(
                [src], output_dir=self.build_temp, include_dirs=ext.include_dirs,
                macros=ext.define_macros, extra_postargs=base + ISA_FLAGS[_source_level(src)],
                debug=self.debug) for src in built])
            objects = [obj for objs in results for obj in objs]
            ext.extra_objects = objects + list(ext.extra_objects or [])
            # build_ext relinks only when a source or a dependency is newer than the module:
            # the per-ISA sources and the headers must count, or editing them alone would
            # leave a stale module behind
            ext.depends = list(ext.depends or []) + isa_sources + _headers()
            ext.define_macros = list(ext.define_macros) + macros + [
                ("MC_HAVE_" + lvl.upper(), "1") for lvl in levels] + info_macros
            ext.extra_compile_args = base + thread_flags
            ext.extra_link_args = thread_flags + (SANITIZE_FLAGS if sanitize else [])
        _parallel_compile(compiler, jobs)
        super().build_extensions()
        _say(f"mixedcore: compiled in {time.monotonic() - started:.0f} s")


def _say(line):
    """A progress line on stderr, which quiet builds keep and pip shows with -v."""
    print(line, file=sys.stderr, flush=True)


def _c_string(text):
    """``text`` as a C string literal for a -D macro (passed as one argument, no shell)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _build_info_macros(compiler, flags, levels):
    """The build's description as macros for _mixedcore.build_info()."""
    cc = " ".join(getattr(compiler, "compiler_so", [])[:1]) or compiler.compiler_type
    return [("MC_BUILD_COMPILER", _c_string(cc)), ("MC_BUILD_FLAGS", _c_string(" ".join(flags))),
            ("MC_BUILD_LEVELS", _c_string(",".join(levels)))]


def _source_level(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    for level in sorted(ISA_FLAGS, key=len, reverse=True):
        if stem.endswith("_" + level):
            return level
    return None


def _src_files(suffix):
    """Files below src/ whose names end in ``suffix``, as paths relative to the project."""
    found = []
    for root, dirs, files in os.walk(os.path.join(HERE, SRC)):
        dirs.sort()
        rel = os.path.relpath(root, HERE)
        found += [os.path.join(rel, f) for f in files if f.endswith(suffix)]
    return sorted(found)


def _headers():
    return _src_files(".h")


def _c_sources():
    return _src_files(".c")


def _include_dirs():
    """src/ and every folder below it."""
    found = []
    for root, dirs, _ in os.walk(os.path.join(HERE, SRC)):
        dirs.sort()
        found.append(os.path.relpath(root, HERE))
    return sorted(found)


def _out_of_tree_build_dir():
    """A temporary build directory when the source tree is read-only, else None (build/)."""
    if os.access(HERE, os.W_OK):
        return None
    path = tempfile.mkdtemp(prefix="mixedcore-build-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


BUILD_DIR = _out_of_tree_build_dir()

extensions = [
    Extension(
        "mixedcore._core._mixedcore",
        sources=[os.path.join("mixedcore", "_core", "_mixedcore.pyx")] + _c_sources(),
        include_dirs=_include_dirs() + [numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": 3, "boundscheck": False, "wraparound": False,
                             "cdivision": True, "initializedcheck": False},
        build_dir=os.path.join(BUILD_DIR, "cython") if BUILD_DIR else None,
    ),
    cmdclass={"build_ext": BuildExt},
    options={"build": {"build_base": BUILD_DIR}, "egg_info": {"egg_base": BUILD_DIR}}
    if BUILD_DIR else {},
)
