"""FP8 GEMM tiles per problem (kdsl/passes/gemm_tiles.py): legal for the kernel, filling the
SM count, visible in the lowered IR, overridable through attrs with located refusals."""
import math
import random

import pytest

import kdsl
from kdsl import ir
from kdsl.errors import KdslError
from kdsl.passes import gemm_tiles, pipeline
from kdsl.passes.gemm_tiles import BLOCK_N, Problem, choose, smem_bytes, tiles_of
from kdsl.passes.target import get_target

from conftest import ROOT

SMEM = get_target("sm_90a").smem_per_block
SUITE = [(m, n, k) for m in (4096, 128) for n, k in
         [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]]


def _legal(p: Problem, c: dict, sms: int):
    bm, bn = c["tile_m"], c["tile_n"]
    num_m, num_n, _ = tiles_of(p, bm, bn)
    assert bm in (64, 128, 192, 256) and bn in BLOCK_N and bn % 16 == 0
    assert bn - math.gcd(bn, 128) <= 128, "a tile straddles at most two scale blocks of B"
    assert bn // 2 * (2 if bm == 256 else 1) + bn // 2 <= (128 if bm == 192 else 192), \
        "totals + accumulator fit the math registers"
    assert smem_bytes(bm, bn, c["stages"], p.out_bytes, c["store"] == "tma") <= SMEM
    assert 3 <= c["stages"] <= gemm_tiles.MAX_STAGES
    assert c["store"] == ("tma" if p.N * p.out_bytes % 16 == 0 else "rows")
    if c["cluster"] == 2:
        assert sms % 2 == 0 and c["raster"] % 2 == 0
        assert (num_n if c["multicast"] == "a" else num_m) % 2 == 0, "every CTA pair shares its multicast tile"
        assert c["multicast"] == "a" or p.grouping == "dense"
    else:
        assert c["multicast"] == "none"
    if p.grouping == "masked":
        assert bm in (64, 128, 256)


def _efficiency(p: Problem, c: dict, sms: int) -> float:
    """Busy share of the SMs: whole waves, or under stream-K an even share of every tile's K
    blocks (the last waves' tiles split across the CTAs)."""
    _, _, blocks = tiles_of(p, c["tile_m"], c["tile_n"])
    if c.get("stream_k"):
        assert gemm_tiles.stream_k_fits(p, c["tile_m"], c["tile_n"], c["cluster"], sms)
        return 1.0
    return blocks / (-(-blocks // sms) * sms)


@pytest.mark.parametrize("sms", [132, 114, 78])
def test_standard_shapes_get_legal_tiles_whose_waves_fill_the_sms(sms):
    """The old fixed 128x128 tile left 115 of 132 SMs idle at M=128 N=2112 (17 tiles). Not
    every shape divides well on every SM count (M=128 N=2112 on 114 SMs: 0.77 at best), and
    where reading B binds a few idle SMs cost nothing: at M=128 N=7168 K=16384, 64x128 tiles on
    112 SMs ran 57.3 us against 64x112's 57.9 on all 132 (H100, in turns, s29-model-check.log)."""
    floor = 0.84 if sms == 132 else 0.55  # (on 114 SMs M=128 N=2112 takes 66 64x64 tiles in
    # one wave: 132 of 64x32, which ran 5 % faster on 132 SMs, would take two waves there)
    for m, n, k in SUITE:
        p = Problem(m, n, k, 1, "dense", 2)
        c = choose(p, sms, SMEM)
        _legal(p, c, sms)
        assert _efficiency(p, c, sms) >= floor, (m, n, k, c)
    for p in (Problem(32768, 4096, 7168, 4, "contiguous", 2), Problem(256, 4096, 7168, 4, "masked", 2)):
        c = choose(p, sms, SMEM)
        _legal(p, c, sms)
        assert _efficiency(p, c, sms) >= floor, (p, c)


def test_small_m_decode_shapes_get_their_own_tiles():
    big = choose(Problem(4096, 2112, 7168, 1, "dense", 2), 132, SMEM)
    small = choose(Problem(128, 2112, 7168, 1, "dense", 2), 132, SMEM)
    assert small["tile_m"] == 64 and small["tile_m"] * small["tile_n"] < big["tile_m"] * big["tile_n"]
    assert tiles_of(Problem(128, 2112, 7168, 1, "dense", 2), small["tile_m"], small["tile_n"])[2] > 100


def test_tensor_core_waves_decide_between_tiles_of_equal_traffic():
    """Measured on the H100 (2026-11-24, in turns): 4096x2112x7168 ran 9 % faster as 256x64
    (528 tiles, 4 full waves) than as the traffic model's 256x96 (2.67 waves); 256x128 stays
    the tile of 4096x4096x7168. Whole waves only: stream-K (below) changes what pays."""
    pick = lambda m, n, k, **fixed: (lambda c: (c["tile_m"], c["tile_n"]))(
        choose(Problem(m, n, k, 1, "dense", 2), 132, SMEM, {"stream_k": False, **fixed}))
    assert pick(4096, 2112, 7168, tile_m=256) == (256, 64)
    assert pick(4096, 4096, 7168) == (256, 128)


def test_192_row_tiles_where_they_ran_faster():
    """H100, 2026-11-27 (fp8_forms.py, in turns with _scaled_mm): 192x128 ran 1.055 against
    256x128's 0.959 at 4096x2112x7168 (3 waves against 2.06), 0.969 against 128x128's 0.950 at
    4096x1536x7168 (2 whole waves against 2.9) and 1165 against 1117 TFLOPS on contiguous
    4 x 8192 rows. With A's scales by TMA (the same day, h100-2026-11-27-s23-tile-model-check.log)
    192x128 also led unclustered 256x128 at 4096x7168x16384 (805.8 against 834.0 us; clustered, 256x128
    ties it: see the cluster test below) and 2048x7168x16384 (381.9 against 415.2 us clustered,
    2026-11-28, s29-big-192-256.log), while 256x128 stayed ahead at 4096x4096x7168 and 4096^3
    (4 waves of 256 rows against 6 of 192); at M = 128 or on masked groups 192 rows ran at
    0.66-0.84 of the model's tile. (At 8192x4096x16384 and 8192x5120x7168 192x128 led 256x128
    unclustered only; with A multicast 256x128 ran 4.0 % and 2.3 % faster, s29-big-192-256.log.)"""
    tile_m = lambda p: choose(p, 132, SMEM)["tile_m"]
    for m, n, k in ((4096, 2112, 7168), (4096, 1536, 7168), (2048, 7168, 16384)):
        assert tile_m(Problem(m, n, k, 1, "dense", 2)) == 192, (m, n, k)
    assert tile_m(Problem(32768, 4096, 7168, 4, "contiguous", 2)) == 192
    for m, n, k in ((4096, 4096, 7168), (4096, 4096, 4096)):
        assert tile_m(Problem(m, n, k, 1, "dense", 2)) == 256, (m, n, k)
    for m, n, k in SUITE:
        if m == 128:
            assert tile_m(Problem(m, n, k, 1, "dense", 2)) <= 128, (m, n, k)
    masked = Problem(256, 4096, 7168, 4, "masked", 2)
    assert tile_m(masked) == 256  # 1.03-1.05x of 128x128 at 135-256 rows a group (same run)
    c = choose(masked, 132, SMEM, {"tile_m": 192})  # still built when asked for
    assert c["tile_m"] == 192 and c["tile_n"] <= 128
    assert gemm_tiles.threads(192) == 512


def test_dense_256_row_tiles_pair_on_a_from_k_2048():
    """H100, 2026-11-27 (h100-2026-11-27-s23-cluster-model-check.log and -clusters-256-forms.log):
    256x128 with A multicast in 2-CTA clusters ran 1.3-5.5 % faster than unclustered from K = 2048
    up, lost 6-11 % at K = 512 on two of four shapes, and lost on masked and contiguous groups."""
    pick = lambda *s: choose(Problem(*s, 2), 132, SMEM)
    for m, n, k in ((4096, 4096, 7168), (4096, 7168, 7168), (4096, 7168, 2048), (4096, 4096, 4096),
                    (8192, 5120, 7168)):  # (the last: 458.5 us against 192x128's 469.3, s29-big-192-256.log)
        c = pick(m, n, k, 1, "dense")
        assert (c["tile_m"], c["tile_n"], c["cluster"], c["multicast"]) == (256, 128, 2, "a"), (m, n, k, c)
        assert c["raster"] % 2 == 0
    for m, n, k in ((6144, 4096, 512), (8192, 1536, 512)):
        assert pick(m, n, k, 1, "dense")["cluster"] == 1, (m, n, k)
    assert pick(256, 4096, 7168, 4, "masked")["cluster"] == 1
    assert pick(32768, 4096, 7168, 4, "contiguous")["cluster"] == 1
    assert pick(4096, 2112, 7168, 1, "dense")["cluster"] == 1  # 17 N tiles: no pairs (and 192 rows)


def test_no_straddling_tile_where_one_measured_slower():
    """H100, 2026-11-27 (h100-2026-11-27-s27-straddle-refit.log), with straddling tiles promoted
    through the boundary switch: 128x112 and 192x112 lost 7-24 % to the picks on these shapes,
    so the measured per-tile costs (BLOCK_PERIOD) must not move them onto a tile whose width does not
    divide 128."""
    for m, n, k in ((512, 7168, 16384), (256, 16384, 4096), (1024, 7168, 7168), (2048, 7168, 7168)):
        c = choose(Problem(m, n, k, 1, "dense", 2), 132, SMEM)
        assert 128 % c["tile_n"] == 0 or c["tile_n"] % 128 == 0, (m, n, k, c)


def test_contiguous_groups_get_tall_tiles_only_when_few_and_long():
    """A contiguous tile is computed once per group among its rows: taller tiles pay only
    where groups are few and long (4 x 8192 rows: 1.4 % more passes at 256 rows), not for
    many short ones."""
    assert choose(Problem(32768, 4096, 7168, 4, "contiguous", 2), 132, SMEM)["tile_m"] > 128
    assert gemm_tiles.passes_of(Problem(32768, 4096, 7168, 4, "contiguous", 2), 256, 128) == 128 * 32 + 3 * 0.5 * 32
    # 128-row steps that are not edges of 192-row tiles: two of every three (128, 256 of each 384)
    assert gemm_tiles.passes_of(Problem(32768, 4096, 7168, 4, "contiguous", 2), 192, 128) == 171 * 32 + 3 * 2 / 3 * 32
    for m, g in ((4096, 64), (2048, 32)):
        assert choose(Problem(m, 4096, 7168, g, "contiguous", 2), 132, SMEM)["tile_m"] <= 128, (m, g)
    assert choose(Problem(8192, 4096, 7168, 8, "contiguous", 2), 132, SMEM)["tile_m"] < 256


def test_random_problems_get_legal_tiles():
    rng = random.Random(1234)
    for _ in range(150):
        grouping = rng.choice(["dense", "contiguous", "masked"])
        p = Problem(rng.choice([1, 2, 63, 64, 65, 127, 129, rng.randint(1, 20000)]),
                    rng.choice([1, 15, 16, 17, 127, 128, 129, rng.randint(1, 40000)]), 128 * rng.randint(1, 64),
                    1 if grouping == "dense" else rng.randint(1, 8), grouping, rng.choice([2, 4]),
                    rng.random() < 0.3)
        sms = rng.choice([132, 114, 78, 8])
        _legal(p, choose(p, sms, SMEM), sms)


def test_the_choice_follows_the_sm_count():
    p = Problem(4096, 2112, 7168, 1, "dense", 2)  # few waves: the SM count matters
    whole = {"stream_k": False}
    assert any(choose(p, 132, SMEM, whole) != choose(p, sms, SMEM, whole) for sms in (114, 78, 66))


def test_stream_k_only_when_asked_and_where_the_last_wave_is_partial():
    """The model takes stream-K only when an attr asks (it lost on all 18 shapes where the
    model had chosen it, s29-stream-k-check.log). Asked, it applies to dense GEMMs without a
    cluster, with more tiles than SMs and a partial last wave; the tiles it shares out leave
    the rest a whole number of waves and give every CTA at least one K block."""
    shared = 0
    for sms in (132, 114, 78):
        for m, n, k in SUITE + [(1792, 2560, 7168), (8192, 4096, 3072), (5120, 7168, 4096)]:
            p = Problem(m, n, k, 1, "dense", 2)
            assert not choose(p, sms, SMEM)["stream_k"], (m, n, k, sms)
            try:
                c = choose(p, sms, SMEM, {"stream_k": True})
            except KdslError as e:
                assert "stream_k needs a dense GEMM" in str(e)
                continue
            blocks = tiles_of(p, c["tile_m"], c["tile_n"])[2]
            sk = gemm_tiles.sk_tiles(blocks, sms)
            assert c["stream_k"] and c["cluster"] == 1 and blocks > sms and blocks % sms
            assert sk >= sms and (blocks - sk) % sms == 0, (m, n, k, c)
            shared += 1
    assert shared > 0
    for p in (Problem(32768, 4096, 7168, 4, "contiguous", 2), Problem(256, 4096, 7168, 4, "masked", 2),
              Problem(4096, 4224, 7168, 1, "dense", 2)):  # 4224 / 128 = 33 N tiles: 16 x 33 = 528 = 4 waves
        assert not choose(p, 132, SMEM)["stream_k"], p
    with pytest.raises(KdslError, match="stream_k needs a dense GEMM"):
        choose(Problem(256, 4096, 7168, 4, "masked", 2), 132, SMEM, {"stream_k": True})


def test_fixed_attrs_are_kept_and_the_rest_is_chosen_around_them():
    p = Problem(4096, 7168, 16384, 1, "dense", 2)
    c = choose(p, 132, SMEM, {"tile_n": 112, "cluster": 1})
    assert c["tile_n"] == 112 and c["cluster"] == 1 and c["multicast"] == "none"
    _legal(p, c, 132)
    c = choose(p, 132, SMEM, {"tile_m": 128, "tile_n": 128, "stages": 2, "cluster": 2, "multicast": "b"})
    assert (c["tile_m"], c["tile_n"], c["stages"], c["multicast"]) == (128, 128, 2, "b")


@pytest.mark.parametrize("fixed,needle", [
    ({"tile_n": 176}, "tile_n = 176 is not supported; choose one of 16, 32"),
    ({"tile_m": 96}, "tile_m = 96 is not supported"),
    ({"stages": 0}, "stages must be a positive integer"),
    ({"multicast": "c"}, "multicast = 'c' is not supported"),
    ({"tile_m": 128, "tile_n": 128, "stages": 12}, "with 12 stages needs more than"),
    ({"tile_m": 256, "tile_n": 192}, "more accumulator registers"),
    ({"tile_m": 192, "tile_n": 144}, "more accumulator registers"),  # three warpgroups: 160 registers
    ({"cluster": 2, "multicast": "a", "tile_n": 128}, "needs an even number of them (here 3)"),
    ({"store": "tma"}, "multiple of 16 bytes (N = 300)"),
])
def test_impossible_attrs_are_refused_with_the_reason(fixed, needle):
    p = Problem(4096, 300, 1024, 1, "dense", 2)
    with pytest.raises(KdslError) as e:
        choose(p, 132, SMEM, fixed)
    assert needle in str(e.value), str(e.value)


def test_a_scale_comes_by_tma_only_where_its_rows_are_16_byte_units():
    for m, want in ((4096, "tma"), (4, "tma"), (129, "copy"), (258, "copy")):
        for grouping, g in (("dense", 1), ("masked", 3)):
            assert choose(Problem(m, 512, 1024, g, grouping, 2), 132, SMEM)["scale_load"] == want
    assert choose(Problem(4096, 512, 1024, 1, "dense", 2), 132, SMEM, {"scale_load": "copy"})["scale_load"] == "copy"
    with pytest.raises(KdslError, match="needs M to be a multiple of 4 .* M = 129"):
        choose(Problem(129, 512, 1024, 1, "dense", 2), 132, SMEM, {"scale_load": "tma"})
    with pytest.raises(KdslError, match="scale_load = 'dma' is not supported"):
        choose(Problem(128, 512, 1024, 1, "dense", 2), 132, SMEM, {"scale_load": "dma"})


def test_b_scale_load_follows_the_tile_unless_fixed():
    """'math' on clustered 256-row tiles (not masked), 'tma' on unclustered 256-row ones where
    b_scale's rows are 16-byte units (K % 512 == 0), 'copy' elsewhere; the 128-byte slot a stage
    that a TMA box lands in counts in the tiling's shared memory."""
    c2a = {"tile_m": 256, "tile_n": 128, "cluster": 2, "multicast": "a"}
    cases = [("dense", 1, 7168, c2a, "math"), ("contiguous", 4, 1280, c2a, "math"), ("masked", 3, 7168, c2a, "copy"),
             ("dense", 1, 512, {"tile_m": 256, "cluster": 1}, "tma"), ("masked", 3, 1536, {"tile_m": 256, "cluster": 1}, "tma"),
             ("dense", 1, 1280, {"tile_m": 256, "cluster": 1}, "copy"), ("dense", 1, 7168, {"tile_m": 192}, "copy"),
             ("contiguous", 4, 7168, {"tile_m": 128, "tile_n": 128, "cluster": 1}, "copy"),
             ("dense", 1, 7168, {"tile_m": 64}, "copy")]
    # 64x32 tiles of a call with at most half as many tiles as SMs: "math"; more tiles, or grouped: "copy"
    assert choose(Problem(64, 1024, 4096, 1, "dense", 2), 132, SMEM, {"tile_m": 64, "tile_n": 32})["b_scale_load"] == "math"
    assert choose(Problem(64, 4096, 4096, 1, "dense", 2), 132, SMEM, {"tile_m": 64, "tile_n": 32})["b_scale_load"] == "copy"
    assert choose(Problem(64, 1024, 4096, 2, "masked", 2), 132, SMEM, {"tile_m": 64, "tile_n": 32})["b_scale_load"] == "copy"
    for grouping, g, k, fixed, want in cases:
        p = Problem(4096, 1024, k, g, grouping, 2)
        cfg = choose(p, 132, SMEM, fixed)
        assert cfg["b_scale_load"] == want, (grouping, k, fixed)
        assert smem_bytes(cfg["tile_m"], cfg["tile_n"], cfg["stages"], 2, True, want == "tma") <= SMEM
    assert smem_bytes(128, 128, 4, 2, True, True) - smem_bytes(128, 128, 4, 2, True, False) == 4 * 112
    for load in ("copy", "tma", "math"):
        assert choose(Problem(4096, 512, 1024, 1, "dense", 2), 132, SMEM, {"b_scale_load": load})["b_scale_load"] == load
    with pytest.raises(KdslError, match="needs K to be a multiple of 512 .* K = 1280"):
        choose(Problem(256, 512, 1280, 1, "dense", 2), 132, SMEM, {"b_scale_load": "tma"})
    with pytest.raises(KdslError, match="b_scale_load = 'dma' is not supported"):
        choose(Problem(256, 512, 1024, 1, "dense", 2), 132, SMEM, {"b_scale_load": "dma"})


def test_the_scale_paths_time_factor_is_for_dense_gemms_only():
    """B_SCALE_GAIN was fitted on dense shapes; masked picks it moved ran up to 6.5 % slower."""
    from kdsl.passes.gemm_tiles import B_SCALE_GAIN, cycles
    for grouping, g, want in (("dense", 1, B_SCALE_GAIN["tma"]), ("masked", 8, 1.0), ("contiguous", 4, 1.0)):
        p = Problem(4096, 7168, 4096, g, grouping, 2)
        ratio = cycles(p, 256, 128, "none", 132, b_scale_load="tma") / cycles(p, 256, 128, "none", 132)
        assert ratio == pytest.approx(want), grouping


def test_the_scale_paths_time_factor_only_where_the_rule_takes_that_load():
    """A b_scale_load fixed by an attr is credited only on the tiles where it was measured to
    gain ("tma" on unclustered 256-row tiles; "math" on the clustered ones): "tma" ran x0.98 on
    192x128, so there it must not tip the pick."""
    from kdsl.passes.gemm_tiles import B_SCALE_GAIN, cycles
    p = Problem(4096, 7168, 4096, 1, "dense", 2)
    for bm, multicast, load, want in ((256, "none", "tma", B_SCALE_GAIN["tma"]), (192, "none", "tma", 1.0),
                                      (128, "none", "math", 1.0), (256, "a", "math", B_SCALE_GAIN["math"]),
                                      (256, "a", "tma", 1.0)):
        ratio = cycles(p, bm, 128, multicast, 132, b_scale_load=load) / cycles(p, bm, 128, multicast, 132)
        assert ratio == pytest.approx(want), (bm, multicast, load)


def test_lowered_ir_shows_the_choice_and_round_trips():
    k = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").ir["fp8_gemm"]
    for shape, sms in (([128, 2112, 7168, 1], 132), ([4096, 7168, 16384, 1], 114), (None, None)):
        kk = k.with_attrs(shape=shape, sms=sms) if shape else k
        low = pipeline.lower(kk, get_target("sm_90a"))
        want = choose(Problem(*(shape or gemm_tiles.DEFAULT_SHAPES["dense"]), "dense", 2), sms or 132, SMEM)
        assert {a: low.attr(a) for a in gemm_tiles.CONFIG_ATTRS} == want
        text = ir.print_ir(low)
        assert f"attr tile_n = {want['tile_n']}" in text and "attr stages" in text and "attr cluster" in text
        assert ir.parse_ir(text)[0] == low
        again = pipeline.lower(ir.parse_ir(text)[0], get_target("sm_90a"))  # lowering a lowered kernel changes nothing
        assert {a: again.attr(a) for a in gemm_tiles.CONFIG_ATTRS} == want


def test_a_bad_shape_attr_is_a_clear_error():
    k = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").ir["fp8_gemm"]
    for shape, needle in (([128, 128, 100, 1], "K must be a multiple of 128"), ([1, 2], "[M, N, K, G]")):
        with pytest.raises(KdslError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            pipeline.lower(k.with_attrs(shape=shape), get_target("sm_90a"))


def test_interpreter_walks_the_tiles_of_the_call_shape(monkeypatch):
    """The CPU interpreter lowers with the call's shape, as the runtime does."""
    import numpy as np
    from kdsl import fp8, interp
    seen = []
    real = interp._gemm_tiles
    monkeypatch.setattr(interp, "_gemm_tiles", lambda *a, **kw: seen.append(a[4:6]) or real(*a, **kw))
    k = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").ir["fp8_gemm"]
    rng = np.random.default_rng(0)
    a, sa = fp8.quantize_1x128(rng.standard_normal((128, 256), dtype=np.float32))
    b, sb = fp8.quantize_128x128(rng.standard_normal((300, 256), dtype=np.float32))
    interp.fp8_gemm(k, a, sa, b, sb)
    want = choose(Problem(128, 300, 256, 1, "dense", 2), get_target("sm_90a").sms, SMEM)
    assert seen == [(want["tile_m"], want["tile_n"])]


def test_stream_k_flags_cover_every_math_warpgroup():
    """Stream-K's flags are one per math warpgroup of each of up to 1024 CTAs
    (fp8_gemm_epilogue.cuh sk_flag: cta * kMathWG + wg): sized for the most warpgroups any
    tile_m has (three at 192: a buffer sized for two would overrun)."""
    from kdsl.runtime import gemm_launch
    most = max(gemm_tiles.math_warpgroups(bm) for bm in gemm_tiles.BLOCK_M)
    assert most == 3 and gemm_launch._SK_FLAG_BYTES >= 4 * most * 1024


def test_measured_tile_costs_pick_the_wider_128_row_tiles_where_they_ran_faster():
    """The main loop's cost per tile comes from measured block periods and epilogues
    (gemm_tiles.BLOCK_PERIOD, TILE_OVERHEAD). The work-proportional model before them put
    192x128 on these shapes, where 128x160 ran 6-8 % faster (H100, in turns, 2026-11-28:
    s29-heldout-tiles.log, s29-model-check.log)."""
    for m, n, k in ((640, 4096, 11008), (2560, 5120, 13824), (1200, 4096, 4096)):
        c = choose(Problem(m, n, k, 1, "dense", 2), 132, SMEM)
        assert (c["tile_m"], c["tile_n"]) == (128, 160), (m, n, k, c)
    # and narrow tiles cost what they were measured to: a 128x64 K block is 0.78 of a 128x128
    # one, not half
    assert gemm_tiles.BLOCK_PERIOD[128][64] / gemm_tiles.BLOCK_PERIOD[128][128] > 0.75
    assert set(gemm_tiles.BLOCK_PERIOD) == set(gemm_tiles.TILE_OVERHEAD) == set(gemm_tiles.BLOCK_M)


def test_masked_tiles_follow_the_expected_rows():
    """expected_rows (DeepGEMM's expected_m) costs a masked call at groups of about that many rows,
    not at M, the most a group may hold: the picks the H200 timed fastest or within 1 % in
    DeepGEMM's layout (M = 4096, counts 0.7-1.3 x E; bench/NOTES.md, thirty-sixth session)."""
    def pick(n, k, g, expected):
        c = choose(Problem(4096, n, k, g, "masked", 2, expected_rows=expected), 132, SMEM)
        return c["tile_m"], c["tile_n"]
    assert pick(4096, 4096, 32, None)[0] == 256  # M's 4096 rows a group: the tallest tile
    assert pick(4096, 4096, 32, 20) == (64, 128)  # 1.35x the pick at M
    assert pick(4096, 4096, 32, 192)[0] == 256  # every count in [134, 249] fills one 256-row tile
    assert pick(7168, 2048, 1, 1024) == (128, 128)  # 1.31x 256x128, which rounding E up would take
    assert pick(7168, 2048, 24, 96) == (128, 192)  # 1.54x the pick at M
    # MASKED_TILE_FACTOR: 128x128 ran 8 % ahead of 128x192 at these two (held out of its fit)
    assert pick(4096, 7168, 4, 768) == (128, 128) and pick(7168, 2048, 3, 1500) == (128, 128)


def test_expected_rows_spread_counts_tiles_and_waves():
    """A masked group's tiles over counts spread around expected_rows: none where the spread
    stays inside one tile count; the expected waves lie between the ceilings of the spread's ends."""
    p = Problem(4096, 4096, 4096, 32, "masked", 2, expected_rows=192)
    assert gemm_tiles.masked_spread(p, 256) == (1.0, 0.0) and gemm_tiles.masked_spread(p, 128) == (2.0, 0.0)
    assert tiles_of(p, 256, 128) == (1.0, 32, 1024.0)
    assert gemm_tiles.wave_count(p, 256, 128, 132, 1024.0) == pytest.approx(math.ceil(1024 / 132))
    one = Problem(4096, 7168, 2048, 1, "masked", 2, expected_rows=1024)
    mean, var = gemm_tiles.masked_spread(one, 256)  # counts 716-1332: 3 to 6 tiles
    assert 4.3 < mean < 4.7 and var > 0.5
    w = gemm_tiles.wave_count(one, 256, 128, 132, mean * 56)
    assert math.ceil(3 * 56 / 132) < w < math.ceil(6 * 56 / 132)
    assert Problem(100, 256, 256, 2, "masked", 2, expected_rows=500).rows == 100  # at most M


def test_expected_rows_is_refused_where_it_means_nothing():
    masked = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd").ir["fp8_grouped_masked"]
    dense = kdsl.load(ROOT / "samples" / "fp8_gemm.kd").ir["fp8_gemm"]
    for k, value, needle in ((dense, 64, "masked groupings only"), (masked, 0, "positive integer"),
                             (masked, "64", "positive integer")):
        with pytest.raises(KdslError, match=needle):
            pipeline.lower(k.with_attrs(expected_rows=value), get_target("sm_90a"))
    call = kdsl.load(ROOT / "samples" / "fp8_grouped_masked.kd").fp8_grouped_masked
    call._hinted(1)
    for value in ([64], True, 2.5):  # a call's expected_rows= (an unhashable one was a TypeError; True, 1's kernel)
        with pytest.raises(KdslError, match="positive integer"):
            call._hinted(value)
    import numpy as np  # a numpy integer is an integer: one kernel for it and for the int
    assert call._hinted(np.int64(48)) is call._hinted(48) and call._hinted(48).ir.attr("expected_rows") == 48
    lowered = pipeline.lower(masked.with_attrs(shape=[4096, 4096, 4096, 32], expected_rows=20), get_target("sm_90a"))
    assert lowered.attr("tile_m") == 64 and lowered.attr("expected_rows") == 20


def test_multicast_asked_alone_gets_its_cluster_and_contradictions_are_refused():
    """multicast = "a" / "b" needs a 2-CTA cluster: asked alone it gets one (it was refused,
    with an empty reason, unless cluster = 2 was written too); with cluster = 1, or cluster = 2
    with multicast = "none", the refusal says which attrs disagree (GPU config fuzz, s37)."""
    p = Problem(512, 4096, 7168, 1, "dense", 2)
    for m in ("a", "b"):
        c = choose(p, 132, SMEM, {"multicast": m})
        assert (c["cluster"], c["multicast"]) == (2, m)
        with pytest.raises(KdslError, match=f"multicast = '{m}' shares an operand .* needs cluster = 2"):
            choose(p, 132, SMEM, {"multicast": m, "cluster": 1})
    assert choose(Problem(4096, 4096, 7168, 4, "contiguous", 2), 132, SMEM, {"multicast": "a"})["cluster"] == 2
    with pytest.raises(KdslError, match="cluster = 2 pairs CTAs to multicast an operand"):
        choose(p, 132, SMEM, {"cluster": 2, "multicast": "none"})


def test_every_refusal_says_why():
    """Random attrs on random problems: each is chosen around, or refused with a reason after
    the call it names (the message never ends at "...G=1: ")."""
    from kdsl.tune.protocol import offered
    rng = random.Random(3707)
    gemm = kdsl.load(ROOT / "samples" / "fp8_gemm.kd", interpret=True).ir["fp8_gemm"]
    values = {**offered(gemm, get_target("sm_90a"))[1], "raster": range(1, 17)}  # (tune describes raster)
    values["stages"] = (1, *values["stages"], 9)
    refused = 0
    for _ in range(3000):
        grouping = rng.choice(("dense", "contiguous", "masked"))
        p = Problem(rng.randint(1, 5000), rng.randint(1, 5000), 128 * rng.randint(1, 60),
                    1 if grouping == "dense" else rng.randint(1, 8), grouping, rng.choice((2, 4)))
        fixed = {a: rng.choice(list(v)) for a, v in values.items() if rng.random() < 0.25}
        try:
            choose(p, 132, SMEM, fixed)
        except KdslError as e:
            refused += 1
            assert str(e).rsplit(": ", 1)[-1].strip(), (p, fixed, str(e))
    assert refused > 300
