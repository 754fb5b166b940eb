import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.kd"))


@functools.cache
def dev_tool(name: str):
    """tools/dev/NAME.py as a module (registered under its name: a dataclass in it looks itself up)."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "dev" / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lowered(text: str, d: int = 64, **attrs):
    """The first kernel of a program text, lowered for sm_90a at head dim d (attrs fixed first)."""
    from kdsl.grammar import parse
    from kdsl.passes import pipeline
    from kdsl.passes.target import get_target
    k = pipeline.check(parse(text, "t.kd"))[0]
    return pipeline.lower(k.with_attrs(**attrs) if attrs else k, get_target("sm_90a"), d)


def assert_rows_close(got, ref, label: str, tol: float = 2e-2) -> None:
    """Every output row within tol of the float64 reference (relative to the row's norm, at
    least 1e-3): a tile that mis-kept some keys is wrong in a few rows only."""
    import torch
    row_err = (got.double() - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-3)
    worst = torch.nonzero(row_err == row_err.max())[0].tolist()
    assert row_err.max() <= tol, f"{label}: row {worst} rel err {row_err.max():.3e}"


def assert_summarised_call_matches(mod, name: str, q, k, v, caps: dict, label) -> None:
    """mod.NAME built with a whole-block tile summary: its output against the float64 reference,
    and a summary made ahead of the call (tile_summary=) giving the same output bit for bit."""
    import torch
    from kdsl import ir, reference
    from kdsl.passes import mask_analysis
    from kdsl.testing import ATTENTION_TOL, rel_frobenius
    fn = getattr(mod, name)
    out = fn(q, k, v, **caps)
    low = next(iter(fn._loaded.values()))[0].kernel
    assert "tile" in {ir.TILE_REDUCTIONS[s.op][0] for s in mask_analysis.summary_slots(low)}, \
        "the kernel was not built with a whole-block summary"
    ref, _ = reference.attention(mod.ir[name], q, k, v, caps)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL, label
    summary = fn.tile_summary(q, k, v, **caps)
    assert torch.equal(fn(q, k, v, **caps, tile_summary=summary), out), label


def assert_index_verdict(k, dims: dict, verdict: str | None) -> None:
    """A call's capture indices proved in bounds (verdict None) or refused with the verdict's text
    (runtime/bounds.py check_capture_indices, the kernel named "t")."""
    import re

    from kdsl.errors import LaunchError
    from kdsl.runtime.bounds import check_capture_indices
    if verdict is None:
        check_capture_indices(k, dims, "t")
    else:
        with pytest.raises(LaunchError, match=re.escape(verdict)):
            check_capture_indices(k, dims, "t")


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
