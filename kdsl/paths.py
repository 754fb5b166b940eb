"""Where kdsl keeps files between runs: $KDSL_CACHE_DIR, default ~/.cache/kdsl (a directory
of the user's own, unlike the shared temp directory)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("KDSL_CACHE_DIR") or Path.home() / ".cache" / "kdsl")
