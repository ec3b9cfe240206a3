"""The package's import layering (docs/architecture.md, "The map"): every import between
mixedcore's modules, at module level or inside a function, goes from a higher floor to a
strictly lower one, and no modules import each other in a loop.

A module belongs to the longest prefix in FLOORS that names it; modules of one prefix (a
package's own files) may import each other, and the loop check covers them.
"""
import ast
import pathlib

import mixedcore

# lowest first
FLOORS = [
    ("mixedcore._core", "mixedcore._version"),
    ("mixedcore.kernels",),
    ("mixedcore._dtypes", "mixedcore.random", "mixedcore.saving.object_registration"),
    ("mixedcore.initializers", "mixedcore.regularizers", "mixedcore.activations",
     "mixedcore.loss_scale", "mixedcore.losses", "mixedcore.callbacks", "mixedcore.datasets",
     "mixedcore.quantizers"),
    ("mixedcore.dtype_policies", "mixedcore.metrics", "mixedcore.optimizers"),
    ("mixedcore.layers",),
    ("mixedcore.trainers", "mixedcore.saving"),
    ("mixedcore.models",),
    ("mixedcore.utils", "mixedcore.policy", "mixedcore.policies", "mixedcore.experimental",
     "mixedcore.scale_out", "mixedcore.hub"),
    ("mixedcore.mixed_precision",),
    ("mixedcore",),
    ("mixedcore.cli",),
    ("mixedcore.__main__",),
]
ROOT = pathlib.Path(mixedcore.__file__).parent


def _modules():
    """{module name: path} of every Python file of the package."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name, path, modules):
    """The mixedcore modules ``name`` imports (``from pkg import sub`` names the submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules
                       else module for alias in node.names]
        else:
            continue
        for target in targets:
            if target == "mixedcore" or target.startswith("mixedcore."):
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target in modules and target != name:
                    yield target


def _group(name):
    best = None
    for floor, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (
                    best is None or len(prefix) > len(best[1])):
                best = (floor, prefix)
    return best


def _graph():
    modules = _modules()
    return {name: set(_imports(name, path, modules)) for name, path in modules.items()}


def test_every_module_has_a_floor():
    assert [name for name in _graph() if _group(name) is None] == []


def _upward(graph):
    wrong = []
    for name, targets in graph.items():
        floor, prefix = _group(name)
        for target in sorted(targets):
            t_floor, t_prefix = _group(target)
            if t_prefix != prefix and t_floor >= floor:
                wrong.append(f"{name} (floor {floor}) imports {target} (floor {t_floor})")
    return wrong


def _loops(graph):
    index, low, stack, on_stack, loops = {}, {}, [], set(), []

    def visit(v):                       # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return loops


def test_imports_only_run_down():
    assert _upward(_graph()) == []


def test_no_import_loops():
    assert _loops(_graph()) == []


def test_the_checks_catch_an_upward_import_and_a_loop():
    assert _upward({"mixedcore.kernels._cast": {"mixedcore.layers._base"}}) != []
    assert _upward({"mixedcore.trainers.trainer": {"mixedcore.saving.config"}}) != []
    assert _upward({"mixedcore.layers._core": {"mixedcore.saving.object_registration"}}) == []
    assert _loops({"mixedcore.layers._a": {"mixedcore.layers._b"},
                   "mixedcore.layers._b": {"mixedcore.layers._a"}}) != []
    # imports are read in their relative, from-package and function-local forms
    modules = _modules()
    assert "mixedcore.kernels._cast" in set(
        _imports("mixedcore.kernels", ROOT / "kernels" / "__init__.py", modules))
    assert "mixedcore.kernels" in _graph()["mixedcore._dtypes"]
