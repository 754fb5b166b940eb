import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from kdsl import ir
from kdsl.grammar import parse
from kdsl.passes import exp2_fold, mask_analysis, pipeline
from kdsl.passes.target import get_target
from kdsl.semantics import eval_scalar

from conftest import ROOT, SAMPLES
from exprgen import bool_expr, float_expr, program


def kernels_of(text, file="t.kd"):
    return pipeline.check(parse(text, file))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_ir_round_trip_samples(path):
    for k in kernels_of(path.read_text(), str(path)):
        for d in pipeline.head_dims(k):
            lowered = pipeline.lower(k, get_target("sm_90a"), d)
            for stage in (k, lowered):
                text = ir.print_ir(stage)
                assert ir.parse_ir(text) == [stage]
                assert ir.print_ir(ir.parse_ir(text)[0]) == text


@settings(max_examples=60, deadline=None)
@given(float_expr(depth=3), st.one_of(st.none(), bool_expr(depth=2)))
def test_ir_round_trip_generated(score, mask):
    k = pipeline.lower(kernels_of(program(score, mask))[0], get_target("sm_90a"), 128)
    assert ir.parse_ir(ir.print_ir(k)) == [k]


def _env(rng, dims):
    return {"b": rng.randrange(dims["B"]), "h": rng.randrange(dims["H"]), "q": rng.randrange(dims["M"]),
            "kv": rng.randrange(dims["N"]), **dims}


@settings(max_examples=80, deadline=None)
@given(float_expr(depth=3), st.integers(0, 2**32 - 1))
def test_exp2_fold_preserves_value(score, seed):
    """score_log2(qk) == score(qk * scale) * log2(e), on random points."""
    k = exp2_fold.run(kernels_of(program(score, None))[0])
    rng = random.Random(seed)
    dims = {"B": 2, "H": 4, "Hkv": 2, "M": 300, "N": 257, "D": 128}
    for _ in range(20):
        env = _env(rng, dims)
        qk, scale = rng.uniform(-40, 40), rng.uniform(0.01, 0.2)
        want = eval_scalar(k.func("score"), {**env, "s": qk * scale}) * exp2_fold.LOG2E
        got = eval_scalar(k.func("score_log2"), {**env, "qk": qk, "scale": scale,
                                                 "scale_log2": scale * exp2_fold.LOG2E})
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9), (score, got, want)


def test_exp2_fold_folds_the_scale_into_one_multiply():
    k = exp2_fold.run(kernels_of(program("s + float(i - j)", None))[0])
    assert ir.print_expr(k.func("score_log2")) == \
        "(add:f32 (mul:f32 qk scale_log2) (mul:f32 (float:f32 (sub:i32 q kv)) 1.4426950408889634))"


def _classify(k, env, q0, q1, k0, k1):
    tile = {**env, "q0": q0, "q1": q1, "k0": k0, "k1": k1}
    return eval_scalar(k.func("tile_empty"), tile), eval_scalar(k.func("tile_full"), tile)


def _check_tiles(k, dims, rng, trials=40):
    """Soundness: 'empty' tiles have no kept element, 'full' tiles no masked one."""
    mask = k.func("mask")
    for _ in range(trials):
        env = _env(rng, dims)
        q0, k0 = rng.randrange(dims["M"]), rng.randrange(dims["N"])
        q1, k1 = min(q0 + rng.choice([0, 1, 15, 63, 127]), dims["M"] - 1), min(k0 + rng.choice([0, 1, 63, 127]), dims["N"] - 1)
        empty, full = _classify(k, env, q0, q1, k0, k1)
        assert not (empty and full)
        if empty or full:
            for qi in range(q0, q1 + 1):
                for kj in range(k0, k1 + 1):
                    keep = eval_scalar(mask, {**env, "q": qi, "kv": kj})
                    assert keep == bool(full), (ir.print_expr(mask), q0, q1, k0, k1, qi, kj)


@settings(max_examples=60, deadline=None)
@given(bool_expr(depth=3), st.integers(0, 2**32 - 1))
def test_mask_analysis_is_sound_on_generated_masks(mask, seed):
    k = mask_analysis.run(kernels_of(program(None, mask))[0])
    _check_tiles(k, {"B": 2, "H": 3, "Hkv": 3, "M": 200, "N": 180, "D": 64}, random.Random(seed))


@pytest.mark.parametrize("name", ["causal", "sliding_window", "natten2d"])
def test_mask_analysis_samples_are_exact_on_the_tile_grid(name):
    """For these masks a 128x128 tile is classified empty exactly when no element is kept."""
    import torch
    from conftest import ROOT
    from kdsl.semantics import eval_torch
    k = mask_analysis.run(kernels_of((ROOT / "samples" / f"{name}.kd").read_text())[0])
    assert k.attr("mask_tiles") == "interval"
    n, t = 2048, 128
    dims = {"B": 1, "H": 1, "Hkv": 1, "M": n, "N": n, "D": 128}
    env = {"b": 0, "h": 0, **dims}
    keep = eval_torch(k.func("mask"), {**env, "q": torch.arange(n).view(n, 1), "kv": torch.arange(n).view(1, n)}, {})
    blocks = keep.view(n // t, t, n // t, t).permute(0, 2, 1, 3).reshape(n // t, n // t, t * t)
    empties = 0
    for i in range(n // t):
        for j in range(n // t):
            empty, full = _classify(k, env, i * t, i * t + t - 1, j * t, j * t + t - 1)
            assert empty == (not bool(blocks[i, j].any()))
            assert not full or bool(blocks[i, j].all())
            empties += empty
    assert empties > 0
    _check_tiles(k, dims, random.Random(0), trials=30)


def test_mask_reading_q_and_kv_data_together_keeps_causal_skipping():
    k = mask_analysis.run(kernels_of(
        "attention t {\n q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n bias: f32[M, N]\n"
        " mask(b, h, i, j) = bias[i, j] > 0.0 and j <= i\n}\n")[0])
    assert k.attr("mask_tiles") == "data-dependent"
    env = {"b": 0, "h": 0, "B": 1, "H": 1, "M": 512, "N": 512}
    assert _classify(k, env, 0, 127, 256, 383) == (True, False)   # above the diagonal: empty
    assert _classify(k, env, 256, 383, 0, 127) == (False, False)  # data unknown: partial


def test_tiling_and_warp_map_attrs():
    from conftest import ROOT
    k = kernels_of((ROOT / "samples" / "relpos.kd").read_text())[0]
    low = pipeline.lower(k, get_target("sm_80"), 128)
    assert low.attr("kernel") == "mma"
    assert low.attr("threads") == 32 * low.attr("warps")
    assert low.attr("warp_rows") * low.attr("warps") == low.attr("tile_m")
    assert low.attr("smem_bytes") <= get_target("sm_80").smem_per_block
    # Hopper: a producer warpgroup plus one consumer warpgroup per 64 query rows.
    for d in (64, 128):
        low = pipeline.lower(k, get_target("sm_90a"), d)
        assert low.attr("kernel") == "wgmma"
        assert low.attr("tile_m") == 64 * low.attr("consumers")
        assert low.attr("threads") == 128 * (low.attr("consumers") + 1)
        assert low.attr("smem_bytes") <= get_target("sm_90a").smem_per_block


@pytest.mark.parametrize("score", ["s + float(i - j)", "s - 0.5 * float(abs(i - j) + 3)", "s + float(j) * 0.01",
                                   "s + float(abs(j - i - 7))"])
def test_index_floats_turn_position_conversions_into_float_arithmetic(score):
    """float(i - j) and friends become dqkf (q - kv as a float) or qf - kvf: the same value
    for every position the runtime allows (q, kv < MAX_LENGTH), so exact, and no conversion
    left per element."""
    from kdsl.passes import index_floats
    from kdsl.semantics import eval_numpy
    import numpy as np
    k = index_floats.run(exp2_fold.run(kernels_of(program(score, None))[0]))
    e = k.func("score_log2")
    assert index_floats.uses_index_floats(k)
    assert not any(isinstance(n, ir.Op) and n.op == "float" for n in ir.walk(e))
    ref = exp2_fold.run(kernels_of(program(score, None))[0]).func("score_log2")
    big = index_floats.MAX_LENGTH - 1
    q = np.array([0, 1, 127, 128, big, big - 5, 3, big]).reshape(-1, 1)
    kv = np.array([0, 1, 2, 129, big, 0, big, 17]).reshape(1, -1)
    env = {"qk": np.float32(0.25), "scale": np.float32(0.125), "scale_log2": np.float32(0.18), "b": 0, "h": 0,
           "q": q, "kv": kv, "qf": q.astype(np.float32), "kvf": kv.astype(np.float32),
           "dqkf": (q - kv).astype(np.float32),
           "B": 1, "H": 1, "Hkv": 1, "M": big + 1, "N": big + 1, "D": 64}
    assert np.array_equal(eval_numpy(e, env, {}, np.float32), eval_numpy(ref, env, {}, np.float32))
    if "i - j" in score or "j - i" in score:  # the relative position is one variable
        assert ir.uses(e, "dqkf") and not ir.uses(e, "qf")


def test_index_floats_leave_large_constants_and_products_alone():
    from kdsl.passes import index_floats
    k = index_floats.run(exp2_fold.run(kernels_of(program("s + float((i - j) * 3) + float(i + 9000000)", None))[0]))
    assert not index_floats.uses_index_floats(k)


def test_kernels_with_index_floats_refuse_sequences_past_their_exact_range(monkeypatch):
    import numpy as np
    import kdsl
    from kdsl.errors import LaunchError
    from kdsl.passes import index_floats
    mod = kdsl.compile(program("s + float(i - j)", None), interpret=True)
    monkeypatch.setattr(index_floats, "MAX_LENGTH", 100)  # the real limit, 2^23, needs GBs of inputs
    q = np.random.default_rng(0).standard_normal((1, 1, 101, 64)).astype(np.float32)
    with pytest.raises(LaunchError, match="sequence length 101 exceeds 100"):
        mod.gen(q, q, q)
    mod.gen(q[:, :, :100], q[:, :, :100], q[:, :, :100])  # at the limit: runs


def test_only_the_bare_scaled_dot_product_takes_the_raw_max_path():
    """exp2_fold.score_is_scaled_dot: the Hopper kernel's raw-max softmax applies exactly when
    the log2-domain score is qk * scale_log2 (mask-only variants), not to any score with a
    term of its own."""
    import kdsl
    plain = kdsl.compile("attention p { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                         "mask(b, h, i, j) = j <= i }", "p.kd").ir["p"]
    biased = kdsl.compile("attention p { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                          "score(s, b, h, i, j) = s + 0.5 }", "p.kd").ir["p"]
    scaled = kdsl.compile("attention p { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                          "score(s, b, h, i, j) = s * 2.0 }", "p.kd").ir["p"]
    assert exp2_fold.score_is_scaled_dot(exp2_fold.run(plain))
    assert not exp2_fold.score_is_scaled_dot(exp2_fold.run(biased))
    assert not exp2_fold.score_is_scaled_dot(exp2_fold.run(scaled))


@pytest.mark.parametrize("score, factor", [("30.0 * tanh(s / 30.0)", 30.0 * exp2_fold.LOG2E),
                                           ("tanh(s / 50.0) * 50.0", 50.0 * exp2_fold.LOG2E),
                                           ("s + 0.5", None), ("-2.0 * tanh(s)", None), ("s", None),
                                           ("s * float(h + 1)", None)])
def test_a_positive_constant_factor_of_the_score_is_split_off(score, factor):
    """exp2_fold.positive_factor: score_log2 = C * x with C > 0 constant lets the Hopper kernel
    take the row max on x and fold C into the exponent's FFMA; a negative or varying factor,
    a sum, or the scaled dot product itself (its factor is the runtime scale) do not."""
    import kdsl
    k = kdsl.compile("attention p { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n"
                     f"score(s, b, h, i, j) = {score} }}", "p.kd").ir["p"]
    found = exp2_fold.positive_factor(exp2_fold.run(k))
    if factor is None:
        assert found is None
    else:
        x, c = found
        assert c == pytest.approx(factor, rel=1e-6) and ir.uses(x, "qk")


def test_default_hopper_tiles_follow_the_program():
    """Three consumer warpgroups (192 query rows) at head dims up to 64 unless the score or mask
    loads captured data per element; the wide 176-key tile at D=128 without a mask and with an index-only score;
    and at D=96; the table's tile for everything else, and for one warpgroup (decode, with at most
    two stages where they hold 64 KB of K and V); at D=256 a
    trial of 80 keys, with 64 behind it, except for masks with `//` or `%`."""
    from kdsl.passes import tiling
    h100 = get_target("sm_90a")
    mods = {n: pipeline.check(parse((ROOT / "samples" / f"{n}.kd").read_text(), n))
            for n in ("plain", "relpos", "softcap", "causal", "sliding_window", "document_mask", "alibi")}

    def tiles(name, d, **attrs):
        low = pipeline.lower(mods[name][0].with_attrs(**attrs), h100, d)
        return low.attr("tile_n"), low.attr("consumers"), low.attr("stages")
    assert tiles("plain", 64) == tiles("relpos", 64) == tiles("softcap", 64) == tiles("causal", 64) == (128, 3, 3)
    assert tiles("sliding_window", 64) == tiles("alibi", 64) == (128, 3, 3)  # slopes[h]: per head, not per element
    assert tiles("document_mask", 64) == (128, 2, 3)  # doc_q[b, i], doc_kv[b, j]: per element
    assert tiles("plain", 128) == tiles("relpos", 128) == tiling.WGMMA_WIDE_TILES[128] == (176, 2, 2)
    assert tiles("softcap", 128) == tiles("causal", 128) == tiling.WGMMA_ATTENTION_TILES[128]
    # one warpgroup (decode) keeps two 64 KB stages in flight (tiling.ONE_WARPGROUP_STAGE_BYTES)
    assert tiles("plain", 128, consumers=1) == (128, 1, 2)
    assert tiles("plain", 64, consumers=1) == (128, 1, 3)  # 32 KB stages: the table's 3
    assert tiles("plain", 128, consumers=1, stages=3) == (128, 1, 3)  # asked for: kept
    assert tiles("plain", 96)[1] == 2  # its accumulators do not fit three warpgroups' registers
    assert tiles("plain", 96) == tiles("relpos", 96) == tiling.WGMMA_WIDE_TILES[96] == (176, 2, 2)
    assert tiles("causal", 96) == tiles("softcap", 96) == (128, 2, 3)
    assert tiles("plain", 32)[1] == 3
    low = lambda name, d: pipeline.lower(mods[name][0], h100, d)
    assert (low("causal", 256).attr("tile_n"), low("causal", 256).attr("spill_fallback")) == (80, (64, 2, 2))
    natten = pipeline.check(parse((ROOT / "samples" / "natten2d.kd").read_text(), "natten2d"))[0]
    assert pipeline.lower(natten, h100, 256).attr("tile_n") == 64  # `//` and `%`: power-of-two tiles


def _window(mask, decls="q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]"):
    return pipeline.check(parse(f"attention w {{ {decls}\nmask(b, h, i, j) = {mask} }}", "w.kd"))[0]


@pytest.mark.parametrize("mask, visited", [
    ("j <= i and i - j < 256", 3), ("j <= i and i - j < 512", 5), ("j <= i and i - j < 1024", 9),
    ("abs(i - j) <= 255", 5), ("j <= i", 32.5), ("h % 2 == 1 or j <= i", 64), ("j <= i or j < 4", 32.5)])
def test_visited_tiles_counts_the_kv_tiles_of_a_row_tile(mask, visited):
    """mask_analysis.visited_tiles: the median kv tiles a 128-row tile visits at length 8192,
    over four heads; a window of W keys visits W / 128 + 1, causal half of the 64 on average."""
    k = mask_analysis.run(_window(mask))
    assert mask_analysis.visited_tiles(k) == visited


def test_visited_tiles_unknown_where_the_mask_reads_data_or_other_dims():
    data = mask_analysis.run(pipeline.check(parse(
        "attention w { q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]; n: i32[B]\n"
        "mask(b, h, i, j) = j < n[b] }", "w.kd"))[0])
    assert mask_analysis.visited_tiles(data) is None
    # the lengths under the user's own names; another dim (D) is not the length
    assert mask_analysis.visited_tiles(mask_analysis.run(_window(
        "j <= i and i - j < 512", "q: bf16[Bt, Hd, S, E]; k: bf16[Bt, Hd, T, E]; v: bf16[Bt, Hd, T, E]"))) == 5
    assert mask_analysis.visited_tiles(mask_analysis.run(_window("j <= i and i - j < D"))) is None


def test_visited_tiles_of_a_predicate_dividing_by_the_head_index_warns_nothing():
    """The heads counted include h = 0; a tile predicate (an IR file may give its own) that divides
    by h still counts, with no numpy warning reaching the user."""
    import warnings
    v = lambda name: ir.Var("i32", name)  # noqa: E731
    k = mask_analysis.run(_window("j <= i")).with_func(
        "tile_empty", ir.Op("bool", "gt", (ir.Op("i32", "floordiv", (v("k0"), v("h"))), v("q1"))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mask_analysis.visited_tiles(k) is not None


def test_narrow_windows_keep_128_query_rows():
    """tiling.NARROW_BAND_TILES: a window whose row tile visits at most 8 kv tiles keeps two
    consumer warpgroups at head dims up to 64 (192 rows span one more tile of the band); a window
    of 1024 keys (9 tiles, samples/sliding_window.kd) and causal keep three."""
    h100 = get_target("sm_90a")
    consumers = lambda mask, d=64: pipeline.lower(_window(mask), h100, d).attr("consumers")  # noqa: E731
    assert consumers("j <= i and i - j < 256") == consumers("j <= i and i - j < 1024 - 128") == 2
    assert consumers("abs(i - j) <= 255") == consumers("abs(i - j) <= 255", 32) == 2
    assert consumers("j <= i and i - j < 1024") == consumers("j <= i") == consumers("j <= i", 32) == 3
    assert consumers("j <= i and i - j < 2048") == 3


def test_row_loads_take_three_warpgroups_and_offset_tables_two():
    """tiling.KEY_DEPENDENT: a load at the query row alone (hoisted out of the key loop) leaves a
    kernel three consumer warpgroups at head dim 64, as does a transcendental function of the
    row or head alone under a mask; a load at the key keeps two; and so does an offset table, by
    default or asked for (H200: two ran x1.04-1.17 faster beside a table)."""
    h100 = get_target("sm_90a")

    def consumers(captures, score, mask="j <= i", d=64, **attrs):
        src = (f"attention t {{ q: bf16[B, H, M, D]; k: bf16[B, H, N, D]; v: bf16[B, H, N, D]\n {captures}\n"
               f" score(s, b, h, i, j) = {score}\n mask(b, h, i, j) = {mask} }}")
        k = pipeline.check(parse(src, "t"))[0]
        return pipeline.lower(k.with_attrs(**attrs), h100, d).attr("consumers")
    assert consumers("qs: f32[B, H, M]", "s * qs[b, h, i]") == 3
    assert consumers("lim: i32[B, M]", "s", "j <= lim[b, i]") == 3
    assert consumers("ks: f32[B, H, N]", "s * ks[b, h, j]") == 2
    assert consumers("qs: f32[B, M]; ks: f32[B, N]", "s * qs[b, i] + ks[b, j]") == 2
    steps = "s + where(abs(i - j) < 4, 2.0, where(abs(i - j) < 32, 1.0, 0.0))"  # 5 ops: the table
    assert consumers("", steps) == 2
    assert consumers("", steps, offset_table=0) == 3
    assert consumers("", "s + where(i - j > 8, 1.0, 0.0)", offset_table=1) == 2  # 2 ops: per element
    assert consumers("", "s + where(i - j > 8, 1.0, 0.0)") == 3
    # a transcendental under a mask keeps two where it is per element, not of the row or head alone
    assert consumers("g: f32[B, H, M]", "s * exp(g[b, h, i])") == 3
    assert consumers("rate: f32[H]", "s - exp(rate[h]) * float(i - j)") == 3
    assert consumers("", "20.0 * tanh(s / 20.0)") == 2


def test_lazy_rescale_by_default_with_three_consumer_warpgroups_only():
    """tiling.LAZY_RESCALE: on for the issue-bound 192-row tiles, off elsewhere (it cost plain
    D=128 5 %), and an override is kept or refused like any schedule attr."""
    from kdsl.errors import KdslError
    h100 = get_target("sm_90a")
    relpos = pipeline.check(parse((ROOT / "samples" / "relpos.kd").read_text(), "relpos"))[0]
    low = lambda d, **a: pipeline.lower(relpos.with_attrs(**a), h100, d)
    assert (low(64).attr("consumers"), low(64).attr("lazy_rescale")) == (3, 8)
    assert (low(128).attr("consumers"), low(128).attr("lazy_rescale")) == (2, 0)
    assert low(128, lazy_rescale=8).attr("lazy_rescale") == 8
    assert low(64, consumers=2).attr("lazy_rescale") == 0
    with pytest.raises(KdslError, match="lazy_rescale must be one of"):
        low(64, lazy_rescale=5)
