"""FP8 block-scaled GEMMs on the GPU against the float64 product of the dequantised inputs:
the tiles each shape picks, and every configuration family forced through attrs (tile_m 64,
128, 256; tile widths that straddle B's scale blocks; both multicast operands; row-by-row
stores) at sizes on each side of its tile edges. Each case goes through kdsl's judge
(kdsl.check.gemm_case: outputs NaN-poisoned inside guard bands, rows to leave untouched
checked, inputs unchanged, two runs bitwise equal, calc_diff < 1e-3)."""
import pytest

import kdsl
from kdsl import fp8, reference
from kdsl.cases import GemmCase
from kdsl.check import gemm_case
from kdsl.errors import KdslError, LaunchError
from kdsl.passes import gemm_tiles
from kdsl.testing import FP8_TOL, assert_masked_groups_right, fp8_difference

from conftest import ROOT

pytestmark = pytest.mark.gpu


def _mod(name):
    return kdsl.load(ROOT / "samples" / f"{name}.kd")


def _judge(fn, case):
    from kdsl.backends import Torch
    res = gemm_case(Torch("cuda"), fn.ir, fn, case)
    assert res.passed, (case, fn.ir.attrs, res.error, res.problems)


# Configuration families, forced through attrs.
CONFIGS = [
    {"tile_m": 64, "tile_n": 32, "cluster": 1},
    {"tile_m": 64, "tile_n": 144, "cluster": 1},
    {"tile_m": 128, "tile_n": 112, "cluster": 2, "multicast": "a"},
    {"tile_m": 128, "tile_n": 128, "cluster": 2, "multicast": "b"},
    {"tile_m": 128, "tile_n": 160, "cluster": 1},
    {"tile_m": 128, "tile_n": 192, "cluster": 1},
    {"tile_m": 256, "tile_n": 128, "cluster": 2, "multicast": "a"},
    {"tile_m": 256, "tile_n": 96, "cluster": 2, "multicast": "a"},  # B's scales read by the math, two blocks a tile
    {"tile_m": 256, "tile_n": 96, "cluster": 1, "stages": 2},
    {"tile_m": 128, "tile_n": 128, "cluster": 1, "store": "rows"},
    {"tile_m": 192, "tile_n": 128, "cluster": 1},  # three math warpgroups in turns
    {"tile_m": 192, "tile_n": 48, "cluster": 1, "store": "rows"},
]


def _edges(cfg):
    """(M, N) on each side of the config's tile edges (and of B's 128-row scale blocks), that
    its cluster pairing allows."""
    bm, bn = cfg["tile_m"], cfg["tile_n"]
    ms = [1, bm - 1, bm + 1, 2 * bm, 3 * bm + 5]
    ns = [8, bn - 8, bn + 8, 2 * bn, 128 * 3 + 8, 5 * bn - 8]
    out = []
    for m in ms:
        for n in ns:
            try:
                gemm_tiles.choose(gemm_tiles.Problem(m, n, 256, 1, "dense", 2), 132, 227 * 1024, cfg)
            except KdslError:
                continue
            out.append((m, n))
    return out


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_configurations_at_tile_edges(cfg):
    fn = _mod("fp8_gemm").fp8_gemm.with_attrs(**cfg)
    shapes = _edges(cfg)
    assert len(shapes) >= 8
    for i, (m, n) in enumerate(shapes):
        _judge(fn, GemmCase(m, n, (128, 512, 384)[i % 3], seed=i))  # B's scales copied, by TMA, copied


DENSE_SHAPES = [(1, 2112, 7168), (127, 129, 128), (128, 256, 256), (129, 2112, 512), (300, 7168, 1024),
                (4096, 512, 384), (77, 1, 128), (128, 7168, 16384), (4096, 2112, 7168), (4096, 24576, 1536),
                (257, 4097, 1280)]
GROUPED_CFGS = {"picked": {}, "bm64": {"tile_m": 64, "cluster": 1}, "cluster2": {"tile_m": 128, "tile_n": 128, "cluster": 2},
                "bm128": {"tile_m": 128, "tile_n": 128, "cluster": 1},  # a warpgroup with no rows skips its unit
                "bm256": {"tile_m": 256, "tile_n": 64, "cluster": 1},  # ping-pong, two waves a warpgroup
                "bm256c2": {"tile_m": 256, "tile_n": 128, "cluster": 2, "multicast": "a"},
                "bm192": {"tile_m": 192, "tile_n": 96, "cluster": 1},  # three warpgroups in turns
                "rows": {"tile_m": 128, "tile_n": 112, "store": "rows", "cluster": 1}}
ACCUMULATE_CFGS = [{}, {"store": "rows"}, {"tile_m": 64, "cluster": 1}]
ACCUMULATE_SHAPES = [(4096, 4096, 1024), (129, 130, 256), (1, 64, 128)]


@pytest.mark.parametrize("M,N,K", DENSE_SHAPES)
def test_dense_at_the_tiles_each_shape_picks(M, N, K):
    _judge(_mod("fp8_gemm").fp8_gemm, GemmCase(M, N, K, seed=M + N + K))


@pytest.mark.parametrize("cfg", GROUPED_CFGS.values(), ids=GROUPED_CFGS.keys())
@pytest.mark.parametrize("aligned", [True, False])
def test_grouped_contiguous(cfg, aligned):
    torch = pytest.importorskip("torch")
    G, N, K = 4, 512, 512
    if aligned:  # 128-aligned expert segments, padding rows at the end of each
        sizes = [128, 256, 0, 384]
        group = torch.cat([torch.full((s,), g, dtype=torch.int32) for g, s in enumerate(sizes)]).cuda()
        group[100:128] = -1
        group[-40:] = -1
    else:  # unsorted, mixed, ids >= G are padding
        group = torch.randint(-1, G + 2, (333,), dtype=torch.int32, device="cuda")
    M = group.numel()
    fn = _mod("fp8_grouped_contiguous").fp8_grouped_contiguous.with_attrs(**cfg)
    a, sa = fp8.quantize_1x128(torch.randn(M, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(G, N, K, device="cuda"))
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    fn(a, sa, b, sb, group, out=out)
    ref = reference.fp8_gemm(a, sa, b, sb, group=group)
    valid = (group >= 0) & (group < G)
    assert torch.isnan(out[~valid].float()).all(), "padding rows must be left untouched"
    assert fp8_difference(out[valid], ref[valid]) < FP8_TOL


def _contiguous_layout(torch, sizes, pad_every=0):
    """Group ids per row: segments of the given sizes (group g gets sizes[g] rows), and, with
    pad_every, the last 40 rows of every pad_every-th segment made padding (-1)."""
    group = torch.cat([torch.full((s,), g, dtype=torch.int32) for g, s in enumerate(sizes)])
    if pad_every:
        ends = torch.tensor(sizes).cumsum(0)
        for g in range(0, len(sizes), pad_every):
            group[max(int(ends[g]) - 40, 0):int(ends[g])] = -1
    return group.cuda()


def test_contiguous_tiles_from_a_counter():
    """192-row contiguous tiles come from the stream's counter (gemm_tiles.tile_counter) when a
    launch has more tiles than CTAs: every call right and bitwise equal to the first (the last
    CTA zeroed the counters for the next launch; left raised, later launches would skip tiles
    and leave out's NaNs), on two streams at once (each its own counters), and in a CUDA graph
    (no counter: the fixed stride)."""
    torch = pytest.importorskip("torch")
    G, N, K = 8, 1024, 256
    sizes = [1280, 896, 1920, 1536, 128, 2176, 768, 640]  # 128-aligned: boundaries inside 192-row tiles
    group = _contiguous_layout(torch, sizes, pad_every=3)
    M = group.numel()
    fn = _mod("fp8_grouped_contiguous").fp8_grouped_contiguous.with_attrs(tile_m=192, tile_n=96, cluster=1)
    a, sa = fp8.quantize_1x128(torch.randn(M, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(G, N, K, device="cuda"))
    valid = (group >= 0) & (group < G)
    ref = reference.fp8_gemm(a, sa, b, sb, group=group)
    first = fn(a, sa, b, sb, group)
    (plan,) = fn._plans.values()
    assert plan.dynamic and plan.fast is False and plan.grid[0] < -(-M // 192) * -(-N // 96)
    assert fp8_difference(first[valid], ref[valid]) < FP8_TOL
    for _ in range(5):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        fn(a, sa, b, sb, group, out=out)
        assert torch.equal(out[valid], first[valid]) and torch.isnan(out[~valid].float()).all()

    a2, sa2 = fp8.quantize_1x128(torch.randn(M, K, device="cuda"))
    outs = [torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    streams = [torch.cuda.Stream() for _ in range(2)]
    for s_ in streams:
        s_.wait_stream(torch.cuda.current_stream())
    for _ in range(3):  # launches of the two streams overlap on the GPU
        for s_, x, xs, o in zip(streams, (a, a2), (sa, sa2), outs):
            with torch.cuda.stream(s_):
                fn(x, xs, b, sb, group, out=o)
    torch.cuda.synchronize()
    assert torch.equal(outs[0][valid], first[valid])
    assert fp8_difference(outs[1][valid], reference.fp8_gemm(a2, sa2, b, sb, group=group)[valid]) < FP8_TOL

    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(a, sa, b, sb, group, out=out)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out[valid], first[valid])


@pytest.mark.parametrize("cfg", GROUPED_CFGS.values(), ids=GROUPED_CFGS.keys())
def test_grouped_masked(cfg):
    torch = pytest.importorskip("torch")
    G, Mmax, N, K = 5, 256, 512, 768
    count = torch.tensor([0, 1, 200, 256, 129], dtype=torch.int32, device="cuda")
    fn = _mod("fp8_grouped_masked").fp8_grouped_masked.with_attrs(**cfg)
    a, sa = fp8.quantize_1x128(torch.randn(G, Mmax, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(G, N, K, device="cuda"))
    out = torch.full((G, Mmax, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    fn(a, sa, b, sb, count, out=out)
    assert_masked_groups_right(out, reference.fp8_gemm(a, sa, b, sb, count=count), count)


@pytest.mark.parametrize("cfg", [{}, {"tile_m": 64, "cluster": 1}, {"tile_m": 128, "tile_n": 128, "cluster": 2}],
                         ids=["picked", "bm64", "cluster2"])
def test_grouped_masked_many_groups(cfg):
    """Many groups, each CTA's units spread over several of them (the scheduler walks the
    groups' counts, fp8_gemm_sched.cuh): empty groups, counts past M and a negative one (none
    of the group's rows) among them."""
    torch = pytest.importorskip("torch")
    G, Mmax, N, K = 70, 128, 256, 256
    count = torch.randint(0, Mmax + 1, (G,), dtype=torch.int32, device="cuda")
    count[torch.randperm(G, device="cuda")[:12]] = 0
    count[[31, 32, 63, 64]] = torch.tensor([Mmax + 5, -3, 1, Mmax], dtype=torch.int32, device="cuda")
    fn = _mod("fp8_grouped_masked").fp8_grouped_masked.with_attrs(**cfg)
    a, sa = fp8.quantize_1x128(torch.randn(G, Mmax, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(G, N, K, device="cuda"))
    out = torch.full((G, Mmax, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    fn(a, sa, b, sb, count, out=out)
    # counts are clamped to [0, M], as interp.py does
    assert_masked_groups_right(out, reference.fp8_gemm(a, sa, b, sb, count=count), count.clamp(0, Mmax))


def _padded_rows(sa, pitch):
    """a_scale laid out as DeepGEMM's TMA-aligned tensors are: each K block's M floats in a row of
    `pitch` ([G,] K/128, pitch buffer), viewed as kdsl's [G,] M, K/128."""
    torch = pytest.importorskip("torch")
    m = sa.shape[-2]
    buf = torch.full((*sa.shape[:-2], sa.shape[-1], pitch), float("nan"), device=sa.device)
    buf[..., :m] = sa.transpose(-1, -2)
    return buf[..., :m].transpose(-1, -2)


@pytest.mark.parametrize("m,pitch", [(3, 4), (129, 132), (128, 129), (256, 260)])
def test_a_scale_with_padded_rows(m, pitch):
    """DeepGEMM's TMA-aligned a_scale (rows padded to 4 floats) gives kdsl's own layout's result,
    bitwise, on the first call and on the compiled launch path's: copies where M % 4 != 0, copies
    forced where the pitch is not a multiple of 4, TMA where both are; the padding (NaN) is never
    read. Masked too, groups apart by K/128 padded rows."""
    torch = pytest.importorskip("torch")
    kern = _mod("fp8_gemm").fp8_gemm
    a, sa = fp8.quantize_1x128(torch.randn(m, 512, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(384, 512, device="cuda"))
    padded, want = _padded_rows(sa, pitch), kern(a, sa, b, sb)
    assert padded.stride() == (1, pitch)
    for _ in range(3):
        assert torch.equal(kern(a, padded, b, sb), want)
    G = 3
    masked = _mod("fp8_grouped_masked").fp8_grouped_masked
    a, sa = fp8.quantize_1x128(torch.randn(G, m, 512, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(G, 384, 512, device="cuda"))
    count = torch.tensor([m, m // 2, 1], dtype=torch.int32, device="cuda")
    padded, want = _padded_rows(sa, pitch), masked(a, sa, b, sb, count)
    assert padded.stride() == (4 * pitch, 1, pitch)
    valid = (torch.arange(m, device="cuda").view(1, m, 1) < count.view(G, 1, 1)).expand(want.shape)
    for _ in range(3):
        assert torch.equal(masked(a, padded, b, sb, count)[valid], want[valid])
    with pytest.raises(LaunchError, match="pitch P >= M"):
        kern(a[0], sa[0].contiguous(), b[0], sb[0])


def test_masked_tiles_for_the_expected_rows():
    """expected_rows (a call keyword, or with_attrs) picks the tiles for groups of that many rows
    rather than M, the most a group may hold, as DeepGEMM's expected_m: other tiles, the same
    results; counts on both sides of the hint, and one group past it up to M."""
    torch = pytest.importorskip("torch")
    G, Mmax, N, K = 6, 1024, 768, 512
    count = torch.tensor([20, 0, 31, 17, 1024, 45], dtype=torch.int32, device="cuda")
    kern = _mod("fp8_grouped_masked").fp8_grouped_masked
    a, sa = fp8.quantize_1x128(torch.randn(G, Mmax, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(G, N, K, device="cuda"))
    ref = reference.fp8_gemm(a, sa, b, sb, count=count)

    def tile_m(k):
        return next(iter(k._loaded.values()))[0].kernel.attr("tile_m")

    out = torch.full((G, Mmax, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    kern(a, sa, b, sb, count, out=out)
    assert_masked_groups_right(out, ref, count)
    for call in (lambda o: kern(a, sa, b, sb, count, out=o, expected_rows=24),
                 lambda o: kern.with_attrs(expected_rows=24)(a, sa, b, sb, count=count, out=o)):
        hinted = torch.full_like(out, float("nan"))
        call(hinted)
        assert_masked_groups_right(hinted, ref, count)
    assert tile_m(kern._hinted(24)) == 64 < tile_m(kern)  # (the model's picks: CPU tests check them)
    with pytest.raises(KdslError, match="expected_rows must be a positive integer"):
        kern(a, sa, b, sb, count, expected_rows=0)
    with pytest.raises(KdslError, match="masked groupings only"):
        _mod("fp8_gemm").fp8_gemm(a[0], sa[0], b[0], sb[0], expected_rows=24)


@pytest.mark.parametrize("name", ["fp8_gemm", "fp8_gemm_accumulate", "fp8_grouped_contiguous", "fp8_grouped_masked"])
def test_judge_on_random_cases(name):
    """kdsl check's shapes (block boundaries, 1 row, long K) with random groups and counts."""
    from kdsl.cases import gemm_shapes
    fn = getattr(_mod(name), name)
    for i, case in enumerate(gemm_shapes(fn.ir.attr("grouping"))):
        _judge(fn, GemmCase(case.M, case.N, case.K, case.G, seed=i))


@pytest.mark.parametrize("cfg", ACCUMULATE_CFGS)
def test_accumulate_adds_into_out(cfg):
    fn = _mod("fp8_gemm_accumulate").fp8_gemm_accumulate.with_attrs(**cfg)
    for i, (m, n, k) in enumerate(ACCUMULATE_SHAPES):
        _judge(fn, GemmCase(m, n, k, seed=i))


GROUPED_ACCUMULATE_SRC = """
gemm masked_acc {
    a: e4m3[G, M, K] block(1, 128)
    b: e4m3[G, N, K] block(128, 128)
    count: i32[G]
    out: f32[G, M, N] accumulate
}
gemm contiguous_acc {
    a: e4m3[M, K] block(1, 128)
    b: e4m3[G, N, K] block(128, 128)
    group: i32[M]
    out: f32[M, N] accumulate
}
"""


@pytest.mark.parametrize("cfg", [{}, {"tile_m": 128, "tile_n": 128, "cluster": 1}], ids=["picked", "bm128"])
@pytest.mark.parametrize("name", ["masked_acc", "contiguous_acc"])
def test_grouped_accumulate_into_partial_tiles(name, cfg):
    """Grouped tiles holding rows to leave untouched (a masked group's last rows, another
    group's rows) are written through the staging tile, 16 bytes a thread; accumulating, the
    copy adds what out held. The judge poisons the rows to leave with NaN."""
    fn = getattr(kdsl.compile(GROUPED_ACCUMULATE_SRC, "acc.kd"), name).with_attrs(**cfg)
    for i, (m, n, k, g) in enumerate([(256, 384, 512, 3), (300, 136, 256, 4), (129, 512, 384, 2)]):
        _judge(fn, GemmCase(m, n, k, g, seed=i))


# (M, N, K, attrs): more tiles than the H100's 132 SMs and a partial last wave, so that
# stream-K splits tiles; ragged M and N, one to ten K blocks, every tile height.
STREAM_K_CASES = [(2048, 2200, 256, {"tile_m": 256, "tile_n": 64, "stages": 3}), (2000, 1500, 1280, {"tile_m": 128, "tile_n": 128}),
                  (1000, 1000, 384, {"tile_m": 64, "tile_n": 48}), (4096, 2112, 1024, {}), (1999, 1501, 128, {"tile_m": 128})]


@pytest.mark.parametrize("name", ["fp8_gemm", "fp8_gemm_accumulate"])
def test_stream_k_splits_tiles_correctly(name):
    """Tiles of the last waves split in K across CTAs, their partial totals added by the CTA
    holding K block 0: judged like any call (bitwise equal over two runs), then called again
    and again with the flags the finalisers lowered."""
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the cases are sized for 132 SMs")
    base = getattr(_mod(name), name)
    for i, (m, n, k, cfg) in enumerate(STREAM_K_CASES):
        fn = base.with_attrs(stream_k=True, cluster=1, **cfg)
        _judge(fn, GemmCase(m, n, k, seed=i))
    fn = _mod("fp8_gemm").fp8_gemm.with_attrs(stream_k=True, cluster=1, tile_m=128, tile_n=128)
    a, sa = fp8.quantize_1x128(torch.randn(2000, 1280, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(1500, 1280, device="cuda"))
    first = fn(a, sa, b, sb)
    assert next(iter(fn._plans.values())).sk_tiles > 0
    for _ in range(20):
        assert torch.equal(fn(a, sa, b, sb), first)


@pytest.mark.parametrize("m,n,cfg", [(300, 2112, {}),  # stream-K's plan: whole tiles while captured
                                     (2000, 1500, {"stream_k": True, "cluster": 1, "tile_m": 128, "tile_n": 128})])
def test_capturable_in_cuda_graph(m, n, cfg):
    torch = pytest.importorskip("torch")
    fn = _mod("fp8_gemm").fp8_gemm.with_attrs(**cfg)
    a, sa = fp8.quantize_1x128(torch.randn(m, 1024, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(n, 1024, device="cuda"))
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fn(a, sa, b, sb, out=out)  # compile and plan outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(a, sa, b, sb, out=out)
    out.fill_(float("nan"))
    a2, sa2 = fp8.quantize_1x128(torch.randn(m, 1024, device="cuda"))
    a.copy_(a2)  # new inputs, same buffers
    sa.copy_(sa2)
    g.replay()
    torch.cuda.synchronize()
    assert fp8_difference(out, reference.fp8_gemm(a, sa, b, sb)) < FP8_TOL


def test_tensor_maps_are_encoded_again_only_when_a_pointer_changes():
    """Either launch path (Python's, or the compiled one once it serves the plan)."""
    torch = pytest.importorskip("torch")
    fn = _mod("fp8_gemm").fp8_gemm
    a, sa = fp8.quantize_1x128(torch.randn(256, 512, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(512, 512, device="cuda"))
    out = torch.empty(256, 512, device="cuda", dtype=torch.bfloat16)
    fn(a, sa, b, sb, out=out)
    encoded = []
    for m in next(iter(fn._plans.values())).maps:  # count the driver's encodes
        enc = m.encode
        m.encode = lambda *args, enc=enc: encoded.append(args[3]) or enc(*args)
    fn(a, sa, b, sb, out=out)
    assert encoded == []
    out2 = torch.empty_like(out)
    fn(a, sa, b, sb, out=out2)
    assert encoded == [out2.data_ptr()]
    torch.cuda.synchronize()
    assert fp8_difference(out2, reference.fp8_gemm(a, sa, b, sb)) < FP8_TOL


def test_operand_sets_in_turn_reuse_their_tensor_maps_and_stay_right(monkeypatch):
    """A model's layers: one plan, other tensors each call. Each map's parameter is pointed at
    the encoding kept for its pointer; only a pointer never seen before is encoded."""
    torch = pytest.importorskip("torch")
    fn = _mod("fp8_gemm").fp8_gemm
    sets = []
    for _ in range(3):
        a, sa = fp8.quantize_1x128(torch.randn(256, 512, device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn(384, 512, device="cuda"))
        sets.append((a, sa, b, sb, torch.empty(256, 384, device="cuda", dtype=torch.bfloat16)))
    encodes = []
    for turn in range(2):
        for a, sa, b, sb, out in sets:
            out.fill_(float("nan"))
            fn(a, sa, b, sb, out=out)
            torch.cuda.synchronize()
            assert fp8_difference(out, reference.fp8_gemm(a, sa, b, sb)) < FP8_TOL, turn
        if turn == 0:  # every pointer now has its encoding: count the encoder's calls from here
            for m in next(iter(fn._plans.values())).maps:
                enc = m.encode
                m.encode = lambda *args, enc=enc: encodes.append(args[3]) or enc(*args)
    assert encodes == []


def test_bad_fp8_arguments():
    torch = pytest.importorskip("torch")
    mod = _mod("fp8_gemm")
    a, sa = fp8.quantize_1x128(torch.randn(64, 256, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(128, 256, device="cuda"))
    out = torch.empty(64 * 128 + 8, device="cuda", dtype=torch.bfloat16)
    cases = [
        (lambda: mod.fp8_gemm(a[:, :200].contiguous(), sa, b, sb), "multiple of 128"),
        (lambda: mod.fp8_gemm(a, sa.contiguous(), b, sb), "a_scale must have shape [64, 2] with strides [1, 64]"),
        (lambda: mod.fp8_gemm(a, sa, b, sb[:, :1]), "b_scale must have shape [1, 2]"),
        (lambda: mod.fp8_gemm(a.float(), sa, b, sb), "must be torch.float8_e4m3fn"),
        (lambda: mod.fp8_gemm(a, sa, b, sb, torch.zeros(3)), "extra arguments"),
        (lambda: mod.fp8_gemm(a, sa, b, sb, out=out[1:64 * 128 + 1].view(64, 128)), "'out' must be 16-byte aligned"),
        (lambda: mod.fp8_gemm.with_attrs(tile_n=176)(a, sa, b, sb), "tile_n = 176 is not supported"),
        (lambda: _mod("fp8_gemm_accumulate").fp8_gemm_accumulate(a, sa, b, sb), "declared 'accumulate'"),
    ]
    for fn, needle in cases:
        with pytest.raises((LaunchError, KdslError)) as e:
            fn()
        assert needle in str(e.value), (needle, str(e.value))


def test_a_scale_comes_by_tma_where_aligned_and_by_copies_elsewhere():
    """scale_load: A's scales by TMA where M % 4 == 0 and a_scale is 16-byte aligned; by the
    producer's copies where M % 4 != 0 (dense and masked) or where a_scale is only 4-byte
    aligned (the call then takes a second plan); refused where the kernel insists on TMA."""
    torch = pytest.importorskip("torch")
    fn = _mod("fp8_gemm").fp8_gemm
    M, N, K = 260, 384, 512
    a, sa = fp8.quantize_1x128(torch.randn(M, K, device="cuda"))
    b, sb = fp8.quantize_128x128(torch.randn(N, K, device="cuda"))
    ref = reference.fp8_gemm(a, sa, b, sb)
    assert fp8_difference(fn(a, sa, b, sb), ref) < FP8_TOL
    assert [p.sa_align for p in fn._plans.values()] == [16]
    buf = torch.randn(K // 128 * M + 1, device="cuda")
    shifted = buf[1:].view(K // 128, M).t()  # the layout quantize_1x128 returns, 4 bytes past 16
    shifted.copy_(sa)
    assert shifted.data_ptr() % 16 == 4
    assert fp8_difference(fn(a, shifted, b, sb), ref) < FP8_TOL
    (plan,) = fn._plans.values()  # the call's plan keeps the copying one for such calls
    copying = plan.scales_copied
    assert (plan.sa_align, copying.sa_align) == (16, 4)
    assert fp8_difference(fn(a, shifted, b, sb), ref) < FP8_TOL and plan.scales_copied is copying
    with pytest.raises(LaunchError, match="'a_scale' must be 16-byte aligned"):
        fn.with_attrs(scale_load="tma")(a, shifted, b, sb)
    a1, sa1 = fp8.quantize_1x128(torch.randn(257, K, device="cuda"))
    with pytest.raises(KdslError, match="scale_load = \"tma\" needs M to be a multiple of 4"):
        fn.with_attrs(scale_load="tma")(a1, sa1, b, sb)
    for cfg in ({}, {"tile_m": 128, "tile_n": 128, "cluster": 1}):  # masked groups of 258 rows
        _judge(_mod("fp8_grouped_masked").fp8_grouped_masked.with_attrs(**cfg), GemmCase(258, 256, 384, 3, seed=7))


def test_b_scale_comes_by_tma_where_aligned_and_by_copies_elsewhere():
    """b_scale_load "tma": B's scales by TMA where K % 512 == 0 and b_scale is 16-byte aligned;
    copied where b_scale is only 4-byte aligned (a second plan); refused where K % 512 != 0 or
    the kernel insists on TMA with a misaligned b_scale. Grouped b_scale too, N of one scale
    block (the box's second row outside the tensor), and tiles straddling two scale blocks."""
    torch = pytest.importorskip("torch")
    fn = _mod("fp8_gemm").fp8_gemm
    tma = {"b_scale_load": "tma"}
    for M, N, K, cfg in ((260, 384, 512, {"tile_m": 256, "cluster": 1}),  # the model's "tma"
                         (200, 96, 1024, {"tile_m": 128, "tile_n": 96, "cluster": 1, **tma}),
                         (256, 272, 512, {"tile_m": 64, "tile_n": 112, "cluster": 1, **tma})):
        f = fn.with_attrs(**cfg)
        a, sa = fp8.quantize_1x128(torch.randn(M, K, device="cuda"))
        b, sb = fp8.quantize_128x128(torch.randn(N, K, device="cuda"))
        ref = reference.fp8_gemm(a, sa, b, sb)
        assert fp8_difference(f(a, sa, b, sb), ref) < FP8_TOL
        (plan,) = f._plans.values()
        assert plan.sb_align == 16
        buf = torch.randn(sb.numel() + 1, device="cuda")
        shifted = buf[1:].view(sb.shape)
        shifted.copy_(sb)
        assert shifted.data_ptr() % 16 == 4
        if "b_scale_load" in cfg:  # the kernel insists on TMA
            with pytest.raises(LaunchError, match="'b_scale' must be 16-byte aligned"):
                f(a, sa, b, shifted)
        else:  # the model's choice: the call takes a plan with B's scales copied
            assert fp8_difference(f(a, sa, b, shifted), ref) < FP8_TOL
            assert plan.scales_copied.sb_align == 4
    a1, sa1 = fp8.quantize_1x128(torch.randn(128, 640, device="cuda"))
    b1, sb1 = fp8.quantize_128x128(torch.randn(256, 640, device="cuda"))
    with pytest.raises(KdslError, match="b_scale_load = \"tma\" needs K to be a multiple of 512"):
        fn.with_attrs(b_scale_load="tma")(a1, sa1, b1, sb1)
    assert fp8_difference(fn(a1, sa1, b1, sb1), reference.fp8_gemm(a1, sa1, b1, sb1)) < FP8_TOL
    for name in ("fp8_grouped_contiguous", "fp8_grouped_masked"):
        for cfg in (tma, {"tile_m": 128, "tile_n": 112, "cluster": 1, **tma}):
            _judge(getattr(_mod(name), name).with_attrs(**cfg), GemmCase(300, 400, 1024, 3, seed=11))


@pytest.mark.parametrize("cfg", [{"tile_m": 128, "tile_n": 96, "cluster": 1}, {"tile_m": 192, "tile_n": 128},
                                 {"tile_m": 64, "tile_n": 144, "cluster": 1}], ids=["128x96", "192x128", "64x144"])
def test_b_scale_read_by_the_math_warpgroups_on_any_tile(cfg):
    """b_scale_load "math" (the model's choice on clustered 256-row tiles only) on other tiles,
    straddling ones included, dense and grouped, K of 1 to 5 blocks."""
    for name in ("fp8_gemm", "fp8_grouped_contiguous", "fp8_grouped_masked"):
        fn = getattr(_mod(name), name).with_attrs(b_scale_load="math", **cfg)
        for i, k in enumerate((128, 640)):
            _judge(fn, GemmCase(130 + 70 * i, 300 - 44 * i, k, 1 if name == "fp8_gemm" else 3, seed=i))
