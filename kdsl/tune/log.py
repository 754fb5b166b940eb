"""The tuning log: JSON Lines, one object per proposal, appended and flushed as each is
judged, so an interrupted run loses nothing and a later run resumes from it. Non-finite
numbers are written as strings ("inf"), keeping every line standard JSON."""
from __future__ import annotations

import json
import math
from pathlib import Path


class Log:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._entries: list[dict] = []
        self.unreadable = 0  # lines that are not JSON objects (a run killed mid-write)
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    self.unreadable += 1
                    continue
                if isinstance(entry, dict) and isinstance(entry.get("verdict"), str):
                    self._entries.append(entry)
                else:
                    self.unreadable += 1
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def entries(self, kernel: str, digest: str) -> list[dict]:
        """Earlier entries for this kernel of this very source."""
        return [e for e in self._entries if e.get("kernel") == kernel and e.get("source_sha256") == digest]

    def append(self, entry: dict) -> None:
        self._entries.append(entry)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(_clean(entry), allow_nan=False) + "\n")
            f.flush()


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x
