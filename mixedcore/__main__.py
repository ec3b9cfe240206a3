"""``python -m mixedcore ...``: the command line of ``mixedcore.cli``."""
import sys

from mixedcore.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
