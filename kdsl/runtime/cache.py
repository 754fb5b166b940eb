"""Compiled-kernel cache: in memory, and on disk under $KDSL_CACHE_DIR (default
~/.cache/kdsl; kdsl/cachefiles.py). Keys hash the generated source, the NVRTC options and
version, and kdsl's own templates and headers. Entries are written atomically (temp file + rename); an entry
whose checksum does not match is treated as missing and rebuilt."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..cachefiles import atomic_write, cache_dir
from .nvrtc import Compiled

_MEMORY: dict[str, Compiled] = {}


def cubin_path(key: str) -> Path:
    return cache_dir() / f"{key}.cubin"


def get(key: str) -> Compiled | None:
    if key in _MEMORY:
        return _MEMORY[key]
    try:
        meta = json.loads((cache_dir() / f"{key}.json").read_text())
        cubin = cubin_path(key).read_bytes()
        ptx = (cache_dir() / f"{key}.ptx").read_text()
    except (OSError, ValueError):
        return None
    if meta.get("cubin_sha256") != hashlib.sha256(cubin).hexdigest() or \
            meta.get("ptx_sha256") != hashlib.sha256(ptx.encode()).hexdigest():
        return None  # torn or corrupted entry: rebuild
    _MEMORY[key] = Compiled(ptx, cubin, meta.get("log", ""))
    return _MEMORY[key]


def put(key: str, compiled: Compiled) -> None:
    _MEMORY[key] = compiled
    meta = {"cubin_sha256": hashlib.sha256(compiled.cubin).hexdigest(),
            "ptx_sha256": hashlib.sha256(compiled.ptx.encode()).hexdigest(), "log": compiled.log}
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        # Payload first, metadata last: a reader that sees the metadata sees whole payloads.
        atomic_write(d / f"{key}.cubin", compiled.cubin)
        atomic_write(d / f"{key}.ptx", compiled.ptx.encode())
        atomic_write(d / f"{key}.json", json.dumps(meta).encode())
    except OSError:
        pass  # a read-only or full disk costs a recompile next time, nothing more


def clear_memory() -> None:
    _MEMORY.clear()
