"""CONTRIBUTING.md's module map names every module, and only modules that exist.

Read from the tree at test time: every crate of the workspace (Cargo.toml's `members`) has a
subsection of "## Module map" headed by its source folder (`### `engine/src/``), and the Python
package has one headed `qnnx-py/python/qnnx_backend/`. Within a subsection's table (any column
but "tested in"), modules are named in backticks by their path under that folder: a file (`cache/key.rs`, `_policy.py`) or a folder
(`cache/`, a module whose `mod.rs` or `__init__.py` it covers). Not required: `lib.rs`,
`main.rs`, `mod.rs` and a subpackage's `__init__.py` (named by their crate or folder), and the op
files inside `lowering/src/ops/<family>/`, one per ONNX op, which the op tables and
docs/operators.md list and lowering/tests/op_table.rs checks (their family folder is named).
"""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "qnnx-py/python/qnnx_backend/"
IMPLIED = {"lib.rs", "main.rs", "mod.rs"}


def _op_file(src, rel):
    parts = rel.split("/")
    return src == "lowering/src/" and len(parts) == 3 and parts[0] == "ops" and rel.endswith(".rs")


def modules(src):
    """The module paths under src (relative, folders ending in /) that the map must name."""
    root = ROOT / src
    out = set()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        # Caches tools leave in the tree (never in git): __pycache__, .mypy_cache, ...
        if "__pycache__" in rel or any(part.startswith(".") for part in rel.split("/")):
            continue
        if path.is_dir():
            out.add(rel + "/")
        elif src == PACKAGE:
            top_init = rel == "__init__.py"
            if path.suffix in (".py", ".pyi") and (top_init or path.name != "__init__.py"):
                out.add(rel)
        elif path.suffix == ".rs" and path.name not in IMPLIED and not _op_file(src, rel):
            out.add(rel)
    return out


def module_map():
    """{source folder: the backticked names in its subsection's table} from CONTRIBUTING.md
    (every column but "tested in"; prose around the tables does not count)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("\n## Module map\n", 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    out = {}
    for sub in re.split(r"\n### ", section)[1:]:
        heading, _, body = sub.partition("\n")
        src = re.match(r"`([^`]+/)`", heading).group(1)
        names, columns = set(), None
        for line in body.split("\n"):
            if not line.startswith("|") or line.startswith("|---"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if columns is None:
                columns = [i for i, c in enumerate(cells) if c != "tested in"]
                continue
            for i in columns:
                names |= set(re.findall(r"`([^`\s]+)`", cells[i]))
        out[src] = names
    return out


def sources():
    members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
    return [f"{m}/src/" for m in members] + [PACKAGE]


def test_every_crate_and_the_package_have_a_subsection():
    assert sorted(module_map()) == sorted(sources())


def test_the_map_names_every_module():
    mapped = module_map()
    missing = {src: sorted(modules(src) - mapped.get(src, set())) for src in sources()}
    missing = {src: names for src, names in missing.items() if names}
    assert not missing, f"modules without a row in CONTRIBUTING.md's module map: {missing}"


def test_the_map_names_no_module_that_does_not_exist():
    stale = {}
    for src, names in module_map().items():
        paths = [n for n in names if n.endswith(("/", ".rs", ".py", ".pyi")) and "::" not in n]
        gone = [n for n in paths if not (ROOT / src / n).exists()]
        if gone:
            stale[src] = sorted(gone)
    assert not stale, f"the module map names paths that do not exist: {stale}"
