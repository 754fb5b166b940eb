"""Streamed captures (passes/streaming.py): which tensor the score or the mask reads at
[..., q, kv] alone, whether tiling keeps its ring of tiles, and what the two programs do with it: the
streamed one copies it by TMA and reads it from shared memory (no global load left), the
per-element one (KDSL_STREAM_CAPTURES=0, for tensors TMA cannot read) loads it."""
import pytest

from kdsl.errors import KdslError
from kdsl.grammar import parse
from kdsl import ir
from kdsl.passes import mask_analysis, pipeline, streaming, tiling
from kdsl.passes.target import get_target
from kdsl.runtime.compiler import build
from kdsl.runtime.programs import Program
from kdsl.sass import find_cuobjdump, inspect


def kernel(score: str | None, capture: str = "bias: bf16[M, N]", extra: str = ""):
    score_line = f"score(s, b, h, i, j) = {score}" if score else ""
    src = f"""attention t {{
    q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
    {capture}
    {score_line}
    {extra}
}}"""
    return pipeline.check(parse(src, "<test>"))[0]


def lowered(k, d=128, arch="sm_90a"):
    return pipeline.lower(k, get_target(arch), d)


@pytest.mark.parametrize("score,capture", [
    ("s + bias[i, j]", "bias: bf16[M, N]"),
    ("s + bias[b, h, i, j]", "bias: bf16[B, H, M, N]"),
    ("s + 0.5 * bias[h, i, j] * bias[h, i, j]", "bias: f16[H, M, N]"),
    ("s + bias[h % 2, i, j]", "bias: f32[2, M, N]"),
    ("tanh(s + bias[i, j])", "bias: bf16[M, N]"),
    ("s + float(bias[i, j])", "bias: i32[M, N]"),                 # an integer element arrives as an int
    ("s + 0.1 * float(bias[b, i, j])", "bias: u8[B, M, N]"),
    ("s + table[h, bias[i, j]]", "bias: i32[M, N]; table: f32[H, 8]"),  # ... exact as an index
])
def test_a_tensor_read_at_the_element_alone_is_the_candidate(score, capture):
    assert streaming.candidate(lowered(kernel(score, capture))) == "bias"


@pytest.mark.parametrize("score,capture", [
    ("s + bias[j, i]", "bias: bf16[N, M]"),                       # transposed: a tile is not one box
    ("s + bias[i, j + 1]", "bias: bf16[M, N]"),                   # shifted
    ("s + bias[i, j] + bias[i, 0]", "bias: bf16[M, N]"),          # read at two indices
    ("s + bias[i % 2, i, j]", "bias: bf16[2, M, N]"),             # leading index per row
    ("s + bias[i - j + N]", "bias: bf16[M]"),                     # relative position: 1-D table
])
def test_other_reads_stay_per_element(score, capture):
    k = lowered(kernel(score, capture))
    assert streaming.candidate(k) is None and k.attr("stream_capture") is None


@pytest.mark.parametrize("mask,capture", [
    ("keep[b, i, j]", "keep: bool[B, M, N]"),                     # torch's boolean attn_mask
    ("j <= i and keep[b, h, i, j] != 0", "keep: u8[B, H, M, N]"),
    ("keep[i, j] > 0 or j == 0", "keep: i8[M, N]"),
    ("keep[h, i, j] != 0", "keep: i32[H, M, N]"),
    ("keep[i, j] > 0.0", "keep: f32[M, N]"),
])
def test_a_mask_tensor_read_at_the_element_alone_is_the_candidate(mask, capture):
    assert streaming.candidate(lowered(kernel(None, capture, f"mask(b, h, i, j) = {mask}"))) == "keep"


@pytest.mark.parametrize("score,mask,capture", [
    (None, "keep[b, j, i]", "keep: bool[B, N, M]"),                  # transposed
    (None, "keep[b, i, max(j - 1, 0)]", "keep: bool[B, M, N]"),       # shifted (token_tree's ancestors)
    (None, "keep[b, i, j] and keep[b, i, 0]", "keep: bool[B, M, N]"),  # read at two indices
    ("s + keep[i, j + 1]", "keep[i, j] > 0.0", "keep: bf16[M, N]"),   # the score reads it elsewhere
])
def test_other_mask_reads_stay_per_element(score, mask, capture):
    k = lowered(kernel(score, capture, f"mask(b, h, i, j) = {mask}"))
    assert streaming.candidate(k) is None and k.attr("stream_capture") is None


@pytest.mark.parametrize("score,mask,capture", [
    ("s + bias[i, j]", "bias[i, j] > -10.0", "bias: bf16[M, N]"),
    ("s + float(bias[i, j])", "bias[i, j] != 0", "bias: i32[M, N]"),
])
def test_a_tensor_the_score_and_the_mask_read_at_the_element_is_streamed_for_both(score, mask, capture):
    k = lowered(kernel(score, capture, f"mask(b, h, i, j) = {mask}"))
    assert (k.attr("stream_capture"), k.attr("mask_stream_capture")) == ("bias", None)
    assert streaming.read_by(k, "score_log2") and streaming.read_by(k, "mask")
    assert streaming.mask_reads(k) == ("bias",)


@pytest.mark.parametrize("score,mask,capture,rings", [
    # the score's tensor and a second one the mask alone reads: a ring each
    ("s + 0.1 * float(bucket[b, i, j])", "keep[b, i, j]", "bucket: u8[B, M, N]; keep: bool[B, M, N]",
     ("bucket", "keep")),
    ("s + bias[b, h, i, j]", "j <= i and keep[h, i, j] != 0", "bias: bf16[B, H, M, N]; keep: i32[H, M, N]",
     ("bias", "keep")),
    # the mask reads the score's tensor too, and another: it reads both rings
    ("s + bias[i, j]", "bias[i, j] > 0.0 and keep[i, j]", "bias: bf16[M, N]; keep: bool[M, N]", ("bias", "keep")),
    # the mask's second tensor is read by the score too, elsewhere: not streamed
    ("s + bias[i, j] + float(keep[i, 0])", "keep[i, j]", "bias: bf16[M, N]; keep: bool[M, N]", ("bias", None)),
    # no score tensor: a mask of two dense tensors, a ring each
    ("s", "keep[i, j] and other[h, i, j] != 0", "keep: bool[M, N]; other: u8[H, M, N]", ("keep", "other")),
])
def test_a_second_ring_streams_the_tensor_the_mask_alone_reads(score, mask, capture, rings):
    k = lowered(kernel(score, capture, f"mask(b, h, i, j) = {mask}"))
    assert (k.attr("stream_capture"), k.attr("mask_stream_capture")) == rings
    assert streaming.mask_reads(k) == tuple(n for n in rings if n and n in mask)


@pytest.mark.parametrize("score,mask,capture,reads1", [
    ("s + bias[b, h, i, j]", None, "bias: bf16[B, H, M, N]", "true"),            # the score's ring
    ("s + bias[i, j]", "bias[i, j] > 0.0", "bias: bf16[M, N]", "true"),          # the score's and the mask's
    (None, "keep[b, i, j] and j <= i", "keep: bool[B, M, N]", "false"),          # the mask's alone
    ("s + 0.1 * float(bucket[b, i, j])", "keep[b, i, j]", "bucket: u8[B, M, N]; keep: bool[B, M, N]", "true"),
])
def test_a_full_tile_leaves_a_ring_only_the_mask_reads_unloaded(score, mask, capture, reads1):
    """Variant::kScoreReads1: whether the score reads ring 1, which the forward's producer then
    loads on every tile; a ring only the mask reads (ring 2 always) it loads on partial tiles
    alone (KDSL_STREAM_SKIP_FULL, attention_wgmma.cuh), whose full tiles evaluate no mask."""
    k = kernel(score, capture, f"mask(b, h, i, j) = {mask}" if mask else "")
    src = build(k, "sm_90a", 128, want_cubin=False).generated.source
    assert f"kScoreReads1 = kStreamLoads && {reads1};" in src


def test_tiling_fits_both_rings_or_keeps_the_first():
    k = kernel("s + bias[b, i, j]", "bias: bf16[B, M, N]; keep: bool[B, M, N]", "mask(b, h, i, j) = keep[b, i, j]")
    # head dim 128: K, V, a bf16 and a bool tile take 112 KB a stage at 128 keys, where only the
    # first ring fits; both fit beside 64-key tiles, in three stages (most stages first)
    low = lowered(k, 128)
    assert (low.attr("stream_capture"), low.attr("mask_stream_capture"), low.attr("tile_n"), low.attr("stages")) == \
        ("bias", "keep", 64, 3)
    assert low.attr("smem_bytes") == tiling.attention_wgmma_smem_bytes(128, 128, 64, 2, 3, 2, mask_stream_elem=1)
    # a given tile too wide for both: the first ring alone
    low = lowered(k.with_attrs(tile_n=128), 128)
    assert (low.attr("stream_capture"), low.attr("mask_stream_capture"), low.attr("tile_n")) == ("bias", None, 128)
    # an IR file may turn the second off
    assert lowered(k.with_attrs(mask_stream_capture=None), 128).attr("mask_stream_capture") is None
    with pytest.raises(KdslError, match="mask_stream_capture = 'bias'"):
        lowered(k.with_attrs(mask_stream_capture="bias"))


def test_tiling_makes_room_for_the_ring_or_drops_it():
    bf16 = kernel("s + bias[i, j]")
    # head dim 128: K, V and the bias tile take 96 KB a stage: 2 stages (3 without the bias)
    k = lowered(bf16, 128)
    assert (k.attr("stream_capture"), k.attr("stages")) == ("bias", 2)
    assert k.attr("smem_bytes") == tiling.attention_wgmma_smem_bytes(128, 128, 128, 2, 2, 2)
    assert lowered(bf16, 64).attr("stages") == 3
    # f32 tiles take 64 KB: at 128 no ring fits beside 128-key K and V tiles, so the kv tile
    # narrows to 64 keys with 3 stages; at head dim 64 two stages of 128 keys fit
    f32 = kernel("s + bias[i, j]", "bias: f32[M, N]")
    k = lowered(f32, 128)
    assert (k.attr("stream_capture"), k.attr("tile_n"), k.attr("stages")) == ("bias", 64, 3)
    assert k.attr("smem_bytes") == tiling.attention_wgmma_smem_bytes(128, 128, 64, 2, 3, 4)
    assert (lowered(f32, 64).attr("stream_capture"), lowered(f32, 64).attr("stages")) == ("bias", 2)
    # stages or a tile given by the user are kept: then the tensor stays in global memory
    k = lowered(bf16.with_attrs(stages=3), 128)
    assert (k.attr("stream_capture"), k.attr("tile_n"), k.attr("stages")) == (None, 128, 3)
    k = lowered(f32.with_attrs(tile_n=128), 128)
    assert (k.attr("stream_capture"), k.attr("tile_n"), k.attr("stages")) == (None, 128, 3)
    # a given tile with stages free: fewer stages, the tile kept
    k = lowered(f32.with_attrs(tile_n=96), 128)
    assert (k.attr("stream_capture"), k.attr("tile_n"), k.attr("stages")) == ("bias", 96, 2)
    # the sm_80 kernel has no TMA
    assert lowered(bf16, 64, "sm_80").attr("stream_capture") is None


@pytest.mark.parametrize("dtype,mask,consumers", [
    ("bool", "keep[i, j]", 3), ("u8", "keep[i, j] != 0", 3),
    ("i32", "keep[i, j] != 0", 2),           # its ring of 192 rows does not fit at head dim 64
    ("u8", "j <= i and keep[i, j] != 0", 2),  # a second term: three warpgroups spilled
])
def test_a_streamed_mask_takes_three_warpgroups_where_its_ring_fits_them(dtype, mask, consumers, monkeypatch):
    # a mask that is the streamed element alone reads shared memory, not global memory per
    # element, so it does not need two warpgroups' registers
    monkeypatch.setenv("KDSL_TILE_SUMMARY_2D", "0")
    k = lowered(kernel("s", f"keep: {dtype}[M, N]", f"mask(b, h, i, j) = {mask}"), 64)
    assert (k.attr("stream_capture"), k.attr("consumers"), k.attr("tile_n")) == ("keep", consumers, 128)
    # read per element (no stream): two warpgroups, as before
    off = lowered(kernel("s", f"keep: {dtype}[M, N]", f"mask(b, h, i, j) = {mask}").with_attrs(stream_capture=None), 64)
    assert off.attr("consumers") == 2


@pytest.mark.parametrize("dtype,mask", [("bool", "keep[i, j]"), ("u8", "keep[i, j] != 0")])
def test_a_streamed_mask_with_a_whole_block_summary_takes_three_warpgroups_too(dtype, mask, monkeypatch):
    # the producer spills 8 bytes around the zero output of an item whose tiles are all empty,
    # and three warpgroups still ran 1.15x faster than two (H200)
    monkeypatch.setenv("KDSL_TILE_SUMMARY_2D", "1")
    k = lowered(kernel("s", f"keep: {dtype}[M, N]", f"mask(b, h, i, j) = {mask}"), 64)
    assert [ir.TILE_REDUCTIONS[s.op][0] for s in mask_analysis.summary_slots(k)] == ["tile"]
    assert (k.attr("stream_capture"), k.attr("consumers")) == ("keep", 3)


@pytest.mark.parametrize("score,capture", [
    ("s - slopes[h] * float(i - j)", "slopes: f32[H]"),  # ALiBi: three warpgroups spilled 16 bytes
    ("30.0 * tanh(s / 30.0)", ""),                      # a transcendental score under a mask: as before
])
def test_a_streamed_bool_mask_under_a_score_of_the_positions_keeps_two_warpgroups(score, capture):
    k = lowered(kernel(score, f"keep: bool[M, N]\n    {capture}", "mask(b, h, i, j) = keep[i, j]"), 64)
    assert (k.attr("stream_capture"), k.attr("consumers")) == ("keep", 2)


def test_an_ir_file_may_turn_streaming_off_but_not_name_another_tensor():
    k = kernel("s + bias[i, j]")
    assert lowered(k.with_attrs(stream_capture=None)).attr("stream_capture") is None
    with pytest.raises(KdslError, match="stream_capture = 'other'"):
        lowered(k.with_attrs(stream_capture="other"))


@pytest.mark.parametrize("score,capture,rank,extra,boxes", [
    ("s + bias[i, j]", "bias: bf16[M, N]", 2, "", 2),
    ("s + bias[b, h, i, j]", "bias: f16[B, H, M, N]", 4, "", 2),
    ("s + float(bias[b, i, j])", "bias: u8[B, M, N]", 3, "", 1),
    # two rings: a 1-byte score table and a bool mask, one column block each
    ("s + 0.1 * float(bias[b, i, j])", "bias: u8[B, M, N]; keep: bool[B, M, N]", 3,
     "mask(b, h, i, j) = keep[b, i, j]", 2),
])
def test_streamed_program_reads_shared_memory_and_the_other_loads(score, capture, rank, extra, boxes):
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    k = kernel(score, capture, extra)
    streamed, per_element = build(k, "sm_90a", 128), build(k, "sm_90a", 128, program=Program(stream=False))
    assert "-DKDSL_STREAM_CAPTURES=0" in per_element.options and streamed.cache_key != per_element.cache_key
    a = inspect(streamed.compiled.cubin, streamed.generated.entry)
    b = inspect(per_element.compiled.cubin, per_element.generated.entry)
    # Q, K and V boxes (2 each at head dim 128) and the streamed tiles' column blocks
    assert a.other_ops.get("UTMALDG") == b.other_ops.get("UTMALDG") + boxes
    assert f"cp.async.bulk.tensor.{rank}d" in streamed.compiled.ptx
    summary_reads = 2 if mask_analysis.summary_slots(streamed.kernel) else 0  # a tile summary's (min, max)
    pair_reads = sum(n for op, n in a.other_ops.items() if op.startswith("LDS"))
    assert a.other_ops.get("LDG", 0) <= summary_reads and pair_reads >= 32  # a read per pair
    assert b.other_ops.get("LDG", 0) >= 64
    assert a.local_bytes == 0 and a.spill_ops == 0, a
    assert "serialized" not in streamed.compiled.log


@pytest.mark.parametrize("sample,name,most", [("prefix_lm", "prefix_lm", 8), ("document_mask", "document_mask", 48)])
def test_partial_tiles_load_a_row_or_column_value_once(sample, name, most):
    """The mask on partial tiles: `and`/`or` evaluate both sides and 8 column groups share a
    block, so NVVM merges equal loads across elements: prefix[b] once an item, doc_kv[b, kv]
    once a column (per element it was 134 / 128 LDG), with no spills."""
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    from conftest import SAMPLES
    path = next(p for p in SAMPLES if p.stem == sample)
    k = next(k for k in pipeline.check(parse(path.read_text(), str(path))) if k.name == name)
    built = build(k, "sm_90a", 128)
    rep = inspect(built.compiled.cubin, built.generated.entry)
    assert rep.other_ops.get("LDG", 0) <= most, rep
    assert rep.local_bytes == 0 and rep.spill_ops == 0, rep


@pytest.mark.parametrize("capture,mask,pair_reads", [
    ("keep: bool[B, M, N]", "keep[b, i, j]", "LDS.U16"),
    ("keep: i8[B, H, M, N]", "j <= i and keep[b, h, i, j] > 0", "LDS.U16"),
    ("keep: i32[M, N]", "keep[i, j] != 0", "LDS"),
    ("keep: bool[B, M, N]; other: u8[H, M, N]", "keep[b, i, j] and other[h, i, j] != 0", "LDS.U16"),  # two rings
])
def test_a_streamed_mask_reads_its_tile_from_shared_memory(capture, mask, pair_reads, monkeypatch):
    """A partial tile's mask: 32 shared-memory reads a thread (a pair of keys each) against 64
    global loads per element; the other programs (per-element, split-KV) build too. (A per-head
    mask without its tile summary: with one, ptxas lays the per-element program's loads out on
    two paths, 48 in the SASS.)"""
    monkeypatch.setenv("KDSL_TILE_SUMMARY_HEADS", "0")
    if not find_cuobjdump():
        pytest.skip("cuobjdump is needed for the SASS check: pip install 'kdsl[sass]'")
    k = kernel(None, capture, f"mask(b, h, i, j) = {mask}")
    d = 64  # an i32 ring fits beside K and V there
    streamed, per_element = build(k, "sm_90a", d), build(k, "sm_90a", d, program=Program(stream=False))
    assert streamed.kernel.attr("stream_capture") == "keep"
    a = inspect(streamed.compiled.cubin, streamed.generated.entry)
    b = inspect(per_element.compiled.cubin, per_element.generated.entry)
    # the streamed program's global loads are its tile summary's (min, max) pairs, if any
    summary_reads = 2 if mask_analysis.summary_slots(streamed.kernel) else 0
    assert a.other_ops.get("LDG", 0) <= summary_reads and b.other_ops.get("LDG", 0) >= 64, (a, b)
    assert a.other_ops.get(pair_reads, 0) >= 32, a
    # three warpgroups beside a whole-block summary: the producer (32 registers) spills one word
    # around the zero output of an item with no live tile, a path a block-empty row takes once;
    # measured 1.15x faster than two warpgroups all the same (tiling.tile_shape_hints)
    producer_spill = 8 if summary_reads and streamed.kernel.attr("consumers") == 3 else 0
    assert a.local_bytes <= producer_spill and a.spill_ops <= producer_spill // 4, a
    split = build(k, "sm_90a", d, program=Program(split_kv=True))
    assert inspect(split.compiled.cubin, split.generated.entry).local_bytes <= producer_spill


def test_only_partial_tiles_with_the_tiles_in_shared_memory_read_a_streamed_mask_there():
    """mask_at() takes the streamed element; mask() keeps its global load for its other callers
    (the tile summary, the wide and mma.sync backwards), which run without the stream."""
    import re
    k = kernel(None, "keep: bool[B, M, N]", "mask(b, h, i, j) = keep[b, i, j] and j <= i")
    src = build(k, "sm_90a", 64, want_cubin=False).generated.source
    mask = re.search(r"bool mask\(.*?\{(.*?)\}", src, re.S).group(1)
    mask_at = re.search(r"bool mask_at\(.*?int sv, float sv2\) \{(.*?)\}", src, re.S).group(1)
    assert "load_bool" in mask and "sv" not in mask
    assert "sv != 0" in mask_at and "kMaskReads1 = kStreamLoads && true" in src
    # its callers: the forward's partial tiles, whose program has the stream, and the wgmma
    # backward's, which copies the mask's tiles (attention_bwd_stream.cuh)
    from kdsl.codegen.emit import INCLUDE_DIR
    callers = {p.name for p in (INCLUDE_DIR / "kdsl").glob("*.cuh") if "V::mask_at(" in p.read_text()}
    assert callers == {"attention_wgmma.cuh", "attention_bwd_wgmma.cuh"}


def test_check_shapes_reach_the_streamed_and_the_per_element_programs():
    """`kdsl check` judges both programs of a streamed 1-byte mask and of a 16-bit table: rows
    of whole 16-byte units stream (N % 16, N % 8), others read per element."""
    from kdsl.cases import attention_shapes
    for capture, mask, unit in (("keep: bool[B, M, N]", "keep[b, i, j]", 16), ("bias: bf16[M, N]", None, 8)):
        k = kernel(None if mask else "s + bias[i, j]", capture, f"mask(b, h, i, j) = {mask}" if mask else "")
        ns = [c.N for c in attention_shapes(k)]
        assert any(n % unit == 0 and n > 128 for n in ns) and any(n % unit for n in ns), ns
