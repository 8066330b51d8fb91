#!/usr/bin/env bash
# Rebuilds the two Windows ARM64 fixtures of tests/python/test_check_wheel.py with Zig (PyPI
# `ziglang`): _native.pyd, a DLL exporting PyInit__native and importing python3.dll, KERNEL32 and
# the UCRT, and qnnx.exe, an executable importing KERNEL32 and the UCRT. Both pass
# scripts/check-wheel; the test patches copies of them to make it fail.
set -euo pipefail
cd "$(dirname "$0")"
zig() { python3 -m ziglang "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
zig dlltool -m arm64 -d python3.def -l "$tmp/libpython3.a"
zig cc -target aarch64-windows-gnu -shared -O2 -s -o _native.pyd native.c "$tmp/libpython3.a"
zig cc -target aarch64-windows-gnu -O2 -s -o qnnx.exe main.c
rm -f native.lib
