"""Command line: ``python -m mixedcore info``."""
import argparse
import sys


def _info(args):
    import numpy as np
    import ml_dtypes

    import mixedcore
    from mixedcore import kernels
    from mixedcore._core import _lib

    try:
        from mixedcore._build_info import BUILD_INFO
    except ImportError:
        BUILD_INFO = {}
    rows = [
        ("mixedcore", mixedcore.__version__),
        ("numpy", np.__version__),
        ("ml_dtypes", ml_dtypes.__version__),
        ("python", sys.version.split()[0]),
        ("CPU supports", kernels.ISA_LEVELS[_lib.supported_level()]),
        ("built levels", ", ".join(BUILD_INFO.get("isa_levels", kernels.available_isas()))),
        ("available", ", ".join(kernels.available_isas())),
        ("selected", kernels.isa()),
        ("threads", str(kernels.get_num_threads())),
        ("OpenMP", "yes" if _lib.openmp_enabled() else "no (single-threaded build)"),
        ("compiler", BUILD_INFO.get("compiler", "unknown")),
        ("flags", BUILD_INFO.get("flags", "unknown")),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mixedcore",
                                     description="mixedcore command line")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="version, CPU dispatch level, threads, build")
    args = parser.parse_args(argv)
    return {"info": _info}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
