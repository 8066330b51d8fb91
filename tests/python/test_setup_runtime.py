"""scripts/setup-runtime registers the checkout's QNN runtime in the user's data folder, so a new
shell (no QNNX_RUNTIME_DIR exported) finds the libraries: before, the README's PyTorch snippet in
a new shell ran eagerly on the CPU with a 'libQnnHtp.so not found' warning."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME = Path(os.environ.get("QNNX_RUNTIME_DIR") or REPO / "runtime")

pytestmark = [
    pytest.mark.htp,
    pytest.mark.skipif(
        RUNTIME.resolve() != (REPO / "runtime").resolve(),
        reason="the runtime is not the checkout's (QNNX_RUNTIME_DIR points elsewhere): nothing to register",
    ),
]

PROBE = "import qnnx_backend; print('AVAILABLE', qnnx_backend.is_available('npu'))"


def new_shell(data_home: Path) -> dict:
    """The environment of a new shell: no runtime folder exported, nothing else naming QNN."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QNN") and k != "VIRTUAL_ENV"}
    env["XDG_DATA_HOME"] = str(data_home)
    # The loader's last resort asks python3 where onnxruntime_qnn is: point that at nothing.
    env["QNNX_ONNXRUNTIME_QNN_DIR"] = str(data_home / "no-onnxruntime-qnn")
    return env


def probe(env: dict) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_a_new_shell_finds_the_runtime_setup_installed(tmp_path):
    env = new_shell(tmp_path)
    assert "AVAILABLE False" in probe(env), "something else found a QNN library: the test would prove nothing"
    setup = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "setup-runtime")],
        env={**env, "QNNX_RUNTIME_DIR": str(RUNTIME)}, capture_output=True, text=True, timeout=600,
    )
    assert setup.returncode == 0, setup.stderr[-2000:]
    link = tmp_path / "qnnx" / "runtime"
    assert link.is_symlink() and link.resolve() == RUNTIME.resolve()
    assert "AVAILABLE True" in probe(env)
    # Again: a no-op that keeps the link.
    subprocess.run([sys.executable, str(REPO / "scripts" / "setup-runtime"), "--quiet"],
                   env={**env, "QNNX_RUNTIME_DIR": str(RUNTIME)}, check=True, timeout=600)
    assert link.is_symlink() and link.resolve() == RUNTIME.resolve()


def test_an_install_of_its_own_is_left_alone(tmp_path):
    own = tmp_path / "qnnx" / "runtime"
    own.mkdir(parents=True)
    (own / "mine").write_text("x")
    setup = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "setup-runtime")],
        env={**new_shell(tmp_path), "QNNX_RUNTIME_DIR": str(RUNTIME)}, capture_output=True, text=True, timeout=600,
    )
    assert setup.returncode == 0, setup.stderr[-2000:]
    assert not own.is_symlink() and (own / "mine").read_text() == "x"
    assert "left as it is" in setup.stderr
