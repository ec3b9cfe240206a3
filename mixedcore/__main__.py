"""``python -m mixedcore ...``: the command line of ``mixedcore.cli``."""
import sys

import mixedcore

if getattr(mixedcore, "__file__", None) is None:
    # a directory named mixedcore without an __init__.py (a clone's root, seen from the
    # directory it was cloned into) was imported as a namespace package instead of the package
    sys.exit(f"python -m mixedcore: 'mixedcore' here is the directory "
             f"{list(mixedcore.__path__)[0]}, not the package: the current directory comes first "
             "on sys.path. Run from another directory, or from inside that one.")

from mixedcore.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
