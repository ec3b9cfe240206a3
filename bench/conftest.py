"""Options of the benchmark suites.

``--busy`` runs the whole session beside one process spinning on a core
(``python -c "while True: pass"``, in a session of its own), as on a shared machine where
another user's job holds a core:

    python -m pytest bench/bench_inference.py --benchmark-only --benchmark-group-by=group --busy

The spinner starts before collection and is killed when the session ends, also after a
failure, an error or Ctrl-C (pytest's cleanup), and by the kernel if pytest itself is killed.
"""
import pytest

from benchutil import start_spinner, stop_spinner

_SPINNER = pytest.StashKey()


def pytest_addoption(parser):
    parser.addoption("--busy", action="store_true", default=False,
                     help="run the benchmarks beside one process spinning on a core "
                          "(a busy machine); it is killed at the end of the session")


def pytest_configure(config):
    if config.getoption("busy", default=False):
        proc = start_spinner()
        config.stash[_SPINNER] = proc
        config.add_cleanup(lambda: stop_spinner(proc))


def pytest_report_header(config):
    proc = config.stash.get(_SPINNER, None)
    if proc is not None:
        return f"busy machine: one process (pid {proc.pid}) spins beside the benchmarks"
    return None
