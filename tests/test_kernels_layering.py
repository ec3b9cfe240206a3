"""mixedcore.kernels is the lowest Python layer: it imports only the compiled core, the version
constant and itself, at module level and inside functions alike."""
import ast
import os

import mixedcore.kernels

ALLOWED = ("mixedcore._core", "mixedcore._version", "mixedcore.kernels")


def _imports(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield "mixedcore.kernels." + (node.module or "")
            elif node.module == "mixedcore":
                yield from ("mixedcore." + alias.name for alias in node.names)
            else:
                yield node.module


def test_kernels_import_nothing_above_them():
    folder = os.path.dirname(mixedcore.kernels.__file__)
    wrong = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            for module in _imports(os.path.join(folder, name)):
                if (module == "mixedcore" or module.startswith("mixedcore.")) and not any(
                        module == a or module.startswith(a + ".") for a in ALLOWED):
                    wrong.append(f"{name}: {module}")
    assert not wrong, wrong
