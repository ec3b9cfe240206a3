"""Running hostile input in a child process with a time limit and a memory limit.

A test that feeds the library a crafted file or array must not take the test session down with it
if the library fails: the code runs in a fresh interpreter whose address space is capped
(``RLIMIT_AS``) and which is killed after ``timeout`` seconds.  The test then looks at how the
child ended: a clean exit, a Python exception of the expected type (printed by the child as
``raised <Type>: <message>`` on its last line), or a signal.
"""
import os
import resource
import subprocess
import sys
import textwrap
from dataclasses import dataclass

TESTS = os.path.dirname(os.path.abspath(__file__))

# Enough for the interpreter, numpy and the extension with its thread team and workspaces, far
# below what an unchecked declared size in a crafted file would ask for.
DEFAULT_MEMORY = 1536 * 2**20

_PRELUDE = """\
import sys, traceback
def _report(exc):
    text = str(exc).replace("\\n", " ")
    print("raised %s: %s" % (type(exc).__name__, text), flush=True)
"""

_EPILOGUE = """\
try:
    _main()
except BaseException as _exc:       # reported for the parent to check, never hidden
    _report(_exc)
    sys.exit(3)
print("finished", flush=True)
"""


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def last_line(self):
        lines = self.stdout.strip().splitlines()
        return lines[-1] if lines else ""

    @property
    def finished(self):
        return self.returncode == 0 and self.last_line == "finished"

    @property
    def crashed(self):
        return self.timed_out or self.returncode < 0

    def raised(self):
        """``(type name, message)`` of the exception the child reported, or None."""
        line = self.last_line
        if self.returncode != 3 or not line.startswith("raised "):
            return None
        name, _, message = line[len("raised "):].partition(": ")
        return name, message

    def describe(self):
        how = "timed out" if self.timed_out else "exit %d" % self.returncode
        return "%s; stdout tail: %r; stderr tail: %r" % (
            how, self.stdout[-1500:], self.stderr[-1500:])


def _limits(memory):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def package_parent():
    """The directory holding the mixedcore this process imported (a checkout's or an installed
    one): what a child puts on its path, running from tests/ where no unbuilt source tree (an
    unpacked sdist) shadows it."""
    import mixedcore
    return os.path.dirname(os.path.dirname(mixedcore.__file__))


def run_isolated(body, timeout=60, memory=DEFAULT_MEMORY, env=None, cwd=None):
    """Run ``body`` (the statements of a function, any indentation) in a child interpreter.

    The child runs with at most ``memory`` bytes of address space and is killed after ``timeout``
    seconds.  Returns an :class:`Outcome`.
    """
    code = _PRELUDE + "def _main():\n" + textwrap.indent(textwrap.dedent(body), "    ") + \
        "\n" + _EPILOGUE
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("MIXEDCORE_NUM_THREADS", "2")
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_parent(), child_env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=child_env, cwd=cwd or TESTS,
                              preexec_fn=_limits(memory))
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return Outcome(-9, out, err, True)
    return Outcome(proc.returncode, proc.stdout, proc.stderr, False)


def assert_finishes(body, **kw):
    """The child runs ``body`` to the end."""
    outcome = run_isolated(body, **kw)
    assert outcome.finished, outcome.describe()
    return outcome


def assert_refused(body, error=ValueError, match=None, **kw):
    """The child's ``body`` raises ``error`` (by name; a subclass name does not count) and the
    message contains every string of ``match``; it neither crashes nor hangs nor runs out of
    memory."""
    outcome = run_isolated(body, **kw)
    raised = outcome.raised()
    names = (error,) if isinstance(error, type) else tuple(error)
    assert raised is not None and raised[0] in {e.__name__ for e in names}, outcome.describe()
    for text in ([match] if isinstance(match, str) else (match or [])):
        assert text in raised[1], (text, raised[1])
    return raised[1]
