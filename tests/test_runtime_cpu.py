"""The Python API on a machine without a GPU: loading works, calling explains itself."""
import pytest

import kdsl
from kdsl.errors import KdslError, LaunchError, NoGpuError, SourceError

from conftest import ROOT, gpu_available


def test_load_returns_one_callable_per_kernel():
    mod = kdsl.load(ROOT / "samples" / "relpos.kd")
    assert callable(mod.relpos) and "relpos" in dir(mod)
    with pytest.raises(AttributeError, match="no kernel 'nope'"):
        mod.nope


def test_compile_from_text_reports_located_errors():
    with pytest.raises(SourceError) as e:
        kdsl.compile("attention a { q: bf16[B, H, M, D] }", "inline.kd")
    assert str(e.value).startswith("inline.kd:1:11: error: attention kernel 'a' must declare 'k'")


def test_load_missing_file():
    with pytest.raises(KdslError, match="cannot read"):
        kdsl.load("/nonexistent/x.kd")


@pytest.mark.skipif(gpu_available(), reason="checks the no-GPU path")
def test_call_without_gpu_is_a_clear_error():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "relpos.kd")
    q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
    with pytest.raises((NoGpuError, LaunchError)) as e:
        mod.relpos(q, q, q)
    assert "CUDA" in str(e.value) or "GPU" in str(e.value)


def test_not_an_array_is_a_launch_error():
    mod = kdsl.load(ROOT / "samples" / "causal.kd")
    with pytest.raises(LaunchError, match=r"argument 'q': expected a torch tensor or a CuPy array \(or a numpy "
                       r"array, for the CPU interpreter\), got list"):
        mod.causal([1, 2], None, None)


def test_kv_splits_fill_the_sms_only_for_small_item_counts():
    from kdsl.runtime.splitkv import kv_splits
    assert kv_splits(16, 32, 132) == 8        # B=1 H=16 decode, N=4096: 128 CTAs
    assert kv_splits(16, 256, 132) == 8       # N=32k
    assert kv_splits(32, 32, 132) == 4        # GQA H=32
    assert kv_splits(1024, 32, 132) == 1      # batched decode fills the GPU already
    assert kv_splits(16, 1, 132) == 1         # one kv tile: nothing to split
    assert kv_splits(100, 32, 132) == 1       # over half the SMs busy
    for items in range(1, 70):
        for tiles in range(1, 40):
            s = kv_splits(items, tiles, 132)
            chunk = -(-tiles // s)
            assert 1 <= s <= tiles and (s - 1) * chunk < tiles  # no range is empty
