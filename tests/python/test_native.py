"""The native module's type stubs (qnnx_backend/_native.pyi) against the installed module: the
same names, and mypy's stubtest on every signature, property and class. No QNN needed."""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

import qnnx_backend
from qnnx_backend import _native

STUB = pathlib.Path(qnnx_backend.__file__).with_name("_native.pyi")


def test_stubs_declare_the_native_module_names():
    tree = ast.parse(STUB.read_text())
    declared = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    public = {n for n in dir(_native) if not n.startswith("_")}
    assert declared == public, f"stub only: {declared - public}; module only: {public - declared}"
    assert set(_native.__all__) == public


def test_stubtest_finds_no_mismatch(tmp_path):
    try:
        import mypy.stubtest  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI is set but mypy is missing: requirements-test.txt pins it")
        pytest.skip("mypy is not installed (pip install -r requirements-test.txt)")
    # Run outside the checkout, so the installed package (the built module and its stub) is the
    # one checked, with mypy's cache in a temporary folder. The stub imports only `typing`:
    # following the package's own imports would have mypy analyse torch (15 s more).
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nfollow_imports = skip\n")
    out = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "qnnx_backend._native", "--mypy-config-file", str(config)],
        cwd=tmp_path,
        env={**os.environ, "MYPY_CACHE_DIR": str(tmp_path / "mypy-cache")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
    assert "Success" in out.stdout, out.stdout
