"""scripts/check-wheel refuses a Windows ARM64 wheel or qnnx.exe that would not load on a
Snapdragon X laptop: another CPU's machine type, a DLL a stock Windows 11 does not have (MinGW's
libunwind, libc++), no PyInit__native, a build path inside. The fixtures in data/pe/ are tiny
ARM64 binaries made by Zig (data/pe/build.sh) that pass; each case patches a copy with pefile."""

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pefile
import pytest

REPO = Path(__file__).resolve().parents[2]
PE = Path(__file__).parent / "data" / "pe"
WHEEL_NAME = "qnnx-0.1.0-cp310-abi3-win_arm64.whl"


def make_wheel(folder: Path, native: bytes, name: str = WHEEL_NAME) -> Path:
    """A wheel as maturin lays it out, holding `native` as the extension module."""
    tag = "-".join(name[:-4].split("-")[2:])
    files = {
        "qnnx_backend/__init__.py": b"from . import _native\n",
        "qnnx_backend/_native.pyd": native,
        "qnnx-0.1.0.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
    }
    rows = []
    for path, blob in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(blob)}")
    rows.append("qnnx-0.1.0.dist-info/RECORD,,")
    wheel = folder / name
    with zipfile.ZipFile(wheel, "w") as z:
        for path, blob in files.items():
            z.writestr(path, blob)
        z.writestr("qnnx-0.1.0.dist-info/RECORD", "\n".join(rows) + "\n")
    return wheel


def check_wheel(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "check-wheel"), "--arch", "aarch64", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def with_machine(data: bytes, machine: int) -> bytes:
    pe = pefile.PE(data=data)
    pe.FILE_HEADER.Machine = machine
    return bytes(pe.write())


def with_import_renamed(data: bytes, old: str, new: str) -> bytes:
    """`data` with the imported DLL `old` renamed to `new` in place (new must not be longer)."""
    assert len(new) <= len(old)
    pe = pefile.PE(data=data)
    entry = next(e for e in pe.DIRECTORY_ENTRY_IMPORT if e.dll.decode().lower() == old.lower())
    pe.set_bytes_at_rva(entry.struct.Name, new.encode() + b"\0" * (len(old) - len(new) + 1))
    return bytes(pe.write())


def test_the_fixtures_pass(tmp_path):
    wheel = make_wheel(tmp_path, (PE / "_native.pyd").read_bytes())
    out = check_wheel(wheel, "--binary", PE / "qnnx.exe")
    assert out.returncode == 0, out.stderr + out.stdout
    assert "file name tags: cp310-abi3-win_arm64" in out.stdout
    assert "_native.pyd: PE machine 0xaa64 (aarch64), DLL" in out.stdout
    assert "qnnx.exe: PE machine 0xaa64 (aarch64), executable" in out.stdout
    assert "python3.dll" in out.stdout and "exports: PyInit__native" in out.stdout
    assert "1 wheel(s) and 1 binary(ies) OK" in out.stdout


@pytest.mark.parametrize("machine, name", [(0x8664, "x86_64"), (0x14C, "x86"), (0x1C4, "ARM Thumb-2")])
def test_a_module_of_another_cpu_fails(tmp_path, machine, name):
    wheel = make_wheel(tmp_path, with_machine((PE / "_native.pyd").read_bytes(), machine))
    out = check_wheel(wheel)
    assert out.returncode != 0, f"{name} module passed:\n{out.stdout}"
    assert f"is PE machine {machine:#x}, expected 0xaa64" in out.stderr


def test_an_executable_of_another_cpu_fails(tmp_path):
    exe = tmp_path / "qnnx.exe"
    exe.write_bytes(with_machine((PE / "qnnx.exe").read_bytes(), 0x8664))
    out = check_wheel("--binary", exe)
    assert out.returncode != 0 and "is PE machine 0x8664, expected 0xaa64" in out.stderr


@pytest.mark.parametrize("dll", ["libunwind.dll", "libc++.dll", "libgcc_s_seh-1.dll", "libwinpthread-1.dll",
                                 "msvcp140.dll", "msvcrt.dll"])
def test_a_module_importing_a_dll_windows_lacks_fails(tmp_path, dll):
    native = with_import_renamed((PE / "_native.pyd").read_bytes(), "api-ms-win-crt-runtime-l1-1-0.dll", dll)
    out = check_wheel(make_wheel(tmp_path, native))
    assert out.returncode != 0, out.stdout
    assert f"imports DLLs a stock Windows 11 ARM64 does not have: ['{dll}']" in out.stderr


@pytest.mark.parametrize("dll", ["libc++.dll", "vcruntime140.dll", "python3.dll"])
def test_an_executable_importing_a_dll_windows_lacks_fails(tmp_path, dll):
    # vcruntime140.dll is allowed in the module (CPython ships it beside python.exe), not here.
    exe = tmp_path / "qnnx.exe"
    exe.write_bytes(with_import_renamed((PE / "qnnx.exe").read_bytes(), "api-ms-win-crt-runtime-l1-1-0.dll", dll))
    out = check_wheel("--binary", exe)
    assert out.returncode != 0, out.stdout
    assert f"does not have: ['{dll}']" in out.stderr or "must not need Python" in out.stderr


def test_a_module_importing_a_versioned_python_fails(tmp_path):
    native = with_import_renamed((PE / "_native.pyd").read_bytes(), "python3.dll", "python3.dl")
    assert check_wheel(make_wheel(tmp_path, native)).returncode != 0
    native = with_import_renamed((PE / "_native.pyd").read_bytes(), "api-ms-win-crt-runtime-l1-1-0.dll",
                                 "python313.dll")
    out = check_wheel(make_wheel(tmp_path, native))
    assert out.returncode != 0 and "an abi3 module imports exactly python3.dll" in out.stderr


def test_a_module_without_its_init_fails(tmp_path):
    data = (PE / "_native.pyd").read_bytes()
    i = data.index(b"PyInit__native\0")
    native = data[:i] + b"PyInit__nativX" + data[i + 14:]
    out = check_wheel(make_wheel(tmp_path, native))
    assert out.returncode != 0 and "does not export PyInit__native" in out.stderr


def test_a_build_path_inside_fails(tmp_path):
    # A panic message's file name as rustc records it without --remap-path-prefix.
    native = (PE / "_native.pyd").read_bytes() + str(REPO / "qnnx-py" / "src" / "lib.rs").encode() + b"\0"
    out = check_wheel(make_wheel(tmp_path, native))
    assert out.returncode != 0 and f"contains the build path '{REPO}'" in out.stderr
    out = check_wheel(make_wheel(tmp_path, (PE / "_native.pyd").read_bytes() + b"/opt/builder/x.rs"),
                      "--build-path", "/opt/builder")
    assert out.returncode != 0 and "contains the build path '/opt/builder'" in out.stderr


def test_a_linux_wheel_name_on_a_windows_module_fails(tmp_path):
    out = check_wheel(make_wheel(tmp_path, (PE / "_native.pyd").read_bytes(),
                                 "qnnx-0.1.0-cp310-abi3-win_amd64.whl"))
    assert out.returncode != 0 and "platform tag win_amd64, expected win_arm64" in out.stderr
