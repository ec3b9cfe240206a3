"""What fit / evaluate / predict show while they run: Keras's ``verbose`` argument, a progress
bar (tqdm when installed, else plain lines) and the formatting of the logs."""
import sys

__all__ = ["verbosity", "progress_bar", "format_log", "PlainProgress"]


def _interactive():
    """Whether stdout is a terminal (progress bars redraw there; elsewhere they would write a
    line per update)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def verbosity(owner, verbose):
    """Keras's verbose argument, resolved: "auto" and 1 draw a bar on a terminal; redirected,
    they write one line per epoch (2), as Keras's progress bar does without a terminal."""
    if verbose == "auto":
        verbose = 1
    if isinstance(verbose, bool) or verbose not in (0, 1, 2):
        raise ValueError(f"{owner}: verbose must be 'auto', 0, 1 or 2, got {verbose!r}")
    if verbose == 1 and not _interactive():
        return 2
    return verbose


class PlainProgress:
    """Progress as plain lines on stdout, for verbose=1 when tqdm is not installed: a line at
    every tenth of the steps and one at the end, with the latest logs."""

    def __init__(self, total, desc):
        self.total, self.desc, self.done, self.post = total, desc, 0, {}
        self.next_report = 0.1
        self.closed = False

    def set_postfix(self, post, refresh=False):
        self.post = dict(post)

    def _line(self):
        logs = "".join(f" - {k}: {v}" for k, v in self.post.items())
        total = "?" if self.total is None else self.total
        print(f"{self.desc}: {self.done}/{total} steps{logs}", file=sys.stdout, flush=True)

    def update(self, n):
        self.done += n
        if self.total and self.done < self.total and self.done >= self.next_report * self.total:
            self._line()
            while self.next_report * self.total <= self.done:
                self.next_report += 0.1

    def close(self):
        if not self.closed:
            self.closed = True
            self._line()


def progress_bar(total, desc, verbose):
    """Keras's verbose=1 display on stdout: a tqdm bar when tqdm is installed (the "progress"
    extra), else plain lines (PlainProgress); None for verbose 0 and 2."""
    if verbose != 1:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return PlainProgress(total, desc)
    return tqdm(total=total, desc=desc, unit="step", file=sys.stdout, leave=True,
                dynamic_ncols=True, mininterval=0.2)


def format_log(value, key=""):
    """One log value as the bar and the epoch lines show it (``key``: the log's name)."""
    if key == "loss_scale":
        return f"{value:.0f}" if value < 1e15 else f"{value:g}"
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.4g}"
        return f"{value:.4f}"
    return str(value)
