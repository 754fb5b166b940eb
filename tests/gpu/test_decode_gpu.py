"""Decode shapes on the Hopper kernel: the keys are split over CTAs (runtime/splitkv.py) and
the splits' results merged by their lse. Checked against the float64 reference, with lse,
GQA, masks and a ragged last range, and under CUDA-graph capture."""
import pytest

import kdsl
from kdsl import reference
from kdsl.runtime import compiler
from kdsl.testing import ATTENTION_TOL, attention_inputs, rel_frobenius

from conftest import ROOT

pytestmark = pytest.mark.gpu

LSE_SOURCE = """
attention relpos_lse {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = s + 0.01 * float(i - j)
    mask(b, h, i, j) = j < N - 3 * h
}
"""


@pytest.mark.parametrize("shape", [(1, 16, 16, 1, 4096, 128), (1, 32, 8, 1, 4099, 128), (2, 8, 8, 3, 1000, 64),
                                   (1, 4, 4, 1, 32768, 64), (1, 2, 1, 1, 129, 128)], ids=lambda s: "x".join(map(str, s)))
def test_split_kv_matches_reference_with_lse(shape):
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(LSE_SOURCE)
    kir = mod.ir["relpos_lse"]
    B, H, Hkv, M, N, D = shape
    gen = torch.Generator(device="cuda").manual_seed(sum(shape))
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
    out, lse = mod.relpos_lse(q, k, v)
    ref, ref_lse = reference.attention(kir, q, k, v, caps)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.allclose(lse[finite], ref_lse[finite].float(), atol=2e-3, rtol=1e-3)


UNMASKED_LSE = """
attention bias_lse {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = s + 0.01 * float(i - j)
}
"""


@pytest.mark.parametrize("shape", [(1, 16, 16, 1, 4096, 128), (1, 32, 8, 1, 4099, 128), (1, 4, 4, 65, 999, 128),
                                   (2, 8, 8, 3, 1000, 64)], ids=lambda s: "x".join(map(str, s)))
def test_split_kv_items_merge_themselves_call_after_call_and_across_streams(shape, monkeypatch):
    """Without a mask, a split-KV launch's items merge themselves (the warpgroup that finishes an
    item's last split merges its rows and zeroes its count: Plan.self_merge): three calls in a
    row on one stream, then two on another, each on fresh inputs, match the reference, and no
    combine kernel runs. One row an item, GQA's four, two consumer warpgroups (65 rows)."""
    torch = pytest.importorskip("torch")
    from kdsl.runtime import splitkv
    combined = []
    monkeypatch.setattr(splitkv.CombineLaunch, "run", lambda self, *a: combined.append(a))
    mod = kdsl.compile(UNMASKED_LSE)
    kern, kir = mod.bias_lse, mod.ir["bias_lse"]
    B, H, Hkv, M, N, D = shape
    side = torch.cuda.Stream()
    for n, stream in enumerate([torch.cuda.current_stream()] * 3 + [side] * 2):
        gen = torch.Generator(device="cuda").manual_seed(sum(shape) + n)
        with torch.cuda.stream(stream):
            q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
            out, lse = kern(q, k, v)
        torch.cuda.synchronize()
        ref, ref_lse = reference.attention(kir, q, k, v, caps)
        assert rel_frobenius(out, ref) <= ATTENTION_TOL, n
        assert torch.allclose(lse, ref_lse.float(), atol=2e-3, rtol=1e-3), n
    plan = next(iter(kern._plans.values()))
    if plan.loaded is not None and torch.cuda.get_device_capability()[0] == 9:
        assert plan.combine is not None and plan.self_merge and not combined


def _calls_match_the_reference(kern, kir, shape, seeds):
    """One call per seed, each on fresh inputs and into an out filled with NaN, each checked
    (out and lse) against the float64 reference."""
    import torch
    B, H, Hkv, M, N, D = shape
    for seed in seeds:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D, generator=gen)
        out = torch.full_like(q, float("nan"))
        _, lse = kern(q, k, v, out=out)
        ref, ref_lse = reference.attention(kir, q, k, v, caps)
        assert rel_frobenius(out, ref) <= ATTENTION_TOL, seed
        assert torch.allclose(lse, ref_lse.float(), atol=2e-3, rtol=1e-3), seed


@pytest.mark.parametrize("shape", [(1, 2, 2, 200, 200, 256), (1, 4, 4, 130, 520, 128), (1, 16, 16, 1, 4096, 256),
                                   (1, 2, 2, 1000, 2048, 64), (1, 4, 4, 2048, 2048, 128)],
                         ids=lambda s: "x".join(map(str, s)))
def test_self_merge_waits_for_every_row_of_each_split(shape):
    """Items that merge themselves merge only whole splits: many calls, each on fresh inputs
    and into an out filled with NaN, each checked, so that a merge of stale, missing or
    half-written partial rows shows up. (At head dim 256 this failed while a spill fallback's
    narrower tile left a key range empty; the warpgroup's barrier before it counts a split
    keeps the rows its other threads store ahead of the count.) Whole items of 128 and 192
    rows: each warp merges 16 rows, merge_rows() at a time (attention_wgmma.cuh), the last
    tile partial at 1000 rows."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(UNMASKED_LSE)
    kern, kir = mod.bias_lse, mod.ir["bias_lse"]
    _calls_match_the_reference(kern, kir, shape, [1000 * n + sum(shape) for n in range(25)])
    plan = next(iter(kern._plans.values()))
    if plan.loaded is not None and torch.cuda.get_device_capability()[0] == 9:
        assert plan.self_merge


def test_split_count_follows_the_spill_fallback_tile(monkeypatch):
    """Regression: the key ranges were counted in the trial tile's kv tiles (80 keys at head
    dim 256: 3 for N = 200) while the kernel built with the fallback's (64 keys: 4 tiles, 2 a
    range), so the last range was empty, never counted by the items that merge themselves,
    and rows stayed unwritten (inf and NaN in tests/gpu/test_streaming_gpu.py). Here every
    trial tile is taken to spill, so the fallback is built."""
    torch = pytest.importorskip("torch")
    from kdsl.runtime import compiler
    monkeypatch.setattr(compiler, "spilled", lambda built: True)  # every trial tile "spills"
    mod = kdsl.compile(UNMASKED_LSE)
    kern, kir = mod.bias_lse, mod.ir["bias_lse"]
    D = 256
    _calls_match_the_reference(kern, kir, (1, 2, 2, 200, 200, D), range(77, 82))
    if torch.cuda.get_device_capability()[0] == 9:
        built = next(iter(kern._loaded.values()))[0].kernel
        assert kern._lowered(D, D).attr("spill_fallback") and built.attr("tile_n") < kern._lowered(D, D).attr("tile_n")


def test_split_and_other_calls_each_load_their_own_program():
    """Split-KV calls run a program of their own (with the combine kernel); every other call
    runs the one without them (runtime/programs.py)."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(LSE_SOURCE)
    kern, kir = mod.relpos_lse, mod.ir["relpos_lse"]
    # (items of 192 or 128 rows: >= 128, 4, >= 128 on a GPU of 132 SMs; splits need < 66)
    for B, H, M, N, split in ((4, 16, 300, 700, False), (1, 4, 1, 4096, True), (8, 16, 129, 257, False)):
        q, k, v, caps = attention_inputs(kir, B, H, H, M, N, 64)
        out, lse = kern(q, k, v)
        ref, ref_lse = reference.attention(kir, q, k, v, caps)
        assert rel_frobenius(out, ref) <= ATTENTION_TOL
        finite = torch.isfinite(ref_lse)
        assert torch.equal(torch.isfinite(lse), finite)
        assert torch.allclose(lse[finite], ref_lse[finite].float(), atol=2e-3, rtol=1e-3)
        plan = next(reversed(kern._plans.values()))
        assert (plan.combine is not None) == split
    assert {key[3] for key in kern._loaded} == {None, 1}  # the warpgroups: the tiling's, one (M = 1)


@pytest.mark.parametrize("name", ["relpos", "sliding_window", "document_mask"])
def test_split_kv_samples(name):
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
    kir = mod.ir[name]
    gen = torch.Generator(device="cuda").manual_seed(5)
    # (masks with j <= i keep only key 0 for the one query: every other key range is empty)
    q, k, v, caps = attention_inputs(kir, 1, 16, 16, 1, 5000, 128, generator=gen)
    out = getattr(mod, name)(q, k, v, **caps)
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


def test_chunked_prefill_runs_the_split_program_without_a_spill():
    """relpos at D=128 with few q tiles and many keys: two consumer warpgroups, keys split over
    CTAs. That program spilled in its kv loop at the wide 176-key tile, with the slope step and
    without it, so compiler.build drops the step and then the wide tile, and builds 128 keys with
    the step (tests/test_codegen.py); the every-call program keeps 176 keys and the step. Both
    match the reference."""
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "relpos.kd")
    kern, kir = mod.relpos, mod.ir["relpos"]
    gen = torch.Generator(device="cuda").manual_seed(11)
    for B, H, M, N in ((1, 16, 256, 6000), (2, 16, 1000, 1000)):
        q, k, v, caps = attention_inputs(kir, B, H, H, M, N, 128, generator=gen)
        out = kern(q, k, v, **caps)
        ref, _ = reference.attention(kir, q, k, v, caps)
        assert rel_frobenius(out, ref) <= ATTENTION_TOL, (B, H, M, N)
    if torch.cuda.get_device_capability()[0] == 9:
        tiles = {key[4].split_kv: (built.kernel.attr("tile_n"), built.kernel.attr("slope_step"),
                                   compiler.spilled(built)) for key, (built, _) in kern._loaded.items()}
        assert tiles == {True: (128, 1, False), False: (176, 1, False)}, tiles


def test_split_kv_is_captured_in_a_cuda_graph():
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / "relpos.kd")
    kir = mod.ir["relpos"]
    q, k, v, caps = attention_inputs(kir, 1, 16, 16, 1, 8192, 128)
    out = torch.empty_like(q)
    mod.relpos(q, k, v, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mod.relpos(q, k, v, out=out)
    for x in (q, k, v):
        x.copy_(torch.randn(x.shape, device="cuda").bfloat16())
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref, _ = reference.attention(kir, q, k, v, {})
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


FOLDABLE = """
attention capped {
    q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]
    lse: f32[B, H, M]
    score(s, b, h, i, j) = 20.0 * tanh(s / 20.0)
    mask(b, h, i, j) = j < N - 5
}
"""


@pytest.mark.parametrize("shape", [(1, 32, 8, 1, 8192, 128), (2, 8, 2, 3, 1000, 64), (1, 6, 1, 100, 777, 128),
                                   (3, 4, 2, 129, 300, 64)], ids=lambda s: "x".join(map(str, s)))
def test_gqa_heads_folded_into_rows_match_reference(shape):
    """A score and mask blind to the query row and head: the query heads of a k/v head run as
    rows of one problem (decode fills a q tile with them). Any M, ragged tiles, lse."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(FOLDABLE)
    kir = mod.ir["capped"]
    B, H, Hkv, M, N, D = shape
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D)
    out, lse = mod.capped(q, k, v)
    ref, ref_lse = reference.attention(kir, q, k, v, caps)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    assert torch.allclose(lse.double(), ref_lse, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("shape, consumers", [((1, 16, 16, 1, 4096, 128), 1), ((1, 32, 8, 1, 8192, 128), 1),
                                              ((2, 4, 1, 16, 700, 64), 1), ((2, 4, 1, 17, 700, 64), 2),
                                              ((1, 4, 4, 64, 999, 128), 1), ((1, 4, 4, 65, 999, 128), 2)],
                         ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else f"c{s}")
def test_few_query_rows_run_one_consumer_warpgroup(shape, consumers):
    """Work items of at most 64 query rows (M, times the folded query heads under GQA) run
    the Hopper kernel with one consumer warpgroup; more rows keep the default tile (two: at
    head dims up to 64 a masked transcendental score keeps two, tiling.tile_shape_hints).
    All are exact."""
    torch = pytest.importorskip("torch")
    mod = kdsl.compile(FOLDABLE)
    kir = mod.ir["capped"]
    B, H, Hkv, M, N, D = shape
    q, k, v, caps = attention_inputs(kir, B, H, Hkv, M, N, D)
    out, lse = mod.capped(q, k, v)
    plan = next(iter(mod.capped._plans.values()))
    if plan.loaded is not None and torch.cuda.get_device_capability()[0] == 9:
        built = [b for b, loaded in mod.capped._loaded.values() if loaded is plan.loaded][0]
        assert built.kernel.attr("consumers") == consumers
    ref, ref_lse = reference.attention(kir, q, k, v, caps)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
    assert torch.allclose(lse.double(), ref_lse, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("name, B, H, M, consumers", [
    ("plain", 2, 4, 256, 2), ("plain", 4, 8, 1024, 3), ("causal", 2, 4, 1000, 2), ("causal", 2, 4, 2048, 3),
    ("causal", 2, 4, 200, 2),
    ("plain", 2, 4, 1024, 2)])  # 48 items of 192 rows would split the keys: two warpgroups, 1.5x the items
def test_short_rows_run_two_consumer_warpgroups(name, B, H, M, consumers):
    """At head dim 64 (three consumer warpgroups by default) short rows that 192-row tiles
    would pad, or items too few to fill the GPU without splitting the keys, run two
    (geometry.forward_query_warpgroups); both programs are exact."""
    torch = pytest.importorskip("torch")
    mod = kdsl.load(ROOT / "samples" / f"{name}.kd")
    kern, kir = getattr(mod, name), mod.ir[name]
    q, k, v, caps = attention_inputs(kir, B, H, H, M, M, 64)
    out = kern(q, k, v)
    if torch.cuda.get_device_capability()[0] == 9:
        plan = next(iter(kern._plans.values()))
        built = [b for b, loaded in kern._loaded.values() if loaded is plan.loaded][0]
        assert built.kernel.attr("consumers") == consumers
    ref, _ = reference.attention(kir, q, k, v, caps)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL


def test_fixed_consumers_are_kept_for_decode():
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Hopper kernel's warpgroups")
    plain = kdsl.load(ROOT / "samples" / "plain.kd").plain
    from kdsl.runtime.attention_launch import AttentionKernel
    fixed = AttentionKernel(plain.ir.with_attrs(consumers=2))
    q, k, v, caps = attention_inputs(plain.ir, 1, 8, 8, 1, 2048, 128)
    out = fixed(q, k, v)
    assert all(b.kernel.attr("consumers") == 2 for b, _ in fixed._loaded.values())
    ref, _ = reference.attention(plain.ir, q, k, v, caps)
    assert rel_frobenius(out, ref) <= ATTENTION_TOL
