"""The Python examples of the README and docs/: each ```python block parses, and the blocks
marked runnable run.

A block is marked by the line `<!-- docs-test: run -->` right above its fence (invisible on GitHub
and on the site), or `<!-- docs-test: run setup=NAME -->` when it uses names the page defines in
prose (`model`, `x`): SETUPS[NAME] runs first. Each runs in a fresh interpreter in a temporary
folder, so `backend="qnn"` must resolve through the entry point, as it does for a user. Blocks
without the marker are only parsed (docs/testing.md lists which run and why the others don't).
Links and anchors are checked by scripts/check-docs (mkdocs --strict).
"""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"^<!-- docs-test: run(?: setup=(\w+))? -->\n```python\n(.*?)^```", re.S | re.M)
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

SETUPS = {
    # `model` and `x` as the prose of docs/pytorch.md and docs/deploying.md has them.
    "cnn": """
import torch
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
x = torch.randn(1, 3, 32, 32)
""",
    # `model.onnx` with one input `x` [1, 3, 224, 224], as docs/deploying.md's session example reads.
    "onnx224": """
import torch
m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, stride=4), torch.nn.ReLU()).eval()
torch.onnx.export(m, (torch.zeros(1, 3, 224, 224),), "model.onnx", input_names=["x"], dynamo=False)
""",
}


def _location(path, text, start):
    return f"{path.relative_to(ROOT)}:{text[:start].count(chr(10)) + 1}"


def _blocks(pattern):
    for path in PAGES:
        text = path.read_text()
        for m in pattern.finditer(text):
            yield _location(path, text, m.start()), m


RUNNABLE = [pytest.param(m.group(1), m.group(2), id=loc) for loc, m in _blocks(MARK)]


@pytest.mark.parametrize("code", [pytest.param(m.group(1), id=loc) for loc, m in _blocks(FENCE)])
def test_python_block_parses(code):
    ast.parse(code)


def test_runnable_examples_are_found():
    # The README's quick start at least: a marker that stops matching must not pass silently.
    assert any(p.id.startswith("README.md:") for p in RUNNABLE), [p.id for p in RUNNABLE]


@pytest.mark.htp
@pytest.mark.parametrize("setup,code", RUNNABLE)
def test_runnable_example_runs(setup, code, tmp_path):
    script = (SETUPS[setup] if setup else "") + code
    env = dict(os.environ, QNNX_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
