"""Helpers the tools/dev scripts share: NVRTC defines for A/B builds of one kernel source, and
bench/launch_overhead.py's host timer."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class extra_options:
    """NVRTC options added to every kernel built inside the block (the build's cache key
    includes them, so the variants never share a cubin)."""

    def __init__(self, options):
        self.options = list(options)

    def __enter__(self):
        from kdsl.runtime import nvrtc
        self.base = base = nvrtc.default_options
        nvrtc.default_options = lambda *a: base(*a) + self.options

    def __exit__(self, *exc):
        from kdsl.runtime import nvrtc
        nvrtc.default_options = self.base


def host_us(fn, n=2000, per=200) -> float:
    """bench/launch_overhead.py's median host microseconds per call (needs torch and a GPU)."""
    spec = importlib.util.spec_from_file_location("launch_overhead", ROOT / "bench" / "launch_overhead.py")
    lo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lo)
    return lo.host_us(fn, n, per)
