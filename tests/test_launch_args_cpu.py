"""Argument rules of the launch path that need no GPU: empty inputs, CUDA grid limits and
the softmax scale (issue #6 point 4). tests/gpu/test_launch_edges_gpu.py runs the same
cases through real calls."""
import math
import random

import numpy as np
import pytest

from kdsl.errors import LaunchError
from kdsl.runtime import arrays, geometry

LIMIT = geometry.GRID_YZ_LIMIT


def test_the_grid_limit_is_cudas():
    assert LIMIT == 2**16 - 1


@pytest.mark.parametrize("B,H,M,N,want", [
    (2, 4, 0, 16, "empty"), (0, 4, 8, 16, "empty"), (2, 0, 8, 16, "empty"), (0, 0, 0, 0, "empty"),
    (2, 4, 8, 0, "no_keys"), (1, 1, 1, 0, "no_keys"), (2, 4, 8, 16, "launch"), (1, 1, 1, 1, "launch")])
def test_attention_work_follows_torch(B, H, M, N, want):
    assert geometry.attention_work(B, H, M, N) == want


def test_batches_within_the_limit_are_one_launch():
    for B in (1, 2, random.randint(3, LIMIT - 1), LIMIT):
        assert geometry.attention_batch_chunks(B, 16, uses_batch_index=True, kname="k") == [(0, B)]


@pytest.mark.parametrize("B", [LIMIT + 1, 70000, 2 * LIMIT, 2 * LIMIT + 1, 200003])
def test_large_batches_split_into_launches_that_cover_every_batch_once(B):
    chunks = geometry.attention_batch_chunks(B, 16, uses_batch_index=False, kname="k")
    assert len(chunks) == math.ceil(B / LIMIT)
    assert all(1 <= n <= LIMIT for _, n in chunks)
    covered = [b for b0, n in chunks for b in range(b0, b0 + n)]
    assert covered == list(range(B))


def test_large_batch_with_batch_index_is_refused_naming_the_limit():
    with pytest.raises(LaunchError, match=r"doc: batch 70000 exceeds the CUDA grid limit of 65535 \(gridDim.z\).*"
                                          r"uses the batch index b"):
        geometry.attention_batch_chunks(70000, 16, uses_batch_index=True, kname="doc")


def test_too_many_heads_is_refused_naming_the_limit():
    with pytest.raises(LaunchError, match="70000 heads exceed the CUDA grid limit of 65535"):
        geometry.attention_batch_chunks(1, 70000, uses_batch_index=False, kname="k")


def test_gemm_grid_is_persistent_in_whole_clusters():
    """One CTA per SM (or per tile when there are fewer), a multiple of the cluster size: no
    grid dimension grows with M, N or G, so no CUDA grid limit applies."""
    assert geometry.gemm_grid(1792, 132, 1) == (132, 1, 1)
    assert geometry.gemm_grid(10, 132, 1) == (10, 1, 1)
    assert geometry.gemm_grid(1, 132, 1) == (1, 1, 1)
    assert geometry.gemm_grid(896, 132, 2) == (132, 1, 1)
    assert geometry.gemm_grid(896, 114, 2) == (114, 1, 1)
    assert geometry.gemm_grid(6, 132, 2) == (6, 1, 1)


def test_head_groups_hold_two_waves_of_items_within_half_of_l2():
    l2, mib = 50 * 2**20, 2**20
    # B=8 H=16 S=2k D=128: 16 q tiles, 1 MiB of K and V a head -> 17 heads, two waves of items
    assert geometry.attention_head_group(128, 16, 132, mib, l2) == 17
    # S=8k: 64 q tiles, 4 MiB a head -> 5 heads (20 MiB)
    assert geometry.attention_head_group(32, 64, 132, 4 * mib, l2) == 5
    # S=32k: 16 MiB a head, only one fits in half of L2 -> head by head
    assert geometry.attention_head_group(4, 256, 132, 16 * mib, l2) == 1
    # never more than the heads there are, never less than one
    assert geometry.attention_head_group(3, 1, 132, mib, l2) == 3
    assert geometry.attention_head_group(1, 1, 132, 10**12, l2) == 1


def test_head_groups_mix_many_heads_under_masks_that_read_data():
    l2, mib = 50 * 2**20, 2**20
    # B=4 Hkv=16 4096^2 D=64: 32 key blocks, 2 MiB of q, dO and dq_acc a pair -> 9 pairs by the L2 rule
    assert geometry.attention_head_group(64, 32, 132, 2 * mib, l2, reads_data=False) == 9
    # a document mask's long key blocks need not come first: at least 66 pairs (half the SMs), all 64 here
    assert geometry.attention_head_group(64, 32, 132, 2 * mib, l2, reads_data=True) == 64
    assert geometry.attention_head_group(256, 32, 132, 2 * mib, l2, reads_data=True) == 66
    # S=16k: 16 MiB a pair, head by head by the L2 rule; all 16 pairs under a document mask
    assert geometry.attention_head_group(16, 128, 132, 16 * mib, l2, reads_data=False) == 1
    assert geometry.attention_head_group(16, 128, 132, 16 * mib, l2, reads_data=True) == 16
    # short sequences: the two-wave rule already asks for more than half the SMs
    assert geometry.attention_head_group(512, 2, 132, mib // 8, l2, reads_data=True) == 132


def test_backward_head_groups_count_one_query_head_of_a_gqa_pair():
    """A backward CTA walks its group's query heads one after the other, so the pairs' CTAs
    running together share one query head's q, dO and dq_acc in L2, not all H / Hkv of them
    (regression: causal GQA ran head by head, x1.36 slower at D=128 on an H200)."""
    l2, sms = 60 * 2**20, 132
    # B=2 H=16 Hkv=4 4096^2 D=128 bf16: 4 MiB a query head, 32 key blocks -> one group of all 8 pairs
    assert geometry.backward_head_group(2, 16, 4, 4096, 128, 128, 2, 32, sms, l2) == 7  # its remainder joins
    # D=256: 8 MiB a query head, 64 key blocks (the wide kernel) -> 3 pairs
    assert geometry.backward_head_group(2, 16, 4, 4096, 256, 256, 2, 64, sms, l2) == 3
    # without GQA a pair is a query head: as before
    assert geometry.backward_head_group(4, 16, 16, 4096, 64, 64, 2, 32, sms, 50 * 2**20) == \
        geometry.attention_head_group(64, 32, sms, 2 * 2**20, 50 * 2**20) == 9


def test_backward_splits_query_heads_until_every_sm_has_a_cta():
    """Few k/v heads leave the backward's CTAs (key blocks x pairs) fewer than the SMs: a pair's
    query heads split into the fewest ranges, a divisor of them, that give every SM one."""
    assert geometry.backward_head_splits(16, 32, 132) == 8    # MQA, 4096 keys (128 a CTA): 256 CTAs
    assert geometry.backward_head_splits(8, 64, 132) == 4     # 2 k/v heads
    assert geometry.backward_head_splits(4, 128, 132) == 2
    assert geometry.backward_head_splits(4, 256, 132) == 1    # already a CTA an SM
    assert geometry.backward_head_splits(1, 32, 132) == 1     # no query heads to split
    assert geometry.backward_head_splits(6, 30, 132) == 6     # divisors only: 2, 3 leave SMs idle
    assert geometry.backward_head_splits(16, 1, 132) == 16    # at most a query head a CTA


def test_short_rows_take_two_warpgroups_where_192_row_tiles_pad_them():
    """Three consumer warpgroups (192 query rows an item) pad a short head's last tile: two
    where that padding exceeds 128-row tiles' by a fifth, and under a mask that reads the query
    row (a diagonal) up to 1152 rows."""
    assert geometry.forward_query_warpgroups(256, 3, row_mask=False) == 2    # 384 rows of work for 256
    assert geometry.forward_query_warpgroups(640, 3, row_mask=False) == 2    # 768 for 640
    assert geometry.forward_query_warpgroups(1024, 3, row_mask=False) == 3   # 1152: three still pay
    assert geometry.forward_query_warpgroups(384, 3, row_mask=False) == 3    # two tiles of 192 exactly
    assert geometry.forward_query_warpgroups(1152, 3, row_mask=True) == 2
    assert geometry.forward_query_warpgroups(1153, 3, row_mask=True) == 3
    assert geometry.forward_query_warpgroups(2048, 3, row_mask=True) == 3
    assert geometry.forward_query_warpgroups(256, 2, row_mask=True) == 2     # the tiling's two stay


@pytest.mark.parametrize("program, M, H, Hkv, D, want", [
    ("plain", 256, 16, 16, 64, 2), ("plain", 1024, 16, 16, 64, None), ("causal", 1000, 16, 16, 64, 2),
    ("causal", 4096, 16, 16, 64, None), ("causal", 1, 16, 16, 64, 1), ("plain", 256, 16, 16, 128, None),
    ("plain", 16, 16, 4, 64, 1),   # GQA heads fold into rows: 4 x 16 = 64 rows take one, 4 x 64 two
    ("plain", 64, 16, 4, 64, 2), ("plain", 16, 16, 2, 64, 2), ("plain", 8, 16, 2, 64, 1),
    ("padded_causal", 1024, 8, 8, 64, 2), ("padded_causal", 1200, 8, 8, 64, None),
    ("sliding_window", 700, 8, 8, 32, 2), ("document_mask", 256, 8, 8, 64, None)])  # the tiling's two
def test_the_forward_takes_fewer_warpgroups_for_short_rows(program, M, H, Hkv, D, want):
    """The forward's warpgroups per call (AttentionKernel._query_warpgroups): one for at most 64
    rows, two where 192-row tiles pad the rows, else the tiling's (None); on the lowered kernel
    alone, no GPU. (Batch 4: items enough to fill 132 SMs without splitting the keys.)"""
    kern = _sample_kernel(program)
    assert kern._query_warpgroups(4, H, Hkv, M, M, D, D, 132) == want
    if want is not None:
        assert kern._lowered(D, D, want).attr("tile_m") == 64 * want


def test_a_mask_blind_to_the_query_row_counts_as_no_mask_for_the_warpgroups():
    """A mask on keys alone (no diagonal tiles) pads as a plain kernel does: 1000 rows keep
    three warpgroups, where causal's take two."""
    import kdsl
    from kdsl.runtime.attention_launch import AttentionKernel
    src = """attention keys_cut {
        q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]
        mask(b, h, i, j) = j < N - 3 * h
    }"""
    kern = AttentionKernel(kdsl.compile(src).ir["keys_cut"], arch="sm_90a")
    assert kern._query_warpgroups(4, 16, 16, 1000, 1000, 64, 64, 132) is None
    assert kern._query_warpgroups(4, 16, 16, 256, 256, 64, 64, 132) == 2


def _sample_kernel(program: str):
    from pathlib import Path
    import kdsl
    from kdsl.runtime.attention_launch import AttentionKernel
    root = Path(__file__).resolve().parents[1]
    return AttentionKernel(getattr(kdsl.load(root / "samples" / f"{program}.kd"), program).ir, arch="sm_90a")


@pytest.mark.parametrize("program, B, H, M, N, D, want", [
    ("plain", 1, 4, 2048, 2048, 64, 2),      # 44 items of 192 rows: the keys split; 64 of 128
    ("plain", 1, 2, 4096, 4096, 64, 2), ("relpos", 1, 4, 2048, 4096, 64, 2), ("softcap", 1, 6, 1536, 1536, 32, 2),
    ("plain", 1, 4, 2048, 100, 64, None),    # one key tile: nothing to split, three
    ("plain", 2, 16, 2048, 2048, 64, None),  # 352 items fill the GPU
    ("plain", 1, 4, 2048, 2048, 128, None)])  # the tiling's two at 128
def test_few_items_take_two_warpgroups_where_the_keys_would_split(program, B, H, M, N, D, want):
    """Where three warpgroups' 192-row items fill under half the SMs (the forward would split
    the keys over CTAs), two take the rows: more items, fewer ranges to merge."""
    kern = _sample_kernel(program)
    assert kern._query_warpgroups(B, H, H, M, N, D, D, 132) == want


def test_backward_splits_query_tiles_while_its_ctas_fill_under_half_the_sms():
    """After the query-head split, CTAs that fill under half the SMs split their query tiles:
    about a CTA an SM (one wave, not a second one's tail), at most a range per 128 rows."""
    assert geometry.backward_query_splits(8192, 64, 132) == 2     # B=1 H=8 N=1024: 64 CTAs -> 128
    assert geometry.backward_query_splits(4096, 16, 132) == 8     # cross-attention, 77 keys: 16 -> 128
    assert geometry.backward_query_splits(4096, 66, 132) == 2
    assert geometry.backward_query_splits(4096, 67, 132) == 1     # over half the SMs busy already
    assert geometry.backward_query_splits(256, 4, 132) == 2       # at most a range per 128 rows
    assert geometry.backward_query_splits(100, 4, 132) == 1


def test_a_forced_query_split_must_be_a_positive_integer(monkeypatch):
    from types import SimpleNamespace
    from kdsl.runtime.attention_backward import _query_splits
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("KDSL_BWD_QUERY_SPLITS", bad)
        with pytest.raises(LaunchError, match=r"k: KDSL_BWD_QUERY_SPLITS='.*' must be a positive integer"):
            _query_splits(SimpleNamespace(name="k"), 1000, 16, 0)
    monkeypatch.setenv("KDSL_BWD_QUERY_SPLITS", "3")
    assert _query_splits(SimpleNamespace(name="k"), 1000, 16, 0) == 3


def test_a_forced_head_split_must_divide_the_query_heads(monkeypatch):
    from types import SimpleNamespace
    from kdsl.runtime.attention_backward import _head_splits
    monkeypatch.setenv("KDSL_BWD_HEAD_SPLITS", "3")
    with pytest.raises(LaunchError, match=r"k: KDSL_BWD_HEAD_SPLITS='3' must divide the 8 query heads"):
        _head_splits(SimpleNamespace(name="k"), 8, 32, 0)
    monkeypatch.setenv("KDSL_BWD_HEAD_SPLITS", "4")
    assert _head_splits(SimpleNamespace(name="k"), 8, 32, 0) == 4


def test_gemm_index_limits_name_the_sizes():
    geometry.gemm_index_limits(LIMIT * 128 + 1, 128, 128, 1, 128, 128, False, "g")  # past the old grid.y limit
    with pytest.raises(LaunchError, match=r"g: M = 65536, N = 65536, K = 128, G = 3000 is too large"):
        geometry.gemm_index_limits(65536, 65536, 128, 3000, 64, 64, True, "g")


@pytest.mark.parametrize("good", [0.125, 2, np.float32(0.5), np.float64(0.3), np.int64(1), -1.5, 0])
def test_scale_accepts_real_numbers(good):
    assert geometry.softmax_scale(good, lambda: 9.0, "k") == float(good)


@pytest.mark.parametrize("bad", ["0.1", b"0.1", True, object(), [0.1], 1 + 2j, np.array([0.1])])
def test_scale_refuses_what_is_not_a_real_number(bad):
    with pytest.raises(LaunchError, match=r"k: scale must be a real number \(int or float\), got"):
        geometry.softmax_scale(bad, lambda: 9.0, "k")


def test_scale_refuses_a_tensor_with_a_hint():
    torch = pytest.importorskip("torch")
    with pytest.raises(LaunchError, match=r"got Tensor .*pass a Python float"):
        geometry.softmax_scale(torch.tensor(0.1), lambda: 9.0, "k")


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_scale_must_be_finite(bad):
    with pytest.raises(LaunchError, match="softmax scale must be finite"):
        geometry.softmax_scale(bad, lambda: 9.0, "k")


def test_default_scale_is_the_kernels_and_evaluated_only_when_needed():
    calls = []
    assert geometry.softmax_scale(None, lambda: calls.append(1) or 0.25, "k") == 0.25 and calls == [1]
    geometry.softmax_scale(0.5, lambda: calls.append(1) or 0.25, "k")
    assert calls == [1]


@pytest.mark.parametrize("shape", [(1, 2, 0, 64), (0, 2, 3, 64), (2, 0), (0,)])
def test_empty_arrays_count_as_contiguous_whatever_their_strides(shape):
    torch = pytest.importorskip("torch")
    for x in (torch.empty(shape), torch.empty(shape[::-1]).permute(*reversed(range(len(shape))))):
        assert arrays.is_contiguous(arrays.info(x, "q")), (shape, x.stride())


def test_non_empty_layouts_are_still_checked():
    torch = pytest.importorskip("torch")
    x = torch.empty(2, 3, 4, 64).transpose(1, 2)
    assert not arrays.is_contiguous(arrays.info(x, "q"))
    assert arrays.is_contiguous(arrays.info(x.contiguous(), "q"))


def test_interpreted_kernels_refuse_a_string_scale_too():
    torch = pytest.importorskip("torch")
    import kdsl
    from conftest import ROOT
    mod = kdsl.load(ROOT / "samples" / "plain.kd", interpret=True)
    q = torch.randn(1, 1, 4, 64, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="scale must be a real number"):
        mod.plain(q, q, q, scale="0.1")


def test_fp8_tensor_maps_meet_the_driver_rules_and_the_kernel_contract():
    """cuTensorMapEncodeTiled's documented rules (dims in [1, 2**32], strides multiples of 16
    below 2**40, boxes in [1, 256] with a whole number of 16-byte inner chunks, no wider than
    the swizzle), and fp8_gemm_wgmma.cuh's contract: a stage receives exactly kStageTx bytes
    (each CTA of a pair loading half of the multicast tile), a store box is 64 rows, one
    swizzle width wide, and a tile row is a whole number of them."""
    from kdsl.passes import gemm_tiles
    rng = random.Random(88)
    elem = {"u8": 1, "bf16": 2, "f32": 4}
    for _ in range(300):
        grouping = rng.choice(["dense", "contiguous", "masked"])
        M, N, K = rng.randint(1, 9000), rng.randint(1, 9000), 128 * rng.randint(1, 60)
        G = 1 if grouping == "dense" else rng.randint(1, 8)
        out_bytes = rng.choice([2, 4])
        sms = rng.choice([132, 114])
        cfg = gemm_tiles.choose(gemm_tiles.Problem(M, N, K, G, grouping, out_bytes), sms, 232448)
        maps = geometry.gemm_tensor_maps(M, N, K, G, grouping, out_bytes, cfg)
        assert cfg["scale_load"] == ("tma" if M % 4 == 0 else "copy")
        assert cfg["b_scale_load"] == gemm_tiles.b_scale_load_for(gemm_tiles.Problem(M, N, K, G, grouping, out_bytes),
                                                                  cfg["tile_m"], cfg["tile_n"], cfg["cluster"], sms)
        want = ["a", "b"] + ["out"] * (cfg["store"] == "tma") + ["a_scale"] * (cfg["scale_load"] == "tma") + \
            ["b_scale"] * (cfg["b_scale_load"] == "tma")
        assert list(maps) == want and all(name in geometry.GEMM_MAP_OPERANDS for name in maps)
        for dtype, dims, strides, box, swizzle, promotion in maps.values():
            assert 1 <= len(dims) <= 5 and len(strides) == len(dims) - 1 and len(box) == len(dims)
            assert all(1 <= d <= 2**32 for d in dims) and all(s % 16 == 0 and s < 2**40 for s in strides)
            assert all(1 <= b <= 256 for b in box) and box[0] * elem[dtype] % 16 == 0
            assert swizzle == 0 or box[0] * elem[dtype] <= swizzle
            assert promotion == geometry.GEMM_L2_PROMOTION
        bm, bn, mcast = cfg["tile_m"], cfg["tile_n"], cfg["multicast"]
        a_box, b_box = maps["a"][3], maps["b"][3]
        landed = a_box[0] * a_box[1] * (2 if mcast == "a" else 1) + b_box[0] * b_box[1] * (2 if mcast == "b" else 1)
        if cfg["scale_load"] == "tma":  # BM floats of one K block, at 16-byte aligned starts
            dtype, dims, strides, box, swizzle, _ = maps["a_scale"]
            assert dtype == "f32" and box == (bm, 1, 1) and swizzle == 0 and M * 4 % 16 == 0 and bm * 4 % 16 == 0
            assert dims == (M, K // 128, G if grouping == "masked" else 1)
        if cfg["b_scale_load"] == "tma":  # 4 K blocks of the tile's two scale rows (its block's at floats 0 and 4)
            dtype, dims, strides, box, swizzle, _ = maps["b_scale"]
            assert dtype == "f32" and box == (4, 2, 1) and swizzle == 0 and K // 128 * 4 % 16 == 0
            assert dims == (K // 128, -(-N // 128), 1 if grouping == "dense" else G)
        assert landed == (bm + bn) * 128  # Fp8Config::kStageTx, with kSABytes and 32 for the scale boxes
        if cfg["store"] == "tma":
            dtype, dims, _, box, swizzle, _ = maps["out"]
            assert box[1] == 64 and box[0] * out_bytes == swizzle and bn * out_bytes % swizzle == 0
            assert dims == (N, M, G if grouping == "masked" else 1) and elem[dtype] == out_bytes


def test_gqa_heads_fold_into_rows_only_for_scores_and_masks_blind_to_row_and_head():
    import kdsl
    from kdsl.passes import pipeline
    from kdsl.passes.target import get_target
    head = "attention a { q: bf16[B, H, M, D]; k: bf16[B, Hkv, N, D]; v: bf16[B, Hkv, N, D]\n"
    cases = {"": True, "score(s, b, h, i, j) = tanh(s)": True, "mask(b, h, i, j) = j < N - 1": True,
             "mask(b, h, i, j) = j <= i": False, "score(s, b, h, i, j) = s + float(h)": False,
             "score(s, b, h, i, j) = s + float(i - j)": False, "mask(b, h, i, j) = j < M": False}
    for body, foldable in cases.items():
        k = kdsl.compile(head + body + "\n}", "a.kd").ir["a"]
        assert pipeline.heads_fold_into_rows(pipeline.lower(k, get_target("sm_90a"), 128)) == foldable, body


@pytest.mark.parametrize("kernel_class", ["attention", "gemm"])
def test_captured_persistent_launches_take_no_shared_work_counter(kernel_class):
    """A launch captured into a CUDA graph walks its items by a fixed stride (counter 0): a
    graph keeps the counters of its capture stream, and graphs captured on one stream may be
    replayed at once on different streams. When the framework cannot say, the same."""
    from types import MethodType, SimpleNamespace
    from kdsl.runtime.attention_launch import AttentionKernel
    from kdsl.runtime.gemm_launch import GemmKernel
    from kdsl.runtime.launch import Plan
    kernel = AttentionKernel if kernel_class == "attention" else GemmKernel

    def plan(dynamic, capturing):
        loaded = SimpleNamespace(work_counter=lambda stream: 4096 + stream)
        ns = SimpleNamespace(dynamic=dynamic, capturing=capturing, current_stream=lambda: 7, loaded=loaded)
        ns.own_stream = MethodType(Plan.own_stream, ns)  # the real rule, on the stand-in's answers
        return ns

    def fails():
        raise RuntimeError("no answer")
    assert kernel._work_counter(plan(True, lambda: False)) == 4103
    assert kernel._work_counter(plan(True, lambda: True)) == 0
    assert kernel._work_counter(plan(True, fails)) == 0
    assert kernel._work_counter(plan(False, lambda: False)) == 0


def test_hopper_attention_refuses_2_to_the_31_query_rows():
    """The Hopper kernel numbers output rows (b * H + h) * M + q in 32 bits."""
    geometry.attention_row_limit(1, 1, 2**31 - 1, "k")
    with pytest.raises(LaunchError, match=r"B \* H \* M = 2 \* 16 \* 67108864 = 2147483648 query rows.*split the batch"):
        geometry.attention_row_limit(2, 16, 2**26, "k")


@pytest.mark.parametrize("stream_k,counter", [(0, False), (5, False), (0, True)])
def test_fp8_arg_pack_matches_the_kernel_signature(stream_k, counter):
    """gemm_launch._arg_pack lays out what the kernel template declares: a tensor map for each of
    geometry.GEMM_MAP_OPERANDS first, then each parameter's kind in order, with the per-call
    pointers (and stream-K's workspace, or the tile counters) in the slots of those names."""
    import ctypes
    from kdsl.runtime import gemm_launch
    from fp8_signature import fp8_kernel_params, fp8_slots
    params = fp8_kernel_params()
    pack = gemm_launch._arg_pack(256, 512, 1024, 1, 8, stream_k, counter)
    kinds = [("tmap" if isinstance(s, ctypes.Array) else "i32" if isinstance(s, ctypes.c_int32) else "ptr")
             for s in pack.slots]
    assert kinds == [kind for _, kind in params]
    assert [name for name, kind in params if kind == "tmap"] == ["t" + {"a": "a", "b": "b", "out": "d",
                                                                      "a_scale": "sa", "b_scale": "sb"}[o]
                                                                 for o in geometry.GEMM_MAP_OPERANDS]
    per_call = (fp8_slots("sa", "sb", "out", "group", "count") + (fp8_slots("sk_partials", "sk_flags") if stream_k else [])
                + (fp8_slots("work") if counter else []))
    for n, i in enumerate(per_call):  # the pointer written n-th each call lands in slot i
        pack.pointers[n] = 0x1000 * (n + 1)
        assert ctypes.c_uint64.from_address(pack.params[i]).value == 0x1000 * (n + 1)
    assert len(per_call) == len(pack.pointers)


@pytest.mark.parametrize("operands", [("a", "b"), ("a", "b", "out"), ("a", "b", "a_scale"), ("a", "b", "out", "a_scale"),
                                      ("a", "b", "b_scale"), ("a", "b", "out", "a_scale", "b_scale")])
@pytest.mark.parametrize("stream_k", [0, 5])
def test_fp8_call_pointers_reach_their_maps_and_parameter_slots(operands, stream_k):
    """The FP8 GEMM call hands its plan one pointer list (gemm_launch.CALL_POINTERS, then
    stream-K's workspace): each tensor map must be bound to its own operand's pointer, and the
    kernel's pointer parameters (sa sb out group count [partials flags]) must get theirs, for
    every set of maps a configuration uses."""
    import ctypes
    from kdsl.runtime import gemm_launch
    from kdsl.runtime.launch import Plan
    from fp8_signature import fp8_slots

    class Map:
        def __init__(self, pack, slot):
            self.pack, self.slot, self.bound = pack, slot, None

        def bind(self, p):
            self.bound = p

    pack = gemm_launch._arg_pack(256, 512, 1024, 1, 8, stream_k)
    maps = tuple(Map(pack, gemm_launch.map_slot(name)) for name in operands)
    plan = Plan(None, (), (), pack, "torch", 0, (1,), "bf16", maps=maps,
                map_sources=gemm_launch.map_sources(operands), map_only=2)
    given = dict(zip(gemm_launch.CALL_POINTERS, range(0x1000, 0x8000, 0x1000)))
    pointers = [given[name] for name in gemm_launch.CALL_POINTERS] + ([0x9000, 0xA000] if stream_k else [])
    plan._bind_maps(pointers)  # what Plan.launch does under the pack's lock
    pack.pointers[:] = pointers[plan.map_only:]
    assert {name: m.bound for name, m in zip(operands, maps)} == {name: given[name] for name in operands}
    assert [m.slot for m in maps] == [("a", "b", "out", "a_scale", "b_scale").index(name) for name in operands]
    slot = lambda i: ctypes.c_uint64.from_address(pack.params[i]).value
    want = [given[n] for n in ("a_scale", "b_scale", "out", "group", "count")] + ([0x9000, 0xA000] if stream_k else [])
    slots = fp8_slots("sa", "sb", "out", "group", "count") + (fp8_slots("sk_partials", "sk_flags") if stream_k else [])
    assert [slot(i) for i in slots] == want
