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
            # launch.py decides to split on the lowered tile and counts ranges on the built one,
            # which a spill fallback may have made narrower (more kv tiles): still split
            if s > 1:
                assert all(kv_splits(items, more, 132) > 1 for more in range(tiles, 2 * tiles + 2))


def test_arg_pack_pointer_slots_are_one_array_the_parameters_point_into():
    import ctypes
    from kdsl.runtime.driver import ArgPack
    pack = ArgPack(["tmap", "ptr", "i32", "ptr", "f32", "ptr"], [None, None, 7, None, 0.5, None], [3, 1, 5])
    pack.pointers[:] = [0x3000, 0x1000, 0x5000]  # in pointer_slots order: parameters 3, 1, 5
    as_u64 = lambda i: ctypes.c_uint64.from_address(pack.params[i]).value
    assert (as_u64(1), as_u64(3), as_u64(5)) == (0x1000, 0x3000, 0x5000)
    assert ctypes.c_int32.from_address(pack.params[2]).value == 7
    with pytest.raises(ValueError):  # a call passing the wrong number of pointers is refused
        pack.pointers[:] = [1, 2]


def test_plan_re_encodes_tensor_maps_only_when_their_pointers_change():
    from kdsl.runtime.launch import Plan

    class Map:
        def __init__(self):
            self.encoded = []

        def bind(self, p):
            self.encoded.append(p)

    maps = (Map(), Map(), Map())
    plan = Plan(None, (), (), None, "torch", 0, (1,), "bf16", maps=maps, map_sources=(0, 1, 2))
    plan._bind_maps([10, 20, 30, 99])
    plan._bind_maps([10, 20, 30, 98])  # only a non-map pointer changed
    assert [m.encoded for m in maps] == [[10], [20], [30]]
    plan._bind_maps([10, 21, 30, 98])
    assert [m.encoded for m in maps] == [[10, 10], [20, 21], [30, 30]]


def test_launcher_builds_its_configuration_once_with_the_stream_left_per_launch():
    from kdsl.runtime.driver import CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, Launcher
    plain = Launcher(0x1234, (132, 1, 1), (384, 1, 1), 200000)
    cfg = plain.config
    assert (list(cfg.grid), list(cfg.block), cfg.shared, cfg.num_attrs) == ([132, 1, 1], [384, 1, 1], 200000, 0)
    assert not cfg.stream and not cfg.attrs
    dependent = Launcher(0x1234, (2, 1, 1), (256, 1, 1), 0, dependent=True)
    assert dependent.config.num_attrs == 1 and dependent.config.attrs
    assert dependent._attr.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION and dependent._attr.value[0] == 1


def test_flash_attention_layout_is_warned_at_the_callers_line():
    """q, k, v in [batch, length, heads, head dim] (FlashAttention's layout) run as 300 heads of 4
    rows: a silent wrong answer but for the warning, which points at the user's call. Right
    layouts, decode's many heads of one row included, do not warn."""
    import warnings
    torch = pytest.importorskip("torch")
    mod = kdsl.compile("attention t { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                       "mask(b, h, i, j) = j <= i }", "t.kd", interpret=True)
    flash = torch.randn(1, 300, 4, 16, dtype=torch.bfloat16)
    with pytest.warns(kdsl.LayoutWarning, match=r"q has 300 heads of 4 rows each.*x.transpose\(1, 2\)") as w:
        mod.t(flash, flash, flash)
    assert w[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for shape in ((1, 4, 300, 16), (2, 32, 1, 16), (1, 256, 8, 16)):
            x = torch.randn(*shape, dtype=torch.bfloat16)
            mod.t(x, x, x)


def test_an_output_sharing_memory_with_an_input_is_refused():
    """out= or lse= over an input's memory (out=v: other CTAs would read rows one has written)
    is refused by name on the interpreter as on the GPU; separate buffers, lse beside out in one
    allocation included, run."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile("attention t { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                       "lse: f32[B, H, M]\nmask(b, h, i, j) = j <= i }", "t.kd", interpret=True)
    q, k, v = (torch.randn(1, 2, 30, 16, dtype=torch.bfloat16) for _ in range(3))
    for given, needle in ((dict(out=v), "out= shares memory with v"), (dict(out=q), "out= shares memory with q"),
                          (dict(lse=k.view(-1).view(torch.float32)[:60].view(1, 2, 30)), "lse= shares memory with k")):
        with pytest.raises(LaunchError, match=needle):
            mod.t(q, k, v, **given)
    buf = torch.empty(q.numel() * 2, dtype=torch.bfloat16)
    out, lse = buf[:q.numel()].view_as(q), buf[q.numel():].view(torch.float32)[:60].view(1, 2, 30)
    with pytest.raises(LaunchError, match="lse= shares memory with out"):
        mod.t(q, k, v, out=out, lse=buf[:120].view(torch.float32).view(1, 2, 30))
    got, got_lse = mod.t(q, k, v, out=out, lse=lse)
    want, want_lse = mod.t(q, k, v)
    assert torch.equal(got, want) and torch.equal(got_lse, want_lse)


def test_a_kernel_says_how_to_call_it():
    """help(mod.NAME) / IPython's mod.NAME? show the arguments in order with their declarations."""
    mod = kdsl.load(ROOT / "samples" / "alibi.kd", interpret=True)
    doc = mod.alibi.__doc__
    assert doc.startswith("alibi(q, k, v, slopes, *, out=None, scale=None)\n"), doc
    assert "    slopes: f32[H]\n" in doc and "Returns out: bf16[B, H, M, D]." in doc
    gemm = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd", interpret=True).fp8_grouped_masked.__doc__
    assert gemm.startswith("fp8_grouped_masked(a, a_scale, b, b_scale, count, *, out=None)\n"), gemm
    assert "    count: i32[G]\n" in gemm
