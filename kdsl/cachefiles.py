"""Where kdsl keeps what it computed once (compiled kernels; the grammar's parse tables and
the compiled templates), and how it writes there: $KDSL_CACHE_DIR (default ~/.cache/kdsl),
keys that hash their inputs, files written atomically (temp file + rename), so a reader
never sees half of one."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("KDSL_CACHE_DIR") or Path.home() / ".cache" / "kdsl")


def kept_dirs(package_dir: Path) -> list[Path]:
    """Where what kdsl derives from its own files (parse tables, compiled templates) is kept,
    in order: beside them, as Python keeps bytecode in __pycache__, else in the cache
    directory (a read-only installation)."""
    return [package_dir / "__pycache__", cache_dir()]


def make_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\x00")
    return h.hexdigest()[:32]


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
