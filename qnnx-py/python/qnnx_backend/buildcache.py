"""Finished build outputs (saved models, context binaries) kept under a key of what made them,
so that a killed or repeated build takes them instead of compiling again: the per-shard cache of
LLM artifact builds (``llm/shards.py``) and the shared cache of build matrices (``matrix.py``).
Imports neither torch nor the native module.

An entry is ``<dir>/<key[:2]>/<key>.qnnx`` and ``<key>.json`` (what the build said, with the
file's size and sha256). ``commit`` writes the file to a temporary name, takes its sha256,
renames it into place, then writes the description the same way: the description is the commit
mark, so an entry is either whole or absent, whenever the writer is killed. ``get`` checks the
size and sha256 before handing an entry out and removes one that fails (a file damaged on disk,
or cut short by a power loss after the renames)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable, Optional


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def key_of(content: bytes, identity: dict) -> str:
    """The key of ``content`` built as ``identity`` says (JSON-able: name, target, options,
    QNN build, qnnx version)."""
    h = hashlib.sha256(content)
    h.update(json.dumps(identity, sort_keys=True).encode())
    return h.hexdigest()


def write_json(path: Path, value: dict) -> None:
    """``value`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


class BuildCache:
    def __init__(self, folder: os.PathLike | str):
        self.dir = Path(folder)

    def entry(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.qnnx"

    def temporary(self, key: str) -> Path:
        """Where a writer puts the entry's file before ``commit``."""
        e = self.entry(key)
        e.parent.mkdir(parents=True, exist_ok=True)
        return e.with_name(f"{e.name}.{os.getpid()}.tmp")

    def commit(self, key: str, tmp: Path, description: dict) -> dict:
        """Moves ``tmp`` into place as entry ``key`` and writes its description (with size and
        sha256), last."""
        entry = self.entry(key)
        description = {**description, "sha256": sha256_file(tmp), "size": tmp.stat().st_size}
        os.replace(tmp, entry)
        write_json(entry.with_suffix(".json"), description)
        return description

    def get(self, key: str, say: Callable[[str], None] = lambda _: None) -> Optional[dict]:
        """The entry's description if it is complete and intact, else ``None`` (a damaged one
        is removed, with one line to ``say``)."""
        entry = self.entry(key)
        meta = entry.with_suffix(".json")
        if not meta.exists():
            return None
        try:
            d = json.loads(meta.read_text())
            ok = entry.stat().st_size == d["size"] and sha256_file(entry) == d["sha256"]
        except (OSError, ValueError, KeyError):
            ok = False
        if not ok:
            say(f"cache entry {entry} is damaged or incomplete: building it again")
            meta.unlink(missing_ok=True)
            entry.unlink(missing_ok=True)
            return None
        return d


def place(entry: Path, out: Path) -> None:
    """A cache entry as an output file: a hard link (entries are replaced by rename, never
    written in place), else a copy."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    try:
        os.link(entry, out)
    except OSError:
        shutil.copyfile(entry, out)
