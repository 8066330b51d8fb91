"""The structure of the ``qnnx_backend`` package, read from its sources: no import cycle (function-
level imports included, so that none can hide one) and no module over about 400 lines.

The graph has an edge from a module to every ``qnnx_backend`` module it imports anywhere in its
file: ``import a.b``, ``from . import b`` (to ``b`` when ``b`` is a module, else to the package
it is imported from), ``from .b import name`` (to ``b``, or to ``b.name`` when that is a
submodule), relative imports resolved against the importing module's package. Python also
runs a subpackage's ``__init__.py`` before any of its modules; those implied edges are left
out because every subpackage ``__init__.py`` here only holds a docstring (checked below).
"""

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "qnnx-py" / "python" / "qnnx_backend"
PACKAGE = "qnnx_backend"
#: Modules over this many lines fail: a module that grows past it is doing two jobs.
MAX_LINES = 420


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join([PACKAGE, *parts])] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """{module: the qnnx_backend modules it imports}, as described in this file's docstring."""
    modules = _modules()
    known = set(modules) | {f"{PACKAGE}._native"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != PACKAGE:
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    edges.add(sub if sub in known else target)
        unknown = edges - known
        assert not unknown, f"{name} imports {sorted(unknown)}, which are not modules of the package"
        graph[name] = edges - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (its modules in order, the first repeated at the end), or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str]:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return []

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return []


def test_the_package_has_no_import_cycle():
    cycle = _cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_are_edges():
    # settings -> quantization.config was an import inside a function; the graph must see it.
    assert "qnnx_backend.quantization.config" in import_graph()["qnnx_backend.settings"]
    assert "qnnx_backend.quantization.annotate" in import_graph()["qnnx_backend.quantization.pt2e"]


def test_subpackage_inits_import_nothing():
    for path in PACKAGE_DIR.rglob("__init__.py"):
        if path.parent == PACKAGE_DIR:
            continue
        body = ast.parse(path.read_text()).body
        assert all(isinstance(n, ast.Expr) for n in body), f"{path} holds more than its docstring"


def test_no_module_is_over_about_400_lines():
    long = {
        str(p.relative_to(PACKAGE_DIR)): n
        for p in PACKAGE_DIR.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"
