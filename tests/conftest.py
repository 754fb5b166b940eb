import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.kd"))


@functools.cache
def gpu_available() -> bool:
    try:
        import torch
        import cupy
        return torch.cuda.is_available() and cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("KDSL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kdsl-cache"))


def pytest_addoption(parser):
    parser.addoption("--fuzz-examples", type=int, default=2500, metavar="N",
                     help="programs tests/test_fuzz.py generates (default 2500; nightly: 100000)")
